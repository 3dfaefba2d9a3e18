//! Tolerant reading of the pieces of a chat answer that every provider shares: message text, tool
//! calls and their arguments. Tolerant means "accept every shape a real server is known to send";
//! it never means "guess": an argument string that is not JSON stays a string, with an error the
//! loop reports back to the model.
//!
//! Public (hidden) only so the fuzz targets reach the providers' `parse_response` with an
//! [`IdAllocator`] (docs/fuzzing.md).

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value};

use super::{ChatResponse, LlmError, LlmToolCall, ToolSpec, Usage, react};

/// Hands out ids for tool calls that came without one (or with a duplicate), unique per client.
pub struct IdAllocator<'a> {
    counter: &'a AtomicU64,
    seen: HashSet<String>,
}

impl<'a> IdAllocator<'a> {
    /// An allocator drawing from `counter` (owned by the client, so ids stay unique across turns).
    pub fn new(counter: &'a AtomicU64) -> Self {
        IdAllocator {
            counter,
            seen: HashSet::new(),
        }
    }

    /// `given` if it is a non-empty id not used earlier in this answer, else a fresh `call_<n>`;
    /// says in `warnings` when it had to invent one for a duplicate.
    pub fn id_for(&mut self, given: Option<&str>, warnings: &mut Vec<String>) -> String {
        if let Some(id) = given.map(str::trim).filter(|id| !id.is_empty()) {
            if self.seen.insert(id.to_string()) {
                return id.to_string();
            }
            warnings.push(format!(
                "duplicate tool call id '{id}' in one answer; a new id was assigned"
            ));
        }
        loop {
            let n = self.counter.fetch_add(1, Ordering::Relaxed) + 1;
            let id = format!("call_{n}");
            if self.seen.insert(id.clone()) {
                return id;
            }
        }
    }
}

/// Message text from `content`: a string, `null`/absent, or an array of `{type:"text", text}` parts.
/// Whitespace-only text counts as none, so "empty answer" detection is not fooled by `"\n"`.
pub(crate) fn content_text(content: Option<&Value>) -> Option<String> {
    let text = match content? {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.as_str()),
                Value::Object(o) => o.get("text").and_then(Value::as_str),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join(""),
        Value::Null => return None,
        other => other.to_string(),
    };
    if text.trim().is_empty() {
        None
    } else {
        Some(text)
    }
}

/// Arguments as sent: an object; a JSON string holding an object (the OpenAI format, possibly
/// double-encoded); empty/absent/`null` meaning no arguments. Anything else is kept as sent, with
/// an error message.
pub(crate) fn arguments(raw: Option<&Value>) -> (Value, Option<String>) {
    match raw {
        None | Some(Value::Null) => (Value::Object(Map::new()), None),
        Some(Value::Object(_)) => (raw.cloned().unwrap_or_default(), None),
        Some(Value::String(s)) => {
            if s.trim().is_empty() {
                return (Value::Object(Map::new()), None);
            }
            match serde_json::from_str::<Value>(s) {
                Ok(obj @ Value::Object(_)) => (obj, None),
                // Some models JSON-encode the arguments twice: "\"{\\\"path\\\": ...}\"".
                Ok(Value::String(inner)) => match serde_json::from_str::<Value>(&inner) {
                    Ok(obj @ Value::Object(_)) => (obj, None),
                    _ => (
                        Value::String(s.clone()),
                        Some("arguments must be a JSON object, got a JSON string".to_string()),
                    ),
                },
                Ok(other) => (
                    Value::String(s.clone()),
                    Some(format!(
                        "arguments must be a JSON object, got {}",
                        crate::util::json_kind(&other)
                    )),
                ),
                Err(e) => (
                    Value::String(s.clone()),
                    Some(format!("arguments are not valid JSON ({e})")),
                ),
            }
        }
        Some(other) => (
            other.clone(),
            Some(format!(
                "arguments must be a JSON object, got {}",
                crate::util::json_kind(other)
            )),
        ),
    }
}

/// One tool call from `{id?, type?, function: {name, arguments}}`, or the flat `{name, arguments}`
/// some servers send. Never fails: a call without a usable name keeps a `parse_error`.
pub(crate) fn tool_call(
    value: &Value,
    ids: &mut IdAllocator,
    warnings: &mut Vec<String>,
) -> LlmToolCall {
    let function = value
        .get("function")
        .filter(|f| f.is_object())
        .unwrap_or(value);
    let name = function
        .get("name")
        .and_then(Value::as_str)
        .map(str::trim)
        .unwrap_or_default()
        .to_string();
    let raw_args = function
        .get("arguments")
        .or_else(|| function.get("parameters"));
    let (arguments, mut parse_error) = arguments(raw_args);
    if name.is_empty() {
        parse_error = Some("the tool call has no function name".to_string());
    }
    // A missing id is normal (Ollama's native API never sends one), so it is not a warning.
    let given_id = value.get("id").and_then(Value::as_str);
    LlmToolCall {
        id: ids.id_for(given_id, warnings),
        name,
        arguments,
        parse_error,
    }
}

/// The tool calls in `message.tool_calls` (an array, or a single object) and, when there are none,
/// the legacy `message.function_call`.
pub(crate) fn tool_calls(
    message: &Value,
    ids: &mut IdAllocator,
    warnings: &mut Vec<String>,
) -> Vec<LlmToolCall> {
    let mut calls = Vec::new();
    match message.get("tool_calls") {
        Some(Value::Array(items)) => {
            for item in items {
                if item.is_object() {
                    calls.push(tool_call(item, ids, warnings));
                } else {
                    warnings.push(format!(
                        "ignored a tool call that is not an object: {}",
                        super::excerpt(&item.to_string(), 80)
                    ));
                }
            }
        }
        Some(single @ Value::Object(_)) => calls.push(tool_call(single, ids, warnings)),
        Some(Value::Null) | None => {}
        Some(other) => warnings.push(format!(
            "ignored `tool_calls` of type {}",
            crate::util::json_kind(other)
        )),
    }
    if calls.is_empty()
        && let Some(legacy) = message.get("function_call").filter(|f| f.is_object())
    {
        calls.push(tool_call(legacy, ids, warnings));
    }
    calls
}

/// A tool call some llama.cpp/Ollama builds leave in the message text instead of `tool_calls`.
///
/// Deliberately strict, so ordinary answers are never mistaken for calls: the whole text (after
/// trimming and removing one code fence) must be ONE JSON object with exactly a string `name` that
/// is one of the offered tools and an object `arguments` (or `parameters`), and nothing else.
pub(crate) fn tool_call_in_content(
    content: &str,
    tools: &[ToolSpec],
    ids: &mut IdAllocator,
    warnings: &mut Vec<String>,
) -> Option<LlmToolCall> {
    if tools.is_empty() {
        return None;
    }
    let text = react::strip_code_fence(content.trim());
    let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(text) else {
        return None;
    };
    let name = obj.get("name")?.as_str()?;
    let args_key = ["arguments", "parameters"]
        .into_iter()
        .find(|k| obj.contains_key(*k))?;
    if obj.len() != 2 || !obj.get(args_key)?.is_object() {
        return None;
    }
    if !tools.iter().any(|t| t.name == name) {
        return None;
    }
    warnings.push(format!(
        "the model wrote a call to '{name}' as text instead of a tool call; it was recovered"
    ));
    Some(LlmToolCall {
        id: ids.id_for(None, warnings),
        name: name.to_string(),
        arguments: obj.get(args_key).cloned().unwrap_or_default(),
        parse_error: None,
    })
}

/// A token count that may be missing, negative, fractional, a string or absurd: saturates at
/// [`super::MAX_COUNTED_TOKENS`] on the way in, so no sum of counts can overflow later.
pub(crate) fn count(value: Option<&Value>) -> u64 {
    let n = match value {
        Some(Value::Number(n)) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f > 0.0).map(|f| f as u64))
            .unwrap_or(0),
        Some(Value::String(s)) => s.trim().parse().unwrap_or(0),
        _ => 0,
    };
    n.min(super::MAX_COUNTED_TOKENS)
}

/// The warning recorded for a finish reason that means the answer is incomplete. Covers the
/// OpenAI/Ollama names (`length`, `content_filter`) and the Anthropic `stop_reason` names
/// (`max_tokens`, `model_context_window_exceeded`, `refusal`), so every provider warns alike.
pub(crate) fn finish_warning(finish_reason: Option<&str>) -> Option<String> {
    match finish_reason? {
        reason @ ("length" | "max_tokens" | "model_context_window_exceeded") => Some(format!(
            "the answer was truncated (finish_reason \"{reason}\": max_tokens or the context \
             window was reached)"
        )),
        "content_filter" => Some("the answer was cut by the server's content filter".to_string()),
        "refusal" => Some("the model declined to answer (finish_reason \"refusal\")".to_string()),
        _ => None,
    }
}

/// Assembles a provider's parsed answer, refusing one with neither text nor tool calls. The request
/// and response bodies are filled in by the caller, which has them.
pub(crate) fn response(
    content: Option<String>,
    tool_calls: Vec<LlmToolCall>,
    finish_reason: Option<String>,
    usage: Usage,
    warnings: Vec<String>,
    url: &str,
    body: &str,
) -> Result<ChatResponse, LlmError> {
    if content.is_none() && tool_calls.is_empty() {
        return Err(LlmError::EmptyAnswer {
            url: url.to_string(),
            finish_reason,
            body: body.to_string(),
        });
    }
    Ok(ChatResponse {
        content,
        tool_calls,
        finish_reason,
        usage,
        warnings,
        request_body: String::new(),
        response_body: String::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn arguments_shapes() {
        assert_eq!(arguments(None), (json!({}), None));
        assert_eq!(arguments(Some(&json!(null))), (json!({}), None));
        assert_eq!(arguments(Some(&json!(""))), (json!({}), None));
        assert_eq!(arguments(Some(&json!({"a": 1}))), (json!({"a": 1}), None));
        assert_eq!(
            arguments(Some(&json!("{\"a\":1}"))),
            (json!({"a": 1}), None)
        );
        let double = json!(serde_json::to_string("{\"a\":1}").unwrap());
        assert_eq!(arguments(Some(&double)), (json!({"a": 1}), None));

        let (v, e) = arguments(Some(&json!("{a: 1")));
        assert_eq!(v, json!("{a: 1"));
        assert!(e.unwrap().contains("not valid JSON"));
        let (v, e) = arguments(Some(&json!("[1,2]")));
        assert_eq!(v, json!("[1,2]"));
        assert!(e.unwrap().contains("an array"));
        let (v, e) = arguments(Some(&json!(5)));
        assert_eq!(v, json!(5));
        assert!(e.unwrap().contains("a number"));
    }

    #[test]
    fn ids_invented_and_deduplicated() {
        let counter = AtomicU64::new(0);
        let mut ids = IdAllocator::new(&counter);
        let mut w = Vec::new();
        assert_eq!(ids.id_for(None, &mut w), "call_1");
        assert_eq!(ids.id_for(Some(""), &mut w), "call_2");
        assert_eq!(ids.id_for(Some("x"), &mut w), "x");
        assert_eq!(ids.id_for(Some("x"), &mut w), "call_3");
        assert_eq!(w.len(), 1);
        // A server id that collides with an invented one is replaced too.
        assert_eq!(ids.id_for(Some("call_1"), &mut w), "call_4");
    }

    #[test]
    fn content_forms() {
        assert_eq!(content_text(None), None);
        assert_eq!(content_text(Some(&json!(null))), None);
        assert_eq!(content_text(Some(&json!(" \n"))), None);
        assert_eq!(content_text(Some(&json!("hi"))), Some("hi".into()));
        assert_eq!(
            content_text(Some(
                &json!([{"type":"text","text":"a"},{"type":"text","text":"b"}])
            )),
            Some("ab".into())
        );
    }

    #[test]
    fn content_tool_call_is_strict() {
        let tools = vec![ToolSpec {
            name: "file_read".into(),
            description: String::new(),
            parameters: json!({}),
        }];
        let counter = AtomicU64::new(0);
        let mut ids = IdAllocator::new(&counter);
        let mut w = Vec::new();
        let ok = tool_call_in_content(
            "```json\n{\"name\":\"file_read\",\"arguments\":{\"path\":\"a\"}}\n```",
            &tools,
            &mut ids,
            &mut w,
        )
        .unwrap();
        assert_eq!(ok.name, "file_read");
        assert_eq!(ok.arguments, json!({"path": "a"}));
        for text in [
            "Sure: {\"name\":\"file_read\",\"arguments\":{}}",
            "{\"name\":\"rm\",\"arguments\":{}}",
            "{\"name\":\"file_read\",\"arguments\":\"{}\"}",
            "{\"name\":\"file_read\",\"arguments\":{},\"extra\":1}",
            "{\"name\":\"file_read\"}",
        ] {
            assert!(
                tool_call_in_content(text, &tools, &mut ids, &mut w).is_none(),
                "{text}"
            );
        }
        assert!(
            tool_call_in_content(
                "{\"name\":\"file_read\",\"arguments\":{}}",
                &[],
                &mut ids,
                &mut w
            )
            .is_none()
        );
    }

    #[test]
    fn finish_warnings() {
        let length = finish_warning(Some("length")).unwrap();
        assert_eq!(
            length,
            "the answer was truncated (finish_reason \"length\": max_tokens or the context window \
             was reached)"
        );
        for reason in ["max_tokens", "model_context_window_exceeded"] {
            let w = finish_warning(Some(reason)).unwrap();
            assert!(w.contains("truncated") && w.contains(reason), "{w}");
        }
        assert!(
            finish_warning(Some("refusal"))
                .unwrap()
                .contains("declined")
        );
        for quiet in [None, Some("stop"), Some("end_turn"), Some("tool_use")] {
            assert_eq!(finish_warning(quiet), None);
        }
    }

    #[test]
    fn counts() {
        assert_eq!(count(Some(&json!(12))), 12);
        assert_eq!(count(Some(&json!(-3))), 0);
        assert_eq!(count(Some(&json!("7"))), 7);
        assert_eq!(count(None), 0);
        assert_eq!(
            count(Some(&json!(u64::MAX))),
            super::super::MAX_COUNTED_TOKENS
        );
        assert_eq!(count(Some(&json!(1e300))), super::super::MAX_COUNTED_TOKENS);
    }
}
