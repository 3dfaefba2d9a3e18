//! The option matcher: reads a program's arguments the way the program does (`--opt=value`,
//! `--opt value`, `-ovalue`, clustered short options, GNU abbreviations, options that take a value)
//! and applies each option's rule — refused, or a path that must stay inside the workspace.

use std::path::{Path, PathBuf};

use crate::workspace::{Access, SandboxViolation, Workspace};

/// Whether an option takes a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Arity {
    /// No value.
    Flag,
    /// A value, attached (`--o=v`, `-ov`) or the next word (`--o v`, `-o v`).
    Value,
    /// A value only when attached (`--o=v`, `-ov`), as getopt's optional arguments.
    Optional,
}

/// What an option's presence or value means for the check.
#[derive(Debug, Clone, Copy)]
pub(super) enum Rule {
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
pub(super) struct Opt {
    pub(super) short: Option<char>,
    pub(super) long: Option<&'static str>,
    pub(super) arity: Arity,
    pub(super) rule: Rule,
}

/// An option with a short and a long name (`'\0'` or `""` for none).
pub(super) const fn opt(short: char, long: &'static str, arity: Arity, rule: Rule) -> Opt {
    Opt {
        short: if short == '\0' { None } else { Some(short) },
        long: if long.is_empty() { None } else { Some(long) },
        arity,
        rule,
    }
}

/// A long-only flag (listed so that abbreviations resolve the way the program resolves them).
pub(super) const fn lf(long: &'static str) -> Opt {
    opt('\0', long, Arity::Flag, Rule::Ok)
}

/// A long-only option taking a value.
pub(super) const fn lv(long: &'static str) -> Opt {
    opt('\0', long, Arity::Value, Rule::Ok)
}

/// A refused long option.
pub(super) const fn lr(long: &'static str, arity: Arity, why: &'static str) -> Opt {
    opt('\0', long, arity, Rule::Refuse(why))
}

pub(super) use Arity::{Flag, Optional, Value};

/// How a program spells its options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Style {
    /// getopt / parse-options / clap: `--long[=v]`, clustered `-abc`, `-ov`. With `abbrev`, a
    /// unique prefix of a long option means that option (GNU getopt_long, git parse-options, npm).
    Gnu { abbrev: bool },
    /// Go's `flag` package: `-name`, `--name`, `=value` or the next word; no clusters.
    Go,
}

/// A program's (or a git subcommand's) option table.
pub(super) struct Table<'o> {
    pub(super) opts: &'o [Opt],
    pub(super) style: Style,
    /// Whether an option not in the table is refused (tables that list every option) or taken
    /// as a flag without a value (programs with more options than worth listing).
    pub(super) strict: bool,
    /// Whether the first word that is not an option ends the options (git's global options, node).
    pub(super) stop_at_positional: bool,
    /// Shown in messages: `sort`, `git rebase`, ...
    pub(super) name: &'static str,
    /// Whether (and whether also past `--`) the shadow pass runs: for lenient tables, which do
    /// not list every option (see [`Table::shadow`]).
    pub(super) shadow_pass: Option<bool>,
}

/// One recognised argument.
#[derive(Debug)]
pub(super) enum Item<'t> {
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
pub(super) struct Parsed<'t> {
    pub(super) items: Vec<Item<'t>>,
    /// Index in the arguments where reading stopped (`stop_at_positional`), else their length.
    pub(super) end: usize,
}

impl<'t> Parsed<'t> {
    pub(super) fn positionals(&self) -> impl Iterator<Item = &str> {
        self.items.iter().filter_map(|i| match i {
            Item::Positional(p) => Some(p.as_str()),
            Item::Opt { .. } => None,
        })
    }

    pub(super) fn has(&self, long: &str) -> bool {
        self.items
            .iter()
            .any(|i| matches!(i, Item::Opt { opt, .. } if opt.long == Some(long)))
    }
}

impl<'o> Table<'o> {
    /// The table's option called `name` (exactly, or by unique abbreviation), `Ok(None)` if it
    /// has none; a refused option reached by any prefix is an error even when the prefix is
    /// ambiguous (the program would then fail anyway, and refusing keeps the rule simple).
    pub(super) fn long(&self, name: &str, written: &str) -> Result<Option<&Opt>, SandboxViolation> {
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

    pub(super) fn short(&self, c: char) -> Option<&Opt> {
        self.opts.iter().find(|o| o.short == Some(c))
    }

    pub(super) fn unknown(&self, written: &str) -> Result<(), SandboxViolation> {
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
    pub(super) fn parse<'t>(&'t self, args: &[String]) -> Result<Parsed<'t>, SandboxViolation> {
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
    pub(super) fn parse_option<'t>(
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
    pub(super) fn shadow(
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
pub(super) fn is_option(a: &str) -> bool {
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
    pub(super) fn resolve(&self, arg: &str, access: Access) -> Result<PathBuf, SandboxViolation> {
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
pub(super) fn apply_rules(parsed: &Parsed, ctx: &ArgContext) -> Result<(), SandboxViolation> {
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
pub(super) fn check_table<'t>(
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
