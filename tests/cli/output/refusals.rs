//! Machine-readable on every exit (SPEC §10): with `--jsonl` an invocation that ends before or
//! without a run still writes one `run_refused` event; with `--json`, one object.

use serde_json::{Value, json};

use crate::harness::*;

/// The single `run_refused` event on stdout (checked against the shipped schema).
fn refused(out: &std::process::Output, exit_code: i32) -> Value {
    assert_eq!(code(out), exit_code, "{}", stderr(out));
    let events = events(out);
    assert_eq!(events.len(), 1, "exactly one event: {events:?}");
    let e = events[0].clone();
    assert_eq!(e["type"], "run_refused");
    assert_eq!(e["exit_code"], exit_code);
    assert!(!e["problems"].as_array().unwrap().is_empty());
    e
}

#[test]
fn an_invalid_plan_writes_every_problem_with_its_location() {
    let t = TestDir::new();
    let plan = t.plan_text(
        "bad.json",
        r#"{"plan_id": "bad", "steps": [
  {"step_id": "a", "tool": "no_such_tool", "arguments": {}},
  {"step_id": "b", "tool": "file_read", "arguments": {"path": "x"}, "depends_on": ["nope"]}
]}"#,
    );
    let out = t.run(&["run", plan.to_str().unwrap(), "--jsonl"]);
    let e = refused(&out, 2);
    let problems = e["problems"].as_array().unwrap();
    assert!(problems.len() >= 2, "{problems:?}");
    assert!(
        problems
            .iter()
            .all(|p| p["location"].as_str().unwrap().starts_with("steps[")),
        "{problems:?}"
    );
    assert!(problems.iter().any(|p| p["line"].is_u64()), "{problems:?}");

    // --json: one object with the same content.
    let out = t.run(&["run", plan.to_str().unwrap(), "--json"]);
    assert_eq!(code(&out), 2);
    let v: Value = serde_json::from_str(&stdout(&out)).expect("one JSON object");
    assert_eq!(v["status"], "refused");
    assert_eq!(v["exit_code"], 2);
    assert_eq!(v["problems"].as_array().unwrap().len(), problems.len());
}

#[test]
fn an_unauthorized_plan_says_so_on_stdout() {
    let t = TestDir::new();
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "p", "steps": [
        {"step_id": "w", "tool": "file_write", "arguments": {"path": "a.txt", "contents": "1"}}]}),
    );
    let out = t.run(&["run", plan.to_str().unwrap(), "--jsonl"]);
    let e = refused(&out, 3);
    assert_eq!(e["problems"][0]["kind"], "unauthorized");
    assert_eq!(e["problems"][0]["location"], plan.to_str().unwrap());
    assert!(e["error"].as_str().unwrap().contains("not approved"), "{e}");
    let out = t.run(&["run", plan.to_str().unwrap(), "--json"]);
    assert_eq!(code(&out), 3);
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["problems"][0]["kind"], "unauthorized");
}

#[test]
fn a_usage_error_says_so_on_stdout() {
    let t = TestDir::new();
    let out = t.run(&["run", "--jsonl"]);
    let e = refused(&out, 2);
    assert_eq!(e["problems"][0]["kind"], "usage");
    assert_eq!(e["problems"][0]["location"], "command line");
    let out = t.run(&["resume", "--json", "--bogus"]);
    assert_eq!(code(&out), 2);
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["exit_code"], 2);
    assert!(v["error"].as_str().unwrap().contains("--bogus"), "{v}");
}

#[test]
fn a_database_error_says_so_on_stdout() {
    let t = TestDir::new();
    let db = t.root.join("new.db");
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.pragma_update(None, "user_version", 99).unwrap();
    }
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "p", "steps": [
        {"step_id": "w", "tool": "file_write", "arguments": {"path": "a.txt", "contents": "1"}}]}),
    );
    t.approve(&plan);
    let out = t.run(&[
        "run",
        plan.to_str().unwrap(),
        "--db",
        db.to_str().unwrap(),
        "--jsonl",
    ]);
    let e = refused(&out, 1);
    assert_eq!(e["problems"][0]["kind"], "internal");
    assert!(
        e["error"].as_str().unwrap().contains("database schema 99"),
        "{e}"
    );
}
