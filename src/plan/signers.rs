//! Who may approve (issue 42): git's `allowed_signers` file, and SSH signatures (`SSHSIG`, as
//! `ssh-keygen -Y sign` makes them) checked against it in-process.
//!
//! An approval signed with an approver's own SSH key proves who approved, which the shared HMAC key
//! cannot: whoever can verify an HMAC can also make one. The policy names an `allowed_signers`
//! file (`"approvals": {"allowed_signers": PATH}`, the format of `ssh-keygen(1)`'s ALLOWED SIGNERS
//! section, which git uses for `gpg.ssh.allowedSignersFile`); a signature counts only when its key
//! is listed there, for our namespace ([`NAMESPACE`]), at the time of the check. The principal
//! shown as the approver is the one that file gives the key, never a name the approver typed.
//!
//! Verification is the `ssh-key` crate's (docs/dependencies.md); parsing the file is ours, and
//! follows OpenSSH's rules: a principals pattern-list, then optional comma-separated options
//! (`cert-authority`, `namespaces="…"`, `valid-after="…"`, `valid-before="…"`, keywords in any
//! case, values in double quotes), then the key type and the base64 key, then an optional comment.
//! A line OpenSSH would refuse is refused here too, naming the file and the line, so a reviewer who
//! checks the file with `ssh-keygen -Y verify` and the runner never disagree about it.

use std::path::Path;

use ssh_key::{HashAlg, PublicKey, SshSig};
use thiserror::Error;

/// The SSH signature namespace of approvals: what `ssh-keygen -Y sign -n` must be given. A
/// signature made for anything else (git commits sign with `git`, files with `file`) never counts
/// as an approval.
pub const NAMESPACE: &str = "acode-run-approval";

/// The largest `allowed_signers` file accepted (a line per key; a team's file is a few kilobytes).
pub const MAX_ALLOWED_SIGNERS_BYTES: u64 = 1024 * 1024;

/// The largest armored signature accepted in an approval (an RSA-16384 signature is under 6 KB).
pub const MAX_SIGNATURE_CHARS: usize = 16 * 1024;

/// One line of an `allowed_signers` file.
#[derive(Debug, Clone)]
pub struct SignerEntry {
    /// The 1-based line number, for messages.
    pub line: usize,
    /// The principals field as written (comma-separated patterns): what the approver is called.
    pub principals: String,
    /// `namespaces="…"`: the namespace patterns the key may sign for; `None` for any.
    pub namespaces: Option<Vec<String>>,
    /// `valid-after`: Unix seconds from which the key counts.
    pub valid_after: Option<i64>,
    /// `valid-before`: Unix seconds after which the key no longer counts.
    pub valid_before: Option<i64>,
    /// `cert-authority`: the key signs certificates; a signature by the key itself does not count.
    pub cert_authority: bool,
    /// The key.
    pub key: PublicKey,
}

impl SignerEntry {
    /// Whether one of this line's principals is exactly `name` (patterns are not expanded here:
    /// a policy that reserves a plan for `security@example.com` means that principal, listed).
    pub fn names(&self, name: &str) -> bool {
        self.principals.split(',').any(|p| p == name)
    }
}

/// A parsed `allowed_signers` file.
#[derive(Debug, Clone)]
pub struct AllowedSigners {
    /// Where it was read from, for messages.
    pub source: String,
    /// Its lines with a key, in file order.
    pub entries: Vec<SignerEntry>,
}

/// Why an `allowed_signers` file cannot be used (a usage error: nothing runs).
#[derive(Debug, Error)]
pub enum SignersError {
    /// The file could not be read (missing, not a regular file, too large).
    #[error("allowed_signers file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: crate::input::InputError,
    },
    /// The path the policy names is not a file in the workspace.
    #[error("allowed_signers file {path}: {reason}")]
    Path {
        /// The path as the policy gives it.
        path: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// A line OpenSSH would refuse.
    #[error("allowed_signers file {path}, line {line}: {message}")]
    Line {
        /// The file.
        path: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

/// The signer of a signature that counts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VerifiedSigner {
    /// The principals the `allowed_signers` file gives the key (its first field, as written).
    pub principal: String,
    /// The key's SHA-256 fingerprint (`SHA256:…`, as `ssh-keygen -l` prints it).
    pub key: String,
    /// The key's algorithm (`ssh-ed25519`, `ecdsa-sha2-nistp256`, `ssh-rsa`, `sk-ssh-ed25519@openssh.com`, …).
    pub algorithm: String,
    /// The line of `allowed_signers` that allowed it.
    pub line: usize,
}

/// Why one signature does not count.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum SignatureRefusal {
    /// Not an armored SSH signature, or a damaged one.
    #[error("not a readable SSH signature ({0})")]
    Malformed(String),
    /// Made for another purpose (`ssh-keygen -Y sign -n` named another namespace).
    #[error(
        "signed for namespace {found:?}, not {expected:?} (sign with ssh-keygen -Y sign -n {expected})"
    )]
    WrongNamespace {
        /// The namespace in the signature.
        found: String,
        /// Ours.
        expected: &'static str,
    },
    /// The key type cannot be verified here.
    #[error("key type {0} is not supported for approvals")]
    UnsupportedKey(String),
    /// The signature is not over this approval (the plan, policy, skills, pins or status differ
    /// from what was signed), or was forged.
    #[error(
        "the signature by key {key} does not match this approval (it was made over another plan, policy, status, skill or MCP pin, or it is forged)"
    )]
    Mismatch {
        /// The key's fingerprint.
        key: String,
    },
    /// A security key's signature without user presence (the key was not touched).
    #[error("the security-key signature by {key} was made without user presence")]
    NoUserPresence {
        /// The key's fingerprint.
        key: String,
    },
    /// The key is in no line of `allowed_signers` (never added, or removed).
    #[error("key {key} is not listed in {source_file} (never added, or removed)")]
    UnknownKey {
        /// The key's fingerprint.
        key: String,
        /// The file.
        source_file: String,
    },
    /// The key's line says it is not valid yet.
    #[error(
        "key {key} of {principal} is not valid yet: valid-after {after} ({source_file}, line {line})"
    )]
    NotYetValid {
        /// The key's fingerprint.
        key: String,
        /// Its principals.
        principal: String,
        /// When it becomes valid (UTC).
        after: String,
        /// The file.
        source_file: String,
        /// Its line.
        line: usize,
    },
    /// The key's line says it has expired.
    #[error(
        "key {key} of {principal} has expired: valid-before {before} ({source_file}, line {line})"
    )]
    Expired {
        /// The key's fingerprint.
        key: String,
        /// Its principals.
        principal: String,
        /// When it stopped being valid (UTC).
        before: String,
        /// The file.
        source_file: String,
        /// Its line.
        line: usize,
    },
    /// The key's line allows other namespaces only.
    #[error(
        "key {key} of {principal} may not sign approvals: its namespaces= option does not include {NAMESPACE} ({source_file}, line {line})"
    )]
    NamespaceNotAllowed {
        /// The key's fingerprint.
        key: String,
        /// Its principals.
        principal: String,
        /// The file.
        source_file: String,
        /// Its line.
        line: usize,
    },
    /// The key is listed only as a certificate authority.
    #[error(
        "key {key} is listed only as a cert-authority ({source_file}, line {line}); signatures by certificates are not supported, sign with a key listed as itself"
    )]
    OnlyAuthority {
        /// The key's fingerprint.
        key: String,
        /// The file.
        source_file: String,
        /// Its line.
        line: usize,
    },
}

/// A signature read from its armored text, with what it says about itself.
#[derive(Debug, Clone)]
pub struct ParsedSignature {
    sig: SshSig,
    /// The signing key's SHA-256 fingerprint.
    pub key: String,
    /// The signing key's algorithm name.
    pub algorithm: String,
}

impl ParsedSignature {
    /// Reads an armored `-----BEGIN SSH SIGNATURE-----` block.
    pub fn parse(armored: &str) -> Result<ParsedSignature, SignatureRefusal> {
        if armored.len() > MAX_SIGNATURE_CHARS {
            return Err(SignatureRefusal::Malformed(format!(
                "{} characters, more than the {MAX_SIGNATURE_CHARS} a signature can have",
                armored.len()
            )));
        }
        let sig = SshSig::from_pem(armored.trim().as_bytes())
            .map_err(|e| SignatureRefusal::Malformed(e.to_string()))?;
        let public = PublicKey::from(sig.public_key().clone());
        Ok(ParsedSignature {
            key: public.fingerprint(HashAlg::Sha256).to_string(),
            algorithm: public.algorithm().as_str().to_string(),
            sig,
        })
    }

    /// The namespace it was made for.
    pub fn namespace(&self) -> &str {
        self.sig.namespace()
    }

    /// Checks that this is a signature by its own key, for [`NAMESPACE`], over `message` (and,
    /// for a security key, made with the key touched). Says nothing about who may sign.
    pub fn check(&self, message: &[u8]) -> Result<(), SignatureRefusal> {
        if self.sig.namespace() != NAMESPACE {
            return Err(SignatureRefusal::WrongNamespace {
                found: self.sig.namespace().to_string(),
                expected: NAMESPACE,
            });
        }
        let public = PublicKey::from(self.sig.public_key().clone());
        match public.verify(NAMESPACE, message, &self.sig) {
            Ok(()) => {}
            Err(ssh_key::Error::AlgorithmUnknown | ssh_key::Error::AlgorithmUnsupported { .. }) => {
                return Err(SignatureRefusal::UnsupportedKey(self.algorithm.clone()));
            }
            Err(_) => {
                return Err(SignatureRefusal::Mismatch {
                    key: self.key.clone(),
                });
            }
        }
        if self.algorithm.starts_with("sk-") && !user_present(self.sig.signature_bytes()) {
            return Err(SignatureRefusal::NoUserPresence {
                key: self.key.clone(),
            });
        }
        Ok(())
    }

    /// Whether `key` is the key that made this signature.
    pub fn by(&self, key: &PublicKey) -> bool {
        key.key_data() == self.sig.public_key()
    }
}

/// A FIDO security key's signature ends with a flags byte and a 4-byte counter
/// (PROTOCOL.u2f); bit 0 of the flags says the user touched the key. OpenSSH requires it unless
/// told otherwise, and so do we.
fn user_present(signature: &[u8]) -> bool {
    signature
        .len()
        .checked_sub(5)
        .and_then(|i| signature.get(i))
        .is_some_and(|flags| flags & 0x01 != 0)
}

impl AllowedSigners {
    /// Reads the file at `path` through the bounded reader (a regular file, at most
    /// [`MAX_ALLOWED_SIGNERS_BYTES`]) and parses it; `shown` names it in messages (the path as the
    /// policy or the command line gives it).
    pub fn load(path: &Path, shown: &str) -> Result<AllowedSigners, SignersError> {
        let shown = shown.to_string();
        let bytes = crate::input::read_bounded(path, MAX_ALLOWED_SIGNERS_BYTES, "allowed_signers")
            .map_err(|source| SignersError::Read {
                path: shown.clone(),
                source,
            })?;
        let text = String::from_utf8(bytes).map_err(|e| SignersError::Line {
            path: shown.clone(),
            line: line_of(&e.as_bytes()[..e.utf8_error().valid_up_to()]),
            message: "not valid UTF-8".into(),
        })?;
        Self::parse(&text, &shown)
    }

    /// Parses the text of an `allowed_signers` file; `source` names it in messages. Empty lines
    /// and lines starting with `#` are skipped; any other line must be valid.
    pub fn parse(text: &str, source: &str) -> Result<AllowedSigners, SignersError> {
        let mut entries = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim_matches([' ', '\t', '\r']);
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let entry = parse_line(line, i + 1).map_err(|message| SignersError::Line {
                path: source.to_string(),
                line: i + 1,
                message,
            })?;
            entries.push(entry);
        }
        Ok(AllowedSigners {
            source: source.to_string(),
            entries,
        })
    }

    /// Checks `armored` over `message` and finds who signed it, at `now` (Unix seconds): the
    /// signature must verify, for [`NAMESPACE`], by a key listed here that is valid now and allowed
    /// that namespace.
    pub fn verify(
        &self,
        armored: &str,
        message: &[u8],
        now: i64,
    ) -> Result<VerifiedSigner, SignatureRefusal> {
        let sig = ParsedSignature::parse(armored)?;
        sig.check(message)?;
        self.signer_of(&sig, now)
    }

    /// Who the key of an already checked signature is, at `now`.
    pub fn signer_of(
        &self,
        sig: &ParsedSignature,
        now: i64,
    ) -> Result<VerifiedSigner, SignatureRefusal> {
        let mut first_refusal = None;
        for entry in self.entries.iter().filter(|e| sig.by(&e.key)) {
            match self.refusal(entry, sig, now) {
                None => {
                    return Ok(VerifiedSigner {
                        principal: entry.principals.clone(),
                        key: sig.key.clone(),
                        algorithm: sig.algorithm.clone(),
                        line: entry.line,
                    });
                }
                Some(r) => {
                    first_refusal.get_or_insert(r);
                }
            }
        }
        Err(
            first_refusal.unwrap_or_else(|| SignatureRefusal::UnknownKey {
                key: sig.key.clone(),
                source_file: self.source.clone(),
            }),
        )
    }

    /// Why `entry` (a line listing the signature's key) does not let it count at `now`, if it
    /// does not.
    fn refusal(
        &self,
        entry: &SignerEntry,
        sig: &ParsedSignature,
        now: i64,
    ) -> Option<SignatureRefusal> {
        if entry.cert_authority {
            return Some(SignatureRefusal::OnlyAuthority {
                key: sig.key.clone(),
                source_file: self.source.clone(),
                line: entry.line,
            });
        }
        if let Some(list) = &entry.namespaces
            && !pattern_list_matches(list, NAMESPACE)
        {
            return Some(SignatureRefusal::NamespaceNotAllowed {
                key: sig.key.clone(),
                principal: entry.principals.clone(),
                source_file: self.source.clone(),
                line: entry.line,
            });
        }
        if let Some(after) = entry.valid_after
            && now < after
        {
            return Some(SignatureRefusal::NotYetValid {
                key: sig.key.clone(),
                principal: entry.principals.clone(),
                after: utc(after),
                source_file: self.source.clone(),
                line: entry.line,
            });
        }
        if let Some(before) = entry.valid_before
            && now > before
        {
            return Some(SignatureRefusal::Expired {
                key: sig.key.clone(),
                principal: entry.principals.clone(),
                before: utc(before),
                source_file: self.source.clone(),
                line: entry.line,
            });
        }
        None
    }

    /// The entry that allows `signer` (by line), for rules about principals.
    pub fn entry(&self, signer: &VerifiedSigner) -> Option<&SignerEntry> {
        self.entries.iter().find(|e| e.line == signer.line)
    }
}

/// The line number of the end of `prefix` (1-based).
fn line_of(prefix: &[u8]) -> usize {
    prefix.iter().filter(|b| **b == b'\n').count() + 1
}

/// The key types an `allowed_signers` line may name (a certificate type names a CA's
/// certificate, which `cert-authority` lines never hold, so those are refused as unknown).
const KEY_TYPES: &[&str] = &[
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
];

/// One non-comment line: principals, options, key type, key, comment.
fn parse_line(line: &str, number: usize) -> Result<SignerEntry, String> {
    let (principals, rest) = take_field(line).map_err(|e| format!("principals: {e}"))?;
    if principals.is_empty() {
        return Err("no principals".into());
    }
    if principals.split(',').any(str::is_empty) {
        return Err(format!("empty principal in {principals:?}"));
    }
    let rest = rest.trim_start_matches([' ', '\t']);
    let first = rest.split([' ', '\t']).next().unwrap_or("");
    let (options, key_text) = if KEY_TYPES.contains(&first) {
        (Options::default(), rest)
    } else if looks_like_key_type(first) {
        return Err(unknown_key_type(first));
    } else if first.is_empty() {
        return Err("no key after the principals".into());
    } else {
        let (options, after) = parse_options(rest)?;
        (options, after.trim_start_matches([' ', '\t']))
    };
    let key_type = key_text.split([' ', '\t']).next().unwrap_or("");
    if key_type.is_empty() {
        return Err("no key after the options".into());
    }
    if !KEY_TYPES.contains(&key_type) {
        return Err(unknown_key_type(key_type));
    }
    let key = PublicKey::from_openssh(key_text)
        .map_err(|e| format!("the {key_type} key does not parse ({e})"))?;
    if let (Some(after), Some(before)) = (options.valid_after, options.valid_before)
        && after > before
    {
        return Err("valid-after is later than valid-before: the key is never valid".into());
    }
    Ok(SignerEntry {
        line: number,
        principals,
        namespaces: options.namespaces,
        valid_after: options.valid_after,
        valid_before: options.valid_before,
        cert_authority: options.cert_authority,
        key,
    })
}

/// Whether a word is meant as a key type (so a misspelt or unsupported one is not read as an
/// option).
fn looks_like_key_type(word: &str) -> bool {
    ["ssh-", "ecdsa-", "sk-", "rsa-"]
        .iter()
        .any(|p| word.starts_with(p))
        || word.contains("@openssh.com")
}

fn unknown_key_type(word: &str) -> String {
    format!(
        "unknown key type {word:?} (supported: {})",
        KEY_TYPES.join(", ")
    )
}

/// The first whitespace-separated field (double quotes keep spaces in it) and the rest.
fn take_field(s: &str) -> Result<(String, &str), String> {
    if let Some(quoted) = s.strip_prefix('"') {
        let end = quoted.find('"').ok_or("missing closing quote")?;
        Ok((quoted[..end].to_string(), &quoted[end + 1..]))
    } else {
        let end = s.find([' ', '\t']).unwrap_or(s.len());
        Ok((s[..end].to_string(), &s[end..]))
    }
}

/// What a line's options say.
#[derive(Debug, Default)]
struct Options {
    cert_authority: bool,
    namespaces: Option<Vec<String>>,
    valid_after: Option<i64>,
    valid_before: Option<i64>,
}

/// Comma-separated options, up to the first space outside quotes; returns them and the rest.
fn parse_options(s: &str) -> Result<(Options, &str), String> {
    let mut options = Options::default();
    let mut rest = s;
    loop {
        let name_end = rest.find(['=', ',', ' ', '\t']).unwrap_or(rest.len());
        let name = rest[..name_end].to_ascii_lowercase();
        rest = &rest[name_end..];
        let value = if let Some(after) = rest.strip_prefix('=') {
            let quoted = after
                .strip_prefix('"')
                .ok_or_else(|| format!("option {name}: the value must be in double quotes"))?;
            let end = quoted
                .find('"')
                .ok_or_else(|| format!("option {name}: missing closing quote"))?;
            rest = &quoted[end + 1..];
            Some(&quoted[..end])
        } else {
            None
        };
        match (name.as_str(), value) {
            ("cert-authority", None) => options.cert_authority = true,
            ("namespaces", Some(v)) => {
                let list: Vec<String> = v.split(',').map(str::to_string).collect();
                if list.iter().any(String::is_empty) {
                    return Err(format!("namespaces=\"{v}\": an empty namespace"));
                }
                options.namespaces = Some(list);
            }
            ("valid-after", Some(v)) => options.valid_after = Some(parse_time(v)?),
            ("valid-before", Some(v)) => options.valid_before = Some(parse_time(v)?),
            ("cert-authority", Some(_)) => return Err("cert-authority takes no value".into()),
            ("namespaces" | "valid-after" | "valid-before", None) => {
                return Err(format!("option {name} needs a value ({name}=\"…\")"));
            }
            ("", _) => return Err("an empty option".into()),
            (other, _) => {
                return Err(format!(
                    "unknown option {other:?} (known: cert-authority, namespaces, valid-after, valid-before)"
                ));
            }
        }
        match rest.chars().next() {
            Some(',') => rest = &rest[1..],
            Some(' ' | '\t') | None => return Ok((options, rest)),
            Some(c) => return Err(format!("unexpected {c:?} after option {name}")),
        }
    }
}

/// Whether `name` matches an OpenSSH pattern-list: `*` and `?` wildcards, `!` negates (a negated
/// match refuses outright).
fn pattern_list_matches(list: &[String], name: &str) -> bool {
    let mut matched = false;
    for pattern in list {
        if let Some(negated) = pattern.strip_prefix('!') {
            if wildcard(negated.as_bytes(), name.as_bytes()) {
                return false;
            }
        } else if wildcard(pattern.as_bytes(), name.as_bytes()) {
            matched = true;
        }
    }
    matched
}

/// Glob matching with `*` (any run) and `?` (one byte), as OpenSSH's `match_pattern`.
fn wildcard(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(c) if *c == b'?' || *c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|c| *c == b'*')
}

/// `YYYYMMDD[Z]` or `YYYYMMDDHHMM[SS][Z]` as Unix seconds: UTC with `Z`, else the local time zone
/// (as `ssh-keygen` reads them).
pub fn parse_time(text: &str) -> Result<i64, String> {
    let bad = || {
        format!("time {text:?} is not YYYYMMDD[Z] or YYYYMMDDHHMM[SS][Z] (as ssh-keygen writes it)")
    };
    let (digits, utc) = match text.strip_suffix(['Z', 'z']) {
        Some(d) => (d, true),
        None => (text, false),
    };
    if !digits.bytes().all(|b| b.is_ascii_digit()) || ![8, 12, 14].contains(&digits.len()) {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| digits.get(r).and_then(|s| s.parse::<i64>().ok());
    let (year, month, day) = (num(0..4), num(4..6), num(6..8));
    let (hour, minute, second) = (
        num(8..10).unwrap_or(0),
        num(10..12).unwrap_or(0),
        num(12..14).unwrap_or(0),
    );
    let (Some(year), Some(month), Some(day)) = (year, month, day) else {
        return Err(bad());
    };
    if !(1..=12).contains(&month)
        || !(1..=days_in_month(year, month)).contains(&day)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return Err(bad());
    }
    if utc {
        Ok(days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second)
    } else {
        local_time(year, month, day, hour, minute, second).ok_or_else(bad)
    }
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A local wall-clock time as Unix seconds (`mktime`, the zone from `TZ` or the system's).
fn local_time(year: i64, month: i64, day: i64, hour: i64, min: i64, sec: i64) -> Option<i64> {
    // SAFETY: `tm` is plain data; mktime reads and normalises it and returns -1 on failure.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    tm.tm_year = i32::try_from(year - 1900).ok()?;
    tm.tm_mon = i32::try_from(month - 1).ok()?;
    tm.tm_mday = i32::try_from(day).ok()?;
    tm.tm_hour = i32::try_from(hour).ok()?;
    tm.tm_min = i32::try_from(min).ok()?;
    tm.tm_sec = i32::try_from(sec).ok()?;
    tm.tm_isdst = -1;
    // SAFETY: a valid `tm`; mktime is thread-safe in glibc for reading the zone.
    let t = unsafe { libc::mktime(&mut tm) };
    (t != -1).then_some(t)
}

/// Unix seconds as `YYYY-MM-DD HH:MM:SS UTC`, for messages.
pub fn utc(secs: i64) -> String {
    format!("{} UTC", crate::error::format_ms(secs.saturating_mul(1000)))
}

/// The current time in Unix seconds.
pub fn now_secs() -> i64 {
    crate::error::now_ms().div_euclid(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ED: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAxtmk8jDYwH9Ie7uH3c0KXgEV4aQaI4VUxVsQzFhVEA";

    #[test]
    fn lines_parse_as_openssh_reads_them() {
        let text = format!(
            "# team\n\nalice@example.com {ED} alice's laptop\n\
             bob@example.com,robert@example.com namespaces=\"acode-run-approval,git\",VALID-BEFORE=\"20300101Z\" {ED}\n\
             \"carol x@example.com\" cert-authority {ED}\n"
        );
        let s = AllowedSigners::parse(&text, "allowed_signers").unwrap();
        assert_eq!(s.entries.len(), 3);
        assert_eq!(s.entries[0].line, 3);
        assert_eq!(s.entries[0].principals, "alice@example.com");
        assert_eq!(
            s.entries[1].principals,
            "bob@example.com,robert@example.com"
        );
        assert!(s.entries[1].names("robert@example.com"));
        assert!(!s.entries[1].names("rob"));
        assert_eq!(
            s.entries[1].namespaces.as_deref(),
            Some(&["acode-run-approval".to_string(), "git".to_string()][..])
        );
        assert_eq!(s.entries[1].valid_before, Some(1_893_456_000));
        assert_eq!(s.entries[2].principals, "carol x@example.com");
        assert!(s.entries[2].cert_authority);
    }

    #[test]
    fn bad_lines_are_refused_naming_the_line() {
        for (line, why) in [
            ("alice ssh-dss AAAA".to_string(), "unknown key type"),
            (
                format!("alice ssh-ed25519-cert-v01@openssh.com {}", &ED[12..]),
                "unknown key type",
            ),
            ("alice".to_string(), "no key"),
            (format!("alice valid-after=20200101 {ED}"), "double quotes"),
            (format!("alice valid-after=\"2020\" {ED}"), "YYYYMMDD"),
            (format!("alice valid-after=\"20200231\" {ED}"), "YYYYMMDD"),
            (format!("alice frobnicate {ED}"), "unknown option"),
            (format!("alice namespaces=\"\" {ED}"), "empty namespace"),
            (format!("alice namespaces {ED}"), "needs a value"),
            (format!("alice cert-authority=\"x\" {ED}"), "takes no value"),
            (
                format!("alice valid-after=\"20300101Z\",valid-before=\"20200101Z\" {ED}"),
                "never valid",
            ),
            ("alice ssh-ed25519 AAAA!!".to_string(), "does not parse"),
            ("alice ssh-ed25519".to_string(), "does not parse"),
            (format!("alice,,bob {ED}"), "empty principal"),
            (format!("\"alice {ED}"), "closing quote"),
            (format!("alice namespaces=\"x {ED}"), "closing quote"),
            (format!("alice namespaces=\"x\"y {ED}"), "unexpected"),
        ] {
            let text = format!("# c\n{line}\n");
            let err = AllowedSigners::parse(&text, "F").unwrap_err().to_string();
            assert!(
                err.starts_with("allowed_signers file F, line 2: "),
                "{line}: {err}"
            );
            assert!(err.contains(why), "{line}: {err}");
        }
    }

    #[test]
    fn times_are_read_as_ssh_keygen_reads_them() {
        assert_eq!(parse_time("19700101Z"), Ok(0));
        assert_eq!(parse_time("20240229Z"), Ok(1_709_164_800));
        assert_eq!(parse_time("202402291230Z"), Ok(1_709_164_800 + 45_000));
        assert_eq!(parse_time("20240229123005Z"), Ok(1_709_164_800 + 45_005));
        assert!(parse_time("20230229Z").is_err());
        assert!(parse_time("2024022912Z").is_err());
        assert!(parse_time("20241301").is_err());
        assert!(parse_time("2024010125").is_err());
        // Without Z: the local zone (whatever it is, within a day of UTC).
        let local = parse_time("20240229").unwrap();
        assert!((local - 1_709_164_800).abs() <= 14 * 3600, "{local}");
        assert_eq!(utc(1_709_164_800 + 45_005), "2024-02-29 12:30:05 UTC");
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
    }

    #[test]
    fn pattern_lists_follow_openssh() {
        let l = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(pattern_list_matches(&l(&["acode-run-approval"]), NAMESPACE));
        assert!(pattern_list_matches(&l(&["acode-*"]), NAMESPACE));
        assert!(pattern_list_matches(&l(&["git", "*"]), NAMESPACE));
        assert!(!pattern_list_matches(&l(&["git"]), NAMESPACE));
        assert!(!pattern_list_matches(&l(&["*", "!acode-run-*"]), NAMESPACE));
        assert!(pattern_list_matches(&l(&["acode-run-approva?"]), NAMESPACE));
        assert!(!pattern_list_matches(&l(&["acode-run-approva"]), NAMESPACE));
    }

    /// A FIDO security key's signature, made as the authenticator makes it (PROTOCOL.u2f: the
    /// key signs SHA-256(application) ‖ flags ‖ counter ‖ SHA-256(data)) with a software key,
    /// since these machines have no device: verified like any other, and refused without the
    /// user-presence flag.
    #[test]
    fn security_key_signatures_verify_only_with_the_user_present() {
        use ed25519_dalek::Signer;
        use sha2::{Digest, Sha256};
        let device = ed25519_dalek::SigningKey::from_bytes(&[9; 32]);
        let public = ssh_key::public::Ed25519PublicKey(device.verifying_key().to_bytes());
        let key =
            ssh_key::public::KeyData::SkEd25519(ssh_key::public::SkEd25519::new(public, "ssh:"));
        let message = b"acode-run approval message v1\n";
        let sign = |flags: u8| {
            let data = SshSig::signed_data(NAMESPACE, HashAlg::Sha512, message).unwrap();
            let counter = 7u32.to_be_bytes();
            let mut signed = Sha256::digest(b"ssh:").to_vec();
            signed.push(flags);
            signed.extend_from_slice(&counter);
            signed.extend_from_slice(&Sha256::digest(&data));
            let mut bytes = device.sign(&signed).to_bytes().to_vec();
            bytes.push(flags);
            bytes.extend_from_slice(&counter);
            let sig = ssh_key::Signature::new(ssh_key::Algorithm::SkEd25519, bytes).unwrap();
            SshSig::new(key.clone(), NAMESPACE, HashAlg::Sha512, sig)
                .unwrap()
                .to_pem(ssh_key::LineEnding::LF)
                .unwrap()
        };
        let line = format!(
            "alice@example.com {}",
            PublicKey::from(key.clone()).to_openssh().unwrap()
        );
        let allowed = AllowedSigners::parse(&line, "f").unwrap();
        let signer = allowed.verify(&sign(0x01), message, 0).unwrap();
        assert_eq!(signer.algorithm, "sk-ssh-ed25519@openssh.com");
        assert_eq!(signer.principal, "alice@example.com");
        assert!(matches!(
            allowed.verify(&sign(0x00), message, 0),
            Err(SignatureRefusal::NoUserPresence { .. })
        ));
        assert!(matches!(
            allowed.verify(&sign(0x01), b"another message", 0),
            Err(SignatureRefusal::Mismatch { .. })
        ));
    }

    #[test]
    fn a_security_key_signature_needs_the_user_present_flag() {
        assert!(user_present(&[0u8, 0, 0, 0, 0, 1, 0, 0, 0, 7]));
        assert!(!user_present(&[0u8, 0, 0, 0, 0, 4, 0, 0, 0, 7]));
        assert!(!user_present(&[1u8, 2]));
    }

    /// A throwaway ed25519 key from a fixed seed: its public half as an `allowed_signers` key,
    /// and its signature over `message` made for `namespace`, as `ssh-keygen -Y sign -n` makes it.
    fn signed(seed: u8, namespace: &str, message: &[u8]) -> (String, String) {
        let key =
            ssh_key::PrivateKey::from(ssh_key::private::Ed25519Keypair::from_seed(&[seed; 32]));
        let sig = key
            .sign(namespace, HashAlg::Sha512, message)
            .unwrap()
            .to_pem(ssh_key::LineEnding::LF)
            .unwrap();
        (key.public_key().to_openssh().unwrap(), sig)
    }

    const MESSAGE: &[u8] = b"acode-run approval message v1\nplan_id \"p\"\n";

    #[test]
    fn a_signature_made_for_another_namespace_never_counts() {
        let (public, ours) = signed(3, NAMESPACE, MESSAGE);
        let allowed = AllowedSigners::parse(&format!("alice@example.com {public}"), "f").unwrap();
        let signer = allowed.verify(&ours, MESSAGE, 0).unwrap();
        assert_eq!(
            (signer.principal.as_str(), signer.line),
            ("alice@example.com", 1)
        );
        assert_eq!(signer.algorithm, "ssh-ed25519");
        assert!(signer.key.starts_with("SHA256:"), "{}", signer.key);
        // The same key over the same bytes, for git commits, for files, for a near miss.
        for other in ["git", "file", "acode-run-approval-v0", "acode-run"] {
            let (_, theirs) = signed(3, other, MESSAGE);
            assert_eq!(
                allowed.verify(&theirs, MESSAGE, 0),
                Err(SignatureRefusal::WrongNamespace {
                    found: other.to_string(),
                    expected: NAMESPACE,
                }),
                "{other}"
            );
        }
        // A key whose line allows other namespaces only does not sign ours either; a pattern
        // that includes ours does.
        let only_git = format!("alice@example.com namespaces=\"git,file\" {public}");
        let only_git = AllowedSigners::parse(&only_git, "f").unwrap();
        assert!(matches!(
            only_git.verify(&ours, MESSAGE, 0),
            Err(SignatureRefusal::NamespaceNotAllowed { line: 1, .. })
        ));
        let pattern = format!("alice@example.com namespaces=\"git,acode-run-*\" {public}");
        let pattern = AllowedSigners::parse(&pattern, "f").unwrap();
        assert!(pattern.verify(&ours, MESSAGE, 0).is_ok());
    }

    #[test]
    fn a_key_counts_only_inside_its_validity_window() {
        let (public, sig) = signed(4, NAMESPACE, MESSAGE);
        // 2024-01-01 and 2025-01-01 UTC.
        let (after, before) = (1_704_067_200, 1_735_689_600);
        let line = format!(
            "alice@example.com valid-after=\"20240101Z\",valid-before=\"20250101Z\" {public}"
        );
        let allowed = AllowedSigners::parse(&line, "f").unwrap();
        // Both ends count, as in ssh-keygen; a second outside does not.
        assert!(allowed.verify(&sig, MESSAGE, after).is_ok());
        assert!(allowed.verify(&sig, MESSAGE, before).is_ok());
        let early = allowed.verify(&sig, MESSAGE, after - 1).unwrap_err();
        assert!(
            matches!(&early, SignatureRefusal::NotYetValid { line: 1, after, .. }
                if after == "2024-01-01 00:00:00 UTC"),
            "{early:?}"
        );
        let late = allowed.verify(&sig, MESSAGE, before + 1).unwrap_err();
        assert!(
            matches!(&late, SignatureRefusal::Expired { line: 1, before, .. }
                if before == "2025-01-01 00:00:00 UTC"),
            "{late:?}"
        );
        // Each bound alone.
        let open_end = AllowedSigners::parse(
            &format!("alice@example.com valid-after=\"20240101Z\" {public}"),
            "f",
        )
        .unwrap();
        assert!(open_end.verify(&sig, MESSAGE, i64::MAX).is_ok());
        assert!(open_end.verify(&sig, MESSAGE, after - 1).is_err());
        let open_start = AllowedSigners::parse(
            &format!("alice@example.com valid-before=\"20250101Z\" {public}"),
            "f",
        )
        .unwrap();
        assert!(open_start.verify(&sig, MESSAGE, 0).is_ok());
        assert!(open_start.verify(&sig, MESSAGE, before + 1).is_err());
    }

    #[test]
    fn the_first_line_that_lets_a_key_count_names_its_signer() {
        let (public, sig) = signed(5, NAMESPACE, MESSAGE);
        let (other, _) = signed(6, NAMESPACE, MESSAGE);
        // The key's first line has expired, its second is a cert-authority line, its third
        // counts; a line of another key in between changes nothing.
        let text = format!(
            "old@example.com valid-before=\"20000101Z\" {public}\n\
             bob@example.com {other}\n\
             ca@example.com cert-authority {public}\n\
             alice@example.com {public}\n"
        );
        let allowed = AllowedSigners::parse(&text, "f").unwrap();
        let signer = allowed.verify(&sig, MESSAGE, 1_000_000_000).unwrap();
        assert_eq!(
            (signer.principal.as_str(), signer.line),
            ("alice@example.com", 4)
        );
        assert_eq!(allowed.entry(&signer).map(|e| e.line), Some(4));
        // Without the last line, the first refusal is the one reported.
        let text = text.lines().take(3).collect::<Vec<_>>().join("\n");
        let allowed = AllowedSigners::parse(&text, "f").unwrap();
        assert!(matches!(
            allowed.verify(&sig, MESSAGE, 1_000_000_000),
            Err(SignatureRefusal::Expired { line: 1, .. })
        ));
        let ca_only = AllowedSigners::parse(&format!("ca cert-authority {public}"), "f").unwrap();
        assert!(matches!(
            ca_only.verify(&sig, MESSAGE, 0),
            Err(SignatureRefusal::OnlyAuthority { line: 1, .. })
        ));
        // A key no line lists.
        let stranger = AllowedSigners::parse(&format!("bob@example.com {other}"), "f").unwrap();
        assert!(matches!(
            stranger.verify(&sig, MESSAGE, 0),
            Err(SignatureRefusal::UnknownKey { source_file, .. }) if source_file == "f"
        ));
        // Over other bytes: the signature does not match.
        let alone = AllowedSigners::parse(&format!("alice {public}"), "f").unwrap();
        assert!(matches!(
            alone.verify(&sig, b"acode-run approval message v1\nplan_id \"q\"\n", 0),
            Err(SignatureRefusal::Mismatch { .. })
        ));
    }
}
