//! The `acode-run` command line: parse flags, do the command, map every error to an exit code here
//! and nowhere else.

mod attest;
mod doctor;
pub mod exit_codes;
pub mod flags;
mod fleet;
mod hints;
mod import;
mod mcp;
mod replay;
mod reports;
mod shell;
mod stages;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use flags::{Args, Command, Parsed};

use crate::error::exit;
use crate::events::{Event, EventKind, RefusalProblem};
use crate::executor::{ConfirmMode, Driven, Fanout, ProgressCallback};
use crate::plan::{self, AuthStatus, Plan, PlanAuthorization};
use crate::policy::Policy;
use crate::redact::Redactor;
use crate::runner::session::{ApprovalOutlook, Session, SessionError, SessionOptions, Validated};
use crate::runner::{PlanRunner, RunOptions, RunSettings, RunnerError, Target};
use crate::store::Store;
use crate::tools::ToolRegistry;
use crate::workspace::Workspace;
use shell::{Origin, Shell, Stream};

/// A failure the CLI reports: a message for stderr and the exit code.
#[derive(Debug)]
pub struct CliError {
    /// Exit code (SPEC §10).
    pub code: i32,
    /// What to tell the user.
    pub message: String,
    /// Every problem with its location, for `--jsonl`/`--json` (empty: the message is the one
    /// problem).
    pub problems: Vec<RefusalProblem>,
}

impl CliError {
    fn new(code: i32, message: impl Into<String>) -> Self {
        CliError {
            code,
            message: message.into(),
            problems: Vec::new(),
        }
    }

    /// A plan that could not be read or is invalid, with each problem's location.
    fn plan(e: &plan::PlanError) -> Self {
        let mut err = CliError::new(e.exit_code(), e.to_string());
        if let plan::PlanError::Invalid { problems, .. } = e {
            err.problems = problems.iter().map(refusal_problem).collect();
        }
        err
    }

    /// A run that could not start, with each problem's location.
    fn execution(e: &crate::executor::ExecutionError) -> Self {
        let mut err = CliError::new(e.exit_code(), e.to_string());
        if let crate::executor::ExecutionError::InvalidPlan(problems) = e {
            err.problems = problems.iter().map(refusal_problem).collect();
        }
        err
    }
}

impl From<crate::runner::import::ImportFailed> for CliError {
    fn from(e: crate::runner::import::ImportFailed) -> Self {
        match e {
            crate::runner::import::ImportFailed::Session(e) => e.into(),
            other => CliError::new(other.exit_code(), other.to_string()),
        }
    }
}

impl From<SessionError> for CliError {
    fn from(e: SessionError) -> Self {
        match e {
            SessionError::Plan(e) => CliError::plan(&e),
            other => CliError::new(other.exit_code(), other.to_string()),
        }
    }
}

fn refusal_problem(p: &plan::Problem) -> RefusalProblem {
    RefusalProblem {
        location: p.location.clone(),
        message: p.message.clone(),
        kind: match p.kind {
            plan::ProblemKind::Sandbox => "sandbox",
            _ => "invalid",
        }
        .to_string(),
        line: p.line,
    }
}

/// What kind of refusal an exit code stands for, in `run_refused` problems.
fn refusal_kind(code: i32) -> &'static str {
    match code {
        exit::USAGE => "usage",
        exit::UNAUTHORIZED => "unauthorized",
        exit::RERUN_NEEDED => "rerun_needed",
        exit::PROMISE_NOT_HELD => "promise_not_held",
        exit::SANDBOX => "sandbox",
        _ => "internal",
    }
}

/// With `--jsonl` or `--json`, writes the one event / object an invocation that ended without a run
/// owes a machine reading stdout (SPEC §10).
fn report_refusal(
    shell: &Shell,
    machine: Machine,
    args: Option<&Args>,
    e: &CliError,
    location: &str,
    run_id: &str,
) {
    let listed: Vec<String> = e
        .problems
        .iter()
        .map(|p| format!("{}: {}", p.location, p.message))
        .collect();
    reports::write_refusal(shell, args, location, e.code, &e.message, &listed);
    if machine == Machine::None {
        return;
    }
    let problems = if e.problems.is_empty() {
        vec![RefusalProblem {
            location: location.to_string(),
            message: e.message.clone(),
            kind: refusal_kind(e.code).to_string(),
            line: None,
        }]
    } else {
        e.problems.clone()
    };
    let kind = EventKind::RunRefused {
        exit_code: e.code,
        error: e.message.clone(),
        problems,
    };
    let value = match machine {
        Machine::Jsonl => serde_json::to_value(Event::standalone(run_id, kind)),
        _ => serde_json::to_value(&kind).map(|mut v| {
            if let Some(obj) = v.as_object_mut() {
                obj.insert("status".into(), "refused".into());
                // No run: `null`, not an empty id (a resume names the run it refused).
                let id = (!run_id.is_empty()).then(|| run_id.to_string());
                obj.insert("run_id".into(), id.into());
                obj.remove("type");
            }
            v
        }),
    };
    if let Ok(v) = value {
        // The refusal's message may quote what the plan or a command said: every rule.
        if machine == Machine::Jsonl {
            shell.out_json_line(&v, Origin::Outside);
        } else {
            shell.out_json(&v, Origin::Outside);
        }
    }
}

/// Which machine-readable output the command line asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Machine {
    None,
    Jsonl,
    Json,
}

impl Machine {
    /// From raw arguments, for errors found before they parse.
    fn from_raw(args: &[std::ffi::OsString]) -> Machine {
        if args.iter().any(|a| a == "--jsonl") {
            Machine::Jsonl
        } else if args.iter().any(|a| a == "--json") {
            Machine::Json
        } else {
            Machine::None
        }
    }

    fn of(args: &Args) -> Machine {
        if args.jsonl {
            Machine::Jsonl
        } else if args.json {
            Machine::Json
        } else {
            Machine::None
        }
    }
}

/// The runner's own secrets, read once at start (SPEC §6): from `ACODE_APPROVAL_KEY_FILE` /
/// `ACODE_LLM_API_KEY_FILE`, or the variables themselves.
#[derive(Default)]
struct RunnerSecrets {
    approval_key: Option<Vec<u8>>,
    llm_api_key: Option<String>,
}

impl RunnerSecrets {
    fn read() -> Result<Self, crate::redact::SecretError> {
        Ok(RunnerSecrets {
            approval_key: plan::auth::approval_key()?,
            llm_api_key: crate::redact::runner_secret("ACODE_LLM_API_KEY")?,
        })
    }

    /// The values, for the redactor.
    fn values(&self) -> Vec<String> {
        let mut v: Vec<String> = self.llm_api_key.iter().cloned().collect();
        if let Some(k) = &self.approval_key {
            v.push(String::from_utf8_lossy(k).into_owned());
        }
        v
    }
}

/// The plan-file JSON Schema shipped in `docs/`.
pub const PLAN_SCHEMA: &str = crate::plan::SCHEMA;
/// The `--jsonl` event JSON Schema shipped in `docs/`.
pub const EVENTS_SCHEMA: &str = include_str!("../../docs/events.schema.json");

/// Runs the CLI with the arguments after the program name; returns the process exit code.
pub fn main_with_args(args: Vec<std::ffi::OsString>) -> i32 {
    let redactor = Arc::new(Redactor::from_env());
    let shell = Shell::new(redactor.clone());
    let raw_machine = Machine::from_raw(&args);
    let parsed = match flags::parse(args) {
        Ok(p) => p,
        Err(e) => {
            shell.error(&e);
            let err = CliError::new(exit::USAGE, e);
            report_refusal(&shell, raw_machine, None, &err, "command line", "");
            return err.code;
        }
    };
    let args = match parsed {
        Parsed::Help(text) => {
            shell.out_page(&text);
            return exit::OK;
        }
        Parsed::Usage(text) => {
            shell.err_line(format_args!("{}", text.trim_end()));
            shell.error("no command or plan given");
            let err = CliError::new(exit::USAGE, "no command or plan given".to_string());
            report_refusal(&shell, raw_machine, None, &err, "command line", "");
            return err.code;
        }
        Parsed::Version => {
            shell.out_line(format_args!("acode-run {}", flags::VERSION));
            return exit::OK;
        }
        Parsed::Run(a) => a,
    };
    let shell = shell.machine(Machine::of(&args) != Machine::None);
    let secrets = match RunnerSecrets::read() {
        Ok(s) => s,
        Err(e) => {
            shell.error(&e);
            let err = CliError::new(exit::USAGE, e.to_string());
            report_refusal(
                &shell,
                Machine::of(&args),
                Some(&args),
                &err,
                "environment",
                "",
            );
            return err.code;
        }
    };
    redactor.add_values(secrets.values());
    // A `--var` whose name looks secret is a secret from the start, before the plan is read.
    redactor.add_values(
        args.vars
            .iter()
            .filter(|(k, _)| crate::redact::is_secret_name(k))
            .map(|(_, v)| v.clone()),
    );
    match dispatch(&args, &shell, &secrets) {
        Ok(code) => code,
        Err(e) => {
            // The runner's own message (the Shell redacts known secrets and token formats, its
            // words stay). Every next step it prints carries the options that chose the workspace.
            shell.error(hints::carry(&args, &e.message));
            // A refusal that depended on the workspace names it (and the policy it read).
            if matches!(
                e.code,
                exit::USAGE | exit::UNAUTHORIZED | exit::SANDBOX | exit::PROMISE_NOT_HELD
            ) && let Some(note) = hints::workspace_note(&args)
            {
                shell.err_line(note);
            }
            // The plan file or the run id the command was about.
            // (`import odincode PLAN`: the plan, not the source's name.)
            let subject = usize::from(args.command == Command::Import);
            let location = args
                .positionals
                .get(subject)
                .cloned()
                .unwrap_or_else(|| "command line".to_string());
            let run_id = if args.command == Command::Resume {
                location.as_str()
            } else {
                ""
            };
            report_refusal(
                &shell,
                Machine::of(&args),
                Some(&args),
                &e,
                &location,
                run_id,
            );
            e.code
        }
    }
}

fn dispatch(args: &Args, shell: &Shell, secrets: &RunnerSecrets) -> Result<i32, CliError> {
    match args.command {
        Command::Run => cmd_run(args, shell, secrets),
        Command::Resume => cmd_resume(args, shell, secrets),
        Command::Validate => cmd_validate(args, shell),
        Command::Preview => cmd_preview(args, shell),
        Command::Draft => stages::cmd_draft(args, shell, secrets),
        Command::Review => stages::cmd_review(args, shell, secrets),
        Command::Do => stages::cmd_do(args, shell, secrets),
        Command::Approve => cmd_decide(args, shell, secrets, AuthStatus::Approved),
        Command::Reject => cmd_decide(args, shell, secrets, AuthStatus::Rejected),
        Command::Runs => cmd_runs(args, shell),
        Command::Show => cmd_show(args, shell),
        Command::Artifact => cmd_artifact(args, shell),
        Command::Report => reports::cmd_report(args, shell),
        Command::Skills => cmd_skills(args, shell),
        Command::Mcp => mcp::cmd_mcp(args, shell),
        Command::Import => import::cmd_import(args, shell),
        Command::Export if args.jsonl => fleet::cmd_export_rows(args, shell),
        Command::Export => replay::cmd_export(args, shell),
        Command::Attest => attest::cmd_attest(args, shell),
        Command::Verify => attest::cmd_verify(args, shell),
        Command::Merge => fleet::cmd_merge(args, shell),
        Command::Doctor => doctor::cmd_doctor(args, shell),
        Command::Tools => {
            let registry = tools_registry(args)?;
            if args.json {
                // One document for programs: the tools, and what run_command may run here.
                let policy = session(args, None)?.policy()?;
                shell.out_json(&tools_document(&registry, &policy), Origin::Runner);
                return Ok(exit::OK);
            }
            shell.out_json(&registry.describe(), Origin::Runner);
            // For people (stderr, so `tools | jq` still reads one JSON document): which programs
            // run_command may run, and which ask first, when no policy file says otherwise.
            use crate::policy::{DEFAULT_ALLOWLIST, DEFAULT_CONFIRM_TOOLS};
            shell.err_line(format_args!("run_command's built-in allowlist (allowed, and run without asking): {}
                 acode-policy.json: \"allow_commands\" adds programs (they ask for confirmation \
                 unless also in \"auto_approve_commands\"), \"commands\" replaces the list.
                 Tools that always ask (\"confirm_tools\"): {}
                 (`acode-run tools --json` prints all of it as one JSON document, for this workspace's policy)",
                DEFAULT_ALLOWLIST.join(", "),
                DEFAULT_CONFIRM_TOOLS.join(", ")));
            Ok(exit::OK)
        }
        Command::Schema => match args.positionals[0].as_str() {
            "plan" => {
                shell.out_page(PLAN_SCHEMA);
                Ok(exit::OK)
            }
            "events" => {
                shell.out_page(EVENTS_SCHEMA);
                Ok(exit::OK)
            }
            other => Err(CliError::new(
                exit::USAGE,
                format!("unknown schema {other:?} (expected plan or events)"),
            )),
        },
    }
}

/// What the command line says about the session: `--workspace` (or the current directory),
/// `--db` or `ACODE_DB`, `--policy`.
pub(crate) fn session_options(args: &Args) -> SessionOptions {
    let (db, db_named_by) = match (&args.db, std::env::var_os("ACODE_DB")) {
        (Some(p), _) => (Some(p.clone()), Some("--db")),
        (None, Some(p)) => (Some(PathBuf::from(p)), Some("ACODE_DB")),
        (None, None) => (None, None),
    };
    SessionOptions {
        workspace: args.workspace.clone().unwrap_or_else(|| PathBuf::from(".")),
        db,
        db_named_by: db_named_by.map(String::from),
        policy: args.policy.clone(),
        redactor: None,
    }
}

/// The command line's session ([`Session`]), with `plan` protected when it lies in the
/// workspace.
pub(crate) fn session(args: &Args, plan: Option<&Path>) -> Result<Session, CliError> {
    Ok(Session::open(session_options(args), plan)?)
}

/// [`session`] whose store records through `redactor` (the command's, which learns the plan's
/// secrets).
pub(crate) fn redacted_session(
    args: &Args,
    plan: Option<&Path>,
    redactor: &Arc<Redactor>,
) -> Result<Session, CliError> {
    let mut options = session_options(args);
    options.redactor = Some(redactor.clone());
    Ok(Session::open(options, plan)?)
}

/// A session for a command that never opens the database (`skills`, `import`, `mcp tools`): a
/// misnamed `--db` is not its concern. `policy` replaces `--policy` when given (`mcp tools
/// POLICY`).
pub(crate) fn workspace_session(args: &Args, policy: Option<PathBuf>) -> Result<Session, CliError> {
    let mut options = session_options(args);
    options.db = None;
    options.db_named_by = None;
    options.policy = policy.or(options.policy);
    Ok(Session::open(options, None)?)
}

/// The workspace with the database, `.acode/` and the plan file (when it is inside) protected from
/// tool writes, and the database path.
fn sandboxed_workspace(args: &Args, plan: Option<&Path>) -> Result<(Workspace, PathBuf), CliError> {
    let session = session(args, plan)?;
    Ok((session.workspace().clone(), session.db_path().to_path_buf()))
}

/// `acode-run tools --json`: the tools (as `tools` prints them) and, as fields, what `run_command`
/// may run under the workspace's policy and which tools always ask.
fn tools_document(registry: &ToolRegistry, policy: &Policy) -> serde_json::Value {
    use crate::policy::DEFAULT_ALLOWLIST;
    let mut allowed: Vec<String> = match &policy.commands {
        Some(list) => list.clone(),
        None => DEFAULT_ALLOWLIST.iter().map(|s| s.to_string()).collect(),
    };
    allowed.extend(policy.allow_commands.iter().cloned());
    serde_json::json!({
        "tools": registry.describe(),
        "run_command": {
            "allowed_commands": allowed,
            "auto_approve_commands": policy.auto_approve_commands,
            "replaces_builtin_allowlist": policy.commands.is_some(),
        },
        "confirm_tools": policy.confirm_tools,
    })
}

/// What `acode-run tools` lists: the built-in tools, and the allowed tools of every MCP server the
/// policy declares, named as plans call them and described as `approve` would pin them — the
/// servers are started for it, by the code `approve` uses (see docs/mcp.md). A server that cannot
/// be started is an error (exit 2) naming it, as in `approve` and `mcp tools`.
fn tools_registry(args: &Args) -> Result<ToolRegistry, CliError> {
    let session = session(args, None)?;
    let ws = session.workspace();
    let policy = session.policy()?;
    if policy.mcp.is_empty() {
        return Ok(ToolRegistry::builtin());
    }
    let sandbox = session.sandbox(&policy, policy.sandbox)?;
    let pins = crate::tools::mcp::pin_servers(&policy, ws, &sandbox).map_err(|e| {
        CliError::new(
            exit::USAGE,
            format!("cannot list the tools of the policy's MCP servers: {e}"),
        )
    })?;
    crate::tools::mcp::registry(&policy, Some(&pins)).map_err(|e| CliError::new(exit::USAGE, e))
}

/// `skills`: every skill in the workspace, in search order; broken ones with their error.
fn cmd_skills(args: &Args, shell: &Shell) -> Result<i32, CliError> {
    let session = workspace_session(args, None)?;
    let ws = session.workspace();
    let found = plan::skills::list(ws);
    if args.json {
        let items: Vec<serde_json::Value> = found
            .iter()
            .map(|r| match r {
                Ok(s) => serde_json::json!({
                    "name": s.name, "description": s.front.description,
                    "tools": s.front.allowed_tools, "model": s.front.model,
                    "max_turns": s.front.max_turns, "path": s.path, "sha256": s.sha256,
                }),
                Err(e) => serde_json::json!({"error": e.to_string()}),
            })
            .collect();
        shell.out_json(&serde_json::json!({ "skills": items }), Origin::Runner);
        return Ok(exit::OK);
    }
    if found.is_empty() {
        shell.err_line(format_args!(
            "no skills found (looked in {})",
            plan::skills::SEARCH_DIRS.join(", ")
        ));
    }
    for r in &found {
        match r {
            Ok(s) => shell.out_line(format_args!(
                "{:<24} {:<40} tools: {:<30} {}",
                crate::terminal::line(&s.name),
                crate::terminal::line(s.front.description.as_deref().unwrap_or("-")),
                crate::terminal::line(
                    &s.front
                        .allowed_tools
                        .as_ref()
                        .map(|t| t.join(", "))
                        .unwrap_or_else(|| "(the step's)".into())
                ),
                s.path
            )),
            Err(e) => shell.out_line(format_args!(
                "error: {}",
                crate::terminal::line(&e.to_string())
            )),
        }
    }
    Ok(exit::OK)
}

fn cmd_validate(args: &Args, shell: &Shell) -> Result<i32, CliError> {
    let redactor = shell.redactor();
    let path = PathBuf::from(&args.positionals[0]);
    let session = redacted_session(args, Some(&path), redactor)?;
    match session.validate(&path, &args.vars) {
        Ok(Validated {
            plan,
            confirmations,
            confirmations_complete,
            skills,
            mcp_programs,
            ..
        }) => {
            let plan_id = redactor.redact(&plan.plan_id);
            if args.json {
                let skills: serde_json::Map<String, serde_json::Value> = skills
                    .into_iter()
                    .map(|(id, r)| (id, serde_json::to_value(r).unwrap_or_default()))
                    .collect();
                let mut out = serde_json::json!({"valid": true, "plan_id": plan_id, "steps": plan.steps.len(), "plan_sha256": plan.sha256});
                if confirmations_complete {
                    let asking: Vec<serde_json::Value> = confirmations
                        .iter()
                        .map(|(i, why)| serde_json::json!({"step_id": redactor.redact(&plan.steps[*i].step_id), "reason": why}))
                        .collect();
                    out["confirmations"] = serde_json::Value::Array(asking);
                    out["confirm_mode"] = confirm_mode(args).as_str().into();
                }
                if !skills.is_empty() {
                    out["skills"] = serde_json::Value::Object(skills);
                }
                let servers = mcp_programs;
                if !servers.is_empty() {
                    out["mcp_servers"] = serde_json::json!(
                        servers
                            .into_iter()
                            .map(|(name, program)| (name, serde_json::json!({"program": program})))
                            .collect::<serde_json::Map<_, _>>()
                    );
                }
                shell.out_json_line(&out, Origin::Runner);
            } else {
                shell.err_line(format_args!(
                    "{}: valid plan {} ({}, sha256 {})",
                    path.display(),
                    plan_id,
                    crate::terminal::count(plan.steps.len(), "step"),
                    plan.sha256
                ));
                for (name, program) in &mcp_programs {
                    shell.err_line(format_args!(
                        "  mcp server {}: starts {}",
                        crate::terminal::line(name),
                        crate::terminal::line(program)
                    ));
                }
                let mut asking = Vec::new();
                for (i, why) in &confirmations {
                    let id = &plan.steps[*i].step_id;
                    shell.err_line(format_args!(
                        "  step {} asks for confirmation: {}",
                        crate::terminal::line(&redactor.redact(id)),
                        redactor.redact(why)
                    ));
                    asking.push(id.clone());
                }
                if confirmations_complete && let Some(line) = confirmation_outlook(args, &asking) {
                    shell.err_line(redactor.redact(&line));
                }
                for (step_id, r) in skills {
                    shell.err_line(format_args!(
                        "  step {}: skill {} ({}, sha256 {}), tools offered: {}{}{}",
                        crate::terminal::line(&step_id),
                        r.skill.name,
                        r.skill.path,
                        r.skill.sha256,
                        r.tools.join(", "),
                        r.skill
                            .front
                            .model
                            .as_ref()
                            .map(|m| format!(", model {}", crate::terminal::line(m)))
                            .unwrap_or_default(),
                        r.skill
                            .front
                            .max_turns
                            .map(|n| format!(", max-turns {n}"))
                            .unwrap_or_default()
                    ));
                    for piece in &r.pieces {
                        match piece {
                            plan::skills::Piece::Text { text } => {
                                for l in text.lines() {
                                    shell.err_line(format_args!(
                                        "    | {}",
                                        crate::terminal::line(l)
                                    ));
                                }
                            }
                            plan::skills::Piece::Command { command, .. } => {
                                shell.err_line(format_args!(
                                    "    | [output of run_command `{}`]",
                                    crate::terminal::line(command)
                                ))
                            }
                        }
                    }
                }
            }
            Ok(exit::OK)
        }
        Err(SessionError::Plan(e)) => {
            if args.json {
                let doc = serde_json::json!({"valid": false, "problems": e.problems()});
                shell.out_json_line(&doc, Origin::Runner);
                Ok(e.exit_code())
            } else {
                Err(CliError::new(e.exit_code(), e.to_string()))
            }
        }
        Err(other) => Err(other.into()),
    }
}

/// What `record_decision` binds a decision to.
struct Decision<'a> {
    plan: &'a Plan,
    session: &'a Session,
    policy: &'a Policy,
    status: AuthStatus,
    /// An explicit `approve` may override a standing rejection; `run --approve` may not.
    may_override: bool,
}

/// Records the decision with the library's rules ([`crate::runner::record_decision`]: a standing
/// rejection is overridden only by an explicit `approve`) and says what was written.
fn record_decision(
    args: &Args,
    shell: &Shell,
    secrets: &RunnerSecrets,
    path: &Path,
    d: Decision,
) -> Result<PlanAuthorization, CliError> {
    let redactor = shell.redactor();
    let request = crate::runner::DecisionRequest {
        status: d.status,
        by: args.by.clone(),
        reason: args.reason.clone(),
        may_override: d.may_override,
        key: secrets.approval_key.clone(),
        ssh: match (&args.sign, &args.add_signature) {
            (Some(key), _) => crate::runner::signing::SshRequest::Sign(key.clone()),
            (None, Some(file)) => crate::runner::signing::SshRequest::Attach(file.clone()),
            (None, None) => crate::runner::signing::SshRequest::None,
        },
    };
    let decided = d
        .session
        .decide(d.plan, path, d.policy, &request)
        .map_err(|e| CliError::new(e.exit_code(), redactor.redact(&e.to_string()).into_owned()))?;
    let auth = decided.authorization;
    shell.err_line(format_args!(
        "{} plan {} (sha256 {}) by {}{} → {}",
        if d.status == AuthStatus::Approved {
            "approved"
        } else {
            "rejected"
        },
        redactor.redact(&d.plan.plan_id),
        d.plan.sha256,
        redactor.redact(&auth.decided_by),
        match &decided.overridden {
            Some(r) => format!(
                ", overriding the rejection by {}",
                redactor.redact(&r.decided_by)
            ),
            None => String::new(),
        },
        decided.written.display()
    ));
    Ok(auth)
}

/// `preview`: the plan's effect, step by step, with nothing written.
fn cmd_preview(args: &Args, shell: &Shell) -> Result<i32, CliError> {
    let redactor = shell.redactor();
    let path = PathBuf::from(&args.positionals[0]);
    let session = redacted_session(args, Some(&path), redactor)?;
    let ws = session.workspace();
    let policy = session.policy()?;
    let plan = session.load_plan(&path, &args.vars, &policy)?;
    let sandbox = session
        .resolve_sandbox(&policy)
        .map(|sb| crate::events::SandboxInfo::of(&sb))
        .map_err(|e| format!("a run would refuse to start: {e}"));
    let approval = crate::runner::mcp_tools::recheck_outlook(
        &session,
        &path,
        &plan,
        session.approval(&path, &plan, &policy),
    );
    if args.json {
        // A closed stdout is ignored, as for every other output.
        let _ = reports::write_preview_json(
            shell,
            &plan,
            ws,
            &policy,
            &reports::Outlook {
                confirm_mode: confirm_mode(args).as_str(),
                sandbox: &sandbox,
                approval: &approval,
            },
        )
        .map_err(|problems| cannot_preview(&plan, &problems))?;
        let failing = crate::preview::failing_steps(&plan, ws, &policy)
            .map_err(|problems| cannot_preview(&plan, &problems))?;
        let failing: Vec<String> = failing
            .into_iter()
            .map(|i| plan.steps[i].step_id.clone())
            .collect();
        return Ok(will_fail(shell, &failing));
    }
    let (asking, failing) = show_preview(shell, &plan, ws, &policy, Stream::Out, false)?;
    let lines = match &sandbox {
        Ok(info) => info.lines(),
        Err(e) => vec![e.clone()],
    };
    for line in lines {
        shell.out_line(format_args!(
            "sandbox: {}",
            crate::terminal::line(&redactor.redact(&line))
        ));
    }
    if let Some(line) = confirmation_outlook(args, &asking) {
        shell.out_line(redactor.redact(&line));
    }
    shell.out_line(redactor.redact(&approval_line(&approval)));
    Ok(will_fail(shell, &failing))
}

/// `preview`'s exit code: 30 (what the run would end with) when a step will fail as the workspace
/// is now, saying which on stderr; else 0.
fn will_fail(shell: &Shell, failing: &[String]) -> i32 {
    if failing.is_empty() {
        return exit::OK;
    }
    shell.err_line(format_args!(
        "acode-run: {} will fail as the workspace is now ({}): exit {}",
        crate::terminal::count(failing.len(), "step"),
        shell.redactor().redact(&crate::events::id_list(failing)),
        exit::STEP_FAILED
    ));
    exit::STEP_FAILED
}

/// The confirmation mode a run started like this one would use: `--confirm`, else prompt on a
/// terminal and deny without one (as `run` decides).
fn confirm_mode(args: &Args) -> ConfirmMode {
    args.confirm.unwrap_or(if std::io::stdin().is_terminal() {
        ConfirmMode::Prompt
    } else {
        ConfirmMode::AutoDeny
    })
}

/// What the confirmation mode will do to the steps that ask, in one sentence, so a plan that
/// validates is not a surprise denial (exit 33) at run time. `None` when no step asks.
fn confirmation_outlook(args: &Args, asking: &[String]) -> Option<String> {
    if asking.is_empty() {
        return None;
    }
    let mode = confirm_mode(args);
    let what = match mode {
        ConfirmMode::Prompt => "you will be asked at the terminal".to_string(),
        ConfirmMode::AutoApprove => "approved without asking (--confirm auto-approve)".to_string(),
        ConfirmMode::AutoDeny => format!(
            "DENIED (--confirm auto-deny{}), and the run exits 33: run at a terminal, pass \
             --confirm auto-approve after review, or add the programs to auto_approve_commands",
            if args.confirm.is_none() {
                ", the default without a terminal"
            } else {
                ""
            }
        ),
    };
    Some(format!(
        "{} for confirmation ({}): {what}",
        if asking.len() == 1 {
            "1 step asks".to_string()
        } else {
            format!("{} steps ask", asking.len())
        },
        asking
            .iter()
            .map(|s| crate::terminal::line(s).into_owned())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// `approval: …`, the last line of `preview`: what `run` would decide ([`Session::approval`]).
fn approval_line(approval: &ApprovalOutlook) -> String {
    let status = approval.status;
    match approval.reason.as_deref() {
        None => match &approval.approved_by {
            Some(by) => format!(
                "approval: {status} by {} (run may start it)",
                crate::terminal::line(by)
            ),
            None => format!("approval: {status} (run may start it)"),
        },
        Some(reason) => format!(
            "approval: {status}; run would refuse it: {}",
            crate::terminal::text(reason)
        ),
    }
}

/// The error of a plan that cannot be previewed (exit 2), with its problems.
fn cannot_preview(plan: &Plan, problems: &[plan::Problem]) -> CliError {
    CliError::new(
        exit::USAGE,
        crate::preview::cannot_preview(&plan.plan_id, problems),
    )
}

/// Prints the preview of `plan` to `stream` block by block through the Shell (each block
/// redacted), holding one step at a time (a 100 000-step plan is shown in bounded memory, SPEC
/// §11); the bytes are those of `redact(render(preview))`, except that with `trim_end` the text
/// ends in exactly one newline (as `approve` shows it). Returns the ids of the steps that ask for
/// confirmation, and of those that will fail as the workspace is now.
fn show_preview(
    shell: &Shell,
    plan: &Plan,
    ws: &Workspace,
    policy: &Policy,
    stream: Stream,
    trim_end: bool,
) -> Result<(Vec<String>, Vec<String>), CliError> {
    let mut to = shell.blocks(stream);
    // One block behind, so that the last one can be trimmed.
    let mut pending: Option<String> = None;
    let rendered = crate::preview::render_each(plan, ws, policy, |block| {
        if let Some(p) = pending.replace(block.to_string()) {
            to.write(&p);
        }
    })
    .map_err(|problems| cannot_preview(plan, &problems))?;
    let last = pending.unwrap_or_default();
    if trim_end {
        to.write_last_line(&last);
    } else {
        to.write(&last);
    }
    to.finish();
    let ids = |v: Vec<usize>| -> Vec<String> {
        v.into_iter()
            .map(|i| plan.steps[i].step_id.clone())
            .collect()
    };
    Ok((ids(rendered.asking), ids(rendered.failing)))
}

fn cmd_decide(
    args: &Args,
    shell: &Shell,
    secrets: &RunnerSecrets,
    status: AuthStatus,
) -> Result<i32, CliError> {
    let redactor = shell.redactor();
    let path = PathBuf::from(&args.positionals[0]);
    let session = redacted_session(args, Some(&path), redactor)?;
    let ws = session.workspace();
    let policy = session.policy()?;
    let plan = if status == AuthStatus::Approved {
        // Only a valid plan can be approved, and the approver sees its effect first.
        session.load_plan(&path, &args.vars, &policy)?
    } else {
        let plan = plan::read(&path, &Default::default()).map_err(|e| CliError::plan(&e))?;
        session.learn_secrets(&plan);
        plan
    };
    if status == AuthStatus::Approved && !args.quiet {
        // The approver sees the plan's effect, with the secrets it now knows redacted.
        show_preview(shell, &plan, ws, &policy, Stream::Err, true)?;
    }
    if let Some(out) = &args.message {
        return write_signing_message(args, shell, &session, &plan, &path, &policy, status, out);
    }
    let decision = Decision {
        plan: &plan,
        session: &session,
        policy: &policy,
        status,
        may_override: true,
    };
    record_decision(args, shell, secrets, &path, decision)?;
    Ok(exit::OK)
}

/// `approve|reject PLAN --message FILE`: the exact bytes an approver signs, written to `FILE`
/// (nothing decided, nothing recorded), and how to sign and attach them.
#[allow(clippy::too_many_arguments)]
fn write_signing_message(
    args: &Args,
    shell: &Shell,
    session: &Session,
    plan: &Plan,
    path: &Path,
    policy: &Policy,
    status: AuthStatus,
    out: &Path,
) -> Result<i32, CliError> {
    let redactor = shell.redactor();
    let auth = session
        .decision(plan, path, policy, status, args.by.as_deref())
        .map_err(|e| CliError::new(e.exit_code(), redactor.redact(&e.to_string()).into_owned()))?;
    crate::util::write_replacing(out, &auth.ssh_message()).map_err(|e| {
        CliError::new(
            exit::INTERNAL,
            format!("cannot write {}: {e}", out.display()),
        )
    })?;
    let verb = if status == AuthStatus::Approved {
        "approve"
    } else {
        "reject"
    };
    shell.err_line(format_args!("wrote the message to sign for {verb} of plan {} (sha256 {}) to {}\n  sign it:   ssh-keygen -Y sign -n {} -f ~/.ssh/id_ed25519 {}\n  attach it: acode-run {verb} {} --add-signature {}.sig",
        redactor.redact(&plan.plan_id),
        plan.sha256,
        out.display(),
        crate::plan::signers::NAMESPACE,
        out.display(),
        path.display(),
        out.display()));
    Ok(exit::OK)
}

fn cmd_run(args: &Args, shell: &Shell, secrets: &RunnerSecrets) -> Result<i32, CliError> {
    let target = if args.resume {
        Target::Latest
    } else {
        Target::New
    };
    execute_plan(
        args,
        shell,
        secrets,
        Some(&PathBuf::from(&args.positionals[0])),
        target,
        None,
    )
    .map(|(code, _)| code)
}

fn cmd_resume(args: &Args, shell: &Shell, secrets: &RunnerSecrets) -> Result<i32, CliError> {
    execute_plan(
        args,
        shell,
        secrets,
        None,
        Target::Run(args.positionals[0].clone()),
        None,
    )
    .map(|(code, _)| code)
}

/// The progress outputs the flags ask for: human lines on stderr (failures only with `--quiet`), JSONL events
/// on stdout with `--jsonl`; both the Shell's ([`Shell::progress_outputs`]).
fn progress_outputs(args: &Args, shell: &Shell) -> Vec<Box<dyn ProgressCallback>> {
    progress_outputs_noting_loss(args, shell).0
}

/// [`progress_outputs`], with where the `--jsonl` writer notes events it could not deliver
/// (`JsonlWriter::lost`), to be recorded with the run.
fn progress_outputs_noting_loss(
    args: &Args,
    shell: &Shell,
) -> (Vec<Box<dyn ProgressCallback>>, Option<shell::JsonlLoss>) {
    shell.progress_outputs(args.quiet, args.jsonl)
}

/// The options the flags give that shape a run (recorded on it, checked again by `resume`).
fn run_settings(args: &Args) -> RunSettings {
    RunSettings {
        confirm: args.confirm,
        sandbox: args.sandbox,
        llm_provider: args.llm_provider,
        llm_url: args.llm_url.clone(),
        model: args.model.clone(),
        llm_ca_cert: args.llm_ca_cert.clone(),
        tool_protocol: args.tool_protocol,
        token_budget: args.token_budget,
        llm_retries: args.llm_retries,
        max_calls_per_answer: args.max_calls_per_answer,
        strict: args.strict.then_some(true),
        jobs: args.jobs,
        replay: args.replay.as_deref().map(replay::setting),
        replay_lenient: args.replay_lenient.then_some(true),
    }
}

/// `run`, `run --approve`, `run --resume` and `resume`: the flags become [`RunOptions`], the
/// library prepares and runs, and this prints. The exit code and the id of the run it carried out.
fn execute_plan(
    args: &Args,
    shell: &Shell,
    secrets: &RunnerSecrets,
    plan_path: Option<&Path>,
    target: Target,
    session: Option<Session>,
) -> Result<(i32, String), CliError> {
    let redactor = shell.redactor();
    // The attestation key is read before anything runs: a run asked to attest that could not
    // would otherwise leave changes no one can vouch for.
    let attest_key = match &args.attest {
        Some(_) => Some(attest::signing_key()?),
        None => None,
    };
    // The command's one session (`do`'s, or one for `run`): the runner reads the policy and
    // opens the database in it.
    let session = match session {
        Some(session) => session,
        None => redacted_session(args, plan_path, redactor)?,
    };
    let mut options = RunOptions::default();
    options.db = Some(session.db_path().to_path_buf());
    options.policy = args.policy.clone();
    options.vars = args.vars.clone();
    options.settings = run_settings(args);
    options.default_confirm = Some(if std::io::stdin().is_terminal() {
        ConfirmMode::Prompt
    } else {
        ConfirmMode::AutoDeny
    });
    options.redactor = Some(redactor.clone());
    // `run --approve` is a convenience, not a review: it never overrides a rejection.
    options.approve = args.approve.then(|| crate::runner::DecisionRequest {
        status: AuthStatus::Approved,
        by: args.by.clone(),
        reason: args.reason.clone(),
        may_override: false,
        key: secrets.approval_key.clone(),
        ssh: crate::runner::signing::SshRequest::None,
    });
    options.target = target;
    options.rerun_interrupted = args.rerun_interrupted;
    options.llm_api_key = secrets.llm_api_key.clone();
    options.drop_step_results = !reports::needs_step_results(args);
    options.own_files = own_files(args);
    options.require = args.require.clone();
    if args.sandbox == Some(crate::policy::SandboxMode::None) {
        // `--sandbox none` on the command line is the explicit request.
        options = options.without_os_sandbox();
    }
    let runner = match plan_path {
        Some(plan) => PlanRunner::prepare_in(session, plan, options),
        None => PlanRunner::prepare_resume_in(session, &args.positionals[0], options),
    }
    .map_err(|e| match e {
        RunnerError::Plan(e) => CliError::plan(&e),
        other => CliError::new(
            other.exit_code(),
            redactor.redact(&other.to_string()).into_owned(),
        ),
    })?;
    if args.approve {
        shell.err_line(format_args!(
            "approved plan {} (sha256 {})",
            redactor.redact(&runner.plan().plan_id),
            runner.plan().sha256
        ));
    }
    if let Some(warning) = runner.sandbox().warning() {
        shell.warn(redactor.redact(warning));
    }
    if let Some(n) = runner.repository_policy() {
        // What the workspace's own policy did to the approved one (docs/security.md): what it
        // asked beyond is never granted, and is said even with --quiet.
        if !args.quiet && !n.narrowed.is_empty() {
            shell.err_line(format_args!(
                "acode-run: the workspace's {} narrows the approved policy:",
                n.path
            ));
            for line in &n.narrowed {
                shell.err_line(format_args!("  {}", redactor.redact(line)));
            }
        }
        for line in &n.ignored {
            shell.err_line(format_args!(
                "acode-run: warning: {} asks beyond the approved policy, ignored: {}",
                n.path,
                redactor.redact(line)
            ));
        }
    }
    let sandbox = crate::events::SandboxInfo::of(runner.sandbox());
    let cancel = Arc::new(AtomicBool::new(false));
    crate::process::interrupt::cancel_on_interrupt(cancel.clone());
    let replaying = runner.replay().cloned();
    if let Some(client) = &replaying
        && !args.quiet
    {
        replay::announce(shell, client);
    }
    let (outputs, loss) = progress_outputs_noting_loss(args, shell);
    // A prompt quotes the step's arguments: the Shell's, which redacts them.
    let runner = if runner.settings().confirm == Some(ConfirmMode::Prompt) {
        runner.with_confirmation(shell.confirmation_prompt(cancel.clone()))
    } else {
        runner
    };
    let (result, mut executor) = runner
        .with_progress(Arc::new(Fanout(outputs)))
        .with_cancel_flag(cancel)
        .run_keeping_executor()
        .map_err(|e| match e {
            RunnerError::Execution(e) => CliError::execution(&e),
            other => CliError::new(other.exit_code(), other.to_string()),
        })?;
    // Before the reports, which say whether it was written.
    let attested = match (&args.attest, &attest_key) {
        (Some(out), Some(key)) => {
            attest::write(shell, executor.store_mut(), &result.run_id, key, out)
        }
        _ => Ok(()),
    };
    let lost = loss.and_then(|l| l.lock().map_or(None, |l| l.clone()));
    if let Some(what) = lost
        && let Err(e) = executor.store().record_events_lost(&result.run_id, &what)
    {
        shell.warn(format_args!("cannot record that --jsonl {what}: {e}"));
    }
    reports::write(shell, args, &result, executor.store(), &sandbox);
    warn_about_telemetry(shell, executor.store(), &result.run_id);
    if let Some(client) = replaying {
        replay::report_divergences(shell, &client);
    }
    if args.json {
        // A closed stdout is ignored, as for every other output.
        let _ = reports::write_json(shell, &result);
    }
    // A run whose attestation could not be written ends with that error (after its reports).
    attested?;
    Ok((result.exit_code, result.run_id))
}

/// Says on stderr when the run's traces did not all reach the collector, or could not be sent
/// (docs/observability.md): the run's outcome is not changed by it.
fn warn_about_telemetry(shell: &Shell, store: &Store, run_id: &str) {
    let Some(json) = store.telemetry(run_id).ok().flatten() else {
        return;
    };
    let Ok(stats) = serde_json::from_str::<serde_json::Value>(&json) else {
        return;
    };
    let dropped = stats["dropped"].as_u64().unwrap_or(0);
    let error = stats["error"].as_str();
    if dropped > 0 || error.is_some() {
        shell.warn(format_args!(
            "OpenTelemetry: {} span(s) exported, {dropped} dropped{}",
            stats["exported"].as_u64().unwrap_or(0),
            error
                .map(|e| format!(" ({})", shell.redactor().redact(e)))
                .unwrap_or_default()
        ));
    }
}

/// This invocation's own files, which the agent's workspace listing leaves out (docs/replay.md):
/// the reports it writes, and its stdout or stderr when redirected to a file (`--jsonl >
/// ev.jsonl`), as `/proc/self/fd` names it.
fn own_files(args: &Args) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = [&args.junit, &args.report_html, &args.attest, &args.sarif]
        .into_iter()
        .flatten()
        .map(|p| crate::workspace::absolute(p))
        .collect();
    for fd in ["/proc/self/fd/1", "/proc/self/fd/2"] {
        if std::fs::metadata(fd).is_ok_and(|m| m.is_file())
            && let Ok(path) = std::fs::read_link(fd)
        {
            out.push(path);
        }
    }
    out
}

/// The LLM configuration and agent settings from flags and environment, unchecked (for the
/// draft and review stages; a run's are the library's).
fn llm_config(
    args: &Args,
    secrets: &RunnerSecrets,
    policy: &Policy,
) -> Result<(crate::llm::LlmConfig, crate::executor::AgentSettings), CliError> {
    let (config, agent, _) = run_settings(args)
        .llm(secrets.llm_api_key.as_deref(), policy, |name| {
            std::env::var(name).ok()
        })
        .map_err(|e| CliError::new(exit::USAGE, e))?;
    Ok((config, agent))
}

pub use crate::error::format_ms;

/// The database of what has run, for reading: a missing one is an error, nothing is created.
fn query_store(args: &Args) -> Result<Store, CliError> {
    Ok(session(args, None)?.existing_store()?)
}

impl From<crate::store::StoreError> for CliError {
    fn from(e: crate::store::StoreError) -> Self {
        CliError::new(e.exit_code(), e.to_string())
    }
}

impl From<crate::report::html::HtmlError> for CliError {
    fn from(e: crate::report::html::HtmlError) -> Self {
        CliError::new(e.exit_code(), e.to_string())
    }
}

fn cmd_runs(args: &Args, shell: &Shell) -> Result<i32, CliError> {
    let runs = session(args, None)?.list_runs(args.limit)?;
    if args.json {
        shell.out_json(&runs, Origin::Runner);
        return Ok(exit::OK);
    }
    shell.out_line(format_args!(
        "{:<36}  {:<6} {:<24} {:<11} {:>4}  STARTED (UTC)",
        "RUN_ID", "KIND", "PLAN", "STATUS", "EXIT"
    ));
    for r in runs {
        shell.out_line(format_args!(
            "{:<36}  {:<6} {:<24} {:<11} {:>4}  {}",
            r.run_id,
            crate::terminal::line(&r.kind),
            crate::terminal::line(&r.plan_id.chars().take(24).collect::<String>()),
            r.status,
            r.exit_code
                .map(|c| c.to_string())
                .unwrap_or_else(|| "-".into()),
            format_ms(r.started_at)
        ));
    }
    Ok(exit::OK)
}

fn cmd_show(args: &Args, shell: &Shell) -> Result<i32, CliError> {
    let shown =
        session(args, None)?.show_run(&args.positionals[0], crate::executor::STEP_OUTPUT_BYTES)?;
    if args.json {
        shell.out_json(&show_document(&shown), Origin::Runner);
        return Ok(exit::OK);
    }
    show_run(shell, &shown);
    show_decisions(shell, &shown.decisions, &shown.detail.run.plan_sha256);
    show_steps(shell, &shown.detail);
    Ok(exit::OK)
}

/// `show --json`'s document: the run's detail, each step with its result (the artifacts of its
/// last execution, bounded), the decisions on its plan, its provenance and what it changed.
fn show_document(shown: &crate::runner::queries::ShownRun) -> serde_json::Value {
    let (detail, decisions, replay_of) = (&shown.detail, &shown.decisions, &shown.replay_of);
    let mut value = serde_json::to_value(detail).unwrap_or_default();
    // Each step's result: the artifacts of its last execution, bounded.
    let mut outputs = shown.outputs.clone();
    if let Some(steps) = value.get_mut("steps").and_then(|s| s.as_array_mut()) {
        for step in steps {
            let id = step["step_id"].as_str().unwrap_or_default().to_string();
            if let (Some(obj), Some(result)) = (step.as_object_mut(), outputs.remove(&id)) {
                obj.insert(
                    "result".into(),
                    serde_json::to_value(result).unwrap_or_default(),
                );
            }
        }
    }
    if let Some(obj) = value.as_object_mut() {
        obj.insert(
            "decisions".into(),
            serde_json::to_value(decisions).unwrap_or_default(),
        );
        obj.insert(
            "approval".into(),
            serde_json::to_value(&shown.provenance.approval).unwrap_or_default(),
        );
        obj.insert(
            "attestation".into(),
            serde_json::to_value(&shown.provenance.attestation).unwrap_or_default(),
        );
    }
    if let (Some(of), Some(run)) = (&replay_of, value.get_mut("run")) {
        run["replay_of"] = serde_json::Value::String(of.clone());
    }
    if let Some(run) = value.get_mut("run") {
        if let Some(changes) = &shown.changes {
            run["changes"] = serde_json::to_value(changes).unwrap_or_default();
        }
        if let Some(narrowing) = &shown.repository_policy {
            run["repository_policy"] = serde_json::to_value(narrowing).unwrap_or_default();
        }
    }
    value
}

/// `show`'s first lines: the run, its plan, workspace, changes, status and provenance.
fn show_run(shell: &Shell, shown: &crate::runner::queries::ShownRun) {
    let replay_of = &shown.replay_of;
    let r = &shown.detail.run;
    shell.out_line(format_args!("run       {}", r.run_id));
    shell.out_line(format_args!(
        "plan      {} (sha256 {})",
        crate::terminal::line(&r.plan_id),
        r.plan_sha256
    ));
    shell.out_line(format_args!("workspace {}", r.workspace));
    if r.repository.is_some() || r.commit.is_some() {
        shell.out_line(format_args!(
            "repository {} at {}",
            r.repository.as_deref().unwrap_or("(no origin)"),
            r.commit.as_deref().unwrap_or("(no commit)")
        ));
    }
    if let Some(changes) = &shown.changes {
        shell.out_line(format_args!(
            "changed   {}{}",
            crate::terminal::count(changes.total, "file"),
            changes
                .files
                .iter()
                .take(10)
                .map(|f| format!("\n  {} {}", f.status, f.path))
                .collect::<String>()
        ));
    }
    if let Some(n) = &shown.repository_policy {
        shell.out_line(format_args!(
            "repository policy {} (sha256 {})",
            n.path, n.sha256
        ));
        for line in &n.narrowed {
            shell.out_line(format_args!("  narrowed: {line}"));
        }
        for line in &n.ignored {
            shell.out_line(format_args!("  ignored: {line}"));
        }
    }
    shell.out_line(format_args!(
        "status    {} (exit {}), started {}{}",
        r.status,
        r.exit_code
            .map(|c| c.to_string())
            .unwrap_or_else(|| "-".into()),
        format_ms(r.started_at),
        r.finished_at
            .map(|f| format!(
                ", took {:.1} s",
                f.saturating_sub(r.started_at) as f64 / 1000.0
            ))
            .unwrap_or_default()
    ));
    if let Some(of) = replay_of {
        shell.out_line(format_args!(
            "replay of {of} (its recorded model answers; docs/replay.md)"
        ));
    }
    if let Some(lost) = &r.events_lost {
        shell.out_line(format_args!("events    --jsonl {lost}"));
    }
    if r.prompt_tokens.saturating_add(r.completion_tokens) > 0 {
        shell.out_line(format_args!(
            "tokens    {} prompt + {} completion",
            r.prompt_tokens, r.completion_tokens
        ));
    }
    if let Some(line) = shown.provenance.approval_line() {
        shell.out_line(format_args!(
            "approved  by {}",
            crate::terminal::line(&line)
        ));
    }
    shell.out_line(format_args!(
        "attested  {}",
        crate::terminal::line(&shown.provenance.attestation_line())
    ));
}

/// `show`'s approvals and rejections of the run's plan (`sha256`), oldest first.
fn show_decisions(shell: &Shell, decisions: &[crate::store::DecisionRow], sha256: &str) {
    if !decisions.is_empty() {
        shell.out_line(format_args!(
            "\ndecisions on this plan (sha256 {}):",
            sha256
        ));
        for d in decisions {
            shell.out_line(format_args!(
                "  {} {:<8} by {}{}{}",
                format_ms(d.decided_at),
                d.verdict,
                match (d.scheme.as_deref(), &d.signer_key) {
                    (Some("ssh"), Some(key)) => format!("{} (SSH key {key})", d.decided_by),
                    (Some("hmac"), _) => format!("{} (HMAC-signed)", d.decided_by),
                    _ => d.decided_by.clone(),
                },
                if d.overrides_rejection {
                    " (overriding a rejection)"
                } else {
                    ""
                },
                d.reason
                    .as_ref()
                    .map(|why| format!(": {why}"))
                    .unwrap_or_default()
            ));
        }
    }
}

/// `show`'s steps and executions (with their artifacts, programs and network requests).
fn show_steps(shell: &Shell, detail: &crate::store::RunDetail) {
    shell.out_line("\nsteps:");
    for s in &detail.steps {
        let counts =
            crate::store::StepCounts::of(&s.step_id, detail.executions.iter().map(|e| &e.record));
        shell.out_line(format_args!(
            "  {:>3}. {:<24} {:<14} {:<10} {}{}",
            s.position.saturating_add(1),
            crate::terminal::line(&s.step_id),
            crate::terminal::line(&s.tool),
            if s.tolerated {
                "failed, tolerated"
            } else {
                s.status.as_str()
            },
            counts.describe(),
            s.error_code
                .as_ref()
                .map(|c| format!("  [{c}] {}", s.error_message.clone().unwrap_or_default()))
                .unwrap_or_default()
        ));
    }
    shell.out_line("\nexecutions:");
    for e in &detail.executions {
        let rec = &e.record;
        let arts: Vec<String> = e
            .artifacts
            .iter()
            .map(|a| {
                format!(
                    "{}({}{}{})",
                    a.artifact_type,
                    a.bytes,
                    if a.truncated { ", truncated" } else { "" },
                    if a.lossy {
                        ", not UTF-8: shown lossily"
                    } else {
                        ""
                    }
                )
            })
            .collect();
        shell.out_line(format_args!(
            "  {} {:<20} {:<14} {} {:>6} ms attempt {}{}{}",
            rec.execution_id,
            crate::terminal::line(&rec.step_id),
            crate::terminal::line(&rec.tool_name),
            if rec.success { "ok    " } else { "FAILED" },
            rec.duration_ms,
            rec.attempt,
            if arts.is_empty() {
                String::new()
            } else {
                format!("  artifacts: {}", arts.join(" "))
            },
            rec.error_message
                .as_ref()
                .map(|m| format!("\n      {m}"))
                .unwrap_or_default()
        ));
        if let (Some(path), Some(sha)) = (&rec.program_path, &rec.program_sha256) {
            shell.out_line(format_args!("      program: {path} (sha256 {sha})"));
        }
        for r in &e.network {
            shell.out_line(format_args!("      network: {}", describe_request(r)));
        }
    }
}

/// One network request as `show` and the progress lines print it.
fn describe_request(r: &crate::policy::network::NetworkRequest) -> String {
    format!(
        "{} {}:{} {} ({}) {} B up, {} B down, {} ms",
        r.method,
        crate::terminal::line(&r.host),
        r.port,
        if r.allowed { "allowed" } else { "DENIED" },
        r.status,
        r.bytes_up,
        r.bytes_down,
        r.duration_ms
    )
}

fn cmd_artifact(args: &Args, shell: &Shell) -> Result<i32, CliError> {
    let store = query_store(args)?;
    if args.positionals.len() < 2 {
        // No type: which there are, and the command that prints each.
        let (id, list) = store.artifact_list(&args.positionals[0])?;
        if args.json {
            shell.out_json(&list, Origin::Runner);
            return Ok(exit::OK);
        }
        if list.is_empty() {
            shell.out_line(format_args!("execution {id} has no artifacts"));
        }
        for a in &list {
            shell.out_line(format_args!(
                "{:<12} {:>10} bytes{}  acode-run artifact {id} {}",
                a.artifact_type,
                a.bytes,
                if a.truncated { " (truncated)" } else { "" },
                a.artifact_type
            ));
        }
        return Ok(exit::OK);
    }
    let a = store.artifact(&args.positionals[0], &args.positionals[1])?;
    shell.out_page(&a.content);
    if a.lossy {
        shell.err_line(
            "acode-run: note: the output was not valid UTF-8; invalid bytes are shown as U+FFFD",
        );
    }
    if a.truncated {
        shell.err_line(format_args!(
            "acode-run: note: artifact truncated: {} of {} bytes kept",
            a.content.len(),
            a.bytes
        ));
    }
    Ok(exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_timestamps() {
        assert_eq!(format_ms(0), "1970-01-01 00:00:00");
        assert_eq!(format_ms(1_700_000_000_123), "2023-11-14 22:13:20");
    }
}
