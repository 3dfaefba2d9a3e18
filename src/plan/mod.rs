//! Plans: the model, parsing, variables, validation and authorization.
//!
//! Loading a plan is `read → parse → apply --var overrides → validate`, and every problem found on
//! the way is reported together with its location (`steps[3].arguments.path: ...`).

pub mod auth;
pub mod budget;
pub mod model;
pub mod parse;
pub mod signers;
pub mod skills;
pub mod validate;
pub mod variables;

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use thiserror::Error;

/// The plan-file JSON Schema shipped in `docs/` (`acode-run schema plan`); the planner stage shows
/// it to the model.
pub const SCHEMA: &str = include_str!("../../docs/plan.schema.json");

/// [`SCHEMA`] for a model's prompt: compact, and without `$defs.tool_arguments` (every tool's
/// argument schema, which the planner is shown once already, with the tools' descriptions), so the
/// prompt does not carry the same schemas twice.
pub fn schema_for_prompt() -> String {
    match serde_json::from_str::<serde_json::Value>(SCHEMA) {
        Ok(mut schema) => {
            if let Some(defs) = schema.get_mut("$defs").and_then(|d| d.as_object_mut()) {
                defs.insert(
                    "tool_arguments".into(),
                    serde_json::json!({"description": "The arguments of the step's tool: see the tools' schemas below."}),
                );
            }
            schema.to_string()
        }
        // The schema is compiled in and checked by the tests; should it not parse, show it as is.
        Err(_) => SCHEMA.to_string(),
    }
}

pub use auth::{ApprovedPlan, AuthError, AuthStatus, PlanAuthorization};
pub use model::{
    Arguments, Defaults, Dependencies, FileEffect, Intent, MAX_VERIFY_COMMANDS, OnFailure, Plan,
    Precondition, Step, Verify,
};

/// What validation needs to know about the environment a plan will run in.
pub struct ValidationContext<'a> {
    /// The tools that exist.
    pub registry: &'a crate::tools::ToolRegistry,
    /// The workspace paths must stay in.
    pub workspace: &'a crate::workspace::Workspace,
    /// The policy commands must satisfy.
    pub policy: &'a crate::policy::Policy,
}

impl ValidationContext<'_> {
    /// A tool context for side-effect-free checks.
    pub fn with_tool_context<R>(&self, f: impl FnOnce(&crate::tools::ToolContext) -> R) -> R {
        let cancel = std::sync::atomic::AtomicBool::new(false);
        let ctx = crate::tools::ToolContext {
            workspace: self.workspace,
            policy: self.policy,
            timeout: std::time::Duration::from_secs(self.policy.limits.timeout_s),
            sandbox: crate::sandbox::OsSandbox::unconfined(),
            cancel: &cancel,
            heartbeat: &|_| {},
            creates: &[],
            history: None,
            trace_parent: None,
        };
        f(&ctx)
    }
}

/// Whether a problem is a plain mistake or an attempt to leave the sandbox (exit 2 vs 32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    /// Malformed or inconsistent plan.
    Invalid,
    /// A path outside the workspace or a command the policy forbids.
    Sandbox,
}

/// One thing wrong with a plan, and where.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Problem {
    /// Where: `line 3, column 5`, `plan.plan_id`, `steps[2].arguments.path`, ...
    pub location: String,
    /// What is wrong.
    pub message: String,
    /// Which exit code it calls for.
    pub kind: ProblemKind,
    /// The line of the plan file where the step concerned starts, for problems inside a step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
}

impl Problem {
    /// A plain validation problem.
    pub fn invalid(location: impl Into<String>, message: impl Into<String>) -> Self {
        Problem {
            location: location.into(),
            message: message.into(),
            kind: ProblemKind::Invalid,
            line: None,
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.location, self.message)?;
        if let Some(line) = self.line {
            if self.location.starts_with("steps[") {
                write!(f, " (step at line {line})")?;
            } else {
                write!(f, " (at line {line})")?;
            }
        }
        Ok(())
    }
}

/// The problems as lines for a person (`  - LOCATION: MESSAGE`), the same problem of several steps
/// on one line: `  - steps[3–502].arguments.path (500 steps): … (first at line 5)`, so a plan
/// whose 500 steps share a mistake is not 500 lines. In first-seen order; `--json` keeps every
/// problem (this is the human text only).
pub fn grouped(problems: &[Problem]) -> Vec<String> {
    /// `steps[N]REST` → (N, REST).
    fn split(location: &str) -> Option<(usize, &str)> {
        let rest = location.strip_prefix("steps[")?;
        let (n, tail) = rest.split_once(']')?;
        Some((n.parse().ok()?, tail))
    }
    // Groups by (rest of the location, message, kind), in first-seen order; a problem outside
    // the steps is a group of its own.
    let mut groups: Vec<(&Problem, Vec<usize>)> = Vec::new();
    let mut index: std::collections::HashMap<(&str, &str, ProblemKind), usize> =
        std::collections::HashMap::new();
    for p in problems {
        match split(&p.location) {
            Some((n, tail)) => {
                let key = (tail, p.message.as_str(), p.kind);
                match index.get(&key) {
                    Some(&g) => groups[g].1.push(n),
                    None => {
                        index.insert(key, groups.len());
                        groups.push((p, vec![n]));
                    }
                }
            }
            None => groups.push((p, Vec::new())),
        }
    }
    groups
        .into_iter()
        .map(|(first, steps)| {
            if steps.len() < 2 {
                return format!("  - {first}");
            }
            let tail = split(&first.location).map_or("", |(_, t)| t);
            let mut line = format!(
                "  - steps[{}]{tail} ({} steps): {}",
                ranges(&steps),
                steps.len(),
                first.message
            );
            if let Some(at) = first.line {
                line.push_str(&format!(" (first at line {at})"));
            }
            line
        })
        .collect()
}

/// `3–502`, `1, 4–6, 9`: step indices (ascending as found) as ranges.
fn ranges(steps: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < steps.len() {
        let mut j = i;
        while j + 1 < steps.len() && steps[j + 1] == steps[j] + 1 {
            j += 1;
        }
        parts.push(if j > i {
            format!("{}–{}", steps[i], steps[j])
        } else {
            steps[i].to_string()
        });
        i = j + 1;
    }
    parts.join(", ")
}

/// A plan that cannot be used.
#[derive(Debug, Error)]
pub enum PlanError {
    /// The file could not be read.
    #[error("cannot read plan {path}: {source}")]
    Read {
        /// The plan path.
        path: String,
        /// Why: missing, not a regular file, over the size limit.
        source: crate::input::InputError,
    },
    /// The plan has problems; all of them are listed.
    #[error("{path}: invalid plan ({} problem{}):\n{}", problems.len(),
        if problems.len() == 1 { "" } else { "s" },
        grouped(problems).join("\n"))]
    Invalid {
        /// The plan path.
        path: String,
        /// Every problem found.
        problems: Vec<Problem>,
    },
}

impl PlanError {
    /// Every problem, as `validate --json` and the MCP server's tools report them: a plan that
    /// could not be read is one problem at `plan`, so a caller always has a list to show.
    pub fn problems(&self) -> Vec<Problem> {
        match self {
            PlanError::Invalid { problems, .. } => problems.clone(),
            other => vec![Problem::invalid("plan", other.to_string())],
        }
    }
}

/// Reads and parses a plan file, applying `--var` overrides. Overrides may only set variables the
/// plan declares, so the approved plan names everything a caller can vary.
pub fn read(path: &Path, overrides: &BTreeMap<String, String>) -> Result<Plan, PlanError> {
    let Partial {
        plan,
        mut problems,
        step_lines,
        budget_line,
    } = read_partial(path, overrides)?;
    annotate(&mut problems, &step_lines);
    annotate_budget(&mut problems, budget_line);
    if let Some(plan) = &plan {
        scrub_problems(plan, &[], &mut problems);
    }
    match plan {
        Some(plan) if problems.is_empty() => Ok(plan),
        _ => Err(PlanError::Invalid {
            path: path.display().to_string(),
            problems,
        }),
    }
}

/// Replaces the values the plan makes secret ([`variables::secret_values`]) in problem texts,
/// which may quote substituted arguments: the runner's words stay, the secret goes.
fn scrub_problems(plan: &Plan, builtins: &[(&str, String)], problems: &mut [Problem]) {
    if problems.is_empty() {
        return;
    }
    let vars = variables::Variables::new(&plan.variables, builtins);
    let secrets = variables::secret_values(plan, &vars);
    if secrets.is_empty() {
        return;
    }
    let red = crate::redact::Redactor::new().with_extra_values(secrets);
    for p in problems {
        p.location = red.redact_message(&p.location).into_owned();
        p.message = red.redact_message(&p.message).into_owned();
    }
}

/// Like [`read`], but returns the well-formed part of the plan together with the problems found.
/// What reading a plan file found: the well-formed part, the problems, and where each step starts.
struct Partial {
    plan: Option<Plan>,
    problems: Vec<Problem>,
    step_lines: Vec<usize>,
    /// Where the plan's `budget` key is, for its problems.
    budget_line: Option<usize>,
}

fn read_partial(path: &Path, overrides: &BTreeMap<String, String>) -> Result<Partial, PlanError> {
    let bytes = crate::input::read_bounded(path, crate::input::MAX_PLAN_BYTES, "plan file")
        .map_err(|source| PlanError::Read {
            path: path.display().to_string(),
            source,
        })?;
    let (mut plan, mut problems) = parse::parse_partial(&bytes);
    let lines = parse::step_lines(&bytes);
    if let Some(plan) = plan.as_mut() {
        // Canonical, so a run records where its plan is whatever the caller's directory was.
        plan.source = Some(path.canonicalize().unwrap_or_else(|_| path.to_path_buf()));
        for (k, v) in overrides {
            if plan.variables.contains_key(k) {
                plan.variables.insert(k.clone(), v.clone());
            } else {
                let message = match validate::identifier_problem(k) {
                    Some(why) => format!("invalid variable name: {why}"),
                    None => "the plan does not declare this variable (add it to \"variables\" \
                             with a default)"
                        .to_string(),
                };
                problems.push(Problem::invalid(
                    format!("--var {}", validate::escape_controls(k)),
                    message,
                ));
            }
        }
    }
    Ok(Partial {
        plan,
        problems,
        step_lines: lines,
        budget_line: parse::top_key_line(&bytes, "budget"),
    })
}

/// Adds to each problem in the plan's `budget` the line of that key.
fn annotate_budget(problems: &mut [Problem], line: Option<usize>) {
    for p in problems
        .iter_mut()
        .filter(|p| p.location.starts_with("plan.budget"))
    {
        p.line = line;
    }
}

/// Adds to each problem inside `steps[i]` the line where that step starts in the file.
fn annotate(problems: &mut [Problem], lines: &[usize]) {
    for p in problems {
        let index = p
            .location
            .strip_prefix("steps[")
            .and_then(|rest| rest.split(']').next())
            .and_then(|n| n.parse::<usize>().ok());
        if let Some(line) = index.and_then(|i| lines.get(i)) {
            p.line = Some(*line);
        }
    }
}

/// Reads, parses and validates a plan file; structural and semantic problems are reported together.
pub fn load(
    path: &Path,
    overrides: &BTreeMap<String, String>,
    ctx: &ValidationContext,
) -> Result<Plan, PlanError> {
    let Partial {
        plan,
        mut problems,
        step_lines,
        budget_line,
    } = read_partial(path, overrides)?;
    if let Some(plan) = &plan {
        problems.extend(validate::validate(plan, ctx));
        let builtins = validate::builtins(plan, ctx.workspace, "validation");
        scrub_problems(plan, &builtins, &mut problems);
    }
    annotate(&mut problems, &step_lines);
    annotate_budget(&mut problems, budget_line);
    match plan {
        Some(plan) if problems.is_empty() => Ok(plan),
        _ => Err(PlanError::Invalid {
            path: path.display().to_string(),
            problems,
        }),
    }
}

/// Validates the steps of `plan` (read from `path`, its variables as loaded) that `which` selects
/// again against `ctx`: what `approve` does once it has pinned the MCP servers, so each MCP step's
/// arguments meet the schema it pins, with the step's line, before anything is recorded.
pub fn recheck_steps(
    path: &Path,
    plan: &Plan,
    ctx: &ValidationContext,
    which: impl Fn(&Step) -> bool,
) -> Result<(), PlanError> {
    let builtins = validate::builtins(plan, ctx.workspace, "validation");
    let vars = variables::Variables::new(&plan.variables, &builtins);
    let writers = validate::after_writers(plan);
    let mut problems: Vec<Problem> = plan
        .steps
        .iter()
        .enumerate()
        .filter(|(_, step)| which(step))
        .flat_map(|(i, step)| validate::validate_step(step, &vars, ctx, writers[i]))
        .collect();
    if problems.is_empty() {
        return Ok(());
    }
    scrub_problems(plan, &builtins, &mut problems);
    if let Ok(bytes) = crate::input::read_bounded(path, crate::input::MAX_PLAN_BYTES, "plan file") {
        annotate(&mut problems, &parse::step_lines(&bytes));
    }
    Err(PlanError::Invalid {
        path: path.display().to_string(),
        problems,
    })
}

#[cfg(test)]
mod schema_tests {
    use super::*;

    #[test]
    fn the_prompt_schema_keeps_the_plan_shape_and_drops_the_repeated_tool_schemas() {
        let full: serde_json::Value = serde_json::from_str(SCHEMA).unwrap();
        let prompt: serde_json::Value = serde_json::from_str(&schema_for_prompt()).unwrap();
        assert!(full["$defs"]["tool_arguments"]["allOf"].is_array());
        assert!(prompt["$defs"]["tool_arguments"].get("allOf").is_none());
        assert_eq!(prompt["$defs"]["tool"], full["$defs"]["tool"]);
        assert_eq!(prompt["$defs"]["step"], full["$defs"]["step"]);
        assert!(schema_for_prompt().len() < SCHEMA.len() / 2);
    }
}
