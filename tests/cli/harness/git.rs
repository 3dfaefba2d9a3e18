//! Real git for the tests that make repositories: no system or global configuration (so the
//! machine's own cannot interfere), `HOME` the test's root, a fixed identity.

use std::path::Path;
use std::process::{Command, Output};

use super::TestDir;

/// Runs real git in `dir` the way an attacker's earlier step (or a person) would, with no
/// system or global configuration so the machine's own config cannot interfere.
pub fn raw_git(t: &TestDir, dir: &Path, args: &[&str]) -> Output {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &t.root)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .unwrap()
}

/// [`raw_git`] in the workspace, asserting success; its stdout.
pub fn git(t: &TestDir, args: &[&str]) -> String {
    let out = raw_git(t, &t.ws, args);
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A repository with one commit in `dir` (created if needed).
pub fn repo_with_commit(t: &TestDir, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    assert!(raw_git(t, dir, &["init", "-q"]).status.success());
    assert!(
        raw_git(t, dir, &["config", "user.name", "t"])
            .status
            .success()
    );
    assert!(
        raw_git(t, dir, &["config", "user.email", "t@example.com"])
            .status
            .success()
    );
    std::fs::write(dir.join("a.txt"), "a\n").unwrap();
    assert!(raw_git(t, dir, &["add", "a.txt"]).status.success());
    let out = raw_git(t, dir, &["commit", "-qm", "first"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
