//! The execution database's schema versions (SPEC §8, §9): a newer schema is refused untouched.

use rusqlite::Connection;
use serde_json::json;

use crate::harness::*;

/// The bytes of the database file and its WAL (`None` when absent).
fn snapshot(db: &std::path::Path) -> (Vec<u8>, Option<Vec<u8>>, bool) {
    let wal = std::path::PathBuf::from(format!("{}-wal", db.display()));
    (
        std::fs::read(db).unwrap(),
        std::fs::read(&wal).ok(),
        wal.exists(),
    )
}

fn assert_refused(t: &TestDir, db: &std::path::Path) {
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "p", "steps": [
        {"step_id": "w", "tool": "file_write", "arguments": {"path": "a.txt", "contents": "1"}}]}),
    );
    t.approve(&plan);
    let before = snapshot(db);
    let db_arg = db.to_str().unwrap();
    for args in [
        vec!["runs", "--db", db_arg],
        vec!["run", plan.to_str().unwrap(), "--db", db_arg],
        vec!["show", "abc", "--db", db_arg],
    ] {
        let out = t.run(&args);
        assert_eq!(code(&out), 1, "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("database schema 99 is newer than this acode-run (")
                && stderr(&out).contains("): upgrade acode-run"),
            "{args:?}: {}",
            stderr(&out)
        );
        assert_eq!(
            snapshot(db),
            before,
            "{args:?} changed the database or its WAL"
        );
    }
    assert!(!t.ws.join("a.txt").exists(), "nothing ran");
}

#[test]
fn a_newer_schema_is_refused_without_a_byte_changed() {
    let t = TestDir::new();
    let db = t.root.join("new.db");
    {
        let conn = Connection::open(&db).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.execute_batch("CREATE TABLE future (x); INSERT INTO future VALUES (1);")
            .unwrap();
        conn.pragma_update(None, "user_version", 99).unwrap();
    } // closed: checkpointed, the WAL removed
    assert!(!std::path::Path::new(&format!("{}-wal", db.display())).exists());
    assert_refused(&t, &db);
    assert!(
        !std::path::Path::new(&format!("{}-wal", db.display())).exists(),
        "no WAL was created"
    );
}

#[test]
fn a_newer_schema_still_in_the_wal_is_refused_without_a_byte_changed() {
    let t = TestDir::new();
    let db = t.root.join("new.db");
    let conn = Connection::open(&db).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
    conn.execute_batch("CREATE TABLE future (x); INSERT INTO future VALUES (1);")
        .unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    // The connection stays open: the new version lives only in the WAL.
    let wal = std::fs::read(format!("{}-wal", db.display())).unwrap();
    assert!(!wal.is_empty());
    assert_refused(&t, &db);
    drop(conn);
}

#[test]
fn an_older_schema_is_migrated() {
    let t = TestDir::new();
    let db = t.root.join("old.db");
    {
        let conn = Connection::open(&db).unwrap();
        conn.execute_batch(acode_run::store::migrations::MIGRATIONS[0])
            .unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
    }
    let out = t.run(&["runs", "--db", db.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let conn = Connection::open(&db).unwrap();
    assert_eq!(
        q::<i64>(&conn, "PRAGMA user_version"),
        acode_run::store::migrations::MIGRATIONS.len() as i64
    );
    assert_eq!(q::<String>(&conn, "PRAGMA integrity_check"), "ok");
}
