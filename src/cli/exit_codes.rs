//! Which library error ends the process with which exit code (SPEC §10), in one file. The
//! library returns typed errors and never decides a process exit code; the binary asks here.
//! What each number means is [`crate::ExitCode`]'s vocabulary (`src/error.rs`), shared with the record:
//! a run's own outcome — its first fatal failure's [`crate::ErrorKind`] — is stored with the run
//! (SPEC §9), so that mapping stays beside the kinds.

use crate::error::exit;
use crate::executor::ExecutionError;
use crate::plan::{PlanError, ProblemKind};
use crate::report::html::HtmlError;
use crate::runner::RunnerError;
use crate::runner::import::ImportFailed;
use crate::runner::session::SessionError;
use crate::stages::StageError;
use crate::store::StoreError;
use crate::store::merge::MergeError;
use crate::workspace::state::StateDirError;

/// Whether every problem of an invalid plan is a sandbox violation caught before anything ran
/// (exit 32 instead of 2).
fn all_sandbox(problems: &[crate::plan::Problem]) -> bool {
    !problems.is_empty() && problems.iter().all(|p| p.kind == ProblemKind::Sandbox)
}

impl PlanError {
    /// 32 when every problem is a sandbox violation (caught early), else 2.
    pub fn exit_code(&self) -> i32 {
        match self {
            PlanError::Invalid { problems, .. } if all_sandbox(problems) => exit::SANDBOX,
            _ => exit::USAGE,
        }
    }
}

impl ExecutionError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            ExecutionError::Unauthorized(_) => exit::UNAUTHORIZED,
            ExecutionError::InvalidPlan(problems) if all_sandbox(problems) => exit::SANDBOX,
            ExecutionError::InvalidPlan(_) | ExecutionError::CannotResume(_) => exit::USAGE,
            ExecutionError::RerunNeeded { .. } => exit::RERUN_NEEDED,
            ExecutionError::Store(_) => exit::INTERNAL,
        }
    }
}

impl SessionError {
    /// The process exit code for this error: the caller's mistake (2) unless the database or the
    /// file system failed (1).
    pub fn exit_code(&self) -> i32 {
        match self {
            SessionError::NotADirectory(_)
            | SessionError::Workspace { .. }
            | SessionError::DatabaseDirectory { .. }
            | SessionError::NoDatabase(_)
            | SessionError::Policy(_)
            | SessionError::Sandbox(_)
            | SessionError::Mcp(_)
            | SessionError::State(StateDirError::Refused { .. }) => exit::USAGE,
            SessionError::Plan(e) => e.exit_code(),
            SessionError::Store(e) => e.exit_code(),
            SessionError::State(StateDirError::Io { .. }) => exit::INTERNAL,
        }
    }
}

impl StoreError {
    /// A run or execution id that names nothing is the caller's mistake (2); any other failure
    /// of the database is ours (1).
    pub fn exit_code(&self) -> i32 {
        match self {
            StoreError::NotFound(_) => exit::USAGE,
            _ => exit::INTERNAL,
        }
    }
}

impl crate::attest::AttestError {
    /// A run that names nothing, has not finished or cannot be attested is the caller's mistake
    /// (2); the database failing is ours (1).
    pub fn exit_code(&self) -> i32 {
        match self {
            crate::attest::AttestError::Store(e) => e.exit_code(),
            _ => exit::USAGE,
        }
    }
}

impl crate::attest::verify::VerifyFailure {
    /// `verify`'s codes (docs/attestations.md): 42 the envelope, 43 a subject, 44 the approval,
    /// 45 the run.
    pub fn exit_code(&self) -> i32 {
        use crate::attest::verify::VerifyFailure;
        match self {
            VerifyFailure::Envelope(_) => exit::ATTESTATION_SIGNATURE,
            VerifyFailure::Subject(_) => exit::ATTESTATION_SUBJECT,
            VerifyFailure::Approval(_) => exit::ATTESTATION_APPROVAL,
            VerifyFailure::RunFailed { .. } => exit::ATTESTED_RUN_FAILED,
        }
    }
}

impl HtmlError {
    /// The database's failure as [`StoreError::exit_code`] says; a page that cannot be written, 1.
    pub fn exit_code(&self) -> i32 {
        match self {
            HtmlError::Store(e) => e.exit_code(),
            HtmlError::Io(_) => exit::INTERNAL,
        }
    }
}

impl RunnerError {
    /// The process exit code for this error (SPEC §10).
    pub fn exit_code(&self) -> i32 {
        match self {
            RunnerError::Setup(_)
            | RunnerError::ResumeSettings { .. }
            | RunnerError::ApprovalInput(_)
            | RunnerError::Sandbox(_)
            | RunnerError::Replay { .. }
            | RunnerError::Signing { .. }
            | RunnerError::SignatureFile { .. }
            | RunnerError::SignatureNeeded { .. }
            | RunnerError::NotTheSigner { .. }
            | RunnerError::WeakeningNotExplicit => exit::USAGE,
            RunnerError::State(StateDirError::Refused { .. }) => exit::USAGE,
            RunnerError::State(_) => exit::INTERNAL,
            RunnerError::Plan(e) => e.exit_code(),
            RunnerError::Unauthorized { .. }
            | RunnerError::Rejected { .. }
            | RunnerError::SandboxWeakened { .. } => exit::UNAUTHORIZED,
            RunnerError::PromisesNotHeld { .. } => exit::PROMISE_NOT_HELD,
            RunnerError::ApprovalWrite { .. } => exit::INTERNAL,
            RunnerError::Store(_) => exit::INTERNAL,
            RunnerError::Execution(e) => e.exit_code(),
            RunnerError::Session(e) => e.exit_code(),
        }
    }
}

impl ImportFailed {
    /// The process exit code for this error: the caller's mistake (2) unless writing failed (1).
    pub fn exit_code(&self) -> i32 {
        match self {
            ImportFailed::UnknownKind(_)
            | ImportFailed::Read { .. }
            | ImportFailed::Convert { .. }
            | ImportFailed::Exists { .. } => exit::USAGE,
            ImportFailed::Write { .. } => exit::INTERNAL,
            ImportFailed::Session(e) => e.exit_code(),
        }
    }
}

impl StageError {
    /// The process exit code for this error (SPEC §10): a conversation that ran ends with its
    /// run's own code.
    pub fn exit_code(&self) -> i32 {
        match self {
            StageError::Exhausted { .. } | StageError::Input(_) => exit::USAGE,
            StageError::Conversation { exit_code, .. } => *exit_code,
            StageError::Execution(e) => e.exit_code(),
        }
    }
}

impl MergeError {
    /// The process exit code for this error (issue 48): 46 a conflict, 47 a database merge
    /// cannot take, 2 the caller's mistake, 1 reading or writing failed.
    pub fn exit_code(&self) -> i32 {
        match self {
            MergeError::Conflict { .. } => exit::MERGE_CONFLICT,
            MergeError::Input { .. } | MergeError::OutputBusy { .. } => exit::MERGE_REFUSED,
            MergeError::Usage(_) => exit::USAGE,
            MergeError::Io { .. } | MergeError::Sql { .. } => exit::INTERNAL,
        }
    }
}
