//! `--jobs N` (issue #23): steps whose dependencies are complete run at once, on real processes,
//! and the run means what it means with one job — stop on the first fatal failure (what runs beside
//! it is cancelled and no process is left), no two writers of one path together, one question at a
//! time, strictly increasing `seq`, exactly-once after `kill -9` and `resume`.

use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::*;

/// A policy allowing the commands these tests run, without confirmation.
fn policy(t: &TestDir) {
    t.file(
        "acode-policy.json",
        &json!({"allow_commands": ["sleep", "sh"], "auto_approve_commands": ["sleep", "sh"]})
            .to_string(),
    );
}

/// (started_at, finished_at) of each step, in ms, from the database.
fn intervals(t: &TestDir, ids: &[&str]) -> Vec<(i64, i64)> {
    ids.iter()
        .map(|id| {
            t.db()
                .query_row(
                    "SELECT started_at, finished_at FROM steps WHERE step_id = ?1",
                    [id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .unwrap()
        })
        .collect()
}

/// Whether every interval overlaps every other (they all ran at one moment).
fn all_overlap(iv: &[(i64, i64)]) -> bool {
    let latest_start = iv.iter().map(|i| i.0).max().unwrap();
    let earliest_end = iv.iter().map(|i| i.1).min().unwrap();
    latest_start < earliest_end
}

/// Whether no two intervals overlap.
fn disjoint(iv: &[(i64, i64)]) -> bool {
    let mut v = iv.to_vec();
    v.sort();
    v.windows(2).all(|w| w[0].1 <= w[1].0)
}

#[test]
fn four_independent_sleeps_overlap_with_jobs_4_and_not_with_jobs_1() {
    let t = TestDir::new();
    policy(&t);
    let steps: Vec<Value> = (0..4)
        .map(|i| {
            json!({"step_id": format!("s{i}"), "tool": "run_command", "depends_on": [],
                   "parallel_safe": true, "arguments": {"argv": ["sleep", "0.5"]}})
        })
        .collect();
    let plan = t.plan("p.json", &json!({"plan_id": "sleeps", "steps": steps}));
    let ids = ["s0", "s1", "s2", "s3"];
    let started = Instant::now();
    let out = t.approve_and_run(&plan, &["--jobs", "4"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        all_overlap(&intervals(&t, &ids)),
        "{:?}",
        intervals(&t, &ids)
    );
    // The same plan with one job: one after another.
    let out = t.run(&["run", plan.to_str().unwrap(), "--jobs", "1"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let run_id: String = q(
        &t.db(),
        "SELECT run_id FROM runs ORDER BY started_at DESC LIMIT 1",
    );
    let serial: Vec<(i64, i64)> = ids
        .iter()
        .map(|id| {
            t.db()
                .query_row(
                    "SELECT started_at, finished_at FROM steps WHERE step_id = ?1 AND run_id = ?2",
                    [id, &run_id.as_str()],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .unwrap()
        })
        .collect();
    assert!(disjoint(&serial), "{serial:?}");
}

#[test]
fn a_fatal_failure_cancels_the_running_sibling_and_leaves_no_process() {
    let t = TestDir::new();
    policy(&t);
    // A marker no other process on the machine has in its command line.
    let marker = format!("30.{}", std::process::id());
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "cancel", "steps": [
        {"step_id": "slow", "tool": "run_command", "depends_on": [], "parallel_safe": true,
         "arguments": {"argv": ["sleep", marker]}},
        {"step_id": "bad", "tool": "run_command", "depends_on": [], "parallel_safe": true,
         "arguments": {"argv": ["sh", "-c", "sleep 0.3; exit 3"]}},
        {"step_id": "after-slow", "tool": "file_write", "depends_on": ["slow"],
         "arguments": {"path": "a.txt", "contents": "a"}},
        {"step_id": "unrelated", "tool": "file_write", "depends_on": ["bad"],
         "arguments": {"path": "b.txt", "contents": "b"}}]}),
    );
    let started = Instant::now();
    let out = t.approve_and_run(&plan, &["--jobs", "2", "--jsonl"]);
    let took = started.elapsed();
    // The first failure's exit code, said in the summary.
    assert_exit_with(&out, 30, "step bad failed first");
    assert!(
        took < Duration::from_secs(15),
        "the sibling was not cancelled: {took:?}"
    );
    let status = |id: &str| {
        q::<String>(
            &t.db(),
            &format!("SELECT status FROM steps WHERE step_id = '{id}'"),
        )
    };
    assert_eq!(status("bad"), "failed");
    assert_eq!(status("slow"), "cancelled");
    assert_eq!(status("after-slow"), "blocked");
    assert_eq!(status("unrelated"), "blocked");
    assert!(!t.ws.join("a.txt").exists() && !t.ws.join("b.txt").exists());
    let message: String = q(
        &t.db(),
        "SELECT error_message FROM steps WHERE step_id = 'slow'",
    );
    assert!(message.contains("step \"bad\" failed"), "{message}");
    let finished = events(&out)
        .into_iter()
        .find(|e| e["type"] == "run_finished")
        .unwrap();
    assert_eq!(finished["first_failure"], "bad");
    assert_eq!(finished["cancelled"], 1);
    // No process is left: nothing on the machine runs `sleep <marker>`.
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        assert!(
            !(cmdline.starts_with("sleep") && cmdline.contains(&marker)),
            "left running: {cmdline}"
        );
    }
}

#[test]
fn writers_of_one_path_and_commands_never_overlap() {
    let t = TestDir::new();
    policy(&t);
    // Two commands (they may write anywhere), and two writes of one file, all independent.
    let plan = t.plan("p.json", &json!({"plan_id": "writers", "steps": [
        {"step_id": "c1", "tool": "run_command", "depends_on": [], "arguments": {"argv": ["sleep", "0.4"]}},
        {"step_id": "c2", "tool": "run_command", "depends_on": [], "arguments": {"argv": ["sleep", "0.4"]}},
        {"step_id": "w1", "tool": "file_write", "depends_on": [], "arguments": {"path": "same.txt", "contents": "first"}},
        {"step_id": "w2", "tool": "file_write", "depends_on": [], "arguments": {"path": "./same.txt", "contents": "second"}},
        {"step_id": "r", "tool": "file_read", "depends_on": [], "arguments": {"path": "other.txt"},
         "on_failure": "continue"}]}));
    let out = t.approve_and_run(&plan, &["--jobs", "4"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let iv = intervals(&t, &["c1", "c2"]);
    assert!(disjoint(&iv), "two commands overlapped: {iv:?}");
    let iv = intervals(&t, &["w1", "w2"]);
    assert!(disjoint(&iv), "two writers of same.txt overlapped: {iv:?}");
    // The one that comes first in the plan went first.
    assert_eq!(t.read("same.txt"), "second");
    // And preview says which steps may run together.
    let out = t.run(&["preview", plan.to_str().unwrap()]);
    let text = stdout(&out);
    let beside = |id: &str| -> Vec<String> {
        let start = text.find(&format!("] {id} ")).unwrap();
        text[start..]
            .lines()
            .skip(1)
            .take_while(|l| l.starts_with("    "))
            .find_map(|l| l.split_once("may run at the same time as: "))
            .map(|(_, list)| list.split(", ").map(String::from).collect())
            .unwrap_or_default()
    };
    assert_eq!(beside("w1"), ["r"], "{text}");
    assert_eq!(beside("c1"), ["r"], "{text}");
    assert_eq!(beside("r"), ["c1", "c2", "w1", "w2"], "{text}");
}

#[test]
fn prompts_are_asked_one_at_a_time() {
    let t = TestDir::new();
    for i in 0..3 {
        t.file(&format!("f{i}.txt"), "x\n");
    }
    let steps: Vec<Value> = (0..3)
        .map(|i| {
            json!({"step_id": format!("d{i}"), "tool": "file_delete", "depends_on": [],
                   "arguments": {"path": format!("f{i}.txt")}})
        })
        .collect();
    let plan = t.plan("p.json", &json!({"plan_id": "prompts", "steps": steps}));
    t.approve(&plan);
    let mut child = t
        .cmd()
        .args([plan.to_str().unwrap(), "--confirm", "prompt", "--jobs", "3"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = collect_stderr(&mut child);
    let mut stdin = child.stdin.take().unwrap();
    for asked in 1..=3 {
        let deadline = Instant::now() + Duration::from_secs(20);
        while err.lock().unwrap().matches("allow?").count() < asked {
            assert!(
                Instant::now() < deadline,
                "no prompt {asked}: {}",
                err.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // Time for a second question to appear, were two asked together.
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(
            err.lock().unwrap().matches("allow?").count(),
            asked,
            "more than one question at once: {}",
            err.lock().unwrap()
        );
        stdin.write_all(b"y\n").unwrap();
    }
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{}", err.lock().unwrap());
    for i in 0..3 {
        assert!(!t.ws.join(format!("f{i}.txt")).exists());
    }
}

#[test]
fn seq_is_strictly_increasing_under_16_parallel_steps() {
    let t = TestDir::new();
    policy(&t);
    let steps: Vec<Value> = (0..16)
        .map(|i| {
            json!({"step_id": format!("s{i}"), "tool": "run_command", "depends_on": [],
                   "parallel_safe": true, "arguments": {"argv": ["sh", "-c", format!("echo {i}")]}})
        })
        .collect();
    let plan = t.plan("p.json", &json!({"plan_id": "seq", "steps": steps}));
    let out = t.approve_and_run(&plan, &["--jobs", "16", "--jsonl"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let evs = events(&out);
    assert_events_match_schema(&evs);
    let seqs: Vec<u64> = evs.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    assert_eq!(
        evs.iter().filter(|e| e["type"] == "step_completed").count(),
        16
    );
    // Console lines name their step whole: every ok line is one of ours.
    let out = t.run(&["run", plan.to_str().unwrap(), "--jobs", "16"]);
    let text = stderr(&out);
    let ok_lines = text.lines().filter(|l| l.contains("… ok ")).count();
    assert_eq!(ok_lines, 16, "{text}");
    for line in text.lines().filter(|l| l.contains("… ok ")) {
        assert!(line.starts_with('['), "a mixed line: {line:?}");
    }
}

#[test]
fn kill_9_mid_parallel_run_then_resume_completes_each_step_once() {
    let t = TestDir::new();
    policy(&t);
    let steps: Vec<Value> = (0..4)
        .map(|i| {
            json!({"step_id": format!("s{i}"), "tool": "run_command", "depends_on": [],
                   "parallel_safe": true,
                   "arguments": {"argv": ["sh", "-c", format!("echo run >> runs-{i}.txt; touch started-{i}; sleep 2")]}})
        })
        .chain([json!({"step_id": "last", "tool": "file_write", "depends_on": ["s0", "s1", "s2", "s3"],
                        "arguments": {"path": "last.txt", "contents": "done"}})])
        .collect();
    let plan = t.plan("p.json", &json!({"plan_id": "k9", "steps": steps}));
    t.approve(&plan);
    let mut child = t
        .cmd()
        .args([plan.to_str().unwrap(), "--jobs", "4"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while (0..4).any(|i| !t.ws.join(format!("started-{i}")).exists()) {
        assert!(Instant::now() < deadline, "the steps never all started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: SIGKILL to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
    assert_eq!(q::<String>(&t.db(), "PRAGMA integrity_check"), "ok");
    let running: i64 = q(
        &t.db(),
        "SELECT COUNT(*) FROM steps WHERE status = 'running'",
    );
    assert_eq!(running, 4, "all four were running at once");
    let run_id: String = q(&t.db(), "SELECT run_id FROM runs");
    // Commands cut off mid-way are run again only when asked (as with one job).
    let out = t.run(&["resume", &run_id]);
    assert_eq!(code(&out), 4, "{}", stderr(&out));
    let out = t.run(&["resume", &run_id, "--rerun-interrupted"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(q::<String>(&t.db(), "PRAGMA integrity_check"), "ok");
    let completed: i64 = q(
        &t.db(),
        "SELECT COUNT(*) FROM steps WHERE status = 'completed'",
    );
    assert_eq!(completed, 5);
    assert_eq!(t.read("last.txt"), "done");
    let last_writes: i64 = q(
        &t.db(),
        "SELECT COUNT(*) FROM executions WHERE step_id = 'last' AND success = 1",
    );
    assert_eq!(last_writes, 1, "the last step ran exactly once");
}
