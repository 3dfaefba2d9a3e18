//! `acode-run mcp`: acode-run as an MCP server for agents over stdio
//! ([`crate::runner::mcp_server`], docs/mcp.md), and `acode-run mcp tools`, which lists what the
//! policy's MCP servers offer and whether it matches a plan's pins.

use std::path::{Path, PathBuf};

use super::shell::{Origin, Shell};
use super::{Args, CliError, redacted_session, workspace_session};
use crate::error::exit;
use crate::plan;
use crate::runner::mcp_tools::list_server_tools;

/// `acode-run mcp` (serve) or `acode-run mcp tools [POLICY] [PLAN]` (or `mcp tools PLAN`).
pub(super) fn cmd_mcp(args: &Args, shell: &Shell) -> Result<i32, CliError> {
    match args.positionals.first().map(String::as_str) {
        None => serve(args, shell),
        Some("tools") => mcp_tools(args, shell),
        Some(other) => Err(CliError::new(
            exit::USAGE,
            format!(
                "unknown `acode-run mcp` subcommand {other:?} (expected nothing, to serve, or tools)"
            ),
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// mcp tools

/// Starts each server the policy declares, lists its tools, and compares them with the pins in
/// PLAN's approval when a plan is given. Exit 36 when anything differs from the pins.
fn mcp_tools(args: &Args, shell: &Shell) -> Result<i32, CliError> {
    // `mcp tools PLAN` (one argument that reads as a plan) checks PLAN's pins against the
    // workspace's policy; otherwise the first argument is a policy file.
    let (policy_arg, plan_arg) = match (args.positionals.get(1), args.positionals.get(2)) {
        (Some(only), None) if plan::read(Path::new(only), &Default::default()).is_ok() => {
            (None, Some(only))
        }
        (policy, plan) => (policy, plan),
    };
    let session = workspace_session(args, policy_arg.map(PathBuf::from))?;
    let report = list_server_tools(&session, plan_arg.map(Path::new))?;
    if args.json {
        shell.out_json(&report, Origin::Runner);
    } else {
        let mut out = String::new();
        for s in &report.servers {
            out.push_str(&format!(
                "{}: {} {} (protocol {})\n",
                s.server, s.server_name, s.server_version, s.protocol_version,
            ));
            for c in &s.changes {
                out.push_str(&format!("  changed since approval: {c}\n"));
            }
            for t in &s.tools {
                let desc: String = t.description.chars().take(120).collect();
                out.push_str(&format!("  {} — {}: {desc:?}\n", t.name, t.status));
            }
        }
        shell.out_text(out);
    }
    Ok(if report.differs {
        exit::MCP_CHANGED
    } else {
        exit::OK
    })
}

/// The server over stdin, stdout and stderr (its log), until stdin ends. The server is library
/// code that redacts every reply value by value with the session's redactor, which is the
/// Shell's; the Shell lends it its streams ([`Shell::protocol_streams`]).
fn serve(args: &Args, shell: &Shell) -> Result<i32, CliError> {
    let session = redacted_session(args, None, shell.redactor())?;
    let stdin = std::io::stdin();
    let (mut out, mut log) = shell.protocol_streams();
    crate::runner::mcp_server::serve_lines(&session, &mut stdin.lock(), &mut out, &mut log);
    Ok(exit::OK)
}
