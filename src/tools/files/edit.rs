//! `file_edit`: replaces an exact piece of text that must occur once (or everywhere, on request).

use std::io;
use std::os::unix::fs::PermissionsExt;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{
    MAX_EDIT_BYTES, Target, capped_artifact, io_err, read_bounded, target, unified_diff,
    write_atomic,
};
use crate::tools::args::{parse, schema_for};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput};

/// The arguments of `file_edit`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditArgs {
    /// The file to edit, relative to the workspace root (or absolute inside it).
    #[schemars(length(min = 1))]
    pub path: String,
    /// The exact text to replace, including whitespace; must occur exactly once unless
    /// replace_all is true.
    #[schemars(length(min = 1))]
    pub old: String,
    /// The text to put in its place.
    pub new: String,
    /// Replace every occurrence instead of requiring exactly one (default false).
    #[serde(default)]
    pub replace_all: bool,
}

impl EditArgs {
    /// Parses and checks what the schema cannot express for callers that skip it.
    fn parse(tool: &str, args: &Value) -> Result<EditArgs, ToolError> {
        let a: EditArgs = parse(tool, args)?;
        if a.old.is_empty() {
            return Err(ToolError::invalid(tool, "'old' must not be empty"));
        }
        Ok(a)
    }
}

/// `file_edit`: see the module docs.
pub struct FileEdit;

/// The file an edit applies to, with its text before and after.
struct PlannedEdit {
    target: Target,
    mode: u32,
    before: String,
    after: String,
    replaced: usize,
}

fn plan_edit(a: &EditArgs, ctx: &ToolContext) -> Result<PlannedEdit, ToolError> {
    let target = target(&a.path, ctx, false, true)?;
    let rel = ctx.workspace.display(&target.abs);
    let io = |e| io_err("edit", ctx, &target.abs, e);
    let parent = target
        .parent
        .as_ref()
        .ok_or_else(|| io(io::Error::from(io::ErrorKind::NotFound)))?;
    let file = parent.open_existing().map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if meta.len() > MAX_EDIT_BYTES {
        return Err(ToolError::Failed(format!(
            "{rel} is {} bytes, more than file_edit handles ({MAX_EDIT_BYTES} bytes)",
            meta.len()
        )));
    }
    let (_, raw) = read_bounded(file, MAX_EDIT_BYTES).map_err(io)?;
    let before = String::from_utf8(raw).map_err(|_| {
        ToolError::Failed(format!(
            "{rel} is not valid UTF-8; file_edit only edits text (use file_write to replace it)"
        ))
    })?;
    let count = before.matches(a.old.as_str()).count();
    if count == 0 {
        return Err(ToolError::Failed(format!(
            "the 'old' text was not found in {rel} (it must match exactly, including whitespace)"
        )));
    }
    if count > 1 && !a.replace_all {
        return Err(ToolError::Failed(format!(
            "the 'old' text occurs {count} times in {rel}; include more surrounding context so it matches exactly once, or set replace_all to true"
        )));
    }
    let after = if a.replace_all {
        before.replace(&a.old, &a.new)
    } else {
        before.replacen(&a.old, &a.new, 1)
    };
    Ok(PlannedEdit {
        mode: meta.permissions().mode() & 0o7777,
        target,
        before,
        after,
        replaced: count,
    })
}

impl Tool for FileEdit {
    fn name(&self) -> &'static str {
        "file_edit"
    }

    fn description(&self) -> &'static str {
        "Replace an exact piece of text in a file; it must occur exactly once unless replace_all is true."
    }

    fn schema(&self) -> Value {
        schema_for::<EditArgs>()
    }

    fn idempotent(&self) -> bool {
        false
    }

    fn check(&self, args: &Value, ctx: &ToolContext) -> Result<(), ToolError> {
        let a = EditArgs::parse(self.name(), args)?;
        super::resolve(&a.path, ctx, crate::sandbox::Access::Write).map(|_| ())
    }

    fn preview(&self, args: &Value, ctx: &ToolContext) -> Option<String> {
        let a = EditArgs::parse(self.name(), args).ok()?;
        let edit = plan_edit(&a, ctx).ok()?;
        Some(unified_diff(
            &ctx.workspace.display(&edit.target.abs),
            Some(&edit.before),
            Some(&edit.after),
        ))
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let a = EditArgs::parse(self.name(), args)?;
        let edit = plan_edit(&a, ctx)?;
        let rel = ctx.workspace.display(&edit.target.abs);
        write_atomic(
            ctx,
            &edit.target,
            edit.after.as_bytes(),
            true,
            Some(edit.mode),
        )?;
        let diff = unified_diff(&rel, Some(&edit.before), Some(&edit.after));
        let plural = if edit.replaced == 1 { "" } else { "s" };
        Ok(ToolOutput::ok(format!(
            "replaced {} occurrence{plural} in {rel}",
            edit.replaced
        ))
        .with_artifact(capped_artifact(
            "diff",
            diff,
            ctx.policy.limits.output_bytes,
        )))
    }
}
