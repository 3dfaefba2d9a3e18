//! The reviewer stage: `acode-run review RUN_ID` judges a finished run against its goal.
//!
//! The model gets the goal (`--goal`, else the plan's `description`, which the planner sets to the
//! goal), the plan, each step's outcome and the unified diff of every change the run recorded, may
//! read workspace files with the read-only tools, and must answer
//! `{"verdict": "approve" | "request_changes", "summary": …, "findings": [{file, line, severity,
//! message}]}`. A malformed answer is sent back with the problem, like a draft. The verdict is kept
//! in the database (`reviews`), where `draft --revise --from-review RUN_ID` finds it.

use serde::{Deserialize, Serialize};

use super::{Stage, StageError, converse, extract_json};
use crate::executor::Executor;

/// The reviewer's role.
const ROLE: &str = "You are the reviewer of acode-run. A plan was approved by a human and has run; \
you judge whether the result achieves the goal, correctly and safely. You may read workspace files \
with the read-only tools; you cannot change anything. Your final answer must be one JSON object and \
nothing else: {\"verdict\": \"approve\" or \"request_changes\", \"summary\": \"...\", \"findings\": \
[{\"file\": \"path\", \"line\": 12, \"severity\": \"error\" | \"warning\" | \"info\", \"message\": \
\"...\"}]}.";

/// Most characters of recorded diffs shown to the reviewer; the rest is cut with a note.
const DIFF_BUDGET: usize = 60_000;

/// The reviewer's judgement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The result achieves the goal.
    Approve,
    /// It does not, yet: see the findings.
    RequestChanges,
}

/// One thing the reviewer found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Finding {
    /// The file concerned, relative to the workspace (empty when general).
    #[serde(default)]
    pub file: String,
    /// The line, when one applies.
    #[serde(default)]
    pub line: Option<u64>,
    /// `error`, `warning` or `info`.
    #[serde(default = "default_severity")]
    pub severity: String,
    /// What is wrong and what to do.
    pub message: String,
}

fn default_severity() -> String {
    "warning".into()
}

/// A review as answered by the model and kept on disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Review {
    /// The verdict.
    pub verdict: Verdict,
    /// A short summary.
    pub summary: String,
    /// What it found.
    #[serde(default)]
    pub findings: Vec<Finding>,
}

/// The verdict and where it was recorded.
#[derive(Debug, Clone)]
pub struct ReviewOutcome {
    /// The review.
    pub review: Review,
    /// The recorded conversation runs, one per attempt.
    pub run_ids: Vec<String>,
}

impl Review {
    /// The review as feedback for the planner (`draft --revise --from-review`).
    pub fn as_feedback(&self) -> String {
        let mut s = format!("The reviewer asked for changes: {}", self.summary);
        for f in &self.findings {
            let at = match (f.file.as_str(), f.line) {
                ("", _) => String::new(),
                (file, Some(line)) => format!(" {file}:{line}"),
                (file, None) => format!(" {file}"),
            };
            s.push_str(&format!("\n- [{}]{at}: {}", f.severity, f.message));
        }
        s
    }
}

/// Loads the latest review recorded for `run_id`.
pub fn load(executor: &Executor, run_id: &str) -> Result<Review, StageError> {
    // The id as `show` takes it: whole, or a unique prefix.
    let run_id = executor
        .store()
        .run(run_id)
        .map_err(|e| StageError::Input(format!("no review of run {run_id}: {e}")))?
        .run_id;
    let run_id = run_id.as_str();
    let json = executor
        .store()
        .latest_review(run_id)
        .map_err(|e| StageError::Input(format!("no review of run {run_id}: {e}")))?;
    serde_json::from_str(&json).map_err(|e| StageError::Input(format!("review of {run_id}: {e}")))
}

/// What the reviewer is shown about the run.
fn context(executor: &Executor, run_id: &str, goal: Option<&str>) -> Result<String, StageError> {
    let store = executor.store();
    let detail = store
        .run_detail(run_id)
        .map_err(|e| StageError::Input(format!("run {run_id}: {e}")))?;
    let plan_text = detail
        .run
        .plan_path
        .as_deref()
        .and_then(|p| {
            crate::input::read_bounded(p.as_ref(), crate::input::MAX_PLAN_BYTES, "plan file").ok()
        })
        .map(|b| String::from_utf8_lossy(&b).into_owned());
    let goal = goal.map(str::to_string).or_else(|| {
        plan_text
            .as_deref()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok())
            .and_then(|v| {
                v.get("description")
                    .and_then(|d| d.as_str())
                    .map(String::from)
            })
    });
    // The declared intent, said plainly: a read plan that changed files broke its promise.
    let intent = plan_text
        .as_deref()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok())
        .and_then(|v| v.get("intent").and_then(|i| i.as_str()).map(String::from))
        .and_then(|i| crate::plan::Intent::from_name(&i))
        .map(|i| {
            if i.is_read_only() {
                format!(
                    "DECLARED INTENT: {} (the plan promised to change nothing; any change below breaks that promise)\n\n",
                    i.as_str()
                )
            } else {
                format!("DECLARED INTENT: {}\n\n", i.as_str())
            }
        })
        .unwrap_or_default();
    let mut s = format!(
        "GOAL:\n{}\n\n{intent}The run {} of plan {:?} ended {} (exit {}).\n\nTHE PLAN:\n{}\n\nSTEP OUTCOMES:\n",
        goal.as_deref()
            .unwrap_or("(not given: judge the plan's own intent)"),
        detail.run.run_id,
        detail.run.plan_id,
        detail.run.status,
        detail.run.exit_code.unwrap_or(-1),
        plan_text
            .as_deref()
            .unwrap_or("(the plan file is no longer readable)")
    );
    for st in &detail.steps {
        s.push_str(&format!("- {} ({}): {}", st.step_id, st.tool, st.status));
        if let Some(m) = &st.error_message {
            s.push_str(&format!(" — {m}"));
        }
        s.push('\n');
    }
    s.push_str("\nTHE CHANGES THE RUN MADE (unified diffs, in order):\n");
    let mut used = 0usize;
    for e in &detail.executions {
        if !e.artifacts.iter().any(|a| a.artifact_type == "diff") {
            continue;
        }
        let Ok(diff) = store.artifact(&e.record.execution_id, "diff") else {
            continue;
        };
        if used + diff.content.len() > DIFF_BUDGET {
            s.push_str("[acode-run: further diffs omitted to fit the budget; read the files]\n");
            break;
        }
        used += diff.content.len();
        s.push_str(&diff.content);
        if !diff.content.ends_with('\n') {
            s.push('\n');
        }
    }
    if used == 0 {
        s.push_str("(no file changes were recorded)\n");
    }
    Ok(s)
}

/// Reviews run `run_id`; see the module docs. The review is also recorded in the database.
pub fn review(
    executor: &mut Executor,
    run_id: &str,
    goal: Option<&str>,
    max_attempts: u32,
    max_turns: u32,
) -> Result<ReviewOutcome, StageError> {
    let base = context(executor, run_id, goal)?;
    let mut feedback: Option<String> = None;
    let mut run_ids = Vec::new();
    let attempts = max_attempts.max(1);
    let mut last = String::new();
    for _ in 0..attempts {
        let mut task = base.clone();
        if let Some(f) = &feedback {
            task.push_str(&format!(
                "\nYour previous answer was not accepted: {f}\nAnswer again with the JSON object only.\n"
            ));
        }
        let answer = converse(
            executor,
            Stage::Review,
            Some(run_id),
            ROLE,
            &task,
            max_turns,
        )?;
        run_ids.push(answer.run_id);
        let parsed = extract_json(&answer.text).and_then(|v| {
            serde_json::from_value::<Review>(v).map_err(|e| format!("not a review object: {e}"))
        });
        match parsed {
            Ok(review) => {
                let verdict = match review.verdict {
                    Verdict::Approve => "approve",
                    Verdict::RequestChanges => "request_changes",
                };
                let json = serde_json::to_string(&review).unwrap_or_default();
                let review_run = run_ids.last().cloned().unwrap_or_default();
                executor
                    .store_mut()
                    .record_review(run_id, &review_run, verdict, &json)
                    .map_err(crate::executor::ExecutionError::from)?;
                return Ok(ReviewOutcome { review, run_ids });
            }
            Err(e) => {
                last = e.clone();
                feedback = Some(e);
            }
        }
    }
    Err(StageError::Exhausted {
        stage: Stage::Review.as_str(),
        attempts,
        problems: vec![last],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reviews_parse_strictly_and_become_feedback() {
        let r: Review = serde_json::from_str(
            r#"{"verdict": "request_changes", "summary": "missing test",
                "findings": [{"file": "src/lib.rs", "line": 3, "severity": "error", "message": "no test"}]}"#,
        )
        .unwrap();
        assert_eq!(r.verdict, Verdict::RequestChanges);
        assert_eq!(
            r.as_feedback(),
            "The reviewer asked for changes: missing test\n- [error] src/lib.rs:3: no test"
        );
        assert!(serde_json::from_str::<Review>(r#"{"verdict": "maybe", "summary": ""}"#).is_err());
    }
}
