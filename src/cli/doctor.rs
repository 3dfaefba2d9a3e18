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
    errln!(
        shell,
        "acode-run: the sandbox a run would use here ({}) does not hold what --require asks:\n{}\n  \
         a pipeline that requires it fails here, before any plan runs (docs/ci.md, \"Which \
         sandbox runs where\")",
        report
            .run
            .mode
            .as_deref()
            .unwrap_or("none: a run is refused"),
        lines.join("\n")
    );
    Ok(exit::PROMISE_NOT_HELD)
}

/// `ok` / `FAILS` / `NOT HELD` in a fixed width.
fn mark(ok: bool, bad: &str) -> String {
    format!("{:<9}", if ok { "ok" } else { bad })
}

fn print_report(shell: &Shell, r: &DoctorReport) {
    outln!(shell, "acode-run doctor: {}", r.workspace.display());
    outln!(shell, "");
    outln!(shell, "sandbox modes here:");
    for m in &r.modes {
        outln!(
            shell,
            "  {:<9} {} {}",
            m.mode,
            mark(m.works, "FAILS"),
            m.detail
        );
    }
    outln!(shell, "  auto picks {}", r.auto);
    if let Some(why) = &r.auto_reason {
        outln!(shell, "    because {why}");
    }
    outln!(shell, "");
    let run = &r.run;
    match (&run.mode, &run.error) {
        (Some(mode), _) => {
            let abi = run
                .landlock_abi
                .map(|a| format!(" (Landlock ABI {a})"))
                .unwrap_or_default();
            outln!(
                shell,
                "a run here: --sandbox {} -> {mode}{abi}",
                run.requested
            );
        }
        (None, Some(e)) => outln!(
            shell,
            "a run here: --sandbox {} is refused: {e}",
            run.requested
        ),
        (None, None) => {}
    }
    outln!(
        shell,
        "  {} {}",
        mark(run.command_starts.ok, "FAILS"),
        run.command_starts.detail
    );
    outln!(shell, "promises (docs/security.md) under it:");
    for p in &run.promises {
        outln!(
            shell,
            "  {} {:<21} {}",
            mark(p.holds, "NOT HELD"),
            p.name,
            p.why_not.as_deref().unwrap_or(&p.what)
        );
    }
    outln!(shell, "");
    outln!(
        shell,
        "seccomp:        {} {}",
        mark(r.seccomp.ok, "FAILS"),
        r.seccomp.detail
    );
    outln!(
        shell,
        "network proxy:  {} {}",
        mark(r.network_proxy.ok, "FAILS"),
        r.network_proxy.detail
    );
    let t = &r.toolchain;
    outln!(
        shell,
        "toolchain:      acode-run {} built by {} for {} ({})",
        t.version,
        t.rustc,
        t.target,
        t.profile
    );
    outln!(
        shell,
        "database:       {} ({}; {})",
        r.database.path.display(),
        r.database.named_by,
        if r.database.exists {
            "exists"
        } else {
            "not created yet"
        }
    );
    match &r.policy.path {
        Some(p) => outln!(
            shell,
            "policy:         {} {}: {}",
            mark(r.policy.ok, "FAILS"),
            p.display(),
            r.policy.detail
        ),
        None => outln!(
            shell,
            "policy:         {} none (no acode-policy.json): the defaults, {}",
            mark(r.policy.ok, "FAILS"),
            r.policy.detail
        ),
    }
}
