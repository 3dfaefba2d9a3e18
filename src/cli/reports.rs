//! Writing a finished run's CI reports (`--junit`, `--report-html`, GitHub annotations and job
//! summary), and `acode-run report RUN_ID --html FILE`.
//!
//! A report that cannot be written is a warning, not a change of exit code: the run's outcome is
//! already recorded, and a CI job should fail for the plan's reasons, not for a full summary file.

use std::io::Write;

use super::flags::{Annotations, Args};
use super::shell::Shell;
use crate::executor::ExecutionResult;
use crate::report::{ArtifactSource, github, html, junit};

/// Whether GitHub annotations are wanted: `--annotations`, else `GITHUB_ACTIONS=true`.
fn wants_github(args: &Args) -> bool {
    match args.annotations {
        Some(a) => a == Annotations::Github,
        None => std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true"),
    }
}

/// Whether this command needs every step's result after the run (`--json`, a JUnit file, GitHub
/// annotations); without them the executor drops each result once it is recorded, so a long
/// plan's memory stays flat.
pub(super) fn needs_step_results(args: &Args) -> bool {
    args.json || args.junit.is_some() || wants_github(args)
}

/// Appends `text` to the file an environment variable names (`GITHUB_STEP_SUMMARY`,
/// `GITHUB_OUTPUT`); a failure is a warning naming `what`.
fn append_to_env_file(shell: &Shell, var: &str, what: &str, text: &str) {
    let Some(path) = std::env::var_os(var).filter(|p| !p.is_empty()) else {
        return;
    };
    let appended = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&path)
        .and_then(|mut f| f.write_all(text.as_bytes()));
    if let Err(e) = appended {
        shell.warn(format_args!(
            "cannot append the {what} to {}: {e}",
            std::path::Path::new(&path).display()
        ));
    }
}

/// The reports for an invocation that ended before any step ran (exit 2, 3, 1 before the run):
/// the JUnit file (when the command line got far enough to name one), the annotation, the job
/// summary and `$GITHUB_OUTPUT`, so a CI page says why instead of nothing. `subject` is the plan
/// or run the command was about.
pub(super) fn write_refusal(
    shell: &Shell,
    args: Option<&Args>,
    subject: &str,
    exit_code: i32,
    message: &str,
    problems: &[String],
) {
    let redactor = shell.redactor();
    let refusal = crate::report::Refusal {
        subject,
        exit_code,
        message,
        problems,
    };
    // `report` writes the reports of recorded runs: a refusal of it is said on stderr, never
    // written into its --junit or --html file.
    let args_of_run = args.filter(|a| a.command != super::flags::Command::Report);
    if let Some(path) = args_of_run.and_then(|a| a.junit.as_ref()) {
        let xml = junit::render_refusal(&refusal, redactor);
        if let Err(e) = std::fs::write(path, xml) {
            shell.warn(format_args!(
                "cannot write the JUnit report {}: {e}",
                path.display()
            ));
        }
    }
    if let Some(path) = args_of_run.and_then(|a| a.report_html.as_ref()) {
        write_html(
            shell,
            path,
            html::render_refusal(&refusal, redactor).as_bytes(),
        );
    }
    let github = match args {
        Some(a) => wants_github(a),
        None => std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true"),
    };
    if github {
        shell.err_page(&github::refusal_annotation(&refusal, redactor));
        let summary = github::refusal_summary(&refusal, redactor);
        append_to_env_file(shell, "GITHUB_STEP_SUMMARY", "job summary", &summary);
        append_to_env_file(
            shell,
            "GITHUB_OUTPUT",
            "step outputs",
            &github::outputs(exit_code, "refused", ""),
        );
    }
}

/// Writes `page` to `path` (`-`: stdout, through the Shell).
pub(super) fn write_page(
    shell: &Shell,
    path: &std::path::Path,
    page: &[u8],
) -> std::io::Result<()> {
    if path.as_os_str() == "-" {
        shell.out_page(&String::from_utf8_lossy(page));
        Ok(())
    } else {
        std::fs::write(path, page)
    }
}

/// Writes `page` to `path` (`-`: stdout); a failure is a warning.
fn write_html(shell: &Shell, path: &std::path::Path, page: &[u8]) {
    if let Err(e) = write_page(shell, path, page) {
        shell.warn(format_args!(
            "cannot write the HTML report {}: {e}",
            path.display()
        ));
    }
}

/// `acode-run report RUN_ID --html FILE`: the run's page, rendered completely before the file is
/// opened, so an unknown run or an unreadable database writes nothing.
pub(super) fn cmd_report(args: &Args, shell: &Shell) -> Result<i32, super::CliError> {
    use crate::error::exit;
    let redactor = shell.redactor();
    if args.report_html.is_none() && args.sarif.is_none() && args.junit.is_none() {
        return Err(super::CliError::new(
            exit::USAGE,
            "report needs --html FILE (or --html - for stdout), --junit FILE or --sarif FILE",
        ));
    }
    let Some(run_id) = args.positionals.first() else {
        return cmd_fleet_report(args, shell);
    };
    let store = super::query_store(args)?;
    if let Some(path) = &args.sarif {
        let run_id = store.run(run_id)?.run_id;
        write_sarif(shell, &store, &run_id, path)
            .map_err(|e| super::CliError::new(exit::INTERNAL, e))?;
    }
    if let Some(path) = &args.report_html {
        let mut page = Vec::new();
        html::render(&store, run_id, redactor, &mut page)?;
        write_page(shell, path, &page).map_err(|e| {
            super::CliError::new(
                exit::INTERNAL,
                format!("cannot write the HTML report {}: {e}", path.display()),
            )
        })?;
    }
    if let Some(path) = &args.junit {
        // The run as recorded (it may have run on another machine: a merged database).
        let result = crate::report::recorded::result(&store, run_id)?;
        let provenance = crate::report::Provenance::read(&store, &result.run_id);
        let xml = junit::render(&result, &store, redactor, None, &provenance);
        write_page(shell, path, xml.as_bytes()).map_err(|e| {
            super::CliError::new(
                exit::INTERNAL,
                format!("cannot write the JUnit report {}: {e}", path.display()),
            )
        })?;
    }
    Ok(exit::OK)
}

/// `report --html FILE` / `--junit FILE` without a run id: the fleet page and a testsuite per
/// run, each rendered whole before its file is opened (a database that cannot be read writes
/// nothing).
fn cmd_fleet_report(args: &Args, shell: &Shell) -> Result<i32, super::CliError> {
    let redactor = shell.redactor();
    let store = super::query_store(args)?;
    if store.fleet_run_ids()?.is_empty() {
        return Err(super::CliError::new(
            crate::error::exit::USAGE,
            "no plan runs in the database: nothing to report",
        ));
    }
    if let Some(path) = &args.report_html {
        let mut page = Vec::new();
        crate::report::fleet::render(&store, redactor, &mut page)?;
        write_page(shell, path, &page).map_err(|e| {
            super::CliError::new(
                crate::error::exit::INTERNAL,
                format!("cannot write the fleet page {}: {e}", path.display()),
            )
        })?;
    }
    if let Some(path) = &args.junit {
        let xml = crate::report::recorded::fleet_junit(&store, redactor)?;
        write_page(shell, path, xml.as_bytes()).map_err(|e| {
            super::CliError::new(
                crate::error::exit::INTERNAL,
                format!("cannot write the JUnit report {}: {e}", path.display()),
            )
        })?;
    }
    Ok(crate::error::exit::OK)
}

/// Writes run `run_id`'s SARIF file to `path` (`-`: stdout); the error says what failed.
fn write_sarif(
    shell: &Shell,
    store: &crate::store::Store,
    run_id: &str,
    path: &std::path::Path,
) -> Result<(), String> {
    let doc = crate::report::sarif::render(store, run_id, shell.redactor())
        .map_err(|e| format!("cannot write the SARIF file {}: {e}", path.display()))?;
    let text = serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n";
    write_page(shell, path, text.as_bytes())
        .map_err(|e| format!("cannot write the SARIF file {}: {e}", path.display()))
}

/// Writes every report the flags and environment ask for; `store` is the run's database.
pub(super) fn write(
    shell: &Shell,
    args: &Args,
    result: &ExecutionResult,
    store: &crate::store::Store,
    sandbox: &crate::events::SandboxInfo,
) {
    let redactor = shell.redactor();
    let source: &dyn ArtifactSource = store;
    let provenance = crate::report::Provenance::read(store, &result.run_id);
    if let Some(path) = &args.junit {
        let xml = junit::render(result, source, redactor, Some(sandbox), &provenance);
        if let Err(e) = std::fs::write(path, xml) {
            shell.warn(format_args!(
                "cannot write the JUnit report {}: {e}",
                path.display()
            ));
        }
    }
    if let Some(path) = &args.sarif
        && let Err(e) = write_sarif(shell, store, &result.run_id, path)
    {
        shell.warn(e);
    }
    if let Some(path) = &args.report_html {
        let mut page = Vec::new();
        match html::render(store, &result.run_id, redactor, &mut page) {
            Ok(()) => write_html(shell, path, &page),
            Err(e) => shell.warn(format_args!(
                "cannot write the HTML report {}: {e}",
                path.display()
            )),
        }
    }
    if wants_github(args) {
        shell.err_page(&github::annotations(result, source, redactor));
        append_to_env_file(
            shell,
            "GITHUB_STEP_SUMMARY",
            "job summary",
            &github::summary(result, redactor, Some(sandbox), &provenance),
        );
        append_to_env_file(
            shell,
            "GITHUB_OUTPUT",
            "step outputs",
            &github::outputs(result.exit_code, result.status.as_str(), &result.run_id),
        );
    }
}

/// `run --json`: the run's result as pretty JSON on stdout, through the Shell (every string
/// redacted).
///
/// Written step by step instead of as one redacted `Value` tree: a tree of a 100 000-step result
/// (plus its redacted copy and the text) took hundreds of MB, while a step at a time keeps the
/// output's cost at one step ([`Shell::out_json_streamed`]). The bytes are the same as
/// `to_string_pretty` of the whole redacted value: keys in the sorted order a `serde_json::Map`
/// has, `steps` at its place among them.
pub(super) fn write_json(shell: &Shell, result: &ExecutionResult) -> std::io::Result<()> {
    // Everything but the steps is a handful of fields.
    let mut top = match serde_json::to_value(result.without_steps())? {
        serde_json::Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    top.remove("steps");
    shell.out_json_streamed(top, "steps", |emit| {
        for step in &result.steps {
            emit(serde_json::to_value(step));
        }
    })
}

/// What a run started now would do beyond the plan's steps, for `preview --json`: the
/// confirmation mode, the sandbox (or why none can be had), and what `run` would decide about
/// the approval.
pub(super) struct Outlook<'a> {
    /// `prompt`, `auto-approve` or `auto-deny`.
    pub confirm_mode: &'a str,
    /// The sandbox a run would get, or why it cannot.
    pub sandbox: &'a Result<crate::events::SandboxInfo, String>,
    /// What `run` would decide ([`crate::runner::session::Session::approval`]).
    pub approval: &'a crate::runner::session::ApprovalOutlook,
}

/// `preview --json`: the bytes of `to_string_pretty` of the whole redacted [`Preview`]
/// (with `confirm_mode` added), written one step at a time as `write_json` writes a run, so a
/// 100 000-step plan is previewed in bounded memory. The walk is prepared (every step substituted)
/// before the first byte, so a plan that cannot be previewed writes nothing.
///
/// [`Preview`]: crate::preview::Preview
pub(super) fn write_preview_json(
    shell: &Shell,
    plan: &crate::plan::Plan,
    ws: &crate::workspace::Workspace,
    policy: &crate::policy::Policy,
    outlook: &Outlook,
) -> Result<std::io::Result<()>, Vec<crate::plan::Problem>> {
    let walk = crate::preview::Walk::new(plan, ws)?;
    let notes = walk.notes(plan, ws, policy);
    // The fields of `Preview` but its steps, as `serde_json::to_value` of it would have them.
    let mut top = serde_json::Map::new();
    top.insert("plan_id".into(), plan.plan_id.clone().into());
    top.insert("plan_sha256".into(), plan.sha256.clone().into());
    if let Some(intent) = plan.intent
        && let Ok(v) = serde_json::to_value(intent)
    {
        top.insert("intent".into(), v);
    }
    top.insert(
        "notes".into(),
        serde_json::to_value(notes).unwrap_or_default(),
    );
    top.insert("confirm_mode".into(), outlook.confirm_mode.into());
    match outlook.sandbox {
        Ok(info) => {
            top.insert(
                "sandbox".into(),
                serde_json::to_value(info).unwrap_or_default(),
            );
        }
        Err(e) => {
            top.insert("sandbox_error".into(), e.clone().into());
        }
    }
    // What `run` would decide now (the same decision, `Session::approval`).
    top.insert(
        "approval".into(),
        serde_json::to_value(outlook.approval).unwrap_or_default(),
    );
    Ok(shell.out_json_streamed(top, "steps", |emit| {
        walk.run(plan, ws, policy, |_, step| {
            emit(serde_json::to_value(&step))
        });
    }))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::cli::flags::{Parsed, parse};
    use crate::cli::shell::Shell;
    use crate::error::ErrorKind;
    use crate::executor::{ExecutionResult, RunStatus, StepResult, StepStatus};
    use crate::redact::Redactor;

    /// The streamed `--json` output is byte for byte what serialising the whole redacted value
    /// gives, secrets redacted in every field (an id, an error, an output).
    #[test]
    fn streamed_json_is_the_whole_redacted_value() {
        let redactor = Arc::new(Redactor::new());
        redactor.add_values(["hunter2-secret-value"]);
        let step = |id: &str, error: Option<&str>| StepResult {
            step_id: id.into(),
            tool: "run_command".into(),
            status: if error.is_some() {
                StepStatus::Failed
            } else {
                StepStatus::Completed
            },
            error_kind: error.map(|_| ErrorKind::ToolFailed),
            error: error.map(String::from),
            attempts: 1,
            duration_ms: 3,
            output: Some("said \"hunter2-secret-value\"".into()),
            output_truncated: false,
            failure_output: error.map(|_| "--- stdout ---\nhunter2-secret-value".into()),
            execution_ids: vec!["e1".into(), "e2".into()],
            tolerated: false,
            spend: None,
        };
        for steps in [
            vec![],
            vec![
                step("a", None),
                step(
                    "b-hunter2-secret-value",
                    Some("exit 1: hunter2-secret-value"),
                ),
            ],
        ] {
            let result = ExecutionResult {
                run_id: "r".into(),
                plan_id: "plan hunter2-secret-value".into(),
                status: RunStatus::Failed,
                exit_code: 1,
                duration_ms: 9,
                steps,
                prompt_tokens: 5,
                completion_tokens: 6,
            };
            let (shell, captured) = Shell::capturing(redactor.clone());
            super::write_json(&shell, &result).unwrap();
            let whole = redactor.redact_value(&serde_json::to_value(&result).unwrap());
            let expected = serde_json::to_string_pretty(&whole).unwrap() + "\n";
            let streamed = captured.out();
            assert_eq!(streamed, expected);
            assert!(!streamed.contains("hunter2"), "{streamed}");
        }
    }

    /// Every `acode-run` command line in the CI recipes of `docs/ci.md` parses with the real flag
    /// parser, so the recipes cannot drift from the binary.
    #[test]
    fn every_command_in_the_ci_recipes_parses() {
        let doc = include_str!("../../docs/ci.md");
        let mut in_yaml = false;
        let mut seen = 0;
        for line in doc.lines() {
            if line.starts_with("```") {
                in_yaml = line == "```yaml";
                continue;
            }
            if !in_yaml {
                continue;
            }
            let Some(at) = line.find("acode-run ") else {
                continue;
            };
            let command = &line[at..];
            let command = command.split(" > ").next().unwrap_or(command);
            let words = shlex::split(command).expect("balanced quotes");
            match parse(words.iter().skip(1)) {
                Ok(Parsed::Run(_)) => seen += 1,
                other => panic!("{command:?} does not parse: {other:?}"),
            }
        }
        assert!(seen >= 3, "found only {seen} command lines in docs/ci.md");
    }
}
