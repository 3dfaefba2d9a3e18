//! The per-call pipeline every tool call goes through, whoever asked for it (a plan step or an LLM):
//! schema → sandbox/policy check → confirmation → run → record (committed) → progress → result.
//!
//! Keeping this in one place is what makes "LLM output is untrusted input" true: a model's call and
//! a plan's call cannot take different paths.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::callbacks::{ConfirmationCallback, ConfirmationRequest, Decision, ProgressCallback};
use super::retry::Backoff;
use super::settings::AgentSettings;
use super::{ExecutionError, ToolResult};
use crate::error::{ErrorKind, now_ms};
use crate::events::{EVENT_SCHEMA_VERSION, Event, EventKind};
use crate::llm::{LlmClient, Usage};
use crate::plan::Step;
use crate::sandbox::{Policy, Workspace};
use crate::store::{ExecutionRecord, Store};
use crate::tools::{Artifact, ToolCall, ToolContext, ToolOutput, ToolRegistry};

/// Numbers and sends events; shared by reference with tools (for heartbeats) and drivers.
///
/// Numbering and sending happen under one lock, so events from steps running at once
/// (`--jobs`) reach the callbacks with strictly increasing `seq`.
pub struct Emitter {
    run_id: String,
    seq: Mutex<u64>,
    progress: Arc<dyn ProgressCallback>,
}

impl Emitter {
    /// An emitter for `run_id` sending to `progress`.
    pub fn new(run_id: String, progress: Arc<dyn ProgressCallback>) -> Self {
        Emitter {
            run_id,
            seq: Mutex::new(0),
            progress,
        }
    }

    /// Sends one event with the next sequence number.
    pub fn emit(&self, kind: EventKind) {
        let mut seq = match self.seq.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        *seq += 1;
        let event = Event {
            v: EVENT_SCHEMA_VERSION,
            seq: *seq,
            ts_ms: now_ms(),
            run_id: self.run_id.clone(),
            kind,
        };
        self.progress.on_event(&event);
    }

    /// The progress callback, for the typed hooks.
    pub fn progress(&self) -> &dyn ProgressCallback {
        &*self.progress
    }

    /// The run id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }
}

/// Run-wide state a step needs: shared by every step of one run.
pub struct RunContext<'r> {
    /// Where events go.
    pub emitter: &'r Emitter,
    /// The database.
    pub store: &'r mut Store,
    /// Available tools.
    pub registry: &'r ToolRegistry,
    /// The sandbox root.
    pub workspace: &'r Workspace,
    /// The policy.
    pub policy: &'r Policy,
    /// The confirmation gate.
    pub confirm: &'r dyn ConfirmationCallback,
    /// Set once the user answered "all".
    pub approve_all: &'r Mutex<bool>,
    /// Stops what this step is running: set by "quit", a signal, or (`--jobs`) a step beside it
    /// failing fatally.
    pub cancel: &'r AtomicBool,
    /// The run's own interruption flag (a signal, "quit"); the same as `cancel` when steps run
    /// one at a time.
    pub interrupt: &'r AtomicBool,
    /// Set once, to the failed step's id, when a fatal failure stops the steps running beside it.
    pub sibling_failed: &'r std::sync::OnceLock<String>,
    /// The run's OS sandbox (mode, Landlock rules, limits, temp directory).
    pub sandbox: &'r crate::sandbox::OsSandbox,
    /// Retry schedule for transient failures (the step's `retries` sets the count).
    pub backoff: Backoff,
    /// The LLM for agent steps, if one is configured.
    pub llm: Option<&'r Arc<dyn LlmClient>>,
    /// How agent steps talk to the LLM.
    pub agent: &'r AgentSettings,
    /// LLM tokens used so far in the run, by every step (one budget for steps running at once).
    pub tokens: &'r TokenMeter,
}

/// The run's LLM token count, shared by the steps running at once.
#[derive(Debug, Default)]
pub struct TokenMeter(Mutex<Usage>);

impl TokenMeter {
    /// A meter starting at `used` (a resumed run carries on from what it had used).
    pub fn new(used: Usage) -> Self {
        TokenMeter(Mutex::new(used))
    }

    /// The tokens used so far.
    pub fn get(&self) -> Usage {
        match self.0.lock() {
            Ok(g) => *g,
            Err(poisoned) => *poisoned.into_inner(),
        }
    }

    /// Adds one call's usage.
    pub fn add(&self, usage: Usage) {
        match self.0.lock() {
            Ok(mut g) => g.add(usage),
            Err(poisoned) => poisoned.into_inner().add(usage),
        }
    }

    /// Prompt plus completion tokens so far, for the budget.
    pub fn total(&self) -> u64 {
        self.get().total()
    }
}

/// Per-step state: the step being run and what it has done so far.
pub struct StepContext<'s, 'r> {
    /// Run-wide state.
    pub run: &'s mut RunContext<'r>,
    /// The step, as in the plan.
    pub step: &'s Step,
    /// Tool-call attempts made in this step.
    pub attempts: u32,
    /// Set when the user chose "quit" at a prompt.
    pub quit: bool,
    /// Execution ids recorded for this step.
    pub execution_ids: Vec<String>,
    /// LLM tokens used by this step.
    pub tokens: Usage,
    next_call: u32,
}

/// Options for one call.
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    /// Ask for confirmation even if the policy would not (the step's `requires_confirmation`).
    pub force_confirmation: bool,
    /// Retries allowed for transient failures.
    pub retries: u32,
    /// Time limit for the call.
    pub timeout: Option<Duration>,
    /// The LLM turn execution that asked for this call.
    pub parent_execution_id: Option<String>,
}

impl<'s, 'r> StepContext<'s, 'r> {
    /// A fresh context for `step`.
    pub fn new(run: &'s mut RunContext<'r>, step: &'s Step) -> Self {
        StepContext {
            run,
            step,
            attempts: 0,
            quit: false,
            execution_ids: Vec::new(),
            tokens: Usage::default(),
            next_call: 0,
        }
    }

    /// A new call id for this step (`<step>#<n>`), for drivers that get none from elsewhere.
    pub fn new_call_id(&mut self) -> String {
        self.next_call += 1;
        format!("{}#{}", self.step.step_id, self.next_call)
    }

    /// Records an execution that is not a tool call (an LLM turn), returning its id.
    pub fn record(
        &mut self,
        mut record: ExecutionRecord,
        artifacts: &[Artifact],
    ) -> Result<String, ExecutionError> {
        if record.execution_id.is_empty() {
            record.execution_id = uuid::Uuid::new_v4().to_string();
        }
        self.run.store.record_execution(&record, artifacts, &[])?;
        self.execution_ids.push(record.execution_id.clone());
        Ok(record.execution_id)
    }

    fn base_record(
        &self,
        call: &ToolCall,
        attempt: u32,
        parent: Option<String>,
    ) -> ExecutionRecord {
        ExecutionRecord {
            execution_id: uuid::Uuid::new_v4().to_string(),
            run_id: self.run.emitter.run_id().to_string(),
            step_id: self.step.step_id.clone(),
            tool_name: call.tool.clone(),
            arguments_json: call.arguments.to_string(),
            started_at: now_ms(),
            duration_ms: 0,
            success: false,
            exit_code: None,
            error_code: None,
            error_message: None,
            attempt,
            turn: call.turn,
            parent_execution_id: parent,
            prompt_tokens: None,
            completion_tokens: None,
            program_path: None,
            program_sha256: None,
        }
    }

    /// Emits a call's `tool_call` event and progress hook, before its `tool_result`: for a call
    /// that runs and for one refused before running alike.
    fn announce(&self, call: &ToolCall, attempt: u32) {
        self.run.emitter.emit(EventKind::ToolCall {
            step_id: call.step_id.clone(),
            call_id: call.call_id.clone(),
            tool: call.tool.clone(),
            arguments: call.arguments.clone(),
            attempt,
            turn: call.turn,
            server: crate::sandbox::policy::mcp_server_of(&call.tool).map(str::to_string),
        });
        self.run.emitter.progress().on_tool_call(call);
    }

    /// Records a call that was refused before running (unknown tool, bad arguments, sandbox,
    /// denial) and reports it like any other result.
    pub fn refuse(
        &mut self,
        call: &ToolCall,
        attempt: u32,
        parent: Option<String>,
        kind: ErrorKind,
        message: String,
    ) -> Result<ToolResult, ExecutionError> {
        // Every `tool_result` follows its `tool_call`, a refused call's too: a consumer of the
        // events sees what was asked before what became of it.
        self.announce(call, attempt);
        let mut record = self.base_record(call, attempt, parent);
        record.error_code = Some(kind.as_str().to_string());
        record.error_message = Some(message.clone());
        self.finish(
            call,
            record,
            ToolOutput::failed(kind, message),
            Duration::ZERO,
        )
    }

    fn finish(
        &mut self,
        call: &ToolCall,
        mut record: ExecutionRecord,
        output: ToolOutput,
        elapsed: Duration,
    ) -> Result<ToolResult, ExecutionError> {
        let kind = (!output.success).then(|| output.failure_kind.unwrap_or(ErrorKind::ToolFailed));
        record.duration_ms = elapsed.as_millis() as i64;
        record.success = output.success;
        record.exit_code = output.exit_code;
        record.error_code = kind.map(|k| k.as_str().to_string());
        record.error_message = output.error.clone();
        if let Some(p) = &output.program {
            record.program_path = Some(p.path.to_string_lossy().into_owned());
            record.program_sha256 = Some(p.sha256.clone());
        }
        self.run
            .store
            .record_execution(&record, &output.artifacts, &output.network)?;
        self.execution_ids.push(record.execution_id.clone());
        let result = ToolResult {
            call_id: call.call_id.clone(),
            step_id: call.step_id.clone(),
            tool: call.tool.clone(),
            execution_id: record.execution_id,
            success: output.success,
            error_kind: kind,
            error: output.error,
            exit_code: output.exit_code,
            content: output.content,
            duration_ms: elapsed.as_millis() as u64,
            attempt: record.attempt,
            excerpt: output.excerpt,
        };
        for r in &output.network {
            self.run.emitter.emit(EventKind::NetworkRequest {
                step_id: call.step_id.clone(),
                execution_id: result.execution_id.clone(),
                request: r.clone(),
            });
        }
        let server = crate::sandbox::policy::mcp_server_of(&call.tool).map(str::to_string);
        if kind == Some(ErrorKind::McpChanged) {
            self.run.emitter.emit(EventKind::McpPinMismatch {
                step_id: call.step_id.clone(),
                tool: call.tool.clone(),
                server: server.clone().unwrap_or_default(),
                message: result.error.clone().unwrap_or_default(),
            });
        }
        self.run.emitter.emit(EventKind::ToolResult {
            step_id: result.step_id.clone(),
            call_id: result.call_id.clone(),
            execution_id: result.execution_id.clone(),
            tool: result.tool.clone(),
            success: result.success,
            exit_code: result.exit_code,
            duration_ms: result.duration_ms,
            error_code: kind.map(|k| k.as_str().to_string()),
            error: result.error.clone(),
            program: output.program,
            server,
        });
        self.run.emitter.progress().on_tool_result(&result);
        Ok(result)
    }

    /// Asks the confirmation gate about `call` (unless the user already approved everything) and
    /// reports the decision; returns whether it may run. "Quit" also marks the step to stop the run.
    pub fn confirm(&mut self, call: &ToolCall, reason: String, preview: Option<String>) -> bool {
        if self.run.approve_all.lock().map(|g| *g).unwrap_or(false) {
            return true;
        }
        self.run.emitter.emit(EventKind::ConfirmationRequested {
            step_id: call.step_id.clone(),
            tool: call.tool.clone(),
            reason: reason.clone(),
        });
        let request = ConfirmationRequest {
            run_id: self.run.emitter.run_id().to_string(),
            step_id: call.step_id.clone(),
            tool: call.tool.clone(),
            arguments: call.arguments.clone(),
            reason,
            preview,
        };
        let decision = self.run.confirm.request_confirmation(&request);
        self.run.emitter.emit(EventKind::ConfirmationDecided {
            step_id: call.step_id.clone(),
            tool: call.tool.clone(),
            decision: decision.as_str().to_string(),
        });
        match decision {
            Decision::Approve => true,
            Decision::ApproveAll => {
                if let Ok(mut g) = self.run.approve_all.lock() {
                    *g = true;
                }
                true
            }
            Decision::Deny => false,
            Decision::Quit => {
                self.quit = true;
                false
            }
        }
    }

    /// Runs one tool call through the whole pipeline. A refused or failed call is an `Ok` result with
    /// `success: false` (it is recorded and the driver decides); `Err` means the database failed.
    pub fn call_tool(
        &mut self,
        call: ToolCall,
        opts: &CallOptions,
    ) -> Result<ToolResult, ExecutionError> {
        let parent = opts.parent_execution_id.clone();
        // A value a call puts into a secret-named `env` key (a model's call too) is a secret from
        // here on, before the call is recorded or announced.
        if call.tool == crate::tools::command::NAME {
            self.run
                .store
                .redactor()
                .add_values(crate::plan::variables::secret_env_values(&call.arguments));
        }
        let Some((tool, schema)) = self.run.registry.lookup(&call.tool) else {
            self.attempts += 1;
            let known: Vec<&str> = self.run.registry.names().collect();
            let msg = format!(
                "unknown tool {:?}{} (available: {})",
                call.tool,
                crate::suggest::did_you_mean(&call.tool, known.iter().copied()),
                known.join(", ")
            );
            return self.refuse(&call, 1, parent, ErrorKind::InvalidArguments, msg);
        };
        let schema_errors = crate::tools::schema::validate(schema, &call.arguments, "arguments");
        if !schema_errors.is_empty() {
            self.attempts += 1;
            let msg = format!(
                "invalid arguments for {}: {}",
                call.tool,
                schema_errors.join("; ")
            );
            return self.refuse(&call, 1, parent, ErrorKind::InvalidArguments, msg);
        }
        let timeout = opts
            .timeout
            .unwrap_or(Duration::from_secs(self.run.policy.limits.timeout_s));
        let emitter = self.run.emitter;
        let heartbeat_step = call.step_id.clone();
        let heartbeat_call = call.call_id.clone();
        let heartbeat_tool = call.tool.clone();
        let heartbeat = move |elapsed: Duration| {
            emitter.emit(EventKind::ToolHeartbeat {
                step_id: heartbeat_step.clone(),
                call_id: heartbeat_call.clone(),
                tool: heartbeat_tool.clone(),
                elapsed_ms: elapsed.as_millis() as u64,
            })
        };
        let ctx = ToolContext {
            workspace: self.run.workspace,
            policy: self.run.policy,
            timeout,
            sandbox: self.run.sandbox,
            cancel: self.run.cancel,
            heartbeat: &heartbeat,
            creates: &self.step.creates,
            history: None,
        };
        if let Err(e) = tool.check(&call.arguments, &ctx) {
            self.attempts += 1;
            return self.refuse(&call, 1, parent, e.kind(), e.to_string());
        }

        // Confirmation, once per call.
        let reason = if opts.force_confirmation {
            Some("the step requires confirmation".to_string())
        } else if self.run.policy.tool_needs_confirmation(&call.tool) {
            Some(format!("policy requires confirmation for {}", call.tool))
        } else if tool.needs_confirmation(&call.arguments, &ctx) {
            Some("not in the policy's auto-approve set".to_string())
        } else {
            None
        };
        if let Some(reason) = reason {
            let preview = tool.preview(&call.arguments, &ctx);
            if !self.confirm(&call, reason, preview) {
                self.attempts += 1;
                let msg = format!(
                    "confirmation denied for {} in step {}",
                    call.tool, call.step_id
                );
                return self.refuse(&call, 1, parent, ErrorKind::ConfirmationDenied, msg);
            }
        }

        let mut attempt = 0;
        loop {
            attempt += 1;
            self.attempts += 1;
            self.announce(&call, attempt);
            let record = self.base_record(&call, attempt, parent.clone());
            let started = Instant::now();
            let outcome = {
                // The history of this run's workspace only, read from the run's own database.
                let history = WorkspaceHistory {
                    store: self.run.store,
                    workspace: self.run.workspace.root().display().to_string(),
                };
                let ctx = ToolContext {
                    history: Some(&history),
                    ..ctx
                };
                tool.run(&call.arguments, &ctx)
            };
            let elapsed = started.elapsed();
            let (output, transient) = match outcome {
                Ok(out) => {
                    let transient = out.transient;
                    (out, transient)
                }
                Err(e) => {
                    let transient = e.is_transient();
                    (ToolOutput::failed(e.kind(), e.to_string()), transient)
                }
            };
            let result = self.finish(&call, record, output, elapsed)?;
            let delay = self
                .run
                .backoff
                .with_retries(opts.retries)
                .delay(attempt, None);
            if let (true, Some(delay)) = (transient, delay)
                && !self.run.cancel.load(Ordering::SeqCst)
            {
                self.run.emitter.emit(EventKind::RetryScheduled {
                    step_id: call.step_id.clone(),
                    tool: call.tool.clone(),
                    attempt,
                    delay_ms: delay.as_millis() as u64,
                    reason: result.error.clone().unwrap_or_default(),
                });
                sleep_unless_cancelled(delay, self.run.cancel);
                continue;
            }
            return Ok(result);
        }
    }
}

/// The `history` tool's source: the execution database, scoped to one workspace root (the value
/// runs record), so a tool can never read another workspace's runs from a shared `--db`.
struct WorkspaceHistory<'a> {
    store: &'a Store,
    workspace: String,
}

impl crate::tools::history::HistorySource for WorkspaceHistory<'_> {
    fn query(
        &self,
        q: &crate::tools::history::HistoryQuery,
    ) -> Result<crate::tools::history::HistoryPage, String> {
        self.store
            .history(&self.workspace, q)
            .map_err(|e| format!("reading the execution history: {e}"))
    }

    fn redact(&self, text: &str) -> String {
        self.store.redactor().redact(text).into_owned()
    }
}

/// Sleeps for `d`, waking early when `cancel` is set.
pub fn sleep_unless_cancelled(d: Duration, cancel: &AtomicBool) {
    let end = Instant::now() + d;
    while !cancel.load(Ordering::SeqCst) {
        let now = Instant::now();
        if now >= end {
            break;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(50)));
    }
}

/// Truncates `s` to at most `max` bytes on a char boundary, saying how much was cut.
/// The first `max` bytes of `s`, cut on a character boundary.
pub fn bounded(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `s` cut to `max` bytes with a note saying how much was shown.
pub fn truncate_with_note(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let shown = bounded(s, max);
    format!(
        "{shown}\n[truncated: {} of {} bytes shown]",
        shown.len(),
        s.len()
    )
}

/// Parses a JSON value into a compact single-line string for summaries.
pub fn one_line(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
