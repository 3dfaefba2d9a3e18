//! Nothing in `src/cli/` writes to a stream but the Shell (issue 44 §4): `src/cli/shell.rs` owns
//! stdout, stderr, colour and the redactor, so no command can forget to redact what it prints. A
//! test reads every other file of `src/cli/` — code only, comments and string literals blanked —
//! and fails on any direct write to, or handle on, the process's streams.

use std::path::Path;

use super::lengths::blank_literals;

/// What only the Shell may name: the print macros, the std streams and their handles, and the
/// ways around them (a raw file descriptor, `libc::write`). `dbg!` prints to stderr too.
const DIRECT: &[&str] = &[
    "println!",
    "print!",
    "eprintln!",
    "eprint!",
    "dbg!",
    "outln!",
    "errln!",
    "stdout(",
    "stderr(",
    "io::stdout",
    "io::stderr",
    "Stdout",
    "Stderr",
    "libc::write",
    "from_raw_fd",
];

/// The file allowed to write to the streams, under `src/cli/`.
const SHELL: &str = "shell.rs";

/// Each direct write in `text` as `(line, what)`: a name of [`DIRECT`] in code (not in a comment
/// or a string), not the tail of a longer identifier (`blueprint!` is not `print!`).
fn direct_writes(text: &str) -> Vec<(usize, &'static str)> {
    let code = blank_literals(text);
    let mut found = Vec::new();
    for (n, line) in code.lines().enumerate() {
        for what in DIRECT {
            let hit = line.match_indices(what).any(|(at, _)| {
                !line[..at]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_')
            });
            if hit {
                found.push((n + 1, *what));
            }
        }
    }
    found
}

/// Every `.rs` file under `src/cli/` with its path relative to it.
fn cli_files() -> Vec<(String, String)> {
    let cli = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cli");
    let mut out = Vec::new();
    for entry in walkdir::WalkDir::new(&cli) {
        let entry = entry.unwrap();
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let rel = path
            .strip_prefix(&cli)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        out.push((rel, std::fs::read_to_string(path).unwrap()));
    }
    out.sort();
    out
}

#[test]
fn only_the_shell_writes_to_stdout_and_stderr_in_src_cli() {
    let files = cli_files();
    assert!(
        files.iter().any(|(f, _)| f == SHELL),
        "src/cli/{SHELL} not found"
    );
    let mut bad = Vec::new();
    for (file, text) in &files {
        if file == SHELL {
            // The scan reads what it should: the Shell's own writes are seen.
            assert!(
                direct_writes(text).iter().any(|(_, w)| *w == "io::stdout"),
                "the scan finds no io::stdout in src/cli/{SHELL}"
            );
            continue;
        }
        for (line, what) in direct_writes(text) {
            bad.push(format!("  src/cli/{file}:{line}: {what}"));
        }
    }
    assert!(
        bad.is_empty(),
        "direct writes to a stream in src/cli/ outside {SHELL} (write through the Shell, \
         src/cli/shell.rs, which redacts; tests/cli/project/streams.rs):\n{}",
        bad.join("\n")
    );
}

/// The scan itself: each way to reach a stream is found in code; the same words in a comment or
/// a string, or as the end of a longer name, are not.
#[test]
fn the_scan_finds_direct_writes_and_nothing_else() {
    let code = r#"
fn f(shell: &Shell) {
    println!("x");
    eprint!("y");
    let _ = writeln!(std::io::stderr(), "z");
    let out = io::stdout();
    dbg!(1);
    // println!("in a comment");
    let s = "eprintln!(\"in a string\") std::io::stdout()";
    blueprint!(2);
    shell.err_line("fine");
}
"#;
    assert_eq!(
        direct_writes(code),
        [
            (3, "println!"),
            (4, "eprint!"),
            (5, "stderr("),
            (5, "io::stderr"),
            (6, "stdout("),
            (6, "io::stdout"),
            (7, "dbg!"),
        ]
    );
}
