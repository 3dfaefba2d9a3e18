//! Hostile input at the edges (issue 15): input files refused unread, one meaning per document.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::*;

fn mkfifo(path: &std::path::Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success());
}

#[test]
fn an_endless_device_as_the_plan_is_refused_unread() {
    let t = TestDir::new();
    for args in [
        &["/dev/zero"][..],
        &["validate", "/dev/zero"],
        &["approve", "/dev/zero"],
    ] {
        let out = t.run_within(args, Duration::from_secs(10));
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("is a character device, not a regular file; refused unread"),
            "{}",
            stderr(&out)
        );
    }
}

#[test]
fn a_fifo_with_a_writer_that_never_stops_is_refused_unread() {
    let t = TestDir::new();
    let fifo = t.root.join("plan.json");
    mkfifo(&fifo);
    // `yes` writes forever once a reader opens the FIFO; acode-run must never open it.
    let mut writer = Command::new("sh")
        .arg("-c")
        .arg(format!("exec yes > '{}'", fifo.display()))
        .spawn()
        .unwrap();
    let out = t.run_within(&["run", fifo.to_str().unwrap()], Duration::from_secs(10));
    let _ = writer.kill();
    let _ = writer.wait();
    assert_exit_with(&out, 2, "is a FIFO");
}

#[test]
fn a_directory_as_the_plan_is_refused() {
    let t = TestDir::new();
    let out = t.run(&["validate", t.outside.to_str().unwrap()]);
    assert_exit_with(&out, 2, "is a directory");
}

#[test]
fn an_oversized_plan_is_refused_unread() {
    let t = TestDir::new();
    // Sparse: 64 MiB + 1 byte of size, no disk used. Reading it would cost 64 MiB of memory.
    let plan = t.root.join("big.json");
    let f = std::fs::File::create(&plan).unwrap();
    f.set_len(64 * 1024 * 1024 + 1).unwrap();
    let out = t.run_within(
        &["validate", plan.to_str().unwrap()],
        Duration::from_secs(10),
    );
    assert_exit_with(
        &out,
        2,
        "plan file is larger than the limit of 67108864 bytes",
    );
}

#[test]
fn approval_and_policy_files_are_refused_unread_when_not_regular_or_too_large() {
    let t = TestDir::new();
    let plan = simple_plan(&t);
    let approval = t.root.join("p.json.approval");
    mkfifo(&approval);
    let out = t.run_within(&["run", plan.to_str().unwrap()], Duration::from_secs(10));
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot read approval file") && stderr(&out).contains("is a FIFO"),
        "{}",
        stderr(&out)
    );
    std::fs::remove_file(&approval).unwrap();
    std::fs::File::create(&approval)
        .unwrap()
        .set_len(1024 * 1024 + 1)
        .unwrap();
    let out = t.run(&["run", plan.to_str().unwrap()]);
    assert_exit_with(&out, 2, "approval file is larger than the limit");
    std::fs::remove_file(&approval).unwrap();

    // The policy in the workspace as a directory, then as an explicit device.
    std::fs::create_dir(t.ws.join("acode-policy.json")).unwrap();
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot read policy file") && stderr(&out).contains("is a directory"),
        "{}",
        stderr(&out)
    );
    std::fs::remove_dir(t.ws.join("acode-policy.json")).unwrap();
    let out = t.run_within(
        &["validate", "--policy", "/dev/zero", plan.to_str().unwrap()],
        Duration::from_secs(10),
    );
    assert_exit_with(&out, 2, "is a character device");
}

#[test]
fn a_duplicate_key_inside_a_step_is_refused_with_its_position() {
    let t = TestDir::new();
    t.file("secret.txt", "keep me\n");
    // The reviewer sees file_read; serde_json alone would run file_delete.
    let text = "{\"plan_id\": \"p\", \"steps\": [\n  {\"step_id\": \"a\", \"tool\": \"file_read\",\n   \"arguments\": {\"path\": \"secret.txt\"},\n   \"tool\": \"file_delete\"}\n]}\n";
    let plan = t.plan_text("p.json", text);
    for cmd in ["validate", "approve"] {
        let out = t.run(&[cmd, plan.to_str().unwrap()]);
        assert_eq!(code(&out), 2, "{cmd}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("line 4, column 4: duplicate key \"tool\""),
            "{cmd}: {}",
            stderr(&out)
        );
    }
    let out = t.run(&["run", "--approve", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert_eq!(t.read("secret.txt"), "keep me\n");
    // Escaped spellings of the same key are the same key.
    let plan = t.plan_text(
        "q.json",
        r#"{"plan_id": "q", "steps": [{"step_id": "a", "tool": "file_read", "arguments": {"path": "x", "\u0070ath": "y"}}]}"#,
    );
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_exit_with(&out, 2, "duplicate key \"path\"");
}

#[test]
fn duplicate_keys_in_approvals_and_policies_are_refused() {
    let t = TestDir::new();
    let plan = simple_plan(&t);
    t.approve(&plan);
    let approval = t.root.join("p.json.approval");
    let text = std::fs::read_to_string(&approval).unwrap();
    let doubled = text.replacen("{", "{\n  \"status\": \"rejected\",", 1);
    std::fs::write(&approval, doubled).unwrap();
    let out = t.run(&["run", plan.to_str().unwrap()]);
    assert_exit_with(&out, 2, "duplicate key \"status\"");
    std::fs::write(&approval, text).unwrap();

    t.file(
        "acode-policy.json",
        "{\"sandbox\": \"none\",\n \"sandbox\": \"bwrap\"}",
    );
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_exit_with(&out, 2, "line 2, column 2: duplicate key \"sandbox\"");
}

#[test]
fn a_workspace_that_is_a_regular_file_is_a_usage_error() {
    let t = TestDir::new();
    let plan = simple_plan(&t);
    let file = t.root.join("not-a-dir");
    std::fs::write(&file, "").unwrap();
    let out = t.run(&[
        "run",
        "--approve",
        "--workspace",
        file.to_str().unwrap(),
        plan.to_str().unwrap(),
    ]);
    assert_exit_with(&out, 2, "not a directory");
}

/// No raw control character (other than newline) in text meant for a terminal.
fn assert_terminal_clean(what: &str, text: &str) {
    let bad: Vec<char> = text
        .chars()
        .filter(|c| c.is_control() && *c != '\n')
        .collect();
    assert!(
        bad.is_empty(),
        "{what} carries raw controls {bad:?}:\n{text}"
    );
}

#[test]
fn control_characters_from_a_model_and_a_command_reach_the_terminal_escaped() {
    use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};
    let t = TestDir::new();
    // A model answer whose tool name and call id try to retitle the window and erase the line.
    let evil = ScriptedResponse::json(
        200,
        json!({"object": "chat.completion",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant",
                "content": null, "tool_calls": [{"id": "call\u{1b}]0;owned\u{7}\r\u{0}", "type": "function",
                "function": {"name": "file_read\u{1b}[2K\r", "arguments": "{\"path\":\"x\"}"}}]}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1}}),
    );
    let server =
        ScriptedServer::start(vec![evil, ScriptedResponse::chat_text("done \u{1b}[31m\r")]);
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "p", "steps": [
            {"step_id": "fix", "tool": "agent", "arguments": {
                "instruction": "x", "tools": ["file_read"], "max_turns": 3}},
            {"step_id": "cmd", "tool": "run_command", "arguments": {
                "command": "cat evil.txt missing.txt"}}]}),
    );
    t.file("evil.txt", "a\u{1b}[2J\rb\u{0}c\n");
    let url = server.url();
    let out = t.approve_and_run(&plan, &["--llm-url", &url, "--model", "m"]);
    assert_eq!(code(&out), 30, "{}", stderr(&out));
    assert_terminal_clean("run stderr", &stderr(&out));
    let run_id: String = q(&t.db(), "SELECT run_id FROM runs");
    let show = t.run(&["show", &run_id]);
    assert_eq!(code(&show), 0, "{}", stderr(&show));
    let shown = stdout(&show);
    assert_terminal_clean("show", &shown);
    assert!(shown.contains("file_read\\x1b[2K"), "{shown}");
    // JSON output is unchanged: the name is there exactly, JSON-escaped.
    let json = t.run(&["show", &run_id, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&json)).unwrap();
    assert!(v.to_string().contains("file_read\\u001b[2K"), "{v}");
}

#[test]
fn absurd_token_usage_is_stored_saturated_and_the_killed_run_resumes() {
    use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};
    let t = TestDir::new();
    let absurd = json!({"prompt_tokens": i64::MAX as u64, "completion_tokens": u64::MAX});
    let call = ScriptedResponse::json(
        200,
        json!({"object": "chat.completion",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant",
                "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "file_read", "arguments": "{\"path\":\"slow.py\"}"}}]}}],
            "usage": absurd}),
    );
    let done = ScriptedResponse::json(
        200,
        json!({"object": "chat.completion",
            "choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": "done"}}],
            "usage": absurd}),
    );
    let server = ScriptedServer::start(vec![call, done]);
    t.file(
        "slow.py",
        "import os, time\nopen('started-' + str(os.getpid()), 'w').write('1')\nif not os.path.exists('resumed'):\n    time.sleep(60)\n",
    );
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "p", "steps": [
            {"step_id": "think", "tool": "agent", "arguments": {
                "instruction": "x", "tools": ["file_read"], "max_turns": 3}},
            {"step_id": "slow", "tool": "run_command", "arguments": {"command": "python3 slow.py"}}]}),
    );
    t.approve(&plan);
    let url = server.url();
    let mut child = t
        .cmd()
        .args([
            "run",
            plan.to_str().unwrap(),
            "--sandbox",
            "none",
            "--llm-url",
            &url,
            "--model",
            "m",
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_dir(&t.ws)
        .unwrap()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with("started-"))
    {
        assert!(Instant::now() < deadline, "the slow step never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: SIGKILL to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
    let db = t.db();
    let stored: i64 = q(&db, "SELECT max(prompt_tokens) FROM executions");
    assert!(stored > 0 && stored <= 1 << 40, "{stored}");
    let run_id: String = q(&db, "SELECT run_id FROM runs");
    drop(db);

    t.file("resumed", "");
    let idle = ScriptedServer::start(vec![]);
    let url = idle.url();
    let out = t.run(&[
        "resume",
        &run_id,
        "--rerun-interrupted",
        "--sandbox",
        "none",
        "--llm-url",
        &url,
        "--model",
        "m",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let total: i64 = q(&t.db(), "SELECT prompt_tokens FROM runs");
    assert_eq!(total, 2 << 40);
}

#[test]
fn one_answer_runs_at_most_the_configured_number_of_tool_calls() {
    use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};
    let t = TestDir::new();
    t.file("a.txt", "hello\n");
    let calls: Vec<(&str, serde_json::Value)> = (0..500)
        .map(|_| ("file_read", json!({"path": "a.txt"})))
        .collect();
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_tool_calls(&calls),
        ScriptedResponse::chat_text("done"),
        ScriptedResponse::chat_tool_calls(&calls),
        ScriptedResponse::chat_text("done"),
    ]);
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "p", "steps": [
            {"step_id": "fix", "tool": "agent", "arguments": {
                "instruction": "x", "tools": ["file_read"], "max_turns": 3}}]}),
    );
    let url = server.url();
    let out = t.approve_and_run(
        &plan,
        &[
            "--llm-url",
            &url,
            "--model",
            "m",
            "--max-calls-per-answer",
            "5",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        q::<i64>(
            &t.db(),
            "SELECT count(*) FROM executions WHERE tool_name='file_read'"
        ),
        5
    );
    let requests = server.requests();
    let second = &requests[1].body["messages"];
    let tools: Vec<&serde_json::Value> = second
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(tools.len(), 5);
    let assistant = second
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .unwrap();
    assert_eq!(assistant["tool_calls"].as_array().unwrap().len(), 5);
    assert!(
        tools[4]["content"]
            .as_str()
            .unwrap()
            .contains("asked for 500 tool calls; only the first 5 were run"),
        "{}",
        tools[4]
    );

    // The default is 16.
    let out = t.run(&[
        "run",
        plan.to_str().unwrap(),
        "--llm-url",
        &url,
        "--model",
        "m",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        q::<i64>(
            &t.db(),
            "SELECT count(*) FROM executions WHERE tool_name='file_read'"
        ),
        5 + 16
    );
}

#[test]
fn a_silent_model_runs_out_the_agent_steps_own_deadline_with_exit_34() {
    use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};
    let t = TestDir::new();
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_text("too late").with_delay(Duration::from_secs(30)),
    ]);
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "p", "steps": [
            {"step_id": "think", "tool": "agent", "timeout_s": 2, "arguments": {
                "instruction": "x", "tools": ["file_read"], "max_turns": 3}}]}),
    );
    t.approve(&plan);
    let url = server.url();
    let started = Instant::now();
    let out = t.run_within(
        &[
            "run",
            plan.to_str().unwrap(),
            "--llm-url",
            &url,
            "--model",
            "m",
        ],
        Duration::from_secs(20),
    );
    let took = started.elapsed();
    assert_eq!(code(&out), 34, "{}", stderr(&out));
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(
        stderr(&out)
            .contains("exceeded its time limit of 2 s (timeout_s) while waiting for the model"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        q::<String>(
            &t.db(),
            "SELECT error_code FROM steps WHERE step_id='think'"
        ),
        "timeout"
    );
}

#[test]
fn refused_violations_are_counted_and_strict_fails_the_step() {
    use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};
    let t = TestDir::new();
    let outside = t.outside.join("sentinel.txt");
    let escapes = || {
        ScriptedResponse::chat_tool_calls(&[
            ("file_read", json!({"path": "../outside/sentinel.txt"})),
            ("file_read", json!({"path": outside.to_str().unwrap()})),
            (
                "file_write",
                json!({"path": "../outside/planted.txt", "contents": "x"}),
            ),
        ])
    };
    let server = ScriptedServer::start(vec![
        escapes(),
        ScriptedResponse::chat_text("done"),
        escapes(),
        ScriptedResponse::chat_text("done"),
    ]);
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "p", "steps": [
            {"step_id": "fix", "tool": "agent", "arguments": {
                "instruction": "x", "tools": ["file_read", "file_write"], "max_turns": 3}}]}),
    );
    let url = server.url();
    let out = t.approve_and_run(
        &plan,
        &[
            "--llm-url",
            &url,
            "--model",
            "m",
            "--confirm",
            "auto-approve",
        ],
    );
    assert_exit_with(&out, 0, "3 sandbox violations refused");
    let out = t.run(&[
        "run",
        plan.to_str().unwrap(),
        "--llm-url",
        &url,
        "--model",
        "m",
        "--confirm",
        "auto-approve",
        "--jsonl",
        "--strict",
    ]);
    assert_eq!(code(&out), 32, "{}", stderr(&out));
    let events = events(&out);
    let finished = events.iter().find(|e| e["type"] == "run_finished").unwrap();
    // The first refusal ends the step under --strict.
    assert_eq!(finished["violations"], 1, "{finished}");
    assert_eq!(finished["exit_code"], 32);
    t.assert_outside_untouched();
}

#[test]
fn a_linked_state_directory_is_refused_and_nothing_is_created_where_it_points() {
    let t = TestDir::new();
    let plan = simple_plan(&t);
    t.approve(&plan);
    // (Approving recorded the decision in `.acode/`; start again without it.)
    std::fs::remove_dir_all(t.ws.join(".acode")).unwrap();
    // A repository shipping `.acode` as a link to elsewhere.
    std::os::unix::fs::symlink(&t.outside, t.ws.join(".acode")).unwrap();
    let out = t.run(&["run", plan.to_str().unwrap()]);
    assert_exit_with(&out, 2, ".acode is a symbolic link");
    t.assert_outside_untouched();
    std::fs::remove_file(t.ws.join(".acode")).unwrap();

    // The database or the temp directory as a link.
    for entry in ["executions.db", "tmp"] {
        std::fs::create_dir_all(t.ws.join(".acode")).unwrap();
        let link = t.ws.join(".acode").join(entry);
        std::os::unix::fs::symlink(t.outside.join("planted.db"), &link).unwrap();
        let out = t.run(&["run", plan.to_str().unwrap()]);
        assert_eq!(code(&out), 2, "{entry}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!(".acode/{entry} is a symbolic link")),
            "{}",
            stderr(&out)
        );
        let out = t.run(&["runs"]);
        assert_eq!(code(&out), 2, "{entry}: {}", stderr(&out));
        t.assert_outside_untouched();
        std::fs::remove_file(&link).unwrap();
    }
}

#[test]
fn the_state_directory_stays_out_of_git_status() {
    let t = TestDir::new();
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(&t.ws)
            .output()
            .unwrap()
    };
    if Command::new("git").arg("--version").output().is_err() {
        acode_run::testing::skip("git", "the test makes a real repository");
        return;
    }
    assert!(git(&["init", "-q"]).status.success());
    let plan = simple_plan(&t);
    let out = t.approve_and_run(&plan, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(t.ws.join(".acode/executions.db").exists());
    let status =
        String::from_utf8_lossy(&git(&["status", "--porcelain", "--untracked-files=all"]).stdout)
            .into_owned();
    assert_eq!(status.trim(), "?? a.txt", "{status}");
}

#[test]
fn each_problem_names_its_location_once() {
    let t = TestDir::new();
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "p", "steps": [
            {"step_id": "a", "tool": "file_write", "arguments": {"path": "x"}},
            {"step_id": "b", "tool": "file_read", "arguments": {"path": 7}}]}),
    );
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("  - steps[0].arguments: missing required argument 'contents'"),
        "{err}"
    );
    assert!(err.contains("  - steps[1].arguments.path: "), "{err}");
    assert!(!err.contains("arguments: steps["), "{err}");
}

/// Starts `plan` (approved) in the background and waits until its `wait.py` step has started.
fn start_waiting_run(t: &TestDir, plan: &std::path::Path) -> std::process::Child {
    let child = t
        .cmd()
        .args(["run", plan.to_str().unwrap(), "--sandbox", "none"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !t.ws.join("started").exists() {
        assert!(Instant::now() < deadline, "the waiting step never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

fn waiting_plan(t: &TestDir) -> std::path::PathBuf {
    t.file(
        "wait.py",
        "import os, time\nopen('started', 'w').write('1')\nfor _ in range(600):\n    if os.path.exists('go'):\n        break\n    time.sleep(0.05)\n",
    );
    let plan = t.plan(
        "w.json",
        &json!({"plan_id": "w", "steps": [
            {"step_id": "wait", "tool": "run_command", "arguments": {"command": "python3 wait.py"}},
            {"step_id": "after", "tool": "file_write", "arguments": {"path": "after.txt", "contents": "x"}}]}),
    );
    t.approve(&plan);
    plan
}

#[test]
fn a_database_deleted_during_the_run_does_not_end_silently_with_exit_0() {
    let t = TestDir::new();
    let plan = waiting_plan(&t);
    let child = start_waiting_run(&t, &plan);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(t.ws.join(format!(".acode/executions.db{suffix}")));
    }
    std::fs::write(t.ws.join("go"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_exit_with(
        &out,
        1,
        "was deleted or replaced during the run; this run's record is lost",
    );
}

#[test]
fn a_run_left_running_by_a_dead_process_is_marked_interrupted_at_the_next_start() {
    let t = TestDir::new();
    let plan = waiting_plan(&t);
    let mut child = start_waiting_run(&t, &plan);
    // SAFETY: SIGKILL to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
    assert_eq!(q::<String>(&t.db(), "SELECT status FROM runs"), "running");
    let other = simple_plan(&t);
    let out = t.approve_and_run(&other, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        q::<String>(&t.db(), "SELECT status FROM runs WHERE plan_id = 'w'"),
        "interrupted"
    );
    // Still resumable.
    std::fs::write(t.ws.join("go"), "").unwrap();
    let run_id: String = q(&t.db(), "SELECT run_id FROM runs WHERE plan_id = 'w'");
    let out = t.run(&[
        "resume",
        &run_id,
        "--rerun-interrupted",
        "--sandbox",
        "none",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// A small tmpfs mounted for one test, unmounted on drop.
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    fn mount(at: &std::path::Path, size: &str) -> Option<SmallDisk> {
        std::fs::create_dir_all(at).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| SmallDisk(at.to_path_buf()))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_ends_the_run_non_zero_and_the_next_start_marks_it_interrupted() {
    let t = TestDir::new();
    let ws = t.root.join("small");
    let Some(_disk) = SmallDisk::mount(&ws, "400k") else {
        acode_run::testing::skip("a tmpfs mount", "mounting a small disk needs root");
        return;
    };
    let steps: Vec<serde_json::Value> = (0..400)
        .map(|i| {
            json!({"step_id": format!("s{i}"), "tool": "file_write",
            "arguments": {"path": format!("f{}.txt", i % 3), "contents": "x".repeat(3000)}})
        })
        .collect();
    let plan = t.plan("full.json", &json!({"plan_id": "full", "steps": steps}));
    let ws_arg = ws.to_str().unwrap();
    let out = t.run(&[
        "run",
        "--approve",
        "--workspace",
        ws_arg,
        plan.to_str().unwrap(),
    ]);
    assert_exit_with(&out, 1, "disk is full");
    let db = rusqlite::Connection::open(ws.join(".acode/executions.db")).unwrap();
    assert_eq!(q::<String>(&db, "SELECT status FROM runs"), "running");
    drop(db);
    // Space again: the next start marks the dead run interrupted instead of leaving it running.
    let grown = Command::new("mount")
        .args(["-o", "remount,size=8m"])
        .arg(&ws)
        .status()
        .unwrap();
    assert!(grown.success());
    let small = t.plan(
        "one.json",
        &json!({"plan_id": "one", "steps": [
        {"step_id": "a", "tool": "file_write", "arguments": {"path": "a.txt", "contents": "x"}}]}),
    );
    let out = t.run(&[
        "run",
        "--approve",
        "--workspace",
        ws_arg,
        small.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let db = rusqlite::Connection::open(ws.join(".acode/executions.db")).unwrap();
    assert_eq!(
        q::<String>(&db, "SELECT status FROM runs WHERE plan_id = 'full'"),
        "interrupted"
    );
}

#[test]
fn binary_command_output_is_marked_lossy_in_the_record_and_in_show() {
    let t = TestDir::new();
    std::fs::write(t.ws.join("blob.bin"), [b'o', b'k', 0xff, 0xfe, b'\n']).unwrap();
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "p", "steps": [
            {"step_id": "bin", "tool": "run_command", "arguments": {"command": "cat blob.bin"}},
            {"step_id": "txt", "tool": "run_command", "arguments": {"command": "echo fine"}}]}),
    );
    let out = t.approve_and_run(&plan, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let db = t.db();
    assert_eq!(
        q::<i64>(
            &db,
            "SELECT a.lossy FROM artifacts a JOIN executions e USING (execution_id) WHERE e.step_id='bin' AND a.artifact_type='stdout'"
        ),
        1
    );
    assert_eq!(
        q::<i64>(
            &db,
            "SELECT a.lossy FROM artifacts a JOIN executions e USING (execution_id) WHERE e.step_id='txt' AND a.artifact_type='stdout'"
        ),
        0
    );
    let run_id: String = q(&db, "SELECT run_id FROM runs");
    let show = t.run(&["show", &run_id]);
    let shown = stdout(&show);
    assert_eq!(
        shown.matches("not UTF-8: shown lossily").count(),
        1,
        "{shown}"
    );
    let json = t.run(&["show", &run_id, "--json"]);
    assert!(
        stdout(&json).contains("\"lossy\": true"),
        "{}",
        stdout(&json)
    );
}
