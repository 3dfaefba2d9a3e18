//! The failure vocabulary shared by tools, steps, the database and the CLI.
//!
//! Every way a step can end badly has exactly one [`ErrorKind`]. The kind decides the process exit code
//! (SPEC §10), the `error_code` column in the database and the `error_code` field of events, so those
//! three can never disagree.

use serde::{Deserialize, Serialize};

/// Why a step, tool call or run did not succeed.
///
/// Kept as a closed enum so that the mapping to exit codes is checked by the compiler in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
    /// A budget of the approved plan or of an agent step (tokens, wall clock, model calls, cost;
    /// `--token-budget` lowers the tokens one) is used up, or the next model call would overspend
    /// it: the call is not made. Exit 38.
    BudgetExhausted,
    /// The LLM server could not be used (auth, missing model, malformed answers, retries exhausted).
    LlmError,
    /// A step that depends on a failed step; it never ran.
    Blocked,
    /// A step not run because an earlier step stopped the run.
    Skipped,
    /// The run was interrupted by a signal or the user quitting a prompt.
    Interrupted,
    /// A step running beside another (`--jobs`) was stopped because that one failed fatally.
    Cancelled,
    /// Something inside acode-run itself went wrong (database, I/O outside any tool).
    Internal,
    /// An MCP server differs from what was approved (identity, a tool's description or schema,
    /// or it announced a changed tool list): exit 36.
    McpChanged,
    /// A replayed agent step (`run --replay`) was about to send the model a request that differs
    /// from the recorded one (docs/replay.md): exit 37.
    ReplayDiverged,
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
            ErrorKind::BudgetExhausted => "budget_exhausted",
            ErrorKind::LlmError => "llm_error",
            ErrorKind::Blocked => "blocked",
            ErrorKind::Skipped => "skipped",
            ErrorKind::Interrupted => "interrupted",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Internal => "internal",
            ErrorKind::McpChanged => "mcp_changed",
            ErrorKind::ReplayDiverged => "replay_diverged",
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
            ErrorKind::McpChanged => exit::MCP_CHANGED,
            ErrorKind::ReplayDiverged => exit::REPLAY_DIVERGED,
            ErrorKind::BudgetExhausted => exit::BUDGET_EXHAUSTED,
            ErrorKind::InvalidArguments
            | ErrorKind::PreconditionFailed
            | ErrorKind::ToolFailed
            | ErrorKind::VerificationFailed
            | ErrorKind::LlmError
            | ErrorKind::Blocked
            | ErrorKind::Skipped
            | ErrorKind::Cancelled => exit::STEP_FAILED,
        }
    }
}

/// How a run ended, as far as its exit code goes: recorded with the run (SPEC §9), so the
/// mapping lives here beside the kinds rather than in the CLI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// Every step completed, or every failure was tolerated.
    Completed,
    /// The first fatal failure was of this kind.
    Failed(ErrorKind),
    /// "quit" at a prompt: a denial that ends the run for good.
    Quit,
    /// Stopped by a signal (or Ctrl-C).
    Interrupted,
}

impl RunEnd {
    /// The exit code a run that ended this way records and the binary exits with.
    pub fn exit_code(self) -> i32 {
        match self {
            RunEnd::Completed => exit::OK,
            RunEnd::Failed(kind) => kind.exit_code(),
            RunEnd::Quit => exit::DENIED,
            RunEnd::Interrupted => exit::INTERRUPTED,
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every exit code acode-run uses (SPEC §10), defined once: the binary maps each error to one of
/// these, and the [`exit`] constants are these values for code that works with raw `i32`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum ExitCode {
    /// Every step completed (or every failure was tolerated); a review approved.
    Ok = 0,
    /// Internal error (database, I/O).
    Internal = 1,
    /// Usage error or invalid plan.
    Usage = 2,
    /// Plan not authorized (pending, rejected, changed since approval, policy or skill changed).
    Unauthorized = 3,
    /// `resume` stopped before running anything: a step cut off mid-way is not safe to run twice;
    /// the run stays interrupted and `--rerun-interrupted` continues it.
    RerunNeeded = 4,
    /// A step failed.
    StepFailed = 30,
    /// Agent turn limit reached (or the agent was stuck).
    TurnLimit = 31,
    /// Sandbox violation.
    Sandbox = 32,
    /// Confirmation denied.
    Denied = 33,
    /// Step timed out.
    Timeout = 34,
    /// The reviewer stage asked for changes (`acode-run review`).
    ReviewChanges = 35,
    /// An MCP server differs from what was approved.
    McpChanged = 36,
    /// A replay (`run --replay`) diverged from the recorded run (docs/replay.md).
    ReplayDiverged = 37,
    /// A budget in the approved plan (or `--token-budget`) ran out: the run stopped before the
    /// model call that would overspend it.
    BudgetExhausted = 38,
    /// A sandbox promise named by `--require` does not hold here (`doctor`, `run`): the pipeline
    /// fails closed before any step runs.
    PromiseNotHeld = 39,
    /// `import`: the plan was written, but some step lost something in conversion.
    ImportLossy = 40,
    /// `import`: some step (or the whole plan) could not be converted.
    ImportRefused = 41,
    /// `verify`: the attestation is not a valid envelope signed by the key given.
    AttestationSignature = 42,
    /// `verify`: a file the attestation names differs from the one in the workspace.
    AttestationSubject = 43,
    /// `verify`: the approval inside the attestation does not verify against allowed_signers.
    AttestationApproval = 44,
    /// `verify`: the attested run did not complete (its exit code was not 0).
    AttestedRunFailed = 45,
    /// `merge`: one run id with different content in two files (issue 48); nothing was merged.
    MergeConflict = 46,
    /// `merge`: a database it cannot take (not acode-run's, damaged or truncated, from a newer
    /// schema, an approval that does not verify); nothing was merged.
    MergeRefused = 47,
    /// Interrupted by a signal.
    Interrupted = 130,
}

impl ExitCode {
    /// Every code, for documentation and tests.
    pub const ALL: [ExitCode; 24] = [
        ExitCode::Ok,
        ExitCode::Internal,
        ExitCode::Usage,
        ExitCode::Unauthorized,
        ExitCode::RerunNeeded,
        ExitCode::StepFailed,
        ExitCode::TurnLimit,
        ExitCode::Sandbox,
        ExitCode::Denied,
        ExitCode::Timeout,
        ExitCode::ReviewChanges,
        ExitCode::McpChanged,
        ExitCode::ReplayDiverged,
        ExitCode::BudgetExhausted,
        ExitCode::PromiseNotHeld,
        ExitCode::ImportLossy,
        ExitCode::ImportRefused,
        ExitCode::AttestationSignature,
        ExitCode::AttestationSubject,
        ExitCode::AttestationApproval,
        ExitCode::AttestedRunFailed,
        ExitCode::MergeConflict,
        ExitCode::MergeRefused,
        ExitCode::Interrupted,
    ];

    /// What the code means, in the words `--help`, the README and `docs/ci.md` show: the one
    /// place a code's meaning is written, so the three cannot drift apart.
    pub const fn description(self) -> &'static str {
        match self {
            ExitCode::Ok => {
                "every step completed (or every failure was tolerated); a review approved"
            }
            ExitCode::Internal => "internal error (database, I/O)",
            ExitCode::Usage => {
                "usage error or invalid plan; `draft`: no valid plan within the attempts"
            }
            ExitCode::Unauthorized => {
                "plan not authorized (pending, rejected, changed since approval, policy or skill changed)"
            }
            ExitCode::RerunNeeded => {
                "`resume` ran nothing: a step cut off mid-way needs `--rerun-interrupted`"
            }
            ExitCode::StepFailed => {
                "a step failed (tool error, precondition failed, verification failed)"
            }
            ExitCode::TurnLimit => "an agent step reached its turn limit (or was stuck)",
            ExitCode::Sandbox => "sandbox violation",
            ExitCode::Denied => "confirmation denied",
            ExitCode::Timeout => "a step timed out",
            ExitCode::ReviewChanges => "`review` requested changes",
            ExitCode::McpChanged => "an MCP server differs from what was approved",
            ExitCode::ReplayDiverged => {
                "`run --replay`: a request to the model differs from the recorded run's"
            }
            ExitCode::BudgetExhausted => {
                "a budget of the plan or a step (tokens, wall clock, model calls, cost) ran out"
            }
            ExitCode::PromiseNotHeld => {
                "a sandbox promise named by `--require` does not hold here (`doctor`, `run`); nothing ran"
            }
            ExitCode::ImportLossy => "`import` wrote a plan with losses",
            ExitCode::ImportRefused => "`import` refused a step or the plan",
            ExitCode::AttestationSignature => {
                "`verify`: not an attestation signed by the given key (malformed, edited, or another key)"
            }
            ExitCode::AttestationSubject => {
                "`verify`: a file the attestation names is missing or differs in the workspace"
            }
            ExitCode::AttestationApproval => {
                "`verify`: the approval inside does not verify against the allowed_signers given"
            }
            ExitCode::AttestedRunFailed => {
                "`verify`: the attested run did not complete (exit code not 0)"
            }
            ExitCode::MergeConflict => {
                "`merge`: one run id with different content in two files; nothing merged"
            }
            ExitCode::MergeRefused => {
                "`merge`: a database it cannot take (not acode-run's, damaged, newer schema, an approval that does not verify); nothing merged"
            }
            ExitCode::Interrupted => {
                "interrupted (Ctrl-C, SIGTERM); `acode-run resume RUN_ID` continues"
            }
        }
    }

    /// Every code as a Markdown table (`| code | meaning |`), generated from [`ExitCode::ALL`]:
    /// the README and `docs/ci.md` hold exactly this text (a test compares them).
    pub fn markdown_table() -> String {
        let mut s = String::from("| code | meaning |\n|---|---|\n");
        for c in Self::ALL {
            s.push_str(&format!("| {} | {} |\n", c.code(), c.description()));
        }
        s
    }

    /// Every code as aligned plain text for `--help`, generated from [`ExitCode::ALL`].
    pub fn help_table() -> String {
        let mut s = String::from("Exit codes:\n");
        for c in Self::ALL {
            s.push_str(&format!("  {:>3}  {}\n", c.code(), c.description()));
        }
        s
    }

    /// The process exit status.
    pub const fn code(self) -> i32 {
        self as i32
    }

    /// The code for a process exit status, if it is one of acode-run's.
    pub fn from_code(code: i32) -> Option<ExitCode> {
        Self::ALL.into_iter().find(|c| c.code() == code)
    }
}

/// The [`ExitCode`] values as plain `i32`s (what `std::process::exit` and the result types carry).
pub mod exit {
    use super::ExitCode;
    /// Every step completed.
    pub const OK: i32 = ExitCode::Ok.code();
    /// Internal error (database, I/O).
    pub const INTERNAL: i32 = ExitCode::Internal.code();
    /// Usage error or invalid plan.
    pub const USAGE: i32 = ExitCode::Usage.code();
    /// Plan not authorized.
    pub const UNAUTHORIZED: i32 = ExitCode::Unauthorized.code();
    /// `resume` needs `--rerun-interrupted`.
    pub const RERUN_NEEDED: i32 = ExitCode::RerunNeeded.code();
    /// A step failed.
    pub const STEP_FAILED: i32 = ExitCode::StepFailed.code();
    /// Agent turn limit reached.
    pub const TURN_LIMIT: i32 = ExitCode::TurnLimit.code();
    /// Sandbox violation.
    pub const SANDBOX: i32 = ExitCode::Sandbox.code();
    /// Confirmation denied.
    pub const DENIED: i32 = ExitCode::Denied.code();
    /// Step timed out.
    pub const TIMEOUT: i32 = ExitCode::Timeout.code();
    /// Interrupted by a signal.
    pub const INTERRUPTED: i32 = ExitCode::Interrupted.code();
    /// The reviewer stage asked for changes.
    pub const REVIEW_CHANGES: i32 = ExitCode::ReviewChanges.code();
    /// `import`: written, with losses.
    pub const IMPORT_LOSSY: i32 = ExitCode::ImportLossy.code();
    /// `import`: a step or the plan refused.
    pub const IMPORT_REFUSED: i32 = ExitCode::ImportRefused.code();
    /// An MCP server differs from what was approved.
    pub const MCP_CHANGED: i32 = ExitCode::McpChanged.code();
    /// `merge`: one run id, two contents.
    pub const MERGE_CONFLICT: i32 = ExitCode::MergeConflict.code();
    /// `merge`: a database it cannot take.
    pub const MERGE_REFUSED: i32 = ExitCode::MergeRefused.code();
    /// A replay diverged from the recorded run.
    pub const REPLAY_DIVERGED: i32 = ExitCode::ReplayDiverged.code();
    /// `verify`: bad envelope or signature.
    pub const ATTESTATION_SIGNATURE: i32 = ExitCode::AttestationSignature.code();
    /// `verify`: a subject differs from the file.
    pub const ATTESTATION_SUBJECT: i32 = ExitCode::AttestationSubject.code();
    /// `verify`: the approval inside does not verify.
    pub const ATTESTATION_APPROVAL: i32 = ExitCode::AttestationApproval.code();
    /// `verify`: the attested run failed.
    pub const ATTESTED_RUN_FAILED: i32 = ExitCode::AttestedRunFailed.code();
    /// A budget ran out.
    pub const BUDGET_EXHAUSTED: i32 = ExitCode::BudgetExhausted.code();
    /// A sandbox promise named by `--require` does not hold.
    pub const PROMISE_NOT_HELD: i32 = ExitCode::PromiseNotHeld.code();
}

/// Milliseconds since the Unix epoch: the one timestamp format used in the database and events.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Formats Unix milliseconds as UTC `YYYY-MM-DD HH:MM:SS`: how decisions and runs are shown
/// to people (the database keeps the milliseconds).
pub fn format_ms(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

#[cfg(test)]
mod exit_code_tests {
    use super::ExitCode;

    /// Every code round-trips through its number, and the help text lists each one.
    #[test]
    fn every_exit_code_round_trips_and_is_in_the_help_table() {
        let help = ExitCode::help_table();
        for c in ExitCode::ALL {
            assert_eq!(ExitCode::from_code(c.code()), Some(c));
            assert!(
                help.contains(&format!("{:>3}  {}", c.code(), c.description())),
                "{c:?} missing from {help}"
            );
        }
        assert_eq!(ExitCode::from_code(7), None);
    }
}
