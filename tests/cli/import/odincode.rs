//! `acode-run import odincode`: every fixture plan under fixtures/odincode/plans (written from
//! odincode's source: one per whitelisted tool, the argument-name variants, intent casing, string
//! numbers) is converted and judged; what is written validates; lossless imports run on a copy of
//! fixtures/odincode/workspace and leave the files odincode's tools would.

use std::path::PathBuf;

use serde_json::Value;

use crate::harness::{TestDir, code, copy_tree, git, repo, stderr, stdout};

fn fixture(name: &str) -> PathBuf {
    repo().join(format!("fixtures/odincode/plans/{name}.json"))
}

/// A workspace holding a copy of the odincode fixture project.
fn workspace() -> TestDir {
    let t = TestDir::new();
    copy_tree(&repo().join("fixtures/odincode/workspace"), &t.ws);
    t
}

/// Imports `name` into `t`, returning the exit code, the `--json` report and the plan path.
fn import(t: &TestDir, name: &str) -> (i32, Value, PathBuf) {
    let out_path = t.root.join(format!("{name}.acode.json"));
    let out = t.run(&[
        "import",
        "odincode",
        fixture(name).to_str().unwrap(),
        "-o",
        out_path.to_str().unwrap(),
        "--json",
    ]);
    let v: Value = serde_json::from_str(&stdout(&out))
        .unwrap_or_else(|e| panic!("{name}: {e}: {} {}", stdout(&out), stderr(&out)));
    (code(&out), v, out_path)
}

fn statuses(v: &Value) -> Vec<String> {
    v["report"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["status"].as_str().unwrap().to_string())
        .collect()
}

/// Every fixture: its exit code, each step's status, and for refusals a word of the reason.
const EXPECTED: &[(&str, i32, &[&str], &str)] = &[
    ("file_read", 0, &["lossless"], ""),
    ("file_write", 0, &["lossless"], ""),
    ("file_create", 0, &["lossless"], ""),
    ("file_write_template", 0, &["lossless"], ""),
    ("file_search", 0, &["lossless"], ""),
    ("file_glob_path_variant", 0, &["lossless"], ""),
    ("file_edit_line_number", 0, &["lossless"], ""),
    ("file_edit_pattern", 0, &["lossless"], ""),
    ("file_edit_pattern_replace_all", 0, &["lossless"], ""),
    ("file_edit_insert_after_number", 0, &["lossless"], ""),
    ("file_edit_insert_at_top", 0, &["lossless"], ""),
    ("file_edit_delete_line", 0, &["lossless"], ""),
    ("file_edit_delete_pattern", 0, &["lossless"], ""),
    ("file_edit_delete_pattern_many", 0, &["lossless"], ""),
    ("write_then_edit", 0, &["lossless", "lossless"], ""),
    ("memory_query", 0, &["lossless"], ""),
    ("bash_exec", 0, &["lossless"], ""),
    ("lsp_check", 40, &["lossy"], ""),
    ("memory_query_session", 40, &["lossy"], ""),
    ("execution_summary", 40, &["lossy"], ""),
    ("git_status", 40, &["lossy"], ""),
    ("git_diff", 40, &["lossy"], ""),
    ("git_diff_path", 40, &["lossless"], ""),
    ("git_log", 40, &["lossy"], ""),
    ("wc", 40, &["lossy"], ""),
    ("display_text", 40, &["lossless"], ""),
    ("read_intent_with_write", 40, &["lossless", "lossless"], ""),
    ("bash_exec_pipe", 41, &["refused"], "| (pipe)"),
    ("bash_exec_redirect", 41, &["refused"], "> (redirection)"),
    (
        "mixed_read_and_pipe",
        41,
        &["lossless", "refused"],
        "| (pipe)",
    ),
    ("symbols_in_file", 41, &["refused"], "code-graph"),
    ("references_to_symbol_name", 41, &["refused"], "code-graph"),
    (
        "references_to_symbol_name_symbol",
        41,
        &["refused"],
        "code-graph",
    ),
    (
        "references_from_file_to_symbol_name",
        41,
        &["refused"],
        "code-graph",
    ),
    ("unknown_tool", 41, &["refused"], "whitelist"),
];

#[test]
fn every_fixture_imports_as_expected_and_what_is_written_validates() {
    let listed: Vec<String> = std::fs::read_dir(repo().join("fixtures/odincode/plans"))
        .unwrap()
        .map(|e| {
            e.unwrap()
                .path()
                .file_stem()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    for name in &listed {
        assert!(
            EXPECTED.iter().any(|(n, ..)| n == name) || name.starts_with("splice_"),
            "fixture {name} has no expectation"
        );
    }
    for (name, exit, steps, reason) in EXPECTED {
        let t = workspace();
        let (c, v, plan) = import(&t, name);
        assert_eq!(c, *exit, "{name}: {v:#}");
        assert_eq!(v["exit_code"], *exit, "{name}");
        assert_eq!(statuses(&v), *steps, "{name}: {v:#}");
        if !reason.is_empty() {
            let text = v["report"].to_string();
            assert!(text.contains(reason), "{name}: {reason:?} in {text}");
        }
        for s in v["report"]["steps"].as_array().unwrap() {
            match s["status"].as_str().unwrap() {
                "lossy" => assert!(!s["lost"].as_array().unwrap().is_empty(), "{name}: {s}"),
                "refused" => assert!(
                    s["reason"].as_str().is_some_and(|r| !r.is_empty()),
                    "{name}"
                ),
                _ => {}
            }
        }
        let written = v["output"].as_str().is_some();
        assert_eq!(written, plan.exists(), "{name}");
        if written {
            // Never an approval, and the plan validates as it is.
            assert!(!t.root.join(format!("{name}.acode.json.approval")).exists());
            let out = t.run(&["validate", plan.to_str().unwrap()]);
            assert_eq!(code(&out), 0, "{name}: {}", stderr(&out));
            let p: Value = serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
            assert_eq!(p["defaults"]["retries"], 0, "{name}");
        }
    }
}

#[test]
fn intent_casing_and_string_numbers_are_converted() {
    let t = workspace();
    let (_, v, plan) = import(&t, "file_search");
    assert_eq!(v["report"]["odincode_intent"], "Query");
    let p: Value = serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    assert_eq!(p["intent"], "query");
    assert_eq!(
        p["steps"][0]["precondition"],
        serde_json::json!({"file_exists": "src"})
    );
    let (_, _, plan) = import(&t, "file_edit_line_number");
    let p: Value = serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    // "2" became 2, bound to the text line 2 has now.
    assert_eq!(p["steps"][0]["arguments"]["line"], 2);
    assert_eq!(p["steps"][0]["arguments"]["expect"], "    a - b");
    assert_eq!(
        p["steps"][0]["precondition"],
        serde_json::json!({"file_exists": "src/lib.rs"})
    );
    let (_, _, plan) = import(&t, "memory_query");
    let p: Value = serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    assert_eq!(
        p["steps"][0]["arguments"],
        serde_json::json!({"tool": "file_edit", "status": "ok", "limit": 10})
    );
    let (_, _, plan) = import(&t, "lsp_check");
    let p: Value = serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    assert_eq!(
        p["steps"][0]["precondition"],
        serde_json::json!({"file_exists": "Cargo.toml"})
    );
    let (_, v, _) = import(&t, "read_intent_with_write");
    assert!(
        v["report"]["plan_lost"][0]
            .as_str()
            .unwrap()
            .contains("intent \"READ\" not kept"),
        "{v:#}"
    );
    // A second import to the same output is refused, not overwritten.
    let (c, _, _) = {
        let out = t.run(&[
            "import",
            "odincode",
            fixture("lsp_check").to_str().unwrap(),
            "-o",
            plan.to_str().unwrap(),
        ]);
        (code(&out), (), ())
    };
    assert_eq!(c, 2);
}

/// The files odincode's own tools would leave (its file_edit rewrites the file as its lines
/// joined by "\n" plus a final newline), written here by hand from its source.
const RESULTS: &[(&str, &str, &str)] = &[
    (
        "file_write",
        "docs/notes.md",
        "# Notes\n\nwritten by odincode\n",
    ),
    (
        "file_create",
        "src/new_module.rs",
        "pub fn hello() -> &'static str {\n    \"hello\"\n}\n",
    ),
    (
        "file_edit_line_number",
        "src/lib.rs",
        "pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n// TODO: fix add\n",
    ),
    (
        "file_edit_pattern",
        "notes.txt",
        "alpha\nbeta\nGAMMA\ndelta\n",
    ),
    (
        "file_edit_pattern_replace_all",
        "notes.txt",
        "(a)\n(a)\n(a)\n(a)\n",
    ),
    (
        "file_edit_insert_after_number",
        "notes.txt",
        "alpha\nbeta\nbeta-and-a-half\ngamma\ndelta\n",
    ),
    (
        "file_edit_insert_at_top",
        "notes.txt",
        "# header\nalpha\nbeta\ngamma\ndelta\n",
    ),
    ("file_edit_delete_line", "notes.txt", "alpha\nbeta\ngamma\n"),
    (
        "file_edit_delete_pattern",
        "src/lib.rs",
        "pub fn add(a: i32, b: i32) -> i32 {\n    a - b\n}\n",
    ),
    (
        "file_edit_delete_pattern_many",
        "notes.txt",
        "alpha\ngamma\n",
    ),
    ("write_then_edit", "plan.txt", "one\ntwo\nTHREE\n"),
    // odincode substitutes nothing: `${` is written as it is.
    (
        "file_write_template",
        "greet.sh",
        "#!/bin/sh\necho \"hello ${USER:-you}, it costs $${PRICE}\"\n",
    ),
];

#[test]
fn lossless_imports_run_and_leave_the_files_odincodes_tools_would() {
    for (name, file, expected) in RESULTS {
        let t = workspace();
        let (c, _, plan) = import(&t, name);
        assert_eq!(c, 0, "{name}");
        let out = t.approve_and_run(&plan, &["--confirm", "auto-deny"]);
        assert_eq!(code(&out), 0, "{name}: {}", stderr(&out));
        assert_eq!(t.read(file), *expected, "{name}");
    }
    // Read-only and command imports run too (git needs a repository with a commit).
    for name in [
        "file_read",
        "file_search",
        "file_glob_path_variant",
        "memory_query",
        "bash_exec",
        "git_status",
        "git_diff_path",
        "git_log",
        "wc",
        "display_text",
    ] {
        let t = workspace();
        git(&t, &["init", "-q"]);
        git(&t, &["add", "-A"]);
        git(&t, &["commit", "-qm", "fixture"]);
        let (_, _, plan) = import(&t, name);
        let out = t.approve_and_run(&plan, &["--confirm", "auto-deny"]);
        assert_eq!(code(&out), 0, "{name}: {}", stderr(&out));
    }
}

#[test]
fn a_line_edit_import_is_refused_at_run_time_when_the_line_changed() {
    let t = workspace();
    let (_, _, plan) = import(&t, "file_edit_delete_line");
    t.approve(&plan);
    t.file("notes.txt", "alpha\nbeta\ngamma\nDELTA\n");
    let out = t.run(&["run", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 30, "{}", stderr(&out));
    assert!(stderr(&out).contains("found \"DELTA\""), "{}", stderr(&out));
    assert_eq!(t.read("notes.txt"), "alpha\nbeta\ngamma\nDELTA\n");
}

#[test]
fn splice_imports_become_commands_with_the_policy_written_beside_and_never_approved() {
    let t = workspace();
    // A stand-in `splice` on PATH that records its argv, so the command can be checked and run.
    let bin = t.root.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let splice = bin.join("splice");
    std::fs::write(&splice, "#!/bin/sh\necho \"splice $*\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&splice, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (name, argv) in [
        (
            "splice_patch",
            vec![
                "splice",
                "patch",
                "--file",
                "src/lib.rs",
                "--symbol",
                "add",
                "--with",
                "patches/add.rs",
                "--kind",
                "function",
            ],
        ),
        (
            "splice_patch_name_file_path",
            vec![
                "splice",
                "patch",
                "--file",
                "src/lib.rs",
                "--symbol",
                "add",
                "--with",
                "patches/add.rs",
            ],
        ),
        (
            "splice_plan",
            vec!["splice", "plan", "--file", "splice-plan.json"],
        ),
        (
            "splice_plan_file_variant",
            vec!["splice", "plan", "--file", "splice-plan.json"],
        ),
    ] {
        let out_path = t.root.join(format!("{name}.acode.json"));
        let out = t
            .cmd()
            .env("PATH", &path)
            .args([
                "import",
                "odincode",
                fixture(name).to_str().unwrap(),
                "-o",
                out_path.to_str().unwrap(),
                "--json",
            ])
            .output()
            .unwrap();
        let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert!(matches!(code(&out), 0 | 40), "{name}: {v:#}");
        let p: Value = serde_json::from_str(&std::fs::read_to_string(&out_path).unwrap()).unwrap();
        assert_eq!(p["steps"][0]["tool"], "run_command");
        assert_eq!(
            p["steps"][0]["arguments"]["argv"],
            serde_json::json!(argv),
            "{name}"
        );
        let policy = t.root.join(format!("{name}.acode.policy.json"));
        assert_eq!(v["policy"], policy.to_str().unwrap());
        let text = std::fs::read_to_string(&policy).unwrap();
        assert_eq!(text, "{\"allow_commands\":[\"splice\"]}\n");
        assert!(!t.root.join(format!("{name}.acode.json.approval")).exists());
        // Without the policy the command is refused; with it, the plan validates.
        let bare = t
            .cmd()
            .env("PATH", &path)
            .args(["validate", out_path.to_str().unwrap()])
            .output()
            .unwrap();
        assert_ne!(code(&bare), 0);
        let ok = t
            .cmd()
            .env("PATH", &path)
            .args([
                "validate",
                out_path.to_str().unwrap(),
                "--policy",
                policy.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert_eq!(code(&ok), 0, "{name}: {}", stderr(&ok));
    }
}

#[test]
fn not_an_odincode_plan_is_a_usage_error_naming_where() {
    let t = workspace();
    let bad = t.plan_text(
        "bad.json",
        r#"{"plan_id": "x", "intent": "WRITE", "steps": []}"#,
    );
    let out = t.run(&["import", "odincode", bad.to_str().unwrap()]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("plan.steps") || stderr(&out).contains("plan.intent"),
        "{}",
        stderr(&out)
    );
    let bad = t.plan_text("bad2.json", r#"{"plan_id": "x", "intent": "WRITE", "steps": [{"step_id": "a", "tool": "file_read", "arguments": {"path": "a"}}]}"#);
    let out = t.run(&["import", "odincode", bad.to_str().unwrap()]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("plan.intent: unknown intent \"WRITE\""),
        "{}",
        stderr(&out)
    );
    let out = t.run(&["import", "claude", bad.to_str().unwrap()]);
    assert_eq!(code(&out), 2);
    assert!(!t.root.join("bad2.acode.json").exists());
}

#[test]
fn the_worked_example_in_the_docs_is_what_import_does() {
    let doc = std::fs::read_to_string(repo().join("docs/odincode.md")).unwrap();
    let blocks: Vec<&str> = doc
        .split("```jsonc\n")
        .skip(1)
        .map(|b| b.split("\n```").next().unwrap())
        .collect();
    assert_eq!(
        blocks.len(),
        2,
        "the odincode plan and the plan written from it"
    );
    let t = workspace();
    let input = t.plan_text("fix-add.json", blocks[0]);
    let out_path = t.root.join("fix-add.acode.json");
    let out = t.run(&[
        "import",
        "odincode",
        input.to_str().unwrap(),
        "-o",
        out_path.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 41, "{}", stderr(&out));
    // The report printed in the docs, line by line.
    for line in stdout(&out).lines() {
        assert!(doc.contains(line), "{line:?} is not in docs/odincode.md");
    }
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(&out_path).unwrap()).unwrap();
    let documented: Value = serde_json::from_str(blocks[1]).unwrap();
    assert_eq!(written, documented);
    let out = t.approve_and_run(&out_path, &["--confirm", "auto-approve"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(t.read("src/lib.rs").contains("    a + b\n"));
}

#[test]
fn an_edit_whose_result_would_differ_from_odincodes_is_lossy_and_says_why() {
    let t = workspace();
    // odincode rewrites the file with "\n" endings and a final newline; acode-run keeps "\r\n".
    t.file("crlf.txt", "one\r\ntwo\r\nthree");
    let plan = t.plan_text(
        "crlf.json",
        r#"{"plan_id": "crlf", "intent": "MUTATE", "evidence_referenced": [], "steps": [
            {"step_id": "s", "tool": "file_edit",
             "arguments": {"path": "crlf.txt", "line_number": 2, "new_content": "TWO\n"}}]}"#,
    );
    let out_path = t.root.join("crlf.acode.json");
    let out = t.run(&[
        "import",
        "odincode",
        plan.to_str().unwrap(),
        "-o",
        out_path.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code(&out), 40, "{}", stdout(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(
        v["report"]["steps"][0]["lost"][0]
            .as_str()
            .unwrap()
            .contains("line endings"),
        "{v:#}"
    );
    // A new_content ending in a newline leaves an empty line after it, as odincode's does.
    let p: Value = serde_json::from_str(&std::fs::read_to_string(&out_path).unwrap()).unwrap();
    assert_eq!(p["steps"][0]["arguments"]["replace"], "TWO\n\n");
    let run = t.approve_and_run(&out_path, &[]);
    assert_eq!(code(&run), 0, "{}", stderr(&run));
    assert_eq!(t.read("crlf.txt"), "one\r\nTWO\n\r\nthree");
}

#[test]
fn a_step_the_policy_forbids_is_refused_in_the_validators_words() {
    let t = workspace();
    let policy = t.plan_text("strict-policy.json", r#"{"commands": ["git"]}"#);
    let out_path = t.root.join("echo.acode.json");
    let out = t.run(&[
        "import",
        "odincode",
        fixture("bash_exec").to_str().unwrap(),
        "-o",
        out_path.to_str().unwrap(),
        "--policy",
        policy.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code(&out), 41, "{}", stdout(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let reason = v["report"]["steps"][0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("acode-run refuses the converted step") && reason.contains("echo"),
        "{reason}"
    );
    assert!(!out_path.exists(), "nothing left to write");
}

/// The words of a printed command (no quoting in these paths), without `acode-run`.
fn printed_command(text: &str, starts: &str) -> Vec<String> {
    let at = text
        .find(starts)
        .unwrap_or_else(|| panic!("no `{starts}` in: {text}"));
    let end = text[at..].find('`').unwrap();
    text[at..at + end]
        .split_whitespace()
        .skip(1)
        .map(str::to_string)
        .collect()
}

/// Printed next steps work when followed literally (issue #34 item 10): `import … --workspace ws`
/// from another directory prints `preview`/`approve` with `--workspace ws`; followed, preview
/// finds the files and exits 0, approve and run succeed. Without it, preview says WILL FAIL and
/// exits 30.
#[test]
fn import_from_outside_the_workspace_prints_next_steps_that_work_when_pasted() {
    let t = workspace();
    let old = t.root.join("old.json");
    std::fs::copy(fixture("file_edit_pattern"), &old).unwrap();
    let run_in_root = |args: &[String]| t.cmd().current_dir(&t.root).args(args).output().unwrap();
    let words = |w: &[&str]| -> Vec<String> { w.iter().map(|s| s.to_string()).collect() };
    let out = run_in_root(&words(&[
        "import",
        "odincode",
        "old.json",
        "--workspace",
        "ws",
    ]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    let preview = printed_command(&err, "acode-run preview ");
    let approve = printed_command(&err, "acode-run approve ");
    assert!(preview.ends_with(&words(&["--workspace", "ws"])), "{err}");
    assert!(approve.ends_with(&words(&["--workspace", "ws"])), "{err}");
    let out = run_in_root(&preview);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert!(!stdout(&out).contains("WILL FAIL"), "{}", stdout(&out));
    // Without the workspace, the same preview looks in the wrong place, says so and exits 30.
    let wrong: Vec<String> = preview[..2].to_vec();
    let out = run_in_root(&wrong);
    assert!(stdout(&out).contains("WILL FAIL"), "{}", stdout(&out));
    assert_eq!(code(&out), 30, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("will fail as the workspace is now"),
        "{}",
        stderr(&out)
    );
    // The approve line, then the run, as printed.
    let mut approve = approve;
    approve.extend(words(&["--by", "tester"]));
    let out = run_in_root(&approve);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let mut run = vec!["run".to_string()];
    run.extend(preview[1..].iter().cloned());
    let out = run_in_root(&run);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(t.ws.join(".acode/executions.db").exists());
    assert!(!t.root.join(".acode").exists());
}
