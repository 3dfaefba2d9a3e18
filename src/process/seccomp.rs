//! A seccomp filter that refuses the sockets Landlock cannot see: UDP and raw IP sockets, packet
//! sockets, and `io_uring` (whose operations can open sockets without the `socket` system call).
//! Applied to every command under Landlock and under bwrap, whatever the policy (SPEC §6, issue
//! #21): DNS is a classic way out for data, and Landlock restricts only TCP.
//!
//! The program is small and fixed, so it is written here as classic BPF rather than through a
//! filter-building crate (see docs/dependencies.md); it is built once in the parent and installed
//! in the child between the clone and `exec` with one `prctl`, like the Landlock ruleset.
//!
//! What it does, in order: a system call of another architecture than the runner's (32-bit
//! `int 0x80` on x86-64, whose `socketcall` would bypass the check) or of the x32 ABI kills the
//! process; `socket(AF_INET|AF_INET6, SOCK_DGRAM|SOCK_RAW, …)` and `socket(AF_PACKET, …)` fail with
//! `EACCES`; `io_uring_setup` fails with `ENOSYS` (programs then fall back to ordinary calls);
//! everything else is allowed.
//!
//! Under Landlock alone ([`Kind::Landlock`]) `socket(AF_UNIX, …)` fails with `EACCES` too: below
//! Landlock ABI 9 nothing checks `connect` to a pathname socket by its path, so a command could
//! reach the host's (the Docker daemon's, an ssh-agent's, D-Bus) where bwrap shows none of them.
//! `socketpair` is not refused: a connected pair reaches nothing outside the command.

use std::sync::OnceLock;

/// Which filter a command gets: what its mode's other layers leave open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// UDP, raw and packet sockets and `io_uring` refused (bwrap: the mount namespace shows no
    /// socket of the host's, and the network namespace has none).
    Network,
    /// [`Kind::Network`], and UNIX sockets refused too (Landlock alone; see the module docs).
    Landlock,
}

impl Kind {
    /// The kind's byte on the supervisor's wire.
    pub fn code(self) -> u8 {
        match self {
            Kind::Network => 1,
            Kind::Landlock => 2,
        }
    }

    /// The kind of a wire byte (`0` is no filter).
    pub fn from_code(code: u8) -> Option<Kind> {
        match code {
            1 => Some(Kind::Network),
            2 => Some(Kind::Landlock),
            _ => None,
        }
    }
}

/// Whether this kernel applies seccomp filters, as `doctor` reports it: `Ok` says so (and whether
/// this process already runs under one, as in a container), `Err` why commands could not get the
/// filter. Asked with `prctl(PR_GET_SECCOMP)`, which changes nothing.
pub fn availability() -> Result<String, String> {
    // SAFETY: PR_GET_SECCOMP takes no pointer and only reads the calling thread's mode.
    let mode = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    match mode {
        0 => Ok("available: commands get the filter refusing UDP, raw and packet sockets".into()),
        2 => Ok(
            "available; this process already runs under a filter (a container's), which commands \
             keep, and they get acode-run's on top"
                .into(),
        ),
        -1 => Err(format!(
            "this kernel has no seccomp ({}): commands under bwrap and Landlock cannot get the \
             filter refusing UDP, raw and packet sockets, so they do not start",
            std::io::Error::last_os_error()
        )),
        other => Ok(format!("available (mode {other})")),
    }
}

/// The installed program, kept alive for the children that point at it.
pub struct Filter {
    kind: Kind,
    instructions: Vec<libc::sock_filter>,
    prog: libc::sock_fprog,
}

// SAFETY: `prog` points into `instructions`, which is never changed after construction; the
// struct is only read (by the kernel, through `install`).
unsafe impl Send for Filter {}
// SAFETY: as above: immutable after construction.
unsafe impl Sync for Filter {}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seccomp::Filter({} instructions)",
            self.instructions.len()
        )
    }
}

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;
/// System calls at or above this number on x86-64 are the x32 ABI.
#[cfg(target_arch = "x86_64")]
const X32_BIT: u32 = 0x4000_0000;
#[cfg(target_arch = "aarch64")]
const X32_BIT: u32 = u32::MAX;

const RET_ALLOW: u32 = 0x7fff_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ERRNO: u32 = 0x0005_0000;

const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const AND_K: u16 = (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

/// Offsets in `struct seccomp_data`: nr, arch, args[0] and args[1] (low 32 bits, little-endian).
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const OFF_ARG0: u32 = 16;
const OFF_ARG1: u32 = 24;

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The program of `kind` (see the module docs).
fn program(kind: Kind) -> Vec<libc::sock_filter> {
    let deny = RET_ERRNO | libc::EACCES as u32;
    let nosys = RET_ERRNO | libc::ENOSYS as u32;
    let mut p = vec![
        // 0: the architecture must be ours.
        stmt(LD_W_ABS, OFF_ARCH),
        jump(JEQ_K, AUDIT_ARCH, 1, 0),
        stmt(RET_K, RET_KILL_PROCESS),
        // 3: no x32 system calls.
        stmt(LD_W_ABS, OFF_NR),
        jump(JGE_K, X32_BIT, 0, 1),
        stmt(RET_K, RET_KILL_PROCESS),
        // 6: io_uring_setup → ENOSYS; socket → check; else allow.
        jump(JEQ_K, libc::SYS_io_uring_setup as u32, 0, 1),
        stmt(RET_K, nosys),
        jump(JEQ_K, libc::SYS_socket as u32, 1, 0),
        stmt(RET_K, RET_ALLOW),
        // 10: the domain.
        stmt(LD_W_ABS, OFF_ARG0),
        jump(JEQ_K, libc::AF_PACKET as u32, 0, 1),
        stmt(RET_K, deny),
        jump(JEQ_K, libc::AF_INET as u32, 2, 0),
        jump(JEQ_K, libc::AF_INET6 as u32, 1, 0),
        stmt(RET_K, RET_ALLOW),
        // 16: an IP socket: its type, without SOCK_NONBLOCK / SOCK_CLOEXEC.
        stmt(LD_W_ABS, OFF_ARG1),
        stmt(AND_K, 0xf),
        jump(JEQ_K, libc::SOCK_DGRAM as u32, 2, 0),
        jump(JEQ_K, libc::SOCK_RAW as u32, 1, 0),
        stmt(RET_K, RET_ALLOW),
        stmt(RET_K, deny),
    ];
    if kind == Kind::Landlock {
        // After the domain is loaded (10): AF_UNIX → EACCES, before the other domains' checks.
        p.splice(
            11..11,
            [jump(JEQ_K, libc::AF_UNIX as u32, 0, 1), stmt(RET_K, deny)],
        );
    }
    p
}

/// The filter of `kind`, built once per process.
pub fn filter(kind: Kind) -> &'static Filter {
    static FILTERS: [OnceLock<Filter>; 2] = [OnceLock::new(), OnceLock::new()];
    let slot = match kind {
        Kind::Network => &FILTERS[0],
        Kind::Landlock => &FILTERS[1],
    };
    slot.get_or_init(|| {
        let instructions = program(kind);
        let prog = libc::sock_fprog {
            len: instructions.len() as u16,
            filter: instructions.as_ptr() as *mut libc::sock_filter,
        };
        Filter {
            kind,
            instructions,
            prog,
        }
    })
}

impl Filter {
    /// Which filter this is (what the supervisor's shim is told to install).
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// A pointer the child passes to the kernel.
    pub fn as_ptr(&self) -> *const libc::sock_fprog {
        &self.prog
    }
}

/// Installs the filter at `prog` in the calling process. Called in the child between the clone and
/// `exec`: two system calls, no allocation.
///
/// # Safety
/// `prog` must point to a valid `sock_fprog` whose instructions outlive the call.
pub unsafe fn install(prog: *const libc::sock_fprog) -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments and a pointer the caller vouches for.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, prog, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_jump_lands_inside_the_program() {
        for kind in [Kind::Network, Kind::Landlock] {
            let p = program(kind);
            for (i, ins) in p.iter().enumerate() {
                if ins.code & libc::BPF_JMP as u16 != 0 && ins.code & 0x07 == libc::BPF_JMP as u16 {
                    assert!(i + 1 + (ins.jt as usize) < p.len(), "jt of {i}");
                    assert!(i + 1 + (ins.jf as usize) < p.len(), "jf of {i}");
                }
            }
            // The last instruction returns.
            assert_eq!(p.last().unwrap().code, RET_K);
            assert_eq!(Kind::from_code(kind.code()), Some(kind));
        }
        assert_eq!(Kind::from_code(0), None);
    }

    /// Each filter installed in a real child: what it refuses and what it lets through.
    #[test]
    fn the_landlock_filter_refuses_unix_sockets_and_keeps_socketpairs() {
        for (kind, unix_refused) in [(Kind::Network, false), (Kind::Landlock, true)] {
            let prog = filter(kind).as_ptr();
            // SAFETY: fork in a test; the child makes async-signal-safe calls only and exits.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0);
            if pid == 0 {
                // SAFETY: in the child: install, then try each socket; exit with a bit mask.
                unsafe {
                    if install(prog).is_err() {
                        libc::_exit(100);
                    }
                    let unix = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) >= 0;
                    let mut pair = [0; 2];
                    let pair_ok =
                        libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, pair.as_mut_ptr())
                            == 0;
                    let udp = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) >= 0;
                    let tcp = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) >= 0;
                    libc::_exit(
                        i32::from(unix)
                            | i32::from(pair_ok) << 1
                            | i32::from(udp) << 2
                            | i32::from(tcp) << 3,
                    );
                }
            }
            let mut status = 0;
            // SAFETY: waiting for our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            let bits = libc::WEXITSTATUS(status);
            assert_ne!(bits, 100, "{kind:?}: the filter was not installed");
            assert_eq!(
                bits & 1 == 0,
                unix_refused,
                "{kind:?}: AF_UNIX socket ({bits:#b})"
            );
            assert_eq!(bits & 2, 2, "{kind:?}: socketpair ({bits:#b})");
            assert_eq!(bits & 4, 0, "{kind:?}: UDP ({bits:#b})");
            assert_eq!(bits & 8, 8, "{kind:?}: TCP ({bits:#b})");
        }
    }
}
