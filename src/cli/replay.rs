//! `export RUN_ID --replay FILE` and the command line's side of `run --replay` (docs/replay.md).

use std::path::Path;

use super::shell::Shell;
use super::{Args, CliError, query_store};
use crate::error::exit;
use crate::llm::LlmClient;
use crate::llm::replay::ReplayClient;
use crate::runner::replay::{from_store, names_file};

/// The `--replay` value as recorded in the run's settings: a file as its absolute path (so
/// `resume` finds it from anywhere), a run id as given (the runner records the full id).
pub(super) fn setting(value: &str) -> String {
    if names_file(value) {
        crate::workspace::absolute(Path::new(value))
            .display()
            .to_string()
    } else {
        value.trim().to_string()
    }
}

/// Writes run `RUN_ID`'s model traffic as a replay file: the header, then one answered turn per
/// line, as stored (redacted when recorded) and through this process's redactor once more. Warns
/// about turns a replay would refuse.
pub(super) fn cmd_export(args: &Args, shell: &Shell) -> Result<i32, CliError> {
    let redactor = shell.redactor();
    let Some(out) = args.replay.as_deref() else {
        return Err(CliError::new(exit::USAGE, "export needs --replay FILE"));
    };
    let store = query_store(args)?;
    let source = from_store(&store, &args.positionals[0])?;
    let mut text = String::new();
    for line in source.to_jsonl().lines() {
        let value: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
        text.push_str(&redactor.redact_value(&value).to_string());
        text.push('\n');
    }
    let path = Path::new(out);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| CliError::new(exit::USAGE, format!("--replay {out}: not a file name")))?;
    let temp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        uuid::Uuid::new_v4()
    ));
    let written = std::fs::write(&temp, &text).and_then(|()| std::fs::rename(&temp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        // Where to write is the caller's choice: a directory that is missing or not writable is
        // a usage error.
        return Err(CliError::new(
            exit::USAGE,
            format!("cannot write {out}: {e}"),
        ));
    }
    let steps: std::collections::BTreeSet<&str> =
        source.turns.iter().map(|t| t.step.as_str()).collect();
    shell.err_line(format_args!(
        "wrote {} model turn(s) of {} agent step(s) of run {} to {out}",
        source.turns.len(),
        steps.len(),
        source.header.run_id
    ));
    for problem in source.problems() {
        shell.warn(format_args!(
            "a replay will refuse this: {}",
            redactor.redact(&problem)
        ));
    }
    Ok(exit::OK)
}

/// Says, before a replay runs, where its answers come from.
pub(super) fn announce(shell: &Shell, client: &ReplayClient) {
    shell.error(format_args!(
        "agent steps are answered by a {} (no model is asked; docs/replay.md)",
        shell.redactor().redact(&client.describe())
    ));
}

/// After a lenient replay: says how many requests differed from the recorded ones, and the first
/// few (each is recorded on its model turn's `warnings` artifact).
pub(super) fn report_divergences(shell: &Shell, client: &ReplayClient) {
    let all = client.divergences();
    if all.is_empty() {
        return;
    }
    shell.err_line(format_args!(
        "acode-run: replay: {} request(s) differed from the recorded ones and were answered \
         anyway (--replay-lenient); each is on its model turn's `warnings` artifact:",
        all.len()
    ));
    for d in all.iter().take(5) {
        shell.err_line(format_args!("  - {}", shell.redactor().redact(d)));
    }
}
