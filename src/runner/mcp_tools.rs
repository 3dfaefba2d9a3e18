//! `acode-run mcp tools` as an operation on a [`Session`]: start each MCP server the policy
//! declares, list its tools, and compare them with the pins in a plan's approval. The caller
//! prints the report; a difference from the pins is a result ([`McpToolsReport::differs`]), not an
//! error, so a person sees every server before deciding.

use std::path::Path;

use serde::Serialize;

use super::session::{Session, SessionError};
use crate::mcp::pins;
use crate::plan;

/// What one tool of a server is, under the policy and the plan's pins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ToolStatus {
    /// The policy does not list it in the server's `tools`.
    #[serde(rename = "not allowed by the policy")]
    NotAllowed,
    /// Allowed, and no plan was given to compare with.
    #[serde(rename = "allowed")]
    Allowed,
    /// Allowed, but the plan's approval pins no such tool (or not this server).
    #[serde(rename = "allowed, not pinned")]
    NotPinned,
    /// Allowed, and exactly as pinned.
    #[serde(rename = "matches its pin")]
    MatchesPin,
    /// Allowed, and changed since it was pinned: the plan would be refused (exit 36).
    #[serde(rename = "DIFFERS from its pin")]
    DiffersFromPin,
}

impl std::fmt::Display for ToolStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        f.write_str(&text)
    }
}

/// One tool a server offers.
#[derive(Debug, Clone, Serialize)]
pub struct OfferedTool {
    /// Its name on the server.
    pub name: String,
    /// The name a plan or a model uses for it, when the policy allows it.
    pub offered_as: Option<String>,
    /// What it is under the policy and the pins.
    pub status: ToolStatus,
    /// Its description, as the server gave it (empty when it gave none).
    pub description: String,
    /// The SHA-256 of its pinned form (name, description, schemas).
    pub sha256: String,
    /// Its input schema as received: what a plan's arguments are checked against and what
    /// approval pins, so that a plan's author can write arguments from it (`--json` only).
    pub input_schema: serde_json::Value,
}

/// One server: who answered, what changed since the pins, and its tools.
#[derive(Debug, Clone, Serialize)]
pub struct ServerTools {
    /// The server's name in the policy.
    pub server: String,
    /// The protocol revision agreed with it.
    pub protocol_version: String,
    /// The name it gave.
    pub server_name: String,
    /// The version it gave.
    pub server_version: String,
    /// Each difference from its pin, in words.
    pub changes: Vec<String>,
    /// Every tool it lists.
    pub tools: Vec<OfferedTool>,
}

/// Every server's tools, and whether anything differs from the plan's pins.
#[derive(Debug, Clone, Serialize)]
pub struct McpToolsReport {
    /// The servers, in the policy's order.
    pub servers: Vec<ServerTools>,
    /// A plan was given and something differs from its pins (or a server is not pinned at all).
    #[serde(skip)]
    pub differs: bool,
}

/// Starts each server of the session's policy (in the policy's sandbox), lists its tools, and
/// compares them with the pins in `plan`'s approval when a plan is given.
pub fn list_server_tools(
    session: &Session,
    plan: Option<&Path>,
) -> Result<McpToolsReport, SessionError> {
    let policy = session.policy()?;
    if policy.mcp.is_empty() {
        return Err(SessionError::Mcp(
            "the policy declares no MCP servers (mcp.servers)".into(),
        ));
    }
    let pins = match plan {
        None => None,
        Some(path) => {
            let plan = plan::read(path, &Default::default())?;
            let auth =
                plan::auth::load(path, &plan).map_err(|e| SessionError::Mcp(e.to_string()))?;
            Some(auth.mcp)
        }
    };
    let sandbox = session.sandbox(&policy, policy.sandbox)?;
    let cancel = std::sync::atomic::AtomicBool::new(false);
    let mut servers = Vec::new();
    let mut differs = false;
    for (name, server) in &policy.mcp.servers {
        let started =
            crate::tools::mcp::start_and_list(name, server, session.workspace(), &sandbox, &cancel)
                .map_err(|e| SessionError::Mcp(e.message))?;
        let id = started.client.identity().clone();
        let listed = started.listed;
        drop(started.client);
        let pin = pins.as_ref().map(|p| p.get(name));
        let changes = match pin {
            Some(Some(pin)) => changes_since(pin, &id, &listed, started.ca_cert_sha256.as_deref()),
            _ => Vec::new(),
        };
        differs |= !changes.is_empty() || matches!(pin, Some(None));
        let tools = listed
            .into_iter()
            .map(|t| {
                let allowed = server.tools.contains(&t.name);
                let sha256 = pins::pin_tool(&t).sha256;
                let status = match (allowed, pin) {
                    (false, _) => ToolStatus::NotAllowed,
                    (true, None) => ToolStatus::Allowed,
                    (true, Some(None)) => ToolStatus::NotPinned,
                    (true, Some(Some(p))) => match p.tools.get(&t.name) {
                        None => ToolStatus::NotPinned,
                        Some(tp) if tp.sha256 == sha256 => ToolStatus::MatchesPin,
                        Some(_) => ToolStatus::DiffersFromPin,
                    },
                };
                OfferedTool {
                    offered_as: allowed.then(|| crate::policy::mcp_tool_name(name, &t.name)),
                    name: t.name,
                    status,
                    description: t.description,
                    sha256,
                    input_schema: t.input_schema,
                }
            })
            .collect();
        servers.push(ServerTools {
            server: name.clone(),
            protocol_version: id.protocol_version.clone(),
            server_name: id.name.clone(),
            server_version: id.version.clone(),
            changes,
            tools,
        });
    }
    Ok(McpToolsReport { servers, differs })
}

/// What differs between a server as it answered now and its pin, in words (what the run compares
/// at the server's first call).
fn changes_since(
    pin: &pins::ServerPin,
    id: &crate::mcp::client::Identity,
    listed: &[crate::mcp::client::ListedTool],
    ca_cert_sha256: Option<&str>,
) -> Vec<String> {
    let mut changes = pins::differences(pin, id, listed);
    changes.extend(pins::ca_difference(pin, ca_cert_sha256));
    changes
}

/// The MCP servers a plan calls: those of its steps' tools and of its agent steps' tool lists.
fn servers_used(plan: &plan::Plan) -> std::collections::BTreeSet<String> {
    let mut used = std::collections::BTreeSet::new();
    for step in &plan.steps {
        let listed = step
            .arguments
            .get("tools")
            .and_then(|t| t.as_array().cloned())
            .unwrap_or_default();
        let names = std::iter::once(step.tool.clone())
            .chain(listed.iter().filter_map(|t| t.as_str().map(str::to_string)));
        for name in names {
            if let Some(server) = crate::policy::mcp_server_of(&name) {
                used.insert(server.to_string());
            }
        }
    }
    used
}

/// `preview`'s approval outlook with the MCP servers the plan calls checked now, as the run checks
/// each at its first call: an approved plan whose pinned server changed, or no longer starts, is
/// one the run would stop (exit 36), not "approved (run may start it)". Starts each such server.
pub fn recheck_outlook(
    session: &Session,
    path: &Path,
    plan: &plan::Plan,
    outlook: super::session::ApprovalOutlook,
) -> super::session::ApprovalOutlook {
    let used = servers_used(plan);
    if !outlook.may_run || used.is_empty() {
        return outlook;
    }
    let refused = |reason: String| super::session::ApprovalOutlook {
        status: outlook.status,
        may_run: false,
        reason: Some(reason),
        approved_by: None,
    };
    let (policy, auth) = match (session.policy(), plan::auth::load(path, plan)) {
        (Ok(policy), Ok(auth)) => (policy, auth),
        (Err(e), _) => return refused(e.to_string()),
        (_, Err(e)) => return refused(e.to_string()),
    };
    let sandbox = match session.sandbox(&policy, policy.sandbox) {
        Ok(sandbox) => sandbox,
        Err(e) => return refused(e.to_string()),
    };
    let cancel = std::sync::atomic::AtomicBool::new(false);
    let mut changes = Vec::new();
    for name in &used {
        let (Some(server), Some(pin)) = (policy.mcp.servers.get(name), auth.mcp.get(name)) else {
            changes.push(format!("MCP server {name} is not pinned by the approval"));
            continue;
        };
        match crate::tools::mcp::start_and_list(
            name,
            server,
            session.workspace(),
            &sandbox,
            &cancel,
        ) {
            Ok(started) => changes.extend(
                changes_since(
                    pin,
                    started.client.identity(),
                    &started.listed,
                    started.ca_cert_sha256.as_deref(),
                )
                .into_iter()
                .map(|c| format!("MCP server {name}: {c}")),
            ),
            Err(e) => changes.push(format!(
                "MCP server {name} cannot be checked: {}",
                e.message
            )),
        }
    }
    if changes.is_empty() {
        return outlook;
    }
    refused(format!(
        "MCP server changed since approval (the run stops at its first call, exit 36): {}",
        changes.join("; ")
    ))
}
