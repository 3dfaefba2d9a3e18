//! The container image (`Containerfile`, `scripts/image.sh`): built here with no registry but the
//! package registries, its `acode-run` static, and run under `podman run` with the default seccomp
//! profile and no added privilege, as root and as uid 1000: `doctor` must report what a container
//! gives (bwrap refused because the runtime masks /proc, `auto` on Landlock, the promises Landlock
//! holds and the ones it does not), `--require` must fail closed, and an approved plan must run.
//! With /proc unmasked (`--security-opt unmask=/proc/*`, docs/ci.md) bwrap starts and every promise
//! holds. Then the GitHub Action runs in a container of the image, as a `container:` job's steps
//! run (`podman exec`), from the build the host job cached (the image has no Rust toolchain).
//!
//! Opt-in with `ACODE_E2E_CONTAINER=1` (root, podman, runc, debootstrap, musl-tools; the Debian
//! package registry the first time). The image script caches the root file system and the binary
//! under `target/image/` (cargo's own cache for the binary), so a second build costs seconds.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::Instant;

use serde_json::Value;

use super::action::{cache_store, checkout, job, warm_cache};
use super::gha::Executor;
use crate::harness::*;

/// The tag the tests build.
const TAG: &str = "localhost/acode-run:test";

/// What every container here runs with, as tests/cli/sandbox/container.rs: runc, no systemd
/// cgroups, limits the runtime may set as this machine's own (its default `nofile` is refused),
/// no network; the default seccomp profile and no added capability.
const PODMAN: [&str; 10] = [
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
];

fn enabled() -> bool {
    let on = std::env::var("ACODE_E2E_CONTAINER").is_ok_and(|v| v == "1");
    if !on {
        acode_run::testing::skip(
            "ACODE_E2E_CONTAINER=1",
            "it builds and runs the image (root, podman, debootstrap, musl-tools)",
        );
    }
    on
}

static BUILT: Mutex<bool> = Mutex::new(false);

/// Builds the image with scripts/image.sh (once per test process).
fn image() -> &'static str {
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if !*built {
        let start = Instant::now();
        let out = Command::new(repo().join("scripts/image.sh"))
            .arg(TAG)
            .envs(super::tools::QUICK_RELEASE)
            .current_dir(repo())
            .output()
            .expect("scripts/image.sh runs");
        assert!(
            out.status.success(),
            "scripts/image.sh failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), TAG);
        eprintln!(
            "scripts/image.sh took {:.1?}:\n{}",
            start.elapsed(),
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .filter(|l| l.starts_with("scripts/image.sh"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        *built = true;
    }
    TAG
}

/// `podman run` of the image as `uid`, the test's directory at `/t` (the workspace `/t/ws`), the
/// default seccomp profile, no added capability, no network; `extra` podman options first.
fn podman_run(t: &TestDir, uid: u32, extra: &[&str], argv: &[&str]) -> Output {
    Command::new("podman")
        .args(["run", "--rm"])
        .args(PODMAN)
        .args(["--user", &format!("{uid}:{uid}")])
        .args([
            "-e",
            "NO_COLOR=1",
            "-v",
            &format!("{}:/t", t.root.display()),
        ])
        .args(["--workdir", "/t/ws"])
        .args(extra)
        .arg(image())
        .args(argv)
        .output()
        .expect("podman runs")
}

fn doctor_json(t: &TestDir, uid: u32, extra: &[&str]) -> Value {
    let out = podman_run(t, uid, extra, &["acode-run", "doctor", "--json"]);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor --json in the image ({e}):\n{}", stderr(&out)))
}

fn holds(doc: &Value, promise: &str) -> bool {
    doc["run"]["promises"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == promise)
        .unwrap_or_else(|| panic!("no {promise} in {doc}"))["holds"]
        .as_bool()
        .unwrap()
}

fn in_the_image(uid: u32) {
    let t = checkout();
    if uid != 0 {
        let out = Command::new("chown")
            .args(["-R", &format!("{uid}:{uid}")])
            .arg(&t.root)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    // The binary is static: nothing for the dynamic loader to do.
    let out = podman_run(&t, uid, &[], &["acode-run", "doctor", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        doc["toolchain"]["target"]
            .as_str()
            .unwrap()
            .ends_with("linux-musl"),
        "{doc:#}"
    );
    assert_eq!(doc["toolchain"]["profile"], "release");
    assert_eq!(
        doc["toolchain"]["rustc"]
            .as_str()
            .unwrap()
            .split(' ')
            .nth(1),
        Some(super::toolchain::pinned_channel().as_str()),
        "{doc:#}"
    );
    // What a container gives: bwrap refused (the masked /proc), Landlock, a command starts.
    let bwrap = doc["modes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mode"] == "bwrap")
        .unwrap();
    assert_eq!(bwrap["works"], false, "{doc:#}");
    assert!(
        bwrap["detail"]
            .as_str()
            .unwrap()
            .contains("masks parts of /proc"),
        "{doc:#}"
    );
    assert!(
        doc["auto"].as_str().unwrap().starts_with("landlock"),
        "{doc:#}"
    );
    assert_eq!(doc["run"]["command_starts"]["ok"], true, "{doc:#}");
    assert_eq!(doc["seccomp"]["ok"], true, "{doc:#}");
    assert!(holds(&doc, "reads-confined") && holds(&doc, "writes-confined"));
    assert!(!holds(&doc, "processes-hidden"));
    // --require fails closed.
    let out = podman_run(
        &t,
        uid,
        &[],
        &["acode-run", "doctor", "--require", "processes-hidden"],
    );
    assert_exit_with(&out, 39, "processes-hidden");
    // An approved plan runs (its approval made on the host), under Landlock.
    let out = podman_run(
        &t,
        uid,
        &[],
        &[
            "acode-run",
            "run",
            "plans/ok.json",
            "--junit",
            "/t/junit.xml",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("sandbox: landlock"),
        "{}",
        stderr(&out)
    );
    assert_eq!(t.read("out.txt"), "done\n");
    assert!(
        std::fs::read_to_string(t.root.join("junit.xml"))
            .unwrap()
            .contains("say")
    );
    let out = podman_run(
        &t,
        uid,
        &[],
        &[
            "acode-run",
            "run",
            "plans/ok.json",
            "--require",
            "processes-hidden",
        ],
    );
    assert_exit_with(&out, 39, "processes-hidden");

    // /proc unmasked: bwrap starts, and every promise holds.
    let doc = doctor_json(&t, uid, &["--security-opt", "unmask=/proc/*"]);
    assert!(
        doc["auto"].as_str().unwrap().starts_with("bwrap"),
        "{doc:#}"
    );
    assert_eq!(doc["run"]["command_starts"]["ok"], true, "{doc:#}");
    assert!(holds(&doc, "processes-hidden"), "{doc:#}");
}

#[test]
fn the_image_runs_a_plan_as_root_and_doctor_reports_the_container() {
    if enabled() {
        in_the_image(0);
    }
}

#[test]
fn the_image_runs_a_plan_as_uid_1000_and_doctor_reports_the_container() {
    if enabled() {
        in_the_image(1000);
    }
}

/// Stops the container when dropped.
struct Running(String);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = Command::new("podman")
            .args(["rm", "--force", "--time", "0", &self.0])
            .output();
    }
}

#[test]
fn the_action_runs_in_a_container_job() {
    if !enabled() || !super::action::enabled() {
        return;
    }
    warm_cache();
    let t = checkout();
    let name = format!("acode-gha-{}", uuid::Uuid::new_v4().simple());
    let mount = |p: &Path, mode: &str| format!("{0}:{0}:{mode}", p.display());
    let out = Command::new("podman")
        .args(["run", "-d", "--rm", "--name", &name])
        .args(PODMAN)
        .args(["-v", &mount(repo(), "ro")])
        .args(["-v", &mount(&t.root, "rw")])
        .args(["-v", &mount(&cache_store(), "ro")])
        .args([image(), "sleep", "infinity"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let _running = Running(name.clone());
    let mut j = job(&t, None, Executor::Container(name));
    j.path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string();
    let r = j.run(&[("plan", "plans/ok.json")]);
    assert!(r.success, "{}", r.log);
    let install = r.step("Install acode-run with the pinned toolchain");
    assert!(install.log.contains("cached build"), "{}", r.log);
    let doctor = &r.step("What the sandbox holds here (acode-run doctor)").log;
    assert!(doctor.contains("auto picks landlock"), "{doctor}");
    assert!(doctor.contains("masks parts of /proc"), "{doctor}");
    assert_eq!(r.outputs["exit-code"], "0");
    assert_eq!(t.read("out.txt"), "done\n");
    assert!(r.summary.contains("landlock"), "{}", r.summary);
    assert!(
        walkdir::WalkDir::new(&r.artifacts)
            .into_iter()
            .filter_map(Result::ok)
            .any(|e| e.file_name() == "acode-report.xml"),
        "{}",
        r.log
    );
}
