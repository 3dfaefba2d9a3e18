//! Where a run runs (issue 48): the workspace's repository (its `origin` URL, credentials
//! removed) and `HEAD` commit when it starts, and the files git sees changed when it ends.
//!
//! git is asked the way a plan's git commands are (`policy::env::git_env`: no system or global
//! configuration, every key that names a program inert, the repository pinned to the
//! workspace's own `.git`, discovery never above the workspace), through the process layer with a
//! timeout and never a shell. A workspace without `.git` costs nothing; a git that fails (not a
//! repository, no `origin`, another user's checkout git calls dubious) records nothing.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::store::{ChangedFile, Changes};

/// How long one git question may take.
const GIT_TIMEOUT: Duration = Duration::from_secs(20);
/// Bytes of `git status` read at most.
const STATUS_BYTES: usize = 1024 * 1024;

/// The output of `git ARGS` in the workspace at `root` (at most `cap` bytes) and whether it was
/// cut there, when git exits 0.
fn git(root: &Path, args: &[&str], cap: usize) -> Option<(String, bool)> {
    let mut argv = vec!["git".to_string()];
    argv.extend(args.iter().map(|a| a.to_string()));
    let mut spec = crate::process::CommandSpec::new(argv, root.to_path_buf());
    let mut env: Vec<(String, String)> = std::env::var("PATH")
        .ok()
        .map(|p| ("PATH".to_string(), p))
        .into_iter()
        .collect();
    env.push(("LC_ALL".to_string(), "C".to_string()));
    env.extend(crate::policy::env::git_env(root));
    spec.env = env;
    spec.timeout = GIT_TIMEOUT;
    spec.output_cap = cap;
    spec.kill_grace = Duration::from_millis(200);
    let out = crate::process::run(&spec, &AtomicBool::new(false), &|_| {}).ok()?;
    out.success()
        .then_some((out.stdout.text, out.stdout.truncated))
}

/// Whether the workspace at `root` has a `.git` of its own (a directory, or a file naming one).
fn is_repository(root: &Path) -> bool {
    std::fs::symlink_metadata(root.join(".git")).is_ok()
}

/// The repository and commit of the workspace at `root` (each `None` when git cannot say).
pub fn repository_and_commit(root: &Path) -> (Option<String>, Option<String>) {
    if !is_repository(root) {
        return (None, None);
    }
    let commit = git(root, &["rev-parse", "--verify", "-q", "HEAD"], 4096)
        .filter(|(_, cut)| !cut)
        .map(|(s, _)| s.trim().to_string())
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit()));
    let repository = git(root, &["remote", "get-url", "origin"], 64 * 1024)
        .filter(|(_, cut)| !cut)
        .map(|(s, _)| without_credentials(s.trim()))
        .filter(|s| !s.is_empty());
    (repository, commit)
}

/// The files git sees changed in the workspace at `root` (staged, unstaged and untracked;
/// ignored files left out), at most [`Changes::KEPT`] of them with the count of all.
pub fn changes(root: &Path) -> Option<Changes> {
    if !is_repository(root) {
        return None;
    }
    let (text, cut) = git(
        root,
        &[
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--no-renames",
        ],
        STATUS_BYTES,
    )?;
    let mut entries: Vec<&str> = text.split('\0').filter(|e| e.len() > 3).collect();
    if cut {
        // The last entry may be cut inside its path; `total` is then a lower bound.
        entries.pop();
    }
    let mut changes = Changes::default();
    for entry in entries {
        let (Some(status), Some(path)) = (entry.get(..2), entry.get(3..)) else {
            continue;
        };
        changes.total += 1;
        if changes.files.len() < Changes::KEPT {
            changes.files.push(ChangedFile {
                status: status.trim().to_string(),
                path: path.to_string(),
            });
        }
    }
    Some(changes)
}

/// A remote URL as it may be recorded: no user name, password or token (userinfo), no query or
/// fragment (`?private_token=…`). `https://x-access-token:T@github.com/o/r.git` →
/// `https://github.com/o/r.git`; `git@github.com:o/r.git` → `github.com:o/r.git`; a local path
/// as it is.
pub fn without_credentials(url: &str) -> String {
    let url = url.trim();
    if let Some((scheme, rest)) = url.split_once("://") {
        let end = rest.find('/').unwrap_or(rest.len());
        let authority = &rest[..end];
        let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        let path = rest[end..].split(['?', '#']).next().unwrap_or_default();
        return format!("{scheme}://{host}{path}");
    }
    // scp-like `[user@]host:path` (no slash before the colon).
    if let Some((before, path)) = url.split_once(':')
        && !before.contains('/')
        && !before.is_empty()
    {
        let host = before.rsplit_once('@').map_or(before, |(_, h)| h);
        return format!("{host}:{path}");
    }
    url.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_never_stay_in_a_recorded_url() {
        for (given, recorded) in [
            (
                "https://x-access-token:ghs_abcdef0123456789@github.com/o/r.git",
                "https://github.com/o/r.git",
            ),
            (
                "https://oauth2:glpat-xyz@gitlab.example.com/g/p.git",
                "https://gitlab.example.com/g/p.git",
            ),
            (
                "https://user:p@ss@host.example/r?private_token=abc#x",
                "https://host.example/r",
            ),
            (
                "ssh://git@host.example:2222/r.git",
                "ssh://host.example:2222/r.git",
            ),
            ("git@github.com:o/r.git", "github.com:o/r.git"),
            ("https://github.com/o/r.git", "https://github.com/o/r.git"),
            ("/srv/git/r.git", "/srv/git/r.git"),
        ] {
            assert_eq!(without_credentials(given), recorded, "{given}");
        }
    }
}
