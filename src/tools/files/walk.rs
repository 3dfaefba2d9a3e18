//! The walk the walking tools share: from directory handle to directory handle, never following
//! a symlink, in path order, plus the walk root and the shape of a walking tool's result.
//!
//! The root is checked like any path and opened beneath the workspace root by the kernel
//! ([`crate::workspace::fs`]). Below it each directory is opened relative to its parent's handle with
//! `O_NOFOLLOW` and read with `fdopendir`, and a visitor gets each entry's directory handle and name
//! so it can open a file without resolving a path again. Results are JSON with workspace-relative,
//! '/'-separated paths, sorted; `content` is that JSON, followed by an `[acode-run: ...]` note line
//! when the result was cut at a cap. The `stdout` artifact holds the JSON alone and is marked
//! truncated in that case.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use serde_json::Value;

use super::{Halt, fs_err, io_err, resolve};
use crate::tools::{Artifact, ToolContext, ToolError, ToolOutput};
use crate::workspace::fs::{EntryKind, FsError};
use crate::workspace::{Access, fs as kfs};

/// Directories `file_search` and `file_glob` never enter: version control and acode-run's own.
const SKIPPED_DIRS: &[&str] = &[".git", crate::workspace::state::STATE_DIR];

/// Builds the result of a walking tool (see the module docs).
pub(crate) fn json_result(data: Value, truncated: bool, note: Option<String>) -> ToolOutput {
    let text = data.to_string();
    let mut content = text.clone();
    if let Some(note) = note {
        content.push_str(&format!("\n[acode-run: {note}]"));
    }
    let bytes = text.len() as u64;
    ToolOutput::ok(content).with_artifact(Artifact {
        artifact_type: "stdout".to_string(),
        content: text,
        bytes,
        truncated,
        lossy: false,
    })
}

/// One entry met by a walk: its directory's handle and name (to open it without resolving a path
/// again), its path relative to the walk root and its kind.
pub(crate) struct Entry<'d> {
    /// The handle of the directory holding the entry.
    pub dir: BorrowedFd<'d>,
    /// The entry's name in that directory.
    pub name: &'d OsStr,
    /// Its path relative to the walk root.
    pub rel: String,
    /// Its kind, not following symlinks.
    pub kind: EntryKind,
}

/// What a walk does after visiting an entry.
pub(crate) enum Flow {
    /// Go on (descending into a directory).
    Continue,
    /// Go on, but do not descend into this directory.
    Prune,
    /// Stop the walk.
    Stop,
}

/// Walks below the directory handle `root` to `max_depth`, in path order: siblings sorted so that
/// a depth-first walk visits paths in byte order (a directory sorts as its name followed by '/',
/// so `a.txt` comes before everything in `a/`), and a walk cut short keeps exactly the first paths
/// of the sorted result. Returns the number of directories that could not be read.
pub(crate) fn walk(
    root: &OwnedFd,
    max_depth: usize,
    visit: &mut dyn FnMut(&Entry) -> Result<Flow, Halt>,
) -> Result<usize, Halt> {
    let mut unreadable = 0;
    walk_dir(root, "", 1, max_depth, visit, &mut unreadable)?;
    Ok(unreadable)
}

/// One level of [`walk`]; `Ok(true)` when the visitor stopped the walk.
fn walk_dir(
    dir: &OwnedFd,
    prefix: &str,
    depth: usize,
    max_depth: usize,
    visit: &mut dyn FnMut(&Entry) -> Result<Flow, Halt>,
    unreadable: &mut usize,
) -> Result<bool, Halt> {
    let Ok(mut entries) = kfs::read_dir(dir.as_fd()) else {
        *unreadable += 1;
        return Ok(false);
    };
    let key = |e: &kfs::DirEntry| {
        let mut k = e.name.as_bytes().to_vec();
        if e.kind == EntryKind::Dir {
            k.push(b'/');
        }
        k
    };
    entries.sort_by_key(key);
    for e in &entries {
        let name_str = e.name.to_string_lossy();
        let rel = if prefix.is_empty() {
            name_str.into_owned()
        } else {
            format!("{prefix}/{name_str}")
        };
        let entry = Entry {
            dir: dir.as_fd(),
            name: &e.name,
            rel,
            kind: e.kind,
        };
        match visit(&entry)? {
            Flow::Stop => return Ok(true),
            Flow::Prune => continue,
            Flow::Continue => {}
        }
        if e.kind == EntryKind::Dir && depth < max_depth {
            match kfs::open_subdir(dir.as_fd(), &e.name) {
                Ok(sub) => {
                    if walk_dir(&sub, &entry.rel, depth + 1, max_depth, visit, unreadable)? {
                        return Ok(true);
                    }
                }
                Err(_) => *unreadable += 1,
            }
        }
    }
    Ok(false)
}

/// The walk root: a path argument (default `.`) checked, then opened as a directory by the kernel
/// beneath the workspace root. Returns the handle and the root's workspace-relative path.
pub(crate) fn dir_root(
    given: Option<&str>,
    ctx: &ToolContext,
) -> Result<(OwnedFd, String), ToolError> {
    let abs: PathBuf = resolve(given.unwrap_or("."), ctx, Access::Read)?;
    let fd = kfs::open_dir(ctx.workspace, &abs).map_err(|e| match e {
        FsError::Io(e) if e.raw_os_error() == Some(libc::ENOTDIR) => io_err(
            "list",
            ctx,
            &abs,
            io::Error::new(io::ErrorKind::NotADirectory, "is not a directory"),
        ),
        e => fs_err("list", ctx, &abs, e),
    })?;
    let shown = ctx.workspace.display(&abs);
    Ok((fd, shown))
}

/// The workspace-relative path of `rel`, a path relative to a walk root shown as `root`.
pub(crate) fn under(root: &str, rel: &str) -> String {
    if root == "." {
        rel.to_string()
    } else {
        format!("{root}/{rel}")
    }
}

/// Whether a search/glob walk prunes this entry (`.git` and `.acode` below the root).
pub(crate) fn skipped(e: &Entry) -> bool {
    e.kind == EntryKind::Dir && SKIPPED_DIRS.iter().any(|d| e.name == *d)
}

pub(crate) fn truncation_note(cap: usize, what: &str) -> String {
    format!("results truncated at {cap} {what}; narrow the pattern or root to see the rest")
}
