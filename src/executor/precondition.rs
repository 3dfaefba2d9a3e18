//! Evaluating a step's precondition just before the step runs.
//!
//! Paths are resolved and files read through the tools layer ([`crate::tools::files::probe`],
//! [`crate::tools::files::read_regular`]): the same lexical check and kernel-checked resolution as
//! every file tool, regular files only and bounded reads, so a FIFO or device named by a
//! precondition cannot block the run. `command_succeeds` runs through the normal tool pipeline
//! (so it is checked, confirmed if needed, and recorded).

use std::path::Path;

use serde_json::{Value, json};

use super::ExecutionError;
use super::call::{CallOptions, StepContext};
use crate::plan::Precondition;
use crate::plan::validate::step_path;
use crate::tools::ToolCall;
use crate::tools::files::{Probe, probe, read_regular};

/// The most bytes `file_contains` reads from a file.
const CONTAINS_LIMIT: u64 = 16 * 1024 * 1024;

/// `Ok(None)` when the precondition holds, `Ok(Some(why))` when not.
pub fn evaluate(
    pre: &Precondition,
    args: &Value,
    ctx: &mut StepContext,
) -> Result<Option<String>, ExecutionError> {
    let ws = ctx.run.workspace;
    let look = |p: &str| probe(ws, p).map_err(|e| e.to_string());
    let verdict = match pre {
        Precondition::None => Ok(None),
        Precondition::StepFileExists => match step_path(args) {
            None => Ok(Some("the step has no path argument".to_string())),
            Some(p) => {
                look(p).map(|k| (k == Probe::Missing).then(|| format!("{p} does not exist")))
            }
        },
        Precondition::FileExists(p) => {
            look(p).map(|k| (k == Probe::Missing).then(|| format!("{p} does not exist")))
        }
        Precondition::FileAbsent(p) => {
            look(p).map(|k| (k != Probe::Missing).then(|| format!("{p} already exists")))
        }
        Precondition::CargoWorkspaceExists => {
            let start = step_path(args).unwrap_or(".");
            cargo_workspace(ws, start).map(|found| {
                (!found)
                    .then(|| format!("no Cargo.toml in {start} or any parent inside the workspace"))
            })
        }
        Precondition::CodegraphDbExists => look("codegraph.db").map(|k| {
            (k != Probe::File).then(|| "codegraph.db not found in the workspace root".to_string())
        }),
        Precondition::FileContains { path, pattern } => match regex::Regex::new(pattern) {
            Err(e) => Ok(Some(format!("invalid pattern: {e}"))),
            Ok(re) => match read_regular(ws, path, CONTAINS_LIMIT) {
                Err(crate::tools::ToolError::Sandbox(v)) => Err(v.to_string()),
                Err(e) => Ok(Some(format!("cannot read {path}: {e}"))),
                Ok(buf) => {
                    let text = String::from_utf8_lossy(&buf);
                    Ok((!re.is_match(&text)).then(|| format!("{path} does not match /{pattern}/")))
                }
            },
        },
        Precondition::CommandSucceeds(command) => {
            let call = ToolCall {
                call_id: format!("{}#precondition", ctx.step.step_id),
                step_id: ctx.step.step_id.clone(),
                tool: "run_command".to_string(),
                arguments: json!({ "command": command }),
                turn: None,
            };
            let result = ctx.call_tool(call, &CallOptions::default())?;
            return Ok((!result.success).then(|| {
                format!(
                    "command {command:?} did not succeed: {}",
                    result.error.unwrap_or_else(|| "failed".to_string())
                )
            }));
        }
    };
    Ok(verdict.unwrap_or_else(Some))
}

/// Whether `start` (a file or directory) or one of its parents inside the workspace holds a
/// `Cargo.toml` file, every look going through the kernel-checked resolver.
fn cargo_workspace(ws: &crate::workspace::Workspace, start: &str) -> Result<bool, String> {
    let abs = ws.resolve(start).map_err(|v| v.to_string())?;
    let mut rel = abs
        .strip_prefix(ws.root())
        .unwrap_or(Path::new(""))
        .to_path_buf();
    if probe(ws, start).map_err(|e| e.to_string())? == Probe::File {
        rel.pop();
    }
    loop {
        let candidate = rel.join("Cargo.toml");
        let candidate = candidate.to_str().ok_or("path is not valid UTF-8")?;
        if probe(ws, candidate).map_err(|e| e.to_string())? == Probe::File {
            return Ok(true);
        }
        if !rel.pop() {
            return Ok(false);
        }
    }
}
