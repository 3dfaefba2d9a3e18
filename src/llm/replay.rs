//! Replaying a recorded run's model answers (`run --replay`, docs/replay.md): an [`LlmClient`]
//! that opens no connection and answers each agent step's requests with the answers recorded for
//! the same step, in turn order.
//!
//! Before answering a turn, the request the agent loop would send is rendered exactly as the
//! recording provider renders it, redacted like the record, and compared with the recorded request:
//! the messages (and Anthropic's top-level `system`) and the offered tools. What is volatile is
//! ignored ([`normalize`]): tool-call ids, the workspace's absolute path, timestamps and durations.
//! A difference is a [`LlmError::ReplayDiverged`] naming the step, the turn and the first
//! difference; with `lenient` the recorded answer is given anyway and the difference is added to
//! the answer's warnings (recorded as its `warnings` artifact).
//!
//! The recorded traffic travels as a [`ReplaySource`]: read from the database by the runner, or
//! from the JSON Lines file `acode-run export RUN --replay FILE` writes ([`ReplaySource::to_jsonl`],
//! [`ReplaySource::parse_jsonl`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::parse::IdAllocator;
use super::{ChatRequest, ChatResponse, LlmClient, LlmError, Provider, react};
use crate::redact::Redactor;

/// The `format` of a replay file's first line.
pub const FORMAT: &str = "acode-run-replay";
/// The newest replay file version this binary writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// What stands for a tool-call id in a compared request.
const ID: &str = "<id>";
/// What stands for the workspace's absolute path in a compared request.
const WORKSPACE: &str = "<workspace>";

/// The first line of a replay file: which run it was recorded from and what its steps were asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayHeader {
    /// Always [`FORMAT`].
    pub format: String,
    /// The file format version ([`FORMAT_VERSION`]).
    pub version: u32,
    /// The recorded run.
    pub run_id: String,
    /// Its plan's id.
    pub plan_id: String,
    /// The hash of the plan file that ran.
    pub plan_sha256: String,
    /// The workspace it ran in (its absolute path is volatile: see [`normalize`]).
    pub workspace: String,
    /// The database schema version the run was exported from.
    pub db_version: i64,
    /// The settings the run was started with that shape its requests (`tool_protocol`, ...).
    #[serde(default)]
    pub settings: Map<String, Value>,
    /// Every step of the recorded run, in plan order.
    pub steps: Vec<RecordedStep>,
}

/// A step of the recorded run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedStep {
    /// The step id.
    pub step: String,
    /// Its tool (`agent` for an agent step).
    pub tool: String,
    /// What an agent step was asked (its `instruction`, `skill` and `inputs` as the plan wrote
    /// them), hashed; `None` when the run was recorded before this was kept.
    #[serde(default)]
    pub instruction_sha256: Option<String>,
}

/// One recorded model turn: the request that was sent and the answer that came back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedTurn {
    /// The agent step.
    pub step: String,
    /// The turn within the step, from 1.
    pub turn: u32,
    /// The wire protocol it was sent with (`openai`, `ollama`, `anthropic`).
    pub provider: String,
    /// The model it was sent to.
    #[serde(default)]
    pub model: String,
    /// The request body as recorded (redacted): JSON when it was JSON, else the text.
    pub request: Value,
    /// The response body as recorded (redacted): JSON when it was JSON, else the text.
    pub response: Value,
    /// The recorded request or response was cut short: it cannot be replayed.
    #[serde(default, skip_serializing_if = "is_false")]
    pub truncated: bool,
    /// The server never answered this turn: the error its last attempt ended with, which the
    /// replay reports again (`llm_error`) instead of an answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The execution that recorded it, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_id: Option<String>,
    /// The line of the replay file it came from (0 when read from the database).
    #[serde(skip)]
    pub line: usize,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A body as kept in a [`RecordedTurn`]: a JSON object or array as itself, anything else as text.
pub fn body_value(text: &str) -> Value {
    match serde_json::from_str::<Value>(text) {
        Ok(v @ (Value::Object(_) | Value::Array(_))) => v,
        _ => Value::String(text.to_string()),
    }
}

/// The text of a body kept by [`body_value`].
fn body_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl RecordedTurn {
    /// `step `fix`, turn 3` (with the file line when it came from a file).
    pub fn name(&self) -> String {
        let at = if self.line > 0 {
            format!(" (line {})", self.line)
        } else {
            String::new()
        };
        format!("step `{}`, turn {}{at}", self.step, self.turn)
    }

    fn provider(&self) -> Result<Provider, String> {
        self.provider.parse()
    }
}

/// The recorded model traffic of one run: what a replay answers from.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplaySource {
    /// The run and its steps.
    pub header: ReplayHeader,
    /// Every answered turn, by step then turn.
    pub turns: Vec<RecordedTurn>,
}

impl ReplaySource {
    /// The JSON Lines text of this source: the header, then one turn per line.
    pub fn to_jsonl(&self) -> String {
        let mut out = serde_json::to_string(&self.header).unwrap_or_default();
        out.push('\n');
        for t in &self.turns {
            out.push_str(&serde_json::to_string(t).unwrap_or_default());
            out.push('\n');
        }
        out
    }

    /// Reads a replay file's text. Every line is checked: each problem (a line that is not the
    /// expected JSON object, a header missing or of an unknown version, a turn given twice) is
    /// named with its line number, and any problem refuses the whole file.
    pub fn parse_jsonl(text: &str) -> Result<ReplaySource, Vec<String>> {
        let mut problems = Vec::new();
        let mut header: Option<ReplayHeader> = None;
        let mut turns: Vec<RecordedTurn> = Vec::new();
        let mut seen: HashMap<(String, u32), usize> = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            if line.trim().is_empty() {
                continue;
            }
            let value: Value = match serde_json::from_str(line) {
                Ok(v @ Value::Object(_)) => v,
                Ok(_) => {
                    problems.push(format!("line {n}: not a JSON object"));
                    // Without its header, no later line can be read for what it is.
                    if header.is_none() {
                        return Err(problems);
                    }
                    continue;
                }
                Err(e) => {
                    problems.push(format!("line {n}: not valid JSON ({e})"));
                    if header.is_none() {
                        return Err(problems);
                    }
                    continue;
                }
            };
            if header.is_none() {
                match serde_json::from_value::<ReplayHeader>(value) {
                    Ok(h) if h.format != FORMAT => {
                        problems.push(format!(
                            "line {n}: the header's format is {:?}, not {FORMAT:?}",
                            h.format
                        ));
                        return Err(problems);
                    }
                    Ok(h) if h.version > FORMAT_VERSION || h.version == 0 => {
                        problems.push(format!(
                            "line {n}: replay file version {} is not one this acode-run reads \
                             (1 to {FORMAT_VERSION})",
                            h.version
                        ));
                        return Err(problems);
                    }
                    Ok(h) => header = Some(h),
                    Err(e) => {
                        problems.push(format!(
                            "line {n}: the first line must be the replay header \
                             ({{\"format\": \"{FORMAT}\", ...}}): {e}"
                        ));
                        return Err(problems);
                    }
                }
                continue;
            }
            match serde_json::from_value::<RecordedTurn>(value) {
                Ok(mut t) => {
                    t.line = n;
                    if t.turn == 0 {
                        problems.push(format!("line {n}: turn numbers start at 1"));
                        continue;
                    }
                    if let Some(first) = seen.insert((t.step.clone(), t.turn), n) {
                        problems.push(format!(
                            "line {n}: a duplicated turn: step `{}`, turn {} is also on line \
                             {first}",
                            t.step, t.turn
                        ));
                        continue;
                    }
                    turns.push(t);
                }
                Err(e) => problems.push(format!("line {n}: not a recorded turn: {e}")),
            }
        }
        let Some(header) = header else {
            problems.push("the file is empty: no replay header".to_string());
            return Err(problems);
        };
        if !problems.is_empty() {
            return Err(problems);
        }
        turns.sort_by(|a, b| (&a.step, a.turn).cmp(&(&b.step, b.turn)));
        Ok(ReplaySource { header, turns })
    }

    /// What makes this source impossible to replay whatever the plan: a truncated or unreadable
    /// recorded answer, an unknown provider, a step's turns with a gap, a turn for a step the
    /// recorded run did not have as an agent step, and agent steps recorded without what they were
    /// asked (a run from a database older than version 13).
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let steps: HashMap<&str, &RecordedStep> = self
            .header
            .steps
            .iter()
            .map(|s| (s.step.as_str(), s))
            .collect();
        let mut expected: BTreeMap<&str, u32> = BTreeMap::new();
        for t in &self.turns {
            let name = t.name();
            match steps.get(t.step.as_str()) {
                None => problems.push(format!(
                    "{name}: run {} had no step `{}`",
                    self.header.run_id, t.step
                )),
                Some(s) if s.tool != crate::tools::agent::NAME => problems.push(format!(
                    "{name}: step `{}` was not an agent step in run {} (tool `{}`)",
                    t.step, self.header.run_id, s.tool
                )),
                Some(_) => {}
            }
            let next = expected.entry(t.step.as_str()).or_insert(1);
            if t.turn != *next {
                problems.push(format!(
                    "{name}: turn {} of step `{}` is missing",
                    *next, t.step
                ));
            }
            *next = t.turn + 1;
            if t.truncated {
                problems.push(format!(
                    "{name}: the recorded response (or request) was truncated when it was \
                     stored, so it cannot be replayed"
                ));
                continue;
            }
            match t.provider() {
                Err(e) => problems.push(format!("{name}: {e}")),
                Ok(_) if t.error.is_some() => {}
                Ok(provider) => {
                    let mut ids = AtomicU64::new(0);
                    let request = ChatRequest::new(t.model.clone(), Vec::new());
                    if let Err(e) =
                        parse_answer(provider, &body_text(&t.response), &request, &mut ids)
                    {
                        problems.push(format!(
                            "{name}: the recorded response cannot be read (truncated or damaged?): {e}"
                        ));
                    }
                }
            }
        }
        for s in &self.header.steps {
            if s.tool == crate::tools::agent::NAME && s.instruction_sha256.is_none() {
                problems.push(format!(
                    "step `{}`: run {} was recorded by an older acode-run (database version \
                     before 13) that did not keep what agent steps were asked, so a plan edited \
                     since could not be told apart; record the run again",
                    s.step, self.header.run_id
                ));
            }
        }
        problems
    }
}

/// Parses a recorded response body with the provider's own parser, as the live client would.
fn parse_answer(
    provider: Provider,
    body: &str,
    request: &ChatRequest,
    ids: &mut AtomicU64,
) -> Result<ChatResponse, LlmError> {
    let url = "replay";
    let mut alloc = IdAllocator::new(ids);
    match provider {
        Provider::OpenAi => super::openai::parse_response(body, url, request, &mut alloc),
        Provider::Ollama => super::ollama::parse_response(body, url, request, &mut alloc),
        Provider::Anthropic => super::anthropic::parse_response(body, url, request, &mut alloc),
    }
}

/// The body `provider` would send for `request` to `model`.
fn render(provider: Provider, request: &ChatRequest, model: &str) -> Value {
    match provider {
        Provider::OpenAi => super::openai::request_json(request, model),
        Provider::Ollama => super::ollama::request_json(request, model),
        Provider::Anthropic => super::anthropic::request_json(request, model),
    }
}

/// How a replay answers.
#[derive(Clone)]
pub struct ReplayOptions {
    /// Answer by turn order whatever the request, recording each divergence as a warning.
    pub lenient: bool,
    /// The run's redactor: the request is compared as it would be recorded.
    pub redactor: Arc<Redactor>,
    /// The workspace root of this run (the recorded one is in the header).
    pub workspace: String,
    /// Where the answers come from, for messages: `run 1a2b...` or `file fixtures/x.jsonl`.
    pub origin: String,
}

struct Shared {
    steps: BTreeMap<String, Vec<RecordedTurn>>,
    options: ReplayOptions,
    recorded_workspace: String,
    divergences: Mutex<Vec<String>>,
    ids: AtomicU64,
}

/// The client of a replay: hands each agent step a client of its own ([`LlmClient::for_step`])
/// that answers from that step's recorded turns. Opens no connection.
#[derive(Clone)]
pub struct ReplayClient {
    shared: Arc<Shared>,
}

impl ReplayClient {
    /// A client answering from `source`.
    pub fn new(source: ReplaySource, options: ReplayOptions) -> Self {
        let mut steps: BTreeMap<String, Vec<RecordedTurn>> = BTreeMap::new();
        for t in source.turns {
            steps.entry(t.step.clone()).or_default().push(t);
        }
        for turns in steps.values_mut() {
            turns.sort_by_key(|t| t.turn);
        }
        ReplayClient {
            shared: Arc::new(Shared {
                steps,
                options,
                recorded_workspace: source.header.workspace,
                divergences: Mutex::new(Vec::new()),
                ids: AtomicU64::new(0),
            }),
        }
    }

    /// The divergences answered anyway (lenient mode), in the order they happened.
    pub fn divergences(&self) -> Vec<String> {
        self.shared
            .divergences
            .lock()
            .map(|d| d.clone())
            .unwrap_or_default()
    }
}

impl LlmClient for ReplayClient {
    fn chat(&self, _request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        Err(LlmError::Config(
            "a replay answers only agent steps (through LlmClient::for_step)".to_string(),
        ))
    }

    fn describe(&self) -> String {
        format!("replay of {}", self.shared.options.origin)
    }

    fn for_step(&self, step_id: &str) -> Option<Arc<dyn LlmClient>> {
        Some(Arc::new(StepReplay {
            shared: self.shared.clone(),
            step: step_id.to_string(),
            next: AtomicUsize::new(0),
        }))
    }
}

/// One agent step's replay: its recorded turns, answered in order.
struct StepReplay {
    shared: Arc<Shared>,
    step: String,
    next: AtomicUsize,
}

impl StepReplay {
    fn turns(&self) -> &[RecordedTurn] {
        self.shared
            .steps
            .get(&self.step)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// The provider and model of this step's recording (the first turn's), for rendering.
    fn wire(&self) -> (Provider, String) {
        self.turns()
            .first()
            .map(|t| (t.provider().unwrap_or_default(), t.model.clone()))
            .unwrap_or_default()
    }

    fn diverged(&self, message: String) -> LlmError {
        LlmError::ReplayDiverged { message }
    }
}

impl LlmClient for StepReplay {
    fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let index = self.next.fetch_add(1, Ordering::SeqCst);
        let turn = index + 1;
        let Some(recorded) = self.turns().get(index) else {
            let had = self.turns().len();
            return Err(self.diverged(format!(
                "step `{}`, turn {turn}: {} has no answer for this turn (its model was asked {had} \
                 time(s) in this step)",
                self.step, self.shared.options.origin
            )));
        };
        let provider = recorded.provider().map_err(LlmError::Config)?;
        let model = if request.model.trim().is_empty() {
            recorded.model.clone()
        } else {
            request.model.clone()
        };
        let body = render(provider, request, &model).to_string();
        let options = &self.shared.options;
        let as_recorded = body_value(&options.redactor.redact_string(body.clone()));
        let difference = first_difference(
            &normalize(&recorded.request, &self.shared.recorded_workspace),
            &normalize(&as_recorded, &options.workspace),
            &as_recorded,
        );
        let divergence = difference.map(|d| format!("step `{}`, turn {turn}: {d}", self.step));
        if let Some(message) = &divergence
            && !options.lenient
        {
            return Err(self.diverged(message.clone()));
        }
        if let Some(error) = &recorded.error {
            return Err(LlmError::Recorded {
                message: error.clone(),
            });
        }
        let response_body = body_text(&recorded.response);
        let mut ids = AtomicU64::new(self.shared.ids.load(Ordering::SeqCst));
        let parsed = parse_answer(provider, &response_body, request, &mut ids);
        self.shared.ids.fetch_max(*ids.get_mut(), Ordering::SeqCst);
        let mut response = parsed?;
        response.request_body = body;
        response.response_body = response_body;
        if let Some(message) = divergence {
            response
                .warnings
                .push(format!("replay divergence (--replay-lenient): {message}"));
            if let Ok(mut all) = self.shared.divergences.lock() {
                all.push(message);
            }
        }
        Ok(response)
    }

    fn describe(&self) -> String {
        let (provider, model) = self.wire();
        format!(
            "replay of {} ({provider} model {model})",
            self.shared.options.origin
        )
    }

    fn request_body(&self, request: &ChatRequest) -> String {
        let (provider, model) = self.wire();
        let model = if request.model.trim().is_empty() {
            model
        } else {
            request.model.clone()
        };
        render(provider, request, &model).to_string()
    }
}

/// The parts of a request body a replay compares, with what is volatile replaced (docs/replay.md):
/// `messages` (ids of tool calls and results as [`ID`]), Anthropic's top-level `system`, and
/// `tools`; in every string, `workspace` as [`WORKSPACE`], timestamps as `<timestamp>` and
/// durations as `<duration>`. A body that is not a JSON object is compared as normalised text.
pub fn normalize(body: &Value, workspace: &str) -> Value {
    let Value::Object(map) = body else {
        return normalize_strings(body, workspace, false);
    };
    let mut out = Map::new();
    for key in ["system", "messages", "tools"] {
        if let Some(v) = map.get(key) {
            out.insert(
                key.to_string(),
                normalize_strings(v, workspace, key == "messages"),
            );
        }
    }
    Value::Object(out)
}

/// Keys whose values are tool-call ids.
fn is_id_key(key: &str) -> bool {
    matches!(key, "id" | "tool_call_id" | "tool_use_id")
}

fn normalize_strings(v: &Value, workspace: &str, ids: bool) -> Value {
    match v {
        Value::String(s) => Value::String(normalize_text(s, workspace)),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|i| normalize_strings(i, workspace, ids))
                .collect(),
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = if ids && is_id_key(k) && v.is_string() {
                        Value::String(ID.to_string())
                    } else {
                        normalize_strings(v, workspace, ids)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

fn volatile_patterns() -> &'static [(regex::Regex, &'static str)] {
    static PATTERNS: std::sync::OnceLock<Vec<(regex::Regex, &'static str)>> =
        std::sync::OnceLock::new();
    PATTERNS.get_or_init(|| {
        [
            (
                r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?",
                "<timestamp>",
            ),
            (r"\b\d+(?:\.\d+)?\s?(?:ns|us|µs|ms|s)\b", "<duration>"),
        ]
        .into_iter()
        .filter_map(|(p, r)| regex::Regex::new(p).ok().map(|re| (re, r)))
        .collect()
    })
}

/// A string with the workspace path, timestamps and durations replaced (see [`normalize`]).
pub fn normalize_text(s: &str, workspace: &str) -> String {
    let mut text = if workspace.len() > 1 && s.contains(workspace) {
        s.replace(workspace, WORKSPACE)
    } else {
        s.to_string()
    };
    for (re, with) in volatile_patterns() {
        if re.is_match(&text) {
            text = re.replace_all(&text, *with).into_owned();
        }
    }
    text
}

/// The first difference between the normalised `recorded` and `current` request, described for a
/// person (`the tool result of `run_command` differs: recorded "…", now "…"`); `raw` is the
/// current request before normalisation, to name tools by their call ids.
pub fn first_difference(recorded: &Value, current: &Value, raw: &Value) -> Option<String> {
    if recorded == current {
        return None;
    }
    let empty = Vec::new();
    let list = |v: &Value, key: &str| -> Vec<Value> {
        v.get(key)
            .and_then(Value::as_array)
            .unwrap_or(&empty)
            .clone()
    };
    if let (Value::Object(_), Value::Object(_)) = (recorded, current) {
        if recorded.get("system") != current.get("system") {
            return Some(format!(
                "the system prompt differs: {}",
                leaf_difference(
                    recorded.get("system").unwrap_or(&Value::Null),
                    current.get("system").unwrap_or(&Value::Null)
                )
            ));
        }
        let (old, new) = (list(recorded, "messages"), list(current, "messages"));
        let raw_messages = list(raw, "messages");
        for (i, (a, b)) in old.iter().zip(&new).enumerate() {
            if a != b {
                return Some(format!(
                    "{} differs: {}",
                    describe_message(&raw_messages, i, a, b),
                    leaf_difference(a, b)
                ));
            }
        }
        if old.len() != new.len() {
            let (longer, which) = if old.len() > new.len() {
                (&old, "the recorded request has")
            } else {
                (&new, "this request has")
            };
            let extra = &longer[old.len().min(new.len())];
            return Some(format!(
                "{which} more messages ({} recorded, {} now), the first extra one being {}: {}",
                old.len(),
                new.len(),
                role_of(extra),
                excerpt(&text_of(extra))
            ));
        }
        let (old, new) = (list(recorded, "tools"), list(current, "tools"));
        if old != new {
            let names = |v: &[Value]| -> Vec<String> { v.iter().map(tool_name).collect() };
            let (a, b) = (names(&old), names(&new));
            if a != b {
                return Some(format!(
                    "the offered tools differ: recorded [{}], now [{}]",
                    a.join(", "),
                    b.join(", ")
                ));
            }
            for (x, y) in old.iter().zip(&new) {
                if x != y {
                    return Some(format!(
                        "the description or schema of tool `{}` differs: {}",
                        tool_name(x),
                        leaf_difference(x, y)
                    ));
                }
            }
        }
    }
    Some(format!(
        "the request differs: {}",
        leaf_difference(recorded, current)
    ))
}

fn tool_name(t: &Value) -> String {
    t.pointer("/function/name")
        .or_else(|| t.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_string()
}

fn role_of(m: &Value) -> String {
    m.get("role")
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_string()
}

/// The text of a message, for excerpts.
fn text_of(m: &Value) -> String {
    match m.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => m.to_string(),
    }
}

/// The name of the tool whose call has id `id`, found anywhere in `messages`.
fn tool_for_id(messages: &[Value], id: &str) -> Option<String> {
    fn find(v: &Value, id: &str) -> Option<String> {
        match v {
            Value::Object(map) => {
                if map.get("id").and_then(Value::as_str) == Some(id) {
                    let name = map
                        .get("function")
                        .and_then(|f| f.get("name"))
                        .or_else(|| map.get("name"))
                        .and_then(Value::as_str);
                    if let Some(name) = name {
                        return Some(name.to_string());
                    }
                }
                map.values().find_map(|v| find(v, id))
            }
            Value::Array(items) => items.iter().find_map(|v| find(v, id)),
            _ => None,
        }
    }
    messages.iter().find_map(|m| find(m, id))
}

/// What message `i` is, for a person: the system prompt, the instruction, the tool result of a
/// named tool, the model's own earlier answer, ...
fn describe_message(raw: &[Value], i: usize, old: &Value, new: &Value) -> String {
    let role = role_of(new);
    let message = raw.get(i).unwrap_or(new);
    let tool = |id: Option<&str>| {
        id.and_then(|id| tool_for_id(raw, id))
            .map_or("a tool".to_string(), |n| format!("`{n}`"))
    };
    match role.as_str() {
        "system" => "the system prompt".to_string(),
        "tool" => {
            let name = message
                .get("tool_name")
                .or_else(|| message.get("name"))
                .and_then(Value::as_str)
                .map(|n| format!("`{n}`"))
                .unwrap_or_else(|| tool(message.get("tool_call_id").and_then(Value::as_str)));
            format!("the tool result of {name}")
        }
        "assistant" => "the model's earlier answer, as sent back to it".to_string(),
        "user" => {
            // Anthropic: tool results are blocks of a user message; name the first differing one.
            if let (Some(Value::Array(a)), Some(Value::Array(b))) =
                (old.get("content"), new.get("content"))
            {
                let k = a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(0);
                let block = message
                    .get("content")
                    .and_then(|c| c.get(k))
                    .unwrap_or(&Value::Null);
                if block.get("type").and_then(Value::as_str) == Some("tool_result") {
                    return format!(
                        "the tool result of {}",
                        tool(block.get("tool_use_id").and_then(Value::as_str))
                    );
                }
            }
            let first_user = raw
                .iter()
                .position(|m| m.get("role").and_then(Value::as_str) == Some("user"));
            if first_user == Some(i) {
                return "the instruction (the first user message)".to_string();
            }
            // ReAct: an observation answers the action in the assistant message before it.
            let action = i
                .checked_sub(1)
                .and_then(|p| raw.get(p))
                .and_then(|m| m.get("content"))
                .and_then(Value::as_str)
                .and_then(|c| match react::parse(c) {
                    Ok(react::ReactStep::Action { tool, .. }) => Some(tool),
                    _ => None,
                });
            match action {
                Some(tool) => format!("the tool result of `{tool}`"),
                None => format!("user message {}", i + 1),
            }
        }
        other => format!("message {} ({other})", i + 1),
    }
}

/// The first differing string (or value) inside `a` and `b`, as `recorded "…", now "…"`.
fn leaf_difference(a: &Value, b: &Value) -> String {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, v) in x {
                match y.get(k) {
                    Some(w) if w == v => {}
                    Some(w) => return leaf_difference(v, w),
                    None => return format!("`{k}` was recorded, and is missing now"),
                }
            }
            match y.keys().find(|k| !x.contains_key(*k)) {
                Some(k) => format!("`{k}` is new"),
                None => "the values differ".to_string(),
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for (v, w) in x.iter().zip(y) {
                if v != w {
                    return leaf_difference(v, w);
                }
            }
            format!("{} item(s) recorded, {} now", x.len(), y.len())
        }
        (Value::String(x), Value::String(y)) => string_difference(x, y),
        (x, y) => format!(
            "recorded {}, now {}",
            excerpt(&x.to_string()),
            excerpt(&y.to_string())
        ),
    }
}

/// Two strings around the first character where they differ.
fn string_difference(a: &str, b: &str) -> String {
    let at = a
        .char_indices()
        .zip(b.chars())
        .find(|((_, x), y)| x != y)
        .map(|((i, _), _)| i)
        .unwrap_or_else(|| a.len().min(b.len()));
    let window = |s: &str| -> String {
        let start = s[..at.min(s.len())]
            .char_indices()
            .rev()
            .nth(30)
            .map_or(0, |(i, _)| i);
        let cut: String = s[start..].chars().take(80).collect();
        let more = s[start..].chars().count() > 80;
        format!(
            "\"{}{}{}\"",
            if start > 0 { "…" } else { "" },
            cut.escape_debug(),
            if more { "…" } else { "" }
        )
    };
    format!("recorded {}, now {}", window(a), window(b))
}

fn excerpt(s: &str) -> String {
    super::excerpt(s, 80)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{LlmToolCall, Message, ToolSpec};
    use serde_json::json;

    fn request(result: &str) -> ChatRequest {
        ChatRequest::new(
            "m",
            vec![
                Message::system("rules"),
                Message::user("Fix it."),
                Message::Assistant {
                    content: None,
                    tool_calls: vec![LlmToolCall {
                        id: "call_9".into(),
                        name: "run_command".into(),
                        arguments: json!({"argv": ["cargo", "test"]}),
                        parse_error: None,
                    }],
                },
                Message::tool("call_9", result),
            ],
        )
        .with_tools(vec![ToolSpec {
            name: "run_command".into(),
            description: "Run".into(),
            parameters: json!({"type": "object"}),
        }])
    }

    #[test]
    fn every_provider_names_the_tool_whose_result_differs() {
        for provider in [Provider::OpenAi, Provider::Ollama, Provider::Anthropic] {
            let old = render(provider, &request("ok: 1 passed in /w/a/src"), "m");
            let new = render(provider, &request("FAILED: 1 failed"), "m");
            let d = first_difference(&normalize(&old, "/w/a"), &normalize(&new, "/w/b"), &new)
                .expect("a difference");
            assert!(
                d.starts_with("the tool result of `run_command` differs: recorded \"ok"),
                "{provider}: {d}"
            );
            assert!(d.contains("now \"FAILED"), "{provider}: {d}");
        }
    }

    #[test]
    fn ids_workspace_paths_timestamps_and_durations_are_volatile() {
        let mut a = request("built /w/a/x at 2026-01-02T03:04:05Z in 0.52s");
        let b = request("built /w/b/x at 2027-11-12 13:14:15 in 12 ms");
        if let Message::Tool { call_id, .. } = &mut a.messages[3] {
            *call_id = "call_other".into();
        }
        let old = render(Provider::OpenAi, &a, "m");
        let new = render(Provider::OpenAi, &b, "other-model");
        assert_eq!(
            first_difference(&normalize(&old, "/w/a"), &normalize(&new, "/w/b"), &new),
            None
        );
        // The offered tools are compared.
        let fewer = render(Provider::OpenAi, &b.clone().with_tools(Vec::new()), "m");
        let d =
            first_difference(&normalize(&old, "/w/a"), &normalize(&fewer, "/w/b"), &fewer).unwrap();
        assert!(d.contains("offered tools differ"), "{d}");
    }

    fn header(steps: Vec<RecordedStep>) -> ReplayHeader {
        ReplayHeader {
            format: FORMAT.into(),
            version: FORMAT_VERSION,
            run_id: "r1".into(),
            plan_id: "p".into(),
            plan_sha256: "00".into(),
            workspace: "/w".into(),
            db_version: 13,
            settings: Map::new(),
            steps,
        }
    }

    fn turn(step: &str, n: u32) -> RecordedTurn {
        RecordedTurn {
            step: step.into(),
            turn: n,
            provider: "openai".into(),
            model: "m".into(),
            request: render(Provider::OpenAi, &request("x"), "m"),
            response: json!({"choices": [{"message": {"role": "assistant", "content": "done"}}]}),
            truncated: false,
            error: None,
            execution_id: None,
            line: 0,
        }
    }

    #[test]
    fn the_file_round_trips_and_bad_lines_are_named() {
        let source = ReplaySource {
            header: header(vec![RecordedStep {
                step: "fix".into(),
                tool: "agent".into(),
                instruction_sha256: Some("ab".into()),
            }]),
            turns: vec![turn("fix", 1), turn("fix", 2)],
        };
        let text = source.to_jsonl();
        let mut back = ReplaySource::parse_jsonl(&text).unwrap();
        for t in &mut back.turns {
            t.line = 0;
        }
        assert_eq!(back, source);
        assert!(back.problems().is_empty(), "{:?}", back.problems());

        let lines: Vec<&str> = text.lines().collect();
        let broken = format!("{}\n{}\n{{\"step\": \"fix\", \n", lines[0], lines[1]);
        let err = ReplaySource::parse_jsonl(&broken).unwrap_err();
        assert!(err[0].starts_with("line 3: not valid JSON"), "{err:?}");
        let twice = format!("{}\n{}\n{}\n", lines[0], lines[1], lines[1]);
        let err = ReplaySource::parse_jsonl(&twice).unwrap_err();
        assert_eq!(
            err,
            ["line 3: a duplicated turn: step `fix`, turn 1 is also on line 2"]
        );
        let err = ReplaySource::parse_jsonl(lines[1]).unwrap_err();
        assert!(err[0].contains("replay header"), "{err:?}");
        let err = ReplaySource::parse_jsonl(&format!("{{\n{}\n", lines[1])).unwrap_err();
        assert_eq!(err.len(), 1, "{err:?}");
        assert!(err[0].starts_with("line 1: not valid JSON"), "{err:?}");
    }

    #[test]
    fn unreplayable_turns_are_named() {
        let mut cut = turn("fix", 1);
        cut.response = Value::String("{\"choices\": [{\"mess".into());
        let mut flagged = turn("fix", 3);
        flagged.truncated = true;
        let source = ReplaySource {
            header: header(vec![
                RecordedStep {
                    step: "fix".into(),
                    tool: "agent".into(),
                    instruction_sha256: None,
                },
                RecordedStep {
                    step: "build".into(),
                    tool: "run_command".into(),
                    instruction_sha256: None,
                },
            ]),
            turns: vec![cut, flagged, turn("build", 1)],
        };
        let problems = source.problems().join("\n");
        for expected in [
            "step `fix`, turn 1: the recorded response cannot be read",
            "step `fix`, turn 3: turn 2 of step `fix` is missing",
            "step `fix`, turn 3: the recorded response (or request) was truncated",
            "step `build`, turn 1: step `build` was not an agent step in run r1",
            "step `fix`: run r1 was recorded by an older acode-run (database version before 13)",
        ] {
            assert!(problems.contains(expected), "{expected}\n{problems}");
        }
    }
}
