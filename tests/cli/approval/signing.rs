//! Approvals that mean one thing (SPEC §3): bound to the effective policy, signed in an unambiguous
//! layout, with the signing key read once from a file or the environment.

use serde_json::json;

use crate::harness::*;

fn plan(t: &TestDir) -> std::path::PathBuf {
    t.file("a.txt", "hi");
    t.plan(
        "p.json",
        &json!({"plan_id": "sign", "steps": [
            {"step_id": "read", "tool": "file_read", "arguments": {"path": "a.txt"}}]}),
    )
}

#[test]
fn a_run_under_another_policy_is_refused_until_re_approved() {
    let t = TestDir::new();
    let p = plan(&t);
    let ps = p.to_str().unwrap();
    t.approve(&p);
    assert_eq!(approval_of(&t.root.join("p.json"))["policy_sha256"], "none");
    assert_eq!(code(&t.run(&[ps])), 0);

    // A policy file appears (as a command could write one): the approval no longer holds.
    t.file("acode-policy.json", r#"{"allow_commands": ["curl"]}"#);
    let out = t.run(&[ps]);
    assert_exit_with(&out, 3, "policy changed since approval: re-approve");
    // Re-approved under it, the plan runs; the approval records the policy's hash.
    t.approve(&p);
    let a = approval_of(&t.root.join("p.json"));
    assert_eq!(a["policy_sha256"].as_str().unwrap().len(), 64, "{a}");
    assert_eq!(code(&t.run(&[ps])), 0);
    // Whitespace and key order do not change the policy; a setting does.
    t.file(
        "acode-policy.json",
        "{ \"allow_commands\" : [ \"curl\" ] }\n",
    );
    assert_eq!(code(&t.run(&[ps])), 0);
    t.file(
        "acode-policy.json",
        r#"{"allow_commands": ["curl", "wget"]}"#,
    );
    assert_eq!(code(&t.run(&[ps])), 3);
    // --policy counts the same as the file in the workspace.
    std::fs::remove_file(t.ws.join("acode-policy.json")).unwrap();
    assert_eq!(code(&t.run(&[ps])), 3);
    let other = t.root.join("other-policy.json");
    std::fs::write(&other, r#"{"allow_commands": ["curl"]}"#).unwrap();
    assert_eq!(code(&t.run(&[ps, "--policy", other.to_str().unwrap()])), 0);
}

#[test]
fn approvals_without_a_policy_or_with_an_old_signature_ask_for_re_approval() {
    let t = TestDir::new();
    let p = plan(&t);
    let ps = p.to_str().unwrap();
    let key = "approval-signing-key-0123456789";
    t.approve(&p);
    // As written by an older acode-run: no policy recorded.
    let mut a = approval_of(&t.root.join("p.json"));
    a.as_object_mut().unwrap().remove("policy_sha256");
    std::fs::write(t.root.join("p.json.approval"), a.to_string()).unwrap();
    let out = t.run(&[ps]);
    assert_eq!(code(&out), 3);
    assert!(stderr(&out).contains("re-approve"), "{}", stderr(&out));

    // Signed the old way (bare hex): refused with the reason, not as a forgery.
    let mut c = t.cmd();
    c.args(["approve", ps, "--by", "alice"])
        .env("ACODE_APPROVAL_KEY", key);
    assert_eq!(code(&c.output().unwrap()), 0);
    let mut a = approval_of(&t.root.join("p.json"));
    let sig = a["signature"].as_str().unwrap().to_string();
    a["signature"] = json!(sig.trim_start_matches("hmac-sha256-v2:"));
    std::fs::write(t.root.join("p.json.approval"), a.to_string()).unwrap();
    let out = t
        .cmd()
        .arg(ps)
        .env("ACODE_APPROVAL_KEY", key)
        .output()
        .unwrap();
    assert_eq!(code(&out), 3);
    assert!(stderr(&out).contains("older format"), "{}", stderr(&out));
    assert!(stderr(&out).contains("re-approve"), "{}", stderr(&out));
}

#[test]
fn the_approval_key_can_come_from_a_file() {
    let t = TestDir::new();
    let p = plan(&t);
    let ps = p.to_str().unwrap();
    let key_file = t.root.join("approval.key");
    std::fs::write(&key_file, "file-held-approval-key-42\n").unwrap();
    let with_file = |args: &[&str]| {
        t.cmd()
            .args(args)
            .env("ACODE_APPROVAL_KEY_FILE", &key_file)
            .output()
            .unwrap()
    };
    let out = with_file(&["approve", ps, "--by", "alice"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(approval_of(&t.root.join("p.json"))["signature"].is_string());
    assert_eq!(code(&with_file(&[ps])), 0);
    // The same key given directly verifies it (the trailing newline was not part of the key)...
    let out = t
        .cmd()
        .arg(ps)
        .env("ACODE_APPROVAL_KEY", "file-held-approval-key-42")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // ...another key does not.
    let out = t
        .cmd()
        .arg(ps)
        .env("ACODE_APPROVAL_KEY", "another-key-entirely")
        .output()
        .unwrap();
    assert_eq!(code(&out), 3);

    // Unusable key files are named with their variable, and nothing runs.
    for (path, why) in [
        (t.root.join("missing.key"), "cannot open"),
        (t.root.clone(), "not a regular file"),
    ] {
        let out = t
            .cmd()
            .arg(ps)
            .env("ACODE_APPROVAL_KEY_FILE", &path)
            .output()
            .unwrap();
        assert_eq!(code(&out), 2, "{}", stderr(&out));
        assert!(
            stderr(&out).contains("ACODE_APPROVAL_KEY_FILE") && stderr(&out).contains(why),
            "{}",
            stderr(&out)
        );
    }
    let out = t
        .cmd()
        .args(["validate", ps])
        .env("ACODE_LLM_API_KEY_FILE", t.root.join("nope"))
        .output()
        .unwrap();
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("ACODE_LLM_API_KEY_FILE"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_llm_key_from_a_file_is_sent_and_never_recorded() {
    use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};
    let t = TestDir::new();
    let key = "llm-file-key-abcdef-0987";
    let key_file = t.root.join("llm.key");
    std::fs::write(&key_file, format!("{key}\n")).unwrap();
    t.file("notes.txt", &format!("the key is {key}\n"));
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_tool_calls(&[("file_read", json!({"path": "notes.txt"}))]),
        ScriptedResponse::chat_text(&format!("I saw {key}")),
    ]);
    let p = t.plan(
        "agent.json",
        &json!({"plan_id": "k", "steps": [{"step_id": "a", "tool": "agent", "arguments": {
            "instruction": "read notes.txt", "tools": ["file_read"], "max_turns": 3}}]}),
    );
    let url = server.url();
    let out = t
        .cmd()
        .args(["run", "--approve", p.to_str().unwrap(), "--llm-url", &url])
        .args(["--model", "m", "--jsonl"])
        .env("ACODE_LLM_API_KEY_FILE", &key_file)
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[0].header("authorization"),
        Some(format!("Bearer {key}").as_str())
    );
    for r in &requests {
        assert!(!r.raw_body.contains(key), "{}", r.raw_body);
    }
    assert!(!stdout(&out).contains(key) && !stderr(&out).contains(key));
    let db = std::fs::read(t.ws.join(".acode/executions.db")).unwrap();
    assert!(!db.windows(key.len()).any(|w| w == key.as_bytes()));
}
