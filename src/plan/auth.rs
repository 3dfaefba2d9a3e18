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
    /// SSH signatures over [`PlanAuthorization::ssh_message`], one per approver (issue 42,
    /// docs/approvals.md): the message covers the decision, not who made it or when, so a second
    /// approver's signature is added beside the first without invalidating it. Who signed is
    /// what the policy's `allowed_signers` file says of each key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ssh_signatures: Vec<SshSignature>,
}

/// One approver's SSH signature in an approval file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshSignature {
    /// The armored signature (`-----BEGIN SSH SIGNATURE-----`), as `ssh-keygen -Y sign -n
    /// acode-run-approval` writes it.
    pub signature: String,
    /// When it was added, Unix ms: for people reading the file; not signed, never trusted.
    pub added_at: i64,
}

/// The first line of the message approvers sign with SSH keys ([`PlanAuthorization::ssh_message`]):
/// what it is and in which layout.
pub const SSH_MESSAGE_HEADER: &str = "acode-run approval message v1";

/// How an approval is proven, as the run checked it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    /// Approvers' own SSH keys, listed in the policy's `allowed_signers`.
    Ssh,
    /// The shared HMAC key (`ACODE_APPROVAL_KEY`): whoever can verify can also sign.
    Hmac,
    /// Nothing: the approval file's hash binding only.
    #[default]
    None,
}

impl Scheme {
    /// The word used in headers, reports and events.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Ssh => "ssh",
            Scheme::Hmac => "hmac",
            Scheme::None => "none",
        }
    }
}

/// What a run trusts to prove an approval, from the policy and the environment
/// (`runner::trust`): the same for `run`, `preview`, `plan_status` and `verify`.
#[derive(Debug, Clone)]
pub enum Trust {
    /// No key: an approval file bound to the plan's hash is enough.
    Anyone,
    /// The shared HMAC key.
    Hmac(Vec<u8>),
    /// The keys of `allowed_signers` (the policy's `approvals` section).
    Ssh(crate::plan::signers::AllowedSigners),
}

/// What proved an approval: the scheme, and for SSH the signers that counted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ApprovalProof {
    /// How it was proven.
    pub scheme: Scheme,
    /// Whether a key in force checked it (false for [`Scheme::None`], and for a signature no
    /// key was set to check).
    pub verified: bool,
    /// The principals whose SSH signatures counted, in the order they appear.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signers: Vec<crate::plan::signers::VerifiedSigner>,
    /// How many distinct principals the policy required (SSH only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<usize>,
}

impl ApprovalProof {
    /// Who approved, as shown everywhere: the verified principals for SSH, else the name the
    /// approval claims (`decided_by`).
    pub fn approver(&self, claimed: &str) -> String {
        if self.signers.is_empty() {
            claimed.to_string()
        } else {
            self.signers
                .iter()
                .map(|s| s.principal.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        }
    }

    /// `verified (ssh)`, `verified (hmac)`, `claimed`: how far the approver's name is proven.
    pub fn standing(&self) -> &'static str {
        match (self.scheme, self.verified) {
            (Scheme::Ssh, true) => "verified (ssh)",
            (Scheme::Hmac, true) => "verified (hmac, shared key)",
            _ => "claimed",
        }
    }
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
            ssh_signatures: Vec::new(),
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
        let status = status_word(self.status);
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

    /// The message approvers sign with their SSH keys (docs/approvals.md): [`SSH_MESSAGE_HEADER`],
    /// then one line per field — its name, then its values as JSON strings separated by spaces —
    /// in a fixed order: `plan_id`, `status`, `plan_sha256`, `policy_sha256`, each skill file
    /// (`skill PATH SHA256`, by path), each MCP server (`mcp NAME PROTOCOL SERVER_NAME
    /// SERVER_VERSION`, by name, then its `mcp_ca_cert NAME SHA256` when it has one and its
    /// `mcp_tool NAME TOOL SHA256` lines by tool). A JSON string holds no raw newline or
    /// unescaped quote, so no value can move a line or a field boundary: one message, one
    /// reading. It covers every field the HMAC covers except who decided and when, which the
    /// key and the verification time stand for, so every approver signs the same bytes.
    pub fn ssh_message(&self) -> Vec<u8> {
        let mut out = String::from(SSH_MESSAGE_HEADER);
        out.push('\n');
        let mut line = |name: &str, values: &[&str]| {
            out.push_str(name);
            for v in values {
                out.push(' ');
                // Serialising a string cannot fail.
                out.push_str(&serde_json::to_string(v).unwrap_or_default());
            }
            out.push('\n');
        };
        line("plan_id", &[&self.plan_id]);
        line("status", &[status_word(self.status)]);
        line("plan_sha256", &[&self.plan_sha256]);
        line(
            "policy_sha256",
            &[self.policy_sha256.as_deref().unwrap_or("")],
        );
        for (path, sha) in &self.skills {
            line("skill", &[path, sha]);
        }
        for (server, pin) in &self.mcp {
            line(
                "mcp",
                &[
                    server,
                    &pin.protocol_version,
                    &pin.server_name,
                    &pin.server_version,
                ],
            );
            if let Some(ca) = &pin.ca_cert_sha256 {
                line("mcp_ca_cert", &[server, ca]);
            }
            for (tool, t) in &pin.tools {
                line("mcp_tool", &[server, tool, &t.sha256]);
            }
        }
        out.into_bytes()
    }

    /// Whether `other` is a decision on the same thing (the same [`PlanAuthorization::ssh_message`]):
    /// its SSH signatures then stand for this one too.
    pub fn same_decision(&self, other: &PlanAuthorization) -> bool {
        self.ssh_message() == other.ssh_message()
    }

    /// Proves the approval under `trust` at `now` (Unix seconds), for `plan` under `policy`:
    /// - [`Trust::Ssh`]: at least the policy's `approvals.required` distinct principals of
    ///   `allowed_signers` signed [`PlanAuthorization::ssh_message`] with keys valid now, for our
    ///   namespace, and for each `require_principal` condition the plan meets one of its
    ///   principals is among them; an approval proven only by the HMAC key is refused.
    /// - [`Trust::Hmac`]: the HMAC signature verifies under the key; an approval signed only with
    ///   SSH keys is refused.
    /// - [`Trust::Anyone`]: nothing to prove.
    ///
    /// Checks neither the plan's hash nor the policy binding ([`PlanAuthorization::check`],
    /// [`PlanAuthorization::check_policy`]).
    pub fn prove(
        &self,
        plan: &Plan,
        policy: &Policy,
        trust: &Trust,
        now: i64,
    ) -> Result<ApprovalProof, AuthError> {
        match trust {
            Trust::Anyone => Ok(ApprovalProof::default()),
            Trust::Hmac(key) => {
                if self.signature.is_none() && !self.ssh_signatures.is_empty() {
                    return Err(AuthError::SchemeMismatch(
                        "the approval is signed with SSH keys, but this policy names no approvals.allowed_signers and the shared approval key (ACODE_APPROVAL_KEY) is in force: approve again with that key, or name the allowed_signers file in the policy".into(),
                    ));
                }
                self.verify_signature(key)?;
                Ok(ApprovalProof {
                    scheme: Scheme::Hmac,
                    verified: true,
                    ..ApprovalProof::default()
                })
            }
            Trust::Ssh(allowed) => {
                let (signers, refused) = self.ssh_signers(allowed, now)?;
                check_required(&signers, &refused, allowed, plan, policy)?;
                Ok(ApprovalProof {
                    scheme: Scheme::Ssh,
                    verified: true,
                    signers,
                    required: Some(policy.approvals.required()),
                })
            }
        }
    }

    /// The distinct principals whose SSH signatures count under `allowed` at `now` (Unix
    /// seconds), and why the others do not; an error when none does. `verify` asks it of the
    /// approval inside an attestation, at the time the run started.
    pub fn ssh_signers(
        &self,
        allowed: &crate::plan::signers::AllowedSigners,
        now: i64,
    ) -> Result<(Vec<crate::plan::signers::VerifiedSigner>, Vec<String>), AuthError> {
        if self.ssh_signatures.is_empty() {
            return Err(if self.signature.is_some() {
                AuthError::SchemeMismatch(format!(
                    "the approval is signed only with the shared HMAC key (ACODE_APPROVAL_KEY), but the policy requires approvers' SSH signatures (approvals.allowed_signers: {}): approve with acode-run approve --sign KEY",
                    allowed.source
                ))
            } else {
                AuthError::NotSshSigned {
                    allowed_signers: allowed.source.clone(),
                }
            });
        }
        let message = self.ssh_message();
        let mut counted: Vec<crate::plan::signers::VerifiedSigner> = Vec::new();
        let mut refused = Vec::new();
        for (i, s) in self.ssh_signatures.iter().enumerate() {
            match allowed.verify(&s.signature, &message, now) {
                Ok(signer) => {
                    if !counted.iter().any(|c| c.principal == signer.principal) {
                        counted.push(signer);
                    }
                }
                Err(why) => refused.push(format!("signature {}: {why}", i + 1)),
            }
        }
        if counted.is_empty() {
            return Err(AuthError::SignaturesRefused(refused));
        }
        Ok((counted, refused))
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

/// The word a status is signed as.
fn status_word(status: AuthStatus) -> &'static str {
    match status {
        AuthStatus::Pending => "pending",
        AuthStatus::Approved => "approved",
        AuthStatus::Rejected => "rejected",
    }
}

/// Whether the signers that counted are enough under the policy's `approvals`: at least
/// `required` distinct principals, and for each `require_principal` condition the plan meets, one
/// of its principals among them. `refused` (why the other signatures did not count) goes into the
/// message when too few did.
fn check_required(
    signers: &[crate::plan::signers::VerifiedSigner],
    refused: &[String],
    allowed: &crate::plan::signers::AllowedSigners,
    plan: &Plan,
    policy: &Policy,
) -> Result<(), AuthError> {
    let names = || {
        signers
            .iter()
            .map(|s| s.principal.clone())
            .collect::<Vec<_>>()
    };
    let required = policy.approvals.required();
    if signers.len() < required {
        return Err(AuthError::TooFewApprovers {
            required,
            verified: names(),
            refused: refused.to_vec(),
        });
    }
    let has_agent = plan.steps.iter().any(|s| s.tool == "agent");
    for (reach, principals) in &policy.approvals.require_principal {
        let Some(why) = reach.holds(policy, has_agent) else {
            continue;
        };
        let satisfied = signers.iter().any(|s| {
            allowed
                .entry(s)
                .is_some_and(|e| principals.iter().any(|p| e.names(p)))
        });
        if !satisfied {
            return Err(AuthError::PrincipalRequired {
                why: why.to_string(),
                condition: reach.name(),
                principals: principals.clone(),
                verified: names(),
            });
        }
    }
    Ok(())
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
    /// The approval is proven by another scheme than the one in force (an HMAC-only approval
    /// where the policy requires SSH signatures, or the reverse).
    #[error("{0}")]
    SchemeMismatch(String),
    /// The policy requires SSH signatures and the approval carries none.
    #[error(
        "the approval carries no SSH signature, but the policy requires approvers' signatures (approvals.allowed_signers: {allowed_signers}): approve with acode-run approve --sign KEY, or attach one with --add-signature FILE.sig"
    )]
    NotSshSigned {
        /// The allowed_signers file.
        allowed_signers: String,
    },
    /// No SSH signature counted: each one's reason.
    #[error("no signature of the approval counts: {}", .0.join("; "))]
    SignaturesRefused(Vec<String>),
    /// Fewer distinct principals signed than the policy requires.
    #[error(
        "the policy requires {required} distinct approvers, but {} signed{}{}",
        if verified.is_empty() { "none".to_string() } else { format!("{} ({})", verified.len(), verified.join(", ")) },
        if refused.is_empty() { "" } else { "; not counted: " },
        refused.join("; ")
    )]
    TooFewApprovers {
        /// approvals.required.
        required: usize,
        /// The principals that counted.
        verified: Vec<String>,
        /// Why other signatures did not count.
        refused: Vec<String>,
    },
    /// A plan that reaches further needs one of certain principals, and none of them signed.
    #[error(
        "{why}, so the policy requires one of {} to approve (approvals.require_principal.{condition}); signed by: {}",
        principals.join(", "),
        if verified.is_empty() { "nobody".to_string() } else { verified.join(", ") }
    )]
    PrincipalRequired {
        /// What the plan does that needs it.
        why: String,
        /// The condition's name in the policy.
        condition: &'static str,
        /// Who may approve it.
        principals: Vec<String>,
        /// Who signed.
        verified: Vec<String>,
    },
    /// The `allowed_signers` file named by the policy cannot be used: a usage error (exit 2).
    #[error(transparent)]
    Signers(#[from] crate::plan::signers::SignersError),
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

impl AuthError {
    /// What `approve` needs beyond the plan's path to give an approval that would cure this: a
    /// signature by a listed key when approvers' SSH signatures are what is missing.
    pub fn approve_flags(&self) -> &'static str {
        match self {
            AuthError::NotSshSigned { .. }
            | AuthError::SignaturesRefused(_)
            | AuthError::TooFewApprovers { .. }
            | AuthError::PrincipalRequired { .. } => {
                " --sign KEY (a key allowed_signers lists; docs/approvals.md)"
            }
            _ => "",
        }
    }
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
                ssh_signatures: Vec::new(),
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
    /// How the approval was proven when the pair was made (the run header, the report, JUnit,
    /// the events and the attestation say so).
    proof: ApprovalProof,
}

impl ApprovedPlan {
    /// Pairs a plan with its authorization, refusing any that does not let it run. Nothing proves
    /// who approved ([`Scheme::None`]); the policy it will run under is checked when it runs
    /// ([`ApprovedPlan::check_policy`], called by `Executor::execute`).
    pub fn new(plan: Plan, authorization: PlanAuthorization) -> Result<Self, AuthError> {
        authorization.check(&plan)?;
        Ok(ApprovedPlan {
            plan,
            authorization,
            proof: ApprovalProof::default(),
        })
    }

    /// Like [`ApprovedPlan::new`], and when `key` is given the authorization must also carry a valid
    /// HMAC signature under it, so an approval file written by anyone without the key is refused.
    pub fn new_verified(
        plan: Plan,
        authorization: PlanAuthorization,
        key: Option<&[u8]>,
    ) -> Result<Self, AuthError> {
        let trust = key.map_or(Trust::Anyone, |k| Trust::Hmac(k.to_vec()));
        Self::proven(plan, authorization, &Policy::default(), &trust)
    }

    /// Like [`ApprovedPlan::new`], and the approval must be proven under `trust` for a run under
    /// `policy`, now ([`PlanAuthorization::prove`]): the constructor the runner uses.
    pub fn proven(
        plan: Plan,
        authorization: PlanAuthorization,
        policy: &Policy,
        trust: &Trust,
    ) -> Result<Self, AuthError> {
        let mut approved = Self::new(plan, authorization)?;
        approved.proof = approved.authorization.prove(
            &approved.plan,
            policy,
            trust,
            crate::plan::signers::now_secs(),
        )?;
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

    /// How the approval was proven.
    pub fn proof(&self) -> &ApprovalProof {
        &self.proof
    }

    /// How the signature stands, for the run header: `verified` (checked under the key or the
    /// `allowed_signers` in force), `unchecked` (signed, but nothing was set to check it), `none`.
    pub fn signature_state(&self) -> &'static str {
        let signed =
            self.authorization.signature.is_some() || !self.authorization.ssh_signatures.is_empty();
        match (self.proof.verified, signed) {
            (true, _) => "verified",
            (false, true) => "unchecked",
            (false, false) => "none",
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

    /// An approval with every field filled in: a skill and an MCP server with a tool and a CA.
    fn full_approval() -> PlanAuthorization {
        let mut a = PlanAuthorization::decide(&plan(), AuthStatus::Approved, "alice");
        a.skills
            .insert(".acode/skills/s/SKILL.md".into(), "1".repeat(64));
        let mut tools = std::collections::BTreeMap::new();
        tools.insert(
            "read".to_string(),
            crate::mcp::pins::ToolPin {
                sha256: "2".repeat(64),
                description: "reads".into(),
                input_schema: "{}".into(),
            },
        );
        a.mcp.insert(
            "srv".into(),
            crate::mcp::pins::ServerPin {
                protocol_version: "2025-11-25".into(),
                server_name: "s".into(),
                server_version: "1".into(),
                tools,
                ca_cert_sha256: Some("3".repeat(64)),
            },
        );
        a
    }

    /// A field's name, whether the SSH message covers it, and an edit of it.
    type FieldEdit = (&'static str, bool, fn(&mut PlanAuthorization));

    /// Every edit of one signed field (and what the SSH message leaves to the key and the
    /// verification time: who decided and when), by name.
    fn field_edits() -> Vec<FieldEdit> {
        // (field, covered by the SSH message too, edit)
        vec![
            ("plan_id", true, |a| a.plan_id.push('x')),
            ("status", true, |a| a.status = AuthStatus::Rejected),
            ("plan_sha256", true, |a| a.plan_sha256 = "f".repeat(64)),
            ("policy_sha256", true, |a| {
                a.policy_sha256 = Some("e".repeat(64))
            }),
            ("policy_sha256 removed", true, |a| a.policy_sha256 = None),
            ("decided_by", false, |a| a.decided_by = "mallory".into()),
            ("decided_at", false, |a| a.decided_at += 1),
            ("skill path", true, |a| {
                let v = a.skills.pop_first().unwrap().1;
                a.skills.insert(".acode/skills/t/SKILL.md".into(), v);
            }),
            ("skill hash", true, |a| {
                *a.skills.values_mut().next().unwrap() = "4".repeat(64)
            }),
            ("skill removed", true, |a| a.skills.clear()),
            ("mcp server name", true, |a| {
                let v = a.mcp.pop_first().unwrap().1;
                a.mcp.insert("other".into(), v);
            }),
            ("mcp protocol_version", true, |a| {
                a.mcp.get_mut("srv").unwrap().protocol_version = "2026-07-28".into()
            }),
            ("mcp server_name", true, |a| {
                a.mcp.get_mut("srv").unwrap().server_name = "t".into()
            }),
            ("mcp server_version", true, |a| {
                a.mcp.get_mut("srv").unwrap().server_version = "2".into()
            }),
            ("mcp tool name", true, |a| {
                let tools = &mut a.mcp.get_mut("srv").unwrap().tools;
                let v = tools.pop_first().unwrap().1;
                tools.insert("write".into(), v);
            }),
            ("mcp tool hash", true, |a| {
                a.mcp
                    .get_mut("srv")
                    .unwrap()
                    .tools
                    .values_mut()
                    .next()
                    .unwrap()
                    .sha256 = "5".repeat(64)
            }),
            ("mcp tool removed", true, |a| {
                a.mcp.get_mut("srv").unwrap().tools.clear()
            }),
            ("mcp ca_cert", true, |a| {
                a.mcp.get_mut("srv").unwrap().ca_cert_sha256 = Some("6".repeat(64))
            }),
            ("mcp ca_cert removed", true, |a| {
                a.mcp.get_mut("srv").unwrap().ca_cert_sha256 = None
            }),
            ("mcp server removed", true, |a| a.mcp.clear()),
        ]
    }

    #[test]
    fn signatures_bind_every_field_to_the_key() {
        let p = plan();
        let auth = full_approval().signed(b"k1");
        assert!(auth.verify_signature(b"k1").is_ok());
        assert!(matches!(
            auth.verify_signature(b"k2"),
            Err(AuthError::BadSignature)
        ));
        // Each field edited alone breaks the HMAC: a field dropped from the signed message
        // would let that edit through.
        for (field, _, edit) in field_edits() {
            let mut edited = auth.clone();
            edit(&mut edited);
            assert_ne!(edited, auth, "{field}: the edit changed nothing");
            assert!(
                matches!(edited.verify_signature(b"k1"), Err(AuthError::BadSignature)),
                "{field} is not covered by the HMAC"
            );
        }
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
        let signed = PlanAuthorization::decide(&p, AuthStatus::Approved, "alice").signed(b"k1");
        assert!(ApprovedPlan::new_verified(p, signed, Some(b"k1")).is_ok());
    }

    /// A throwaway ed25519 key from a fixed seed, and its `allowed_signers` naming `who`.
    fn ssh_key(seed: u8, who: &str) -> (ssh_key::PrivateKey, crate::plan::signers::AllowedSigners) {
        let pair = ssh_key::private::Ed25519Keypair::from_seed(&[seed; 32]);
        let key = ssh_key::PrivateKey::from(pair);
        let line = format!("{who} {}", key.public_key().to_openssh().unwrap());
        let allowed =
            crate::plan::signers::AllowedSigners::parse(&line, "allowed_signers").unwrap();
        (key, allowed)
    }

    fn ssh_sign(auth: &mut PlanAuthorization, key: &ssh_key::PrivateKey) {
        let sig = key
            .sign(
                crate::plan::signers::NAMESPACE,
                ssh_key::HashAlg::Sha512,
                &auth.ssh_message(),
            )
            .unwrap();
        auth.ssh_signatures.push(SshSignature {
            signature: sig.to_pem(ssh_key::LineEnding::LF).unwrap(),
            added_at: 0,
        });
    }

    #[test]
    fn an_ssh_signature_covers_every_field_of_the_decision() {
        let (key, allowed) = ssh_key(7, "alice@example.com");
        let trust = Trust::Ssh(allowed);
        let policy = Policy::default();
        let mut auth = full_approval();
        ssh_sign(&mut auth, &key);
        let proof = auth.prove(&plan(), &policy, &trust, 0).unwrap();
        assert_eq!(proof.scheme, Scheme::Ssh);
        assert_eq!(proof.signers[0].principal, "alice@example.com");
        for (field, covered, edit) in field_edits() {
            let mut edited = auth.clone();
            edit(&mut edited);
            let result = edited.prove(&plan(), &policy, &trust, 0);
            if covered {
                let err = result.expect_err(field).to_string();
                assert!(
                    err.contains("does not match this approval"),
                    "{field}: {err}"
                );
            } else {
                // Who and when are the key's and the verifier's: the claimed name never shows.
                let proof = result.unwrap_or_else(|e| panic!("{field}: {e}"));
                assert_eq!(proof.approver(&edited.decided_by), "alice@example.com");
            }
        }
    }

    #[test]
    fn the_ssh_message_has_one_reading() {
        // A value holding a newline and a quote stays one field of one line.
        let mut a = full_approval();
        a.plan_id = "p\"\nstatus \"approved".into();
        let text = String::from_utf8(a.ssh_message()).unwrap();
        assert_eq!(
            text.lines().nth(1),
            Some(r#"plan_id "p\"\nstatus \"approved""#)
        );
        assert_eq!(text.lines().nth(2), Some(r#"status "approved""#));
        assert_eq!(text.lines().filter(|l| l.starts_with("status ")).count(), 1);
        assert!(text.starts_with(SSH_MESSAGE_HEADER));
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn ssh_proofs_count_principals_and_refuse_the_other_scheme() {
        let (alice, allowed_a) = ssh_key(1, "alice@example.com");
        let (bob, _) = ssh_key(2, "bob@example.com");
        let lines = format!(
            "{}\nalice@example.com {}\nbob@example.com {}\n",
            "# team",
            alice.public_key().to_openssh().unwrap(),
            bob.public_key().to_openssh().unwrap()
        );
        let both = Trust::Ssh(crate::plan::signers::AllowedSigners::parse(&lines, "f").unwrap());
        let two =
            Policy::parse(r#"{"approvals": {"allowed_signers": "f", "required": 2}}"#).unwrap();
        let mut a = full_approval();
        ssh_sign(&mut a, &alice);
        // One principal twice is one approver.
        ssh_sign(&mut a, &alice);
        let err = a.prove(&plan(), &two, &both, 0).unwrap_err();
        assert!(
            matches!(err, AuthError::TooFewApprovers { required: 2, .. }),
            "{err}"
        );
        ssh_sign(&mut a, &bob);
        let proof = a.prove(&plan(), &two, &both, 0).unwrap();
        assert_eq!(proof.signers.len(), 2);
        assert_eq!(proof.required, Some(2));
        // A signature by a key the file does not list does not count (and says why).
        let only_alice = Trust::Ssh(allowed_a);
        let err = a
            .prove(&plan(), &two, &only_alice, 0)
            .unwrap_err()
            .to_string();
        assert!(err.contains("not counted: signature 3: key"), "{err}");
        // Only an HMAC signature where SSH is required; only SSH where the HMAC key is in force.
        let hmac_only = full_approval().signed(b"k");
        assert!(matches!(
            hmac_only.prove(&plan(), &two, &both, 0),
            Err(AuthError::SchemeMismatch(_))
        ));
        assert!(matches!(
            a.prove(&plan(), &Policy::default(), &Trust::Hmac(b"k".to_vec()), 0),
            Err(AuthError::SchemeMismatch(_))
        ));
        assert!(matches!(
            full_approval().prove(&plan(), &two, &both, 0),
            Err(AuthError::NotSshSigned { .. })
        ));
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
            ssh_signatures: Vec::new(),
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
            ssh_signatures: Vec::new(),
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
        // An approved plan checks the policy it runs under the same way.
        let approved = ApprovedPlan::new(p.clone(), b.clone()).unwrap();
        assert!(approved.check_policy(&other).is_ok());
        assert!(approved.check_policy(&default).is_err());
        let mut old = a;
        old.policy_sha256 = None;
        assert!(matches!(
            old.check_policy(&default),
            Err(AuthError::PolicyNotRecorded)
        ));
    }

    #[test]
    fn check_refuses_each_thing_that_is_not_this_approval() {
        let p = plan();
        let a = PlanAuthorization::decide(&p, AuthStatus::Approved, "alice");
        assert!(a.check(&p).is_ok());
        assert!(ApprovedPlan::new(p.clone(), a.clone()).is_ok());
        // The hash in either case is the same hash.
        let mut upper = a.clone();
        upper.plan_sha256 = upper.plan_sha256.to_uppercase();
        assert!(upper.check(&p).is_ok());
        let mut pending = a.clone();
        pending.status = AuthStatus::Pending;
        assert!(matches!(pending.check(&p), Err(AuthError::Pending)));
        let mut rejected = a.clone();
        rejected.status = AuthStatus::Rejected;
        assert!(matches!(rejected.check(&p), Err(AuthError::Rejected { by }) if by == "alice"));
        let mut other_id = a.clone();
        other_id.plan_id = "q".into();
        assert!(matches!(
            other_id.check(&p),
            Err(AuthError::PlanIdMismatch { approved, found }) if approved == "q" && found == "p"
        ));
        let mut edited = p.clone();
        edited.sha256 = "0".repeat(64);
        assert!(matches!(
            a.check(&edited),
            Err(AuthError::Changed { actual, .. }) if actual == edited.sha256
        ));
        assert!(ApprovedPlan::new(edited, a).is_err());
    }

    /// A plan file edited on disk after the run approved its bytes is refused by `recheck`.
    #[test]
    fn recheck_reads_the_plan_file_again() {
        let dir = std::env::temp_dir().join(format!("acode-recheck-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("p.json");
        let bytes = br#"{"plan_id":"p","steps":[{"step_id":"a","tool":"t"}]}"#;
        std::fs::write(&file, bytes).unwrap();
        let mut p = plan();
        p.sha256 = crate::util::sha256_hex(bytes);
        p.source = Some(file.clone());
        let a = PlanAuthorization::decide(&p, AuthStatus::Approved, "alice");
        let approved = ApprovedPlan::new(p, a).unwrap();
        assert!(approved.recheck().is_ok());
        std::fs::write(&file, br#"{"plan_id":"p","steps":[]}"#).unwrap();
        assert!(matches!(approved.recheck(), Err(AuthError::Changed { .. })));
        let _ = std::fs::remove_dir_all(&dir);
    }
    /// How an approval is proven is named the same everywhere (header, report, JUnit, events).
    #[test]
    fn how_an_approval_is_proven_is_named() {
        assert_eq!(
            [Scheme::Ssh, Scheme::Hmac, Scheme::None].map(Scheme::name),
            ["ssh", "hmac", "none"]
        );
        let signer = |who: &str| crate::plan::signers::VerifiedSigner {
            principal: who.into(),
            key: "SHA256:x".into(),
            algorithm: "ssh-ed25519".into(),
            line: 1,
        };
        let ssh = ApprovalProof {
            scheme: Scheme::Ssh,
            verified: true,
            signers: vec![signer("alice@example.com"), signer("bob@example.com")],
            required: Some(2),
        };
        // The verified principals, never the claimed name; without signers, the claim.
        assert_eq!(
            ssh.approver("mallory"),
            "alice@example.com, bob@example.com"
        );
        assert_eq!(ApprovalProof::default().approver("mallory"), "mallory");
        assert_eq!(ssh.standing(), "verified (ssh)");
        let hmac = ApprovalProof {
            scheme: Scheme::Hmac,
            verified: true,
            ..ApprovalProof::default()
        };
        assert_eq!(hmac.standing(), "verified (hmac, shared key)");
        for unproven in [
            ApprovalProof::default(),
            ApprovalProof {
                scheme: Scheme::Ssh,
                ..ApprovalProof::default()
            },
            ApprovalProof {
                scheme: Scheme::Hmac,
                ..ApprovalProof::default()
            },
        ] {
            assert_eq!(unproven.standing(), "claimed", "{unproven:?}");
        }
        // The run header's word for the signature.
        let p = plan();
        let unsigned = PlanAuthorization::decide(&p, AuthStatus::Approved, "alice");
        let state = |a: &PlanAuthorization, key: Option<&[u8]>| {
            ApprovedPlan::new_verified(p.clone(), a.clone(), key)
                .unwrap()
                .signature_state()
        };
        assert_eq!(state(&unsigned, None), "none");
        let hmac_signed = unsigned.clone().signed(b"k");
        assert_eq!(state(&hmac_signed, None), "unchecked");
        assert_eq!(state(&hmac_signed, Some(b"k")), "verified");
        // The proof the run reports is the one made, not a default.
        let proven =
            ApprovedPlan::new_verified(p.clone(), hmac_signed.clone(), Some(b"k")).unwrap();
        assert_eq!(
            (proven.proof().scheme, proven.proof().verified),
            (Scheme::Hmac, true)
        );
        let mut ssh_signed = unsigned.clone();
        ssh_signed.ssh_signatures.push(SshSignature {
            signature: "not checked here".into(),
            added_at: 0,
        });
        assert_eq!(state(&ssh_signed, None), "unchecked");
    }

    /// What `approve` needs beyond the plan's path is named only for what a signature cures.
    #[test]
    fn the_refusals_a_signature_cures_ask_for_one() {
        let sign = " --sign KEY (a key allowed_signers lists; docs/approvals.md)";
        for cured in [
            AuthError::NotSshSigned {
                allowed_signers: "f".into(),
            },
            AuthError::SignaturesRefused(vec![]),
            AuthError::TooFewApprovers {
                required: 2,
                verified: vec![],
                refused: vec![],
            },
            AuthError::PrincipalRequired {
                why: "w".into(),
                condition: "network",
                principals: vec![],
                verified: vec![],
            },
        ] {
            assert_eq!(cured.approve_flags(), sign, "{cured:?}");
        }
        for other in [
            AuthError::Pending,
            AuthError::BadSignature,
            AuthError::Unsigned,
        ] {
            assert_eq!(other.approve_flags(), "", "{other:?}");
        }
    }

    /// A second approver's signature is over the same decision whoever and whenever decided;
    /// a decision on other bytes, another policy or another status is not the same one.
    #[test]
    fn the_same_decision_is_the_same_ssh_message() {
        let a = full_approval();
        let mut later = a.clone();
        later.decided_by = "bob".into();
        later.decided_at += 1000;
        assert!(a.same_decision(&later));
        for (field, covered, edit) in field_edits() {
            let mut edited = a.clone();
            edit(&mut edited);
            assert_eq!(!a.same_decision(&edited), covered, "{field}");
        }
    }

    /// The approval file: written atomically next to the plan, read back as written; missing
    /// means pending; damaged is refused naming the file; a rejection counts only for the
    /// bytes it rejected.
    #[test]
    fn the_approval_file_round_trips_and_a_rejection_stands_for_its_bytes() {
        let dir = std::env::temp_dir().join(format!("acode-auth-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let plan_path = dir.join("p.json");
        assert_eq!(approval_path(&plan_path), dir.join("p.json.approval"));
        let p = plan();
        let missing = load(&plan_path, &p).unwrap();
        assert_eq!(missing.status, AuthStatus::Pending);
        assert_eq!(missing.plan_id, "p");
        assert!(rejection_in_file(&plan_path, &p).is_none());
        let a = full_approval().signed(b"k");
        assert_eq!(store(&plan_path, &a).unwrap(), dir.join("p.json.approval"));
        assert_eq!(load(&plan_path, &p).unwrap(), a);
        assert!(rejection_in_file(&plan_path, &p).is_none(), "an approval");
        let no = PlanAuthorization::decide(&p, AuthStatus::Rejected, "bob");
        store(&plan_path, &no).unwrap();
        assert_eq!(rejection_in_file(&plan_path, &p), Some(no));
        let mut other_bytes = p.clone();
        other_bytes.sha256 = "0".repeat(64);
        assert!(rejection_in_file(&plan_path, &other_bytes).is_none());
        // Nothing but the approval is left behind.
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["p.json.approval"]);
        std::fs::write(approval_path(&plan_path), "{not json").unwrap();
        let err = load(&plan_path, &p).unwrap_err();
        assert!(matches!(err, AuthError::BadApprovalFile { .. }), "{err}");
        assert!(err.to_string().contains("p.json.approval"), "{err}");
        std::fs::remove_file(approval_path(&plan_path)).unwrap();
        std::fs::create_dir(approval_path(&plan_path)).unwrap();
        assert!(matches!(load(&plan_path, &p), Err(AuthError::Input { .. })));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_blank_name_is_no_name() {
        let who = decided_by(Some("   "));
        assert!(!who.trim().is_empty(), "{who:?}");
    }

    /// Under the HMAC key: an unsigned approval is refused as unsigned, an SSH-only one as the
    /// other scheme, and one that carries both is proven by its HMAC signature.
    #[test]
    fn under_the_shared_key_each_refusal_says_what_is_missing() {
        let p = plan();
        let policy = Policy::default();
        let key = Trust::Hmac(b"k".to_vec());
        let unsigned = PlanAuthorization::decide(&p, AuthStatus::Approved, "alice");
        assert!(matches!(
            unsigned.prove(&p, &policy, &key, 0),
            Err(AuthError::Unsigned)
        ));
        let (ssh, _) = ssh_key(8, "alice@example.com");
        let mut ssh_only = unsigned.clone();
        ssh_sign(&mut ssh_only, &ssh);
        assert!(matches!(
            ssh_only.prove(&p, &policy, &key, 0),
            Err(AuthError::SchemeMismatch(_))
        ));
        let mut both = unsigned.signed(b"k");
        ssh_sign(&mut both, &ssh);
        let proof = both.prove(&p, &policy, &key, 0).unwrap();
        assert_eq!((proof.scheme, proof.verified), (Scheme::Hmac, true));
        assert!(proof.signers.is_empty());
        assert_eq!(
            both.prove(&p, &policy, &Trust::Anyone, 0).unwrap(),
            ApprovalProof::default()
        );
    }

    /// A plan that reaches further (here: one with an agent step) needs one of the reserved
    /// principals among its signers; a plan that does not, does not.
    #[test]
    fn a_reserved_principal_is_required_only_where_the_plan_reaches_that_far() {
        let (alice, _) = ssh_key(11, "alice@example.com");
        let (sec, _) = ssh_key(12, "sec@example.com");
        let lines = format!(
            "alice@example.com {}\nsec@example.com,security@example.com {}\n",
            alice.public_key().to_openssh().unwrap(),
            sec.public_key().to_openssh().unwrap()
        );
        let trust = Trust::Ssh(crate::plan::signers::AllowedSigners::parse(&lines, "f").unwrap());
        let policy = Policy::parse(
            r#"{"approvals": {"allowed_signers": "f",
                "require_principal": {"agent": ["security@example.com"]}}}"#,
        )
        .unwrap();
        let plain = plan();
        let agent = crate::plan::parse::parse(
            br#"{"plan_id":"p","steps":[{"step_id":"a","tool":"agent","arguments":{"goal":"g"}}]}"#,
        )
        .unwrap();
        let signed = |p: &Plan, key: &ssh_key::PrivateKey| {
            let mut a =
                PlanAuthorization::decide(p, AuthStatus::Approved, "x").under_policy(&policy);
            ssh_sign(&mut a, key);
            a
        };
        assert!(
            signed(&plain, &alice)
                .prove(&plain, &policy, &trust, 0)
                .is_ok()
        );
        let err = signed(&agent, &alice)
            .prove(&agent, &policy, &trust, 0)
            .unwrap_err();
        assert!(
            matches!(&err, AuthError::PrincipalRequired { condition: "agent", verified, .. }
                if verified == &["alice@example.com".to_string()]),
            "{err}"
        );
        // A line that names the reserved principal among others counts.
        let proof = signed(&agent, &sec)
            .prove(&agent, &policy, &trust, 0)
            .unwrap();
        assert_eq!(proof.approver("x"), "sec@example.com,security@example.com");
    }

    /// Skills the approval recorded must still be the ones the plan uses.
    #[test]
    fn an_approved_skill_that_is_gone_refuses_the_plan() {
        let dir = std::env::temp_dir().join(format!("acode-skills-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let ws = crate::workspace::Workspace::new(&dir).unwrap();
        let p = plan();
        let a = PlanAuthorization::decide(&p, AuthStatus::Approved, "alice");
        assert!(a.check_skills(&p, &ws).is_ok());
        let mut with_skill = a.clone();
        with_skill
            .skills
            .insert(".acode/skills/s/SKILL.md".into(), "1".repeat(64));
        let err = with_skill.check_skills(&p, &ws).unwrap_err();
        assert!(matches!(err, AuthError::SkillChanged(_)), "{err}");
        let approved = ApprovedPlan::new(p, with_skill).unwrap();
        assert!(approved.check_skills(&ws).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The login name is the user database's name for this uid: compared with /etc/passwd,
    /// where the machines that run the tests keep it.
    #[test]
    fn the_login_name_is_the_user_databases() {
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() }.to_string();
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        let listed = passwd.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() > 2 && f[2] == uid).then(|| f[0].to_string())
        });
        match listed {
            Some(name) => assert_eq!(login_name(), Some(name)),
            // Another user database (NSS): whatever it says, never a blank name.
            None => assert!(login_name().is_none_or(|n| !n.trim().is_empty())),
        }
    }
}
