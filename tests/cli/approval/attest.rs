//! Attestations of runs (issue 42): `run --attest`, `attest RUN_ID`, and `verify` — by acode-run
//! and by the in-toto project's own Python libraries — then each part tampered with.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use base64::Engine as _;
use serde_json::{Value, json};

use super::ssh::{ed25519, keygen, sign, ssh_workspace};
use crate::harness::*;

/// A workspace whose approval is SSH-signed by Alice, with a plan that writes a file with a tool
/// and one with a command, and leaves an ignored file and one it only reads.
fn attested_workspace(t: &TestDir) -> (PathBuf, PathBuf) {
    let keys = t.root.join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    let (alice, public) = ed25519(&keys, "alice");
    ssh_workspace(t, &[format!("alice@example.com {public}")], json!({}));
    t.file(".gitignore", "build/\n");
    t.file("untouched.txt", "before the run\n");
    // Old enough that the coarse file clock cannot blur it with the run's start.
    std::thread::sleep(std::time::Duration::from_millis(100));
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "attested", "steps": [
            {"step_id": "write", "tool": "file_write", "arguments": {"path": "src/out.txt", "contents": "written\n"}},
            {"step_id": "cmd", "tool": "run_command", "arguments": {"argv": ["cp", "src/out.txt", "copy.txt"]}},
            {"step_id": "ignored", "tool": "file_write", "arguments": {"path": "build/cache.bin", "contents": "x"}},
            {"step_id": "read", "tool": "file_read", "arguments": {"path": "untouched.txt"}}
        ]}),
    );
    let mut policy: Value =
        serde_json::from_str(&std::fs::read_to_string(t.ws.join("acode-policy.json")).unwrap())
            .unwrap();
    policy["allow_commands"] = json!(["cp"]);
    policy["auto_approve_commands"] = json!(["cp"]);
    t.file("acode-policy.json", &policy.to_string());
    let out = sign(t, &plan, &alice, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    (plan, keys)
}

/// The CI's attestation key: an OpenSSH ed25519 key made by ssh-keygen.
fn ci_key(keys: &Path) -> (PathBuf, PathBuf) {
    let (key, _) = ed25519(keys, "ci");
    (key.clone(), key.with_extension("pub"))
}

fn verify(t: &TestDir, att: &Path, key: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "verify",
        att.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    t.run(&args)
}

fn payload(att: &Path) -> Value {
    let env: Value = serde_json::from_str(&std::fs::read_to_string(att).unwrap()).unwrap();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(env["payload"].as_str().unwrap())
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[test]
fn a_run_attests_what_it_wrote_and_verify_checks_each_part() {
    let t = TestDir::new();
    let (plan, keys) = attested_workspace(&t);
    let (ci, ci_pub) = ci_key(&keys);
    let att = t.root.join("run.intoto.json");
    let junit = t.root.join("junit.xml");
    let out = t.run_with(
        &[
            plan.to_str().unwrap(),
            "--attest",
            att.to_str().unwrap(),
            "--junit",
            junit.to_str().unwrap(),
        ],
        &[("ACODE_ATTEST_KEY_FILE", ci.to_str().unwrap())],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("attestation of run"),
        "{}",
        stderr(&out)
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains(&format!(
            "<property name=\"attestation\" value=\"{}",
            att.display()
        )),
        "{xml}"
    );

    let statement = payload(&att);
    assert_eq!(statement["_type"], "https://in-toto.io/Statement/v1");
    assert_eq!(
        statement["predicateType"],
        "https://acode-run.dev/attestation/run/v1"
    );
    // Subjects: what the run created or changed, with their hashes now; not the ignored file,
    // not the one it only read.
    let names: Vec<&str> = statement["subject"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["copy.txt", "src/out.txt"]);
    assert_eq!(
        statement["subject"][1]["digest"]["sha256"],
        acode_run::util::sha256_hex(b"written\n")
    );
    let p = &statement["predicate"];
    assert_eq!(
        p["plan"]["sha256"],
        acode_run::util::sha256_hex(&std::fs::read(&plan).unwrap())
    );
    assert_eq!(p["approval"]["scheme"], "ssh");
    assert_eq!(p["approval"]["approver"], "alice@example.com");
    assert_eq!(p["policy"]["sha256"].as_str().unwrap().len(), 64);
    assert_eq!(p["run"]["exit_code"], 0);
    assert_eq!(p["steps"].as_array().unwrap().len(), 4);
    let programs = p["programs"].as_array().unwrap();
    assert_eq!(programs.len(), 1, "{programs:?}");
    assert!(programs[0]["path"].as_str().unwrap().ends_with("/cp"));
    let cp = std::fs::read(programs[0]["path"].as_str().unwrap()).unwrap();
    assert_eq!(programs[0]["sha256"], acode_run::util::sha256_hex(&cp));
    assert!(p["sandbox"]["mode"].is_string());
    assert_matches_predicate_schema(p);

    // Everything holds.
    let allowed = t.ws.join("allowed_signers");
    let ws = t.ws.to_str().unwrap();
    let out = verify(
        &t,
        &att,
        &ci_pub,
        &[
            "--workspace",
            ws,
            "--allowed-signers",
            allowed.to_str().unwrap(),
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("approval: verified against"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("subjects: all 2 file(s) match"),
        "{}",
        stderr(&out)
    );
    // --json says the same for a program.
    let out = verify(&t, &att, &ci_pub, &["--workspace", ws, "--json"]);
    let doc: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(doc["verified"], true);

    // Another key: 42.
    let (_, other_pub) = ci_key(&t.root.join("keys2").tap_mkdir());
    assert_exit_with(
        &verify(&t, &att, &other_pub, &[]),
        42,
        "no signature of the envelope verifies",
    );
    // The payload type, a subject's digest, the signature edited: 42.
    let original = std::fs::read_to_string(&att).unwrap();
    let edit = |f: &dyn Fn(&mut Value)| {
        let mut env: Value = serde_json::from_str(&original).unwrap();
        f(&mut env);
        std::fs::write(&att, env.to_string()).unwrap();
    };
    edit(&|e| e["payloadType"] = json!("application/json"));
    assert_exit_with(&verify(&t, &att, &ci_pub, &[]), 42, "payloadType");
    edit(&|e| {
        let mut s = payload_of(e);
        s["subject"][0]["digest"]["sha256"] = json!("0".repeat(64));
        e["payload"] = json!(base64::engine::general_purpose::STANDARD.encode(s.to_string()));
    });
    assert_exit_with(
        &verify(&t, &att, &ci_pub, &[]),
        42,
        "no signature of the envelope verifies",
    );
    edit(&|e| {
        let sig = e["signatures"][0]["sig"].as_str().unwrap().to_string();
        let flipped = if sig.starts_with('A') { "B" } else { "A" };
        e["signatures"][0]["sig"] = json!(format!("{flipped}{}", &sig[1..]));
    });
    assert_exit_with(
        &verify(&t, &att, &ci_pub, &[]),
        42,
        "no signature of the envelope verifies",
    );
    edit(&|e| e["signatures"] = json!([]));
    assert_exit_with(&verify(&t, &att, &ci_pub, &[]), 42, "no signatures");
    std::fs::write(&att, &original[..original.len() / 2]).unwrap();
    assert_exit_with(&verify(&t, &att, &ci_pub, &[]), 42, "not a DSSE envelope");
    std::fs::write(&att, &original).unwrap();
    assert_eq!(code(&verify(&t, &att, &ci_pub, &[])), 0);

    // A file changed after the run: 43, naming it; put back, it verifies again.
    t.file("copy.txt", "tampered\n");
    assert_exit_with(
        &verify(&t, &att, &ci_pub, &["--workspace", ws]),
        43,
        "subject \"copy.txt\" differs",
    );
    t.file("copy.txt", "written\n");
    std::fs::remove_file(t.ws.join("src/out.txt")).unwrap();
    assert_exit_with(
        &verify(&t, &att, &ci_pub, &["--workspace", ws]),
        43,
        "subject \"src/out.txt\": no such regular file",
    );
    t.file("src/out.txt", "written\n");
    assert_eq!(code(&verify(&t, &att, &ci_pub, &["--workspace", ws])), 0);

    // Alice's key gone from the allowed signers the verifier trusts: 44.
    let (_, bob_pub) = ed25519(&t.root.join("keys3").tap_mkdir(), "bob");
    let others = t.root.join("others_allowed");
    std::fs::write(&others, format!("bob@example.com {bob_pub}\n")).unwrap();
    assert_exit_with(
        &verify(
            &t,
            &att,
            &ci_pub,
            &["--allowed-signers", others.to_str().unwrap()],
        ),
        44,
        "is not listed in",
    );
}

/// Checks a predicate against the shipped `docs/attestation.schema.json`.
fn assert_matches_predicate_schema(predicate: &Value) {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("docs/attestation.schema.json")).unwrap(),
    )
    .unwrap();
    let url = "https://acode-run.dev/attestation/run/v1";
    let mut schemas = boon::Schemas::new();
    let mut compiler = boon::Compiler::new();
    compiler.add_resource(url, schema).unwrap();
    let index = compiler.compile(url, &mut schemas).unwrap();
    if let Err(e) = schemas.validate(predicate, index) {
        panic!("the predicate does not match docs/attestation.schema.json: {e:#}\n{predicate:#}");
    }
}

trait TapMkdir {
    fn tap_mkdir(self) -> Self;
}

impl TapMkdir for PathBuf {
    fn tap_mkdir(self) -> Self {
        std::fs::create_dir_all(&self).unwrap();
        self
    }
}

fn payload_of(env: &Value) -> Value {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(env["payload"].as_str().unwrap())
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[test]
fn a_recorded_run_is_attested_later_with_a_pkcs8_key_and_a_failed_run_does_not_verify() {
    let t = TestDir::new();
    let (plan, keys) = attested_workspace(&t);
    let out = t.run(&[plan.to_str().unwrap(), "--jsonl"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let run_id = events(&out)[0]["run_id"].as_str().unwrap().to_string();
    // A PKCS#8 PEM key (openssl), its SPKI public half for verify.
    let pem = keys.join("ci.pem");
    let public = keys.join("ci.pub.pem");
    let made = Command::new("openssl")
        .args(["genpkey", "-algorithm", "ed25519", "-out"])
        .arg(&pem)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let pubout = Command::new("openssl")
        .args(["pkey", "-pubout", "-in"])
        .arg(&pem)
        .arg("-out")
        .arg(&public)
        .output()
        .unwrap();
    assert!(pubout.status.success());
    let att = t.root.join("later.json");
    let key_env = [("ACODE_ATTEST_KEY_FILE", pem.to_str().unwrap())];
    let out = t.run_with(&["attest", &run_id[..8], att.to_str().unwrap()], &key_env);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let names: Vec<String> = payload(&att)["subject"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["copy.txt", "src/out.txt"]);
    assert_eq!(
        code(&verify(
            &t,
            &att,
            &public,
            &["--workspace", t.ws.to_str().unwrap()]
        )),
        0
    );
    // verify reads envelopes up to its documented bound (64 MiB, docs/attestations.md): the same
    // envelope with a megabyte of JSON whitespace after it still verifies; a file past the bound
    // is refused unread, as any input file that cannot be read (exit 2), naming it and the bound.
    let padded = t.root.join("padded.json");
    let mut bytes = std::fs::read(&att).unwrap();
    bytes.extend(std::iter::repeat_n(b' ', 1 << 20));
    std::fs::write(&padded, &bytes).unwrap();
    let out = verify(&t, &padded, &public, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let huge = t.root.join("huge.json");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(64 * 1024 * 1024 + 1)
        .unwrap();
    let out = verify(&t, &huge, &public, &[]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("huge.json"), "{}", stderr(&out));
    assert!(stderr(&out).contains("67108864 bytes"), "{}", stderr(&out));
    // show says an attestation was written.
    let shown = stdout(&t.run(&["show", &run_id]));
    assert!(shown.contains("attested  "), "{shown}");
    assert!(shown.contains(att.to_str().unwrap()), "{shown}");

    // A run that failed attests that it failed: verify exits 45.
    let failing = t.plan(
        "f.json",
        &json!({"plan_id": "f", "steps": [
            {"step_id": "w", "tool": "file_write", "arguments": {"path": "f.txt", "contents": "f"}},
            {"step_id": "boom", "tool": "file_read", "arguments": {"path": "missing.txt"}}]}),
    );
    let alice = keys.join("alice");
    assert_eq!(code(&sign(&t, &failing, &alice, &[])), 0);
    let att2 = t.root.join("failed.json");
    let out = t.run_with(
        &[
            failing.to_str().unwrap(),
            "--attest",
            att2.to_str().unwrap(),
        ],
        &key_env,
    );
    assert_eq!(code(&out), 30, "{}", stderr(&out));
    assert_exit_with(
        &verify(&t, &att2, &public, &[]),
        45,
        "did not complete: status failed, exit code 30",
    );
}

#[test]
fn a_run_asked_to_attest_without_a_usable_key_runs_nothing() {
    let t = TestDir::new();
    let (plan, keys) = attested_workspace(&t);
    let att = t.root.join("a.json");
    let ps = plan.to_str().unwrap();
    let out = t.run(&[ps, "--attest", att.to_str().unwrap()]);
    assert_exit_with(&out, 2, "set ACODE_ATTEST_KEY_FILE");
    let (rsa, _) = keygen(&keys, "rsa", &["-t", "rsa", "-b", "2048"]);
    let out = t.run_with(
        &[ps, "--attest", att.to_str().unwrap()],
        &[("ACODE_ATTEST_KEY_FILE", rsa.to_str().unwrap())],
    );
    assert_exit_with(&out, 2, "ed25519 only");
    let missing = t.root.join("nope");
    let out = t.run_with(
        &[ps, "--attest", att.to_str().unwrap()],
        &[("ACODE_ATTEST_KEY_FILE", missing.to_str().unwrap())],
    );
    assert_exit_with(&out, 2, "key file");
    // Nothing ran: no file written, no run recorded, no attestation.
    assert!(!t.ws.join("src/out.txt").exists());
    assert!(!att.exists());
    assert_eq!(q::<i64>(&t.db(), "SELECT COUNT(*) FROM runs"), 0);
}

#[test]
fn the_in_toto_python_libraries_verify_the_attestation_and_refuse_it_tampered() {
    if !e2e_net("in-toto and securesystemslib from the Python registry") {
        return;
    }
    let t = TestDir::new();
    let (plan, keys) = attested_workspace(&t);
    let (ci, ci_pub) = ci_key(&keys);
    let att = t.root.join("run.intoto.json");
    let out = t.run_with(
        &[plan.to_str().unwrap(), "--attest", att.to_str().unwrap()],
        &[("ACODE_ATTEST_KEY_FILE", ci.to_str().unwrap())],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let site = t.root.join("intoto-py");
    let pip = Command::new("python3")
        .args(["-m", "pip", "install", "--quiet", "--target"])
        .arg(&site)
        .args(["in-toto>=3", "securesystemslib>=1"])
        .output()
        .unwrap();
    assert!(
        pip.status.success(),
        "{}",
        String::from_utf8_lossy(&pip.stderr)
    );
    let check = |key: &Path| {
        let out = Command::new("python3")
            .env("PYTHONPATH", &site)
            .arg(repo().join("tests/support/attest/intoto_verify.py"))
            .arg(&att)
            .arg(key)
            .arg(&t.ws)
            .output()
            .unwrap();
        let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let report: Value = serde_json::from_str(&line)
            .unwrap_or_else(|_| panic!("{line} {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.success(), report)
    };
    let (ok, report) = check(&ci_pub);
    assert!(ok, "{report}");
    assert_eq!(report["subjects"], json!(["copy.txt", "src/out.txt"]));
    // securesystemslib's own key id for the key is the one acode-run named.
    let env: Value = serde_json::from_str(&std::fs::read_to_string(&att).unwrap()).unwrap();
    assert_eq!(report["keyid"], env["signatures"][0]["keyid"]);
    assert_eq!(report["keyids"], json!([env["signatures"][0]["keyid"]]));
    // Both verifiers refuse each tampering.
    let original = std::fs::read_to_string(&att).unwrap();
    let tamper: [&dyn Fn(&mut Value); 3] = [
        &|e| e["payloadType"] = json!("application/json"),
        &|e| {
            let mut s = payload_of(e);
            s["subject"][0]["digest"]["sha256"] = json!("0".repeat(64));
            e["payload"] = json!(base64::engine::general_purpose::STANDARD.encode(s.to_string()));
        },
        &|e| {
            let mut s = payload_of(e);
            s["predicate"]["run"]["exit_code"] = json!(0);
            s["predicate"]["approval"]["approver"] = json!("mallory@example.com");
            e["payload"] = json!(base64::engine::general_purpose::STANDARD.encode(s.to_string()));
        },
    ];
    for f in tamper {
        let mut env: Value = serde_json::from_str(&original).unwrap();
        f(&mut env);
        std::fs::write(&att, env.to_string()).unwrap();
        let (ok, report) = check(&ci_pub);
        assert!(!ok, "in-toto accepted a tampered attestation: {report}");
        assert_eq!(code(&verify(&t, &att, &ci_pub, &[])), 42);
    }
    // A file changed on disk: the subject check of both refuses it.
    std::fs::write(&att, &original).unwrap();
    t.file("copy.txt", "changed\n");
    let (ok, report) = check(&ci_pub);
    assert!(!ok, "{report}");
    assert!(
        report["error"].as_str().unwrap().contains("copy.txt"),
        "{report}"
    );
}
