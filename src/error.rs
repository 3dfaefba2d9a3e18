//! The failure vocabulary shared by tools, steps, the database and the CLI.
//!
//! Every way a step can end badly has exactly one [`ErrorKind`]. The kind decides the process exit code
//! (SPEC §10), the `error_code` column in the database and the `error_code` field of events, so those
//! three can never disagree.

use serde::Serialize;

/// Why a step, tool call or run did not succeed.
///
/// Kept as a closed enum so that the mapping to exit codes is checked by the compiler in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// Arguments did not match the tool's schema, or a value was malformed.
    InvalidArguments,
    /// A path or command tried to leave the sandbox or was forbidden by policy.
    SandboxViolation,
    /// The confirmation callback said no.
    ConfirmationDenied,
    /// The step's precondition did not hold, so its tool was never called.
    PreconditionFailed,
    /// The tool ran and reported failure (non-zero exit, missing file, compile errors, ...).
    ToolFailed,
    /// The `verify` command still failed after the last cycle.
    VerificationFailed,
    /// A tool call or command exceeded its time limit.
    Timeout,
    /// An agent step used all of its turns without finishing.
    TurnLimit,
    /// An agent step repeated the same tool call with the same result three times in a row
    /// (stuck detection): ended early instead of spending every remaining turn. Exit 31 like
    /// [`ErrorKind::TurnLimit`], since both mean "the agent did not get there".
    Stuck,
    /// The run's token budget was used up.
    TokenBudget,
    /// The LLM server could not be used (auth, missing model, malformed answers, retries exhausted).
    LlmError,
    /// A step that depends on a failed step; it never ran.
    Blocked,
    /// A step not run because an earlier step stopped the run.
    Skipped,
    /// The run was interrupted by a signal or the user quitting a prompt.
    Interrupted,
    /// Something inside acode-run itself went wrong (database, I/O outside any tool).
    Internal,
}

impl ErrorKind {
    /// The stable identifier stored in the database and emitted in events.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidArguments => "invalid_arguments",
            ErrorKind::SandboxViolation => "sandbox_violation",
            ErrorKind::ConfirmationDenied => "confirmation_denied",
            ErrorKind::PreconditionFailed => "precondition_failed",
            ErrorKind::ToolFailed => "tool_failed",
            ErrorKind::VerificationFailed => "verification_failed",
            ErrorKind::Timeout => "timeout",
            ErrorKind::TurnLimit => "turn_limit",
            ErrorKind::Stuck => "stuck",
            ErrorKind::TokenBudget => "token_budget",
            ErrorKind::LlmError => "llm_error",
            ErrorKind::Blocked => "blocked",
            ErrorKind::Skipped => "skipped",
            ErrorKind::Interrupted => "interrupted",
            ErrorKind::Internal => "internal",
        }
    }

    /// The process exit code a run gets when this kind is its first fatal failure (SPEC §10).
    pub fn exit_code(self) -> i32 {
        match self {
            ErrorKind::Internal => exit::INTERNAL,
            ErrorKind::TurnLimit | ErrorKind::Stuck => exit::TURN_LIMIT,
            ErrorKind::SandboxViolation => exit::SANDBOX,
            ErrorKind::ConfirmationDenied => exit::DENIED,
            ErrorKind::Timeout => exit::TIMEOUT,
            ErrorKind::Interrupted => exit::INTERRUPTED,
            ErrorKind::InvalidArguments
            | ErrorKind::PreconditionFailed
            | ErrorKind::ToolFailed
            | ErrorKind::VerificationFailed
            | ErrorKind::TokenBudget
            | ErrorKind::LlmError
            | ErrorKind::Blocked
            | ErrorKind::Skipped => exit::STEP_FAILED,
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Process exit codes, named once so the CLI, the executor and the tests agree (SPEC §10).
pub mod exit {
    /// Every step completed.
    pub const OK: i32 = 0;
    /// Internal error (database, I/O).
    pub const INTERNAL: i32 = 1;
    /// Usage error or invalid plan.
    pub const USAGE: i32 = 2;
    /// Plan not authorized.
    pub const UNAUTHORIZED: i32 = 3;
    /// `resume` stopped before running anything: a step cut off mid-way is not safe to run twice;
    /// the run stays interrupted and `--rerun-interrupted` continues it.
    pub const RERUN_NEEDED: i32 = 4;
    /// A step failed.
    pub const STEP_FAILED: i32 = 30;
    /// Agent turn limit reached.
    pub const TURN_LIMIT: i32 = 31;
    /// Sandbox violation.
    pub const SANDBOX: i32 = 32;
    /// Confirmation denied.
    pub const DENIED: i32 = 33;
    /// Step timed out.
    pub const TIMEOUT: i32 = 34;
    /// Interrupted by a signal.
    pub const INTERRUPTED: i32 = 130;
    /// The reviewer stage asked for changes (`acode-run review`).
    pub const REVIEW_CHANGES: i32 = 35;
}

/// Milliseconds since the Unix epoch: the one timestamp format used in the database and events.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
