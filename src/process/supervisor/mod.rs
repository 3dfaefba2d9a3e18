//! One bubblewrap sandbox per run instead of one per command.
//!
//! Starting bwrap costs ~5 ms (namespaces, mounts, a new network namespace), about eight times
//! what a short command costs, so the default mode cost 6 × bash for 500 × `true` (issue #23).
//! Instead, the first command of a run starts one sandbox with the same mounts a per-command
//! sandbox would get, and inside it the runner binary re-executed as a small **supervisor**
//! ([`SUBCOMMAND`]). The runner hands it each command over a UNIX socket, with the pipes for its
//! output passed as descriptors (`SCM_RIGHTS`); a per-command shim forked by the supervisor
//! starts the command in its own process group and Landlock domain, with the limits and seccomp
//! filter, and reports its end (see [`inside`] for the shim, [`wire`] for what is said).
//!
//! The mounts of a sandbox are fixed when it starts; the runner keeps one supervisor per set of
//! mounts ([`crate::sandbox::os`] decides which set a command needs, and starts another when the
//! set changes: another program's installation, a `.git` created by an earlier step). The
//! supervisor route needs Landlock signal scoping (ABI ≥ 6) inside bwrap, which is what keeps
//! commands from signalling the supervisor and each other; without it every command starts its
//! own bwrap as before.
//!
//! Under Landlock alone (`--sandbox landlock`, or `auto` without bwrap) the same supervisor runs
//! outside any sandbox, for one reason: the seccomp filter. The kernel compiles a filter at every
//! install, and a command started by the runner installs its own; a shim installs it once and
//! its commands inherit it. Its shims enter a domain that only scopes signals and abstract
//! sockets, and each command's filesystem-and-network ruleset nests in it, so a command gets
//! exactly the ruleset it would have got from the runner.

pub mod client;
mod inside;
pub mod wire;

pub use client::{Ended, Remote, Supervisor};

/// The hidden subcommand that runs the supervisor (its stdin is the control socket).
pub const SUBCOMMAND: &str = "__supervise";

/// Set when this process called [`main_if_requested`] (and is not the supervisor): its binary
/// can then be re-executed as one, which the runner checks before using the route.
static HOOKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// If this process was started as the supervisor, runs it and never returns; otherwise notes
/// that the binary can supervise and returns at once. Call it first in `main` (the `acode-run`
/// binary does); an embedder's binary that does not is still sandboxed, one bwrap per command.
pub fn main_if_requested() {
    if std::env::args().nth(1).as_deref() != Some(SUBCOMMAND) {
        HOOKED.store(true, std::sync::atomic::Ordering::Relaxed);
        return;
    }
    // SAFETY: descriptor 0 is the control socket the runner passed; nothing else owns it.
    let control = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(0) };
    std::process::exit(inside::supervise(control))
}
