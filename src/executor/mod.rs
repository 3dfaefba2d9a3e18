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
pub mod schedule;
pub mod settings;
mod skill_step;
pub mod stuck;
pub mod verify;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;
use thiserror::Error;

pub use agent::AgentSettings;
pub use call::{CallOptions, Emitter, RunContext, StepContext, StopCause, Together, TokenMeter};
pub use callbacks::{
    AutoApprove, AutoDeny, Callbacks, CancellableStdin, ConfirmMode, ConfirmationCallback,
    ConfirmationRequest, Decision, Driven, Fanout, NoopProgress, ProgressCallback, TerminalPrompt,
};

use crate::error::{ErrorKind, RunEnd, now_ms};
use crate::events::EventKind;
use crate::llm::{LlmClient, Usage};
use crate::plan::validate::{
    builtins, dependency_order, substitute_arguments, substitute_precondition,
};
use crate::plan::variables::Variables;
use crate::plan::{ApprovedPlan, AuthError, OnFailure, Plan, Problem, Step};
use crate::policy::Policy;
use crate::redact::Redactor;
use crate::sandbox::OsSandbox;
use crate::store::{RunRow, StepUpdate, Store, StoreError};
use crate::tools::ToolRegistry;
use crate::workspace::Workspace;
use schedule::Footprint;
use std::path::{Path, PathBuf};

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

    /// Runs the plan. Re-checks the authorization and the plan's validity first; returns `Ok` for any
    /// run that took place, failed steps included, and `Err` only when it could not start or be
    /// recorded.
    pub fn execute(&mut self, approved: &ApprovedPlan) -> Result<ExecutionResult, ExecutionError> {
        self.run_plan(approved, None)
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
        )
    }

    /// The plan's variables as recorded in the database (redacted, like everything stored).
    fn redacted_variables(&self, plan: &Plan) -> String {
        // Value by value, then serialised, so a secret holding `"` or `\` is still found.
        let vars = serde_json::to_value(&plan.variables).unwrap_or_default();
        self.redactor.redact_value(&vars).to_string()
    }

    fn run_plan(
        &mut self,
        approved: &ApprovedPlan,
        resume: Option<Resume>,
    ) -> Result<ExecutionResult, ExecutionError> {
        approved.recheck()?;
        match &self.approved_policy {
            None => approved.check_policy(&self.policy)?,
            Some(bound) => {
                approved.check_policy(bound)?;
                // Narrower only: nothing in force that the approved policy does not allow.
                if !crate::policy::narrow::narrow(bound, &self.policy)
                    .ignored
                    .is_empty()
                {
                    return Err(AuthError::PolicyChanged {
                        approved: crate::plan::auth::policy_sha256(bound),
                        actual: crate::plan::auth::policy_sha256(&self.policy),
                    }
                    .into());
                }
            }
        }
        approved.check_skills(&self.workspace)?;
        let plan = approved.plan();
        // A plan inside the workspace must not rewrite itself while it runs.
        if let Some(source) = &plan.source {
            self.workspace.protect(source);
        }
        let vctx = crate::plan::ValidationContext {
            registry: &self.registry,
            workspace: &self.workspace,
            policy: &self.policy,
        };
        let problems = crate::plan::validate::validate(plan, &vctx);
        if !problems.is_empty() {
            return Err(ExecutionError::InvalidPlan(problems));
        }
        let order = dependency_order(plan).map_err(ExecutionError::InvalidPlan)?;
        let run_id = match &resume {
            Some(r) => r.run_id.clone(),
            None => uuid::Uuid::new_v4().to_string(),
        };
        let started = Instant::now();
        let vars = Variables::new(&plan.variables, &builtins(plan, &self.workspace, &run_id));
        // Before anything of this run is recorded or printed.
        self.redactor
            .add_values(crate::plan::variables::secret_values(plan, &vars));
        crate::policy::credentials::learn_workspace_secrets(self.workspace.root(), &self.redactor);
        crate::policy::credentials::learn_passed_credentials(
            &self.policy.env_passthrough,
            &self.redactor,
        );
        self.workspace.sweep_staging();
        self.mark_abandoned_runs()?;

        if resume.is_some() {
            self.store.reopen_run(&run_id)?;
        } else {
            let step_rows: Vec<(&str, usize, &str)> = plan
                .steps
                .iter()
                .map(|s| (s.step_id.as_str(), s.position, s.tool.as_str()))
                .collect();
            let variables = self.redacted_variables(plan);
            self.store.begin_run(
                &RunRow {
                    run_id: run_id.clone(),
                    plan_id: plan.plan_id.clone(),
                    plan_sha256: plan.sha256.clone(),
                    plan_path: plan.source.as_ref().map(|p| p.display().to_string()),
                    workspace: self.workspace.root().display().to_string(),
                    started_at: now_ms(),
                    finished_at: None,
                    status: RunStatus::Running,
                    exit_code: None,
                    prompt_tokens: 0,
                    completion_tokens: 0,
                    sandbox: None,
                    landlock_abi: None,
                    kind: "run".into(),
                    subject: None,
                    repository: None,
                    commit: None,
                    events_lost: None,
                },
                &variables,
                &self.settings_json,
                &step_rows,
            )?;
            // What each agent step asks, so a replay of this run can tell the plan was edited.
            let asked: Vec<(String, String)> = plan
                .steps
                .iter()
                .filter(|s| s.tool == crate::tools::agent::NAME)
                .map(|s| (s.step_id.clone(), agent::instruction_sha256(&s.arguments)))
                .collect();
            self.store.record_instructions(&run_id, &asked)?;
            if let Some(of) = &self.replay_of {
                self.store.record_replay_of(&run_id, of)?;
            }
        }
        if let Some(origin) = &self.origin {
            self.store.record_origin(&run_id, origin)?;
        }
        self.store.record_sandbox(
            &run_id,
            self.sandbox.mode().as_str(),
            self.sandbox.landlock_abi(),
        )?;
        let already_completed = resume.as_ref().map(|r| {
            r.prior
                .values()
                .filter(|s| **s == StepState::Completed)
                .count()
        });

        // Each step running beside another needs a database connection of its own; a database in
        // memory has one, so its runs take one step at a time.
        let db_path = self.store.path().map(std::path::Path::to_path_buf);
        let jobs = if db_path.is_some() {
            self.jobs.max(1)
        } else {
            1
        };
        let emitter = Emitter::new(run_id.clone(), self.callbacks.progress.clone());
        emitter.emit(EventKind::RunStarted {
            plan_id: plan.plan_id.clone(),
            plan_sha256: plan.sha256.clone(),
            workspace: self.workspace.root().display().to_string(),
            database: self.store.path().map(|p| p.display().to_string()),
            steps: plan.steps.len(),
            resumed_from: resume.as_ref().map(|r| r.run_id.clone()),
            already_completed,
            sandbox: crate::events::SandboxInfo::of(&self.sandbox),
            jobs: jobs_info(plan, &order, &vars, jobs, self.jobs_from),
            approval: Some(crate::events::ApprovalInfo::of(approved)),
        });
        let approve_all = Mutex::new(false);
        let tokens = match &resume {
            Some(r) => TokenMeter::resumed(r.tokens, r.spend),
            None => TokenMeter::default(),
        };
        let run_budget = budget::run_budget(plan.budget.as_ref(), self.agent.token_budget);
        let stopped_by = std::sync::OnceLock::new();
        // Prompts are asked one at a time, whatever runs beside them.
        let gate = (self.callbacks.confirm.clone()).unwrap_or_else(|| Arc::new(AutoDeny));
        let confirm = OneAtATime::new(&*gate);
        self.store
            .record_header(&run_id, &run_header(approved, &self.sandbox, jobs))?;
        let parts = Parts {
            emitter: &emitter,
            registry: &self.registry,
            workspace: &self.workspace,
            policy: &self.policy,
            confirm: &confirm,
            approve_all: &approve_all,
            interrupt: &self.callbacks.cancel,
            stopped_by: &stopped_by,
            sandbox: &self.sandbox,
            backoff: self.backoff,
            llm: self.llm.as_ref(),
            agent: &self.agent,
            tokens: &tokens,
            budget: &run_budget,
            trace: self.trace.as_ref(),
        };
        let mut run = parts.context(&mut self.store, &self.callbacks.cancel);

        let keep = self.keep_step_results;
        let mut results: Vec<Option<StepResult>> = Vec::new();
        if keep {
            results.resize(plan.steps.len(), None);
        }
        // Counted as steps end, so the totals do not need the results kept.
        let mut counts = [0usize; 5];
        let mut tolerated = 0usize;
        // For each failed, cancelled or blocked step: the failed step at the root of it.
        let mut failed_root: Vec<Option<String>> = vec![None; plan.steps.len()];
        let dependencies = plan.dependency_positions();
        let mut stopped: Option<ErrorKind> = None;
        let mut quit_seen = false;
        // The first fatal failure by time: its kind is the run's exit code.
        let mut first_failure: Option<(ErrorKind, String)> = None;
        let total = order.len();
        let mut started_steps = 0usize;
        let mut ready = schedule::Ready::new(&dependencies, &order);
        // Steps running on threads of their own: index, footprint, cancellation flag.
        let mut running: Vec<(usize, Footprint, Arc<AtomicBool>)> = Vec::new();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<(usize, StepRun)>();
        let connections: Mutex<Vec<Store>> = Mutex::new(Vec::new());
        let redactor = &self.redactor;
        let cancel = &*self.callbacks.cancel;
        let window = 8 * jobs;

        std::thread::scope(|scope| -> Result<(), ExecutionError> {
            loop {
                // A signal, or "quit" at a prompt of any step (the user wants the run to stop):
                // nothing new starts, and what runs is cancelled.
                if cancel.load(Ordering::SeqCst)
                    || matches!(stopped_by.get(), Some(StopCause::Quit(_)))
                {
                    stopped.get_or_insert(ErrorKind::Interrupted);
                    for (_, _, flag) in &running {
                        flag.store(true, Ordering::SeqCst);
                    }
                }
                let mut next = Next::Wait;
                for (looked, i) in ready.iter().enumerate() {
                    let step = &plan.steps[i];
                    let prior = resume
                        .as_ref()
                        // Recorded ids went through the redactor (a token in an id is stored
                        // redacted).
                        .and_then(|r| r.prior.get(self.redactor.redact(&step.step_id).as_ref()))
                        .copied();
                    let blocker = dependencies
                        .of(i)
                        .iter()
                        .find_map(|&d| failed_root[d].clone());
                    if prior == Some(StepState::Completed) {
                        next = Next::Settle(i, StepStatus::Completed, None);
                    } else if let Some(by) = blocker {
                        next = Next::Settle(i, StepStatus::Blocked, Some(by));
                    } else if stopped.is_some() {
                        // Not a failure: its dependents are skipped too (the run has stopped).
                        next = Next::Settle(i, StepStatus::Skipped, None);
                    } else if running.len() >= jobs || looked >= window {
                        break;
                    } else if jobs == 1 {
                        next = Next::Start(i, Footprint::Anywhere);
                    } else {
                        let footprint = substitute_arguments(step, &vars)
                            .map_or(Footprint::Anywhere, |a| Footprint::of(step, &a));
                        if running.iter().any(|(_, f, _)| footprint.conflicts(f)) {
                            continue;
                        }
                        next = Next::Start(i, footprint);
                    }
                    break;
                }
                let (i, (mut result, quit)) = match next {
                    Next::Settle(i, status, by) => {
                        ready.take(i);
                        // A resumed run counts the steps it completed before: step 7 of 16 is
                        // `[7/16]`, not `[1/16]`.
                        if status == StepStatus::Completed {
                            started_steps += 1;
                        }
                        let step = &plan.steps[i];
                        let result = match status {
                            StepStatus::Completed => StepResult::not_run(step, status, None),
                            _ => {
                                failed_root[i] = by.clone();
                                not_run(&mut run, step, status, by)?
                            }
                        };
                        (i, (result, false))
                    }
                    Next::Start(i, footprint) => {
                        ready.take(i);
                        started_steps += 1;
                        let step = &plan.steps[i];
                        // A step cut off mid-way runs again: `resume` refused beforehand unless
                        // its tool is idempotent or the caller said `rerun_interrupted`.
                        // File steps take microseconds in this process: they run here, between
                        // the steps running on threads (a thread and a connection each would
                        // cost more than the step).
                        if jobs == 1 || footprint.in_process() {
                            (
                                i,
                                run_step(&mut run, plan, step, &vars, started_steps, total)?,
                            )
                        } else {
                            let flag = Arc::new(AtomicBool::new(false));
                            running.push((i, footprint, flag.clone()));
                            let done = done_tx.clone();
                            let (vars, connections, db_path) = (&vars, &connections, &db_path);
                            scope.spawn(move || {
                                let outcome = beside(
                                    parts,
                                    connections,
                                    db_path,
                                    redactor,
                                    &flag,
                                    plan,
                                    step,
                                    vars,
                                    started_steps,
                                    total,
                                );
                                let _ = done.send((i, outcome));
                            });
                            continue;
                        }
                    }
                    Next::Wait if running.is_empty() => break,
                    Next::Wait => {
                        let (i, outcome) =
                            match done_rx.recv_timeout(std::time::Duration::from_millis(50)) {
                                Ok(done) => done,
                                // Checked again at the top: a signal reaches the running steps.
                                Err(_) => continue,
                            };
                        running.retain(|(j, _, _)| *j != i);
                        if outcome.is_err() {
                            // The run cannot be recorded: stop what runs beside it rather than
                            // wait for it (the scope joins every thread before returning).
                            for (_, _, flag) in &running {
                                flag.store(true, Ordering::SeqCst);
                            }
                        }
                        (i, outcome?)
                    }
                };
                quit_seen |= quit;
                if result.status == StepStatus::Cancelled {
                    failed_root[i] = stopped_by.get().map(|c| c.step_id().to_string());
                } else if result.status == StepStatus::Failed {
                    let kind = result.error_kind.unwrap_or(ErrorKind::ToolFailed);
                    let interrupted = quit || cancel.load(Ordering::SeqCst);
                    if interrupted {
                        stopped = Some(ErrorKind::Interrupted);
                    }
                    if result.tolerated && !interrupted {
                        // Tolerated (SPEC §2): dependents still run, the run does not fail for it.
                    } else {
                        let id = plan.steps[i].step_id.clone();
                        result.tolerated = false;
                        // Interrupted (a signal, "quit"): the run stopped, so the steps after it
                        // are `skipped`, not `blocked` by a failure (docs/recovery.md).
                        if !interrupted {
                            failed_root[i] = Some(id.clone());
                        }
                        first_failure.get_or_insert((kind, id.clone()));
                        if !interrupted {
                            stopped = Some(kind);
                            // Stop on first fatal failure: what runs beside it is cancelled.
                            if !running.is_empty() {
                                let _ = stopped_by.set(StopCause::Failed(id));
                                for (_, _, flag) in &running {
                                    flag.store(true, Ordering::SeqCst);
                                }
                            }
                        }
                    }
                }
                counts[result.status as usize] += 1;
                tolerated += usize::from(result.tolerated);
                if keep {
                    results[i] = Some(result);
                }
                ready.finished(i);
            }
            Ok(())
        })?;

        // Servers tools keep running between calls (MCP) end with the run's steps; what stopping
        // them sent (a remote server's closing DELETE, its long-lived streams) is the run's.
        let stopping = run.registry.shutdown();
        let steps: Vec<StepResult> = results.into_iter().flatten().collect();
        let interrupted =
            stopped == Some(ErrorKind::Interrupted) && self.callbacks.cancel.load(Ordering::SeqCst);
        let (status, end) = if interrupted {
            (RunStatus::Interrupted, RunEnd::Interrupted)
        } else if quit_seen {
            // "quit" at a prompt: a denial that also ends the run for good.
            (RunStatus::Cancelled, RunEnd::Quit)
        } else if let Some((kind, _)) = &first_failure {
            (RunStatus::Failed, RunEnd::Failed(*kind))
        } else {
            (RunStatus::Completed, RunEnd::Completed)
        };
        let exit_code = end.exit_code();
        let count = |s: StepStatus| counts[s as usize];
        let duration_ms = started.elapsed().as_millis() as u64;
        let tokens = tokens.get();
        run.store.record_unattributed_network(&run_id, &stopping)?;
        if let Some(proxy) = run.sandbox.proxy() {
            run.store
                .record_unattributed_network(&run_id, &proxy.take_unattributed())?;
        }
        let changes = written_files(self.workspace.root(), run.store, &run_id)?;
        run.store
            .finish_run_with_files(&run_id, status, exit_code, tokens.stored(), &changes)?;
        // SQLite writes on into a deleted file without complaint: say so instead of exit 0.
        run.store.check_still_there()?;
        let violations = run.store.refused_violations(&run_id)?;
        emitter.emit(EventKind::RunFinished {
            status: status.as_str().to_string(),
            exit_code,
            duration_ms,
            completed: count(StepStatus::Completed),
            failed: count(StepStatus::Failed),
            tolerated,
            blocked: count(StepStatus::Blocked) + count(StepStatus::Skipped),
            cancelled: count(StepStatus::Cancelled),
            first_failure: first_failure.as_ref().map(|(_, id)| id.clone()),
            violations,
        });
        Ok(ExecutionResult {
            run_id,
            plan_id: plan.plan_id.clone(),
            status,
            exit_code,
            duration_ms,
            steps,
            prompt_tokens: tokens.prompt_tokens,
            completion_tokens: tokens.completion_tokens,
        })
    }
}

/// A step's run as the scheduler gets it back: its result and whether the user quit.
type StepRun = Result<(StepResult, bool), ExecutionError>;

/// What the scheduler does next.
enum Next {
    /// Record a ready step that will not run (already completed, blocked, skipped).
    Settle(usize, StepStatus, Option<String>),
    /// Start a ready step.
    Start(usize, Footprint),
    /// Wait for a running step to end (or stop: nothing runs and nothing is ready).
    Wait,
}

/// Everything of a run a step needs besides its database connection and cancellation flag:
/// copied to each step that runs on a thread of its own (`--jobs`).
#[derive(Clone, Copy)]
struct Parts<'r> {
    emitter: &'r Emitter,
    registry: &'r ToolRegistry,
    workspace: &'r Workspace,
    policy: &'r Policy,
    confirm: &'r dyn ConfirmationCallback,
    approve_all: &'r Mutex<bool>,
    interrupt: &'r AtomicBool,
    stopped_by: &'r std::sync::OnceLock<StopCause>,
    sandbox: &'r OsSandbox,
    backoff: retry::Backoff,
    llm: Option<&'r Arc<dyn LlmClient>>,
    agent: &'r AgentSettings,
    tokens: &'r TokenMeter,
    budget: &'r crate::plan::budget::Budget,
    trace: Option<&'r crate::events::otel::TraceContext>,
}

impl<'r> Parts<'r> {
    /// A step's context over `store`, stopped by `cancel`.
    fn context<'c>(self, store: &'c mut Store, cancel: &'c AtomicBool) -> RunContext<'c>
    where
        'r: 'c,
    {
        RunContext {
            emitter: self.emitter,
            store,
            registry: self.registry,
            workspace: self.workspace,
            policy: self.policy,
            confirm: self.confirm,
            approve_all: self.approve_all,
            cancel,
            interrupt: self.interrupt,
            stopped_by: self.stopped_by,
            sandbox: self.sandbox,
            backoff: self.backoff,
            llm: self.llm,
            agent: self.agent,
            tokens: self.tokens,
            budget: self.budget,
            trace: self.trace,
        }
    }
}

/// What `run_started` says of the run's jobs: the number, where it came from, and (with more
/// than one) the steps that run alone all the same, grouped by why.
fn jobs_info(
    plan: &Plan,
    order: &[usize],
    vars: &Variables,
    jobs: usize,
    from: schedule::JobsSource,
) -> crate::events::JobsInfo {
    let alone = if jobs > 1 {
        schedule::overlap(plan, order, &schedule::footprints(plan, vars))
            .map(|o| {
                schedule::run_alone(plan, &o)
                    .into_iter()
                    .map(|(why, steps)| crate::events::AloneSteps {
                        steps,
                        why: why.why().to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    crate::events::JobsInfo { jobs, from, alone }
}

/// Runs one step on a thread of its own (`--jobs`), over a database connection from `pool` (or a
/// new one to `db_path`), given back to the pool afterwards.
#[allow(clippy::too_many_arguments)]
fn beside(
    parts: Parts,
    pool: &Mutex<Vec<Store>>,
    db_path: &Option<std::path::PathBuf>,
    redactor: &Arc<Redactor>,
    cancel: &AtomicBool,
    plan: &Plan,
    step: &Step,
    vars: &Variables,
    index: usize,
    total: usize,
) -> StepRun {
    let pooled = pool.lock().ok().and_then(|mut p| p.pop());
    let mut store = match (pooled, db_path) {
        (Some(store), _) => store,
        (None, Some(path)) => {
            let mut store = Store::open(path)?;
            store.set_redactor(redactor.clone());
            store.defer_checkpoints();
            store
        }
        // The scheduler runs steps beside each other only over a database file.
        (None, None) => return Err(StoreError::NotFound("a database file".to_string()).into()),
    };
    let result = run_step(
        &mut parts.context(&mut store, cancel),
        plan,
        step,
        vars,
        index,
        total,
    );
    if let Ok(mut p) = pool.lock() {
        p.push(store);
    }
    result
}

/// Hands confirmation requests to the callback one at a time: steps running at once
/// (`--jobs`) never ask two questions together.
///
/// "quit" applies to the whole run: once the user answered it, a step that was waiting for its
/// turn to ask gets "quit" too, without a question (it is being cancelled).
struct OneAtATime<'c> {
    inner: &'c dyn ConfirmationCallback,
    lock: Mutex<()>,
    quit: AtomicBool,
}

impl<'c> OneAtATime<'c> {
    fn new(inner: &'c dyn ConfirmationCallback) -> Self {
        OneAtATime {
            inner,
            lock: Mutex::new(()),
            quit: AtomicBool::new(false),
        }
    }
}

impl ConfirmationCallback for OneAtATime<'_> {
    fn request_confirmation(&self, request: &ConfirmationRequest) -> Decision {
        let _turn = match self.lock.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if self.quit.load(Ordering::SeqCst) {
            return Decision::Quit;
        }
        let decision = self.inner.request_confirmation(request);
        if decision == Decision::Quit {
            self.quit.store(true, Ordering::SeqCst);
        }
        decision
    }
}

/// What a resumed run knows about its previous attempt.
struct Resume {
    run_id: String,
    /// Step id → status recorded before the interruption.
    prior: std::collections::HashMap<String, StepState>,
    /// LLM tokens the run had used before.
    tokens: Usage,
    /// Model calls and dollars the run had spent before.
    spend: crate::plan::budget::Spend,
}

impl Executor {
    /// Marks runs left `running` by a process that no longer exists (same pid and start time, see
    /// `Store::runner_alive`) as `interrupted`.
    fn mark_abandoned_runs(&mut self) -> Result<(), ExecutionError> {
        for (run_id, _) in self.store.running_runs()? {
            if !self.store.runner_alive(&run_id)? {
                self.store.mark_interrupted(&run_id)?;
            }
        }
        Ok(())
    }
}

/// Records a step that never ran.
fn not_run(
    run: &mut RunContext,
    step: &Step,
    status: StepStatus,
    blocked_by: Option<String>,
) -> Result<StepResult, ExecutionError> {
    let kind = match status {
        StepStatus::Blocked => ErrorKind::Blocked,
        _ => ErrorKind::Skipped,
    };
    let message = match &blocked_by {
        Some(by) => format!("not run: depends on failed step {by:?}"),
        None => "not run: the run stopped before this step".to_string(),
    };
    let result = record_not_run(run, step, status, kind, message)?;
    run.emitter.emit(EventKind::StepBlocked {
        step_id: step.step_id.clone(),
        status: status.as_str().to_string(),
        blocked_by,
    });
    Ok(result)
}

/// Writes the outcome of a step that never reached a tool, and returns its result.
fn record_not_run(
    run: &mut RunContext,
    step: &Step,
    status: StepStatus,
    kind: ErrorKind,
    message: String,
) -> Result<StepResult, ExecutionError> {
    run.store.step_finished(
        run.emitter.run_id(),
        &step.step_id,
        &StepUpdate {
            status: status.state(),
            attempts: 0,
            started_at: None,
            finished_at: now_ms(),
            error_code: Some(kind.as_str()),
            error_message: Some(&message),
            tokens: (0, 0),
            tolerated: false,
        },
    )?;
    Ok(StepResult::not_run(step, status, Some((kind, message))))
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

/// Runs one step from start event to recorded outcome. Returns the result and whether the user quit.
fn run_step(
    run: &mut RunContext,
    plan: &Plan,
    step: &Step,
    vars: &Variables,
    index: usize,
    total: usize,
) -> Result<(StepResult, bool), ExecutionError> {
    let started_at = now_ms();
    let started = Instant::now();
    let args = substitute_arguments(step, vars);
    let summary = match (&args, run.registry.get(&step.tool)) {
        (Ok(a), Some(tool)) => tool.summary(a),
        _ => String::new(),
    };
    run.store
        .step_started(run.emitter.run_id(), &step.step_id, started_at)?;
    run.emitter.emit(EventKind::StepStarted {
        step_id: step.step_id.clone(),
        tool: step.tool.clone(),
        index,
        total,
        summary,
    });
    run.emitter.progress().on_step_start(step);

    let mut ctx = StepContext::new(run, step);
    let outcome = match args {
        Err(problems) => StepOutcome::failed(
            ErrorKind::InvalidArguments,
            problems
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join("; "),
        ),
        Ok(args) => {
            let pre = match &step.precondition {
                None => None,
                Some(p) => {
                    let verdict = match substitute_precondition(p, vars) {
                        Err(e) => Some(e),
                        Ok(p) => precondition::evaluate(&p, &args, &mut ctx)?,
                    };
                    ctx.run.emitter.emit(EventKind::PreconditionChecked {
                        step_id: step.step_id.clone(),
                        precondition: p.describe(),
                        passed: verdict.is_none(),
                        detail: verdict.clone(),
                    });
                    verdict
                }
            };
            match pre {
                Some(why) => StepOutcome::failed(
                    ErrorKind::PreconditionFailed,
                    format!("precondition failed: {why}"),
                ),
                None => match budget::before_step(ctx.run, step) {
                    Some(outcome) => outcome,
                    None => drivers::run(&mut ctx, plan, &args, vars)?,
                },
            }
        }
    };
    let quit = ctx.quit;
    let attempts = ctx.attempts;
    let tokens = ctx.tokens;
    let spend = Some(ctx.spend()).filter(|s| !s.is_zero());
    let execution_ids = std::mem::take(&mut ctx.execution_ids);
    drop(ctx);

    let duration_ms = started.elapsed().as_millis() as u64;
    // Stopped because a step beside it failed (`--jobs`), or because the user quit at another
    // step's prompt, not by a signal: cancelled, saying why.
    let interrupted = run.interrupt.load(Ordering::SeqCst);
    let stopped = match run.stopped_by.get() {
        Some(StopCause::Failed(by)) if run.cancel.load(Ordering::SeqCst) && !interrupted => {
            Some(format!(
                "step {by:?} failed while this one ran, and the run stops on its first failure"
            ))
        }
        Some(StopCause::Quit(by)) if *by != step.step_id && !interrupted => Some(format!(
            "the user quit (at a prompt of step {by:?}) while this one ran"
        )),
        _ => None,
    };
    let (status, kind, message) = match (&outcome.failure, stopped) {
        (None, _) => (StepStatus::Completed, None, None),
        (Some((_, m)), Some(why)) => (
            StepStatus::Cancelled,
            Some(ErrorKind::Cancelled),
            Some(format!("cancelled: {why} ({m})")),
        ),
        (Some((k, m)), None) => (StepStatus::Failed, Some(*k), Some(m.clone())),
    };
    // Tolerated (SPEC §2): a failure the plan lets the run go on past, unless the run is
    // stopping anyway (the user quit, a signal); recorded with the step, reported from the record.
    // `continue` tolerates the step's own failures, never a replay that no longer reproduces its
    // recording (docs/replay.md): such a run tests nothing, whatever the plan says.
    let tolerated = status == StepStatus::Failed
        && step.on_failure == OnFailure::Continue
        && kind != Some(ErrorKind::ReplayDiverged)
        && !quit
        && !run.cancel.load(Ordering::SeqCst);
    run.store.step_finished(
        run.emitter.run_id(),
        &step.step_id,
        &StepUpdate {
            status: status.state(),
            attempts,
            started_at: Some(started_at),
            finished_at: now_ms(),
            error_code: kind.map(ErrorKind::as_str),
            error_message: message.as_deref(),
            tokens: tokens.stored(),
            tolerated,
        },
    )?;
    let result = StepResult {
        step_id: step.step_id.clone(),
        tool: step.tool.clone(),
        status,
        error_kind: kind,
        error: message.clone(),
        attempts,
        duration_ms,
        output: outcome.output.as_deref().map(|o| {
            if step.tool == crate::tools::agent::NAME {
                call::truncate_with_note(o, run.agent.answer_chars)
            } else {
                crate::util::cut_at_char_boundary(o, STEP_OUTPUT_BYTES).to_string()
            }
        }),
        output_truncated: step.tool != crate::tools::agent::NAME
            && outcome
                .output
                .as_ref()
                .is_some_and(|o| o.len() > STEP_OUTPUT_BYTES),
        failure_output: outcome.excerpt.clone(),
        execution_ids,
        tolerated,
        spend,
    };
    match kind {
        None => {
            run.emitter.emit(EventKind::StepCompleted {
                step_id: step.step_id.clone(),
                duration_ms,
                attempts,
            });
            run.emitter.progress().on_step_complete(&result);
        }
        Some(k) => {
            run.emitter.emit(EventKind::StepFailed {
                step_id: step.step_id.clone(),
                error_code: k.as_str().to_string(),
                error: message.unwrap_or_default(),
                output: outcome.excerpt,
                duration_ms,
                tolerated: result.tolerated,
            });
            run.emitter.progress().on_step_failed(&result);
        }
    }
    Ok((result, quit))
}

/// The files the run created or changed since it first started (the subjects of its
/// attestation, `crate::workspace::changes`), leaving out the database and its journals.
fn written_files(
    root: &Path,
    store: &Store,
    run_id: &str,
) -> Result<crate::workspace::changes::Changes, StoreError> {
    let since = store.run(run_id)?.started_at;
    let db = store.path().map(Path::to_path_buf);
    let journals: Vec<PathBuf> = db
        .iter()
        .flat_map(|db| {
            ["", "-wal", "-shm", "-journal"].map(|suffix| {
                let mut p = db.as_os_str().to_owned();
                p.push(suffix);
                PathBuf::from(p)
            })
        })
        .collect();
    let skip: Vec<&Path> = journals.iter().map(PathBuf::as_path).collect();
    Ok(crate::workspace::changes::changed_since(root, since, &skip))
}

/// What the run header says that no other column keeps (issue 36): the approval the run is
/// allowed by, the sandbox's requested mode and notes, the parallelism, the MCP pins.
fn run_header(
    approved: &ApprovedPlan,
    sandbox: &OsSandbox,
    jobs: usize,
) -> crate::store::RunHeader {
    let auth = approved.authorization();
    crate::store::RunHeader {
        approval: crate::store::HeaderApproval {
            decided_by: approved.proof().approver(&auth.decided_by),
            decided_at: auth.decided_at,
            signature: approved.signature_state().to_string(),
            policy_sha256: auth.policy_sha256.clone().unwrap_or_default(),
            scheme: approved.proof().scheme.name().to_string(),
            claimed_by: Some(auth.decided_by.clone()),
            signers: approved.proof().signers.clone(),
            authorization: Some(auth.clone()),
            required: approved.proof().required,
        },
        sandbox_requested: sandbox.requested().as_str().to_string(),
        sandbox_notes: sandbox.notes().to_vec(),
        jobs,
        promises_held: crate::sandbox::promises::Promise::ALL
            .into_iter()
            .filter(|p| {
                p.gap(
                    sandbox.mode(),
                    sandbox.landlock_abi(),
                    sandbox.proxy().is_some(),
                )
                .is_none()
            })
            .map(|p| p.name().to_string())
            .collect(),
        promises_not_held: sandbox.not_held(),
        mcp: auth
            .mcp
            .iter()
            .map(|(name, pin)| {
                let identity = format!(
                    "{} {} (protocol {})",
                    pin.server_name, pin.server_version, pin.protocol_version
                );
                let tools = pin
                    .tools
                    .iter()
                    .map(|(t, p)| (t.clone(), p.sha256.clone()))
                    .collect();
                (name.clone(), crate::store::HeaderPin { identity, tools })
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Counts how many requests are inside it at once; holds each for a while.
    #[derive(Default)]
    struct Counting {
        inside: AtomicUsize,
        most: AtomicUsize,
    }

    impl ConfirmationCallback for Counting {
        fn request_confirmation(&self, _request: &ConfirmationRequest) -> Decision {
            let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(30));
            self.inside.fetch_sub(1, Ordering::SeqCst);
            Decision::Approve
        }
    }

    /// A confirmation request like a step deleting a file would make.
    fn a_request() -> ConfirmationRequest {
        ConfirmationRequest {
            run_id: "r".into(),
            step_id: "s".into(),
            tool: "file_delete".into(),
            arguments: serde_json::json!({}),
            reason: "test".into(),
            preview: None,
        }
    }

    #[test]
    fn an_embedders_callback_gets_one_request_at_a_time() {
        let inner = Counting::default();
        let gate = OneAtATime::new(&inner);
        let request = a_request();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| gate.request_confirmation(&request));
            }
        });
        assert_eq!(inner.most.load(Ordering::SeqCst), 1);
        // The callback alone would have taken them together.
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| inner.request_confirmation(&request));
            }
        });
        assert!(inner.most.load(Ordering::SeqCst) > 1);
    }

    /// Answers "quit" once, then counts any further question.
    #[derive(Default)]
    struct QuitsOnce {
        asked: AtomicUsize,
    }

    impl ConfirmationCallback for QuitsOnce {
        fn request_confirmation(&self, _request: &ConfirmationRequest) -> Decision {
            match self.asked.fetch_add(1, Ordering::SeqCst) {
                0 => Decision::Quit,
                _ => Decision::Approve,
            }
        }
    }

    #[test]
    fn after_quit_no_further_question_is_asked() {
        let inner = QuitsOnce::default();
        let gate = OneAtATime::new(&inner);
        let request = a_request();
        assert_eq!(gate.request_confirmation(&request), Decision::Quit);
        // A step that was waiting for its turn gets "quit" without a question.
        assert_eq!(gate.request_confirmation(&request), Decision::Quit);
        assert_eq!(inner.asked.load(Ordering::SeqCst), 1);
    }
}
