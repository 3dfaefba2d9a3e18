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
    /// Variables from the plan, overridden by `--var` values.
    pub variables: BTreeMap<String, String>,
    /// Names of variables whose values are secrets (plan field `secrets`), in addition to those
    /// whose names look secret: their values are redacted from every record and channel.
    pub secrets: Vec<String>,
    /// Defaults for step fields left out.
    pub defaults: Defaults,
    /// The steps in file order.
    pub steps: Vec<Step>,
    /// SHA-256 of the plan file's bytes, hex; what an approval is bound to.
    pub sha256: String,
    /// Where the plan was read from, for `${plan_dir}` and approval files.
    pub source: Option<PathBuf>,
}

/// Step defaults from the plan's `defaults` object.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Defaults {
    /// Seconds a tool call may run; `None` means the policy's limit.
    pub timeout_s: Option<u64>,
    /// How many times a transient failure is retried.
    pub retries: u32,
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            timeout_s: None,
            retries: 2,
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

/// A command run after a step to check its work.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verify {
    /// The command, split like `run_command`'s `command`.
    pub command: String,
    /// How many times an agent step may be re-run with the verifier's output (default 3).
    pub max_cycles: u32,
}

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
    pub arguments: Map<String, Value>,
    /// Checked before the tool is called.
    pub precondition: Option<Precondition>,
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
    /// Optional verification command.
    pub verify: Option<Verify>,
}
