//! Programs by workspace path and toolchains outside /usr (issues #27 and #21): the program
//! `validate` resolves is the one that runs, in every sandbox mode, and the audit records it.

use std::path::Path;

use serde_json::json;

use crate::harness::*;

const MODES: [&str; 3] = ["bwrap", "landlock", "none"];

fn sha256_hex(path: &Path) -> String {
    use sha2::{Digest, Sha256};
    let bytes = std::fs::read(path).unwrap();
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn run_in(t: &TestDir, plan: &Path, mode: &str) -> std::process::Output {
    t.approve(plan);
    t.run(&[plan.to_str().unwrap(), "--sandbox", mode, "--jsonl"])
}

/// Writes `.venv/bin/hello`, a script whose `#!` is the virtualenv's own python, as pip writes
/// the entry points it installs.
const SCRIPT_MAKER: &str = "import os\n\
    p = '.venv/bin/hello'\n\
    open(p, 'w').write('#!' + os.path.abspath('.venv/bin/python') + '\\nimport sys\\nprint(sys.prefix)\\n')\n\
    os.chmod(p, 0o755)\n";

#[test]
fn a_virtualenv_made_by_the_plan_runs_its_python_in_every_mode() {
    need_bwrap();
    for mode in MODES {
        let t = TestDir::new();
        t.file(
            "acode-policy.json",
            &json!({"allow_commands": [".venv/bin/*"],
                    "auto_approve_commands": ["python3", ".venv/bin/*"]})
            .to_string(),
        );
        let plan = t.plan("venv.json", &json!({"plan_id": "venv", "steps": [
            {"step_id": "make", "tool": "run_command", "creates": [".venv/"],
             "arguments": {"argv": ["python3", "-m", "venv", "--without-pip", ".venv"], "timeout_s": 120}},
            {"step_id": "use", "tool": "run_command",
             "arguments": {"argv": [".venv/bin/python", "-c", "import sys; print(sys.prefix)"]}},
            // A script the virtualenv holds (as pip installs `bin/pytest`): its `#!` names the
            // virtualenv's python, a link to an interpreter outside the workspace.
            {"step_id": "script", "tool": "run_command",
             "arguments": {"argv": [".venv/bin/python", "-c", SCRIPT_MAKER]}},
            {"step_id": "run-script", "tool": "run_command", "arguments": {"argv": [".venv/bin/hello"]}}]}));
        // The program is not there yet: an earlier step makes it, so the plan validates, and
        // preview says so.
        let out = t.run(&["validate", plan.to_str().unwrap()]);
        assert_eq!(code(&out), 0, "{mode}: {}", stderr(&out));
        let out = t.run(&["preview", plan.to_str().unwrap()]);
        assert!(
            stdout(&out).contains(".venv/bin/python: .venv/bin/python is not there yet"),
            "{}",
            stdout(&out)
        );
        let out = run_in(&t, &plan, mode);
        assert_eq!(code(&out), 0, "{mode}: {}", stderr(&out));
        assert_eq!(
            stdout_of(&t, "use").trim(),
            t.ws.join(".venv").to_str().unwrap(),
            "{mode}"
        );
        assert_eq!(
            stdout_of(&t, "run-script").trim(),
            t.ws.join(".venv").to_str().unwrap(),
            "{mode}: the script ran under the virtualenv's python"
        );
        // The audit: the path run and the SHA-256 of the interpreter it leads to.
        let (path, sha): (String, String) = t
            .db()
            .query_row(
                "SELECT program_path, program_sha256 FROM executions WHERE step_id = 'use'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(path, t.ws.join(".venv/bin/python").to_str().unwrap());
        let real = std::fs::canonicalize(t.ws.join(".venv/bin/python")).unwrap();
        assert_eq!(sha, sha256_hex(&real), "{mode}");
        let result = events(&out)
            .into_iter()
            .find(|e| e["type"] == "tool_result" && e["step_id"] == "use")
            .unwrap();
        assert_eq!(result["program"]["sha256"], sha);
        // Now it exists: preview shows where the link leads.
        let out = t.run(&["preview", plan.to_str().unwrap()]);
        assert!(
            stdout(&out).contains(&format!("→ {}", real.display())),
            "{}",
            stdout(&out)
        );
    }
}

#[test]
fn scripts_and_local_package_bins_run_by_path_in_every_mode() {
    need_bwrap();
    for mode in MODES {
        let t = TestDir::new();
        exe(
            &t.ws.join("scripts/check.sh"),
            "#!/usr/bin/env bash\necho \"checked in $PWD\"\n",
        );
        // An npm package's bin, linked from node_modules/.bin as npm does.
        exe(
            &t.ws.join("node_modules/hello/cli.js"),
            "#!/usr/bin/env node\nconsole.log('hello from ' + require('path').basename(__filename))\n",
        );
        std::fs::create_dir_all(t.ws.join("node_modules/.bin")).unwrap();
        std::os::unix::fs::symlink("../hello/cli.js", t.ws.join("node_modules/.bin/hello"))
            .unwrap();
        t.file(
            "acode-policy.json",
            &json!({"allow_commands": ["./scripts/check.sh", "node_modules/.bin/*"],
                    "auto_approve_commands": ["./scripts/check.sh", "node_modules/.bin/*"]})
            .to_string(),
        );
        let plan = t.plan("p.json", &json!({"plan_id": "paths", "steps": [
            {"step_id": "script", "tool": "run_command", "arguments": {"command": "./scripts/check.sh"}},
            {"step_id": "bin", "tool": "run_command", "arguments": {"argv": ["node_modules/.bin/hello"]}}]}));
        let out = run_in(&t, &plan, mode);
        assert_eq!(code(&out), 0, "{mode}: {}", stderr(&out));
        assert_eq!(
            stdout_of(&t, "script").trim(),
            format!("checked in {}", t.ws.display())
        );
        assert_eq!(stdout_of(&t, "bin").trim(), "hello from cli.js");
        let sha: String = q(
            &t.db(),
            "SELECT program_sha256 FROM executions WHERE step_id = 'script'",
        );
        assert_eq!(
            sha,
            sha256_hex(&t.ws.join("scripts/check.sh")),
            "the script's own bytes"
        );
    }
}

#[test]
fn program_paths_outside_the_workspace_or_not_in_the_policy_are_refused() {
    let t = TestDir::new();
    let outside = t.outside.join("x");
    // The marker the program would leave: a unique path of this test's, outside the workspace.
    let ran = t.root.join("ran.marker");
    exe(&outside, &format!("#!/bin/sh\ntouch '{}'\n", ran.display()));
    std::fs::create_dir_all(t.ws.join("sub")).unwrap();
    std::os::unix::fs::symlink(&t.outside, t.ws.join("sub/link")).unwrap();
    t.file(
        "acode-policy.json",
        &json!({"allow_commands": ["**/*"]}).to_string(),
    );
    for (program, rule) in [
        ("../x", "must stay inside the workspace"),
        ("/etc/x", "must stay inside the workspace"),
        ("sub/link/x", "symlink"),
    ] {
        let plan = t.plan(
            "p.json",
            &json!({"plan_id": "out", "steps": [
            {"step_id": "s", "tool": "run_command", "arguments": {"argv": [program]}}]}),
        );
        let out = t.run(&["validate", plan.to_str().unwrap()]);
        assert_eq!(code(&out), 2, "{program}: {}", stderr(&out));
        assert!(stderr(&out).contains(rule), "{program}: {}", stderr(&out));
        // Asked to run it, unsandboxed (where only this check stands between the plan and the
        // program), the runner refuses the same way and the program leaves no marker.
        let out = t.run(&[
            "run",
            "--approve",
            plan.to_str().unwrap(),
            "--sandbox",
            "none",
        ]);
        assert_eq!(code(&out), 2, "{program}: {}", stderr(&out));
        assert!(stderr(&out).contains(rule), "{program}: {}", stderr(&out));
        assert!(!ran.exists(), "{program} ran");
    }

    // A glob that matches, one that does not — and the refusal names the line to add.
    let t = TestDir::new();
    exe(&t.ws.join(".venv/bin/python"), "#!/bin/sh\necho venv\n");
    exe(&t.ws.join("tools/run.sh"), "#!/bin/sh\necho tools\n");
    t.file(
        "acode-policy.json",
        &json!({"allow_commands": [".venv/bin/*"]}).to_string(),
    );
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "glob", "steps": [
        {"step_id": "ok", "tool": "run_command", "arguments": {"argv": [".venv/bin/python"]}},
        {"step_id": "no", "tool": "run_command", "arguments": {"argv": ["./tools/run.sh"]}}]}),
    );
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_exit_with(
        &out,
        32,
        "add \"tools/run.sh\" (or a glob such as \"tools/*\") to \"allow_commands\"",
    );
    assert!(!stderr(&out).contains("steps[0]"), "{}", stderr(&out));

    // A program at the workspace's root: the advice names it `./NAME` (a bare name would mean a
    // program on PATH), and following it makes the plan valid.
    exe(&t.ws.join("gradlew"), "#!/bin/sh\necho gradle\n");
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "root", "steps": [
        {"step_id": "g", "tool": "run_command", "arguments": {"argv": ["./gradlew"]}}]}),
    );
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_exit_with(&out, 32, "add \"./gradlew\" to \"allow_commands\"");
    t.file(
        "acode-policy.json",
        &json!({"allow_commands": [".venv/bin/*", "./gradlew"]}).to_string(),
    );
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    // Allowed but not auto-approved: it asks, and without a terminal that is a denial.
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "ask", "steps": [
        {"step_id": "ok", "tool": "run_command", "arguments": {"argv": [".venv/bin/python"]}}]}),
    );
    t.approve(&plan);
    let out = t.run(&[plan.to_str().unwrap()]);
    assert_eq!(code(&out), 33, "{}", stderr(&out));
}

#[test]
fn a_program_an_earlier_step_did_not_make_fails_naming_its_path() {
    let t = TestDir::new();
    t.file(
        "acode-policy.json",
        &json!({"allow_commands": ["build/*"], "auto_approve_commands": ["true", "build/*"]})
            .to_string(),
    );
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "missing", "steps": [
        {"step_id": "make", "tool": "run_command", "arguments": {"argv": ["true"]}},
        {"step_id": "use", "tool": "run_command", "arguments": {"argv": ["build/tool"]}}]}),
    );
    t.approve(&plan);
    let out = t.run(&[plan.to_str().unwrap()]);
    assert_exit_with(
        &out,
        30,
        "the program build/tool does not exist: build/tool is not in the workspace",
    );
    // Without an earlier step that could make it, validation refuses it at once.
    let plan = t.plan(
        "q.json",
        &json!({"plan_id": "missing2", "steps": [
        {"step_id": "use", "tool": "run_command", "arguments": {"argv": ["build/tool"]}}]}),
    );
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_exit_with(&out, 2, "the program build/tool does not exist");
}

#[test]
fn toolchains_outside_usr_are_visible_under_bwrap_and_credentials_are_not() {
    need_bwrap();
    let t = TestDir::new();
    // A home of our own, with credentials in it and a tool installed under it.
    let home = t.root.join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), "PRIVATE-KEY-MATERIAL\n").unwrap();
    std::fs::create_dir_all(home.join(".cargo")).unwrap();
    std::fs::write(
        home.join(".cargo/credentials.toml"),
        "token = \"CARGO-TOKEN-VALUE\"\n",
    )
    .unwrap();
    exe(
        &home.join(".local/opt/probe/bin/probe"),
        "#!/bin/sh\necho running\ncat \"$HOME/.ssh/id_ed25519\" \"$HOME/.cargo/credentials.toml\" 2>&1\nexit 0\n",
    );
    // A virtualenv outside the workspace, found on PATH.
    let venv = t.root.join("venv");
    let made = std::process::Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .unwrap();
    assert!(made.success());
    let path = format!(
        "{}:{}:{}",
        venv.join("bin").display(),
        home.join(".local/opt/probe/bin").display(),
        std::env::var("PATH").unwrap()
    );
    t.file(
        "acode-policy.json",
        &json!({"sandbox": "bwrap", "allow_commands": ["probe"],
                "auto_approve_commands": ["probe", "python3"]})
        .to_string(),
    );
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "toolchains", "steps": [
        {"step_id": "py", "tool": "run_command",
         "arguments": {"argv": ["python3", "-c", "import sys; print(sys.prefix)"]}},
        {"step_id": "probe", "tool": "run_command", "arguments": {"argv": ["probe"]}}]}),
    );
    let with_env = |args: &[&str]| {
        t.cmd()
            .args(args)
            .env("HOME", &home)
            .env("PATH", &path)
            .output()
            .unwrap()
    };
    let out = with_env(&["approve", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = with_env(&[plan.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        stdout_of(&t, "py").trim(),
        venv.to_str().unwrap(),
        "the venv's python ran"
    );
    let probe = stdout_of(&t, "probe");
    assert!(probe.starts_with("running"), "{probe}");
    assert!(!probe.contains("PRIVATE-KEY-MATERIAL"), "{probe}");
    assert!(!probe.contains("CARGO-TOKEN-VALUE"), "{probe}");
}

/// Issue #21: a cargo installed in a relocated `CARGO_HOME` (not `~/.cargo`) runs under bwrap, and
/// the cargo credentials kept in that home are not readable by the commands.
#[test]
fn a_cargo_from_a_relocated_cargo_home_runs_under_bwrap_without_its_credentials() {
    let Some(rustup) = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("cargo"))
            .find(|c| c.is_file())
            .and_then(|c| std::fs::canonicalize(c).ok())
    }) else {
        panic!("cargo is not on PATH");
    };
    let t = TestDir::new();
    let cargo_home = t.root.join("relocated/cargo");
    std::fs::create_dir_all(cargo_home.join("bin")).unwrap();
    // The rustup proxy (or cargo itself) copied as the relocated home's cargo.
    std::fs::copy(&rustup, cargo_home.join("bin/cargo")).unwrap();
    std::fs::write(
        cargo_home.join("credentials.toml"),
        "token = \"RELOCATED-CARGO-TOKEN\"\n",
    )
    .unwrap();
    let rustup_home = std::env::var("RUSTUP_HOME")
        .unwrap_or_else(|_| format!("{}/.rustup", std::env::var("HOME").unwrap()));
    let path = format!(
        "{}:/usr/local/bin:/usr/bin:/bin",
        cargo_home.join("bin").display()
    );
    t.file(
        "acode-policy.json",
        &json!({"sandbox": "bwrap"}).to_string(),
    );
    let creds = cargo_home.join("credentials.toml");
    let plan = t.plan("p.json", &json!({"plan_id": "relocated", "steps": [
        {"step_id": "version", "tool": "run_command", "arguments": {"argv": ["cargo", "--version"]}},
        {"step_id": "creds", "tool": "run_command", "on_failure": "continue",
         "arguments": {"argv": ["cat", creds.to_str().unwrap()]}}]}));
    let with_env = |args: &[&str]| {
        t.cmd()
            .args(args)
            .env("CARGO_HOME", &cargo_home)
            .env("RUSTUP_HOME", &rustup_home)
            .env("PATH", &path)
            .output()
            .unwrap()
    };
    let out = with_env(&["run", "--approve", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout_of(&t, "version").starts_with("cargo "),
        "{}",
        stdout_of(&t, "version")
    );
    let (path_run,): (String,) = t
        .db()
        .query_row(
            "SELECT program_path FROM executions WHERE step_id = 'version'",
            [],
            |r| Ok((r.get(0)?,)),
        )
        .unwrap();
    assert_eq!(path_run, cargo_home.join("bin/cargo").to_str().unwrap());
    // The command ran (cat tried the path it was given: masked, it reads nothing or is refused).
    let exit: Option<i64> = q(
        &t.db(),
        "SELECT exit_code FROM executions WHERE step_id = 'creds'",
    );
    assert!(exit.is_some(), "cat did not run: {}", stderr(&out));
    let seen = stdout_of(&t, "creds");
    assert!(!seen.contains("RELOCATED-CARGO-TOKEN"), "{seen}");
    assert!(
        std::fs::read_to_string(&creds)
            .unwrap()
            .contains("RELOCATED-CARGO-TOKEN")
    );
}
