//! `mcp__SERVER__TOOL`: the tools of the MCP servers a policy declares (SPEC §7b, docs/mcp.md).
//!
//! Each allowed tool is registered as a tool of its own, with the description and input schema
//! the approval pinned, so the model sees the approved text and every call (a plan's or a
//! model's) goes through the same schema validation, confirmation and recording as a built-in
//! tool. A server is started once per run, the first time one of its tools is called, as a
//! command runs (the run's sandbox, limits and network policy; an environment of `PATH` and the
//! names the policy lists), and compared with its pins before that first call: any difference
//! fails the call with [`ErrorKind::McpChanged`] (exit 36). [`Tool::shutdown`] stops every server
//! at the end of the run.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::{Artifact, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};
use crate::error::ErrorKind;
use crate::mcp::HEADER_MISMATCH;
use crate::mcp::client::{Client, ListedTool, McpError};
use crate::mcp::pins::{self, ServerPin};
use crate::net::agent::CaFile;
use crate::policy::host::program;
use crate::policy::{McpServer, Policy, mcp_tool_name};
use crate::process::{CommandSpec, spawn};
use crate::sandbox::OsSandbox;
use crate::workspace::Workspace;

/// The CPU-time budget a server gets for its whole life (its `RLIMIT_CPU`), in seconds.
const SERVER_CPU_S: u64 = 3600;
/// Bytes of a raw result kept as the `mcp_result` artifact.
const RESULT_CAP: usize = 1024 * 1024;

/// The servers of one run: how to start them, what was approved, and the ones started.
///
/// Each server has its own lock: one server's calls run one at a time (a stdio server gets one
/// request at a time, and its stderr and refused requests are attributed to the call that
/// caused them), while calls to different servers run at the same time under `--jobs`.
pub struct McpRuntime {
    servers: BTreeMap<String, McpServer>,
    pins: BTreeMap<String, ServerPin>,
    /// Per declared server: its client once started (`None` before, or after it was stopped).
    clients: BTreeMap<String, Mutex<Option<Client>>>,
}

/// [`Client::launch`] on [`spawn::on_lasting_thread`] (on the calling thread if that one cannot
/// run): under `--jobs` a step runs on a worker thread that ends with the step, and a server it
/// started would be killed (`PR_SET_PDEATHSIG`) before the next call.
fn launch_lasting(name: &str, spec: &CommandSpec) -> Result<Client, McpError> {
    let (owned_name, owned_spec) = (name.to_string(), spec.clone());
    spawn::on_lasting_thread(move || Client::launch(&owned_name, &owned_spec))
        .unwrap_or_else(|_| Client::launch(name, spec))
}

/// Why a server could not be started and its tools listed: the message (naming the server, with
/// a sanitised excerpt of its stderr when it wrote any) and its whole stderr, capped, for the
/// record (the `mcp_stderr` artifact of the call that tried to start it).
#[derive(Debug)]
pub struct StartFailure {
    /// What went wrong, for a person.
    pub message: String,
    /// What the server wrote on stderr (unsanitised; empty when it never ran).
    pub stderr: String,
    /// The HTTP requests made to a remote server meanwhile (recorded on the call).
    pub network: Vec<crate::policy::network::NetworkRequest>,
}

impl std::fmt::Display for StartFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl McpRuntime {
    /// Stops every server started (the end of a run, a failure, Ctrl-C); the network requests
    /// made since their last call (a remote server's closing `DELETE` and long-lived streams).
    pub fn shutdown(&self) -> Vec<crate::policy::network::NetworkRequest> {
        let mut network = Vec::new();
        for slot in self.clients.values() {
            // A poisoned slot still holds a client to stop.
            let mut slot = slot
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(mut client) = slot.take() {
                client.stop();
                network.extend(client.take_network());
            }
        }
        network
    }
}

impl Drop for McpRuntime {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// One allowed tool of one server.
pub struct McpTool {
    name: &'static str,
    description: &'static str,
    server: String,
    tool: String,
    schema: Value,
    confirm: bool,
    runtime: Arc<McpRuntime>,
}

/// Registers the allowed tools of every server `policy` declares. With `pins` (a run of an
/// approved plan) each tool carries its approved description and schema; without (validation
/// before approval) a placeholder description and any object as arguments. `Err` when a pin is
/// missing or does not match its own hash.
pub fn register(
    registry: &mut ToolRegistry,
    policy: &Policy,
    approved: Option<&BTreeMap<String, ServerPin>>,
) -> Result<(), String> {
    if policy.mcp.is_empty() {
        return Ok(());
    }
    let runtime = Arc::new(McpRuntime {
        servers: policy.mcp.servers.clone(),
        pins: approved.cloned().unwrap_or_default(),
        clients: policy
            .mcp
            .servers
            .keys()
            .map(|name| (name.clone(), Mutex::new(None)))
            .collect(),
    });
    for (server, config) in &policy.mcp.servers {
        let pin = approved.map(|p| p.get(server));
        for tool in &config.tools {
            let (description, schema) = match pin {
                None => (
                    format!(
                        "Tool {tool} of MCP server {server} (not pinned yet: approve the plan)."
                    ),
                    json!({"type": "object"}),
                ),
                Some(None) => {
                    return Err(format!(
                        "MCP server {server} is not pinned in the approval: approve the plan again"
                    ));
                }
                Some(Some(pin)) => match pin.tools.get(tool) {
                    Some(t) if t.is_consistent(tool) => (t.description.clone(), t.schema()),
                    Some(_) => {
                        return Err(format!(
                            "the approval's pin of MCP tool {tool} (server {server}) does not match \
                             its own hash: approve the plan again"
                        ));
                    }
                    None => {
                        return Err(format!(
                            "MCP tool {tool} of server {server} is not pinned in the approval: \
                             approve the plan again"
                        ));
                    }
                },
            };
            // Registered names and descriptions are `&'static str`: one small allocation per
            // allowed tool for the life of the process.
            let name: &'static str = Box::leak(mcp_tool_name(server, tool).into_boxed_str());
            let description: &'static str = Box::leak(description.into_boxed_str());
            registry.register(Arc::new(McpTool {
                name,
                description,
                server: server.clone(),
                tool: tool.clone(),
                schema,
                confirm: config.confirms(tool),
                runtime: runtime.clone(),
            }));
        }
    }
    Ok(())
}

/// The built-in tools plus the MCP tools of `policy` (see [`register`]).
pub fn registry(
    policy: &Policy,
    approved: Option<&BTreeMap<String, ServerPin>>,
) -> Result<ToolRegistry, String> {
    let mut registry = ToolRegistry::builtin();
    register(&mut registry, policy, approved)?;
    Ok(registry)
}

/// The command that starts `server`, prepared by the run's sandbox: its program resolved like a
/// command's (a bare name on `PATH`, or a workspace path), the environment `PATH` plus the names
/// listed (never the runner's own secrets), the workspace as working directory.
pub fn server_spec(
    server: &McpServer,
    workspace: &Workspace,
    sandbox: &OsSandbox,
) -> Result<CommandSpec, String> {
    let env = server_env(server);
    let program = server_program(server, workspace)
        .ok_or("a remote server (url) starts no program")?
        .map_err(|e| format!("{}: {e}", server.command[0]))?;
    let mut spec = CommandSpec::new(server.command.clone(), workspace.root().to_path_buf());
    spec.program = Some(program.exec.clone());
    spec.program_roots = program.roots.clone();
    spec.program_by_name = program.found_by_name;
    spec.env = env;
    spec.timeout = Duration::from_secs(SERVER_CPU_S);
    sandbox.prepare_service(&mut spec, workspace).map_err(|e| {
        format!(
            "cannot confine it in the {} sandbox: {e}",
            sandbox.describe()
        )
    })?;
    Ok(spec)
}

/// The program that starts `server`, resolved as it will be when it starts (a bare name on the
/// `PATH` it gets, or a workspace path): what `validate` checks and `preview` shows, so a server
/// that cannot start is refused before anyone approves the plan. `None` for a remote server (`url`),
/// which starts no program.
pub fn server_program(
    server: &McpServer,
    workspace: &Workspace,
) -> Option<Result<program::Program, program::ProgramError>> {
    let first = server.command.first()?;
    let path_var = server_env(server)
        .into_iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v);
    Some(program::resolve(
        first,
        workspace,
        workspace.root(),
        path_var.as_deref(),
    ))
}

/// The environment `server` gets: `PATH` plus the names it lists, never the runner's secrets.
fn server_env(server: &McpServer) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = Vec::new();
    for name in std::iter::once("PATH").chain(server.env.iter().map(String::as_str)) {
        if crate::redact::is_runner_secret_var(name) || env.iter().any(|(k, _)| k == name) {
            continue;
        }
        if let Ok(value) = std::env::var(name) {
            env.push((name.to_string(), value));
        }
    }
    env
}

/// A server started and its tools listed.
pub struct Started {
    /// The client, connected.
    pub client: Client,
    /// The tools it lists.
    pub listed: Vec<ListedTool>,
    /// SHA-256 of the CA file a remote server was trusted under (`ca_cert`), as read for this
    /// connection.
    pub ca_cert_sha256: Option<String>,
}

/// The CA file a remote server is trusted under (`ca_cert`), read once for one connection.
fn server_ca(name: &str, server: &McpServer) -> Result<Option<CaFile>, String> {
    server
        .ca_cert
        .as_deref()
        .map(|path| {
            CaFile::load(path).map_err(|why| {
                format!(
                    "MCP server {name}: mcp.servers.{name}.ca_cert {}: {why}",
                    path.display()
                )
            })
        })
        .transpose()
}

/// Starts `server` and lists its tools (for `approve` and `mcp tools`).
pub fn start_and_list(
    name: &str,
    server: &McpServer,
    workspace: &Workspace,
    sandbox: &OsSandbox,
    cancel: &std::sync::atomic::AtomicBool,
) -> Result<Started, StartFailure> {
    let ca = server_ca(name, server).map_err(|message| StartFailure {
        message,
        stderr: String::new(),
        network: Vec::new(),
    })?;
    let (client, listed) =
        start_with(name, server, workspace, sandbox, cancel, false, ca.as_ref())?;
    Ok(Started {
        client,
        listed,
        ca_cert_sha256: ca.map(|c| c.sha256),
    })
}

/// [`start_and_list`], the process started on the lasting thread when `lasting` (a run's servers).
fn start_with(
    name: &str,
    server: &McpServer,
    workspace: &Workspace,
    sandbox: &OsSandbox,
    cancel: &std::sync::atomic::AtomicBool,
    lasting: bool,
    ca: Option<&CaFile>,
) -> Result<(Client, Vec<ListedTool>), StartFailure> {
    let failure = |message: String, stderr: String| StartFailure {
        message,
        stderr,
        network: Vec::new(),
    };
    let launched = match &server.url {
        // A remote server: checked against the run's network rules (the proxy's, with
        // `registry:` entries resolved) before any request.
        Some(url) => {
            let rules = sandbox.proxy().map(|p| p.rules()).unwrap_or_default();
            crate::mcp::http::connect(name, url, &server.headers, &server.env, rules, ca)
        }
        None => {
            let spec = server_spec(server, workspace, sandbox)
                .map_err(|e| failure(format!("MCP server {name}: {e}"), String::new()))?;
            if lasting {
                launch_lasting(name, &spec)
            } else {
                Client::launch(name, &spec)
            }
        }
    };
    let mut client = launched.map_err(|e| failure(e.to_string(), String::new()))?;
    let listed = client
        .handshake_within(server.startup_timeout(), cancel)
        .and_then(|()| {
            client
                .list_tools(server.startup_timeout(), cancel)
                .map_err(|e| client.failed_to_start(e))
        });
    match listed {
        Ok(listed) => Ok((client, listed)),
        Err(e) => Err(StartFailure {
            message: e.to_string(),
            stderr: e.startup_stderr().to_string(),
            network: client.take_network(),
        }),
    }
}

/// Starts every server `policy` declares, lists its tools and pins the allowed ones (what
/// `approve` records). Each server is stopped once pinned.
pub fn pin_servers(
    policy: &Policy,
    workspace: &Workspace,
    sandbox: &OsSandbox,
) -> Result<BTreeMap<String, ServerPin>, String> {
    let cancel = std::sync::atomic::AtomicBool::new(false);
    let mut out = BTreeMap::new();
    for (name, server) in &policy.mcp.servers {
        let started =
            start_and_list(name, server, workspace, sandbox, &cancel).map_err(|e| e.message)?;
        let pin = pins::pin_server(
            started.client.identity(),
            &started.listed,
            &server.tools,
            started.ca_cert_sha256.as_deref(),
        )
        .map_err(|e| format!("MCP server {name}: {e}"))?;
        out.insert(name.clone(), pin);
    }
    Ok(out)
}

/// "MCP server changed since approval" with what changed.
fn changed(server: &str, what: &[String]) -> ToolOutput {
    ToolOutput::failed(
        ErrorKind::McpChanged,
        format!(
            "MCP server changed since approval: server {server}: {}",
            what.join("; ")
        ),
    )
}

impl McpTool {
    /// Starts the server if this run has not yet, checking it against its pins first.
    fn ensure_started(
        &self,
        slot: &mut Option<Client>,
        ctx: &ToolContext,
    ) -> Result<(), Box<ToolOutput>> {
        if slot.is_some() {
            return Ok(());
        }
        let (Some(config), Some(pin)) = (
            self.runtime.servers.get(&self.server),
            self.runtime.pins.get(&self.server),
        ) else {
            return Err(Box::new(ToolOutput::failed(
                ErrorKind::McpChanged,
                format!(
                    "MCP server {} is not pinned by an approval: approve the plan first",
                    self.server
                ),
            )));
        };
        // The CA file a remote server is trusted under is checked against its pin before any
        // request is sent under it.
        let ca = server_ca(&self.server, config)
            .map_err(|e| Box::new(ToolOutput::failed(ErrorKind::ToolFailed, e)))?;
        if let Some(what) = pins::ca_difference(pin, ca.as_ref().map(|c| c.sha256.as_str())) {
            return Err(Box::new(changed(&self.server, &[what])));
        }
        let (mut client, listed) = start_with(
            &self.server,
            config,
            ctx.workspace,
            ctx.sandbox,
            ctx.cancel,
            true,
            ca.as_ref(),
        )
        .map_err(|e| {
            let mut failed = ToolOutput::failed(ErrorKind::ToolFailed, e.message);
            if !e.stderr.is_empty() {
                failed.artifacts.push(Artifact::new("mcp_stderr", e.stderr));
            }
            failed.network = e.network;
            Box::new(failed)
        })?;
        let what = pins::differences(pin, client.identity(), &listed);
        if !what.is_empty() {
            let mut refused = changed(&self.server, &what);
            refused.network = client.take_network();
            let stderr = client.take_stderr();
            if !stderr.is_empty() {
                refused.artifacts.push(Artifact::new("mcp_stderr", stderr));
            }
            return Err(Box::new(refused));
        }
        *slot = Some(client);
        Ok(())
    }

    /// After `notifications/tools/list_changed`, or a call refused with `HeaderMismatch`
    /// (`header_mismatch`): lists the tools again and compares them with the pins. `Some(what
    /// changed)` when a pinned tool (or the identity) differs; the server is then stopped. A list
    /// change that leaves every pinned tool as approved is not a change.
    fn recheck(
        &self,
        slot: &mut Option<Client>,
        ctx: &ToolContext,
        header_mismatch: bool,
    ) -> Option<Vec<String>> {
        let client = slot.as_mut()?;
        let announced = client.take_list_changed();
        if !announced && !header_mismatch {
            return None;
        }
        let pin = self.runtime.pins.get(&self.server)?;
        let startup = self
            .runtime
            .servers
            .get(&self.server)
            .map_or(Duration::from_secs(30), McpServer::startup_timeout);
        let mut what = match client.list_tools(startup, ctx.cancel) {
            Ok(listed) => pins::differences(pin, client.identity(), &listed),
            Err(e) => vec![format!("its tools could not be listed again: {e}")],
        };
        if what.is_empty() {
            return None;
        }
        let why = if header_mismatch {
            "it refused the call's headers (HeaderMismatch), and its tools, listed again as the \
             revision asks, are not as approved"
        } else {
            "it announced that its tool list changed (notifications/tools/list_changed)"
        };
        what.insert(0, why.into());
        *slot = None;
        Some(what)
    }
}

/// The tool's output for a `tools/call` result: text content for the model; images, audio and
/// resources stored as artifacts and summarised; `isError` a failed call the model sees.
fn to_output(full_name: &str, result: &Value) -> ToolOutput {
    let mut texts: Vec<String> = Vec::new();
    let mut artifacts: Vec<Artifact> = Vec::new();
    let content = result
        .get("content")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for item in &content {
        let kind = item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("unknown");
        match kind {
            "text" => texts.push(
                item.get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            ),
            "image" | "audio" => {
                let mime = item.get("mimeType").and_then(Value::as_str).unwrap_or("?");
                let bytes = item
                    .get("data")
                    .and_then(Value::as_str)
                    .map_or(0, |d| d.len() / 4 * 3);
                let artifact = format!("mcp_{kind}");
                texts.push(format!(
                    "[{kind} {mime}, about {bytes} bytes: stored as artifact {artifact}]"
                ));
                artifacts.push(Artifact::new(&artifact, item.to_string()));
            }
            other => {
                let resource = item.get("resource").unwrap_or(item);
                let uri = resource.get("uri").and_then(Value::as_str).unwrap_or("?");
                texts.push(format!(
                    "[{other} {}: stored as artifact mcp_resource]",
                    crate::mcp::sanitize_line(uri, 200)
                ));
                artifacts.push(Artifact::new("mcp_resource", item.to_string()));
            }
        }
    }
    if texts.is_empty()
        && let Some(structured) = result.get("structuredContent")
    {
        texts.push(structured.to_string());
    }
    let text = texts.join("\n");
    let mut output = if result.get("isError").and_then(Value::as_bool) == Some(true) {
        let first = text.lines().next().unwrap_or("no message");
        let mut o = ToolOutput::failed(
            ErrorKind::ToolFailed,
            format!(
                "MCP tool {full_name} reported an error: {}",
                crate::mcp::sanitize_line(first, 300)
            ),
        );
        o.content = text;
        o
    } else {
        ToolOutput::ok(text)
    };
    let raw = result.to_string();
    let mut kept = Artifact::new("mcp_result", raw.clone());
    if raw.len() > RESULT_CAP {
        kept.content = super::command::tail(&raw, RESULT_CAP).to_string();
        kept.truncated = true;
    }
    output.artifacts.push(kept);
    output.artifacts.extend(artifacts);
    output
}

impl Tool for McpTool {
    fn name(&self) -> &'static str {
        self.name
    }

    fn description(&self) -> &'static str {
        self.description
    }

    fn schema(&self) -> Value {
        self.schema.clone()
    }

    fn idempotent(&self) -> bool {
        false
    }

    fn check(&self, _args: &Value, _ctx: &ToolContext) -> Result<(), ToolError> {
        // The schema (the approved one) was checked by the caller; the server decides the rest.
        Ok(())
    }

    fn needs_confirmation(&self, _args: &Value, _ctx: &ToolContext) -> bool {
        self.confirm
    }

    fn summary(&self, args: &Value) -> String {
        let args = args.to_string();
        let shown = crate::mcp::sanitize_line(&args, 80);
        format!("{} {shown}", self.tool)
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let Some(Ok(mut slot)) = self.runtime.clients.get(&self.server).map(Mutex::lock) else {
            return Err(ToolError::Failed(format!(
                "the client state of MCP server {} is missing or poisoned",
                self.server
            )));
        };
        let slot = &mut *slot;
        if let Err(refused) = self.ensure_started(slot, ctx) {
            return Ok(*refused);
        }
        if let Some(what) = self.recheck(slot, ctx, false) {
            return Ok(changed(&self.server, &what));
        }
        let limit = self
            .runtime
            .servers
            .get(&self.server)
            .map_or(ctx.timeout, |s| s.call_timeout().min(ctx.timeout));
        let Some(client) = slot.as_mut() else {
            return Err(ToolError::Failed("the MCP server is not running".into()));
        };
        let request = Artifact::new(
            "mcp_request",
            json!({"server": self.server, "tool": self.tool, "arguments": args}).to_string(),
        );
        let outcome = client.call_tool(&self.tool, args, limit, ctx.cancel);
        let stderr = client.take_stderr();
        let mut network = client.take_network();
        let refused = client.take_refused();
        // A list change announced during the call: the result may come from a changed tool, so
        // it only counts when the pinned tools are still as approved. A `HeaderMismatch` asks
        // the client to list the tools again too (the marks it mirrored may have changed).
        let mismatch =
            matches!(&outcome, Err(McpError::Rpc { code, .. }) if *code == HEADER_MISMATCH);
        let rechecked = (outcome.is_ok() || mismatch)
            .then(|| self.recheck(slot, ctx, mismatch))
            .flatten();
        if let Some(client) = slot.as_mut() {
            network.extend(client.take_network());
        }
        let mut output = match (outcome, rechecked) {
            (_, Some(what)) => changed(&self.server, &what),
            (Ok(result), None) => to_output(self.name, &result),
            (Err(e), None) => {
                let kind = match &e {
                    McpError::Timeout { .. } => ErrorKind::Timeout,
                    McpError::Interrupted { .. } => ErrorKind::Interrupted,
                    _ => ErrorKind::ToolFailed,
                };
                // Only a refusal (an error, or a request for input it does not get) leaves the
                // server in a known state; anything else stops it.
                if !matches!(e, McpError::Rpc { .. } | McpError::InputRequired { .. }) {
                    *slot = None;
                }
                let message = match &e {
                    McpError::Timeout { .. } => {
                        format!("{e}; notifications/cancelled was sent and the server was stopped")
                    }
                    _ if mismatch => format!(
                        "{e}; its tools, listed again, are as approved, so the headers sent \
                         follow the approved schema"
                    ),
                    _ => e.to_string(),
                };
                ToolOutput::failed(kind, message)
            }
        };
        output.artifacts.insert(0, request);
        output.network = network;
        if !stderr.is_empty() {
            output.artifacts.push(Artifact::new("mcp_stderr", stderr));
        }
        if !refused.is_empty() {
            let note = format!(
                "refused requests from the MCP server (acode-run offers no sampling, \
                 elicitation or roots): {}",
                refused.join(", ")
            );
            output.content = format!("note: {note}\n{}", output.content);
            output
                .artifacts
                .push(Artifact::new("mcp_refused", refused.join("\n")));
        }
        Ok(output)
    }

    fn shutdown(&self) -> Vec<crate::policy::network::NetworkRequest> {
        self.runtime.shutdown()
    }
}
