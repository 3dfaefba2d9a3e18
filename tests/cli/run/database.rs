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
    let plan = simple_plan(t);
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

/// A one-step run on a fresh database (issue #34 item 6, issue 43 §3): counted with strace as
/// `strace -f -e trace=fsync,fdatasync` counts them, the runner issues at most 3 fsyncs before its
/// first step (the new file's header, the WAL's header and its directory entry; the switch to WAL
/// needs no rollback journal on a new file) and at most 4 in all, where it issued 6 and 8, then 5
/// (the last checkpoint at close, now left to the next checkpoint worth making), and 9 for a
/// command step that outlived the background checkpoint's first tick. The step here is a
/// `file_read` and a command that sleeps past that tick, neither of which syncs anything of its
/// own. The database is a working WAL database, and a second run reads the first one's record.
#[test]
fn a_one_step_run_on_a_fresh_database_costs_at_most_four_fsyncs() {
    if std::process::Command::new("strace")
        .arg("-V")
        .output()
        .is_err()
    {
        acode_run::testing::skip("strace", "it counts the runner's fsyncs");
        return;
    }
    let t = TestDir::new();
    t.file("a.txt", "hi\n");
    t.file(
        "acode-policy.json",
        &json!({"allow_commands": ["sleep"], "auto_approve_commands": ["sleep"]}).to_string(),
    );
    let steps = [
        (
            "read",
            json!({"step_id": "r", "tool": "file_read", "arguments": {"path": "a.txt"}}),
            vec!["--sandbox", "none"],
            "a.txt\"",
        ),
        (
            "sleep",
            json!({"step_id": "s", "tool": "run_command", "arguments": {"command": "sleep 0.6"}}),
            vec![],
            "sleep",
        ),
    ];
    for (name, step, extra, marker) in steps {
        let plan = t.plan(
            &format!("{name}.json"),
            &json!({"plan_id": name, "steps": [step]}),
        );
        t.approve(&plan);
        // `approve` recorded its decision in a database: the run starts from none.
        std::fs::remove_dir_all(t.ws.join(".acode")).unwrap();
        let trace = t.root.join("trace.txt");
        let mut c = std::process::Command::new("strace");
        clean_env(&mut c);
        c.current_dir(&t.ws)
            .args([
                "-f",
                "-e",
                "trace=fsync,fdatasync,openat,openat2,execve",
                "-o",
            ])
            .arg(&trace)
            .arg(env!("CARGO_BIN_EXE_acode-run"))
            .args(["run", plan.to_str().unwrap(), "--quiet"])
            .args(&extra);
        let out = c.output().unwrap();
        assert_eq!(code(&out), 0, "{name}: {}", stderr(&out));
        let text = std::fs::read_to_string(&trace).unwrap();
        let syncs = |lines: &[&str]| {
            lines
                .iter()
                .filter(|l| l.contains("fsync(") || l.contains("fdatasync("))
                .count()
        };
        let lines: Vec<&str> = text.lines().collect();
        // Everything before the step's open of a.txt (or the command's start) is the set-up.
        let step = lines
            .iter()
            .position(|l| l.contains(marker))
            .unwrap_or_else(|| panic!("{name}: the step is not in the trace:\n{text}"));
        assert!(
            syncs(&lines[..step]) <= 3,
            "{name}, before the first step:\n{text}"
        );
        assert!(syncs(&lines) <= 4, "{name}, in all:\n{text}");
        assert!(!text.contains("executions.db-journal"), "{text}");
        let db = t.db();
        assert_eq!(q::<String>(&db, "PRAGMA journal_mode"), "wal");
        assert_eq!(q::<i64>(&db, "SELECT count(*) FROM executions"), 1);
        assert_eq!(q::<String>(&db, "PRAGMA integrity_check"), "ok");
    }
    // The record left in the WAL is there for the next command.
    let run_id: String = q(&t.db(), "SELECT run_id FROM runs");
    let out = t.run(&["show", &run_id]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("completed"), "{}", stdout(&out));
}

/// What `strace -f -e trace=openat` saw a command run in `t`'s workspace open: for each of the
/// policy file and the database, the lines that opened it for reading or writing (bwrap's `O_PATH`
/// bind-mounts and failed opens left out).
fn traced_opens(t: &TestDir, args: &[&str]) -> (Vec<String>, Vec<String>, String) {
    let trace = t.root.join("opens.txt");
    let mut c = std::process::Command::new("strace");
    clean_env(&mut c);
    c.current_dir(&t.ws)
        .args(["-f", "-e", "trace=openat,openat2", "-o"])
        .arg(&trace)
        .arg(env!("CARGO_BIN_EXE_acode-run"))
        .args(args);
    let out = c.output().unwrap();
    assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
    let text = std::fs::read_to_string(&trace).unwrap();
    let opens = |file: &str| -> Vec<String> {
        let quoted = format!("{}\"", t.ws.join(file).display());
        text.lines()
            .filter(|l| l.contains(&quoted) && !l.contains("O_PATH") && !l.contains("= -1"))
            .map(String::from)
            .collect()
    };
    (
        opens("acode-policy.json"),
        opens(".acode/executions.db"),
        text.clone(),
    )
}

/// One session per command (issue 44 §2): `run --approve` (which records the decision before the
/// run) and `run --replay RUN` (which reads the recorded run before the run) read the policy file
/// once and open one database connection, the one the run records with; the only other
/// connection is the background checkpointer's (`Store::checkpoint_in_background`). Each stage
/// opening its own made it three.
#[test]
fn a_run_reads_its_policy_once_and_opens_one_database_connection() {
    if std::process::Command::new("strace")
        .arg("-V")
        .output()
        .is_err()
    {
        acode_run::testing::skip("strace", "it counts the runner's opens");
        return;
    }
    let t = TestDir::new();
    t.file("a.txt", "hi\n");
    t.file(
        "acode-policy.json",
        &json!({"allow_commands": ["true"]}).to_string(),
    );
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "p", "steps": [
            {"step_id": "r", "tool": "file_read", "arguments": {"path": "a.txt"}}]}),
    );
    let plan = plan.to_str().unwrap();
    let (policy, db, trace) = traced_opens(
        &t,
        &["run", plan, "--approve", "--sandbox", "none", "--quiet"],
    );
    assert_eq!(policy.len(), 1, "{policy:#?}");
    let writable = db.iter().filter(|l| l.contains("O_RDWR")).count();
    assert_eq!(writable, 2, "the run's and the checkpointer's:\n{trace}");
    let run_id: String = q(&t.db(), "SELECT run_id FROM runs");
    let (policy, db, trace) = traced_opens(
        &t,
        &[
            "run",
            plan,
            "--replay",
            &run_id,
            "--sandbox",
            "none",
            "--quiet",
        ],
    );
    assert_eq!(policy.len(), 1, "{policy:#?}");
    let writable = db.iter().filter(|l| l.contains("O_RDWR")).count();
    assert_eq!(writable, 2, "the run's and the checkpointer's:\n{trace}");
    assert_eq!(q::<i64>(&t.db(), "SELECT count(*) FROM runs"), 2);
}

/// A run recorded and finished, for the tests below that then change its rows as a tampered or
/// damaged database could hold them. Returns the run id.
fn one_finished_run(t: &TestDir) -> String {
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "p", "steps": [
        {"step_id": "w", "tool": "file_write", "arguments": {"path": "a.txt", "contents": "1"}}]}),
    );
    t.approve(&plan);
    let out = t.run(&[plan.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    q(&t.db(), "SELECT run_id FROM runs")
}

/// Found by the `store_rows` fuzz target (docs/fuzzing.md): times and counts at the ends of
/// `i64` in the record made `show` and `report` panic on an arithmetic overflow (a run's
/// duration, its token total, a step's number and duration, the timeline's scale). They are
/// shown, saturated, instead.
#[test]
fn extreme_numbers_in_the_record_are_shown_not_panicked_on() {
    let t = TestDir::new();
    let run_id = one_finished_run(&t);
    t.db()
        .execute_batch(&format!(
            "UPDATE runs SET started_at = {min}, finished_at = {max}, prompt_tokens = {max},
                 completion_tokens = {max};
             UPDATE steps SET position = {max}, started_at = {min}, finished_at = {max};
             UPDATE executions SET started_at = {max}, attempt = 2;",
            min = i64::MIN,
            max = i64::MAX
        ))
        .unwrap();
    for args in [
        vec!["show", run_id.as_str()],
        vec!["show", run_id.as_str(), "--json"],
        vec!["runs"],
        vec!["report", run_id.as_str(), "--html", "-"],
    ] {
        let out = t.run(&args);
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
    }
}

/// Found by the `store_rows` fuzz target's property "every failure is an error naming what is
/// wrong": settings recorded on a run that could not be read were taken as "no settings", and
/// `resume` continued the run with whatever its command line said (a recorded sandbox, token
/// budget or replay source dropped without a word). Now it refuses, naming the run and why.
#[test]
fn resume_refuses_a_run_whose_recorded_settings_cannot_be_read() {
    let t = TestDir::new();
    let run_id = one_finished_run(&t);
    t.db()
        .execute(
            "UPDATE runs SET status = 'interrupted', settings_json = '{\"sandbox\":\"nothing\"}'",
            [],
        )
        .unwrap();
    let out = t.run(&["resume", &run_id]);
    assert_ne!(code(&out), 0, "{}", stdout(&out));
    assert!(
        stderr(&out).contains(&format!(
            "the settings recorded on run {run_id} cannot be read"
        )) && stderr(&out).contains("nothing"),
        "{}",
        stderr(&out)
    );
}
