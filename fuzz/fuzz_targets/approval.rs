//! Approval files: `plan::auth::load` on a `PLAN.approval` file (as the runner reads it), then
//! the checks the runner makes with it (`check` against the plan, `verify_signature`, `prove`
//! under an `allowed_signers` of a key only this process holds); and the same bytes as an
//! `allowed_signers` file (`plan::signers::AllowedSigners::parse`).
//!
//! Properties: never a panic; a duplicate key (independent detector) is always refused; an
//! approval that loads, stored with `auth::store` and loaded again, is equal; no input is
//! accepted as signed under a key only this process knows, by HMAC or by SSH signature (no
//! forgery), while an approval this process signs with that SSH key is accepted (the check is
//! not refusing everything); every `allowed_signers` line parsed names a line of the input, and
//! no file the fuzzer writes makes a signature by the process's key count unless it lists that
//! key.
#![no_main]

use std::sync::OnceLock;

use acode_run::plan::signers::{AllowedSigners, NAMESPACE};
use acode_run::plan::{auth, parse};
use libfuzzer_sys::fuzz_target;

const PLAN: &[u8] = br#"{"plan_id": "fuzz", "steps": [{"step_id": "a", "tool": "file_read", "arguments": {"path": "README.md"}}]}"#;

fn plan() -> &'static acode_run::plan::Plan {
    static PLAN_MODEL: OnceLock<acode_run::plan::Plan> = OnceLock::new();
    PLAN_MODEL.get_or_init(|| parse::parse(PLAN).expect("the target's plan parses"))
}

fn key() -> &'static [u8] {
    static KEY: OnceLock<Vec<u8>> = OnceLock::new();
    KEY.get_or_init(|| {
        let mut k = Vec::new();
        k.extend_from_slice(std::process::id().to_le_bytes().as_slice());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        k.extend_from_slice(&now.to_le_bytes());
        k
    })
}

/// An SSH key only this process holds (seeded from its key), and the `allowed_signers` listing it.
fn ssh() -> &'static (ssh_key::PrivateKey, AllowedSigners, String) {
    static SSH: OnceLock<(ssh_key::PrivateKey, AllowedSigners, String)> = OnceLock::new();
    SSH.get_or_init(|| {
        let mut seed = [0u8; 32];
        for (i, b) in key().iter().enumerate() {
            seed[i % 32] ^= b;
        }
        let private =
            ssh_key::PrivateKey::from(ssh_key::private::Ed25519Keypair::from_seed(&seed));
        let public = private.public_key().to_openssh().expect("encodes");
        let allowed = AllowedSigners::parse(&format!("fuzz@example.com {public}\n"), "fuzz")
            .expect("the target's allowed_signers parses");
        (private, allowed, public)
    })
}

fn ssh_signed(approval: &auth::PlanAuthorization) -> auth::PlanAuthorization {
    let sig = ssh()
        .0
        .sign(NAMESPACE, ssh_key::HashAlg::Sha512, &approval.ssh_message())
        .expect("signs");
    let mut signed = approval.clone();
    signed.ssh_signatures = vec![auth::SshSignature {
        signature: sig.to_pem(ssh_key::LineEnding::LF).expect("encodes"),
        added_at: 0,
    }];
    signed
}

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(signers) = AllowedSigners::parse(text, "fuzz")
    {
        let lines = text.lines().count();
        for e in &signers.entries {
            assert!(e.line >= 1 && e.line <= lines, "line {} of {lines}", e.line);
        }
        let probe = ssh_signed(&auth::PlanAuthorization::decide(
            plan(),
            auth::AuthStatus::Approved,
            "fuzz",
        ));
        let counted = signers.verify(
            &probe.ssh_signatures[0].signature,
            &probe.ssh_message(),
            0,
        );
        if counted.is_ok() {
            assert!(
                text.contains(ssh().2.split(' ').nth(1).unwrap_or("?")),
                "a signature by a key the file does not list counted"
            );
        }
    }
    let dir = acode_run_fuzz::scratch("approval");
    let plan_path = dir.join("plan.json");
    let plan = plan();
    std::fs::write(auth::approval_path(&plan_path), data).unwrap();
    let loaded = auth::load(&plan_path, plan);
    if acode_run_fuzz::has_duplicate_key(data) == Some(true) {
        assert!(
            loaded.is_err(),
            "an approval with a duplicate key was accepted"
        );
    }
    let Ok(approval) = loaded else { return };
    let _ = approval.check(plan);
    assert!(
        approval.verify_signature(key()).is_err(),
        "an approval from the fuzzer verified under a key it cannot know"
    );
    let policy = acode_run::policy::Policy::default();
    let trust = auth::Trust::Ssh(ssh().1.clone());
    assert!(
        approval.prove(plan, &policy, &trust, 0).is_err(),
        "an approval from the fuzzer was proven by an SSH key it cannot know"
    );
    let _ = approval.ssh_message();
    assert!(
        ssh_signed(&approval)
            .prove(plan, &policy, &trust, 0)
            .is_ok(),
        "an approval signed with the listed key was refused"
    );
    let copy = dir.join("copy.json");
    auth::store(&copy, &approval).expect("store");
    let again = auth::load(&copy, plan).expect("a stored approval loads");
    assert_eq!(approval, again, "the round trip changed the approval");
});
