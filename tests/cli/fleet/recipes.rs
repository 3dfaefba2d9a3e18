//! The fleet recipes (`examples/fleet/`, docs/fleet.md), tested as far as this machine allows:
//! every `acode-run` command line in them parses with the binary's own flag parser, the job script
//! is valid shell, and (opt-in, `ACODE_E2E_NET=1`: the validators come from the registries) the
//! workflows pass `@action-validator/cli` and `check-jsonschema`, the manifests
//! `kubernetes-validate --strict`, each validator refusing a broken copy too.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/fleet")
}

/// The `acode-run` command lines of `text`: shell-like lines (`acode-run …`, through `exec` or a
/// YAML `- ` or `run:`) and JSON arrays (`["acode-run", …]`).
fn command_lines(text: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        if let Some(at) = line.find("[\"acode-run\"") {
            let array = &line[at..=line.rfind(']').unwrap()];
            let words: Vec<String> = serde_json::from_str(array).unwrap();
            found.push(words[1..].to_vec());
        } else if let Some(at) = line.find("acode-run ") {
            let before = &line[..at];
            let shell_start = before.is_empty()
                || before.ends_with("- ")
                || before.ends_with("run: ")
                || before.ends_with("exec ");
            if !shell_start {
                continue;
            }
            // Variables as a shell would leave them: one word each.
            let command = line[at..].replace("${CI_NODE_INDEX}", "0");
            let words = shlex::split(&command).expect("balanced quotes");
            found.push(words[1..].to_vec());
        }
    }
    found
}

#[test]
fn every_command_line_of_the_fleet_recipes_parses() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(examples())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/fleet.md"));
    let mut seen = 0;
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for words in command_lines(&text) {
            match acode_run::cli::flags::parse(words.iter()) {
                Ok(acode_run::cli::flags::Parsed::Run(_)) => seen += 1,
                other => panic!(
                    "{}: acode-run {words:?} does not parse: {other:?}",
                    file.display()
                ),
            }
        }
    }
    assert!(seen >= 15, "only {seen} command lines found");
    let sh = Command::new("sh")
        .arg("-n")
        .arg(examples().join("fleet-job.sh"))
        .output()
        .unwrap();
    assert!(
        sh.status.success(),
        "{}",
        String::from_utf8_lossy(&sh.stderr)
    );
}

/// Runs `program args… file` and says whether it accepted the file.
fn accepts(program: &Path, args: &[&str], file: &Path) -> (bool, String) {
    let out = Command::new(program).args(args).arg(file).output().unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Each recipe passes its validator, and a copy with `from` replaced by `to` does not.
fn validated(t: &TestDir, program: &Path, args: &[&str], file: &str, from: &str, to: &str) {
    let original = examples().join(file);
    let (ok, said) = accepts(program, args, &original);
    assert!(ok, "{} refuses {file}:\n{said}", program.display());
    let text = std::fs::read_to_string(&original).unwrap();
    assert!(text.contains(from), "{file} has no {from:?} to break");
    let broken = t.root.join(format!("broken-{file}"));
    std::fs::write(&broken, text.replacen(from, to, 1)).unwrap();
    let (ok, said) = accepts(program, args, &broken);
    assert!(
        !ok,
        "{} accepts a broken {file}:\n{said}",
        program.display()
    );
}

#[test]
fn the_fleet_recipes_pass_their_validators() {
    if !e2e_net(
        "kubernetes-validate and check-jsonschema (Python registry), @action-validator/cli (npm)",
    ) {
        return;
    }
    let t = TestDir::new();
    let venv = t.root.join("venv");
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let pip = Command::new(venv.join("bin/pip"))
        .args([
            "install",
            "--quiet",
            "kubernetes-validate",
            "check-jsonschema",
        ])
        .output()
        .unwrap();
    assert!(
        pip.status.success(),
        "pip: {}",
        String::from_utf8_lossy(&pip.stderr)
    );
    let node = t.root.join("node");
    std::fs::create_dir_all(&node).unwrap();
    let npm = Command::new("npm")
        .args([
            "install",
            "--silent",
            "--no-audit",
            "--no-fund",
            "@action-validator/cli",
        ])
        .current_dir(&node)
        .output()
        .expect("npm runs (scripts/test.sh installs it with ACODE_E2E_NET=1)");
    assert!(
        npm.status.success(),
        "npm: {}",
        String::from_utf8_lossy(&npm.stderr)
    );

    let kubernetes = venv.join("bin/kubernetes-validate");
    for file in ["kubernetes.yaml", "kubernetes-merge.yaml"] {
        validated(
            &t,
            &kubernetes,
            &["--strict"],
            file,
            "restartPolicy:",
            "restartPolicyy:",
        );
    }
    let check = venv.join("bin/check-jsonschema");
    validated(
        &t,
        &check,
        &["--builtin-schema", "vendor.github-workflows"],
        "github-actions.yml",
        "runs-on:",
        "runs-onn:",
    );
    validated(
        &t,
        &check,
        &["--builtin-schema", "vendor.gitlab-ci"],
        "gitlab-ci.yml",
        "when: always",
        "when: sometimes",
    );
    validated(
        &t,
        &node.join("node_modules/.bin/action-validator"),
        &[],
        "github-actions.yml",
        "runs-on:",
        "runs-onn:",
    );
}
