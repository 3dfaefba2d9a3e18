//! End-to-end tests over the shipped `fixtures/llm/` transcripts: the real client, real sockets,
//! the scripted server, and a miniature agent loop that uses the retry policy the way the executor
//! will.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use super::react::{self, ReactStep};
use super::scripted::ScriptedServer;
use super::*;
use crate::executor::retry::Backoff;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/llm")
        .join(name)
}

fn tools() -> Vec<ToolSpec> {
    ["file_read", "file_edit"]
        .into_iter()
        .map(|name| ToolSpec {
            name: name.into(),
            description: format!("{name} tool"),
            parameters: json!({"type": "object"}),
        })
        .collect()
}

fn client_for(server: &ScriptedServer, provider: Provider) -> Box<dyn LlmClient> {
    let mut config = LlmConfig::new(server.url(), "qwen2.5-coder:7b");
    config.provider = provider;
    client(config)
}

/// What the executor will do around each call: retry transient errors per the backoff, counting
/// attempts (each of which it records).
fn chat_with_retries(
    client: &dyn LlmClient,
    request: &ChatRequest,
    backoff: &Backoff,
    attempts: &mut Vec<Result<String, String>>,
) -> Result<ChatResponse, LlmError> {
    let mut attempt = 1;
    loop {
        match client.chat(request) {
            Ok(resp) => {
                attempts.push(Ok(resp.response_body.clone()));
                return Ok(resp);
            }
            Err(err) => {
                attempts.push(Err(err.to_string()));
                let delay = err
                    .is_retryable()
                    .then(|| backoff.delay(attempt, err.retry_after()))
                    .flatten();
                match delay {
                    Some(d) => std::thread::sleep(d),
                    None => return Err(err),
                }
                attempt += 1;
            }
        }
    }
}

#[test]
fn read_then_edit_conversation() {
    let server = ScriptedServer::from_fixture(fixture("read_then_edit.json")).unwrap();
    let client = client_for(&server, Provider::OpenAi);
    let (final_answer, executed, usage) =
        crate::llm::test_support::fix_bug_conversation(client.as_ref());
    assert_eq!(final_answer, "Fixed add() to return a + b.");
    assert_eq!(
        executed[0],
        ("file_read".into(), json!({"path": "src/lib.rs"}))
    );
    assert_eq!(executed[1].0, "file_edit");
    assert_eq!(
        executed[1].1["new"],
        "pub fn add(a: i32, b: i32) -> i32 { a + b }"
    );
    assert_eq!(usage.prompt_tokens, 412 + 530 + 610);
    assert_eq!(usage.completion_tokens, 21 + 64 + 12);
    assert_eq!(server.remaining(), 0);

    // The third request carries the whole history, tool results matched by the server's ids.
    let third = &server.requests()[2].body["messages"];
    assert_eq!(third[2]["tool_calls"][0]["id"], "call_read_1");
    assert_eq!(
        third[3],
        json!({"role": "tool", "tool_call_id": "call_read_1", "content": "file_read ok"})
    );
    assert_eq!(third[5]["tool_call_id"], "call_edit_1");
}

#[test]
fn arguments_as_object_with_stop() {
    let server = ScriptedServer::from_fixture(fixture("arguments_as_object.json")).unwrap();
    let resp = client_for(&server, Provider::OpenAi)
        .chat(&ChatRequest::new("", vec![Message::user("x")]).with_tools(tools()))
        .unwrap();
    assert_eq!(resp.finish_reason.as_deref(), Some("stop"));
    assert_eq!(resp.tool_calls[0].id, "call_abc");
    assert_eq!(
        resp.tool_calls[0].arguments,
        json!({"path": "Cargo.toml", "limit": 20})
    );
}

#[test]
fn missing_ids_fixture() {
    let server = ScriptedServer::from_fixture(fixture("missing_ids.json")).unwrap();
    let resp = client_for(&server, Provider::OpenAi)
        .chat(&ChatRequest::new("", vec![Message::user("x")]).with_tools(tools()))
        .unwrap();
    let got: Vec<_> = resp
        .tool_calls
        .iter()
        .map(|c| {
            (
                c.id.as_str(),
                c.arguments["path"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(got, [("call_1", "a.rs"), ("call_2", "b.rs")]);
    assert_eq!(resp.usage, Usage::default());
}

#[test]
fn invalid_arguments_are_reported_back_and_corrected() {
    let server = ScriptedServer::from_fixture(fixture("invalid_arguments.json")).unwrap();
    let client = client_for(&server, Provider::OpenAi);
    let mut messages = vec![Message::user("read src/lib.rs")];
    let first = client
        .chat(&ChatRequest::new("", messages.clone()).with_tools(tools()))
        .unwrap();
    let bad = &first.tool_calls[0];
    assert!(!bad.is_valid());
    let feedback = bad.parse_error_feedback().unwrap();
    messages.push(Message::assistant(&first));
    messages.push(Message::tool(&bad.id, feedback));
    let second = client
        .chat(&ChatRequest::new("", messages).with_tools(tools()))
        .unwrap();
    assert!(second.tool_calls[0].is_valid());
    assert_eq!(
        second.tool_calls[0].arguments,
        json!({"path": "src/lib.rs"})
    );
    // The bad call was replayed with `{}` (valid JSON) and the error went back as its result.
    let sent = &server.requests()[1].body["messages"];
    assert_eq!(sent[1]["tool_calls"][0]["function"]["arguments"], "{}");
    assert!(
        sent[2]["content"]
            .as_str()
            .unwrap()
            .contains("not valid JSON")
    );
}

#[test]
fn length_warning_fixture() {
    let server = ScriptedServer::from_fixture(fixture("length_warning.json")).unwrap();
    let resp = client_for(&server, Provider::OpenAi)
        .chat(&ChatRequest::new("", vec![Message::user("x")]))
        .unwrap();
    assert_eq!(resp.finish_reason.as_deref(), Some("length"));
    assert_eq!(resp.warnings.len(), 1);
    assert!(resp.warnings[0].contains("truncated"));
}

#[test]
fn transient_failures_are_retried_with_backoff() {
    let server = ScriptedServer::from_fixture(fixture("rate_limited_then_ok.json")).unwrap();
    let client = client_for(&server, Provider::OpenAi);
    let mut attempts = Vec::new();
    // Scaled to milliseconds: the 429's `Retry-After: 1` becomes at most 60 ms.
    let backoff = Backoff::scaled(3, Duration::from_millis(1));
    let resp = chat_with_retries(
        client.as_ref(),
        &ChatRequest::new("", vec![Message::user("x")]),
        &backoff,
        &mut attempts,
    )
    .unwrap();
    assert_eq!(resp.content.as_deref(), Some("ok"));
    assert_eq!(attempts.len(), 4);
    assert!(attempts[0].as_ref().unwrap_err().contains("429"));
    assert!(
        attempts[2]
            .as_ref()
            .unwrap_err()
            .contains("model is loading")
    );
    assert_eq!(server.requests().len(), 4);

    // With one retry fewer, the same script fails after exhausting the policy.
    let server = ScriptedServer::from_fixture(fixture("rate_limited_then_ok.json")).unwrap();
    let client = client_for(&server, Provider::OpenAi);
    let mut attempts = Vec::new();
    let err = chat_with_retries(
        client.as_ref(),
        &ChatRequest::new("", vec![Message::user("x")]),
        &Backoff::scaled(2, Duration::from_millis(1)),
        &mut attempts,
    )
    .unwrap_err();
    assert_eq!(err.status(), Some(503));
    assert_eq!(attempts.len(), 3);
}

#[test]
fn permanent_failures_are_not_retried() {
    let server = ScriptedServer::start(vec![scripted::ScriptedResponse::json(
        401,
        json!({"error": "unauthorized"}),
    )]);
    let client = client_for(&server, Provider::OpenAi);
    let mut attempts = Vec::new();
    let err = chat_with_retries(
        client.as_ref(),
        &ChatRequest::new("", vec![Message::user("x")]),
        &Backoff::scaled(3, Duration::from_millis(1)),
        &mut attempts,
    )
    .unwrap_err();
    assert!(matches!(err, LlmError::Auth { .. }));
    assert_eq!(attempts.len(), 1);
}

#[test]
fn react_round_trip_fixture() {
    let server = ScriptedServer::from_fixture(fixture("react_round_trip.json")).unwrap();
    let client = client_for(&server, Provider::OpenAi);
    let mut messages = vec![
        Message::system(react::system_prompt(&tools())),
        Message::user("check add()"),
    ];
    let mut steps = Vec::new();
    loop {
        // No native tools: the protocol lives in the text.
        let resp = client
            .chat(&ChatRequest::new("", messages.clone()))
            .unwrap();
        let text = resp.content.clone().unwrap();
        messages.push(Message::assistant(&resp));
        let step = react::parse(&text).unwrap();
        steps.push(step.clone());
        match step {
            ReactStep::Action { tool, .. } => messages.push(Message::user(react::observation(
                &format!("{tool}: 3 lines"),
            ))),
            ReactStep::Final { .. } => break,
        }
    }
    assert_eq!(
        steps[0],
        ReactStep::Action {
            thought: "read the library".into(),
            tool: "file_read".into(),
            input: json!({"path": "src/lib.rs"}),
        }
    );
    assert!(matches!(&steps[1], ReactStep::Final { answer, .. } if answer.contains("add()")));
    let second = &server.requests()[1].body;
    assert!(second.get("tools").is_none());
    assert!(
        second["messages"][3]["content"]
            .as_str()
            .unwrap()
            .starts_with("Observation:")
    );
}

#[test]
fn ollama_native_fixture() {
    let server = ScriptedServer::from_fixture(fixture("ollama_native_tool_call.json")).unwrap();
    let client = client_for(&server, Provider::Ollama);
    let mut messages = vec![Message::user("what does src/lib.rs define?")];
    let first = client
        .chat(&ChatRequest::new("", messages.clone()).with_tools(tools()))
        .unwrap();
    assert_eq!(first.tool_calls[0].name, "file_read");
    assert_eq!(first.usage.prompt_tokens, 122);
    messages.push(Message::assistant(&first));
    messages.push(Message::tool(&first.tool_calls[0].id, "pub fn add..."));
    let second = client
        .chat(&ChatRequest::new("", messages).with_tools(tools()))
        .unwrap();
    assert_eq!(second.content.as_deref(), Some("The file defines add()."));
    let reqs = server.requests();
    assert!(reqs.iter().all(|r| r.path == "/api/chat"));
    assert_eq!(reqs[1].body["messages"][2]["tool_name"], "file_read");
}
