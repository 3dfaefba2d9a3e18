//! `acode-run verify` (issue 42): an attestation checked offline, by anyone holding the CI key's
//! public half — the envelope's signature, then (when asked) that its subjects are the files in
//! a workspace and that the approval inside verifies against an `allowed_signers` file, then
//! that the run completed. The first check that fails is the answer, with its own exit code
//! (`cli/exit_codes.rs`): 42 envelope, 43 subject, 44 approval, 45 the run did not complete.

use std::path::Path;

use thiserror::Error;

use super::dsse::Envelope;
use super::keys::PublicKey;
use super::{PAYLOAD_TYPE, PREDICATE_TYPE, STATEMENT_TYPE, Statement};
use crate::plan::AuthStatus;
use crate::plan::signers::AllowedSigners;

/// What `verify` is asked to check.
pub struct VerifyRequest<'a> {
    /// The attestation file's bytes.
    pub envelope: &'a [u8],
    /// The key it must be signed with.
    pub key: &'a PublicKey,
    /// The workspace its subjects must match, if given.
    pub workspace: Option<&'a Path>,
    /// The allowed signers its approval must verify against, if given.
    pub allowed_signers: Option<&'a AllowedSigners>,
}

/// An attestation that holds, and what was checked, one line each.
#[derive(Debug)]
pub struct Verified {
    /// The statement.
    pub statement: Statement,
    /// What holds, for people.
    pub lines: Vec<String>,
}

/// The first thing about an attestation that does not hold.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum VerifyFailure {
    /// Not an envelope of a run statement signed with the key given (exit 42).
    #[error("{0}")]
    Envelope(String),
    /// A subject differs from the file in the workspace (exit 43).
    #[error("{0}")]
    Subject(String),
    /// The approval inside does not verify against the allowed signers (exit 44).
    #[error("{0}")]
    Approval(String),
    /// The run did not complete (exit 45).
    #[error("run {run_id} did not complete: status {status}, exit code {}", exit_code.map_or("none".to_string(), |c| c.to_string()))]
    RunFailed {
        /// The run.
        run_id: String,
        /// Its status.
        status: String,
        /// Its exit code.
        exit_code: Option<i64>,
    },
}

/// Checks `request` (see the module docs).
pub fn verify(request: &VerifyRequest) -> Result<Verified, VerifyFailure> {
    let env = |m: String| VerifyFailure::Envelope(m);
    let envelope = Envelope::parse(request.envelope).map_err(|e| env(e.to_string()))?;
    if envelope.payload_type != PAYLOAD_TYPE {
        return Err(env(format!(
            "the envelope's payloadType is {:?}, not {PAYLOAD_TYPE:?}: not an in-toto attestation",
            envelope.payload_type
        )));
    }
    let payload = envelope
        .verify(request.key)
        .map_err(|e| env(e.to_string()))?;
    crate::input::check_unique_keys(&payload).map_err(|e| env(format!("the statement: {e}")))?;
    let value: serde_json::Value = serde_json::from_slice(&payload)
        .map_err(|e| env(format!("the statement is not JSON: {e}")))?;
    let statement_type = value.get("_type").and_then(|t| t.as_str()).unwrap_or("");
    if statement_type != STATEMENT_TYPE {
        return Err(env(format!(
            "the statement's _type is {statement_type:?}, not {STATEMENT_TYPE:?}"
        )));
    }
    let predicate_type = value
        .get("predicateType")
        .and_then(|t| t.as_str())
        .unwrap_or("");
    if predicate_type != PREDICATE_TYPE {
        return Err(env(format!(
            "the predicateType is {predicate_type:?}, not acode-run's {PREDICATE_TYPE:?}"
        )));
    }
    let statement: Statement = serde_json::from_value(value)
        .map_err(|e| env(format!("the statement does not read as a run record: {e}")))?;
    let p = &statement.predicate;
    let mut lines = vec![
        format!(
            "signature: valid, by key {} (ed25519)",
            request.key.fingerprint()
        ),
        format!(
            "run {} of plan {} (sha256 {}), policy {}",
            p.run.run_id, p.plan.plan_id, p.plan.sha256, p.policy.sha256
        ),
    ];
    match request.workspace {
        Some(root) => {
            check_subjects(&statement, root)?;
            lines.push(format!(
                "subjects: all {} file(s) match {}{}",
                statement.subject.len(),
                root.display(),
                if p.files.truncated {
                    " (the list stopped at its limit)"
                } else {
                    ""
                }
            ));
        }
        None => lines.push(format!(
            "subjects: {} file(s), not compared (no --workspace)",
            statement.subject.len()
        )),
    }
    match request.allowed_signers {
        Some(allowed) => {
            let who = check_approval(&statement, allowed)?;
            lines.push(format!(
                "approval: verified against {}: {}",
                allowed.source,
                who.join(", ")
            ));
        }
        None => lines.push(format!(
            "approval: {} ({}; not re-checked: no --allowed-signers)",
            p.approval.approver,
            if p.approval.verified {
                format!("{} verified when the run started", p.approval.scheme)
            } else {
                "claimed".to_string()
            }
        )),
    }
    lines.push(format!(
        "sandbox: {}{}",
        p.sandbox.mode,
        if p.sandbox.every_promise_held {
            ", every promise held".to_string()
        } else {
            format!(", not held: {}", p.sandbox.not_held.join("; "))
        }
    ));
    let refused = p.network.iter().filter(|h| !h.allowed).count();
    lines.push(format!(
        "ran {} program(s); {} host(s) asked for, {refused} refused; {} model turn(s)",
        p.programs.len(),
        p.network.len(),
        p.model.turns
    ));
    let completed = p.steps.iter().filter(|s| s.status == "completed").count();
    lines.push(format!(
        "steps: {completed} of {} completed; exit code {}",
        p.steps.len(),
        p.run.exit_code.map_or("none".into(), |c| c.to_string())
    ));
    if p.run.exit_code != Some(0) {
        return Err(VerifyFailure::RunFailed {
            run_id: p.run.run_id.clone(),
            status: p.run.status.clone(),
            exit_code: p.run.exit_code,
        });
    }
    Ok(Verified { statement, lines })
}

/// Every subject is a file in `root` with the digest given.
fn check_subjects(statement: &Statement, root: &Path) -> Result<(), VerifyFailure> {
    let bad = |m: String| VerifyFailure::Subject(m);
    let ws = crate::workspace::Workspace::new(root)
        .map_err(|e| bad(format!("workspace {}: {e}", root.display())))?;
    for s in &statement.subject {
        let Some(want) = s.digest.get("sha256") else {
            return Err(bad(format!("subject {:?} has no sha256 digest", s.name)));
        };
        let path = ws.resolve(&s.name).map_err(|v| {
            bad(format!(
                "subject {:?} is not a workspace path: {}",
                s.name, v.reason
            ))
        })?;
        match crate::workspace::changes::hash_file(&path) {
            None => {
                return Err(bad(format!(
                    "subject {:?}: no such regular file in {}",
                    s.name,
                    root.display()
                )));
            }
            Some((got, _)) if !got.eq_ignore_ascii_case(want) => {
                return Err(bad(format!(
                    "subject {:?} differs: the attestation says sha256 {want}, the file is {got}",
                    s.name
                )));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The approval inside is an approval of this plan under this policy, signed by enough distinct
/// principals of `allowed` with keys valid when the run started: who they are.
fn check_approval(
    statement: &Statement,
    allowed: &AllowedSigners,
) -> Result<Vec<String>, VerifyFailure> {
    let bad = |m: String| VerifyFailure::Approval(m);
    let p = &statement.predicate;
    let Some(auth) = &p.approval.authorization else {
        return Err(bad("the attestation carries no approval document".into()));
    };
    if auth.status != AuthStatus::Approved {
        return Err(bad(format!(
            "the approval inside is {:?}, not approved",
            auth.status
        )));
    }
    if auth.plan_id != p.plan.plan_id || !auth.plan_sha256.eq_ignore_ascii_case(&p.plan.sha256) {
        return Err(bad(format!(
            "the approval is for plan {} (sha256 {}), but the run ran {} (sha256 {})",
            auth.plan_id, auth.plan_sha256, p.plan.plan_id, p.plan.sha256
        )));
    }
    if auth.policy_sha256.as_deref() != Some(p.policy.sha256.as_str()) {
        return Err(bad(format!(
            "the approval is bound to policy {}, but the run ran under {}",
            auth.policy_sha256.as_deref().unwrap_or("(none recorded)"),
            p.policy.sha256
        )));
    }
    if auth.ssh_signatures.is_empty() {
        return Err(bad(format!(
            "the approval carries no SSH signature (scheme {}): nothing to check against {}",
            p.approval.scheme, allowed.source
        )));
    }
    let at = p.run.started_at.div_euclid(1000);
    let (signers, refused) = auth
        .ssh_signers(allowed, at)
        .map_err(|e| bad(e.to_string()))?;
    let required = p.approval.required.unwrap_or(1);
    if signers.len() < required {
        return Err(bad(format!(
            "{required} distinct approvers were required, {} verify against {}{}",
            signers.len(),
            allowed.source,
            if refused.is_empty() {
                String::new()
            } else {
                format!(" ({})", refused.join("; "))
            }
        )));
    }
    Ok(signers.into_iter().map(|s| s.principal).collect())
}
