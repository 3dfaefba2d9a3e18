//! A registry mirror reaches the client in every mode (issue #32 item 6): whatever the resolver
//! of `registry:pypi` / `registry:npm` used to find the client's host — `PIP_INDEX_URL`, a user
//! `pip.conf`, `/etc/pip.conf`, `~/.npmrc` — the sandboxed client uses too, although inside the
//! sandbox it sees neither the runner's environment nor the user's home. The mirror is a stand-in
//! on 127.0.0.1 that records what it was asked and answers 404; the proxy's record shows that no
//! other host (the public index) was asked. Real pip and npm; no registry needed.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::json;

use crate::harness::*;

/// The package the clients are asked to install: on no index anywhere.
const PROBE: &str = "acode-mirror-probe";

/// A registry stand-in on 127.0.0.1: records each request's method and path, answers 404.
struct Mirror {
    port: u16,
    asked: Arc<Mutex<Vec<String>>>,
}

impl Mirror {
    fn start() -> Mirror {
        let l = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let log = asked.clone();
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                let log = log.clone();
                std::thread::spawn(move || {
                    let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(10)));
                    let mut reader = BufReader::new(&s);
                    let mut line = String::new();
                    if reader.read_line(&mut line).is_err() {
                        return;
                    }
                    // The rest of the head; the credentials the client sent, if any.
                    let mut auth = "-".to_string();
                    let mut h = String::new();
                    while reader.read_line(&mut h).is_ok_and(|n| n > 2) {
                        if let Some((k, v)) = h.split_once(':')
                            && k.eq_ignore_ascii_case("authorization")
                        {
                            auth = v.trim().to_string();
                        }
                        h.clear();
                    }
                    let mut parts = line.split_whitespace();
                    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                    log.lock()
                        .unwrap()
                        .push(format!("{method} {path} auth={auth}"));
                    let body = "not here";
                    let _ = write!(
                        &s,
                        "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
                         Connection: close\r\n\r\n{body}",
                        body.len()
                    );
                });
            }
        });
        Mirror { port, asked }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

/// Whether `program --version` runs; locally a test without it is skipped with the reason, on CI
/// (`CI` set) it fails.
fn have(program: &str, args: &[&str]) -> bool {
    let ok = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        acode_run::testing::skip(
            program,
            &format!("`{program} {}` does not work here", args.join(" ")),
        );
    }
    ok
}

fn have_pip() -> bool {
    have("python3", &["-m", "pip", "--version"])
}

/// The modes to run in: bwrap where it works, Landlock, none.
fn modes() -> Vec<&'static str> {
    let mut m = vec!["landlock", "none"];
    if bwrap_ok() {
        m.insert(0, "bwrap");
    }
    m
}

/// A workspace allowing `entry` whose plan runs `argv` once; its fake home directory.
fn setup(entry: &str, argv: &[&str]) -> (TestDir, PathBuf, PathBuf) {
    let t = TestDir::new();
    t.file(
        "acode-policy.json",
        &json!({"network": {"allow": [entry]},
                "creates": ["node_modules/"]})
        .to_string(),
    );
    let plan = t.plan(
        "mirror.json",
        &json!({"plan_id": "mirror", "steps": [
            {"step_id": "install", "tool": "run_command", "arguments": {"argv": argv}}]}),
    );
    let home = t.root.join("home");
    std::fs::create_dir_all(&home).unwrap();
    (t, plan, home)
}

/// `c` with `home` as HOME and none of the runner's own pip, npm or XDG settings, so only what
/// a test configures decides where the clients go.
fn isolate(c: &mut Command, home: &Path) {
    for (name, _) in std::env::vars_os() {
        let n = name.to_string_lossy().to_ascii_uppercase();
        if n.starts_with("PIP_") || n.starts_with("NPM_CONFIG_") || n.starts_with("XDG_") {
            c.env_remove(&name);
        }
    }
    c.env("HOME", home);
}

fn run_args<'a>(plan: &'a Path, mode: &'a str) -> [&'a str; 7] {
    [
        "run",
        "--approve",
        plan.to_str().unwrap(),
        "--sandbox",
        mode,
        "--confirm",
        "auto-deny",
    ]
}

/// Asserts the run's command asked the mirror for `path`, and that every request the proxy saw
/// went to the mirror (never to the public index).
fn assert_went_to_the_mirror(t: &TestDir, out: &Output, mirror: &Mirror, path: &str, what: &str) {
    let printed = format!("{}{}", stdout(out), stderr(out));
    assert!(
        printed.contains(&format!("127.0.0.1:{}", mirror.port)),
        "{what}: the header names the mirror: {printed}"
    );
    let asked = mirror.asked();
    assert!(
        asked.iter().any(|a| a.contains(path)),
        "{what}: the mirror was not asked for {path}: {asked:?}\n{printed}"
    );
    let rows: Vec<(String, i64, bool)> = t
        .db()
        .prepare("SELECT host, port, allowed FROM network_requests")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(!rows.is_empty(), "{what}: the proxy saw nothing\n{printed}");
    for (host, port, allowed) in &rows {
        assert!(
            host == "127.0.0.1" && *port == i64::from(mirror.port) && *allowed,
            "{what}: a request went elsewhere than the mirror: {rows:?}"
        );
    }
}

const PIP: [&str; 8] = [
    "python3",
    "-m",
    "pip",
    "install",
    "--dry-run",
    "--no-deps",
    "--disable-pip-version-check",
    PROBE,
];

#[test]
fn pip_uses_a_mirror_from_pip_index_url_in_every_mode() {
    if !have_pip() {
        return;
    }
    let mirror = Mirror::start();
    for mode in modes() {
        let (t, plan, home) = setup("registry:pypi", &PIP);
        let mut c = t.cmd();
        isolate(&mut c, &home);
        c.env("PIP_INDEX_URL", mirror.url("/simple"));
        let out = c.args(run_args(&plan, mode)).output().unwrap();
        assert_went_to_the_mirror(
            &t,
            &out,
            &mirror,
            &format!("/simple/{PROBE}/"),
            &format!("{mode}, PIP_INDEX_URL"),
        );
    }
}

/// A private index's credential: in the runner's `PIP_INDEX_URL` only, it never reaches pip (the
/// command gets the URL without it); passed by the policy (`env_passthrough`), pip sends it to the
/// mirror. Either way it is in no record and no output.
#[test]
fn a_mirror_credential_reaches_pip_only_through_a_passed_variable() {
    if !have_pip() {
        return;
    }
    use base64::Engine;
    let mirror = Mirror::start();
    let secret = format!("mirrorpw{}", uuid::Uuid::new_v4().simple());
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("__token__:{secret}"));
    let url = format!("http://__token__:{secret}@127.0.0.1:{}/simple", mirror.port);
    for mode in modes() {
        for passed in [false, true] {
            let (t, _, home) = setup("registry:pypi", &PIP);
            // And a step that prints the password alone, which only a known value can catch.
            let show = "import os, urllib.parse\n\
                        u = os.environ.get('PIP_INDEX_URL', '')\n\
                        print('pw-is', urllib.parse.urlsplit(u).password)";
            let plan = t.plan(
                "mirror.json",
                &json!({"plan_id": "mirror", "steps": [
                    {"step_id": "install", "tool": "run_command", "arguments": {"argv": PIP},
                     "on_failure": "continue"},
                    {"step_id": "show", "tool": "run_command",
                     "arguments": {"argv": ["python3", "-c", show]}, "depends_on": []}]}),
            );
            if passed {
                t.file(
                    "acode-policy.json",
                    &json!({"network": {"allow": ["registry:pypi"]},
                            "env_passthrough": ["PIP_INDEX_URL"]})
                    .to_string(),
                );
            }
            let before = mirror.asked().len();
            let mut c = t.cmd();
            isolate(&mut c, &home);
            c.env("PIP_INDEX_URL", &url);
            let out = c.args(run_args(&plan, mode)).output().unwrap();
            let what = format!("{mode}, passed: {passed}");
            assert_went_to_the_mirror(&t, &out, &mirror, &format!("/simple/{PROBE}/"), &what);
            let asked = mirror.asked()[before..].to_vec();
            let sent = asked
                .iter()
                .any(|a| a.ends_with(&format!("auth=Basic {basic}")));
            assert_eq!(sent, passed, "{what}: {asked:?}");
            let printed = format!("{}{}", stdout(&out), stderr(&out));
            let shown: String = t
                .db()
                .query_row(
                    "SELECT a.content FROM artifacts a JOIN executions e ON e.execution_id = \
                     a.execution_id WHERE e.step_id = 'show' AND a.artifact_type = 'stdout'",
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            let expected = if passed {
                "pw-is [REDACTED]"
            } else {
                "pw-is None"
            };
            assert_eq!(shown.trim(), expected, "{what}");
            let mut raw = std::fs::read(t.ws.join(".acode/executions.db")).unwrap();
            raw.extend(std::fs::read(t.ws.join(".acode/executions.db-wal")).unwrap_or_default());
            for form in [secret.as_str(), basic.as_str()] {
                assert!(!printed.contains(form), "{what}: printed: {printed}");
                assert!(
                    !raw.windows(form.len()).any(|w| w == form.as_bytes()),
                    "{what}: {form} is in the database"
                );
            }
        }
    }
}

#[test]
fn pip_uses_a_mirror_from_the_users_pip_conf_in_every_mode() {
    if !have_pip() {
        return;
    }
    let mirror = Mirror::start();
    for mode in modes() {
        let (t, plan, home) = setup("registry:pypi", &PIP);
        std::fs::create_dir_all(home.join(".config/pip")).unwrap();
        std::fs::write(
            home.join(".config/pip/pip.conf"),
            format!("[global]\nindex-url = {}\n", mirror.url("/simple")),
        )
        .unwrap();
        let mut c = t.cmd();
        isolate(&mut c, &home);
        let out = c.args(run_args(&plan, mode)).output().unwrap();
        assert_went_to_the_mirror(
            &t,
            &out,
            &mirror,
            &format!("/simple/{PROBE}/"),
            &format!("{mode}, ~/.config/pip/pip.conf"),
        );
    }
}

/// The machine's `/etc/pip.conf` is never touched: the run happens in a private mount namespace
/// (`unshare -m`, propagation private) where the test's file is bind-mounted over it (or, where the
/// machine has none, an overlay of `/etc` holds it). Needs root, as `.ci/run` runs.
#[test]
fn pip_uses_a_mirror_from_etc_pip_conf_in_every_mode() {
    if !have_pip() {
        return;
    }
    // Needs root (as `.ci/run` runs) for a private mount namespace.
    if !have("unshare", &["-m", "true"]) {
        return;
    }
    let mirror = Mirror::start();
    let before = std::fs::read("/etc/pip.conf").ok();
    for mode in modes() {
        let (t, plan, home) = setup("registry:pypi", &PIP);
        let conf = t.root.join("pip.conf");
        std::fs::write(
            &conf,
            format!("[global]\nindex-url = {}\n", mirror.url("/simple")),
        )
        .unwrap();
        let layer = t.root.join("etc-layer");
        let script = r#"set -e
conf="$1"; layer="$2"; shift 2
if [ -e /etc/pip.conf ]; then
  mount --bind "$conf" /etc/pip.conf
else
  mkdir -p "$layer" && mount -t tmpfs tmpfs "$layer" && mkdir "$layer/u" "$layer/w"
  cp "$conf" "$layer/u/pip.conf"
  mount -t overlay overlay -o "lowerdir=/etc,upperdir=$layer/u,workdir=$layer/w" /etc
fi
exec "$@""#;
        let mut c = Command::new("unshare");
        c.current_dir(&t.ws).stdin(Stdio::null());
        clean_env(&mut c);
        c.env("NO_COLOR", "1");
        isolate(&mut c, &home);
        c.args(["-m", "--propagation", "private", "sh", "-c", script, "sh"])
            .arg(&conf)
            .arg(&layer)
            .arg(env!("CARGO_BIN_EXE_acode-run"))
            .args(run_args(&plan, mode));
        let out = c.output().unwrap();
        assert_went_to_the_mirror(
            &t,
            &out,
            &mirror,
            &format!("/simple/{PROBE}/"),
            &format!("{mode}, /etc/pip.conf"),
        );
    }
    assert_eq!(
        std::fs::read("/etc/pip.conf").ok(),
        before,
        "the machine's /etc/pip.conf is unchanged"
    );
}

#[test]
fn npm_uses_a_mirror_from_the_users_npmrc_in_every_mode() {
    if !have("npm", &["--version"]) {
        return;
    }
    let mirror = Mirror::start();
    let npm = [
        "npm",
        "install",
        "--no-save",
        "--no-package-lock",
        "--no-audit",
        "--no-fund",
        "--update-notifier=false",
        PROBE,
    ];
    for mode in modes() {
        let (t, plan, home) = setup("registry:npm", &npm);
        std::fs::write(
            home.join(".npmrc"),
            format!("registry={}\n", mirror.url("/")),
        )
        .unwrap();
        let mut c = t.cmd();
        isolate(&mut c, &home);
        let out = c.args(run_args(&plan, mode)).output().unwrap();
        assert_went_to_the_mirror(
            &t,
            &out,
            &mirror,
            &format!("/{PROBE}"),
            &format!("{mode}, ~/.npmrc"),
        );
    }
}

/// cargo: the mirror crates-io is replaced with in `$CARGO_HOME/config.toml` reaches cargo in the
/// run's own `CARGO_HOME` (a copy of that file), and a registry token in the file does not: a
/// command reading the copy finds the mirror and no token.
#[test]
fn cargo_uses_a_mirror_from_its_config_toml_in_every_mode_without_its_token() {
    if !have("rustc", &["--version"]) {
        return;
    }
    let mirror = Mirror::start();
    let sysroot = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .unwrap();
    let sysroot = String::from_utf8(sysroot.stdout).unwrap();
    let toolchain_bin = Path::new(sysroot.trim()).join("bin");
    assert!(toolchain_bin.join("cargo").exists(), "{toolchain_bin:?}");
    let token = format!("cargotok{}", uuid::Uuid::new_v4().simple());
    let cargo_show = "import os\nprint(open(os.environ['CARGO_HOME'] + '/config.toml').read())";
    for mode in modes() {
        let t = TestDir::new();
        t.file(
            "acode-policy.json",
            &json!({"network": {"allow": ["registry:cargo"]}, "creates": ["Cargo.lock"]})
                .to_string(),
        );
        t.file(
            "Cargo.toml",
            &format!(
                "[package]\nname = \"probe\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
                 [dependencies]\n{PROBE} = \"1\"\n"
            ),
        );
        t.file("src/lib.rs", "");
        let plan = t.plan(
            "mirror.json",
            &json!({"plan_id": "mirror", "steps": [
                {"step_id": "show", "tool": "run_command",
                 "arguments": {"argv": ["python3", "-c", cargo_show]}},
                {"step_id": "lock", "tool": "run_command",
                 "arguments": {"argv": ["cargo", "generate-lockfile"]}}]}),
        );
        let cargo_home = t.root.join("cargo-home");
        std::fs::create_dir_all(&cargo_home).unwrap();
        std::fs::write(
            cargo_home.join("config.toml"),
            format!(
                "[source.crates-io]\nreplace-with = \"mirror\"\n\n[source.mirror]\nregistry = \
                 \"sparse+{}\"\n\n[registries.mirror]\nindex = \"sparse+{}\"\ntoken = \"{token}\"\n",
                mirror.url("/index/"),
                mirror.url("/index/")
            ),
        )
        .unwrap();
        let mut c = t.cmd();
        c.env("CARGO_HOME", &cargo_home);
        let path = std::env::var("PATH").unwrap_or_default();
        c.env("PATH", format!("{}:{path}", toolchain_bin.display()));
        let out = c.args(run_args(&plan, mode)).output().unwrap();
        let printed = format!("{}{}", stdout(&out), stderr(&out));
        let shown: String = t
            .db()
            .query_row(
                "SELECT a.content FROM artifacts a JOIN executions e ON e.execution_id = \
                 a.execution_id WHERE e.step_id = 'show' AND a.artifact_type = 'stdout'",
                [],
                |r| r.get(0),
            )
            .unwrap_or_default();
        assert!(
            shown.contains(&format!("sparse+{}", mirror.url("/index/"))),
            "{mode}: the run's CARGO_HOME has the mirror: {shown}\n{printed}"
        );
        assert!(!shown.contains("token"), "{mode}: {shown}");
        assert!(!printed.contains(&token), "{mode}: {printed}");
        assert_went_to_the_mirror(
            &t,
            &out,
            &mirror,
            "/index/config.json",
            &format!("{mode}, $CARGO_HOME/config.toml"),
        );
    }
}
