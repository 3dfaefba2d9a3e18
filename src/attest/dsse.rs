//! DSSE, the Dead Simple Signing Envelope in-toto attestations travel in: the payload and its
//! type, base64, and signatures over their pre-authentication encoding ([`pae`]), so a signature
//! can never be taken for one over another type of document.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::keys::{AttestKey, PublicKey};

/// The largest envelope `verify` reads (a run's attestation is kilobytes; 100 000 written files
/// make a few MB).
pub const MAX_ENVELOPE_BYTES: u64 = 64 * 1024 * 1024;

/// An envelope as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    /// The payload, base64.
    pub payload: String,
    /// What the payload is (`application/vnd.in-toto+json`).
    #[serde(rename = "payloadType")]
    pub payload_type: String,
    /// Its signatures.
    pub signatures: Vec<EnvelopeSignature>,
}

/// One signature of an envelope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvelopeSignature {
    /// Which key made it (a hint: verification tries the key it is given).
    #[serde(default)]
    pub keyid: String,
    /// The signature, base64.
    pub sig: String,
}

/// Why an envelope does not verify.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum DsseError {
    /// Not an envelope.
    #[error("not a DSSE envelope: {0}")]
    Malformed(String),
    /// No signature of it verifies under the key.
    #[error("no signature of the envelope verifies under key {0}")]
    BadSignature(String),
}

/// DSSE's pre-authentication encoding: `DSSEv1 LEN(type) type LEN(body) body`, lengths as ASCII
/// decimals, separated by single spaces.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {} {} ",
        payload_type.len(),
        payload_type,
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// Standard base64 as written, or the URL-safe alphabet, with or without padding: DSSE asks
/// verifiers to accept either.
fn decode(text: &str) -> Option<Vec<u8>> {
    use base64::engine::general_purpose::{STANDARD, URL_SAFE, URL_SAFE_NO_PAD};
    let unpadded = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::RequireNone),
    );
    STANDARD
        .decode(text)
        .or_else(|_| unpadded.decode(text))
        .or_else(|_| URL_SAFE.decode(text))
        .or_else(|_| URL_SAFE_NO_PAD.decode(text))
        .ok()
}

impl Envelope {
    /// Signs `payload` of type `payload_type` with `key`.
    pub fn sign(payload_type: &str, payload: &[u8], key: &AttestKey) -> Envelope {
        let b64 = base64::engine::general_purpose::STANDARD;
        let sig = key.sign(&pae(payload_type, payload));
        Envelope {
            payload: b64.encode(payload),
            payload_type: payload_type.to_string(),
            signatures: vec![EnvelopeSignature {
                keyid: key.public().keyid(),
                sig: b64.encode(sig),
            }],
        }
    }

    /// Reads an envelope's JSON (duplicate keys refused: one document, one reading).
    pub fn parse(bytes: &[u8]) -> Result<Envelope, DsseError> {
        crate::input::check_unique_keys(bytes).map_err(|e| DsseError::Malformed(e.to_string()))?;
        serde_json::from_slice(bytes).map_err(|e| DsseError::Malformed(e.to_string()))
    }

    /// The payload, when a signature of the envelope verifies under `key` over its type and
    /// payload.
    pub fn verify(&self, key: &PublicKey) -> Result<Vec<u8>, DsseError> {
        let payload = decode(&self.payload)
            .ok_or_else(|| DsseError::Malformed("the payload is not base64".into()))?;
        if self.signatures.is_empty() {
            return Err(DsseError::Malformed("no signatures".into()));
        }
        let message = pae(&self.payload_type, &payload);
        let ok = self
            .signatures
            .iter()
            .filter_map(|s| decode(&s.sig))
            .any(|sig| key.verifies(&message, &sig));
        if ok {
            Ok(payload)
        } else {
            Err(DsseError::BadSignature(key.fingerprint()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pae_matches_the_specification_example() {
        // The DSSE protocol document's example.
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
        assert_eq!(pae("", b""), b"DSSEv1 0  0 ".to_vec());
    }

    #[test]
    fn base64_in_either_alphabet_is_read() {
        assert_eq!(decode("+/8="), Some(vec![0xfb, 0xff]));
        assert_eq!(decode("-_8"), Some(vec![0xfb, 0xff]));
        assert_eq!(decode("+/8"), Some(vec![0xfb, 0xff]));
        assert_eq!(decode("!!"), None);
    }

    /// An attestation key from a fixed seed, read from the PKCS#8 file CI would hold.
    fn key(seed: u8) -> AttestKey {
        use ed25519_dalek::pkcs8::EncodePrivateKey;
        let pem = ed25519_dalek::SigningKey::from_bytes(&[seed; 32])
            .to_pkcs8_pem(ed25519_dalek::pkcs8::spki::der::pem::LineEnding::LF)
            .unwrap();
        let path = std::env::temp_dir().join(format!("acode-dsse-key-{}", uuid::Uuid::new_v4()));
        std::fs::write(&path, pem.as_bytes()).unwrap();
        let key = AttestKey::load(&path);
        let _ = std::fs::remove_file(&path);
        key.unwrap()
    }

    #[test]
    fn a_signature_covers_the_payload_type_and_the_payload() {
        let b64 = base64::engine::general_purpose::STANDARD;
        let k = key(1);
        let env = Envelope::sign("application/vnd.in-toto+json", br#"{"a":1}"#, &k);
        assert_eq!(env.verify(&k.public()), Ok(br#"{"a":1}"#.to_vec()));
        assert_eq!(env.signatures.len(), 1);
        assert_eq!(env.signatures[0].keyid, k.public().keyid());
        assert_eq!(
            Envelope::parse(&serde_json::to_vec(&env).unwrap()),
            Ok(env.clone())
        );
        let refused = |e: &Envelope| {
            e.verify(&k.public()) == Err(DsseError::BadSignature(k.public().fingerprint()))
        };
        // The same signature over another type, or another payload, or under another key.
        let mut other_type = env.clone();
        other_type.payload_type = "application/json".into();
        assert!(refused(&other_type));
        let mut other_payload = env.clone();
        other_payload.payload = b64.encode(br#"{"a":2}"#);
        assert!(refused(&other_payload));
        assert!(matches!(
            env.verify(&key(2).public()),
            Err(DsseError::BadSignature(_))
        ));
        // One signature that verifies is enough, wherever it stands; none, or a payload that
        // is not base64, is not an envelope.
        let mut two = env.clone();
        two.signatures.insert(
            0,
            EnvelopeSignature {
                keyid: String::new(),
                sig: b64.encode([0u8; 64]),
            },
        );
        assert!(two.verify(&k.public()).is_ok());
        let mut none = env.clone();
        none.signatures.clear();
        assert!(matches!(
            none.verify(&k.public()),
            Err(DsseError::Malformed(_))
        ));
        let mut garbled = env.clone();
        garbled.payload = "!!".into();
        assert!(matches!(
            garbled.verify(&k.public()),
            Err(DsseError::Malformed(_))
        ));
        // One document, one reading.
        assert!(matches!(
            Envelope::parse(br#"{"payload":"","payload":"","payloadType":"x","signatures":[]}"#),
            Err(DsseError::Malformed(_))
        ));
    }
}
