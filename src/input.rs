//! Reading the runner's own input documents (plans, approvals, policies) safely.
//!
//! An input file is the first thing an attacker or an unlucky operator controls, so it is read
//! defensively: anything but a regular file (a FIFO that never ends, `/dev/zero`, a directory) is
//! refused before a byte is read, the size is checked before reading, and the read itself goes
//! through `Read::take(limit + 1)` so a file that grows after the check still stops at the limit.
//! Every JSON document is also checked for duplicate keys at every depth: `serde_json` silently keeps
//! the last of two equal keys, so a reviewer reading the first and the runner using the last would
//! otherwise read two different documents.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use thiserror::Error;

/// The largest plan file accepted (64 MiB, see `docs/limits.md`).
pub const MAX_PLAN_BYTES: u64 = 64 * 1024 * 1024;
/// The largest approval file accepted; an approval is a few hundred bytes.
pub const MAX_APPROVAL_BYTES: u64 = 1024 * 1024;
/// The largest policy file accepted; a policy is a few kilobytes.
pub const MAX_POLICY_BYTES: u64 = 4 * 1024 * 1024;

/// Why an input file was refused unread (or could not be read).
#[derive(Debug, Error)]
pub enum InputError {
    /// The file could not be opened or read (missing, permissions, I/O).
    #[error("{source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A FIFO, device, socket or directory: reading it may never end or means nothing.
    #[error("is {kind}, not a regular file; refused unread")]
    NotRegular {
        /// The file.
        path: String,
        /// What it is instead (`a FIFO`, `a directory`, ...).
        kind: &'static str,
    },
    /// Larger than the limit for this kind of document.
    #[error("the {what} is larger than the limit of {limit} bytes; refused unread")]
    TooLarge {
        /// The file.
        path: String,
        /// What the file was read as (`plan file`, ...).
        what: &'static str,
        /// The limit in bytes.
        limit: u64,
    },
    /// A key appears twice in one object.
    #[error("{duplicate}")]
    DuplicateKey {
        /// The file.
        path: String,
        /// Which key, and where its second occurrence is.
        duplicate: DuplicateKey,
    },
}

impl InputError {
    /// Whether the file simply does not exist (a missing approval means "pending").
    pub fn is_not_found(&self) -> bool {
        matches!(self, InputError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

fn kind_of(ft: std::fs::FileType) -> Option<&'static str> {
    if ft.is_file() {
        None
    } else if ft.is_dir() {
        Some("a directory")
    } else if ft.is_fifo() {
        Some("a FIFO")
    } else if ft.is_char_device() {
        Some("a character device")
    } else if ft.is_block_device() {
        Some("a block device")
    } else if ft.is_socket() {
        Some("a socket")
    } else {
        Some("not a regular file")
    }
}

/// Reads the regular file at `path`, refusing anything else and anything over `limit` bytes.
///
/// `what` names the document in the refusal (`plan file`). The type is checked on the path before
/// opening (opening a device can have effects) and again on the opened handle (the path may have been
/// swapped in between); the open is non-blocking so a FIFO swapped in cannot hang it.
pub fn read_bounded(path: &Path, limit: u64, what: &'static str) -> Result<Vec<u8>, InputError> {
    let shown = || path.display().to_string();
    let io = |source| InputError::Io {
        path: shown(),
        source,
    };
    let check = |meta: &std::fs::Metadata| -> Result<(), InputError> {
        if let Some(kind) = kind_of(meta.file_type()) {
            return Err(InputError::NotRegular {
                path: shown(),
                kind,
            });
        }
        if meta.len() > limit {
            return Err(InputError::TooLarge {
                path: shown(),
                what,
                limit,
            });
        }
        Ok(())
    };
    check(&std::fs::metadata(path).map_err(io)?)?;
    let file: File = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    check(&meta)?;
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(InputError::TooLarge {
            path: shown(),
            what,
            limit,
        });
    }
    Ok(bytes)
}

/// A duplicate key found in a JSON document, with the position just after the second occurrence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DuplicateKey {
    /// The key, decoded.
    pub key: String,
    /// 1-based line of the second occurrence.
    pub line: usize,
    /// 1-based column just after the second occurrence's closing quote.
    pub column: usize,
}

impl std::fmt::Display for DuplicateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "line {}, column {}: duplicate key {:?} (a key may appear once per object)",
            self.line, self.column, self.key
        )
    }
}

const DUPLICATE_MARK: &str = "\u{0}acode-duplicate-key\u{0}";

/// Walks a JSON document and reports the first key that appears twice in one object, at any depth.
///
/// Keys are compared after unescaping, so `"tool"` and `"\u0074ool"` are the same key. Syntax errors
/// are not reported here (`Ok`): the document's own parser reports them with their position.
pub fn check_unique_keys(bytes: &[u8]) -> Result<(), DuplicateKey> {
    // serde_json's own recursion limit (128) bounds the walk's depth; hitting it is a parse error
    // the real parser reports.
    let mut de = serde_json::Deserializer::from_slice(bytes);
    match Walk.deserialize(&mut de) {
        Ok(()) => Ok(()),
        Err(e) => {
            let text = e.to_string();
            match text
                .strip_prefix(DUPLICATE_MARK)
                .and_then(|rest| rest.split(DUPLICATE_MARK).next())
            {
                Some(key) => Err(DuplicateKey {
                    key: key.to_string(),
                    line: e.line(),
                    column: key_start_column(bytes, e.line(), e.column()),
                }),
                None => Ok(()),
            }
        }
    }
}

/// serde_json reports a key error at the key's closing quote; people look for where the key starts.
/// Walks back from the closing quote to the opening one (skipping escaped quotes) on the same line
/// (JSON strings cannot span lines). Columns are 1-based bytes, as serde_json counts them.
fn key_start_column(bytes: &[u8], line: usize, column: usize) -> usize {
    let line_start = if line <= 1 {
        0
    } else {
        match bytes
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .nth(line - 2)
        {
            Some((i, _)) => i + 1,
            None => return column,
        }
    };
    let text = &bytes[line_start..bytes.len().min(line_start + column)];
    // `text` ends with the closing quote; find the previous unescaped quote.
    let mut i = text.len().saturating_sub(1);
    while i > 0 {
        i -= 1;
        if text[i] == b'"' {
            let backslashes = text[..i].iter().rev().take_while(|b| **b == b'\\').count();
            if backslashes % 2 == 0 {
                return i + 1;
            }
        }
    }
    column
}

struct Walk;

impl<'de> DeserializeSeed<'de> for Walk {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Walk)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if seen.contains(key.as_ref()) {
                return Err(A::Error::custom(format!(
                    "{DUPLICATE_MARK}{key}{DUPLICATE_MARK}"
                )));
            }
            map.next_value_seed(Walk)?;
            seen.insert(key.into_owned());
        }
        Ok(())
    }
}

/// Reads a JSON input document: bounded as in [`read_bounded`], then checked for duplicate keys, so
/// whatever parses it afterwards reads the one document a reviewer reads.
pub fn read_json(path: &Path, limit: u64, what: &'static str) -> Result<Vec<u8>, InputError> {
    let bytes = read_bounded(path, limit, what)?;
    check_unique_keys(&bytes).map_err(|duplicate| InputError::DuplicateKey {
        path: path.display().to_string(),
        duplicate,
    })?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real directory under the system temp dir, removed on drop.
    struct Dir(std::path::PathBuf);
    impl Dir {
        fn path(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    fn tempdir() -> Dir {
        let p = std::env::temp_dir().join(format!("acode-input-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }

    #[test]
    fn refuses_devices_directories_and_fifos_unread() {
        let e = read_bounded(Path::new("/dev/zero"), 1024, "plan file").unwrap_err();
        assert!(
            matches!(
                e,
                InputError::NotRegular {
                    kind: "a character device",
                    ..
                }
            ),
            "{e}"
        );
        let dir = tempdir();
        let e = read_bounded(dir.path(), 1024, "plan file").unwrap_err();
        assert!(
            matches!(
                e,
                InputError::NotRegular {
                    kind: "a directory",
                    ..
                }
            ),
            "{e}"
        );
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // No writer at all: a blocking open would hang here.
        let e = read_bounded(&fifo, 1024, "plan file").unwrap_err();
        assert!(
            matches!(e, InputError::NotRegular { kind: "a FIFO", .. }),
            "{e}"
        );
    }

    #[test]
    fn refuses_a_file_over_the_limit_and_reads_one_at_it() {
        let dir = tempdir();
        let p = dir.path().join("plan.json");
        std::fs::write(&p, vec![b' '; 1025]).unwrap();
        let e = read_bounded(&p, 1024, "plan file").unwrap_err();
        assert!(
            e.to_string().contains("larger than the limit of 1024"),
            "{e}"
        );
        std::fs::write(&p, vec![b' '; 1024]).unwrap();
        assert_eq!(read_bounded(&p, 1024, "plan file").unwrap().len(), 1024);
        let missing = read_bounded(&dir.path().join("nope"), 1, "x").unwrap_err();
        assert!(missing.is_not_found());
    }

    #[test]
    fn a_file_larger_than_its_metadata_says_stops_at_the_limit() {
        // /proc files are regular files whose size reads as 0: the size check passes, and only the
        // bounded read stops it, as it stops a file that grows after the check.
        let p = Path::new("/proc/self/maps");
        assert_eq!(std::fs::metadata(p).unwrap().len(), 0);
        let e = read_bounded(p, 16, "plan file").unwrap_err();
        assert!(matches!(e, InputError::TooLarge { limit: 16, .. }), "{e}");
    }

    #[test]
    fn duplicate_keys_are_found_at_any_depth_with_their_position() {
        assert_eq!(
            check_unique_keys(br#"{"a":1,"b":{"c":[{"d":1,"e":2}]}}"#),
            Ok(())
        );
        let doc = b"{\"steps\":[\n {\"tool\":\"file_read\",\n  \"tool\":\"file_delete\"}]}";
        let d = check_unique_keys(doc).unwrap_err();
        assert_eq!((d.key.as_str(), d.line, d.column), ("tool", 3, 3));
        // Escapes do not hide a duplicate.
        let d = check_unique_keys(br#"{"x":{"tool":1,"\u0074ool":2}}"#).unwrap_err();
        assert_eq!((d.key.as_str(), d.line, d.column), ("tool", 1, 16));
        let d = check_unique_keys(br#"{"a\"b":1,"a\"b":2}"#).unwrap_err();
        assert_eq!((d.key.as_str(), d.column), ("a\"b", 11));
        // Equal keys in different objects are fine; syntax errors are left to the real parser.
        assert_eq!(check_unique_keys(br#"[{"a":1},{"a":2}]"#), Ok(()));
        assert_eq!(check_unique_keys(br#"{"a":1,"b""#), Ok(()));
    }
}
