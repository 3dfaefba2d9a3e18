//! Every approval and rejection, appended and never overwritten (SPEC §3): the approval file next to
//! a plan holds only the latest decision, so the history (and a rejection that must stand) lives here.

use rusqlite::params;
use serde::Serialize;

use super::{Store, StoreError};
use crate::plan::AuthStatus;

// A decision is the approval file's status: one concept, recorded as the file says it (a
// `pending` decision is never recorded; `record_decision` takes approvals and rejections).
sql_enum!(AuthStatus {
    Pending => "pending",
    Approved => "approved",
    Rejected => "rejected",
});

/// One recorded decision about one version (hash) of a plan.
#[derive(Debug, Clone, Serialize)]
pub struct DecisionRow {
    /// The plan's id.
    pub plan_id: String,
    /// SHA-256 of the plan bytes decided on.
    pub plan_sha256: String,
    /// Where the plan file was.
    pub plan_path: Option<String>,
    /// The verdict.
    pub verdict: AuthStatus,
    /// Who decided.
    pub decided_by: String,
    /// Unix ms.
    pub decided_at: i64,
    /// Why (`--reason`).
    pub reason: Option<String>,
    /// An approval given although the same bytes had been rejected: recorded as such, so an audit
    /// sees that a rejection was overridden and by whom.
    pub overrides_rejection: bool,
    /// How `decided_by` is proven: `ssh` (the principal the policy's allowed_signers gives the
    /// signing key), `hmac` (the shared key signed the decision), `None` (a claimed name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    /// The SSH key's fingerprint (`SHA256:…`) when an approver's key signed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signer_key: Option<String>,
}

impl Store {
    /// Appends a decision.
    pub fn record_decision(&mut self, d: &DecisionRow) -> Result<(), StoreError> {
        // Everything a plan author or a person typed is redacted like a run's fields: a
        // secret-shaped `plan_id` (or path, or name) must not reach the file in clear.
        let reason = self.scrub_opt(d.reason.as_deref());
        let plan_id = self.scrub(&d.plan_id);
        let plan_path = self.scrub_opt(d.plan_path.as_deref());
        let decided_by = self.scrub(&d.decided_by);
        self.conn.execute(
            "INSERT INTO decisions (plan_id, plan_sha256, plan_path, verdict, decided_by, decided_at,
             reason, overrides_rejection, scheme, signer_key)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![
                plan_id,
                d.plan_sha256,
                plan_path,
                d.verdict,
                decided_by,
                d.decided_at,
                reason,
                d.overrides_rejection,
                d.scheme,
                d.signer_key
            ],
        )?;
        Ok(())
    }

    /// Every decision about the plan bytes with hash `plan_sha256`, oldest first.
    pub fn decisions(&self, plan_sha256: &str) -> Result<Vec<DecisionRow>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT plan_id, plan_sha256, plan_path, verdict, decided_by, decided_at, reason,
             overrides_rejection, scheme, signer_key FROM decisions WHERE plan_sha256 = ?1
             ORDER BY decided_at, rowid",
        )?;
        let rows = stmt
            .query_map([plan_sha256], |r| {
                Ok(DecisionRow {
                    plan_id: r.get(0)?,
                    plan_sha256: r.get(1)?,
                    plan_path: r.get(2)?,
                    verdict: r.get(3)?,
                    decided_by: r.get(4)?,
                    decided_at: r.get(5)?,
                    reason: r.get(6)?,
                    overrides_rejection: r.get(7)?,
                    scheme: r.get(8)?,
                    signer_key: r.get(9)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// The rejection that stands for these bytes: the latest decision, when it is a rejection.
    pub fn standing_rejection(&self, plan_sha256: &str) -> Result<Option<DecisionRow>, StoreError> {
        Ok(self
            .decisions(plan_sha256)?
            .pop()
            .filter(|d| d.verdict == AuthStatus::Rejected))
    }
}
