//! A remote MCP server over Streamable HTTP (a policy server with `url`; docs/mcp.md).
//!
//! The [`Transport`] for [`Client`]: every message is its own `POST` to the endpoint; the answer to
//! a request comes back as one JSON object or as an SSE stream (`text/event-stream`) that may carry
//! notifications and server requests before the answer. Each request is read on a thread of its
//! own that hands what arrives to the client's channel, so the client waits exactly as it does for
//! a stdio server (deadline, cancel flag, misbehaviour checks).
//!
//! Both protocol eras: the handshake era (2025-03-26 … 2025-11-25) with its `Mcp-Session-Id`
//! (echoed on every request; a changed id fails the request; `DELETE` at the end), a standalone
//! `GET` stream for the server's own messages (`notifications/tools/list_changed`), and streams
//! resumed with `GET` + `Last-Event-ID` after the server's `retry`; and the stateless revision
//! (2026-07-28: `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` on every request, no session,
//! no resumption, closing the stream is the cancellation).
//!
//! Policy: the host must be allowed by `network.allow` ([`decide`], the proxy's own verdict),
//! checked before any request; each HTTP exchange is recorded as a [`NetworkRequest`] with its
//! status and bytes, as a command's requests are. The runner talks to the server itself (not
//! through the run's proxy, which sees only a TLS tunnel and could record neither the status nor
//! one row per request); the same rules decide. Header values come only from the variables the
//! server's `env` lists and are redacted from every error. No redirect is followed; a 401 fails
//! with a message that OAuth is not supported; a 429/5xx with a short `Retry-After` is retried
//! at most [`MAX_RETRIES`] times within the request's deadline.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::client::{Client, Incoming, McpError, Transport};
use super::{STATELESS_VERSION, sanitize_line};
use crate::error::now_ms;
use crate::net::agent::{Trust, agent};
use crate::policy::network::{Endpoint, HostRule, NetworkRequest, decide};

/// Largest JSON answer, and largest SSE stream read for one request (bytes).
pub const MAX_BODY: usize = 16 * 1024 * 1024;
/// Largest single SSE event (bytes of its lines).
pub const MAX_EVENT: usize = 4 * 1024 * 1024;
/// Bytes of an error answer kept for the message.
const MAX_ERROR_BODY: usize = 64 * 1024;
/// How long a notification or reply `POST` may take.
const NOTIFY_BOUND: Duration = Duration::from_secs(5);
/// How long the closing `DELETE` may take.
const DELETE_BOUND: Duration = Duration::from_secs(3);
/// Retries of a request answered 429/5xx with `Retry-After`.
pub const MAX_RETRIES: u32 = 2;
/// Longest `Retry-After` waited for; a longer one fails the request at once.
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(10);
/// Resumptions of one SSE stream (`GET` + `Last-Event-ID`).
pub const MAX_RESUMES: u32 = 3;
/// Longest SSE `retry` honoured before a resumption (the default when none was given: 1 s).
pub const MAX_SSE_RETRY: Duration = Duration::from_secs(5);
/// How long the standalone `GET` stream stays open before it is opened again.
const LISTEN_BOUND: Duration = Duration::from_secs(3600);
/// Longest wait, when the transport stops, for the reader of the server's own stream to record it.
const LISTENER_END_BOUND: Duration = Duration::from_secs(1);
/// Longest wait, before the first request of a conversation, for the server's own stream to be
/// open (its response headers in); a server that holds them longer is not waited for.
const OPEN_BOUND: Duration = Duration::from_secs(2);
/// Characters of a server's text shown in an error.
const SHOWN: usize = 300;

/// What the conversation's threads share.
struct Shared {
    server: String,
    endpoint: Endpoint,
    /// `allowed by network.allow "entry"`, the reason recorded with each request.
    allowed_by: String,
    headers: Vec<(String, String)>,
    /// Values that must never be shown (the expanded header values and the variables in them).
    secrets: Vec<String>,
    agent: ureq::Agent,
    session: Mutex<Option<String>>,
    version: Mutex<Option<String>>,
    network: Mutex<Vec<NetworkRequest>>,
    stopped: AtomicBool,
    /// The requests whose answer the client still waits for. An answer is handed over once, by
    /// whichever stream brings it first ([`Shared::deliver`]): servers send it on the resumed
    /// stream, but some (the official conformance suite's) on a standalone `GET` stream that
    /// happened to open between the cut stream and its resumption.
    waiting: Mutex<BTreeSet<u64>>,
    /// The stateless revision's `tools/list` requests still unanswered, whose answers are read
    /// for the arguments each tool mirrors into headers ([`super::param_headers`]).
    listing: Mutex<BTreeSet<u64>>,
    /// Tool name → its mirrored arguments, from the latest `tools/list`.
    mirrors: Mutex<std::collections::HashMap<String, Vec<super::param_headers::Mirror>>>,
    /// Warnings for the server's log (a tool left out of `tools/list`), recorded with the call.
    log: Mutex<String>,
    tx: Sender<Incoming>,
}

/// The Streamable HTTP transport of one remote server.
pub struct Http {
    shared: Arc<Shared>,
    listening: bool,
    /// The thread reading the server's own stream, once it is open.
    listener: Option<std::thread::JoinHandle<()>>,
}

/// Connects `Client` to the remote server `name` at `url`: checks the URL and that `rules` (the
/// run's `network.allow`) allow its host — before any request — and expands `headers` from the
/// variables `env` lists; TLS trusts the Mozilla roots and `ca`'s certificates (the server's
/// `ca_cert`). Nothing is sent until the client's handshake.
pub fn connect(
    name: &str,
    url: &str,
    headers: &BTreeMap<String, String>,
    env: &[String],
    rules: &[HostRule],
    ca: Option<&crate::net::agent::CaFile>,
) -> Result<Client, McpError> {
    let refused = |message: String| McpError::NotAllowed {
        server: name.to_string(),
        message,
    };
    let endpoint = Endpoint::parse(url).map_err(|e| refused(format!("url {url:?}: {e}")))?;
    let Some(rule) = decide(rules, &endpoint.host, endpoint.port) else {
        return Err(refused(format!(
            "{} is not allowed by the policy (refused before any request); to allow it, add \
             \"{}\" to network.allow in acode-policy.json (and approve the plan again)",
            endpoint.url,
            endpoint.allow_entry()
        )));
    };
    let mut secrets = Vec::new();
    let mut expanded = Vec::new();
    for (header, value) in headers {
        let value = crate::policy::expand_header(value, |var| {
            if !env.iter().any(|e| e == var) {
                return Err(format!("{var} is not in the server's env list"));
            }
            if crate::redact::is_runner_secret_var(var) {
                return Err(format!("{var} is one of acode-run's own secrets"));
            }
            let v = std::env::var(var).map_err(|_| format!("{var} is not set"))?;
            secrets.push(v.clone());
            Ok(v)
        })
        .map_err(|e| refused(format!("header {header}: {e}")))?;
        secrets.push(value.clone());
        expanded.push((header.clone(), value));
    }
    secrets.retain(|s| !s.is_empty());
    let (tx, rx) = channel();
    let shared = Arc::new(Shared {
        server: name.to_string(),
        allowed_by: format!("allowed by network.allow {:?}", rule.source),
        endpoint,
        headers: expanded,
        secrets,
        agent: agent(
            LISTEN_BOUND,
            &ca.map_or(Trust::WebPki, crate::net::agent::CaFile::trust),
        ),
        session: Mutex::new(None),
        version: Mutex::new(None),
        network: Mutex::new(Vec::new()),
        stopped: AtomicBool::new(false),
        waiting: Mutex::new(BTreeSet::new()),
        listing: Mutex::new(BTreeSet::new()),
        mirrors: Mutex::new(std::collections::HashMap::new()),
        log: Mutex::new(String::new()),
        tx,
    });
    let transport = Http {
        shared,
        listening: false,
        listener: None,
    };
    Ok(Client::over(name, Box::new(transport), rx))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    /// `text` with every secret replaced, sanitised and cut for a message.
    fn shown(&self, text: &str) -> String {
        let mut text = text.to_string();
        for s in &self.secrets {
            text = text.replace(s.as_str(), crate::redact::REDACTED);
        }
        sanitize_line(&text, SHOWN)
    }

    fn failed(&self, method: &str, message: String) -> McpError {
        self.failed_with(method, 0, message)
    }

    fn failed_with(&self, method: &str, status: u16, message: String) -> McpError {
        McpError::Http {
            server: self.server.clone(),
            method: method.to_string(),
            status,
            message,
        }
    }

    /// The request's time ran out in the transport (the client reports it with the time allowed).
    fn timed_out(&self, method: &str) -> McpError {
        McpError::Timeout {
            server: self.server.clone(),
            method: method.to_string(),
            secs: 0.0,
        }
    }

    fn version(&self) -> Option<String> {
        lock(&self.version).clone()
    }

    fn stateless(&self) -> bool {
        self.version().as_deref() == Some(STATELESS_VERSION)
    }

    /// One HTTP exchange recorded as a command's network request is.
    fn record(&self, method: &str, status: u16, up: u64, down: u64, started: (Instant, i64)) {
        lock(&self.network).push(NetworkRequest {
            method: method.to_string(),
            host: self.endpoint.host.to_string(),
            port: self.endpoint.port,
            allowed: true,
            status,
            reason: self.allowed_by.clone(),
            bytes_up: up,
            bytes_down: down,
            started_at: started.1,
            duration_ms: started.0.elapsed().as_millis() as u64,
        });
    }

    /// The headers every request carries: the policy's, the protocol version, the session.
    fn common<B>(&self, mut req: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        for (k, v) in &self.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        if let Some(v) = self.version() {
            req = req.header("MCP-Protocol-Version", v);
        }
        if let Some(s) = lock(&self.session).clone() {
            req = req.header("Mcp-Session-Id", s);
        }
        req
    }

    /// A ureq failure as an error (redacted); a timeout is [`McpError::Timeout`].
    fn transport_error(&self, method: &str, e: ureq::Error, bound: Duration) -> McpError {
        match e {
            ureq::Error::Timeout(_) => McpError::Timeout {
                server: self.server.clone(),
                method: method.to_string(),
                secs: bound.as_secs_f64(),
            },
            other => self.failed(
                method,
                format!(
                    "cannot reach {}: {}",
                    self.endpoint.url,
                    self.shown(&other.to_string())
                ),
            ),
        }
    }

    /// Fails when the answer carries another session id than the one in use.
    fn check_session(
        &self,
        response: &ureq::http::Response<ureq::Body>,
        method: &str,
    ) -> Result<(), McpError> {
        let Some(got) = header(response, "mcp-session-id") else {
            return Ok(());
        };
        let mut session = lock(&self.session);
        match session.as_deref() {
            None if method == "initialize" && !self.stateless() => {
                *session = Some(got);
                Ok(())
            }
            Some(s) if s == got => Ok(()),
            None if self.stateless() => Ok(()),
            Some(s) => Err(self.failed(
                method,
                format!(
                    "the server changed its Mcp-Session-Id from {:?} to {:?} mid-session; a \
                     session is not switched silently (the server is stopped)",
                    self.shown(s),
                    self.shown(&got)
                ),
            )),
            None => Err(self.failed(
                method,
                format!(
                    "the server set an Mcp-Session-Id ({:?}) after initialize; a session starts \
                     with initialize",
                    self.shown(&got)
                ),
            )),
        }
    }

    fn send(&self, message: Incoming) {
        let message = match message {
            Incoming::Message(m) => Incoming::Message(self.read_tool_list(m)),
            other => other,
        };
        let _ = self.tx.send(message);
    }

    /// The answer to one of the stateless revision's `tools/list` requests: each tool's mirrored
    /// arguments noted, and a tool whose `x-mcp-header` marks break the rules left out of the
    /// answer (the client never sees it), with a line in the log saying why.
    fn read_tool_list(&self, mut message: Value) -> Value {
        let Some(id) = message.get("id").and_then(Value::as_u64) else {
            return message;
        };
        if !lock(&self.listing).remove(&id) {
            return message;
        }
        let Some(tools) = message
            .pointer_mut("/result/tools")
            .and_then(Value::as_array_mut)
        else {
            return message;
        };
        let mut mirrors = lock(&self.mirrors);
        tools.retain(|tool| {
            let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
            let schema = tool.get("inputSchema").unwrap_or(&Value::Null);
            match super::param_headers::mirrors(schema) {
                Ok(m) => {
                    mirrors.insert(name.to_string(), m);
                    true
                }
                Err(why) => {
                    mirrors.remove(name);
                    lock(&self.log).push_str(&format!(
                        "acode-run: tool {} left out of tools/list: {}\n",
                        crate::mcp::sanitize_line(name, 80),
                        crate::mcp::sanitize_line(&why, 300)
                    ));
                    false
                }
            }
        });
        message
    }

    /// The `Mcp-Param-*` headers of a `tools/call` of tool `name` with `arguments`.
    fn param_headers(&self, name: &str, arguments: &Value) -> Vec<(String, String)> {
        lock(&self.mirrors)
            .get(name)
            .map(|m| super::param_headers::headers(m, arguments))
            .unwrap_or_default()
    }

    /// Hands the answer to request `id` to the client unless another stream already did.
    fn deliver(&self, id: u64, message: Value) {
        if self.answered(id) {
            self.send(Incoming::Message(message));
        }
    }

    /// Marks request `id` answered: whether it was still waiting (so this answer is the first).
    fn answered(&self, id: u64) -> bool {
        lock(&self.waiting).remove(&id)
    }

    /// Whether request `id` still waits for its answer.
    fn is_waiting(&self, id: u64) -> bool {
        lock(&self.waiting).contains(&id)
    }
}

fn header(response: &ureq::http::Response<ureq::Body>, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// Counts the bytes read through it.
struct Counted<R> {
    inner: R,
    read: u64,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

impl Transport for Http {
    fn send(&mut self, message: &Value, method: &str, deadline: Instant) -> Result<(), McpError> {
        let shared = self.shared.clone();
        let body = message.to_string();
        let request_id = message
            .get("id")
            .and_then(Value::as_u64)
            .filter(|_| message.get("method").is_some());
        let Some(id) = request_id else {
            // A notification or a reply: answered 202 (or an error status) at once.
            if shared.stateless() && method == "notifications/cancelled" {
                // The stateless revision cancels by closing the stream ([`Transport::stop`]).
                return Ok(());
            }
            return post_notification(
                &shared,
                &body,
                method,
                deadline.min(Instant::now() + NOTIFY_BOUND),
            );
        };
        // The server's own messages: the handshake era's standalone GET stream once there is a
        // session; the stateless revision's `subscriptions/listen` once that era is agreed.
        // The first request waits until that stream is open (at most [`OPEN_BOUND`]), so the
        // server knows of it before anything it could send there: a notification sent between
        // the request and a late stream is not lost, and an answer the server sends on the
        // stream that is open has one place to go.
        let stateful = lock(&shared.session).is_some() && !shared.stateless();
        if !self.listening && (stateful || shared.stateless() && method != "server/discover") {
            self.listening = true;
            let listener = shared.clone();
            let (opened, open) = std::sync::mpsc::channel::<()>();
            self.listener = Some(std::thread::spawn(move || {
                if stateful {
                    listen(&listener, opened)
                } else {
                    subscribe(&listener, opened)
                }
            }));
            // Sent nothing: the sender is dropped once the stream is open or refused.
            let _ = open
                .recv_timeout(OPEN_BOUND.min(deadline.saturating_duration_since(Instant::now())));
        }
        let name = message
            .get("params")
            .and_then(|p| p.get("name").or_else(|| p.get("uri")))
            .and_then(Value::as_str)
            .map(str::to_string);
        let method = method.to_string();
        // The stateless revision's headers mirrored from the arguments (SEP-2243).
        let mut extra = Vec::new();
        if shared.stateless() {
            match method.as_str() {
                "tools/list" => {
                    lock(&shared.listing).insert(id);
                }
                "tools/call" => {
                    let arguments = message.pointer("/params/arguments").unwrap_or(&Value::Null);
                    extra = shared.param_headers(name.as_deref().unwrap_or_default(), arguments);
                }
                _ => {}
            }
        }
        lock(&shared.waiting).insert(id);
        std::thread::spawn(move || {
            let target = (name.as_deref(), extra.as_slice());
            if let Err(e) = request(&shared, &body, id, &method, target, deadline) {
                // After the answer came on another stream, this stream's failure is no news.
                if shared.answered(id) {
                    shared.send(Incoming::Failed(id, e));
                }
            }
        });
        Ok(())
    }

    fn stateless_first(&self) -> bool {
        true
    }

    fn set_protocol_version(&mut self, version: Option<&str>) {
        *lock(&self.shared.version) = version.map(str::to_string);
    }

    fn stop(&mut self) {
        if self.shared.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        let session = lock(&self.shared.session).clone();
        if session.is_some() {
            let started = (Instant::now(), now_ms());
            let req = self
                .shared
                .common(self.shared.agent.delete(&self.shared.endpoint.url))
                .config()
                .timeout_global(Some(DELETE_BOUND))
                .build();
            let status = match req.call() {
                Ok(r) => r.status().as_u16(),
                Err(_) => 502,
            };
            self.shared.record("DELETE", status, 0, 0, started);
        }
        // Every connection still open (an SSE stream, the standalone GET) ends now; the stream's
        // reader records it as it ends (bounded: a reader stuck elsewhere is not waited for).
        self.shared.agent.clone().shutdown();
        if let Some(listener) = self.listener.take() {
            let until = Instant::now() + LISTENER_END_BOUND;
            while !listener.is_finished() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    fn gone(&self, method: &str) -> McpError {
        self.shared
            .failed(method, "the connection to the server closed".to_string())
    }

    fn take_network(&mut self) -> Vec<NetworkRequest> {
        std::mem::take(&mut *lock(&self.shared.network))
    }

    fn take_log(&mut self) -> String {
        std::mem::take(&mut *lock(&self.shared.log))
    }
}

impl Drop for Http {
    fn drop(&mut self) {
        self.stop();
    }
}

/// POSTs a notification or a reply and checks it was accepted.
fn post_notification(
    shared: &Shared,
    body: &str,
    method: &str,
    deadline: Instant,
) -> Result<(), McpError> {
    let bound = deadline.saturating_duration_since(Instant::now());
    let started = (Instant::now(), now_ms());
    let req = post_builder(shared, method, None, bound);
    let response = match req.send(body) {
        Ok(r) => r,
        Err(e) => {
            shared.record("POST", 502, body.len() as u64, 0, started);
            return Err(shared.transport_error(method, e, bound));
        }
    };
    let status = response.status().as_u16();
    let (text, down) = read_capped(response.into_body(), MAX_ERROR_BODY);
    shared.record("POST", status, body.len() as u64, down, started);
    if (200..300).contains(&status) {
        return Ok(());
    }
    Err(shared.failed(
        method,
        format!(
            "the server answered HTTP {status} to the notification: {}",
            shared.shown(&text)
        ),
    ))
}

fn post_builder(
    shared: &Shared,
    method: &str,
    name: Option<&str>,
    bound: Duration,
) -> ureq::RequestBuilder<ureq::typestate::WithBody> {
    let mut req = shared
        .common(shared.agent.post(&shared.endpoint.url))
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream");
    if shared.stateless() {
        req = req.header("Mcp-Method", method);
        if let Some(n) = name {
            req = req.header("Mcp-Name", super::param_headers::encode(n));
        }
    }
    req.config().timeout_global(Some(bound)).build()
}

/// Reads at most `cap` bytes of `body` (lossy text) and how many bytes were read; an error ends
/// the text where it happened.
fn read_capped(body: ureq::Body, cap: usize) -> (String, u64) {
    let (text, read, _) = read_body(body, cap);
    (text, read)
}

/// [`read_capped`], with the error that ended the body early, if one did.
fn read_body(body: ureq::Body, cap: usize) -> (String, u64, Option<std::io::Error>) {
    let (bytes, read, error) = read_bytes(body, cap);
    (String::from_utf8_lossy(&bytes).into_owned(), read, error)
}

/// At most `cap` bytes of `body` as they came, how many were read, and the error that ended it
/// early, if one did.
fn read_bytes(body: ureq::Body, cap: usize) -> (Vec<u8>, u64, Option<std::io::Error>) {
    let mut reader = Counted {
        inner: body.into_reader().take(cap as u64),
        read: 0,
    };
    let mut bytes = Vec::new();
    let error = reader.read_to_end(&mut bytes).err();
    (bytes, reader.read, error)
}

/// Whether a read failed because the request's time ran out (ureq wraps its own timeout in an
/// I/O error of kind `Other`).
fn is_timeout(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::TimedOut
        || e.get_ref()
            .and_then(|inner| inner.downcast_ref::<ureq::Error>())
            .is_some_and(|u| matches!(u, ureq::Error::Timeout(_)))
}

/// One request's whole exchange: POST (retried on a short `Retry-After`), then its answer, from
/// JSON or an SSE stream (resumed when the handshake era allows). The messages go to the
/// client's channel; `Err` is handed over as [`Incoming::Failed`].
fn request(
    shared: &Shared,
    body: &str,
    id: u64,
    method: &str,
    (name, extra): (Option<&str>, &[(String, String)]),
    deadline: Instant,
) -> Result<(), McpError> {
    let mut retries = 0;
    loop {
        let bound = deadline.saturating_duration_since(Instant::now());
        let started = (Instant::now(), now_ms());
        let up = body.len() as u64;
        let mut req = post_builder(shared, method, name, bound);
        for (header, value) in extra {
            req = req.header(header.as_str(), value.as_str());
        }
        let response = match req.send(body) {
            Ok(r) => r,
            Err(e) => {
                shared.record("POST", 502, up, 0, started);
                return Err(shared.transport_error(method, e, bound));
            }
        };
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            if let Err(e) = shared.check_session(&response, method) {
                shared.record("POST", status, up, 0, started);
                return Err(e);
            }
            return answer(shared, response, id, method, deadline, up, started);
        }
        let retry_after =
            header(&response, "retry-after").and_then(|v| crate::net::agent::parse_retry_after(&v));
        let location = header(&response, "location");
        let www_auth = header(&response, "www-authenticate");
        let (text, down) = read_capped(response.into_body(), MAX_ERROR_BODY);
        shared.record("POST", status, up, down, started);
        let retryable = status == 429 || status >= 500;
        if let (true, Some(wait)) = (retryable, retry_after)
            && retries < MAX_RETRIES
            && wait <= MAX_RETRY_WAIT
            && Instant::now() + wait < deadline
        {
            retries += 1;
            sleep_unless_stopped(shared, wait);
            continue;
        }
        // A JSON-RPC error in the body is the server's answer (a stateless server refusing
        // `initialize`, an unknown method, a header mismatch): handed over as the answer.
        if let Ok(v) = serde_json::from_str::<Value>(&text)
            && let Some(error) = v.get("error").filter(|e| e.is_object())
            && !(300..400).contains(&status)
            && status != 401
        {
            shared.send(Incoming::Message(
                json!({"jsonrpc": "2.0", "id": id, "error": error}),
            ));
            return Ok(());
        }
        return Err(status_error(
            shared,
            method,
            status,
            &text,
            location,
            www_auth,
            retry_after,
            retries,
        ));
    }
}

/// The error for a non-2xx answer without a JSON-RPC error in it.
#[allow(clippy::too_many_arguments)]
fn status_error(
    shared: &Shared,
    method: &str,
    status: u16,
    text: &str,
    location: Option<String>,
    www_auth: Option<String>,
    retry_after: Option<Duration>,
    retries: u32,
) -> McpError {
    let excerpt = shared.shown(text.trim());
    let message = match status {
        300..=399 => {
            let target = location.unwrap_or_default();
            let other_host = target
                .parse::<ureq::http::Uri>()
                .ok()
                .and_then(|u| u.host().map(str::to_string))
                .and_then(|h| crate::policy::network::canonical_host(&h).ok())
                .is_some_and(|h| h != shared.endpoint.host);
            if other_host {
                format!(
                    "HTTP {status}: a redirect to another host ({}), refused: acode-run follows no \
                     redirect, and the policy allows {} only",
                    shared.shown(&target),
                    shared.endpoint.allow_entry()
                )
            } else {
                format!(
                    "HTTP {status}: a redirect to {}, not followed (acode-run follows no redirect; \
                     put the final URL in mcp.servers.{}.url)",
                    shared.shown(&target),
                    shared.server
                )
            }
        }
        401 => format!(
            "HTTP 401 Unauthorized: the server asks for authorization{}. acode-run does not do \
             OAuth (docs/mcp.md); if the service issues a token, pass it in the server's headers \
             (\"Authorization\": \"Bearer ${{env:NAME}}\", with NAME in its env list)",
            www_auth
                .map(|w| format!(" (WWW-Authenticate: {})", shared.shown(&w)))
                .unwrap_or_default()
        ),
        _ => {
            let retry = match (retry_after, retries) {
                (_, n) if n > 0 => format!(" (after {n} retries)"),
                (Some(w), _) if w > MAX_RETRY_WAIT => format!(
                    " (Retry-After {} s is longer than the {} s acode-run waits)",
                    w.as_secs(),
                    MAX_RETRY_WAIT.as_secs()
                ),
                (Some(_), _) => " (no time left before the deadline to retry)".to_string(),
                (None, _) => String::new(),
            };
            format!("HTTP {status}{retry}: {excerpt}")
        }
    };
    shared.failed_with(method, status, message)
}

fn sleep_unless_stopped(shared: &Shared, wait: Duration) {
    let until = Instant::now() + wait;
    while Instant::now() < until && !shared.stopped.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20).min(until - Instant::now()));
    }
}

/// Reads a 2xx answer to request `id`.
fn answer(
    shared: &Shared,
    response: ureq::http::Response<ureq::Body>,
    id: u64,
    method: &str,
    deadline: Instant,
    up: u64,
    started: (Instant, i64),
) -> Result<(), McpError> {
    let status = response.status().as_u16();
    let kind = header(&response, "content-type")
        .unwrap_or_default()
        .to_ascii_lowercase();
    if kind.starts_with("text/event-stream") {
        let end = read_recorded(
            shared,
            ("POST", status, up, started),
            response,
            Some(id),
            method,
        );
        return match end? {
            SseEnd::Answered(m) => {
                shared.deliver(id, m);
                Ok(())
            }
            SseEnd::Ended { last_id, retry } => {
                resume(shared, id, method, deadline, last_id, retry)
            }
        };
    }
    let (bytes, down, error) = read_bytes(response.into_body(), MAX_BODY + 1);
    let text = String::from_utf8_lossy(&bytes);
    shared.record("POST", status, up, down, started);
    if let Some(e) = error {
        return Err(if is_timeout(&e) {
            shared.timed_out(method)
        } else {
            shared.failed(
                method,
                format!("the answer was cut off: {}", shared.shown(&e.to_string())),
            )
        });
    }
    if text.len() > MAX_BODY {
        return Err(shared.failed(
            method,
            format!("the answer is larger than {MAX_BODY} bytes (the bound); not read further"),
        ));
    }
    if text.trim().is_empty() {
        return Err(shared.failed(
            method,
            format!("the server answered HTTP {status} with no body to a request"),
        ));
    }
    if !kind.starts_with("application/json") {
        return Err(shared.failed(
            method,
            format!(
                "the answer is {:?}, neither application/json nor text/event-stream: {}",
                shared.shown(&kind),
                shared.shown(&text)
            ),
        ));
    }
    shared.answered(id);
    // JSON-RPC is UTF-8: `from_slice` refuses a body that is not (a lossy read would not).
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Array(batch)) => batch
            .into_iter()
            .for_each(|m| shared.send(Incoming::Message(m))),
        Ok(message) => shared.send(Incoming::Message(message)),
        Err(_) => shared.send(Incoming::NotJson(shared.shown(&text))),
    }
    Ok(())
}

/// How an SSE stream ended.
enum SseEnd {
    /// The answer to the request arrived (handed to the client once the exchange is recorded,
    /// so the call's records hold it).
    Answered(Value),
    /// The stream closed first; what a resumption needs.
    Ended {
        last_id: Option<String>,
        retry: Option<Duration>,
    },
}

/// Reads SSE events from `reader`, each event's data one JSON-RPC message handed to the client,
/// until the answer to `id` (when waiting for one), the stream's end, or a bound: an event over
/// [`MAX_EVENT`], a stream over [`MAX_BODY`] (its time is bounded by the request's timeout).
fn read_sse(
    shared: &Shared,
    reader: &mut Counted<impl Read>,
    id: Option<u64>,
    method: &str,
) -> Result<SseEnd, McpError> {
    let mut lines = BufReader::new(reader);
    let mut data = String::new();
    let mut event_bytes = 0usize;
    let mut last_id = None;
    let mut retry = None;
    let mut total = 0usize;
    loop {
        let mut line = Vec::new();
        let n = (&mut lines)
            .take(MAX_EVENT as u64 + 1)
            .read_until(b'\n', &mut line);
        let n = match n {
            Ok(n) => n,
            Err(e) if is_timeout(&e) => return Err(shared.timed_out(method)),
            Err(e) if shared.stopped.load(Ordering::SeqCst) => {
                return Err(shared.failed(method, format!("stopped ({e})")));
            }
            // A reset connection ends the stream like a close does (it may be resumed).
            Err(_) => 0,
        };
        if n == 0 {
            return Ok(SseEnd::Ended { last_id, retry });
        }
        total += n;
        event_bytes += n;
        if event_bytes > MAX_EVENT {
            return Err(shared.failed(
                method,
                format!("an SSE event is larger than {MAX_EVENT} bytes (the bound)"),
            ));
        }
        if total > MAX_BODY {
            return Err(shared.failed(
                method,
                format!(
                    "the SSE stream sent more than {MAX_BODY} bytes without ending (the bound)"
                ),
            ));
        }
        let Ok(text) = std::str::from_utf8(&line) else {
            return Err(shared.failed(
                method,
                format!(
                    "an SSE line that is not UTF-8: {}",
                    shared.shown(&String::from_utf8_lossy(&line))
                ),
            ));
        };
        let text = text.trim_end_matches(['\n', '\r']);
        if text.is_empty() {
            // The end of an event.
            event_bytes = 0;
            if data.is_empty() {
                continue;
            }
            let payload = std::mem::take(&mut data);
            let message = match serde_json::from_str::<Value>(&payload) {
                Ok(m) => m,
                Err(_) => {
                    return Err(shared.failed(
                        method,
                        format!(
                            "an SSE event whose data is not JSON-RPC: {}",
                            shared.shown(&payload)
                        ),
                    ));
                }
            };
            let is_answer = message.get("method").is_none();
            let answers = message.get("id").and_then(Value::as_u64);
            if is_answer && id.is_some() && answers == id {
                return Ok(SseEnd::Answered(message));
            }
            match (is_answer, id, answers) {
                // On a stream of the server's own, the answer to a request still waiting (the
                // spec reserves answers to resumed streams; a server may not) is handed over.
                (true, None, Some(other)) if shared.is_waiting(other) => {
                    shared.deliver(other, message)
                }
                // Any other answer there is the end of a subscription, not the client's.
                (true, None, _) => {}
                _ => shared.send(Incoming::Message(message)),
            }
            continue;
        }
        if text.starts_with(':') {
            continue;
        }
        let (field, value) = match text.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (text, ""),
        };
        match field {
            "data" => {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(value);
            }
            "id" if !value.contains('\0') => last_id = Some(value.to_string()),
            "retry" => {
                if let Ok(ms) = value.trim().parse::<u64>() {
                    retry = Some(Duration::from_millis(ms));
                }
            }
            _ => {}
        }
    }
}

/// `GET` with `Last-Event-ID` after the server's `retry`, until the answer to `id` arrives, at
/// most [`MAX_RESUMES`] times and within the deadline (handshake era only: the stateless
/// revision has no resumption).
fn resume(
    shared: &Shared,
    id: u64,
    method: &str,
    deadline: Instant,
    mut last_id: Option<String>,
    mut retry: Option<Duration>,
) -> Result<(), McpError> {
    for _ in 0..MAX_RESUMES {
        let Some(event_id) = last_id.clone().filter(|_| !shared.stateless()) else {
            break;
        };
        let wait = retry.unwrap_or(Duration::from_secs(1)).min(MAX_SSE_RETRY);
        if Instant::now() + wait >= deadline {
            break;
        }
        sleep_unless_stopped(shared, wait);
        if !shared.is_waiting(id) {
            // The answer came on the standalone stream meanwhile.
            return Ok(());
        }
        let bound = deadline.saturating_duration_since(Instant::now());
        let (response, started) = match open_stream(shared, Some(&event_id), bound) {
            Ok(opened) => opened,
            Err(Ok(status)) => {
                return Err(shared.failed(
                    method,
                    format!(
                        "the event stream ended before the answer, and resuming it (GET with \
                         Last-Event-ID) was answered HTTP {status}"
                    ),
                ));
            }
            Err(Err(e)) => return Err(shared.transport_error(method, e, bound)),
        };
        shared.check_session(&response, method)?;
        let status = response.status().as_u16();
        let end = read_recorded(
            shared,
            ("GET", status, 0, started),
            response,
            Some(id),
            method,
        );
        match end? {
            SseEnd::Answered(m) => {
                shared.deliver(id, m);
                return Ok(());
            }
            SseEnd::Ended {
                last_id: l,
                retry: r,
            } => {
                last_id = l.or(last_id);
                retry = r.or(retry);
            }
        }
    }
    Err(shared.failed(
        method,
        "the event stream ended before the answer (and could not be resumed)".to_string(),
    ))
}

/// Opens a `GET` event stream (with `Last-Event-ID` when given), bounded by `bound`: the answer
/// and when the exchange started, when it is an event stream; else the exchange is recorded and
/// `Err(Ok(status))`, or `Err(Err(why))` when the server could not be reached.
#[allow(clippy::type_complexity)]
fn open_stream(
    shared: &Shared,
    last_id: Option<&str>,
    bound: Duration,
) -> Result<(ureq::http::Response<ureq::Body>, (Instant, i64)), Result<u16, ureq::Error>> {
    let started = (Instant::now(), now_ms());
    let mut req = shared
        .common(shared.agent.get(&shared.endpoint.url))
        .header("Accept", "text/event-stream");
    if let Some(l) = last_id {
        req = req.header("Last-Event-ID", l);
    }
    let response = match req.config().timeout_global(Some(bound)).build().call() {
        Ok(r) => r,
        Err(e) => {
            shared.record("GET", 502, 0, 0, started);
            return Err(Err(e));
        }
    };
    let status = response.status().as_u16();
    let is_sse = header(&response, "content-type")
        .is_some_and(|k| k.to_ascii_lowercase().starts_with("text/event-stream"));
    if !(200..300).contains(&status) || !is_sse {
        let (_, down) = read_capped(response.into_body(), MAX_ERROR_BODY);
        shared.record("GET", status, 0, down, started);
        return Err(Ok(status));
    }
    Ok((response, started))
}

/// [`read_sse`] on an event-stream answer, then the exchange recorded (`(method, status, bytes
/// up, started)`) with the bytes read.
fn read_recorded(
    shared: &Shared,
    (verb, status, up, started): (&str, u16, u64, (Instant, i64)),
    response: ureq::http::Response<ureq::Body>,
    id: Option<u64>,
    method: &str,
) -> Result<SseEnd, McpError> {
    let mut reader = Counted {
        inner: response.into_body().into_reader(),
        read: 0,
    };
    let end = read_sse(shared, &mut reader, id, method);
    shared.record(verb, status, up, reader.read, started);
    end
}

/// The JSON-RPC id of the stateless revision's `subscriptions/listen` request (a string, so it
/// can never be one of the client's numbered requests).
const LISTEN_ID: &str = "acode-run-listen";

/// The stateless revision's `subscriptions/listen` (tool list changes only), open until the
/// transport stops: its `notifications/tools/list_changed` go to the client as the GET stream's
/// do. A server that refuses it, or answers with JSON, simply has no such stream. `opened` is
/// dropped once the server has answered (or could not be reached).
fn subscribe(shared: &Shared, opened: std::sync::mpsc::Sender<()>) {
    let body = json!({"jsonrpc": "2.0", "id": LISTEN_ID, "method": "subscriptions/listen",
        "params": {"_meta": super::client::stateless_meta(),
                   "notifications": {"toolsListChanged": true}}})
    .to_string();
    let started = (Instant::now(), now_ms());
    let up = body.len() as u64;
    let response =
        match post_builder(shared, "subscriptions/listen", None, LISTEN_BOUND).send(&body) {
            Ok(r) => r,
            Err(_) => {
                shared.record("POST", 502, up, 0, started);
                return;
            }
        };
    drop(opened);
    let status = response.status().as_u16();
    let is_sse = header(&response, "content-type")
        .is_some_and(|k| k.to_ascii_lowercase().starts_with("text/event-stream"));
    if !(200..300).contains(&status) || !is_sse {
        let (_, down) = read_capped(response.into_body(), MAX_ERROR_BODY);
        shared.record("POST", status, up, down, started);
        return;
    }
    let _ = read_recorded(
        shared,
        ("POST", status, up, started),
        response,
        None,
        "subscriptions/listen",
    );
}

/// The handshake era's standalone `GET` stream, where a server sends what is not tied to a
/// request (`notifications/tools/list_changed`, its own requests, refused by the client). A
/// server without one (405) is fine. Reopened when it ends, with `Last-Event-ID`, at most
/// [`MAX_RESUMES`] times in a row without a message; ends when the transport stops. `opened` is
/// dropped once the first opening has its answer.
fn listen(shared: &Shared, opened: std::sync::mpsc::Sender<()>) {
    let mut opened = Some(opened);
    let mut last_id: Option<String> = None;
    let mut retry = None;
    let mut idle = 0;
    while !shared.stopped.load(Ordering::SeqCst) && idle <= MAX_RESUMES {
        let stream = open_stream(shared, last_id.as_deref(), LISTEN_BOUND);
        drop(opened.take());
        let Ok((response, started)) = stream else {
            return;
        };
        let status = response.status().as_u16();
        let end = read_recorded(
            shared,
            ("GET", status, 0, started),
            response,
            None,
            "the standalone GET stream",
        );
        match end {
            Ok(SseEnd::Ended {
                last_id: l,
                retry: r,
            }) => {
                idle = if l.is_some() && l != last_id {
                    0
                } else {
                    idle + 1
                };
                last_id = l.or(last_id);
                retry = r.or(retry);
                sleep_unless_stopped(
                    shared,
                    retry.unwrap_or(Duration::from_secs(1)).min(MAX_SSE_RETRY),
                );
            }
            _ => return,
        }
    }
}
