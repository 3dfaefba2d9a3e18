//! The `agent` step type, registered as a tool so plans validate its arguments with the same schema
//! machinery and `acode-run tools` documents it. It is never *called*: the executor's agent driver
//! runs it, and models cannot ask for it (it is refused in a step's `tools` list).

use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};

/// The default turn limit of an agent step (SPEC §5).
pub const DEFAULT_MAX_TURNS: u64 = 10;

/// The registered name.
pub const NAME: &str = "agent";

/// The agent step pseudo-tool (see the module docs).
pub struct Agent;

impl Tool for Agent {
    fn name(&self) -> &'static str {
        NAME
    }

    fn description(&self) -> &'static str {
        "An agentic step: a local LLM chooses calls to the listed tools until it answers without one"
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "instruction": {"type": "string", "minLength": 1, "description": "What the model must achieve."},
                "tools": {"type": "array", "minItems": 1, "items": {"type": "string"},
                          "description": "Tools the model may call (never `agent`)."},
                "max_turns": {"type": "integer", "minimum": 1, "maximum": 100,
                              "description": "Model turns before the step fails with exit 31 (default 10)."},
                "model": {"type": "string", "minLength": 1, "description": "Overrides --model for this step."}
            },
            "required": ["instruction", "tools"],
            "additionalProperties": false
        })
    }

    fn idempotent(&self) -> bool {
        false
    }

    fn check(&self, _args: &Value, _ctx: &ToolContext) -> Result<(), ToolError> {
        // The tools list is checked against the registry by plan validation, which can see it.
        Ok(())
    }

    fn summary(&self, args: &Value) -> String {
        let instruction = args
            .get("instruction")
            .and_then(Value::as_str)
            .unwrap_or_default();
        instruction.lines().next().unwrap_or_default().to_string()
    }

    fn run(&self, _args: &Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Err(ToolError::Failed(
            "agent is a step type run by the executor, not a callable tool".to_string(),
        ))
    }
}

/// Registers the agent step type.
pub fn register(r: &mut ToolRegistry) {
    r.register(std::sync::Arc::new(Agent));
}

/// Problems with an agent step's `tools` list, as (location under `arguments`, message): unknown
/// names and `agent` itself.
pub fn check_tool_list(args: &Value, registry: &ToolRegistry) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    for (i, name) in args
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let Some(name) = name.as_str() else { continue };
        if name == NAME {
            problems.push((
                format!("tools[{i}]"),
                "an agent cannot call another agent".to_string(),
            ));
        } else if registry.get(name).is_none() {
            let known: Vec<&str> = registry.names().filter(|n| *n != NAME).collect();
            problems.push((
                format!("tools[{i}]"),
                format!("unknown tool {name:?} (available: {})", known.join(", ")),
            ));
        }
    }
    problems
}
