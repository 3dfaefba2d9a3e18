//! Plan authorization (SPEC §3): a plan runs only with an approval bound to its exact bytes.
//!
//! The approval lives next to the plan as `<plan>.approval` so that a reviewed plan and its approval
//! are committed together. It records the SHA-256 of the plan file, so any edit after approval — even
//! whitespace — voids it.

use std::path::{Path, PathBuf};

use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
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
    /// SHA-256 (hex) of every skill file the plan's agent steps use, by path relative to the
    /// workspace (`.acode/skills/NAME/SKILL.md`): editing a skill after approval changes what
    /// runs, so `run` refuses it (exit 3) like an edited plan. Empty (and omitted) for plans
    /// without skills.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub skills: std::collections::BTreeMap<String, String>,
    /// HMAC-SHA256 (hex) of the fields above under the approval key (`ACODE_APPROVAL_KEY`), when
    /// one was set at decision time. With a key, runs accept only approvals it signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
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
            skills: Default::default(),
            signature: None,
        }
    }

    /// The bytes a signature covers: every field of the decision, in a fixed layout.
    fn signed_message(&self) -> String {
        let status = match self.status {
            AuthStatus::Pending => "pending",
            AuthStatus::Approved => "approved",
            AuthStatus::Rejected => "rejected",
        };
        let mut message = format!(
            "acode-run approval v1\n{}\n{status}\n{}\n{}\n{}",
            self.plan_id, self.plan_sha256, self.decided_by, self.decided_at
        );
        // Skill hashes, when any: paths are skill names under fixed directories (no newlines).
        for (path, sha) in &self.skills {
            message.push_str(&format!("\nskill {} {path} {sha}", path.len()));
        }
        message
    }

    fn mac(key: &[u8]) -> Hmac<Sha256> {
        // HMAC accepts keys of any length, so this cannot fail.
        <Hmac<Sha256> as KeyInit>::new_from_slice(key).unwrap_or_else(|_| unreachable!())
    }

    /// Signs the decision with `key` (builder style).
    pub fn signed(mut self, key: &[u8]) -> Self {
        let mut mac = Self::mac(key);
        mac.update(self.signed_message().as_bytes());
        let tag = mac.finalize().into_bytes();
        self.signature = Some(tag.iter().map(|b| format!("{b:02x}")).collect());
        self
    }

    /// Checks the signature against `key` in constant time.
    pub fn verify_signature(&self, key: &[u8]) -> Result<(), AuthError> {
        let Some(sig) = &self.signature else {
            return Err(AuthError::Unsigned);
        };
        let bytes: Option<Vec<u8>> = (0..sig.len())
            .step_by(2)
            .map(|i| {
                sig.get(i..i + 2)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
            })
            .collect();
        let mut mac = Self::mac(key);
        mac.update(self.signed_message().as_bytes());
        match bytes {
            Some(bytes) if mac.verify_slice(&bytes).is_ok() => Ok(()),
            _ => Err(AuthError::BadSignature),
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
    /// An approval key is in force but the approval carries no signature.
    #[error(
        "the approval is not signed, but ACODE_APPROVAL_KEY is set: approve the plan again where that key is available"
    )]
    Unsigned,
    /// The signature does not match the approval under the key in force (forged, edited, or signed
    /// with another key).
    #[error("the approval's signature does not match (edited, forged, or signed with another key)")]
    BadSignature,
    /// The approval file is refused unread (not a regular file, too large) or has a duplicate key:
    /// a usage error (exit 2), not a verdict on the plan.
    #[error("cannot read approval file {path}: {source}")]
    Input {
        /// The file.
        path: String,
        /// Why.
        source: crate::sandbox::input::InputError,
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

/// The environment variable holding the approval signing key.
pub const APPROVAL_KEY_ENV: &str = "ACODE_APPROVAL_KEY";

/// The approval key from the environment, if set and non-empty.
pub fn approval_key_from_env() -> Option<Vec<u8>> {
    std::env::var_os(APPROVAL_KEY_ENV)
        .filter(|k| !k.is_empty())
        .map(|k| k.into_encoded_bytes())
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
    let limit = crate::sandbox::input::MAX_APPROVAL_BYTES;
    let text = match crate::sandbox::input::read_json(&path, limit, "approval file") {
        Ok(t) => t,
        Err(e) if e.is_not_found() => {
            return Ok(PlanAuthorization {
                plan_id: plan.plan_id.clone(),
                status: AuthStatus::Pending,
                plan_sha256: String::new(),
                decided_by: String::new(),
                decided_at: 0,
                skills: Default::default(),
                signature: None,
            });
        }
        Err(source) => {
            return Err(AuthError::Input {
                path: path.display().to_string(),
                source,
            });
        }
    };
    serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))
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

    /// Like [`ApprovedPlan::new`], and when `key` is given the authorization must also carry a valid
    /// signature under it, so an approval file written by anyone without the key is refused.
    pub fn new_verified(
        plan: Plan,
        authorization: PlanAuthorization,
        key: Option<&[u8]>,
    ) -> Result<Self, AuthError> {
        let approved = Self::new(plan, authorization)?;
        if let Some(key) = key {
            approved.authorization.verify_signature(key)?;
        }
        Ok(approved)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        crate::plan::parse::parse(br#"{"plan_id":"p","steps":[{"step_id":"a","tool":"t"}]}"#)
            .unwrap()
    }

    #[test]
    fn signatures_bind_every_field_to_the_key() {
        let p = plan();
        let auth = PlanAuthorization::decide(&p, AuthStatus::Approved, "alice").signed(b"k1");
        assert!(auth.verify_signature(b"k1").is_ok());
        assert!(matches!(
            auth.verify_signature(b"k2"),
            Err(AuthError::BadSignature)
        ));
        let mut edited = auth.clone();
        edited.decided_by = "mallory".into();
        assert!(matches!(
            edited.verify_signature(b"k1"),
            Err(AuthError::BadSignature)
        ));
        let mut garbage = auth.clone();
        garbage.signature = Some("zz".into());
        assert!(matches!(
            garbage.verify_signature(b"k1"),
            Err(AuthError::BadSignature)
        ));
        let unsigned = PlanAuthorization::decide(&p, AuthStatus::Approved, "alice");
        assert!(matches!(
            unsigned.verify_signature(b"k1"),
            Err(AuthError::Unsigned)
        ));
        assert!(ApprovedPlan::new_verified(p.clone(), unsigned.clone(), None).is_ok());
        assert!(ApprovedPlan::new_verified(p.clone(), unsigned, Some(b"k1")).is_err());
        assert!(ApprovedPlan::new_verified(p, auth, Some(b"k1")).is_ok());
    }
}
