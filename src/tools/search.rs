//! Walking tools: `list_directory`, `file_search`, `file_glob`.
//!
//! The root argument is resolved through the workspace like any path; below it the walk never
//! follows a symlink (links are listed as `symlink` and never read or descended into), so nothing
//! outside the workspace is reached however links inside it are arranged. Results are JSON with
//! workspace-relative, '/'-separated paths, sorted; `content` is that JSON, followed by an
//! `[acode-run: ...]` note line when the result was cut at `max_results`. The `stdout` artifact holds
//! the JSON alone and is marked truncated in that case.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;

use regex::bytes::{Regex, RegexBuilder};
use serde_json::{Value, json};
use walkdir::{DirEntry, WalkDir};

use super::files::{Pacer, io_err, resolve_arg};
use super::glob::Glob;
use super::{
    Artifact, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry, arg_opt_str, arg_opt_u64,
    arg_str,
};
use crate::sandbox::Access;

/// Default and largest `depth` of `list_directory`.
const DEFAULT_DEPTH: u64 = 1;
const MAX_DEPTH: u64 = 10;
/// Default number of `file_search` matches.
const DEFAULT_MAX_RESULTS: u64 = 100;
/// Bytes inspected for a NUL to decide that a file is binary (as git and ripgrep do).
const BINARY_SNIFF_BYTES: usize = 8 * 1024;
/// Files larger than this are not searched (they are counted and reported instead).
const MAX_SEARCH_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// Characters of a matching line kept in a `file_search` result.
const MAX_LINE_CHARS: usize = 500;
/// Directories `file_search` and `file_glob` never enter: version control and acode-run's own.
const SKIPPED_DIRS: &[&str] = &[".git", ".acode"];

/// Registers the walking tools.
pub fn register(r: &mut ToolRegistry) {
    r.register(Arc::new(ListDirectory));
    r.register(Arc::new(FileSearch));
    r.register(Arc::new(FileGlob));
}

/// Builds the result of a walking tool (see the module docs).
fn json_result(data: Value, truncated: bool, note: Option<String>) -> ToolOutput {
    let text = data.to_string();
    let mut content = text.clone();
    if let Some(note) = note {
        content.push_str(&format!("\n[acode-run: {note}]"));
    }
    let bytes = text.len() as u64;
    ToolOutput::ok(content).with_artifact(Artifact {
        artifact_type: "stdout".to_string(),
        content: text,
        bytes,
        truncated,
        lossy: false,
    })
}

/// Orders siblings so that a depth-first walk visits files in the byte order of their paths: a
/// directory sorts as its name followed by '/' (so `a.txt` comes before everything in `a/`). A walk
/// cut short at a result cap then keeps exactly the first paths of the sorted result.
fn path_order(a: &DirEntry, b: &DirEntry) -> std::cmp::Ordering {
    fn key(e: &DirEntry) -> impl Iterator<Item = u8> + '_ {
        let slash: &[u8] = if e.file_type().is_dir() { b"/" } else { b"" };
        e.file_name().as_bytes().iter().chain(slash).copied()
    }
    key(a).cmp(key(b))
}

/// A walker below `root` that never follows links, visiting files in path order and pruning the
/// `.git`/`.acode` directories below the root (the root itself is walked if asked for).
fn walker(root: &Path) -> impl Iterator<Item = walkdir::Result<DirEntry>> {
    WalkDir::new(root)
        .follow_links(false)
        .sort_by(path_order)
        .into_iter()
        .filter_entry(|e| {
            !(e.depth() > 0
                && e.file_type().is_dir()
                && SKIPPED_DIRS.iter().any(|d| e.file_name() == *d))
        })
}

/// The walk root: a resolved path argument that must be an existing directory.
fn dir_root(
    tool: &str,
    args: &Value,
    name: &str,
    ctx: &ToolContext,
) -> Result<std::path::PathBuf, ToolError> {
    let root = if args.get(name).is_some() {
        resolve_arg(tool, args, name, ctx, Access::Read)?
    } else {
        ctx.workspace.resolve(".")?
    };
    let meta = fs::metadata(&root).map_err(|e| io_err("list", ctx, &root, e))?;
    if !meta.is_dir() {
        return Err(io_err(
            "list",
            ctx,
            &root,
            io::Error::new(io::ErrorKind::NotADirectory, "is not a directory"),
        ));
    }
    Ok(root)
}

/// `entry`'s path relative to `root`, '/'-separated (Unix paths already are).
fn rel_to(root: &Path, entry: &Path) -> String {
    entry
        .strip_prefix(root)
        .unwrap_or(entry)
        .to_string_lossy()
        .into_owned()
}

fn truncation_note(cap: usize, what: &str) -> String {
    format!("results truncated at {cap} {what}; narrow the pattern or root to see the rest")
}

// ---------------------------------------------------------------------------------------------
// list_directory

/// `list_directory`: the entries below a directory, to a depth, without following links.
pub struct ListDirectory;

impl Tool for ListDirectory {
    fn name(&self) -> &'static str {
        "list_directory"
    }

    fn description(&self) -> &'static str {
        "List the files, directories and symlinks below a directory as JSON, to a given depth."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string", "minLength": 1,
                    "description": "The directory to list, relative to the workspace root ('.' for the root)."
                },
                "depth": {
                    "type": "integer", "minimum": 1, "maximum": MAX_DEPTH,
                    "description": "How many levels to descend: 1 lists only direct children (default 1, at most 10)."
                }
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }

    fn idempotent(&self) -> bool {
        true
    }

    fn check(&self, args: &Value, ctx: &ToolContext) -> Result<(), ToolError> {
        resolve_arg(self.name(), args, "path", ctx, Access::Read).map(|_| ())
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let root = dir_root(self.name(), args, "path", ctx)?;
        let depth = arg_opt_u64(args, "depth")
            .unwrap_or(DEFAULT_DEPTH)
            .clamp(1, MAX_DEPTH) as usize;
        let cap = ctx.policy.limits.max_results;
        let mut pacer = Pacer::new(ctx);
        let mut entries: Vec<(String, &'static str, Option<u64>)> = Vec::new();
        let mut truncated = false;
        let mut unreadable = 0usize;
        let mut it = WalkDir::new(&root)
            .follow_links(false)
            .min_depth(1)
            .max_depth(depth)
            .sort_by(path_order)
            .into_iter();
        while let Some(next) = it.next() {
            if let Err(halt) = pacer.tick() {
                return halt.into_result(self.name(), ctx);
            }
            let entry = match next {
                Ok(e) => e,
                Err(_) => {
                    unreadable += 1;
                    continue;
                }
            };
            if entries.len() >= cap {
                truncated = true;
                break;
            }
            let ft = entry.file_type();
            let (kind, size) = if ft.is_symlink() {
                ("symlink", None)
            } else if ft.is_dir() {
                ("dir", None)
            } else if ft.is_file() {
                ("file", entry.metadata().ok().map(|m| m.len()))
            } else {
                ("other", None)
            };
            entries.push((ctx.workspace.display(entry.path()), kind, size));
            if ft.is_dir() && entry.file_name() == ".git" {
                it.skip_current_dir();
            }
        }
        entries.sort();
        let data: Vec<Value> = entries
            .into_iter()
            .map(|(path, kind, size)| json!({"path": path, "type": kind, "size": size}))
            .collect();
        let mut notes = Vec::new();
        if truncated {
            notes.push(truncation_note(cap, "entries"));
        }
        if unreadable > 0 {
            notes.push(format!("{unreadable} entries could not be read"));
        }
        let note = (!notes.is_empty()).then(|| notes.join("; "));
        Ok(json_result(Value::Array(data), truncated, note))
    }
}

// ---------------------------------------------------------------------------------------------
// file_search

/// `file_search`: lines matching a regular expression in the text files below a directory.
pub struct FileSearch;

fn compile_regex(tool: &str, pattern: &str) -> Result<Regex, ToolError> {
    RegexBuilder::new(pattern)
        .size_limit(10 * 1024 * 1024)
        .build()
        .map_err(|e| ToolError::invalid(tool, format!("invalid regex {pattern:?}: {e}")))
}

/// Whether a search's `glob` filter accepts a file: a pattern with a '/' is matched against the
/// path relative to the search root, one without against the file name alone (so `*.rs` means
/// every Rust file, as in ripgrep and .gitignore).
fn glob_accepts(glob: &Glob, rel: &str) -> bool {
    if glob.has_separator() {
        glob.is_match(rel)
    } else {
        glob.is_match(rel.rsplit('/').next().unwrap_or(rel))
    }
}

/// What searching one file gave.
enum Scanned {
    /// The file was searched.
    Text,
    /// Binary (a NUL byte in the first 8 KiB) or not a regular file: skipped.
    Skipped,
    /// Too large to search: skipped.
    TooLarge,
}

/// Opens a regular file found by a walk without following a symlink swapped in since the walk
/// (`O_NOFOLLOW`), nor blocking on a FIFO (`O_NONBLOCK`).
fn open_no_follow(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
}

/// Searches one file, pushing matches until `results` holds `want` of them.
fn scan_file(
    path: &Path,
    rel: &str,
    regex: &Regex,
    want: usize,
    results: &mut Vec<Value>,
) -> io::Result<Scanned> {
    let file = open_no_follow(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Ok(Scanned::Skipped);
    }
    if meta.len() > MAX_SEARCH_FILE_BYTES {
        return Ok(Scanned::TooLarge);
    }
    let mut buf = Vec::new();
    let mut reader = file.take(MAX_SEARCH_FILE_BYTES);
    (&mut reader)
        .take(BINARY_SNIFF_BYTES as u64)
        .read_to_end(&mut buf)?;
    if buf.contains(&0) {
        return Ok(Scanned::Skipped);
    }
    reader.read_to_end(&mut buf)?;
    for (i, line) in buf.split(|&b| b == b'\n').enumerate() {
        if results.len() >= want {
            break;
        }
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if regex.is_match(line) {
            let text = String::from_utf8_lossy(line);
            let text = match text.char_indices().nth(MAX_LINE_CHARS) {
                Some((cut, _)) => &text[..cut],
                None => &text[..],
            };
            results.push(json!({"path": rel, "line": i + 1, "text": text}));
        }
    }
    Ok(Scanned::Text)
}

impl Tool for FileSearch {
    fn name(&self) -> &'static str {
        "file_search"
    }

    fn description(&self) -> &'static str {
        "Search the text files below a directory for lines matching a regular expression."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {
                    "type": "string", "minLength": 1,
                    "description": "Regular expression (Rust regex syntax) matched against each line."
                },
                "root": {
                    "type": "string", "minLength": 1,
                    "description": "Directory to search, relative to the workspace root (default '.')."
                },
                "glob": {
                    "type": "string", "minLength": 1,
                    "description": "Only search files matching this glob: with a '/' it is matched against the path relative to root, without one against the file name (e.g. '*.rs')."
                },
                "max_results": {
                    "type": "integer", "minimum": 1,
                    "description": "Maximum number of matching lines to return (default 100)."
                }
            },
            "required": ["pattern"],
            "additionalProperties": false
        })
    }

    fn idempotent(&self) -> bool {
        true
    }

    fn check(&self, args: &Value, ctx: &ToolContext) -> Result<(), ToolError> {
        if args.get("root").is_some() {
            resolve_arg(self.name(), args, "root", ctx, Access::Read)?;
        }
        if let Some(g) = arg_opt_str(args, "glob") {
            Glob::new(self.name(), g)?;
        }
        compile_regex(self.name(), arg_str(self.name(), args, "pattern")?).map(|_| ())
    }

    fn summary(&self, args: &Value) -> String {
        let pattern = arg_opt_str(args, "pattern").unwrap_or_default();
        match arg_opt_str(args, "root") {
            Some(root) => format!("{pattern:?} in {root}"),
            None => format!("{pattern:?}"),
        }
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let regex = compile_regex(self.name(), arg_str(self.name(), args, "pattern")?)?;
        let glob = arg_opt_str(args, "glob")
            .map(|g| Glob::new(self.name(), g))
            .transpose()?;
        let root = dir_root(self.name(), args, "root", ctx)?;
        let cap = ctx.policy.limits.max_results;
        let max = (arg_opt_u64(args, "max_results").unwrap_or(DEFAULT_MAX_RESULTS) as usize)
            .clamp(1, cap.max(1));
        let mut pacer = Pacer::new(ctx);
        // One more than asked, to know whether there were more.
        let want = max.saturating_add(1);
        let mut results = Vec::new();
        let (mut large, mut unreadable) = (0usize, 0usize);
        for next in walker(&root) {
            if let Err(halt) = pacer.tick() {
                return halt.into_result(self.name(), ctx);
            }
            let Ok(entry) = next else {
                unreadable += 1;
                continue;
            };
            if !entry.file_type().is_file() {
                continue;
            }
            let rel = rel_to(&root, entry.path());
            if let Some(g) = &glob
                && !glob_accepts(g, &rel)
            {
                continue;
            }
            let shown = ctx.workspace.display(entry.path());
            match scan_file(entry.path(), &shown, &regex, want, &mut results) {
                Ok(Scanned::Text) => {}
                // Binary files are skipped silently, as `grep -I` does.
                Ok(Scanned::Skipped) => {}
                Ok(Scanned::TooLarge) => large += 1,
                Err(_) => unreadable += 1,
            }
            if results.len() >= want {
                break;
            }
        }
        let truncated = results.len() > max;
        results.truncate(max);
        let mut notes = Vec::new();
        if truncated {
            notes.push(truncation_note(max, "matches"));
        }
        if large > 0 {
            notes.push(format!(
                "{large} files larger than {MAX_SEARCH_FILE_BYTES} bytes were not searched"
            ));
        }
        if unreadable > 0 {
            notes.push(format!("{unreadable} entries could not be read"));
        }
        let note = (!notes.is_empty()).then(|| notes.join("; "));
        Ok(json_result(Value::Array(results), truncated, note))
    }
}

// ---------------------------------------------------------------------------------------------
// file_glob

/// `file_glob`: the files below a directory whose path matches a glob pattern.
pub struct FileGlob;

impl Tool for FileGlob {
    fn name(&self) -> &'static str {
        "file_glob"
    }

    fn description(&self) -> &'static str {
        "List the files whose path relative to root matches a glob pattern (*, **, ?, [..], {a,b})."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {
                    "type": "string", "minLength": 1,
                    "description": "Glob matched against each file's path relative to root, e.g. '**/*.rs' or 'src/*.{rs,toml}'."
                },
                "root": {
                    "type": "string", "minLength": 1,
                    "description": "Directory to search below, relative to the workspace root (default '.')."
                }
            },
            "required": ["pattern"],
            "additionalProperties": false
        })
    }

    fn idempotent(&self) -> bool {
        true
    }

    fn check(&self, args: &Value, ctx: &ToolContext) -> Result<(), ToolError> {
        Glob::new(self.name(), arg_str(self.name(), args, "pattern")?)?;
        if args.get("root").is_some() {
            resolve_arg(self.name(), args, "root", ctx, Access::Read)?;
        }
        Ok(())
    }

    fn summary(&self, args: &Value) -> String {
        let pattern = arg_opt_str(args, "pattern").unwrap_or_default();
        match arg_opt_str(args, "root") {
            Some(root) => format!("{pattern} in {root}"),
            None => pattern.to_string(),
        }
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let glob = Glob::new(self.name(), arg_str(self.name(), args, "pattern")?)?;
        let root = dir_root(self.name(), args, "root", ctx)?;
        let cap = ctx.policy.limits.max_results;
        let mut pacer = Pacer::new(ctx);
        let mut paths = Vec::new();
        let mut truncated = false;
        let mut unreadable = 0usize;
        for next in walker(&root) {
            if let Err(halt) = pacer.tick() {
                return halt.into_result(self.name(), ctx);
            }
            let Ok(entry) = next else {
                unreadable += 1;
                continue;
            };
            if !entry.file_type().is_file() || !glob.is_match(&rel_to(&root, entry.path())) {
                continue;
            }
            if paths.len() >= cap {
                truncated = true;
                break;
            }
            paths.push(ctx.workspace.display(entry.path()));
        }
        paths.sort();
        let mut notes = Vec::new();
        if truncated {
            notes.push(truncation_note(cap, "paths"));
        }
        if unreadable > 0 {
            notes.push(format!("{unreadable} entries could not be read"));
        }
        let note = (!notes.is_empty()).then(|| notes.join("; "));
        Ok(json_result(json!(paths), truncated, note))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::testutil::TestWs;
    use std::os::unix::fs::symlink;

    fn data(out: &ToolOutput) -> Value {
        let stdout = out
            .artifacts
            .iter()
            .find(|a| a.artifact_type == "stdout")
            .expect("stdout artifact");
        serde_json::from_str(&stdout.content).expect("stdout is JSON")
    }

    fn paths(v: &Value) -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_str().or(e["path"].as_str()).unwrap().to_string())
            .collect()
    }

    fn tree() -> TestWs {
        let t = TestWs::new();
        t.write("a.txt", "alpha\n");
        t.write("a/x.rs", "fn x() {}\n");
        t.write("a/deep/y.rs", "fn y() {}\n");
        t.write("b.rs", "fn b() {}\n");
        t.write(".git/config", "fn git() {}\n");
        t.write(".acode/log", "fn acode() {}\n");
        symlink("a.txt", t.path("z-link")).unwrap();
        t
    }

    // --- list_directory --------------------------------------------------------------------

    #[test]
    fn list_direct_children_sorted_with_types() {
        let t = tree();
        let out = t.call(&ListDirectory, json!({"path": "."})).unwrap();
        let v = data(&out);
        assert_eq!(
            paths(&v),
            [".acode", ".git", "a", "a.txt", "b.rs", "z-link"]
        );
        let by_path = |p: &str| {
            v.as_array()
                .unwrap()
                .iter()
                .find(|e| e["path"] == p)
                .unwrap()
                .clone()
        };
        assert_eq!(
            by_path("a"),
            json!({"path": "a", "type": "dir", "size": null})
        );
        assert_eq!(
            by_path("a.txt"),
            json!({"path": "a.txt", "type": "file", "size": 6})
        );
        assert_eq!(by_path("z-link")["type"], "symlink");
        assert_eq!(out.content, data(&out).to_string());
    }

    #[test]
    fn list_with_depth_skips_git_contents() {
        let t = tree();
        let out = t
            .call(&ListDirectory, json!({"path": ".", "depth": 3}))
            .unwrap();
        let p = paths(&data(&out));
        assert!(p.contains(&"a/deep/y.rs".to_string()), "{p:?}");
        assert!(p.contains(&".git".to_string()), "{p:?}");
        assert!(!p.iter().any(|x| x.starts_with(".git/")), "{p:?}");
        let mut sorted = p.clone();
        sorted.sort();
        assert_eq!(p, sorted);
        // A subdirectory lists with workspace-relative paths.
        let out = t.call(&ListDirectory, json!({"path": "a"})).unwrap();
        assert_eq!(paths(&data(&out)), ["a/deep", "a/x.rs"]);
        // Listing .git explicitly is a read and allowed.
        let out = t.call(&ListDirectory, json!({"path": ".git"})).unwrap();
        assert_eq!(paths(&data(&out)), [".git/config"]);
    }

    #[test]
    fn list_is_capped_at_max_results() {
        let mut t = tree();
        t.policy.limits.max_results = 3;
        let out = t
            .call(&ListDirectory, json!({"path": ".", "depth": 5}))
            .unwrap();
        assert_eq!(data(&out).as_array().unwrap().len(), 3);
        assert!(out.artifacts[0].truncated);
        assert!(
            out.content.contains("truncated at 3 entries"),
            "{}",
            out.content
        );
    }

    #[test]
    fn list_failures() {
        let t = tree();
        let msg = t
            .call(&ListDirectory, json!({"path": "a.txt"}))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("a.txt: is not a directory"), "{msg}");
        let msg = t
            .call(&ListDirectory, json!({"path": "nope"}))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("nope"), "{msg}");
        for bad in [
            json!({"path": ".", "depth": 11}),
            json!({"path": ".", "depth": 0}),
            json!({}),
        ] {
            assert!(matches!(
                t.call(&ListDirectory, bad),
                Err(ToolError::InvalidArguments { .. })
            ));
        }
    }

    // --- file_search -----------------------------------------------------------------------

    #[test]
    fn search_finds_lines_and_skips_git_and_acode() {
        let t = tree();
        t.write("a/x.rs", "use std;\nfn x() {}\n  fn inner() {}\n");
        let out = t
            .call(&FileSearch, json!({"pattern": r"fn \w+\(\)"}))
            .unwrap();
        let v = data(&out);
        assert_eq!(
            v,
            json!([
                {"path": "a/deep/y.rs", "line": 1, "text": "fn y() {}"},
                {"path": "a/x.rs", "line": 2, "text": "fn x() {}"},
                {"path": "a/x.rs", "line": 3, "text": "  fn inner() {}"},
                {"path": "b.rs", "line": 1, "text": "fn b() {}"},
            ])
        );
        assert_eq!(out.content, v.to_string());
        let out = t
            .call(&FileSearch, json!({"pattern": "fn", "root": "a/deep"}))
            .unwrap();
        assert_eq!(paths(&data(&out)), ["a/deep/y.rs"]);
    }

    #[test]
    fn search_skips_binary_files() {
        let t = TestWs::new();
        let mut bin = b"needle\0".to_vec();
        bin.extend_from_slice(b"needle\n");
        t.write("bin.dat", &bin);
        // A NUL after the first 8 KiB does not make a file binary.
        let mut late = "needle\n".to_string();
        late.push_str(&"x".repeat(9000));
        late.push('\0');
        t.write("late.txt", late);
        t.write("text.txt", "a needle\n");
        let out = t.call(&FileSearch, json!({"pattern": "needle"})).unwrap();
        assert_eq!(paths(&data(&out)), ["late.txt", "text.txt"]);
    }

    #[test]
    fn search_glob_filters_by_name_or_path() {
        let t = tree();
        let out = t
            .call(&FileSearch, json!({"pattern": "fn", "glob": "*.rs"}))
            .unwrap();
        assert_eq!(paths(&data(&out)), ["a/deep/y.rs", "a/x.rs", "b.rs"]);
        let out = t
            .call(&FileSearch, json!({"pattern": "fn", "glob": "a/*.rs"}))
            .unwrap();
        assert_eq!(paths(&data(&out)), ["a/x.rs"]);
        let out = t
            .call(&FileSearch, json!({"pattern": "fn", "glob": "a/**/*.rs"}))
            .unwrap();
        assert_eq!(paths(&data(&out)), ["a/deep/y.rs", "a/x.rs"]);
        let out = t
            .call(&FileSearch, json!({"pattern": ".", "glob": "*.{txt,md}"}))
            .unwrap();
        assert_eq!(paths(&data(&out)), ["a.txt"]);
    }

    #[test]
    fn search_max_results_and_limits() {
        let mut t = TestWs::new();
        t.write("m.txt", "hit\n".repeat(50));
        let out = t
            .call(&FileSearch, json!({"pattern": "hit", "max_results": 5}))
            .unwrap();
        assert_eq!(data(&out).as_array().unwrap().len(), 5);
        assert!(out.artifacts[0].truncated);
        assert!(
            out.content.contains("truncated at 5 matches"),
            "{}",
            out.content
        );
        // The default is 100, and exactly as many matches as asked is not truncated.
        let out = t.call(&FileSearch, json!({"pattern": "hit"})).unwrap();
        assert_eq!(data(&out).as_array().unwrap().len(), 50);
        assert!(!out.artifacts[0].truncated);
        let out = t
            .call(&FileSearch, json!({"pattern": "hit", "max_results": 50}))
            .unwrap();
        assert!(!out.artifacts[0].truncated);
        // The policy's limit caps what a call may ask for.
        t.policy.limits.max_results = 7;
        let out = t
            .call(&FileSearch, json!({"pattern": "hit", "max_results": 1000}))
            .unwrap();
        assert_eq!(data(&out).as_array().unwrap().len(), 7);
    }

    #[test]
    fn search_trims_long_lines_and_reads_non_utf8() {
        let t = TestWs::new();
        t.write("long.txt", format!("{}needle\n", "é".repeat(1000)));
        t.write("latin1.txt", b"caf\xe9 needle\r\n");
        let out = t.call(&FileSearch, json!({"pattern": "needle"})).unwrap();
        let v = data(&out);
        assert_eq!(v[0]["path"], "latin1.txt");
        assert_eq!(v[0]["text"], "caf\u{FFFD} needle");
        let long = v[1]["text"].as_str().unwrap();
        assert_eq!(long.chars().count(), 500);
        assert!(long.chars().all(|c| c == 'é'));
    }

    #[test]
    fn search_failures() {
        let t = tree();
        match t.call(&FileSearch, json!({"pattern": "fn ("})) {
            Err(ToolError::InvalidArguments { message, .. }) => {
                assert!(message.contains("invalid regex \"fn (\""), "{message}");
                assert!(message.contains("unclosed group"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            t.call(&FileSearch, json!({"pattern": "x", "glob": "[ab"})),
            Err(ToolError::InvalidArguments { .. })
        ));
        assert!(matches!(
            t.call(&FileSearch, json!({"pattern": "x", "max_results": 0})),
            Err(ToolError::InvalidArguments { .. })
        ));
        let msg = t
            .call(&FileSearch, json!({"pattern": "x", "root": "b.rs"}))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("b.rs: is not a directory"), "{msg}");
        t.cancel.store(true, std::sync::atomic::Ordering::Relaxed);
        for i in 0..40 {
            t.write(&format!("many/{i}.txt"), "x");
        }
        assert!(matches!(
            t.call(&FileSearch, json!({"pattern": "x"})),
            Err(ToolError::Interrupted)
        ));
    }

    // --- file_glob -------------------------------------------------------------------------

    #[test]
    fn glob_lists_matching_files_sorted() {
        let t = tree();
        let out = t.call(&FileGlob, json!({"pattern": "**/*.rs"})).unwrap();
        assert_eq!(paths(&data(&out)), ["a/deep/y.rs", "a/x.rs", "b.rs"]);
        assert_eq!(out.content, data(&out).to_string());
        let out = t.call(&FileGlob, json!({"pattern": "*.rs"})).unwrap();
        assert_eq!(paths(&data(&out)), ["b.rs"]);
        // The pattern is relative to root; the results are relative to the workspace.
        let out = t
            .call(&FileGlob, json!({"pattern": "*.rs", "root": "a"}))
            .unwrap();
        assert_eq!(paths(&data(&out)), ["a/x.rs"]);
        // .git and .acode are not searched; symlinks and directories are not files.
        let out = t.call(&FileGlob, json!({"pattern": "**"})).unwrap();
        assert_eq!(
            paths(&data(&out)),
            ["a.txt", "a/deep/y.rs", "a/x.rs", "b.rs"]
        );
        let out = t.call(&FileGlob, json!({"pattern": "*.none"})).unwrap();
        assert_eq!(out.content, "[]");
    }

    #[test]
    fn glob_is_capped_and_reports_bad_patterns() {
        let mut t = tree();
        t.policy.limits.max_results = 2;
        let out = t.call(&FileGlob, json!({"pattern": "**"})).unwrap();
        assert_eq!(paths(&data(&out)), ["a.txt", "a/deep/y.rs"]);
        assert!(out.artifacts[0].truncated);
        assert!(
            out.content.contains("truncated at 2 paths"),
            "{}",
            out.content
        );
        assert!(matches!(
            t.call(&FileGlob, json!({"pattern": "{a,b"})),
            Err(ToolError::InvalidArguments { .. })
        ));
        assert!(matches!(
            t.call(&FileGlob, json!({"pattern": "../*"})),
            Err(ToolError::Sandbox(_))
        ));
        assert!(
            t.call(&FileGlob, json!({"pattern": "*", "root": "missing"}))
                .is_err()
        );
    }

    #[test]
    fn summaries_and_idempotence() {
        assert_eq!(
            FileSearch.summary(&json!({"pattern": "fn", "root": "src"})),
            "\"fn\" in src"
        );
        assert_eq!(FileGlob.summary(&json!({"pattern": "**/*.rs"})), "**/*.rs");
        assert_eq!(ListDirectory.summary(&json!({"path": "src"})), "src");
        assert!(ListDirectory.idempotent() && FileSearch.idempotent() && FileGlob.idempotent());
    }
}
