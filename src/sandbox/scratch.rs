//! The runner's private directories in `$TMPDIR`: a run's temporary directory (its commands'
//! `TMPDIR`s, the proxy's socket, sanitised git configs) and the copy of the running binary bwrap
//! binds. Each is locked while its process lives (a shared `flock` on the directory, held by a
//! descriptor that is closed on exec), so that what a process killed with SIGKILL leaves behind —
//! it removes nothing — is recognised and removed by the next acode-run that makes one. Without
//! it every killed run left its directory, and every process that copied its binary (about
//! 100 MB for a debug build) left the copy, for ever.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once};
use std::time::{Duration, SystemTime};

/// What every scratch directory's name starts with.
const PREFIX: &str = "acode-run-";

/// An unlocked directory younger than this is left alone: its maker may be between creating it
/// and locking it, or be an older acode-run that did not lock (an upgrade while it runs).
const UNLOCKED_GRACE: Duration = Duration::from_secs(3600);

/// How often `$TMPDIR` is swept: a sweep reads the whole directory (about 2 ms for 3 000 entries),
/// which a run that takes a few milliseconds should not pay every time.
const SWEEP_EVERY: Duration = Duration::from_secs(600);

/// The locks of this process's directories, by path.
fn locks() -> &'static Mutex<HashMap<PathBuf, File>> {
    static LOCKS: std::sync::OnceLock<Mutex<HashMap<PathBuf, File>>> = std::sync::OnceLock::new();
    LOCKS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Creates `$TMPDIR/acode-run-{kind}<uuid>` (mode 0700), locked until [`remove`] or the end of
/// the process, and returns its canonical path (so that a Landlock rule and `TMPDIR` name the
/// same path). The first call of a process first removes the directories of processes that are
/// gone.
pub fn create(kind: &str) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    static SWEEP: Once = Once::new();
    SWEEP.call_once(|| {
        let tmp = std::env::temp_dir();
        if sweep_due(&tmp) {
            sweep(&tmp);
        }
    });
    let path = std::env::temp_dir().join(format!("{PREFIX}{kind}{}", uuid::Uuid::new_v4()));
    std::fs::DirBuilder::new().mode(0o700).create(&path)?;
    let path = path.canonicalize().unwrap_or(path);
    let lock = File::open(&path)?;
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_SH) } == 0 {
        lock_table().insert(path.clone(), lock);
    }
    Ok(path)
}

fn lock_table() -> std::sync::MutexGuard<'static, HashMap<PathBuf, File>> {
    locks().lock().unwrap_or_else(|p| p.into_inner())
}

/// Removes a directory [`create`] made, and lets go of its lock.
pub fn remove(path: &Path) {
    let _ = std::fs::remove_dir_all(path);
    lock_table().remove(path);
}

/// Whether this user's last sweep of `tmp` is older than [`SWEEP_EVERY`] (or unknown), noting
/// now as the last one when it is: the mtime of `tmp/acode-run-swept-UID`, opened without
/// following a link (another user's link there cannot make this process create a file elsewhere).
fn sweep_due(tmp: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    // SAFETY: getuid has no preconditions.
    let marker = tmp.join(format!("{PREFIX}swept-{}", unsafe { libc::getuid() }));
    let now = SystemTime::now();
    let recent = std::fs::symlink_metadata(&marker)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|m| now.duration_since(m).ok())
        .is_some_and(|age| age < SWEEP_EVERY);
    if recent {
        return false;
    }
    let noted = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&marker)
        .and_then(|f| f.set_modified(now));
    // A marker that cannot be written (another user's) does not stop the sweep.
    let _ = noted;
    true
}

/// Whether `name` is one of ours: `acode-run-` and `exe-` or nothing, then a UUID.
fn is_scratch(name: &str) -> bool {
    name.strip_prefix(PREFIX)
        .map(|rest| rest.strip_prefix("exe-").unwrap_or(rest))
        .is_some_and(|id| uuid::Uuid::parse_str(id).is_ok())
}

/// Removes the scratch directories in `tmp` that belong to this user, are no process's (nobody
/// holds their lock) and are older than [`UNLOCKED_GRACE`]. A symbolic link, another user's
/// directory or a locked one is left alone.
pub fn sweep(tmp: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_str().is_some_and(is_scratch) {
            continue;
        }
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let old = meta
            .modified()
            .ok()
            .and_then(|m| now.duration_since(m).ok())
            .is_some_and(|age| age > UNLOCKED_GRACE);
        if !meta.is_dir() || meta.uid() != me || !old {
            continue;
        }
        let Ok(dir) = File::open(&path) else {
            continue;
        };
        // SAFETY: flock on a descriptor owned here; an exclusive lock is had only when nobody
        // holds a shared one.
        if unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn age(path: &Path, by: Duration) {
        let when = SystemTime::now() - by;
        let f = File::open(path).unwrap();
        f.set_modified(when).unwrap();
    }

    /// A directory of a process that is gone is removed; one whose process lives (its lock held,
    /// here in another process: a real `flock` child), a young one, another name and a symbolic
    /// link are not.
    #[test]
    fn only_old_unlocked_directories_of_ours_are_swept() {
        let tmp = std::env::temp_dir().join(format!("acode-scratch-test-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&tmp).unwrap();
        let dir = |name: String| {
            let p = tmp.join(name);
            std::fs::create_dir(&p).unwrap();
            std::fs::write(p.join("f"), "x").unwrap();
            p
        };
        let id = || uuid::Uuid::new_v4().to_string();
        let dead = dir(format!("acode-run-{}", id()));
        let dead_exe = dir(format!("acode-run-exe-{}", id()));
        let alive = dir(format!("acode-run-{}", id()));
        let young = dir(format!("acode-run-{}", id()));
        let other = dir("acode-run-notauuid".to_string());
        let target = dir(format!("target-{}", id()));
        let link = tmp.join(format!("acode-run-{}", id()));
        std::os::unix::fs::symlink(&target, &link).unwrap();
        for p in [&dead, &dead_exe, &alive, &other, &target] {
            age(p, Duration::from_secs(7200));
        }
        // The living process: flock(1) holding a shared lock on `alive` while it sleeps.
        let mut holder = std::process::Command::new("flock")
            .args(["--shared", alive.to_str().unwrap(), "sleep", "30"])
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        sweep(&tmp);
        let _ = holder.kill();
        let _ = holder.wait();
        assert!(
            !dead.exists() && !dead_exe.exists(),
            "gone processes' directories stay"
        );
        assert!(
            alive.join("f").exists(),
            "a living process's directory was removed"
        );
        assert!(young.join("f").exists() && other.join("f").exists());
        assert!(
            target.join("f").exists() && link.exists(),
            "a link was followed"
        );
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    /// A sweep is due once per [`SWEEP_EVERY`]: the first asks, the next within it does not.
    #[test]
    fn a_sweep_is_due_once_in_a_while() {
        let tmp = std::env::temp_dir().join(format!("acode-scratch-due-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&tmp).unwrap();
        assert!(sweep_due(&tmp));
        assert!(!sweep_due(&tmp));
        let marker = std::fs::read_dir(&tmp)
            .unwrap()
            .flatten()
            .next()
            .unwrap()
            .path();
        age(&marker, SWEEP_EVERY + Duration::from_secs(1));
        assert!(sweep_due(&tmp));
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    /// What this process makes it keeps locked until it removes it.
    #[test]
    fn a_directory_made_here_is_locked_until_removed() {
        let path = create("").unwrap();
        let f = File::open(&path).unwrap();
        // SAFETY: flock on a descriptor owned here.
        let free = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
        assert!(!free, "nobody holds its lock");
        remove(&path);
        assert!(!path.exists());
        assert!(!lock_table().contains_key(&path));
    }
}
