//! The `agent` step type, registered as a tool so plans validate its arguments with the same schema
//! machinery and `acode-run tools` documents it. It is never *called*: the executor's agent driver
//! runs it, and models cannot ask for it (it is refused in a step's `tools` list).

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::args::{parse, schema_for};
use super::{Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};

/// The default turn limit of an agent step (SPEC §5).
pub const DEFAULT_MAX_TURNS: u32 = 10;

/// The registered name.
pub const NAME: &str = "agent";

/// The arguments of an agent step: the one definition its schema and its parsing come from.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentArgs {
    /// What the model must achieve. With `skill`, it is the skill's `$ARGUMENTS` (or appended to
    /// the skill's body when the body has no `$ARGUMENTS`). At least one of the two is needed.
    #[schemars(length(min = 1))]
    pub instruction: Option<String>,
    /// A skill (`.acode/skills/NAME/SKILL.md`, else `.claude/skills/NAME/SKILL.md`) whose body
    /// is the instruction (docs/agents.md).
    #[schemars(length(min = 1))]
    pub skill: Option<String>,
    /// Values for the skill's `${inputs.NAME}` placeholders.
    pub inputs: Option<serde_json::Map<String, Value>>,
    /// Tools the model may call (never `agent`).
    #[schemars(length(min = 1))]
    pub tools: Vec<String>,
    /// Model turns before the step fails with exit 31 (default 10).
    #[schemars(range(min = 1, max = 100))]
    pub max_turns: Option<u32>,
    /// Overrides --model for this step.
    #[schemars(length(min = 1))]
    pub model: Option<String>,
}

impl AgentArgs {
    /// Parses an agent step's arguments (already validated against the schema by the plan).
    pub fn parse(args: &Value) -> Result<AgentArgs, ToolError> {
        parse(NAME, args)
    }

    /// The turn limit, with the default applied.
    pub fn max_turns(&self) -> u32 {
        self.max_turns.unwrap_or(DEFAULT_MAX_TURNS)
    }
}

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
        schema_for::<AgentArgs>()
    }

    fn idempotent(&self) -> bool {
        false
    }

    fn check(&self, _args: &Value, _ctx: &ToolContext) -> Result<(), ToolError> {
        // The tools list is checked against the registry by plan validation, which can see it.
        Ok(())
    }

    fn summary(&self, args: &Value) -> String {
        AgentArgs::parse(args)
            .map(|a| match (&a.skill, &a.instruction) {
                (Some(skill), Some(i)) => {
                    format!("skill {skill}: {}", i.lines().next().unwrap_or_default())
                }
                (Some(skill), None) => format!("skill {skill}"),
                (None, i) => i
                    .as_deref()
                    .unwrap_or_default()
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_string(),
            })
            .unwrap_or_default()
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
    if args.get("instruction").is_none() && args.get("skill").is_none() {
        problems.push((
            "instruction".to_string(),
            "an agent step needs an instruction, a skill, or both".to_string(),
        ));
    }
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
                format!(
                    "unknown tool {name:?}{} (available: {})",
                    crate::suggest::did_you_mean(name, known.iter().copied()),
                    known.join(", ")
                ),
            ));
        }
    }
    problems
}
