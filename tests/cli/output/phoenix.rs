//! A run's trace in a real viewer (issue 46, docs/observability.md): Arize Phoenix, installed
//! from the Python registry (opt-in, `ACODE_E2E_NET=1`), takes the run over OTLP/HTTP, and its
//! REST API gives the spans back — names, parents, the GenAI attributes. With
//! `ACODE_UPDATE_SCREENSHOT=1` the trace page, as headless Chromium shows it, becomes
//! `docs/observability-phoenix.png`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};
use serde_json::{Value, json};

use crate::harness::*;

/// The Phoenix server, stopped (its process group) when dropped.
struct Phoenix {
    child: Child,
    port: u16,
}

impl Drop for Phoenix {
    fn drop(&mut self) {
        // SAFETY: signalling the process group this test started.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// A virtual environment with arize-phoenix: `ACODE_PHOENIX_VENV` when given (a developer's
/// existing one), else a new one in `dir`.
fn phoenix_venv(dir: &Path) -> PathBuf {
    if let Some(v) = std::env::var_os("ACODE_PHOENIX_VENV") {
        return PathBuf::from(v);
    }
    let venv = dir.join("phoenix-venv");
    let ok = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .unwrap()
        .success();
    assert!(ok, "python3 -m venv failed (Debian: python3-venv)");
    let ok = Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "arize-phoenix"])
        .status()
        .unwrap()
        .success();
    assert!(ok, "pip install arize-phoenix failed");
    venv
}

fn start_phoenix(venv: &Path, dir: &Path) -> Phoenix {
    use std::os::unix::process::CommandExt;
    let port = free_port();
    let work = dir.join("phoenix-data");
    std::fs::create_dir_all(&work).unwrap();
    let log = std::fs::File::create(dir.join("phoenix.log")).unwrap();
    let child = Command::new(venv.join("bin/phoenix"))
        .arg("serve")
        .env("PHOENIX_WORKING_DIR", &work)
        .env("PHOENIX_HOST", "127.0.0.1")
        .env("PHOENIX_PORT", port.to_string())
        .env("PHOENIX_GRPC_PORT", free_port().to_string())
        .env("PHOENIX_TELEMETRY_ENABLED", "false")
        .stdout(Stdio::null())
        .stderr(log)
        .process_group(0)
        .spawn()
        .unwrap();
    let phoenix = Phoenix { child, port };
    let started = Instant::now();
    while get(port, "/v1/projects").is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "Phoenix did not start: {}",
            std::fs::read_to_string(dir.join("phoenix.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    phoenix
}

/// `GET path` on 127.0.0.1:`port` as JSON, `None` until it answers 200.
fn get(port: u16, path: &str) -> Option<Value> {
    let agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(10)))
        .http_status_as_error(false)
        .proxy(None)
        .build()
        .new_agent();
    let mut resp = agent
        .get(&format!("http://127.0.0.1:{port}{path}"))
        .call()
        .ok()?;
    if resp.status() != 200 {
        return None;
    }
    resp.body_mut().read_json().ok()
}

#[test]
fn a_run_is_read_back_from_arize_phoenix() {
    if !e2e_net("arize-phoenix from the Python registry") {
        return;
    }
    let t = TestDir::new();
    let venv = phoenix_venv(&t.root);
    let phoenix = start_phoenix(&venv, &t.root);
    t.file(
        "src/lib.rs",
        "pub fn add(a: i32, b: i32) -> i32 { a - b }\n",
    );
    let plan = t.plan(
        "fix-add.json",
        &json!({"plan_id": "fix-add", "steps": [
            {"step_id": "fix", "tool": "agent", "arguments": {
                "instruction": "Make add() add.", "tools": ["file_read", "file_edit"],
                "max_turns": 5}},
            {"step_id": "check", "tool": "run_command",
             "arguments": {"argv": ["grep", "-c", "a + b", "src/lib.rs"]}}
        ]}),
    );
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_tool_calls(&[("file_read", json!({"path": "src/lib.rs"}))]),
        ScriptedResponse::chat_tool_calls(&[(
            "file_edit",
            json!({"path": "src/lib.rs", "old": "a - b", "new": "a + b"}),
        )]),
        ScriptedResponse::chat_text("add() now adds."),
    ]);
    t.approve(&plan);
    let url = server.url();
    let endpoint = format!("http://127.0.0.1:{}/v1/traces", phoenix.port);
    let out = t
        .cmd_with(&[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint.as_str()),
            ("OTEL_SERVICE_NAME", "acode-run"),
            (
                "TRACEPARENT",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ),
        ])
        .args([
            "run",
            plan.to_str().unwrap(),
            "--llm-url",
            &url,
            "--model",
            "test-model",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let stats: String = q(&t.db(), "SELECT telemetry_json FROM runs");
    let stats: Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(stats["dropped"], 0, "{stats}");
    let expected = stats["exported"].as_u64().unwrap() as usize;

    // Phoenix ingests in the background: ask until every span is there.
    let started = Instant::now();
    let spans = loop {
        let got = get(phoenix.port, "/v1/projects/default/spans?limit=100")
            .and_then(|v| v["data"].as_array().cloned())
            .unwrap_or_default();
        if got.len() >= expected {
            break got;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "Phoenix has {} of {expected} spans: {:?}",
            got.len(),
            got.iter().map(|s| &s["name"]).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let find = |name: &str| -> &Value {
        spans
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no {name:?} in {spans:#?}"))
    };
    let id = |s: &Value| {
        s["context"]["span_id"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let root = find("invoke_workflow fix-add");
    assert_eq!(
        root["context"]["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736",
        "{root}"
    );
    assert_eq!(root["parent_id"], "00f067aa0ba902b7", "{root}");
    let agent = find("invoke_agent fix");
    assert_eq!(agent["parent_id"], id(root));
    let chats: Vec<&Value> = spans
        .iter()
        .filter(|s| s["name"] == "chat test-model")
        .collect();
    assert_eq!(chats.len(), 3);
    for chat in &chats {
        assert_eq!(chat["parent_id"], id(agent));
        assert_eq!(
            chat["attributes"]["gen_ai.request.model"], "test-model",
            "{chat}"
        );
        assert_eq!(
            chat["attributes"]["gen_ai.usage.input_tokens"], 10,
            "{chat}"
        );
    }
    let edit = find("execute_tool file_edit");
    assert_eq!(edit["parent_id"], id(agent));
    assert_eq!(edit["attributes"]["gen_ai.tool.name"], "file_edit");
    assert_eq!(find("step check")["parent_id"], id(root));

    // The picture in docs/observability.md: the trace as Phoenix shows it.
    if std::env::var_os("ACODE_UPDATE_SCREENSHOT").is_some() {
        let project = get(phoenix.port, "/v1/projects")
            .and_then(|v| v["data"][0]["id"].as_str().map(str::to_string))
            .unwrap();
        let page = format!(
            "http://127.0.0.1:{}/projects/{project}/traces/4bf92f3577b34da6a3ce929d0e0e4736",
            phoenix.port
        );
        let shot = t.root.join("phoenix.png");
        let profile = t.root.join("chromium-profile");
        let status = Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--window-size=1400,900",
                "--virtual-time-budget=15000",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(format!("--screenshot={}", shot.display()))
            .arg(&page)
            .status()
            .unwrap();
        assert!(status.success());
        let png = std::fs::read(&shot).unwrap();
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000);
        std::fs::write(repo().join("docs/observability-phoenix.png"), &png).unwrap();
    }
    assert!(repo().join("docs/observability-phoenix.png").is_file());
}
