//! `acode-run import odincode PLAN [-o OUT] [--json]`: the import ([`import_plan`]) writes the
//! converted plan (never an approval) and the policy its commands need beside it; this prints the
//! per-step report and what to do next.

use std::path::{Path, PathBuf};

use super::flags::Args;
use super::shell::{Origin, Shell};
use super::{CliError, workspace_session};
use crate::error::exit;
use crate::import::odincode::{self, Status};
use crate::runner::import::import_plan;

/// See the module docs.
pub fn cmd_import(args: &Args, shell: &Shell) -> Result<i32, CliError> {
    let input = PathBuf::from(&args.positionals[1]);
    let session = workspace_session(args, None)?;
    let outcome = import_plan(
        &session,
        &args.positionals[0],
        &input,
        args.output.as_deref(),
    )?;
    let (imported, written_policy) = (&outcome.imported, &outcome.policy);
    let out = outcome.plan.as_deref().unwrap_or(Path::new(""));
    let status = outcome.status;
    let code = match status {
        Status::Lossless => exit::OK,
        Status::Lossy => exit::IMPORT_LOSSY,
        Status::Refused => exit::IMPORT_REFUSED,
    };
    if args.json {
        let v = serde_json::json!({
            "status": status,
            "exit_code": code,
            "output": outcome.plan.as_ref().map(|p| p.display().to_string()),
            "policy": written_policy.as_ref().map(|p| p.display().to_string()),
            "report": imported.report,
        });
        shell.out_json(&v, Origin::Runner);
    } else {
        shell.out_line(odincode::render(&imported.report).trim_end());
        if outcome.plan.is_some() {
            // The next steps as they work when pasted: with the workspace (and database) this
            // import was given, and the policy it wrote.
            let policy = written_policy.as_deref();
            shell.err_line(format_args!(
                "wrote {} (not approved: `{}`, then `{}`)",
                out.display(),
                super::hints::next_step(args, "preview", out, policy),
                super::hints::next_step(args, "approve", out, policy)
            ));
            if let Some(p) = &written_policy {
                shell.err_line(format_args!(
                    "wrote {} (the policy its commands need; pass it with --policy)",
                    p.display()
                ));
            }
        } else {
            shell.err_line("nothing written: the plan was refused");
        }
    }
    Ok(code)
}
