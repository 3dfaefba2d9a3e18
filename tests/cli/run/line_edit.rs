//! Line-addressed `file_edit`: bound to the text the approver saw, shown in `preview`, refused
//! when the file changed after approval.

use serde_json::json;

use crate::harness::{TestDir, assert_exit_with, code, stderr, stdout};

fn line_plan(t: &TestDir) -> std::path::PathBuf {
    t.plan(
        "edit.json",
        &json!({"plan_id": "line-edit", "steps": [
            {"step_id": "fix", "tool": "file_edit",
             "arguments": {"path": "src/lib.rs", "line": 2, "expect": "    a - b",
                           "replace": "    a + b"}},
            {"step_id": "note", "tool": "file_edit",
             "arguments": {"path": "src/lib.rs", "line_containing": "TODO", "expect": "// TODO: fix add",
                           "delete": true}},
            {"step_id": "doc", "tool": "file_edit",
             "arguments": {"path": "src/lib.rs", "lines": [1, 1], "expect": "pub fn add(a: i32, b: i32) -> i32 {",
                           "insert_after": "    // adds"}}]}),
    )
}

const LIB: &str = "pub fn add(a: i32, b: i32) -> i32 {\n    a - b\n}\n// TODO: fix add\n";

#[test]
fn line_edits_run_and_preview_shows_their_diff() {
    let t = TestDir::new();
    t.file("src/lib.rs", LIB);
    let plan = line_plan(&t);
    let out = t.run(&["preview", plan.to_str().unwrap(), "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        v["steps"][0]["diff"],
        "--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -1,4 +1,4 @@\n pub fn add(a: i32, b: i32) -> i32 {\n-    a - b\n+    a + b\n }\n // TODO: fix add\n"
    );
    assert!(
        v["steps"][1]["diff"]
            .as_str()
            .unwrap()
            .contains("-// TODO: fix add\n"),
        "{v}"
    );
    assert!(
        v["steps"][2]["diff"]
            .as_str()
            .unwrap()
            .contains("+    // adds\n"),
        "{v}"
    );
    assert_eq!(t.read("src/lib.rs"), LIB, "preview wrote nothing");
    let out = t.approve_and_run(&plan, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        t.read("src/lib.rs"),
        "pub fn add(a: i32, b: i32) -> i32 {\n    // adds\n    a + b\n}\n"
    );
}

#[test]
fn line_edit_refused_when_the_file_changed_after_approval() {
    let t = TestDir::new();
    t.file("src/lib.rs", LIB);
    let plan = line_plan(&t);
    t.approve(&plan);
    // Someone changes line 2 after the approval: the edit must not overwrite it.
    let changed = LIB.replace("    a - b", "    a * b");
    t.file("src/lib.rs", &changed);
    let out = t.run(&["run", plan.to_str().unwrap()]);
    assert_exit_with(&out, 30, "src/lib.rs line 2");
    let err = stderr(&out);
    assert!(
        err.contains(r#"expected "    a - b""#) && err.contains(r#"found "    a * b""#),
        "{err}"
    );
    assert_eq!(t.read("src/lib.rs"), changed, "nothing was written");
    // preview says the same before anyone runs it.
    let out = t.run(&["preview", plan.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["steps"][0]["effect"], "will_fail", "{v}");
    assert!(
        v["steps"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("found \"    a * b\""),
        "{v}"
    );
}

#[test]
fn bad_line_edit_arguments_are_validation_errors_with_their_location() {
    let t = TestDir::new();
    t.file("a.txt", "x\n");
    let plan = t.plan(
        "bad.json",
        &json!({"plan_id": "bad-lines", "steps": [
            {"step_id": "both", "tool": "file_edit",
             "arguments": {"path": "a.txt", "old": "x", "new": "y", "line": 1}},
            {"step_id": "zero", "tool": "file_edit",
             "arguments": {"path": "a.txt", "line": 0, "expect": "x", "delete": true}},
            {"step_id": "reversed", "tool": "file_edit",
             "arguments": {"path": "a.txt", "lines": [4, 2], "expect": "x", "delete": true}},
            {"step_id": "unbound", "tool": "file_edit",
             "arguments": {"path": "a.txt", "line": 1, "replace": "y"}}]}),
    );
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let err = stderr(&out);
    for needle in [
        "steps[0].arguments",
        "'old' and 'line' cannot both be given",
        "steps[1].arguments.line",
        "steps[2].arguments",
        "[4, 2] is reversed",
        "steps[3].arguments",
        "'expect' is required",
    ] {
        assert!(err.contains(needle), "{needle:?} in {err}");
    }
    assert_eq!(t.read("a.txt"), "x\n");
}
