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
        "::error title=acode-run step fails failed (tool_failed)::command exited with code 1%0A\
         --- stderr (last 1 line) ---%0Acat: no-such-file: No such file or directory"
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

/// Issue #21: a failing `cargo test` names the failing test — printed by cargo on stdout — on the
/// console, in the JUnit failure and its `<system-out>`, in the annotation, the job summary and
/// `--json`; `--quiet` still shows it.
#[test]
fn a_failing_cargo_test_is_named_everywhere_without_opening_the_database() {
    let t = TestDir::new();
    t.file(
        "Cargo.toml",
        "[package]\nname = \"sums\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
    );
    t.file(
        "src/lib.rs",
        "pub fn add(a: u32, b: u32) -> u32 { a + b }\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    \
         fn adds_small_numbers() { assert_eq!(super::add(2, 2), 4); }\n    #[test]\n    \
         fn the_answer_is_forty_two() { assert_eq!(super::add(40, 1), 42); }\n}\n",
    );
    let plan = t.plan(
        "test.json",
        &json!({"plan_id": "cargo-test", "steps": [
        {"step_id": "test", "tool": "run_command",
         "arguments": {"argv": ["cargo", "test", "--offline", "--quiet"], "timeout_s": 600}}]}),
    );
    t.approve(&plan);
    let report = t.root.join("report.xml");
    let summary = t.root.join("summary.md");
    let out = t
        .cmd()
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .args(["run", plan.to_str().unwrap(), "--json", "--junit"])
        .arg(&report)
        .output()
        .unwrap();
    assert_eq!(code(&out), 30, "{}", stderr(&out));
    let name = "the_answer_is_forty_two";
    let err = stderr(&out);
    // The console: under the failed step line.
    let console: Vec<&str> = err.lines().filter(|l| l.starts_with("      | ")).collect();
    assert!(console.iter().any(|l| l.contains(name)), "{err}");
    // The annotation.
    let annotation = err.lines().find(|l| l.starts_with("::error")).unwrap();
    assert!(annotation.contains(name), "{annotation}");
    // The job summary.
    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(md.contains(name), "{md}");
    // JUnit: in the failure body, and the whole stdout in <system-out>.
    let xml = std::fs::read_to_string(&report).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let case = doc
        .descendants()
        .find(|n| n.has_tag_name("testcase"))
        .unwrap();
    let text_of = |tag: &str| {
        case.children()
            .find(|n| n.has_tag_name(tag))
            .and_then(|n| n.text())
            .unwrap_or_default()
            .to_string()
    };
    assert!(text_of("failure").contains(name), "{xml}");
    assert!(text_of("system-out").contains("running 2 tests"), "{xml}");
    // --json: the step's failure output and result.
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let step = &result["steps"][0];
    assert!(
        step["failure_output"].as_str().unwrap().contains(name),
        "{step}"
    );
    assert!(
        step["output"].as_str().unwrap().contains("exit code: 101"),
        "{step}"
    );

    // --quiet: nothing but the failure, which still names the test.
    let out = t
        .cmd()
        .env_remove("GITHUB_ACTIONS")
        .args(["run", plan.to_str().unwrap(), "--quiet"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 30);
    let err = stderr(&out);
    assert!(err.contains("FAILED") && err.contains(name), "{err}");
    assert!(
        !err.contains("workspace:"),
        "the header is not failure: {err}"
    );
}

/// Issue #21: a read-only plan's results are in `--json`, bounded and flagged when cut.
#[test]
fn json_carries_each_steps_result() {
    let t = TestDir::new();
    t.file("small.txt", "hello from the file\n");
    t.file("big.txt", &"0123456789abcdef\n".repeat(4096));
    let plan = t.plan("read.json", &json!({"plan_id": "reads", "steps": [
        {"step_id": "small", "tool": "file_read", "arguments": {"path": "small.txt"}},
        {"step_id": "big", "tool": "file_read", "arguments": {"path": "big.txt"}},
        {"step_id": "count", "tool": "run_command", "arguments": {"argv": ["wc", "-l", "small.txt"]}}]}));
    t.approve(&plan);
    let out = t
        .cmd()
        .args(["run", plan.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let steps = result["steps"].as_array().unwrap();
    assert!(
        steps[0]["output"]
            .as_str()
            .unwrap()
            .contains("hello from the file")
    );
    assert!(steps[0].get("output_truncated").is_none());
    assert_eq!(steps[1]["output_truncated"], true);
    assert!(steps[1]["output"].as_str().unwrap().len() <= 16 * 1024);
    assert!(
        steps[2]["output"].as_str().unwrap().contains("1 small.txt"),
        "{}",
        steps[2]
    );

    // `show --json` carries them too, from the database.
    let run_id = result["run_id"].as_str().unwrap();
    let out = t.cmd().args(["show", run_id, "--json"]).output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let steps = shown["steps"].as_array().unwrap();
    let stdout_of = |i: usize| steps[i]["result"]["stdout"].clone();
    assert_eq!(stdout_of(0)["content"], "hello from the file\n");
    assert_eq!(stdout_of(0)["truncated"], false);
    assert_eq!(stdout_of(1)["truncated"], true);
    assert_eq!(stdout_of(1)["bytes"], 17 * 4096);
    assert!(
        stdout_of(2)["content"]
            .as_str()
            .unwrap()
            .contains("1 small.txt")
    );
}

/// A passing step carries its output in `<system-out>`, as docs/ci.md promises, cut to its last
/// `JUNIT_PASSED_OUTPUT` bytes (issue 43 §3); a refused plan's JUnit failure lists each problem
/// once, not once in the message and again in the list.
#[test]
fn junit_gives_passing_steps_their_bounded_output_and_a_refusal_each_problem_once() {
    let t = TestDir::new();
    t.file("present.txt", "hello from the passing step\n");
    t.file("big.txt", &format!("{}the end\n", "x".repeat(200_000)));
    let plan = t.plan("ok.json", &json!({"plan_id": "ok", "steps": [
        {"step_id": "read", "tool": "file_read", "arguments": {"path": "present.txt"}},
        {"step_id": "big", "tool": "file_read", "arguments": {"path": "big.txt"}},
        {"step_id": "write", "tool": "file_write", "arguments": {"path": "x.txt", "contents": "x"}}]}));
    t.approve(&plan);
    let report = t.root.join("ok.xml");
    let out = t
        .cmd()
        .env_remove("GITHUB_ACTIONS")
        .args([plan.to_str().unwrap(), "--junit", report.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let xml = std::fs::read_to_string(&report).unwrap();
    let doc = roxmltree::Document::parse(&xml).expect("well-formed XML");
    let out_of = |name: &str| {
        doc.descendants()
            .find(|n| n.has_tag_name("testcase") && n.attribute("name") == Some(name))
            .unwrap()
            .children()
            .find(|n| n.has_tag_name("system-out"))
            .map(|n| n.text().unwrap_or_default().to_string())
    };
    let read = out_of("read").expect("a passing step's output");
    assert!(read.contains("hello from the passing step"), "{read}");
    let big = out_of("big").expect("a passing step's output");
    assert!(big.ends_with("the end\n"), "the end is kept");
    assert!(big.len() < 20_000, "bounded: {} bytes", big.len());
    assert!(big.contains("earlier bytes not shown"), "the cut is said");
    assert!(xml.len() < 40_000, "{} bytes", xml.len());

    // A refusal: two problems, each listed once.
    let bad = t.plan(
        "bad.json",
        &json!({"plan_id": "bad", "steps": [
        {"step_id": "a", "tool": "file_teleport", "arguments": {}},
        {"step_id": "b", "tool": "file_read", "arguments": {}}]}),
    );
    let report = t.root.join("bad.xml");
    let out = t
        .cmd()
        .env_remove("GITHUB_ACTIONS")
        .args([bad.to_str().unwrap(), "--junit", report.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let xml = std::fs::read_to_string(&report).unwrap();
    let doc = roxmltree::Document::parse(&xml).expect("well-formed XML");
    let failure = doc
        .descendants()
        .find(|n| n.has_tag_name("failure"))
        .unwrap()
        .text()
        .unwrap()
        .to_string();
    for needle in ["unknown tool \"file_teleport\"", "steps[1].arguments"] {
        assert_eq!(failure.matches(needle).count(), 1, "{needle} in {failure}");
    }
}
