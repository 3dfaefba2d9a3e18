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
