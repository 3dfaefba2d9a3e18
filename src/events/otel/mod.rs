//! OpenTelemetry traces of a run, exported over OTLP/HTTP (docs/observability.md).
//!
//! Another event sink, like the JSONL writer: [`OtelSink`] turns the run's [`Event`]s into spans —
//! one trace per run, a span for the plan, each step, each model call, each tool call and each MCP
//! call, following the GenAI and MCP semantic conventions plus `acode.*` attributes — so the
//! executor holds no tracing code. Finished spans are handed to [`export::Exporter`], a thread
//! that posts them to the collector with the runner's own HTTP agent (no async runtime); a
//! collector that is slow, down or failing costs the run at most one bounded flush at its end, and
//! what could not be delivered is counted ([`export::Stats`], recorded with the run).
//!
//! Configured only by the standard variables ([`OtelConfig::from_env`]); an inbound `TRACEPARENT`
//! makes the run a child of the caller's span ([`TraceContext`]), and every command a step starts
//! sees a `TRACEPARENT` naming its own tool span ([`TraceContext::for_call`]).
//!
//! Prompts, answers, tool arguments and results are left out unless the policy's
//! `telemetry.export_content` says otherwise; then they pass the run's redactor, as every record
//! does.

pub mod export;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{Span, Status, span, status};
use serde_json::Value;

use super::{Event, EventKind};
use crate::redact::Redactor;

pub use export::{Exporter, Protocol, Stats};

/// The instrumentation scope spans are reported under.
pub const SCOPE: &str = "acode-run";
/// How much of one exported text (a prompt, a tool result) a span carries.
pub const CONTENT_CHARS: usize = 16 * 1024;

/// Where and how traces go, from the standard variables (the OTLP exporter specification's).
#[derive(Debug, Clone)]
pub struct OtelConfig {
    /// The full URL spans are posted to (`…/v1/traces`).
    pub endpoint: String,
    /// `http/protobuf` (default) or `http/json`.
    pub protocol: Protocol,
    /// Extra request headers (`OTEL_EXPORTER_OTLP_HEADERS`), e.g. an API key: never recorded.
    pub headers: Vec<(String, String)>,
    /// Resource attributes (`OTEL_RESOURCE_ATTRIBUTES`, `service.name` from `OTEL_SERVICE_NAME`).
    pub resource: Vec<(String, String)>,
    /// The bound on one export request, and on the flush at the end of the run
    /// (`OTEL_EXPORTER_OTLP_TIMEOUT`, milliseconds; default 10 s).
    pub timeout: Duration,
    /// A PEM file of certificates to trust besides the built-in roots
    /// (`OTEL_EXPORTER_OTLP_CERTIFICATE`).
    pub certificate: Option<PathBuf>,
}

impl OtelConfig {
    /// The configuration `get` (an environment lookup) gives: `Ok(None)` when traces are off (no
    /// endpoint, or `OTEL_SDK_DISABLED=true`), `Err` naming the variable when one cannot be used.
    /// Trace-specific variables (`OTEL_EXPORTER_OTLP_TRACES_*`) win over the general ones.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Option<OtelConfig>, String> {
        let get = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        if get("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let either = |suffix: &str| {
            get(&format!("OTEL_EXPORTER_OTLP_TRACES_{suffix}"))
                .map(|v| (format!("OTEL_EXPORTER_OTLP_TRACES_{suffix}"), v))
                .or_else(|| {
                    get(&format!("OTEL_EXPORTER_OTLP_{suffix}"))
                        .map(|v| (format!("OTEL_EXPORTER_OTLP_{suffix}"), v))
                })
        };
        let endpoint = match (
            get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            get("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ) {
            // The signal-specific URL is used as given; the base gets the signal's path.
            (Some(url), _) => url.trim().to_string(),
            (None, Some(base)) => format!("{}/v1/traces", base.trim().trim_end_matches('/')),
            (None, None) => return Ok(None),
        };
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(format!(
                "the OTLP endpoint {endpoint:?} is not an http:// or https:// URL"
            ));
        }
        let protocol = match either("PROTOCOL") {
            None => Protocol::Protobuf,
            Some((var, v)) => match v.trim() {
                "http/protobuf" => Protocol::Protobuf,
                "http/json" => Protocol::Json,
                other => {
                    return Err(format!(
                        "{var}={other:?}: acode-run exports over OTLP/HTTP only, as \
                         \"http/protobuf\" or \"http/json\" (gRPC is not supported)"
                    ));
                }
            },
        };
        let headers = match either("HEADERS") {
            None => Vec::new(),
            Some((var, v)) => key_values(&v).map_err(|e| format!("{var}: {e}"))?,
        };
        let mut resource = match get("OTEL_RESOURCE_ATTRIBUTES") {
            None => Vec::new(),
            Some(v) => key_values(&v).map_err(|e| format!("OTEL_RESOURCE_ATTRIBUTES: {e}"))?,
        };
        let service = get("OTEL_SERVICE_NAME")
            .map(|s| s.trim().to_string())
            .or_else(|| {
                resource
                    .iter()
                    .find(|(k, _)| k == "service.name")
                    .map(|(_, v)| v.clone())
            })
            .unwrap_or_else(|| SCOPE.to_string());
        resource.retain(|(k, _)| k != "service.name");
        resource.insert(0, ("service.name".to_string(), service));
        let timeout = match either("TIMEOUT") {
            None => Duration::from_secs(10),
            Some((var, v)) => match v.trim().parse::<u64>() {
                Ok(ms) if ms > 0 => Duration::from_millis(ms.min(600_000)),
                _ => return Err(format!("{var}={v:?}: expected milliseconds, such as 10000")),
            },
        };
        let certificate = either("CERTIFICATE").map(|(_, v)| PathBuf::from(v.trim()));
        Ok(Some(OtelConfig {
            endpoint,
            protocol,
            headers,
            resource,
            timeout,
            certificate,
        }))
    }
}

/// `k1=v1,k2=v2` with percent-encoded values (the W3C Baggage form the OTLP variables use).
fn key_values(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((k, v)) = pair.split_once('=') else {
            return Err(format!("{pair:?} is not key=value"));
        };
        let k = percent_decode(k.trim())?;
        if k.is_empty() {
            return Err(format!("{pair:?} has an empty key"));
        }
        out.push((k, percent_decode(v.trim())?));
    }
    Ok(out)
}

fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("{s:?} has a malformed %-escape"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{s:?} is not UTF-8 once decoded"))
}

/// The W3C trace context a run belongs to: its trace id, the caller's span (from an inbound
/// `TRACEPARENT`) and whether the caller sampled it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// The trace: the caller's, or a new one.
    pub trace_id: [u8; 16],
    /// The caller's span, the parent of the run's root span.
    pub parent: Option<[u8; 8]>,
    /// The trace flags (`01`: sampled).
    pub flags: u8,
    /// The caller's `TRACESTATE`, passed on unchanged.
    pub trace_state: String,
    /// Whether this run exports spans: commands then see their own span as parent; otherwise they
    /// see the caller's `TRACEPARENT` unchanged.
    pub exporting: bool,
}

impl TraceContext {
    /// The context of a run: from `traceparent` when it is a valid W3C `traceparent` (version
    /// `00`), else a new trace (sampled) when exporting, else none.
    pub fn for_run(
        traceparent: Option<&str>,
        tracestate: Option<&str>,
        exporting: bool,
    ) -> Option<TraceContext> {
        let inbound = traceparent.and_then(parse_traceparent);
        let trace_state = tracestate.unwrap_or_default().trim().to_string();
        match inbound {
            Some((trace_id, parent, flags)) => Some(TraceContext {
                trace_id,
                parent: Some(parent),
                flags,
                trace_state,
                exporting,
            }),
            None if exporting => Some(TraceContext {
                trace_id: random_bytes(),
                parent: None,
                flags: 1,
                trace_state: String::new(),
                exporting,
            }),
            None => None,
        }
    }

    /// The `TRACEPARENT` a command started by tool call `call` of run `run_id` (its step, turn
    /// and id) sees on its `attempt`: its own tool span when exporting, else the caller's span.
    pub fn for_call(&self, run_id: &str, call: CallRef, attempt: u32) -> String {
        let span = if self.exporting {
            call_span_id(run_id, call, attempt)
        } else {
            self.parent.unwrap_or_default()
        };
        traceparent(&self.trace_id, &span, self.flags)
    }
}

/// `00-TRACE-SPAN-FLAGS`.
pub fn traceparent(trace_id: &[u8; 16], span_id: &[u8; 8], flags: u8) -> String {
    format!("00-{}-{}-{flags:02x}", hex(trace_id), hex(span_id))
}

/// A W3C `traceparent` of version 00: trace id, parent span id, flags; `None` when malformed or
/// all-zero (the specification's invalid ids).
pub fn parse_traceparent(text: &str) -> Option<([u8; 16], [u8; 8], u8)> {
    let parts: Vec<&str> = text.trim().split('-').collect();
    let [version, trace, span, flags] = parts.as_slice() else {
        return None;
    };
    if *version != "00" || trace.len() != 32 || span.len() != 16 || flags.len() != 2 {
        return None;
    }
    let lower = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if !(lower(trace) && lower(span) && lower(flags)) {
        return None;
    }
    let mut trace_id = [0u8; 16];
    let mut span_id = [0u8; 8];
    for (i, b) in trace_id.iter_mut().enumerate() {
        *b = u8::from_str_radix(&trace[2 * i..2 * i + 2], 16).ok()?;
    }
    for (i, b) in span_id.iter_mut().enumerate() {
        *b = u8::from_str_radix(&span[2 * i..2 * i + 2], 16).ok()?;
    }
    if trace_id == [0; 16] || span_id == [0; 8] {
        return None;
    }
    Some((trace_id, span_id, u8::from_str_radix(flags, 16).ok()?))
}

/// What names a tool call within a run: its step, the agent turn that asked for it (models reuse
/// call ids from one answer to the next), and its id.
#[derive(Debug, Clone, Copy)]
pub struct CallRef<'a> {
    /// The step.
    pub step_id: &'a str,
    /// The agent turn, if a model asked for the call.
    pub turn: Option<u32>,
    /// The call's id.
    pub call_id: &'a str,
}

/// The span id of a tool call's attempt, derived from what names it, so the executor (which puts
/// it in the command's `TRACEPARENT`) and the sink (which reports the span) agree without
/// talking to each other.
pub fn call_span_id(run_id: &str, call: CallRef, attempt: u32) -> [u8; 8] {
    let mut material = Vec::new();
    for part in [run_id, call.step_id, call.call_id] {
        material.extend_from_slice(&(part.len() as u64).to_be_bytes());
        material.extend_from_slice(part.as_bytes());
    }
    material.extend_from_slice(&call.turn.map_or(0, |t| t + 1).to_be_bytes());
    material.extend_from_slice(&attempt.to_be_bytes());
    let digest = crate::util::sha256_hex(&material);
    let mut id = [0u8; 8];
    for (i, b) in id.iter_mut().enumerate() {
        *b = u8::from_str_radix(&digest[2 * i..2 * i + 2], 16).unwrap_or(1);
    }
    if id == [0; 8] {
        id[7] = 1;
    }
    id
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    let mut filled = 0;
    while filled < N {
        let r = uuid::Uuid::new_v4();
        let b = r.as_bytes();
        let n = (N - filled).min(16);
        out[filled..filled + n].copy_from_slice(&b[..n]);
        filled += n;
    }
    if out.iter().all(|b| *b == 0) {
        out[N - 1] = 1;
    }
    out
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
        ..KeyValue::default()
    }
}

fn s(key: &str, value: impl Into<String>) -> KeyValue {
    kv(key, any_value::Value::StringValue(value.into()))
}

fn i(key: &str, value: i64) -> KeyValue {
    kv(key, any_value::Value::IntValue(value))
}

fn f(key: &str, value: f64) -> KeyValue {
    kv(key, any_value::Value::DoubleValue(value))
}

fn b(key: &str, value: bool) -> KeyValue {
    kv(key, any_value::Value::BoolValue(value))
}

/// What the run's sink knows besides its events: the approval, the model server, the policy's
/// word on content.
#[derive(Debug, Clone, Default)]
pub struct RunFacts {
    /// Who approved the plan (the verified principal when signed).
    pub approved_by: Option<String>,
    /// `verified`, `unchecked` or `none`.
    pub approval_signature: Option<String>,
    /// The policy hash the approval is bound to.
    pub policy_sha256: Option<String>,
    /// `gen_ai.provider.name` of model calls (`openai`, `ollama`, `anthropic`).
    pub provider: Option<String>,
    /// The model server's URL (`server.address`, `server.port` come from it).
    pub llm_url: Option<String>,
    /// The policy's `telemetry.export_content`.
    pub export_content: bool,
}

/// A span being built.
struct Open {
    span: Span,
    /// Only with `export_content`: the call's arguments, kept until its result.
    arguments: Option<String>,
}

/// Spans open and finished, under one lock (events arrive one at a time anyway).
#[derive(Default)]
struct State {
    run_id: String,
    root: Option<Span>,
    steps: HashMap<String, Span>,
    calls: HashMap<(String, String), Open>,
    /// Finished spans not yet handed to the exporter.
    done: Vec<Span>,
    /// Finished tool spans waiting for their result text (`export_content` only).
    awaiting: HashMap<(String, String), Span>,
    database: Option<PathBuf>,
}

/// Turns a run's events into spans and hands them to the exporter (see the module docs).
pub struct OtelSink {
    state: Mutex<State>,
    trace: TraceContext,
    facts: RunFacts,
    redactor: Arc<Redactor>,
    exporter: Exporter,
}

/// Spans handed to the exporter at once during the run (the rest go at the end).
const BATCH: usize = 256;

impl OtelSink {
    /// A sink for one run in `trace`, exporting through `exporter`, redacting with `redactor`.
    pub fn new(
        trace: TraceContext,
        facts: RunFacts,
        redactor: Arc<Redactor>,
        exporter: Exporter,
    ) -> OtelSink {
        OtelSink {
            state: Mutex::new(State::default()),
            trace,
            facts,
            redactor,
            exporter,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn start(&self, name: String, kind: span::SpanKind, parent: Option<&[u8]>) -> Span {
        let parent_span_id = match parent {
            Some(p) => p.to_vec(),
            None => self.trace.parent.map(|p| p.to_vec()).unwrap_or_default(),
        };
        Span {
            trace_id: self.trace.trace_id.to_vec(),
            span_id: random_bytes::<8>().to_vec(),
            trace_state: self.trace.trace_state.clone(),
            parent_span_id,
            flags: u32::from(self.trace.flags) | 0x100,
            name: self.redactor.redact(&name).into_owned(),
            kind: kind as i32,
            start_time_unix_nano: now_ns(),
            ..Span::default()
        }
    }

    /// `text`, redacted and cut to [`CONTENT_CHARS`], for a content attribute.
    fn content(&self, text: &str) -> String {
        let red = self.redactor.redact(text);
        crate::util::cut_at_char_boundary(&red, CONTENT_CHARS).to_string()
    }

    /// The run's root span, opened with what the run is and how it is confined.
    fn on_run_started(&self, st: &mut State, event: &Event) {
        let EventKind::RunStarted {
            plan_id,
            plan_sha256,
            sandbox,
            database,
            resumed_from,
            steps,
            ..
        } = &event.kind
        else {
            return;
        };
        st.run_id = event.run_id.clone();
        st.database = database.as_ref().map(PathBuf::from);
        let mut root = self.start(
            format!("invoke_workflow {plan_id}"),
            span::SpanKind::Internal,
            None,
        );
        root.attributes.extend([
            s("gen_ai.operation.name", "invoke_workflow"),
            s("gen_ai.workflow.name", self.redactor.redact(plan_id)),
            s("acode.run.id", event.run_id.clone()),
            s("acode.plan.id", self.redactor.redact(plan_id)),
            s("acode.plan.sha256", plan_sha256.clone()),
            i("acode.plan.steps", *steps as i64),
            s("acode.sandbox.mode", sandbox.mode.clone()),
            s("acode.sandbox.requested", sandbox.requested.clone()),
        ]);
        if let Some(abi) = sandbox.landlock_abi {
            root.attributes
                .push(i("acode.sandbox.landlock_abi", i64::from(abi)));
        }
        if let Some(from) = resumed_from {
            root.attributes
                .push(s("acode.run.resumed_from", from.clone()));
        }
        if let Some(by) = &self.facts.approved_by {
            root.attributes
                .push(s("acode.approval.by", self.redactor.redact(by)));
        }
        if let Some(sig) = &self.facts.approval_signature {
            root.attributes
                .push(s("acode.approval.signature", sig.clone()));
        }
        if let Some(p) = &self.facts.policy_sha256 {
            root.attributes.push(s("acode.policy.sha256", p.clone()));
        }
        st.root = Some(root);
    }

    /// A tool call's span (an MCP server's `tools/call` or `execute_tool`), open until its result.
    fn on_tool_call(&self, st: &mut State, event: &Event) {
        let EventKind::ToolCall {
            step_id,
            call_id,
            tool,
            arguments,
            attempt,
            turn,
            server,
        } = &event.kind
        else {
            return;
        };
        let parent = st.steps.get(step_id).map(|s| s.span_id.clone());
        let mut span = match server {
            Some(server) => {
                let short = tool
                    .strip_prefix(&format!("mcp__{server}__"))
                    .unwrap_or(tool);
                let mut span = self.start(
                    format!("tools/call {short}"),
                    span::SpanKind::Client,
                    parent.as_deref(),
                );
                span.attributes.extend([
                    s("mcp.method.name", "tools/call"),
                    s("gen_ai.tool.name", short.to_string()),
                    s("acode.mcp.server", server.clone()),
                ]);
                span
            }
            None => {
                let mut span = self.start(
                    format!("execute_tool {tool}"),
                    span::SpanKind::Internal,
                    parent.as_deref(),
                );
                span.attributes.push(s("gen_ai.tool.name", tool.clone()));
                span
            }
        };
        let call = CallRef {
            step_id,
            turn: *turn,
            call_id,
        };
        span.span_id = call_span_id(&event.run_id, call, *attempt).to_vec();
        span.attributes.extend([
            s("gen_ai.operation.name", "execute_tool"),
            s("gen_ai.tool.type", "function"),
            s("gen_ai.tool.call.id", self.redactor.redact(call_id)),
            i("acode.attempt", i64::from(*attempt)),
        ]);
        if let Some(t) = turn {
            span.attributes.push(i("acode.turn", i64::from(*t)));
        }
        let arguments = self.facts.export_content.then(|| {
            let v = self.redactor.redact_value(arguments);
            self.content(&v.to_string())
        });
        st.calls
            .insert((step_id.clone(), call_id.clone()), Open { span, arguments });
    }

    /// A network request as an event on the call that made it (the last one open in its step).
    fn on_network_request(&self, st: &mut State, event: &Event) {
        let EventKind::NetworkRequest {
            step_id, request, ..
        } = &event.kind
        else {
            return;
        };
        // On the call that made it (the last one open in the step).
        let when = now_ns();
        if let Some(open) = st
            .calls
            .iter_mut()
            .filter(|((s, _), _)| s == step_id)
            .map(|(_, o)| o)
            .max_by_key(|o| o.span.start_time_unix_nano)
        {
            let v = serde_json::to_value(request).unwrap_or_default();
            let mut attrs = vec![];
            for key in ["host", "port", "allowed", "status", "reason"] {
                match v.get(key) {
                    Some(Value::String(t)) => {
                        attrs.push(s(&format!("acode.network.{key}"), self.redactor.redact(t)))
                    }
                    Some(Value::Number(n)) => {
                        attrs.push(i(&format!("acode.network.{key}"), n.as_i64().unwrap_or(0)))
                    }
                    Some(Value::Bool(x)) => attrs.push(b(&format!("acode.network.{key}"), *x)),
                    _ => {}
                }
            }
            open.span.events.push(span::Event {
                time_unix_nano: when,
                name: "acode.network_request".to_string(),
                attributes: attrs,
                dropped_attributes_count: 0,
            });
        }
    }

    /// Ends a tool call's span with its outcome (or leaves it waiting for its result text).
    fn on_tool_result(&self, st: &mut State, event: &Event) {
        let EventKind::ToolResult {
            step_id,
            call_id,
            execution_id,
            success,
            exit_code,
            error_code,
            error,
            ..
        } = &event.kind
        else {
            return;
        };
        if let Some(open) = st.calls.remove(&(step_id.clone(), call_id.clone())) {
            let mut span = open.span;
            span.end_time_unix_nano = now_ns();
            span.attributes
                .push(s("acode.execution_id", execution_id.clone()));
            if let Some(code) = exit_code {
                span.attributes.push(i("acode.exit_code", i64::from(*code)));
            }
            if let Some(args) = open.arguments {
                span.attributes.push(s("gen_ai.tool.call.arguments", args));
            }
            if !success {
                let kind = error_code.clone().unwrap_or_else(|| "tool_failed".into());
                span.attributes.push(s("error.type", kind));
                span.status = Some(Status {
                    message: self
                        .redactor
                        .redact(error.as_deref().unwrap_or(""))
                        .into_owned(),
                    code: status::StatusCode::Error as i32,
                });
            }
            if self.facts.export_content {
                st.awaiting.insert((step_id.clone(), call_id.clone()), span);
            } else {
                st.done.push(span);
            }
        }
    }

    /// A model turn's `chat` span, timed backwards from now by its duration.
    fn on_llm_turn(&self, st: &mut State, event: &Event) {
        let EventKind::LlmTurn {
            step_id,
            turn,
            execution_id,
            prompt_tokens,
            completion_tokens,
            finish_reason,
            model,
            duration_ms,
            ..
        } = &event.kind
        else {
            return;
        };
        let parent = st.steps.get(step_id).map(|s| s.span_id.clone());
        let end = now_ns();
        let model = model.clone().unwrap_or_default();
        let mut span = self.start(
            format!("chat {model}").trim().to_string(),
            span::SpanKind::Client,
            parent.as_deref(),
        );
        span.start_time_unix_nano =
            end.saturating_sub(duration_ms.unwrap_or(0).saturating_mul(1_000_000));
        span.end_time_unix_nano = end;
        span.attributes.extend([
            s("gen_ai.operation.name", "chat"),
            s(
                "gen_ai.provider.name",
                self.facts
                    .provider
                    .clone()
                    .unwrap_or_else(|| "openai".into()),
            ),
            s("gen_ai.request.model", model.clone()),
            i("gen_ai.usage.input_tokens", *prompt_tokens as i64),
            i("gen_ai.usage.output_tokens", *completion_tokens as i64),
            i("acode.turn", i64::from(*turn)),
            s("acode.execution_id", execution_id.clone()),
        ]);
        if let Some(reason) = finish_reason {
            span.attributes.push(kv(
                "gen_ai.response.finish_reasons",
                any_value::Value::ArrayValue(opentelemetry_proto::tonic::common::v1::ArrayValue {
                    values: vec![AnyValue {
                        value: Some(any_value::Value::StringValue(reason.clone())),
                    }],
                }),
            ));
        }
        if let Some((host, port)) = self.facts.llm_url.as_deref().and_then(host_port) {
            span.attributes.push(s("server.address", host));
            span.attributes.push(i("server.port", i64::from(port)));
        }
        if self.facts.export_content
            && let Some(db) = &st.database
        {
            for (artifact, key) in [
                ("prompt", "gen_ai.input.messages"),
                ("response", "gen_ai.output.messages"),
            ] {
                if let Some(text) = read_artifact(db, execution_id, artifact) {
                    span.attributes
                        .push(s(key, self.content(&messages(&text, artifact))));
                }
            }
        }
        st.done.push(span);
    }

    /// Ends whatever is still open, then the root span with the run's outcome.
    fn on_run_finished(&self, st: &mut State, event: &Event) {
        let EventKind::RunFinished {
            status,
            exit_code,
            violations,
            ..
        } = &event.kind
        else {
            return;
        };
        // Whatever is still open ends with the run.
        let end = now_ns();
        let mut open: Vec<Span> = st.calls.drain().map(|(_, o)| o.span).collect();
        open.extend(st.steps.drain().map(|(_, s)| s));
        let waiting: Vec<Span> = st.awaiting.drain().map(|(_, s)| s).collect();
        st.done.extend(waiting);
        for mut span in open {
            span.end_time_unix_nano = end;
            st.done.push(span);
        }
        if let Some(mut root) = st.root.take() {
            root.end_time_unix_nano = end;
            root.attributes.extend([
                s("acode.run.status", status.clone()),
                i("acode.exit_code", i64::from(*exit_code)),
                i("acode.sandbox.violations", *violations as i64),
            ]);
            if *exit_code != 0 {
                root.attributes
                    .push(s("error.type", format!("exit {exit_code}")));
                root.status = Some(Status {
                    message: format!("run {status}, exit code {exit_code}"),
                    code: status::StatusCode::Error as i32,
                });
            }
            st.done.push(root);
        }
    }

    /// Records `event` (see the module docs for the span of each).
    pub fn write_event(&self, event: &Event) {
        let mut st = self.lock();
        match &event.kind {
            EventKind::RunStarted { .. } => self.on_run_started(&mut st, event),
            EventKind::StepStarted { step_id, tool, .. } => {
                let parent = st.root.as_ref().map(|r| r.span_id.clone());
                let agent = tool == crate::tools::agent::NAME;
                let name = if agent {
                    format!("invoke_agent {step_id}")
                } else {
                    format!("step {step_id}")
                };
                let mut span = self.start(name, span::SpanKind::Internal, parent.as_deref());
                span.attributes.extend([
                    s("acode.step.id", self.redactor.redact(step_id)),
                    s("acode.step.tool", tool.clone()),
                ]);
                if agent {
                    span.attributes.extend([
                        s("gen_ai.operation.name", "invoke_agent"),
                        s("gen_ai.agent.name", self.redactor.redact(step_id)),
                    ]);
                    if let Some(p) = &self.facts.provider {
                        span.attributes.push(s("gen_ai.provider.name", p.clone()));
                    }
                }
                st.steps.insert(step_id.clone(), span);
            }
            EventKind::ToolCall { .. } => self.on_tool_call(&mut st, event),
            EventKind::NetworkRequest { .. } => self.on_network_request(&mut st, event),
            EventKind::ToolResult { .. } => self.on_tool_result(&mut st, event),
            EventKind::LlmTurn { .. } => self.on_llm_turn(&mut st, event),
            EventKind::BudgetExhausted {
                step_id,
                budget,
                scope,
                limit,
                used,
                message,
                ..
            } => {
                if let Some(span) = st.steps.get_mut(step_id) {
                    span.events.push(span::Event {
                        time_unix_nano: now_ns(),
                        name: "acode.budget_exhausted".to_string(),
                        attributes: vec![
                            s("acode.budget.kind", budget.clone()),
                            s("acode.budget.scope", scope.clone()),
                            f("acode.budget.limit", *limit),
                            f("acode.budget.used", *used),
                            s("acode.budget.message", self.redactor.redact(message)),
                        ],
                        dropped_attributes_count: 0,
                    });
                }
            }
            EventKind::RetryScheduled {
                step_id,
                tool,
                attempt,
                reason,
                ..
            } => {
                if let Some(span) = st.steps.get_mut(step_id) {
                    span.events.push(span::Event {
                        time_unix_nano: now_ns(),
                        name: "acode.retry".to_string(),
                        attributes: vec![
                            s("acode.retry.of", tool.clone()),
                            i("acode.attempt", i64::from(*attempt)),
                            s("acode.retry.reason", self.redactor.redact(reason)),
                        ],
                        dropped_attributes_count: 0,
                    });
                }
            }
            EventKind::StepCompleted { step_id, .. } => {
                if let Some(mut span) = st.steps.remove(step_id) {
                    span.end_time_unix_nano = now_ns();
                    span.attributes.push(s("acode.step.status", "completed"));
                    st.done.push(span);
                }
            }
            EventKind::StepFailed {
                step_id,
                error_code,
                error,
                tolerated,
                ..
            } => {
                if let Some(mut span) = st.steps.remove(step_id) {
                    span.end_time_unix_nano = now_ns();
                    span.attributes.extend([
                        s("acode.step.status", "failed"),
                        s("error.type", error_code.clone()),
                    ]);
                    if *tolerated {
                        span.attributes.push(b("acode.step.tolerated", true));
                    }
                    span.status = Some(Status {
                        message: self.redactor.redact(error).into_owned(),
                        code: status::StatusCode::Error as i32,
                    });
                    st.done.push(span);
                }
            }
            EventKind::StepBlocked {
                step_id,
                status,
                blocked_by,
            } => {
                let parent = st.root.as_ref().map(|r| r.span_id.clone());
                let mut span = self.start(
                    format!("step {step_id}"),
                    span::SpanKind::Internal,
                    parent.as_deref(),
                );
                span.end_time_unix_nano = span.start_time_unix_nano;
                span.attributes.extend([
                    s("acode.step.id", self.redactor.redact(step_id)),
                    s("acode.step.status", status.clone()),
                ]);
                if let Some(by) = blocked_by {
                    span.attributes
                        .push(s("acode.step.blocked_by", self.redactor.redact(by)));
                }
                st.done.push(span);
            }
            EventKind::RunFinished { .. } => self.on_run_finished(&mut st, event),
            _ => {}
        }
        if st.done.len() >= BATCH {
            let batch = std::mem::take(&mut st.done);
            self.exporter.send(batch);
        }
    }

    /// Attaches a tool call's result text to its span (only with `export_content`): the typed
    /// callback that carries it arrives after the `tool_result` event, which left the span
    /// waiting for it.
    pub fn tool_result_content(&self, step_id: &str, call_id: &str, content: &str) {
        if !self.facts.export_content {
            return;
        }
        let text = self.content(content);
        let mut st = self.lock();
        if let Some(mut span) = st
            .awaiting
            .remove(&(step_id.to_string(), call_id.to_string()))
        {
            span.attributes.push(s("gen_ai.tool.call.result", text));
            st.done.push(span);
        }
    }

    /// Hands the spans left to the exporter and waits for it, at most the configured timeout;
    /// returns what the export came to.
    pub fn finish(&self) -> Stats {
        let batch = std::mem::take(&mut self.lock().done);
        if !batch.is_empty() {
            self.exporter.send(batch);
        }
        self.exporter.finish()
    }
}

/// Host and port of a URL (`http://127.0.0.1:11434/v1` → `127.0.0.1`, 11434).
fn host_port(url: &str) -> Option<(String, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit('@').next()?;
    let default = if scheme == "https" { 443 } else { 80 };
    if let Some(v6) = authority.strip_prefix('[') {
        let (host, tail) = v6.split_once(']')?;
        let port = tail
            .strip_prefix(':')
            .and_then(|p| p.parse().ok())
            .unwrap_or(default);
        return Some((host.to_string(), port));
    }
    match authority.rsplit_once(':') {
        Some((h, p)) => Some((h.to_string(), p.parse().ok()?)),
        None => Some((authority.to_string(), default)),
    }
}

/// A recorded artifact of `execution_id` (already redacted when it was recorded), read from the
/// run's database file.
fn read_artifact(db: &std::path::Path, execution_id: &str, kind: &str) -> Option<String> {
    let conn = rusqlite::Connection::open_with_flags(
        db,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .ok()?;
    conn.query_row(
        "SELECT content FROM artifacts WHERE execution_id = ?1 AND artifact_type = ?2",
        [execution_id, kind],
        |r| r.get::<_, String>(0),
    )
    .ok()
}

/// The GenAI conventions' message form (`[{role, parts: [{type: text, content}]}]`) of a recorded
/// request body (`prompt`: its `messages`) or answer (`response`: its `choices[].message`, or
/// Anthropic's `content`); the text as one part when it has neither shape.
fn messages(body: &str, artifact: &str) -> String {
    let Ok(v) = serde_json::from_str::<Value>(body) else {
        return serde_json::json!([{"role": if artifact == "prompt" { "user" } else { "assistant" },
            "parts": [{"type": "text", "content": body}]}])
        .to_string();
    };
    let part = |m: &Value| -> Value {
        let mut parts = Vec::new();
        match m.get("content") {
            Some(Value::String(t)) => parts.push(serde_json::json!({"type": "text", "content": t})),
            Some(Value::Array(items)) => {
                for item in items {
                    match item.get("text").and_then(Value::as_str) {
                        Some(t) => parts.push(serde_json::json!({"type": "text", "content": t})),
                        None => parts
                            .push(serde_json::json!({"type": "text", "content": item.to_string()})),
                    }
                }
            }
            _ => {}
        }
        if let Some(Value::Array(calls)) = m.get("tool_calls") {
            for c in calls {
                parts.push(serde_json::json!({"type": "tool_call",
                    "id": c.get("id").cloned().unwrap_or(Value::Null),
                    "name": c.pointer("/function/name").cloned().unwrap_or(Value::Null),
                    "arguments": c.pointer("/function/arguments").cloned().unwrap_or(Value::Null)}));
            }
        }
        serde_json::json!({
            "role": m.get("role").and_then(Value::as_str).unwrap_or("assistant"),
            "parts": parts,
        })
    };
    let out: Vec<Value> = if artifact == "prompt" {
        v.get("messages")
            .and_then(Value::as_array)
            .map(|ms| ms.iter().map(part).collect())
            .unwrap_or_default()
    } else if let Some(choices) = v.get("choices").and_then(Value::as_array) {
        choices
            .iter()
            .filter_map(|c| c.get("message"))
            .map(part)
            .collect()
    } else if let Some(m) = v.get("message") {
        vec![part(m)]
    } else {
        vec![part(&v)]
    };
    Value::Array(out).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn the_standard_variables_are_honoured() {
        assert!(OtelConfig::from_env(env(&[])).unwrap().is_none());
        let c = OtelConfig::from_env(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=a%20b,other=1"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment=ci,service.name=ignored",
            ),
            ("OTEL_SERVICE_NAME", "my-runner"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "1500"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(c.endpoint, "http://127.0.0.1:4318/v1/traces");
        assert_eq!(c.protocol, Protocol::Json);
        assert_eq!(c.headers[0], ("x-api-key".into(), "a b".into()));
        assert_eq!(c.resource[0], ("service.name".into(), "my-runner".into()));
        assert!(
            c.resource
                .contains(&("deployment.environment".into(), "ci".into()))
        );
        assert_eq!(c.resource.len(), 2);
        assert_eq!(c.timeout, Duration::from_millis(1500));
        // The trace-specific variables win, and the signal URL is used as given.
        let c = OtelConfig::from_env(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:1"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b:2/custom"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(c.endpoint, "http://b:2/custom");
        assert_eq!(c.protocol, Protocol::Protobuf);
        assert_eq!(c.resource[0], ("service.name".into(), "acode-run".into()));
        // Disabled wins over everything.
        assert!(
            OtelConfig::from_env(env(&[
                ("OTEL_SDK_DISABLED", "TRUE"),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:1"),
            ]))
            .unwrap()
            .is_none()
        );
        for (var, value, needle) in [
            (
                "OTEL_EXPORTER_OTLP_PROTOCOL",
                "grpc",
                "gRPC is not supported",
            ),
            ("OTEL_EXPORTER_OTLP_HEADERS", "novalue", "not key=value"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "k=%zz", "malformed %-escape"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "soon", "milliseconds"),
        ] {
            let e = OtelConfig::from_env(env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:1"),
                (var, value),
            ]))
            .unwrap_err();
            assert!(e.contains(needle) && e.contains(var), "{e}");
        }
        let e = OtelConfig::from_env(env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "a:1")])).unwrap_err();
        assert!(e.contains("not an http"), "{e}");
    }

    #[test]
    fn traceparent_round_trips_and_bad_ones_start_a_new_trace() {
        let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let ctx = TraceContext::for_run(Some(tp), Some("congo=t61"), true).unwrap();
        assert_eq!(hex(&ctx.trace_id), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(
            ctx.parent.map(|p| hex(&p)).as_deref(),
            Some("b7ad6b7169203331")
        );
        assert_eq!(ctx.trace_state, "congo=t61");
        let call = |turn| CallRef {
            step_id: "s",
            turn,
            call_id: "c",
        };
        let child = ctx.for_call("run", call(None), 1);
        let (t, span, flags) = parse_traceparent(&child).unwrap();
        assert_eq!(t, ctx.trace_id);
        assert_eq!(span, call_span_id("run", call(None), 1));
        assert_eq!(flags, 1);
        assert_ne!(
            call_span_id("run", call(None), 1),
            call_span_id("run", call(None), 2)
        );
        // Models reuse call ids from one answer to the next: the turn tells them apart.
        assert_ne!(
            call_span_id("run", call(Some(1)), 1),
            call_span_id("run", call(Some(2)), 1)
        );
        // Not exporting: commands see the caller's span itself.
        let passing = TraceContext::for_run(Some(tp), None, false).unwrap();
        assert_eq!(passing.for_call("run", call(None), 1), tp);
        assert!(TraceContext::for_run(None, None, false).is_none());
        for bad in [
            "",
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad}");
            let fresh = TraceContext::for_run(Some(bad), None, true).unwrap();
            assert!(fresh.parent.is_none());
        }
    }

    #[test]
    fn host_and_port_of_model_urls() {
        assert_eq!(
            host_port("http://127.0.0.1:11434/v1"),
            Some(("127.0.0.1".into(), 11434))
        );
        assert_eq!(
            host_port("https://api.example.test/v1"),
            Some(("api.example.test".into(), 443))
        );
        assert_eq!(host_port("http://[::1]:8/x"), Some(("::1".into(), 8)));
    }

    #[test]
    fn recorded_bodies_become_genai_messages() {
        let prompt = r#"{"model":"m","messages":[{"role":"system","content":"rules"},{"role":"user","content":"hi"}]}"#;
        let v: Value = serde_json::from_str(&messages(prompt, "prompt")).unwrap();
        assert_eq!(v[1]["role"], "user");
        assert_eq!(v[1]["parts"][0]["content"], "hi");
        let answer = r#"{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c1","function":{"name":"file_read","arguments":"{}"}}]}}]}"#;
        let v: Value = serde_json::from_str(&messages(answer, "response")).unwrap();
        assert_eq!(v[0]["parts"][0]["type"], "tool_call");
        assert_eq!(v[0]["parts"][0]["name"], "file_read");
    }
}
