//! Secrets the runner is given (SPEC §6 "Secrets"), attacked byte for byte: a `--var` into a
//! secret-named `env` key, a variable listed in `"secrets"`, values holding `"` and `\`, a token in
//! a step id — printed by the commands themselves, written to a file an agent reads, and searched
//! for in the raw database file and its WAL, stdout (JSONL), stderr, the artifacts and every request
//! body the LLM server received.

use std::path::Path;

use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};
use serde_json::json;

use crate::harness::*;

/// Holds `"` and `\`, which JSON escapes: redaction after serialisation misses it.
const QUOTED: &str = r#"tok"en\with-quote-1234"#;
/// A plain value whose variable name does not look secret: secret only because `"secrets"` lists it.
const LISTED: &str = "plainsecretvalue-5678";
/// A token format in an identifier.
const GH: &str = "ghp_16C7e42F292c6912E7710c838347Ae178B4a";

/// Substrings that appear in every textual form of the secrets (raw, JSON-escaped once or twice).
const NEEDLES: &[&str] = &[
    "with-quote-1234",
    "plainsecretvalue-5678",
    "16C7e42F292c6912",
];

fn assert_clean(what: &str, bytes: &[u8]) {
    for n in NEEDLES {
        let found = bytes.windows(n.len()).any(|w| w == n.as_bytes());
        assert!(
            !found,
            "{what} contains {n:?}:\n{}",
            String::from_utf8_lossy(bytes)
        );
    }
}

/// The database file and, when present, its WAL, read raw without checkpointing.
fn assert_db_clean(t: &TestDir) {
    let db = t.ws.join(".acode/executions.db");
    assert_clean("the database file", &std::fs::read(&db).unwrap());
    for ext in ["-wal", "-shm"] {
        let p = Path::new(&format!("{}{ext}", db.display())).to_path_buf();
        if let Ok(bytes) = std::fs::read(&p) {
            assert_clean(&format!("the database {ext} file"), &bytes);
        }
    }
}

fn policy(t: &TestDir) {
    t.file(
        "acode-policy.json",
        r#"{"allow_commands": ["sh", "env"], "auto_approve_commands": ["sh", "env", "echo", "cat"]}"#,
    );
}

#[test]
fn secrets_from_variables_never_reach_any_record_or_channel() {
    let t = TestDir::new();
    policy(&t);
    t.file(
        "print.sh",
        "echo token=$DEPLOY_TOKEN; echo listed=$UPLOAD; echo \"$DEPLOY_TOKEN\" >&2\n",
    );
    let plan = t.plan(
        "secrets.json",
        &json!({
            "plan_id": "secrets",
            "variables": {"deploy_token": "", "deploy": ""},
            "secrets": ["deploy"],
            "steps": [
                {"step_id": "print", "tool": "run_command", "arguments": {
                    "argv": ["sh", "print.sh"],
                    "env": {"DEPLOY_TOKEN": "${deploy_token}", "UPLOAD": "${deploy}"}}},
                {"step_id": format!("echo-{GH}"), "tool": "run_command", "arguments": {
                    "argv": ["echo", "${deploy_token}", "${deploy}"]}},
                {"step_id": "write", "tool": "file_write", "arguments": {
                    "path": "leak.txt", "contents": "${deploy_token}\n${deploy}\n"}},
                {"step_id": "fail", "tool": "run_command", "on_failure": "continue",
                 "arguments": {"argv": ["cat", "missing-${deploy}-${deploy_token}"]}}
            ]
        }),
    );
    let token_var = format!("deploy_token={QUOTED}");
    let listed_var = format!("deploy={LISTED}");
    let vars = ["--var", &token_var, "--var", &listed_var];

    let mut args = vec!["validate", plan.to_str().unwrap(), "--json"];
    args.extend_from_slice(&vars);
    let out = t.run(&args);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_clean("validate stdout", &out.stdout);

    let mut args = vec!["approve", plan.to_str().unwrap(), "--by", "tester"];
    args.extend_from_slice(&vars);
    let out = t.run(&args);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_clean("approve stderr", &out.stderr);

    let mut args = vec![
        "run",
        plan.to_str().unwrap(),
        "--jsonl",
        "--confirm",
        "auto-approve",
    ];
    args.extend_from_slice(&vars);
    let out = t.run(&args);
    // The last step fails on purpose (its error names the secret-holding path).
    assert!([0, 30].contains(&code(&out)), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("FAILED") || stderr(&out).contains("failed, tolerated"),
        "{}",
        stderr(&out)
    );
    // The commands really did see and print the secrets: the file holds them.
    assert_eq!(t.read("leak.txt"), format!("{QUOTED}\n{LISTED}\n"));
    assert_clean("run stdout (JSONL)", &out.stdout);
    assert_clean("run stderr", &out.stderr);
    let events = events(&out);
    assert!(events.iter().any(|e| e["type"] == "tool_call"));
    assert_db_clean(&t);

    // The records say where the secrets were.
    let db = t.db();
    let stdout_art: String = q(
        &db,
        "SELECT a.content FROM artifacts a JOIN executions e USING (execution_id)
         WHERE e.step_id = 'print' AND a.artifact_type = 'stdout'",
    );
    assert!(stdout_art.contains("token=[REDACTED]"), "{stdout_art}");
    assert!(stdout_art.contains("listed=[REDACTED]"), "{stdout_art}");
    let args_json: String = q(
        &db,
        "SELECT arguments_json FROM executions WHERE step_id = 'print'",
    );
    let args: serde_json::Value = serde_json::from_str(&args_json).unwrap();
    assert_eq!(args["env"]["DEPLOY_TOKEN"], "[REDACTED]");
    assert_eq!(args["env"]["UPLOAD"], "[REDACTED]");
    let ids: Vec<String> = db
        .prepare("SELECT step_id FROM steps ORDER BY position")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(ids[1], "echo-[REDACTED]");
    drop(db);

    // Reading the record back prints nothing more.
    let run_id = events[0]["run_id"].as_str().unwrap().to_string();
    for args in [
        vec!["show", run_id.as_str()],
        vec!["show", run_id.as_str(), "--json"],
    ] {
        let out = t.run(&args);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert_clean("show", &out.stdout);
    }
}

#[test]
fn secrets_never_reach_the_model_or_its_recorded_prompts() {
    let t = TestDir::new();
    policy(&t);
    t.file(
        "notes.txt",
        &format!("deploy with {QUOTED}\nand {LISTED}\n{GH}\n"),
    );
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_tool_calls(&[
            ("file_read", json!({"path": "notes.txt"})),
            ("run_command", json!({"argv": ["cat", "notes.txt"]})),
        ]),
        ScriptedResponse::chat_text("done"),
    ]);
    let plan = t.plan(
        "agent.json",
        &json!({
            "plan_id": "agent-secrets",
            "variables": {"api_token": "", "deploy": ""},
            "secrets": ["deploy"],
            "steps": [{"step_id": "look", "tool": "agent", "arguments": {
                "instruction": "Read notes.txt. The token is ${api_token}, the target ${deploy}.",
                "tools": ["file_read", "run_command"], "max_turns": 4}}]
        }),
    );
    let token_var = format!("api_token={QUOTED}");
    let listed_var = format!("deploy={LISTED}");
    let url = server.url();
    let out = t.approve_and_run(
        &plan,
        &[
            "--var",
            &token_var,
            "--var",
            &listed_var,
            "--llm-url",
            &url,
            "--model",
            "m",
            "--jsonl",
            "--confirm",
            "auto-approve",
        ],
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "{}", stderr(&out));
    for r in &requests {
        assert_clean("an LLM request body", r.raw_body.as_bytes());
    }
    // The model was told something was there.
    assert!(requests[1].raw_body.contains("[REDACTED]"));
    assert_clean("stdout", &out.stdout);
    assert_clean("stderr", &out.stderr);
    assert_db_clean(&t);
    // The recorded prompt is the request as sent.
    let db = t.db();
    let prompt: String = q(
        &db,
        "SELECT a.content FROM artifacts a JOIN executions e USING (execution_id)
         WHERE e.tool_name = 'llm' AND a.artifact_type = 'prompt' ORDER BY e.started_at DESC, e.rowid DESC LIMIT 1",
    );
    let recorded: serde_json::Value = serde_json::from_str(&prompt).unwrap();
    assert_eq!(recorded["messages"], requests[1].body["messages"]);
}

#[test]
fn the_runners_secrets_do_not_reach_commands() {
    need_bwrap();
    let t = TestDir::new();
    // The policy even asks for the runner's own secrets: they are withheld anyway. Other secrets
    // stay out because the policy does not name them.
    t.file(
        "acode-policy.json",
        r#"{"allow_commands": ["sh"], "auto_approve_commands": ["sh"],
            "env_passthrough": ["ACODE_APPROVAL_KEY", "ACODE_LLM_API_KEY_FILE", "ACODE_LLM_API_KEY"]}"#,
    );
    let llm_key_file = t.root.join("llm.key");
    std::fs::write(&llm_key_file, "llm-file-key-0006\n").unwrap();
    t.file("dump.sh", "env > envdump.txt\n");
    t.file("verify.sh", "env > verifydump.txt\n");
    let plan = t.plan(
        "env.json",
        &json!({"plan_id": "env", "steps": [{"step_id": "dump", "tool": "run_command",
            "arguments": {"argv": ["sh", "dump.sh"]},
            "verify": {"command": "sh verify.sh"}}]}),
    );
    let env = [
        ("ACODE_APPROVAL_KEY", "env-approval-key-0002"),
        ("GITHUB_TOKEN", "github-token-0004"),
        ("DEPLOY_TOKEN", "deploy-token-0005"),
        ("ACODE_LLM_API_KEY_FILE", llm_key_file.to_str().unwrap()),
    ];
    let run = |args: &[&str]| {
        let mut c = t.cmd();
        for (k, v) in env {
            c.env(k, v);
        }
        c.args(args).output().unwrap()
    };
    let p = plan.to_str().unwrap();
    let out = run(&["approve", p, "--by", "tester"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = run(&["run", p, "--confirm", "auto-approve"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // The step's command and its verify command alike.
    for file in ["envdump.txt", "verifydump.txt"] {
        let dump = t.read(file);
        assert!(dump.contains("PATH="), "{dump}");
        for (k, v) in env {
            assert!(!dump.contains(k), "{k} reached the command:\n{dump}");
            assert!(
                !dump.contains(v),
                "the value of {k} reached the command:\n{dump}"
            );
        }
        assert!(!dump.contains("llm-file-key-0006"), "{dump}");
        assert!(!dump.contains("ACODE_"), "{dump}");
        assert!(!dump.contains("_TOKEN"), "{dump}");
    }
}

#[test]
fn the_runners_messages_about_secret_named_fields_are_not_redacted() {
    let t = TestDir::new();
    let plan = t.plan_text(
        "fields.json",
        r#"{"plan_id": "p", "secret": "x", "db_password": 1,
            "variables": {"api_token": [1]}, "secrets": ["nope"],
            "steps": [{"step_id": "a", "tool": "run_command", "arguments": {"argv": ["true"]}}]}"#,
    );
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 2);
    let err = stderr(&out);
    for line in [
        "plan.secret: unknown field",
        "plan.db_password: unknown field",
        "plan.variables.api_token: expected a string, number or boolean",
        "plan.secrets[0]: \"nope\" is not a declared variable",
    ] {
        assert!(err.contains(line), "{line:?} missing from:\n{err}");
    }
    assert!(!err.contains("[REDACTED]"), "{err}");
}

#[test]
fn identifiers_with_control_characters_are_refused_and_named_escaped() {
    let t = TestDir::new();
    for (plan, location) in [
        (
            json!({"plan_id": "p\u{1b}[2Jx", "steps": [{"step_id": "a", "tool": "run_command", "arguments": {"argv": ["true"]}}]}),
            "plan.plan_id",
        ),
        (
            json!({"plan_id": "p\nq", "steps": [{"step_id": "a", "tool": "run_command", "arguments": {"argv": ["true"]}}]}),
            "plan.plan_id",
        ),
        (
            json!({"plan_id": "p", "steps": [{"step_id": "a\u{0}b", "tool": "run_command", "arguments": {"argv": ["true"]}}]}),
            "steps[0].step_id",
        ),
        (
            json!({"plan_id": "p", "steps": [{"step_id": "a\u{202e}b", "tool": "run_command", "arguments": {"argv": ["true"]}}]}),
            "steps[0].step_id",
        ),
    ] {
        let path = t.plan("ids.json", &plan);
        let out = t.run(&["validate", path.to_str().unwrap()]);
        assert_eq!(code(&out), 2, "{}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains(location), "{err}");
        assert!(
            err.contains("control character \\x") || err.contains("control character \\u{202e}"),
            "{err}"
        );
        assert!(
            !err.contains('\u{1b}') && !err.contains('\u{0}') && !err.contains('\u{202e}'),
            "raw control character printed: {err:?}"
        );
        // Neither approval nor rejection is possible for such a plan.
        for cmd in ["approve", "reject"] {
            let out = t.run(&[cmd, path.to_str().unwrap()]);
            assert_eq!(code(&out), 2, "{cmd}: {}", stderr(&out));
        }
    }
    // A --var name with a control character is named escaped too.
    let path = t.plan(
        "v.json",
        &json!({"plan_id": "p", "variables": {"x": "1"}, "steps": [{"step_id": "a", "tool": "run_command", "arguments": {"argv": ["true"]}}]}),
    );
    let out = t.run(&["validate", path.to_str().unwrap(), "--var", "x\u{1b}y=1"]);
    assert_eq!(code(&out), 2);
    let err = stderr(&out);
    assert!(!err.contains('\u{1b}'), "{err:?}");
    assert!(
        err.contains("x\\x1by") || err.contains("x\\u{1b}y"),
        "{err}"
    );
}

/// In process, with the database still open: the WAL holds the run's latest writes, and neither it
/// nor the main file holds a secret. A model's own call with a secret-named `env` key counts too.
#[test]
fn the_open_database_and_its_wal_hold_no_secret() {
    use std::sync::Arc;

    use acode_run::executor::{AgentSettings, AutoApprove, Driven};
    use acode_run::llm::{LlmConfig, client};
    use acode_run::plan::{self, AuthStatus, PlanAuthorization, ValidationContext};
    use acode_run::policy::Policy;
    use acode_run::store::Store;
    use acode_run::tools::ToolRegistry;
    use acode_run::workspace::Workspace;
    use acode_run::{ApprovedPlan, Executor};

    let t = TestDir::new();
    let model_secret = "model-chosen-16C7e42F292c6912";
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_tool_calls(&[(
            "run_command",
            json!({"argv": ["echo", model_secret], "env": {"SERVICE_TOKEN": model_secret}}),
        )]),
        ScriptedResponse::chat_text("done"),
    ]);
    let path = t.plan(
        "lib.json",
        &json!({
            "plan_id": "wal",
            "variables": {"deploy_token": QUOTED, "deploy": LISTED},
            "secrets": ["deploy"],
            "steps": [
                {"step_id": "print", "tool": "run_command", "arguments": {
                    "argv": ["echo", "${deploy_token}", "${deploy}"],
                    "env": {"X_TOKEN": "${deploy_token}"}}},
                {"step_id": "agent", "tool": "agent", "arguments": {
                    "instruction": "run it", "tools": ["run_command"], "max_turns": 3}}
            ]
        }),
    );
    let ws = Workspace::new(&t.ws).unwrap();
    let registry = ToolRegistry::builtin();
    let policy = Policy::default();
    let ctx = ValidationContext {
        registry: &registry,
        workspace: &ws,
        policy: &policy,
    };
    let plan = plan::load(&path, &Default::default(), &ctx).unwrap();
    let auth = PlanAuthorization::decide(&plan, AuthStatus::Approved, "test");
    let approved = ApprovedPlan::new(plan, auth).unwrap();
    let db = t.ws.join(".acode/executions.db");
    let llm = client(LlmConfig::new(server.url(), "m"));
    let mut executor = Executor::new(Workspace::new(&t.ws).unwrap(), Store::open(&db).unwrap())
        .with_confirmation(Arc::new(AutoApprove))
        .with_llm(Arc::from(llm))
        .with_agent_settings(AgentSettings {
            model: "m".into(),
            ..Default::default()
        });
    let result = executor.execute(&approved).unwrap();
    assert_eq!(result.exit_code, 0, "{result:?}");
    // The store is still open: read the files as they are, without a checkpoint.
    let wal = std::fs::read(format!("{}-wal", db.display())).expect("the WAL exists while open");
    assert!(!wal.is_empty());
    assert_clean("the open database's WAL", &wal);
    assert_clean("the open database file", &std::fs::read(&db).unwrap());
    for needle in [model_secret] {
        for bytes in [&wal, &std::fs::read(&db).unwrap()] {
            assert!(!bytes.windows(needle.len()).any(|w| w == needle.as_bytes()));
        }
    }
    // The model's echo really ran: its output is recorded, redacted.
    let out: String = q(
        &rusqlite::Connection::open(&db).unwrap(),
        "SELECT a.content FROM artifacts a JOIN executions e USING (execution_id)
         WHERE e.step_id = 'agent' AND e.tool_name = 'run_command' AND a.artifact_type = 'stdout'",
    );
    assert_eq!(out, "[REDACTED]\n");
    drop(executor);
}

/// A run whose step id holds a token and whose `--var` holds a secret is killed mid-way and
/// resumed: the stored (redacted) ids still match the plan's, so the completed step is not run
/// again, and the same secret `--var` is accepted as the same variables.
#[test]
fn a_run_with_secrets_in_ids_and_variables_resumes() {
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    let t = TestDir::new();
    t.file(
        "slow.py",
        "import os, time\nopen('started-' + str(os.getpid()), 'w').write('1')\ntime.sleep(3)\n",
    );
    let plan = t.plan(
        "r.json",
        &json!({"plan_id": "resume-secrets", "variables": {"deploy_token": ""}, "steps": [
            {"step_id": format!("first-{GH}"), "tool": "file_write",
             "arguments": {"path": "first.txt", "contents": "${deploy_token}"}},
            {"step_id": "slow", "tool": "run_command", "arguments": {"command": "python3 slow.py"}},
            {"step_id": "last", "tool": "file_write", "arguments": {"path": "last.txt", "contents": "3"}}]}),
    );
    let var = format!("deploy_token={QUOTED}");
    let p = plan.to_str().unwrap();
    let out = t.run(&["approve", p, "--var", &var]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let mut child = t
        .cmd()
        .args([p, "--sandbox", "none", "--var", &var])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_dir(&t.ws).unwrap().any(|e| {
        e.unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("started-")
    }) {
        assert!(Instant::now() < deadline, "the slow step never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: SIGKILL to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
    std::fs::remove_file(t.ws.join("first.txt")).unwrap();

    let run_id: String = q(&t.db(), "SELECT run_id FROM runs");
    let out = t.run(&[
        "resume",
        &run_id,
        "--sandbox",
        "none",
        "--rerun-interrupted",
        "--var",
        &var,
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_clean("resume stderr", &out.stderr);
    // The completed first step was recognised by its stored id and not run again.
    assert!(!t.ws.join("first.txt").exists());
    assert!(t.ws.join("last.txt").exists());
    assert_eq!(
        q::<i64>(
            &t.db(),
            "SELECT count(*) FROM executions WHERE step_id = 'first-[REDACTED]'"
        ),
        1
    );
    assert_db_clean(&t);
}
