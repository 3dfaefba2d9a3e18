//! One source of truth for plans, and docs that run (issue 13, items 8 and 9).
//!
//! - The published plan schema (`docs/plan.schema.json`) carries every tool's argument schema,
//!   generated from the same argument types the tools parse with; the committed file must equal
//!   what the registry says (regenerate with `UPDATE_PLAN_SCHEMA=1 cargo test published_plan`).
//! - Every plan in the repository — `plans/`, `fixtures/`, and each JSON block of README.md and
//!   docs/*.md that is a plan — plus a set of deliberately malformed plans is checked by an
//!   independent JSON Schema validator (`boon`) against that schema and by the real `acode-run
//!   validate`; the verdicts must agree, except where `validate` finds a problem a schema cannot
//!   express (named per plan).
//! - Every `acode-run` command in the docs' `sh`/`yaml`/plain code blocks parses with the real flag
//!   parser, and the README's tour (plan, validate, preview, approve, run, runs, show, artifact) is
//!   executed with the real binary against a fresh workspace.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::harness::*;

/// A fenced code block of a markdown file.
pub(crate) struct Block {
    /// `README.md:22`: file and the line of the opening fence.
    pub(crate) at: String,
    /// The info string (`sh`, `json`, ...; empty for a plain fence).
    pub(crate) lang: String,
    pub(crate) text: String,
}

/// README.md and every docs/*.md, sorted.
fn doc_files() -> Vec<PathBuf> {
    let mut files = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// The info string of a code fence line (CommonMark: three or more backticks, and an info string
/// without a backtick, so inline ```` ```json ```` in a list item is not one); `None` if the line is
/// not a fence.
fn fence_info(line: &str) -> Option<&str> {
    let trimmed = line.trim_start();
    let ticks = trimmed.len() - trimmed.trim_start_matches('`').len();
    let info = trimmed[ticks..].trim();
    (ticks >= 3 && !info.contains('`')).then_some(info)
}

fn blocks(file: &Path) -> Vec<Block> {
    let rel = file.strip_prefix(repo()).unwrap().display().to_string();
    let text = std::fs::read_to_string(file).unwrap();
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in text.lines().enumerate() {
        let info = fence_info(line);
        if open.is_some() && info == Some("") {
            out.extend(open.take());
        } else if let (Some(info), None) = (info, &open) {
            open = Some(Block {
                at: format!("{rel}:{}", i + 1),
                lang: info.to_string(),
                text: String::new(),
            });
        } else if let Some(b) = open.as_mut() {
            b.text.push_str(line);
            b.text.push('\n');
        }
    }
    assert!(open.is_none(), "{rel}: unclosed code block");
    out
}

pub(crate) fn all_blocks() -> Vec<Block> {
    doc_files().iter().flat_map(|f| blocks(f)).collect()
}

fn is_plan(v: &Value) -> bool {
    v.get("plan_id").is_some() && v.get("steps").is_some()
}

// ---------------------------------------------------------------------------------------------
// The published schema, generated from the tools' argument types.

/// The plan schema as it must be committed: the hand-written plan structure with the tool names
/// and each tool's argument schema taken from the registry (`acode-run tools`).
fn generated_schema() -> Value {
    let mut schema: Value = serde_json::from_str(acode_run::plan::SCHEMA).expect("schema is JSON");
    let tools = acode_run::tools::ToolRegistry::builtin().describe();
    let tools = tools.as_array().unwrap();
    let names: Vec<Value> = tools.iter().map(|t| t["name"].clone()).collect();
    let rules: Vec<Value> = tools
        .iter()
        .map(|t| {
            let params = &t["parameters"];
            let needs_arguments = params["required"].as_array().is_some_and(|r| !r.is_empty());
            let mut then = json!({ "properties": { "arguments": params } });
            if needs_arguments {
                then["required"] = json!(["arguments"]);
            }
            json!({
                "if": { "required": ["tool"], "properties": { "tool": { "const": t["name"] } } },
                "then": then
            })
        })
        .collect();
    let defs = schema["$defs"].as_object_mut().unwrap();
    defs.insert(
        "tool".into(),
        json!({
            "description": "A tool name from `acode-run tools` (generated from the tool registry), or mcp__SERVER__TOOL: a tool of an MCP server the policy declares (docs/mcp.md; its arguments are the server's input schema, pinned by the approval).",
            "anyOf": [
                {"enum": names},
                {"type": "string", "pattern": MCP_TOOL_PATTERN}
            ]
        }),
    );
    defs.insert(
        "tool_arguments".into(),
        json!({
            "description": "Each tool's arguments, generated from the argument types the tool parses with (`acode-run tools`). Strings may contain ${name} placeholders.",
            "allOf": rules
        }),
    );
    schema
}

/// `mcp__SERVER__TOOL` with both parts as the policy allows them (letters, digits, `-`, single
/// `_` inside).
const MCP_TOOL_PATTERN: &str =
    "^mcp__[A-Za-z0-9-]+(_[A-Za-z0-9-]+)*__[A-Za-z0-9-]+(_[A-Za-z0-9-]+)*$";

#[test]
fn published_plan_schema_carries_the_tools_argument_schemas() {
    let committed: Value = serde_json::from_str(acode_run::plan::SCHEMA).unwrap();
    let generated = generated_schema();
    if committed != generated {
        if std::env::var_os("UPDATE_PLAN_SCHEMA").is_some() {
            let mut text = serde_json::to_string_pretty(&generated).unwrap();
            text.push('\n');
            std::fs::write(repo().join("docs/plan.schema.json"), text).unwrap();
        } else {
            panic!(
                "docs/plan.schema.json differs from the tool registry's argument schemas; \
                 regenerate it with `UPDATE_PLAN_SCHEMA=1 cargo test published_plan` and commit it"
            );
        }
    }
    // The step refers to the generated parts, so they are not dead text.
    assert_eq!(
        committed["$defs"]["step"]["properties"]["tool"]["$ref"],
        "#/$defs/tool"
    );
    assert_eq!(
        committed["$defs"]["step"]["allOf"][0]["$ref"],
        "#/$defs/tool_arguments"
    );
}

// ---------------------------------------------------------------------------------------------
// Schema and `validate` agree.

pub(crate) struct SchemaValidator {
    schemas: boon::Schemas,
    index: boon::SchemaIndex,
}

impl SchemaValidator {
    pub(crate) fn new() -> SchemaValidator {
        let schema: Value = serde_json::from_str(acode_run::plan::SCHEMA).unwrap();
        let url = "https://acode-run.dev/schemas/plan.schema.json";
        let mut schemas = boon::Schemas::new();
        let mut compiler = boon::Compiler::new();
        compiler.add_resource(url, schema).unwrap();
        let index = compiler
            .compile(url, &mut schemas)
            .unwrap_or_else(|e| panic!("the plan schema does not compile: {e:#}"));
        SchemaValidator { schemas, index }
    }

    /// `None` when the plan matches the schema, else the validator's error.
    pub(crate) fn errors(&self, plan: &Value) -> Option<String> {
        self.schemas
            .validate(plan, self.index)
            .err()
            .map(|e| format!("{e:#}"))
    }
}

/// Problems `validate` finds that a JSON Schema cannot express: they may make `validate` reject a
/// plan the schema accepts. Anything else is a shape problem, on which both must agree.
fn beyond_schema(problem: &Value) -> Option<&'static str> {
    let message = problem["message"].as_str().unwrap_or_default();
    let location = problem["location"].as_str().unwrap_or_default();
    if problem["kind"] == "sandbox" {
        return Some("sandbox (a path outside the workspace or a command the policy forbids)");
    }
    if location.ends_with(".arguments.skill") {
        return Some("skill not found or unusable in the workspace");
    }
    // Each needle is a whole phrase of `validate`'s message, so a field named `cycles` is not a
    // cycle.
    let kinds = [
        ("forms a cycle", "dependency cycle"),
        ("cannot depend on itself", "dependency cycle"),
        ("depends on unknown step", "dependency on an unknown step"),
        ("unknown variable '${", "undeclared variable"),
        ("duplicate step_id", "duplicate step id"),
        (
            "duplicate key",
            "duplicate JSON key (a parsed document keeps one)",
        ),
        ("invalid pattern", "invalid regular expression"),
        (
            "is not a declared variable",
            "secret naming an undeclared variable",
        ),
        ("must be longer than zero", "a zero wall_clock budget"),
        ("at most 30 days", "a wall_clock budget over 30 days"),
        (
            "has no Cargo.toml",
            "lsp_check on a directory of the workspace that holds no crate",
        ),
    ];
    kinds
        .iter()
        .find(|(needle, _)| message.contains(needle))
        .map(|(_, why)| *why)
}

/// `validate --json`'s verdict: `Ok(())` or the problems it reported.
fn validate_verdict(t: &TestDir, plan: &Path) -> Result<(), Vec<Value>> {
    let out = t.run(&["validate", plan.to_str().unwrap(), "--json"]);
    let v: Value = serde_json::from_str(&stdout(&out))
        .unwrap_or_else(|e| panic!("validate --json printed no JSON ({e}): {}", stderr(&out)));
    match code(&out) {
        0 => Ok(()),
        2 | 32 => Err(v["problems"].as_array().unwrap().clone()),
        other => panic!("validate exited {other}: {}", stderr(&out)),
    }
}

/// Checks one plan text in workspace `t`; returns a line describing any disagreement.
fn compare(
    name: &str,
    text: &str,
    t: &TestDir,
    schema: &SchemaValidator,
    expect_invalid: bool,
) -> Option<String> {
    let value: Value = serde_json::from_str(text)
        .unwrap_or_else(|e| panic!("{name}: not JSON (documented plans must be): {e}"));
    let path = t.plan_text(&format!("{}.json", uuid::Uuid::new_v4()), text);
    let by_schema = schema.errors(&value);
    let by_validate = validate_verdict(t, &path);
    if expect_invalid && (by_schema.is_none() || by_validate.is_ok()) {
        return Some(format!(
            "{name}: malformed plan accepted (schema: {:?}, validate: {:?})",
            by_schema, by_validate
        ));
    }
    match (&by_schema, &by_validate) {
        (None, Ok(())) => None,
        // Both reject, and for a shape problem on both sides: a plan the schema rejects while
        // validate only objects to, say, its cycle would hide a disagreement.
        (Some(e), Err(problems)) => problems.iter().all(|p| beyond_schema(p).is_some()).then(
            || {
                format!(
                    "{name}: the schema rejects ({e}) where validate finds only problems beyond \
                     a schema: {problems:?}"
                )
            },
        ),
        (Some(e), Ok(())) => Some(format!(
            "{name}: the schema rejects what validate accepts: {e}"
        )),
        (None, Err(problems)) => {
            let shape: Vec<&Value> = problems
                .iter()
                .filter(|p| beyond_schema(p).is_none())
                .collect();
            if shape.is_empty() {
                let kinds: Vec<&str> = problems.iter().filter_map(beyond_schema).collect();
                eprintln!(
                    "{name}: schema accepts, validate rejects for {kinds:?} (beyond a schema)"
                );
                None
            } else {
                Some(format!(
                    "{name}: validate finds shape problems the schema accepts: {shape:?}"
                ))
            }
        }
    }
}

pub(crate) fn repo_plan_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in ["plans", "fixtures"] {
        for e in walkdir::WalkDir::new(repo().join(dir)) {
            let e = e.unwrap();
            if e.file_type().is_file() && e.path().extension().is_some_and(|x| x == "json") {
                let text = std::fs::read_to_string(e.path()).unwrap();
                if serde_json::from_str::<Value>(&text).is_ok_and(|v| is_plan(&v)) {
                    files.push(e.path().to_path_buf());
                }
            }
        }
    }
    files.sort();
    files
}

#[test]
fn every_plan_in_the_repository_gets_the_same_verdict_from_the_schema_and_validate() {
    let schema = SchemaValidator::new();
    let mut disagreements = Vec::new();
    let mut checked = 0;
    for file in repo_plan_files() {
        // `plans/NAME.json` works on a copy of `fixtures/NAME` (its skills live there).
        let t = TestDir::new();
        let stem = file.file_stem().unwrap().to_str().unwrap();
        let fixture = repo().join("fixtures").join(stem);
        if file.starts_with(repo().join("plans")) && fixture.is_dir() {
            copy_tree(&fixture, &t.ws);
        }
        let name = file.strip_prefix(repo()).unwrap().display().to_string();
        let text = std::fs::read_to_string(&file).unwrap();
        disagreements.extend(compare(&name, &text, &t, &schema, false));
        checked += 1;
    }
    for b in all_blocks().iter().filter(|b| b.lang == "json") {
        let Ok(v) = serde_json::from_str::<Value>(&b.text) else {
            continue; // request/response shapes with `…` placeholders, not plans
        };
        if is_plan(&v) {
            let t = TestDir::new();
            disagreements.extend(compare(&b.at, &b.text, &t, &schema, false));
            checked += 1;
        }
    }
    assert!(checked >= 6, "only {checked} plans found");
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n"));
}

#[test]
fn malformed_plans_are_rejected_by_both() {
    let schema = SchemaValidator::new();
    let ok_step = json!({"step_id": "a", "tool": "file_read", "arguments": {"path": "x"}});
    let cases: Vec<(&str, Value)> = vec![
        (
            "unknown top-level field",
            json!({"plan_id": "p", "stepz": [], "steps": [ok_step]}),
        ),
        (
            "unknown step field (typo)",
            json!({"plan_id": "p", "steps": [
                {"step_id": "a", "tool": "file_read", "arguments": {"path": "x"}, "depend_on": []}]}),
        ),
        (
            "wrong type: plan_id a number",
            json!({"plan_id": 7, "steps": [ok_step]}),
        ),
        (
            "wrong type: retries a string",
            json!({"plan_id": "p", "steps": [
                {"step_id": "a", "tool": "file_read", "arguments": {"path": "x"}, "retries": "2"}]}),
        ),
        ("missing steps", json!({"plan_id": "p"})),
        ("empty steps", json!({"plan_id": "p", "steps": []})),
        ("missing plan_id", json!({"steps": [ok_step]})),
        (
            "bad on_failure",
            json!({"plan_id": "p", "steps": [
                {"step_id": "a", "tool": "file_read", "arguments": {"path": "x"}, "on_failure": "ignore"}]}),
        ),
        (
            "extra argument for a tool",
            json!({"plan_id": "p", "steps": [
                {"step_id": "a", "tool": "file_read", "arguments": {"path": "x", "colour": "red"}}]}),
        ),
        (
            "missing required argument",
            json!({"plan_id": "p", "steps": [{"step_id": "a", "tool": "file_read", "arguments": {}}]}),
        ),
        (
            "argument of the wrong type",
            json!({"plan_id": "p", "steps": [
                {"step_id": "a", "tool": "file_read", "arguments": {"path": ["x"]}}]}),
        ),
        (
            "unknown tool",
            json!({"plan_id": "p", "steps": [{"step_id": "a", "tool": "file_teleport", "arguments": {}}]}),
        ),
        (
            "unknown precondition",
            json!({"plan_id": "p", "steps": [
                {"step_id": "a", "tool": "file_read", "arguments": {"path": "x"}, "precondition": "sky is blue"}]}),
        ),
        (
            "verify without command",
            json!({"plan_id": "p", "steps": [
                {"step_id": "a", "tool": "file_read", "arguments": {"path": "x"}, "verify": {"max_cycles": 2}}]}),
        ),
        (
            "built-in variable redefined",
            json!({"plan_id": "p", "variables": {"workspace": "/"}, "steps": [ok_step]}),
        ),
        (
            "control character in step_id",
            json!({"plan_id": "p", "steps": [
                {"step_id": "a\u{7}b", "tool": "file_read", "arguments": {"path": "x"}}]}),
        ),
    ];
    let t = TestDir::new();
    let mut failures = Vec::new();
    for (name, plan) in &cases {
        let text = serde_json::to_string_pretty(plan).unwrap();
        failures.extend(compare(name, &text, &t, &schema, true));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn problems_beyond_a_schema_are_named_not_ignored() {
    // Shape-valid plans: the schema accepts them, validate rejects them, and the test must know
    // why — each problem is of a kind a JSON Schema cannot express.
    let schema = SchemaValidator::new();
    let t = TestDir::new();
    let read = |id: &str, path: &str| json!({"step_id": id, "tool": "file_read", "arguments": {"path": path}});
    let cases: Vec<(&str, String)> = vec![
        (
            "dependency cycle",
            json!({"plan_id": "p", "steps": [
                {"step_id": "a", "tool": "file_read", "arguments": {"path": "x"}, "depends_on": ["b"]},
                {"step_id": "b", "tool": "file_read", "arguments": {"path": "x"}, "depends_on": ["a"]}]})
            .to_string(),
        ),
        (
            "dependency on an unknown step",
            json!({"plan_id": "p", "steps": [
                {"step_id": "a", "tool": "file_read", "arguments": {"path": "x"}, "depends_on": ["zz"]}]})
            .to_string(),
        ),
        (
            "undeclared variable",
            json!({"plan_id": "p", "steps": [read("a", "${nope}")]}).to_string(),
        ),
        (
            "duplicate step id",
            json!({"plan_id": "p", "steps": [read("a", "x"), read("a", "y")]}).to_string(),
        ),
        (
            "duplicate JSON key (a parsed document keeps one)",
            r#"{"plan_id": "p", "plan_id": "q", "steps": [{"step_id": "a", "tool": "file_read", "arguments": {"path": "x"}}]}"#
                .to_string(),
        ),
        (
            "invalid regular expression",
            json!({"plan_id": "p", "steps": [{"step_id": "a", "tool": "file_read", "arguments": {"path": "x"},
                "precondition": {"file_contains": {"path": "x", "pattern": "(unclosed"}}}]})
            .to_string(),
        ),
        (
            "secret naming an undeclared variable",
            json!({"plan_id": "p", "secrets": ["token"], "steps": [read("a", "x")]}).to_string(),
        ),
        (
            "sandbox (a path outside the workspace or a command the policy forbids)",
            json!({"plan_id": "p", "steps": [read("a", "../outside/sentinel.txt")]}).to_string(),
        ),
    ];
    for (kind, text) in &cases {
        let value: Value = serde_json::from_str(text).unwrap();
        assert!(
            schema.errors(&value).is_none(),
            "{kind}: the schema rejects it"
        );
        let path = t.plan_text("beyond.json", text);
        let problems = validate_verdict(&t, &path).unwrap_err();
        let kinds: Vec<&str> = problems.iter().filter_map(beyond_schema).collect();
        assert!(kinds.contains(kind), "{kind}: {problems:?}");
        assert_eq!(kinds.len(), problems.len(), "{kind}: {problems:?}");
    }
    // Validation reports every problem in one pass: a cycle beside an unknown dependency.
    let plan = json!({"plan_id": "p", "steps": [
        {"step_id": "a", "tool": "file_read", "arguments": {"path": "x"}, "depends_on": ["b", "zz"]},
        {"step_id": "b", "tool": "file_read", "arguments": {"path": "x"}, "depends_on": ["a"]}]});
    let problems = validate_verdict(&t, &t.plan("both.json", &plan)).unwrap_err();
    let kinds: Vec<&str> = problems.iter().filter_map(beyond_schema).collect();
    assert!(kinds.contains(&"dependency cycle"), "{problems:?}");
    assert!(
        kinds.contains(&"dependency on an unknown step"),
        "{problems:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Every documented command parses.

/// Why a documented command is parsed but not executed by [`the_readme_tour_runs`].
fn parse_only_reason(words: &[String]) -> &'static str {
    let has = |f: &str| {
        words
            .iter()
            .any(|w| w == f || w.starts_with(&format!("{f}=")))
    };
    match words.first().map(String::as_str) {
        Some("draft" | "review") => "needs a real model (LLM endpoint)",
        Some("do") => "needs a real model and a terminal",
        _ if has("--llm-url") || has("--model") || has("--llm-provider") => {
            "agent plan: needs a real model (LLM endpoint)"
        }
        Some("resume") => "needs an interrupted run (covered in run/resume.rs)",
        _ if has("--resume") => "needs an interrupted run (covered in run/resume.rs)",
        _ if words.iter().any(|w| w.contains("plans/change.json")) => {
            "CI recipe for the user's own plan (docs/ci.md)"
        }
        _ => "generic placeholder (plan.json, RUN_ID) outside the README tour",
    }
}

/// The `acode-run` command on a documented shell line, as argv after the program name: YAML
/// `- `/`run: ` prefixes, `NAME=value` assignments, comments and redirections are dropped, and
/// `[optional]` brackets opened (the optional part is parsed too).
fn command_words(line: &str) -> Option<Vec<String>> {
    let mut line = line.trim();
    for prefix in ["- ", "run: "] {
        line = line.strip_prefix(prefix).unwrap_or(line).trim_start();
    }
    let words = shlex::split(line)?;
    let mut words = words.into_iter().skip_while(|w| {
        w.split_once('=').is_some_and(|(k, _)| {
            !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    });
    if words.next()? != "acode-run" {
        return None;
    }
    let mut out = Vec::new();
    for w in words {
        if w.starts_with('#') || w.starts_with('>') || w == "|" || w == "&&" {
            break;
        }
        let w = w.trim_start_matches('[').trim_end_matches(']');
        out.push(w.to_string());
    }
    Some(out)
}

/// Every `acode-run` line of the docs' shell, YAML and plain code blocks: (where, argv).
fn documented_commands() -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for b in all_blocks() {
        if !matches!(b.lang.as_str(), "sh" | "bash" | "yaml" | "") {
            continue;
        }
        for (i, line) in b.text.lines().enumerate() {
            if !line.contains("acode-run") {
                continue;
            }
            let at = format!("{} +{}", b.at, i + 1);
            match command_words(line) {
                Some(words) => out.push((at, words)),
                None => {
                    // Lines that merely mention acode-run (`cargo install`, names) are not commands;
                    // an unbalanced quote on an acode-run line is a broken doc.
                    assert!(
                        shlex::split(line.trim()).is_some(),
                        "{at}: unbalanced quotes: {line}"
                    );
                }
            }
        }
    }
    out
}

#[test]
fn every_documented_command_parses() {
    let commands = documented_commands();
    assert!(
        commands.len() >= 30,
        "only {} commands found",
        commands.len()
    );
    let mut failures = Vec::new();
    for (at, words) in &commands {
        // A synopsis's numeric placeholder (`--limit N`) stands for a number.
        let words: Vec<String> = words
            .iter()
            .map(|w| {
                if w == "N" {
                    "10".to_string()
                } else {
                    w.clone()
                }
            })
            .collect();
        match acode_run::cli::flags::parse(words.clone()) {
            Ok(_) => {
                // The README tour's commands are executed by `the_readme_tour_runs`.
                if !at.starts_with("README.md") {
                    eprintln!("{at}: parsed, not executed: {}", parse_only_reason(&words));
                }
            }
            Err(e) => failures.push(format!("{at}: acode-run {}: {e}", words.join(" "))),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// The README tour runs.

/// The first README block with `lang` after the line containing `marker`.
fn readme_block_after(marker: &str, lang: &str) -> Block {
    let text = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let line = text
        .lines()
        .position(|l| l.contains(marker))
        .unwrap_or_else(|| panic!("README has no line with {marker:?}"));
    blocks(&repo().join("README.md"))
        .into_iter()
        .find(|b| {
            b.lang == lang && b.at.rsplit(':').next().unwrap().parse::<usize>().unwrap() > line + 1
        })
        .unwrap_or_else(|| panic!("no {lang} block after {marker:?}"))
}

fn run_words(t: &TestDir, words: &[String]) -> std::process::Output {
    let args: Vec<&str> = words.iter().map(String::as_str).collect();
    t.run(&args)
}

#[test]
fn the_readme_tour_runs() {
    let t = TestDir::new();
    let fixture = repo().join("fixtures/hello");
    copy_tree(&fixture, &t.ws);
    let original_lib = std::fs::read_to_string(fixture.join("src/lib.rs")).unwrap();
    // The tour's plan, as printed, is `plan.json` in the workspace.
    let plan_block = readme_block_after("## A short tour", "json");
    let plan: Value = serde_json::from_str(&plan_block.text).expect("the tour plan is JSON");
    assert!(is_plan(&plan), "{}: not a plan", plan_block.at);
    std::fs::write(t.ws.join("plan.json"), &plan_block.text).unwrap();

    // "Review it, approve it, run it": every line, in order. Each run starts from the fixture's
    // source, so the edit's precondition holds again.
    let steps = readme_block_after("Review it, approve it, run it", "sh");
    let ws = t.ws.to_str().unwrap().to_string();
    let mut ran = 0;
    for line in steps.text.lines() {
        let Some(mut words) = command_words(line) else {
            continue;
        };
        for w in &mut words {
            if w == "DIR" {
                *w = ws.clone();
            }
        }
        let runs_plan = matches!(words[0].as_str(), "run" | "plan.json");
        if runs_plan {
            std::fs::write(t.ws.join("src/lib.rs"), &original_lib).unwrap();
        }
        let out = run_words(&t, &words);
        assert_eq!(
            code(&out),
            0,
            "{}: acode-run {} failed: {}",
            steps.at,
            words.join(" "),
            stderr(&out)
        );
        if runs_plan {
            assert!(t.read("src/lib.rs").contains("Hello, acode-run"), "{line}");
            ran += 1;
        }
    }
    assert_eq!(ran, 2, "the tour runs the plan twice (run, run --approve)");
    // The tour's last line rejected the plan: that stands against `run --approve`.
    let out = t.run(&["run", "--approve", "plan.json"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));

    // "Every run is in .acode/executions.db": runs, show RUN_ID, artifact EXEC_ID diff.
    let runs: Value = serde_json::from_str(&stdout(&t.run(&["runs", "--json"]))).unwrap();
    let run_id = runs
        .as_array()
        .and_then(|r| r.first())
        .map(|r| r["run_id"].clone());
    let run_id = run_id
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("runs --json: {runs}"));
    let show: Value = serde_json::from_str(&stdout(&t.run(&["show", &run_id, "--json"]))).unwrap();
    let exec_id = show["executions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["step_id"] == "edit")
        .and_then(|e| e["execution_id"].as_str())
        .unwrap_or_else(|| panic!("show --json has no edit execution: {show}"))
        .to_string();
    let db = readme_block_after("Every run is in `.acode/executions.db`", "sh");
    let mut shown = 0;
    for line in db.text.lines() {
        let Some(mut words) = command_words(line) else {
            continue;
        };
        for w in &mut words {
            if w == "RUN_ID" {
                *w = run_id[..8].to_string(); // "ids may be abbreviated"
            } else if w == "EXEC_ID" {
                *w = exec_id.clone();
            }
        }
        let out = run_words(&t, &words);
        assert_eq!(
            code(&out),
            0,
            "{}: acode-run {}: {}",
            db.at,
            words.join(" "),
            stderr(&out)
        );
        if words[0] == "artifact" {
            assert!(
                stdout(&out).contains("Hello, acode-run"),
                "{}",
                stdout(&out)
            );
        }
        shown += 1;
    }
    assert_eq!(shown, 3);
}

/// Edge cases where a hand-written schema and a hand-written parser easily drift: `null` for an
/// optional field, case and blanks, bounds, floats for integers. Each must get the same verdict.
#[test]
fn edge_cases_get_the_same_verdict() {
    let schema = SchemaValidator::new();
    let step = |extra: Value| {
        let mut s = json!({"step_id": "a", "tool": "file_read", "arguments": {"path": "x"}});
        for (k, v) in extra.as_object().unwrap() {
            s[k] = v.clone();
        }
        json!({"plan_id": "p", "steps": [s]})
    };
    let plan = |extra: Value| {
        let mut p = json!({"plan_id": "p", "steps": [
            {"step_id": "a", "tool": "file_read", "arguments": {"path": "x"}}]});
        for (k, v) in extra.as_object().unwrap() {
            p[k] = v.clone();
        }
        p
    };
    let mut cases: Vec<(String, Value)> = Vec::new();
    for field in [
        "description",
        "precondition",
        "depends_on",
        "arguments",
        "verify",
        "timeout_s",
        "retries",
        "on_failure",
        "requires_confirmation",
        "step_id",
        "tool",
    ] {
        cases.push((format!("step {field}: null"), step(json!({ field: null }))));
    }
    for field in [
        "plan_id",
        "description",
        "variables",
        "secrets",
        "defaults",
        "steps",
        "$schema",
    ] {
        cases.push((format!("plan {field}: null"), plan(json!({ field: null }))));
    }
    let more: Vec<(&str, Value)> = vec![
        (
            "precondition upper case",
            step(json!({"precondition": "FILE EXISTS"})),
        ),
        (
            "precondition padded",
            step(json!({"precondition": " none "})),
        ),
        ("precondition empty", step(json!({"precondition": ""}))),
        (
            "precondition two keys",
            step(json!({"precondition": {"file_exists": "a", "file_absent": "b"}})),
        ),
        (
            "precondition wrong type",
            step(json!({"precondition": {"file_exists": 1}})),
        ),
        ("timeout_s 0", step(json!({"timeout_s": 0}))),
        ("timeout_s 86401", step(json!({"timeout_s": 86401}))),
        ("timeout_s 86400", step(json!({"timeout_s": 86400}))),
        ("retries 11", step(json!({"retries": 11}))),
        ("retries 1.0", step(json!({"retries": 1.0}))),
        ("retries -1", step(json!({"retries": -1}))),
        (
            "max_cycles 0",
            step(json!({"verify": {"command": "true", "max_cycles": 0}})),
        ),
        (
            "max_cycles 21",
            step(json!({"verify": {"command": "true", "max_cycles": 21}})),
        ),
        (
            "verify extra field",
            step(json!({"verify": {"command": "true", "cycles": 2}})),
        ),
        (
            "verify commands",
            step(json!({"verify": {"commands": ["true", "false"]}})),
        ),
        (
            "verify command and commands",
            step(json!({"verify": {"command": "true", "commands": ["true"]}})),
        ),
        (
            "verify commands empty",
            step(json!({"verify": {"commands": []}})),
        ),
        (
            "verify commands not strings",
            step(json!({"verify": {"commands": ["true", 1]}})),
        ),
        (
            "verify commands null",
            step(json!({"verify": {"command": "true", "commands": null}})),
        ),
        (
            "verify commands 17",
            step(json!({"verify": {"commands": vec!["true"; 17]}})),
        ),
        (
            "verify commands 16",
            step(json!({"verify": {"commands": vec!["true"; 16]}})),
        ),
        (
            "depends_on a string",
            json!({"plan_id": "p", "steps": [
            {"step_id": "a", "tool": "file_read", "arguments": {"path": "x"}},
            {"step_id": "b", "tool": "file_read", "arguments": {"path": "x"}, "depends_on": "a"}]}),
        ),
        ("depends_on a number", step(json!({"depends_on": [1]}))),
        ("depends_on empty", step(json!({"depends_on": []}))),
        (
            "defaults retries 11",
            plan(json!({"defaults": {"retries": 11}})),
        ),
        (
            "defaults timeout_s 0",
            plan(json!({"defaults": {"timeout_s": 0}})),
        ),
        (
            "defaults unknown field",
            plan(json!({"defaults": {"retry": 1}})),
        ),
        (
            "variable value null",
            plan(json!({"variables": {"x": null}})),
        ),
        (
            "variable value array",
            plan(json!({"variables": {"x": [1]}})),
        ),
        (
            "variable value number",
            plan(json!({"variables": {"x": 1}})),
        ),
        ("variable name bad", plan(json!({"variables": {"1x": "a"}}))),
        (
            "secrets duplicate",
            plan(json!({"variables": {"x": "a"}, "secrets": ["x", "x"]})),
        ),
        ("secrets not strings", plan(json!({"secrets": [1]}))),
        ("plan_id empty", plan(json!({"plan_id": ""}))),
        ("plan_id blank", plan(json!({"plan_id": "   "}))),
        ("step_id blank", step(json!({"step_id": "  "}))),
        ("$schema a number", plan(json!({"$schema": 1}))),
        ("steps not an array", plan(json!({"steps": {}}))),
        ("step not an object", plan(json!({"steps": ["a"]}))),
        ("arguments not an object", step(json!({"arguments": []}))),
        (
            "no arguments for a tool that needs some",
            step(json!({"arguments": {}})),
        ),
        (
            "list_directory without arguments",
            json!({"plan_id": "p", "steps": [
            {"step_id": "a", "tool": "list_directory"}]}),
        ),
        ("plan is an array", json!([])),
        ("step description a number", step(json!({"description": 5}))),
        ("retries 2.5", step(json!({"retries": 2.5}))),
        (
            "precondition mixed case",
            step(json!({"precondition": "cargo WORKSPACE exists"})),
        ),
        (
            "precondition near miss",
            step(json!({"precondition": "file exist"})),
        ),
    ];
    cases.extend(more.into_iter().map(|(n, v)| (n.to_string(), v)));
    let t = TestDir::new();
    let mut failures = Vec::new();
    for (name, plan) in &cases {
        let text = serde_json::to_string_pretty(plan).unwrap();
        failures.extend(compare(name, &text, &t, &schema, false));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every plan printed in docs/ runs, approved, in a fresh copy of `fixtures/hello` (the README's
/// tour plan runs in [`the_readme_tour_runs`]). The secrets example gets the Makefile it calls and
/// values for its variables, and must keep them out of everything acode-run prints.
#[test]
fn every_documented_plan_runs() {
    let mut ran = Vec::new();
    for b in all_blocks().iter().filter(|b| b.lang == "json") {
        let Ok(plan) = serde_json::from_str::<Value>(&b.text) else {
            continue;
        };
        if !is_plan(&plan) || b.at.starts_with("README.md") {
            continue;
        }
        let t = TestDir::new();
        copy_tree(&repo().join("fixtures/hello"), &t.ws);
        let path = t.plan_text("plan.json", &b.text);
        let mut args = vec!["run", "--approve", path.to_str().unwrap()];
        let secrets = ["tok-5f2a9c81e7", "production-eu-1"];
        if plan["plan_id"] == "deploy" {
            t.file(
                "Makefile",
                "deploy:\n\t@echo \"deploying to $$DEPLOY_TOKEN\"\n",
            );
            args.extend([
                "--var",
                "deploy_token=tok-5f2a9c81e7",
                "--var",
                "target=production-eu-1",
            ]);
        }
        let out = t.run(&args);
        assert_eq!(code(&out), 0, "{}: {}", b.at, stderr(&out));
        let printed = format!("{}{}", stdout(&out), stderr(&out));
        for s in secrets {
            assert!(!printed.contains(s), "{}: {s} printed: {printed}", b.at);
        }
        if plan["plan_id"] == "deploy" {
            // The recipe ran with the real token; the record holds it redacted.
            let mut bytes = std::fs::read(t.ws.join(".acode/executions.db")).unwrap();
            bytes.extend(std::fs::read(t.ws.join(".acode/executions.db-wal")).unwrap_or_default());
            let text = String::from_utf8_lossy(&bytes);
            assert!(
                text.contains("deploying to [REDACTED]"),
                "{}: recipe output not recorded",
                b.at
            );
            assert!(
                !text.contains(secrets[0]),
                "{}: the token is in the database",
                b.at
            );
        }
        ran.push(b.at.clone());
    }
    assert!(ran.len() >= 2, "documented plans run: {ran:?}");
}

/// Commands quoted inline in prose (`` `acode-run validate plan.json` ``) parse too. A bare
/// `` `acode-run NAME` `` names a command rather than invoking it and is skipped; a synopsis's
/// `[optional]` parts are opened and of `A \| B` alternatives the first is taken.
#[test]
fn every_command_quoted_in_prose_parses() {
    let span = regex::Regex::new(r"`(acode-run [^`]+)`").unwrap();
    let mut failures = Vec::new();
    let mut checked = 0;
    for file in doc_files() {
        let rel = file.strip_prefix(repo()).unwrap().display().to_string();
        let text = std::fs::read_to_string(&file).unwrap();
        let mut in_block = false;
        for (i, line) in text.lines().enumerate() {
            if fence_info(line).is_some() {
                in_block = !in_block;
                continue;
            }
            if in_block {
                continue;
            }
            for m in span.captures_iter(line) {
                let quoted = m[1].split(r" \|").next().unwrap().replace('…', "x");
                let Some(words) = command_words(&quoted) else {
                    continue;
                };
                if words.len() < 2 {
                    continue;
                }
                let words: Vec<String> = words
                    .into_iter()
                    .map(|w| if w == "N" { "10".to_string() } else { w })
                    .collect();
                checked += 1;
                if let Err(e) = acode_run::cli::flags::parse(words.clone()) {
                    failures.push(format!("{rel}:{}: `{}`: {e}", i + 1, &m[1]));
                }
            }
        }
    }
    assert!(checked >= 10, "only {checked} inline commands found");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The README's test command is `scripts/test.sh`, which installs what the tests need (bubblewrap
/// included) before `cargo test`, and `.ci/run` runs that same script after fmt and clippy, so a
/// fresh machine and CI run the suite the same way (issue #34 item 14).
#[test]
fn the_readmes_test_command_sets_up_what_the_tests_need_and_ci_runs_it() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let block = readme_block_after("# acode-run", "sh");
    let commands: Vec<&str> = block
        .text
        .lines()
        .map(|l| l.split('#').next().unwrap().trim())
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(commands.get(1), Some(&"./scripts/test.sh"), "{readme:.400}");
    let script = std::fs::read_to_string(repo().join("scripts/test.sh")).unwrap();
    assert!(script.contains("[bwrap]=bubblewrap"), "{script}");
    assert!(script.contains("apt-get install"), "{script}");
    assert!(script.contains("cargo test \"$@\""), "{script}");
    let ci = std::fs::read_to_string(repo().join(".ci/run")).unwrap();
    let at = |needle: &str| {
        ci.find(needle)
            .unwrap_or_else(|| panic!(".ci/run lacks {needle}"))
    };
    assert!(at("cargo clippy") < at("./scripts/test.sh"));
    // CI is set by the script itself, before anything that tests (issue 43 §4).
    assert!(at("export CI=true") < at("scripts/fuzz-smoke.sh"));
    // The fuzz crate's own unit tests run too.
    assert!(ci.contains("(cd fuzz && CARGO_TARGET_DIR="), "{ci}");
    assert!(ci.contains("cargo test --lib)"), "{ci}");
    assert!(at("cargo fmt --check") < at("./scripts/test.sh"));
    assert!(
        !ci.contains("\ncargo test"),
        "CI runs the script, not its own cargo test"
    );
}

/// docs/replay.md's "What is compared" is one list of what a replay compares, normalises or never
/// sees, each entry naming the test that fails without it: every row names at least one test, and
/// every test named is a function of the crate's sources or tests.
#[test]
fn every_entry_of_what_a_replay_compares_names_a_test_that_exists() {
    let text = std::fs::read_to_string(repo().join("docs/replay.md")).unwrap();
    let section = text
        .split("## What is compared")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("docs/replay.md has a section `What is compared`");
    let rows: Vec<&str> = section
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| entry |"))
        .collect();
    assert!(rows.len() >= 10, "{rows:?}");
    let mut sources = String::new();
    for dir in ["src", "tests"] {
        for entry in walkdir::WalkDir::new(repo().join(dir)) {
            let entry = entry.unwrap();
            if entry.path().extension().is_some_and(|e| e == "rs") {
                sources.push_str(&std::fs::read_to_string(entry.path()).unwrap());
            }
        }
    }
    for row in rows {
        let last = row.trim_end_matches('|').rsplit('|').next().unwrap();
        let names: Vec<&str> = last
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|n| !n.is_empty())
            .collect();
        assert!(!names.is_empty(), "a row without a test: {row}");
        for name in names {
            assert!(
                sources.contains(&format!("fn {name}(")),
                "docs/replay.md names the test `{name}`, which does not exist: {row}"
            );
        }
    }
}
