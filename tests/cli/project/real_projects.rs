//! The real-project plans in `plans/` (issue #21): a Rust crate, a Python package and an npm
//! package from `fixtures/`, each installing its dependencies from the registry its client is
//! configured to use, building and testing — in the default sandbox mode and under Landlock, with
//! only that registry allowed by the fixture's `acode-policy.json`.
//!
//! The runs need the package registries, so they are opt-in locally (`ACODE_E2E_NET=1`) and always
//! on in `.ci/run`. What needs no network (the plans validate, their committed approvals are
//! current) always runs.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::harness::*;

/// Each plan, the fixture it runs over, and what its test step prints when the tests pass.
const PROJECTS: [(&str, &str); 3] = [
    ("rust-crate", "test result: ok. 2 passed"),
    ("python-pkg", "2 passed"),
    ("npm-pkg", "# pass 1"),
];

/// A fresh copy of the project's fixture as the workspace, and the plan with its committed
/// approval beside it (as a reviewed plan is kept).
fn setup(name: &str) -> (TestDir, PathBuf) {
    let t = TestDir::new();
    copy_tree(&repo().join("fixtures").join(name), &t.ws);
    let plan = t.root.join(format!("{name}.json"));
    std::fs::copy(repo().join(format!("plans/{name}.json")), &plan).unwrap();
    std::fs::copy(
        repo().join(format!("plans/{name}.json.approval")),
        t.root.join(format!("{name}.json.approval")),
    )
    .unwrap();
    (t, plan)
}

/// The plans validate over their fixtures, and the committed approvals cover today's plan bytes
/// and today's fixture policy (an edit to either without re-approving fails here, not in CI's
/// network run).
#[test]
fn the_real_project_plans_validate_and_their_approvals_are_current() {
    for (name, _) in PROJECTS {
        let (t, plan_path) = setup(name);
        let out = t.run(&["validate", plan_path.to_str().unwrap()]);
        assert_eq!(code(&out), 0, "{name}: {}", stderr(&out));
        let out = t.run(&["preview", plan_path.to_str().unwrap()]);
        assert_eq!(code(&out), 0, "{name}: {}", stderr(&out));
        assert!(
            stdout(&out).contains("through the run's proxy"),
            "{name}: preview names the network: {}",
            stdout(&out)
        );
        let bytes = std::fs::read(&plan_path).unwrap();
        let plan = acode_run::plan::parse::parse(&bytes).unwrap();
        let auth = acode_run::plan::auth::load(&plan_path, &plan).unwrap();
        auth.check(&plan)
            .unwrap_or_else(|e| panic!("{name}: the committed approval is stale: {e}"));
        let policy = acode_run::policy::Policy::load(None, &t.ws).unwrap();
        auth.check_policy(&policy)
            .unwrap_or_else(|e| panic!("{name}: approved under another policy: {e}"));
    }
}

fn run_project(name: &str, expect: &str, mode: Option<&str>) {
    let (t, plan) = setup(name);
    let mut args = vec!["run", plan.to_str().unwrap(), "--jsonl"];
    if let Some(m) = mode {
        args.extend(["--sandbox", m]);
    }
    let out = t.run(&args);
    let label = format!("{name} in {}", mode.unwrap_or("the default mode"));
    assert_eq!(code(&out), 0, "{label}: {}", stderr(&out));
    // The dependencies came through the run's proxy, every request allowed and recorded.
    let evs = events(&out);
    let requests: Vec<&Value> = evs
        .iter()
        .filter(|e| e["type"] == "network_request")
        .collect();
    assert!(
        !requests.is_empty(),
        "{label}: no request went through the proxy"
    );
    assert!(
        requests.iter().all(|r| r["allowed"] == true),
        "{label}: a request was denied: {requests:?}"
    );
    let recorded: i64 = q(
        &t.db(),
        "SELECT COUNT(*) FROM network_requests WHERE allowed = 1 AND bytes_down > 0",
    );
    assert!(recorded > 0, "{label}: no request recorded with its bytes");
    // The test step really ran the project's tests.
    let test_out: String = q(
        &t.db(),
        "SELECT group_concat(a.content, '') FROM artifacts a
         JOIN executions e ON e.execution_id = a.execution_id
         WHERE e.step_id = 'test' AND a.artifact_type IN ('stdout', 'stderr')",
    );
    assert!(test_out.contains(expect), "{label}: {test_out}");
    t.assert_outside_untouched();
    // No empty placeholder left at the root: what the runner created, the commands filled.
    for entry in std::fs::read_dir(&t.ws).unwrap() {
        let entry = entry.unwrap();
        let m = entry.metadata().unwrap();
        if m.is_file() {
            assert!(
                m.len() > 0,
                "{label}: empty {} left behind",
                entry.file_name().to_string_lossy()
            );
        }
    }
}

fn run_all(mode: Option<&str>) {
    if !e2e_net("real projects' dependencies") {
        return;
    }
    for (name, expect) in PROJECTS {
        run_project(name, expect, mode);
    }
}

#[test]
fn real_projects_install_build_and_test_in_the_default_mode() {
    run_all(None);
}

#[test]
fn real_projects_install_build_and_test_under_landlock() {
    run_all(Some("landlock"));
}

#[test]
fn real_projects_install_build_and_test_under_bwrap() {
    run_all(Some("bwrap"));
}

/// Each fixture's policy opens exactly its own client's configured registry and names no host.
#[test]
fn each_fixture_declares_only_its_own_registry() {
    for (name, _) in PROJECTS {
        let text =
            std::fs::read_to_string(repo().join("fixtures").join(name).join("acode-policy.json"))
                .unwrap();
        let policy: Value = serde_json::from_str(&text).unwrap();
        let allow = policy["network"]["allow"].as_array().unwrap();
        assert_eq!(allow.len(), 1, "{name}: {allow:?}");
        assert!(
            allow[0].as_str().unwrap().starts_with("registry:"),
            "{name}: a fixture names no host, only its client's configured registry"
        );
        assert!(Path::new(&repo().join("plans").join(format!("{name}.json"))).is_file());
    }
}
