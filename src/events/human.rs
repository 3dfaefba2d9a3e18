//! The human progress printer: one line per step on stderr, heartbeats, and a final summary.
//!
//! Colour is used only when the output is a terminal and `NO_COLOR` is unset, so logs captured by CI
//! stay plain text.

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

use super::{Event, EventKind};
use crate::redact::Redactor;
use crate::terminal::{line as l, text as tx};

#[derive(Default)]
struct Current {
    index: usize,
    total: usize,
    step_id: String,
    tool: String,
    summary: String,
}

/// Renders events as progress lines: each line whole, naming its step, so the lines of steps
/// running at once (`--jobs`) never mix.
pub struct HumanPrinter<W: Write + Send> {
    /// The output, and what each running step's lines start with (by step id).
    out: Mutex<(W, HashMap<String, Current>)>,
    color: bool,
    redactor: Arc<Redactor>,
    failures_only: bool,
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
            out: Mutex::new((out, HashMap::new())),
            color,
            redactor,
            failures_only: false,
        }
    }

    /// Prints only failed steps (with what their command printed last) and refusals: `--quiet`,
    /// which must still say what went wrong.
    pub fn failures_only(mut self) -> Self {
        self.failures_only = true;
        self
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    /// Text from outside (ids, summaries, errors, model warnings), redacted with every rule before
    /// it is put into a line; the line's own words are the runner's and are not.
    fn ext(&self, s: &str) -> String {
        self.redactor.redact(s).into_owned()
    }

    fn render(&self, event: &Event, steps: &mut HashMap<String, Current>) -> Option<String> {
        let fallback = Current::default();
        let ended = matches!(
            event.kind,
            EventKind::StepCompleted { .. } | EventKind::StepFailed { .. }
        );
        let key = step_of(&event.kind);
        if let EventKind::StepStarted {
            step_id,
            tool,
            index,
            total,
            summary,
        } = &event.kind
        {
            steps.insert(
                step_id.clone(),
                Current {
                    index: *index,
                    total: *total,
                    step_id: self.ext(step_id),
                    tool: self.ext(tool),
                    summary: self.ext(summary),
                },
            );
            return None;
        }
        let owned = match (key, ended) {
            (Some(k), true) => steps.remove(k),
            _ => None,
        };
        let cur = owned
            .as_ref()
            .or_else(|| key.and_then(|k| steps.get(k)))
            .unwrap_or(&fallback);
        match &event.kind {
            EventKind::RunStarted { .. } => self.run_started(event),
            // A model's call, named as it happens: which tool on which file or program.
            EventKind::ToolCall {
                tool,
                arguments,
                attempt: 1,
                turn: Some(turn),
                ..
            } => {
                let what = call_subject(arguments);
                let what: String = self.ext(&what).chars().take(60).collect();
                Some(format!(
                    "{} … turn {turn}: {}{}{}",
                    head(cur),
                    l(&self.ext(tool)),
                    if what.is_empty() { "" } else { " " },
                    l(&what)
                ))
            }
            // A step's verify command, named as it starts (a check that takes minutes is not
            // silence).
            EventKind::ToolCall {
                call_id,
                arguments,
                attempt: 1,
                turn: None,
                ..
            } if crate::tools::is_verify_call(call_id) => {
                let what: String = self
                    .ext(&call_subject(arguments))
                    .chars()
                    .take(60)
                    .collect();
                Some(format!("{} … verify: {}", head(cur), l(&what)))
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
                l(&self.ext(tool)),
                l(&self.ext(reason)),
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
                    s.push_str(&format!("\n      warning: {}", tx(&self.ext(w))));
                }
                Some(s)
            }
            // A denied request explains a failure to come; allowed ones are in `show`.
            EventKind::NetworkRequest { request, .. } if !request.allowed => Some(format!(
                "{} … network: {} {}:{} denied ({})",
                head(cur),
                l(&request.method),
                l(&self.ext(&request.host)),
                request.port,
                l(&request.reason)
            )),
            EventKind::StepCompleted { duration_ms, .. } => Some(format!(
                "{} … {} {}",
                head(cur),
                self.paint("32", "ok"),
                secs(*duration_ms)
            )),
            EventKind::StepFailed { .. } => self.step_failed(event, cur),
            EventKind::StepBlocked {
                step_id,
                status,
                blocked_by,
            } => Some(match blocked_by {
                Some(by) => format!(
                    "[-] {} … {status} (depends on failed step {})",
                    l(&self.ext(step_id)),
                    l(&self.ext(by))
                ),
                None => format!(
                    "[-] {} … {status} (the run stopped before it)",
                    l(&self.ext(step_id))
                ),
            }),
            EventKind::RunFinished { .. } => self.run_finished(event),
            _ => None,
        }
    }

    /// The run's header: plan, run, workspace, approval, database, sandbox and jobs.
    fn run_started(&self, event: &Event) -> Option<String> {
        let EventKind::RunStarted {
            plan_id,
            steps,
            already_completed,
            sandbox,
            workspace,
            database,
            jobs,
            approval,
            ..
        } = &event.kind
        else {
            return None;
        };
        let mut header = match already_completed {
            None => format!(
                "acode-run: plan {} ({steps} step{}), run {}",
                l(&self.ext(plan_id)),
                if *steps == 1 { "" } else { "s" },
                event.run_id
            ),
            Some(done) => format!(
                "acode-run: resuming run {} of plan {}: {done} of {steps} steps already completed",
                event.run_id,
                l(&self.ext(plan_id))
            ),
        };
        header.push_str(&format!("\n  workspace: {}", l(workspace)));
        if let Some(a) = approval {
            header.push_str(&format!("\n  approved by {}", l(&self.ext(&a.line()))));
        }
        if let Some(db) = database {
            header.push_str(&format!("\n  database: {}", l(db)));
        }
        for line in sandbox.lines().iter().chain(&sandbox.notes) {
            header.push_str(&format!("\n  sandbox: {}", l(line)));
        }
        header.push_str(&format!("\n  jobs: {} ({})", jobs.jobs, jobs.from.label()));
        for group in &jobs.alone {
            header.push_str(&format!(
                "\n  jobs: {} still run{} alone: {}",
                l(&self.ext(&super::id_list(&group.steps))),
                if group.steps.len() == 1 { "s" } else { "" },
                group.why
            ));
        }
        Some(header)
    }

    /// A failed step's line: its verdict, error and what its command printed last.
    fn step_failed(&self, event: &Event, cur: &Current) -> Option<String> {
        let EventKind::StepFailed {
            error_code,
            error,
            output,
            duration_ms,
            tolerated,
            ..
        } = &event.kind
        else {
            return None;
        };
        let verdict = if *tolerated {
            self.paint("33", "failed, tolerated")
        } else if error_code == "cancelled" {
            self.paint("33", "cancelled")
        } else {
            self.paint("31", "FAILED")
        };
        // `cancelled` says its kind already: not `cancelled (cancelled)`.
        let kind = if error_code == "cancelled" && !*tolerated {
            String::new()
        } else {
            format!("({error_code}) ")
        };
        let mut line = format!(
            "{} … {verdict} {kind}{}\n      {}",
            head(cur),
            secs(*duration_ms),
            tx(&self.ext(error))
        );
        if let Some(output) = output {
            // What the command printed last: the failing test's name, the compiler error.
            for text_line in self.ext(output).lines() {
                line.push_str("\n      | ");
                line.push_str(&l(text_line));
            }
        }
        if error_code == "confirmation_denied" {
            line.push_str(
                "\n      (when no one can be asked, confirmations are denied: run on a \
                 terminal, or pass --confirm auto-approve after review)",
            );
        }
        Some(line)
    }

    /// The run's closing summary.
    fn run_finished(&self, event: &Event) -> Option<String> {
        let EventKind::RunFinished {
            status,
            exit_code,
            duration_ms,
            completed,
            failed,
            tolerated,
            blocked,
            cancelled,
            first_failure,
            violations,
        } = &event.kind
        else {
            return None;
        };
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
        let cancelled = match cancelled {
            0 => String::new(),
            n => format!(", {n} cancelled"),
        };
        // With steps running at once, the reader needs to know which failure counts.
        let cause = match first_failure {
            Some(id) if status != "interrupted" => {
                format!(": step {} failed first", l(&self.ext(id)))
            }
            _ => String::new(),
        };
        Some(format!(
            "run {} {colored}: {completed} completed, {failed}{cancelled}, {blocked} not run{refused}, {} (exit {exit_code}{cause})",
            event.run_id,
            secs(*duration_ms)
        ))
    }
}

/// What each of a step's lines starts with: `[index/total] id tool summary`. Ids, tools and
/// summaries come from plans and models: one sanitiser for all of them.
fn head(cur: &Current) -> String {
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
}

/// The step an event is about, for the events that carry one after the step started.
fn step_of(kind: &EventKind) -> Option<&str> {
    match kind {
        EventKind::ToolHeartbeat { step_id, .. }
        | EventKind::ToolCall { step_id, .. }
        | EventKind::RetryScheduled { step_id, .. }
        | EventKind::LlmTurn { step_id, .. }
        | EventKind::NetworkRequest { step_id, .. }
        | EventKind::StepCompleted { step_id, .. }
        | EventKind::StepFailed { step_id, .. } => Some(step_id),
        _ => None,
    }
}

/// What a tool call is about, for its progress line: the path, pattern or command it names.
fn call_subject(arguments: &serde_json::Value) -> String {
    for key in ["path", "pattern", "command", "query"] {
        if let Some(v) = arguments.get(key).and_then(|v| v.as_str()) {
            return v.to_string();
        }
    }
    match arguments.get("argv").and_then(|v| v.as_array()) {
        Some(items) => items
            .iter()
            .filter_map(|i| i.as_str())
            .collect::<Vec<_>>()
            .join(" "),
        None => String::new(),
    }
}

impl<W: Write + Send> HumanPrinter<W> {
    /// Prints the line `event` makes, if any. (It becomes a progress callback in
    /// `executor::callbacks`, so this module does not import the executor.)
    pub fn write_event(&self, event: &Event) {
        let mut guard = match self.out.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let (out, steps) = &mut *guard;
        let shown = !self.failures_only
            || matches!(
                event.kind,
                EventKind::StepFailed { .. } | EventKind::RunRefused { .. }
            );
        if let Some(line) = self.render(event, steps).filter(|_| shown) {
            // Outside text was redacted field by field; the whole line once more for known values
            // and token formats only, so the runner's words stay readable.
            let line = self.redactor.redact_message(&line);
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::ProgressCallback;

    fn ev(kind: EventKind) -> Event {
        Event {
            v: 1,
            seq: 1,
            ts_ms: 0,
            run_id: "r1".into(),
            kind,
        }
    }

    #[test]
    fn outside_text_is_redacted_and_the_runners_words_are_not() {
        let red = Arc::new(Redactor::new().with_extra_values(["known-secret-1"]));
        let p = HumanPrinter::new(Vec::new(), false, red);
        p.on_event(&ev(EventKind::StepStarted {
            step_id: "db_password".into(),
            tool: "run_command".into(),
            index: 1,
            total: 1,
            summary: "mysql --password hunter22".into(),
        }));
        p.on_event(&ev(EventKind::StepFailed {
            step_id: "db_password".into(),
            error_code: "tool_failed".into(),
            error: "password: hunter33 and known-secret-1".into(),
            output: Some("--- stdout (last 2 lines) ---\ntest it_works ... FAILED\nkey known-secret-1\x1b[2J".into()),
            duration_ms: 5,
            tolerated: false,
        }));
        p.on_event(&ev(EventKind::StepBlocked {
            step_id: "api_secret".into(),
            status: "blocked".into(),
            blocked_by: Some("db_password".into()),
        }));
        let text = String::from_utf8(p.out.into_inner().unwrap().0).unwrap();
        for s in ["hunter22", "hunter33", "known-secret-1"] {
            assert!(!text.contains(s), "{s} in {text}");
        }
        // What the command printed is shown under the failure, redacted and sanitised.
        assert!(text.contains("      | test it_works ... FAILED"), "{text}");
        assert!(!text.contains('\x1b'), "{text}");
        // The ids are shown, and the runner's own words around them are whole.
        assert!(text.contains("[1/1] db_password run_command"), "{text}");
        assert!(
            text.contains("[-] api_secret … blocked (depends on failed step db_password)"),
            "{text}"
        );
    }
}
