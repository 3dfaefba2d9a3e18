//! `draft`, `review` and `do`: the planner and reviewer stages at the command line
//! (see [`crate::stages`] and `docs/stages.md`).
//!
//! Each builds an executor like `run` does (workspace, policy, database, progress, LLM), but with
//! confirmations denied: the stages' models only read. Nothing a model wrote runs without a human's
//! approval: `draft` writes the plan unapproved; `do` asks on a terminal and stops after the draft
//! (exit 3) when there is none.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use super::flags::Args;
use super::shell::{Origin, Shell};
use super::{
    CliError, Decision, RunnerSecrets, Target, execute_plan, llm_config, record_decision,
    sandboxed_workspace,
};
use crate::error::exit;
use crate::executor::{Driven, Executor, Fanout};
use crate::plan::AuthStatus;
use crate::stages::draft::{self, DraftRequest, Previous};
use crate::stages::review::{self, Verdict};

/// Turns of one stage conversation (reading files takes a few).
const STAGE_TURNS: u32 = 12;

/// An executor for a stage ([`crate::runner::session::Session::stage_executor`]) with the
/// command line's model, progress outputs and Ctrl-C.
fn stage_executor(
    args: &Args,
    shell: &Shell,
    secrets: &RunnerSecrets,
    plan_hint: Option<&Path>,
) -> Result<Executor, CliError> {
    let session = super::redacted_session(args, plan_hint, shell.redactor())?;
    stage_executor_in(args, &session, shell, secrets)
}

/// [`stage_executor`] in the command's own `session` (`do`: the run that follows uses the same).
fn stage_executor_in(
    args: &Args,
    session: &crate::runner::session::Session,
    shell: &Shell,
    secrets: &RunnerSecrets,
) -> Result<Executor, CliError> {
    let policy = session.policy()?;
    let (config, agent) = llm_config(args, secrets, &policy)?;
    config
        .validate()
        .map_err(|e| CliError::new(exit::USAGE, e.to_string()))?;
    let executor = session.stage_executor(policy, Arc::from(crate::llm::client(config)), agent)?;
    // Ctrl-C ends the conversation like a run (exit 130, recorded as the stage's run, interrupted)
    // instead of killing the process mid-write.
    let cancel = Arc::new(AtomicBool::new(false));
    crate::process::interrupt::cancel_on_interrupt(cancel.clone());
    Ok(executor
        .with_progress(Arc::new(Fanout(super::progress_outputs(args, shell))))
        .with_cancel_flag(cancel))
}

/// Writes a stage event on stdout with `--jsonl` (the run events of the stage's conversations
/// come between its `stage_started` and `stage_completed`).
fn emit_stage(args: &Args, shell: &Shell, kind: crate::events::EventKind) {
    if !args.jsonl {
        return;
    }
    shell.out_json_line(&crate::events::Event::standalone("", kind), Origin::Outside);
}

fn stage_completed(
    stage: &str,
    outcome: &str,
    exit_code: i32,
    run_ids: Vec<String>,
) -> crate::events::EventKind {
    crate::events::EventKind::StageCompleted {
        stage: stage.into(),
        outcome: outcome.into(),
        exit_code,
        run_ids,
    }
}

fn stage_err(e: crate::stages::StageError) -> CliError {
    CliError::new(e.exit_code(), e.to_string())
}

fn announce(shell: &Shell, stage: &str, what: &str) {
    shell.err_line(format_args!("[{stage}] {what}"));
}

/// What `draft` was asked: the goal and, for a revision, the old plan and why it changes.
fn draft_request(args: &Args, executor: &Executor) -> Result<DraftRequest, CliError> {
    let usage = |m: String| CliError::new(exit::USAGE, m);
    let goal = args.positionals.first().cloned();
    let previous = match &args.revise {
        None => None,
        Some(path) => {
            let bytes = crate::input::read_bounded(path, crate::input::MAX_PLAN_BYTES, "plan file")
                .map_err(|e| usage(format!("--revise {}: {e}", path.display())))?;
            let text = String::from_utf8_lossy(&bytes).into_owned();
            let value: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| usage(format!("--revise {}: {e}", path.display())))?;
            let plan_id = value
                .get("plan_id")
                .and_then(|v| v.as_str())
                .unwrap_or("plan")
                .to_string();
            let feedback = match (&args.feedback, &args.from_review) {
                (Some(f), _) => f.clone(),
                (None, Some(run)) => review::load(executor, run)
                    .map_err(|e| usage(e.to_string()))?
                    .as_feedback(),
                (None, None) => rejection_reason(executor, &bytes).ok_or_else(|| {
                    usage(format!(
                        "--revise {}: say why it must change: reject it with --reason, or give \
                         --feedback TEXT or --from-review RUN_ID",
                        path.display()
                    ))
                })?,
            };
            Some(Previous {
                text,
                plan_id,
                feedback,
            })
        }
    };
    let goal = match (goal, &previous) {
        (Some(g), _) => g,
        (None, Some(prev)) => serde_json::from_str::<serde_json::Value>(&prev.text)
            .ok()
            .and_then(|v| {
                v.get("description")
                    .and_then(|d| d.as_str())
                    .map(String::from)
            })
            .unwrap_or_else(|| format!("the goal of plan {}", prev.plan_id)),
        (None, None) => {
            return Err(usage(
                "`acode-run draft` needs a GOAL (or --revise PLAN)".into(),
            ));
        }
    };
    Ok(DraftRequest {
        goal,
        previous,
        max_attempts: args.max_attempts.unwrap_or(3),
        max_turns: STAGE_TURNS,
        intent: args.intent,
    })
}

/// The reason `acode-run reject PLAN --reason` recorded for exactly these plan bytes, if their
/// latest decision is that rejection (read from the decisions table, where `reject` appends it).
fn rejection_reason(executor: &Executor, plan_bytes: &[u8]) -> Option<String> {
    let sha = crate::util::sha256_hex(plan_bytes);
    executor
        .store()
        .standing_rejection(&sha)
        .ok()
        .flatten()
        .and_then(|d| d.reason)
        .filter(|r| !r.trim().is_empty())
}

/// Where a draft goes: `-o`, else `plan.json`, else for a revision `OLD-vN.json` beside the old one.
fn output_path(args: &Args, req: &DraftRequest) -> PathBuf {
    if let Some(o) = &args.output {
        return o.clone();
    }
    match (&args.revise, &req.previous) {
        (Some(old), Some(prev)) => {
            let name = format!("{}.json", draft::next_version(&prev.plan_id));
            old.parent().unwrap_or(Path::new(".")).join(name)
        }
        _ => PathBuf::from("plan.json"),
    }
}

/// A draft's output that exists already (a draft never overwrites).
fn exists(out: &Path) -> CliError {
    CliError::new(
        exit::USAGE,
        format!(
            "{} exists; choose another file with -o (a draft never overwrites)",
            out.display()
        ),
    )
}

/// Drafts and writes the plan; returns where it was written.
fn draft_to_file(
    args: &Args,
    shell: &Shell,
    executor: &mut Executor,
) -> Result<(PathBuf, crate::plan::Plan), CliError> {
    let req = draft_request(args, executor)?;
    let out = output_path(args, &req);
    if out.exists() {
        return Err(exists(&out));
    }
    announce(
        shell,
        "planner",
        &format!("drafting a plan for: {}", req.goal),
    );
    emit_stage(
        args,
        shell,
        crate::events::EventKind::StageStarted {
            stage: "planner".into(),
            subject: req.goal.clone(),
        },
    );
    let red = executor.store().redactor().clone();
    let mut rejected = |attempt: u32, of: u32, problems: &[String]| {
        let first = problems.first().map(String::as_str).unwrap_or("no answer");
        announce(
            shell,
            "planner",
            &format!(
                "attempt {attempt} of {of} not accepted ({}): {}",
                crate::terminal::count(problems.len(), "problem"),
                crate::terminal::line(&red.redact(first))
            ),
        );
    };
    let drafted = match draft::draft_with(executor, &req, &mut rejected) {
        Ok(d) => d,
        Err(e) => {
            let done = stage_completed("planner", "failed", e.exit_code(), Vec::new());
            emit_stage(args, shell, done);
            return Err(stage_err(e));
        }
    };
    // Never over a file, even one made while the model was drafting.
    crate::util::write_new(&out, drafted.text.as_bytes()).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => exists(&out),
        _ => CliError::new(
            exit::INTERNAL,
            format!("cannot write {}: {e}", out.display()),
        ),
    })?;
    let done = stage_completed("planner", "drafted", exit::OK, drafted.run_ids.clone());
    emit_stage(args, shell, done);
    announce(
        shell,
        "planner",
        &format!(
            "wrote {} (plan {}, {}, {}), NOT approved",
            out.display(),
            drafted.plan.plan_id,
            crate::terminal::count(drafted.plan.steps.len(), "step"),
            crate::terminal::count(drafted.attempts as usize, "attempt")
        ),
    );
    if let Some(prev) = &req.previous {
        let old: serde_json::Value = serde_json::from_str(&prev.text).unwrap_or_default();
        let new: serde_json::Value = serde_json::from_str(&drafted.text).unwrap_or_default();
        shell.err_line(format_args!("changes from {}:", prev.plan_id));
        for line in draft::describe_changes(&old, &new) {
            shell.err_line(format_args!("  {}", crate::terminal::line(&line)));
        }
    }
    if let Ok(p) = crate::preview::preview(&drafted.plan, executor.workspace(), executor.policy()) {
        shell.err_line(crate::preview::render(&p).trim_end());
    }
    Ok((out, drafted.plan))
}

/// `acode-run draft`.
pub(super) fn cmd_draft(
    args: &Args,
    shell: &Shell,
    secrets: &RunnerSecrets,
) -> Result<i32, CliError> {
    // Mistakes found before the database is opened leave nothing behind (no `.acode/`).
    if let Some(old) = &args.revise
        && !old.is_file()
    {
        return Err(CliError::new(
            exit::USAGE,
            format!("--revise {}: no such plan file", old.display()),
        ));
    }
    if let Some(out) = args.output.as_ref().filter(|o| o.exists()) {
        return Err(exists(out));
    }
    let mut executor = stage_executor(args, shell, secrets, args.revise.as_deref())?;
    let (out, _) = draft_to_file(args, shell, &mut executor)?;
    shell.err_line(format_args!(
        "review it, then approve it with: {}",
        super::hints::next_step(args, "approve", &out, None)
    ));
    Ok(exit::OK)
}

/// `acode-run review`.
pub(super) fn cmd_review(
    args: &Args,
    shell: &Shell,
    secrets: &RunnerSecrets,
) -> Result<i32, CliError> {
    // A run to review is in an existing database: do not create one to say it is not there.
    let (_, db) = sandboxed_workspace(args, None)?;
    if !db.exists() {
        return Err(CliError::new(
            exit::USAGE,
            format!(
                "no execution database at {} (run a plan first, or pass --db)",
                db.display()
            ),
        ));
    }
    let mut executor = stage_executor(args, shell, secrets, None)?;
    let run_id = resolve_run(&executor, &args.positionals[0])?;
    review_run(args, shell, &mut executor, &run_id)
}

/// A run id from a unique prefix.
fn resolve_run(executor: &Executor, given: &str) -> Result<String, CliError> {
    executor
        .store()
        .run(given)
        .map(|r| r.run_id)
        .map_err(|e| CliError::new(exit::USAGE, e.to_string()))
}

fn review_run(
    args: &Args,
    shell: &Shell,
    executor: &mut Executor,
    run_id: &str,
) -> Result<i32, CliError> {
    announce(shell, "reviewer", &format!("reviewing run {run_id}"));
    emit_stage(
        args,
        shell,
        crate::events::EventKind::StageStarted {
            stage: "reviewer".into(),
            subject: run_id.to_string(),
        },
    );
    let outcome = match review::review(
        executor,
        run_id,
        args.goal.as_deref(),
        args.max_attempts.unwrap_or(3),
        STAGE_TURNS,
    ) {
        Ok(o) => o,
        Err(e) => {
            let done = stage_completed("reviewer", "failed", e.exit_code(), Vec::new());
            emit_stage(args, shell, done);
            return Err(stage_err(e));
        }
    };
    let (verdict_name, code) = match outcome.review.verdict {
        Verdict::Approve => ("approve", exit::OK),
        Verdict::RequestChanges => ("request_changes", exit::REVIEW_CHANGES),
    };
    let done = stage_completed("reviewer", verdict_name, code, outcome.run_ids.clone());
    emit_stage(args, shell, done);
    let r = &outcome.review;
    if args.json {
        shell.out_json(r, Origin::Outside);
    }
    let verdict = match r.verdict {
        Verdict::Approve => "approve",
        Verdict::RequestChanges => "request_changes",
    };
    announce(
        shell,
        "reviewer",
        &crate::terminal::line(&format!("{verdict}: {}", r.summary)),
    );
    for f in &r.findings {
        let at = match f.line {
            Some(l) => format!("{}:{l}", f.file),
            None => f.file.clone(),
        };
        shell.err_line(format_args!(
            "  [{}] {}: {}",
            crate::terminal::line(&f.severity),
            crate::terminal::line(&at),
            crate::terminal::line(&f.message)
        ));
    }
    Ok(match r.verdict {
        Verdict::Approve => exit::OK,
        Verdict::RequestChanges => {
            shell.err_line(format_args!("revise the plan from these findings with: acode-run draft --revise PLAN --from-review {run_id}"));
            exit::REVIEW_CHANGES
        }
    })
}

/// `acode-run do`: draft → preview → approve at a terminal → run → review.
pub(super) fn cmd_do(args: &Args, shell: &Shell, secrets: &RunnerSecrets) -> Result<i32, CliError> {
    let redactor = shell.redactor();
    // One session for the whole command: the policy read once, the run's database connection
    // the session's (the stages keep their own, for the review after the run).
    let mut session = super::redacted_session(args, None, redactor)?;
    let mut executor = stage_executor_in(args, &session, shell, secrets)?;
    let (path, plan) = draft_to_file(args, shell, &mut executor)?;
    if !shell.can_ask() {
        // A refusal like any other (exit 3): under GitHub Actions it gets its annotation, job
        // summary and GITHUB_OUTPUT, so the CI page says why nothing ran.
        return Err(CliError::new(
            exit::UNAUTHORIZED,
            format!(
                "no terminal to ask for approval: nothing a model wrote runs unapproved.\n\
                 review {} and approve it with: {}",
                path.display(),
                super::hints::next_step(args, "approve", &path, None)
            ),
        ));
    }
    loop {
        let Some(line) = shell.ask(format_args!(
            "approve and run {}? [y]es / [n]o / [e]dit: ",
            path.display()
        )) else {
            return Ok(exit::UNAUTHORIZED);
        };
        match line.trim() {
            "y" | "yes" => break,
            "n" | "no" => {
                shell.err_line(format_args!(
                    "not approved; the draft stays in {}",
                    path.display()
                ));
                return Ok(exit::UNAUTHORIZED);
            }
            "e" | "edit" => {
                let editor = std::env::var("EDITOR").unwrap_or_else(|_| "vi".into());
                let _ = crate::process::foreground::run_attached(
                    std::ffi::OsStr::new(&editor),
                    &[path.as_os_str()],
                );
                // Re-validated by `approve` below; a broken edit is reported there.
            }
            _ => {}
        }
    }
    drop(plan);
    session.protect(&path);
    let policy = session.policy()?;
    let plan = session.load_plan(&path, &args.vars, &policy)?;
    let decision = Decision {
        plan: &plan,
        session: &session,
        policy: &policy,
        status: AuthStatus::Approved,
        // The person answered "y" to these bytes: an explicit approval.
        may_override: true,
    };
    record_decision(args, shell, secrets, &path, decision)?;
    announce(shell, "executor", &format!("running {}", path.display()));
    // The run this command started, by its id: another run on the same database meanwhile
    // is not the one reviewed.
    let (code, run_id) = execute_plan(
        args,
        shell,
        secrets,
        Some(&path),
        Target::New,
        Some(session),
    )?;
    if code == exit::OK {
        review_run(args, shell, &mut executor, &run_id)
    } else {
        Ok(code)
    }
}
