//! The OpenAI-compatible provider: `POST {base}/chat/completions`, as served by Ollama, LM Studio,
//! llama.cpp server and vLLM. Plain http only (no TLS is built in; local servers do not need it).
//!
//! Parsing rules (the answer is hostile input; see `docs/agents.md`):
//! - `function.arguments` may be a JSON string (the OpenAI format) or an object (some servers); a
//!   string that is not a JSON object is kept as sent with [`LlmToolCall::parse_error`] set.
//! - Missing, empty or duplicate tool-call ids are replaced by invented `call_<n>`.
//! - Tool calls are read whatever `finish_reason` says (servers send `stop` with tool calls).
//! - The legacy `message.function_call` is accepted when there is no `tool_calls`.
//! - With no `tool_calls` at all, a message whose whole text is exactly one JSON object
//!   `{"name": <offered tool>, "arguments": {...}}` is taken as a call (with a warning).
//! - `content` may be null, absent, empty or an array of text parts.
//! - `finish_reason: "length"` adds a warning; a missing `usage` counts as zero tokens.
//! - No `choices`, or no text and no tool calls, is an error.

use serde_json::{Map, Value, json};

use super::http::{self, KeyHeader};
use super::parse::{self, IdAllocator};
use super::provider::{HttpClient, Wire, float, replay_arguments};
use super::{ChatRequest, ChatResponse, LlmConfig, LlmError, Message, Provider, Usage};

/// The OpenAI-compatible wire: `POST {base}/chat/completions`, the key as a bearer token.
pub const WIRE: Wire = Wire {
    provider: Provider::OpenAi,
    key_header: KeyHeader::Bearer,
    headers: &[],
    endpoint,
    request_json,
    parse_response,
};

/// A client for one OpenAI-compatible server.
pub fn client(config: LlmConfig) -> HttpClient {
    HttpClient::new(&WIRE, config)
}

/// The endpoint called, from the configured base URL.
fn endpoint(base_url: &str) -> String {
    http::join(base_url, "/chat/completions")
}

/// The `/chat/completions` body for `request`.
pub fn request_json(request: &ChatRequest, model: &str) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert(
        "messages".into(),
        Value::Array(request.messages.iter().map(message_json).collect()),
    );
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    }
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        body.insert("tool_choice".into(), json!("auto"));
    }
    if let Some(t) = request.temperature {
        body.insert("temperature".into(), float(t));
    }
    if let Some(m) = request.max_tokens {
        body.insert("max_tokens".into(), json!(m));
    }
    body.insert("stream".into(), json!(false));
    Value::Object(body)
}

fn message_json(message: &Message) -> Value {
    match message {
        Message::System { content } => json!({"role": "system", "content": content}),
        Message::User { content } => json!({"role": "user", "content": content}),
        Message::Assistant {
            content,
            tool_calls,
        } => {
            // Content is sent as "" rather than null: chat templates tend to assume a string.
            let mut m = json!({"role": "assistant", "content": content.as_deref().unwrap_or("")});
            if !tool_calls.is_empty() {
                let calls: Vec<Value> = tool_calls
                    .iter()
                    .map(|c| {
                        json!({
                            "id": c.id,
                            "type": "function",
                            "function": {
                                "name": c.name,
                                "arguments": replay_arguments(c).to_string(),
                            }
                        })
                    })
                    .collect();
                m["tool_calls"] = Value::Array(calls);
            }
            m
        }
        Message::Tool { call_id, content } => {
            json!({"role": "tool", "tool_call_id": call_id, "content": content})
        }
    }
}

/// Reads a 2xx `/chat/completions` body. `request_body`/`response_body` are left for the caller.
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
        let hint = if body.trim_start().starts_with("data:") {
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
    let choices = match root.get("choices") {
        Some(Value::Array(c)) if !c.is_empty() => c,
        _ => {
            if let Some(err) = root.get("error") {
                let msg = err
                    .get("message")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| err.to_string());
                return Err(malformed(format!(
                    "no `choices`; the server reported an error: {}",
                    super::excerpt(&msg, 300)
                )));
            }
            return Err(malformed("`choices` is missing or empty".to_string()));
        }
    };
    let choice = &choices[0];
    let message = choice
        .get("message")
        .filter(|m| m.is_object())
        .ok_or_else(|| malformed("`choices[0].message` is missing or not an object".to_string()))?;

    let mut warnings = Vec::new();
    if choices.len() > 1 {
        warnings.push(format!(
            "the server sent {} choices; only the first was used",
            choices.len()
        ));
    }
    let finish_reason = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .map(str::to_string);
    let mut content = parse::content_text(message.get("content"));
    let mut tool_calls = parse::tool_calls(message, ids, &mut warnings);
    if tool_calls.is_empty()
        && let Some(text) = content.as_deref()
        && let Some(call) = parse::tool_call_in_content(text, &request.tools, ids, &mut warnings)
    {
        tool_calls.push(call);
        content = None;
    }
    if let Some(w) = parse::finish_warning(finish_reason.as_deref()) {
        warnings.push(w);
    }
    let usage = root
        .get("usage")
        .map(|u| Usage {
            prompt_tokens: parse::count(u.get("prompt_tokens")),
            completion_tokens: parse::count(u.get("completion_tokens")),
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

#[cfg(test)]
mod tests {
    use std::net::TcpListener;
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

    fn chat_body(message: Value, finish: &str) -> Value {
        json!({
            "id": "x", "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
        })
    }

    fn one(body: Value) -> (ScriptedServer, HttpClient) {
        let server = ScriptedServer::start(vec![ScriptedResponse::json(200, body)]);
        let client = client_for(&server);
        (server, client)
    }

    #[test]
    fn request_shape_and_no_auth_header_without_key() {
        let (server, client) = one(chat_body(
            json!({"role":"assistant","content":"done"}),
            "stop",
        ));
        let mut req = request();
        req.temperature = Some(0.2);
        req.max_tokens = Some(256);
        let resp = client.chat(&req).unwrap();
        assert_eq!(resp.content.as_deref(), Some("done"));

        let reqs = server.requests();
        assert_eq!(reqs.len(), 1);
        let r = &reqs[0];
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/v1/chat/completions");
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(r.header("authorization"), None);
        let b = &r.body;
        assert_eq!(b["model"], "test-model");
        assert_eq!(b["stream"], false);
        assert_eq!(b["tool_choice"], "auto");
        assert_eq!(b["temperature"], json!(0.2));
        assert_eq!(b["max_tokens"], 256);
        assert_eq!(b["messages"][0], json!({"role":"system","content":"sys"}));
        assert_eq!(
            b["messages"][1],
            json!({"role":"user","content":"read src/lib.rs"})
        );
        assert_eq!(b["tools"][0]["type"], "function");
        assert_eq!(b["tools"][0]["function"]["name"], "file_read");
        assert_eq!(b["tools"][0]["function"]["description"], "Read a file");
        assert_eq!(
            b["tools"][0]["function"]["parameters"]["required"][0],
            "path"
        );
        // What was recorded is exactly what was sent.
        assert_eq!(resp.request_body, r.raw_body);
        assert_eq!(client.request_body(&req), r.raw_body);
        assert!(resp.response_body.contains("\"done\""));
    }

    #[test]
    fn no_tools_means_no_tools_field() {
        let (server, client) = one(chat_body(json!({"content":"hi"}), "stop"));
        client
            .chat(&ChatRequest::new("", vec![Message::user("hi")]))
            .unwrap();
        let b = &server.requests()[0].body;
        assert!(b.get("tools").is_none() && b.get("tool_choice").is_none());
        assert!(b.get("temperature").is_none() && b.get("max_tokens").is_none());
        // An empty request model falls back to the configured one.
        assert_eq!(b["model"], "test-model");
    }

    #[test]
    fn bearer_header_when_key_set_and_key_not_in_body() {
        let server = ScriptedServer::start(vec![ScriptedResponse::json(
            200,
            chat_body(json!({"content":"ok"}), "stop"),
        )]);
        let client = with_key(&server, "sk-test-SECRET-42");
        let resp = client.chat(&request()).unwrap();
        let r = &server.requests()[0];
        assert_eq!(r.header("authorization"), Some("Bearer sk-test-SECRET-42"));
        assert!(!resp.request_body.contains("SECRET"));
        assert!(!client.describe().contains("SECRET"));
    }

    #[test]
    fn history_replay_shape() {
        let (server, client) = one(chat_body(json!({"content":"ok"}), "stop"));
        let calls = vec![
            LlmToolCall {
                id: "c1".into(),
                name: "file_read".into(),
                arguments: json!({"path":"a"}),
                parse_error: None,
            },
            LlmToolCall {
                id: "c2".into(),
                name: "file_read".into(),
                arguments: json!("{bad"),
                parse_error: Some("arguments are not valid JSON".into()),
            },
        ];
        let req = ChatRequest::new(
            "m",
            vec![
                Message::user("u"),
                Message::Assistant {
                    content: None,
                    tool_calls: calls,
                },
                Message::tool("c1", "contents"),
                Message::tool("c2", "error"),
            ],
        );
        client.chat(&req).unwrap();
        let m = &server.requests()[0].body["messages"];
        assert_eq!(m[1]["role"], "assistant");
        assert_eq!(m[1]["content"], "");
        assert_eq!(m[1]["tool_calls"][0]["id"], "c1");
        assert_eq!(m[1]["tool_calls"][0]["type"], "function");
        assert_eq!(
            m[1]["tool_calls"][0]["function"]["arguments"],
            "{\"path\":\"a\"}"
        );
        assert_eq!(m[1]["tool_calls"][1]["function"]["arguments"], "{}");
        assert_eq!(
            m[2],
            json!({"role":"tool","tool_call_id":"c1","content":"contents"})
        );
    }

    #[test]
    fn arguments_as_string_and_as_object() {
        let (_s, client) = one(chat_body(
            json!({"role":"assistant","content":null,"tool_calls":[
                {"id":"a","type":"function","function":{"name":"file_read","arguments":"{\"path\":\"src/lib.rs\"}"}},
                {"id":"b","type":"function","function":{"name":"file_read","arguments":{"path":"README.md"}}}
            ]}),
            "tool_calls",
        ));
        let resp = client.chat(&request()).unwrap();
        assert_eq!(resp.content, None);
        assert_eq!(resp.tool_calls.len(), 2);
        assert_eq!(resp.tool_calls[0].arguments, json!({"path":"src/lib.rs"}));
        assert_eq!(resp.tool_calls[1].arguments, json!({"path":"README.md"}));
        assert!(resp.tool_calls.iter().all(LlmToolCall::is_valid));
        assert_eq!(resp.usage.prompt_tokens, 11);
        assert_eq!(resp.usage.completion_tokens, 7);
        assert_eq!(resp.usage.total(), 18);
        assert_eq!(resp.finish_reason.as_deref(), Some("tool_calls"));
        assert!(resp.warnings.is_empty(), "{:?}", resp.warnings);
    }

    #[test]
    fn invalid_json_arguments_are_kept_with_an_error() {
        let (_s, client) = one(chat_body(
            json!({"tool_calls":[{"id":"a","function":{"name":"file_read","arguments":"{path: src/lib.rs"}}]}),
            "tool_calls",
        ));
        let resp = client.chat(&request()).unwrap();
        let call = &resp.tool_calls[0];
        assert_eq!(call.name, "file_read");
        assert_eq!(call.arguments, json!("{path: src/lib.rs"));
        assert!(
            call.parse_error
                .as_deref()
                .unwrap()
                .contains("not valid JSON")
        );
        assert!(
            call.parse_error_feedback()
                .unwrap()
                .contains("{path: src/lib.rs")
        );
    }

    #[test]
    fn missing_ids_are_invented_and_unique_across_turns() {
        let body = chat_body(
            json!({"tool_calls":[
                {"function":{"name":"file_read","arguments":"{\"path\":\"a\"}"}},
                {"id":"","function":{"name":"file_read","arguments":"{\"path\":\"b\"}"}}
            ]}),
            "tool_calls",
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
        assert_eq!(ids, ["call_1", "call_2", "call_3", "call_4"]);
    }

    #[test]
    fn tool_calls_found_with_finish_reason_stop_and_kept_in_order() {
        let (_s, client) = one(chat_body(
            json!({"content":"","tool_calls":[
                {"id":"1","function":{"name":"file_read","arguments":"{\"path\":\"a\"}"}},
                {"id":"2","function":{"name":"file_edit","arguments":"{}"}},
                {"id":"3","function":{"name":"file_read","arguments":"{\"path\":\"c\"}"}}
            ]}),
            "stop",
        ));
        let resp = client.chat(&request()).unwrap();
        let names: Vec<_> = resp
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str()))
            .collect();
        assert_eq!(
            names,
            [("1", "file_read"), ("2", "file_edit"), ("3", "file_read")]
        );
        assert_eq!(resp.finish_reason.as_deref(), Some("stop"));
        assert_eq!(resp.content, None);
    }

    #[test]
    fn legacy_function_call_is_accepted() {
        let (_s, client) = one(chat_body(
            json!({"content":null,"function_call":{"name":"file_read","arguments":"{\"path\":\"x\"}"}}),
            "function_call",
        ));
        let resp = client.chat(&request()).unwrap();
        assert_eq!(resp.tool_calls.len(), 1);
        assert_eq!(resp.tool_calls[0].name, "file_read");
        assert_eq!(resp.tool_calls[0].id, "call_1");
    }

    #[test]
    fn tool_call_written_as_content_is_recovered() {
        let (_s, client) = one(chat_body(
            json!({"content":"{\"name\": \"file_read\", \"arguments\": {\"path\": \"a\"}}"}),
            "stop",
        ));
        let resp = client.chat(&request()).unwrap();
        assert_eq!(resp.content, None);
        assert_eq!(resp.tool_calls[0].name, "file_read");
        assert!(resp.warnings.iter().any(|w| w.contains("recovered")));
    }

    #[test]
    fn length_adds_a_warning_and_missing_usage_is_zero() {
        let (_s, client) =
            one(json!({"choices":[{"message":{"content":"partial"},"finish_reason":"length"}]}));
        let resp = client.chat(&request()).unwrap();
        assert_eq!(resp.content.as_deref(), Some("partial"));
        assert!(
            resp.warnings.iter().any(|w| w.contains("truncated")),
            "{:?}",
            resp.warnings
        );
        assert_eq!(resp.usage, Usage::default());
    }

    #[test]
    fn auth_errors_are_permanent_and_never_show_the_key() {
        for status in [401u16, 403] {
            let server = ScriptedServer::start(vec![ScriptedResponse::json(
                status,
                json!({"error":{"message":"Incorrect API key provided: sk-test-SECRET-42"}}),
            )]);
            let client = with_key(&server, "sk-test-SECRET-42");
            let err = client.chat(&request()).unwrap_err();
            assert!(matches!(err, LlmError::Auth { .. }), "{err:?}");
            assert!(!err.is_retryable());
            assert_eq!(err.status(), Some(status));
            let msg = err.to_string();
            assert!(msg.contains("ACODE_LLM_API_KEY"), "{msg}");
            assert!(!msg.contains("SECRET"), "{msg}");
            assert!(!format!("{err:?}").contains("SECRET"));
            assert!(!err.response_body().unwrap().contains("SECRET"));
        }
    }

    #[test]
    fn not_found_names_model_and_url() {
        let server = ScriptedServer::start(vec![ScriptedResponse::json(
            404,
            json!({"error":{"message":"model \"test-model\" not found, try pulling it first"}}),
        )]);
        let err = client_for(&server).chat(&request()).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, LlmError::ModelNotFound { .. }));
        assert!(
            msg.contains("'test-model'") && msg.contains(&server.url()),
            "{msg}"
        );
        assert!(!err.is_retryable());
    }

    #[test]
    fn rate_limit_is_retryable_with_retry_after() {
        let server = ScriptedServer::start(vec![
            ScriptedResponse::text(429, "slow down").with_header("Retry-After", "1"),
        ]);
        let err = client_for(&server).chat(&request()).unwrap_err();
        assert!(err.is_retryable());
        assert_eq!(err.retry_after(), Some(Duration::from_secs(1)));
        assert_eq!(err.status(), Some(429));
        assert!(err.to_string().contains("slow down"));
    }

    #[test]
    fn server_errors_are_retryable_and_client_errors_not() {
        for (status, retryable) in [
            (500u16, true),
            (503, true),
            (529, true),
            (408, true),
            (400, false),
            (422, false),
        ] {
            let server = ScriptedServer::start(vec![ScriptedResponse::text(status, "busy")]);
            let err = client_for(&server).chat(&request()).unwrap_err();
            assert_eq!(err.is_retryable(), retryable, "{status}: {err}");
            assert_eq!(err.retry_after(), None);
            assert_eq!(err.response_body(), Some("busy"));
        }
    }

    #[test]
    fn connection_refused_is_retryable() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let client = client(LlmConfig::new(format!("http://127.0.0.1:{port}/v1"), "m"));
        let err = client.chat(&request()).unwrap_err();
        assert!(matches!(err, LlmError::ConnectionRefused { .. }), "{err:?}");
        assert!(err.is_retryable());
    }

    #[test]
    fn reset_connection_is_retryable() {
        let server = ScriptedServer::start(vec![ScriptedResponse::reset()]);
        let err = client_for(&server).chat(&request()).unwrap_err();
        assert!(matches!(err, LlmError::ConnectionReset { .. }), "{err:?}");
        assert!(err.is_retryable());
    }

    #[test]
    fn slow_server_times_out_and_is_retryable() {
        let server = ScriptedServer::start(vec![
            ScriptedResponse::json(200, chat_body(json!({"content":"late"}), "stop"))
                .with_delay(Duration::from_millis(1500)),
        ]);
        let mut config = LlmConfig::new(server.url(), "m");
        config.timeout = Duration::from_millis(200);
        let err = client(config).chat(&request()).unwrap_err();
        assert!(matches!(err, LlmError::Timeout { .. }), "{err:?}");
        assert!(err.is_retryable());
    }

    #[test]
    fn malformed_bodies_are_clear_errors() {
        let cases: Vec<(ScriptedResponse, &str)> = vec![
            (ScriptedResponse::text(200, "{not json"), "not JSON"),
            (ScriptedResponse::text(200, "data: {}\n\n"), "stream"),
            (ScriptedResponse::json(200, json!([1])), "not an object"),
            (
                ScriptedResponse::json(200, json!({"choices": []})),
                "`choices`",
            ),
            (
                ScriptedResponse::json(200, json!({"object":"x"})),
                "`choices`",
            ),
            (
                ScriptedResponse::json(200, json!({"choices":[{"text":"x"}]})),
                "message",
            ),
            (
                ScriptedResponse::json(200, json!({"error":{"message":"context overflow"}})),
                "context overflow",
            ),
        ];
        for (resp, needle) in cases {
            let server = ScriptedServer::start(vec![resp]);
            let err = client_for(&server).chat(&request()).unwrap_err();
            assert!(matches!(err, LlmError::Malformed { .. }), "{err:?}");
            assert!(err.to_string().contains(needle), "{needle}: {err}");
            assert!(!err.is_retryable());
        }
    }

    #[test]
    fn empty_answer_is_an_error() {
        for message in [
            json!({"content": ""}),
            json!({"content": null}),
            json!({}),
            json!({"content":"  ", "tool_calls": []}),
        ] {
            let (_s, client) = one(chat_body(message, "stop"));
            let err = client.chat(&request()).unwrap_err();
            assert!(matches!(err, LlmError::EmptyAnswer { .. }), "{err:?}");
            assert!(!err.is_retryable());
        }
    }

    #[test]
    fn oversized_response_is_refused() {
        let big = "x".repeat(64 * 1024);
        let server = ScriptedServer::start(vec![ScriptedResponse::json(
            200,
            chat_body(json!({"content": big}), "stop"),
        )]);
        let mut config = LlmConfig::new(server.url(), "m");
        config.max_response_bytes = 16 * 1024;
        let err = client(config).chat(&request()).unwrap_err();
        assert!(
            matches!(err, LlmError::TooLarge { limit: 16384, .. }),
            "{err:?}"
        );
        assert!(!err.is_retryable());
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
    fn client_factory_picks_the_provider() {
        let mut config = LlmConfig::new("http://127.0.0.1:9/v1", "m");
        assert!(
            crate::llm::client(config.clone())
                .describe()
                .starts_with("openai ")
        );
        config.provider = Provider::Ollama;
        assert!(crate::llm::client(config).describe().starts_with("ollama "));
    }
}
