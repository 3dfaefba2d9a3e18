//! Tools: the only code that touches the workspace or runs programs.
//!
//! A tool is a named function with a JSON schema for its arguments. The same schema validates plan
//! steps, validates LLM tool calls and is shown to the LLM, so there is one definition of what a tool
//! accepts; with [`args`], that schema and the parsing of the arguments both come from one typed
//! struct per tool. Tools check every path through [`crate::workspace::Workspace`], open it through
//! [`crate::workspace::fs`] (where the kernel refuses escapes), and never decide their own sandbox
//! rules.

pub mod agent;
pub mod args;
pub mod command;
pub mod files;
pub mod history;
pub mod lsp;
pub mod mcp;
pub mod registry;
pub mod root_entries;
pub mod schema;
pub mod search;
#[cfg(test)]
mod testutil;

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use thiserror::Error;

use crate::error::ErrorKind;
use crate::policy::Policy;
use crate::sandbox::OsSandbox;
use crate::workspace::{SandboxViolation, Workspace};

pub use registry::ToolRegistry;

/// One request to run a tool, as produced by a step driver (the plan, or an LLM).
#[derive(Debug, Clone, Serialize)]
pub struct ToolCall {
    /// Identifier of this call within its step (the LLM's id, or generated).
    pub call_id: String,
    /// The step this call belongs to.
    pub step_id: String,
    /// The tool's registered name.
    pub tool: String,
    /// Arguments after variable substitution.
    pub arguments: Value,
    /// Agent turn that produced this call (`None` for direct steps).
    pub turn: Option<u32>,
}

/// The call id of a step's `verify` command: `STEP#verify` for the single `command`, `STEP#verify-K`
/// (1-based) for each of `commands` (docs/parallel.md). Written here once, with
/// [`is_verify_call`], which the record and the progress lines read it with.
pub fn verify_call_id(step_id: &str, listed: Option<usize>) -> String {
    match listed {
        Some(k) => format!("{step_id}#verify-{k}"),
        None => format!("{step_id}#verify"),
    }
}

/// Whether a call id is a `verify` command's ([`verify_call_id`]).
pub fn is_verify_call(call_id: &str) -> bool {
    call_id.rsplit_once('#').is_some_and(|(_, tail)| {
        tail == "verify"
            || tail
                .strip_prefix("verify-")
                .is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// A named blob of output kept in the database (`stdout`, `stderr`, `diff`, `diagnostics`, ...).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Artifact {
    /// The artifact type, e.g. `stdout`.
    pub artifact_type: String,
    /// The content kept (possibly cut short).
    pub content: String,
    /// The size of the full output in bytes, even if only part of it was kept.
    pub bytes: u64,
    /// Whether `content` is shorter than the full output.
    pub truncated: bool,
    /// Whether the output was not valid UTF-8 and `content` is a lossy rendering of it.
    pub lossy: bool,
}

impl Artifact {
    /// An artifact whose content is complete.
    pub fn new(artifact_type: &str, content: String) -> Self {
        let bytes = content.len() as u64;
        Artifact {
            artifact_type: artifact_type.to_string(),
            content,
            bytes,
            truncated: false,
            lossy: false,
        }
    }
}

/// What a tool produced, successful or not. A tool that ran and failed (a non-zero exit, compile
/// errors) still returns `Ok(ToolOutput)` with `success: false`, so its artifacts are recorded.
#[derive(Debug, Clone, Default)]
pub struct ToolOutput {
    /// Whether the tool achieved what it was asked.
    pub success: bool,
    /// Why not, when `success` is false; `None` means [`ErrorKind::ToolFailed`].
    pub failure_kind: Option<ErrorKind>,
    /// A message for the user when `success` is false.
    pub error: Option<String>,
    /// A process exit code, for tools that run programs.
    pub exit_code: Option<i32>,
    /// What the driver (and an LLM) sees as the result: short, textual.
    pub content: String,
    /// What is kept in the database.
    pub artifacts: Vec<Artifact>,
    /// Whether another attempt could succeed (a command the plan marked `retryable`); the executor
    /// then retries with backoff up to the step's `retries`.
    pub transient: bool,
    /// When the call failed: the few lines a reader needs to see why (a command's last lines of
    /// stdout and stderr), shown on the console and in CI reports without opening the database.
    pub excerpt: Option<String>,
    /// The requests the command made through the run's network proxy, recorded with the
    /// execution.
    pub network: Vec<crate::policy::network::NetworkRequest>,
    /// For a command: the program it ran and the SHA-256 of the file executed, for the audit.
    pub program: Option<crate::policy::host::program::Executed>,
}

impl ToolOutput {
    /// A successful result with `content` and no artifacts yet.
    pub fn ok(content: impl Into<String>) -> Self {
        ToolOutput {
            success: true,
            content: content.into(),
            ..Default::default()
        }
    }

    /// A failed result of the given kind.
    pub fn failed(kind: ErrorKind, error: impl Into<String>) -> Self {
        let error = error.into();
        ToolOutput {
            success: false,
            failure_kind: Some(kind),
            content: error.clone(),
            error: Some(error),
            ..Default::default()
        }
    }

    /// Attaches the network requests a command made; when the call failed and the proxy denied a
    /// host, the error names it and the policy line that would allow it (a denied download is the
    /// likely cause, and the command's own message rarely says so).
    pub fn with_network(mut self, requests: Vec<crate::policy::network::NetworkRequest>) -> Self {
        if !self.success
            && let Some(denied) = requests.iter().find(|r| !r.allowed && r.status == 403)
            && let Some(error) = self.error.as_mut()
        {
            let why = crate::net::proxy::denial_body(&denied.host, denied.port);
            let why = why.trim_end().trim_start_matches("acode-run: ");
            error.push_str(&format!("; the network proxy refused a request: {why}"));
            self.content = format!("{error}\n{}", self.content);
        }
        self.network = requests;
        self
    }

    /// Adds an artifact (builder style).
    pub fn with_artifact(mut self, artifact: Artifact) -> Self {
        self.artifacts.push(artifact);
        self
    }
}

/// Tools that only read the workspace (or the run history) and never change it: the only tools a
/// plan whose `intent` is `read`, `query` or `explain` may use, directly or in an agent step.
pub const READ_ONLY_TOOLS: &[&str] = &[
    "file_read",
    "list_directory",
    "file_search",
    "file_glob",
    "history",
];

/// A tool call that could not run at all.
#[derive(Debug, Error)]
pub enum ToolError {
    /// The arguments do not fit the tool's schema or meaning.
    #[error("invalid arguments for {tool}: {message}")]
    InvalidArguments {
        /// The tool.
        tool: String,
        /// What is wrong, naming the argument.
        message: String,
    },
    /// A path or command would leave the sandbox.
    #[error(transparent)]
    Sandbox(#[from] SandboxViolation),
    /// An operating-system error, with the workspace-relative path it concerned.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done (`read`, `write`, ...).
        op: &'static str,
        /// The path, relative to the workspace.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Any other permanent failure before or instead of producing output.
    #[error("{0}")]
    Failed(String),
    /// A failure worth retrying (a flaky network, a command marked retryable).
    #[error("{0}")]
    Transient(String),
    /// The run is being interrupted.
    #[error("interrupted")]
    Interrupted,
    /// A program given by workspace path is not there: a failure when a command is about to
    /// start, and at validation time accepted when an earlier step can create it.
    #[error("the program {program} does not exist: {} is not in the workspace", .path.display())]
    ProgramMissing {
        /// As written in the step.
        program: String,
        /// The workspace-relative path looked for.
        path: std::path::PathBuf,
    },
    /// A file the tool works on is not there (a crate's `Cargo.toml` for `lsp_check`): like
    /// [`ToolError::ProgramMissing`], a failure when the call runs and accepted at validation
    /// when an earlier step can create it.
    #[error("{tool}: {message}")]
    InputMissing {
        /// The tool.
        tool: String,
        /// What is missing, where, and what to do instead.
        message: String,
    },
}

impl ToolError {
    /// The error kind this becomes in the database and exit code.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ToolError::InvalidArguments { .. } => ErrorKind::InvalidArguments,
            ToolError::Sandbox(_) => ErrorKind::SandboxViolation,
            ToolError::Io { .. }
            | ToolError::Failed(_)
            | ToolError::Transient(_)
            | ToolError::ProgramMissing { .. }
            | ToolError::InputMissing { .. } => ErrorKind::ToolFailed,
            ToolError::Interrupted => ErrorKind::Interrupted,
        }
    }

    /// Whether another attempt could succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, ToolError::Transient(_))
    }

    /// Shorthand for an [`ToolError::InvalidArguments`].
    pub fn invalid(tool: &str, message: impl Into<String>) -> Self {
        ToolError::InvalidArguments {
            tool: tool.to_string(),
            message: message.into(),
        }
    }
}

/// What a tool may use while it runs: the sandbox, the policy and the run's signals.
pub struct ToolContext<'a> {
    /// The workspace and its protected areas.
    pub workspace: &'a Workspace,
    /// The policy in force.
    pub policy: &'a Policy,
    /// The time limit for this call.
    pub timeout: Duration,
    /// The run's OS sandbox: every command a tool starts goes through [`OsSandbox::prepare`].
    pub sandbox: &'a OsSandbox,
    /// Set when the run is being interrupted; long-running tools poll it and stop.
    pub cancel: &'a AtomicBool,
    /// Called periodically by long-running tools with the elapsed time, for heartbeat events.
    pub heartbeat: &'a (dyn Fn(Duration) + Sync),
    /// The workspace-root entries the step declares its commands create (`creates`; the policy's
    /// come on top), see [`root_entries`].
    pub creates: &'a [String],
    /// The run history of this workspace, for the `history` tool; `None` where there is no run
    /// (validation, preview), and the tool then says so.
    pub history: Option<&'a dyn history::HistorySource>,
    /// The W3C `traceparent` of this call's span (docs/observability.md): commands get it as
    /// `TRACEPARENT`, so what they trace is a child of the call. `None` outside a traced run.
    pub trace_parent: Option<String>,
}

/// Adds `TRACEPARENT` (this call's span, [`ToolContext::trace_parent`]) to a command's
/// environment, over any the step set: the runner's trace context is the one that holds.
pub(crate) fn add_trace_parent(ctx: &ToolContext, env: &mut Vec<(String, String)>) {
    if let Some(tp) = &ctx.trace_parent {
        env.retain(|(k, _)| k != "TRACEPARENT");
        env.push(("TRACEPARENT".to_string(), tp.clone()));
    }
}

/// Confines the command `spec` in the run's sandbox ([`OsSandbox::prepare`]) and returns the
/// protected-path snapshot to check once it has ended, with the root entries made for it. When it
/// cannot be confined it must not run: the entries go again, and the `Err` is the failed output
/// that says so, naming `what` ("the command", "cargo").
pub(crate) fn confine(
    ctx: &ToolContext,
    spec: &mut crate::process::CommandSpec,
    created: root_entries::Created,
    what: &str,
) -> Result<
    (
        crate::workspace::guard::ProtectedGuard,
        root_entries::Created,
    ),
    Box<ToolOutput>,
> {
    match ctx.sandbox.prepare(spec, ctx.workspace) {
        Ok(guard) => Ok((guard, created)),
        Err(e) => {
            created.remove_unused(ctx.workspace);
            Err(Box::new(ToolOutput::failed(
                ErrorKind::ToolFailed,
                format!(
                    "cannot confine {what} in the {} sandbox: {e}",
                    ctx.sandbox.describe()
                ),
            )))
        }
    }
}

/// A tool (see the module docs). Implementations are stateless; all state is in the context.
pub trait Tool: Send + Sync {
    /// The registered name, as used in plans and shown to LLMs.
    fn name(&self) -> &'static str;
    /// One sentence for `acode-run tools` and for the LLM.
    fn description(&self) -> &'static str;
    /// The JSON Schema of the arguments object; for a tool with a typed argument struct,
    /// `args::schema_for::<ItsArgs>()`.
    fn schema(&self) -> Value;
    /// Whether re-running after a crash is harmless (reads, overwrites); used by resume.
    fn idempotent(&self) -> bool;
    /// Checks arguments against the sandbox and policy without side effects; used both when the plan
    /// is validated and before every call. Schema validation has already happened.
    fn check(&self, args: &Value, ctx: &ToolContext) -> Result<(), ToolError>;
    /// Whether this particular call needs confirmation beyond the policy's per-tool list (e.g. a
    /// command outside the auto-approve set).
    fn needs_confirmation(&self, _args: &Value, _ctx: &ToolContext) -> bool {
        false
    }
    /// A preview of the effect (a diff) shown when asking for confirmation.
    fn preview(&self, _args: &Value, _ctx: &ToolContext) -> Option<String> {
        None
    }
    /// Short text describing the call for progress lines (`cargo test`, `src/lib.rs`).
    fn summary(&self, args: &Value) -> String {
        args.get("path")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    }
    /// Runs the call.
    fn run(&self, args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError>;
    /// Stops what the tool keeps running between calls (an MCP server) at the end of a run, and
    /// hands over the network requests made meanwhile (a remote server's closing `DELETE`, its
    /// long-lived streams), which the run records as its own.
    fn shutdown(&self) -> Vec<crate::policy::network::NetworkRequest> {
        Vec::new()
    }
}
