//! File tools: `file_read`, `file_write`, `file_create`, `file_edit`, `file_delete`,
//! `list_directory`.
//!
//! Every path argument is first checked lexically by [`crate::workspace::Workspace`] (the readable
//! error), then opened through [`crate::workspace::fs`], where the kernel resolves it beneath the
//! workspace root's handle and refuses any escape while it does so. Writes act on the parent
//! directory's handle: a temporary file in the runner's staging area `.acode/tmp/<pid>/` (or, on
//! another filesystem, beside the target), fsynced, then `renameat` (or `linkat`, for
//! `file_create`) into place and the directory fsynced, so a crash at any moment leaves either the
//! old or the new file, never half of one, and no path string is resolved again after the check.
//!
//! Conventions shared with the other tools:
//! - `content` (what the driver and an LLM see) is the data itself; when it had to be cut short or
//!   decoded lossily, a bracketed `[acode-run: ...]` note line follows it.
//! - The `stdout` artifact holds the exact data, with `bytes` the full size and `truncated` set
//!   when the data is only part of it; writes record a unified `diff` artifact.
//! - A write through a symlink that stays inside the workspace writes the file it points to (the
//!   link is kept), like `echo > link` would.
//!
//! One file per concern: this module holds what the tools share (target resolution, what exists
//! at a target, diffs, pacing, the probes preconditions use); `walk` the handle-based walk the
//! walking tools share; `read`, `write` (`file_write` and `file_create`), `edit`, `delete` and
//! `list` hold one tool each.

mod delete;
mod edit;
mod list;
mod read;
pub(crate) mod walk;
mod write;

use std::fs::{File, Permissions};
use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use similar::{Algorithm, TextDiff};

use super::{Artifact, ToolContext, ToolError, ToolOutput, ToolRegistry};
use crate::error::ErrorKind;
use crate::workspace::fs::{FsError, Parent};
use crate::workspace::{Access, SandboxViolation, Workspace, fs as kfs};

pub use delete::{DeleteArgs, FileDelete};
pub use edit::{Address, Applied, EditArgs, EditOp, FileEdit, LineAction, apply as apply_edit};
pub use list::ListDirectory;
pub use read::FileRead;
pub use write::{FileCreate, FileWrite, WriteArgs};

/// Largest existing file `file_edit` loads, and the largest old content shown in a diff; bigger
/// files are refused (edit) or summarised (diff) rather than pulled into memory.
pub const MAX_EDIT_BYTES: u64 = 32 * 1024 * 1024;

/// How long computing one diff may take before `similar` falls back to a coarser diff.
const DIFF_TIMEOUT: Duration = Duration::from_secs(2);

/// Registers the file tools.
pub fn register(r: &mut ToolRegistry) {
    r.register(Arc::new(FileRead));
    r.register(Arc::new(FileWrite));
    r.register(Arc::new(FileCreate));
    r.register(Arc::new(FileEdit));
    r.register(Arc::new(FileDelete));
    r.register(Arc::new(ListDirectory));
}

// ---------------------------------------------------------------------------------------------
// Helpers shared with the search tools.

/// Resolves a path argument through the workspace's lexical check with `access`.
pub(crate) fn resolve(
    given: &str,
    ctx: &ToolContext,
    access: Access,
) -> Result<PathBuf, ToolError> {
    Ok(ctx.workspace.resolve_for(given, access)?)
}

/// An I/O error naming the workspace-relative path.
pub(crate) fn io_err(op: &'static str, ctx: &ToolContext, path: &Path, e: io::Error) -> ToolError {
    ToolError::Io {
        op,
        path: ctx.workspace.display(path),
        source: e,
    }
}

/// A kernel-checked operation's error: a refusal stays a sandbox violation, the rest names the path.
pub(crate) fn fs_err(op: &'static str, ctx: &ToolContext, path: &Path, e: FsError) -> ToolError {
    match e {
        FsError::Violation(v) => ToolError::Sandbox(v),
        FsError::Io(e) => io_err(op, ctx, path, e),
    }
}

pub(crate) use crate::util::cut_at_char_boundary;

/// An artifact holding at most `cap` bytes of `content`, marked truncated when cut.
pub(crate) fn capped_artifact(kind: &str, content: String, cap: usize) -> Artifact {
    if content.len() <= cap {
        return Artifact::new(kind, content);
    }
    let bytes = content.len() as u64;
    Artifact {
        artifact_type: kind.to_string(),
        content: cut_at_char_boundary(&content, cap).to_string(),
        bytes,
        truncated: true,
        lossy: false,
    }
}

/// Why a long-running tool stopped early.
pub(crate) enum Halt {
    /// The run is being interrupted.
    Interrupted,
    /// The call's time limit passed.
    TimedOut,
}

impl Halt {
    /// The result a halted tool returns.
    pub(crate) fn into_result(
        self,
        tool: &str,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        match self {
            Halt::Interrupted => Err(ToolError::Interrupted),
            Halt::TimedOut => Ok(ToolOutput::failed(
                ErrorKind::Timeout,
                format!("{tool} timed out after {} s", ctx.timeout.as_secs_f64()),
            )),
        }
    }
}

/// Keeps long loops interruptible, inside their time limit, and sending heartbeats.
pub(crate) struct Pacer<'c, 'a> {
    ctx: &'c ToolContext<'a>,
    start: Instant,
    last_beat: Instant,
    ticks: u32,
}

impl<'c, 'a> Pacer<'c, 'a> {
    /// Starts the clock.
    pub(crate) fn new(ctx: &'c ToolContext<'a>) -> Self {
        let now = Instant::now();
        Pacer {
            ctx,
            start: now,
            last_beat: now,
            ticks: 0,
        }
    }

    /// Called once per unit of work; every few calls checks the cancel flag and the clock.
    pub(crate) fn tick(&mut self) -> Result<(), Halt> {
        self.ticks = self.ticks.wrapping_add(1);
        if !self.ticks.is_multiple_of(16) {
            return Ok(());
        }
        if self.ctx.cancel.load(Ordering::Relaxed) {
            return Err(Halt::Interrupted);
        }
        let elapsed = self.start.elapsed();
        if elapsed > self.ctx.timeout {
            return Err(Halt::TimedOut);
        }
        if self.last_beat.elapsed() >= Duration::from_secs(1) {
            self.last_beat = Instant::now();
            (self.ctx.heartbeat)(elapsed);
        }
        Ok(())
    }
}

/// A unified diff of `old` → `new` (`None` = the file does not exist on that side).
pub(crate) fn unified_diff(rel: &str, old: Option<&str>, new: Option<&str>) -> String {
    let a = old.map_or_else(|| "/dev/null".to_string(), |_| format!("a/{rel}"));
    let b = new.map_or_else(|| "/dev/null".to_string(), |_| format!("b/{rel}"));
    TextDiff::configure()
        .algorithm(Algorithm::Myers)
        .timeout(DIFF_TIMEOUT)
        .diff_lines(old.unwrap_or(""), new.unwrap_or(""))
        .unified_diff()
        .context_radius(3)
        .header(&a, &b)
        .to_string()
}

// ---------------------------------------------------------------------------------------------
// Write targets.

/// What an existing target held, for diffs and permissions.
enum Existing {
    /// Nothing there.
    Missing,
    /// A regular file: its permissions and, unless too large, its text (lossy).
    File {
        perms: Permissions,
        size: u64,
        text: Option<String>,
    },
}

impl Existing {
    fn diff_to(&self, rel: &str, new: Option<&str>) -> String {
        match self {
            Existing::Missing => unified_diff(rel, None, new),
            Existing::File {
                text: Some(old), ..
            } => unified_diff(rel, Some(old), new),
            Existing::File {
                size, text: None, ..
            } => format!(
                "--- a/{rel}\n+++ {}\n[acode-run: previous content of {size} bytes is too large to diff]\n",
                if new.is_some() {
                    format!("b/{rel}")
                } else {
                    "/dev/null".to_string()
                }
            ),
        }
    }

    /// The permission bits to keep when replacing the file.
    fn mode(&self) -> Option<u32> {
        match self {
            Existing::Missing => None,
            Existing::File { perms, .. } => Some(perms.mode() & 0o7777),
        }
    }
}

/// A file the tools write: the held handle of its directory and the name in it, plus its
/// absolute path for messages. `parent` is `None` only in previews of a write into directories
/// that do not exist yet.
struct Target {
    abs: PathBuf,
    parent: Option<Parent>,
}

impl Target {
    /// The parent handle; only `None` in previews (see the type docs).
    fn parent(&self) -> Result<&Parent, ToolError> {
        self.parent
            .as_ref()
            .ok_or_else(|| ToolError::Failed("the target directory does not exist".to_string()))
    }

    /// Reads what is at the target now, not following a final symlink (callers follow it first).
    fn existing(&self, op: &'static str, ctx: &ToolContext) -> Result<Existing, ToolError> {
        let Some(parent) = &self.parent else {
            return Ok(Existing::Missing);
        };
        let io = |e| io_err(op, ctx, &self.abs, e);
        let Some(meta) = parent.lstat().map_err(io)? else {
            return Ok(Existing::Missing);
        };
        if meta.is_dir() {
            return Err(io(io::Error::new(
                io::ErrorKind::IsADirectory,
                "is a directory, not a file",
            )));
        }
        if !meta.is_file() {
            return Err(io(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            )));
        }
        let text = if meta.len() <= MAX_EDIT_BYTES {
            let (_, bytes) =
                read_bounded(parent.open_existing().map_err(io)?, MAX_EDIT_BYTES).map_err(io)?;
            Some(String::from_utf8_lossy(&bytes).into_owned())
        } else {
            None
        };
        Ok(Existing::File {
            perms: meta.permissions(),
            size: meta.len(),
            text,
        })
    }
}

/// Reads at most `max` bytes of an opened file, refusing anything but a regular file.
pub(crate) fn read_bounded(file: File, max: u64) -> io::Result<(u64, Vec<u8>)> {
    let meta = file.metadata()?;
    if meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::IsADirectory,
            "is a directory, not a file",
        ));
    }
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut buf = Vec::new();
    file.take(max).read_to_end(&mut buf)?;
    Ok((meta.len(), buf))
}

/// Resolves `given` for writing down to its parent handle. `create` makes missing parent
/// directories (at run time); without it (previews) a missing parent gives a target without one.
/// With `follow`, a final symlink is followed to the file it leads to, re-checked like any path,
/// so a link onto `.git/` or the database is refused.
fn target(given: &str, ctx: &ToolContext, create: bool, follow: bool) -> Result<Target, ToolError> {
    let abs = resolve(given, ctx, Access::Write)?;
    let parent = match kfs::parent_for_write(ctx.workspace, &abs, create) {
        Ok(p) => p,
        Err(FsError::Io(e)) if !create && e.kind() == io::ErrorKind::NotFound => {
            return Ok(Target { abs, parent: None });
        }
        Err(e) => return Err(fs_err("write", ctx, &abs, e)),
    };
    let is_link = parent
        .lstat()
        .map_err(|e| io_err("write", ctx, &abs, e))?
        .is_some_and(|m| m.file_type().is_symlink());
    if !(follow && is_link) {
        return Ok(Target {
            abs,
            parent: Some(parent),
        });
    }
    let real = parent
        .link_target(ctx.workspace)
        .map_err(|e| fs_err("write", ctx, &abs, e))?;
    let real_str = real.to_str().ok_or_else(|| {
        ToolError::Failed(format!("{}: link target is not valid UTF-8", parent.shown))
    })?;
    let real_abs = resolve(real_str, ctx, Access::Write)?;
    let real_parent = kfs::parent_for_write(ctx.workspace, &real_abs, false)
        .map_err(|e| fs_err("write", ctx, &real_abs, e))?;
    // `link_target` resolved every link: finding one again means the tree changed meanwhile.
    if real_parent
        .lstat()
        .map_err(|e| io_err("write", ctx, &real_abs, e))?
        .is_some_and(|m| m.file_type().is_symlink())
    {
        return Err(
            SandboxViolation::new(given, "the path changed while it was being written").into(),
        );
    }
    Ok(Target {
        abs: real_abs,
        parent: Some(real_parent),
    })
}

fn already_exists(ctx: &ToolContext, target: &Path) -> ToolError {
    ToolError::Failed(format!(
        "{} already exists (use file_write or file_edit to change it)",
        ctx.workspace.display(target)
    ))
}

/// Writes `contents` at `target` atomically (see the module docs); `replace == false` fails if
/// anything exists at the name, atomically.
fn write_atomic(
    ctx: &ToolContext,
    target: &Target,
    contents: &[u8],
    replace: bool,
    mode: Option<u32>,
) -> Result<(), ToolError> {
    target
        .parent()?
        .write_atomic(ctx.workspace, contents, replace, mode)
        .map_err(|e| {
            if !replace && e.kind() == io::ErrorKind::AlreadyExists {
                already_exists(ctx, &target.abs)
            } else {
                io_err("write", ctx, &target.abs, e)
            }
        })
}

// ---------------------------------------------------------------------------------------------
// Probes for preconditions: the same resolution as the tools, outside a tool call.

/// What a path names, as a precondition asks it (following symlinks beneath the root).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// Nothing there (or a dangling symlink).
    Missing,
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A FIFO, socket or device.
    Other,
}

/// Looks at `given` through the workspace's lexical check and then the kernel-checked resolver,
/// without opening it for reading (`O_PATH`), so nothing it names can block or be changed.
pub fn probe(ws: &Workspace, given: &str) -> Result<Probe, ToolError> {
    let abs = ws.resolve(given)?;
    let rel = abs.strip_prefix(ws.root()).unwrap_or(&abs);
    match kfs::open_beneath(ws.root_fd(), rel, libc::O_PATH, 0, false) {
        Ok(fd) => {
            let meta = File::from(fd)
                .metadata()
                .map_err(|e| probe_err(ws, &abs, e))?;
            Ok(if meta.is_file() {
                Probe::File
            } else if meta.is_dir() {
                Probe::Dir
            } else {
                Probe::Other
            })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Probe::Missing),
        Err(e) => match kfs::classify(e, &ws.display(&abs)) {
            FsError::Violation(v) => Err(v.into()),
            FsError::Io(e) => Err(probe_err(ws, &abs, e)),
        },
    }
}

/// Reads at most `max` bytes of the regular file `given` (a FIFO or device is refused, never
/// opened for a blocking read), through the same resolution as `file_read`.
pub fn read_regular(ws: &Workspace, given: &str, max: u64) -> Result<Vec<u8>, ToolError> {
    let abs = ws.resolve(given)?;
    let file = kfs::open_read(ws, &abs, true).map_err(|e| match e {
        FsError::Violation(v) => ToolError::Sandbox(v),
        FsError::Io(e) => probe_err(ws, &abs, e),
    })?;
    read_bounded(file, max)
        .map(|(_, bytes)| bytes)
        .map_err(|e| probe_err(ws, &abs, e))
}

fn probe_err(ws: &Workspace, abs: &Path, e: io::Error) -> ToolError {
    ToolError::Io {
        op: "read",
        path: ws.display(abs),
        source: e,
    }
}

#[cfg(test)]
mod tests;
