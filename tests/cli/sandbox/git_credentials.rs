//! A credential a checkout step persisted in the workspace's `.git/config` (issue #32 item 5):
//! `http.<url>.extraheader = AUTHORIZATION: basic …` (what actions/checkout writes) and a token in
//! a remote URL. Under bwrap no command can read it (`cat`, `git config`, a decoding script) while
//! git still works in the repository; under Landlock and without a sandbox the header and
//! `preview` warn; in every mode neither the token, its Base64 form nor the decoded pair is in the
//! raw bytes of the database or in anything printed.

use base64::Engine;
use serde_json::json;

use crate::harness::*;

/// The secrets one workspace holds: a header token, a URL token, and the forms they take.
struct Planted {
    header_token: String,
    url_token: String,
    basic: String,
    decoded: String,
}

impl Planted {
    /// Every form that must never be stored or printed.
    fn forms(&self) -> [&str; 4] {
        [
            &self.header_token,
            &self.url_token,
            &self.basic,
            &self.decoded,
        ]
    }
}

/// A repository with one commit whose `.git/config` holds what actions/checkout persists, and a
/// token in the remote URL. The tokens match no built-in redaction pattern: only knowing them
/// can keep them out.
fn workspace_with_persisted_credentials(t: &TestDir) -> Planted {
    git(t, &["init", "-q"]);
    t.file("a.txt", "a\n");
    git(t, &["add", "a.txt"]);
    git(t, &["commit", "-qm", "first-commit-subject"]);
    let header_token = format!("hdrtok{}", uuid::Uuid::new_v4().simple());
    let url_token = format!("urltok{}", uuid::Uuid::new_v4().simple());
    let decoded = format!("x-access-token:{header_token}");
    let basic = base64::engine::general_purpose::STANDARD.encode(&decoded);
    git(
        t,
        &[
            "remote",
            "add",
            "origin",
            &format!("https://x-access-token:{url_token}@git.example.org/o/r.git"),
        ],
    );
    git(
        t,
        &[
            "config",
            "--local",
            "http.https://git.example.org/.extraheader",
            &format!("AUTHORIZATION: basic {basic}"),
        ],
    );
    Planted {
        header_token,
        url_token,
        basic,
        decoded,
    }
}

/// A script that finds the header in `.git/config` and prints it decoded, as an attacker would.
const DECODE: &str = "import base64, re\n\
    text = open('.git/config').read()\n\
    m = re.search(r'basic (\\S+)', text)\n\
    print('decoded:', base64.b64decode(m.group(1)).decode() if m else 'NO HEADER')\n";

fn steps() -> serde_json::Value {
    let step = |id: &str, argv: &[&str]| {
        json!({"step_id": id, "tool": "run_command", "arguments": {"argv": argv},
               "on_failure": "continue", "depends_on": []})
    };
    json!([
        step("cat", &["cat", ".git/config"]),
        step("regexp", &["git", "config", "--get-regexp", "."]),
        step("status", &["git", "status", "--short", "--branch"]),
        step("log", &["git", "log", "--oneline"]),
        step("decode", &["python3", "-c", DECODE]),
    ])
}

#[test]
fn a_persisted_checkout_credential_is_unreadable_under_bwrap_and_never_stored_or_printed() {
    let mut modes = vec!["landlock", "none"];
    if bwrap_ok() {
        modes.insert(0, "bwrap");
    }
    for mode in modes {
        let t = TestDir::new();
        let planted = workspace_with_persisted_credentials(&t);
        let config_before = t.read(".git/config");
        assert!(
            config_before.contains(&planted.basic) && config_before.contains(&planted.url_token)
        );
        t.file("acode-policy.json", &json!({"sandbox": mode}).to_string());
        let plan = t.plan("creds.json", &json!({"plan_id": "creds", "steps": steps()}));

        let preview = t.run(&["preview", plan.to_str().unwrap()]);
        let preview_text = format!("{}{}", stdout(&preview), stderr(&preview));
        assert!(
            preview_text.contains("the workspace's .git/config holds a credential")
                && preview_text.contains("http.https://git.example.org/.extraheader")
                && preview_text.contains("remote.origin.url")
                && preview_text.contains("persist-credentials: false"),
            "{mode}: {preview_text}"
        );
        let preview_json = t.run(&["preview", plan.to_str().unwrap(), "--json"]);

        // Every report a CI job gets, too: JUnit, the GitHub summary, outputs and annotations.
        let junit = t.root.join("report.xml");
        let summary = t.root.join("summary.md");
        let outputs = t.root.join("outputs.txt");
        let out = t
            .cmd()
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_STEP_SUMMARY", &summary)
            .env("GITHUB_OUTPUT", &outputs)
            .args([
                "run",
                "--approve",
                plan.to_str().unwrap(),
                "--jsonl",
                "--junit",
                junit.to_str().unwrap(),
                "--confirm",
                "auto-deny",
            ])
            .output()
            .unwrap();
        let run_text = format!("{}{}", stdout(&out), stderr(&out));
        assert_eq!(code(&out), 0, "{mode}: {run_text}");
        // The header says what this mode shows commands.
        let warned = if mode == "bwrap" {
            "commands under bwrap read a copy without it"
        } else {
            "commands CAN READ IT in this mode"
        };
        assert!(run_text.contains(warned), "{mode}: {run_text}");
        let reports: String = [&junit, &summary, &outputs]
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap_or_default())
            .collect();
        assert!(
            reports.contains("creds"),
            "{mode}: the reports were written: {reports}"
        );
        let printed = format!(
            "{run_text}{preview_text}{}{}{reports}",
            stdout(&preview_json),
            stderr(&preview_json)
        );

        // git still works in the repository, in every mode.
        let log = stdout_of(&t, "log");
        assert!(log.contains("first-commit-subject"), "{mode}: {log}");
        let status = stdout_of(&t, "status");
        assert!(status.starts_with("## "), "{mode}: {status}");

        let cat = stdout_of(&t, "cat");
        let regexp = stdout_of(&t, "regexp");
        let decode = stdout_of(&t, "decode");
        if mode == "bwrap" {
            // Not redacted: not there. The remote stays, without its userinfo.
            for text in [&cat, &regexp] {
                assert!(!text.contains("extraheader"), "{mode}: {text}");
                assert!(!text.contains("[REDACTED]"), "{mode}: {text}");
                assert!(
                    text.contains("https://git.example.org/o/r.git"),
                    "{mode}: {text}"
                );
            }
            assert!(decode.contains("decoded: NO HEADER"), "{mode}: {decode}");
        } else {
            // Readable here (the header warned): the command printed it, the record has it
            // redacted.
            assert!(cat.contains("extraheader"), "{mode}: {cat}");
            assert!(cat.contains("[REDACTED]"), "{mode}: {cat}");
            assert!(decode.contains("decoded: [REDACTED]"), "{mode}: {decode}");
        }

        let raw = database_bytes(&t);
        assert!(!raw.is_empty());
        for secret in planted.forms() {
            assert!(
                !contains(&raw, secret),
                "{mode}: {secret} is in the database"
            );
            assert!(!printed.contains(secret), "{mode}: {secret} was printed");
        }
        // The workspace's own file is untouched.
        assert_eq!(t.read(".git/config"), config_before, "{mode}");
    }
}

/// [`DECODE`] for the nested repository's and the submodule's configurations.
const DECODE_BOTH: &str = "import base64, re\n\
    for f in ['vendor/lib/.git/config', '.git/modules/sub/config']:\n\
    \x20   m = re.search(r'basic (\\S+)', open(f).read())\n\
    \x20   print('decoded:', base64.b64decode(m.group(1)).decode() if m else 'NO HEADER')\n";

/// A nested repository's persisted credential (a vendored checkout, a submodule's configuration
/// under `.git/modules/`): readable by commands in every mode (only the workspace's own
/// `.git/config` is replaced under bwrap), so the runner learns it before the run and neither
/// form of it reaches the database or anything printed.
#[test]
fn a_nested_repositorys_persisted_credential_is_never_stored_or_printed() {
    let mut modes = vec!["landlock", "none"];
    if bwrap_ok() {
        modes.insert(0, "bwrap");
    }
    for mode in modes {
        let t = TestDir::new();
        git(&t, &["init", "-q"]);
        git(&t, &["init", "-q", "vendor/lib"]);
        // Basic tokens, as actions/checkout writes them: no built-in pattern matches these
        // forms, only knowing them keeps them out.
        let basic = |token: &str| {
            base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{token}"))
        };
        let (nested, module) = (
            format!("nsttok{}", uuid::Uuid::new_v4().simple()),
            format!("modtok{}", uuid::Uuid::new_v4().simple()),
        );
        let (header_token, module_token) = (basic(&nested), basic(&module));
        git(
            &t,
            &[
                "-C",
                "vendor/lib",
                "config",
                "--local",
                "http.https://git.example.org/.extraheader",
                &format!("AUTHORIZATION: basic {header_token}"),
            ],
        );
        std::fs::create_dir_all(t.ws.join(".git/modules/sub")).unwrap();
        t.file(
            ".git/modules/sub/config",
            &format!(
                "[http \"https://git.example.org/\"]\n\textraheader = AUTHORIZATION: basic {module_token}\n"
            ),
        );
        t.file("acode-policy.json", &json!({"sandbox": mode}).to_string());
        let step = |id: &str, argv: &[&str]| {
            json!({"step_id": id, "tool": "run_command", "arguments": {"argv": argv},
                   "on_failure": "continue", "depends_on": []})
        };
        let plan = t.plan(
            "nested.json",
            &json!({"plan_id": "nested", "steps": [
                step("cat", &["cat", "vendor/lib/.git/config"]),
                step("module", &["cat", ".git/modules/sub/config"]),
                step("decode", &["python3", "-c", DECODE_BOTH]),
            ]}),
        );
        let out = t
            .cmd()
            .args(["run", "--approve", plan.to_str().unwrap(), "--jsonl"])
            .output()
            .unwrap();
        let printed = format!("{}{}", stdout(&out), stderr(&out));
        assert_eq!(code(&out), 0, "{mode}: {printed}");
        // The commands read the files (it is the record that must not keep the tokens).
        assert!(
            stdout_of(&t, "cat").contains("extraheader"),
            "{mode}: {}",
            stdout_of(&t, "cat")
        );
        assert!(
            stdout_of(&t, "module").contains("extraheader = [REDACTED]"),
            "{mode}: {}",
            stdout_of(&t, "module")
        );
        // An attacker's script decoded both: the record has neither pair.
        let decode = stdout_of(&t, "decode");
        assert_eq!(
            decode.matches("decoded: [REDACTED]").count(),
            2,
            "{mode}: {decode}"
        );
        let raw = database_bytes(&t);
        let pairs = [
            format!("x-access-token:{nested}"),
            format!("x-access-token:{module}"),
        ];
        for secret in [&header_token, &module_token, &pairs[0], &pairs[1]] {
            assert!(
                !contains(&raw, secret),
                "{mode}: {secret} is in the database"
            );
            assert!(
                !printed.contains(secret.as_str()),
                "{mode}: {secret} was printed"
            );
        }
    }
}
