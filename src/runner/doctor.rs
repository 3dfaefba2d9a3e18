//! `acode-run doctor`: what a run would get on this machine, found out the way a run finds it out
//! (issue 45). Each sandbox mode is resolved as `run` resolves it (bwrap started for real, the
//! Landlock ruleset built), `auto`'s choice and bwrap's refusal come from the same code as the run
//! header's, a command is started under the mode a run would use (so Landlock, the seccomp filter
//! and the limits are applied in a real child), the network proxy is started, and each promise of
//! docs/security.md is said to hold or not ([`crate::sandbox::promises`]). With `--require`, a
//! promise that does not hold is a failure (exit 39) before any plan runs: what a pipeline checks
//! first to fail closed, rather than learn from a run's header that it ran with less.
//!
//! Nothing is written: no database, no `.acode/`; the temporary directories the checks make are
//! removed before it returns.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde::Serialize;
use thiserror::Error;

use crate::policy::{Policy, SandboxMode};
use crate::process::CommandSpec;
use crate::sandbox::OsSandbox;
use crate::sandbox::promises::Promise;

use super::session::Session;

/// Why `doctor` could not check this machine at all.
#[derive(Debug, Error)]
pub enum DoctorError {
    /// `/proc` is not mounted: acode-run reads its own binary, descriptors and the processes it
    /// confines there, and bwrap mounts a new one from it.
    #[error(
        "/proc is not mounted here ({path} is missing): acode-run cannot check or run a sandbox \
         without it (it finds its own binary, its open files and its children there, and bwrap \
         mounts a /proc of its own from it). Mount it (`mount -t proc proc /proc`), or run \
         acode-run where it is mounted (a container runtime mounts one; a bare chroot does not)"
    )]
    NoProc {
        /// The path looked for.
        path: String,
    },
}

/// Where `doctor` looks to know whether `/proc` is mounted.
const PROC_SELF: &str = "/proc/self/exe";

/// Fails with [`DoctorError::NoProc`] when `/proc` is not mounted.
pub fn check_proc() -> Result<(), DoctorError> {
    if std::fs::symlink_metadata(PROC_SELF).is_ok() {
        Ok(())
    } else {
        Err(DoctorError::NoProc {
            path: PROC_SELF.to_string(),
        })
    }
}

/// One sandbox mode on this machine.
#[derive(Debug, Clone, Serialize)]
pub struct ModeCheck {
    /// `bwrap`, `landlock` or `none`.
    pub mode: String,
    /// Whether a run asking for it (`--sandbox MODE`) starts here.
    pub works: bool,
    /// What it is here (`/usr/bin/bwrap, Landlock ABI 7 inside`), or why it fails, with the fix.
    pub detail: String,
}

/// One promise under the mode a run would use.
#[derive(Debug, Clone, Serialize)]
pub struct PromiseCheck {
    /// Its name (`--require NAME`).
    pub name: String,
    /// What it promises.
    pub what: String,
    /// Whether it holds here.
    pub holds: bool,
    /// Why not, when it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why_not: Option<String>,
}

/// The mode a run in this workspace would use (`--sandbox`, else the policy's, else `auto`).
#[derive(Debug, Clone, Serialize)]
pub struct RunMode {
    /// The mode asked for.
    pub requested: String,
    /// The mode it resolves to (`None`: a run would be refused, see `error`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The Landlock ABI applied (the full ruleset, or network and scopes inside bwrap).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub landlock_abi: Option<u32>,
    /// Why `auto` chose it rather than bwrap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why a run asking for `requested` would be refused here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Whether a command starts under it (the runner's own binary, confined as a step's command
    /// is: bwrap, Landlock, the seccomp filter, the limits), or why not.
    pub command_starts: Check,
    /// Each promise of docs/security.md, held or not.
    pub promises: Vec<PromiseCheck>,
}

/// A check's outcome: `ok` and what was found, or why it failed.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Whether it passed.
    pub ok: bool,
    /// What was found, or why it failed.
    pub detail: String,
}

impl Check {
    fn of(r: Result<String, String>) -> Check {
        match r {
            Ok(detail) => Check { ok: true, detail },
            Err(detail) => Check { ok: false, detail },
        }
    }
}

/// The compiler and target the binary was built with (`build.rs`).
#[derive(Debug, Clone, Serialize)]
pub struct Toolchain {
    /// acode-run's version.
    pub version: String,
    /// `rustc --version` of the compiler that built it.
    pub rustc: String,
    /// The target triple.
    pub target: String,
    /// `release` or `debug`.
    pub profile: String,
}

impl Toolchain {
    /// This binary's.
    pub fn of_this_binary() -> Toolchain {
        Toolchain {
            version: env!("CARGO_PKG_VERSION").to_string(),
            rustc: env!("ACODE_RUSTC_VERSION").to_string(),
            target: env!("ACODE_BUILD_TARGET").to_string(),
            profile: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
            .to_string(),
        }
    }
}

/// Where a run's record would go.
#[derive(Debug, Clone, Serialize)]
pub struct DatabaseInfo {
    /// The database file.
    pub path: PathBuf,
    /// What chose it: `--db`, `ACODE_DB` or the workspace's default.
    pub named_by: String,
    /// Whether it exists already.
    pub exists: bool,
}

/// The policy a run would read.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyInfo {
    /// The file (`None`: no file, the defaults).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// Whether it reads and parses (`detail` says why not).
    pub ok: bool,
    /// Its mode, hosts and limits in brief, or why it cannot be read.
    pub detail: String,
}

/// Everything `doctor` found (`doctor --json` prints it as it is).
#[derive(Debug, Clone, Serialize)]
pub struct DoctorReport {
    /// The workspace checked.
    pub workspace: PathBuf,
    /// bwrap, Landlock and none: whether each starts here, and why not.
    pub modes: Vec<ModeCheck>,
    /// The mode `auto` picks here.
    pub auto: String,
    /// Why `auto` did not pick bwrap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_reason: Option<String>,
    /// The mode a run here would use, and what it holds.
    pub run: RunMode,
    /// Whether this kernel applies seccomp filters (commands under bwrap and Landlock get one).
    pub seccomp: Check,
    /// Whether the run's network proxy starts (with the policy's hosts when it allows some).
    pub network_proxy: Check,
    /// The compiler that built this binary.
    pub toolchain: Toolchain,
    /// Where the database would go.
    pub database: DatabaseInfo,
    /// The policy a run would read.
    pub policy: PolicyInfo,
    /// The promises `--require` named that do not hold here, each with why (empty: all hold).
    pub required_not_held: Vec<PromiseCheck>,
}

impl DoctorReport {
    /// Whether every required promise holds (the run mode resolved, and none is missing).
    pub fn requirements_met(&self) -> bool {
        self.required_not_held.is_empty()
    }
}

/// Checks this machine for `session`'s workspace: `sandbox` is `--sandbox` (else the policy's
/// mode), `db_named_by` what named the database (`--db`, `ACODE_DB`), `required` the promises
/// that must hold.
pub fn diagnose(
    session: &Session,
    sandbox: Option<SandboxMode>,
    db_named_by: Option<&str>,
    required: &[Promise],
) -> Result<DoctorReport, DoctorError> {
    check_proc()?;
    let ws = session.workspace();
    let (policy, policy_info) = match session.policy() {
        Ok(p) => {
            let detail = describe_policy(&p);
            (p, true_policy(session, detail))
        }
        Err(e) => (
            Policy::default(),
            PolicyInfo {
                path: session.policy_path(),
                ok: false,
                detail: format!("{e}; a run here is refused (exit 2)"),
            },
        ),
    };

    let modes = mode_checks(ws, &policy);

    let (auto, auto_reason) = match OsSandbox::resolve(SandboxMode::Auto, ws, &policy.limits) {
        Ok(sb) => (sb.describe(), sb.fallback().map(str::to_string)),
        Err(e) => (format!("(refused: {e})"), None),
    };

    let requested = match sandbox {
        Some(SandboxMode::Auto) | None => policy.sandbox,
        Some(m) => m,
    };
    // The rule `run` applies (SandboxWeakened): a flag cannot ask for less than the policy.
    let weakened = (requested != SandboxMode::Auto
        && super::prepared::strength(requested) < super::prepared::strength(policy.sandbox))
    .then(|| {
        format!(
            "the policy asks for the {} sandbox; --sandbox {requested} would weaken it (a run is \
             refused with exit 3)",
            policy.sandbox
        )
    });
    let resolved = OsSandbox::resolve(requested, ws, &policy.limits);
    let proxy = proxy_check(&resolved, &policy, ws);
    let run = run_mode(requested, &resolved, weakened, &policy, ws);
    let required_not_held = not_held(required, &run);
    drop(resolved);

    let (db_path, named_by) = (session.db_path().to_path_buf(), db_named_by);
    Ok(DoctorReport {
        workspace: ws.root().to_path_buf(),
        modes,
        auto,
        auto_reason,
        run,
        seccomp: Check::of(crate::process::seccomp::availability()),
        network_proxy: Check::of(proxy),
        toolchain: Toolchain::of_this_binary(),
        database: DatabaseInfo {
            exists: db_path.exists(),
            path: db_path,
            named_by: named_by.unwrap_or("the workspace's default").to_string(),
        },
        policy: policy_info,
        required_not_held,
    })
}

/// Whether each sandbox mode can be set up here, and what it is.
fn mode_checks(ws: &crate::workspace::Workspace, policy: &Policy) -> Vec<ModeCheck> {
    let mut modes = Vec::new();
    for mode in [SandboxMode::Bwrap, SandboxMode::Landlock, SandboxMode::None] {
        let check = match OsSandbox::resolve(mode, ws, &policy.limits) {
            Ok(sb) => ModeCheck {
                mode: mode.as_str().to_string(),
                works: true,
                detail: match (mode, sb.bwrap(), sb.landlock_abi()) {
                    (SandboxMode::Bwrap, Some(b), Some(abi)) => format!(
                        "{} starts a sandbox; Landlock ABI {abi} inside (network and scopes)",
                        b.display()
                    ),
                    (SandboxMode::Bwrap, Some(b), None) => format!(
                        "{} starts a sandbox; no Landlock inside on this kernel",
                        b.display()
                    ),
                    (SandboxMode::Landlock, _, Some(abi)) => {
                        format!("Landlock ABI {abi}: the ruleset builds")
                    }
                    _ => "no OS sandbox: commands run with this user's rights".to_string(),
                },
            },
            Err(e) => ModeCheck {
                mode: mode.as_str().to_string(),
                works: false,
                detail: e.to_string(),
            },
        };
        modes.push(check);
    }

    modes
}

/// What a run here gets for `requested`: refused when the flag would weaken the policy
/// (`weakened`), else the sandbox resolved (or why not), whether a command starts in it and the
/// promises it holds.
fn run_mode(
    requested: SandboxMode,
    resolved: &Result<OsSandbox, crate::sandbox::SandboxSetupError>,
    weakened: Option<String>,
    policy: &Policy,
    ws: &crate::workspace::Workspace,
) -> RunMode {
    match (resolved, weakened) {
        (_, Some(why)) => RunMode {
            requested: requested.as_str().to_string(),
            mode: None,
            landlock_abi: None,
            reason: None,
            error: Some(why.clone()),
            command_starts: Check {
                ok: false,
                detail: "no sandbox to start it in".to_string(),
            },
            promises: Promise::ALL
                .into_iter()
                .map(|p| promise_check(p, Some(format!("a run here is refused: {why}"))))
                .collect(),
        },
        (Ok(sb), None) => {
            let allows_hosts = !policy.network.is_empty();
            RunMode {
                requested: requested.as_str().to_string(),
                mode: Some(sb.mode().as_str().to_string()),
                landlock_abi: sb.landlock_abi(),
                reason: sb.fallback().map(str::to_string),
                error: None,
                command_starts: Check::of(command_starts(sb, ws)),
                promises: Promise::ALL
                    .into_iter()
                    .map(|p| promise_check(p, p.gap(sb.mode(), sb.landlock_abi(), allows_hosts)))
                    .collect(),
            }
        }
        (Err(e), None) => RunMode {
            requested: requested.as_str().to_string(),
            mode: None,
            landlock_abi: None,
            reason: None,
            error: Some(e.to_string()),
            command_starts: Check {
                ok: false,
                detail: "no sandbox to start it in".to_string(),
            },
            promises: Promise::ALL
                .into_iter()
                .map(|p| promise_check(p, Some(format!("a run here is refused: {e}"))))
                .collect(),
        },
    }
}

/// The promises in `required` that a run in `run` does not hold, each with why.
fn not_held(required: &[Promise], run: &RunMode) -> Vec<PromiseCheck> {
    // A promise counts as held only where a command actually starts under the mode.
    required
        .iter()
        .filter_map(|p| {
            let check = run.promises.iter().find(|c| c.name == p.name())?;
            if !check.holds {
                Some(check.clone())
            } else if !run.command_starts.ok {
                Some(promise_check(
                    *p,
                    Some(format!(
                        "no command starts under {}: {}",
                        run.mode.as_deref().unwrap_or("the sandbox"),
                        run.command_starts.detail
                    )),
                ))
            } else {
                None
            }
        })
        .collect()
}

fn promise_check(p: Promise, gap: Option<String>) -> PromiseCheck {
    PromiseCheck {
        name: p.name().to_string(),
        what: p.what().to_string(),
        holds: gap.is_none(),
        why_not: gap,
    }
}

fn true_policy(session: &Session, detail: String) -> PolicyInfo {
    PolicyInfo {
        path: session.policy_path(),
        ok: true,
        detail,
    }
}

/// The policy in brief: the mode it asks for, the hosts it allows, its limits.
fn describe_policy(p: &Policy) -> String {
    let hosts = if p.network.is_empty() {
        "no host allowed".to_string()
    } else {
        "hosts allowed (network.allow)".to_string()
    };
    format!(
        "sandbox {}; {hosts}; limits per command: {}",
        p.sandbox,
        crate::sandbox::CommandLimits::from_policy(&p.limits).describe()
    )
}

/// Starts the runner's own binary (its forwarder's probe, which prints a fixed answer) under
/// `sandbox` as a step's command is started: bwrap, the Landlock ruleset, the seccomp filter and
/// the limits applied in a real child.
fn command_starts(sandbox: &OsSandbox, ws: &crate::workspace::Workspace) -> Result<String, String> {
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find the runner's own binary: {e}"))?;
    let mut spec = CommandSpec::new(
        crate::net::forward::probe_argv(&exe),
        ws.root().to_path_buf(),
    );
    spec.program = Some(exe.clone());
    spec.program_roots = exe.parent().map(Path::to_path_buf).into_iter().collect();
    spec.timeout = Duration::from_secs(30);
    spec.kill_grace = Duration::from_millis(200);
    let _guard = sandbox
        .prepare(&mut spec, ws)
        .map_err(|e| format!("the sandbox cannot be set up for a command: {e}"))?;
    let out = crate::process::run(&spec, &AtomicBool::new(false), &|_| {})
        .map_err(|e| format!("a command cannot start: {e}"))?;
    if crate::net::forward::is_probe_answer(&out.stdout.text) {
        Ok(format!(
            "a command starts and runs under {}",
            sandbox.describe()
        ))
    } else {
        Err(format!(
            "a command under {} did not run ({}); it said: {}",
            sandbox.describe(),
            match (out.exit_code, out.signal) {
                (Some(c), _) => format!("exit code {c}"),
                (None, Some(s)) => format!("killed by signal {s}"),
                _ => "no exit status".to_string(),
            },
            out.stderr.text.trim()
        ))
    }
}

/// Whether the run's proxy starts: with the policy's hosts when it allows some (their
/// `registry:` entries resolved, under bwrap the forwarder probed), else a proxy allowing nothing.
fn proxy_check(
    resolved: &Result<OsSandbox, crate::sandbox::SandboxSetupError>,
    policy: &Policy,
    ws: &crate::workspace::Workspace,
) -> Result<String, String> {
    if !policy.network.is_empty() {
        let mode = resolved
            .as_ref()
            .map(|s| s.mode())
            .unwrap_or(SandboxMode::None);
        let sb = OsSandbox::resolve(mode, ws, &policy.limits)
            .and_then(|s| s.with_network(&policy.network, ws))
            .map_err(|e| e.to_string())?;
        return Ok(sb.describe_network());
    }
    let dir = crate::sandbox::scratch::create("doctor-")
        .map_err(|e| format!("cannot create a temporary directory for the proxy: {e}"))?;
    let started = crate::net::proxy::Proxy::start(Vec::new(), &dir)
        .map(|p| p.port())
        .map_err(|e| format!("cannot start the network proxy: {e}"));
    crate::sandbox::scratch::remove(&dir);
    let port = started?;
    if resolved
        .as_ref()
        .is_ok_and(|s| s.mode() == SandboxMode::Bwrap)
    {
        let exe = std::env::current_exe()
            .map_err(|e| format!("cannot find the runner's own binary: {e}"))?;
        crate::net::forward::probe(&exe)?;
    }
    Ok(format!(
        "starts (127.0.0.1:{port} and a UNIX socket); the policy allows no host, so a run starts none"
    ))
}
