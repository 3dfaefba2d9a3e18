//! `file_edit`: replaces an exact piece of text that must occur once (or everywhere, on request),
//! or changes whole lines addressed by number, range or content.
//!
//! The line-addressed form exists because models and imported plans (odincode) think in lines:
//! "replace line 12", "delete lines 3-5", "insert after line 7", "delete the line containing
//! `dbg!`". A line number alone is dangerous — the file can change between approval and run, and
//! line 12 is then some other line — so every line-addressed edit carries `expect`, the current
//! text of the addressed line(s), which the approver sees in `preview` and the tool compares at
//! run time: a different text refuses the edit and names the line and both texts.
//!
//! [`EditArgs::op`] checks the combination of arguments once; [`apply`] computes the new text from
//! the old and is shared by the tool and by `preview`, so the diff approved is the diff written.

use std::io;
use std::os::unix::fs::PermissionsExt;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{
    MAX_EDIT_BYTES, Target, capped_artifact, io_err, read_bounded, target, unified_diff,
    write_atomic,
};
use crate::tools::args::{parse, schema_for};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput};

/// The arguments of `file_edit`: either the text form (`old` → `new`) or the line-addressed form
/// (`line`, `lines` or `line_containing`, with `expect` and one of `replace`, `insert_after`,
/// `delete`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditArgs {
    /// The file to edit, relative to the workspace root (or absolute inside it).
    #[schemars(length(min = 1))]
    pub path: String,
    /// Text form: the exact text to replace, including whitespace; must occur exactly once
    /// unless replace_all is true.
    #[schemars(length(min = 1))]
    pub old: Option<String>,
    /// Text form: the text to put in place of `old`.
    pub new: Option<String>,
    /// Text form: replace every occurrence instead of requiring exactly one (default false).
    #[serde(default)]
    pub replace_all: bool,
    /// Line form: the 1-based number of the line to change.
    #[schemars(range(min = 1))]
    pub line: Option<u64>,
    /// Line form: an inclusive 1-based range of lines, [first, last].
    pub lines: Option<[u64; 2]>,
    /// Line form: the one line containing this text (it must occur on exactly one line).
    #[schemars(length(min = 1))]
    pub line_containing: Option<String>,
    /// Line form (required there): the current text of the addressed line(s), without the final
    /// newline, lines joined by "\n"; the edit is refused if the file differs when it runs.
    pub expect: Option<String>,
    /// Line form: the text that replaces the addressed line(s) (a final newline is optional).
    pub replace: Option<String>,
    /// Line form: text inserted as new line(s) after the addressed line(s).
    pub insert_after: Option<String>,
    /// Line form: delete the addressed line(s) (default false).
    #[serde(default)]
    pub delete: bool,
}

/// Which lines a line-addressed edit means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    /// One line, 1-based.
    Line(usize),
    /// An inclusive 1-based range.
    Range(usize, usize),
    /// The single line containing this text.
    Containing(String),
}

/// What a line-addressed edit does to its lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LineAction {
    /// Replace them with this text.
    Replace(String),
    /// Insert this text as new lines after them.
    InsertAfter(String),
    /// Remove them.
    Delete,
}

/// A checked `file_edit`: what the arguments mean once their combination is known to be sound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EditOp {
    /// Replace exact text.
    Text {
        /// The text to find.
        old: String,
        /// Its replacement.
        new: String,
        /// Every occurrence rather than exactly one.
        replace_all: bool,
    },
    /// Change whole lines, bound to their current text.
    Lines {
        /// Which lines.
        address: Address,
        /// Their text as the approver saw it.
        expect: String,
        /// What to do with them.
        action: LineAction,
    },
}

/// Converts a 1-based line number from the arguments, refusing 0 with the argument's name.
fn line_no(tool: &str, name: &str, n: u64) -> Result<usize, ToolError> {
    if n == 0 {
        return Err(ToolError::invalid(
            tool,
            format!("'{name}' is 0; lines are numbered from 1"),
        ));
    }
    usize::try_from(n).map_err(|_| ToolError::invalid(tool, format!("'{name}' {n} is too large")))
}

impl EditArgs {
    /// Parses and checks what the schema cannot express for callers that skip it.
    pub fn parse(tool: &str, args: &Value) -> Result<EditArgs, ToolError> {
        let a: EditArgs = parse(tool, args)?;
        a.op(tool)?;
        Ok(a)
    }

    /// The edit these arguments describe, or an error naming the arguments that do not fit
    /// together (both `old` and `line`, line 0, a reversed range, a missing `expect`, ...).
    pub fn op(&self, tool: &str) -> Result<EditOp, ToolError> {
        let given: Vec<&str> = [
            ("old", self.old.is_some()),
            ("line", self.line.is_some()),
            ("lines", self.lines.is_some()),
            ("line_containing", self.line_containing.is_some()),
        ]
        .into_iter()
        .filter_map(|(n, g)| g.then_some(n))
        .collect();
        let bad = |m: String| Err(ToolError::invalid(tool, m));
        match given.as_slice() {
            [] => {
                return bad(
                    "give 'old' (with 'new') to replace text, or 'line', 'lines' or \
                     'line_containing' (with 'expect') to change whole lines"
                        .to_string(),
                );
            }
            [_] => {}
            [a, b, ..] => {
                return bad(format!(
                    "'{a}' and '{b}' cannot both be given: an edit addresses its text one way"
                ));
            }
        }
        let line_only = [
            ("expect", self.expect.is_some()),
            ("replace", self.replace.is_some()),
            ("insert_after", self.insert_after.is_some()),
            ("delete", self.delete),
        ];
        if let Some(old) = &self.old {
            if old.is_empty() {
                return bad("'old' must not be empty".to_string());
            }
            if let Some((name, _)) = line_only.iter().find(|(_, g)| *g) {
                return bad(format!(
                    "'{name}' belongs to the line-addressed form; with 'old' give 'new'"
                ));
            }
            let Some(new) = &self.new else {
                return bad("'new' is required with 'old'".to_string());
            };
            return Ok(EditOp::Text {
                old: old.clone(),
                new: new.clone(),
                replace_all: self.replace_all,
            });
        }
        let form = given[0];
        if self.new.is_some() {
            return bad(format!(
                "'new' belongs to the text form; with '{form}' give 'replace', 'insert_after' or 'delete'"
            ));
        }
        if self.replace_all {
            return bad(format!(
                "'replace_all' belongs to the text form, not '{form}'"
            ));
        }
        let address = if let Some(n) = self.line {
            Address::Line(line_no(tool, "line", n)?)
        } else if let Some([first, last]) = self.lines {
            let (first, last) = (
                line_no(tool, "lines[0]", first)?,
                line_no(tool, "lines[1]", last)?,
            );
            if first > last {
                return bad(format!(
                    "'lines' [{first}, {last}] is reversed: the first line comes first"
                ));
            }
            Address::Range(first, last)
        } else {
            match &self.line_containing {
                Some(s) if !s.is_empty() => Address::Containing(s.clone()),
                _ => return bad("'line_containing' must not be empty".to_string()),
            }
        };
        let actions: Vec<LineAction> = [
            self.replace.clone().map(LineAction::Replace),
            self.insert_after.clone().map(LineAction::InsertAfter),
            self.delete.then_some(LineAction::Delete),
        ]
        .into_iter()
        .flatten()
        .collect();
        let action = match <[LineAction; 1]>::try_from(actions) {
            Ok([one]) => one,
            Err(v) if v.is_empty() => {
                return bad(format!(
                    "with '{form}' give one of 'replace', 'insert_after' or 'delete: true'"
                ));
            }
            Err(_) => {
                return bad(format!(
                    "with '{form}' give only one of 'replace', 'insert_after' or 'delete'"
                ));
            }
        };
        let Some(expect) = self.expect.clone() else {
            return bad(format!(
                "'expect' is required with '{form}': the current text of the line(s), checked \
                 when the step runs so the edit changes what was approved"
            ));
        };
        Ok(EditOp::Lines {
            address,
            expect,
            action,
        })
    }
}

/// The result of applying an edit to a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The new text.
    pub after: String,
    /// What was done, in a few words (`replaced line 3 of a.rs`).
    pub summary: String,
}

/// The content of a line without its terminator (`\n` or `\r\n`).
fn content_of(line: &str) -> &str {
    let l = line.strip_suffix('\n').unwrap_or(line);
    l.strip_suffix('\r').unwrap_or(l)
}

/// The terminator a line ends with (`"\n"`, `"\r\n"` or `""` for a last line without one).
fn terminator_of(line: &str) -> &str {
    &line[content_of(line).len()..]
}

/// `text` without one final newline: the caller adds the line's own terminator.
fn body_of(text: &str) -> &str {
    text.strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(text)
}

fn where_(first: usize, last: usize) -> String {
    if first == last {
        format!("line {first}")
    } else {
        format!("lines {first}-{last}")
    }
}

/// Applies `op` to `before` (the content of the file `rel`); the error says why the edit cannot
/// be made (text not found, line past the end, `expect` differs, naming line and both texts).
pub fn apply(op: &EditOp, before: &str, rel: &str) -> Result<Applied, String> {
    let (address, expect, action) = match op {
        EditOp::Text {
            old,
            new,
            replace_all,
        } => {
            let count = before.matches(old.as_str()).count();
            if count == 0 {
                return Err(format!(
                    "the 'old' text was not found in {rel} (it must match exactly, including whitespace)"
                ));
            }
            if count > 1 && !replace_all {
                return Err(format!(
                    "the 'old' text occurs {count} times in {rel}; include more surrounding context so it matches exactly once, or set replace_all to true"
                ));
            }
            let after = if *replace_all {
                before.replace(old.as_str(), new)
            } else {
                before.replacen(old.as_str(), new, 1)
            };
            let plural = if count == 1 { "" } else { "s" };
            return Ok(Applied {
                after,
                summary: format!("replaced {count} occurrence{plural} in {rel}"),
            });
        }
        EditOp::Lines {
            address,
            expect,
            action,
        } => (address, expect, action),
    };
    let lines: Vec<&str> = before.split_inclusive('\n').collect();
    let count = lines.len();
    let (first, last) = match address {
        Address::Line(n) => (*n, *n),
        Address::Range(a, b) => (*a, *b),
        Address::Containing(s) => {
            let hits: Vec<usize> = lines
                .iter()
                .enumerate()
                .filter(|(_, l)| content_of(l).contains(s.as_str()))
                .map(|(i, _)| i + 1)
                .collect();
            match hits.as_slice() {
                [] => return Err(format!("no line of {rel} contains {s:?}")),
                [one] => (*one, *one),
                many => {
                    let shown: Vec<String> = many.iter().take(10).map(usize::to_string).collect();
                    return Err(format!(
                        "{} lines of {rel} contain {s:?} (lines {}); address one with 'line'",
                        many.len(),
                        shown.join(", ")
                    ));
                }
            }
        }
    };
    if first == 0 || last > count {
        return Err(format!(
            "{} is past the end of {rel}, which has {count} line{}",
            where_(first, last),
            if count == 1 { "" } else { "s" }
        ));
    }
    let span = &lines[first - 1..last];
    let found = span
        .iter()
        .map(|l| content_of(l))
        .collect::<Vec<_>>()
        .join("\n");
    let wanted = body_of(expect);
    if found != wanted {
        return Err(format!(
            "{rel} {} is not what the plan expects (the file changed since the edit was written): expected {wanted:?}, found {found:?}",
            where_(first, last)
        ));
    }
    let head: String = lines[..first - 1].concat();
    let tail: String = lines[last..].concat();
    let term = span.last().map_or("\n", |l| terminator_of(l));
    let (middle, summary) = match action {
        LineAction::Replace(text) => (
            format!("{}{term}", body_of(text)),
            format!("replaced {} of {rel}", where_(first, last)),
        ),
        LineAction::Delete => (
            String::new(),
            format!("deleted {} of {rel}", where_(first, last)),
        ),
        LineAction::InsertAfter(text) => {
            let kept = span.concat();
            let body = body_of(text);
            let n = body.split('\n').count();
            let inserted = if term.is_empty() {
                // The last line had no newline: it gets one, the inserted text keeps the file's
                // missing final newline.
                format!("{kept}\n{body}")
            } else {
                format!("{kept}{body}{term}")
            };
            (
                inserted,
                format!(
                    "inserted {n} line{} after {} of {rel}",
                    if n == 1 { "" } else { "s" },
                    where_(last, last)
                ),
            )
        }
    };
    Ok(Applied {
        after: format!("{head}{middle}{tail}"),
        summary,
    })
}

/// `file_edit`: see the module docs.
pub struct FileEdit;

/// The file an edit applies to, with its text before and after.
struct PlannedEdit {
    target: Target,
    mode: u32,
    before: String,
    applied: Applied,
}

fn plan_edit(op: &EditOp, path: &str, ctx: &ToolContext) -> Result<PlannedEdit, ToolError> {
    let target = target(path, ctx, false, true)?;
    let rel = ctx.workspace.display(&target.abs);
    let io = |e| io_err("edit", ctx, &target.abs, e);
    let parent = target
        .parent
        .as_ref()
        .ok_or_else(|| io(io::Error::from(io::ErrorKind::NotFound)))?;
    let file = parent.open_existing().map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if meta.len() > MAX_EDIT_BYTES {
        return Err(ToolError::Failed(format!(
            "{rel} is {} bytes, more than file_edit handles ({MAX_EDIT_BYTES} bytes)",
            meta.len()
        )));
    }
    let (_, raw) = read_bounded(file, MAX_EDIT_BYTES).map_err(io)?;
    let before = String::from_utf8(raw).map_err(|_| {
        ToolError::Failed(format!(
            "{rel} is not valid UTF-8; file_edit only edits text (use file_write to replace it)"
        ))
    })?;
    let applied = apply(op, &before, &rel).map_err(ToolError::Failed)?;
    Ok(PlannedEdit {
        mode: meta.permissions().mode() & 0o7777,
        target,
        before,
        applied,
    })
}

impl Tool for FileEdit {
    fn name(&self) -> &'static str {
        "file_edit"
    }

    fn description(&self) -> &'static str {
        "Edit a text file. Text form: replace 'old' with 'new' ('old' must occur exactly once \
         unless replace_all is true). Line form: address whole lines by 'line' (1-based), 'lines' \
         [first, last] or 'line_containing' (text on exactly one line), give 'expect' (their \
         current text, lines joined by \\n) and one of 'replace', 'insert_after' or 'delete': true."
    }

    fn schema(&self) -> Value {
        schema_for::<EditArgs>()
    }

    fn idempotent(&self) -> bool {
        false
    }

    fn check(&self, args: &Value, ctx: &ToolContext) -> Result<(), ToolError> {
        let a = EditArgs::parse(self.name(), args)?;
        super::resolve(&a.path, ctx, crate::workspace::Access::Write).map(|_| ())
    }

    fn preview(&self, args: &Value, ctx: &ToolContext) -> Option<String> {
        let a: EditArgs = parse(self.name(), args).ok()?;
        let op = a.op(self.name()).ok()?;
        let edit = plan_edit(&op, &a.path, ctx).ok()?;
        Some(unified_diff(
            &ctx.workspace.display(&edit.target.abs),
            Some(&edit.before),
            Some(&edit.applied.after),
        ))
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let a: EditArgs = parse(self.name(), args)?;
        let op = a.op(self.name())?;
        let edit = plan_edit(&op, &a.path, ctx)?;
        let rel = ctx.workspace.display(&edit.target.abs);
        write_atomic(
            ctx,
            &edit.target,
            edit.applied.after.as_bytes(),
            true,
            Some(edit.mode),
        )?;
        let diff = unified_diff(&rel, Some(&edit.before), Some(&edit.applied.after));
        Ok(
            ToolOutput::ok(edit.applied.summary).with_artifact(capped_artifact(
                "diff",
                diff,
                ctx.policy.limits.output_bytes,
            )),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn op(args: Value) -> Result<EditOp, String> {
        let a: EditArgs = parse("file_edit", &args).map_err(|e| e.to_string())?;
        a.op("file_edit").map_err(|e| e.to_string())
    }

    fn run(args: Value, before: &str) -> Result<String, String> {
        apply(&op(args)?, before, "f.txt").map(|a| a.after)
    }

    const F: &str = "one\ntwo\nthree\nfour\n";

    #[test]
    fn line_replace_insert_delete() {
        let r = |v| run(v, F).unwrap();
        assert_eq!(
            r(json!({"path": "f", "line": 2, "expect": "two", "replace": "TWO"})),
            "one\nTWO\nthree\nfour\n"
        );
        assert_eq!(
            r(json!({"path": "f", "line": 2, "expect": "two", "replace": "a\nb\n"})),
            "one\na\nb\nthree\nfour\n"
        );
        assert_eq!(
            r(json!({"path": "f", "line": 1, "expect": "one", "insert_after": "1.5"})),
            "one\n1.5\ntwo\nthree\nfour\n"
        );
        assert_eq!(
            r(json!({"path": "f", "lines": [2, 3], "expect": "two\nthree", "delete": true})),
            "one\nfour\n"
        );
        assert_eq!(
            r(json!({"path": "f", "lines": [3, 4], "expect": "three\nfour", "replace": "end"})),
            "one\ntwo\nend\n"
        );
        assert_eq!(
            r(json!({"path": "f", "line_containing": "hre", "expect": "three", "delete": true})),
            "one\ntwo\nfour\n"
        );
        assert_eq!(
            r(json!({"path": "f", "line_containing": "ou", "expect": "four", "replace": "4"})),
            "one\ntwo\nthree\n4\n"
        );
    }

    #[test]
    fn line_endings_are_kept() {
        assert_eq!(
            run(
                json!({"path": "f", "line": 2, "expect": "b", "replace": "B"}),
                "a\r\nb\r\nc"
            )
            .unwrap(),
            "a\r\nB\r\nc"
        );
        // The last line has no newline: insert after it keeps the file without one.
        assert_eq!(
            run(
                json!({"path": "f", "line": 2, "expect": "b", "insert_after": "c"}),
                "a\nb"
            )
            .unwrap(),
            "a\nb\nc"
        );
        assert_eq!(
            run(
                json!({"path": "f", "line": 2, "expect": "b", "replace": "B\n"}),
                "a\nb"
            )
            .unwrap(),
            "a\nB"
        );
    }

    #[test]
    fn expect_mismatch_names_line_and_both_texts() {
        let e = run(
            json!({"path": "f", "line": 3, "expect": "tree", "replace": "x"}),
            F,
        )
        .unwrap_err();
        assert!(
            e.contains("f.txt line 3")
                && e.contains("expected \"tree\"")
                && e.contains("found \"three\""),
            "{e}"
        );
        let e = run(
            json!({"path": "f", "lines": [1, 2], "expect": "one\nTWO", "delete": true}),
            F,
        )
        .unwrap_err();
        assert!(e.contains("lines 1-2"), "{e}");
    }

    #[test]
    fn runtime_address_errors() {
        let e = run(
            json!({"path": "f", "line": 9, "expect": "", "delete": true}),
            F,
        )
        .unwrap_err();
        assert!(
            e.contains("line 9 is past the end") && e.contains("4 lines"),
            "{e}"
        );
        let e = run(
            json!({"path": "f", "line_containing": "o", "expect": "one", "delete": true}),
            F,
        )
        .unwrap_err();
        assert!(
            e.contains("3 lines of f.txt contain") && e.contains("lines 1, 2, 4"),
            "{e}"
        );
        let e = run(
            json!({"path": "f", "line_containing": "zzz", "expect": "", "delete": true}),
            F,
        )
        .unwrap_err();
        assert!(e.contains("no line of f.txt contains"), "{e}");
    }

    #[test]
    fn bad_combinations_are_named() {
        let cases = [
            (
                json!({"path": "f", "old": "a", "new": "b", "line": 1}),
                "'old' and 'line' cannot both be given",
            ),
            (
                json!({"path": "f", "line": 0, "expect": "", "delete": true}),
                "'line' is 0",
            ),
            (
                json!({"path": "f", "lines": [5, 3], "expect": "", "delete": true}),
                "[5, 3] is reversed",
            ),
            (
                json!({"path": "f", "line": 1, "replace": "x"}),
                "'expect' is required with 'line'",
            ),
            (
                json!({"path": "f", "line": 1, "expect": "x"}),
                "give one of 'replace', 'insert_after' or 'delete: true'",
            ),
            (
                json!({"path": "f", "line": 1, "expect": "x", "replace": "y", "delete": true}),
                "only one of",
            ),
            (
                json!({"path": "f", "line": 1, "expect": "x", "new": "y"}),
                "'new' belongs to the text form",
            ),
            (
                json!({"path": "f", "old": "a", "new": "b", "expect": "a"}),
                "'expect' belongs to the line-addressed form",
            ),
            (json!({"path": "f", "old": "a"}), "'new' is required"),
            (json!({"path": "f"}), "give 'old'"),
            (
                json!({"path": "f", "lines": [1, 2, 3], "expect": "", "delete": true}),
                "invalid length",
            ),
        ];
        for (args, needle) in cases {
            let e = op(args.clone()).unwrap_err();
            assert!(
                e.contains(needle),
                "{args}: {e:?} should contain {needle:?}"
            );
        }
    }
}
