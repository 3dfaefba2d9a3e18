//! Finding tools: `file_search` (lines matching a regex) and `file_glob` (paths matching a glob).
//!
//! Both walk with `tools::files::walk`: the root is opened beneath the workspace root by
//! the kernel, the walk goes from directory handle to directory handle and never follows a
//! symlink, and every file `file_search` reads is opened relative to its directory's handle with
//! `O_NOFOLLOW | O_NONBLOCK`, so nothing outside the workspace is reached however links inside it
//! are arranged or rearranged during the walk. Both skip `.git` and `.acode` below the root.

use std::fs::File;
use std::io::{self, Read};
use std::sync::Arc;

use regex::bytes::{Regex, RegexBuilder};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::args::{parse, schema_for};
use super::files::walk::{Flow, dir_root, json_result, skipped, truncation_note, under, walk};
use super::files::{Pacer, resolve};
use super::{Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};
use crate::policy::glob::{Glob, GlobError};
use crate::workspace::fs::EntryKind;
use crate::workspace::{Access, fs as kfs};

/// Default number of `file_search` matches.
const DEFAULT_MAX_RESULTS: u64 = 100;
/// Bytes inspected for a NUL to decide that a file is binary (as git and ripgrep do).
const BINARY_SNIFF_BYTES: usize = 8 * 1024;
/// Files larger than this are not searched (they are counted and reported instead).
const MAX_SEARCH_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// Characters of a matching line kept in a `file_search` result.
const MAX_LINE_CHARS: usize = 500;

/// Registers the finding tools.
pub fn register(r: &mut ToolRegistry) {
    r.register(Arc::new(FileSearch));
    r.register(Arc::new(FileGlob));
}

// ---------------------------------------------------------------------------------------------
// file_search

/// The arguments of `file_search`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// Regular expression (Rust regex syntax) matched against each line.
    #[schemars(length(min = 1))]
    pub pattern: String,
    /// Directory to search, relative to the workspace root (default '.').
    #[schemars(length(min = 1))]
    pub root: Option<String>,
    /// Only search files matching this glob: with a '/' it is matched against the path relative
    /// to root, without one against the file name (e.g. '*.rs').
    #[schemars(length(min = 1))]
    pub glob: Option<String>,
    /// Maximum number of matching lines to return (default 100).
    #[schemars(range(min = 1))]
    pub max_results: Option<u64>,
}

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

/// Searches one opened file, pushing matches until `results` holds `want` of them.
fn scan_file(
    file: File,
    rel: &str,
    regex: &Regex,
    want: usize,
    results: &mut Vec<Value>,
) -> io::Result<Scanned> {
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
        schema_for::<SearchArgs>()
    }

    fn idempotent(&self) -> bool {
        true
    }

    fn check(&self, args: &Value, ctx: &ToolContext) -> Result<(), ToolError> {
        let a: SearchArgs = parse(self.name(), args)?;
        if let Some(root) = &a.root {
            resolve(root, ctx, Access::Read)?;
        }
        if let Some(g) = &a.glob {
            glob(self.name(), g)?;
        }
        compile_regex(self.name(), &a.pattern).map(|_| ())
    }

    fn summary(&self, args: &Value) -> String {
        match parse::<SearchArgs>(self.name(), args) {
            Ok(SearchArgs {
                pattern,
                root: Some(root),
                ..
            }) => format!("{pattern:?} in {root}"),
            Ok(a) => format!("{:?}", a.pattern),
            Err(_) => String::new(),
        }
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let a: SearchArgs = parse(self.name(), args)?;
        let regex = compile_regex(self.name(), &a.pattern)?;
        let glob = a
            .glob
            .as_deref()
            .map(|g| glob(self.name(), g))
            .transpose()?;
        let (root, shown) = dir_root(a.root.as_deref(), ctx)?;
        let cap = ctx.policy.limits.max_results;
        let max = (a.max_results.unwrap_or(DEFAULT_MAX_RESULTS) as usize).clamp(1, cap.max(1));
        let mut pacer = Pacer::new(ctx);
        // One more than asked, to know whether there were more.
        let want = max.saturating_add(1);
        let mut results = Vec::new();
        let (mut large, mut unreadable) = (0usize, 0usize);
        let walked = walk(&root, usize::MAX, &mut |e| {
            pacer.tick()?;
            if skipped(e) {
                return Ok(Flow::Prune);
            }
            if e.kind != EntryKind::File {
                return Ok(Flow::Continue);
            }
            if let Some(g) = &glob
                && !glob_accepts(g, &e.rel)
            {
                return Ok(Flow::Continue);
            }
            let scanned = kfs::open_file_in(e.dir, e.name)
                .and_then(|f| scan_file(f, &under(&shown, &e.rel), &regex, want, &mut results));
            match scanned {
                Ok(Scanned::Text) => {}
                // Binary files are skipped silently, as `grep -I` does.
                Ok(Scanned::Skipped) => {}
                Ok(Scanned::TooLarge) => large += 1,
                Err(_) => unreadable += 1,
            }
            Ok(if results.len() >= want {
                Flow::Stop
            } else {
                Flow::Continue
            })
        });
        match walked {
            Ok(n) => unreadable += n,
            Err(halt) => return halt.into_result(self.name(), ctx),
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

/// The arguments of `file_glob`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlobArgs {
    /// Glob matched against each file's path relative to root, e.g. '**/*.rs' or
    /// 'src/*.{rs,toml}'.
    #[schemars(length(min = 1))]
    pub pattern: String,
    /// Directory to search below, relative to the workspace root (default '.').
    #[schemars(length(min = 1))]
    pub root: Option<String>,
}

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
        schema_for::<GlobArgs>()
    }

    fn idempotent(&self) -> bool {
        true
    }

    fn check(&self, args: &Value, ctx: &ToolContext) -> Result<(), ToolError> {
        let a: GlobArgs = parse(self.name(), args)?;
        glob(self.name(), &a.pattern)?;
        if let Some(root) = &a.root {
            resolve(root, ctx, Access::Read)?;
        }
        Ok(())
    }

    fn summary(&self, args: &Value) -> String {
        match parse::<GlobArgs>(self.name(), args) {
            Ok(GlobArgs {
                pattern,
                root: Some(root),
            }) => format!("{pattern} in {root}"),
            Ok(a) => a.pattern,
            Err(_) => String::new(),
        }
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let a: GlobArgs = parse(self.name(), args)?;
        let glob = glob(self.name(), &a.pattern)?;
        let (root, shown) = dir_root(a.root.as_deref(), ctx)?;
        let cap = ctx.policy.limits.max_results;
        let mut pacer = Pacer::new(ctx);
        let mut paths = Vec::new();
        let mut truncated = false;
        let walked = walk(&root, usize::MAX, &mut |e| {
            pacer.tick()?;
            if skipped(e) {
                return Ok(Flow::Prune);
            }
            if e.kind != EntryKind::File || !glob.is_match(&e.rel) {
                return Ok(Flow::Continue);
            }
            if paths.len() >= cap {
                truncated = true;
                return Ok(Flow::Stop);
            }
            paths.push(under(&shown, &e.rel));
            Ok(Flow::Continue)
        });
        let unreadable = match walked {
            Ok(n) => n,
            Err(halt) => return halt.into_result(self.name(), ctx),
        };
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

/// A glob argument of `tool`: an escaping pattern is a sandbox violation, a malformed one an
/// invalid argument naming it.
fn glob(tool: &str, pattern: &str) -> Result<Glob, ToolError> {
    Glob::new(pattern).map_err(|e| match e {
        GlobError::Escapes(violation) => ToolError::Sandbox(violation),
        GlobError::Invalid(why) => {
            ToolError::invalid(tool, format!("invalid glob {pattern:?}: {why}"))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::testutil::{TestWs, result_paths as paths, stdout_json as data, tree};
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
        assert!(FileSearch.idempotent() && FileGlob.idempotent());
    }
}
