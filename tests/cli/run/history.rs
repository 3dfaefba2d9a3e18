//! The read-only `history` tool: this workspace's past executions, filtered, redacted, bounded —
//! and never another workspace's runs, even from a shared database.

use serde_json::{Value, json};

use crate::harness::{TestDir, code, q, stderr};

/// Approves and runs `plan` in `t`'s workspace with the shared database `db`.
fn run_in(t: &TestDir, db: &str, plan: &std::path::Path) -> std::process::Output {
    let p = plan.to_str().unwrap();
    let out = t.run(&["approve", p, "--by", "tester", "--db", db]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    t.run(&["run", p, "--db", db])
}

/// The `stdout` artifacts of the `history` calls recorded in `db`, in order.
fn history_results(db: &str) -> Vec<Value> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT a.content FROM artifacts a JOIN executions e USING (execution_id)
             WHERE e.tool_name = 'history' AND a.artifact_type = 'stdout' ORDER BY e.started_at, e.rowid",
        )
        .unwrap();
    stmt.query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(|c| serde_json::from_str(&c.unwrap()).unwrap())
        .collect()
}

fn step_ids(v: &Value) -> Vec<String> {
    v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["step_id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn history_shows_this_workspace_only_filtered_redacted_and_bounded() {
    let a = TestDir::new();
    let b = TestDir::new();
    let db = a.root.join("shared.db");
    let db = db.to_str().unwrap();
    a.file("in-a.txt", "a\n");

    // Workspace A: a success, a failure, and a secret in an argument.
    let first = a.plan(
        "first.json",
        &json!({"plan_id": "first", "variables": {"api_token": "tok-9f8e7d6c5b4a"}, "steps": [
            {"step_id": "a-read", "tool": "file_read", "arguments": {"path": "in-a.txt"}},
            {"step_id": "a-missing", "tool": "file_read", "arguments": {"path": "nope.txt"},
             "on_failure": "continue"},
            {"step_id": "a-secret", "tool": "file_write",
             "arguments": {"path": "out.txt", "contents": "${api_token}"}, "depends_on": ["a-read"]}]}),
    );
    assert_eq!(code(&run_in(&a, db, &first)), 0);
    // Workspace B, same database: its runs must never show up in A's history.
    b.file("in-b.txt", "b\n");
    let other = b.plan(
        "other.json",
        &json!({"plan_id": "other", "steps": [
            {"step_id": "b-only-step", "tool": "file_read", "arguments": {"path": "in-b.txt"}}]}),
    );
    assert_eq!(code(&run_in(&b, db, &other)), 0);

    let look = a.plan(
        "look.json",
        &json!({"plan_id": "look", "intent": "explain", "steps": [
            {"step_id": "all", "tool": "history", "arguments": {}},
            {"step_id": "failures", "tool": "history", "arguments": {"status": "failed"}},
            {"step_id": "writes", "tool": "history", "arguments": {"tool": "file_write", "since": "1h"}},
            {"step_id": "one", "tool": "history", "arguments": {"limit": 1}},
            {"step_id": "capped", "tool": "history", "arguments": {"limit": 100000}},
            {"step_id": "future", "tool": "history", "arguments": {"since": "2999-01-01"}}]}),
    );
    let out = run_in(&a, db, &look);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let r = history_results(db);
    assert_eq!(r.len(), 6);
    let all = step_ids(&r[0]);
    // Newest first; A's three executions; nothing of B's.
    assert_eq!(all, ["a-secret", "a-missing", "a-read"], "{}", r[0]);
    let text = serde_json::to_string(&r).unwrap();
    assert!(
        !text.contains("b-only-step") && !text.contains("in-b.txt"),
        "{text}"
    );
    assert!(
        !text.contains("tok-9f8e7d6c5b4a"),
        "the secret leaked: {text}"
    );
    assert!(text.contains("[REDACTED]"), "{text}");
    assert_eq!(step_ids(&r[1]), ["a-missing"]);
    assert_eq!(r[1]["entries"][0]["status"], "failed");
    assert!(
        r[1]["entries"][0]["error_message"]
            .as_str()
            .unwrap()
            .contains("nope.txt"),
        "{}",
        r[1]
    );
    assert_eq!(step_ids(&r[2]), ["a-secret"]);
    // The newest execution is this run's own previous history call.
    assert_eq!(step_ids(&r[3]), ["writes"]);
    assert_eq!(r[3]["truncated"], true);
    assert_eq!(r[4]["truncated"], false);
    assert_eq!(step_ids(&r[5]).len(), 0);
    // The model-facing content says when it was cut or capped.
    let conn = rusqlite::Connection::open(db).unwrap();
    let stdout_of = |step: &str| -> String {
        q(
            &conn,
            &format!(
                "SELECT a.content FROM artifacts a JOIN executions e USING (execution_id)
                 WHERE e.step_id = '{step}' AND a.artifact_type = 'stdout'"
            ),
        )
    };
    assert!(
        !stdout_of("one").contains("[acode-run"),
        "artifact is the data only"
    );
    // B sees its own history, not A's.
    let look_b = b.plan(
        "look.json",
        &json!({"plan_id": "look-b", "steps": [
            {"step_id": "b-all", "tool": "history", "arguments": {}}]}),
    );
    assert_eq!(code(&run_in(&b, db, &look_b)), 0);
    let r = history_results(db);
    assert_eq!(step_ids(&r[6]), ["b-only-step"], "{}", r[6]);
}

#[test]
fn bad_history_arguments_are_validation_errors() {
    let t = TestDir::new();
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "p", "steps": [
            {"step_id": "h", "tool": "history", "arguments": {"since": "last tuesday-ish"}},
            {"step_id": "s", "tool": "history", "arguments": {"status": "maybe"}},
            {"step_id": "z", "tool": "history", "arguments": {"limit": 0}}]}),
    );
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let err = stderr(&out);
    for needle in [
        "steps[0].arguments",
        "RFC 3339",
        "steps[1].arguments.status",
        "steps[2].arguments.limit",
    ] {
        assert!(err.contains(needle), "{needle:?} in {err}");
    }
}

#[test]
fn an_agent_step_can_read_the_history() {
    use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};
    let t = TestDir::new();
    let db = t.root.join("h.db");
    let db = db.to_str().unwrap();
    t.file("a.txt", "a\n");
    let first = t.plan(
        "first.json",
        &json!({"plan_id": "first", "steps": [
            {"step_id": "earlier-read", "tool": "file_read", "arguments": {"path": "a.txt"}}]}),
    );
    assert_eq!(code(&run_in(&t, db, &first)), 0);
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_tool_calls(&[("history", json!({"tool": "file_read"}))]),
        ScriptedResponse::chat_text("a.txt was read once before."),
    ]);
    let plan = t.plan(
        "agent.json",
        &json!({"plan_id": "ask", "intent": "explain", "steps": [
            {"step_id": "ask", "tool": "agent", "arguments": {
                "instruction": "What was read before?", "tools": ["history"], "max_turns": 3}}]}),
    );
    let p = plan.to_str().unwrap();
    assert_eq!(
        code(&t.run(&["approve", p, "--by", "tester", "--db", db])),
        0
    );
    let out = t.run(&[
        "run",
        p,
        "--db",
        db,
        "--llm-url",
        &server.url(),
        "--model",
        "m",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // The model got the history as the tool result: the earlier run's read, by its step id.
    let requests = server.requests();
    let second = requests[1].body["messages"].to_string();
    assert!(second.contains("earlier-read"), "{second}");
    let r = history_results(db);
    assert_eq!(step_ids(&r[0]), ["earlier-read"]);
}
