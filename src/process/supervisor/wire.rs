//! What the runner and the supervisor say to each other, and the descriptors that travel with it.
//!
//! - The **control socket** (`SOCK_SEQPACKET`, one per supervisor) carries [`READY`] once from the
//!   supervisor, then one message per new slot from the runner: [`SLOT`] with the slot's socket
//!   attached (`SCM_RIGHTS`). Message boundaries keep a message and its descriptor together, so
//!   threads of a `--jobs` run may send at the same time without a lock.
//! - A **slot socket** (`SOCK_STREAM`, one per shim) carries commands one after another: the byte
//!   [`COMMAND`] with the command's stdout and stderr write ends, its Landlock ruleset and the
//!   shim's own (the domain the shim enters before its first command) attached, then the
//!   [`Request`]; then single bytes from the runner ([`TERM`], [`KILL`]) and a
//!   five-byte report from the shim ([`EXITED`] or [`FAILED`] and a 32-bit value), after which the
//!   slot takes the next command.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The most descriptors one control message carries.
pub const MAX_FDS: usize = 4;
/// Runner → shim: send SIGTERM to the command's process group.
pub const TERM: u8 = b'T';
/// Runner → shim: kill everything the command started.
pub const KILL: u8 = b'K';
/// Shim → runner: the command ended; the value is its raw wait status.
pub const EXITED: u8 = b'X';
/// Shim → runner: the command could not be started; the value is the `errno`.
pub const FAILED: u8 = b'F';
/// Supervisor → runner on the control socket, once: it is running and takes commands.
pub const READY: u8 = b'R';
/// Runner → supervisor on the control socket: fork a shim for the slot socket attached.
pub const SLOT: u8 = b'S';
/// Runner → shim on a slot: start a command (descriptors attached, the request follows).
pub const COMMAND: u8 = b'C';
/// The largest request accepted (argv and environment together); `ARG_MAX` is 2 MiB on Linux.
const MAX_REQUEST: usize = 4 * 1024 * 1024;

/// One command for the supervisor to start: what [`crate::process::spawn::spawn_fds`] needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Request {
    /// The program's path, or empty to look `argv[0]` up on the `PATH` of `env` inside the
    /// sandbox (as bwrap's own `execvp` would).
    pub program: String,
    /// The arguments, `argv[0]` first.
    pub argv: Vec<String>,
    /// The complete environment.
    pub env: Vec<(String, String)>,
    /// The working directory.
    pub cwd: String,
    /// `(resource index, soft, hard)` per limit; see [`crate::process::spawn::Resource`].
    pub rlimits: Vec<(u8, u64, u64)>,
    /// Which seccomp filter the shim installs, if any.
    pub seccomp: Option<crate::process::seccomp::Kind>,
}

impl Request {
    /// The request as bytes: a 32-bit length, then the fields.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(256);
        let put = |out: &mut Vec<u8>, s: &[u8]| {
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s);
        };
        put(&mut body, self.program.as_bytes());
        body.extend_from_slice(&(self.argv.len() as u32).to_le_bytes());
        for a in &self.argv {
            put(&mut body, a.as_bytes());
        }
        body.extend_from_slice(&(self.env.len() as u32).to_le_bytes());
        for (k, v) in &self.env {
            put(&mut body, k.as_bytes());
            put(&mut body, v.as_bytes());
        }
        put(&mut body, self.cwd.as_bytes());
        body.push(self.rlimits.len() as u8);
        for (r, soft, hard) in &self.rlimits {
            body.push(*r);
            body.extend_from_slice(&soft.to_le_bytes());
            body.extend_from_slice(&hard.to_le_bytes());
        }
        body.push(self.seccomp.map_or(0, |k| k.code()));
        let mut out = Vec::with_capacity(body.len() + 4);
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&body);
        out
    }

    /// Reads one request from `from` (blocking). Anything malformed is `InvalidData`.
    pub fn read(from: &mut impl Read) -> io::Result<Request> {
        let mut len = [0u8; 4];
        from.read_exact(&mut len)?;
        let len = u32::from_le_bytes(len) as usize;
        if len > MAX_REQUEST {
            return Err(bad("request too large"));
        }
        let mut body = vec![0u8; len];
        from.read_exact(&mut body)?;
        let mut r = Reader(&body);
        let program = r.string()?;
        let argv = (0..r.u32()?)
            .map(|_| r.string())
            .collect::<io::Result<_>>()?;
        let env = (0..r.u32()?)
            .map(|_| Ok((r.string()?, r.string()?)))
            .collect::<io::Result<_>>()?;
        let cwd = r.string()?;
        let rlimits = (0..r.u8()?)
            .map(|_| Ok((r.u8()?, r.u64()?, r.u64()?)))
            .collect::<io::Result<_>>()?;
        let seccomp = match r.u8()? {
            0 => None,
            code => Some(
                crate::process::seccomp::Kind::from_code(code)
                    .ok_or_else(|| bad("an unknown seccomp filter"))?,
            ),
        };
        Ok(Request {
            program,
            argv,
            env,
            cwd,
            rlimits,
            seccomp,
        })
    }
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// A cursor over a request's bytes.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> io::Result<&[u8]> {
        if self.0.len() < n {
            return Err(bad("truncated request"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> io::Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> io::Result<u64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
    fn string(&mut self) -> io::Result<String> {
        let n = self.u32()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| bad("request text is not UTF-8"))
    }
}

/// A five-byte report from the shim: a tag and a value.
pub fn report(to: &mut impl Write, tag: u8, value: i32) -> io::Result<()> {
    let mut msg = [tag, 0, 0, 0, 0];
    msg[1..].copy_from_slice(&value.to_le_bytes());
    to.write_all(&msg)
}

/// `socketpair(AF_UNIX, kind | SOCK_CLOEXEC)`.
pub fn socketpair(kind: libc::c_int) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: socketpair writes two descriptors into `fds`.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            kind | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Sends `payload` with `fds` attached (`SCM_RIGHTS`) as one message on `sock`.
pub fn send_with_fds(sock: &OwnedFd, payload: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let fds = &fds[..fds.len().min(MAX_FDS)];
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr() as *mut libc::c_void,
        iov_len: payload.len(),
    };
    let mut space = [0u64; 8]; // aligned room for one SCM_RIGHTS header and MAX_FDS descriptors
    // SAFETY: msghdr is plain data; zeroed is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let bytes = std::mem::size_of_val(fds) as u32;
        // SAFETY: CMSG_SPACE/CMSG_LEN are pure computations.
        let (cspace, clen) = unsafe { (libc::CMSG_SPACE(bytes), libc::CMSG_LEN(bytes)) };
        msg.msg_control = space.as_mut_ptr().cast();
        // `size_t` in glibc's msghdr and cmsghdr, `socklen_t` in musl's (the static build).
        msg.msg_controllen = cspace as _;
        // SAFETY: msg_control points at `space`, large enough for one header and MAX_FDS fds.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = clen as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c).cast(), fds.len());
        }
    }
    loop {
        // SAFETY: `msg` points at live buffers for the duration of the call.
        let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receives one message on `sock` into `buf`: how many bytes (0 at end-of-file) and the
/// descriptors that came with it, close-on-exec.
pub fn recv_with_fds(sock: RawFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut space = [0u64; 8];
    // SAFETY: msghdr is plain data; zeroed is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = space.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&space) as _;
    let n = loop {
        // SAFETY: `msg` points at live buffers for the duration of the call.
        let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut fds = Vec::new();
    // SAFETY: walking the control messages the kernel wrote into `space`.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                // `cmsg_len` is `size_t` in glibc, `socklen_t` in musl.
                #[allow(clippy::unnecessary_cast)]
                let len = (*c).cmsg_len as usize;
                let count = (len - libc::CMSG_LEN(0) as usize) / size_of::<RawFd>();
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(bad("descriptors were cut off"));
    }
    Ok((n, fds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_survives_the_round_trip_and_garbage_is_refused() {
        let req = Request {
            program: "/usr/bin/env".into(),
            argv: vec!["env".into(), "a b".into(), "é".into()],
            env: vec![
                ("PATH".into(), "/usr/bin".into()),
                ("X".into(), String::new()),
            ],
            cwd: "/w".into(),
            rlimits: vec![(2, 5, 6)],
            seccomp: Some(crate::process::seccomp::Kind::Landlock),
        };
        let bytes = req.encode();
        assert_eq!(Request::read(&mut &bytes[..]).unwrap(), req);
        // Every truncation is an error, never a panic or a partial request.
        for cut in 0..bytes.len() {
            assert!(Request::read(&mut &bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut huge = (u32::MAX).to_le_bytes().to_vec();
        huge.extend_from_slice(&[0; 16]);
        assert!(Request::read(&mut &huge[..]).is_err());
    }

    #[test]
    fn descriptors_travel_with_their_message() {
        let (a, b) = socketpair(libc::SOCK_SEQPACKET).unwrap();
        let (r, w) = socketpair(libc::SOCK_STREAM).unwrap();
        send_with_fds(&a, &[COMMAND], &[w.as_raw_fd()]).unwrap();
        drop(w);
        let mut buf = [0u8; 8];
        let (n, fds) = recv_with_fds(b.as_raw_fd(), &mut buf).unwrap();
        assert_eq!((n, buf[0], fds.len()), (1, COMMAND, 1));
        let mut sent = std::fs::File::from(fds.into_iter().next().unwrap());
        sent.write_all(b"hi").unwrap();
        let mut got = [0u8; 2];
        std::fs::File::from(r).read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hi");
        drop(a);
        assert_eq!(recv_with_fds(b.as_raw_fd(), &mut buf).unwrap().0, 0);
    }
}
