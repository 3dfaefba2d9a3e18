//! Skills (SPEC §7, seeds 003/004): a named, reusable instruction file an agent step can use
//! instead of repeating its whole instruction inline.
//!
//! A skill is `SKILL.md` in a directory named after it, looked up in the workspace in this order,
//! the first found winning: [`SEARCH_DIRS`] = `.acode/skills/NAME/`, then `.claude/skills/NAME/`
//! (the layout Claude Code reads, so a team's existing skills work as they are).
//!
//! The file is optional front matter between `---` lines, then a Markdown body. The front matter
//! parser is deliberately small and strict: `key: value` lines, lists as `[a, b]`, as `- item`
//! lines under `key:`, or comma-separated; blank lines and `#` comments. Anything else (block
//! scalars, nested maps, a misspelt known key) is an error naming the line, so a skill never means
//! something other than what it looks like. Keys: `name`, `description`, `allowed-tools`, `model`,
//! `max-turns`; other well-formed keys (Claude Code's `license`, `argument-hint`, …) are ignored.
//!
//! The body is expanded by [`Skill::expand`]: `$ARGUMENTS` becomes the step's `instruction`,
//! `${inputs.NAME}` the step's input (unknown → error), `${SKILL_DIR}` the skill's directory
//! relative to the workspace, and a line consisting of `` !`COMMAND` `` becomes a
//! [`Piece::Command`] that the executor runs as a checked, recorded `run_command`.

use std::collections::BTreeMap;
use std::io::Read;

use serde::Serialize;
use serde_json::{Map, Value};
use thiserror::Error;

use crate::workspace::Workspace;

/// Where skills are looked up, in order; the first directory holding `NAME/SKILL.md` wins.
pub const SEARCH_DIRS: [&str; 2] = [
    concat!(crate::workspace::state::state_dir!(), "/skills"),
    ".claude/skills",
];

/// The file name of a skill inside its directory.
pub const FILE_NAME: &str = "SKILL.md";

/// Largest skill file read; a skill is a prompt, not a data set.
const MAX_BYTES: u64 = 256 * 1024;

/// Why a skill cannot be used.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum SkillError {
    /// The name could smuggle a path.
    #[error("invalid skill name {0:?}: use letters, digits, '-', '_' and '.' only")]
    BadName(String),
    /// No `SKILL.md` in any search directory.
    #[error("skill {name:?} not found (looked for {})", searched.join(", "))]
    NotFound {
        /// The skill asked for.
        name: String,
        /// The paths tried, in order.
        searched: Vec<String>,
    },
    /// The file exists but cannot be read (symlink out of the workspace, not UTF-8, too big).
    #[error("cannot read skill file {path}: {message}")]
    Read {
        /// The file, relative to the workspace.
        path: String,
        /// Why.
        message: String,
    },
    /// The front matter is not in the supported forms.
    #[error("{path}:{line}: {message}")]
    Syntax {
        /// The file, relative to the workspace.
        path: String,
        /// 1-based line number in the file.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The body refers to an input the step does not give.
    #[error(
        "{path}: ${{inputs.{input}}} is used but the step gives no such input (inputs given: {given})"
    )]
    UnknownInput {
        /// The file, relative to the workspace.
        path: String,
        /// The missing input.
        input: String,
        /// The inputs the step gives.
        given: String,
    },
}

/// The parsed front matter. Every field is optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FrontMatter {
    /// `name`: the skill's display name (the directory name is what steps use).
    pub name: Option<String>,
    /// `description`: one line for `acode-run skills`.
    pub description: Option<String>,
    /// `allowed-tools`: intersected with the step's `tools`.
    pub allowed_tools: Option<Vec<String>>,
    /// `model`: used unless the step names one.
    pub model: Option<String>,
    /// `max-turns`: used unless the step sets `max_turns`.
    pub max_turns: Option<u32>,
}

/// A skill found in the workspace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Skill {
    /// The name steps use (the directory name).
    pub name: String,
    /// `SKILL.md`, relative to the workspace root.
    pub path: String,
    /// The skill's directory relative to the workspace root (`${SKILL_DIR}`).
    pub dir: String,
    /// SHA-256 of the file's bytes: what an approval binds.
    pub sha256: String,
    /// The front matter.
    pub front: FrontMatter,
    /// The Markdown body after the front matter.
    #[serde(skip)]
    pub body: String,
    /// Line number (1-based) of the body's first line in the file.
    #[serde(skip)]
    pub body_line: usize,
}

/// One piece of an expanded skill body.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Piece {
    /// Text that goes into the prompt as is.
    Text {
        /// The text.
        text: String,
    },
    /// A `` !`COMMAND` `` line: replaced by the command's output when the step runs.
    Command {
        /// The command string, inputs already substituted.
        command: String,
        /// Its line in the skill file (1-based).
        line: usize,
    },
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Finds and parses skill `name` in the workspace (first of [`SEARCH_DIRS`] wins). Files are read
/// through the kernel-checked opener, so a symlinked `SKILL.md` cannot pull in a file from outside.
pub fn find(ws: &Workspace, name: &str) -> Result<Skill, SkillError> {
    if !valid_name(name) {
        return Err(SkillError::BadName(name.to_string()));
    }
    let mut searched = Vec::new();
    for base in SEARCH_DIRS {
        let dir = format!("{base}/{name}");
        let path = format!("{dir}/{FILE_NAME}");
        if !ws.root().join(&path).exists() {
            searched.push(path);
            continue;
        }
        return load(ws, name, &dir, &path);
    }
    Err(SkillError::NotFound {
        name: name.to_string(),
        searched,
    })
}

/// Every skill in the workspace, in search order then by name; a name found in an earlier
/// directory shadows the same name later (reported once, as the one a step would get).
pub fn list(ws: &Workspace) -> Vec<Result<Skill, SkillError>> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for base in SEARCH_DIRS {
        let Ok(entries) = std::fs::read_dir(ws.root().join(base)) else {
            continue;
        };
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| valid_name(n))
            .filter(|n| ws.root().join(base).join(n).join(FILE_NAME).exists())
            .collect();
        names.sort();
        for name in names {
            if seen.insert(name.clone()) {
                let dir = format!("{base}/{name}");
                let path = format!("{dir}/{FILE_NAME}");
                out.push(load(ws, &name, &dir, &path));
            }
        }
    }
    out
}

fn load(ws: &Workspace, name: &str, dir: &str, path: &str) -> Result<Skill, SkillError> {
    let read_err = |message: String| SkillError::Read {
        path: path.to_string(),
        message,
    };
    let abs = ws.resolve(path).map_err(|e| read_err(e.to_string()))?;
    let (file, meta) =
        crate::workspace::fs::open_regular(ws, &abs).map_err(|e| read_err(e.to_string()))?;
    if meta.len() > MAX_BYTES {
        return Err(read_err(format!(
            "{} bytes, more than the {MAX_BYTES} a skill may have",
            meta.len()
        )));
    }
    let mut bytes = Vec::new();
    file.take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| read_err(e.to_string()))?;
    let text = String::from_utf8(bytes.clone()).map_err(|_| read_err("not UTF-8".into()))?;
    let (front, body, body_line) = parse(&text, path)?;
    Ok(Skill {
        name: name.to_string(),
        path: path.to_string(),
        dir: dir.to_string(),
        sha256: crate::util::sha256_hex(&bytes),
        front,
        body,
        body_line,
    })
}

const KEYS: [&str; 5] = ["name", "description", "allowed-tools", "model", "max-turns"];

/// Splits a skill file into front matter and body. `path` is only used in error messages.
pub fn parse(text: &str, path: &str) -> Result<(FrontMatter, String, usize), SkillError> {
    let err = |line: usize, message: String| SkillError::Syntax {
        path: path.to_string(),
        line,
        message,
    };
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let first = lines.first().map(|l| l.trim_end()).unwrap_or("");
    if first != "---" {
        return Ok((FrontMatter::default(), text.to_string(), 1));
    }
    let Some(end) = lines.iter().skip(1).position(|l| l.trim_end() == "---") else {
        return Err(err(
            1,
            "front matter opened with '---' is never closed".into(),
        ));
    };
    let end = end + 1; // index of the closing line
    let mut raw: Vec<(usize, String, RawValue)> = Vec::new();
    let mut i = 1;
    while i < end {
        let lineno = i + 1;
        let line = lines[i].trim_end();
        i += 1;
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if line.starts_with([' ', '\t']) || trimmed.starts_with("- ") || trimmed == "-" {
            return Err(err(
                lineno,
                format!(
                    "unexpected {trimmed:?}: only `key: value` lines, and `- item` lines \
                     directly under a `key:` with no value, are supported"
                ),
            ));
        }
        let Some((key, value)) = line.split_once(':') else {
            return Err(err(
                lineno,
                format!("expected `key: value`, got {trimmed:?}"),
            ));
        };
        let key = key.trim();
        if key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(err(lineno, format!("invalid key {key:?}")));
        }
        let value = value.trim();
        if raw.iter().any(|(_, k, _)| k == key) {
            return Err(err(lineno, format!("duplicate key {key:?}")));
        }
        let parsed = if value.is_empty() {
            // A block list: `- item` lines follow.
            let mut items = Vec::new();
            while i < end {
                let l = lines[i].trim();
                if let Some(item) = l
                    .strip_prefix("- ")
                    .or(if l == "-" { Some("") } else { None })
                {
                    let item = unquote(item.trim(), i + 1, &err)?;
                    if item.is_empty() {
                        return Err(err(i + 1, "empty list item".into()));
                    }
                    items.push(item);
                    i += 1;
                } else if l.is_empty() || l.starts_with('#') {
                    i += 1;
                } else {
                    break;
                }
            }
            RawValue::List(items)
        } else if let Some(inner) = value.strip_prefix('[') {
            let Some(inner) = inner.strip_suffix(']') else {
                return Err(err(
                    lineno,
                    "a `[` list must close with `]` on the same line".into(),
                ));
            };
            RawValue::List(split_list(inner, lineno, &err)?)
        } else if value.starts_with(['>', '|']) {
            return Err(err(
                lineno,
                "block scalars (`>` or `|`) are not supported; put the value on one line".into(),
            ));
        } else if value.starts_with(['{', '&', '*', '!']) {
            return Err(err(
                lineno,
                format!("unsupported YAML value {value:?}: use a plain one-line value"),
            ));
        } else {
            RawValue::Scalar(unquote(value, lineno, &err)?)
        };
        raw.push((lineno, key.to_string(), parsed));
    }

    let mut front = FrontMatter::default();
    for (lineno, key, value) in raw {
        let canonical = key.to_ascii_lowercase().replace('_', "-");
        match (key.as_str(), value) {
            ("name", RawValue::Scalar(v)) => front.name = Some(v),
            ("description", RawValue::Scalar(v)) => front.description = Some(v),
            ("model", RawValue::Scalar(v)) => front.model = Some(v).filter(|m| !m.is_empty()),
            ("allowed-tools", RawValue::List(v)) => front.allowed_tools = Some(v),
            ("allowed-tools", RawValue::Scalar(v)) => {
                front.allowed_tools = Some(split_list(&v, lineno, &err)?)
            }
            ("max-turns", RawValue::Scalar(v)) => {
                let n: u32 = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=100).contains(n))
                    .ok_or_else(|| {
                        err(
                            lineno,
                            format!("max-turns must be a whole number 1–100, got {v:?}"),
                        )
                    })?;
                front.max_turns = Some(n);
            }
            (k, RawValue::List(_)) if KEYS.contains(&k) => {
                return Err(err(lineno, format!("{k} takes one value, not a list")));
            }
            (k, _) if KEYS.contains(&canonical.as_str()) => {
                return Err(err(
                    lineno,
                    format!("unknown key {k:?}; did you mean {canonical:?}?"),
                ));
            }
            _ => {} // another tool's key (license, argument-hint, ...): ignored.
        }
    }
    let body: String = lines[end + 1..].concat();
    Ok((front, body, end + 2))
}

enum RawValue {
    Scalar(String),
    List(Vec<String>),
}

fn unquote(
    v: &str,
    line: usize,
    err: &impl Fn(usize, String) -> SkillError,
) -> Result<String, SkillError> {
    for q in ['"', '\''] {
        if let Some(rest) = v.strip_prefix(q) {
            return match rest.strip_suffix(q) {
                Some(inner) if !inner.contains(q) => Ok(inner.to_string()),
                _ => Err(err(line, format!("unbalanced or escaped quotes in {v:?}"))),
            };
        }
    }
    Ok(v.to_string())
}

fn split_list(
    s: &str,
    line: usize,
    err: &impl Fn(usize, String) -> SkillError,
) -> Result<Vec<String>, SkillError> {
    let mut out = Vec::new();
    for part in s.split(',') {
        let item = unquote(part.trim(), line, err)?;
        if item.is_empty() {
            if s.trim().is_empty() {
                break;
            }
            return Err(err(line, format!("empty item in list {s:?}")));
        }
        out.push(item);
    }
    Ok(out)
}

impl Skill {
    /// Expands the body for a step: `$ARGUMENTS` → `arguments` (the step's `instruction`, which
    /// is appended after the body when the body has no `$ARGUMENTS`), `${inputs.NAME}` →
    /// `inputs[NAME]`, `${SKILL_DIR}` → [`Skill::dir`]; a line that is exactly `` !`COMMAND` ``
    /// becomes a [`Piece::Command`].
    pub fn expand(
        &self,
        inputs: &Map<String, Value>,
        arguments: &str,
    ) -> Result<Vec<Piece>, SkillError> {
        let mut pieces: Vec<Piece> = Vec::new();
        let mut text = String::new();
        let uses_arguments = self.body.contains("$ARGUMENTS");
        for (i, line) in self.body.split_inclusive('\n').enumerate() {
            let lineno = self.body_line + i;
            let line = self.substitute(line, inputs, arguments)?;
            let t = line.trim();
            if let Some(cmd) = t.strip_prefix("!`").and_then(|r| r.strip_suffix('`'))
                && !cmd.contains('`')
            {
                if !text.is_empty() {
                    pieces.push(Piece::Text {
                        text: std::mem::take(&mut text),
                    });
                }
                pieces.push(Piece::Command {
                    command: cmd.trim().to_string(),
                    line: lineno,
                });
                continue;
            }
            text.push_str(&line);
        }
        if !uses_arguments && !arguments.trim().is_empty() {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push('\n');
            text.push_str(arguments);
        }
        if !text.is_empty() {
            pieces.push(Piece::Text { text });
        }
        Ok(pieces)
    }

    fn substitute(
        &self,
        line: &str,
        inputs: &Map<String, Value>,
        arguments: &str,
    ) -> Result<String, SkillError> {
        let mut out = String::with_capacity(line.len());
        let mut rest = line;
        while let Some(pos) = rest.find(['$']) {
            out.push_str(&rest[..pos]);
            let tail = &rest[pos..];
            if let Some(after) = tail.strip_prefix("$ARGUMENTS") {
                out.push_str(arguments);
                rest = after;
            } else if let Some(after) = tail.strip_prefix("${SKILL_DIR}") {
                out.push_str(&self.dir);
                rest = after;
            } else if let Some(after) = tail.strip_prefix("${inputs.") {
                let Some(close) = after.find('}') else {
                    out.push_str("${inputs.");
                    rest = after;
                    continue;
                };
                let key = &after[..close];
                let value = inputs.get(key).ok_or_else(|| SkillError::UnknownInput {
                    path: self.path.clone(),
                    input: key.to_string(),
                    given: if inputs.is_empty() {
                        "none".to_string()
                    } else {
                        inputs.keys().cloned().collect::<Vec<_>>().join(", ")
                    },
                })?;
                match value {
                    Value::String(s) => out.push_str(s),
                    other => out.push_str(&other.to_string()),
                }
                rest = &after[close + 1..];
            } else {
                out.push('$');
                rest = &tail[1..];
            }
        }
        out.push_str(rest);
        Ok(out)
    }

    /// The tools offered to the model: the step's, narrowed to `allowed-tools` when the skill
    /// has it (in the step's order). A tool the skill allows but the step does not is not offered.
    ///
    /// Claude Code's tool names (`Read`, `Grep`, … as `.claude/skills` files use them) allow the
    /// matching tools here (see [`CLAUDE_CODE_TOOLS`]). A pattern-limited `Bash(git diff:*)`
    /// allows nothing: the pattern cannot be enforced here, and offering all of `run_command`
    /// instead would widen what the skill's author allowed.
    pub fn narrow_tools(&self, step_tools: &[String]) -> Vec<String> {
        match &self.front.allowed_tools {
            None => step_tools.to_vec(),
            Some(allowed) => step_tools
                .iter()
                .filter(|t| allowed.iter().any(|a| allows(a, t)))
                .cloned()
                .collect(),
        }
    }
}

/// Claude Code's tool names and the tools they stand for here, for skills written for Claude
/// Code. Names without an equivalent (`WebFetch`, `Task`, …) allow nothing.
pub const CLAUDE_CODE_TOOLS: [(&str, &[&str]); 8] = [
    ("Read", &["file_read"]),
    ("Write", &["file_write", "file_create"]),
    ("Edit", &["file_edit"]),
    ("MultiEdit", &["file_edit"]),
    ("Grep", &["file_search"]),
    ("Glob", &["file_glob"]),
    ("LS", &["list_directory"]),
    ("Bash", &["run_command"]),
];

/// Whether the `allowed-tools` entry `entry` allows our tool `tool`: its own name, or a Claude
/// Code name standing for it.
fn allows(entry: &str, tool: &str) -> bool {
    entry == tool
        || CLAUDE_CODE_TOOLS
            .iter()
            .any(|(name, ours)| *name == entry && ours.contains(&tool))
}

/// SHA-256 of every skill file the plan's agent steps reference, by path relative to the
/// workspace: what `approve` records and `run` compares. Skills that cannot be found are left
/// out (validation reports them).
pub fn referenced_hashes(plan: &super::Plan, ws: &Workspace) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for step in &plan.steps {
        if step.tool != crate::tools::agent::NAME {
            continue;
        }
        if let Some(Value::String(name)) = step.arguments.get("skill")
            && let Ok(skill) = find(ws, &name)
        {
            out.insert(skill.path, skill.sha256);
        }
    }
    out
}

/// Compares the skill hashes recorded at approval with the files now: the first difference, as
/// a message naming the file, or `None` when every referenced skill is unchanged.
pub fn changed_since_approval(
    approved: &BTreeMap<String, String>,
    now: &BTreeMap<String, String>,
) -> Option<String> {
    for (path, hash) in now {
        match approved.get(path) {
            None => {
                return Some(format!(
                    "skill file {path} was not part of the approval (approve the plan again)"
                ));
            }
            Some(h) if !h.eq_ignore_ascii_case(hash) => {
                return Some(format!(
                    "skill file {path} changed since the plan was approved (approved sha256 {h}, \
                     now {hash}); review it and approve the plan again"
                ));
            }
            _ => {}
        }
    }
    for path in approved.keys() {
        if !now.contains_key(path) {
            return Some(format!(
                "skill file {path} was approved but is now missing or no longer the one used"
            ));
        }
    }
    None
}

/// A skill resolved for one agent step: the skill, its expanded body, and what it changes about
/// the step. What `validate` shows and what the executor runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResolvedSkill {
    /// The skill.
    pub skill: Skill,
    /// The expanded body (commands still to run).
    pub pieces: Vec<Piece>,
    /// The tools the model will be offered (the step's, narrowed by `allowed-tools`).
    pub tools: Vec<String>,
}

/// Resolves an agent step's skill from its (substituted) arguments; `Ok(None)` without `skill`.
pub fn resolve_step(ws: &Workspace, args: &Value) -> Result<Option<ResolvedSkill>, SkillError> {
    let Some(name) = args.get("skill").and_then(Value::as_str) else {
        return Ok(None);
    };
    let skill = find(ws, name)?;
    let empty = Map::new();
    let inputs = args
        .get("inputs")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let instruction = args
        .get("instruction")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let pieces = skill.expand(inputs, instruction)?;
    let step_tools: Vec<String> = args
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    let tools = skill.narrow_tools(&step_tools);
    Ok(Some(ResolvedSkill {
        skill,
        pieces,
        tools,
    }))
}

/// Validation of an agent step's skill (called by plan validation, which also runs again before
/// the step executes): the skill exists and parses, every input it uses is given, its tools and
/// the step's overlap, and every injected command passes the same `run_command` checks as a plan
/// step (a forbidden one is a sandbox problem, exit 32).
///
/// `check_command(command, at)` is plan validation's own check of a `run_command` command line,
/// passed in so this module does not import `validate` (which calls this one).
pub fn check_step(
    args: &Value,
    ctx: &super::ValidationContext,
    at: &str,
    check_command: &dyn Fn(&str, &str) -> Option<super::Problem>,
) -> Vec<super::Problem> {
    let loc = format!("{at}.arguments.skill");
    let resolved = match resolve_step(ctx.workspace, args) {
        Ok(Some(r)) => r,
        Ok(None) => return Vec::new(),
        Err(e) => return vec![super::Problem::invalid(loc, e.to_string())],
    };
    let mut problems = Vec::new();
    if resolved.tools.is_empty() {
        problems.push(super::Problem::invalid(
            &loc,
            format!(
                "the skill's allowed-tools ({}) and the step's tools have no tool in common",
                resolved
                    .skill
                    .front
                    .allowed_tools
                    .clone()
                    .unwrap_or_default()
                    .join(", ")
            ),
        ));
    }
    for piece in &resolved.pieces {
        if let Piece::Command { command, line } = piece {
            let at = format!("{loc} ({}:{line})", resolved.skill.path);
            problems.extend(check_command(command, &at));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn skill(text: &str) -> Skill {
        let (front, body, body_line) = parse(text, "s/SKILL.md").unwrap();
        Skill {
            name: "s".into(),
            path: "s/SKILL.md".into(),
            dir: ".acode/skills/s".into(),
            sha256: String::new(),
            front,
            body,
            body_line,
        }
    }

    #[test]
    fn front_matter_forms() {
        let (f, body, line) = parse(
            "---\nname: Review\ndescription: \"Reviews: things\"\nallowed-tools: [file_read, 'file_search']\nmodel: m1\nmax-turns: 4\nlicense: MIT\n---\nBody\n",
            "p",
        )
        .unwrap();
        assert_eq!(f.name.as_deref(), Some("Review"));
        assert_eq!(f.description.as_deref(), Some("Reviews: things"));
        assert_eq!(
            f.allowed_tools,
            Some(vec!["file_read".into(), "file_search".into()])
        );
        assert_eq!(f.model.as_deref(), Some("m1"));
        assert_eq!(f.max_turns, Some(4));
        assert_eq!(body, "Body\n");
        assert_eq!(line, 9);

        let (f, _, _) = parse("---\nallowed-tools:\n  - a\n  - b\n---\n", "p").unwrap();
        assert_eq!(f.allowed_tools, Some(vec!["a".into(), "b".into()]));
        let (f, _, _) = parse("---\nallowed-tools: a, b\n---\n", "p").unwrap();
        assert_eq!(f.allowed_tools, Some(vec!["a".into(), "b".into()]));
        let (f, body, line) = parse("no front matter\n", "p").unwrap();
        assert_eq!(
            (f, body.as_str(), line),
            (FrontMatter::default(), "no front matter\n", 1)
        );
    }

    #[test]
    fn anything_else_is_an_error_naming_the_line() {
        for (text, line, needle) in [
            (
                "---\nname: a\ndescription: >\n  folded\n---\n",
                3,
                "block scalars",
            ),
            (
                "---\nname: a\nnested:\n  key: v\n---\n",
                4,
                "only `key: value`",
            ),
            ("---\njust text\n---\n", 2, "expected `key: value`"),
            ("---\nmax_turns: 3\n---\n", 2, "did you mean \"max-turns\""),
            ("---\nmax-turns: lots\n---\n", 2, "whole number"),
            ("---\nname: a\nname: b\n---\n", 3, "duplicate"),
            ("---\nallowed-tools: [a, b\n---\n", 2, "close with"),
            ("---\nname: a\n", 1, "never closed"),
            ("---\nmodel: [a]\n---\n", 2, "not a list"),
        ] {
            let e = parse(text, "x/SKILL.md").unwrap_err();
            match &e {
                SkillError::Syntax {
                    line: l, message, ..
                } => {
                    assert_eq!(*l, line, "{text:?}: {e}");
                    assert!(message.contains(needle), "{text:?}: {e}");
                }
                other => panic!("{other:?}"),
            }
            assert!(
                e.to_string().starts_with(&format!("x/SKILL.md:{line}: ")),
                "{e}"
            );
        }
    }

    #[test]
    fn expansion_substitutes_and_splits_out_commands() {
        let s = skill(
            "---\nname: s\n---\nFix ${inputs.file} ($ARGUMENTS).\nSee ${SKILL_DIR}/ref.md, cost $5.\n!`git log --oneline -${inputs.n}`\nDone.\n",
        );
        let inputs = json!({"file": "src/lib.rs", "n": 1});
        let pieces = s.expand(inputs.as_object().unwrap(), "be quick").unwrap();
        assert_eq!(
            pieces,
            vec![
                Piece::Text {
                    text: "Fix src/lib.rs (be quick).\nSee .acode/skills/s/ref.md, cost $5.\n"
                        .into()
                },
                Piece::Command {
                    command: "git log --oneline -1".into(),
                    line: 6
                },
                Piece::Text {
                    text: "Done.\n".into()
                },
            ]
        );
        let e = s.expand(&Map::new(), "").unwrap_err();
        assert!(
            matches!(e, SkillError::UnknownInput { ref input, .. } if input == "file"),
            "{e}"
        );
        // Without $ARGUMENTS in the body, the instruction is appended.
        let s = skill("Body.\n");
        assert_eq!(
            s.expand(&Map::new(), "Also this.").unwrap(),
            vec![Piece::Text {
                text: "Body.\n\nAlso this.".into()
            }]
        );
    }

    #[test]
    fn allowed_tools_narrow_in_step_order() {
        let s = skill("---\nallowed-tools: [file_search, file_read, run_command]\n---\n");
        let step = vec![
            "file_read".to_string(),
            "file_edit".into(),
            "file_search".into(),
        ];
        assert_eq!(s.narrow_tools(&step), vec!["file_read", "file_search"]);
        let s = skill("body");
        assert_eq!(s.narrow_tools(&step), step);
    }

    #[test]
    fn claude_code_tool_names_allow_their_equivalents_and_patterns_allow_nothing() {
        let step: Vec<String> = [
            "file_read",
            "file_search",
            "file_glob",
            "file_edit",
            "file_write",
            "run_command",
            "list_directory",
        ]
        .map(String::from)
        .to_vec();
        let s =
            skill("---\nallowed-tools: Read, Grep, Glob, LS, Bash(git diff:*), WebFetch\n---\n");
        assert_eq!(
            s.narrow_tools(&step),
            ["file_read", "file_search", "file_glob", "list_directory"]
        );
        let s = skill("---\nallowed-tools: [Edit, Write, Bash]\n---\n");
        assert_eq!(
            s.narrow_tools(&step),
            ["file_edit", "file_write", "run_command"]
        );
        // Every equivalent is a real tool.
        let registry = crate::tools::ToolRegistry::builtin();
        for (_, ours) in CLAUDE_CODE_TOOLS {
            for t in ours {
                assert!(registry.get(t).is_some(), "{t}");
            }
        }
    }

    #[test]
    fn names_cannot_be_paths() {
        for bad in ["", "..", "a/b", "../x", "a b", "."] {
            assert!(!valid_name(bad), "{bad}");
        }
        assert!(valid_name("code-review_2.0"));
    }
}
