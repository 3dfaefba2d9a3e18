//! The human progress printer: one line per step on stderr, heartbeats, and a final summary.
//!
//! Colour is used only when the output is a terminal and `NO_COLOR` is unset, so logs captured by CI
//! stay plain text.

use std::io::Write;
use std::sync::{Arc, Mutex};

use super::{Event, EventKind};
use crate::executor::ProgressCallback;
use crate::sandbox::redact::Redactor;
use crate::terminal::{line as l, text as tx};

#[derive(Default)]
struct Current {
    index: usize,
    total: usize,
    step_id: String,
    tool: String,
    summary: String,
}

/// Renders events as progress lines.
pub struct HumanPrinter<W: Write + Send> {
    out: Mutex<(W, Current)>,
    color: bool,
    redactor: Arc<Redactor>,
}

/// Whether stderr should get colour: a terminal, and `NO_COLOR` not set.
pub fn stderr_wants_color() -> bool {
    // SAFETY: isatty only inspects the file descriptor.
    let tty = unsafe { libc::isatty(libc::STDERR_FILENO) } == 1;
    tty && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

fn secs(ms: u64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

impl<W: Write + Send> HumanPrinter<W> {
    /// A printer writing to `out`, coloured if `color`.
    pub fn new(out: W, color: bool, redactor: Arc<Redactor>) -> Self {
        HumanPrinter {
            out: Mutex::new((out, Current::default())),
            color,
            redactor,
        }
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    fn render(&self, event: &Event, cur: &mut Current) -> Option<String> {
        let head = |cur: &Current| {
            // Ids, tools and summaries come from plans and models: one sanitiser for all of them.
            let mut s = format!(
                "[{}/{}] {} {}",
                cur.index,
                cur.total,
                l(&cur.step_id),
                l(&cur.tool)
            );
            if !cur.summary.is_empty() {
                let mut summary: String = cur.summary.chars().take(60).collect();
                if summary.len() < cur.summary.len() {
                    summary.push('…');
                }
                s.push(' ');
                s.push_str(&l(&summary));
            }
            s
        };
        match &event.kind {
            EventKind::RunStarted {
                plan_id,
                steps,
                already_completed,
                ..
            } => Some(match already_completed {
                None => format!(
                    "acode-run: plan {} ({steps} step{}), run {}",
                    l(plan_id),
                    if *steps == 1 { "" } else { "s" },
                    event.run_id
                ),
                Some(done) => format!(
                    "acode-run: resuming run {} of plan {}: {done} of {steps} steps already completed",
                    event.run_id,
                    l(plan_id)
                ),
            }),
            EventKind::StepStarted {
                step_id,
                tool,
                index,
                total,
                summary,
            } => {
                *cur = Current {
                    index: *index,
                    total: *total,
                    step_id: step_id.clone(),
                    tool: tool.clone(),
                    summary: summary.clone(),
                };
                None
            }
            EventKind::ToolHeartbeat {
                elapsed_ms, tool, ..
            } => Some(format!(
                "{} … {} still running ({})",
                head(cur),
                l(tool),
                secs(*elapsed_ms)
            )),
            EventKind::RetryScheduled {
                tool,
                attempt,
                delay_ms,
                reason,
                ..
            } => Some(format!(
                "{} … {} attempt {attempt} failed ({}); retrying in {}",
                head(cur),
                l(tool),
                l(reason),
                secs(*delay_ms)
            )),
            EventKind::LlmTurn {
                turn,
                tool_calls,
                prompt_tokens,
                completion_tokens,
                warnings,
                ..
            } => {
                let mut s = format!(
                    "{} … turn {turn}: {tool_calls} tool call{} ({prompt_tokens}+{completion_tokens} tokens)",
                    head(cur),
                    if *tool_calls == 1 { "" } else { "s" }
                );
                for w in warnings {
                    s.push_str(&format!("\n      warning: {}", tx(w)));
                }
                Some(s)
            }
            EventKind::StepCompleted { duration_ms, .. } => Some(format!(
                "{} … {} {}",
                head(cur),
                self.paint("32", "ok"),
                secs(*duration_ms)
            )),
            EventKind::StepFailed {
                error_code,
                error,
                duration_ms,
                tolerated,
                ..
            } => {
                let verdict = if *tolerated {
                    self.paint("33", "failed, tolerated")
                } else {
                    self.paint("31", "FAILED")
                };
                let mut line = format!(
                    "{} … {verdict} ({error_code}) {}\n      {}",
                    head(cur),
                    secs(*duration_ms),
                    tx(error)
                );
                if error_code == "confirmation_denied" {
                    line.push_str(
                        "\n      (when no one can be asked, confirmations are denied: run on a \
                         terminal, or pass --confirm auto-approve after review)",
                    );
                }
                Some(line)
            }
            EventKind::StepBlocked {
                step_id,
                status,
                blocked_by,
            } => Some(match blocked_by {
                Some(by) => format!(
                    "[-] {} … {status} (depends on failed step {})",
                    l(step_id),
                    l(by)
                ),
                None => format!("[-] {} … {status} (the run stopped before it)", l(step_id)),
            }),
            EventKind::RunFinished {
                status,
                exit_code,
                duration_ms,
                completed,
                failed,
                tolerated,
                blocked,
                violations,
            } => {
                let failed = match tolerated {
                    0 => format!("{failed} failed"),
                    t if t == failed => format!("{failed} failed, tolerated"),
                    t => format!("{failed} failed ({t} tolerated)"),
                };
                let colored = match status.as_str() {
                    "completed" => self.paint("32", status),
                    _ => self.paint("31", status),
                };
                let refused = match violations {
                    0 => String::new(),
                    1 => ", 1 sandbox violation refused".to_string(),
                    n => format!(", {n} sandbox violations refused"),
                };
                Some(format!(
                    "run {} {colored}: {completed} completed, {failed}, {blocked} not run{refused}, {} (exit {exit_code})",
                    event.run_id,
                    secs(*duration_ms)
                ))
            }
            _ => None,
        }
    }
}

impl<W: Write + Send> ProgressCallback for HumanPrinter<W> {
    fn on_event(&self, event: &Event) {
        let mut guard = match self.out.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let (out, cur) = &mut *guard;
        if let Some(line) = self.render(event, cur) {
            let line = self.redactor.redact(&line);
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    }
}
