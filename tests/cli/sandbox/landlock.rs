//! The Landlock sandbox, the sandbox modes and the resource limits, through the real binary on the
//! real kernel (SPEC §6 "OS sandbox", "Limits", "The runner's own secrets").

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use crate::harness::*;

/// Whether the kernel has Landlock; a named, counted skip when not (a failure under CI).
pub(crate) fn landlock_usable() -> bool {
    let ok = acode_run::sandbox::landlock::kernel_abi().is_some();
    if !ok {
        acode_run::testing::skip("Landlock", "the kernel has none");
    }
    ok
}

/// A step running the Python script `code` (written to `scripts/STEP.py`, since arguments may not
/// hold `;` or newlines); the run goes on when it fails.
fn py(t: &TestDir, step_id: &str, code: &str) -> serde_json::Value {
    let script = format!("scripts/{step_id}.py");
    t.file(&script, code);
    json!({"step_id": step_id, "tool": "run_command", "on_failure": "continue", "depends_on": [],
           "arguments": {"argv": ["python3", script]}})
}

fn status(t: &TestDir, step: &str) -> String {
    q(
        &t.db(),
        &format!("SELECT status FROM steps WHERE step_id='{step}'"),
    )
}

fn error_of(t: &TestDir, step: &str) -> String {
    q(
        &t.db(),
        &format!("SELECT coalesce(error_message, '') FROM executions WHERE step_id='{step}'"),
    )
}

#[test]
fn under_landlock_an_interpreter_writes_only_inside_and_cannot_connect() {
    if !landlock_usable() {
        return;
    }
    let t = TestDir::new();
    t.file("sub/keep", "");
    t.file(".git/hooks/README", "hooks\n");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let outside = t.outside.join("escaped.txt");
    let w = |p: &Path| format!("open({:?}, 'w').write('x')", p.to_str().unwrap());
    let plan = t.plan(
        "l.json",
        &json!({"plan_id": "landlock", "steps": [
            py(&t, "outside", &w(&outside)),
            py(&t, "overwrite", &w(&t.outside.join("sentinel.txt"))),
            py(&t, "hook", &w(&t.ws.join(".git/hooks/x"))),
            py(&t, "policy", &w(&t.ws.join("acode-policy.json"))),
            py(&t, "connect", &format!(
                "import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=5)\nprint('connected')")),
            py(&t, "inside", "open('sub/in.txt', 'w').write('ok')"),
            py(&t, "temp", "import os, tempfile\nf = tempfile.NamedTemporaryFile(delete=False)\nf.write(b'x'); f.close()\nprint(os.environ['TMPDIR'], f.name)"),
        ]}),
    );
    let out = t.approve_and_run(&plan, &["--sandbox", "landlock"]);
    // Every attack step tolerates its (expected) failure, so the run itself succeeds.
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("sandbox: landlock (Landlock ABI"),
        "{}",
        stderr(&out)
    );
    for step in ["outside", "overwrite", "hook", "policy"] {
        assert_eq!(status(&t, step), "failed", "{step}");
        assert!(
            artifact_of(&t, step, "stderr").contains("PermissionError"),
            "{step}: {}",
            artifact_of(&t, step, "stderr")
        );
    }
    assert!(
        error_of(&t, "hook").contains("under Landlock"),
        "{}",
        error_of(&t, "hook")
    );
    t.assert_outside_untouched();
    assert!(!t.ws.join(".git/hooks/x").exists());
    assert!(!t.ws.join("acode-policy.json").exists());
    let abi = acode_run::sandbox::landlock::kernel_abi().unwrap_or(0);
    if abi >= 4 {
        assert_eq!(status(&t, "connect"), "failed");
        assert!(!artifact_of(&t, "connect", "stdout").contains("connected"));
        listener.set_nonblocking(true).unwrap();
        assert!(listener.accept().is_err(), "nothing may have connected");
    } else {
        acode_run::testing::skip(
            "Landlock network rules (ABI 4)",
            &format!("the kernel has ABI {abi}; the TCP check did not run"),
        );
    }
    assert_eq!(status(&t, "inside"), "completed");
    assert_eq!(t.read("sub/in.txt"), "ok");
    assert_eq!(status(&t, "temp"), "completed", "{}", error_of(&t, "temp"));
    let printed = artifact_of(&t, "temp", "stdout");
    let mut words = printed.split_whitespace();
    let (tmpdir, file) = (words.next().unwrap(), words.next().unwrap());
    assert!(file.starts_with(tmpdir), "{printed}");
    assert!(tmpdir.contains("acode-run-"), "{printed}");
    // The private temp directory is removed with the run.
    assert!(!Path::new(tmpdir).exists(), "{tmpdir} survived the run");
}

/// A directory holding only links to the programs a test needs, so `PATH` has no `bwrap`.
fn path_without_bwrap(t: &TestDir, programs: &[&str]) -> PathBuf {
    let bin = t.root.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for p in programs {
        let real = ["/usr/bin", "/bin"]
            .iter()
            .map(|d| Path::new(d).join(p))
            .find(|c| c.exists())
            .unwrap_or_else(|| panic!("{p} not found"));
        std::os::unix::fs::symlink(real, bin.join(p)).unwrap();
    }
    bin
}

#[test]
fn auto_without_bwrap_uses_landlock_and_says_so_everywhere() {
    if !landlock_usable() {
        return;
    }
    let t = TestDir::new();
    let bin = path_without_bwrap(&t, &["true"]);
    let plan = t.plan(
        "a.json",
        &json!({"plan_id": "auto", "steps": [
            {"step_id": "t", "tool": "run_command", "arguments": {"command": "true"}}]}),
    );
    t.approve(&plan);
    let out = t
        .cmd()
        .args(["run", plan.to_str().unwrap(), "--jsonl"])
        .env("PATH", &bin)
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("warning") && err.contains("Landlock"),
        "no fallback warning: {err}"
    );
    assert!(err.contains("sandbox: landlock (Landlock ABI"), "{err}");
    let events = events(&out);
    let started = &events[0];
    assert_eq!(started["type"], "run_started");
    assert_eq!(started["sandbox"]["mode"], "landlock");
    assert_eq!(started["sandbox"]["requested"], "auto");
    let abi = started["sandbox"]["landlock_abi"].as_i64().unwrap();
    assert!(abi >= 1);
    let db = t.db();
    assert_eq!(q::<String>(&db, "SELECT sandbox FROM runs"), "landlock");
    assert_eq!(q::<i64>(&db, "SELECT landlock_abi FROM runs"), abi);
    // `show --json` carries it too.
    let shown: serde_json::Value = serde_json::from_str(&stdout(&t.run(&[
        "show",
        &q::<String>(&db, "SELECT run_id FROM runs"),
        "--json",
    ])))
    .unwrap();
    assert_eq!(shown["run"]["sandbox"], "landlock", "{shown}");
}

#[test]
fn requested_landlock_runs_and_none_is_recorded_with_its_warning_as_root() {
    if !landlock_usable() {
        return;
    }
    // `--sandbox landlock` runs the command under Landlock, and says and records so.
    let t = TestDir::new();
    std::fs::create_dir_all(t.ws.join("sub")).unwrap();
    let landlocked = t.plan(
        "l.json",
        &json!({"plan_id": "landlock", "steps": [
            py(&t, "t", "open('sub/ran', 'w').write('x')\nopen('/etc/passwd', 'a')")]}),
    );
    let out = t.approve_and_run(&landlocked, &["--sandbox", "landlock"]);
    assert_exit_with(&out, 0, "sandbox: landlock (Landlock ABI");
    // It ran, and under Landlock: writing inside worked, opening outside for writing did not.
    assert_eq!(t.read("sub/ran"), "x", "{}", stderr(&out));
    assert_eq!(status(&t, "t"), "failed");
    assert!(
        artifact_of(&t, "t", "stderr").contains("PermissionError"),
        "{}",
        artifact_of(&t, "t", "stderr")
    );
    assert_eq!(q::<String>(&t.db(), "SELECT sandbox FROM runs"), "landlock");

    // `--sandbox none` runs it unconfined, recorded as `none`, and as root warns that the
    // runner's secrets cannot be protected.
    let t = TestDir::new();
    let plan = t.plan(
        "n.json",
        &json!({"plan_id": "none", "steps": [
            {"step_id": "t", "tool": "run_command", "arguments": {"command": "true"}}]}),
    );
    let out = t.approve_and_run(&plan, &["--sandbox", "none"]);
    assert_exit_with(&out, 0, "sandbox: none");
    assert_eq!(q::<String>(&t.db(), "SELECT sandbox FROM runs"), "none");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        acode_run::testing::skip("root", "the warning under test is the one root gets");
        return;
    }
    assert!(
        stderr(&out).contains("secrets") && stderr(&out).contains("cannot be protected"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_command_cannot_read_the_runners_secret_environment() {
    if !landlock_usable() {
        return;
    }
    let t = TestDir::new();
    let secret = "s3cr3t-value-for-environ-test";
    let plan = t.plan(
        "s.json",
        &json!({"plan_id": "secrets", "steps": [
            py(&t, "environ", "import os, sys\nsys.stdout.buffer.write(open('/proc/%d/environ' % os.getppid(), 'rb').read().replace(b'\\0', b'\\n'))"),
            py(&t, "mem", "import os\nprint(len(open('/proc/%d/mem' % os.getppid(), 'rb').read(16)))"),
        ]}),
    );
    t.approve(&plan);
    let out = t
        .cmd()
        .args(["run", plan.to_str().unwrap(), "--sandbox", "landlock"])
        .env("ACODE_TEST_RUNNER_MARKER", secret)
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "failures are tolerated: {}", stderr(&out));
    // The read itself is refused, also as root: a command under Landlock holds no capability
    // (as inside bwrap), and without CAP_SYS_ADMIN/CAP_PERFMON Landlock's ptrace rule covers
    // `environ` too. (As another user, the non-dumpable runner's environ cannot be opened at all.)
    let why = error_of(&t, "environ");
    assert_eq!(status(&t, "environ"), "failed", "{why}");
    assert!(
        artifact_of(&t, "environ", "stderr").contains("PermissionError"),
        "{why}"
    );
    let environ = artifact_of(&t, "environ", "stdout");
    assert!(!environ.contains(secret), "{environ}");
    assert!(!environ.contains("ACODE_TEST_RUNNER_MARKER"), "{environ}");
    assert_eq!(status(&t, "mem"), "failed");
    let raw = std::fs::read(t.ws.join(".acode/executions.db")).unwrap();
    assert!(!String::from_utf8_lossy(&raw).contains(secret));
}

#[test]
fn limits_stop_commands_and_are_named() {
    let t = TestDir::new();
    t.file("sub/keep", "");
    t.file(
        "acode-policy.json",
        r#"{"limits": {"file_size_mb": 1, "memory_mb": 256}}"#,
    );
    let plan = t.plan(
        "lim.json",
        &json!({"plan_id": "limits", "steps": [
            py(&t, "big_file", "open('sub/big', 'wb').write(b'x' * 3_000_000)"),
            py(&t, "big_alloc", "b = bytearray(800 * 1024 * 1024)\nprint(len(b))"),
        ]}),
    );
    // The limits hold in every mode; Landlock's is the one under test, and a kernel without it
    // is a named skip (a failure under CI), not a quiet run under `none`.
    if !landlock_usable() {
        return;
    }
    let out = t.approve_and_run(&plan, &["--sandbox", "landlock"]);
    assert_eq!(code(&out), 0, "failures are tolerated: {}", stderr(&out));
    assert!(
        error_of(&t, "big_file").contains("limits.file_size_mb = 1"),
        "{}",
        error_of(&t, "big_file")
    );
    assert!(
        std::fs::metadata(t.ws.join("sub/big")).map_or(0, |m| m.len()) <= 1024 * 1024,
        "the file grew past the limit"
    );
    assert!(
        error_of(&t, "big_alloc").contains("limits.memory_mb = 256"),
        "{}",
        error_of(&t, "big_alloc")
    );
    assert!(
        stderr(&out).contains("file_size_mb") || stderr(&out).contains("file size limit"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn no_command_outlives_a_killed_runner() {
    let t = TestDir::new();
    t.file("sub/keep", "");
    let plan = t.plan(
        "k.json",
        &json!({"plan_id": "kill", "steps": [
            py(&t, "sleeper", "import os, time\nopen('sub/pid', 'w').write(str(os.getpid()))\ntime.sleep(120)"),
        ]}),
    );
    t.approve(&plan);
    // Without Landlock only `none` can be tried: a named skip for the rest (a failure under CI).
    let modes: &[&str] = if landlock_usable() {
        &["none", "landlock"]
    } else {
        &["none"]
    };
    for mode in modes {
        let _ = std::fs::remove_file(t.ws.join("sub/pid"));
        let mut runner = t
            .cmd()
            .args(["run", plan.to_str().unwrap(), "--sandbox", mode])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pid_file = t.ws.join("sub/pid");
        let pid: i32 = (0..500)
            .find_map(|_| {
                std::thread::sleep(Duration::from_millis(20));
                std::fs::read_to_string(&pid_file).ok()?.trim().parse().ok()
            })
            .expect("the command did not start");
        runner.kill().unwrap(); // SIGKILL: no handler, no cleanup in the runner
        runner.wait().unwrap();
        // SAFETY: signal 0 only checks for existence.
        let gone = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(20));
            (unsafe { libc::kill(pid, 0) }) != 0
        });
        assert!(gone, "{mode}: command {pid} outlived the killed runner");
    }
}

/// The README's demo plan (`cargo check` of a crate at the workspace root, which creates
/// `target/` and `Cargo.lock` there) runs under Landlock, as on a machine without bubblewrap, while
/// a command still cannot create a new entry in the workspace root.
#[test]
fn the_hello_demo_runs_under_landlock_and_the_root_stays_closed_to_commands() {
    if !landlock_usable() {
        return;
    }
    let t = TestDir::new();
    let root = repo();
    copy_tree(&root.join("fixtures/hello"), &t.ws);
    let out = t
        .cmd()
        .args([
            "run",
            root.join("plans/hello.json").to_str().unwrap(),
            "--sandbox",
            "landlock",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(t.ws.join("target").is_dir() && t.ws.join("Cargo.lock").is_file());
    assert!(
        t.read("Cargo.lock").contains("version"),
        "cargo filled the lock file"
    );

    let plan = t.plan(
        "root.json",
        &json!({"plan_id": "root", "steps": [
            py(&t, "newfile", "open('new-at-root.txt', 'w').write('x')")]}),
    );
    let out = t.approve_and_run(&plan, &["--sandbox", "landlock"]);
    assert_eq!(code(&out), 0, "the failure is tolerated: {}", stderr(&out));
    assert!(!t.ws.join("new-at-root.txt").exists());
    // It failed because the kernel refused the new entry, not for any other reason.
    assert_eq!(status(&t, "newfile"), "failed");
    let err = artifact_of(&t, "newfile", "stderr");
    assert!(
        err.contains("PermissionError") && err.contains("new-at-root.txt"),
        "{err}"
    );
    // Control: the same step unsandboxed makes the file, so the refusal above was Landlock's.
    let t2 = TestDir::new();
    let plan = t2.plan(
        "root.json",
        &json!({"plan_id": "root", "steps": [
            py(&t2, "newfile", "open('new-at-root.txt', 'w').write('x')")]}),
    );
    let out = t2.approve_and_run(&plan, &["--sandbox", "none"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(t2.read("new-at-root.txt"), "x");
}

/// `cargo build` as a plain `run_command` in a fresh crate at the workspace root works under
/// Landlock too: the runner creates `target/` and `Cargo.lock` first, as for `lsp_check`, and
/// nothing else appears at the root.
#[test]
fn cargo_build_as_a_command_runs_under_landlock_in_a_fresh_root_crate() {
    if !landlock_usable() {
        return;
    }
    let t = TestDir::new();
    let root = repo();
    copy_tree(&root.join("fixtures/hello"), &t.ws);
    let _ = std::fs::remove_dir_all(t.ws.join("target"));
    let _ = std::fs::remove_file(t.ws.join("Cargo.lock"));
    let before: std::collections::BTreeSet<_> = std::fs::read_dir(&t.ws)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let plan = t.plan(
        "build.json",
        &json!({"plan_id": "build", "steps": [
            {"step_id": "build", "tool": "run_command",
             "arguments": {"argv": ["cargo", "build", "--offline"], "timeout_s": 300}}]}),
    );
    let out = t.approve_and_run(&plan, &["--sandbox", "landlock"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(t.ws.join("target/debug").is_dir());
    assert!(
        t.read("Cargo.lock").contains("hello_acode"),
        "cargo filled the lock file"
    );
    let after: std::collections::BTreeSet<_> = std::fs::read_dir(&t.ws)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let added: Vec<String> = after
        .difference(&before)
        .map(|n| n.to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        added,
        [".acode", "Cargo.lock", "target"],
        "nothing else at the root"
    );
}

/// Issue #21: under Landlock a command cannot create workspace-root entries unless the step (or
/// the policy) declares them with `creates`; the failure names what to declare; the runner's
/// empty placeholders do not outlive a failed command; protected paths cannot be declared.
#[test]
fn declared_root_entries_let_a_test_runner_write_at_the_root_under_landlock() {
    if !landlock_usable() {
        return;
    }
    // What pytest does at the root: a cache directory and a JUnit report.
    let pytest_like = "import os\nos.makedirs('.pytest_cache/v/cache', exist_ok=True)\n\
                       open('.pytest_cache/v/cache/lastfailed', 'w').write('{}')\n\
                       open('report.xml', 'w').write('<testsuites/>')\n";
    let step = |creates: serde_json::Value| {
        json!({"step_id": "test", "tool": "run_command", "creates": creates,
               "arguments": {"argv": ["python3", "scripts/pytest_like.py"]}})
    };

    // Undeclared: refused, and the failure says which entry to declare and how.
    let t = TestDir::new();
    t.file("scripts/pytest_like.py", pytest_like);
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "undeclared", "steps": [step(json!([]))]}),
    );
    t.approve(&plan);
    let out = t.run(&[plan.to_str().unwrap(), "--sandbox", "landlock"]);
    assert_exit_with(
        &out,
        30,
        ".pytest_cache/ was not declared: add \"creates\": [\".pytest_cache/\"] to the step",
    );

    // Declared: it works, and what the command wrote stays.
    let t = TestDir::new();
    t.file("scripts/pytest_like.py", pytest_like);
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "declared", "steps": [step(json!([".pytest_cache/", "report.xml"]))]}),
    );
    t.approve(&plan);
    let out = t.run(&[plan.to_str().unwrap(), "--sandbox", "landlock"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(t.read("report.xml"), "<testsuites/>");
    assert_eq!(t.read(".pytest_cache/v/cache/lastfailed"), "{}");

    // A command that fails before using them leaves none of the runner's empty entries behind.
    let t = TestDir::new();
    t.file("scripts/fails.py", "raise SystemExit(3)\n");
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "unused", "steps": [
            {"step_id": "fails", "tool": "run_command", "creates": ["report.xml", "out/"],
             "arguments": {"argv": ["python3", "scripts/fails.py"]}}]}),
    );
    t.approve(&plan);
    let out = t.run(&[plan.to_str().unwrap(), "--sandbox", "landlock"]);
    assert_eq!(code(&out), 30, "{}", stderr(&out));
    assert!(!t.ws.join("report.xml").exists() && !t.ws.join("out").exists());

    // Protected paths can never be declared (a sandbox violation, found before anything runs).
    for protected in [
        ".git/",
        ".acode/",
        "acode-policy.json",
        "p.json.approval",
        "../up",
    ] {
        let t = TestDir::new();
        let plan = t.plan(
            "p.json",
            &json!({"plan_id": "protected", "steps": [
                {"step_id": "s", "tool": "run_command", "creates": [protected],
                 "arguments": {"argv": ["true"]}}]}),
        );
        let out = t.run(&["validate", plan.to_str().unwrap()]);
        assert_exit_with(&out, 32, "steps[0].creates[0]");
    }
}

/// Issue #21: a failed cargo under Landlock leaves no empty `Cargo.lock` or `target/` it did not
/// write (the runner creates both for it).
#[test]
fn a_failed_cargo_leaves_no_empty_outputs_behind_under_landlock() {
    if !landlock_usable() {
        return;
    }
    let t = TestDir::new();
    t.file(
        "Cargo.toml",
        "[package]\nname = \"broken\"\nversion = \"0.1.0\"\nedition = \"2021\"\nbad key\n",
    );
    t.file("src/lib.rs", "");
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "cargo-fails", "steps": [
            {"step_id": "build", "tool": "run_command", "arguments": {"argv": ["cargo", "build", "--offline"]}}]}),
    );
    t.approve(&plan);
    let out = t.run(&[plan.to_str().unwrap(), "--sandbox", "landlock"]);
    assert_eq!(code(&out), 30, "{}", stderr(&out));
    assert!(
        !t.ws.join("Cargo.lock").exists(),
        "an empty Cargo.lock was left"
    );
    assert!(!t.ws.join("target").exists(), "an empty target/ was left");
}

#[test]
fn commands_side_by_side_cannot_read_each_others_temporary_files() {
    if !landlock_usable() {
        return;
    }
    let t = TestDir::new();
    std::fs::create_dir_all(t.ws.join("out")).unwrap();
    // The writer leaves a file in its TMPDIR and says where, then waits for the reader.
    let writer = "import os, time\n\
                  p = os.path.join(os.environ['TMPDIR'], 'mine.txt')\n\
                  open(p, 'w').write('private')\n\
                  open('out/where.txt', 'w').write(p)\n\
                  for _ in range(3000):\n    \
                  if os.path.exists('out/done.txt'): break\n    time.sleep(0.01)\n";
    // Reads only: harmless whatever the sandbox lets through.
    let reader = "import os, time\n\
                  for _ in range(3000):\n    \
                  if os.path.exists('out/where.txt') and open('out/where.txt').read(): break\n    \
                  time.sleep(0.01)\n\
                  p = open('out/where.txt').read()\n\
                  try:\n    r = 'read ' + open(p).read()\n\
                  except OSError as e: r = type(e).__name__\n\
                  mine = os.environ['TMPDIR']\n\
                  open('out/report.txt', 'w').write(f'{r} {mine != os.path.dirname(p)}')\n\
                  open('out/done.txt', 'w').write('1')\n";
    let mut w = py(&t, "writer", writer);
    w["parallel_safe"] = json!(true);
    let mut r = py(&t, "reader", reader);
    r["parallel_safe"] = json!(true);
    let plan = t.plan("tmp.json", &json!({"plan_id": "tmp", "steps": [w, r]}));
    t.approve(&plan);
    let out = t
        .cmd()
        .args([
            "run",
            plan.to_str().unwrap(),
            "--sandbox",
            "landlock",
            "--jobs",
            "2",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(t.read("out/report.txt"), "PermissionError True");
    // Each command's directory went with it.
    let written = t.read("out/where.txt");
    assert!(
        !std::path::Path::new(&written).parent().unwrap().exists(),
        "{written} was left behind"
    );
}

#[test]
fn a_later_command_finds_its_temporary_directory_empty() {
    if !landlock_usable() {
        return;
    }
    let t = TestDir::new();
    std::fs::create_dir_all(t.ws.join("out")).unwrap();
    // The first leaves a file, a directory and a link in its TMPDIR; each later one lists its
    // own (a directory may be reused once emptied, so the listing must be empty every time).
    let leave = "import os\n\
                 d = os.environ['TMPDIR']\n\
                 open(os.path.join(d, 'left.txt'), 'w').write('x')\n\
                 os.makedirs(os.path.join(d, 'sub/deeper'))\n\
                 os.symlink('/etc/passwd', os.path.join(d, 'link'))\n\
                 os.chmod(d, 0o777)\n\
                 open('out/first.txt', 'w').write(d)\n";
    let look = |i: usize| {
        format!(
            "import os, stat\n\
             d = os.environ['TMPDIR']\n\
             m = stat.S_IMODE(os.stat(d).st_mode)\n\
             open('out/look{i}.txt', 'w').write(f'{{sorted(os.listdir(d))}} {{oct(m)}}')\n"
        )
    };
    let mut steps = vec![py(&t, "leave", leave)];
    for i in 0..3 {
        let mut s = py(&t, &format!("look{i}"), &look(i));
        s["depends_on"] = json!([if i == 0 {
            "leave".to_string()
        } else {
            format!("look{}", i - 1)
        }]);
        steps.push(s);
    }
    let plan = t.plan("seq.json", &json!({"plan_id": "seq", "steps": steps}));
    t.approve(&plan);
    let out = t
        .cmd()
        .args(["run", plan.to_str().unwrap(), "--sandbox", "landlock"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for i in 0..3 {
        assert_eq!(
            t.read(&format!("out/look{i}.txt")),
            "[] 0o700",
            "command {i}"
        );
    }
    // The link was removed, not followed.
    assert!(std::path::Path::new("/etc/passwd").exists());
}

/// A UNIX socket of the host's (what the Docker daemon, an ssh-agent or D-Bus listen on) is out of
/// reach under Landlock, as under bwrap, which does not show it: Landlock below ABI 9 does not
/// check `connect` by path, so the seccomp filter refuses UNIX sockets to commands under Landlock
/// (a connected `socketpair` still works: it reaches nothing outside).
#[test]
fn under_landlock_a_unix_socket_outside_cannot_be_reached() {
    if !landlock_usable() {
        return;
    }
    let t = TestDir::new();
    let dir = t.outside.join("agent");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("agent.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    let plan = t.plan(
        "u.json",
        &json!({"plan_id": "unix", "steps": [
            py(&t, "connect", &format!(
                "import socket\ns = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n\
                 s.settimeout(5)\ns.connect({:?})\ns.send(b'x')\nprint('connected')",
                path.to_str().unwrap())),
            py(&t, "pair", "import socket\na, b = socket.socketpair()\na.send(b'hi')\nprint(b.recv(2).decode())"),
        ]}),
    );
    let out = t.approve_and_run(&plan, &["--sandbox", "landlock"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(status(&t, "connect"), "failed");
    let err = artifact_of(&t, "connect", "stderr");
    assert!(err.contains("PermissionError"), "{err}");
    assert!(!artifact_of(&t, "connect", "stdout").contains("connected"));
    assert!(listener.accept().is_err(), "nothing may have connected");
    assert_eq!(status(&t, "pair"), "completed", "{}", error_of(&t, "pair"));
    assert_eq!(artifact_of(&t, "pair", "stdout").trim(), "hi");
    // Control: the socket accepts a connection from outside the sandbox.
    std::os::unix::net::UnixStream::connect(&path).unwrap();
    listener.set_nonblocking(false).unwrap();
    assert!(listener.accept().is_ok());
}
