//! A new user's first hour (issue 22): what the help, the README and the docs promise, the
//! binary does; mistakes get the exit code and the hint a newcomer needs.

use std::path::Path;

use serde_json::json;

use crate::harness::*;

fn repo_file(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap()
}

/// One table, generated from `ExitCode::ALL`: `--help` prints it, and README.md and docs/ci.md
/// hold it verbatim (regenerate with `acode_run::ExitCode::markdown_table()`).
#[test]
fn exit_code_tables_in_help_readme_and_ci_doc_come_from_exit_code_all() {
    let table = acode_run::ExitCode::markdown_table();
    for doc in ["README.md", "docs/ci.md"] {
        assert!(
            repo_file(doc).contains(&table),
            "{doc} does not hold the generated exit-code table:\n{table}"
        );
    }
    let t = TestDir::new();
    let help = stdout(&t.run(&["--help"]));
    assert!(help.contains(&acode_run::ExitCode::help_table()), "{help}");
    for c in acode_run::ExitCode::ALL {
        assert!(table.contains(&format!("| {} | ", c.code())), "{c:?}");
    }
    // What a pipeline does with each code: every code has its line in docs/ci.md.
    let ci = repo_file("docs/ci.md");
    for c in acode_run::ExitCode::ALL {
        assert!(ci.contains(&format!("- **{}**: ", c.code())), "{c:?}");
    }
    // draft's exit codes are documented where draft is.
    let stages = repo_file("docs/stages.md");
    let row = stages
        .lines()
        .find(|l| l.starts_with("| `acode-run draft \"GOAL\""))
        .unwrap();
    for code in ["0 written", "2 no valid plan", "30 ", "31 ", "130 "] {
        assert!(row.contains(code), "{code} missing: {row}");
    }
}

#[test]
fn no_arguments_prints_usage_and_exits_2() {
    let t = TestDir::new();
    let out = t.run(&[]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("Usage: acode-run"),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).is_empty(), "usage goes to stderr");
    // Asked for, help is not an error.
    assert_eq!(code(&t.run(&["--help"])), 0);
}

/// `cd`, pipes and redirects in a `command` string are plan mistakes (exit 2), each with the
/// hint that fixes it.
#[test]
fn shell_habits_in_a_command_are_usage_errors_with_a_hint() {
    let t = TestDir::new();
    std::fs::create_dir_all(t.ws.join("sub")).unwrap();
    for (args, hint) in [
        (json!({"command": "cd sub && cargo test"}), "\"cwd\""),
        (json!({"command": "cd sub"}), "\"cwd\""),
        (json!({"argv": ["cd", "sub"]}), "\"cwd\""),
        (json!({"command": "cargo test | tee log.txt"}), "argv"),
        (json!({"command": "cargo test > log.txt"}), "separate steps"),
        (json!({"command": "echo a 2>&1"}), "argv"),
    ] {
        let plan = t.plan(
            "p.json",
            &json!({"plan_id": "sh", "steps": [
                {"step_id": "s", "tool": "run_command", "arguments": args}]}),
        );
        let out = t.run(&["validate", plan.to_str().unwrap()]);
        assert_eq!(code(&out), 2, "{args}: {}", stderr(&out));
        assert!(stderr(&out).contains(hint), "{args}: {}", stderr(&out));
        assert!(
            !stderr(&out).contains("sandbox violation"),
            "{args}: {}",
            stderr(&out)
        );
        assert!(!t.ws.join("log.txt").exists());
    }
}

#[test]
fn a_duplicate_step_id_is_one_problem() {
    let t = TestDir::new();
    let plan = t.plan(
        "dup.json",
        &json!({"plan_id": "dup", "steps": [
            {"step_id": "a", "tool": "run_command", "arguments": {"argv": ["true"]}},
            {"step_id": "a", "tool": "run_command", "arguments": {"argv": ["true"]}}]}),
    );
    let out = t.run(&["validate", "--json", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    let problems = v["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].to_string().contains("duplicate step_id"),
        "{problems:?}"
    );
    let human = stderr(&t.run(&["validate", plan.to_str().unwrap()]));
    assert!(!human.contains("depend on itself"), "{human}");
}

/// `runs --json` prints what docs/database.md says: one array of run objects.
#[test]
fn runs_json_is_the_documented_array_and_runs_creates_nothing() {
    let t = TestDir::new();
    // In a workspace without a database, `runs` says so and leaves nothing behind.
    let out = t.run(&["runs"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(!t.ws.join(".acode").exists(), "runs created .acode/");
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "one", "steps": [
            {"step_id": "a", "tool": "run_command", "arguments": {"argv": ["true"]}}]}),
    );
    assert_eq!(
        code(&t.run(&["run", "--approve", plan.to_str().unwrap()])),
        0
    );
    let out = t.run(&["runs", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    let runs = v.as_array().expect("an array");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["plan_id"], "one");
    let db = repo_file("docs/database.md");
    assert!(
        db.contains("`runs --json` prints one JSON **array**"),
        "{db}"
    );
    let help = stdout(&t.run(&["runs", "--help"]));
    assert!(help.contains("`runs`: one array"), "{help}");
}

#[test]
fn an_explicit_db_in_a_missing_directory_is_a_usage_error() {
    let t = TestDir::new();
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "db", "steps": [
            {"step_id": "a", "tool": "run_command", "arguments": {"argv": ["true"]}}]}),
    );
    let missing = t.root.join("no/such/dir/x.db");
    for args in [
        vec!["run", "--approve", plan.to_str().unwrap()],
        vec!["approve", plan.to_str().unwrap()],
        vec!["runs"],
    ] {
        let mut args = args.clone();
        args.extend(["--db", missing.to_str().unwrap()]);
        let out = t.run(&args);
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("does not exist"), "{}", stderr(&out));
        assert!(!t.root.join("no").exists(), "{args:?} created directories");
    }
    // ACODE_DB is held to the same rule.
    let out = t
        .cmd()
        .args(["run", "--approve", plan.to_str().unwrap()])
        .env("ACODE_DB", &missing)
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(!t.root.join("no").exists());
    // The default database still creates its `.acode/`.
    assert_eq!(
        code(&t.run(&["run", "--approve", plan.to_str().unwrap()])),
        0
    );
    assert!(t.ws.join(".acode/executions.db").exists());
}

#[test]
fn run_by_without_approve_is_refused() {
    let t = TestDir::new();
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "by", "steps": [
            {"step_id": "a", "tool": "run_command", "arguments": {"argv": ["true"]}}]}),
    );
    let out = t.run(&["run", plan.to_str().unwrap(), "--by", "alice"]);
    assert_exit_with(&out, 2, "--approve");
    assert!(!t.ws.join(".acode").exists(), "nothing ran");
    let out = t.run(&["run", "--approve", plan.to_str().unwrap(), "--by", "alice"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[test]
fn one_step_is_not_one_steps() {
    let t = TestDir::new();
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "one", "steps": [
            {"step_id": "a", "tool": "run_command", "arguments": {"argv": ["true"]}}]}),
    );
    let err = stderr(&t.run(&["validate", plan.to_str().unwrap()]));
    assert!(err.contains("(1 step,"), "{err}");
    assert!(!err.contains("1 steps"), "{err}");
}

#[test]
fn misspelled_flags_and_tools_get_a_suggestion() {
    let t = TestDir::new();
    let out = t.run(&["run", "plan.json", "--confrim", "auto-deny"]);
    assert_exit_with(&out, 2, "did you mean \"confirm\"?");
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "typo", "steps": [
            {"step_id": "a", "tool": "file_raed", "arguments": {"path": "x"}}]}),
    );
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_exit_with(&out, 2, "did you mean \"file_read\"?");
}
