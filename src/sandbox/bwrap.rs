//! The OS sandbox: bubblewrap (`bwrap`) around every child process.
//!
//! A command under bwrap holds no privilege, whoever runs acode-run (root in a CI container
//! included):
//!
//! - **Namespaces**: a new user namespace mapping only the runner's own uid and gid
//!   (`--unshare-user --uid --gid`), with every capability dropped (`--cap-drop ALL`: the
//!   effective, permitted, inheritable, ambient and bounding sets are empty, also for root) and
//!   further user namespaces disabled (`--disable-userns`); new PID, network, IPC, UTS and (where
//!   the kernel has them) cgroup namespaces. Without capabilities nothing can be remounted or
//!   unmounted, and `setns` back into the host's namespaces is refused; the host's processes are
//!   not visible (a fresh `/proc` for the command's PID namespace), nor its network (not even
//!   loopback) or abstract UNIX sockets (they belong to a network namespace).
//! - **Lifetime**: `--new-session` (no pushing input into our terminal), `--die-with-parent`.
//! - **Filesystem**: not the host's `/`, only what programs need, read-only: `/usr`, the
//!   usr-merge directories (`/bin`, `/sbin`, `/lib*` as the same symlinks or read-only binds as on
//!   the host), `/etc`, the runner's cargo and rustup homes, and the policy's `read_paths`; a
//!   minimal `/dev`, a private tmpfs `/tmp`; the workspace writable; the protected paths that exist
//!   (`.git/`, `.acode/`, the policy file, the database and its journals, the plan and `*.approval`
//!   files) read-only on top. Nothing of `/run`, `/var`, `/home`, `/root` or the host's `/tmp` is
//!   there, so no host UNIX socket (docker, ssh-agent, D-Bus) can be reached. Protected paths
//!   that do not exist yet are handled by [`crate::workspace::guard`]. A workspace `.git/config` holding a
//!   persisted credential is shown as a copy without it ([`BwrapSpec::files`],
//!   [`crate::policy::credentials`]).
//!
//! [`resolve`] is called once at the start of a run to turn `--sandbox none|bwrap|auto` into the
//! bwrap binary to use (or none). It actually *runs* bwrap once with the same flags commands get,
//! because an installed bwrap is not enough: user namespaces may be disabled in a container or by
//! the kernel's configuration.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::policy::SandboxMode;
use crate::process::{ArgvWrapper, CommandSpec, run};
use crate::workspace::Workspace;
use crate::workspace::guard::ProtectedGuard;

/// Namespace, privilege and lifetime flags used both by the probe and by every wrapped command,
/// so that a successful probe means wrapped commands can start.
const ISOLATION: &[&str] = &[
    "--unshare-user",
    "--disable-userns",
    "--cap-drop",
    "ALL",
    "--unshare-pid",
    "--unshare-net",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--die-with-parent",
    "--new-session",
];

/// The flags every sandbox starts with: isolation, identity, the system directories, `/dev`,
/// `/proc`, `/tmp` and the toolchain homes. Computed once per process: the host layout and the
/// runner's environment do not change during a run, and a run may start hundreds of commands.
fn base_args() -> &'static [String] {
    static BASE: OnceLock<Vec<String>> = OnceLock::new();
    BASE.get_or_init(|| {
        let mut out: Vec<String> = ISOLATION.iter().map(|f| f.to_string()).collect();
        // SAFETY: geteuid/getegid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        out.extend([
            "--uid".into(),
            uid.to_string(),
            "--gid".into(),
            gid.to_string(),
        ]);
        for dir in crate::policy::host::dirs::SYSTEM_DIRS {
            match std::fs::symlink_metadata(dir) {
                Ok(m) if m.is_symlink() => {
                    if let Ok(target) = std::fs::read_link(dir) {
                        out.extend(["--symlink".into(), lossy(&target), dir.to_string()]);
                    }
                }
                Ok(m) if m.is_dir() => {
                    out.extend(["--ro-bind".into(), dir.to_string(), dir.to_string()]);
                }
                _ => {}
            }
        }
        // /proc read-only: when the runner is root, the command's uid is host uid 0 without
        // capabilities, and the kernel lets uid 0 write root-owned sysctls (core_pattern) by file
        // mode alone; bwrap covers /proc/sys only when it can see that it is writable.
        out.extend(
            [
                "--dev",
                "/dev",
                "--proc",
                "/proc",
                "--remount-ro",
                "/proc",
                "--tmpfs",
                "/tmp",
            ]
            .map(String::from),
        );
        // After the tmpfs /tmp, so a toolchain home under /tmp is not hidden by it.
        for home in crate::policy::host::dirs::toolchain_homes() {
            let h = lossy(home);
            out.extend(["--ro-bind".into(), h.clone(), h]);
        }
        out
    })
}

/// The flags that hide the UNIX sockets found in `/etc` at the first call behind `/dev/null`: a
/// read-only mount does not stop `connect`. Each is checked again (one `lstat`, usually for no
/// socket at all) so that one removed since does not make bwrap fail on a missing mount point.
/// (/usr and the toolchain homes are too large to walk at every run start; only root can put a
/// socket in /usr, and the homes are the runner's own.)
fn socket_masks() -> impl Iterator<Item = String> {
    use std::os::unix::fs::FileTypeExt;
    static SOCKETS: OnceLock<Vec<PathBuf>> = OnceLock::new();
    SOCKETS
        .get_or_init(|| sockets_under(Path::new("/etc")))
        .iter()
        .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_socket()))
        .flat_map(|p| ["--ro-bind".to_string(), "/dev/null".to_string(), lossy(p)])
}

/// The UNIX sockets beneath `dir` (not following symlinks).
fn sockets_under(dir: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_socket())
        .map(|e| e.into_path())
        .collect()
}

fn lossy(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// How to wrap commands for one workspace: the bwrap binary, the writable root and the paths that
/// stay read-only. Cheap to build; [`process::run`](crate::process::run) applies it.
#[derive(Debug, Clone)]
pub struct BwrapSpec {
    /// The bubblewrap binary returned by [`resolve`].
    pub bwrap: PathBuf,
    /// The workspace root, mounted writable.
    pub workspace: PathBuf,
    /// Paths inside the workspace mounted read-only on top (only those that exist at spawn time).
    pub read_only: Vec<PathBuf>,
    /// Extra host paths mounted read-only (the policy's `read_paths`), skipped when absent.
    pub read_paths: Vec<PathBuf>,
    /// The way out to the run's proxy, when the policy allows hosts: the forwarder runs first.
    pub forward: Option<Forward>,
    /// Host directories mounted writable at the same path (the run's downloads directory).
    pub write_paths: Vec<PathBuf>,
    /// The runner binary, bound read-only where the forwarder's is ([`crate::net::forward::INSIDE_EXE`])
    /// so that the sandbox can run the supervisor ([`crate::process::supervisor`]).
    pub runner_exe: Option<PathBuf>,
    /// Host files mounted read-only over paths inside the workspace, after the protected paths:
    /// `(copy, target)`, the sanitised copy of `.git/config` ([`crate::policy::credentials`]).
    pub files: Vec<(PathBuf, PathBuf)>,
}

/// What the network forwarder inside the sandbox needs (see [`crate::net::forward`]).
#[derive(Debug, Clone)]
pub struct Forward {
    /// The runner binary on the host, bound read-only into the sandbox.
    pub exe: PathBuf,
    /// The proxy's UNIX socket on the host, bound into the sandbox.
    pub socket: PathBuf,
}

impl ArgvWrapper for BwrapSpec {
    fn wrap(&self, cwd: &Path, argv: &[String]) -> Vec<String> {
        BwrapSpec::wrap(self, cwd, argv)
    }
}

impl BwrapSpec {
    /// The spec for `workspace`, with its protected paths and existing approval files read-only.
    pub fn new(bwrap: &Path, workspace: &Workspace) -> Self {
        Self::with_git(
            bwrap,
            workspace,
            crate::workspace::nested_git::walk(workspace.root()),
            ProtectedGuard::before(workspace).approval_files(),
        )
    }

    /// [`Self::new`] with the workspace's `.git` entries (every one, at any depth:
    /// [`crate::workspace::nested_git`]) and approval files already known, each mounted read-only.
    pub fn with_git(
        bwrap: &Path,
        workspace: &Workspace,
        git: Vec<PathBuf>,
        approvals: impl Iterator<Item = PathBuf>,
    ) -> Self {
        let mut read_only = workspace.protected().to_vec();
        read_only.extend(approvals);
        for git in git {
            if !read_only.contains(&git) {
                read_only.push(git);
            }
        }
        BwrapSpec {
            bwrap: bwrap.to_path_buf(),
            workspace: workspace.root().to_path_buf(),
            read_only,
            read_paths: Vec::new(),
            forward: None,
            write_paths: Vec::new(),
            runner_exe: None,
            files: Vec::new(),
        }
    }

    /// Adds host paths commands may read (the policy's `read_paths`); relative ones are ignored
    /// because there is nothing they could be relative to.
    pub fn read_paths(mut self, paths: &[PathBuf]) -> Self {
        self.read_paths
            .extend(paths.iter().filter(|p| p.is_absolute()).cloned());
        self
    }

    /// The full argv that runs `argv` in `cwd` inside the sandbox (see the module docs).
    pub fn wrap(&self, cwd: &Path, argv: &[String]) -> Vec<String> {
        let s = |p: &Path| p.to_string_lossy().into_owned();
        let mut out: Vec<String> = vec![s(&self.bwrap)];
        out.extend(base_args().iter().cloned());
        out.extend(socket_masks());
        for p in &self.read_paths {
            out.extend(["--ro-bind-try".into(), s(p), s(p)]);
        }
        // Credentials inside anything shown stay hidden: an empty tmpfs over a directory,
        // /dev/null over a file (the one decision of what is shown: `crate::policy::view`).
        for cred in
            crate::policy::view::hidden_within(&crate::policy::view::shown(&self.read_paths, &[]))
        {
            match std::fs::symlink_metadata(&cred) {
                Ok(m) if m.is_dir() => out.extend(["--tmpfs".into(), s(&cred)]),
                Ok(_) => out.extend(["--ro-bind".into(), "/dev/null".into(), s(&cred)]),
                Err(_) => {}
            }
        }
        for p in &self.write_paths {
            out.extend(["--bind".into(), s(p), s(p)]);
        }
        let ws = s(&self.workspace);
        out.extend(["--bind".into(), ws.clone(), ws]);
        for p in &self.read_only {
            // A protected database file has journal siblings SQLite writes; protect those too.
            let mut candidates = vec![p.clone()];
            if p.is_file() {
                for suffix in ["-wal", "-shm", "-journal"] {
                    let mut name = p.as_os_str().to_owned();
                    name.push(suffix);
                    candidates.push(PathBuf::from(name));
                }
            }
            for c in candidates.iter().filter(|c| c.exists()) {
                out.extend(["--ro-bind".into(), s(c), s(c)]);
            }
        }
        for (copy, target) in &self.files {
            out.extend(["--ro-bind".into(), s(copy), s(target)]);
        }
        use crate::net::forward::{INSIDE_EXE, INSIDE_PORT, INSIDE_SOCKET, SUBCOMMAND};
        let exe = self.forward.as_ref().map(|f| &f.exe);
        if let Some(exe) = exe.or(self.runner_exe.as_ref()) {
            out.extend([
                "--ro-bind".into(),
                s(&running_binary(exe)),
                INSIDE_EXE.into(),
            ]);
        }
        if let Some(f) = &self.forward {
            out.extend(["--bind".into(), s(&f.socket), INSIDE_SOCKET.into()]);
            out.extend(["--chdir".into(), s(cwd), "--".into()]);
            out.extend([
                INSIDE_EXE.to_string(),
                SUBCOMMAND.to_string(),
                INSIDE_PORT.to_string(),
                INSIDE_SOCKET.to_string(),
                "--".to_string(),
            ]);
        } else {
            out.extend(["--chdir".into(), s(cwd), "--".into()]);
        }
        out.extend(argv.iter().cloned());
        out
    }
}

impl BwrapSpec {
    /// What decides whether two commands can share one sandbox ([`crate::process::supervisor`]): every
    /// mount flag, and the identity (device, inode) of each read-only path, because a path
    /// replaced on the host since a sandbox started is no longer the one its mount holds.
    pub fn mount_key(&self) -> Vec<String> {
        use std::os::unix::fs::MetadataExt;
        let mut key = self.wrap(&self.workspace, &[]);
        for p in &self.read_only {
            if let Ok(m) = std::fs::symlink_metadata(p) {
                key.push(format!("{}:{}", m.dev(), m.ino()));
            }
        }
        key
    }
}

/// The argv that runs `argv` in `cwd` under bwrap for `workspace`; see [`BwrapSpec::wrap`].
pub fn wrap_argv(bwrap: &Path, workspace: &Workspace, cwd: &Path, argv: &[String]) -> Vec<String> {
    BwrapSpec::new(bwrap, workspace).wrap(cwd, argv)
}

/// The first executable `bwrap` on the runner's `PATH`.
pub fn find_on_path() -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("bwrap"))
        .find(|p| {
            p.metadata()
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

/// Runs `bwrap ... true` with the same isolation flags and mounts commands get (all but the
/// workspace); `Err` says why it failed.
pub fn probe(bwrap: &Path) -> Result<(), String> {
    let mut argv: Vec<String> = vec![bwrap.to_string_lossy().into_owned()];
    argv.extend(base_args().iter().cloned());
    argv.extend(socket_masks());
    argv.extend(["--".into(), "true".into()]);
    let mut spec = CommandSpec::new(argv, PathBuf::from("/"));
    spec.env = std::env::var("PATH")
        .map(|p| vec![("PATH".to_string(), p)])
        .unwrap_or_default();
    spec.timeout = Duration::from_secs(20);
    spec.output_cap = 16 * 1024;
    spec.kill_grace = Duration::from_millis(200);
    let out = run(&spec, &AtomicBool::new(false), &|_| {})
        .map_err(|e| format!("cannot run {}: {e}", bwrap.display()))?;
    if out.success() {
        return Ok(());
    }
    let status = match (out.exit_code, out.timed_out) {
        (_, true) => "timed out".to_string(),
        (Some(c), _) => format!("exited with code {c}"),
        (None, _) => format!("was killed by signal {}", out.signal.unwrap_or(0)),
    };
    let stderr = out.stderr.text.trim();
    Err(Refusal::of(stderr).explain(bwrap, &status, stderr))
}

/// Why bwrap could not start a sandbox, as far as its message tells. Each cause has its own narrow
/// fix, which the run header, `preview` and the CI reports name after `auto` fell back (issue 32):
/// "user namespaces are probably unavailable" sent people to turn a protection off system-wide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `setting up uid map: Permission denied`: AppArmor's restriction on unprivileged user
    /// namespaces (`kernel.apparmor_restrict_unprivileged_userns=1`, the default from Ubuntu 23.10
    /// on, so on GitHub's `ubuntu-24.04` runners): the namespace is made, but its uid map cannot
    /// be written.
    AppArmor,
    /// `Can't mount proc on /newroot/proc`: a container (Docker, Podman, a CI job's image) whose
    /// runtime masks parts of `/proc`, so the kernel refuses a new `/proc` mount.
    Container,
    /// `No permissions to create new namespace`, `Creating new namespace failed`: unprivileged
    /// user namespaces are off (a sysctl, or a container's seccomp profile).
    NoUserNamespaces,
    /// `Unknown option`: bubblewrap older than 0.8.0 (no `--disable-userns`).
    TooOld,
    /// Anything else: bwrap's words are quoted as they are.
    Other,
}

impl Refusal {
    /// The cause bwrap's stderr points at.
    pub fn of(stderr: &str) -> Refusal {
        if stderr.contains("setting up uid map") && stderr.contains("Permission denied") {
            Refusal::AppArmor
        } else if stderr.contains("Can't mount proc") {
            Refusal::Container
        } else if stderr.contains("No permissions to create new namespace")
            || stderr.contains("Creating new namespace failed")
        {
            Refusal::NoUserNamespaces
        } else if stderr.contains("Unknown option") {
            Refusal::TooOld
        } else {
            Refusal::Other
        }
    }

    /// The cause, in words.
    pub fn cause(self) -> &'static str {
        match self {
            Refusal::AppArmor => {
                "AppArmor restricts unprivileged user namespaces here \
                 (kernel.apparmor_restrict_unprivileged_userns=1, the default on Ubuntu 23.10 and \
                 later, GitHub's ubuntu-24.04 runners included)"
            }
            Refusal::Container => {
                "this runs in a container whose runtime masks parts of /proc, so bwrap cannot \
                 mount a /proc of its own"
            }
            Refusal::NoUserNamespaces => {
                "unprivileged user namespaces are off here (kernel.unprivileged_userns_clone=0, \
                 user.max_user_namespaces=0, or a container's seccomp profile)"
            }
            Refusal::TooOld => {
                "it is too old: acode-run needs bubblewrap 0.8.0 or later (for --disable-userns)"
            }
            Refusal::Other => "its message names no cause acode-run knows",
        }
    }

    /// The narrowest change that makes bwrap work, or `None` when its message does not say.
    pub fn fix(self) -> Option<&'static str> {
        match self {
            Refusal::AppArmor => Some(
                "give /usr/bin/bwrap an AppArmor profile that allows `userns` (docs/ci.md, \
                 \"Ubuntu 24.04 runners\") rather than turning the restriction off for every \
                 program",
            ),
            Refusal::Container => Some(
                "run the container with /proc unmasked (podman: --security-opt unmask=/proc/*; \
                 docs/ci.md, \"Containers\"), or keep Landlock",
            ),
            Refusal::NoUserNamespaces => Some(
                "allow unprivileged user namespaces (or, in a container, a seccomp profile that \
                 allows them), or keep Landlock",
            ),
            Refusal::TooOld => Some("install bubblewrap 0.8.0 or later"),
            Refusal::Other => None,
        }
    }

    /// The probe's error: which bwrap, the cause, how it ended, its words, and the fix.
    fn explain(self, bwrap: &Path, status: &str, stderr: &str) -> String {
        let mut why = match self {
            Refusal::Other => format!(
                "{} cannot create a sandbox here (it {status}); bwrap said: {stderr}",
                bwrap.display()
            ),
            known => format!(
                "{} cannot create a sandbox: {} (it {status}; bwrap said: {stderr})",
                bwrap.display(),
                known.cause()
            ),
        };
        if let Some(fix) = self.fix() {
            why.push_str("; fix: ");
            why.push_str(fix);
        }
        why
    }
}

/// The runner binary to bind into a sandbox (the supervisor, the forwarder): `path` while the file
/// there is still the running binary (same device and inode as `/proc/self/exe`), else a copy of
/// the running binary, made once per process in a private temporary directory. Why: bwrap binds
/// whatever file is at the path when the sandbox starts, so a build that replaced it mid-run would
/// make later sandboxes run a newer program (which may not speak this one's protocol); bwrap
/// cannot bind the replaced, unlinked inode itself (`/proc/self/exe` or a descriptor of it).
/// Landlock mode executes `/proc/self/exe` directly.
fn running_binary(path: &Path) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let id = |m: std::fs::Metadata| (m.dev(), m.ino());
    let running = std::fs::metadata("/proc/self/exe").map(id);
    let at_path = std::fs::metadata(path).map(id);
    match (running, at_path) {
        (Ok(r), Ok(p)) if r == p => path.to_path_buf(),
        // Not a copy of ours to make (the path names another program): as given.
        (Err(_), _) => path.to_path_buf(),
        _ => {
            static COPY: OnceLock<Option<PathBuf>> = OnceLock::new();
            COPY.get_or_init(copy_running_binary)
                .clone()
                .unwrap_or_else(|| path.to_path_buf())
        }
    }
}

/// `$TMPDIR/acode-run-exe-<uuid>/acode-run`: the running binary's bytes (from `/proc/self/exe`),
/// in a directory only this user can enter, kept for the process's life and removed by the next
/// acode-run after it ([`super::scratch`]); `None` when it cannot be made.
fn copy_running_binary() -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let dir = super::scratch::create("exe-").ok()?;
    let copy = dir.join("acode-run");
    std::fs::copy("/proc/self/exe", &copy).ok()?;
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o500)).ok()?;
    Some(copy)
}

/// Turns the sandbox mode into the bwrap binary to use: `None` and `Landlock` modes → no bwrap;
/// `Bwrap` → a working bwrap or an error saying why not (fail closed); `Auto` → bwrap if it works,
/// else none (the caller, [`crate::sandbox::OsSandbox::resolve`], then falls back to Landlock).
///
/// Why at run start: a run must not discover half-way through that its sandbox is missing.
pub fn resolve(mode: SandboxMode) -> Result<Option<PathBuf>, String> {
    match mode {
        SandboxMode::None | SandboxMode::Landlock => Ok(None),
        SandboxMode::Bwrap => {
            let bwrap = find_on_path().ok_or_else(|| {
                "--sandbox bwrap: bubblewrap is not installed (no `bwrap` on PATH); install it with \
                 `apt-get install bubblewrap`, or choose --sandbox auto or none"
                    .to_string()
            })?;
            probe(&bwrap).map_err(|why| format!("--sandbox bwrap: {why}"))?;
            Ok(Some(bwrap))
        }
        SandboxMode::Auto => Ok(find_on_path().filter(|b| probe(b).is_ok())),
    }
}

/// For tests: the bwrap to use, or `None` after a named, counted skip ([`crate::testing::skip`]),
/// which fails the test when `CI` is set, so a CI machine without a working sandbox fails loudly.
#[cfg(test)]
pub(crate) fn bwrap_for_tests() -> Option<PathBuf> {
    match resolve(SandboxMode::Bwrap) {
        Ok(b) => b,
        Err(why) => {
            crate::testing::skip("bubblewrap (bwrap)", &why);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A workspace under /tmp, removed when the test ends (also when it fails).
    fn temp_ws() -> (crate::testing::RemoveOnDrop, Workspace) {
        let dir = std::env::temp_dir().join(format!("acode-bwrap-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join(".git")).unwrap();
        std::fs::write(dir.join(".git/config"), "[core]\n").unwrap();
        let ws = Workspace::new(&dir).unwrap();
        (crate::testing::RemoveOnDrop::new(ws.root()), ws)
    }

    fn run_in(bwrap: Option<&Path>, ws: &Workspace, code: &str) -> crate::process::CommandOutput {
        let mut spec = CommandSpec::new(
            vec!["python3".into(), "-c".into(), code.into()],
            ws.root().to_path_buf(),
        );
        spec.env = crate::policy::env::child_env(&crate::policy::Policy::default(), &[]);
        spec.timeout = Duration::from_secs(60);
        spec.wrap = bwrap
            .map(|b| std::sync::Arc::new(BwrapSpec::new(b, ws)) as std::sync::Arc<dyn ArgvWrapper>);
        run(&spec, &AtomicBool::new(false), &|_| {}).unwrap()
    }

    fn write_code(path: &Path) -> String {
        format!("open({:?}, 'w').write('x')", path.to_str().unwrap())
    }

    #[test]
    fn refusals_are_read_by_their_message() {
        let cases = [
            (
                "bwrap: setting up uid map: Permission denied",
                Refusal::AppArmor,
            ),
            (
                "bwrap: Can't mount proc on /newroot/proc: Operation not permitted",
                Refusal::Container,
            ),
            (
                "bwrap: No permissions to create new namespace, likely because the kernel does \
                 not allow non-privileged user namespaces.",
                Refusal::NoUserNamespaces,
            ),
            ("bwrap: Unknown option --disable-userns", Refusal::TooOld),
            (
                "bwrap: execvp true: No such file or directory",
                Refusal::Other,
            ),
        ];
        for (said, refusal) in cases {
            assert_eq!(Refusal::of(said), refusal, "{said}");
            let why = refusal.explain(Path::new("/usr/bin/bwrap"), "exited with code 1", said);
            assert!(why.contains(said), "{why}");
            assert_eq!(why.contains("; fix: "), refusal.fix().is_some(), "{why}");
        }
    }

    #[test]
    fn wrap_argv_layout() {
        let (root, mut ws) = temp_ws();
        ws.protect(Path::new(".acode/executions.db"));
        std::fs::create_dir_all(root.join(".acode")).unwrap();
        std::fs::write(root.join(".acode/executions.db"), "").unwrap();
        std::fs::write(root.join(".acode/executions.db-wal"), "").unwrap();
        let argv = wrap_argv(
            Path::new("/usr/bin/bwrap"),
            &ws,
            &root.join("sub"),
            &["cargo".into(), "test".into()],
        );
        let joined = argv.join(" ");
        let r = root.to_str().unwrap();
        assert!(joined.starts_with(
            "/usr/bin/bwrap --unshare-user --disable-userns --cap-drop ALL --unshare-pid \
             --unshare-net --unshare-ipc --unshare-uts --unshare-cgroup-try --die-with-parent \
             --new-session --uid "
        ));
        assert!(
            !joined.contains("--ro-bind / /"),
            "not the whole host: {joined}"
        );
        assert!(joined.contains("--ro-bind /usr /usr"), "{joined}");
        assert!(joined.contains("--ro-bind /etc /etc"), "{joined}");
        if Path::new("/bin").is_symlink() {
            let target = std::fs::read_link("/bin").unwrap();
            assert!(joined.contains(&format!("--symlink {} /bin", target.display())));
        }
        assert!(
            joined.contains("--dev /dev --proc /proc --remount-ro /proc --tmpfs /tmp"),
            "{joined}"
        );
        assert!(!joined.contains("/run"), "{joined}");
        assert!(!joined.contains("/var"), "{joined}");
        // The workspace comes after /tmp (it may live there) and before its protected paths.
        let bind = joined.find(&format!("--bind {r} {r}")).unwrap();
        assert!(joined.find("--tmpfs /tmp").unwrap() < bind);
        assert!(bind < joined.find(&format!("--ro-bind {r}/.git")).unwrap());
        assert!(joined.contains(&format!("--bind {r} {r}")));
        assert!(joined.contains(&format!("--ro-bind {r}/.git {r}/.git")));
        assert!(joined.contains(&format!(
            "--ro-bind {r}/.acode/executions.db {r}/.acode/executions.db "
        )));
        assert!(joined.contains(&format!("--ro-bind {r}/.acode/executions.db-wal")));
        assert!(
            !joined.contains("executions.db-shm"),
            "missing files are not bound"
        );
        assert!(joined.ends_with(&format!("--chdir {r}/sub -- cargo test")));
    }

    #[test]
    fn none_mode_needs_nothing() {
        assert_eq!(resolve(SandboxMode::None), Ok(None));
    }

    #[test]
    fn auto_agrees_with_bwrap_mode() {
        let strict = resolve(SandboxMode::Bwrap);
        let auto = resolve(SandboxMode::Auto).unwrap();
        assert_eq!(strict.ok().flatten(), auto);
    }

    #[test]
    fn writes_outside_the_workspace_fail_and_inside_succeed() {
        let Some(bwrap) = bwrap_for_tests() else {
            return;
        };
        let (root, ws) = temp_ws();
        // Outside: a host directory that is writable without the sandbox (not under /tmp, which
        // is a private tmpfs inside the sandbox and would hide the write instead of failing it).
        // /var/tmp is not even visible inside; /etc is, read-only.
        let outside = crate::testing::RemoveOnDrop::new(
            PathBuf::from("/var/tmp").join(format!("acode-outside-{}", uuid::Uuid::new_v4())),
        );
        std::fs::create_dir_all(&*outside).unwrap();
        let target = outside.join("escaped");
        let out = run_in(Some(&bwrap), &ws, &write_code(&target));
        assert_ne!(out.exit_code, Some(0), "{out:?}");
        assert!(out.stderr.text.contains("No such file"), "{out:?}");
        assert!(!target.exists());
        // /etc: an existing file opened for appending, never written and never created, so a
        // regression leaves nothing behind.
        let etc = Path::new("/etc/passwd");
        let before = std::fs::read(etc).unwrap();
        let append = format!(
            "import os\nos.open({:?}, os.O_WRONLY | os.O_APPEND)\nprint('opened')",
            etc.to_str().unwrap()
        );
        let out = run_in(Some(&bwrap), &ws, &append);
        assert!(out.stderr.text.contains("Read-only file system"), "{out:?}");
        assert!(!out.stdout.text.contains("opened"), "{out:?}");
        assert_eq!(std::fs::read(etc).unwrap(), before);
        // Control: the same write works without bwrap, so the test above is meaningful.
        let out = run_in(None, &ws, &write_code(&target));
        assert_eq!(out.exit_code, Some(0), "{out:?}");
        assert!(target.exists());

        let inside = root.join("inside.txt");
        let out = run_in(Some(&bwrap), &ws, &write_code(&inside));
        assert_eq!(out.exit_code, Some(0), "{out:?}");
        assert_eq!(std::fs::read_to_string(&inside).unwrap(), "x");
    }

    #[test]
    fn protected_paths_are_read_only() {
        let Some(bwrap) = bwrap_for_tests() else {
            return;
        };
        let (root, ws) = temp_ws();
        let out = run_in(Some(&bwrap), &ws, &write_code(&root.join(".git/config")));
        assert_ne!(out.exit_code, Some(0), "{out:?}");
        assert_eq!(
            std::fs::read_to_string(root.join(".git/config")).unwrap(),
            "[core]\n"
        );
        let out = run_in(Some(&bwrap), &ws, &write_code(&root.join(".git/new")));
        assert_ne!(out.exit_code, Some(0), "{out:?}");
        assert!(!root.join(".git/new").exists());
        // Reading is still fine.
        let code = format!(
            "print(open({:?}).read())",
            root.join(".git/config").to_str().unwrap()
        );
        let out = run_in(Some(&bwrap), &ws, &code);
        assert_eq!(out.stdout.text, "[core]\n\n", "{out:?}");
    }

    #[test]
    fn read_paths_are_visible_read_only_and_nothing_else_is() {
        let Some(bwrap) = bwrap_for_tests() else {
            return;
        };
        let (_root, ws) = temp_ws();
        let extra =
            PathBuf::from("/var/tmp").join(format!("acode-read-path-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&extra).unwrap();
        std::fs::write(extra.join("tool.txt"), "tool").unwrap();
        let code = format!(
            "import os\nprint(open({:?}).read())\ntry:\n    open({:?}, 'w')\nexcept OSError as e:\n    print(e.errno)",
            extra.join("tool.txt").to_str().unwrap(),
            extra.join("new.txt").to_str().unwrap()
        );
        let run_with = |read_paths: &[PathBuf]| {
            let mut spec = CommandSpec::new(
                vec!["python3".into(), "-c".into(), code.clone()],
                ws.root().to_path_buf(),
            );
            spec.env = crate::policy::env::child_env(&crate::policy::Policy::default(), &[]);
            spec.wrap = Some(std::sync::Arc::new(
                BwrapSpec::new(&bwrap, &ws).read_paths(read_paths),
            ));
            run(&spec, &AtomicBool::new(false), &|_| {}).unwrap()
        };
        let out = run_with(std::slice::from_ref(&extra));
        assert_eq!(out.stdout.text, "tool\n30\n", "read, then EROFS: {out:?}");
        assert!(!extra.join("new.txt").exists());
        // Without the policy naming it, the directory is not there at all.
        let out = run_with(&[]);
        assert!(out.stderr.text.contains("No such file"), "{out:?}");
        // An absent read path is skipped, not an error.
        let out = run_with(&[extra.join("absent"), PathBuf::from("relative")]);
        assert!(out.stderr.text.contains("No such file"), "{out:?}");
        std::fs::remove_dir_all(&extra).unwrap();
    }

    #[test]
    fn network_is_unreachable() {
        let Some(bwrap) = bwrap_for_tests() else {
            return;
        };
        let (_root, ws) = temp_ws();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let code = format!(
            "import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=5)\nprint('connected')"
        );
        let out = run_in(Some(&bwrap), &ws, &code);
        assert_ne!(out.exit_code, Some(0), "{out:?}");
        assert!(!out.stdout.text.contains("connected"));
        listener.set_nonblocking(true).unwrap();
        assert!(listener.accept().is_err(), "nothing may have connected");
        // Control: without bwrap the same connection works.
        let out = run_in(None, &ws, &code);
        assert_eq!(out.stdout.text, "connected\n", "{out:?}");
    }

    #[test]
    fn grandchildren_die_with_the_sandbox_on_timeout() {
        let Some(bwrap) = bwrap_for_tests() else {
            return;
        };
        let (_root, ws) = temp_ws();
        // A unique sleep length marks the grandchild so it can be found in the host's /proc.
        let marker = format!("600.{}", std::process::id());
        let mut spec = CommandSpec::new(
            vec![
                "python3".into(),
                "-c".into(),
                format!(
                    "import subprocess, time\nsubprocess.Popen(['sleep', '{marker}'])\nprint('started', flush=True)\ntime.sleep(600)"
                ),
            ],
            ws.root().to_path_buf(),
        );
        spec.env = crate::policy::env::child_env(&crate::policy::Policy::default(), &[]);
        spec.timeout = Duration::from_secs(2);
        spec.kill_grace = Duration::from_millis(300);
        spec.wrap = Some(std::sync::Arc::new(BwrapSpec::new(&bwrap, &ws)));
        let started = std::time::Instant::now();
        let out = run(&spec, &AtomicBool::new(false), &|_| {}).unwrap();
        assert!(out.timed_out, "{out:?}");
        assert_eq!(out.stdout.text, "started\n", "{out:?}");
        assert!(started.elapsed() < Duration::from_secs(15));
        let survivor = || {
            std::fs::read_dir("/proc").ok()?.flatten().find(|e| {
                std::fs::read(e.path().join("cmdline"))
                    .map(|c| String::from_utf8_lossy(&c).contains(&marker))
                    .unwrap_or(false)
            })
        };
        let gone = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(20));
            survivor().is_none()
        });
        assert!(gone, "the grandchild survived: {:?}", survivor());
    }
}
