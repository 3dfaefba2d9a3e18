//! `acode-run preview PLAN`: what each step will do, before anyone approves it.
//!
//! An approval is a hash of bytes; a reviewer needs to see the *effect*. For every step in the
//! order the executor would run them, with variables substituted, the preview shows: the exact argv,
//! cwd and environment names of a command; the tools an agent step may use; and for `file_write`,
//! `file_create`, `file_edit` and `file_delete` a unified diff against the workspace, computed by
//! simulating the direct file steps in order in memory (a later edit sees an earlier write).
//! Nothing is written.
//!
//! Some effects cannot be known in advance: what a command or an agent does to files. Such steps
//! are marked, and every file diff computed after one of them is marked `assumed` (it assumes the
//! earlier step left that file alone) rather than guessed.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;

use crate::plan::validate::{builtins, dependency_order, substitute_arguments};
use crate::plan::variables::Variables;
use crate::plan::{Plan, Problem};
use crate::policy::{Policy, SandboxMode};
use crate::tools::agent::AgentArgs;
use crate::tools::args::parse;
use crate::tools::command::{CommandArgs, argv_of};
use crate::tools::files::{DeleteArgs, EditArgs, WriteArgs, apply_edit, unified_diff};
use crate::tools::lsp::LspArgs;
use crate::workspace::Workspace;

/// Files larger than this are not loaded for a diff (the preview says so).
const MAX_PREVIEW_FILE: u64 = 4 * 1024 * 1024;

/// What one step will do.
#[derive(Debug, Clone, Serialize)]
pub struct StepPreview {
    /// The step.
    pub step_id: String,
    /// Its tool.
    pub tool: String,
    /// Its effect, as far as it can be known.
    #[serde(flatten)]
    pub effect: Effect,
    /// With `--jobs` above 1: the steps it may run at the same time as (neither depends on the
    /// other, and they touch no path in common; see `executor::schedule`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub beside: Vec<String>,
    /// The `verify` commands run after it, variables substituted (several run at the same time,
    /// and the first failure cancels the others).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub verify: Vec<String>,
    /// Why running it will ask the confirmation callback (denied without a terminal unless
    /// `--confirm auto-approve`), or `None` when it runs without asking.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confirm: Option<String>,
}

/// The effect of a step, as far as it can be known before running it.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "effect", rename_all = "snake_case")]
pub enum Effect {
    /// A file will change: the unified diff (empty when the content stays the same).
    FileChange {
        /// Workspace-relative path.
        path: String,
        /// Unified diff against the simulated workspace.
        diff: String,
        /// An earlier command or agent step may change files: this diff assumes it left this one
        /// alone.
        assumed: bool,
    },
    /// A program will run; what it does to files cannot be known in advance.
    Command {
        /// The exact argv handed to `execve`.
        argv: Vec<String>,
        /// The working directory, relative to the workspace.
        cwd: String,
        /// Names of the environment variables the step adds (values are not shown: they may be
        /// secrets).
        env: Vec<String>,
        /// Which program runs: the path the name resolves to, and where a link leads
        /// (`.venv/bin/python → /opt/py/bin/python3.11`), or that an earlier step is to create it.
        #[serde(skip_serializing_if = "Option::is_none")]
        program: Option<String>,
    },
    /// An LLM will choose tool calls among these tools.
    Agent {
        /// The instruction (or skill) given to the model.
        instruction: String,
        /// The tools it may call.
        tools: Vec<String>,
    },
    /// A tool of an MCP server will be called (docs/mcp.md): a local server runs as a command
    /// does, a remote one elsewhere, so what it does cannot be known in advance.
    McpCall {
        /// The server, as named in the policy.
        server: String,
        /// The URL of a remote server (Streamable HTTP); `None` for a local one (a command).
        #[serde(skip_serializing_if = "Option::is_none")]
        url: Option<String>,
        /// The tool, as the server names it.
        tool: String,
        /// The arguments, as JSON.
        arguments: String,
    },
    /// The step only reads (or checks) and changes nothing.
    ReadOnly {
        /// What it reads, in a few words.
        summary: String,
    },
    /// The step will fail as planned (for example an edit whose `old` text is not in the file).
    WillFail {
        /// Why.
        reason: String,
    },
}

/// The whole preview of a plan.
#[derive(Debug, Clone, Serialize)]
pub struct Preview {
    /// The plan's id.
    pub plan_id: String,
    /// The plan's SHA-256, the value an approval binds.
    pub plan_sha256: String,
    /// The plan's declared intent (`read`, `query`, `explain`, `mutate`), when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intent: Option<crate::plan::Intent>,
    /// Every step, in execution order.
    pub steps: Vec<StepPreview>,
    /// What the policy lets commands do beyond the workspace (the network hosts, and what each
    /// sandbox mode can enforce of them).
    pub notes: Vec<String>,
}

/// The simulated workspace: files read on first use, then changed in memory (also used by the
/// odincode importer to bind line edits to the text their file will have).
pub(crate) struct Simulation<'w> {
    workspace: &'w Workspace,
    policy: &'w Policy,
    /// Path (workspace-relative, as resolved) → content (`None` = absent).
    files: HashMap<String, Option<String>>,
}

impl<'w> Simulation<'w> {
    /// A simulation of `workspace` with nothing changed yet.
    pub(crate) fn new(workspace: &'w Workspace, policy: &'w Policy) -> Self {
        Simulation {
            workspace,
            policy,
            files: HashMap::new(),
        }
    }

    /// Sets the simulated content of `rel` (`None` = deleted).
    pub(crate) fn set(&mut self, rel: &str, content: Option<String>) {
        self.files.insert(rel.to_string(), content);
    }

    /// Drops what the simulation knows of `rel` (no later step reads it: see [`preview_each`]).
    fn forget(&mut self, rel: &str) {
        self.files.remove(rel);
    }

    /// Records `new` as the content of `path` and returns the diff from what it was.
    fn change(&mut self, path: &str, new: Option<String>, assumed: bool) -> Effect {
        match self.content(path) {
            Err(reason) => Effect::WillFail { reason },
            Ok(old) => {
                let diff = unified_diff(path, old.as_deref(), new.as_deref());
                self.files.insert(path.to_string(), new);
                Effect::FileChange {
                    path: path.to_string(),
                    diff,
                    assumed,
                }
            }
        }
    }

    /// The current content of `rel`, reading the workspace the first time.
    pub(crate) fn content(&mut self, rel: &str) -> Result<Option<String>, String> {
        if let Some(c) = self.files.get(rel) {
            return Ok(c.clone());
        }
        let abs = self.workspace.resolve(rel).map_err(|e| e.to_string())?;
        // Through the kernel-checked opener: regular files only, so a FIFO cannot stall a preview.
        let loaded = match crate::workspace::fs::open_regular(self.workspace, &abs) {
            Err(crate::workspace::fs::FsError::Io(e))
                if e.kind() == std::io::ErrorKind::NotFound =>
            {
                None
            }
            Err(e) => return Err(format!("{rel}: {e}")),
            Ok((_, m)) if m.len() > MAX_PREVIEW_FILE => {
                return Err(format!(
                    "{rel}: larger than {} MiB, not previewed",
                    MAX_PREVIEW_FILE >> 20
                ));
            }
            Ok((file, _)) => {
                use std::io::Read as _;
                let mut bytes = Vec::new();
                file.take(MAX_PREVIEW_FILE)
                    .read_to_end(&mut bytes)
                    .map_err(|e| format!("{rel}: {e}"))?;
                Some(String::from_utf8_lossy(&bytes).into_owned())
            }
        };
        self.files.insert(rel.to_string(), loaded.clone());
        Ok(loaded)
    }
}

/// Why plan `plan_id` cannot be previewed, one problem a line: the words `preview` prints and the
/// MCP server's `preview_plan` answers.
pub fn cannot_preview(plan_id: &str, problems: &[Problem]) -> String {
    let list: Vec<String> = problems.iter().map(|p| format!("  - {p}")).collect();
    format!("cannot preview {plan_id}:\n{}", list.join("\n"))
}

/// Builds the preview of `plan` over `workspace` (nothing is written), every step in memory: for
/// callers that need the whole value (JSON, the MCP server's answer). A large plan is shown with
/// [`preview_each`] and [`render_each`], which hold one step at a time.
pub fn preview(
    plan: &Plan,
    workspace: &Workspace,
    policy: &Policy,
) -> Result<Preview, Vec<Problem>> {
    let mut steps = Vec::with_capacity(plan.steps.len());
    let notes = preview_each(plan, workspace, policy, |_, s| steps.push(s))?;
    Ok(Preview {
        plan_id: plan.plan_id.clone(),
        plan_sha256: plan.sha256.clone(),
        intent: plan.intent,
        steps,
        notes,
    })
}

/// The preview step by step: `each` gets every step's preview in execution order (with the step's
/// index in `plan.steps`) and may drop it, so the memory a preview needs does not grow with the
/// plan (SPEC §11: a 100 000-step plan is approved in under 64 MB). Returns the plan-level notes.
///
/// Every step's arguments are substituted before the first call, so a plan that cannot be
/// previewed fails before anything is shown. The simulated workspace keeps a file's content only
/// until the last step that changes it.
pub fn preview_each(
    plan: &Plan,
    workspace: &Workspace,
    policy: &Policy,
    each: impl FnMut(usize, StepPreview),
) -> Result<Vec<String>, Vec<Problem>> {
    let walk = Walk::new(plan, workspace)?;
    let notes = walk.notes(plan, workspace, policy);
    walk.run(plan, workspace, policy, each);
    Ok(notes)
}

/// [`notes`], and what the workspace itself says about what commands will see (a credential in
/// its `.git/config`).
pub fn workspace_notes(plan: &Plan, workspace: &Workspace, policy: &Policy) -> Vec<String> {
    let mut notes = notes(plan, policy, workspace);
    notes.extend(git_credential_note(workspace, policy));
    notes
}

/// A warning when the workspace's `.git/config` holds a credential a checkout persisted: what the
/// policy's sandbox mode shows commands of it (`auto`: either, so both are said).
fn git_credential_note(workspace: &Workspace, policy: &Policy) -> Option<String> {
    let (_, found) = crate::policy::credentials::workspace_git_config(workspace.root())?;
    let hidden = match policy.sandbox {
        SandboxMode::Bwrap => Some(true),
        SandboxMode::Landlock | SandboxMode::None => Some(false),
        SandboxMode::Auto => None,
    };
    Some(crate::policy::credentials::git_config_warning(
        &found.keys,
        hidden,
    ))
}

/// A preview ready to run: the execution order, the variables, and where each file is changed
/// for the last time. Preparing substitutes every step's arguments, so a plan that cannot be
/// previewed fails here, before anything is shown (callers that write the preview as they go,
/// like `preview --json`, prepare first).
pub struct Walk {
    order: Vec<usize>,
    vars: Variables,
    /// By position in `order`: the last step that changes its file (see [`last_changes`]).
    last_change: Vec<bool>,
    /// Which steps may run at the same time (`None` above `schedule::PAIRS_MAX_STEPS`).
    overlap: Option<crate::executor::schedule::Overlap>,
}

impl Walk {
    /// Prepares the preview of `plan`, or the problems that make it impossible.
    pub fn new(plan: &Plan, workspace: &Workspace) -> Result<Self, Vec<Problem>> {
        let order = dependency_order(plan)?;
        let vars = Variables::new(&plan.variables, &builtins(plan, workspace, "(preview)"));
        let last_change = last_changes(plan, &order, &vars)?;
        let overlap = (plan.steps.len() <= crate::executor::schedule::PAIRS_MAX_STEPS)
            .then(|| {
                let footprints = crate::executor::schedule::footprints(plan, &vars);
                crate::executor::schedule::overlap(plan, &order, &footprints)
            })
            .flatten();
        Ok(Walk {
            order,
            vars,
            last_change,
            overlap,
        })
    }

    /// The plan-level notes ([`workspace_notes`]) and what `--jobs` will do: the number of steps run at once
    /// without the flag (the policy's and the plan's `jobs`), and which steps run alone however
    /// many jobs are allowed, why, and what would change that.
    pub fn notes(&self, plan: &Plan, workspace: &Workspace, policy: &Policy) -> Vec<String> {
        use crate::events::id_list;
        use crate::executor::schedule::{JobsSource, effective_jobs, run_alone};
        let mut out = workspace_notes(plan, workspace, policy);
        let (jobs, from) = effective_jobs(None, policy.jobs, plan.defaults.jobs);
        out.push(match from {
            JobsSource::Default => "jobs: 1 (default: one step at a time; --jobs N, the policy's \
                                    jobs or the plan's defaults.jobs lets independent steps overlap)"
                .to_string(),
            _ => format!("jobs: {jobs} ({}; --jobs overrides it)", from.label()),
        });
        if let Some(overlap) = &self.overlap {
            for (why, ids) in run_alone(plan, overlap) {
                out.push(format!(
                    "jobs: with more than one job, {} still run{} alone: {}",
                    id_list(&ids),
                    if ids.len() == 1 { "s" } else { "" },
                    why.why()
                ));
            }
        }
        out
    }

    /// Previews every step in order, handing each (with its index in `plan.steps`) to `each`.
    pub fn run(
        self,
        plan: &Plan,
        workspace: &Workspace,
        policy: &Policy,
        mut each: impl FnMut(usize, StepPreview),
    ) {
        let mut sim = Simulation::new(workspace, policy);
        let mut opaque_before = false;
        let mut beside: Vec<Vec<String>> = self
            .overlap
            .as_ref()
            .map(|o| {
                o.beside
                    .iter()
                    .map(|b| b.iter().map(|&j| plan.steps[j].step_id.clone()).collect())
                    .collect()
            })
            .unwrap_or_default();
        for (pos, &i) in self.order.iter().enumerate() {
            let step = &plan.steps[i];
            // Substituted once already in `new`: it does not fail the second time.
            let Ok(args) = substitute_arguments(step, &self.vars) else {
                continue;
            };
            let effect = effect_of(&step.tool, &args, &mut sim, opaque_before);
            if matches!(
                effect,
                Effect::Command { .. } | Effect::Agent { .. } | Effect::McpCall { .. }
            ) {
                opaque_before = true;
            }
            if self.last_change.get(pos).copied().unwrap_or(false)
                && let Some(path) = simulated_path(&step.tool, &args)
            {
                sim.forget(path);
            }
            each(
                i,
                StepPreview {
                    step_id: step.step_id.clone(),
                    tool: step.tool.clone(),
                    effect,
                    beside: beside.get_mut(i).map(std::mem::take).unwrap_or_default(),
                    verify: step
                        .verify
                        .iter()
                        .flat_map(|v| &v.commands)
                        .map(|c| self.vars.substitute(c).unwrap_or_else(|_| c.clone()))
                        .collect(),
                    confirm: confirmation_reason(step, &args, workspace, policy),
                },
            );
        }
    }
}

/// The plan-level notes of a preview: what the policy lets commands reach, and its MCP servers.
pub fn notes(plan: &Plan, policy: &Policy, workspace: &Workspace) -> Vec<String> {
    network_notes(policy)
        .into_iter()
        .chain(mcp_notes(plan, policy, workspace))
        .collect()
}

/// Why each step that asks for confirmation will ask, in execution order (`each` gets the step's
/// index in `plan.steps` and the reason): what `validate` reports, without simulating any file.
pub fn each_confirmation(
    plan: &Plan,
    workspace: &Workspace,
    policy: &Policy,
    mut each: impl FnMut(usize, String),
) -> Result<(), Vec<Problem>> {
    // Substituted up front as in `preview_each`, so a failure reports nothing half-way.
    let walk = Walk::new(plan, workspace)?;
    for i in walk.order {
        let step = &plan.steps[i];
        let Ok(args) = substitute_arguments(step, &walk.vars) else {
            continue;
        };
        if let Some(why) = confirmation_reason(step, &args, workspace, policy) {
            each(i, why);
        }
    }
    Ok(())
}

/// The file a step's simulation reads and changes (the `path` of `file_write`, `file_create`,
/// `file_edit` and `file_delete`, as [`effect_of`] uses it), or `None` for a step that leaves the
/// simulated workspace alone.
fn simulated_path<'a>(tool: &str, args: &'a Value) -> Option<&'a str> {
    match tool {
        "file_write" | "file_create" | "file_edit" | "file_delete" => {
            args.get("path").and_then(Value::as_str)
        }
        _ => None,
    }
}

/// For each position in `order`: whether it is the last step there that changes its file (after
/// it, the simulation can forget the file's content). Substitutes every step's arguments; the
/// first step that cannot be substituted is the error, as when previewing it.
fn last_changes(plan: &Plan, order: &[usize], vars: &Variables) -> Result<Vec<bool>, Vec<Problem>> {
    let mut last: HashMap<String, usize> = HashMap::new();
    for (pos, &i) in order.iter().enumerate() {
        let step = &plan.steps[i];
        let args = substitute_arguments(step, vars)?;
        if let Some(path) = simulated_path(&step.tool, &args) {
            match last.get_mut(path) {
                Some(p) => *p = pos,
                None => {
                    last.insert(path.to_string(), pos);
                }
            }
        }
    }
    let mut out = vec![false; order.len()];
    for pos in last.into_values() {
        out[pos] = true;
    }
    Ok(out)
}

/// Why the step's call will ask for confirmation, by the rules the executor applies (the step's
/// `requires_confirmation`, the policy's `confirm_tools`, a command outside
/// `auto_approve_commands`). `allow_commands` only *allows* a program; asking is decided by
/// `auto_approve_commands`, which is why a plan can validate and still be denied (exit 33).
fn confirmation_reason(
    step: &crate::plan::Step,
    args: &Value,
    workspace: &Workspace,
    policy: &Policy,
) -> Option<String> {
    if step.requires_confirmation {
        return Some("the step sets requires_confirmation".into());
    }
    if policy.tool_needs_confirmation(&step.tool) {
        return Some(format!(
            "the policy asks before every {} (confirm_tools)",
            step.tool
        ));
    }
    if step.tool != crate::tools::command::NAME {
        return None;
    }
    let a: CommandArgs = parse(&step.tool, args).ok()?;
    let argv = argv_of(&a).ok()?;
    crate::tools::command::asks(args, workspace, policy).then(|| {
        format!(
            "{} is allowed but not in auto_approve_commands (add it there to run it without asking)",
            argv.first().map(String::as_str).unwrap_or_default()
        )
    })
}

/// Parses `args` with the tool's own argument struct, so a name is read here exactly as the tool
/// reads it; an argument the tool would refuse makes the step one that will fail.
fn typed<T: serde::de::DeserializeOwned>(tool: &str, args: &Value) -> Result<T, Effect> {
    parse::<T>(tool, args).map_err(|e| Effect::WillFail {
        reason: e.to_string(),
    })
}

/// The effect of one step with substituted `args`.
fn effect_of(tool: &str, args: &Value, sim: &mut Simulation, assumed: bool) -> Effect {
    let effect = match tool {
        "file_write" | "file_create" => typed::<WriteArgs>(tool, args)
            .map(|a| write_effect(sim, a, tool == "file_create", assumed)),
        "file_edit" => typed::<EditArgs>(tool, args).map(|a| edit_effect(sim, a, assumed)),
        "file_delete" => typed::<DeleteArgs>(tool, args).map(|a| match sim.content(&a.path) {
            Ok(None) => Effect::WillFail {
                reason: format!("{} does not exist", a.path),
            },
            _ => sim.change(&a.path, None, assumed),
        }),
        "run_command" => typed::<CommandArgs>(tool, args).and_then(|a| {
            let argv = argv_of(&a).map_err(|e| Effect::WillFail {
                reason: e.to_string(),
            })?;
            let mut env: Vec<String> = a.env.clone().unwrap_or_default().into_keys().collect();
            env.sort();
            let cwd = or_dot(a.cwd.as_deref().unwrap_or("")).to_string();
            let program = program_of(sim, &argv[0], &cwd, &a)?;
            Ok(Effect::Command {
                argv,
                cwd,
                env,
                program,
            })
        }),
        "agent" => typed::<AgentArgs>(tool, args).map(|a| agent_effect(sim, args, a)),
        // cargo runs build scripts and writes its build directory: a command like any other.
        "lsp_check" => typed::<LspArgs>(tool, args).map(|a| Effect::Command {
            argv: ["cargo", "check", "--message-format=json"]
                .map(String::from)
                .to_vec(),
            cwd: a.path,
            env: Vec::new(),
            program: None,
        }),
        other if crate::policy::mcp_server_of(other).is_some() => {
            let server = crate::policy::mcp_server_of(other).unwrap_or_default();
            Ok(Effect::McpCall {
                server: server.to_string(),
                url: sim
                    .policy
                    .mcp
                    .servers
                    .get(server)
                    .and_then(|s| s.url.clone()),
                tool: other
                    .strip_prefix(&format!("mcp__{server}__"))
                    .unwrap_or(other)
                    .to_string(),
                arguments: args.to_string(),
            })
        }
        other => Ok(Effect::ReadOnly {
            summary: match args.get("path").and_then(Value::as_str) {
                None | Some("") => other.to_string(),
                Some(p) => format!("{other} {p}"),
            },
        }),
    };
    effect.unwrap_or_else(|failed| failed)
}

/// `file_write` (or `file_create`, which never overwrites).
fn write_effect(sim: &mut Simulation, a: WriteArgs, create: bool, assumed: bool) -> Effect {
    match sim.content(&a.path) {
        Ok(Some(_)) if create => Effect::WillFail {
            reason: format!("{} already exists (file_create never overwrites)", a.path),
        },
        Err(reason) => Effect::WillFail { reason },
        Ok(_) => sim.change(&a.path, Some(a.contents), assumed),
    }
}

/// `file_edit`: the tool's own [`apply`](crate::tools::files::apply_edit), so the diff shown is the
/// diff the run writes, and an edit whose `expect` no longer matches is shown as one that will fail.
fn edit_effect(sim: &mut Simulation, a: EditArgs, assumed: bool) -> Effect {
    let path = a.path.as_str();
    let op = match a.op("file_edit") {
        Ok(op) => op,
        Err(e) => {
            return Effect::WillFail {
                reason: e.to_string(),
            };
        }
    };
    match sim.content(path) {
        Err(reason) => Effect::WillFail { reason },
        Ok(None) => Effect::WillFail {
            reason: format!("{path} does not exist"),
        },
        Ok(Some(text)) => match apply_edit(&op, &text, path) {
            Err(reason) => Effect::WillFail { reason },
            Ok(applied) => sim.change(path, Some(applied.after), assumed),
        },
    }
}

/// An agent step: the tools it may use and what it is told; for a skill, the resolved skill.
fn agent_effect(sim: &Simulation, args: &Value, a: AgentArgs) -> Effect {
    // A skill: what the model will be told and offered (docs/agents.md).
    if let Ok(Some(r)) = crate::plan::skills::resolve_step(sim.workspace, args) {
        let body: String = r
            .pieces
            .iter()
            .map(|p| match p {
                crate::plan::skills::Piece::Text { text } => text.clone(),
                crate::plan::skills::Piece::Command { command, .. } => {
                    format!("[output of run_command `{command}`]\n")
                }
            })
            .collect();
        return Effect::Agent {
            instruction: format!(
                "skill {} ({}, sha256 {}…): {}",
                r.skill.name,
                r.skill.path,
                r.skill.sha256.get(..12).unwrap_or_default(),
                body.trim()
            ),
            tools: r.tools,
        };
    }
    let instruction = match (a.instruction, a.skill) {
        (Some(i), _) => i,
        (None, Some(s)) => format!("skill {s}"),
        (None, None) => String::new(),
    };
    Effect::Agent {
        instruction,
        tools: a.tools,
    }
}

/// Which program a command step runs (see [`crate::policy::host::program`]), as `preview` says it.
fn program_of(
    sim: &Simulation,
    written: &str,
    cwd: &str,
    a: &CommandArgs,
) -> Result<Option<String>, Effect> {
    use crate::policy::host::program::{ProgramError, resolve};
    let cwd = sim.workspace.root().join(cwd);
    let env: Vec<(String, String)> = a.env.clone().unwrap_or_default().into_iter().collect();
    let path = crate::policy::env::child_env(sim.policy, &env)
        .into_iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v);
    match resolve(written, sim.workspace, &cwd, path.as_deref()) {
        Ok(p) if p.real != p.exec => Ok(Some(format!(
            "{written} → {} → {}",
            p.exec.display(),
            p.real.display()
        ))),
        Ok(p) => Ok(Some(format!("{written} → {}", p.exec.display()))),
        Err(ProgramError::Missing { path, .. }) => Ok(Some(format!(
            "{written}: {} is not there yet — an earlier step is to create it (checked again \
             when the step starts)",
            path.display()
        ))),
        Err(e) => Err(Effect::WillFail {
            reason: e.to_string(),
        }),
    }
}

/// What `preview` says about the network the policy opens.
/// The MCP servers the policy declares and what the plan's approval pinned of each (identity,
/// and per allowed tool its hash and approved description), or that nothing is pinned yet.
fn mcp_notes(plan: &Plan, policy: &Policy, workspace: &Workspace) -> Vec<String> {
    let pins = plan
        .source
        .as_deref()
        .and_then(|src| crate::plan::auth::load(src, plan).ok())
        .filter(|a| a.status == crate::plan::auth::AuthStatus::Approved)
        .map(|a| a.mcp)
        .unwrap_or_default();
    let mut notes = Vec::new();
    for (name, server) in &policy.mcp.servers {
        let mut env = vec!["PATH".to_string()];
        env.extend(server.env.iter().cloned());
        let how = match &server.url {
            Some(url) => {
                let headers = if server.headers.is_empty() {
                    String::new()
                } else {
                    let names: Vec<&str> = server.headers.keys().map(String::as_str).collect();
                    format!("headers {} from the environment; ", names.join(", "))
                };
                format!(
                    "remote, over Streamable HTTP at {url} ({headers}its host must be in \
                     network.allow)"
                )
            }
            None => format!(
                "runs {:?} as a command (environment {})",
                server.command,
                env.join(", ")
            ),
        };
        notes.push(format!(
            "mcp server {name}: {how}; startup {} s, calls {} s",
            server.startup_timeout().as_secs(),
            server.call_timeout().as_secs()
        ));
        // Resolved as a command's program is, so the reviewer sees what will start.
        notes.extend(
            crate::tools::mcp::server_program(server, workspace).map(|p| match p {
                Ok(p) if p.real != p.exec => format!(
                    "  program: {} → {} → {}",
                    server.command[0],
                    p.exec.display(),
                    p.real.display()
                ),
                Ok(p) => format!("  program: {} → {}", server.command[0], p.exec.display()),
                Err(e) => format!("  program: CANNOT START: {e}"),
            }),
        );
        match pins.get(name) {
            None => notes.push(format!(
                "  not pinned: approving starts {name} and pins its tools {}",
                server.tools.join(", ")
            )),
            Some(pin) => {
                notes.push(format!(
                    "  pinned: {} {} (protocol {})",
                    pin.server_name, pin.server_version, pin.protocol_version
                ));
                for (tool, t) in &pin.tools {
                    let confirm = if server.confirms(tool) {
                        "asks for confirmation"
                    } else {
                        "no confirmation"
                    };
                    let short: String = t.description.chars().take(200).collect();
                    notes.push(format!(
                        "  {} (sha256 {}, {confirm}): {short:?}",
                        crate::policy::mcp_tool_name(name, tool),
                        t.sha256.get(..16).unwrap_or(&t.sha256)
                    ));
                }
            }
        }
    }
    notes
}

fn network_notes(policy: &Policy) -> Vec<String> {
    if policy.network.is_empty() {
        return vec!["network: off (no host allowed)".to_string()];
    }
    vec![format!(
        "network: commands may reach {} through the run's proxy (registry: entries are read from \
         the clients' configuration when the run starts); under bwrap nothing else is reachable; \
         under Landlock a command may also open TCP connections to the proxy's port on another \
         host (Landlock rules name ports, not hosts)",
        policy.network.allow.join(", ")
    )]
}

fn or_dot(p: &str) -> &str {
    if p.is_empty() { "." } else { p }
}

/// The preview for a person: one block per step, diffs indented under it. Text from the plan and
/// the workspace passes the terminal sanitiser.
pub fn render(preview: &Preview) -> String {
    let mut out = heading(&preview.plan_id, &preview.plan_sha256, preview.intent);
    let total = preview.steps.len();
    for (n, s) in preview.steps.iter().enumerate() {
        out.push_str(&step_block(n, total, s));
    }
    out.push_str(&notes_block(&preview.notes));
    out
}

/// [`render`] block by block, holding one step at a time: `sink` gets the heading, each step's
/// block and the notes, in order, each sanitised (their concatenation is what [`render`] returns).
/// Returns the indices in `plan.steps` of the steps that ask for confirmation, and of those that
/// will fail as the workspace is now.
pub fn render_each(
    plan: &Plan,
    workspace: &Workspace,
    policy: &Policy,
    mut sink: impl FnMut(&str),
) -> Result<Rendered, Vec<Problem>> {
    // Before the heading: a plan that cannot be previewed shows nothing.
    let walk = Walk::new(plan, workspace)?;
    let notes = walk.notes(plan, workspace, policy);
    sink(&heading(&plan.plan_id, &plan.sha256, plan.intent));
    let total = plan.steps.len();
    let mut n = 0;
    let mut asking = Vec::new();
    let mut failing = Vec::new();
    walk.run(plan, workspace, policy, |i, s| {
        if s.confirm.is_some() {
            asking.push(i);
        }
        if matches!(s.effect, Effect::WillFail { .. }) {
            failing.push(i);
        }
        sink(&step_block(n, total, &s));
        n += 1;
    });
    sink(&notes_block(&notes));
    Ok(Rendered { asking, failing })
}

/// What [`render_each`] found beside the text, by index in `plan.steps`.
pub struct Rendered {
    /// The steps that ask for confirmation.
    pub asking: Vec<usize>,
    /// The steps that will fail as the workspace is now (`WILL FAIL`).
    pub failing: Vec<usize>,
}

/// The steps that will fail as the workspace is now (`WILL FAIL`), by index in `plan.steps`:
/// `preview` exits non-zero when there are any.
pub fn failing_steps(
    plan: &Plan,
    workspace: &Workspace,
    policy: &Policy,
) -> Result<Vec<usize>, Vec<Problem>> {
    let mut failing = Vec::new();
    preview_each(plan, workspace, policy, |i, s| {
        if matches!(s.effect, Effect::WillFail { .. }) {
            failing.push(i);
        }
    })?;
    Ok(failing)
}

/// The first lines: the plan and its intent (sanitised).
fn heading(plan_id: &str, sha256: &str, intent: Option<crate::plan::Intent>) -> String {
    use std::fmt::Write as _;
    let mut out = format!("preview of plan {plan_id} (sha256 {sha256}), nothing written:\n");
    match intent {
        Some(i) if i.is_read_only() => {
            let _ = writeln!(out, "intent: {} (changes nothing)", i.as_str());
        }
        Some(i) => {
            let _ = writeln!(out, "intent: {}", i.as_str());
        }
        None => {}
    }
    crate::terminal::text(&out).into_owned()
}

/// The closing lines: one per note (sanitised).
fn notes_block(notes: &[String]) -> String {
    let mut out = String::new();
    for note in notes {
        out.push_str(note);
        out.push('\n');
    }
    crate::terminal::text(&out).into_owned()
}

/// The block of the `n`-th step (from 0) of `total` (sanitised).
fn step_block(n: usize, total: usize, s: &StepPreview) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = write!(out, "[{}/{total}] {} {}: ", n + 1, s.step_id, s.tool);
    match &s.effect {
        Effect::FileChange {
            path,
            diff,
            assumed,
        } => {
            let note = if *assumed {
                " (assuming the earlier command/agent steps leave it alone)"
            } else {
                ""
            };
            if diff.is_empty() {
                let _ = writeln!(out, "{path} unchanged{note}");
            } else {
                let _ = writeln!(out, "changes {path}{note}");
                for line in diff.lines() {
                    let _ = writeln!(out, "    {line}");
                }
            }
        }
        Effect::Command {
            argv,
            cwd,
            env,
            program,
        } => {
            let words: Vec<String> = argv.iter().map(|a| format!("{a:?}")).collect();
            let _ = write!(out, "runs [{}] in {cwd}", words.join(", "));
            if !env.is_empty() {
                let _ = write!(out, " with env {}", env.join(", "));
            }
            let _ = writeln!(out, " (its effect on files cannot be known in advance)");
            if let Some(p) = program {
                let _ = writeln!(out, "    program: {p}");
            }
        }
        Effect::Agent { instruction, tools } => {
            let short: String = instruction.chars().take(200).collect();
            let _ = writeln!(
                out,
                "a model chooses calls among [{}] for: {short:?} (effect unknown in advance)",
                tools.join(", ")
            );
        }
        Effect::McpCall {
            server,
            url,
            tool,
            arguments,
        } => {
            let how = match url {
                Some(url) => format!("a remote server at {url}"),
                None => "the server runs as a command".to_string(),
            };
            let _ = writeln!(
                out,
                "calls tool {tool} of MCP server {server} with {arguments} ({how}: its effect \
                 cannot be known in advance)"
            );
        }
        Effect::ReadOnly { summary } => {
            let _ = writeln!(out, "reads only ({summary})");
        }
        Effect::WillFail { reason } => {
            let _ = writeln!(out, "WILL FAIL: {reason}");
        }
    }
    match s.verify.as_slice() {
        [] => {}
        [one] => {
            let _ = writeln!(out, "    then verifies with: {one:?}");
        }
        many => {
            let words: Vec<String> = many.iter().map(|c| format!("{c:?}")).collect();
            let _ = writeln!(
                out,
                "    then verifies with, all at the same time (the first failure cancels the \
                 others): {}",
                words.join(", ")
            );
        }
    }
    if !s.beside.is_empty() {
        let _ = writeln!(
            out,
            "    with --jobs above 1, may run at the same time as: {}",
            s.beside.join(", ")
        );
    }
    if let Some(why) = &s.confirm {
        let _ = writeln!(out, "    asks for confirmation: {why}");
    }
    crate::terminal::text(&out).into_owned()
}
