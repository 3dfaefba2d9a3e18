//! The child environment: cleared, then rebuilt from an allowlist.
//!
//! A child process gets `env_clear()` followed by exactly [`child_env`]: the allowlisted variables
//! the runner itself has ([`Policy::env_allowlist`]: `PATH`, `HOME`, `LANG`, ... plus the policy's
//! `env_passthrough`), then the step's own `env` additions. Secrets in the runner's environment
//! (API keys, tokens) therefore never reach a command unless the policy names them.
//!
//! A step's additions are checked by [`check_env_additions`] (plan validation and the tool's
//! `check()` report a violation); [`child_env`] drops any addition that fails the same check, as a
//! second line of defence. Refused additions:
//! - names that are not `[A-Za-z_][A-Za-z0-9_]*` (an `=` or NUL would corrupt the environment block);
//! - values containing NUL;
//! - variables that decide *which program runs* or *which configuration is read*, because setting
//!   them would bypass the command allowlist ([`PROTECTED_ENV`], [`PROTECTED_ENV_PREFIXES`]):
//!   `PATH` (a bare `cargo` would resolve to a script in the workspace), `HOME`/`XDG_CONFIG_HOME`/
//!   `CARGO_HOME` (a workspace-written `.gitconfig` or `config.toml` could name a pager, runner or
//!   wrapper), `LD_PRELOAD`-style loader variables, `GIT_*` (except author/committer identity),
//!   compiler wrappers and runners, and interpreter start-up hooks.

use std::path::Path;

use crate::policy::Policy;
use crate::workspace::SandboxViolation;

/// Variables a step may not set, each because it chooses a program to run or a configuration
/// file that can name one.
pub const PROTECTED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "XDG_CONFIG_HOME",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "RUSTC",
    "RUSTDOC",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "RUSTFLAGS",
    "RUSTDOCFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "SHELL",
    "BASH_ENV",
    "ENV",
    "PAGER",
    "EDITOR",
    "VISUAL",
    "SSH_ASKPASS",
    "PYTHONSTARTUP",
    "PYTHONPATH",
    "PYTHONHOME",
    "NODE_OPTIONS",
    "NODE_PATH",
    "PERL5OPT",
    "RUBYOPT",
    "MAKEFLAGS",
    "MFLAGS",
    "GOFLAGS",
];

/// Prefixes of variable names a step may not set (loader hooks, git and cargo configuration).
pub const PROTECTED_ENV_PREFIXES: &[&str] = &[
    "LD_",
    "DYLD_",
    "GIT_",
    "CARGO_BUILD_",
    "CARGO_TARGET_",
    "CARGO_HOST_",
    "NPM_CONFIG_",
    "npm_config_",
];

/// `GIT_*` variables that only set identity and dates, so a step may set them.
pub const ALLOWED_GIT_ENV: &[&str] = &[
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_AUTHOR_DATE",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    "GIT_COMMITTER_DATE",
];

/// Whether `name` is a portable environment variable name.
fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// Checks one step-supplied variable; `Err` says why it is refused.
pub fn check_env_addition(name: &str, value: &str) -> Result<(), SandboxViolation> {
    if !valid_name(name) {
        return Err(SandboxViolation::new(
            name,
            "invalid environment variable name (expected [A-Za-z_][A-Za-z0-9_]*)",
        ));
    }
    if value.contains('\0') {
        return Err(SandboxViolation::new(
            name,
            "environment variable value contains a NUL byte",
        ));
    }
    let upper = name.to_ascii_uppercase();
    if ALLOWED_GIT_ENV.contains(&upper.as_str()) {
        return Ok(());
    }
    if PROTECTED_ENV.contains(&upper.as_str())
        || PROTECTED_ENV_PREFIXES
            .iter()
            .any(|p| upper.starts_with(&p.to_ascii_uppercase()))
    {
        return Err(SandboxViolation::new(
            name,
            "this environment variable chooses which program or configuration runs and cannot be set by a step",
        ));
    }
    Ok(())
}

/// Checks all of a step's `env` additions; the first problem is returned.
pub fn check_env_additions(additions: &[(String, String)]) -> Result<(), SandboxViolation> {
    additions
        .iter()
        .try_for_each(|(k, v)| check_env_addition(k, v))
}

/// The complete environment for a child (see the module docs): allowlisted variables present in
/// the runner's environment, then the step's additions that pass [`check_env_addition`] (an
/// addition replaces an inherited variable of the same name). Variables whose values are not
/// valid UTF-8 are left out.
pub fn child_env(policy: &Policy, additions: &[(String, String)]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = Vec::new();
    for name in policy.env_allowlist() {
        // The runner's own secrets (approval key, LLM key, and the files naming them) never reach
        // a command, whatever the policy says: a command holding the approval key could approve
        // plans nobody reviewed.
        if !valid_name(name)
            || crate::redact::is_runner_secret_var(name)
            || env.iter().any(|(k, _)| k == name)
        {
            continue;
        }
        if let Ok(value) = std::env::var(name) {
            env.push((name.to_string(), value));
        }
    }
    for (name, value) in additions {
        if check_env_addition(name, value).is_err() {
            continue;
        }
        match env.iter_mut().find(|(k, _)| k == name) {
            Some(slot) => slot.1 = value.clone(),
            None => env.push((name.clone(), value.clone())),
        }
    }
    env
}

/// Configuration git always runs with, given through `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_n`/
/// `GIT_CONFIG_VALUE_n`: command-line scope, read after (so it beats) every repository's config,
/// and kept by git for the git processes it starts in submodules.
///
/// Every key whose value is a program git would run is set to a value that runs nothing (`:` for
/// editors, `cat` for pagers, an empty list of credential helpers and askpass) or only `false`
/// (signing programs, which fail instead of running what a repository names). Keys whose names
/// cannot be listed (`filter.<driver>.*`, `diff.<driver>.textconv`/`command`,
/// `merge.<driver>.driver`, `remote.<name>.uploadpack`, ...) are neutralised by pinning `GIT_DIR`
/// to the workspace's own protected `.git` instead (see [`git_env`]); `docs/security.md` says what
/// remains.
pub const GIT_FORCED_CONFIG: &[(&str, &str)] = &[
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.sshCommand", "ssh"),
    ("core.pager", "cat"),
    ("core.editor", ":"),
    ("sequence.editor", ":"),
    ("core.askPass", ""),
    ("core.gitProxy", "none"),
    ("core.alternateRefsCommand", "true"),
    ("credential.helper", ""),
    ("gpg.program", "false"),
    ("gpg.openpgp.program", "false"),
    ("gpg.ssh.program", "false"),
    ("gpg.ssh.defaultKeyCommand", "false"),
    ("gpg.x509.program", "false"),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("tag.forceSignAnnotated", "false"),
    ("push.gpgSign", "false"),
    ("log.showSignature", "false"),
    ("merge.verifySignatures", "false"),
    ("protocol.ext.allow", "never"),
    ("safe.bareRepository", "explicit"),
    ("submodule.recurse", "false"),
    ("diff.ignoreSubmodules", "all"),
    ("diff.submodule", "short"),
    ("status.submoduleSummary", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("push.recurseSubmodules", "no"),
    ("gc.autoDetach", "false"),
    ("maintenance.auto", "false"),
];

/// Transports git may use: no `ext::` (runs a shell command) and no `<helper>::` remote helpers.
pub const GIT_ALLOW_PROTOCOL: &str = "file:git:http:https:ssh";

/// The environment git always gets on top of [`child_env`] (SPEC §6 "git"): no system or global
/// configuration, discovery never above the workspace, the repository pinned to the workspace's
/// own `.git` (`GIT_DIR`, `GIT_WORK_TREE`), and [`GIT_FORCED_CONFIG`].
///
/// Why pin the repository: `.git` at the workspace root is protected from writes (file tools,
/// bwrap, Landlock), while a nested repository (`vendor/lib/.git`, a bare repository a plan wrote,
/// a `.git` file pointing anywhere) has a configuration a plan may have written — and its filter,
/// diff and merge drivers cannot be listed by name to be overridden. With `GIT_DIR` pinned, git
/// never reads such a configuration; `-C dir` only moves the working directory inside the one
/// repository.
pub fn git_env(workspace_root: &Path) -> Vec<(String, String)> {
    let mut env = vec![
        ("GIT_CONFIG_NOSYSTEM".to_string(), "1".to_string()),
        ("GIT_CONFIG_GLOBAL".to_string(), "/dev/null".to_string()),
        ("GIT_ATTR_NOSYSTEM".to_string(), "1".to_string()),
        (
            "GIT_DIR".to_string(),
            workspace_root.join(".git").to_string_lossy().into_owned(),
        ),
        (
            "GIT_WORK_TREE".to_string(),
            workspace_root.to_string_lossy().into_owned(),
        ),
        ("GIT_TERMINAL_PROMPT".to_string(), "0".to_string()),
        ("GIT_ASKPASS".to_string(), String::new()),
        ("GIT_PAGER".to_string(), "cat".to_string()),
        ("GIT_EDITOR".to_string(), ":".to_string()),
        ("GIT_SEQUENCE_EDITOR".to_string(), ":".to_string()),
        ("GIT_SSH_COMMAND".to_string(), "ssh".to_string()),
        ("GIT_PROXY_COMMAND".to_string(), String::new()),
        (
            "GIT_ALLOW_PROTOCOL".to_string(),
            GIT_ALLOW_PROTOCOL.to_string(),
        ),
        ("GIT_PROTOCOL_FROM_USER".to_string(), "0".to_string()),
    ];
    if let Some(parent) = workspace_root.parent() {
        env.push((
            "GIT_CEILING_DIRECTORIES".to_string(),
            parent.to_string_lossy().into_owned(),
        ));
    }
    env.push((
        "GIT_CONFIG_COUNT".to_string(),
        GIT_FORCED_CONFIG.len().to_string(),
    ));
    for (i, (k, v)) in GIT_FORCED_CONFIG.iter().enumerate() {
        env.push((format!("GIT_CONFIG_KEY_{i}"), k.to_string()));
        env.push((format!("GIT_CONFIG_VALUE_{i}"), v.to_string()));
    }
    env
}

/// Adds what a program always needs on top of [`child_env`]; today only git has anything: every
/// inherited `GIT_*` variable except identity ([`ALLOWED_GIT_ENV`]) is dropped and [`git_env`] is
/// added. `program` is the `argv[0]` given to the child (its basename is compared).
///
/// Why here and not in the command rules: the environment is the one place that also covers the
/// git processes git itself starts (hooks, submodules) and configuration the plan cannot see.
pub fn harden_for_program(program: &str, workspace_root: &Path, env: &mut Vec<(String, String)>) {
    let base = Path::new(program)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if base != "git" {
        return;
    }
    env.retain(|(k, _)| {
        let upper = k.to_ascii_uppercase();
        !upper.starts_with("GIT_") || ALLOWED_GIT_ENV.contains(&upper.as_str())
    });
    env.extend(git_env(workspace_root));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn only_allowlisted_variables_pass_through() {
        // PATH is always set in a test process; a secret-looking variable must not pass.
        let policy = Policy::default();
        let env = child_env(&policy, &[]);
        assert!(env.iter().any(|(k, _)| k == "PATH"));
        for (k, _) in &env {
            assert!(
                policy.env_allowlist().any(|a| a == k),
                "{k} is not allowlisted"
            );
        }
    }

    #[test]
    fn policy_passthrough_is_added() {
        // CARGO_PKG_NAME is set by cargo for every test binary.
        let policy = Policy::parse(r#"{"env_passthrough":["CARGO_PKG_NAME"]}"#).unwrap();
        let env = child_env(&policy, &[]);
        assert!(
            env.iter()
                .any(|(k, v)| k == "CARGO_PKG_NAME" && v == "acode_run")
        );
        let env = child_env(&Policy::default(), &[]);
        assert!(!env.iter().any(|(k, _)| k == "CARGO_PKG_NAME"));
    }

    #[test]
    fn additions_are_added_and_override() {
        let env = child_env(
            &Policy::default(),
            &pairs(&[("RUST_BACKTRACE", "1"), ("LANG", "C.UTF-8")]),
        );
        assert!(env.contains(&("RUST_BACKTRACE".into(), "1".into())));
        assert_eq!(env.iter().filter(|(k, _)| k == "LANG").count(), 1);
        assert!(env.contains(&("LANG".into(), "C.UTF-8".into())));
    }

    #[test]
    fn dangerous_additions_are_refused_and_dropped() {
        for (k, v) in [
            ("PATH", "./bin"),
            ("HOME", "."),
            ("LD_PRELOAD", "./evil.so"),
            ("GIT_SSH_COMMAND", "touch x"),
            ("GIT_CONFIG_PARAMETERS", "'core.pager=touch'"),
            ("git_pager", "touch"),
            ("RUSTC_WRAPPER", "touch"),
            ("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER", "touch"),
            ("CARGO_HOME", "."),
            ("BASH_ENV", "x"),
            ("NODE_OPTIONS", "--require ./x.js"),
            ("BAD=NAME", "x"),
            ("1ABC", "x"),
            ("", "x"),
            ("OK", "a\0b"),
        ] {
            let add = pairs(&[(k, v)]);
            assert!(check_env_additions(&add).is_err(), "{k} should be refused");
            let env = child_env(&Policy::default(), &add);
            assert!(
                !env.iter().any(|(ek, ev)| ek == k && ev == v),
                "{k} should be dropped"
            );
        }
        assert!(check_env_additions(&pairs(&[("GIT_AUTHOR_NAME", "Bot")])).is_ok());
        assert!(check_env_additions(&pairs(&[("RUST_LOG", "debug"), ("_X1", "")])).is_ok());
    }

    #[test]
    fn git_gets_its_hardened_environment_and_nothing_else_does() {
        let root = Path::new("/work/ws");
        let inherited = pairs(&[
            ("PATH", "/usr/bin"),
            ("GIT_SSH_COMMAND", "touch x"),
            ("GIT_DIR", "/elsewhere"),
            ("git_pager", "touch"),
            ("GIT_AUTHOR_NAME", "Bot"),
        ]);
        let mut env = inherited.clone();
        harden_for_program("cat", root, &mut env);
        assert_eq!(env, inherited);
        for program in ["git", "/usr/bin/git"] {
            let mut env = inherited.clone();
            harden_for_program(program, root, &mut env);
            let get = |k: &str| {
                env.iter()
                    .filter(|(n, _)| n == k)
                    .map(|(_, v)| v.as_str())
                    .collect::<Vec<_>>()
            };
            assert_eq!(get("GIT_DIR"), ["/work/ws/.git"]);
            assert_eq!(get("GIT_WORK_TREE"), ["/work/ws"]);
            assert_eq!(get("GIT_SSH_COMMAND"), ["ssh"]);
            assert_eq!(get("GIT_CEILING_DIRECTORIES"), ["/work"]);
            assert_eq!(get("GIT_CONFIG_GLOBAL"), ["/dev/null"]);
            assert_eq!(get("GIT_AUTHOR_NAME"), ["Bot"]);
            assert!(get("git_pager").is_empty());
            assert_eq!(get("PATH"), ["/usr/bin"]);
            let count: usize = get("GIT_CONFIG_COUNT")[0].parse().unwrap();
            assert_eq!(count, GIT_FORCED_CONFIG.len());
            for i in 0..count {
                assert_eq!(get(&format!("GIT_CONFIG_KEY_{i}")).len(), 1);
                assert_eq!(get(&format!("GIT_CONFIG_VALUE_{i}")).len(), 1);
            }
            assert!(get("GIT_CONFIG_KEY_0").contains(&"core.hooksPath"));
        }
    }
}
