//! The path sandbox: every path a plan or a model names is resolved here, and only here.
//!
//! A path is accepted only if, after lexical normalisation and after following every symlink that
//! exists on disk, it stays inside the workspace root. Writes are further refused under `.git/` and
//! the execution database, so a plan cannot rewrite history or its own audit trail.

pub mod changes;
pub mod fs;
pub mod guard;
pub mod listing;
pub mod nested_git;
pub mod state;

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use thiserror::Error;

/// A request that would leave the sandbox (a path outside the workspace, a forbidden command).
///
/// Always permanent: it is never retried, and it maps to exit code 32.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[error("sandbox violation: {reason}: {subject}")]
pub struct SandboxViolation {
    /// The offending input, as given (a path or a command word), for the error message.
    pub subject: String,
    /// Why it was refused, in words a user can act on.
    pub reason: String,
}

impl SandboxViolation {
    /// Builds a violation; `subject` is shown with `{:?}` quoting so control characters stay visible.
    pub fn new(subject: impl AsRef<str>, reason: impl Into<String>) -> Self {
        SandboxViolation {
            subject: format!("{:?}", subject.as_ref()),
            reason: reason.into(),
        }
    }
}

/// The policy file's name in the workspace root ([`crate::policy::Policy::FILE_NAME`]): defined
/// here, below the policy, because the workspace protects it from writes.
pub const POLICY_FILE_NAME: &str = "acode-policy.json";

/// Where files being written are staged before their atomic rename, relative to the root.
pub const STAGING_DIR: &str = concat!(state::state_dir!(), "/tmp");

/// Whether a resolved path will be read or written; writes have extra protected areas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reading, listing, searching.
    Read,
    /// Creating, writing, editing, deleting.
    Write,
}

/// The workspace root and the places inside it that tools may not write.
///
/// The root is also held open as a directory handle: every file operation resolves relative to
/// it, with the kernel refusing escapes (see [`crate::workspace::fs`]).
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
    root_fd: Arc<OwnedFd>,
    protected: Vec<PathBuf>,
}

/// Opens the workspace root as the handle every resolution starts from (`O_PATH`: it can only be
/// resolved beneath, not read). Here rather than in `fs`, which builds on [`Workspace`].
pub(crate) fn open_root(root: &Path) -> std::io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(root)?;
    Ok(OwnedFd::from(dir))
}

impl Workspace {
    /// Opens a workspace at `root`, which must exist; it is canonicalised so symlinks in the root
    /// itself (e.g. `/tmp` on macOS) do not make every path look outside.
    pub fn new(root: &Path) -> std::io::Result<Self> {
        let root = root.canonicalize()?;
        // The policy file configures the sandbox itself: a plan must not loosen it for later runs.
        let protected = vec![root.join(".git"), root.join(POLICY_FILE_NAME)];
        let root_fd = Arc::new(open_root(&root)?);
        Ok(Workspace {
            root,
            root_fd,
            protected,
        })
    }

    /// The canonical workspace root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The handle of the root (`O_PATH`), which every kernel-checked resolution starts from.
    pub fn root_fd(&self) -> BorrowedFd<'_> {
        self.root_fd.as_fd()
    }

    /// Marks a path (file or directory) as not writable by tools, e.g. the execution database.
    /// Paths outside the workspace are ignored because tools cannot reach them anyway.
    pub fn protect(&mut self, path: &Path) {
        let abs = if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.root.join(path)
        };
        let abs = normalize_existing_prefix(&abs);
        if abs.starts_with(&self.root) && !self.protected.contains(&abs) {
            self.protected.push(abs);
        }
    }

    /// Places tools may not write, for the bubblewrap sandbox to mount read-only.
    pub fn protected(&self) -> &[PathBuf] {
        &self.protected
    }

    /// Resolves `path` (relative to the root, or absolute inside it) for reading.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, SandboxViolation> {
        self.resolve_for(path, Access::Read)
    }

    /// Resolves `path` for writing: like [`Workspace::resolve`], and refused in protected areas and
    /// for the workspace root itself.
    pub fn resolve_for_write(&self, path: &str) -> Result<PathBuf, SandboxViolation> {
        self.resolve_for(path, Access::Write)
    }

    /// Resolves `path` for the given access; the one entry point all tools go through.
    pub fn resolve_for(&self, path: &str, access: Access) -> Result<PathBuf, SandboxViolation> {
        if path.is_empty() {
            return Err(SandboxViolation::new(path, "empty path"));
        }
        if path.contains('\0') {
            return Err(SandboxViolation::new(path, "path contains a NUL byte"));
        }
        if path.contains('\\') {
            return Err(SandboxViolation::new(
                path,
                "backslash in path (use '/' as the separator)",
            ));
        }
        let given = Path::new(path);
        let mut normal = PathBuf::new();
        let relative: &Path = if given.is_absolute() {
            match given.strip_prefix(&self.root) {
                Ok(rest) => rest,
                Err(_) => {
                    // An absolute path may still be inside once normalised (e.g. /ws/a/../b).
                    let lexical = lexical_normalize(given)
                        .ok_or_else(|| SandboxViolation::new(path, "path escapes the workspace"))?;
                    if !lexical.starts_with(&self.root) {
                        return Err(SandboxViolation::new(
                            path,
                            "absolute path outside the workspace",
                        ));
                    }
                    normal = lexical;
                    Path::new("")
                }
            }
        } else {
            given
        };
        if normal.as_os_str().is_empty() {
            normal = self.root.clone();
            for comp in relative.components() {
                match comp {
                    Component::CurDir => {}
                    Component::Normal(c) => normal.push(c),
                    Component::ParentDir => {
                        if normal == self.root {
                            return Err(SandboxViolation::new(path, "'..' escapes the workspace"));
                        }
                        normal.pop();
                    }
                    Component::RootDir | Component::Prefix(_) => {
                        return Err(SandboxViolation::new(path, "unexpected root component"));
                    }
                }
            }
        }
        self.check_symlinks(path, &normal)?;
        if access == Access::Write {
            if normal == self.root {
                return Err(SandboxViolation::new(
                    path,
                    "the workspace root itself cannot be written",
                ));
            }
            // Check the path as written and where its symlinks really lead, so a link inside the
            // workspace pointing into `.git/` or at the database cannot be written through.
            let real = normalize_existing_prefix(&normal);
            self.check_protected(path, &normal)?;
            if real != normal {
                self.check_protected(path, &real)?;
            }
        }
        Ok(normal)
    }

    /// Refuses `candidate` if it lies in a protected area (or is a database's WAL/journal file).
    pub(crate) fn check_protected(
        &self,
        given: &str,
        candidate: &Path,
    ) -> Result<(), SandboxViolation> {
        // Any git directory, not only the top-level one: a plan must not plant hooks or config in a
        // nested repository either.
        let rel = candidate.strip_prefix(&self.root).unwrap_or(candidate);
        if rel.components().any(|c| c.as_os_str() == ".git") {
            return Err(SandboxViolation::new(
                given,
                "git directories (.git) are protected from writes",
            ));
        }
        // A plan must not approve plans (itself or others) by writing approval files.
        if candidate
            .file_name()
            .is_some_and(|n| n.to_string_lossy().ends_with(".approval"))
        {
            return Err(SandboxViolation::new(
                given,
                "plan approval files (*.approval) are protected from writes",
            ));
        }
        if let Some(p) = self.protected.iter().find(|p| candidate.starts_with(p)) {
            return Err(SandboxViolation::new(
                given,
                format!(
                    "{} is protected from writes",
                    p.strip_prefix(&self.root).unwrap_or(p).display()
                ),
            ));
        }
        // The database's WAL and journal files sit beside it and are protected with it.
        let name = candidate.to_string_lossy();
        for p in &self.protected {
            let p = p.to_string_lossy();
            for suffix in ["-wal", "-shm", "-journal"] {
                if name == format!("{p}{suffix}") {
                    return Err(SandboxViolation::new(
                        given,
                        "the execution database is protected from writes",
                    ));
                }
            }
        }
        Ok(())
    }

    /// Follows every existing component of `normal`; each must stay inside the root.
    fn check_symlinks(&self, given: &str, normal: &Path) -> Result<(), SandboxViolation> {
        let rel = normal.strip_prefix(&self.root).unwrap_or(Path::new(""));
        let mut current = self.root.clone();
        for comp in rel.components() {
            current.push(comp);
            match std::fs::symlink_metadata(&current) {
                Ok(meta) if meta.file_type().is_symlink() => match current.canonicalize() {
                    Ok(target) if target.starts_with(&self.root) => {}
                    Ok(_) => {
                        return Err(SandboxViolation::new(
                            given,
                            "a symlink in the path leads outside the workspace",
                        ));
                    }
                    Err(_) => {
                        // A dangling link: where it points cannot be proven inside, so refuse.
                        return Err(SandboxViolation::new(
                            given,
                            "a dangling symlink in the path cannot be followed safely",
                        ));
                    }
                },
                Ok(_) => {}
                // Nothing exists from here on; the rest will be created inside `current`.
                Err(_) => break,
            }
        }
        Ok(())
    }

    /// A path for display and storage: relative to the root with '/' separators.
    pub fn display(&self, abs: &Path) -> String {
        match abs.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
            Ok(rel) => rel.to_string_lossy().into_owned(),
            Err(_) => abs.to_string_lossy().into_owned(),
        }
    }
}

/// `path` made absolute against the current directory, as a path given on the command line is
/// meant (an absolute one is returned as it is; nothing is resolved).
pub fn absolute(path: &Path) -> PathBuf {
    std::env::current_dir()
        .map(|d| d.join(path))
        .unwrap_or_else(|_| path.to_path_buf())
}

/// Removes `.` and `..` lexically from an absolute path; `None` if `..` would go above `/`.
fn lexical_normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for comp in path.components() {
        match comp {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    Some(out)
}

/// Canonicalises the longest existing prefix of `path` and appends the rest unchanged.
fn normalize_existing_prefix(path: &Path) -> PathBuf {
    let path = lexical_normalize(path).unwrap_or_else(|| path.to_path_buf());
    let mut existing = path.clone();
    let mut tail = Vec::new();
    loop {
        if let Ok(c) = existing.canonicalize() {
            let mut out = c;
            for t in tail.iter().rev() {
                out.push(t);
            }
            return out;
        }
        match (
            existing.file_name().map(|n| n.to_owned()),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                tail.push(name);
                existing = parent.to_path_buf();
            }
            _ => return path,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> (PathBuf, Workspace) {
        let dir = std::env::temp_dir().join(format!("acode-paths-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("src")).unwrap();
        let ws = Workspace::new(&dir).unwrap();
        (dir, ws)
    }

    #[test]
    fn inside_paths_resolve() {
        let (dir, ws) = ws();
        let root = dir.canonicalize().unwrap();
        assert_eq!(ws.resolve("src/lib.rs").unwrap(), root.join("src/lib.rs"));
        assert_eq!(ws.resolve("./src/../a.txt").unwrap(), root.join("a.txt"));
        assert_eq!(
            ws.resolve(root.join("src/x").to_str().unwrap()).unwrap(),
            root.join("src/x")
        );
        assert_eq!(ws.resolve(".").unwrap(), root);
    }

    #[test]
    fn escapes_are_refused() {
        let (dir, ws) = ws();
        for bad in ["../x", "src/../../x", "/etc/passwd", "a\\b", "a\0b", ""] {
            assert!(ws.resolve(bad).is_err(), "{bad:?} should be refused");
        }
        std::os::unix::fs::symlink("/etc", dir.join("etc-link")).unwrap();
        assert!(ws.resolve("etc-link/passwd").is_err());
        assert!(ws.resolve("etc-link").is_err());
    }

    #[test]
    fn protected_areas_refuse_writes_only() {
        let (dir, mut ws) = ws();
        ws.protect(&dir.join(".acode/executions.db"));
        assert!(ws.resolve(".git/config").is_ok());
        assert!(ws.resolve_for_write(".git/config").is_err());
        assert!(
            ws.resolve_for_write("vendor/lib/.git/hooks/pre-commit")
                .is_err()
        );
        assert!(ws.resolve_for_write("notgit/.gitignore").is_ok());
        assert!(ws.resolve_for_write("plans/deploy.json.approval").is_err());
        assert!(ws.resolve_for_write("acode-policy.json").is_err());
        assert!(ws.resolve_for_write(".acode/executions.db").is_err());
        assert!(ws.resolve_for_write(".acode/executions.db-wal").is_err());
        assert!(ws.resolve_for_write(".").is_err());
        assert!(ws.resolve_for_write("src/new.rs").is_ok());
    }

    #[test]
    fn symlinks_into_protected_areas_refuse_writes() {
        let (dir, mut ws) = ws();
        std::fs::create_dir_all(dir.join(".git")).unwrap();
        std::fs::create_dir_all(dir.join(".acode")).unwrap();
        std::fs::write(dir.join(".acode/executions.db"), "db").unwrap();
        ws.protect(&dir.join(".acode/executions.db"));
        std::os::unix::fs::symlink(".git", dir.join("git-link")).unwrap();
        std::os::unix::fs::symlink(".acode/executions.db", dir.join("db-link")).unwrap();
        std::os::unix::fs::symlink(".acode", dir.join("acode-link")).unwrap();
        assert!(ws.resolve("git-link/config").is_ok());
        assert!(ws.resolve_for_write("git-link/config").is_err());
        assert!(ws.resolve_for_write("git-link").is_err());
        assert!(ws.resolve_for_write("db-link").is_err());
        assert!(
            ws.resolve_for_write("acode-link/executions.db-wal")
                .is_err()
        );
        assert!(ws.resolve_for_write("acode-link/other").is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
