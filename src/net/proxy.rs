//! The run's HTTP/HTTPS proxy: the one way out for commands when the policy allows hosts.
//!
//! It listens on `127.0.0.1` (an ephemeral port, for commands under Landlock or without a sandbox)
//! and on a UNIX socket in the run's private directory (for the forwarder inside a bwrap network
//! namespace), on threads of its own — no async runtime. Per connection it reads one request head
//! (bounded in size and time), then:
//!
//! - `CONNECT host:port` (TLS): a blind tunnel — no interception, the command's TLS is end to end;
//! - `METHOD http://host[:port]/path` (plain HTTP): the request is forwarded once, with
//!   `Connection: close`, and the answer relayed back.
//!
//! The host is put in canonical form ([`crate::policy::network::canonical_host`]) and compared with the rules; a
//! `Host` header that names another host is refused, so a client cannot be allowed on one name and
//! talk to another. A denied request gets `403` at once, with a body naming the host and the
//! policy line that would allow it — not a timeout, which clients retry for minutes. The proxy
//! resolves names itself: commands need no DNS.
//!
//! Attribution: each command gets its own credentials in its proxy URL
//! (`http://acode:TOKEN@127.0.0.1:PORT`), which clients send as `Proxy-Authorization`; requests
//! are kept per token until the command's tool collects them ([`Proxy::finish`]) and records them
//! on its execution. A request without credentials is attributed to the only running command when
//! there is one, else kept as unattributed for the run. Unknown credentials get `407`.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::now_ms;
use crate::policy::network::{
    Host, HostRule, NetworkRequest, canonical_host, decide, split_host_port,
};

/// Largest request head read (request line and headers).
const MAX_HEAD: usize = 32 * 1024;
/// Time a client has to send its whole request head, however it dribbles it (slow clients cannot
/// hold threads forever). The unit tests wait for it, so theirs is short.
#[cfg(not(test))]
const HEAD_TIMEOUT: Duration = Duration::from_secs(15);
#[cfg(test)]
const HEAD_TIMEOUT: Duration = Duration::from_millis(1500);
/// Time to open a connection to one address of an allowed host.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// Connections handled at once; more wait in the listen queue.
const MAX_CONNECTIONS: usize = 256;
/// The user name in commands' proxy URLs (the token is the password).
pub const PROXY_USER: &str = "acode";

/// A stream the proxy serves: TCP from commands on this host, UNIX from the bwrap forwarder.
trait Conn: Read + Write + Send + 'static {
    fn clone_conn(&self) -> io::Result<Box<dyn Conn>>;
    fn shutdown_conn(&self, how: Shutdown);
    fn set_timeout(&self, d: Option<Duration>) -> io::Result<()>;
}

impl Conn for TcpStream {
    fn clone_conn(&self) -> io::Result<Box<dyn Conn>> {
        Ok(Box::new(self.try_clone()?))
    }
    fn shutdown_conn(&self, how: Shutdown) {
        let _ = self.shutdown(how);
    }
    fn set_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(d)
    }
}

impl Conn for UnixStream {
    fn clone_conn(&self) -> io::Result<Box<dyn Conn>> {
        Ok(Box::new(self.try_clone()?))
    }
    fn shutdown_conn(&self, how: Shutdown) {
        let _ = self.shutdown(how);
    }
    fn set_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(d)
    }
}

/// Requests of one command, and how many of its connections are still open.
#[derive(Default)]
struct TokenLog {
    done: Vec<NetworkRequest>,
    in_flight: usize,
}

/// The token a tunnel counts for, and both its ends.
type OpenTunnel = (Option<String>, Vec<Box<dyn Conn>>);

#[derive(Default)]
struct State {
    tokens: HashMap<String, TokenLog>,
    unattributed: Vec<NetworkRequest>,
    /// Open connections (both ends), by id, with the token they count for: shut down when their
    /// command is collected or the run ends.
    open: HashMap<u64, OpenTunnel>,
    next_id: u64,
    connections: usize,
}

struct Shared {
    rules: Vec<HostRule>,
    state: Mutex<State>,
    changed: Condvar,
    stop: AtomicBool,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The running proxy of one run; stopped (every listener and tunnel closed) when dropped.
pub struct Proxy {
    shared: Arc<Shared>,
    port: u16,
    socket: PathBuf,
    accept_threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("port", &self.port)
            .field("socket", &self.socket)
            .field("rules", &self.shared.rules.len())
            .finish()
    }
}

impl Proxy {
    /// Starts the proxy for `rules`, listening on `127.0.0.1:0` and on `dir/proxy.sock` (mode
    /// 0600; `dir` is the run's private directory).
    pub fn start(rules: Vec<HostRule>, dir: &Path) -> io::Result<Proxy> {
        let tcp = TcpListener::bind(("127.0.0.1", 0))?;
        let port = tcp.local_addr()?.port();
        let socket = dir.join("proxy.sock");
        let _ = std::fs::remove_file(&socket);
        let unix = UnixListener::bind(&socket)?;
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))?;
        }
        let shared = Arc::new(Shared {
            rules,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let mut accept_threads = Vec::new();
        {
            let shared = shared.clone();
            accept_threads.push(std::thread::spawn(move || {
                for stream in tcp.incoming() {
                    if shared.stop.load(Ordering::SeqCst) {
                        break;
                    }
                    if let Ok(s) = stream {
                        let _ = s.set_nodelay(true);
                        serve(&shared, Box::new(s));
                    }
                }
            }));
        }
        {
            let shared = shared.clone();
            accept_threads.push(std::thread::spawn(move || {
                for stream in unix.incoming() {
                    if shared.stop.load(Ordering::SeqCst) {
                        break;
                    }
                    if let Ok(s) = stream {
                        serve(&shared, Box::new(s));
                    }
                }
            }));
        }
        Ok(Proxy {
            shared,
            port,
            socket,
            accept_threads,
        })
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The UNIX socket (bound into bwrap sandboxes).
    pub fn socket_path(&self) -> &Path {
        &self.socket
    }

    /// The rules in force (registry entries resolved).
    pub fn rules(&self) -> &[HostRule] {
        &self.shared.rules
    }

    /// New credentials for one command about to start; its requests are kept under them until
    /// [`Proxy::finish`].
    pub fn new_token(&self) -> String {
        let token = uuid::Uuid::new_v4().simple().to_string();
        self.shared
            .lock()
            .tokens
            .insert(token.clone(), TokenLog::default());
        token
    }

    /// The proxy URL a command with `token` uses, for a proxy reached at `port` on 127.0.0.1.
    pub fn url(token: &str, port: u16) -> String {
        format!("http://{PROXY_USER}:{token}@127.0.0.1:{port}")
    }

    /// The requests of the command that had `token`, once its connections closed (it has exited;
    /// a connection still open after a short wait is shut down — a child left behind cannot use
    /// it). The token is forgotten.
    pub fn finish(&self, token: &str) -> Vec<NetworkRequest> {
        let deadline = Instant::now() + Duration::from_millis(500);
        let mut state = self.shared.lock();
        let mut forced = false;
        loop {
            let busy = state.tokens.get(token).is_some_and(|t| t.in_flight > 0);
            if !busy {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                if forced {
                    break;
                }
                for (owner, conns) in state.open.values() {
                    if owner.as_deref() == Some(token) {
                        conns.iter().for_each(|c| c.shutdown_conn(Shutdown::Both));
                    }
                }
                forced = true;
                continue;
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        state
            .tokens
            .remove(token)
            .map(|t| t.done)
            .unwrap_or_default()
    }

    /// Requests no command could be named for (no credentials while several commands ran).
    pub fn take_unattributed(&self) -> Vec<NetworkRequest> {
        std::mem::take(&mut self.shared.lock().unattributed)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        {
            let state = self.shared.lock();
            for (_, conns) in state.open.values() {
                conns.iter().for_each(|c| c.shutdown_conn(Shutdown::Both));
            }
        }
        // Wake the accept loops.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        let _ = UnixStream::connect(&self.socket);
        for t in self.accept_threads.drain(..) {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Hands a new connection to a thread of its own (or refuses it when too many are open).
fn serve(shared: &Arc<Shared>, conn: Box<dyn Conn>) {
    {
        let mut state = shared.lock();
        if state.connections >= MAX_CONNECTIONS {
            drop(state);
            let mut conn = conn;
            let _ = respond(
                &mut conn,
                503,
                "acode-run: too many proxy connections at once\n",
            );
            return;
        }
        state.connections += 1;
    }
    let shared = shared.clone();
    std::thread::spawn(move || {
        handle(&shared, conn);
        shared.lock().connections -= 1;
    });
}

/// A parsed request head.
struct Head {
    method: String,
    target: String,
    version: String,
    headers: Vec<(String, String)>,
}

impl Head {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reads the request head within [`HEAD_TIMEOUT`] in all: each read waits only for what is left
/// of it, so a client sending a byte at a time cannot stretch it.
fn read_head(reader: &mut BufReader<Box<dyn Conn>>) -> Result<Head, &'static str> {
    const LATE: &str = "the request head did not arrive in time";
    let deadline = Instant::now() + HEAD_TIMEOUT;
    let mut raw = Vec::new();
    let mut line_start = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(LATE);
        }
        let _ = reader.get_ref().set_timeout(Some(left));
        let available = match reader.fill_buf() {
            Ok(available) => available,
            // A signal (a child of the runner ending) is not the end of the head.
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return Err(LATE),
        };
        if available.is_empty() {
            return Err("the client closed before a whole request head");
        }
        let upto = available
            .iter()
            .position(|&b| b == b'\n')
            .map_or(available.len(), |i| i + 1)
            .min(MAX_HEAD + 1 - raw.len());
        raw.extend_from_slice(&available[..upto]);
        reader.consume(upto);
        if raw.len() > MAX_HEAD {
            return Err("the request head is too large");
        }
        if raw.last() == Some(&b'\n') {
            let line = &raw[line_start..];
            if line == b"\r\n" || line == b"\n" {
                break;
            }
            line_start = raw.len();
        }
    }
    let text = std::str::from_utf8(&raw).map_err(|_| "the request head is not UTF-8")?;
    let mut lines = text.lines();
    let mut first = lines.next().unwrap_or_default().split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (first.next(), first.next(), first.next(), first.next())
    else {
        return Err("a malformed request line");
    };
    if !version.starts_with("HTTP/1.") {
        return Err("not an HTTP/1 request");
    }
    let mut headers = Vec::new();
    for line in lines.take_while(|l| !l.is_empty()) {
        let (n, v) = line.split_once(':').ok_or("a malformed header line")?;
        if n.is_empty() || n.contains(char::is_whitespace) {
            return Err("a malformed header name");
        }
        headers.push((n.to_string(), v.trim().to_string()));
    }
    Ok(Head {
        method: method.to_string(),
        target: target.to_string(),
        version: version.to_string(),
        headers,
    })
}

fn status_text(status: u16) -> &'static str {
    match status {
        200 => "Connection established",
        400 => "Bad Request",
        403 => "Forbidden",
        407 => "Proxy Authentication Required",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

fn respond(conn: &mut Box<dyn Conn>, status: u16, body: &str) -> io::Result<()> {
    let extra = if status == 407 {
        "Proxy-Authenticate: Basic realm=\"acode-run\"\r\n"
    } else {
        ""
    };
    let text = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n{body}",
        status_text(status),
        body.len()
    );
    conn.write_all(text.as_bytes())?;
    conn.flush()
}

/// The token in a `Proxy-Authorization: Basic …` header (the password of `acode:TOKEN`).
fn token_of(header: &str) -> Option<String> {
    use base64::Engine as _;
    let b64 = header
        .trim()
        .strip_prefix("Basic ")
        .or_else(|| header.trim().strip_prefix("basic "))?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (_, token) = text.split_once(':')?;
    Some(token.to_string())
}

/// Where a request is counted: a command's token, or nobody's.
fn attribute(shared: &Shared, head: &Head) -> Result<Option<String>, ()> {
    let mut state = shared.lock();
    let token = match head.header("Proxy-Authorization") {
        Some(h) => match token_of(h) {
            Some(t) if state.tokens.contains_key(&t) => Some(t),
            _ => return Err(()),
        },
        None if state.tokens.len() == 1 => state.tokens.keys().next().cloned(),
        None => None,
    };
    if let Some(t) = &token
        && let Some(log) = state.tokens.get_mut(t)
    {
        log.in_flight += 1;
    }
    Ok(token)
}

/// Records a finished request under its token (or as unattributed) and wakes [`Proxy::finish`].
fn record(shared: &Shared, token: Option<&str>, request: NetworkRequest, id: Option<u64>) {
    let mut state = shared.lock();
    if let Some(id) = id {
        state.open.remove(&id);
    }
    match token.and_then(|t| state.tokens.get_mut(t)) {
        Some(log) => {
            log.in_flight = log.in_flight.saturating_sub(1);
            log.done.push(request);
        }
        None => state.unattributed.push(request),
    }
    drop(state);
    shared.changed.notify_all();
}

/// What one connection asked for and where it stands.
struct Request {
    method: String,
    host: String,
    port: u16,
    started_at: i64,
    started: Instant,
}

impl Request {
    fn outcome(
        &self,
        allowed: bool,
        status: u16,
        reason: impl Into<String>,
        up: u64,
        down: u64,
    ) -> NetworkRequest {
        NetworkRequest {
            method: self.method.clone(),
            host: self.host.clone(),
            port: self.port,
            allowed,
            status,
            reason: reason.into(),
            bytes_up: up,
            bytes_down: down,
            started_at: self.started_at,
            duration_ms: self.started.elapsed().as_millis() as u64,
        }
    }
}

/// The `network.allow` entry that would let `host:port` through: the bare host on a default
/// port, else `host:port` (the denial and the HTML report's refused hosts say the same).
pub fn allow_entry(host: &str, port: u16) -> String {
    if crate::policy::network::DEFAULT_PORTS.contains(&port) {
        host.to_string()
    } else {
        format!("{host}:{port}")
    }
}

/// The sentence a denied command (and its user) reads.
pub fn denial_body(host: &str, port: u16) -> String {
    let entry = allow_entry(host, port);
    format!(
        "acode-run: {host}:{port} is not allowed by the policy; to allow it, add \"{entry}\" to \
         network.allow in acode-policy.json (and approve the plan again)\n"
    )
}

fn handle(shared: &Shared, conn: Box<dyn Conn>) {
    let started = Instant::now();
    let started_at = now_ms();
    let _ = conn.set_timeout(Some(HEAD_TIMEOUT));
    let mut reader = BufReader::new(conn);
    let head = match read_head(&mut reader) {
        Ok(h) => h,
        Err(why) => {
            let _ = respond(reader.get_mut(), 400, &format!("acode-run proxy: {why}\n"));
            return;
        }
    };
    let mut req = Request {
        method: head.method.clone(),
        host: String::new(),
        port: 0,
        started_at,
        started,
    };
    let token = match attribute(shared, &head) {
        Ok(t) => t,
        Err(()) => {
            let _ = respond(
                reader.get_mut(),
                407,
                "acode-run proxy: unknown proxy credentials\n",
            );
            req.host = "(unknown credentials)".to_string();
            record(
                shared,
                None,
                req.outcome(false, 407, "unknown proxy credentials", 0, 0),
                None,
            );
            return;
        }
    };
    let token = token.as_deref();
    let (host, port, path) = match target(&head) {
        Ok(t) => t,
        Err(r) => {
            let _ = respond(reader.get_mut(), r.status, &r.body);
            req.host = r.host;
            req.port = r.port;
            record(
                shared,
                token,
                req.outcome(false, r.status, r.why, 0, 0),
                None,
            );
            return;
        }
    };
    req.host = host.to_string();
    req.port = port;
    let Some(rule) = decide(&shared.rules, &host, port) else {
        let body = denial_body(&req.host, port);
        let _ = respond(reader.get_mut(), 403, &body);
        record(
            shared,
            token,
            req.outcome(false, 403, "not in network.allow", 0, 0),
            None,
        );
        return;
    };
    let allowed_by = format!("allowed by network.allow {:?}", rule.source);
    let upstream = match connect(&host, port) {
        Ok(s) => s,
        Err(e) => {
            let _ = respond(
                reader.get_mut(),
                502,
                &format!("acode-run proxy: cannot reach {}:{port}: {e}\n", req.host),
            );
            record(
                shared,
                token,
                req.outcome(true, 502, format!("{allowed_by}; unreachable: {e}"), 0, 0),
                None,
            );
            return;
        }
    };
    let initial: Vec<u8> = if let Some(path) = &path {
        forwarded_head(&head, path)
    } else {
        if respond_established(reader.get_mut()).is_err() {
            record(
                shared,
                token,
                req.outcome(true, 200, allowed_by, 0, 0),
                None,
            );
            return;
        }
        Vec::new()
    };
    // Bytes the client sent after its head (a body, or a TLS hello sent early) follow the
    // forwarded head; the head itself is not the command's payload.
    let mut early = initial;
    let header_len = early.len() as u64;
    early.extend_from_slice(reader.buffer());
    let client = reader.into_inner();
    let _ = client.set_timeout(None);
    let id = register(shared, token, client.as_ref(), &upstream);
    let (sent, down) = relay(client, upstream, &early);
    let up = sent.saturating_sub(header_len);
    record(
        shared,
        token,
        req.outcome(true, 200, allowed_by, up, down),
        id,
    );
}

/// A request refused before any connection: the status and body answered, the reason recorded, and
/// the host and port as recorded (what could be read of them).
struct Refused {
    status: u16,
    body: String,
    why: String,
    host: String,
    port: u16,
}

impl Refused {
    /// A refusal whose body is the reason.
    fn because(status: u16, why: String, host: String, port: u16) -> Refused {
        Refused {
            status,
            body: format!("acode-run proxy: {why}\n"),
            why,
            host,
            port,
        }
    }
}

/// The request's target: `host:port` for CONNECT (`path` `None`), `http://host[:port]/path`
/// otherwise, the host in canonical form; refused when it is neither, names no valid host, or its
/// `Host` header names another host.
fn target(head: &Head) -> Result<(Host, u16, Option<String>), Refused> {
    let (authority, path) = if head.method.eq_ignore_ascii_case("CONNECT") {
        (head.target.clone(), None)
    } else {
        match head.target.strip_prefix("http://") {
            Some(rest) => {
                let end = rest.find(['/', '?']).unwrap_or(rest.len());
                let path = if end == rest.len() {
                    "/".to_string()
                } else {
                    rest[end..].to_string()
                };
                (rest[..end].to_string(), Some(path))
            }
            None => {
                let why = "only CONNECT and absolute http:// requests are proxied";
                let host = head.target.chars().take(200).collect();
                return Err(Refused::because(400, why.to_string(), host, 0));
            }
        }
    };
    let parsed = split_host_port(&authority).and_then(|(h, p)| {
        let port = match (p, &path) {
            (Some(p), _) => p,
            (None, Some(_)) => 80,
            (None, None) => return Err("CONNECT needs host:port".to_string()),
        };
        canonical_host(h).map(|host| (host, port))
    });
    let (host, port) = parsed.map_err(|why| {
        let host = authority.chars().take(200).collect();
        Refused::because(400, format!("bad host: {why}"), host, 0)
    })?;
    // A Host header naming another host than the target is refused.
    if let Some(h) = head.header("Host") {
        let same = split_host_port(h)
            .ok()
            .and_then(|(hh, hp)| canonical_host(hh).ok().map(|c| (c, hp)))
            .is_some_and(|(c, hp)| c == host && hp.is_none_or(|p| p == port));
        if !same {
            let why = "the Host header names another host than the request";
            return Err(Refused::because(
                403,
                why.to_string(),
                host.to_string(),
                port,
            ));
        }
    }
    Ok((host, port, path))
}

/// The head forwarded for a plain HTTP request: origin form, the client's headers without the
/// proxy's own (`Proxy-Authorization`, `Proxy-Connection`, `Connection`, `Keep-Alive`), and
/// `Connection: close` (one request per connection).
fn forwarded_head(head: &Head, path: &str) -> Vec<u8> {
    let mut text = format!("{} {path} {}\r\n", head.method, head.version);
    for (n, v) in &head.headers {
        let skip = [
            "proxy-authorization",
            "proxy-connection",
            "connection",
            "keep-alive",
        ];
        if !skip.iter().any(|s| n.eq_ignore_ascii_case(s)) {
            text.push_str(&format!("{n}: {v}\r\n"));
        }
    }
    text.push_str("Connection: close\r\n\r\n");
    text.into_bytes()
}

fn respond_established(conn: &mut Box<dyn Conn>) -> io::Result<()> {
    conn.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")?;
    conn.flush()
}

/// Opens a connection to an allowed host, trying each address it resolves to.
fn connect(host: &Host, port: u16) -> io::Result<TcpStream> {
    let addrs: Vec<_> = match host {
        Host::Ip(ip) => vec![std::net::SocketAddr::new(*ip, port)],
        Host::Name(name) => (name.as_str(), port).to_socket_addrs()?.collect(),
    };
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the name resolves to no address");
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Remembers both ends of a tunnel so they can be shut down (run end, command collected).
fn register(
    shared: &Shared,
    token: Option<&str>,
    client: &dyn Conn,
    upstream: &TcpStream,
) -> Option<u64> {
    let mut conns: Vec<Box<dyn Conn>> = Vec::new();
    conns.extend(client.clone_conn().ok());
    conns.extend(
        upstream
            .try_clone()
            .ok()
            .map(|s| Box::new(s) as Box<dyn Conn>),
    );
    let mut state = shared.lock();
    if shared.stop.load(Ordering::SeqCst) {
        conns.iter().for_each(|c| c.shutdown_conn(Shutdown::Both));
        return None;
    }
    let id = state.next_id;
    state.next_id += 1;
    state.open.insert(id, (token.map(String::from), conns));
    Some(id)
}

/// Copies both ways until both sides are done; returns (bytes up, bytes down). `early` goes up
/// first.
fn relay(client: Box<dyn Conn>, upstream: TcpStream, early: &[u8]) -> (u64, u64) {
    let (Ok(mut client_read), Ok(mut upstream_write)) = (client.clone_conn(), upstream.try_clone())
    else {
        return (0, 0);
    };
    let early = early.to_vec();
    let up = std::thread::spawn(move || {
        let mut n = 0u64;
        if upstream_write.write_all(&early).is_ok() {
            n += early.len() as u64;
            n += copy(&mut client_read, &mut upstream_write);
        }
        let _ = upstream_write.shutdown(Shutdown::Write);
        n
    });
    let mut client_write = client;
    let mut upstream_read = upstream;
    let down = copy(&mut upstream_read, &mut client_write);
    client_write.shutdown_conn(Shutdown::Write);
    let up = up.join().unwrap_or(0);
    client_write.shutdown_conn(Shutdown::Both);
    let _ = upstream_read.shutdown(Shutdown::Both);
    (up, down)
}

/// `io::copy` that counts and stops quietly on any error (a reset is the end of a tunnel).
pub(super) fn copy(from: &mut dyn Read, to: &mut dyn Write) -> u64 {
    let mut buf = [0u8; 16 * 1024];
    let mut total = 0u64;
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => return total,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    return total;
                }
                total += n as u64;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An HTTP server on 127.0.0.1 that answers every request with `hello`.
    fn upstream() -> u16 {
        upstream_recording().0
    }

    /// [`upstream`], with what it received: one entry per connection, its request head as read.
    fn upstream_recording() -> (u16, std::sync::Arc<Mutex<Vec<String>>>) {
        let l = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for mut s in l.incoming().flatten() {
                let log = log.clone();
                std::thread::spawn(move || {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.ends_with(b"\r\n\r\n") {
                        match s.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    log.lock()
                        .unwrap()
                        .push(String::from_utf8_lossy(&head).into_owned());
                    let _ = s.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello");
                });
            }
        });
        (port, seen)
    }

    /// A proxy and its socket directory, removed when the test ends, also when it fails: the
    /// proxy first (it stops its threads through its socket), then the directory.
    struct TestProxy {
        proxy: Proxy,
        _dir: crate::testing::RemoveOnDrop,
    }

    impl std::ops::Deref for TestProxy {
        type Target = Proxy;
        fn deref(&self) -> &Proxy {
            &self.proxy
        }
    }

    fn proxy(allow: &[&str]) -> TestProxy {
        let dir = std::env::temp_dir().join(format!("acode-proxy-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let rules = allow
            .iter()
            .map(|a| HostRule::parse(a, a).unwrap())
            .collect();
        TestProxy {
            proxy: Proxy::start(rules, &dir).unwrap(),
            _dir: crate::testing::RemoveOnDrop::new(dir),
        }
    }

    fn auth(token: &str) -> String {
        use base64::Engine as _;
        let b = base64::engine::general_purpose::STANDARD.encode(format!("{PROXY_USER}:{token}"));
        format!("Proxy-Authorization: Basic {b}\r\n")
    }

    /// Sends `head` to the proxy and returns everything it answers.
    fn ask(p: &Proxy, head: &str) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", p.port())).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(head.as_bytes()).unwrap();
        let mut out = String::new();
        let mut buf = [0u8; 4096];
        // Read the proxy's answer; after a 200 CONNECT, talk HTTP through the tunnel.
        let n = s.read(&mut buf).unwrap_or(0);
        out.push_str(&String::from_utf8_lossy(&buf[..n]));
        if out.starts_with("HTTP/1.1 200 Connection established") {
            s.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
            let _ = s.read_to_string(&mut out);
        }
        out
    }

    #[test]
    fn an_allowed_tunnel_works_and_is_recorded_with_its_bytes() {
        let port = upstream();
        let p = proxy(&[&format!("localhost:{port}")]);
        let token = p.new_token();
        let head = format!(
            "CONNECT localhost:{port} HTTP/1.1\r\nHost: localhost:{port}\r\n{}\r\n",
            auth(&token)
        );
        let answer = ask(&p, &head);
        assert!(answer.ends_with("hello"), "{answer}");
        let log = p.finish(&token);
        assert_eq!(log.len(), 1, "{log:?}");
        assert!(log[0].allowed && log[0].status == 200);
        assert_eq!(log[0].host, "localhost");
        assert_eq!(log[0].bytes_up, "GET / HTTP/1.0\r\n\r\n".len() as u64);
        assert!(log[0].bytes_down >= 5, "{log:?}");
    }

    #[test]
    fn plain_http_is_forwarded_once_without_the_proxy_headers() {
        let (port, seen) = upstream_recording();
        let p = proxy(&[&format!("localhost:{port}")]);
        let token = p.new_token();
        let answer = ask(
            &p,
            &format!(
                "GET http://localhost:{port}/x HTTP/1.1\r\nHost: localhost:{port}\r\n{}\
                 Proxy-Connection: keep-alive\r\nConnection: keep-alive\r\nKeep-Alive: 300\r\n\
                 X-Kept: yes\r\n\r\n",
                auth(&token)
            ),
        );
        assert!(
            answer.starts_with("HTTP/1.0 200 OK") && answer.ends_with("hello"),
            "{answer}"
        );
        let log = p.finish(&token);
        assert_eq!((log[0].method.as_str(), log[0].status), ("GET", 200));
        // What the upstream received: one request, in origin form, the client's own headers,
        // none of the proxy's (its credentials above all), and the connection closed after it.
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 1, "{seen:?}");
        let lines: Vec<&str> = seen[0].lines().collect();
        assert_eq!(lines[0], "GET /x HTTP/1.1", "{seen:?}");
        assert!(
            lines.contains(&format!("Host: localhost:{port}").as_str()),
            "{seen:?}"
        );
        assert!(lines.contains(&"X-Kept: yes"), "{seen:?}");
        assert!(lines.contains(&"Connection: close"), "{seen:?}");
        let lower = seen[0].to_ascii_lowercase();
        for stripped in [
            "proxy-authorization",
            "proxy-connection",
            "keep-alive",
            &token,
        ] {
            assert!(
                !lower.contains(stripped),
                "{stripped} reached the upstream: {seen:?}"
            );
        }
    }

    #[test]
    fn evasions_of_a_denied_host_get_403_at_once_and_are_recorded() {
        let port = upstream();
        let p = proxy(&["allowed.example.org", &format!("localhost:{port}")]);
        let token = p.new_token();
        let a = auth(&token);
        let cases = [
            // An IP literal for the allowed name's address.
            format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n{a}\r\n"),
            // Case variants and a trailing dot of a denied name.
            "CONNECT DENIED.example.org.:443 HTTP/1.1\r\n".to_string() + &a + "\r\n",
            // A look-alike IDN of the allowed name (Cyrillic а).
            "CONNECT \u{0430}llowed.example.org:443 HTTP/1.1\r\n".to_string() + &a + "\r\n",
            // Allowed target, but a Host header naming another host.
            format!("CONNECT localhost:{port} HTTP/1.1\r\nHost: evil.example.net\r\n{a}\r\n"),
            // Allowed name on a port it is not allowed on.
            "CONNECT allowed.example.org:22 HTTP/1.1\r\n".to_string() + &a + "\r\n",
            // Numeric tricks and nonsense are refused before any lookup.
            format!("CONNECT 127.1:{port} HTTP/1.1\r\n{a}\r\n"),
            format!("GET http://localhost:{port}@evil.example.net/ HTTP/1.1\r\n{a}\r\n"),
        ];
        for head in &cases {
            let started = Instant::now();
            let answer = ask(&p, head);
            assert!(
                answer.starts_with("HTTP/1.1 403") || answer.starts_with("HTTP/1.1 400"),
                "{head:?} → {answer}"
            );
            assert!(!answer.contains("hello"), "{head:?} reached the server");
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{head:?} was slow"
            );
        }
        let denied = "CONNECT denied.example.org:443 HTTP/1.1\r\n".to_string() + &a + "\r\n";
        let answer = ask(&p, &denied);
        assert!(
            answer.contains("add \"denied.example.org\" to network.allow"),
            "{answer}"
        );
        let log = p.finish(&token);
        assert_eq!(log.len(), cases.len() + 1);
        assert!(log.iter().all(|r| !r.allowed), "{log:?}");
    }

    #[test]
    fn unknown_credentials_get_407_and_requests_without_any_are_attributed_honestly() {
        let port = upstream();
        let p = proxy(&[&format!("localhost:{port}")]);
        let answer = ask(
            &p,
            &format!(
                "CONNECT localhost:{port} HTTP/1.1\r\n{}\r\n",
                auth("forged")
            ),
        );
        assert!(answer.starts_with("HTTP/1.1 407"), "{answer}");
        // No command running: a request without credentials is nobody's.
        let answer = ask(&p, &format!("CONNECT localhost:{port} HTTP/1.1\r\n\r\n"));
        assert!(answer.ends_with("hello"), "{answer}");
        // Recorded when the tunnel has closed on both sides, just after the client saw its end.
        let mut unattributed = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while unattributed.len() < 2 && Instant::now() < deadline {
            unattributed.extend(p.take_unattributed());
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(unattributed.len(), 2, "{unattributed:?}");
        // One command running: it is that command's.
        let token = p.new_token();
        ask(&p, &format!("CONNECT localhost:{port} HTTP/1.1\r\n\r\n"));
        assert_eq!(p.finish(&token).len(), 1);
    }

    #[test]
    fn slow_and_oversized_heads_are_cut_off() {
        let p = proxy(&["allowed.example.org"]);
        let big = format!(
            "CONNECT a:443 HTTP/1.1\r\nX: {}\r\n\r\n",
            "y".repeat(MAX_HEAD)
        );
        let answer = ask(&p, &big);
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        assert!(answer.contains("too large"), "{answer}");
        let answer = ask(&p, "garbage\r\n\r\n");
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");

        // Slow heads: one that never comes, and one dribbled a byte every 100 ms, each byte well
        // within any per-read timeout: both are cut off once HEAD_TIMEOUT has passed in all.
        for dribble in [false, true] {
            let mut s = TcpStream::connect(("127.0.0.1", p.port())).unwrap();
            s.set_read_timeout(Some(HEAD_TIMEOUT * 4)).unwrap();
            let started = Instant::now();
            let writer = s.try_clone().unwrap();
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let stopped = stop.clone();
            let feeder = std::thread::spawn(move || {
                let mut w = writer;
                let head = b"CONNECT allowed.example.org:443 HTTP/1.1\r\nX-Slow: ";
                let _ = w.write_all(head);
                while dribble && !stopped.load(std::sync::atomic::Ordering::SeqCst) {
                    if w.write_all(b"y").is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            });
            let mut answer = String::new();
            let _ = s.read_to_string(&mut answer);
            let took = started.elapsed();
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            let _ = feeder.join();
            assert!(
                answer.starts_with("HTTP/1.1 400") && answer.contains("did not arrive in time"),
                "dribble {dribble}: {answer:?}"
            );
            assert!(
                took >= HEAD_TIMEOUT && took < HEAD_TIMEOUT * 3,
                "dribble {dribble}: cut off after {took:?}"
            );
        }
    }

    /// An HTTP server on 127.0.0.1 that hands each request head it receives to the test and
    /// answers `hello`.
    fn recording_upstream() -> (u16, std::sync::mpsc::Receiver<String>) {
        let l = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for mut s in l.incoming().flatten() {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = tx.send(String::from_utf8_lossy(&head).into_owned());
                let _ = s.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello");
            }
        });
        (port, rx)
    }

    /// What the upstream receives of a plain HTTP request: the origin-form request line, the
    /// client's own headers, and none of the proxy's (the run's token in `Proxy-Authorization`
    /// must never leave the machine), with `Connection: close` once.
    #[test]
    fn the_upstream_never_sees_the_proxys_own_headers() {
        let (port, received) = recording_upstream();
        let p = proxy(&[&format!("localhost:{port}")]);
        let token = p.new_token();
        let credentials = auth(&token);
        let answer = ask(
            &p,
            &format!(
                "GET http://localhost:{port}/x?y=1 HTTP/1.1\r\nHost: localhost:{port}\r\n\
                 {credentials}Proxy-Connection: keep-alive\r\nConnection: keep-alive\r\n\
                 Keep-Alive: timeout=5\r\nX-Client: kept\r\n\r\n"
            ),
        );
        assert!(answer.ends_with("hello"), "{answer}");
        let head = received.recv_timeout(Duration::from_secs(10)).unwrap();
        let lines: Vec<&str> = head.split("\r\n").collect();
        assert_eq!(lines[0], "GET /x?y=1 HTTP/1.1", "{head}");
        assert!(!head.contains(credentials.trim_end()), "{head}");
        let named = |name: &str| {
            lines
                .iter()
                .filter(|l| {
                    l.split(':')
                        .next()
                        .is_some_and(|n| n.eq_ignore_ascii_case(name))
                })
                .copied()
                .collect::<Vec<_>>()
        };
        for gone in ["Proxy-Authorization", "Proxy-Connection", "Keep-Alive"] {
            assert!(named(gone).is_empty(), "{gone} was forwarded: {head}");
        }
        assert_eq!(named("Connection"), ["Connection: close"], "{head}");
        assert_eq!(named("X-Client"), ["X-Client: kept"], "{head}");
        assert_eq!(named("Host"), [format!("Host: localhost:{port}")], "{head}");
        assert!(head.ends_with("\r\n\r\n"), "{head}");
        let log = p.finish(&token);
        assert_eq!((log.len(), log[0].status), (1, 200), "{log:?}");
        drop(p);
    }
}
