//! Approvals signed with approvers' own SSH keys (issue 42): real keys made by `ssh-keygen` in
//! each test (ed25519, ECDSA, RSA), signing through `ssh-keygen` and a real `ssh-agent`, and the
//! refusals a security team relies on — an expired, not yet valid, removed or wrong-namespace
//! key, too few distinct approvers, a principal reserved for plans that reach further, an HMAC
//! approval where SSH is required, a forged or edited approval.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use crate::harness::*;

/// A key pair made by `ssh-keygen` in `dir`: (private key path, public key line).
pub fn keygen(dir: &Path, name: &str, kind: &[&str]) -> (PathBuf, String) {
    let key = dir.join(name);
    let out = Command::new("ssh-keygen")
        .args(["-q", "-N", "", "-C", name, "-f"])
        .arg(&key)
        .args(kind)
        .output()
        .expect("ssh-keygen is installed (scripts/test.sh installs openssh-client)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    (key, public.trim().to_string())
}

/// An ed25519 key.
pub fn ed25519(dir: &Path, name: &str) -> (PathBuf, String) {
    keygen(dir, name, &["-t", "ed25519"])
}

/// A workspace whose policy requires SSH signatures from `allowed_signers` (its lines given),
/// with `extra` merged into the `approvals` section, and a one-step plan beside it.
pub fn ssh_workspace(t: &TestDir, signers: &[String], extra: serde_json::Value) -> PathBuf {
    std::fs::create_dir_all(t.root.join("keys")).unwrap();
    t.file("allowed_signers", &(signers.join("\n") + "\n"));
    let mut approvals = json!({"allowed_signers": "allowed_signers"});
    if let (Some(a), Some(e)) = (approvals.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            a.insert(k.clone(), v.clone());
        }
    }
    t.file(
        "acode-policy.json",
        &json!({ "approvals": approvals }).to_string(),
    );
    simple_plan(t)
}

/// `approve PLAN --sign KEY` (and `extra` arguments).
pub fn sign(t: &TestDir, plan: &Path, key: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "approve",
        plan.to_str().unwrap(),
        "--quiet",
        "--sign",
        key.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    t.run(&args)
}

fn keys(t: &TestDir) -> PathBuf {
    let k = t.root.join("keys");
    std::fs::create_dir_all(&k).unwrap();
    k
}

#[test]
fn keys_of_each_type_sign_approvals_that_run_under_the_verified_principal() {
    for (kind, algorithm) in [
        (&["-t", "ed25519"][..], "ssh-ed25519"),
        (&["-t", "ecdsa", "-b", "256"][..], "ecdsa-sha2-nistp256"),
        (&["-t", "ecdsa", "-b", "384"][..], "ecdsa-sha2-nistp384"),
        (&["-t", "ecdsa", "-b", "521"][..], "ecdsa-sha2-nistp521"),
        (&["-t", "rsa", "-b", "2048"][..], "ssh-rsa"),
    ] {
        let t = TestDir::new();
        let (key, public) = keygen(&keys(&t), "alice", kind);
        let plan = ssh_workspace(&t, &[format!("alice@example.com {public}")], json!({}));
        let out = sign(&t, &plan, &key, &[]);
        assert_eq!(code(&out), 0, "{algorithm}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("by alice@example.com"),
            "{}",
            stderr(&out)
        );
        let a = approval_of(&plan);
        assert_eq!(a["decided_by"], "alice@example.com");
        assert_eq!(a["ssh_signatures"].as_array().unwrap().len(), 1);
        // The run says who approved, proven.
        let ps = plan.to_str().unwrap();
        let junit = t.root.join("junit.xml");
        let out = t.run(&[ps, "--jsonl", "--junit", junit.to_str().unwrap()]);
        assert_eq!(code(&out), 0, "{algorithm}: {}", stderr(&out));
        let started = &events(&out)[0];
        assert_eq!(started["approval"]["approver"], "alice@example.com");
        assert_eq!(started["approval"]["scheme"], "ssh");
        assert_eq!(started["approval"]["standing"], "verified");
        let xml = std::fs::read_to_string(&junit).unwrap();
        assert!(
            xml.contains(r#"<property name="approved_by" value="alice@example.com"/>"#),
            "{xml}"
        );
        assert!(
            xml.contains(r#"<property name="approval_scheme" value="ssh"/>"#),
            "{xml}"
        );
        let run_id = started["run_id"].as_str().unwrap();
        let shown: serde_json::Value =
            serde_json::from_str(&stdout(&t.run(&["show", run_id, "--json"]))).unwrap();
        assert_eq!(shown["approval"]["scheme"], "ssh");
        assert_eq!(shown["approval"]["signers"][0]["algorithm"], algorithm);
        let decisions = shown["decisions"].as_array().unwrap();
        assert_eq!(decisions[0]["scheme"], "ssh");
        assert!(
            decisions[0]["signer_key"]
                .as_str()
                .unwrap()
                .starts_with("SHA256:")
        );
    }
}

#[test]
fn an_approval_is_signed_through_a_real_ssh_agent_holding_the_private_half() {
    let t = TestDir::new();
    let (key, public) = ed25519(&keys(&t), "alice");
    let plan = ssh_workspace(&t, &[format!("alice@example.com {public}")], json!({}));
    let agent = SshAgent::start(&t.root);
    agent.add(&key);
    // Only the public half stays on disk: the private one is in the agent alone.
    std::fs::remove_file(&key).unwrap();
    let public_file = key.with_extension("pub");
    let out = t
        .cmd()
        .args(["approve", plan.to_str().unwrap(), "--quiet", "--sign"])
        .arg(&public_file)
        .env("SSH_AUTH_SOCK", &agent.socket)
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(code(&t.run(&[plan.to_str().unwrap()])), 0);
    // Without the agent the same public key cannot sign (control: the agent did the signing).
    let out = t
        .cmd()
        .args(["approve", plan.to_str().unwrap(), "--quiet", "--sign"])
        .arg(&public_file)
        .env_remove("SSH_AUTH_SOCK")
        .output()
        .unwrap();
    assert_exit_with(&out, 2, "cannot sign with");
}

/// A private `ssh-agent`, killed when dropped.
pub struct SshAgent {
    pub socket: PathBuf,
    pid: String,
}

impl SshAgent {
    pub fn start(dir: &Path) -> SshAgent {
        let socket = dir.join(format!("agent-{}.sock", std::process::id()));
        let out = Command::new("ssh-agent")
            .arg("-a")
            .arg(&socket)
            .arg("-s")
            .output()
            .unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        let pid = text
            .split(';')
            .find_map(|p| p.trim().strip_prefix("SSH_AGENT_PID="))
            .unwrap()
            .to_string();
        SshAgent { socket, pid }
    }

    pub fn add(&self, key: &Path) {
        let out = Command::new("ssh-add")
            .arg("-q")
            .arg(key)
            .env("SSH_AUTH_SOCK", &self.socket)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for SshAgent {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(&self.pid).status();
        let _ = std::fs::remove_file(&self.socket);
    }
}

#[test]
fn distinct_approvers_are_counted_and_a_second_signature_keeps_the_first() {
    let t = TestDir::new();
    let k = keys(&t);
    let (alice, alice_pub) = ed25519(&k, "alice");
    let (alice2, alice2_pub) = keygen(&k, "alice2", &["-t", "ecdsa"]);
    let (bob, bob_pub) = ed25519(&k, "bob");
    let plan = ssh_workspace(
        &t,
        &[
            format!("alice@example.com {alice_pub}"),
            format!("alice@example.com {alice2_pub}"),
            format!("bob@example.com {bob_pub}"),
        ],
        json!({"required": 2}),
    );
    let ps = plan.to_str().unwrap();
    assert_eq!(code(&sign(&t, &plan, &alice, &[])), 0);
    assert_exit_with(
        &t.run(&[ps]),
        3,
        "the policy requires 2 distinct approvers, but 1 (alice@example.com) signed",
    );
    // Alice's second key is still Alice.
    assert_eq!(code(&sign(&t, &plan, &alice2, &[])), 0);
    assert_eq!(
        approval_of(&plan)["ssh_signatures"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_exit_with(&t.run(&[ps]), 3, "requires 2 distinct approvers");
    // Bob's signature is added beside hers, and the plan runs.
    let out = sign(&t, &plan, &bob, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let a = approval_of(&plan);
    assert_eq!(a["ssh_signatures"].as_array().unwrap().len(), 3);
    assert_eq!(a["decided_by"], "alice@example.com, bob@example.com");
    let out = t.run(&[ps]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("approved by alice@example.com, bob@example.com (verified"),
        "{}",
        stderr(&out)
    );
    // Signing again with the same key replaces that key's signature, never duplicates it.
    assert_eq!(code(&sign(&t, &plan, &bob, &[])), 0);
    assert_eq!(
        approval_of(&plan)["ssh_signatures"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    // An edited plan voids every signature: a new approval starts from none.
    std::fs::write(&plan, std::fs::read_to_string(&plan).unwrap() + " ").unwrap();
    assert_eq!(code(&sign(&t, &plan, &bob, &[])), 0);
    assert_eq!(
        approval_of(&plan)["ssh_signatures"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_exit_with(&t.run(&[ps]), 3, "but 1 (bob@example.com) signed");
}

#[test]
fn expired_not_yet_valid_removed_and_wrong_namespace_keys_are_refused_saying_which() {
    let t = TestDir::new();
    let (alice, public) = ed25519(&keys(&t), "alice");
    let plan = ssh_workspace(&t, &[format!("alice@example.com {public}")], json!({}));
    let ps = plan.to_str().unwrap();
    assert_eq!(code(&sign(&t, &plan, &alice, &[])), 0);
    assert_eq!(code(&t.run(&[ps])), 0);
    for (line, why) in [
        (
            format!("alice@example.com valid-before=\"20200101Z\" {public}"),
            "has expired: valid-before 2020-01-01 00:00:00 UTC (allowed_signers, line 1)",
        ),
        (
            format!("alice@example.com valid-after=\"29990101Z\" {public}"),
            "is not valid yet: valid-after 2999-01-01 00:00:00 UTC",
        ),
        (
            format!("alice@example.com namespaces=\"git,file\" {public}"),
            "may not sign approvals: its namespaces= option does not include acode-run-approval",
        ),
        (
            format!("alice@example.com cert-authority {public}"),
            "listed only as a cert-authority",
        ),
        (
            // Removed: another key only.
            ed25519(&keys(&t), "bob")
                .1
                .replace("ssh-ed25519", "bob@example.com ssh-ed25519"),
            "is not listed in allowed_signers (never added, or removed)",
        ),
    ] {
        t.file("allowed_signers", &(line + "\n"));
        let out = t.run(&[ps]);
        assert_exit_with(&out, 3, why);
        assert!(stderr(&out).contains("SHA256:"), "{}", stderr(&out));
    }
    // Still valid at its boundary's other side: a window around now lets it run.
    t.file(
        "allowed_signers",
        &format!(
            "alice@example.com valid-after=\"20200101Z\",valid-before=\"29990101Z\" {public}\n"
        ),
    );
    assert_eq!(code(&t.run(&[ps])), 0);

    // A signature made for another namespace is refused when attached, naming both.
    let message = t.root.join("msg");
    assert_eq!(
        code(&t.run(&["approve", ps, "--message", message.to_str().unwrap()])),
        0
    );
    let out = Command::new("ssh-keygen")
        .args(["-Y", "sign", "-n", "git", "-f"])
        .arg(&alice)
        .arg(&message)
        .output()
        .unwrap();
    assert!(out.status.success());
    let sig = t.root.join("msg.sig");
    let out = t.run(&[
        "approve",
        ps,
        "--quiet",
        "--add-signature",
        sig.to_str().unwrap(),
    ]);
    assert_exit_with(
        &out,
        3,
        "signed for namespace \"git\", not \"acode-run-approval\"",
    );
}

#[test]
fn the_message_file_is_signed_by_plain_ssh_keygen_and_attached() {
    let t = TestDir::new();
    let (alice, public) = ed25519(&keys(&t), "alice");
    let plan = ssh_workspace(&t, &[format!("alice@example.com {public}")], json!({}));
    let ps = plan.to_str().unwrap();
    let message = t.root.join("approve-p.txt");
    let out = t.run(&["approve", ps, "--message", message.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains("ssh-keygen -Y sign -n acode-run-approval"));
    // Nothing was decided.
    assert!(!t.root.join("p.json.approval").exists());
    let text = std::fs::read_to_string(&message).unwrap();
    let sha = acode_run::util::sha256_hex(&std::fs::read(&plan).unwrap());
    assert_eq!(
        text.lines().take(4).collect::<Vec<_>>(),
        [
            "acode-run approval message v1",
            "plan_id \"p\"",
            "status \"approved\"",
            &format!("plan_sha256 \"{sha}\""),
        ]
    );
    // The approver's laptop: plain ssh-keygen, no acode-run.
    let out = Command::new("ssh-keygen")
        .args(["-Y", "sign", "-n", "acode-run-approval", "-f"])
        .arg(&alice)
        .arg(&message)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sig = t.root.join("approve-p.txt.sig");
    // ssh-keygen itself agrees the signature is Alice's under the same allowed_signers file.
    let verify = Command::new("ssh-keygen")
        .args([
            "-Y",
            "verify",
            "-n",
            "acode-run-approval",
            "-I",
            "alice@example.com",
            "-f",
        ])
        .arg(t.ws.join("allowed_signers"))
        .arg("-s")
        .arg(&sig)
        .stdin(std::fs::File::open(&message).unwrap())
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stderr)
    );
    let out = t.run(&[
        "approve",
        ps,
        "--quiet",
        "--add-signature",
        sig.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(code(&t.run(&[ps])), 0);
    // A signature over the message of another version of the plan is refused when attached.
    std::fs::write(&plan, std::fs::read_to_string(&plan).unwrap() + "\n").unwrap();
    let out = t.run(&[
        "approve",
        ps,
        "--quiet",
        "--add-signature",
        sig.to_str().unwrap(),
    ]);
    assert_exit_with(&out, 3, "does not match this approval");
    assert_exit_with(&t.run(&[ps]), 3, "plan changed since it was approved");
}

#[test]
fn by_cannot_claim_another_principal_and_a_moved_key_shows_its_new_owner() {
    let t = TestDir::new();
    let (alice, public) = ed25519(&keys(&t), "alice");
    let plan = ssh_workspace(&t, &[format!("alice@example.com {public}")], json!({}));
    let ps = plan.to_str().unwrap();
    let out = sign(&t, &plan, &alice, &["--by", "bob@example.com"]);
    assert_exit_with(&out, 2, "--by \"bob@example.com\" is not the signer");
    assert!(!t.root.join("p.json.approval").exists());
    assert_eq!(
        code(&sign(&t, &plan, &alice, &["--by", "alice@example.com"])),
        0
    );
    // The key moves to another principal: the run names who the file says holds it now.
    t.file("allowed_signers", &format!("carol@example.com {public}\n"));
    let out = t.run(&[ps, "--jsonl"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(events(&out)[0]["approval"]["approver"], "carol@example.com");
}

#[test]
fn plans_that_reach_further_need_a_reserved_principal() {
    let t = TestDir::new();
    let k = keys(&t);
    let (alice, alice_pub) = ed25519(&k, "alice");
    let (sec, sec_pub) = ed25519(&k, "sec");
    t.file(
        "allowed_signers",
        &format!("alice@example.com {alice_pub}\nsecurity@example.com {sec_pub}\n"),
    );
    let plan = simple_plan(&t);
    let ps = plan.to_str().unwrap();
    let policy = |network: bool| {
        let mut p = json!({"approvals": {"allowed_signers": "allowed_signers",
            "require_principal": {"network": ["security@example.com"],
                                  "env_passthrough": ["security@example.com"]}}});
        if network {
            p["network"] = json!({"allow": ["example.com"]});
        }
        t.file("acode-policy.json", &p.to_string());
    };
    // No network: Alice alone may approve.
    policy(false);
    assert_eq!(code(&sign(&t, &plan, &alice, &[])), 0);
    assert_eq!(code(&t.run(&[ps])), 0);
    // With a network host allowed, Alice's approval is not enough...
    policy(true);
    assert_eq!(code(&sign(&t, &plan, &alice, &[])), 0);
    assert_exit_with(
        &t.run(&[ps]),
        3,
        "the policy allows network hosts, so the policy requires one of security@example.com to approve (approvals.require_principal.network); signed by: alice@example.com",
    );
    // ...security's is.
    assert_eq!(code(&sign(&t, &plan, &sec, &[])), 0);
    assert_eq!(code(&t.run(&[ps])), 0);
}

#[test]
fn an_hmac_approval_never_runs_where_ssh_is_required_nor_the_reverse() {
    let t = TestDir::new();
    let (alice, public) = ed25519(&keys(&t), "alice");
    let plan = ssh_workspace(&t, &[format!("alice@example.com {public}")], json!({}));
    let ps = plan.to_str().unwrap();
    let hmac = [("ACODE_APPROVAL_KEY", "shared-approval-key-0123456789")];
    // Without --sign, approving under an SSH policy is refused (and nothing is written).
    let out = t.run_with(&["approve", ps, "--quiet", "--by", "alice"], &hmac);
    assert_exit_with(&out, 2, "the policy requires approvers' SSH signatures");
    assert!(!t.root.join("p.json.approval").exists());
    // An approval carrying both: the SSH signature is what counts.
    let mut c = t.cmd_with(&hmac);
    c.args(["approve", ps, "--quiet", "--sign", alice.to_str().unwrap()]);
    assert_eq!(code(&c.output().unwrap()), 0);
    assert_eq!(code(&t.run(&[ps])), 0);
    // The SSH signatures stripped, the HMAC still verifies (it does not cover them), but the
    // policy requires SSH: refused, saying why.
    let mut a = approval_of(&plan);
    a.as_object_mut().unwrap().remove("ssh_signatures");
    std::fs::write(t.root.join("p.json.approval"), a.to_string()).unwrap();
    assert_exit_with(
        &t.run_with(&[ps], &hmac),
        3,
        "signed only with the shared HMAC key (ACODE_APPROVAL_KEY), but the policy requires approvers' SSH signatures",
    );
    // The reverse: SSH-signed without an allowed_signers policy, run where the HMAC key is in force.
    let t = TestDir::new();
    let (alice, _) = ed25519(&keys(&t), "alice");
    let plan = simple_plan(&t);
    let ps = plan.to_str().unwrap();
    assert_eq!(code(&sign(&t, &plan, &alice, &[])), 0);
    assert_eq!(code(&t.run(&[ps])), 0);
    assert_exit_with(
        &t.run_with(&[ps], &hmac),
        3,
        "the approval is signed with SSH keys, but this policy names no approvals.allowed_signers",
    );
}

#[test]
fn a_plan_edited_with_its_approvals_hash_is_refused_under_either_key() {
    // The end-to-end forgery: the attacker edits the plan and writes its new hash into the
    // approval; only the signature stands in the way.
    let t = TestDir::new();
    let (alice, public) = ed25519(&keys(&t), "alice");
    let plan = ssh_workspace(&t, &[format!("alice@example.com {public}")], json!({}));
    let ps = plan.to_str().unwrap();
    assert_eq!(code(&sign(&t, &plan, &alice, &[])), 0);
    let forge = |t: &TestDir, plan: &Path| {
        let evil = json!({"plan_id": "p", "steps": [
            {"step_id": "w", "tool": "file_write", "arguments": {"path": "evil.txt", "contents": "pwned"}}]});
        std::fs::write(plan, serde_json::to_string_pretty(&evil).unwrap()).unwrap();
        let mut a = approval_of(plan);
        a["plan_sha256"] = json!(acode_run::util::sha256_hex(&std::fs::read(plan).unwrap()));
        std::fs::write(t.root.join("p.json.approval"), a.to_string()).unwrap();
    };
    forge(&t, &plan);
    assert_exit_with(&t.run(&[ps]), 3, "does not match this approval");
    assert!(!t.ws.join("evil.txt").exists());
    // The same under the HMAC key.
    let t = TestDir::new();
    let plan = simple_plan(&t);
    let ps = plan.to_str().unwrap();
    let hmac = [("ACODE_APPROVAL_KEY", "shared-approval-key-0123456789")];
    t.approve_with(&plan, &hmac);
    assert_eq!(code(&t.run_with(&[ps], &hmac)), 0);
    std::fs::remove_file(t.ws.join("a.txt")).unwrap();
    forge(&t, &plan);
    assert_exit_with(&t.run_with(&[ps], &hmac), 3, "signature does not match");
    assert!(!t.ws.join("evil.txt").exists());
    // Control: without a key the forged hash is all a run checks, and the edited plan runs —
    // the test above fails only because the signature held.
    assert_eq!(code(&t.run(&[ps])), 0);
    assert!(t.ws.join("evil.txt").exists());
}

#[test]
fn damaged_signatures_and_allowed_signers_files_are_refused_naming_the_problem() {
    let t = TestDir::new();
    let (alice, public) = ed25519(&keys(&t), "alice");
    let plan = ssh_workspace(&t, &[format!("alice@example.com {public}")], json!({}));
    let ps = plan.to_str().unwrap();
    assert_eq!(code(&sign(&t, &plan, &alice, &[])), 0);
    let good = approval_of(&plan);
    let sig = good["ssh_signatures"][0]["signature"]
        .as_str()
        .unwrap()
        .to_string();
    for (edit, why) in [
        (
            "not a signature".to_string(),
            "not a readable SSH signature",
        ),
        (
            sig.replace("U1NIU0lH", "U1NIU0lI"),
            "not a readable SSH signature",
        ),
        (
            // One base64 character of the signature blob's tail changed.
            {
                let mut lines: Vec<String> = sig.lines().map(str::to_string).collect();
                let i = lines.len() - 2;
                let mut chars: Vec<char> = lines[i].chars().collect();
                let j = chars.len() / 2;
                chars[j] = if chars[j] == 'A' { 'B' } else { 'A' };
                lines[i] = chars.into_iter().collect();
                lines.join("\n")
            },
            "signature 1: ",
        ),
    ] {
        let mut a = good.clone();
        a["ssh_signatures"][0]["signature"] = json!(edit);
        std::fs::write(t.root.join("p.json.approval"), a.to_string()).unwrap();
        let out = t.run(&[ps]);
        assert_eq!(code(&out), 3, "{}", stderr(&out));
        assert!(
            stderr(&out).contains("no signature of the approval counts"),
            "{}",
            stderr(&out)
        );
        let _ = why;
    }
    std::fs::write(t.root.join("p.json.approval"), good.to_string()).unwrap();
    assert_eq!(code(&t.run(&[ps])), 0);
    // A truncated approval file, an unknown field in a signature entry.
    let text = good.to_string();
    std::fs::write(t.root.join("p.json.approval"), &text[..text.len() / 2]).unwrap();
    assert_exit_with(&t.run(&[ps]), 3, "cannot use approval file");
    let mut a = good.clone();
    a["ssh_signatures"][0]["principal"] = json!("mallory");
    std::fs::write(t.root.join("p.json.approval"), a.to_string()).unwrap();
    assert_exit_with(&t.run(&[ps]), 3, "unknown field `principal`");
    std::fs::write(t.root.join("p.json.approval"), good.to_string()).unwrap();
    // allowed_signers: an unknown key type, a bad option, a missing file — usage errors (2).
    for (text, why) in [
        (
            format!(
                "alice@example.com {}",
                public.replace("ssh-ed25519", "ssh-dss")
            ),
            "line 1: unknown key type \"ssh-dss\"",
        ),
        (
            format!("alice@example.com verify-required,valid-after=\"x\" {public}"),
            "line 1: unknown option \"verify-required\"",
        ),
    ] {
        t.file("allowed_signers", &text);
        assert_exit_with(&t.run(&[ps]), 2, why);
    }
    std::fs::remove_file(t.ws.join("allowed_signers")).unwrap();
    assert_exit_with(&t.run(&[ps]), 2, "allowed_signers file allowed_signers");
    // Only the one run with the intact approval started; none of these did.
    assert_eq!(q::<i64>(&t.db(), "SELECT COUNT(*) FROM runs"), 1);
}

#[test]
fn a_signed_rejection_stands_and_names_its_signer() {
    let t = TestDir::new();
    let (alice, public) = ed25519(&keys(&t), "alice");
    let plan = ssh_workspace(&t, &[format!("alice@example.com {public}")], json!({}));
    let ps = plan.to_str().unwrap();
    let out = t.run(&[
        "reject",
        ps,
        "--sign",
        alice.to_str().unwrap(),
        "--reason",
        "deletes the wrong file",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let a = approval_of(&plan);
    assert_eq!(a["status"], "rejected");
    assert_eq!(a["decided_by"], "alice@example.com");
    assert_exit_with(&t.run(&[ps]), 3, "rejected by alice@example.com");
    // An unsigned rejection is allowed (it grants nothing), with the name claimed.
    let out = t.run(&["reject", ps, "--by", "bob"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[test]
fn the_allowed_signers_file_is_protected_from_the_plans_own_writes() {
    let t = TestDir::new();
    let (alice, public) = ed25519(&keys(&t), "alice");
    t.file("allowed_signers", &format!("alice@example.com {public}\n"));
    t.file(
        "acode-policy.json",
        &json!({"approvals": {"allowed_signers": "allowed_signers"}}).to_string(),
    );
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "p", "steps": [{"step_id": "w", "tool": "file_write",
            "arguments": {"path": "allowed_signers", "contents": "mallory@example.com ssh-ed25519 AAAA\n"}}]}),
    );
    assert_eq!(code(&sign(&t, &plan, &alice, &[])), 0);
    let out = t.run(&[plan.to_str().unwrap()]);
    assert_eq!(code(&out), 32, "{}", stderr(&out));
    assert_eq!(
        t.read("allowed_signers"),
        format!("alice@example.com {public}\n")
    );
}

#[test]
fn a_policy_shipped_beside_the_plan_reads_its_allowed_signers_beside_itself() {
    // One approval, many repositories (issue 48): the repository the plan runs in must not
    // choose who approves. Its own `allowed_signers` gives Alice's key the reserved principal.
    let t = TestDir::new();
    let k = keys(&t);
    let (alice, alice_pub) = ed25519(&k, "alice");
    let (_, sec_pub) = ed25519(&k, "sec");
    let ship = t.root.join("ship");
    std::fs::create_dir_all(&ship).unwrap();
    let policy = json!({"approvals": {"allowed_signers": "allowed_signers",
        "require_principal": {"always": ["security@example.com"]}}})
    .to_string();
    std::fs::write(ship.join("policy.json"), &policy).unwrap();
    std::fs::write(
        ship.join("allowed_signers"),
        format!("alice@example.com {alice_pub}\nsecurity@example.com {sec_pub}\n"),
    )
    .unwrap();
    let plan = simple_plan(&t);
    let ps = plan.to_str().unwrap();
    let pol = ship.join("policy.json");
    let pol = pol.to_str().unwrap();
    let out = t.run(&[
        "approve",
        ps,
        "--quiet",
        "--policy",
        pol,
        "--sign",
        alice.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // The repository's forged file, where a workspace-relative path would find it.
    t.file(
        "allowed_signers",
        &format!("security@example.com {alice_pub}\n"),
    );
    let out = t.run(&[ps, "--policy", pol]);
    assert_exit_with(&out, 3, "requires one of security@example.com to approve");
    assert!(!t.ws.join("a.txt").exists());
    // Control: the same policy inside the workspace does read the workspace's file, and the
    // forged line would then pass — what the shipped policy is protected from.
    t.file("acode-policy.json", &policy);
    assert_eq!(code(&sign(&t, &plan, &alice, &[])), 0);
    let out = t.run(&[ps]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}
