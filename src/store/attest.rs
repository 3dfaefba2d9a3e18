//! What a run's attestation (issue 42, `crate::attest`) reads from the record beyond `show`: the
//! files the run wrote (migration 15), the programs it ran, the hosts it reached or was refused,
//! and a digest of its model traffic — each a query that streams, so a 10 000-step run is never
//! loaded whole.

use rusqlite::{OptionalExtension, params};
use sha2::{Digest, Sha256};

use super::{Store, StoreError};
use crate::workspace::changes::{ChangedFile, Changes};

/// A program a run's commands executed, as recorded with each execution.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProgramRun {
    /// The resolved path of what ran.
    pub path: String,
    /// The SHA-256 of the file executed.
    pub sha256: String,
    /// How many executions ran it.
    pub executions: u64,
}

/// The requests a run's commands made to one host and port, allowed or refused.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HostRequests {
    /// The host.
    pub host: String,
    /// The port.
    pub port: u16,
    /// Whether the proxy let them through.
    pub allowed: bool,
    /// How many.
    pub requests: u64,
}

/// A run's model traffic in a few numbers: what a verifier can compare with a recording.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ModelTraffic {
    /// Model turns recorded.
    pub turns: u64,
    /// SHA-256 over every turn's request and answer as recorded (redacted), in order: each
    /// artifact as its type, its length and its text, length-prefixed.
    pub sha256: String,
}

impl Store {
    /// Ends `run_id` ([`Store::finish_run`]'s fields) and records the files it created or
    /// changed (replacing what an earlier end of the same run, before a resume, recorded), in one
    /// transaction: one commit, one fsync, however many files. Paths are redacted like every
    /// other field.
    pub fn finish_run_with_files(
        &mut self,
        run_id: &str,
        status: super::RunStatus,
        exit_code: i32,
        tokens: (i64, i64),
        changes: &Changes,
    ) -> Result<(), StoreError> {
        let redactor = self.redactor.clone();
        let tx = self.conn.transaction()?;
        tx.execute("DELETE FROM run_files WHERE run_id = ?1", [run_id])?;
        {
            let mut insert = tx.prepare(
                "INSERT OR REPLACE INTO run_files (run_id, path, sha256, change, bytes)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            for f in &changes.files {
                let path = redactor.redact(&f.path);
                insert.execute(params![
                    run_id,
                    path.as_ref(),
                    f.sha256,
                    "written",
                    f.bytes as i64
                ])?;
            }
            if changes.truncated {
                insert.execute(params![
                    run_id,
                    "",
                    None::<String>,
                    "truncated",
                    None::<i64>
                ])?;
            }
        }
        tx.execute(
            "UPDATE runs SET status = ?2, exit_code = ?3, finished_at = ?4,
             prompt_tokens = ?5, completion_tokens = ?6, files_recorded = 1 WHERE run_id = ?1",
            params![
                run_id,
                status,
                exit_code,
                crate::error::now_ms(),
                tokens.0,
                tokens.1
            ],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// The files `run_id` created or changed, by path, and whether the list was cut short;
    /// `None` when the run recorded none (it ended before this was kept, or has not ended).
    pub fn run_files(&self, run_id: &str) -> Result<Option<Changes>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT path, sha256, change, bytes FROM run_files WHERE run_id = ?1 ORDER BY path",
        )?;
        let mut rows = stmt.query([run_id])?;
        let mut changes = Changes::default();
        let mut any = false;
        while let Some(r) = rows.next()? {
            any = true;
            let change: String = r.get(2)?;
            if change == "truncated" {
                changes.truncated = true;
                continue;
            }
            changes.files.push(ChangedFile {
                path: r.get(0)?,
                sha256: r.get::<_, Option<String>>(1)?.unwrap_or_default(),
                bytes: r.get::<_, Option<i64>>(3)?.unwrap_or(0).max(0) as u64,
            });
        }
        Ok(any.then_some(changes))
    }

    /// Whether `run_id` recorded its files at its end (an empty list included).
    pub fn run_files_recorded(&self, run_id: &str) -> Result<bool, StoreError> {
        Ok(self.conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM runs WHERE run_id = ?1 AND finished_at IS NOT NULL
             AND files_recorded = 1)",
            [run_id],
            |r| r.get(0),
        )?)
    }

    /// The paths `run_id`'s file tools deleted (successful `file_delete` calls), sorted.
    pub fn deleted_by_tools(&self, run_id: &str) -> Result<Vec<String>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT DISTINCT json_extract(arguments_json, '$.path') FROM executions
             WHERE run_id = ?1 AND tool_name = 'file_delete' AND success = 1
             AND json_valid(arguments_json) ORDER BY 1",
        )?;
        let rows = stmt
            .query_map([run_id], |r| r.get::<_, Option<String>>(0))?
            .filter_map(|r| r.transpose())
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// Every program `run_id`'s commands ran, with its SHA-256, by path.
    pub fn programs_run(&self, run_id: &str) -> Result<Vec<ProgramRun>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT program_path, program_sha256, COUNT(*) FROM executions
             WHERE run_id = ?1 AND program_path IS NOT NULL
             GROUP BY program_path, program_sha256 ORDER BY program_path, program_sha256",
        )?;
        let rows = stmt
            .query_map([run_id], |r| {
                Ok(ProgramRun {
                    path: r.get(0)?,
                    sha256: r.get::<_, Option<String>>(1)?.unwrap_or_default(),
                    executions: r.get::<_, i64>(2)?.max(0) as u64,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// Every host and port `run_id`'s commands asked the proxy for, allowed or refused, with how
    /// many requests each.
    pub fn hosts_requested(&self, run_id: &str) -> Result<Vec<HostRequests>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT host, port, allowed, COUNT(*) FROM network_requests WHERE run_id = ?1
             GROUP BY host, port, allowed ORDER BY host, port, allowed",
        )?;
        let rows = stmt
            .query_map([run_id], |r| {
                Ok(HostRequests {
                    host: r.get(0)?,
                    port: u16::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
                    allowed: r.get(2)?,
                    requests: r.get::<_, i64>(3)?.max(0) as u64,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// The digest of `run_id`'s model traffic ([`ModelTraffic`]), streamed from the record.
    pub fn model_traffic(&self, run_id: &str) -> Result<ModelTraffic, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT e.execution_id, a.artifact_type, a.content FROM executions e
             JOIN artifacts a ON a.execution_id = e.execution_id
             WHERE e.run_id = ?1 AND e.tool_name = 'llm'
             ORDER BY e.started_at, e.rowid, a.artifact_type",
        )?;
        let mut rows = stmt.query([run_id])?;
        let mut hasher = Sha256::new();
        let mut turns = 0u64;
        let mut last: Option<String> = None;
        while let Some(r) = rows.next()? {
            let id: String = r.get(0)?;
            if last.as_deref() != Some(id.as_str()) {
                turns += 1;
                last = Some(id);
            }
            let kind: String = r.get(1)?;
            let content: String = r.get(2)?;
            for field in [kind.as_bytes(), content.as_bytes()] {
                hasher.update((field.len() as u64).to_be_bytes());
                hasher.update(field);
            }
        }
        Ok(ModelTraffic {
            turns,
            sha256: crate::util::hex(&hasher.finalize()),
        })
    }
}

/// That an attestation of a run was written, and where (the report, JUnit, the GitHub summary
/// and `show` say so).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AttestationRecord {
    /// Where it was written.
    pub path: String,
    /// SHA-256 of the envelope's bytes as written.
    pub sha256: String,
    /// The signing key's fingerprint (`SHA256:…`).
    pub key: String,
    /// When, Unix ms.
    pub written_at: i64,
    /// How many files it names.
    pub subjects: usize,
}

impl Store {
    /// Records that an attestation of `run_id` was written (the latest one is kept).
    pub fn record_attestation(
        &mut self,
        run_id: &str,
        record: &AttestationRecord,
    ) -> Result<(), StoreError> {
        let json = serde_json::to_string(record).unwrap_or_default();
        self.conn.execute(
            "UPDATE runs SET attestation_json = ?2 WHERE run_id = ?1",
            params![run_id, self.redactor.redact_json_text(&json)],
        )?;
        Ok(())
    }

    /// The latest attestation written of `run_id`, if any.
    pub fn attestation(&self, run_id: &str) -> Result<Option<AttestationRecord>, StoreError> {
        let json: Option<String> = self
            .conn
            .query_row(
                "SELECT attestation_json FROM runs WHERE run_id = ?1",
                [run_id],
                |r| r.get(0),
            )
            .optional()?
            .flatten();
        json.map(|j| {
            serde_json::from_str(&j).map_err(|e| StoreError::Unreadable {
                what: format!("the attestation record of run {run_id}"),
                reason: e.to_string(),
            })
        })
        .transpose()
    }
}
