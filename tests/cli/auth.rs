//! Authorization: only an approved, unchanged plan runs (SPEC §3).

use serde_json::json;

use crate::harness::*;

fn simple_plan() -> serde_json::Value {
    json!({"plan_id": "auth-test", "steps": [
        {"step_id": "read", "tool": "file_read", "arguments": {"path": "a.txt"}}
    ]})
}

#[test]
fn pending_plan_is_refused_with_exit_3_and_how_to_approve() {
    let t = TestDir::new();
    t.file("a.txt", "hi");
    let plan = t.plan("p.json", &simple_plan());
    let out = t.run(&[plan.to_str().unwrap()]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(stderr(&out).contains("not approved"), "{}", stderr(&out));
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
    let plan = t.plan("p.json", &simple_plan());
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
    let plan = t.plan("p.json", &simple_plan());
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
    let plan = t.plan("p.json", &simple_plan());
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
    let plan = t.plan("p.json", &simple_plan());
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
    let plan = t.plan("p.json", &simple_plan());
    let out = t.run(&["run", "--approve", "--by", "bob", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(t.root.join("p.json.approval").exists());
    // And the recorded approval is good for the next run.
    assert_eq!(code(&t.run(&[plan.to_str().unwrap()])), 0);
}
