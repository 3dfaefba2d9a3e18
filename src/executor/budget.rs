//! Budgets at run time (docs/observability.md): before every request to a model, the step's and
//! the run's budgets are compared with what was spent plus what the request is expected to add,
//! and a request that would overspend is not sent — the step fails with `budget_exhausted`
//! (exit 38) and a `budget_exhausted` event says which budget, how much was used and where. The
//! run's `wall_clock` is also checked before every step starts.

use super::StepOutcome;
use super::call::{RunContext, StepContext};
use crate::error::ErrorKind;
use crate::events::EventKind;
use crate::plan::Step;
use crate::plan::budget::{Budget, Exceeded, Spend};

/// Whose budget ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// The plan's (the whole run's).
    Plan,
    /// The agent step's own.
    Step,
}

impl Scope {
    fn as_str(self) -> &'static str {
        match self {
            Scope::Plan => "plan",
            Scope::Step => "step",
        }
    }
}

/// The step's failure when sending a request to `model` that is expected to spend `next` would
/// overspend the step's or the run's budget (or one is used up already); `None` lets it go.
/// `turn` is the agent turn the request is for. A `cost_usd` budget with no price for `model` in
/// the policy fails the step too: its spend could not be counted.
pub fn before_model_call(
    ctx: &StepContext,
    model: &str,
    next: &Spend,
    turn: u32,
) -> Option<StepOutcome> {
    let step_budget = ctx.step.budget.as_deref();
    let priced = ctx.run.policy.prices.contains_key(model);
    for (scope, budget) in [
        (Scope::Step, step_budget),
        (Scope::Plan, Some(ctx.run.budget)),
    ] {
        let Some(budget) = budget else { continue };
        if budget.cost_usd.is_some() && !priced {
            return Some(StepOutcome::failed(
                ErrorKind::InvalidArguments,
                format!(
                    "the {} budget counts cost_usd, but the policy has no price for model \
                     {model:?}: add \"prices\": {{{model:?}: {{\"input_per_mtok\": …, \
                     \"output_per_mtok\": …}}}} to the policy (and approve again)",
                    scope.as_str()
                ),
            ));
        }
        let (spent, elapsed) = match scope {
            Scope::Step => (ctx.spend(), ctx.started.elapsed().as_millis() as u64),
            Scope::Plan => (ctx.run.tokens.spend(), ctx.run.tokens.elapsed_ms()),
        };
        if let Some(over) = budget.exceeded(&spent, next, elapsed) {
            return Some(exhausted(
                ctx.run,
                &ctx.step.step_id,
                scope,
                &over,
                Some(turn),
                "before a model call",
            ));
        }
    }
    None
}

/// The step's failure when the run's `wall_clock` has run out before `step` starts.
pub fn before_step(run: &RunContext, step: &Step) -> Option<StepOutcome> {
    let over = run.budget.wall_clock_exceeded(run.tokens.elapsed_ms())?;
    Some(exhausted(
        run,
        &step.step_id,
        Scope::Plan,
        &over,
        None,
        "before the step started",
    ))
}

/// Emits `budget_exhausted` and returns the step's failure.
fn exhausted(
    run: &RunContext,
    step_id: &str,
    scope: Scope,
    over: &Exceeded,
    turn: Option<u32>,
    when: &str,
) -> StepOutcome {
    let whose = match scope {
        Scope::Plan => "the plan's".to_string(),
        Scope::Step => format!("step {step_id:?}'s"),
    };
    let message = format!(
        "{whose} {} — stopped {when}{}",
        over.describe(),
        turn.map(|t| format!(" (turn {t})")).unwrap_or_default()
    );
    run.emitter.emit(EventKind::BudgetExhausted {
        step_id: step_id.to_string(),
        budget: over.kind.as_str().to_string(),
        scope: scope.as_str().to_string(),
        limit: over.limit,
        used: over.used,
        next: over.next,
        unit: over.kind.unit().to_string(),
        turn,
        message: message.clone(),
    });
    StepOutcome::failed(ErrorKind::BudgetExhausted, message)
}

/// The run's budgets: the plan's, with its tokens lowered to `--token-budget`.
pub fn run_budget(plan_budget: Option<&Budget>, token_budget: Option<u64>) -> Budget {
    plan_budget
        .cloned()
        .unwrap_or_default()
        .lowered_tokens(token_budget)
}
