//! Running one child process: its own process group, captured and capped output, a timeout that
//! kills the whole group, cancellation and heartbeats. Modelled on how cargo-nextest runs tests.
//!
//! - The child is started in a new process group (see [`crate::process::spawn`]), so it and everything it
//!   forks (unless they deliberately leave with `setsid`) share one process group that can be
//!   signalled at once.
//! - stdin is `/dev/null`; stdout and stderr are read by the calling thread itself, with `poll`,
//!   into buffers that keep at most `output_cap` bytes each; the rest is counted and dropped, so a
//!   command printing 1 GiB uses constant memory and never blocks on a full pipe. The same `poll`
//!   watches a pidfd of the child, so its exit wakes the runner at once, and times out in short
//!   ticks so the cancel flag, heartbeats and the deadline are looked at. No reader or waiter
//!   threads: starting threads per command was a measurable part of the cost of a short command.
//! - The exit is observed with `waitid(WNOHANG | WNOWAIT)`, which does not reap the child. Because
//!   the leader is not reaped until the end, its pid (which is the group id) cannot be reused, so
//!   signalling the group is never signalling a stranger.
//! - On timeout or cancel: SIGTERM to the group, a grace period (output is still read), then
//!   SIGKILL to the group. After the leader exits on its own, the group still gets SIGKILL so no
//!   background process survives the step. The pipes are then read to their end within a bound,
//!   in case a process that escaped the group still holds one open.
//! - Between the clone and `exec` the child applies [`ChildSetup`]: `PR_SET_PDEATHSIG` (so no
//!   command outlives a killed runner), the resource limits, and the run's Landlock ruleset; see
//!   [`crate::process::spawn`] for how it is started and why only async-signal-safe calls run there.

pub mod foreground;
pub mod helper;
pub mod interrupt;
pub mod seccomp;
pub mod spawn;
pub mod supervisor;

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use std::os::unix::process::ExitStatusExt;

use crate::process::spawn::has_exited;
pub use crate::process::spawn::{ChildSetup, Resource, Rlimit};
use crate::process::supervisor::wire::Request;
use crate::process::supervisor::{Ended, Remote, Supervisor};

/// How often the cancel flag is looked at while a child runs.
const POLL: Duration = Duration::from_millis(20);
/// The first back-off step when no pidfd can announce the child's exit (see `Watch::pause`).
const FIRST_PAUSE: Duration = Duration::from_micros(50);
/// How long the pipes may take to reach end-of-file once the process group is gone.
const DRAIN_BOUND: Duration = Duration::from_secs(2);
/// How long to wait for the leader to die after SIGKILL before reaping it anyway.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// Turns a command's argv into the argv that runs it inside an OS sandbox (bubblewrap's
/// [`crate::sandbox::bwrap::BwrapSpec`]). Running a process needs only this, so this module does not
/// depend on the sandbox that builds the wrapper (imports point one way: bwrap → process).
pub trait ArgvWrapper: std::fmt::Debug + Send + Sync {
    /// The argv that runs `argv` in `cwd` inside the sandbox.
    fn wrap(&self, cwd: &Path, argv: &[String]) -> Vec<String>;
}

/// Everything needed to run one child; build it with [`CommandSpec::new`] and adjust fields.
#[derive(Debug, Clone)]
pub struct CommandSpec {
    /// Program and arguments; the program is looked up on the `PATH` in `env`.
    pub argv: Vec<String>,
    /// Working directory (inside the workspace; the caller resolved it).
    pub cwd: PathBuf,
    /// The complete environment of the child (it starts from an empty one).
    pub env: Vec<(String, String)>,
    /// Wall-clock limit; the group is killed when it passes.
    pub timeout: Duration,
    /// Bytes kept of each of stdout and stderr.
    pub output_cap: usize,
    /// Run inside bubblewrap when set (a [`crate::sandbox::bwrap::BwrapSpec`]).
    pub wrap: Option<Arc<dyn ArgvWrapper>>,
    /// Time between SIGTERM and SIGKILL (2 s by default; tests shorten it).
    pub kill_grace: Duration,
    /// Time between heartbeat calls (10 s by default).
    pub heartbeat_every: Duration,
    /// What the child applies to itself before `exec` (limits, Landlock, seccomp).
    pub setup: ChildSetup,
    /// The child's credentials at the run's proxy, when the policy allows hosts: its requests are
    /// collected under them ([`crate::sandbox::OsSandbox::collect_network`]).
    pub network_token: Option<String>,
    /// The program resolved when the command was checked ([`crate::policy::host::program`]): executed by this
    /// path in every mode (`argv[0]` stays as written outside bwrap). `None`: looked up on `PATH`.
    pub program: Option<PathBuf>,
    /// Host directories a bwrap sandbox must show for the program to run (its installation).
    pub program_roots: Vec<PathBuf>,
    /// Whether `argv[0]` as written finds `program` by itself (a `PATH` match, a workspace
    /// path): inside bwrap, which cannot set `argv[0]`, the name then stays; else the path runs.
    pub program_by_name: bool,
    /// The run's bwrap sandbox to start the command in ([`crate::process::supervisor`]), instead of a
    /// bwrap of its own (`wrap`, still used by [`start`] and when this is `None`).
    pub supervisor: Option<Arc<Supervisor>>,
    /// The command's own temporary directory (its `TMPDIR` under Landlock), removed with
    /// everything in it when the last clone of this spec is dropped, after the command.
    pub private_temp: Option<Arc<PrivateTemp>>,
}

/// A directory of one command's own, emptied when dropped: under Landlock the command's
/// `TMPDIR`, the only temporary directory its ruleset lets it use, so that commands of a run
/// running side by side cannot read each other's temporary files (bwrap gives each its own in the
/// sandbox's tmpfs). An emptied directory goes back to its pool for a later command — the same
/// inode, so that command's ruleset is one already built — or, without a pool or when it cannot be
/// emptied, is removed.
#[derive(Debug)]
pub struct PrivateTemp {
    path: PathBuf,
    pool: Option<Arc<std::sync::Mutex<Vec<PathBuf>>>>,
}

impl PrivateTemp {
    /// Creates a new directory (mode 0700) in `parent`.
    pub fn new(parent: &std::path::Path) -> std::io::Result<PrivateTemp> {
        use std::os::unix::fs::DirBuilderExt;
        let path = parent.join(format!("cmd-{}", uuid::Uuid::new_v4().simple()));
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(PrivateTemp { path, pool: None })
    }

    /// An empty directory from `pool` (one a finished command left, emptied), else a new one in
    /// `parent`; it returns to `pool` when dropped.
    pub fn from_pool(
        parent: &std::path::Path,
        pool: &Arc<std::sync::Mutex<Vec<PathBuf>>>,
    ) -> std::io::Result<PrivateTemp> {
        let reused = pool.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let mut temp = match reused {
            Some(path) if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) => {
                PrivateTemp { path, pool: None }
            }
            _ => PrivateTemp::new(parent)?,
        };
        temp.pool = Some(pool.clone());
        Ok(temp)
    }

    /// Where it is.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

/// Removes everything in `dir` (never following a link) and makes it private again.
fn empty_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(entry.path())?;
        } else {
            std::fs::remove_file(entry.path())?;
        }
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

impl Drop for PrivateTemp {
    fn drop(&mut self) {
        if let Some(pool) = &self.pool
            && empty_dir(&self.path).is_ok()
        {
            pool.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(self.path.clone());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

impl CommandSpec {
    /// A spec with the defaults: empty environment, 300 s timeout, 10 MiB cap, no bwrap, 2 s grace,
    /// heartbeats every 10 s.
    pub fn new(argv: Vec<String>, cwd: PathBuf) -> Self {
        CommandSpec {
            argv,
            cwd,
            env: Vec::new(),
            timeout: Duration::from_secs(300),
            output_cap: 10 * 1024 * 1024,
            wrap: None,
            kill_grace: Duration::from_secs(2),
            heartbeat_every: Duration::from_secs(10),
            setup: ChildSetup::default(),
            network_token: None,
            program: None,
            program_roots: Vec::new(),
            program_by_name: true,
            supervisor: None,
            private_temp: None,
        }
    }
}

/// One output stream as captured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Captured {
    /// The kept bytes as lossy UTF-8 (an incomplete character cut by the cap is dropped).
    pub text: String,
    /// How many bytes the stream produced in total.
    pub total_bytes: u64,
    /// Whether bytes were dropped because of the cap.
    pub truncated: bool,
    /// Whether the output was not valid UTF-8, so `text` replaced bytes with U+FFFD.
    pub lossy: bool,
}

/// How a child ended and what it printed.
#[derive(Debug, Clone)]
pub struct CommandOutput {
    /// The exit code, when the process exited normally.
    pub exit_code: Option<i32>,
    /// The signal that ended the process, if one did.
    pub signal: Option<i32>,
    /// Captured standard output.
    pub stdout: Captured,
    /// Captured standard error.
    pub stderr: Captured,
    /// The timeout passed and the group was killed.
    pub timed_out: bool,
    /// The cancel flag was set and the group was killed.
    pub interrupted: bool,
    /// Wall-clock time from spawn to reaping.
    pub duration: Duration,
}

impl CommandOutput {
    /// Whether the command exited with code 0 (and was not killed).
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out && !self.interrupted
    }
}

/// One output pipe of the child and what was read from it.
struct Capture {
    /// The read end, until it reaches end-of-file.
    pipe: Option<File>,
    kept: Vec<u8>,
    total: u64,
    cap: usize,
}

impl Capture {
    fn new(pipe: File, cap: usize) -> Self {
        Capture {
            pipe: Some(pipe),
            kept: Vec::new(),
            total: 0,
            cap,
        }
    }

    /// One `read` (the caller saw the pipe ready, so it does not block): keeps what fits under the
    /// cap and counts the rest; end-of-file or an error closes the pipe.
    fn read_once(&mut self, chunk: &mut [u8]) {
        let Some(pipe) = self.pipe.as_mut() else {
            return;
        };
        match pipe.read(chunk) {
            Ok(0) => self.pipe = None,
            Ok(n) => {
                let room = self.cap.saturating_sub(self.kept.len());
                let keep = room.min(n);
                // Grow by doubling but never past the cap, so a capped stream holds at most `cap`
                // bytes (plain doubling could reserve almost twice that).
                let need = self.kept.len() + keep;
                if need > self.kept.capacity() {
                    let target = (self.kept.capacity() * 2).max(need).min(self.cap);
                    let len = self.kept.len();
                    self.kept.reserve_exact(target - len);
                }
                self.kept.extend_from_slice(&chunk[..keep]);
                self.total += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => self.pipe = None,
        }
    }
}

/// A started child: the runner's own (bwrap's, or the command's in the other modes), or one the
/// run's sandbox supervisor started for it.
enum Child {
    Local {
        pid: libc::pid_t,
        /// Readable once the child has exited; `None` on kernels without `pidfd_open` (< 5.3),
        /// where an exit is noticed at the next tick instead.
        pidfd: Option<OwnedFd>,
    },
    Remote(Remote),
}

impl Child {
    /// Whether the child has ended (a local one is not reaped, so its group id stays reserved).
    fn exited(&mut self) -> bool {
        match self {
            Child::Local { pid, .. } => has_exited(*pid),
            Child::Remote(r) => r.ended().is_some(),
        }
    }

    /// A descriptor that becomes readable when the child ends.
    fn wake_fd(&self) -> libc::c_int {
        match self {
            Child::Local { pidfd, .. } => pidfd.as_ref().map_or(-1, |p| p.as_raw_fd()),
            Child::Remote(r) => r.fd(),
        }
    }

    fn term(&mut self) {
        match self {
            Child::Local { pid, .. } => signal_group(*pid, libc::SIGTERM),
            Child::Remote(r) => r.term(),
        }
    }

    /// Kills what is left of the child's process group (a supervisor's shim: everything the
    /// command started).
    fn kill(&mut self) {
        match self {
            Child::Local { pid, .. } => signal_group(*pid, libc::SIGKILL),
            Child::Remote(r) => r.kill(),
        }
    }

    /// How the child ended, once it has. A supervisor's command that could not start is the same
    /// error a local one gives.
    fn reap(&mut self) -> std::io::Result<std::process::ExitStatus> {
        match self {
            Child::Local { pid, .. } => spawn::wait(*pid),
            Child::Remote(r) => match r.wait() {
                Ended::Exited(raw) => Ok(std::process::ExitStatus::from_raw(raw)),
                Ended::Failed(errno) => Err(std::io::Error::from_raw_os_error(errno)),
                Ended::Lost => Err(std::io::Error::other(
                    "the run's sandbox ended before the command did",
                )),
            },
        }
    }
}

/// The child's two output pipes, read from the calling thread.
struct Watch {
    out: [Capture; 2],
    chunk: Vec<u8>,
    /// Without a pidfd nothing wakes a wait when the child exits: waits are then cut to this
    /// back-off, from 50 µs doubling to [`POLL`], so an exit happening now is seen quickly.
    pause: Duration,
}

impl Watch {
    fn pipes_open(&self) -> bool {
        self.out.iter().any(|c| c.pipe.is_some())
    }

    /// Waits at most `wait` for output (read at once) or the exit of the child whose wake-up
    /// descriptor is `exit_fd` (negative: none, see `pause`).
    fn pump(&mut self, mut wait: Duration, exit_fd: libc::c_int) {
        if exit_fd < 0 {
            wait = wait.min(self.pause);
            self.pause = (self.pause * 2).min(POLL);
        }
        let mut fds = [libc::pollfd {
            fd: -1,
            events: libc::POLLIN,
            revents: 0,
        }; 3];
        for (slot, c) in fds.iter_mut().zip(&self.out) {
            slot.fd = c.pipe.as_ref().map_or(-1, |p| p.as_raw_fd());
        }
        fds[2].fd = exit_fd;
        if fds.iter().all(|f| f.fd < 0) {
            std::thread::sleep(wait);
            return;
        }
        let ms = wait.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
        // SAFETY: `fds` is a live array of three pollfd; negative fds are ignored by poll.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 3, ms) };
        if ms == 0 {
            spawn::spin_pause();
        }
        if n <= 0 {
            return; // timeout, or EINTR: the caller looks at the clock and loops
        }
        for (slot, c) in fds.iter().zip(self.out.iter_mut()) {
            if slot.fd >= 0 && slot.revents != 0 {
                c.read_once(&mut self.chunk);
            }
        }
    }

    /// Pumps until `child` has exited or `limit` passes; whether it exited.
    fn until_exit(&mut self, child: &mut Child, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        self.pause = FIRST_PAUSE;
        loop {
            if child.exited() {
                return true;
            }
            let now = Instant::now();
            if now >= until {
                return false;
            }
            self.pump((until - now).min(POLL), child.wake_fd());
        }
    }

    /// Reads the pipes until both reach end-of-file or `limit` passes (a process outside the group
    /// may hold one open); what was read so far is kept either way.
    fn drain(&mut self, limit: Duration) {
        let until = Instant::now() + limit;
        while self.pipes_open() {
            let now = Instant::now();
            if now >= until {
                break;
            }
            self.pump(until - now, -1); // the child is reaped: only the pipes matter now
        }
    }
}

#[cfg(test)]
thread_local! {
    /// Test-only switch: behave as on a kernel without `pidfd_open`, on this thread.
    static NO_PIDFD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// [`spawn::pidfd_open`], which tests can turn off on their thread.
fn pidfd_open(pid: libc::pid_t) -> Option<OwnedFd> {
    #[cfg(test)]
    if NO_PIDFD.with(|f| f.get()) {
        return None;
    }
    spawn::pidfd_open(pid)
}

/// Drops an incomplete UTF-8 sequence at the end of `bytes` (one the cap cut in half).
fn trim_partial_char(bytes: &[u8]) -> &[u8] {
    let len = bytes.len();
    for back in 1..=len.min(4) {
        let b = bytes[len - back];
        if b & 0xC0 == 0x80 {
            continue; // continuation byte: keep looking for the lead byte
        }
        let need = match b {
            0x00..=0x7F => 1,
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1, // invalid lead byte: lossy conversion deals with it
        };
        return if back < need {
            &bytes[..len - back]
        } else {
            bytes
        };
    }
    bytes
}

fn finish(capture: Capture) -> Captured {
    let (mut kept, total) = (capture.kept, capture.total);
    let truncated = total > kept.len() as u64;
    if truncated {
        let len = trim_partial_char(&kept).len();
        kept.truncate(len);
    }
    // Valid UTF-8 (the common case) becomes the String without copying the buffer.
    let (text, lossy) = match String::from_utf8(kept) {
        Ok(text) => (text, false),
        Err(e) => (String::from_utf8_lossy(e.as_bytes()).into_owned(), true),
    };
    Captured {
        text,
        total_bytes: total,
        truncated,
        lossy,
    }
}

/// Sends `sig` to every process in group `pgid`; a group that no longer exists is not an error.
fn signal_group(pgid: libc::pid_t, sig: libc::c_int) {
    // SAFETY: kill(2) has no memory-safety preconditions; a negative pid addresses a process group.
    // `pgid` is the pid of our own unreaped child, so the group cannot belong to anyone else.
    unsafe {
        libc::kill(-pgid, sig);
    }
}

/// Protects the runner's own secrets (SPEC §6 "The runner's own secrets"); call first thing in
/// `main`, while the process is still single-threaded.
///
/// - `PR_SET_DUMPABLE 0`: another process of the same (non-root) user can no longer read
///   `/proc/<runner>/environ`, `/proc/<runner>/mem` or ptrace the runner. Commands are not
///   affected: `execve` makes them dumpable again.
/// - The environment block the kernel placed on the stack (what `/proc/<runner>/environ` shows,
///   to root even when the runner is non-dumpable, and inside Landlock, whose ptrace scoping covers
///   `mem` but was measured not to cover `environ`) is wiped after every variable has been copied
///   to the heap, where only `/proc/<runner>/mem` (ptrace-attach rights) could reach it.
pub fn harden_runner() {
    // SAFETY: prctl(PR_SET_DUMPABLE) takes integers only and affects only this process.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
    let vars: Vec<(std::ffi::OsString, std::ffi::OsString)> = std::env::vars_os().collect();
    for (k, v) in &vars {
        use std::os::unix::ffi::OsStrExt;
        // set_var panics on these; such an entry stays in the block, which is then left alone.
        if k.is_empty() || k.as_bytes().contains(&b'=') || v.as_bytes().contains(&0) {
            continue;
        }
        // SAFETY: called at the start of main, before any thread exists (see the doc comment).
        unsafe { std::env::set_var(k, v) };
    }
    let Some((start, end)) = env_block() else {
        return;
    };
    unsafe extern "C" {
        static environ: *const *const libc::c_char;
    }
    // SAFETY: `environ` is libc's NULL-terminated array of C strings; single-threaded here.
    let still_referenced = unsafe {
        let mut p = environ;
        let mut found = false;
        while !p.is_null() && !(*p).is_null() {
            let addr = *p as usize;
            found |= addr >= start && addr < end;
            p = p.add(1);
        }
        found
    };
    if still_referenced || end <= start || end - start > 1 << 24 {
        return; // something still points into the block: leave it rather than corrupt it
    }
    // SAFETY: [start, end) is this process's own environment block on its stack (from
    // /proc/self/stat), mapped writable, and no `environ` entry refers to it any more.
    unsafe { std::ptr::write_bytes(start as *mut u8, 0, end - start) };
}

/// `env_start` and `env_end` of this process, from `/proc/self/stat` (fields 50 and 51).
fn env_block() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may contain spaces: field 3 on.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let start = fields.get(50 - 3)?.parse().ok()?;
    let end = fields.get(51 - 3)?.parse().ok()?;
    Some((start, end))
}

/// The program to execute and its argv for `spec`: wrapped in bwrap when the spec says so, the
/// resolved program standing in for `argv[0]` where a `PATH` search would not find it.
fn command_line(spec: &CommandSpec) -> std::io::Result<(PathBuf, Vec<String>)> {
    let inner = unwrapped_argv(spec)?;
    let argv = match &spec.wrap {
        Some(w) => w.wrap(&spec.cwd, &inner),
        None => inner,
    };
    let program = match (&spec.wrap, &spec.program) {
        (None, Some(p)) => p.clone(),
        // Never the working directory for a bare name (see [`lookup`]).
        _ => lookup(&argv[0], &spec.env).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{}: not found on the command's PATH", argv[0]),
            )
        })?,
    };
    Ok((program, argv))
}

/// The command's own argv: as written, except that the resolved program's path stands in for
/// `argv[0]` when a `PATH` search for the name would not find that program — an interpreter that
/// looked its name up (a pyenv shim's) would find the shim, not itself, and bwrap cannot set
/// `argv[0]`. An empty argv is `InvalidInput`.
fn unwrapped_argv(spec: &CommandSpec) -> std::io::Result<Vec<String>> {
    if spec.argv.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "empty command",
        ));
    }
    let mut inner = spec.argv.clone();
    if let (Some(p), false) = (&spec.program, spec.program_by_name) {
        inner[0] = p.to_string_lossy().into_owned();
    }
    Ok(inner)
}

/// Hands `spec` to the run's sandbox supervisor: the same program, arguments, environment,
/// limits, Landlock ruleset and seccomp filter a per-command bwrap would have applied. The
/// program is the one resolved at the check, or else `argv[0]` looked up inside the sandbox (as
/// bwrap's own `execvp` does). Returns the child and the read ends of its output pipes.
fn launch_in(sup: &Supervisor, spec: &CommandSpec) -> std::io::Result<(Child, File, File)> {
    let argv = unwrapped_argv(spec)?;
    let landlock =
        spec.setup.landlock.as_ref().ok_or_else(|| {
            std::io::Error::other("a supervised command needs a Landlock ruleset")
        })?;
    let path = |p: &Path| p.to_string_lossy().into_owned();
    let req = Request {
        program: spec.program.as_deref().map(path).unwrap_or_default(),
        argv,
        env: spec.env.clone(),
        cwd: path(&spec.cwd),
        rlimits: spec
            .setup
            .rlimits
            .iter()
            .map(|l| (l.resource.index(), l.soft, l.hard))
            .collect(),
        seccomp: spec.setup.seccomp.map(|f| f.kind()),
    };
    let (out_r, out_w) = spawn::pipe()?;
    let (err_r, err_w) = spawn::pipe()?;
    let remote = sup.launch(&req, out_w, err_w, landlock.as_raw_fd())?;
    Ok((Child::Remote(remote), File::from(out_r), File::from(err_r)))
}

/// How long a [`Service`] whose stdin was closed gets to exit on its own before SIGTERM.
const EOF_GRACE: Duration = Duration::from_millis(500);

/// A long-lived child the runner talks to over its stdin and stdout (an MCP server): started
/// like every command ([`CommandSpec`], same sandbox, limits and process group), but not run to
/// completion. The caller takes the pipes and reads them on its own threads; [`Service::stop`]
/// (or dropping it) ends the whole process group: SIGTERM, `kill_grace`, SIGKILL, then reaps.
#[derive(Debug)]
pub struct Service {
    pid: libc::pid_t,
    kill_grace: Duration,
    reaped: bool,
    /// Write end of the child's stdin (taken by the caller).
    pub stdin: Option<File>,
    /// Read end of the child's stdout (taken by the caller).
    pub stdout: Option<File>,
    /// Read end of the child's stderr (taken by the caller).
    pub stderr: Option<File>,
}

/// Starts `spec` as a [`Service`]. `spec.timeout` bounds nothing here (the caller times its
/// requests) except through the CPU limit the sandbox derived from it.
pub fn start(spec: &CommandSpec) -> std::io::Result<Service> {
    let (program, argv) = command_line(spec)?;
    let (child, stdin) = spawn::spawn_piped(&program, &argv, &spec.env, &spec.cwd, &spec.setup)?;
    Ok(Service {
        pid: child.pid,
        kill_grace: spec.kill_grace,
        reaped: false,
        stdin: Some(stdin),
        stdout: Some(child.stdout),
        stderr: Some(child.stderr),
    })
}

impl Service {
    /// The child's pid, which is also its process group id.
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Whether the child has exited (it is not reaped, so its group id stays reserved).
    pub fn has_exited(&self) -> bool {
        self.reaped || has_exited(self.pid)
    }

    /// Ends the process group and reaps the leader: what is left of stdin is closed first, which a
    /// well-behaved server takes as the signal to exit, and it gets [`EOF_GRACE`] (at most
    /// `kill_grace`) to do so; then SIGTERM, `kill_grace`, SIGKILL.
    /// Calling it again does nothing.
    pub fn stop(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        if self.reaped {
            return Ok(None);
        }
        self.stdin = None;
        // As the MCP stdio transport asks: stdin closed, a moment to exit on its own, then
        // SIGTERM, the grace period, SIGKILL.
        if !spawn::wait_exit(self.pid, self.kill_grace.min(EOF_GRACE)) {
            signal_group(self.pid, libc::SIGTERM);
            spawn::wait_exit(self.pid, self.kill_grace);
        }
        // Whatever is left of the group goes now; the leader is not reaped yet, so the group id
        // still belongs to it.
        signal_group(self.pid, libc::SIGKILL);
        spawn::wait_exit(self.pid, KILL_WAIT);
        let status = spawn::wait(self.pid)?;
        self.reaped = true;
        Ok(Some(status))
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Runs `spec` to completion (see the module docs). `Err` only when the child could not be started
/// (program not found, bad cwd) or reaped; a non-zero exit, a timeout or a cancel is an `Ok` whose
/// fields say so.
pub fn run(
    spec: &CommandSpec,
    cancel: &AtomicBool,
    heartbeat: &dyn Fn(Duration),
) -> std::io::Result<CommandOutput> {
    let start = Instant::now();
    let (mut child, stdout, stderr) = match &spec.supervisor {
        // A supervisor that went away: the command starts from the runner, as without one (under
        // bwrap, in a bwrap of its own), confined by the same `setup`.
        Some(sup) if sup.alive() => launch_in(sup, spec)?,
        _ => {
            let (program, argv) = command_line(spec)?;
            let c = spawn::spawn(&program, &argv, &spec.env, &spec.cwd, &spec.setup)?;
            let local = Child::Local {
                pid: c.pid,
                pidfd: pidfd_open(c.pid),
            };
            (local, c.stdout, c.stderr)
        }
    };

    let mut watch = Watch {
        out: [
            Capture::new(stdout, spec.output_cap),
            Capture::new(stderr, spec.output_cap),
        ],
        chunk: vec![0u8; 64 * 1024],
        pause: FIRST_PAUSE,
    };

    // Main loop: output is read as it comes; the child's exit (pidfd) or a tick wakes the loop.
    let mut timed_out = false;
    let mut interrupted = false;
    let mut exited = false;
    let deadline = start + spec.timeout;
    let beat = spec.heartbeat_every.max(Duration::from_millis(1));
    let mut next_beat = start + beat;
    let spin_until = start + spawn::SPIN;
    loop {
        if child.exited() {
            exited = true;
            break;
        }
        let now = Instant::now();
        if cancel.load(Ordering::SeqCst) {
            interrupted = true;
            break;
        }
        if now >= deadline {
            timed_out = true;
            break;
        }
        if now >= next_beat {
            heartbeat(now - start);
            next_beat += beat;
            continue;
        }
        let wait = if now < spin_until {
            Duration::ZERO
        } else {
            POLL.min(deadline - now).min(next_beat - now)
        };
        watch.pump(wait, child.wake_fd());
    }
    if !exited {
        child.term();
        exited = watch.until_exit(&mut child, spec.kill_grace);
    }
    // Whatever is left of the group (grandchildren, or a leader that ignored SIGTERM) goes now.
    // The leader is not reaped yet, so the group id still belongs to it.
    if !exited || matches!(child, Child::Local { .. }) {
        child.kill();
    }
    if !exited {
        watch.until_exit(&mut child, KILL_WAIT);
    }
    let status = child.reap()?;
    let duration = start.elapsed();
    watch.drain(DRAIN_BOUND);
    let [stdout, stderr] = watch.out.map(finish);

    Ok(CommandOutput {
        exit_code: status.code(),
        signal: status.signal(),
        stdout,
        stderr,
        timed_out,
        interrupted,
        duration,
    })
}

/// `name` as the command's own `execvp` would find it in the environment `env`: unchanged when it
/// has a `/` (relative to the working directory, as for a shell), else on the `PATH` the command
/// sees — the last `PATH` in `env`, as [`spawn`](crate::process::spawn) passes a name given twice with its
/// last value. `None` for a bare name not on that `PATH`: it is never looked up in the working
/// directory.
pub fn lookup(name: &str, env: &[(String, String)]) -> Option<PathBuf> {
    if name.contains('/') {
        return Some(name.into());
    }
    let path = env.iter().rev().find(|(k, _)| k == "PATH");
    on_path(name, path.map(|(_, v)| v.as_str()))
}

/// `name` in the absolute entries of `path_var` (an executable regular file), never in the working
/// directory.
pub fn on_path(name: &str, path_var: Option<&str>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path_var.unwrap_or_default())
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("acode-{tag}-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn spec(argv: &[&str], cwd: &Path) -> CommandSpec {
        let mut s = CommandSpec::new(argv.iter().map(|s| s.to_string()).collect(), cwd.into());
        s.env = vec![("PATH".into(), std::env::var("PATH").unwrap_or_default())];
        s.kill_grace = Duration::from_millis(300);
        s
    }

    fn run_ok(s: &CommandSpec) -> CommandOutput {
        run(s, &AtomicBool::new(false), &|_| {}).unwrap()
    }

    fn alive(pid: i32) -> bool {
        // SAFETY: signal 0 only checks for existence.
        unsafe { libc::kill(pid, 0) == 0 }
    }

    /// The pid a test child wrote to `file`.
    fn pid_in(file: &Path) -> i32 {
        std::fs::read_to_string(file)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// Stopping a service closes its stdin and lets it finish what it was reading before any
    /// signal (the MCP stdio transport's shutdown): the last lines a client wrote reach a server
    /// that copies its stdin to a file and exits at EOF. With SIGTERM sent at once, `cat` was
    /// usually killed before reading them (found by the `mcp_client` fuzz target).
    #[test]
    fn a_stopped_service_reads_what_was_written_to_it_before_any_signal() {
        use std::io::Write;
        let dir = temp_dir("service-eof");
        for round in 0..20 {
            let out = dir.join(format!("out-{round}"));
            let mut s = spec(
                &["sh", "-c", "exec cat > \"$0\"", out.to_str().unwrap()],
                &dir,
            );
            s.kill_grace = Duration::from_secs(2);
            let mut service = start(&s).unwrap();
            let line = format!("line {round}\n");
            service
                .stdin
                .as_mut()
                .unwrap()
                .write_all(line.as_bytes())
                .unwrap();
            let status = service.stop().unwrap().unwrap();
            assert!(status.success(), "round {round}: {status:?}");
            assert_eq!(
                std::fs::read_to_string(&out).unwrap(),
                line,
                "round {round}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A service that does not exit when its stdin closes gets SIGTERM after the EOF grace — a
    /// chance to end cleanly — and only then SIGKILL; after `stop` nothing of it is left.
    #[test]
    fn a_service_that_ignores_eof_gets_sigterm_before_sigkill() {
        let dir = temp_dir("service-term");
        let mark = dir.join("term");
        let mut s = spec(
            &[
                "sh",
                "-c",
                "trap 'echo term > \"$0\"; exit 0' TERM; while :; do sleep 0.05; done",
                mark.to_str().unwrap(),
            ],
            &dir,
        );
        s.kill_grace = Duration::from_secs(2);
        let mut service = start(&s).unwrap();
        let pid = service.pid();
        let status = service.stop().unwrap().unwrap();
        assert!(!alive(pid), "the service is still running after stop");
        assert_eq!(
            std::fs::read_to_string(&mark).unwrap_or_default(),
            "term\n",
            "no SIGTERM before SIGKILL ({status:?})"
        );
        assert!(status.success(), "{status:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Whether `pid` disappears within two seconds.
    fn gone_soon(pid: i32) -> bool {
        (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(20));
            !alive(pid)
        })
    }

    #[test]
    fn captures_exit_code_and_both_streams() {
        let dir = temp_dir("proc");
        let out = run_ok(&spec(
            &[
                "python3",
                "-c",
                "import sys\nprint('out')\nsys.stderr.write('err')\nsys.exit(3)",
            ],
            &dir,
        ));
        assert_eq!(out.exit_code, Some(3));
        assert_eq!(out.signal, None);
        assert_eq!(out.stdout.text, "out\n");
        assert_eq!(out.stderr.text, "err");
        assert!(!out.timed_out && !out.interrupted && !out.success());
        let out = run_ok(&spec(&["true"], &dir));
        assert!(out.success());
        assert_eq!(out.stdout, Captured::default());
    }

    #[test]
    fn runs_in_cwd_with_exactly_the_given_env() {
        let dir = temp_dir("proc");
        let mut s = spec(&["pwd"], &dir);
        let out = run_ok(&s);
        let canon = dir.canonicalize().unwrap();
        assert_eq!(
            out.stdout.text.trim_end(),
            canon.to_str().unwrap(),
            "{out:?}"
        );
        s.argv = vec!["env".into()];
        s.env.push(("ONLY_ME".into(), "1".into()));
        let out = run_ok(&s);
        let mut names: Vec<&str> = out
            .stdout
            .text
            .lines()
            .filter_map(|l| l.split('=').next())
            .collect();
        names.sort();
        assert_eq!(names, ["ONLY_ME", "PATH"], "{out:?}");
    }

    #[test]
    fn missing_program_is_a_spawn_error() {
        let dir = temp_dir("proc");
        let err = run(
            &spec(&["acode-no-such-program"], &dir),
            &AtomicBool::new(false),
            &|_| {},
        )
        .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
        assert!(run(&spec(&[], &dir), &AtomicBool::new(false), &|_| {}).is_err());
    }

    #[test]
    fn without_a_pidfd_exits_timeouts_and_output_are_still_seen() {
        // As on a kernel older than 5.3: nothing announces the exit, the back-off finds it.
        NO_PIDFD.with(|f| f.set(true));
        let dir = temp_dir("proc");
        let started = Instant::now();
        let out = run_ok(&spec(&["sh", "-c", "echo out; echo err >&2; exit 4"], &dir));
        assert_eq!(out.exit_code, Some(4));
        assert_eq!(
            (out.stdout.text.as_str(), out.stderr.text.as_str()),
            ("out\n", "err\n")
        );
        // Pipes closed early, exit later: only the back-off can notice it.
        let out = run_ok(&spec(
            &["sh", "-c", "exec >&- 2>&-; sleep 0.3; exit 5"],
            &dir,
        ));
        assert_eq!(out.exit_code, Some(5));
        let mut s = spec(&["sleep", "600"], &dir);
        s.timeout = Duration::from_millis(300);
        let out = run_ok(&s);
        assert!(out.timed_out, "{out:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
        NO_PIDFD.with(|f| f.set(false));
    }

    #[test]
    fn a_bare_name_is_never_taken_from_the_working_directory() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("proc");
        let prog = dir.join("acode-cwd-prog");
        std::fs::write(&prog, "#!/bin/sh\necho ran\n").unwrap();
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = run(
            &spec(&["acode-cwd-prog"], &dir),
            &AtomicBool::new(false),
            &|_| {},
        )
        .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound, "{err}");
        // With a slash it is a path, relative to the working directory, as in a shell.
        let out = run_ok(&spec(&["./acode-cwd-prog"], &dir));
        assert_eq!(out.stdout.text, "ran\n");
    }

    #[test]
    fn timeout_kills_the_whole_group_including_grandchildren() {
        let dir = temp_dir("proc");
        let pidfile = dir.join("grandchild.pid");
        // The child starts a grandchild that ignores SIGTERM, records its pid, and both sleep.
        let code = format!(
            "import subprocess, time\n\
             p = subprocess.Popen(['python3', '-c', 'import signal, time\\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\\ntime.sleep(600)'])\n\
             open({:?}, 'w').write(str(p.pid))\n\
             print('started', flush=True)\n\
             time.sleep(600)",
            pidfile.to_str().unwrap()
        );
        let mut s = spec(&["python3", "-c", &code], &dir);
        s.timeout = Duration::from_secs(3);
        let started = Instant::now();
        let out = run_ok(&s);
        assert!(out.timed_out, "{out:?}");
        assert_eq!(out.exit_code, None);
        assert!(out.signal.is_some());
        assert_eq!(out.stdout.text, "started\n", "partial output is kept");
        assert!(started.elapsed() < Duration::from_secs(10));
        // The grandchild is our grandchild's child; once killed it is reaped by init quickly.
        let pid = pid_in(&pidfile);
        assert!(gone_soon(pid), "grandchild {pid} survived the timeout");
    }

    #[test]
    fn cancel_interrupts_and_heartbeats_are_sent() {
        let dir = temp_dir("proc");
        let mut s = spec(&["python3", "-c", "import time\ntime.sleep(600)"], &dir);
        s.heartbeat_every = Duration::from_millis(50);
        let cancel = AtomicBool::new(false);
        let beats = std::sync::atomic::AtomicUsize::new(0);
        let out = std::thread::scope(|scope| {
            scope.spawn(|| {
                std::thread::sleep(Duration::from_millis(400));
                cancel.store(true, Ordering::SeqCst);
            });
            run(&s, &cancel, &|_| {
                beats.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap()
        });
        assert!(out.interrupted && !out.timed_out, "{out:?}");
        assert!(beats.load(Ordering::SeqCst) >= 3);
        assert!(out.duration < Duration::from_secs(5));
    }

    #[test]
    fn background_processes_do_not_outlive_the_command() {
        let dir = temp_dir("proc");
        let pidfile = dir.join("bg.pid");
        let code = format!(
            "import subprocess\n\
             p = subprocess.Popen(['python3', '-c', 'import time\\ntime.sleep(600)'])\n\
             open({:?}, 'w').write(str(p.pid))",
            pidfile.to_str().unwrap()
        );
        let started = Instant::now();
        let out = run_ok(&spec(&["python3", "-c", &code], &dir));
        assert_eq!(out.exit_code, Some(0), "{out:?}");
        assert!(started.elapsed() < Duration::from_secs(10));
        let pid = pid_in(&pidfile);
        assert!(gone_soon(pid), "background process {pid} survived");
    }

    #[test]
    fn one_gib_of_output_is_capped_and_counted() {
        let dir = temp_dir("proc");
        let mut s = spec(&["head", "-c", "1073741824", "/dev/zero"], &dir);
        s.output_cap = 1024 * 1024;
        let out = run_ok(&s);
        assert_eq!(out.exit_code, Some(0));
        assert_eq!(out.stdout.text.len(), 1024 * 1024);
        assert_eq!(out.stdout.total_bytes, 1 << 30);
        assert!(out.stdout.truncated);
        assert!(!out.stderr.truncated);
    }

    #[test]
    fn cap_does_not_split_a_character() {
        let dir = temp_dir("proc");
        let mut s = spec(&["echo", "ééé"], &dir);
        s.output_cap = 3; // 'é' is two bytes: keep one, drop the half
        let out = run_ok(&s);
        assert_eq!(out.stdout.text, "é");
        assert_eq!(out.stdout.total_bytes, 7);
        assert!(out.stdout.truncated);
        assert_eq!(trim_partial_char(b"ab"), b"ab");
        assert_eq!(trim_partial_char(&[b'a', 0xE2, 0x82]), b"a");
        assert_eq!(trim_partial_char(&[0xE2, 0x82, 0xAC]), &[0xE2, 0x82, 0xAC]);
    }

    #[test]
    fn binary_output_is_lossy_text() {
        let dir = temp_dir("proc");
        let out = run_ok(&spec(
            &[
                "python3",
                "-c",
                "import sys\nsys.stdout.buffer.write(bytes([0x66, 0xff, 0x6f]))",
            ],
            &dir,
        ));
        assert_eq!(out.stdout.text, "f\u{fffd}o");
        assert_eq!(out.stdout.total_bytes, 3);
    }
}
