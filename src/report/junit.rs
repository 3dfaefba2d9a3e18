//! `--junit FILE`: the run as a JUnit XML report, one `<testcase>` per step.
//!
//! The shape is the common subset every CI server reads (Jenkins, GitLab, GitHub's test-report
//! actions, Azure): `<testsuites>` → one `<testsuite>` named after the plan → `<testcase
//! classname="PLAN_ID" name="STEP_ID" time="…">`, with `<failure message type>` holding the error
//! and the last lines the command printed on stdout and stderr (cargo and pytest name their
//! failing tests on stdout), the full captured output in `<system-out>`/`<system-err>`, and
//! `<skipped>` for steps that did not run. A passing step carries its output too, cut to its last
//! [`PASSED_OUTPUT_BYTES`] per stream, and to [`PASSED_OUTPUT_BUDGET`] over the whole file, so a
//! 10 000-step run does not write gigabytes. A tolerated
//! failure (`on_failure: "continue"`) is reported as a failure too: CI shows it, the exit code says
//! the run passed.

use super::Refusal;
use std::fmt::Write as _;

use super::{ArtifactSource, Counts, last_artifact};
use crate::events::SandboxInfo;
use crate::executor::{ExecutionResult, StepStatus};
use crate::redact::Redactor;

/// The last bytes of each stream a passing step's `<system-out>`/`<system-err>` keeps.
pub const PASSED_OUTPUT_BYTES: usize = 16 * 1024;

/// The passing steps' output one file carries at most; later passing steps carry none (their
/// output is in the database: `acode-run show RUN_ID`).
pub const PASSED_OUTPUT_BUDGET: usize = 8 * 1024 * 1024;

/// `text` cut to its last `max` bytes (at a character boundary), saying how much was left out.
fn tail_bounded(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("… {start} earlier bytes not shown\n{}", &text[start..]).into()
}

/// Renders `result` as a JUnit XML document. Every text from the plan, a model or a command passes
/// `redactor` first.
/// The run's `sandbox` (when known) is stated in the suite's properties: `sandbox` (the mode),
/// `sandbox_reason` (why `auto` chose it) and one `sandbox_not_held` per promise the mode does not
/// hold here.
///
/// Who approved it and how that is proven (`approved_by`, `approval_scheme`,
/// `approval_standing`) and whether an attestation was written (`attestation`) come from
/// `provenance`.
pub fn render(
    result: &ExecutionResult,
    source: &dyn ArtifactSource,
    redactor: &Redactor,
    sandbox: Option<&SandboxInfo>,
    provenance: &super::Provenance,
) -> String {
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    // The same totals on the `<testsuites>` root and the one `<testsuite>` (CI servers read either).
    let _ = writeln!(out, "<testsuites name=\"acode-run\" {}>", totals(&[result]));
    let name = redactor.redact(&result.plan_id).into_owned();
    suite(
        &mut out, &name, result, source, redactor, sandbox, provenance,
    );
    out.push_str("</testsuites>\n");
    out
}

/// Several runs in one document, a `<testsuite>` each named as given (the fleet's, from a merged
/// database: `report --junit FILE` without a run id), with their totals on the root.
pub fn render_suites(
    runs: &[(String, ExecutionResult)],
    source: &dyn ArtifactSource,
    redactor: &Redactor,
) -> String {
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let all: Vec<&ExecutionResult> = runs.iter().map(|(_, r)| r).collect();
    let _ = writeln!(out, "<testsuites name=\"acode-run\" {}>", totals(&all));
    for (name, result) in runs {
        let provenance = super::Provenance::default();
        suite(&mut out, name, result, source, redactor, None, &provenance);
    }
    out.push_str("</testsuites>\n");
    out
}

/// The `tests`, `failures`, `errors`, `skipped` and `time` attributes of `results` together.
fn totals(results: &[&ExecutionResult]) -> String {
    let (mut tests, mut failures, mut skipped, mut ms) = (0usize, 0usize, 0usize, 0u64);
    for r in results {
        let counts = Counts::of(r);
        tests += r.steps.len();
        failures += counts.failed + counts.tolerated;
        skipped += counts.not_run;
        ms = ms.saturating_add(r.duration_ms);
    }
    format!(
        "tests=\"{tests}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\" time=\"{}\"",
        secs(ms)
    )
}

/// A suite's `<properties>`: the run, its exit code, approval, attestation and sandbox.
fn properties(
    out: &mut String,
    result: &ExecutionResult,
    redactor: &Redactor,
    sandbox: Option<&SandboxInfo>,
    provenance: &super::Provenance,
) {
    let _ = write!(
        out,
        "    <properties><property name=\"run_id\" value=\"{}\"/><property name=\"exit_code\" \
         value=\"{}\"/>",
        escape(&result.run_id),
        result.exit_code
    );
    let mut property = |name: &str, value: &str| {
        let _ = write!(
            out,
            "<property name=\"{name}\" value=\"{}\"/>",
            escape(&redactor.redact(value))
        );
    };
    if let Some(a) = &provenance.approval {
        property("approved_by", &a.decided_by);
        property(
            "approval_scheme",
            if a.scheme.is_empty() {
                "none"
            } else {
                &a.scheme
            },
        );
        property(
            "approval_standing",
            if a.standing() == "claimed" {
                "claimed"
            } else {
                "verified"
            },
        );
    }
    property("attestation", &provenance.attestation_line());
    if let Some(sandbox) = sandbox {
        property("sandbox", &sandbox.describe());
        if let Some(reason) = &sandbox.reason {
            property("sandbox_reason", reason);
        }
        for gap in &sandbox.not_held {
            property("sandbox_not_held", gap);
        }
    }
    out.push_str("</properties>\n");
}

/// One run's `<testsuite>` named `name` (its testcases' class name is the plan id).
fn suite(
    out: &mut String,
    name: &str,
    result: &ExecutionResult,
    source: &dyn ArtifactSource,
    redactor: &Redactor,
    sandbox: Option<&SandboxInfo>,
    provenance: &super::Provenance,
) {
    let plan_id = escape(&redactor.redact(&result.plan_id));
    let _ = writeln!(
        out,
        "  <testsuite name=\"{}\" {}>",
        escape(&redactor.redact(name)),
        totals(&[result])
    );
    properties(out, result, redactor, sandbox, provenance);
    let mut passed_output = 0usize;
    for step in &result.steps {
        let _ = write!(
            out,
            "    <testcase classname=\"{plan_id}\" name=\"{}\" time=\"{}\"",
            escape(&redactor.redact(&step.step_id)),
            secs(step.duration_ms)
        );
        let error = step
            .error
            .as_deref()
            .map(|e| redactor.redact(e).into_owned())
            .unwrap_or_default();
        // What the step spent on models, as pytest's `record_property` writes properties.
        let spend = step.spend.map(|s| {
            format!(
                "      <properties><property name=\"tokens\" value=\"{}\"/><property \
                 name=\"model_calls\" value=\"{}\"/><property name=\"cost_usd\" \
                 value=\"{:.6}\"/></properties>\n",
                s.tokens, s.model_calls, s.cost_usd
            )
        });
        if step.status != StepStatus::Completed {
            out.push_str(">\n");
            if let Some(p) = &spend {
                out.push_str(p);
            }
        }
        match step.status {
            StepStatus::Completed => {
                let mut streams = String::new();
                for (element, stream) in [("system-out", "stdout"), ("system-err", "stderr")] {
                    if passed_output >= PASSED_OUTPUT_BUDGET {
                        break;
                    }
                    if let Some(text) =
                        last_artifact(step, source, stream).filter(|t| !t.is_empty())
                    {
                        let text = redactor.redact(&text);
                        let text = tail_bounded(&text, PASSED_OUTPUT_BYTES);
                        passed_output += text.len();
                        let _ = writeln!(streams, "      <{element}>{}</{element}>", escape(&text));
                    }
                }
                if streams.is_empty() && spend.is_none() {
                    out.push_str("/>\n");
                } else {
                    let _ = write!(
                        out,
                        ">\n{}{streams}    </testcase>\n",
                        spend.as_deref().unwrap_or_default()
                    );
                }
            }
            StepStatus::Failed => {
                let kind = step.error_kind.map(|k| k.as_str()).unwrap_or("tool_failed");
                let mut body = format!("{} ({})", step.tool, kind);
                if step.tolerated {
                    body.push_str(", tolerated by on_failure: continue");
                }
                body.push('\n');
                body.push_str(&error);
                if let Some(excerpt) = &step.failure_output {
                    body.push('\n');
                    body.push_str(&redactor.redact(excerpt));
                }
                let _ = writeln!(
                    out,
                    "      <failure message=\"{}\" type=\"{kind}\">{}</failure>",
                    escape(first_line(&error)),
                    escape(&body)
                );
                for (element, stream) in [("system-out", "stdout"), ("system-err", "stderr")] {
                    if let Some(text) =
                        last_artifact(step, source, stream).filter(|t| !t.is_empty())
                    {
                        let _ = writeln!(
                            out,
                            "      <{element}>{}</{element}>",
                            escape(&redactor.redact(&text))
                        );
                    }
                }
                out.push_str("    </testcase>\n");
            }
            StepStatus::Blocked | StepStatus::Skipped | StepStatus::Cancelled => {
                // The message may name its status already (`cancelled: step "x" failed …`): not
                // `cancelled: cancelled: …`.
                let status = step.status.as_str();
                let why = if error.is_empty() {
                    status.to_string()
                } else if error.starts_with(&format!("{status}:")) || error.starts_with(status) {
                    error.to_string()
                } else {
                    format!("{status}: {error}")
                };
                let _ = write!(
                    out,
                    "      <skipped message=\"{}\"/>\n    </testcase>\n",
                    escape(&why)
                );
            }
        }
    }
    out.push_str("  </testsuite>\n");
}

/// A JUnit document for an invocation that ended before any step ran (invalid plan, not
/// authorized, usage error): one failed testcase `refused` carrying the exit code and every
/// problem, so the CI's test page says why instead of showing nothing.
pub fn render_refusal(refusal: &Refusal, redactor: &Redactor) -> String {
    let name = escape(&redactor.redact(refusal.subject));
    let body = format!("exit {}: {}", refusal.exit_code, refusal.text(redactor));
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let totals = "tests=\"1\" failures=\"1\" errors=\"0\" skipped=\"0\" time=\"0.000\"";
    let _ = writeln!(out, "<testsuites name=\"acode-run\" {totals}>");
    let _ = writeln!(out, "  <testsuite name=\"{name}\" {totals}>");
    let _ = writeln!(
        out,
        "    <properties><property name=\"exit_code\" value=\"{}\"/></properties>",
        refusal.exit_code
    );
    let _ = writeln!(
        out,
        "    <testcase classname=\"{name}\" name=\"refused\" time=\"0.000\">\n      \
         <failure message=\"{}\" type=\"refused\">{}</failure>\n    </testcase>",
        escape(first_line(&redactor.redact(refusal.message))),
        escape(&body)
    );
    out.push_str("  </testsuite>\n</testsuites>\n");
    out
}

/// Seconds with millisecond precision, as JUnit's `time` attribute wants.
fn secs(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// Escapes text for an XML attribute or element, dropping the control characters XML 1.0 cannot
/// carry at all (a command's output may hold any byte).
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            '\t' => out.push_str("&#9;"),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_makes_any_text_valid_xml() {
        assert_eq!(escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
        assert_eq!(escape("\u{1b}[31m"), "\\x1b[31m");
        assert_eq!(escape("x\ny"), "x&#10;y");
    }

    #[test]
    fn seconds_keep_milliseconds() {
        assert_eq!(secs(2405), "2.405");
        assert_eq!(secs(7), "0.007");
    }
}
