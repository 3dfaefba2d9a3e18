//! The two callback traits an embedder implements, and the shipped implementations.
//!
//! `ConfirmationCallback` is the gate before anything that needs a human's yes; `ProgressCallback`
//! observes everything. Both are `Send + Sync` so an embedder can drive a UI from another thread.

use std::io::{BufRead, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value;

use super::{StepResult, ToolResult};
use crate::events::Event;
use crate::plan::Step;
use crate::tools::ToolCall;

/// How a run is driven from outside — who confirms, who watches, the flag that stops it — held
/// the same way by an [`Executor`](super::Executor) and a
/// [`PlanRunner`](crate::runner::PlanRunner), both set through [`Driven`]'s methods.
#[derive(Clone)]
pub struct Callbacks {
    /// Who says yes to calls that need confirmation; `None`: the holder's default (an
    /// executor denies; a plan runner answers as its settings' `confirm` mode says).
    pub confirm: Option<Arc<dyn ConfirmationCallback>>,
    /// Who observes the run.
    pub progress: Arc<dyn ProgressCallback>,
    /// Once set (from a signal handler, another thread), the run stops as Ctrl-C stops it; a
    /// terminal prompt watches it too.
    pub cancel: Arc<AtomicBool>,
}

impl Default for Callbacks {
    fn default() -> Self {
        Callbacks {
            confirm: None,
            progress: Arc::new(NoopProgress),
            cancel: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// The builder methods of [`Callbacks`], written once for everything that holds them.
pub trait Driven: Sized {
    /// The callbacks held.
    fn callbacks_mut(&mut self) -> &mut Callbacks;

    /// Uses `confirm` as the confirmation gate instead of the default.
    fn with_confirmation(mut self, confirm: Arc<dyn ConfirmationCallback>) -> Self {
        self.callbacks_mut().confirm = Some(confirm);
        self
    }

    /// Sends progress to `progress`.
    fn with_progress(mut self, progress: Arc<dyn ProgressCallback>) -> Self {
        self.callbacks_mut().progress = progress;
        self
    }

    /// Shares a cancellation flag (set it from a signal handler to interrupt the run).
    fn with_cancel_flag(mut self, cancel: Arc<AtomicBool>) -> Self {
        self.callbacks_mut().cancel = cancel;
        self
    }

    /// Replaces all three at once.
    fn with_callbacks(mut self, callbacks: Callbacks) -> Self {
        *self.callbacks_mut() = callbacks;
        self
    }
}

/// How confirmations are answered, as `--confirm` says: one of the shipped callbacks. Recorded on
/// a run (see [`crate::runner::RunSettings`]) so that a resumed run answers the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConfirmMode {
    /// Ask on the terminal ([`TerminalPrompt`]).
    Prompt,
    /// Say yes to everything ([`AutoApprove`]).
    AutoApprove,
    /// Say no to everything ([`AutoDeny`]).
    AutoDeny,
}

impl ConfirmMode {
    /// The mode's name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            ConfirmMode::Prompt => "prompt",
            ConfirmMode::AutoApprove => "auto-approve",
            ConfirmMode::AutoDeny => "auto-deny",
        }
    }

    /// The callback answering this way; a prompt reads the terminal's stdin and stops the run when
    /// `cancel` is set (Ctrl-C while it waits), and Ctrl-D denies.
    pub fn callback(self, cancel: Arc<AtomicBool>) -> Arc<dyn ConfirmationCallback> {
        match self {
            ConfirmMode::AutoApprove => Arc::new(AutoApprove),
            ConfirmMode::AutoDeny => Arc::new(AutoDeny),
            ConfirmMode::Prompt => Arc::new(
                TerminalPrompt::new(
                    std::io::BufReader::new(CancellableStdin::new(cancel.clone())),
                    std::io::stderr(),
                )
                .with_cancel(cancel),
            ),
        }
    }
}

/// What the confirmation gate is asked about.
#[derive(Debug, Clone, Serialize)]
pub struct ConfirmationRequest {
    /// The run.
    pub run_id: String,
    /// The step.
    pub step_id: String,
    /// The tool about to run.
    pub tool: String,
    /// Its arguments (after substitution).
    pub arguments: Value,
    /// Why confirmation is needed (step flag, policy, command outside the auto-approve set).
    pub reason: String,
    /// What would change, e.g. a unified diff for writes and edits.
    pub preview: Option<String>,
}

/// The gate's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Go ahead with this one.
    Approve,
    /// Go ahead with this and every later request in the run.
    ApproveAll,
    /// Do not run it; the step fails with `ConfirmationDenied`.
    Deny,
    /// Do not run it and stop the run.
    Quit,
}

impl Decision {
    /// The identifier used in events.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Approve => "approve",
            Decision::ApproveAll => "approve_all",
            Decision::Deny => "deny",
            Decision::Quit => "quit",
        }
    }
}

/// Decides whether a tool call that needs confirmation may run.
pub trait ConfirmationCallback: Send + Sync {
    /// Called once per call that needs confirmation; must not panic.
    fn request_confirmation(&self, request: &ConfirmationRequest) -> Decision;
}

/// Observes a run. Every method has a no-op default, so implement only what you need.
///
/// `on_event` receives every event (the JSONL and human outputs are built on it); the typed methods
/// are conveniences for embedders who want the richer structs.
pub trait ProgressCallback: Send + Sync {
    /// A step is starting.
    fn on_step_start(&self, _step: &Step) {}
    /// A tool call is about to run (after its checks passed).
    fn on_tool_call(&self, _call: &ToolCall) {}
    /// A tool call finished or was refused, and is recorded.
    fn on_tool_result(&self, _result: &ToolResult) {}
    /// A step completed.
    fn on_step_complete(&self, _result: &StepResult) {}
    /// A step failed.
    fn on_step_failed(&self, _result: &StepResult) {}
    /// Any event, in order.
    fn on_event(&self, _event: &Event) {}
}

/// Approves everything: for tests and trusted automation (`--confirm auto-approve`).
#[derive(Debug, Default, Clone, Copy)]
pub struct AutoApprove;

impl ConfirmationCallback for AutoApprove {
    fn request_confirmation(&self, _request: &ConfirmationRequest) -> Decision {
        Decision::Approve
    }
}

/// Denies everything: the fail-closed default when nobody can be asked (`--confirm auto-deny`).
#[derive(Debug, Default, Clone, Copy)]
pub struct AutoDeny;

impl ConfirmationCallback for AutoDeny {
    fn request_confirmation(&self, _request: &ConfirmationRequest) -> Decision {
        Decision::Deny
    }
}

/// Ignores progress.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoopProgress;

impl ProgressCallback for NoopProgress {}

// The event writers live in `events`, below the executor; they become progress callbacks here,
// beside the trait, so `events` does not import the executor (imports point one way).
impl<W: std::io::Write + Send> ProgressCallback for crate::events::human::HumanPrinter<W> {
    fn on_event(&self, event: &Event) {
        self.write_event(event);
    }
}

impl<W: std::io::Write + Send> ProgressCallback for crate::events::jsonl::JsonlWriter<W> {
    fn on_event(&self, event: &Event) {
        self.write_event(event);
    }
}

impl ProgressCallback for crate::events::otel::OtelSink {
    fn on_event(&self, event: &Event) {
        self.write_event(event);
    }
    fn on_tool_result(&self, result: &ToolResult) {
        self.tool_result_content(&result.step_id, &result.call_id, &result.content);
    }
}

/// A shared callback is a callback: the same one can sit in a [`Fanout`] and stay with its owner
/// (the trace sink the runner flushes after the run).
impl<P: ProgressCallback + ?Sized> ProgressCallback for Arc<P> {
    fn on_step_start(&self, step: &Step) {
        (**self).on_step_start(step);
    }
    fn on_tool_call(&self, call: &ToolCall) {
        (**self).on_tool_call(call);
    }
    fn on_tool_result(&self, result: &ToolResult) {
        (**self).on_tool_result(result);
    }
    fn on_step_complete(&self, result: &StepResult) {
        (**self).on_step_complete(result);
    }
    fn on_step_failed(&self, result: &StepResult) {
        (**self).on_step_failed(result);
    }
    fn on_event(&self, event: &Event) {
        (**self).on_event(event);
    }
}

/// Sends progress to several callbacks in order (e.g. the JSONL writer and an embedder's UI).
#[derive(Default)]
pub struct Fanout(pub Vec<Box<dyn ProgressCallback>>);

impl ProgressCallback for Fanout {
    fn on_step_start(&self, step: &Step) {
        self.0.iter().for_each(|p| p.on_step_start(step));
    }
    fn on_tool_call(&self, call: &ToolCall) {
        self.0.iter().for_each(|p| p.on_tool_call(call));
    }
    fn on_tool_result(&self, result: &ToolResult) {
        self.0.iter().for_each(|p| p.on_tool_result(result));
    }
    fn on_step_complete(&self, result: &StepResult) {
        self.0.iter().for_each(|p| p.on_step_complete(result));
    }
    fn on_step_failed(&self, result: &StepResult) {
        self.0.iter().for_each(|p| p.on_step_failed(result));
    }
    fn on_event(&self, event: &Event) {
        self.0.iter().for_each(|p| p.on_event(event));
    }
}

/// Asks on a terminal: `y` yes, `n` no, `a` yes to all, `q` quit. Shows the preview (a diff) first.
///
/// Generic over its input and output so it can be tested with byte buffers; the CLI uses stdin and
/// stderr.
///
/// End of input (Ctrl-D) denies the call. With [`TerminalPrompt::with_cancel`], a cancel flag set
/// while the prompt waits (Ctrl-C) makes it answer [`Decision::Quit`], which with the flag set stops
/// the run as interrupted; pair it with [`CancellableStdin`] so the read itself gives up.
pub struct TerminalPrompt<R: BufRead + Send, W: Write + Send> {
    io: Mutex<(R, W)>,
    cancel: Option<Arc<AtomicBool>>,
}

impl<R: BufRead + Send, W: Write + Send> TerminalPrompt<R, W> {
    /// A prompt reading answers from `input` and writing questions to `output`.
    pub fn new(input: R, output: W) -> Self {
        TerminalPrompt {
            io: Mutex::new((input, output)),
            cancel: None,
        }
    }

    /// Treats `cancel` being set (by Ctrl-C) while waiting for an answer as the end of the run.
    pub fn with_cancel(mut self, cancel: Arc<AtomicBool>) -> Self {
        self.cancel = Some(cancel);
        self
    }

    fn cancelled(&self) -> bool {
        self.cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::SeqCst))
    }
}

/// Standard input that stops waiting when a cancel flag is set: a blocking `read` would sit through
/// Ctrl-C (the signal handler restarts it), so this polls with a short timeout and returns an error
/// once the flag is up.
pub struct CancellableStdin {
    cancel: Arc<AtomicBool>,
}

impl CancellableStdin {
    /// Reads file descriptor 0 until `cancel` is set.
    pub fn new(cancel: Arc<AtomicBool>) -> Self {
        CancellableStdin { cancel }
    }
}

impl Read for CancellableStdin {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if self.cancel.load(Ordering::SeqCst) {
                // Not `ErrorKind::Interrupted`: `read_line` would retry that.
                return Err(std::io::Error::other("cancelled"));
            }
            let mut pfd = libc::pollfd {
                fd: 0,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut pfd, 1, 50) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if n == 0 {
                continue;
            }
            // SAFETY: `buf` is valid for `buf.len()` bytes.
            let r = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            return Ok(r as usize);
        }
    }
}

/// The most preview lines shown in a prompt; longer diffs are cut with a note.
const PREVIEW_LINES: usize = 80;

impl<R: BufRead + Send, W: Write + Send> ConfirmationCallback for TerminalPrompt<R, W> {
    fn request_confirmation(&self, request: &ConfirmationRequest) -> Decision {
        if self.cancelled() {
            return Decision::Quit;
        }
        let mut guard = match self.io.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let (input, out) = &mut *guard;
        // Everything here comes from a plan or a model: shown through the one terminal sanitiser.
        use crate::terminal::line as l;
        let _ = writeln!(
            out,
            "\nstep {} wants to run {} ({})",
            l(&request.step_id),
            l(&request.tool),
            l(&request.reason)
        );
        let _ = writeln!(out, "  arguments: {}", l(&request.arguments.to_string()));
        if let Some(preview) = &request.preview {
            let lines: Vec<&str> = preview.lines().collect();
            for line in lines.iter().take(PREVIEW_LINES) {
                let _ = writeln!(out, "  {}", l(line));
            }
            if lines.len() > PREVIEW_LINES {
                let _ = writeln!(out, "  … {} more lines", lines.len() - PREVIEW_LINES);
            }
        }
        loop {
            let _ = write!(out, "allow? [y]es / [n]o / [a]ll / [q]uit: ");
            let _ = out.flush();
            let mut line = String::new();
            let read = input.read_line(&mut line);
            if self.cancelled() {
                // Ctrl-C while waiting: stop the run (interrupted, since the flag is set).
                let _ = writeln!(out);
                return Decision::Quit;
            }
            match read {
                // End of input (Ctrl-D): nobody is there to say yes.
                Ok(0) | Err(_) => return Decision::Deny,
                Ok(_) => {}
            }
            match line.trim().to_ascii_lowercase().as_str() {
                "y" | "yes" => return Decision::Approve,
                "n" | "no" => return Decision::Deny,
                "a" | "all" => return Decision::ApproveAll,
                "q" | "quit" => return Decision::Quit,
                _ => {
                    let _ = writeln!(out, "please answer y, n, a or q");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> ConfirmationRequest {
        ConfirmationRequest {
            run_id: "r".into(),
            step_id: "s".into(),
            tool: "file_delete".into(),
            arguments: serde_json::json!({"path": "a"}),
            reason: "policy".into(),
            preview: Some("-old\n+new".into()),
        }
    }

    #[test]
    fn terminal_prompt_reads_answers() {
        for (input, expected) in [
            ("y\n", Decision::Approve),
            ("maybe\nn\n", Decision::Deny),
            ("a\n", Decision::ApproveAll),
            ("q\n", Decision::Quit),
            ("", Decision::Deny),
        ] {
            let prompt = TerminalPrompt::new(input.as_bytes(), Vec::new());
            assert_eq!(
                prompt.request_confirmation(&request()),
                expected,
                "{input:?}"
            );
            let (_, out) = prompt.io.into_inner().unwrap();
            let out = String::from_utf8(out).unwrap();
            assert!(out.contains("+new"), "preview shown: {out}");
        }
    }

    #[test]
    fn a_cancel_while_waiting_quits() {
        let cancel = Arc::new(AtomicBool::new(true));
        let prompt = TerminalPrompt::new("y\n".as_bytes(), Vec::new()).with_cancel(cancel);
        assert_eq!(prompt.request_confirmation(&request()), Decision::Quit);
    }
}
