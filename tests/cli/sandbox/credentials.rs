//! Issue #32: a command sees the system, the workspace and its own program's installation; it
//! never sees a home directory or a credential file — under bwrap and under Landlock alone alike.
//! Each credential file a CI machine may hold is planted in a fake `HOME` (and a `CARGO_HOME` with
//! `credentials.toml`) with a unique marker; a command tries to read every one; the marker must be
//! in no output and nowhere in the raw bytes of the execution database, while programs installed
//! in that `HOME` (a pyenv version, cargo's `bin/`) still run.

use std::path::PathBuf;

use serde_json::json;

use crate::harness::*;

/// The credential files planted, relative to the fake `HOME`.
const CREDENTIALS: &[&str] = &[
    ".ssh/id_rsa",
    ".aws/credentials",
    ".netrc",
    ".git-credentials",
    ".docker/config.json",
    ".config/gh/hosts.yml",
    ".cargo/credentials.toml",
];

/// The sandbox modes that must hide them: both OS sandboxes, and `auto` (whichever it picks).
fn modes() -> Vec<&'static str> {
    let mut out = vec!["landlock", "auto"];
    if bwrap_ok() {
        out.push("bwrap");
    }
    out
}

#[test]
fn credential_files_in_home_are_unreadable_and_never_recorded_in_any_mode() {
    if acode_run::sandbox::landlock::kernel_abi().is_none() {
        acode_run::testing::skip("Landlock", "the kernel has none");
        return;
    }
    for mode in modes() {
        let t = TestDir::new();
        let home = t.root.join("home");
        let marker = format!("acode-credential-{}", uuid::Uuid::new_v4().simple());
        for rel in CREDENTIALS {
            let p = home.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, format!("secret = {marker}\n")).unwrap();
        }
        // Programs installed in that HOME: a pyenv version's tool and one in cargo's bin/.
        let pyenv_bin = home.join(".pyenv/versions/9.9.9/bin");
        exe(
            &pyenv_bin.join("acode-pytool"),
            "#!/bin/sh\necho pytool-ran\n",
        );
        let cargo_home = home.join(".cargo");
        exe(
            &cargo_home.join("bin/acode-cargotool"),
            "#!/bin/sh\necho cargotool-ran\n",
        );
        let targets: Vec<String> = CREDENTIALS
            .iter()
            .map(|r| format!("{:?}", home.join(r).to_str().unwrap()))
            .chain([format!("{:?}", home.join(".ssh").to_str().unwrap())])
            .collect();
        // Reads only; whatever is read is printed, so a regression shows in the record.
        t.file(
            "probe.py",
            &format!(
                "import os\n\
                 for p in [{}]:\n    \
                 try:\n        \
                 data = os.listdir(p) if os.path.isdir(p) else open(p).read()\n        \
                 print('READ', p, data)\n    \
                 except OSError as e:\n        \
                 print('refused', p, type(e).__name__)\n",
                targets.join(", ")
            ),
        );
        t.file(
            "acode-policy.json",
            &json!({"allow_commands": ["python3", "acode-pytool", "acode-cargotool"],
                    "auto_approve_commands": ["python3", "acode-pytool", "acode-cargotool"]})
            .to_string(),
        );
        let plan = t.plan(
            "creds.json",
            &json!({"plan_id": "creds", "steps": [
                {"step_id": "probe", "tool": "run_command", "arguments": {"argv": ["python3", "probe.py"]}},
                {"step_id": "pytool", "tool": "run_command", "arguments": {"argv": ["acode-pytool"]}},
                {"step_id": "cargotool", "tool": "run_command", "arguments": {"argv": ["acode-cargotool"]}}]}),
        );
        let path = format!(
            "{}:{}:/usr/bin:/bin",
            pyenv_bin.display(),
            cargo_home.join("bin").display()
        );
        let with_home = |args: &[&str]| {
            let mut c = t.cmd();
            c.env("HOME", &home)
                .env("CARGO_HOME", &cargo_home)
                .env_remove("RUSTUP_HOME")
                .env("PATH", &path)
                .args(args);
            c.output().unwrap()
        };
        let p = plan.to_str().unwrap();
        let out = with_home(&["approve", p, "--by", "tester"]);
        assert_eq!(code(&out), 0, "{mode}: {}", stderr(&out));
        let out = with_home(&["run", p, "--sandbox", mode, "--json"]);
        let all = format!("{}{}", stdout(&out), stderr(&out));
        assert_eq!(code(&out), 0, "{mode}: {all}");
        assert!(
            !all.contains(&marker),
            "{mode}: the marker was printed: {all}"
        );
        let db: PathBuf = t.ws.join(".acode/executions.db");
        let mut raw = std::fs::read(&db).unwrap();
        for suffix in ["-wal", "-journal"] {
            let mut name = db.clone().into_os_string();
            name.push(suffix);
            if let Ok(more) = std::fs::read(PathBuf::from(name)) {
                raw.extend(more);
            }
        }
        assert!(
            !String::from_utf8_lossy(&raw).contains(&marker),
            "{mode}: a credential is in the database"
        );
        let outputs = t.artifacts("stdout");
        let text = outputs.join("\n");
        // The probe really ran and tried every file (and listing `~/.ssh`). (Under bwrap the home
        // directory itself exists, as the parent of the mounted toolchain home, and is empty but
        // for it.)
        assert_eq!(
            text.matches("refused ").count(),
            CREDENTIALS.len() + 1,
            "{mode}: {text}"
        );
        assert!(!text.contains("READ "), "{mode}: {text}");
        assert!(text.contains("pytool-ran"), "{mode}: {text}");
        assert!(text.contains("cargotool-ran"), "{mode}: {text}");
    }
}

#[test]
fn a_program_that_cannot_be_shown_without_its_home_is_refused_the_same_way_in_every_mode() {
    let t = TestDir::new();
    let home = t.root.join("home");
    // A program directly in HOME (on PATH there): its installation would be HOME itself, which no
    // mode shows. (One in `HOME/bin` is shown as `HOME/bin` alone.)
    exe(&home.join("acode-hometool"), "#!/bin/sh\necho ran\n");
    let plan = t.plan(
        "home.json",
        &json!({"plan_id": "home", "steps": [
            {"step_id": "tool", "tool": "run_command", "arguments": {"argv": ["acode-hometool"]}}]}),
    );
    let path = format!("{}:/usr/bin:/bin", home.display());
    let mut said = Vec::new();
    for mode in ["landlock", "bwrap", "auto", "none"] {
        t.file(
            "acode-policy.json",
            &json!({"sandbox": mode, "allow_commands": ["acode-hometool"]}).to_string(),
        );
        let out = t
            .cmd()
            .env("HOME", &home)
            .env("PATH", &path)
            .args(["validate", plan.to_str().unwrap()])
            .output()
            .unwrap();
        let err = format!("{}{}", stdout(&out), stderr(&out));
        assert_ne!(code(&out), 0, "{mode}: {err}");
        assert!(
            err.contains("without exposing") && err.contains("which no sandbox mode shows"),
            "{mode}: {err}"
        );
        said.push(err.replace(mode, "MODE"));
    }
    assert!(
        said.windows(2).all(|w| w[0] == w[1]),
        "the same message in every mode: {said:#?}"
    );
}
