//! The fleet played with Podman containers as the machines (docs/fleet.md "Playing the fleet
//! here"): the Kubernetes recipe's job script, `examples/fleet/fleet-job.sh`, runs in one
//! container per generated repository with its `JOB_COMPLETION_INDEX`, writing to a shared
//! directory (the volume); then the merge Job's commands, read from
//! `examples/fleet/kubernetes-merge.yaml`, run in one more container; the fleet page is checked
//! in headless Chromium.
//!
//! Opt-in like the containment suite it borrows its root file system from
//! (`ACODE_E2E_CONTAINER=1`, on in CI): no network in the containers, the binary the suite built
//! bind-mounted read-only.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use super::*;
use crate::output::report::{browse, chromium};
use crate::sandbox::container::{enabled, rootfs};

/// Containers run at once (the machine has two cores; each container mostly waits).
const AT_ONCE: usize = 4;

/// A container on `rootfs` with the fleet's directories mounted, running `argv`.
fn container(root: &Path, rootfs: &Path, env: &[(&str, String)], argv: &[&str]) -> Command {
    let mut c = Command::new("podman");
    c.args([
        "run",
        "--rm",
        "--runtime",
        "runc",
        "--cgroup-manager",
        "cgroupfs",
        // What this machine's runtime may set (the containment suite's limits).
        "--ulimit",
        "nofile=4096:4096",
        "--ulimit",
        "nproc=4096:4096",
        "--network",
        "none",
        "-e",
        "NO_COLOR=1",
        "-e",
        "HOME=/root",
    ]);
    for (k, v) in env {
        c.args(["-e", &format!("{k}={v}")]);
    }
    c.args([
        "-v",
        &format!("{}:/fleet:ro", root.join("fleet").display()),
        "-v",
        &format!("{}:/repos:ro", root.join("repos").display()),
        "-v",
        &format!("{}:/records", root.join("records").display()),
        "-v",
        &format!(
            "{}:/usr/local/bin/acode-run:ro",
            env!("CARGO_BIN_EXE_acode-run")
        ),
    ]);
    c.arg("--rootfs")
        .arg(format!("{}:O", rootfs.display()))
        .args(argv);
    c
}

#[test]
fn a_fleet_of_containers_runs_merges_and_reports() {
    if !enabled() {
        return;
    }
    let Some(browser) = chromium() else { return };
    let rootfs = rootfs();
    let t = TestDir::new();
    let (plan, policy) = fleet_plan(&t);
    approve_fleet(&t, &plan, &policy, &t.root.join("approval.db"));
    let fleet = t.root.join("fleet");
    std::fs::create_dir_all(&fleet).unwrap();
    std::fs::create_dir_all(t.root.join("records")).unwrap();
    std::fs::copy(&plan, fleet.join("plan.json")).unwrap();
    std::fs::copy(
        plan.with_extension("json.approval"),
        fleet.join("plan.json.approval"),
    )
    .unwrap();
    std::fs::copy(&policy, fleet.join("policy.json")).unwrap();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/fleet");
    std::fs::copy(examples.join("fleet-job.sh"), fleet.join("fleet-job.sh")).unwrap();

    // 21 repositories: 16 pass, 3 fail, one asks for a refused host, one's own policy takes away
    // the program the plan needs.
    let mut names = Vec::new();
    for i in 0..21 {
        let (name, b) = match i {
            3 | 9 | 15 => (format!("fails-{i:02}"), Behaviour::Fails),
            12 => (format!("refused-host-{i:02}"), Behaviour::RefusedHost),
            _ => (format!("passes-{i:02}"), Behaviour::Passes),
        };
        let repo = fleet_repository(&t, &name, b);
        if i == 20 {
            std::fs::write(repo.join("acode-policy.json"), r#"{"commands": ["cat"]}"#).unwrap();
            assert!(raw_git(&t, &repo, &["add", "."]).status.success());
            assert!(
                raw_git(&t, &repo, &["commit", "-qm", "own policy"])
                    .status
                    .success()
            );
        }
        names.push(name);
    }
    let list: String = names
        .iter()
        .map(|n| format!("file:///repos/{n}\n"))
        .collect();
    std::fs::write(fleet.join("repositories"), list).unwrap();

    let start = Instant::now();
    let indexes: Vec<usize> = (0..names.len()).collect();
    for chunk in indexes.chunks(AT_ONCE) {
        std::thread::scope(|scope| {
            for &i in chunk {
                let (root, rootfs) = (&t.root, &rootfs);
                scope.spawn(move || {
                    let out = container(
                        root,
                        rootfs,
                        &[("JOB_COMPLETION_INDEX", i.to_string())],
                        &["sh", "/fleet/fleet-job.sh"],
                    )
                    .output()
                    .expect("podman runs (apt-get install podman runc)");
                    // The script exits 0 whenever acode-run got to its executor (passed,
                    // failed or refused at the start: the record and page say which).
                    assert_eq!(
                        out.status.code(),
                        Some(0),
                        "machine {i}: {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                });
            }
        });
    }
    eprintln!("{} machines took {:.1?}", names.len(), start.elapsed());
    let exit_of = |i: usize| -> String {
        std::fs::read_to_string(t.root.join(format!("records/runs/{i}/exit-code")))
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    assert_eq!(exit_of(0), "0");
    assert_eq!(exit_of(3), "30");
    assert_eq!(exit_of(12), "30");
    assert_eq!(
        exit_of(20),
        "32",
        "the repository's own policy refused the plan"
    );
    let refused_page = std::fs::read_to_string(t.root.join("records/runs/20/report.html")).unwrap();
    assert!(
        refused_page.contains("refused before any step ran") && refused_page.contains("python3")
    );

    // The merge Job: its commands as the manifest writes them, in a container of their own.
    let manifest = std::fs::read_to_string(examples.join("kubernetes-merge.yaml")).unwrap();
    let commands: Vec<Vec<String>> = manifest
        .lines()
        .filter_map(|l| l.trim().strip_prefix("command: "))
        .map(|array| serde_json::from_str(array).unwrap())
        .collect();
    assert_eq!(commands.len(), 2, "merge, then report");
    for argv in &commands {
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let out = container(&t.root, &rootfs, &[], &argv).output().unwrap();
        assert!(
            out.status.success(),
            "{argv:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let db = rusqlite::Connection::open(t.root.join("records/fleet.db")).unwrap();
    assert_eq!(q::<i64>(&db, "SELECT count(*) FROM runs"), 20);
    assert_eq!(
        q::<i64>(&db, "SELECT count(*) FROM v_runs WHERE status = 'failed'"),
        4
    );
    assert_eq!(
        q::<i64>(&db, "SELECT count(*) FROM v_requests WHERE allowed = 0"),
        1
    );
    assert_eq!(
        q::<i64>(
            &db,
            "SELECT count(DISTINCT commit_sha) FROM runs WHERE commit_sha IS NOT NULL"
        ),
        20,
        "every run names its repository's commit"
    );
    let sandbox: String = q(&db, "SELECT group_concat(DISTINCT sandbox) FROM runs");
    assert_eq!(sandbox, "landlock", "no bwrap in the container: Landlock");

    let page = t.root.join("records/fleet.html");
    let dom = browse(
        &browser,
        &page,
        &["--virtual-time-budget=3000", "--dump-dom"],
    );
    let dom = String::from_utf8_lossy(&dom.stdout).into_owned();
    assert!(dom.contains("<title>acode-run fleet: 20 runs</title>"));
    let rows: Vec<&str> = dom
        .split("<tr class=\"")
        .skip(1)
        .filter(|r| r.contains("<td class=\"st\">"))
        .collect();
    assert_eq!(rows.len(), 20, "a row per repository");
    assert_eq!(rows.iter().filter(|r| r.starts_with("failed")).count(), 4);
    for i in [3, 9, 15] {
        let row = rows
            .iter()
            .find(|r| r.contains(&format!("/repos/fails-{i:02}<")))
            .unwrap_or_else(|| panic!("no row for fails-{i:02}"));
        assert!(row.contains(&format!("FAILED: fails-{i:02}")), "{row}");
    }
    let refused = rows.iter().find(|r| r.contains("refused-host-12")).unwrap();
    assert!(refused.contains(&format!("{REFUSED_HOST}:80")), "{refused}");
    let ids: Vec<String> = db
        .prepare("SELECT run_id FROM runs")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for id in ids {
        assert!(
            dom.contains(&format!("id=\"run-{id}\"")),
            "no section for {id}"
        );
    }
}
