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
use crate::policy::Policy;

/// The domain tag that starts every signed message: what the signature is for, and in which
/// layout. A signature made for anything else (another version, another purpose) cannot verify.
pub const SIGNATURE_DOMAIN: &str = "acode-run/approval/v2";

/// How a current signature starts in the approval file, so one made by an older acode-run (bare
/// hex over the v1 newline-joined message) is recognised and refused with a clear word.
pub const SIGNATURE_PREFIX: &str = "hmac-sha256-v2:";

/// What `policy_sha256` says when the effective policy is the built-in default (no policy file, or
/// one that changes nothing): see [`policy_sha256`].
pub const NO_POLICY: &str = "none";

/// The fingerprint of the effective policy an approval is bound to: [`NO_POLICY`] when `policy`
/// is the built-in default, else the hex SHA-256 of its canonical JSON (the loaded `Policy`
/// serialised with keys sorted, so whitespace, key order and spelled-out defaults in the file do
/// not matter, but every effective setting does). Approvals made without a policy file therefore
/// stay valid across upgrades that change the defaults; a policy file must be re-approved when an
/// upgrade adds a setting to it.
pub fn policy_sha256(policy: &Policy) -> String {
    if *policy == Policy::default() {
        return NO_POLICY.to_string();
    }
    // `serde_json::Value` objects are sorted maps: serialising through one is canonical.
    let canonical = serde_json::to_value(policy)
        .map(|v| v.to_string())
        .unwrap_or_default();
    crate::util::sha256_hex(canonical.as_bytes())
}

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
    /// The effective policy the decision was made under ([`policy_sha256`]): a run under another
    /// policy is refused. Absent in approvals made by acode-run before this was recorded, which
    /// must be re-approved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_sha256: Option<String>,
    /// SHA-256 (hex) of every skill file the plan's agent steps use, by path relative to the
    /// workspace (`.acode/skills/NAME/SKILL.md`): editing a skill after approval changes what
    /// runs, so `run` refuses it (exit 3) like an edited plan. Empty (and omitted) for plans
    /// without skills.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub skills: std::collections::BTreeMap<String, String>,
    /// What `approve` pinned about each MCP server the policy declares (docs/mcp.md): its
    /// identity and a SHA-256 of every allowed tool's name, description and input schema. A run
    /// refuses a server that differs (exit 36). Empty (and omitted) without MCP servers.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub mcp: std::collections::BTreeMap<String, crate::mcp::pins::ServerPin>,
    /// `hmac-sha256-v2:` and the HMAC-SHA256 (hex) of [`PlanAuthorization::signed_message`] under
    /// the approval key (`ACODE_APPROVAL_KEY` or `ACODE_APPROVAL_KEY_FILE`), when one was set at
    /// decision time. With a key, runs accept only approvals it signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

impl PlanAuthorization {
    /// A decision about `plan` by `by`, now, under the default policy; use
    /// [`PlanAuthorization::under_policy`] when the plan will run under another (before signing).
    pub fn decide(plan: &Plan, status: AuthStatus, by: &str) -> Self {
        PlanAuthorization {
            plan_id: plan.plan_id.clone(),
            status,
            plan_sha256: plan.sha256.clone(),
            decided_by: by.to_string(),
            decided_at: crate::error::now_ms(),
            skills: Default::default(),
            mcp: Default::default(),
            policy_sha256: Some(NO_POLICY.to_string()),
            signature: None,
        }
    }

    /// Binds the decision to `policy` (builder style; sign afterwards).
    pub fn under_policy(mut self, policy: &Policy) -> Self {
        self.policy_sha256 = Some(policy_sha256(policy));
        self.signature = None;
        self
    }

    /// The bytes a signature covers: the domain tag, then every field of the decision, each as a
    /// big-endian `u64` length followed by its UTF-8 bytes. No field's content can move a boundary
    /// (a newline in a `plan_id` is just a byte of that field), so one message has one reading, and
    /// the status is covered: a rejection can never verify as an approval.
    pub fn signed_message(&self) -> Vec<u8> {
        let status = match self.status {
            AuthStatus::Pending => "pending",
            AuthStatus::Approved => "approved",
            AuthStatus::Rejected => "rejected",
        };
        let decided_at = self.decided_at.to_string();
        let fields: [&str; 7] = [
            SIGNATURE_DOMAIN,
            &self.plan_id,
            status,
            &self.plan_sha256,
            self.policy_sha256.as_deref().unwrap_or(""),
            &self.decided_by,
            &decided_at,
        ];
        let mut out = Vec::new();
        for f in fields {
            out.extend_from_slice(&(f.len() as u64).to_be_bytes());
            out.extend_from_slice(f.as_bytes());
        }
        // The skill files bound to the decision, when any (docs/agents.md): each as three more
        // length-prefixed fields, after the fixed ones, so plans without skills sign as before.
        for (path, sha) in &self.skills {
            for f in ["skill", path.as_str(), sha.as_str()] {
                out.extend_from_slice(&(f.len() as u64).to_be_bytes());
                out.extend_from_slice(f.as_bytes());
            }
        }
        // The MCP pins, likewise after everything else: the server's identity, then each tool.
        for (server, pin) in &self.mcp {
            let identity = [
                "mcp",
                server.as_str(),
                pin.protocol_version.as_str(),
                pin.server_name.as_str(),
                pin.server_version.as_str(),
            ];
            let tools = pin
                .tools
                .iter()
                .flat_map(|(name, t)| ["mcp_tool", name.as_str(), t.sha256.as_str()]);
            // The CA file a remote server is trusted under, when it has one (pins without one
            // sign as before).
            let ca = pin
                .ca_cert_sha256
                .iter()
                .flat_map(|sha| ["mcp_ca_cert", sha.as_str()]);
            for f in identity.into_iter().chain(tools).chain(ca) {
                out.extend_from_slice(&(f.len() as u64).to_be_bytes());
                out.extend_from_slice(f.as_bytes());
            }
        }
        out
    }

    fn mac(key: &[u8]) -> Hmac<Sha256> {
        // HMAC accepts keys of any length, so this cannot fail.
        <Hmac<Sha256> as KeyInit>::new_from_slice(key).unwrap_or_else(|_| unreachable!())
    }

    /// Signs the decision with `key` (builder style).
    pub fn signed(mut self, key: &[u8]) -> Self {
        let mut mac = Self::mac(key);
        mac.update(&self.signed_message());
        let tag = mac.finalize().into_bytes();
        let hex = crate::util::hex(&tag);
        self.signature = Some(format!("{SIGNATURE_PREFIX}{hex}"));
        self
    }

    /// Checks the signature against `key` in constant time.
    pub fn verify_signature(&self, key: &[u8]) -> Result<(), AuthError> {
        let Some(sig) = &self.signature else {
            return Err(AuthError::Unsigned);
        };
        let Some(sig) = sig.strip_prefix(SIGNATURE_PREFIX) else {
            return Err(AuthError::OldSignature);
        };
        let bytes: Option<Vec<u8>> = (0..sig.len())
            .step_by(2)
            .map(|i| {
                sig.get(i..i + 2)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
            })
            .collect();
        let mut mac = Self::mac(key);
        mac.update(&self.signed_message());
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

    /// Checks that every skill file `plan` uses is the one this authorization approved
    /// (docs/agents.md): editing a `SKILL.md` after approval changes what runs, like editing the
    /// plan.
    pub fn check_skills(
        &self,
        plan: &Plan,
        workspace: &crate::workspace::Workspace,
    ) -> Result<(), AuthError> {
        let now = super::skills::referenced_hashes(plan, workspace);
        match super::skills::changed_since_approval(&self.skills, &now) {
            Some(why) => Err(AuthError::SkillChanged(why)),
            None => Ok(()),
        }
    }

    /// Checks that the plan runs under the policy it was approved under.
    pub fn check_policy(&self, policy: &Policy) -> Result<(), AuthError> {
        let actual = policy_sha256(policy);
        match &self.policy_sha256 {
            None => Err(AuthError::PolicyNotRecorded),
            Some(approved) if *approved != actual => Err(AuthError::PolicyChanged {
                approved: approved.clone(),
                actual,
            }),
            Some(_) => Ok(()),
        }
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
    /// The plan would run under another policy than the one it was approved under.
    #[error(
        "policy changed since approval: re-approve (approved under policy {approved}, the effective policy is now {actual})"
    )]
    PolicyChanged {
        /// The policy fingerprint in the approval.
        approved: String,
        /// The effective policy's fingerprint.
        actual: String,
    },
    /// The approval was made by an acode-run that did not record the policy.
    #[error(
        "the approval does not record the policy it was made under (made by an older acode-run): re-approve the plan"
    )]
    PolicyNotRecorded,
    /// The signature was made in a layout this acode-run no longer accepts.
    #[error(
        "the approval is signed in an older format that is no longer accepted (the signed message was ambiguous): re-approve the plan"
    )]
    OldSignature,
    /// An approval key is in force but the approval carries no signature.
    #[error(
        "the approval is not signed, but an approval key is set (ACODE_APPROVAL_KEY or ACODE_APPROVAL_KEY_FILE): approve the plan again where that key is available"
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
        source: crate::input::InputError,
    },
    /// An MCP server the policy declares is not pinned by the approval (or its pin is damaged).
    #[error("{0}")]
    McpNotPinned(String),
    /// A skill file the plan uses is not the one approved (changed, moved, or gone).
    #[error("{0}")]
    SkillChanged(String),
    /// The approval file exists but cannot be used.
    #[error("cannot use approval file {path}: {message}")]
    BadApprovalFile {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// Environment variables naming who acts, in order of preference after `--by`: acode-run's own, then
/// the CI systems' actor (GitHub Actions, GitLab CI, Buildkite, Jenkins with the build-user-vars
/// plugin).
pub const DECIDER_ENV: &[&str] = &[
    "ACODE_USER",
    "GITHUB_ACTOR",
    "GITLAB_USER_LOGIN",
    "BUILDKITE_BUILD_CREATOR",
    "BUILD_USER_ID",
];

/// Who is deciding: `explicit` (`--by`), else the first of [`DECIDER_ENV`] that is set, else the login
/// name of this process's uid, else `uid:N`. Never a placeholder like `unknown`: an audit trail must
/// name someone, and containers often have no `$USER`.
pub fn decided_by(explicit: Option<&str>) -> String {
    explicit
        .map(str::to_string)
        .into_iter()
        .chain(DECIDER_ENV.iter().filter_map(|v| std::env::var(v).ok()))
        .map(|s| s.trim().to_string())
        .find(|s| !s.is_empty())
        .or_else(login_name)
        .unwrap_or_else(|| {
            // SAFETY: getuid cannot fail.
            format!("uid:{}", unsafe { libc::getuid() })
        })
}

/// The login name of this process's uid, from the user database (getpwuid_r, so it also works
/// where `$USER` is unset).
fn login_name() -> Option<String> {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let mut size = 1024usize;
    loop {
        let mut buf = vec![0 as libc::c_char; size];
        // SAFETY: passwd is plain data; getpwuid_r fills it with pointers into `buf`, which outlives
        // every use below.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the sizes given.
        let rc =
            unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut result) };
        if rc == libc::ERANGE && size < 1 << 20 {
            size *= 4;
            continue;
        }
        if rc != 0 || result.is_null() || pwd.pw_name.is_null() {
            return None;
        }
        // SAFETY: pw_name is a NUL-terminated string inside `buf`.
        let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) }
            .to_string_lossy()
            .into_owned();
        return (!name.trim().is_empty()).then_some(name);
    }
}

/// The rejection recorded in the approval file next to `plan_path` for exactly these bytes, if that
/// is what the file holds: a rejection stands until someone explicitly approves.
pub fn rejection_in_file(plan_path: &Path, plan: &Plan) -> Option<PlanAuthorization> {
    load(plan_path, plan).ok().filter(|a| {
        a.status == AuthStatus::Rejected && a.plan_sha256.eq_ignore_ascii_case(&plan.sha256)
    })
}

/// The environment variable holding the approval signing key.
pub const APPROVAL_KEY_ENV: &str = "ACODE_APPROVAL_KEY";

/// The approval key: `ACODE_APPROVAL_KEY_FILE` (a file holding it) or `ACODE_APPROVAL_KEY`, read
/// once by the caller at start; `None` when neither is set.
pub fn approval_key() -> Result<Option<Vec<u8>>, crate::redact::SecretError> {
    Ok(crate::redact::runner_secret(APPROVAL_KEY_ENV)?.map(String::into_bytes))
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
    let limit = crate::input::MAX_APPROVAL_BYTES;
    let text = match crate::input::read_json(&path, limit, "approval file") {
        Ok(t) => t,
        Err(e) if e.is_not_found() => {
            return Ok(PlanAuthorization {
                plan_id: plan.plan_id.clone(),
                status: AuthStatus::Pending,
                plan_sha256: String::new(),
                decided_by: String::new(),
                decided_at: 0,
                skills: Default::default(),
                mcp: Default::default(),
                policy_sha256: None,
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
    /// Whether an approval key was in force and the signature verified under it (the run header
    /// and the HTML report say so).
    signature_verified: bool,
}

impl ApprovedPlan {
    /// Pairs a plan with its authorization, refusing any that does not let it run. The policy it
    /// will run under is checked when it runs ([`ApprovedPlan::check_policy`], called by
    /// `Executor::execute`).
    pub fn new(plan: Plan, authorization: PlanAuthorization) -> Result<Self, AuthError> {
        authorization.check(&plan)?;
        Ok(ApprovedPlan {
            plan,
            authorization,
            signature_verified: false,
        })
    }

    /// Like [`ApprovedPlan::new`], and when `key` is given the authorization must also carry a valid
    /// signature under it, so an approval file written by anyone without the key is refused.
    pub fn new_verified(
        plan: Plan,
        authorization: PlanAuthorization,
        key: Option<&[u8]>,
    ) -> Result<Self, AuthError> {
        let mut approved = Self::new(plan, authorization)?;
        if let Some(key) = key {
            approved.authorization.verify_signature(key)?;
            approved.signature_verified = true;
        }
        Ok(approved)
    }

    /// Checks that `policy` is the one the plan was approved under.
    pub fn check_policy(&self, policy: &Policy) -> Result<(), AuthError> {
        self.authorization.check_policy(policy)
    }

    /// Checks that every skill file the plan uses is the one approved (docs/agents.md): editing
    /// a `SKILL.md` after approval changes what runs, like editing the plan.
    pub fn check_skills(&self, workspace: &crate::workspace::Workspace) -> Result<(), AuthError> {
        self.authorization.check_skills(&self.plan, workspace)
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The authorization.
    pub fn authorization(&self) -> &PlanAuthorization {
        &self.authorization
    }

    /// How the signature stands, for the run header: `verified` (checked under the approval key
    /// in force), `unchecked` (signed, but no key was set to check it), `none`.
    pub fn signature_state(&self) -> &'static str {
        match (self.signature_verified, &self.authorization.signature) {
            (true, _) => "verified",
            (false, Some(_)) => "unchecked",
            (false, None) => "none",
        }
    }

    /// Re-checks the authorization and, when the plan came from a file, that the file on disk still
    /// has the approved bytes.
    pub fn recheck(&self) -> Result<(), AuthError> {
        self.authorization.check(&self.plan)?;
        if let Some(src) = &self.plan.source
            && let Ok(bytes) = std::fs::read(src)
        {
            let actual = crate::util::sha256_hex(&bytes);
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
    fn decided_by_prefers_the_explicit_name_and_never_says_unknown() {
        assert_eq!(decided_by(Some(" alice ")), "alice");
        let who = decided_by(None);
        assert!(!who.is_empty() && who != "unknown", "{who}");
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
        garbage.signature = Some(format!("{SIGNATURE_PREFIX}zz"));
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

    /// An MCP server's pinned CA file is signed with the rest: an approval whose CA pin was
    /// edited (to trust another CA) or removed no longer verifies.
    #[test]
    fn the_pinned_ca_file_of_a_remote_server_is_signed() {
        let mut auth = PlanAuthorization::decide(&plan(), AuthStatus::Approved, "alice");
        auth.mcp.insert(
            "rs".into(),
            crate::mcp::pins::ServerPin {
                protocol_version: "2025-11-25".into(),
                server_name: "s".into(),
                server_version: "1".into(),
                tools: Default::default(),
                ca_cert_sha256: Some("a".repeat(64)),
            },
        );
        let auth = auth.signed(b"k");
        assert!(auth.verify_signature(b"k").is_ok());
        for edit in [Some("b".repeat(64)), None] {
            let mut edited = auth.clone();
            if let Some(pin) = edited.mcp.get_mut("rs") {
                pin.ca_cert_sha256 = edit;
            }
            assert!(matches!(
                edited.verify_signature(b"k"),
                Err(AuthError::BadSignature)
            ));
        }
    }

    /// The v1 layout, for the attack below: fields joined by newlines.
    fn v1_message(a: &PlanAuthorization) -> String {
        let status = match a.status {
            AuthStatus::Pending => "pending",
            AuthStatus::Approved => "approved",
            AuthStatus::Rejected => "rejected",
        };
        format!(
            "acode-run approval v1\n{}\n{status}\n{}\n{}\n{}",
            a.plan_id, a.plan_sha256, a.decided_by, a.decided_at
        )
    }

    #[test]
    fn a_signed_rejection_never_verifies_as_another_plans_approval() {
        let key = b"reviewer-key";
        let target_sha = "b".repeat(64);
        // A plan whose id smuggles the fields of an approval of plan "deploy".
        let rejection = PlanAuthorization {
            plan_id: format!("deploy\napproved\n{target_sha}\nmallory\n1"),
            status: AuthStatus::Rejected,
            plan_sha256: "a".repeat(64),
            decided_by: "alice".into(),
            decided_at: 2,
            policy_sha256: Some(NO_POLICY.into()),
            skills: Default::default(),
            mcp: Default::default(),
            signature: None,
        };
        // The approval the attacker writes, carrying the rejection's signature.
        let forged = PlanAuthorization {
            plan_id: "deploy".into(),
            status: AuthStatus::Approved,
            plan_sha256: target_sha.clone(),
            decided_by: format!("mallory\n1\nrejected\n{}\nalice", "a".repeat(64)),
            decided_at: 2,
            policy_sha256: Some(NO_POLICY.into()),
            skills: Default::default(),
            mcp: Default::default(),
            signature: None,
        };
        // Under the old layout the two decisions were the same message: the forgery worked.
        assert_eq!(v1_message(&rejection), v1_message(&forged));
        let signed = rejection.signed(key);
        let forged = PlanAuthorization {
            signature: signed.signature.clone(),
            ..forged
        };
        assert!(signed.verify_signature(key).is_ok());
        assert!(matches!(
            forged.verify_signature(key),
            Err(AuthError::BadSignature)
        ));
        // Changing only the status (or the policy) breaks the signature too.
        for edit in [
            |a: &mut PlanAuthorization| a.status = AuthStatus::Approved,
            |a: &mut PlanAuthorization| a.policy_sha256 = Some("c".repeat(64)),
            |a: &mut PlanAuthorization| a.policy_sha256 = None,
        ] {
            let mut a = signed.clone();
            edit(&mut a);
            assert!(matches!(
                a.verify_signature(key),
                Err(AuthError::BadSignature)
            ));
        }
    }

    #[test]
    fn old_signatures_ask_for_a_new_approval() {
        let mut a = PlanAuthorization::decide(&plan(), AuthStatus::Approved, "alice").signed(b"k");
        a.signature = a
            .signature
            .map(|s| s.trim_start_matches(SIGNATURE_PREFIX).to_string());
        let err = a.verify_signature(b"k").unwrap_err();
        assert!(matches!(err, AuthError::OldSignature));
        assert!(err.to_string().contains("re-approve"), "{err}");
    }

    #[test]
    fn the_policy_is_part_of_the_approval() {
        let p = plan();
        let default = Policy::default();
        let other = Policy::parse(r#"{"allow_commands": ["curl"]}"#).unwrap();
        assert_eq!(policy_sha256(&default), NO_POLICY);
        // A file that spells out the defaults is the default policy.
        assert_eq!(
            policy_sha256(&Policy::parse(r#"{"allow_commands": []}"#).unwrap()),
            NO_POLICY
        );
        assert_eq!(policy_sha256(&other).len(), 64);
        let a = PlanAuthorization::decide(&p, AuthStatus::Approved, "alice");
        assert!(a.check_policy(&default).is_ok());
        let err = a.check_policy(&other).unwrap_err();
        assert!(
            err.to_string()
                .contains("policy changed since approval: re-approve")
        );
        let b = a.clone().under_policy(&other);
        assert!(b.check_policy(&other).is_ok());
        assert!(b.check_policy(&default).is_err());
        let mut old = a;
        old.policy_sha256 = None;
        assert!(matches!(
            old.check_policy(&default),
            Err(AuthError::PolicyNotRecorded)
        ));
    }
}
