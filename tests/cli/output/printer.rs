//! The one printer (issue 44 §4): every byte the command line writes goes through `cli::Shell`,
//! which redacts. Two secrets are planted so that they reach every kind of output the command line
//! has — human progress on stderr, `--jsonl` events, `--json` results, error messages and machine
//! refusals, GitHub annotations, a confirmation prompt, `validate`, `preview`, `approve`, `show`,
//! `runs`, `artifact`, reports and `export --jsonl` written to stdout, and `doctor` — and both
//! streams of every invocation are searched: neither secret is ever there, and `[REDACTED]`
//! stands where each was, so the test cannot pass by printing nothing.
//!
//! - [`ENV_SECRET`] is in the runner's environment under a secret-looking name (`SHIP_TOKEN`), so
//!   the redactor knows it from the start; the test writes it into the plan's id, a step id, a
//!   command's arguments and output, a database path and a run id asked for.
//! - [`LISTED`] is a `--var` of a variable whose name does not look secret (`deploy`): the
//!   redactor learns it only when it reads the plan, which lists it in `"secrets"`.

use std::process::Output;

use serde_json::json;

use crate::harness::*;

/// The value of `SHIP_TOKEN` in the runner's environment.
const ENV_SECRET: &str = "envsecret-7c41d2";
/// The value of `--var deploy=…`, secret because the plan lists `deploy` in `"secrets"`.
const LISTED: &str = "listedsecret-93b8e0";
/// What stands where a secret was.
const MARK: &str = "[REDACTED]";

/// Which of an invocation's streams must show a replaced secret (`[REDACTED]` after `prefix`).
#[derive(Clone, Copy)]
enum On {
    Out,
    Err,
}

/// Notes in `failures` each secret a stream of `out` holds, and each `(on, prefix)` of `marks`
/// for which `on` does not show `{prefix}[REDACTED]`: every path is checked before the test fails,
/// so a failure lists all the paths that leak.
fn check(failures: &mut Vec<String>, what: &str, out: &Output, marks: &[(On, &str)]) {
    for (name, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        for secret in [ENV_SECRET, LISTED] {
            if contains(bytes, secret) {
                failures.push(format!(
                    "{what}: {name} holds {secret:?}:\n{}",
                    String::from_utf8_lossy(bytes)
                ));
            }
        }
    }
    for (on, prefix) in marks {
        let (name, text) = match on {
            On::Out => ("stdout", stdout(out)),
            On::Err => ("stderr", stderr(out)),
        };
        if !text.contains(&format!("{prefix}{MARK}")) {
            failures.push(format!(
                "{what}: {name} does not show {prefix}{MARK}:\n{text}"
            ));
        }
    }
}

/// The plan: its id and a step id hold [`ENV_SECRET`]; a command's arguments hold both secrets
/// and it prints them on both its streams, then fails (tolerated), so its output is shown.
fn plan(t: &TestDir) -> std::path::PathBuf {
    t.file(
        "acode-policy.json",
        r#"{"allow_commands": ["sh", "printf"], "auto_approve_commands": ["sh", "echo"]}"#,
    );
    t.plan(
        "printer.json",
        &json!({
            "plan_id": format!("ship-{ENV_SECRET}"),
            "variables": {"deploy": ""},
            "secrets": ["deploy"],
            "steps": [
                {"step_id": format!("say-{ENV_SECRET}"), "tool": "run_command",
                 "arguments": {"argv": ["echo", format!("env-{ENV_SECRET}"), "listed-${deploy}"]}},
                {"step_id": "fail", "tool": "run_command", "on_failure": "continue",
                 "arguments": {"argv": ["sh", "-c", format!(
                     "echo out-env-{ENV_SECRET} out-listed-${{deploy}}; \
                      echo err-env-{ENV_SECRET} err-listed-${{deploy}} >&2; exit 3")]}}
            ]
        }),
    )
}

#[test]
fn no_output_path_prints_a_secret() {
    let t = TestDir::new();
    let mut failures = Vec::new();
    let plan = plan(&t);
    let plan = plan.to_str().unwrap();
    let env = [("SHIP_TOKEN", ENV_SECRET)];
    let var = format!("deploy={LISTED}");
    let run = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--var", &var]);
        t.run_with(&all, &env)
    };

    // Reading the plan: validate and preview, for people and for programs.
    let out = run(&["validate", plan]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    check(
        &mut failures,
        "validate",
        &out,
        &[(On::Err, "valid plan ship-")],
    );
    let out = run(&["validate", plan, "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    check(
        &mut failures,
        "validate --json",
        &out,
        &[(On::Out, "\"ship-")],
    );
    let out = run(&["preview", plan]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let marks = [(On::Out, "say-"), (On::Out, "env-"), (On::Out, "listed-")];
    check(&mut failures, "preview", &out, &marks);
    let out = run(&["preview", plan, "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    check(&mut failures, "preview --json", &out, &marks);

    // Approving shows the preview and says what was approved, on stderr.
    let out = run(&["approve", plan, "--by", "tester"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    check(
        &mut failures,
        "approve",
        &out,
        &[(On::Err, "listed-"), (On::Err, "approved plan ship-")],
    );

    // Running: human progress (with the failing step's output) on stderr, events on stdout.
    let out = run(&["run", plan, "--jsonl", "--confirm", "auto-approve"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    check(
        &mut failures,
        "run --jsonl",
        &out,
        &[
            (On::Err, "[1/2] say-"),
            (On::Err, "out-env-"),
            (On::Err, "out-listed-"),
            (On::Err, "err-listed-"),
            (On::Out, "\"step_id\":\"say-"),
            (On::Out, "listed-"),
            (On::Out, "out-env-"),
        ],
    );
    let run_id = events(&out)[0]["run_id"].as_str().unwrap().to_string();
    // The result for programs, and GitHub annotations on stderr.
    let out = t.run_with(
        &[
            "run",
            plan,
            "--json",
            "--annotations",
            "github",
            "--var",
            &var,
        ],
        &env,
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    check(
        &mut failures,
        "run --json --annotations github",
        &out,
        &[(On::Out, "\"ship-"), (On::Out, "out-listed-")],
    );
    assert!(stderr(&out).contains("::"), "{}", stderr(&out));

    // A confirmation prompt quotes the step's arguments (`printf` asks first); stdin is closed, so
    // it is denied.
    let ask = t.plan(
        "ask.json",
        &json!({
            "plan_id": "ask", "variables": {"deploy": ""}, "secrets": ["deploy"],
            "steps": [{"step_id": "look", "tool": "run_command",
                       "arguments": {"argv": ["printf", format!("env-{ENV_SECRET}"), "listed-${deploy}"]}}]
        }),
    );
    let out = run(&[
        "run",
        ask.to_str().unwrap(),
        "--approve",
        "--confirm",
        "prompt",
    ]);
    assert_eq!(code(&out), 33, "{}", stderr(&out));
    check(
        &mut failures,
        "run --confirm prompt",
        &out,
        &[
            (On::Err, "arguments: {\"argv\":[\"printf\",\"env-"),
            (On::Err, "\"listed-"),
        ],
    );

    // Reading the record back: show, runs, an artifact, the reports written to stdout.
    for args in [
        vec!["show", &run_id],
        vec!["show", &run_id, "--json"],
        vec!["runs"],
        vec!["runs", "--json"],
        vec!["report", &run_id, "--html", "-"],
        vec!["report", &run_id, "--junit", "-"],
        vec!["report", &run_id, "--sarif", "-"],
        vec!["export", &run_id, "--jsonl"],
    ] {
        let out = t.run_with(&args, &env);
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
        check(&mut failures, &args.join(" "), &out, &[(On::Out, "ship-")]);
    }
    let execution: String = q(
        &t.db(),
        "SELECT execution_id FROM executions WHERE step_id = 'fail'",
    );
    let out = t.run_with(&["artifact", &execution, "stdout"], &env);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    check(&mut failures, "artifact", &out, &[(On::Out, "out-listed-")]);

    // Errors: the message on stderr, the refusal for programs on stdout, the annotation.
    let missing = format!("run-{ENV_SECRET}");
    let out = t.run_with(&["show", &missing], &env);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    check(
        &mut failures,
        "show of an unknown run",
        &out,
        &[(On::Err, "run-")],
    );
    let out = t.run_with(
        &["show", &missing, "--json"],
        &[("SHIP_TOKEN", ENV_SECRET), ("GITHUB_ACTIONS", "true")],
    );
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    check(
        &mut failures,
        "show --json of an unknown run, under GitHub Actions",
        &out,
        &[
            (On::Out, "run-"),
            (On::Err, "::error title=acode-run refused run-"),
        ],
    );
    let bad = t.plan(
        "bad.json",
        &json!({
            "plan_id": "bad", "variables": {"deploy": ""}, "secrets": ["deploy"],
            "steps": [{"step_id": "r", "tool": "file_read",
                       "arguments": {"path": "../listed-${deploy}/x"}}]
        }),
    );
    let bad = bad.to_str().unwrap();
    let out = run(&["validate", bad]);
    assert_eq!(code(&out), 32, "{}", stderr(&out));
    check(
        &mut failures,
        "an invalid plan",
        &out,
        &[(On::Err, "listed-")],
    );
    let out = run(&["validate", bad, "--json"]);
    assert_eq!(code(&out), 32, "{}", stderr(&out));
    check(
        &mut failures,
        "an invalid plan, --json",
        &out,
        &[(On::Out, "listed-")],
    );
    let out = run(&["run", bad, "--jsonl"]);
    assert_eq!(code(&out), 32, "{}", stderr(&out));
    check(
        &mut failures,
        "a run refused, --jsonl",
        &out,
        &[(On::Err, "listed-"), (On::Out, "listed-")],
    );

    // doctor: where the database is, for people and for programs.
    let dir = t.root.join(format!("db-{ENV_SECRET}"));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("doctor.db");
    let db = db.to_str().unwrap();
    for json in [false, true] {
        let mut args = vec!["doctor", "--db", db];
        if json {
            args.push("--json");
        }
        let out = t.run_with(&args, &env);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        check(&mut failures, &args.join(" "), &out, &[(On::Out, "db-")]);
    }
    assert!(
        failures.is_empty(),
        "{} leak(s) or missing mark(s):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
