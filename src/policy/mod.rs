//! The policy: what a workspace allows beyond the built-in defaults.
//!
//! Loaded from `acode-policy.json` in the workspace or from `--policy FILE`. Every field is optional;
//! an unknown field is an error so that a typo cannot silently loosen or tighten the sandbox.

pub mod commands;
pub mod credentials;
pub mod env;
pub mod glob;
pub mod host;
pub mod narrow;
pub mod network;
pub mod view;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::policy::network::NetworkPolicy;
use std::collections::BTreeMap;

/// The most steps a run may take at once, wherever the number comes from (`--jobs`, the policy's
/// `jobs`, the plan's `defaults.jobs`).
pub const MAX_JOBS: usize = 256;

/// Executables a plan may run without any policy file (SPEC §6).
pub const DEFAULT_ALLOWLIST: &[&str] = &[
    "cargo", "rustc", "git", "npm", "node", "python3", "make", "go", "ls", "cat", "echo", "true",
    "false", "grep", "wc", "head", "tail", "sort",
];

/// Environment variables a child process keeps (SPEC §6); everything else is cleared.
pub const DEFAULT_ENV_PASSTHROUGH: &[&str] = &[
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TERM",
    "TMPDIR",
    "CARGO_HOME",
    "RUSTUP_HOME",
];

/// Tools that ask for confirmation unless the policy says otherwise.
pub const DEFAULT_CONFIRM_TOOLS: &[&str] = &["file_delete"];

/// Which OS-level sandbox confines child processes (SPEC §6 "OS sandbox"). As a request (flag,
/// policy) any of the four; as the mode a run actually used, never `Auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// No OS sandbox: only the in-process checks (and the resource limits) apply.
    None,
    /// Landlock in each command (Linux ≥ 5.13); fail closed if the kernel lacks it.
    Landlock,
    /// Always bubblewrap; fail closed if it cannot run.
    Bwrap,
    /// Bubblewrap when it works on this machine, else Landlock, else none with a warning.
    #[default]
    Auto,
}

impl SandboxMode {
    /// The name used on the command line, in the policy, the database and events.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::None => "none",
            SandboxMode::Landlock => "landlock",
            SandboxMode::Bwrap => "bwrap",
            SandboxMode::Auto => "auto",
        }
    }
}

impl std::fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for SandboxMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(SandboxMode::None),
            "landlock" => Ok(SandboxMode::Landlock),
            "bwrap" => Ok(SandboxMode::Bwrap),
            "auto" => Ok(SandboxMode::Auto),
            other => Err(format!(
                "unknown sandbox mode {other:?} (expected auto, landlock, bwrap or none)"
            )),
        }
    }
}

/// Resource limits; defaults follow SPEC §6 and §7.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Bytes kept of each of a command's stdout and stderr; the rest is counted and dropped.
    pub output_bytes: usize,
    /// Bytes `file_read` returns before marking the content truncated.
    pub read_bytes: usize,
    /// Default timeout for a step's tool call when the plan gives none, in seconds.
    pub timeout_s: u64,
    /// Characters of a tool result handed back to an LLM.
    pub tool_result_chars: usize,
    /// Upper bound on `max_results` for `file_search` and entries for listings.
    pub max_results: usize,
    /// Address space of each command process in MiB (`RLIMIT_AS`); 0 = not limited.
    pub memory_mb: u64,
    /// Largest file a command may write, in MiB (`RLIMIT_FSIZE`); 0 = not limited.
    pub file_size_mb: u64,
    /// CPU seconds per command process (`RLIMIT_CPU`); `None` = the step's timeout.
    pub cpu_s: Option<u64>,
    /// Open file descriptors per command process (`RLIMIT_NOFILE`); 0 = not limited.
    pub open_files: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            output_bytes: 10 * 1024 * 1024,
            read_bytes: 1024 * 1024,
            timeout_s: 300,
            tool_result_chars: 8000,
            max_results: 10_000,
            memory_mb: 4096,
            file_size_mb: 1024,
            cpu_s: None,
            open_files: 1024,
        }
    }
}

/// The workspace policy (see the module docs).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Policy {
    /// The command allowlist, replacing [`DEFAULT_ALLOWLIST`] when given (so a workspace can drop
    /// interpreters such as `python3` and `node`); `None` keeps the default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commands: Option<Vec<String>>,
    /// Executables allowed in addition to the allowlist ([`Policy::commands`] or the default).
    pub allow_commands: Vec<String>,
    /// Executables that run without confirmation: the built-in allowlist and the programs the
    /// policy adds (`"auto_approve_commands": ["grep", "rg"]` extends it, so adding one program
    /// never makes `echo` need confirmation), or exactly the policy's list when it says
    /// `{"replace": [...]}`. Holds the effective list (what the approval's policy hash covers).
    #[serde(deserialize_with = "auto_approve_list")]
    pub auto_approve_commands: Vec<String>,
    /// Tools that always need confirmation (default: `file_delete`).
    pub confirm_tools: Vec<String>,
    /// Extra environment variables passed through to children.
    pub env_passthrough: Vec<String>,
    /// OS sandbox mode; `--sandbox` overrides it.
    pub sandbox: SandboxMode,
    /// Resource limits.
    pub limits: Limits,
    /// Absolute host paths commands under bwrap may read (mounted read-only), beyond the system
    /// directories, `/etc` and the runner's cargo/rustup homes. Why: bwrap shows commands only
    /// what programs need, so a toolchain elsewhere (`/opt/node`, `/nix/store`) must be named.
    /// Never name a directory holding a UNIX socket: a read-only mount does not stop `connect`.
    pub read_paths: Vec<PathBuf>,
    /// Hosts commands may reach through the run's proxy (`{"allow": [...]}`); none by default.
    /// Left out of the serialised form when empty, so policies written before it keep their hash.
    #[serde(skip_serializing_if = "NetworkPolicy::is_empty")]
    pub network: NetworkPolicy,
    /// Workspace-root entries every command may create under Landlock (`node_modules/`,
    /// `report.xml`); a step adds its own. Left out of the serialised form when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub creates: Vec<String>,
    /// Steps run at once when the plan's dependencies allow it (`--jobs` overrides it); the
    /// default is 1 (docs/parallel.md). Left out of the serialised form when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jobs: Option<usize>,
    /// MCP servers whose tools plans may use (`mcp.servers.NAME`, SPEC §7b). Left out of the
    /// serialised form when empty, so policies written before it keep their hash.
    #[serde(skip_serializing_if = "McpPolicy::is_empty")]
    pub mcp: McpPolicy,
    /// Who may approve plans that run under this policy (`approvals.allowed_signers`,
    /// `required`, `require_principal`; docs/approvals.md). Left out of the serialised form when
    /// empty, so policies written before it keep their hash.
    #[serde(skip_serializing_if = "ApprovalsPolicy::is_empty")]
    pub approvals: ApprovalsPolicy,
    /// Model name → its price (`prices`), so a plan's `cost_usd` budget can be counted. Part of
    /// the policy's hash like every setting; left out of the serialised form when empty.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub prices: std::collections::BTreeMap<String, Price>,
    /// What OpenTelemetry traces may carry (`telemetry`, docs/observability.md). Left out of the
    /// serialised form when default.
    #[serde(skip_serializing_if = "Telemetry::is_default")]
    pub telemetry: Telemetry,
}

/// The `approvals` section of the policy (issue 42): with `allowed_signers`, only approvals
/// signed with SSH keys listed in that file (git's format) let a plan run, the approver shown is
/// the principal the file gives the key, and the shared HMAC key no longer suffices.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct ApprovalsPolicy {
    /// Where a relative `allowed_signers` is read from when the policy file lies outside the
    /// workspace (a policy shipped beside a plan for many repositories, issue 48): that file's
    /// directory, so a repository can never name its own signers. `None`: the workspace. Not a
    /// setting: left out of the policy's meaning (equality) and hash.
    #[serde(skip)]
    pub base: Option<PathBuf>,
    /// The `allowed_signers` file, relative to the workspace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_signers: Option<String>,
    /// How many distinct principals must have signed (default 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub required: Option<usize>,
    /// For plans that reach further, principals of which at least one must be among the
    /// signers: `{"network": ["security@example.com"]}`.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub require_principal: std::collections::BTreeMap<Reach, Vec<String>>,
}

/// What makes a plan reach further, for [`ApprovalsPolicy::require_principal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reach {
    /// Every plan.
    Always,
    /// The policy lets commands reach a network host (`network.allow` is not empty).
    Network,
    /// The policy passes environment variables beyond the defaults (`env_passthrough`).
    EnvPassthrough,
    /// The policy declares MCP servers.
    Mcp,
    /// The policy allows programs beyond the default allowlist (`commands`, `allow_commands`).
    Commands,
    /// The plan has an agent step (a model chooses the tool calls).
    Agent,
}

impl Reach {
    /// Every condition, in the order messages list them.
    pub const ALL: [Reach; 6] = [
        Reach::Always,
        Reach::Network,
        Reach::EnvPassthrough,
        Reach::Mcp,
        Reach::Commands,
        Reach::Agent,
    ];

    /// The name the policy file uses.
    pub fn name(self) -> &'static str {
        match self {
            Reach::Always => "always",
            Reach::Network => "network",
            Reach::EnvPassthrough => "env_passthrough",
            Reach::Mcp => "mcp",
            Reach::Commands => "commands",
            Reach::Agent => "agent",
        }
    }

    /// Why a plan under `policy` with (or without) agent steps meets this condition, if it does.
    pub fn holds(self, policy: &Policy, has_agent_step: bool) -> Option<&'static str> {
        match self {
            Reach::Always => Some("every plan"),
            Reach::Network => {
                (!policy.network.is_empty()).then_some("the policy allows network hosts")
            }
            Reach::EnvPassthrough => (!policy.env_passthrough.is_empty())
                .then_some("the policy passes environment variables through (env_passthrough)"),
            Reach::Mcp => (!policy.mcp.is_empty()).then_some("the policy declares MCP servers"),
            Reach::Commands => (policy.commands.is_some() || !policy.allow_commands.is_empty())
                .then_some("the policy allows programs beyond the default allowlist"),
            Reach::Agent => has_agent_step.then_some("the plan has an agent step"),
        }
    }
}

impl PartialEq for ApprovalsPolicy {
    fn eq(&self, other: &Self) -> bool {
        self.allowed_signers == other.allowed_signers
            && self.required == other.required
            && self.require_principal == other.require_principal
    }
}

impl ApprovalsPolicy {
    /// Whether nothing is set (the section is then left out of the policy's hash).
    pub fn is_empty(&self) -> bool {
        *self == ApprovalsPolicy::default()
    }

    /// How many distinct principals must sign.
    pub fn required(&self) -> usize {
        self.required.unwrap_or(1)
    }

    /// Checks the section's values, naming the field.
    fn check(&self) -> Result<(), String> {
        let Some(path) = &self.allowed_signers else {
            if self.required.is_some() || !self.require_principal.is_empty() {
                return Err(
                    "approvals: \"required\" and \"require_principal\" need \"allowed_signers\" (the file of keys that may sign)"
                        .into(),
                );
            }
            return Ok(());
        };
        if path.is_empty() || path.contains('\0') {
            return Err(
                "approvals.allowed_signers: expected a path relative to the workspace".into(),
            );
        }
        if let Some(n) = self.required
            && !(1..=64).contains(&n)
        {
            return Err(format!(
                "approvals.required: expected a number of approvers from 1 to 64, got {n}"
            ));
        }
        for (reach, principals) in &self.require_principal {
            if principals.is_empty() || principals.iter().any(|p| p.trim().is_empty()) {
                return Err(format!(
                    "approvals.require_principal.{}: expected a list of principals (as allowed_signers names them)",
                    reach.name()
                ));
            }
        }
        Ok(())
    }
}

/// What a model costs, in US dollars per million tokens (policy `prices.MODEL`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Dollars per million prompt tokens.
    pub input_per_mtok: f64,
    /// Dollars per million completion tokens.
    pub output_per_mtok: f64,
}

impl Price {
    /// The dollars `prompt` and `completion` tokens cost.
    pub fn cost(&self, prompt: u64, completion: u64) -> f64 {
        (prompt as f64 * self.input_per_mtok + completion as f64 * self.output_per_mtok)
            / 1_000_000.0
    }
}

/// The policy's `telemetry` section: what exported traces may carry beyond names, ids, counts and
/// outcomes. Off by default: prompts, answers, tool arguments and results stay in the database.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Telemetry {
    /// Export prompts, model answers, tool-call arguments and results on spans (redacted like
    /// every record): `gen_ai.input.messages`, `gen_ai.output.messages`,
    /// `gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`.
    pub export_content: bool,
}

impl Telemetry {
    /// Whether nothing is set (the section is then left out of the policy's hash).
    pub fn is_default(&self) -> bool {
        *self == Telemetry::default()
    }
}

/// The `mcp` section of the policy: the servers a run may start, by name.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default, deny_unknown_fields)]
pub struct McpPolicy {
    /// Server name → how to start it and which of its tools are allowed.
    pub servers: std::collections::BTreeMap<String, McpServer>,
}

impl McpPolicy {
    /// Whether no server is declared (the section is then left out of the policy's hash).
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// The values of the environment variables remote servers' headers name (`${env:NAME}`):
    /// secrets whatever their names, for the run's redactor.
    pub fn header_secrets(&self) -> Vec<String> {
        let mut out = Vec::new();
        for server in self.servers.values().filter(|s| s.url.is_some()) {
            for value in server.headers.values() {
                let _ = expand_header(value, |var| {
                    if let Ok(v) = std::env::var(var) {
                        out.push(v);
                    }
                    Ok(String::new())
                });
            }
        }
        out
    }
}

/// One MCP server a run may use (docs/mcp.md): either a program it starts (`command`), which runs
/// as a command does (same sandbox, limits and network policy, with an environment of `PATH` plus
/// the names in `env` only), or a remote server reached over Streamable HTTP (`url`), whose host
/// must be in `network.allow`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct McpServer {
    /// Program and arguments (a bare name on `PATH`, or a workspace path), never through a shell.
    /// Empty for a remote server. Left out of the serialised form when empty, so policies
    /// written before remote servers keep their hash.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// The MCP endpoint of a remote server (`https://host/mcp`; `http://` only on a loopback
    /// address), spoken to over Streamable HTTP instead of starting a program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// HTTP headers sent with every request to a remote server (`Authorization`). A value may
    /// hold `${env:NAME}` for a variable `env` lists, read from the runner's environment when the
    /// server is used and redacted everywhere; nothing else is expanded.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// An absolute path to a PEM file of certificates a remote `https://` server is also trusted
    /// under, besides the Mozilla roots (a private CA, or the server's own self-signed
    /// certificate). Its SHA-256 is pinned at approval with the server: another file there
    /// refuses the run (exit 36) before any request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_cert: Option<PathBuf>,
    /// Environment variables passed from the runner's environment (besides `PATH`) to a started
    /// server, or the variables a remote server's `headers` may name.
    #[serde(default)]
    pub env: Vec<String>,
    /// The server's tools plans may use; only these are offered, pinned and callable.
    pub tools: Vec<String>,
    /// Which calls ask for confirmation: `true` (the default) every call, `false` none, or the
    /// list of tools whose calls do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirm: Option<McpConfirm>,
    /// Seconds the server may take to start and answer the handshake and `tools/list`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_timeout_s: Option<u64>,
    /// Seconds one tool call may take (also bounded by the step's timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_timeout_s: Option<u64>,
}

/// Checks a remote server's `url` and `headers` (the error starts with the field, after
/// `mcp.servers.NAME.`): a URL [`crate::policy::network::Endpoint::parse`] accepts, header names that are
/// HTTP tokens and not ones the transport sets itself, and values whose only expansions are
/// `${env:NAME}` of a variable `env` lists.
fn check_remote(
    url: &str,
    headers: &BTreeMap<String, String>,
    env: &[String],
) -> Result<(), String> {
    crate::policy::network::Endpoint::parse(url).map_err(|e| format!("url {url:?}: {e}"))?;
    for (name, value) in headers {
        let token = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !token {
            return Err(format!("headers {name:?}: not an HTTP header name"));
        }
        if RESERVED_HEADERS
            .iter()
            .any(|r| r.eq_ignore_ascii_case(name))
            || name.to_ascii_lowercase().starts_with("mcp-")
        {
            return Err(format!(
                "headers {name:?}: set by the MCP transport itself, not by the policy"
            ));
        }
        expand_header(value, |var| {
            env.iter()
                .any(|e| e == var)
                .then(String::new)
                .ok_or_else(|| {
                    format!(
                        "names ${{env:{var}}}, but {var} is not in this server's env list (add \
                         it there to pass it)"
                    )
                })
        })
        .map_err(|e| format!("headers {name:?}: {e}"))?;
    }
    Ok(())
}

/// Headers a policy may not set on a remote MCP server's requests: the transport's own and the
/// ones that frame the message.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "content-type",
    "transfer-encoding",
    "connection",
    "accept",
    "last-event-id",
    "te",
    "upgrade",
];

/// A header value with each `${env:NAME}` replaced by `lookup(NAME)`; any other `${` is an
/// error, and so is a character that cannot be in a header value. One function for the check
/// at policy load and the expansion when the server is used.
pub fn expand_header(
    value: &str,
    mut lookup: impl FnMut(&str) -> Result<String, String>,
) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or("an unclosed ${ (write ${env:NAME})")?;
        let inner = &after[..end];
        let Some(var) = inner.strip_prefix("env:") else {
            return Err(format!(
                "${{{inner}}} is not ${{env:NAME}}, the only expansion a header takes"
            ));
        };
        out.push_str(&lookup(var)?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    if out.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
        return Err("the value holds a control character (a line break?)".to_string());
    }
    Ok(out)
}

/// `confirm` of an MCP server: for every tool, or the list of tools that ask.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum McpConfirm {
    /// Every call (`true`) or none (`false`).
    All(bool),
    /// Only calls of these tools.
    Tools(Vec<String>),
}

/// Default seconds an MCP server may take to start (docs/mcp.md).
pub const MCP_STARTUP_TIMEOUT_S: u64 = 30;
/// Default seconds one MCP tool call may take (docs/mcp.md).
pub const MCP_CALL_TIMEOUT_S: u64 = 120;

impl McpServer {
    /// Whether a call of `tool` asks for confirmation (default: yes).
    pub fn confirms(&self, tool: &str) -> bool {
        match &self.confirm {
            None | Some(McpConfirm::All(true)) => true,
            Some(McpConfirm::All(false)) => false,
            Some(McpConfirm::Tools(list)) => list.iter().any(|t| t == tool),
        }
    }

    /// The startup timeout in force.
    pub fn startup_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.startup_timeout_s.unwrap_or(MCP_STARTUP_TIMEOUT_S))
    }

    /// The per-call timeout in force.
    pub fn call_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.call_timeout_s.unwrap_or(MCP_CALL_TIMEOUT_S))
    }
}

/// The prefix of every MCP tool's name: `mcp__SERVER__TOOL`.
pub const MCP_TOOL_PREFIX: &str = "mcp__";

/// The name an MCP tool is offered under.
pub fn mcp_tool_name(server: &str, tool: &str) -> String {
    format!("{MCP_TOOL_PREFIX}{server}__{tool}")
}

/// The server of an MCP tool's name (`mcp__SERVER__TOOL`), or `None` for any other tool.
pub fn mcp_server_of(tool: &str) -> Option<&str> {
    tool.strip_prefix(MCP_TOOL_PREFIX)?
        .split_once("__")
        .map(|(server, _)| server)
}

/// Why `part` (a server or tool name) cannot be part of an `mcp__SERVER__TOOL` name: only ASCII
/// letters, digits, `_` and `-`, no `__` and no `_` at either end (so no two names can produce
/// the same tool name), and short enough for the 64 characters LLM APIs allow a tool name.
fn mcp_name_problem(part: &str) -> Option<&'static str> {
    if part.is_empty() {
        return Some("is empty");
    }
    if !part
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Some("may hold only ASCII letters, digits, '_' and '-'");
    }
    if part.contains("__") {
        return Some("must not contain \"__\" (it separates server and tool in mcp__SERVER__TOOL)");
    }
    if part.starts_with('_') || part.ends_with('_') {
        return Some("must not start or end with '_'");
    }
    None
}

impl McpPolicy {
    /// Checks every server: names, a command, the tools listed, the confirm list, timeouts; the
    /// error names the entry.
    pub fn check(&self) -> Result<(), String> {
        let mut seen = std::collections::BTreeSet::new();
        for (name, server) in &self.servers {
            let at = format!("mcp.servers.{name}");
            if let Some(why) = mcp_name_problem(name) {
                return Err(format!("{at}: the server name {why}"));
            }
            match (&server.url, server.command.is_empty()) {
                (Some(_), false) => {
                    return Err(format!(
                        "{at}: has both command and url; a server is either a program acode-run \
                         starts (command) or a remote endpoint (url)"
                    ));
                }
                (Some(url), true) => {
                    check_remote(url, &server.headers, &server.env)
                        .map_err(|e| format!("{at}.{e}"))?;
                    if let Some(ca) = &server.ca_cert {
                        if !url.to_ascii_lowercase().starts_with("https://") {
                            return Err(format!(
                                "{at}.ca_cert: only an https:// server is trusted under a CA file"
                            ));
                        }
                        if !ca.is_absolute() {
                            return Err(format!(
                                "{at}.ca_cert {}: give an absolute path",
                                ca.display()
                            ));
                        }
                    }
                }
                (None, _) => {
                    if server.command.is_empty() || server.command[0].trim().is_empty() {
                        return Err(format!(
                            "{at}.command: needs the program and its arguments (or url for a \
                             remote server)"
                        ));
                    }
                    if !server.headers.is_empty() {
                        return Err(format!(
                            "{at}.headers: only a remote server (url) takes headers"
                        ));
                    }
                    if server.ca_cert.is_some() {
                        return Err(format!(
                            "{at}.ca_cert: only a remote server (url) takes a CA file"
                        ));
                    }
                }
            }
            if let Some(i) = server.command.iter().position(|a| a.contains('\0')) {
                return Err(format!("{at}.command[{i}]: contains a NUL byte"));
            }
            for (i, var) in server.env.iter().enumerate() {
                let ok = !var.is_empty()
                    && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !var.starts_with(|c: char| c.is_ascii_digit());
                if !ok {
                    return Err(format!(
                        "{at}.env[{i}] {var:?}: not an environment variable name"
                    ));
                }
            }
            if server.tools.is_empty() {
                return Err(format!("{at}.tools: list the tools plans may use"));
            }
            for (i, tool) in server.tools.iter().enumerate() {
                if let Some(why) = mcp_name_problem(tool) {
                    return Err(format!("{at}.tools[{i}] {tool:?}: the tool name {why}"));
                }
                let full = mcp_tool_name(name, tool);
                if full.len() > 64 {
                    return Err(format!(
                        "{at}.tools[{i}]: {full} is longer than the 64 characters LLM APIs allow"
                    ));
                }
                if !seen.insert(full.clone()) {
                    return Err(format!("{at}.tools[{i}]: {full} is listed twice"));
                }
            }
            if let Some(McpConfirm::Tools(list)) = &server.confirm
                && let Some(t) = list.iter().find(|t| !server.tools.contains(t))
            {
                return Err(format!("{at}.confirm: {t:?} is not in tools"));
            }
            for (field, v) in [
                ("startup_timeout_s", server.startup_timeout_s),
                ("call_timeout_s", server.call_timeout_s),
            ] {
                if v == Some(0) {
                    return Err(format!("{at}.{field}: must be at least 1"));
                }
            }
        }
        Ok(())
    }
}

/// `auto_approve_commands` as written: a list extends the built-in allowlist, `{"replace": [...]}`
/// replaces it (see [`Policy::auto_approve_commands`]).
fn auto_approve_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    /// The replacing form.
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Replace {
        replace: Vec<String>,
    }
    let value = serde_json::Value::deserialize(d)?;
    if value.is_object() {
        return Replace::deserialize(value)
            .map(|r| r.replace)
            .map_err(serde::de::Error::custom);
    }
    let extra = Vec::<String>::deserialize(value).map_err(|e| {
        serde::de::Error::custom(format!(
            "{e}: expected a list of programs (added to the built-in allowlist) or \
             {{\"replace\": [...]}}"
        ))
    })?;
    let mut list: Vec<String> = DEFAULT_ALLOWLIST.iter().map(|s| s.to_string()).collect();
    for program in extra {
        if !list.contains(&program) {
            list.push(program);
        }
    }
    Ok(list)
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            commands: None,
            allow_commands: Vec::new(),
            auto_approve_commands: DEFAULT_ALLOWLIST.iter().map(|s| s.to_string()).collect(),
            confirm_tools: DEFAULT_CONFIRM_TOOLS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            env_passthrough: Vec::new(),
            sandbox: SandboxMode::default(),
            limits: Limits::default(),
            read_paths: Vec::new(),
            network: NetworkPolicy::default(),
            creates: Vec::new(),
            jobs: None,
            mcp: McpPolicy::default(),
            approvals: ApprovalsPolicy::default(),
            prices: std::collections::BTreeMap::new(),
            telemetry: Telemetry::default(),
        }
    }
}

/// A policy file that could not be used.
#[derive(Debug, Error)]
pub enum PolicyError {
    /// The file could not be read.
    #[error("cannot read policy file {path}: {source}")]
    Read {
        /// The policy file.
        path: String,
        /// Why: missing, not a regular file, over the size limit, a duplicate key.
        source: crate::input::InputError,
    },
    /// The file is not a valid policy.
    #[error("invalid policy file {path}: {message}")]
    Invalid {
        /// The policy file.
        path: String,
        /// What is wrong, with line and column.
        message: String,
    },
}

impl Policy {
    /// The file name looked for in the workspace root.
    pub const FILE_NAME: &'static str = crate::workspace::POLICY_FILE_NAME;

    /// Loads `explicit` if given, else `acode-policy.json` in `workspace` if present, else defaults.
    pub fn load(explicit: Option<&Path>, workspace: &Path) -> Result<Policy, PolicyError> {
        let path = match explicit {
            Some(p) => p.to_path_buf(),
            None => {
                let p = workspace.join(Self::FILE_NAME);
                if !p.exists() {
                    return Ok(Policy::default());
                }
                p
            }
        };
        let bytes = crate::input::read_json(&path, crate::input::MAX_POLICY_BYTES, "policy file")
            .map_err(|source| PolicyError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let text = String::from_utf8(bytes).map_err(|e| PolicyError::Invalid {
            path: path.display().to_string(),
            message: format!("not UTF-8: {e}"),
        })?;
        let mut policy = Self::parse(&text).map_err(|message| PolicyError::Invalid {
            path: path.display().to_string(),
            message,
        })?;
        // A policy from outside the workspace reads its allowed_signers beside itself.
        let dir = crate::workspace::absolute(&path)
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let root = workspace
            .canonicalize()
            .unwrap_or_else(|_| workspace.to_path_buf());
        let dir_real = dir.canonicalize().unwrap_or_else(|_| dir.clone());
        if !dir_real.starts_with(&root) {
            policy.approvals.base = Some(dir_real);
        }
        Ok(policy)
    }

    /// Parses policy JSON; the error names line and column, or the `network.allow` entry.
    pub fn parse(text: &str) -> Result<Policy, String> {
        let policy: Policy =
            serde_json::from_str(text).map_err(|e| with_suggestion(&e.to_string()))?;
        policy.network.entries()?;
        if let Some(n) = policy.jobs
            && !(1..=MAX_JOBS).contains(&n)
        {
            return Err(format!(
                "jobs: expected a number from 1 to {MAX_JOBS}, got {n}"
            ));
        }
        policy.mcp.check()?;
        policy.approvals.check()?;
        for (model, price) in &policy.prices {
            for (field, v) in [
                ("input_per_mtok", price.input_per_mtok),
                ("output_per_mtok", price.output_per_mtok),
            ] {
                if !(v.is_finite() && (0.0..=1_000_000.0).contains(&v)) {
                    return Err(format!(
                        "prices.{model}.{field}: expected dollars per million tokens from 0 to \
                         1000000, got {v}"
                    ));
                }
            }
        }
        for (field, list) in [
            ("commands", policy.commands.as_deref().unwrap_or_default()),
            ("allow_commands", &policy.allow_commands),
            ("auto_approve_commands", &policy.auto_approve_commands),
        ] {
            for (i, entry) in list.iter().enumerate() {
                if let Some(why) = program_path_problem(entry) {
                    return Err(format!("{field}[{i}] {entry:?}: {why}"));
                }
            }
        }
        Ok(policy)
    }

    /// Whether `program` (a bare command name) may run at all.
    pub fn command_allowed(&self, program: &str) -> bool {
        let base = match &self.commands {
            Some(list) => list.iter().any(|c| c == program),
            None => DEFAULT_ALLOWLIST.contains(&program),
        };
        base || self.allow_commands.iter().any(|c| c == program)
    }

    /// Whether `program` runs without asking for confirmation.
    pub fn command_auto_approved(&self, program: &str) -> bool {
        self.auto_approve_commands.iter().any(|c| c == program)
    }

    /// Whether a program given by workspace path (`rel`, workspace-relative, normalised) may run:
    /// an entry of `commands` or `allow_commands` with a '/' names it exactly (`./gradlew`) or by
    /// glob (`.venv/bin/*`; `*` stays within one directory, `**` spans them).
    pub fn program_path_allowed(&self, rel: &str) -> bool {
        let base = self.commands.as_deref().unwrap_or_default();
        path_listed(base.iter().chain(&self.allow_commands), rel)
    }

    /// Whether a program given by workspace path runs without confirmation: named by
    /// `auto_approve_commands` the same way.
    pub fn program_path_auto_approved(&self, rel: &str) -> bool {
        path_listed(self.auto_approve_commands.iter(), rel)
    }

    /// Whether every call of `tool` needs confirmation.
    pub fn tool_needs_confirmation(&self, tool: &str) -> bool {
        self.confirm_tools.iter().any(|t| t == tool)
    }

    /// The names of environment variables a child keeps.
    pub fn env_allowlist(&self) -> impl Iterator<Item = &str> {
        DEFAULT_ENV_PASSTHROUGH
            .iter()
            .copied()
            .chain(self.env_passthrough.iter().map(String::as_str))
    }
}

/// Whether a policy entry names a program by path rather than by bare name.
fn is_path_entry(entry: &str) -> bool {
    entry.contains('/')
}

/// Why a program-path entry cannot be used (escapes the workspace, malformed glob), if it is one.
fn program_path_problem(entry: &str) -> Option<String> {
    if !is_path_entry(entry) {
        return None;
    }
    let entry = entry.strip_prefix("./").unwrap_or(entry);
    match crate::policy::glob::Glob::new(entry) {
        Ok(_) => None,
        Err(crate::policy::glob::GlobError::Escapes(v)) => Some(format!(
            "a program path is relative to the workspace: {}",
            v.reason
        )),
        Err(crate::policy::glob::GlobError::Invalid(why)) => Some(format!("invalid glob: {why}")),
    }
}

/// Whether one of `entries` (those with a '/') names the workspace-relative `rel`.
fn path_listed<'a>(entries: impl Iterator<Item = &'a String>, rel: &str) -> bool {
    entries.filter(|e| is_path_entry(e)).any(|e| {
        let e = e.strip_prefix("./").unwrap_or(e);
        e == rel || crate::policy::glob::Glob::new(e).is_ok_and(|g| g.is_match(rel))
    })
}

/// serde's ``unknown field `jbos`, expected one of `commands`, … at line 1 column 7`` with the
/// key to type instead: `… (did you mean "jobs"?) at line 1 column 7`.
fn with_suggestion(message: &str) -> String {
    let Some(rest) = message.strip_prefix("unknown field `") else {
        return message.to_string();
    };
    let Some((key, tail)) = rest.split_once('`') else {
        return message.to_string();
    };
    let (expected, at) = match tail.rfind(" at line ") {
        Some(i) => tail.split_at(i),
        None => (tail, ""),
    };
    let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    let hint = crate::suggest::did_you_mean(key, known.iter().copied());
    format!("unknown field `{key}`{expected}{hint}{at}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_additions() {
        let p = Policy::parse(r#"{"allow_commands":["rg"],"sandbox":"none"}"#).unwrap();
        assert!(p.command_allowed("rg"));
        assert!(p.command_allowed("cargo"));
        assert!(!p.command_allowed("rm"));
        assert!(p.command_auto_approved("cargo"));
        assert!(!p.command_auto_approved("rg"));
        assert!(p.tool_needs_confirmation("file_delete"));
        assert_eq!(p.sandbox, SandboxMode::None);
    }

    #[test]
    fn auto_approve_commands_add_to_the_default_unless_they_replace_it() {
        let p = Policy::parse(r#"{"auto_approve_commands":["rg"]}"#).unwrap();
        assert!(p.command_auto_approved("rg") && p.command_auto_approved("echo"));
        let p = Policy::parse(r#"{"auto_approve_commands":{"replace":["rg"]}}"#).unwrap();
        assert!(p.command_auto_approved("rg") && !p.command_auto_approved("echo"));
        // The hash an approval binds covers the effective list: a list that now means more than
        // it did is a changed policy; a replacement means what such a list used to.
        let extended = Policy::parse(r#"{"auto_approve_commands":["rg"]}"#).unwrap();
        let replaced = Policy::parse(r#"{"auto_approve_commands":{"replace":["rg"]}}"#).unwrap();
        assert_ne!(
            serde_json::to_value(&extended).unwrap(),
            serde_json::to_value(&replaced).unwrap()
        );
        assert_eq!(
            serde_json::to_value(&replaced).unwrap()["auto_approve_commands"],
            serde_json::json!(["rg"])
        );
        assert!(Policy::parse(r#"{"auto_approve_commands":{"add":["rg"]}}"#).is_err());
        assert!(Policy::parse(r#"{"auto_approve_commands":"rg"}"#).is_err());
    }

    #[test]
    fn commands_replace_the_default_allowlist() {
        let p = Policy::parse(r#"{"commands":["git","cat"],"allow_commands":["rg"]}"#).unwrap();
        assert!(p.command_allowed("git"));
        assert!(p.command_allowed("rg"));
        assert!(!p.command_allowed("python3"));
        assert!(!p.command_allowed("node"));
        assert!(Policy::default().command_allowed("python3"));
    }

    #[test]
    fn network_entries_are_checked_and_an_empty_network_keeps_the_old_form() {
        let p =
            Policy::parse(r#"{"network": {"allow": ["registry.example.org", "registry:npm"]}}"#)
                .unwrap();
        assert_eq!(p.network.allow.len(), 2);
        let err = Policy::parse(r#"{"network": {"allow": ["a b"]}}"#).unwrap_err();
        assert!(err.contains("network.allow[0]"), "{err}");
        assert!(Policy::parse(r#"{"network": true}"#).is_err());
        assert!(Policy::parse(r#"{"network": {"hosts": []}}"#).is_err());
        let text = serde_json::to_string(&Policy::default()).unwrap();
        assert!(!text.contains("network"), "{text}");
    }

    #[test]
    fn programs_by_workspace_path_are_named_exactly_or_by_glob() {
        let p = Policy::parse(
            r#"{"allow_commands": ["./gradlew", ".venv/bin/*", "node_modules/.bin/**"],
                "auto_approve_commands": ["cargo", "./gradlew"]}"#,
        )
        .unwrap();
        assert!(p.program_path_allowed("gradlew"));
        assert!(p.program_path_allowed(".venv/bin/python"));
        assert!(
            !p.program_path_allowed(".venv/bin/sub/python"),
            "* stays in one directory"
        );
        assert!(p.program_path_allowed("node_modules/.bin/jest"));
        assert!(!p.program_path_allowed("scripts/ci.sh"));
        assert!(p.program_path_auto_approved("gradlew"));
        assert!(!p.program_path_auto_approved(".venv/bin/python"));
        // A bare name never allows a path, nor a path a bare name.
        assert!(!Policy::default().program_path_allowed("cargo"));
        assert!(!p.command_allowed("gradlew"));
        for bad in [
            r#"{"allow_commands": ["../x/*"]}"#,
            r#"{"allow_commands": ["/usr/bin/*"]}"#,
            r#"{"commands": ["a/[b"]}"#,
        ] {
            assert!(Policy::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn header_values_expand_only_env_references() {
        let look = |v: &str| Ok::<_, String>(format!("<{v}>"));
        assert_eq!(
            expand_header("Bearer ${env:TOKEN}", look).unwrap(),
            "Bearer <TOKEN>"
        );
        assert_eq!(
            expand_header("a ${env:A}${env:B} b", look).unwrap(),
            "a <A><B> b"
        );
        assert_eq!(expand_header("plain $HOME", look).unwrap(), "plain $HOME");
        assert!(
            expand_header("${HOME}", look)
                .unwrap_err()
                .contains("${env:NAME}")
        );
        assert!(
            expand_header("${env:A", look)
                .unwrap_err()
                .contains("unclosed")
        );
        assert!(
            expand_header("x\r\nInjected: 1", look)
                .unwrap_err()
                .contains("control character")
        );
        let refused = expand_header("${env:B}", |v| Err(format!("{v} refused")));
        assert_eq!(refused.unwrap_err(), "B refused");
    }

    #[test]
    fn mcp_servers_are_checked_and_names_cannot_collide() {
        let ok = Policy::parse(
            r#"{"mcp": {"servers": {"time": {"command": ["mcp-server-time"], "env": ["TZ"],
                "tools": ["get_current_time"], "confirm": ["get_current_time"]}}}}"#,
        )
        .unwrap();
        let time = &ok.mcp.servers["time"];
        assert!(time.confirms("get_current_time"));
        assert_eq!(time.startup_timeout().as_secs(), MCP_STARTUP_TIMEOUT_S);
        assert_eq!(
            mcp_tool_name("time", "get_current_time"),
            "mcp__time__get_current_time"
        );
        assert_eq!(mcp_server_of("mcp__time__get_current_time"), Some("time"));
        assert_eq!(mcp_server_of("run_command"), None);
        let server = |name: &str, tools: &str| {
            format!(
                r#"{{"mcp": {{"servers": {{"{name}": {{"command": ["x"], "tools": {tools}}}}}}}}}"#
            )
        };
        for (bad, needle) in [
            (server("a__b", r#"["t"]"#), "mcp.servers.a__b: the server name must not contain"),
            (server("a_", r#"["_b"]"#), "must not start or end with '_'"),
            (server("a", r#"["_b"]"#), "tools[0] \"_b\""),
            (server("a", r#"["t", "t"]"#), "listed twice"),
            (server("a", r#"["t.x"]"#), "may hold only"),
            (server("a", "[]"), "list the tools"),
            (r#"{"mcp": {"servers": {"a": {"command": [], "tools": ["t"]}}}}"#.into(), "command"),
            (
                r#"{"mcp": {"servers": {"a": {"command": ["x"], "tools": ["t"], "env": ["A B"]}}}}"#
                    .into(),
                "env[0]",
            ),
            (
                r#"{"mcp": {"servers": {"a": {"command": ["x"], "tools": ["t"], "confirm": ["u"]}}}}"#
                    .into(),
                "confirm",
            ),
        ] {
            let err = Policy::parse(&bad).unwrap_err();
            assert!(err.contains(needle), "{bad}: {err}");
        }
        // No MCP servers: the policy serialises (and hashes) as before.
        let text = serde_json::to_string(&Policy::default()).unwrap();
        assert!(!text.contains("mcp"), "{text}");
    }

    #[test]
    fn unknown_fields_are_errors() {
        let err = Policy::parse(r#"{"allow_comands":["rm"]}"#).unwrap_err();
        assert!(err.contains("allow_comands"), "{err}");
    }
}
