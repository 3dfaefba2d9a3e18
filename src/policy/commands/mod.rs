//! The command policy: which programs a plan may run, and with which arguments.
//!
//! Commands never go through a shell, so an argument is data whatever characters it holds: an
//! `argv` element reaches `execve` verbatim, and so does a quoted word of a `command` string (split
//! with `shlex`, POSIX quoting rules). What *is* refused is a `command` string whose author
//! evidently expected a shell ([`check_command_line`]): a bare operator word (`|`, `&&`, `;`, `>`,
//! `2>&1`, ...), an operator character outside quotes, an unquoted line break, or a command
//! substitution (`$(`, a backtick). The message shows the `argv` form to use instead.
//!
//! [`check_argv`] then checks, in order:
//! 1. the program is a bare name looked up on the child's `PATH`, or a workspace path that stays in
//!    the workspace ([`program_path`]);
//! 2. it is on the allowlist ([`Policy::command_allowed`]), or, given by path, named by an entry
//!    with a `/` ([`Policy::program_path_allowed`]);
//! 3. no argument holds a NUL byte (it cannot be passed to `execve`);
//! 4. the program's own option rules: an option matcher that reads the arguments the way the
//!    program will (`--opt=value`, `--opt value`, `-ovalue`, `-o value`, clustered short options,
//!    GNU long-option abbreviations, options that take a value), refuses options that make the
//!    program run another program of the caller's choosing, and requires path-valued options that
//!    write to resolve inside the workspace. `git` gets a subcommand allowlist on top (so no
//!    aliases) and always runs with the hardened environment of [`crate::policy::env::git_env`].
//!
//! Several allowed programs run code by design (`python3`, `node`, `make` recipes, `npm` scripts,
//! `cargo` build scripts, `go generate`/`go run`): for them the rules state intent, and the OS
//! sandbox is the boundary, not the arguments. `docs/security.md` ("Commands") lists every rule.
//!
//! The parts, each using only those before it: `shell` (command strings), `options` (the option
//! matcher), `git` (git's rules), `programs` (every other program's table and the dispatch), and
//! this module (the allowlist, [`check_argv`], confirmation).

use std::path::Path;

use crate::policy::Policy;
use crate::workspace::{Access, SandboxViolation, Workspace};

pub mod git;
mod options;
mod programs;
mod shell;

pub use options::ArgContext;
use programs::check_program_args;
pub use shell::{CommandError, check_command_line, split_command};

/// Checks an argv against the policy (see the module docs); the first problem found is returned.
/// `cwd` is the command's working directory (absolute, inside the workspace): relative paths in
/// arguments are resolved from it.
///
/// Why one function: the plan validator, the tool's `check()` and its `run()` all call this, so a
/// command cannot pass validation and then run differently.
pub fn check_argv(
    argv: &[String],
    policy: &Policy,
    workspace: &Workspace,
    cwd: &Path,
) -> Result<(), SandboxViolation> {
    let Some(program) = argv.first() else {
        return Err(SandboxViolation::new("", "empty command"));
    };
    if program.is_empty() {
        return Err(SandboxViolation::new(program, "empty program name"));
    }
    if program.chars().any(char::is_control) {
        return Err(SandboxViolation::new(
            program,
            "control character in the program name",
        ));
    }
    if program.contains('/') {
        let rel = program_path(program, workspace, cwd)?;
        if !policy.program_path_allowed(&rel) {
            // An entry without a `/` names a program on PATH, so a program at the workspace's
            // root is named `./NAME`.
            let entry = if rel.contains('/') {
                rel.clone()
            } else {
                format!("./{rel}")
            };
            let dir = Path::new(&rel)
                .parent()
                .map(|d| d.to_string_lossy().into_owned())
                .filter(|d| !d.is_empty());
            let glob = dir
                .map(|d| format!(" (or a glob such as \"{d}/*\")"))
                .unwrap_or_default();
            return Err(SandboxViolation::new(
                program,
                format!(
                    "a program given by path runs only when the policy names it: add \"{entry}\"{glob} \
                     to \"allow_commands\" in acode-policy.json"
                ),
            ));
        }
    } else if !policy.command_allowed(program) {
        return Err(SandboxViolation::new(
            program,
            "program is not on the command allowlist (policy \"commands\" or \"allow_commands\" in acode-policy.json)",
        ));
    }
    let args = &argv[1..];
    if let Some(arg) = args.iter().find(|a| a.contains('\0')) {
        return Err(SandboxViolation::new(
            arg,
            "NUL byte in an argument (it cannot be passed to a program)",
        ));
    }
    // A program's option rules follow its file name (`node_modules/.bin/git` is git).
    let name = program.rsplit('/').next().unwrap_or(program);
    check_program_args(name, args, &ArgContext { workspace, cwd })
}

/// The workspace-relative path of a program given by path (see [`crate::policy::host::program`]): refused when
/// it leaves the workspace.
pub fn program_path(
    program: &str,
    workspace: &Workspace,
    cwd: &Path,
) -> Result<String, SandboxViolation> {
    crate::policy::host::program::workspace_relative(program, workspace, cwd)
        .map(|rel| rel.to_string_lossy().into_owned())
        .ok_or_else(|| {
            SandboxViolation::new(
                program,
                "a program path must stay inside the workspace (no `..` out of it, no absolute \
                 path elsewhere)",
            )
        })
}

/// Whether running `argv` in `cwd` needs the confirmation callback: the program is not in the
/// policy's auto-approve set — by name, or for a program given by path by the same exact-or-glob
/// matching as `allow_commands` (an empty argv always needs it, though `check_argv` refuses it
/// anyway).
pub fn needs_confirmation(
    argv: &[String],
    policy: &Policy,
    workspace: &Workspace,
    cwd: &Path,
) -> bool {
    match argv.first() {
        Some(program) if program.contains('/') => program_path(program, workspace, cwd)
            .map_or(true, |rel| !policy.program_path_auto_approved(&rel)),
        Some(program) => !policy.command_auto_approved(program),
        None => true,
    }
}

#[cfg(test)]
mod tests;
