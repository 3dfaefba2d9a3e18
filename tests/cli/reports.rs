//! CI reports: `--junit` read back with a real XML parser, GitHub workflow commands checked to the
//! byte, and the job summary appended to `$GITHUB_STEP_SUMMARY`.

use serde_json::json;

use crate::harness::{TestDir, code, stderr};

/// A plan with one step of each outcome: completed, failed-and-tolerated, failed (a command that
/// writes to stderr), and blocked.
fn mixed_plan(t: &TestDir) -> std::path::PathBuf {
    t.file("present.txt", "hello\n");
    t.plan("ci.json", &json!({"plan_id": "ci-demo", "steps": [
        {"step_id": "read", "tool": "file_read", "arguments": {"path": "present.txt"}},
        {"step_id": "optional", "tool": "file_read", "arguments": {"path": "100%\nmissing"},
         "on_failure": "continue"},
        {"step_id": "fails", "tool": "run_command",
         "arguments": {"argv": ["cat", "no-such-file"]}},
        {"step_id": "after", "tool": "file_write", "arguments": {"path": "x.txt", "contents": "x"}}
    ]}))
}

#[test]
fn junit_report_has_one_testcase_per_step_with_the_right_outcome() {
    let t = TestDir::new();
    let plan = mixed_plan(&t);
    let report = t.root.join("report.xml");
    t.approve(&plan);
    let out = t
        .cmd()
        .env_remove("GITHUB_ACTIONS")
        .args([
            "run",
            plan.to_str().unwrap(),
            "--junit",
            report.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(code(&out), 30, "{}", stderr(&out));
    let xml = std::fs::read_to_string(&report).unwrap();
    let doc = roxmltree::Document::parse(&xml).expect("the report is well-formed XML");
    let suite = doc
        .descendants()
        .find(|n| n.has_tag_name("testsuite"))
        .unwrap();
    assert_eq!(suite.attribute("name"), Some("ci-demo"));
    assert_eq!(suite.attribute("tests"), Some("4"));
    assert_eq!(suite.attribute("failures"), Some("2"));
    assert_eq!(suite.attribute("skipped"), Some("1"));
    let cases: Vec<_> = suite
        .children()
        .filter(|n| n.has_tag_name("testcase"))
        .collect();
    let names: Vec<_> = cases.iter().map(|c| c.attribute("name").unwrap()).collect();
    assert_eq!(names, ["read", "optional", "fails", "after"]);
    assert!(
        cases
            .iter()
            .all(|c| c.attribute("classname") == Some("ci-demo"))
    );
    let child = |i: usize, tag: &str| cases[i].children().find(|n| n.has_tag_name(tag));
    assert!(child(0, "failure").is_none() && child(0, "skipped").is_none());
    let tolerated = child(1, "failure").expect("a tolerated failure is still reported");
    assert!(tolerated.text().unwrap().contains("tolerated"));
    let failure = child(2, "failure").unwrap();
    assert_eq!(failure.attribute("type"), Some("tool_failed"));
    // The tail of the command's stderr is in the failure body.
    assert!(
        failure.text().unwrap().contains("no-such-file"),
        "{:?}",
        failure.text()
    );
    assert!(child(3, "skipped").is_some());
}

#[test]
fn github_annotations_and_summary_are_exact_and_escaped() {
    let t = TestDir::new();
    let plan = mixed_plan(&t);
    let summary = t.root.join("summary.md");
    std::fs::write(&summary, "# earlier step\n").unwrap();
    t.approve(&plan);
    let out = t
        .cmd()
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .args(["run", plan.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(code(&out), 30);
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("::")).collect();
    assert_eq!(lines.len(), 2, "{err}");
    // The tolerated failure is a warning; the `%` and the newline of its path are escaped, so the
    // message cannot end the command or start a second one.
    assert_eq!(
        lines[0],
        "::warning title=acode-run step optional failed (tool_failed)::read 100%25%0Amissing: \
         No such file or directory (os error 2)"
    );
    assert_eq!(
        lines[1],
        "::error title=acode-run step fails failed (tool_failed)::command exited with code 1"
    );
    // Stdout stays free of workflow commands (it belongs to --jsonl/--json).
    assert!(!String::from_utf8_lossy(&out.stdout).contains("::"));
    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(
        md.starts_with("# earlier step\n"),
        "appended, not overwritten"
    );
    assert!(md.contains("| step | tool | status | time | error |"));
    assert!(
        md.contains("| optional | file_read | failed (tolerated) |"),
        "{md}"
    );
    assert!(md.contains("| after | file_write | blocked |"), "{md}");
}

#[test]
fn lsp_check_diagnostics_become_file_annotations() {
    let t = TestDir::new();
    t.file(
        "Cargo.toml",
        "[package]\nname = \"broken\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    );
    t.file(
        "src/main.rs",
        "fn main() {\n    let x: u32 = \"text\";\n}\n",
    );
    let plan = t.plan(
        "lsp.json",
        &json!({"plan_id": "lsp", "steps": [
        {"step_id": "check", "tool": "lsp_check", "arguments": {"path": "."}}]}),
    );
    t.approve(&plan);
    let out = t
        .cmd()
        .args(["run", plan.to_str().unwrap(), "--annotations", "github"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 30, "{}", stderr(&out));
    let err = stderr(&out);
    let diag = err
        .lines()
        .find(|l| l.starts_with("::error file="))
        .unwrap_or_else(|| panic!("no file annotation in:\n{err}"));
    assert!(
        diag.starts_with("::error file=src/main.rs,line=2,title=error E0308::"),
        "{diag}"
    );
}
