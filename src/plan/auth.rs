//! Plan authorization (SPEC §3): a plan runs only with an approval bound to its exact bytes.
//!
//! The approval lives next to the plan as `<plan>.approval` so that a reviewed plan and its approval
//! are committed together. It records the SHA-256 of the plan file, so any edit after approval — even
//! whitespace — voids it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::model::Plan;

/// The state of a review.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthStatus {
    /// Not yet reviewed.
    Pending,
    /// May run.
    Approved,
    /// Must not run.
    Rejected,
}

/// A reviewer's decision about one version of one plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanAuthorization {
    /// The plan's `plan_id` at the time of the decision.
    pub plan_id: String,
    /// The decision.
    pub status: AuthStatus,
    /// SHA-256 (hex) of the plan file's bytes that were reviewed.
    pub plan_sha256: String,
    /// Who decided.
    pub decided_by: String,
    /// When, in Unix milliseconds.
    pub decided_at: i64,
}

impl PlanAuthorization {
    /// A decision about `plan` by `by`, now.
    pub fn decide(plan: &Plan, status: AuthStatus, by: &str) -> Self {
        PlanAuthorization {
            plan_id: plan.plan_id.clone(),
            status,
            plan_sha256: plan.sha256.clone(),
            decided_by: by.to_string(),
            decided_at: crate::error::now_ms(),
        }
    }

    /// Checks that this authorization lets `plan` run.
    pub fn check(&self, plan: &Plan) -> Result<(), AuthError> {
        match self.status {
            AuthStatus::Pending => return Err(AuthError::Pending),
            AuthStatus::Rejected => {
                return Err(AuthError::Rejected {
                    by: self.decided_by.clone(),
                });
            }
            AuthStatus::Approved => {}
        }
        if self.plan_id != plan.plan_id {
            return Err(AuthError::PlanIdMismatch {
                approved: self.plan_id.clone(),
                found: plan.plan_id.clone(),
            });
        }
        if !self.plan_sha256.eq_ignore_ascii_case(&plan.sha256) {
            return Err(AuthError::Changed {
                approved: self.plan_sha256.clone(),
                actual: plan.sha256.clone(),
            });
        }
        Ok(())
    }
}

/// Why a plan may not run.
#[derive(Debug, Error)]
pub enum AuthError {
    /// No approval exists.
    #[error("plan is not approved (pending review)")]
    Pending,
    /// The plan was reviewed and rejected.
    #[error("plan was rejected by {by}")]
    Rejected {
        /// The reviewer.
        by: String,
    },
    /// The approval is for a different plan.
    #[error("approval is for plan_id {approved:?}, but the plan says {found:?}")]
    PlanIdMismatch {
        /// The approved id.
        approved: String,
        /// The plan's id.
        found: String,
    },
    /// The plan file changed after it was approved.
    #[error("plan changed since it was approved (approved sha256 {approved}, now {actual})")]
    Changed {
        /// The approved hash.
        approved: String,
        /// The current hash.
        actual: String,
    },
    /// The approval file exists but cannot be used.
    #[error("cannot use approval file {path}: {message}")]
    BadApprovalFile {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// Where the approval for the plan at `plan_path` is kept.
pub fn approval_path(plan_path: &Path) -> PathBuf {
    let mut s = plan_path.as_os_str().to_owned();
    s.push(".approval");
    PathBuf::from(s)
}

/// Reads the approval next to `plan_path`; a missing file means pending.
pub fn load(plan_path: &Path, plan: &Plan) -> Result<PlanAuthorization, AuthError> {
    let path = approval_path(plan_path);
    let bad = |message: String| AuthError::BadApprovalFile {
        path: path.display().to_string(),
        message,
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(PlanAuthorization {
                plan_id: plan.plan_id.clone(),
                status: AuthStatus::Pending,
                plan_sha256: String::new(),
                decided_by: String::new(),
                decided_at: 0,
            });
        }
        Err(e) => return Err(bad(e.to_string())),
    };
    serde_json::from_str(&text).map_err(|e| bad(e.to_string()))
}

/// Writes the approval next to `plan_path` atomically (temp file + rename).
pub fn store(plan_path: &Path, auth: &PlanAuthorization) -> std::io::Result<PathBuf> {
    let path = approval_path(plan_path);
    let tmp = approval_path(&path.with_extension(format!("tmp-{}", uuid::Uuid::new_v4())));
    let mut body = serde_json::to_string_pretty(auth).map_err(std::io::Error::other)?;
    body.push('\n');
    std::fs::write(&tmp, body)?;
    if let Err(e) = std::fs::rename(&tmp, &path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(path)
}

/// A plan paired with an authorization that lets it run; the only input `Executor::execute` takes.
#[derive(Debug, Clone)]
pub struct ApprovedPlan {
    plan: Plan,
    authorization: PlanAuthorization,
}

impl ApprovedPlan {
    /// Pairs a plan with its authorization, refusing any that does not let it run.
    pub fn new(plan: Plan, authorization: PlanAuthorization) -> Result<Self, AuthError> {
        authorization.check(&plan)?;
        Ok(ApprovedPlan {
            plan,
            authorization,
        })
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The authorization.
    pub fn authorization(&self) -> &PlanAuthorization {
        &self.authorization
    }

    /// Re-checks the authorization and, when the plan came from a file, that the file on disk still
    /// has the approved bytes.
    pub fn recheck(&self) -> Result<(), AuthError> {
        self.authorization.check(&self.plan)?;
        if let Some(src) = &self.plan.source
            && let Ok(bytes) = std::fs::read(src)
        {
            let actual = super::parse::sha256_hex(&bytes);
            if actual != self.authorization.plan_sha256 {
                return Err(AuthError::Changed {
                    approved: self.authorization.plan_sha256.clone(),
                    actual,
                });
            }
        }
        Ok(())
    }
}
