//! Past one machine (issue 48): one approved plan run in many repositories under a policy shipped
//! beside it (a repository's own policy only narrows it), each run's record merged into one
//! database, the fleet page, the queryable record, and the CI recipes.

mod policy;

use std::path::{Path, PathBuf};

use crate::harness::*;

/// The password in every test repository's `origin` URL: in no format the redactor knows, so
/// only stripping the URL's user information keeps it out of the record.
pub const URL_PASSWORD: &str = "plain-fleet-password-4711";

/// A git repository `name` under the test's root with one commit and an `origin` whose URL
/// carries a password (which must never be recorded).
pub fn repository(t: &TestDir, name: &str) -> PathBuf {
    let dir = t.root.join("repos").join(name);
    repo_with_commit(t, &dir);
    let url = format!("https://ci:{URL_PASSWORD}@git.example.org/fleet/{name}.git?x=1");
    assert!(
        raw_git(t, &dir, &["remote", "add", "origin", &url])
            .status
            .success()
    );
    dir
}

/// `git rev-parse HEAD` in `dir`.
pub fn head(t: &TestDir, dir: &Path) -> String {
    String::from_utf8(raw_git(t, dir, &["rev-parse", "HEAD"]).stdout)
        .unwrap()
        .trim()
        .to_string()
}
