//! Running plans end to end: the loop, recording, confirmation, failures (SPEC §4, §8, §10).

use serde_json::json;

use crate::harness::*;

#[test]
fn single_read_is_recorded_with_its_stdout_artifact() {
    let t = TestDir::new();
    t.file("hello.txt", "hello world\n");
    let plan = t.plan("p.json", &json!({"plan_id": "one", "steps": [
        {"step_id": "read", "tool": "file_read", "arguments": {"path": "hello.txt"}, "precondition": "file exists"}]}));
    let out = t.approve_and_run(&plan, &[]);
    assert_exit_with(&out, 0, "[1/1] read file_read hello.txt … ok");
    let db = t.db();
    assert_eq!(q::<String>(&db, "SELECT status FROM runs"), "completed");
    assert_eq!(q::<i64>(&db, "SELECT exit_code FROM runs"), 0);
    assert_eq!(
        q::<String>(&db, "SELECT status FROM steps WHERE step_id = 'read'"),
        "completed"
    );
    assert_eq!(
        q::<String>(&db, "SELECT tool_name FROM executions"),
        "file_read"
    );
    assert_eq!(q::<i64>(&db, "SELECT success FROM executions"), 1);
    let content: String = q(
        &db,
        "SELECT a.content FROM artifacts a JOIN executions e USING (execution_id) WHERE a.artifact_type = 'stdout'",
    );
    assert_eq!(content, "hello world\n");
    let id: String = q(&db, "SELECT execution_id FROM executions");
    assert_eq!(uuid::Uuid::parse_str(&id).unwrap().get_version_num(), 4);
    // The artifact command prints it back.
    let out = t.run(&["artifact", &id, "stdout"]);
    assert_eq!(stdout(&out), "hello world\n");
}

#[test]
fn failure_stops_the_run_and_blocks_dependents() {
    let t = TestDir::new();
    t.file("a.txt", "a");
    let plan = t.plan("p.json", &json!({"plan_id": "three", "steps": [
        {"step_id": "first", "tool": "file_read", "arguments": {"path": "a.txt"}},
        {"step_id": "second", "tool": "file_read", "arguments": {"path": "missing.txt"}},
        {"step_id": "third", "tool": "file_write", "arguments": {"path": "c.txt", "contents": "c"}}]}));
    let out = t.approve_and_run(&plan, &[]);
    assert_eq!(code(&out), 30, "{}", stderr(&out));
    assert!(!t.ws.join("c.txt").exists(), "third step must not run");
    let db = t.db();
    assert_eq!(
        q::<String>(&db, "SELECT status FROM steps WHERE step_id='first'"),
        "completed"
    );
    assert_eq!(
        q::<String>(&db, "SELECT status FROM steps WHERE step_id='second'"),
        "failed"
    );
    assert_eq!(
        q::<String>(&db, "SELECT status FROM steps WHERE step_id='third'"),
        "blocked"
    );
    assert_eq!(
        q::<String>(&db, "SELECT error_code FROM steps WHERE step_id='third'"),
        "blocked"
    );
    assert_eq!(
        q::<i64>(&db, "SELECT count(*) FROM executions WHERE step_id='third'"),
        0
    );
    assert_eq!(q::<String>(&db, "SELECT status FROM runs"), "failed");
    assert_eq!(q::<i64>(&db, "SELECT exit_code FROM runs"), 30);
}

#[test]
fn on_failure_continue_tolerates_the_failure_and_runs_dependents() {
    let t = TestDir::new();
    let plan = t.plan("p.json", &json!({"plan_id": "cont", "steps": [
        {"step_id": "bad", "tool": "file_read", "arguments": {"path": "missing"}, "on_failure": "continue"},
        {"step_id": "needs-bad", "tool": "file_write", "arguments": {"path": "x.txt", "contents": "x"}},
        {"step_id": "independent", "tool": "file_write", "arguments": {"path": "y.txt", "contents": "y"}, "depends_on": []}]}));
    let out = t.approve_and_run(&plan, &["--jsonl"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(t.read("x.txt"), "x");
    assert_eq!(t.read("y.txt"), "y");
    assert!(
        stderr(&out).contains("1 failed, tolerated"),
        "{}",
        stderr(&out)
    );
    let evs = events(&out);
    let failed = evs.iter().find(|e| e["type"] == "step_failed").unwrap();
    assert_eq!(failed["tolerated"], true);
    let fin = evs.iter().find(|e| e["type"] == "run_finished").unwrap();
    assert_eq!(
        (fin["failed"].as_u64(), fin["tolerated"].as_u64()),
        (Some(1), Some(1))
    );
    let db = t.db();
    assert_eq!(
        q::<String>(&db, "SELECT status FROM steps WHERE step_id='bad'"),
        "failed"
    );
    assert_eq!(
        q::<String>(&db, "SELECT status FROM steps WHERE step_id='needs-bad'"),
        "completed"
    );
    assert_eq!(q::<String>(&db, "SELECT status FROM runs"), "completed");
}

#[test]
fn a_tolerated_failure_does_not_hide_a_later_fatal_one() {
    let t = TestDir::new();
    let plan = t.plan("p.json", &json!({"plan_id": "cont2", "steps": [
        {"step_id": "bad", "tool": "file_read", "arguments": {"path": "missing"}, "on_failure": "continue"},
        {"step_id": "worse", "tool": "file_read", "arguments": {"path": "also-missing"}},
        {"step_id": "after", "tool": "file_write", "arguments": {"path": "z.txt", "contents": "z"}}]}));
    let out = t.approve_and_run(&plan, &[]);
    assert_eq!(code(&out), 30);
    assert!(!t.ws.join("z.txt").exists());
    assert!(
        stderr(&out).contains("2 failed (1 tolerated)"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn stop_skips_unrelated_later_steps() {
    let t = TestDir::new();
    let plan = t.plan("p.json", &json!({"plan_id": "stop", "steps": [
        {"step_id": "bad", "tool": "file_read", "arguments": {"path": "missing"}},
        {"step_id": "later", "tool": "file_write", "arguments": {"path": "y.txt", "contents": "y"}, "depends_on": []},
        {"step_id": "after-later", "tool": "file_write", "arguments": {"path": "z.txt", "contents": "z"}}]}));
    let out = t.approve_and_run(&plan, &[]);
    assert_eq!(code(&out), 30);
    assert!(!t.ws.join("y.txt").exists());
    assert_eq!(
        q::<String>(&t.db(), "SELECT status FROM steps WHERE step_id='later'"),
        "skipped"
    );
    // Depending on a skipped step is not depending on a failure: skipped too, not blocked.
    assert_eq!(
        q::<String>(
            &t.db(),
            "SELECT status FROM steps WHERE step_id='after-later'"
        ),
        "skipped"
    );
}

#[test]
fn denied_confirmation_exits_33_and_leaves_the_file() {
    let t = TestDir::new();
    t.file("keep.txt", "precious");
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "deny", "steps": [
        {"step_id": "delete", "tool": "file_delete", "arguments": {"path": "keep.txt"}}]}),
    );
    // No TTY: the default is auto-deny.
    let out = t.approve_and_run(&plan, &[]);
    assert_eq!(code(&out), 33, "{}", stderr(&out));
    assert_eq!(t.read("keep.txt"), "precious");
    let db = t.db();
    assert_eq!(
        q::<String>(&db, "SELECT error_code FROM steps"),
        "confirmation_denied"
    );
    assert_eq!(
        q::<String>(&db, "SELECT error_code FROM executions"),
        "confirmation_denied"
    );
    // With auto-approve it goes ahead.
    let out = t.run(&[plan.to_str().unwrap(), "--confirm", "auto-approve"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!t.ws.join("keep.txt").exists());
}

#[test]
fn step_requiring_confirmation_is_gated() {
    let t = TestDir::new();
    let plan = t.plan("p.json", &json!({"plan_id": "gate", "steps": [
        {"step_id": "w", "tool": "file_write", "arguments": {"path": "w.txt", "contents": "x"}, "requires_confirmation": true}]}));
    let out = t.approve_and_run(&plan, &["--confirm", "auto-deny"]);
    assert_eq!(code(&out), 33);
    assert!(!t.ws.join("w.txt").exists());
}

#[test]
fn two_runs_have_distinct_execution_ids() {
    let t = TestDir::new();
    t.file("a.txt", "a");
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "twice", "steps": [
        {"step_id": "r", "tool": "file_read", "arguments": {"path": "a.txt"}}]}),
    );
    assert_eq!(code(&t.approve_and_run(&plan, &[])), 0);
    assert_eq!(code(&t.run(&[plan.to_str().unwrap()])), 0);
    let db = t.db();
    assert_eq!(
        q::<i64>(&db, "SELECT count(DISTINCT execution_id) FROM executions"),
        2
    );
    assert_eq!(q::<i64>(&db, "SELECT count(DISTINCT run_id) FROM runs"), 2);
}

#[test]
fn failed_precondition_never_calls_the_tool() {
    let t = TestDir::new();
    t.file("src/lib.rs", "fn main() {}\n");
    let plan = t.plan("p.json", &json!({"plan_id": "pre", "steps": [
        {"step_id": "w", "tool": "file_write", "arguments": {"path": "out.txt", "contents": "x"},
         "precondition": {"file_contains": {"path": "src/lib.rs", "pattern": "fn is_valid_email"}}}]}));
    let out = t.approve_and_run(&plan, &[]);
    assert_eq!(code(&out), 30);
    assert!(!t.ws.join("out.txt").exists());
    let db = t.db();
    assert_eq!(
        q::<String>(&db, "SELECT error_code FROM steps"),
        "precondition_failed"
    );
    assert!(q::<String>(&db, "SELECT error_message FROM steps").contains("does not match"));
    assert_eq!(q::<i64>(&db, "SELECT count(*) FROM executions"), 0);
}

#[test]
fn structured_preconditions_pass_and_fail() {
    let t = TestDir::new();
    t.file("Cargo.toml", "[package]\nname = \"x\"\n");
    t.file("src/lib.rs", "pub fn f() {}\n");
    let plan = t.plan("p.json", &json!({"plan_id": "pre2", "steps": [
        {"step_id": "a", "tool": "file_read", "arguments": {"path": "src/lib.rs"}, "precondition": "Cargo workspace exists"},
        {"step_id": "b", "tool": "file_read", "arguments": {"path": "src/lib.rs"}, "precondition": {"file_exists": "Cargo.toml"}},
        {"step_id": "c", "tool": "file_create", "arguments": {"path": "new.txt", "contents": "n"}, "precondition": {"file_absent": "new.txt"}},
        {"step_id": "d", "tool": "file_read", "arguments": {"path": "new.txt"}, "precondition": {"file_absent": "new.txt"}}]}));
    let out = t.approve_and_run(&plan, &[]);
    assert_eq!(code(&out), 30, "{}", stderr(&out));
    let db = t.db();
    for (s, status) in [
        ("a", "completed"),
        ("b", "completed"),
        ("c", "completed"),
        ("d", "failed"),
    ] {
        assert_eq!(
            q::<String>(
                &db,
                &format!("SELECT status FROM steps WHERE step_id='{s}'")
            ),
            status,
            "step {s}"
        );
    }
}

#[test]
fn jsonl_events_are_the_only_stdout() {
    let t = TestDir::new();
    t.file("a.txt", "a");
    let plan = t.plan("p.json", &json!({"plan_id": "events", "steps": [
        {"step_id": "r", "tool": "file_read", "arguments": {"path": "a.txt"}, "precondition": "file exists"},
        {"step_id": "w", "tool": "file_write", "arguments": {"path": "b.txt", "contents": "b"}}]}));
    let out = t.approve_and_run(&plan, &["--jsonl"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let events = events(&out);
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "run_started",
            "step_started",
            "precondition_checked",
            "tool_call",
            "tool_result",
            "step_completed",
            "step_started",
            "tool_call",
            "tool_result",
            "step_completed",
            "run_finished"
        ]
    );
    let run_id = events[0]["run_id"].as_str().unwrap();
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["seq"], (i + 1) as u64);
        assert_eq!(e["v"], 1);
        assert_eq!(e["run_id"], run_id);
        assert!(e["ts_ms"].as_i64().unwrap() > 1_600_000_000_000);
    }
    assert_eq!(events.last().unwrap()["exit_code"], 0);
}

#[test]
fn json_result_and_queries() {
    let t = TestDir::new();
    t.file("a.txt", "a");
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "q", "steps": [
        {"step_id": "r", "tool": "file_read", "arguments": {"path": "a.txt"}}]}),
    );
    let out = t.approve_and_run(&plan, &["--json"]);
    let result: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(result["status"], "completed");
    assert_eq!(result["steps"][0]["status"], "completed");
    let run_id = result["run_id"].as_str().unwrap().to_string();
    let out = t.run(&["runs"]);
    assert!(stdout(&out).contains(&run_id));
    let out = t.run(&["show", &run_id[..8]]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("file_read"));
    let out = t.run(&["show", &run_id, "--json"]);
    let detail: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let types: Vec<&str> = detail["executions"][0]["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["artifact_type"].as_str().unwrap())
        .collect();
    assert!(types.contains(&"stdout"), "{types:?}");
    assert_eq!(code(&t.run(&["show", "nonexistent"])), 2);
}

#[test]
fn database_and_git_are_not_writable_by_plans() {
    let t = TestDir::new();
    std::fs::create_dir_all(t.ws.join(".git")).unwrap();
    for (i, path) in [
        ".git/config",
        ".acode/executions.db",
        ".acode/executions.db-wal",
        ".acode/other",
    ]
    .iter()
    .enumerate()
    {
        let plan = t.plan(
            &format!("p{i}.json"),
            &json!({"plan_id": "prot", "steps": [
            {"step_id": "w", "tool": "file_write", "arguments": {"path": path, "contents": "x"}}]}),
        );
        // Validation catches it early as a sandbox violation.
        let out = t.run(&["run", "--approve", plan.to_str().unwrap()]);
        assert_eq!(code(&out), 32, "{path}: {}", stderr(&out));
    }
    assert!(!t.ws.join(".git/config").exists());
}

#[test]
fn four_concurrent_runs_share_one_database() {
    let t = TestDir::new();
    let db = t.root.join("shared.db");
    let children: Vec<_> = (0..4)
        .map(|k| {
            let steps: Vec<_> = (0..60)
                .map(|i| json!({"step_id": format!("s{i}"), "tool": "file_write",
                                 "arguments": {"path": format!("run{k}/f{i}.txt"), "contents": "x"}}))
                .collect();
            let plan = t.plan(&format!("c{k}.json"), &json!({"plan_id": format!("concurrent-{k}"), "steps": steps}));
            t.approve(&plan);
            t.cmd()
                .args([plan.to_str().unwrap(), "--db", db.to_str().unwrap()])
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(!stderr(&out).contains("locked"), "{}", stderr(&out));
    }
    let db = rusqlite::Connection::open(&db).unwrap();
    assert_eq!(
        q::<i64>(&db, "SELECT count(*) FROM runs WHERE status='completed'"),
        4
    );
    assert_eq!(
        q::<i64>(&db, "SELECT count(*) FROM executions WHERE success=1"),
        240
    );
    assert_eq!(q::<String>(&db, "PRAGMA integrity_check"), "ok");
}

/// Runs the binary on a real pseudo-terminal (via fixtures/tty/drive.py), answering prompts.
fn on_tty(t: &TestDir, answers: &str, args: &[&str]) -> (i32, String) {
    let driver = repo().join("fixtures/tty/drive.py");
    let mut c = std::process::Command::new("python3");
    clean_env(&mut c);
    let out = c
        .arg(driver)
        .arg(answers)
        .arg(&t.ws)
        .arg(env!("CARGO_BIN_EXE_acode-run"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (code(&out), stdout(&out))
}

#[test]
fn on_a_terminal_the_prompt_asks_and_shows_the_diff() {
    let t = TestDir::new();
    t.file("a.txt", "old line\n");
    t.file("b.txt", "keep\n");
    let plan = t.plan("p.json", &json!({"plan_id": "tty", "steps": [
        {"step_id": "edit", "tool": "file_edit", "arguments": {"path": "a.txt", "old": "old", "new": "new"}, "requires_confirmation": true},
        {"step_id": "delete", "tool": "file_delete", "arguments": {"path": "b.txt"}}]}));
    t.approve(&plan);
    // Yes to the edit, no to the delete.
    let (code, screen) = on_tty(&t, "yn", &[plan.to_str().unwrap()]);
    assert_eq!(code, 33, "{screen}");
    assert!(screen.contains("+new line"), "the diff is shown: {screen}");
    assert_eq!(t.read("a.txt"), "new line\n");
    assert_eq!(t.read("b.txt"), "keep\n");
    // "a" approves everything after it.
    t.file("a.txt", "old line\n");
    let (code, screen) = on_tty(&t, "a", &[plan.to_str().unwrap()]);
    assert_eq!(code, 0, "{screen}");
    assert!(!t.ws.join("b.txt").exists());
    assert_eq!(screen.matches("allow?").count(), 1, "{screen}");
}

#[test]
fn jsonl_covers_confirmations_failures_and_blocked_steps() {
    let t = TestDir::new();
    t.file("keep.txt", "x");
    let plan = t.plan("p.json", &json!({"plan_id": "ev2", "steps": [
        {"step_id": "del", "tool": "file_delete", "arguments": {"path": "keep.txt"}},
        {"step_id": "after", "tool": "file_read", "arguments": {"path": "keep.txt"}},
        {"step_id": "other", "tool": "file_read", "arguments": {"path": "keep.txt"}, "depends_on": []}]}));
    let out = t.approve_and_run(&plan, &["--jsonl", "--confirm", "auto-deny"]);
    assert_eq!(code(&out), 33);
    let events = events(&out);
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    for expected in [
        "confirmation_requested",
        "confirmation_decided",
        "tool_result",
        "step_failed",
        "step_blocked",
        "run_finished",
    ] {
        assert!(
            types.contains(&expected),
            "{expected} missing from {types:?}"
        );
    }
    let blocked: Vec<_> = events
        .iter()
        .filter(|e| e["type"] == "step_blocked")
        .collect();
    assert_eq!(blocked[0]["step_id"], "after");
    assert_eq!(blocked[0]["status"], "blocked");
    assert_eq!(blocked[1]["step_id"], "other");
    assert_eq!(blocked[1]["status"], "skipped");
    let decided = events
        .iter()
        .find(|e| e["type"] == "confirmation_decided")
        .unwrap();
    assert_eq!(decided["decision"], "deny");
}

#[test]
fn the_readme_hello_plan_runs_with_its_committed_approval() {
    let t = TestDir::new();
    let root = repo();
    copy_tree(&root.join("fixtures/hello"), &t.ws);
    let plan = root.join("plans/hello.json");
    let out = t.run(&[plan.to_str().unwrap(), "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let result: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(result["steps"].as_array().unwrap().len(), 8);
    assert!(t.read("src/lib.rs").contains("Hello, acode-run"));
    let run_id = result["run_id"].as_str().unwrap();
    assert!(
        t.ws.join(format!("notes/run-{run_id}.md")).exists(),
        "${{run_id}} was substituted"
    );
}

/// `--jsonl | head -1` (issue 43 §3): once the reader is gone the run goes on, says once on stderr
/// that the events are no longer delivered, and records it with the run (`show`, the database).
#[test]
fn a_jsonl_reader_that_goes_away_is_said_once_and_recorded() {
    use std::io::BufRead;
    let t = TestDir::new();
    t.file(
        "gate.py",
        "import os, time\nfor _ in range(600):\n    if os.path.exists('go'): break\n    time.sleep(0.05)\n",
    );
    let mut steps = vec![json!({"step_id": "wait", "tool": "run_command",
        "arguments": {"command": "python3 gate.py"}})];
    for i in 0..3 {
        steps.push(json!({"step_id": format!("w{i}"), "tool": "file_write",
            "arguments": {"path": format!("out/{i}.txt"), "contents": "x"}}));
    }
    let plan = t.plan("p.json", &json!({"plan_id": "head", "steps": steps}));
    t.approve(&plan);
    let mut child = t
        .cmd()
        .args([plan.to_str().unwrap(), "--jsonl"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let err = collect_stderr(&mut child);
    // `head -1`: the first line, then the pipe closed.
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains("\"run_started\""), "{first}");
    std::fs::write(t.ws.join("go"), "").unwrap();
    let status = child.wait().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let err = err.lock().unwrap().clone();
    assert_eq!(status.code(), Some(0), "{err}");
    for i in 0..3 {
        assert_eq!(t.read(&format!("out/{i}.txt")), "x", "the run went on");
    }
    assert_eq!(err.matches("--jsonl: events from seq").count(), 1, "{err}");
    assert!(
        err.contains("were not delivered: the output was closed"),
        "{err}"
    );
    let lost: String = q(&t.db(), "SELECT events_lost FROM runs");
    assert!(lost.starts_with("events from seq "), "{lost}");
    let run_id: String = q(&t.db(), "SELECT run_id FROM runs");
    let show = stdout(&t.run(&["show", &run_id]));
    assert!(
        show.contains("events    --jsonl events from seq "),
        "{show}"
    );
    // A run whose reader stayed (`go` is there now) records nothing of the kind.
    let out = t.run(&[plan.to_str().unwrap(), "--jsonl"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        q::<i64>(
            &t.db(),
            "SELECT count(*) FROM runs WHERE events_lost IS NULL"
        ),
        1
    );
}
