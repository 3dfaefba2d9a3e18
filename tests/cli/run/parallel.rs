//! `--jobs N` (issue #23): steps whose dependencies are complete run at once, on real processes,
//! and the run means what it means with one job — stop on the first fatal failure (what runs beside
//! it is cancelled and no process is left), no two writers of one path together, one question at a
//! time, strictly increasing `seq`, exactly-once after `kill -9` and `resume`.

use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::*;

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

/// Four independent `parallel_safe` steps that meet: each marks that it started, then waits until
/// all four have (for at most 1.5 s), so steps run together overlap however slowly a loaded
/// runner starts them, and the overlap is read from the recorded start and end times, not from
/// the wall clock (issue 43 §4). Call [`barrier_reset`] before each run.
fn barrier_steps(t: &TestDir) -> Vec<Value> {
    t.file(
        "barrier.py",
        "import os, sys, time\nopen('b/' + sys.argv[1], 'w').close()\nend = time.time() + 1.5\n\
         while len(os.listdir('b')) < 4 and time.time() < end:\n    time.sleep(0.02)\n",
    );
    barrier_reset(t);
    (0..4)
        .map(|i| {
            json!({"step_id": format!("s{i}"), "tool": "run_command", "depends_on": [],
                   "parallel_safe": true, "arguments": {"argv": ["python3", "barrier.py", i.to_string()]}})
        })
        .collect()
}

/// Empties the barrier's meeting place before a run.
fn barrier_reset(t: &TestDir) {
    let _ = std::fs::remove_dir_all(t.ws.join("b"));
    std::fs::create_dir_all(t.ws.join("b")).unwrap();
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
    allow_commands(&t, &["sleep", "sh"]);
    let steps = barrier_steps(&t);
    let plan = t.plan("p.json", &json!({"plan_id": "sleeps", "steps": steps}));
    let ids = ["s0", "s1", "s2", "s3"];
    let out = t.approve_and_run(&plan, &["--jobs", "4"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        all_overlap(&intervals(&t, &ids)),
        "{:?}",
        intervals(&t, &ids)
    );
    // The same plan with one job: one after another.
    barrier_reset(&t);
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
    allow_commands(&t, &["sleep", "sh"]);
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
    let junit = t.root.join("junit.xml");
    let out = t.approve_and_run(
        &plan,
        &["--jobs", "2", "--jsonl", "--junit", junit.to_str().unwrap()],
    );
    let took = started.elapsed();
    // The first failure's exit code, said in the summary.
    assert_exit_with(&out, 30, "step bad failed first");
    // "cancelled" is said once, on the console and in the JUnit message (issue #34 item 13).
    assert!(
        stderr(&out).contains("slow run_command sleep"),
        "{}",
        stderr(&out)
    );
    assert!(
        !stderr(&out).contains("cancelled (cancelled)"),
        "{}",
        stderr(&out)
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("<skipped message=\"cancelled: step"), "{xml}");
    assert!(!xml.contains("cancelled: cancelled:"), "{xml}");
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
    allow_commands(&t, &["sleep", "sh"]);
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
    // Commands on threads of their own (file steps run on the runner's thread, one at a time
    // anyway), each asking: `rm` is allowed but not auto-approved.
    t.file(
        "acode-policy.json",
        &json!({"allow_commands": ["rm"]}).to_string(),
    );
    let steps: Vec<Value> = (0..3)
        .map(|i| {
            json!({"step_id": format!("d{i}"), "tool": "run_command", "depends_on": [],
                   "parallel_safe": true, "arguments": {"argv": ["rm", format!("f{i}.txt")]}})
        })
        .collect();
    let plan = t.plan("p.json", &json!({"plan_id": "prompts", "steps": steps}));
    t.approve(&plan);
    let mut child = t
        .cmd()
        .args([
            plan.to_str().unwrap(),
            "--confirm",
            "prompt",
            "--jobs",
            "3",
            "--jsonl",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = collect_stderr(&mut child);
    let out = collect_stdout(&mut child);
    let mut stdin = child.stdin.take().unwrap();
    for asked in 1..=3 {
        // Waits (bounded polling) for the event that says every step still to be answered has
        // reached the confirmation gate (3 the first time, then those left) and for this prompt:
        // were two questions asked together, the others would be on the screen too by now.
        let deadline = Instant::now() + Duration::from_secs(20);
        while out
            .lock()
            .unwrap()
            .matches("\"confirmation_requested\"")
            .count()
            < 3
            || err.lock().unwrap().matches("allow?").count() < asked
        {
            assert!(
                Instant::now() < deadline,
                "no prompt {asked}: {}\n{}",
                err.lock().unwrap(),
                out.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
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
    allow_commands(&t, &["sleep", "sh"]);
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
    need_bwrap();
    let t = TestDir::new();
    allow_commands(&t, &["sleep", "sh"]);
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

// ---------------------------------------------------------------------------------------------
// Within one step: an agent's read-only calls from one answer, and `verify` commands.

use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};

/// (started_at, started_at + duration_ms) of each execution of `tool` in the step, in the
/// order they were recorded.
fn execution_intervals(t: &TestDir, tool: &str) -> Vec<(i64, i64)> {
    let db = t.db();
    let mut stmt = db
        .prepare(
            "SELECT started_at, started_at + duration_ms FROM executions WHERE tool_name = ?1 \
             ORDER BY rowid",
        )
        .unwrap();
    stmt.query_map([tool], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// A tree that takes file_search a measurable while to go through (a few hundred ms in a debug
/// build): `dir` with three files of 300 000 short lines, none matching `zz[0-9]+q`.
fn slow_tree(t: &TestDir, dir: &str) {
    let text: String = (0..100_000)
        .map(|i| format!("w{i} x\n"))
        .collect::<String>()
        .repeat(3);
    for k in 0..3 {
        t.file(&format!("{dir}/f{k}.txt"), &text);
    }
}

/// The tool results the model was sent after its first answer: (call id, content), in order.
fn tool_results_sent(server: &ScriptedServer, request: usize) -> Vec<(String, String)> {
    server.requests()[request].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap().to_string(),
                m["content"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Runs an agent step whose model answers `calls` (file searches) at once, then "Nothing
/// found."; returns the run's output, the model server (what it was sent), and the searches'
/// recorded (start, end) in ms.
fn searches_in_one_answer(
    t: &TestDir,
    calls: &[(&str, Value)],
) -> (std::process::Output, ScriptedServer, Vec<(i64, i64)>) {
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_tool_calls(calls),
        ScriptedResponse::chat_text("Nothing found."),
    ]);
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "reads", "steps": [
        {"step_id": "look", "tool": "agent", "arguments": {
            "instruction": "Search.", "tools": ["file_search"], "max_turns": 3}}]}),
    );
    let out = t.approve_and_run_with_model(&plan, &server, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let iv = execution_intervals(t, "file_search");
    (out, server, iv)
}

#[test]
fn read_only_calls_from_one_answer_run_at_the_same_time() {
    let t = TestDir::new();
    slow_tree(&t, "a");
    slow_tree(&t, "b");
    let (out, server, iv) = searches_in_one_answer(
        &t,
        &[
            ("file_search", json!({"pattern": "zz[0-9]+q", "root": "a"})),
            ("file_search", json!({"pattern": "zz[0-9]+q", "root": "b"})),
        ],
    );
    assert_eq!(iv.len(), 2, "{iv:?}");
    // Each started before the other ended: they ran at the same time. Rounding cannot fake it
    // however quick the searches: start and duration are both recorded rounded down, so a
    // recorded end is never later than the real one, and a second search started after the
    // first ended would be recorded starting at or after the first's recorded end. (Too quick a
    // search can only make this fail, never pass; `slow_tree` keeps them long enough.)
    assert!(
        iv[1].0 < iv[0].1 && iv[0].0 < iv[1].1,
        "the two reads did not overlap: {iv:?}"
    );
    // Both calls were announced before either result, each event names its call, `seq` grows.
    let evs = events(&out);
    let seqs: Vec<u64> = evs.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let calls: Vec<(String, String)> = evs
        .iter()
        .filter(|e| e["type"] == "tool_call" || e["type"] == "tool_result")
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_string(),
                e["call_id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(calls.len(), 4, "{calls:?} {evs:#?}");
    assert!(
        calls[..2].iter().all(|(k, _)| k == "tool_call"),
        "{calls:?}"
    );
    assert_eq!(
        calls[2..]
            .iter()
            .map(|(k, id)| format!("{k} {id}"))
            .collect::<Vec<_>>(),
        ["tool_result call_1", "tool_result call_2"]
    );
    // One committed execution per call, linked to the turn that asked for it.
    let linked: i64 = q(
        &t.db(),
        "SELECT COUNT(*) FROM executions WHERE tool_name = 'file_search' \
         AND parent_execution_id IN (SELECT execution_id FROM executions WHERE tool_name = 'llm')",
    );
    assert_eq!(linked, 2);
    // The results went back in the answer's order.
    let sent = tool_results_sent(&server, 1);
    assert_eq!(
        sent.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(),
        ["call_1", "call_2"]
    );
}

#[test]
fn at_most_four_reads_of_one_answer_run_at_once() {
    let t = TestDir::new();
    slow_tree(&t, "a");
    let calls: Vec<(&str, Value)> = (0..6)
        .map(|i| {
            (
                "file_search",
                json!({"pattern": format!("zz[0-9]+q{i}"), "root": "a"}),
            )
        })
        .collect();
    let (_, server, iv) = searches_in_one_answer(&t, &calls);
    assert_eq!(iv.len(), 6, "{iv:?}");
    // How many ran at each start (intervals are [start, end) in ms: a call taken up by a thread
    // that just finished one starts at or after that one's end).
    let most = iv
        .iter()
        .map(|&(at, _)| iv.iter().filter(|&&(s, e)| s <= at && at < e).count())
        .max()
        .unwrap();
    assert!((2..=4).contains(&most), "{most} at once: {iv:?}");
    assert_eq!(tool_results_sent(&server, 1).len(), 6);
}

#[test]
fn a_write_between_reads_splits_them_and_the_later_read_sees_it() {
    let t = TestDir::new();
    t.file("x.txt", "old\n");
    t.file("y.txt", "why\n");
    slow_tree(&t, "b");
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_tool_calls(&[
            ("file_read", json!({"path": "x.txt"})),
            ("file_search", json!({"pattern": "zz[0-9]+q", "root": "b"})),
            ("history", json!({"limit": 1})),
            ("file_write", json!({"path": "x.txt", "contents": "new\n"})),
            ("file_read", json!({"path": "x.txt"})),
            ("file_read", json!({"path": "y.txt"})),
            ("file_read", json!({"path": "missing.txt"})),
        ]),
        ScriptedResponse::chat_text("Done."),
    ]);
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "split", "steps": [
        {"step_id": "rw", "tool": "agent", "arguments": {
            "instruction": "Read, write, read.", "tools": ["file_read", "file_search", "history", "file_write"],
            "max_turns": 3}}]}),
    );
    let out = t.approve_and_run_with_model(&plan, &server, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let sent = tool_results_sent(&server, 1);
    let ids: Vec<&str> = sent.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "call_1", "call_2", "call_3", "call_4", "call_5", "call_6", "call_7"
        ]
    );
    assert!(sent[0].1.contains("old"), "{:?}", sent[0]);
    // `history` (run on the step's own thread, over its database connection) answered too.
    assert!(!sent[2].1.starts_with("error"), "{:?}", sent[2]);
    assert!(
        sent[4].1.contains("new"),
        "the read after the write: {:?}",
        sent[4]
    );
    assert!(sent[5].1.contains("why"), "{:?}", sent[5]);
    // A failed read is that call's result, and the others are unaffected.
    assert!(sent[6].1.starts_with("error"), "{:?}", sent[6]);
    // In time: the first reads (together) ended before the write began, and the write ended
    // before the later reads began.
    let db = t.db();
    let mut stmt = db
        .prepare(
            "SELECT tool_name, started_at, started_at + duration_ms FROM executions \
             WHERE tool_name != 'llm' ORDER BY rowid",
        )
        .unwrap();
    let rows: Vec<(String, i64, i64)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(rows.len(), 7, "{rows:?}");
    let write = rows.iter().position(|r| r.0 == "file_write").unwrap();
    assert_eq!(write, 3, "recorded in the answer's order: {rows:?}");
    for before in &rows[..3] {
        assert!(before.2 <= rows[3].1, "a read ran into the write: {rows:?}");
    }
    for after in &rows[4..] {
        assert!(
            rows[3].2 <= after.1,
            "a read started before the write ended: {rows:?}"
        );
    }
}

/// Whether a process whose command line starts with `program` and holds `marker` is running.
fn process_running(program: &str, marker: &str) -> Option<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .find_map(|entry| {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            (cmdline.starts_with(program) && cmdline.contains(marker)).then_some(cmdline)
        })
}

/// (call_id, success, error_code, error_message, started_at, started_at + duration_ms) of the
/// step's `run_command` executions, in call order.
type CommandRow = (String, i64, Option<String>, Option<String>, i64, i64);

fn command_rows(t: &TestDir) -> Vec<CommandRow> {
    let db = t.db();
    let mut stmt = db
        .prepare(
            "SELECT json_extract(arguments_json, '$.command'), success, error_code, error_message, \
             started_at, started_at + duration_ms FROM executions WHERE tool_name = 'run_command' \
             ORDER BY rowid",
        )
        .unwrap();
    stmt.query_map([], |r| {
        Ok((
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            r.get(4)?,
            r.get(5)?,
        ))
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

#[test]
fn verify_commands_run_together_and_the_first_failure_cancels_the_rest() {
    let t = TestDir::new();
    allow_commands(&t, &["sleep", "sh"]);
    let marker = format!("31.{}", std::process::id());
    let slow = format!("sleep {marker}");
    let failing = "sh -c 'sleep 0.3; exit 3'";
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "verify", "steps": [
        {"step_id": "build", "tool": "file_write", "arguments": {"path": "out.txt", "contents": "x"},
         "verify": {"commands": [slow, failing, "sleep 0.1"]}},
        {"step_id": "after", "tool": "file_write", "arguments": {"path": "after.txt", "contents": "x"}}]}),
    );
    let started = Instant::now();
    let out = t.approve_and_run(&plan, &["--jsonl"]);
    let took = started.elapsed();
    assert_eq!(code(&out), 30, "{}", stderr(&out));
    assert!(
        took < Duration::from_secs(15),
        "the slow verify command was not cancelled: {took:?}"
    );
    assert!(!t.ws.join("after.txt").exists());
    let rows = command_rows(&t);
    assert_eq!(rows.len(), 3, "{rows:?}");
    let by = |c: &str| rows.iter().find(|r| r.0 == c).unwrap().clone();
    // The one that failed, the one that passed before it did, and the one it cancelled.
    let (_, ok, kind, _, _, _) = by(failing);
    assert_eq!((ok, kind.as_deref()), (0, Some("tool_failed")), "{rows:?}");
    assert_eq!(by("sleep 0.1").1, 1, "{rows:?}");
    let (_, ok, kind, message, _, _) = by(&slow);
    assert_eq!((ok, kind.as_deref()), (0, Some("cancelled")), "{rows:?}");
    assert!(
        message.as_deref().unwrap_or_default().contains(failing),
        "the cancelled one names the failure: {message:?}"
    );
    // They ran at the same time: each started before any of them ended.
    let latest_start = rows.iter().map(|r| r.4).max().unwrap();
    let earliest_end = rows.iter().map(|r| r.5).min().unwrap();
    assert!(latest_start < earliest_end, "{rows:?}");
    // The step's failure names the command that failed and says what became of the others.
    let error: String = q(
        &t.db(),
        "SELECT error_message FROM steps WHERE step_id = 'build'",
    );
    assert!(
        error.contains(&format!("verify command {failing:?} (2 of 3) failed")),
        "{error}"
    );
    assert!(
        error.contains(&format!("{slow:?} was cancelled")),
        "{error}"
    );
    assert!(error.contains("\"sleep 0.1\" passed"), "{error}");
    // Every call is announced, then reported, under its own id.
    let ids: Vec<String> = events(&out)
        .iter()
        .filter(|e| e["type"] == "tool_result" && e["tool"] == "run_command")
        .map(|e| e["call_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, ["build#verify-1", "build#verify-2", "build#verify-3"]);
    assert!(process_running("sleep", &marker).is_none(), "left running");
}

#[test]
fn verify_commands_that_pass_overlap_and_a_single_command_works_as_before() {
    let t = TestDir::new();
    allow_commands(&t, &["sleep", "sh"]);
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "verify", "steps": [
        {"step_id": "two", "tool": "file_write", "arguments": {"path": "a.txt", "contents": "x"},
         "verify": {"commands": ["sleep 0.5", "sleep 0.5"]}},
        {"step_id": "one", "tool": "file_write", "arguments": {"path": "b.txt", "contents": "x"},
         "verify": {"command": "sh -c 'test -f b.txt'"}}]}),
    );
    let out = t.approve_and_run(&plan, &["--jsonl"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let rows = command_rows(&t);
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(rows.iter().all(|r| r.1 == 1), "{rows:?}");
    let (a, b) = (&rows[0], &rows[1]);
    assert!(
        a.4 < b.5 && b.4 < a.5,
        "the two sleeps did not overlap: {rows:?}"
    );
    // Concurrent calls are announced as each starts, so the two of `two` come in either order
    // (docs/parallel.md): the test asks for the set, each announced before its result, and
    // step `two`'s calls before step `one`'s, which ran after it.
    let evs = events(&out);
    let at = |kind: &str, id: &str| {
        evs.iter()
            .position(|e| e["type"] == kind && e["call_id"] == id)
            .unwrap_or_else(|| panic!("no {kind} for {id}"))
    };
    let mut ids: Vec<String> = evs
        .iter()
        .filter(|e| e["type"] == "tool_call" && e["tool"] == "run_command")
        .map(|e| e["call_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        ids.last().map(String::as_str),
        Some("one#verify"),
        "{ids:?}"
    );
    ids.sort();
    assert_eq!(ids, ["one#verify", "two#verify-1", "two#verify-2"]);
    for id in &ids {
        assert!(at("tool_call", id) < at("tool_result", id), "{id}");
    }
}

#[test]
fn an_agents_feedback_names_the_verify_command_that_failed() {
    let t = TestDir::new();
    allow_commands(&t, &["sleep", "sh"]);
    t.file(
        "src/lib.rs",
        "pub fn add(a: i32, b: i32) -> i32 { a - b }\n",
    );
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_text("All done."),
        ScriptedResponse::chat_tool_calls(&[(
            "file_edit",
            json!({"path": "src/lib.rs", "old": "a - b", "new": "a + b"}),
        )]),
        ScriptedResponse::chat_text("Fixed for real."),
    ]);
    let check = "sh -c 'grep -q \"a + b\" src/lib.rs'";
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "verify", "steps": [
        {"step_id": "fix", "tool": "agent",
         "arguments": {"instruction": "Make add() add.", "tools": ["file_edit"]},
         "verify": {"commands": ["sh -c 'test -f src/lib.rs'", check], "max_cycles": 2}}]}),
    );
    let out = t.approve_and_run_with_model(&plan, &server, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let retry_prompt = requests[1].body["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        retry_prompt.contains(&format!("verify command {check:?} (2 of 2) failed")),
        "{retry_prompt}"
    );
}

#[test]
fn verify_command_and_commands_are_checked_and_shown() {
    let t = TestDir::new();
    allow_commands(&t, &["sleep", "sh"]);
    let refused_with = |verify: Value, exit: i32, needle: &str| {
        let plan = t.plan(
            "bad.json",
            &json!({"plan_id": "bad", "steps": [
            {"step_id": "s", "tool": "file_read", "arguments": {"path": "x"}, "verify": verify}]}),
        );
        let out = t.run(&["validate", plan.to_str().unwrap()]);
        assert_eq!(code(&out), exit, "{verify}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{verify}: {}", stderr(&out));
    };
    // A plan that is not well-formed is a usage error (exit 2).
    let refused = |verify: Value, needle: &str| refused_with(verify, 2, needle);
    refused(
        json!({"command": "sleep 1", "commands": ["sleep 1"]}),
        "steps[0].verify: give either \"command\"",
    );
    refused(
        json!({"commands": []}),
        "steps[0].verify.commands: must list at least one",
    );
    refused(
        json!({"commands": ["sleep 1", 3]}),
        "steps[0].verify.commands[1]: expected a command string",
    );
    // A command the policy does not allow is a sandbox violation (exit 32), as for `command`.
    refused_with(
        json!({"commands": ["sleep 1", "nc -l 80"]}),
        32,
        "steps[0].verify.commands[1]: sandbox violation",
    );
    refused(json!({"max_cycles": 2}), "steps[0].verify.command: missing");
    refused(
        json!({"commands": vec!["sleep 1"; 17]}),
        "steps[0].verify.commands: lists 17 commands; at most 16",
    );
    // Nothing ran, nothing was recorded.
    assert!(!t.ws.join(".acode/executions.db").exists());

    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "shown", "variables": {"n": "0.1"}, "steps": [
        {"step_id": "s", "tool": "file_read", "arguments": {"path": "x"},
         "verify": {"commands": ["sleep ${n}", "sh -c 'exit 0'"]}}]}),
    );
    let out = t.run(&["preview", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains(
            "then verifies with, all at the same time (the first failure cancels the others): \
             \"sleep 0.1\", \"sh -c 'exit 0'\""
        ),
        "{}",
        stdout(&out)
    );
}

#[test]
fn quit_at_a_prompt_cancels_the_running_siblings() {
    let t = TestDir::new();
    allow_commands(&t, &["sleep", "sh"]);
    t.file("f.txt", "keep\n");
    let marker = format!("32.{}", std::process::id());
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "quit", "steps": [
        {"step_id": "slow", "tool": "run_command", "depends_on": [], "parallel_safe": true,
         "arguments": {"argv": ["sleep", marker]}},
        {"step_id": "ask", "tool": "file_delete", "depends_on": [], "arguments": {"path": "f.txt"}},
        {"step_id": "after-slow", "tool": "file_write", "depends_on": ["slow"],
         "arguments": {"path": "a.txt", "contents": "a"}}]}),
    );
    t.approve(&plan);
    let started = Instant::now();
    let mut child = t
        .cmd()
        .args([plan.to_str().unwrap(), "--confirm", "prompt", "--jobs", "2"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = collect_stderr(&mut child);
    let mut stdin = child.stdin.take().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !err.lock().unwrap().contains("allow?") || process_running("sleep", &marker).is_none() {
        assert!(
            Instant::now() < deadline,
            "no prompt beside the running sleep: {}",
            err.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    stdin.write_all(b"q\n").unwrap();
    let status = child.wait().unwrap();
    let took = started.elapsed();
    // The exit code of "quit" (a denial that ends the run), as with one job.
    assert_eq!(status.code(), Some(33), "{}", err.lock().unwrap());
    assert!(
        took < Duration::from_secs(15),
        "the running sibling was not cancelled: {took:?}"
    );
    assert!(process_running("sleep", &marker).is_none(), "left running");
    let row = |id: &str| -> (String, String) {
        t.db()
            .query_row(
                "SELECT status, error_message FROM steps WHERE step_id = ?1",
                [id],
                |r| {
                    Ok((
                        r.get(0)?,
                        r.get::<_, Option<String>>(1)?.unwrap_or_default(),
                    ))
                },
            )
            .unwrap()
    };
    let (status, message) = row("slow");
    assert_eq!(status, "cancelled", "{message}");
    assert!(message.contains("the user quit"), "{message}");
    assert_eq!(row("ask").0, "failed");
    assert_eq!(row("after-slow").0, "blocked");
    assert_eq!(q::<String>(&t.db(), "SELECT status FROM runs"), "cancelled");
    assert_eq!(t.read("f.txt"), "keep\n");
    assert!(!t.ws.join("a.txt").exists());
    // The command's execution is recorded as interrupted by the cancellation.
    let code: Option<String> = q(
        &t.db(),
        "SELECT error_code FROM executions WHERE step_id = 'slow'",
    );
    assert_eq!(code.as_deref(), Some("interrupted"));
}

/// The most intervals running at one moment (intervals are [start, end) in ms).
fn most_at_once(iv: &[(i64, i64)]) -> usize {
    iv.iter()
        .map(|&(at, _)| iv.iter().filter(|&&(s, e)| s <= at && at < e).count())
        .max()
        .unwrap_or(0)
}

/// The intervals of `ids` in the latest run.
fn latest_intervals(t: &TestDir, ids: &[&str]) -> Vec<(i64, i64)> {
    let run_id: String = q(
        &t.db(),
        "SELECT run_id FROM runs ORDER BY started_at DESC, rowid DESC LIMIT 1",
    );
    ids.iter()
        .map(|id| {
            t.db()
                .query_row(
                    "SELECT started_at, finished_at FROM steps WHERE step_id = ?1 AND run_id = ?2",
                    [id, &run_id.as_str()],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .unwrap()
        })
        .collect()
}

/// A plan asks for parallelism with `defaults.jobs` (issue #34 item 1): alone it is used; with
/// the policy's `jobs` the smaller wins; `--jobs` overrides both; and it is part of the approved
/// bytes.
#[test]
fn a_plans_defaults_jobs_is_used_capped_by_the_policy_and_overridden_by_the_flag() {
    let t = TestDir::new();
    allow_commands(&t, &["sleep", "sh"]);
    let steps = barrier_steps(&t);
    let ids = ["s0", "s1", "s2", "s3"];
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "sleeps", "defaults": {"jobs": 4}, "steps": steps}),
    );
    // The plan alone: four at once.
    let out = t.approve_and_run(&plan, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let iv = latest_intervals(&t, &ids);
    assert!(all_overlap(&iv), "{iv:?}");
    // --jobs 1 overrides it: one after another.
    barrier_reset(&t);
    let out = t.run(&["run", plan.to_str().unwrap(), "--jobs", "1"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let iv = latest_intervals(&t, &ids);
    assert!(disjoint(&iv), "{iv:?}");
    // A policy allowing 2: the smaller wins (the approval is bound to the policy: re-approve).
    t.file(
        "acode-policy.json",
        &json!({"allow_commands": ["sleep", "sh"], "auto_approve_commands": ["sleep", "sh"],
                "jobs": 2})
        .to_string(),
    );
    barrier_reset(&t);
    let out = t.approve_and_run(&plan, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let iv = latest_intervals(&t, &ids);
    assert_eq!(most_at_once(&iv), 2, "{iv:?}");
    // The number is part of the approved bytes: changing it needs a new approval.
    let edited = std::fs::read_to_string(&plan)
        .unwrap()
        .replace("\"jobs\": 4", "\"jobs\": 3");
    assert_ne!(edited, std::fs::read_to_string(&plan).unwrap());
    std::fs::write(&plan, edited).unwrap();
    let out = t.run(&["run", plan.to_str().unwrap()]);
    assert_exit_with(&out, 3, "approv");
}

/// `--jobs` that changes nothing says so (issue #34 item 8): six independent commands without
/// `parallel_safe` run one at a time under `--jobs 4`, and the header, `run_started` and
/// `preview` say which steps run alone, why, and what would change it; marked `parallel_safe`,
/// nothing is reported alone.
#[test]
fn jobs_that_change_nothing_say_so_in_the_header_run_started_and_preview() {
    let t = TestDir::new();
    allow_commands(&t, &["sleep", "sh"]);
    let steps = |safe: bool| -> Vec<Value> {
        (0..6)
            .map(|i| {
                json!({"step_id": format!("c{i}"), "tool": "run_command", "depends_on": [],
                       "parallel_safe": safe, "arguments": {"argv": ["sh", "-c", "true"]}})
            })
            .collect()
    };
    let plan = t.plan("p.json", &json!({"plan_id": "six", "steps": steps(false)}));
    let out = t.approve_and_run(&plan, &["--jobs", "4", "--jsonl"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("\n  jobs: 4 (--jobs)\n"), "{err}");
    assert!(
        err.contains("  jobs: c0, c1, c2, c3, c4, c5 still run alone: they may write where"),
        "{err}"
    );
    assert!(err.contains("\"parallel_safe\": true"), "{err}");
    let evs = events(&out);
    let started = &evs[0];
    assert_eq!(started["type"], "run_started");
    assert_eq!(started["jobs"]["jobs"], 4, "{started}");
    assert_eq!(started["jobs"]["from"], "flag", "{started}");
    assert_eq!(
        started["jobs"]["alone"][0]["steps"],
        json!(["c0", "c1", "c2", "c3", "c4", "c5"]),
        "{started}"
    );
    // They did run one at a time, as reported.
    let iv = latest_intervals(&t, &["c0", "c1", "c2", "c3", "c4", "c5"]);
    assert!(disjoint(&iv), "{iv:?}");
    // preview says it before the run, with the number in force without the flag.
    let out = t.run(&["preview", plan.to_str().unwrap()]);
    let text = stdout(&out) + &stderr(&out);
    assert!(text.contains("jobs: 1 (default"), "{text}");
    assert!(
        text.contains("jobs: with more than one job, c0, c1, c2, c3, c4, c5 still run alone"),
        "{text}"
    );
    // Marked parallel_safe: nothing runs alone, and nothing is said to.
    let plan = t.plan("q.json", &json!({"plan_id": "six", "steps": steps(true)}));
    let out = t.approve_and_run(&plan, &["--jobs", "4", "--jsonl"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!stderr(&out).contains("alone"), "{}", stderr(&out));
    let evs = events(&out);
    assert!(evs[0]["jobs"].get("alone").is_none(), "{}", evs[0]);
    let out = t.run(&["preview", plan.to_str().unwrap()]);
    assert!(
        !stdout(&out).contains("still run alone"),
        "{}",
        stdout(&out)
    );
    // A chain (no depends_on) runs alone for its dependencies, and says that instead.
    let chain: Vec<Value> = (0..3)
        .map(|i| {
            json!({"step_id": format!("k{i}"), "tool": "run_command",
                        "arguments": {"argv": ["sh", "-c", "true"]}})
        })
        .collect();
    let plan = t.plan("r.json", &json!({"plan_id": "chain", "steps": chain}));
    let out = t.approve_and_run(&plan, &["--jobs", "2"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("k0, k1, k2 still run alone: each waits for the others"),
        "{}",
        stderr(&out)
    );
}
