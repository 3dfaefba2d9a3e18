//! A scripted MCP server over Streamable HTTP on 127.0.0.1, for the remote-server tests
//! (tests/cli/mcp/http.rs): it speaks either protocol era, checks the headers a client must send
//! (the session id echoed, `MCP-Protocol-Version`, `Mcp-Method`/`Mcp-Name`), records every request
//! it gets, and misbehaves on request ([`Fault`]).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How `tools/call` (or every request, for [`Fault::Unauthorized`]) misbehaves.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// None: a JSON answer.
    None,
    /// The answer in an SSE stream, after a notification.
    Sse,
    /// A JSON answer of 17 MiB (over the client's 16 MiB bound).
    Huge,
    /// An SSE stream of keep-alive comments that never ends (until the client goes).
    EndlessSse,
    /// The answer carries another `Mcp-Session-Id` (handshake era).
    SessionChange,
    /// `307` to this URL.
    Redirect(String),
    /// `401` with `WWW-Authenticate` on every request.
    Unauthorized,
    /// `503` with `Retry-After: secs`, `times` times, then the answer.
    RetryAfter { times: usize, secs: u64 },
    /// The echo tool's description changes during the call, announced with
    /// `notifications/tools/list_changed`: in the answer's SSE stream (handshake era), or on the
    /// `subscriptions/listen` stream before the answer (stateless revision).
    ListChanged,
    /// An SSE stream with `id: e1` and `retry: 200` that closes before the answer; the answer
    /// comes on `GET` with `Last-Event-ID: e1`.
    Resume,
    /// As [`Fault::Resume`], but the answer goes on whichever `GET` comes first once the stream
    /// is cut, as the official conformance suite's `sse-retry` server does; the client's
    /// standalone `GET` (no `Last-Event-ID`) is held until then, so it is that one.
    AnswerOnAnyGet,
    /// The standalone `GET` stream's response headers come 500 ms late (then keep-alive
    /// comments): a client that sends its next request before the stream is open would have the
    /// server send there what it could not yet.
    SlowGet,
    /// The stateless revision's mirrored arguments (SEP-2243): `echo` marks `text` and
    /// `opts.region` with `x-mcp-header`, a second tool `bad` marks a number and a third,
    /// `under_items`, a string under `items` (a client must leave both out of its list), and a call whose `Mcp-Param-*` headers do not match its arguments
    /// is refused with 400 and `HeaderMismatch` (-32020).
    ParamHeaders,
    /// The stateless revision's version negotiation (SEP-2575), as the official conformance
    /// suite's `request-metadata` server does it: the first `server/discover` is refused with
    /// 400 and `UnsupportedProtocolVersion` (-32022) whose `data.supported` lists 2026-07-28;
    /// the client is to retry with a version listed there.
    VersionRetry,
    /// Every `tools/call` is refused with 400 and `HeaderMismatch` (-32020), as if the call lacked
    /// a mirrored header. With `change_marks`, the server was updated just before: from the first
    /// call on, its `tools/list` marks `text` with `x-mcp-header` (not in what was approved);
    /// without, its listing stays as it was (a server at odds with its own schema).
    HeaderMismatch { change_marks: bool },
    /// `tools/call` with `text` "ask" answers the stateless revision's `input_required` result
    /// (SEP-2322): an elicitation the client must answer before the server finishes.
    InputRequired,
}

/// One request the server got.
#[derive(Debug, Clone)]
pub struct Seen {
    /// `POST`, `GET`, `DELETE`.
    pub method: String,
    /// Its headers (names lower-case).
    pub headers: Vec<(String, String)>,
    /// Its body.
    pub body: String,
    /// When its head had been read.
    pub at: Instant,
}

impl Seen {
    /// The value of header `name` (lower-case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The JSON-RPC method of a POST.
    pub fn rpc(&self) -> String {
        serde_json::from_str::<Value>(&self.body)
            .ok()
            .and_then(|v| v.get("method").and_then(Value::as_str).map(String::from))
            .unwrap_or_default()
    }
}

struct State {
    stateless: bool,
    fault: Fault,
    description: Mutex<String>,
    seen: Mutex<Vec<Seen>>,
    retried: AtomicUsize,
    pending: Mutex<Option<Value>>,
    stop: AtomicBool,
    /// Whether a `subscriptions/listen` stream is open, and a list change waits to be sent on it.
    listening: AtomicBool,
    changed: AtomicBool,
    /// [`Fault::AnswerOnAnyGet`]: the call's stream was cut; the answer was taken by a `GET`
    /// without `Last-Event-ID`.
    cut: AtomicBool,
    taken_by_standalone: AtomicBool,
    /// [`Fault::SlowGet`]: when the last standalone stream's headers were sent.
    get_opened: Mutex<Option<Instant>>,
}

/// The running server; stopped when dropped.
pub struct McpHttpServer {
    /// Its port on 127.0.0.1.
    pub port: u16,
    state: Arc<State>,
}

/// The session id the handshake-era server hands out.
pub const SESSION: &str = "sess-1";

impl McpHttpServer {
    /// Starts a server of the stateless revision (`stateless`) or of the handshake era.
    pub fn start(stateless: bool, fault: Fault) -> McpHttpServer {
        McpHttpServer::start_on("127.0.0.1", stateless, fault)
    }

    /// [`McpHttpServer::start`] on another loopback address (`127.0.0.2`).
    pub fn start_on(address: &str, stateless: bool, fault: Fault) -> McpHttpServer {
        let listener = TcpListener::bind((address, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(State {
            stateless,
            fault,
            description: Mutex::new("Echoes its text.".to_string()),
            seen: Mutex::new(Vec::new()),
            retried: AtomicUsize::new(0),
            pending: Mutex::new(None),
            stop: AtomicBool::new(false),
            listening: AtomicBool::new(false),
            changed: AtomicBool::new(false),
            cut: AtomicBool::new(false),
            taken_by_standalone: AtomicBool::new(false),
            get_opened: Mutex::new(None),
        });
        let shared = state.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if shared.stop.load(Ordering::SeqCst) {
                    return;
                }
                if let Ok(conn) = conn {
                    let shared = shared.clone();
                    std::thread::spawn(move || serve(&shared, conn));
                }
            }
        });
        McpHttpServer { port, state }
    }

    /// `http://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// Every request received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    /// [`Fault::AnswerOnAnyGet`]: whether the standalone `GET` stream carried the answer.
    pub fn answered_on_the_standalone_stream(&self) -> bool {
        self.state.taken_by_standalone.load(Ordering::SeqCst)
    }

    /// [`Fault::SlowGet`]: when the last standalone stream's response headers were sent.
    pub fn standalone_opened_at(&self) -> Option<Instant> {
        *self.state.get_opened.lock().unwrap()
    }

    /// Changes the echo tool's description (as an update of the server would).
    pub fn set_description(&self, text: &str) {
        *self.state.description.lock().unwrap() = text.to_string();
    }
}

impl Drop for McpHttpServer {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn respond(conn: &mut TcpStream, status: &str, headers: &[(&str, String)], body: &str) {
    let mut text = format!("HTTP/1.1 {status}\r\nConnection: close\r\n");
    for (k, v) in headers {
        text.push_str(&format!("{k}: {v}\r\n"));
    }
    text.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    let _ = conn.write_all(text.as_bytes());
}

fn json_answer(conn: &mut TcpStream, extra: &[(&str, String)], body: &Value) {
    let mut headers = vec![("Content-Type", "application/json".to_string())];
    headers.extend(extra.iter().cloned());
    respond(conn, "200 OK", &headers, &body.to_string());
}

fn sse_head(conn: &mut TcpStream, extra: &[(&str, String)]) {
    let mut text =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n".to_string();
    for (k, v) in extra {
        text.push_str(&format!("{k}: {v}\r\n"));
    }
    text.push_str("\r\n");
    let _ = conn.write_all(text.as_bytes());
}

fn rpc_error(conn: &mut TcpStream, status: &str, id: &Value, code: i64, message: &str) {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    respond(
        conn,
        status,
        &[("Content-Type", "application/json".to_string())],
        &body.to_string(),
    );
}

fn serve(state: &State, mut conn: TcpStream) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut first = String::new();
    if reader.read_line(&mut first).unwrap_or(0) == 0 {
        return;
    }
    let method = first.split(' ').next().unwrap_or_default().to_string();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let seen = Seen {
        method: method.clone(),
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
        at: Instant::now(),
    };
    state.seen.lock().unwrap().push(seen.clone());
    if state.fault == Fault::Unauthorized {
        respond(
            &mut conn,
            "401 Unauthorized",
            &[(
                "WWW-Authenticate",
                "Bearer resource_metadata=\"http://127.0.0.1/.well-known/oauth-protected-resource\""
                    .to_string(),
            )],
            "",
        );
        return;
    }
    match method.as_str() {
        "DELETE" => respond(&mut conn, "200 OK", &[], ""),
        "GET" if state.fault == Fault::AnswerOnAnyGet => any_get(state, &mut conn, &seen),
        "GET" if state.fault == Fault::SlowGet => slow_get(state, &mut conn),
        "GET" => {
            // Only the resuming GET takes the pending answer: the client's standalone stream (a
            // GET without Last-Event-ID) may arrive between the cut stream and the resumption.
            let pending = if seen.header("last-event-id") == Some("e1") {
                state.pending.lock().unwrap().take()
            } else {
                None
            };
            match pending {
                Some(answer) => {
                    sse_head(&mut conn, &[]);
                    let _ = write!(conn, "id: e2\ndata: {answer}\n\n");
                }
                None => respond(&mut conn, "405 Method Not Allowed", &[], ""),
            }
        }
        "POST" => post(state, &mut conn, &seen),
        _ => respond(&mut conn, "405 Method Not Allowed", &[], ""),
    }
}

/// [`Fault::AnswerOnAnyGet`]'s `GET`: a standalone one waits for the cut (or for its client to
/// go: the one `approve` opened); then a priming event, the pending answer if there still is
/// one, and keep-alive comments until the client goes or the server stops.
fn any_get(state: &State, conn: &mut TcpStream, seen: &Seen) {
    let standalone = seen.header("last-event-id").is_none();
    let until = Instant::now() + Duration::from_secs(10);
    let _ = conn.set_read_timeout(Some(Duration::from_millis(10)));
    while standalone && !state.cut.load(Ordering::SeqCst) {
        let gone = matches!(conn.peek(&mut [0; 1]), Ok(0));
        if gone || Instant::now() > until || state.stop.load(Ordering::SeqCst) {
            return;
        }
    }
    sse_head(conn, &[("Mcp-Session-Id", SESSION.to_string())]);
    let _ = write!(conn, "id: p1\nretry: 200\ndata: \n\n");
    if let Some(answer) = state.pending.lock().unwrap().take() {
        state
            .taken_by_standalone
            .store(standalone, Ordering::SeqCst);
        let _ = write!(conn, "event: message\nid: e2\ndata: {answer}\n\n");
    }
    while Instant::now() < until && !state.stop.load(Ordering::SeqCst) {
        if conn.write_all(b": keep-alive\n\n").is_err() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A `Mcp-Param-*` value as sent: plain, or the Base64 sentinel form decoded (independently of
/// the client's encoder).
fn decode_param(value: &str) -> String {
    use base64::Engine as _;
    match value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    {
        Some(b64) => String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap_or_default(),
        )
        .unwrap_or_default(),
        None => value.to_string(),
    }
}

/// [`Fault::SlowGet`]'s `GET`: headers after 500 ms, then keep-alive comments until the client
/// goes or the server stops (at most 10 s).
fn slow_get(state: &State, conn: &mut TcpStream) {
    std::thread::sleep(Duration::from_millis(500));
    // Noted before they are sent, so a request the client sends after them comes later.
    *state.get_opened.lock().unwrap() = Some(Instant::now());
    sse_head(conn, &[("Mcp-Session-Id", SESSION.to_string())]);
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until && !state.stop.load(Ordering::SeqCst) {
        if conn.write_all(b": keep-alive\n\n").is_err() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn post(state: &State, conn: &mut TcpStream, seen: &Seen) {
    let Ok(message) = serde_json::from_str::<Value>(&seen.body) else {
        return rpc_error(conn, "400 Bad Request", &Value::Null, -32700, "parse error");
    };
    let id = message.get("id").cloned();
    let rpc = seen.rpc();
    let Some(id) = id else {
        return respond(conn, "202 Accepted", &[], "");
    };
    if state.fault == Fault::VersionRetry
        && rpc == "server/discover"
        && state.retried.fetch_add(1, Ordering::SeqCst) == 0
    {
        let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32022,
            "message": "Unsupported protocol version",
            "data": {"supported": ["2026-07-28"], "requested": "2026-07-28"}}});
        let headers = [("Content-Type", "application/json".to_string())];
        return respond(conn, "400 Bad Request", &headers, &body.to_string());
    }
    if state.stateless {
        if rpc == "initialize" {
            return rpc_error(
                conn,
                "400 Bad Request",
                &id,
                -32022,
                "unsupported protocol version: this server speaks 2026-07-28",
            );
        }
        let name = message
            .pointer("/params/name")
            .and_then(Value::as_str)
            .map(String::from);
        let ok = seen.header("mcp-protocol-version") == Some("2026-07-28")
            && seen.header("mcp-method") == Some(rpc.as_str())
            && seen.header("mcp-name").map(String::from) == name;
        if !ok {
            return rpc_error(conn, "400 Bad Request", &id, -32020, "header mismatch");
        }
    } else if rpc != "initialize"
        && (seen.header("mcp-session-id") != Some(SESSION)
            || seen.header("mcp-protocol-version") != Some("2025-11-25"))
    {
        return rpc_error(conn, "400 Bad Request", &id, -32000, "missing session");
    }
    let session = |s: &str| {
        if state.stateless {
            vec![]
        } else {
            vec![("Mcp-Session-Id", s.to_string())]
        }
    };
    let result = match rpc.as_str() {
        "initialize" => json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                               "serverInfo": {"name": "scripted-http", "version": "1.0.0"}}),
        "server/discover" => {
            json!({"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
                                    "serverInfo": {"name": "scripted-http-stateless", "version": "1.0.0"}})
        }
        "subscriptions/listen" if state.stateless => {
            sse_head(conn, &[]);
            let ack = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": id},
                           "notifications": {"toolsListChanged": true}}});
            if write!(conn, "data: {ack}\n\n").is_err() {
                return;
            }
            state.listening.store(true, Ordering::SeqCst);
            let until = Instant::now() + Duration::from_secs(60);
            while Instant::now() < until && !state.stop.load(Ordering::SeqCst) {
                if state.changed.swap(false, Ordering::SeqCst) {
                    let note = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
                        "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": id}}});
                    if write!(conn, "data: {note}\n\n").is_err() {
                        return;
                    }
                }
                // A keep-alive, which also ends this loop once the client is gone (so a
                // stream of an earlier client cannot take the change).
                if conn.write_all(b": keep-alive\n\n").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            return;
        }
        "tools/list" if state.fault == Fault::ParamHeaders => {
            let desc = state.description.lock().unwrap().clone();
            json!({"tools": [
                {"name": "echo", "description": desc,
                 "inputSchema": {"type": "object", "properties": {
                     "text": {"type": "string", "x-mcp-header": "Text"},
                     "opts": {"type": "object", "properties": {
                         "region": {"type": "string", "x-mcp-header": "Region"}}}},
                     "required": ["text"]}},
                {"name": "bad", "description": "Marks a number.",
                 "inputSchema": {"type": "object", "properties": {
                     "ratio": {"type": "number", "x-mcp-header": "Ratio"}}}},
                {"name": "under_items", "description": "Marks a string inside an array.",
                 "inputSchema": {"type": "object", "properties": {
                     "zones": {"type": "array", "items": {"type": "object", "properties": {
                         "zone": {"type": "string", "x-mcp-header": "Zone"}}}}}}}]})
        }
        "tools/list"
            if state.fault == (Fault::HeaderMismatch { change_marks: true })
                && state.cut.load(Ordering::SeqCst) =>
        {
            let desc = state.description.lock().unwrap().clone();
            json!({"tools": [{"name": "echo", "description": desc,
                "inputSchema": {"type": "object", "properties": {
                    "text": {"type": "string", "x-mcp-header": "Text"}},
                                "required": ["text"]}}]})
        }
        "tools/call" if matches!(state.fault, Fault::HeaderMismatch { .. }) => {
            // `cut` marks the update (the field is otherwise [`Fault::AnswerOnAnyGet`]'s).
            state.cut.store(true, Ordering::SeqCst);
            return rpc_error(
                conn,
                "400 Bad Request",
                &id,
                -32020,
                "HeaderMismatch: Mcp-Param-Text is missing",
            );
        }
        "tools/list" => {
            let desc = state.description.lock().unwrap().clone();
            json!({"tools": [{"name": "echo", "description": desc,
                "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}},
                                "required": ["text"]}}]})
        }
        "tools/call" if state.fault == Fault::ParamHeaders => {
            let args = message
                .pointer("/params/arguments")
                .cloned()
                .unwrap_or_default();
            for (header, at) in [
                ("mcp-param-text", "/text"),
                ("mcp-param-region", "/opts/region"),
            ] {
                let want = args.pointer(at).and_then(Value::as_str);
                let got = seen.header(header).map(decode_param);
                if want.map(String::from) != got {
                    return rpc_error(
                        conn,
                        "400 Bad Request",
                        &id,
                        -32020,
                        &format!("HeaderMismatch: {header} is {got:?}, the body has {want:?}"),
                    );
                }
            }
            let text = args["text"].as_str().unwrap_or_default();
            json!({"content": [{"type": "text", "text": format!("echo: {text}")}]})
        }
        "tools/call"
            if state.fault == Fault::InputRequired
                && message.pointer("/params/arguments/text") == Some(&json!("ask")) =>
        {
            json!({"resultType": "input_required", "requestState": "opaque-1",
                   "inputRequests": {"confirm": {"method": "elicitation/create",
                       "params": {"message": "Really?", "requestedSchema": {"type": "object",
                           "properties": {"ok": {"type": "boolean"}}}}}}})
        }
        "tools/call" => {
            let text = message
                .pointer("/params/arguments/text")
                .and_then(Value::as_str)
                .unwrap_or_default();
            json!({"content": [{"type": "text", "text": format!("echo: {text}")}]})
        }
        _ => return rpc_error(conn, "404 Not Found", &id, -32601, "method not found"),
    };
    let answer = json!({"jsonrpc": "2.0", "id": id, "result": result});
    if rpc != "tools/call" {
        return json_answer(conn, &session(SESSION), &answer);
    }
    match &state.fault {
        Fault::None
        | Fault::Unauthorized
        | Fault::SlowGet
        | Fault::ParamHeaders
        | Fault::VersionRetry
        | Fault::InputRequired
        | Fault::HeaderMismatch { .. } => json_answer(conn, &session(SESSION), &answer),
        Fault::Sse => {
            sse_head(conn, &session(SESSION));
            let note = json!({"jsonrpc": "2.0", "method": "notifications/message",
                              "params": {"level": "info", "data": "working"}});
            let _ = write!(
                conn,
                ": a comment\n\nevent: message\ndata: {note}\n\ndata: {answer}\n\n"
            );
        }
        Fault::Huge => {
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\
                 Content-Length: {}\r\n\r\n",
                17 * 1024 * 1024
            );
            let _ = conn.write_all(head.as_bytes());
            let chunk = vec![b' '; 64 * 1024];
            for _ in 0..(17 * 16) {
                if conn.write_all(&chunk).is_err() {
                    return;
                }
            }
        }
        Fault::EndlessSse => {
            sse_head(conn, &session(SESSION));
            let until = Instant::now() + Duration::from_secs(120);
            while Instant::now() < until && !state.stop.load(Ordering::SeqCst) {
                if conn.write_all(b": still working\n\n").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Fault::SessionChange => json_answer(conn, &session("sess-2"), &answer),
        Fault::ListChanged if state.stateless => {
            *state.description.lock().unwrap() = "Echoes its text, and more.".to_string();
            assert!(
                state.listening.load(Ordering::SeqCst),
                "the client opened no subscriptions/listen stream"
            );
            state.changed.store(true, Ordering::SeqCst);
            let until = Instant::now() + Duration::from_secs(2);
            while state.changed.load(Ordering::SeqCst) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
            // The notification is on its way before the answer.
            std::thread::sleep(Duration::from_millis(100));
            json_answer(conn, &[], &answer);
        }
        Fault::ListChanged => {
            *state.description.lock().unwrap() = "Echoes its text, and more.".to_string();
            sse_head(conn, &session(SESSION));
            let note = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
            let _ = write!(conn, "data: {note}\n\ndata: {answer}\n\n");
        }
        Fault::Redirect(to) => respond(
            conn,
            "307 Temporary Redirect",
            &[("Location", to.clone())],
            "",
        ),
        Fault::RetryAfter { times, secs } => {
            if state.retried.fetch_add(1, Ordering::SeqCst) < *times {
                respond(
                    conn,
                    "503 Service Unavailable",
                    &[("Retry-After", secs.to_string())],
                    "busy, come back later",
                );
            } else {
                json_answer(conn, &session(SESSION), &answer);
            }
        }
        Fault::Resume => {
            *state.pending.lock().unwrap() = Some(answer);
            sse_head(conn, &session(SESSION));
            let note = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                              "params": {"progressToken": 1, "progress": 1}});
            let _ = write!(conn, "id: e1\nretry: 200\ndata: {note}\n\n");
        }
        Fault::AnswerOnAnyGet => {
            *state.pending.lock().unwrap() = Some(answer);
            sse_head(conn, &session(SESSION));
            let _ = write!(conn, "id: e1\nretry: 200\ndata: \n\n");
            std::thread::sleep(Duration::from_millis(50));
            let _ = conn.shutdown(std::net::Shutdown::Both);
            state.cut.store(true, Ordering::SeqCst);
        }
    }
}
