//! The plan data model: what a plan file says, after parsing and before variable substitution.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;
use serde_json::{Map, Value};

/// An approved-or-not list of steps, as read from a plan file.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// The plan's identity; approvals are bound to it.
    pub plan_id: String,
    /// Free text for humans.
    pub description: Option<String>,
    /// What the plan means to do (plan field `intent`); a reading intent forbids writing steps.
    pub intent: Option<Intent>,
    /// Variables from the plan, overridden by `--var` values.
    pub variables: BTreeMap<String, String>,
    /// Names of variables whose values are secrets (plan field `secrets`), in addition to those
    /// whose names look secret: their values are redacted from every record and channel.
    pub secrets: Vec<String>,
    /// Defaults for step fields left out.
    pub defaults: Defaults,
    /// What the whole run may spend (plan field `budget`; `--token-budget` can only lower it).
    pub budget: Option<super::budget::Budget>,
    /// The steps in file order.
    pub steps: Vec<Step>,
    /// SHA-256 of the plan file's bytes, hex; what an approval is bound to.
    pub sha256: String,
    /// Where the plan was read from, for `${plan_dir}` and approval files.
    pub source: Option<PathBuf>,
}

impl Plan {
    /// For each step, the positions of the steps it depends on, its ids resolved once for
    /// everything that walks the dependency graph (validation, the scheduler, preview). An unknown
    /// id is left out (validation reports it); a duplicate id means its first step, as in
    /// [`crate::plan::validate::dependency_order`].
    pub fn dependency_positions(&self) -> Dependencies {
        let mut index = std::collections::HashMap::new();
        for s in &self.steps {
            index.entry(s.step_id.as_str()).or_insert(s.position);
        }
        let mut starts = Vec::with_capacity(self.steps.len() + 1);
        let mut positions = Vec::with_capacity(self.steps.len());
        for s in &self.steps {
            starts.push(positions.len());
            positions.extend(
                s.depends_on
                    .iter()
                    .filter_map(|d| index.get(d.as_str()).copied()),
            );
        }
        starts.push(positions.len());
        Dependencies { starts, positions }
    }
}

/// Each step's dependencies as step positions ([`Plan::dependency_positions`]), kept as one flat
/// list: a 100 000-step plan holds two arrays rather than 100 000 small vectors (SPEC §11's
/// memory target).
#[derive(Debug, Clone)]
pub struct Dependencies {
    /// Where each step's positions start in `positions`; one more entry than steps.
    starts: Vec<usize>,
    /// Every step's dependencies, one step after another.
    positions: Vec<usize>,
}

impl Dependencies {
    /// The positions of the steps step `i` depends on.
    pub fn of(&self, i: usize) -> &[usize] {
        &self.positions[self.starts[i]..self.starts[i + 1]]
    }

    /// How many steps there are.
    pub fn len(&self) -> usize {
        self.starts.len() - 1
    }

    /// Whether the plan has no step.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a plan declares it does (plan field `intent`, odincode's classification): `read`, `query`
/// and `explain` plans promise to change nothing, which validation holds them to; `mutate` plans
/// may change files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Intent {
    /// Read files to answer a question.
    Read,
    /// Search or count.
    Query,
    /// Explain earlier results.
    Explain,
    /// Change the workspace.
    Mutate,
}

impl Intent {
    /// Every intent, in the order documentation lists them.
    pub const ALL: [Intent; 4] = [Intent::Read, Intent::Query, Intent::Explain, Intent::Mutate];

    /// The name used in plan files.
    pub fn as_str(self) -> &'static str {
        match self {
            Intent::Read => "read",
            Intent::Query => "query",
            Intent::Explain => "explain",
            Intent::Mutate => "mutate",
        }
    }

    /// Parses the plan-file name (lowercase, exactly).
    pub fn from_name(s: &str) -> Option<Intent> {
        Intent::ALL.into_iter().find(|i| i.as_str() == s)
    }

    /// Whether the plan promises to change nothing.
    pub fn is_read_only(self) -> bool {
        self != Intent::Mutate
    }
}

/// Step defaults from the plan's `defaults` object.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Defaults {
    /// Seconds a tool call may run; `None` means the policy's limit.
    pub timeout_s: Option<u64>,
    /// How many times a transient failure is retried.
    pub retries: u32,
    /// Steps the plan asks to run at once (`defaults.jobs`, 1 to 256): the plan's word that its
    /// independent steps may overlap; `--jobs` and the policy's `jobs` decide with it
    /// ([`crate::executor::schedule::effective_jobs`]). Left out of the serialised form when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jobs: Option<usize>,
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            timeout_s: None,
            retries: 2,
            jobs: None,
        }
    }
}

/// What happens to the run when a step fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnFailure {
    /// Stop the run (default).
    #[default]
    Stop,
    /// Carry on with steps that do not depend on the failed one.
    Continue,
}

/// A check that must hold before a step's tool is called.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Precondition {
    /// `"none"`: always holds.
    None,
    /// `"file exists"`: the step's own `path`/`file_path` argument exists.
    StepFileExists,
    /// `"Cargo workspace exists"`: a `Cargo.toml` in the step's path or an ancestor inside the
    /// workspace.
    CargoWorkspaceExists,
    /// `"codegraph.db exists"`: a Magellan database in the workspace.
    CodegraphDbExists,
    /// `{"file_exists": P}`.
    FileExists(String),
    /// `{"file_absent": P}`.
    FileAbsent(String),
    /// `{"file_contains": {"path": P, "pattern": REGEX}}`.
    FileContains {
        /// The file to search.
        path: String,
        /// A regular expression that must match somewhere in it.
        pattern: String,
    },
    /// `{"command_succeeds": CMD}`: the command (under the same policy as `run_command`) exits 0.
    CommandSucceeds(String),
}

impl Precondition {
    /// A short human description, for events and error messages.
    pub fn describe(&self) -> String {
        match self {
            Precondition::None => "none".into(),
            Precondition::StepFileExists => "file exists".into(),
            Precondition::CargoWorkspaceExists => "Cargo workspace exists".into(),
            Precondition::CodegraphDbExists => "codegraph.db exists".into(),
            Precondition::FileExists(p) => format!("file_exists {p}"),
            Precondition::FileAbsent(p) => format!("file_absent {p}"),
            Precondition::FileContains { path, pattern } => {
                format!("file_contains {path} /{pattern}/")
            }
            Precondition::CommandSucceeds(c) => format!("command_succeeds {c}"),
        }
    }
}

/// The commands run after a step to check its work: one (`"command"`), or several
/// (`"commands"`) run at the same time, where the first failure cancels the rest.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verify {
    /// The commands (at least one, at most [`MAX_VERIFY_COMMANDS`]), each split like
    /// `run_command`'s `command`.
    pub commands: Vec<String>,
    /// Whether the plan wrote the list form (`commands`), so a problem is reported where it is
    /// written (`verify.commands[1]` rather than `verify.command`).
    pub listed: bool,
    /// How many times an agent step may be re-run with the verifier's output (default 3).
    pub max_cycles: u32,
}

impl Verify {
    /// Where the `k`th command is written in a step at `at` (`steps[2]`): `steps[2].verify.command`,
    /// or `steps[2].verify.commands[k]` for the list form.
    pub fn location(&self, at: &str, k: usize) -> String {
        if self.listed {
            format!("{at}.verify.commands[{k}]")
        } else {
            format!("{at}.verify.command")
        }
    }
}

/// Most commands one `verify` may list: they all run at once, so this bounds the processes one
/// step's verification starts.
pub const MAX_VERIFY_COMMANDS: usize = 16;

/// One step of a plan.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    /// Unique within the plan.
    pub step_id: String,
    /// 0-based position in the file.
    pub position: usize,
    /// The tool's registered name.
    pub tool: String,
    /// Arguments, with `${...}` placeholders not yet substituted.
    pub arguments: Arguments,
    /// Checked before the tool is called (boxed: most steps have none, and a step is kept per
    /// plan entry for the whole run).
    pub precondition: Option<Box<Precondition>>,
    /// Whether the confirmation callback must approve this step.
    pub requires_confirmation: bool,
    /// Steps that must complete first (default: the previous step).
    pub depends_on: Vec<String>,
    /// Time limit for each tool call of this step.
    pub timeout_s: Option<u64>,
    /// Retries for transient failures (default from `defaults.retries`).
    pub retries: Option<u32>,
    /// What a failure does to the run.
    pub on_failure: OnFailure,
    /// Optional verification command (boxed, like `precondition`).
    pub verify: Option<Box<Verify>>,
    /// Workspace-root entries its commands create (`creates`), made ready under Landlock.
    pub creates: Box<[String]>,
    /// The plan vouches that this command or agent step writes only what no other step touches
    /// (`parallel_safe`), so `--jobs` may run it beside other writers (docs/parallel.md).
    pub parallel_safe: bool,
    /// What this agent step may spend (`budget`; boxed, like `verify`: most steps have none).
    pub budget: Option<Box<super::budget::Budget>>,
}

/// What a step may do to the workspace's files, decided from its tool and whether it runs commands
/// (`verify`, a `command_succeeds` precondition). The one decision behind validation's "an earlier
/// step may create files" ([`Step::may_create_files`], `validate::after_writers`) and the
/// scheduler's footprints (`executor::schedule::Footprint`), so the two cannot disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileEffect {
    /// Only reads: `file_read`, `list_directory`, `file_search`, `file_glob`, `history`.
    Reads,
    /// Writes the one path its `path` argument names: `file_write`, `file_create`, `file_edit`,
    /// `file_delete`.
    WritesPath,
    /// May write anywhere in the workspace: a command, an agent, `lsp_check`, an MCP server's
    /// tool (a program acode-run cannot inspect), any other tool, and any step that runs a
    /// `verify` or `command_succeeds` command.
    Anywhere,
}

impl Step {
    /// See [`FileEffect`].
    pub fn file_effect(&self) -> FileEffect {
        let runs_commands = self.verify.is_some()
            || matches!(
                self.precondition.as_deref(),
                Some(Precondition::CommandSucceeds(_))
            );
        if runs_commands {
            return FileEffect::Anywhere;
        }
        match self.tool.as_str() {
            "file_read" | "list_directory" | "file_search" | "file_glob" | "history" => {
                FileEffect::Reads
            }
            "file_write" | "file_create" | "file_edit" | "file_delete" => FileEffect::WritesPath,
            _ => FileEffect::Anywhere,
        }
    }

    /// Whether running the step may create a file, so that a later step's program named by a
    /// workspace path may not exist before the run (deleting one creates nothing).
    pub fn may_create_files(&self) -> bool {
        match self.file_effect() {
            FileEffect::Reads => false,
            FileEffect::WritesPath => self.tool != "file_delete",
            FileEffect::Anywhere => true,
        }
    }
}

/// A step's arguments, held as their compact JSON text and parsed when a step is validated or run.
///
/// Why not a `serde_json::Map`: a map's first B-tree node takes ~640 bytes even for one argument,
/// which made the steps of a 100 000-step plan most of the runner's memory (SPEC §11: ≤ 64 MB).
/// The text is written from a parsed map, so its keys are sorted exactly as the map's were and
/// everything that reads it back (substitution, validation, serialisation) sees the same object.
#[derive(Clone, PartialEq, Eq)]
pub struct Arguments(Box<str>);

impl Arguments {
    /// The arguments of `map`, stored compactly.
    pub fn from_map(map: &Map<String, Value>) -> Self {
        // Serialising a map of JSON values cannot fail (all keys are strings).
        Arguments(
            serde_json::to_string(map)
                .unwrap_or_default()
                .into_boxed_str(),
        )
    }

    /// The arguments as a map (a fresh copy each call).
    pub fn to_map(&self) -> Map<String, Value> {
        // The text was written by `from_map`: it is always a JSON object.
        serde_json::from_str(&self.0).unwrap_or_default()
    }

    /// The arguments as a JSON object value.
    pub fn to_value(&self) -> Value {
        Value::Object(self.to_map())
    }

    /// One argument's value (a copy), if the step gives it.
    pub fn get(&self, key: &str) -> Option<Value> {
        self.to_map().remove(key)
    }

    /// Whether the step gives the argument `key`.
    pub fn contains_key(&self, key: &str) -> bool {
        self.to_map().contains_key(key)
    }
}

impl Default for Arguments {
    fn default() -> Self {
        Arguments::from_map(&Map::new())
    }
}

impl From<Map<String, Value>> for Arguments {
    fn from(map: Map<String, Value>) -> Self {
        Arguments::from_map(&map)
    }
}

impl std::fmt::Debug for Arguments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.to_map().fmt(f)
    }
}

impl Serialize for Arguments {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_map().serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn arguments_read_back_as_the_map_they_were_made_from() {
        let v = json!({"z": 1.5, "a": {"b": [1, "x", null]}, "env": {"K": "v"}, "n": 18446744073709551615u64});
        let map = v.as_object().unwrap().clone();
        let args = Arguments::from_map(&map);
        assert_eq!(args.to_map(), map);
        assert_eq!(args.to_value(), v);
        assert_eq!(args.get("env"), Some(json!({"K": "v"})));
        assert_eq!(args.get("missing"), None);
        assert!(args.contains_key("z") && !args.contains_key("y"));
        assert_eq!(serde_json::to_value(&args).unwrap(), v);
        assert_eq!(format!("{args:?}"), format!("{map:?}"));
        assert_eq!(Arguments::default().to_map(), Map::new());
    }
}
