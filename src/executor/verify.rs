//! What every step driver shares: the options of a step's calls and its `verify` command. Apart from
//! the drivers so the agent driver and the direct driver use them without importing each other.

use std::time::Duration;

use serde_json::json;

use super::call::{CallOptions, StepContext, Together};
use super::{ExecutionError, ToolResult};
use crate::error::ErrorKind;
use crate::plan::Plan;
use crate::plan::variables::Variables;
use crate::tools::ToolCall;

/// Options shared by every call a step makes: timeout and retries from the step or plan defaults.
pub fn call_options(ctx: &StepContext, plan: &Plan) -> CallOptions {
    let step = ctx.step;
    CallOptions {
        force_confirmation: false,
        retries: step.retries.unwrap_or(plan.defaults.retries),
        timeout: step
            .timeout_s
            .or(plan.defaults.timeout_s)
            .map(Duration::from_secs),
        parent_execution_id: None,
    }
}

/// Runs the step's `verify` commands if it has any — several at the same time, the first failure
/// cancelling the others (docs/parallel.md) — each through the call pipeline as a `run_command`
/// call. `Ok(None)` when all passed (or there are none), `Ok(Some(feedback))` naming the command
/// that failed, with its output (what an agent step's model is told), when one failed.
pub fn verify(
    ctx: &mut StepContext,
    plan: &Plan,
    vars: &Variables,
) -> Result<Option<String>, ExecutionError> {
    let step = ctx.step;
    let Some(v) = step.verify.as_deref() else {
        return Ok(None);
    };
    let mut commands = Vec::with_capacity(v.commands.len());
    for command in &v.commands {
        match vars.substitute(command) {
            Ok(c) => commands.push(c),
            Err(e) => return Ok(Some(e)),
        }
    }
    let calls = commands
        .iter()
        .enumerate()
        .map(|(k, command)| ToolCall {
            call_id: crate::tools::verify_call_id(&step.step_id, v.listed.then_some(k + 1)),
            step_id: step.step_id.clone(),
            tool: crate::tools::command::NAME.to_string(),
            arguments: json!({ "command": command }),
            turn: None,
        })
        .collect();
    let opts = call_options(ctx, plan);
    let how = Together {
        width: commands.len(),
        fail_fast: true,
        ends_on: &[],
    };
    let results = ctx.call_together(calls, &opts, how)?;
    Ok(feedback(&commands, &results, v.listed))
}

/// What a failed verification says: the command that failed (the first in the plan's order that
/// failed of its own, not cancelled because another failed), its error and output, and for a list
/// what became of the others. `None` when every command passed.
fn feedback(commands: &[String], results: &[ToolResult], listed: bool) -> Option<String> {
    let failed = results
        .iter()
        .position(|r| !r.success && r.error_kind != Some(ErrorKind::Cancelled))
        .or_else(|| results.iter().position(|r| !r.success))?;
    let r = &results[failed];
    let command = &commands[failed];
    let error = r.error.clone().unwrap_or_default();
    if !listed {
        return Some(format!(
            "verify command {command:?} failed: {error}\n{}",
            r.content
        ));
    }
    let others: Vec<String> = results
        .iter()
        .zip(commands)
        .enumerate()
        .filter(|(k, _)| *k != failed)
        .map(|(_, (r, c))| {
            let fate = match (r.success, r.error_kind) {
                (true, _) => "passed",
                (false, Some(ErrorKind::Cancelled)) => "was cancelled",
                (false, _) => "failed too",
            };
            format!("{c:?} {fate}")
        })
        .collect();
    Some(format!(
        "verify command {command:?} ({} of {}) failed: {error}\n{}\nthe other verify commands: {}",
        failed + 1,
        commands.len(),
        r.content,
        others.join(", ")
    ))
}
