//! How agent steps use the LLM, one set per run. Kept apart from the agent driver so the call
//! pipeline (`call.rs`), which carries these settings, does not import the driver that uses it.

use super::retry::Backoff;
use crate::llm::react::ToolProtocol;

/// How agent steps use the LLM; one per run.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// The model when a step names none (`--model`, `ACODE_MODEL`).
    pub model: String,
    /// Native tool calling or the `react` text protocol.
    pub protocol: ToolProtocol,
    /// Retries of transient LLM failures (default 3: 1 s, 2 s, 4 s; `Retry-After` up to 60 s).
    pub backoff: Backoff,
    /// Tokens (prompt + completion) the whole run may use; `None` for no limit.
    pub token_budget: Option<u64>,
    /// Characters of each tool result sent back to the model.
    pub tool_result_chars: usize,
    /// Most recent turns kept in the prompt; older ones are dropped with a note.
    pub window_turns: usize,
    /// The role the model plays, replacing the default "agent for one step" opening of the system
    /// prompt. The planner and reviewer stages set it; a plan cannot (it is not a step argument).
    pub role: Option<String>,
    /// Characters of an agent step's final answer kept in its [`StepResult`](super::StepResult)
    /// (4 KiB by default; the planner needs a whole plan back).
    pub answer_chars: usize,
    /// Most tool calls taken from one model answer (`--max-calls-per-answer`); the rest are
    /// refused back to the model, so one answer cannot make thousands of calls.
    pub max_calls_per_answer: usize,
    /// Most bytes of one request's messages; older turns are dropped to fit, and a step whose
    /// request still does not fit fails.
    pub max_request_bytes: usize,
    /// `--strict`: a tool call refused as a sandbox violation fails the agent step (exit 32)
    /// instead of being reported back to the model.
    pub strict: bool,
    /// This invocation's own files — its reports, the replay file it reads, its database, its
    /// stdout or stderr redirected to a file — left out of the workspace listing an agent's system
    /// prompt shows ([`crate::workspace::listing`]), so that a replay does not see them.
    pub own_files: Vec<std::path::PathBuf>,
}

/// Default for [`AgentSettings::max_calls_per_answer`].
pub const DEFAULT_MAX_CALLS_PER_ANSWER: usize = 16;
/// Most read-only calls of one model answer that run at the same time (docs/parallel.md). A fixed
/// number, not `--jobs`: reads change nothing, so running them together does not change what a
/// plan means (which is what `--jobs` is asked for), and 4 keeps the threads one step adds small
/// while covering the usual "read these few files" answer.
pub const PARALLEL_READ_CALLS: usize = 4;
/// Default for [`AgentSettings::max_request_bytes`] (8 MiB).
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 8 * 1024 * 1024;

impl Default for AgentSettings {
    fn default() -> Self {
        AgentSettings {
            model: String::new(),
            protocol: ToolProtocol::Native,
            backoff: Backoff::default(),
            token_budget: None,
            tool_result_chars: 8000,
            window_turns: 8,
            role: None,
            answer_chars: 4096,
            max_calls_per_answer: DEFAULT_MAX_CALLS_PER_ANSWER,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            strict: false,
            own_files: Vec::new(),
        }
    }
}
