//! TLS to hosted and self-hosted LLM endpoints (SPEC §7, issue 10): the real binary talks https to
//! a TLS server the test starts on 127.0.0.1 with a freshly generated self-signed certificate
//! ([`TlsFront`]). The server terminates TLS with rustls and forwards each request to a
//! [`ScriptedServer`], so what the binary sent (headers included) is recorded.

use std::path::PathBuf;

use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};
use rustls::pki_types::PrivateKeyDer;
use serde_json::json;

use crate::harness::tls::TlsFront;
use crate::harness::*;

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
