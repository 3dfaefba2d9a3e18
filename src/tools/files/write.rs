//! `file_write` (replace or create) and `file_create` (create only): whole-file writes.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{
    Existing, Target, already_exists, capped_artifact, io_err, target, unified_diff, write_atomic,
};
use crate::tools::args::{parse, schema_for};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput};

/// The arguments of `file_write` and `file_create`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    /// The file to write, relative to the workspace root (or absolute inside it).
    #[schemars(length(min = 1))]
    pub path: String,
    /// The complete new contents of the file.
    pub contents: String,
}

/// `file_write`: replaces (or creates) a file atomically, creating parent directories.
pub struct FileWrite;

/// `file_create`: creates a new file atomically; fails if anything exists at the path.
pub struct FileCreate;

/// Where a `file_write` goes and what is there now; shared by `preview` (`create == false`: no
/// directory is made) and `run`.
fn plan_write(
    a: &WriteArgs,
    ctx: &ToolContext,
    create: bool,
) -> Result<(Target, Existing), ToolError> {
    let t = target(&a.path, ctx, create, true)?;
    let old = t.existing("write", ctx)?;
    Ok((t, old))
}

/// Where a `file_create` goes; refuses an existing target early (the write re-checks atomically).
fn plan_create(a: &WriteArgs, ctx: &ToolContext, create: bool) -> Result<Target, ToolError> {
    let t = target(&a.path, ctx, create, false)?;
    if let Some(parent) = &t.parent
        && parent
            .lstat()
            .map_err(|e| io_err("create", ctx, &t.abs, e))?
            .is_some()
    {
        return Err(already_exists(ctx, &t.abs));
    }
    Ok(t)
}

impl Tool for FileWrite {
    fn name(&self) -> &'static str {
        "file_write"
    }

    fn description(&self) -> &'static str {
        "Write a file's complete contents atomically, creating it and its parent directories if needed."
    }

    fn schema(&self) -> Value {
        schema_for::<WriteArgs>()
    }

    fn idempotent(&self) -> bool {
        true
    }

    fn check(&self, args: &Value, ctx: &ToolContext) -> Result<(), ToolError> {
        let a: WriteArgs = parse(self.name(), args)?;
        super::resolve(&a.path, ctx, crate::workspace::Access::Write).map(|_| ())
    }

    fn preview(&self, args: &Value, ctx: &ToolContext) -> Option<String> {
        let a: WriteArgs = parse(self.name(), args).ok()?;
        let (t, old) = plan_write(&a, ctx, false).ok()?;
        Some(old.diff_to(&ctx.workspace.display(&t.abs), Some(&a.contents)))
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let a: WriteArgs = parse(self.name(), args)?;
        let (t, old) = plan_write(&a, ctx, true)?;
        let rel = ctx.workspace.display(&t.abs);
        let diff = old.diff_to(&rel, Some(&a.contents));
        let verb = match old {
            Existing::Missing => "created",
            Existing::File { .. } => "wrote",
        };
        write_atomic(ctx, &t, a.contents.as_bytes(), true, old.mode())?;
        Ok(
            ToolOutput::ok(format!("{verb} {rel} ({} bytes)", a.contents.len())).with_artifact(
                capped_artifact("diff", diff, ctx.policy.limits.output_bytes),
            ),
        )
    }
}

impl Tool for FileCreate {
    fn name(&self) -> &'static str {
        "file_create"
    }

    fn description(&self) -> &'static str {
        "Create a new file with the given contents; fails if the path already exists."
    }

    fn schema(&self) -> Value {
        schema_for::<WriteArgs>()
    }

    fn idempotent(&self) -> bool {
        false
    }

    fn check(&self, args: &Value, ctx: &ToolContext) -> Result<(), ToolError> {
        let a: WriteArgs = parse(self.name(), args)?;
        super::resolve(&a.path, ctx, crate::workspace::Access::Write).map(|_| ())
    }

    fn preview(&self, args: &Value, ctx: &ToolContext) -> Option<String> {
        let a: WriteArgs = parse(self.name(), args).ok()?;
        let t = plan_create(&a, ctx, false).ok()?;
        Some(unified_diff(
            &ctx.workspace.display(&t.abs),
            None,
            Some(&a.contents),
        ))
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let a: WriteArgs = parse(self.name(), args)?;
        let t = plan_create(&a, ctx, true)?;
        let rel = ctx.workspace.display(&t.abs);
        write_atomic(ctx, &t, a.contents.as_bytes(), false, None)?;
        let diff = unified_diff(&rel, None, Some(&a.contents));
        Ok(
            ToolOutput::ok(format!("created {rel} ({} bytes)", a.contents.len())).with_artifact(
                capped_artifact("diff", diff, ctx.policy.limits.output_bytes),
            ),
        )
    }
}
