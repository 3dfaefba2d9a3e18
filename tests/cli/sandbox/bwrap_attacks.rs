//! Attacks on the OS sandbox through the real binary, under bubblewrap (`--sandbox bwrap`) and —
//! for every promise both modes hold (issue #32) — under Landlock alone (`--sandbox landlock`),
//! each run as the user the tests run as (root in CI) and, when the tests run as root, as an
//! unprivileged user (`setpriv --reuid=65534`). Every attack is a `python3 -c` step that tries the escape and
//! writes what happened to `report.txt` in the workspace; the test then checks the report (so it
//! knows the attack really ran) and the host (marker files absent, listeners untouched, files
//! unchanged). See `docs/security.md`, "bubblewrap".

use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::json;

use crate::harness::*;

/// Who runs acode-run.
#[derive(Clone, Copy, Debug, PartialEq)]
enum As {
    /// The user running the tests (root in CI and here).
    Me,
    /// uid/gid 65534 (nobody), dropped to with `setpriv`; only possible when the tests run as root.
    Nobody,
}

const NOBODY: u32 = 65534;

/// A fake approval key the runner holds; no command may ever see it.
const KEY: &str = "acode-attack-approval-key-5f1c0e9d";

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The users to attack as; prints why a user is skipped.
fn users() -> Vec<As> {
    if !bwrap_ok() {
        return Vec::new();
    }
    let mut out = vec![As::Me];
    if !is_root() {
        acode_run::testing::skip(
            "root",
            "the attacks as nobody need root to drop to uid 65534",
        );
    } else if Command::new("setpriv").arg("--version").output().is_err() {
        acode_run::testing::skip(
            "setpriv (util-linux)",
            "it drops to uid 65534 for the attacks as nobody",
        );
    } else {
        out.push(As::Nobody);
    }
    out
}

/// Every (user, sandbox mode) to attack in, for the promises bwrap and Landlock alone both hold:
/// [`users`] under bwrap, and the same users under Landlock. A kernel without Landlock fails in
/// CI and is a named skip elsewhere.
fn everywhere() -> Vec<(As, &'static str)> {
    let mut out: Vec<(As, &'static str)> = users().into_iter().map(|u| (u, "bwrap")).collect();
    if acode_run::sandbox::landlock::kernel_abi().is_some() {
        let mut landlock = vec![As::Me];
        if is_root() && Command::new("setpriv").arg("--version").output().is_ok() {
            landlock.push(As::Nobody);
        }
        out.extend(landlock.into_iter().map(|u| (u, "landlock")));
    } else {
        acode_run::testing::skip(
            "Landlock",
            "the kernel has none: the attacks under Landlock alone cannot run",
        );
    }
    out
}

/// A workspace owned by `user`, and the binary run as that user with the fake key in its
/// environment, under `mode`.
struct Attack {
    t: TestDir,
    user: As,
    mode: &'static str,
}

impl Attack {
    fn new(user: As) -> Attack {
        Attack::in_mode(user, "bwrap")
    }

    fn in_mode(user: As, mode: &'static str) -> Attack {
        let t = TestDir::new();
        std::fs::create_dir_all(t.ws.join(".git")).unwrap();
        std::fs::write(t.ws.join(".git/config"), "[core]\n\tbare = false\n").unwrap();
        // Under Landlock a command cannot create top-level entries: the report exists already.
        std::fs::write(t.ws.join("report.txt"), "").unwrap();
        Attack { t, user, mode }
    }

    /// Gives every file of the test directory to the unprivileged user (when attacking as it).
    fn hand_over(&self) {
        if self.user == As::Nobody {
            for entry in walkdir::WalkDir::new(&self.t.root) {
                let entry = entry.unwrap();
                std::os::unix::fs::lchown(entry.path(), Some(NOBODY), Some(NOBODY)).unwrap();
            }
        }
    }

    fn acode(&self, args: &[&str]) -> Output {
        self.hand_over();
        let bin = env!("CARGO_BIN_EXE_acode-run");
        let mut c = match self.user {
            As::Me => Command::new(bin),
            As::Nobody => {
                let mut c = Command::new("setpriv");
                c.args([
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    "--",
                    bin,
                ]);
                c
            }
        };
        c.current_dir(&self.t.ws)
            .env_remove("ACODE_DB")
            .env_remove("ACODE_LLM_URL")
            .env_remove("ACODE_MODEL")
            .env_remove("ACODE_LLM_API_KEY")
            .env("ACODE_APPROVAL_KEY", KEY)
            .env("NO_COLOR", "1")
            .args(args)
            .stdin(Stdio::null());
        c.output().unwrap()
    }

    /// Approves and runs a one-step plan whose step is `python3 attack.py` under bwrap, the
    /// script being [`PRELUDE`] and `code` (a script file: arguments may not hold newlines).
    fn python(&self, code: &str) -> Output {
        self.t.file("attack.py", &format!("{PRELUDE}\n{code}"));
        let plan = self.t.plan(
            "attack.json",
            &json!({"plan_id": "attack", "steps": [
                {"step_id": "attack", "tool": "run_command",
                 "arguments": {"argv": ["python3", "attack.py"]}}]}),
        );
        let p = plan.to_str().unwrap();
        let out = self.acode(&["approve", p, "--by", "tester"]);
        assert_eq!(
            code_of(&out),
            0,
            "{:?}: approve: {}",
            self.user,
            stderr(&out)
        );
        self.acode(&["run", p, "--sandbox", self.mode, "--json"])
    }

    /// The report the attack wrote; panics (with the run's output) when the attack did not run.
    fn report(&self, out: &Output) -> String {
        let report = std::fs::read_to_string(self.t.ws.join("report.txt")).unwrap_or_else(|e| {
            // What the command itself said, from the record: the reason it did not start.
            let said: String = rusqlite::Connection::open(self.t.ws.join(".acode/executions.db"))
                .and_then(|db| {
                    db.query_row(
                        "SELECT group_concat(content, '\n') FROM artifacts WHERE artifact_type = 'stderr'",
                        [],
                        |r| r.get::<_, Option<String>>(0),
                    )
                })
                .ok()
                .flatten()
                .unwrap_or_default();
            panic!(
                "{:?}: the attack did not run ({e}): exit {}\n{}\n{}\ncommand stderr: {said}",
                self.user,
                code_of(out),
                stderr(out),
                stdout(out)
            )
        });
        assert!(
            report.contains("done=1"),
            "{:?}: unfinished: {report}",
            self.user
        );
        assert!(
            !report.contains(KEY),
            "{:?}: the key leaked: {report}",
            self.user
        );
        assert!(!stdout(out).contains(KEY) && !stderr(out).contains(KEY));
        report
    }
}

fn code_of(out: &Output) -> i32 {
    code(out)
}

/// The value `report` recorded for `key`.
fn field<'a>(report: &'a str, key: &str) -> &'a str {
    report
        .lines()
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key} in report:\n{report}"))
}

/// Helpers every attack script starts with: `rep(k, v)` writes to report.txt, `call(name, *args)`
/// calls libc and returns "ok" or the errno name, `attempt(f)` returns "ok" or the exception.
const PRELUDE: &str = r#"
import ctypes, errno, os, socket, subprocess, sys
R = open('report.txt', 'w')
def rep(k, v):
    R.write(f'{k}={v}\n'); R.flush()
libc = ctypes.CDLL(None, use_errno=True)
def call(name, *a):
    r = getattr(libc, name)(*a)
    if r == 0:
        return 'ok'
    e = ctypes.get_errno()
    return errno.errorcode.get(e, str(e))
def attempt(f):
    try:
        f()
        return 'ok'
    except Exception as e:
        return type(e).__name__ + ':' + str(getattr(e, 'errno', ''))
def open_w(path):
    # Opens for writing (no O_CREAT, no O_TRUNC) and writes nothing: the kernel checks write
    # permission at open, so 'ok' proves the attack would have worked, and changes nothing.
    os.close(os.open(path, os.O_WRONLY))
def write(path):
    # A write that stays harmless if the defence regresses: an existing file gets back exactly
    # the bytes just read from it (opened without truncation); a missing one is created empty.
    if os.path.lexists(path):
        data = open(path, 'rb').read()
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    else:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
"#;

/// Closing line of every attack script.
const DONE: &str = "rep('done', 1)";

#[test]
fn capabilities_are_all_gone() {
    for (user, mode) in everywhere() {
        let a = Attack::in_mode(user, mode);
        let user = (user, mode);
        let out = a.python(&format!(
            r#"
for line in open('/proc/self/status'):
    if line.startswith('Cap') or line.startswith('Uid') or line.startswith('NoNewPrivs'):
        k, v = line.split(':', 1)
        rep(k, v.strip())
rep('unshare_user', call('unshare', 0x10000000))
{DONE}"#
        ));
        let r = a.report(&out);
        for cap in ["CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh"] {
            // An unprivileged runner cannot empty its bounding set, and needs not: no_new_privs
            // (below) keeps `exec` from granting anything from it.
            if cap == "CapBnd" && mode == "landlock" && user.0 == As::Nobody {
                continue;
            }
            assert_eq!(field(&r, cap), "0000000000000000", "{user:?}: {cap}\n{r}");
        }
        assert_eq!(field(&r, "NoNewPrivs"), "1", "{user:?}\n{r}");
        // Nested user namespaces (which would hand out capabilities again) are disabled under
        // bwrap. Under Landlock alone one can be made, and gains nothing outside it: the domain,
        // the filter and the refusal of mount(2) hold in it (docs/security.md).
        if mode == "bwrap" {
            assert_ne!(field(&r, "unshare_user"), "ok", "{user:?}\n{r}");
        }
        // The same uid as the runner: no privilege gained, none pretended.
        let uid = if user.0 == As::Nobody {
            NOBODY
        } else {
            unsafe { libc::geteuid() }
        };
        assert!(field(&r, "Uid").starts_with(&format!("{uid}\t")), "{r}");
        assert_eq!(code_of(&out), 0, "{}", stderr(&out));
    }
}

#[test]
fn remounting_read_only_mounts_fails_and_nothing_is_written_outside() {
    for (user, mode) in everywhere() {
        let a = Attack::in_mode(user, mode);
        let user = (user, mode);
        let id = uuid::Uuid::new_v4().simple().to_string();
        let markers: Vec<PathBuf> = ["/usr", "/etc", "/var/tmp", "/bin", "/"]
            .iter()
            .map(|d| Path::new(d).join(format!("acode-escape-{id}")))
            .chain([a.t.outside.join(format!("acode-escape-{id}"))])
            .collect();
        let targets: Vec<String> = markers.iter().map(|m| format!("{m:?}")).collect();
        let out = a.python(&format!(
            r#"
MS_REMOUNT, MS_BIND, MS_RDONLY = 32, 4096, 1
for i, m in enumerate(['/', '/usr', '/etc']):
    rep(f'remount{{i}}', call('mount', b'none', m.encode(), None, MS_REMOUNT, None))
    rep(f'remount_bind{{i}}', call('mount', b'none', m.encode(), None, MS_REMOUNT | MS_BIND, None))
rep('mount_tmpfs', call('mount', b'tmpfs', b'/usr', b'tmpfs', 0, None))
rep('mount_prog', subprocess.run(['mount', '-o', 'remount,rw', '/usr'], capture_output=True).returncode)
wrote = [t for t in [{targets}] if attempt(lambda: write(t)) == 'ok']
rep('wrote_outside', wrote)
{DONE}"#,
            targets = targets.join(", ")
        ));
        let r = a.report(&out);
        for line in r
            .lines()
            .filter(|l| l.starts_with("remount") || l.starts_with("mount_tmpfs"))
        {
            assert!(!line.ends_with("=ok"), "{user:?}: {line}\n{r}");
        }
        assert_ne!(field(&r, "mount_prog"), "0", "{user:?}\n{r}");
        // Writes to the sandbox's own tmpfs root may succeed; none reaches the host.
        // (Any marker that did get through is an empty file: removed before failing.)
        let escaped: Vec<&PathBuf> = markers.iter().filter(|m| m.exists()).collect();
        for m in &escaped {
            let _ = std::fs::remove_file(m);
        }
        assert!(escaped.is_empty(), "{user:?}: {escaped:?} were created");
        a.t.assert_outside_untouched();
    }
}

#[test]
fn unmounting_the_git_bind_fails_and_git_is_unchanged() {
    for (user, mode) in everywhere() {
        let a = Attack::in_mode(user, mode);
        let user = (user, mode);
        let git = a.t.ws.join(".git");
        // An empty directory inside `.git`: removable if the bind regressed (harmless: it is this
        // test's own), where `rmdir` of `.git` itself would fail anyway for being non-empty.
        std::fs::create_dir_all(git.join("refs/tags")).unwrap();
        let out = a.python(&format!(
            r#"
g = {git:?}
rep('umount', call('umount2', g.encode(), 0))
rep('umount_detach', call('umount2', g.encode(), 2))
rep('write_config', attempt(lambda: write(g + '/config')))
rep('write_new', attempt(lambda: write(g + '/hooks-pwned')))
rep('rename', attempt(lambda: os.rename(g, g + '.old')))
rep('rmdir_empty', attempt(lambda: os.rmdir(g + '/refs/tags')))
{DONE}"#,
            git = git.to_str().unwrap()
        ));
        let r = a.report(&out);
        for k in [
            "umount",
            "umount_detach",
            "write_config",
            "write_new",
            "rename",
            "rmdir_empty",
        ] {
            assert_ne!(field(&r, k), "ok", "{user:?}: {k}\n{r}");
        }
        // Refused by the defence — a read-only file system under bwrap, Landlock's permission
        // error under Landlock alone — not for some other reason (a non-empty directory).
        let refused = if mode == "landlock" {
            ["PermissionError:13", "PermissionError:1"].contains(&field(&r, "rmdir_empty"))
        } else {
            field(&r, "rmdir_empty") == "OSError:30"
        };
        assert!(refused, "{user:?}: rmdir_empty\n{r}");
        assert!(git.join("refs/tags").is_dir());
        assert_eq!(
            std::fs::read_to_string(git.join("config")).unwrap(),
            "[core]\n\tbare = false\n"
        );
        assert!(!git.join("hooks-pwned").exists());
        assert!(!a.t.ws.join(".git.old").exists());
    }
}

/// Every `.git` in the workspace is read-only under bwrap, a nested repository's
/// (`vendor/lib/.git/config`) and a submodule's `gitdir:` file included, not only the top one.
/// The probes change nothing even if the defence regresses: they open for writing without
/// writing, write back what they read, or create an empty marker.
#[test]
fn nested_git_directories_are_read_only_too() {
    for (user, mode) in everywhere() {
        let a = Attack::in_mode(user, mode);
        let user = (user, mode);
        let config = "[core]\n\tbare = false\n[remote \"origin\"]\n\turl = x\n";
        a.t.file("vendor/lib/.git/config", config);
        a.t.file("vendor/lib/README", "lib\n");
        a.t.file("deep/a/b/c/.git/HEAD", "ref: refs/heads/main\n");
        a.t.file("sub/mod/.git", "gitdir: ../../.git/modules/mod\n");
        let out = a.python(&format!(
            r#"
rep('nested_config', attempt(lambda: open_w('vendor/lib/.git/config')))
rep('nested_new', attempt(lambda: write('vendor/lib/.git/hooks-new')))
rep('deep_head', attempt(lambda: write('deep/a/b/c/.git/HEAD')))
rep('gitfile', attempt(lambda: open_w('sub/mod/.git')))
rep('rename', attempt(lambda: os.rename('vendor/lib/.git', 'vendor/lib/git-old')))
rep('control', attempt(lambda: open_w('vendor/lib/README')))
{DONE}"#
        ));
        let r = a.report(&out);
        for k in [
            "nested_config",
            "nested_new",
            "deep_head",
            "gitfile",
            "rename",
        ] {
            assert_ne!(field(&r, k), "ok", "{user:?}: {k}\n{r}");
        }
        assert_eq!(field(&r, "control"), "ok", "{user:?}: the probe works\n{r}");
        assert_eq!(a.t.read("vendor/lib/.git/config"), config);
        assert!(!a.t.ws.join("vendor/lib/.git/hooks-new").exists());
        assert!(!a.t.ws.join("vendor/lib/git-old").exists());
    }
}

#[test]
fn the_runners_environment_is_not_readable() {
    for (user, mode) in everywhere() {
        let a = Attack::in_mode(user, mode);
        let user = (user, mode);
        let out = a.python(&format!(
            r#"
key = bytes.fromhex({hex:?})
found, seen = [], 0
def scan():
    global seen
    for pid in os.listdir('/proc'):
        if not pid.isdigit():
            continue
        for f in ('environ', 'cmdline'):
            try:
                data = open(f'/proc/{{pid}}/{{f}}', 'rb').read()
                seen += 1
                if key in data:
                    found.append(f'{{pid}}/{{f}}')
            except Exception:
                pass
scan()
rep('ppid', os.getppid())
rep('ppid_environ', attempt(lambda: open(f'/proc/{{os.getppid()}}/environ', 'rb').read()))
rep('own_env_has_key', any(key in v.encode() for v in os.environ.values()))
rep('umount_proc', call('umount2', b'/proc', 2))
scan()
rep('seen', seen)
rep('found', len(found))
{DONE}"#,
            hex = KEY.bytes().map(|b| format!("{b:02x}")).collect::<String>()
        ));
        let r = a.report(&out);
        assert_eq!(field(&r, "found"), "0", "{user:?}\n{r}");
        assert_eq!(field(&r, "own_env_has_key"), "False", "{r}");
        assert_ne!(field(&r, "umount_proc"), "ok", "{r}");
        // The scan really read files (its own process at least), so finding nothing means something.
        assert!(field(&r, "seen").parse::<u32>().unwrap() >= 2, "{r}");
    }
}

#[test]
fn the_host_network_is_unreachable_even_through_setns() {
    for (user, mode) in everywhere() {
        let a = Attack::in_mode(user, mode);
        let user = (user, mode);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let out = a.python(&format!(
            r#"
def connect():
    socket.create_connection(('127.0.0.1', {port}), timeout=3).close()
rep('connect', attempt(connect))
# The sandbox's /proc shows only its own processes: try to uncover the host's first.
rep('umount_proc', call('umount2', b'/proc', 2))
joined = []
for pid in os.listdir('/proc'):
    if pid.isdigit():
        try:
            fd = os.open(f'/proc/{{pid}}/ns/net', os.O_RDONLY)
            if call('setns', fd, 0) == 'ok':
                joined.append(pid)
        except Exception:
            pass
rep('setns_ok', len(joined))
rep('connect_after_setns', attempt(connect))
{DONE}"#
        ));
        let r = a.report(&out);
        assert_ne!(field(&r, "connect"), "ok", "{user:?}\n{r}");
        assert_ne!(field(&r, "umount_proc"), "ok", "{user:?}\n{r}");
        assert_eq!(field(&r, "setns_ok"), "0", "{user:?}\n{r}");
        assert_ne!(field(&r, "connect_after_setns"), "ok", "{user:?}\n{r}");
        listener.set_nonblocking(true).unwrap();
        assert!(listener.accept().is_err(), "{user:?}: something connected");
    }
}

#[test]
fn kernel_settings_cannot_be_opened_for_writing() {
    for (user, mode) in everywhere() {
        let a = Attack::in_mode(user, mode);
        let user = (user, mode);
        let before = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap();
        let out = a.python(&format!(
            r#"
rep('core_pattern', attempt(lambda: open_w('/proc/sys/kernel/core_pattern')))
rep('sysrq', attempt(lambda: open_w('/proc/sysrq-trigger')))
rep('sys_write', attempt(lambda: write('/proc/sys/kernel/core_pattern')))
rep('control', attempt(lambda: open_w('report.txt')))
{DONE}"#
        ));
        let r = a.report(&out);
        for k in ["core_pattern", "sysrq", "sys_write"] {
            assert_ne!(field(&r, k), "ok", "{user:?}: {k}\n{r}");
        }
        // The probe itself works: a file the command may write opens for writing.
        assert_eq!(field(&r, "control"), "ok", "{user:?}\n{r}");
        assert_eq!(
            std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap(),
            before
        );
    }
}

#[test]
fn host_unix_sockets_accept_no_connection() {
    use std::os::linux::net::SocketAddrExt;
    for user in users() {
        let a = Attack::new(user);
        let id = uuid::Uuid::new_v4().simple().to_string();
        // Pathname sockets outside the workspace: under /tmp (the host's, hidden by the private
        // tmpfs), beside the workspace, and under /run when we may create one there.
        let mut paths = vec![
            PathBuf::from(format!("/tmp/acode-attack-{id}.sock")),
            a.t.root.join("beside.sock"),
        ];
        if is_root() {
            paths.push(PathBuf::from(format!("/run/acode-attack-{id}.sock")));
            sweep_stale_etc_sockets();
            paths.push(PathBuf::from(format!("/etc/acode-attack-{id}.sock")));
        }
        let listeners: Vec<UnixListener> = paths
            .iter()
            .map(|p| {
                let l = UnixListener::bind(p).unwrap();
                // Owned by whoever runs acode-run, so only the sandbox stands in the way.
                if user == As::Nobody {
                    std::os::unix::fs::chown(p, Some(NOBODY), Some(NOBODY)).unwrap();
                }
                l.set_nonblocking(true).unwrap();
                l
            })
            .collect();
        let abstract_name = format!("acode-attack-{id}");
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(&abstract_name).unwrap();
        let abstract_listener = UnixListener::bind_addr(&addr).unwrap();
        abstract_listener.set_nonblocking(true).unwrap();
        let targets: Vec<String> = paths.iter().map(|p| format!("{p:?}")).collect();
        let out = a.python(&format!(
            r#"
def connect(addr):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect(addr)
    s.send(b'x')
results = [attempt(lambda: connect(p)) for p in [{targets}]]
rep('path_ok', sum(r == 'ok' for r in results))
rep('path_results', results)
rep('abstract', attempt(lambda: connect('\0{abstract_name}')))
{DONE}"#,
            targets = targets.join(", ")
        ));
        let r = a.report(&out);
        assert_eq!(field(&r, "path_ok"), "0", "{user:?}\n{r}");
        assert_ne!(field(&r, "abstract"), "ok", "{user:?}\n{r}");
        for (l, p) in listeners.iter().zip(&paths) {
            assert!(l.accept().is_err(), "{user:?}: {} accepted", p.display());
        }
        assert!(abstract_listener.accept().is_err());
        // Control: the same sockets accept a connection from outside the sandbox.
        for (l, p) in listeners.iter().zip(&paths) {
            std::os::unix::net::UnixStream::connect(p).unwrap();
            l.set_nonblocking(false).unwrap();
            l.accept().unwrap();
            // A socket in /etc is not removed: every acode-run started while it existed may hide
            // it behind a bind mount, and a concurrent test's bwrap would fail on the vanished
            // mount point. It is replaced, atomically, by a regular file (which nothing masks),
            // and a later run sweeps that.
            if p.starts_with("/etc") {
                retire_etc_socket(p);
            } else {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

/// Replaces the socket at `path` by an empty regular file in one `rename`, so the path never
/// stops existing (see the comment at the call).
fn retire_etc_socket(path: &Path) {
    let tmp = path.with_extension(format!("retired-{}", uuid::Uuid::new_v4().simple()));
    if std::fs::write(&tmp, "").is_ok() && std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// Tidies `/etc/acode-attack-*.sock` left by earlier runs of this test: a socket older than ten
/// minutes is retired ([`retire_etc_socket`], which makes its age start again), and a regular
/// file older than ten minutes is removed. Neither can break a concurrent run: only sockets are
/// masked, and a run re-checks each one before every bwrap start.
fn sweep_stale_etc_sockets() {
    use std::os::unix::fs::FileTypeExt;
    let Ok(entries) = std::fs::read_dir("/etc") else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !(name.starts_with("acode-attack-") && name.ends_with(".sock")) {
            continue;
        }
        let Ok(meta) = e.metadata() else { continue };
        let old = meta
            .modified()
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > std::time::Duration::from_secs(600));
        if !old {
            continue;
        }
        if meta.file_type().is_socket() {
            retire_etc_socket(&e.path());
        } else if meta.is_file() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[test]
fn protected_paths_created_by_a_command_do_not_reach_the_next_run() {
    for user in users() {
        let a = Attack::new(user);
        let ws = &a.t.ws;
        // A plan inside the workspace, approved: its approval file exists and must stay as signed.
        let plan = ws.join("plan.json");
        let evil_policy = r#"{"sandbox": "none", "env_passthrough": ["ACODE_APPROVAL_KEY"]}"#;
        a.t.file(
            "tamper.py",
            &format!(
                r#"{PRELUDE}
rep('policy', attempt(lambda: write('acode-policy.json')))
if os.path.exists('acode-policy.json'):
    open('acode-policy.json', 'w').write({evil_policy:?})
rep('acode_x', attempt(lambda: write('.acode/x')))
rep('approval', attempt(lambda: write('plan.json.approval')))
rep('new_approval', attempt(lambda: write('other.json.approval')))
{DONE}"#
            ),
        );
        std::fs::write(
            &plan,
            json!({"plan_id": "tamper", "steps": [
                {"step_id": "tamper", "tool": "run_command", "arguments": {"argv": ["python3", "tamper.py"]}}]})
            .to_string(),
        )
        .unwrap();
        let p = plan.to_str().unwrap();
        let out = a.acode(&["approve", p, "--by", "tester"]);
        assert_eq!(code_of(&out), 0, "{}", stderr(&out));
        let approval = std::fs::read(ws.join("plan.json.approval")).unwrap();
        let out = a.acode(&["run", p, "--sandbox", "bwrap"]);
        let r = a.report(&out);
        // The command could create the missing policy file (it had no mount point) ...
        assert_eq!(field(&r, "policy"), "ok", "{user:?}\n{r}");
        // ... but not touch existing protected paths, which are read-only mounts.
        assert_ne!(field(&r, "acode_x"), "ok", "{r}");
        assert_ne!(field(&r, "approval"), "ok", "{r}");
        // The runner removed what it created and failed the step as a sandbox violation.
        assert_eq!(code_of(&out), 32, "{user:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("acode-policy.json"),
            "{}",
            stderr(&out)
        );
        assert!(!ws.join("acode-policy.json").exists());
        assert!(!ws.join(".acode/x").exists());
        assert!(!ws.join("other.json.approval").exists());
        assert_eq!(
            std::fs::read(ws.join("plan.json.approval")).unwrap(),
            approval
        );

        // The next run, with no --sandbox flag, still has the default policy and the sandbox:
        // its command sees neither the key nor the host.
        a.t.file(
            "next.py",
            "import os\nprint('KEY' if os.environ.get('ACODE_APPROVAL_KEY') else 'nokey', os.path.exists('/var/tmp'))\n",
        );
        let next = a.t.plan(
            "next.json",
            &json!({"plan_id": "next", "steps": [
                {"step_id": "env", "tool": "run_command", "arguments": {"argv": ["python3", "next.py"]}}]}),
        );
        let n = next.to_str().unwrap();
        let out = a.acode(&["approve", n, "--by", "tester"]);
        assert_eq!(code_of(&out), 0, "{}", stderr(&out));
        let out = a.acode(&["run", n, "--json"]);
        assert_eq!(code_of(&out), 0, "{}", stderr(&out));
        // "False": /var/tmp is not visible, so the command ran under bwrap.
        let mut db_out = String::new();
        for row in a.t.artifacts("stdout") {
            db_out.push_str(&row);
        }
        assert!(db_out.contains("nokey False"), "{db_out}");
    }
}
