//! The runner's side: starting a supervisor in its bwrap sandbox, handing it commands, and the
//! handle of one command started that way ([`Remote`]).

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::process::spawn;
use crate::process::spawn::ChildSetup;
use crate::process::supervisor::wire;
use crate::process::supervisor::wire::{COMMAND, EXITED, FAILED, KILL, READY, Request, SLOT, TERM};

/// How long a new supervisor may take to say it is ready (bwrap's start plus the runner binary's).
const READY_WAIT: Duration = Duration::from_secs(20);
/// How long a supervisor may take to leave once its control socket is closed.
const LEAVE_WAIT: Duration = Duration::from_secs(2);

/// A running supervisor: one bwrap sandbox that runs many commands. Dropping it closes the
/// control socket, which ends the supervisor and so the sandbox (bwrap's PID namespace takes
/// every process in it along).
#[derive(Debug)]
pub struct Supervisor {
    control: OwnedFd,
    /// bwrap's pid, which is also its process group id (not reaped until the drop).
    pid: libc::pid_t,
    /// Slots whose shim is waiting for a command (see [`crate::process::supervisor::inside`]).
    idle: Slots,
    /// The ruleset each shim enters as its own domain before its first command (its commands'
    /// domains nest in it): what makes a shim's `kill(-1)` reach its own commands only.
    domain: Arc<OwnedFd>,
}

/// The idle slots of a supervisor, shared with the commands running in its other slots, which
/// give theirs back when they end.
type Slots = Arc<Mutex<Vec<OwnedFd>>>;

/// How a command started by a supervisor ended, as its shim reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The leader ended; the raw wait status.
    Exited(i32),
    /// The command could not be started; the `errno`.
    Failed(i32),
    /// The shim went away without a word (the sandbox ended under it).
    Lost,
}

impl Supervisor {
    /// Starts `program` with `argv` and `env` — the runner binary's supervisor subcommand, under
    /// bwrap or directly (Landlock alone) — with the control socket as its stdin, and waits until
    /// it says it is ready. Its shims take `domain` as their own Landlock domain. `Err` carries
    /// what it printed when it did not.
    pub fn start(
        program: &Path,
        argv: &[String],
        env: &[(String, String)],
        domain: Arc<OwnedFd>,
    ) -> io::Result<Self> {
        let (control, theirs) = wire::socketpair(libc::SOCK_SEQPACKET)?;
        let (err_r, err_w) = spawn::pipe()?;
        let (program, argv, env) = (program.to_path_buf(), argv.to_vec(), env.to_vec());
        // The sandbox outlives the `--jobs` worker thread that may be starting it.
        let pid = spawn::on_lasting_thread(move || {
            spawn::spawn_fds(
                &program,
                &argv,
                &env,
                Path::new("/"),
                &ChildSetup::default(),
                [theirs.as_raw_fd(), err_w.as_raw_fd(), err_w.as_raw_fd()],
            )
        })??;
        let sup = Supervisor {
            control,
            pid,
            idle: Arc::default(),
            domain,
        };
        let mut pfd = libc::pollfd {
            fd: sup.control.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let until = Instant::now() + READY_WAIT;
        let mut buf = [0u8; 4];
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            // SAFETY: one live pollfd.
            let n = unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(1000) as i32) };
            if n <= 0 {
                continue;
            }
            if let Ok((1, _)) = wire::recv_with_fds(sup.control.as_raw_fd(), &mut buf)
                && buf[0] == READY
            {
                return Ok(sup);
            }
            break;
        }
        drop(sup); // ends what was started
        let mut said = String::new();
        spawn::set_nonblocking(&err_r);
        let _ = File::from(err_r).take(4096).read_to_string(&mut said);
        Err(io::Error::other(format!(
            "the sandbox supervisor did not start{}",
            if said.trim().is_empty() {
                String::new()
            } else {
                format!(": {}", said.trim())
            }
        )))
    }

    /// Whether the supervisor (its bwrap) is still running.
    pub fn alive(&self) -> bool {
        !crate::process::spawn::has_exited(self.pid)
    }

    /// Hands one command to the supervisor, in an idle slot or a new one: `stdout` and `stderr`
    /// are the write ends of the runner's pipes, `landlock` the ruleset the command is confined
    /// by (nested in its shim's own domain). `Err` when the supervisor is gone (the caller may
    /// start another).
    pub fn launch(
        &self,
        req: &Request,
        stdout: OwnedFd,
        stderr: OwnedFd,
        landlock: RawFd,
    ) -> io::Result<Remote> {
        let fds = [
            stdout.as_raw_fd(),
            stderr.as_raw_fd(),
            landlock,
            self.domain.as_raw_fd(),
        ];
        let bytes = req.encode();
        loop {
            let pooled = lock(&self.idle).pop();
            let fresh = pooled.is_none();
            let slot = match pooled {
                Some(slot) => slot,
                None => self.new_slot()?,
            };
            let sent =
                wire::send_with_fds(&slot, &[COMMAND], &fds).and_then(|()| send_all(&slot, &bytes));
            match sent {
                Ok(()) => return Ok(Remote::on_slot(slot, self.idle.clone())),
                Err(e) if fresh => return Err(e),
                Err(_) => {} // that slot's shim has gone: let it go and take another
            }
        }
    }

    /// A new slot: a socket pair whose other end goes to the supervisor, which forks its shim.
    fn new_slot(&self) -> io::Result<OwnedFd> {
        let (mine, theirs) = wire::socketpair(libc::SOCK_STREAM)?;
        wire::send_with_fds(&self.control, &[SLOT], &[theirs.as_raw_fd()])?;
        Ok(mine)
    }
}

fn lock(slots: &Slots) -> std::sync::MutexGuard<'_, Vec<OwnedFd>> {
    slots.lock().unwrap_or_else(|p| p.into_inner())
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        // The supervisor leaves at end-of-file on its control socket.
        // SAFETY: shutdown(2) on a socket this struct owns.
        unsafe { libc::shutdown(self.control.as_raw_fd(), libc::SHUT_RDWR) };
        spawn::wait_exit(self.pid, LEAVE_WAIT);
        // SAFETY: kill(2) on the group of our own unreaped child.
        unsafe { libc::kill(-self.pid, libc::SIGKILL) };
        let _ = spawn::wait(self.pid);
    }
}

/// One command running under a supervisor: the slot it runs in. The slot goes back to the
/// supervisor's idle ones when the command ran and ended and its report was read; otherwise
/// (it could not start, or was abandoned) it is closed, and its shim kills what is left and goes
/// away (a shim that could not start a command leaves by itself).
#[derive(Debug)]
pub struct Remote {
    slot: Option<OwnedFd>,
    home: Slots,
    got: Vec<u8>,
    ended: Option<Ended>,
}

impl Drop for Remote {
    fn drop(&mut self) {
        if let (Some(Ended::Exited(_)), Some(slot)) = (self.ended, self.slot.take())
            && quiet(&slot)
        {
            lock(&self.home).push(slot);
        }
    }
}

/// Whether nothing waits to be read on `slot` and its shim is still there. A slot with bytes
/// past the report (an overlong or corrupt one) is not given to the next command, which would
/// read them as its own report; nor is one whose shim has gone (end-of-file). Closing it makes
/// its shim, if any, kill what is left and go away.
fn quiet(slot: &OwnedFd) -> bool {
    let mut byte = [0u8; 1];
    // SAFETY: recv into a live one-byte buffer; MSG_PEEK leaves the byte where it is.
    let n = unsafe {
        libc::recv(
            slot.as_raw_fd(),
            byte.as_mut_ptr().cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock
}

impl Remote {
    /// The command just handed to the shim at the other end of `slot` (its request sent), whose
    /// slot goes back to `home` when it has run and ended. What [`Supervisor::launch`] returns;
    /// public (hidden) so the `supervisor_reports` fuzz target reads what a shim sends on this
    /// path, over real sockets, rather than on a copy of it.
    #[doc(hidden)]
    pub fn on_slot(slot: OwnedFd, home: Arc<Mutex<Vec<OwnedFd>>>) -> Remote {
        Remote {
            slot: Some(slot),
            home,
            got: Vec::with_capacity(5),
            ended: None,
        }
    }

    /// The descriptor that becomes readable when the command ends (for `poll`).
    pub fn fd(&self) -> RawFd {
        self.slot.as_ref().map_or(-1, |s| s.as_raw_fd())
    }

    /// How the command ended, if it has, without waiting.
    pub fn ended(&mut self) -> Option<Ended> {
        if self.ended.is_none() {
            self.read(libc::MSG_DONTWAIT);
        }
        self.ended
    }

    /// Waits until the command has ended.
    pub fn wait(&mut self) -> Ended {
        while self.ended.is_none() {
            self.read(0);
        }
        self.ended.unwrap_or(Ended::Lost)
    }

    /// Asks for SIGTERM to the command's process group.
    pub fn term(&mut self) {
        if let Some(slot) = &self.slot {
            let _ = send_all(slot, &[TERM]);
        }
    }

    /// Asks for everything the command started to be killed.
    pub fn kill(&mut self) {
        if let Some(slot) = &self.slot {
            let _ = send_all(slot, &[KILL]);
        }
    }

    fn read(&mut self, flags: libc::c_int) {
        let Some(slot) = &self.slot else {
            self.ended = Some(Ended::Lost);
            return;
        };
        let mut buf = [0u8; 5];
        let want = 5 - self.got.len();
        // SAFETY: recv into a live buffer of at least `want` bytes.
        let n = unsafe { libc::recv(slot.as_raw_fd(), buf.as_mut_ptr().cast(), want, flags) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if !matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) {
                self.ended = Some(Ended::Lost);
            }
            return;
        }
        if n == 0 {
            self.ended = Some(Ended::Lost);
            return;
        }
        self.got.extend_from_slice(&buf[..n as usize]);
        if self.got.len() == 5 {
            let value = i32::from_le_bytes([self.got[1], self.got[2], self.got[3], self.got[4]]);
            self.ended = Some(match self.got[0] {
                EXITED => Ended::Exited(value),
                FAILED => Ended::Failed(value),
                _ => Ended::Lost,
            });
        }
    }
}

/// Writes all of `bytes` to `sock` without raising SIGPIPE (an embedder may not ignore it).
fn send_all(sock: &impl AsRawFd, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: send from a live buffer.
        let n = unsafe {
            libc::send(
                sock.as_raw_fd(),
                bytes.as_ptr().cast(),
                bytes.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        bytes = &bytes[n as usize..];
    }
    Ok(())
}

/// The runner binary, when it can be re-executed as the supervisor: it called
/// [`crate::process::supervisor::main_if_requested`] (an embedder's binary that does not gets one bwrap per command).
pub fn runner_exe() -> Option<&'static Path> {
    static EXE: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    if !crate::process::supervisor::HOOKED.load(std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    EXE.get_or_init(|| std::env::current_exe().ok()).as_deref()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A command's slot whose shim wrote `bytes` (and left, unless `shim_stays`): how the
    /// command ended, and the pool once its `Remote` is dropped.
    fn slot_with(bytes: &[u8], shim_stays: bool) -> (Slots, Ended) {
        let home = Slots::default();
        let (mine, theirs) = wire::socketpair(libc::SOCK_STREAM).unwrap();
        let mut remote = Remote::on_slot(mine, home.clone());
        let mut shim = Some(File::from(theirs));
        shim.as_mut().unwrap().write_all(bytes).unwrap();
        if !shim_stays {
            shim = None;
        }
        let ended = remote.wait();
        drop(remote);
        drop(shim);
        (home, ended)
    }

    /// Found by the `supervisor_reports` fuzz target: the bytes a shim sent past its five-byte
    /// report stayed in the slot, which went back to the pool, and the next command started in
    /// it read them as its own report (`X 0 0 0 0 F 9 0 0 0`: the next command "failed", errno 9).
    #[test]
    fn a_slot_with_bytes_past_the_report_is_not_reused() {
        let (home, ended) = slot_with(b"X\0\0\0\0F\x09\0\0\0", true);
        assert_eq!(ended, Ended::Exited(0));
        assert!(lock(&home).is_empty(), "the slot went back to the pool");
    }

    #[test]
    fn a_clean_report_gives_the_slot_back_unless_its_shim_has_gone() {
        let (home, ended) = slot_with(b"X\x01\x02\0\0", true);
        assert_eq!(ended, Ended::Exited(0x0201));
        assert_eq!(lock(&home).len(), 1);
        let (home, ended) = slot_with(b"X\x01\x02\0\0", false);
        assert_eq!(ended, Ended::Exited(0x0201));
        assert!(
            lock(&home).is_empty(),
            "a slot whose shim has gone was pooled"
        );
        let (home, ended) = slot_with(b"X\x01", false);
        assert_eq!(ended, Ended::Lost);
        assert!(lock(&home).is_empty());
    }
}
