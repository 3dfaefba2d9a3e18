//! Kernel-checked access to workspace files: the one place that opens a path inside the workspace.
//!
//! [`crate::workspace::Workspace::resolve_for`] checks a path *lexically* and gives the readable error; this
//! module is the guarantee. The workspace root is held as a directory handle (`O_PATH`), and every
//! path is opened relative to it with `openat2(2)` and `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`, so
//! the kernel itself refuses, *while it resolves*, any `..`, absolute symlink or magic link
//! (`/proc/self/root`, `/proc/self/fd/N`) that would leave the workspace. A directory swapped for a
//! symlink to outside between the check and the open therefore cannot redirect a tool: there is no
//! "between", the open is the check.
//!
//! Where `openat2` is unavailable (Linux < 5.6, or a seccomp filter answering `ENOSYS`), the same
//! resolution is done in user space: a walk of `openat(…, O_NOFOLLOW)` one component at a time from
//! the root handle, keeping the handles of the directories walked through so `..` pops a handle
//! (never asks the kernel for a parent), expanding relative symlinks itself (at most 40) and
//! refusing absolute ones. A directory moved out of the workspace *during* the walk is caught by a
//! last check of the result's real path (`/proc/self/fd/N`).
//!
//! Writes, creation, deletion and listing then act on the directory handles obtained this way
//! (`openat(O_CREAT|O_EXCL)`, `mkdirat`, `renameat`, `linkat`, `unlinkat`, `fdopendir`), so no path
//! string is resolved again after the check. Before writing into a directory, its real path is
//! read back from the handle and refused if it lies in a protected area (`.git/`, the database,
//! the policy file) or not beneath the root, so a directory swapped for a link into `.git/` is
//! refused too.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};

use crate::workspace::{SandboxViolation, Workspace};

/// Why a kernel-checked file operation failed.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// The kernel (or the protected-area check on the real path) refused to leave the lines.
    #[error(transparent)]
    Violation(#[from] SandboxViolation),
    /// An ordinary operating-system error (missing file, not a directory, permissions).
    #[error(transparent)]
    Io(#[from] io::Error),
}

// `struct open_how` and the `RESOLVE_*` flags of openat2(2); a stable kernel ABI.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const RESOLVE_BENEATH: u64 = 0x08;

/// Symlinks the user-space walk expands before calling it a loop (the kernel's own limit).
const MAX_LINKS: u32 = 40;

/// Whether `openat2` works here: 0 = not tried yet, 1 = yes, 2 = no (`ENOSYS`).
static OPENAT2: AtomicU8 = AtomicU8::new(0);

#[cfg(test)]
thread_local! {
    /// Test-only switch: resolve with the user-space walk on this thread, as if openat2 were missing.
    pub(crate) static FORCE_WALK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn use_openat2() -> bool {
    #[cfg(test)]
    if FORCE_WALK.with(|f| f.get()) {
        return false;
    }
    OPENAT2.load(Ordering::Relaxed) != 2
}

fn cstr(p: &OsStr) -> io::Result<CString> {
    CString::new(p.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// `openat(2)` returning an owned handle, always close-on-exec.
fn openat(dir: BorrowedFd, name: &CStr, flags: libc::c_int, mode: u32) -> io::Result<OwnedFd> {
    loop {
        // SAFETY: a valid directory fd and NUL-terminated name; the result is a fresh fd we own.
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                name.as_ptr(),
                flags | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        };
        match cvt(fd) {
            // SAFETY: openat returned a new, valid descriptor.
            Ok(fd) => return Ok(unsafe { OwnedFd::from_raw_fd(fd) }),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Raw `openat2(2)`; `ENOSYS` where the kernel or a seccomp filter does not offer it.
fn openat2(
    dir: BorrowedFd,
    path: &CStr,
    flags: libc::c_int,
    mode: u32,
    resolve: u64,
) -> io::Result<OwnedFd> {
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: if flags & (libc::O_CREAT | libc::O_TMPFILE) != 0 {
            mode as u64
        } else {
            0
        },
        resolve,
    };
    // The kernel answers EAGAIN when a rename raced the resolution; it is safe to simply retry.
    for _ in 0..16 {
        // SAFETY: `how` is a valid open_how of the size passed; `path` is NUL-terminated.
        let r = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                path.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        if r >= 0 {
            // SAFETY: openat2 returned a new, valid descriptor.
            return Ok(unsafe { OwnedFd::from_raw_fd(r as libc::c_int) });
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => continue,
            _ => return Err(e),
        }
    }
    Err(io::Error::from_raw_os_error(libc::EAGAIN))
}

/// Opens `rel` (relative, no leading `/`) beneath the directory `root` with `flags`, following
/// symlinks only while they stay beneath `root` and never following magic links. With
/// `no_symlinks`, no symlink at all is followed. Escapes fail with `EXDEV` (or `ELOOP`).
pub fn open_beneath(
    root: BorrowedFd,
    rel: &Path,
    flags: libc::c_int,
    mode: u32,
    no_symlinks: bool,
) -> io::Result<OwnedFd> {
    let rel: &Path = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    if rel.is_absolute() {
        return Err(io::Error::from_raw_os_error(libc::EXDEV));
    }
    if use_openat2() {
        let c = cstr(rel.as_os_str())?;
        let mut resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
        if no_symlinks {
            resolve |= RESOLVE_NO_SYMLINKS;
        }
        match openat2(root, &c, flags, mode, resolve) {
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                OPENAT2.store(2, Ordering::Relaxed);
            }
            other => {
                OPENAT2.store(1, Ordering::Relaxed);
                return other;
            }
        }
    }
    walk_beneath(root, rel, flags, mode, no_symlinks)
}

/// The user-space resolution used without `openat2` (see the module docs).
fn walk_beneath(
    root: BorrowedFd,
    rel: &Path,
    flags: libc::c_int,
    mode: u32,
    no_symlinks: bool,
) -> io::Result<OwnedFd> {
    let root_real = real_path(root).ok();
    let mut pending: Vec<OsString> = Vec::new(); // components left, last one first
    push_components(&mut pending, rel)?;
    let mut stack: Vec<OwnedFd> = Vec::new(); // handles below the root; empty = at the root
    let mut links = 0u32;
    let result = loop {
        let Some(name) = pending.pop() else {
            // Everything was `.` or `..` back to where we started: the directory itself.
            let cur = stack.last().map_or(root, |f| f.as_fd());
            break openat(cur, c".", flags & !libc::O_CREAT & !libc::O_EXCL, 0)?;
        };
        if name == ".." {
            if stack.pop().is_none() {
                return Err(io::Error::from_raw_os_error(libc::EXDEV));
            }
            continue;
        }
        let cur = stack.last().map_or(root, |f| f.as_fd());
        let c = cstr(&name)?;
        let last = pending.is_empty();
        let attempt = if last {
            openat(cur, &c, flags | libc::O_NOFOLLOW, mode)
        } else {
            openat(
                cur,
                &c,
                libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                0,
            )
        };
        // An O_PATH|O_NOFOLLOW open of a symlink succeeds and yields the link itself.
        let is_link_fd = |fd: &OwnedFd| {
            last && flags & libc::O_PATH != 0 && fstat_mode(fd.as_fd()) == Some(libc::S_IFLNK)
        };
        let link_fd = matches!(&attempt, Ok(fd) if is_link_fd(fd));
        match attempt {
            Ok(fd) if !link_fd => {
                if last {
                    break fd;
                }
                stack.push(fd);
            }
            other => {
                let original = other.err();
                // Perhaps a symlink: expand it ourselves, or refuse it.
                let target = match read_link_at(cur, &c) {
                    Ok(t) => t,
                    Err(_) => {
                        return Err(
                            original.unwrap_or_else(|| io::Error::from_raw_os_error(libc::ELOOP))
                        );
                    }
                };
                if no_symlinks || (last && flags & libc::O_NOFOLLOW != 0) {
                    if last && flags & libc::O_PATH != 0 && flags & libc::O_NOFOLLOW != 0 {
                        break openat(cur, &c, flags, mode)?;
                    }
                    return Err(io::Error::from_raw_os_error(libc::ELOOP));
                }
                if last && flags & libc::O_CREAT != 0 && flags & libc::O_EXCL != 0 {
                    return Err(io::Error::from_raw_os_error(libc::EEXIST));
                }
                links += 1;
                if links > MAX_LINKS {
                    return Err(io::Error::from_raw_os_error(libc::ELOOP));
                }
                if target.is_absolute() {
                    return Err(io::Error::from_raw_os_error(libc::EXDEV));
                }
                push_components(&mut pending, &target)?;
            }
        }
    };
    // A directory of the walk moved outside meanwhile would leave the result outside: check.
    if let (Some(root_real), Ok(real)) = (root_real, real_path(result.as_fd()))
        && !real.starts_with(&root_real)
    {
        return Err(io::Error::from_raw_os_error(libc::EXDEV));
    }
    Ok(result)
}

/// Pushes the components of `p` onto `pending` so that the first one is popped first.
fn push_components(pending: &mut Vec<OsString>, p: &Path) -> io::Result<()> {
    let mut comps = Vec::new();
    for c in p.components() {
        match c {
            Component::Normal(n) => comps.push(n.to_os_string()),
            Component::ParentDir => comps.push(OsString::from("..")),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => {
                return Err(io::Error::from_raw_os_error(libc::EXDEV));
            }
        }
    }
    pending.extend(comps.into_iter().rev());
    Ok(())
}

fn fstat(fd: BorrowedFd) -> io::Result<libc::stat> {
    // SAFETY: an all-zero `stat` is a valid value to be overwritten by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid fd and a pointer to a properly sized stat buffer.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st)
}

fn fstat_mode(fd: BorrowedFd) -> Option<libc::mode_t> {
    fstat(fd).ok().map(|st| st.st_mode & libc::S_IFMT)
}

/// `readlinkat(2)` of `name` in `dir`.
pub fn read_link_at(dir: BorrowedFd, name: &CStr) -> io::Result<PathBuf> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: a valid fd, NUL-terminated name and a buffer of the length passed.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(PathBuf::from(OsString::from_vec(buf)))
}

/// Where a handle really is now, read back from `/proc/self/fd/N`.
pub fn real_path(fd: BorrowedFd) -> io::Result<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// The kernel's refusals turned into sandbox violations; other errors stay I/O errors.
pub fn classify(e: io::Error, subject: &str) -> FsError {
    match e.raw_os_error() {
        Some(libc::EXDEV) => FsError::Violation(SandboxViolation::new(
            subject,
            "the path leads outside the workspace (refused by the kernel while resolving it)",
        )),
        Some(libc::ELOOP) => FsError::Violation(SandboxViolation::new(
            subject,
            "a symlink in the path cannot be followed safely (a loop, a magic link or a link not allowed here)",
        )),
        _ => FsError::Io(e),
    }
}

/// `abs` (an output of [`Workspace::resolve_for`]) relative to the root, for `openat2`.
fn rel_of<'a>(ws: &Workspace, abs: &'a Path) -> &'a Path {
    abs.strip_prefix(ws.root()).unwrap_or(abs)
}

/// Opens an existing file or directory for reading; `follow` says whether a final symlink is
/// followed (beneath the root) or refused. Non-blocking, so a FIFO cannot stall the caller.
pub fn open_read(ws: &Workspace, abs: &Path, follow: bool) -> Result<File, FsError> {
    let mut flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    open_beneath(ws.root_fd(), rel_of(ws, abs), flags, 0, false)
        .map(File::from)
        .map_err(|e| classify(e, &ws.display(abs)))
}

/// Opens an existing regular file for reading, refusing directories, FIFOs and devices (which
/// could block or never end); returns it with its metadata.
pub fn open_regular(ws: &Workspace, abs: &Path) -> Result<(File, Metadata), FsError> {
    let file = open_read(ws, abs, true)?;
    let meta = file.metadata()?;
    if meta.is_dir() {
        return Err(
            io::Error::new(io::ErrorKind::IsADirectory, "is a directory, not a file").into(),
        );
    }
    if !meta.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file").into());
    }
    Ok((file, meta))
}

/// Opens an existing directory beneath the root, for listing and walking.
pub fn open_dir(ws: &Workspace, abs: &Path) -> Result<OwnedFd, FsError> {
    open_beneath(
        ws.root_fd(),
        rel_of(ws, abs),
        libc::O_RDONLY | libc::O_DIRECTORY,
        0,
        false,
    )
    .map_err(|e| classify(e, &ws.display(abs)))
}

/// The directory a written path lives in, held open, and the name in it: everything a write,
/// create or delete does goes through these two.
#[derive(Debug)]
pub struct Parent {
    /// The parent directory (`O_RDONLY|O_DIRECTORY`, so it can also be fsynced).
    pub dir: OwnedFd,
    /// The final component.
    pub name: OsString,
    /// The workspace-relative path, for messages.
    pub shown: String,
}

/// Resolves the parent of `abs` for writing: opened beneath the root (creating missing directories
/// one `mkdirat` at a time on the handle of the one above when `create` is set), then checked by
/// its *real* path against the root and the protected areas.
pub fn parent_for_write(ws: &Workspace, abs: &Path, create: bool) -> Result<Parent, FsError> {
    let shown = ws.display(abs);
    let rel = rel_of(ws, abs);
    let name = match rel.file_name() {
        Some(n) if !rel.as_os_str().is_empty() => n.to_os_string(),
        _ => {
            return Err(SandboxViolation::new(
                &shown,
                "the workspace root itself cannot be written",
            )
            .into());
        }
    };
    let parent_rel = rel.parent().unwrap_or(Path::new(""));
    let dir_flags = libc::O_RDONLY | libc::O_DIRECTORY;
    let opened = open_beneath(ws.root_fd(), parent_rel, dir_flags, 0, false);
    let dir = match opened {
        Ok(d) => d,
        Err(e) if create && e.raw_os_error() == Some(libc::ENOENT) => {
            create_dirs(ws, parent_rel).map_err(|e| classify(e, &shown))?
        }
        Err(e) => return Err(classify(e, &shown)),
    };
    check_real_dir(ws, dir.as_fd(), &name, &shown)?;
    Ok(Parent { dir, name, shown })
}

/// Opens the longest existing prefix of `rel` beneath the root, then creates and opens each missing
/// component on the handle of the one above (`mkdirat`, then `openat(O_NOFOLLOW)`).
fn create_dirs(ws: &Workspace, rel: &Path) -> io::Result<OwnedFd> {
    let comps: Vec<&OsStr> = rel.iter().collect();
    let dir_flags = libc::O_RDONLY | libc::O_DIRECTORY;
    let mut existing = comps.len();
    let mut dir = loop {
        if existing == 0 {
            break open_beneath(ws.root_fd(), Path::new("."), dir_flags, 0, false)?;
        }
        let prefix: PathBuf = comps[..existing].iter().collect();
        match open_beneath(ws.root_fd(), &prefix, dir_flags, 0, false) {
            Ok(d) => break d,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => existing -= 1,
            Err(e) => return Err(e),
        }
    };
    for comp in &comps[existing..] {
        if *comp == ".." || *comp == "." {
            return Err(io::Error::from_raw_os_error(libc::EXDEV));
        }
        let c = cstr(comp)?;
        // SAFETY: a valid directory fd and NUL-terminated name.
        let r = unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), 0o777) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EEXIST) {
                return Err(e);
            }
        }
        dir = openat(dir.as_fd(), &c, dir_flags | libc::O_NOFOLLOW, 0)?;
    }
    Ok(dir)
}

/// Refuses a directory handle that is not beneath the root, or whose `name` entry would be in a
/// protected area, judged by where the handle really is now.
fn check_real_dir(
    ws: &Workspace,
    dir: BorrowedFd,
    name: &OsStr,
    shown: &str,
) -> Result<(), FsError> {
    let real = real_path(dir).map_err(|e| {
        FsError::Io(io::Error::new(
            e.kind(),
            format!("cannot read where the directory really is (is /proc mounted?): {e}"),
        ))
    })?;
    if !real.starts_with(ws.root()) {
        return Err(SandboxViolation::new(
            shown,
            "the directory is not inside the workspace (it was moved or swapped for a link)",
        )
        .into());
    }
    ws.check_protected(shown, &real.join(name))?;
    Ok(())
}

impl Parent {
    fn cname(&self) -> io::Result<CString> {
        cstr(&self.name)
    }

    /// What is at the name now, without following a symlink (`None` if nothing).
    pub fn lstat(&self) -> io::Result<Option<Metadata>> {
        let c = self.cname()?;
        match openat(self.dir.as_fd(), &c, libc::O_PATH | libc::O_NOFOLLOW, 0) {
            Ok(fd) => File::from(fd).metadata().map(Some),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Opens the existing regular file at the name for reading (never through a symlink, never
    /// blocking on a FIFO).
    pub fn open_existing(&self) -> io::Result<File> {
        let c = self.cname()?;
        openat(
            self.dir.as_fd(),
            &c,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
            0,
        )
        .map(File::from)
    }

    /// Where the symlink at the name points.
    pub fn read_link(&self) -> io::Result<PathBuf> {
        read_link_at(self.dir.as_fd(), &self.cname()?)
    }

    /// The real, workspace-relative path of the name's final target when it is a symlink
    /// (resolved beneath the root; refused if it escapes or dangles).
    pub fn link_target(&self, ws: &Workspace) -> Result<PathBuf, FsError> {
        let dir_real = real_path(self.dir.as_fd())?;
        let rel_dir = dir_real.strip_prefix(ws.root()).map_err(|_| {
            SandboxViolation::new(
                &self.shown,
                "the directory is not inside the workspace (it was moved or swapped for a link)",
            )
        })?;
        let fd = open_beneath(
            ws.root_fd(),
            &rel_dir.join(&self.name),
            libc::O_PATH,
            0,
            false,
        )
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT) => FsError::Violation(SandboxViolation::new(
                &self.shown,
                "a dangling symlink in the path cannot be followed safely",
            )),
            _ => classify(e, &self.shown),
        })?;
        Ok(real_path(fd.as_fd())?)
    }

    /// Removes the name if it is an empty directory (`ENOTEMPTY` otherwise) and syncs the parent.
    pub fn remove_empty_dir(&self) -> io::Result<()> {
        let c = self.cname()?;
        // SAFETY: a valid directory fd and NUL-terminated name.
        cvt(unsafe { libc::unlinkat(self.dir.as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR) })?;
        sync_dir(self.dir.as_fd())
    }

    /// Removes the name (a file or a symlink, never a directory) and syncs the directory.
    pub fn unlink(&self) -> io::Result<()> {
        let c = self.cname()?;
        // SAFETY: a valid directory fd and NUL-terminated name.
        cvt(unsafe { libc::unlinkat(self.dir.as_raw_fd(), c.as_ptr(), 0) })?;
        sync_dir(self.dir.as_fd())
    }

    /// Writes `contents` atomically at the name: a temporary file in the staging directory (or in
    /// the parent itself when staging is on another filesystem), fsynced, then `renameat` (or, with
    /// `replace == false`, `linkat`, which fails with `EEXIST` rather than replace anything) on the
    /// held handles, then the directory fsynced. `mode` is applied to the new file when given.
    pub fn write_atomic(
        &self,
        ws: &Workspace,
        contents: &[u8],
        replace: bool,
        mode: Option<u32>,
    ) -> io::Result<()> {
        use std::io::Write;
        let name = self.cname()?;
        let staging = staging_dir(ws, self.dir.as_fd());
        let (temp_dir, temp_name) = match &staging {
            Some(s) => (s.as_fd(), format!("{}", uuid::Uuid::new_v4())),
            None => (
                self.dir.as_fd(),
                format!(".acode-tmp-{}", uuid::Uuid::new_v4()),
            ),
        };
        let temp_c = cstr(OsStr::new(&temp_name))?;
        let fd = openat(
            temp_dir,
            &temp_c,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
            0o666,
        )?;
        let guard = TempName {
            dir: temp_dir,
            name: Some(&temp_c),
        };
        let mut file = File::from(fd);
        file.write_all(contents)?;
        if let Some(mode) = mode {
            // SAFETY: a valid fd we own.
            cvt(unsafe { libc::fchmod(file.as_raw_fd(), mode as libc::mode_t) })?;
        }
        file.sync_all()?;
        drop(file);
        if replace {
            // SAFETY: valid directory fds and NUL-terminated names.
            cvt(unsafe {
                libc::renameat(
                    temp_dir.as_raw_fd(),
                    temp_c.as_ptr(),
                    self.dir.as_raw_fd(),
                    name.as_ptr(),
                )
            })?;
            std::mem::forget(guard);
        } else {
            // A hard link never replaces an existing name: the existence check and the creation
            // are one atomic step. The temporary name is removed by the guard.
            // SAFETY: valid directory fds and NUL-terminated names.
            cvt(unsafe {
                libc::linkat(
                    temp_dir.as_raw_fd(),
                    temp_c.as_ptr(),
                    self.dir.as_raw_fd(),
                    name.as_ptr(),
                    0,
                )
            })?;
            drop(guard);
        }
        sync_dir(self.dir.as_fd())
    }
}

/// Removes a temporary file by name in its directory unless forgotten.
struct TempName<'a> {
    dir: BorrowedFd<'a>,
    name: Option<&'a CStr>,
}

impl Drop for TempName<'_> {
    fn drop(&mut self) {
        if let Some(n) = self.name.take() {
            // SAFETY: a valid directory fd and NUL-terminated name.
            unsafe { libc::unlinkat(self.dir.as_raw_fd(), n.as_ptr(), 0) };
        }
    }
}

/// Fsyncs a directory so a rename or unlink in it survives a crash. Filesystems that cannot sync
/// directories say so with `EINVAL`; that is not an error worth failing a write for.
pub fn sync_dir(dir: BorrowedFd) -> io::Result<()> {
    // SAFETY: a valid fd.
    match cvt(unsafe { libc::fsync(dir.as_raw_fd()) }) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::EROFS)) => Ok(()),
        Err(e) => Err(e),
        Ok(_) => Ok(()),
    }
}

/// Opens (creating as needed) the runner's staging directory `.acode/tmp/<pid>` through handles,
/// following no symlink at all; `Some` only when it is on the same filesystem as `dir`, so a
/// rename from it into `dir` is atomic.
fn staging_dir(ws: &Workspace, dir: BorrowedFd) -> Option<OwnedFd> {
    let pid = std::process::id().to_string();
    let mut cur = open_beneath(ws.root_fd(), Path::new("."), libc::O_PATH, 0, true).ok()?;
    let parts = crate::workspace::STAGING_DIR
        .split('/')
        .chain(std::iter::once(pid.as_str()));
    for part in parts {
        let c = cstr(OsStr::new(part)).ok()?;
        // SAFETY: a valid directory fd and NUL-terminated name.
        unsafe { libc::mkdirat(cur.as_raw_fd(), c.as_ptr(), 0o700) };
        cur = openat(
            cur.as_fd(),
            &c,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        )
        .ok()?;
    }
    let same_fs = fstat(cur.as_fd()).ok()?.st_dev == fstat(dir).ok()?.st_dev;
    same_fs.then_some(cur)
}

/// What a directory entry is, without following a symlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symlink (never followed by walks).
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

/// One entry of a directory read through its handle.
#[derive(Debug, Clone)]
pub struct DirEntry {
    /// The entry's name.
    pub name: OsString,
    /// Its kind (not following symlinks).
    pub kind: EntryKind,
}

/// The entries of the directory `dir` (without `.` and `..`), unsorted. Reads with `getdents64`
/// on a fresh descriptor of `dir` (so the caller's offset is untouched): one `openat`, the reads
/// and a `close`, which matters because the protected-path guard lists directories around every
/// command.
pub fn read_dir(dir: BorrowedFd) -> io::Result<Vec<DirEntry>> {
    let own = openat(dir, c".", libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
    let raw = own.as_raw_fd();
    // u64 elements: linux_dirent64 records are 8-byte aligned within the buffer.
    let mut buf = vec![0u64; 1024];
    let mut out = Vec::new();
    loop {
        // SAFETY: a valid directory fd and a writable buffer of the given size in bytes.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                raw,
                buf.as_mut_ptr(),
                buf.len() * std::mem::size_of::<u64>(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            break;
        }
        // SAFETY: the kernel wrote `n` bytes into `buf`.
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n as usize) };
        let mut at = 0;
        // linux_dirent64: d_ino u64, d_off i64, d_reclen u16, d_type u8, then the NUL-ended name.
        while at + 19 <= bytes.len() {
            let reclen = u16::from_ne_bytes([bytes[at + 16], bytes[at + 17]]) as usize;
            if reclen < 19 || at + reclen > bytes.len() {
                break;
            }
            let d_type = bytes[at + 18];
            let name_bytes = &bytes[at + 19..at + reclen];
            let name = &name_bytes[..name_bytes
                .iter()
                .position(|&b| b == 0)
                .unwrap_or(name_bytes.len())];
            at += reclen;
            if name == b"." || name == b".." {
                continue;
            }
            let kind = match d_type {
                libc::DT_DIR => EntryKind::Dir,
                libc::DT_REG => EntryKind::File,
                libc::DT_LNK => EntryKind::Symlink,
                libc::DT_UNKNOWN => match lstat_at(own.as_fd(), OsStr::from_bytes(name))
                    .map(|st| st.st_mode & libc::S_IFMT)
                {
                    Ok(libc::S_IFDIR) => EntryKind::Dir,
                    Ok(libc::S_IFREG) => EntryKind::File,
                    Ok(libc::S_IFLNK) => EntryKind::Symlink,
                    _ => EntryKind::Other,
                },
                _ => EntryKind::Other,
            };
            out.push(DirEntry {
                name: OsString::from_vec(name.to_vec()),
                kind,
            });
        }
    }
    Ok(out)
}

/// Opens the subdirectory `name` of `dir`, refusing a symlink (a walk never follows links).
pub fn open_subdir(dir: BorrowedFd, name: &OsStr) -> io::Result<OwnedFd> {
    openat(
        dir,
        &cstr(name)?,
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
        0,
    )
}

/// Opens the regular file `name` in `dir` for reading, refusing a symlink and never blocking on a
/// FIFO; the caller checks the metadata.
pub fn open_file_in(dir: BorrowedFd, name: &OsStr) -> io::Result<File> {
    openat(
        dir,
        &cstr(name)?,
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
        0,
    )
    .map(File::from)
}

/// `lstat` of the entry `name` in `dir` (a symlink is described, not followed).
pub fn lstat_at(dir: BorrowedFd, name: &OsStr) -> io::Result<libc::stat> {
    let c = cstr(name)?;
    // SAFETY: zeroed stat is valid to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd, NUL-terminated name, valid buffer.
    cvt(unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            c.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    Ok(st)
}

/// The size of the entry `name` in `dir`, not following a symlink.
pub fn size_at(dir: BorrowedFd, name: &OsStr) -> io::Result<u64> {
    Ok(lstat_at(dir, name)?.st_size as u64)
}

/// Creates the regular file `name` in `dir` with `mode`, failing if anything is there already
/// (so never through a symlink).
pub fn create_new_in(dir: BorrowedFd, name: &OsStr, mode: u32) -> io::Result<File> {
    openat(
        dir,
        &cstr(name)?,
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
        mode,
    )
    .map(File::from)
}

/// Removes `name` in `dir` and, if it is a directory, everything below it, through handles only
/// (a symlink inside is removed, never followed).
pub fn remove_tree_at(dir: BorrowedFd, name: &OsStr) -> io::Result<()> {
    let c = cstr(name)?;
    // SAFETY: valid fd and NUL-terminated name.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) } == 0 {
        return Ok(());
    }
    let sub = open_subdir(dir, name)?;
    for entry in read_dir(sub.as_fd())? {
        remove_tree_at(sub.as_fd(), &entry.name)?;
    }
    // SAFETY: valid fd and NUL-terminated name.
    cvt(unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR) })?;
    Ok(())
}

/// Removes what crashed runs left in the staging area (see [`Workspace::sweep_staging`]).
impl Workspace {
    /// Removes what crashed runs left in the staging area (`.acode/tmp/<pid>`, where writes are
    /// staged before their atomic rename): the directories of processes that no longer exist.
    /// Live runs sharing the workspace keep theirs. Done through directory handles, following no
    /// symlink, so a link planted at `.acode/tmp` cannot make the sweep delete anything outside.
    /// (Here, beside the directory-handle code it uses, so `paths` need not import `fs`.)
    pub fn sweep_staging(&self) {
        sweep_staging(self);
    }
}

fn sweep_staging(ws: &Workspace) {
    let Ok(tmp) = open_beneath(
        ws.root_fd(),
        Path::new(crate::workspace::STAGING_DIR),
        libc::O_RDONLY | libc::O_DIRECTORY,
        0,
        true,
    ) else {
        return;
    };
    let Ok(entries) = read_dir(tmp.as_fd()) else {
        return;
    };
    for entry in entries {
        let pid = entry.name.to_str().and_then(|n| n.parse::<i32>().ok());
        let alive = pid.is_some_and(|pid| {
            // SAFETY: signal 0 only asks whether the process exists.
            pid == std::process::id() as i32 || unsafe { libc::kill(pid, 0) } == 0
        });
        if !alive {
            let _ = remove_tree_at(tmp.as_fd(), &entry.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    struct T {
        base: PathBuf,
        ws: Workspace,
    }

    impl T {
        fn new() -> T {
            let base = std::env::temp_dir().join(format!("acode-fs-{}", uuid::Uuid::new_v4()));
            std::fs::create_dir_all(base.join("ws/sub")).unwrap();
            std::fs::create_dir_all(base.join("outside")).unwrap();
            let base = base.canonicalize().unwrap();
            std::fs::write(base.join("outside/secret"), "secret").unwrap();
            std::fs::write(base.join("ws/sub/in.txt"), "inside").unwrap();
            let ws = Workspace::new(&base.join("ws")).unwrap();
            T { base, ws }
        }
        fn p(&self, rel: &str) -> PathBuf {
            self.base.join("ws").join(rel)
        }
        fn open(&self, rel: &str) -> io::Result<OwnedFd> {
            open_beneath(self.ws.root_fd(), Path::new(rel), libc::O_RDONLY, 0, false)
        }
    }

    impl Drop for T {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.base);
        }
    }

    /// Runs `f` once with openat2 (where the kernel has it) and once with the user-space walk.
    fn both(f: impl Fn(&T)) {
        for walk in [false, true] {
            FORCE_WALK.with(|w| w.set(walk));
            let t = T::new();
            f(&t);
            FORCE_WALK.with(|w| w.set(false));
        }
    }

    fn refused(r: io::Result<OwnedFd>) -> bool {
        matches!(
            r.map_err(|e| e.raw_os_error()),
            Err(Some(libc::EXDEV | libc::ELOOP))
        )
    }

    #[test]
    fn openat2_is_used_where_the_kernel_has_it() {
        let t = T::new();
        t.open("sub/in.txt").unwrap();
        // This kernel (≥ 5.6) has openat2: the fast path must really be in use, not the walk.
        assert_eq!(
            OPENAT2.load(Ordering::Relaxed),
            1,
            "openat2 unavailable here?"
        );
    }

    #[test]
    fn inside_paths_and_inside_links_open() {
        both(|t| {
            symlink("sub", t.p("sub-link")).unwrap();
            symlink("../sub/in.txt", t.p("sub/self-link")).unwrap();
            for ok in [
                "sub/in.txt",
                "./sub/../sub/in.txt",
                "sub-link/in.txt",
                "sub/self-link",
                "sub-link/self-link",
                ".",
            ] {
                assert!(t.open(ok).is_ok(), "{ok} should open");
            }
        });
    }

    #[test]
    fn dot_dot_escapes_are_refused() {
        both(|t| {
            for bad in [
                "..",
                "../outside/secret",
                "sub/../../outside/secret",
                "sub/../..",
            ] {
                assert!(refused(t.open(bad)), "{bad} should be refused");
            }
            assert!(refused(t.open("/etc/passwd")));
        });
    }

    #[test]
    fn links_out_are_refused() {
        both(|t| {
            let outside = t.base.join("outside");
            symlink(&outside, t.p("abs-out")).unwrap();
            symlink(t.p("sub"), t.p("abs-in")).unwrap(); // absolute, even pointing inside
            symlink("../outside", t.p("rel-out")).unwrap();
            symlink("../../outside", t.p("sub/rel-out2")).unwrap();
            for bad in [
                "abs-out/secret",
                "abs-out",
                "abs-in/in.txt",
                "rel-out/secret",
                "sub/rel-out2/secret",
            ] {
                assert!(refused(t.open(bad)), "{bad} should be refused");
            }
        });
    }

    #[test]
    fn loops_and_magic_links_are_refused() {
        both(|t| {
            symlink("loop-b", t.p("loop-a")).unwrap();
            symlink("loop-a", t.p("loop-b")).unwrap();
            symlink("self", t.p("self")).unwrap();
            symlink("/proc/self/root", t.p("magic")).unwrap();
            symlink("/proc/self/cwd", t.p("magic-cwd")).unwrap();
            for bad in ["loop-a", "self/x", "magic/etc/passwd", "magic", "magic-cwd"] {
                assert!(refused(t.open(bad)), "{bad} should be refused");
            }
        });
        // A magic link reached from a root that *is* in /proc: refused by RESOLVE_NO_MAGICLINKS.
        let proc_self = crate::workspace::open_root(Path::new("/proc/self")).unwrap();
        let r = open_beneath(proc_self.as_fd(), Path::new("root/etc/passwd"), 0, 0, false);
        assert!(refused(r), "magic link followed");
    }

    #[test]
    fn no_symlinks_mode_refuses_even_inside_links() {
        both(|t| {
            symlink("sub", t.p("sub-link")).unwrap();
            assert!(refused(open_beneath(
                t.ws.root_fd(),
                Path::new("sub-link/in.txt"),
                libc::O_RDONLY,
                0,
                true
            )));
        });
    }

    #[test]
    fn writes_go_through_handles_and_respect_protected_areas() {
        both(|t| {
            let parent = parent_for_write(&t.ws, &t.p("new/deep/f.txt"), true).unwrap();
            parent.write_atomic(&t.ws, b"one", false, None).unwrap();
            assert_eq!(
                std::fs::read_to_string(t.p("new/deep/f.txt")).unwrap(),
                "one"
            );
            let e = parent.write_atomic(&t.ws, b"two", false, None).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
            parent
                .write_atomic(&t.ws, b"two", true, Some(0o640))
                .unwrap();
            assert_eq!(
                std::fs::read_to_string(t.p("new/deep/f.txt")).unwrap(),
                "two"
            );
            parent.unlink().unwrap();
            assert!(!t.p("new/deep/f.txt").exists());
            // A directory that leads into .git by a link is judged by where it really is.
            std::fs::create_dir_all(t.p(".git/hooks")).unwrap();
            symlink(".git/hooks", t.p("hooks-link")).unwrap();
            assert!(matches!(
                parent_for_write(&t.ws, &t.p("hooks-link/pre-commit"), true),
                Err(FsError::Violation(_))
            ));
            assert!(!t.p(".git/hooks/pre-commit").exists());
            // Nothing was staged outside the runner's area, nothing was left behind.
            let left: Vec<_> = std::fs::read_dir(t.p(".acode/tmp"))
                .unwrap()
                .flatten()
                .flat_map(|d| std::fs::read_dir(d.path()).unwrap().flatten())
                .collect();
            assert!(left.is_empty(), "{left:?}");
        });
    }

    #[test]
    fn sweep_does_not_follow_a_planted_link() {
        let t = T::new();
        let victim = t.base.join("outside/99999999");
        std::fs::create_dir_all(victim.join("inner")).unwrap();
        std::fs::create_dir_all(t.p(".acode")).unwrap();
        symlink(t.base.join("outside"), t.p(".acode/tmp")).unwrap();
        t.ws.sweep_staging();
        assert!(victim.join("inner").exists(), "the sweep deleted outside");
        // A real staging area of a dead process is swept, links inside it removed, not followed.
        std::fs::remove_file(t.p(".acode/tmp")).unwrap();
        std::fs::create_dir_all(t.p(".acode/tmp/99999999/d")).unwrap();
        symlink(&victim, t.p(".acode/tmp/99999999/d/link")).unwrap();
        t.ws.sweep_staging();
        assert!(!t.p(".acode/tmp/99999999").exists());
        assert!(victim.join("inner").exists());
    }

    /// A thread swaps `flip` between a directory and a link to outside while this thread writes
    /// through it, in both resolution modes: nothing may land outside.
    #[test]
    fn writes_racing_a_swapped_directory_stay_inside() {
        both(|t| {
            std::fs::create_dir_all(t.p("flip")).unwrap();
            symlink(t.base.join("outside"), t.p("parked")).unwrap();
            let a = CString::new(t.p("flip").into_os_string().into_vec()).unwrap();
            let b = CString::new(t.p("parked").into_os_string().into_vec()).unwrap();
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let flipper = {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        // SAFETY: valid NUL-terminated absolute paths.
                        let r = unsafe {
                            libc::renameat2(
                                libc::AT_FDCWD,
                                a.as_ptr(),
                                libc::AT_FDCWD,
                                b.as_ptr(),
                                libc::RENAME_EXCHANGE,
                            )
                        };
                        assert_eq!(r, 0, "{}", io::Error::last_os_error());
                        n += 1;
                    }
                    n
                })
            };
            let (mut ok, mut refused) = (0, 0);
            for i in 0..300 {
                let target = t.p(&format!("flip/f{i}.txt"));
                let r = parent_for_write(&t.ws, &target, true)
                    .and_then(|p| Ok(p.write_atomic(&t.ws, b"x", true, None)?));
                let _ = open_read(&t.ws, &t.p("flip/f0.txt"), true);
                match r {
                    Ok(()) => ok += 1,
                    Err(_) => refused += 1,
                }
            }
            stop.store(true, Ordering::Relaxed);
            let flips = flipper.join().unwrap();
            let outside: Vec<_> = std::fs::read_dir(t.base.join("outside"))
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(outside, [OsString::from("secret")], "written outside");
            assert!(flips > 10, "{flips} flips");
            assert_eq!(ok + refused, 300);
        });
    }

    #[test]
    fn read_dir_lists_without_following() {
        both(|t| {
            symlink(t.base.join("outside"), t.p("sub/out")).unwrap();
            let dir = open_dir(&t.ws, &t.p("sub")).unwrap();
            let mut entries: Vec<_> = read_dir(dir.as_fd())
                .unwrap()
                .into_iter()
                .map(|e| (e.name.into_string().unwrap(), e.kind))
                .collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            assert_eq!(
                entries,
                [
                    ("in.txt".to_string(), EntryKind::File),
                    ("out".to_string(), EntryKind::Symlink)
                ]
            );
            assert!(open_subdir(dir.as_fd(), OsStr::new("out")).is_err());
        });
    }

    #[test]
    fn read_dir_lists_a_directory_larger_than_one_read_buffer() {
        both(|t| {
            // 700 entries with long names: well over the 8 KiB read buffer, so several getdents64
            // calls, and a record straddling none of them.
            let big = t.p("big");
            std::fs::create_dir(&big).unwrap();
            let mut want = Vec::new();
            for i in 0..700 {
                let name = format!("entry-{i:04}-{}", "x".repeat(i % 90));
                if i % 7 == 0 {
                    std::fs::create_dir(big.join(&name)).unwrap();
                    want.push((name, EntryKind::Dir));
                } else {
                    std::fs::write(big.join(&name), "").unwrap();
                    want.push((name, EntryKind::File));
                }
            }
            let dir = open_dir(&t.ws, &big).unwrap();
            let mut got: Vec<_> = read_dir(dir.as_fd())
                .unwrap()
                .into_iter()
                .map(|e| (e.name.into_string().unwrap(), e.kind))
                .collect();
            got.sort_by(|a, b| a.0.cmp(&b.0));
            want.sort_by(|a, b| a.0.cmp(&b.0));
            assert_eq!(got, want);
        });
    }
}
