//! `preview`: the effect of a plan before approval, with nothing written.

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::harness::{TestDir, assert_exit_with, code, stderr, stdout};

/// A digest of every path, type and content under `dir`, so "nothing written" is checked whole.
fn tree_digest(dir: &std::path::Path) -> String {
    let mut entries: Vec<_> = walkdir::WalkDir::new(dir)
        .into_iter()
        .map(|e| e.unwrap())
        .collect();
    entries.sort_by(|a, b| a.path().cmp(b.path()));
    let mut h = Sha256::new();
    for e in entries {
        h.update(e.path().to_string_lossy().as_bytes());
        if e.file_type().is_file() {
            h.update(std::fs::read(e.path()).unwrap());
        }
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn preview_shows_write_edit_delete_diffs_in_order_and_writes_nothing() {
    let t = TestDir::new();
    t.file("keep.txt", "kept\n");
    let plan = t.plan("p.json", &json!({"plan_id": "pv", "variables": {"who": "world"}, "steps": [
        {"step_id": "w", "tool": "file_write", "arguments": {"path": "a.txt", "contents": "one\ntwo\n"}},
        {"step_id": "e", "tool": "file_edit", "arguments": {"path": "a.txt", "old": "two", "new": "${who}"}},
        {"step_id": "c", "tool": "run_command",
         "arguments": {"argv": ["grep", "-c", "one", "a.txt"], "env": {"DEPLOY_TOKEN": "s3cr3t-value"}}},
        {"step_id": "d", "tool": "file_delete", "arguments": {"path": "a.txt"}}]}));
    let before = tree_digest(&t.root);
    let out = t.run(&["preview", plan.to_str().unwrap(), "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(tree_digest(&t.root), before, "preview wrote something");
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let steps = v["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 4);
    assert_eq!(steps[0]["effect"], "file_change");
    assert_eq!(
        steps[0]["diff"],
        "--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n"
    );
    // The edit sees the earlier write, with the variable substituted.
    assert_eq!(
        steps[1]["diff"],
        "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+world\n"
    );
    assert_eq!(steps[2]["effect"], "command");
    assert_eq!(steps[2]["argv"], json!(["grep", "-c", "one", "a.txt"]));
    assert_eq!(steps[2]["env"], json!(["DEPLOY_TOKEN"]));
    assert!(
        !stdout(&out).contains("s3cr3t-value"),
        "env values are not shown"
    );
    // After a command, a file diff is marked as an assumption, not a certainty.
    assert_eq!(steps[3]["assumed"], true);
    assert_eq!(
        steps[3]["diff"],
        "--- a/a.txt\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-one\n-world\n"
    );

    // The human form has the same three diffs, in order.
    let human = stdout(&t.run(&["preview", plan.to_str().unwrap()]));
    let at = |needle: &str| {
        human
            .find(needle)
            .unwrap_or_else(|| panic!("{needle:?} in {human}"))
    };
    assert!(at("+two") < at("+world") && at("+world") < at("-world"));
    assert_eq!(tree_digest(&t.root), before);
}

#[test]
fn preview_marks_steps_that_will_fail() {
    let t = TestDir::new();
    t.file("a.txt", "alpha\n");
    let plan = t.plan("p.json", &json!({"plan_id": "pv2", "steps": [
        {"step_id": "e", "tool": "file_edit", "arguments": {"path": "a.txt", "old": "beta", "new": "x"}},
        {"step_id": "c", "tool": "file_create", "arguments": {"path": "a.txt", "contents": "y"}}]}));
    // A step that will fail makes preview exit 30 (what the run would end with), naming it; the
    // JSON is printed all the same.
    let out = t.run(&["preview", plan.to_str().unwrap(), "--json"]);
    assert_exit_with(
        &out,
        30,
        "2 steps will fail as the workspace is now (e, c): exit 30",
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["steps"][0]["effect"], "will_fail");
    assert_eq!(v["steps"][1]["effect"], "will_fail");
    assert!(
        v["steps"][1]["reason"]
            .as_str()
            .unwrap()
            .contains("already exists")
    );
    let out = t.run(&["preview", plan.to_str().unwrap()]);
    assert_exit_with(&out, 30, "will fail as the workspace is now (e, c)");
    assert!(stdout(&out).contains("WILL FAIL"), "{}", stdout(&out));
}

#[test]
fn approve_shows_the_preview_unless_quiet() {
    let t = TestDir::new();
    let plan = t.plan("p.json", &json!({"plan_id": "pv3", "steps": [
        {"step_id": "w", "tool": "file_write", "arguments": {"path": "n.txt", "contents": "new\n"}}]}));
    let out = t.run(&["approve", plan.to_str().unwrap(), "--by", "tester"]);
    assert_eq!(code(&out), 0);
    assert!(stderr(&out).contains("+new"), "{}", stderr(&out));
    let quiet = t.run(&[
        "approve",
        plan.to_str().unwrap(),
        "--by",
        "tester",
        "--quiet",
    ]);
    assert_eq!(code(&quiet), 0);
    assert!(!stderr(&quiet).contains("+new"));
}

/// The preview is produced step by step and forgets a file after the last step (in execution
/// order, not file order) that changes it: a later step on the same file must still see what the
/// earlier ones did, and `approve` shows the same text as `preview`.
#[test]
fn streamed_preview_keeps_what_later_steps_need_in_execution_order() {
    let t = TestDir::new();
    t.file("old.txt", "on disk\n");
    // File order differs from execution order: e6 is first in the file and runs last.
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "pv-stream", "steps": [
        {"step_id": "e6", "tool": "file_edit", "depends_on": ["c5"],
         "arguments": {"path": "a.txt", "old": "second", "new": "third"}},
        {"step_id": "x2", "tool": "file_write", "depends_on": [],
         "arguments": {"path": "a.txt", "contents": "first\n"}},
        {"step_id": "e1", "tool": "file_edit", "depends_on": ["x2"],
         "arguments": {"path": "a.txt", "old": "first", "new": "second"}},
        {"step_id": "d3", "tool": "file_delete", "depends_on": ["e1"],
         "arguments": {"path": "old.txt"}},
        {"step_id": "w4", "tool": "file_write", "depends_on": ["d3"],
         "arguments": {"path": "b.txt", "contents": "b\n"}},
        {"step_id": "c5", "tool": "file_create", "depends_on": ["w4"],
         "arguments": {"path": "old.txt", "contents": "again\n"}}]}),
    );
    let out = t.run(&["preview", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let order: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with('['))
        .map(|l| l.split(' ').nth(1).unwrap())
        .collect();
    assert_eq!(order, ["x2", "e1", "d3", "w4", "c5", "e6"], "{text}");
    // e1 sees x2's write, e6 sees e1's edit; c5 sees d3's delete, not the file still on disk.
    assert!(text.contains("    -first\n    +second\n"), "{text}");
    assert!(text.contains("    -second\n    +third\n"), "{text}");
    assert!(text.contains("c5 file_create: changes old.txt\n"), "{text}");
    assert!(!text.contains("WILL FAIL"), "{text}");
    let approve = t.run(&["approve", plan.to_str().unwrap(), "--by", "tester"]);
    assert_eq!(code(&approve), 0, "{}", stderr(&approve));
    // `preview` ends with what the confirmation mode will do; up to the notes, the same text.
    let steps_part = text.split("network:").next().unwrap();
    assert!(steps_part.ends_with("    +third\n"), "{text}");
    assert!(
        stderr(&approve).starts_with(steps_part),
        "approve shows the same preview:\n{}\n---\n{text}",
        stderr(&approve)
    );
}
