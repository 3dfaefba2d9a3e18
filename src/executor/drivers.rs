//! Step drivers: what produces a step's tool calls.
//!
//! A direct step produces exactly one call, the plan's. (Agent steps, where an LLM chooses the calls,
//! plug in here too.) After the driver, the step's optional `verify` command decides success.

use std::time::Duration;

use serde_json::{Value, json};

use super::call::{CallOptions, StepContext};
use super::{ExecutionError, StepOutcome};
use crate::error::ErrorKind;
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

/// Runs a step with the driver its tool calls for.
pub fn run(
    ctx: &mut StepContext,
    plan: &Plan,
    args: &Value,
    vars: &Variables,
) -> Result<StepOutcome, ExecutionError> {
    if ctx.step.tool == crate::tools::agent::NAME {
        super::agent::run(ctx, plan, args, vars)
    } else {
        direct(ctx, plan, args, vars)
    }
}

/// The direct driver: the plan's single call, then `verify` if present.
fn direct(
    ctx: &mut StepContext,
    plan: &Plan,
    args: &Value,
    vars: &Variables,
) -> Result<StepOutcome, ExecutionError> {
    let mut opts = call_options(ctx, plan);
    opts.force_confirmation = ctx.step.requires_confirmation;
    let call = ToolCall {
        call_id: ctx.new_call_id(),
        step_id: ctx.step.step_id.clone(),
        tool: ctx.step.tool.clone(),
        arguments: args.clone(),
        turn: None,
    };
    let result = ctx.call_tool(call, &opts)?;
    if !result.success {
        let kind = result.error_kind.unwrap_or(ErrorKind::ToolFailed);
        let msg = result.error.unwrap_or_else(|| "tool failed".to_string());
        return Ok(StepOutcome::failed(kind, msg));
    }
    if let Some(failure) = verify(ctx, plan, vars)? {
        return Ok(StepOutcome::failed(ErrorKind::VerificationFailed, failure));
    }
    // The tool's output is in the database (its artifacts); keeping it in the result too would
    // grow memory with every step of a long plan.
    Ok(StepOutcome {
        failure: None,
        output: None,
    })
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
