//! Evaluating a step's precondition just before the step runs.
//!
//! Paths go through the workspace resolver like any tool path; `command_succeeds` runs through the
//! normal tool pipeline (so it is checked, confirmed if needed, and recorded).

use std::io::Read;

use serde_json::{Value, json};

use super::ExecutionError;
use super::call::{CallOptions, StepContext};
use crate::plan::Precondition;
use crate::plan::validate::step_path;
use crate::tools::ToolCall;

/// The most bytes `file_contains` reads from a file.
const CONTAINS_LIMIT: u64 = 16 * 1024 * 1024;

/// `Ok(None)` when the precondition holds, `Ok(Some(why))` when not.
pub fn evaluate(
    pre: &Precondition,
    args: &Value,
    ctx: &mut StepContext,
) -> Result<Option<String>, ExecutionError> {
    let ws = ctx.run.workspace;
    let resolve = |p: &str| ws.resolve(p).map_err(|v| v.to_string());
    let verdict = match pre {
        Precondition::None => Ok(None),
        Precondition::StepFileExists => match step_path(args) {
            None => Ok(Some("the step has no path argument".to_string())),
            Some(p) => resolve(p).map(|abs| (!abs.exists()).then(|| format!("{p} does not exist"))),
        },
        Precondition::FileExists(p) => {
            resolve(p).map(|abs| (!abs.exists()).then(|| format!("{p} does not exist")))
        }
        Precondition::FileAbsent(p) => {
            resolve(p).map(|abs| abs.exists().then(|| format!("{p} already exists")))
        }
        Precondition::CargoWorkspaceExists => {
            let start = step_path(args).unwrap_or(".");
            resolve(start).map(|abs| {
                let mut dir = if abs.is_file() {
                    abs.parent().map(|p| p.to_path_buf())
                } else {
                    Some(abs)
                };
                while let Some(d) = dir {
                    if !d.starts_with(ws.root()) {
                        break;
                    }
                    if d.join("Cargo.toml").is_file() {
                        return None;
                    }
                    dir = d.parent().map(|p| p.to_path_buf());
                }
                Some(format!(
                    "no Cargo.toml in {start} or any parent inside the workspace"
                ))
            })
        }
        Precondition::CodegraphDbExists => Ok((!ws.root().join("codegraph.db").is_file())
            .then(|| "codegraph.db not found in the workspace root".to_string())),
        Precondition::FileContains { path, pattern } => match regex::Regex::new(pattern) {
            Err(e) => Ok(Some(format!("invalid pattern: {e}"))),
            Ok(re) => resolve(path).map(|abs| {
                let mut buf = Vec::new();
                match std::fs::File::open(&abs)
                    .and_then(|f| f.take(CONTAINS_LIMIT).read_to_end(&mut buf))
                {
                    Err(e) => Some(format!("cannot read {path}: {e}")),
                    Ok(_) => {
                        let text = String::from_utf8_lossy(&buf);
                        (!re.is_match(&text)).then(|| format!("{path} does not match /{pattern}/"))
                    }
                }
            }),
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
