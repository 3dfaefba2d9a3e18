//! Schema migrations, keyed by `PRAGMA user_version` (the cargo approach).
//!
//! Each entry is applied once, in order, inside one exclusive transaction together with the version
//! bump. Never edit a migration that has shipped: append a new one.

use rusqlite::Connection;

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
];

/// Brings `conn` up to the latest schema. Safe to call on every open and concurrently from several
/// processes: the exclusive transaction makes the version check and the changes atomic.
pub fn migrate(conn: &mut Connection) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Exclusive)?;
    let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let current = usize::try_from(version).unwrap_or(0);
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current) {
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
    }
    tx.commit()
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
        assert_eq!(n, 4);
    }
}
