//! The record as an interface: the views of migration 15 over a merged database, `export RUN_ID
//! --jsonl` checked against `docs/export.schema.json`, and Datasette serving the merged file
//! (opt-in: it installs Datasette from the Python registry).

use serde_json::Value;

use super::*;

const EXPORT_SCHEMA: &str = include_str!("../../../docs/export.schema.json");

/// Three fleet runs (passes, fails, a refused host) merged into `fleet.db`; its path.
fn merged_fleet(t: &TestDir) -> PathBuf {
    let (plan, policy) = fleet_plan(t);
    let records = t.root.join("records");
    std::fs::create_dir_all(&records).unwrap();
    approve_fleet(t, &plan, &policy, &records.join("approval.db"));
    for (name, b) in [
        ("alpha", Behaviour::Passes),
        ("beta", Behaviour::Fails),
        ("gamma", Behaviour::RefusedHost),
    ] {
        let repo = fleet_repository(t, name, b);
        run_fleet(
            t,
            &plan,
            &policy,
            &repo,
            &records.join(format!("{name}.db")),
        );
    }
    let out = t.root.join("fleet.db");
    let merged = t.run(&[
        "merge",
        out.to_str().unwrap(),
        "--from-dir",
        records.to_str().unwrap(),
    ]);
    assert_eq!(code(&merged), 0, "{}", stderr(&merged));
    out
}

fn schema() -> (boon::Schemas, boon::SchemaIndex) {
    let schema: Value = serde_json::from_str(EXPORT_SCHEMA).unwrap();
    let url = "https://acode-run.dev/schemas/export.schema.json";
    let mut schemas = boon::Schemas::new();
    let mut compiler = boon::Compiler::new();
    compiler.add_resource(url, schema).unwrap();
    let index = compiler.compile(url, &mut schemas).unwrap();
    (schemas, index)
}

#[test]
fn the_views_answer_fleet_questions_over_a_merged_database() {
    let t = TestDir::new();
    let out = merged_fleet(&t);
    let db = rusqlite::Connection::open(&out).unwrap();
    // docs/database.md's questions, as written there.
    let failed: Vec<(String, String)> = db
        .prepare(
            "SELECT repository, status FROM v_runs WHERE status != 'completed' ORDER BY repository",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        failed,
        vec![
            (
                "https://git.example.org/fleet/beta.git".to_string(),
                "failed".to_string()
            ),
            (
                "https://git.example.org/fleet/gamma.git".to_string(),
                "failed".to_string()
            ),
        ]
    );
    let (steps, steps_failed, refused, changed, approved_by): (i64, i64, i64, i64, String) = db
        .query_row(
            "SELECT steps, steps_failed, requests_refused, files_changed, approved_by FROM v_runs
             WHERE repository LIKE '%/gamma.git'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .unwrap();
    assert_eq!((steps, steps_failed, refused, changed), (2, 1, 1, 1));
    assert_eq!(approved_by, "lead");
    let step: (String, String) = db
        .query_row(
            "SELECT step_id, error_code FROM v_steps WHERE repository LIKE '%/beta.git'
             AND status = 'failed'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(step, ("check".to_string(), "tool_failed".to_string()));
    let request: (String, String, i64) = db
        .query_row(
            "SELECT host, step_id, allowed FROM v_requests WHERE repository LIKE '%/gamma.git'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(request, (REFUSED_HOST.to_string(), "check".to_string(), 0));
    let merged_from: String = q(
        &db,
        "SELECT merged_from FROM v_runs WHERE repository LIKE '%/alpha.git'",
    );
    assert!(merged_from.ends_with("alpha.db"), "{merged_from}");
    // A header changed outside acode-run that is no longer JSON: the views and the fleet page
    // still read (the value is missing, not an error).
    db.execute(
        "UPDATE runs SET header_json = '{not json' WHERE repository LIKE '%/alpha.git'",
        [],
    )
    .unwrap();
    assert_eq!(
        q::<i64>(&db, "SELECT count(*) FROM v_runs WHERE approved_by IS NULL"),
        1
    );
    let page = t.root.join("fleet.html");
    let report = t.run(&[
        "report",
        "--html",
        page.to_str().unwrap(),
        "--db",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code(&report), 0, "{}", stderr(&report));
}

#[test]
fn export_writes_every_row_of_a_run_as_the_schema_says() {
    let t = TestDir::new();
    let out = merged_fleet(&t);
    let db = rusqlite::Connection::open(&out).unwrap();
    let gamma: String = q(
        &db,
        "SELECT run_id FROM runs WHERE repository LIKE '%/gamma.git'",
    );
    let file = t.root.join("gamma.jsonl");
    let exported = t.run(&[
        "export",
        &gamma,
        "--jsonl",
        file.to_str().unwrap(),
        "--db",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code(&exported), 0, "{}", stderr(&exported));
    assert!(stdout(&exported).is_empty(), "the rows went to the file");
    let text = std::fs::read_to_string(&file).unwrap();
    let (schemas, index) = schema();
    let mut per_table: std::collections::BTreeMap<String, i64> = Default::default();
    for line in text.lines() {
        let row: Value = serde_json::from_str(line).unwrap();
        if let Err(e) = schemas.validate(&row, index) {
            panic!("{line}\ndoes not match docs/export.schema.json: {e:#}");
        }
        *per_table
            .entry(row["table"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    let expect = |sql: &str| -> i64 { db.query_row(sql, [&gamma], |r| r.get(0)).unwrap() };
    for (table, sql) in [
        ("runs", "SELECT count(*) FROM runs WHERE run_id = ?1"),
        ("steps", "SELECT count(*) FROM steps WHERE run_id = ?1"),
        (
            "executions",
            "SELECT count(*) FROM executions WHERE run_id = ?1",
        ),
        (
            "artifacts",
            "SELECT count(*) FROM artifacts WHERE execution_id IN
             (SELECT execution_id FROM executions WHERE run_id = ?1)",
        ),
        (
            "network_requests",
            "SELECT count(*) FROM network_requests WHERE run_id = ?1",
        ),
        (
            "run_sources",
            "SELECT count(*) FROM run_sources WHERE run_id = ?1",
        ),
    ] {
        let n = expect(sql);
        assert!(n > 0, "{table}: nothing to export proves nothing");
        assert_eq!(per_table.get(table).copied().unwrap_or(0), n, "{table}");
    }
    assert!(!text.contains(URL_PASSWORD));
    // To stdout, the same rows.
    let piped = t.run(&[
        "export",
        &gamma[..8],
        "--jsonl",
        "--db",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code(&piped), 0, "{}", stderr(&piped));
    assert_eq!(stdout(&piped).lines().count(), text.lines().count());
    // A run that is not there, a file that cannot be written: refused, nothing left behind.
    let missing = t.run(&[
        "export",
        "no-such-run",
        "--jsonl",
        "x.jsonl",
        "--db",
        out.to_str().unwrap(),
    ]);
    assert_exit_with(&missing, 2, "no-such-run");
    let nowhere = t.root.join("no-such-dir/rows.jsonl");
    let refused = t.run(&[
        "export",
        &gamma,
        "--jsonl",
        nowhere.to_str().unwrap(),
        "--db",
        out.to_str().unwrap(),
    ]);
    assert_exit_with(&refused, 2, "cannot write");
    let usage = t.run(&["export", &gamma, "--db", out.to_str().unwrap()]);
    assert_exit_with(&usage, 2, "--jsonl");
}

/// Every column of every table an export writes is in `docs/export.schema.json` with the type
/// the database gives it, and nothing else is: a migration that adds a column fails here until
/// the schema says it.
#[test]
fn the_export_schema_lists_every_column() {
    let t = TestDir::new();
    let db_path = t.root.join("fresh.db");
    let plan = t.plan(
        "p.json",
        &serde_json::json!({"plan_id": "p", "steps": [{"step_id": "a", "tool": "file_read", "arguments": {"path": "x"}}]}),
    );
    let out = t.run(&[
        "approve",
        plan.to_str().unwrap(),
        "--db",
        db_path.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let db = rusqlite::Connection::open(&db_path).unwrap();
    let schema: Value = serde_json::from_str(EXPORT_SCHEMA).unwrap();
    let variants = schema["oneOf"].as_array().unwrap();
    let tables = acode_run::store::export::export_table_names();
    assert_eq!(variants.len(), tables.len());
    for table in tables {
        let variant = variants
            .iter()
            .find(|v| v["properties"]["table"]["const"] == table)
            .unwrap_or_else(|| panic!("{table} is not in the export schema"));
        let mut listed: Vec<(String, String)> = variant["properties"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(k, _)| *k != "table")
            .map(|(k, v)| {
                let ty = match &v["type"] {
                    Value::Array(a) => a[0].as_str().unwrap().to_string(),
                    other => other.as_str().unwrap().to_string(),
                };
                (k.clone(), ty)
            })
            .collect();
        listed.sort();
        let mut actual: Vec<(String, String)> = db
            .prepare(&format!("PRAGMA table_info({table})"))
            .unwrap()
            .query_map([], |r| {
                let ty: String = r.get(2)?;
                Ok((
                    r.get::<_, String>(1)?,
                    match ty.to_ascii_uppercase().as_str() {
                        "INTEGER" => "integer",
                        "REAL" => "number",
                        _ => "string",
                    }
                    .to_string(),
                ))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        actual.sort();
        assert_eq!(listed, actual, "{table}");
    }
}

/// Datasette (from the Python registry, with pip's own configuration) serves the merged file,
/// and the questions docs/database.md asks it are answered: a view's rows as JSON, and SQL.
#[test]
fn datasette_serves_the_merged_database() {
    if !e2e_net("datasette from the Python registry") {
        return;
    }
    let t = TestDir::new();
    let out = merged_fleet(&t);
    let venv = t.root.join("venv");
    let made = std::process::Command::new("python3")
        .args(["-m", "venv", venv.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let pip = std::process::Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "datasette"])
        .output()
        .unwrap();
    assert!(
        pip.status.success(),
        "pip: {}",
        String::from_utf8_lossy(&pip.stderr)
    );
    let port = free_port();
    let mut server = std::process::Command::new(venv.join("bin/datasette"))
        .args([
            "serve",
            "--immutable",
            out.to_str().unwrap(),
            "--port",
            &port.to_string(),
        ])
        .args([
            "--host",
            "127.0.0.1",
            "--setting",
            "sql_time_limit_ms",
            "5000",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let get = |path: &str| -> Option<Value> {
        let agent = ureq::Agent::new_with_defaults();
        let body = agent
            .get(&format!("http://127.0.0.1:{port}{path}"))
            .call()
            .ok()?
            .body_mut()
            .read_to_string()
            .ok()?;
        serde_json::from_str(&body).ok()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let rows = loop {
        if let Some(v) =
            get("/fleet/v_runs.json?_shape=array&status__not=completed&_sort=repository")
        {
            break v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "datasette did not answer"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let repos: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["repository"].as_str().unwrap())
        .collect();
    assert_eq!(
        repos,
        vec![
            "https://git.example.org/fleet/beta.git",
            "https://git.example.org/fleet/gamma.git"
        ]
    );
    let sql = "select host, count(*) as n from v_requests where allowed = 0 group by host";
    let answer = get(&format!(
        "/fleet.json?_shape=array&sql={}",
        sql.replace(' ', "+")
            .replace('=', "%3D")
            .replace('*', "%2A")
    ))
    .expect("the SQL query answered");
    assert_eq!(answer[0]["host"], REFUSED_HOST);
    assert_eq!(answer[0]["n"], 1);
    let _ = server.kill();
    let _ = server.wait();
}
