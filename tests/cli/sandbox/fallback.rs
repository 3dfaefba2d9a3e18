//! `auto` on a host where bwrap is installed but refused (issue 32, item 4): a `bwrap` first on
//! `PATH` that fails exactly as the real one (0.8 and later) fails there — the same stderr line,
//! exit code 1 (bwrap's `die_with_error`) — since these machines do not let a test turn AppArmor's
//! restriction on or mask `/proc`. `auto` must choose Landlock, and the run header, `preview`, the
//! JUnit properties, the job summary and `run_started` must name the cause and its narrow fix; on
//! such a host the containment suite of tests/cli/sandbox/container.rs must hold.

use std::io::ErrorKind;
use std::net::TcpListener;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::container::Suite;
use super::landlock::landlock_usable;
use crate::harness::*;

/// What bwrap prints under AppArmor's restriction on unprivileged user namespaces (Ubuntu 24.04).
const APPARMOR: &str = "bwrap: setting up uid map: Permission denied";
/// What bwrap prints in a container whose runtime masks parts of `/proc` (seen in Podman here).
const CONTAINER: &str = "bwrap: Can't mount proc on /newroot/proc: Operation not permitted";

/// A directory holding a `bwrap` that logs its call to `calls` and fails saying `said`.
fn refusing_bwrap(dir: &Path, said: &str) -> PathBuf {
    let bin = dir.join("fakebin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = format!(
        "#!/bin/sh\necho called >> {:?}\nprintf '%s\\n' {said:?} >&2\nexit 1\n",
        dir.join("calls").to_str().unwrap()
    );
    let path = bin.join("bwrap");
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// Everything a one-step run says of its sandbox when bwrap says `said`: the header (stderr),
/// `preview`, `preview --json`'s `sandbox`, the JUnit file, the job summary and `run_started`.
fn what_is_said(said: &str) -> Vec<(&'static str, String)> {
    let t = TestDir::new();
    let bin = refusing_bwrap(&t.root, said);
    let plan = t.plan(
        "p.json",
        &serde_json::json!({"plan_id": "fallback", "steps": [
            {"step_id": "a", "tool": "run_command", "arguments": {"argv": ["true"]}}]}),
    );
    let p = plan.to_str().unwrap();
    let run = |args: &[&str]| {
        t.cmd()
            .env("PATH", path_with(&bin))
            .env("GITHUB_STEP_SUMMARY", t.root.join("summary.md"))
            .args(args)
            .output()
            .unwrap()
    };
    let preview = run(&["preview", p]);
    assert_eq!(code(&preview), 0, "{}", stderr(&preview));
    let json = run(&["preview", p, "--json"]);
    let json: Value = serde_json::from_slice(&json.stdout).unwrap();
    t.approve(&plan);
    let junit = t.root.join("junit.xml");
    let out = run(&[
        "run",
        p,
        "--jsonl",
        "--annotations",
        "github",
        "--junit",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // The fake was what `auto` tried.
    assert!(
        std::fs::read_to_string(t.root.join("calls")).is_ok_and(|c| c.contains("called")),
        "the refusing bwrap was never run"
    );
    let events = events(&out);
    assert_events_match_schema(&events);
    let started = events
        .iter()
        .find(|e| e["type"] == "run_started")
        .expect("run_started");
    vec![
        ("header", stderr(&out)),
        ("preview", stdout(&preview)),
        ("preview --json", json["sandbox"].to_string()),
        ("junit", std::fs::read_to_string(&junit).unwrap()),
        (
            "summary",
            std::fs::read_to_string(t.root.join("summary.md")).unwrap(),
        ),
        ("run_started", started["sandbox"].to_string()),
    ]
}

/// Asserts every place in `said` names Landlock and holds each of `needles`.
fn assert_all_say(said: &[(&str, String)], needles: &[&str]) {
    for (place, text) in said {
        assert!(text.contains("landlock"), "{place} names no mode:\n{text}");
        for needle in needles {
            assert!(text.contains(needle), "{place} lacks {needle:?}:\n{text}");
        }
    }
}

#[test]
fn a_bwrap_refused_as_apparmor_refuses_it_makes_auto_choose_landlock_and_name_the_narrow_fix() {
    if !landlock_usable() {
        return;
    }
    let said = what_is_said(APPARMOR);
    assert_all_say(
        &said,
        &[
            "AppArmor restricts unprivileged user namespaces",
            "setting up uid map: Permission denied",
            "AppArmor profile that allows `userns`",
            "rather than turning the restriction off",
        ],
    );
    // The promises Landlock does not hold are listed wherever the mode is.
    let (_, header) = &said[0];
    assert!(
        header.contains("sandbox: landlock (Landlock ABI"),
        "{header}"
    );
    let (_, junit) = &said[3];
    assert!(
        junit.contains("<property name=\"sandbox_reason\""),
        "{junit}"
    );
}

#[test]
fn a_bwrap_refused_as_in_a_container_names_the_container_and_its_fix() {
    if !landlock_usable() {
        return;
    }
    let said = what_is_said(CONTAINER);
    assert_all_say(
        &said,
        &[
            "runs in a container",
            "mount proc on /newroot/proc",
            "unmask=/proc/*",
        ],
    );
    for (place, text) in &said {
        assert!(!text.contains("AppArmor restricts"), "{place}: {text}");
    }
}

#[test]
fn a_refusal_acode_run_does_not_know_is_quoted_as_bwrap_said_it() {
    if !landlock_usable() {
        return;
    }
    let odd = "bwrap: something no release of bwrap prints";
    let said = what_is_said(odd);
    assert_all_say(&said, &[odd]);
    for (place, text) in &said {
        assert!(!text.contains("fix:"), "{place} invents a fix: {text}");
    }
}

#[test]
fn sandbox_bwrap_fails_closed_naming_apparmor_and_its_fix() {
    let t = TestDir::new();
    let bin = refusing_bwrap(&t.root, APPARMOR);
    let plan = t.plan(
        "p.json",
        &serde_json::json!({"plan_id": "fallback", "steps": [
            {"step_id": "a", "tool": "run_command", "arguments": {"argv": ["true"]}}]}),
    );
    t.approve(&plan);
    let out = t
        .cmd()
        .env("PATH", path_with(&bin))
        .args(["run", plan.to_str().unwrap(), "--sandbox", "bwrap"])
        .output()
        .unwrap();
    assert_ne!(code(&out), 0);
    let err = stderr(&out);
    assert!(
        err.contains("AppArmor restricts unprivileged user namespaces")
            && err.contains("AppArmor profile that allows `userns`"),
        "{err}"
    );
}

/// The containment suite on this host, `auto` with bwrap refused as AppArmor refuses it, the
/// credential files in the `HOME` acode-run runs with.
#[test]
fn on_a_host_where_apparmor_refuses_bwrap_the_containment_suite_holds() {
    if !landlock_usable() {
        return;
    }
    let t = TestDir::new();
    let root = t.root.join("suite");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let suite = Suite::lay_out(&root, &root, port);
    let bin = refusing_bwrap(&t.root, APPARMOR);
    let ws = root.join("ws");
    let plan = root.join("plan.json");
    let run = |args: &[&str]| {
        t.cmd()
            .current_dir(&ws)
            .env("PATH", path_with(&bin))
            .env("HOME", root.join("home"))
            .env("GITHUB_STEP_SUMMARY", root.join("summary.md"))
            .args(args)
            .output()
            .unwrap()
    };
    let p = plan.to_str().unwrap();
    let approve = run(&["approve", p, "--by", "tester"]);
    assert_eq!(code(&approve), 0, "{}", stderr(&approve));
    let junit = root.join("junit.xml");
    let out = run(&[
        "run",
        p,
        "--jobs",
        "2",
        "--jsonl",
        "--annotations",
        "github",
        "--junit",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("AppArmor restricts"),
        "{}",
        stderr(&out)
    );
    let mut connections = 0;
    loop {
        match listener.accept() {
            Ok(_) => connections += 1,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => panic!("accept: {e}"),
        }
    }
    let outputs = vec![
        ("stdout", out.stdout.clone()),
        ("stderr", out.stderr.clone()),
        ("junit.xml", std::fs::read(&junit).unwrap_or_default()),
        (
            "summary.md",
            std::fs::read(root.join("summary.md")).unwrap_or_default(),
        ),
    ];
    let broken = suite.broken(&outputs, connections);
    assert!(
        broken.is_empty(),
        "on a host where AppArmor refuses bwrap the promise broke:\n{}\n--- stderr:\n{}",
        broken.join("\n"),
        stderr(&out)
    );
}
