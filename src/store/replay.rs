//! What a replay (`run --replay`, docs/replay.md) reads from and writes to the record: a run's
//! model turns with their `prompt` and `response` artifacts, what each agent step was asked, and
//! which run a replay replayed (migration 13).

use rusqlite::params;

use super::{Store, StoreError};

/// One recorded attempt at a model turn (an execution of tool `llm`), with its artifacts.
#[derive(Debug, Clone)]
pub struct LlmTurnRow {
    /// The execution.
    pub execution_id: String,
    /// The agent step.
    pub step_id: String,
    /// The turn within the step (1-based).
    pub turn: Option<u32>,
    /// The attempt at that turn (retries count up).
    pub attempt: u32,
    /// Whether the model answered.
    pub success: bool,
    /// The execution's arguments (`client`, `model`, ...), as stored.
    pub arguments_json: String,
    /// The request body as stored (redacted), with whether it was cut short.
    pub prompt: Option<(String, bool)>,
    /// The response body as stored (redacted), with whether it was cut short.
    pub response: Option<(String, bool)>,
    /// The error code of a failed attempt.
    pub error_code: Option<String>,
    /// The error message of a failed attempt.
    pub error_message: Option<String>,
}

/// A step of a recorded run as a replay sees it.
#[derive(Debug, Clone)]
pub struct RecordedStepRow {
    /// The step id.
    pub step_id: String,
    /// Its tool (`agent` for an agent step).
    pub tool: String,
    /// What an agent step was asked (migration 13); `None` for other steps and for runs recorded
    /// before it was kept.
    pub instruction_sha256: Option<String>,
}

impl Store {
    /// Records that `run_id` replays the model answers of run `of`.
    pub fn record_replay_of(&mut self, run_id: &str, of: &str) -> Result<(), StoreError> {
        let of = self.scrub(of).into_owned();
        self.conn.execute(
            "UPDATE runs SET replay_of = ?2 WHERE run_id = ?1",
            params![run_id, of],
        )?;
        Ok(())
    }

    /// The run whose model answers `run_id` replayed, if it was a replay.
    pub fn replay_of(&self, run_id: &str) -> Result<Option<String>, StoreError> {
        Ok(self.conn.query_row(
            "SELECT replay_of FROM runs WHERE run_id = ?1",
            params![run_id],
            |r| r.get(0),
        )?)
    }

    /// Records what each agent step of `run_id` was asked: `(step_id, sha256)` pairs.
    pub fn record_instructions(
        &mut self,
        run_id: &str,
        hashes: &[(String, String)],
    ) -> Result<(), StoreError> {
        if hashes.is_empty() {
            return Ok(());
        }
        let hashes: Vec<(String, &str)> = hashes
            .iter()
            .map(|(step, sha)| (self.scrub(step).into_owned(), sha.as_str()))
            .collect();
        let tx = self.immediate()?;
        {
            let mut stmt = tx.prepare(
                "UPDATE steps SET instruction_sha256 = ?3 WHERE run_id = ?1 AND step_id = ?2",
            )?;
            for (step, sha) in &hashes {
                stmt.execute(params![run_id, step, sha])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// A run's steps in plan order, with what its agent steps were asked.
    pub fn recorded_steps(&self, run_id: &str) -> Result<Vec<RecordedStepRow>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT step_id, tool, instruction_sha256 FROM steps WHERE run_id = ?1 ORDER BY position",
        )?;
        let rows = stmt
            .query_map([run_id], |r| {
                Ok(RecordedStepRow {
                    step_id: r.get(0)?,
                    tool: r.get(1)?,
                    instruction_sha256: r.get(2)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// Every model turn attempt of a run, in the order they were made, with their `prompt` and
    /// `response` artifacts.
    pub fn llm_turns(&self, run_id: &str) -> Result<Vec<LlmTurnRow>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT e.execution_id, e.step_id, e.turn, e.attempt, e.success, e.arguments_json,
                    p.content, p.truncated, a.content, a.truncated, e.error_code, e.error_message
             FROM executions e
             LEFT JOIN artifacts p ON p.execution_id = e.execution_id AND p.artifact_type = 'prompt'
             LEFT JOIN artifacts a ON a.execution_id = e.execution_id AND a.artifact_type = 'response'
             WHERE e.run_id = ?1 AND e.tool_name = 'llm'
             ORDER BY e.started_at, e.rowid",
        )?;
        let rows = stmt
            .query_map([run_id], |r| {
                let prompt: Option<String> = r.get(6)?;
                let response: Option<String> = r.get(8)?;
                Ok(LlmTurnRow {
                    execution_id: r.get(0)?,
                    step_id: r.get(1)?,
                    turn: r.get(2)?,
                    attempt: r.get(3)?,
                    success: r.get(4)?,
                    arguments_json: r.get(5)?,
                    prompt: prompt
                        .map(|p| (p, r.get::<_, Option<bool>>(7).ok().flatten() == Some(true))),
                    response: response
                        .map(|a| (a, r.get::<_, Option<bool>>(9).ok().flatten() == Some(true))),
                    error_code: r.get(10)?,
                    error_message: r.get(11)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }
}
