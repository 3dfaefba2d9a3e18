//! Past one machine (issue 48): one approved plan run in many repositories under a policy shipped
//! beside it (a repository's own policy only narrows it), each run's record merged into one
//! database, the fleet page, the queryable record, and the CI recipes.

mod containers;
mod merge;
mod page;
mod policy;
mod query;
mod recipes;

use std::path::{Path, PathBuf};

use crate::harness::*;

/// The password in every test repository's `origin` URL: in no format the redactor knows, so
/// only stripping the URL's user information keeps it out of the record.
pub const URL_PASSWORD: &str = "plain-fleet-password-4711";

/// A git repository `name` under the test's root with one commit and an `origin` whose URL
/// carries a password (which must never be recorded).
pub fn repository(t: &TestDir, name: &str) -> PathBuf {
    let dir = t.root.join("repos").join(name);
    repo_with_commit(t, &dir);
    let url = format!("https://ci:{URL_PASSWORD}@git.example.org/fleet/{name}.git?x=1");
    assert!(
        raw_git(t, &dir, &["remote", "add", "origin", &url])
            .status
            .success()
    );
    dir
}

/// `git rev-parse HEAD` in `dir`.
pub fn head(t: &TestDir, dir: &Path) -> String {
    String::from_utf8(raw_git(t, dir, &["rev-parse", "HEAD"]).stdout)
        .unwrap()
        .trim()
        .to_string()
}

/// What a generated repository's `check.py` does when the fleet plan runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// Prints a line and exits 0.
    Passes,
    /// Prints lines (the last one naming the repository) and exits 1.
    Fails,
    /// Asks the run's proxy for a host the policy does not allow, then exits 2.
    RefusedHost,
}

/// The host a [`Behaviour::RefusedHost`] repository asks for.
pub const REFUSED_HOST: &str = "exfil.fleet.test";

/// The `check.py` of a repository that behaves as `b`.
pub fn check_py(name: &str, b: Behaviour) -> String {
    match b {
        Behaviour::Passes => format!("print('ok: {name}')\n"),
        Behaviour::Fails => format!(
            "import sys\nfor i in range(30):\n    print('line', i)\nprint('FAILED: {name} <b>&amp;</b>', file=sys.stderr)\nsys.exit(1)\n"
        ),
        Behaviour::RefusedHost => format!(
            "import sys, urllib.request\ntry:\n    urllib.request.urlopen('http://{REFUSED_HOST}/', timeout=10)\n\
             except Exception as e:\n    print('refused:', e, file=sys.stderr)\n    sys.exit(2)\n"
        ),
    }
}

/// The fleet's plan (bump `VERSION`, then run the repository's own check) and the policy it is
/// approved with, written beside the workspace: `(plan, policy)`.
pub fn fleet_plan(t: &TestDir) -> (PathBuf, PathBuf) {
    let plan = t.plan(
        "fleet.json",
        &serde_json::json!({"plan_id": "bump-version", "steps": [
            {"step_id": "bump", "tool": "file_write", "arguments": {"path": "VERSION", "contents": "2\n"}},
            {"step_id": "check", "tool": "run_command", "arguments": {"argv": ["python3", "check.py"]}}
        ]}),
    );
    let policy = t.root.join("fleet-policy.json");
    std::fs::write(
        &policy,
        serde_json::json!({
            "commands": ["python3", "cat", "true"],
            "network": {"allow": ["allowed.fleet.test"]}
        })
        .to_string(),
    )
    .unwrap();
    (plan, policy)
}

/// A generated repository `name` that behaves as `b`.
pub fn fleet_repository(t: &TestDir, name: &str, b: Behaviour) -> PathBuf {
    let dir = repository(t, name);
    std::fs::write(dir.join("check.py"), check_py(name, b)).unwrap();
    std::fs::write(dir.join("VERSION"), "1\n").unwrap();
    assert!(raw_git(t, &dir, &["add", "."]).status.success());
    assert!(
        raw_git(t, &dir, &["commit", "-qm", "fleet"])
            .status
            .success()
    );
    dir
}

/// Approves the fleet plan under its policy (recording the decision in `db`).
pub fn approve_fleet(t: &TestDir, plan: &Path, policy: &Path, db: &Path) {
    let out = t.run(&[
        "approve",
        plan.to_str().unwrap(),
        "--policy",
        policy.to_str().unwrap(),
        "--by",
        "lead",
        "--db",
        db.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// Runs the fleet plan in `repo`, recording into `db`; its exit code.
pub fn run_fleet(t: &TestDir, plan: &Path, policy: &Path, repo: &Path, db: &Path) -> i32 {
    let out = t.run(&[
        "run",
        plan.to_str().unwrap(),
        "--policy",
        policy.to_str().unwrap(),
        "--workspace",
        repo.to_str().unwrap(),
        "--db",
        db.to_str().unwrap(),
        "--quiet",
    ]);
    code(&out)
}

/// Every row of every table of the database at `path`, as text, sorted: what "changes nothing"
/// compares.
pub fn dump(path: &Path) -> Vec<String> {
    let db =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let tables: Vec<String> = db
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut rows = Vec::new();
    for table in tables {
        let mut stmt = db.prepare(&format!("SELECT * FROM \"{table}\"")).unwrap();
        let n = stmt.column_count();
        let mut found = stmt.query([]).unwrap();
        while let Some(r) = found.next().unwrap() {
            let cells: Vec<String> = (0..n)
                .map(|i| format!("{:?}", r.get_ref(i).unwrap()))
                .collect();
            rows.push(format!("{table}: {}", cells.join(" | ")));
        }
    }
    rows.sort();
    rows
}
