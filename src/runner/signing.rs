//! Approvals signed with approvers' own SSH keys (issue 42, docs/approvals.md): making the
//! signature (`ssh-keygen -Y sign`, as git does for `gpg.format ssh`), taking one made elsewhere
//! (`--add-signature`), and what a decision checks before it records one.
//!
//! Signing may call `ssh-keygen`; verifying never does (the `ssh-key` crate, in-process,
//! `plan::signers`). An approver at a laptop without acode-run signs the message file
//! `approve --message FILE` wrote with plain `ssh-keygen -Y sign -n acode-run-approval -f KEY
//! FILE`, and whoever has the plan attaches `FILE.sig`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{DecisionRequest, RunnerError};
use crate::plan::auth::{AuthError, AuthStatus, PlanAuthorization, SshSignature, Trust};
use crate::plan::signers::{NAMESPACE, ParsedSignature, VerifiedSigner};
use crate::plan::{self, Plan};
use crate::policy::Policy;
use crate::workspace::Workspace;

/// How long `ssh-keygen` may take: long enough to type a passphrase or touch a security key.
const SIGN_TIMEOUT: Duration = Duration::from_secs(300);

/// The program that makes signatures (`ACODE_SSH_KEYGEN` names another, as git's
/// `gpg.ssh.program` does).
fn ssh_keygen() -> String {
    std::env::var("ACODE_SSH_KEYGEN")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "ssh-keygen".to_string())
}

/// The SSH signature a decision brings, if any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SshRequest {
    /// None.
    #[default]
    None,
    /// Sign now with this key: a private key file, or a public key whose private half is in
    /// `ssh-agent` (as git's `user.signingKey`).
    Sign(PathBuf),
    /// Attach the signature in this file (`ssh-keygen -Y sign` wrote it elsewhere).
    Attach(PathBuf),
}

/// Signs `message` with `key` through `ssh-keygen -Y sign -n acode-run-approval`: the armored
/// signature, or why not (the program's own message reached the user's terminal).
pub fn sign(message: &[u8], key: &Path) -> Result<String, RunnerError> {
    let program = ssh_keygen();
    let failed = |why: String| RunnerError::Signing {
        key: key.display().to_string(),
        why,
    };
    if !key.is_file() {
        return Err(failed("no such key file".into()));
    }
    let args: [&OsStr; 6] = [
        OsStr::new("-Y"),
        OsStr::new("sign"),
        OsStr::new("-n"),
        OsStr::new(NAMESPACE),
        OsStr::new("-f"),
        key.as_os_str(),
    ];
    let out = crate::process::foreground::run_foreground(
        &program,
        &args,
        message,
        crate::plan::signers::MAX_SIGNATURE_CHARS,
        SIGN_TIMEOUT,
    )
    .map_err(|e| failed(format!("cannot start {program}: {e}")))?;
    if out.status.is_none() {
        return Err(failed(format!(
            "{program} did not finish within {} s",
            SIGN_TIMEOUT.as_secs()
        )));
    }
    if !out.success() || out.truncated {
        return Err(failed(format!(
            "{program} -Y sign failed (its message is above); is the key's private half readable, or loaded in ssh-agent?"
        )));
    }
    String::from_utf8(out.stdout).map_err(|_| failed(format!("{program} printed no signature")))
}

/// Reads a signature file (`FILE.sig`) through the bounded reader.
pub fn read_signature(path: &Path) -> Result<String, RunnerError> {
    let bad = |why: String| RunnerError::SignatureFile {
        path: path.display().to_string(),
        why,
    };
    let bytes = crate::input::read_bounded(
        path,
        crate::plan::signers::MAX_SIGNATURE_CHARS as u64,
        "signature file",
    )
    .map_err(|e| bad(e.to_string()))?;
    String::from_utf8(bytes).map_err(|_| bad("not text: an armored SSH signature is ASCII".into()))
}

/// Adds the SSH signature `request` brings to `auth` (the decision just built), or checks that
/// none is needed:
/// - under a policy with `approvals.allowed_signers`, an approval must bring one (a rejection
///   need not: it grants nothing);
/// - the signature must be over `auth`'s [`PlanAuthorization::ssh_message`], for our namespace;
/// - under such a policy its key must be listed there and valid now, `--by` (if given) must be
///   one of the principals the file gives it, and `decided_by` becomes the principals whose
///   signatures count; without one the name stays what was claimed;
/// - the signatures already in `PLAN.approval` for the same decision are kept (another key's
///   earlier signature by the same key is replaced), so a second approver adds to the first.
///
/// Returns the signer when the policy names who may sign.
pub fn apply(
    auth: &mut PlanAuthorization,
    plan_path: &Path,
    plan: &Plan,
    workspace: &Workspace,
    policy: &Policy,
    request: &DecisionRequest,
) -> Result<Option<VerifiedSigner>, RunnerError> {
    let allowed_signers = policy.approvals.allowed_signers.clone();
    let armored = match &request.ssh {
        SshRequest::None => {
            if let (Some(file), AuthStatus::Approved) = (&allowed_signers, request.status) {
                return Err(RunnerError::SignatureNeeded {
                    allowed_signers: file.clone(),
                });
            }
            return Ok(None);
        }
        SshRequest::Sign(key) => sign(&auth.ssh_message(), key)?,
        SshRequest::Attach(file) => read_signature(file)?,
    };
    let refused = |why: String| RunnerError::Unauthorized {
        path: plan_path.display().to_string(),
        source: AuthError::SignaturesRefused(vec![why]),
    };
    let parsed = ParsedSignature::parse(&armored).map_err(|r| refused(r.to_string()))?;
    let message = auth.ssh_message();
    parsed.check(&message).map_err(|r| refused(r.to_string()))?;
    let now = crate::plan::signers::now_secs();
    let trust = match &allowed_signers {
        Some(_) => Some(super::trust(policy, workspace, None)?),
        None => None,
    };
    let signer = match &trust {
        Some(Trust::Ssh(allowed)) => {
            let signer = allowed
                .signer_of(&parsed, now)
                .map_err(|r| refused(r.to_string()))?;
            if let Some(by) = &request.by
                && !allowed.entry(&signer).is_some_and(|e| e.names(by))
            {
                return Err(RunnerError::NotTheSigner {
                    by: by.clone(),
                    principal: signer.principal.clone(),
                    key: signer.key.clone(),
                });
            }
            Some(signer)
        }
        _ => None,
    };
    let mut signatures: Vec<SshSignature> = plan::auth::load(plan_path, plan)
        .ok()
        .filter(|previous| previous.same_decision(auth))
        .map(|previous| previous.ssh_signatures)
        .unwrap_or_default();
    signatures.retain(|s| ParsedSignature::parse(&s.signature).is_ok_and(|p| p.key != parsed.key));
    signatures.push(SshSignature {
        signature: armored.trim_end().to_string() + "\n",
        added_at: crate::error::now_ms(),
    });
    auth.ssh_signatures = signatures;
    if let Some(Trust::Ssh(allowed)) = &trust {
        let mut names: Vec<String> = Vec::new();
        for s in &auth.ssh_signatures {
            if let Ok(v) = allowed.verify(&s.signature, &message, now)
                && !names.contains(&v.principal)
            {
                names.push(v.principal);
            }
        }
        auth.decided_by = names.join(", ");
    }
    Ok(signer)
}
