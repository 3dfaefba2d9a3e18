//! `acode-run import odincode PLAN.json`: a plan written for odincode's executor, converted.
//!
//! odincode (oldnordic/odincode) plans are what its model writes: `plan_id`, `intent`
//! (`READ|MUTATE|QUERY|EXPLAIN`), `steps[]` whose `arguments` odincode turns into **strings**
//! (numbers and booleans included), a free-text `precondition` (unknown ones pass there),
//! `requires_confirmation` and `evidence_referenced`. Each step is converted to the acode-run step
//! that does the same thing, and judged:
//!
//! - `lossless`: the converted step does what odincode's tool would (same files written, same
//!   command run);
//! - `lossy`: it runs, but something is lost, named in `lost` (raw text instead of odincode's parsed
//!   JSON, an argument with no equivalent, a precondition with no check);
//! - `refused`: it cannot be converted without guessing, and `reason` says why (shell syntax,
//!   code-graph queries, an argument odincode itself would reject). A refused step is left out of
//!   the plan, and the plan's description says so.
//!
//! The converted plan is validated like any plan (the workspace is read to bind line edits to the
//! text of the lines they change, `expect`); a step the validator refuses is refused here too.
//! Nothing is approved. See `docs/odincode.md` for the mapping table.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::{Map, Value, json};
use thiserror::Error;

use crate::plan::{Intent, ValidationContext};
use crate::policy::Policy;
use crate::preview::Simulation;
use crate::tools::ToolRegistry;
use crate::tools::files::{Address, EditOp, LineAction, apply_edit};
use crate::workspace::Workspace;

/// odincode's tool whitelist (`src/llm/router.rs`, `TOOL_WHITELIST`): a plan naming any other
/// tool is rejected by odincode itself.
pub const WHITELIST: [&str; 20] = [
    "bash_exec",
    "display_text",
    "execution_summary",
    "file_create",
    "file_edit",
    "file_glob",
    "file_read",
    "file_search",
    "file_write",
    "git_diff",
    "git_log",
    "git_status",
    "lsp_check",
    "memory_query",
    "references_from_file_to_symbol_name",
    "references_to_symbol_name",
    "splice_patch",
    "splice_plan",
    "symbols_in_file",
    "wc",
];

/// How one step came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Does what odincode would.
    Lossless,
    /// Runs, but something is lost (see `lost`).
    Lossy,
    /// Not converted (see `reason`).
    Refused,
}

/// The report line of one odincode step.
#[derive(Debug, Clone, Serialize)]
pub struct StepReport {
    /// The odincode step id.
    pub step_id: String,
    /// The odincode tool.
    pub tool: String,
    /// How it came through.
    pub status: Status,
    /// The acode-run steps it became (`id: tool`).
    pub converted_to: Vec<String>,
    /// What is lost (lossy steps).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lost: Vec<String>,
    /// Why it was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Things to know that change nothing (the policy a command needs, a stricter check).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The odincode plan id (kept as the acode-run plan id).
    pub plan_id: String,
    /// The odincode intent as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub odincode_intent: Option<String>,
    /// The acode-run intent written, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intent: Option<Intent>,
    /// Losses that concern the plan rather than a step (an intent that could not be kept).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub plan_lost: Vec<String>,
    /// Why the whole plan was refused (nothing written), if it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan_refused: Option<String>,
    /// Every odincode step, in order.
    pub steps: Vec<StepReport>,
}

impl Report {
    /// The overall judgement: refused if anything was, else lossy if anything was, else lossless.
    pub fn status(&self) -> Status {
        if self.plan_refused.is_some() || self.steps.iter().any(|s| s.status == Status::Refused) {
            Status::Refused
        } else if !self.plan_lost.is_empty() || self.steps.iter().any(|s| s.status == Status::Lossy)
        {
            Status::Lossy
        } else {
            Status::Lossless
        }
    }
}

/// A converted plan: the plan (absent when refused whole), the policy its commands need, and the
/// report.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The acode-run plan, or `None` when no step could be converted or the plan did not validate.
    pub plan: Option<Value>,
    /// The policy the plan needs (`{"allow_commands": ["splice"]}`), to be written beside it.
    pub policy: Option<Value>,
    /// What happened to each step.
    pub report: Report,
}

/// The input is not an odincode plan at all (odincode's own parser would reject it).
#[derive(Debug, Error)]
#[error("{location}: {message}")]
pub struct ImportError {
    /// Where (`plan.intent`, `steps[2].arguments`, `line 3, column 7`).
    pub location: String,
    /// What is wrong.
    pub message: String,
}

fn bad(location: impl Into<String>, message: impl Into<String>) -> ImportError {
    ImportError {
        location: location.into(),
        message: message.into(),
    }
}

/// One odincode step as odincode's parser sees it: arguments as strings.
#[derive(Debug, Clone)]
struct OdinStep {
    step_id: String,
    tool: String,
    args: BTreeMap<String, String>,
    precondition: String,
    requires_confirmation: bool,
}

impl OdinStep {
    /// The first of `names` present (odincode's validator and executor disagree on some names).
    fn get(&self, names: &[&str]) -> Option<&str> {
        names
            .iter()
            .find_map(|n| self.args.get(*n).map(String::as_str))
    }

    fn require(&self, names: &[&str]) -> Result<&str, String> {
        self.get(names).ok_or_else(|| {
            format!(
                "missing argument {} (odincode fails this step)",
                names
                    .iter()
                    .map(|n| format!("'{n}'"))
                    .collect::<Vec<_>>()
                    .join(" or ")
            )
        })
    }
}

/// An odincode plan as parsed: id, intent as written, evidence references, steps.
type OdinPlan = (String, Option<String>, Vec<String>, Vec<OdinStep>);

/// A converted precondition: the check (if any), what is lost, a note.
type ConvertedPrecondition = (Option<Value>, Option<String>, Option<String>);

/// odincode's `parse_arguments`: every value becomes a string.
fn stringify(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "null".to_string(),
        other => other.to_string(),
    }
}

/// Parses odincode plan bytes the way odincode's `parse_json_plan` does, but leniently where it
/// costs nothing (a missing `evidence_referenced`, any casing of `intent`).
fn parse_odin(bytes: &[u8]) -> Result<OdinPlan, ImportError> {
    // One document for the reviewer and the importer: serde_json's `Value` would keep the last of
    // two equal keys (odincode's own typed parser refuses a repeated field).
    crate::input::check_unique_keys(bytes).map_err(|d| {
        bad(
            format!("line {}, column {}", d.line, d.column),
            format!(
                "duplicate key {:?} (a key may appear once per object)",
                d.key
            ),
        )
    })?;
    let v: Value = serde_json::from_slice(bytes).map_err(|e| {
        bad(
            format!("line {}, column {}", e.line(), e.column()),
            format!("not JSON: {e}"),
        )
    })?;
    let obj = v
        .as_object()
        .ok_or_else(|| bad("plan", "an odincode plan is a JSON object"))?;
    let plan_id = obj
        .get("plan_id")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("plan.plan_id", "missing or not a string"))?
        .to_string();
    let intent = match obj.get("intent") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            return Err(bad(
                "plan.intent",
                format!("expected a string, got {other}"),
            ));
        }
    };
    let evidence = obj
        .get("evidence_referenced")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    let steps_raw = obj
        .get("steps")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("plan.steps", "missing or not an array"))?;
    if steps_raw.is_empty() {
        return Err(bad("plan.steps", "the plan has no steps"));
    }
    let mut steps = Vec::new();
    for (i, s) in steps_raw.iter().enumerate() {
        let at = format!("steps[{i}]");
        let field = |k: &str| -> Result<String, ImportError> {
            s.get(k)
                .and_then(Value::as_str)
                .map(String::from)
                .ok_or_else(|| bad(format!("{at}.{k}"), "missing or not a string"))
        };
        let step_id = field("step_id")?;
        let tool = field("tool")?;
        let args = s
            .get("arguments")
            .and_then(Value::as_object)
            .ok_or_else(|| bad(format!("{at}.arguments"), "missing or not an object"))?
            .iter()
            .map(|(k, v)| (k.clone(), stringify(v)))
            .collect();
        steps.push(OdinStep {
            step_id,
            tool,
            args,
            precondition: s
                .get("precondition")
                .and_then(Value::as_str)
                .unwrap_or("none")
                .to_string(),
            requires_confirmation: s
                .get("requires_confirmation")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        });
    }
    Ok((plan_id, intent, evidence, steps))
}

/// A converted step, before it is judged by the validator.
struct Converted {
    /// acode-run steps (each with `tool` and `arguments`; ids and the rest are added later).
    steps: Vec<(String, Value)>,
    lost: Vec<String>,
    notes: Vec<String>,
    /// Programs the policy must allow (`splice`).
    needs_commands: Vec<&'static str>,
}

impl Converted {
    fn one(tool: &str, arguments: Value) -> Self {
        Converted {
            steps: vec![(tool.to_string(), arguments)],
            lost: Vec::new(),
            notes: Vec::new(),
            needs_commands: Vec::new(),
        }
    }

    fn lost(mut self, what: impl Into<String>) -> Self {
        self.lost.push(what.into());
        self
    }
}

/// odincode's `"true"`/`"false"` (anything else: its `parse::<bool>().ok()` gives the default).
fn flag(s: &OdinStep, name: &str, default: bool) -> bool {
    s.get(&[name])
        .and_then(|v| v.parse::<bool>().ok())
        .unwrap_or(default)
}

/// The first shell construct in `cmd` outside quotes, named, or `None` when `cmd` is a plain
/// command line that shlex splits exactly as bash would.
pub fn shell_syntax(cmd: &str) -> Option<&'static str> {
    const BUILTINS: &[&str] = &[
        "cd", "export", "source", ".", "alias", "unset", "set", "exit", "eval", "exec", "ulimit",
        "umask", "pushd", "popd", "read", "trap", "wait", "shopt", "builtin", "command", "let",
        "declare", "local", "function", "if", "for", "while", "until", "case", "time",
    ];
    let mut chars = cmd.chars().peekable();
    let (mut single, mut double) = (false, false);
    let mut word_start = true;
    let mut first_word = true;
    while let Some(c) = chars.next() {
        if single {
            if c == '\'' {
                single = false;
            }
            continue;
        }
        if c == '\\' {
            chars.next();
            word_start = false;
            continue;
        }
        if double {
            match c {
                '"' => double = false,
                '$' => return Some("$ (expansion)"),
                '`' => return Some("` (command substitution)"),
                _ => {}
            }
            continue;
        }
        let op = match c {
            '\'' => {
                single = true;
                None
            }
            '"' => {
                double = true;
                None
            }
            '|' if chars.peek() == Some(&'|') => Some("||"),
            '|' => Some("| (pipe)"),
            '&' if chars.peek() == Some(&'&') => Some("&&"),
            '&' => Some("& (background)"),
            ';' => Some(";"),
            '>' => Some("> (redirection)"),
            '<' => Some("< (redirection)"),
            '$' => Some("$ (expansion)"),
            '`' => Some("` (command substitution)"),
            '(' | ')' => Some("( ) (subshell)"),
            '*' | '?' | '[' => Some("glob pattern (* ? [)"),
            '{' | '}' => Some("{ } (brace expansion)"),
            '~' if word_start => Some("~ (home directory)"),
            '#' if word_start => Some("# (comment)"),
            '!' if word_start => Some("!"),
            '\n' | '\r' => Some("newline (several commands)"),
            '=' if first_word => Some("VAR=value (variable assignment)"),
            _ => None,
        };
        if op.is_some() {
            return op;
        }
        if c.is_whitespace() {
            if !word_start {
                first_word = false;
            }
            word_start = true;
        } else {
            word_start = false;
        }
    }
    let first = shlex::split(cmd)?.into_iter().next()?;
    BUILTINS
        .contains(&first.as_str())
        .then_some("a shell builtin or keyword")
}

/// Joins a directory argument and a file name the way odincode's `Path::join` does.
fn join(dir: &str, name: &str) -> String {
    let d = dir.trim_end_matches('/');
    if d.is_empty() || d == "." {
        name.to_string()
    } else {
        format!("{d}/{name}")
    }
}

/// A `run_command` step with `argv` (and `cwd` unless it is the workspace root).
fn command(argv: Vec<String>, cwd: Option<&str>) -> Value {
    let mut a = json!({ "argv": argv });
    if let Some(c) = cwd.filter(|c| !c.is_empty() && *c != ".") {
        a["cwd"] = json!(c);
    }
    a
}

/// What odincode's `file_edit` would make of `before` (it rewrites the file as its lines joined
/// by `\n` plus a final newline), for the comparison that decides lossless or lossy.
fn odin_edit_result(lines: &[String]) -> String {
    lines.join("\n") + "\n"
}

/// `v` with every `${` in its strings written `$${`, acode-run's literal `${`: odincode
/// substitutes no variables, so its text must reach the tool as written.
fn literal(v: &Value) -> Value {
    match v {
        Value::String(s) => Value::String(s.replace("${", "$${")),
        Value::Array(a) => Value::Array(a.iter().map(literal).collect()),
        Value::Object(m) => Value::Object(m.iter().map(|(k, x)| (k.clone(), literal(x))).collect()),
        other => other.clone(),
    }
}

/// odincode puts a line's new text in place as it is, so a text ending in a newline leaves an
/// empty line after it; acode-run's line edits take one final newline as the line's own, so one
/// more is added to keep odincode's result.
fn exact(text: &str) -> String {
    if text.ends_with('\n') {
        format!("{text}\n")
    } else {
        text.to_string()
    }
}

/// One atomic edit of the lines from the first to the last of `hits` (1-based, over `before`),
/// bound to their current text, giving what odincode leaves there (`after`, the whole file's
/// lines after odincode's edit; the lines outside the range are the same in both).
fn range_op(before: &[String], after: &[String], hits: &[usize]) -> (Address, String, LineAction) {
    let (first, last) = (hits[0], hits[hits.len() - 1]);
    let expect = before[first - 1..last].join("\n");
    let kept_tail = before.len() - last;
    let segment = &after[first - 1..after.len() - kept_tail];
    let address = if first == last {
        Address::Line(first)
    } else {
        Address::Range(first, last)
    };
    let action = if segment.is_empty() {
        LineAction::Delete
    } else {
        LineAction::Replace(segment.join("\n") + "\n")
    };
    (address, expect, action)
}

/// The converter's state across steps: the simulated workspace, for line edits.
struct Ctx<'a> {
    sim: Simulation<'a>,
}

impl Ctx<'_> {
    fn text(&mut self, path: &str) -> Result<String, String> {
        match self.sim.content(path) {
            Ok(Some(t)) => Ok(t),
            Ok(None) => Err(format!(
                "{path} does not exist in the workspace, so the edit cannot be bound to the text of its lines \
                 (import with --workspace set to the project the plan was written for; a file an \
                 earlier step creates must be written by a direct file step so its lines are known)"
            )),
            Err(e) => Err(e),
        }
    }
}

/// `file_edit`: odincode's four line operations, each bound to the current text of its lines.
fn convert_file_edit(s: &OdinStep, ctx: &mut Ctx) -> Result<Converted, String> {
    let path = s.require(&["path"])?.to_string();
    let before = ctx.text(&path)?;
    let odin_lines: Vec<String> = before.lines().map(String::from).collect();
    let n = odin_lines.len();
    // (address, expect, action) in the order to apply; several lines are edited bottom-up so the
    // numbers of the lines still to edit do not move.
    let mut ops: Vec<(Address, String, LineAction)> = Vec::new();
    let mut odin_after = odin_lines.clone();
    let line_text = |i: usize| odin_lines[i - 1].clone();
    if let Some(v) = s.get(&["line_number"]) {
        let k: usize = v.trim().parse().map_err(|_| {
            format!("'line_number' {v:?} is not a number (odincode fails this step)")
        })?;
        if k == 0 || k > n {
            return Err(format!(
                "'line_number' {k} is outside {path} ({n} lines); odincode fails this step"
            ));
        }
        let new = s.get(&["new_content"]).unwrap_or("").to_string();
        odin_after[k - 1] = new.clone();
        ops.push((
            Address::Line(k),
            line_text(k),
            LineAction::Replace(exact(&new)),
        ));
    } else if let Some(pattern) = s.get(&["pattern"]) {
        let hits: Vec<usize> = odin_lines
            .iter()
            .enumerate()
            .filter(|(_, l)| l.contains(pattern))
            .map(|(i, _)| i + 1)
            .collect();
        if hits.is_empty() {
            return Err(format!(
                "no line of {path} contains {pattern:?} (odincode fails this step)"
            ));
        }
        match s.get(&["new_content"]) {
            Some(new) => {
                let chosen: Vec<usize> = if flag(s, "replace_all", false) {
                    hits.clone()
                } else {
                    vec![hits[0]]
                };
                for &k in &chosen {
                    odin_after[k - 1] = new.to_string();
                }
                if chosen.len() == 1 {
                    let k = chosen[0];
                    let address = if hits.len() == 1 {
                        Address::Containing(pattern.to_string())
                    } else {
                        Address::Line(k)
                    };
                    ops.push((address, line_text(k), LineAction::Replace(exact(new))));
                } else {
                    ops.push(range_op(&odin_lines, &odin_after, &chosen));
                }
            }
            None => {
                for &k in hits.iter().rev() {
                    odin_after.remove(k - 1);
                }
                if hits.len() == 1 {
                    ops.push((
                        Address::Containing(pattern.to_string()),
                        line_text(hits[0]),
                        LineAction::Delete,
                    ));
                } else {
                    ops.push(range_op(&odin_lines, &odin_after, &hits));
                }
            }
        }
    } else if let Some(v) = s.get(&["insert_after"]) {
        let k: usize = v.trim().parse().map_err(|_| {
            format!("'insert_after' {v:?} is not a number (odincode fails this step)")
        })?;
        if k > n {
            return Err(format!(
                "'insert_after' {k} is outside {path} ({n} lines); odincode fails this step"
            ));
        }
        let content = s.get(&["content"]).unwrap_or("").to_string();
        odin_after.insert(k, content.clone());
        let content = exact(&content);
        if k == 0 {
            if n == 0 {
                return Err(format!(
                    "{path} is empty: there is no line to insert before (use file_write)"
                ));
            }
            // Before the first line: replace line 1 with the new text and line 1 again.
            ops.push((
                Address::Line(1),
                line_text(1),
                LineAction::Replace(format!("{content}\n{}", line_text(1))),
            ));
        } else {
            ops.push((
                Address::Line(k),
                line_text(k),
                LineAction::InsertAfter(content),
            ));
        }
    } else if let Some(v) = s.get(&["delete_line"]) {
        let k: usize = v.trim().parse().map_err(|_| {
            format!("'delete_line' {v:?} is not a number (odincode fails this step)")
        })?;
        if k == 0 || k > n {
            return Err(format!(
                "'delete_line' {k} is outside {path} ({n} lines); odincode fails this step"
            ));
        }
        odin_after.remove(k - 1);
        ops.push((Address::Line(k), line_text(k), LineAction::Delete));
    } else {
        return Err(
            "give one of line_number, pattern, insert_after, delete_line (odincode fails this step)"
                .to_string(),
        );
    }
    // Apply ours in order, and compare with what odincode would write.
    let (ours, steps) = edit_steps(ops, &before, &path)?;
    let theirs = odin_edit_result(&odin_after);
    let mut c = Converted {
        steps,
        lost: Vec::new(),
        notes: vec![format!(
            "bound to the current text of the line(s) in {path} (expect): a later change to them refuses the edit"
        )],
        needs_commands: Vec::new(),
    };
    if ours != theirs {
        c.lost.push(format!(
            "{path}: odincode rewrites the whole file with \\n line endings and a final newline; \
             acode-run keeps the file's own line endings, so the result differs outside the edited lines"
        ));
    }
    ctx.sim.set(&path, Some(ours));
    Ok(c)
}

/// The `file_edit` steps for `ops`, each applied in turn to `before` (as the run will), and the
/// text they leave; an edit that would fail is an error here, not at run time.
fn edit_steps(
    ops: Vec<(Address, String, LineAction)>,
    before: &str,
    path: &str,
) -> Result<(String, Vec<(String, Value)>), String> {
    let mut ours = before.to_string();
    let mut steps = Vec::new();
    for (address, expect, action) in ops {
        let op = EditOp::Lines {
            address: address.clone(),
            expect: expect.clone(),
            action: action.clone(),
        };
        ours = apply_edit(&op, &ours, path)
            .map_err(|e| format!("the converted edit would fail: {e}"))?
            .after;
        let mut a = json!({"path": path, "expect": expect});
        match address {
            Address::Line(k) => a["line"] = json!(k),
            Address::Range(x, y) => a["lines"] = json!([x, y]),
            Address::Containing(t) => a["line_containing"] = json!(t),
        }
        match action {
            LineAction::Replace(t) => a["replace"] = json!(t),
            LineAction::InsertAfter(t) => a["insert_after"] = json!(t),
            LineAction::Delete => a["delete"] = json!(true),
        }
        steps.push(("file_edit".to_string(), a));
    }
    Ok((ours, steps))
}

/// Converts one step (without its precondition).
fn convert_tool(s: &OdinStep, ctx: &mut Ctx) -> Result<Converted, String> {
    Ok(match s.tool.as_str() {
        "file_read" => Converted::one("file_read", json!({"path": s.require(&["path"])?})),
        "file_write" | "file_create" => {
            let path = s.require(&["path"])?.to_string();
            let contents = s.get(&["contents"]).unwrap_or("").to_string();
            ctx.sim.set(&path, Some(contents.clone()));
            Converted::one(&s.tool, json!({"path": path, "contents": contents}))
        }
        "file_search" => Converted::one(
            "file_search",
            json!({"pattern": s.require(&["pattern"])?, "root": s.get(&["root"]).unwrap_or(".")}),
        ),
        "file_glob" => Converted::one(
            "file_glob",
            json!({"pattern": s.require(&["pattern"])?, "root": s.get(&["root", "path"]).unwrap_or(".")}),
        ),
        "file_edit" => convert_file_edit(s, ctx)?,
        "lsp_check" => Converted::one("lsp_check", json!({"path": s.require(&["path"])?})).lost(
            "acode-run's lsp_check fails the step when cargo reports an error; odincode's reports \
             the diagnostics and succeeds",
        ),
        "memory_query" => convert_memory_query(s),
        "execution_summary" => convert_execution_summary(s),
        "git_status" | "git_diff" | "git_log" => convert_git(s),
        "wc" => convert_wc(s)?,
        "display_text" => {
            let text = s.get(&["text"]).unwrap_or("");
            let c = Converted::one(
                "run_command",
                command(vec!["echo".into(), text.into()], None),
            );
            if text.starts_with('-') {
                c.lost("the text starts with '-', which echo may read as an option")
            } else {
                c
            }
        }
        "bash_exec" => convert_bash_exec(s)?,
        "splice_patch" => {
            let file = s.require(&["file", "file_path"])?;
            let symbol = s.require(&["symbol", "name"])?;
            let with = s.require(&["with"])?;
            let mut argv: Vec<String> = ["splice", "patch", "--file", file, "--symbol", symbol]
                .map(String::from)
                .to_vec();
            argv.extend(["--with".to_string(), with.to_string()]);
            if let Some(k) = s.get(&["kind"]) {
                argv.extend(["--kind".to_string(), k.to_string()]);
            }
            let mut c = Converted::one("run_command", command(argv, None));
            c.needs_commands.push("splice");
            c
        }
        "splice_plan" => {
            let file = s.require(&["plan_file", "file"])?;
            let argv = ["splice", "plan", "--file", file]
                .map(String::from)
                .to_vec();
            let mut c = Converted::one("run_command", command(argv, None));
            c.needs_commands.push("splice");
            c
        }
        "symbols_in_file" | "references_to_symbol_name" | "references_from_file_to_symbol_name" => {
            return Err(
                "a code-graph query (it reads Magellan's codegraph.db); acode-run has no code-graph \
                 tool yet, and a text search for the name (file_search) would answer a different \
                 question"
                    .to_string(),
            );
        }
        other if WHITELIST.contains(&other) => {
            return Err(format!("{other} has no conversion"));
        }
        other => {
            return Err(format!(
                "{other:?} is not in odincode's tool whitelist (odincode rejects this plan)"
            ));
        }
    })
}

/// What a converted command step loses: odincode parses some commands' output into JSON.
const RAW_JSON: &str = "output is the command's raw text, not odincode's parsed JSON";

/// `memory_query` as `history`: its filters where history has them, the rest named as lost.
fn convert_memory_query(s: &OdinStep) -> Converted {
    let mut a = Map::new();
    let mut lost = Vec::new();
    if let Some(t) = s.get(&["tool"]) {
        a.insert("tool".into(), json!(t));
    }
    if flag(s, "success_only", false) {
        a.insert("status".into(), json!("ok"));
    }
    // odincode ignores a value it cannot parse (`.ok()`), so do we.
    if let Some(l) = s.get(&["limit"]).and_then(|v| v.trim().parse::<u64>().ok()) {
        if l == 0 {
            lost.push("limit 0 (odincode returns nothing) becomes 1".to_string());
        }
        a.insert("limit".into(), json!(l.clamp(1, 100)));
        if l > 100 {
            lost.push(format!("limit {l} is capped at 100"));
        }
    }
    if let Some(since) = s.get(&["since"]).and_then(|v| v.trim().parse::<i64>().ok()) {
        a.insert("since".into(), json!(since.max(0).to_string()));
    }
    for gone in ["session_id", "until", "include_output"] {
        if let Some(v) = s.get(&[gone]) {
            lost.push(format!("'{gone}' {v:?} has no equivalent in history"));
        }
    }
    let mut c = Converted::one("history", Value::Object(a));
    c.lost = lost;
    c
}

/// `execution_summary` as `history`'s newest 100 executions (no aggregate counts).
fn convert_execution_summary(s: &OdinStep) -> Converted {
    let mut a = Map::new();
    if let Some(t) = s.get(&["tool"]) {
        a.insert("tool".into(), json!(t));
    }
    if let Some(since) = s.get(&["since"]).and_then(|v| v.trim().parse::<i64>().ok()) {
        a.insert("since".into(), json!(since.max(0).to_string()));
    }
    a.insert("limit".into(), json!(100));
    let mut c = Converted::one("history", Value::Object(a)).lost(
        "aggregate counts (total, successes, failures, rate) are not computed: history \
         lists the newest 100 executions",
    );
    for gone in ["session_id", "until"] {
        if let Some(v) = s.get(&[gone]) {
            c.lost
                .push(format!("'{gone}' {v:?} has no equivalent in history"));
        }
    }
    c
}

/// The git tools as `git` commands (odincode parses their output into JSON; here it stays text).
fn convert_git(s: &OdinStep) -> Converted {
    match s.tool.as_str() {
        "git_status" => Converted::one(
            "run_command",
            command(
                vec!["git".into(), "status".into(), "--porcelain".into()],
                s.get(&["repo_root"]),
            ),
        )
        .lost(RAW_JSON),
        "git_diff" => match s.get(&["path"]) {
            // odincode returns this diff as text too.
            Some(p) => Converted::one(
                "run_command",
                command(
                    vec!["git".into(), "diff".into(), "--".into(), p.into()],
                    s.get(&["repo_root"]),
                ),
            ),
            None => Converted::one(
                "run_command",
                command(
                    vec!["git".into(), "diff".into(), "--numstat".into()],
                    s.get(&["repo_root"]),
                ),
            )
            .lost(RAW_JSON),
        },
        _ => {
            let limit = s
                .get(&["limit"])
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(20);
            Converted::one(
                "run_command",
                command(
                    vec![
                        "git".into(),
                        "log".into(),
                        "--pretty=format:%H|%an|%ai|%s".into(),
                        format!("-n{limit}"),
                    ],
                    s.get(&["repo_root"]),
                ),
            )
            .lost(RAW_JSON)
            .lost("fails in a repository without commits, where odincode returns an empty list")
        }
    }
}

/// `wc` as the `wc` program with the same counts; a path that wc would read as an option is refused.
fn convert_wc(s: &OdinStep) -> Result<Converted, String> {
    let paths_str = s.require(&["paths"])?;
    let paths: Vec<String> = serde_json::from_str(paths_str)
        .unwrap_or_else(|_| paths_str.split(',').map(|p| p.trim().to_string()).collect());
    let mut argv = vec!["wc".to_string()];
    for (name, default, opt) in [
        ("lines", true, "-l"),
        ("words", true, "-w"),
        ("chars", true, "-m"),
        ("bytes", false, "-c"),
    ] {
        if flag(s, name, default) {
            argv.push(opt.into());
        }
    }
    if paths.iter().any(|p| p.starts_with('-')) {
        return Err("a path starting with '-' would be read by wc as an option".into());
    }
    argv.extend(paths);
    Ok(Converted::one("run_command", command(argv, None)).lost(RAW_JSON))
}

/// `bash_exec` as `run_command` without a shell: shell syntax is refused, the timeout rounded up to
/// whole seconds.
fn convert_bash_exec(s: &OdinStep) -> Result<Converted, String> {
    let cmd = s.require(&["command"])?;
    if let Some(op) = shell_syntax(cmd) {
        return Err(format!(
            "the command uses shell syntax ({op}); acode-run runs programs without a shell, \
             so it cannot run it as written. Split it into steps (a pipe's output can be \
             searched with file_search, a redirection written with file_write)"
        ));
    }
    let argv = shlex::split(cmd)
        .filter(|a| !a.is_empty())
        .ok_or_else(|| format!("cannot split the command {cmd:?} (unbalanced quotes?)"))?;
    let mut a = command(argv, s.get(&["working_dir"]));
    // odincode's default is 30 s; acode-run's policy default is longer, so say it.
    let ms = match s.get(&["timeout_ms"]) {
        Some(v) => v.trim().parse::<u64>().unwrap_or(30_000),
        None => 30_000,
    };
    let secs = ms.div_ceil(1000).max(1);
    a["timeout_s"] = json!(secs);
    let c = Converted::one("run_command", a);
    Ok(if ms % 1000 != 0 {
        c.lost(format!("timeout {ms} ms is rounded up to {secs} s"))
    } else {
        c
    })
}

/// odincode's precondition (see its `execution_engine/preconditions.rs`) as an acode-run check:
/// `Ok(None)` for none, `Err` for a step odincode would always fail, and a loss note for text
/// with no check (odincode passes those unchecked).
fn convert_precondition(s: &OdinStep) -> Result<ConvertedPrecondition, String> {
    let p = s.precondition.trim();
    let path_of = |names: &[&str], what: &str| -> Result<String, String> {
        s.get(names).map(String::from).ok_or_else(|| {
            format!("precondition {what:?} needs the step's '{}' argument; odincode fails this step without it", names[0])
        })
    };
    let file = |p: String| Some(json!({ "file_exists": p }));
    Ok(match p {
        "" | "none" => (None, None, None),
        "Cargo workspace exists" | "Cargo project exists" => {
            (file(join(&path_of(&["path"], p)?, "Cargo.toml")), None, None)
        }
        "codegraph.db exists" => (
            file(join(&path_of(&["db_root"], p)?, "codegraph.db")),
            None,
            None,
        ),
        "root exists" => (file(path_of(&["root", "path"], p)?), None, None),
        "command is safe" => (
            None,
            None,
            Some("precondition \"command is safe\" is the command policy here, checked at validation and before the command starts".into()),
        ),
        "symbol exists" => (
            None,
            None,
            Some("precondition \"symbol exists\" dropped: odincode does not check it either".into()),
        ),
        "git repository exists" => (
            file(join(s.get(&["repo_root"]).unwrap_or("."), ".git")),
            None,
            Some("precondition \"git repository exists\" is checked here (a .git entry); odincode passes it unchecked".into()),
        ),
        p if p.starts_with("file exists") => (file(path_of(&["path"], "file exists")?), None, None),
        other => (
            None,
            Some(format!(
                "precondition {other:?} has no check (odincode passes unknown preconditions unchecked; it is dropped)"
            )),
            None,
        ),
    })
}

/// Converts an odincode plan; reads `workspace` (never writes) to bind line edits, and validates
/// the result with `policy` plus what the plan's commands need.
pub fn import(
    bytes: &[u8],
    workspace: &Workspace,
    policy: &Policy,
) -> Result<Imported, ImportError> {
    let (plan_id, odin_intent, evidence, odin_steps) = parse_odin(bytes)?;
    let intent = match &odin_intent {
        None => None,
        Some(i) => Some(Intent::from_name(&i.to_ascii_lowercase()).ok_or_else(|| {
            bad(
                "plan.intent",
                format!("unknown intent {i:?} (odincode knows READ, MUTATE, QUERY, EXPLAIN)"),
            )
        })?),
    };
    let mut ctx = Ctx {
        sim: Simulation::new(workspace, policy),
    };
    let mut reports: Vec<StepReport> = Vec::new();
    // Per odincode step: the acode-run steps (id, step JSON) it became.
    let mut produced: Vec<Vec<(String, Value)>> = Vec::new();
    let mut needs: BTreeSet<&'static str> = BTreeSet::new();
    let mut used_ids: BTreeSet<String> = BTreeSet::new();
    for s in &odin_steps {
        let mut report = StepReport {
            step_id: s.step_id.clone(),
            tool: s.tool.clone(),
            status: Status::Lossless,
            converted_to: Vec::new(),
            lost: Vec::new(),
            reason: None,
            notes: Vec::new(),
        };
        // The tool first: a tool that cannot be converted is the more useful reason.
        let converted = convert_tool(s, &mut ctx).and_then(|c| Ok((convert_precondition(s)?, c)));
        match converted {
            Err(why) => {
                report.status = Status::Refused;
                report.reason = Some(why);
                produced.push(Vec::new());
            }
            Ok(((pre, pre_lost, pre_note), c)) => {
                report.lost = c.lost;
                report.lost.extend(pre_lost);
                report.notes = c.notes;
                report.notes.extend(pre_note);
                needs.extend(c.needs_commands.iter().copied());
                let many = c.steps.len() > 1;
                let mut out = Vec::new();
                for (k, (tool, arguments)) in c.steps.into_iter().enumerate() {
                    let mut id = if many && k > 0 {
                        format!("{}-{}", s.step_id, k + 1)
                    } else {
                        s.step_id.clone()
                    };
                    while used_ids.contains(&id) {
                        id.push_str("-x");
                    }
                    used_ids.insert(id.clone());
                    // odincode substitutes nothing: a `${` in its text is literal here too.
                    let mut step =
                        json!({"step_id": id, "tool": tool, "arguments": literal(&arguments)});
                    if let Some(p) = &pre {
                        step["precondition"] = literal(p);
                    }
                    if s.requires_confirmation {
                        step["requires_confirmation"] = json!(true);
                    }
                    report.converted_to.push(format!("{id}: {tool}"));
                    out.push((id, step));
                }
                if !report.lost.is_empty() {
                    report.status = Status::Lossy;
                }
                produced.push(out);
            }
        }
        reports.push(report);
    }
    let policy_value = (!needs.is_empty()).then(|| json!({ "allow_commands": needs }));
    let mut effective = policy.clone();
    for n in &needs {
        if !effective.command_allowed(n) {
            effective.allow_commands.push((*n).to_string());
        }
    }

    // A reading intent holds only if every converted step reads; odincode does not enforce it.
    let (kept_intent, plan_lost) = kept_intent(intent, odin_intent.as_deref(), &produced);

    // Build, validate, and refuse the steps the validator refuses; then once more.
    let registry = ToolRegistry::builtin();
    let mut plan_refused = None;
    let mut plan = None;
    for round in 0..2 {
        let value = build_plan(&plan_id, kept_intent, &evidence, &reports, &produced);
        if produced.iter().all(Vec::is_empty) {
            plan_refused = Some("no step could be converted".to_string());
            break;
        }
        let text = value.to_string();
        let problems = match crate::plan::parse::parse(text.as_bytes()) {
            Err(p) => p,
            Ok(parsed) => crate::plan::validate::validate(
                &parsed,
                &ValidationContext {
                    registry: &registry,
                    workspace,
                    policy: &effective,
                },
            ),
        };
        if problems.is_empty() {
            plan = Some(value);
            break;
        }
        let (refused_any, plan_level) = refuse_steps(&problems, &mut produced, &mut reports, round);
        if !plan_level.is_empty() || !refused_any {
            plan_refused = Some(format!(
                "the converted plan does not validate: {}",
                plan_level.join("; ")
            ));
            break;
        }
    }
    for r in &mut reports {
        if r.status == Status::Refused {
            r.converted_to.clear();
        }
    }
    Ok(Imported {
        plan,
        policy: policy_value,
        report: Report {
            plan_id,
            odincode_intent: odin_intent,
            intent: kept_intent,
            plan_lost,
            plan_refused,
            steps: reports,
        },
    })
}

/// The intent kept: a reading intent only if every converted step reads (odincode treats intent
/// as a hint and does not enforce it), and the loss note when it is dropped.
fn kept_intent(
    intent: Option<Intent>,
    odin_intent: Option<&str>,
    produced: &[Vec<(String, Value)>],
) -> (Option<Intent>, Vec<String>) {
    let mut plan_lost = Vec::new();
    let mut kept_intent = intent;
    if let Some(i) = intent.filter(|i| i.is_read_only()) {
        let writers: Vec<String> = produced
            .iter()
            .flatten()
            .filter(|(_, st)| {
                !crate::tools::READ_ONLY_TOOLS.contains(&st["tool"].as_str().unwrap_or(""))
            })
            .map(|(id, st)| format!("{id} ({})", st["tool"].as_str().unwrap_or("")))
            .collect();
        if !writers.is_empty() {
            kept_intent = None;
            plan_lost.push(format!(
                "intent {:?} not kept: acode-run holds a plan with intent {:?} to changing nothing \
                 and running no command, and {} would not pass (odincode treats intent as a hint)",
                odin_intent.unwrap_or_default(),
                i.as_str(),
                writers.join(", ")
            ));
        }
    }
    (kept_intent, plan_lost)
}

/// Marks the converted steps the validator's `problems` name as refused (in the first round
/// only), and returns whether any was, with the problems that name no step.
fn refuse_steps(
    problems: &[crate::plan::Problem],
    produced: &mut [Vec<(String, Value)>],
    reports: &mut [StepReport],
    round: usize,
) -> (bool, Vec<String>) {
    // Which acode-run step each `steps[N]` names, in the built order.
    let order: Vec<usize> = produced
        .iter()
        .enumerate()
        .flat_map(|(i, v)| std::iter::repeat_n(i, v.len()))
        .collect();
    let mut refused_any = false;
    let mut plan_level = Vec::new();
    for p in problems {
        let idx = p
            .location
            .strip_prefix("steps[")
            .and_then(|r| r.split(']').next())
            .and_then(|n| n.parse::<usize>().ok())
            .and_then(|n| order.get(n).copied());
        match idx {
            Some(i) if round == 0 => {
                let r = &mut reports[i];
                r.status = Status::Refused;
                let msg = format!(
                    "acode-run refuses the converted step: {}: {}",
                    p.location, p.message
                );
                r.reason = Some(match r.reason.take() {
                    Some(prev) => format!("{prev}; {msg}"),
                    None => msg,
                });
                produced[i].clear();
                refused_any = true;
            }
            _ => plan_level.push(format!("{}: {}", p.location, p.message)),
        }
    }
    (refused_any, plan_level)
}

/// The acode-run plan from the converted steps.
fn build_plan(
    plan_id: &str,
    intent: Option<Intent>,
    evidence: &[String],
    reports: &[StepReport],
    produced: &[Vec<(String, Value)>],
) -> Value {
    let mut description = format!("Imported from the odincode plan {plan_id:?}");
    if !evidence.is_empty() {
        description.push_str(&format!(" (evidence referenced: {})", evidence.join(", ")));
    }
    let refused: Vec<&str> = reports
        .iter()
        .filter(|r| r.status == Status::Refused)
        .map(|r| r.step_id.as_str())
        .collect();
    if !refused.is_empty() {
        description.push_str(&format!(
            ". INCOMPLETE: odincode steps left out (see the import report): {}",
            refused.join(", ")
        ));
    }
    let mut plan = json!({
        "plan_id": plan_id,
        "description": description,
        // odincode never retries a step.
        "defaults": {"retries": 0},
        "steps": produced.iter().flatten().map(|(_, s)| s.clone()).collect::<Vec<_>>(),
    });
    if let Some(i) = intent {
        plan["intent"] = json!(i.as_str());
    }
    plan
}

/// The report for a person: one line per odincode step.
pub fn render(report: &Report) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "import of odincode plan {}: {}",
        report.plan_id,
        match report.status() {
            Status::Lossless => "lossless",
            Status::Lossy => "lossy",
            Status::Refused if report.plan_refused.is_some() => "refused",
            Status::Refused => "refused in part",
        }
    );
    for l in &report.plan_lost {
        let _ = writeln!(out, "  plan: lossy: {l}");
    }
    if let Some(r) = &report.plan_refused {
        let _ = writeln!(out, "  plan: refused: {r}");
    }
    for s in &report.steps {
        let to = if s.converted_to.is_empty() {
            String::new()
        } else {
            format!(" → {}", s.converted_to.join(", "))
        };
        match s.status {
            Status::Lossless => {
                let _ = writeln!(out, "  {} {}{to}: lossless", s.step_id, s.tool);
            }
            Status::Lossy => {
                let _ = writeln!(
                    out,
                    "  {} {}{to}: lossy: {}",
                    s.step_id,
                    s.tool,
                    s.lost.join("; ")
                );
            }
            Status::Refused => {
                let _ = writeln!(
                    out,
                    "  {} {}: refused: {}",
                    s.step_id,
                    s.tool,
                    s.reason.as_deref().unwrap_or("")
                );
            }
        }
        for n in &s.notes {
            let _ = writeln!(out, "      note: {n}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_syntax_is_named_outside_quotes_only() {
        for (cmd, op) in [
            ("cat a | grep b", "| (pipe)"),
            ("make && make test", "&&"),
            ("echo hi > out.txt", "> (redirection)"),
            ("ls *.rs", "glob pattern (* ? [)"),
            ("echo $HOME", "$ (expansion)"),
            ("echo \"$HOME\"", "$ (expansion)"),
            ("FOO=1 cargo test", "VAR=value (variable assignment)"),
            ("cd src", "a shell builtin or keyword"),
            ("a; b", ";"),
            ("echo `id`", "` (command substitution)"),
            ("~/bin/x", "~ (home directory)"),
        ] {
            assert_eq!(shell_syntax(cmd), Some(op), "{cmd}");
        }
        for cmd in [
            "cargo test --quiet",
            "grep -n 'a|b' src/lib.rs",
            "git log --pretty=format:%H -n5",
            "echo \"a; b\"",
            "echo a\\|b",
        ] {
            assert_eq!(shell_syntax(cmd), None, "{cmd}");
        }
    }

    #[test]
    fn arguments_are_strings_as_odincode_reads_them() {
        let (_, intent, _, steps) = parse_odin(
            br#"{"plan_id":"p","intent":"Read","steps":[{"step_id":"s","tool":"git_log",
            "arguments":{"limit":5,"x":true,"n":null}}],"evidence_referenced":[]}"#,
        )
        .unwrap();
        assert_eq!(intent.as_deref(), Some("Read"));
        assert_eq!(steps[0].args["limit"], "5");
        assert_eq!(steps[0].args["x"], "true");
        assert_eq!(steps[0].args["n"], "null");
        assert_eq!(steps[0].precondition, "none");
        let e = parse_odin(br#"{"plan_id":"p","steps":[{"step_id":"s","tool":"t"}]}"#).unwrap_err();
        assert_eq!(e.location, "steps[0].arguments");
    }

    /// Found by the `odincode` fuzz target (docs/fuzzing.md): a repeated key was imported, the
    /// last one winning, where the reviewer of the odincode plan may read the first.
    #[test]
    fn a_duplicate_key_is_refused_with_its_position() {
        let e = parse_odin(
            br#"{"plan_id":"p","steps":[{"step_id":"s","tool":"git_log","arguments":{},
            "precondition":"none","precondition":"file exists"}]}"#,
        )
        .unwrap_err();
        assert_eq!(e.location, "line 2, column 35");
        assert!(e.message.contains("duplicate key \"precondition\""), "{e}");
    }
}
