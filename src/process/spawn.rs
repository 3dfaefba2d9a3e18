//! Starting one child the way `posix_spawn` does — `clone(CLONE_VM | CLONE_VFORK)` — but with the
//! runner's own set-up between the clone and the `exec`: its own process group, `PR_SET_PDEATHSIG`,
//! the resource limits and the run's Landlock ruleset.
//!
//! Why not `std::process::Command` with a `pre_exec` hook: a hook makes std `fork` the runner,
//! which copies its page tables and then makes the runner take a copy-on-write fault for every page
//! it touches until the child has exec'd. That was measured at ~0.58 ms per command — about as much
//! as the whole per-command budget of the cost target (SPEC §11, issue #7). Without a hook std
//! uses `posix_spawn`, which shares the address space with the child and suspends only the calling
//! thread until the `exec`; glibc's `posix_spawn` cannot apply rlimits or Landlock, so this module
//! does the same clone itself.
//!
//! What sharing the address space demands of the child (all of it is in `child_main`):
//! - Only async-signal-safe system calls on values prepared here in the parent (C strings, pointer
//!   arrays, integers): no allocation, no locks, no unwinding. The child writes nothing shared
//!   except `ChildArgs::error`, which the parent reads after `clone` returns.
//! - It runs on its own small stack (mapped here, with a guard page below it).
//! - Every signal is blocked in the parent thread across the `clone`, and the child sets every
//!   disposition back to the default before unblocking, so no runner signal handler ever runs on
//!   the child's side of the shared memory, and no ignored signal survives the `exec` (the Rust
//!   runtime ignores `SIGPIPE`; std's `Command` resets that one too). The program starts with an
//!   empty signal mask.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::Arc;

/// A resource limit the child sets on itself before `exec`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// `RLIMIT_AS`: bytes of address space.
    AddressSpace,
    /// `RLIMIT_FSIZE`: bytes of the largest file the process may write.
    FileSize,
    /// `RLIMIT_CPU`: seconds of CPU time.
    Cpu,
    /// `RLIMIT_NOFILE`: open file descriptors.
    OpenFiles,
    /// `RLIMIT_CORE`: bytes of a core dump.
    Core,
}

/// `setrlimit`'s resource argument: glibc's `__rlimit_resource_t`, a plain `int` in musl (the
/// static build for the container image).
#[cfg(target_env = "gnu")]
type RlimitResource = libc::__rlimit_resource_t;
/// `setrlimit`'s resource argument: glibc's `__rlimit_resource_t`, a plain `int` in musl (the
/// static build for the container image).
#[cfg(not(target_env = "gnu"))]
type RlimitResource = libc::c_int;

impl Resource {
    /// Every resource, in the order of [`Resource::index`].
    const ALL: [Resource; MAX_LIMITS] = [
        Resource::AddressSpace,
        Resource::FileSize,
        Resource::Cpu,
        Resource::OpenFiles,
        Resource::Core,
    ];

    /// A small number naming the resource, for the supervisor's requests.
    pub fn index(self) -> u8 {
        Self::ALL.iter().position(|r| *r == self).unwrap_or(0) as u8
    }

    /// The resource [`Resource::index`] named, if any.
    pub fn from_index(i: u8) -> Option<Resource> {
        Self::ALL.get(usize::from(i)).copied()
    }

    fn raw(self) -> RlimitResource {
        match self {
            Resource::AddressSpace => libc::RLIMIT_AS,
            Resource::FileSize => libc::RLIMIT_FSIZE,
            Resource::Cpu => libc::RLIMIT_CPU,
            Resource::OpenFiles => libc::RLIMIT_NOFILE,
            Resource::Core => libc::RLIMIT_CORE,
        }
    }
}

/// One limit: the soft value the process is stopped or refused at, and the hard ceiling it cannot
/// raise the soft value above (both already capped by the runner's own hard limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rlimit {
    /// Which resource.
    pub resource: Resource,
    /// The soft limit.
    pub soft: u64,
    /// The hard limit.
    pub hard: u64,
}

impl Rlimit {
    /// `soft`/`hard` for `resource`, lowered to the runner's own hard limit so that an unprivileged
    /// runner never asks for more than it has (which `setrlimit` would refuse).
    pub fn capped(resource: Resource, soft: u64, hard: u64) -> Self {
        let max = runner_hard_limit(resource);
        Rlimit {
            resource,
            soft: soft.min(max),
            hard: hard.min(max),
        }
    }
}

/// The runner's own hard limit of `resource`, read once per process (the runner never changes
/// its limits; they are looked at for every command).
fn runner_hard_limit(resource: Resource) -> u64 {
    static HARD: std::sync::OnceLock<[u64; MAX_LIMITS]> = std::sync::OnceLock::new();
    let all = Resource::ALL;
    let hard = HARD.get_or_init(|| {
        all.map(|r| {
            let mut cur = libc::rlimit {
                rlim_cur: 0,
                rlim_max: libc::RLIM_INFINITY,
            };
            // SAFETY: getrlimit writes only into `cur`.
            if unsafe { libc::getrlimit(r.raw(), &mut cur) } != 0 {
                return libc::RLIM_INFINITY;
            }
            cur.rlim_max
        })
    });
    all.iter()
        .position(|r| *r == resource)
        .map_or(libc::RLIM_INFINITY, |i| hard[i])
}

/// The most limits a child sets (one per [`Resource`]).
const MAX_LIMITS: usize = 5;

/// What the child does to itself between the clone and `exec`. Built in the parent; see the module
/// docs for why nothing in the child may allocate.
#[derive(Debug, Clone, Default)]
pub struct ChildSetup {
    /// Resource limits (at most one per resource; extras are ignored).
    pub rlimits: Vec<Rlimit>,
    /// A Landlock ruleset to restrict the child with (see [`crate::sandbox::landlock`]).
    pub landlock: Option<Arc<OwnedFd>>,
    /// The seccomp filter refusing UDP and raw sockets (see [`crate::process::seccomp`]).
    pub seccomp: Option<&'static crate::process::seccomp::Filter>,
    /// Whether the child gives up every capability before `exec` ([`drop_capabilities`]): under
    /// Landlock alone a command run by root is root without privilege, as inside bwrap, so that
    /// it cannot read another command's `/proc/PID/environ` (which `CAP_SYS_ADMIN` or
    /// `CAP_PERFMON` would let it, across Landlock domains) nor use root's other powers.
    pub drop_caps: bool,
}

/// A started child: its pid (also its process group id) and the read ends of its output pipes.
/// The caller must reap it with [`wait`].
#[derive(Debug)]
pub struct Spawned {
    /// The child's pid.
    pub pid: libc::pid_t,
    /// Read end of the child's standard output.
    pub stdout: File,
    /// Read end of the child's standard error.
    pub stderr: File,
}

/// The stack the child runs on until `exec` (it makes a dozen system calls; nothing deep).
const STACK_SIZE: usize = 64 * 1024;
/// The highest signal number plus one (`_NSIG` on Linux).
const NSIG: libc::c_int = 65;

/// The kernel's `struct sigaction` for `rt_sigaction` (x86-64 and aarch64 layout), which differs
/// from glibc's: a 64-bit mask at the end. All-zero is `SIG_DFL` with no flags.
#[repr(C)]
#[derive(Default)]
struct KernelSigaction {
    handler: libc::sighandler_t,
    flags: libc::c_ulong,
    restorer: usize,
    mask: u64,
}

/// Everything [`child_main`] reads, prepared in the parent, plus the one field it writes.
struct ChildArgs {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    /// (target fd, source fd) for stdin, stdout, stderr.
    stdio: [(RawFd, RawFd); 3],
    parent: libc::pid_t,
    limits: [(RlimitResource, u64, u64); MAX_LIMITS],
    n_limits: usize,
    /// The Landlock ruleset descriptor, or -1.
    landlock: RawFd,
    /// The seccomp program, or null.
    seccomp: *const libc::sock_fprog,
    /// Whether to drop every capability ([`ChildSetup::drop_caps`]).
    drop_caps: bool,
    /// Written by the child when a step fails: the `errno`. 0 while everything succeeded (which,
    /// once `clone` has returned, means the `exec` succeeded).
    error: libc::c_int,
}

/// A C string for a system call; an interior NUL is an `InvalidInput` error naming `what`.
fn c_string(bytes: &[u8], what: &str) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("the {what} contains a NUL byte"),
        )
    })
}

/// The NULL-terminated pointer array `execve` takes, pointing into `strings`.
fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// `/dev/null` for the children's stdin, opened once per process (close-on-exec, read-only).
fn dev_null() -> io::Result<RawFd> {
    static DEV_NULL: std::sync::OnceLock<OwnedFd> = std::sync::OnceLock::new();
    if let Some(fd) = DEV_NULL.get() {
        return Ok(fd.as_raw_fd());
    }
    let fd: OwnedFd = File::open("/dev/null")?.into();
    Ok(DEV_NULL.get_or_init(|| fd).as_raw_fd())
}

/// Makes reads and writes on `fd` return `WouldBlock` instead of blocking (a pipe the runner
/// reads or writes only as far as it can at once).
pub fn set_nonblocking(fd: &impl AsRawFd) {
    // SAFETY: fcntl on a descriptor the caller owns, with integer arguments.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    }
}

/// `pipe2(O_CLOEXEC)`: (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The child's stack: an anonymous mapping with an inaccessible guard page at its low end, so an
/// overflow faults instead of writing over the runner's memory. Unmapped on drop.
struct Stack {
    base: *mut libc::c_void,
    len: usize,
}

impl Stack {
    fn new() -> io::Result<Self> {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let len = STACK_SIZE + page;
        // SAFETY: an anonymous private mapping; the result is checked.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Stack { base, len };
        // SAFETY: the first page of the mapping just created.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The initial stack pointer: the high end (the stack grows down), 16-byte aligned.
    fn top(&self) -> *mut libc::c_void {
        // SAFETY: one past the end of the mapping, which is page-aligned and so 16-byte aligned.
        unsafe { self.base.cast::<u8>().add(self.len).cast() }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`; the child that used it has exec'd or exited.
        unsafe {
            libc::munmap(self.base, self.len);
        }
    }
}

thread_local! {
    /// One stack per thread, kept between spawns (mapping and unmapping one per command was
    /// measurable); unmapped when the thread ends.
    static SPARE_STACK: std::cell::Cell<Option<Stack>> = const { std::cell::Cell::new(None) };
}

/// Blocks every signal in the calling thread until dropped, then restores the previous mask.
struct SignalsBlocked(libc::sigset_t);

impl SignalsBlocked {
    fn new() -> Self {
        // SAFETY: sigset_t is plain data; sigfillset/pthread_sigmask only write the given sets.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
            SignalsBlocked(old)
        }
    }
}

impl Drop for SignalsBlocked {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `new`.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut());
        }
    }
}

/// Starts `program` (a path: the caller resolved any `PATH` search) with `argv` (its first element
/// is the program's `argv[0]`), exactly the environment `env`, working directory `cwd`, stdin
/// `/dev/null`, stdout and stderr on new pipes, in a new process group, with `setup` applied. `Err`
/// when any step before the `exec` (or the `exec` itself) failed; the child is reaped then.
pub fn spawn(
    program: &Path,
    argv: &[String],
    env: &[(String, String)],
    cwd: &Path,
    setup: &ChildSetup,
) -> io::Result<Spawned> {
    spawn_with_stdin(program, argv, env, cwd, setup, false).map(|(child, _)| child)
}

/// Like [`spawn`], but the child's stdin is a new pipe whose write end is returned: for a
/// long-lived child the runner talks to (an MCP server speaking JSON-RPC on stdin/stdout). Same
/// process group, limits, Landlock and seccomp set-up as every command.
pub fn spawn_piped(
    program: &Path,
    argv: &[String],
    env: &[(String, String)],
    cwd: &Path,
    setup: &ChildSetup,
) -> io::Result<(Spawned, File)> {
    let (child, stdin) = spawn_with_stdin(program, argv, env, cwd, setup, true)?;
    let stdin = stdin.ok_or_else(|| io::Error::other("no stdin pipe was made"))?;
    Ok((child, stdin))
}

/// [`spawn`] with stdin `/dev/null` (`piped_stdin` false) or a new pipe, whose write end comes back.
fn spawn_with_stdin(
    program: &Path,
    argv: &[String],
    env: &[(String, String)],
    cwd: &Path,
    setup: &ChildSetup,
    piped_stdin: bool,
) -> io::Result<(Spawned, Option<File>)> {
    let (in_r, in_w) = if piped_stdin {
        let (r, w) = pipe()?;
        (Some(r), Some(w))
    } else {
        (None, None)
    };
    let stdin_source = match &in_r {
        Some(r) => r.as_raw_fd(),
        None => dev_null()?,
    };
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let stdio = [stdin_source, out_w.as_raw_fd(), err_w.as_raw_fd()];
    let pid = spawn_fds(program, argv, env, cwd, setup, stdio)?;
    drop((out_w, err_w, in_r));
    Ok((
        Spawned {
            pid,
            stdout: File::from(out_r),
            stderr: File::from(err_r),
        },
        in_w.map(File::from),
    ))
}

/// The child's stdin for [`spawn_fds`]: `/dev/null`, opened once per process.
pub fn null_stdin() -> io::Result<RawFd> {
    dev_null()
}

/// Starts `program` like [`spawn`], but with the given descriptors as its stdin, stdout and
/// stderr (the caller keeps its own copies and closes them): for the supervisor inside a bwrap
/// sandbox, whose commands write into pipes the runner made outside it. Returns the child's pid,
/// which is also its process group id; the caller must reap it.
pub fn spawn_fds(
    program: &Path,
    argv: &[String],
    env: &[(String, String)],
    cwd: &Path,
    setup: &ChildSetup,
    stdio: [RawFd; 3],
) -> io::Result<libc::pid_t> {
    let program = c_string(program.as_os_str().as_bytes(), "program path")?;
    let argv: Vec<CString> = argv
        .iter()
        .map(|a| c_string(a.as_bytes(), "command's arguments"))
        .collect::<io::Result<_>>()?;
    // A name given twice takes its last value, as with std's `Command::env` (a hardened value
    // appended after an inherited one must win; `getenv` would find the first).
    let unique: std::collections::BTreeMap<&str, &str> =
        env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let envp: Vec<CString> = unique
        .iter()
        .map(|(k, v)| c_string(format!("{k}={v}").as_bytes(), "command's environment"))
        .collect::<io::Result<_>>()?;
    let cwd = c_string(OsStr::as_bytes(cwd.as_os_str()), "working directory")?;
    let argv_ptrs = pointers(&argv);
    let envp_ptrs = pointers(&envp);

    let mut limits = [(0 as RlimitResource, 0u64, 0u64); MAX_LIMITS];
    let mut n_limits = 0;
    for l in setup.rlimits.iter().take(MAX_LIMITS) {
        limits[n_limits] = (l.resource.raw(), l.soft, l.hard);
        n_limits += 1;
    }
    let mut args = ChildArgs {
        program: program.as_ptr(),
        argv: argv_ptrs.as_ptr(),
        envp: envp_ptrs.as_ptr(),
        cwd: cwd.as_ptr(),
        stdio: [(0, stdio[0]), (1, stdio[1]), (2, stdio[2])],
        // SAFETY: getpid has no preconditions.
        parent: unsafe { libc::getpid() },
        limits,
        n_limits,
        landlock: setup.landlock.as_ref().map_or(-1, |fd| fd.as_raw_fd()),
        seccomp: setup.seccomp.map_or(std::ptr::null(), |f| f.as_ptr()),
        drop_caps: setup.drop_caps,
        error: 0,
    };

    let stack = match SPARE_STACK.take() {
        Some(stack) => stack,
        None => Stack::new()?,
    };
    let (pid, clone_error) = {
        let _blocked = SignalsBlocked::new();
        // SAFETY: `child_main` only makes async-signal-safe system calls on `args`, whose pointers
        // (and the strings, descriptors and ruleset they name) outlive the call: with CLONE_VFORK
        // this thread is suspended until the child has exec'd or exited. The stack is ours alone
        // for that time.
        let pid = unsafe {
            libc::clone(
                child_main,
                stack.top(),
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                std::ptr::addr_of_mut!(args).cast(),
            )
        };
        // Read at once: restoring the signal mask must not be able to change it.
        (pid, io::Error::last_os_error())
    };
    // The child has exec'd or exited: the stack is free for this thread's next spawn.
    SPARE_STACK.set(Some(stack));
    if pid < 0 {
        return Err(clone_error);
    }
    // SAFETY: the child has exec'd or exited, so it no longer writes `error`.
    let error = unsafe { std::ptr::read_volatile(std::ptr::addr_of!(args.error)) };
    if error != 0 {
        let _ = wait(pid);
        return Err(io::Error::from_raw_os_error(error));
    }
    Ok(pid)
}

/// The child's side: set up, then `execve`. Never returns; on a failure it stores `errno` in
/// `args.error` and exits with 127.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildArgs` the suspended parent passed to clone.
    let args = unsafe { &mut *arg.cast::<ChildArgs>() };
    // SAFETY: only async-signal-safe system calls, on integers, on pointers to locals, and on the
    // C strings and arrays the parent prepared (see `spawn`).
    unsafe {
        let fail = |args: &mut ChildArgs| -> libc::c_int {
            let errno = *libc::__errno_location();
            std::ptr::write_volatile(
                std::ptr::addr_of_mut!(args.error),
                if errno == 0 { libc::EIO } else { errno },
            );
            libc::_exit(127)
        };
        // No runner handler may run here; SIGPIPE back to the default (see the module docs). Raw
        // rt_sigaction, because glibc's wrapper hides the numbers it keeps for itself (32, 33),
        // and a disposition left on those would reach the command too.
        for sig in 1..NSIG {
            let mut current = KernelSigaction::default();
            if libc::syscall(
                libc::SYS_rt_sigaction,
                sig,
                std::ptr::null::<KernelSigaction>(),
                &mut current,
                8usize,
            ) != 0
            {
                continue; // SIGKILL and SIGSTOP cannot be queried or changed
            }
            if current.handler != libc::SIG_DFL {
                let default = KernelSigaction::default();
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    &default,
                    std::ptr::null_mut::<KernelSigaction>(),
                    8usize,
                );
            }
        }
        if libc::setpgid(0, 0) != 0 {
            return fail(args);
        }
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
            return fail(args);
        }
        // The runner may have died before the line above took effect.
        if libc::getppid() != args.parent {
            *libc::__errno_location() = libc::ESRCH;
            return fail(args);
        }
        for &(target, source) in &args.stdio {
            let rc = if source == target {
                // dup2 onto itself would leave close-on-exec set.
                libc::fcntl(source, libc::F_SETFD, 0)
            } else {
                libc::dup2(source, target)
            };
            if rc < 0 {
                return fail(args);
            }
        }
        if libc::chdir(args.cwd) != 0 {
            return fail(args);
        }
        for i in 0..args.n_limits.min(MAX_LIMITS) {
            let (resource, soft, hard) = args.limits[i];
            let lim = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            if libc::setrlimit(resource, &lim) != 0 {
                return fail(args);
            }
        }
        if args.drop_caps && drop_capabilities().is_err() {
            return fail(args);
        }
        if args.landlock >= 0 && restrict_self(args.landlock).is_err() {
            return fail(args);
        }
        // Last: the filter may refuse calls the steps above make.
        if !args.seccomp.is_null() && crate::process::seccomp::install(args.seccomp).is_err() {
            return fail(args);
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        libc::execve(args.program, args.argv, args.envp);
        fail(args)
    }
}

/// `struct __user_cap_header_struct` of `capset(2)`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct` of `capset(2)` (two of them for the 64-bit sets of version 3).
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// `_LINUX_CAPABILITY_VERSION_3`.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Gives up every capability for good, as bwrap's `--cap-drop ALL` does: as root (effective uid
/// 0, which `exec` would otherwise grant the whole bounding set again) every capability leaves the
/// bounding set first; the ambient set is cleared; the effective, permitted and inheritable sets
/// become empty. Async-signal-safe: system calls on locals only. Fails (the command does not run)
/// when a capability root holds cannot be dropped.
pub fn drop_capabilities() -> io::Result<()> {
    // SAFETY: prctl and capset take integers and pointers to locals that outlive the calls.
    unsafe {
        if libc::geteuid() == 0 {
            for cap in 0..64 {
                // 1: in the set; 0: not; -1 (EINVAL): beyond the kernel's last capability.
                if libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0) == 1
                    && libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0
                {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        // Absent before Linux 4.3 (EINVAL): then there is no ambient set to clear.
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        let header = CapHeader {
            version: CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [CapData {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        if libc::syscall(libc::SYS_capset, &header, data.as_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// How long whoever waits for a command it just started polls without sleeping (the runner for
/// its child or its supervised command, a supervisor's shim for its command). In a virtual
/// machine, waking a thread whose virtual CPU went idle costs ~40-90 µs (the host must resume the
/// CPU), more than a short command runs; a waiter that keeps polling is woken by nothing. Past
/// this, waits sleep as usual, so a long command costs at most this much CPU of polling.
/// Measured in docs/performance.md.
pub const SPIN: std::time::Duration = std::time::Duration::from_millis(1);

/// One turn of a [`SPIN`] wait: gives the CPU to whatever else is ready on it — often the command
/// itself, started on the waiter's CPU, which a waiter that only polled would hold off until the
/// scheduler moved one of them.
pub fn spin_pause() {
    // SAFETY: sched_yield has no preconditions.
    unsafe { libc::sched_yield() };
}

/// `pidfd_open(pid)`, or `None` where the kernel lacks it (< 5.3): a descriptor that becomes
/// readable when the process exits, so a wait for it can sleep in `poll` instead of ticking.
pub fn pidfd_open(pid: libc::pid_t) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes integers; on success it returns a new descriptor we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: a descriptor just returned by the kernel, owned by nobody else.
    (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// Waits at most `limit` for our child `pid` to exit, without reaping it; whether it has. Sleeps
/// in `poll` on its pidfd where there is one (woken at the exit), else looks every 2 ms.
pub fn wait_exit(pid: libc::pid_t, limit: std::time::Duration) -> bool {
    use std::os::fd::AsRawFd;
    let until = std::time::Instant::now() + limit;
    let pidfd = pidfd_open(pid);
    loop {
        if has_exited(pid) {
            return true;
        }
        let now = std::time::Instant::now();
        if now >= until {
            return false;
        }
        match &pidfd {
            Some(fd) => {
                let mut pfd = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                let ms = (until - now).as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
                // SAFETY: one live pollfd.
                unsafe { libc::poll(&mut pfd, 1, ms) };
            }
            None => std::thread::sleep((until - now).min(std::time::Duration::from_millis(2))),
        }
    }
}

/// Whether process `pid` (our child) has exited, without reaping it, so its pid — the process
/// group id — stays reserved until we call `wait`.
pub fn has_exited(pid: libc::pid_t) -> bool {
    loop {
        // SAFETY: `info` is a plain C struct that waitid fills in; zeroed is a valid value for it
        // and leaves `si_pid` 0, which is how WNOHANG reports "still running".
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid writes only into `info`, which lives for the duration of the call.
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        if rc == 0 {
            // SAFETY: waitid succeeded, so `info` is initialised; si_pid is valid for SIGCHLD info.
            return unsafe { info.si_pid() } != 0;
        }
        if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return true; // ECHILD: nothing left to wait for
        }
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// Runs `f` on one thread that lives as long as the process, and returns what it returned: for
/// starting a child that must outlive the thread asking for it (the run's sandbox supervisor, an
/// MCP server). Every child gets `PR_SET_PDEATHSIG`, which fires when the *thread* that started
/// it ends, not the process, and a `--jobs` worker thread ends with its step. `Err` only when
/// that thread cannot be started or has gone.
pub fn on_lasting_thread<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> io::Result<T> {
    static STARTER: std::sync::Mutex<Option<std::sync::mpsc::Sender<Job>>> =
        std::sync::Mutex::new(None);
    let (tx, rx) = std::sync::mpsc::channel();
    let job: Job = Box::new(move || {
        let _ = tx.send(f());
    });
    {
        let mut starter = STARTER.lock().unwrap_or_else(|p| p.into_inner());
        if starter.is_none() {
            let (jobs, incoming) = std::sync::mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("acode-starter".into())
                .spawn(move || {
                    for job in incoming {
                        job();
                    }
                })?;
            *starter = Some(jobs);
        }
        if let Some(s) = starter.as_ref() {
            s.send(job)
                .map_err(|_| io::Error::other("the starter thread is gone"))?;
        }
    }
    rx.recv()
        .map_err(|_| io::Error::other("the starter thread did not answer"))
}

/// Reaps child `pid` and returns how it ended (retrying on `EINTR`).
pub fn wait(pid: libc::pid_t) -> io::Result<ExitStatus> {
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: waitpid writes only into `status`.
        if unsafe { libc::waitpid(pid, &mut status, 0) } == pid {
            return Ok(ExitStatus::from_raw(status));
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Applies the ruleset `fd` to the calling process. Called in the child between the clone and `exec`:
/// only two system calls, no allocation.
///
/// # Safety
/// `fd` must be a Landlock ruleset descriptor that stays open for the duration of the call.
pub unsafe fn restrict_self(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: prctl and the landlock syscall take integer arguments only.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn sh(script: &str, env: &[(String, String)], setup: &ChildSetup) -> io::Result<Spawned> {
        spawn(
            Path::new("/bin/sh"),
            &["sh".into(), "-c".into(), script.into()],
            env,
            Path::new("/"),
            setup,
        )
    }

    fn finish(mut child: Spawned) -> (ExitStatus, String, String) {
        let mut out = String::new();
        let mut err = String::new();
        child.stdout.read_to_string(&mut out).unwrap();
        child.stderr.read_to_string(&mut err).unwrap();
        (wait(child.pid).unwrap(), out, err)
    }

    #[test]
    fn runs_with_exactly_the_given_environment_cwd_and_streams() {
        let env = vec![("ONLY".to_string(), "me".to_string())];
        let child = sh(
            "echo \"$ONLY $(pwd)\"; echo err >&2; read x; echo \"stdin:$?\"; exit 7",
            &env,
            &ChildSetup::default(),
        )
        .unwrap();
        let (status, out, err) = finish(child);
        assert_eq!(status.code(), Some(7));
        assert_eq!(out, "me /\nstdin:1\n", "stdin is /dev/null (read hits EOF)");
        assert_eq!(err, "err\n");
    }

    #[test]
    fn many_threads_spawn_at_once_and_each_child_gets_its_own_arguments() {
        // The child shares the spawning thread's memory until exec: concurrent spawns from
        // several threads (each with its own reused stack) must not mix up their arguments,
        // environments or pipes.
        std::thread::scope(|scope| {
            for t in 0..6 {
                scope.spawn(move || {
                    for i in 0..40 {
                        let want = format!("{t}-{i}");
                        let child = spawn(
                            Path::new("/bin/sh"),
                            &[
                                "sh".into(),
                                "-c".into(),
                                "echo \"$1 $V\"".into(),
                                "sh".into(),
                                want.clone(),
                            ],
                            &[("V".into(), want.clone())],
                            Path::new("/"),
                            &ChildSetup {
                                rlimits: vec![Rlimit::capped(Resource::Core, 0, 0)],
                                ..ChildSetup::default()
                            },
                        )
                        .unwrap();
                        let (status, out, err) = finish(child);
                        assert!(status.success(), "{err}");
                        assert_eq!(out, format!("{want} {want}\n"));
                    }
                });
            }
        });
    }

    #[test]
    fn a_name_given_twice_takes_its_last_value() {
        let env = vec![
            ("A".to_string(), "first".to_string()),
            ("B".to_string(), "b".to_string()),
            ("A".to_string(), "last".to_string()),
        ];
        let child = spawn(
            Path::new("/usr/bin/env"),
            &["env".into()],
            &env,
            Path::new("/"),
            &ChildSetup::default(),
        )
        .unwrap();
        let (status, out, _) = finish(child);
        assert!(status.success());
        assert_eq!(out, "A=last\nB=b\n");
    }

    #[test]
    fn the_child_leads_its_own_group_with_default_signals_and_an_empty_mask() {
        let child = sh(
            "cut -d' ' -f1,5 /proc/$$/stat; grep -E '^(SigBlk|SigIgn)' /proc/self/status",
            &[("PATH".into(), "/usr/bin:/bin".into())],
            &ChildSetup::default(),
        )
        .unwrap();
        let pid = child.pid;
        let (status, out, _) = finish(child);
        assert!(status.success(), "{out}");
        let mut lines = out.lines();
        let ids: Vec<i32> = lines
            .next()
            .unwrap()
            .split_whitespace()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(ids, [pid, pid], "pid and process group id");
        // The runner (this test binary) ignores SIGPIPE; the command must not inherit that.
        for line in lines {
            let mask = u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap();
            assert_eq!(
                mask, 0,
                "{line} (grep, not sh, reads its status; both inherit)"
            );
        }
    }

    #[test]
    fn limits_are_applied_and_failures_are_errors_not_children() {
        let setup = ChildSetup {
            rlimits: vec![Rlimit::capped(Resource::OpenFiles, 37, 37)],
            ..ChildSetup::default()
        };
        let (status, out, _) = finish(sh("ulimit -n", &[], &setup).unwrap());
        assert!(status.success());
        assert_eq!(out.trim(), "37");

        let missing = spawn(
            Path::new("/nonexistent/program"),
            &["x".into()],
            &[],
            Path::new("/"),
            &ChildSetup::default(),
        )
        .unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        let bad_cwd = spawn(
            Path::new("/bin/true"),
            &["true".into()],
            &[],
            Path::new("/nonexistent-cwd"),
            &ChildSetup::default(),
        )
        .unwrap_err();
        assert_eq!(bad_cwd.kind(), io::ErrorKind::NotFound);
        // A soft limit above the hard one is refused by the kernel (EINVAL), even for root.
        let inverted = ChildSetup {
            rlimits: vec![Rlimit {
                resource: Resource::OpenFiles,
                soft: 64,
                hard: 32,
            }],
            ..ChildSetup::default()
        };
        let err = sh("true", &[], &inverted).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
        let nul = sh(
            "true",
            &[("A".into(), "b\0c".into())],
            &ChildSetup::default(),
        );
        assert_eq!(nul.unwrap_err().kind(), io::ErrorKind::InvalidInput);
    }
}
