//! `file_delete`: removes a file, or a symlink itself; never a directory.

use std::io;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{Target, capped_artifact, io_err, target};
use crate::tools::args::{parse, schema_for};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput};

/// The arguments of `file_delete`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteArgs {
    /// The file to delete, relative to the workspace root (or absolute inside it).
    #[schemars(length(min = 1))]
    pub path: String,
}

/// `file_delete`: see the module docs.
pub struct FileDelete;

/// The name a delete removes (through its parent's handle) and a diff of what goes with it.
fn plan_delete(a: &DeleteArgs, ctx: &ToolContext) -> Result<(Target, String), ToolError> {
    let t = target(&a.path, ctx, false, false)?;
    let rel = ctx.workspace.display(&t.abs);
    let io = |e| io_err("delete", ctx, &t.abs, e);
    let not_found = || io(io::Error::from(io::ErrorKind::NotFound));
    let parent = t.parent.as_ref().ok_or_else(not_found)?;
    let meta = parent.lstat().map_err(io)?.ok_or_else(not_found)?;
    let diff = if meta.file_type().is_symlink() {
        let to = parent
            .read_link()
            .map(|t| t.to_string_lossy().into_owned())
            .unwrap_or_default();
        format!("--- a/{rel}\n+++ /dev/null\n[acode-run: symlink to {to:?} removed]\n")
    } else if meta.is_dir() {
        return Err(ToolError::Failed(format!(
            "{rel} is a directory; file_delete removes files only"
        )));
    } else {
        t.existing("delete", ctx)?.diff_to(&rel, None)
    };
    Ok((t, diff))
}

impl Tool for FileDelete {
    fn name(&self) -> &'static str {
        "file_delete"
    }

    fn description(&self) -> &'static str {
        "Delete a file (or a symlink itself); directories are refused."
    }

    fn schema(&self) -> Value {
        schema_for::<DeleteArgs>()
    }

    fn idempotent(&self) -> bool {
        false
    }

    fn check(&self, args: &Value, ctx: &ToolContext) -> Result<(), ToolError> {
        let a: DeleteArgs = parse(self.name(), args)?;
        super::resolve(&a.path, ctx, crate::workspace::Access::Write).map(|_| ())
    }

    fn preview(&self, args: &Value, ctx: &ToolContext) -> Option<String> {
        let a: DeleteArgs = parse(self.name(), args).ok()?;
        plan_delete(&a, ctx).ok().map(|(_, diff)| diff)
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let a: DeleteArgs = parse(self.name(), args)?;
        let (t, diff) = plan_delete(&a, ctx)?;
        t.parent()?
            .unlink()
            .map_err(|e| io_err("delete", ctx, &t.abs, e))?;
        Ok(
            ToolOutput::ok(format!("deleted {}", ctx.workspace.display(&t.abs))).with_artifact(
                capped_artifact("diff", diff, ctx.policy.limits.output_bytes),
            ),
        )
    }
}
