//! Crash recovery: `kill -9` at any moment, then resume (SPEC §9, §11).

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::*;

fn wait_for(path: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn kill9(child: &mut std::process::Child) {
    // SAFETY: SIGKILL to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
}

/// Starts the plan without the OS sandbox, waits until its slow step wrote a `started-<pid>` marker,
/// then kills acode-run with SIGKILL.
fn kill9_once_started(t: &TestDir, plan: &std::path::Path) {
    let mut child = t
        .cmd()
        .args([plan.to_str().unwrap(), "--sandbox", "none"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !walk(&t.ws).iter().any(|p| {
        p.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("started-")
    }) {
        assert!(Instant::now() < deadline, "the slow step never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    kill9(&mut child);
}

fn integrity_ok(t: &TestDir) {
    assert_eq!(q::<String>(&t.db(), "PRAGMA integrity_check"), "ok");
}

fn no_half_written_files(t: &TestDir) {
    for entry in walk(&t.ws) {
        let name = entry.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            !name.starts_with(".acode-tmp"),
            "half-written file left: {}",
            entry.display()
        );
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

#[test]
fn an_interrupted_command_step_is_rerun_only_when_asked() {
    let t = TestDir::new();
    t.file(
        "slow.py",
        "import os, time\nopen('started-' + str(os.getpid()), 'w').write('1')\ntime.sleep(2)\n",
    );
    let plan = t.plan("r.json", &json!({"plan_id": "resume", "steps": [
        {"step_id": "first", "tool": "file_write", "arguments": {"path": "first.txt", "contents": "1"}},
        {"step_id": "slow", "tool": "run_command", "arguments": {"command": "python3 slow.py"}},
        {"step_id": "last", "tool": "file_write", "arguments": {"path": "last.txt", "contents": "3"}}]}));
    t.approve(&plan);
    kill9_once_started(&t, &plan);
    integrity_ok(&t);
    let run_id: String = q(&t.db(), "SELECT run_id FROM runs");
    assert_eq!(q::<String>(&t.db(), "SELECT status FROM runs"), "running");
    assert_eq!(
        q::<String>(&t.db(), "SELECT status FROM steps WHERE step_id='slow'"),
        "running"
    );

    // run_command is not idempotent: resuming refuses to run it twice unasked.
    let out = t.run(&["resume", &run_id, "--sandbox", "none"]);
    assert_eq!(code(&out), 30, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--rerun-interrupted"),
        "{}",
        stderr(&out)
    );
    assert!(!t.ws.join("last.txt").exists());
    assert_eq!(q::<String>(&t.db(), "SELECT status FROM runs"), "failed");

    // That attempt failed the run, and a failed run is not resumed.
    let out = t.run(&["resume", &run_id]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("only interrupted runs can be resumed"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn resume_with_rerun_interrupted_completes_each_step_once() {
    let t = TestDir::new();
    t.file(
        "slow.py",
        "import os, time\nopen('started-' + str(os.getpid()), 'w').write('1')\ntime.sleep(1)\n",
    );
    let plan = t.plan("r.json", &json!({"plan_id": "resume", "steps": [
        {"step_id": "first", "tool": "file_write", "arguments": {"path": "first.txt", "contents": "1"}},
        {"step_id": "slow", "tool": "run_command", "arguments": {"command": "python3 slow.py"}},
        {"step_id": "last", "tool": "file_write", "arguments": {"path": "last.txt", "contents": "3"}}]}));
    t.approve(&plan);
    kill9_once_started(&t, &plan);
    let out = t.run(&[
        "run",
        plan.to_str().unwrap(),
        "--resume",
        "--rerun-interrupted",
        "--sandbox",
        "none",
        "--jsonl",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let events = events(&out);
    assert_eq!(events[0]["already_completed"], 1);
    let db = t.db();
    assert_eq!(
        q::<i64>(&db, "SELECT count(*) FROM runs"),
        1,
        "resumed, not restarted"
    );
    assert_eq!(q::<String>(&db, "SELECT status FROM runs"), "completed");
    assert_eq!(
        q::<i64>(&db, "SELECT count(*) FROM steps WHERE status='completed'"),
        3
    );
    assert_eq!(
        q::<i64>(&db, "SELECT count(*) FROM executions WHERE step_id='first'"),
        1,
        "not re-run"
    );
    assert_eq!(
        q::<i64>(&db, "SELECT count(*) FROM executions WHERE step_id='last'"),
        1
    );
    assert_eq!(t.read("last.txt"), "3");
    integrity_ok(&t);
    // Nothing left to resume.
    let out = t.run(&["run", plan.to_str().unwrap(), "--resume"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("no interrupted run"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn kill_9_at_any_moment_then_resume_completes() {
    let steps: Vec<_> = (0..150)
        .map(|i| json!({"step_id": format!("w{i}"), "tool": "file_write",
                         "arguments": {"path": format!("out/f{i}.txt"), "contents": format!("content {i}\n")}}))
        .collect();
    for (round, delay_ms) in [30u64, 90, 160, 260].into_iter().enumerate() {
        let t = TestDir::new();
        let plan = t.plan("k.json", &json!({"plan_id": "kill9", "steps": steps}));
        t.approve(&plan);
        let mut child = t
            .cmd()
            .arg(plan.to_str().unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        kill9(&mut child);
        if !t.ws.join(".acode/executions.db").exists() {
            continue; // killed before the run began: nothing to resume, nothing written
        }
        let finished: Option<String> = t
            .db()
            .query_row("SELECT status FROM runs", [], |r| r.get(0))
            .ok();
        let out = t.run(&["run", plan.to_str().unwrap(), "--resume"]);
        match finished.as_deref() {
            Some("completed") => assert_eq!(code(&out), 2, "round {round}"),
            None => {} // the run row was never committed
            _ => assert_eq!(code(&out), 0, "round {round}: {}", stderr(&out)),
        }
        let db = t.db();
        if finished.is_some() {
            assert_eq!(
                q::<i64>(&db, "SELECT count(*) FROM steps WHERE status='completed'"),
                150,
                "round {round}"
            );
            // A step re-runs only if it was cut off mid-way: at most one step has two executions.
            assert!(
                q::<i64>(
                    &db,
                    "SELECT count(*) FROM (SELECT step_id FROM executions GROUP BY step_id HAVING count(*) > 1)"
                ) <= 1
            );
            for i in [0, 75, 149] {
                assert_eq!(t.read(&format!("out/f{i}.txt")), format!("content {i}\n"));
            }
        }
        integrity_ok(&t);
        no_half_written_files(&t);
        if finished.is_some() {
            let staged = walk(&t.ws.join(".acode/tmp"))
                .into_iter()
                .filter(|p| p.is_file())
                .count();
            assert_eq!(
                staged, 0,
                "round {round}: the crashed run's staging area was swept"
            );
        }
    }
}

#[test]
fn resume_refuses_a_changed_plan() {
    let t = TestDir::new();
    t.file(
        "slow.py",
        "import time\nopen('started', 'w').write('1')\ntime.sleep(30)\n",
    );
    let plan = t.plan(
        "r.json",
        &json!({"plan_id": "resume", "steps": [
        {"step_id": "slow", "tool": "run_command", "arguments": {"command": "python3 slow.py"}}]}),
    );
    t.approve(&plan);
    let mut child = t
        .cmd()
        .args([plan.to_str().unwrap(), "--sandbox", "none"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&t.ws.join("started"));
    kill9(&mut child);
    let run_id: String = q(&t.db(), "SELECT run_id FROM runs");
    // Edit and re-approve the plan: the run belongs to the old bytes.
    let text = std::fs::read_to_string(&plan)
        .unwrap()
        .replace("slow.py", "slow.py ");
    std::fs::write(&plan, text).unwrap();
    t.approve(&plan);
    let out = t.run(&["resume", &run_id]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("only the same plan can be resumed"),
        "{}",
        stderr(&out)
    );
}
