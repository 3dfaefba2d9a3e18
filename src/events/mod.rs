//! The event model: one stream of typed events that feeds every output.
//!
//! The executor emits [`Event`]s; the JSONL writer serialises them, the human printer renders them,
//! and embedders receive them through [`crate::executor::ProgressCallback::on_event`]. Because all
//! outputs read the same events they cannot disagree about what happened.

pub mod human;
pub mod jsonl;
pub mod otel;

use serde::Serialize;
use serde_json::Value;

/// Version of the event schema (`docs/events.schema.json`); bumped on incompatible changes.
pub const EVENT_SCHEMA_VERSION: u32 = 1;

/// One event, as written to JSONL.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// Event schema version.
    pub v: u32,
    /// 1, 2, 3, ... within a run.
    pub seq: u64,
    /// Unix milliseconds.
    pub ts_ms: i64,
    /// The run this event belongs to.
    pub run_id: String,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

impl Event {
    /// An event written outside a run's own sequence (`run_refused`, stage events): the first and
    /// only of its stream position, about `run_id` (empty when no run is concerned).
    pub fn standalone(run_id: &str, kind: EventKind) -> Event {
        Event {
            v: EVENT_SCHEMA_VERSION,
            seq: 1,
            ts_ms: crate::error::now_ms(),
            run_id: run_id.to_string(),
            kind,
        }
    }
}

/// Who approved a run and how that is proven, as announced in `run_started` (issue 42).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ApprovalInfo {
    /// The verified principals (SSH signatures) or the name the approval claims.
    pub approver: String,
    /// `ssh` (approvers' keys, allowed_signers), `hmac` (the shared key) or `none`.
    pub scheme: String,
    /// Whether the approver is proven: `verified` under the scheme in force, else `claimed`.
    pub standing: String,
    /// The SSH signers' key fingerprints, in the order of `approver`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
    /// How many distinct approvers the policy required (SSH).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<usize>,
}

impl ApprovalInfo {
    /// The description of `approved`'s approval, as every report of the run gives it.
    pub fn of(approved: &crate::plan::ApprovedPlan) -> ApprovalInfo {
        let proof = approved.proof();
        ApprovalInfo {
            approver: proof.approver(&approved.authorization().decided_by),
            scheme: proof.scheme.name().to_string(),
            standing: if proof.verified {
                "verified"
            } else {
                "claimed"
            }
            .to_string(),
            keys: proof.signers.iter().map(|s| s.key.clone()).collect(),
            required: proof.required,
        }
    }

    /// One line for people: `alice@example.com (verified: ssh, 1 required)`.
    pub fn line(&self) -> String {
        match (self.scheme.as_str(), self.standing.as_str()) {
            ("ssh", "verified") => format!(
                "{} (verified: SSH signature{} under allowed_signers{})",
                self.approver,
                if self.keys.len() == 1 { "" } else { "s" },
                self.required
                    .map(|n| format!(", {n} required"))
                    .unwrap_or_default()
            ),
            ("hmac", "verified") => format!(
                "{} (claimed name; the approval is signed with the shared HMAC key, which any holder can use)",
                self.approver
            ),
            _ => format!(
                "{} (claimed: no approval key or allowed_signers in force)",
                self.approver
            ),
        }
    }
}

/// The OS sandbox of a run, as announced in `run_started` (SPEC §6: the mode used is printed,
/// recorded and carried by the event, so a reader never has to guess what contained the commands).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SandboxInfo {
    /// The mode actually used: `bwrap`, `landlock` or `none` (never `auto`).
    pub mode: String,
    /// The mode asked for (flag or policy): `auto`, `bwrap`, `landlock` or `none`.
    pub requested: String,
    /// The kernel's Landlock ABI, when Landlock is applied (the full ruleset in `landlock` mode;
    /// network and scopes only inside bwrap).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub landlock_abi: Option<u32>,
    /// What the sandbox does not restrict here, the limits, and secret exposure (for the header).
    pub notes: Vec<String>,
    /// Why `auto` chose this mode rather than bwrap: bwrap's refusal, its cause (AppArmor, a
    /// container, ...) and the fix. Absent when nothing was chosen for the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The sandbox's promises this mode does not hold here ([`crate::sandbox::promises`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_held: Vec<String>,
}

impl SandboxInfo {
    /// The description of `sandbox`, as every report of the run gives it.
    pub fn of(sandbox: &crate::sandbox::OsSandbox) -> SandboxInfo {
        SandboxInfo {
            mode: sandbox.mode().as_str().to_string(),
            requested: sandbox.requested().as_str().to_string(),
            landlock_abi: sandbox.landlock_abi(),
            notes: sandbox.notes().to_vec(),
            reason: sandbox.fallback().map(str::to_string),
            not_held: sandbox.not_held(),
        }
    }

    /// The mode as one phrase: `landlock (Landlock ABI 7) (requested: auto)`.
    pub fn describe(&self) -> String {
        let mut out = self.mode.clone();
        if let Some(abi) = self.landlock_abi {
            out.push_str(&format!(" (Landlock ABI {abi})"));
        }
        if self.requested != self.mode {
            out.push_str(&format!(" (requested: {})", self.requested));
        }
        out
    }

    /// What the run header, `preview` and the job summary say of the mode, one line each: the
    /// mode, why `auto` chose it, and each promise it does not hold.
    pub fn lines(&self) -> Vec<String> {
        let mut out = vec![self.describe()];
        if let Some(reason) = &self.reason {
            out.push(format!(
                "{} chose {} because {reason}",
                self.requested, self.mode
            ));
        }
        out.extend(
            self.not_held
                .iter()
                .map(|n| format!("not held in this mode: {n}")),
        );
        out
    }
}

/// Where the number of steps run at once came from (recorded with it: the header, `run_started`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobsSource {
    /// `--jobs` (or the embedder's `RunOptions::jobs`).
    Flag,
    /// The policy's `jobs` (smaller than the plan's, or the plan sets none).
    Policy,
    /// The plan's `defaults.jobs` (smaller than the policy's, or the policy sets none).
    Plan,
    /// Nothing set: one at a time.
    Default,
}

impl JobsSource {
    /// How the header names it (`--jobs`, `policy jobs`, `plan defaults.jobs`, `default`).
    pub fn label(self) -> &'static str {
        match self {
            JobsSource::Flag => "--jobs",
            JobsSource::Policy => "policy jobs",
            JobsSource::Plan => "plan defaults.jobs",
            JobsSource::Default => "default",
        }
    }
}

/// Step ids for a line of text: all of them up to 8, else the first 8 and how many more.
pub fn id_list(ids: &[String]) -> String {
    const SHOWN: usize = 8;
    if ids.len() <= SHOWN {
        ids.join(", ")
    } else {
        format!(
            "{}, … ({} more)",
            ids[..SHOWN].join(", "),
            ids.len() - SHOWN
        )
    }
}

/// How many steps a run takes at once, as announced in `run_started` and the header: a `--jobs`
/// that changes nothing says so (docs/parallel.md).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct JobsInfo {
    /// Steps run at once.
    pub jobs: usize,
    /// Where the number came from: `flag`, `policy`, `plan` or `default`.
    pub from: JobsSource,
    /// With more than one job: the steps that run alone all the same, grouped by why (each group
    /// says what would change it). Empty with one job, and for plans over 2 000 steps.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub alone: Vec<AloneSteps>,
}

/// Steps that run alone under any number of jobs, and why.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AloneSteps {
    /// Their ids, in plan order.
    pub steps: Vec<String>,
    /// Why, and what would let them run beside others.
    pub why: String,
}

/// What happened; serialised with a `type` tag.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// A run began.
    RunStarted {
        /// The plan's id.
        plan_id: String,
        /// Hash of the plan bytes.
        plan_sha256: String,
        /// The workspace root.
        workspace: String,
        /// The execution database file (absent for an in-memory store).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        database: Option<String>,
        /// Number of steps in the plan.
        steps: usize,
        /// The run being resumed (the same id), for a resumed run.
        #[serde(skip_serializing_if = "Option::is_none")]
        resumed_from: Option<String>,
        /// Steps a resumed run had already completed; they are not run again.
        #[serde(skip_serializing_if = "Option::is_none")]
        already_completed: Option<usize>,
        /// The OS sandbox the run's commands actually use.
        sandbox: SandboxInfo,
        /// Steps run at once, where the number came from, and what still runs alone.
        jobs: JobsInfo,
        /// Who approved the plan and how that is proven.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        approval: Option<ApprovalInfo>,
    },
    /// A step began.
    StepStarted {
        /// The step.
        step_id: String,
        /// Its tool.
        tool: String,
        /// 1-based index in execution order.
        index: usize,
        /// Total steps.
        total: usize,
        /// Short description (path, command).
        summary: String,
    },
    /// A step's precondition was evaluated.
    PreconditionChecked {
        /// The step.
        step_id: String,
        /// The precondition, described.
        precondition: String,
        /// Whether it held.
        passed: bool,
        /// Why not, when it did not.
        #[serde(skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// Confirmation was asked for.
    ConfirmationRequested {
        /// The step.
        step_id: String,
        /// The tool.
        tool: String,
        /// Why confirmation is needed.
        reason: String,
    },
    /// Confirmation was decided.
    ConfirmationDecided {
        /// The step.
        step_id: String,
        /// The tool.
        tool: String,
        /// `approve`, `approve_all`, `deny` or `quit`.
        decision: String,
    },
    /// A tool call is about to run.
    ToolCall {
        /// The step.
        step_id: String,
        /// Call id within the step.
        call_id: String,
        /// The tool.
        tool: String,
        /// Arguments (redacted on output).
        arguments: Value,
        /// 1-based attempt.
        attempt: u32,
        /// Agent turn, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        turn: Option<u32>,
        /// For an MCP tool (`mcp__SERVER__TOOL`): the server.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        server: Option<String>,
    },
    /// A tool call is still running.
    ToolHeartbeat {
        /// The step.
        step_id: String,
        /// Call id.
        call_id: String,
        /// The tool.
        tool: String,
        /// Milliseconds since the call started.
        elapsed_ms: u64,
    },
    /// A command's request through the run's network proxy (SPEC §6), as recorded on its
    /// execution: emitted when the command has finished, before its `tool_result`.
    NetworkRequest {
        /// The step.
        step_id: String,
        /// The execution it is recorded on.
        execution_id: String,
        /// Host, port, verdict, bytes each way, duration.
        #[serde(flatten)]
        request: crate::policy::network::NetworkRequest,
    },
    /// An MCP server differs from what the approval pinned (docs/mcp.md): the call is refused
    /// and the run ends with exit 36. Emitted before the call's `tool_result`.
    McpPinMismatch {
        /// The step.
        step_id: String,
        /// The `mcp__SERVER__TOOL` name called.
        tool: String,
        /// The server, as named in the policy.
        server: String,
        /// What changed, naming the tool.
        message: String,
    },
    /// A tool call finished (or was refused) and was recorded.
    ToolResult {
        /// The step.
        step_id: String,
        /// Call id.
        call_id: String,
        /// The recorded execution.
        execution_id: String,
        /// The tool.
        tool: String,
        /// Whether it succeeded.
        success: bool,
        /// Process exit code, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        /// Wall time.
        duration_ms: u64,
        /// Error kind on failure.
        #[serde(skip_serializing_if = "Option::is_none")]
        error_code: Option<String>,
        /// Error message on failure.
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// For a command: the program it ran (resolved path) and the SHA-256 of the file executed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        program: Option<crate::policy::host::program::Executed>,
        /// For an MCP tool (`mcp__SERVER__TOOL`): the server.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        server: Option<String>,
    },
    /// An LLM turn completed.
    LlmTurn {
        /// The step.
        step_id: String,
        /// 1-based turn.
        turn: u32,
        /// The recorded execution.
        execution_id: String,
        /// Tokens in the prompt.
        prompt_tokens: u64,
        /// Tokens generated.
        completion_tokens: u64,
        /// Tool calls the model asked for.
        tool_calls: usize,
        /// The server's finish reason.
        #[serde(skip_serializing_if = "Option::is_none")]
        finish_reason: Option<String>,
        /// Warnings (e.g. truncated answer).
        #[serde(skip_serializing_if = "Vec::is_empty")]
        warnings: Vec<String>,
        /// The model asked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        /// How long the request took (its last attempt).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        duration_ms: Option<u64>,
    },
    /// A budget ran out (docs/observability.md): the model call about to be sent (or the step
    /// about to start) was not, and the step fails with `budget_exhausted` (exit 38).
    BudgetExhausted {
        /// The step that stopped.
        step_id: String,
        /// Which budget: `tokens`, `wall_clock`, `model_calls` or `cost_usd`.
        budget: String,
        /// Whose: `plan` (the whole run's) or `step` (the agent step's own).
        scope: String,
        /// The limit, in `unit`s.
        limit: f64,
        /// What was used when the check was made, in `unit`s.
        used: f64,
        /// What the refused call was expected to add (0 when the budget was used up already).
        next: f64,
        /// `tokens`, `ms`, `calls` or `usd`.
        unit: String,
        /// The agent turn the refused model call was for (absent at a step's start).
        #[serde(skip_serializing_if = "Option::is_none")]
        turn: Option<u32>,
        /// The same, in words.
        message: String,
    },
    /// A transient failure will be retried.
    RetryScheduled {
        /// The step.
        step_id: String,
        /// What is retried (a tool name or `llm`).
        tool: String,
        /// The attempt that failed (1-based).
        attempt: u32,
        /// Delay before the next attempt.
        delay_ms: u64,
        /// Why.
        reason: String,
    },
    /// A step completed.
    StepCompleted {
        /// The step.
        step_id: String,
        /// Wall time.
        duration_ms: u64,
        /// Tool-call attempts made.
        attempts: u32,
    },
    /// A step failed.
    StepFailed {
        /// The step.
        step_id: String,
        /// Error kind.
        error_code: String,
        /// Message.
        error: String,
        /// The last lines its command printed on stdout and stderr (bounded), when it ran one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<String>,
        /// Wall time.
        duration_ms: u64,
        /// The plan allowed this failure (`on_failure: "continue"`): dependents still run.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        tolerated: bool,
    },
    /// A step did not run because a step it depends on failed, or the run stopped.
    StepBlocked {
        /// The step.
        step_id: String,
        /// `blocked` (a dependency failed) or `skipped` (the run stopped first).
        status: String,
        /// The failed step responsible, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        blocked_by: Option<String>,
    },
    /// The run ended.
    RunFinished {
        /// `completed`, `failed`, `interrupted` or `cancelled`.
        status: String,
        /// Process exit code.
        exit_code: i32,
        /// Wall time.
        duration_ms: u64,
        /// Steps completed.
        completed: usize,
        /// Steps failed (tolerated ones included).
        failed: usize,
        /// Of the failed steps, those whose failure the plan tolerated.
        #[serde(default)]
        tolerated: usize,
        /// Steps blocked or skipped.
        blocked: usize,
        /// Steps stopped because a step running beside them failed (`--jobs`).
        #[serde(default, skip_serializing_if = "is_zero")]
        cancelled: usize,
        /// The step whose failure decided the exit code: the first fatal failure by time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        first_failure: Option<String>,
        /// Tool calls refused as sandbox violations during the run (a model's refused escapes
        /// included), so refusals are never silent.
        violations: u64,
    },
    /// The invocation ended before or without a run (invalid plan, not authorized, usage or
    /// database error): the one event a `--jsonl` consumer gets instead of an empty stream. Its
    /// `run_id` is the run concerned (resume), else empty.
    RunRefused {
        /// The process exit code.
        exit_code: i32,
        /// The whole message, as printed on stderr.
        error: String,
        /// Every problem, each with where it is.
        problems: Vec<RefusalProblem>,
    },
    /// A stage around the executor began (`planner` for `draft`, `reviewer` for `review`); its
    /// conversations follow as runs of their own. `run_id` is empty: a stage spans runs.
    StageStarted {
        /// `planner` or `reviewer`.
        stage: String,
        /// The goal (planner) or the run judged (reviewer).
        subject: String,
    },
    /// A stage ended: what it produced, and the runs that recorded its conversations.
    StageCompleted {
        /// `planner` or `reviewer`.
        stage: String,
        /// `drafted`, `approve`, `request_changes` or `failed`.
        outcome: String,
        /// The process exit code this stage calls for.
        exit_code: i32,
        /// The conversation runs, one per attempt.
        run_ids: Vec<String>,
    },
}

/// One reason an invocation was refused, with its location.
#[derive(Debug, Clone, Serialize)]
pub struct RefusalProblem {
    /// Where: `steps[2].arguments.path`, the plan file, `command line`, the database file, ...
    pub location: String,
    /// What is wrong.
    pub message: String,
    /// `invalid`, `sandbox`, `usage`, `unauthorized`, `rerun_needed`, `promise_not_held` or
    /// `internal`.
    pub kind: String,
    /// The line of the plan file, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
}

impl EventKind {
    /// The `type` tag, for filtering without serialising.
    pub fn type_name(&self) -> &'static str {
        match self {
            EventKind::RunStarted { .. } => "run_started",
            EventKind::StepStarted { .. } => "step_started",
            EventKind::PreconditionChecked { .. } => "precondition_checked",
            EventKind::ConfirmationRequested { .. } => "confirmation_requested",
            EventKind::ConfirmationDecided { .. } => "confirmation_decided",
            EventKind::ToolCall { .. } => "tool_call",
            EventKind::ToolHeartbeat { .. } => "tool_heartbeat",
            EventKind::ToolResult { .. } => "tool_result",
            EventKind::NetworkRequest { .. } => "network_request",
            EventKind::McpPinMismatch { .. } => "mcp_pin_mismatch",
            EventKind::LlmTurn { .. } => "llm_turn",
            EventKind::BudgetExhausted { .. } => "budget_exhausted",
            EventKind::RetryScheduled { .. } => "retry_scheduled",
            EventKind::StepCompleted { .. } => "step_completed",
            EventKind::StepFailed { .. } => "step_failed",
            EventKind::StepBlocked { .. } => "step_blocked",
            EventKind::RunFinished { .. } => "run_finished",
            EventKind::RunRefused { .. } => "run_refused",
            EventKind::StageStarted { .. } => "stage_started",
            EventKind::StageCompleted { .. } => "stage_completed",
        }
    }
}

/// For `skip_serializing_if`: a count that is zero is left out.
fn is_zero(n: &usize) -> bool {
    *n == 0
}
