//! GitHub Actions: workflow-command annotations and a job summary.
//!
//! With `GITHUB_ACTIONS=true` (or `--annotations github`), a failed step becomes an `::error`
//! annotation naming the step (a tolerated one a `::warning`), every error diagnostic of an
//! `lsp_check` step an `::error file=…,line=…` annotation on the source line (warnings as
//! `::warning`), and a Markdown table of the run is appended to `$GITHUB_STEP_SUMMARY`.
//!
//! The annotations are written to **stderr**: the runner reads workflow commands from both streams,
//! and stdout stays reserved for `--jsonl`/`--json`. Escaping follows GitHub's toolkit: in a message
//! `%`, CR and LF become `%25`, `%0D`, `%0A`; in a property value `:` and `,` are escaped too, so
//! text from a plan, a model or a compiler can neither end the command early nor start a new one.

use super::Refusal;
use std::fmt::Write as _;

use serde::Deserialize;

use super::{ArtifactSource, Counts, last_artifact};
use crate::events::SandboxInfo;
use crate::executor::{ExecutionResult, StepResult, StepStatus};
use crate::redact::Redactor;

/// Diagnostics annotated per `lsp_check` step; GitHub shows at most 10 errors per step anyway.
const MAX_DIAGNOSTICS: usize = 50;

/// One `lsp_check` diagnostic as recorded in its `diagnostics` artifact.
#[derive(Debug, Deserialize)]
struct Diagnostic {
    level: String,
    message: String,
    #[serde(default)]
    file_name: Option<String>,
    #[serde(default)]
    line_start: Option<u64>,
    #[serde(default)]
    code: Option<String>,
}

/// The workflow-command lines for `result`, each ending in a newline.
pub fn annotations(
    result: &ExecutionResult,
    source: &dyn ArtifactSource,
    redactor: &Redactor,
) -> String {
    let mut out = String::new();
    for step in &result.steps {
        if step.status == StepStatus::Failed {
            let level = if step.tolerated { "warning" } else { "error" };
            let kind = step.error_kind.map(|k| k.as_str()).unwrap_or("tool_failed");
            let title = format!("acode-run step {} failed ({kind})", step.step_id);
            let mut message = step.error.as_deref().unwrap_or("failed").to_string();
            if let Some(excerpt) = &step.failure_output {
                message.push('\n');
                message.push_str(excerpt);
            }
            let _ = writeln!(
                out,
                "::{level} title={}::{}",
                escape_property(&redactor.redact(&title)),
                escape_data(&redactor.redact(&message))
            );
        }
        if step.tool == "lsp_check" {
            diagnostics(step, source, redactor, &mut out);
        }
    }
    out
}

/// Annotations for the diagnostics an `lsp_check` step recorded.
fn diagnostics(
    step: &StepResult,
    source: &dyn ArtifactSource,
    redactor: &Redactor,
    out: &mut String,
) {
    let Some(json) = last_artifact(step, source, "diagnostics") else {
        return;
    };
    let Ok(diags) = serde_json::from_str::<Vec<Diagnostic>>(&json) else {
        return;
    };
    for d in diags
        .iter()
        .filter(|d| matches!(d.level.as_str(), "error" | "warning"))
        .take(MAX_DIAGNOSTICS)
    {
        let mut props = Vec::new();
        if let Some(file) = &d.file_name {
            props.push(format!("file={}", escape_property(&redactor.redact(file))));
        }
        if let Some(line) = d.line_start {
            props.push(format!("line={line}"));
        }
        let title = match &d.code {
            Some(code) => format!("{} {code}", d.level),
            None => d.level.clone(),
        };
        props.push(format!(
            "title={}",
            escape_property(&redactor.redact(&title))
        ));
        let _ = writeln!(
            out,
            "::{} {}::{}",
            d.level,
            props.join(","),
            escape_data(&redactor.redact(&d.message))
        );
    }
}

/// The Markdown job summary: a heading with the outcome, the sandbox (its mode, why `auto` chose
/// it, what it does not hold here) when known, and one table row per step.
///
/// Who approved (verified or claimed, under which scheme) and whether an attestation was
/// written come from `provenance`.
pub fn summary(
    result: &ExecutionResult,
    redactor: &Redactor,
    sandbox: Option<&SandboxInfo>,
    provenance: &super::Provenance,
) -> String {
    let counts = Counts::of(result);
    let icon = if result.exit_code == 0 { "✅" } else { "❌" };
    let mut out = format!(
        "### {icon} acode-run `{}`: {}\n\n",
        cell(&redactor.redact(&result.plan_id)),
        result.status.as_str()
    );
    let _ = writeln!(
        out,
        "{} completed, {} failed{}, {} not run · exit {} · {:.1} s · run `{}`\n",
        counts.completed,
        counts.failed + counts.tolerated,
        if counts.tolerated > 0 {
            format!(" ({} tolerated)", counts.tolerated)
        } else {
            String::new()
        },
        counts.not_run,
        result.exit_code,
        result.duration_ms as f64 / 1000.0,
        result.run_id
    );
    if let Some(line) = provenance.approval_line() {
        let _ = writeln!(
            out,
            "approved by {}\n",
            redactor
                .redact(&line)
                .replace(['\n', '\r'], " ")
                .replace('<', "&lt;")
        );
    }
    let _ = writeln!(
        out,
        "attestation: {}\n",
        redactor
            .redact(&provenance.attestation_line())
            .replace(['\n', '\r'], " ")
            .replace('<', "&lt;")
    );
    if let Some(sandbox) = sandbox {
        let lines = sandbox.lines();
        // Whole lines (a table cell is cut short), each on one line and without HTML.
        let mut lines = lines.iter().map(|l| {
            redactor
                .redact(l)
                .replace(['\n', '\r'], " ")
                .replace('<', "&lt;")
        });
        if let Some(mode) = lines.next() {
            let _ = writeln!(out, "sandbox: {mode}\n");
        }
        for line in lines {
            let _ = writeln!(out, "- {line}");
        }
        out.push('\n');
    }
    out.push_str("| step | tool | status | time | error |\n|---|---|---|---:|---|\n");
    for s in &result.steps {
        let status = match (s.status, s.tolerated) {
            (StepStatus::Failed, true) => "failed (tolerated)".to_string(),
            (status, _) => status.as_str().to_string(),
        };
        let error = s
            .error
            .as_deref()
            .map(|e| redactor.redact(e).into_owned())
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "| {} | {} | {status} | {:.1} s | {} |",
            cell(&redactor.redact(&s.step_id)),
            s.tool,
            s.duration_ms as f64 / 1000.0,
            cell(&error)
        );
    }
    out.push('\n');
    // What each failed step's command printed last, where a table cell has no room for it.
    for s in result
        .steps
        .iter()
        .filter(|s| s.status == StepStatus::Failed)
    {
        if let Some(excerpt) = &s.failure_output {
            let text = redactor.redact(excerpt).replace("```", "` ` `");
            let _ = write!(
                out,
                "<details><summary>output of <code>{}</code></summary>\n\n```\n{}\n```\n\n</details>\n\n",
                cell(&redactor.redact(&s.step_id)).replace('<', "&lt;"),
                text.trim_end()
            );
        }
    }
    out
}

/// The annotation for an invocation refused before any step ran: one `::error` naming the exit
/// code, the message and every problem.
pub fn refusal_annotation(refusal: &Refusal, redactor: &Redactor) -> String {
    let title = format!(
        "acode-run refused {} (exit {})",
        refusal.subject, refusal.exit_code
    );
    format!(
        "::error title={}::{}\n",
        escape_property(&redactor.redact(&title)),
        escape_data(&refusal.text(redactor))
    )
}

/// The job summary for an invocation refused before any step ran.
pub fn refusal_summary(refusal: &Refusal, redactor: &Redactor) -> String {
    let mut out = format!(
        "### ❌ acode-run `{}`: refused (exit {})\n\n{}\n",
        cell(&redactor.redact(refusal.subject)),
        refusal.exit_code,
        cell(&redactor.redact(refusal.message))
    );
    for p in refusal.problems {
        let _ = writeln!(out, "- {}", cell(&redactor.redact(p)));
    }
    out.push('\n');
    out
}

/// `$GITHUB_OUTPUT` lines (`name=value`) a later workflow step reads as
/// `steps.ID.outputs.NAME`: the exit code, the status and the run id (empty when no run started).
pub fn outputs(exit_code: i32, status: &str, run_id: &str) -> String {
    let clean = |s: &str| s.replace(['\n', '\r'], " ");
    format!(
        "exit_code={exit_code}\nstatus={}\nrun_id={}\n",
        clean(status),
        clean(run_id)
    )
}

/// Escapes a workflow command's message.
pub fn escape_data(s: &str) -> String {
    s.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// Escapes a workflow command's property value.
pub fn escape_property(s: &str) -> String {
    escape_data(s).replace(':', "%3A").replace(',', "%2C")
}

/// Makes text safe inside one Markdown table cell: no pipes, no line breaks, no control
/// characters, at most 300 characters.
fn cell(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(300)
        .collect();
    if s.chars().count() > 300 {
        out.push('…');
    }
    out.replace('|', "\\|").replace('`', "'")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_follows_the_toolkit() {
        assert_eq!(escape_data("100% done\r\nnext"), "100%25 done%0D%0Anext");
        assert_eq!(escape_property("a:b,c%"), "a%3Ab%2Cc%25");
        // A newline in a message cannot start a second command.
        assert!(!escape_data("x\n::error::forged").contains('\n'));
    }

    #[test]
    fn cells_cannot_break_the_table() {
        assert_eq!(cell("a|b\nc"), "a\\|b c");
    }
}
