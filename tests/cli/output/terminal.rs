//! At the terminal: Ctrl-C and Ctrl-D at the confirmation prompt, id prefixes, misspelled commands.

use std::io::Write;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::*;

/// Starts a run whose only step (`file_delete`) needs confirmation, with `--confirm prompt` reading
/// the piped stdin, and waits until the prompt is shown. Returns the child and its stderr so far.
fn at_prompt(t: &TestDir) -> (Child, Arc<Mutex<String>>) {
    t.file("keep.txt", "keep\n");
    let plan = t.plan(
        "d.json",
        &json!({"plan_id": "del", "steps": [
        {"step_id": "del", "tool": "file_delete", "arguments": {"path": "keep.txt"}}]}),
    );
    t.approve(&plan);
    let mut child = t
        .cmd()
        .args([
            plan.to_str().unwrap(),
            "--confirm",
            "prompt",
            "--sandbox",
            "none",
        ])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = collect_stderr(&mut child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !err.lock().unwrap().contains("allow?") {
        assert!(
            Instant::now() < deadline,
            "no prompt: {}",
            err.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, err)
}

fn wait(child: &mut Child) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s.code().unwrap_or(-1);
        }
        assert!(Instant::now() < deadline, "did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn ctrl_c_at_the_prompt_interrupts_the_run() {
    let t = TestDir::new();
    let (mut child, err) = at_prompt(&t);
    // SAFETY: SIGINT to our own child, as the terminal sends on Ctrl-C.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let code = wait(&mut child);
    assert_eq!(code, 130, "{}", err.lock().unwrap());
    drop(child.stdin.take());
    assert_eq!(t.read("keep.txt"), "keep\n", "nothing was deleted");
    assert_eq!(
        q::<String>(&t.db(), "SELECT status FROM runs"),
        "interrupted"
    );
}

#[test]
fn ctrl_d_at_the_prompt_denies() {
    let t = TestDir::new();
    let (mut child, err) = at_prompt(&t);
    drop(child.stdin.take()); // end of input
    let code = wait(&mut child);
    assert_eq!(code, 33, "{}", err.lock().unwrap());
    assert_eq!(t.read("keep.txt"), "keep\n");
    assert_eq!(q::<String>(&t.db(), "SELECT status FROM runs"), "failed");
}

#[test]
fn quit_at_the_prompt_cancels_the_run_for_good() {
    let t = TestDir::new();
    let (mut child, err) = at_prompt(&t);
    child.stdin.take().unwrap().write_all(b"q\n").unwrap();
    let exit = wait(&mut child);
    assert_eq!(exit, 33, "{}", err.lock().unwrap());
    assert_eq!(t.read("keep.txt"), "keep\n");
    assert_eq!(q::<String>(&t.db(), "SELECT status FROM runs"), "cancelled");
    let run_id: String = q(&t.db(), "SELECT run_id FROM runs");
    let out = t.run(&["resume", &run_id]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("it is cancelled"), "{}", stderr(&out));
}

#[test]
fn ids_may_be_abbreviated_everywhere() {
    let t = TestDir::new();
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "p", "steps": [
        {"step_id": "w", "tool": "file_write", "arguments": {"path": "a.txt", "contents": "1"}}]}),
    );
    let out = t.approve_and_run(&plan, &["--sandbox", "none"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let db = t.db();
    let run_id: String = q(&db, "SELECT run_id FROM runs");
    let exec: String = q(&db, "SELECT execution_id FROM executions");
    let out = t.run(&["show", &run_id[..6]]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = t.run(&["artifact", &exec[..8], "diff"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("+1"), "{}", stdout(&out));
    let out = t.run(&["resume", &run_id[..6]]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("it is completed"), "{}", stderr(&out));
    let out = t.run(&["artifact", "zzzz", "diff"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("execution zzzz not found"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_misspelled_command_is_not_read_as_a_plan() {
    let t = TestDir::new();
    let out = t.run(&["valdate", "plan.json"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains(r#"unknown command "valdate" (did you mean validate?)"#),
        "{}",
        stderr(&out)
    );
    // An existing file of that name is a plan.
    t.file("veryfy", "{}");
    let out = t.run(&["veryfy"]);
    assert!(
        !stderr(&out).contains("unknown command"),
        "{}",
        stderr(&out)
    );
}
