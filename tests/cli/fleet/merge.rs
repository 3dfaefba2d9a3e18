//! `acode-run merge OUT IN…`: nothing lost, nothing twice, conflicts and bad inputs refused with
//! nothing written; the merged database read by `runs`, `show`, `report` and `--junit`.

use std::path::{Path, PathBuf};

use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};
use serde_json::json;

use super::*;

/// The tables whose rows a merge must carry over one for one.
const TABLES: &[&str] = &[
    "runs",
    "steps",
    "executions",
    "artifacts",
    "network_requests",
    "decisions",
];

fn count(db: &Path, table: &str) -> i64 {
    let c = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap();
    q(&c, &format!("SELECT count(*) FROM {table}"))
}

/// Four machines' records: a fleet run that passes (with the approval recorded beside it), one
/// that fails, one that asks for a refused host, and an agent run with its model traffic.
fn machines(t: &TestDir) -> Vec<PathBuf> {
    let (plan, policy) = fleet_plan(t);
    let records = t.root.join("records");
    std::fs::create_dir_all(&records).unwrap();
    let mut dbs = Vec::new();
    for (name, b, expected) in [
        ("alpha", Behaviour::Passes, 0),
        ("beta", Behaviour::Fails, 30),
        ("gamma", Behaviour::RefusedHost, 30),
    ] {
        let repo = fleet_repository(t, name, b);
        let db = records.join(format!("{name}.db"));
        if name == "alpha" {
            approve_fleet(t, &plan, &policy, &db);
        }
        assert_eq!(run_fleet(t, &plan, &policy, &repo, &db), expected, "{name}");
        dbs.push(db);
    }
    let agent = t.plan(
        "agent.json",
        &json!({"plan_id": "ask", "steps": [{"step_id": "think", "tool": "agent", "arguments": {
            "instruction": "Read a.txt.", "tools": ["file_read"], "max_turns": 3}}]}),
    );
    let repo = repository(t, "delta");
    let db = records.join("delta.db");
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_tool_calls(&[("file_read", json!({"path": "a.txt"}))]),
        ScriptedResponse::chat_text("It says a."),
    ]);
    let (agent_s, repo_s, db_s, url) = (
        agent.to_str().unwrap(),
        repo.to_str().unwrap(),
        db.to_str().unwrap(),
        server.url(),
    );
    let out = t.run(&[
        "approve",
        agent_s,
        "--workspace",
        repo_s,
        "--db",
        db_s,
        "--by",
        "lead",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = t.run(&[
        "run",
        agent_s,
        "--workspace",
        repo_s,
        "--db",
        db_s,
        "--llm-url",
        &url,
        "--model",
        "m",
        "--quiet",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    dbs.push(db);
    dbs
}

fn merge(t: &TestDir, out: &Path, inputs: &[&Path]) -> std::process::Output {
    let mut args = vec!["merge".to_string(), out.display().to_string()];
    args.extend(inputs.iter().map(|p| p.display().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    t.run(&args)
}

/// Files in `dir` whose name says they are a merge's temporary file.
fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect()
}

fn sha(path: &Path) -> String {
    acode_run::util::sha256_hex(&std::fs::read(path).unwrap())
}

#[test]
fn merging_keeps_every_row_once_and_twice_changes_nothing() {
    let t = TestDir::new();
    let inputs = machines(&t);
    let ins: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    let out = t.root.join("fleet.db");
    let merged = merge(&t, &out, &ins);
    assert_eq!(code(&merged), 0, "{}", stderr(&merged));
    assert!(
        stderr(&merged).contains("4 runs added, 0 already there"),
        "{}",
        stderr(&merged)
    );
    for table in TABLES {
        let sum: i64 = inputs.iter().map(|db| count(db, table)).sum();
        assert!(
            sum > 0,
            "no {table} rows to merge: the test proves nothing about {table}"
        );
        assert_eq!(count(&out, table), sum, "{table}");
    }
    let llm: i64 = q(
        &rusqlite::Connection::open(&out).unwrap(),
        "SELECT count(*) FROM executions e JOIN artifacts a ON a.execution_id = e.execution_id
         WHERE e.tool_name = 'llm' AND a.artifact_type IN ('prompt', 'response')",
    );
    assert!(llm >= 4, "the model traffic was not merged ({llm})");
    let before = dump(&out);
    assert!(!before.iter().any(|r| r.contains(URL_PASSWORD)));

    // The same inputs again, and one of them a third time: nothing changes.
    let mut again = ins.clone();
    again.push(ins[1]);
    let merged = merge(&t, &out, &again);
    assert_eq!(code(&merged), 0, "{}", stderr(&merged));
    assert!(
        stderr(&merged).contains("0 runs added, 5 already there"),
        "{}",
        stderr(&merged)
    );
    assert_eq!(dump(&out), before);
    // A merged database merged into another: the same runs, nothing twice, and each run still
    // says which machine's file it came from.
    let out2 = t.root.join("fleet2.db");
    let merged = merge(&t, &out2, &[&out, ins[0]]);
    assert_eq!(code(&merged), 0, "{}", stderr(&merged));
    for table in TABLES {
        assert_eq!(count(&out2, table), count(&out, table), "{table}");
    }
    let source: String = q(
        &rusqlite::Connection::open(&out2).unwrap(),
        "SELECT source FROM run_sources s JOIN runs r USING (run_id)
         WHERE r.repository LIKE '%/beta.git'",
    );
    assert!(source.ends_with("records/beta.db"), "{source}");

    // The merged record is read like any other.
    let out_s = out.to_str().unwrap();
    let runs = t.run(&["runs", "--db", out_s, "--json"]);
    assert_eq!(code(&runs), 0, "{}", stderr(&runs));
    let runs: Vec<serde_json::Value> = serde_json::from_str(&stdout(&runs)).unwrap();
    assert_eq!(runs.len(), 4);
    let beta = runs
        .iter()
        .find(|r| r["repository"] == "https://git.example.org/fleet/beta.git")
        .expect("beta's run names its repository");
    let beta_id = beta["run_id"].as_str().unwrap();
    let shown = t.run(&["show", beta_id, "--db", out_s]);
    assert_eq!(code(&shown), 0, "{}", stderr(&shown));
    let text = stdout(&shown);
    assert!(
        text.contains("repository https://git.example.org/fleet/beta.git at "),
        "{text}"
    );
    assert!(text.contains("M VERSION"), "{text}");
    let page = t.root.join("beta.html");
    let junit = t.root.join("beta.xml");
    let report = t.run(&[
        "report",
        beta_id,
        "--db",
        out_s,
        "--html",
        page.to_str().unwrap(),
        "--junit",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(code(&report), 0, "{}", stderr(&report));
    assert!(
        std::fs::read_to_string(&page)
            .unwrap()
            .contains("FAILED: beta")
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let failure = doc
        .descendants()
        .find(|n| n.has_tag_name("failure"))
        .expect("the failed step is a failure");
    assert!(failure.text().unwrap().contains("FAILED: beta"), "{xml}");
    assert_eq!(doc.root_element().attribute("tests"), Some("2"));
}

#[test]
fn one_run_id_with_different_content_is_refused_naming_both_files() {
    let t = TestDir::new();
    let inputs = machines(&t);
    let out = t.root.join("fleet.db");
    assert_eq!(code(&merge(&t, &out, &[&inputs[0]])), 0);
    // The same run as another machine's file tells it: one artifact differs.
    let other = t.root.join("other-machine.db");
    copy_database(&inputs[0], &other);
    let c = rusqlite::Connection::open(&other).unwrap();
    c.execute(
        "UPDATE artifacts SET content = content || 'x' WHERE artifact_type = 'stdout'",
        [],
    )
    .unwrap();
    drop(c);
    let before = sha(&out);
    let refused = merge(&t, &out, &[&other]);
    let err = stderr(&refused);
    assert_exit_with(&refused, 46, "one run id with different content");
    assert!(
        err.contains("records/alpha.db") && err.contains("other-machine.db"),
        "{err}"
    );
    assert_eq!(sha(&out), before, "the output changed");
    assert!(
        temporaries(&t.root).is_empty(),
        "{:?}",
        temporaries(&t.root)
    );
    // Both in one go into a new file: refused, and no file made.
    let fresh = t.root.join("fresh.db");
    let refused = merge(&t, &fresh, &[&inputs[0], &inputs[1], &other]);
    assert_exit_with(&refused, 46, "other-machine.db");
    assert!(!fresh.exists());
    assert!(temporaries(&t.root).is_empty());
}

#[test]
fn a_database_merge_cannot_take_is_refused_naming_it_and_nothing_is_written() {
    let t = TestDir::new();
    let inputs = machines(&t);
    let out = t.root.join("fleet.db");
    assert_eq!(code(&merge(&t, &out, &[&inputs[1]])), 0);
    let before = sha(&out);
    let bad = t.root.join("bad");
    std::fs::create_dir_all(&bad).unwrap();

    let truncated = bad.join("truncated.db");
    let bytes = std::fs::read(&inputs[0]).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let text = bad.join("notes.db");
    std::fs::write(&text, "these are notes, not a database\n".repeat(10)).unwrap();
    let foreign = bad.join("foreign.db");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
        .unwrap();
    let newer = bad.join("newer.db");
    copy_database(&inputs[0], &newer);
    rusqlite::Connection::open(&newer)
        .unwrap()
        .pragma_update(None, "user_version", 999)
        .unwrap();
    let newer_bytes = sha(&newer);
    let forged = bad.join("forged.db");
    copy_database(&inputs[0], &forged);
    rusqlite::Connection::open(&forged)
        .unwrap()
        .execute(
            "UPDATE runs SET header_json = json_set(header_json, '$.approval.signature', 'trust-me')",
            [],
        )
        .unwrap();
    let late = bad.join("late.db");
    copy_database(&inputs[0], &late);
    rusqlite::Connection::open(&late)
        .unwrap()
        .execute(
            "UPDATE runs SET header_json = json_set(header_json, '$.approval.decided_at', started_at + 86400000)",
            [],
        )
        .unwrap();
    let missing = bad.join("missing.db");

    for (input, needle) in [
        (&truncated, "truncated"),
        (&text, "not an SQLite database"),
        (&foreign, "not an acode-run execution database"),
        (&newer, "database schema 999 is newer than this acode-run"),
        (&forged, "an approval does not verify"),
        (&late, "after the run started"),
        (&missing, "cannot be read"),
    ] {
        // The good input first: what it would add must not be written either.
        let refused = merge(&t, &out, &[&inputs[0], input]);
        assert_exit_with(&refused, 47, needle);
        assert!(
            stderr(&refused).contains(&input.display().to_string()),
            "{}",
            stderr(&refused)
        );
        assert_eq!(sha(&out), before, "{needle}: the output changed");
        assert!(temporaries(&t.root).is_empty(), "{needle}");
    }
    // The newer database is not touched: not a byte, no journal beside it.
    assert_eq!(sha(&newer), newer_bytes);
    for suffix in ["-wal", "-shm", "-journal"] {
        assert!(!bad.join(format!("newer.db{suffix}")).exists(), "{suffix}");
    }
    // The output among the inputs: the caller's mistake.
    let refused = merge(&t, &out, &[&inputs[0], &out]);
    assert_exit_with(&refused, 2, "the output is also an input");
    assert_eq!(sha(&out), before);
    let refused = merge(&t, &out, &[]);
    assert_exit_with(&refused, 2, "nothing to merge");
}

#[test]
fn from_dir_merges_every_database_under_it() {
    let t = TestDir::new();
    let inputs = machines(&t);
    // As a CI's artifact download lays them out: one directory per job, the same file name.
    let downloaded = t.root.join("downloaded");
    for (i, db) in inputs.iter().enumerate() {
        let dir = downloaded.join(format!("records-{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        copy_database(db, &dir.join("executions.db"));
        std::fs::write(dir.join("report.html"), "<p>not a database</p>").unwrap();
    }
    let out = t.root.join("fleet.db");
    let merged = t.run(&[
        "merge",
        out.to_str().unwrap(),
        "--from-dir",
        downloaded.to_str().unwrap(),
    ]);
    assert_eq!(code(&merged), 0, "{}", stderr(&merged));
    assert_eq!(count(&out, "runs"), 4);
    let refused = t.run(&["merge", out.to_str().unwrap(), "--from-dir", "no-such-dir"]);
    assert_exit_with(&refused, 2, "not a directory");
}
