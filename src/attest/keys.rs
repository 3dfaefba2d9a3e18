//! The CI key an attestation is signed with (`ACODE_ATTEST_KEY_FILE`) and the public key `verify`
//! checks it with: ed25519 only, read from the files people already have — an OpenSSH key
//! (`ssh-keygen -t ed25519`) or PKCS#8 PEM (`openssl genpkey -algorithm ed25519`) for the private
//! half, an OpenSSH `.pub` line or an SPKI PEM (`-----BEGIN PUBLIC KEY-----`) for the public one.
//! Never an approver's key: the CI job holds only this one.

use std::path::Path;

use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey};
use ed25519_dalek::{Signer, Verifier};
use thiserror::Error;

/// The environment variable naming the attestation signing key's file.
pub const ATTEST_KEY_ENV: &str = "ACODE_ATTEST_KEY_FILE";

/// The largest key file read.
const MAX_KEY_BYTES: u64 = 64 * 1024;

/// Why a key cannot be used.
#[derive(Debug, Error)]
pub enum KeyError {
    /// The file could not be read.
    #[error("key file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: crate::input::InputError,
    },
    /// The file holds no usable ed25519 key.
    #[error("key file {path}: {why}")]
    Format {
        /// The file.
        path: String,
        /// What is wrong.
        why: String,
    },
}

/// The private key attestations are signed with.
pub struct AttestKey {
    signing: ed25519_dalek::SigningKey,
}

impl std::fmt::Debug for AttestKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AttestKey")
            .field("public", &self.public().openssh())
            .finish_non_exhaustive()
    }
}

fn read_text(path: &Path, what: &'static str) -> Result<String, KeyError> {
    let bytes =
        crate::input::read_bounded(path, MAX_KEY_BYTES, what).map_err(|source| KeyError::Read {
            path: path.display().to_string(),
            source,
        })?;
    String::from_utf8(bytes).map_err(|_| KeyError::Format {
        path: path.display().to_string(),
        why: "not a text key file (OpenSSH or PEM)".into(),
    })
}

impl AttestKey {
    /// Reads an ed25519 private key: OpenSSH (unencrypted) or PKCS#8 PEM.
    pub fn load(path: &Path) -> Result<AttestKey, KeyError> {
        let text = read_text(path, "attestation key")?;
        let bad = |why: String| KeyError::Format {
            path: path.display().to_string(),
            why,
        };
        let signing = if text.contains("-----BEGIN OPENSSH PRIVATE KEY-----") {
            let key = ssh_key::PrivateKey::from_openssh(text.trim())
                .map_err(|e| bad(format!("not a readable OpenSSH private key ({e})")))?;
            if key.is_encrypted() {
                return Err(bad(
                    "the OpenSSH key is passphrase-protected; a CI key is read unattended: keep it unencrypted in the CI secret store".into(),
                ));
            }
            let Some(pair) = key.key_data().ed25519() else {
                return Err(bad(format!(
                    "a {} key; attestations are signed with ed25519 only",
                    key.algorithm().as_str()
                )));
            };
            ed25519_dalek::SigningKey::from_bytes(&pair.private.to_bytes())
        } else if text.contains("-----BEGIN PRIVATE KEY-----") {
            ed25519_dalek::SigningKey::from_pkcs8_pem(text.trim()).map_err(|e| {
                bad(format!(
                    "not an ed25519 PKCS#8 key ({e}); attestations are signed with ed25519 only"
                ))
            })?
        } else {
            return Err(bad(
                "expected an ed25519 private key: OpenSSH (-----BEGIN OPENSSH PRIVATE KEY-----) or PKCS#8 PEM (-----BEGIN PRIVATE KEY-----)".into(),
            ));
        };
        Ok(AttestKey { signing })
    }

    /// The key named by `ACODE_ATTEST_KEY_FILE`, when it is set.
    pub fn from_env() -> Result<Option<AttestKey>, KeyError> {
        match std::env::var_os(ATTEST_KEY_ENV) {
            Some(p) if !p.is_empty() => Self::load(Path::new(&p)).map(Some),
            _ => Ok(None),
        }
    }

    /// Its public half.
    pub fn public(&self) -> PublicKey {
        PublicKey(self.signing.verifying_key())
    }

    /// Signs `message`.
    pub fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.signing.sign(message).to_bytes()
    }
}

/// The public key an attestation's signature is checked with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey(ed25519_dalek::VerifyingKey);

impl PublicKey {
    /// Reads an ed25519 public key: an OpenSSH line (`ssh-ed25519 AAAA… comment`) or SPKI PEM.
    pub fn load(path: &Path) -> Result<PublicKey, KeyError> {
        let text = read_text(path, "public key")?;
        Self::parse(&text).map_err(|why| KeyError::Format {
            path: path.display().to_string(),
            why,
        })
    }

    /// Parses a public key's text (see [`PublicKey::load`]).
    pub fn parse(text: &str) -> Result<PublicKey, String> {
        let text = text.trim();
        if text.contains("-----BEGIN PUBLIC KEY-----") {
            return ed25519_dalek::VerifyingKey::from_public_key_pem(text)
                .map(PublicKey)
                .map_err(|e| format!("not an ed25519 public key in PEM ({e})"));
        }
        let key = ssh_key::PublicKey::from_openssh(text).map_err(|e| {
            format!(
                "expected an ed25519 public key: an OpenSSH line (ssh-ed25519 AAAA…) or PEM (-----BEGIN PUBLIC KEY-----) ({e})"
            )
        })?;
        let Some(ed) = key.key_data().ed25519() else {
            return Err(format!(
                "a {} key; attestations are signed with ed25519 only",
                key.algorithm().as_str()
            ));
        };
        ed25519_dalek::VerifyingKey::from_bytes(&ed.0)
            .map(PublicKey)
            .map_err(|e| format!("not a valid ed25519 point ({e})"))
    }

    /// The raw 32 bytes, hex: how securesystemslib writes an ed25519 key's `keyval.public`.
    pub fn hex(&self) -> String {
        crate::util::hex(self.0.as_bytes())
    }

    /// The key id a DSSE signature names: securesystemslib's default for an ed25519 key — the
    /// SHA-256 of the canonical JSON `{"keytype":"ed25519","keyval":{"public":HEX},"scheme":"ed25519"}`
    /// — so the in-toto tools find the key under the id they would give it themselves.
    pub fn keyid(&self) -> String {
        let canonical = format!(
            r#"{{"keytype":"ed25519","keyval":{{"public":"{}"}},"scheme":"ed25519"}}"#,
            self.hex()
        );
        crate::util::sha256_hex(canonical.as_bytes())
    }

    /// The OpenSSH line (`ssh-ed25519 AAAA…`), for people.
    pub fn openssh(&self) -> String {
        let data =
            ssh_key::public::KeyData::Ed25519(ssh_key::public::Ed25519PublicKey(self.0.to_bytes()));
        ssh_key::PublicKey::from(data)
            .to_openssh()
            .unwrap_or_default()
    }

    /// The OpenSSH SHA-256 fingerprint (`SHA256:…`), for people.
    pub fn fingerprint(&self) -> String {
        let data =
            ssh_key::public::KeyData::Ed25519(ssh_key::public::Ed25519PublicKey(self.0.to_bytes()));
        data.fingerprint(ssh_key::HashAlg::Sha256).to_string()
    }

    /// Whether `signature` is this key's over `message`.
    pub fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        ed25519_dalek::Signature::from_slice(signature)
            .is_ok_and(|sig| self.0.verify(message, &sig).is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
    use ed25519_dalek::pkcs8::{EncodePrivateKey, EncodePublicKey};

    /// `text` in a file of its own, removed when the returned guard drops.
    struct KeyFile(std::path::PathBuf);
    impl KeyFile {
        fn new(bytes: &[u8]) -> KeyFile {
            let path =
                std::env::temp_dir().join(format!("acode-attest-key-{}", uuid::Uuid::new_v4()));
            std::fs::write(&path, bytes).unwrap();
            KeyFile(path)
        }
    }
    impl Drop for KeyFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    const SEED: [u8; 32] = [7; 32];

    #[test]
    fn the_ci_key_reads_from_openssh_or_pkcs8_and_its_public_half_from_either_form() {
        let dalek = ed25519_dalek::SigningKey::from_bytes(&SEED);
        let openssh = ssh_key::PrivateKey::from(ssh_key::private::Ed25519Keypair::from_seed(&SEED))
            .to_openssh(ssh_key::LineEnding::LF)
            .unwrap();
        let pkcs8 = dalek.to_pkcs8_pem(LineEnding::LF).unwrap();
        let a = AttestKey::load(&KeyFile::new(openssh.as_bytes()).0).unwrap();
        let b = AttestKey::load(&KeyFile::new(pkcs8.as_bytes()).0).unwrap();
        assert_eq!(a.public(), b.public());
        assert_eq!(a.sign(b"m"), dalek.sign(b"m").to_bytes());
        assert!(a.public().verifies(b"m", &a.sign(b"m")));
        assert!(!a.public().verifies(b"n", &a.sign(b"m")));
        assert!(!a.public().verifies(b"m", &a.sign(b"m")[..63]));
        let other = ed25519_dalek::SigningKey::from_bytes(&[8; 32]);
        assert!(!a.public().verifies(b"m", &other.sign(b"m").to_bytes()));
        // The public half: an OpenSSH line (with a comment) or SPKI PEM.
        let line = a.public().openssh();
        assert!(line.starts_with("ssh-ed25519 AAAA"), "{line}");
        assert_eq!(
            PublicKey::parse(&format!("{line} ci@example.com\n")),
            Ok(a.public())
        );
        let spki = dalek
            .verifying_key()
            .to_public_key_pem(LineEnding::LF)
            .unwrap();
        assert_eq!(PublicKey::parse(&spki), Ok(a.public()));
        assert_eq!(
            PublicKey::load(&KeyFile::new(spki.as_bytes()).0).unwrap(),
            a.public()
        );
        assert_eq!(
            a.public().hex(),
            crate::util::hex(dalek.verifying_key().as_bytes())
        );
        let fingerprint = ssh_key::PublicKey::from_openssh(&line)
            .unwrap()
            .fingerprint(ssh_key::HashAlg::Sha256)
            .to_string();
        assert_eq!(a.public().fingerprint(), fingerprint);
        let keyid = a.public().keyid();
        assert_eq!(keyid.len(), 64);
        assert_ne!(keyid, PublicKey(other.verifying_key()).keyid());
        assert!(format!("{a:?}").contains(&line), "{a:?}");
    }

    #[test]
    fn other_keys_and_files_are_refused_saying_why() {
        let refused = |bytes: &[u8]| {
            AttestKey::load(&KeyFile::new(bytes).0)
                .unwrap_err()
                .to_string()
        };
        let public = PublicKey(ed25519_dalek::SigningKey::from_bytes(&SEED).verifying_key());
        for (bytes, why) in [
            (
                public.openssh().into_bytes(),
                "expected an ed25519 private key",
            ),
            (
                b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".to_vec(),
                "not an ed25519 PKCS#8 key",
            ),
            (
                b"-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n"
                    .to_vec(),
                "not a readable OpenSSH private key",
            ),
            (vec![0xff, 0xfe, 0x00], "not a text key file"),
        ] {
            let err = refused(&bytes);
            assert!(err.contains(why), "{err}");
            assert!(err.starts_with("key file /"), "{err}");
        }
        let missing = std::env::temp_dir().join(format!("acode-no-key-{}", uuid::Uuid::new_v4()));
        assert!(matches!(
            AttestKey::load(&missing),
            Err(KeyError::Read { .. })
        ));
        // A public key of another type: the P-256 generator point is a valid key.
        let xy = "6B17D1F2E12C4247F8BCE6E563A440F277037D812DEB33A0F4A13945D898C296\
                  4FE342E2FE1A7F9B8EE7EB4A7C0F9E162BCE33576B315ECECBB6406837BF51F5";
        let mut g = vec![4u8];
        g.extend(
            (0..xy.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&xy[i..i + 2], 16).unwrap()),
        );
        let ecdsa = ssh_key::public::EcdsaPublicKey::from_sec1_bytes(&g).unwrap();
        let line = ssh_key::PublicKey::from(ssh_key::public::KeyData::Ecdsa(ecdsa))
            .to_openssh()
            .unwrap();
        let err = PublicKey::parse(&line).unwrap_err();
        assert!(err.contains("a ecdsa-sha2-nistp256 key"), "{err}");
        let err = PublicKey::parse("ssh-ed25519 !!!").unwrap_err();
        assert!(err.contains("expected an ed25519 public key"), "{err}");
        let err = PublicKey::parse("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----")
            .unwrap_err();
        assert!(err.contains("not an ed25519 public key in PEM"), "{err}");
    }
}
