//! Every `.git` inside the workspace (a repository directory, or the `gitdir:` file of a worktree
//! or submodule), at any depth: bwrap mounts each read-only, because the file tools refuse writes
//! under any `.git` component and a command must not get around that (see [`crate::sandbox::bwrap`]).
//!
//! A command can make a new one (`git init vendor/x`, `git clone`), so the set is needed afresh
//! before every command. Walking the whole workspace each time costs what the workspace holds: a
//! `node_modules` or a `target/` of tens of thousands of files made every command of a run pay
//! milliseconds. [`NestedGit`] walks once, then keeps the answer current with inotify: it watches
//! every directory for entries created, moved or deleted, and before a command reads what
//! happened since the last one. A quiet workspace costs one `read` that finds nothing.
//!
//! What it does not follow precisely it walks again: a queue that overflowed, a directory moved
//! (the paths of everything under it changed). When inotify cannot be used at all (no instance,
//! the watch limit reached) it walks before every command, as before.
//!
//! A small workspace is simply walked every time: closing an inotify instance that holds watches
//! waits for an RCU grace period, measured at 0.1 to 24 ms here, which the end of every run
//! would pay, more than walking a few dozen directories per command costs. The watcher starts
//! once a walk meets more than [`WATCH_FROM`] directories.

use std::collections::{BTreeSet, HashMap};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The name looked for.
const GIT: &str = ".git";

/// How many directories a workspace must have before it is watched instead of walked.
pub const WATCH_FROM: usize = 64;

/// Every `.git` inside `root` at any depth, by walking it, sorted. Links are not followed (a link cannot
/// lead a mount outside), and the walk does not descend into a `.git` it found.
pub fn walk(root: &Path) -> Vec<PathBuf> {
    walk_counting(root).0
}

/// [`walk`], and how many directories it went through.
fn walk_counting(root: &Path) -> (Vec<PathBuf>, usize) {
    let mut found = Vec::new();
    let mut dirs = 0;
    scan(root, &mut |p, is_dir| {
        if is_dir {
            dirs += 1;
            Visit::Descend
        } else {
            found.push(p.to_path_buf());
            Visit::Skip
        }
    });
    found.sort();
    (found, dirs)
}

/// What [`scan`] does with a directory it met.
enum Visit {
    Descend,
    Skip,
}

/// Walks `root` without following links, calling `on` with `(path, false)` for every `.git` found
/// (not descended into) and `(path, true)` for every other directory, `root` included; a
/// directory `on` answers [`Visit::Skip`] for is not descended into.
fn scan(root: &Path, on: &mut dyn FnMut(&Path, bool) -> Visit) {
    let mut walk = walkdir::WalkDir::new(root).follow_links(false).into_iter();
    while let Some(entry) = walk.next() {
        let Ok(entry) = entry else { continue };
        let is_dir = entry.file_type().is_dir();
        if entry.depth() > 0 && entry.file_name() == GIT && !entry.path_is_symlink() {
            on(entry.path(), false);
            if is_dir {
                walk.skip_current_dir();
            }
        } else if is_dir && matches!(on(entry.path(), true), Visit::Skip) {
            walk.skip_current_dir();
        }
    }
}

/// The `.git` entries of one workspace, kept current by inotify (see the module docs). Shared by
/// the commands of a run, which may ask from several threads (`--jobs`).
#[derive(Debug)]
pub struct NestedGit {
    root: PathBuf,
    /// Walked, not watched, while it has at most this many directories ([`WATCH_FROM`]).
    watch_from: usize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The inotify instance, once the first walk set its watches; `None` before, and for good
    /// when it cannot be used (`broken`).
    inotify: Option<OwnedFd>,
    broken: bool,
    /// Each watch's directory.
    dirs: HashMap<libc::c_int, PathBuf>,
    found: BTreeSet<PathBuf>,
}

/// The changes a watch reports: entries made, moved in or out, removed, and the directory itself
/// going. Writes into files are not reported, so a build costs one event per file it creates.
const MASK: u32 = libc::IN_CREATE
    | libc::IN_MOVED_TO
    | libc::IN_MOVED_FROM
    | libc::IN_DELETE
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_ONLYDIR
    | libc::IN_DONT_FOLLOW;

impl NestedGit {
    /// A watcher for the workspace at `root`; nothing is walked or watched until [`Self::entries`].
    pub fn new(root: &Path) -> Self {
        Self::watching_from(root, WATCH_FROM)
    }

    /// [`Self::new`] with another size from which the workspace is watched (tests use 0).
    pub fn watching_from(root: &Path, dirs: usize) -> Self {
        NestedGit {
            root: root.to_path_buf(),
            watch_from: dirs,
            state: Mutex::new(State::default()),
        }
    }

    /// The workspace this watcher follows.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether it follows the workspace with inotify now (rather than walking it).
    pub fn watching(&self) -> bool {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.inotify.is_some() && !st.broken
    }

    /// Every `.git` in the workspace now, sorted.
    pub fn entries(&self) -> Vec<PathBuf> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.broken {
            return walk(&self.root);
        }
        let current = match st.inotify.as_ref().map(|fd| fd.as_raw_fd()) {
            Some(fd) => st.catch_up(fd),
            None => {
                let (found, dirs) = walk_counting(&self.root);
                if dirs <= self.watch_from {
                    return found;
                }
                false
            }
        };
        if !current && !st.restart(&self.root) {
            *st = State {
                broken: true,
                ..State::default()
            };
            return walk(&self.root);
        }
        st.found.iter().cloned().collect()
    }
}

impl State {
    /// A new inotify instance and a full walk that watches every directory; false when inotify
    /// cannot be used.
    fn restart(&mut self, root: &Path) -> bool {
        // SAFETY: inotify_init1 with flags; a returned descriptor is ours.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return false;
        }
        // SAFETY: `fd` was just returned to us and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        self.dirs.clear();
        self.found.clear();
        let ok = self.add_tree(fd.as_raw_fd(), root);
        self.inotify = Some(fd);
        ok
    }

    /// Watches every directory under `dir` (itself included) and records every `.git` there; false
    /// when a watch could not be added for a reason other than the directory having gone.
    fn add_tree(&mut self, fd: libc::c_int, dir: &Path) -> bool {
        let mut ok = true;
        let (dirs, found) = (&mut self.dirs, &mut self.found);
        scan(dir, &mut |p, is_dir| {
            if !is_dir {
                found.insert(p.to_path_buf());
                return Visit::Skip;
            }
            let Ok(c) = CString::new(p.as_os_str().as_bytes()) else {
                return Visit::Skip;
            };
            // SAFETY: a valid C string and our inotify descriptor.
            let wd = unsafe { libc::inotify_add_watch(fd, c.as_ptr(), MASK) };
            if wd >= 0 {
                dirs.insert(wd, p.to_path_buf());
                return Visit::Descend;
            }
            // Gone since it was listed, or replaced by a link or a file: nothing to watch there.
            let e = std::io::Error::last_os_error().raw_os_error();
            if !matches!(e, Some(libc::ENOENT | libc::ENOTDIR)) {
                ok = false; // ENOSPC (the watch limit), EACCES...: this watcher is blind there
            }
            Visit::Skip
        });
        ok
    }

    /// Applies every event queued since the last call; false when the answer can no longer be
    /// trusted without a new walk.
    fn catch_up(&mut self, fd: libc::c_int) -> bool {
        // inotify_event is 16 bytes then the name; u32s keep the buffer aligned for it.
        let mut buf = vec![0u32; 16 * 1024];
        loop {
            // SAFETY: reads into our own buffer of the given size.
            let n = unsafe {
                libc::read(
                    fd,
                    buf.as_mut_ptr().cast(),
                    std::mem::size_of_val(buf.as_slice()),
                )
            };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                match e.kind() {
                    std::io::ErrorKind::WouldBlock => return true,
                    std::io::ErrorKind::Interrupted => continue,
                    _ => return false,
                }
            }
            if n == 0 {
                return false;
            }
            // SAFETY: the kernel wrote `n` bytes into `buf`; viewing them as bytes is sound.
            let bytes =
                unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n as usize) };
            let mut at = 0;
            while at + std::mem::size_of::<libc::inotify_event>() <= bytes.len() {
                // SAFETY: a whole header lies at `at` (checked above); read_unaligned copies it.
                let ev: libc::inotify_event =
                    unsafe { std::ptr::read_unaligned(bytes[at..].as_ptr().cast()) };
                let name_at = at + std::mem::size_of::<libc::inotify_event>();
                let name_end = (name_at + ev.len as usize).min(bytes.len());
                let name = &bytes[name_at..name_end];
                let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
                at = name_end;
                if !self.apply(fd, &ev, name) {
                    return false;
                }
            }
        }
    }

    /// One event; false when a new walk is needed.
    fn apply(&mut self, fd: libc::c_int, ev: &libc::inotify_event, name: &[u8]) -> bool {
        let mask = ev.mask;
        if mask & libc::IN_Q_OVERFLOW != 0 {
            return false;
        }
        if mask & libc::IN_IGNORED != 0 {
            self.dirs.remove(&ev.wd);
            return true;
        }
        let Some(dir) = self.dirs.get(&ev.wd).cloned() else {
            return true; // a watch already let go
        };
        if mask & libc::IN_MOVE_SELF != 0 {
            // A watched directory moved: its path, and every path under it, is stale. (A move
            // inside the workspace also reports IN_MOVED_FROM in its parent; one out of it, or
            // of the workspace itself, only this.)
            return false;
        }
        if mask & libc::IN_DELETE_SELF != 0 || name.is_empty() {
            return true;
        }
        let path = dir.join(std::ffi::OsString::from_vec(name.to_vec()));
        let is_dir = mask & libc::IN_ISDIR != 0;
        if mask & libc::IN_MOVED_FROM != 0 && is_dir && name != GIT.as_bytes() {
            return false; // everything under it now has another path
        }
        if mask & (libc::IN_DELETE | libc::IN_MOVED_FROM) != 0 {
            self.found.remove(&path);
            return true;
        }
        // IN_CREATE or IN_MOVED_TO.
        if name == GIT.as_bytes() {
            if std::fs::symlink_metadata(&path).is_ok_and(|m| !m.file_type().is_symlink()) {
                self.found.insert(path);
            }
            true
        } else if is_dir {
            // What was made in it before its watch existed is found by walking it now.
            self.add_tree(fd, &path)
        } else {
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("acode-nested-git-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn rel(root: &Path, v: Vec<PathBuf>) -> Vec<String> {
        v.iter()
            .map(|p| p.strip_prefix(root).unwrap().to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn follows_what_happens_between_calls_as_a_walk_would_see_it() {
        let root = ws("follow");
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::create_dir_all(root.join("vendor/a/.git/objects")).unwrap();
        let w = NestedGit::watching_from(&root, 0);
        assert_eq!(rel(&root, w.entries()), [".git", "vendor/a/.git"]);
        assert!(w.watching());

        // A repository made deep in a new tree, a worktree's `.git` file, a link named `.git`.
        std::fs::create_dir_all(root.join("x/y/z/.git")).unwrap();
        std::fs::write(root.join("vendor/wt.git-holder"), "").unwrap();
        std::fs::create_dir_all(root.join("vendor/wt")).unwrap();
        std::fs::write(
            root.join("vendor/wt/.git"),
            "gitdir: ../../.git/worktrees/wt\n",
        )
        .unwrap();
        std::os::unix::fs::symlink("/tmp", root.join("vendor/.git")).unwrap();
        let expected = [".git", "vendor/a/.git", "vendor/wt/.git", "x/y/z/.git"];
        assert_eq!(rel(&root, w.entries()), expected);
        assert_eq!(rel(&root, walk(&root)), expected);

        // Removed, and moved: a directory holding one moves elsewhere in the workspace.
        std::fs::remove_dir_all(root.join("vendor/a")).unwrap();
        std::fs::rename(root.join("x/y"), root.join("moved")).unwrap();
        let expected = [".git", "moved/z/.git", "vendor/wt/.git"];
        assert_eq!(rel(&root, w.entries()), expected);
        assert_eq!(rel(&root, walk(&root)), expected);

        // A `.git` moved in from outside the workspace, and one renamed away.
        let outside = ws("follow-outside");
        std::fs::create_dir_all(outside.join("repo/.git")).unwrap();
        std::fs::rename(outside.join("repo"), root.join("repo")).unwrap();
        std::fs::rename(root.join("vendor/wt/.git"), root.join("vendor/wt/git-was")).unwrap();
        let expected = [".git", "moved/z/.git", "repo/.git"];
        assert_eq!(rel(&root, w.entries()), expected);
        assert_eq!(rel(&root, walk(&root)), expected);
        let _ = std::fs::remove_dir_all(&root);
        let _ = std::fs::remove_dir_all(&outside);
    }

    #[test]
    fn a_flood_of_events_falls_back_to_a_walk_and_stays_right() {
        let root = ws("flood");
        let w = NestedGit::watching_from(&root, 0);
        assert!(w.entries().is_empty());
        // More than the default queue (16 384 events) between two calls.
        for i in 0..200 {
            let d = root.join(format!("d{i}"));
            std::fs::create_dir(&d).unwrap();
            for j in 0..100 {
                std::fs::write(d.join(format!("f{j}")), "").unwrap();
            }
        }
        std::fs::create_dir_all(root.join("d7/.git")).unwrap();
        assert_eq!(rel(&root, w.entries()), ["d7/.git"]);
        std::fs::create_dir_all(root.join("d9/sub/.git")).unwrap();
        assert_eq!(rel(&root, w.entries()), ["d7/.git", "d9/sub/.git"]);
        assert!(w.watching());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_small_workspace_is_walked_until_it_grows() {
        let root = ws("grow");
        let w = NestedGit::new(&root);
        std::fs::create_dir_all(root.join("a/.git")).unwrap();
        assert_eq!(rel(&root, w.entries()), ["a/.git"]);
        assert!(!w.watching());
        for i in 0..WATCH_FROM {
            std::fs::create_dir_all(root.join(format!("pkg/{i}"))).unwrap();
        }
        assert_eq!(rel(&root, w.entries()), ["a/.git"]);
        assert!(w.watching());
        std::fs::create_dir_all(root.join("pkg/3/b/.git")).unwrap();
        assert_eq!(rel(&root, w.entries()), ["a/.git", "pkg/3/b/.git"]);
        let _ = std::fs::remove_dir_all(&root);
    }
}
