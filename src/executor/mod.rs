//! The executor: walks an approved plan's steps in dependency order and runs each through its driver.
//!
//! For every step: start event → variables substituted → precondition → driver (direct: the plan's one
//! call; agent: the LLM's calls) → optional verify → complete/fail. Every call goes through
//! [`call::StepContext::call_tool`]. A failed step with `on_failure: "stop"` stops the run; steps that
//! depend on a failed step are recorded `blocked`, others not reached are recorded `skipped`.

pub mod agent;
pub mod budget;
pub mod call;
pub mod callbacks;
pub mod drivers;
pub mod precondition;
pub mod retry;
mod run;
pub mod schedule;
pub mod settings;
mod skill_step;
pub mod stuck;
pub mod verify;

use std::sync::Arc;

use serde::Serialize;
use thiserror::Error;

pub use agent::AgentSettings;
pub use call::{CallOptions, Emitter, RunContext, StepContext, StopCause, Together, TokenMeter};
pub use callbacks::{
    AutoApprove, AutoDeny, Callbacks, CancellableStdin, ConfirmMode, ConfirmationCallback,
    ConfirmationRequest, Decision, Driven, Fanout, NoopProgress, ProgressCallback, TerminalPrompt,
};

use crate::error::ErrorKind;
use crate::llm::{LlmClient, Usage};
use crate::plan::validate::builtins;
use crate::plan::variables::Variables;
use crate::plan::{ApprovedPlan, AuthError, Plan, Problem, Step};
use crate::policy::Policy;
use crate::redact::Redactor;
use crate::sandbox::OsSandbox;
use crate::store::{Store, StoreError};
use crate::tools::ToolRegistry;
use crate::workspace::Workspace;
use run::{Checks, Resume};

/// What a tool call came to, as seen by drivers and progress callbacks.
#[derive(Debug, Clone, Serialize)]
pub struct ToolResult {
    /// The call's id.
    pub call_id: String,
    /// The step.
    pub step_id: String,
    /// The tool.
    pub tool: String,
    /// The recorded execution.
    pub execution_id: String,
    /// Whether it succeeded.
    pub success: bool,
    /// Why not.
    pub error_kind: Option<ErrorKind>,
    /// Message when not.
    pub error: Option<String>,
    /// Process exit code, if any.
    pub exit_code: Option<i32>,
    /// The textual result handed back to the driver.
    pub content: String,
    /// Wall time of the last attempt.
    pub duration_ms: u64,
    /// 1-based attempt that produced this result.
    pub attempt: u32,
    /// When it failed: the lines a reader needs (a command's last lines of stdout and stderr).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub excerpt: Option<String>,
}

/// The run status lives with the database that stores it; re-exported here for embedders, who meet
/// it in [`ExecutionResult`].
pub use crate::store::RunStatus;
use crate::store::StepState;

/// The state a step ended in (a step in the database may also be pending or running:
/// [`StepState`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Everything it was asked to do succeeded.
    Completed,
    /// It ran (or tried to) and failed.
    Failed,
    /// A step it depends on failed.
    Blocked,
    /// The run stopped before reaching it.
    Skipped,
    /// It was running beside a step that failed fatally (`--jobs`), and was stopped.
    Cancelled,
}

impl StepStatus {
    /// The identifier stored in the database.
    pub fn as_str(self) -> &'static str {
        self.state().as_str()
    }

    /// The same state as the database records it.
    pub fn state(self) -> StepState {
        match self {
            StepStatus::Completed => StepState::Completed,
            StepStatus::Failed => StepState::Failed,
            StepStatus::Blocked => StepState::Blocked,
            StepStatus::Skipped => StepState::Skipped,
            StepStatus::Cancelled => StepState::Cancelled,
        }
    }
}

/// How one step ended.
#[derive(Debug, Clone, Serialize)]
pub struct StepResult {
    /// The step.
    pub step_id: String,
    /// Its tool.
    pub tool: String,
    /// How it ended.
    pub status: StepStatus,
    /// Why it failed, was blocked or skipped.
    pub error_kind: Option<ErrorKind>,
    /// Message for a human.
    pub error: Option<String>,
    /// Tool-call attempts made.
    pub attempts: u32,
    /// Wall time.
    pub duration_ms: u64,
    /// What the step produced, bounded: an agent step's final answer (cut to a few KiB), a direct
    /// step's result as its tool returned it (what `file_read` read, a command's exit status and
    /// output tails, a search's matches), cut to [`STEP_OUTPUT_BYTES`]. The whole of it is in the
    /// database (`acode-run artifact`).
    pub output: Option<String>,
    /// Whether `output` was cut.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub output_truncated: bool,
    /// For a failed step: the last lines its command printed on stdout and stderr, so a failing
    /// test is named on the console, in JUnit, annotations and `--json` without the database.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_output: Option<String>,
    /// Executions recorded for the step.
    pub execution_ids: Vec<String>,
    /// A failure the plan allowed (`on_failure: "continue"`): recorded as failed, but its
    /// dependents ran and it does not by itself make the run fail.
    pub tolerated: bool,
    /// What the step spent on models (tokens, calls, dollars at the policy's prices), when it
    /// made a model call: shown per step in JUnit and the report.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spend: Option<crate::plan::budget::Spend>,
}

impl StepResult {
    /// The result of a step that did not run in this process (already completed, blocked,
    /// skipped, refused): no attempts, no time, no executions.
    fn not_run(step: &Step, status: StepStatus, failure: Option<(ErrorKind, String)>) -> Self {
        let (error_kind, error) = match failure {
            Some((k, m)) => (Some(k), Some(m)),
            None => (None, None),
        };
        StepResult {
            step_id: step.step_id.clone(),
            tool: step.tool.clone(),
            status,
            error_kind,
            error,
            attempts: 0,
            duration_ms: 0,
            output: None,
            output_truncated: false,
            failure_output: None,
            execution_ids: Vec::new(),
            tolerated: false,
            spend: None,
        }
    }
}

/// Bytes of a direct step's result kept in its [`StepResult::output`] (`--json`).
pub const STEP_OUTPUT_BYTES: usize = 16 * 1024;

/// What `Executor::execute` returns for a run that took place (even a failed one).
#[derive(Debug, Clone, Serialize)]
pub struct ExecutionResult {
    /// The run's id.
    pub run_id: String,
    /// The plan's id.
    pub plan_id: String,
    /// Completed, failed or interrupted.
    pub status: RunStatus,
    /// The process exit code this run calls for (SPEC §10).
    pub exit_code: i32,
    /// Wall time.
    pub duration_ms: u64,
    /// Every step, in plan order.
    pub steps: Vec<StepResult>,
    /// LLM prompt tokens used.
    pub prompt_tokens: u64,
    /// LLM completion tokens used.
    pub completion_tokens: u64,
}

impl ExecutionResult {
    /// This result without its steps: cheap to copy, for a report that writes the steps one at a
    /// time (`run --json` on a long plan). Every other field is listed, so a new field cannot be
    /// forgotten here.
    pub fn without_steps(&self) -> ExecutionResult {
        let ExecutionResult {
            run_id,
            plan_id,
            status,
            exit_code,
            duration_ms,
            steps: _,
            prompt_tokens,
            completion_tokens,
        } = self;
        ExecutionResult {
            run_id: run_id.clone(),
            plan_id: plan_id.clone(),
            status: *status,
            exit_code: *exit_code,
            duration_ms: *duration_ms,
            steps: Vec::new(),
            prompt_tokens: *prompt_tokens,
            completion_tokens: *completion_tokens,
        }
    }
}

/// Why a run could not take place or could not be recorded.
#[derive(Debug, Error)]
pub enum ExecutionError {
    /// The plan is not authorized.
    #[error("plan not authorized: {0}")]
    Unauthorized(#[from] AuthError),
    /// The plan is invalid (library callers may build plans by hand).
    #[error("invalid plan:\n{}", .0.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n"))]
    InvalidPlan(Vec<Problem>),
    /// A run cannot be resumed (finished, another plan, still alive, ...).
    #[error("cannot resume {0}")]
    CannotResume(String),
    /// Resuming would run again a step cut off mid-way whose tool is not safe to run twice. Nothing
    /// was run or recorded: the run stays interrupted, and resuming with `rerun_interrupted` (after
    /// checking the workspace) continues it.
    #[error(
        "run {run_id} was interrupted while {} ran, which {} not safe to run twice; nothing was \
         run. Check the workspace, then continue with: acode-run resume {run_id} --rerun-interrupted \
         (the run keeps the options it was started with — --confirm, --sandbox, the LLM settings \
         — so they need not be repeated; see docs/recovery.md)",
        .steps.iter().map(|(s, t)| format!("step {s:?} ({t})")).collect::<Vec<_>>().join(", "),
        if .steps.len() == 1 { "is" } else { "are" }
    )]
    RerunNeeded {
        /// The run, still resumable.
        run_id: String,
        /// The interrupted steps: (step id, tool).
        steps: Vec<(String, String)>,
    },
    /// The database failed; the run's record may be incomplete.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Runs approved plans. Build one with [`Executor::new`] and the `with_*` methods.
pub struct Executor {
    workspace: Workspace,
    store: Store,
    registry: ToolRegistry,
    policy: Policy,
    callbacks: Callbacks,
    sandbox: OsSandbox,
    backoff: retry::Backoff,
    llm: Option<Arc<dyn LlmClient>>,
    agent: AgentSettings,
    redactor: Arc<Redactor>,
    keep_step_results: bool,
    settings_json: String,
    jobs: usize,
    replay_of: Option<String>,
    jobs_from: schedule::JobsSource,
    trace: Option<crate::events::otel::TraceContext>,
    origin: Option<crate::store::RunOrigin>,
    approved_policy: Option<Policy>,
}

/// `with_confirmation` (default: every confirmation denied, fail closed), `with_progress`,
/// `with_cancel_flag`.
impl Driven for Executor {
    fn callbacks_mut(&mut self) -> &mut Callbacks {
        &mut self.callbacks
    }
}

impl Executor {
    /// An executor over `workspace` recording into `store`, with the built-in tools, the default
    /// policy, confirmation denied (fail closed) and no progress output.
    pub fn new(workspace: Workspace, mut store: Store) -> Self {
        // One redactor for the run: the store records with the one the executor extends with the
        // plan's secrets when a run starts.
        let redactor = Arc::new(Redactor::from_env());
        store.set_redactor(redactor.clone());
        Executor {
            workspace,
            store,
            registry: ToolRegistry::builtin(),
            policy: Policy::default(),
            callbacks: Callbacks::default(),
            sandbox: OsSandbox::none(),
            backoff: retry::Backoff::default(),
            llm: None,
            agent: AgentSettings::default(),
            redactor,
            keep_step_results: true,
            settings_json: "{}".to_string(),
            jobs: schedule::default_jobs(),
            replay_of: None,
            jobs_from: schedule::JobsSource::Default,
            trace: None,
            origin: None,
            approved_policy: None,
        }
    }

    /// The options the run is started with, as JSON (see [`crate::runner::RunSettings`]),
    /// recorded on the run so that `resume` can continue it the same way. Keys never belong here.
    pub fn with_settings_record(mut self, settings_json: String) -> Self {
        self.settings_json = settings_json;
        self
    }

    /// Records on the run that its model answers are replayed from run `run_id` (`run --replay`,
    /// docs/replay.md); the client doing it is given with [`Executor::with_llm`].
    pub fn with_replay_of(mut self, run_id: Option<String>) -> Self {
        self.replay_of = run_id;
        self
    }

    /// Records on the run where it runs (repository, commit, what the repository's policy
    /// narrowed; issue 48), at its start and again when it is resumed.
    pub fn with_origin(mut self, origin: crate::store::RunOrigin) -> Self {
        self.origin = Some(origin);
        self
    }

    /// The policy the approval is bound to, when the policy in force is a narrower one (a
    /// repository's own policy narrowed it, docs/security.md): the approval is checked against
    /// this one, and the policy in force must allow nothing this one does not.
    pub fn with_approved_policy(mut self, policy: Policy) -> Self {
        self.approved_policy = Some(policy);
        self
    }

    /// The workspace root the executor works in.
    pub fn workspace_root(&self) -> &std::path::Path {
        self.workspace.root()
    }

    /// Whether [`ExecutionResult::steps`] lists every step (the default). A caller that only needs
    /// the run's outcome turns it off: each step's result is then dropped once it is recorded and
    /// reported, so memory does not grow with the plan (SPEC §11: ≤ 64 MB at 100 000 steps). The
    /// database and the progress callbacks see every step either way.
    pub fn with_step_results(mut self, keep: bool) -> Self {
        self.keep_step_results = keep;
        self
    }

    /// Runs up to `jobs` steps at once when the plan's dependencies allow it (`--jobs`; see
    /// [`schedule`] for which steps may run together). 1 runs every step after the previous one.
    pub fn with_jobs(mut self, jobs: usize) -> Self {
        self.jobs = jobs.max(1);
        self.jobs_from = schedule::JobsSource::Flag;
        self
    }

    /// [`Executor::with_jobs`], recording where the number came from (the runner's
    /// [`schedule::effective_jobs`]): the header and `run_started` say it.
    pub fn with_jobs_from(mut self, jobs: usize, from: schedule::JobsSource) -> Self {
        self.jobs = jobs.max(1);
        self.jobs_from = from;
        self
    }

    /// Runs in the W3C trace context `trace` (docs/observability.md): each command started by a
    /// tool call sees a `TRACEPARENT` naming the call's span (or the caller's, when not exporting).
    pub fn with_trace(mut self, trace: Option<crate::events::otel::TraceContext>) -> Self {
        self.trace = trace;
        self
    }

    /// Uses `registry` instead of the built-in tools.
    pub fn with_registry(mut self, registry: ToolRegistry) -> Self {
        self.registry = registry;
        self
    }

    /// Uses `policy`.
    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Confines commands with `sandbox`, resolved by the caller once for the run
    /// ([`OsSandbox::resolve`]); the default confines nothing but the resource limits.
    pub fn with_sandbox(mut self, sandbox: OsSandbox) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// The OS sandbox commands run in.
    pub fn sandbox(&self) -> &OsSandbox {
        &self.sandbox
    }

    /// Uses `redactor` for everything the run records and hands to the model (the store gets the
    /// same one). Share the same `Arc` with the progress writers: when a run starts, the plan's
    /// secrets ([`crate::plan::variables::secret_values`]) are added to it, and so reach them too.
    pub fn with_redactor(mut self, redactor: Arc<Redactor>) -> Self {
        self.store.set_redactor(redactor.clone());
        self.redactor = redactor;
        self
    }

    /// Uses `llm` for agent steps.
    pub fn with_llm(mut self, llm: Arc<dyn LlmClient>) -> Self {
        self.llm = Some(llm);
        self
    }

    /// Sets how agent steps use the LLM (model, protocol, retries, token budget, context limits).
    pub fn with_agent_settings(mut self, settings: AgentSettings) -> Self {
        self.agent = settings;
        self
    }

    /// The database, for queries after a run.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The database, for stages that annotate the runs they made.
    pub fn store_mut(&mut self) -> &mut Store {
        &mut self.store
    }

    /// The workspace.
    pub fn workspace(&self) -> &Workspace {
        &self.workspace
    }

    /// The tool registry, so stages validate what a model drafted against the same tools.
    pub fn registry(&self) -> &ToolRegistry {
        &self.registry
    }

    /// The policy in force, so stages validate against the same rules the run will.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The agent settings, so a stage can give the model its role between runs.
    pub fn agent_settings_mut(&mut self) -> &mut AgentSettings {
        &mut self.agent
    }

    /// Runs the plan. Checks first that the approval is bound to this executor's policy and that
    /// the plan is valid under it and its tools (an executor built by hand may hold any), and
    /// re-reads the plan and skill files on disk; returns `Ok` for any run that took place, failed
    /// steps included, and `Err` only when it could not start or be recorded.
    pub fn execute(&mut self, approved: &ApprovedPlan) -> Result<ExecutionResult, ExecutionError> {
        self.run_plan(approved, None, Checks::Needed)
    }

    /// Runs a plan the runner's stages prepared this executor for
    /// ([`crate::runner::PreparedRun::execute`], the only caller): the plan was validated under
    /// this policy and tools, its approval bound to the policy and its secrets taught, so none of
    /// that is checked again; only the plan and skill files on disk are re-read at the start (a
    /// race defence). `resume`: the run to continue, and whether a step cut off mid-way may run
    /// again.
    pub(crate) fn execute_prepared(
        &mut self,
        approved: &ApprovedPlan,
        resume: Option<(&str, bool)>,
    ) -> Result<ExecutionResult, ExecutionError> {
        match resume {
            None => self.run_plan(approved, None, Checks::Done),
            Some((run_id, rerun)) => self.resume_checked(approved, run_id, rerun, Checks::Done),
        }
    }

    /// Continues an unfinished run of the same plan (SPEC §9): completed steps are kept, a step that
    /// was started but not finished is re-run if its tool is idempotent (or `rerun_interrupted`),
    /// everything else runs as usual. Refuses runs that finished, that belong to another plan,
    /// workspace or set of variables, and runs still alive in another process.
    pub fn resume(
        &mut self,
        approved: &ApprovedPlan,
        run_id: &str,
        rerun_interrupted: bool,
    ) -> Result<ExecutionResult, ExecutionError> {
        self.resume_checked(approved, run_id, rerun_interrupted, Checks::Needed)
    }

    /// [`Executor::resume`], with `checks` saying whether the plan still needs checking against
    /// this executor (see [`Executor::execute_prepared`]).
    fn resume_checked(
        &mut self,
        approved: &ApprovedPlan,
        run_id: &str,
        rerun_interrupted: bool,
        checks: Checks,
    ) -> Result<ExecutionResult, ExecutionError> {
        let cannot = |m: String| ExecutionError::CannotResume(format!("run {run_id}: {m}"));
        let run = match self.store.run(run_id) {
            Ok(r) => r,
            Err(StoreError::NotFound(what)) => return Err(cannot(what)),
            Err(e) => return Err(e.into()),
        };
        let plan = approved.plan();
        if run.plan_sha256 != plan.sha256 {
            return Err(cannot(format!(
                "it ran plan sha256 {}, but this plan is {}; only the same plan can be resumed",
                run.plan_sha256, plan.sha256
            )));
        }
        let root = self.workspace.root().display().to_string();
        if run.workspace != root {
            return Err(cannot(format!(
                "it ran in workspace {}, not {root}",
                run.workspace
            )));
        }
        match run.status {
            RunStatus::Interrupted => {}
            RunStatus::Running => {
                let (pid, _) = self.store.run_origin(&run.run_id)?;
                return Err(cannot(format!(
                    "it is still running in process {}",
                    pid.unwrap_or_default()
                )));
            }
            other => {
                return Err(cannot(format!(
                    "it is {other}; only interrupted runs can be resumed"
                )));
            }
        }
        let (_, variables) = self.store.run_origin(&run.run_id)?;
        let vars = Variables::new(
            &plan.variables,
            &builtins(plan, &self.workspace, &run.run_id),
        );
        self.redactor
            .add_values(crate::plan::variables::secret_values(plan, &vars));
        let current = self.redacted_variables(plan);
        if variables.as_deref().is_some_and(|v| v != current) {
            return Err(cannot(
                "it used other variable values (--var); resume with the same ones".to_string(),
            ));
        }
        let rows = self.store.steps(&run.run_id)?;
        let prior: std::collections::HashMap<String, StepState> =
            rows.iter().map(|s| (s.step_id.clone(), s.status)).collect();
        // Checked before anything is written, so refusing leaves the run exactly as it was.
        if !rerun_interrupted {
            let cut_off: Vec<(String, String)> = plan
                .steps
                .iter()
                .filter(|s| prior.get(&s.step_id) == Some(&StepState::Running))
                .filter(|s| !self.registry.get(&s.tool).is_some_and(|t| t.idempotent()))
                .map(|s| (s.step_id.clone(), s.tool.clone()))
                .collect();
            if !cut_off.is_empty() {
                return Err(ExecutionError::RerunNeeded {
                    run_id: run.run_id,
                    steps: cut_off,
                });
            }
        }
        // The attempts a killed runner cut off left no execution row: recorded now, so both
        // attempts of a step that runs again are seen.
        for row in rows.iter().filter(|s| s.status == StepState::Running) {
            self.store.record_cut_off(&run.run_id, row)?;
        }
        let (prompt_tokens, completion_tokens) = self.store.token_usage(&run.run_id)?;
        let spend = self.store.model_spend(&run.run_id)?;
        self.run_plan(
            approved,
            Some(Resume {
                tokens: Usage {
                    prompt_tokens: prompt_tokens.max(0) as u64,
                    completion_tokens: completion_tokens.max(0) as u64,
                },
                spend,
                run_id: run.run_id,
                prior,
            }),
            checks,
        )
    }

    /// The plan's variables as recorded in the database (redacted, like everything stored).
    fn redacted_variables(&self, plan: &Plan) -> String {
        // Value by value, then serialised, so a secret holding `"` or `\` is still found.
        let vars = serde_json::to_value(&plan.variables).unwrap_or_default();
        self.redactor.redact_value(&vars).to_string()
    }
}

/// What a driver reports for a step.
#[derive(Debug, Clone)]
pub struct StepOutcome {
    /// `None` on success, else why it failed.
    pub failure: Option<(ErrorKind, String)>,
    /// The final output worth keeping in memory (an agent's answer, a direct step's result).
    pub output: Option<String>,
    /// A failed call's excerpt ([`ToolResult::excerpt`]).
    pub excerpt: Option<String>,
}

impl StepOutcome {
    /// A failure of `kind`.
    pub fn failed(kind: ErrorKind, message: impl Into<String>) -> Self {
        StepOutcome {
            failure: Some((kind, message.into())),
            output: None,
            excerpt: None,
        }
    }
}
