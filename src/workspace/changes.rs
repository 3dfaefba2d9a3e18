//! What a run wrote (issue 42): the files of the workspace created or changed since the run
//! started, with their SHA-256 now — the subjects of the run's attestation.
//!
//! No snapshot is taken at the start, so a run pays nothing until it ends and a resumed run is
//! covered from its first start: a file counts as written by the run when its status-change time
//! (`ctime`, which the kernel sets on every write, rename or chmod and no program can set back,
//! unlike `mtime`) is not older than the run's start, less [`CLOCK_SLACK_MS`] for the coarse
//! clock file times come from. Left out, like git leaves them out of a change: `.git`
//! directories, `.acode/` (the runner's own state) and whatever the workspace's `.gitignore`
//! files and `.git/info/exclude` ignore (build outputs, caches, dependencies) — the subjects are
//! what a reviewer would commit. Symbolic links are not followed and not listed; only regular
//! files are. What this does not see: a file a command deleted (deletions by file tools are
//! listed from the record), and a file another process changed in the same workspace while the
//! run lasted (it is listed as the run's).

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use sha2::{Digest, Sha256};

/// How far a file's `ctime` may lag the clock the run's start was read from: the kernel stamps
/// files with a coarse clock (one tick, up to 10 ms), so a write just after the start can carry a
/// time just before it.
pub const CLOCK_SLACK_MS: i64 = 20;

/// At most this many files are listed: a run that rewrote more (a vendored tree) is listed up to
/// here and says it stopped ([`Changes::truncated`]).
pub const MAX_FILES: usize = 100_000;

/// One file the run created or changed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChangedFile {
    /// Workspace-relative path with `/` separators.
    pub path: String,
    /// SHA-256 (hex) of its bytes when the run ended.
    pub sha256: String,
    /// Its size in bytes.
    pub bytes: u64,
}

/// The files a run created or changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// The files, sorted by path.
    pub files: Vec<ChangedFile>,
    /// Whether the listing stopped at [`MAX_FILES`].
    pub truncated: bool,
}

/// The regular files under `root` whose `ctime` is at or after `since_ms` (Unix ms) less
/// [`CLOCK_SLACK_MS`], hashed now; `skip` names further paths (absolute) to leave out — the
/// execution database and its journals when they lie in the workspace. Unreadable entries are
/// passed over (a file that vanished while the list was made was not left by the run).
pub fn changed_since(root: &Path, since_ms: i64, skip: &[&Path]) -> Changes {
    let threshold_ns = i128::from(since_ms - CLOCK_SLACK_MS) * 1_000_000;
    let mut walk = ignore::WalkBuilder::new(root);
    walk.hidden(false)
        .ignore(false)
        .parents(false)
        .git_global(false)
        .git_ignore(true)
        .git_exclude(true)
        .require_git(false)
        .follow_links(false)
        .sort_by_file_path(|a, b| a.cmp(b))
        .filter_entry(|e| {
            let name = e.file_name();
            !(e.file_type().is_some_and(|t| t.is_dir())
                && (name == ".git" || (e.depth() == 1 && name == super::state::STATE_DIR)))
        });
    let mut out = Changes::default();
    for entry in walk.build().flatten() {
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let path = entry.path();
        if skip.iter().any(|s| path.starts_with(s)) {
            continue;
        }
        let Ok(meta) = entry.metadata() else {
            continue;
        };
        let ctime_ns = i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec());
        if ctime_ns < threshold_ns {
            continue;
        }
        let Ok(rel) = path.strip_prefix(root) else {
            continue;
        };
        let Some(rel) = rel.to_str() else {
            continue;
        };
        if out.files.len() >= MAX_FILES {
            out.truncated = true;
            break;
        }
        if let Some((sha256, bytes)) = hash_file(path) {
            out.files.push(ChangedFile {
                path: rel.to_string(),
                sha256,
                bytes,
            });
        }
    }
    out
}

/// The SHA-256 (hex) and size of the regular file at `path`, opened without following a link
/// and without blocking on a FIFO; `None` when it is not one.
pub fn hash_file(path: &Path) -> Option<(String, u64)> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut bytes = 0u64;
    loop {
        let n = file.read(&mut buf).ok()?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        bytes += n as u64;
    }
    Some((crate::util::hex(&hasher.finalize()), bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_written_after_the_start_are_listed_and_ignored_ones_are_not() {
        let root = std::env::temp_dir().join(format!("acode-changes-{}", uuid::Uuid::new_v4()));
        for d in ["src", ".git", ".acode", "target/debug", "sub/.git"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("old.txt"), "old").unwrap();
        std::fs::write(root.join(".gitignore"), "target/\n*.log\n").unwrap();
        // Old enough that the coarse clock cannot blur it with the start.
        std::thread::sleep(std::time::Duration::from_millis(3 * CLOCK_SLACK_MS as u64));
        let start = crate::error::now_ms();
        for f in [
            "src/new.rs",
            ".git/config",
            ".acode/executions.db",
            "target/debug/out",
            "run.log",
            "sub/.git/HEAD",
            ".hidden",
        ] {
            std::fs::write(root.join(f), f).unwrap();
        }
        std::os::unix::fs::symlink("/etc/hostname", root.join("link")).unwrap();
        let changes = changed_since(&root, start, &[]);
        let paths: Vec<&str> = changes.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, [".hidden", "src/new.rs"]);
        assert_eq!(
            changes.files[1].sha256,
            crate::util::sha256_hex(b"src/new.rs")
        );
        assert_eq!(changes.files[1].bytes, 10);
        // A chmod is a change (ctime), a skipped path is not listed.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(root.join("old.txt"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        let changes = changed_since(&root, start, &[&root.join("src")]);
        let paths: Vec<&str> = changes.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, [".hidden", "old.txt"]);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
