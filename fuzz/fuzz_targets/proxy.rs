//! The network proxy: a real `net::proxy::Proxy` (as a run starts it for a policy
//! with `network.allow`), allowing only loopback on one port where this target listens; the
//! fuzzer's bytes are a request head sent over TCP.
//!
//! Properties: the proxy answers and closes within a deadline; a request is either refused, or
//! forwarded to exactly the host and port its target names — compared with an independent parse
//! of the target by the `url` crate (absolute-form `http://…`, CONNECT's `host:port`), whatever
//! its Host header, userinfo, percent-encoding, case, trailing dots or IPv6 form; an answer of 200
//! means the upstream was reached, once.
#![no_main]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use acode_run::net::proxy::Proxy;
use acode_run::policy::network::HostRule;
use libfuzzer_sys::fuzz_target;

struct World {
    proxy: Proxy,
    upstream_port: u16,
    reached: &'static AtomicUsize,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let upstream = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let upstream_port = upstream.local_addr().unwrap().port();
        let reached: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
        std::thread::spawn(move || {
            for s in upstream.incoming() {
                reached.fetch_add(1, Ordering::SeqCst);
                drop(s); // closes at once: the relay ends
            }
        });
        let rules = ["127.0.0.1", "localhost", "[::1]"]
            .iter()
            .map(|h| {
                let text = format!("{h}:{upstream_port}");
                HostRule::parse(&text, &text).unwrap()
            })
            .collect();
        let proxy = Proxy::start(rules, acode_run_fuzz::scratch("proxy")).unwrap();
        World {
            proxy,
            upstream_port,
            reached,
        }
    })
}

/// The host and port the request's target names, read by the `url` crate: `None` when it
/// cannot read one. Hosts in the proxy's canonical spelling (IPv6 bracketed, one trailing dot
/// dropped; the `url` crate already lower-cases and punycodes names).
fn independent(method: &str, target: &str) -> Option<(String, u16)> {
    let url = if method.eq_ignore_ascii_case("CONNECT") {
        // Authority-form: a port is required and nothing else may follow.
        let u = url::Url::parse(&format!("http://{target}/")).ok()?;
        if u.port().is_none() && !target.ends_with(":80") {
            return None;
        }
        u
    } else {
        let u = url::Url::parse(target).ok()?;
        if u.scheme() != "http" {
            return None;
        }
        u
    };
    let host = match url.host()? {
        url::Host::Domain(d) => d.strip_suffix('.').unwrap_or(d).to_string(),
        url::Host::Ipv4(ip) => ip.to_string(),
        url::Host::Ipv6(ip) => format!("[{ip}]"),
    };
    Some((host, url.port_or_known_default()?))
}

fuzz_target!(|data: &[u8]| {
    let w = world();
    // `PORT` in the input (the corpus, the dictionary) stands for the upstream's port, which is
    // chosen when the target starts.
    let port_text = w.upstream_port.to_string();
    let mut with_port = Vec::with_capacity(data.len());
    let mut rest = data;
    while !rest.is_empty() {
        if rest.starts_with(b"PORT") {
            with_port.extend_from_slice(port_text.as_bytes());
            rest = &rest[4..];
        } else {
            with_port.push(rest[0]);
            rest = &rest[1..];
        }
    }
    let data = with_port;
    let data = data.as_slice();
    let before = w.reached.load(Ordering::SeqCst);
    let port = w.proxy.port();
    let request = data.to_vec();
    let answer = acode_run_fuzz::within(Duration::from_secs(15), "the proxy's answer", move || {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(12))).unwrap();
        let _ = s.write_all(&request);
        let _ = s.shutdown(Shutdown::Write);
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        answer
    });
    let answer = String::from_utf8_lossy(&answer);
    let status: Option<u16> = answer
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|c| c.parse().ok());
    // A forwarded request is recorded when its relay ends, which the client may see (EOF) a
    // moment before the record is made.
    let mut records = w.proxy.take_unattributed();
    let waited = std::time::Instant::now();
    let forwarded = || status == Some(200) || w.reached.load(Ordering::SeqCst) > before;
    while records.is_empty() && forwarded() && waited.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(1));
        records = w.proxy.take_unattributed();
    }
    assert!(records.len() <= 1, "one request, {} records", records.len());
    let Some(record) = records.first() else {
        // Refused before it was read whole (400 on the head): nothing forwarded.
        assert!(
            status.is_none_or(|s| s >= 400),
            "an answer {status:?} without a record"
        );
        assert_eq!(
            w.reached.load(Ordering::SeqCst),
            before,
            "forwarded without a record"
        );
        return;
    };
    if !record.allowed {
        assert!(record.status >= 400, "{record:?}");
        assert_eq!(
            w.reached.load(Ordering::SeqCst),
            before,
            "a refused request was forwarded"
        );
        return;
    }
    // Allowed: the request line as sent.
    let text = String::from_utf8_lossy(data);
    let first = text.lines().next().unwrap_or_default();
    let mut words = first.split(' ');
    let (method, target) = (
        words.next().unwrap_or_default(),
        words.next().unwrap_or_default(),
    );
    let named = independent(method, target);
    assert_eq!(
        named,
        Some((record.host.clone(), record.port)),
        "the proxy forwarded {method} {target:?} to {}:{}",
        record.host,
        record.port
    );
    assert_eq!(record.port, w.upstream_port);
    if record.status == 200 {
        assert_eq!(
            w.reached.load(Ordering::SeqCst),
            before + 1,
            "200 without one upstream connection"
        );
    }
});
