//! What every step driver shares: the options of a step's calls and its `verify` command. Apart from
//! the drivers so the agent driver and the direct driver use them without importing each other.

use std::time::Duration;

use serde_json::json;

use super::ExecutionError;
use super::call::{CallOptions, StepContext};
use crate::plan::Plan;
use crate::plan::variables::Variables;
use crate::tools::ToolCall;

/// Options shared by every call a step makes: timeout and retries from the step or plan defaults.
pub fn call_options(ctx: &StepContext, plan: &Plan) -> CallOptions {
    let step = ctx.step;
    CallOptions {
        force_confirmation: false,
        retries: step.retries.unwrap_or(plan.defaults.retries),
        timeout: step
            .timeout_s
            .or(plan.defaults.timeout_s)
            .map(Duration::from_secs),
        parent_execution_id: None,
    }
}

/// Runs the step's `verify` command if it has one: `Ok(None)` when it passed (or there is none),
/// `Ok(Some(output))` with the verifier's output when it failed.
pub fn verify(
    ctx: &mut StepContext,
    plan: &Plan,
    vars: &Variables,
) -> Result<Option<String>, ExecutionError> {
    let Some(v) = &ctx.step.verify else {
        return Ok(None);
    };
    let command = match vars.substitute(&v.command) {
        Ok(c) => c,
        Err(e) => return Ok(Some(e)),
    };
    let call = ToolCall {
        call_id: format!("{}#verify", ctx.step.step_id),
        step_id: ctx.step.step_id.clone(),
        tool: "run_command".to_string(),
        arguments: json!({ "command": command }),
        turn: None,
    };
    let opts = call_options(ctx, plan);
    let result = ctx.call_tool(call, &opts)?;
    Ok((!result.success).then(|| {
        format!(
            "verify command {command:?} failed: {}\n{}",
            result.error.unwrap_or_default(),
            result.content
        )
    }))
}
