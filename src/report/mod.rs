//! Reports of a finished run in the formats CI systems read: a JUnit XML file (every CI server can
//! show one) and GitHub Actions workflow commands plus a job summary.
//!
//! Both are rendered from the [`ExecutionResult`] the executor returns, plus artifacts looked up
//! through an [`ArtifactSource`] (the tail of a failed command's stderr, `lsp_check` diagnostics),
//! so they say exactly what the database says. Every text that came from a plan, a model or a
//! command passes the run's [`Redactor`](crate::redact::Redactor) before it is written.

pub mod fleet;
pub mod github;
pub mod html;
pub mod junit;
pub mod recorded;
pub mod sarif;

use crate::executor::{ExecutionResult, StepResult};
use crate::store::Store;

/// Who approved a run — verified or claimed, under which scheme — and whether an attestation of
/// it was written (issue 42): what JUnit, the job summary, `show` and the HTML report say about
/// the run's proof, read from the record.
#[derive(Debug, Clone, Default)]
pub struct Provenance {
    /// The approval as the run checked it (`None` for runs recorded before it was kept).
    pub approval: Option<crate::store::HeaderApproval>,
    /// The latest attestation written of the run.
    pub attestation: Option<crate::store::AttestationRecord>,
}

impl Provenance {
    /// What `store` recorded of `run_id` (what cannot be read is left out).
    pub fn read(store: &Store, run_id: &str) -> Provenance {
        Provenance {
            approval: store.run_header(run_id).ok().flatten().map(|h| h.approval),
            attestation: store.attestation(run_id).ok().flatten(),
        }
    }

    /// `alice@example.com (verified (ssh))`, for one line; `None` when not recorded.
    pub fn approval_line(&self) -> Option<String> {
        self.approval.as_ref().map(|a| {
            format!(
                "{} ({}{})",
                a.decided_by,
                a.standing(),
                if a.scheme.is_empty() {
                    String::new()
                } else {
                    format!("; scheme {}", a.scheme)
                }
            )
        })
    }

    /// Where the attestation was written and what signed it, or `none`.
    pub fn attestation_line(&self) -> String {
        match &self.attestation {
            Some(a) => format!(
                "{} ({} file(s), signed by {}, sha256 {})",
                a.path, a.subjects, a.key, a.sha256
            ),
            None => "none".to_string(),
        }
    }
}

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
