//! The command policy: which programs a plan may run, and with which arguments.
//!
//! Commands never go through a shell. A command string is split with `shlex` (POSIX quoting rules)
//! and the resulting argv is executed directly, so `;`, `|` or `$(...)` would be inert anyway; we
//! still reject them, because their presence means the author expected a shell and the command
//! would not do what they think (and because a later change must not silently turn them live).
//!
//! The checks, in order:
//! 1. the program is a bare name (no `/`), so it is looked up on the child's `PATH` and cannot be a
//!    script the plan wrote into the workspace;
//! 2. it is on the allowlist ([`Policy::command_allowed`]);
//! 3. no argument contains a shell metacharacter or a control character ([`FORBIDDEN_CHARS`]);
//! 4. no argument is on the table of known-dangerous arguments ([`DANGEROUS_ARGS`]): options that
//!    make an allowed program run *another* program of the caller's choosing.
//!
//! This is not a complete defence against an allowed program doing harm (`python3 -c` is arbitrary
//! code, `cargo build` runs build scripts); `docs/security.md` says what each layer stops.

use thiserror::Error;

use super::paths::SandboxViolation;
use super::policy::Policy;

/// A command string that cannot be turned into an argv.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum CommandError {
    /// Nothing to run.
    #[error("empty command")]
    Empty,
    /// `shlex` could not split it: an unbalanced quote or a trailing backslash.
    #[error("cannot split command (unbalanced quotes or trailing backslash): {0:?}")]
    Unbalanced(String),
}

/// Splits a command line into words with POSIX shell quoting rules, without any expansion.
///
/// Why a separate function: the plan validator and the tool must split identically.
pub fn split_command(cmd: &str) -> Result<Vec<String>, CommandError> {
    if cmd.contains('\0') {
        // shlex would keep the NUL inside a word; report it as unsplittable rather than let it
        // reach `check_argv` disguised.
        return Err(CommandError::Unbalanced(cmd.to_string()));
    }
    let words = shlex::split(cmd).ok_or_else(|| CommandError::Unbalanced(cmd.to_string()))?;
    if words.is_empty() {
        return Err(CommandError::Empty);
    }
    Ok(words)
}

/// Refuses a raw command line containing any [`FORBIDDEN_CHARS`] character, quoted or not.
///
/// Why before splitting: `shlex` treats an unquoted newline as plain whitespace, so
/// `"echo a\ntouch x"` would split into harmless words, yet its author meant two commands.
pub fn check_command_line(cmd: &str) -> Result<(), SandboxViolation> {
    match cmd.chars().find(|c| FORBIDDEN_CHARS.contains(c)) {
        Some(c) => Err(SandboxViolation::new(
            cmd,
            format!(
                "shell metacharacter {c:?} in the command (commands never run through a shell)"
            ),
        )),
        None => Ok(()),
    }
}

/// Characters never allowed in any argument: the shell's command separators, pipes, expansions
/// and redirections, plus line breaks and NUL (which would end a C string early).
pub const FORBIDDEN_CHARS: &[char] = &[';', '&', '|', '$', '`', '>', '<', '\n', '\r', '\0'];

/// Where in the argv a [`DangerousArg`] rule applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Any argument after the program name.
    Anywhere,
    /// git's global options: arguments before the first non-option word (the subcommand).
    GitGlobal,
    /// Arguments after the given git subcommand (`rebase`, `clone`, ...).
    GitSubcommand(&'static str),
}

/// How a [`DangerousArg`] rule matches one argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgMatch {
    /// The argument is exactly this word.
    Exact(&'static str),
    /// A long option: exactly this, or this followed by `=value`.
    Long(&'static str),
    /// A short option: exactly this, or this with its value attached (`-cfoo`).
    Short(&'static str),
    /// The argument contains this text, compared case-insensitively (config keys, `linker=`).
    Contains(&'static str),
    /// The argument starts with this text.
    Prefix(&'static str),
}

impl ArgMatch {
    fn matches(self, arg: &str) -> bool {
        match self {
            ArgMatch::Exact(w) => arg == w,
            ArgMatch::Long(w) => {
                arg == w || (arg.starts_with(w) && arg[w.len()..].starts_with('='))
            }
            ArgMatch::Short(w) => arg.starts_with(w),
            ArgMatch::Contains(w) => arg.to_ascii_lowercase().contains(&w.to_ascii_lowercase()),
            ArgMatch::Prefix(w) => arg.starts_with(w),
        }
    }
}

/// One known-dangerous argument: for `program`, within `scope`, an argument matching `arg` is
/// refused because of `why`.
#[derive(Debug, Clone, Copy)]
pub struct DangerousArg {
    /// The program the rule is about.
    pub program: &'static str,
    /// Which arguments are looked at.
    pub scope: Scope,
    /// What the argument looks like.
    pub arg: ArgMatch,
    /// Why it is refused, shown to the user.
    pub why: &'static str,
}

const fn rule(
    program: &'static str,
    scope: Scope,
    arg: ArgMatch,
    why: &'static str,
) -> DangerousArg {
    DangerousArg {
        program,
        scope,
        arg,
        why,
    }
}

use ArgMatch::{Contains, Exact, Long, Prefix, Short};
use Scope::{Anywhere, GitGlobal, GitSubcommand};

/// git configuration keys whose value is a program git runs; setting any of them (with `-c`,
/// `git config`, or a config file) turns git into a general-purpose launcher.
const GIT_EXEC_CONFIG_WHY: &str = "sets a git configuration key whose value is a program git runs";

/// The table of known-dangerous arguments, in one place. Every entry names why it is refused.
///
/// Decisions worth knowing:
/// - `git -c`/`-c…` is refused only in git's global-option position, so `git switch -c branch` and
///   `git log -c` keep working.
/// - `cargo --config` is refused (it can set `target.*.runner` or `build.rustc-wrapper` to any
///   program); `cargo -Z` is allowed: unstable flags only work on nightly and do not launch
///   programs by themselves. Cargo still runs build scripts and `cargo run` runs the crate; that is
///   cargo's purpose and is contained only by bwrap (see `docs/security.md`).
pub const DANGEROUS_ARGS: &[DangerousArg] = &[
    // git: options that run a program chosen by the caller.
    rule(
        "git",
        GitGlobal,
        Short("-c"),
        "git -c sets configuration (core.pager, core.sshCommand, alias.*) that runs arbitrary programs",
    ),
    rule(
        "git",
        Anywhere,
        Long("--config-env"),
        "git --config-env sets configuration that can run arbitrary programs",
    ),
    rule(
        "git",
        Anywhere,
        Long("--exec-path"),
        "git --exec-path makes git look for its subcommands in a directory of the caller's choosing",
    ),
    rule(
        "git",
        Anywhere,
        Long("--exec"),
        "git --exec runs a program (rebase, archive, push)",
    ),
    rule(
        "git",
        Anywhere,
        Long("--upload-pack"),
        "git --upload-pack runs a program in place of git-upload-pack",
    ),
    rule(
        "git",
        Anywhere,
        Long("--receive-pack"),
        "git --receive-pack runs a program in place of git-receive-pack",
    ),
    rule(
        "git",
        Anywhere,
        Long("--template"),
        "git --template installs hooks (programs) from a directory of the caller's choosing",
    ),
    rule(
        "git",
        Anywhere,
        Prefix("ext::"),
        "the ext:: transport runs a shell command",
    ),
    rule(
        "git",
        GitSubcommand("rebase"),
        Short("-x"),
        "git rebase -x runs a command after each commit",
    ),
    rule(
        "git",
        GitSubcommand("clone"),
        Short("-u"),
        "git clone -u runs a program in place of git-upload-pack",
    ),
    rule(
        "git",
        GitSubcommand("ls-remote"),
        Short("-u"),
        "git ls-remote -u runs a program in place of git-upload-pack",
    ),
    rule(
        "git",
        GitSubcommand("difftool"),
        Short("-x"),
        "git difftool -x runs a program to show each diff",
    ),
    rule(
        "git",
        GitSubcommand("difftool"),
        Long("--extcmd"),
        "git difftool --extcmd runs a program to show each diff",
    ),
    rule(
        "git",
        GitSubcommand("grep"),
        Short("-O"),
        "git grep -O opens results in a program of the caller's choosing",
    ),
    rule(
        "git",
        GitSubcommand("grep"),
        Long("--open-files-in-pager"),
        "git grep --open-files-in-pager runs a program of the caller's choosing",
    ),
    rule(
        "git",
        GitSubcommand("submodule"),
        Exact("foreach"),
        "git submodule foreach runs a shell command in each submodule",
    ),
    rule(
        "git",
        GitSubcommand("bisect"),
        Exact("run"),
        "git bisect run runs a command at each step",
    ),
    rule(
        "git",
        GitSubcommand("filter-branch"),
        Prefix(""),
        "git filter-branch runs shell snippets for every commit",
    ),
    rule(
        "git",
        GitSubcommand("send-email"),
        Prefix(""),
        "git send-email runs helper commands and sends mail",
    ),
    // git config keys that name programs. `git config` is the only way left to set them: `-c` is
    // refused above, `.git/` is protected from file tools, and HOME/GIT_CONFIG* cannot be overridden
    // through a step's `env` (see `sandbox::env`).
    rule(
        "git",
        GitSubcommand("config"),
        Contains("core.pager"),
        GIT_EXEC_CONFIG_WHY,
    ),
    rule(
        "git",
        GitSubcommand("config"),
        Contains("core.sshcommand"),
        GIT_EXEC_CONFIG_WHY,
    ),
    rule(
        "git",
        GitSubcommand("config"),
        Contains("core.editor"),
        GIT_EXEC_CONFIG_WHY,
    ),
    rule(
        "git",
        GitSubcommand("config"),
        Contains("core.hookspath"),
        GIT_EXEC_CONFIG_WHY,
    ),
    rule(
        "git",
        GitSubcommand("config"),
        Contains("core.fsmonitor"),
        GIT_EXEC_CONFIG_WHY,
    ),
    rule(
        "git",
        GitSubcommand("config"),
        Contains("core.askpass"),
        GIT_EXEC_CONFIG_WHY,
    ),
    rule(
        "git",
        GitSubcommand("config"),
        Contains("core.gitproxy"),
        GIT_EXEC_CONFIG_WHY,
    ),
    rule(
        "git",
        GitSubcommand("config"),
        Contains("credential.helper"),
        GIT_EXEC_CONFIG_WHY,
    ),
    rule(
        "git",
        GitSubcommand("config"),
        Contains("diff.external"),
        GIT_EXEC_CONFIG_WHY,
    ),
    rule(
        "git",
        GitSubcommand("config"),
        Contains("sequence.editor"),
        GIT_EXEC_CONFIG_WHY,
    ),
    rule(
        "git",
        GitSubcommand("config"),
        Contains("gpg.program"),
        GIT_EXEC_CONFIG_WHY,
    ),
    rule(
        "git",
        GitSubcommand("config"),
        Contains("uploadpack.packobjectshook"),
        GIT_EXEC_CONFIG_WHY,
    ),
    rule(
        "git",
        GitSubcommand("config"),
        Contains(".uploadpack"),
        GIT_EXEC_CONFIG_WHY,
    ),
    rule(
        "git",
        GitSubcommand("config"),
        Contains(".receivepack"),
        GIT_EXEC_CONFIG_WHY,
    ),
    rule(
        "git",
        GitSubcommand("config"),
        Contains(".textconv"),
        GIT_EXEC_CONFIG_WHY,
    ),
    rule(
        "git",
        GitSubcommand("config"),
        Contains(".command"),
        GIT_EXEC_CONFIG_WHY,
    ),
    rule(
        "git",
        GitSubcommand("config"),
        Contains(".cmd"),
        GIT_EXEC_CONFIG_WHY,
    ),
    rule(
        "git",
        GitSubcommand("config"),
        Contains("alias."),
        "git aliases starting with '!' run shell commands",
    ),
    rule(
        "git",
        GitSubcommand("config"),
        Contains("filter."),
        "git filter drivers (clean/smudge/process) run programs",
    ),
    rule(
        "git",
        GitSubcommand("config"),
        Contains("pager."),
        "git pager.<cmd> runs a program as the pager",
    ),
    rule(
        "git",
        GitSubcommand("config"),
        Contains("include"),
        "git config include.path/includeIf pulls in a configuration file the workspace can write",
    ),
    rule(
        "git",
        GitSubcommand("config"),
        Long("--file"),
        "git config --file writes a configuration file the caller chooses (which can name programs)",
    ),
    rule(
        "git",
        GitSubcommand("config"),
        Short("-f"),
        "git config -f writes a configuration file the caller chooses (which can name programs)",
    ),
    rule(
        "git",
        GitSubcommand("config"),
        Long("--global"),
        "git config --global changes the user's configuration outside the workspace",
    ),
    rule(
        "git",
        GitSubcommand("config"),
        Long("--system"),
        "git config --system changes the machine's configuration outside the workspace",
    ),
    // find: actions that run programs or write/delete files.
    rule(
        "find",
        Anywhere,
        Exact("-exec"),
        "find -exec runs a program for every match",
    ),
    rule(
        "find",
        Anywhere,
        Exact("-execdir"),
        "find -execdir runs a program for every match",
    ),
    rule(
        "find",
        Anywhere,
        Exact("-ok"),
        "find -ok runs a program for every match",
    ),
    rule(
        "find",
        Anywhere,
        Exact("-okdir"),
        "find -okdir runs a program for every match",
    ),
    rule(
        "find",
        Anywhere,
        Exact("-delete"),
        "find -delete removes files without going through the path sandbox",
    ),
    rule(
        "find",
        Anywhere,
        Prefix("-fprint"),
        "find -fprint* writes to a file outside the path sandbox",
    ),
    rule(
        "find",
        Anywhere,
        Exact("-fls"),
        "find -fls writes to a file outside the path sandbox",
    ),
    // cargo / rustc: options that run another program as part of the build.
    rule(
        "cargo",
        Anywhere,
        Long("--config"),
        "cargo --config can set target.*.runner or build.rustc-wrapper to any program",
    ),
    rule(
        "cargo",
        Anywhere,
        Contains("linker="),
        "a custom linker is an arbitrary program run by the compiler",
    ),
    rule(
        "rustc",
        Anywhere,
        Contains("linker="),
        "a custom linker is an arbitrary program run by the compiler",
    ),
    rule(
        "rustc",
        Anywhere,
        Exact("-Clinker"),
        "a custom linker is an arbitrary program run by the compiler",
    ),
    // make: -f/-C are fine, but --eval injects recipe text (shell commands).
    rule(
        "make",
        Anywhere,
        Long("--eval"),
        "make --eval injects makefile text, i.e. shell recipes",
    ),
    rule(
        "make",
        Anywhere,
        Long("SHELL"),
        "setting make's SHELL runs recipes with a program of the caller's choosing",
    ),
    // sort: --compress-program runs a program.
    rule(
        "sort",
        Anywhere,
        Long("--compress-program"),
        "sort --compress-program runs a program of the caller's choosing",
    ),
    // npm: scripts and exec run arbitrary commands; only these flags add programs beyond that.
    rule(
        "npm",
        Anywhere,
        Long("--script-shell"),
        "npm --script-shell runs scripts with a program of the caller's choosing",
    ),
    rule(
        "npm",
        Anywhere,
        Long("--node-options"),
        "npm --node-options can preload arbitrary modules",
    ),
    // node: preloading code from the command line.
    rule(
        "node",
        Anywhere,
        Long("--require"),
        "node --require preloads arbitrary code",
    ),
    rule(
        "node",
        Anywhere,
        Long("--import"),
        "node --import preloads arbitrary code",
    ),
    rule(
        "node",
        Anywhere,
        Exact("-r"),
        "node -r preloads arbitrary code",
    ),
];

/// Which git arguments a [`Scope`] covers: `None` for the global-option part, `Some(sub)` for the
/// arguments after subcommand `sub`.
fn git_positions(args: &[String]) -> (usize, Option<(usize, &str)>) {
    // Global options that take a separate value word.
    const TAKES_VALUE: &[&str] = &["-C", "-c", "--git-dir", "--work-tree", "--namespace"];
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if !a.starts_with('-') {
            return (i, Some((i, a)));
        }
        if a == "--" {
            return (i, None);
        }
        i += if TAKES_VALUE.contains(&a) { 2 } else { 1 };
    }
    (args.len(), None)
}

/// Checks an argv against the policy (see the module docs); the first problem found is returned.
///
/// Why one function: the plan validator, the tool's `check()` and its `run()` all call this, so a
/// command cannot pass validation and then run differently.
pub fn check_argv(argv: &[String], policy: &Policy) -> Result<(), SandboxViolation> {
    let Some(program) = argv.first() else {
        return Err(SandboxViolation::new("", "empty command"));
    };
    if program.is_empty() {
        return Err(SandboxViolation::new(program, "empty program name"));
    }
    if program.contains('/') {
        return Err(SandboxViolation::new(
            program,
            "the program must be a bare command name looked up on PATH, not a path",
        ));
    }
    if let Some(c) = program.chars().find(|c| FORBIDDEN_CHARS.contains(c)) {
        return Err(SandboxViolation::new(
            program,
            format!("shell metacharacter {c:?} in the program name"),
        ));
    }
    if !policy.command_allowed(program) {
        return Err(SandboxViolation::new(
            program,
            "program is not on the command allowlist (add it to allow_commands in acode-policy.json)",
        ));
    }
    let args = &argv[1..];
    for arg in args {
        if let Some(c) = arg.chars().find(|c| FORBIDDEN_CHARS.contains(c)) {
            return Err(SandboxViolation::new(
                arg,
                format!(
                    "shell metacharacter {c:?} in an argument (commands never run through a shell)"
                ),
            ));
        }
    }
    let (global_end, sub) = if program == "git" {
        git_positions(args)
    } else {
        (0, None)
    };
    for r in DANGEROUS_ARGS.iter().filter(|r| r.program == program) {
        let range: &[String] = match r.scope {
            Scope::Anywhere => args,
            Scope::GitGlobal => &args[..global_end],
            Scope::GitSubcommand(name) => match sub {
                // The subcommand itself is included so `Prefix("")` rules can refuse it outright.
                Some((at, s)) if s == name => &args[at..],
                _ => &[],
            },
        };
        if let Some(i) = range.iter().position(|a| r.arg.matches(a)) {
            // Show a detached option value too (`-c core.pager=x`), so the user sees what was meant.
            let arg = &range[i];
            let detached = matches!(r.arg, ArgMatch::Short(o) | ArgMatch::Long(o) if arg == o);
            let subject = match range.get(i + 1) {
                Some(value) if detached => format!("{arg} {value}"),
                _ => arg.clone(),
            };
            return Err(SandboxViolation::new(subject, r.why));
        }
    }
    Ok(())
}

/// Whether running `argv` needs the confirmation callback: the program is not in the policy's
/// auto-approve set (an empty argv always needs it, though `check_argv` refuses it anyway).
pub fn needs_confirmation(argv: &[String], policy: &Policy) -> bool {
    match argv.first() {
        Some(program) => !policy.command_auto_approved(program),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        split_command(s).unwrap()
    }

    fn check(s: &str) -> Result<(), SandboxViolation> {
        check_argv(&argv(s), &Policy::default())
    }

    #[test]
    fn splitting_follows_posix_quoting() {
        assert_eq!(
            argv("echo 'a b' \"c d\" e\\ f"),
            ["echo", "a b", "c d", "e f"]
        );
        assert_eq!(split_command("  "), Err(CommandError::Empty));
        assert_eq!(split_command(""), Err(CommandError::Empty));
        assert!(matches!(
            split_command("echo 'oops"),
            Err(CommandError::Unbalanced(_))
        ));
        assert!(matches!(
            split_command("echo \"oops"),
            Err(CommandError::Unbalanced(_))
        ));
        assert!(matches!(
            split_command("echo oops\\"),
            Err(CommandError::Unbalanced(_))
        ));
        assert!(split_command("echo a\0b").is_err());
    }

    #[test]
    fn allowed_commands_pass() {
        for ok in [
            "cargo test --quiet",
            "cargo +nightly check -Z unstable-options",
            "git status",
            "git switch -c feature",
            "git log -c",
            "git -C sub status",
            "git commit -m 'fix: handle a=b and c'",
            "git config user.email dev@example.com",
            "echo hello world",
            "grep -rn 'fn main' src",
            "head -c 100 /dev/zero",
            "python3 -m pytest -q",
            "sort -u file.txt",
        ] {
            assert!(check(ok).is_ok(), "{ok:?} should pass: {:?}", check(ok));
        }
    }

    #[test]
    fn programs_must_be_bare_allowlisted_names() {
        for bad in [
            "rm -rf /",
            "/bin/sh -c true",
            "./cargo build",
            "bash -c true",
            "sh -c true",
            "sudo ls",
            "curl http://example.com",
            "../../usr/bin/git status",
        ] {
            assert!(check(bad).is_err(), "{bad:?} should be refused");
        }
        assert!(check_argv(&[], &Policy::default()).is_err());
        assert!(check_argv(&["".into()], &Policy::default()).is_err());
    }

    #[test]
    fn policy_additions_are_honoured() {
        let p = Policy::parse(r#"{"allow_commands":["rg","find"]}"#).unwrap();
        assert!(check_argv(&argv("rg foo"), &p).is_ok());
        assert!(check_argv(&argv("find . -name x"), &p).is_ok());
        assert!(needs_confirmation(&argv("rg foo"), &p));
        assert!(!needs_confirmation(&argv("cargo test"), &p));
        assert!(needs_confirmation(&[], &p));
    }

    #[test]
    fn shell_metacharacters_are_refused() {
        for bad in [
            "echo a; touch x",
            "echo a;touch x",
            "echo a && touch x",
            "echo a & touch x",
            "echo a | cat",
            "echo a || touch x",
            "echo `touch x`",
            "echo $(touch x)",
            "echo $HOME",
            "echo a > x",
            "cat < /etc/passwd",
            "echo 'a;b'",
            "echo \"a\nb\"",
            "echo \"a\rb\"",
        ] {
            let err = check(bad);
            assert!(err.is_err(), "{bad:?} should be refused");
        }
        let v = vec!["echo".to_string(), "a\0b".to_string()];
        assert!(check_argv(&v, &Policy::default()).is_err());
        assert!(check_command_line("echo a\ntouch x").is_err());
        assert!(check_command_line("echo a\r\ntouch x").is_err());
        assert!(check_command_line("echo 'a;b'").is_err());
        assert!(check_command_line("cargo test -- --nocapture").is_ok());
        let v = vec!["echo".to_string(), "ok\ntouch x".to_string()];
        assert!(check_argv(&v, &Policy::default()).is_err());
    }

    #[test]
    fn dangerous_arguments_are_refused() {
        let p = Policy::parse(r#"{"allow_commands":["find"]}"#).unwrap();
        for bad in [
            "git -c core.pager=touch status",
            "git -ccore.pager=touch log",
            "git -C sub -c alias.x=!touch x",
            "git --config-env=core.pager=EVIL log",
            "git --exec-path=/tmp status",
            "git rebase --exec 'touch x' HEAD~2",
            "git rebase --exec=touch HEAD~2",
            "git rebase -x touch HEAD~2",
            "git fetch --upload-pack=touch origin",
            "git fetch --upload-pack touch origin",
            "git push --receive-pack=touch origin",
            "git clone -u touch repo",
            "git ls-remote -u touch origin",
            "git clone --template=tpl repo",
            "git clone ext::touch repo",
            "git config core.pager touch",
            "git config core.sshCommand touch",
            "git config --global core.hooksPath hooks",
            "git config core.fsmonitor touch",
            "git config alias.x '!touch x'",
            "git config filter.x.clean touch",
            "git config diff.x.textconv touch",
            "git config --file x.cfg user.name y",
            "git config include.path ../x.cfg",
            "git config Alias.x '!touch x'",
            "git difftool -x touch",
            "git grep -Otouch foo",
            "git submodule foreach touch x",
            "git bisect run touch x",
            "git filter-branch --tree-filter touch HEAD",
            "cargo --config target.x.runner=touch run",
            "cargo build --config=build.rustc-wrapper=touch",
            "cargo rustc -- -C linker=touch",
            "rustc -C linker=touch main.rs",
            "make --eval=x",
            "sort --compress-program=touch f",
            "node -r ./evil.js app.js",
            "find . -exec touch x {} +",
            "find . -execdir touch x",
            "find . -delete",
            "find . -fprint out",
            "find . -ok touch",
        ] {
            assert!(
                check_argv(&argv(bad), &p).is_err(),
                "{bad:?} should be refused"
            );
        }
    }

    #[test]
    fn every_rule_has_a_reason_and_a_real_program() {
        for r in DANGEROUS_ARGS {
            assert!(!r.why.is_empty());
            assert!(!r.program.contains('/'));
        }
    }

    #[test]
    fn violations_name_the_argument() {
        let err = check("git -c core.pager=x status").unwrap_err();
        assert!(err.subject.contains("core.pager"), "{err}");
        assert!(err.to_string().contains("git -c"), "{err}");
    }
}
