//! The agent driver: a local LLM chooses a step's tool calls, turn by turn (SPEC §7).
//!
//! Every call the model asks for goes through the same pipeline as a plan step
//! ([`StepContext::call_tool`]): schema, sandbox, policy, confirmation, recording. What the model gets
//! wrong — a tool outside the step's list, arguments that are not JSON, a path outside the workspace —
//! is recorded and sent back to it as an error it can correct; it is never executed. Each model turn
//! (every attempt, retries included) is recorded as an execution of tool `llm` with `prompt` and
//! `response` artifacts, and the tool calls it asked for are linked to it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::call::{CallOptions, StepContext, Together, sleep_unless_cancelled, truncate_with_note};
use super::stuck::{self, Repeat, RepeatGuard};
use super::verify::{call_options, verify};
use super::{ExecutionError, StepOutcome};
use crate::error::{ErrorKind, now_ms};
use crate::events::EventKind;
use crate::llm::react::{self, ReactStep, ToolProtocol};
use crate::llm::{ChatRequest, ChatResponse, LlmClient, Message, ToolSpec};
use crate::plan::Plan;
use crate::plan::budget::Spend;
use crate::plan::variables::Variables;
use crate::store::ExecutionRecord;
use crate::tools::agent::AgentArgs;
use crate::tools::{Artifact, ToolCall};
use crate::workspace::listing;

pub use super::settings::{
    AgentSettings, DEFAULT_MAX_CALLS_PER_ANSWER, DEFAULT_MAX_REQUEST_BYTES, PARALLEL_READ_CALLS,
};

/// The conversation of one agent session, with a sliding window over turns. A turn's messages are
/// kept or dropped together so a tool result is never separated from the call it answers.
struct Conversation {
    system: String,
    first: String,
    turns: VecDeque<Vec<Message>>,
    dropped: usize,
    window: usize,
}

impl Conversation {
    fn push(&mut self, turn: Vec<Message>) {
        self.turns.push_back(turn);
        while self.turns.len() > self.window.max(1) {
            self.turns.pop_front();
            self.dropped += 1;
        }
    }

    /// Drops the oldest turns until the messages fit in `limit` bytes (as JSON); `false` when even
    /// the newest turn alone does not fit.
    fn fit(&mut self, limit: usize) -> bool {
        loop {
            let size = serde_json::to_vec(&self.messages()).map_or(usize::MAX, |v| v.len());
            if size <= limit {
                return true;
            }
            if self.turns.len() <= 1 {
                return false;
            }
            self.turns.pop_front();
            self.dropped += 1;
        }
    }

    fn messages(&self) -> Vec<Message> {
        let mut first = self.first.clone();
        if self.dropped > 0 {
            first.push_str(&format!(
                "\n\n[acode-run: {} earlier turn(s) omitted to fit the context window; re-read \
                 files if you need their content again]",
                self.dropped
            ));
        }
        let mut out = vec![Message::system(self.system.clone()), Message::user(first)];
        out.extend(self.turns.iter().flatten().cloned());
        out
    }
}

/// A few facts about the workspace for the system prompt: its top-level entries, generated,
/// ignored and this invocation's own files left out (`workspace::listing`, docs/replay.md).
fn workspace_facts(ctx: &StepContext) -> String {
    let names = listing::entries(ctx.run.workspace, &ctx.run.agent.own_files);
    listing::render(&names)
}

fn system_prompt(
    ctx: &StepContext,
    allowed: &[String],
    specs: &[ToolSpec],
    protocol: ToolProtocol,
) -> String {
    let mut s = match &ctx.run.agent.role {
        Some(role) => format!(
            "{role}\nYou work inside a workspace; every path is relative to its root. {}{}.\nTools \
             you may call: {}.",
            listing::PREFIX,
            workspace_facts(ctx),
            allowed.join(", ")
        ),
        None => format!(
            "You are the agent for one step of an approved plan run by acode-run.\n\
             You work inside a workspace; every path is relative to its root. {}{}.\n\
             Tools you may call: {}. Every call is checked against a sandbox and a policy; when a call \
             is refused or fails you get the error back and can correct it.\n\
             Do only what the task asks. When the task is done, reply with a short summary of what you \
             did and make NO tool call.",
            listing::PREFIX,
            workspace_facts(ctx),
            allowed.join(", ")
        ),
    };
    if protocol == ToolProtocol::React {
        s.push_str("\n\n");
        s.push_str(&react::system_prompt(specs));
    }
    s
}

/// Runs an agent step: optional step-level confirmation, then sessions until the model finishes and
/// `verify` (if any) passes, at most `verify.max_cycles` times.
pub fn run(
    ctx: &mut StepContext,
    plan: &Plan,
    args: &Value,
    vars: &Variables,
) -> Result<StepOutcome, ExecutionError> {
    // The step's arguments, parsed by the same struct their schema comes from.
    let parsed = match AgentArgs::parse(args) {
        Ok(a) => a,
        Err(e) => return Ok(StepOutcome::failed(e.kind(), e.to_string())),
    };
    let max_turns = parsed.max_turns();
    let AgentArgs {
        instruction,
        tools: allowed,
        model,
        ..
    } = parsed;
    let model = model.unwrap_or_else(|| ctx.run.agent.model.clone());
    let Some(client) = ctx.run.llm else {
        return Ok(StepOutcome::failed(
            ErrorKind::LlmError,
            "agent step needs an LLM, and none is configured (use --llm-url and --model)",
        ));
    };
    // A client may answer each step on its own (a replay answers from the step's recorded turns).
    let own = client.for_step(&ctx.step.step_id);
    let client = own.as_ref().unwrap_or(client);

    if ctx.step.requires_confirmation {
        let call = ToolCall {
            call_id: ctx.new_call_id(),
            step_id: ctx.step.step_id.clone(),
            tool: crate::tools::agent::NAME.to_string(),
            arguments: args.clone(),
            turn: None,
        };
        if !ctx.confirm(&call, "the step requires confirmation".into(), None) {
            let msg = format!("confirmation denied for agent step {}", ctx.step.step_id);
            ctx.attempts += 1;
            ctx.refuse(&call, 1, None, ErrorKind::ConfirmationDenied, msg.clone())?;
            return Ok(StepOutcome::failed(ErrorKind::ConfirmationDenied, msg));
        }
    }

    // A skill (docs/agents.md): its expanded body is the instruction; it may narrow the tools and
    // supply the model and turn limit the step leaves unset.
    let (instruction, allowed, max_turns, model) =
        match super::skill_step::prepare(ctx, plan, args)? {
            Err(outcome) => return Ok(outcome),
            Ok(None) => (instruction.unwrap_or_default(), allowed, max_turns, model),
            Ok(Some(p)) => (
                p.instruction,
                p.allowed,
                match (args.get("max_turns"), p.max_turns) {
                    (None, Some(n)) => n,
                    _ => max_turns,
                },
                match (args.get("model"), p.model) {
                    (None, Some(m)) => m,
                    _ => model,
                },
            ),
        };

    // One deadline for the whole step, LLM waits and retries included (exit 34 when it passes).
    let deadline = step_deadline(ctx, plan);
    let cycles = ctx.step.verify.as_ref().map_or(1, |v| v.max_cycles.max(1));
    let mut feedback: Option<String> = None;
    let mut turn = 0u32;
    for cycle in 1..=cycles {
        let mut first = instruction.clone();
        if let Some(f) = &feedback {
            first.push_str(&format!(
                "\n\nYour previous attempt did not pass verification. The verifier said:\n{}\n\
                 Fix the problem.",
                truncate_with_note(
                    &ctx.run.store.redactor().redact(f),
                    ctx.run.agent.tool_result_chars
                )
            ));
        }
        // The instruction may hold substituted secrets, the verifier's output may print them.
        let first = ctx.run.store.redactor().redact_string(first);
        let session = Session {
            client,
            model: &model,
            allowed: &allowed,
            max_turns,
            plan,
            deadline,
        };
        let outcome = session.run(ctx, first, &mut turn)?;
        if outcome.failure.is_some() {
            return Ok(outcome);
        }
        match verify(ctx, plan, vars)? {
            None => return Ok(outcome),
            Some(out) if cycle == cycles => {
                return Ok(StepOutcome::failed(
                    ErrorKind::VerificationFailed,
                    format!("verification still failing after {cycles} cycle(s): {out}"),
                ));
            }
            Some(out) => feedback = Some(out),
        }
    }
    Ok(StepOutcome::failed(
        ErrorKind::VerificationFailed,
        "verification did not run",
    ))
}

/// The SHA-256 of what an agent step asks, as the plan writes it: its `instruction`, `skill` and
/// `inputs` arguments (recorded on the step, so a replay can tell that the plan was edited since).
pub fn instruction_sha256(arguments: &crate::plan::Arguments) -> String {
    let map = arguments.to_map();
    let asked = json!({
        "instruction": map.get("instruction"),
        "skill": map.get("skill"),
        "inputs": map.get("inputs"),
    });
    crate::util::sha256_hex(asked.to_string().as_bytes())
}

/// Adds to the run's redactor the values an answer's `run_command` calls pass in secret-named
/// `env` keys (native tool calls, or a ReAct action in the text).
fn learn_call_secrets(ctx: &StepContext, response: &ChatResponse) {
    let redactor = ctx.run.store.redactor();
    for call in &response.tool_calls {
        if call.name == crate::tools::command::NAME {
            redactor.add_values(crate::plan::variables::secret_env_values(&call.arguments));
        }
    }
    if let Some(content) = &response.content
        && let Ok(ReactStep::Action { tool, input, .. }) = react::parse(content)
        && tool == crate::tools::command::NAME
    {
        redactor.add_values(crate::plan::variables::secret_env_values(&input));
    }
}

struct Session<'a> {
    client: &'a Arc<dyn LlmClient>,
    model: &'a str,
    allowed: &'a [String],
    max_turns: u32,
    plan: &'a Plan,
    deadline: Option<Deadline>,
}

/// When an agent step must be over: its `timeout_s` (or the plan's default) from the moment its
/// model work starts.
#[derive(Debug, Clone, Copy)]
struct Deadline {
    at: Instant,
    seconds: u64,
}

impl Deadline {
    fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    fn outcome(&self, waiting_for: &str) -> StepOutcome {
        StepOutcome::failed(
            ErrorKind::Timeout,
            format!(
                "agent step exceeded its time limit of {} s (timeout_s) {waiting_for}",
                self.seconds
            ),
        )
    }
}

fn step_deadline(ctx: &StepContext, plan: &Plan) -> Option<Deadline> {
    let seconds = ctx.step.timeout_s.or(plan.defaults.timeout_s)?;
    Some(Deadline {
        at: Instant::now() + Duration::from_secs(seconds),
        seconds,
    })
}

/// Results of a model's call that end the step, whatever the call.
const FATAL: [ErrorKind; 3] = [
    ErrorKind::ConfirmationDenied,
    ErrorKind::Interrupted,
    ErrorKind::McpChanged,
];
/// The same under `--strict`, where a refused sandbox violation ends the step too.
const FATAL_STRICT: [ErrorKind; 4] = [
    ErrorKind::ConfirmationDenied,
    ErrorKind::Interrupted,
    ErrorKind::McpChanged,
    ErrorKind::SandboxViolation,
];

/// Why the agent loop refuses a call the model asked for whose arguments parsed (one that did
/// not gets `LlmToolCall::parse_error_feedback`) before its admission
/// ([`crate::executor::call::screen`]): the step does not offer the tool. The text is what the
/// model is told. Public (hidden) so the LLM fuzz targets take the loop's own path.
#[doc(hidden)]
pub fn not_offered(allowed: &[String], name: &str) -> Option<String> {
    if allowed.iter().any(|a| a == name) {
        return None;
    }
    Some(format!(
        "error: tool '{name}' is not available in this step; you may call only: {}",
        allowed.join(", ")
    ))
}

/// What one answer of the model came to: the messages the next turn adds, or the step's end.
enum Flow {
    Next(Vec<Message>),
    Done(StepOutcome),
}

/// What one model-requested call came to: text for the model, or a reason to end the step.
enum CallFate {
    Reply(String),
    Fatal(StepOutcome),
}

impl Session<'_> {
    fn run(
        &self,
        ctx: &mut StepContext,
        first: String,
        turn: &mut u32,
    ) -> Result<StepOutcome, ExecutionError> {
        let settings = ctx.run.agent.clone();
        let names: Vec<&str> = self.allowed.iter().map(String::as_str).collect();
        let specs = ToolSpec::from_registry(ctx.run.registry, &names);
        let mut conv = Conversation {
            system: system_prompt(ctx, self.allowed, &specs, settings.protocol),
            first,
            turns: VecDeque::new(),
            dropped: 0,
            window: settings.window_turns,
        };
        let mut repeats = RepeatGuard::default();
        // What the next request is expected to spend, for the budgets: unknown before the first.
        let mut next = Spend {
            model_calls: 1,
            ..Spend::default()
        };
        for _ in 0..self.max_turns {
            if let Some(d) = self.deadline
                && d.remaining().is_zero()
            {
                return Ok(d.outcome("before its next model turn"));
            }
            *turn += 1;
            if !conv.fit(settings.max_request_bytes) {
                return Ok(StepOutcome::failed(
                    ErrorKind::ToolFailed,
                    format!(
                        "the next request to the model would exceed {} bytes even with only the \
                         latest turn kept",
                        settings.max_request_bytes
                    ),
                ));
            }
            let mut request = ChatRequest::new(self.model, conv.messages());
            if settings.protocol == ToolProtocol::Native {
                request = request.with_tools(specs.clone());
            }
            // Budgets are checked before every request (and every retry of one) in `chat`: steps
            // running at once (`--jobs`) share the run's, so a request another step's spending
            // made too expensive is not sent.
            let (response, turn_id) = match self.chat(ctx, &request, *turn, &settings, &next)? {
                Ok(r) => r,
                Err(outcome) => return Ok(outcome),
            };
            // The next request holds this one's prompt and answer and more: at least as much.
            next = Spend {
                tokens: response.usage.total(),
                model_calls: 1,
                cost_usd: price_of(ctx, self.model, response.usage),
            };
            let flow = match settings.protocol {
                ToolProtocol::Native => {
                    self.native_answer(ctx, response, *turn, &turn_id, &mut repeats)?
                }
                ToolProtocol::React => {
                    self.react_answer(ctx, response, *turn, &turn_id, &mut repeats)?
                }
            };
            match flow {
                Flow::Next(messages) => conv.push(messages),
                Flow::Done(outcome) => return Ok(outcome),
            }
        }
        Ok(StepOutcome::failed(
            ErrorKind::TurnLimit,
            format!(
                "agent did not finish within {} turn(s); the transcript is recorded (acode-run show)",
                self.max_turns
            ),
        ))
    }

    /// A native-protocol answer: no call ends the step with the answer; else its calls are run
    /// (at most `max_calls_per_answer`; consecutive reads together, the rest one at a time, in
    /// order) and their replies are what the next turn adds.
    fn native_answer(
        &self,
        ctx: &mut StepContext,
        mut response: ChatResponse,
        turn: u32,
        turn_id: &str,
        repeats: &mut RepeatGuard,
    ) -> Result<Flow, ExecutionError> {
        if response.tool_calls.is_empty() {
            return Ok(Flow::Done(done(response.content.unwrap_or_default())));
        }
        // One answer yields at most max_calls_per_answer calls; the rest are not run, not echoed
        // back (so the next request stays bounded), and the model is told.
        let asked = response.tool_calls.len();
        let limit = ctx.run.agent.max_calls_per_answer.max(1);
        response.tool_calls.truncate(limit);
        let mut messages = vec![Message::assistant(&response)];
        // What this answer asked and got, for stuck detection (whole answers compared).
        let mut answer: Vec<(String, Value, String)> = Vec::new();
        let calls = &response.tool_calls;
        let mut next = 0;
        while next < calls.len() {
            // Consecutive reads run at the same time; the rest one at a time, in order.
            let reads = calls[next..]
                .iter()
                .take_while(|c| self.reads_only(ctx, c))
                .count();
            let batch = &calls[next..next + reads.max(1)];
            next += batch.len();
            let fates = if reads >= 2 {
                self.execute_together(ctx, batch, turn, turn_id)?
            } else {
                vec![self.one_call(ctx, &batch[0], turn, turn_id)?]
            };
            for (call, fate) in batch.iter().zip(fates) {
                let reply = match fate {
                    CallFate::Reply(text) => text,
                    CallFate::Fatal(outcome) => return Ok(Flow::Done(outcome)),
                };
                answer.push((call.name.clone(), call.arguments.clone(), reply.clone()));
                messages.push(Message::tool(call.id.clone(), reply));
            }
        }
        match check_answer(repeats, &answer) {
            CallFate::Fatal(outcome) => return Ok(Flow::Done(outcome)),
            CallFate::Reply(note) if !note.is_empty() => {
                if let Some(Message::Tool { content, .. }) = messages.last_mut() {
                    content.push_str(&note);
                }
            }
            CallFate::Reply(_) => {}
        }
        if asked > limit
            && let Some(Message::Tool { content, .. }) = messages.last_mut()
        {
            content.push_str(&format!(
                "\n\nerror: your answer asked for {asked} tool calls; only the first {limit} \
                 were run and the other {} were refused. Ask for at most {limit} calls per answer.",
                asked - limit
            ));
        }
        Ok(Flow::Next(messages))
    }

    /// One call of a native answer: refused with the parse error when its arguments did not
    /// parse, else run.
    fn one_call(
        &self,
        ctx: &mut StepContext,
        call: &crate::llm::LlmToolCall,
        turn: u32,
        turn_id: &str,
    ) -> Result<CallFate, ExecutionError> {
        match call.parse_error_feedback() {
            Some(feedback) => {
                let tc = self.tool_call(ctx, &call.id, &call.name, &call.arguments, turn);
                ctx.refuse(
                    &tc,
                    1,
                    Some(turn_id.to_string()),
                    ErrorKind::InvalidArguments,
                    feedback.clone(),
                )?;
                Ok(CallFate::Reply(feedback))
            }
            None => self.execute(ctx, &call.id, &call.name, &call.arguments, turn, turn_id),
        }
    }

    /// A ReAct answer: a final answer ends the step; an action is run and its observation is what
    /// the next turn adds; an answer that cannot be used is said so.
    fn react_answer(
        &self,
        ctx: &mut StepContext,
        response: ChatResponse,
        turn: u32,
        turn_id: &str,
        repeats: &mut RepeatGuard,
    ) -> Result<Flow, ExecutionError> {
        let content = response.content.unwrap_or_default();
        let said = Message::Assistant {
            content: Some(content.clone()),
            tool_calls: Vec::new(),
        };
        match react::parse(&content) {
            Err(e) => {
                repeats.reset();
                Ok(Flow::Next(vec![
                    said,
                    Message::user(format!(
                        "error: your answer could not be used: {e}. Answer with exactly one JSON \
                         object as described."
                    )),
                ]))
            }
            Ok(ReactStep::Final { answer, .. }) => Ok(Flow::Done(done(answer))),
            Ok(ReactStep::Action { tool, input, .. }) => {
                let id = format!("react-{turn}");
                let reply = match self.execute(ctx, &id, &tool, &input, turn, turn_id)? {
                    CallFate::Reply(text) => match check_repeat(repeats, &tool, &input, text) {
                        CallFate::Reply(text) => text,
                        CallFate::Fatal(outcome) => return Ok(Flow::Done(outcome)),
                    },
                    CallFate::Fatal(outcome) => return Ok(Flow::Done(outcome)),
                };
                Ok(Flow::Next(vec![
                    said,
                    Message::user(react::observation(&reply)),
                ]))
            }
        }
    }

    fn tool_call(
        &self,
        ctx: &StepContext,
        id: &str,
        name: &str,
        args: &Value,
        turn: u32,
    ) -> ToolCall {
        ToolCall {
            call_id: id.to_string(),
            step_id: ctx.step.step_id.clone(),
            tool: name.to_string(),
            arguments: args.clone(),
            turn: Some(turn),
        }
    }

    /// Runs one call the model asked for, or refuses it; returns what the model is told.
    fn execute(
        &self,
        ctx: &mut StepContext,
        id: &str,
        name: &str,
        args: &Value,
        turn: u32,
        turn_id: &str,
    ) -> Result<CallFate, ExecutionError> {
        let call = self.tool_call(ctx, id, name, args, turn);
        if let Some(msg) = not_offered(self.allowed, name) {
            ctx.attempts += 1;
            ctx.refuse(
                &call,
                1,
                Some(turn_id.to_string()),
                ErrorKind::InvalidArguments,
                msg.clone(),
            )?;
            return Ok(CallFate::Reply(msg));
        }
        let opts = match self.options(ctx, turn_id) {
            Ok(opts) => opts,
            Err(fate) => return Ok(fate),
        };
        let result = ctx.call_tool(call, &opts)?;
        Ok(self.fate(ctx, name, result))
    }

    /// Whether the model's call may run at the same time as the calls beside it in the answer
    /// (docs/parallel.md): its arguments parsed, the step allows the tool, the tool only reads
    /// ([`crate::tools::READ_ONLY_TOOLS`]), and the policy does not make it ask for confirmation.
    fn reads_only(&self, ctx: &StepContext, call: &crate::llm::LlmToolCall) -> bool {
        call.parse_error_feedback().is_none()
            && crate::tools::READ_ONLY_TOOLS.contains(&call.name.as_str())
            && self.allowed.contains(&call.name)
            && !ctx.run.policy.tool_needs_confirmation(&call.name)
    }

    /// Runs consecutive read-only calls of one answer at the same time (at most
    /// [`PARALLEL_READ_CALLS`] at once), each through the whole pipeline; returns what the model
    /// is told of each, in the answer's order.
    fn execute_together(
        &self,
        ctx: &mut StepContext,
        calls: &[crate::llm::LlmToolCall],
        turn: u32,
        turn_id: &str,
    ) -> Result<Vec<CallFate>, ExecutionError> {
        let opts = match self.options(ctx, turn_id) {
            Ok(opts) => opts,
            Err(fate) => return Ok(vec![fate]),
        };
        let tool_calls = calls
            .iter()
            .map(|c| self.tool_call(ctx, &c.id, &c.name, &c.arguments, turn))
            .collect();
        // The refusals that end the step (see `fate`) end the batch too: the calls after one are
        // not run, as if the calls had come one after the other.
        let ends_on: &[ErrorKind] = if ctx.run.agent.strict {
            &FATAL_STRICT
        } else {
            &FATAL[..]
        };
        let how = Together {
            width: PARALLEL_READ_CALLS,
            fail_fast: false,
            ends_on,
        };
        let results = ctx.call_together(tool_calls, &opts, how)?;
        Ok(calls
            .iter()
            .zip(results)
            .map(|(c, r)| self.fate(ctx, &c.name, r))
            .collect())
    }

    /// The options of the model's calls made for turn `turn_id`: each gets at most what is left
    /// of the step's time; `Err` ends the step when none is left.
    fn options(&self, ctx: &StepContext, turn_id: &str) -> Result<CallOptions, CallFate> {
        let mut opts: CallOptions = call_options(ctx, self.plan);
        opts.parent_execution_id = Some(turn_id.to_string());
        if let Some(d) = self.deadline {
            let left = d.remaining();
            if left.is_zero() {
                return Err(CallFate::Fatal(d.outcome("before a tool call")));
            }
            opts.timeout = Some(opts.timeout.map_or(left, |t| t.min(left)));
        }
        Ok(opts)
    }

    /// What the model is told of a call's result, or why the step ends because of it.
    fn fate(&self, ctx: &StepContext, name: &str, result: super::ToolResult) -> CallFate {
        match result.error_kind {
            Some(kind) if FATAL.contains(&kind) => {
                return CallFate::Fatal(StepOutcome::failed(
                    kind,
                    result.error.unwrap_or_else(|| kind.to_string()),
                ));
            }
            Some(ErrorKind::SandboxViolation) if ctx.run.agent.strict => {
                return CallFate::Fatal(StepOutcome::failed(
                    ErrorKind::SandboxViolation,
                    format!(
                        "the model's {name} call was refused as a sandbox violation, and --strict \
                         fails the step on any: {}",
                        result.error.unwrap_or_default()
                    ),
                ));
            }
            _ if ctx.run.cancel.load(Ordering::SeqCst) => {
                return CallFate::Fatal(StepOutcome::failed(ErrorKind::Interrupted, "interrupted"));
            }
            _ => {}
        }
        let text = if result.success {
            result.content
        } else {
            let kind = result.error_kind.unwrap_or(ErrorKind::ToolFailed);
            let error = result.error.unwrap_or_default();
            if result.content.is_empty() || result.content == error {
                format!("error ({kind}): {error}")
            } else {
                format!("error ({kind}): {error}\n{}", result.content)
            }
        };
        // Secrets the runner knows never go to the model, and the recorded prompt is the request
        // as sent. Redacted before truncating, so a cut cannot leave a fragment of a secret.
        let text = ctx.run.store.redactor().redact_string(text);
        CallFate::Reply(truncate_with_note(&text, ctx.run.agent.tool_result_chars))
    }

    /// One model turn with retries; every attempt is recorded. `Ok(Err(outcome))` ends the step.
    fn chat(
        &self,
        ctx: &mut StepContext,
        request: &ChatRequest,
        turn: u32,
        settings: &AgentSettings,
        next: &Spend,
    ) -> Result<Result<(ChatResponse, String), StepOutcome>, ExecutionError> {
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            if ctx.run.cancel.load(Ordering::SeqCst) {
                return Ok(Err(StepOutcome::failed(
                    ErrorKind::Interrupted,
                    "interrupted",
                )));
            }
            if let Some(outcome) = super::budget::before_model_call(ctx, &request.model, next, turn)
            {
                return Ok(Err(outcome));
            }
            ctx.spent.model_calls = ctx.spent.model_calls.saturating_add(1);
            ctx.run.tokens.count_call();
            ctx.attempts += 1;
            let started_at = now_ms();
            let t0 = Instant::now();
            let outcome =
                chat_unless_cancelled(self.client, request, ctx.run.cancel, self.deadline);
            let duration_ms = t0.elapsed().as_millis() as i64;
            let mut record = self.llm_record(ctx, request, started_at, duration_ms, attempt, turn);
            let outcome = match outcome {
                Waited::Answer(outcome) => outcome,
                Waited::Cancelled => {
                    // Interrupted while the model was thinking: the prompt is still part of the
                    // record.
                    let message = "interrupted while waiting for the model";
                    record.error_code = Some(ErrorKind::Interrupted.as_str().to_string());
                    record.error_message = Some(message.to_string());
                    let artifacts = [Artifact::new("prompt", self.client.request_body(request))];
                    ctx.record(record, &artifacts)?;
                    return Ok(Err(StepOutcome::failed(ErrorKind::Interrupted, message)));
                }
                Waited::Deadline(d) => {
                    let failed = d.outcome("while waiting for the model");
                    record.error_code = Some(ErrorKind::Timeout.as_str().to_string());
                    record.error_message = failed.failure.as_ref().map(|(_, m)| m.clone());
                    let artifacts = [Artifact::new("prompt", self.client.request_body(request))];
                    ctx.record(record, &artifacts)?;
                    return Ok(Err(failed));
                }
            };
            match outcome {
                Ok(response) => {
                    let id = answered(ctx, request, record, &response, turn, duration_ms)?;
                    return Ok(Ok((response, id)));
                }
                Err(e) => {
                    if let Some(outcome) =
                        self.after_error(ctx, request, record, &e, attempt, settings)?
                    {
                        return Ok(Err(outcome));
                    }
                }
            }
        }
    }

    /// The record of one model call, as failed until it is known to have succeeded.
    fn llm_record(
        &self,
        ctx: &StepContext,
        request: &ChatRequest,
        started_at: i64,
        duration_ms: i64,
        attempt: u32,
        turn: u32,
    ) -> ExecutionRecord {
        let tools: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
        ExecutionRecord {
            execution_id: String::new(),
            run_id: ctx.run.emitter.run_id().to_string(),
            step_id: ctx.step.step_id.clone(),
            tool_name: "llm".to_string(),
            arguments_json: json!({
                "client": self.client.describe(),
                "model": request.model,
                "messages": request.messages.len(),
                "tools": tools,
            })
            .to_string(),
            started_at,
            duration_ms,
            success: false,
            exit_code: None,
            error_code: None,
            error_message: None,
            attempt,
            turn: Some(turn),
            parent_execution_id: None,
            prompt_tokens: None,
            completion_tokens: None,
            program_path: None,
            program_sha256: None,
            call_id: None,
        }
    }

    /// Records a model call that failed with `e`: `None` when it is retried (after its delay,
    /// said by `retry_scheduled`), else how the step ends.
    fn after_error(
        &self,
        ctx: &mut StepContext,
        request: &ChatRequest,
        mut record: ExecutionRecord,
        e: &crate::llm::LlmError,
        attempt: u32,
        settings: &AgentSettings,
    ) -> Result<Option<StepOutcome>, ExecutionError> {
        let kind = match e {
            crate::llm::LlmError::ReplayDiverged { .. } => ErrorKind::ReplayDiverged,
            _ => ErrorKind::LlmError,
        };
        record.error_code = Some(kind.as_str().to_string());
        record.error_message = Some(e.to_string());
        let mut artifacts = vec![Artifact::new("prompt", self.client.request_body(request))];
        if let Some(body) = e.response_body() {
            artifacts.push(Artifact::new("response", body.to_string()));
        }
        ctx.record(record, &artifacts)?;
        let delay = if e.is_retryable() {
            settings.backoff.delay(attempt, e.retry_after())
        } else {
            None
        };
        // A retry that cannot start before the deadline is not scheduled.
        if let (Some(d), Some(delay)) = (self.deadline, delay)
            && d.remaining() <= delay
        {
            return Ok(Some(d.outcome(&format!("retrying the model after: {e}"))));
        }
        Ok(match delay {
            Some(delay) if !ctx.run.cancel.load(Ordering::SeqCst) => {
                ctx.run.emitter.emit(EventKind::RetryScheduled {
                    step_id: ctx.step.step_id.clone(),
                    tool: "llm".to_string(),
                    attempt,
                    delay_ms: delay.as_millis() as u64,
                    reason: e.to_string(),
                });
                sleep_unless_cancelled(delay, ctx.run.cancel);
                None
            }
            _ if kind == ErrorKind::ReplayDiverged => {
                Some(StepOutcome::failed(kind, e.to_string()))
            }
            _ => {
                let retried = if attempt > 1 {
                    format!(" after {attempt} attempts")
                } else {
                    String::new()
                };
                Some(StepOutcome::failed(
                    ErrorKind::LlmError,
                    format!("LLM request failed{retried}: {e}"),
                ))
            }
        })
    }
}

/// Records a model call that answered (its secrets learned first, its tokens and cost counted)
/// and says so with `llm_turn`: the execution's id.
fn answered(
    ctx: &mut StepContext,
    request: &ChatRequest,
    mut record: ExecutionRecord,
    response: &ChatResponse,
    turn: u32,
    duration_ms: i64,
) -> Result<String, ExecutionError> {
    // Values the model puts into secret-named `env` keys are secrets before its answer is
    // recorded (the answer holds them too).
    learn_call_secrets(ctx, response);
    record.success = true;
    let (prompt, completion) = response.usage.stored();
    record.prompt_tokens = Some(prompt);
    record.completion_tokens = Some(completion);
    let mut artifacts = vec![
        Artifact::new("prompt", response.request_body.clone()),
        Artifact::new("response", response.response_body.clone()),
    ];
    if !response.warnings.is_empty() {
        artifacts.push(Artifact::new("warnings", response.warnings.join("\n")));
    }
    let id = ctx.record(record, &artifacts)?;
    ctx.tokens.add(response.usage);
    ctx.run.tokens.add(response.usage);
    if let Some(price) = ctx.run.policy.prices.get(&request.model) {
        let usd = price.cost(
            response.usage.prompt_tokens,
            response.usage.completion_tokens,
        );
        ctx.run.store.record_cost(&id, usd)?;
        ctx.spent.cost_usd += usd;
        ctx.run.tokens.add_cost(usd);
    }
    ctx.run.emitter.emit(EventKind::LlmTurn {
        step_id: ctx.step.step_id.clone(),
        turn,
        execution_id: id.clone(),
        prompt_tokens: response.usage.prompt_tokens,
        completion_tokens: response.usage.completion_tokens,
        tool_calls: response.tool_calls.len(),
        finish_reason: response.finish_reason.clone(),
        warnings: response.warnings.clone(),
        model: Some(request.model.clone()),
        duration_ms: Some(duration_ms.max(0) as u64),
    });
    Ok(id)
}

/// How waiting for the model ended.
enum Waited {
    Answer(Result<ChatResponse, crate::llm::LlmError>),
    Cancelled,
    Deadline(Deadline),
}

/// Sends `request` on a helper thread so an interrupt or the step's deadline does not wait for a
/// slow model: returns as soon as `cancel` is set or the deadline passes (the abandoned request ends
/// at its own timeout).
fn chat_unless_cancelled(
    client: &Arc<dyn LlmClient>,
    request: &ChatRequest,
    cancel: &std::sync::atomic::AtomicBool,
    deadline: Option<Deadline>,
) -> Waited {
    let (tx, rx) = std::sync::mpsc::channel();
    let client = Arc::clone(client);
    let request = request.clone();
    let spawned = std::thread::Builder::new()
        .name("acode-llm".into())
        .spawn(move || {
            let _ = tx.send(client.chat(&request));
        });
    if let Err(e) = spawned {
        return Waited::Answer(Err(crate::llm::LlmError::Transport {
            url: String::new(),
            message: format!("cannot start a thread for the LLM request: {e}"),
        }));
    }
    loop {
        match rx.recv_timeout(std::time::Duration::from_millis(25)) {
            Ok(outcome) => return Waited::Answer(outcome),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if cancel.load(Ordering::SeqCst) {
                    return Waited::Cancelled;
                }
                if let Some(d) = deadline
                    && d.remaining().is_zero()
                {
                    return Waited::Deadline(d);
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Waited::Answer(Err(crate::llm::LlmError::Transport {
                    url: String::new(),
                    message: "the LLM request thread ended without an answer".into(),
                }));
            }
        }
    }
}

/// Stuck detection for one native answer: the answer's calls and results, compared as a whole
/// with the previous answer's (a model asking for the same call many times within ONE answer is
/// the per-answer cap's business). Returns the note to append to the answer's last result
/// (empty when the answer is not a repeat), or the fatal `stuck` outcome.
fn check_answer(guard: &mut RepeatGuard, answer: &[(String, Value, String)]) -> CallFate {
    let (tool, args, text) = match answer {
        [] => return CallFate::Reply(String::new()),
        [(tool, args, text)] => (tool.clone(), args.clone(), text.clone()),
        many => (
            many.iter()
                .map(|(t, _, _)| t.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            Value::Array(many.iter().map(|(_, a, _)| a.clone()).collect()),
            many.iter()
                .map(|(_, _, r)| r.as_str())
                .collect::<Vec<_>>()
                .join("\n\u{0}\n"),
        ),
    };
    match guard.observe(&tool, &args, &text) {
        Repeat::Fresh => CallFate::Reply(String::new()),
        Repeat::Again(n) => CallFate::Reply(stuck::repeat_note(&tool, &args, n)),
        Repeat::Stuck(n) => CallFate::Fatal(StepOutcome::failed(
            ErrorKind::Stuck,
            stuck::stuck_message(&tool, &args, n, guard.repeated_total),
        )),
    }
}

/// Stuck detection (SPEC §7, [`stuck`]): a repeated identical call gets a note appended to its
/// result; the [`stuck::STUCK_AFTER`]th in a row ends the step with `stuck`.
fn check_repeat(guard: &mut RepeatGuard, tool: &str, args: &Value, text: String) -> CallFate {
    match guard.observe(tool, args, &text) {
        Repeat::Fresh => CallFate::Reply(text),
        Repeat::Again(n) => CallFate::Reply(format!("{text}{}", stuck::repeat_note(tool, args, n))),
        Repeat::Stuck(n) => CallFate::Fatal(StepOutcome::failed(
            ErrorKind::Stuck,
            stuck::stuck_message(tool, args, n, guard.repeated_total),
        )),
    }
}

fn done(answer: String) -> StepOutcome {
    StepOutcome {
        failure: None,
        output: Some(answer),
        excerpt: None,
    }
}

/// What `usage` cost with `model` at the policy's prices (0 without a price).
fn price_of(ctx: &StepContext, model: &str, usage: crate::llm::Usage) -> f64 {
    ctx.run.policy.prices.get(model).map_or(0.0, |p| {
        p.cost(usage.prompt_tokens, usage.completion_tokens)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(window: usize) -> Conversation {
        Conversation {
            system: "rules".into(),
            first: "task".into(),
            turns: VecDeque::new(),
            dropped: 0,
            window,
        }
    }

    #[test]
    fn a_request_over_the_byte_limit_drops_old_turns_then_gives_up() {
        let mut c = conv(8);
        for i in 0..4 {
            c.push(vec![Message::user(format!("{i}{}", "x".repeat(1000)))]);
        }
        let size = |c: &Conversation| serde_json::to_vec(&c.messages()).unwrap().len();
        assert!(size(&c) > 4000);
        assert!(c.fit(2500));
        assert!(size(&c) <= 2500);
        assert_eq!((c.turns.len(), c.dropped), (2, 2));
        // The newest turn alone is too large: the caller fails the step.
        assert!(!c.fit(500));
        assert_eq!(c.turns.len(), 1);
    }

    #[test]
    fn the_window_drops_whole_turns_and_says_so() {
        let mut c = conv(2);
        for i in 0..5 {
            c.push(vec![
                Message::Assistant {
                    content: None,
                    tool_calls: vec![crate::llm::LlmToolCall {
                        id: format!("call_{i}"),
                        name: "file_read".into(),
                        arguments: json!({"path": "a"}),
                        parse_error: None,
                    }],
                },
                Message::tool(format!("call_{i}"), format!("result {i}")),
            ]);
        }
        let messages = c.messages();
        // system + instruction + the last two turns (two messages each).
        assert_eq!(messages.len(), 2 + 4);
        match &messages[1] {
            Message::User { content } => {
                assert!(content.contains("3 earlier turn(s) omitted"), "{content}")
            }
            other => panic!("{other:?}"),
        }
        // Every tool result still follows the call it answers.
        match (&messages[2], &messages[3]) {
            (Message::Assistant { tool_calls, .. }, Message::Tool { call_id, .. }) => {
                assert_eq!(&tool_calls[0].id, call_id);
                assert_eq!(call_id, "call_3");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn nothing_is_dropped_inside_the_window() {
        let mut c = conv(8);
        c.push(vec![Message::user("one")]);
        let messages = c.messages();
        assert_eq!(messages.len(), 3);
        match &messages[1] {
            Message::User { content } => assert_eq!(content, "task"),
            other => panic!("{other:?}"),
        }
    }
}
