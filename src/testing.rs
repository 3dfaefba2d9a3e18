//! Test-only: what a test does when this machine cannot do what its name says (a tool, a kernel
//! feature missing). Not in the shipped library (the `testing` feature, which only the crate's own
//! tests turn on).
//!
//! Why one place: a security test that quietly returns early passes without proving anything. Under
//! CI (`CI` set and not `false`/`0`) such a test fails, naming what is missing; elsewhere it is a
//! named skip, printed and appended to the file `ACODE_TEST_SKIP_LOG` names, which
//! `scripts/test.sh` counts and lists after `cargo test`.

use std::io::Write;

/// The environment variable naming the file each skip is appended to (one line per skip).
pub const SKIP_LOG_ENV: &str = "ACODE_TEST_SKIP_LOG";

/// Whether the tests run in CI: `CI` set to anything but empty, `false` or `0`.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// The running test's name (libtest names each test's thread after it).
fn test_name() -> String {
    std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .unwrap_or("a test")
        .to_string()
}

/// The test cannot run here because `missing` (a tool or kernel feature) is absent, for `why`:
/// panics under CI, else prints and logs a named skip. Returns so the caller can `return`.
#[track_caller]
pub fn skip(missing: &str, why: &str) {
    let name = test_name();
    if in_ci() {
        panic!("{name} cannot run: {missing} is missing ({why}); CI is set, so a skip fails");
    }
    eprintln!("skipped {name}: {missing} is missing ({why})");
    if let Some(path) = std::env::var_os(SKIP_LOG_ENV)
        && let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
    {
        let _ = writeln!(f, "{name}: {missing} ({why})");
    }
}

/// Fails the running test, naming the tool it needs and this machine lacks, so a test never fails
/// on an unrelated assertion instead (`scripts/test.sh` installs these where it can).
#[track_caller]
pub fn require(tool: &str, available: Result<(), String>) {
    if let Err(why) = available {
        panic!(
            "{} needs {tool}, which this machine lacks: {why} (scripts/test.sh installs it when run as root)",
            test_name()
        );
    }
}

/// Paths a test made outside its own temporary directory (`/var/tmp/acode-outside-…`, a proxy's
/// socket directory), removed when the guard drops: when the test ends, also when it fails.
/// Derefs to the first path.
pub struct RemoveOnDrop(Vec<std::path::PathBuf>);

impl RemoveOnDrop {
    /// A guard for `path` (a file or a directory tree).
    pub fn new(path: impl Into<std::path::PathBuf>) -> Self {
        RemoveOnDrop(vec![path.into()])
    }

    /// The same guard, removing `path` too.
    pub fn and(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.0.push(path.into());
        self
    }
}

impl std::ops::Deref for RemoveOnDrop {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0[0]
    }
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_dir_all(p).or_else(|_| std::fs::remove_file(p));
        }
    }
}

impl AsRef<std::path::Path> for RemoveOnDrop {
    fn as_ref(&self) -> &std::path::Path {
        self
    }
}
