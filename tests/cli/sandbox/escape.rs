//! Path-escape attempts through the real binary: every one is refused with exit 32 and nothing is
//! created or changed outside the workspace (SPEC §6).

use serde_json::json;

use crate::harness::*;

/// Payloads as (tool, path). Symlinks used by some are created by `setup`.
///
/// A tool that changes files never gets a real system file: if the defence regressed it would
/// overwrite or delete `/etc/passwd`. It aims at the same kind of path under the test's own
/// outside directory instead (which [`TestDir::assert_outside_untouched`] checks); only the
/// reading tools try `/etc/passwd` itself.
fn payloads(t: &TestDir) -> Vec<(&'static str, String)> {
    let outside = t.outside.display().to_string();
    let outside_rel = outside.trim_start_matches('/').to_string();
    let sentinel = t.outside.join("sentinel.txt").display().to_string();
    let mut p: Vec<(&'static str, String)> = Vec::new();
    for tool in [
        "file_write",
        "file_read",
        "file_create",
        "file_delete",
        "file_edit",
        "list_directory",
    ] {
        for path in [
            "../outside/sentinel.txt".to_string(),
            "../outside/new.txt".to_string(),
            "./a/../../outside/new.txt".to_string(),
            "a/b/../../../outside/x".to_string(),
            if mutates(tool) {
                format!("../../../../../../../../../../{outside_rel}/passwd")
            } else {
                "../../../../../../etc/passwd".to_string()
            },
            sentinel.clone(),
            format!("{outside}/new.txt"),
            format!("{}/../outside/new.txt", t.ws.display()),
            if mutates(tool) {
                format!("{outside}/passwd")
            } else {
                "/etc/passwd".to_string()
            },
            "link-dir/new.txt".to_string(),
            "link-dir/sentinel.txt".to_string(),
            "link-file".to_string(),
            "chain".to_string(),
            "dangling".to_string(),
            "inner/link-dir/new.txt".to_string(),
            "a\0b".to_string(),
            "..\\outside\\new.txt".to_string(),
            "sub\\..\\..\\new.txt".to_string(),
            "..".to_string(),
        ] {
            p.push((tool, path));
        }
    }
    p
}

/// Whether `tool` changes files (and so must never be aimed at a real system file).
fn mutates(tool: &str) -> bool {
    matches!(
        tool,
        "file_write" | "file_create" | "file_delete" | "file_edit"
    )
}

fn setup(t: &TestDir) {
    use std::os::unix::fs::symlink;
    symlink(&t.outside, t.ws.join("link-dir")).unwrap();
    symlink(t.outside.join("sentinel.txt"), t.ws.join("link-file")).unwrap();
    symlink(t.ws.join("link-file"), t.ws.join("chain")).unwrap();
    symlink(t.outside.join("nothing-here"), t.ws.join("dangling")).unwrap();
    std::fs::create_dir_all(t.ws.join("inner")).unwrap();
    symlink(&t.outside, t.ws.join("inner/link-dir")).unwrap();
}

fn args_for(tool: &str, path: &str) -> serde_json::Value {
    match tool {
        "file_write" | "file_create" => json!({"path": path, "contents": "pwned"}),
        "file_edit" => json!({"path": path, "old": "untouched", "new": "pwned"}),
        _ => json!({"path": path}),
    }
}

#[test]
fn every_escape_attempt_is_refused_with_exit_32() {
    let t = TestDir::new();
    setup(&t);
    let cases = payloads(&t);
    assert!(cases.len() >= 30);
    // All in one plan: every problem is reported together, all are sandbox problems → 32.
    let steps: Vec<_> = cases
        .iter()
        .enumerate()
        .map(|(i, (tool, path))| json!({"step_id": format!("s{i}"), "tool": tool, "arguments": args_for(tool, path), "depends_on": []}))
        .collect();
    let plan = t.plan("all.json", &json!({"plan_id": "escape", "steps": steps}));
    let out = t.run(&[
        "run",
        "--approve",
        "--confirm",
        "auto-approve",
        plan.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 32, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("{} problems", cases.len())),
        "each payload reported: {err}"
    );
    // And each payload alone is refused too.
    for (i, (tool, path)) in cases.iter().enumerate() {
        let plan = t.plan(
            &format!("e{i}.json"),
            &json!({"plan_id": "escape", "steps": [
            {"step_id": "s", "tool": tool, "arguments": args_for(tool, path)}]}),
        );
        let out = t.run(&["validate", plan.to_str().unwrap()]);
        assert_eq!(code(&out), 32, "{tool} {path:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("sandbox violation"),
            "{tool} {path:?}: {}",
            stderr(&out)
        );
    }
    t.assert_outside_untouched();
}

#[test]
fn search_and_glob_roots_cannot_leave() {
    let t = TestDir::new();
    setup(&t);
    for (tool, args) in [
        ("file_search", json!({"pattern": "untouched", "root": ".."})),
        (
            "file_search",
            json!({"pattern": "untouched", "root": "link-dir"}),
        ),
        (
            "file_glob",
            json!({"pattern": "*.txt", "root": "../outside"}),
        ),
        ("file_glob", json!({"pattern": "../outside/*.txt"})),
        ("file_glob", json!({"pattern": "/etc/*"})),
    ] {
        let plan = t.plan(
            "s.json",
            &json!({"plan_id": "s", "steps": [{"step_id": "s", "tool": tool, "arguments": args}]}),
        );
        let out = t.run(&["validate", plan.to_str().unwrap()]);
        assert_eq!(code(&out), 32, "{tool} {args}: {}", stderr(&out));
    }
}

/// A directory the plan writes through is swapped for a link to the outside while the run is
/// already under way (after validation and approval checked the plan), so only the write's own
/// check at run time can refuse it: the first step waits in a command until the swap is done.
#[test]
fn a_symlink_planted_after_validation_is_still_refused_at_run_time() {
    let t = TestDir::new();
    std::fs::create_dir_all(t.ws.join("later")).unwrap();
    std::fs::create_dir_all(t.ws.join("gate")).unwrap();
    t.file(
        "gate.py",
        "import os, time\nopen('gate/started', 'w').write('1')\n\
         for _ in range(600):\n    if os.path.exists('gate/go'): break\n    time.sleep(0.05)\n",
    );
    // Step `wait` holds the run until the test has swapped `later/`; step `w` then writes
    // through it.
    let plan = t.plan("p.json", &json!({"plan_id": "toctou", "steps": [
        {"step_id": "wait", "tool": "run_command", "arguments": {"command": "python3 gate.py"}},
        {"step_id": "w", "tool": "file_write", "arguments": {"path": "later/x.txt", "contents": "pwned"},
         "depends_on": ["wait"]}]}));
    t.approve(&plan);
    let mut child = t
        .cmd()
        .args([plan.to_str().unwrap(), "--jsonl"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (events_text, err) = (collect_stdout(&mut child), collect_stderr(&mut child));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !t.ws.join("gate/started").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the first step never started: {}",
            err.lock().unwrap()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::fs::remove_dir(t.ws.join("later")).unwrap();
    std::os::unix::fs::symlink(&t.outside, t.ws.join("later")).unwrap();
    std::fs::write(t.ws.join("gate/go"), "").unwrap();
    let status = child.wait().unwrap();
    // The pipes' threads end with the process.
    std::thread::sleep(std::time::Duration::from_millis(100));
    let (events_text, err) = (
        events_text.lock().unwrap().clone(),
        err.lock().unwrap().clone(),
    );
    assert_eq!(status.code(), Some(32), "{err}");
    t.assert_outside_untouched();
    let events: Vec<serde_json::Value> = events_text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The run started and the first step completed: validation let the plan through.
    let event = |kind: &str, step: &str| {
        events
            .iter()
            .find(|e| e["type"] == kind && e["step_id"] == step)
            .unwrap_or_else(|| panic!("no {kind} for {step}: {events_text}"))
            .clone()
    };
    event("step_completed", "wait");
    let w = event("step_failed", "w");
    assert_eq!(w["error_code"], "sandbox_violation", "{w}");
    assert!(w["error"].as_str().unwrap().contains("later/x.txt"), "{w}");
}

#[test]
fn a_plan_cannot_rewrite_itself_or_forge_approvals() {
    let t = TestDir::new();
    std::fs::create_dir_all(t.ws.join("plans")).unwrap();
    let other = t.ws.join("plans/other.json");
    std::fs::write(&other, r#"{"plan_id":"other","steps":[{"step_id":"a","tool":"file_read","arguments":{"path":"x"}}]}"#).unwrap();
    let plan_path = t.ws.join("plans/self.json");
    let forged = json!({"plan_id": "other", "status": "approved", "plan_sha256": "0", "decided_by": "nobody", "decided_at": 0});
    for (i, (path, contents)) in [
        ("plans/self.json", "{}".to_string()),
        ("plans/other.json.approval", forged.to_string()),
        ("plans/self.json.approval", forged.to_string()),
    ]
    .iter()
    .enumerate()
    {
        let plan = json!({"plan_id": format!("self-{i}"), "steps": [
            {"step_id": "w", "tool": "file_write", "arguments": {"path": path, "contents": contents}}]});
        let text = serde_json::to_string(&plan).unwrap();
        std::fs::write(&plan_path, &text).unwrap();
        let out = t.run(&[
            "run",
            "--approve",
            "--confirm",
            "auto-approve",
            plan_path.to_str().unwrap(),
        ]);
        assert_eq!(code(&out), 32, "{path}: {}", stderr(&out));
        // The plan itself is unchanged, and no forged approval stands beside it.
        assert_eq!(std::fs::read_to_string(&plan_path).unwrap(), text, "{path}");
        if let Ok(approval) = std::fs::read_to_string(t.ws.join("plans/self.json.approval")) {
            assert!(!approval.contains("nobody"), "{path}: {approval}");
        }
    }
    assert!(!t.ws.join("plans/other.json.approval").exists());
}
