//! The execution database (SPEC §8): every run, step, tool execution and artifact, in SQLite.
//!
//! Each execution and its artifacts are written in one transaction that commits before the executor
//! moves on, so a crash loses at most the call in flight. WAL mode plus a busy timeout let several
//! runs share one database file; write transactions start `IMMEDIATE` so two writers queue instead of
//! deadlocking on a lock upgrade.

#[macro_use]
mod status;
mod attest;
mod decisions;
pub mod export;
mod fleet;
mod history;
pub mod merge;
pub mod migrations;
mod replay;
mod report;
mod runner;

pub use attest::{AttestationRecord, HostRequests, ModelTraffic, ProgramRun};
pub use decisions::DecisionRow;
pub use fleet::{ChangedFile, Changes, FleetRun, PolicyNarrowing, RunOrigin};
pub use replay::{LlmTurnRow, RecordedStepRow};
pub use report::{ArtifactCut, HeaderApproval, HeaderPin, RunHeader, StepCounts};
pub use status::{RunStatus, StepState};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use thiserror::Error;

use crate::policy::network::NetworkRequest;
use crate::redact::Redactor;
use crate::tools::Artifact;

/// A database problem, with the file it concerns.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The database could not be opened or migrated.
    #[error("cannot open execution database {path}: {source}")]
    Open {
        /// The database file.
        path: String,
        /// The SQLite error.
        source: rusqlite::Error,
    },
    /// The directory for the database could not be created.
    #[error("cannot create directory for execution database {path}: {source}")]
    CreateDir {
        /// The directory.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A query failed.
    #[error("execution database error: {0}")]
    Sql(#[from] rusqlite::Error),
    /// A lookup found nothing.
    #[error("{0} not found")]
    NotFound(String),
    /// A recorded JSON value that acode-run wrote does not read back (the database was changed
    /// outside acode-run): said, never taken for a missing or default value.
    #[error("{what} cannot be read ({reason}); the database was changed outside acode-run")]
    Unreadable {
        /// What it is: `the settings of run R`, `the arguments of execution E`.
        what: String,
        /// Why it does not read.
        reason: String,
    },
    /// The database file was deleted or replaced while this process had it open: everything
    /// written since went to a file nobody can read, so the record of this run is lost.
    #[error(
        "the execution database {path} was deleted or replaced during the run; this run's record is lost"
    )]
    Lost {
        /// The database file.
        path: String,
    },
    /// The database was written by a newer acode-run; touching it could corrupt what that version
    /// relies on, so it is refused before anything is written.
    #[error("database schema {found} is newer than this acode-run ({known}): upgrade acode-run")]
    TooNew {
        /// The database's `user_version`.
        found: i64,
        /// The newest schema this binary knows.
        known: i64,
    },
}

/// A run as stored.
#[derive(Debug, Clone, Serialize)]
pub struct RunRow {
    /// UUID of the run.
    pub run_id: String,
    /// The plan's id.
    pub plan_id: String,
    /// Hash of the plan bytes that ran.
    pub plan_sha256: String,
    /// Where the plan file was.
    pub plan_path: Option<String>,
    /// The workspace root.
    pub workspace: String,
    /// Unix ms.
    pub started_at: i64,
    /// Unix ms, when finished.
    pub finished_at: Option<i64>,
    /// Where the run stands (see `docs/recovery.md`). A run recorded `running` whose process is gone
    /// reads as [`RunStatus::Interrupted`].
    pub status: RunStatus,
    /// The process exit code the run ended with.
    pub exit_code: Option<i64>,
    /// LLM prompt tokens used.
    pub prompt_tokens: i64,
    /// LLM completion tokens used.
    pub completion_tokens: i64,
    /// The OS sandbox the commands used (`bwrap`, `landlock`, `none`); `None` for runs recorded
    /// before it was kept.
    pub sandbox: Option<String>,
    /// The Landlock ABI, when the sandbox was Landlock.
    pub landlock_abi: Option<i64>,
    /// `run` for a plan's run; `draft` or `review` for a stage's conversation (issue 9).
    pub kind: String,
    /// What a stage run is about: the plan hash a draft produced, the run a review judged.
    pub subject: Option<String>,
    /// The repository the run ran in: its `origin` URL without credentials (migration 15; `None`
    /// outside a git repository, without an `origin`, or for runs recorded before).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// The repository's `HEAD` commit when the run started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// When `--jsonl`'s reader went away mid-run (`| head -1`): from which event on the events
    /// were not delivered, and why. The run went on; this record is complete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events_lost: Option<String>,
}

/// A step as stored.
#[derive(Debug, Clone, Serialize)]
pub struct StepRow {
    /// The step id.
    pub step_id: String,
    /// 0-based position in the plan file.
    pub position: i64,
    /// The step's tool.
    pub tool: String,
    /// Where the step stands.
    pub status: StepState,
    /// Tool-call attempts made.
    pub attempts: i64,
    /// Unix ms.
    pub started_at: Option<i64>,
    /// Unix ms.
    pub finished_at: Option<i64>,
    /// [`crate::ErrorKind`] identifier when not completed.
    pub error_code: Option<String>,
    /// Why, for a human.
    pub error_message: Option<String>,
    /// A failure the run tolerated (`"on_failure": "continue"`): it went on and did not fail
    /// for it.
    pub tolerated: bool,
}

/// What one step spent on models, as recorded: tokens, model calls, dollars (`None` when no call
/// had a price).
pub type StepSpend = (i64, i64, Option<f64>);

/// One tool execution (or LLM turn) as recorded.
#[derive(Debug, Clone, Serialize)]
pub struct ExecutionRecord {
    /// UUID v4.
    pub execution_id: String,
    /// The run.
    pub run_id: String,
    /// The step.
    pub step_id: String,
    /// The tool (or `llm` for a model turn).
    pub tool_name: String,
    /// Arguments as JSON text (redacted when stored).
    pub arguments_json: String,
    /// Unix ms.
    pub started_at: i64,
    /// Wall time.
    pub duration_ms: i64,
    /// Whether it succeeded.
    pub success: bool,
    /// Process exit code, if any.
    pub exit_code: Option<i32>,
    /// [`crate::ErrorKind`] identifier on failure.
    pub error_code: Option<String>,
    /// Failure message.
    pub error_message: Option<String>,
    /// 1-based attempt number.
    pub attempt: u32,
    /// Agent turn, for agent steps.
    pub turn: Option<u32>,
    /// The LLM turn execution that asked for this call.
    pub parent_execution_id: Option<String>,
    /// LLM prompt tokens for a turn.
    pub prompt_tokens: Option<i64>,
    /// LLM completion tokens for a turn.
    pub completion_tokens: Option<i64>,
    /// For a command: the program's resolved path, as executed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub program_path: Option<String>,
    /// For a command: SHA-256 of the file executed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub program_sha256: Option<String>,
    /// The call's id, as in the events (`STEP#N`, `STEP#verify-K`); `None` for a model turn and
    /// in runs recorded before schema 15.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
}

/// Metadata of an artifact (content fetched separately with [`Store::artifact`]).
#[derive(Debug, Clone, Serialize)]
pub struct ArtifactMeta {
    /// The artifact type.
    pub artifact_type: String,
    /// Full size of the output in bytes.
    pub bytes: i64,
    /// Whether the stored content is cut short.
    pub truncated: bool,
    /// Whether the output was not valid UTF-8 and is stored as a lossy rendering.
    pub lossy: bool,
}

/// An execution with its artifacts' metadata, for `acode-run show`.
#[derive(Debug, Clone, Serialize)]
pub struct ExecutionRow {
    /// The execution.
    #[serde(flatten)]
    pub record: ExecutionRecord,
    /// Its artifacts.
    pub artifacts: Vec<ArtifactMeta>,
    /// The requests its command made through the run's network proxy.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub network: Vec<NetworkRequest>,
}

/// Everything about one run.
#[derive(Debug, Clone, Serialize)]
pub struct RunDetail {
    /// The run.
    pub run: RunRow,
    /// Its steps in plan order.
    pub steps: Vec<StepRow>,
    /// Its executions in time order.
    pub executions: Vec<ExecutionRow>,
}

/// Inserts one network request row (already redacted).
fn insert_network(
    tx: &rusqlite::Transaction<'_>,
    run_id: &str,
    execution_id: Option<&str>,
    r: &NetworkRequest,
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO network_requests (run_id, execution_id, method, host, port, allowed, status,
         reason, bytes_up, bytes_down, started_at, duration_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    )?
    .execute(params![
        run_id,
        execution_id,
        r.method,
        r.host,
        r.port,
        r.allowed,
        r.status,
        r.reason,
        r.bytes_up as i64,
        r.bytes_down as i64,
        r.started_at,
        r.duration_ms as i64
    ])?;
    Ok(())
}

/// A network request from the ten columns `method, host, port, allowed, status, reason, bytes_up,
/// bytes_down, started_at, duration_ms` starting at column `first`.
fn network_row(r: &rusqlite::Row, first: usize) -> rusqlite::Result<NetworkRequest> {
    let int = |i: usize| r.get::<_, i64>(first + i);
    Ok(NetworkRequest {
        method: r.get(first)?,
        host: r.get(first + 1)?,
        port: int(2)?.clamp(0, 65535) as u16,
        allowed: r.get(first + 3)?,
        status: int(4)?.clamp(0, 999) as u16,
        reason: r.get(first + 5)?,
        bytes_up: int(6)?.max(0) as u64,
        bytes_down: int(7)?.max(0) as u64,
        started_at: int(8)?,
        duration_ms: int(9)?.max(0) as u64,
    })
}

/// The beginning of an artifact, as `show --json` gives a step's result.
#[derive(Debug, Clone, Serialize)]
pub struct ArtifactExcerpt {
    /// The text kept (the start of the artifact).
    pub content: String,
    /// Bytes the tool produced in all.
    pub bytes: u64,
    /// Whether `content` is less than that (cut here, or when it was recorded).
    pub truncated: bool,
}

/// What a finished step writes back.
#[derive(Debug, Clone)]
pub struct StepUpdate<'a> {
    /// New status.
    pub status: StepState,
    /// Attempts made.
    pub attempts: u32,
    /// Unix ms, when started (None for steps that never started).
    pub started_at: Option<i64>,
    /// Unix ms.
    pub finished_at: i64,
    /// Error kind identifier.
    pub error_code: Option<&'a str>,
    /// Error message.
    pub error_message: Option<&'a str>,
    /// LLM tokens used by the step.
    pub tokens: (i64, i64),
    /// A failure the run tolerates (`"on_failure": "continue"`).
    pub tolerated: bool,
}

/// The database handle. One per run (or per CLI query); not shared between threads.
pub struct Store {
    conn: Connection,
    path: Option<PathBuf>,
    /// Device and inode of the file when opened, to notice it being deleted or replaced.
    file_id: Option<(u64, u64)>,
    redactor: Arc<Redactor>,
    /// The run's checkpoints, when [`Store::checkpoint_in_background`] moved them off this
    /// connection. Dropped (the thread stopped) with the store.
    checkpointer: Option<Checkpointer>,
}

/// How many WAL pages a connection whose checkpoints run in the background lets pile up before
/// it checkpoints itself after all (the background thread fell behind or stopped): 40 MB.
const FALLBACK_CHECKPOINT_PAGES: i64 = 10_000;
/// How often the background thread looks at the WAL.
const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_millis(200);
/// The WAL size from which the background thread checkpoints (SQLite's own automatic checkpoint
/// starts at 1000 pages, about as much).
const CHECKPOINT_FROM_BYTES: u64 = 4 * 1024 * 1024;

/// A thread with its own connection that copies the WAL into the database (`PRAGMA
/// wal_checkpoint(PASSIVE)`: never waits for or blocks a writer) every [`CHECKPOINT_EVERY`].
/// SQLite's automatic checkpoint runs inside the commit that crosses 1000 pages, on the thread
/// that committed, with its `fsync`: during a run that is the step's own thread, between a
/// command's end and the next start. Stopped and joined when dropped.
struct Checkpointer {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Checkpointer {
    fn start(path: &Path) -> Option<Checkpointer> {
        let conn = Connection::open(path).ok()?;
        // As the run's own connections: WAL commits and checkpoints without the extra syncs of
        // FULL (a directory sync, a WAL sync per checkpoint).
        conn.pragma_update(None, "synchronous", "NORMAL").ok()?;
        no_checkpoint_on_close(&conn);
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        let wal = PathBuf::from(wal);
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("acode-checkpoint".into())
            .spawn(move || {
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(CHECKPOINT_EVERY)
                {
                    // Only a WAL worth copying: a short run's few pages are checkpointed once,
                    // when its last connection closes, not every 200 ms (each checkpoint is two
                    // fsyncs).
                    if std::fs::metadata(&wal).is_ok_and(|m| m.len() >= CHECKPOINT_FROM_BYTES) {
                        let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
                    }
                }
            })
            .ok()?;
        Some(Checkpointer {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop = None; // wakes the thread: its channel is closed
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Leaves the WAL as it is when the connection closes, instead of copying it into the database
/// (two fsyncs) and deleting it: a one-step run's commits are a few pages. The next connection
/// reads them from the WAL, a crash loses nothing more than `synchronous = NORMAL` may, and the
/// WAL is copied once it is worth it (the run's background checkpoint from
/// [`CHECKPOINT_FROM_BYTES`], SQLite's own every 1000 pages).
fn no_checkpoint_on_close(conn: &Connection) {
    let _ = conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    );
}

fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

impl Store {
    /// The default database location inside a workspace.
    pub const DEFAULT_PATH: &'static str =
        concat!(crate::workspace::state::state_dir!(), "/executions.db");

    /// Opens (creating if needed) and migrates the database at `path`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
                path: dir.display().to_string(),
                source,
            })?;
        }
        let open_err = |source| StoreError::Open {
            path: path.display().to_string(),
            source,
        };
        // Before anything can write (opening read-write creates the WAL, `journal_mode` and the
        // migration transaction write): a database from a newer binary is refused untouched.
        if let Some(found) = migrations::version_on_disk(path).map_err(open_err)? {
            migrations::check_known(found)?;
        }
        // A new database: its first write (the switch to WAL) needs no rollback journal, so it
        // costs none of the journal's fsyncs (see `setup`).
        let new = std::fs::metadata(path).map_or(true, |m| m.len() == 0);
        let conn = Connection::open(path).map_err(open_err)?;
        if new {
            conn.pragma_update(None, "journal_mode", "OFF")
                .map_err(open_err)?;
        }
        Self::setup(conn, Some(path.to_path_buf())).map_err(|e| match e {
            StoreError::Sql(source) => open_err(source),
            other => other,
        })
    }

    /// An in-memory database, for tests and embedders that do not want a file.
    pub fn open_in_memory() -> Result<Store, StoreError> {
        let conn = Connection::open_in_memory()?;
        Self::setup(conn, None)
    }

    fn setup(mut conn: Connection, path: Option<PathBuf>) -> Result<Store, StoreError> {
        conn.busy_timeout(std::time::Duration::from_secs(30))?;
        // NORMAL in WAL mode survives process crashes (kill -9); only an OS crash can lose the
        // last commits. See docs/database.md. Set before switching to WAL, so that the switch of
        // a new database is written with it too (FULL costs two more fsyncs there).
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        no_checkpoint_on_close(&conn);
        migrations::migrate(&mut conn)?;
        Ok(Store {
            conn,
            file_id: path.as_deref().and_then(file_id),
            path,
            redactor: Arc::new(Redactor::from_env()),
            checkpointer: None,
        })
    }

    /// Moves the WAL checkpoints of this database off the connections that record a run onto a
    /// background thread (see [`Checkpointer`]); `open_connection` connections opened for the same
    /// run use [`Store::defer_checkpoints`]. Nothing changes for an in-memory database, or when
    /// the thread cannot start.
    pub fn checkpoint_in_background(&mut self) {
        let Some(path) = &self.path else { return };
        if let Some(c) = Checkpointer::start(path) {
            self.checkpointer = Some(c);
            self.defer_checkpoints();
        }
    }

    /// Lets this connection's WAL grow to [`FALLBACK_CHECKPOINT_PAGES`] before it checkpoints
    /// itself: for connections of a run whose checkpoints a background thread does.
    pub fn defer_checkpoints(&self) {
        let _ = self
            .conn
            .pragma_update(None, "wal_autocheckpoint", FALLBACK_CHECKPOINT_PAGES);
    }

    /// Replaces the redactor applied to everything written (the default reads the environment).
    pub fn set_redactor(&mut self, redactor: Arc<Redactor>) {
        self.redactor = redactor;
    }

    /// The redactor applied to everything written: the run's, shared with the executor, so that
    /// what the executor hands to the model is redacted by the same rules as the record.
    pub fn redactor(&self) -> &Arc<Redactor> {
        &self.redactor
    }

    /// Fails when the database file is no longer the one opened (deleted, or replaced by another
    /// file): SQLite keeps writing to the unlinked file without an error, so a run would otherwise
    /// end with exit 0 and no record.
    pub fn check_still_there(&self) -> Result<(), StoreError> {
        match (&self.path, self.file_id) {
            (Some(path), Some(id)) if file_id(path) != Some(id) => Err(StoreError::Lost {
                path: path.display().to_string(),
            }),
            _ => Ok(()),
        }
    }

    /// Runs recorded as `running`, with the process that ran them: candidates for being marked
    /// interrupted when that process is gone (a crash, a full disk, `kill -9`).
    pub fn running_runs(&self) -> Result<Vec<(String, Option<i64>)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT run_id, runner_pid FROM runs WHERE status = 'running'")?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// Marks a run whose process died while it was `running` as `interrupted` (resumable), so it
    /// does not stay `running` forever.
    pub fn mark_interrupted(&mut self, run_id: &str) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE runs SET status = 'interrupted' WHERE run_id = ?1 AND status = 'running'",
            [run_id],
        )?;
        Ok(())
    }

    /// The database file, if on disk.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    fn scrub<'a>(&self, s: &'a str) -> std::borrow::Cow<'a, str> {
        self.redactor.redact(s)
    }

    fn scrub_opt<'a>(&self, s: Option<&'a str>) -> Option<std::borrow::Cow<'a, str>> {
        s.map(|s| self.scrub(s))
    }

    fn immediate(&mut self) -> rusqlite::Result<rusqlite::Transaction<'_>> {
        self.conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
    }

    /// Records a new run (with the variables it uses) and all its steps as `pending`, in one
    /// transaction.
    pub fn begin_run(
        &mut self,
        run: &RunRow,
        variables_json: &str,
        settings_json: &str,
        steps: &[(&str, usize, &str)],
    ) -> Result<(), StoreError> {
        let variables_json = self.scrub(variables_json).into_owned();
        // Value by value (as arguments are): a known value that is also a number in the record
        // (a token budget) must not turn it into text that is no longer JSON, which `resume`
        // refuses to read.
        let settings_json = self.redactor.redact_json_text(settings_json);
        let plan_id = self.scrub(&run.plan_id).into_owned();
        let steps: Vec<(String, usize, &str)> = steps
            .iter()
            .map(|(id, pos, tool)| (self.scrub(id).into_owned(), *pos, *tool))
            .collect();
        let tx = self.immediate()?;
        tx.execute(
            "INSERT INTO runs (run_id, plan_id, plan_sha256, plan_path, workspace, started_at, status,
             runner_pid, variables_json, runner_token, settings_json)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                run.run_id,
                plan_id,
                run.plan_sha256,
                run.plan_path,
                run.workspace,
                run.started_at,
                run.status,
                std::process::id(),
                variables_json,
                runner::own_token(),
                settings_json
            ],
        )?;
        {
            let mut stmt = tx.prepare(
                "INSERT INTO steps (run_id, step_id, position, tool, status) VALUES (?1, ?2, ?3, ?4, 'pending')",
            )?;
            for (step_id, position, tool) in &steps {
                stmt.execute(params![run.run_id, step_id, *position as i64, tool])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Marks a step as running.
    pub fn step_started(&mut self, run_id: &str, step_id: &str, at: i64) -> Result<(), StoreError> {
        let step_id = self.scrub(step_id).into_owned();
        self.conn
            .prepare_cached(
                "UPDATE steps SET status = 'running', started_at = ?3 WHERE run_id = ?1 AND step_id = ?2",
            )?
            .execute(params![run_id, step_id, at])?;
        Ok(())
    }

    /// Writes a step's outcome.
    pub fn step_finished(
        &mut self,
        run_id: &str,
        step_id: &str,
        u: &StepUpdate,
    ) -> Result<(), StoreError> {
        let message = self.scrub_opt(u.error_message);
        let step_id = self.scrub(step_id);
        self.conn
            .prepare_cached(
                "UPDATE steps SET status = ?3, attempts = attempts + ?4, started_at = COALESCE(started_at, ?5),
                 finished_at = ?6, error_code = ?7, error_message = ?8,
                 prompt_tokens = ?9, completion_tokens = ?10, tolerated = ?11
                 WHERE run_id = ?1 AND step_id = ?2",
            )?
            .execute(params![
                run_id,
                step_id,
                u.status,
                u.attempts,
                u.started_at,
                u.finished_at,
                u.error_code,
                message,
                u.tokens.0,
                u.tokens.1,
                u.tolerated
            ])?;
        Ok(())
    }

    /// Records one execution and its artifacts atomically; arguments, messages and artifact content
    /// are redacted on the way in.
    pub fn record_execution(
        &mut self,
        e: &ExecutionRecord,
        artifacts: &[Artifact],
        network: &[NetworkRequest],
    ) -> Result<(), StoreError> {
        // Redacted value by value, then serialised: a secret holding `"` or `\` is escaped in the
        // JSON text and would no longer match itself there.
        let args = self.redactor.redact_json_text(&e.arguments_json);
        let message = self.scrub_opt(e.error_message.as_deref());
        // Identifiers go through the same redactor, consistently, so lookups by id still match.
        let step_id = self.scrub(&e.step_id);
        let contents: Vec<std::borrow::Cow<str>> =
            artifacts.iter().map(|a| self.scrub(&a.content)).collect();
        let network = self.scrub_network(network);
        let program_path = self.scrub_opt(e.program_path.as_deref());
        let call_id = self.scrub_opt(e.call_id.as_deref());
        let tx = self.immediate()?;
        tx.prepare_cached(
            "INSERT INTO executions (execution_id, run_id, step_id, tool_name, arguments_json, started_at,
             duration_ms, success, exit_code, error_code, error_message, attempt, turn,
             parent_execution_id, prompt_tokens, completion_tokens, program_path, program_sha256,
             call_id)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,
             ?19)",
        )?
        .execute(params![
            e.execution_id,
            e.run_id,
            step_id,
            e.tool_name,
            args,
            e.started_at,
            e.duration_ms,
            e.success,
            e.exit_code,
            e.error_code,
            message,
            e.attempt,
            e.turn,
            e.parent_execution_id,
            e.prompt_tokens,
            e.completion_tokens,
            program_path,
            e.program_sha256,
            call_id
        ])?;
        for (a, content) in artifacts.iter().zip(&contents) {
            tx.prepare_cached(
                "INSERT INTO artifacts (execution_id, artifact_type, content, bytes, truncated, lossy)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![
                e.execution_id,
                a.artifact_type,
                content,
                a.bytes as i64,
                a.truncated,
                a.lossy
            ])?;
        }
        for r in &network {
            insert_network(&tx, &e.run_id, Some(&e.execution_id), r)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Records the attempt of `step` that a runner killed mid-way (`kill -9`, a crash) left without
    /// an execution row: one failed `interrupted` execution saying so, counted in the step's
    /// attempts, so that `show` and an audit see every attempt once the step runs again on resume
    /// (docs/recovery.md).
    pub fn record_cut_off(&mut self, run_id: &str, step: &StepRow) -> Result<(), StoreError> {
        // Killed after its execution was committed but before the step's outcome was: the
        // attempt is already seen.
        let step_id = self.scrub(&step.step_id).into_owned();
        let recorded: i64 = self.conn.query_row(
            "SELECT count(*) FROM executions WHERE run_id = ?1 AND step_id = ?2
             AND parent_execution_id IS NULL AND started_at >= ?3",
            params![run_id, step_id, step.started_at.unwrap_or(i64::MAX)],
            |r| r.get(0),
        )?;
        if recorded > 0 {
            return Ok(());
        }
        let record = ExecutionRecord {
            execution_id: uuid::Uuid::new_v4().to_string(),
            run_id: run_id.to_string(),
            step_id: step.step_id.clone(),
            tool_name: step.tool.clone(),
            arguments_json: "{}".to_string(),
            started_at: step.started_at.unwrap_or_else(crate::error::now_ms),
            duration_ms: 0,
            success: false,
            exit_code: None,
            error_code: Some(crate::ErrorKind::Interrupted.as_str().to_string()),
            error_message: Some(
                "cut off: the runner stopped (kill -9, a crash) while this attempt ran; what it \
                 did before is unknown, and the step ran again on resume"
                    .to_string(),
            ),
            attempt: u32::try_from(step.attempts).unwrap_or(0) + 1,
            turn: None,
            parent_execution_id: None,
            prompt_tokens: None,
            completion_tokens: None,
            program_path: None,
            program_sha256: None,
            call_id: None,
        };
        self.record_execution(&record, &[], &[])?;
        self.conn
            .prepare_cached(
                "UPDATE steps SET attempts = attempts + 1 WHERE run_id = ?1 AND step_id = ?2",
            )?
            .execute(params![run_id, step.step_id])?;
        Ok(())
    }

    /// Records requests no command could be named for (see [`crate::net::proxy`]).
    pub fn record_unattributed_network(
        &mut self,
        run_id: &str,
        network: &[NetworkRequest],
    ) -> Result<(), StoreError> {
        if network.is_empty() {
            return Ok(());
        }
        let network = self.scrub_network(network);
        let tx = self.immediate()?;
        for r in &network {
            insert_network(&tx, run_id, None, r)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Requests with host and reason through the redactor, like every text recorded.
    fn scrub_network(&self, network: &[NetworkRequest]) -> Vec<NetworkRequest> {
        network
            .iter()
            .map(|r| NetworkRequest {
                host: self.scrub(&r.host).into_owned(),
                reason: self.scrub(&r.reason).into_owned(),
                ..r.clone()
            })
            .collect()
    }

    /// The network requests recorded on an execution, in time order.
    pub fn network_requests(&self, execution_id: &str) -> Result<Vec<NetworkRequest>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT method, host, port, allowed, status, reason, bytes_up, bytes_down, started_at,
             duration_ms FROM network_requests WHERE execution_id = ?1 ORDER BY started_at, rowid",
        )?;
        let rows = stmt
            .query_map([execution_id], |r| network_row(r, 0))?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// Writes a run's final status.
    pub fn finish_run(
        &mut self,
        run_id: &str,
        status: RunStatus,
        exit_code: i32,
        tokens: (i64, i64),
    ) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE runs SET status = ?2, exit_code = ?3, finished_at = ?4,
             prompt_tokens = ?5, completion_tokens = ?6 WHERE run_id = ?1",
            params![
                run_id,
                status,
                exit_code,
                crate::error::now_ms(),
                tokens.0,
                tokens.1
            ],
        )?;
        Ok(())
    }

    /// Records that `--jsonl`'s events of `run_id` were not delivered from some event on
    /// (`what`: which, and why), once the run is over.
    pub fn record_events_lost(&self, run_id: &str, what: &str) -> Result<(), StoreError> {
        let what = self.scrub(what);
        self.conn.execute(
            "UPDATE runs SET events_lost = ?2 WHERE run_id = ?1",
            params![run_id, what],
        )?;
        Ok(())
    }

    /// The most recent runs, newest first.
    pub fn list_runs(&self, limit: usize) -> Result<Vec<RunRow>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT run_id, plan_id, plan_sha256, plan_path, workspace, started_at, finished_at,
             status, exit_code, prompt_tokens, completion_tokens, runner_pid, runner_token,
             sandbox, landlock_abi, kind, subject, repository, commit_sha, events_lost
             FROM runs ORDER BY started_at DESC, rowid DESC LIMIT ?1",
        )?;
        let rows = stmt
            .query_map([limit as i64], run_row)?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// A run, by id or unique id prefix.
    pub fn run(&self, run_id: &str) -> Result<RunRow, StoreError> {
        let pattern = format!("{}%", run_id.replace(['%', '_'], ""));
        let mut stmt = self.conn.prepare(
            "SELECT run_id, plan_id, plan_sha256, plan_path, workspace, started_at, finished_at,
             status, exit_code, prompt_tokens, completion_tokens, runner_pid, runner_token,
             sandbox, landlock_abi, kind, subject, repository, commit_sha, events_lost
             FROM runs WHERE run_id LIKE ?1 LIMIT 2",
        )?;
        let rows = stmt
            .query_map([pattern], run_row)?
            .collect::<Result<Vec<_>, _>>()?;
        match rows.len() {
            1 => Ok(rows
                .into_iter()
                .next()
                .ok_or_else(|| StoreError::NotFound(format!("run {run_id}")))?),
            0 => Err(StoreError::NotFound(format!("run {run_id}"))),
            _ => Err(StoreError::NotFound(format!(
                "a unique run for prefix {run_id} (several match)"
            ))),
        }
    }

    /// A run's steps in plan order.
    pub fn steps(&self, run_id: &str) -> Result<Vec<StepRow>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT step_id, position, tool, status, attempts, started_at, finished_at, error_code,
             error_message, tolerated FROM steps WHERE run_id = ?1 ORDER BY position",
        )?;
        let steps = stmt
            .query_map([run_id], |r| {
                Ok(StepRow {
                    step_id: r.get(0)?,
                    position: r.get(1)?,
                    tool: r.get(2)?,
                    status: r.get(3)?,
                    attempts: r.get(4)?,
                    started_at: r.get(5)?,
                    finished_at: r.get(6)?,
                    error_code: r.get(7)?,
                    error_message: r.get(8)?,
                    tolerated: r.get(9)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(steps)
    }

    /// The newest run of the plan with hash `plan_sha256` that did not finish (`running` after a
    /// crash, or `interrupted`), for `run --resume`.
    pub fn find_resumable(
        &self,
        plan_sha256: &str,
        workspace: &str,
    ) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn
            .query_row(
                "SELECT run_id FROM runs WHERE plan_sha256 = ?1 AND workspace = ?2
                 AND status IN ('running', 'interrupted') ORDER BY started_at DESC, rowid DESC LIMIT 1",
                params![plan_sha256, workspace],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Records a reviewer's verdict on `judged_run_id` (the review as JSON, redacted like
    /// everything stored).
    pub fn record_review(
        &mut self,
        judged_run_id: &str,
        review_run_id: &str,
        verdict: &str,
        review_json: &str,
    ) -> Result<(), StoreError> {
        let review_json = self.redactor.redact_json_text(review_json);
        self.conn.execute(
            "INSERT INTO reviews (judged_run_id, review_run_id, verdict, review_json, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                judged_run_id,
                review_run_id,
                verdict,
                review_json,
                crate::error::now_ms()
            ],
        )?;
        Ok(())
    }

    /// The latest review of `judged_run_id`, as recorded by [`Store::record_review`].
    pub fn latest_review(&self, judged_run_id: &str) -> Result<String, StoreError> {
        self.conn
            .query_row(
                "SELECT review_json FROM reviews WHERE judged_run_id = ?1
                 ORDER BY created_at DESC, rowid DESC LIMIT 1",
                [judged_run_id],
                |r| r.get(0),
            )
            .optional()?
            .ok_or_else(|| StoreError::NotFound(format!("a review of run {judged_run_id}")))
    }

    /// Marks a run as a stage's conversation (`draft`, `review`) and records what it is about, so
    /// `runs` and `show` tell drafts and reviews from plan runs.
    pub fn mark_stage(
        &mut self,
        run_id: &str,
        kind: &str,
        subject: Option<&str>,
    ) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE runs SET kind = ?2, subject = ?3 WHERE run_id = ?1",
            params![run_id, kind, subject],
        )?;
        Ok(())
    }

    /// Whether the process recorded as running `run_id` is still that process (same pid, same
    /// start time since the same boot): the one test of "is this run alive" used everywhere.
    pub fn runner_alive(&self, run_id: &str) -> Result<bool, StoreError> {
        let (pid, token): (Option<i64>, Option<String>) = self.conn.query_row(
            "SELECT runner_pid, runner_token FROM runs WHERE run_id = ?1",
            [run_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        Ok(runner::alive(pid, token.as_deref()))
    }

    /// The process that last ran `run_id` and the variables it used.
    pub fn run_origin(&self, run_id: &str) -> Result<(Option<i64>, Option<String>), StoreError> {
        Ok(self.conn.query_row(
            "SELECT runner_pid, variables_json FROM runs WHERE run_id = ?1",
            [run_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?)
    }

    /// LLM tokens recorded on a run's executions (what a crashed run had used, which its run row
    /// never received).
    ///
    /// Summed with `TOTAL` (a float, which cannot overflow) over rows clamped to be non-negative, then
    /// saturated into `i64`: a record written by an older version with absurd counts still resumes.
    pub fn token_usage(&self, run_id: &str) -> Result<(i64, i64), StoreError> {
        let (prompt, completion): (f64, f64) = self.conn.query_row(
            "SELECT TOTAL(MAX(COALESCE(prompt_tokens, 0), 0)),
                    TOTAL(MAX(COALESCE(completion_tokens, 0), 0))
             FROM executions WHERE run_id = ?1",
            [run_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        // `as` from f64 saturates at i64::MAX.
        Ok((prompt as i64, completion as i64))
    }

    /// The model calls `run_id` sent (every recorded `llm` attempt) and the dollars they cost, so a
    /// resumed run's budgets count what its earlier part spent.
    pub fn model_spend(&self, run_id: &str) -> Result<crate::plan::budget::Spend, StoreError> {
        let (calls, cost): (i64, f64) = self.conn.query_row(
            "SELECT count(*), TOTAL(MAX(COALESCE(cost_usd, 0), 0))
             FROM executions WHERE run_id = ?1 AND tool_name = 'llm'",
            [run_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        Ok(crate::plan::budget::Spend {
            tokens: 0,
            model_calls: calls.max(0) as u64,
            cost_usd: cost,
        })
    }

    /// Records what model turn `execution_id` cost at the policy's prices.
    pub fn record_cost(&mut self, execution_id: &str, usd: f64) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE executions SET cost_usd = ?2 WHERE execution_id = ?1",
            params![execution_id, usd],
        )?;
        Ok(())
    }

    /// What each step of `run_id` spent on models: step id → (tokens, model calls, dollars;
    /// `None` when no call had a price). Steps that made no model call are absent.
    pub fn step_spend(&self, run_id: &str) -> Result<BTreeMap<String, StepSpend>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT step_id,
                    TOTAL(MAX(COALESCE(prompt_tokens, 0), 0) + MAX(COALESCE(completion_tokens, 0), 0)),
                    count(*), SUM(cost_usd)
             FROM executions WHERE run_id = ?1 AND tool_name = 'llm' GROUP BY step_id",
        )?;
        let rows = stmt.query_map([run_id], |r| {
            Ok((
                r.get::<_, String>(0)?,
                (
                    r.get::<_, f64>(1)? as i64,
                    r.get::<_, i64>(2)?,
                    r.get::<_, Option<f64>>(3)?,
                ),
            ))
        })?;
        let mut out = BTreeMap::new();
        for row in rows {
            let (k, v) = row?;
            out.insert(k, v);
        }
        Ok(out)
    }

    /// Records what the run's OpenTelemetry export came to (JSON: spans sent, dropped, the last
    /// error), written after the final flush.
    pub fn record_telemetry(&mut self, run_id: &str, json: &str) -> Result<(), StoreError> {
        let json = self.redactor.redact_json_text(json);
        self.conn.execute(
            "UPDATE runs SET telemetry_json = ?2 WHERE run_id = ?1",
            params![run_id, json],
        )?;
        Ok(())
    }

    /// What [`Store::record_telemetry`] wrote for `run_id`, if anything.
    pub fn telemetry(&self, run_id: &str) -> Result<Option<String>, StoreError> {
        Ok(self.conn.query_row(
            "SELECT telemetry_json FROM runs WHERE run_id = ?1",
            [run_id],
            |r| r.get(0),
        )?)
    }

    /// How many tool calls of `run_id` were refused as sandbox violations (including those of an
    /// earlier, interrupted part of the run), for the run summary.
    pub fn refused_violations(&self, run_id: &str) -> Result<u64, StoreError> {
        let n: i64 = self.conn.query_row(
            "SELECT count(*) FROM executions WHERE run_id = ?1 AND error_code = 'sandbox_violation'",
            [run_id],
            |r| r.get(0),
        )?;
        Ok(n.max(0) as u64)
    }

    /// Marks an unfinished run as running again in this process (crash recovery).
    pub fn reopen_run(&mut self, run_id: &str) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE runs SET status = 'running', finished_at = NULL, exit_code = NULL, runner_pid = ?2,
             runner_token = ?3 WHERE run_id = ?1",
            params![run_id, std::process::id(), runner::own_token()],
        )?;
        Ok(())
    }

    /// The options the run was started with (`runs.settings_json`; `None` for runs recorded before
    /// they were kept), for `resume`.
    pub fn run_settings(&self, run_id: &str) -> Result<Option<String>, StoreError> {
        Ok(self.conn.query_row(
            "SELECT settings_json FROM runs WHERE run_id = ?1",
            params![run_id],
            |r| r.get(0),
        )?)
    }

    /// Records the OS sandbox a run's commands use (at its start, and again when it is resumed,
    /// which may happen on another machine or with another `--sandbox`).
    pub fn record_sandbox(
        &mut self,
        run_id: &str,
        mode: &str,
        landlock_abi: Option<u32>,
    ) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE runs SET sandbox = ?2, landlock_abi = ?3 WHERE run_id = ?1",
            params![run_id, mode, landlock_abi],
        )?;
        Ok(())
    }

    /// What each step of a run produced, for `show --json`: the artifacts of its last tool
    /// execution (model turns left out), each cut to `max_chars` characters. Step id → (artifact
    /// type → excerpt).
    pub fn step_outputs(
        &self,
        run_id: &str,
        max_chars: usize,
    ) -> Result<BTreeMap<String, BTreeMap<String, ArtifactExcerpt>>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT e.step_id, a.artifact_type, substr(a.content, 1, ?2), a.bytes, a.truncated,
                    length(a.content) > ?2
             FROM executions e JOIN artifacts a ON a.execution_id = e.execution_id
             WHERE e.run_id = ?1 AND e.rowid = (
                 SELECT e2.rowid FROM executions e2
                 WHERE e2.run_id = e.run_id AND e2.step_id = e.step_id AND e2.tool_name != 'llm'
                 ORDER BY e2.started_at DESC, e2.rowid DESC LIMIT 1)",
        )?;
        let mut out: BTreeMap<String, BTreeMap<String, ArtifactExcerpt>> = BTreeMap::new();
        let rows = stmt.query_map(params![run_id, max_chars as i64], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                ArtifactExcerpt {
                    content: r.get(2)?,
                    bytes: r.get::<_, i64>(3)?.max(0) as u64,
                    truncated: r.get::<_, bool>(4)? || r.get::<_, bool>(5)?,
                },
            ))
        })?;
        for row in rows {
            let (step, kind, excerpt) = row?;
            out.entry(step).or_default().insert(kind, excerpt);
        }
        Ok(out)
    }

    /// A run with its steps, executions and artifact metadata.
    pub fn run_detail(&self, run_id: &str) -> Result<RunDetail, StoreError> {
        let run = self.run(run_id)?;
        let steps = self.steps(&run.run_id)?;
        let mut stmt = self.conn.prepare(
            "SELECT execution_id, run_id, step_id, tool_name, arguments_json, started_at, duration_ms,
             success, exit_code, error_code, error_message, attempt, turn, parent_execution_id,
             prompt_tokens, completion_tokens, program_path, program_sha256, call_id
             FROM executions WHERE run_id = ?1 ORDER BY started_at, rowid",
        )?;
        let records = stmt
            .query_map([&run.run_id], |r| {
                Ok(ExecutionRecord {
                    execution_id: r.get(0)?,
                    run_id: r.get(1)?,
                    step_id: r.get(2)?,
                    tool_name: r.get(3)?,
                    arguments_json: r.get(4)?,
                    started_at: r.get(5)?,
                    duration_ms: r.get(6)?,
                    success: r.get(7)?,
                    exit_code: r.get(8)?,
                    error_code: r.get(9)?,
                    error_message: r.get(10)?,
                    attempt: r.get(11)?,
                    turn: r.get(12)?,
                    parent_execution_id: r.get(13)?,
                    prompt_tokens: r.get(14)?,
                    completion_tokens: r.get(15)?,
                    program_path: r.get(16)?,
                    program_sha256: r.get(17)?,
                    call_id: r.get(18)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        let mut meta = self.conn.prepare(
            "SELECT artifact_type, bytes, truncated, lossy FROM artifacts WHERE execution_id = ?1
             ORDER BY artifact_type",
        )?;
        let mut executions = Vec::with_capacity(records.len());
        for record in records {
            let artifacts = meta
                .query_map([&record.execution_id], |r| {
                    Ok(ArtifactMeta {
                        artifact_type: r.get(0)?,
                        bytes: r.get(1)?,
                        truncated: r.get(2)?,
                        lossy: r.get(3)?,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()?;
            let network = self.network_requests(&record.execution_id)?;
            executions.push(ExecutionRow {
                record,
                artifacts,
                network,
            });
        }
        Ok(RunDetail {
            run,
            steps,
            executions,
        })
    }

    /// The one execution id starting with `prefix` (ids may be abbreviated, like run ids).
    pub fn execution_id(&self, prefix: &str) -> Result<String, StoreError> {
        let pattern = format!("{}%", prefix.replace(['%', '_'], ""));
        let ids = self
            .conn
            .prepare("SELECT execution_id FROM executions WHERE execution_id LIKE ?1 LIMIT 2")?
            .query_map([pattern], |r| r.get::<_, String>(0))?
            .collect::<Result<Vec<_>, _>>()?;
        match ids.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(StoreError::NotFound(format!("execution {prefix}"))),
            _ => Err(StoreError::NotFound(format!(
                "a unique execution for prefix {prefix} (several match)"
            ))),
        }
    }

    /// The artifacts one execution has (type and size, no content), by type; `execution_id` may
    /// be a unique prefix. Returns the full execution id with them.
    pub fn artifact_list(
        &self,
        execution_id: &str,
    ) -> Result<(String, Vec<ArtifactMeta>), StoreError> {
        let execution_id = self.execution_id(execution_id)?;
        let list = self
            .conn
            .prepare(
                "SELECT artifact_type, bytes, truncated, lossy FROM artifacts WHERE execution_id = ?1
                 ORDER BY artifact_type",
            )?
            .query_map([&execution_id], |r| {
                Ok(ArtifactMeta {
                    artifact_type: r.get(0)?,
                    bytes: r.get(1)?,
                    truncated: r.get(2)?,
                    lossy: r.get(3)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok((execution_id, list))
    }

    /// One artifact's content; `execution_id` may be a unique prefix.
    pub fn artifact(
        &self,
        execution_id: &str,
        artifact_type: &str,
    ) -> Result<Artifact, StoreError> {
        let execution_id = &self.execution_id(execution_id)?;
        self.conn
            .query_row(
                "SELECT artifact_type, content, bytes, truncated, lossy FROM artifacts
                 WHERE execution_id = ?1 AND artifact_type = ?2",
                params![execution_id, artifact_type],
                |r| {
                    Ok(Artifact {
                        artifact_type: r.get(0)?,
                        content: r.get(1)?,
                        bytes: r.get::<_, i64>(2)? as u64,
                        truncated: r.get(3)?,
                        lossy: r.get(4)?,
                    })
                },
            )
            .optional()?
            .ok_or_else(|| {
                StoreError::NotFound(format!(
                    "artifact {artifact_type:?} of execution {execution_id}"
                ))
            })
    }
}

/// A run row, with a `running` run whose process is gone read as `interrupted`.
fn run_row(r: &rusqlite::Row) -> rusqlite::Result<RunRow> {
    let mut status: RunStatus = r.get(7)?;
    if status == RunStatus::Running {
        let pid: Option<i64> = r.get(11)?;
        let token: Option<String> = r.get(12)?;
        if !runner::alive(pid, token.as_deref()) {
            status = RunStatus::Interrupted;
        }
    }
    Ok(RunRow {
        run_id: r.get(0)?,
        plan_id: r.get(1)?,
        plan_sha256: r.get(2)?,
        plan_path: r.get(3)?,
        workspace: r.get(4)?,
        started_at: r.get(5)?,
        finished_at: r.get(6)?,
        status,
        exit_code: r.get(8)?,
        prompt_tokens: r.get(9)?,
        completion_tokens: r.get(10)?,
        sandbox: r.get(13)?,
        landlock_abi: r.get(14)?,
        kind: r.get(15)?,
        subject: r.get(16)?,
        repository: r.get(17)?,
        commit: r.get(18)?,
        events_lost: r.get(19)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run `r1` as `begin_run` records it at its start.
    fn running_run() -> RunRow {
        RunRow {
            run_id: "r1".into(),
            plan_id: "p".into(),
            plan_sha256: "00".into(),
            plan_path: None,
            workspace: "/ws".into(),
            started_at: 1,
            finished_at: None,
            status: RunStatus::Running,
            exit_code: None,
            prompt_tokens: 0,
            completion_tokens: 0,
            sandbox: None,
            landlock_abi: None,
            kind: "run".into(),
            subject: None,
            repository: None,
            commit: None,
            events_lost: None,
        }
    }

    /// A known value equal to a number in the run's settings used to be replaced in the record's
    /// text, leaving `"token_budget":[REDACTED]`, which is not JSON: `resume` refuses such a
    /// record (see `RunSettings::from_json`). Strings are still redacted.
    #[test]
    fn settings_stay_json_when_a_secret_equals_a_number_in_them() {
        let mut store = Store::open_in_memory().unwrap();
        let redactor = Redactor::new();
        redactor.add_values(["100000"]);
        store.set_redactor(Arc::new(redactor));
        let run = running_run();
        store
            .begin_run(
                &run,
                "{}",
                r#"{"token_budget":100000,"model":"m-100000"}"#,
                &[],
            )
            .unwrap();
        let text = store.run_settings("r1").unwrap().unwrap();
        let settings = crate::runner::RunSettings::from_json(Some(&text)).unwrap();
        assert_eq!(settings.token_budget, Some(100000));
        assert_eq!(settings.model.as_deref(), Some("m-[REDACTED]"));
    }

    /// Every kind of artifact an execution records is redacted on the way in, whatever its
    /// type: stdout, stderr, a diff, an MCP server's stderr, one never seen before.
    #[test]
    fn every_artifact_kind_is_redacted() {
        let mut store = Store::open_in_memory().unwrap();
        let redactor = Redactor::new();
        redactor.add_values(["s3cr3t-value"]);
        store.set_redactor(Arc::new(redactor));
        let run = running_run();
        store
            .begin_run(&run, "{}", "{}", &[("s", 0, "run_command")])
            .unwrap();
        let kinds = ["stdout", "stderr", "diff", "mcp_stderr", "new_kind"];
        let artifacts: Vec<Artifact> = kinds
            .iter()
            .map(|k| Artifact::new(k, format!("{k}: token=s3cr3t-value\n")))
            .collect();
        let e = ExecutionRecord {
            execution_id: "e1".into(),
            run_id: "r1".into(),
            step_id: "s".into(),
            tool_name: "run_command".into(),
            arguments_json: "{}".into(),
            started_at: 1,
            duration_ms: 1,
            success: true,
            exit_code: Some(0),
            error_code: None,
            error_message: None,
            attempt: 1,
            turn: None,
            parent_execution_id: None,
            prompt_tokens: None,
            completion_tokens: None,
            program_path: None,
            program_sha256: None,
            call_id: None,
        };
        store.record_execution(&e, &artifacts, &[]).unwrap();
        for k in kinds {
            let stored = store.artifact("e1", k).unwrap().content;
            assert_eq!(stored, format!("{k}: token=[REDACTED]\n"), "{k}");
        }
    }
}
