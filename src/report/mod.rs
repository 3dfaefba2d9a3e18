//! Reports of a finished run in the formats CI systems read: a JUnit XML file (every CI server can
//! show one) and GitHub Actions workflow commands plus a job summary.
//!
//! Both are rendered from the [`ExecutionResult`] the executor returns, plus artifacts looked up
//! through an [`ArtifactSource`] (the tail of a failed command's stderr, `lsp_check` diagnostics),
//! so they say exactly what the database says. Every text that came from a plan, a model or a
//! command passes the run's [`Redactor`](crate::redact::Redactor) before it is written.

pub mod github;
pub mod html;
pub mod junit;

use crate::executor::{ExecutionResult, StepResult};
use crate::store::Store;

/// An invocation that ended before any step ran (invalid plan, not authorized, usage error), as
/// every CI report shows it: what it was about, its exit code, its message and every problem.
#[derive(Debug, Clone, Copy)]
pub struct Refusal<'a> {
    /// The plan or run the command was about.
    pub subject: &'a str,
    /// The exit code (SPEC §10).
    pub exit_code: i32,
    /// What went wrong.
    pub message: &'a str,
    /// Each problem with its location.
    pub problems: &'a [String],
}

impl Refusal<'_> {
    /// The message and then one `- problem` line for each problem the message does not already
    /// list (an invalid plan's message names every problem), redacted: the body the annotation
    /// and the JUnit failure share, each problem in it once.
    pub fn text(&self, redactor: &crate::redact::Redactor) -> String {
        let mut text = redactor.redact(self.message).into_owned();
        for p in self.problems {
            let p = redactor.redact(p);
            if text.contains(p.as_ref()) {
                continue;
            }
            text.push_str("\n- ");
            text.push_str(&p);
        }
        text
    }
}

/// Where a report finds the artifacts of a step's executions; the store in the binary, a map in
/// tests.
pub trait ArtifactSource {
    /// The content of `artifact_type` recorded for `execution_id`, if there is one.
    fn artifact(&self, execution_id: &str, artifact_type: &str) -> Option<String>;
}

impl ArtifactSource for Store {
    fn artifact(&self, execution_id: &str, artifact_type: &str) -> Option<String> {
        Store::artifact(self, execution_id, artifact_type)
            .ok()
            .map(|a| a.content)
    }
}

/// The newest artifact of `artifact_type` among the step's executions (the last attempt is what
/// failed).
pub(crate) fn last_artifact(
    step: &StepResult,
    source: &dyn ArtifactSource,
    artifact_type: &str,
) -> Option<String> {
    step.execution_ids
        .iter()
        .rev()
        .find_map(|id| source.artifact(id, artifact_type))
}

/// Counts of a run's steps by outcome, shared by the JUnit totals and the job summary.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Steps that completed.
    pub completed: usize,
    /// Steps that failed and made the run fail.
    pub failed: usize,
    /// Steps that failed with `on_failure: "continue"`.
    pub tolerated: usize,
    /// Steps that were blocked or skipped.
    pub not_run: usize,
}

impl Counts {
    /// Counts `result`'s steps.
    pub fn of(result: &ExecutionResult) -> Self {
        use crate::executor::StepStatus::*;
        let mut c = Counts::default();
        for s in &result.steps {
            match s.status {
                Completed => c.completed += 1,
                Failed if s.tolerated => c.tolerated += 1,
                Failed => c.failed += 1,
                Blocked | Skipped | Cancelled => c.not_run += 1,
            }
        }
        c
    }
}
