//! OpenTelemetry traces of a run (issue 46, docs/observability.md), against real collectors on
//! 127.0.0.1: a receiver that decodes what acode-run posts with the OpenTelemetry project's
//! protobuf definitions (the `opentelemetry-proto` crate here; the Python package in the opt-in
//! test below), and collectors that are down, slow, or answer 500 — none of which may fail the
//! run or hold it longer than the bounded flush, each counted in the record.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{Value, json};

use crate::harness::*;

/// One request a collector received: its path, headers (lower-cased names) and body.
#[derive(Debug, Clone)]
struct Received {
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// A collector on 127.0.0.1 answering every request with `status` after `delay`, keeping what it
/// received.
struct Collector {
    port: u16,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Collector {
    fn start(status: u16, delay: Duration) -> Collector {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let keep = received.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let keep = keep.clone();
                std::thread::spawn(move || {
                    let _ = serve(stream, status, delay, &keep);
                });
            }
        });
        Collector { port, received }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

fn serve(
    stream: std::net::TcpStream,
    status: u16,
    delay: Duration,
    keep: &Mutex<Vec<Received>>,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let path = line
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_string();
    let mut headers = Vec::new();
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        reader.read_line(&mut h)?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_string());
            if k == "content-length" {
                length = v.parse().unwrap_or(0);
            }
            headers.push((k, v));
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body)?;
    keep.lock().unwrap().push(Received {
        path,
        headers,
        body,
    });
    std::thread::sleep(delay);
    let mut stream = stream;
    write!(
        stream,
        "HTTP/1.1 {status} X\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    stream.flush()
}

/// Every span in the requests, decoded as protobuf.
fn spans(received: &[Received]) -> Vec<Span> {
    received
        .iter()
        .flat_map(|r| {
            let req = ExportTraceServiceRequest::decode(&r.body[..])
                .unwrap_or_else(|e| panic!("not an OTLP protobuf request: {e}"));
            req.resource_spans
                .into_iter()
                .flat_map(|rs| rs.scope_spans.into_iter().flat_map(|ss| ss.spans))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes.iter().find(|a| a.key == key).and_then(|a| {
        match a.value.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(s) => Some(s.clone()),
            any_value::Value::IntValue(i) => Some(i.to_string()),
            any_value::Value::BoolValue(b) => Some(b.to_string()),
            any_value::Value::DoubleValue(d) => Some(d.to_string()),
            other => Some(format!("{other:?}")),
        }
    })
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";
const SECRET: &str = "sk-live-0123456789abcdefSECRET";
const INSTRUCTION: &str = "Read a.txt, the private instruction.";

/// A plan with an agent step (a model call, a tool call) and a command printing its
/// `TRACEPARENT`, and the scripted model for it.
fn traced_plan(t: &TestDir) -> (std::path::PathBuf, ScriptedServer) {
    t.file("a.txt", &format!("the file holds {SECRET}\n"));
    let plan = t.plan(
        "traced.json",
        &json!({"plan_id": "traced", "variables": {"api_token": SECRET}, "steps": [
            {"step_id": "think", "tool": "agent", "arguments": {
                "instruction": INSTRUCTION, "tools": ["file_read"], "max_turns": 4}},
            {"step_id": "show", "tool": "run_command", "arguments": {"argv": [
                "python3", "-c",
                "import os; print('TP=' + os.environ.get('TRACEPARENT', 'none'))"]}}
        ]}),
    );
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_tool_calls(&[("file_read", json!({"path": "a.txt"}))]),
        ScriptedResponse::chat_text("it says something"),
    ]);
    (plan, server)
}

fn run_traced(
    t: &TestDir,
    plan: &Path,
    server: &ScriptedServer,
    envs: &[(&str, &str)],
) -> std::process::Output {
    t.approve(plan);
    let url = server.url();
    let mut c = t.cmd_with(envs);
    c.args([
        "run",
        plan.to_str().unwrap(),
        "--llm-url",
        &url,
        "--model",
        "test-model",
        "--jsonl",
    ]);
    c.output().unwrap()
}

fn telemetry(t: &TestDir) -> Value {
    let json: String = q(&t.db(), "SELECT telemetry_json FROM runs");
    serde_json::from_str(&json).unwrap()
}

#[test]
fn a_run_is_one_trace_under_the_callers_span_with_the_conventions_attributes() {
    let t = TestDir::new();
    let collector = Collector::start(200, Duration::ZERO);
    let (plan, server) = traced_plan(&t);
    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    let endpoint = collector.endpoint();
    let out = run_traced(
        &t,
        &plan,
        &server,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_SERVICE_NAME", "ci-runner"),
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-collector-key=k%3D1"),
            ("TRACEPARENT", &traceparent),
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let received = collector.received();
    assert!(!received.is_empty());
    for r in &received {
        assert_eq!(r.path, "/v1/traces");
        assert!(
            r.headers
                .contains(&("x-collector-key".into(), "k=1".into())),
            "{r:?}"
        );
        assert!(
            r.headers
                .contains(&("content-type".into(), "application/x-protobuf".into())),
            "{r:?}"
        );
        let req = ExportTraceServiceRequest::decode(&r.body[..]).unwrap();
        let resource = req.resource_spans[0].resource.as_ref().unwrap();
        let keys: Vec<(String, String)> = resource
            .attributes
            .iter()
            .map(|a| {
                let v = match a.value.as_ref().unwrap().value.as_ref().unwrap() {
                    any_value::Value::StringValue(s) => s.clone(),
                    other => format!("{other:?}"),
                };
                (a.key.clone(), v)
            })
            .collect();
        assert!(
            keys.contains(&("service.name".into(), "ci-runner".into())),
            "{keys:?}"
        );
        assert!(keys.contains(&("deployment.environment".into(), "test".into())));
    }
    let spans = spans(&received);
    let run_id: String = q(&t.db(), "SELECT run_id FROM runs");
    // One trace: the caller's.
    assert!(spans.iter().all(|s| hex(&s.trace_id) == TRACE));
    let by_name = |name: &str| -> &Span {
        spans.iter().find(|s| s.name == name).unwrap_or_else(|| {
            panic!(
                "no span {name:?} in {:?}",
                spans.iter().map(|s| &s.name).collect::<Vec<_>>()
            )
        })
    };
    let root = by_name("invoke_workflow traced");
    assert_eq!(
        hex(&root.parent_span_id),
        PARENT,
        "the run is the caller's child"
    );
    assert_eq!(attr(root, "acode.run.id").as_deref(), Some(run_id.as_str()));
    assert_eq!(attr(root, "acode.exit_code").as_deref(), Some("0"));
    assert_eq!(attr(root, "acode.approval.by").as_deref(), Some("tester"));
    assert!(attr(root, "acode.plan.sha256").is_some_and(|h| h.len() == 64));
    assert!(attr(root, "acode.sandbox.mode").is_some());
    let agent = by_name("invoke_agent think");
    assert_eq!(agent.parent_span_id, root.span_id);
    assert_eq!(
        attr(agent, "gen_ai.operation.name").as_deref(),
        Some("invoke_agent")
    );
    let chats: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == "chat test-model")
        .collect();
    assert_eq!(chats.len(), 2);
    for chat in &chats {
        assert_eq!(chat.parent_span_id, agent.span_id);
        assert_eq!(chat.kind, 3, "CLIENT");
        assert_eq!(attr(chat, "gen_ai.operation.name").as_deref(), Some("chat"));
        assert_eq!(
            attr(chat, "gen_ai.request.model").as_deref(),
            Some("test-model")
        );
        assert_eq!(
            attr(chat, "gen_ai.provider.name").as_deref(),
            Some("openai")
        );
        assert_eq!(
            attr(chat, "gen_ai.usage.input_tokens").as_deref(),
            Some("10")
        );
        assert_eq!(
            attr(chat, "gen_ai.usage.output_tokens").as_deref(),
            Some("5")
        );
        assert_eq!(attr(chat, "server.address").as_deref(), Some("127.0.0.1"));
        assert!(chat.end_time_unix_nano >= chat.start_time_unix_nano);
    }
    let read = by_name("execute_tool file_read");
    assert_eq!(read.parent_span_id, agent.span_id);
    assert_eq!(attr(read, "gen_ai.tool.name").as_deref(), Some("file_read"));
    assert_eq!(attr(read, "gen_ai.tool.call.id").as_deref(), Some("call_1"));
    let step = by_name("step show");
    assert_eq!(step.parent_span_id, root.span_id);
    let command = by_name("execute_tool run_command");
    assert_eq!(command.parent_span_id, step.span_id);
    // The command saw its own span as parent.
    let printed: String = q(
        &t.db(),
        "SELECT a.content FROM artifacts a JOIN executions e USING (execution_id)
         WHERE e.tool_name = 'run_command' AND a.artifact_type = 'stdout'",
    );
    assert_eq!(
        printed.trim(),
        format!("TP=00-{TRACE}-{}-01", hex(&command.span_id))
    );
    // Nothing of the prompt, the file or the secret without the policy's word.
    let everything: Vec<u8> = received.iter().flat_map(|r| r.body.clone()).collect();
    let text = String::from_utf8_lossy(&everything);
    for needle in [SECRET, INSTRUCTION, "the file holds", "it says something"] {
        assert!(!text.contains(needle), "{needle:?} was exported");
    }
    assert!(
        spans
            .iter()
            .all(|s| attr(s, "gen_ai.input.messages").is_none())
    );
    let stats = telemetry(&t);
    assert_eq!(stats["exported"].as_u64(), Some(spans.len() as u64));
    assert_eq!(stats["dropped"], 0);
    assert!(
        !stats.to_string().contains("k=1"),
        "headers are not recorded"
    );
}

#[test]
fn content_is_exported_only_when_the_policy_says_so_and_redacted() {
    let t = TestDir::new();
    t.file(
        "acode-policy.json",
        r#"{"telemetry": {"export_content": true}}"#,
    );
    let collector = Collector::start(200, Duration::ZERO);
    let (plan, server) = traced_plan(&t);
    let endpoint = collector.endpoint();
    let out = run_traced(
        &t,
        &plan,
        &server,
        &[
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                &format!("{endpoint}/custom/path"),
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let received = collector.received();
    assert!(received.iter().all(|r| r.path == "/custom/path"));
    // http/json: the protobuf JSON mapping, read back with the same definitions.
    let spans: Vec<Span> = received
        .iter()
        .flat_map(|r| {
            assert!(
                r.headers
                    .contains(&("content-type".into(), "application/json".into()))
            );
            let req: ExportTraceServiceRequest = serde_json::from_slice(&r.body).unwrap();
            req.resource_spans
                .into_iter()
                .flat_map(|rs| rs.scope_spans.into_iter().flat_map(|ss| ss.spans))
                .collect::<Vec<_>>()
        })
        .collect();
    let first_chat = spans
        .iter()
        .filter(|s| s.name == "chat test-model")
        .min_by_key(|s| s.start_time_unix_nano)
        .unwrap();
    let input = attr(first_chat, "gen_ai.input.messages").unwrap();
    assert!(input.contains(INSTRUCTION), "{input}");
    let read = spans
        .iter()
        .find(|s| s.name == "execute_tool file_read")
        .unwrap();
    assert_eq!(
        attr(read, "gen_ai.tool.call.arguments").as_deref(),
        Some(r#"{"path":"a.txt"}"#)
    );
    let result = attr(read, "gen_ai.tool.call.result").unwrap();
    assert!(result.contains("the file holds [REDACTED]"), "{result}");
    let text: String = received
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect();
    assert!(!text.contains(SECRET), "the secret was exported");
}

/// A plan of one quick step: the run itself takes a fraction of a second.
fn quick_plan(t: &TestDir) -> std::path::PathBuf {
    t.file("a.txt", "a\n");
    let plan = t.plan(
        "quick.json",
        &json!({"plan_id": "quick", "steps": [
            {"step_id": "read", "tool": "file_read", "arguments": {"path": "a.txt"}}]}),
    );
    t.approve(&plan);
    plan
}

fn run_quick(t: &TestDir, plan: &Path, endpoint: &str) -> (std::process::Output, Duration) {
    let started = std::time::Instant::now();
    let out = t
        .cmd_with(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "1000"),
        ])
        .args(["run", plan.to_str().unwrap()])
        .output()
        .unwrap();
    (out, started.elapsed())
}

#[test]
fn a_collector_that_is_down_fails_nothing_and_the_loss_is_recorded() {
    let t = TestDir::new();
    let plan = quick_plan(&t);
    let endpoint = format!("http://127.0.0.1:{}", free_port());
    let (out, took) = run_quick(&t, &plan, &endpoint);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(took < Duration::from_secs(20), "{took:?}");
    let stats = telemetry(&t);
    assert_eq!(stats["exported"], 0);
    assert!(stats["dropped"].as_u64().unwrap() >= 3, "{stats}");
    assert!(
        stats["error"]
            .as_str()
            .unwrap()
            .contains("cannot reach the collector"),
        "{stats}"
    );
    assert!(
        stderr(&out).contains("OpenTelemetry: 0 span(s) exported"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_collector_answering_500_fails_nothing_and_the_loss_is_recorded() {
    let t = TestDir::new();
    let plan = quick_plan(&t);
    let collector = Collector::start(500, Duration::ZERO);
    let (out, _) = run_quick(&t, &plan, &collector.endpoint());
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(collector.received().len(), 1);
    let stats = telemetry(&t);
    assert_eq!(stats["exported"], 0);
    assert_eq!(
        stats["dropped"].as_u64(),
        Some(spans(&collector.received()).len() as u64)
    );
    assert!(
        stats["error"].as_str().unwrap().contains("HTTP 500"),
        "{stats}"
    );
}

#[test]
fn a_slow_collector_costs_at_most_the_bounded_flush() {
    let t = TestDir::new();
    let plan = quick_plan(&t);
    // Answers after 30 s; the export timeout is 1 s.
    let collector = Collector::start(200, Duration::from_secs(30));
    let (out, took) = run_quick(&t, &plan, &collector.endpoint());
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        took < Duration::from_secs(15),
        "the run waited {took:?} for a slow collector"
    );
    let stats = telemetry(&t);
    assert_eq!(stats["exported"], 0);
    assert!(stats["dropped"].as_u64().unwrap() >= 3, "{stats}");
}

#[test]
fn disabled_or_unset_exports_nothing_and_a_bad_protocol_is_said() {
    let t = TestDir::new();
    let plan = quick_plan(&t);
    let collector = Collector::start(200, Duration::ZERO);
    let endpoint = collector.endpoint();
    let out = t
        .cmd_with(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_SDK_DISABLED", "true"),
        ])
        .args(["run", plan.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = t
        .cmd_with(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ])
        .args(["run", plan.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("gRPC is not supported"),
        "{}",
        stderr(&out)
    );
    assert!(collector.received().is_empty());
}

/// The OpenTelemetry project's own Python definitions decode what acode-run sends (opt-in: it
/// installs `opentelemetry-proto` from the Python registry).
#[test]
fn the_python_opentelemetry_proto_package_decodes_the_trace() {
    if !e2e_net("opentelemetry-proto from the Python registry") {
        return;
    }
    let t = TestDir::new();
    let venv = t.root.join("otel-venv");
    let ok = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .unwrap()
        .success();
    assert!(ok, "python3 -m venv failed (Debian: python3-venv)");
    let status = Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "opentelemetry-proto>=1.20"])
        .status()
        .unwrap();
    assert!(status.success(), "pip install opentelemetry-proto failed");
    let port = free_port();
    let dump = t.root.join("spans.json");
    let mut receiver = Command::new(venv.join("bin/python"))
        .arg(repo().join("tests/support/otlp_receiver.py"))
        .arg(port.to_string())
        .arg(&dump)
        .spawn()
        .unwrap();
    // Wait for it to listen.
    let ready = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    assert!(ready, "the Python receiver did not start");
    let (plan, server) = traced_plan(&t);
    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    let endpoint = format!("http://127.0.0.1:{port}");
    let out = run_traced(
        &t,
        &plan,
        &server,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("TRACEPARENT", &traceparent),
        ],
    );
    let _ = receiver.kill();
    let _ = receiver.wait();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let spans: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&dump).unwrap()).unwrap();
    let find = |name: &str| {
        spans
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {spans:#?}"))
            .clone()
    };
    let root = find("invoke_workflow traced");
    assert_eq!(root["trace_id"], TRACE);
    assert_eq!(root["parent_span_id"], PARENT);
    let agent = find("invoke_agent think");
    assert_eq!(agent["parent_span_id"], root["span_id"]);
    let chat = find("chat test-model");
    assert_eq!(chat["parent_span_id"], agent["span_id"]);
    assert_eq!(chat["attributes"]["gen_ai.usage.input_tokens"], 10);
    assert_eq!(chat["attributes"]["gen_ai.request.model"], "test-model");
    let read = find("execute_tool file_read");
    assert_eq!(read["attributes"]["gen_ai.tool.name"], "file_read");
    let all = serde_json::to_string(&spans).unwrap();
    for needle in [SECRET, INSTRUCTION, "the file holds"] {
        assert!(!all.contains(needle), "{needle:?} was exported");
    }
}

#[test]
fn an_mcp_call_is_a_client_span_with_the_mcp_attributes() {
    let t = TestDir::new();
    crate::harness::mcp::policy(&t, &["handshake"], &["echo"], json!({}));
    let plan = t.plan(
        "mcp.json",
        &json!({"plan_id": "mcp", "steps": [
            {"step_id": "call", "tool": "mcp__fx__echo", "arguments": {"text": "hello"}}]}),
    );
    crate::harness::mcp::approve(&t, &plan);
    let collector = Collector::start(200, Duration::ZERO);
    let endpoint = collector.endpoint();
    let out = crate::harness::mcp::run(
        &t,
        &["run", plan.to_str().unwrap()],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let spans = spans(&collector.received());
    let call = spans
        .iter()
        .find(|s| s.name == "tools/call echo")
        .unwrap_or_else(|| panic!("{:?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>()));
    assert_eq!(call.kind, 3, "CLIENT");
    assert_eq!(attr(call, "mcp.method.name").as_deref(), Some("tools/call"));
    assert_eq!(attr(call, "gen_ai.tool.name").as_deref(), Some("echo"));
    assert_eq!(
        attr(call, "gen_ai.operation.name").as_deref(),
        Some("execute_tool")
    );
    assert_eq!(attr(call, "acode.mcp.server").as_deref(), Some("fx"));
    let step = spans.iter().find(|s| s.name == "step call").unwrap();
    assert_eq!(call.parent_span_id, step.span_id);
}
