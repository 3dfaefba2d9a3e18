//! Embedding acode-run as a library: an `Executor` with its own callbacks, LLM client and retry
//! schedule (scaled to milliseconds so retry tests stay fast), over a real SQLite file.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use acode_run::executor::retry::Backoff;
use acode_run::executor::{AgentSettings, AutoApprove, Driven, ProgressCallback};
use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};
use acode_run::llm::{LlmConfig, client};
use acode_run::plan::{self, AuthStatus, PlanAuthorization, ValidationContext};
use acode_run::policy::Policy;
use acode_run::store::Store;
use acode_run::tools::ToolRegistry;
use acode_run::workspace::Workspace;
use acode_run::{ApprovedPlan, Executor};
use serde_json::json;

use crate::harness::*;

#[derive(Default)]
struct Recorder(Mutex<Vec<String>>);

impl ProgressCallback for Recorder {
    fn on_event(&self, event: &acode_run::events::Event) {
        self.0
            .lock()
            .unwrap()
            .push(event.kind.type_name().to_string());
    }
}

fn approved(t: &TestDir, value: serde_json::Value) -> ApprovedPlan {
    let path = t.plan("lib.json", &value);
    let ws = Workspace::new(&t.ws).unwrap();
    let registry = ToolRegistry::builtin();
    let policy = Policy::default();
    let ctx = ValidationContext {
        registry: &registry,
        workspace: &ws,
        policy: &policy,
    };
    let plan = plan::load(&path, &Default::default(), &ctx).unwrap();
    let auth = PlanAuthorization::decide(&plan, AuthStatus::Approved, "test");
    ApprovedPlan::new(plan, auth).unwrap()
}

#[test]
fn server_errors_are_retried_then_fail_with_every_attempt_recorded() {
    let t = TestDir::new();
    let server = ScriptedServer::start(vec![
        ScriptedResponse::json(500, json!({"error": "boom 1"})),
        ScriptedResponse::json(503, json!({"error": "boom 2"})),
        ScriptedResponse::json(529, json!({"error": "boom 3"})),
        ScriptedResponse::chat_text("never reached"),
    ]);
    let plan = approved(
        &t,
        json!({"plan_id": "lib", "steps": [
        {"step_id": "a", "tool": "agent", "arguments": {"instruction": "x", "tools": ["file_read"]}}]}),
    );
    let recorder = Arc::new(Recorder::default());
    let store = Store::open(&t.ws.join(".acode/executions.db")).unwrap();
    let mut exec = Executor::new(Workspace::new(&t.ws).unwrap(), store)
        .with_llm(Arc::from(client(LlmConfig::new(server.url(), "m"))))
        .with_agent_settings(AgentSettings {
            backoff: Backoff::scaled(2, Duration::from_millis(5)),
            ..AgentSettings::default()
        })
        .with_progress(recorder.clone());
    let result = exec.execute(&plan).unwrap();
    assert_eq!(result.exit_code, 30);
    assert_eq!(
        server.requests().len(),
        3,
        "first try plus two retries, then give up"
    );
    let db = t.db();
    assert_eq!(
        q::<i64>(
            &db,
            "SELECT count(*) FROM executions WHERE tool_name='llm' AND success=0"
        ),
        3
    );
    assert_eq!(
        q::<String>(
            &db,
            "SELECT group_concat(attempt) FROM executions WHERE tool_name='llm'"
        ),
        "1,2,3"
    );
    assert!(q::<String>(&db, "SELECT error_message FROM steps").contains("after 3 attempts"));
    let events = recorder.0.lock().unwrap();
    assert_eq!(events.iter().filter(|e| *e == "retry_scheduled").count(), 2);
}

#[test]
fn executor_rechecks_authorization_and_plan_bytes() {
    let t = TestDir::new();
    t.file("a.txt", "a");
    let plan = approved(
        &t,
        json!({"plan_id": "lib", "steps": [
        {"step_id": "r", "tool": "file_read", "arguments": {"path": "a.txt"}}]}),
    );
    // The plan file is edited after it was loaded and approved: execute refuses.
    let path = t.root.join("lib.json");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push(' ');
    std::fs::write(&path, text).unwrap();
    let store = Store::open_in_memory().unwrap();
    let mut exec = Executor::new(Workspace::new(&t.ws).unwrap(), store)
        .with_confirmation(Arc::new(AutoApprove));
    let err = exec.execute(&plan).unwrap_err();
    assert_eq!(err.exit_code(), 3, "{err}");
    // A hand-made authorization for other bytes is refused at construction.
    let mut p = plan.plan().clone();
    p.sha256 = "0".repeat(64);
    assert!(ApprovedPlan::new(p, plan.authorization().clone()).is_err());
}

/// `examples/embed.rs` (built by `cargo test`) runs a plan through the library's front door with a
/// confirmation and a progress callback.
#[test]
fn the_embedding_example_runs_a_plan_through_the_front_door() {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_acode-run"))
        .parent()
        .unwrap()
        .join("examples/embed");
    if !bin.exists() {
        acode_run::testing::skip(
            &bin.display().to_string(),
            "cargo test builds the examples; this run did not",
        );
        return;
    }
    let t = crate::harness::TestDir::new();
    let root = t.root.join("embed");
    let mut c = std::process::Command::new(&bin);
    crate::harness::clean_env(&mut c);
    let out = c.arg(&root).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("confirm: delete file_delete -> approve"),
        "{text}"
    );
    assert!(text.contains("event: run_finished"), "{text}");
    assert!(text.contains(" completed (exit 0)"), "{text}");
    assert_eq!(
        std::fs::read_to_string(root.join("ws/hello.txt")).unwrap(),
        "hello\n"
    );
    assert!(!root.join("ws/old.txt").exists());
    // Recorded like a CLI run, in the workspace's database, with its decision (issue 22).
    assert!(root.join("ws/.acode/executions.db").exists());
    let db = rusqlite::Connection::open(root.join("ws/.acode/executions.db")).unwrap();
    let (verdict, by): (String, String) = db
        .query_row("SELECT verdict, decided_by FROM decisions", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!(
        (verdict.as_str(), by.as_str()),
        ("approved", "embed-example")
    );
    assert!(root.join("embed.json.approval").exists());
}

/// The crate's front page shows the front door, with the OS sandbox, the policy and a recorded
/// decision, and nothing lower: the first example a reader copies is the safe one.
#[test]
fn the_front_page_example_is_the_plan_runner() {
    let lib = std::fs::read_to_string(repo().join("src/lib.rs")).unwrap();
    let example: String = lib
        .lines()
        .skip_while(|l| !l.starts_with("//! ```"))
        .skip(1)
        .take_while(|l| !l.starts_with("//! ```"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(example.contains("PlanRunner::prepare"), "{example}");
    assert!(example.contains("DecisionRequest"), "{example}");
    assert!(!example.contains("Executor::new"), "{example}");
    assert!(!example.contains("without_os_sandbox"), "{example}");
    assert_eq!(lib.matches("//! ```").count(), 2, "one example only");
}

/// Safety is the default: an unapproved plan is refused, and a plan cannot be run without the OS
/// sandbox through the plain option.
#[test]
fn the_front_door_refuses_what_the_command_line_refuses() {
    use acode_run::runner::{PlanRunner, RunOptions, RunnerError};
    let t = crate::harness::TestDir::new();
    let plan = t.plan(
        "p.json",
        &serde_json::json!({"plan_id": "p", "steps": [
        {"step_id": "w", "tool": "file_write", "arguments": {"path": "a.txt", "contents": "1"}}]}),
    );
    let err = PlanRunner::prepare(&t.ws, &plan, RunOptions::default())
        .err()
        .expect("refused");
    assert_eq!(err.exit_code(), 3, "{err}");
    t.approve(&plan);
    let mut weak = RunOptions::default();
    weak.settings.sandbox = Some(acode_run::policy::SandboxMode::None);
    assert!(matches!(
        PlanRunner::prepare(&t.ws, &plan, weak).err(),
        Some(RunnerError::WeakeningNotExplicit)
    ));
    let runner =
        PlanRunner::prepare(&t.ws, &plan, RunOptions::default().without_os_sandbox()).unwrap();
    assert_eq!(
        runner.sandbox().mode(),
        acode_run::policy::SandboxMode::None
    );
    let result = runner.run().unwrap();
    assert_eq!(result.exit_code, 0);
    assert_eq!(t.read("a.txt"), "1");
}

/// The `run_finished` event of a run, as JSON.
#[derive(Default)]
struct Finished(Mutex<Option<serde_json::Value>>);

impl ProgressCallback for Finished {
    fn on_event(&self, event: &acode_run::events::Event) {
        if event.kind.type_name() == "run_finished" {
            *self.0.lock().unwrap() = serde_json::to_value(event).ok();
        }
    }
}

/// Without step results (what the CLI does unless `--json` or a report needs them) the run is the
/// same: same outcome, same totals in `run_finished`, every step recorded; only the in-memory list
/// is left empty, so a 100 000-step run does not hold 100 000 results.
#[test]
fn a_run_without_step_results_has_the_same_outcome_and_totals() {
    let t = TestDir::new();
    t.file("a.txt", "a");
    let plan = approved(
        &t,
        json!({"plan_id": "lib", "steps": [
        {"step_id": "ok", "tool": "file_read", "arguments": {"path": "a.txt"}},
        {"step_id": "bad", "tool": "file_read", "arguments": {"path": "missing.txt"},
         "on_failure": "continue"},
        {"step_id": "after", "tool": "file_read", "arguments": {"path": "a.txt"}},
        {"step_id": "stop", "tool": "file_read", "arguments": {"path": "missing.txt"}},
        {"step_id": "never", "tool": "file_read", "arguments": {"path": "a.txt"}}]}),
    );
    let mut outcomes = Vec::new();
    for keep in [true, false] {
        let finished = Arc::new(Finished::default());
        let mut exec = Executor::new(
            Workspace::new(&t.ws).unwrap(),
            Store::open_in_memory().unwrap(),
        )
        .with_progress(finished.clone())
        .with_step_results(keep);
        let result = exec.execute(&plan).unwrap();
        assert_eq!(result.steps.len(), if keep { 5 } else { 0 });
        let states: Vec<(String, String)> = exec
            .store()
            .steps(&result.run_id)
            .unwrap()
            .into_iter()
            .map(|s| (s.step_id, s.status.as_str().to_string()))
            .collect();
        assert_eq!(states.len(), 5, "{states:?}");
        let mut ev = finished.0.lock().unwrap().take().expect("run_finished");
        for volatile in ["duration_ms", "ts_ms", "run_id", "seq"] {
            ev.as_object_mut().unwrap().remove(volatile);
        }
        outcomes.push((result.exit_code, result.status, states, ev));
    }
    let ev = &outcomes[0].3;
    assert_eq!(
        (
            &ev["completed"],
            &ev["failed"],
            &ev["tolerated"],
            &ev["blocked"]
        ),
        (&json!(2), &json!(2), &json!(1), &json!(1)),
        "{ev}"
    );
    assert_eq!(outcomes[0].0, 30);
    assert_eq!(outcomes[0], outcomes[1]);
}

/// Decisions through the library follow the command line's rules: a rejection of these exact
/// bytes stands against a convenience approval, an explicit approval overrides it and is recorded
/// as an override, and the plan then runs through the front door.
#[test]
fn a_rejection_stands_in_the_library_until_an_explicit_approval() {
    use acode_run::runner::{
        DecisionRequest, PlanRunner, RunOptions, RunnerError, record_decision,
    };
    let t = TestDir::new();
    let path = t.plan(
        "p.json",
        &json!({"plan_id": "p", "steps": [
        {"step_id": "w", "tool": "file_write", "arguments": {"path": "a.txt", "contents": "1"}}]}),
    );
    let ws = Workspace::new(&t.ws).unwrap();
    let policy = Policy::default();
    let registry = ToolRegistry::builtin();
    let ctx = ValidationContext {
        registry: &registry,
        workspace: &ws,
        policy: &policy,
    };
    let plan = plan::load(&path, &Default::default(), &ctx).unwrap();
    std::fs::create_dir_all(t.ws.join(".acode")).unwrap();
    let mut store = Store::open(&t.ws.join(".acode/executions.db")).unwrap();
    let request = |status, may_override| DecisionRequest {
        status,
        by: Some("alice".into()),
        reason: Some("deletes too much".into()),
        may_override,
        key: None,
        ssh: Default::default(),
    };

    record_decision(
        &plan,
        &path,
        &ws,
        &policy,
        &mut store,
        &request(AuthStatus::Rejected, false),
    )
    .unwrap();
    let err = record_decision(
        &plan,
        &path,
        &ws,
        &policy,
        &mut store,
        &request(AuthStatus::Approved, false),
    )
    .unwrap_err();
    assert!(matches!(err, RunnerError::Rejected { .. }), "{err}");
    assert_eq!(err.exit_code(), 3);
    let message = err.to_string();
    assert!(
        message.contains("rejected by alice") && message.contains("deletes too much"),
        "{message}"
    );
    assert!(
        PlanRunner::prepare(&t.ws, &path, RunOptions::default().without_os_sandbox()).is_err(),
        "still rejected"
    );

    let decided = record_decision(
        &plan,
        &path,
        &ws,
        &policy,
        &mut store,
        &request(AuthStatus::Approved, true),
    )
    .unwrap();
    assert_eq!(
        decided.overridden.map(|r| r.decided_by),
        Some("alice".to_string())
    );
    let rows = store.decisions(&plan.sha256).unwrap();
    assert_eq!(
        rows.len(),
        2,
        "the refused convenience approval recorded nothing"
    );
    assert!(rows.iter().any(|r| r.overrides_rejection));
    drop(store);
    let result = PlanRunner::prepare(&t.ws, &path, RunOptions::default().without_os_sandbox())
        .unwrap()
        .run()
        .unwrap();
    assert_eq!(result.exit_code, 0);
    assert_eq!(t.read("a.txt"), "1");
}

/// An embedder running an approved plan under a repository's narrowed policy tells the executor
/// the policy the approval is bound to (`with_approved_policy`): a narrower policy in force runs,
/// one that allows anything more is refused before anything runs (docs/security.md "One
/// approval, many workspaces"), and without it only the approved policy itself runs.
#[test]
fn an_executor_runs_under_a_narrower_policy_than_approved_and_never_a_wider_one() {
    let t = TestDir::new();
    t.file("a.txt", "a");
    let plan = approved(
        &t,
        json!({"plan_id": "lib", "steps": [
        {"step_id": "ok", "tool": "file_read", "arguments": {"path": "a.txt"}}]}),
    );
    let narrower = Policy::parse(r#"{"commands": ["cat"], "sandbox": "landlock"}"#).unwrap();
    let wider = Policy::parse(r#"{"allow_commands": ["curl"]}"#).unwrap();
    let exec = |policy: &Policy, bound: Option<Policy>| {
        let mut e = Executor::new(
            Workspace::new(&t.ws).unwrap(),
            Store::open_in_memory().unwrap(),
        )
        .with_policy(policy.clone());
        if let Some(bound) = bound {
            e = e.with_approved_policy(bound);
        }
        e.execute(&plan).map(|r| r.exit_code)
    };
    assert_eq!(exec(&narrower, Some(Policy::default())).unwrap(), 0);
    let refused = exec(&wider, Some(Policy::default())).unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("policy changed since approval"),
        "{refused}"
    );
    // Not told what was approved: the policy in force must be the approved one itself.
    assert!(exec(&narrower, None).is_err());
    assert_eq!(exec(&Policy::default(), None).unwrap(), 0);
}

/// The executor a prepared run hands over (`into_executor`, for embedders that drive it
/// themselves) is one built by hand as far as it knows: it runs the approved plan, and checks the
/// approval's binding to whatever policy it is then given — a wider one is refused before
/// anything runs.
#[test]
fn the_executor_a_prepared_run_hands_over_checks_the_approval_against_its_policy() {
    use acode_run::runner::{PlanRunner, RunOptions};
    let t = TestDir::new();
    let path = t.plan(
        "p.json",
        &json!({"plan_id": "p", "steps": [
        {"step_id": "w", "tool": "file_write", "arguments": {"path": "a.txt", "contents": "1"}}]}),
    );
    t.approve(&path);
    let prepared =
        || PlanRunner::prepare(&t.ws, &path, RunOptions::default().without_os_sandbox()).unwrap();
    let (executor, approved) = prepared().into_executor().unwrap();
    let wider = Policy::parse(r#"{"allow_commands": ["curl"]}"#).unwrap();
    let refused = executor.with_policy(wider).execute(&approved).unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("policy changed since approval"),
        "{refused}"
    );
    assert!(!t.ws.join("a.txt").exists(), "nothing ran");
    let (mut executor, approved) = prepared().into_executor().unwrap();
    assert_eq!(executor.execute(&approved).unwrap().exit_code, 0);
    assert_eq!(t.read("a.txt"), "1");
}

/// A prepared run re-reads the plan file at its start, the one re-check the executor makes of
/// what the stages proved (a race defence): the file edited between `prepare` and `run` is
/// refused as changed since approval, and nothing runs.
#[test]
fn a_plan_edited_after_its_run_was_prepared_is_refused_at_the_start() {
    use acode_run::runner::{PlanRunner, RunOptions, RunnerError};
    let t = TestDir::new();
    let path = t.plan(
        "p.json",
        &json!({"plan_id": "p", "steps": [
        {"step_id": "w", "tool": "file_write", "arguments": {"path": "a.txt", "contents": "1"}}]}),
    );
    t.approve(&path);
    let prepared =
        PlanRunner::prepare(&t.ws, &path, RunOptions::default().without_os_sandbox()).unwrap();
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push(' ');
    std::fs::write(&path, text).unwrap();
    let err = prepared.run().unwrap_err();
    assert!(
        matches!(err, RunnerError::Execution(ref e) if e.to_string().contains("changed")),
        "{err}"
    );
    assert_eq!(err.exit_code(), 3, "{err}");
    assert!(!t.ws.join("a.txt").exists(), "nothing ran");
}
