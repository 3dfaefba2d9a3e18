//! A scripted HTTP server that stands in for an LLM server, so tests (and embedders testing their
//! plans offline) exercise the real client over real sockets without a model (SPEC §7).
//!
//! It binds `127.0.0.1:0`, serves one connection at a time on a thread, answers each request with
//! the next [`ScriptedResponse`], records every request as a [`RecordedRequest`], and stops when
//! dropped. When the script runs out it answers `500` with a body saying so, so a test that makes
//! more calls than it scripted fails loudly. HTTP support is deliberately minimal: a request line,
//! headers and a `Content-Length` body; every answer carries `Connection: close`.
//!
//! Fixture files (`fixtures/llm/*.json`) hold scripts; see [`ScriptedResponse::from_fixture`].
//!
//! ```
//! use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};
//! use acode_run::llm::{self, ChatRequest, LlmConfig, Message};
//!
//! let server = ScriptedServer::start(vec![
//!     ScriptedResponse::chat_tool_calls(&[("file_read", serde_json::json!({"path": "src/lib.rs"}))]),
//!     ScriptedResponse::chat_text("done"),
//! ]);
//! let client = llm::client(LlmConfig::new(server.url(), "test-model"));
//! let first = client.chat(&ChatRequest::new("", vec![Message::user("go")])).unwrap();
//! assert_eq!(first.tool_calls[0].name, "file_read");
//! let second = client.chat(&ChatRequest::new("", vec![Message::user("go")])).unwrap();
//! assert_eq!(second.content.as_deref(), Some("done"));
//! assert_eq!(server.requests()[0].body["model"], "test-model");
//! ```

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use thiserror::Error;

/// Largest request head (request line + headers) accepted.
const MAX_HEAD_BYTES: usize = 1024 * 1024;
/// Largest request body accepted.
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;
/// How long the server waits for a client that connected but does not send.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// One scripted answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptedResponse {
    /// The HTTP status.
    pub status: u16,
    /// Extra headers (`Content-Length` and `Connection` are added by the server).
    pub headers: Vec<(String, String)>,
    /// The body, sent as is (it may be deliberately malformed).
    pub body: String,
    /// Wait this long before answering, to make a client time out.
    pub delay: Duration,
    /// Read the request, then close the connection without answering (a crashed or reset server).
    pub close_without_answer: bool,
}

impl ScriptedResponse {
    /// A JSON answer with `Content-Type: application/json`.
    pub fn json(status: u16, body: Value) -> Self {
        ScriptedResponse {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: body.to_string(),
            delay: Duration::ZERO,
            close_without_answer: false,
        }
    }

    /// A raw text answer (for malformed bodies and plain error pages).
    pub fn text(status: u16, body: impl Into<String>) -> Self {
        ScriptedResponse {
            status,
            headers: vec![("Content-Type".into(), "text/plain".into())],
            body: body.into(),
            delay: Duration::ZERO,
            close_without_answer: false,
        }
    }

    /// Closes the connection after reading the request, without answering.
    pub fn reset() -> Self {
        ScriptedResponse {
            close_without_answer: true,
            ..ScriptedResponse::text(0, "")
        }
    }

    /// An OpenAI-compatible `200` whose message is plain text (a final answer).
    pub fn chat_text(content: &str) -> Self {
        Self::json(
            200,
            json!({
                "object": "chat.completion",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
            }),
        )
    }

    /// An OpenAI-compatible `200` asking for the given `(tool, arguments)` calls, ids `call_<i>`.
    pub fn chat_tool_calls(calls: &[(&str, Value)]) -> Self {
        let tool_calls: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| {
                json!({"id": format!("call_{}", i + 1), "type": "function",
                       "function": {"name": name, "arguments": args.to_string()}})
            })
            .collect();
        Self::json(
            200,
            json!({
                "object": "chat.completion",
                "choices": [{"index": 0, "finish_reason": "tool_calls",
                             "message": {"role": "assistant", "content": null,
                                         "tool_calls": tool_calls}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
            }),
        )
    }

    /// Adds a header (builder style), e.g. `Retry-After`.
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// Delays the answer (builder style).
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Loads a script from a fixture file.
    ///
    /// Format: either a JSON array of responses, or `{"description": "...", "responses": [...]}`.
    /// Each response is an object:
    /// - `status` (default 200);
    /// - `headers` (optional): an object `{"Retry-After": "1"}`;
    /// - `body`: a JSON value sent as JSON, or a string sent verbatim (for malformed bodies);
    /// - `delay_ms` (optional): wait before answering;
    /// - `reset` (optional, `true`): close the connection without answering.
    pub fn from_fixture(path: impl AsRef<Path>) -> Result<Vec<ScriptedResponse>, FixtureError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| FixtureError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_fixture_str(&text).map_err(|message| FixtureError::Invalid {
            path: path.to_path_buf(),
            message,
        })
    }

    /// [`ScriptedResponse::from_fixture`] over the text of a fixture.
    pub fn from_fixture_str(text: &str) -> Result<Vec<ScriptedResponse>, String> {
        let root: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let items = match &root {
            Value::Array(items) => items,
            Value::Object(o) => match o.get("responses") {
                Some(Value::Array(items)) => items,
                _ => return Err("expected a `responses` array".to_string()),
            },
            _ => return Err("expected an array or an object with `responses`".to_string()),
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| fixture_response(item).map_err(|e| format!("response {i}: {e}")))
            .collect()
    }
}

fn fixture_response(item: &Value) -> Result<ScriptedResponse, String> {
    let Value::Object(o) = item else {
        return Err("must be an object".to_string());
    };
    if o.get("reset").and_then(Value::as_bool) == Some(true) {
        return Ok(ScriptedResponse::reset());
    }
    let status = match o.get("status") {
        None => 200,
        Some(v) => v
            .as_u64()
            .filter(|s| (100..=999).contains(s))
            .map(|s| s as u16)
            .ok_or("`status` must be an HTTP status code")?,
    };
    let mut response = match o.get("body") {
        Some(Value::String(s)) => ScriptedResponse::text(status, s.clone()),
        Some(other) => ScriptedResponse::json(status, other.clone()),
        None => ScriptedResponse::text(status, ""),
    };
    match o.get("headers") {
        None | Some(Value::Null) => {}
        Some(Value::Object(h)) => {
            for (name, value) in h {
                let value = value
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| value.to_string());
                // A fixture's Content-Type replaces the default one.
                if name.eq_ignore_ascii_case("content-type") {
                    response
                        .headers
                        .retain(|(n, _)| !n.eq_ignore_ascii_case("content-type"));
                }
                response.headers.push((name.clone(), value));
            }
        }
        Some(_) => return Err("`headers` must be an object".to_string()),
    }
    if let Some(ms) = o.get("delay_ms") {
        let ms = ms.as_u64().ok_or("`delay_ms` must be a whole number")?;
        response.delay = Duration::from_millis(ms);
    }
    Ok(response)
}

/// A fixture file that could not be loaded.
#[derive(Debug, Error)]
pub enum FixtureError {
    /// The file could not be read.
    #[error("cannot read fixture {}: {source}", path.display())]
    Io {
        /// The fixture path.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The file is not a valid script.
    #[error("invalid fixture {}: {message}", path.display())]
    Invalid {
        /// The fixture path.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// A request the server received, for assertions on what the client sent.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// `POST`, ...
    pub method: String,
    /// The request target, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Headers in arrival order, names as sent.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON; `Value::Null` when empty, a JSON string when not JSON.
    pub body: Value,
    /// The body exactly as received (lossily decoded).
    pub raw_body: String,
}

impl RecordedRequest {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

struct Shared {
    script: Mutex<VecDeque<ScriptedResponse>>,
    scripted: usize,
    requests: Mutex<Vec<RecordedRequest>>,
    stop: AtomicBool,
}

/// The running server (see the module docs). Stops and joins its thread on drop.
pub struct ScriptedServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl ScriptedServer {
    /// Starts serving `responses` in order.
    ///
    /// # Panics
    /// If no loopback port can be bound: a broken test environment, not an input error. Use
    /// [`ScriptedServer::try_start`] to handle that case.
    pub fn start(responses: Vec<ScriptedResponse>) -> ScriptedServer {
        match Self::try_start(responses) {
            Ok(server) => server,
            Err(e) => panic!("scripted LLM server: cannot bind 127.0.0.1:0: {e}"),
        }
    }

    /// [`ScriptedServer::start`] that reports a bind failure instead of panicking.
    pub fn try_start(responses: Vec<ScriptedResponse>) -> io::Result<ScriptedServer> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            scripted: responses.len(),
            script: Mutex::new(responses.into()),
            requests: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("scripted-llm".into())
            .spawn(move || serve(listener, &thread_shared))?;
        Ok(ScriptedServer {
            addr,
            shared,
            thread: Some(thread),
        })
    }

    /// Starts a server replaying a fixture file (see [`ScriptedResponse::from_fixture`]).
    pub fn from_fixture(path: impl AsRef<Path>) -> Result<ScriptedServer, FixtureError> {
        let responses = ScriptedResponse::from_fixture(path.as_ref())?;
        Self::try_start(responses).map_err(|source| FixtureError::Io {
            path: path.as_ref().to_path_buf(),
            source,
        })
    }

    /// The base URL to give the client, including `/v1`: `http://127.0.0.1:PORT/v1`.
    pub fn url(&self) -> String {
        format!("{}/v1", self.root_url())
    }

    /// The URL without a path, for Ollama's native API: `http://127.0.0.1:PORT`.
    pub fn root_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    /// How many scripted responses have not been used yet.
    pub fn remaining(&self) -> usize {
        lock(&self.shared.script).len()
    }
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept; the connection is recognised by the stop flag and ignored.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn serve(listener: TcpListener, shared: &Shared) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        match stream {
            Ok(stream) => {
                let _ = handle(stream, shared);
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

fn handle(mut stream: TcpStream, shared: &Shared) -> io::Result<()> {
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    let request = match read_request(&mut stream) {
        Ok(Some(request)) => request,
        Ok(None) => return Ok(()),
        Err(message) => {
            let body = json!({"error": {"message": format!("scripted server: {message}")}});
            return write_response(&mut stream, &ScriptedResponse::json(400, body));
        }
    };
    lock(&shared.requests).push(request);
    let next = lock(&shared.script).pop_front();
    let response = next.unwrap_or_else(|| {
        let n = lock(&shared.requests).len();
        ScriptedResponse::json(
            500,
            json!({"error": {"message": format!(
                "scripted server: script exhausted: request #{n} was not expected (the script had \
                 {} responses)", shared.scripted)}}),
        )
    });
    let deadline = Instant::now() + response.delay;
    while Instant::now() < deadline {
        if shared.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if response.close_without_answer {
        let _ = stream.shutdown(std::net::Shutdown::Both);
        return Ok(());
    }
    write_response(&mut stream, &response)
}

/// Reads one request; `Ok(None)` for a connection closed before sending anything (the wake-up).
fn read_request(stream: &mut TcpStream) -> Result<Option<RecordedRequest>, String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(pos) = find(&buf, b"\r\n\r\n") {
            break pos;
        }
        if buf.len() > MAX_HEAD_BYTES {
            return Err("request head too large".to_string());
        }
        let n = stream.read(&mut chunk).map_err(|e| e.to_string())?;
        if n == 0 {
            return if buf.is_empty() {
                Ok(None)
            } else {
                Err("connection closed inside the request head".to_string())
            };
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    if method.is_empty() || path.is_empty() {
        return Err(format!("bad request line '{request_line}'"));
    }
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    if header("transfer-encoding").is_some() {
        return Err("chunked request bodies are not supported".to_string());
    }
    let length: usize = match header("content-length") {
        None => 0,
        Some(v) => v.parse().map_err(|_| format!("bad Content-Length '{v}'"))?,
    };
    if length > MAX_BODY_BYTES {
        return Err("request body too large".to_string());
    }
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("connection closed inside the request body".to_string());
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(length);
    let raw_body = String::from_utf8_lossy(&body).into_owned();
    let parsed = if raw_body.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&raw_body).unwrap_or_else(|_| Value::String(raw_body.clone()))
    };
    Ok(Some(RecordedRequest {
        method,
        path,
        headers,
        body: parsed,
        raw_body,
    }))
}

fn write_response(stream: &mut TcpStream, response: &ScriptedResponse) -> io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {} {}\r\n",
        response.status,
        reason(response.status)
    );
    for (name, value) in &response.headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        response.body.len()
    ));
    stream.write_all(out.as_bytes())?;
    stream.write_all(response.body.as_bytes())?;
    stream.flush()?;
    let _ = stream.shutdown(std::net::Shutdown::Write);
    Ok(())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post(url: &str, body: &str) -> (u16, String) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut resp = agent.post(url).send(body).unwrap();
        let status = resp.status().as_u16();
        (status, resp.body_mut().read_to_string().unwrap())
    }

    #[test]
    fn replays_in_order_records_requests_and_fails_loudly_when_exhausted() {
        let server = ScriptedServer::start(vec![
            ScriptedResponse::text(201, "first"),
            ScriptedResponse::json(200, json!({"n": 2})),
        ]);
        assert_eq!(
            post(&format!("{}/a", server.url()), "{\"x\":1}"),
            (201, "first".into())
        );
        assert_eq!(
            post(&format!("{}/b", server.url()), "plain"),
            (200, "{\"n\":2}".into())
        );
        assert_eq!(server.remaining(), 0);
        let (status, body) = post(&server.url(), "");
        assert_eq!(status, 500);
        assert!(body.contains("script exhausted"), "{body}");

        let reqs = server.requests();
        assert_eq!(reqs.len(), 3);
        assert_eq!(reqs[0].path, "/v1/a");
        assert_eq!(reqs[0].body, json!({"x": 1}));
        assert_eq!(reqs[1].body, json!("plain"));
        assert_eq!(reqs[2].body, Value::Null);
        assert!(reqs[0].header("HOST").is_some());
    }

    #[test]
    fn fixture_format() {
        let script = ScriptedResponse::from_fixture_str(
            r#"{"description": "d", "responses": [
                {"status": 429, "headers": {"Retry-After": "1"}, "body": "wait"},
                {"body": {"ok": true}, "delay_ms": 5},
                {"reset": true}
            ]}"#,
        )
        .unwrap();
        assert_eq!(script.len(), 3);
        assert_eq!(script[0].status, 429);
        assert!(
            script[0]
                .headers
                .contains(&("Retry-After".into(), "1".into()))
        );
        assert_eq!(script[0].body, "wait");
        assert_eq!(script[1].status, 200);
        assert_eq!(script[1].body, "{\"ok\":true}");
        assert_eq!(script[1].delay, Duration::from_millis(5));
        assert!(script[2].close_without_answer);

        assert_eq!(ScriptedResponse::from_fixture_str("[]").unwrap().len(), 0);
        assert!(ScriptedResponse::from_fixture_str("{}").is_err());
        assert!(ScriptedResponse::from_fixture_str("[1]").is_err());
        assert!(ScriptedResponse::from_fixture_str(r#"[{"status": "x"}]"#).is_err());
        let missing = ScriptedResponse::from_fixture("/nonexistent/fixture.json").unwrap_err();
        assert!(missing.to_string().contains("/nonexistent/fixture.json"));
    }

    #[test]
    fn every_shipped_fixture_loads() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/llm");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "json") {
                let script = ScriptedResponse::from_fixture(&path).unwrap();
                assert!(!script.is_empty(), "{}", path.display());
                n += 1;
            }
        }
        assert!(n >= 5, "expected the shipped fixtures in {}", dir.display());
    }

    #[test]
    fn drop_stops_the_server() {
        let server = ScriptedServer::start(vec![]);
        let addr = server.addr;
        drop(server);
        assert!(TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err());
    }
}
