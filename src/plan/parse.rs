//! Reading a plan file into the model, reporting every structural problem at once.
//!
//! The JSON is first parsed into a `serde_json::Value` (syntax errors carry line and column), then
//! walked by hand so that one bad step does not hide the problems of the next, and so that unknown
//! fields — usually typos such as `depend_on` — are errors instead of being silently ignored.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::model::{
    Arguments, Defaults, MAX_VERIFY_COMMANDS, OnFailure, Plan, Precondition, Step, Verify,
};
use super::{Problem, ProblemKind};

/// The largest plan file accepted; larger input is refused before parsing.
pub const MAX_PLAN_BYTES: usize = crate::input::MAX_PLAN_BYTES as usize;

struct Collector {
    problems: Vec<Problem>,
}

impl Collector {
    fn err(&mut self, location: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem {
            location: location.into(),
            message: message.into(),
            kind: ProblemKind::Invalid,
            line: None,
        });
    }

    fn unknown_fields(&mut self, obj: &Map<String, Value>, at: &str, known: &[&str]) {
        for key in obj.keys() {
            if !known.contains(&key.as_str()) {
                self.err(
                    format!("{at}.{key}"),
                    format!(
                        "unknown field{} (expected one of: {})",
                        crate::suggest::did_you_mean(key, known.iter().copied()),
                        known.join(", ")
                    ),
                );
            }
        }
    }

    fn string(&mut self, obj: &Map<String, Value>, key: &str, at: &str) -> Option<String> {
        match obj.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                self.err(
                    format!("{at}.{key}"),
                    format!("expected a string, got {other}"),
                );
                None
            }
        }
    }

    /// A `true`/`false` field, `false` when absent or null.
    fn flag(&mut self, obj: &Map<String, Value>, key: &str, at: &str) -> bool {
        match obj.get(key) {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                self.err(
                    format!("{at}.{key}"),
                    format!("expected true or false, got {other}"),
                );
                false
            }
        }
    }

    fn uint(&mut self, obj: &Map<String, Value>, key: &str, at: &str, max: u64) -> Option<u64> {
        match obj.get(key) {
            None | Some(Value::Null) => None,
            // JSON Schema's `integer` is any number with no fractional part, so `2.0` is 2 here too.
            Some(v) => match v.as_u64().or_else(|| {
                v.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= max as f64)
                    .map(|f| f as u64)
            }) {
                Some(n) if n <= max => Some(n),
                _ => {
                    self.err(
                        format!("{at}.{key}"),
                        format!("expected a whole number from 0 to {max}, got {v}"),
                    );
                    None
                }
            },
        }
    }
}

/// Parses plan bytes. Returns the plan, or every problem found (never just the first).
pub fn parse(bytes: &[u8]) -> Result<Plan, Vec<Problem>> {
    match parse_partial(bytes) {
        (Some(plan), problems) if problems.is_empty() => Ok(plan),
        (_, problems) => Err(problems),
    }
}

/// Parses as much of a plan as is well-formed, so validation can report problems in the good parts
/// alongside the structural ones. The plan is `None` only when there is nothing to validate (bad
/// JSON, not an object).
pub fn parse_partial(bytes: &[u8]) -> (Option<Plan>, Vec<Problem>) {
    let mut c = Collector {
        problems: Vec::new(),
    };
    if bytes.len() > MAX_PLAN_BYTES {
        c.err(
            "plan",
            format!(
                "plan file is {} bytes; the limit is {MAX_PLAN_BYTES}",
                bytes.len()
            ),
        );
        return (None, c.problems);
    }
    // One document for the reviewer and the runner: serde_json would keep the last of two equal keys.
    if let Err(d) = crate::input::check_unique_keys(bytes) {
        c.err(
            format!("line {}, column {}", d.line, d.column),
            format!(
                "duplicate key {:?} (a key may appear once per object)",
                d.key
            ),
        );
        return (None, c.problems);
    }
    // Stream the document: top-level fields are read as values, but each step is converted and its
    // JSON tree dropped as soon as it is read, so a 100 000-step plan never exists twice in memory.
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed = RootSeed { c: &mut c }
        .deserialize(&mut de)
        .and_then(|root| de.end().map(|()| root));
    let (fields, streamed) = match parsed {
        Ok(root) => root,
        Err(e) => {
            let location = format!("line {}, column {}", e.line(), e.column());
            let message = match e.classify() {
                serde_json::error::Category::Data => format!("invalid plan: {e}"),
                _ => format!("invalid JSON: {e}"),
            };
            c.err(location, message);
            return (None, c.problems);
        }
    };
    let obj = &fields;
    c.unknown_fields(
        obj,
        "plan",
        &[
            "$schema",
            "plan_id",
            "description",
            "intent",
            "variables",
            "defaults",
            "secrets",
            "budget",
            "steps",
        ],
    );

    let plan_id = match c.string(obj, "plan_id", "plan") {
        Some(id) if !id.trim().is_empty() => {
            if let Some(why) = identifier_problem(&id) {
                c.err("plan.plan_id", why);
            }
            id
        }
        Some(_) => {
            c.err("plan.plan_id", "must not be empty");
            String::new()
        }
        None => {
            // Absent or null; a wrong type was reported by `string`.
            if obj.get("plan_id").is_none_or(Value::is_null) {
                c.err(
                    "plan.plan_id",
                    "missing (every plan needs a non-empty plan_id)",
                );
            }
            String::new()
        }
    };
    let description = c.string(obj, "description", "plan");
    let intent = c.string(obj, "intent", "plan").and_then(|name| {
        let intent = super::Intent::from_name(&name);
        if intent.is_none() {
            let names: Vec<&str> = super::Intent::ALL.iter().map(|i| i.as_str()).collect();
            c.err(
                "plan.intent",
                format!(
                    "unknown intent {:?} (expected one of: {})",
                    escape_controls(&name),
                    names.join(", ")
                ),
            );
        }
        intent
    });

    let variables = parse_variables(&mut c, obj);
    let secrets = parse_secrets(&mut c, obj);
    let defaults = parse_defaults(&mut c, obj);
    let budget = obj.get("budget").and_then(|v| {
        let (budget, problems) = super::budget::parse(v, "plan.budget");
        for (at, message) in problems {
            c.err(at, message);
        }
        budget
    });

    let steps = match streamed {
        Some(steps)
            if steps.is_empty() && c.problems.iter().all(|p| !p.location.starts_with("steps[")) =>
        {
            c.err("plan.steps", "a plan needs at least one step");
            steps
        }
        Some(steps) => steps,
        None => {
            c.err("plan.steps", "missing (a plan needs at least one step)");
            Vec::new()
        }
    };

    let plan = Plan {
        plan_id,
        description,
        intent,
        variables,
        secrets,
        defaults,
        budget,
        steps,
        sha256: crate::util::sha256_hex(bytes),
        source: None,
    };
    (Some(plan), c.problems)
}

/// The plan's `variables`: names that are valid and not built in, each a string, number or boolean
/// (kept as text).
fn parse_variables(c: &mut Collector, obj: &Map<String, Value>) -> BTreeMap<String, String> {
    let mut variables = BTreeMap::new();
    match obj.get("variables") {
        None | Some(Value::Null) => {}
        Some(Value::Object(vars)) => {
            for (k, v) in vars {
                let at = format!("plan.variables.{}", escape_controls(k));
                if !super::variables::is_name(k) {
                    let why = identifier_problem(k)
                        .map(|w| format!("invalid variable name: {w}"))
                        .unwrap_or_else(|| {
                            "invalid variable name (use letters, digits and _)".to_string()
                        });
                    c.err(at, why);
                    continue;
                }
                if super::variables::BUILTINS.contains(&k.as_str()) {
                    c.err(at, "is a built-in variable and cannot be redefined");
                    continue;
                }
                let value = match v {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    Value::Bool(b) => b.to_string(),
                    other => {
                        c.err(
                            at,
                            format!("expected a string, number or boolean, got {other}"),
                        );
                        continue;
                    }
                };
                variables.insert(k.clone(), value);
            }
        }
        Some(other) => c.err("plan.variables", format!("expected an object, got {other}")),
    }
    variables
}

/// The plan's `secrets`: the names of the variables whose values are redacted.
fn parse_secrets(c: &mut Collector, obj: &Map<String, Value>) -> Vec<String> {
    match obj.get("secrets") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(names)) => names
            .iter()
            .enumerate()
            .filter_map(|(j, n)| match n {
                Value::String(s) => Some(s.clone()),
                other => {
                    c.err(
                        format!("plan.secrets[{j}]"),
                        format!(
                            "expected a variable name (a string), got {}",
                            crate::util::json_kind(other)
                        ),
                    );
                    None
                }
            })
            .collect(),
        Some(other) => {
            c.err(
                "plan.secrets",
                format!(
                    "expected an array of variable names, got {}",
                    crate::util::json_kind(other)
                ),
            );
            Vec::new()
        }
    }
}

/// The plan's `defaults`: a step's timeout and retries, and how many steps run at once.
fn parse_defaults(c: &mut Collector, obj: &Map<String, Value>) -> Defaults {
    let mut defaults = Defaults::default();
    match obj.get("defaults") {
        None | Some(Value::Null) => {}
        Some(Value::Object(d)) => {
            c.unknown_fields(d, "plan.defaults", &["timeout_s", "retries", "jobs"]);
            defaults.timeout_s = c.uint(d, "timeout_s", "plan.defaults", 86_400);
            if defaults.timeout_s == Some(0) {
                c.err("plan.defaults.timeout_s", "must be at least 1");
            }
            if let Some(r) = c.uint(d, "retries", "plan.defaults", 10) {
                defaults.retries = r as u32;
            }
            defaults.jobs = c
                .uint(d, "jobs", "plan.defaults", crate::policy::MAX_JOBS as u64)
                .map(|n| n as usize);
            if defaults.jobs == Some(0) {
                c.err("plan.defaults.jobs", "must be at least 1");
            }
        }
        Some(other) => c.err("plan.defaults", format!("expected an object, got {other}")),
    }
    defaults
}

const STEP_FIELDS: &[&str] = &[
    "step_id",
    "tool",
    "arguments",
    "precondition",
    "requires_confirmation",
    "depends_on",
    "timeout_s",
    "retries",
    "on_failure",
    "verify",
    "description",
    "creates",
    "parallel_safe",
    "budget",
];

/// A `verify`'s `commands`: a list of 1 to [`MAX_VERIFY_COMMANDS`] command strings. `None` when
/// absent or not usable (each problem is reported).
fn verify_commands(c: &mut Collector, v: &Map<String, Value>, vat: &str) -> Option<Vec<String>> {
    let at = format!("{vat}.commands");
    match v.get("commands")? {
        Value::Array(items) => {
            if items.is_empty() {
                c.err(at, "must list at least one command");
                return None;
            }
            if items.len() > MAX_VERIFY_COMMANDS {
                c.err(
                    at,
                    format!(
                        "lists {} commands; at most {MAX_VERIFY_COMMANDS} run together",
                        items.len()
                    ),
                );
                return None;
            }
            let mut commands = Vec::with_capacity(items.len());
            for (j, item) in items.iter().enumerate() {
                match item.as_str() {
                    Some(s) => commands.push(s.to_string()),
                    None => c.err(
                        format!("{at}[{j}]"),
                        format!(
                            "expected a command string, got {}",
                            crate::util::json_kind(item)
                        ),
                    ),
                }
            }
            (commands.len() == items.len()).then_some(commands)
        }
        other => {
            c.err(
                at,
                format!(
                    "expected an array of command strings, got {}",
                    crate::util::json_kind(other)
                ),
            );
            None
        }
    }
}

fn parse_step(c: &mut Collector, item: Value, i: usize, prev: Option<String>) -> Option<Step> {
    let at = format!("steps[{i}]");
    let mut owned = match item {
        Value::Object(obj) => obj,
        other => {
            c.err(
                at,
                format!(
                    "expected a step object, got {}",
                    crate::util::json_kind(&other)
                ),
            );
            return None;
        }
    };
    // Moved out rather than cloned: arguments are the bulk of a step.
    let raw_arguments = owned.remove("arguments");
    let obj = &owned;
    c.unknown_fields(obj, &at, STEP_FIELDS);
    let step_id = match c.string(obj, "step_id", &at) {
        Some(id) if id.trim().is_empty() => {
            c.err(format!("{at}.step_id"), "must not be empty");
            String::new()
        }
        Some(id) => {
            if let Some(why) = identifier_problem(&id) {
                c.err(format!("{at}.step_id"), why);
            }
            id
        }
        None => {
            c.err(format!("{at}.step_id"), "missing");
            String::new()
        }
    };
    // Not kept, but a step's description is text like the plan's.
    let _ = c.string(obj, "description", &at);
    let tool = match c.string(obj, "tool", &at) {
        // Empty is no tool at all: reported here (validation skips an empty name as reported).
        Some(t) if t.is_empty() => {
            c.err(
                format!("{at}.tool"),
                "must not be empty (a tool name from `acode-run tools`)",
            );
            t
        }
        Some(t) => t,
        None => {
            c.err(format!("{at}.tool"), "missing");
            String::new()
        }
    };
    let arguments = match raw_arguments {
        None | Some(Value::Null) => Arguments::default(),
        Some(Value::Object(m)) => Arguments::from_map(&m),
        Some(other) => {
            c.err(
                format!("{at}.arguments"),
                format!("expected an object, got {}", crate::util::json_kind(&other)),
            );
            Arguments::default()
        }
    };
    let precondition = obj
        .get("precondition")
        .and_then(|p| parse_precondition(c, p, &format!("{at}.precondition")))
        .map(Box::new);
    let requires_confirmation = c.flag(obj, "requires_confirmation", &at);
    let parallel_safe = c.flag(obj, "parallel_safe", &at);
    let depends_on = parse_depends_on(c, obj, &at, prev);
    let timeout_s = c.uint(obj, "timeout_s", &at, 86_400);
    if timeout_s == Some(0) {
        c.err(format!("{at}.timeout_s"), "must be at least 1");
    }
    let retries = c.uint(obj, "retries", &at, 10).map(|r| r as u32);
    let on_failure = match c.string(obj, "on_failure", &at).as_deref() {
        None | Some("stop") => OnFailure::Stop,
        Some("continue") => OnFailure::Continue,
        Some(other) => {
            c.err(
                format!("{at}.on_failure"),
                format!("expected \"stop\" or \"continue\", got {other:?}"),
            );
            OnFailure::Stop
        }
    };
    let verify = parse_verify(c, obj, &at);
    let creates = parse_creates(c, obj, &at);
    let budget = obj.get("budget").and_then(|v| {
        let at = format!("{at}.budget");
        let (budget, problems) = super::budget::parse(v, &at);
        for (location, message) in problems {
            c.err(location, message);
        }
        if budget.is_some() && tool != crate::tools::agent::NAME {
            c.err(
                at,
                "a budget bounds model calls, so only an agent step takes one (bound a command \
                 with timeout_s, the whole run with the plan's budget)",
            );
            return None;
        }
        budget.map(Box::new)
    });
    Some(Step {
        step_id,
        position: i,
        tool,
        arguments,
        precondition,
        requires_confirmation,
        depends_on,
        timeout_s,
        retries,
        on_failure,
        verify,
        creates,
        parallel_safe,
        budget,
    })
}

/// A step's `depends_on`: one id, a list of ids, or (absent) the step before it.
fn parse_depends_on(
    c: &mut Collector,
    obj: &Map<String, Value>,
    at: &str,
    prev: Option<String>,
) -> Vec<String> {
    match obj.get("depends_on") {
        None | Some(Value::Null) => prev.into_iter().collect(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(ids)) => ids
            .iter()
            .enumerate()
            .filter_map(|(j, id)| match id.as_str() {
                Some(s) => Some(s.to_string()),
                None => {
                    c.err(format!("{at}.depends_on[{j}]"), "expected a step_id string");
                    None
                }
            })
            .collect(),
        Some(other) => {
            c.err(
                format!("{at}.depends_on"),
                format!(
                    "expected an array of step ids, got {}",
                    crate::util::json_kind(other)
                ),
            );
            Vec::new()
        }
    }
}

/// A step's `verify`: one command or several run at the same time, and how many cycles.
fn parse_verify(c: &mut Collector, obj: &Map<String, Value>, at: &str) -> Option<Box<Verify>> {
    match obj.get("verify") {
        None | Some(Value::Null) => None,
        Some(Value::Object(v)) => {
            let vat = format!("{at}.verify");
            c.unknown_fields(v, &vat, &["command", "commands", "max_cycles"]);
            let command = c.string(v, "command", &vat);
            let commands = verify_commands(c, v, &vat);
            let max_cycles = c.uint(v, "max_cycles", &vat, 20).unwrap_or(3) as u32;
            if max_cycles == 0 {
                c.err(format!("{vat}.max_cycles"), "must be at least 1");
            }
            let listed = commands.is_some();
            match (command, commands) {
                (Some(_), Some(_)) => {
                    c.err(
                        vat,
                        "give either \"command\" (one command) or \"commands\" (several, run at \
                         the same time), not both",
                    );
                    None
                }
                (None, None) => {
                    // `"command": 1` was reported as not a string already.
                    let given = |k: &str| v.get(k).is_some_and(|x| !x.is_null());
                    if !given("command") && !given("commands") {
                        c.err(
                            format!("{vat}.command"),
                            "missing (give \"command\", or \"commands\" for several run at the \
                             same time)",
                        );
                    }
                    None
                }
                (Some(command), None) => Some(vec![command]),
                (None, Some(commands)) => Some(commands),
            }
            .map(|commands| {
                Box::new(Verify {
                    commands,
                    listed,
                    max_cycles,
                })
            })
        }
        Some(other) => {
            c.err(
                format!("{at}.verify"),
                format!("expected an object, got {}", crate::util::json_kind(other)),
            );
            None
        }
    }
}

/// A step's `creates`: the names it makes, each a string.
fn parse_creates(c: &mut Collector, obj: &Map<String, Value>, at: &str) -> Box<[String]> {
    match obj.get("creates") {
        None | Some(Value::Null) => Box::default(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .filter_map(|(j, v)| match v.as_str() {
                Some(s) => Some(s.to_string()),
                None => {
                    c.err(format!("{at}.creates[{j}]"), "expected a name string");
                    None
                }
            })
            .collect(),
        Some(other) => {
            c.err(
                format!("{at}.creates"),
                format!(
                    "expected an array of names, got {}",
                    crate::util::json_kind(other)
                ),
            );
            Box::default()
        }
    }
}

fn parse_precondition(c: &mut Collector, v: &Value, at: &str) -> Option<Precondition> {
    match v {
        Value::Null => None,
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "none" | "" => Some(Precondition::None),
            "file exists" => Some(Precondition::StepFileExists),
            "cargo workspace exists" => Some(Precondition::CargoWorkspaceExists),
            "codegraph.db exists" => Some(Precondition::CodegraphDbExists),
            _ => {
                c.err(
                    at,
                    format!(
                        "unknown precondition {s:?} (expected \"none\", \"file exists\", \
                         \"Cargo workspace exists\", \"codegraph.db exists\", or an object with \
                         file_exists, file_absent, file_contains or command_succeeds)"
                    ),
                );
                None
            }
        },
        Value::Object(m) if m.len() == 1 => {
            let (key, val) = m.iter().next()?;
            let sub = format!("{at}.{key}");
            match (key.as_str(), val) {
                ("file_exists", Value::String(p)) => Some(Precondition::FileExists(p.clone())),
                ("file_absent", Value::String(p)) => Some(Precondition::FileAbsent(p.clone())),
                ("command_succeeds", Value::String(cmd)) => {
                    Some(Precondition::CommandSucceeds(cmd.clone()))
                }
                ("file_contains", Value::Object(fc)) => {
                    c.unknown_fields(fc, &sub, &["path", "pattern"]);
                    let path = c.string(fc, "path", &sub);
                    let pattern = c.string(fc, "pattern", &sub);
                    match (path, pattern) {
                        (Some(path), Some(pattern)) => {
                            Some(Precondition::FileContains { path, pattern })
                        }
                        _ => {
                            c.err(sub, "needs string fields \"path\" and \"pattern\"");
                            None
                        }
                    }
                }
                ("file_exists" | "file_absent" | "command_succeeds", other) => {
                    c.err(
                        sub,
                        format!("expected a string, got {}", crate::util::json_kind(other)),
                    );
                    None
                }
                _ => {
                    c.err(
                        sub,
                        "unknown precondition (expected file_exists, file_absent, \
                         file_contains or command_succeeds)",
                    );
                    None
                }
            }
        }
        other => {
            c.err(
                at,
                format!(
                    "expected a precondition string or an object with exactly one key, got {}",
                    crate::util::json_kind(other)
                ),
            );
            None
        }
    }
}

/// The 1-based line where each element of the top-level `steps` array starts, found by a small
/// scan that tracks strings and nesting (serde does not report positions to visitors). Used to point
/// problems at the right place in a long plan; empty when the document is not shaped as expected.
pub fn step_lines(bytes: &[u8]) -> Vec<usize> {
    let mut lines = Vec::new();
    let (mut line, mut depth) = (1usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    let mut key_start: Option<usize> = None;
    let mut last_key_is_steps = false;
    let mut in_steps = false;
    let mut expect_element = false;
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'\n' {
            line += 1;
        }
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
                if let Some(start) = key_start.take() {
                    last_key_is_steps = &bytes[start..i] == b"steps";
                }
            }
            continue;
        }
        if in_steps && depth == 2 && expect_element && !b.is_ascii_whitespace() && b != b']' {
            lines.push(line);
            expect_element = false;
        }
        match b {
            b'"' => {
                in_string = true;
                if depth == 1 {
                    key_start = Some(i + 1);
                }
            }
            b'{' | b'[' => {
                depth += 1;
                if depth == 2 && b == b'[' && last_key_is_steps {
                    in_steps = true;
                    expect_element = true;
                }
            }
            b'}' | b']' => {
                if depth == 2 && in_steps {
                    in_steps = false;
                }
                depth = depth.saturating_sub(1);
            }
            b',' if in_steps && depth == 2 => expect_element = true,
            b',' if depth == 1 => last_key_is_steps = false,
            _ => {}
        }
    }
    lines
}

/// The 1-based line of the top-level key `key` (`"budget"`), found by the same kind of scan as
/// [`step_lines`], so a problem in a plan-level object points at its line.
pub fn top_key_line(bytes: &[u8], key: &str) -> Option<usize> {
    let (mut line, mut depth) = (1usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    let mut key_start: Option<usize> = None;
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'\n' {
            line += 1;
        }
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
                if let Some(start) = key_start.take()
                    && &bytes[start..i] == key.as_bytes()
                {
                    return Some(line);
                }
            }
            continue;
        }
        match b {
            b'"' => {
                in_string = true;
                // A key at depth 1 follows `{` or `,`; a value string never starts a key scan
                // because values at depth 1 follow `:`.
                if depth == 1 {
                    let before = bytes[..i]
                        .iter()
                        .rev()
                        .find(|c| !c.is_ascii_whitespace())
                        .copied();
                    if matches!(before, Some(b'{') | Some(b',')) {
                        key_start = Some(i + 1);
                    }
                }
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// Streams the top-level plan object: every field but `steps` is kept as a value; `steps` is
/// converted one element at a time. Returns the other fields and the steps (`None` if absent).
struct RootSeed<'c> {
    c: &'c mut Collector,
}

impl<'de> DeserializeSeed<'de> for RootSeed<'_> {
    type Value = (Map<String, Value>, Option<Vec<Step>>);

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for RootSeed<'_> {
    type Value = (Map<String, Value>, Option<Vec<Step>>);

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a plan object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = Map::new();
        let mut steps = None;
        while let Some(key) = map.next_key::<String>()? {
            if fields.contains_key(&key) || (key == "steps" && steps.is_some()) {
                self.c.err(format!("plan.{key}"), "appears more than once");
            }
            if key == "steps" {
                steps = Some(map.next_value_seed(StepsSeed { c: &mut *self.c })?);
            } else {
                let value: Value = map.next_value()?;
                fields.insert(key, value);
            }
        }
        Ok((fields, steps))
    }
}

/// Streams the `steps` array, converting each step as it is read.
struct StepsSeed<'c> {
    c: &'c mut Collector,
}

impl<'de> DeserializeSeed<'de> for StepsSeed<'_> {
    type Value = Vec<Step>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for StepsSeed<'_> {
    type Value = Vec<Step>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array of steps")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut steps: Vec<Step> = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
        // Hashes of the ids seen, each with the index of its first step: a copy of every id
        // would cost more than the steps' own ids. Equal hashes are confirmed on the ids.
        let hasher = std::collections::hash_map::RandomState::new();
        let mut seen: HashMap<u64, usize> = HashMap::new();
        let mut i = 0;
        while let Some(item) = seq.next_element::<Value>()? {
            let prev = steps.last().map(|s| s.step_id.clone());
            if let Some(step) = parse_step(self.c, item, i, prev) {
                let duplicate = !step.step_id.is_empty() && {
                    let hash = hasher.hash_one(&step.step_id);
                    match seen.get(&hash) {
                        Some(&j) if steps[j].step_id == step.step_id => true,
                        // Another id with the same hash: compare with every step.
                        Some(_) => steps.iter().any(|s| s.step_id == step.step_id),
                        None => {
                            seen.insert(hash, steps.len());
                            false
                        }
                    }
                };
                if duplicate {
                    self.c.err(
                        format!("steps[{i}].step_id"),
                        format!("duplicate step_id {:?}", step.step_id),
                    );
                }
                steps.push(step);
            }
            i += 1;
        }
        steps.shrink_to_fit();
        Ok(steps)
    }
}

/// Whether `c` is a character an identifier must not hold: C0/C1 controls and DEL, and the
/// invisible format characters that reorder or hide text on a terminal (bidi overrides and
/// isolates, zero-width characters, BOM).
fn is_forbidden_in_id(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

/// Shows `c` escaped, as a reader can type it: `\x1b`, `\x00`, `\u{202e}`.
pub fn escape_char(c: char) -> String {
    let n = c as u32;
    if n < 0x100 {
        format!("\\x{n:02x}")
    } else {
        format!("\\u{{{n:04x}}}")
    }
}

/// `s` with every character an identifier may not hold shown escaped, so an error message quoting
/// a hostile id cannot move the cursor or hide text.
pub fn escape_controls(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(is_forbidden_in_id) {
        return std::borrow::Cow::Borrowed(s);
    }
    std::borrow::Cow::Owned(
        s.chars()
            .map(|c| {
                if is_forbidden_in_id(c) {
                    escape_char(c)
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

/// Why an identifier (`plan_id`, `step_id`, a variable name) is refused, if it is: ids are names
/// people type, sign and read on a terminal, so control characters are not allowed in them (a
/// newline in a `plan_id` once made a signed rejection read as another plan's approval). The
/// message names the first offending character, escaped, and its position.
pub fn identifier_problem(id: &str) -> Option<String> {
    let (i, c) = id
        .chars()
        .enumerate()
        .find(|(_, c)| is_forbidden_in_id(*c))?;
    Some(format!(
        "contains the control character {} at character {} (\"{}\"); identifiers must be \
         printable",
        escape_char(c),
        i + 1,
        escape_controls(id)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syntax_errors_name_line_and_column() {
        let problems = parse(b"{\n  \"plan_id\": \"x\",\n  \"steps\": [,]\n}").unwrap_err();
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].location, "line 3, column 13");
    }

    #[test]
    fn every_problem_is_reported() {
        let bad = br#"{"plan_id": "", "steps": [
            {"step_id": "a", "tool": "file_read", "depend_on": []},
            {"step_id": "a", "tool": 5, "on_failure": "maybe"},
            {"step_id": "c", "tool": "x", "precondition": "moon is full"}
        ]}"#;
        let problems = parse(bad).unwrap_err();
        let text: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        let all = text.join("\n");
        assert!(all.contains("plan.plan_id: must not be empty"), "{all}");
        assert!(all.contains("steps[0].depend_on: unknown field"), "{all}");
        assert!(all.contains("steps[1].step_id: duplicate step_id"), "{all}");
        assert!(all.contains("steps[1].tool: expected a string"), "{all}");
        assert!(all.contains("steps[1].on_failure"), "{all}");
        assert!(
            all.contains("steps[2].precondition: unknown precondition"),
            "{all}"
        );
    }

    #[test]
    fn defaults_apply() {
        let plan = parse(
            br#"{"plan_id":"p","steps":[
            {"step_id":"a","tool":"t"},{"step_id":"b","tool":"t","depends_on":[]}]}"#,
        )
        .unwrap();
        assert_eq!(plan.steps[0].depends_on, Vec::<String>::new());
        assert_eq!(plan.steps[1].depends_on, Vec::<String>::new());
        let plan = parse(
            br#"{"plan_id":"p","steps":[
            {"step_id":"a","tool":"t"},{"step_id":"b","tool":"t"}]}"#,
        )
        .unwrap();
        assert_eq!(plan.steps[1].depends_on, vec!["a".to_string()]);
        assert_eq!(plan.defaults.retries, 2);
        assert_eq!(plan.sha256.len(), 64);
    }
}

#[cfg(test)]
mod positions {
    use super::*;

    #[test]
    fn step_lines_point_at_each_step() {
        let text = b"{\n  \"plan_id\": \"p\",\n  \"steps\": [\n    {\"step_id\": \"a\", \"x\": \"[{,\\\"\"},\n\n    {\"step_id\": \"b\", \"arguments\": {\"steps\": [1, 2]}}\n  ],\n  \"description\": \"{[\"\n}";
        assert_eq!(step_lines(text), vec![4, 6]);
        assert!(step_lines(b"not json").is_empty());
    }
}

#[cfg(test)]
mod hostile_input {
    use super::*;

    /// Byte flips, truncations and insertions of a valid plan never panic the parser, and every
    /// rejection names a location.
    #[test]
    fn mutated_plans_never_panic() {
        let base = br#"{"plan_id":"p","variables":{"d":"src"},"defaults":{"retries":1},"steps":[
            {"step_id":"a","tool":"file_read","arguments":{"path":"${d}/x"},"precondition":"file exists"},
            {"step_id":"b","tool":"run_command","arguments":{"argv":["echo","hi"]},"depends_on":["a"],
             "verify":{"command":"true","max_cycles":2},"on_failure":"continue"}]}"#;
        let mut seed: u64 = 0x5eed;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as usize
        };
        let specials = [
            b'{', b'}', b'[', b']', b'"', b',', b':', b'\\', 0xff, 0, b'$', b'9',
        ];
        let dir = std::env::temp_dir().join(format!("acode-hostile-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let ws = crate::workspace::Workspace::new(&dir).unwrap();
        let registry = crate::tools::ToolRegistry::builtin();
        let policy = crate::policy::Policy::default();
        let ctx = crate::plan::ValidationContext {
            registry: &registry,
            workspace: &ws,
            policy: &policy,
        };
        for _ in 0..3000 {
            let mut bytes = base.to_vec();
            for _ in 0..(1 + next() % 4) {
                let i = next() % bytes.len();
                match next() % 3 {
                    0 => bytes[i] = specials[next() % specials.len()],
                    1 => bytes.truncate(i.max(1)),
                    _ => bytes.insert(i, specials[next() % specials.len()]),
                }
            }
            let (plan, mut problems) = parse_partial(&bytes);
            if let Some(plan) = plan {
                problems.extend(crate::plan::validate::validate(&plan, &ctx));
            }
            assert!(
                problems
                    .iter()
                    .all(|p| !p.location.is_empty() && !p.message.is_empty())
            );
        }
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let mut text =
            String::from(r#"{"plan_id":"p","steps":[{"step_id":"a","tool":"t","arguments":{"x":"#);
        text.push_str(&"[".repeat(10_000));
        let problems = parse(text.as_bytes()).unwrap_err();
        assert!(
            problems[0].message.contains("recursion limit"),
            "{problems:?}"
        );
    }
}
