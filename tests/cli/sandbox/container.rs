//! The containment suite (issue 32) in a real container: a Debian root file system built once with
//! `debootstrap`, run by Podman with its default seccomp profile and no added capability, as root
//! and as uid 1000, with bwrap absent and with bwrap present but refused (`Can't mount proc`). In
//! each, `auto` must fall back to Landlock, say why, and hold the promise of docs/security.md: a
//! command never writes outside the workspace, reaches an outside address, reads a home's
//! credential files, writes a nested repository's `.git` or reads a sibling command's environment.
//!
//! Opt-in (`ACODE_E2E_CONTAINER=1`, set by `.ci/run`): it needs root, `podman`, `runc` and
//! `debootstrap`, and the Debian package registry the first time (the mirror is the one this
//! machine's apt is configured with). The root file system is cached under `target/tmp/`
//! (`CARGO_TARGET_TMPDIR`); each run gets a throwaway overlay of it (`--rootfs DIR:O`). The binary
//! is the one the test suite built (`CARGO_BIN_EXE_acode-run`, a debug build: building a release
//! binary too would cost CI minutes for no difference in what the sandbox does), bind-mounted
//! read-only at `/usr/local/bin/acode-run`. The container has no network (`--network none`): the
//! "outside address" is a listener on the container's loopback, outside every command's sandbox,
//! so nothing leaves the machine even if the defence regresses.
//!
//! The suite itself ([`Suite`]) is also run on the host by tests/cli/sandbox/fallback.rs, where a fake
//! `bwrap` fails as AppArmor makes it fail on Ubuntu 24.04.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;

use serde_json::{Value, json};

use crate::harness::*;

/// The credential files planted in the home, relative to it.
pub const CREDENTIALS: [&str; 6] = [
    ".ssh/id_rsa",
    ".aws/credentials",
    ".netrc",
    ".git-credentials",
    ".docker/config.json",
    ".config/gh/hosts.yml",
];

/// The port of the outside listener.
const PORT_IN_CONTAINER: u16 = 47011;

/// One containment suite: the files it laid out under `root` (seen by the commands under
/// `inside`), its markers, and the plan that attacks them.
pub struct Suite {
    /// The suite's directory on the host: `ws/`, `outside/`, `home/`, `plan.json`.
    pub root: PathBuf,
    /// The text in every planted credential file, and nowhere else.
    pub marker: String,
    /// The value of the sleeper's secret-named `env` entry.
    pub env_marker: String,
}

impl Suite {
    /// Lays out the workspace, the outside sibling, the home with its credential files and the
    /// plan, for commands that see `root` as `inside` and the listener at `127.0.0.1:port`.
    pub fn lay_out(root: &Path, inside: &Path, port: u16) -> Suite {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let suite = Suite {
            root: root.to_path_buf(),
            marker: format!("acodecredmarker{id}"),
            env_marker: format!("acodeenvmarker{id}"),
        };
        let ws = root.join("ws");
        let write = |p: PathBuf, text: &str| {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        write(root.join("outside/sentinel.txt"), "untouched\n");
        for rel in CREDENTIALS {
            write(
                root.join("home").join(rel),
                &format!("secret {}\n", suite.marker),
            );
        }
        write(ws.join("vendor/lib/.git/config"), "[core]\n");
        write(ws.join("vendor/lib/.git/HEAD"), "ref: refs/heads/main\n");
        write(ws.join("vendor/lib/README"), "vendored\n");
        write(
            ws.join("acode-policy.json"),
            &json!({"allow_commands": ["python3"], "auto_approve_commands": ["python3"]})
                .to_string(),
        );
        std::fs::create_dir_all(ws.join("out")).unwrap();
        let inside_home = inside.join("home");
        let scripts = [
            // (a) Outside the workspace: create a file, open the sentinel for appending (nothing
            // written either way if it opens).
            (
                "outside",
                format!(
                    "import errno\n\
                     def tr(f):\n    \
                     try:\n        f(); return 'opened'\n    \
                     except OSError as e: return errno.errorcode.get(e.errno, str(e.errno))\n\
                     out = [tr(lambda: open({new:?}, 'x').close()), tr(lambda: open({old:?}, 'a').close())]\n\
                     open('out/outside.txt', 'w').write(' '.join(out))\n",
                    new = inside.join("outside/escaped.txt").display().to_string(),
                    old = inside.join("outside/sentinel.txt").display().to_string(),
                ),
            ),
            // (b) TCP to the outside listener.
            (
                "connect",
                format!(
                    "import errno, socket\n\
                     try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=5).close(); r = 'connected'\n\
                     except OSError as e: r = errno.errorcode.get(e.errno, str(e))\n\
                     open('out/connect.txt', 'w').write(r)\n"
                ),
            ),
            // (c) The credential files, by `~` and by the home's path: what is read is printed,
            // so a leak reaches the outputs and the database, where the test looks for it.
            (
                "credentials",
                format!(
                    "import errno, os\n\
                     out = []\n\
                     for rel in {rels:?}:\n    \
                     for p in [os.path.expanduser('~/' + rel), os.path.join({home:?}, rel)]:\n        \
                     try:\n            print(open(p).read()); out.append(rel + ' read')\n        \
                     except OSError as e: out.append(rel + ' ' + errno.errorcode.get(e.errno, str(e.errno)))\n\
                     open('out/credentials.txt', 'w').write('\\n'.join(out))\n",
                    rels = CREDENTIALS,
                    home = inside_home.display().to_string(),
                ),
            ),
            // (d) A nested repository's config, opened for appending (nothing written).
            (
                "nested_git",
                "import errno\n\
                 try:\n    open('vendor/lib/.git/config', 'a').close(); r = 'opened'\n\
                 except OSError as e: r = errno.errorcode.get(e.errno, str(e.errno))\n\
                 open('out/nested_git.txt', 'w').write(r)\n"
                    .to_string(),
            ),
            // (e) A sibling that holds a secret in its environment until the prober is done.
            (
                "sleeper",
                "import os, time\n\
                 open('out/sleeper.pid', 'w').write(str(os.getpid()))\n\
                 for _ in range(3000):\n    \
                 if os.path.exists('out/environ.txt'): break\n    time.sleep(0.01)\n"
                    .to_string(),
            ),
            // The prober says whether the sibling's environment opened and held the variable's
            // name; it never prints the value.
            (
                "prober",
                "import errno, os, time\n\
                 for _ in range(3000):\n    \
                 if os.path.exists('out/sleeper.pid') and open('out/sleeper.pid').read(): break\n    \
                 time.sleep(0.01)\n\
                 pid = open('out/sleeper.pid').read()\n\
                 try:\n    env = open('/proc/' + pid + '/environ', 'rb').read(); r = 'read, DEPLOY_TOKEN ' + ('there' if b'DEPLOY_TOKEN=' in env else 'absent')\n\
                 except OSError as e: r = errno.errorcode.get(e.errno, str(e.errno))\n\
                 open('out/environ.txt', 'w').write(r)\n"
                    .to_string(),
            ),
        ];
        let mut steps = Vec::new();
        for (id, code) in &scripts {
            write(ws.join(format!("scripts/{id}.py")), code);
            let mut step = json!({"step_id": id, "tool": "run_command", "on_failure": "continue",
                "depends_on": [], "parallel_safe": true,
                "arguments": {"argv": ["python3", format!("scripts/{id}.py")], "timeout_s": 60}});
            if *id == "sleeper" {
                step["arguments"]["env"] = json!({"DEPLOY_TOKEN": suite.env_marker});
            }
            steps.push(step);
        }
        // The sleeper and the prober first, so that `--jobs 2` starts them side by side.
        steps.rotate_left(4);
        write(
            root.join("plan.json"),
            &serde_json::to_string_pretty(&json!({"plan_id": "containment", "steps": steps}))
                .unwrap(),
        );
        suite
    }

    /// What the suite's run broke of the promise, one line each (empty: it held). `outputs` are
    /// every output of the run (stdout, stderr, reports, events) by name; `connections` how many
    /// the outside listener accepted.
    pub fn broken(&self, outputs: &[(&str, Vec<u8>)], connections: usize) -> Vec<String> {
        let ws = self.root.join("ws");
        let mut broken = Vec::new();
        let report = |name: &str| std::fs::read_to_string(ws.join("out").join(name)).ok();
        let mut expect = |what: &str, name: &str, ok: &dyn Fn(&str) -> bool| match report(name) {
            None => broken.push(format!("{what}: the step left no report (out/{name})")),
            Some(r) if !ok(&r) => broken.push(format!("{what}: {r}")),
            Some(_) => {}
        };
        let refused = |r: &str| !r.is_empty() && !r.contains("opened") && !r.contains("read");
        expect("(a) write outside the workspace", "outside.txt", &refused);
        expect("(b) TCP to an outside address", "connect.txt", &|r| {
            !r.is_empty() && r != "connected"
        });
        expect("(c) read a credential file", "credentials.txt", &|r| {
            r.lines().count() == 2 * CREDENTIALS.len() && !r.contains(" read")
        });
        expect(
            "(d) append to vendor/lib/.git/config",
            "nested_git.txt",
            &refused,
        );
        expect(
            "(e) read a concurrent sibling's /proc/PID/environ",
            "environ.txt",
            &refused,
        );
        if connections > 0 {
            broken.push(format!(
                "(b) the outside listener accepted {connections} connection(s)"
            ));
        }
        let outside: Vec<String> = std::fs::read_dir(self.root.join("outside"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        if outside != ["sentinel.txt"]
            || std::fs::read_to_string(self.root.join("outside/sentinel.txt")).unwrap()
                != "untouched\n"
        {
            broken.push(format!("(a) the outside directory changed: {outside:?}"));
        }
        if std::fs::read_to_string(ws.join("vendor/lib/.git/config")).unwrap() != "[core]\n" {
            broken.push("(d) vendor/lib/.git/config changed".to_string());
        }
        // The markers, in every output and in the raw bytes of the database and its journal.
        let mut places: Vec<(String, Vec<u8>)> = outputs
            .iter()
            .map(|(n, b)| (n.to_string(), b.clone()))
            .collect();
        for f in [
            "executions.db",
            "executions.db-wal",
            "executions.db-journal",
        ] {
            if let Ok(bytes) = std::fs::read(ws.join(".acode").join(f)) {
                places.push((format!(".acode/{f}"), bytes));
            }
        }
        assert!(
            places.iter().any(|(n, _)| n == ".acode/executions.db"),
            "the run left no database"
        );
        for (name, bytes) in &places {
            for (what, marker) in [
                ("(c) a credential file's text", &self.marker),
                ("a secret env value", &self.env_marker),
            ] {
                if contains(bytes, marker.as_bytes()) {
                    broken.push(format!("{what} is in {name}"));
                }
            }
        }
        broken
    }
}

/// Whether the container tests are switched on; a named skip when they are not (logged and
/// counted by `scripts/test.sh`, a failure under `CI`, which `.ci/run` sets along with
/// `ACODE_E2E_CONTAINER=1`).
pub(crate) fn enabled() -> bool {
    let on = std::env::var("ACODE_E2E_CONTAINER").is_ok_and(|v| v == "1");
    if !on {
        acode_run::testing::skip(
            "ACODE_E2E_CONTAINER=1",
            "the containment suite runs in a real container (needs root, podman, runc, \
             debootstrap)",
        );
    }
    on
}

/// The Debian mirror and suite this machine's apt uses for its own release (deb822
/// `sources.list.d/*.sources` or one-line `sources.list`): debootstrap builds the same release, so
/// the test binary's C library matches.
fn apt_mirror() -> (String, String) {
    let os = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    let codename = os
        .lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|c| c.trim_matches('"').to_string())
        .expect(
            "/etc/os-release names no VERSION_CODENAME: the container test needs a Debian host",
        );
    let mut files: Vec<PathBuf> = std::fs::read_dir("/etc/apt/sources.list.d")
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    files.insert(0, PathBuf::from("/etc/apt/sources.list"));
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        if file.extension().is_some_and(|e| e == "sources") {
            for para in text.split("\n\n") {
                let field = |name: &str| {
                    para.lines()
                        .find_map(|l| l.strip_prefix(name))
                        .map(|v| v.trim().to_string())
                };
                let (Some(types), Some(uris), Some(suites)) =
                    (field("Types:"), field("URIs:"), field("Suites:"))
                else {
                    continue;
                };
                if types.split_whitespace().any(|t| t == "deb")
                    && suites.split_whitespace().any(|s| s == codename)
                    && let Some(uri) = uris.split_whitespace().next()
                {
                    return (uri.to_string(), codename);
                }
            }
        } else {
            for line in text.lines() {
                let words: Vec<&str> = line
                    .split_whitespace()
                    .filter(|w| !w.starts_with('['))
                    .collect();
                if words.len() >= 3 && words[0] == "deb" && words[2] == codename {
                    return (words[1].to_string(), codename);
                }
            }
        }
    }
    panic!("no apt source for {codename} in /etc/apt: the container test reads its mirror there");
}

/// The cached root file system (built on first use): Debian minbase with python3, git, nodejs
/// and bubblewrap, whose `bwrap` is moved aside to `/usr/local/libexec/acode-test/bwrap` (a run mounts
/// it back for "bwrap present"), and a user `user` (uid 1000, home `/home/user`).
pub(crate) fn rootfs() -> PathBuf {
    static BUILT: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.as_ref() {
        return p.clone();
    }
    let (mirror, suite) = apt_mirror();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("container-rootfs-{suite}-v2"));
    if !dir.join(".complete").exists() {
        let partial = dir.with_extension("partial");
        unmount_beneath(&partial);
        let _ = std::fs::remove_dir_all(&partial);
        let start = Instant::now();
        let out = Command::new("nice")
            .args([
                "debootstrap",
                "--variant=minbase",
                "--include=python3,git,nodejs,bubblewrap",
                &suite,
            ])
            .arg(&partial)
            .arg(&mirror)
            .output()
            .expect("debootstrap runs (apt-get install debootstrap)");
        // debootstrap can leave the target's /proc (and /sys) mounted: a copy, `du` or removal of
        // target/ would then walk the host's /proc (a copy of it once filled the disk).
        unmount_beneath(&partial);
        assert!(
            out.status.success(),
            "debootstrap failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let aside = partial.join("usr/local/libexec/acode-test");
        std::fs::create_dir_all(&aside).unwrap();
        std::fs::rename(partial.join("usr/bin/bwrap"), aside.join("bwrap")).unwrap();
        let append = |rel: &str, line: &str| {
            use std::io::Write as _;
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(partial.join(rel))
                .unwrap();
            writeln!(f, "{line}").unwrap();
        };
        append("etc/passwd", "user:x:1000:1000:user:/home/user:/bin/sh");
        append("etc/group", "user:x:1000:");
        std::fs::create_dir_all(partial.join("home/user")).unwrap();
        std::fs::write(partial.join(".complete"), "").unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::rename(&partial, &dir).unwrap();
        eprintln!(
            "built the container root file system in {:.0?}",
            start.elapsed()
        );
    }
    *built = Some(dir.clone());
    dir
}

/// Unmounts every mount point at or beneath `dir` (deepest first), as debootstrap may leave them.
fn unmount_beneath(dir: &Path) {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else {
        return;
    };
    let mut points: Vec<PathBuf> = mounts
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(PathBuf::from)
        .filter(|p| p.starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in points {
        let status = Command::new("umount").arg("--lazy").arg(&p).status();
        assert!(
            status.is_ok_and(|s| s.success()),
            "cannot unmount {} left by debootstrap",
            p.display()
        );
    }
}

/// What runs inside the container: the listener, then `preview`, `approve` and `run` as a CI job
/// would, each output in `/t`.
const DRIVE: &str = r#"set -u
cd /t/ws
python3 /t/listen.py & listener=$!
for _ in $(seq 100); do [ -e /t/listening ] && break; sleep 0.05; done
acode-run preview /t/plan.json > /t/preview.out 2> /t/preview.err
acode-run approve /t/plan.json --by tester > /t/approve.out 2>&1 || echo "approve failed" >> /t/approve.out
GITHUB_STEP_SUMMARY=/t/summary.md acode-run run /t/plan.json --jobs 2 --jsonl \
  --junit /t/junit.xml --annotations github > /t/run.out 2> /t/run.err
echo $? > /t/run.rc
touch /t/done
wait $listener
"#;

/// Counts the connections to 127.0.0.1:PORT until `/t/done` exists.
const LISTEN: &str = r#"import os, socket, time
s = socket.socket()
s.bind(('127.0.0.1', PORT))
s.listen(16)
s.settimeout(0.1)
open('/t/listening', 'w').close()
n = 0
while not os.path.exists('/t/done'):
    try:
        s.accept()[0].close(); n += 1
    except socket.timeout:
        pass
open('/t/connections', 'w').write(str(n))
"#;

/// `podman run` as `uid`, with no network, the default seccomp profile and no added capability,
/// `root` at `/t` and the test suite's `acode-run` at `/usr/local/bin/acode-run`; the caller adds
/// its own mounts, then `--rootfs` and the command.
fn podman(uid: u32, root: &Path) -> Command {
    let mut c = Command::new("podman");
    c.args([
        "run",
        "--rm",
        "--runtime",
        "runc",
        "--cgroup-manager",
        "cgroupfs",
        "--ulimit",
        "nofile=4096:4096",
        "--ulimit",
        "nproc=4096:4096",
        "--network",
        "none",
        "--user",
        &format!("{uid}:{uid}"),
        "-e",
        "NO_COLOR=1",
        "-v",
        &format!("{}:/t", root.display()),
        "-v",
        &format!(
            "{}:/usr/local/bin/acode-run:ro",
            env!("CARGO_BIN_EXE_acode-run")
        ),
    ]);
    c
}

/// Runs the suite in a container as `uid` (0 or 1000), with the rootfs's bwrap mounted at
/// `/usr/bin/bwrap` or not, and asserts it held and the header named the fallback's cause.
fn contain(uid: u32, with_bwrap: bool) {
    if !enabled() {
        return;
    }
    let rootfs = rootfs();
    let t = TestDir::new();
    let root = t.root.join("suite");
    let suite = Suite::lay_out(&root, Path::new("/t"), PORT_IN_CONTAINER);
    std::fs::write(
        root.join("listen.py"),
        LISTEN.replace("PORT", &PORT_IN_CONTAINER.to_string()),
    )
    .unwrap();
    std::fs::write(root.join("drive.sh"), DRIVE).unwrap();
    let home = if uid == 0 { "/root" } else { "/home/user" };
    if uid != 0 {
        let out = Command::new("chown")
            .args(["-R", &format!("{uid}:{uid}")])
            .arg(&root)
            .output()
            .unwrap();
        assert!(out.status.success(), "chown: {out:?}");
    }
    let mut c = podman(uid, &root);
    c.args([
        "-e",
        &format!("HOME={home}"),
        "-v",
        &format!("{}:{home}", root.join("home").display()),
    ]);
    if with_bwrap {
        c.args([
            "-v",
            &format!(
                "{}:/usr/bin/bwrap:ro",
                rootfs.join("usr/local/libexec/acode-test/bwrap").display()
            ),
        ]);
    }
    c.arg("--rootfs")
        .arg(format!("{}:O", rootfs.display()))
        .args(["sh", "/t/drive.sh"]);
    let start = Instant::now();
    let out = c
        .output()
        .expect("podman runs (apt-get install podman runc)");
    eprintln!(
        "uid {uid}, bwrap {}: container run took {:.1?}",
        if with_bwrap { "present" } else { "absent" },
        start.elapsed()
    );
    let read = |name: &str| std::fs::read(root.join(name)).unwrap_or_default();
    let text = |name: &str| String::from_utf8_lossy(&read(name)).into_owned();
    assert!(
        out.status.success() && root.join("run.rc").exists(),
        "podman: {out:?}\napprove: {}\nrun: {}",
        text("approve.out"),
        text("run.err")
    );
    let run_err = text("run.err");
    assert_eq!(text("run.rc").trim(), "0", "{run_err}");
    // The mode, and why: the header, preview, JUnit and the job summary say the same.
    let why = if with_bwrap {
        "runs in a container whose runtime masks parts of /proc"
    } else {
        "no `bwrap` on PATH"
    };
    for (name, says) in [
        ("run.err", run_err.clone()),
        ("preview.out", text("preview.out")),
        ("junit.xml", text("junit.xml")),
        ("summary.md", text("summary.md")),
    ] {
        assert!(
            says.contains("landlock (Landlock ABI") && says.contains(why),
            "{name} does not name the mode and {why:?}:\n{says}"
        );
    }
    if with_bwrap {
        assert!(
            run_err.contains("Can't mount proc") && run_err.contains("unmask=/proc/*"),
            "{run_err}"
        );
    }
    let events = events_of(&text("run.out"));
    assert_events_match_schema(&events);
    let outputs: Vec<(&str, Vec<u8>)> = [
        "run.out",
        "run.err",
        "junit.xml",
        "summary.md",
        "preview.out",
        "preview.err",
        "approve.out",
    ]
    .into_iter()
    .map(|n| (n, read(n)))
    .collect();
    let connections: usize = text("connections").trim().parse().unwrap_or(usize::MAX);
    let broken = suite.broken(&outputs, connections);
    assert!(
        broken.is_empty(),
        "in a container as uid {uid}, bwrap {}: the promise broke:\n{}\n--- run stderr:\n{run_err}",
        if with_bwrap { "present" } else { "absent" },
        broken.join("\n")
    );
}

/// The JSONL lines of `text`, parsed.
fn events_of(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn in_a_container_as_root_without_bwrap_the_promise_holds() {
    contain(0, false);
}

#[test]
fn in_a_container_as_root_with_bwrap_refused_the_promise_holds() {
    contain(0, true);
}

#[test]
fn in_a_container_as_uid_1000_without_bwrap_the_promise_holds() {
    contain(1000, false);
}

#[test]
fn in_a_container_as_uid_1000_with_bwrap_refused_the_promise_holds() {
    contain(1000, true);
}

/// What runs inside the container for the Node programs: `approve` (which starts the MCP server
/// to pin its tools) and `run`, with the npm prefix's `.bin` first on `PATH`, as a CI job would.
const DRIVE_NODE: &str = r#"set -u
cd /t/ws
export PATH=/opt/npm/node_modules/.bin:$PATH
acode-run approve /t/plan.json --by tester > /t/approve.out 2>&1 || echo "approve failed" >> /t/approve.out
acode-run run /t/plan.json --jsonl > /t/run.out 2> /t/run.err
echo $? > /t/run.rc
"#;

/// Issue 43 §2 in a container (Landlock, as `auto` chooses there): a Node program and a Node MCP
/// server, installed on the host with `npm install --prefix DIR` (npm's own registry) and mounted
/// read-only at `/opt/npm`, outside the workspace and the home, run with their dependencies beside
/// them: `cowsay` needs `yargs`, `@modelcontextprotocol/server-filesystem` its SDK. The node is
/// the container's own (Debian's `nodejs`).
#[test]
fn in_a_container_npm_installed_programs_outside_the_workspace_run_with_their_dependencies() {
    if !enabled() {
        return;
    }
    if !e2e_net("cowsay and an MCP server from the npm registry") {
        return;
    }
    let rootfs = rootfs();
    let t = TestDir::new();
    let root = t.root.join("node");
    let prefix = t.root.join("npm");
    for package in ["cowsay", "@modelcontextprotocol/server-filesystem"] {
        crate::sandbox::node::npm_install(&prefix, package);
    }
    let ws = root.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("notes.txt"), "hello\n").unwrap();
    std::fs::write(
        ws.join("acode-policy.json"),
        json!({"allow_commands": ["cowsay"], "auto_approve_commands": ["cowsay"],
               "mcp": {"servers": {"fs": {"command": ["mcp-server-filesystem", "."],
                                          "tools": ["list_directory"], "confirm": false}}}})
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        root.join("plan.json"),
        json!({"plan_id": "node", "steps": [
            {"step_id": "moo", "tool": "run_command", "arguments": {"argv": ["cowsay", "moo"]}},
            {"step_id": "ls", "tool": "mcp__fs__list_directory", "arguments": {"path": "."}}]})
        .to_string(),
    )
    .unwrap();
    std::fs::write(root.join("drive.sh"), DRIVE_NODE).unwrap();
    let mut c = podman(0, &root);
    c.args(["-e", "HOME=/root", "-v"])
        .arg(format!("{}:/opt/npm:ro", prefix.display()))
        .arg("--rootfs")
        .arg(format!("{}:O", rootfs.display()))
        .args(["sh", "/t/drive.sh"]);
    let out = c
        .output()
        .expect("podman runs (apt-get install podman runc)");
    let text = |name: &str| std::fs::read_to_string(root.join(name)).unwrap_or_default();
    let run_err = text("run.err");
    assert!(
        out.status.success() && !text("approve.out").contains("approve failed"),
        "podman: {out:?}\napprove: {}\nrun: {run_err}",
        text("approve.out")
    );
    assert_eq!(text("run.rc").trim(), "0", "{run_err}");
    assert!(run_err.contains("landlock (Landlock ABI"), "{run_err}");
    let events = events_of(&text("run.out"));
    let completed: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "step_completed")
        .filter_map(|e| e["step_id"].as_str())
        .collect();
    assert_eq!(completed, ["moo", "ls"], "{run_err}");
    let db = rusqlite::Connection::open(ws.join(".acode/executions.db")).unwrap();
    let cow: String = q(
        &db,
        "SELECT a.content FROM artifacts a JOIN executions e USING (execution_id)
         WHERE e.step_id = 'moo' AND a.artifact_type = 'stdout'",
    );
    assert!(cow.contains("< moo >"), "{cow}");
    let listed: String = q(
        &db,
        "SELECT a.content FROM artifacts a JOIN executions e USING (execution_id)
         WHERE e.step_id = 'ls' AND a.artifact_type = 'mcp_result'",
    );
    assert!(listed.contains("notes.txt"), "{listed}");
}
