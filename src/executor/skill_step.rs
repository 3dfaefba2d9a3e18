//! The executor's half of skills (SPEC §7, [`crate::plan::skills`]): resolve an agent step's
//! skill, run its injected `` !`COMMAND` `` lines as ordinary recorded `run_command` calls (same
//! checks, sandbox, confirmation and record as a plan step), and build the prompt.

use serde_json::{Value, json};

use super::call::StepContext;
use super::verify::call_options;
use super::{ExecutionError, StepOutcome};
use crate::error::ErrorKind;
use crate::plan::Plan;
use crate::plan::skills::{self, Piece};
use crate::tools::ToolCall;

/// What a skill makes of an agent step.
pub(super) struct Prepared {
    /// The first user message: the expanded body with command output in place.
    pub instruction: String,
    /// The tools offered: the step's, narrowed by `allowed-tools`.
    pub allowed: Vec<String>,
    /// The skill's `model`, used unless the step names one.
    pub model: Option<String>,
    /// The skill's `max-turns`, used unless the step sets `max_turns`.
    pub max_turns: Option<u32>,
}

/// Resolves and prepares the step's skill; `Ok(Ok(None))` when the step names none,
/// `Ok(Err(outcome))` when the step must fail (skill gone or broken, an injected command failed).
pub(super) fn prepare(
    ctx: &mut StepContext,
    plan: &Plan,
    args: &Value,
) -> Result<Result<Option<Prepared>, StepOutcome>, ExecutionError> {
    let resolved = match skills::resolve_step(ctx.run.workspace, args) {
        Ok(Some(r)) => r,
        Ok(None) => return Ok(Ok(None)),
        Err(e) => {
            return Ok(Err(StepOutcome::failed(
                ErrorKind::InvalidArguments,
                e.to_string(),
            )));
        }
    };
    let mut instruction = String::new();
    for piece in &resolved.pieces {
        match piece {
            Piece::Text { text } => instruction.push_str(text),
            Piece::Command { command, line } => {
                let call = ToolCall {
                    call_id: ctx.new_call_id(),
                    step_id: ctx.step.step_id.clone(),
                    tool: "run_command".to_string(),
                    arguments: json!({ "command": command }),
                    turn: None,
                };
                let opts = call_options(ctx, plan);
                let result = ctx.call_tool(call, &opts)?;
                if !result.success {
                    let kind = result.error_kind.unwrap_or(ErrorKind::ToolFailed);
                    return Ok(Err(StepOutcome::failed(
                        kind,
                        format!(
                            "skill {} line {line}: injected command `{command}` failed: {}",
                            resolved.skill.path,
                            result.error.unwrap_or_else(|| kind.to_string())
                        ),
                    )));
                }
                // The recorded (redacted) stdout, not the status summary the model gets for calls.
                let stdout = ctx
                    .run
                    .store
                    .artifact(&result.execution_id, "stdout")
                    .map(|a| a.content)
                    .unwrap_or_default();
                instruction.push_str(stdout.trim_end_matches('\n'));
                instruction.push('\n');
            }
        }
    }
    Ok(Ok(Some(Prepared {
        instruction,
        allowed: resolved.tools,
        model: resolved.skill.front.model.clone(),
        max_turns: resolved.skill.front.max_turns,
    })))
}
