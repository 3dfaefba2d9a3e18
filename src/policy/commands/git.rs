//! git's rules: global options, a subcommand allowlist, and per-subcommand options.
//!
//! git always runs against the workspace's own repository (`GIT_DIR` and `GIT_WORK_TREE` are
//! pinned by [`crate::policy::env::git_env`]), so `-C` only moves the working directory inside it.

use crate::policy::commands::options::*;
use crate::policy::commands::*;

/// Why `-c` and friends are refused.
const CONFIG_WHY: &str = "git -c/--config-env set configuration (core.pager, core.sshCommand, alias.*, ...) that runs arbitrary programs";
const REPO_WHY: &str = "git always works on the workspace's own repository; --git-dir, --work-tree and --bare would point it elsewhere";

/// git's global options (exact names: git's own parser does not abbreviate them).
const GLOBAL: Table<'static> = Table {
    name: "git",
    shadow_pass: None,
    style: Style::Gnu { abbrev: false },
    strict: true,
    stop_at_positional: true,
    opts: &[
        opt('C', "", Value, Rule::ReadInside),
        opt('c', "", Value, Rule::Refuse(CONFIG_WHY)),
        lr("config-env", Value, CONFIG_WHY),
        lr("git-dir", Value, REPO_WHY),
        lr("work-tree", Value, REPO_WHY),
        lr("bare", Flag, REPO_WHY),
        lr(
            "exec-path",
            Optional,
            "git --exec-path makes git look for its subcommands in a directory of the caller's choosing",
        ),
        lr(
            "super-prefix",
            Value,
            "git --super-prefix is internal to git",
        ),
        lr(
            "help",
            Flag,
            "git --help starts a manual page viewer or browser",
        ),
        opt('h', "", Flag, Rule::Ok),
        opt('p', "paginate", Flag, Rule::Ok),
        opt('P', "no-pager", Flag, Rule::Ok),
        opt('v', "version", Flag, Rule::Ok),
        lv("namespace"),
        lv("attr-source"),
        opt('\0', "list-cmds", Optional, Rule::Ok),
        lf("no-replace-objects"),
        lf("literal-pathspecs"),
        lf("glob-pathspecs"),
        lf("noglob-pathspecs"),
        lf("icase-pathspecs"),
        lf("no-optional-locks"),
        lf("no-advice"),
        lf("html-path"),
        lf("man-path"),
        lf("info-path"),
    ],
};

/// The git subcommands a plan may run. Anything else — an alias, `difftool`, `submodule`,
/// `bisect`, `filter-branch`, `help`, `clone`, `worktree`, ... — is refused.
pub const SUBCOMMANDS: &[&str] = &[
    "add",
    "apply",
    "blame",
    "branch",
    "cat-file",
    "check-attr",
    "check-ignore",
    "checkout",
    "cherry-pick",
    "commit",
    "config",
    "count-objects",
    "describe",
    "diff",
    "diff-files",
    "diff-index",
    "diff-tree",
    "fetch",
    "for-each-ref",
    "format-patch",
    "grep",
    "hash-object",
    "init",
    "log",
    "ls-files",
    "ls-remote",
    "ls-tree",
    "merge",
    "merge-base",
    "mv",
    "name-rev",
    "pull",
    "push",
    "rebase",
    "reflog",
    "remote",
    "reset",
    "restore",
    "rev-list",
    "rev-parse",
    "revert",
    "rm",
    "shortlog",
    "show",
    "show-ref",
    "stash",
    "status",
    "switch",
    "tag",
    "var",
    "version",
];

/// Merge strategies built into git; any other name runs a `git-merge-<name>` program.
const STRATEGIES: &[&str] = &["ort", "recursive", "resolve", "octopus", "ours", "subtree"];

fn strategy(v: &str) -> Option<&'static str> {
    (!STRATEGIES.contains(&v)).then_some(
        "only git's built-in merge strategies (ort, recursive, resolve, octopus, ours, subtree) are allowed: another name runs a git-merge-<name> program",
    )
}

/// Options refused in every subcommand, matched by any abbreviation (git's parse-options
/// accepts unique prefixes), plus the value-taking options whose values must not be misread.
const COMMON: &[Opt] = &[
    lr(
        "exec",
        Value,
        "git --exec runs a program (rebase, push, archive)",
    ),
    lr(
        "upload-pack",
        Value,
        "git --upload-pack runs a program in place of git-upload-pack",
    ),
    lr(
        "receive-pack",
        Value,
        "git --receive-pack runs a program in place of git-receive-pack",
    ),
    lr(
        "output",
        Value,
        "git --output writes a file anywhere; write output with a file step instead",
    ),
    lr(
        "ext-diff",
        Flag,
        "git --ext-diff runs external diff programs named by configuration",
    ),
    lr(
        "textconv",
        Flag,
        "git --textconv runs text conversion programs named by configuration",
    ),
    lr(
        "open-files-in-pager",
        Optional,
        "git grep --open-files-in-pager runs a program of the caller's choosing",
    ),
    lr(
        "recurse-submodules",
        Optional,
        "recursing into submodules runs git in nested repositories with their own configuration",
    ),
    lr(
        "separate-git-dir",
        Value,
        "git --separate-git-dir puts the repository outside the workspace's .git",
    ),
    lr("git-dir", Value, REPO_WHY),
    lr("work-tree", Value, REPO_WHY),
    lr(
        "unsafe-paths",
        Flag,
        "git apply --unsafe-paths writes outside the working tree",
    ),
    lr(
        "help",
        Flag,
        "git <command> --help starts a manual page viewer or browser",
    ),
    lr(
        "template",
        Value,
        "git --template installs hooks (programs) from a directory of the caller's choosing",
    ),
    lf("no-ext-diff"),
    lf("no-textconv"),
    lf("no-recurse-submodules"),
];

/// Short options per subcommand: the dangerous ones and those taking a value (so a cluster
/// such as `-ix cmd` is read as git reads it).
fn shorts(sub: &str) -> Vec<Opt> {
    const X_WHY: &str = "git rebase -x/--exec runs a command after each commit";
    match sub {
        "rebase" => vec![
            opt('x', "", Value, Rule::Refuse(X_WHY)),
            opt('s', "", Value, Rule::Value(strategy)),
            opt('X', "", Value, Rule::Ok),
            opt('C', "", Value, Rule::Ok),
            opt('S', "", Optional, Rule::Ok),
        ],
        "merge" | "pull" | "cherry-pick" | "revert" => vec![
            opt('s', "", Value, Rule::Value(strategy)),
            opt('X', "", Value, Rule::Ok),
            opt('m', "", Value, Rule::Ok),
            opt('F', "", Value, Rule::Ok),
            opt('S', "", Optional, Rule::Ok),
        ],
        "grep" => vec![
            opt(
                'O',
                "",
                Optional,
                Rule::Refuse("git grep -O opens results in a program of the caller's choosing"),
            ),
            opt('e', "", Value, Rule::Ok),
            opt('f', "", Value, Rule::Ok),
            opt('A', "", Value, Rule::Ok),
            opt('B', "", Value, Rule::Ok),
            opt('C', "", Value, Rule::Ok),
            opt('m', "", Value, Rule::Ok),
        ],
        "format-patch" => vec![
            opt('o', "", Value, Rule::WriteInside),
            opt('v', "", Value, Rule::Ok),
        ],
        "add" => vec![opt('f', "", Flag, Rule::Refuse(FORCE_ADD_WHY))],
        "stash" => vec![
            opt('u', "", Flag, Rule::Refuse(UNTRACKED_WHY)),
            opt('a', "", Flag, Rule::Refuse(UNTRACKED_WHY)),
            opt('m', "", Value, Rule::Ok),
        ],
        "ls-remote" => vec![opt(
            'u',
            "",
            Value,
            Rule::Refuse("git ls-remote -u runs a program in place of git-upload-pack"),
        )],
        "commit" => vec![
            opt('m', "", Value, Rule::Ok),
            opt('F', "", Value, Rule::Ok),
            opt('C', "", Value, Rule::Ok),
            opt('c', "", Value, Rule::Ok),
            opt('t', "", Value, Rule::Ok),
            opt('u', "", Optional, Rule::Ok),
            opt('S', "", Optional, Rule::Ok),
        ],
        "tag" => vec![
            opt('m', "", Value, Rule::Ok),
            opt('F', "", Value, Rule::Ok),
            opt('u', "", Value, Rule::Ok),
        ],
        _ => vec![],
    }
}

const FORCE_ADD_WHY: &str = "git add --force puts ignored files (such as the runner's own .acode/ state) into the index, from where reset, checkout, stash and rm would overwrite or delete them";
const UNTRACKED_WHY: &str = "git stash --include-untracked/--all deletes untracked files (such as the runner's own .acode/ state) from the working tree";

/// The long options of `sub`: [`COMMON`] plus its own.
fn longs(sub: &str) -> Vec<Opt> {
    let mut v = COMMON.to_vec();
    if matches!(sub, "merge" | "pull" | "rebase" | "cherry-pick" | "revert") {
        v.push(opt('\0', "strategy", Value, Rule::Value(strategy)));
        v.push(lv("strategy-option"));
    }
    match sub {
        "format-patch" => {
            v.push(opt('\0', "output-directory", Value, Rule::WriteInside));
            v.push(lf("stdout"));
        }
        "commit" | "tag" | "merge" => {
            v.push(lv("message"));
            v.push(lv("file"));
            v.push(lv("author"));
            v.push(lv("date"));
        }
        "add" => v.push(lr("force", Flag, FORCE_ADD_WHY)),
        "apply" => v.push(opt('\0', "build-fake-ancestor", Value, Rule::WriteInside)),
        "stash" => {
            v.push(lr("include-untracked", Flag, UNTRACKED_WHY));
            v.push(lr("all", Flag, UNTRACKED_WHY));
            v.push(lv("message"));
        }
        "diff" | "log" | "show" => {
            // Listed so that `--output-indicator-*` are not taken for `--output`.
            v.push(lv("output-indicator-new"));
            v.push(lv("output-indicator-old"));
            v.push(lv("output-indicator-context"));
        }
        _ => {}
    }
    v
}

/// `git init [--quiet] [-b BRANCH] [--object-format F] [--ref-format F] [--shared[=P]] [DIR]`:
/// the directory, if given, must be the workspace root, because git is pinned to the
/// workspace's own `.git`.
const INIT: Table<'static> = Table {
    name: "git init",
    shadow_pass: None,
    style: Style::Gnu { abbrev: true },
    strict: true,
    stop_at_positional: false,
    opts: &[
        opt('q', "quiet", Flag, Rule::Ok),
        opt('b', "initial-branch", Value, Rule::Ok),
        lv("object-format"),
        lv("ref-format"),
        opt('\0', "shared", Optional, Rule::Ok),
        lr("bare", Flag, REPO_WHY),
        lr(
            "template",
            Value,
            "git --template installs hooks (programs) from a directory of the caller's choosing",
        ),
        lr(
            "separate-git-dir",
            Value,
            "git --separate-git-dir puts the repository outside the workspace's .git",
        ),
    ],
};

/// `git mv [-f] [-k] [-n] [-v] [--sparse] SOURCE... DEST`: every path is written.
const MV: Table<'static> = Table {
    name: "git mv",
    shadow_pass: None,
    style: Style::Gnu { abbrev: true },
    strict: true,
    stop_at_positional: false,
    opts: &[
        opt('f', "force", Flag, Rule::Ok),
        opt('k', "", Flag, Rule::Ok),
        opt('n', "dry-run", Flag, Rule::Ok),
        opt('v', "verbose", Flag, Rule::Ok),
        lf("sparse"),
    ],
};

/// The only configuration keys a plan may set: identity. Everything else in `git config` is
/// read-only (see `CONFIG`).
pub const CONFIG_WRITABLE: &[&str] = &["user.name", "user.email"];

const CONFIG_WRITE_WHY: &str = "git config may only read configuration, or set user.name/user.email: other keys can name programs or change where git reads configuration";

/// `git config`: reading forms, and setting identity.
const CONFIG: Table<'static> = Table {
    name: "git config",
    shadow_pass: None,
    style: Style::Gnu { abbrev: true },
    strict: true,
    stop_at_positional: false,
    opts: &[
        lf("get"),
        lf("get-all"),
        lf("get-regexp"),
        lf("get-urlmatch"),
        opt('l', "list", Flag, Rule::Ok),
        lf("local"),
        lf("show-origin"),
        lf("show-scope"),
        lf("name-only"),
        opt('z', "null", Flag, Rule::Ok),
        lv("type"),
        lf("bool"),
        lf("int"),
        lf("bool-or-int"),
        lf("path"),
        lf("expiry-date"),
        lf("no-type"),
        lv("default"),
        lf("includes"),
        lf("no-includes"),
        lf("all"),
        lf("regexp"),
        lv("value"),
        lf("fixed-value"),
        lv("url"),
        lr(
            "global",
            Flag,
            "git config --global changes configuration outside the workspace",
        ),
        lr(
            "system",
            Flag,
            "git config --system changes the machine's configuration",
        ),
        lr(
            "worktree",
            Flag,
            "git config --worktree writes configuration",
        ),
        opt(
            'f',
            "file",
            Value,
            Rule::Refuse(
                "git config --file reads or writes a configuration file the caller chooses",
            ),
        ),
        lr(
            "blob",
            Value,
            "git config --blob reads configuration from an object the caller chooses",
        ),
        opt(
            'e',
            "edit",
            Flag,
            Rule::Refuse("git config --edit opens an editor"),
        ),
        lr("add", Flag, CONFIG_WRITE_WHY),
        lr("replace-all", Flag, CONFIG_WRITE_WHY),
        lr("unset", Flag, CONFIG_WRITE_WHY),
        lr("unset-all", Flag, CONFIG_WRITE_WHY),
        lr("rename-section", Flag, CONFIG_WRITE_WHY),
        lr("remove-section", Flag, CONFIG_WRITE_WHY),
        lr("append", Flag, CONFIG_WRITE_WHY),
    ],
};

fn check_config(args: &[String], ctx: &ArgContext) -> Result<(), SandboxViolation> {
    let parsed = check_table(&CONFIG, args, ctx)?;
    let reading = ["get", "get-all", "get-regexp", "get-urlmatch", "list"]
        .iter()
        .any(|o| parsed.has(o));
    let words: Vec<&str> = parsed.positionals().collect();
    let is_writable = |key: &str| CONFIG_WRITABLE.contains(&key.to_ascii_lowercase().as_str());
    let ok = match words.as_slice() {
        _ if reading => true,
        ["get" | "list", ..] => true,
        ["set", key, _value] => is_writable(key),
        [] | [_] => true,
        [key, _value] => is_writable(key),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(SandboxViolation::new(
            format!("git config {}", words.join(" ")),
            CONFIG_WRITE_WHY,
        ))
    }
}

/// Checks git's arguments (everything after `git`).
pub fn check(args: &[String], ctx: &ArgContext) -> Result<(), SandboxViolation> {
    let global = check_table(&GLOBAL, args, ctx)?;
    // `-C` changes the directory the rest is relative to.
    let mut cwd = ctx.cwd.to_path_buf();
    for item in &global.items {
        if let Item::Opt {
            opt,
            value: Some(v),
            ..
        } = item
            && opt.short == Some('C')
        {
            cwd = ArgContext {
                workspace: ctx.workspace,
                cwd: &cwd,
            }
            .resolve(v, Access::Read)?;
        }
    }
    let ctx = ArgContext {
        workspace: ctx.workspace,
        cwd: &cwd,
    };
    let Some(sub) = args.get(global.end) else {
        return Ok(());
    };
    let rest = &args[global.end + 1..];
    if !SUBCOMMANDS.contains(&sub.as_str()) {
        return Err(SandboxViolation::new(
            format!("git {sub}"),
            "not a git subcommand acode-run allows (aliases are never run; see docs/security.md for the list)",
        ));
    }
    match sub.as_str() {
        "init" => {
            let parsed = check_table(&INIT, rest, &ctx)?;
            for dir in parsed.positionals() {
                let at = ctx.resolve(dir, Access::Read)?;
                if at != ctx.workspace.root() {
                    return Err(SandboxViolation::new(
                        format!("git init {dir}"),
                        "git init may only create the workspace's own repository (git always works on <workspace>/.git)",
                    ));
                }
            }
            Ok(())
        }
        "mv" => {
            let parsed = check_table(&MV, rest, &ctx)?;
            parsed
                .positionals()
                .try_for_each(|p| ctx.resolve(p, Access::Write).map(drop))
        }
        "config" => check_config(rest, &ctx),
        other => {
            let mut opts = longs(other);
            opts.extend(shorts(other));
            let table = Table {
                name: "git",
                shadow_pass: Some(true),
                style: Style::Gnu { abbrev: true },
                strict: false,
                stop_at_positional: false,
                opts: &opts,
            };
            let parsed = check_table(&table, rest, &ctx)?;
            if matches!(other, "fetch" | "pull" | "push" | "ls-remote" | "remote")
                && let Some(url) = parsed.positionals().find(|p| p.contains("::"))
            {
                return Err(SandboxViolation::new(
                    url,
                    "transport::address URLs run a git-remote-<transport> helper program",
                ));
            }
            Ok(())
        }
    }
}
