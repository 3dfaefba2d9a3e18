//! Small helpers every layer uses, at the bottom of the house (they import nothing of the crate):
//! one place for each, so that a message says "an object" or cuts text the same way everywhere.

use serde_json::Value;

/// The kind of a JSON value as an error message names it ("a string", "an object", "null"), so
/// that "expected an array, found a string" reads the same in plans, policies and model answers.
pub fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The longest prefix of `s` that is at most `max` bytes and ends on a character boundary: how
/// every output, message and artifact is cut without splitting a UTF-8 sequence.
pub fn cut_at_char_boundary(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `s` cut to its first `max` characters with `…` marking the cut (unchanged when it fits): how a
/// long value is shown inside a message or a listing.
pub fn ellipsize(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some((i, _)) => format!("{}…", &s[..i]),
    }
}

/// Writes `bytes` to a new file at `path` and syncs it; `AlreadyExists` when anything is there
/// (checked by the kernel as the file is created, so a file made meanwhile is not overwritten).
/// For outputs that must never replace a person's file: drafts, imports.
pub fn write_new(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    f.write_all(bytes).and_then(|()| f.sync_all())
}

/// Writes `bytes` to `path` whole or not at all: a temporary file beside it, synced, then renamed
/// over it. For outputs a reader must never see half-written: approvals, messages to sign,
/// attestations.
pub fn write_replacing(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = temp_beside(path);
    if let Err(e) = write_new(&tmp, bytes) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    replace_with(&tmp, path)
}

/// A temporary file name beside `path` (same directory, so a `rename` onto `path` is atomic):
/// `.NAME.UUID.tmp`, hidden and unique. For outputs that replace a file whole or not at all
/// (`merge`, `export --jsonl`).
pub fn temp_beside(path: &std::path::Path) -> std::path::PathBuf {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    dir.join(format!(".{name}.{}.tmp", uuid::Uuid::new_v4()))
}

/// Moves the finished `temp` onto `path` (atomically: a reader sees the old file or the new one)
/// after syncing it, and syncs the directory so the rename survives a crash. `temp` is removed
/// when that fails.
pub fn replace_with(temp: &std::path::Path, path: &std::path::Path) -> std::io::Result<()> {
    let done = std::fs::File::open(temp)
        .and_then(|f| f.sync_all())
        .and_then(|()| std::fs::rename(temp, path));
    if done.is_err() {
        let _ = std::fs::remove_file(temp);
    }
    done?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(())
}

/// Lower-case hexadecimal of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Hex SHA-256 of `bytes`: what approvals bind (the plan's bytes), pins hash, and records name.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex(&sha2::Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ellipsize_marks_a_cut_by_characters() {
        assert_eq!(ellipsize("héllo", 2), "hé…");
        assert_eq!(ellipsize("héllo", 5), "héllo");
        assert_eq!(ellipsize("", 0), "");
    }

    #[test]
    fn cuts_never_split_a_character() {
        assert_eq!(cut_at_char_boundary("héllo", 2), "h");
        assert_eq!(cut_at_char_boundary("héllo", 3), "hé");
        assert_eq!(cut_at_char_boundary("abc", 10), "abc");
        assert_eq!(json_kind(&serde_json::json!([])), "an array");
        assert_eq!(json_kind(&Value::Null), "null");
    }
}
