//! `acode-run mcp` driven over stdio by the official MCP SDK clients, as an agent built on them
//! would (issue 33): the Python SDK (`mcp` 2.x from PyPI) in its three modes — `legacy` (the
//! `initialize` handshake), `auto` (its default: probes `server/discover`, falls back) and pinned
//! `2026-07-28` — and the TypeScript SDK: `@modelcontextprotocol/sdk` (1.x, handshake only) and
//! its 2.x client package `@modelcontextprotocol/client` in `legacy`, `auto` and pinned
//! `2026-07-28`. Each lists the tools, calls every one (successes and refusals, whose structured
//! content the SDKs check against the declared `outputSchema`), and sees the protocol errors.
//!
//! The SDKs are installed from the package registries into the test's temporary directory, so
//! the tests are opt-in (`ACODE_E2E_NET=1`, which `.ci/run` sets); they need `python3` (3.10 or
//! later) with `pip`, and `node` (20 or later) with `npm`. The drivers are
//! `tests/support/mcp-sdk/python_client.py` and `tests/support/mcp-sdk/ts_client.mjs`.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use super::conformance::workspace_with_plans;
use crate::harness::*;

fn driver(name: &str) -> String {
    format!(
        "{}/tests/support/mcp-sdk/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// Runs `c` and returns its stdout, failing with its stderr when it fails.
fn output(mut c: Command, what: &str) -> String {
    let out = c
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What one SDK client reported: the version it negotiated (`None`: not to be checked), then
/// every tool, every call and every error as `acode-run mcp` must answer them.
fn check_report(report: &Value, who: &str, version: Option<&str>, run_id: &str) {
    let names = [
        "validate_plan",
        "preview_plan",
        "submit_plan",
        "plan_status",
        "list_runs",
        "show_run",
    ];
    assert_eq!(report["tools"], serde_json::json!(names), "{who}: {report}");
    assert_eq!(
        report["with_output_schema"],
        serde_json::json!(names),
        "{who}: every tool declares an outputSchema"
    );
    if let Some(version) = version {
        assert_eq!(report["protocol_version"], version, "{who}: {report}");
    }
    let call = |label: &str| {
        let c = &report["calls"][label];
        assert!(c.is_object(), "{who}: no call {label}: {report}");
        c.clone()
    };
    let ok = |label: &str| {
        let c = call(label);
        assert_eq!(c["is_error"], false, "{who} {label}: {c}");
        c["structured"].clone()
    };
    let refused = |label: &str| {
        let c = call(label);
        assert_eq!(c["is_error"], true, "{who} {label}: {c}");
        c
    };
    assert_eq!(ok("validate_good")["valid"], true);
    let bad = ok("validate_bad");
    assert_eq!(bad["valid"], false, "{who}: {bad}");
    assert_eq!(
        bad["problems"][0]["location"], "steps[0].tool",
        "{who}: {bad}"
    );
    assert!(bad["problems"][0]["line"].is_u64(), "{who}: {bad}");
    let preview = ok("preview");
    assert_eq!(preview["plan_id"], "good", "{who}: {preview}");
    assert_eq!(
        preview["approval"]["status"], "approved",
        "{who}: {preview}"
    );
    assert!(
        preview["preview"]
            .as_str()
            .unwrap_or_default()
            .contains("out.txt"),
        "{who}: {preview}"
    );
    assert!(
        refused("preview_bad")["text"]
            .as_str()
            .unwrap_or_default()
            .contains("file_raed"),
        "{who}"
    );
    let submitted = ok("submit");
    assert_eq!(submitted["written"], true, "{who}: {submitted}");
    assert_eq!(submitted["approved"], false, "{who}: {submitted}");
    let submit_bad = refused("submit_bad");
    assert_eq!(
        submit_bad["structured"]["problems"][0]["line"], 2,
        "{who}: a plan sent as text is told its own lines: {submit_bad}"
    );
    let status = ok("status");
    assert_eq!(status["status"], "approved", "{who}: {status}");
    assert_eq!(status["may_run"], true, "{who}: {status}");
    assert!(
        !ok("list_runs")["runs"].as_array().unwrap().is_empty(),
        "{who}"
    );
    assert_eq!(ok("show_run")["run"]["run_id"], run_id, "{who}");
    refused("show_run_missing");
    for (label, needle) in [
        ("unknown_tool", "unknown tool run_plan"),
        ("bad_arguments", "did you mean 'path'"),
    ] {
        let e = &report["errors"][label];
        assert_eq!(e["code"], -32602, "{who} {label}: {e}");
        assert!(
            e["message"].as_str().unwrap_or_default().contains(needle),
            "{who} {label}: {e}"
        );
    }
}

/// The report a driver printed (its last line).
fn report(stdout: &str, who: &str) -> Value {
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{who}: no report ({e}): {stdout}"))
}

#[test]
fn the_python_sdk_client_drives_acode_run_mcp_in_each_mode() {
    if !e2e_net("the MCP Python SDK") {
        return;
    }
    let (t, run_id) = workspace_with_plans();
    // Into a directory of its own, as the real-server test installs its servers.
    let site = t.root.join("sdk-py");
    let mut c = Command::new("python3");
    c.args(["-m", "pip", "install", "--quiet", "--target"])
        .arg(&site)
        .arg("mcp>=2,<3");
    output(c, "pip install mcp");
    let python = || {
        let mut c = Command::new("python3");
        c.env("PYTHONPATH", &site);
        c
    };
    let mut c = python();
    c.args([
        "-c",
        "import importlib.metadata as m; print(m.version('mcp'))",
    ]);
    let version = output(c, "the mcp version");
    eprintln!("MCP Python SDK {}", version.trim());
    for (mode, negotiated) in [
        ("legacy", "2025-11-25"),
        ("auto", "2026-07-28"),
        ("2026-07-28", "2026-07-28"),
    ] {
        let mut c = python();
        c.arg(driver("python_client.py"))
            .arg(env!("CARGO_BIN_EXE_acode-run"))
            .arg(&t.ws)
            .args([mode, &run_id]);
        clean_env(&mut c);
        let who = format!("python mcp {} mode {mode}", version.trim());
        let report = report(&output(c, &who), &who);
        check_report(&report, &who, Some(negotiated), &run_id);
        // A pinned client synthesizes its discovery instead of asking, so it has no server name.
        if mode != "2026-07-28" {
            assert_eq!(report["server"], "acode-run", "{who}: {report}");
        }
    }
}

/// Installs `packages` with npm into `dir` and returns the version installed of each.
pub(crate) fn npm_install(dir: &Path, packages: &[&str]) -> Vec<String> {
    let mut c = Command::new("npm");
    c.args(["install", "--silent", "--no-audit", "--no-fund", "--prefix"])
        .arg(dir)
        .args(packages);
    output(c, "npm install");
    packages
        .iter()
        .map(|p| {
            let name = p.rsplit_once('@').map_or(*p, |(n, _)| n);
            let manifest = dir.join("node_modules").join(name).join("package.json");
            let m: Value =
                serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
            format!("{name} {}", m["version"].as_str().unwrap_or("?"))
        })
        .collect()
}

#[test]
fn the_typescript_sdk_clients_drive_acode_run_mcp_in_each_mode() {
    if !e2e_net("the MCP TypeScript SDK") {
        return;
    }
    let (t, run_id) = workspace_with_plans();
    let dir = t.root.join("sdk-node");
    let versions = npm_install(
        &dir,
        &[
            "@modelcontextprotocol/sdk@1",
            "@modelcontextprotocol/client@2",
        ],
    );
    eprintln!("MCP TypeScript SDK: {}", versions.join(", "));
    for (flavour, mode, negotiated) in [
        ("sdk", "legacy", "2025-11-25"),
        ("client", "legacy", "2025-11-25"),
        ("client", "auto", "2026-07-28"),
        ("client", "2026-07-28", "2026-07-28"),
    ] {
        let mut c = Command::new("node");
        c.arg(driver("ts_client.mjs"))
            .arg(&dir)
            .args([flavour, mode])
            .arg(env!("CARGO_BIN_EXE_acode-run"))
            .arg(&t.ws)
            .arg(&run_id);
        clean_env(&mut c);
        let who = format!("{} ({flavour}) mode {mode}", versions.join(", "));
        let report = report(&output(c, &who), &who);
        check_report(&report, &who, Some(negotiated), &run_id);
        assert_eq!(report["server"], "acode-run", "{who}: {report}");
    }
}
