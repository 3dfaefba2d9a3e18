//! Root entries under Landlock (SPEC §6, issue #21): a command cannot create an entry directly in
//! the workspace root — a Landlock grant on the root would reach into `.git/` too — so a plan
//! declares the top-level files and directories its commands make (`"creates":
//! ["node_modules/", ".pytest_cache/", "report.xml"]` on a step or in the policy). Before the
//! command, the runner creates the missing ones (empty; a trailing `/` means a directory) through
//! the kernel-checked file layer, so the ruleset built for the command grants writes beneath
//! them; after it, the ones it created and the command left empty are removed, so a failed run
//! leaves no empty file of the runner's behind. cargo's `target/` and `Cargo.lock` next to the
//! manifest are declared the same way, implicitly.
//!
//! Under bwrap and without a sandbox commands create root entries themselves, and nothing is
//! done here. Protected paths (`.git`, `.acode`, the policy, the plan, `*.approval`) can never be
//! declared: [`parse_entry`] refuses them when the plan is validated.

use std::path::{Path, PathBuf};

use super::{ToolContext, ToolError};
use crate::policy::SandboxMode;
use crate::workspace::fs::{FsError, parent_for_write};
use crate::workspace::{SandboxViolation, Workspace};

/// One entry a command may create: where, and whether it is a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    /// Absolute path inside the workspace.
    pub path: PathBuf,
    /// A directory (written with a trailing `/`), else a file.
    pub dir: bool,
}

/// Parses one `creates` entry (`name` or `name/`, a single top-level name) for `ws`: refused when
/// it is not one plain name, or names a protected path.
pub fn parse_entry(ws: &Workspace, text: &str) -> Result<Declared, SandboxViolation> {
    let (name, dir) = match text.strip_suffix('/') {
        Some(n) => (n, true),
        None => (text, false),
    };
    let plain =
        !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0']);
    if !plain {
        return Err(SandboxViolation::new(
            text,
            "a `creates` entry is one name at the workspace root (`name` for a file, `name/` for a \
             directory)",
        ));
    }
    if name == crate::workspace::state::STATE_DIR {
        return Err(SandboxViolation::new(
            text,
            "the runner's state directory is protected and cannot be declared",
        ));
    }
    if name == crate::policy::Policy::FILE_NAME {
        return Err(SandboxViolation::new(
            text,
            "the policy file is protected and cannot be declared",
        ));
    }
    let path = ws.resolve_for_write(name)?;
    Ok(Declared { path, dir })
}

/// What [`prepare`] created, to be removed again when the command left it empty.
#[derive(Debug, Default)]
#[must_use = "call remove_unused after the command"]
pub struct Created(Vec<Declared>);

/// Creates each missing entry of `entries` under Landlock (see the module docs); elsewhere
/// nothing.
pub fn prepare(ctx: &ToolContext, entries: &[Declared]) -> Result<Created, ToolError> {
    let mut created = Created::default();
    if ctx.sandbox.mode() != SandboxMode::Landlock {
        return Ok(created);
    }
    let ws = ctx.workspace;
    for e in entries {
        if std::fs::symlink_metadata(&e.path).is_ok() {
            continue;
        }
        let fail = |err: FsError| match err {
            FsError::Violation(v) => ToolError::Sandbox(v),
            FsError::Io(source) => ToolError::Io {
                op: "create a declared root entry",
                path: ws.display(&e.path),
                source,
            },
        };
        if e.dir {
            // Resolving a name inside the directory for writing creates the directory itself.
            parent_for_write(ws, &e.path.join(".keep"), true).map_err(fail)?;
        } else {
            parent_for_write(ws, &e.path, false)
                .map_err(fail)?
                .write_atomic(ws, b"", false, None)
                .map_err(|err| fail(FsError::Io(err)))?;
        }
        created.0.push(e.clone());
    }
    Ok(created)
}

impl Created {
    /// Removes what [`prepare`] created that is still empty (an empty directory, a zero-length
    /// file): the command did not use it.
    pub fn remove_unused(self, ws: &Workspace) {
        for e in self.0.iter().rev() {
            let Ok(parent) = parent_for_write(ws, &e.path, false) else {
                continue;
            };
            match parent.lstat() {
                Ok(Some(m)) if e.dir && m.is_dir() => {
                    // Fails (ENOTEMPTY) when the command put something in it.
                    let _ = parent.remove_empty_dir();
                }
                Ok(Some(m)) if !e.dir && m.is_file() && m.len() == 0 => {
                    let _ = parent.unlink();
                }
                _ => {}
            }
        }
    }
}

/// The entries a command may create: the policy's `creates`, the step's, and cargo's outputs next
/// to `cargo_manifest_dir` when the command is cargo on a crate there.
pub fn declared(
    ctx: &ToolContext,
    cargo_manifest_dir: Option<&Path>,
) -> Result<Vec<Declared>, ToolError> {
    let mut out = Vec::new();
    for text in ctx.policy.creates.iter().chain(ctx.creates.iter()) {
        out.push(parse_entry(ctx.workspace, text).map_err(ToolError::Sandbox)?);
    }
    if let Some(dir) = cargo_manifest_dir {
        out.push(Declared {
            path: dir.join("target"),
            dir: true,
        });
        out.push(Declared {
            path: dir.join("Cargo.lock"),
            dir: false,
        });
    }
    Ok(out)
}

/// For a command that failed under Landlock: the top-level names its output says it was refused
/// (`Permission denied`, `EACCES`, `PermissionError`) that do not exist in the workspace root — the
/// entries to declare. A name counts when the refusal line quotes it (`'.pytest_cache'`) or
/// gives it as an absolute path inside the workspace.
pub fn refused_root_entries(ws: &Workspace, output: &str) -> Vec<String> {
    const DENIED: &[&str] = &[
        "Permission denied",
        "permission denied",
        "EACCES",
        "PermissionError",
    ];
    let root = ws.root().to_string_lossy();
    // A refused `mkdir` (Python's traceback names it on an earlier line) makes a directory.
    let making_dirs = output.contains("mkdir") || output.contains("makedirs");
    let mut names: Vec<String> = Vec::new();
    for line in output
        .lines()
        .filter(|l| DENIED.iter().any(|d| l.contains(d)))
    {
        let mut candidates: Vec<&str> = Vec::new();
        // Quoted words ('x', "x", `x`).
        for q in ['\'', '"', '`'] {
            let parts: Vec<&str> = line.split(q).collect();
            candidates.extend(parts.iter().skip(1).step_by(2).copied());
        }
        // Absolute paths inside the workspace.
        candidates.extend(
            line.split(|c: char| c.is_whitespace() || "'\"`,;()[]".contains(c))
                .filter(|w| w.starts_with(root.as_ref())),
        );
        for word in candidates {
            let word = word.trim_end_matches(':');
            // A hint names a path only where the error names one: Node quotes its error's code
            // too (`code: 'EACCES'`), which is no file name.
            if word.is_empty() || word.contains(char::is_whitespace) || is_error_code(word) {
                continue;
            }
            let rel = match Path::new(word).strip_prefix(ws.root()) {
                Ok(r) => r.to_path_buf(),
                Err(_) if !word.starts_with('/') => PathBuf::from(word.trim_start_matches("./")),
                Err(_) => continue,
            };
            let mut parts = rel.components();
            let Some(first) = parts.next() else { continue };
            let first = first.as_os_str().to_string_lossy().into_owned();
            let is_dir = parts.next().is_some() || word.ends_with('/') || making_dirs;
            if std::fs::symlink_metadata(ws.root().join(&first)).is_err()
                && parse_entry(ws, &first).is_ok()
            {
                let shown = if is_dir { format!("{first}/") } else { first };
                if !names.contains(&shown) {
                    names.push(shown);
                }
            }
        }
    }
    names
}

/// Whether `word` is the name of an error (`EACCES`, `EPERM`, `EROFS`: `E` and capitals or
/// digits), as runtimes print them beside the path they name.
fn is_error_code(word: &str) -> bool {
    word.len() >= 3
        && word.starts_with('E')
        && word[1..]
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::testutil::TestWs;

    #[test]
    fn entries_are_one_plain_name_and_never_protected() {
        let t = TestWs::new();
        assert!(parse_entry(&t.ws, "node_modules/").unwrap().dir);
        assert!(!parse_entry(&t.ws, "report.xml").unwrap().dir);
        for bad in [
            ".git/",
            ".git",
            ".acode/",
            "acode-policy.json",
            "x.approval",
            "a/b",
            "../x",
            "",
            "/",
            ".",
            "/etc/",
        ] {
            assert!(parse_entry(&t.ws, bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn refused_names_are_read_from_the_commands_output() {
        let t = TestWs::new();
        let root = t.ws.root().display().to_string();
        let out = format!(
            "PermissionError: [Errno 13] Permission denied: '.pytest_cache'\n\
             npm error code EACCES\nnpm error path {root}/node_modules\n\
             npm error Error: EACCES: permission denied, mkdir '{root}/node_modules/is-number'\n\
             ok: nothing here\n"
        );
        assert_eq!(
            refused_root_entries(&t.ws, &out),
            [".pytest_cache/", "node_modules/"]
        );
    }

    /// Node prints its error's code quoted beside the path (`code: 'EACCES'`): the code is no
    /// entry to declare; only a path the error names is.
    #[test]
    fn an_error_code_is_not_taken_for_a_file_name() {
        let t = TestWs::new();
        let outside = "Error: EACCES: permission denied, open '/opt/pkg/node_modules/yargs/index.js'\n\
             \x20   at Object.openSync (node:fs:573:18) {\n  errno: -13,\n  code: 'EACCES',\n  \
             syscall: 'open',\n  path: '/opt/pkg/node_modules/yargs/index.js'\n}\n";
        assert_eq!(refused_root_entries(&t.ws, outside), Vec::<String>::new());
        for code in ["EPERM", "EROFS", "E2BIG"] {
            let out = format!("Error: {code}: operation not permitted\n  code: '{code}',\n");
            let out = out.replace("operation not permitted", "permission denied");
            assert_eq!(
                refused_root_entries(&t.ws, &out),
                Vec::<String>::new(),
                "{code}"
            );
        }
        // The same error naming an entry at the root: that entry.
        let inside = "Error: EACCES: permission denied, mkdir 'build'\n  errno: -13,\n  \
                      code: 'EACCES',\n  syscall: 'mkdir',\n  path: 'build'\n}\n";
        assert_eq!(refused_root_entries(&t.ws, inside), ["build/"]);
    }
}
