//! File tools: `file_read`, `file_write`, `file_create`, `file_edit`, `file_delete`.
//!
//! Every path argument goes through [`crate::sandbox::Workspace`]; these tools never judge a path
//! themselves. All writes go through one helper, `write_atomic`: a temporary file in the runner's
//! staging area `.acode/tmp/<pid>/` (or, on another filesystem, beside the target), fsynced, then
//! renamed (or hard-linked, for `file_create`) into place and the directory fsynced, so a crash at
//! any moment leaves either the old or the new file, never half of one.
//!
//! Conventions shared with the other tools:
//! - `content` (what the driver and an LLM see) is the data itself; when it had to be cut short or
//!   decoded lossily, a bracketed `[acode-run: ...]` note line follows it.
//! - The `stdout` artifact holds the exact data, with `bytes` the full size and `truncated` set
//!   when the data is only part of it; writes record a unified `diff` artifact.
//! - A write through a symlink that stays inside the workspace writes the file it points to (the
//!   link is kept), like `echo > link` would.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use similar::{Algorithm, TextDiff};

use super::{
    Artifact, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry, arg_opt_bool, arg_opt_u64,
    arg_str,
};
use crate::error::ErrorKind;
use crate::sandbox::Access;

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
}

// ---------------------------------------------------------------------------------------------
// Helpers shared with the search tools.

/// Resolves the string argument `name` through the workspace with `access`.
pub(crate) fn resolve_arg(
    tool: &str,
    args: &Value,
    name: &str,
    ctx: &ToolContext,
    access: Access,
) -> Result<PathBuf, ToolError> {
    let given = arg_str(tool, args, name)?;
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

/// The longest prefix of `s` that is at most `max` bytes and ends on a char boundary.
pub(crate) fn cut_at_char_boundary(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

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
        if self.ticks % 16 != 0 {
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

/// Opens `path` for reading only if it is a regular file (not a directory, FIFO or device, which
/// could block or never end), naming the path in the error.
pub(crate) fn open_regular(
    op: &'static str,
    ctx: &ToolContext,
    path: &Path,
) -> Result<(File, u64), ToolError> {
    let meta = fs::metadata(path).map_err(|e| io_err(op, ctx, path, e))?;
    if meta.is_dir() {
        return Err(io_err(
            op,
            ctx,
            path,
            io::Error::new(io::ErrorKind::IsADirectory, "is a directory, not a file"),
        ));
    }
    if !meta.is_file() {
        return Err(io_err(
            op,
            ctx,
            path,
            io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"),
        ));
    }
    let file = File::open(path).map_err(|e| io_err(op, ctx, path, e))?;
    Ok((file, meta.len()))
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
// Writing.

/// What an existing target held, for diffs and permissions.
enum Existing {
    /// Nothing there.
    Missing,
    /// A regular file: its permissions and, unless too large, its text (lossy).
    File {
        perms: fs::Permissions,
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
}

/// Reads what is at `path` now (not following a final symlink: callers resolve that first).
fn existing(op: &'static str, ctx: &ToolContext, path: &Path) -> Result<Existing, ToolError> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Existing::Missing),
        Err(e) => Err(io_err(op, ctx, path, e)),
        Ok(meta) if meta.is_dir() => Err(io_err(
            op,
            ctx,
            path,
            io::Error::new(io::ErrorKind::IsADirectory, "is a directory, not a file"),
        )),
        Ok(meta) if !meta.is_file() => Err(io_err(
            op,
            ctx,
            path,
            io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"),
        )),
        Ok(meta) => {
            let text = if meta.len() <= MAX_EDIT_BYTES {
                let bytes = fs::read(path).map_err(|e| io_err(op, ctx, path, e))?;
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
}

/// If `path` is a symlink, the file it leads to, re-resolved for writing through the workspace
/// (so a link into `.git/` or onto the database is refused); otherwise `path` itself.
fn follow_final_link(ctx: &ToolContext, path: PathBuf) -> Result<PathBuf, ToolError> {
    match fs::symlink_metadata(&path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            let real = path
                .canonicalize()
                .map_err(|e| io_err("write", ctx, &path, e))?;
            let real = real.to_str().ok_or_else(|| {
                ToolError::Failed(format!(
                    "{}: link target is not valid UTF-8",
                    ctx.workspace.display(&path)
                ))
            })?;
            Ok(ctx.workspace.resolve_for_write(real)?)
        }
        _ => Ok(path),
    }
}

/// Creates the missing directories above `dir`, top-down, resolving each through the workspace
/// before creating it.
fn create_parents(ctx: &ToolContext, dir: &Path) -> Result<(), ToolError> {
    let mut missing = Vec::new();
    let mut cur = dir;
    loop {
        match fs::metadata(cur) {
            Ok(meta) if meta.is_dir() => break,
            Ok(_) => {
                return Err(io_err(
                    "create directory",
                    ctx,
                    cur,
                    io::Error::new(
                        io::ErrorKind::NotADirectory,
                        "exists and is not a directory",
                    ),
                ));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                missing.push(cur.to_path_buf());
                match cur.parent() {
                    Some(p) if cur != ctx.workspace.root() => cur = p,
                    _ => break,
                }
            }
            Err(e) => return Err(io_err("create directory", ctx, cur, e)),
        }
    }
    for d in missing.iter().rev() {
        let s = d.to_str().ok_or_else(|| {
            ToolError::Failed(format!(
                "{}: path is not valid UTF-8",
                ctx.workspace.display(d)
            ))
        })?;
        let checked = ctx.workspace.resolve_for_write(s)?;
        match fs::create_dir(&checked) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && checked.is_dir() => {}
            Err(e) => return Err(io_err("create directory", ctx, &checked, e)),
        }
    }
    Ok(())
}

/// Whether [`write_atomic`] may replace an existing file.
#[derive(Clone, Copy, PartialEq, Eq)]
enum WriteMode {
    /// Replace the target if it exists (`file_write`, `file_edit`).
    Replace,
    /// Fail if anything exists at the target (`file_create`).
    CreateNew,
}

/// Removes the temporary file unless it was consumed.
struct TempFile(Option<PathBuf>);

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = fs::remove_file(p);
        }
    }
}

/// Fsyncs a directory so a rename or unlink in it survives a crash. Filesystems that cannot sync
/// directories say so with `EINVAL`; that is not an error worth failing a write for.
fn sync_dir(ctx: &ToolContext, dir: &Path) -> Result<(), ToolError> {
    let result = File::open(dir).and_then(|d| d.sync_all());
    match result {
        Err(e)
            if e.kind() != io::ErrorKind::InvalidInput
                && e.kind() != io::ErrorKind::Unsupported =>
        {
            Err(io_err("sync", ctx, dir, e))
        }
        _ => Ok(()),
    }
}

/// The one write path: writes `contents` to `target` atomically (see the module docs). `target`
/// must already be resolved for writing and must not be a symlink (see [`follow_final_link`]).
/// `perms` are the permissions to keep when replacing a file.
fn write_atomic(
    ctx: &ToolContext,
    target: &Path,
    contents: &[u8],
    mode: WriteMode,
    perms: Option<fs::Permissions>,
) -> Result<(), ToolError> {
    let parent = target
        .parent()
        .ok_or_else(|| ToolError::Failed("cannot write the filesystem root".to_string()))?;
    create_parents(ctx, parent)?;
    // Staged in the runner's private area when it is on the same filesystem, so a crash (kill -9)
    // between write and rename leaves nothing in the workspace proper; the next run sweeps it.
    let temp_path = ctx
        .workspace
        .staging_dir_for(parent)
        .map(|dir| dir.join(uuid::Uuid::new_v4().to_string()))
        .unwrap_or_else(|| parent.join(format!(".acode-tmp-{}", uuid::Uuid::new_v4())));
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp_path)
        .map_err(|e| io_err("write", ctx, &temp_path, e))?;
    let mut temp = TempFile(Some(temp_path.clone()));
    file.write_all(contents)
        .map_err(|e| io_err("write", ctx, &temp_path, e))?;
    if let Some(perms) = perms {
        fs::set_permissions(&temp_path, perms).map_err(|e| io_err("write", ctx, &temp_path, e))?;
    }
    file.sync_all()
        .map_err(|e| io_err("write", ctx, &temp_path, e))?;
    drop(file);
    match mode {
        WriteMode::Replace => {
            fs::rename(&temp_path, target).map_err(|e| io_err("write", ctx, target, e))?;
            temp.0 = None;
        }
        WriteMode::CreateNew => {
            // A hard link never replaces an existing name, so the existence check and the
            // creation are one atomic step; the temporary name is removed afterwards.
            fs::hard_link(&temp_path, target).map_err(|e| {
                if e.kind() == io::ErrorKind::AlreadyExists {
                    already_exists(ctx, target)
                } else {
                    io_err("create", ctx, target, e)
                }
            })?;
        }
    }
    drop(temp);
    sync_dir(ctx, parent)
}

fn already_exists(ctx: &ToolContext, target: &Path) -> ToolError {
    ToolError::Failed(format!(
        "{} already exists (use file_write or file_edit to change it)",
        ctx.workspace.display(target)
    ))
}

fn path_schema(what: &str) -> Value {
    json!({
        "type": "string",
        "minLength": 1,
        "description": format!("{what}, relative to the workspace root (or absolute inside it).")
    })
}

// ---------------------------------------------------------------------------------------------
// file_read

/// `file_read`: returns a file's text, optionally a range of lines, capped at the read limit.
pub struct FileRead;

/// The lines `file_read` picked out of a file.
struct Selection {
    /// The selected bytes (at most the read limit).
    bytes: Vec<u8>,
    /// Whether the selection was cut at the read limit.
    capped: bool,
    /// Lines fully or partly included.
    lines_returned: u64,
    /// Lines in the whole file.
    total_lines: u64,
}

/// Streams `reader`, keeping lines `offset..offset+limit` (1-based) up to `cap` bytes, and counts
/// every line so the caller can say where the file ends.
fn select_lines(
    reader: impl Read,
    offset: u64,
    limit: Option<u64>,
    cap: usize,
    pacer: &mut Pacer,
) -> io::Result<Result<Selection, Halt>> {
    let mut reader = BufReader::with_capacity(64 * 1024, reader);
    let end = limit.map(|l| offset.saturating_add(l));
    let mut sel = Selection {
        bytes: Vec::new(),
        capped: false,
        lines_returned: 0,
        total_lines: 0,
    };
    let mut line_no: u64 = 1; // the line the next byte belongs to
    let mut at_line_start = true;
    loop {
        if let Err(h) = pacer.tick() {
            return Ok(Err(h));
        }
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            break;
        }
        let n = chunk.len();
        let mut pos = 0;
        while pos < n {
            let rest = &chunk[pos..];
            let (seg_len, ends_line) = match rest.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (rest.len(), false),
            };
            let wanted = line_no >= offset && end.is_none_or(|e| line_no < e);
            if wanted && !sel.capped {
                if at_line_start {
                    sel.lines_returned += 1;
                }
                let room = cap - sel.bytes.len();
                if seg_len <= room {
                    sel.bytes.extend_from_slice(&rest[..seg_len]);
                } else {
                    sel.bytes.extend_from_slice(&rest[..room]);
                    sel.capped = true;
                }
            }
            at_line_start = ends_line;
            if ends_line {
                sel.total_lines += 1;
                line_no += 1;
            }
            pos += seg_len;
        }
        reader.consume(n);
    }
    if !at_line_start {
        sel.total_lines += 1; // a last line without a newline
    }
    Ok(Ok(sel))
}

/// Drops a UTF-8 sequence cut off at the end of `bytes`, so a cap does not fake an invalid byte.
fn trim_partial_char(bytes: &mut Vec<u8>) {
    let len = bytes.len();
    for back in 1..=3.min(len) {
        let b = bytes[len - back];
        if b & 0xC0 == 0x80 {
            continue; // continuation byte; keep looking for the lead byte
        }
        let width = match b {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        if width > back {
            bytes.truncate(len - back);
        }
        return;
    }
}

impl Tool for FileRead {
    fn name(&self) -> &'static str {
        "file_read"
    }

    fn description(&self) -> &'static str {
        "Read a text file, optionally only `limit` lines starting at 1-based line `offset`."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": path_schema("The file to read"),
                "offset": {
                    "type": "integer", "minimum": 1,
                    "description": "1-based number of the first line to return (default 1)."
                },
                "limit": {
                    "type": "integer", "minimum": 1,
                    "description": "Maximum number of lines to return (default: to the end of the file, within the read limit)."
                }
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }

    fn idempotent(&self) -> bool {
        true
    }

    fn check(&self, args: &Value, ctx: &ToolContext) -> Result<(), ToolError> {
        resolve_arg(self.name(), args, "path", ctx, Access::Read).map(|_| ())
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let path = resolve_arg(self.name(), args, "path", ctx, Access::Read)?;
        let rel = ctx.workspace.display(&path);
        let offset = arg_opt_u64(args, "offset").unwrap_or(1).max(1);
        let limit = arg_opt_u64(args, "limit");
        let cap = ctx.policy.limits.read_bytes;
        let (file, size) = open_regular("read", ctx, &path)?;
        let mut pacer = Pacer::new(ctx);
        let sel = match select_lines(file, offset, limit, cap, &mut pacer)
            .map_err(|e| io_err("read", ctx, &path, e))?
        {
            Ok(sel) => sel,
            Err(halt) => return halt.into_result(self.name(), ctx),
        };
        let mut bytes = sel.bytes;
        if sel.capped {
            trim_partial_char(&mut bytes);
        }
        let (text, lossy) = match String::from_utf8(bytes) {
            Ok(s) => (s, false),
            Err(e) => (String::from_utf8_lossy(e.as_bytes()).into_owned(), true),
        };
        // Lossy decoding can grow the text; it still has to fit the cap.
        let text = cut_at_char_boundary(&text, cap).to_string();

        let mut notes = Vec::new();
        // Offset 1 of an empty file is simply empty, not "past the end".
        if offset > sel.total_lines && offset > 1 {
            notes.push(format!(
                "offset {offset} is past the end of {rel} ({} lines)",
                sel.total_lines
            ));
        }
        if sel.capped {
            let next = offset + sel.lines_returned.saturating_sub(1);
            notes.push(format!(
                "output truncated at the read limit of {cap} bytes; {rel} has {} lines and {size} bytes; continue with offset={next}",
                sel.total_lines
            ));
        }
        if lossy {
            notes.push(format!(
                "{rel} is not valid UTF-8; invalid bytes are shown as U+FFFD"
            ));
        }
        let mut content = text.clone();
        for note in &notes {
            if !content.is_empty() && !content.ends_with('\n') {
                content.push('\n');
            }
            content.push_str(&format!("[acode-run: {note}]"));
        }
        let partial = text.len() as u64 != size || lossy;
        let info = json!({
            "path": rel,
            "bytes": size,
            "lines": sel.total_lines,
            "offset": offset,
            "lines_returned": sel.lines_returned,
            "truncated": sel.capped,
            "lossy": lossy,
        });
        Ok(ToolOutput::ok(content)
            .with_artifact(Artifact {
                artifact_type: "stdout".to_string(),
                content: text,
                bytes: size,
                truncated: partial,
                lossy,
            })
            .with_artifact(Artifact::new("file_info", info.to_string())))
    }
}

// ---------------------------------------------------------------------------------------------
// file_write / file_create

/// `file_write`: replaces (or creates) a file atomically, creating parent directories.
pub struct FileWrite;

/// `file_create`: creates a new file atomically; fails if anything exists at the path.
pub struct FileCreate;

fn write_schema(what: &str) -> Value {
    json!({
        "type": "object",
        "properties": {
            "path": path_schema(what),
            "contents": {"type": "string", "description": "The complete new contents of the file."}
        },
        "required": ["path", "contents"],
        "additionalProperties": false
    })
}

/// Where a `file_write` goes and what is there now; shared by `preview` and `run`.
fn plan_write(
    tool: &str,
    args: &Value,
    ctx: &ToolContext,
) -> Result<(PathBuf, Existing), ToolError> {
    let target = resolve_arg(tool, args, "path", ctx, Access::Write)?;
    let target = follow_final_link(ctx, target)?;
    let old = existing("write", ctx, &target)?;
    Ok((target, old))
}

/// Where a `file_create` goes; refuses an existing target early (the write re-checks atomically).
fn plan_create(tool: &str, args: &Value, ctx: &ToolContext) -> Result<PathBuf, ToolError> {
    let target = resolve_arg(tool, args, "path", ctx, Access::Write)?;
    if fs::symlink_metadata(&target).is_ok() {
        return Err(already_exists(ctx, &target));
    }
    Ok(target)
}

impl Tool for FileWrite {
    fn name(&self) -> &'static str {
        "file_write"
    }

    fn description(&self) -> &'static str {
        "Write a file's complete contents atomically, creating it and its parent directories if needed."
    }

    fn schema(&self) -> Value {
        write_schema("The file to write")
    }

    fn idempotent(&self) -> bool {
        true
    }

    fn check(&self, args: &Value, ctx: &ToolContext) -> Result<(), ToolError> {
        resolve_arg(self.name(), args, "path", ctx, Access::Write).map(|_| ())
    }

    fn preview(&self, args: &Value, ctx: &ToolContext) -> Option<String> {
        let (target, old) = plan_write(self.name(), args, ctx).ok()?;
        let contents = arg_str(self.name(), args, "contents").ok()?;
        Some(old.diff_to(&ctx.workspace.display(&target), Some(contents)))
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let contents = arg_str(self.name(), args, "contents")?;
        let (target, old) = plan_write(self.name(), args, ctx)?;
        let rel = ctx.workspace.display(&target);
        let diff = old.diff_to(&rel, Some(contents));
        let (verb, perms) = match old {
            Existing::Missing => ("created", None),
            Existing::File { perms, .. } => ("wrote", Some(perms)),
        };
        write_atomic(ctx, &target, contents.as_bytes(), WriteMode::Replace, perms)?;
        Ok(
            ToolOutput::ok(format!("{verb} {rel} ({} bytes)", contents.len())).with_artifact(
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
        write_schema("The file to create")
    }

    fn idempotent(&self) -> bool {
        false
    }

    fn check(&self, args: &Value, ctx: &ToolContext) -> Result<(), ToolError> {
        resolve_arg(self.name(), args, "path", ctx, Access::Write).map(|_| ())
    }

    fn preview(&self, args: &Value, ctx: &ToolContext) -> Option<String> {
        let target = plan_create(self.name(), args, ctx).ok()?;
        let contents = arg_str(self.name(), args, "contents").ok()?;
        Some(unified_diff(
            &ctx.workspace.display(&target),
            None,
            Some(contents),
        ))
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let contents = arg_str(self.name(), args, "contents")?;
        let target = plan_create(self.name(), args, ctx)?;
        let rel = ctx.workspace.display(&target);
        write_atomic(
            ctx,
            &target,
            contents.as_bytes(),
            WriteMode::CreateNew,
            None,
        )?;
        let diff = unified_diff(&rel, None, Some(contents));
        Ok(
            ToolOutput::ok(format!("created {rel} ({} bytes)", contents.len())).with_artifact(
                capped_artifact("diff", diff, ctx.policy.limits.output_bytes),
            ),
        )
    }
}

// ---------------------------------------------------------------------------------------------
// file_edit

/// `file_edit`: replaces an exact piece of text that must occur once (or everywhere, on request).
pub struct FileEdit;

/// The file an edit applies to, with its text before and after.
struct PlannedEdit {
    target: PathBuf,
    perms: fs::Permissions,
    before: String,
    after: String,
    replaced: usize,
}

fn plan_edit(tool: &str, args: &Value, ctx: &ToolContext) -> Result<PlannedEdit, ToolError> {
    let old = arg_str(tool, args, "old")?;
    let new = arg_str(tool, args, "new")?;
    if old.is_empty() {
        return Err(ToolError::invalid(tool, "'old' must not be empty"));
    }
    let replace_all = arg_opt_bool(args, "replace_all").unwrap_or(false);
    let target = resolve_arg(tool, args, "path", ctx, Access::Write)?;
    let target = follow_final_link(ctx, target)?;
    let rel = ctx.workspace.display(&target);
    let (file, size) = open_regular("edit", ctx, &target)?;
    if size > MAX_EDIT_BYTES {
        return Err(ToolError::Failed(format!(
            "{rel} is {size} bytes, more than file_edit handles ({MAX_EDIT_BYTES} bytes)"
        )));
    }
    let perms = file
        .metadata()
        .map_err(|e| io_err("edit", ctx, &target, e))?
        .permissions();
    let mut raw = Vec::new();
    file.take(MAX_EDIT_BYTES)
        .read_to_end(&mut raw)
        .map_err(|e| io_err("edit", ctx, &target, e))?;
    let before = String::from_utf8(raw).map_err(|_| {
        ToolError::Failed(format!(
            "{rel} is not valid UTF-8; file_edit only edits text (use file_write to replace it)"
        ))
    })?;
    let count = before.matches(old).count();
    if count == 0 {
        return Err(ToolError::Failed(format!(
            "the 'old' text was not found in {rel} (it must match exactly, including whitespace)"
        )));
    }
    if count > 1 && !replace_all {
        return Err(ToolError::Failed(format!(
            "the 'old' text occurs {count} times in {rel}; include more surrounding context so it matches exactly once, or set replace_all to true"
        )));
    }
    let after = if replace_all {
        before.replace(old, new)
    } else {
        before.replacen(old, new, 1)
    };
    Ok(PlannedEdit {
        target,
        perms,
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
        json!({
            "type": "object",
            "properties": {
                "path": path_schema("The file to edit"),
                "old": {
                    "type": "string", "minLength": 1,
                    "description": "The exact text to replace, including whitespace; must occur exactly once unless replace_all is true."
                },
                "new": {"type": "string", "description": "The text to put in its place."},
                "replace_all": {
                    "type": "boolean",
                    "description": "Replace every occurrence instead of requiring exactly one (default false)."
                }
            },
            "required": ["path", "old", "new"],
            "additionalProperties": false
        })
    }

    fn idempotent(&self) -> bool {
        false
    }

    fn check(&self, args: &Value, ctx: &ToolContext) -> Result<(), ToolError> {
        if arg_str(self.name(), args, "old")?.is_empty() {
            return Err(ToolError::invalid(self.name(), "'old' must not be empty"));
        }
        resolve_arg(self.name(), args, "path", ctx, Access::Write).map(|_| ())
    }

    fn preview(&self, args: &Value, ctx: &ToolContext) -> Option<String> {
        let edit = plan_edit(self.name(), args, ctx).ok()?;
        Some(unified_diff(
            &ctx.workspace.display(&edit.target),
            Some(&edit.before),
            Some(&edit.after),
        ))
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let edit = plan_edit(self.name(), args, ctx)?;
        let rel = ctx.workspace.display(&edit.target);
        write_atomic(
            ctx,
            &edit.target,
            edit.after.as_bytes(),
            WriteMode::Replace,
            Some(edit.perms),
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

// ---------------------------------------------------------------------------------------------
// file_delete

/// `file_delete`: removes a file, or a symlink itself; never a directory.
pub struct FileDelete;

/// The path a delete removes and a diff of what goes with it.
fn plan_delete(
    tool: &str,
    args: &Value,
    ctx: &ToolContext,
) -> Result<(PathBuf, String), ToolError> {
    let target = resolve_arg(tool, args, "path", ctx, Access::Write)?;
    let rel = ctx.workspace.display(&target);
    let meta = fs::symlink_metadata(&target).map_err(|e| io_err("delete", ctx, &target, e))?;
    let diff = if meta.file_type().is_symlink() {
        let to = fs::read_link(&target)
            .map(|t| t.to_string_lossy().into_owned())
            .unwrap_or_default();
        format!("--- a/{rel}\n+++ /dev/null\n[acode-run: symlink to {to:?} removed]\n")
    } else if meta.is_dir() {
        return Err(ToolError::Failed(format!(
            "{rel} is a directory; file_delete removes files only"
        )));
    } else {
        existing("delete", ctx, &target)?.diff_to(&rel, None)
    };
    Ok((target, diff))
}

impl Tool for FileDelete {
    fn name(&self) -> &'static str {
        "file_delete"
    }

    fn description(&self) -> &'static str {
        "Delete a file (or a symlink itself); directories are refused."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"path": path_schema("The file to delete")},
            "required": ["path"],
            "additionalProperties": false
        })
    }

    fn idempotent(&self) -> bool {
        false
    }

    fn check(&self, args: &Value, ctx: &ToolContext) -> Result<(), ToolError> {
        resolve_arg(self.name(), args, "path", ctx, Access::Write).map(|_| ())
    }

    fn preview(&self, args: &Value, ctx: &ToolContext) -> Option<String> {
        plan_delete(self.name(), args, ctx)
            .ok()
            .map(|(_, diff)| diff)
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let (target, diff) = plan_delete(self.name(), args, ctx)?;
        fs::remove_file(&target).map_err(|e| io_err("delete", ctx, &target, e))?;
        if let Some(parent) = target.parent() {
            sync_dir(ctx, parent)?;
        }
        Ok(
            ToolOutput::ok(format!("deleted {}", ctx.workspace.display(&target))).with_artifact(
                capped_artifact("diff", diff, ctx.policy.limits.output_bytes),
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::search::{FileGlob, FileSearch, ListDirectory};
    use crate::tools::testutil::TestWs;
    use std::os::unix::fs::{PermissionsExt, symlink};

    fn artifact<'o>(out: &'o ToolOutput, kind: &str) -> &'o Artifact {
        out.artifacts
            .iter()
            .find(|a| a.artifact_type == kind)
            .unwrap_or_else(|| panic!("no {kind} artifact in {out:?}"))
    }

    fn failed_with(result: Result<ToolOutput, ToolError>, needle: &str) -> String {
        let msg = match result {
            Err(e @ (ToolError::Failed(_) | ToolError::Io { .. })) => e.to_string(),
            other => panic!("expected a failure mentioning {needle:?}, got {other:?}"),
        };
        assert!(msg.contains(needle), "{msg:?} should mention {needle:?}");
        msg
    }

    fn temp_files(dir: &Path) -> Vec<String> {
        TestWs::names(dir)
            .into_iter()
            .filter(|n| n.starts_with(".acode-tmp-"))
            .collect()
    }

    // --- file_read -------------------------------------------------------------------------

    #[test]
    fn read_whole_file() {
        let t = TestWs::new();
        t.write("src/lib.rs", "one\ntwo\nthree\n");
        let out = t.call(&FileRead, json!({"path": "src/lib.rs"})).unwrap();
        assert!(out.success);
        assert_eq!(out.content, "one\ntwo\nthree\n");
        let stdout = artifact(&out, "stdout");
        assert_eq!(stdout.content, "one\ntwo\nthree\n");
        assert_eq!(stdout.bytes, 14);
        assert!(!stdout.truncated);
        let info: Value = serde_json::from_str(&artifact(&out, "file_info").content).unwrap();
        assert_eq!(info["lines"], 3);
        assert_eq!(info["bytes"], 14);
        assert_eq!(info["lines_returned"], 3);
        assert_eq!(info["path"], "src/lib.rs");
    }

    #[test]
    fn read_with_offset_and_limit() {
        let t = TestWs::new();
        t.write("f.txt", "l1\nl2\nl3\nl4\nl5");
        let out = t
            .call(&FileRead, json!({"path": "f.txt", "offset": 2, "limit": 2}))
            .unwrap();
        assert_eq!(out.content, "l2\nl3\n");
        let stdout = artifact(&out, "stdout");
        assert_eq!(stdout.bytes, 14);
        assert!(stdout.truncated, "a part of the file is marked as such");
        let out = t
            .call(&FileRead, json!({"path": "f.txt", "offset": 4}))
            .unwrap();
        assert_eq!(out.content, "l4\nl5");
        let info: Value = serde_json::from_str(&artifact(&out, "file_info").content).unwrap();
        assert_eq!(info["lines"], 5);
        assert_eq!(info["lines_returned"], 2);
        // Past the end: empty text and a note, not an error.
        let out = t
            .call(&FileRead, json!({"path": "f.txt", "offset": 9}))
            .unwrap();
        assert_eq!(artifact(&out, "stdout").content, "");
        assert!(out.content.contains("past the end"), "{}", out.content);
        // An empty file is just empty.
        t.write("empty", "");
        let out = t.call(&FileRead, json!({"path": "empty"})).unwrap();
        assert_eq!(out.content, "");
        // Schema refuses offset 0 and negative limits.
        for bad in [
            json!({"path": "f.txt", "offset": 0}),
            json!({"path": "f.txt", "limit": -1}),
        ] {
            assert!(matches!(
                t.call(&FileRead, bad),
                Err(ToolError::InvalidArguments { .. })
            ));
        }
    }

    #[test]
    fn read_is_capped_on_a_char_boundary() {
        let mut t = TestWs::new();
        t.policy.limits.read_bytes = 10;
        // "ab\n" is 3 bytes and each 'é' 2, so the 10-byte cap falls inside the fourth 'é'.
        t.write("u.txt", "ab\néééé\nzz\n");
        let out = t.call(&FileRead, json!({"path": "u.txt"})).unwrap();
        let stdout = artifact(&out, "stdout");
        assert_eq!(stdout.content, "ab\nééé");
        assert!(stdout.truncated);
        assert_eq!(stdout.bytes, 15);
        assert!(
            out.content
                .starts_with("ab\nééé\n[acode-run: output truncated"),
            "{}",
            out.content
        );
        assert!(out.content.contains("offset=2"), "{}", out.content);
        assert!(
            !out.content.contains("U+FFFD"),
            "a cut char is not an invalid byte"
        );
    }

    #[test]
    fn read_non_utf8_is_lossy_and_says_so() {
        let t = TestWs::new();
        t.write("latin1.txt", b"caf\xe9\n");
        let out = t.call(&FileRead, json!({"path": "latin1.txt"})).unwrap();
        assert!(out.success);
        assert_eq!(artifact(&out, "stdout").content, "caf\u{FFFD}\n");
        assert!(out.content.contains("not valid UTF-8"), "{}", out.content);
        let info: Value = serde_json::from_str(&artifact(&out, "file_info").content).unwrap();
        assert_eq!(info["lossy"], true);
    }

    #[test]
    fn read_failures_name_the_path() {
        let t = TestWs::new();
        std::fs::create_dir_all(t.path("dir")).unwrap();
        let msg = failed_with(
            t.call(&FileRead, json!({"path": "missing.txt"})),
            "missing.txt",
        );
        assert!(!msg.contains(&t.root.display().to_string()), "{msg}");
        failed_with(
            t.call(&FileRead, json!({"path": "dir"})),
            "dir: is a directory",
        );
        // A FIFO would block forever if opened.
        let fifo = std::ffi::CString::new(t.path("fifo").to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        failed_with(
            t.call(&FileRead, json!({"path": "fifo"})),
            "not a regular file",
        );
        assert!(matches!(
            t.call(&FileRead, json!({"path": "a.txt", "colour": 1})),
            Err(ToolError::InvalidArguments { .. })
        ));
    }

    #[test]
    fn read_stops_when_cancelled() {
        let t = TestWs::new();
        t.write("big.txt", "x\n".repeat(4 * 1024 * 1024));
        t.cancel.store(true, Ordering::Relaxed);
        assert!(matches!(
            t.call(&FileRead, json!({"path": "big.txt"})),
            Err(ToolError::Interrupted)
        ));
    }

    // --- file_write ------------------------------------------------------------------------

    #[test]
    fn write_creates_parents_and_leaves_no_temp_file() {
        let t = TestWs::new();
        let out = t
            .call(
                &FileWrite,
                json!({"path": "a/b/c.txt", "contents": "hello\n"}),
            )
            .unwrap();
        assert!(out.success);
        assert_eq!(t.read("a/b/c.txt"), "hello\n");
        let diff = &artifact(&out, "diff").content;
        assert!(diff.contains("--- /dev/null"), "{diff}");
        assert!(diff.contains("+++ b/a/b/c.txt"), "{diff}");
        assert!(diff.contains("+hello"), "{diff}");
        assert!(temp_files(&t.path("a/b")).is_empty());
        assert!(temp_files(&t.root).is_empty());
    }

    #[test]
    fn write_overwrites_keeping_permissions() {
        let t = TestWs::new();
        t.write("run.sh", "old\n");
        std::fs::set_permissions(t.path("run.sh"), fs::Permissions::from_mode(0o751)).unwrap();
        let out = t
            .call(&FileWrite, json!({"path": "run.sh", "contents": "new\n"}))
            .unwrap();
        assert_eq!(t.read("run.sh"), "new\n");
        let mode = fs::metadata(t.path("run.sh")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o751);
        let diff = &artifact(&out, "diff").content;
        assert!(diff.contains("-old") && diff.contains("+new"), "{diff}");
        assert!(temp_files(&t.root).is_empty());
        // The preview shows the same diff without writing anything.
        let preview = FileWrite
            .preview(&json!({"path": "run.sh", "contents": "newer\n"}), &t.ctx())
            .unwrap();
        assert!(preview.contains("+newer"), "{preview}");
        assert_eq!(t.read("run.sh"), "new\n");
    }

    #[test]
    fn write_through_an_inside_symlink_keeps_the_link() {
        let t = TestWs::new();
        t.write("real.txt", "old");
        symlink("real.txt", t.path("link.txt")).unwrap();
        t.call(&FileWrite, json!({"path": "link.txt", "contents": "new"}))
            .unwrap();
        assert_eq!(t.read("real.txt"), "new");
        assert!(
            fs::symlink_metadata(t.path("link.txt"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }

    #[test]
    fn write_failures() {
        let t = TestWs::new();
        std::fs::create_dir_all(t.path("dir")).unwrap();
        t.write("file", "x");
        failed_with(
            t.call(&FileWrite, json!({"path": "dir", "contents": "x"})),
            "is a directory",
        );
        failed_with(
            t.call(&FileWrite, json!({"path": "file/sub.txt", "contents": "x"})),
            "file/sub.txt: Not a directory",
        );
        assert!(matches!(
            t.call(&FileWrite, json!({"path": "x.txt"})),
            Err(ToolError::InvalidArguments { .. })
        ));
        assert!(matches!(
            t.call(&FileWrite, json!({"path": ".", "contents": "x"})),
            Err(ToolError::Sandbox(_))
        ));
        assert_eq!(t.read("file"), "x");
    }

    // --- file_create -----------------------------------------------------------------------

    #[test]
    fn create_new_file() {
        let t = TestWs::new();
        let out = t
            .call(&FileCreate, json!({"path": "new/n.txt", "contents": "n\n"}))
            .unwrap();
        assert!(out.success);
        assert_eq!(t.read("new/n.txt"), "n\n");
        assert!(artifact(&out, "diff").content.contains("+n"));
        assert!(temp_files(&t.path("new")).is_empty());
        assert!(!FileCreate.idempotent());
    }

    #[test]
    fn create_on_existing_file_fails_and_leaves_it_unchanged() {
        let t = TestWs::new();
        t.write("keep.txt", "original\n");
        failed_with(
            t.call(
                &FileCreate,
                json!({"path": "keep.txt", "contents": "clobber"}),
            ),
            "already exists",
        );
        assert_eq!(t.read("keep.txt"), "original\n");
        // The atomic path itself (past the early check) refuses too and cleans up.
        let err = write_atomic(
            &t.ctx(),
            &t.path("keep.txt"),
            b"clobber",
            WriteMode::CreateNew,
            None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("already exists"), "{err}");
        assert_eq!(t.read("keep.txt"), "original\n");
        assert!(temp_files(&t.root).is_empty());
        // An existing symlink or directory counts as existing too.
        symlink("keep.txt", t.path("link")).unwrap();
        failed_with(
            t.call(&FileCreate, json!({"path": "link", "contents": "x"})),
            "already exists",
        );
        std::fs::create_dir(t.path("d")).unwrap();
        failed_with(
            t.call(&FileCreate, json!({"path": "d", "contents": "x"})),
            "already exists",
        );
        assert_eq!(t.read("keep.txt"), "original\n");
    }

    // --- file_edit -------------------------------------------------------------------------

    #[test]
    fn edit_exactly_one_match() {
        let t = TestWs::new();
        t.write("e.rs", "fn a() {}\nfn b() {}\n");
        let out = t
            .call(
                &FileEdit,
                json!({"path": "e.rs", "old": "fn b() {}", "new": "fn b() -> u8 { 1 }"}),
            )
            .unwrap();
        assert!(out.success);
        assert_eq!(t.read("e.rs"), "fn a() {}\nfn b() -> u8 { 1 }\n");
        let diff = &artifact(&out, "diff").content;
        assert!(
            diff.contains("-fn b() {}") && diff.contains("+fn b() -> u8 { 1 }"),
            "{diff}"
        );
        assert!(temp_files(&t.root).is_empty());
    }

    #[test]
    fn edit_zero_matches_fails() {
        let t = TestWs::new();
        t.write("e.txt", "alpha\n");
        failed_with(
            t.call(
                &FileEdit,
                json!({"path": "e.txt", "old": "beta", "new": "x"}),
            ),
            "not found",
        );
        assert_eq!(t.read("e.txt"), "alpha\n");
    }

    #[test]
    fn edit_two_matches_needs_replace_all() {
        let t = TestWs::new();
        t.write("e.txt", "x = 1;\nx = 1;\n");
        let msg = failed_with(
            t.call(
                &FileEdit,
                json!({"path": "e.txt", "old": "x = 1", "new": "x = 2"}),
            ),
            "2 times",
        );
        assert!(msg.contains("replace_all"), "{msg}");
        assert_eq!(t.read("e.txt"), "x = 1;\nx = 1;\n");
        let preview = FileEdit
            .preview(
                &json!({"path": "e.txt", "old": "x = 1", "new": "x = 2", "replace_all": true}),
                &t.ctx(),
            )
            .unwrap();
        assert!(preview.contains("+x = 2"), "{preview}");
        assert_eq!(
            t.read("e.txt"),
            "x = 1;\nx = 1;\n",
            "preview has no side effects"
        );
        let out = t
            .call(
                &FileEdit,
                json!({"path": "e.txt", "old": "x = 1", "new": "x = 2", "replace_all": true}),
            )
            .unwrap();
        assert_eq!(out.content, "replaced 2 occurrences in e.txt");
        assert_eq!(t.read("e.txt"), "x = 2;\nx = 2;\n");
    }

    #[test]
    fn edit_failures() {
        let t = TestWs::new();
        t.write("bin", b"\xff\xfe old");
        failed_with(
            t.call(
                &FileEdit,
                json!({"path": "bin", "old": "old", "new": "new"}),
            ),
            "not valid UTF-8",
        );
        failed_with(
            t.call(
                &FileEdit,
                json!({"path": "nope.txt", "old": "a", "new": "b"}),
            ),
            "nope.txt",
        );
        t.write("e.txt", "abc");
        assert!(matches!(
            t.call(&FileEdit, json!({"path": "e.txt", "old": "", "new": "b"})),
            Err(ToolError::InvalidArguments { .. })
        ));
        // Even without the schema, an empty `old` is refused by the tool itself.
        let args = json!({"path": "e.txt", "old": "", "new": "b"});
        assert!(FileEdit.check(&args, &t.ctx()).is_err());
        assert!(FileEdit.run(&args, &t.ctx()).is_err());
        assert_eq!(t.read("e.txt"), "abc");
    }

    // --- file_delete -----------------------------------------------------------------------

    #[test]
    fn delete_file_and_symlink() {
        let t = TestWs::new();
        t.write("gone.txt", "bye\n");
        let preview = FileDelete
            .preview(&json!({"path": "gone.txt"}), &t.ctx())
            .unwrap();
        assert!(preview.contains("-bye"), "{preview}");
        let out = t.call(&FileDelete, json!({"path": "gone.txt"})).unwrap();
        assert!(out.success);
        assert!(!t.path("gone.txt").exists());
        assert!(artifact(&out, "diff").content.contains("-bye"));
        // A symlink is removed itself; its target stays.
        t.write("target.txt", "stay");
        symlink("target.txt", t.path("link")).unwrap();
        t.call(&FileDelete, json!({"path": "link"})).unwrap();
        assert!(fs::symlink_metadata(t.path("link")).is_err());
        assert_eq!(t.read("target.txt"), "stay");
    }

    #[test]
    fn delete_failures() {
        let t = TestWs::new();
        t.write("d/inner.txt", "x");
        failed_with(t.call(&FileDelete, json!({"path": "d"})), "is a directory");
        assert_eq!(t.read("d/inner.txt"), "x");
        failed_with(t.call(&FileDelete, json!({"path": "missing"})), "missing");
    }

    #[test]
    fn registered_tools_have_precise_schemas() {
        let mut r = ToolRegistry::empty();
        register(&mut r);
        crate::tools::search::register(&mut r);
        let names: Vec<_> = r.names().collect();
        assert_eq!(
            names,
            [
                "file_create",
                "file_delete",
                "file_edit",
                "file_glob",
                "file_read",
                "file_search",
                "file_write",
                "list_directory"
            ]
        );
        for tool in r.iter() {
            let s = tool.schema();
            assert_eq!(s["type"], "object", "{}", tool.name());
            assert_eq!(s["additionalProperties"], false, "{}", tool.name());
            let props = s["properties"].as_object().unwrap();
            for (name, p) in props {
                assert!(p["description"].is_string(), "{}.{name}", tool.name());
            }
            for req in s["required"].as_array().unwrap() {
                assert!(props.contains_key(req.as_str().unwrap()), "{}", tool.name());
            }
            assert!(tool.description().ends_with('.'), "{}", tool.name());
        }
    }

    // --- path escapes ----------------------------------------------------------------------

    /// Links and protected files the escape table relies on; returns the escape attempts.
    fn escape_fixture(t: &mut TestWs) -> Vec<(String, bool)> {
        let out = t.outside.display().to_string();
        let root = t.root.display().to_string();
        t.write("sub/file.txt", "inside\n");
        t.write(".git/config", "[core]\n");
        t.write(".acode/executions.db", "db");
        t.ws.protect(Path::new(".acode/executions.db"));
        symlink(&t.outside, t.path("link_dir")).unwrap();
        symlink("../outside", t.path("link_rel_out")).unwrap();
        symlink(t.outside.join("sentinel.txt"), t.path("link_file")).unwrap();
        symlink("chain2", t.path("chain1")).unwrap();
        symlink(t.outside.join("sentinel.txt"), t.path("chain2")).unwrap();
        symlink("link_dir", t.path("chain_dir")).unwrap();
        symlink(t.outside.join("nonexistent"), t.path("dangling")).unwrap();
        symlink("../..", t.path("sub/link_up")).unwrap();
        symlink("sub", t.path("sub_link")).unwrap();
        symlink(&t.outside, t.path("sub/out_link")).unwrap();
        symlink(".git", t.path("git_link")).unwrap();
        symlink(".acode/executions.db", t.path("db_link")).unwrap();
        // (attempt, refused only for writes)
        let mut v: Vec<(String, bool)> = [
            "/etc/passwd".to_string(),
            "/".to_string(),
            "//etc/passwd".to_string(),
            format!("{out}/sentinel.txt"),
            out.clone(),
            format!("{out}/new.txt"),
            "../outside/sentinel.txt".to_string(),
            "../outside".to_string(),
            "../outside/new.txt".to_string(),
            "..".to_string(),
            "../".to_string(),
            "a/../../outside/sentinel.txt".to_string(),
            "./a/../../".to_string(),
            "./a/../../outside/new.txt".to_string(),
            "sub/../../outside".to_string(),
            "sub/./../../outside/sentinel.txt".to_string(),
            "../../../../../../../../../../etc/passwd".to_string(),
            "sub/../../../../../../tmp".to_string(),
            format!("{root}/../outside/sentinel.txt"),
            format!("{root}/sub/../../outside/new.txt"),
            format!("{root}/.."),
            format!("{root}evil/x"),
            "link_dir".to_string(),
            "link_dir/sentinel.txt".to_string(),
            "link_dir/new.txt".to_string(),
            "link_rel_out/sentinel.txt".to_string(),
            "link_file".to_string(),
            "chain1".to_string(),
            "chain_dir/sentinel.txt".to_string(),
            "chain_dir".to_string(),
            "dangling".to_string(),
            "dangling/x".to_string(),
            "sub/link_up/outside/sentinel.txt".to_string(),
            "sub/link_up".to_string(),
            "sub_link/out_link/sentinel.txt".to_string(),
            "sub/out_link/new.txt".to_string(),
            "sub/file.txt\0".to_string(),
            "\0".to_string(),
            "..\\outside\\sentinel.txt".to_string(),
            "sub\\file.txt".to_string(),
            "".to_string(),
        ]
        .into_iter()
        .map(|p| (p, false))
        .collect();
        for w in [
            ".git/config".to_string(),
            ".git/hooks/pre-commit".to_string(),
            ".git".to_string(),
            format!("{root}/.git/config"),
            "sub/../.git/config".to_string(),
            "git_link/config".to_string(),
            ".acode/executions.db".to_string(),
            ".acode/executions.db-wal".to_string(),
            ".acode/executions.db-journal".to_string(),
            "db_link".to_string(),
            ".".to_string(),
            root.clone(),
        ] {
            v.push((w, true));
        }
        v
    }

    #[test]
    fn every_path_tool_refuses_every_escape() {
        let mut t = TestWs::new();
        let attempts = escape_fixture(&mut t);
        assert!(attempts.len() >= 30);
        let before_outside = TestWs::snapshot(&t.outside);
        let before_base = TestWs::names(&t.base);
        let before_git = TestWs::snapshot(&t.path(".git"));
        let before_acode = TestWs::snapshot(&t.path(".acode"));
        let before_ws = TestWs::names(&t.root);
        let ctx = t.ctx();

        let mut refused = 0;
        for (path, write_only) in &attempts {
            let p = path.as_str();
            let mut calls: Vec<(&dyn Tool, Value)> = vec![
                (&FileWrite, json!({"path": p, "contents": "pwned"})),
                (&FileCreate, json!({"path": p, "contents": "pwned"})),
                (
                    &FileEdit,
                    json!({"path": p, "old": "sentinel", "new": "pwned"}),
                ),
                (&FileDelete, json!({"path": p})),
            ];
            if !write_only {
                calls.extend([
                    (&FileRead as &dyn Tool, json!({"path": p})),
                    (&ListDirectory, json!({"path": p})),
                    (&FileSearch, json!({"pattern": "sentinel", "root": p})),
                    (&FileGlob, json!({"pattern": "**", "root": p})),
                ]);
            }
            for (tool, args) in calls {
                let what = format!("{} {args}", tool.name());
                match tool.check(&args, &ctx) {
                    Err(ToolError::Sandbox(_)) => {}
                    other => panic!("check: {what} should be a sandbox violation, got {other:?}"),
                }
                match tool.run(&args, &ctx) {
                    Err(ToolError::Sandbox(_)) => {}
                    other => panic!("run: {what} should be a sandbox violation, got {other:?}"),
                }
                assert!(tool.preview(&args, &ctx).is_none(), "preview: {what}");
                refused += 1;
            }
        }
        // Escaping glob patterns, for both tools that take one.
        for pattern in [
            "../*",
            "../outside/*",
            "/etc/*",
            "**/../../*",
            "sub/../../x",
            "..",
        ] {
            for (tool, args) in [
                (&FileGlob as &dyn Tool, json!({"pattern": pattern})),
                (&FileSearch, json!({"pattern": "x", "glob": pattern})),
            ] {
                assert!(
                    matches!(tool.check(&args, &ctx), Err(ToolError::Sandbox(_))),
                    "check {args}"
                );
                assert!(
                    matches!(tool.run(&args, &ctx), Err(ToolError::Sandbox(_))),
                    "run {args}"
                );
                refused += 1;
            }
        }
        assert!(refused > 300, "{refused}");

        assert_eq!(TestWs::snapshot(&t.outside), before_outside);
        assert_eq!(TestWs::names(&t.base), before_base);
        assert_eq!(TestWs::snapshot(&t.path(".git")), before_git);
        assert_eq!(TestWs::snapshot(&t.path(".acode")), before_acode);
        assert_eq!(TestWs::names(&t.root), before_ws);
        assert_eq!(
            fs::read_to_string(t.outside.join("sentinel.txt")).unwrap(),
            "sentinel\n"
        );
    }

    #[test]
    fn walkers_do_not_follow_links_out() {
        let mut t = TestWs::new();
        escape_fixture(&mut t);
        let ctx = t.ctx();
        let search = FileSearch
            .run(&json!({"pattern": "sentinel"}), &ctx)
            .unwrap();
        assert_eq!(search.content, "[]", "no match may come from outside");
        let glob = FileGlob.run(&json!({"pattern": "**"}), &ctx).unwrap();
        assert!(!glob.content.contains("sentinel"), "{}", glob.content);
        let list = ListDirectory
            .run(&json!({"path": ".", "depth": 10}), &ctx)
            .unwrap();
        assert!(!list.content.contains("sentinel"), "{}", list.content);
        assert!(
            list.content
                .contains(r#"{"path":"link_dir","size":null,"type":"symlink"}"#),
            "{}",
            list.content
        );
    }
}
