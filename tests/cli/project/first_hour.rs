//! A new user's first hour (issue 22): what the help, the README and the docs promise, the
//! binary does; mistakes get the exit code and the hint a newcomer needs.

use serde_json::json;

use crate::harness::*;

fn repo_file(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap()
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
    // In a workspace without a database, `runs` (and `show`, `review`, a `draft --revise` of a
    // missing plan) says so and leaves nothing behind.
    let llm = ["--llm-url", "http://127.0.0.1:9/v1", "--model", "m"];
    for args in [
        vec!["runs"],
        vec!["runs", "--json"],
        vec!["show", "abc"],
        [&["review", "abc"][..], &llm[..]].concat(),
        [&["draft", "--revise", "missing.json"][..], &llm[..]].concat(),
    ] {
        let out = t.run(&args);
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        assert!(!t.ws.join(".acode").exists(), "{args:?} created .acode/");
    }
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
    assert_exit_with(&out, 2, "did you mean --confirm?");
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "typo", "steps": [
            {"step_id": "a", "tool": "file_raed", "arguments": {"path": "x"}}]}),
    );
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_exit_with(&out, 2, "did you mean \"file_read\"?");
}

/// An agent's progress names each tool it calls, and a refused call's `tool_result` follows its
/// `tool_call` in the events.
#[test]
fn agent_progress_names_the_tool_and_refused_calls_have_their_tool_call() {
    use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};
    let t = TestDir::new();
    t.file("src/lib.rs", "pub fn x() {}\n");
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_tool_calls(&[("file_read", json!({"path": "src/lib.rs"}))]),
        // Not among the step's tools: refused before running.
        ScriptedResponse::chat_tool_calls(&[("file_delete", json!({"path": "src/lib.rs"}))]),
        ScriptedResponse::chat_text("done"),
    ]);
    let plan = t.plan(
        "agent.json",
        &json!({"plan_id": "agent", "steps": [
            {"step_id": "look", "tool": "agent", "arguments": {
                "instruction": "Look.", "tools": ["file_read"], "max_turns": 5}}]}),
    );
    t.approve(&plan);
    let url = server.url();
    let out = t.run(&[
        "run",
        plan.to_str().unwrap(),
        "--llm-url",
        url.as_str(),
        "--model",
        "m",
        "--jsonl",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("turn 1: file_read src/lib.rs"), "{err}");
    assert!(err.contains("turn 2: file_delete src/lib.rs"), "{err}");
    let evs = events(&out);
    let pos = |ty: &str, tool: &str| {
        evs.iter()
            .position(|e| e["type"] == ty && e["tool"] == tool)
            .unwrap_or_else(|| panic!("no {ty} for {tool}: {evs:?}"))
    };
    assert!(pos("tool_call", "file_delete") < pos("tool_result", "file_delete"));
    assert!(pos("tool_call", "file_read") < pos("tool_result", "file_read"));
    // Every tool_result follows its own tool_call: the latest call/result event before it with
    // the same call id (a model may reuse ids across turns) is the call, for the same tool.
    for (i, e) in evs
        .iter()
        .enumerate()
        .filter(|(_, e)| e["type"] == "tool_result")
    {
        let before = evs[..i]
            .iter()
            .rev()
            .find(|c| {
                (c["type"] == "tool_call" || c["type"] == "tool_result")
                    && c["call_id"] == e["call_id"]
            })
            .unwrap_or_else(|| panic!("no tool_call before {e}"));
        assert_eq!(before["type"], "tool_call", "{e}");
        assert_eq!(before["tool"], e["tool"], "{e}");
    }
    assert_events_match_schema(&evs);
}

/// `draft` says why each attempt was not accepted, and `--workspace` applies to the stages
/// (docs/stages.md): the draft is checked against, and recorded in, the workspace given.
#[test]
fn draft_reports_each_rejected_attempt_and_honours_workspace() {
    use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};
    let t = TestDir::new();
    let elsewhere = t.root.join("caller");
    std::fs::create_dir_all(&elsewhere).unwrap();
    t.file("notes.txt", "hello\n");
    let bad = json!({"plan_id": "g", "steps": [
        {"step_id": "a", "tool": "teleport", "arguments": {}}]});
    let good = json!({"plan_id": "g", "steps": [
        {"step_id": "a", "tool": "file_read", "arguments": {"path": "notes.txt"}}]});
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_text(&fenced(&bad)),
        ScriptedResponse::chat_text(&fenced(&good)),
    ]);
    let out_path = t.root.join("drafted.json");
    let out = t
        .cmd()
        .current_dir(&elsewhere)
        .args([
            "draft",
            "read the notes",
            "--workspace",
            t.ws.to_str().unwrap(),
            "-o",
            out_path.to_str().unwrap(),
            "--llm-url",
            &server.url(),
            "--model",
            "m",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("[planner] attempt 1 of 3 not accepted (1 problem): "),
        "{err}"
    );
    assert!(err.contains("teleport"), "{err}");
    assert!(out_path.exists());
    // Recorded in the workspace's database, not the caller's directory.
    assert!(!elsewhere.join(".acode").exists());
    assert_eq!(
        q::<i64>(&t.db(), "SELECT COUNT(*) FROM runs WHERE kind = 'draft'"),
        2
    );
}

/// `--from-review` takes the id prefixes `show` takes, and `review` takes `--workspace`.
#[test]
fn review_and_from_review_take_workspace_and_id_prefixes() {
    use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};
    let t = TestDir::new();
    let elsewhere = t.root.join("caller");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let plan = t.plan(
        "greet.json",
        &json!({"plan_id": "greet", "description": "greet", "steps": [
            {"step_id": "w", "tool": "file_write", "arguments": {"path": "hello.txt", "contents": "hi\n"}}]}),
    );
    assert_eq!(
        code(&t.run(&["run", "--approve", plan.to_str().unwrap()])),
        0
    );
    let run_id: String = q(&t.db(), "SELECT run_id FROM runs");
    let verdict = json!({"verdict": "request_changes", "summary": "louder",
        "findings": [{"file": "hello.txt", "line": 1, "severity": "warning", "message": "say hi!"}]});
    let server = ScriptedServer::start(vec![ScriptedResponse::chat_text(&verdict.to_string())]);
    let ws = t.ws.to_str().unwrap();
    let out = t
        .cmd()
        .current_dir(&elsewhere)
        .args(["review", &run_id[..8], "--workspace", ws])
        .args(["--llm-url", &server.url(), "--model", "m"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 35, "{}", stderr(&out));
    let good = json!({"plan_id": "greet", "steps": [
        {"step_id": "w", "tool": "file_write", "arguments": {"path": "hello.txt", "contents": "hi!\n"}}]});
    let server2 = ScriptedServer::start(vec![ScriptedResponse::chat_text(&fenced(&good))]);
    let out = t
        .cmd()
        .args(["draft", "--revise", plan.to_str().unwrap()])
        .args(["--from-review", &run_id[..8]])
        .args(["--llm-url", &server2.url(), "--model", "m"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let sent = server2.requests()[0].body["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(sent.contains("say hi!"), "{sent}");
}

/// Ctrl-C during `draft` ends it with exit 130, says so, and the conversation is recorded as a
/// draft run that was interrupted.
#[test]
fn ctrl_c_during_draft_is_recorded_as_an_interrupted_draft() {
    use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};
    let t = TestDir::new();
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_text("{}").with_delay(std::time::Duration::from_secs(20)),
    ]);
    let out_path = t.root.join("never.json");
    let child = t
        .cmd()
        .args(["draft", "anything", "-o", out_path.to_str().unwrap()])
        .args(["--llm-url", &server.url(), "--model", "m"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the model has been asked (the conversation is under way).
    let start = std::time::Instant::now();
    while server.requests().is_empty() && start.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        !server.requests().is_empty(),
        "the draft never asked the model"
    );
    // SAFETY: the pid is our own child's.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 130, "{}", stderr(&out));
    assert!(stderr(&out).contains("interrupted"), "{}", stderr(&out));
    assert!(!out_path.exists());
    let db = t.db();
    assert_eq!(q::<String>(&db, "SELECT kind FROM runs"), "draft");
    assert_eq!(q::<String>(&db, "SELECT status FROM runs"), "interrupted");
}

/// `allow_commands` allows a program, `auto_approve_commands` decides whether it asks: validate
/// and preview say which steps will ask and what the confirmation mode will do, so the denial
/// (exit 33) at run time is no surprise.
#[test]
fn validate_and_preview_say_which_steps_ask_in_the_mode_given() {
    let t = TestDir::new();
    t.file("acode-policy.json", r#"{"allow_commands": ["uname"]}"#);
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "ask", "steps": [
            {"step_id": "quiet", "tool": "run_command", "arguments": {"argv": ["true"]}},
            {"step_id": "who", "tool": "run_command", "arguments": {"argv": ["uname"]}}]}),
    );
    let p = plan.to_str().unwrap();
    let out = t.run(&["validate", p]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(
            "step who asks for confirmation: uname is allowed but not in auto_approve_commands"
        ),
        "{err}"
    );
    assert!(!err.contains("step quiet asks"), "{err}");
    assert!(
        err.contains("1 step asks for confirmation (who): DENIED"),
        "{err}"
    );
    assert!(err.contains("exits 33"), "{err}");

    let out = t.run(&["validate", "--json", "--confirm", "auto-approve", p]);
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(v["confirm_mode"], "auto-approve");
    assert_eq!(v["confirmations"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["confirmations"][0]["step_id"], "who");

    let out = t.run(&["preview", "--confirm", "auto-approve", p]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("asks for confirmation: uname"), "{text}");
    assert!(text.contains("approved without asking"), "{text}");

    // What validate said is what happens.
    let out = t.run(&["run", "--approve", p]);
    assert_eq!(code(&out), 33, "{}", stderr(&out));
    let out = t.run(&["run", p, "--confirm", "auto-approve"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[test]
fn tools_prints_the_built_in_allowlist() {
    let t = TestDir::new();
    let out = t.run(&["tools"]);
    assert_eq!(code(&out), 0);
    // stdout stays one JSON document.
    let _: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    let err = stderr(&out);
    let list = acode_run::policy::DEFAULT_ALLOWLIST.join(", ");
    assert!(err.contains(&list), "{err}");
    assert!(err.contains("auto_approve_commands"), "{err}");
}

/// A secret-shaped `plan_id` is redacted in the decisions table like everywhere else: the raw
/// database bytes (file and WAL) never hold it.
#[test]
fn a_secret_shaped_plan_id_is_redacted_in_the_decisions_table() {
    let t = TestDir::new();
    let token = "ghp_16C7e42F292c6912E7710c838347Ae178B4a";
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": format!("deploy-{token}"), "steps": [
            {"step_id": "a", "tool": "run_command", "arguments": {"argv": ["true"]}}]}),
    );
    let p = plan.to_str().unwrap();
    let out = t.run(&["reject", p, "--reason", "no", "--by", "bob"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = t.run(&["approve", p, "--by", "alice"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(code(&t.run(&["run", p])), 0);
    let decisions: i64 = q(&t.db(), "SELECT COUNT(*) FROM decisions");
    assert_eq!(decisions, 2);
    let stored: String = q(&t.db(), "SELECT plan_id FROM decisions LIMIT 1");
    assert!(stored.contains("[REDACTED]"), "{stored}");
    let db = t.ws.join(".acode/executions.db");
    for f in [db.clone(), db.with_extension("db-wal")] {
        if let Ok(bytes) = std::fs::read(&f) {
            let needle = b"16C7e42F292c6912";
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle),
                "{} holds the token",
                f.display()
            );
        }
    }
}

/// Under GitHub Actions an invocation refused before it starts (exit 3: not approved; exit 2:
/// invalid plan or bad flag) still writes its annotation, job summary, `--junit` file and
/// `$GITHUB_OUTPUT`, and a finished run writes `$GITHUB_OUTPUT` too.
#[test]
fn refused_runs_still_write_every_ci_report() {
    let t = TestDir::new();
    let unapproved = t.plan(
        "p.json",
        &json!({"plan_id": "ci", "steps": [
            {"step_id": "a", "tool": "run_command", "arguments": {"argv": ["true"]}}]}),
    );
    let invalid = t.plan(
        "bad.json",
        &json!({"plan_id": "ci", "steps": [
            {"step_id": "a", "tool": "file_raed", "arguments": {"path": "x"}}]}),
    );
    let cases: Vec<(Vec<String>, i32, &str)> = vec![
        (
            vec!["run".into(), unapproved.display().to_string()],
            3,
            "not approved",
        ),
        (
            vec!["run".into(), invalid.display().to_string()],
            2,
            "file_raed",
        ),
        (
            vec![
                "run".into(),
                unapproved.display().to_string(),
                "--confrim".into(),
                "x".into(),
            ],
            2,
            "confrim",
        ),
    ];
    for (i, (args, want, needle)) in cases.iter().enumerate() {
        let summary = t.root.join(format!("summary-{i}.md"));
        let output = t.root.join(format!("output-{i}.txt"));
        let junit = t.root.join(format!("junit-{i}.xml"));
        let out = t
            .cmd()
            .args(args)
            .args(["--junit", junit.to_str().unwrap()])
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_STEP_SUMMARY", &summary)
            .env("GITHUB_OUTPUT", &output)
            .output()
            .unwrap();
        assert_eq!(code(&out), *want, "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        let annotation = err
            .lines()
            .find(|l| l.starts_with("::error title=acode-run refused"))
            .unwrap_or_else(|| panic!("{args:?}: no annotation in {err}"));
        assert!(
            annotation.contains(&format!("(exit {want})")),
            "{annotation}"
        );
        assert!(annotation.contains(needle), "{annotation}");
        let s = std::fs::read_to_string(&summary).unwrap();
        assert!(s.contains(&format!("refused (exit {want})")), "{s}");
        let o = std::fs::read_to_string(&output).unwrap();
        assert!(o.contains(&format!("exit_code={want}\n")), "{o}");
        assert!(o.contains("status=refused\n"), "{o}");
        if *needle != "confrim" {
            // The flags did not parse in the last case: no JUnit path is known then.
            let x = std::fs::read_to_string(&junit).unwrap();
            assert!(x.contains("<failure"), "{x}");
            assert!(x.contains(needle), "{x}");
        }
    }
    // A finished run's outputs.
    t.approve(&unapproved);
    let output = t.root.join("output-ok.txt");
    let out = t
        .cmd()
        .args(["run", unapproved.to_str().unwrap()])
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_OUTPUT", &output)
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let o = std::fs::read_to_string(&output).unwrap();
    assert!(o.contains("exit_code=0\nstatus=completed\nrun_id="), "{o}");
}

/// The README's embedding section has what a newcomer needs before the first build: the Cargo
/// line, the platform, an agent-step example (compiled with every README Rust block by
/// `cargo test --doc` through `ReadmeDoctests`), and where the workspace is.
#[test]
fn readme_embedding_has_the_dependency_line_platform_agent_example_and_workspace() {
    let readme = repo_file("README.md");
    let embedding = &readme[readme.find("## Embedding").unwrap()..];
    let embedding = &embedding[..embedding.find("\n## ").unwrap()];
    assert!(embedding.contains("acode_run = { path = "), "{embedding}");
    assert!(embedding.contains("Linux only"), "{embedding}");
    assert!(embedding.contains("```rust,no_run"), "{embedding}");
    assert!(
        embedding.contains("Arc::from(llm::client(config))"),
        "{embedding}"
    );
    assert!(
        embedding.contains("not the plan's directory"),
        "{embedding}"
    );
    assert!(
        readme.contains("is the directory you run acode-run in, not the plan file's directory"),
        "the tour says where the workspace is"
    );
    let lib = repo_file("src/lib.rs");
    assert!(lib.contains("#[doc = include_str!(\"../README.md\")]"));
}

/// `do` takes `--workspace` too: the model drafts for the workspace given, and without a
/// terminal it stops after the draft (exit 3) with the conversation recorded there.
#[test]
fn do_applies_workspace() {
    use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};
    let t = TestDir::new();
    let elsewhere = t.root.join("caller");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let good = json!({"plan_id": "g", "steps": [
        {"step_id": "w", "tool": "file_write", "arguments": {"path": "hello.txt", "contents": "hi\n"}}]});
    let server = ScriptedServer::start(vec![ScriptedResponse::chat_text(&fenced(&good))]);
    let out_path = t.root.join("do.json");
    let output = t.root.join("github-output.txt");
    let out = t
        .cmd()
        .current_dir(&elsewhere)
        .args(["do", "greet", "--workspace", t.ws.to_str().unwrap()])
        .args(["-o", out_path.to_str().unwrap()])
        .args(["--llm-url", &server.url(), "--model", "m"])
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_OUTPUT", &output)
        .output()
        .unwrap();
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    // Without a terminal nothing runs, and the CI page says why (exit 3, a refusal).
    let err = stderr(&out);
    assert!(
        err.lines()
            .any(|l| l.starts_with("::error title=acode-run refused")
                && l.contains("no terminal to ask for approval")),
        "{err}"
    );
    let o = std::fs::read_to_string(&output).unwrap();
    assert!(o.contains("exit_code=3\n"), "{o}");
    assert!(out_path.exists());
    assert!(!elsewhere.join(".acode").exists());
    assert_eq!(
        q::<i64>(&t.db(), "SELECT COUNT(*) FROM runs WHERE kind = 'draft'"),
        1
    );
}

/// A suggestion is the text that works when pasted (issue #34 item 3): `--json` for a flag,
/// `validate` for a command, `"jobs"` for a policy key, `"depends_on"` for a plan key. Each is
/// followed to show it works.
#[test]
fn did_you_mean_names_what_to_type() {
    let t = TestDir::new();
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "p", "steps": [
            {"step_id": "a", "tool": "file_read", "arguments": {"path": "x"}, "depend_on": []}]}),
    );
    let p = plan.to_str().unwrap();
    // A flag.
    let out = t.run(&["validate", p, "--jsn"]);
    assert_exit_with(&out, 2, "unknown option --jsn (did you mean --json?)");
    // A command.
    let out = t.run(&["valdate", p]);
    assert_exit_with(&out, 2, "(did you mean validate?)");
    // A plan key: pasted, the plan validates.
    let out = t.run(&["validate", p]);
    assert_exit_with(&out, 2, "unknown field (did you mean \"depends_on\"?)");
    let fixed = std::fs::read_to_string(&plan)
        .unwrap()
        .replace("\"depend_on\"", "\"depends_on\"");
    std::fs::write(&plan, fixed).unwrap();
    assert_eq!(code(&t.run(&["validate", p, "--json"])), 0);
    // A policy key: pasted, the policy is read.
    t.file("acode-policy.json", r#"{"jbos": 2}"#);
    let out = t.run(&["validate", p]);
    assert_exit_with(&out, 2, "unknown field `jbos`");
    assert!(
        stderr(&out).contains("(did you mean \"jobs\"?)"),
        "{}",
        stderr(&out)
    );
    t.file("acode-policy.json", r#"{"jobs": 2}"#);
    let out = t.run(&["validate", p]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// A plan run from outside its workspace (issue #34 item 9): the refusal names the workspace it
/// used and the policy it read, hints at `--workspace` when a policy sits beside the plan (the
/// hint, followed literally, runs), and a refused run creates nothing.
#[test]
fn a_plan_run_from_its_parent_directory_names_the_workspace_and_creates_nothing() {
    let t = TestDir::new();
    let j1 = t.ws.join("j1");
    std::fs::create_dir_all(&j1).unwrap();
    std::fs::write(
        j1.join("acode-policy.json"),
        json!({"allow_commands": ["hostname"], "auto_approve_commands": ["hostname"]}).to_string(),
    )
    .unwrap();
    std::fs::write(
        j1.join("plan.json"),
        json!({"plan_id": "j", "steps": [
            {"step_id": "a", "tool": "run_command", "arguments": {"argv": ["hostname"]}}]})
        .to_string(),
    )
    .unwrap();
    // Refused for the default policy (exit 32, a command it does not allow); nothing created.
    let out = t.run(&["j1/plan.json"]);
    assert_eq!(code(&out), 32, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "  workspace: {} (the current directory; --workspace DIR chooses another); no \
             acode-policy.json there: the default policy",
            t.ws.display()
        )),
        "{err}"
    );
    assert!(
        err.contains("  hint: j1/acode-policy.json sits beside the plan and was not read"),
        "{err}"
    );
    assert!(
        err.contains("acode-run j1/plan.json --workspace j1"),
        "{err}"
    );
    assert!(
        !t.ws.join(".acode").exists(),
        "a refused run created .acode/"
    );
    // `run --approve` refused the same way: no approval, no database.
    let out = t.run(&["run", "--approve", "j1/plan.json"]);
    assert_eq!(code(&out), 32, "{}", stderr(&out));
    assert!(!t.ws.join(".acode").exists());
    assert!(!j1.join(".acode").exists());
    assert!(!j1.join("plan.json.approval").exists());
    // An approved plan refused for its policy (exit 3) names the workspace too, creating nothing.
    let out = t
        .cmd()
        .current_dir(&j1)
        .args(["approve", "plan.json", "--by", "tester"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = t.run(&["j1/plan.json"]);
    assert!(matches!(code(&out), 3 | 32), "{}", stderr(&out));
    assert!(stderr(&out).contains("  workspace: "), "{}", stderr(&out));
    assert!(!t.ws.join(".acode").exists());
    // The hint, followed as printed, runs.
    let out = t.run(&["j1/plan.json", "--workspace", "j1"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(j1.join(".acode/executions.db").exists());
    assert!(!t.ws.join(".acode").exists());
}

/// The small ones of issue #34 item 13, each as a user meets it.
#[test]
fn small_first_hour_fixes_hold() {
    let t = TestDir::new();
    // `file_write` with `content`: one problem, naming the argument to type.
    let plan = t.plan(
        "w.json",
        &json!({"plan_id": "w", "steps": [
            {"step_id": "a", "tool": "file_write", "arguments": {"path": "x.txt", "content": "y"}}]}),
    );
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_exit_with(
        &out,
        2,
        "missing required argument 'contents' (given 'content': did you mean 'contents'?)",
    );
    assert!(stderr(&out).contains("(1 problem)"), "{}", stderr(&out));
    // `init` is not a command; the suggestion is the one that makes a plan.
    assert_exit_with(&t.run(&["init"]), 2, "(did you mean draft?)");
    // A refused invocation's --json has `"run_id": null`, not "".
    let out = t.run(&["run", "missing.json", "--json"]);
    assert_eq!(code(&out), 2);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(v["run_id"].is_null(), "{v}");
    // `artifact EXEC_ID` without a type lists the types, each with its command.
    let plan = t.plan(
        "r.json",
        &json!({"plan_id": "r", "steps": [
            {"step_id": "a", "tool": "run_command", "arguments": {"argv": ["echo", "hi"]}}]}),
    );
    let out = t.approve_and_run(&plan, &["--sandbox", "none"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let id: String = q(
        &t.db(),
        "SELECT execution_id FROM executions WHERE step_id = 'a'",
    );
    let out = t.run(&["artifact", &id[..8]]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("acode-run artifact {id} stdout")),
        "{}",
        stdout(&out)
    );
    let out = t.run(&["artifact", &id, "stdout"]);
    assert_eq!(stdout(&out), "hi\n");
}
