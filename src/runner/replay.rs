//! Preparing a replay (`run --replay RUN_ID|FILE`, docs/replay.md): the recorded model traffic is
//! read from the database or a replay file, checked against the plan about to run, and turned into
//! the [`ReplayClient`] that answers its agent steps. Every reason the recording cannot be replayed
//! is named before anything runs.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use serde_json::{Map, Value};

use super::session::Session;
use super::{RunSettings, RunnerError};
use crate::error::ErrorKind;
use crate::executor::agent::instruction_sha256;
use crate::llm::replay::{
    FORMAT, FORMAT_VERSION, RecordedStep, RecordedTurn, ReplayClient, ReplayHeader, ReplayOptions,
    ReplaySource, body_value,
};
use crate::plan::Plan;
use crate::store::{Store, StoreError};
use crate::tools::agent::NAME as AGENT;

/// The largest replay file read (a recorded run's traffic, requests included, is far smaller).
const MAX_FILE_BYTES: u64 = 512 * 1024 * 1024;

/// The recorded run's settings that shape what is asked of the model, carried in a replay file so
/// a replay asks the same way.
const SHAPING: &[&str] = &[
    "tool_protocol",
    "max_calls_per_answer",
    "strict",
    "llm_provider",
    "model",
];

/// A replay ready to run.
pub(crate) struct Prepared {
    /// The client answering the agent steps.
    pub client: ReplayClient,
    /// The run whose answers are replayed (recorded on the new run).
    pub of: String,
    /// The recorded run's settings that shape the requests.
    pub settings: RunSettings,
}

/// The model traffic of run `run_id` (an id or unique prefix) as recorded in `store`: each agent
/// step's turns, in order: each turn's answer, or, for a turn the server never answered, its last
/// failure (retried attempts are left out); a step whose turns start again at 1 (a resumed run
/// re-ran it) keeps its last run-through.
pub fn from_store(store: &Store, run_id: &str) -> Result<ReplaySource, StoreError> {
    let run = store.run(run_id)?;
    let steps: Vec<RecordedStep> = store
        .recorded_steps(&run.run_id)?
        .into_iter()
        .map(|s| RecordedStep {
            step: s.step_id,
            tool: s.tool,
            instruction_sha256: s.instruction_sha256,
        })
        .collect();
    let mut by_step: BTreeMap<String, Vec<RecordedTurn>> = BTreeMap::new();
    for row in store.llm_turns(&run.run_id)? {
        let Some(turn) = row.turn else { continue };
        // A request the server failed is replayed only as the turn's final outcome: an attempt
        // answered after it replaces it, and an interrupted or timed-out wait is not the model's.
        let failed = !row.success;
        if failed && row.error_code.as_deref() != Some(ErrorKind::LlmError.as_str()) {
            continue;
        }
        let args: Value =
            serde_json::from_str(&row.arguments_json).map_err(|e| StoreError::Unreadable {
                what: format!("the arguments of model turn {}", row.execution_id),
                reason: e.to_string(),
            })?;
        let client = args.get("client").and_then(Value::as_str).unwrap_or("");
        let (request, request_cut) = row.prompt.unwrap_or_default();
        let (response, response_cut) = row.response.unwrap_or_default();
        let turns = by_step.entry(row.step_id.clone()).or_default();
        match turns.last() {
            // Another attempt at the same turn after a failed one.
            Some(t) if t.turn == turn && t.error.is_some() => {
                turns.pop();
            }
            // The step ran again from its start (a resumed run): its last run-through counts.
            Some(t) if t.turn >= turn => turns.clear(),
            _ => {}
        }
        turns.push(RecordedTurn {
            step: row.step_id,
            turn,
            provider: client.split_whitespace().next().unwrap_or("").to_string(),
            model: args
                .get("model")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            request: body_value(&request),
            response: body_value(&response),
            truncated: request_cut || (response_cut && !failed),
            error: failed.then(|| row.error_message.unwrap_or_default()),
            execution_id: Some(row.execution_id),
            line: 0,
        });
    }
    // The settings that shaped the requests; a run recorded before settings were kept has none.
    let settings = match store
        .run_settings(&run.run_id)?
        .map(|s| serde_json::from_str::<Value>(&s))
    {
        None => Map::new(),
        Some(Ok(Value::Object(map))) => map
            .into_iter()
            .filter(|(k, _)| SHAPING.contains(&k.as_str()))
            .collect(),
        Some(read) => {
            return Err(StoreError::Unreadable {
                what: format!("the settings of run {}", run.run_id),
                reason: read.map_or_else(|e| e.to_string(), |v| format!("not an object: {v}")),
            });
        }
    };
    // In plan order, each step's turns in order.
    let mut turns = Vec::new();
    for s in &steps {
        turns.extend(by_step.remove(&s.step).unwrap_or_default());
    }
    turns.extend(by_step.into_values().flatten());
    Ok(ReplaySource {
        header: ReplayHeader {
            format: FORMAT.to_string(),
            version: FORMAT_VERSION,
            run_id: run.run_id,
            plan_id: run.plan_id,
            plan_sha256: run.plan_sha256,
            workspace: run.workspace,
            db_version: crate::store::migrations::latest(),
            settings,
            steps,
        },
        turns,
    })
}

/// Whether `what` (a `--replay` value) names a file rather than a run id.
pub fn names_file(what: &str) -> bool {
    Path::new(what).is_file() || what.contains('/') || what.ends_with(".jsonl")
}

/// Reads the traffic `what` names (a replay file, else a run in the session's database), checks
/// it against `plan` and prepares the client; `Err` names every problem.
pub(crate) fn prepare(
    what: &str,
    lenient: bool,
    session: &Session,
    plan: &Plan,
) -> Result<Prepared, RunnerError> {
    let (db, workspace, redactor) = (
        session.db_path(),
        session.workspace().root(),
        session.redactor(),
    );
    let refuse = |origin: String, problems: Vec<String>| RunnerError::Replay { origin, problems };
    let (source, origin) = if names_file(what) {
        let origin = format!("file {what}");
        let source = read_source(Path::new(what)).map_err(|p| refuse(origin.clone(), p))?;
        let origin = format!("{origin} (run {})", source.header.run_id);
        (source, origin)
    } else {
        let origin = format!("run {what}");
        if !db.exists() {
            return Err(refuse(
                origin,
                vec![format!(
                    "there is no execution database at {}, so no run to replay",
                    db.display()
                )],
            ));
        }
        // The session's connection, which the run then records with.
        let found = session.with_existing_store(|store| -> Result<_, StoreError> {
            let source = from_store(store, what)?;
            let kind = store.run(&source.header.run_id)?.kind;
            Ok((source, kind))
        })?;
        let (source, kind) = match found {
            Err(StoreError::NotFound(what)) => {
                return Err(refuse(
                    origin,
                    vec![format!("{what} not found in {}", db.display())],
                ));
            }
            Err(e @ StoreError::Unreadable { .. }) => {
                return Err(refuse(origin, vec![e.to_string()]));
            }
            other => other?,
        };
        if kind != "run" {
            return Err(refuse(
                origin,
                vec![format!(
                    "run {} is a `{kind}` conversation, not a plan's run",
                    source.header.run_id
                )],
            ));
        }
        (source.clone(), format!("run {}", source.header.run_id))
    };
    let mut problems = source.problems();
    problems.extend(plan_problems(&source, plan));
    if !problems.is_empty() {
        return Err(refuse(origin, problems));
    }
    let settings: RunSettings =
        serde_json::from_value(Value::Object(source.header.settings.clone())).unwrap_or_default();
    let of = source.header.run_id.clone();
    let client = ReplayClient::new(
        source,
        ReplayOptions {
            lenient,
            redactor: redactor.clone(),
            workspace: workspace.display().to_string(),
            origin,
        },
    );
    Ok(Prepared {
        client,
        of,
        settings,
    })
}

/// Reads the replay file at `path` (`run --replay FILE`): at most [`MAX_FILE_BYTES`], UTF-8, then
/// every line checked ([`ReplaySource::parse_jsonl`]); `Err` names each problem. Public for the
/// fuzz target `replay_file` (docs/fuzzing.md), which reads what a pull request could commit.
#[doc(hidden)]
pub fn read_source(path: &Path) -> Result<ReplaySource, Vec<String>> {
    let text = read_file(path).map_err(|e| vec![e])?;
    ReplaySource::parse_jsonl(&text)
}

fn read_file(path: &Path) -> Result<String, String> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{shown} is not a file"));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(format!(
            "{shown} is larger than {MAX_FILE_BYTES} bytes; refusing to read it"
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "{shown} is not UTF-8 text (byte {} is not)",
            e.utf8_error().valid_up_to()
        )
    })
}

/// What keeps the recorded turns from answering this plan: a turn for a step the plan does not
/// have or that is not an agent step in it; an agent step the recorded run did not have as one;
/// an agent step whose instruction changed since it was recorded.
fn plan_problems(source: &ReplaySource, plan: &Plan) -> Vec<String> {
    let run = &source.header.run_id;
    let mut problems = Vec::new();
    let mut named = HashSet::new();
    for t in &source.turns {
        if !named.insert(t.step.as_str()) {
            continue;
        }
        match plan.steps.iter().find(|s| s.step_id == t.step) {
            None => problems.push(format!(
                "{}: a turn for step `{}`, which the plan does not have",
                t.name(),
                t.step
            )),
            Some(s) if s.tool != AGENT => problems.push(format!(
                "{}: step `{}` is not an agent step in the plan (tool `{}`)",
                t.name(),
                t.step,
                s.tool
            )),
            Some(_) => {}
        }
    }
    for step in plan.steps.iter().filter(|s| s.tool == AGENT) {
        match source.header.steps.iter().find(|r| r.step == step.step_id) {
            None => problems.push(format!(
                "step `{}`: an agent step that run {run} did not have (the plan was edited since)",
                step.step_id
            )),
            Some(r) if r.tool != AGENT => problems.push(format!(
                "step `{}`: an agent step in the plan, but a `{}` step in run {run}",
                step.step_id, r.tool
            )),
            Some(r) => {
                if let Some(recorded) = &r.instruction_sha256
                    && *recorded != instruction_sha256(&step.arguments)
                {
                    problems.push(format!(
                        "step `{}`: its instruction changed since run {run} was recorded (the \
                         plan was edited); its recorded answers were given to another instruction",
                        step.step_id
                    ));
                }
            }
        }
    }
    problems
}
