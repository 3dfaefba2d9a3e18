//! A run's result read back from the record, for the reports of a run that ran elsewhere (a
//! merged database: `report RUN_ID --junit FILE`, and a testsuite per run without a run id).
//!
//! What the executor hands the reports as it ends a run, rebuilt from the rows it wrote: each
//! step's status, error, attempts and time, its executions (model turns left out), and for a
//! failed step the last lines its last execution printed, cut as the run cut them
//! ([`crate::tools::command::excerpt`]).

use crate::executor::{ExecutionResult, StepResult, StepStatus};
use crate::store::{RunStatus, StepState, Store, StoreError};

/// Characters of each stream read back for a failed step's excerpt (it keeps fewer).
const TAIL_CHARS: usize = 2 * crate::tools::command::EXCERPT_BYTES;

/// Run `run_id` (an id or a unique prefix) as its executor would have returned it.
pub fn result(store: &Store, run_id: &str) -> Result<ExecutionResult, StoreError> {
    let run = store.run(run_id)?;
    let mut executions = store.step_executions(&run.run_id)?;
    let mut steps = Vec::new();
    let mut spend = store.step_spend(&run.run_id)?;
    for row in store.steps(&run.run_id)? {
        let status = match row.status {
            StepState::Completed => StepStatus::Completed,
            StepState::Failed => StepStatus::Failed,
            StepState::Blocked => StepStatus::Blocked,
            StepState::Cancelled | StepState::Running => StepStatus::Cancelled,
            StepState::Skipped | StepState::Pending => StepStatus::Skipped,
        };
        let failure_output = if status == StepStatus::Failed {
            let (stdout, stderr) = store.step_tails(&run.run_id, &row.step_id, TAIL_CHARS)?;
            crate::tools::command::excerpt(&stdout, &stderr)
        } else {
            None
        };
        let duration_ms = match (row.started_at, row.finished_at) {
            (Some(s), Some(f)) => f.saturating_sub(s).max(0) as u64,
            _ => 0,
        };
        steps.push(StepResult {
            error_kind: row
                .error_code
                .as_deref()
                .and_then(|c| serde_json::from_value(serde_json::Value::String(c.into())).ok()),
            error: row.error_message.clone(),
            attempts: u32::try_from(row.attempts).unwrap_or(0),
            duration_ms,
            output: None,
            output_truncated: false,
            failure_output,
            execution_ids: executions.remove(&row.step_id).unwrap_or_default(),
            spend: spend.remove(&row.step_id).map(|(tokens, calls, cost)| {
                crate::plan::budget::Spend {
                    tokens: tokens.max(0) as u64,
                    model_calls: calls.max(0) as u64,
                    cost_usd: cost.unwrap_or(0.0),
                }
            }),
            tolerated: status == StepStatus::Failed && run.status == RunStatus::Completed,
            step_id: row.step_id,
            tool: row.tool,
            status,
        });
    }
    let clamp = |v: i64| v.max(0) as u64;
    Ok(ExecutionResult {
        exit_code: run
            .exit_code
            .and_then(|c| i32::try_from(c).ok())
            .unwrap_or(crate::error::exit::INTERRUPTED),
        duration_ms: run
            .finished_at
            .map_or(0, |f| clamp(f.saturating_sub(run.started_at))),
        prompt_tokens: clamp(run.prompt_tokens),
        completion_tokens: clamp(run.completion_tokens),
        status: run.status,
        plan_id: run.plan_id,
        run_id: run.run_id,
        steps,
    })
}

/// What a run is called in a report of many: its repository (else its workspace) and the start
/// of its id.
pub fn run_name(repository: Option<&str>, workspace: &str, run_id: &str) -> String {
    let short: String = run_id.chars().take(8).collect();
    format!("{} ({short})", repository.unwrap_or(workspace))
}

/// Every plan run in `store` as JUnit, a testsuite each (the fleet's `--junit`).
pub fn fleet_junit(
    store: &Store,
    redactor: &crate::redact::Redactor,
) -> Result<String, StoreError> {
    let mut runs = Vec::new();
    for id in store.fleet_run_ids()? {
        let run = store.run(&id)?;
        let name = run_name(run.repository.as_deref(), &run.workspace, &run.run_id);
        runs.push((name, result(store, &id)?));
    }
    Ok(super::junit::render_suites(&runs, store, redactor))
}
