//! Where a run ran and what it left (migration 15, issue 48): the repository and commit, the
//! files changed at the end, what the repository's own policy narrowed — and what the fleet page
//! (`report --html FILE` without a run id, `src/report/fleet.rs`) reads of each run.

use rusqlite::{OptionalExtension, params};
use serde::{Deserialize, Serialize};

use super::{RunRow, StepRow, Store, StoreError};

/// Where a run ran, recorded when it starts (and again on resume, which may be elsewhere).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunOrigin {
    /// The workspace's `origin` remote, without credentials.
    pub repository: Option<String>,
    /// `HEAD` of the workspace's repository.
    pub commit: Option<String>,
    /// What the repository's own policy did to the approved one, when it had one.
    pub repository_policy: Option<PolicyNarrowing>,
}

/// A repository's `acode-policy.json` narrowing the approved policy (`docs/security.md`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PolicyNarrowing {
    /// The repository's policy file.
    pub path: String,
    /// Its fingerprint, as an approval would bind it.
    pub sha256: String,
    /// What it asked beyond the approved policy: not granted.
    pub ignored: Vec<String>,
    /// What it took away from the approved policy.
    pub narrowed: Vec<String>,
}

/// The files a run left changed in its workspace, as git sees them at its end.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Changes {
    /// The first files (at most [`Changes::KEPT`]), in git's order.
    pub files: Vec<ChangedFile>,
    /// How many files git listed in all.
    pub total: usize,
}

impl Changes {
    /// Files kept in the record of one run; `total` counts the rest.
    pub const KEPT: usize = 200;
}

/// One changed file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChangedFile {
    /// git's two-letter status (`M `, ` M`, `??`, `D `, `R `…), trimmed.
    pub status: String,
    /// The path, relative to the workspace.
    pub path: String,
}

/// One run as the fleet page shows it.
#[derive(Debug, Clone)]
pub struct FleetRun {
    /// The run.
    pub run: RunRow,
    /// The files it left changed (`None`: not recorded — not a git repository, or an older run).
    pub changes: Option<Changes>,
    /// What the repository's policy narrowed.
    pub repository_policy: Option<PolicyNarrowing>,
    /// Who approved the plan it ran, as its header recorded.
    pub approved_by: Option<String>,
    /// The file `acode-run merge` took it from.
    pub merged_from: Option<String>,
    /// Steps in all and steps failed.
    pub steps: (i64, i64),
}

/// A JSON column acode-run wrote, read back; one that does not parse is said, not taken for
/// missing.
fn json_column<T: serde::de::DeserializeOwned>(
    text: Option<String>,
    what: impl FnOnce() -> String,
) -> Result<Option<T>, StoreError> {
    text.map(|t| {
        serde_json::from_str(&t).map_err(|e| StoreError::Unreadable {
            what: what(),
            reason: e.to_string(),
        })
    })
    .transpose()
}

impl Store {
    /// Records where run `run_id` runs, every text through the redactor.
    pub fn record_origin(&mut self, run_id: &str, origin: &RunOrigin) -> Result<(), StoreError> {
        let repository = self
            .scrub_opt(origin.repository.as_deref())
            .map(|c| c.into_owned());
        let policy = origin.repository_policy.as_ref().map(|p| {
            self.redactor
                .redact_json_text(&serde_json::to_string(p).unwrap_or_default())
        });
        self.conn.execute(
            "UPDATE runs SET repository = ?2, commit_sha = ?3, repository_policy_json = ?4
             WHERE run_id = ?1",
            params![run_id, repository, origin.commit, policy],
        )?;
        Ok(())
    }

    /// Records the files run `run_id` left changed, redacted like every path recorded.
    pub fn record_changes(&mut self, run_id: &str, changes: &Changes) -> Result<(), StoreError> {
        let json = serde_json::to_string(changes).unwrap_or_default();
        let json = self.redactor.redact_json_text(&json);
        self.conn.execute(
            "UPDATE runs SET changes_json = ?2 WHERE run_id = ?1",
            params![run_id, json],
        )?;
        Ok(())
    }

    /// The files run `run_id` (an exact id) left changed, when recorded.
    pub fn run_changes(&self, run_id: &str) -> Result<Option<Changes>, StoreError> {
        let text: Option<String> = self
            .conn
            .query_row(
                "SELECT changes_json FROM runs WHERE run_id = ?1",
                [run_id],
                |r| r.get(0),
            )
            .optional()?
            .flatten();
        json_column(text, || format!("the changed files of run {run_id}"))
    }

    /// What the repository's policy narrowed for run `run_id` (an exact id), when it had one.
    pub fn run_repository_policy(
        &self,
        run_id: &str,
    ) -> Result<Option<PolicyNarrowing>, StoreError> {
        let text: Option<String> = self
            .conn
            .query_row(
                "SELECT repository_policy_json FROM runs WHERE run_id = ?1",
                [run_id],
                |r| r.get(0),
            )
            .optional()?
            .flatten();
        json_column(text, || format!("the repository policy of run {run_id}"))
    }

    /// The plan runs (not drafts or reviews) in the order the fleet page lists them: by
    /// repository (the workspace where none is known), newest first within one.
    pub fn fleet_run_ids(&self) -> Result<Vec<String>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT run_id FROM runs WHERE kind = 'run'
             ORDER BY COALESCE(repository, workspace), started_at DESC, rowid DESC",
        )?;
        let ids = stmt
            .query_map([], |r| r.get(0))?
            .collect::<Result<Vec<String>, _>>()?;
        Ok(ids)
    }

    /// One run (an exact id) as the fleet page shows it.
    pub fn fleet_run(&self, run_id: &str) -> Result<FleetRun, StoreError> {
        let run = self.run(run_id)?;
        let (approved_by, merged_from, steps, failed): (Option<String>, Option<String>, i64, i64) =
            self.conn.query_row(
                "SELECT CASE WHEN json_valid(header_json)
                    THEN json_extract(header_json, '$.approval.decided_by') END,
                    (SELECT source FROM run_sources m WHERE m.run_id = r.run_id),
                    (SELECT count(*) FROM steps s WHERE s.run_id = r.run_id),
                    (SELECT count(*) FROM steps s WHERE s.run_id = r.run_id
                     AND s.status = 'failed')
             FROM runs r WHERE run_id = ?1",
                [&run.run_id],
                |r| Ok((r.get(0).ok().flatten(), r.get(1)?, r.get(2)?, r.get(3)?)),
            )?;
        Ok(FleetRun {
            changes: self.run_changes(&run.run_id)?,
            repository_policy: self.run_repository_policy(&run.run_id)?,
            approved_by,
            merged_from,
            steps: (steps, failed),
            run,
        })
    }

    /// The step that failed the run first (by the time it finished), with the tails of what the
    /// last execution printed on stdout and stderr (`tail_chars` characters of each, cut in SQL).
    pub fn failing_step(
        &self,
        run_id: &str,
        tail_chars: usize,
    ) -> Result<Option<(StepRow, String, String)>, StoreError> {
        let step_id: Option<String> = self
            .conn
            .query_row(
                "SELECT step_id FROM steps WHERE run_id = ?1 AND status = 'failed'
                 ORDER BY finished_at IS NULL, finished_at, position LIMIT 1",
                [run_id],
                |r| r.get(0),
            )
            .optional()?;
        let Some(step_id) = step_id else {
            return Ok(None);
        };
        let Some(step) = self
            .steps(run_id)?
            .into_iter()
            .find(|s| s.step_id == step_id)
        else {
            return Ok(None);
        };
        let (stdout, stderr) = self.step_tails(run_id, &step_id, tail_chars)?;
        Ok(Some((step, stdout, stderr)))
    }

    /// The last `tail_chars` characters of what the last execution of step `step_id` (not a
    /// model turn) printed on stdout and on stderr, cut in SQL.
    pub fn step_tails(
        &self,
        run_id: &str,
        step_id: &str,
        tail_chars: usize,
    ) -> Result<(String, String), StoreError> {
        let tail = |kind: &str| -> Result<String, StoreError> {
            Ok(self
                .conn
                .prepare_cached(
                    "SELECT substr(a.content, -?3) FROM executions e
                     JOIN artifacts a ON a.execution_id = e.execution_id AND a.artifact_type = ?4
                     WHERE e.run_id = ?1 AND e.step_id = ?2 AND e.tool_name != 'llm'
                     ORDER BY e.started_at DESC, e.rowid DESC LIMIT 1",
                )?
                .query_row(params![run_id, step_id, tail_chars as i64, kind], |r| {
                    r.get::<_, String>(0)
                })
                .optional()?
                .unwrap_or_default())
        };
        Ok((tail("stdout")?, tail("stderr")?))
    }

    /// The executions of a run's steps that are not model turns, by step, in the order they
    /// ran: what a report built from the record lists for each step.
    pub fn step_executions(
        &self,
        run_id: &str,
    ) -> Result<std::collections::HashMap<String, Vec<String>>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT step_id, execution_id FROM executions WHERE run_id = ?1 AND tool_name != 'llm'
             ORDER BY started_at, rowid",
        )?;
        let mut out: std::collections::HashMap<String, Vec<String>> = Default::default();
        let rows = stmt.query_map([run_id], |r| Ok((r.get::<_, String>(0)?, r.get(1)?)))?;
        for row in rows {
            let (step, id) = row?;
            out.entry(step).or_default().push(id);
        }
        Ok(out)
    }

    /// The hosts the proxy refused in run `run_id`, each with its port and how often, most
    /// refused first (at most `limit`).
    pub fn refused_hosts(
        &self,
        run_id: &str,
        limit: usize,
    ) -> Result<Vec<(String, u16, i64)>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT host, port, count(*) FROM network_requests WHERE run_id = ?1 AND allowed = 0
             GROUP BY host, port ORDER BY count(*) DESC, host, port LIMIT ?2",
        )?;
        let rows = stmt
            .query_map(params![run_id, limit as i64], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?.clamp(0, 65535) as u16,
                    r.get::<_, i64>(2)?,
                ))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }
}
