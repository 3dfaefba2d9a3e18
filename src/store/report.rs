//! What the HTML report (`acode-run report`, issue 36) reads beyond `show`: the run header as the
//! run began (approval, sandbox, MCP pins; migration 14), artifacts cut to a head and a tail in
//! SQL (a 10 000-step run never loads whole outputs), and every network request of a run.

use std::collections::BTreeMap;

use rusqlite::{OptionalExtension, params};
use serde::{Deserialize, Serialize};

use super::{ExecutionRecord, Store, StoreError};
use crate::policy::network::NetworkRequest;

/// What a run began under, recorded once at its start (and again when resumed): the part of the
/// run header that no other column keeps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunHeader {
    /// The approval the run was allowed by.
    pub approval: HeaderApproval,
    /// The OS sandbox mode asked for (`auto`, `bwrap`, `landlock`, `none`).
    pub sandbox_requested: String,
    /// What the sandbox does not restrict here, the limits, secret exposure (the header's notes).
    pub sandbox_notes: Vec<String>,
    /// Steps run at once at most (`--jobs`).
    pub jobs: usize,
    /// The names of the sandbox's promises (docs/security.md) the mode held for this run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub promises_held: Vec<String>,
    /// What the mode did not hold, one sentence each (empty when every promise held).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub promises_not_held: Vec<String>,
    /// MCP server name → what the approval pinned.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mcp: BTreeMap<String, HeaderPin>,
}

/// The approval a run was allowed by, as checked when it started.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HeaderApproval {
    /// Who approved.
    pub decided_by: String,
    /// When, Unix ms.
    pub decided_at: i64,
    /// `verified` (an approval key was in force and the signature held), `unchecked` (signed,
    /// but no key was set, so nothing verified it), `none` (unsigned; no key was in force).
    pub signature: String,
    /// The policy fingerprint the approval is bound to (checked equal to the effective policy's
    /// before the run started: a run under another policy is refused).
    pub policy_sha256: String,
    /// How the approval was proven (`ssh`, `hmac`, `none`; issue 42). Empty for runs recorded
    /// before it was kept.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scheme: String,
    /// The name the approval file claims (`decided_by`); [`HeaderApproval::decided_by`] is the
    /// verified principal(s) when SSH signatures proved it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_by: Option<String>,
    /// The SSH signers that counted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signers: Vec<crate::plan::signers::VerifiedSigner>,
    /// The approval document as the run checked it (its SSH signatures included), so an
    /// attestation can carry it for `verify --allowed-signers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<crate::plan::PlanAuthorization>,
    /// The policy's `approvals.required` when SSH signatures proved it (for `verify`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<usize>,
}

impl HeaderApproval {
    /// `verified (ssh)`, `verified (hmac, shared key)` or `claimed`: how far the name in
    /// [`HeaderApproval::decided_by`] is proven.
    pub fn standing(&self) -> &'static str {
        match (self.scheme.as_str(), self.signature.as_str()) {
            ("ssh", "verified") => "verified (ssh)",
            ("hmac", "verified") | ("", "verified") => "verified (hmac, shared key)",
            _ => "claimed",
        }
    }
}

/// One MCP server as the approval pinned it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HeaderPin {
    /// `serverInfo.name` and `serverInfo.version`, and the protocol version spoken.
    pub identity: String,
    /// Tool name → SHA-256 of its approved name, description and schema.
    pub tools: BTreeMap<String, String>,
}

/// An artifact cut to its first and last characters by SQLite, with what was left out.
#[derive(Debug, Clone, PartialEq)]
pub struct ArtifactCut {
    /// The artifact type.
    pub artifact_type: String,
    /// The first characters kept (the whole content when it fits).
    pub head: String,
    /// The last characters, when the content was longer than head and tail together.
    pub tail: Option<String>,
    /// Characters stored in all.
    pub stored_chars: i64,
    /// Bytes the tool produced in all.
    pub bytes: i64,
    /// Whether the stored content was already cut when it was recorded.
    pub truncated: bool,
    /// Whether the output was not valid UTF-8 (shown lossily).
    pub lossy: bool,
}

impl Store {
    /// Records what the run header said (approval, sandbox notes, pins), redacted like every
    /// other row.
    pub fn record_header(&mut self, run_id: &str, header: &RunHeader) -> Result<(), StoreError> {
        let json = serde_json::to_string(header).unwrap_or_default();
        let json = self.redactor.redact_json_text(&json);
        self.conn.execute(
            "UPDATE runs SET header_json = ?2 WHERE run_id = ?1",
            params![run_id, json],
        )?;
        Ok(())
    }

    /// The header recorded for `run_id` (an exact id); `None` for runs recorded before schema 13,
    /// [`StoreError::Unreadable`] for a header that does not parse.
    pub fn run_header(&self, run_id: &str) -> Result<Option<RunHeader>, StoreError> {
        let json: Option<String> = self
            .conn
            .query_row(
                "SELECT header_json FROM runs WHERE run_id = ?1",
                params![run_id],
                |r| r.get(0),
            )
            .optional()?
            .flatten();
        json.map(|j| {
            serde_json::from_str(&j).map_err(|e| StoreError::Unreadable {
                what: format!("the header of run {run_id}"),
                reason: e.to_string(),
            })
        })
        .transpose()
    }

    /// Every artifact of one execution (exact id), each cut to its first `head` and last `tail`
    /// characters in SQL.
    pub fn artifact_cuts(
        &self,
        execution_id: &str,
        head: usize,
        tail: usize,
    ) -> Result<Vec<ArtifactCut>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT artifact_type,
                    CASE WHEN length(content) > ?2 + ?3 THEN substr(content, 1, ?2) ELSE content END,
                    CASE WHEN length(content) > ?2 + ?3 THEN substr(content, -?3) END,
                    length(content), bytes, truncated, lossy
             FROM artifacts WHERE execution_id = ?1 ORDER BY artifact_type",
        )?;
        let rows = stmt
            .query_map(params![execution_id, head as i64, tail as i64], |r| {
                Ok(ArtifactCut {
                    artifact_type: r.get(0)?,
                    head: r.get(1)?,
                    tail: r.get(2)?,
                    stored_chars: r.get(3)?,
                    bytes: r.get(4)?,
                    truncated: r.get(5)?,
                    lossy: r.get(6)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// Every network request of a run, with the execution it is attributed to (`None` when no
    /// command could be named for it), in time order.
    pub fn run_network(
        &self,
        run_id: &str,
    ) -> Result<Vec<(Option<String>, NetworkRequest)>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT execution_id, method, host, port, allowed, status, reason, bytes_up, bytes_down,
             started_at, duration_ms FROM network_requests WHERE run_id = ?1
             ORDER BY started_at, rowid",
        )?;
        let rows = stmt
            .query_map([run_id], |r| Ok((r.get(0)?, super::network_row(r, 1)?)))?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }
}
/// What a step did, counted apart from its executions (`show`, the HTML report): a step's
/// `attempts` column counts every execution row — each model turn, each call the model asked
/// for, each verify command — so an agent step that ran once would read "attempts 6".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StepCounts {
    /// Executions of the step's own tool call (retries, and a run again after a resume,
    /// included): 0 for an agent step, whose work is its turns.
    pub attempts: u32,
    /// The model's turns (a turn retried after a transient error counts once).
    pub turns: u32,
    /// The calls the model asked for (a call retried counts once).
    pub tool_calls: u32,
    /// Runs of the step's `verify` commands (each command each time they ran).
    pub verify_runs: u32,
}

impl StepCounts {
    /// The counts of `step_id` from a run's executions.
    pub fn of<'a>(
        step_id: &str,
        executions: impl IntoIterator<Item = &'a ExecutionRecord>,
    ) -> Self {
        let mut c = StepCounts::default();
        let mut turns = std::collections::BTreeSet::new();
        for e in executions.into_iter().filter(|e| e.step_id == step_id) {
            let verify = e
                .call_id
                .as_deref()
                .is_some_and(crate::tools::is_verify_call);
            if e.tool_name == "llm" {
                turns.insert(e.turn);
            } else if e.parent_execution_id.is_some() {
                c.tool_calls += u32::from(e.attempt <= 1);
            } else if verify {
                c.verify_runs += u32::from(e.attempt <= 1);
            } else {
                // Each execution of the step's own call: a retry, or the run again after a
                // resume (whose cut-off attempt is recorded with the same number).
                c.attempts += 1;
            }
        }
        c.turns = turns.len() as u32;
        c
    }

    /// `attempts 2`, `turns 3, tool calls 2, verify 1`: what `show` prints after a step's status.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.turns > 0 || self.tool_calls > 0 {
            parts.push(format!("turns {}", self.turns));
            parts.push(format!("tool calls {}", self.tool_calls));
            if self.attempts > 1 {
                parts.push(format!("attempts {}", self.attempts));
            }
        } else {
            parts.push(format!("attempts {}", self.attempts));
        }
        if self.verify_runs > 0 {
            parts.push(format!("verify {}", self.verify_runs));
        }
        parts.join(", ")
    }
}
