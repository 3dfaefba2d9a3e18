//! Preconditions read files through the tools' resolver: regular files only, bounded reads, and
//! the kernel-checked resolution (issue 13, item 10).

use std::time::Duration;

use serde_json::json;

use crate::harness::*;

#[test]
fn a_fifo_named_by_file_contains_does_not_block_the_run() {
    let t = TestDir::new();
    let fifo = std::ffi::CString::new(t.ws.join("pipe").to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "fifo", "steps": [
        {"step_id": "w", "tool": "file_write", "arguments": {"path": "out.txt", "contents": "x"},
         "precondition": {"file_contains": {"path": "pipe", "pattern": "anything"}}}]}),
    );
    t.approve(&plan);
    let out = t.run_within(&["run", plan.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(code(&out), 30, "{}", stderr(&out));
    assert!(!t.ws.join("out.txt").exists());
    let db = t.db();
    let message: String = q(&db, "SELECT error_message FROM steps");
    assert!(message.contains("not a regular file"), "{message}");
}

#[test]
fn preconditions_do_not_look_through_links_out() {
    let t = TestDir::new();
    std::os::unix::fs::symlink(&t.outside, t.ws.join("out")).unwrap();
    let plan = t.plan("p.json", &json!({"plan_id": "links", "steps": [
        {"step_id": "a", "tool": "file_write", "arguments": {"path": "a.txt", "contents": "x"},
         "precondition": {"file_contains": {"path": "out/sentinel.txt", "pattern": "untouched"}}}]}));
    // Refused at validation already (the lexical check); the kernel check stands behind it.
    let out = t.run(&["run", "--approve", plan.to_str().unwrap()]);
    assert_ne!(code(&out), 0, "{}", stderr(&out));
    assert!(!t.ws.join("a.txt").exists());
    t.assert_outside_untouched();
}
