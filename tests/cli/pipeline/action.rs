//! `action.yml` run as GitHub runs it ([`super::gha`]): its steps in order with the runner's files
//! and variables, on this machine and in a Podman container, for a plan that passes, one whose
//! step fails, an unapproved plan, bwrap refused (AppArmor's message) with and without a
//! `require-sandbox` Landlock cannot hold, and bad inputs (no plan, a plan outside the workspace,
//! an unknown sandbox, an unknown promise). Each job must end as the issue asks: red unless the
//! plan passed, the JUnit file and the HTML report uploaded, the summary saying what happened.
//!
//! The first job builds acode-run from this checkout with the pinned toolchain (`cargo install
//! --locked`, release) into the emulated `actions/cache` store under `target/tmp/`; every later
//! job restores it (the cache's exact key), as a second job of a workflow would. The cold and the
//! warm job's durations are printed (docs/ci.md has the measured numbers).
//!
//! Opt-in with `ACODE_E2E_NET=1` (set by `.ci/run`), as the other pipeline end-to-end tests: the
//! cold job is a release build of the crate (minutes on two cores). The container job also needs
//! `ACODE_E2E_CONTAINER=1` (the image of `scripts/image.sh`, in `image.rs`).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use serde_json::json;

use super::gha::{Executor, Job, JobResult};
use crate::harness::*;

/// The emulated `actions/cache` store, kept between test runs like the rest of `target/tmp/`.
pub fn cache_store() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("gha-cache-store")
}

/// Whether the action's end-to-end tests run (see the module docs).
pub fn enabled() -> bool {
    e2e_net("a release build of acode-run, run through action.yml")
}

/// A workspace with a policy that lets `echo`, `false` and `git` run, an approved plan `ok.json`
/// (writes a file, runs `echo`), an approved plan `fails.json` (its second step runs `false`) and
/// an unapproved `pending.json`; returns the test directory (its `ws/` is the job's checkout).
pub fn checkout() -> TestDir {
    let t = TestDir::new();
    allow_commands(&t, &["echo", "false", "git"]);
    let write = |name: &str, steps: serde_json::Value| {
        t.file(
            &format!("plans/{name}.json"),
            &serde_json::to_string_pretty(&json!({"plan_id": name, "steps": steps})).unwrap(),
        )
    };
    let ok = write(
        "ok",
        json!([
            {"step_id": "write", "tool": "file_write", "arguments": {"path": "out.txt", "contents": "done\n"}},
            {"step_id": "say", "tool": "run_command", "arguments": {"argv": ["echo", "hello from the plan"]}}
        ]),
    );
    let fails = write(
        "fails",
        json!([
            {"step_id": "say", "tool": "run_command", "arguments": {"argv": ["echo", "before"]}},
            {"step_id": "broken", "tool": "run_command", "arguments": {"argv": ["false"]}}
        ]),
    );
    write(
        "pending",
        json!([{"step_id": "say", "tool": "run_command", "arguments": {"argv": ["echo", "x"]}}]),
    );
    t.approve(&ok);
    t.approve(&fails);
    t
}

/// How many jobs this test process has made (each gets its own runner directory).
static JOBS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A job for `t`'s checkout: the action at this repository, a runner directory of its own, the
/// shared cache store, `PATH` with `bin` first when given.
pub fn job(t: &TestDir, bin: Option<&Path>, executor: Executor) -> Job {
    let path = std::env::var("PATH").unwrap_or_default();
    Job {
        action_path: repo().to_path_buf(),
        workspace: t.ws.clone(),
        // A runner directory of its own for every job, as GitHub gives each job: two jobs on one
        // checkout (a refused one, then one with the CI key) each upload their `acode-run` artifact.
        runner: t.root.join(format!(
            "runner-{}",
            JOBS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        )),
        cache_store: cache_store(),
        env: super::tools::QUICK_RELEASE
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        path: match bin {
            Some(b) => format!("{}:{path}", b.display()),
            None => path,
        },
        executor,
    }
}

/// What the first job of this test process measured: the cold job's duration and the build
/// step's log (empty when the store already held this key: a warm run of an earlier process).
static WARMED: Mutex<Option<(f64, bool)>> = Mutex::new(None);

/// Makes sure the cache store holds acode-run built for this checkout: runs the action once (the
/// passing plan) unless an earlier job of this process did. Returns the job's seconds and whether
/// it built (cold) or restored.
pub fn warm_cache() -> (f64, bool) {
    let mut warmed = WARMED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(w) = *warmed {
        return w;
    }
    let t = checkout();
    let start = Instant::now();
    let r = job(&t, None, Executor::Host).run(&[("plan", "plans/ok.json")]);
    let secs = start.elapsed().as_secs_f64();
    assert!(r.success, "the first job failed:\n{}", r.log);
    let install = r.step("Install acode-run with the pinned toolchain");
    let built = install.log.contains("built in");
    eprintln!(
        "action.yml: the first job took {secs:.1} s, its install step {:.1} s ({})",
        install.took.as_secs_f64(),
        if built {
            "cold: built acode-run"
        } else {
            "warm: the store held this build"
        }
    );
    *warmed = Some((secs, built));
    (secs, built)
}

/// The artifact's files, by name.
fn artifact_files(r: &JobResult, name: &str) -> Vec<String> {
    let dir = r.artifacts.join(name);
    let mut files: Vec<String> = walkdir::WalkDir::new(&dir)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    files
}

fn artifact_text(r: &JobResult, file: &str) -> String {
    let found = walkdir::WalkDir::new(r.artifacts.join("acode-run"))
        .into_iter()
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy() == file)
        .unwrap_or_else(|| panic!("no {file} uploaded:\n{}", r.log));
    std::fs::read_to_string(found.path()).unwrap()
}

/// Checks a job whose plan ran (passed or failed): the reports uploaded, the outputs set, the
/// summary written by acode-run, the result as expected.
fn assert_reported(r: &JobResult, exit: i32) {
    assert_eq!(r.outputs["exit-code"], exit.to_string(), "{}", r.log);
    assert_eq!(r.success, exit == 0, "{}", r.log);
    let files = artifact_files(r, "acode-run");
    for f in ["acode-report.xml", "acode-report.html"] {
        assert!(
            files.contains(&f.to_string()),
            "{f} not uploaded: {files:?}\n{}",
            r.log
        );
    }
    assert!(r.outputs["junit"].ends_with("acode-report.xml"));
    assert!(r.outputs["report"].ends_with("acode-report.html"));
    let last = r.steps.last().unwrap();
    assert_eq!(last.name, "Fail the job when the plan did not pass");
    assert_eq!(
        last.outcome,
        if exit == 0 { "success" } else { "failure" },
        "{}",
        r.log
    );
}

#[test]
fn the_action_runs_an_approved_plan_cold_then_warm() {
    if !enabled() {
        return;
    }
    let (first, built) = warm_cache();
    let t = checkout();
    let start = Instant::now();
    let r = job(&t, None, Executor::Host).run(&[("plan", "plans/ok.json")]);
    let warm = start.elapsed().as_secs_f64();
    eprintln!(
        "action.yml: first job {first:.1} s ({}), this warm job {warm:.1} s",
        if built { "cold" } else { "warm" }
    );
    let install = r.step("Install acode-run with the pinned toolchain");
    assert!(
        install.log.contains("cached build for acode-run-"),
        "{}",
        r.log
    );
    assert_eq!(r.step("Restore acode-run's build").outcome, "success");
    assert_reported(&r, 0);
    assert_eq!(t.read("out.txt"), "done\n");
    // The run id acode-run wrote, and the summary it wrote (its table), the doctor's report in the
    // log before the run.
    let run_id = &r.outputs["run-id"];
    assert_eq!(run_id.len(), 36, "{:?}", r.outputs);
    assert!(r.summary.contains("acode-run"), "{}", r.summary);
    assert!(r.summary.contains("say"), "{}", r.summary);
    let doctor = &r.step("What the sandbox holds here (acode-run doctor)").log;
    assert!(doctor.contains("sandbox modes here:"), "{doctor}");
    let xml = artifact_text(&r, "acode-report.xml");
    assert!(xml.contains("testcase") && xml.contains("say"), "{xml}");
    // The audit trail too.
    assert!(artifact_files(&r, "acode-run").contains(&"executions.db".to_string()));
}

#[test]
fn a_failing_step_fails_the_job_with_its_reports() {
    if !enabled() {
        return;
    }
    warm_cache();
    let t = checkout();
    let r = job(&t, None, Executor::Host).run(&[("plan", "plans/fails.json")]);
    assert_reported(&r, 30);
    let xml = artifact_text(&r, "acode-report.xml");
    assert!(xml.contains("<failure"), "{xml}");
    assert!(r.summary.contains("broken"), "{}", r.summary);
    // The failed step's annotation is in the log.
    assert!(r.log.contains("::error"), "{}", r.log);
}

#[test]
fn an_unapproved_plan_is_refused_and_the_job_says_so() {
    if !enabled() {
        return;
    }
    warm_cache();
    let t = checkout();
    let r = job(&t, None, Executor::Host).run(&[("plan", "plans/pending.json")]);
    assert_reported(&r, 3);
    assert!(r.summary.contains("refused"), "{}", r.summary);
    assert!(artifact_text(&r, "acode-report.xml").contains("refused"));
}

#[test]
fn with_bwrap_refused_the_action_runs_under_landlock_unless_a_promise_is_required() {
    if !enabled() || !crate::sandbox::landlock::landlock_usable() {
        return;
    }
    warm_cache();
    let t = checkout();
    let bin = t.root.join("fakebin");
    exe(
        &bin.join("bwrap"),
        "#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n",
    );
    let r = job(&t, Some(&bin), Executor::Host).run(&[
        ("plan", "plans/ok.json"),
        ("require-sandbox", "reads-confined, writes-confined"),
    ]);
    assert_reported(&r, 0);
    let doctor = &r.step("What the sandbox holds here (acode-run doctor)").log;
    assert!(doctor.contains("auto picks landlock"), "{doctor}");
    assert!(doctor.contains("AppArmor"), "{doctor}");
    assert!(r.summary.contains("landlock"), "{}", r.summary);

    let t = checkout();
    let r = job(&t, Some(&bin), Executor::Host).run(&[
        ("plan", "plans/ok.json"),
        ("require-sandbox", "processes-hidden"),
    ]);
    assert_reported(&r, 39);
    assert!(!t.ws.join("out.txt").exists(), "the plan ran");
    assert!(r.log.contains("processes-hidden"), "{}", r.log);
    assert!(r.summary.contains("exit 39"), "{}", r.summary);
}

#[test]
fn bad_inputs_fail_the_job_saying_which() {
    if !enabled() {
        return;
    }
    let outside = TestDir::new();
    let elsewhere = outside.plan("elsewhere.json", &json!({"plan_id": "x", "steps": []}));
    let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
        (vec![("plan", "")], "the input 'plan' names no plan"),
        (vec![("plan", "  ")], "the input 'plan' names no plan"),
        (vec![("plan", "plans/missing.json")], "does not exist"),
        (
            vec![("plan", elsewhere.to_str().unwrap())],
            "is outside the workspace",
        ),
        (
            vec![("plan", "../outside/sentinel.txt")],
            "is outside the workspace",
        ),
        (
            vec![("plan", "plans/ok.json"), ("sandbox", "chroot")],
            "expected auto, bwrap, landlock or none",
        ),
        (
            vec![("plan", "plans/ok.json"), ("jobs", "many")],
            "expected a number from 1 to 256",
        ),
    ];
    for (with, says) in cases {
        let t = checkout();
        let r = job(&t, None, Executor::Host).run(&with);
        assert!(!r.success, "{with:?} passed:\n{}", r.log);
        let first = r.step("Check the inputs");
        assert_eq!(first.outcome, "failure", "{with:?}:\n{}", r.log);
        assert!(
            first.log.contains("::error title=acode-run: bad input::"),
            "{}",
            first.log
        );
        assert!(
            first.log.contains(says),
            "{with:?}: no {says:?} in\n{}",
            first.log
        );
        // Nothing built, nothing run; the summary says the inputs were refused.
        assert_eq!(r.step("Run the plan").outcome, "skipped");
        assert!(r.summary.contains("inputs were refused"), "{}", r.summary);
        assert!(!t.ws.join("out.txt").exists());
    }
}

#[test]
fn an_unknown_required_promise_fails_the_job_naming_the_valid_ones() {
    if !enabled() {
        return;
    }
    // Refused by acode-run itself (one list of names), exit 2, before any step.
    warm_cache();
    let t = checkout();
    let r = job(&t, None, Executor::Host)
        .run(&[("plan", "plans/ok.json"), ("require-sandbox", "no-network")]);
    assert!(!r.success);
    assert_eq!(r.outputs["exit-code"], "2", "{}", r.log);
    assert!(
        r.log.contains("unknown sandbox promise \"no-network\"")
            && r.log.contains("writes-confined, reads-confined"),
        "{}",
        r.log
    );
    assert!(!t.ws.join("out.txt").exists());
}

#[test]
fn the_attest_input_is_passed_to_run() {
    if !enabled() {
        return;
    }
    warm_cache();
    let t = checkout();
    // Without the CI's key the job fails before the plan runs, saying what is missing.
    let r = job(&t, None, Executor::Host)
        .run(&[("plan", "plans/ok.json"), ("attest", "attestation.json")]);
    assert!(!r.success, "{}", r.log);
    assert_eq!(r.outputs["exit-code"], "2", "{}", r.log);
    assert!(r.log.contains("ACODE_ATTEST_KEY_FILE"), "{}", r.log);
    assert!(!t.ws.join("out.txt").exists());
    // With it (from `secrets` through `env`), the attestation is written, uploaded, and verifies.
    let keys = t.root.join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    let key = keys.join("ci");
    let made = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(made.status.success());
    let mut j = job(&t, None, Executor::Host);
    j.env
        .insert("ACODE_ATTEST_KEY_FILE".into(), key.display().to_string());
    let r = j.run(&[("plan", "plans/ok.json"), ("attest", "attestation.json")]);
    assert_reported(&r, 0);
    assert!(t.ws.join("attestation.json").exists(), "{}", r.log);
    assert!(artifact_files(&r, "acode-run").contains(&"attestation.json".to_string()));
    let att = t.ws.join("attestation.json");
    let public = key.with_extension("pub");
    let out = t.run(&[
        "verify",
        att.to_str().unwrap(),
        "--key",
        public.to_str().unwrap(),
        "--workspace",
        t.ws.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}
