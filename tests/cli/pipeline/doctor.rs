//! `acode-run doctor` on this host, under an AppArmor-like refusal of bwrap (a `bwrap` that fails
//! as Ubuntu 24.04's does), without a sandbox, and without `/proc` (a chroot); `--require` failing
//! closed in `doctor` and in `run` (exit 39, nothing run, the refusal in the JUnit file and the job
//! summary), and unknown promise names refused naming the valid ones (exit 2). The container case
//! is in `image.rs` (the image built by scripts/image.sh).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::harness::*;

/// What bwrap prints under AppArmor's restriction on unprivileged user namespaces (Ubuntu 24.04).
const APPARMOR: &str = "bwrap: setting up uid map: Permission denied";

/// Every promise name, as `--require` takes them.
const PROMISES: [&str; 8] = [
    "writes-confined",
    "reads-confined",
    "environments-private",
    "network-confined",
    "processes-hidden",
    "paths-hidden",
    "ioctls-confined",
    "signals-scoped",
];

/// A directory holding a `bwrap` that fails as AppArmor makes it fail.
fn apparmor_bwrap(dir: &Path) -> PathBuf {
    let bin = dir.join("fakebin");
    exe(
        &bin.join("bwrap"),
        &format!("#!/bin/sh\nprintf '%s\\n' {APPARMOR:?} >&2\nexit 1\n"),
    );
    bin
}

fn doctor(t: &TestDir, path: Option<&Path>, args: &[&str]) -> Output {
    let mut c = t.cmd();
    if let Some(bin) = path {
        c.env("PATH", path_with(bin));
    }
    c.arg("doctor").args(args).output().unwrap()
}

fn doctor_json(t: &TestDir, path: Option<&Path>, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = doctor(t, path, &all);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor --json ({e}):\n{}", stderr(&out)))
}

/// `promise name -> holds` under the mode a run would use.
fn held(doc: &Value) -> Vec<(String, bool)> {
    doc["run"]["promises"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["holds"].as_bool().unwrap(),
            )
        })
        .collect()
}

fn mode<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["modes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mode"] == name)
        .unwrap_or_else(|| panic!("no mode {name} in {doc}"))
}

#[test]
fn on_this_host_doctor_finds_bwrap_and_every_promise_holds() {
    if !bwrap_ok() {
        return;
    }
    let t = TestDir::new();
    let doc = doctor_json(&t, None, &[]);
    assert_eq!(mode(&doc, "bwrap")["works"], true, "{doc:#}");
    assert_eq!(mode(&doc, "none")["works"], true, "{doc:#}");
    assert!(
        doc["auto"].as_str().unwrap().starts_with("bwrap"),
        "{doc:#}"
    );
    assert_eq!(doc["run"]["mode"], "bwrap");
    assert_eq!(doc["run"]["command_starts"]["ok"], true, "{doc:#}");
    let names: Vec<String> = held(&doc).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, PROMISES);
    assert!(held(&doc).iter().all(|(_, h)| *h), "{doc:#}");
    assert_eq!(doc["seccomp"]["ok"], true, "{doc:#}");
    assert_eq!(doc["network_proxy"]["ok"], true, "{doc:#}");
    assert!(
        doc["toolchain"]["rustc"]
            .as_str()
            .unwrap()
            .starts_with("rustc ")
    );
    // Where the database would go, without creating it.
    assert_eq!(
        doc["database"]["path"],
        t.ws.join(".acode/executions.db").display().to_string()
    );
    assert_eq!(doc["database"]["exists"], false);
    assert!(!t.ws.join(".acode").exists(), "doctor created .acode/");
    // Every promise required: exit 0, and the human report says so too.
    let out = doctor(&t, None, &["--require", &PROMISES.join(",")]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("auto picks bwrap"), "{text}");
    assert!(text.contains("ok        processes-hidden"), "{text}");
}

#[test]
fn under_an_apparmor_refusal_doctor_names_the_cause_and_the_promises_landlock_lacks() {
    if !crate::sandbox::landlock::landlock_usable() {
        return;
    }
    let t = TestDir::new();
    let bin = apparmor_bwrap(&t.root);
    let doc = doctor_json(&t, Some(&bin), &[]);
    let bwrap = mode(&doc, "bwrap");
    assert_eq!(bwrap["works"], false, "{doc:#}");
    let why = bwrap["detail"].as_str().unwrap();
    assert!(
        why.contains("AppArmor restricts unprivileged user namespaces")
            && why.contains("AppArmor profile that allows `userns`"),
        "{why}"
    );
    assert_eq!(mode(&doc, "landlock")["works"], true, "{doc:#}");
    assert!(
        doc["auto"].as_str().unwrap().starts_with("landlock"),
        "{doc:#}"
    );
    assert!(
        doc["auto_reason"]
            .as_str()
            .unwrap()
            .contains("setting up uid map"),
        "{doc:#}"
    );
    assert_eq!(doc["run"]["mode"], "landlock");
    // A command really starts under Landlock (ruleset, seccomp filter, limits applied).
    assert_eq!(doc["run"]["command_starts"]["ok"], true, "{doc:#}");
    let held = held(&doc);
    let not: Vec<&str> = held
        .iter()
        .filter(|(_, h)| !h)
        .map(|(n, _)| n.as_str())
        .collect();
    assert!(
        not.contains(&"processes-hidden") && not.contains(&"paths-hidden"),
        "{doc:#}"
    );
    for kept in ["writes-confined", "reads-confined", "environments-private"] {
        assert!(
            !not.contains(&kept),
            "{kept} not held under Landlock: {doc:#}"
        );
    }

    // Required and not held: exit 39 naming it, with why; the ones Landlock holds pass.
    let out = doctor(&t, Some(&bin), &["--require", "reads-confined"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = doctor(
        &t,
        Some(&bin),
        &[
            "--require",
            "reads-confined",
            "--require",
            "processes-hidden",
        ],
    );
    assert_exit_with(
        &out,
        39,
        "processes-hidden: the host's processes are visible",
    );
    assert!(
        !stderr(&out).contains("reads-confined:"),
        "{}",
        stderr(&out)
    );
    // The human report says it too.
    let text = stdout(&out);
    assert!(text.contains("bwrap     FAILS"), "{text}");
    assert!(text.contains("NOT HELD  processes-hidden"), "{text}");
}

#[test]
fn without_a_sandbox_no_promise_holds_and_requiring_one_fails_closed() {
    let t = TestDir::new();
    let doc = doctor_json(&t, None, &["--sandbox", "none"]);
    assert_eq!(doc["run"]["mode"], "none");
    assert!(held(&doc).iter().all(|(_, h)| !h), "{doc:#}");
    let out = doctor(
        &t,
        None,
        &["--sandbox", "none", "--require", "reads-confined"],
    );
    assert_exit_with(&out, 39, "reads-confined: no OS sandbox");
    // A policy that asks for none: the same, with no flag.
    t.file("acode-policy.json", r#"{"sandbox": "none"}"#);
    let out = doctor(&t, None, &["--require", "writes-confined"]);
    assert_exit_with(&out, 39, "writes-confined: no OS sandbox");
    let doc = doctor_json(&t, None, &[]);
    assert_eq!(
        doc["policy"]["path"],
        t.ws.join("acode-policy.json").display().to_string()
    );
    // A flag cannot ask for less than the policy: doctor says the run would be refused.
    t.file("acode-policy.json", r#"{"sandbox": "landlock"}"#);
    let out = doctor(
        &t,
        None,
        &["--sandbox", "none", "--require", "reads-confined"],
    );
    assert_exit_with(&out, 39, "would weaken it");
    let doc = doctor_json(&t, None, &["--sandbox", "none"]);
    assert!(doc["run"]["mode"].is_null(), "{doc:#}");
    assert!(
        doc["run"]["error"]
            .as_str()
            .unwrap()
            .contains("refused with exit 3"),
        "{doc:#}"
    );
}

#[test]
fn an_unknown_promise_is_refused_naming_the_valid_ones() {
    let t = TestDir::new();
    let plan = simple_plan(&t);
    for args in [
        vec!["doctor", "--require", "no-network"],
        vec![
            "run",
            plan.to_str().unwrap(),
            "--require",
            "reads-confined,no-network",
        ],
    ] {
        let out = t.run(&args);
        assert_exit_with(&out, 2, "unknown sandbox promise \"no-network\"");
        let err = stderr(&out);
        assert!(err.contains(&PROMISES.join(", ")), "{err}");
    }
    assert!(!t.ws.join("a.txt").exists(), "the plan ran");
}

#[test]
fn run_require_refuses_before_any_step_when_a_promise_does_not_hold() {
    if !crate::sandbox::landlock::landlock_usable() {
        return;
    }
    let t = TestDir::new();
    let bin = apparmor_bwrap(&t.root);
    let plan = simple_plan(&t);
    t.approve(&plan);
    let junit = t.root.join("junit.xml");
    let summary = t.root.join("summary.md");
    let run = |require: &str| {
        t.cmd()
            .env("PATH", path_with(&bin))
            .env("GITHUB_STEP_SUMMARY", &summary)
            .args(["run", plan.to_str().unwrap(), "--annotations", "github"])
            .args(["--junit", junit.to_str().unwrap(), "--require", require])
            .arg("--jsonl")
            .output()
            .unwrap()
    };
    let out = run("processes-hidden");
    assert_exit_with(&out, 39, "does not hold what --require asks");
    assert!(stderr(&out).contains("processes-hidden: the host's processes"));
    assert!(!t.ws.join("a.txt").exists(), "a step ran");
    // The refusal is in every report a pipeline reads.
    let events = events(&out);
    assert_events_match_schema(&events);
    assert_eq!(events.last().unwrap()["type"], "run_refused", "{events:?}");
    assert_eq!(events.last().unwrap()["exit_code"], 39);
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("processes-hidden"), "{xml}");
    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(md.contains("exit 39"), "{md}");
    // A promise Landlock holds: the run goes ahead under it.
    let out = run("reads-confined");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(t.read("a.txt"), "1");
}

#[test]
fn doctor_without_proc_says_so_and_fails() {
    if unsafe_uid() != 0 {
        acode_run::testing::skip("root", "the test runs doctor in a chroot without /proc");
        return;
    }
    let t = TestDir::new();
    let root = t.root.join("chroot");
    // The binary and the libraries it loads, nothing else: no /proc.
    let bin = Path::new(env!("CARGO_BIN_EXE_acode-run"));
    let mut files = vec![bin.to_path_buf()];
    let ldd = Command::new("ldd").arg(bin).output().unwrap();
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        if let Some(p) = line
            .split_whitespace()
            .find(|w| w.starts_with('/'))
            .map(PathBuf::from)
        {
            files.push(p);
        }
    }
    for f in &files {
        let to = root.join(f.strip_prefix("/").unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(f, &to).unwrap();
    }
    std::fs::create_dir_all(root.join("ws")).unwrap();
    std::fs::create_dir_all(root.join("tmp")).unwrap();
    assert!(!root.join("proc/self").exists());
    let inside = Path::new("/").join(bin.strip_prefix("/").unwrap());
    let out = Command::new("/usr/sbin/chroot")
        .arg(&root)
        .arg(&inside)
        .args([
            "doctor",
            "--workspace",
            "/ws",
            "--require",
            "reads-confined",
        ])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    assert_exit_with(&out, 1, "/proc is not mounted here");
    assert!(
        stderr(&out).contains("mount -t proc proc /proc"),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
}

/// The effective uid of the test process.
fn unsafe_uid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

#[test]
fn doctor_json_matches_what_the_human_report_says() {
    let t = TestDir::new();
    t.file(
        "acode-policy.json",
        &json!({"sandbox": "landlock", "limits": {"memory_mb": 512}}).to_string(),
    );
    let doc = doctor_json(&t, None, &[]);
    assert_eq!(doc["run"]["requested"], "landlock");
    assert!(
        doc["policy"]["detail"]
            .as_str()
            .unwrap()
            .contains("memory 512 MiB"),
        "{doc:#}"
    );
    let text = stdout(&doctor(&t, None, &[]));
    assert!(
        text.contains("a run here: --sandbox landlock -> landlock"),
        "{text}"
    );
    assert!(text.contains("memory 512 MiB"), "{text}");
}
