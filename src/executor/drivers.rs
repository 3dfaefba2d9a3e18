//! Step drivers: what produces a step's tool calls.
//!
//! A direct step produces exactly one call, the plan's. (Agent steps, where an LLM chooses the calls,
//! plug in here too.) After the driver, the step's optional `verify` command decides success.

use serde_json::Value;

use super::call::StepContext;
use super::verify::{call_options, verify};
use super::{ExecutionError, StepOutcome};
use crate::error::ErrorKind;
use crate::plan::Plan;
use crate::plan::variables::Variables;
use crate::tools::ToolCall;

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
        return Ok(StepOutcome {
            excerpt: result.excerpt,
            output: Some(result.content),
            ..StepOutcome::failed(kind, msg)
        });
    }
    if let Some(failure) = verify(ctx, plan, vars)? {
        return Ok(StepOutcome::failed(ErrorKind::VerificationFailed, failure));
    }
    // The result as the tool returned it; the executor bounds it (and drops it at once when the
    // caller keeps no step results, so a long plan's memory stays flat).
    Ok(StepOutcome {
        failure: None,
        output: Some(result.content),
        excerpt: None,
    })
}
