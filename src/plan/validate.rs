//! Whole-plan validation before any step runs (SPEC §2).
//!
//! Checks known tools, argument schemas, variables, paths, command policy, preconditions and the
//! dependency graph, and reports every problem together. The same substitution and checks run again
//! for each step at execution time, so a plan that validates is exactly the plan that runs.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::model::{Plan, Precondition, Step};
use super::variables::Variables;
use super::{Problem, ProblemKind, ValidationContext};
use crate::tools::ToolError;
use crate::workspace::Workspace;

// The identifier rules live in `parse` (the parser applies them first); re-exported here, where
// callers have always found them.
pub use super::parse::{escape_char, escape_controls, identifier_problem};

/// Checks the plan's `secrets` list: every name must be a declared variable (a `--var` can only
/// set a declared one), so a typo cannot leave a secret unredacted.
fn check_secrets(plan: &Plan) -> Vec<Problem> {
    plan.secrets
        .iter()
        .enumerate()
        .filter(|(_, name)| !plan.variables.contains_key(*name))
        .map(|(j, name)| {
            Problem::invalid(
                format!("plan.secrets[{j}]"),
                format!(
                    "\"{}\" is not a declared variable (declare it in \"variables\"; --var can \
                     only set declared ones)",
                    escape_controls(name)
                ),
            )
        })
        .collect()
}

/// The built-in variables for a run.
pub fn builtins(plan: &Plan, workspace: &Workspace, run_id: &str) -> Vec<(&'static str, String)> {
    let plan_dir = plan
        .source
        .as_ref()
        .and_then(|p| p.parent())
        .map(|p| {
            if p.as_os_str().is_empty() {
                std::path::PathBuf::from(".")
            } else {
                p.to_path_buf()
            }
        })
        .and_then(|p| p.canonicalize().ok())
        .unwrap_or_else(|| workspace.root().to_path_buf());
    vec![
        ("workspace", workspace.root().display().to_string()),
        ("plan_dir", plan_dir.display().to_string()),
        ("run_id", run_id.to_string()),
    ]
}

/// A step's arguments after substitution, or the problems substitution found.
pub fn substitute_arguments(step: &Step, vars: &Variables) -> Result<Value, Vec<Problem>> {
    let mut raw = Vec::new();
    let args = vars.substitute_value(
        &step.arguments.to_value(),
        &format!("steps[{}].arguments", step.position),
        &mut raw,
    );
    if raw.is_empty() {
        Ok(args)
    } else {
        Err(raw
            .into_iter()
            .map(|(location, message)| Problem::invalid(location, message))
            .collect())
    }
}

/// Substitutes variables inside a precondition.
pub fn substitute_precondition(p: &Precondition, vars: &Variables) -> Result<Precondition, String> {
    Ok(match p {
        Precondition::FileExists(path) => Precondition::FileExists(vars.substitute(path)?),
        Precondition::FileAbsent(path) => Precondition::FileAbsent(vars.substitute(path)?),
        Precondition::FileContains { path, pattern } => Precondition::FileContains {
            path: vars.substitute(path)?,
            pattern: vars.substitute(pattern)?,
        },
        Precondition::CommandSucceeds(c) => Precondition::CommandSucceeds(vars.substitute(c)?),
        other => other.clone(),
    })
}

fn tool_problem(location: String, e: ToolError) -> Problem {
    match e {
        ToolError::Sandbox(v) => Problem {
            location,
            message: v.to_string(),
            kind: ProblemKind::Sandbox,
            line: None,
        },
        other => Problem::invalid(location, other.to_string()),
    }
}

/// For each step: whether a step it depends on, directly or not, may create files
/// ([`Step::may_create_files`]; see [`validate_step`]). Cycles and unknown ids are reported
/// elsewhere; here they just end the walk.
pub fn after_writers(plan: &Plan) -> Vec<bool> {
    let dependencies = plan.dependency_positions();
    let writes = Step::may_create_files;
    // Memoised over the dependency graph (linear in steps and edges): `memo[i]` once known.
    let mut memo: Vec<Option<bool>> = vec![None; plan.steps.len()];
    let mut on_stack = vec![false; plan.steps.len()];
    for start in 0..plan.steps.len() {
        // Depth-first, explicitly: a step is decided once all its dependencies are.
        let mut stack = vec![(start, false)];
        while let Some((i, expanded)) = stack.pop() {
            if memo[i].is_some() {
                continue;
            }
            let deps = dependencies.of(i);
            if expanded {
                on_stack[i] = false;
                memo[i] = Some(
                    deps.iter()
                        .any(|&d| writes(&plan.steps[d]) || memo[d].unwrap_or(false)),
                );
                continue;
            }
            on_stack[i] = true;
            stack.push((i, true));
            // A cycle is reported elsewhere; its back edge is simply not followed.
            stack.extend(
                deps.iter()
                    .filter(|&&d| memo[d].is_none() && !on_stack[d])
                    .map(|&d| (d, false)),
            );
        }
    }
    memo.into_iter().map(|m| m.unwrap_or(false)).collect()
}

/// Checks declared root entries (`creates`): one name each, never a protected path.
fn check_creates(ctx: &ValidationContext, entries: &[String], at: &str) -> Vec<Problem> {
    entries
        .iter()
        .enumerate()
        .filter_map(|(i, e)| {
            crate::tools::root_entries::parse_entry(ctx.workspace, e)
                .err()
                .map(|v| tool_problem(format!("{at}[{i}]"), ToolError::Sandbox(v)))
        })
        .collect()
}

/// Checks a command string (precondition or verify) as `run_command` would.
pub fn check_command(ctx: &ValidationContext, command: &str, at: &str) -> Option<Problem> {
    let Some(tool) = ctx.registry.get("run_command") else {
        return Some(Problem::invalid(
            at,
            "commands are not supported: the run_command tool is not available in this build",
        ));
    };
    let args = json!({ "command": command });
    ctx.with_tool_context(|tc| tool.check(&args, tc))
        .err()
        .map(|e| tool_problem(at.to_string(), e))
}

/// Validates one step's tool, arguments and precondition with the given variables.
///
/// `after_writer`: an earlier step this one depends on (transitively) may create files — a
/// command, a file tool, an agent, an MCP tool ([`Step::may_create_files`]) — so a program it
/// names by workspace path may not exist yet.
pub fn validate_step(
    step: &Step,
    vars: &Variables,
    ctx: &ValidationContext,
    after_writer: bool,
) -> Vec<Problem> {
    let at = format!("steps[{}]", step.position);
    let mut problems = check_creates(ctx, &step.creates, &format!("{at}.creates"));
    let args = match substitute_arguments(step, vars) {
        Ok(a) => Some(a),
        Err(p) => {
            problems.extend(p);
            None
        }
    };
    match ctx.registry.lookup(&step.tool) {
        // A missing or mistyped `tool` field was already reported by the parser.
        None if step.tool.is_empty() => {}
        // A tool of a server the policy declares, which its `tools` list does not allow: say
        // where to allow it, rather than "unknown tool".
        None if crate::policy::mcp_server_of(&step.tool)
            .is_some_and(|s| ctx.policy.mcp.servers.contains_key(s)) =>
        {
            let server = crate::policy::mcp_server_of(&step.tool).unwrap_or_default();
            let tool = step
                .tool
                .strip_prefix(&crate::policy::mcp_tool_name(server, ""))
                .unwrap_or_default();
            problems.push(Problem::invalid(
                format!("{at}.tool"),
                format!(
                    "{:?} is not allowed by the policy: MCP server {server:?} is declared, but \
                     {tool:?} is not in its tools; if the server offers it, add it to \
                     mcp.servers.{server}.tools in acode-policy.json (then approve again)",
                    step.tool
                ),
            ));
        }
        None => {
            let known: Vec<&str> = ctx.registry.names().collect();
            problems.push(Problem::invalid(
                format!("{at}.tool"),
                format!(
                    "unknown tool {:?}{} (available: {})",
                    step.tool,
                    crate::suggest::did_you_mean(&step.tool, known.iter().copied()),
                    known.join(", ")
                ),
            ));
        }
        Some((tool, schema)) => {
            if let Some(args) = &args {
                let schema_errors =
                    crate::tools::schema::validate(schema, args, &format!("{at}.arguments"));
                if schema_errors.is_empty() {
                    match ctx.with_tool_context(|tc| tool.check(args, tc)) {
                        Ok(()) => {}
                        // Made by an earlier step: `preview` notes it, the run checks again.
                        Err(ToolError::ProgramMissing { .. } | ToolError::InputMissing { .. })
                            if after_writer => {}
                        // The step's precondition skips it when the crate is not there.
                        Err(ToolError::InputMissing { .. })
                            if matches!(
                                step.precondition.as_deref(),
                                Some(super::model::Precondition::CargoWorkspaceExists)
                            ) => {}
                        Err(e) => problems.push(tool_problem(format!("{at}.arguments"), e)),
                    }
                    if step.tool == crate::tools::agent::NAME {
                        problems.extend(
                            crate::tools::agent::check_tool_list(args, ctx.registry)
                                .into_iter()
                                .map(|(loc, m)| {
                                    Problem::invalid(format!("{at}.arguments.{loc}"), m)
                                }),
                        );
                        problems.extend(super::skills::check_step(
                            args,
                            ctx,
                            &at,
                            &|command, at| check_command(ctx, command, at),
                        ));
                    }
                } else {
                    // Each schema error already starts with its own location: said once.
                    problems.extend(schema_errors.into_iter().map(|m| match m.split_once(": ") {
                        Some((loc, msg)) if loc.starts_with(&format!("{at}.arguments")) => {
                            Problem::invalid(loc, msg)
                        }
                        _ => Problem::invalid(format!("{at}.arguments"), m),
                    }));
                }
            }
        }
    }
    if let Some(pre) = &step.precondition {
        let pat = format!("{at}.precondition");
        match substitute_precondition(pre, vars) {
            Err(e) => problems.push(Problem::invalid(pat, e)),
            Ok(pre) => problems.extend(check_precondition(&pre, step, args.as_ref(), ctx, &pat)),
        }
    }
    if let Some(verify) = &step.verify {
        for (k, command) in verify.commands.iter().enumerate() {
            let vat = verify.location(&at, k);
            match vars.substitute(command) {
                Err(e) => problems.push(Problem::invalid(vat, e)),
                Ok(cmd) => problems.extend(check_command(ctx, &cmd, &vat)),
            }
        }
    }
    problems
}

/// Every MCP server the policy declares must be reachable (approving starts or connects to each
/// one to pin it): a local server's program resolved as a command's, a remote server's host
/// allowed by `network.allow`. Reported at the first step that calls one of its tools directly
/// (so with that step's line), else at the policy's entry.
fn check_mcp_programs(plan: &Plan, ctx: &ValidationContext) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (name, server) in &ctx.policy.mcp.servers {
        let tools: Vec<String> = server
            .tools
            .iter()
            .map(|t| crate::policy::mcp_tool_name(name, t))
            .collect();
        let at = |field: &str| {
            plan.steps
                .iter()
                .position(|s| tools.contains(&s.tool))
                .map(|i| format!("steps[{i}].tool"))
                .unwrap_or_else(|| format!("policy.mcp.servers.{name}.{field}"))
        };
        if let Some(url) = &server.url {
            if let Some(entry) = remote_host_refused(url, ctx) {
                problems.push(Problem::invalid(
                    at("url"),
                    format!(
                        "MCP server {name} at {url} is not allowed by the policy's network.allow \
                         (approving would be refused before any request); to allow it, add \
                         \"{entry}\" to network.allow in acode-policy.json"
                    ),
                ));
            }
            continue;
        }
        let Some(Err(e)) = crate::tools::mcp::server_program(server, ctx.workspace) else {
            continue;
        };
        problems.push(Problem::invalid(
            at("command"),
            format!(
                "MCP server {name} cannot start: {e} (its command in the policy is {:?}; \
                 install it, or fix mcp.servers.{name}.command)",
                server.command
            ),
        ));
    }
    problems
}

/// The `network.allow` entry a remote MCP server's URL needs, when the policy's host entries do
/// not allow it (the check the run's connection makes before any request). `None` when allowed,
/// or when the policy has `registry:` entries, whose hosts are known only at run start.
fn remote_host_refused(url: &str, ctx: &ValidationContext) -> Option<String> {
    use crate::policy::network::{Endpoint, Entry, decide};
    let endpoint = Endpoint::parse(url).ok()?;
    let entries = ctx.policy.network.entries().ok()?;
    let mut rules = Vec::new();
    for entry in entries {
        match entry {
            Entry::Host(rule) => rules.push(rule),
            Entry::Registry(_) => return None,
        }
    }
    match decide(&rules, &endpoint.host, endpoint.port) {
        Some(_) => None,
        None => Some(endpoint.allow_entry()),
    }
}

/// The path a step's precondition "file exists" refers to.
pub fn step_path(args: &Value) -> Option<&str> {
    args.get("path")
        .or_else(|| args.get("file_path"))
        .and_then(Value::as_str)
}

fn check_precondition(
    pre: &Precondition,
    step: &Step,
    args: Option<&Value>,
    ctx: &ValidationContext,
    at: &str,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut path = |p: &str| {
        if let Err(v) = ctx.workspace.resolve(p) {
            problems.push(Problem {
                location: at.to_string(),
                message: v.to_string(),
                kind: ProblemKind::Sandbox,
                line: None,
            });
        }
    };
    match pre {
        Precondition::None | Precondition::CodegraphDbExists => {}
        Precondition::StepFileExists => match args.map(step_path) {
            Some(Some(p)) => path(p),
            Some(None) => problems.push(Problem::invalid(
                at,
                format!(
                    "\"file exists\" needs a path or file_path argument, and {} step {:?} has none",
                    step.tool, step.step_id
                ),
            )),
            None => {}
        },
        Precondition::CargoWorkspaceExists => {
            if let Some(p) = args.and_then(step_path) {
                path(p)
            }
        }
        Precondition::FileExists(p) | Precondition::FileAbsent(p) => path(p),
        Precondition::FileContains { path: p, pattern } => {
            path(p);
            if let Err(e) = regex::Regex::new(pattern) {
                problems.push(Problem::invalid(at, format!("invalid pattern: {e}")));
            }
        }
        Precondition::CommandSucceeds(cmd) => problems.extend(check_command(ctx, cmd, at)),
    }
    problems
}

/// Orders steps so each comes after its dependencies, keeping file order where free; reports unknown
/// targets and cycles.
pub fn dependency_order(plan: &Plan) -> Result<Vec<usize>, Vec<Problem>> {
    // The first step of each id: a later step with the same id is a duplicate the parser already
    // reported, so its edges are left out here (one problem, one message).
    let mut index: HashMap<&str, usize> = HashMap::new();
    for s in &plan.steps {
        index.entry(s.step_id.as_str()).or_insert(s.position);
    }
    let n = plan.steps.len();
    let mut problems = Vec::new();
    let mut indegree = vec![0usize; n];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
    for step in &plan.steps {
        if index.get(step.step_id.as_str()) != Some(&step.position) {
            continue;
        }
        for (j, dep) in step.depends_on.iter().enumerate() {
            let at = format!("steps[{}].depends_on[{j}]", step.position);
            match index.get(dep.as_str()) {
                None => problems.push(Problem::invalid(
                    at,
                    format!("depends on unknown step {dep:?}"),
                )),
                Some(&d) if d == step.position => {
                    problems.push(Problem::invalid(at, "a step cannot depend on itself"))
                }
                Some(&d) => {
                    indegree[step.position] += 1;
                    dependents[d].push(step.position);
                }
            }
        }
    }
    // Unknown and self edges are left out of the graph and cycle detection still runs, so every
    // problem is reported in one pass.
    // Kahn's algorithm with a min-heap on position keeps file order among ready steps.
    let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<usize>> = indegree
        .iter()
        .enumerate()
        .filter(|(_, d)| **d == 0)
        .map(|(i, _)| std::cmp::Reverse(i))
        .collect();
    let mut order = Vec::with_capacity(n);
    while let Some(std::cmp::Reverse(i)) = ready.pop() {
        order.push(i);
        for &d in &dependents[i] {
            indegree[d] -= 1;
            if indegree[d] == 0 {
                ready.push(std::cmp::Reverse(d));
            }
        }
    }
    if order.len() < n {
        let stuck: Vec<&str> = plan
            .steps
            .iter()
            .filter(|s| indegree[s.position] > 0)
            .map(|s| s.step_id.as_str())
            .take(20)
            .collect();
        problems.push(Problem::invalid(
            "plan.steps",
            format!(
                "depends_on forms a cycle among these steps: {}",
                stuck.join(", ")
            ),
        ));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(order)
}

/// A `read`, `query` or `explain` plan promises to change nothing: every step that could (a
/// writing tool, a command, `lsp_check`, an agent given a writing tool, a verify command or a
/// `command_succeeds` precondition) is a problem naming the step.
pub fn check_intent(plan: &Plan) -> Vec<Problem> {
    use crate::tools::READ_ONLY_TOOLS;
    let Some(intent) = plan.intent.filter(|i| i.is_read_only()) else {
        return Vec::new();
    };
    let mut problems = Vec::new();
    for step in &plan.steps {
        let at = format!("steps[{}]", step.position);
        let mut why: Vec<(String, String)> = Vec::new();
        match step.tool.as_str() {
            t if READ_ONLY_TOOLS.contains(&t) => {}
            crate::tools::agent::NAME => {
                let tools = step.arguments.get("tools");
                let writers: Vec<String> = tools
                    .as_ref()
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(Value::as_str)
                            .filter(|t| !READ_ONLY_TOOLS.contains(t))
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default();
                if !writers.is_empty() {
                    why.push((
                        format!("{at}.arguments.tools"),
                        format!("is an agent step given {}", writers.join(", ")),
                    ));
                }
            }
            "run_command" | "lsp_check" => why.push((
                format!("{at}.tool"),
                format!("runs a command ({})", step.tool),
            )),
            "" => {}
            other => why.push((
                format!("{at}.tool"),
                format!("uses {other}, which may change files"),
            )),
        }
        if step.verify.is_some() {
            why.push((format!("{at}.verify"), "runs a verify command".to_string()));
        }
        if let Some(p) = &step.precondition
            && matches!(**p, super::Precondition::CommandSucceeds(_))
        {
            why.push((
                format!("{at}.precondition"),
                "runs a command in its precondition".to_string(),
            ));
        }
        for (location, what) in why {
            problems.push(Problem::invalid(
                location,
                format!(
                    "step {:?} {what}, but the plan's intent is {:?}, which changes nothing (a {} plan may use only {}, or an agent step given only those; set intent to \"mutate\" to change files)",
                    escape_controls(&step.step_id),
                    intent.as_str(),
                    intent.as_str(),
                    READ_ONLY_TOOLS.join(", ")
                ),
            ));
        }
    }
    problems
}

/// Validates the whole plan; an empty result means it may run.
///
/// A partial plan (from [`crate::plan::parse::parse_partial`]: a step that did not parse is left
/// out) keeps each step's position in the file, while the checks index steps by position: they run
/// over a renumbered copy, and each problem gets its step's position in the file back.
pub fn validate(plan: &Plan, ctx: &ValidationContext) -> Vec<Problem> {
    if plan.steps.iter().enumerate().all(|(i, s)| s.position == i) {
        return crate::policy::host::program::with_memo(|| validate_all(plan, ctx));
    }
    let mut copy = plan.clone();
    let in_file: Vec<usize> = copy.steps.iter().map(|s| s.position).collect();
    for (i, s) in copy.steps.iter_mut().enumerate() {
        s.position = i;
    }
    let mut problems = crate::policy::host::program::with_memo(|| validate_all(&copy, ctx));
    for p in &mut problems {
        let Some(rest) = p.location.strip_prefix("steps[") else {
            continue;
        };
        let Some((n, tail)) = rest.split_once(']') else {
            continue;
        };
        if let Some(pos) = n.parse::<usize>().ok().and_then(|i| in_file.get(i)) {
            p.location = format!("steps[{pos}]{tail}");
        }
    }
    problems
}

fn validate_all(plan: &Plan, ctx: &ValidationContext) -> Vec<Problem> {
    let vars = Variables::new(
        &plan.variables,
        &builtins(plan, ctx.workspace, "validation"),
    );
    let mut problems = check_secrets(plan);
    problems.extend(check_intent(plan));
    problems.extend(check_creates(ctx, &ctx.policy.creates, "policy.creates"));
    problems.extend(check_mcp_programs(plan, ctx));
    let writers = after_writers(plan);
    for (i, step) in plan.steps.iter().enumerate() {
        problems.extend(validate_step(step, &vars, ctx, writers[i]));
    }
    if let Err(p) = dependency_order(plan) {
        problems.extend(p);
    }
    problems
}
