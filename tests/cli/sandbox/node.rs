//! Node programs installed outside the workspace (issue 43 §2): `npm install --prefix DIR pkg`
//! puts the package, its dependencies beside it and `.bin/pkg` in `DIR/node_modules`, and that
//! tree is the program's installation (`policy/program.rs`), shown read-only under bwrap and
//! Landlock with the credentials around it still hidden. Real packages with dependencies from the
//! npm registry (opt-in with `ACODE_E2E_NET=1`, set by `.ci/run`; the registry is whatever npm's
//! own configuration names), as a command (`cowsay`, which needs `yargs`) and as an MCP server
//! (`@modelcontextprotocol/server-filesystem`, an ES module with the MCP SDK beside it). The same
//! in a container is `tests/cli/sandbox/container.rs`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use crate::harness::*;
use crate::sandbox::landlock::landlock_usable;

const MODES: [&str; 2] = ["bwrap", "landlock"];

/// Whether the registry tests run: `ACODE_E2E_NET=1`; else a named skip (a failure under CI).
fn registry(what: &str) -> bool {
    e2e_net(what)
}

/// `npm install --prefix prefix package`, with npm's own configuration (its registry, its
/// mirror): the tree a user gets. Returns `prefix/node_modules/.bin`.
pub(crate) fn npm_install(prefix: &Path, package: &str) -> PathBuf {
    let out = Command::new("npm")
        .args(["install", "--silent", "--no-audit", "--no-fund", "--prefix"])
        .arg(prefix)
        .arg(package)
        .output()
        .expect("npm runs (scripts/test.sh installs it with ACODE_E2E_NET=1)");
    assert!(
        out.status.success(),
        "npm install {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    prefix.join("node_modules/.bin")
}

/// `PATH` with `dir` first.
fn path_first(dir: &Path) -> String {
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// A `cowsay` from `npm install --prefix HOME/tools cowsay` runs with `yargs` beside it in both
/// modes; the credentials stay hidden: a key in the home and the prefix's own `.npmrc` beside the
/// `node_modules` tree, both asked for by the program itself (`cowsay -f FILE` prints a file as
/// its cow), are not readable, while the cow files inside the tree are.
#[test]
fn a_node_program_installed_outside_the_workspace_runs_with_its_dependencies_in_both_modes() {
    need_bwrap();
    if !landlock_usable() || !registry("cowsay (with yargs)") {
        return;
    }
    let t = TestDir::new();
    let home = t.root.join("home");
    let prefix = home.join("tools");
    let bin = npm_install(&prefix, "cowsay");
    assert!(
        prefix.join("node_modules/yargs").is_dir(),
        "cowsay needs yargs"
    );
    let marker = format!("acode-npm-secret-{}", uuid::Uuid::new_v4().simple());
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), format!("{marker}\n")).unwrap();
    std::fs::write(prefix.join(".npmrc"), format!("_authToken={marker}\n")).unwrap();
    let cow = prefix.join("node_modules/cowsay/cows/default.cow");
    assert!(cow.is_file(), "cowsay ships its cows");
    t.file(
        "acode-policy.json",
        &json!({"allow_commands": ["cowsay"], "auto_approve_commands": ["cowsay"]}).to_string(),
    );
    let probe = |id: &str, file: &Path| {
        json!({"step_id": id, "tool": "run_command", "on_failure": "continue",
               "arguments": {"argv": ["cowsay", "-f", file.to_str().unwrap(), "x"]}})
    };
    let plan = t.plan(
        "cow.json",
        &json!({"plan_id": "cow", "steps": [
            {"step_id": "moo", "tool": "run_command", "arguments": {"argv": ["cowsay", "moo"]}},
            probe("own-cow", &cow),
            probe("key", &home.join(".ssh/id_ed25519")),
            probe("npmrc", &prefix.join(".npmrc"))]}),
    );
    let path = path_first(&bin);
    let home_s = home.to_string_lossy().into_owned();
    let env = [("PATH", path.as_str()), ("HOME", home_s.as_str())];
    let out = t.run_with(&["approve", plan.to_str().unwrap(), "--by", "t"], &env);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for mode in MODES {
        let out = t.run_with(&["run", plan.to_str().unwrap(), "--sandbox", mode], &env);
        let err = stderr(&out);
        assert_eq!(code(&out), 0, "{mode}: {err}");
        let run: String = q(
            &t.db(),
            "SELECT run_id FROM runs ORDER BY started_at DESC, rowid DESC LIMIT 1",
        );
        let step = |id: &str| -> (String, String) {
            t.db()
                .query_row(
                    "SELECT status, coalesce((SELECT group_concat(a.content, '') FROM artifacts a
                       JOIN executions e USING (execution_id)
                       WHERE e.run_id = ?1 AND e.step_id = ?2), '')
                     FROM steps WHERE run_id = ?1 AND step_id = ?2",
                    [&run, id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .unwrap()
        };
        let (status, output) = step("moo");
        assert_eq!(status, "completed", "{mode}: {output}\n{err}");
        assert!(output.contains("< moo >"), "{mode}: {output}");
        assert!(!output.contains("Cannot find module"), "{mode}: {output}");
        let (status, output) = step("own-cow");
        assert_eq!(
            status, "completed",
            "{mode}: the tree's own files: {output}"
        );
        for id in ["key", "npmrc"] {
            let (status, output) = step(id);
            assert_eq!(status, "failed", "{mode}: {id} was readable: {output}");
            assert!(!output.contains(&marker), "{mode}: {id}: {output}");
        }
        assert!(!err.contains(&marker) && !stdout(&out).contains(&marker));
    }
}

/// An MCP server installed with npm outside the workspace (an ES module whose SDK and other
/// dependencies are beside it) is approved — `approve` starts it to pin its tools — and called,
/// in both modes.
#[test]
fn an_npm_installed_mcp_server_outside_the_workspace_is_approved_and_called_in_both_modes() {
    need_bwrap();
    if !landlock_usable() || !registry("@modelcontextprotocol/server-filesystem") {
        return;
    }
    let t = TestDir::new();
    let bin = npm_install(
        &t.root.join("servers"),
        "@modelcontextprotocol/server-filesystem",
    );
    t.file("notes.txt", "hello\n");
    let plan = t.plan(
        "fs.json",
        &json!({"plan_id": "fs", "steps": [
            {"step_id": "ls", "tool": "mcp__fs__list_directory", "arguments": {"path": "."}}]}),
    );
    let path = path_first(&bin);
    let env = [("PATH", path.as_str())];
    for mode in MODES {
        let policy = json!({"sandbox": mode, "mcp": {"servers": {"fs": {
            "command": ["mcp-server-filesystem", "."],
            "tools": ["list_directory"], "confirm": false}}}});
        t.file("acode-policy.json", &policy.to_string());
        let out = t.run_with(&["approve", plan.to_str().unwrap(), "--by", "t"], &env);
        assert_eq!(code(&out), 0, "{mode}: approve: {}", stderr(&out));
        assert!(
            approval_of(&plan)["mcp"]["fs"]["tools"]["list_directory"]["sha256"].is_string(),
            "{mode}: {}",
            approval_of(&plan)
        );
        let out = t.run_with(&["run", plan.to_str().unwrap(), "--sandbox", mode], &env);
        assert_eq!(code(&out), 0, "{mode}: {}", stderr(&out));
        let results = t.artifacts("mcp_result").concat();
        assert!(results.contains("notes.txt"), "{mode}: {results}");
    }
}

/// Under Landlock the hint of a failing command names an entry to declare (`"creates"`) only
/// when the error names a path at the root: Node's `code: 'EACCES'` is no file name. A real node
/// reading a file outside the workspace gets the general hint; one making `build/` at the root
/// gets `"creates": ["build/"]`.
#[test]
fn under_landlock_a_hint_names_a_path_only_when_the_error_names_one() {
    acode_run::testing::require(
        "node",
        Command::new("node")
            .arg("--version")
            .output()
            .map_err(|e| e.to_string())
            .and_then(|o| {
                o.status
                    .success()
                    .then_some(())
                    .ok_or("node --version failed".into())
            }),
    );
    if !landlock_usable() {
        return;
    }
    let t = TestDir::new();
    let outside = t.outside.join("sentinel.txt");
    t.file(
        "acode-policy.json",
        &json!({"allow_commands": ["node"], "auto_approve_commands": ["node"]}).to_string(),
    );
    let read = format!(
        "require('fs').readFileSync({:?})",
        outside.to_str().unwrap()
    );
    let plan = t.plan(
        "node.json",
        &json!({"plan_id": "node", "steps": [
            {"step_id": "read", "tool": "run_command", "on_failure": "continue",
             "arguments": {"argv": ["node", "-e", read]}},
            {"step_id": "mkdir", "tool": "run_command", "on_failure": "continue",
             "arguments": {"argv": ["node", "-e", "require('fs').mkdirSync('build')"]}}]}),
    );
    let out = t.approve_and_run(&plan, &["--sandbox", "landlock"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let error = |id: &str| -> String {
        q(
            &t.db(),
            &format!("SELECT error_message FROM steps WHERE step_id = '{id}'"),
        )
    };
    let read = error("read");
    let printed = artifact_of(&t, "read", "stderr");
    assert!(
        printed.contains("code: 'EACCES'"),
        "node was refused the file outside, and said so with its error's code: {printed}"
    );
    assert!(!read.contains("\"creates\""), "{read}");
    assert!(
        read.contains("under Landlock a command may read only"),
        "the general hint: {read}"
    );
    let mkdir = error("mkdir");
    assert!(
        mkdir.contains("add \"creates\": [\"build/\"]"),
        "the positive control: {mkdir}"
    );
    assert!(!mkdir.contains("EACCES\"]"), "{mkdir}");
    assert!(!t.ws.join("EACCES").exists());
    t.assert_outside_untouched();
}
