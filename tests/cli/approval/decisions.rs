//! Decisions are kept, not overwritten (SPEC §3): every approve and reject is appended to the
//! database; a rejection stands against `run --approve`; only an explicit `approve` overrides it.

use crate::harness::*;

#[test]
fn a_rejection_stands_until_an_explicit_approve_overrides_it() {
    let t = TestDir::new();
    let plan = simple_plan(&t);
    let p = plan.to_str().unwrap();
    let out = t.run(&[
        "reject",
        p,
        "--by",
        "rita",
        "--reason",
        "deletes the wrong file",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    // `run --approve` refuses, naming who rejected it and why; nothing runs, nothing is rewritten.
    let approval_before = std::fs::read_to_string(format!("{p}.approval")).unwrap();
    let out = t.run(&["run", "--approve", p, "--by", "sam"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("rejected by rita"), "{err}");
    assert!(err.contains("deletes the wrong file"), "{err}");
    assert!(err.contains(&format!("acode-run approve {p}")), "{err}");
    assert!(!t.ws.join("a.txt").exists());
    assert_eq!(
        std::fs::read_to_string(format!("{p}.approval")).unwrap(),
        approval_before
    );

    // The rejection in the approval file alone (a database elsewhere) also stands.
    let other_db = t.root.join("other.db");
    let out = t.run(&["run", "--approve", p, "--db", other_db.to_str().unwrap()]);
    assert_exit_with(&out, 3, "rejected by rita");

    // An explicit approve overrides, and is recorded as such.
    let out = t.run(&[
        "approve",
        p,
        "--by",
        "olga",
        "--reason",
        "checked: it is right",
    ]);
    assert_exit_with(&out, 0, "overriding the rejection by rita");
    let out = t.run(&["run", "--approve", p, "--by", "sam"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    let db = t.db();
    let rows: Vec<(String, String, Option<String>, bool)> = db
        .prepare(
            "SELECT verdict, decided_by, reason, overrides_rejection FROM decisions ORDER BY rowid",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        rows,
        vec![
            (
                "rejected".into(),
                "rita".into(),
                Some("deletes the wrong file".into()),
                false
            ),
            (
                "approved".into(),
                "olga".into(),
                Some("checked: it is right".into()),
                true
            ),
            ("approved".into(), "sam".into(), None, false),
        ]
    );
    // PLAN.approval holds the latest.
    let latest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{p}.approval")).unwrap()).unwrap();
    assert_eq!(latest["decided_by"], "sam");
    assert_eq!(latest["status"], "approved");

    // `show` lists the plan's decisions.
    let run_id: String = q(&db, "SELECT run_id FROM runs");
    let out = t.run(&["show", &run_id]);
    let text = stdout(&out);
    assert!(
        text.contains("rejected by rita: deletes the wrong file"),
        "{text}"
    );
    assert!(
        text.contains("approved by olga (overriding a rejection)"),
        "{text}"
    );
    let out = t.run(&["show", &run_id, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["decisions"].as_array().unwrap().len(), 3);
    assert_eq!(v["decisions"][0]["verdict"], "rejected");
}

/// `decided_by` without `--by`: ACODE_USER, then the CI's actor, then the login name, then `uid:N`.
#[test]
fn decided_by_comes_from_the_environment_never_unknown() {
    let t = TestDir::new();
    let plan = simple_plan(&t);
    let p = plan.to_str().unwrap();
    let who = |envs: &[(&str, &str)]| -> String {
        let mut c = t.cmd();
        for v in [
            "USER",
            "LOGNAME",
            "GITHUB_ACTOR",
            "GITLAB_USER_LOGIN",
            "BUILDKITE_BUILD_CREATOR",
            "BUILD_USER_ID",
        ] {
            c.env_remove(v);
        }
        c.envs(envs.iter().copied()).args(["approve", p]);
        let out = c.output().unwrap();
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(format!("{p}.approval")).unwrap())
                .unwrap();
        v["decided_by"].as_str().unwrap().to_string()
    };
    assert_eq!(who(&[("ACODE_USER", "ada"), ("GITHUB_ACTOR", "gh")]), "ada");
    assert_eq!(who(&[("GITHUB_ACTOR", "octocat")]), "octocat");
    assert_eq!(who(&[("GITLAB_USER_LOGIN", "gl")]), "gl");
    assert_eq!(who(&[("BUILDKITE_BUILD_CREATOR", "bk")]), "bk");
    assert_eq!(who(&[("BUILD_USER_ID", "jenkins-user")]), "jenkins-user");
    // No variable at all: the uid's login name from the user database.
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let login = std::fs::read_to_string("/etc/passwd")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.get(2) == Some(&uid.to_string().as_str())).then(|| f[0].to_string())
        });
    let expected = login.unwrap_or_else(|| format!("uid:{uid}"));
    assert_eq!(who(&[]), expected);
}

/// A uid with no entry in the user database and no variable set: `uid:N`.
#[test]
fn decided_by_falls_back_to_the_uid() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        acode_run::testing::skip(
            "root",
            "switching to a uid without a passwd entry needs root",
        );
        return;
    }
    let uid = 54321u32;
    let t = TestDir::new();
    let plan = simple_plan(&t);
    for dir in [&t.root, &t.ws] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let p = plan.to_str().unwrap();
    let db = t.root.join("uid.db");
    let mut c = t.cmd();
    for v in [
        "USER",
        "LOGNAME",
        "ACODE_USER",
        "GITHUB_ACTOR",
        "GITLAB_USER_LOGIN",
        "BUILDKITE_BUILD_CREATOR",
        "BUILD_USER_ID",
    ] {
        c.env_remove(v);
    }
    let out = c
        .uid(uid)
        .gid(uid)
        .args(["reject", p, "--db", db.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{p}.approval")).unwrap()).unwrap();
    assert_eq!(v["decided_by"], format!("uid:{uid}"));
}

/// Recording a decision opens the workspace's `.acode/` like a run does: a planted link is refused.
#[test]
fn a_decision_is_not_recorded_through_a_linked_state_directory() {
    let t = TestDir::new();
    let plan = simple_plan(&t);
    std::os::unix::fs::symlink(&t.outside, t.ws.join(".acode")).unwrap();
    for cmd in ["approve", "reject"] {
        let out = t.run(&[cmd, plan.to_str().unwrap()]);
        assert_eq!(code(&out), 2, "{cmd}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(".acode is a symbolic link"),
            "{}",
            stderr(&out)
        );
        t.assert_outside_untouched();
    }
}
