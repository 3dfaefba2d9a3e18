//! Budgets in the approved plan (issue 46, docs/observability.md): each kind runs out at a step
//! boundary and inside an agent step's turns, against the scripted model through the real client;
//! the request that would overspend is never sent (the server counts what it received), the run
//! exits 38 with a `budget_exhausted` event, and a budget changed after approval is refused.

use std::time::Duration;

use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};
use serde_json::{Value, json};

use crate::harness::*;

/// An answer asking to read `a.txt` (10 prompt + 5 completion tokens, as every scripted answer).
fn read() -> ScriptedResponse {
    ScriptedResponse::chat_tool_calls(&[("file_read", json!({"path": "a.txt"}))])
}

fn done() -> ScriptedResponse {
    ScriptedResponse::chat_text("done")
}

fn agent_step(id: &str, budget: Option<Value>) -> Value {
    let mut step = json!({"step_id": id, "tool": "agent", "arguments": {
        "instruction": "Read a.txt.", "tools": ["file_read"], "max_turns": 10}});
    if let Some(b) = budget {
        step["budget"] = b;
    }
    step
}

fn budget_plan(t: &TestDir, budget: Option<Value>, steps: Vec<Value>) -> std::path::PathBuf {
    let mut plan = json!({"plan_id": "budgets", "steps": steps});
    if let Some(b) = budget {
        plan["budget"] = b;
    }
    t.file("a.txt", "hello\n");
    t.plan("budgets.json", &plan)
}

/// The one `budget_exhausted` event of the run.
fn exhausted(out: &std::process::Output) -> Value {
    let events = events(out);
    let found: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "budget_exhausted")
        .collect();
    assert_eq!(found.len(), 1, "{events:#?}");
    found[0].clone()
}

fn step_error(t: &TestDir, step: &str) -> String {
    t.db()
        .query_row(
            "SELECT error_code FROM steps WHERE step_id = ?1",
            [step],
            |r| r.get::<_, Option<String>>(0),
        )
        .unwrap()
        .unwrap_or_default()
}

#[test]
fn model_calls_run_out_inside_an_agent_steps_turns() {
    let t = TestDir::new();
    let server = ScriptedServer::start(vec![read(), read(), read(), done()]);
    let plan = budget_plan(
        &t,
        Some(json!({"model_calls": 2})),
        vec![agent_step("fix", None)],
    );
    let out = t.approve_and_run_with_model(&plan, &server, &[]);
    assert_exit_with(&out, 38, "model_calls budget: 2 of 2 model calls used");
    // The third request was never sent.
    assert_eq!(server.requests().len(), 2);
    let e = exhausted(&out);
    assert_eq!(e["budget"], "model_calls");
    assert_eq!(e["scope"], "plan");
    assert_eq!(e["step_id"], "fix");
    assert_eq!(
        (e["used"].as_f64(), e["limit"].as_f64()),
        (Some(2.0), Some(2.0))
    );
    assert_eq!(e["turn"], 3);
    assert_eq!(step_error(&t, "fix"), "budget_exhausted");
    assert_eq!(
        q::<i64>(&t.db(), "SELECT exit_code FROM runs"),
        38,
        "recorded with the run"
    );
}

#[test]
fn the_plans_tokens_run_out_at_a_step_boundary() {
    let t = TestDir::new();
    // Step one: two answers of 15 tokens each = 30, the whole budget; it completes.
    let server = ScriptedServer::start(vec![read(), done(), done()]);
    let plan = budget_plan(
        &t,
        Some(json!({"tokens": 30})),
        vec![agent_step("first", None), agent_step("second", None)],
    );
    let out = t.approve_and_run_with_model(&plan, &server, &[]);
    assert_exit_with(&out, 38, "tokens budget: 30 of 30 tokens used");
    assert_eq!(server.requests().len(), 2, "the second step sent nothing");
    assert_eq!(step_error(&t, "first"), "");
    assert_eq!(step_error(&t, "second"), "budget_exhausted");
    let e = exhausted(&out);
    assert_eq!(
        (e["budget"].as_str(), e["scope"].as_str()),
        (Some("tokens"), Some("plan"))
    );
    assert_eq!(e["step_id"], "second");
    assert_eq!(e["next"].as_f64(), Some(0.0), "used up, not merely short");
}

#[test]
fn a_steps_tokens_stop_the_request_that_would_overspend_them() {
    let t = TestDir::new();
    let server = ScriptedServer::start(vec![read(), read(), done()]);
    // 15 used after one answer; the next request holds at least that much again: 30 > 25.
    let plan = budget_plan(
        &t,
        None,
        vec![agent_step("fix", Some(json!({"tokens": 25})))],
    );
    let out = t.approve_and_run_with_model(&plan, &server, &[]);
    assert_exit_with(
        &out,
        38,
        "step \"fix\"'s tokens budget: 15 of 25 tokens used",
    );
    assert_eq!(server.requests().len(), 1);
    let e = exhausted(&out);
    assert_eq!(e["scope"], "step");
    assert_eq!(
        (e["used"].as_f64(), e["next"].as_f64()),
        (Some(15.0), Some(15.0))
    );
}

#[test]
fn cost_is_counted_at_the_policys_prices_and_stops_before_overspending() {
    let t = TestDir::new();
    // 10 prompt tokens at $1000/M + 5 completion tokens at $2000/M = $0.02 an answer.
    t.file(
        "acode-policy.json",
        r#"{"prices": {"test-model": {"input_per_mtok": 1000, "output_per_mtok": 2000}}}"#,
    );
    let server = ScriptedServer::start(vec![read(), read(), done()]);
    let plan = budget_plan(
        &t,
        Some(json!({"cost_usd": 0.03})),
        vec![agent_step("fix", None)],
    );
    let out = t.approve_and_run_with_model(&plan, &server, &[]);
    assert_exit_with(&out, 38, "cost_usd budget: $0.0200 of $0.0300 used");
    assert_eq!(server.requests().len(), 1);
    let cost: f64 = q(
        &t.db(),
        "SELECT cost_usd FROM executions WHERE tool_name = 'llm'",
    );
    assert!((cost - 0.02).abs() < 1e-9, "{cost}");
    assert_eq!(exhausted(&out)["unit"], "usd");
}

#[test]
fn a_cost_budget_without_a_price_for_the_model_sends_nothing() {
    let t = TestDir::new();
    t.file(
        "acode-policy.json",
        r#"{"prices": {"other-model": {"input_per_mtok": 1, "output_per_mtok": 1}}}"#,
    );
    let server = ScriptedServer::start(vec![done()]);
    let plan = budget_plan(
        &t,
        Some(json!({"cost_usd": 1})),
        vec![agent_step("fix", None)],
    );
    let out = t.approve_and_run_with_model(&plan, &server, &[]);
    assert_exit_with(&out, 30, "no price for model \"test-model\"");
    assert!(server.requests().is_empty());
}

#[test]
fn the_wall_clock_runs_out_inside_turns_and_at_a_step_boundary() {
    // Inside the turns: the first answer takes 1.2 s of a 1 s budget; the second is not asked.
    let t = TestDir::new();
    let server =
        ScriptedServer::start(vec![read().with_delay(Duration::from_millis(1200)), done()]);
    let plan = budget_plan(
        &t,
        None,
        vec![agent_step("fix", Some(json!({"wall_clock": "1s"})))],
    );
    let out = t.approve_and_run_with_model(&plan, &server, &[]);
    assert_exit_with(&out, 38, "wall_clock budget");
    assert_eq!(server.requests().len(), 1);
    let e = exhausted(&out);
    assert_eq!(
        (e["budget"].as_str(), e["unit"].as_str()),
        (Some("wall_clock"), Some("ms"))
    );
    assert!(e["used"].as_f64().unwrap() >= 1000.0, "{e}");

    // At a step boundary: the plan's clock is spent by the first step, so the second (a file
    // read, no model at all) does not start.
    let t = TestDir::new();
    let server = ScriptedServer::start(vec![done().with_delay(Duration::from_millis(1200))]);
    let plan = budget_plan(
        &t,
        Some(json!({"wall_clock": "1s"})),
        vec![
            agent_step("think", None),
            json!({"step_id": "read", "tool": "file_read", "arguments": {"path": "a.txt"}}),
        ],
    );
    let out = t.approve_and_run_with_model(&plan, &server, &[]);
    assert_exit_with(&out, 38, "stopped before the step started");
    assert_eq!(step_error(&t, "think"), "");
    assert_eq!(step_error(&t, "read"), "budget_exhausted");
    assert_eq!(
        q::<i64>(
            &t.db(),
            "SELECT count(*) FROM executions WHERE tool_name = 'file_read'"
        ),
        0
    );
    assert!(exhausted(&out).get("turn").is_none());
}

#[test]
fn token_budget_on_the_command_line_only_lowers_the_plans() {
    // Lower: the flag's 20 governs a plan allowing 1000.
    let t = TestDir::new();
    let server = ScriptedServer::start(vec![read(), read(), done()]);
    let plan = budget_plan(
        &t,
        Some(json!({"tokens": 1000})),
        vec![agent_step("fix", None)],
    );
    let out = t.approve_and_run_with_model(&plan, &server, &["--token-budget", "20"]);
    assert_exit_with(&out, 38, "15 of 20 tokens");
    assert_eq!(server.requests().len(), 1);

    // Higher: the plan's 20 still governs a flag allowing 100 000.
    let t = TestDir::new();
    let server = ScriptedServer::start(vec![read(), read(), done()]);
    let plan = budget_plan(
        &t,
        Some(json!({"tokens": 20})),
        vec![agent_step("fix", None)],
    );
    let out = t.approve_and_run_with_model(&plan, &server, &["--token-budget", "100000"]);
    assert_exit_with(&out, 38, "15 of 20 tokens");
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn a_budget_raised_after_approval_is_refused() {
    let t = TestDir::new();
    let server = ScriptedServer::start(vec![done()]);
    let plan = budget_plan(
        &t,
        Some(json!({"model_calls": 1})),
        vec![agent_step("fix", None)],
    );
    t.approve(&plan);
    // Raise the budget after approval: the approval no longer matches the bytes.
    let text = std::fs::read_to_string(&plan).unwrap();
    let raised = text.replace("\"model_calls\": 1", "\"model_calls\": 1000");
    assert_ne!(text, raised);
    std::fs::write(&plan, raised).unwrap();
    let url = server.url();
    let out = t.run(&[
        "run",
        plan.to_str().unwrap(),
        "--llm-url",
        &url,
        "--model",
        "test-model",
    ]);
    assert_exit_with(&out, 3, "changed");
    assert!(server.requests().is_empty());
}

#[test]
fn prices_changed_after_approval_are_a_changed_policy() {
    let t = TestDir::new();
    t.file(
        "acode-policy.json",
        r#"{"prices": {"test-model": {"input_per_mtok": 1, "output_per_mtok": 1}}}"#,
    );
    let server = ScriptedServer::start(vec![done()]);
    let plan = budget_plan(
        &t,
        Some(json!({"cost_usd": 1})),
        vec![agent_step("fix", None)],
    );
    t.approve(&plan);
    // Prices a thousand times lower make the same budget a thousand times larger.
    t.file(
        "acode-policy.json",
        r#"{"prices": {"test-model": {"input_per_mtok": 0.001, "output_per_mtok": 0.001}}}"#,
    );
    let url = server.url();
    let out = t.run(&[
        "run",
        plan.to_str().unwrap(),
        "--llm-url",
        &url,
        "--model",
        "test-model",
    ]);
    assert_exit_with(&out, 3, "policy");
    assert!(server.requests().is_empty());
}

#[test]
fn a_malformed_budget_is_named_with_its_line() {
    let t = TestDir::new();
    let plan = t.plan_text(
        "bad.json",
        "{\n  \"plan_id\": \"p\",\n  \"budget\": {\"wall_clock\": \"soon\", \"tokens\": -5,\n    \"toknes\": 1},\n  \"steps\": [\n    {\"step_id\": \"r\", \"tool\": \"file_read\", \"arguments\": {\"path\": \"a\"},\n     \"budget\": {\"tokens\": 5}}\n  ]\n}\n",
    );
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(code(&out), 2, "{err}");
    for needle in [
        "plan.budget.wall_clock: \"soon\" is not a duration",
        "plan.budget.tokens: expected a whole number from 1",
        "plan.budget.toknes: unknown field (did you mean \"tokens\"?)",
        "(at line 3)",
        "steps[0].budget: a budget bounds model calls, so only an agent step takes one",
        "(step at line 6)",
    ] {
        assert!(err.contains(needle), "{needle:?} missing from:\n{err}");
    }
}

#[test]
fn junit_and_the_report_show_what_each_step_spent() {
    let t = TestDir::new();
    t.file(
        "acode-policy.json",
        r#"{"prices": {"test-model": {"input_per_mtok": 1000, "output_per_mtok": 2000}}}"#,
    );
    let server = ScriptedServer::start(vec![read(), done()]);
    let plan = budget_plan(
        &t,
        Some(json!({"cost_usd": 1})),
        vec![
            agent_step("fix", None),
            json!({"step_id": "after", "tool": "file_read", "arguments": {"path": "a.txt"}}),
        ],
    );
    let junit = t.root.join("junit.xml");
    let html = t.root.join("report.html");
    let out = t.approve_and_run_with_model(
        &plan,
        &server,
        &[
            "--junit",
            junit.to_str().unwrap(),
            "--report-html",
            html.to_str().unwrap(),
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let xml = std::fs::read_to_string(&junit).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let case = |name: &str| {
        doc.descendants()
            .find(|n| n.has_tag_name("testcase") && n.attribute("name") == Some(name))
            .unwrap()
    };
    let props: Vec<(&str, &str)> = case("fix")
        .descendants()
        .filter(|n| n.has_tag_name("property"))
        .map(|n| (n.attribute("name").unwrap(), n.attribute("value").unwrap()))
        .collect();
    assert_eq!(
        props,
        [
            ("tokens", "30"),
            ("model_calls", "2"),
            ("cost_usd", "0.040000")
        ]
    );
    assert!(
        !case("after")
            .descendants()
            .any(|n| n.has_tag_name("property"))
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("30 tokens, 2 model calls, $0.0400"),
        "spend missing"
    );
}
