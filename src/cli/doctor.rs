//! `acode-run doctor [--json] [--require PROMISE…]`: prints what [`crate::runner::doctor`] found
//! (stdout), and fails closed with exit 39 when a required promise does not hold here.

use super::shell::{Origin, Shell};
use super::{CliError, session_options};
use crate::error::exit;
use crate::runner::doctor::{self, DoctorReport};
use crate::runner::session::Session;

/// Runs the checks and prints them; exit 39 when `--require` names a promise that does not hold,
/// 1 when `/proc` is not mounted (nothing can be checked).
pub(super) fn cmd_doctor(args: &super::Args, shell: &Shell) -> Result<i32, CliError> {
    // Before the session: without /proc, opening the workspace fails in ways that do not say why.
    doctor::check_proc().map_err(|e| CliError::new(exit::INTERNAL, e.to_string()))?;
    let options = session_options(args);
    let named_by = options.db_named_by.clone();
    let session = Session::open(options, None)?;
    let report = doctor::diagnose(&session, args.sandbox, named_by.as_deref(), &args.require)
        .map_err(|e| CliError::new(exit::INTERNAL, e.to_string()))?;
    if args.json {
        shell.out_json(&report, Origin::Runner);
    } else {
        print_report(shell, &report);
    }
    if report.requirements_met() {
        return Ok(exit::OK);
    }
    let lines: Vec<String> = report
        .required_not_held
        .iter()
        .map(|p| {
            format!(
                "  - {}: {}",
                p.name,
                p.why_not.as_deref().unwrap_or("does not hold")
            )
        })
        .collect();
    shell.err_line(format_args!("acode-run: the sandbox a run would use here ({}) does not hold what --require asks:\n{}\n  \
         a pipeline that requires it fails here, before any plan runs (docs/ci.md, \"Which \
         sandbox runs where\")",
        report
            .run
            .mode
            .as_deref()
            .unwrap_or("none: a run is refused"),
        lines.join("\n")));
    Ok(exit::PROMISE_NOT_HELD)
}

/// `ok` / `FAILS` / `NOT HELD` in a fixed width.
fn mark(ok: bool, bad: &str) -> String {
    format!("{:<9}", if ok { "ok" } else { bad })
}

fn print_report(shell: &Shell, r: &DoctorReport) {
    shell.out_line(format_args!("acode-run doctor: {}", r.workspace.display()));
    shell.out_line("");
    shell.out_line("sandbox modes here:");
    for m in &r.modes {
        shell.out_line(format_args!(
            "  {:<9} {} {}",
            m.mode,
            mark(m.works, "FAILS"),
            m.detail
        ));
    }
    shell.out_line(format_args!("  auto picks {}", r.auto));
    if let Some(why) = &r.auto_reason {
        shell.out_line(format_args!("    because {why}"));
    }
    shell.out_line("");
    let run = &r.run;
    match (&run.mode, &run.error) {
        (Some(mode), _) => {
            let abi = run
                .landlock_abi
                .map(|a| format!(" (Landlock ABI {a})"))
                .unwrap_or_default();
            shell.out_line(format_args!(
                "a run here: --sandbox {} -> {mode}{abi}",
                run.requested
            ));
        }
        (None, Some(e)) => shell.out_line(format_args!(
            "a run here: --sandbox {} is refused: {e}",
            run.requested
        )),
        (None, None) => {}
    }
    shell.out_line(format_args!(
        "  {} {}",
        mark(run.command_starts.ok, "FAILS"),
        run.command_starts.detail
    ));
    shell.out_line("promises (docs/security.md) under it:");
    for p in &run.promises {
        shell.out_line(format_args!(
            "  {} {:<21} {}",
            mark(p.holds, "NOT HELD"),
            p.name,
            p.why_not.as_deref().unwrap_or(&p.what)
        ));
    }
    shell.out_line("");
    shell.out_line(format_args!(
        "seccomp:        {} {}",
        mark(r.seccomp.ok, "FAILS"),
        r.seccomp.detail
    ));
    shell.out_line(format_args!(
        "network proxy:  {} {}",
        mark(r.network_proxy.ok, "FAILS"),
        r.network_proxy.detail
    ));
    let t = &r.toolchain;
    shell.out_line(format_args!(
        "toolchain:      acode-run {} built by {} for {} ({})",
        t.version, t.rustc, t.target, t.profile
    ));
    shell.out_line(format_args!(
        "database:       {} ({}; {})",
        r.database.path.display(),
        r.database.named_by,
        if r.database.exists {
            "exists"
        } else {
            "not created yet"
        }
    ));
    match &r.policy.path {
        Some(p) => shell.out_line(format_args!(
            "policy:         {} {}: {}",
            mark(r.policy.ok, "FAILS"),
            p.display(),
            r.policy.detail
        )),
        None => shell.out_line(format_args!(
            "policy:         {} none (no acode-policy.json): the defaults, {}",
            mark(r.policy.ok, "FAILS"),
            r.policy.detail
        )),
    }
}
