//! The Anthropic Messages API provider: `POST {base}/messages`, where the base URL ends in `/v1`
//! (`http://127.0.0.1:8080/v1` reaches llama.cpp's `/v1/messages`). Without `--llm-url` it talks
//! to the hosted API, [`super::ANTHROPIC_BASE_URL`] over TLS, with the key from
//! `ACODE_LLM_API_KEY` or else `ANTHROPIC_API_KEY`; local servers and proxies that speak the
//! Messages API (llama.cpp server, Ollama's Anthropic compatibility, LiteLLM proxy) work over
//! plain http.
//!
//! Wire differences from the OpenAI-compatible provider (see `docs/agents.md`):
//! - headers `anthropic-version: 2023-06-01`, and `x-api-key` (not `Authorization`) for the key;
//! - system messages go in the top-level `system` string, not in `messages`;
//! - `max_tokens` is required: [`DEFAULT_MAX_TOKENS`] when the request sets none;
//! - messages carry content blocks; an assistant's calls are `tool_use` blocks, and the results
//!   (`tool_result` blocks) travel in ONE user message right after it. Consecutive messages of the
//!   same role are merged, because the API expects user and assistant turns to alternate;
//! - the answer is a `content` array of `text` and `tool_use` blocks (`input` is an object), with
//!   `stop_reason` and `usage.input_tokens` / `usage.output_tokens`.
//!
//! The answer is read with the same rules and helpers as the other providers: invented ids, a
//! non-object `input` kept with [`LlmToolCall::parse_error`], a truncation warning for
//! `stop_reason: "max_tokens"`, `EmptyAnswer` when there is neither text nor a call.

use serde_json::{Map, Value, json};

use super::http::{self, KeyHeader};
use super::parse::{self, IdAllocator};
use super::provider::{HttpClient, Wire, float, replay_arguments};
use super::{
    ChatRequest, ChatResponse, LlmConfig, LlmError, LlmToolCall, Message, Provider, Usage,
};

/// The `anthropic-version` header value. The Messages API requires the header; `2023-06-01` is the
/// version its documentation uses, and local servers accept (or ignore) it.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// `max_tokens` sent when the request sets none. The Messages API requires the field; 4096 is
/// also what llama.cpp's `/v1/messages` assumes when it is missing, so behaviour matches there.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// The Anthropic Messages wire: `POST {base}/messages` (the base URL is expected to end in
/// `/v1`), the key in `x-api-key`, the API version in `anthropic-version`.
pub const WIRE: Wire = Wire {
    provider: Provider::Anthropic,
    key_header: KeyHeader::XApiKey,
    headers: &[("anthropic-version", ANTHROPIC_VERSION)],
    endpoint,
    request_json,
    parse_response,
};

/// A client for one server speaking the Anthropic Messages API.
pub fn client(config: LlmConfig) -> HttpClient {
    HttpClient::new(&WIRE, config)
}

/// The endpoint called, from the configured base URL.
fn endpoint(base_url: &str) -> String {
    http::join(base_url, "/messages")
}

/// The `/v1/messages` body for `request`.
///
/// System messages are joined (blank line between them) into the top-level `system` string,
/// wherever they stood in the conversation. Text that is empty or whitespace only is left out,
/// and a message left with no content blocks is dropped.
pub fn request_json(request: &ChatRequest, model: &str) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert(
        "max_tokens".into(),
        json!(request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)),
    );
    let system: Vec<&str> = request
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::System { content } if !content.trim().is_empty() => Some(content.as_str()),
            _ => None,
        })
        .collect();
    if !system.is_empty() {
        body.insert("system".into(), json!(system.join("\n\n")));
    }
    body.insert(
        "messages".into(),
        Value::Array(messages_json(&request.messages)),
    );
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({"name": t.name, "description": t.description, "input_schema": t.parameters})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(t) = request.temperature {
        body.insert("temperature".into(), float(t));
    }
    body.insert("stream".into(), json!(false));
    Value::Object(body)
}

/// The two roles of the `messages` array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    User,
    Assistant,
}

/// The non-system messages as alternating user/assistant turns of content blocks.
///
/// Consecutive messages of one role are merged into one turn: the API wants the results of an
/// assistant's calls in the single user message that follows it. Within a user turn the
/// `tool_result` blocks are put first (in their order), because a message after `tool_use` blocks
/// must begin with the matching results; any text follows them.
fn messages_json(messages: &[Message]) -> Vec<Value> {
    let mut turns: Vec<(Role, Vec<Value>)> = Vec::new();
    for message in messages {
        let (role, blocks) = match message {
            Message::System { .. } => continue,
            Message::User { content } => (Role::User, text_block(content).into_iter().collect()),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let mut blocks: Vec<Value> = content
                    .as_deref()
                    .and_then(text_block)
                    .into_iter()
                    .collect();
                blocks.extend(tool_calls.iter().map(|c| {
                    json!({"type": "tool_use", "id": c.id, "name": c.name,
                           "input": replay_arguments(c)})
                }));
                (Role::Assistant, blocks)
            }
            Message::Tool { call_id, content } => (
                Role::User,
                vec![json!({"type": "tool_result", "tool_use_id": call_id, "content": content})],
            ),
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    turns
        .into_iter()
        .map(|(role, mut blocks)| {
            let role = match role {
                Role::User => {
                    // Stable: results keep their order, and so does the text after them.
                    blocks.sort_by_key(|b| {
                        b.get("type").and_then(Value::as_str) != Some("tool_result")
                    });
                    "user"
                }
                Role::Assistant => "assistant",
            };
            json!({"role": role, "content": blocks})
        })
        .collect()
}

/// A `text` block, or `None` for empty or whitespace-only text (which carries nothing).
fn text_block(text: &str) -> Option<Value> {
    (!text.trim().is_empty()).then(|| json!({"type": "text", "text": text}))
}

/// Reads a 2xx `/v1/messages` body. `request_body`/`response_body` are left for the caller.
#[doc(hidden)]
pub fn parse_response(
    body: &str,
    url: &str,
    request: &ChatRequest,
    ids: &mut IdAllocator,
) -> Result<ChatResponse, LlmError> {
    let malformed = |what: String| LlmError::Malformed {
        url: url.to_string(),
        what,
        body: body.to_string(),
    };
    let root: Value = serde_json::from_str(body).map_err(|e| {
        let start = body.trim_start();
        let hint = if start.starts_with("event:") || start.starts_with("data:") {
            "; it looks like a stream although `stream: false` was sent"
        } else {
            ""
        };
        malformed(format!("the body is not JSON ({e}){hint}"))
    })?;
    let Value::Object(root) = root else {
        return Err(malformed(format!(
            "the body is {}, not an object",
            crate::util::json_kind(&root)
        )));
    };
    // Tolerated: a plain string where the API sends an array of blocks.
    let string_blocks: [Value; 1];
    let blocks: &[Value] = match root.get("content") {
        Some(Value::Array(blocks)) => blocks,
        Some(Value::String(text)) => {
            string_blocks = [json!({"type": "text", "text": text})];
            &string_blocks
        }
        _ => {
            if let Some(err) = root.get("error") {
                return Err(malformed(format!(
                    "no `content`; the server reported an error: {}",
                    super::excerpt(&error_message(err), 300)
                )));
            }
            return Err(malformed(
                "`content` is missing or not an array".to_string(),
            ));
        }
    };

    let mut warnings = Vec::new();
    let mut text_blocks = Vec::new();
    let mut tool_calls = Vec::new();
    for block in blocks {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text_blocks.push(block.clone()),
            Some("tool_use") => tool_calls.push(tool_use(block, ids, &mut warnings)),
            // Reasoning models may send their thinking; it is not part of the answer.
            Some("thinking" | "redacted_thinking") => {}
            Some(other) => warnings.push(format!(
                "ignored a content block of type '{}'",
                super::excerpt(other, 40)
            )),
            None => warnings.push(format!(
                "ignored a content block without a type: {}",
                super::excerpt(&block.to_string(), 80)
            )),
        }
    }
    let mut content = parse::content_text(Some(&Value::Array(text_blocks)));
    if tool_calls.is_empty()
        && let Some(text) = content.as_deref()
        && let Some(call) = parse::tool_call_in_content(text, &request.tools, ids, &mut warnings)
    {
        tool_calls.push(call);
        content = None;
    }
    let finish_reason = root
        .get("stop_reason")
        .and_then(Value::as_str)
        .map(str::to_string);
    if let Some(w) = parse::finish_warning(finish_reason.as_deref()) {
        warnings.push(w);
    }
    let usage = root
        .get("usage")
        .map(|u| Usage {
            prompt_tokens: parse::count(u.get("input_tokens")),
            completion_tokens: parse::count(u.get("output_tokens")),
        })
        .unwrap_or_default();

    parse::response(
        content,
        tool_calls,
        finish_reason,
        usage,
        warnings,
        url,
        body,
    )
}

/// One `tool_use` block: `{id, name, input}`. Never fails: a block without a name, or whose
/// `input` is not an object, keeps a `parse_error` (the loop reports it back to the model).
fn tool_use(block: &Value, ids: &mut IdAllocator, warnings: &mut Vec<String>) -> LlmToolCall {
    let name = block
        .get("name")
        .and_then(Value::as_str)
        .map(str::trim)
        .unwrap_or_default()
        .to_string();
    let (arguments, mut parse_error) = parse::arguments(block.get("input"));
    if name.is_empty() {
        parse_error = Some("the tool call has no tool name".to_string());
    }
    LlmToolCall {
        id: ids.id_for(block.get("id").and_then(Value::as_str), warnings),
        name,
        arguments,
        parse_error,
    }
}

/// `type: message` of an Anthropic error object `{"type": ..., "message": ...}`, or the value
/// itself when it has another shape.
fn error_message(err: &Value) -> String {
    let message = err.get("message").and_then(Value::as_str);
    match (err.get("type").and_then(Value::as_str), message) {
        (Some(kind), Some(message)) => format!("{kind}: {message}"),
        (None, Some(message)) => message.to_string(),
        _ => err
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| err.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use super::*;
    use crate::llm::scripted::{ScriptedResponse, ScriptedServer};
    use crate::llm::{LlmClient, LlmConfig, LlmToolCall, Provider};

    use crate::llm::test_support::request;

    fn client_for(server: &ScriptedServer) -> HttpClient {
        client(LlmConfig::new(server.url(), "test-model"))
    }

    fn with_key(server: &ScriptedServer, key: &str) -> HttpClient {
        let mut config = LlmConfig::new(server.url(), "test-model");
        config.api_key = Some(key.to_string());
        client(config)
    }

    /// A Messages API answer with the given content blocks.
    fn message(content: Value, stop_reason: &str) -> Value {
        json!({
            "id": "msg_01", "type": "message", "role": "assistant", "model": "test-model",
            "content": content, "stop_reason": stop_reason, "stop_sequence": null,
            "usage": {"input_tokens": 21, "output_tokens": 9}
        })
    }

    fn one(body: Value) -> (ScriptedServer, HttpClient) {
        let server = ScriptedServer::start(vec![ScriptedResponse::json(200, body)]);
        let client = client_for(&server);
        (server, client)
    }

    fn text(t: &str) -> Value {
        json!([{"type": "text", "text": t}])
    }

    fn call(id: &str, args: Value, error: Option<&str>) -> LlmToolCall {
        LlmToolCall {
            id: id.into(),
            name: "file_read".into(),
            arguments: args,
            parse_error: error.map(str::to_string),
        }
    }

    #[test]
    fn request_shape_headers_and_no_key() {
        let (server, client) = one(message(text("done"), "end_turn"));
        let mut req = request();
        req.messages.insert(1, Message::system("more rules"));
        req.temperature = Some(0.2);
        let resp = client.chat(&req).unwrap();
        assert_eq!(resp.content.as_deref(), Some("done"));

        let reqs = server.requests();
        assert_eq!(reqs.len(), 1);
        let r = &reqs[0];
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/v1/messages");
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(r.header("x-api-key"), None);
        assert_eq!(r.header("authorization"), None);
        let b = &r.body;
        assert_eq!(b["model"], "test-model");
        assert_eq!(b["max_tokens"], DEFAULT_MAX_TOKENS);
        assert_eq!(b["temperature"], json!(0.2));
        assert_eq!(b["stream"], false);
        // System messages go top-level, never into `messages`.
        assert_eq!(b["system"], "sys\n\nmore rules");
        assert_eq!(
            b["messages"],
            json!([{"role": "user", "content": [{"type": "text", "text": "read src/lib.rs"}]}])
        );
        assert_eq!(
            b["tools"][0],
            json!({"name": "file_read", "description": "Read a file",
                   "input_schema": {"type":"object","properties":{"path":{"type":"string"}},
                                    "required":["path"]}})
        );
        assert_eq!(b["tools"][1]["input_schema"], json!({"type": "object"}));
        assert!(b.get("tool_choice").is_none());
        // What was recorded is exactly what was sent.
        assert_eq!(resp.request_body, r.raw_body);
        assert_eq!(client.request_body(&req), r.raw_body);
        assert!(resp.response_body.contains("\"done\""));
    }

    #[test]
    fn minimal_request_has_max_tokens_and_nothing_optional() {
        let (server, client) = one(message(text("hi"), "end_turn"));
        let mut req = ChatRequest::new("", vec![Message::user("hi")]);
        req.max_tokens = Some(256);
        client.chat(&req).unwrap();
        let b = &server.requests()[0].body;
        assert_eq!(b["max_tokens"], 256);
        // An empty request model falls back to the configured one.
        assert_eq!(b["model"], "test-model");
        for absent in ["system", "tools", "temperature", "tool_choice"] {
            assert!(b.get(absent).is_none(), "{absent}: {b}");
        }
    }

    #[test]
    fn api_key_goes_in_x_api_key_and_nowhere_else() {
        let server = ScriptedServer::start(vec![ScriptedResponse::json(
            200,
            message(text("ok"), "end_turn"),
        )]);
        let client = with_key(&server, "sk-ant-SECRET-42");
        let resp = client.chat(&request()).unwrap();
        let r = &server.requests()[0];
        assert_eq!(r.header("x-api-key"), Some("sk-ant-SECRET-42"));
        assert_eq!(r.header("authorization"), None);
        assert_eq!(r.header("anthropic-version"), Some(ANTHROPIC_VERSION));
        assert!(!r.raw_body.contains("SECRET"));
        assert!(!resp.request_body.contains("SECRET"));
        assert!(!client.request_body(&request()).contains("SECRET"));
        assert!(!client.describe().contains("SECRET"));
        assert!(client.describe().starts_with("anthropic http://127.0.0.1:"));
    }

    #[test]
    fn history_replay_merges_tool_results_into_one_user_message() {
        let (server, client) = one(message(text("ok"), "end_turn"));
        let req = ChatRequest::new(
            "m",
            vec![
                Message::system("sys"),
                Message::user("u1"),
                Message::user("u2"),
                Message::Assistant {
                    content: Some("Reading both.".into()),
                    tool_calls: vec![
                        call("toolu_1", json!({"path": "a"}), None),
                        call(
                            "toolu_2",
                            json!("{bad"),
                            Some("arguments are not valid JSON"),
                        ),
                    ],
                },
                Message::tool("toolu_1", "contents of a"),
                Message::tool("toolu_2", "error: not run"),
                Message::user("verifier says: fix b"),
                // An assistant turn with nothing in it carries nothing and is dropped.
                Message::Assistant {
                    content: Some("  ".into()),
                    tool_calls: vec![],
                },
                Message::user("again"),
            ],
        );
        client.chat(&req).unwrap();
        let b = &server.requests()[0].body;
        assert_eq!(b["system"], "sys");
        assert_eq!(
            b["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "u1"},
                                             {"type": "text", "text": "u2"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Reading both."},
                    {"type": "tool_use", "id": "toolu_1", "name": "file_read",
                     "input": {"path": "a"}},
                    // Arguments that did not parse are replayed as `{}`.
                    {"type": "tool_use", "id": "toolu_2", "name": "file_read", "input": {}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "contents of a"},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "error: not run"},
                    {"type": "text", "text": "verifier says: fix b"},
                    {"type": "text", "text": "again"}]}
            ])
        );
    }

    #[test]
    fn tool_results_come_first_in_their_user_message() {
        let (server, client) = one(message(text("ok"), "end_turn"));
        let req = ChatRequest::new(
            "m",
            vec![
                Message::user("go"),
                Message::Assistant {
                    content: None,
                    tool_calls: vec![call("t1", json!({}), None)],
                },
                Message::user("note"),
                Message::tool("t1", "result"),
            ],
        );
        client.chat(&req).unwrap();
        let m = &server.requests()[0].body["messages"];
        assert_eq!(m[1]["content"][0]["type"], "tool_use");
        assert_eq!(
            m[2]["content"],
            json!([{"type": "tool_result", "tool_use_id": "t1", "content": "result"},
                   {"type": "text", "text": "note"}])
        );
    }

    #[test]
    fn tool_use_blocks_are_parsed_in_order() {
        let (_s, client) = one(message(
            json!([
                {"type": "text", "text": "I'll read both files."},
                {"type": "tool_use", "id": "toolu_01A", "name": "file_read",
                 "input": {"path": "src/lib.rs"}},
                {"type": "tool_use", "id": "toolu_01B", "name": "file_edit", "input": {}}
            ]),
            "tool_use",
        ));
        let resp = client.chat(&request()).unwrap();
        assert_eq!(resp.content.as_deref(), Some("I'll read both files."));
        let calls: Vec<_> = resp
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.clone()))
            .collect();
        assert_eq!(
            calls,
            [
                ("toolu_01A", "file_read", json!({"path": "src/lib.rs"})),
                ("toolu_01B", "file_edit", json!({}))
            ]
        );
        assert!(resp.tool_calls.iter().all(LlmToolCall::is_valid));
        assert_eq!(resp.finish_reason.as_deref(), Some("tool_use"));
        assert_eq!(
            resp.usage,
            Usage {
                prompt_tokens: 21,
                completion_tokens: 9
            }
        );
        assert!(resp.warnings.is_empty(), "{:?}", resp.warnings);
    }

    #[test]
    fn text_only_answer_is_final() {
        let (_s, client) = one(message(
            json!([{"type": "text", "text": "Fixed "}, {"type": "text", "text": "add()."}]),
            "end_turn",
        ));
        let resp = client.chat(&request()).unwrap();
        assert_eq!(resp.content.as_deref(), Some("Fixed add()."));
        assert!(resp.tool_calls.is_empty());
        assert_eq!(resp.finish_reason.as_deref(), Some("end_turn"));
        assert!(resp.warnings.is_empty());
    }

    #[test]
    fn missing_and_duplicate_ids_are_invented_and_unique_across_turns() {
        let body = message(
            json!([
                {"type": "tool_use", "name": "file_read", "input": {"path": "a"}},
                {"type": "tool_use", "id": "", "name": "file_read", "input": {"path": "b"}},
                {"type": "tool_use", "id": "dup", "name": "file_read", "input": {"path": "c"}},
                {"type": "tool_use", "id": "dup", "name": "file_read", "input": {"path": "d"}}
            ]),
            "tool_use",
        );
        let server = ScriptedServer::start(vec![
            ScriptedResponse::json(200, body.clone()),
            ScriptedResponse::json(200, body),
        ]);
        let client = client_for(&server);
        let first = client.chat(&request()).unwrap();
        let second = client.chat(&request()).unwrap();
        let ids: Vec<_> = first
            .tool_calls
            .iter()
            .chain(&second.tool_calls)
            .map(|c| c.id.as_str())
            .collect();
        assert_eq!(
            ids,
            [
                "call_1", "call_2", "dup", "call_3", "call_4", "call_5", "dup", "call_6"
            ]
        );
        assert_eq!(first.warnings.len(), 1, "{:?}", first.warnings);
        assert!(first.warnings[0].contains("duplicate tool call id 'dup'"));
    }

    #[test]
    fn bad_input_is_kept_with_a_parse_error() {
        let (_s, client) = one(message(
            json!([
                {"type": "tool_use", "id": "a", "name": "file_read", "input": [1, 2]},
                {"type": "tool_use", "id": "b", "name": "file_read", "input": 5},
                {"type": "tool_use", "id": "c", "name": "file_read", "input": "{path: x"},
                {"type": "tool_use", "id": "d", "input": {"path": "x"}},
                // Tolerated: input as a JSON string holding an object; absent input means `{}`.
                {"type": "tool_use", "id": "e", "name": "file_read", "input": "{\"path\":\"y\"}"},
                {"type": "tool_use", "id": "f", "name": "file_edit"}
            ]),
            "tool_use",
        ));
        let resp = client.chat(&request()).unwrap();
        let c = &resp.tool_calls;
        assert_eq!(c.len(), 6);
        assert_eq!(c[0].arguments, json!([1, 2]));
        assert!(c[0].parse_error.as_deref().unwrap().contains("an array"));
        assert!(c[1].parse_error.as_deref().unwrap().contains("a number"));
        assert_eq!(c[2].arguments, json!("{path: x"));
        assert!(
            c[2].parse_error
                .as_deref()
                .unwrap()
                .contains("not valid JSON")
        );
        assert!(
            c[2].parse_error_feedback().unwrap().contains("{path: x"),
            "the feedback quotes what the model sent"
        );
        assert!(
            c[3].parse_error
                .as_deref()
                .unwrap()
                .contains("no tool name")
        );
        assert!(c[4].is_valid() && c[4].arguments == json!({"path": "y"}));
        assert!(c[5].is_valid() && c[5].arguments == json!({}));
    }

    #[test]
    fn max_tokens_and_context_window_add_a_truncation_warning() {
        for reason in ["max_tokens", "model_context_window_exceeded"] {
            let (_s, client) = one(json!({"content": text("partial"), "stop_reason": reason}));
            let resp = client.chat(&request()).unwrap();
            assert_eq!(resp.content.as_deref(), Some("partial"));
            assert_eq!(resp.finish_reason.as_deref(), Some(reason));
            assert_eq!(resp.warnings.len(), 1, "{:?}", resp.warnings);
            assert!(resp.warnings[0].contains("truncated"));
            // A missing `usage` counts as zero tokens.
            assert_eq!(resp.usage, Usage::default());
        }
    }

    #[test]
    fn usage_is_read_defensively() {
        let (_s, client) = one(json!({
            "content": text("ok"), "stop_reason": "end_turn",
            "usage": {"input_tokens": "12", "output_tokens": -3}
        }));
        let resp = client.chat(&request()).unwrap();
        assert_eq!(
            resp.usage,
            Usage {
                prompt_tokens: 12,
                completion_tokens: 0
            }
        );
    }

    #[test]
    fn thinking_is_ignored_and_unknown_blocks_warned() {
        let (_s, client) = one(message(
            json!([
                {"type": "thinking", "thinking": "hmm", "signature": "x"},
                {"type": "image", "source": {}},
                "stray",
                {"type": "text", "text": "answer"}
            ]),
            "end_turn",
        ));
        let resp = client.chat(&request()).unwrap();
        assert_eq!(resp.content.as_deref(), Some("answer"));
        assert_eq!(resp.warnings.len(), 2, "{:?}", resp.warnings);
        assert!(resp.warnings[0].contains("'image'"));
        assert!(resp.warnings[1].contains("without a type"));
    }

    #[test]
    fn tool_call_written_as_text_is_recovered() {
        let (_s, client) = one(message(
            text("{\"name\": \"file_read\", \"arguments\": {\"path\": \"a\"}}"),
            "end_turn",
        ));
        let resp = client.chat(&request()).unwrap();
        assert_eq!(resp.content, None);
        assert_eq!(resp.tool_calls[0].name, "file_read");
        assert!(resp.warnings.iter().any(|w| w.contains("recovered")));
    }

    fn anthropic_error(kind: &str, msg: &str) -> Value {
        json!({"type": "error", "error": {"type": kind, "message": msg},
               "request_id": "req_011"})
    }

    #[test]
    fn auth_errors_are_permanent_and_never_show_the_key() {
        for status in [401u16, 403] {
            let server = ScriptedServer::start(vec![ScriptedResponse::json(
                status,
                anthropic_error("authentication_error", "invalid x-api-key sk-ant-SECRET-42"),
            )]);
            let err = with_key(&server, "sk-ant-SECRET-42")
                .chat(&request())
                .unwrap_err();
            assert!(matches!(err, LlmError::Auth { .. }), "{err:?}");
            assert!(!err.is_retryable());
            assert_eq!(err.status(), Some(status));
            let msg = err.to_string();
            assert!(
                msg.contains("ACODE_LLM_API_KEY") && msg.contains("authentication_error"),
                "{msg}"
            );
            assert!(!msg.contains("SECRET"), "{msg}");
            assert!(!format!("{err:?}").contains("SECRET"));
            assert!(!err.response_body().unwrap().contains("SECRET"));
        }
    }

    #[test]
    fn not_found_names_model_and_url() {
        let server = ScriptedServer::start(vec![ScriptedResponse::json(
            404,
            anthropic_error("not_found_error", "model: test-model"),
        )]);
        let err = client_for(&server).chat(&request()).unwrap_err();
        assert!(matches!(err, LlmError::ModelNotFound { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains("'test-model'") && msg.contains(&format!("{}/messages", server.url())),
            "{msg}"
        );
        assert!(
            msg.contains("not_found_error") && msg.contains("anthropic"),
            "{msg}"
        );
        assert!(!err.is_retryable());
    }

    #[test]
    fn rate_limit_and_overload_are_retryable() {
        let server = ScriptedServer::start(vec![
            ScriptedResponse::json(
                429,
                anthropic_error(
                    "rate_limit_error",
                    "Number of requests has exceeded your rate limit",
                ),
            )
            .with_header("retry-after", "2"),
            ScriptedResponse::json(529, anthropic_error("overloaded_error", "Overloaded")),
        ]);
        let client = client_for(&server);
        let err = client.chat(&request()).unwrap_err();
        assert!(err.is_retryable());
        assert_eq!(err.status(), Some(429));
        assert_eq!(err.retry_after(), Some(Duration::from_secs(2)));
        assert!(err.to_string().contains("rate_limit_error"), "{err}");

        let err = client.chat(&request()).unwrap_err();
        assert!(err.is_retryable());
        assert_eq!(err.status(), Some(529));
        assert_eq!(err.retry_after(), None);
        assert!(err.to_string().contains("Overloaded"), "{err}");
        assert!(err.response_body().unwrap().contains("overloaded_error"));
    }

    #[test]
    fn invalid_request_is_permanent_and_quoted() {
        let server = ScriptedServer::start(vec![ScriptedResponse::json(
            400,
            anthropic_error("invalid_request_error", "max_tokens: field required"),
        )]);
        let err = client_for(&server).chat(&request()).unwrap_err();
        assert!(!err.is_retryable());
        assert_eq!(err.status(), Some(400));
        assert!(
            err.to_string().contains("max_tokens: field required"),
            "{err}"
        );
    }

    #[test]
    fn malformed_bodies_are_clear_errors() {
        let cases: Vec<(ScriptedResponse, &str)> = vec![
            (ScriptedResponse::text(200, "{not json"), "not JSON"),
            (
                ScriptedResponse::text(200, "event: message_start\ndata: {}\n\n"),
                "stream",
            ),
            (ScriptedResponse::json(200, json!([1])), "not an object"),
            (
                ScriptedResponse::json(200, json!({"type": "message", "role": "assistant"})),
                "`content` is missing",
            ),
            (
                ScriptedResponse::json(200, json!({"content": {"type": "text"}})),
                "not an array",
            ),
            (
                ScriptedResponse::json(200, anthropic_error("api_error", "Internal server error")),
                "api_error: Internal server error",
            ),
        ];
        for (resp, needle) in cases {
            let server = ScriptedServer::start(vec![resp]);
            let err = client_for(&server).chat(&request()).unwrap_err();
            assert!(matches!(err, LlmError::Malformed { .. }), "{err:?}");
            assert!(err.to_string().contains(needle), "{needle}: {err}");
            assert!(!err.is_retryable());
            assert!(err.response_body().is_some());
        }
    }

    #[test]
    fn empty_content_is_an_empty_answer() {
        for body in [
            message(json!([]), "end_turn"),
            message(text(" \n"), "end_turn"),
            message(json!([{"type": "thinking", "thinking": "..."}]), "end_turn"),
            json!({"content": "", "stop_reason": "end_turn"}),
        ] {
            let (_s, client) = one(body);
            let err = client.chat(&request()).unwrap_err();
            assert!(matches!(err, LlmError::EmptyAnswer { .. }), "{err:?}");
            assert!(err.to_string().contains("end_turn"), "{err}");
            assert!(!err.is_retryable());
        }
    }

    #[test]
    fn https_and_missing_model_fail_before_connecting() {
        // https is built in now: this one gets as far as the (closed) port.
        let err = client(LlmConfig::new("https://127.0.0.1:1/v1", "m"))
            .chat(&request())
            .unwrap_err();
        assert!(matches!(err, LlmError::ConnectionRefused { .. }), "{err:?}");
        let err = client(LlmConfig::new("http://127.0.0.1:1/v1", ""))
            .chat(&ChatRequest::new("", vec![Message::user("x")]))
            .unwrap_err();
        assert!(matches!(err, LlmError::Config(_)));
    }

    #[test]
    fn endpoint_and_factory() {
        let mut config = LlmConfig::new("http://127.0.0.1:9/v1/", "m");
        config.provider = Provider::Anthropic;
        assert_eq!(
            client(config.clone()).endpoint(),
            "http://127.0.0.1:9/v1/messages"
        );
        assert!(
            crate::llm::client(config)
                .describe()
                .starts_with("anthropic http://127.0.0.1:9/v1 ")
        );
    }

    /// The shipped transcript, through the client picked by the factory, in a miniature agent
    /// loop: two tool turns, then a final answer.
    #[test]
    fn read_then_edit_fixture() {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/llm/anthropic_read_then_edit.json");
        let server = ScriptedServer::from_fixture(path).unwrap();
        let mut config = LlmConfig::new(server.url(), "qwen3-coder");
        config.provider = Provider::Anthropic;
        let client = crate::llm::client(config);
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
        assert_eq!(usage.prompt_tokens, 402 + 528 + 615);
        assert_eq!(usage.completion_tokens, 48 + 97 + 14);
        assert_eq!(server.remaining(), 0);

        // The third request replays the whole exchange in Messages API form.
        let reqs = server.requests();
        assert!(reqs.iter().all(|r| r.path == "/v1/messages"));
        let third = &reqs[2].body;
        assert_eq!(third["system"], "You fix bugs.");
        let m = &third["messages"];
        assert_eq!(m.as_array().map(Vec::len), Some(5));
        let roles: Vec<_> = (0..5).map(|i| m[i]["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["user", "assistant", "user", "assistant", "user"]);
        assert_eq!(m[1]["content"][0]["text"], "I'll read the file first.");
        assert_eq!(
            m[1]["content"][1],
            json!({"type": "tool_use", "id": "toolu_01R3ad", "name": "file_read",
                   "input": {"path": "src/lib.rs"}})
        );
        assert_eq!(
            m[2]["content"],
            json!([{"type": "tool_result", "tool_use_id": "toolu_01R3ad",
                    "content": "file_read ok"}])
        );
        assert_eq!(m[4]["content"][0]["tool_use_id"], "toolu_01Ed1t");
    }
}
