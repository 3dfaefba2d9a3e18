//! TLS to hosted and self-hosted LLM endpoints (SPEC §7, issue 10): the real binary talks https to
//! a TLS server the test starts on 127.0.0.1 with a freshly generated self-signed certificate. The
//! server terminates TLS with rustls and forwards each request to a [`ScriptedServer`], so what
//! the binary sent (headers included) is recorded.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;

use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::json;

use crate::harness::*;

/// A TLS front for a scripted server. Serves connections until dropped (the thread is detached;
/// the test process ends it).
struct TlsFront {
    port: u16,
    ca_pem: String,
}

impl TlsFront {
    fn start(backend: &ScriptedServer) -> TlsFront {
        let certified = rcgen::generate_simple_self_signed(vec![
            "127.0.0.1".to_string(),
            "localhost".to_string(),
        ])
        .unwrap();
        let ca_pem = certified.cert.pem();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
            certified.signing_key.serialize_der(),
        ));
        Self::start_with(backend, certified.cert.der().clone(), key, ca_pem)
    }

    /// A front presenting `cert` (whose PEM is `pem`) with `key`.
    fn start_with(
        backend: &ScriptedServer,
        cert: rustls::pki_types::CertificateDer<'static>,
        key: PrivateKeyDer<'static>,
        ca_pem: String,
    ) -> TlsFront {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .unwrap();
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let backend_addr = backend
            .url()
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap()
            .to_string();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let config = Arc::clone(&config);
                let backend_addr = backend_addr.clone();
                std::thread::spawn(move || {
                    let _ = serve(stream, config, &backend_addr);
                });
            }
        });
        TlsFront { port, ca_pem }
    }

    fn url(&self) -> String {
        format!("https://127.0.0.1:{}/v1", self.port)
    }
}

/// One TLS connection: read one HTTP request, forward it in plain text, relay the answer.
fn serve(tcp: TcpStream, config: Arc<rustls::ServerConfig>, backend: &str) -> std::io::Result<()> {
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(20)))?;
    let conn = rustls::ServerConnection::new(config).map_err(std::io::Error::other)?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let mut request = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        let n = tls.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        request.extend_from_slice(&buf[..n]);
        if let Some(i) = request.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&request[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while request.len() < head_end + length {
        let n = tls.read(&mut buf)?;
        if n == 0 {
            break;
        }
        request.extend_from_slice(&buf[..n]);
    }
    let mut plain = TcpStream::connect(backend)?;
    plain.write_all(&request)?;
    let mut answer = Vec::new();
    plain.read_to_end(&mut answer)?;
    tls.write_all(&answer)?;
    tls.conn.send_close_notify();
    tls.flush()?;
    Ok(())
}

fn plan(t: &TestDir) -> PathBuf {
    t.plan(
        "agent.json",
        &json!({"plan_id": "tls", "steps": [
        {"step_id": "ask", "tool": "agent", "arguments": {
            "instruction": "Say hi.", "tools": ["file_read"], "max_turns": 2}}]}),
    )
}

fn run(
    t: &TestDir,
    plan: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    t.approve(plan);
    let mut cmd = t.cmd();
    cmd.env_remove("ACODE_LLM_CA_CERT")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ACODE_LLM_PROVIDER")
        .args([
            "run",
            plan.to_str().unwrap(),
            "--model",
            "m",
            "--llm-retries",
            "0",
        ])
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

#[test]
fn https_round_trip_with_the_ca_given_by_flag_and_by_environment() {
    for by_env in [false, true] {
        let t = TestDir::new();
        let backend = ScriptedServer::start(vec![ScriptedResponse::chat_text("hi over TLS")]);
        let front = TlsFront::start(&backend);
        let ca = t.root.join("ca.pem");
        std::fs::write(&ca, &front.ca_pem).unwrap();
        let plan = plan(&t);
        let url = front.url();
        let ca_s = ca.to_str().unwrap();
        let out = if by_env {
            run(
                &t,
                &plan,
                &["--llm-url", &url, "--json"],
                &[("ACODE_LLM_CA_CERT", ca_s)],
            )
        } else {
            run(
                &t,
                &plan,
                &["--llm-url", &url, "--llm-ca-cert", ca_s, "--json"],
                &[],
            )
        };
        assert_eq!(code(&out), 0, "by_env={by_env}: {}", stderr(&out));
        assert!(stdout(&out).contains("hi over TLS"), "{}", stdout(&out));
        let requests = backend.requests();
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].path, "/v1/chat/completions");
        // 127.0.0.1 is local: OPENAI_API_KEY is not consulted, no key sent.
        assert!(requests[0].header("authorization").is_none());
    }
}

#[test]
fn an_untrusted_certificate_is_a_clear_error() {
    let t = TestDir::new();
    let backend = ScriptedServer::start(vec![ScriptedResponse::chat_text("never")]);
    let front = TlsFront::start(&backend);
    let plan = plan(&t);
    let url = front.url();
    let out = run(&t, &plan, &["--llm-url", &url], &[]);
    assert_eq!(code(&out), 30, "{}", stderr(&out));
    let db = t.db();
    let message: String = q(&db, "SELECT error_message FROM steps");
    assert!(message.contains("not trusted"), "{message}");
    assert!(message.contains("--llm-ca-cert"), "{message}");
    assert!(stderr(&out).contains("not trusted"), "{}", stderr(&out));
    assert!(backend.requests().is_empty(), "nothing reached the server");

    // A CA file that is not a certificate fails before anything runs (exit 2), naming the file.
    let bad = t.root.join("bad.pem");
    std::fs::write(&bad, "not a certificate\n").unwrap();
    let out = run(
        &t,
        &plan,
        &["--llm-url", &url, "--llm-ca-cert", bad.to_str().unwrap()],
        &[],
    );
    assert_exit_with(&out, 2, "bad.pem");
}

#[test]
fn anthropic_key_from_the_environment_is_sent_and_never_recorded() {
    const KEY: &str = "sk-ant-api03-TESTKEY0123456789abcdefXYZ";
    let t = TestDir::new();
    let backend = ScriptedServer::start(vec![ScriptedResponse::json(
        200,
        json!({"id": "msg_1", "type": "message", "role": "assistant",
               "content": [{"type": "text", "text": "hello from anthropic"}],
               "stop_reason": "end_turn",
               "usage": {"input_tokens": 3, "output_tokens": 4}}),
    )]);
    let front = TlsFront::start(&backend);
    let ca = t.root.join("ca.pem");
    std::fs::write(&ca, &front.ca_pem).unwrap();
    let plan = plan(&t);
    let url = front.url();
    let out = run(
        &t,
        &plan,
        &[
            "--llm-provider",
            "anthropic",
            "--llm-url",
            &url,
            "--llm-ca-cert",
            ca.to_str().unwrap(),
            "--jsonl",
        ],
        &[("ANTHROPIC_API_KEY", KEY)],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let requests = backend.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/v1/messages");
    assert_eq!(requests[0].header("x-api-key"), Some(KEY));
    assert!(requests[0].header("anthropic-version").is_some());
    assert!(requests[0].header("authorization").is_none());

    // The key is nowhere in what acode-run wrote: outputs, database file and its WAL.
    assert!(!stdout(&out).contains(KEY));
    assert!(!stderr(&out).contains(KEY));
    let acode = t.ws.join(".acode");
    for entry in std::fs::read_dir(&acode).unwrap() {
        let path = entry.unwrap().path();
        if !path.is_file() {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        assert!(
            !bytes.windows(KEY.len()).any(|w| w == KEY.as_bytes()),
            "key found in {}",
            path.display()
        );
    }

    // A failing request (401) echoing the key: the error is recorded without it.
    let backend = ScriptedServer::start(vec![ScriptedResponse::json(
        401,
        json!({"type": "error", "error": {"type": "authentication_error",
               "message": format!("invalid x-api-key {KEY}")}}),
    )]);
    let front = TlsFront::start(&backend);
    std::fs::write(&ca, &front.ca_pem).unwrap();
    let url = front.url();
    let out = run(
        &t,
        &plan,
        &[
            "--llm-provider",
            "anthropic",
            "--llm-url",
            &url,
            "--llm-ca-cert",
            ca.to_str().unwrap(),
            "--jsonl",
        ],
        &[("ANTHROPIC_API_KEY", KEY)],
    );
    assert_eq!(code(&out), 30, "{}", stderr(&out));
    assert!(!stdout(&out).contains(KEY));
    assert!(!stderr(&out).contains(KEY));
    for entry in std::fs::read_dir(&acode).unwrap() {
        let path = entry.unwrap().path();
        if !path.is_file() {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        assert!(
            !bytes.windows(KEY.len()).any(|w| w == KEY.as_bytes()),
            "key found in {}",
            path.display()
        );
    }
}

/// A certificate made by `openssl req -x509` (self-signed, `CA:TRUE`, which webpki refuses as a
/// server's own with `CaUsedAsEndEntity`) and its key, in `dir`.
fn openssl_self_signed(dir: &std::path::Path, name: &str) -> Option<(PathBuf, PathBuf)> {
    let (cert, key) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
    );
    let out = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args([
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .ok()?;
    out.status.success().then_some((cert, key))
}

/// `--llm-ca-cert` with the server's own self-signed certificate from `openssl req -x509` works
/// (the certificate is pinned), and with another certificate the error does not tell the user to
/// pass the flag they passed (issue 22).
#[test]
fn an_openssl_self_signed_server_certificate_given_explicitly_is_pinned() {
    use rustls::pki_types::pem::PemObject;
    let t = TestDir::new();
    let Some((cert, key)) = openssl_self_signed(&t.root, "server") else {
        acode_run::testing::skip("openssl", "it makes the self-signed certificate");
        return;
    };
    let text = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(&cert)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("CA:TRUE"),
        "the case that failed: a CA certificate used as the server's"
    );
    let backend = ScriptedServer::start(vec![ScriptedResponse::chat_text("pinned hello")]);
    let front = TlsFront::start_with(
        &backend,
        rustls::pki_types::CertificateDer::from_pem_file(&cert).unwrap(),
        PrivateKeyDer::from_pem_file(&key).unwrap(),
        std::fs::read_to_string(&cert).unwrap(),
    );
    let plan1 = plan(&t);
    let url = front.url();
    let cert_s = cert.to_str().unwrap();
    let out = run(
        &t,
        &plan1,
        &["--llm-url", &url, "--llm-ca-cert", cert_s, "--json"],
        &[],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("pinned hello"), "{}", stdout(&out));
    assert_eq!(backend.requests().len(), 1);

    // Another self-signed certificate in the file: refused, and the hint names the file given
    // instead of telling the user to pass --llm-ca-cert.
    let (other, _) = openssl_self_signed(&t.root, "other").unwrap();
    let t2 = TestDir::new();
    let plan2 = plan(&t2);
    let out = run(
        &t2,
        &plan2,
        &["--llm-url", &url, "--llm-ca-cert", other.to_str().unwrap()],
        &[],
    );
    assert_eq!(code(&out), 30, "{}", stderr(&out));
    let message: String = q(&t2.db(), "SELECT error_message FROM steps");
    assert!(message.contains("not trusted"), "{message}");
    assert!(message.contains("although --llm-ca-cert"), "{message}");
    assert!(message.contains("other.pem"), "{message}");
    assert!(!message.contains("pass the CA certificate"), "{message}");
    assert_eq!(
        backend.requests().len(),
        1,
        "nothing more reached the server"
    );
}
