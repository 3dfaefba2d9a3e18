//! Attestations: `acode-run verify`'s reading of an envelope (`attest::dsse::Envelope::parse`,
//! `verify`) and of the statement in it (`attest::verify::verify`), on bytes an attacker wrote.
//!
//! Properties: never a panic; nothing the fuzzer writes verifies under a key only this process
//! holds (no forgery), and every refusal of such input is an envelope refusal (exit 42), never a
//! later check; any bytes signed by this process as a payload round-trip through the envelope
//! exactly (sign, serialise, parse, verify give the same payload back), and when they also read
//! as a run statement `verify` accepts them without a workspace or an allowed_signers file only
//! if the run's exit code is 0.
#![no_main]

use std::sync::OnceLock;

use acode_run::attest::dsse::Envelope;
use acode_run::attest::keys::{AttestKey, PublicKey};
use acode_run::attest::verify::{VerifyFailure, VerifyRequest, verify};
use base64::Engine as _;
use libfuzzer_sys::fuzz_target;

/// An ed25519 key only this process holds: PKCS#8 PEM of a seed from the process id and time.
fn key() -> &'static (AttestKey, PublicKey) {
    static KEY: OnceLock<(AttestKey, PublicKey)> = OnceLock::new();
    KEY.get_or_init(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let mut seed = [0u8; 32];
        seed[..16].copy_from_slice(&now.to_le_bytes());
        seed[16..20].copy_from_slice(&std::process::id().to_le_bytes());
        // PKCS#8 of an ed25519 private key: a fixed prefix, then the seed.
        let mut der = vec![
            0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22,
            0x04, 0x20,
        ];
        der.extend_from_slice(&seed);
        let pem = format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            base64::engine::general_purpose::STANDARD.encode(&der)
        );
        let path = acode_run_fuzz::scratch("attestation-key").join("key.pem");
        std::fs::write(&path, pem).unwrap();
        let key = AttestKey::load(&path).expect("the target's key loads");
        let public = key.public();
        (key, public)
    })
}

fuzz_target!(|data: &[u8]| {
    let (private, public) = key();
    // The fuzzer's bytes as an envelope.
    if let Ok(envelope) = Envelope::parse(data) {
        assert!(
            envelope.verify(public).is_err(),
            "an envelope from the fuzzer verified under a key it cannot know"
        );
    }
    let request = VerifyRequest {
        envelope: data,
        key: public,
        workspace: None,
        allowed_signers: None,
    };
    match verify(&request) {
        Ok(_) => panic!("an attestation from the fuzzer verified"),
        Err(VerifyFailure::Envelope(_)) => {}
        Err(other) => panic!("refused past the envelope check: {other}"),
    }
    // The fuzzer's bytes as a payload this process signs.
    let envelope = Envelope::sign(acode_run::attest::PAYLOAD_TYPE, data, private);
    let text = serde_json::to_vec(&envelope).unwrap();
    let parsed = Envelope::parse(&text).expect("a signed envelope parses");
    assert_eq!(
        parsed.verify(public).expect("a signed envelope verifies"),
        data,
        "the payload did not round-trip"
    );
    let request = VerifyRequest {
        envelope: &text,
        key: public,
        workspace: None,
        allowed_signers: None,
    };
    if let Ok(verified) = verify(&request) {
        assert_eq!(verified.statement.predicate.run.exit_code, Some(0));
    }
});
