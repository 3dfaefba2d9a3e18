//! The database rows acode-run reads back: a real SQLite file made by `Store::open` (so every
//! migration ran), holding one run recorded by the production writers (`begin_run`,
//! `record_execution` with artifacts and network requests, a model turn with its prompt and
//! answer, `record_header`, `record_decision`, `record_instructions`, `finish_run`). For each
//! input the rows are put back as recorded, then the fuzzer's bytes are written into chosen
//! columns with raw SQL through a second connection — as an older acode-run, a crash or a person
//! with `sqlite3` could leave them: any SQLite type (text, integer, real, blob, null) in any
//! column, and copies of rows. Then the production readers run: what `runs`, `show`, `show
//! --json`, `artifact` and `report` read (`show` itself through `cli::main_with_args`, stdout to
//! /dev/null; the page through `report::html::render`), what `resume` reads
//! (`RunSettings::from_json` and `for_resume`, the store's resume queries), `run --replay`
//! (`runner::replay::from_store`) and the history tool.
//!
//! Input: a sequence of operations, each `[column: 2 bytes LE][type][length][value…]`: `column`
//! picks a (table, column, row) of the recorded rows (tables by name, columns in schema order,
//! rows in rowid order); `type` the SQLite type written (0 text, 1 integer from up to 8
//! little-endian bytes, 2 real, 3 blob, 4 null, 5 a copy of the row with the value, as text, in
//! that column); `length` bytes of value (255: the rest of the input).
//!
//! Properties: never a panic (an overflow in arithmetic on recorded times or counts included);
//! every failure is a `StoreError` naming what is wrong — the run not found, or a column whose
//! value has the wrong type or is out of range (its index and the reason) — never a SQL error of
//! another kind; the settings record reads back or is an error (never silently "no settings"),
//! and one that reads round-trips and resumes, with no flags given, as exactly what it says; a
//! replay source keeps each step's turns together and in increasing order; the HTML page has no
//! `<script` but its own and no element a row brought (`<x-…`): text from rows is escaped.
#![no_main]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use acode_run::policy::network::NetworkRequest;
use acode_run::redact::Redactor;
use acode_run::runner::RunSettings;
use acode_run::store::{
    DecisionRow, ExecutionRecord, HeaderApproval, HeaderPin, RunHeader, RunRow, RunStatus,
    StepState, StepUpdate, Store, StoreError,
};
use acode_run::tools::Artifact;
use libfuzzer_sys::fuzz_target;
use rusqlite::types::Value as Sql;

const RUN: &str = "0c0ffee0-1234-4abc-8def-0123456789ab";
const PLAN_SHA: &str = "5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e";

/// The database, the rows as recorded, and the columns the fuzzer may write.
struct Fixture {
    path: PathBuf,
    workspace: PathBuf,
    store: Store,
    writer: rusqlite::Connection,
    /// Table → (column names, rows as recorded).
    tables: Vec<(String, Vec<String>, Vec<Vec<Sql>>)>,
    /// (table index, column index, row index).
    slots: Vec<(usize, usize, usize)>,
    /// How many `<script` the page of the run as recorded has (its own).
    scripts: usize,
}

fn record(store: &mut Store, workspace: &str) -> Result<(), StoreError> {
    let settings = r#"{"confirm":"prompt","sandbox":"landlock","llm_provider":"openai","model":"m1","tool_protocol":"native","token_budget":100000,"strict":true,"jobs":2}"#;
    let run = RunRow {
        run_id: RUN.into(),
        plan_id: "fuzz-plan".into(),
        plan_sha256: PLAN_SHA.into(),
        plan_path: Some("plan.json".into()),
        workspace: workspace.into(),
        started_at: 1_700_000_000_000,
        finished_at: None,
        status: RunStatus::Running,
        exit_code: None,
        prompt_tokens: 0,
        completion_tokens: 0,
        sandbox: None,
        landlock_abi: None,
        kind: "run".into(),
        subject: None,
        repository: Some("https://example.invalid/fuzz.git".into()),
        commit: Some("ab".repeat(20)),
        events_lost: None,
    };
    store.begin_run(
        &run,
        "{}",
        settings,
        &[("build", 0, "run_command"), ("think", 1, "agent")],
    )?;
    store.record_sandbox(RUN, "landlock", Some(6))?;
    store.record_header(
        RUN,
        &RunHeader {
            approval: HeaderApproval {
                decided_by: "alice".into(),
                decided_at: 1_700_000_000_000,
                signature: "hmac-sha256:00".into(),
                policy_sha256: PLAN_SHA.into(),
                ..HeaderApproval::default()
            },
            sandbox_requested: "landlock".into(),
            sandbox_notes: vec!["note".into()],
            jobs: 2,
            promises_held: vec!["writes".into()],
            promises_not_held: Vec::new(),
            mcp: BTreeMap::from([(
                "srv".into(),
                HeaderPin {
                    identity: "srv 1.0".into(),
                    tools: BTreeMap::from([("t".into(), "ab".into())]),
                },
            )]),
        },
    )?;
    store.record_decision(&DecisionRow {
        plan_id: "fuzz-plan".into(),
        plan_sha256: PLAN_SHA.into(),
        plan_path: Some("plan.json".into()),
        verdict: acode_run::plan::AuthStatus::Approved,
        decided_by: "alice".into(),
        decided_at: 1_700_000_000_000,
        reason: Some("fine".into()),
        overrides_rejection: false,
        scheme: Some("hmac-sha256".into()),
        signer_key: None,
    })?;
    store.record_instructions(RUN, &[("think".into(), "ab".repeat(32))])?;
    store.step_started(RUN, "build", 1_700_000_000_100)?;
    let exec = |id: &str, step: &str, tool: &str, args: &str, turn| ExecutionRecord {
        execution_id: id.into(),
        run_id: RUN.into(),
        step_id: step.into(),
        tool_name: tool.into(),
        arguments_json: args.into(),
        started_at: 1_700_000_000_200,
        duration_ms: 30,
        success: true,
        exit_code: Some(0),
        error_code: None,
        error_message: None,
        attempt: 1,
        turn,
        parent_execution_id: None,
        prompt_tokens: None,
        completion_tokens: None,
        program_path: Some("/usr/bin/cargo".into()),
        program_sha256: Some("cd".repeat(32)),
        call_id: None,
    };
    let mut stdout = Artifact::new("stdout", "line 1\nline 2\n".repeat(3));
    stdout.truncated = true;
    store.record_execution(
        &exec(
            "e-build-1",
            "build",
            "run_command",
            r#"{"argv":["cargo","build"]}"#,
            None,
        ),
        &[stdout, Artifact::new("stderr", "warning\n".into())],
        &[NetworkRequest {
            method: "CONNECT".into(),
            host: "crates.io".into(),
            port: 443,
            allowed: false,
            status: 403,
            reason: "not in network.allow".into(),
            bytes_up: 10,
            bytes_down: 20,
            started_at: 1_700_000_000_250,
            duration_ms: 5,
        }],
    )?;
    store.step_finished(
        RUN,
        "build",
        &StepUpdate {
            status: StepState::Completed,
            attempts: 1,
            started_at: Some(1_700_000_000_100),
            finished_at: 1_700_000_000_300,
            error_code: None,
            error_message: None,
            tokens: (0, 0),
            tolerated: false,
        },
    )?;
    store.step_started(RUN, "think", 1_700_000_000_400)?;
    let mut turn = exec(
        "e-llm-1",
        "think",
        "llm",
        r#"{"client":"openai http://127.0.0.1:9/v1","model":"m1"}"#,
        Some(1),
    );
    turn.prompt_tokens = Some(12);
    turn.completion_tokens = Some(3);
    store.record_execution(
        &turn,
        &[
            Artifact::new(
                "prompt",
                r#"{"model":"m1","messages":[{"role":"user","content":"hi"}]}"#.into(),
            ),
            Artifact::new(
                "response",
                r#"{"choices":[{"message":{"role":"assistant","content":"done"}}]}"#.into(),
            ),
        ],
        &[],
    )?;
    store.step_finished(
        RUN,
        "think",
        &StepUpdate {
            status: StepState::Failed,
            attempts: 1,
            started_at: Some(1_700_000_000_400),
            finished_at: 1_700_000_000_500,
            error_code: Some("tool_failed"),
            error_message: Some("it failed"),
            tokens: (12, 3),
            tolerated: false,
        },
    )?;
    store.finish_run(RUN, RunStatus::Failed, 1, (12, 3))
}

fn fixture() -> &'static Mutex<Fixture> {
    static F: OnceLock<Mutex<Fixture>> = OnceLock::new();
    F.get_or_init(|| {
        // What `show` prints goes nowhere: only that it does not panic is checked there.
        // SAFETY: opening /dev/null and making it descriptor 1, once, before any thread prints.
        unsafe {
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY);
            libc::dup2(null, 1);
            libc::close(null);
        }
        let dir = acode_run_fuzz::scratch("store_rows");
        let workspace = dir.join("ws");
        std::fs::create_dir_all(&workspace).expect("workspace");
        let path = dir.join("executions.db");
        let mut store = Store::open(&path).expect("Store::open");
        record(&mut store, &workspace.display().to_string()).expect("recording the run");
        let writer = rusqlite::Connection::open(&path).expect("second connection");
        writer
            .busy_timeout(std::time::Duration::from_secs(5))
            .expect("busy_timeout");
        // Rows as a tampered file may hold them: no foreign key enforced on the way in (the
        // bundled SQLite turns them on by default).
        writer
            .pragma_update(None, "foreign_keys", "OFF")
            .expect("foreign_keys");
        // No fsync per input: the file is scratch.
        writer
            .pragma_update(None, "synchronous", "OFF")
            .expect("synchronous");
        let names: Vec<String> = writer
            .prepare(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
                 ORDER BY name",
            )
            .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
            .expect("tables");
        let mut tables = Vec::new();
        let mut slots = Vec::new();
        for (t, name) in names.into_iter().enumerate() {
            let mut stmt = writer
                .prepare(&format!("SELECT * FROM \"{name}\" ORDER BY rowid"))
                .expect("select");
            let cols: Vec<String> = stmt.column_names().map(str::to_string).collect();
            let rows: Vec<Vec<Sql>> = stmt
                .query_map([], |r| {
                    (0..cols.len()).map(|i| r.get::<_, Sql>(i)).collect()
                })
                .and_then(|rows| rows.collect())
                .expect("rows");
            for row in 0..rows.len().max(1) {
                for c in 0..cols.len() {
                    slots.push((t, c, row));
                }
            }
            drop(stmt);
            tables.push((name, cols, rows));
        }
        let mut page = Vec::new();
        acode_run::report::html::render(&store, RUN, redactor(), &mut page)
            .expect("the report of the run as recorded");
        let scripts = count_scripts(&page);
        Mutex::new(Fixture {
            path,
            workspace,
            store,
            writer,
            tables,
            slots,
            scripts,
        })
    })
}

fn count_scripts(page: &[u8]) -> usize {
    let lower = String::from_utf8_lossy(page).to_ascii_lowercase();
    lower.matches("<script").count()
}

/// The value an operation writes.
fn value(kind: u8, bytes: &[u8]) -> Sql {
    match kind {
        0 => Sql::Text(String::from_utf8_lossy(bytes).into_owned()),
        1 => {
            let mut b = [0u8; 8];
            let n = bytes.len().min(8);
            b[..n].copy_from_slice(&bytes[..n]);
            // Sign-extended from the bytes given: a short value may be negative.
            let v = i64::from_le_bytes(b);
            let shift = 64 - 8 * n as u32;
            Sql::Integer(if n == 0 { 0 } else { (v << shift) >> shift })
        }
        2 => {
            let mut b = [0u8; 8];
            let n = bytes.len().min(8);
            b[..n].copy_from_slice(&bytes[..n]);
            let f = f64::from_le_bytes(b);
            // SQLite stores NaN as NULL; any other double as it is.
            Sql::Real(f)
        }
        3 => Sql::Blob(bytes.to_vec()),
        _ => Sql::Null,
    }
}

/// Puts the recorded rows back, then applies the operations in `data`.
fn write_rows(f: &mut Fixture, data: &[u8]) -> rusqlite::Result<()> {
    let tx = f.writer.transaction()?;
    for (name, cols, rows) in &f.tables {
        tx.execute(&format!("DELETE FROM \"{name}\""), [])?;
        let list = cols
            .iter()
            .map(|c| format!("\"{c}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let marks = (1..=cols.len())
            .map(|i| format!("?{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut ins =
            tx.prepare_cached(&format!("INSERT INTO \"{name}\" ({list}) VALUES ({marks})"))?;
        for row in rows {
            ins.execute(rusqlite::params_from_iter(row.iter()))?;
        }
    }
    let mut rest = data;
    while let [lo, hi, kind, len, tail @ ..] = rest {
        let slot = usize::from(u16::from_le_bytes([*lo, *hi]));
        let n = if *len == 255 {
            tail.len()
        } else {
            usize::from(*len).min(tail.len())
        };
        let (bytes, after) = tail.split_at(n);
        rest = after;
        let (t, c, row) = f.slots[slot % f.slots.len()];
        let (name, cols, _) = &f.tables[t];
        let target = format!("(SELECT rowid FROM \"{name}\" ORDER BY rowid LIMIT 1 OFFSET {row})");
        let kind = *kind % 6;
        // A statement the schema refuses (NOT NULL, a duplicate key) leaves the rows as they
        // were: a tampered database can only hold what SQLite accepts.
        if kind == 5 {
            // A copy of the row whose column is the value given (as text): a second run, step
            // or execution that differs from the first in one column.
            let list = cols
                .iter()
                .map(|c| format!("\"{c}\""))
                .collect::<Vec<_>>()
                .join(", ");
            let picked = cols
                .iter()
                .enumerate()
                .map(|(i, col)| {
                    if i == c {
                        "?1".to_string()
                    } else {
                        format!("\"{col}\"")
                    }
                })
                .collect::<Vec<_>>()
                .join(", ");
            let _ = tx.execute(
                &format!(
                    "INSERT INTO \"{name}\" ({list}) SELECT {picked} FROM \"{name}\" WHERE rowid = {target}"
                ),
                [value(0, bytes)],
            );
        } else {
            let _ = tx.execute(
                &format!(
                    "UPDATE \"{name}\" SET \"{}\" = ?1 WHERE rowid = {target}",
                    cols[c]
                ),
                [value(kind, bytes)],
            );
        }
    }
    tx.commit()
}

/// "Every failure is a typed error naming what is wrong".
fn check_error(what: &str, e: &StoreError) {
    let text = e.to_string();
    assert!(!text.is_empty(), "{what}: an error without a message");
    match e {
        StoreError::NotFound(_) => {}
        // A recorded JSON value that does not read, named (the settings, a turn's arguments).
        StoreError::Unreadable { what: named, .. } => {
            assert!(!named.is_empty(), "{what}: an unreadable value not named")
        }
        StoreError::Sql(
            rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::IntegralValueOutOfRange(..),
        ) => assert!(
            text.contains("index") || text.contains("column"),
            "{what}: a conversion error that names no column: {text}"
        ),
        other => panic!("{what}: an error that does not say which value is wrong: {other:?}"),
    }
}

fn ok<T>(what: &str, r: Result<T, StoreError>) -> Option<T> {
    r.map_err(|e| check_error(what, &e)).ok()
}

/// The report's redactor: one per process (building one compiles its patterns).
fn redactor() -> &'static Redactor {
    static R: OnceLock<Redactor> = OnceLock::new();
    R.get_or_init(Redactor::new)
}

fn read_back(f: &Fixture) {
    let store = &f.store;
    let redactor = redactor();
    let workspace = f.workspace.display().to_string();
    let db = f.path.display().to_string();

    // `acode-run show` as text (`show --json` and `runs` serialise or print what the readers
    // below return): the command itself, with its arithmetic on recorded numbers.
    acode_run::cli::main_with_args(
        ["show", "0c0f", "--workspace", &workspace, "--db", &db]
            .iter()
            .map(|a| a.into())
            .collect(),
    );

    let _ = ok("list_runs", store.list_runs(50));
    let _ = ok(
        "history",
        store.history(
            &workspace,
            &acode_run::tools::history::HistoryQuery {
                tool: None,
                success: None,
                since_ms: None,
                limit: 20,
            },
        ),
    );
    let _ = ok("find_resumable", store.find_resumable(PLAN_SHA, &workspace));
    // The rest is read, as in production, for a run found by id or prefix (`show`, `report`,
    // `resume`, `run --replay` all start with `Store::run`).
    let Some(run) = ok("run", store.run("0c0f")) else {
        return;
    };
    let id = run.run_id.as_str();
    if let Some(d) = ok("run_detail", store.run_detail(id)) {
        let _ = ok("decisions", store.decisions(&d.run.plan_sha256));
        let _ = ok(
            "standing_rejection",
            store.standing_rejection(&d.run.plan_sha256),
        );
        let _ = ok("step_outputs", store.step_outputs(id, 16 * 1024));
        let _ = ok("replay_of", store.replay_of(id));
        for e in &d.executions {
            if let Some((full, list)) =
                ok("artifact_list", store.artifact_list(&e.record.execution_id))
            {
                for a in list {
                    let _ = ok("artifact", store.artifact(&full, &a.artifact_type));
                }
            }
        }
        let _ = serde_json::to_string(&d);
    }
    let _ = ok("run_header", store.run_header(id));
    let _ = ok("run_network", store.run_network(id));

    // What `resume` reads.
    let _ = ok("run_origin", store.run_origin(id));
    let _ = ok("token_usage", store.token_usage(id));
    let _ = ok("refused_violations", store.refused_violations(id));
    let _ = ok("runner_alive", store.runner_alive(id));
    let _ = ok("steps", store.steps(id));
    if let Some(text) = ok("run_settings", store.run_settings(id)) {
        match RunSettings::from_json(text.as_deref()) {
            Err(e) => assert!(!e.to_string().is_empty()),
            Ok(s) => {
                assert_eq!(
                    RunSettings::from_json(Some(&s.to_json())).expect("re-read"),
                    s,
                    "the settings record does not round-trip"
                );
                assert_eq!(
                    RunSettings::for_resume(&s, &RunSettings::default())
                        .expect("no flags, no conflict"),
                    s,
                    "resuming with no flags does not continue with the recorded settings"
                );
            }
        }
    }

    // `run --replay RUN`.
    if let Some(source) = ok(
        "replay::from_store",
        acode_run::runner::replay::from_store(store, id),
    ) {
        let mut seen: Vec<&str> = Vec::new();
        let mut last: Option<(&str, u32)> = None;
        for t in &source.turns {
            match last {
                Some((step, turn)) if step == t.step => {
                    assert!(t.turn > turn, "step {step}: turn {} after {turn}", t.turn)
                }
                _ => {
                    assert!(
                        !seen.contains(&t.step.as_str()),
                        "the turns of step {} are not together",
                        t.step
                    );
                    seen.push(&t.step);
                }
            }
            last = Some((&t.step, t.turn));
        }
    }

    // `acode-run report`.
    let mut page = Vec::new();
    match acode_run::report::html::render(store, id, redactor, &mut page) {
        Err(acode_run::report::html::HtmlError::Store(e)) => check_error("report", &e),
        Err(e) => panic!("report: {e}"),
        Ok(()) => {
            assert_eq!(
                count_scripts(&page),
                f.scripts,
                "a <script> from a row reached the page"
            );
            let lower = String::from_utf8_lossy(&page).to_ascii_lowercase();
            assert!(
                !lower.contains("<x-"),
                "an element from a row reached the page"
            );
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut f = fixture().lock().unwrap_or_else(|p| p.into_inner());
    write_rows(&mut f, data).expect("writing the rows");
    read_back(&f);
});
