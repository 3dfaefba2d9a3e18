//! The supervisor process inside the run's bwrap sandbox, and the shims it forks.
//!
//! The supervisor is single-threaded, so a plain `fork` of it is safe to continue in Rust. It
//! forks one **shim** per slot the runner asks for ([`SLOT`], with the slot's socket); a slot
//! runs one command at a time, one after another, so a run with `--jobs N` has at most N shims
//! and a fork is paid once per slot, not per command. A shim:
//! 1. becomes a child subreaper, so that whatever a command starts and abandons (a `setsid`
//!    daemon) is re-parented to it, and at its first command enters a Landlock domain of its own
//!    with the run's ruleset and installs the seccomp filter (which its commands inherit:
//!    compiling the filter for each command was the largest part of a command's start);
//! 2. for each command ([`COMMAND`], the pipes and the ruleset attached, then the [`Request`])
//!    starts it with the same ruleset again ([`spawn_fds`]: its own process group, the limits),
//!    so the command is in a domain nested inside the shim's. Landlock's signal scoping
//!    then lets the command signal neither its shim, nor the supervisor, nor any other command of
//!    the run, while the shim can signal the command and everything it started — and nothing
//!    else;
//! 3. waits for the command's leader, or a [`TERM`]/[`KILL`] from the runner;
//! 4. kills everything left: `kill(-1, SIGKILL)` from inside its domain reaches exactly the
//!    processes of its command (the one it runs now: the last one's were killed before it
//!    reported), repeated until no child is left to reap;
//! 5. reports how the leader ended ([`EXITED`]) and waits for the next command.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::process::spawn;
use crate::process::spawn::{ChildSetup, Resource, Rlimit};
use crate::process::supervisor::wire;
use crate::process::supervisor::wire::{COMMAND, EXITED, FAILED, KILL, READY, Request, SLOT, TERM};

/// Runs the supervisor on the control socket `control` (its stdin) until the runner closes it.
pub fn supervise(control: OwnedFd) -> i32 {
    // SAFETY: prctl with integers; only this process is affected. Non-dumpable: a command
    // cannot read the supervisor's memory or descriptors through /proc (Landlock refuses ptrace
    // across domains as well).
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
    if wire::send_with_fds(&control, &[READY], &[]).is_err() {
        return 1;
    }
    let mut buf = [0u8; 16];
    loop {
        reap_shims();
        let mut pfd = libc::pollfd {
            fd: control.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd. A tick of a second lets ended shims be reaped when idle.
        if unsafe { libc::poll(&mut pfd, 1, 1000) } <= 0 {
            continue;
        }
        let (n, fds) = match wire::recv_with_fds(control.as_raw_fd(), &mut buf) {
            Ok(got) => got,
            Err(_) => return 1,
        };
        if n == 0 {
            return 0; // the runner closed the control socket: the run is over
        }
        let mut fds = fds.into_iter();
        let (SLOT, Some(slot)) = (buf[0], fds.next()) else {
            continue; // not ours to understand; its descriptors close here
        };
        drop(fds);
        // SAFETY: getpid has no preconditions.
        let me = unsafe { libc::getpid() };
        // SAFETY: this process has one thread, so the child may go on running Rust code.
        match unsafe { libc::fork() } {
            0 => {
                drop(control);
                let code = shim(slot, me);
                // SAFETY: leaving the forked child without running the parent's exit handlers.
                unsafe { libc::_exit(code) }
            }
            // No shim: the slot's socket closes here, which the runner sees as a lost slot.
            _ => drop(slot),
        }
    }
}

/// Reaps every shim that has ended, without waiting.
fn reap_shims() {
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes only into `status`.
        if unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) } <= 0 {
            return;
        }
    }
}

/// One slot's shim (see the module docs): serves commands until the runner closes the slot.
/// `supervisor` is its parent's pid.
fn shim(slot: OwnedFd, supervisor: libc::pid_t) -> i32 {
    // The supervisor's stdin is the control socket: the shim must not hold a copy of it (the runner
    // would then not see the supervisor go away), nor pass it on.
    if let Ok(null) = spawn::null_stdin() {
        // SAFETY: replacing descriptor 0 of this (single-threaded) process.
        unsafe { libc::dup2(null, 0) };
    }
    // SAFETY: prctl with integers on this process. The shim dies with the supervisor (under
    // Landlock alone no PID namespace would take it along), and its commands with it.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0
        || unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0
        // SAFETY: getppid has no preconditions. (The supervisor may have gone before the line
        // above took effect.)
        || unsafe { libc::getppid() } != supervisor
    {
        return 1;
    }
    let mut sock = File::from(slot);
    let mut entered = Entered::default();
    let mut buf = [0u8; 1];
    loop {
        // The runner's next command usually comes within the spin: waiting for it awake saves
        // the wake-up of an idle CPU on every command of a run of short ones.
        spin_until_readable(sock.as_raw_fd());
        let Ok((n, fds)) = wire::recv_with_fds(sock.as_raw_fd(), &mut buf) else {
            return 1;
        };
        if n == 0 {
            return 0; // the runner let the slot go
        }
        if buf[0] != COMMAND {
            continue; // a TERM or KILL that came after its command had ended
        }
        match one_command(&mut sock, fds, &mut entered) {
            Ok((status, tmp)) => {
                let reported = wire::report(&mut sock, EXITED, status);
                if let Some(dir) = tmp {
                    // Every process of the command is gone: nothing can race the removal, which
                    // comes after the report so that the runner need not wait for it.
                    let _ = std::fs::remove_dir_all(dir);
                }
                if reported.is_err() {
                    return 1;
                }
            }
            Err(e) => {
                // The shim goes with its slot: a request read halfway leaves the stream out of
                // step, and a shim outside its own domain must not start anything. The runner
                // takes another slot for the next command.
                let _ = wire::report(&mut sock, FAILED, e.raw_os_error().unwrap_or(libc::EIO));
                return 1;
            }
        }
    }
}

/// Polls `fd` without sleeping for at most [`spawn::SPIN`], until it is readable (or hung up).
fn spin_until_readable(fd: RawFd) {
    let until = std::time::Instant::now() + spawn::SPIN;
    while std::time::Instant::now() < until {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd.
        if unsafe { libc::poll(&mut pfd, 1, 0) } != 0 {
            return;
        }
        spawn::spin_pause();
    }
}

/// Reads one command's request from `sock`, starts it with the descriptors that came with it
/// (stdout, stderr, the Landlock ruleset), and returns the leader's wait status once everything
/// it started is gone, with the TMPDIR it made for the command (to remove).
fn one_command(
    sock: &mut File,
    fds: Vec<OwnedFd>,
    entered: &mut Entered,
) -> io::Result<(i32, Option<PathBuf>)> {
    let req = Request::read(sock)?;
    let mut fds = fds.into_iter();
    let (Some(out), Some(err), Some(landlock), Some(own)) =
        (fds.next(), fds.next(), fds.next(), fds.next())
    else {
        // Without a ruleset the shim's kill(-1) would reach every process in the sandbox.
        return Err(io::Error::from_raw_os_error(libc::EPERM));
    };
    if !entered.domain {
        // The shim gives up every capability once, as it enters its domain, and its commands
        // inherit the empty sets (root without privilege, as under bwrap's --cap-drop ALL; inside
        // bwrap there is nothing left to drop): the same as `ChildSetup::drop_caps`, paid once.
        spawn::drop_capabilities()?;
        // SAFETY: restrict_self on a ruleset descriptor we own.
        unsafe { spawn::restrict_self(own.as_raw_fd())? };
        entered.domain = true;
    }
    drop(own);
    // The seccomp filter goes on the shim once, and every command it starts inherits it:
    // installing it compiles the program, which cost more per command than anything else here.
    if let Some(kind) = req.seccomp
        && !entered.filter
    {
        // SAFETY: the filter is a static, valid program.
        unsafe {
            crate::process::seccomp::install(crate::process::seccomp::filter(kind).as_ptr())?
        };
        entered.filter = true;
    }
    let program = program_for(&req)?;
    let setup = ChildSetup {
        rlimits: req
            .rlimits
            .iter()
            .filter_map(|&(r, soft, hard)| {
                Resource::from_index(r).map(|resource| Rlimit {
                    resource,
                    soft,
                    hard,
                })
            })
            .collect(),
        landlock: Some(Arc::new(landlock)),
        seccomp: None,    // inherited from the shim (above)
        drop_caps: false, // the shim has none left to pass on (above)
    };
    // A TMPDIR of its own, removed when it ends: the sandbox's /tmp is a tmpfs (memory) that lives
    // as long as the run, and what a command leaves in its TMPDIR should not pile up there.
    let mut env = req.env;
    let tmp = if env.iter().any(|(k, _)| k == "TMPDIR") {
        None
    } else {
        entered.commands += 1;
        // SAFETY: getpid has no preconditions.
        let dir = PathBuf::from(format!(
            "/tmp/acode-{}-{}",
            unsafe { libc::getpid() },
            entered.commands
        ));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        env.push(("TMPDIR".to_string(), dir.to_string_lossy().into_owned()));
        Some(dir)
    };
    let started = spawn::spawn_fds(
        &program,
        &req.argv,
        &env,
        Path::new(&req.cwd),
        &setup,
        [spawn::null_stdin()?, out.as_raw_fd(), err.as_raw_fd()],
    );
    drop((out, err)); // the runner sees end-of-file once the command's processes are gone
    match started {
        Ok(pid) => Ok((watch(pid, sock), tmp)),
        Err(e) => {
            if let Some(dir) = tmp {
                let _ = std::fs::remove_dir_all(dir);
            }
            Err(e)
        }
    }
}

/// What a shim has applied to itself, once, for all its commands.
#[derive(Default)]
struct Entered {
    /// It is in its own Landlock domain (commands get one nested in it).
    domain: bool,
    /// It has the seccomp filter, which its commands inherit.
    filter: bool,
    /// How many commands it was given a TMPDIR for (names them).
    commands: u64,
}

/// The program to execute: the request's path, or `argv[0]` looked up on the request's `PATH`
/// as seen inside the sandbox.
fn program_for(req: &Request) -> io::Result<PathBuf> {
    if !req.program.is_empty() {
        return Ok(PathBuf::from(&req.program));
    }
    let name = req.argv.first().map(String::as_str).unwrap_or_default();
    crate::process::lookup(name, &req.env).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
}

/// Waits for the leader `pid` or the runner's word, then kills and reaps everything the command
/// started; returns the leader's raw wait status.
fn watch(pid: libc::pid_t, sock: &mut File) -> i32 {
    let pidfd = spawn::pidfd_open(pid);
    let spin_until = std::time::Instant::now() + spawn::SPIN;
    loop {
        let mut fds = [
            libc::pollfd {
                fd: sock.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: pidfd.as_ref().map_or(-1, |p| p.as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // Without a pidfd the leader's exit is looked for every 10 ms.
        let tick = if std::time::Instant::now() < spin_until {
            0
        } else if pidfd.is_some() {
            -1
        } else {
            10
        };
        // SAFETY: two live pollfd; negative fds are ignored.
        unsafe { libc::poll(fds.as_mut_ptr(), 2, tick) };
        if tick == 0 {
            spawn::spin_pause();
        }
        if fds[0].revents != 0 {
            let mut word = [0u8; 1];
            match sock.read(&mut word) {
                Ok(1) if word[0] == TERM => signal(-pid, libc::SIGTERM),
                Ok(1) if word[0] == KILL => break,
                Ok(1) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // The runner is gone: nobody wants the command any more.
                _ => break,
            }
        }
        if spawn::has_exited(pid) {
            break;
        }
    }
    // The leader is not reaped yet, so its group id is still its own.
    signal(-pid, libc::SIGKILL);
    let status = loop {
        let mut status = 0;
        // SAFETY: waitpid writes only into `status`.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc == pid {
            break status;
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break libc::SIGKILL; // cannot happen for our own child; report it as killed
        }
    };
    kill_the_rest();
    status
}

/// Kills every process in the shim's Landlock domain (the command's, see the module docs) and
/// reaps them as they come to it, until it has no child left. Each round reaps every child that
/// is already dead before signalling again, so a fork bomb's thousands of processes cost one
/// `kill(-1)` per round, not one per process.
///
/// Called once the leader is reaped. A shim with no child then has nothing left to kill, and
/// skips the `kill(-1)`, which walks every process on the machine: every process the command
/// started descends from the leader, and whichever of them outlived its parent was re-parented
/// to the shim (its subreaper) before that parent could be reaped.
fn kill_the_rest() {
    if no_child_left() {
        return;
    }
    loop {
        signal(-1, libc::SIGKILL);
        let mut reaped = false;
        loop {
            let mut status = 0;
            // SAFETY: waitpid writes only into `status`.
            let rc = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if rc > 0 {
                reaped = true;
                continue;
            }
            if rc < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                return; // ECHILD: nothing of the command is left
            }
            break; // children left, none dead yet
        }
        if !reaped {
            let mut status = 0;
            // SAFETY: waitpid writes only into `status`. Blocks until the next one dies.
            let rc = unsafe { libc::waitpid(-1, &mut status, 0) };
            if rc < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                return;
            }
        }
    }
}

/// Whether the calling process has no child at all, alive or dead.
fn no_child_left() -> bool {
    // SAFETY: `info` is plain data that waitid fills in.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid writes only into `info`; WNOWAIT leaves any child as it is.
    let rc = unsafe {
        libc::waitid(
            libc::P_ALL,
            0,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    rc < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD)
}

fn signal(target: libc::pid_t, sig: libc::c_int) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe {
        libc::kill(target, sig);
    }
}
