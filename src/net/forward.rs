//! The forwarder inside a bwrap sandbox: the runner binary itself, re-executed as the sandbox's
//! first program (`acode-run __net-forward PORT SOCKET -- COMMAND…`). The command runs in its
//! own network namespace, where nothing is reachable; the forwarder listens on
//! `127.0.0.1:PORT` there and carries each connection to the run's proxy through the UNIX socket
//! bound into the sandbox — the one way out. Then it starts the command, waits for it and ends the
//! same way it did (its exit code, or the same signal).
//!
//! The program must call [`main_if_requested`] before anything else (the `acode-run` binary
//! does); an embedder whose binary does not cannot run commands with network access under bwrap,
//! and is told so when the run starts ([`probe`]).

use std::ffi::OsStr;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::net::proxy::copy;
use crate::process::foreground::run_attached;
use crate::process::helper::run_helper;

/// How long the probe may take to answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The hidden subcommand that runs the forwarder.
pub const SUBCOMMAND: &str = "__net-forward";
/// What `SUBCOMMAND --probe` prints, so the runner knows its binary can forward.
const PROBE_ANSWER: &str = "acode-run net-forward 1";
/// The port the forwarder listens on inside the sandbox's network namespace.
pub const INSIDE_PORT: u16 = 3128;
/// Where the proxy's UNIX socket is bound inside the sandbox.
pub const INSIDE_SOCKET: &str = "/run/acode/proxy.sock";
/// Where the runner binary is bound inside the sandbox.
pub const INSIDE_EXE: &str = "/run/acode/acode-run";

/// If this process was started as the forwarder, runs it and never returns; otherwise returns at
/// once. Call it first in `main`.
pub fn main_if_requested() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) != Some(SUBCOMMAND) {
        return;
    }
    if args.get(2).map(String::as_str) == Some("--probe") {
        println!("{PROBE_ANSWER}");
        std::process::exit(0);
    }
    let code = match run(&args[2..]) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("acode-run network forwarder: {e}");
            126
        }
    };
    std::process::exit(code)
}

/// The command line of the probe `exe` answers when it can forward: a harmless command of the
/// runner's own (`doctor` starts it under the sandbox to see a command start there).
pub fn probe_argv(exe: &Path) -> Vec<String> {
    vec![
        exe.to_string_lossy().into_owned(),
        SUBCOMMAND.to_string(),
        "--probe".to_string(),
    ]
}

/// Whether `stdout` is the probe's answer.
pub fn is_probe_answer(stdout: &str) -> bool {
    stdout.trim() == PROBE_ANSWER
}

/// Whether `exe` can run the forwarder (it answers the probe).
pub fn probe(exe: &Path) -> Result<(), String> {
    let out = run_helper(probe_argv(exe), Path::new("/"), Vec::new(), PROBE_TIMEOUT)
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    if is_probe_answer(&out.stdout.text) {
        Ok(())
    } else {
        Err(format!(
            "{} does not run acode-run's network forwarder; a program embedding acode-run must \
             call acode_run::net::forward::main_if_requested() first in main",
            exe.display()
        ))
    }
}

/// `PORT SOCKET -- COMMAND…`.
fn run(args: &[String]) -> Result<i32, String> {
    let [port, socket, dashes, command @ ..] = args else {
        return Err("usage: __net-forward PORT SOCKET -- COMMAND…".to_string());
    };
    if dashes != "--" || command.is_empty() {
        return Err("usage: __net-forward PORT SOCKET -- COMMAND…".to_string());
    }
    let port: u16 = port.parse().map_err(|_| format!("bad port {port:?}"))?;
    let listener = TcpListener::bind(("127.0.0.1", port))
        .map_err(|e| format!("cannot listen on 127.0.0.1:{port}: {e}"))?;
    let socket = socket.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let socket = socket.clone();
            std::thread::spawn(move || carry(conn, &socket));
        }
    });
    let args: Vec<&OsStr> = command[1..].iter().map(OsStr::new).collect();
    let status = run_attached(OsStr::new(&command[0]), &args)
        .map_err(|e| format!("cannot run {:?}: {e}", command[0]))?;
    use std::os::unix::process::ExitStatusExt;
    if let Some(sig) = status.signal() {
        // End the same way: default action for the signal.
        // SAFETY: resetting a disposition and signalling ourselves.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::kill(libc::getpid(), sig);
        }
        std::thread::sleep(Duration::from_millis(100));
        return Ok(128 + sig);
    }
    Ok(status.code().unwrap_or(1))
}

/// Carries one connection to the proxy's socket and back.
fn carry(conn: TcpStream, socket: &str) {
    let Ok(proxy) = UnixStream::connect(socket) else {
        let _ = conn.shutdown(Shutdown::Both);
        return;
    };
    let (Ok(mut conn_read), Ok(mut proxy_write)) = (conn.try_clone(), proxy.try_clone()) else {
        return;
    };
    let up = std::thread::spawn(move || {
        copy(&mut conn_read, &mut proxy_write);
        let _ = proxy_write.shutdown(Shutdown::Write);
    });
    let (mut proxy_read, mut conn_write) = (proxy, conn);
    copy(&mut proxy_read, &mut conn_write);
    let _ = conn_write.shutdown(Shutdown::Write);
    let _ = up.join();
}
