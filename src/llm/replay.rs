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
use crate::workspace::listing;

/// The `format` of a replay file's first line.
pub const FORMAT: &str = "acode-run-replay";
/// The newest replay file version this binary writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// What stands for a tool-call id in a compared request.
const ID: &str = "<id>";
/// What stands for the workspace's absolute path in a compared request.
const WORKSPACE: &str = "<workspace>";
/// What stands for a command's private temporary directory in a compared request.
const TMP: &str = "<tmp>";

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
            Workspaces {
                recorded: &self.shared.recorded_workspace,
                current: &options.workspace,
            },
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

/// The parts of a request body a replay compares, with what is volatile replaced (docs/replay.md,
/// "What is compared", one test per entry): `messages` (ids of tool calls and results as [`ID`]),
/// Anthropic's top-level `system`, and `tools`; in every string, `workspace` as [`WORKSPACE`], a
/// command's private temporary directory as [`TMP`], timestamps as `<timestamp>` and durations as
/// `<duration>`. A body that is not a JSON object is compared as normalised text.
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
            // A command's private TMPDIR (docs/security.md): under Landlock
            // `$TMPDIR/acode-run-UUID/cmd-HEX`, in bwrap's own /tmp `/tmp/acode-PID-N`.
            (
                r"(?:/[\w.+-]+)*/acode-run-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(?:/cmd-[0-9a-f]{32})?",
                TMP,
            ),
            (r"/tmp/acode-\d+-\d+\b", TMP),
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

/// A string with the workspace path, temporary directories, timestamps and durations replaced
/// (see [`normalize`]).
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

/// The two workspaces a replay compares across: where the recording ran and where the replay runs
/// (both absolute), named when a listing differs.
#[derive(Debug, Clone, Copy)]
pub struct Workspaces<'a> {
    /// The recorded run's workspace.
    pub recorded: &'a str,
    /// This run's workspace.
    pub current: &'a str,
}

/// The first difference between the normalised `recorded` and `current` request, described for a
/// person in one line (`the tool result of `run_command` differs: recorded "…", now "…"`,
/// followed by what the call was about, `(file src/lib.rs)`). A difference that is only in the
/// workspace listing, only a path or only the order of lines says so and names the fix
/// ([`explain`]). `raw` is the current request before normalisation, to name tools and their
/// arguments by their call ids.
pub fn first_difference(
    recorded: &Value,
    current: &Value,
    raw: &Value,
    ws: Workspaces,
) -> Option<String> {
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
            let leaf = leaf_difference(
                recorded.get("system").unwrap_or(&Value::Null),
                current.get("system").unwrap_or(&Value::Null),
                ws,
            );
            return Some(leaf.described("the system prompt", None));
        }
        let (old, new) = (list(recorded, "messages"), list(current, "messages"));
        let raw_messages = list(raw, "messages");
        for (i, (a, b)) in old.iter().zip(&new).enumerate() {
            if a != b {
                let (what, subject) = describe_message(&raw_messages, i, a, b);
                return Some(leaf_difference(a, b, ws).described(&what, subject));
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
                let mut sorted = (a.clone(), b.clone());
                sorted.0.sort();
                sorted.1.sort();
                let only = if sorted.0 == sorted.1 {
                    " only in their order"
                } else {
                    ""
                };
                return Some(format!(
                    "the offered tools differ{only}: recorded [{}], now [{}]",
                    a.join(", "),
                    b.join(", ")
                ));
            }
            for (x, y) in old.iter().zip(&new) {
                if x != y {
                    let what = format!("the description or schema of tool `{}`", tool_name(x));
                    return Some(leaf_difference(x, y, ws).described(&what, None));
                }
            }
        }
    }
    Some(leaf_difference(recorded, current, ws).described("the request", None))
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

/// The tool call with id `id` that message `i` answers: the last one before it (a server may
/// reuse ids from one answer to the next): its name and arguments (an object; OpenAI's arguments
/// text is read as JSON).
fn call_for_id(messages: &[Value], i: usize, id: &str) -> Option<(String, Value)> {
    fn find(v: &Value, id: &str) -> Option<(String, Value)> {
        match v {
            Value::Object(map) => {
                if map.get("id").and_then(Value::as_str) == Some(id) {
                    let function = map.get("function");
                    let name = function
                        .and_then(|f| f.get("name"))
                        .or_else(|| map.get("name"))
                        .and_then(Value::as_str);
                    if let Some(name) = name {
                        let args = function
                            .and_then(|f| f.get("arguments"))
                            .or_else(|| map.get("input"))
                            .map(arguments_object)
                            .unwrap_or(Value::Null);
                        return Some((name.to_string(), args));
                    }
                }
                map.values().find_map(|v| find(v, id))
            }
            Value::Array(items) => items.iter().find_map(|v| find(v, id)),
            _ => None,
        }
    }
    messages[..i.min(messages.len())]
        .iter()
        .rev()
        .find_map(|m| find(m, id))
}

/// A call's arguments as an object: OpenAI sends them as JSON text.
fn arguments_object(v: &Value) -> Value {
    match v {
        Value::String(text) => serde_json::from_str(text).unwrap_or(Value::Null),
        other => other.clone(),
    }
}

/// The call an Ollama tool message answers (Ollama's history has no call ids): the tool messages
/// after an assistant message answer its calls in order.
fn call_by_position(messages: &[Value], i: usize) -> Option<(String, Value)> {
    let asked = (0..i).rev().find(|&j| {
        role_of(&messages[j]) == "assistant" && messages[j].get("tool_calls").is_some()
    })?;
    let k = messages[asked + 1..i]
        .iter()
        .filter(|m| role_of(m) == "tool")
        .count();
    let call = messages[asked].get("tool_calls")?.get(k)?;
    let function = call.get("function")?;
    Some((
        function.get("name")?.as_str()?.to_string(),
        function
            .get("arguments")
            .map(arguments_object)
            .unwrap_or(Value::Null),
    ))
}

/// What a call was about, from its arguments: the file it names, or the command it ran.
fn call_subject(args: &Value) -> Option<String> {
    let text = |key: &str| args.get(key).and_then(Value::as_str);
    if let Some(path) = text("path").or_else(|| text("file_path")) {
        return Some(format!("file {}", excerpt(path)));
    }
    if let Some(Value::Array(argv)) = args.get("argv") {
        let words: Vec<&str> = argv.iter().filter_map(Value::as_str).collect();
        return Some(format!("command `{}`", excerpt(&words.join(" "))));
    }
    text("command").map(|c| format!("command `{}`", excerpt(c)))
}

/// What message `i` is, for a person — the system prompt, the instruction, the tool result of a
/// named tool, the model's own earlier answer — and, for a tool result, what its call was about.
fn describe_message(raw: &[Value], i: usize, old: &Value, new: &Value) -> (String, Option<String>) {
    let role = role_of(new);
    let message = raw.get(i).unwrap_or(new);
    let named = |call: Option<(String, Value)>, fallback: Option<&str>| {
        let subject = call.as_ref().and_then(|(_, args)| call_subject(args));
        let name = call
            .map(|(n, _)| n)
            .or(fallback.map(str::to_string))
            .map_or("a tool".to_string(), |n| format!("`{n}`"));
        (format!("the tool result of {name}"), subject)
    };
    match role.as_str() {
        "system" => ("the system prompt".to_string(), None),
        "tool" => {
            let id = message.get("tool_call_id").and_then(Value::as_str);
            let call = match id {
                Some(id) => call_for_id(raw, i, id),
                None => call_by_position(raw, i),
            };
            let fallback = message
                .get("tool_name")
                .or_else(|| message.get("name"))
                .and_then(Value::as_str);
            named(call, fallback)
        }
        "assistant" => (
            "the model's earlier answer, as sent back to it".to_string(),
            None,
        ),
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
                    let call = block
                        .get("tool_use_id")
                        .and_then(Value::as_str)
                        .and_then(|id| call_for_id(raw, i, id));
                    return named(call, None);
                }
            }
            let first_user = raw
                .iter()
                .position(|m| m.get("role").and_then(Value::as_str) == Some("user"));
            if first_user == Some(i) {
                return ("the instruction (the first user message)".to_string(), None);
            }
            // ReAct: an observation answers the action in the assistant message before it.
            let action = i
                .checked_sub(1)
                .and_then(|p| raw.get(p))
                .and_then(|m| m.get("content"))
                .and_then(Value::as_str)
                .and_then(|c| match react::parse(c) {
                    Ok(react::ReactStep::Action { tool, input, .. }) => Some((tool, input)),
                    _ => None,
                });
            match action {
                Some(call) => named(Some(call), None),
                None => (format!("user message {}", i + 1), None),
            }
        }
        other => (format!("message {} ({other})", i + 1), None),
    }
}

/// The first difference inside two values: where it is (`only`: a qualifier such as ` only in a
/// path`, when [`explain`] recognised it) and what it is.
struct Leaf {
    only: &'static str,
    detail: String,
}

impl Leaf {
    /// `WHAT differs[ only …]: DETAIL[ (SUBJECT)]`.
    fn described(self, what: &str, subject: Option<String>) -> String {
        let about = subject.map(|s| format!(" ({s})")).unwrap_or_default();
        format!("{what} differs{}: {}{about}", self.only, self.detail)
    }
}

/// The first differing string (or value) inside `a` and `b`, as `recorded "…", now "…"`, or as
/// [`explain`] says it.
fn leaf_difference(a: &Value, b: &Value, ws: Workspaces) -> Leaf {
    let plain = |detail: String| Leaf { only: "", detail };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, v) in x {
                match y.get(k) {
                    Some(w) if w == v => {}
                    Some(w) => return leaf_difference(v, w, ws),
                    None => return plain(format!("`{k}` was recorded, and is missing now")),
                }
            }
            plain(match y.keys().find(|k| !x.contains_key(*k)) {
                Some(k) => format!("`{k}` is new"),
                None => "the values differ".to_string(),
            })
        }
        (Value::Array(x), Value::Array(y)) => {
            for (v, w) in x.iter().zip(y) {
                if v != w {
                    return leaf_difference(v, w, ws);
                }
            }
            plain(format!("{} item(s) recorded, {} now", x.len(), y.len()))
        }
        (Value::String(x), Value::String(y)) => {
            explain(x, y, ws).unwrap_or_else(|| plain(string_difference(x, y)))
        }
        (x, y) => plain(format!(
            "recorded {}, now {}",
            excerpt(&x.to_string()),
            excerpt(&y.to_string())
        )),
    }
}

/// Two normalised texts that differ only in what a moved or rebuilt checkout changes, said in one
/// line with the fix (docs/replay.md): the workspace listing of a system prompt (entries new or
/// missing: the workspace differs from the recorded one), the order of lines, or a path.
fn explain(a: &str, b: &str, ws: Workspaces) -> Option<Leaf> {
    if let (Some(x), Some(y)) = (listing::find(a), listing::find(b))
        && a[..x.start] == b[..y.start]
        && a[x.end..] == b[y.end..]
    {
        return Some(Leaf {
            only: " only in the workspace listing",
            detail: listing_difference(&a[x], &b[y], ws),
        });
    }
    let (mut x, mut y): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    if x.len() > 1 && x != y {
        x.sort_unstable();
        y.sort_unstable();
        if x == y {
            return Some(Leaf {
                only: " only in the order of its lines",
                detail: format!(
                    "the same {} lines, in another order; make the output's order stable (sort \
                     it, e.g. `| sort`), or record the run again",
                    x.len()
                ),
            });
        }
    }
    let paths = path_pattern();
    if paths.replace_all(a, "$1<path>") == paths.replace_all(b, "$1<path>") {
        let first = |s: &str| -> Vec<String> {
            paths
                .captures_iter(s)
                .filter_map(|c| c.get(2).map(|m| m.as_str().to_string()))
                .collect()
        };
        let (old, new) = (first(a), first(b));
        if let Some((p, q)) = old.iter().zip(&new).find(|(p, q)| p != q) {
            return Some(Leaf {
                only: " only in a path",
                detail: format!(
                    "recorded {}, now {}; only the workspace's own path is normalised \
                     (`<workspace>`): a path outside it, or the workspace reached by another \
                     path, still differs when the checkout moves — make the output name paths \
                     relative to the workspace, or record the run where it replays",
                    excerpt(p),
                    excerpt(q)
                ),
            });
        }
    }
    None
}

/// An absolute path in a text: after the start, a space, a quote, `=`, `(` or `:`.
fn path_pattern() -> &'static regex::Regex {
    static PATHS: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    PATHS.get_or_init(|| {
        regex::Regex::new(r#"(^|[\s'"`=(\[:])(/[^\s'"`,;:()\[\]{}<>]+)"#)
            .expect("a constant, valid pattern")
    })
}

/// What differs between a recorded and a current workspace listing, with the fix.
fn listing_difference(old: &str, new: &str, ws: Workspaces) -> String {
    let (was, was_more) = listing::parse(old);
    let (now, now_more) = listing::parse(new);
    let quoted = |names: Vec<&String>| -> String {
        let shown: Vec<String> = names.iter().take(8).map(|n| format!("`{n}`")).collect();
        let more = names.len().saturating_sub(8);
        let tail = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        format!("{}{tail}", shown.join(", "))
    };
    let added: Vec<&String> = now.iter().filter(|n| !was.contains(n)).collect();
    let missing: Vec<&String> = was.iter().filter(|n| !now.contains(n)).collect();
    if added.is_empty() && missing.is_empty() {
        return if was_more != now_more {
            format!(
                "the same first {} entries, with {was_more} more recorded and {now_more} more \
                 now; if they are generated, add them to the workspace's .gitignore (ignored \
                 and generated entries are not listed, docs/replay.md), else record the run again",
                was.len()
            )
        } else {
            format!(
                "the same {} entries, in another order (an older acode-run sorted them \
                 otherwise); record the run again",
                was.len()
            )
        };
    }
    let mut parts = Vec::new();
    if !added.is_empty() {
        parts.push(format!("{} new", quoted(added)));
    }
    let lacks = !missing.is_empty();
    if lacks {
        parts.push(format!("{} missing", quoted(missing)));
    }
    let fix = if lacks {
        format!(
            "is this the recorded workspace? The recording ran in {}, this replay in {}: run it \
             from the workspace the plan was recorded in (or pass --workspace DIR), or record \
             the run again",
            ws.recorded, ws.current
        )
    } else {
        "if they are generated (build outputs, caches, reports), add them to the workspace's \
         .gitignore — ignored and generated entries are not listed (docs/replay.md); if they \
         belong to the project, record the run again"
            .to_string()
    };
    format!(
        "the workspace differs from the recorded one: {}; {fix}",
        parts.join(", ")
    )
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

    const WS: Workspaces = Workspaces {
        recorded: "/w/a",
        current: "/w/b",
    };

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

    /// A request whose system prompt lists `listing` and whose one tool call, `call`, got
    /// `result`.
    fn request_with(listing: &str, call: (&str, Value), result: &str) -> ChatRequest {
        let mut r = request(result);
        r.messages[0] = Message::system(format!(
            "You work inside a workspace. {}{listing}.\nTools you may call: run_command.",
            listing::PREFIX
        ));
        if let Message::Assistant { tool_calls, .. } = &mut r.messages[2] {
            tool_calls[0].name = call.0.into();
            tool_calls[0].arguments = call.1;
        }
        r
    }

    fn difference(provider: Provider, old: &ChatRequest, new: &ChatRequest) -> String {
        let (old, new) = (render(provider, old, "m"), render(provider, new, "m"));
        first_difference(
            &normalize(&old, WS.recorded),
            &normalize(&new, WS.current),
            &new,
            WS,
        )
        .expect("a difference")
    }

    #[test]
    fn a_listing_difference_is_one_line_naming_the_entries_and_the_fix() {
        let argv = ("run_command", json!({"argv": ["true"]}));
        let recorded = request_with("Cargo.toml, src/", argv.clone(), "ok");
        // Entries new: generated ones belong in .gitignore.
        let grown = request_with("Cargo.toml, ev.jsonl, notes/, src/", argv.clone(), "ok");
        for provider in [Provider::OpenAi, Provider::Ollama, Provider::Anthropic] {
            let d = difference(provider, &recorded, &grown);
            assert_eq!(d.lines().count(), 1, "{d}");
            assert!(
                d.starts_with(
                    "the system prompt differs only in the workspace listing: the workspace \
                     differs from the recorded one: `ev.jsonl`, `notes/` new; if they are \
                     generated"
                ),
                "{provider}: {d}"
            );
            assert!(d.contains("add them to the workspace's .gitignore"), "{d}");
            assert!(
                !d.contains("Tools you may call"),
                "the prompt is not quoted: {d}"
            );
        }
        // Entries missing: another directory than the recorded one.
        let elsewhere = request_with("README.md, docs/, src/", argv.clone(), "ok");
        let d = difference(Provider::OpenAi, &recorded, &elsewhere);
        assert!(
            d.contains(
                "the workspace differs from the recorded one: `README.md`, `docs/` new, \
                 `Cargo.toml` missing; is this the recorded workspace? The recording ran in \
                 /w/a, this replay in /w/b"
            ),
            "{d}"
        );
        assert!(d.contains("--workspace DIR"), "{d}");
        // The same entries in another order.
        let reordered = request_with("src/, Cargo.toml", argv.clone(), "ok");
        let d = difference(Provider::OpenAi, &recorded, &reordered);
        assert!(
            d.starts_with(
                "the system prompt differs only in the workspace listing: the same 2 entries, \
                 in another order"
            ),
            "{d}"
        );
        // Anything else in the system prompt is quoted as before.
        let mut other = recorded.clone();
        other.messages[0] = Message::system("Another prompt.");
        let d = difference(Provider::OpenAi, &recorded, &other);
        assert!(
            d.starts_with("the system prompt differs: recorded \""),
            "{d}"
        );
    }

    #[test]
    fn a_result_differing_only_in_order_or_in_a_path_says_so_with_the_fix() {
        let find = ("run_command", json!({"argv": ["find", "."]}));
        let recorded = request_with("src/", find.clone(), "./a\n./b\n./c\n");
        let shuffled = request_with("src/", find.clone(), "./c\n./a\n./b\n");
        let d = difference(Provider::OpenAi, &recorded, &shuffled);
        assert_eq!(
            d,
            "the tool result of `run_command` differs only in the order of its lines: the same \
             3 lines, in another order; make the output's order stable (sort it, e.g. `| \
             sort`), or record the run again (command `find .`)"
        );
        // A path outside the workspace (its own path is normalised, so not that).
        let pwd = ("run_command", json!({"argv": ["cat", "where.txt"]}));
        let recorded = request_with("src/", pwd.clone(), "built in /home/u/cache/x, ok");
        let moved = request_with("src/", pwd.clone(), "built in /ci/cache/x, ok");
        let d = difference(Provider::OpenAi, &recorded, &moved);
        assert!(
            d.starts_with(
                "the tool result of `run_command` differs only in a path: recorded \
                 /home/u/cache/x, now /ci/cache/x; only the workspace's own path is normalised"
            ),
            "{d}"
        );
        assert!(d.ends_with("(command `cat where.txt`)"), "{d}");
        // The workspace's own path is no difference at all.
        let recorded = request_with("src/", pwd.clone(), "built in /w/a/target, ok");
        let moved = request_with("src/", pwd.clone(), "built in /w/b/target, ok");
        let (old, new) = (
            render(Provider::OpenAi, &recorded, "m"),
            render(Provider::OpenAi, &moved, "m"),
        );
        assert_eq!(
            first_difference(
                &normalize(&old, WS.recorded),
                &normalize(&new, WS.current),
                &new,
                WS
            ),
            None
        );
        // A real difference is quoted.
        let changed = request_with("src/", pwd, "failed, 2 errors");
        let d = difference(Provider::OpenAi, &recorded, &changed);
        assert!(
            d.starts_with("the tool result of `run_command` differs: recorded \""),
            "{d}"
        );
    }

    #[test]
    fn a_differing_tool_result_names_the_file_or_command_in_every_protocol() {
        let read = ("file_read", json!({"path": "src/lib.rs"}));
        let old = request_with("src/", read.clone(), "a - b");
        let new = request_with("src/", read.clone(), "a + b");
        for provider in [Provider::OpenAi, Provider::Ollama, Provider::Anthropic] {
            let d = difference(provider, &old, &new);
            assert!(
                d.starts_with("the tool result of `file_read` differs: recorded \"a - b\""),
                "{provider}: {d}"
            );
            assert!(d.ends_with(" (file src/lib.rs)"), "{provider}: {d}");
        }
        // Ids reused from one answer to the next (scripted and some local servers): the call a
        // result answers is the last one before it with its id.
        let twice = |result: &str| {
            let mut r = request_with("src/", ("file_read", json!({"path": "README.md"})), "x");
            r.messages.push(Message::Assistant {
                content: None,
                tool_calls: vec![LlmToolCall {
                    id: "call_9".into(),
                    name: "file_read".into(),
                    arguments: json!({"path": "src/lib.rs"}),
                    parse_error: None,
                }],
            });
            r.messages.push(Message::tool("call_9", result));
            r
        };
        for provider in [Provider::OpenAi, Provider::Ollama, Provider::Anthropic] {
            let d = difference(provider, &twice("a - b"), &twice("a + b"));
            assert!(d.ends_with(" (file src/lib.rs)"), "{provider}: {d}");
        }
        // ReAct: the action before the observation.
        let react = |result: &str| {
            ChatRequest::new(
                "m",
                vec![
                    Message::system("rules"),
                    Message::user("Fix it."),
                    Message::Assistant {
                        content: Some(
                            r#"{"thought": "t", "action": "file_read", "action_input": {"path": "README.md"}}"#
                                .into(),
                        ),
                        tool_calls: Vec::new(),
                    },
                    Message::user(format!("Observation: {result}")),
                ],
            )
        };
        let d = difference(Provider::OpenAi, &react("add"), &react("subtract"));
        assert!(
            d.starts_with("the tool result of `file_read` differs: recorded \"Observation: add"),
            "{d}"
        );
        assert!(d.ends_with(" (file README.md)"), "{d}");
    }

    /// Whether `old` and `new` (a tool result each, in the same request otherwise) compare equal
    /// in every provider's rendering, recorded in /w/a and replayed in /w/b.
    fn same(old: &str, new: &str) -> bool {
        [Provider::OpenAi, Provider::Ollama, Provider::Anthropic]
            .iter()
            .all(|&p| {
                let (a, b) = (render(p, &request(old), "m"), render(p, &request(new), "m"));
                first_difference(&normalize(&a, "/w/a"), &normalize(&b, "/w/b"), &b, WS).is_none()
            })
    }

    // One test per entry of docs/replay.md's "What is compared" (each fails without its entry).

    #[test]
    fn compared_tool_results() {
        assert!(same("1 passed", "1 passed"));
        assert!(!same("1 passed", "1 failed"));
    }

    #[test]
    fn compared_the_system_prompt_and_the_instruction() {
        for provider in [Provider::OpenAi, Provider::Ollama, Provider::Anthropic] {
            let old = render(provider, &request("x"), "m");
            for (i, text) in [(0, "other rules"), (1, "Fix something else.")] {
                let mut changed = request("x");
                changed.messages[i] = if i == 0 {
                    Message::system(text)
                } else {
                    Message::user(text)
                };
                let new = render(provider, &changed, "m");
                let d = first_difference(&normalize(&old, "/w"), &normalize(&new, "/w"), &new, WS)
                    .expect("a difference");
                let what = ["the system prompt", "the instruction"][i];
                assert!(d.starts_with(what), "{provider}: {d}");
            }
        }
    }

    #[test]
    fn compared_the_offered_tools() {
        let old = render(Provider::OpenAi, &request("x"), "m");
        let fewer = render(Provider::OpenAi, &request("x").with_tools(Vec::new()), "m");
        let d = first_difference(&normalize(&old, "/w"), &normalize(&fewer, "/w"), &fewer, WS)
            .expect("a difference");
        assert!(d.starts_with("the offered tools differ"), "{d}");
        let mut other = request("x");
        other.tools[0].description = "Run something else".into();
        let other = render(Provider::OpenAi, &other, "m");
        let d = first_difference(&normalize(&old, "/w"), &normalize(&other, "/w"), &other, WS)
            .expect("a difference");
        assert!(
            d.starts_with("the description or schema of tool `run_command` differs"),
            "{d}"
        );
    }

    #[test]
    fn not_compared_the_model_and_sampling_options() {
        let mut sampled = request("x");
        sampled.temperature = Some(0.7);
        sampled.max_tokens = Some(99);
        for provider in [Provider::OpenAi, Provider::Ollama, Provider::Anthropic] {
            let old = render(provider, &request("x"), "m");
            let mut new = render(provider, &sampled, "another-model");
            new["stream"] = json!(true);
            new["tool_choice"] = json!("required");
            assert_eq!(
                first_difference(&normalize(&old, "/w"), &normalize(&new, "/w"), &new, WS),
                None,
                "{provider}"
            );
        }
    }

    #[test]
    fn normalised_tool_call_ids() {
        let mut other = request("x");
        if let Message::Assistant { tool_calls, .. } = &mut other.messages[2] {
            tool_calls[0].id = "call_other".into();
        }
        if let Message::Tool { call_id, .. } = &mut other.messages[3] {
            *call_id = "call_other".into();
        }
        for provider in [Provider::OpenAi, Provider::Anthropic] {
            let old = render(provider, &request("x"), "m");
            let new = render(provider, &other, "m");
            assert_ne!(old, new, "{provider}: the ids are in the body");
            assert_eq!(
                first_difference(&normalize(&old, "/w"), &normalize(&new, "/w"), &new, WS),
                None,
                "{provider}"
            );
        }
    }

    #[test]
    fn normalised_the_workspace_path() {
        assert!(same("built /w/a/src/lib.rs", "built /w/b/src/lib.rs"));
        assert!(!same("built /w/a/src/lib.rs", "built /w/c/src/lib.rs"));
    }

    #[test]
    fn normalised_temporary_directories() {
        let landlock = |id: &str, cmd: &str| format!("wrote /tmp/acode-run-{id}/cmd-{cmd}/out.txt");
        assert!(same(
            &landlock(
                "0d9c3d4e-8e8b-4f0e-9a51-7c1f2a3b4c5d",
                "0123456789abcdef0123456789abcdef"
            ),
            &landlock(
                "99999999-1111-4222-8333-444455556666",
                "fedcba9876543210fedcba9876543210"
            )
        ));
        assert!(same("in /tmp/acode-12-3/x", "in /tmp/acode-4567-89/x"));
        assert!(!same("in /tmp/acode-12-3/x", "in /tmp/acode-12-3/y"));
    }

    #[test]
    fn normalised_timestamps() {
        assert!(same("at 2026-01-02T03:04:05Z", "at 2027-11-12 13:14:15"));
        assert!(same(
            "at 2026-01-02T03:04:05.123+02:00",
            "at 2026-01-02T03:04:06Z"
        ));
        assert!(
            !same("on 2026-01-02", "on 2026-01-03"),
            "a date alone is no timestamp"
        );
    }

    #[test]
    fn normalised_durations() {
        assert!(same("finished in 0.52s", "finished in 12 ms"));
        assert!(same("took 3µs", "took 4ns"));
        assert!(!same("3 passed", "4 passed"));
    }

    #[test]
    fn every_provider_names_the_tool_whose_result_differs() {
        for provider in [Provider::OpenAi, Provider::Ollama, Provider::Anthropic] {
            let old = render(provider, &request("ok: 1 passed in /w/a/src"), "m");
            let new = render(provider, &request("FAILED: 1 failed"), "m");
            let d = first_difference(&normalize(&old, "/w/a"), &normalize(&new, "/w/b"), &new, WS)
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
            first_difference(&normalize(&old, "/w/a"), &normalize(&new, "/w/b"), &new, WS),
            None
        );
        // The offered tools are compared.
        let fewer = render(Provider::OpenAi, &b.clone().with_tools(Vec::new()), "m");
        let d = first_difference(
            &normalize(&old, "/w/a"),
            &normalize(&fewer, "/w/b"),
            &fewer,
            WS,
        )
        .unwrap();
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
