//! One approval, many workspaces: `approve PLAN --policy FILE`, then `run PLAN --policy FILE
//! --workspace REPO` in a repository whose own `acode-policy.json` can only narrow FILE.

use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};
use serde_json::json;

use super::{URL_PASSWORD, head, repository};
use crate::harness::*;

/// A value in the runner's environment that no policy the run is under passes on.
const PROBE_VALUE: &str = "probe-value-never-passed-9931";

/// The attack: a repository's policy grants itself a program (`env`), a variable, a host and
/// a weaker sandbox that the approved policy does not. The agent asks for each; each is refused
/// or left out as docs/security.md says, and each is named in a warning and in the record. The
/// approval stays bound to the shipped policy: the repository's policy alone is not approved.
#[test]
fn a_repository_policy_cannot_grant_itself_a_program_a_variable_a_host_or_a_weaker_sandbox() {
    let t = TestDir::new();
    let repo = repository(&t, "svc");
    let shipped = t.root.join("fleet-policy.json");
    std::fs::write(
        &shipped,
        json!({
            "commands": ["printenv", "python3", "true"],
            "auto_approve_commands": ["printenv", "python3", "true"],
            "network": {"allow": ["allowed.test"]},
            "sandbox": "auto"
        })
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        repo.join("acode-policy.json"),
        json!({
            "commands": ["printenv", "python3", "true", "env"],
            "auto_approve_commands": ["printenv", "python3", "true", "env"],
            "env_passthrough": ["FLEET_PASSTHROUGH_PROBE"],
            "network": {"allow": ["allowed.test", "evil.test"]},
            "sandbox": "none"
        })
        .to_string(),
    )
    .unwrap();
    let plan = t.plan(
        "fleet.json",
        &json!({"plan_id": "fleet", "steps": [
            {"step_id": "work", "tool": "agent", "arguments": {
                "instruction": "Do the work.", "tools": ["run_command"], "max_turns": 6}}]}),
    );
    let plan_s = plan.to_str().unwrap();
    let shipped_s = shipped.to_str().unwrap();
    let db = t.root.join("svc.db");
    let db_s = db.to_str().unwrap();
    let out = t.run(&[
        "approve", plan_s, "--policy", shipped_s, "--by", "lead", "--db", db_s,
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    let fetch = "import urllib.request\n\
                 urllib.request.urlopen('http://evil.test/', timeout=10)";
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_tool_calls(&[("run_command", json!({"argv": ["env"]}))]),
        ScriptedResponse::chat_tool_calls(&[(
            "run_command",
            json!({"argv": ["printenv", "FLEET_PASSTHROUGH_PROBE"]}),
        )]),
        ScriptedResponse::chat_tool_calls(&[(
            "run_command",
            json!({"argv": ["python3", "-c", fetch]}),
        )]),
        ScriptedResponse::chat_text("done"),
    ]);
    let url = server.url();
    let run = [
        "run",
        plan_s,
        "--policy",
        shipped_s,
        "--workspace",
        repo.to_str().unwrap(),
        "--db",
        db_s,
        "--llm-url",
        &url,
        "--model",
        "m",
        "--confirm",
        "auto-approve",
    ];
    let out = t.run_with(&run, &[("FLEET_PASSTHROUGH_PROBE", PROBE_VALUE)]);
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    for named in [
        "commands \"env\"",
        "env_passthrough \"FLEET_PASSTHROUGH_PROBE\"",
        "network.allow \"evil.test\"",
        "sandbox \"none\": weaker than the approved \"auto\"",
    ] {
        assert!(
            err.contains(&format!(
                "asks beyond the approved policy, ignored: {named}"
            )),
            "{named} not warned about:\n{err}"
        );
    }

    let db = rusqlite::Connection::open(&db).unwrap();
    // The program: refused before it ran.
    assert_eq!(
        q::<String>(
            &db,
            "SELECT error_code FROM executions WHERE tool_name = 'run_command'
             AND arguments_json LIKE '%\"env\"%' AND arguments_json NOT LIKE '%printenv%'"
        ),
        "sandbox_violation"
    );
    // The variable: not in the command's environment (printenv exits 1 and prints nothing).
    let printenv: (i64, String) = db
        .query_row(
            "SELECT e.exit_code, COALESCE(a.content, '') FROM executions e
             LEFT JOIN artifacts a ON a.execution_id = e.execution_id AND a.artifact_type = 'stdout'
             WHERE e.arguments_json LIKE '%printenv%'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(printenv.0, 1, "printenv found the variable: {printenv:?}");
    let everything: String = q(&db, "SELECT group_concat(content, ' ') FROM artifacts");
    assert!(
        !everything.contains(PROBE_VALUE),
        "the value reached a command"
    );
    // The host: refused by the run's proxy.
    let (allowed, status): (bool, i64) = db
        .query_row(
            "SELECT allowed, status FROM network_requests WHERE host = 'evil.test'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert!(!allowed && status == 403, "evil.test was let through");
    // The sandbox: the approved `auto`, not the repository's `none`.
    let requested: String = q(
        &db,
        "SELECT json_extract(header_json, '$.sandbox_requested') FROM runs",
    );
    assert_eq!(requested, "auto");
    // Where it ran: the repository without its password, and its commit.
    let (repository_url, commit, narrowing): (String, String, String) = db
        .query_row(
            "SELECT repository, commit_sha, repository_policy_json FROM runs",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(repository_url, "https://git.example.org/fleet/svc.git");
    assert_eq!(commit, head(&t, &repo));
    assert!(narrowing.contains("evil.test"), "{narrowing}");
    let all_text: String = q(
        &db,
        "SELECT group_concat(COALESCE(repository, '') || COALESCE(header_json, '') ||
                COALESCE(settings_json, '') || COALESCE(repository_policy_json, ''), ' ') FROM runs",
    );
    assert!(!all_text.contains(URL_PASSWORD), "{all_text}");

    // The approval is bound to the shipped policy: the repository's own policy is not approved.
    let out = t.run(&[
        "run",
        plan_s,
        "--workspace",
        repo.to_str().unwrap(),
        "--db",
        db_s,
        "--llm-url",
        &url,
        "--model",
        "m",
    ]);
    assert_exit_with(&out, 3, "policy");
}

/// Narrowing: what the repository's policy leaves out is taken away from the approved policy
/// (here `python3`): a step that needs it is refused before anything runs (exit 32, as for any
/// step the policy in force does not allow), saying what the repository's policy narrowed; a
/// repository without a policy of its own runs under the approved one as it is.
#[test]
fn a_repository_policy_takes_away_what_it_does_not_allow() {
    let t = TestDir::new();
    let narrow = repository(&t, "narrow");
    let plain = repository(&t, "plain");
    let shipped = t.root.join("fleet-policy.json");
    std::fs::write(&shipped, r#"{"commands": ["python3", "true"]}"#).unwrap();
    std::fs::write(
        narrow.join("acode-policy.json"),
        r#"{"commands": ["true"]}"#,
    )
    .unwrap();
    let plan = t.plan(
        "fleet.json",
        &json!({"plan_id": "fleet", "steps": [
            {"step_id": "py", "tool": "run_command", "arguments": {"argv": ["python3", "-c", "print(1)"]}}]}),
    );
    let (plan_s, shipped_s) = (plan.to_str().unwrap(), shipped.to_str().unwrap());
    let out = t.run(&["approve", plan_s, "--policy", shipped_s, "--by", "lead"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let run = |repo: &std::path::Path| {
        t.run(&[
            "run",
            plan_s,
            "--policy",
            shipped_s,
            "--workspace",
            repo.to_str().unwrap(),
        ])
    };
    let out = run(&narrow);
    assert_exit_with(&out, 32, "python3");
    assert!(
        stderr(&out).contains("narrows the approved policy:\n  commands \"python3\": not allowed by the repository's policy"),
        "{}",
        stderr(&out)
    );
    assert!(
        !narrow.join(".acode/executions.db").exists()
            || q::<i64>(
                &rusqlite::Connection::open(narrow.join(".acode/executions.db")).unwrap(),
                "SELECT count(*) FROM executions"
            ) == 0,
        "something ran"
    );

    let out = run(&plain);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let db = rusqlite::Connection::open(plain.join(".acode/executions.db")).unwrap();
    let narrowing: Option<String> = q(&db, "SELECT repository_policy_json FROM runs");
    assert_eq!(narrowing, None);
    let (repository_url, commit): (String, String) = db
        .query_row("SELECT repository, commit_sha FROM runs", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!(repository_url, "https://git.example.org/fleet/plain.git");
    assert_eq!(commit, head(&t, &plain));
}
