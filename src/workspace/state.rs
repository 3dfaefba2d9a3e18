//! The runner's own state directory, `.acode/` in the workspace, opened without following links.
//!
//! A repository can ship `.acode` (or `.acode/executions.db`, `.acode/tmp`) as a symbolic link. If
//! the runner followed it, it would create its database and temp files wherever the link points,
//! outside the workspace. So every component is checked with `lstat` and created with `mkdirat` /
//! `openat(O_NOFOLLOW)` relative to a directory handle opened with `O_NOFOLLOW`; a link is refused
//! with its name. `.acode/.gitignore` (`*`) is written on first use through the same handle, so the
//! state directory never shows up in `git status`, and a planted link cannot turn that write into a
//! write elsewhere.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// The state directory's name in the workspace root, as a literal: written here once, so that
/// the paths inside it (the database, the staging directory, skills) can be built from it with
/// `concat!`, which takes literals, not constants.
macro_rules! state_dir {
    () => {
        ".acode"
    };
}
pub(crate) use state_dir;

/// The state directory's name in the workspace root.
pub const STATE_DIR: &str = state_dir!();

/// Entries of the state directory the runner opens, each checked not to be a link.
const ENTRIES: &[&str] = &[
    "executions.db",
    "executions.db-wal",
    "executions.db-shm",
    "executions.db-journal",
    "tmp",
];

/// Why the state directory cannot be used.
#[derive(Debug, Error)]
pub enum StateDirError {
    /// A component is a symbolic link (or not what it must be): refused, never followed.
    #[error(
        "{path} is {what}; acode-run keeps its state there and does not follow links out of the workspace (remove it)"
    )]
    Refused {
        /// The offending path.
        path: String,
        /// What it is (`a symbolic link`, `not a directory`).
        what: &'static str,
    },
    /// An I/O error creating or opening it.
    #[error("cannot prepare {path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The error.
        source: std::io::Error,
    },
}

fn cstr(name: &str) -> CString {
    // Names here are constants without NUL bytes.
    CString::new(name).unwrap_or_default()
}

/// Opens `name` under `dir` (or the absolute `root` when `dir` is `None`) as a directory without
/// following a link in its last component.
fn open_dir(dir: Option<&OwnedFd>, name: &CString) -> std::io::Result<OwnedFd> {
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    let base = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: a valid C string and a valid (or AT_FDCWD) directory descriptor.
    let fd = unsafe { libc::openat(base, name.as_ptr(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by openat and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `lstat` of `name` under `dir`: its `st_mode`, or `None` when it does not exist.
fn lstat_at(dir: &OwnedFd, name: &CString) -> std::io::Result<Option<libc::mode_t>> {
    // SAFETY: zeroed stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid descriptor, C string and out-pointer.
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc == 0 {
        return Ok(Some(st.st_mode & libc::S_IFMT));
    }
    let e = std::io::Error::last_os_error();
    if e.kind() == std::io::ErrorKind::NotFound {
        Ok(None)
    } else {
        Err(e)
    }
}

/// Checks (and creates on first use) `root/.acode` and `root/.acode/tmp` as real directories, checks
/// that none of the runner's files in it is a link, and writes `.acode/.gitignore`. Returns the
/// state directory's path.
pub fn prepare(root: &Path) -> Result<PathBuf, StateDirError> {
    let state = root.join(STATE_DIR);
    let shown = |p: &Path| p.display().to_string();
    let io = |p: &Path| {
        let p = shown(p);
        move |source| StateDirError::Io { path: p, source }
    };
    let root_c = CString::new(root.as_os_str().as_bytes()).map_err(|e| StateDirError::Io {
        path: shown(root),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
    })?;
    let root_fd = open_dir(None, &root_c).map_err(io(root))?;
    let dir_fd = ensure_dir(&root_fd, STATE_DIR, &state)?;
    for entry in ENTRIES {
        let path = state.join(entry);
        match lstat_at(&dir_fd, &cstr(entry)).map_err(io(&path))? {
            Some(libc::S_IFLNK) => {
                return Err(StateDirError::Refused {
                    path: shown(&path),
                    what: "a symbolic link",
                });
            }
            Some(libc::S_IFDIR) if *entry != "tmp" => {
                return Err(StateDirError::Refused {
                    path: shown(&path),
                    what: "a directory, not a file",
                });
            }
            _ => {}
        }
    }
    ensure_dir(&dir_fd, "tmp", &state.join("tmp"))?;
    write_gitignore(&dir_fd, &state.join(".gitignore"))?;
    Ok(state)
}

/// Creates `name` under `parent` if missing, then opens it without following links; a link or a
/// non-directory is refused.
fn ensure_dir(parent: &OwnedFd, name: &str, path: &Path) -> Result<OwnedFd, StateDirError> {
    let c = cstr(name);
    let io = |source| StateDirError::Io {
        path: path.display().to_string(),
        source,
    };
    match lstat_at(parent, &c).map_err(io)? {
        None => {
            // SAFETY: valid descriptor and C string.
            if unsafe { libc::mkdirat(parent.as_raw_fd(), c.as_ptr(), 0o755) } != 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::AlreadyExists {
                    return Err(io(e));
                }
            }
        }
        Some(libc::S_IFDIR) => {}
        Some(libc::S_IFLNK) => {
            return Err(StateDirError::Refused {
                path: path.display().to_string(),
                what: "a symbolic link",
            });
        }
        Some(_) => {
            return Err(StateDirError::Refused {
                path: path.display().to_string(),
                what: "not a directory",
            });
        }
    }
    open_dir(Some(parent), &c).map_err(|e| {
        if e.raw_os_error() == Some(libc::ELOOP) || e.raw_os_error() == Some(libc::ENOTDIR) {
            StateDirError::Refused {
                path: path.display().to_string(),
                what: "a symbolic link or not a directory",
            }
        } else {
            io(e)
        }
    })
}

/// Writes `.gitignore` containing `*` if it does not exist yet: `O_CREAT | O_EXCL | O_NOFOLLOW`, so an
/// existing file (or a planted link) is left alone and never written through.
fn write_gitignore(dir: &OwnedFd, path: &Path) -> Result<(), StateDirError> {
    let c = cstr(".gitignore");
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: valid descriptor and C string.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags, 0o644) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            return Ok(());
        }
        return Err(StateDirError::Io {
            path: path.display().to_string(),
            source: e,
        });
    }
    // SAFETY: fd was just returned by openat and is owned by nobody else.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    use std::io::Write;
    file.write_all(b"# Written by acode-run: its run records and temp files are not source.\n*\n")
        .map_err(|source| StateDirError::Io {
            path: path.display().to_string(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Dir(PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    fn tempdir() -> Dir {
        let p = std::env::temp_dir().join(format!("acode-state-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(p.join("ws")).unwrap();
        std::fs::create_dir_all(p.join("outside")).unwrap();
        Dir(p)
    }

    #[test]
    fn creates_the_directory_tmp_and_gitignore_once() {
        let d = tempdir();
        let ws = d.0.join("ws");
        let state = prepare(&ws).unwrap();
        assert!(state.join("tmp").is_dir());
        let ignore = std::fs::read_to_string(state.join(".gitignore")).unwrap();
        assert!(ignore.lines().any(|l| l == "*"));
        // A user's own .gitignore there is left as it is.
        std::fs::write(state.join(".gitignore"), "mine\n").unwrap();
        prepare(&ws).unwrap();
        assert_eq!(
            std::fs::read_to_string(state.join(".gitignore")).unwrap(),
            "mine\n"
        );
    }

    #[test]
    fn links_are_refused_by_name_and_never_followed() {
        let d = tempdir();
        let ws = d.0.join("ws");
        let outside = d.0.join("outside");
        std::os::unix::fs::symlink(&outside, ws.join(".acode")).unwrap();
        let e = prepare(&ws).unwrap_err().to_string();
        assert!(e.contains(".acode is a symbolic link"), "{e}");
        std::fs::remove_file(ws.join(".acode")).unwrap();
        for entry in ["executions.db", "tmp", "executions.db-wal"] {
            std::fs::create_dir_all(ws.join(".acode")).unwrap();
            std::os::unix::fs::symlink(outside.join("planted"), ws.join(".acode").join(entry))
                .unwrap();
            let e = prepare(&ws).unwrap_err().to_string();
            assert!(e.contains(&format!("{entry} is a symbolic link")), "{e}");
            std::fs::remove_file(ws.join(".acode").join(entry)).unwrap();
        }
        // A planted .gitignore link is not written through.
        std::os::unix::fs::symlink(outside.join("gi"), ws.join(".acode/.gitignore")).unwrap();
        prepare(&ws).unwrap();
        assert!(!outside.join("gi").exists());
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    }
}
