//! The planner stage: `acode-run draft "GOAL"` turns a goal into a plan that passes validation.
//!
//! The model sees the goal, the workspace (through the read-only tools), the plan JSON Schema and
//! every tool's argument schema — the same texts `acode-run schema plan` and `acode-run tools`
//! print — and the rules below. Its answer is parsed (a fenced block is fine) and checked by the real
//! validator; every problem goes back to the model verbatim for another attempt, up to
//! `max_attempts`. A revision (`--revise`) starts from the old plan and the reason it was sent back,
//! and keeps the plan id with a version suffix.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{Stage, StageError, converse, extract_json};
use crate::executor::Executor;
use crate::plan::{Plan, ValidationContext};

/// The planner's role.
const ROLE: &str = "You are the planner of acode-run. You turn a goal into a plan: a JSON document \
that acode-run will validate, show to a human for approval, and then run step by step. You may look \
at the workspace with the read-only tools before you answer; you cannot change anything. Your final \
answer must be the plan itself: one JSON object, nothing else (a ```json fenced block is accepted).";

/// The planning rules given with every draft.
const RULES: &str = "Rules for the plan:
- Use direct steps (file_write, file_create, file_edit, file_delete, run_command, lsp_check, file_read, ...) \
with their exact arguments wherever the change is known.
- Use an `agent` step only for open-ended work whose exact edits cannot be known in advance; give it \
a precise instruction and the smallest set of tools it needs.
- Where the project has a test command (e.g. `cargo test`), add a `verify` to agent steps or a final \
run_command step that runs it.
- Every path is relative to the workspace root. Commands are not run by a shell: use `argv` arrays, \
no pipes or redirections.
- step_id values are short, unique, lowercase words with dashes.";

/// What to draft.
#[derive(Debug, Clone)]
pub struct DraftRequest {
    /// The goal, in the user's words.
    pub goal: String,
    /// For a revision: the previous plan and why it was sent back.
    pub previous: Option<Previous>,
    /// Answers the model may give before the draft fails (default 3).
    pub max_attempts: u32,
    /// Turns of each attempt's conversation.
    pub max_turns: u32,
    /// The intent the plan must declare (`draft --intent`); a reading intent is enforced by
    /// validation, so a plan with a writing step goes back to the model as a problem.
    pub intent: Option<crate::plan::Intent>,
}

/// The plan being revised and the reason.
#[derive(Debug, Clone)]
pub struct Previous {
    /// The old plan's text.
    pub text: String,
    /// Its plan id (the new version keeps it, with a version suffix).
    pub plan_id: String,
    /// Why it was sent back: a rejection reason, feedback, or a review's findings.
    pub feedback: String,
}

/// A valid, unapproved plan.
#[derive(Debug, Clone)]
pub struct Draft {
    /// The plan as validated.
    pub plan: Plan,
    /// Its text, pretty-printed, as it should be written.
    pub text: String,
    /// Attempts used.
    pub attempts: u32,
    /// The recorded runs of the conversations, one per attempt.
    pub run_ids: Vec<String>,
}

/// `foo` → `foo-v2`, `foo-v2` → `foo-v3`: a revision keeps its lineage in its id.
pub fn next_version(plan_id: &str) -> String {
    if let Some((base, n)) = plan_id.rsplit_once("-v")
        && let Ok(n) = n.parse::<u32>()
    {
        return format!("{base}-v{}", n.saturating_add(1));
    }
    format!("{plan_id}-v2")
}

/// The first message of an attempt.
fn instruction(req: &DraftRequest, registry_json: &str, feedback: Option<&str>) -> String {
    let mut s = format!(
        "GOAL:\n{}\n\n{RULES}\n\nThe plan file's JSON Schema:\n{}\n\nThe tools a step can use, \
         with the JSON Schema of their arguments:\n{registry_json}\n",
        req.goal,
        crate::plan::schema_for_prompt()
    );
    if let Some(intent) = req.intent {
        if intent.is_read_only() {
            s.push_str(&format!(
                "\nThe plan's intent is {0:?}: it must change nothing. Set \"intent\": {0:?} and use \
                 only the tools {1} (or an agent step given only those): no writing tool, no \
                 run_command, no lsp_check, no verify command.\n",
                intent.as_str(),
                crate::tools::READ_ONLY_TOOLS.join(", ")
            ));
        } else {
            s.push_str(&format!(
                "\nThe plan's intent is {0:?}: set \"intent\": {0:?}.\n",
                intent.as_str()
            ));
        }
    }
    if let Some(prev) = &req.previous {
        s.push_str(&format!(
            "\nThis is a REVISION. The previous plan (plan_id {:?}) was sent back for this \
             reason:\n{}\n\nThe previous plan:\n{}\n\nWrite the complete new version of the plan.\n",
            prev.plan_id, prev.feedback, prev.text
        ));
    }
    if let Some(f) = feedback {
        s.push_str(&format!(
            "\nYour previous answer was not accepted. acode-run's validator said:\n{f}\n\
             Answer again with the complete, corrected plan.\n"
        ));
    }
    s
}

/// Drafts a plan for `req` with `executor`'s model; see the module docs.
pub fn draft(executor: &mut Executor, req: &DraftRequest) -> Result<Draft, StageError> {
    draft_with(executor, req, &mut |_, _, _| {})
}

/// [`draft`], telling `rejected(attempt, of, problems)` about each answer the validator did not
/// accept, as it happens: a person waiting at a terminal sees why the next attempt is made.
pub fn draft_with(
    executor: &mut Executor,
    req: &DraftRequest,
    rejected: &mut dyn FnMut(u32, u32, &[String]),
) -> Result<Draft, StageError> {
    let registry_json =
        serde_json::to_string_pretty(&executor.registry().describe()).unwrap_or_default();
    let mut feedback: Option<String> = None;
    let mut problems: Vec<String> = Vec::new();
    let mut run_ids = Vec::new();
    let attempts = req.max_attempts.max(1);
    for attempt in 1..=attempts {
        let task = instruction(req, &registry_json, feedback.as_deref());
        let answer = converse(executor, Stage::Draft, None, ROLE, &task, req.max_turns)?;
        run_ids.push(answer.run_id.clone());
        match check(executor, req, &answer.text) {
            Ok((plan, text)) => {
                // The accepted attempt is linked to the plan hash it produced.
                executor
                    .store_mut()
                    .mark_stage(&answer.run_id, Stage::Draft.kind(), Some(&plan.sha256))
                    .map_err(crate::executor::ExecutionError::from)?;
                return Ok(Draft {
                    plan,
                    text,
                    attempts: attempt,
                    run_ids,
                });
            }
            Err(found) => {
                problems = found;
                rejected(attempt, attempts, &problems);
                feedback = Some(
                    problems
                        .iter()
                        .map(|p| format!("- {p}"))
                        .collect::<Vec<_>>()
                        .join("\n"),
                );
            }
        }
    }
    Err(StageError::Exhausted {
        stage: Stage::Draft.as_str(),
        attempts,
        problems,
    })
}

/// Parses and validates one answer; the plan and its text, or every problem found.
fn check(
    executor: &Executor,
    req: &DraftRequest,
    answer: &str,
) -> Result<(Plan, String), Vec<String>> {
    let mut value = extract_json(answer).map_err(|e| vec![e])?;
    if let Value::Object(map) = &mut value {
        if let Some(prev) = &req.previous {
            map.insert("plan_id".into(), Value::String(next_version(&prev.plan_id)));
        }
        // The goal travels with the plan, so the reviewer can judge the result against it.
        if !map.contains_key("description") {
            map.insert("description".into(), Value::String(req.goal.clone()));
        }
        // The intent asked for is the plan's, whatever the model wrote: validation holds the plan
        // to it.
        if let Some(intent) = req.intent {
            map.insert("intent".into(), Value::String(intent.as_str().into()));
        }
    }
    let text = pretty_plan(&value);
    let (plan, mut problems) = crate::plan::parse::parse_partial(text.as_bytes());
    if let Some(plan) = &plan {
        let ctx = ValidationContext {
            registry: executor.registry(),
            workspace: executor.workspace(),
            policy: executor.policy(),
        };
        problems.extend(crate::plan::validate::validate(plan, &ctx));
    }
    match plan {
        Some(plan) if problems.is_empty() => Ok((plan, text)),
        _ => Err(problems.iter().map(ToString::to_string).collect()),
    }
}

/// Keys in the order a person reads a plan; the rest follow alphabetically.
fn key_rank(key: &str) -> usize {
    const ORDER: &[&str] = &[
        "plan_id",
        "description",
        "intent",
        "variables",
        "secrets",
        "defaults",
        "step_id",
        "tool",
        "arguments",
        "precondition",
        "depends_on",
        "requires_confirmation",
        "timeout_s",
        "retries",
        "on_failure",
        "verify",
        "steps",
    ];
    ORDER.iter().position(|k| *k == key).unwrap_or(ORDER.len())
}

/// A plan pretty-printed with its keys in reading order (`plan_id` first, `steps` last).
pub fn pretty_plan(v: &Value) -> String {
    let mut out = String::new();
    write_value(v, 0, &mut out);
    out.push('\n');
    out
}

fn write_value(v: &Value, indent: usize, out: &mut String) {
    let pad = |n: usize| "  ".repeat(n);
    match v {
        Value::Object(map) if !map.is_empty() => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_by_key(|k| (key_rank(k), (*k).clone()));
            out.push_str("{\n");
            for (i, k) in keys.iter().enumerate() {
                out.push_str(&pad(indent + 1));
                out.push_str(&Value::String((*k).clone()).to_string());
                out.push_str(": ");
                write_value(&map[k.as_str()], indent + 1, out);
                if i + 1 < keys.len() {
                    out.push(',');
                }
                out.push('\n');
            }
            out.push_str(&pad(indent));
            out.push('}');
        }
        Value::Array(items) if !items.is_empty() => {
            out.push_str("[\n");
            for (i, item) in items.iter().enumerate() {
                out.push_str(&pad(indent + 1));
                write_value(item, indent + 1, out);
                if i + 1 < items.len() {
                    out.push(',');
                }
                out.push('\n');
            }
            out.push_str(&pad(indent));
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// What changed between two versions of a plan, step by step, for a person.
pub fn describe_changes(old: &Value, new: &Value) -> Vec<String> {
    let steps = |v: &Value| -> BTreeMap<String, (usize, Value)> {
        v.get("steps")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
            .filter_map(|(i, s)| {
                s.get("step_id")
                    .and_then(Value::as_str)
                    .map(|id| (id.to_string(), (i, s.clone())))
            })
            .collect()
    };
    let (a, b) = (steps(old), steps(new));
    let tool = |s: &Value| {
        s.get("tool")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string()
    };
    let mut order: Vec<(usize, String)> = b.iter().map(|(k, (i, _))| (*i, k.clone())).collect();
    order.sort();
    let mut out = Vec::new();
    for (_, id) in &order {
        let (_, new_step) = &b[id];
        match a.get(id) {
            None => out.push(format!("+ {id} ({}) added", tool(new_step))),
            Some((_, old_step)) if old_step == new_step => {
                out.push(format!("  {id} ({}) unchanged", tool(new_step)))
            }
            Some((_, old_step)) => {
                let fields: Vec<String> = new_step
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(k, v)| old_step.get(k.as_str()) != Some(v))
                    .map(|(k, _)| k.clone())
                    .chain(
                        old_step
                            .as_object()
                            .into_iter()
                            .flatten()
                            .filter(|(k, _)| new_step.get(k.as_str()).is_none())
                            .map(|(k, _)| k.clone()),
                    )
                    .collect();
                out.push(format!(
                    "~ {id} ({}) changed: {}",
                    tool(new_step),
                    fields.join(", ")
                ));
            }
        }
    }
    for (id, (_, s)) in &a {
        if !b.contains_key(id) {
            out.push(format!("- {id} ({}) removed", tool(s)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn versions_count_up() {
        assert_eq!(next_version("add-email"), "add-email-v2");
        assert_eq!(next_version("add-email-v2"), "add-email-v3");
        assert_eq!(next_version("x-vnext"), "x-vnext-v2");
    }

    #[test]
    fn pretty_plan_reads_in_order_and_round_trips() {
        let v = json!({"steps": [{"tool": "file_read", "arguments": {"path": "a"}, "step_id": "r"}],
                       "plan_id": "p", "description": "d"});
        let text = pretty_plan(&v);
        assert!(text.find("plan_id") < text.find("description"));
        assert!(text.find("description") < text.find("steps"));
        assert!(text.find("step_id") < text.find("\"tool\""));
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, v);
    }

    #[test]
    fn changes_are_described_per_step() {
        let old = json!({"steps": [
            {"step_id": "a", "tool": "file_read", "arguments": {"path": "x"}},
            {"step_id": "b", "tool": "file_write", "arguments": {"path": "y", "contents": "1"}}]});
        let new = json!({"steps": [
            {"step_id": "a", "tool": "file_read", "arguments": {"path": "x"}},
            {"step_id": "b", "tool": "file_write", "arguments": {"path": "y", "contents": "2"}},
            {"step_id": "c", "tool": "lsp_check", "arguments": {"path": "."}}]});
        assert_eq!(
            describe_changes(&old, &new),
            [
                "  a (file_read) unchanged",
                "~ b (file_write) changed: arguments",
                "+ c (lsp_check) added"
            ]
        );
    }
}
