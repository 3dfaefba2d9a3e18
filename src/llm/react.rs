//! The `react` tool protocol, for models and servers without native tool calling (SPEC §7).
//!
//! The tools are described in the system prompt and the model answers every turn with one JSON
//! object: `{"thought": ..., "action": "<tool>", "action_input": {...}}` to call a tool, or
//! `{"thought": ..., "final_answer": "..."}` to finish. The loop runs the action and sends the
//! result back as a user message ([`observation`]). Parsing is tolerant of what small models wrap
//! around the object (code fences, prose before and after) but strict about the object itself.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;
use serde_json::Value;

use super::ToolSpec;

/// How an agent step exchanges tool calls with the model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolProtocol {
    /// The server's own tool calling (`tools` in the request, `tool_calls` in the answer).
    #[default]
    Native,
    /// The JSON text protocol of this module.
    React,
}

impl ToolProtocol {
    /// The name used by `--tool-protocol`.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolProtocol::Native => "native",
            ToolProtocol::React => "react",
        }
    }
}

impl fmt::Display for ToolProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ToolProtocol {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "native" => Ok(ToolProtocol::Native),
            "react" => Ok(ToolProtocol::React),
            other => Err(format!(
                "unknown tool protocol '{other}' (expected 'native' or 'react')"
            )),
        }
    }
}

/// One parsed model turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum ReactStep {
    /// Call `tool` with `input`.
    Action {
        /// The model's reasoning (may be empty).
        thought: String,
        /// The tool name as written (the loop checks it is allowed).
        tool: String,
        /// The arguments object.
        input: Value,
    },
    /// The step is done.
    Final {
        /// The model's reasoning (may be empty).
        thought: String,
        /// The answer.
        answer: String,
    },
}

/// The system-prompt section that teaches the protocol and lists `tools` with their schemas. The
/// loop puts the step instruction and workspace facts around it.
pub fn system_prompt(tools: &[ToolSpec]) -> String {
    let mut out = String::from(
        "You can use tools. Answer EVERY turn with exactly one JSON object and nothing else.\n\
         To call a tool:\n\
         {\"thought\": \"why this tool\", \"action\": \"<tool name>\", \"action_input\": {<arguments>}}\n\
         When the task is complete:\n\
         {\"thought\": \"why you are done\", \"final_answer\": \"<short summary of what you did>\"}\n\
         Rules: call one tool per answer; `action_input` is a JSON object matching the tool's \
         schema; after each call you receive an Observation with the result; never invent \
         observations.\n\nTools:\n",
    );
    if tools.is_empty() {
        out.push_str("(none: answer with final_answer)\n");
    }
    for tool in tools {
        let schema = serde_json::to_string(&tool.parameters).unwrap_or_else(|_| "{}".to_string());
        out.push_str(&format!(
            "- {}: {}\n  arguments schema: {schema}\n",
            tool.name, tool.description
        ));
    }
    out
}

/// Parses one model answer. The error text is meant to be sent back to the model as-is.
pub fn parse(content: &str) -> Result<ReactStep, String> {
    let object = first_json_object(content).ok_or_else(|| {
        "no JSON object found; answer with {\"thought\": ..., \"action\": ..., \"action_input\": \
         {...}} or {\"thought\": ..., \"final_answer\": ...}"
            .to_string()
    })?;
    let thought = match object.get("thought") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err("`thought` must be a string".to_string()),
    };
    let action = object.get("action").filter(|v| !v.is_null());
    let final_answer = object.get("final_answer").filter(|v| !v.is_null());
    match (action, final_answer) {
        (Some(_), Some(_)) => Err("give either `action` or `final_answer`, not both".to_string()),
        (None, None) => Err("the object has neither `action` nor `final_answer`".to_string()),
        (None, Some(answer)) => match answer {
            Value::String(answer) => Ok(ReactStep::Final {
                thought,
                answer: answer.clone(),
            }),
            _ => Err("`final_answer` must be a string".to_string()),
        },
        (Some(action), None) => {
            let tool = action
                .as_str()
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .ok_or("`action` must be a non-empty tool name")?
                .to_string();
            let input = match object.get("action_input") {
                None | Some(Value::Null) => Value::Object(Default::default()),
                Some(obj @ Value::Object(_)) => obj.clone(),
                // Models often write the input as a JSON string; accept it only if it holds an object.
                Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                    Ok(obj @ Value::Object(_)) => obj,
                    _ => return Err("`action_input` must be a JSON object".to_string()),
                },
                Some(_) => return Err("`action_input` must be a JSON object".to_string()),
            };
            Ok(ReactStep::Action {
                thought,
                tool,
                input,
            })
        }
    }
}

/// A tool result as the next user message.
pub fn observation(result: &str) -> String {
    format!(
        "Observation:\n{result}\n\nContinue: answer with one JSON object, either the next \
         action or the final_answer."
    )
}

/// The text inside a single surrounding code fence (```` ```json ... ``` ````), else `text`.
pub(crate) fn strip_code_fence(text: &str) -> &str {
    let t = text.trim();
    let Some(rest) = t.strip_prefix("```") else {
        return t;
    };
    let Some(body) = rest.strip_suffix("```") else {
        return t;
    };
    // Drop the info string (`json`) on the opening line.
    match body.find('\n') {
        Some(nl) => body[nl + 1..].trim(),
        None => body.trim(),
    }
}

/// How many `{` positions [`first_json_object`] tries before giving up, so hostile text full of
/// braces costs bounded time.
const MAX_CANDIDATES: usize = 64;

/// The first balanced `{...}` in `text` that parses as a JSON object with an `action` or
/// `final_answer` key, skipping braces inside JSON strings; failing that, the first JSON object at
/// all (so its shape error can be reported). Prose, code fences (and code in them, like `fn f() {}`)
/// and anything after the object are ignored.
fn first_json_object(text: &str) -> Option<serde_json::Map<String, Value>> {
    let bytes = text.as_bytes();
    let mut start = 0;
    let mut first_any = None;
    for _ in 0..MAX_CANDIDATES {
        let Some(offset) = text[start..].find('{') else {
            break;
        };
        let open = start + offset;
        if let Some(close) = matching_brace(bytes, open)
            && let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(&text[open..=close])
        {
            if obj.contains_key("action") || obj.contains_key("final_answer") {
                return Some(obj);
            }
            first_any.get_or_insert(obj);
        }
        start = open + 1;
    }
    first_any
}

/// The index of the `}` closing the `{` at `open`, honouring JSON string quoting.
fn matching_brace(bytes: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, &b) in bytes.iter().enumerate().skip(open) {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' => depth += 1,
            b'}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn plain_action() {
        let step =
            parse(r#"{"thought":"look","action":"file_read","action_input":{"path":"a.rs"}}"#)
                .unwrap();
        assert_eq!(
            step,
            ReactStep::Action {
                thought: "look".into(),
                tool: "file_read".into(),
                input: json!({"path": "a.rs"}),
            }
        );
    }

    #[test]
    fn fenced_with_prose_around() {
        let text = "Sure! I will read the file first.\n```json\n{\"thought\": \"need {context}\", \
                    \"action\": \"file_read\", \"action_input\": {\"path\": \"src/lib.rs\"}}\n```\n\
                    Let me know {if} that helps.";
        match parse(text).unwrap() {
            ReactStep::Action {
                tool,
                input,
                thought,
            } => {
                assert_eq!(tool, "file_read");
                assert_eq!(input, json!({"path": "src/lib.rs"}));
                assert_eq!(thought, "need {context}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn skips_brace_noise_before_the_object() {
        let text = "Using fn main() {} as an example: {\"final_answer\": \"done\"}";
        assert_eq!(
            parse(text).unwrap(),
            ReactStep::Final {
                thought: String::new(),
                answer: "done".into()
            }
        );
    }

    #[test]
    fn final_answer() {
        let step =
            parse(r#"{"thought":"all good","final_answer":"Added is_valid_email"}"#).unwrap();
        assert_eq!(
            step,
            ReactStep::Final {
                thought: "all good".into(),
                answer: "Added is_valid_email".into()
            }
        );
    }

    #[test]
    fn action_input_as_json_string_or_missing() {
        match parse(r#"{"action":"file_glob","action_input":"{\"pattern\":\"*.rs\"}"}"#).unwrap() {
            ReactStep::Action { input, .. } => assert_eq!(input, json!({"pattern": "*.rs"})),
            other => panic!("{other:?}"),
        }
        match parse(r#"{"action":"list_directory"}"#).unwrap() {
            ReactStep::Action { input, .. } => assert_eq!(input, json!({})),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_shapes_are_rejected_with_reasons() {
        for (text, needle) in [
            ("no json here", "no JSON object"),
            ("{\"thought\": \"hmm\"}", "neither"),
            ("{\"action\":\"a\",\"final_answer\":\"b\"}", "not both"),
            ("{\"action\":\"\"}", "non-empty"),
            ("{\"action\":42}", "non-empty"),
            ("{\"action\":\"a\",\"action_input\":[1]}", "action_input"),
            (
                "{\"action\":\"a\",\"action_input\":\"not json\"}",
                "action_input",
            ),
            ("{\"final_answer\": {\"x\":1}}", "final_answer"),
            ("{\"thought\": 3, \"final_answer\": \"x\"}", "thought"),
            ("{\"action\": \"unterminated\"", "no JSON object"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }

    #[test]
    fn prompt_lists_tools_with_schemas() {
        let prompt = system_prompt(&[ToolSpec {
            name: "file_read".into(),
            description: "Read a file".into(),
            parameters: json!({"type":"object","required":["path"]}),
        }]);
        assert!(prompt.contains("- file_read: Read a file"));
        assert!(prompt.contains("\"required\":[\"path\"]"));
        assert!(prompt.contains("final_answer") && prompt.contains("action_input"));
        assert!(observation("42 lines").starts_with("Observation:\n42 lines"));
    }

    #[test]
    fn protocol_from_str() {
        assert_eq!("native".parse::<ToolProtocol>(), Ok(ToolProtocol::Native));
        assert_eq!("ReAct".parse::<ToolProtocol>(), Ok(ToolProtocol::React));
        assert!("json".parse::<ToolProtocol>().is_err());
        assert_eq!(ToolProtocol::default().to_string(), "native");
    }

    #[test]
    fn code_fence_stripping() {
        assert_eq!(strip_code_fence("```json\n{}\n```"), "{}");
        assert_eq!(strip_code_fence("```\n{}\n```"), "{}");
        assert_eq!(strip_code_fence(" {} "), "{}");
        assert_eq!(strip_code_fence("```{}"), "```{}");
    }
}
