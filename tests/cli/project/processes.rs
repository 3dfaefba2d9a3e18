//! Every child process acode-run itself starts goes through `src/process/` (issue 44 §6): a plan's
//! commands, MCP servers, and the programs it runs for itself (`npm config get registry`, `pip
//! config list`, `pyenv which`, the forwarder's probe, the user's editor). There each gets its own
//! process group, a deadline and drained, capped pipes — or, for the two that must stay attached
//! (the editor, the forwarder's command), a documented reason not to. A `std::process::Command`
//! built anywhere else would skip all of that, so this test reads `src/` for one.
//!
//! No allow-list: test modules (and `tests.rs` files) may start helpers of their own (`flock`, `git`
//! to set up a fixture); code that ships may not.

use std::path::Path;

use regex::Regex;

use super::lengths::{before_tests, blank_literals};
use crate::harness::TestDir;

/// What starts a process without `src/process/`: std's builder (however it is named or imported),
/// or the raw calls. Whole words: `process::CommandSpec` is `src/process/`'s own.
const STARTERS: &str = r"\b(Command::new|process::Command|CommandExt|libc::(fork|vfork|execv|execve|execvp|execvpe|posix_spawn|posix_spawnp|system))\b|std::process::\{[^}]*\bCommand\b";

/// `(file under src/, line, the starter)` for each starter in shipped code outside `src/process/`.
fn starters_outside_process(src: &Path) -> Vec<(String, usize, String)> {
    let starters = Regex::new(STARTERS).unwrap();
    let mut out = Vec::new();
    for entry in walkdir::WalkDir::new(src) {
        let entry = entry.unwrap();
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let rel = path
            .strip_prefix(src)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if rel.starts_with("process/") || rel.ends_with("/tests.rs") || rel == "tests.rs" {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        let code = blank_literals(before_tests(&text));
        for (n, line) in code.lines().enumerate() {
            for found in starters.find_iter(line) {
                out.push((rel.clone(), n + 1, found.as_str().to_string()));
            }
        }
    }
    out
}

#[test]
fn every_child_process_starts_through_src_process() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found: Vec<String> = starters_outside_process(&src)
        .into_iter()
        .map(|(file, line, what)| format!("  src/{file}:{line}: {what}"))
        .collect();
    assert!(
        found.is_empty(),
        "a child process started outside src/process/ (use process::run, process::helper::run_helper \
         or process::foreground::run_foreground or run_attached; tests/cli/project/processes.rs):\n{}",
        found.join("\n")
    );
}

/// The reading itself: a starter in code is found, in a string, a comment or a test module not,
/// and `src/process/` may start what it likes.
#[test]
fn the_reading_finds_a_command_in_code_only() {
    let t = TestDir::new();
    let dir = t.root.join("src");
    let write = |rel: &str, text: &str| {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write(
        "policy/a.rs",
        "fn a() {\n    let s = \"Command::new\"; // Command::new\n    std::process::Command::new(\"x\");\n    unsafe { libc::fork() };\n    let _ = crate::process::CommandSpec::new(v, d);\n}\n",
    );
    write("policy/b.rs", "use std::process::{Command, Stdio};\n");
    write(
        "net/c.rs",
        "fn c() {}\n#[cfg(test)]\nmod tests {\n    fn t() { std::process::Command::new(\"x\"); }\n}\n",
    );
    write(
        "process/d.rs",
        "fn d() { std::process::Command::new(\"x\"); }\n",
    );
    write(
        "policy/tests.rs",
        "fn e() { std::process::Command::new(\"x\"); }\n",
    );
    let mut found = starters_outside_process(&dir);
    found.sort();
    assert_eq!(
        found,
        [
            ("policy/a.rs".to_string(), 3, "process::Command".to_string()),
            ("policy/a.rs".to_string(), 4, "libc::fork".to_string()),
            (
                "policy/b.rs".to_string(),
                1,
                "std::process::{Command".to_string()
            ),
        ]
    );
}
