//! The OS sandbox: bubblewrap (`bwrap`) around every child process.
//!
//! Inside, the whole filesystem is mounted read-only, `/tmp` is a private tmpfs, the workspace is
//! bind-mounted writable, and the workspace's protected paths (`.git/`, the execution database and
//! its journal files) are mounted read-only again on top. Network, PID and IPC namespaces are
//! unshared (no network at all, not even loopback to the host), the child gets a new session (so it
//! cannot push input into our terminal) and dies with its parent.
//!
//! [`resolve`] is called once at the start of a run to turn `--sandbox none|bwrap|auto` into the
//! bwrap binary to use (or none). It actually *runs* bwrap once, because an installed bwrap is not
//! enough: user namespaces may be disabled in a container or by the kernel's configuration.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::paths::Workspace;
use super::policy::SandboxMode;
use super::process::{CommandSpec, run};

/// Namespace and lifetime flags used both by the probe and by every wrapped command, so that a
/// successful probe means wrapped commands can start.
const ISOLATION: &[&str] = &[
    "--unshare-net",
    "--unshare-pid",
    "--unshare-ipc",
    "--die-with-parent",
    "--new-session",
];

/// How to wrap commands for one workspace: the bwrap binary, the writable root and the paths that
/// stay read-only. Cheap to build; [`process::run`](super::process::run) applies it.
#[derive(Debug, Clone)]
pub struct BwrapSpec {
    /// The bubblewrap binary returned by [`resolve`].
    pub bwrap: PathBuf,
    /// The workspace root, mounted writable.
    pub workspace: PathBuf,
    /// Paths inside the workspace mounted read-only on top (only those that exist at spawn time).
    pub read_only: Vec<PathBuf>,
}

impl BwrapSpec {
    /// The spec for `workspace`, with its protected paths read-only.
    pub fn new(bwrap: &Path, workspace: &Workspace) -> Self {
        BwrapSpec {
            bwrap: bwrap.to_path_buf(),
            workspace: workspace.root().to_path_buf(),
            read_only: workspace.protected().to_vec(),
        }
    }

    /// The full argv that runs `argv` in `cwd` inside the sandbox (see the module docs).
    pub fn wrap(&self, cwd: &Path, argv: &[String]) -> Vec<String> {
        let s = |p: &Path| p.to_string_lossy().into_owned();
        let mut out: Vec<String> = vec![s(&self.bwrap)];
        out.extend(
            [
                "--ro-bind",
                "/",
                "/",
                "--dev",
                "/dev",
                "--proc",
                "/proc",
                "--tmpfs",
                "/tmp",
            ]
            .map(String::from),
        );
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
        out.extend(ISOLATION.iter().map(|f| f.to_string()));
        out.extend(["--chdir".into(), s(cwd), "--".into()]);
        out.extend(argv.iter().cloned());
        out
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

/// Runs `bwrap ... true` with the same isolation flags commands get; `Err` says why it failed.
pub fn probe(bwrap: &Path) -> Result<(), String> {
    let mut argv: Vec<String> = vec![bwrap.to_string_lossy().into_owned()];
    argv.extend(
        [
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
        ]
        .map(String::from),
    );
    argv.extend(ISOLATION.iter().map(|f| f.to_string()));
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
    Err(format!(
        "{} is installed but cannot create a sandbox here (it {status}); user namespaces are \
         probably unavailable (container without privileges, kernel.unprivileged_userns_clone=0, \
         or an AppArmor restriction on unprivileged user namespaces). bwrap said: {}",
        bwrap.display(),
        out.stderr.text.trim()
    ))
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

/// For tests: the bwrap to use, or `None` after printing why the test is skipped. Panics when bwrap
/// is unusable and `CI` is set, so a CI machine without a working sandbox fails loudly.
#[cfg(test)]
pub(crate) fn bwrap_for_tests() -> Option<PathBuf> {
    match resolve(SandboxMode::Bwrap) {
        Ok(b) => b,
        Err(why) if std::env::var_os("CI").is_some() => {
            panic!("bwrap unavailable on CI: {why}")
        }
        Err(why) => {
            eprintln!("skipped: bwrap unavailable: {why}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn temp_ws() -> (PathBuf, Workspace) {
        let dir = std::env::temp_dir().join(format!("acode-bwrap-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join(".git")).unwrap();
        std::fs::write(dir.join(".git/config"), "[core]\n").unwrap();
        let ws = Workspace::new(&dir).unwrap();
        (ws.root().to_path_buf(), ws)
    }

    fn run_in(
        bwrap: Option<&Path>,
        ws: &Workspace,
        code: &str,
    ) -> super::super::process::CommandOutput {
        let mut spec = CommandSpec::new(
            vec!["python3".into(), "-c".into(), code.into()],
            ws.root().to_path_buf(),
        );
        spec.env = crate::sandbox::env::child_env(&crate::sandbox::Policy::default(), &[]);
        spec.timeout = Duration::from_secs(60);
        spec.wrap = bwrap.map(|b| BwrapSpec::new(b, ws));
        run(&spec, &AtomicBool::new(false), &|_| {}).unwrap()
    }

    fn write_code(path: &Path) -> String {
        format!("open({:?}, 'w').write('x')", path.to_str().unwrap())
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
        assert!(
            joined.starts_with("/usr/bin/bwrap --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp")
        );
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
        assert!(joined.contains("--unshare-net --unshare-pid"));
        assert!(joined.contains("--die-with-parent --new-session"));
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
        // /var/tmp rather than the checkout, which may itself live under /tmp.
        let outside =
            PathBuf::from("/var/tmp").join(format!("acode-outside-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&outside).unwrap();
        let target = outside.join("escaped");
        let out = run_in(Some(&bwrap), &ws, &write_code(&target));
        assert_ne!(out.exit_code, Some(0), "{out:?}");
        assert!(out.stderr.text.contains("Read-only file system"), "{out:?}");
        assert!(!target.exists());
        // Control: the same write works without bwrap, so the test above is meaningful.
        let out = run_in(None, &ws, &write_code(&target));
        assert_eq!(out.exit_code, Some(0), "{out:?}");
        assert!(target.exists());
        let _ = std::fs::remove_dir_all(&outside);

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
        spec.env = crate::sandbox::env::child_env(&crate::sandbox::Policy::default(), &[]);
        spec.timeout = Duration::from_secs(2);
        spec.kill_grace = Duration::from_millis(300);
        spec.wrap = Some(BwrapSpec::new(&bwrap, &ws));
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
