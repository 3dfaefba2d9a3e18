//! Network by name (SPEC §6, issue #21): commands reach exactly the allowed hosts through the run's
//! proxy, in bwrap and Landlock modes; everything else — other hosts, direct connections, UDP — is
//! refused, and every request is recorded on its execution.

use std::io::{Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::time::Duration;

use serde_json::json;

use crate::harness::*;

/// A client that talks to the proxy the way TLS clients do (CONNECT with the credentials from
/// `HTTPS_PROXY`), then sends one HTTP request through the tunnel; and plain HTTP through
/// `urllib`, which reads `http_proxy` itself.
const CLIENT: &str = r#"
import base64, os, socket, sys, urllib.parse, urllib.request
def connect(target):
    u = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
    s = socket.create_connection((u.hostname, u.port), timeout=10)
    auth = base64.b64encode(f"{u.username}:{u.password}".encode()).decode()
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Basic {auth}\r\n\r\n".encode())
    answer = s.recv(4096).decode()
    print(target, answer.split("\r\n")[0])
    if " 200 " in answer:
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        body = b""
        while True:
            b = s.recv(4096)
            if not b:
                break
            body += b
        print("body:", body.decode().split("\r\n\r\n", 1)[-1])
    else:
        print("why:", answer.split("\r\n\r\n", 1)[-1].strip())
for arg in sys.argv[1:]:
    if arg.startswith("http://"):
        print("urllib:", urllib.request.urlopen(arg, timeout=10).read().decode())
    else:
        connect(arg)
"#;

/// An HTTP server on 127.0.0.1 answering every request with `hello-from-upstream`.
fn upstream() -> u16 {
    let l = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let body = "hello-from-upstream";
                let _ = write!(
                    s,
                    "HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    port
}

fn setup(mode: &str, allow: &[String]) -> TestDir {
    let t = TestDir::new();
    t.file("client.py", CLIENT);
    t.file(
        "acode-policy.json",
        &json!({"sandbox": mode, "network": {"allow": allow}}).to_string(),
    );
    t
}

fn run_python(t: &TestDir, args: &[&str], extra: &[&str]) -> std::process::Output {
    let mut argv = vec!["python3"];
    argv.extend_from_slice(args);
    let plan = t.plan(
        "net.json",
        &json!({"plan_id": "net", "steps": [
            {"step_id": "fetch", "tool": "run_command", "arguments": {"argv": argv}}]}),
    );
    t.approve(&plan);
    let mut all = vec![plan.to_str().unwrap()];
    all.extend_from_slice(extra);
    t.run(&all)
}

#[test]
fn an_allowed_host_is_reached_and_another_gets_403_both_recorded_with_bytes() {
    need_bwrap();
    let port = upstream();
    for mode in ["bwrap", "landlock"] {
        let t = setup(mode, &[format!("localhost:{port}")]);
        let allowed = format!("localhost:{port}");
        let out = run_python(
            &t,
            &[
                "client.py",
                &allowed,
                "denied.example.org:443",
                &format!("http://localhost:{port}/plain"),
            ],
            &["--jsonl"],
        );
        assert_eq!(code(&out), 0, "{mode}: {}", stderr(&out));
        let events = events(&out);
        assert_events_match_schema(&events);
        let text = q::<String>(
            &t.db(),
            "SELECT content FROM artifacts WHERE artifact_type = 'stdout'",
        );
        assert!(
            text.contains(&format!("{allowed} HTTP/1.1 200"))
                && text.contains("body: hello-from-upstream"),
            "{mode}: {text}"
        );
        assert!(
            text.contains("denied.example.org:443 HTTP/1.1 403")
                && text.contains("add \"denied.example.org\" to network.allow"),
            "{mode}: {text}"
        );
        assert!(
            text.contains("urllib: hello-from-upstream"),
            "{mode}: {text}"
        );
        // Recorded on the execution: the tunnel with its bytes, the denial, the plain request.
        let db = t.db();
        let rows: Vec<(String, String, i64, bool, i64, i64, i64)> = db
            .prepare(
                "SELECT n.method, n.host, n.port, n.allowed, n.status, n.bytes_up, n.bytes_down
                 FROM network_requests n JOIN executions e ON e.execution_id = n.execution_id
                 ORDER BY n.rowid",
            )
            .unwrap()
            .query_map([], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                ))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(rows.len(), 3, "{mode}: {rows:?}");
        let tunnel = rows.iter().find(|r| r.0 == "CONNECT" && r.3).unwrap();
        assert_eq!(
            (tunnel.1.as_str(), tunnel.2, tunnel.4),
            ("localhost", port as i64, 200)
        );
        assert_eq!(
            tunnel.5,
            "GET / HTTP/1.0\r\n\r\n".len() as i64,
            "{mode}: {rows:?}"
        );
        assert!(tunnel.6 > 19, "{mode}: {rows:?}");
        let denied = rows.iter().find(|r| !r.3).unwrap();
        assert_eq!((denied.1.as_str(), denied.4), ("denied.example.org", 403));
        assert!(rows.iter().any(|r| r.0 == "GET" && r.3), "{mode}: {rows:?}");
        // The same in the event stream, and in `show`.
        let net: Vec<_> = events
            .iter()
            .filter(|e| e["type"] == "network_request")
            .collect();
        assert_eq!(net.len(), 3, "{mode}");
        assert!(
            net.iter()
                .any(|e| e["host"] == "denied.example.org" && e["allowed"] == false)
        );
        let run_id = events[0]["run_id"].as_str().unwrap();
        let shown = stdout(&t.run(&["show", run_id]));
        assert!(
            shown.contains("network: CONNECT denied.example.org:443 DENIED (403)"),
            "{shown}"
        );
    }
}

#[test]
fn a_denied_host_names_the_policy_line_in_the_steps_failure() {
    need_bwrap();
    let port = upstream();
    for mode in ["bwrap", "landlock"] {
        let t = setup(mode, &[format!("localhost:{port}")]);
        // urllib raises on the proxy's 403 and the command fails.
        let out = run_python(&t, &["client.py", "http://blocked.example.net/"], &[]);
        assert_exit_with(
            &out,
            30,
            "blocked.example.net:80 is not allowed by the policy; to allow it, add \
             \"blocked.example.net\" to network.allow",
        );
    }
}

#[test]
fn a_command_that_ignores_the_proxy_reaches_nothing() {
    need_bwrap();
    let port = upstream();
    let direct = format!(
        "import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n    \
         print('CONNECTED')\nexcept OSError as e:\n    print('blocked:', e)\n"
    );
    for mode in ["bwrap", "landlock"] {
        let t = setup(mode, &[format!("localhost:{port}")]);
        t.file("direct.py", &direct);
        let out = run_python(&t, &["direct.py"], &[]);
        assert_eq!(code(&out), 0, "{mode}: {}", stderr(&out));
        let text = q::<String>(
            &t.db(),
            "SELECT content FROM artifacts WHERE artifact_type = 'stdout'",
        );
        assert!(text.starts_with("blocked:"), "{mode}: {text}");
    }
}

#[test]
fn udp_from_a_command_under_landlock_never_arrives() {
    let listener = UdpSocket::bind(("127.0.0.1", 0)).unwrap();
    listener
        .set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    // With and without allowed hosts: seccomp's rule does not depend on the policy.
    for allow in [vec![], vec!["allowed.example.org".to_string()]] {
        let t = setup("landlock", &allow);
        t.file(
            "udp.py",
            &format!(
                "import socket\ntry:\n    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n    \
                 s.sendto(b'exfiltrated', ('127.0.0.1', {port}))\n    print('SENT')\n\
                 except OSError as e:\n    print('refused:', e)\n"
            ),
        );
        let out = run_python(&t, &["udp.py"], &[]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let text = q::<String>(
            &t.db(),
            "SELECT content FROM artifacts WHERE artifact_type = 'stdout'",
        );
        assert!(text.starts_with("refused:"), "{text}");
        let mut buf = [0u8; 64];
        assert!(listener.recv(&mut buf).is_err(), "a datagram arrived");
    }
    // Control: the same script without a sandbox does send.
    let t = setup("none", &[]);
    t.file(
        "udp.py",
        &format!(
            "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
             s.sendto(b'control', ('127.0.0.1', {port}))\n"
        ),
    );
    let out = run_python(&t, &["udp.py"], &["--sandbox", "none"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let mut buf = [0u8; 64];
    let n = listener.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"control");
}

#[test]
fn no_allowed_host_means_no_proxy_and_no_proxy_variables() {
    need_bwrap();
    for mode in ["bwrap", "landlock"] {
        let t = setup(mode, &[]);
        t.file(
            "env.py",
            "import os\nprint(sorted(k for k in os.environ if 'proxy' in k.lower()))\n",
        );
        let out = run_python(&t, &["env.py"], &[]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let text = q::<String>(
            &t.db(),
            "SELECT content FROM artifacts WHERE artifact_type = 'stdout'",
        );
        assert_eq!(text.trim(), "[]", "{mode}");
        assert!(stderr(&out).contains("network: off"), "{}", stderr(&out));
    }
}

#[test]
fn the_header_says_what_each_mode_enforces() {
    need_bwrap();
    let t = setup("landlock", &["allowed.example.org".to_string()]);
    t.file("env.py", "print('x')\n");
    let out = run_python(&t, &["env.py"], &[]);
    let err = stderr(&out);
    assert!(
        err.contains(
            "network: allowed.example.org — through the run's proxy; Landlock cannot name hosts"
        ),
        "{err}"
    );
    let t = setup("bwrap", &["allowed.example.org".to_string()]);
    t.file("env.py", "print('x')\n");
    let err = stderr(&run_python(&t, &["env.py"], &[]));
    assert!(err.contains("no other address is reachable"), "{err}");
}
