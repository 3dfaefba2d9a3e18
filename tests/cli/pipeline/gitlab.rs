//! The GitLab component (`templates/acode-run.yml`) run for real by `gitlab-ci-local` (shell
//! executor): a project that includes it locally with its inputs, once per plan — one that passes,
//! one whose step fails, one not approved — and bad inputs (no plan, a plan outside the
//! workspace). Each job must pass or fail as the plan did, with the JUnit file (wired into
//! `artifacts:reports:junit`) and the HTML report kept as artifacts.
//!
//! The component builds acode-run from its source with `cargo install` (`source:` is this
//! checkout). To keep this cheap, the jobs get `CARGO_TARGET_DIR` pointing at a copy of the
//! target directory the action's first job built (`action.rs`, same checkout, toolchain and
//! profile settings, [`tools::QUICK_RELEASE`]): cargo finds everything fresh and only installs the
//! binary, as on a runner whose target directory persists. Opt-in with `ACODE_E2E_NET=1` (gitlab-ci-local comes from the npm
//! registry).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::action::{cache_store, checkout, enabled, warm_cache};
use super::tools;
use crate::harness::*;

/// The target directory the action's cached build left, copied for the jobs (cargo writes to it).
fn target_copy(to: &Path) -> PathBuf {
    let store = cache_store();
    let entry = std::fs::read_dir(&store)
        .unwrap()
        .filter_map(Result::ok)
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .expect("the action's cache store is empty");
    let target = entry.path().join("target");
    assert!(
        target.is_dir(),
        "no target directory in {}",
        entry.path().display()
    );
    super::gha::copy_dir(&target, to);
    to.to_path_buf()
}

/// A project: the test checkout as a git repository, the component in `templates/`, and a
/// `.gitlab-ci.yml` including it once per `(job name, inputs)`.
fn project(t: &TestDir, jobs: &[(&str, &[(&str, &str)])]) {
    std::fs::create_dir_all(t.ws.join("templates")).unwrap();
    std::fs::copy(
        repo().join("templates/acode-run.yml"),
        t.ws.join("templates/acode-run.yml"),
    )
    .unwrap();
    let mut yml = String::from("include:\n");
    for (name, inputs) in jobs {
        yml.push_str("  - local: templates/acode-run.yml\n    inputs:\n");
        yml.push_str(&format!("      name: {name}\n"));
        yml.push_str(&format!("      source: {}\n", repo().display()));
        for (k, v) in *inputs {
            yml.push_str(&format!("      {k}: {v:?}\n"));
        }
    }
    std::fs::write(t.ws.join(".gitlab-ci.yml"), yml).unwrap();
    std::fs::write(
        t.ws.join(".gitignore"),
        ".gitlab-ci-local/\n.acode/\n.acode-run-build/\n",
    )
    .unwrap();
    git(t, &["init", "-q", "-b", "main"]);
    git(t, &["add", "-A"]);
    git(t, &["commit", "-qm", "ci"]);
    // gitlab-ci-local reads the project's path from its remote (nothing is fetched).
    git(
        t,
        &[
            "remote",
            "add",
            "origin",
            "https://gitlab.invalid/acode/demo.git",
        ],
    );
}

/// `gitlab-ci-local JOB` in the project, with the shared target directory.
fn run_job(t: &TestDir, job: &str, target: &Path) -> Output {
    let mut c: Command = tools::node("gitlab-ci-local");
    c.current_dir(&t.ws)
        .args(["--no-color", "--variable"])
        .arg(format!("CARGO_TARGET_DIR={}", target.display()));
    // The profile the action's build used, so that cargo finds its work fresh.
    for (k, v) in tools::QUICK_RELEASE {
        c.arg("--variable").arg(format!("{k}={v}"));
    }
    c.arg(job).env("NO_COLOR", "1");
    for k in [
        "CI",
        "GITLAB_CI",
        "GITHUB_ACTIONS",
        "GITHUB_STEP_SUMMARY",
        "GITHUB_OUTPUT",
    ] {
        c.env_remove(k);
    }
    c.output().expect("gitlab-ci-local runs")
}

fn log(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The job's artifact `file`, as gitlab-ci-local kept it.
fn artifact(t: &TestDir, job: &str, file: &str) -> Option<String> {
    walkdir::WalkDir::new(t.ws.join(".gitlab-ci-local/artifacts").join(job))
        .into_iter()
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy() == file)
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
}

#[test]
fn the_gitlab_component_runs_under_gitlab_ci_local() {
    if !enabled() {
        return;
    }
    warm_cache();
    let t = checkout();
    let target = target_copy(&t.root.join("target"));
    project(
        &t,
        &[
            ("acode-ok", &[("plan", "plans/ok.json")]),
            ("acode-fails", &[("plan", "plans/fails.json")]),
            ("acode-pending", &[("plan", "plans/pending.json")]),
            ("acode-noplan", &[("plan", " ")]),
            ("acode-outside", &[("plan", "../outside/sentinel.txt")]),
        ],
    );

    let out = run_job(&t, "acode-ok", &target);
    let text = log(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("sandbox modes here:"),
        "doctor did not run:\n{text}"
    );
    assert!(t.ws.join(".gitlab-ci-local").exists());
    // The JUnit file and the report, kept as artifacts.
    let xml = artifact(&t, "acode-ok", "acode-report.xml").unwrap_or_else(|| panic!("{text}"));
    assert!(xml.contains("<testcase") && xml.contains("say"), "{xml}");
    assert!(
        artifact(&t, "acode-ok", "acode-report.html").is_some(),
        "{text}"
    );

    let out = run_job(&t, "acode-fails", &target);
    let text = log(&out);
    assert!(!out.status.success(), "a failing plan passed:\n{text}");
    assert!(text.contains("exit 30"), "{text}");
    let xml = artifact(&t, "acode-fails", "acode-report.xml").unwrap_or_else(|| panic!("{text}"));
    assert!(xml.contains("<failure"), "{xml}");

    let out = run_job(&t, "acode-pending", &target);
    let text = log(&out);
    assert!(!out.status.success(), "an unapproved plan passed:\n{text}");
    assert!(
        text.contains("not authorized") && text.contains("exit 3"),
        "{text}"
    );
    let xml = artifact(&t, "acode-pending", "acode-report.xml").unwrap_or_else(|| panic!("{text}"));
    assert!(xml.contains("refused"), "{xml}");

    for (job, says) in [
        ("acode-noplan", "the input 'plan' names no plan"),
        ("acode-outside", "is outside the workspace"),
    ] {
        let out = run_job(&t, job, &target);
        let text = log(&out);
        assert!(!out.status.success(), "{job} passed:\n{text}");
        assert!(text.contains(says), "{job}: no {says:?} in\n{text}");
    }
}
