//! A helper program the user asks acode-run to run on their behalf, in the foreground: today
//! `ssh-keygen -Y sign` for an approver's signature (issue 42), as git runs it for signed commits.
//!
//! Unlike a plan's commands it is not confined: it is the user's own tool acting for them, so it
//! keeps their environment (`SSH_AUTH_SOCK` reaches the agent) and their terminal (a passphrase
//! prompt or a security key's "touch your key" reaches them on stderr). What it is given is
//! written to its stdin, what it answers is read from its stdout (bounded), each on its own
//! thread, and it is killed when it outlasts its deadline.
//!
//! Two programs are attached wholly instead ([`run_attached`]): the user's editor (`do`'s "edit"),
//! and the command the network forwarder starts inside a bwrap sandbox. Those keep this process's
//! stdin, stdout, stderr and group, and have no deadline of their own: a person is at the editor,
//! and the forwarder's command is bounded by its step's timeout, which kills the whole sandbox from
//! outside.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How a foreground helper ended.
#[derive(Debug)]
pub struct ForegroundOutput {
    /// Its exit status (`None` when it was killed at the deadline).
    pub status: Option<ExitStatus>,
    /// What it wrote to stdout, at most the cap given.
    pub stdout: Vec<u8>,
    /// Whether stdout was longer than the cap.
    pub truncated: bool,
}

impl ForegroundOutput {
    /// Whether it exited with status 0.
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }
}

/// Runs `program` with `args` in the foreground (see the module docs): `input` on its stdin, its
/// stdout captured up to `cap` bytes, stderr and the terminal the user's, killed after `timeout`.
/// `Err` only when it could not be started or waited for.
pub fn run_foreground(
    program: &str,
    args: &[&OsStr],
    input: &[u8],
    cap: usize,
    timeout: Duration,
) -> std::io::Result<ForegroundOutput> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let mut stdin = child.stdin.take();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        if let Some(s) = stdin.as_mut() {
            // A helper that exits without reading its input closes the pipe: not our error.
            let _ = s.write_all(&input);
        }
        drop(stdin);
    });
    let stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut truncated = false;
        if let Some(mut out) = stdout {
            let mut chunk = [0u8; 8192];
            loop {
                match out.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let room = cap.saturating_sub(kept.len());
                        kept.extend_from_slice(&chunk[..n.min(room)]);
                        truncated |= n > room;
                    }
                }
            }
        }
        (kept, truncated)
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = writer.join();
    let (stdout, truncated) = reader.join().unwrap_or_default();
    Ok(ForegroundOutput {
        status,
        stdout,
        truncated,
    })
}

/// Runs `program` with `args` attached to this process (see the module docs): its stdin,
/// stdout, stderr, environment and process group, waited for as long as it takes.
pub fn run_attached(program: &OsStr, args: &[&OsStr]) -> std::io::Result<ExitStatus> {
    std::process::Command::new(program).args(args).status()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_goes_in_and_output_comes_back_bounded() {
        let out = run_foreground("cat", &[], b"hello world", 5, Duration::from_secs(10)).unwrap();
        assert!(out.success());
        assert_eq!(out.stdout, b"hello");
        assert!(out.truncated);
    }

    #[test]
    fn a_helper_past_its_deadline_is_killed() {
        let start = Instant::now();
        let out = run_foreground(
            "sleep",
            &[OsStr::new("30")],
            b"",
            10,
            Duration::from_millis(200),
        )
        .unwrap();
        assert!(out.status.is_none());
        assert!(!out.success());
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_missing_program_is_an_error() {
        assert!(
            run_foreground("acode-no-such-program", &[], b"", 1, Duration::from_secs(1)).is_err()
        );
    }

    #[test]
    fn an_attached_program_gives_back_its_status() {
        let status = run_attached(
            OsStr::new("/bin/sh"),
            &[OsStr::new("-c"), OsStr::new("exit 4")],
        )
        .unwrap();
        assert_eq!(status.code(), Some(4));
    }
}
