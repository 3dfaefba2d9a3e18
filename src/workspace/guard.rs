//! Protected paths a command must not create or change, whatever the OS sandbox.
//!
//! bubblewrap re-mounts the protected paths that exist (`.git/`, `.acode/`, the policy file, the
//! database, the running plan and approval files) read-only, but a mount needs a mount point, and
//! making one for a path that does not exist yet would create it in the host's workspace through
//! the writable bind (an empty `acode-policy.json` is itself a policy change). Without bwrap nothing
//! stops a command at all. So the runner checks after every command, in every mode:
//!
//! 1. [`ProtectedGuard::before`] records, just before the command starts, which protected paths
//!    are absent and which `*.approval` files exist (name, inode, size, times, and their bytes so
//!    they can be put back) in the workspace root and the directories of the protected paths.
//! 2. [`ProtectedGuard::after`] looks again once the command has ended: a protected path that now
//!    exists is removed, a new `*.approval` file is removed, a changed or deleted one is restored,
//!    and the step fails with a [`SandboxViolation`] naming them.
//!
//! Each watched directory is held open from the start and every later operation goes through
//! that handle (`fstatat`, `openat`, `unlinkat` relative to it, see [`crate::workspace::fs`]), so a command
//! that swaps a directory for a symlink to somewhere else cannot make the runner delete or write
//! outside the workspace. It runs around every command, so it costs a handful of system calls
//! per watched directory and reads no `/proc` paths.
//!
//! What it does not cover: a process that outlives its command (possible only without bwrap, by
//! leaving the process group) can recreate a path after the check; and a `*.approval` file in a
//! directory that holds no protected path is not watched (approvals are signed, so a new one is
//! worthless without the key).

use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::workspace::{SandboxViolation, Workspace, fs};

/// File names ending like this are plan approvals (`<plan>.approval`), protected by name.
pub const APPROVAL_SUFFIX: &str = ".approval";

/// Approval files larger than this are not kept for restoring (real ones are a few hundred bytes).
const MAX_RESTORE_BYTES: u64 = 1 << 20;

/// What [`ProtectedGuard::before`] saw; see the module docs.
#[derive(Debug)]
pub struct ProtectedGuard {
    dirs: Vec<Watched>,
}

/// One directory of the workspace, held open, with what it contained.
#[derive(Debug)]
struct Watched {
    /// Where it was (for messages and for bwrap).
    path: PathBuf,
    /// The directory itself, so a later rename or symlink swap does not redirect us.
    dir: OwnedFd,
    /// Protected names in it that did not exist.
    absent: Vec<OsString>,
    /// The approval files in it.
    approvals: Vec<Approval>,
}

#[derive(Debug)]
struct Approval {
    name: OsString,
    stamp: Stamp,
    /// The bytes, when it is a regular file small enough to restore.
    content: Option<Vec<u8>>,
}

/// Enough of `lstat` to notice any change of a file (a write changes ctime, a swap the inode).
#[derive(Debug, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    mode: u32,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(st: &libc::stat) -> Stamp {
        Stamp {
            ino: st.st_ino,
            mode: st.st_mode,
            len: st.st_size as u64,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
        }
    }

    fn is_file(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFREG
    }
}

impl Watched {
    fn fd(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    fn open(path: &Path) -> Option<Watched> {
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(path)
            .ok()?;
        Some(Watched {
            path: path.to_path_buf(),
            dir: dir.into(),
            absent: Vec::new(),
            approvals: Vec::new(),
        })
    }

    /// The names of the approval files in the directory now.
    fn approval_names(&self) -> Vec<OsString> {
        fs::read_dir(self.fd())
            .map(|entries| {
                entries
                    .into_iter()
                    .map(|e| e.name)
                    .filter(|n| is_approval(n))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn scan_approvals(&mut self) {
        for name in self.approval_names() {
            let Ok(st) = fs::lstat_at(self.fd(), &name) else {
                continue;
            };
            let stamp = Stamp::of(&st);
            let content = (stamp.is_file() && stamp.len <= MAX_RESTORE_BYTES)
                .then(|| read_no_follow(self.fd(), &name))
                .flatten();
            self.approvals.push(Approval {
                name,
                stamp,
                content,
            });
        }
    }
}

fn is_approval(name: &OsStr) -> bool {
    name.as_bytes().ends_with(APPROVAL_SUFFIX.as_bytes())
}

fn read_no_follow(dir: BorrowedFd, name: &OsStr) -> Option<Vec<u8>> {
    let f = fs::open_file_in(dir, name).ok()?;
    let mut buf = Vec::new();
    f.take(MAX_RESTORE_BYTES).read_to_end(&mut buf).ok()?;
    Some(buf)
}

/// Removes whatever is at `name` in `dir` (a file, a symlink, a whole directory) without following
/// links; nothing there is not an error.
fn remove(dir: BorrowedFd, name: &OsStr) -> std::io::Result<()> {
    match fs::remove_tree_at(dir, name) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

impl ProtectedGuard {
    /// Records the state of the protected paths of `ws`; call it right before starting a command.
    pub fn before(ws: &Workspace) -> ProtectedGuard {
        fn watch(dirs: &mut Vec<Watched>, dir: &Path) -> Option<usize> {
            if let Some(i) = dirs.iter().position(|w| w.path == dir) {
                return Some(i);
            }
            let mut w = Watched::open(dir)?;
            w.scan_approvals();
            dirs.push(w);
            Some(dirs.len() - 1)
        }
        let mut dirs: Vec<Watched> = Vec::new();
        watch(&mut dirs, ws.root());
        for p in ws.protected() {
            let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else {
                continue;
            };
            if !parent.starts_with(ws.root()) {
                continue;
            }
            // Inside a protected directory (the database in `.acode/`) there is nothing to add:
            // the directory is protected as a whole (read-only under bwrap, never granted under
            // Landlock), and this guard does not look inside it.
            if ws
                .protected()
                .iter()
                .any(|q| q != p && parent.starts_with(q))
            {
                continue;
            }
            let Some(i) = watch(&mut dirs, parent) else {
                continue;
            };
            let w = &mut dirs[i];
            if fs::lstat_at(w.fd(), name).is_err() && !w.absent.iter().any(|a| a == name) {
                w.absent.push(name.to_os_string());
            }
        }
        ProtectedGuard { dirs }
    }

    /// The approval files that existed, for bwrap to mount read-only.
    pub fn approval_files(&self) -> impl Iterator<Item = PathBuf> + '_ {
        self.dirs
            .iter()
            .flat_map(|w| w.approvals.iter().map(|a| w.path.join(&a.name)))
    }

    /// Undoes what the command did to protected paths (see the module docs); `Err` names them.
    pub fn after(&self) -> Result<(), SandboxViolation> {
        let mut touched: Vec<String> = Vec::new();
        let mut failures: Vec<String> = Vec::new();
        for w in &self.dirs {
            let shown = |name: &OsStr| w.path.join(name).display().to_string();
            for name in &w.absent {
                if fs::lstat_at(w.fd(), name).is_ok() {
                    touched.push(shown(name));
                    if let Err(e) = remove(w.fd(), name) {
                        failures.push(format!("{}: {e}", shown(name)));
                    }
                }
            }
            // Approvals: new ones go, changed or deleted ones come back.
            for name in w
                .approval_names()
                .iter()
                .filter(|n| !w.approvals.iter().any(|a| &a.name == *n))
            {
                touched.push(shown(name));
                if let Err(e) = remove(w.fd(), name) {
                    failures.push(format!("{}: {e}", shown(name)));
                }
            }
            for a in &w.approvals {
                let same = fs::lstat_at(w.fd(), &a.name).is_ok_and(|st| Stamp::of(&st) == a.stamp);
                if same {
                    continue;
                }
                touched.push(shown(&a.name));
                let Some(content) = &a.content else {
                    failures.push(format!("{}: cannot be restored", shown(&a.name)));
                    continue;
                };
                let restored = remove(w.fd(), &a.name).and_then(|()| {
                    fs::create_new_in(w.fd(), &a.name, a.stamp.mode & 0o7777)?.write_all(content)
                });
                if let Err(e) = restored {
                    failures.push(format!("{}: {e}", shown(&a.name)));
                }
            }
        }
        if touched.is_empty() {
            return Ok(());
        }
        let mut reason = "the command created or changed protected paths (.git, .acode, the \
                          policy file, the plan, *.approval); they were removed or restored"
            .to_string();
        if !failures.is_empty() {
            reason = format!("{reason}, except: {}", failures.join("; "));
        }
        Err(SandboxViolation::new(touched.join(", "), reason))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> Workspace {
        let dir = std::env::temp_dir().join(format!("acode-guard-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("plans")).unwrap();
        let mut ws = Workspace::new(&dir).unwrap();
        ws.protect(Path::new(".acode"));
        std::fs::write(dir.join("plans/p.json"), "{}").unwrap();
        ws.protect(&dir.join("plans/p.json"));
        std::fs::write(dir.join("plans/p.json.approval"), "signed").unwrap();
        ws
    }

    #[test]
    fn untouched_workspace_passes() {
        let ws = ws();
        let g = ProtectedGuard::before(&ws);
        std::fs::write(ws.root().join("ordinary.txt"), "x").unwrap();
        assert_eq!(g.after(), Ok(()));
        assert_eq!(
            g.approval_files().collect::<Vec<_>>(),
            vec![ws.root().join("plans/p.json.approval")]
        );
    }

    #[test]
    fn created_protected_paths_are_removed_and_reported() {
        let ws = ws();
        let r = ws.root();
        let g = ProtectedGuard::before(&ws);
        std::fs::write(r.join("acode-policy.json"), r#"{"sandbox":"none"}"#).unwrap();
        std::fs::create_dir_all(r.join(".acode/sub")).unwrap();
        std::fs::create_dir_all(r.join(".git/hooks")).unwrap();
        std::fs::write(r.join("other.json.approval"), "forged").unwrap();
        std::fs::write(r.join("plans/q.json.approval"), "forged").unwrap();
        let err = g.after().unwrap_err();
        for name in [
            "acode-policy.json",
            ".acode",
            ".git",
            "other.json.approval",
            "q.json.approval",
        ] {
            assert!(err.subject.contains(name), "{err}");
        }
        for gone in [
            "acode-policy.json",
            ".acode",
            ".git",
            "other.json.approval",
            "plans/q.json.approval",
        ] {
            assert!(std::fs::symlink_metadata(r.join(gone)).is_err(), "{gone}");
        }
        assert_eq!(g.after(), Ok(()), "clean again");
    }

    #[test]
    fn changed_or_deleted_approvals_are_restored() {
        let ws = ws();
        let file = ws.root().join("plans/p.json.approval");
        let g = ProtectedGuard::before(&ws);
        std::fs::write(&file, "tampered").unwrap();
        assert!(g.after().is_err());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "signed");
        let g = ProtectedGuard::before(&ws);
        std::fs::remove_file(&file).unwrap();
        // The link leads to a file of the test's own, never a system file: if the restore ever
        // followed it, it would overwrite only this (and the assertion below says so).
        let target =
            std::env::temp_dir().join(format!("acode-guard-target-{}", uuid::Uuid::new_v4()));
        std::fs::write(&target, "untouched").unwrap();
        std::os::unix::fs::symlink(&target, &file).unwrap();
        assert!(g.after().is_err());
        assert!(!std::fs::symlink_metadata(&file).unwrap().is_symlink());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "signed");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "untouched");
        let _ = std::fs::remove_file(&target);
    }

    #[test]
    fn a_swapped_directory_does_not_redirect_removal() {
        let ws = ws();
        let r = ws.root();
        // Outside: a directory with an approval-looking file that must survive.
        let outside =
            std::env::temp_dir().join(format!("acode-guard-out-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("x.approval"), "keep").unwrap();
        let g = ProtectedGuard::before(&ws);
        std::fs::rename(r.join("plans"), r.join("plans-moved")).unwrap();
        std::os::unix::fs::symlink(&outside, r.join("plans")).unwrap();
        let _ = g.after();
        assert_eq!(
            std::fs::read_to_string(outside.join("x.approval")).unwrap(),
            "keep"
        );
        std::fs::remove_dir_all(&outside).unwrap();
    }

    /// An approval file is kept for restoring up to 1 MiB (exactly 1 MiB included): a bigger one,
    /// or one that is not a regular file, is reported as changed and as not restorable.
    #[test]
    fn approvals_up_to_the_restore_limit_come_back_and_bigger_ones_are_named() {
        let ws = ws();
        let r = ws.root();
        let limit = MAX_RESTORE_BYTES as usize;
        std::fs::write(r.join("plans/big.json.approval"), vec![b'a'; limit]).unwrap();
        std::fs::write(r.join("plans/huge.json.approval"), vec![b'b'; limit + 1]).unwrap();
        let g = ProtectedGuard::before(&ws);
        std::fs::write(r.join("plans/big.json.approval"), "x").unwrap();
        std::fs::write(r.join("plans/huge.json.approval"), "y").unwrap();
        let err = g.after().unwrap_err();
        assert_eq!(
            std::fs::read(r.join("plans/big.json.approval")).unwrap(),
            vec![b'a'; limit]
        );
        assert!(
            err.reason
                .contains("huge.json.approval: cannot be restored"),
            "{err}"
        );
        assert!(!err.reason.contains("big.json.approval"), "{err}");
        assert!(err.subject.contains("big.json.approval"), "{err}");
        let _ = std::fs::remove_dir_all(r);
    }

    /// Any change of an approval counts — its bytes, only its times, its mode — and a protected
    /// directory that appears with nothing in it is still removed.
    #[test]
    fn a_touch_or_a_chmod_of_an_approval_is_a_change() {
        use std::os::unix::fs::PermissionsExt;
        let ws = ws();
        let file = ws.root().join("plans/p.json.approval");
        let g = ProtectedGuard::before(&ws);
        assert_eq!(g.after(), Ok(()));
        // Same bytes, same size, new times.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&file, "signed").unwrap();
        assert!(g.after().is_err());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "signed");
        let g = ProtectedGuard::before(&ws);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(g.after().is_err());
        let g = ProtectedGuard::before(&ws);
        std::fs::create_dir(ws.root().join(".acode")).unwrap();
        let err = g.after().unwrap_err();
        assert!(err.subject.contains(".acode"), "{err}");
        assert!(!ws.root().join(".acode").exists());
        let _ = std::fs::remove_dir_all(ws.root());
    }
}
