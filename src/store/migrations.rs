//! Schema migrations, keyed by `PRAGMA user_version` (the cargo approach).
//!
//! Each entry is applied once, in order, inside one exclusive transaction together with the version
//! bump. Never edit a migration that has shipped: append a new one.

use std::io::Read;
use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use super::StoreError;

/// The ordered migrations; index + 1 is the `user_version` after applying it.
pub const MIGRATIONS: &[&str] = &[
    // 1: the initial schema.
    r#"
    CREATE TABLE runs (
        run_id            TEXT PRIMARY KEY,
        plan_id           TEXT NOT NULL,
        plan_sha256       TEXT NOT NULL,
        plan_path         TEXT,
        workspace         TEXT NOT NULL,
        started_at        INTEGER NOT NULL,
        finished_at       INTEGER,
        status            TEXT NOT NULL,
        exit_code         INTEGER,
        prompt_tokens     INTEGER NOT NULL DEFAULT 0,
        completion_tokens INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX runs_started ON runs(started_at);
    CREATE TABLE steps (
        run_id            TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
        step_id           TEXT NOT NULL,
        position          INTEGER NOT NULL,
        tool              TEXT NOT NULL,
        status            TEXT NOT NULL,
        attempts          INTEGER NOT NULL DEFAULT 0,
        started_at        INTEGER,
        finished_at       INTEGER,
        error_code        TEXT,
        error_message     TEXT,
        prompt_tokens     INTEGER NOT NULL DEFAULT 0,
        completion_tokens INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (run_id, step_id)
    );
    CREATE TABLE executions (
        execution_id        TEXT PRIMARY KEY,
        run_id              TEXT NOT NULL,
        step_id             TEXT NOT NULL,
        tool_name           TEXT NOT NULL,
        arguments_json      TEXT NOT NULL,
        started_at          INTEGER NOT NULL,
        duration_ms         INTEGER NOT NULL,
        success             INTEGER NOT NULL,
        exit_code           INTEGER,
        error_code          TEXT,
        error_message       TEXT,
        attempt             INTEGER NOT NULL DEFAULT 1,
        turn                INTEGER,
        parent_execution_id TEXT REFERENCES executions(execution_id),
        prompt_tokens       INTEGER,
        completion_tokens   INTEGER,
        FOREIGN KEY (run_id, step_id) REFERENCES steps(run_id, step_id) ON DELETE CASCADE
    );
    CREATE INDEX executions_step ON executions(run_id, step_id, started_at);
    CREATE TABLE artifacts (
        execution_id  TEXT NOT NULL REFERENCES executions(execution_id) ON DELETE CASCADE,
        artifact_type TEXT NOT NULL,
        content       TEXT NOT NULL,
        bytes         INTEGER NOT NULL,
        truncated     INTEGER NOT NULL,
        PRIMARY KEY (execution_id, artifact_type)
    );
    "#,
    // 2: what crash recovery needs: the process running a run (to refuse resuming a live one) and the
    // variables it started with (so a resumed run substitutes the same values).
    r#"
    ALTER TABLE runs ADD COLUMN runner_pid INTEGER;
    ALTER TABLE runs ADD COLUMN variables_json TEXT;
    "#,
    // 3: the OS sandbox the run's commands actually used (`bwrap`, `landlock`, `none`) and the
    // kernel's Landlock ABI when it was Landlock (SPEC §6: the mode used is recorded on the run).
    r#"
    ALTER TABLE runs ADD COLUMN sandbox TEXT;
    ALTER TABLE runs ADD COLUMN landlock_abi INTEGER;
    "#,
    // 4: which process runs a run, robust to pid reuse: "<boot id>:<start time in ticks>" of
    // `runner_pid`, so a run whose process is gone reads as interrupted.
    r#"
    ALTER TABLE runs ADD COLUMN runner_token TEXT;
    "#,
    // 5: every approval and rejection, appended (PLAN.approval holds only the latest).
    r#"
    CREATE TABLE decisions (
        plan_id             TEXT NOT NULL,
        plan_sha256         TEXT NOT NULL,
        plan_path           TEXT,
        verdict             TEXT NOT NULL,
        decided_by          TEXT NOT NULL,
        decided_at          INTEGER NOT NULL,
        reason              TEXT,
        overrides_rejection INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX decisions_plan ON decisions(plan_sha256, decided_at);
    "#,
    // 6 (issue 15): output that was not valid UTF-8 is stored lossily; say so instead of passing it
    // off as the bytes the command printed.
    r#"
    ALTER TABLE artifacts ADD COLUMN lossy INTEGER NOT NULL DEFAULT 0;
    "#,
    // 7 (issue 9): what kind of run it was — a plan's `run`, or a `draft` or `review` conversation —
    // and what it is about: the plan hash a draft produced, the run a review judged.
    r#"
    ALTER TABLE runs ADD COLUMN kind TEXT NOT NULL DEFAULT 'run';
    ALTER TABLE runs ADD COLUMN subject TEXT;
    "#,
    // 8 (issue 9): the reviewer's verdicts, so `draft --revise --from-review RUN` reads them from
    // the record rather than from a file a plan could have planted.
    r#"
    CREATE TABLE reviews (
        judged_run_id  TEXT NOT NULL,
        review_run_id  TEXT NOT NULL,
        verdict        TEXT NOT NULL,
        review_json    TEXT NOT NULL,
        created_at     INTEGER NOT NULL
    );
    CREATE INDEX reviews_judged ON reviews(judged_run_id, created_at);
    "#,
    // 9 (issue 21): the options a run was started with (confirmation mode, requested sandbox, LLM
    // settings; never keys), so `resume` continues it as it was started.
    r#"
    ALTER TABLE runs ADD COLUMN settings_json TEXT;
    "#,
    // 10 (issue 21): every request a command made through the run's network proxy, on the
    // execution that made it (NULL when no command could be named for it).
    r#"
    CREATE TABLE network_requests (
        run_id        TEXT NOT NULL,
        execution_id  TEXT REFERENCES executions(execution_id) ON DELETE CASCADE,
        method        TEXT NOT NULL,
        host          TEXT NOT NULL,
        port          INTEGER NOT NULL,
        allowed       INTEGER NOT NULL,
        status        INTEGER NOT NULL,
        reason        TEXT NOT NULL,
        bytes_up      INTEGER NOT NULL,
        bytes_down    INTEGER NOT NULL,
        started_at    INTEGER NOT NULL,
        duration_ms   INTEGER NOT NULL
    );
    CREATE INDEX network_requests_execution ON network_requests(execution_id);
    CREATE INDEX network_requests_run ON network_requests(run_id, started_at);
    "#,
    // 11 (issue 27): what a command really ran — the program's resolved path and the SHA-256 of
    // the file executed (a script's own bytes, or the binary a link leads to).
    r#"
    ALTER TABLE executions ADD COLUMN program_path TEXT;
    ALTER TABLE executions ADD COLUMN program_sha256 TEXT;
    "#,
    // 12: the `history` tool's query (store/history.rs: a workspace's newest executions, newest
    // first, optionally since a time) walks this index backwards and stops at its limit, instead
    // of reading and sorting every execution. (An index on runs(workspace) would make SQLite start
    // from the runs and sort all their executions: not added.)
    r#"
    CREATE INDEX executions_started ON executions(started_at);
    "#,
    // 13 (issue 37): replays. `replay_of` is the run whose model answers a run replayed
    // (`run --replay`, docs/replay.md); `instruction_sha256` what an agent step was asked (its
    // `instruction`, `skill` and `inputs` as the plan wrote them), so a replay of a plan edited
    // since is refused before anything runs.
    r#"
    ALTER TABLE runs ADD COLUMN replay_of TEXT;
    ALTER TABLE steps ADD COLUMN instruction_sha256 TEXT;
    "#,
    // 14 (issue 36): what the run header said, for the HTML report — the approval it ran under
    // (who, when, whether its signature was verified, the policy it is bound to), the sandbox's
    // requested mode and notes, the parallelism and the MCP pins — as JSON ([`super::RunHeader`]).
    r#"
    ALTER TABLE runs ADD COLUMN header_json TEXT;
    "#,
    // 15 (issue 42): how a decision was proven — `ssh` (an approver's key, listed in the
    // policy's allowed_signers: `decided_by` is the principal that file gives it), `hmac` (the
    // shared key) or NULL (a claimed name) — and the SSH key's fingerprint; and the files a run
    // created or changed, with their SHA-256 after the run (the subjects of its attestation).
    r#"
    ALTER TABLE decisions ADD COLUMN scheme TEXT;
    ALTER TABLE decisions ADD COLUMN signer_key TEXT;
    ALTER TABLE runs ADD COLUMN files_recorded INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE runs ADD COLUMN attestation_json TEXT;
    CREATE TABLE run_files (
        run_id  TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
        path    TEXT NOT NULL,
        sha256  TEXT,
        change  TEXT NOT NULL,
        bytes   INTEGER,
        PRIMARY KEY (run_id, path)
    );
    "#,
    // 16 (issue 46): budgets and traces. `cost_usd` is what a model turn cost at the policy's
    // prices (NULL when the model has no price), so `report` and JUnit show spend per step and a
    // resumed run counts what it spent; `telemetry_json` what the run's OpenTelemetry export came
    // to (spans sent, dropped, the last error), docs/observability.md.
    r#"
    ALTER TABLE executions ADD COLUMN cost_usd REAL;
    ALTER TABLE runs ADD COLUMN telemetry_json TEXT;
    "#,
    // 17 (issue 48): one approval, many workspaces, and many machines' records in one file.
    // Where a run ran (`repository`: the workspace's `origin` URL without credentials;
    // `commit_sha`: its HEAD when the run started), which files it left changed (`changes_json`,
    // git's view at the end), what the repository's own policy narrowed or was refused
    // (`repository_policy_json`); `run_sources`: the file each merged run came from and the
    // digest of its rows, so `acode-run merge` is idempotent and names both files of a conflict;
    // and the views documented as a stable interface for Datasette, DuckDB and warehouses
    // (docs/database.md). A view names its columns, so a later migration that adds a column to a
    // table changes no view.
    r#"
    ALTER TABLE runs ADD COLUMN repository TEXT;
    ALTER TABLE runs ADD COLUMN commit_sha TEXT;
    ALTER TABLE runs ADD COLUMN changes_json TEXT;
    ALTER TABLE runs ADD COLUMN repository_policy_json TEXT;
    CREATE TABLE run_sources (
        run_id          TEXT PRIMARY KEY,
        source          TEXT NOT NULL,
        content_sha256  TEXT NOT NULL,
        merged_at       INTEGER NOT NULL
    );
    CREATE VIEW v_runs AS
    SELECT r.run_id, r.kind, r.plan_id, r.plan_sha256, r.repository, r.commit_sha, r.workspace,
           r.status, r.exit_code, r.started_at, r.finished_at,
           r.finished_at - r.started_at AS duration_ms,
           r.sandbox, r.prompt_tokens, r.completion_tokens,
           (SELECT count(*) FROM steps s WHERE s.run_id = r.run_id) AS steps,
           (SELECT count(*) FROM steps s WHERE s.run_id = r.run_id AND s.status = 'failed')
               AS steps_failed,
           (SELECT count(*) FROM network_requests n WHERE n.run_id = r.run_id AND n.allowed = 0)
               AS requests_refused,
           CASE WHEN json_valid(r.header_json)
                THEN json_extract(r.header_json, '$.approval.decided_by') END AS approved_by,
           CASE WHEN json_valid(r.header_json)
                THEN json_extract(r.header_json, '$.approval.policy_sha256') END AS policy_sha256,
           CASE WHEN json_valid(r.changes_json)
                THEN json_extract(r.changes_json, '$.total') END AS files_changed,
           (SELECT source FROM run_sources m WHERE m.run_id = r.run_id) AS merged_from
    FROM runs r;
    CREATE VIEW v_steps AS
    SELECT s.run_id, r.repository, r.plan_id, s.step_id, s.position, s.tool, s.status,
           s.attempts, s.started_at, s.finished_at, s.finished_at - s.started_at AS duration_ms,
           s.error_code, s.error_message, s.prompt_tokens, s.completion_tokens,
           (SELECT count(*) FROM executions e WHERE e.run_id = s.run_id AND e.step_id = s.step_id)
               AS executions
    FROM steps s JOIN runs r ON r.run_id = s.run_id;
    CREATE VIEW v_requests AS
    SELECT n.run_id, r.repository, e.step_id, n.execution_id, n.method, n.host, n.port,
           n.allowed, n.status, n.reason, n.bytes_up, n.bytes_down, n.started_at, n.duration_ms
    FROM network_requests n
    JOIN runs r ON r.run_id = n.run_id
    LEFT JOIN executions e ON e.execution_id = n.execution_id;
    "#,
    // 18 (issue 43): whether a failed step was tolerated (`"on_failure": "continue"`: the run went
    // on and does not fail for it), as the run decided, so the report says "failed, tolerated"
    // from the record instead of guessing from the run's status; and each execution's call id (as
    // in the events: `STEP#N`, `STEP#verify-K`), so `show` tells a step's attempts, its model's
    // tool calls and its verify commands apart; and, when `--jsonl`'s reader went away mid-run,
    // from which event on the events were not delivered.
    r#"
    ALTER TABLE steps ADD COLUMN tolerated INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE executions ADD COLUMN call_id TEXT;
    ALTER TABLE runs ADD COLUMN events_lost TEXT;
    "#,
];

/// The newest schema this binary knows.
pub fn latest() -> i64 {
    MIGRATIONS.len() as i64
}

/// Refuses a schema newer than [`latest`]: an older binary must not write to it.
pub fn check_known(version: i64) -> Result<(), StoreError> {
    if version > latest() {
        return Err(StoreError::TooNew {
            found: version,
            known: latest(),
        });
    }
    Ok(())
}

/// The `user_version` of the database file at `path` (`None` when there is no file yet), read
/// without writing a byte of the file or its WAL: from the file header when there is no WAL, else
/// through a read-only connection (which reads the WAL but never writes it or checkpoints).
pub fn version_on_disk(path: &Path) -> rusqlite::Result<Option<i64>> {
    let mut header = [0u8; 100];
    let read = match std::fs::File::open(path) {
        Ok(mut f) => read_up_to(&mut f, &mut header),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        // Let the real open report it.
        Err(_) => return Ok(None),
    };
    if read < 100 || !header.starts_with(b"SQLite format 3\0") {
        // Empty (a fresh database) or not SQLite at all: the normal open decides.
        return Ok(None);
    }
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let wal_has_frames = std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0);
    if !wal_has_frames {
        // Offset 60: the user version, a big-endian 32-bit integer (SQLite file format §1.3).
        let v = i32::from_be_bytes([header[60], header[61], header[62], header[63]]);
        return Ok(Some(i64::from(v)));
    }
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(std::time::Duration::from_secs(30))?;
    let v = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    Ok(Some(v))
}

/// Reads until `buf` is full or the file ends; returns the bytes read (0 on an I/O error).
fn read_up_to(f: &mut std::fs::File, buf: &mut [u8]) -> usize {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    n
}

/// Brings `conn` up to the latest schema, all pending migrations in one transaction. Safe to call on
/// every open and concurrently from several processes: the exclusive transaction makes the version
/// check and the changes atomic. A schema newer than this binary is refused before any change.
pub fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Exclusive)?;
    let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    check_known(version)?;
    let current = usize::try_from(version).unwrap_or(0);
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current) {
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
    }
    tx.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_apply_once_and_twice() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        migrate(&mut conn).unwrap();
        let v: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v as usize, MIGRATIONS.len());
        let n: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        // runs, steps, executions, artifacts, decisions, reviews, network_requests, run_files,
        // run_sources.
        assert_eq!(n, 9);
    }

    #[test]
    fn an_old_schema_migrates_in_one_step_and_a_new_one_is_refused() {
        let dir = std::env::temp_dir().join(format!("acode-mig-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("old.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(MIGRATIONS[0]).unwrap();
            conn.pragma_update(None, "user_version", 1).unwrap();
        }
        assert_eq!(version_on_disk(&path).unwrap(), Some(1));
        let store = crate::store::Store::open(&path).unwrap();
        drop(store);
        assert_eq!(version_on_disk(&path).unwrap(), Some(latest()));

        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "user_version", latest() + 1)
            .unwrap();
        let err = migrate(&mut conn).unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("database schema {} is newer", latest() + 1)),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
