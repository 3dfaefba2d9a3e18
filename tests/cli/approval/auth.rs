//! Authorization: only an approved, unchanged plan runs (SPEC §3).

use serde_json::json;

use crate::harness::*;

fn read_plan() -> serde_json::Value {
    json!({"plan_id": "auth-test", "steps": [
        {"step_id": "read", "tool": "file_read", "arguments": {"path": "a.txt"}}
    ]})
}

#[test]
fn pending_plan_is_refused_with_exit_3_and_how_to_approve() {
    let t = TestDir::new();
    t.file("a.txt", "hi");
    let plan = t.plan("p.json", &read_plan());
    let out = t.run(&[plan.to_str().unwrap()]);
    assert_exit_with(&out, 3, "not approved");
    assert!(
        stderr(&out).contains("acode-run approve"),
        "{}",
        stderr(&out)
    );
    assert!(
        !t.ws.join(".acode/executions.db").exists(),
        "no run may be recorded"
    );
}

#[test]
fn rejected_plan_is_refused() {
    let t = TestDir::new();
    t.file("a.txt", "hi");
    let plan = t.plan("p.json", &read_plan());
    let out = t.run(&["reject", plan.to_str().unwrap(), "--by", "alice"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = t.run(&[plan.to_str().unwrap()]);
    assert_eq!(code(&out), 3);
    assert!(
        stderr(&out).contains("rejected by alice"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn plan_edited_after_approval_is_refused() {
    let t = TestDir::new();
    t.file("a.txt", "hi");
    let plan = t.plan("p.json", &read_plan());
    t.approve(&plan);
    // Approved as-is runs.
    assert_eq!(code(&t.run(&[plan.to_str().unwrap()])), 0);
    // A whitespace-only edit voids the approval.
    let mut text = std::fs::read_to_string(&plan).unwrap();
    text.push('\n');
    std::fs::write(&plan, text).unwrap();
    let out = t.run(&[plan.to_str().unwrap()]);
    assert_eq!(code(&out), 3);
    assert!(
        stderr(&out).contains("changed since it was approved"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn approval_for_another_plan_id_is_refused() {
    let t = TestDir::new();
    t.file("a.txt", "hi");
    let plan = t.plan("p.json", &read_plan());
    t.approve(&plan);
    let approval = t.root.join("p.json.approval");
    let mut a: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&approval).unwrap()).unwrap();
    a["plan_id"] = json!("some-other-plan");
    std::fs::write(&approval, a.to_string()).unwrap();
    let out = t.run(&[plan.to_str().unwrap()]);
    assert_eq!(code(&out), 3);
    assert!(stderr(&out).contains("some-other-plan"), "{}", stderr(&out));
}

#[test]
fn approval_file_records_hash_and_reviewer() {
    let t = TestDir::new();
    let plan = t.plan("p.json", &read_plan());
    t.approve(&plan);
    let a: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(t.root.join("p.json.approval")).unwrap())
            .unwrap();
    assert_eq!(a["status"], "approved");
    assert_eq!(a["decided_by"], "tester");
    assert_eq!(a["plan_id"], "auth-test");
    let bytes = std::fs::read(&plan).unwrap();
    use sha2::Digest;
    let expected: String = sha2::Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(a["plan_sha256"], expected.as_str());
}

#[test]
fn run_with_approve_records_the_approval_and_runs() {
    let t = TestDir::new();
    t.file("a.txt", "hi");
    let plan = t.plan("p.json", &read_plan());
    let out = t.run(&["run", "--approve", "--by", "bob", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(t.root.join("p.json.approval").exists());
    // And the recorded approval is good for the next run.
    assert_eq!(code(&t.run(&[plan.to_str().unwrap()])), 0);
}

#[test]
fn with_an_approval_key_only_signed_approvals_run() {
    let t = TestDir::new();
    t.file("a.txt", "hi");
    let plan = t.plan("p.json", &read_plan());
    let key = "approval-signing-key-0123456789";
    let approve = |key: Option<&str>| {
        let mut c = t.cmd();
        c.args(["approve", plan.to_str().unwrap(), "--by", "alice"]);
        if let Some(k) = key {
            c.env("ACODE_APPROVAL_KEY", k);
        }
        assert_eq!(code(&c.output().unwrap()), 0);
    };
    let run = |key: Option<&str>| {
        let mut c = t.cmd();
        c.arg(plan.to_str().unwrap());
        if let Some(k) = key {
            c.env("ACODE_APPROVAL_KEY", k);
        }
        c.output().unwrap()
    };
    // Signed with the key: runs with it, and without it (the signature is then not required).
    approve(Some(key));
    let a: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(t.root.join("p.json.approval")).unwrap())
            .unwrap();
    let sig = a["signature"].as_str().unwrap();
    assert_eq!(
        sig.strip_prefix("hmac-sha256-v2:").unwrap().len(),
        64,
        "{sig}"
    );
    assert_eq!(code(&run(Some(key))), 0);
    assert_eq!(code(&run(None)), 0);
    // Another key does not verify it.
    let out = run(Some("some-other-key-abcdefgh"));
    assert_eq!(code(&out), 3);
    assert!(
        stderr(&out).contains("signature does not match"),
        "{}",
        stderr(&out)
    );
    // An approval written without the key (as anything that can write files could) is refused.
    approve(None);
    let out = run(Some(key));
    assert_eq!(code(&out), 3);
    assert!(stderr(&out).contains("not signed"), "{}", stderr(&out));
    assert!(!stderr(&out).contains(key), "the key is never printed");
}

#[test]
fn the_approval_key_never_reaches_a_command_even_if_the_policy_asks() {
    let t = TestDir::new();
    // A second variable the policy passes through is the positive control: the command does
    // see what env_passthrough names, so the key's absence is the refusal, not a command that
    // sees no environment at all.
    t.file(
        "acode-policy.json",
        r#"{"env_passthrough": ["ACODE_APPROVAL_KEY", "ACODE_TEST_PASSED_THROUGH"]}"#,
    );
    let plan = t.plan("p.json", &serde_json::json!({"plan_id": "k", "steps": [
        {"step_id": "env", "tool": "run_command", "arguments": {"command": "cat /proc/self/environ"}}]}));
    let key = "approval-signing-key-0123456789";
    let mut c = t.cmd();
    c.args([
        "run",
        "--approve",
        plan.to_str().unwrap(),
        "--sandbox",
        "none",
    ])
    .env("ACODE_APPROVAL_KEY", key)
    .env("ACODE_TEST_PASSED_THROUGH", "visible-7d1e");
    let out = c.output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let id: String = q(&t.db(), "SELECT execution_id FROM executions");
    let seen = stdout(&t.run(&["artifact", &id, "stdout"]));
    assert!(
        seen.contains("ACODE_TEST_PASSED_THROUGH=visible-7d1e"),
        "the control variable reaches the command: {seen}"
    );
    assert!(!seen.contains("ACODE_APPROVAL_KEY"), "{seen}");
    assert!(!seen.contains(key), "{seen}");
}
