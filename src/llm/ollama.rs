//! Ollama's native chat API: `POST {base}/api/chat` with `stream: false`.
//!
//! Differences from the OpenAI-compatible provider: tool calls come in `message.tool_calls` with
//! `function.arguments` as an object and no id (ids are invented); the finish reason is
//! `done_reason`; token counts are `prompt_eval_count` / `eval_count`; errors are `{"error": "..."}`.
//! The base URL is Ollama's root (`http://127.0.0.1:11434`); a trailing `/v1` (the default base URL
//! of the openai provider) is removed so switching providers does not require a new URL.

use serde_json::{Map, Value, json};

use super::parse::{self, IdAllocator};
use super::provider::{HttpClient, Wire, float, replay_arguments};
use super::{ChatRequest, ChatResponse, LlmConfig, LlmError, Message, Provider, Usage, http};

/// Ollama's native wire: `POST {root}/api/chat` (a trailing `/v1` of the base URL removed), the
/// key as a bearer token.
pub const WIRE: Wire = Wire {
    provider: Provider::Ollama,
    key_header: http::KeyHeader::Bearer,
    headers: &[],
    endpoint,
    request_json,
    parse_response,
};

/// A client for Ollama's native API.
pub fn client(config: LlmConfig) -> HttpClient {
    HttpClient::new(&WIRE, config)
}

/// The endpoint called, from the configured base URL.
fn endpoint(base_url: &str) -> String {
    let base = base_url.trim().trim_end_matches('/');
    let root = base.strip_suffix("/v1").unwrap_or(base);
    http::join(root, "/api/chat")
}

/// The `/api/chat` body for `request`.
pub fn request_json(request: &ChatRequest, model: &str) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert(
        "messages".into(),
        Value::Array(messages_json(&request.messages)),
    );
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters}})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    let mut options = Map::new();
    if let Some(t) = request.temperature {
        options.insert("temperature".into(), float(t));
    }
    if let Some(m) = request.max_tokens {
        options.insert("num_predict".into(), json!(m));
    }
    if !options.is_empty() {
        body.insert("options".into(), Value::Object(options));
    }
    body.insert("stream".into(), json!(false));
    Value::Object(body)
}

fn messages_json(messages: &[Message]) -> Vec<Value> {
    messages
        .iter()
        .map(|message| match message {
            Message::System { content } => json!({"role": "system", "content": content}),
            Message::User { content } => json!({"role": "user", "content": content}),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let mut m =
                    json!({"role": "assistant", "content": content.as_deref().unwrap_or("")});
                if !tool_calls.is_empty() {
                    m["tool_calls"] = Value::Array(
                        tool_calls
                            .iter()
                            .map(|c| {
                                json!({"function": {"name": c.name,
                                                    "arguments": replay_arguments(c)}})
                            })
                            .collect(),
                    );
                }
                m
            }
            Message::Tool { call_id, content } => {
                // The native API matches results to calls by tool name, not id: look the name up.
                let mut m = json!({"role": "tool", "content": content});
                if let Some(name) = tool_name_for(messages, call_id) {
                    m["tool_name"] = json!(name);
                }
                m
            }
        })
        .collect()
}

fn tool_name_for<'a>(messages: &'a [Message], call_id: &str) -> Option<&'a str> {
    messages.iter().rev().find_map(|m| match m {
        Message::Assistant { tool_calls, .. } => tool_calls
            .iter()
            .find(|c| c.id == call_id)
            .map(|c| c.name.as_str()),
        _ => None,
    })
}

/// Reads a 2xx `/api/chat` body. `request_body`/`response_body` are left for the caller.
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
        malformed(format!(
            "the body is not one JSON object ({e}); was `stream: false` honoured?"
        ))
    })?;
    let Value::Object(root) = root else {
        return Err(malformed(format!(
            "the body is {}, not an object",
            crate::util::json_kind(&root)
        )));
    };
    let Some(message) = root.get("message").filter(|m| m.is_object()) else {
        if let Some(err) = root.get("error") {
            let msg = err
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| err.to_string());
            return Err(malformed(format!(
                "no `message`; the server reported an error: {}",
                super::excerpt(&msg, 300)
            )));
        }
        return Err(malformed(
            "`message` is missing or not an object".to_string(),
        ));
    };
    let mut warnings = Vec::new();
    let finish_reason = root
        .get("done_reason")
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
    if root.get("done").and_then(Value::as_bool) == Some(false) {
        warnings.push("the server marked the answer as not done".to_string());
    }
    let usage = Usage {
        prompt_tokens: parse::count(root.get("prompt_eval_count")),
        completion_tokens: parse::count(root.get("eval_count")),
    };
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
    use super::*;
    use crate::llm::scripted::{ScriptedResponse, ScriptedServer};
    use crate::llm::{LlmClient, LlmConfig, LlmToolCall, Provider, ToolSpec};

    fn config(server: &ScriptedServer) -> LlmConfig {
        let mut c = LlmConfig::new(server.url(), "llama3.2");
        c.provider = Provider::Ollama;
        c
    }

    fn request() -> ChatRequest {
        let mut r =
            ChatRequest::new("", vec![Message::user("weather?")]).with_tools(vec![ToolSpec {
                name: "file_read".into(),
                description: "Read".into(),
                parameters: json!({"type": "object"}),
            }]);
        r.temperature = Some(0.0);
        r.max_tokens = Some(100);
        r
    }

    #[test]
    fn native_tool_call_round_trip() {
        let server = ScriptedServer::start(vec![ScriptedResponse::json(
            200,
            json!({
                "model": "llama3.2", "created_at": "2024-07-22T20:33:28.123648Z",
                "message": {"role": "assistant", "content": "",
                    "tool_calls": [{"function": {"name": "file_read", "arguments": {"path": "a"}}},
                                   {"function": {"name": "file_read", "arguments": {"path": "b"}}}]},
                "done_reason": "stop", "done": true,
                "prompt_eval_count": 122, "eval_count": 33
            }),
        )]);
        let client = client(config(&server));
        let resp = client.chat(&request()).unwrap();
        assert_eq!(resp.content, None);
        let calls: Vec<_> = resp
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.arguments.clone()))
            .collect();
        assert_eq!(
            calls,
            [
                ("call_1", json!({"path": "a"})),
                ("call_2", json!({"path": "b"}))
            ]
        );
        assert_eq!(
            resp.usage,
            Usage {
                prompt_tokens: 122,
                completion_tokens: 33
            }
        );
        assert_eq!(resp.finish_reason.as_deref(), Some("stop"));

        let r = &server.requests()[0];
        assert_eq!(r.path, "/api/chat");
        assert_eq!(r.body["model"], "llama3.2");
        assert_eq!(r.body["stream"], false);
        assert_eq!(r.body["options"]["num_predict"], 100);
        assert_eq!(r.body["options"]["temperature"], json!(0.0));
        assert_eq!(r.body["tools"][0]["function"]["name"], "file_read");
        assert!(r.body.get("tool_choice").is_none());
        assert_eq!(resp.request_body, r.raw_body);
    }

    #[test]
    fn history_uses_argument_objects_and_tool_names() {
        let server = ScriptedServer::start(vec![ScriptedResponse::json(
            200,
            json!({"message": {"role": "assistant", "content": "done"}, "done": true, "done_reason": "length"}),
        )]);
        let client = client(config(&server));
        let req = ChatRequest::new(
            "other-model",
            vec![
                Message::user("u"),
                Message::Assistant {
                    content: None,
                    tool_calls: vec![LlmToolCall {
                        id: "call_9".into(),
                        name: "file_read".into(),
                        arguments: json!({"path": "x"}),
                        parse_error: None,
                    }],
                },
                Message::tool("call_9", "text"),
            ],
        );
        let resp = client.chat(&req).unwrap();
        assert!(resp.warnings.iter().any(|w| w.contains("truncated")));
        assert_eq!(resp.usage, Usage::default());
        let b = &server.requests()[0].body;
        assert_eq!(b["model"], "other-model");
        assert_eq!(
            b["messages"][1]["tool_calls"][0]["function"]["arguments"],
            json!({"path": "x"})
        );
        assert_eq!(
            b["messages"][2],
            json!({"role": "tool", "content": "text", "tool_name": "file_read"})
        );
    }

    #[test]
    fn native_errors() {
        let server = ScriptedServer::start(vec![
            ScriptedResponse::json(
                404,
                json!({"error": "model \"llama3.2\" not found, try pulling it first"}),
            ),
            ScriptedResponse::json(200, json!({"error": "boom"})),
            ScriptedResponse::json(
                200,
                json!({"message": {"role": "assistant", "content": ""}, "done": true}),
            ),
        ]);
        let client = client(config(&server));
        let err = client.chat(&request()).unwrap_err();
        assert!(matches!(err, LlmError::ModelNotFound { .. }), "{err:?}");
        assert!(err.to_string().contains("llama3.2"));
        let err = client.chat(&request()).unwrap_err();
        assert!(err.to_string().contains("boom"), "{err}");
        let err = client.chat(&request()).unwrap_err();
        assert!(matches!(err, LlmError::EmptyAnswer { .. }));
    }

    #[test]
    fn endpoint_strips_v1() {
        let mut c = LlmConfig::new("http://127.0.0.1:11434/v1/", "m");
        c.provider = Provider::Ollama;
        assert_eq!(client(c).endpoint(), "http://127.0.0.1:11434/api/chat");
        let c = LlmConfig::new("http://127.0.0.1:11434", "m");
        assert_eq!(client(c).endpoint(), "http://127.0.0.1:11434/api/chat");
    }
}
