//! Allowlisted programs stay themselves (issue 12): real git and sort, `--sandbox none`, attacked
//! the ways a plan or a model limited to allowlisted programs would try. Every attack names a
//! marker file outside the workspace as the program to run (or the file to write); the test fails
//! if the marker appears. Each configuration-based attack has a control that runs the same git
//! without acode-run's hardening and shows the marker *does* appear, so the payload is real.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::harness::*;

/// A `touch MARKER` program string git runs through `sh -c`.
fn touch(marker: &Path) -> String {
    format!("touch {}", marker.display())
}

/// Appends configuration text to a repository's config file, as a plan's interpreter step could.
fn append_config(git_dir: &Path, text: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(git_dir.join("config"))
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

/// Runs `steps` as one plan (approved in the same call) with `--sandbox none` (what `auto` falls
/// back to without bwrap or Landlock) and `--confirm auto-deny`; returns the exit code and stderr.
fn run_plan(t: &TestDir, name: &str, steps: Value) -> (i32, String) {
    run_plan_in(t, name, steps, "none")
}

/// [`run_plan`] in the given sandbox mode.
fn run_plan_in(t: &TestDir, name: &str, steps: Value, mode: &str) -> (i32, String) {
    let plan = t.plan(name, &json!({"plan_id": "git-attack", "steps": steps}));
    let out = t.run(&[
        "run",
        "--approve",
        plan.to_str().unwrap(),
        "--sandbox",
        mode,
        "--confirm",
        "auto-deny",
    ]);
    (code(&out), stderr(&out))
}

/// The sandbox modes this machine supports: `none` always, `bwrap` where it works.
fn modes() -> Vec<&'static str> {
    let mut m = vec!["none", "landlock"];
    match acode_run::sandbox::bwrap::resolve(acode_run::policy::SandboxMode::Bwrap) {
        Ok(_) => m.push("bwrap"),
        Err(why) => acode_run::testing::skip("bubblewrap (bwrap)", &why),
    }
    m
}

/// One `run_command` step with `argv`, optionally in `cwd`, that may fail without stopping.
fn step(id: &str, argv: &[&str], cwd: Option<&str>) -> Value {
    let mut args = json!({ "argv": argv });
    if let Some(c) = cwd {
        args["cwd"] = json!(c);
    }
    json!({"step_id": id, "tool": "run_command", "arguments": args, "on_failure": "continue",
           "depends_on": []})
}

#[test]
fn program_naming_config_in_a_nested_repository_never_runs() {
    let t = TestDir::new();
    // Inside the workspace, in an existing directory, which every sandbox mode lets commands
    // write (under Landlock not the root itself).
    std::fs::create_dir_all(t.ws.join("marks")).unwrap();
    let marker = t.ws.join("marks/MARK");
    repo_with_commit(&t, &t.ws);
    let nested = t.ws.join("vendor/lib");
    repo_with_commit(&t, &nested);
    let hooks = t.ws.join("vendor/hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    for hook in [
        "pre-commit",
        "post-commit",
        "post-checkout",
        "reference-transaction",
    ] {
        let p = hooks.join(hook);
        std::fs::write(&p, format!("#!/bin/sh\n{}\n", touch(&marker))).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    append_config(
        &nested.join(".git"),
        &format!(
            "[core]\n\thooksPath = {}\n\tfsmonitor = {}\n\tpager = {}\n[alias]\n\tst = !{}\n",
            hooks.display(),
            touch(&marker),
            touch(&marker),
            touch(&marker)
        ),
    );
    // Control: plain git in the nested repository runs the payload.
    raw_git(&t, &nested, &["status"]);
    assert!(marker.exists(), "control: fsmonitor should have run");
    std::fs::remove_file(&marker).unwrap();

    for mode in modes() {
        let (c, err) = run_plan_in(
            &t,
            "nested.json",
            json!([
                step("status", &["git", "status"], Some("vendor/lib")),
                step("c-status", &["git", "-C", "vendor/lib", "status"], None),
                step(
                    "commit",
                    &["git", "commit", "--allow-empty", "-m", "x"],
                    Some("vendor/lib")
                ),
                step("diff", &["git", "diff"], Some("vendor/lib")),
                step("log", &["git", "--paginate", "log"], Some("vendor/lib")),
            ]),
            mode,
        );
        assert!(
            !marker.exists(),
            "{mode}: a nested repository's config ran a program: {err}"
        );
        // Everything ran, against the workspace's own repository (read-only .git under bwrap makes
        // the commit fail).
        assert!(c == 0 || (mode != "none" && c == 30), "{mode}: {c}: {err}");
        assert!(
            err.contains("git -C vendor/lib status … ok"),
            "{mode}: {err}"
        );
    }
    let (c, err) = run_plan(
        &t,
        "nested-alias.json",
        json!([step("alias", &["git", "st"], Some("vendor/lib"))]),
    );
    assert_eq!(c, 32, "{err}");
    assert!(!marker.exists(), "a nested repository's alias ran: {err}");
    t.assert_outside_untouched();
}

#[test]
fn program_naming_config_in_the_workspace_repository_is_forced_inert() {
    let t = TestDir::new();
    // In an existing directory: under Landlock a command cannot make entries at the root.
    std::fs::create_dir_all(t.ws.join("marks")).unwrap();
    let marker = t.ws.join("marks/MARK");
    repo_with_commit(&t, &t.ws);
    append_config(
        &t.ws.join(".git"),
        &format!(
            "[core]\n\tfsmonitor = {m}\n\tsshCommand = {m}\n\teditor = {m}\n\tpager = {m}\n\
             [sequence]\n\teditor = {m}\n\
             [gpg]\n\tformat = ssh\n[gpg \"ssh\"]\n\tdefaultKeyCommand = {m}\n\tprogram = {m}\n\
             [commit]\n\tgpgSign = true\n\
             [credential]\n\thelper = !{m}\n[credential \"https://example.com\"]\n\thelper = !{m}\n",
            m = touch(&marker)
        ),
    );
    // Control: plain git runs the signing key command on commit.
    raw_git(&t, &t.ws, &["commit", "--allow-empty", "-qm", "signed?"]);
    assert!(
        marker.exists(),
        "control: gpg.ssh.defaultKeyCommand should have run"
    );
    std::fs::remove_file(&marker).unwrap();

    for mode in modes() {
        let (c, err) = run_plan_in(
            &t,
            "own.json",
            json!([
                step("status", &["git", "status"], None),
                step(
                    "commit",
                    &["git", "commit", "--allow-empty", "-m", "x"],
                    None
                ),
                step(
                    "signed",
                    &["git", "commit", "-S", "--allow-empty", "-m", "y"],
                    None
                ),
                step("edit", &["git", "commit", "--allow-empty", "--amend"], None),
                step("rebase", &["git", "rebase", "-i", "HEAD"], None),
                step("fetch", &["git", "fetch", "ssh://example.invalid/x"], None),
            ]),
            mode,
        );
        assert!(
            !marker.exists(),
            "{mode}: repository config ran a program: {err}"
        );
        // The steps really ran (signing fails instead of running the key command; under bwrap the
        // read-only .git makes commits fail).
        assert!(c == 0 || c == 30, "{mode}: {c}: {err}");
        let expected: &[&str] = if mode == "none" {
            &[
                "git status … ok",
                "git commit --allow-empty -m x … ok",
                "--amend … ok",
            ]
        } else {
            &["git status … ok"]
        };
        for ok in expected {
            assert!(err.contains(ok), "{mode}: {ok:?} missing: {err}");
        }
    }
    t.assert_outside_untouched();
}

#[test]
fn the_hardened_environment_neutralises_credential_helpers_and_fsmonitor() {
    // `git credential fill` is not an allowed subcommand; run it directly with the environment
    // acode-run gives git, to show the environment alone holds.
    let t = TestDir::new();
    let marker = t.outside.join("MARK");
    repo_with_commit(&t, &t.ws);
    append_config(
        &t.ws.join(".git"),
        &format!(
            "[credential \"https://example.com\"]\n\thelper = !{m}\n[credential]\n\thelper = !{m}\n\
             [core]\n\tfsmonitor = {m}\n",
            m = touch(&marker)
        ),
    );
    let fill = |hardened: bool| {
        let mut c = Command::new("git");
        c.args(["credential", "fill"])
            .current_dir(&t.ws)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", &t.root)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        if hardened {
            c.envs(acode_run::policy::env::git_env(&t.ws));
        }
        let mut child = c.spawn().unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"protocol=https\nhost=example.com\n\n")
            .unwrap();
        child.wait().unwrap();
    };
    fill(false);
    assert!(
        marker.exists(),
        "control: the credential helper should have run"
    );
    std::fs::remove_file(&marker).unwrap();
    fill(true);
    assert!(
        !marker.exists(),
        "a credential helper ran under the hardened environment"
    );
    let status = Command::new("git")
        .arg("status")
        .current_dir(&t.ws)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(acode_run::policy::env::git_env(&t.ws))
        .output()
        .unwrap();
    assert!(status.status.success());
    assert!(
        !marker.exists(),
        "fsmonitor ran under the hardened environment"
    );
}

#[test]
fn aliases_in_repositories_the_plan_wrote_are_never_run() {
    let t = TestDir::new();
    let marker = t.outside.join("MARK");
    repo_with_commit(&t, &t.ws);
    append_config(
        &t.ws.join(".git"),
        &format!("[alias]\n\tx = !{}\n", touch(&marker)),
    );
    // A bare repository written with file steps only (no `.git` component, so file tools allow
    // it), found by discovery from its own directory.
    let bare_config = format!(
        "[core]\n\trepositoryformatversion = 0\n\tbare = true\n\tfsmonitor = {m}\n[alias]\n\tx = !{m}\n\tlg = !{m}\n",
        m = touch(&marker)
    );
    let write = |id: &str, path: &str, contents: &str| {
        json!({"step_id": id, "tool": "file_write", "depends_on": [],
               "arguments": {"path": path, "contents": contents}})
    };
    // Control: plain git in such a directory runs the alias.
    let ctl = t.root.join("ctl-bare");
    for (p, c) in [
        ("HEAD", "ref: refs/heads/main\n"),
        ("config", bare_config.as_str()),
        ("objects/.keep", ""),
        ("refs/.keep", ""),
    ] {
        std::fs::create_dir_all(ctl.join(p).parent().unwrap()).unwrap();
        std::fs::write(ctl.join(p), c).unwrap();
    }
    raw_git(&t, &ctl, &["lg"]);
    assert!(
        marker.exists(),
        "control: the bare repository's alias should have run"
    );
    std::fs::remove_file(&marker).unwrap();
    std::fs::remove_dir_all(&ctl).unwrap();

    let (c, err) = run_plan(
        &t,
        "bare.json",
        json!([
            write("head", "bare/HEAD", "ref: refs/heads/main\n"),
            write("config", "bare/config", &bare_config),
            write("objects", "bare/objects/.keep", ""),
            write("refs", "bare/refs/.keep", ""),
            step("bare-status", &["git", "status"], Some("bare")),
            step("bare-log", &["git", "log"], Some("bare")),
        ]),
    );
    assert_eq!(c, 0, "{err}");
    assert!(t.ws.join("bare/config").exists());
    assert!(!marker.exists(), "a bare repository's config ran: {err}");
    for (argv, cwd) in [(["git", "x"], None), (["git", "lg"], Some("bare"))] {
        let (c, err) = run_plan(&t, "alias.json", json!([step("alias", &argv, cwd)]));
        assert_eq!(c, 32, "{err}");
        assert!(err.contains("not a git subcommand"), "{err}");
        assert!(!marker.exists(), "an alias ran: {err}");
    }
    t.assert_outside_untouched();
}

#[test]
fn smuggled_options_and_paths_outside_are_refused_before_running() {
    let t = TestDir::new();
    let marker = t.outside.join("MARK");
    let m = touch(&marker);
    repo_with_commit(&t, &t.ws);
    let out_file = t.outside.join("out.txt");
    let elsewhere = t.outside.join("elsewhere");
    let o = out_file.display().to_string();
    let e = elsewhere.display().to_string();
    macro_rules! argv {
        ($($x:expr),* $(,)?) => { vec![$(String::from($x)),*] };
    }
    let attacks: Vec<Vec<String>> = vec![
        argv!["git", "-c", &format!("core.pager={m}"), "--paginate", "log"],
        argv![
            "git",
            "--no-pager",
            "-C",
            ".",
            "-c",
            &format!("alias.x=!{m}"),
            "x"
        ],
        argv!["git", "-p", "-c", &format!("core.fsmonitor={m}"), "status"],
        argv!["git", "--config-env=core.fsmonitor=PATH", "status"],
        argv!["git", "rebase", &format!("--exe={m}"), "HEAD"],
        argv!["git", "rebase", "-ix", &m, "HEAD"],
        argv!["git", "config", "--glob", "core.fsmonitor", &m],
        argv!["git", "config", "core.fsmonitor", &m],
        argv!["git", "diff", &format!("--output={o}")],
        argv!["git", "log", "--output", &o],
        argv!["git", "init", &e],
        argv!["git", "-C", &t.outside.display().to_string(), "init"],
        argv!["git", "fetch", &format!("--upload-pack={m}"), "."],
        argv!["git", "fetch", &format!("ext::sh -c {m}")],
        argv!["sort", &format!("--compress-prog={m}"), "a.txt"],
        argv!["sort", "-o", &o, "a.txt"],
        argv!["sort", "-rno", &o, "a.txt"],
        argv!["sort", &format!("--out={o}"), "a.txt"],
    ];
    for argv in &attacks {
        let plan = t.plan(
            "smuggle.json",
            &json!({"plan_id": "smuggle", "steps": [
                {"step_id": "s", "tool": "run_command", "arguments": {"argv": argv}}]}),
        );
        let out = t.run(&["validate", plan.to_str().unwrap()]);
        assert_eq!(
            code(&out),
            32,
            "{argv:?} passed validation: {}",
            stderr(&out)
        );
        let out = t.run(&[
            "run",
            "--approve",
            plan.to_str().unwrap(),
            "--sandbox",
            "none",
        ]);
        assert_eq!(code(&out), 32, "{argv:?}: {}", stderr(&out));
        assert!(!marker.exists(), "{argv:?} ran a program");
    }
    // Control: the first payloads are real when git reads them unchecked.
    raw_git(&t, &t.ws, &["-c", &format!("alias.x=!{m}"), "x"]);
    assert!(marker.exists(), "control: git -c alias should have run");
    std::fs::remove_file(&marker).unwrap();
    t.assert_outside_untouched();
}

#[test]
fn legitimate_git_and_sort_use_still_works() {
    let t = TestDir::new();
    // Creating `.git` is creating a protected path, which no command may do (the guard removes it
    // and fails the step); the repository exists before the plan, as in a real checkout.
    raw_git(&t, &t.ws, &["init", "-q", "-b", "main"]);
    let plan = t.plan(
        "ok.json",
        &json!({"plan_id": "git-ok", "steps": [
            {"step_id": "name", "tool": "run_command", "arguments": {"command": "git config user.name Bot"}},
            {"step_id": "mail", "tool": "run_command", "arguments": {"command": "git config user.email bot@example.com"}},
            {"step_id": "w", "tool": "file_write", "arguments": {"path": "src/list.txt", "contents": "b\nc\na\n"}},
            {"step_id": "sort", "tool": "run_command", "arguments": {"command": "sort -o sorted.txt list.txt", "cwd": "src"}},
            {"step_id": "add", "tool": "run_command", "arguments": {"command": "git add -A"}},
            {"step_id": "commit", "tool": "run_command", "arguments": {"command": "git commit -q -m 'first: add a list'"}},
            {"step_id": "edit", "tool": "file_write", "arguments": {"path": "src/list.txt", "contents": "b\n"}},
            {"step_id": "status", "tool": "run_command", "arguments": {"command": "git -C src status --short"}},
            {"step_id": "diff", "tool": "run_command", "arguments": {"command": "git diff --stat"}},
            {"step_id": "log", "tool": "run_command", "arguments": {"command": "git log --oneline"}},
            {"step_id": "read", "tool": "run_command", "arguments": {"command": "git config --get user.name"}},
            {"step_id": "mv", "tool": "run_command", "arguments": {"command": "git mv src/sorted.txt src/s.txt"}},
            {"step_id": "commit2", "tool": "run_command", "arguments": {"command": "git commit -qam second"}}
        ]}),
    );
    let out = t.approve_and_run(&plan, &["--sandbox", "none", "--confirm", "auto-deny"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(t.read("src/s.txt"), "a\nb\nc\n");
    let log = raw_git(&t, &t.ws, &["log", "--format=%s"]);
    assert_eq!(
        String::from_utf8_lossy(&log.stdout),
        "second\nfirst: add a list\n"
    );
    t.assert_outside_untouched();
}

/// The documented residual (docs/security.md, "Commands"): a submodule checkout with its own
/// `.git` directory whose configuration something other than git wrote. With
/// `diff.ignoreSubmodules=all` forced, git does not look inside it — until `.gitmodules` (a plain
/// workspace file) sets `ignore = none` for it; then `git status` starts git in the submodule with
/// the submodule's own filter driver. This test pins down exactly that boundary.
#[test]
fn submodule_residual_filter_runs_only_when_gitmodules_unignores_it() {
    let t = TestDir::new();
    let marker = t.outside.join("MARK");
    repo_with_commit(&t, &t.ws);
    let sub = t.ws.join("vendor/lib");
    repo_with_commit(&t, &sub);
    assert!(raw_git(&t, &t.ws, &["add", "vendor/lib"]).status.success());
    assert!(
        raw_git(&t, &t.ws, &["commit", "-qm", "gitlink"])
            .status
            .success()
    );
    append_config(
        &sub.join(".git"),
        &format!("[filter \"evil\"]\n\tclean = {}; cat\n", touch(&marker)),
    );
    std::fs::write(sub.join(".gitattributes"), "* filter=evil\n").unwrap();
    // Same size, same mtime as the index: git must hash the file, through the clean filter.
    let make_racy = || {
        std::fs::write(sub.join("a.txt"), "b\n").unwrap();
        let ok = Command::new("touch")
            .arg("-r")
            .arg(sub.join(".git/index"))
            .arg(sub.join("a.txt"))
            .status()
            .unwrap();
        assert!(ok.success());
    };
    make_racy();
    let (c, err) = run_plan(
        &t,
        "sub1.json",
        json!([step("st", &["git", "status"], None)]),
    );
    assert_eq!(c, 0, "{err}");
    assert!(
        !marker.exists(),
        "the submodule's filter ran without .gitmodules: {err}"
    );

    make_racy();
    let (c, err) = run_plan(
        &t,
        "sub2.json",
        json!([
            {"step_id": "gm", "tool": "file_write", "depends_on": [], "arguments": {
                "path": ".gitmodules",
                "contents": "[submodule \"lib\"]\n\tpath = vendor/lib\n\turl = ./lib\n\tignore = none\n"}},
            {"step_id": "st", "tool": "run_command", "depends_on": ["gm"],
             "arguments": {"argv": ["git", "status"]}}
        ]),
    );
    assert_eq!(c, 0, "{err}");
    assert!(
        marker.exists(),
        "the residual is documented as reachable this way; if git no longer recurses here, \
         update docs/security.md and this test"
    );
}
