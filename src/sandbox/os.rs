//! The OS sandbox a run uses, resolved once at its start: which mode actually runs (`--sandbox
//! auto|landlock|bwrap|none`), the Landlock ABI, the bwrap binary, the prepared Landlock rules, the
//! resource limits and the run's private temp directory. Tools get it through
//! [`crate::tools::ToolContext`] and call [`OsSandbox::prepare`] on every command they start, so
//! one value decides how every child process is confined.
//!
//! `auto` prefers bwrap (mount namespaces give read-only protected paths and a private `/tmp`),
//! then Landlock, then nothing — with a warning.
//!
//! Landlock inside bwrap: a Landlock domain that handles *filesystem* access forbids `mount(2)`,
//! so the full ruleset cannot be applied before `exec`ing bwrap (and applying it after bwrap set up
//! its namespaces would need a helper program inside the sandbox: one more `exec` per command). A
//! domain that handles only the network and the scopes does not forbid mounts, so under bwrap each
//! command gets that part (ABI ≥ 4: no TCP connect/bind, even if the command finds its way back
//! into the host's network namespace; ABI ≥ 6: no signals or abstract sockets out; and, as for
//! every Landlock domain, no ptrace of the runner). The filesystem part is bwrap's mounts.

use std::path::{Path, PathBuf};
use std::time::Duration;

use thiserror::Error;

use crate::net::forward;
use crate::net::proxy::Proxy;
use crate::policy::network::{Entry, NetworkPolicy, NetworkRequest};
use crate::policy::{Limits, SandboxMode, credentials};
use crate::process::supervisor::Supervisor;
use crate::process::{CommandOutput, CommandSpec, PrivateTemp, Resource, Rlimit, seccomp};
use crate::sandbox::bwrap::{self, BwrapSpec, Forward};
use crate::sandbox::landlock::{self, LandlockRules};
use crate::workspace::guard::ProtectedGuard;
use crate::workspace::nested_git::NestedGit;
use crate::workspace::{Workspace, nested_git};

/// A requested sandbox that cannot be set up (the run does not start).
#[derive(Debug, Error)]
pub enum SandboxSetupError {
    /// The requested mode is unavailable on this machine.
    #[error("--sandbox {mode}: {why}")]
    Unavailable {
        /// The mode that was asked for.
        mode: SandboxMode,
        /// Why it cannot run, and what to do.
        why: String,
    },
    /// The network the policy allows cannot be set up (a `registry:` entry that resolves to
    /// nothing, a proxy that cannot listen, a binary that cannot forward under bwrap).
    #[error("network: {0}")]
    Network(String),
    /// The private temp directory could not be created.
    #[error("cannot create the run's private temp directory {path}: {source}")]
    TempDir {
        /// The directory.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Resource limits for a command (see [`Limits`]), applied in every mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandLimits {
    /// MiB of address space; 0 = not limited.
    pub memory_mb: u64,
    /// MiB per written file; 0 = not limited.
    pub file_size_mb: u64,
    /// CPU seconds; `None` = the command's timeout.
    pub cpu_s: Option<u64>,
    /// Open descriptors; 0 = not limited.
    pub open_files: u64,
}

impl CommandLimits {
    /// The limits the policy sets.
    pub fn from_policy(limits: &Limits) -> Self {
        CommandLimits {
            memory_mb: limits.memory_mb,
            file_size_mb: limits.file_size_mb,
            cpu_s: limits.cpu_s,
            open_files: limits.open_files,
        }
    }

    /// CPU seconds for a command whose wall-clock limit is `timeout`.
    pub fn cpu_seconds(&self, timeout: Duration) -> u64 {
        self.cpu_s
            .unwrap_or_else(|| timeout.as_secs() + u64::from(timeout.subsec_nanos() > 0))
            .max(1)
    }

    /// The `setrlimit` calls for a command whose wall-clock limit is `timeout`. CPU gets a hard
    /// limit one second above the soft one, so the process first receives `SIGXCPU` (which names
    /// the limit) and only then `SIGKILL`.
    pub fn rlimits(&self, timeout: Duration) -> Vec<Rlimit> {
        const MB: u64 = 1024 * 1024;
        let mut out = Vec::with_capacity(5);
        let mut both = |resource, value: u64| out.push(Rlimit::capped(resource, value, value));
        if self.memory_mb > 0 {
            both(Resource::AddressSpace, self.memory_mb.saturating_mul(MB));
        }
        if self.file_size_mb > 0 {
            both(Resource::FileSize, self.file_size_mb.saturating_mul(MB));
        }
        if self.open_files > 0 {
            both(Resource::OpenFiles, self.open_files);
        }
        both(Resource::Core, 0);
        let cpu = self.cpu_seconds(timeout);
        out.push(Rlimit::capped(Resource::Cpu, cpu, cpu.saturating_add(1)));
        out
    }

    /// One line for the run header.
    pub fn describe(&self) -> String {
        let mb = |v: u64, what: &str| {
            if v == 0 {
                format!("{what} unlimited")
            } else {
                format!("{what} {v} MiB")
            }
        };
        let cpu = match self.cpu_s {
            Some(s) => format!("cpu {s} s"),
            None => "cpu = step timeout".to_string(),
        };
        let files = if self.open_files == 0 {
            "open files unlimited".to_string()
        } else {
            format!("{} open files", self.open_files)
        };
        format!(
            "{}, {}, {cpu}, {files}, no core dumps",
            mb(self.memory_mb, "memory"),
            mb(self.file_size_mb, "file size")
        )
    }

    /// Why `out` ended, when the evidence points at one of these limits: a message naming the
    /// policy setting (SPEC §6: "a command stopped by one fails with the limit named").
    pub fn hit(&self, out: &CommandOutput, timeout: Duration) -> Option<String> {
        if out.timed_out || out.interrupted || out.exit_code == Some(0) {
            return None;
        }
        let stderr = &out.stderr.text;
        if out.signal == Some(libc::SIGXFSZ)
            || (self.file_size_mb > 0 && stderr.contains("File too large"))
        {
            return Some(format!(
                "stopped by the file size limit: a file reached limits.file_size_mb = {} MiB",
                self.file_size_mb
            ));
        }
        if out.signal == Some(libc::SIGXCPU) {
            return Some(format!(
                "stopped by the CPU time limit: limits.cpu_s = {} s",
                self.cpu_seconds(timeout)
            ));
        }
        if self.memory_mb > 0 {
            const EVIDENCE: &[&str] = &[
                "MemoryError",
                "Cannot allocate memory",
                "memory allocation of",
                "out of memory",
                "Out of memory",
                "std::bad_alloc",
                "failed to allocate",
                "mmap failed",
            ];
            if EVIDENCE.iter().any(|e| stderr.contains(e)) {
                return Some(format!(
                    "ran out of memory under the memory limit: limits.memory_mb = {} MiB",
                    self.memory_mb
                ));
            }
            if matches!(
                out.signal,
                Some(libc::SIGABRT | libc::SIGSEGV | libc::SIGBUS)
            ) {
                return Some(format!(
                    "killed by signal {} — possibly the memory limit (limits.memory_mb = {} MiB)",
                    out.signal.unwrap_or(0),
                    self.memory_mb
                ));
            }
        }
        None
    }
}

/// The OS sandbox of a run (see the module docs).
#[derive(Debug)]
pub struct OsSandbox {
    requested: SandboxMode,
    mode: SandboxMode,
    landlock_abi: Option<u32>,
    bwrap: Option<PathBuf>,
    landlock: Option<LandlockRules>,
    /// Under bwrap: the network-and-scopes-only ruleset (see the module docs).
    bwrap_landlock: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
    /// Under Landlock alone: the scopes-only ruleset a supervisor's shims enter, in which each
    /// command's ruleset nests ([`crate::process::supervisor`]); `None` when commands start from the runner.
    landlock_shim: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
    limits: CommandLimits,
    temp: Option<PathBuf>,
    notes: Vec<String>,
    warning: Option<String>,
    /// Why `auto` did not choose bwrap (its probe's classified refusal, [`bwrap::Refusal`]).
    fallback: Option<String>,
    /// Extra read-only paths bwrap shows commands (the policy's `read_paths`).
    read_paths: Vec<PathBuf>,
    /// The run's proxy, when the policy allows hosts.
    proxy: Option<std::sync::Arc<Proxy>>,
    /// Under bwrap with a proxy: the forwarder's binary and the proxy's socket.
    forward: Option<Forward>,
    /// The private directory holding the proxy's socket under bwrap (removed with the sandbox).
    net_dir: Option<PathBuf>,
    /// Where package clients keep what they download when the network is allowed: `CARGO_HOME`,
    /// npm's and pip's caches (see [`OsSandbox::with_network`]).
    downloads: Option<PathBuf>,
    /// Under bwrap, whether commands share sandboxes run by a supervisor ([`crate::process::supervisor`]):
    /// needs Landlock's signal scoping inside bwrap and a runner binary that can supervise.
    supervise: bool,
    /// The run's supervised sandboxes by their mounts ([`BwrapSpec::mount_key`]), most recently
    /// used first, at most [`SUPERVISORS`].
    supervisors: std::sync::Mutex<Vec<(Vec<String>, std::sync::Arc<Supervisor>)>>,
    /// Set when a supervisor did not start: the run's later commands do not try again (each try
    /// may wait for a sandbox that never says it is ready) and get a bwrap each.
    supervisor_failed: std::sync::atomic::AtomicBool,
    /// Under bwrap and Landlock: the workspace's `.git` entries, kept current between commands instead of a
    /// walk per command ([`NestedGit`]); started by the first command.
    nested_git: std::sync::OnceLock<NestedGit>,
    /// Under Landlock: commands' temporary directories, emptied, for later commands
    /// ([`PrivateTemp::from_pool`]): a command in a directory an earlier one had gets the ruleset
    /// already built for it.
    temp_pool: std::sync::Arc<std::sync::Mutex<Vec<PathBuf>>>,
    /// Where a credential is persisted in the workspace's `.git/config` (its keys, no value), for
    /// the header ([`crate::policy::credentials`]); empty when none is.
    git_credentials: Vec<String>,
    /// Under bwrap: the private directory holding the sanitised copies of `.git/config` commands
    /// see instead of it, made when the first is needed (removed with the sandbox).
    git_config_copies: std::sync::OnceLock<PathBuf>,
    /// What a `registry:` entry's client was configured with, for commands (a mirror's URL without
    /// its credentials: [`crate::policy::host::registries::Resolved::env`]); set where a command's
    /// environment does not already hold it.
    client_env: Vec<(String, String)>,
}

/// How many sandboxes with different mounts a run keeps (plans alternate between a few
/// programs whose installations differ; each sandbox costs one idle process).
const SUPERVISORS: usize = 4;
/// The lowest Landlock ABI with signal scoping, which the supervisor relies on.
const SCOPED_SIGNALS_ABI: u32 = 6;
/// Set to `off` to start one bwrap per command, as before the supervisor (for comparison, or if
/// the supervisor misbehaves somewhere).
pub const SUPERVISOR_VAR: &str = "ACODE_SANDBOX_SUPERVISOR";

impl OsSandbox {
    /// No OS sandbox, default limits, no temp directory: for validation (which starts nothing) and
    /// for library users and tests that confine nothing.
    pub fn none() -> Self {
        OsSandbox {
            requested: SandboxMode::None,
            mode: SandboxMode::None,
            landlock_abi: None,
            bwrap: None,
            landlock: None,
            bwrap_landlock: None,
            landlock_shim: None,
            limits: CommandLimits::from_policy(&Limits::default()),
            temp: None,
            notes: Vec::new(),
            warning: None,
            fallback: None,
            read_paths: Vec::new(),
            proxy: None,
            forward: None,
            net_dir: None,
            downloads: None,
            supervise: false,
            supervisors: std::sync::Mutex::new(Vec::new()),
            supervisor_failed: std::sync::atomic::AtomicBool::new(false),
            nested_git: std::sync::OnceLock::new(),
            temp_pool: std::sync::Arc::new(std::sync::Mutex::new(Vec::new())),
            git_credentials: Vec::new(),
            git_config_copies: std::sync::OnceLock::new(),
            client_env: Vec::new(),
        }
    }

    /// Starts the run's proxy when `network` allows hosts (resolving `registry:` entries from the
    /// clients' configuration), and lets commands reach it: under Landlock by a TCP connect rule
    /// for its port, under bwrap through the forwarder and the proxy's UNIX socket. No host allowed
    /// → nothing changes (no proxy, no variables, the network stays off).
    pub fn with_network(
        mut self,
        network: &NetworkPolicy,
        workspace: &Workspace,
    ) -> Result<OsSandbox, SandboxSetupError> {
        if network.is_empty() {
            return Ok(self);
        }
        let failed = |why: String| SandboxSetupError::Network(why);
        let mut rules = Vec::new();
        for entry in network.entries().map_err(failed)? {
            match entry {
                Entry::Host(rule) => rules.push(rule),
                Entry::Registry(r) => {
                    let resolved = r.resolve().map_err(failed)?;
                    rules.extend(resolved.rules);
                    set_env(&mut self.client_env, &resolved.env);
                }
            }
        }
        let dir = match &self.temp {
            Some(t) => t.clone(),
            None => {
                let d = make_temp_dir()?;
                self.net_dir = Some(d.clone());
                d
            }
        };
        let proxy = Proxy::start(rules, &dir)
            .map_err(|e| failed(format!("cannot start the network proxy: {e}")))?;
        self.downloads = Some(
            downloads_dir(&dir)
                .map_err(|e| failed(format!("cannot create the downloads directory: {e}")))?,
        );
        let port = proxy.port();
        match self.mode {
            SandboxMode::Landlock => {
                if let Some(rules) = self.landlock.take() {
                    self.landlock = Some(
                        LandlockRules::new(rules.abi(), self.downloads.iter().cloned().collect())
                            .with_tcp_ports(&[port], &[])
                            .with_read_paths(&self.read_paths),
                    );
                }
            }
            SandboxMode::Bwrap => {
                let exe = std::env::current_exe()
                    .map_err(|e| failed(format!("cannot find the runner's own binary: {e}")))?;
                forward::probe(&exe).map_err(failed)?;
                if let (Some(abi), Some(b)) = (self.landlock_abi, self.bwrap.clone()) {
                    let inside = [forward::INSIDE_PORT];
                    let rules =
                        LandlockRules::new(abi, Vec::new()).with_tcp_ports(&inside, &inside);
                    self.bwrap_landlock = landlock_inside_bwrap(&rules, &b, workspace);
                    if self.bwrap_landlock.is_none() {
                        return Err(failed(
                            "the Landlock ruleset with the forwarder's port does not start under bwrap"
                                .to_string(),
                        ));
                    }
                }
                self.forward = Some(Forward {
                    exe,
                    socket: proxy.socket_path().to_path_buf(),
                });
            }
            SandboxMode::None | SandboxMode::Auto => {}
        }
        self.proxy = Some(std::sync::Arc::new(proxy));
        self.notes = self.describe_notes();
        Ok(self)
    }

    /// The run's proxy, when the policy allows hosts.
    pub fn proxy(&self) -> Option<&Proxy> {
        self.proxy.as_deref()
    }

    /// The requests the command of `spec` made through the proxy (it has exited), to be recorded
    /// on its execution.
    pub fn collect_network(&self, spec: &CommandSpec) -> Vec<NetworkRequest> {
        match (&self.proxy, &spec.network_token) {
            (Some(p), Some(t)) => p.finish(t),
            _ => Vec::new(),
        }
    }

    /// Adds the policy's `read_paths` to what commands can see (read-only), under bwrap and
    /// Landlock alike ([`crate::policy::view`]).
    pub fn with_read_paths(mut self, paths: &[PathBuf]) -> Self {
        self.read_paths = paths.to_vec();
        if let Some(rules) = self.landlock.take() {
            self.landlock = Some(rules.with_read_paths(paths));
        }
        self
    }

    /// A shared [`OsSandbox::none`] for contexts that start no command (plan validation) and for
    /// tests, so they need not own one.
    pub fn unconfined() -> &'static OsSandbox {
        static NONE: std::sync::OnceLock<OsSandbox> = std::sync::OnceLock::new();
        NONE.get_or_init(OsSandbox::none)
    }

    /// Resolves `requested` on this machine for `workspace` (see the module docs): `landlock` and
    /// `bwrap` fail closed when unavailable; `auto` falls back and says so in [`Self::warning`].
    /// For Landlock (and none) a private temp directory is created for the run's commands.
    pub fn resolve(
        requested: SandboxMode,
        workspace: &Workspace,
        limits: &Limits,
    ) -> Result<OsSandbox, SandboxSetupError> {
        let unavailable = |why: String| SandboxSetupError::Unavailable {
            mode: requested,
            why,
        };
        let mut sb = OsSandbox::none();
        sb.requested = requested;
        sb.limits = CommandLimits::from_policy(limits);
        let abi = landlock::kernel_abi();
        let no_landlock = "the kernel has no Landlock (it needs Linux ≥ 5.13 with `landlock` in the \
                           active LSMs, see /sys/kernel/security/lsm)";
        // Where bwrap starts with the network-and-scopes ruleset applied, it works without it
        // too: one start of bwrap answers both questions (the plain probe runs only when that
        // one fails, to say why).
        let with_landlock = match (requested, abi) {
            (SandboxMode::Bwrap | SandboxMode::Auto, Some(abi)) => {
                bwrap::find_on_path().and_then(|b| {
                    landlock_inside_bwrap(&LandlockRules::new(abi, Vec::new()), &b, workspace)
                        .map(|fd| (b, fd))
                })
            }
            _ => None,
        };
        match requested {
            SandboxMode::None => {}
            SandboxMode::Bwrap | SandboxMode::Auto if with_landlock.is_some() => {
                if let Some((b, fd)) = with_landlock {
                    sb.bwrap = Some(b);
                    sb.bwrap_landlock = Some(fd);
                    sb.mode = SandboxMode::Bwrap;
                }
            }
            SandboxMode::Bwrap => {
                sb.bwrap = bwrap::resolve(SandboxMode::Bwrap).map_err(|why| {
                    unavailable(
                        why.trim_start_matches("--sandbox bwrap: ")
                            .to_string()
                            .replace("choose --sandbox auto or none", "choose another --sandbox"),
                    )
                })?;
                sb.mode = SandboxMode::Bwrap;
            }
            SandboxMode::Landlock => {
                let abi = abi.ok_or_else(|| unavailable(no_landlock.to_string()))?;
                sb.use_landlock(abi, workspace)
                    .map_err(|e| unavailable(e.to_string()))?;
            }
            SandboxMode::Auto => {
                match bwrap_if_usable().inspect_err(|why| sb.fallback = Some(why.clone())) {
                    Ok(b) => {
                        sb.bwrap = Some(b);
                        sb.mode = SandboxMode::Bwrap;
                    }
                    Err(why_not_bwrap) => match abi {
                        Some(abi) => match sb.use_landlock(abi, workspace) {
                            Ok(()) => {
                                sb.warning = Some(format!(
                                    "bubblewrap is not usable ({why_not_bwrap}); commands run under \
                                 Landlock (ABI {abi}) instead"
                                ));
                            }
                            Err(e) => {
                                sb.warning = Some(format!(
                                    "no OS sandbox: bubblewrap is not usable ({why_not_bwrap}) and \
                                 Landlock failed ({e}); commands can write anywhere this user can"
                                ));
                            }
                        },
                        None => {
                            sb.warning = Some(format!(
                                "no OS sandbox: bubblewrap is not usable ({why_not_bwrap}) and {no_landlock}; \
                             commands can write anywhere this user can"
                            ));
                        }
                    },
                }
            }
        }
        if sb.mode == SandboxMode::Bwrap
            && let (Some(abi), Some(b)) = (abi, sb.bwrap.clone())
        {
            if sb.bwrap_landlock.is_none() {
                sb.bwrap_landlock =
                    landlock_inside_bwrap(&LandlockRules::new(abi, Vec::new()), &b, workspace);
            }
            sb.landlock_abi = sb.bwrap_landlock.as_ref().map(|_| abi);
            sb.supervise =
                sb.landlock_abi.is_some_and(|a| a >= SCOPED_SIGNALS_ABI) && supervisor_wanted();
        }
        if sb.mode == SandboxMode::Landlock
            && sb.landlock_abi.is_some_and(|a| a >= SCOPED_SIGNALS_ABI)
            && supervisor_wanted()
        {
            sb.landlock_shim = sb
                .landlock
                .as_ref()
                .and_then(|rules| rules.scopes_only().ok().flatten())
                .map(std::sync::Arc::new);
            sb.supervise = sb.landlock_shim.is_some();
        }
        if sb.mode != SandboxMode::Bwrap && sb.temp.is_none() {
            sb.temp = Some(make_temp_dir()?);
        }
        if let Some((_, found)) = credentials::workspace_git_config(workspace.root()) {
            sb.git_credentials = found.keys;
        }
        sb.notes = sb.describe_notes();
        Ok(sb)
    }

    fn use_landlock(
        &mut self,
        abi: u32,
        workspace: &Workspace,
    ) -> Result<(), landlock::LandlockError> {
        let temp = make_temp_dir().map_err(|e| landlock::LandlockError::new(e.to_string()))?;
        // Each command gets a directory of its own in `temp` (its TMPDIR), not `temp` itself.
        let rules = LandlockRules::new(abi, Vec::new());
        // Built once now so that a kernel that refuses the ruleset fails the run before any step.
        if let Err(e) = rules.ruleset_for(workspace, &[], &[], std::slice::from_ref(&temp)) {
            super::scratch::remove(&temp);
            return Err(e);
        }
        self.temp = Some(temp);
        self.landlock = Some(rules);
        self.landlock_abi = Some(abi);
        self.mode = SandboxMode::Landlock;
        Ok(())
    }

    /// The mode actually used (never `Auto`).
    pub fn mode(&self) -> SandboxMode {
        self.mode
    }

    /// The mode that was asked for.
    pub fn requested(&self) -> SandboxMode {
        self.requested
    }

    /// The Landlock ABI applied to commands, when the mode is Landlock.
    pub fn landlock_abi(&self) -> Option<u32> {
        self.landlock_abi
    }

    /// The bubblewrap binary, when the mode is bwrap.
    pub fn bwrap(&self) -> Option<&Path> {
        self.bwrap.as_deref()
    }

    /// The run's private temp directory (`TMPDIR` of its commands), outside bwrap.
    pub fn temp_dir(&self) -> Option<&Path> {
        self.temp.as_deref()
    }

    /// The resource limits.
    pub fn limits(&self) -> &CommandLimits {
        &self.limits
    }

    /// A fallback `auto` had to take, for a warning on stderr.
    pub fn warning(&self) -> Option<&str> {
        self.warning.as_deref()
    }

    /// Why `auto` chose this mode rather than bwrap: bwrap's refusal, its cause and the fix.
    pub fn fallback(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// The promises of SPEC §6 ("One view in every mode") this mode does not hold here
    /// ([`crate::sandbox::promises::not_held`]), for the run header, `preview` and the CI reports.
    pub fn not_held(&self) -> Vec<String> {
        crate::sandbox::promises::not_held(self.mode, self.landlock_abi, self.proxy.is_some())
    }

    /// The promises of `required` this sandbox does not hold here, each with why (`run
    /// --require`, `doctor --require`).
    pub fn unmet(
        &self,
        required: &[crate::sandbox::promises::Promise],
    ) -> Vec<(crate::sandbox::promises::Promise, String)> {
        crate::sandbox::promises::unmet(
            required,
            self.mode,
            self.landlock_abi,
            self.proxy.is_some(),
        )
    }

    /// What the run header says about the sandbox: what it does not restrict on this kernel, the
    /// limits, and whether the runner's own secrets are exposed.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The mode as shown in the run header: `landlock (ABI 7)`, `bwrap`, `none`.
    pub fn describe(&self) -> String {
        match self.landlock_abi {
            Some(abi) => format!("{} (Landlock ABI {abi})", self.mode),
            None => self.mode.to_string(),
        }
    }

    fn describe_notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        match self.mode {
            SandboxMode::Landlock => {
                notes.push(
                    "commands read only the system directories, the workspace, the toolchain \
                     homes, read_paths and their own program's installation (no home directory, \
                     no credential file), and hold no capability"
                        .to_string(),
                );
                notes.push(
                    "commands write only inside existing workspace entries (not any .git, \
                     .acode, the policy or the plan; no new entries at the root or beside a \
                     nested .git) and their own temp directory"
                        .to_string(),
                );
                if self.supervise {
                    notes.push(
                        "commands start from one supervisor process: each in its own process \
                         group and Landlock domain, and everything it started is killed when it \
                         ends"
                            .to_string(),
                    );
                }
            }
            SandboxMode::None => {
                notes.push("no OS sandbox: commands can write anywhere this user can".to_string());
                // SAFETY: geteuid has no preconditions.
                if unsafe { libc::geteuid() } == 0 {
                    notes.push(
                        "running as root without a sandbox: the runner's secrets (approval key, \
                         LLM keys, its environment) cannot be protected from commands"
                            .to_string(),
                    );
                }
            }
            SandboxMode::Bwrap => {
                match self.landlock_abi {
                    Some(abi) => notes.push(format!(
                        "Landlock inside bwrap: network and scopes only (ABI {abi}); bwrap's \
                         mounts restrict the filesystem"
                    )),
                    None => notes.push("no Landlock inside bwrap on this kernel".to_string()),
                }
                notes.push(if self.supervise {
                    "one bwrap sandbox per set of mounts, shared by the run's commands: each \
                     starts in its own process group and Landlock domain, and everything it \
                     started is killed when it ends"
                        .to_string()
                } else {
                    "one bwrap sandbox per command".to_string()
                });
            }
            SandboxMode::Auto => {}
        }
        if !self.git_credentials.is_empty() {
            notes.push(credentials::git_config_warning(
                &self.git_credentials,
                Some(self.mode == SandboxMode::Bwrap),
            ));
        }
        notes.push(self.describe_network());
        notes.push(format!("limits per command: {}", self.limits.describe()));
        notes
    }

    /// The network line of the run header and `preview`: which hosts, and what the mode enforces.
    pub fn describe_network(&self) -> String {
        let Some(proxy) = &self.proxy else {
            return match self.mode {
                SandboxMode::None => {
                    "network: no host allowed, but without an OS sandbox nothing stops a command"
                        .to_string()
                }
                _ => "network: off (no host allowed; UDP and raw sockets refused)".to_string(),
            };
        };
        let mut hosts: Vec<String> = Vec::new();
        for r in proxy.rules() {
            let host = match &r.pattern {
                crate::policy::network::Pattern::Name(n) => n.clone(),
                crate::policy::network::Pattern::Subdomains(n) => format!("*.{n}"),
                crate::policy::network::Pattern::Ip(ip) => ip.to_string(),
            };
            let mut shown = match r.port {
                Some(p) => format!("{host}:{p}"),
                None => host,
            };
            if r.source.starts_with("registry:") {
                shown.push_str(&format!(" ({})", r.source));
            }
            hosts.push(shown);
        }
        let how = match self.mode {
            SandboxMode::Bwrap => {
                "only through the run's proxy (bwrap: no other address is reachable)".to_string()
            }
            SandboxMode::Landlock => format!(
                "through the run's proxy; Landlock cannot name hosts, so a command may also open \
                 TCP connections to port {} of any host (--sandbox bwrap is exact); UDP and raw \
                 sockets refused",
                proxy.port()
            ),
            _ => "through the run's proxy for clients that honour it; without an OS sandbox a \
                  command can connect anywhere"
                .to_string(),
        };
        format!("network: {} — {how}", hosts.join(", "))
    }

    /// For a failed command whose output shows a refused write or connection under Landlock: a
    /// sentence saying what Landlock allows, so the user is not left guessing why `EACCES`.
    pub fn denial_hint(&self, out: &CommandOutput) -> Option<&'static str> {
        const DENIED: &[&str] = &[
            "Permission denied",
            "PermissionError",
            "EACCES",
            "Operation not permitted",
        ];
        (self.mode == SandboxMode::Landlock
            && !out.success()
            && DENIED.iter().any(|d| out.stderr.text.contains(d)))
        .then_some(
            "under Landlock a command may read only the system directories, the workspace, the \
             toolchain homes, the policy's read_paths and its program's installation (never a \
             home directory or a credential file), and write only inside existing workspace \
             entries other than any .git, .acode, the policy and the plan, and in $TMPDIR; it \
             cannot create entries at the workspace root or in a directory holding a nested .git \
             (create them with a file tool first, or declare them), or open TCP connections",
        )
    }

    /// Confines `spec` (a command about to start in `workspace`): resource limits always; the
    /// bwrap wrapper or the Landlock ruleset per mode; `TMPDIR` set to a directory of the
    /// command's own under Landlock (removed when the spec is dropped), to the run's temp
    /// directory without a sandbox. Returns the protected paths as they are now, the snapshot the bwrap mounts
    /// were made from: the caller checks it with [`ProtectedGuard::after`] once the command has
    /// ended. `Err` when the Landlock ruleset cannot be built (the command must not run).
    pub fn prepare(
        &self,
        spec: &mut CommandSpec,
        workspace: &Workspace,
    ) -> std::io::Result<ProtectedGuard> {
        self.prepare_with(spec, workspace, self.supervise)
    }

    /// [`OsSandbox::prepare`] for a long-lived child started with
    /// [`start`](crate::process::start) (an MCP server): under bwrap it gets a sandbox of its own,
    /// as it lives for the run and its start is paid once, so no shared sandbox is started for it.
    pub fn prepare_service(
        &self,
        spec: &mut CommandSpec,
        workspace: &Workspace,
    ) -> std::io::Result<()> {
        self.prepare_with(spec, workspace, false).map(drop)
    }

    fn prepare_with(
        &self,
        spec: &mut CommandSpec,
        workspace: &Workspace,
        supervise: bool,
    ) -> std::io::Result<ProtectedGuard> {
        let guard = ProtectedGuard::before(workspace);
        spec.setup.rlimits = self.limits.rlimits(spec.timeout);
        match self.mode {
            SandboxMode::Bwrap => {
                if let Some(b) = &self.bwrap {
                    let git = self.git_entries(workspace);
                    let mut wrap = BwrapSpec::with_git(b, workspace, git, guard.approval_files())
                        .read_paths(&self.read_paths)
                        .read_paths(&spec.program_roots);
                    wrap.forward = self.forward.clone();
                    wrap.write_paths.extend(self.downloads.iter().cloned());
                    wrap.files.extend(self.git_config_copy(workspace)?);
                    if supervise && let Some(domain) = &self.bwrap_landlock {
                        spec.supervisor = self.supervisor_for(wrap.mount_key(), || {
                            let exe = crate::process::supervisor::client::runner_exe()?;
                            let mut w = wrap.clone();
                            w.runner_exe = Some(exe.to_path_buf());
                            let argv = w.wrap(
                                &w.workspace,
                                &[
                                    forward::INSIDE_EXE.to_string(),
                                    crate::process::supervisor::SUBCOMMAND.to_string(),
                                ],
                            );
                            Supervisor::start(&w.bwrap, &argv, &[], domain.clone()).ok()
                        });
                    }
                    spec.wrap = Some(std::sync::Arc::new(wrap));
                }
                spec.setup.landlock = self.bwrap_landlock.clone();
                // Where the Landlock domain starts under this bwrap, so does a filter (both need
                // no_new_privs, which a setuid bwrap would not survive).
                if self.bwrap_landlock.is_some() {
                    spec.setup.seccomp = Some(seccomp::filter(seccomp::Kind::Network));
                }
            }
            SandboxMode::Landlock => {
                if let Some(rules) = &self.landlock {
                    // Every `.git` at any depth and the approval files stay unwritable, as bwrap
                    // mounts them read-only.
                    let mut protected = self.git_entries(workspace);
                    protected.extend(guard.approval_files());
                    // A TMPDIR of the command's own, the only one its ruleset grants: commands
                    // side by side cannot read each other's temporary files (removed after it).
                    let mut own = Vec::new();
                    if let Some(temp) = &self.temp {
                        let dir =
                            std::sync::Arc::new(PrivateTemp::from_pool(temp, &self.temp_pool)?);
                        let tmpdir = dir.path().to_string_lossy().into_owned();
                        set_env(&mut spec.env, &[("TMPDIR".to_string(), tmpdir)]);
                        own.push(dir.path().to_path_buf());
                        spec.private_temp = Some(dir);
                    }
                    spec.setup.landlock = Some(rules.ruleset_for(
                        workspace,
                        &protected,
                        &spec.program_roots,
                        &own,
                    )?);
                }
                spec.setup.drop_caps = true;
                // UNIX sockets too: below Landlock ABI 9 nothing else keeps a command from the
                // host's (docker, ssh-agent, D-Bus), which bwrap does not show.
                spec.setup.seccomp = Some(seccomp::filter(seccomp::Kind::Landlock));
                if supervise && let Some(domain) = &self.landlock_shim {
                    // One supervisor for the run: there are no mounts to tell sandboxes apart.
                    spec.supervisor = self.supervisor_for(Vec::new(), || {
                        let exe = crate::process::supervisor::client::runner_exe()?;
                        let argv = [
                            exe.to_string_lossy().into_owned(),
                            crate::process::supervisor::SUBCOMMAND.to_string(),
                        ];
                        // The running binary itself, even where a build has since replaced the
                        // file at its path (a newer binary may not speak this one's protocol).
                        let running = Path::new("/proc/self/exe");
                        Supervisor::start(running, &argv, &[], domain.clone()).ok()
                    });
                }
            }
            SandboxMode::None | SandboxMode::Auto => {}
        }
        if let Some(proxy) = &self.proxy {
            let token = proxy.new_token();
            let port = if self.forward.is_some() {
                forward::INSIDE_PORT
            } else {
                proxy.port()
            };
            set_env(&mut spec.env, &proxy_env(&Proxy::url(&token, port)));
            spec.network_token = Some(token);
        }
        if let Some(d) = &self.downloads {
            set_env(&mut spec.env, &downloads_env(d));
        }
        for (k, v) in &self.client_env {
            if !spec.env.iter().any(|(name, _)| name == k) {
                spec.env.push((k.clone(), v.clone()));
            }
        }
        if self.mode == SandboxMode::None
            && let Some(temp) = &self.temp
        {
            set_env(
                &mut spec.env,
                &[("TMPDIR".to_string(), temp.to_string_lossy().into_owned())],
            );
        }
        Ok(guard)
    }
}

impl OsSandbox {
    /// The workspace's `.git` entries now, at any depth: followed for the run's workspace
    /// ([`NestedGit`], started by the first command), walked for another.
    fn git_entries(&self, workspace: &Workspace) -> Vec<PathBuf> {
        let git = self
            .nested_git
            .get_or_init(|| NestedGit::new(workspace.root()));
        if git.root() == workspace.root() {
            git.entries()
        } else {
            nested_git::walk(workspace.root())
        }
    }

    /// Under bwrap, when the workspace's `.git/config` holds a credential: the sanitised copy to
    /// mount over it, `(copy, .git/config)`. The copy is named after its content, so it is written
    /// once per content and a changed configuration gets a new one (and a new mount key).
    fn git_config_copy(
        &self,
        workspace: &Workspace,
    ) -> std::io::Result<Option<(PathBuf, PathBuf)>> {
        use sha2::{Digest, Sha256};
        use std::os::unix::fs::OpenOptionsExt;
        let Some((target, found)) = credentials::workspace_git_config(workspace.root()) else {
            return Ok(None);
        };
        let dir = match self.git_config_copies.get() {
            Some(d) => d.clone(),
            None => {
                let d = make_temp_dir().map_err(std::io::Error::other)?;
                match self.git_config_copies.set(d.clone()) {
                    Ok(()) => d,
                    Err(_) => {
                        // Another command made one first: use that one.
                        super::scratch::remove(&d);
                        self.git_config_copies.get().cloned().unwrap_or(d)
                    }
                }
            }
        };
        let digest = Sha256::digest(found.sanitized.as_bytes());
        let name = crate::util::hex(&digest[..12]);
        let copy = dir.join(format!("git-config-{name}"));
        if !copy.exists() {
            let tmp = dir.join(format!(".{}", uuid::Uuid::new_v4()));
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o444)
                .open(&tmp)?;
            std::io::Write::write_all(&mut f, found.sanitized.as_bytes())?;
            drop(f);
            std::fs::rename(&tmp, &copy)?;
        }
        Ok(Some((copy, target)))
    }

    /// The run's supervisor for commands whose sandbox is `key` (under bwrap, its mounts:
    /// [`BwrapSpec::mount_key`]): one already running, or a new one from `start` (the least
    /// recently used beyond [`SUPERVISORS`] is let go; commands still running in it keep it
    /// alive). `None` when it cannot start: the command is then started by the runner (under
    /// bwrap, in a bwrap of its own), and so are the run's later commands.
    fn supervisor_for(
        &self,
        key: Vec<String>,
        start: impl FnOnce() -> Option<Supervisor>,
    ) -> Option<std::sync::Arc<Supervisor>> {
        let mut all = self.supervisors.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|(_, s)| s.alive());
        if let Some(i) = all.iter().position(|(k, _)| *k == key) {
            let found = all.remove(i);
            let sup = found.1.clone();
            all.insert(0, found);
            return Some(sup);
        }
        if self
            .supervisor_failed
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return None;
        }
        let Some(sup) = start() else {
            self.supervisor_failed
                .store(true, std::sync::atomic::Ordering::Relaxed);
            return None;
        };
        let sup = std::sync::Arc::new(sup);
        all.insert(0, (key, sup.clone()));
        all.truncate(SUPERVISORS);
        Some(sup)
    }
}

/// The run's downloads directory in `dir`: what package clients fetch goes there, never into the
/// host's caches (a sandboxed command must not plant a crate or a package that later builds on
/// the host would use), and the host's caches are read-only or invisible in the sandbox anyway.
/// `cargo/` is seeded with the host's cargo configuration (its `config.toml`: a source
/// replacement, a mirror), never its credentials (`credentials.toml` is not copied, and a `token`
/// or a URL's userinfo in `config.toml` is left out).
fn downloads_dir(dir: &Path) -> std::io::Result<PathBuf> {
    let downloads = dir.join("downloads");
    for sub in ["cargo", "npm", "pip", "cache"] {
        std::fs::create_dir_all(downloads.join(sub))?;
    }
    let host_cargo = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    if let Some(home) = host_cargo {
        for name in ["config.toml", "config"] {
            let from = home.join(name);
            if std::fs::symlink_metadata(&from).is_ok_and(|m| m.is_file()) {
                // A token or a mirror URL's userinfo stays behind (policy::credentials).
                let (text, _) =
                    credentials::sanitize_cargo_config(&std::fs::read_to_string(&from)?);
                std::fs::write(downloads.join("cargo").join(name), text)?;
            }
        }
    }
    Ok(downloads)
}

/// The variables that send package clients' downloads to `downloads` ([`downloads_dir`]).
fn downloads_env(downloads: &Path) -> Vec<(String, String)> {
    let at = |sub: &str| downloads.join(sub).to_string_lossy().into_owned();
    vec![
        ("CARGO_HOME".to_string(), at("cargo")),
        ("npm_config_cache".to_string(), at("npm")),
        ("PIP_CACHE_DIR".to_string(), at("pip")),
        ("XDG_CACHE_HOME".to_string(), at("cache")),
    ]
}

/// Sets each `(name, value)` in `env`, replacing a value already there.
fn set_env(env: &mut Vec<(String, String)>, values: &[(String, String)]) {
    for (k, v) in values {
        match env.iter_mut().find(|(name, _)| name == k) {
            Some(entry) => entry.1 = v.clone(),
            None => env.push((k.clone(), v.clone())),
        }
    }
}

/// The variables that point the ordinary clients at the proxy `url`: curl, pip, requests, git
/// and npm read the generic ones (either case); cargo, npm and pip have their own too. `NO_PROXY`
/// is empty, so nothing goes around it.
pub fn proxy_env(url: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "http_proxy",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
        "CARGO_HTTP_PROXY",
        "npm_config_proxy",
        "npm_config_https_proxy",
        "PIP_PROXY",
    ]
    .iter()
    .map(|k| (k.to_string(), url.to_string()))
    .collect();
    out.extend(
        ["NO_PROXY", "no_proxy", "npm_config_noproxy"]
            .iter()
            .map(|k| (k.to_string(), String::new())),
    );
    out
}

impl Drop for OsSandbox {
    fn drop(&mut self) {
        // The proxy first: its socket lives in the directories removed below.
        self.proxy = None;
        for dir in self
            .temp
            .iter()
            .chain(self.net_dir.iter())
            .chain(self.git_config_copies.get())
        {
            super::scratch::remove(dir);
        }
    }
}

/// The network-and-scopes ruleset for commands under bwrap, if the kernel has one and bwrap still
/// starts with it applied (a setuid bwrap would not, under `no_new_privs`).
fn landlock_inside_bwrap(
    rules: &LandlockRules,
    bwrap: &Path,
    workspace: &Workspace,
) -> Option<std::sync::Arc<std::os::fd::OwnedFd>> {
    let fd = std::sync::Arc::new(rules.network_and_scopes_only().ok()??);
    let mut probe = CommandSpec::new(vec!["true".to_string()], workspace.root().to_path_buf());
    probe.env = std::env::var("PATH")
        .map(|p| vec![("PATH".to_string(), p)])
        .unwrap_or_default();
    probe.timeout = Duration::from_secs(20);
    probe.kill_grace = Duration::from_millis(200);
    probe.wrap = Some(std::sync::Arc::new(BwrapSpec::new(bwrap, workspace)));
    probe.setup.landlock = Some(fd.clone());
    let ok = crate::process::run(&probe, &std::sync::atomic::AtomicBool::new(false), &|_| {})
        .is_ok_and(|out| out.success());
    ok.then_some(fd)
}

/// Whether commands may go through a supervisor ([`crate::process::supervisor`]): not turned off with
/// [`SUPERVISOR_VAR`], and this binary can run one.
fn supervisor_wanted() -> bool {
    std::env::var(SUPERVISOR_VAR).as_deref() != Ok("off")
        && crate::process::supervisor::client::runner_exe().is_some()
}

/// A working bwrap, or why there is none.
fn bwrap_if_usable() -> Result<PathBuf, String> {
    let b = bwrap::find_on_path().ok_or_else(|| "no `bwrap` on PATH".to_string())?;
    bwrap::probe(&b)?;
    Ok(b)
}

/// Creates `$TMPDIR/acode-run-<uuid>` with mode 0700, locked while this process lives
/// ([`super::scratch`]), by its canonical path.
fn make_temp_dir() -> Result<PathBuf, SandboxSetupError> {
    super::scratch::create("").map_err(|source| SandboxSetupError::TempDir {
        path: std::env::temp_dir()
            .join("acode-run-*")
            .display()
            .to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::run;
    use std::net::TcpListener;
    use std::sync::atomic::AtomicBool;

    /// The kernel's Landlock ABI, or `None` after a named, counted skip (a failure under CI).
    fn landlock_or_skip() -> Option<u32> {
        let abi = landlock::kernel_abi();
        if abi.is_none() {
            crate::testing::skip("Landlock", "the kernel has none");
        }
        abi
    }

    /// A workspace with `.git/hooks`, a `sub/` directory and an existing top-level file, plus a
    /// directory outside it (not under /tmp, to be unlike the run's temp directory).
    fn setup() -> (Workspace, crate::testing::RemoveOnDrop) {
        let base = std::env::temp_dir().join(format!("acode-os-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(base.join(".git/hooks")).unwrap();
        std::fs::create_dir_all(base.join("sub")).unwrap();
        std::fs::write(base.join("top.txt"), "top").unwrap();
        let outside =
            PathBuf::from("/var/tmp").join(format!("acode-outside-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&outside).unwrap();
        // Both removed when the test ends, also when it fails.
        let cleanup = crate::testing::RemoveOnDrop::new(outside).and(&base);
        (Workspace::new(&base).unwrap(), cleanup)
    }

    fn python(sb: &OsSandbox, ws: &Workspace, code: &str) -> CommandOutput {
        let mut spec = CommandSpec::new(
            vec!["python3".into(), "-c".into(), code.into()],
            ws.root().to_path_buf(),
        );
        spec.env = crate::policy::env::child_env(&crate::policy::Policy::default(), &[]);
        // As the command tool does: the program resolved (a pyenv shim to its interpreter) and its
        // installation shown.
        let path = spec
            .env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_str());
        let program =
            crate::policy::host::program::resolve("python3", ws, ws.root(), path).unwrap();
        spec.program = Some(program.exec.clone());
        spec.program_roots = program.roots.clone();
        spec.program_by_name = program.found_by_name;
        spec.timeout = Duration::from_secs(60);
        sb.prepare(&mut spec, ws).unwrap();
        run(&spec, &AtomicBool::new(false), &|_| {}).unwrap()
    }

    fn write(path: &Path) -> String {
        format!("open({:?}, 'w').write('x')", path.to_str().unwrap())
    }

    #[test]
    fn landlock_confines_writes_to_the_workspace_and_the_temp_dir() {
        let Some(abi) = landlock_or_skip() else {
            return;
        };
        let (ws, outside) = setup();
        let sb = OsSandbox::resolve(SandboxMode::Landlock, &ws, &Limits::default()).unwrap();
        assert_eq!(sb.mode(), SandboxMode::Landlock);
        assert_eq!(sb.landlock_abi(), Some(abi));
        let root = ws.root();
        // Denied: outside, inside .git (existing dir and new file), a new top-level entry.
        for target in [
            outside.join("escaped"),
            root.join(".git/hooks/pre-commit"),
            root.join(".git/config"),
            root.join("acode-policy.json"),
            root.join("new-top-level.txt"),
        ] {
            let out = python(&sb, &ws, &write(&target));
            assert_ne!(out.exit_code, Some(0), "{target:?}: {out:?}");
            assert!(
                out.stderr.text.contains("PermissionError"),
                "{target:?}: {out:?}"
            );
            assert!(!target.exists(), "{target:?} was created");
        }
        // Control: the same write outside works without the sandbox.
        let out = python(
            OsSandbox::unconfined(),
            &ws,
            &write(&outside.join("control")),
        );
        assert_eq!(out.exit_code, Some(0), "{out:?}");
        // Allowed: inside existing entries, the temp dir (via TMPDIR), /dev/null.
        let code = "import os, tempfile\n\
                    open('sub/new.txt', 'w').write('in')\n\
                    os.makedirs('sub/a/b', exist_ok=True)\n\
                    open('sub/a/b/c', 'w').write('deep')\n\
                    os.rename('sub/new.txt', 'sub/a/moved.txt')\n\
                    open('top.txt', 'w').write('changed')\n\
                    f = tempfile.NamedTemporaryFile(delete=False)\n\
                    f.write(b'tmp'); f.close()\n\
                    print(f.name)\n\
                    open('/dev/null', 'w').write('discard')";
        let out = python(&sb, &ws, code);
        assert_eq!(out.exit_code, Some(0), "{out:?}");
        let temp = sb.temp_dir().unwrap();
        assert!(
            out.stdout.text.starts_with(temp.to_str().unwrap()),
            "{out:?}"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("sub/a/moved.txt")).unwrap(),
            "in"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("top.txt")).unwrap(),
            "changed"
        );
        drop(outside);
        // The temp dir goes with the sandbox.
        let temp = temp.to_path_buf();
        drop(sb);
        assert!(!temp.exists());
    }

    #[test]
    fn landlock_picks_up_a_top_level_entry_created_between_commands() {
        if landlock_or_skip().is_none() {
            return;
        }
        let (ws, _outside) = setup();
        let sb = OsSandbox::resolve(SandboxMode::Landlock, &ws, &Limits::default()).unwrap();
        let target = ws.root().join("later/f");
        assert_ne!(python(&sb, &ws, &write(&target)).exit_code, Some(0));
        // A file tool (in-process, not confined) creates the directory; the next command may
        // write in it.
        std::fs::create_dir(ws.root().join("later")).unwrap();
        let out = python(&sb, &ws, &write(&target));
        assert_eq!(out.exit_code, Some(0), "{out:?}");
    }

    #[test]
    fn landlock_denies_tcp_signals_and_the_runners_memory() {
        let Some(abi) = landlock_or_skip() else {
            return;
        };
        let (ws, _outside) = setup();
        let sb = OsSandbox::resolve(SandboxMode::Landlock, &ws, &Limits::default()).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let connect = format!(
            "import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=5)\nprint('connected')"
        );
        let out = python(OsSandbox::unconfined(), &ws, &connect);
        assert_eq!(out.stdout.text, "connected\n", "control: {out:?}");
        let out = python(&sb, &ws, &connect);
        if abi >= 4 {
            assert_ne!(out.exit_code, Some(0), "{out:?}");
            assert!(!out.stdout.text.contains("connected"), "{out:?}");
        } else {
            crate::testing::skip(
                "Landlock network rules (ABI 4)",
                &format!("the kernel has ABI {abi}; the TCP half did not run"),
            );
        }
        // The parent's (this test process's) memory is out of reach (ptrace scoping).
        let me = std::process::id();
        let read = format!("print(len(open('/proc/{me}/mem', 'rb').read(16)))");
        let out = python(&sb, &ws, &read);
        assert_ne!(out.exit_code, Some(0), "{out:?}");
        assert!(out.stderr.text.contains("PermissionError"), "{out:?}");
        if abi >= 6 {
            let kill = format!("import os\nos.kill({me}, 0)\nprint('signalled')");
            let out = python(&sb, &ws, &kill);
            assert!(!out.stdout.text.contains("signalled"), "{out:?}");
        }
    }

    #[test]
    fn limits_are_applied_and_named_in_every_mode() {
        let (ws, _outside) = setup();
        let limits = Limits {
            memory_mb: 256,
            file_size_mb: 1,
            open_files: 64,
            ..Limits::default()
        };
        let mut modes = vec![SandboxMode::None];
        if landlock::kernel_abi().is_some() {
            modes.push(SandboxMode::Landlock);
        }
        for mode in modes {
            let sb = OsSandbox::resolve(mode, &ws, &limits).unwrap();
            let timeout = Duration::from_secs(60);
            // Python ignores SIGXFSZ, so the write fails with EFBIG ("File too large").
            let out = python(&sb, &ws, "open('sub/big', 'wb').write(b'x' * 3_000_000)");
            let why = sb.limits().hit(&out, timeout);
            assert!(
                why.as_deref()
                    .is_some_and(|w| w.contains("file_size_mb = 1")),
                "{mode}: {why:?} {out:?}"
            );
            // dd does not ignore SIGXFSZ: it is killed by it.
            let mut spec = CommandSpec::new(
                ["dd", "if=/dev/zero", "of=sub/big-dd", "bs=1M", "count=3"]
                    .map(String::from)
                    .to_vec(),
                ws.root().to_path_buf(),
            );
            spec.env = crate::policy::env::child_env(&crate::policy::Policy::default(), &[]);
            sb.prepare(&mut spec, &ws).unwrap();
            let out = run(&spec, &AtomicBool::new(false), &|_| {}).unwrap();
            assert_eq!(out.signal, Some(libc::SIGXFSZ), "{mode}: {out:?}");
            let why = sb.limits().hit(&out, timeout);
            assert!(
                why.as_deref()
                    .is_some_and(|w| w.contains("file_size_mb = 1")),
                "{mode}: {why:?} {out:?}"
            );
            let out = python(&sb, &ws, "b = bytearray(600 * 1024 * 1024)");
            let why = sb.limits().hit(&out, timeout);
            assert!(
                why.as_deref()
                    .is_some_and(|w| w.contains("memory_mb = 256")),
                "{mode}: {why:?} {out:?}"
            );
            let out = python(
                &sb,
                &ws,
                "import resource\nprint(resource.getrlimit(resource.RLIMIT_NOFILE)[0], \
                 resource.getrlimit(resource.RLIMIT_CORE)[0], resource.getrlimit(resource.RLIMIT_CPU)[0])",
            );
            assert_eq!(out.stdout.text, "64 0 60\n", "{mode}: {out:?}");
        }
    }

    #[test]
    fn cpu_limit_is_named() {
        let (ws, _outside) = setup();
        let limits = Limits {
            cpu_s: Some(1),
            ..Limits::default()
        };
        let sb = OsSandbox::resolve(SandboxMode::None, &ws, &limits).unwrap();
        let out = python(&sb, &ws, "while True: pass");
        let why = sb.limits().hit(&out, Duration::from_secs(60));
        assert!(
            why.as_deref().is_some_and(|w| w.contains("cpu_s = 1")),
            "{why:?} {out:?}"
        );
    }

    #[test]
    fn under_bwrap_landlock_still_denies_tcp_inside_the_sandbox() {
        let Some(abi) = landlock_or_skip() else {
            return;
        };
        if crate::sandbox::bwrap::bwrap_for_tests().is_none() {
            return;
        }
        let (ws, _outside) = setup();
        let sb = OsSandbox::resolve(SandboxMode::Bwrap, &ws, &Limits::default()).unwrap();
        assert_eq!(sb.mode(), SandboxMode::Bwrap);
        if abi < 4 {
            assert_eq!(sb.landlock_abi(), None);
            crate::testing::skip(
                "Landlock network rules (ABI 4)",
                &format!("the kernel has ABI {abi}"),
            );
            return;
        }
        assert_eq!(sb.landlock_abi(), Some(abi));
        // bwrap's own network namespace has a loopback where binding works; Landlock refuses it.
        let bind = "import socket\ns = socket.socket()\ns.bind(('127.0.0.1', 0))\nprint('bound')";
        let out = python(&sb, &ws, bind);
        assert_ne!(out.exit_code, Some(0), "{out:?}");
        assert!(!out.stdout.text.contains("bound"), "{out:?}");
        // Control: bwrap without the Landlock part binds.
        let mut spec = CommandSpec::new(
            vec!["python3".into(), "-c".into(), bind.into()],
            ws.root().to_path_buf(),
        );
        spec.env = crate::policy::env::child_env(&crate::policy::Policy::default(), &[]);
        sb.prepare(&mut spec, &ws).unwrap();
        spec.setup.landlock = None;
        let out = run(&spec, &AtomicBool::new(false), &|_| {}).unwrap();
        assert_eq!(out.stdout.text, "bound\n", "{out:?}");
    }

    #[test]
    fn requested_modes_fail_closed_or_resolve() {
        let (ws, _outside) = setup();
        let sb = OsSandbox::resolve(SandboxMode::Landlock, &ws, &Limits::default());
        match landlock::kernel_abi() {
            Some(_) => assert_eq!(sb.unwrap().mode(), SandboxMode::Landlock),
            None => assert!(sb.unwrap_err().to_string().contains("Landlock")),
        }
        let auto = OsSandbox::resolve(SandboxMode::Auto, &ws, &Limits::default()).unwrap();
        assert_ne!(auto.mode(), SandboxMode::Auto);
        if auto.mode() != SandboxMode::Bwrap {
            assert!(auto.warning().is_some());
        }
        let none = OsSandbox::resolve(SandboxMode::None, &ws, &Limits::default()).unwrap();
        assert_eq!(none.mode(), SandboxMode::None);
        assert!(none.temp_dir().is_some_and(Path::is_dir));
    }
}
