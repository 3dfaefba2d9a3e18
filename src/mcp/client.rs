//! One MCP server, over stdio or Streamable HTTP (see the module docs of [`crate::mcp`]).
//!
//! The conversation (eras, requests, answers, refusals, `list_changed`, cancellation) is written
//! once in [`Client`]; how a message travels is a [`Transport`]: [`Stdio`] here (one JSON-RPC
//! message per line on a child's pipes) or [`super::http::Http`]. Both hand what arrives to the
//! client on one channel, so every wait below is the same loop.
//!
//! Every wait is bounded: a request waits for its answer until its deadline or the cancel flag,
//! and then sends `notifications/cancelled` and stops the server (the caller drops the client,
//! which ends the whole process group). A server that prints a line that is not JSON, answers an
//! id that was never asked, or exits fails the request with what it printed (sanitised). Requests
//! the server sends (sampling, elicitation, roots, anything) are refused with a JSON-RPC error and
//! remembered in [`Client::refused`].

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use thiserror::Error;

use super::{HANDSHAKE_VERSIONS, STATELESS_VERSION, UNSUPPORTED_VERSION, sanitize_line};
use crate::process;
use crate::process::{CommandSpec, Service};

/// Longest line read from a server's stdout (a bigger one fails the request).
const MAX_LINE: usize = 16 * 1024 * 1024;
/// Bytes of a server's stderr kept (its log, stored as an artifact).
const STDERR_CAP: usize = 1024 * 1024;
/// Characters of a bad line shown in an error.
const SHOWN: usize = 300;
/// How often a wait looks at the cancel flag.
const TICK: Duration = Duration::from_millis(20);
/// How long writing one message to a server's stdin may take.
const WRITE_BOUND: Duration = Duration::from_secs(10);
/// Pages of `tools/list` followed at most.
const MAX_PAGES: usize = 100;

/// Why talking to a server failed.
#[derive(Debug, Error)]
pub enum McpError {
    /// The server could not be started.
    #[error("cannot start MCP server {server}: {source}")]
    Start {
        /// The server.
        server: String,
        /// Why.
        source: std::io::Error,
    },
    /// No answer within the time allowed.
    #[error("MCP server {server} did not answer {method} within {}", seconds(*.secs))]
    Timeout {
        /// The server.
        server: String,
        /// The request.
        method: String,
        /// The limit, in seconds.
        secs: f64,
    },
    /// The run is being interrupted.
    #[error("interrupted while waiting for MCP server {server}")]
    Interrupted {
        /// The server.
        server: String,
    },
    /// The server exited or closed its stdout.
    #[error("MCP server {server} exited during {method}{}", stderr_note(.stderr))]
    Exited {
        /// The server.
        server: String,
        /// The request.
        method: String,
        /// The last line of its stderr, sanitised.
        stderr: String,
    },
    /// The server printed something that is not a JSON-RPC message on stdout.
    #[error(
        "MCP server {server} printed a line that is not JSON-RPC on stdout during {method} (a server must log to stderr): {line}"
    )]
    NotJson {
        /// The server.
        server: String,
        /// The request.
        method: String,
        /// The line, sanitised.
        line: String,
    },
    /// The server answered a request that was never sent (or not the one waited for).
    #[error("MCP server {server} answered an unknown request id during {method}: {line}")]
    UnknownId {
        /// The server.
        server: String,
        /// The request.
        method: String,
        /// The line, sanitised.
        line: String,
    },
    /// The server answered with a JSON-RPC error.
    #[error("MCP server {server} refused {method}: {message} (code {code})")]
    Rpc {
        /// The server.
        server: String,
        /// The request.
        method: String,
        /// The error code.
        code: i64,
        /// The error message, sanitised.
        message: String,
        /// The protocol versions an unsupported-version error (`-32022`) lists in
        /// `data.supported` (the stateless revision's negotiation); empty otherwise.
        supported: Vec<String>,
    },
    /// The server answered a `tools/call` with the stateless revision's `input_required` result
    /// (SEP-2322): it wants answers (elicitation, sampling, roots) before it finishes, and
    /// acode-run, which runs approved plans unattended, gives none.
    #[error(
        "MCP server {server} asked for input before finishing {method} ({asked}); acode-run \
         gives none (it offers no elicitation, sampling or roots), so the call fails"
    )]
    InputRequired {
        /// The server.
        server: String,
        /// The request.
        method: String,
        /// What it asked, `key: method` each, sanitised.
        asked: String,
    },
    /// A remote server's HTTP exchange failed (a status, a bound, a refused redirect, a 401).
    #[error("MCP server {server} ({method}): {message}")]
    Http {
        /// The server.
        server: String,
        /// The request.
        method: String,
        /// The HTTP status, or 0 when the failure is not one (a bound, the connection).
        status: u16,
        /// What happened (secrets redacted, sanitised).
        message: String,
    },
    /// A remote server the policy does not let the run reach (its URL, its host, a header).
    #[error("MCP server {server}: {message}")]
    NotAllowed {
        /// The server.
        server: String,
        /// Why, and what would allow it.
        message: String,
    },
    /// The answer does not have the shape the protocol requires.
    #[error("MCP server {server}: {message}")]
    Protocol {
        /// The server.
        server: String,
        /// What is wrong.
        message: String,
    },
    /// The server started but did not get through its handshake (it exited at once, printed
    /// something else, refused, ...): why, and what it wrote on stderr meanwhile, which usually
    /// says more (a missing module, a bad flag) and is otherwise lost with the process.
    #[error("{source}{}", stderr_excerpt(.stderr))]
    Startup {
        /// Why the handshake failed.
        source: Box<McpError>,
        /// Its whole stderr up to then (lossy UTF-8, at most [`STDERR_CAP`] bytes; unsanitised:
        /// shown through [`stderr_excerpt`], stored as an artifact).
        stderr: String,
    },
}

impl McpError {
    /// `source`, a failure while the server was starting (its handshake or first `tools/list`),
    /// with the server's whole `stderr` up to then.
    pub fn startup(source: McpError, stderr: String) -> McpError {
        let source = match source {
            // The excerpt the message ends with shows the last line too.
            McpError::Exited { server, method, .. } if !stderr.trim().is_empty() => {
                McpError::Exited {
                    server,
                    method,
                    stderr: String::new(),
                }
            }
            other => other,
        };
        McpError::Startup {
            source: Box::new(source),
            stderr,
        }
    }

    /// What the server wrote on stderr before it failed to start (empty for other errors).
    pub fn startup_stderr(&self) -> &str {
        match self {
            McpError::Startup { stderr, .. } => stderr,
            _ => "",
        }
    }
}

/// Lines of a failed start's stderr shown in the error, and characters at most.
const EXCERPT_LINES: usize = 10;
const EXCERPT_CHARS: usize = 2000;

/// The last lines of a server's stderr, each sanitised, for an error message: at most
/// [`EXCERPT_LINES`] lines and [`EXCERPT_CHARS`] characters (empty when it wrote nothing).
fn stderr_excerpt(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return String::new();
    }
    let start = lines.len().saturating_sub(EXCERPT_LINES);
    let mut shown = String::new();
    for line in &lines[start..] {
        let line = sanitize_line(line, SHOWN);
        if shown.chars().count() + line.chars().count() > EXCERPT_CHARS {
            break;
        }
        shown.push_str("\n  | ");
        shown.push_str(&line);
    }
    let skipped = if start > 0 {
        format!(" (last {} of {} lines)", lines.len() - start, lines.len())
    } else {
        String::new()
    };
    format!("; its stderr{skipped}:{shown}")
}

/// `2 s`, or `0.5 s` below a whole second.
fn seconds(secs: f64) -> String {
    if (secs - secs.round()).abs() < 0.01 {
        format!("{} s", secs.round())
    } else {
        format!("{secs:.1} s")
    }
}

fn stderr_note(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!(" (its stderr ends: {stderr})")
    }
}

/// Which protocol era a server speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Era {
    /// `initialize` handshake; the negotiated version.
    Handshake(String),
    /// Stateless revision: the version goes in every request's `_meta`.
    Stateless,
}

/// Who a server says it is, as pinned by `approve`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The protocol version in use.
    pub protocol_version: String,
    /// `serverInfo.name`.
    pub name: String,
    /// `serverInfo.version`.
    pub version: String,
}

/// One tool as `tools/list` describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedTool {
    /// Its name.
    pub name: String,
    /// Its description (empty when absent).
    pub description: String,
    /// Its input schema.
    pub input_schema: Value,
}

/// What a transport hands over to the client.
pub(crate) enum Incoming {
    /// One JSON-RPC message.
    Message(Value),
    /// Something that is not a JSON-RPC message (sanitised); the transport is unusable after it.
    NotJson(String),
    /// The server went away (a stdio server's stdout closed).
    Eof,
    /// Request `id` failed in the transport (an HTTP status, a bound, a refused redirect).
    Failed(u64, McpError),
}

/// How messages travel to one server and back: what [`Client`] needs of stdio and of HTTP.
/// Answers and server messages arrive on the channel the transport was made with.
pub(crate) trait Transport: Send {
    /// Sends one message: a request (its answer arrives on the channel), a notification or a
    /// reply. `deadline` bounds the request's whole exchange (HTTP) or the write (stdio).
    fn send(&mut self, message: &Value, method: &str, deadline: Instant) -> Result<(), McpError>;
    /// The protocol version agreed (`None` before `initialize` answered), for transports that
    /// carry it outside the message (HTTP's `MCP-Protocol-Version`).
    fn set_protocol_version(&mut self, _version: Option<&str>) {}
    /// Ends the conversation now: the process group for stdio; the session (`DELETE`) and every
    /// open connection for HTTP. Idempotent.
    fn stop(&mut self);
    /// The error for the channel's end ([`Incoming::Eof`]) during `method`.
    fn gone(&self, method: &str) -> McpError;
    /// What the server logged since the last call (a stdio server's stderr; for HTTP, what the
    /// transport noted, such as a tool left out of `tools/list`).
    fn take_log(&mut self) -> String {
        String::new()
    }
    /// The network requests made since the last call (HTTP), to be recorded on the call.
    fn take_network(&mut self) -> Vec<crate::policy::network::NetworkRequest> {
        Vec::new()
    }
    /// Whether the stateless revision's `server/discover` is tried before `initialize` (see
    /// [`Client::handshake`]).
    fn stateless_first(&self) -> bool {
        false
    }
    /// The process id of a started server (its process group id); `None` for a remote one.
    fn pid(&self) -> Option<i32> {
        None
    }
}

/// One way of opening the conversation ([`Client::initialize`], [`Client::discover`]).
type Attempt = fn(&mut Client, Instant, &AtomicBool) -> Result<Result<(), String>, McpError>;

/// A running server and the state of the conversation with it.
pub struct Client {
    server: String,
    transport: Box<dyn Transport>,
    rx: Receiver<Incoming>,
    next_id: u64,
    era: Era,
    identity: Identity,
    refused: Vec<String>,
    list_changed: bool,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.server)
            .field("pid", &self.transport.pid())
            .field("era", &self.era)
            .finish()
    }
}

/// A server started as a child process, spoken to on its stdin and stdout (one message a line);
/// its stderr is kept as its log.
pub(crate) struct Stdio {
    server: String,
    service: Service,
    /// `None` once [`Transport::stop`] closed it (the server's signal to exit).
    stdin: Option<std::fs::File>,
    stderr: Arc<Mutex<Vec<u8>>>,
    stderr_taken: usize,
    /// A duplicate of the stderr pipe's read end, only polled (see [`Stdio::take_log`]).
    stderr_fd: Option<std::fs::File>,
}

/// `_meta` of a stateless-era request.
pub(crate) fn stateless_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": STATELESS_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": client_info(),
    })
}

fn client_info() -> Value {
    json!({"name": "acode-run", "version": env!("CARGO_PKG_VERSION")})
}

impl Client {
    /// Starts the server `spec` describes (already prepared by the run's sandbox), chooses the
    /// protocol era by what it answers, all within `startup` (and the cancel flag).
    pub fn start(
        server: &str,
        spec: &CommandSpec,
        startup: Duration,
        cancel: &AtomicBool,
    ) -> Result<Client, McpError> {
        let mut client = Client::launch(server, spec)?;
        client.handshake_within(startup, cancel)?;
        Ok(client)
    }

    /// Starts the server's process and its reader threads, without talking to it yet (the
    /// caller may start it on a thread of its choosing, see `tools::mcp`).
    pub fn launch(server: &str, spec: &CommandSpec) -> Result<Client, McpError> {
        let mut service = process::start(spec).map_err(|source| McpError::Start {
            server: server.to_string(),
            source,
        })?;
        let (Some(stdin), Some(stdout), Some(stderr)) = (
            service.stdin.take(),
            service.stdout.take(),
            service.stderr.take(),
        ) else {
            return Err(McpError::Start {
                server: server.to_string(),
                source: std::io::Error::other("the server's pipes are missing"),
            });
        };
        crate::process::spawn::set_nonblocking(&stdin);
        let (tx, rx) = channel();
        std::thread::spawn(move || read_stdout(stdout, tx));
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        let stderr_fd = stderr.try_clone().ok();
        std::thread::spawn(move || read_stderr(stderr, sink));
        let transport = Stdio {
            server: server.to_string(),
            service,
            stdin: Some(stdin),
            stderr: log,
            stderr_taken: 0,
            stderr_fd,
        };
        Ok(Client::over(server, Box::new(transport), rx))
    }

    /// A client speaking through `transport`, whose messages arrive on `rx`; nothing sent yet.
    pub(crate) fn over(
        server: &str,
        transport: Box<dyn Transport>,
        rx: Receiver<Incoming>,
    ) -> Client {
        Client {
            server: server.to_string(),
            transport,
            rx,
            next_id: 0,
            era: Era::Stateless,
            identity: Identity {
                protocol_version: String::new(),
                name: String::new(),
                version: String::new(),
            },
            refused: Vec::new(),
            list_changed: false,
        }
    }

    /// Chooses the protocol era by what the server answers, within `startup` (and the cancel
    /// flag). On failure the error carries the server's stderr ([`McpError::Startup`]); the
    /// server is stopped.
    pub fn handshake_within(
        &mut self,
        startup: Duration,
        cancel: &AtomicBool,
    ) -> Result<(), McpError> {
        let deadline = Instant::now() + startup;
        self.handshake(deadline, cancel)
            .map_err(|e| self.failed_to_start(e))
    }

    /// Stops the server after `e`, a failure while it was starting, and returns `e` with what it
    /// wrote on stderr ([`McpError::Startup`]), read to its end once the process is gone (bounded
    /// by the stop's grace period and [`Client::take_stderr`]'s own wait).
    pub fn failed_to_start(&mut self, e: McpError) -> McpError {
        self.transport.stop();
        let stderr = self.take_stderr();
        McpError::startup(e, stderr)
    }

    /// Chooses the era. Over stdio `initialize` comes first (what every server of the handshake
    /// era, and every dual-era server, answers); a server that refuses it with a JSON-RPC error is
    /// asked `server/discover` and spoken to statelessly when it lists the stateless revision.
    /// (The stateless revision suggests the opposite order on stdio; servers of the handshake era
    /// in the wild do not all answer an unknown method before `initialize`, while a stateless
    /// server answers `initialize` with an error at once.) Over HTTP the order is the revision's
    /// own: `server/discover` first, and `initialize` when the answer is an error status or a
    /// JSON-RPC error (what a server of the handshake era answers a request without a session).
    fn handshake(&mut self, deadline: Instant, cancel: &AtomicBool) -> Result<(), McpError> {
        let (first, second) = if self.transport.stateless_first() {
            (Client::discover as Attempt, Client::initialize as Attempt)
        } else {
            (Client::initialize as Attempt, Client::discover as Attempt)
        };
        let why_first = match first(self, deadline, cancel)? {
            Ok(()) => return Ok(()),
            Err(why) => why,
        };
        let why_second = match second(self, deadline, cancel)? {
            Ok(()) => return Ok(()),
            Err(why) => why,
        };
        Err(McpError::Protocol {
            server: self.server.clone(),
            message: format!("speaks neither protocol era: {why_first} and {why_second}"),
        })
    }

    /// The `initialize` handshake: `Ok(Err(why))` when the server refused it with a JSON-RPC
    /// error (the other era may be spoken).
    fn initialize(
        &mut self,
        deadline: Instant,
        cancel: &AtomicBool,
    ) -> Result<Result<(), String>, McpError> {
        self.era = Era::Handshake(HANDSHAKE_VERSIONS[0].to_string());
        self.transport.set_protocol_version(None);
        let params = json!({
            "protocolVersion": HANDSHAKE_VERSIONS[0],
            "capabilities": {},
            "clientInfo": client_info(),
        });
        match self.request("initialize", params, deadline, cancel) {
            Ok(result) => {
                let version = result
                    .get("protocolVersion")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                if !HANDSHAKE_VERSIONS.contains(&version.as_str()) {
                    return Err(McpError::Protocol {
                        server: self.server.clone(),
                        message: format!(
                            "initialize answered protocol version {:?}, which acode-run does not \
                             speak (it speaks {} and {STATELESS_VERSION})",
                            sanitize_line(&version, 40),
                            HANDSHAKE_VERSIONS.join(", ")
                        ),
                    });
                }
                self.identity =
                    identity(&version, result.get("serverInfo").unwrap_or(&Value::Null));
                self.transport.set_protocol_version(Some(&version));
                self.era = Era::Handshake(version);
                self.notify("notifications/initialized", json!({}))?;
                Ok(Ok(()))
            }
            Err(McpError::Rpc { code, message, .. }) => {
                Ok(Err(format!("initialize failed ({message} (code {code}))")))
            }
            Err(other) => Err(other),
        }
    }

    /// `server/discover` of the stateless revision: `Ok(Err(why))` when the server refused it
    /// or does not list the revision (the other era may be spoken).
    fn discover(
        &mut self,
        deadline: Instant,
        cancel: &AtomicBool,
    ) -> Result<Result<(), String>, McpError> {
        self.era = Era::Stateless;
        self.transport.set_protocol_version(Some(STATELESS_VERSION));
        let mut answer = self.request("server/discover", json!({}), deadline, cancel);
        // An unsupported-version error that lists the revision asked for is a server asking
        // for the negotiation's retry (SEP-2575): once, with the version it lists.
        if let Err(McpError::Rpc {
            code: UNSUPPORTED_VERSION,
            supported,
            ..
        }) = &answer
            && supported.iter().any(|v| v == STATELESS_VERSION)
        {
            answer = self.request("server/discover", json!({}), deadline, cancel);
        }
        match answer {
            Ok(result) => {
                let supported: Vec<&str> = result
                    .get("supportedVersions")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                if supported.contains(&STATELESS_VERSION) {
                    let info = result
                        .get("serverInfo")
                        .or_else(|| {
                            result
                                .get("_meta")
                                .and_then(|m| m.get("io.modelcontextprotocol/serverInfo"))
                        })
                        .cloned()
                        .unwrap_or(Value::Null);
                    self.identity = identity(STATELESS_VERSION, &info);
                    return Ok(Ok(()));
                }
                let shown: Vec<String> = supported.iter().map(|v| sanitize_line(v, 40)).collect();
                Ok(Err(format!("server/discover offered {shown:?}")))
            }
            Err(McpError::Rpc { code, message, .. }) => Ok(Err(format!(
                "server/discover failed ({message}, code {code})"
            ))),
            Err(McpError::Http {
                status: 400 | 404 | 405,
                message,
                ..
            }) => Ok(Err(format!("server/discover failed ({message})"))),
            Err(other) => Err(other),
        }
    }

    /// The server's name in the policy.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Who the server says it is.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The protocol era in use.
    pub fn era(&self) -> &Era {
        &self.era
    }

    /// The server's pid (its process group id); `None` for a remote server.
    pub fn pid(&self) -> Option<i32> {
        self.transport.pid()
    }

    /// Requests from the server that were refused, one line each (method and id).
    pub fn refused(&self) -> &[String] {
        &self.refused
    }

    /// Takes the list of refused requests (for recording them with the call they came during).
    pub fn take_refused(&mut self) -> Vec<String> {
        std::mem::take(&mut self.refused)
    }

    /// The server's stderr since the last call of this function (lossy UTF-8); for a remote
    /// server, what the transport noted (a tool left out of `tools/list`, and why).
    pub fn take_stderr(&mut self) -> String {
        self.transport.take_log()
    }

    /// The HTTP requests made to a remote server since the last call of this function, recorded
    /// on the call as a command's requests are.
    pub fn take_network(&mut self) -> Vec<crate::policy::network::NetworkRequest> {
        self.transport.take_network()
    }

    /// Whether the server announced a changed tool list.
    pub fn list_changed(&self) -> bool {
        self.list_changed
    }

    /// Whether the server announced a changed tool list since the last call of this function
    /// (the caller lists the tools again and compares them with the pins).
    pub fn take_list_changed(&mut self) -> bool {
        std::mem::take(&mut self.list_changed)
    }

    /// Every tool the server offers (following `nextCursor`).
    pub fn list_tools(
        &mut self,
        timeout: Duration,
        cancel: &AtomicBool,
    ) -> Result<Vec<ListedTool>, McpError> {
        let deadline = Instant::now() + timeout;
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let result = self.request("tools/list", params, deadline, cancel)?;
            let Some(list) = result.get("tools").and_then(Value::as_array) else {
                return Err(self.protocol("tools/list answered without a tools array"));
            };
            for t in list {
                let Some(name) = t.get("name").and_then(Value::as_str) else {
                    return Err(self.protocol("tools/list answered a tool without a name"));
                };
                tools.push(ListedTool {
                    name: name.to_string(),
                    description: t
                        .get("description")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    input_schema: t.get("inputSchema").cloned().unwrap_or(Value::Null),
                });
            }
            cursor = result
                .get("nextCursor")
                .and_then(Value::as_str)
                .map(str::to_string);
            if cursor.is_none() {
                return Ok(tools);
            }
        }
        Err(self.protocol("tools/list kept answering more pages"))
    }

    /// Calls `tool` with `arguments`; the raw result. A `notifications/tools/list_changed` seen
    /// meanwhile is kept for [`Client::take_list_changed`].
    pub fn call_tool(
        &mut self,
        tool: &str,
        arguments: &Value,
        timeout: Duration,
        cancel: &AtomicBool,
    ) -> Result<Value, McpError> {
        let deadline = Instant::now() + timeout;
        let params = json!({"name": tool, "arguments": arguments});
        let result = self.request("tools/call", params, deadline, cancel)?;
        match result.get("resultType") {
            None => Ok(result),
            Some(Value::String(t)) if t == "complete" => Ok(result),
            Some(Value::String(t)) if t == "input_required" => {
                let asked = result
                    .get("inputRequests")
                    .and_then(Value::as_object)
                    .map(|requests| {
                        requests
                            .iter()
                            .take(8)
                            .map(|(key, r)| {
                                let m = r.get("method").and_then(Value::as_str).unwrap_or("?");
                                format!("{}: {}", sanitize_line(key, 40), sanitize_line(m, 60))
                            })
                            .collect::<Vec<_>>()
                            .join(", ")
                    })
                    .filter(|a| !a.is_empty())
                    .unwrap_or_else(|| "no inputRequests named".to_string());
                Err(McpError::InputRequired {
                    server: self.server.clone(),
                    method: "tools/call".to_string(),
                    asked,
                })
            }
            Some(other) => Err(self.protocol(&format!(
                "tools/call answered a result of type {}, which is neither complete nor \
                 input_required",
                sanitize_line(&other.to_string(), 60)
            ))),
        }
    }

    /// Ends the conversation now (see [`Transport::stop`]).
    pub fn stop(&mut self) {
        self.transport.stop();
    }

    fn protocol(&self, message: &str) -> McpError {
        McpError::Protocol {
            server: self.server.clone(),
            message: message.to_string(),
        }
    }

    /// Sends one message, with the stateless revision's `_meta` when that era is spoken.
    fn send(
        &mut self,
        mut message: Value,
        method: &str,
        deadline: Instant,
    ) -> Result<(), McpError> {
        if self.era == Era::Stateless
            && let Some(params) = message.get_mut("params").and_then(Value::as_object_mut)
        {
            params.insert("_meta".into(), stateless_meta());
        }
        self.transport.send(&message, method, deadline)
    }

    fn notify(&mut self, method: &str, params: Value) -> Result<(), McpError> {
        self.send(
            json!({"jsonrpc": "2.0", "method": method, "params": params}),
            method,
            Instant::now() + WRITE_BOUND,
        )
    }

    /// Sends a request and waits for its answer (see the module docs for what ends a wait).
    fn request(
        &mut self,
        method: &str,
        params: Value,
        deadline: Instant,
        cancel: &AtomicBool,
    ) -> Result<Value, McpError> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
            method,
            deadline,
        )?;
        let started = Instant::now();
        loop {
            if cancel.load(Ordering::SeqCst) {
                self.abandon(id, "the run was interrupted");
                return Err(McpError::Interrupted {
                    server: self.server.clone(),
                });
            }
            let now = Instant::now();
            if now >= deadline {
                self.abandon(id, "timed out");
                return Err(McpError::Timeout {
                    server: self.server.clone(),
                    method: method.to_string(),
                    secs: (deadline - started).as_secs_f64().max(0.0),
                });
            }
            let message = match self.rx.recv_timeout((deadline - now).min(TICK)) {
                Ok(Incoming::Message(m)) => m,
                Ok(Incoming::Failed(failed, e)) if failed == id => {
                    // The transport's own clock ran out with the request's deadline: the same
                    // failure, with the same cancellation, as when this loop's runs out.
                    if matches!(e, McpError::Timeout { .. }) {
                        self.abandon(id, "timed out");
                        return Err(McpError::Timeout {
                            server: self.server.clone(),
                            method: method.to_string(),
                            secs: (deadline - started).as_secs_f64().max(0.0),
                        });
                    }
                    return Err(e);
                }
                // A failure of a request given up on earlier.
                Ok(Incoming::Failed(..)) => continue,
                Ok(Incoming::NotJson(line)) => {
                    self.transport.stop();
                    return Err(McpError::NotJson {
                        server: self.server.clone(),
                        method: method.to_string(),
                        line,
                    });
                }
                Ok(Incoming::Eof) | Err(RecvTimeoutError::Disconnected) => {
                    return Err(self.transport.gone(method));
                }
                Err(RecvTimeoutError::Timeout) => continue,
            };
            if let Some(answer) = self.dispatch(message, id, method)? {
                return answer;
            }
        }
    }

    /// Handles one incoming message while waiting for request `id`: its answer (`Some`), a
    /// server request (refused), a notification (noted), or a protocol failure (`Err`).
    fn dispatch(
        &mut self,
        message: Value,
        id: u64,
        method: &str,
    ) -> Result<Option<Result<Value, McpError>>, McpError> {
        let shown = || sanitize_line(&message.to_string(), SHOWN);
        if !message.is_object() {
            return Err(McpError::NotJson {
                server: self.server.clone(),
                method: method.to_string(),
                line: shown(),
            });
        }
        if let Some(m) = message.get("method").and_then(Value::as_str) {
            match message.get("id") {
                Some(req_id) if !req_id.is_null() => {
                    // A request from the server: sampling, elicitation, roots, ping — none is
                    // offered; each is refused with an error reply and remembered.
                    self.refused
                        .push(format!("{} (id {})", sanitize_line(m, 80), req_id));
                    let reply = json!({
                        "jsonrpc": "2.0",
                        "id": req_id,
                        "error": {
                            "code": -32601,
                            "message": format!(
                                "acode-run does not offer {m} to MCP servers (refused by policy)"
                            ),
                        },
                    });
                    self.transport
                        .send(&reply, method, Instant::now() + WRITE_BOUND)?;
                }
                _ => {
                    if m == "notifications/tools/list_changed" {
                        self.list_changed = true;
                    }
                }
            }
            return Ok(None);
        }
        let answered = message.get("id").and_then(Value::as_u64);
        if answered != Some(id) {
            return Err(McpError::UnknownId {
                server: self.server.clone(),
                method: method.to_string(),
                line: shown(),
            });
        }
        if let Some(error) = message.get("error") {
            let code = error.get("code").and_then(Value::as_i64).unwrap_or(0);
            let text = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("no message");
            let supported = error
                .pointer("/data/supported")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .take(16)
                        .map(|v| sanitize_line(v, 40))
                        .collect()
                })
                .unwrap_or_default();
            return Ok(Some(Err(McpError::Rpc {
                server: self.server.clone(),
                method: method.to_string(),
                code,
                message: sanitize_line(text, SHOWN),
                supported,
            })));
        }
        match message.get("result") {
            Some(result) if result.is_object() => Ok(Some(Ok(result.clone()))),
            _ => Err(McpError::Protocol {
                server: self.server.clone(),
                message: format!("{method} answered without a result object: {}", shown()),
            }),
        }
    }

    /// Gives up on request `id`: `notifications/cancelled`, then the server is stopped (its
    /// answer can no longer be trusted to belong to anything).
    fn abandon(&mut self, id: u64, reason: &str) {
        let _ = self.notify(
            "notifications/cancelled",
            json!({"requestId": id, "reason": reason}),
        );
        // A moment for the notification to be read before the group is signalled.
        std::thread::sleep(Duration::from_millis(100));
        self.stop();
    }
}

impl Stdio {
    /// The last non-empty line of stderr, sanitised.
    fn stderr_tail(&self) -> String {
        let log = self.stderr.lock().map(|l| l.clone()).unwrap_or_default();
        let text = String::from_utf8_lossy(&log);
        text.lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| sanitize_line(l, SHOWN))
            .unwrap_or_default()
    }
}

impl Transport for Stdio {
    /// Writes the message as one line.
    fn send(&mut self, message: &Value, method: &str, _deadline: Instant) -> Result<(), McpError> {
        let mut line = message.to_string();
        line.push('\n');
        let exited = |c: &Stdio| McpError::Exited {
            server: c.server.clone(),
            method: method.to_string(),
            stderr: c.stderr_tail(),
        };
        // The pipe is non-blocking: a server that stops reading its stdin cannot block the runner
        // for longer than WRITE_BOUND.
        let deadline = Instant::now() + WRITE_BOUND;
        let mut rest = line.as_bytes();
        let Some(stdin) = self.stdin.as_ref() else {
            return Err(exited(self));
        };
        while !rest.is_empty() {
            match write_without_sigpipe(stdin, rest) {
                Ok(0) => return Err(exited(self)),
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        return Err(McpError::Timeout {
                            server: self.server.clone(),
                            method: format!("{method} (it stopped reading its stdin)"),
                            secs: WRITE_BOUND.as_secs_f64(),
                        });
                    }
                    wait_writable(stdin, TICK);
                }
                Err(_) => return Err(exited(self)),
            }
        }
        Ok(())
    }

    fn stop(&mut self) {
        // Closing stdin first is how the MCP stdio transport asks a server to exit; the service
        // then waits briefly before signalling, so what the server still reads (a refusal just
        // written, a notification) is not cut off by SIGTERM.
        self.stdin = None;
        let _ = self.service.stop();
    }

    fn gone(&self, method: &str) -> McpError {
        // Give stderr a moment to be read: it usually says why.
        std::thread::sleep(Duration::from_millis(50));
        McpError::Exited {
            server: self.server.clone(),
            method: method.to_string(),
            stderr: self.stderr_tail(),
        }
    }

    fn take_log(&mut self) -> String {
        // What the server wrote before its answer is in the pipe or already read: wait (briefly)
        // until the reader thread has emptied the pipe, so a call's log lines stay with it.
        if let Some(fd) = &self.stderr_fd {
            let until = Instant::now() + Duration::from_millis(200);
            while Instant::now() < until && readable(fd) {
                std::thread::sleep(Duration::from_millis(2));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let log = self.stderr.lock().map(|l| l.clone()).unwrap_or_default();
        let new = log.get(self.stderr_taken..).unwrap_or_default();
        self.stderr_taken = log.len();
        String::from_utf8_lossy(new).into_owned()
    }

    fn pid(&self) -> Option<i32> {
        Some(self.service.pid())
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.stop();
    }
}

fn identity(version: &str, info: &Value) -> Identity {
    let field = |k: &str| {
        info.get(k)
            .and_then(Value::as_str)
            .map(|s| sanitize_line(s, 200))
            .unwrap_or_default()
    };
    Identity {
        protocol_version: version.to_string(),
        name: field("name"),
        version: field("version"),
    }
}

/// The stdout reader thread: one message per line, handed over until end-of-file or a bad line.
fn read_stdout(stdout: std::fs::File, tx: std::sync::mpsc::Sender<Incoming>) {
    let mut reader = BufReader::new(stdout);
    loop {
        let mut line = Vec::new();
        let read = (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line);
        match read {
            Ok(0) | Err(_) => {
                let _ = tx.send(Incoming::Eof);
                return;
            }
            Ok(_) => {}
        }
        if line.len() > MAX_LINE {
            let _ = tx.send(Incoming::NotJson(format!(
                "a line longer than {MAX_LINE} bytes"
            )));
            return;
        }
        let bytes = line.trim_ascii();
        if bytes.is_empty() {
            continue;
        }
        // JSON-RPC is UTF-8: a line that is not is not a message, however much of it would read
        // as one once its bad bytes were replaced (`from_slice` checks; a lossy read would not).
        let incoming = match serde_json::from_slice::<Value>(bytes) {
            Ok(v) => Incoming::Message(v),
            Err(_) => Incoming::NotJson(sanitize_line(&String::from_utf8_lossy(bytes), SHOWN)),
        };
        let stop = matches!(incoming, Incoming::NotJson(_));
        if tx.send(incoming).is_err() || stop {
            return;
        }
    }
}

/// Writes to a server's stdin pipe without raising SIGPIPE when the server has gone: an embedder
/// may not ignore the signal (the `acode-run` binary does, as every Rust program does; a C host or
/// a libFuzzer harness does not), and the default action ends the whole process. SIGPIPE is
/// blocked in this thread for the write, and one the write raised is taken off the thread's
/// pending set before the mask is restored; the caller sees `EPIPE` (found by the `mcp_client`
/// fuzz target, docs/fuzzing.md).
fn write_without_sigpipe(file: &std::fs::File, bytes: &[u8]) -> std::io::Result<usize> {
    // SAFETY: signal-set and mask calls on local, initialised sets, for this thread only.
    unsafe {
        let mut pipe: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut pipe);
        libc::sigaddset(&mut pipe, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &pipe, &mut old);
        let written = (&*file).write(bytes);
        if matches!(&written, Err(e) if e.raw_os_error() == Some(libc::EPIPE)) {
            let now = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            libc::sigtimedwait(&pipe, std::ptr::null_mut(), &now);
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        written
    }
}

/// Waits at most `limit` for `file` (a pipe) to accept more bytes.
fn wait_writable(file: &std::fs::File, limit: Duration) {
    use std::os::fd::AsRawFd;
    let mut fds = [libc::pollfd {
        fd: file.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    }];
    // SAFETY: one live pollfd; the timeout is bounded.
    unsafe { libc::poll(fds.as_mut_ptr(), 1, limit.as_millis() as libc::c_int) };
}

/// Whether `file` has bytes to read now.
fn readable(file: &std::fs::File) -> bool {
    use std::os::fd::AsRawFd;
    let mut fds = [libc::pollfd {
        fd: file.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    // SAFETY: one live pollfd; a zero timeout never blocks.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, 0) };
    n > 0 && fds[0].revents & libc::POLLIN != 0
}

/// The stderr reader thread: keeps the first [`STDERR_CAP`] bytes, drains the rest.
fn read_stderr(mut stderr: std::fs::File, log: Arc<Mutex<Vec<u8>>>) {
    let mut chunk = [0u8; 8192];
    loop {
        match stderr.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if let Ok(mut l) = log.lock() {
                    let room = STDERR_CAP.saturating_sub(l.len());
                    l.extend_from_slice(&chunk[..n.min(room)]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `mcp_client` fuzz target (docs/fuzzing.md): a server line with bytes that are
    /// not UTF-8 read, once replaced, as a request of the server's, which the client refused and
    /// recorded as if the server had sent it. It is not JSON-RPC: the call fails as for any line
    /// that is not, and nothing is recorded as refused.
    #[test]
    fn a_line_that_is_not_utf8_is_not_json_rpc() {
        let dir = std::env::temp_dir().join(format!("acode-mcp-utf8-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("server.jsonl");
        let mut lines = br#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"fix","version":"2"}}}"#.to_vec();
        lines.extend_from_slice(b"\n{\"js\xff\xff\xff~c\":\"2.0\",\"id\":9,\"method\":\"sampling/createMessage\",\"params\":{}}\n");
        std::fs::write(&file, &lines).unwrap();
        // The lines, then a server that stays (so the client's writes reach it).
        let mut spec = CommandSpec::new(
            vec![
                "sh".into(),
                "-c".into(),
                "cat \"$0\"; exec sleep 10".into(),
                file.display().to_string(),
            ],
            dir.clone(),
        );
        spec.env = vec![("PATH".into(), "/usr/bin:/bin".into())];
        spec.timeout = Duration::from_secs(20);
        let cancel = AtomicBool::new(false);
        let mut client = Client::start("t", &spec, Duration::from_secs(5), &cancel).unwrap();
        let err = client
            .list_tools(Duration::from_secs(5), &cancel)
            .unwrap_err();
        assert!(matches!(err, McpError::NotJson { .. }), "{err}");
        assert!(client.take_refused().is_empty());
        client.stop();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
