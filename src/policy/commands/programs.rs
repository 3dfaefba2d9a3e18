//! Per-program rules: one option table per program with options that run programs or write files
//! (sort, cargo, rustc, make, npm, node, go, find, git), and the dispatch by program name.

use crate::workspace::{Access, SandboxViolation};

use crate::policy::commands::git;
use crate::policy::commands::options::*;

/// GNU `sort`: every option, so abbreviations resolve exactly as getopt_long resolves them.
const SORT: Table<'static> = Table {
    name: "sort",
    shadow_pass: None,
    style: Style::Gnu { abbrev: true },
    strict: true,
    stop_at_positional: false,
    opts: &[
        opt('o', "output", Value, Rule::WriteInside),
        opt(
            '\0',
            "compress-program",
            Value,
            Rule::Refuse("sort --compress-program runs a program of the caller's choosing"),
        ),
        opt('T', "temporary-directory", Value, Rule::WriteInside),
        opt('k', "key", Value, Rule::Ok),
        opt('t', "field-separator", Value, Rule::Ok),
        opt('S', "buffer-size", Value, Rule::Ok),
        lv("batch-size"),
        lv("files0-from"),
        lv("parallel"),
        lv("random-source"),
        lv("sort"),
        // `-c` is a flag (a cluster goes on: `-co x`); only `--check[=WORD]` takes a value.
        opt('c', "", Flag, Rule::Ok),
        opt('\0', "check", Optional, Rule::Ok),
        opt('C', "", Flag, Rule::Ok),
        opt('b', "ignore-leading-blanks", Flag, Rule::Ok),
        opt('d', "dictionary-order", Flag, Rule::Ok),
        opt('f', "ignore-case", Flag, Rule::Ok),
        opt('g', "general-numeric-sort", Flag, Rule::Ok),
        opt('i', "ignore-nonprinting", Flag, Rule::Ok),
        opt('M', "month-sort", Flag, Rule::Ok),
        opt('h', "human-numeric-sort", Flag, Rule::Ok),
        opt('n', "numeric-sort", Flag, Rule::Ok),
        opt('R', "random-sort", Flag, Rule::Ok),
        opt('r', "reverse", Flag, Rule::Ok),
        opt('V', "version-sort", Flag, Rule::Ok),
        opt('m', "merge", Flag, Rule::Ok),
        opt('s', "stable", Flag, Rule::Ok),
        opt('u', "unique", Flag, Rule::Ok),
        opt('z', "zero-terminated", Flag, Rule::Ok),
        lf("debug"),
        lf("help"),
        lf("version"),
    ],
};

/// Why a custom linker, link argument or codegen backend is refused.
const LINKER_WHY: &str = "a custom linker, linker argument or codegen backend is a program (or library) of the caller's choosing run by the compiler";

/// Whether a compiler argument names a program to run (`-C linker=`, `link-arg`, a backend).
fn names_linker(arg: &str) -> bool {
    let a = arg.to_ascii_lowercase();
    a.contains("linker=") || a.contains("link-arg") || a.contains("codegen-backend")
}

/// `rustc -C` / `-Z` values.
fn rustc_codegen(v: &str) -> Option<&'static str> {
    names_linker(v).then_some(LINKER_WHY)
}

/// `cargo` (clap: no abbreviations). Build scripts and `cargo run` run code by design.
const CARGO: Table<'static> = Table {
    name: "cargo",
    shadow_pass: Some(false),
    style: Style::Gnu { abbrev: false },
    strict: false,
    stop_at_positional: false,
    opts: &[
        lr(
            "config",
            Value,
            "cargo --config can set target.*.runner or build.rustc-wrapper to any program",
        ),
        lv("manifest-path"),
        lv("lockfile-path"),
        opt('\0', "target-dir", Value, Rule::WriteInside),
        opt('\0', "artifact-dir", Value, Rule::WriteInside),
        opt('\0', "out-dir", Value, Rule::WriteInside),
        opt('\0', "root", Value, Rule::WriteInside),
        opt('C', "", Value, Rule::ReadInside),
        opt('Z', "", Value, Rule::Value(rustc_codegen)),
        opt('j', "jobs", Value, Rule::Ok),
        opt('p', "package", Value, Rule::Ok),
        opt('F', "features", Value, Rule::Ok),
        lv("color"),
        lv("bin"),
        lv("example"),
        lv("test"),
        lv("bench"),
        lv("target"),
        lv("profile"),
        lv("message-format"),
        lv("explain"),
        lv("registry"),
        lv("index"),
        lv("exclude"),
        lv("path"),
        lv("git"),
        lv("branch"),
        lv("tag"),
        lv("rev"),
        lv("vcs"),
        lv("edition"),
        lv("name"),
        opt('\0', "timings", Optional, Rule::Ok),
        lr(
            "open",
            Flag,
            "cargo doc --open starts a browser program on the host",
        ),
    ],
};

/// Cargo subcommands refused: they write outside the workspace (installing programs onto `PATH`)
/// or act on a registry with the user's credentials.
const CARGO_REFUSED: &[&str] = &[
    "install",
    "uninstall",
    "publish",
    "login",
    "logout",
    "owner",
    "yank",
];

/// `rustc` (no abbreviations).
const RUSTC: Table<'static> = Table {
    name: "rustc",
    shadow_pass: Some(false),
    style: Style::Gnu { abbrev: false },
    strict: false,
    stop_at_positional: false,
    opts: &[
        opt('o', "", Value, Rule::WriteInside),
        opt('\0', "out-dir", Value, Rule::WriteInside),
        opt('C', "codegen", Value, Rule::Value(rustc_codegen)),
        opt('Z', "", Value, Rule::Value(rustc_codegen)),
        opt('L', "", Value, Rule::Ok),
        opt('l', "", Value, Rule::Ok),
        opt('W', "warn", Value, Rule::Ok),
        opt('A', "allow", Value, Rule::Ok),
        opt('D', "deny", Value, Rule::Ok),
        opt('F', "forbid", Value, Rule::Ok),
        lv("emit"),
        lv("extern"),
        lv("crate-type"),
        lv("crate-name"),
        lv("edition"),
        lv("target"),
        lv("cfg"),
        lv("cap-lints"),
        lv("sysroot"),
        lv("print"),
        lv("explain"),
        lv("error-format"),
        lv("json"),
        lv("color"),
        lv("remap-path-prefix"),
    ],
};

/// `rustc --emit KIND[=PATH],...`: every path written must be inside the workspace.
fn check_rustc_emit(parsed: &Parsed, ctx: &ArgContext) -> Result<(), SandboxViolation> {
    for item in &parsed.items {
        if let Item::Opt {
            opt,
            value: Some(v),
            ..
        } = item
            && opt.long == Some("emit")
        {
            for part in v.split(',') {
                if let Some((_, path)) = part.split_once('=') {
                    ctx.resolve(path, Access::Write).map_err(|e| {
                        SandboxViolation::new(
                            format!("--emit {v}"),
                            format!("--emit paths must be inside the workspace: {}", e.reason),
                        )
                    })?;
                }
            }
        }
    }
    Ok(())
}

/// GNU `make` (getopt_long: abbreviations). Recipes are shell commands from a Makefile the plan
/// can write: make runs code by design.
const MAKE: Table<'static> = Table {
    name: "make",
    shadow_pass: Some(true),
    style: Style::Gnu { abbrev: true },
    strict: false,
    stop_at_positional: false,
    opts: &[
        opt(
            'E',
            "eval",
            Value,
            Rule::Refuse("make --eval injects makefile text, i.e. shell recipes"),
        ),
        opt('C', "directory", Value, Rule::ReadInside),
        opt('f', "file", Value, Rule::Ok),
        lv("makefile"),
        opt('I', "include-dir", Value, Rule::Ok),
        opt('o', "old-file", Value, Rule::Ok),
        lv("assume-old"),
        opt('W', "what-if", Value, Rule::Ok),
        lv("new-file"),
        lv("assume-new"),
        opt('j', "jobs", Optional, Rule::Ok),
        opt('l', "load-average", Optional, Rule::Ok),
        lv("max-load"),
        opt('O', "output-sync", Optional, Rule::Ok),
        opt('\0', "debug", Optional, Rule::Ok),
        opt('\0', "shuffle", Optional, Rule::Ok),
        lv("jobserver-auth"),
        lv("jobserver-fds"),
        lv("jobserver-style"),
        lf("always-make"),
        lf("environment-overrides"),
        lf("ignore-errors"),
        lf("keep-going"),
        lf("just-print"),
        lf("dry-run"),
        lf("recon"),
        lf("no-builtin-rules"),
        lf("no-builtin-variables"),
        lf("print-data-base"),
        lf("question"),
        lf("silent"),
        lf("quiet"),
        lf("no-silent"),
        lf("stop"),
        lf("no-keep-going"),
        lf("touch"),
        lf("trace"),
        lf("version"),
        lf("print-directory"),
        lf("no-print-directory"),
        lf("warn-undefined-variables"),
        lf("check-symlink-times"),
        lf("help"),
    ],
};

/// make's command-line variable assignments that choose the program recipes run with, or run a
/// shell command while being parsed (`X != cmd`).
fn check_make_assignment(word: &str) -> Result<(), SandboxViolation> {
    let Some((name, _)) = word.split_once('=') else {
        return Ok(());
    };
    if name.ends_with('!') {
        return Err(SandboxViolation::new(
            word,
            "a make '!=' assignment runs a shell command",
        ));
    }
    let name = name.trim_end_matches([':', '+', '?']).trim();
    if ["SHELL", ".SHELLFLAGS", "MAKESHELL", "MAKEFLAGS", "MFLAGS"].contains(&name) {
        return Err(SandboxViolation::new(
            word,
            "setting make's SHELL or flags runs recipes with a program or options of the caller's choosing",
        ));
    }
    Ok(())
}

/// `npm` (nopt: abbreviations of any config key; unknown `--key` set config). Scripts in
/// `package.json` and `npm exec` run code by design.
const NPM: Table<'static> = Table {
    name: "npm",
    shadow_pass: Some(false),
    style: Style::Gnu { abbrev: true },
    strict: false,
    stop_at_positional: false,
    opts: &[
        lr(
            "script-shell",
            Value,
            "npm --script-shell runs scripts with a program of the caller's choosing",
        ),
        lr(
            "node-options",
            Value,
            "npm --node-options can preload arbitrary modules",
        ),
        lr(
            "shell",
            Value,
            "npm --shell names the program npm runs for exec and explore",
        ),
        lr("editor", Value, "npm --editor names a program npm runs"),
        lr("browser", Value, "npm --browser names a program npm runs"),
        lr(
            "git",
            Value,
            "npm --git names the program npm runs for git dependencies",
        ),
        lr(
            "init-module",
            Value,
            "npm --init-module runs a JavaScript file of the caller's choosing",
        ),
        lr(
            "userconfig",
            Value,
            "npm --userconfig reads configuration (which can name programs) from a file of the caller's choosing",
        ),
        lr(
            "globalconfig",
            Value,
            "npm --globalconfig reads configuration (which can name programs) from a file of the caller's choosing",
        ),
        opt(
            'g',
            "global",
            Flag,
            Rule::Refuse("npm --global installs outside the workspace"),
        ),
        lr(
            "location",
            Value,
            "npm --location can install outside the workspace",
        ),
        opt('C', "prefix", Value, Rule::WriteInside),
        opt('\0', "cache", Value, Rule::WriteInside),
        opt('w', "workspace", Value, Rule::Ok),
    ],
};

/// npm subcommands refused: they write the user's configuration outside the workspace, open an
/// editor, shell or browser, or act on the registry with the user's credentials.
const NPM_REFUSED: &[&str] = &[
    "link",
    "ln",
    "unlink",
    "set",
    "edit",
    "explore",
    "docs",
    "home",
    "repo",
    "bugs",
    "help",
    "login",
    "logout",
    "adduser",
    "publish",
    "unpublish",
    "owner",
    "token",
    "deprecate",
];

/// `node` options before the script (everything after the script is the script's). `node` runs
/// code by design; preloading is refused only because it hides code from a reviewer.
const NODE: Table<'static> = Table {
    name: "node",
    shadow_pass: None,
    style: Style::Gnu { abbrev: false },
    strict: false,
    stop_at_positional: true,
    opts: &[
        opt(
            'r',
            "require",
            Value,
            Rule::Refuse("node --require preloads arbitrary code"),
        ),
        lr("import", Value, "node --import preloads arbitrary code"),
        lr(
            "loader",
            Value,
            "node --loader runs arbitrary code as a module loader",
        ),
        lr(
            "experimental-loader",
            Value,
            "node --experimental-loader runs arbitrary code as a module loader",
        ),
        opt('e', "eval", Value, Rule::Ok),
        opt('p', "print", Value, Rule::Ok),
        lv("env-file"),
        lv("input-type"),
        lv("conditions"),
        lv("title"),
        lv("stack-size"),
    ],
};

/// `go` (the flag package: `-name`, no abbreviations). `go run`, `go test` and `go generate`
/// run code by design.
const GO: Table<'static> = Table {
    name: "go",
    shadow_pass: Some(true),
    style: Style::Go,
    strict: false,
    stop_at_positional: false,
    opts: &[
        opt('\0', "o", Value, Rule::WriteInside),
        lr(
            "toolexec",
            Value,
            "go -toolexec runs every compiler tool through a program of the caller's choosing",
        ),
        lr(
            "exec",
            Value,
            "go -exec runs the built binary through a program of the caller's choosing",
        ),
        opt('\0', "C", Value, Rule::ReadInside),
        opt('\0', "pkgdir", Value, Rule::WriteInside),
        opt('\0', "modfile", Value, Rule::WriteInside),
        opt('\0', "coverprofile", Value, Rule::WriteInside),
        opt('\0', "cpuprofile", Value, Rule::WriteInside),
        opt('\0', "memprofile", Value, Rule::WriteInside),
        opt('\0', "blockprofile", Value, Rule::WriteInside),
        opt('\0', "mutexprofile", Value, Rule::WriteInside),
        opt('\0', "trace", Value, Rule::WriteInside),
        opt('\0', "outputdir", Value, Rule::WriteInside),
        lv("ldflags"),
        lv("gcflags"),
        lv("asmflags"),
        lv("gccgoflags"),
        lv("tags"),
        lv("mod"),
        lv("p"),
        lv("buildmode"),
        lv("compiler"),
        lv("installsuffix"),
        lv("overlay"),
        lv("pgo"),
        lv("run"),
        lv("skip"),
        lv("bench"),
        lv("benchtime"),
        lv("count"),
        lv("timeout"),
        lv("cpu"),
        lv("parallel"),
        lv("coverpkg"),
        lv("covermode"),
        lv("fuzz"),
        lv("fuzztime"),
        lv("shuffle"),
        lv("vet"),
    ],
};

/// `find` (only when a policy allows it): actions that run programs or write/delete files.
const FIND_REFUSED: &[(&str, &str)] = &[
    ("-exec", "find -exec runs a program for every match"),
    ("-execdir", "find -execdir runs a program for every match"),
    ("-ok", "find -ok runs a program for every match"),
    ("-okdir", "find -okdir runs a program for every match"),
    (
        "-delete",
        "find -delete removes files without going through the path sandbox",
    ),
    (
        "-fls",
        "find -fls writes to a file outside the path sandbox",
    ),
    (
        "-fprint",
        "find -fprint writes to a file outside the path sandbox",
    ),
    (
        "-fprint0",
        "find -fprint0 writes to a file outside the path sandbox",
    ),
    (
        "-fprintf",
        "find -fprintf writes to a file outside the path sandbox",
    ),
];

/// The first positional word (a subcommand) of a parsed argv, skipping a `+toolchain`.
fn first_word<'p>(parsed: &'p Parsed) -> Option<&'p str> {
    parsed.positionals().find(|p| !p.starts_with('+'))
}

/// Checks the arguments of `program` against its rules (programs without rules pass).
pub(super) fn check_program_args(
    program: &str,
    args: &[String],
    ctx: &ArgContext,
) -> Result<(), SandboxViolation> {
    match program {
        "git" => git::check(args, ctx),
        "sort" => check_table(&SORT, args, ctx).map(drop),
        "cargo" => {
            if let Some(a) = args.iter().find(|a| names_linker(a)) {
                return Err(SandboxViolation::new(a, LINKER_WHY));
            }
            let parsed = check_table(&CARGO, args, ctx)?;
            match first_word(&parsed) {
                Some(sub) if CARGO_REFUSED.contains(&sub) => Err(SandboxViolation::new(
                    format!("cargo {sub}"),
                    "this cargo subcommand installs programs outside the workspace or uses registry credentials",
                )),
                Some(sub @ ("new" | "init" | "vendor")) => {
                    for p in parsed.positionals().skip_while(|p| *p != sub).skip(1) {
                        ctx.resolve(p, Access::Write)?;
                    }
                    Ok(())
                }
                _ => Ok(()),
            }
        }
        "rustc" => {
            if let Some(a) = args.iter().find(|a| names_linker(a)) {
                return Err(SandboxViolation::new(a, LINKER_WHY));
            }
            let parsed = check_table(&RUSTC, args, ctx)?;
            check_rustc_emit(&parsed, ctx)
        }
        "make" => {
            let parsed = check_table(&MAKE, args, ctx)?;
            parsed.positionals().try_for_each(check_make_assignment)
        }
        "npm" => {
            let parsed = check_table(&NPM, args, ctx)?;
            let words: Vec<&str> = parsed.positionals().collect();
            match words.as_slice() {
                [sub, ..] if NPM_REFUSED.contains(sub) => Err(SandboxViolation::new(
                    format!("npm {sub}"),
                    "this npm subcommand writes the user's configuration, opens an editor, shell or browser, or uses registry credentials",
                )),
                ["config" | "c", action, ..] if !["get", "list", "ls"].contains(action) => {
                    Err(SandboxViolation::new(
                        format!("npm config {action}"),
                        "npm config may only be read: writing it changes the user's configuration outside the workspace",
                    ))
                }
                _ => Ok(()),
            }
        }
        "node" => check_table(&NODE, args, ctx).map(drop),
        "go" => {
            let parsed = check_table(&GO, args, ctx)?;
            match first_word(&parsed) {
                Some("install") => Err(SandboxViolation::new(
                    "go install",
                    "go install writes programs outside the workspace",
                )),
                Some("clean")
                    if args.iter().any(|a| {
                        let a = a.trim_start_matches('-');
                        ["cache", "modcache", "testcache", "fuzzcache"].contains(&a)
                    }) =>
                {
                    Err(SandboxViolation::new(
                        "go clean -cache",
                        "go clean -cache/-modcache/-testcache/-fuzzcache deletes the user's caches outside the workspace",
                    ))
                }
                Some("env")
                    if args
                        .iter()
                        .any(|a| matches!(a.as_str(), "-w" | "--w" | "-u" | "--u")) =>
                {
                    Err(SandboxViolation::new(
                        "go env -w",
                        "go env -w/-u writes the user's Go configuration outside the workspace",
                    ))
                }
                _ => Ok(()),
            }
        }
        "find" => {
            for a in args {
                if let Some((_, why)) = FIND_REFUSED.iter().find(|(w, _)| w == a) {
                    return Err(SandboxViolation::new(a, *why));
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}
