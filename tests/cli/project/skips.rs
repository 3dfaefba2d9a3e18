//! What a test does when this machine lacks what it needs (issue #34 items 14 and 15): the helpers
//! in `acode_run::testing`, run for real in a child copy of this test binary.

use std::process::Command;

use crate::harness::*;

/// Not a test of its own: the child the tests below start (`ACODE_TEST_PROBE` says what to do).
#[test]
#[ignore = "started by the tests in this file, with ACODE_TEST_PROBE set"]
fn probe_child() {
    match std::env::var("ACODE_TEST_PROBE").as_deref() {
        Ok("skip") => acode_run::testing::skip("frobnicator-7", "the probe needs it"),
        Ok("need_bwrap") => need_bwrap(),
        _ => {}
    }
}

/// This test binary, started on `probe_child` alone with `probe` and `CI` as given.
fn child(probe: &str, ci: Option<&str>, log: &std::path::Path) -> std::process::Output {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--ignored",
        "--exact",
        "project::skips::probe_child",
        "--nocapture",
    ])
    .env("ACODE_TEST_PROBE", probe)
    .env(acode_run::testing::SKIP_LOG_ENV, log)
    .env_remove("CI");
    if let Some(ci) = ci {
        c.env("CI", ci);
    }
    c.output().unwrap()
}

#[test]
fn a_skip_is_named_and_counted_locally_and_a_failure_under_ci() {
    let t = TestDir::new();
    let log = t.root.join("skips.log");
    let out = child("skip", None, &log);
    assert!(out.status.success(), "{}", stdout(&out));
    let text = stdout(&out) + &stderr(&out);
    assert!(
        text.contains(
            "skipped project::skips::probe_child: frobnicator-7 is missing (the probe needs it)"
        ),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "project::skips::probe_child: frobnicator-7 (the probe needs it)\n"
    );
    // `CI=false` is not CI.
    let out = child("skip", Some("false"), &log);
    assert!(out.status.success(), "{}", stdout(&out));
    assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 2);

    let out = child("skip", Some("true"), &log);
    assert!(!out.status.success(), "a skip under CI must fail");
    let text = stdout(&out) + &stderr(&out);
    assert!(text.contains("frobnicator-7 is missing"), "{text}");
    assert!(text.contains("CI is set, so a skip fails"), "{text}");
    assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 2);
}

#[test]
fn a_test_that_needs_bwrap_fails_naming_it_where_bwrap_is_missing() {
    let t = TestDir::new();
    // A PATH without bwrap: an empty directory.
    let empty = t.root.join("empty-path");
    std::fs::create_dir_all(&empty).unwrap();
    let log = t.root.join("skips.log");
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--ignored",
        "--exact",
        "project::skips::probe_child",
        "--nocapture",
    ])
    .env("ACODE_TEST_PROBE", "need_bwrap")
    .env(acode_run::testing::SKIP_LOG_ENV, &log)
    .env("PATH", &empty)
    .env_remove("CI");
    let out = c.output().unwrap();
    assert!(!out.status.success(), "{}", stdout(&out));
    let text = stdout(&out) + &stderr(&out);
    assert!(
        text.contains(
            "project::skips::probe_child needs bubblewrap (bwrap), which this machine lacks"
        ),
        "{text}"
    );
    assert!(text.contains("no `bwrap` on PATH"), "{text}");
}
