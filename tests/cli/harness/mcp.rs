//! The scripted MCP server `acode-mcp-fixture` as a policy's server, and `acode-run mcp` driven on
//! pipes: what the MCP tests and the approval-agreement tests share.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};

use serde_json::{Value, json};

use super::*;

/// `PATH` with the fixture's directory first, so the policy names it as a bare program.
pub fn path_with_fixture() -> String {
    path_with(
        Path::new(env!("CARGO_BIN_EXE_acode-mcp-fixture"))
            .parent()
            .unwrap(),
    )
}

/// Writes a policy declaring server `fx` run as `acode-mcp-fixture ARGS...` with `tools`, and
/// `extra` merged into the server entry.
pub fn policy(t: &TestDir, args: &[&str], tools: &[&str], extra: Value) {
    let mut command = vec!["acode-mcp-fixture".to_string()];
    command.extend(args.iter().map(|s| s.to_string()));
    let mut server = json!({"command": command, "tools": tools, "confirm": false});
    for (k, v) in extra.as_object().unwrap() {
        server[k] = v.clone();
    }
    t.file(
        "acode-policy.json",
        &json!({"mcp": {"servers": {"fx": server}}}).to_string(),
    );
}

/// An `acode-run` command in the workspace with the fixture on `PATH`, and `envs`.
pub fn cmd(t: &TestDir, envs: &[(&str, &str)]) -> Command {
    let mut c = t.cmd();
    c.env("PATH", path_with_fixture());
    for (k, v) in envs {
        c.env(k, v);
    }
    c
}

/// Runs the binary with `args` with the fixture on `PATH`, and `envs`.
pub fn run(t: &TestDir, args: &[&str], envs: &[(&str, &str)]) -> Output {
    cmd(t, envs).args(args).output().unwrap()
}

/// Approves `plan` (by `tester`) with the fixture on `PATH`, asserting success.
pub fn approve(t: &TestDir, plan: &Path) {
    let out = run(
        t,
        &["approve", plan.to_str().unwrap(), "--by", "tester"],
        &[],
    );
    assert_eq!(code(&out), 0, "approve failed: {}", stderr(&out));
}

/// `acode-run mcp` on pipes, one JSON-RPC message per line.
pub struct Served {
    pub child: Child,
    pub stdin: ChildStdin,
    pub stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl Served {
    pub fn start(t: &TestDir) -> Served {
        Served::start_cmd(t.cmd())
    }

    /// `cmd` (an `acode-run` command) with `mcp` added, on pipes.
    pub fn start_cmd(mut cmd: std::process::Command) -> Served {
        let mut child = cmd
            .arg("mcp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Served {
            child,
            stdin,
            stdout,
            next_id: 0,
        }
    }

    /// The result of `tools/call` of `tool` with `arguments` (handshake era, no `initialize`
    /// needed: the server answers each request on its own).
    pub fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": arguments}))["result"].clone()
    }

    pub fn send(&mut self, message: &Value) {
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Sends a request with `params` and returns the reply.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        self.send(
            &json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}),
        );
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{method}: {e}: {line:?}"))
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
