//! `list_directory`: the entries below a directory, to a depth, without following links.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::walk::{Flow, dir_root, json_result, truncation_note, under, walk};
use super::{Pacer, resolve};
use crate::tools::args::{parse, schema_for};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput};
use crate::workspace::fs::EntryKind;
use crate::workspace::{Access, fs as kfs};

/// Default and largest `depth` of `list_directory`.
const DEFAULT_DEPTH: u64 = 1;
const MAX_DEPTH: u64 = 10;

/// The arguments of `list_directory`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// The directory to list, relative to the workspace root ('.' for the root).
    #[schemars(length(min = 1))]
    pub path: String,
    /// How many levels to descend: 1 lists only direct children (default 1, at most 10).
    #[schemars(range(min = 1, max = 10))]
    pub depth: Option<u64>,
}

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
        schema_for::<ListArgs>()
    }

    fn idempotent(&self) -> bool {
        true
    }

    fn check(&self, args: &Value, ctx: &ToolContext) -> Result<(), ToolError> {
        let a: ListArgs = parse(self.name(), args)?;
        resolve(&a.path, ctx, Access::Read).map(|_| ())
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let a: ListArgs = parse(self.name(), args)?;
        let (root, shown) = dir_root(Some(&a.path), ctx)?;
        let depth = a.depth.unwrap_or(DEFAULT_DEPTH).clamp(1, MAX_DEPTH) as usize;
        let cap = ctx.policy.limits.max_results;
        let mut pacer = Pacer::new(ctx);
        let mut entries: Vec<(String, &'static str, Option<u64>)> = Vec::new();
        let mut truncated = false;
        let walked = walk(&root, depth, &mut |e| {
            pacer.tick()?;
            if entries.len() >= cap {
                truncated = true;
                return Ok(Flow::Stop);
            }
            let (kind, size) = match e.kind {
                EntryKind::Symlink => ("symlink", None),
                EntryKind::Dir => ("dir", None),
                EntryKind::File => ("file", kfs::size_at(e.dir, e.name).ok()),
                EntryKind::Other => ("other", None),
            };
            entries.push((under(&shown, &e.rel), kind, size));
            Ok(if e.kind == EntryKind::Dir && e.name == ".git" {
                Flow::Prune
            } else {
                Flow::Continue
            })
        });
        let unreadable = match walked {
            Ok(n) => n,
            Err(halt) => return halt.into_result(self.name(), ctx),
        };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::testutil::{result_paths as paths, stdout_json as data, tree};
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

    #[test]
    fn summary_and_idempotence() {
        assert_eq!(ListDirectory.summary(&json!({"path": "src"})), "src");
        assert!(ListDirectory.idempotent());
    }
}
