//! One decision for "may this plan run" (issue 33): for every reason `run` refuses a plan, the MCP
//! server's `plan_status` and `preview` report the same status and the very words `run` prints,
//! because all three ask `runner::authorize`. One test per refusal reason.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::harness::mcp::{Served, cmd};
use crate::harness::*;

const KEY: &str = "k3y-for-the-agreement-tests-0123456789";

/// A workspace with the plan `p.json` inside it (the MCP server's tools take workspace paths).
fn workspace_plan() -> (TestDir, PathBuf) {
    let t = TestDir::new();
    let plan = t.file(
        "p.json",
        &serde_json::to_string_pretty(&json!({"plan_id": "p", "steps": [
            {"step_id": "w", "tool": "file_write", "arguments": {"path": "out.txt", "contents": "hi\n"}}]}))
        .unwrap(),
    );
    (t, plan)
}

fn approve(t: &TestDir, plan: &std::path::Path, envs: &[(&str, &str)]) {
    let out = cmd(t, envs)
        .args(["approve", plan.to_str().unwrap(), "--by", "alice"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// Edits the approval file next to `plan` as JSON.
fn edit_approval(plan: &std::path::Path, edit: impl FnOnce(&mut Value)) {
    let path = format!("{}.approval", plan.display());
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

/// `run` refuses the plan with exit `exit` and a message holding `needle`; `plan_status` says
/// `status`, may not run, and gives as its reason exactly what `run` printed; `preview` ends
/// with the same reason.
fn agree(
    t: &TestDir,
    plan: &std::path::Path,
    envs: &[(&str, &str)],
    status: &str,
    exit: i32,
    needle: &str,
) {
    let out = cmd(t, envs)
        .args(["run", plan.to_str().unwrap()])
        .output()
        .unwrap();
    let printed = stderr(&out);
    assert_eq!(code(&out), exit, "{printed}");
    assert!(printed.contains(needle), "run: {printed}");
    assert!(!t.ws.join("out.txt").exists(), "nothing ran");

    let mut served = Served::start_cmd(cmd(t, envs));
    let answer = served.call("plan_status", json!({"path": "p.json"}));
    let s = &answer["structuredContent"];
    assert_eq!(answer["isError"], false, "{answer}");
    assert_eq!(s["status"], status, "{answer}");
    assert_eq!(s["may_run"], false, "{answer}");
    let reason = s["reason"]
        .as_str()
        .unwrap_or_else(|| panic!("no reason: {answer}"));
    assert!(reason.contains(needle), "{reason}");
    assert!(
        printed.contains(&format!("acode-run: {reason}")),
        "plan_status says {reason:?}, run printed {printed:?}"
    );

    let preview = cmd(t, envs)
        .args(["preview", plan.to_str().unwrap()])
        .output()
        .unwrap();
    let first_line = reason.lines().next().unwrap();
    assert!(
        stdout(&preview).contains(&format!(
            "approval: {status}; run would refuse it: {first_line}"
        )),
        "{}{}",
        stdout(&preview),
        stderr(&preview)
    );
    let preview = cmd(t, envs)
        .args(["preview", plan.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    let preview: Value = serde_json::from_str(&stdout(&preview)).unwrap();
    assert_eq!(
        preview["approval"],
        json!({"status": status, "may_run": false, "reason": reason})
    );
}

#[test]
fn an_approved_plan_is_approved_by_all_three_and_runs() {
    let (t, plan) = workspace_plan();
    approve(&t, &plan, &[]);
    let mut served = Served::start(&t);
    let s = served.call("plan_status", json!({"path": "p.json"}))["structuredContent"].clone();
    assert_eq!(s["status"], "approved", "{s}");
    assert_eq!(s["may_run"], true);
    assert_eq!(s["reason"], Value::Null);
    assert_eq!(s["approved_by"], "alice (claimed)");
    let preview = t.run(&["preview", plan.to_str().unwrap()]);
    assert!(
        stdout(&preview).contains("approval: approved by alice (claimed) (run may start it)"),
        "{}",
        stdout(&preview)
    );
    let out = t.run(&["run", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[test]
fn agree_on_pending() {
    let (t, plan) = workspace_plan();
    agree(
        &t,
        &plan,
        &[],
        "pending",
        3,
        "plan is not approved (pending review)",
    );
}

#[test]
fn agree_on_a_standing_rejection() {
    let (t, plan) = workspace_plan();
    let out = t.run(&["reject", plan.to_str().unwrap(), "--by", "bob"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    agree(&t, &plan, &[], "rejected", 3, "plan was rejected by bob");
}

#[test]
fn agree_on_an_approval_for_another_plan_id() {
    let (t, plan) = workspace_plan();
    approve(&t, &plan, &[]);
    edit_approval(&plan, |a| a["plan_id"] = json!("other"));
    agree(
        &t,
        &plan,
        &[],
        "not runnable",
        3,
        "approval is for plan_id \"other\"",
    );
}

#[test]
fn agree_on_a_plan_changed_since_approval() {
    let (t, plan) = workspace_plan();
    approve(&t, &plan, &[]);
    let mut text = std::fs::read_to_string(&plan).unwrap();
    text.push('\n');
    std::fs::write(&plan, text).unwrap();
    agree(
        &t,
        &plan,
        &[],
        "not runnable",
        3,
        "plan changed since it was approved",
    );
}

#[test]
fn agree_on_a_policy_changed_since_approval() {
    let (t, plan) = workspace_plan();
    approve(&t, &plan, &[]);
    t.file("acode-policy.json", r#"{"allow_commands": ["true"]}"#);
    agree(
        &t,
        &plan,
        &[],
        "not runnable",
        3,
        "policy changed since approval",
    );
}

#[test]
fn agree_on_an_approval_without_its_policy() {
    let (t, plan) = workspace_plan();
    approve(&t, &plan, &[]);
    edit_approval(&plan, |a| {
        a.as_object_mut().unwrap().remove("policy_sha256");
    });
    agree(
        &t,
        &plan,
        &[],
        "not runnable",
        3,
        "does not record the policy",
    );
}

#[test]
fn agree_on_an_unsigned_approval_while_a_key_is_set() {
    let (t, plan) = workspace_plan();
    approve(&t, &plan, &[]);
    agree(
        &t,
        &plan,
        &[("ACODE_APPROVAL_KEY", KEY)],
        "not runnable",
        3,
        "the approval is not signed",
    );
}

#[test]
fn agree_on_a_signature_under_another_key() {
    let (t, plan) = workspace_plan();
    approve(
        &t,
        &plan,
        &[("ACODE_APPROVAL_KEY", "another-key-entirely-0123456789abc")],
    );
    agree(
        &t,
        &plan,
        &[("ACODE_APPROVAL_KEY", KEY)],
        "not runnable",
        3,
        "signature does not match",
    );
}

#[test]
fn agree_on_a_signature_in_an_old_format() {
    let (t, plan) = workspace_plan();
    approve(&t, &plan, &[("ACODE_APPROVAL_KEY", KEY)]);
    edit_approval(&plan, |a| a["signature"] = json!("00ff00ff"));
    agree(
        &t,
        &plan,
        &[("ACODE_APPROVAL_KEY", KEY)],
        "not runnable",
        3,
        "signed in an older format",
    );
}

#[test]
fn agree_on_an_approval_file_that_is_not_json() {
    let (t, plan) = workspace_plan();
    std::fs::write(
        format!("{}.approval", plan.display()),
        "approved, trust me\n",
    )
    .unwrap();
    agree(
        &t,
        &plan,
        &[],
        "not runnable",
        3,
        "cannot use approval file",
    );
}

#[test]
fn agree_on_an_approval_file_that_cannot_be_read() {
    let (t, plan) = workspace_plan();
    std::fs::create_dir(format!("{}.approval", plan.display())).unwrap();
    agree(
        &t,
        &plan,
        &[],
        "not runnable",
        2,
        "cannot read approval file",
    );
}

#[test]
fn agree_on_an_mcp_server_the_approval_does_not_pin() {
    let (t, plan) = workspace_plan();
    t.file(
        "acode-policy.json",
        &json!({"mcp": {"servers": {"fx": {"command": ["acode-mcp-fixture", "handshake"],
                                           "tools": ["echo"], "confirm": false}}}})
        .to_string(),
    );
    approve(&t, &plan, &[]);
    edit_approval(&plan, |a| a["mcp"] = json!({}));
    agree(
        &t,
        &plan,
        &[],
        "not runnable",
        3,
        "MCP server fx is not pinned in the approval",
    );
}

#[test]
fn agree_on_a_skill_changed_since_approval() {
    let t = TestDir::new();
    t.file(".acode/skills/s/SKILL.md", "Do ${inputs.file}.\n");
    let plan = t.file(
        "p.json",
        &json!({"plan_id": "skill", "steps": [{"step_id": "fix", "tool": "agent", "arguments": {
            "skill": "s", "inputs": {"file": "src/lib.rs"}, "instruction": "fix it",
            "tools": ["file_read"]}}]})
        .to_string(),
    );
    approve(&t, &plan, &[]);
    t.file(
        ".acode/skills/s/SKILL.md",
        "Do ${inputs.file}, then delete everything.\n",
    );
    agree(
        &t,
        &plan,
        &[],
        "not runnable",
        3,
        "skill file .acode/skills/s/SKILL.md changed since the plan was approved",
    );
}
