//! Agent steps through the real binary, against a scripted LLM server on 127.0.0.1 driven by the real
//! HTTP client (SPEC §7).

use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};
use serde_json::json;

use crate::harness::*;

const LIB: &str = "pub fn add(a: i32, b: i32) -> i32 { a - b }\n";

fn fixture(name: &str) -> Vec<ScriptedResponse> {
    let path = repo().join("fixtures/llm").join(name);
    ScriptedResponse::from_fixture(&path).unwrap()
}

fn agent_plan(t: &TestDir, tools: &[&str], max_turns: u64) -> std::path::PathBuf {
    t.plan(
        "agent.json",
        &json!({"plan_id": "agent", "steps": [
        {"step_id": "fix", "tool": "agent", "arguments": {
            "instruction": "Make add() add.", "tools": tools, "max_turns": max_turns}}]}),
    )
}

#[test]
fn read_then_edit_completes_and_changes_the_file() {
    let t = TestDir::new();
    t.file("src/lib.rs", LIB);
    let server = ScriptedServer::start(fixture("read_then_edit.json"));
    let plan = agent_plan(&t, &["file_read", "file_edit"], 10);
    let out = t.approve_and_run_with_model(&plan, &server, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(t.read("src/lib.rs").contains("a + b"));

    // What the server received: the model, only the step's tools, and the tool results by call id.
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let first = &requests[0].body;
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(first["model"], "test-model");
    assert_eq!(first["tool_choice"], "auto");
    let offered: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(offered, ["file_read", "file_edit"]);
    assert!(
        first["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("NO tool call")
    );
    let second = &requests[1].body["messages"];
    let tool_msg = second
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap();
    assert_eq!(tool_msg["tool_call_id"], "call_read_1");
    assert!(tool_msg["content"].as_str().unwrap().contains("a - b"));

    // Recorded: three llm turns with prompt/response artifacts and tokens, two tool calls linked.
    let db = t.db();
    assert_eq!(
        q::<i64>(
            &db,
            "SELECT count(*) FROM executions WHERE tool_name='llm' AND success=1"
        ),
        3
    );
    assert_eq!(
        q::<i64>(
            &db,
            "SELECT count(*) FROM artifacts a JOIN executions e USING (execution_id) WHERE e.tool_name='llm' AND a.artifact_type IN ('prompt','response')"
        ),
        6
    );
    assert_eq!(
        q::<i64>(
            &db,
            "SELECT count(*) FROM executions WHERE tool_name IN ('file_read','file_edit') AND parent_execution_id IN (SELECT execution_id FROM executions WHERE tool_name='llm')"
        ),
        2
    );
    let prompt_tokens: i64 = q(&db, "SELECT prompt_tokens FROM steps WHERE step_id='fix'");
    assert!(prompt_tokens >= 412 + 530, "{prompt_tokens}");
    assert_eq!(
        q::<i64>(&db, "SELECT prompt_tokens FROM runs"),
        prompt_tokens
    );
    let events = events(&out);
    assert_eq!(events.iter().filter(|e| e["type"] == "llm_turn").count(), 3);
}

#[test]
fn arguments_as_object_and_missing_ids_are_accepted() {
    for name in ["arguments_as_object.json", "missing_ids.json"] {
        let t = TestDir::new();
        t.file("Cargo.toml", "[package]\nname = \"x\"\n");
        t.file("a.rs", "// a\n");
        t.file("b.rs", "// b\n");
        let mut script = fixture(name);
        script.push(ScriptedResponse::chat_text("done"));
        let server = ScriptedServer::start(script);
        let plan = agent_plan(&t, &["file_read"], 5);
        let out = t.approve_and_run_with_model(&plan, &server, &[]);
        assert_eq!(code(&out), 0, "{name}: {}", stderr(&out));
        let db = t.db();
        let ok: i64 = q(
            &db,
            "SELECT count(*) FROM executions WHERE tool_name='file_read' AND success=1",
        );
        assert!(ok >= 1, "{name}");
        // Every tool result went back with an id matching one the assistant message carried.
        let second = &server.requests()[1].body["messages"];
        let msgs = second.as_array().unwrap();
        let call_ids: Vec<&str> = msgs
            .iter()
            .filter(|m| m["role"] == "assistant")
            .flat_map(|m| {
                m["tool_calls"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c["id"].as_str().unwrap())
            })
            .collect();
        let result_ids: Vec<&str> = msgs
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["tool_call_id"].as_str().unwrap())
            .collect();
        assert_eq!(call_ids, result_ids, "{name}");
        assert!(call_ids.iter().all(|id| !id.is_empty()), "{name}");
    }
}

#[test]
fn turn_limit_exits_31_with_the_transcript_recorded() {
    let t = TestDir::new();
    t.file("src/lib.rs", LIB);
    // Different arguments each turn, so this is not a repeat (stuck detection) but a slow agent.
    let script: Vec<_> = (0..3)
        .map(|i| {
            ScriptedResponse::chat_tool_calls(&[(
                "file_read",
                json!({"path": "src/lib.rs", "offset": i + 1}),
            )])
        })
        .collect();
    let server = ScriptedServer::start(script);
    let plan = agent_plan(&t, &["file_read"], 3);
    let out = t.approve_and_run_with_model(&plan, &server, &[]);
    assert_eq!(code(&out), 31, "{}", stderr(&out));
    let db = t.db();
    assert_eq!(
        q::<String>(&db, "SELECT error_code FROM steps"),
        "turn_limit"
    );
    assert_eq!(
        q::<i64>(&db, "SELECT count(*) FROM executions WHERE tool_name='llm'"),
        3
    );
    assert_eq!(
        q::<i64>(
            &db,
            "SELECT count(*) FROM executions WHERE tool_name='file_read'"
        ),
        3
    );
}

#[test]
fn forbidden_tools_and_escaping_paths_go_back_to_the_model() {
    let t = TestDir::new();
    t.file("src/lib.rs", LIB);
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_tool_calls(&[("file_delete", json!({"path": "src/lib.rs"}))]),
        ScriptedResponse::chat_tool_calls(&[(
            "file_write",
            json!({"path": "../outside/pwned.txt", "contents": "x"}),
        )]),
        ScriptedResponse::chat_tool_calls(&[(
            "file_write",
            json!({"path": "src/lib.rs", "contents": 5}),
        )]),
        ScriptedResponse::chat_text("I could not do it."),
    ]);
    let plan = agent_plan(&t, &["file_read", "file_write"], 10);
    let out = t.approve_and_run_with_model(&plan, &server, &["--confirm", "auto-approve"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(t.read("src/lib.rs"), LIB, "nothing was executed");
    t.assert_outside_untouched();
    let requests = server.requests();
    let last_tool = |i: usize| -> String {
        requests[i].body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .find(|m| m["role"] == "tool")
            .unwrap()["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(
        last_tool(1).contains("not available in this step"),
        "{}",
        last_tool(1)
    );
    assert!(
        last_tool(2).contains("sandbox violation"),
        "{}",
        last_tool(2)
    );
    assert!(last_tool(3).contains("expected string"), "{}", last_tool(3));
    let db = t.db();
    assert_eq!(
        q::<String>(
            &db,
            "SELECT error_code FROM executions WHERE tool_name='file_delete'"
        ),
        "invalid_arguments"
    );
    assert_eq!(
        q::<String>(
            &db,
            "SELECT error_code FROM executions WHERE tool_name='file_write' AND arguments_json LIKE '%outside%'"
        ),
        "sandbox_violation"
    );
}

#[test]
fn invalid_json_arguments_are_reported_and_corrected() {
    let t = TestDir::new();
    t.file("src/lib.rs", LIB);
    let mut script = fixture("invalid_arguments.json");
    script.push(ScriptedResponse::chat_text("read it"));
    let server = ScriptedServer::start(script);
    let plan = agent_plan(&t, &["file_read"], 5);
    let out = t.approve_and_run_with_model(&plan, &server, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let db = t.db();
    assert_eq!(
        q::<i64>(
            &db,
            "SELECT count(*) FROM executions WHERE tool_name='file_read' AND success=0"
        ),
        1
    );
    assert_eq!(
        q::<i64>(
            &db,
            "SELECT count(*) FROM executions WHERE tool_name='file_read' AND success=1"
        ),
        1
    );
}

#[test]
fn rate_limit_with_retry_after_then_success() {
    let t = TestDir::new();
    let server = ScriptedServer::start(vec![
        ScriptedResponse::json(429, json!({"error": {"message": "slow down"}}))
            .with_header("Retry-After", "1"),
        ScriptedResponse::chat_text("done"),
    ]);
    let plan = agent_plan(&t, &["file_read"], 3);
    let started = std::time::Instant::now();
    let out = t.approve_and_run_with_model(&plan, &server, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(900),
        "Retry-After honoured"
    );
    let db = t.db();
    assert_eq!(
        q::<i64>(&db, "SELECT count(*) FROM executions WHERE tool_name='llm'"),
        2
    );
    assert_eq!(
        q::<i64>(
            &db,
            "SELECT max(attempt) FROM executions WHERE tool_name='llm'"
        ),
        2
    );
    let events = events(&out);
    let retry = events
        .iter()
        .find(|e| e["type"] == "retry_scheduled")
        .unwrap();
    assert_eq!(retry["delay_ms"], 1000);
}

#[test]
fn unauthorized_is_not_retried_and_says_what_to_check() {
    let t = TestDir::new();
    let server = ScriptedServer::start(vec![
        ScriptedResponse::json(401, json!({"error": {"message": "bad key"}})),
        ScriptedResponse::chat_text("never reached"),
    ]);
    let plan = agent_plan(&t, &["file_read"], 3);
    let out = t.approve_and_run(&plan, &["--llm-url", &server.url(), "--model", "m"]);
    assert_eq!(code(&out), 30);
    assert!(
        stderr(&out).contains("ACODE_LLM_API_KEY"),
        "{}",
        stderr(&out)
    );
    assert_eq!(server.requests().len(), 1);
    assert_eq!(
        q::<String>(&t.db(), "SELECT error_code FROM steps"),
        "llm_error"
    );
}

#[test]
fn model_not_found_names_the_model() {
    let t = TestDir::new();
    let server = ScriptedServer::start(vec![ScriptedResponse::json(
        404,
        json!({"error": {"message": "model \"nope\" not found"}}),
    )]);
    let plan = agent_plan(&t, &["file_read"], 3);
    let out = t.approve_and_run(&plan, &["--llm-url", &server.url(), "--model", "nope"]);
    assert_eq!(code(&out), 30);
    assert!(stderr(&out).contains("nope"), "{}", stderr(&out));
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn length_warning_is_recorded() {
    let t = TestDir::new();
    let server = ScriptedServer::start(fixture("length_warning.json"));
    let plan = agent_plan(&t, &["file_read"], 3);
    let out = t.approve_and_run_with_model(&plan, &server, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let warning: String = q(
        &t.db(),
        "SELECT content FROM artifacts WHERE artifact_type='warnings'",
    );
    assert!(warning.contains("length"), "{warning}");
    let events = events(&out);
    let turn = events.iter().find(|e| e["type"] == "llm_turn").unwrap();
    assert!(!turn["warnings"].as_array().unwrap().is_empty());
}

#[test]
fn react_protocol_round_trip() {
    let t = TestDir::new();
    t.file("src/lib.rs", LIB);
    let server = ScriptedServer::start(fixture("react_round_trip.json"));
    let plan = agent_plan(&t, &["file_read"], 5);
    let out = t.approve_and_run_with_model(&plan, &server, &["--tool-protocol", "react"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let requests = server.requests();
    assert!(
        requests[0].body.get("tools").is_none(),
        "react sends no native tools"
    );
    let system = requests[0].body["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("final_answer"), "{system}");
    let observation = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(observation.contains("a - b"), "{observation}");
    assert_eq!(
        q::<i64>(
            &t.db(),
            "SELECT count(*) FROM executions WHERE tool_name='file_read' AND success=1"
        ),
        1
    );
}

#[test]
fn token_budget_is_enforced() {
    let t = TestDir::new();
    t.file("src/lib.rs", LIB);
    let server = ScriptedServer::start(fixture("read_then_edit.json"));
    let plan = agent_plan(&t, &["file_read", "file_edit"], 10);
    let out = t.approve_and_run_with_model(&plan, &server, &["--token-budget", "500"]);
    assert_exit_with(&out, 38, "tokens budget");
    assert_eq!(
        q::<String>(&t.db(), "SELECT error_code FROM steps"),
        "budget_exhausted"
    );
}

#[test]
fn agent_step_without_a_model_is_a_usage_error() {
    let t = TestDir::new();
    let plan = agent_plan(&t, &["file_read"], 3);
    t.approve(&plan);
    let out = t.run(&[plan.to_str().unwrap()]);
    assert_exit_with(&out, 2, "--model");
}

#[test]
fn agent_cannot_list_unknown_tools_or_itself() {
    let t = TestDir::new();
    let plan = agent_plan(&t, &["file_read", "agent", "rm_rf"], 3);
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("tools[1]: an agent cannot call another agent"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("tools[2]: unknown tool \"rm_rf\""),
        "{}",
        stderr(&out)
    );
}

#[test]
fn verify_failing_once_then_passing_reruns_the_agent_with_feedback() {
    let t = TestDir::new();
    t.file("src/lib.rs", LIB);
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_text("All done."),
        ScriptedResponse::chat_tool_calls(&[(
            "file_edit",
            json!({"path": "src/lib.rs", "old": "a - b", "new": "a + b"}),
        )]),
        ScriptedResponse::chat_text("Fixed for real."),
    ]);
    let plan = t.plan(
        "v.json",
        &json!({"plan_id": "verify", "steps": [
        {"step_id": "fix", "tool": "agent",
         "arguments": {"instruction": "Make add() add.", "tools": ["file_edit"]},
         "verify": {"command": "grep -q \"a + b\" src/lib.rs", "max_cycles": 2}}]}),
    );
    let out = t.approve_and_run_with_model(&plan, &server, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let retry_prompt = requests[1].body["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        retry_prompt.contains("did not pass verification"),
        "{retry_prompt}"
    );
    let db = t.db();
    assert_eq!(
        q::<String>(
            &db,
            "SELECT group_concat(success) FROM (SELECT success FROM executions WHERE tool_name='run_command' ORDER BY started_at, rowid)"
        ),
        "0,1"
    );
}

#[test]
fn verify_still_failing_after_the_last_cycle_fails_the_step() {
    let t = TestDir::new();
    t.file("src/lib.rs", LIB);
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_text("done"),
        ScriptedResponse::chat_text("done again"),
    ]);
    let plan = t.plan(
        "v.json",
        &json!({"plan_id": "verify", "steps": [
        {"step_id": "fix", "tool": "agent",
         "arguments": {"instruction": "Make add() add.", "tools": ["file_edit"]},
         "verify": {"command": "grep -q \"a + b\" src/lib.rs", "max_cycles": 2}}]}),
    );
    let out = t.approve_and_run_with_model(&plan, &server, &[]);
    assert_eq!(code(&out), 30, "{}", stderr(&out));
    assert_eq!(
        q::<String>(&t.db(), "SELECT error_code FROM steps"),
        "verification_failed"
    );
}

/// Copies fixtures/agent-demo into the test workspace.
fn agent_demo_workspace(t: &TestDir) {
    let src = repo().join("fixtures/agent-demo");
    t.file(
        "Cargo.toml",
        &std::fs::read_to_string(src.join("Cargo.toml")).unwrap(),
    );
    t.file(
        "src/lib.rs",
        &std::fs::read_to_string(src.join("src/lib.rs")).unwrap(),
    );
}

#[test]
fn the_shipped_agent_demo_plan_runs_against_the_scripted_model() {
    let t = TestDir::new();
    agent_demo_workspace(&t);
    let server = ScriptedServer::start(fixture("read_then_edit.json"));
    let plan = repo().join("plans/agent-demo.json");
    // The committed approval must still match the committed plan.
    let out = t.run(&[
        "run",
        plan.to_str().unwrap(),
        "--llm-url",
        &server.url(),
        "--model",
        "test-model",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(t.read("src/lib.rs").contains("a + b"));
}

/// Opt-in: the same plan against a real model server, when `ACODE_E2E_LLM_URL` is set (and
/// `ACODE_E2E_MODEL` or `ACODE_MODEL` names the model).
#[test]
#[ignore = "needs a real model server: ACODE_E2E_LLM_URL and ACODE_E2E_MODEL, then --ignored"]
fn e2e_agent_demo_against_a_real_model_server() {
    let Some(url) = real_model_url() else {
        return;
    };
    let model = std::env::var("ACODE_E2E_MODEL")
        .or_else(|_| std::env::var("ACODE_MODEL"))
        .expect("ACODE_E2E_MODEL or ACODE_MODEL must name the model");
    let t = TestDir::new();
    agent_demo_workspace(&t);
    let plan = repo().join("plans/agent-demo.json");
    let out = t.run(&[
        "run",
        plan.to_str().unwrap(),
        "--llm-url",
        &url,
        "--model",
        &model,
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        t.read("src/lib.rs").contains("a + b"),
        "{}",
        t.read("src/lib.rs")
    );
}

#[test]
fn tool_results_sent_to_the_model_are_cut_to_the_budget() {
    let t = TestDir::new();
    t.file("big.txt", &"x".repeat(5000));
    t.file(
        "acode-policy.json",
        r#"{"limits": {"tool_result_chars": 200}}"#,
    );
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_tool_calls(&[("file_read", json!({"path": "big.txt"}))]),
        ScriptedResponse::chat_text("read"),
    ]);
    let plan = agent_plan(&t, &["file_read"], 3);
    let out = t.approve_and_run_with_model(&plan, &server, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let requests = server.requests();
    let tool_msg = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(tool_msg.len() < 400, "{} chars", tool_msg.len());
    assert!(tool_msg.contains("[truncated"), "{tool_msg}");
    // The database keeps the whole file as the artifact.
    assert_eq!(
        q::<i64>(
            &t.db(),
            "SELECT bytes FROM artifacts WHERE artifact_type='stdout'"
        ),
        5000
    );
}

#[test]
fn llm_retries_can_be_turned_off() {
    let t = TestDir::new();
    let server = ScriptedServer::start(vec![
        ScriptedResponse::json(503, json!({"error": "busy"})),
        ScriptedResponse::chat_text("never reached"),
    ]);
    let plan = agent_plan(&t, &["file_read"], 3);
    let out = t.approve_and_run_with_model(&plan, &server, &["--llm-retries", "0"]);
    assert_eq!(code(&out), 30, "{}", stderr(&out));
    assert_eq!(server.requests().len(), 1);
    assert_eq!(
        q::<String>(&t.db(), "SELECT error_code FROM steps"),
        "llm_error"
    );
}

#[test]
fn sigint_during_a_slow_model_answer_stops_promptly() {
    let t = TestDir::new();
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_text("too late").with_delay(std::time::Duration::from_secs(30)),
    ]);
    let plan = agent_plan(&t, &["file_read"], 3);
    t.approve(&plan);
    let url = server.url();
    let mut child = t
        .cmd()
        .args([plan.to_str().unwrap(), "--llm-url", &url, "--model", "m"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while server.requests().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the model was never asked"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let asked = std::time::Instant::now();
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(
        asked.elapsed().as_secs() < 5,
        "waited {:?}",
        asked.elapsed()
    );
    assert_eq!(
        q::<String>(&t.db(), "SELECT status FROM runs"),
        "interrupted"
    );
    assert_eq!(
        q::<String>(
            &t.db(),
            "SELECT error_code FROM executions WHERE tool_name='llm'"
        ),
        "interrupted"
    );
}

#[test]
fn the_anthropic_messages_provider_drives_the_same_loop() {
    let t = TestDir::new();
    t.file("src/lib.rs", LIB);
    let server = ScriptedServer::start(fixture("anthropic_read_then_edit.json"));
    let plan = agent_plan(&t, &["file_read", "file_edit"], 10);
    let out = t.approve_and_run_with_model(&plan, &server, &["--llm-provider", "anthropic"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(t.read("src/lib.rs").contains("a + b"));
    let requests = server.requests();
    assert_eq!(requests[0].path, "/v1/messages");
    assert!(
        requests[0].body["system"]
            .as_str()
            .unwrap()
            .contains("NO tool call")
    );
    // The tool result goes back as a tool_result block answering the tool_use id.
    let second = requests[1].body["messages"].as_array().unwrap();
    let result = second.iter().rev().find(|m| m["role"] == "user").unwrap();
    assert_eq!(result["content"][0]["type"], "tool_result");
    assert_eq!(result["content"][0]["tool_use_id"], "toolu_01R3ad");
    assert!(q::<i64>(&t.db(), "SELECT prompt_tokens FROM runs") > 0);
}

/// `show` says an agent step's model turns, the calls the model asked for and its verify runs
/// apart (issue 43 §3: a step that ran once read "attempts 6"), and the run's progress names each
/// verify command as it starts.
#[test]
fn show_tells_turns_tool_calls_and_verify_runs_apart_and_verify_gets_a_progress_line() {
    let t = TestDir::new();
    t.file("src/lib.rs", LIB);
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_text("All done."),
        ScriptedResponse::chat_tool_calls(&[(
            "file_edit",
            json!({"path": "src/lib.rs", "old": "a - b", "new": "a + b"}),
        )]),
        ScriptedResponse::chat_text("Fixed for real."),
    ]);
    let plan = t.plan(
        "v.json",
        &json!({"plan_id": "verify", "steps": [
        {"step_id": "fix", "tool": "agent",
         "arguments": {"instruction": "Make add() add.", "tools": ["file_edit"]},
         "verify": {"command": "grep -q \"a + b\" src/lib.rs", "max_cycles": 2}},
        {"step_id": "again", "tool": "file_write", "arguments": {"path": "b.txt", "contents": "b"},
         "verify": {"commands": ["grep -q b b.txt", "grep -c b b.txt"]}}]}),
    );
    t.approve(&plan);
    let url = server.url();
    let out = t.run(&[
        plan.to_str().unwrap(),
        "--llm-url",
        &url,
        "--model",
        "test-model",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    // Verify ran twice for `fix` (failed, then passed) and once per command for `again`.
    assert_eq!(
        err.matches("… verify: grep -q \"a + b\" src/lib.rs")
            .count(),
        2,
        "{err}"
    );
    assert!(err.contains("… verify: grep -c b b.txt"), "{err}");
    assert!(err.contains("… verify: grep -q b b.txt"), "{err}");

    let run_id: String = q(&t.db(), "SELECT run_id FROM runs");
    let show = t.run(&["show", &run_id]);
    assert_eq!(code(&show), 0, "{}", stderr(&show));
    let text = stdout(&show);
    let line = |step: &str| {
        text.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(step))
            .unwrap_or_else(|| panic!("no line for {step}: {text}"))
            .to_string()
    };
    assert!(
        line("fix").ends_with("completed  turns 3, tool calls 1, verify 2"),
        "{text}"
    );
    assert!(line("again").ends_with("attempts 1, verify 2"), "{text}");
    // The step's own column still counts every execution (the events' `attempts`).
    assert_eq!(
        q::<i64>(&t.db(), "SELECT attempts FROM steps WHERE step_id = 'fix'"),
        6
    );
}
