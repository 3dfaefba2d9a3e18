//! `acode-run import odincode PLAN [-o OUT] [--json]`: writes the converted plan (never an
//! approval), the policy its commands need beside it, and prints the per-step report.

use std::path::{Path, PathBuf};

use super::flags::Args;
use super::{CliError, workspace_session};
use crate::error::exit;
use crate::import::odincode::{self, Status};

/// `plan.json` → `plan.acode.json`, beside it.
fn default_output(input: &Path) -> PathBuf {
    let stem = input
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plan".to_string());
    input.with_file_name(format!("{stem}.acode.json"))
}

/// `out.json` → `out.policy.json`, beside the plan.
fn policy_path(out: &Path) -> PathBuf {
    let stem = out
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plan".to_string());
    out.with_file_name(format!("{stem}.policy.json"))
}

/// Writes `text` to `path`, never over an existing file (an earlier import or a hand-edited plan).
fn write_new(path: &Path, text: &str) -> Result<(), CliError> {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| {
            let code = if e.kind() == std::io::ErrorKind::AlreadyExists {
                exit::USAGE
            } else {
                exit::INTERNAL
            };
            CliError::new(
                code,
                format!(
                    "{}: {e} (import never overwrites; choose another -o)",
                    path.display()
                ),
            )
        })?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| CliError::new(exit::INTERNAL, format!("{}: {e}", path.display())))
}

/// See the module docs.
pub fn cmd_import(args: &Args) -> Result<i32, CliError> {
    let kind = args.positionals[0].as_str();
    if kind != "odincode" {
        return Err(CliError::new(
            exit::USAGE,
            format!("cannot import {kind:?} plans (acode-run imports: odincode)"),
        ));
    }
    let input = PathBuf::from(&args.positionals[1]);
    let bytes = crate::input::read_bounded(&input, crate::input::MAX_PLAN_BYTES, "plan file")
        .map_err(|e| CliError::new(exit::USAGE, format!("{}: {e}", input.display())))?;
    let session = workspace_session(args, None)?;
    let ws = session.workspace();
    let policy = session.policy()?;
    let imported = odincode::import(&bytes, ws, &policy)
        .map_err(|e| CliError::new(exit::USAGE, format!("{}: {e}", input.display())))?;
    let out = args
        .output
        .clone()
        .unwrap_or_else(|| default_output(&input));
    let mut written_policy = None;
    if let Some(plan) = &imported.plan {
        if let Some(p) = &imported.policy {
            let path = policy_path(&out);
            write_new(&path, &format!("{p}\n"))?;
            written_policy = Some(path);
        }
        let mut text = crate::stages::draft::pretty_plan(plan);
        if !text.ends_with('\n') {
            text.push('\n');
        }
        write_new(&out, &text)?;
    }
    let status = imported.report.status();
    let code = match status {
        Status::Lossless => exit::OK,
        Status::Lossy => exit::IMPORT_LOSSY,
        Status::Refused => exit::IMPORT_REFUSED,
    };
    if args.json {
        let v = serde_json::json!({
            "status": status,
            "exit_code": code,
            "output": imported.plan.as_ref().map(|_| out.display().to_string()),
            "policy": written_policy.as_ref().map(|p| p.display().to_string()),
            "report": imported.report,
        });
        outln!(
            "{}",
            serde_json::to_string_pretty(&v).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
        );
    } else {
        humanln!("{}", odincode::render(&imported.report).trim_end());
        if imported.plan.is_some() {
            // The next steps as they work when pasted: with the workspace (and database) this
            // import was given, and the policy it wrote.
            let policy = written_policy.as_deref();
            errln!(
                "wrote {} (not approved: `{}`, then `{}`)",
                out.display(),
                super::hints::next_step(args, "preview", &out, policy),
                super::hints::next_step(args, "approve", &out, policy)
            );
            if let Some(p) = &written_policy {
                errln!(
                    "wrote {} (the policy its commands need; pass it with --policy)",
                    p.display()
                );
            }
        } else {
            errln!("nothing written: the plan was refused");
        }
    }
    Ok(code)
}
