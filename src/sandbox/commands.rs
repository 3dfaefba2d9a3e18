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
//! 1. the program is a bare name (no `/`), so it is looked up on the child's `PATH` and cannot be a
//!    script the plan wrote into the workspace;
//! 2. it is on the allowlist ([`Policy::command_allowed`]);
//! 3. no argument holds a NUL byte (it cannot be passed to `execve`);
//! 4. the program's own option rules: an option matcher that reads the arguments the way the
//!    program will (`--opt=value`, `--opt value`, `-ovalue`, `-o value`, clustered short options,
//!    GNU long-option abbreviations, options that take a value), refuses options that make the
//!    program run another program of the caller's choosing, and requires path-valued options that
//!    write to resolve inside the workspace. `git` gets a subcommand allowlist on top (so no
//!    aliases) and always runs with the hardened environment of [`super::env::git_env`].
//!
//! Several allowed programs run code by design (`python3`, `node`, `make` recipes, `npm` scripts,
//! `cargo` build scripts, `go generate`/`go run`): for them the rules state intent, and the OS
//! sandbox is the boundary, not the arguments. `docs/security.md` ("Commands") lists every rule.

use std::path::{Path, PathBuf};

use thiserror::Error;

use super::paths::{Access, SandboxViolation, Workspace};
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

/// Characters a shell treats as operators when they are not quoted.
const OPERATOR_CHARS: &[char] = &[';', '&', '|', '<', '>'];

/// Refuses a `command` string that only makes sense to a shell (see the module docs); quoted
/// words are data and pass.
///
/// Why on the raw line rather than on the split words: splitting forgets which characters were
/// quoted (`'a|b'` and `a|b` give the same word) and treats an unquoted newline as plain space, yet
/// `echo a\ntouch x` means two commands to its author.
pub fn check_command_line(cmd: &str) -> Result<(), SandboxViolation> {
    if cmd.contains('\0') {
        return Err(SandboxViolation::new(cmd, "NUL byte in the command"));
    }
    let mut chars = cmd.chars().peekable();
    // The unquoted text of the current word, and whether it had any quoted part.
    let mut word = String::new();
    let mut quoted = false;
    let mut found: Option<String> = None;
    let finish = |word: &mut String, quoted: &mut bool, found: &mut Option<String>| {
        if found.is_none() && !*quoted && !word.is_empty() && word.contains(OPERATOR_CHARS) {
            *found = Some(word.clone());
        }
        word.clear();
        *quoted = false;
    };
    let mut in_single = false;
    let mut in_double = false;
    while let Some(c) = chars.next() {
        if in_single {
            if c == '\'' {
                in_single = false;
            }
            continue;
        }
        if in_double {
            match c {
                '"' => in_double = false,
                '\\' => {
                    chars.next();
                }
                // Inside double quotes a shell still substitutes commands.
                '`' => return Err(not_a_shell(cmd, "`", "a backtick command substitution")),
                '$' if chars.peek() == Some(&'(') => {
                    return Err(not_a_shell(cmd, "$(", "a $(...) command substitution"));
                }
                _ => {}
            }
            continue;
        }
        match c {
            '\'' => {
                in_single = true;
                quoted = true;
            }
            '"' => {
                in_double = true;
                quoted = true;
            }
            '\\' => {
                // An escaped character is quoted; an escaped newline joins lines.
                chars.next();
                quoted = true;
            }
            '`' => return Err(not_a_shell(cmd, "`", "a backtick command substitution")),
            '$' if chars.peek() == Some(&'(') => {
                return Err(not_a_shell(cmd, "$(", "a $(...) command substitution"));
            }
            '\n' | '\r' => {
                return Err(not_a_shell(
                    cmd,
                    "a line break",
                    "an unquoted line break (a shell would start a second command)",
                ));
            }
            ' ' | '\t' => finish(&mut word, &mut quoted, &mut found),
            other => word.push(other),
        }
    }
    finish(&mut word, &mut quoted, &mut found);
    match found {
        Some(w) => {
            let what = if w
                .chars()
                .all(|c| OPERATOR_CHARS.contains(&c) || c.is_ascii_digit())
            {
                format!("the shell operator {w:?}")
            } else {
                format!("the unquoted shell operator character in {w:?}")
            };
            Err(not_a_shell(cmd, &w, &what))
        }
        None => Ok(()),
    }
}

/// The violation for a command string that expected a shell, with the `argv` form to use instead.
fn not_a_shell(cmd: &str, token: &str, what: &str) -> SandboxViolation {
    let argv = shlex::split(cmd)
        .filter(|w| !w.is_empty())
        .map(|w| serde_json::to_string(&w).unwrap_or_default())
        .unwrap_or_default();
    SandboxViolation::new(
        cmd,
        format!(
            "{what}: this command is not run by a shell, so {token:?} would not do what a shell \
             does. To pass it to the program as data, quote it or give \"argv\": {argv}; to chain \
             programs, pipe or redirect, use separate steps (file_write for output files)"
        ),
    )
}

// ---------------------------------------------------------------------------------------------
// The option matcher.

/// Whether an option takes a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arity {
    /// No value.
    Flag,
    /// A value, attached (`--o=v`, `-ov`) or the next word (`--o v`, `-o v`).
    Value,
    /// A value only when attached (`--o=v`, `-ov`), as getopt's optional arguments.
    Optional,
}

/// What an option's presence or value means for the check.
#[derive(Debug, Clone, Copy)]
enum Rule {
    /// Allowed.
    Ok,
    /// Refused, with the reason shown to the user.
    Refuse(&'static str),
    /// Its value is a path the program writes: it must resolve inside the workspace (and not in a
    /// protected area).
    WriteInside,
    /// Its value is a directory the program works in: it must resolve inside the workspace.
    ReadInside,
    /// Its value is checked by a function returning why it is refused.
    Value(fn(&str) -> Option<&'static str>),
}

/// One option a program understands.
#[derive(Debug, Clone, Copy)]
struct Opt {
    short: Option<char>,
    long: Option<&'static str>,
    arity: Arity,
    rule: Rule,
}

/// An option with a short and a long name (`'\0'` or `""` for none).
const fn opt(short: char, long: &'static str, arity: Arity, rule: Rule) -> Opt {
    Opt {
        short: if short == '\0' { None } else { Some(short) },
        long: if long.is_empty() { None } else { Some(long) },
        arity,
        rule,
    }
}

/// A long-only flag (listed so that abbreviations resolve the way the program resolves them).
const fn lf(long: &'static str) -> Opt {
    opt('\0', long, Arity::Flag, Rule::Ok)
}

/// A long-only option taking a value.
const fn lv(long: &'static str) -> Opt {
    opt('\0', long, Arity::Value, Rule::Ok)
}

/// A refused long option.
const fn lr(long: &'static str, arity: Arity, why: &'static str) -> Opt {
    opt('\0', long, arity, Rule::Refuse(why))
}

use Arity::{Flag, Optional, Value};

/// How a program spells its options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    /// getopt / parse-options / clap: `--long[=v]`, clustered `-abc`, `-ov`. With `abbrev`, a
    /// unique prefix of a long option means that option (GNU getopt_long, git parse-options, npm).
    Gnu { abbrev: bool },
    /// Go's `flag` package: `-name`, `--name`, `=value` or the next word; no clusters.
    Go,
}

/// A program's (or a git subcommand's) option table.
struct Table<'o> {
    opts: &'o [Opt],
    style: Style,
    /// Whether an option not in the table is refused (tables that list every option) or taken
    /// as a flag without a value (programs with more options than worth listing).
    strict: bool,
    /// Whether the first word that is not an option ends the options (git's global options, node).
    stop_at_positional: bool,
    /// Shown in messages: `sort`, `git rebase`, ...
    name: &'static str,
    /// Whether (and whether also past `--`) the shadow pass runs: for lenient tables, which do
    /// not list every option (see [`Table::shadow`]).
    shadow_pass: Option<bool>,
}

/// One recognised argument.
#[derive(Debug)]
enum Item<'t> {
    /// An option from the table, as written (`--exe`, `-x`), with its value if it has one.
    Opt {
        opt: &'t Opt,
        written: String,
        value: Option<String>,
    },
    /// A word that is not an option (or any word after `--`).
    Positional(String),
}

/// The result of reading an argv with a [`Table`].
struct Parsed<'t> {
    items: Vec<Item<'t>>,
    /// Index in the arguments where reading stopped (`stop_at_positional`), else their length.
    end: usize,
}

impl<'t> Parsed<'t> {
    fn positionals(&self) -> impl Iterator<Item = &str> {
        self.items.iter().filter_map(|i| match i {
            Item::Positional(p) => Some(p.as_str()),
            Item::Opt { .. } => None,
        })
    }

    fn has(&self, long: &str) -> bool {
        self.items
            .iter()
            .any(|i| matches!(i, Item::Opt { opt, .. } if opt.long == Some(long)))
    }
}

impl<'o> Table<'o> {
    /// The table's option called `name` (exactly, or by unique abbreviation), `Ok(None)` if it
    /// has none; a refused option reached by any prefix is an error even when the prefix is
    /// ambiguous (the program would then fail anyway, and refusing keeps the rule simple).
    fn long(&self, name: &str, written: &str) -> Result<Option<&Opt>, SandboxViolation> {
        if let Some(o) = self.opts.iter().find(|o| o.long == Some(name)) {
            return Ok(Some(o));
        }
        let abbrev = matches!(self.style, Style::Gnu { abbrev: true });
        if !abbrev || name.is_empty() {
            return Ok(None);
        }
        let candidates: Vec<&Opt> = self
            .opts
            .iter()
            .filter(|o| o.long.is_some_and(|l| l.starts_with(name)))
            .collect();
        if let Some(r) = candidates
            .iter()
            .find(|o| matches!(o.rule, Rule::Refuse(_)))
        {
            let full = r.long.unwrap_or_default();
            let why = match r.rule {
                Rule::Refuse(why) => why,
                _ => "",
            };
            return Err(SandboxViolation::new(
                written,
                format!("--{name} abbreviates {} --{full}: {why}", self.name),
            ));
        }
        match candidates.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some(one)),
            _ if candidates.iter().all(|o| matches!(o.rule, Rule::Ok)) => {
                // Ambiguous among harmless options: the program refuses it itself.
                Ok(None)
            }
            _ => Err(SandboxViolation::new(
                written,
                format!("ambiguous abbreviation of a {} option", self.name),
            )),
        }
    }

    fn short(&self, c: char) -> Option<&Opt> {
        self.opts.iter().find(|o| o.short == Some(c))
    }

    fn unknown(&self, written: &str) -> Result<(), SandboxViolation> {
        if self.strict {
            Err(SandboxViolation::new(
                written,
                format!(
                    "not an option acode-run knows for {} (only the options listed in docs/security.md are allowed)",
                    self.name
                ),
            ))
        } else {
            Ok(())
        }
    }

    /// Reads `args` the way the program does.
    fn parse<'t>(&'t self, args: &[String]) -> Result<Parsed<'t>, SandboxViolation> {
        let mut items = Vec::new();
        let mut i = 0;
        while i < args.len() {
            let a = args[i].as_str();
            if a == "--" {
                items.extend(args[i + 1..].iter().cloned().map(Item::Positional));
                return Ok(Parsed {
                    items,
                    end: args.len(),
                });
            }
            if !is_option(a) {
                if self.stop_at_positional {
                    return Ok(Parsed { items, end: i });
                }
                items.push(Item::Positional(a.to_string()));
                i += 1;
                continue;
            }
            i = self.parse_option(args, i, &mut items)?;
        }
        Ok(Parsed {
            items,
            end: args.len(),
        })
    }

    /// Reads the option word `args[i]` (with its value) into `items`; returns the next index.
    fn parse_option<'t>(
        &'t self,
        args: &[String],
        mut i: usize,
        items: &mut Vec<Item<'t>>,
    ) -> Result<usize, SandboxViolation> {
        let a = args[i].as_str();
        let long_body = match self.style {
            Style::Gnu { .. } => a.strip_prefix("--"),
            Style::Go => Some(a.strip_prefix("--").unwrap_or(&a[1..])),
        };
        if let Some(body) = long_body {
            let (name, attached) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (body, None),
            };
            let Some(o) = self.long(name, a)? else {
                self.unknown(a)?;
                return Ok(i + 1);
            };
            let value = match (o.arity, attached) {
                (_, Some(v)) => Some(v),
                (Value, None) => {
                    i += 1;
                    args.get(i).cloned()
                }
                (Flag | Optional, None) => None,
            };
            items.push(Item::Opt {
                opt: o,
                written: a.to_string(),
                value,
            });
            return Ok(i + 1);
        }
        // A cluster of short options: `-rno out`, `-oout`, `-k2,2`.
        let cluster = &a[1..];
        for (at, c) in cluster.char_indices() {
            let Some(o) = self.short(c) else {
                self.unknown(&format!("-{c}"))?;
                continue;
            };
            let rest = &cluster[at + c.len_utf8()..];
            match o.arity {
                Flag => items.push(Item::Opt {
                    opt: o,
                    written: format!("-{c}"),
                    value: None,
                }),
                Value | Optional => {
                    let value = if !rest.is_empty() {
                        Some(rest.to_string())
                    } else if o.arity == Value {
                        i += 1;
                        args.get(i).cloned()
                    } else {
                        None
                    };
                    items.push(Item::Opt {
                        opt: o,
                        written: format!("-{c}"),
                        value,
                    });
                    break;
                }
            }
        }
        Ok(i + 1)
    }

    /// The shadow pass of a lenient table: every option-looking word is also read as if it
    /// started an option, even where the main pass took it as another option's value or as an
    /// operand. A table lists dangerous options and value-taking ones, not every option a
    /// program has; if an unlisted option takes a value (`git rebase --onto -C --exec=x`), the
    /// main pass is one word out of step with the program, and this pass still sees `--exec`.
    /// It can only refuse more. `past_terminator`: also after `--` (git and getopt take a `--`
    /// as the value of an option that needs one).
    fn shadow(
        &self,
        args: &[String],
        ctx: &ArgContext,
        past_terminator: bool,
    ) -> Result<(), SandboxViolation> {
        for i in 0..args.len() {
            let a = args[i].as_str();
            if a == "--" {
                if past_terminator {
                    continue;
                }
                break;
            }
            if is_option(a) {
                let mut items = Vec::new();
                self.parse_option(args, i, &mut items)?;
                apply_rules(&Parsed { items, end: 0 }, ctx)?;
            }
        }
        Ok(())
    }
}

/// Whether a word is an option (not an operand, not `-` meaning stdin).
fn is_option(a: &str) -> bool {
    a.starts_with('-') && a != "-"
}

/// Where relative paths in arguments are resolved: the command's working directory, inside the
/// workspace.
pub struct ArgContext<'a> {
    /// The workspace whose resolver decides.
    pub workspace: &'a Workspace,
    /// The command's working directory (absolute, inside the workspace).
    pub cwd: &'a Path,
}

impl ArgContext<'_> {
    /// Resolves a path argument as the program will see it (relative to `cwd`).
    fn resolve(&self, arg: &str, access: Access) -> Result<PathBuf, SandboxViolation> {
        if arg.is_empty() {
            return Err(SandboxViolation::new(arg, "empty path argument"));
        }
        let joined = if Path::new(arg).is_absolute() {
            arg.to_string()
        } else {
            self.cwd.join(arg).to_string_lossy().into_owned()
        };
        self.workspace
            .resolve_for(&joined, access)
            .map_err(|v| SandboxViolation::new(arg, v.reason))
    }
}

/// Applies the rules of every option found; the first violation is returned.
fn apply_rules(parsed: &Parsed, ctx: &ArgContext) -> Result<(), SandboxViolation> {
    for item in &parsed.items {
        let Item::Opt {
            opt,
            written,
            value,
        } = item
        else {
            continue;
        };
        let shown = || match value {
            Some(v) => format!("{written} {v}"),
            None => written.clone(),
        };
        match opt.rule {
            Rule::Ok => {}
            Rule::Refuse(why) => return Err(SandboxViolation::new(shown(), why)),
            Rule::WriteInside | Rule::ReadInside => {
                let access = if matches!(opt.rule, Rule::WriteInside) {
                    Access::Write
                } else {
                    Access::Read
                };
                if let Some(v) = value {
                    ctx.resolve(v, access).map_err(|e| {
                        SandboxViolation::new(
                            shown(),
                            format!(
                                "{written} must name a path inside the workspace: {}",
                                e.reason
                            ),
                        )
                    })?;
                }
            }
            Rule::Value(check) => {
                if let Some(why) = value.as_deref().and_then(check) {
                    return Err(SandboxViolation::new(shown(), why));
                }
            }
        }
    }
    Ok(())
}

/// Parses with `table` and applies its rules.
fn check_table<'t>(
    table: &'t Table<'_>,
    args: &[String],
    ctx: &ArgContext,
) -> Result<Parsed<'t>, SandboxViolation> {
    let parsed = table.parse(args)?;
    apply_rules(&parsed, ctx)?;
    if let Some(past_terminator) = table.shadow_pass {
        table.shadow(args, ctx, past_terminator)?;
    }
    Ok(parsed)
}

// ---------------------------------------------------------------------------------------------
// Per-program rules.

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
fn check_program_args(
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

// ---------------------------------------------------------------------------------------------
// git.

/// git's rules: global options, a subcommand allowlist, and per-subcommand options.
///
/// git always runs against the workspace's own repository (`GIT_DIR` and `GIT_WORK_TREE` are
/// pinned by [`super::env::git_env`]), so `-C` only moves the working directory inside it.
pub mod git {
    use super::*;

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
}

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
                    "a program given by path runs only when the policy names it: add \"{rel}\"{glob} \
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

/// The workspace-relative path of a program given by path (see [`super::program`]): refused when
/// it leaves the workspace.
pub fn program_path(
    program: &str,
    workspace: &Workspace,
    cwd: &Path,
) -> Result<String, SandboxViolation> {
    super::program::workspace_relative(program, workspace, cwd)
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
