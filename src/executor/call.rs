//! The per-call pipeline every tool call goes through, whoever asked for it (a plan step or an LLM):
//! schema → sandbox/policy check → confirmation → run → record (committed) → progress → result.
//!
//! Keeping this in one place is what makes "LLM output is untrusted input" true: a model's call and
//! a plan's call cannot take different paths.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
use crate::plan::budget::{Budget, Spend};
use crate::policy::Policy;
use crate::store::{ExecutionRecord, Store};
use crate::tools::{Artifact, ToolCall, ToolContext, ToolOutput, ToolRegistry};
use crate::workspace::Workspace;

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
    /// Set once, when a fatal failure or the user's "quit" stops the steps running beside it.
    pub stopped_by: &'r std::sync::OnceLock<StopCause>,
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
    /// The run's budgets: the plan's `budget`, its tokens lowered by `--token-budget`.
    pub budget: &'r Budget,
    /// The W3C trace context the run is in, when traced or called with `TRACEPARENT`: each
    /// command learns its own span from it (docs/observability.md).
    pub trace: Option<&'r crate::events::otel::TraceContext>,
}

/// Why the steps running at once (`--jobs`) were stopped: recorded `cancelled` with this reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopCause {
    /// This step failed fatally, and the run stops on its first failure.
    Failed(String),
    /// The user answered "quit" at a prompt of this step: the run is to stop.
    Quit(String),
}

impl StopCause {
    /// The step at the root of the stop (its dependents are blocked by it).
    pub fn step_id(&self) -> &str {
        match self {
            StopCause::Failed(s) | StopCause::Quit(s) => s,
        }
    }
}

/// What the run has spent on models — tokens, requests, dollars — and since when it runs, shared
/// by the steps running at once: the run's budgets are checked against it.
#[derive(Debug)]
pub struct TokenMeter {
    spent: Mutex<(Usage, Spend)>,
    started: Instant,
}

impl Default for TokenMeter {
    fn default() -> Self {
        TokenMeter::new(Usage::default())
    }
}

impl TokenMeter {
    /// A meter starting at `used` (a resumed run carries on from what it had used).
    pub fn new(used: Usage) -> Self {
        TokenMeter::resumed(used, Spend::default())
    }

    /// A meter starting at `used` tokens and `spend`'s model calls and dollars (a resumed run).
    pub fn resumed(used: Usage, spend: Spend) -> Self {
        TokenMeter {
            spent: Mutex::new((used, spend)),
            started: Instant::now(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Usage, Spend)> {
        match self.spent.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The tokens used so far.
    pub fn get(&self) -> Usage {
        self.lock().0
    }

    /// Adds one call's usage and what it cost.
    pub fn add(&self, usage: Usage) {
        self.lock().0.add(usage);
    }

    /// Counts one request sent to a model.
    pub fn count_call(&self) {
        let mut g = self.lock();
        g.1.model_calls = g.1.model_calls.saturating_add(1);
    }

    /// Adds the dollars one call cost.
    pub fn add_cost(&self, usd: f64) {
        self.lock().1.cost_usd += usd;
    }

    /// Prompt plus completion tokens so far, for the budget.
    pub fn total(&self) -> u64 {
        self.get().total()
    }

    /// Everything spent so far.
    pub fn spend(&self) -> Spend {
        let g = self.lock();
        Spend {
            tokens: g.0.total(),
            ..g.1
        }
    }

    /// Milliseconds since the run started (in this process).
    pub fn elapsed_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
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
    /// Model requests and dollars spent by this step (its tokens are [`StepContext::tokens`]).
    pub spent: Spend,
    /// When the step started, for its `wall_clock` budget.
    pub started: Instant,
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
            spent: Spend::default(),
            started: Instant::now(),
            next_call: 0,
        }
    }

    /// What this step has spent on models: its tokens, requests and dollars.
    pub fn spend(&self) -> Spend {
        Spend {
            tokens: self.tokens.total(),
            ..self.spent
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
            call_id: Some(call.call_id.clone()),
        }
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
        announce(self.run.emitter, call, attempt);
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
        let server = crate::policy::mcp_server_of(&call.tool).map(str::to_string);
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
        // Anything may have changed on disk while the question waited: programs are looked up
        // again for the run.
        crate::policy::host::program::forget();
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
                // Seen at once by the scheduler, which cancels the steps running beside this one.
                let _ = self
                    .run
                    .stopped_by
                    .set(StopCause::Quit(self.step.step_id.clone()));
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
        // The admission resolves the call's program (a command's); its first run, microseconds
        // later, gets the same answer without the dozen lookups again. A prompt in between
        // forgets it (see `confirm`), and the memo ends with the first run.
        let memo = crate::policy::host::program::memo();
        match self.admit(call, opts)? {
            Err(refused) => Ok(refused),
            Ok(admitted) => self.attempts(&admitted, opts, None, Some(memo)),
        }
    }

    /// Runs `calls` at the same time, at most `how.width` at once, and returns their results in the
    /// order of `calls`. Each call goes through the same pipeline as [`Self::call_tool`]: checks
    /// and confirmations first, one call after the other in order (so prompts come one at a time
    /// and in the order asked); then the calls that may run start together, each with its own
    /// `tool_call` event as it starts; then each is recorded — one transaction per execution — and
    /// reported with its `tool_result`, in order. A failed call is that call's result; with
    /// `how.fail_fast` the first failure (by time) stops the others instead: the ones still running
    /// see the cancel flag (a command's process group gets SIGTERM, then SIGKILL after the grace
    /// period) and the ones not started do not start, and all of them are recorded `cancelled`,
    /// naming the call that failed. A refusal at the checks (or "quit") cancels them before any
    /// starts. A refusal of a kind in `how.ends_on` ends the calls there (see [`Together`]).
    pub fn call_together(
        &mut self,
        calls: Vec<ToolCall>,
        opts: &CallOptions,
        how: Together,
    ) -> Result<Vec<ToolResult>, ExecutionError> {
        let parent = opts.parent_execution_id.clone();
        let mut results: Vec<Option<ToolResult>> = Vec::new();
        results.resize_with(calls.len(), || None);
        let mut admitted: Vec<(usize, Admitted<'r>)> = Vec::new();
        // Why the calls left are not run (fail-fast after a refusal, or the user quit).
        let mut stopped: Option<String> = None;
        for (i, call) in calls.into_iter().enumerate() {
            if stopped.is_none() && self.quit {
                stopped = Some("the user quit".to_string());
            }
            if let Some(why) = &stopped {
                self.attempts += 1;
                let msg = format!("cancelled before it started: {why}");
                results[i] =
                    Some(self.refuse(&call, 1, parent.clone(), ErrorKind::Cancelled, msg)?);
                continue;
            }
            let what = self.describe(&call);
            match self.admit(call, opts)? {
                Ok(a) => admitted.push((i, a)),
                Err(refused) => {
                    let ends = refused.error_kind.is_some_and(|k| how.ends_on.contains(&k));
                    if how.fail_fast {
                        stopped = Some(format!("{what} was refused"));
                    }
                    results[i] = Some(refused);
                    if ends {
                        results.truncate(i + 1);
                        break;
                    }
                }
            }
        }
        if stopped.is_none() && self.quit {
            stopped = Some("the user quit".to_string());
        }
        match (&stopped, admitted.len()) {
            (Some(why), _) => {
                for (i, a) in &admitted {
                    self.attempts += 1;
                    let msg = format!("cancelled before it started: {why}");
                    results[*i] =
                        Some(self.refuse(&a.call, 1, parent.clone(), ErrorKind::Cancelled, msg)?);
                }
            }
            (None, 1) => {
                let (i, a) = &admitted[0];
                results[*i] = Some(self.attempts(a, opts, None, None)?);
            }
            (None, _) => {
                let ran = self.run_together(&admitted, how);
                for ((i, a), ran) in admitted.iter().zip(ran) {
                    results[*i] = Some(self.attempts(a, opts, Some(ran), None)?);
                }
            }
        }
        Ok(results.into_iter().flatten().collect())
    }

    /// A call as a person reads it: its tool and what it is about (`run_command "cargo test"`).
    fn describe(&self, call: &ToolCall) -> String {
        match self.run.registry.get(&call.tool) {
            Some(tool) => format!("{} {:?}", call.tool, tool.summary(&call.arguments)),
            None => call.tool.clone(),
        }
    }

    /// Every check a call goes through before it may run — schema, sandbox and policy, then the
    /// confirmation gate — in that order. `Err` is the recorded result of a refused call.
    fn admit(
        &mut self,
        call: ToolCall,
        opts: &CallOptions,
    ) -> Result<Result<Admitted<'r>, ToolResult>, ExecutionError> {
        let parent = opts.parent_execution_id.clone();
        // A value a call puts into a secret-named `env` key (a model's call too) is a secret from
        // here on, before the call is recorded or announced.
        if call.tool == crate::tools::command::NAME {
            self.run
                .store
                .redactor()
                .add_values(crate::plan::variables::secret_env_values(&call.arguments));
        }
        let registry: &'r ToolRegistry = self.run.registry;
        let timeout = opts
            .timeout
            .unwrap_or(Duration::from_secs(self.run.policy.limits.timeout_s));
        let ctx = ToolContext {
            workspace: self.run.workspace,
            policy: self.run.policy,
            timeout,
            sandbox: self.run.sandbox,
            cancel: self.run.cancel,
            heartbeat: &|_| {},
            creates: &self.step.creates,
            history: None,
            trace_parent: None,
        };
        let tool = match screen(registry, &call.tool, &call.arguments, &ctx) {
            Ok(tool) => tool,
            Err((kind, msg)) => {
                self.attempts += 1;
                return self.refuse(&call, 1, parent, kind, msg).map(Err);
            }
        };

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
                return self
                    .refuse(&call, 1, parent, ErrorKind::ConfirmationDenied, msg)
                    .map(Err);
            }
        }
        Ok(Ok(Admitted {
            call,
            tool,
            timeout,
        }))
    }

    /// What a call's run needs of the run: all of it shareable between threads.
    fn surroundings(&self) -> Surroundings<'_> {
        Surroundings {
            emitter: self.run.emitter,
            workspace: self.run.workspace,
            policy: self.run.policy,
            sandbox: self.run.sandbox,
            creates: &self.step.creates,
            trace: self.run.trace,
        }
    }

    /// Runs an admitted call (its first attempt may have run already: `first`), records each
    /// attempt and retries transient failures with backoff up to `opts.retries`.
    fn attempts(
        &mut self,
        admitted: &Admitted,
        opts: &CallOptions,
        mut first: Option<Ran>,
        mut memo: Option<crate::policy::host::program::Memo>,
    ) -> Result<ToolResult, ExecutionError> {
        let call = &admitted.call;
        let parent = opts.parent_execution_id.clone();
        let mut attempt = 0;
        loop {
            attempt += 1;
            self.attempts += 1;
            let ran = match first.take() {
                Some(ran) => ran,
                None => {
                    announce(self.run.emitter, call, attempt);
                    // The history of this run's workspace only, read from the run's own database.
                    let history = WorkspaceHistory {
                        store: &*self.run.store,
                        workspace: self.run.workspace.root().display().to_string(),
                    };
                    let ran = run_admitted(
                        admitted,
                        self.surroundings(),
                        self.run.cancel,
                        Some(&history),
                        attempt,
                    );
                    // A retry resolves its program afresh: the first attempt may have changed it.
                    drop(memo.take());
                    ran
                }
            };
            let mut record = self.base_record(call, attempt, parent.clone());
            record.started_at = ran.started_at;
            let result = self.finish(call, record, ran.output, ran.elapsed)?;
            let delay = self
                .run
                .backoff
                .with_retries(opts.retries)
                .delay(attempt, None);
            if let (true, Some(delay)) = (ran.transient, delay)
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

    /// The first attempts of `admitted` (at least two), at the same time: each on a thread of a
    /// bounded pool, except `history` calls, which read the run's database over this step's
    /// connection and so run on this thread. Returns how each went, in the order of `admitted`.
    fn run_together(&self, admitted: &[(usize, Admitted<'r>)], how: Together) -> Vec<Ran> {
        let near = self.surroundings();
        let run_cancel: &AtomicBool = self.run.cancel;
        let store: &Store = &*self.run.store;
        // Set when the run stops this step (a signal, a failed step beside it), and with
        // `fail_fast` at the first failure: every call running here looks at it.
        let stop = AtomicBool::new(run_cancel.load(Ordering::SeqCst));
        let (here, pooled): (Vec<usize>, Vec<usize>) = (0..admitted.len())
            .partition(|&k| admitted[k].1.call.tool == crate::tools::history::NAME);
        let next = AtomicUsize::new(0);
        let mut out: Vec<Option<Ran>> = Vec::new();
        out.resize_with(admitted.len(), || None);
        let mut first_failure: Option<usize> = None;
        let mut settle = |k: usize, ran: Ran, out: &mut Vec<Option<Ran>>| {
            if how.fail_fast
                && !ran.output.success
                && first_failure.is_none()
                && !stop.load(Ordering::SeqCst)
            {
                first_failure = Some(k);
                stop.store(true, Ordering::SeqCst);
            }
            out[k] = Some(ran);
        };
        std::thread::scope(|scope| {
            let (tx, rx) = std::sync::mpsc::channel::<(usize, Ran)>();
            for _ in 0..how.width.max(1).min(pooled.len()) {
                let tx = tx.clone();
                let (pooled, next, stop) = (&pooled, &next, &stop);
                scope.spawn(move || {
                    while let Some(&k) = pooled.get(next.fetch_add(1, Ordering::SeqCst)) {
                        let a = &admitted[k].1;
                        // Announced as it starts, on the thread that runs it.
                        announce(near.emitter, &a.call, 1);
                        let ran = if how.fail_fast && stop.load(Ordering::SeqCst) {
                            Ran::not_started()
                        } else {
                            run_admitted(a, near, stop, None, 1)
                        };
                        if tx.send((k, ran)).is_err() {
                            break;
                        }
                    }
                });
            }
            drop(tx);
            let history = WorkspaceHistory {
                store,
                workspace: near.workspace.root().display().to_string(),
            };
            for &k in &here {
                announce(near.emitter, &admitted[k].1.call, 1);
                let ran = run_admitted(&admitted[k].1, near, &stop, Some(&history), 1);
                settle(k, ran, &mut out);
            }
            loop {
                match rx.recv_timeout(Duration::from_millis(25)) {
                    Ok((k, ran)) => settle(k, ran, &mut out),
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                }
                if run_cancel.load(Ordering::SeqCst) {
                    stop.store(true, Ordering::SeqCst);
                }
            }
        });
        let failed = first_failure.map(|f| self.describe(&admitted[f].1.call));
        out.into_iter()
            .map(|ran| {
                let mut ran = ran.unwrap_or_else(Ran::not_started);
                // Stopped by the first failure beside it (not by the run): cancelled, naming it.
                if let Some(failed) = &failed
                    && ran.output.failure_kind == Some(ErrorKind::Interrupted)
                {
                    let msg = format!(
                        "cancelled: {failed} failed while this call ran, and calls run together \
                         stop at the first failure"
                    );
                    ran.output.failure_kind = Some(ErrorKind::Cancelled);
                    ran.output.content = msg.clone();
                    ran.output.error = Some(msg);
                    ran.transient = false;
                }
                ran
            })
            .collect()
    }
}

/// How [`StepContext::call_together`] runs its calls.
#[derive(Debug, Clone, Copy)]
pub struct Together<'a> {
    /// Most calls running at once (threads of the pool).
    pub width: usize,
    /// Whether the first failure cancels the others (`verify` commands) rather than being only
    /// that call's result (an agent's reads).
    pub fail_fast: bool,
    /// Refusals that end the caller's work (for an agent: a denial, or a sandbox violation under
    /// `--strict`): the calls after such a refusal are neither checked nor run, as if they had
    /// come one after the other, and the results end with it.
    pub ends_on: &'a [ErrorKind],
}

/// A call that passed every check (and the confirmation gate) and may run.
struct Admitted<'t> {
    call: ToolCall,
    tool: &'t dyn crate::tools::Tool,
    timeout: Duration,
}

/// One attempt of a call: when it started, how long it took, and what it produced.
struct Ran {
    started_at: i64,
    elapsed: Duration,
    output: ToolOutput,
    transient: bool,
}

impl Ran {
    /// A call that never started because the calls beside it were stopped.
    fn not_started() -> Ran {
        Ran {
            started_at: now_ms(),
            elapsed: Duration::ZERO,
            output: ToolOutput::failed(ErrorKind::Interrupted, "not started"),
            transient: false,
        }
    }
}

/// What a call needs of its run while it runs; `Copy` and shareable between the threads of
/// [`StepContext::call_together`].
#[derive(Clone, Copy)]
struct Surroundings<'a> {
    emitter: &'a Emitter,
    workspace: &'a Workspace,
    policy: &'a Policy,
    sandbox: &'a crate::sandbox::OsSandbox,
    creates: &'a [String],
    trace: Option<&'a crate::events::otel::TraceContext>,
}

/// Emits a call's `tool_call` event and progress hook, before its `tool_result`: for a call that
/// runs and for one refused before running alike.
fn announce(emitter: &Emitter, call: &ToolCall, attempt: u32) {
    emitter.emit(EventKind::ToolCall {
        step_id: call.step_id.clone(),
        call_id: call.call_id.clone(),
        tool: call.tool.clone(),
        arguments: call.arguments.clone(),
        attempt,
        turn: call.turn,
        server: crate::policy::mcp_server_of(&call.tool).map(str::to_string),
    });
    emitter.progress().on_tool_call(call);
}

/// The checks of a call's admission that need no run, in the order it makes them: the tool is
/// registered, its schema accepts the arguments, and the tool's own `check` (sandbox, policy)
/// passes. `Err` is the error kind and message the refused call is recorded with. Public (hidden)
/// so the LLM fuzz targets check admission on this path rather than on a copy of it.
#[doc(hidden)]
pub fn screen<'r>(
    registry: &'r ToolRegistry,
    name: &str,
    arguments: &Value,
    ctx: &ToolContext,
) -> Result<&'r dyn crate::tools::Tool, (ErrorKind, String)> {
    let Some((tool, schema)) = registry.lookup(name) else {
        let known: Vec<&str> = registry.names().collect();
        let msg = format!(
            "unknown tool {:?}{} (available: {})",
            name,
            crate::suggest::did_you_mean(name, known.iter().copied()),
            known.join(", ")
        );
        return Err((ErrorKind::InvalidArguments, msg));
    };
    let schema_errors = crate::tools::schema::validate(schema, arguments, "arguments");
    if !schema_errors.is_empty() {
        let msg = format!("invalid arguments for {name}: {}", schema_errors.join("; "));
        return Err((ErrorKind::InvalidArguments, msg));
    }
    tool.check(arguments, ctx)
        .map_err(|e| (e.kind(), e.to_string()))?;
    Ok(&**tool)
}

/// One attempt of an admitted call, stopped by `cancel`; heartbeats name the call.
fn run_admitted(
    admitted: &Admitted,
    near: Surroundings,
    cancel: &AtomicBool,
    history: Option<&dyn crate::tools::history::HistorySource>,
    attempt: u32,
) -> Ran {
    let call = &admitted.call;
    let heartbeat = |elapsed: Duration| {
        near.emitter.emit(EventKind::ToolHeartbeat {
            step_id: call.step_id.clone(),
            call_id: call.call_id.clone(),
            tool: call.tool.clone(),
            elapsed_ms: elapsed.as_millis() as u64,
        })
    };
    let ctx = ToolContext {
        workspace: near.workspace,
        policy: near.policy,
        timeout: admitted.timeout,
        sandbox: near.sandbox,
        cancel,
        heartbeat: &heartbeat,
        creates: near.creates,
        history,
        trace_parent: near.trace.map(|t| {
            let at = crate::events::otel::CallRef {
                step_id: &call.step_id,
                turn: call.turn,
                call_id: &call.call_id,
            };
            t.for_call(near.emitter.run_id(), at, attempt)
        }),
    };
    let started_at = now_ms();
    let started = Instant::now();
    let (output, transient) = match admitted.tool.run(&call.arguments, &ctx) {
        Ok(out) => {
            let transient = out.transient;
            (out, transient)
        }
        Err(e) => {
            let transient = e.is_transient();
            (ToolOutput::failed(e.kind(), e.to_string()), transient)
        }
    };
    Ran {
        started_at,
        elapsed: started.elapsed(),
        output,
        transient,
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

/// `s` cut to `max` bytes with a note saying how much was shown.
pub fn truncate_with_note(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let shown = crate::util::cut_at_char_boundary(s, max);
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
