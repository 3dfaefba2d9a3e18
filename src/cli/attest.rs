//! `acode-run attest RUN_ID FILE`, `run --attest FILE` and `acode-run verify` (issue 42): the
//! CLI's side — reading the key, writing the file, printing what holds. What an attestation says
//! and how it is checked is `crate::attest`.

use std::path::Path;

use super::shell::{Origin, Shell};
use super::{Args, CliError};
use crate::attest::keys::{ATTEST_KEY_ENV, AttestKey, PublicKey};
use crate::attest::verify::VerifyRequest;
use crate::error::exit;
use crate::store::{AttestationRecord, Store};

/// The attestation signing key, read before a run starts so a missing or unusable key refuses
/// the run before anything runs (exit 2).
pub(super) fn signing_key() -> Result<AttestKey, CliError> {
    match AttestKey::from_env() {
        Ok(Some(key)) => Ok(key),
        Ok(None) => Err(CliError::new(
            exit::USAGE,
            format!(
                "an attestation is signed with the CI's key: set {ATTEST_KEY_ENV} to an ed25519 private key file (OpenSSH or PKCS#8 PEM; docs/attestations.md)"
            ),
        )),
        Err(e) => Err(CliError::new(exit::USAGE, e.to_string())),
    }
}

/// Writes the attestation of `run_id` to `out`, signed with `key`, and records that it was
/// written; says so on stderr.
pub(super) fn write(
    shell: &Shell,
    store: &mut Store,
    run_id: &str,
    key: &AttestKey,
    out: &Path,
) -> Result<(), CliError> {
    let (bytes, subjects) = crate::attest::envelope(store, run_id, key)
        .map_err(|e| CliError::new(e.exit_code(), e.to_string()))?;
    crate::util::write_replacing(out, &bytes).map_err(|e| {
        CliError::new(
            exit::INTERNAL,
            format!("cannot write the attestation {}: {e}", out.display()),
        )
    })?;
    let record = AttestationRecord {
        path: crate::workspace::absolute(out).display().to_string(),
        sha256: crate::util::sha256_hex(&bytes),
        key: key.public().fingerprint(),
        written_at: crate::error::now_ms(),
        subjects,
    };
    let full_id = store
        .run(run_id)
        .map(|r| r.run_id)
        .map_err(|e| CliError::new(exit::INTERNAL, e.to_string()))?;
    store
        .record_attestation(&full_id, &record)
        .map_err(|e| CliError::new(exit::INTERNAL, e.to_string()))?;
    shell.err_line(format_args!(
        "attestation of run {full_id} ({subjects} file(s), signed by {}) → {}",
        record.key,
        out.display()
    ));
    Ok(())
}

/// `acode-run attest RUN_ID FILE`.
pub(super) fn cmd_attest(args: &Args, shell: &Shell) -> Result<i32, CliError> {
    let key = signing_key()?;
    let mut store = super::query_store(args)?;
    write(
        shell,
        &mut store,
        &args.positionals[0],
        &key,
        Path::new(&args.positionals[1]),
    )?;
    Ok(exit::OK)
}

/// `acode-run verify ATTESTATION --key FILE [--workspace DIR] [--allowed-signers FILE]`.
pub(super) fn cmd_verify(args: &Args, shell: &Shell) -> Result<i32, CliError> {
    let path = Path::new(&args.positionals[0]);
    let usage = |m: String| CliError::new(exit::USAGE, m);
    let envelope =
        crate::input::read_bounded(path, crate::attest::dsse::MAX_ENVELOPE_BYTES, "attestation")
            .map_err(|e| usage(format!("cannot read attestation {}: {e}", path.display())))?;
    let key_path = args
        .key
        .as_deref()
        .ok_or_else(|| usage("--key FILE is required".into()))?;
    let key = PublicKey::load(key_path).map_err(|e| usage(e.to_string()))?;
    let allowed = match &args.allowed_signers {
        Some(p) => Some(
            crate::plan::signers::AllowedSigners::load(p, &p.display().to_string())
                .map_err(|e| usage(e.to_string()))?,
        ),
        None => None,
    };
    let request = VerifyRequest {
        envelope: &envelope,
        key: &key,
        workspace: args.workspace.as_deref(),
        allowed_signers: allowed.as_ref(),
    };
    match crate::attest::verify::verify(&request) {
        Ok(verified) => {
            if args.json {
                let doc = serde_json::json!({
                    "verified": true,
                    "checks": verified.lines,
                    "statement": verified.statement,
                });
                shell.out_json(&doc, Origin::Runner);
            } else {
                for line in &verified.lines {
                    shell.err_line(crate::terminal::line(line));
                }
                shell.err_line(format_args!("verified: {}", path.display()));
            }
            Ok(exit::OK)
        }
        Err(failure) => {
            let code = failure.exit_code();
            if args.json {
                let doc = serde_json::json!({
                    "verified": false,
                    "exit_code": code,
                    "problem": failure.to_string(),
                });
                shell.out_json(&doc, Origin::Runner);
                return Ok(code);
            }
            Err(CliError::new(
                code,
                format!(
                    "{}: {}",
                    path.display(),
                    crate::terminal::line(&failure.to_string())
                ),
            ))
        }
    }
}
