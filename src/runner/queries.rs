//! What `runs` and `show` ask of the record, as operations on a [`Session`]: typed answers the
//! command line prints (as text or JSON) and the MCP server returns, read from an existing
//! database only (asking never creates one).

use std::collections::BTreeMap;

use super::session::{Session, SessionError};
use crate::store::{ArtifactExcerpt, Changes, DecisionRow, PolicyNarrowing, RunDetail, RunRow};

/// One run as `show` reports it: its detail, the decisions on its plan's bytes, the run it
/// replayed, and each step's result (the artifacts of its last execution, bounded).
#[derive(Debug, Clone)]
pub struct ShownRun {
    /// The run, its steps and executions with their artifacts and network requests.
    pub detail: RunDetail,
    /// Every approval and rejection of the plan's SHA-256, oldest first.
    pub decisions: Vec<DecisionRow>,
    /// The run whose model answers this one replayed (docs/replay.md).
    pub replay_of: Option<String>,
    /// Each step's result: step id → artifact type → excerpt.
    pub outputs: BTreeMap<String, BTreeMap<String, ArtifactExcerpt>>,
    /// Who approved the run (verified or claimed) and whether an attestation was written.
    pub provenance: crate::report::Provenance,
    /// The files the run left changed, as git saw them at its end (issue 48).
    pub changes: Option<Changes>,
    /// What the workspace's own policy narrowed or was refused (issue 48).
    pub repository_policy: Option<PolicyNarrowing>,
}

impl Session {
    /// The `limit` most recent runs in the session's database (which must exist).
    pub fn list_runs(&self, limit: usize) -> Result<Vec<RunRow>, SessionError> {
        Ok(self.existing_store()?.list_runs(limit)?)
    }

    /// The run `prefix` names (a unique prefix of its id is enough), as `show` reports it; each
    /// step's result is cut at `max_output` characters.
    pub fn show_run(&self, prefix: &str, max_output: usize) -> Result<ShownRun, SessionError> {
        let store = self.existing_store()?;
        let detail = store.run_detail(prefix)?;
        let decisions = store.decisions(&detail.run.plan_sha256)?;
        let replay_of = store.replay_of(&detail.run.run_id)?;
        let outputs = store.step_outputs(&detail.run.run_id, max_output)?;
        let provenance = crate::report::Provenance::read(&store, &detail.run.run_id);
        let changes = store.run_changes(&detail.run.run_id)?;
        let repository_policy = store.run_repository_policy(&detail.run.run_id)?;
        Ok(ShownRun {
            detail,
            decisions,
            replay_of,
            outputs,
            provenance,
            changes,
            repository_policy,
        })
    }
}
