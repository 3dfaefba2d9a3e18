//! The stages around the executor (seed 001's loop): a **planner** drafts a plan from a goal, a
//! person approves it, the executor runs it, and a **reviewer** judges the result.
//!
//! Both stages are conversations with the model through the *same* agent loop an agent step uses
//! (so the same sandbox, policy, recording, token budget and retries apply): each attempt is one
//! run of a one-step plan that acode-run composes itself — an `agent` step limited to the read-only
//! tools, whose role (the system prompt's opening) is the stage's. Such a run is recorded in the
//! database like any other, with every turn's prompt and response; its plan id says which stage it
//! was (`acode-draft`, `acode-review`). Nothing a model writes runs without a human approval: the
//! planner's answer is only ever written to a file, unapproved.

pub mod draft;
pub mod review;

use serde_json::{Value, json};
use thiserror::Error;

use crate::executor::{ExecutionError, Executor, StepStatus};
use crate::plan::{ApprovedPlan, AuthStatus, PlanAuthorization};

/// The tools a stage's model may call: it looks (the workspace and this workspace's run
/// history), it never touches.
pub use crate::tools::READ_ONLY_TOOLS;

/// Which stage a conversation belongs to; also the plan id of its recorded runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The planner.
    Draft,
    /// The reviewer.
    Review,
}

impl Stage {
    /// The stage's name in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Draft => "planner",
            Stage::Review => "reviewer",
        }
    }

    /// The `kind` its runs are recorded with.
    pub fn kind(self) -> &'static str {
        match self {
            Stage::Draft => "draft",
            Stage::Review => "review",
        }
    }

    /// The plan id its recorded runs carry, so `acode-run runs` shows what they were.
    pub fn plan_id(self) -> &'static str {
        match self {
            Stage::Draft => "acode-draft",
            Stage::Review => "acode-review",
        }
    }
}

/// Why a stage could not produce its result.
#[derive(Debug, Error)]
pub enum StageError {
    /// The model's answers never passed the checks within the allowed attempts.
    #[error("the {stage} gave no acceptable answer in {attempts} attempt(s); the last problems:\n{}",
        .problems.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n"))]
    Exhausted {
        /// Which stage.
        stage: &'static str,
        /// Attempts made.
        attempts: u32,
        /// The problems with the last answer.
        problems: Vec<String>,
    },
    /// The conversation itself failed (LLM unreachable, turn limit, budget, interrupted).
    #[error("the {stage}'s conversation failed ({code}): {message}")]
    Conversation {
        /// Which stage.
        stage: &'static str,
        /// The failing step's error code.
        code: String,
        /// Its message.
        message: String,
        /// The exit code it calls for.
        exit_code: i32,
    },
    /// The input the stage needs is missing or unusable (unknown run, unreadable plan).
    #[error("{0}")]
    Input(String),
    /// The executor could not run the stage's conversation.
    #[error(transparent)]
    Execution(#[from] ExecutionError),
}

/// One finished conversation: the recorded run and the model's final answer.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The run that recorded the conversation.
    pub run_id: String,
    /// The model's final answer, whole.
    pub text: String,
}

/// Most characters of a stage's final answer kept (a whole plan must fit).
const ANSWER_CHARS: usize = 512 * 1024;

/// Runs one conversation for `stage`: a one-step plan whose agent step has `role` as its system
/// prompt opening, `instruction` as its task and only the read-only tools. The run is recorded as
/// the stage's `kind`, about `subject`.
pub fn converse(
    executor: &mut Executor,
    stage: Stage,
    subject: Option<&str>,
    role: &str,
    instruction: &str,
    max_turns: u32,
) -> Result<Answer, StageError> {
    // `${` in the task (a plan schema, an old plan) is text, not a variable of this plan.
    let escaped = instruction.replace("${", "$${");
    let doc = json!({
        "plan_id": stage.plan_id(),
        "description": format!("acode-run {} stage", stage.as_str()),
        "steps": [{
            "step_id": stage.as_str(),
            "tool": "agent",
            "arguments": {
                "instruction": escaped,
                "tools": READ_ONLY_TOOLS,
                "max_turns": max_turns,
            },
        }],
    });
    let bytes = serde_json::to_vec(&doc).map_err(|e| StageError::Input(e.to_string()))?;
    let (plan, problems) = crate::plan::parse::parse_partial(&bytes);
    let plan = match plan {
        Some(p) if problems.is_empty() => p,
        _ => {
            return Err(StageError::Input(format!(
                "internal: the {} stage's plan is invalid: {problems:?}",
                stage.as_str()
            )));
        }
    };
    // acode-run composed this plan itself and it can only read: it is approved by construction,
    // under the policy the stage runs with (a workspace's `acode-policy.json` included).
    let auth = PlanAuthorization::decide(&plan, AuthStatus::Approved, "acode-run")
        .under_policy(executor.policy());
    let approved = ApprovedPlan::new(plan, auth).map_err(ExecutionError::from)?;
    let settings = executor.agent_settings_mut();
    let saved = (settings.role.take(), settings.answer_chars);
    settings.role = Some(role.to_string());
    settings.answer_chars = ANSWER_CHARS;
    let result = executor.execute(&approved);
    let settings = executor.agent_settings_mut();
    (settings.role, settings.answer_chars) = saved;
    let result = result?;
    executor
        .store_mut()
        .mark_stage(&result.run_id, stage.kind(), subject)
        .map_err(ExecutionError::from)?;
    let step = result.steps.first();
    match step {
        Some(s) if s.status == StepStatus::Completed => Ok(Answer {
            run_id: result.run_id.clone(),
            text: s.output.clone().unwrap_or_default(),
        }),
        _ => Err(StageError::Conversation {
            stage: stage.as_str(),
            code: step
                .and_then(|s| s.error_kind)
                .map(|k| k.as_str().to_string())
                .unwrap_or_else(|| "failed".into()),
            message: step.and_then(|s| s.error.clone()).unwrap_or_default(),
            exit_code: result.exit_code,
        }),
    }
}

/// The JSON object in a model's answer: the whole answer, a fenced code block, or the outermost
/// `{…}` in prose. `Err` says what is wrong, for the repair prompt.
pub fn extract_json(answer: &str) -> Result<Value, String> {
    let trimmed = answer.trim();
    if !trimmed.contains('{') {
        return Err("the answer holds no JSON object".into());
    }
    let mut candidates: Vec<&str> = vec![trimmed];
    if let Some(start) = trimmed.find("```") {
        let after = &trimmed[start + 3..];
        let body_start = after.find('\n').map_or(0, |i| i + 1);
        if let Some(end) = after[body_start..].find("```") {
            candidates.push(&after[body_start..body_start + end]);
        }
    }
    if let (Some(a), Some(b)) = (trimmed.find('{'), trimmed.rfind('}'))
        && a < b
    {
        candidates.push(&trimmed[a..=b]);
    }
    let mut last_error = String::from("the answer holds no JSON object");
    for c in candidates {
        match serde_json::from_str::<Value>(c.trim()) {
            Ok(v @ Value::Object(_)) => return Ok(v),
            Ok(_) => last_error = "the answer is JSON but not an object".into(),
            Err(e) => last_error = format!("the answer is not valid JSON: {e}"),
        }
    }
    Err(last_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_found_bare_fenced_or_in_prose() {
        assert_eq!(extract_json(r#"{"a":1}"#).unwrap()["a"], 1);
        assert_eq!(
            extract_json("Here it is:\n```json\n{\"a\": 2}\n```\nDone.").unwrap()["a"],
            2
        );
        assert_eq!(
            extract_json("The plan: {\"a\": 3} as asked").unwrap()["a"],
            3
        );
        assert!(extract_json("no json here").is_err());
        assert!(extract_json("[1, 2]").is_err());
    }
}
