//! `run --replay` and `export --replay` (docs/replay.md) through the real binary: a plan with two
//! agent steps is recorded against the scripted model server on 127.0.0.1, the server is stopped,
//! and the run is replayed from the database or from an exported file.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Output;

use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};
use serde_json::{Value, json};

use crate::harness::*;

const LIB: &str = "pub fn add(a: i32, b: i32) -> i32 { a - b }\n";
const FIXED: &str = "pub fn add(a: i32, b: i32) -> i32 { a + b }\n";
const README: &str = "add() must add its arguments.\n";
const FIX: &str = "Make add() in src/lib.rs add.";

/// The plan: `look` reads the README, `fix` reads and edits src/lib.rs.
fn plan(t: &TestDir, fix_instruction: &str) -> PathBuf {
    t.plan(
        "replay.json",
        &json!({"plan_id": "replay", "steps": [
            {"step_id": "look", "tool": "agent", "arguments": {
                "instruction": "Read README.md and say what add() must do.",
                "tools": ["file_read"], "max_turns": 4}},
            {"step_id": "fix", "tool": "agent", "arguments": {
                "instruction": fix_instruction,
                "tools": ["file_read", "file_edit"], "max_turns": 5}}]}),
    )
}

/// What the model answers, step after step.
fn script() -> Vec<ScriptedResponse> {
    vec![
        ScriptedResponse::chat_tool_calls(&[("file_read", json!({"path": "README.md"}))]),
        ScriptedResponse::chat_text("add() must add."),
        ScriptedResponse::chat_tool_calls(&[("file_read", json!({"path": "src/lib.rs"}))]),
        ScriptedResponse::chat_tool_calls(&[(
            "file_edit",
            json!({"path": "src/lib.rs", "old": LIB.trim_end(), "new": FIXED.trim_end()}),
        )]),
        ScriptedResponse::chat_text("Fixed add()."),
    ]
}

/// The workspace as the recorded run found it.
fn reset(t: &TestDir) {
    t.file("README.md", README);
    t.file("src/lib.rs", LIB);
}

/// Runs the plan against the scripted server (stopped when this returns); the run's id.
fn record(t: &TestDir, plan: &Path) -> String {
    reset(t);
    let server = ScriptedServer::start(script());
    let out = t.approve_and_run_with_model(plan, &server, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(server.remaining(), 0);
    assert_eq!(t.read("src/lib.rs"), FIXED);
    q(&t.db(), "SELECT run_id FROM runs")
}

fn run(t: &TestDir, plan: &Path, replay: &str, extra: &[&str]) -> Output {
    let mut args = vec!["run", plan.to_str().unwrap(), "--replay", replay, "--jsonl"];
    args.extend_from_slice(extra);
    t.run(&args)
}

fn runs(t: &TestDir) -> i64 {
    q(&t.db(), "SELECT count(*) FROM runs")
}

/// Each tool call of a run, as `step tool arguments`, in order (model turns left out).
fn calls(t: &TestDir, run_id: &str) -> Vec<String> {
    let db = t.db();
    let mut stmt = db
        .prepare(
            "SELECT step_id || ' ' || tool_name || ' ' || arguments_json FROM executions
             WHERE run_id = ?1 AND tool_name != 'llm' ORDER BY started_at, rowid",
        )
        .unwrap();
    stmt.query_map([run_id], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn newest_run(t: &TestDir) -> String {
    q(
        &t.db(),
        "SELECT run_id FROM runs ORDER BY started_at DESC, rowid DESC LIMIT 1",
    )
}

/// Asserts a refusal before anything ran: exit 2, each of `needles` in the message, no new run
/// recorded and the workspace as it was.
fn assert_refused(t: &TestDir, out: &Output, runs_before: i64, needles: &[&str]) {
    assert_eq!(code(out), 2, "{}", stderr(out));
    for needle in needles {
        assert!(
            stderr(out).contains(needle),
            "{needle:?} in {}",
            stderr(out)
        );
    }
    assert_eq!(runs(t), runs_before, "a run was recorded");
    assert_eq!(t.read("src/lib.rs"), LIB, "something ran");
}

#[test]
fn a_replay_with_the_server_stopped_makes_the_same_calls_and_files() {
    let t = TestDir::new();
    let plan = plan(&t, FIX);
    let recorded = record(&t, &plan);
    reset(&t);
    // A port that is listening but must never be connected to: the replay opens no connection
    // for the model even when a URL is given.
    let trap = TcpListener::bind("127.0.0.1:0").unwrap();
    trap.set_nonblocking(true).unwrap();
    let url = format!("http://{}/v1", trap.local_addr().unwrap());
    let out = run(&t, &plan, &recorded[..8], &["--llm-url", &url]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        matches!(trap.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the replay connected to the model URL"
    );
    assert_eq!(t.read("src/lib.rs"), FIXED);
    let replay = newest_run(&t);
    assert_ne!(replay, recorded);
    assert_eq!(calls(&t, &replay), calls(&t, &recorded));
    assert_eq!(calls(&t, &replay).len(), 3);
    let db = t.db();
    let of: String = q(
        &db,
        &format!("SELECT replay_of FROM runs WHERE run_id = '{replay}'"),
    );
    assert_eq!(of, recorded);
    assert_eq!(
        q::<Option<String>>(
            &db,
            &format!("SELECT replay_of FROM runs WHERE run_id = '{recorded}'")
        ),
        None
    );
    assert_eq!(
        q::<i64>(
            &db,
            &format!("SELECT exit_code FROM runs WHERE run_id = '{replay}'")
        ),
        0
    );
    // Every model turn is recorded as in a live run, with the same token counts.
    let turns = |run: &str| -> (i64, i64) {
        (
            q(
                &db,
                &format!(
                    "SELECT count(*) FROM executions WHERE run_id = '{run}' AND tool_name = 'llm'"
                ),
            ),
            q(
                &db,
                &format!("SELECT prompt_tokens FROM runs WHERE run_id = '{run}'"),
            ),
        )
    };
    assert_eq!(turns(&replay), turns(&recorded));
    let settings: Value = serde_json::from_str(&q::<String>(
        &db,
        &format!("SELECT settings_json FROM runs WHERE run_id = '{replay}'"),
    ))
    .unwrap();
    assert_eq!(settings["replay"], recorded.as_str());
    assert!(settings.get("llm_url").is_none(), "{settings}");
    // `show` says so too.
    let shown: Value = serde_json::from_str(&stdout(&t.run(&["show", &replay, "--json"]))).unwrap();
    assert_eq!(shown["run"]["replay_of"], recorded.as_str());
    let shown = stdout(&t.run(&["show", &replay]));
    assert!(shown.contains(&format!("replay of {recorded}")), "{shown}");
}

#[test]
fn a_changed_file_stops_the_replay_at_the_first_differing_turn_and_lenient_goes_on() {
    let t = TestDir::new();
    let plan = plan(&t, FIX);
    let recorded = record(&t, &plan);
    reset(&t);
    t.file("README.md", "add() must subtract.\n");
    let out = run(&t, &plan, &recorded, &[]);
    assert_eq!(code(&out), 37, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(
            "step `look`, turn 2: the tool result of `file_read` differs: recorded \"add() must \
             add"
        ),
        "{err}"
    );
    assert!(err.contains("now \"add() must subtract"), "{err}");
    let replay = newest_run(&t);
    let db = t.db();
    assert_eq!(
        q::<String>(
            &db,
            &format!("SELECT error_code FROM steps WHERE run_id = '{replay}' AND step_id = 'look'")
        ),
        "replay_diverged"
    );
    assert_eq!(
        q::<i64>(
            &db,
            &format!("SELECT exit_code FROM runs WHERE run_id = '{replay}'")
        ),
        37
    );
    assert_ne!(
        q::<String>(
            &db,
            &format!("SELECT status FROM steps WHERE run_id = '{replay}' AND step_id = 'fix'")
        ),
        "completed"
    );
    assert_eq!(
        t.read("src/lib.rs"),
        LIB,
        "the step after the divergence ran"
    );
    // The event stream says so too.
    let failed: Vec<Value> = events(&out)
        .into_iter()
        .filter(|e| e["type"] == "step_failed" && e["step_id"] == "look")
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["error_code"], "replay_diverged");

    // Lenient: answered by turn order, each divergence recorded on its turn.
    let out = run(&t, &plan, &recorded, &["--replay-lenient"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("1 request(s) differed"),
        "{}",
        stderr(&out)
    );
    assert_eq!(t.read("src/lib.rs"), FIXED);
    let lenient = newest_run(&t);
    let db = t.db();
    let warnings: Vec<String> = db
        .prepare(
            "SELECT e.step_id || ' ' || e.turn || ' ' || a.content FROM artifacts a
             JOIN executions e USING (execution_id)
             WHERE e.run_id = ?1 AND e.tool_name = 'llm' AND a.artifact_type = 'warnings'",
        )
        .unwrap()
        .query_map([&lenient], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("look 2 replay divergence (--replay-lenient): step `look`, turn 2"),
        "{warnings:?}"
    );
    assert_eq!(
        q::<String>(
            &db,
            &format!("SELECT replay_of FROM runs WHERE run_id = '{lenient}'")
        ),
        recorded
    );
}

#[test]
fn an_edited_plan_or_an_unreplayable_record_is_refused_before_anything_runs() {
    let t = TestDir::new();
    let original = plan(&t, FIX);
    let recorded = record(&t, &original);
    reset(&t);

    // An agent step's instruction changed.
    let edited = plan(&t, "Make add() in src/lib.rs multiply.");
    t.approve(&edited);
    let before = runs(&t);
    let out = run(&t, &edited, &recorded, &[]);
    assert_refused(&t, &out, before, &["step `fix`", "instruction changed"]);

    // A step the recorded run asked the model for is no agent step any more.
    let edited = t.plan(
        "replay.json",
        &json!({"plan_id": "replay", "steps": [
            {"step_id": "look", "tool": "file_read", "arguments": {"path": "README.md"}},
            {"step_id": "fix", "tool": "agent", "arguments": {
                "instruction": FIX, "tools": ["file_read", "file_edit"], "max_turns": 5}}]}),
    );
    t.approve(&edited);
    let out = run(&t, &edited, &recorded, &[]);
    assert_refused(
        &t,
        &out,
        before,
        &["step `look` is not an agent step in the plan (tool `file_read`)"],
    );

    // Back to the recorded plan: the record itself is damaged in three ways, each named.
    let original = plan(&t, FIX);
    t.approve(&original);
    let db = t.db();
    let response_of = |step: &str, turn: u32| -> String {
        q(
            &db,
            &format!(
                "SELECT execution_id FROM executions WHERE run_id = '{recorded}' AND step_id = \
                 '{step}' AND tool_name = 'llm' AND turn = {turn}"
            ),
        )
    };
    let (fix2, look1) = (response_of("fix", 2), response_of("look", 1));
    db.execute(
        "UPDATE artifacts SET truncated = 1 WHERE execution_id = ?1 AND artifact_type = 'response'",
        [&fix2],
    )
    .unwrap();
    db.execute(
        "UPDATE artifacts SET content = substr(content, 1, 40) WHERE execution_id = ?1 AND \
         artifact_type = 'response'",
        [&look1],
    )
    .unwrap();
    // As a run recorded before what agent steps were asked was kept.
    db.execute(
        "UPDATE steps SET instruction_sha256 = NULL WHERE run_id = ?1 AND step_id = 'fix'",
        [&recorded],
    )
    .unwrap();
    let out = run(&t, &original, &recorded, &[]);
    assert_refused(
        &t,
        &out,
        before,
        &[
            "step `fix`, turn 2: the recorded response (or request) was truncated",
            "step `look`, turn 1: the recorded response cannot be read",
            "step `fix`: run ",
            "database version before 13",
        ],
    );
    // A run id that does not exist.
    let out = run(&t, &original, "0000dead", &[]);
    assert_refused(&t, &out, before, &["run 0000dead not found"]);
    // Flags that need each other.
    let out = t.run(&["run", original.to_str().unwrap(), "--replay-lenient"]);
    assert_refused(&t, &out, before, &["--replay-lenient needs --replay"]);
    let out = t.run(&["export", &recorded]);
    assert_refused(&t, &out, before, &["needs --replay FILE"]);
}

/// A recorded run whose settings or a model turn's arguments no longer read (changed outside
/// acode-run) is refused by name: neither is taken for a missing value, which would replay with
/// another tool protocol or model than the recording's.
#[test]
fn unreadable_settings_or_turn_arguments_are_refused_by_name() {
    let t = TestDir::new();
    let original = plan(&t, FIX);
    let recorded = record(&t, &original);
    reset(&t);
    let before = runs(&t);
    let db = t.db();
    let settings: String = q(
        &db,
        &format!("SELECT settings_json FROM runs WHERE run_id = '{recorded}'"),
    );
    db.execute(
        "UPDATE runs SET settings_json = '{\"tool_protocol\": ' WHERE run_id = ?1",
        [&recorded],
    )
    .unwrap();
    let out = run(&t, &original, &recorded, &[]);
    assert_refused(
        &t,
        &out,
        before,
        &[&format!("the settings of run {recorded} cannot be read")],
    );
    db.execute(
        "UPDATE runs SET settings_json = ?2 WHERE run_id = ?1",
        [&recorded, &settings],
    )
    .unwrap();
    let turn: String = q(
        &db,
        &format!(
            "SELECT execution_id FROM executions WHERE run_id = '{recorded}' AND \
             tool_name = 'llm' AND step_id = 'fix' AND turn = 1"
        ),
    );
    db.execute(
        "UPDATE executions SET arguments_json = 'not json' WHERE execution_id = ?1",
        [&turn],
    )
    .unwrap();
    let out = run(&t, &original, &recorded, &[]);
    assert_refused(
        &t,
        &out,
        before,
        &[&format!(
            "the arguments of model turn {turn} cannot be read"
        )],
    );
}

#[test]
fn an_exported_file_replays_and_a_damaged_one_is_refused_by_name() {
    let t = TestDir::new();
    let plan = plan(&t, FIX);
    let recorded = record(&t, &plan);
    reset(&t);
    let file = t.root.join("replay.jsonl");
    let out = t.run(&["export", &recorded, "--replay", file.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("wrote 5 model turn(s) of 2 agent step(s)"),
        "{}",
        stderr(&out)
    );
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 6, "{text}");
    let header: Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(header["format"], "acode-run-replay");
    assert_eq!(header["run_id"], recorded.as_str());
    // In plan order: `look`'s turns, then `fix`'s.
    let first: Value = serde_json::from_str(lines[1]).unwrap();
    assert_eq!(
        (&first["step"], &first["turn"]),
        (&json!("look"), &json!(1))
    );

    // Replayed from the file, with no database record of the run needed beyond the file.
    let out = run(&t, &plan, file.to_str().unwrap(), &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(t.read("src/lib.rs"), FIXED);
    let replay = newest_run(&t);
    assert_eq!(calls(&t, &replay), calls(&t, &recorded));
    assert_eq!(
        q::<String>(
            &t.db(),
            &format!("SELECT replay_of FROM runs WHERE run_id = '{replay}'")
        ),
        recorded
    );
    reset(&t);

    let before = runs(&t);
    let damaged = |name: &str, text: String| -> PathBuf {
        let p = t.root.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    // A malformed line.
    let mut cut = lines.clone();
    let half = &lines[3][..lines[3].len() / 2];
    cut[3] = half;
    let p = damaged("malformed.jsonl", cut.join("\n"));
    let out = run(&t, &plan, p.to_str().unwrap(), &[]);
    assert_refused(
        &t,
        &out,
        before,
        &["malformed.jsonl", "line 4: not valid JSON"],
    );
    // A duplicated turn.
    let mut twice = lines.clone();
    twice.push(lines[2]);
    let p = damaged("twice.jsonl", twice.join("\n"));
    let out = run(&t, &plan, p.to_str().unwrap(), &[]);
    assert_refused(
        &t,
        &out,
        before,
        &["line 7: a duplicated turn: step `look`, turn 2 is also on line 3"],
    );
    // A turn for a step that does not exist.
    let mut stranger = lines.clone();
    let mut turn: Value = serde_json::from_str(lines[5]).unwrap();
    turn["step"] = json!("deploy");
    turn["turn"] = json!(1);
    let moved = turn.to_string();
    stranger[5] = &moved;
    let p = damaged("stranger.jsonl", stranger.join("\n"));
    let out = run(&t, &plan, p.to_str().unwrap(), &[]);
    assert_refused(
        &t,
        &out,
        before,
        &["line 6): a turn for step `deploy`, which the plan does not have"],
    );
    // A file that is not there.
    let missing = t.root.join("missing.jsonl");
    let out = run(&t, &plan, missing.to_str().unwrap(), &[]);
    assert_refused(&t, &out, before, &["missing.jsonl"]);
}

#[test]
fn an_exported_file_does_not_hold_a_secret_the_model_saw() {
    const SECRET: &str = "plainsecretvalue-replay-4321";
    let t = TestDir::new();
    t.file("notes.txt", &format!("deploy with {SECRET}\n"));
    let plan = t.plan(
        "secret.json",
        &json!({"plan_id": "secret", "variables": {"deploy": ""}, "secrets": ["deploy"],
            "steps": [{"step_id": "look", "tool": "agent", "arguments": {
                "instruction": "Read notes.txt; deploy to ${deploy}.",
                "tools": ["file_read"], "max_turns": 3}}]}),
    );
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_tool_calls(&[("file_read", json!({"path": "notes.txt"}))]),
        // The model repeats the secret in its answer: the record holds it redacted too.
        ScriptedResponse::chat_text(&format!("It says to deploy with {SECRET}.")),
    ]);
    let var = format!("deploy={SECRET}");
    let out = t.approve_and_run_with_model(&plan, &server, &["--var", &var]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    drop(server);
    let recorded: String = q(&t.db(), "SELECT run_id FROM runs");
    let file = t.root.join("secret.jsonl");
    let out = t.run(&["export", &recorded, "--replay", file.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(!text.contains(SECRET), "{text}");
    assert!(!text.contains("secret-replay"), "{text}");
    // The model was shown that something was there, and the file still replays.
    assert!(text.contains("[REDACTED]"), "{text}");
    let out = run(&t, &plan, file.to_str().unwrap(), &["--var", &var]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!stdout(&out).contains(SECRET) && !stderr(&out).contains(SECRET));
}

#[test]
fn resuming_an_interrupted_replay_keeps_replaying() {
    let t = TestDir::new();
    t.file(
        "slow.py",
        "import os, time\nos.makedirs('marks', exist_ok=True)\n\
         open('marks/started-' + str(os.getpid()), 'w').write('1')\ntime.sleep(3)\n",
    );
    let plan = t.plan(
        "slow.json",
        &json!({"plan_id": "slow", "steps": [
            {"step_id": "look", "tool": "agent", "arguments": {
                "instruction": "Read README.md and say what add() must do.",
                "tools": ["file_read"], "max_turns": 4}},
            {"step_id": "slow", "tool": "run_command", "arguments": {"command": "python3 slow.py"}},
            {"step_id": "fix", "tool": "agent", "arguments": {
                "instruction": FIX, "tools": ["file_read", "file_edit"], "max_turns": 5}}]}),
    );
    reset(&t);
    // There from the start, so the top-level entries every system prompt lists stay the same.
    std::fs::create_dir(t.ws.join("marks")).unwrap();
    let server = ScriptedServer::start(script());
    let out = t.approve_and_run_with_model(&plan, &server, &["--sandbox", "none"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    drop(server);
    let recorded: String = q(&t.db(), "SELECT run_id FROM runs");
    reset(&t);
    std::fs::remove_dir_all(t.ws.join("marks")).unwrap();
    std::fs::create_dir(t.ws.join("marks")).unwrap();

    // Killed while the command step runs, after `look` was replayed.
    let mut child = t
        .cmd()
        .args([
            "run",
            plan.to_str().unwrap(),
            "--replay",
            &recorded,
            "--sandbox",
            "none",
        ])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::fs::read_dir(t.ws.join("marks"))
        .unwrap()
        .next()
        .is_none()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the slow step never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SAFETY: SIGKILL to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
    let replay = newest_run(&t);
    assert_ne!(replay, recorded);
    assert_eq!(t.read("src/lib.rs"), LIB);

    let out = t.run(&[
        "resume",
        &replay,
        "--rerun-interrupted",
        "--sandbox",
        "none",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(t.read("src/lib.rs"), FIXED);
    let db = t.db();
    assert_eq!(
        q::<String>(
            &db,
            &format!("SELECT status || ' ' || replay_of FROM runs WHERE run_id = '{replay}'")
        ),
        format!("completed {recorded}")
    );
    let fix_calls = |run: &str| -> Vec<String> {
        calls(&t, run)
            .into_iter()
            .filter(|c| c.starts_with("fix "))
            .collect()
    };
    assert_eq!(fix_calls(&replay), fix_calls(&recorded));
    assert_eq!(fix_calls(&replay).len(), 2);
}

/// The committed fixture `plans/agent-demo.replay.jsonl` (the shipped agent-demo plan recorded
/// against `fixtures/llm/read_then_edit.json`) replays with no model: what the CI job of
/// docs/ci.md does on every pull request. With `ACODE_WRITE_REPLAY_FIXTURE=1` the fixture is
/// recorded and exported again first (after a deliberate change to what the agent is asked).
#[test]
fn the_committed_agent_demo_fixture_replays_without_a_model() {
    let repo = repo();
    let plan = repo.join("plans/agent-demo.json");
    let fixture = repo.join("plans/agent-demo.replay.jsonl");
    let demo = |t: &TestDir| {
        for file in ["Cargo.toml", "src/lib.rs"] {
            let text =
                std::fs::read_to_string(repo.join("fixtures/agent-demo").join(file)).unwrap();
            t.file(file, &text);
        }
    };
    if std::env::var_os("ACODE_WRITE_REPLAY_FIXTURE").is_some() {
        let t = TestDir::new();
        demo(&t);
        let script =
            ScriptedResponse::from_fixture(repo.join("fixtures/llm/read_then_edit.json")).unwrap();
        let server = ScriptedServer::start(script);
        let url = server.url();
        let out = t.run(&[
            "run",
            plan.to_str().unwrap(),
            "--llm-url",
            &url,
            "--model",
            "test-model",
        ]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let run_id: String = q(&t.db(), "SELECT run_id FROM runs");
        let out = t.run(&["export", &run_id, "--replay", fixture.to_str().unwrap()]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    }
    let t = TestDir::new();
    demo(&t);
    let out = t.run(&[
        "run",
        plan.to_str().unwrap(),
        "--replay",
        fixture.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        t.read("src/lib.rs").contains("a + b"),
        "{}",
        t.read("src/lib.rs")
    );
    let recorded = std::fs::read_to_string(&fixture).unwrap();
    let header: Value = serde_json::from_str(recorded.lines().next().unwrap()).unwrap();
    assert_eq!(
        q::<String>(&t.db(), "SELECT replay_of FROM runs"),
        header["run_id"].as_str().unwrap()
    );
}

#[test]
fn a_command_result_that_differs_is_named_and_a_recorded_server_failure_replays_as_one() {
    let t = TestDir::new();
    t.file("notes.txt", "version 1\n");
    let plan = t.plan(
        "cmd.json",
        &json!({"plan_id": "cmd", "steps": [
            {"step_id": "check", "tool": "agent", "arguments": {
                "instruction": "Print notes.txt with cat.", "tools": ["run_command"],
                "max_turns": 3}}]}),
    );
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_tool_calls(&[(
            "run_command",
            json!({"argv": ["cat", "notes.txt"]}),
        )]),
        ScriptedResponse::chat_text("It says version 1."),
    ]);
    let out = t.approve_and_run_with_model(&plan, &server, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    drop(server);
    let recorded: String = q(&t.db(), "SELECT run_id FROM runs");
    // The same workspace replays; a changed file is the tool result of `run_command`.
    let out = run(&t, &plan, &recorded, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    t.file("notes.txt", "version 2\n");
    let out = run(&t, &plan, &recorded, &[]);
    assert_eq!(code(&out), 37, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "step `check`, turn 2: the tool result of `run_command` differs: recorded \""
        ),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("version 1"), "{}", stderr(&out));

    // A run whose server failed a turn for good (after a retry) replays to the same failure.
    let t = TestDir::new();
    let plan = super::replay::plan(&t, FIX);
    reset(&t);
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_tool_calls(&[("file_read", json!({"path": "README.md"}))]),
        ScriptedResponse::text(500, "overloaded"),
        ScriptedResponse::text(500, "still overloaded"),
    ]);
    let out = t.approve_and_run_with_model(&plan, &server, &["--llm-retries", "1"]);
    assert_eq!(code(&out), 30, "{}", stderr(&out));
    drop(server);
    let recorded: String = q(&t.db(), "SELECT run_id FROM runs");
    let out = run(&t, &plan, &recorded, &[]);
    assert_eq!(code(&out), 30, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("still overloaded"),
        "{}",
        stderr(&out)
    );
    let replay = newest_run(&t);
    assert_eq!(calls(&t, &replay), calls(&t, &recorded));
    assert_eq!(
        q::<String>(
            &t.db(),
            &format!("SELECT error_code FROM steps WHERE run_id = '{replay}' AND step_id = 'look'")
        ),
        "llm_error"
    );
}

#[test]
fn a_react_run_replays_with_the_protocol_it_was_recorded_with() {
    let t = TestDir::new();
    reset(&t);
    let plan = t.plan(
        "react.json",
        &json!({"plan_id": "react", "steps": [
            {"step_id": "look", "tool": "agent", "arguments": {
                "instruction": "Read README.md and say what add() must do.",
                "tools": ["file_read"], "max_turns": 3}}]}),
    );
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_text(
            r#"{"thought": "read it", "action": "file_read", "action_input": {"path": "README.md"}}"#,
        ),
        ScriptedResponse::chat_text(r#"{"thought": "done", "final_answer": "It must add."}"#),
    ]);
    let out = t.approve_and_run_with_model(&plan, &server, &["--tool-protocol", "react"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    drop(server);
    let recorded: String = q(&t.db(), "SELECT run_id FROM runs");
    // No --tool-protocol: the recorded run's is used, so the requests are the same.
    let out = run(&t, &plan, &recorded, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let replay = newest_run(&t);
    assert_eq!(calls(&t, &replay), calls(&t, &recorded));
    // A changed file is named as the result of the action the model asked for.
    t.file("README.md", "add() must subtract.\n");
    let out = run(&t, &plan, &recorded, &[]);
    assert_eq!(code(&out), 37, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("step `look`, turn 2: the tool result of `file_read` differs"),
        "{}",
        stderr(&out)
    );
}

/// A replay that no longer reproduces its recording ends the run with exit 37 even in a step
/// whose `on_failure` is `continue`: the plan tolerates the step's own failures, not a replay
/// that tests nothing. The step is failed (not tolerated) and the steps after it do not run.
#[test]
fn a_divergence_ends_the_run_with_exit_37_whatever_the_steps_on_failure_says() {
    let t = TestDir::new();
    let plan = t.plan(
        "tolerant.json",
        &json!({"plan_id": "tolerant", "steps": [
            {"step_id": "look", "tool": "agent", "on_failure": "continue", "arguments": {
                "instruction": "Read README.md and say what add() must do.",
                "tools": ["file_read"], "max_turns": 4}},
            {"step_id": "after", "tool": "file_write", "on_failure": "continue",
             "arguments": {"path": "after.txt", "contents": "ran\n"}}]}),
    );
    reset(&t);
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_tool_calls(&[("file_read", json!({"path": "README.md"}))]),
        ScriptedResponse::chat_text("add() must add."),
    ]);
    let out = t.approve_and_run_with_model(&plan, &server, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    drop(server);
    let recorded: String = q(&t.db(), "SELECT run_id FROM runs");
    std::fs::remove_file(t.ws.join("after.txt")).unwrap();
    // The same workspace replays, exit 0.
    let out = run(&t, &plan, &recorded, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    std::fs::remove_file(t.ws.join("after.txt")).unwrap();

    t.file("README.md", "add() must subtract.\n");
    let out = run(&t, &plan, &recorded, &[]);
    assert_eq!(code(&out), 37, "{}", stderr(&out));
    let replay = newest_run(&t);
    let db = t.db();
    assert_eq!(
        q::<i64>(
            &db,
            &format!("SELECT exit_code FROM runs WHERE run_id = '{replay}'")
        ),
        37
    );
    let failed: Vec<Value> = events(&out)
        .into_iter()
        .filter(|e| e["type"] == "step_failed" && e["step_id"] == "look")
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["error_code"], "replay_diverged");
    assert_ne!(failed[0]["tolerated"], true, "{:?}", failed[0]);
    let finished: Vec<Value> = events(&out)
        .into_iter()
        .filter(|e| e["type"] == "run_finished")
        .collect();
    assert_eq!(finished[0]["exit_code"], 37, "{:?}", finished[0]);
    assert_eq!(
        finished[0]["tolerated"].as_u64().unwrap_or(0),
        0,
        "{:?}",
        finished[0]
    );
    assert!(!t.ws.join("after.txt").exists(), "the step after it ran");

    // Lenient: a divergence answered anyway is no failure, and `continue` changes nothing.
    let out = run(&t, &plan, &recorded, &["--replay-lenient"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// The crate docs/ci.md's replay recipe records: `add()` subtracts, its README says it must add.
const RECIPE_MANIFEST: &str =
    "[package]\nname = \"adder\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n";
const RECIPE_TEST: &str = "\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn adds() {\n        \
                           assert_eq!(super::add(2, 3), 5);\n    }\n}\n";

/// The plan of the recipe: one agent step that reads the README and src/lib.rs, fixes `add` and
/// is verified by `cargo test`.
fn recipe_plan() -> Value {
    json!({"plan_id": "change", "steps": [
        {"step_id": "fix", "tool": "agent", "arguments": {
            "instruction": "Read README.md, then fix add() in src/lib.rs with a minimal edit.",
            "tools": ["file_read", "file_edit"], "max_turns": 6},
         "verify": {"command": "cargo test --quiet --offline", "max_cycles": 1}}]})
}

fn recipe_script() -> Vec<ScriptedResponse> {
    vec![
        ScriptedResponse::chat_tool_calls(&[("file_read", json!({"path": "README.md"}))]),
        ScriptedResponse::chat_tool_calls(&[("file_read", json!({"path": "src/lib.rs"}))]),
        ScriptedResponse::chat_tool_calls(&[(
            "file_edit",
            json!({"path": "src/lib.rs", "old": "a - b", "new": "a + b"}),
        )]),
        ScriptedResponse::chat_text("add() adds now."),
    ]
}

/// `git` in `dir` with no configuration of the machine's, asserting success.
fn git_in(t: &TestDir, dir: &Path, args: &[&str]) {
    let out = raw_git(t, dir, args);
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The binary in `dir` (the workspace is the current directory, as in CI), stdout to `stdout`
/// when given (`> acode-events.jsonl`).
fn acode_in(t: &TestDir, dir: &Path, args: &[&str], stdout: Option<&Path>) -> Output {
    let mut c = t.cmd();
    c.current_dir(dir).args(args);
    if let Some(file) = stdout {
        c.stdout(std::fs::File::create(file).unwrap());
    }
    c.output().unwrap()
}

/// docs/ci.md's replay recipe, exactly: record in a clean checkout (a model answers), export the
/// model traffic beside the plan and commit it; then, as a CI job does, build, leave caches and
/// outputs at the top level, restore a cache, move the checkout, and replay with the job's own
/// outputs (`--jsonl > acode-events.jsonl`, `--junit`, `--report-html`) — it completes, with no
/// model. A file the agent read, changed, makes it diverge, naming the step, the turn and the file.
#[test]
fn the_ci_recipe_replays_after_a_build_a_cache_restore_outputs_and_a_moved_checkout() {
    let t = TestDir::new();
    // The repository: a crate, its README, the approved plan, a .gitignore for its coverage.
    let origin = t.root.join("origin");
    std::fs::create_dir_all(origin.join("src")).unwrap();
    std::fs::create_dir_all(origin.join("plans")).unwrap();
    std::fs::write(origin.join("Cargo.toml"), RECIPE_MANIFEST).unwrap();
    std::fs::write(origin.join("src/lib.rs"), format!("{LIB}{RECIPE_TEST}")).unwrap();
    std::fs::write(origin.join("README.md"), README).unwrap();
    std::fs::write(origin.join(".gitignore"), "/coverage/\n").unwrap();
    std::fs::write(
        origin.join("plans/change.json"),
        serde_json::to_string_pretty(&recipe_plan()).unwrap(),
    )
    .unwrap();
    git_in(&t, &origin, &["init", "-q"]);
    let out = acode_in(
        &t,
        &origin,
        &["approve", "plans/change.json", "--by", "ci"],
        None,
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    git_in(&t, &origin, &["add", "-A"]);
    git_in(&t, &origin, &["commit", "-qm", "the plan"]);

    // Record once, locally or nightly, in a clean checkout; export and commit the fixture.
    let checkout = t.root.join("checkout");
    git_in(
        &t,
        &t.root,
        &["clone", "-q", origin.to_str().unwrap(), "checkout"],
    );
    let server = ScriptedServer::start(recipe_script());
    let url = server.url();
    let out = acode_in(
        &t,
        &checkout,
        &[
            "run",
            "plans/change.json",
            "--llm-url",
            &url,
            "--model",
            "test-model",
        ],
        None,
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(server.remaining(), 0);
    drop(server);
    let db = rusqlite::Connection::open(checkout.join(".acode/executions.db")).unwrap();
    let recorded: String = q(&db, "SELECT run_id FROM runs");
    let out = acode_in(
        &t,
        &checkout,
        &["export", &recorded, "--replay", "plans/change.replay.jsonl"],
        None,
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    git_in(&t, &checkout, &["checkout", "--", "."]);
    git_in(&t, &checkout, &["add", "plans/change.replay.jsonl"]);
    git_in(&t, &checkout, &["commit", "-qm", "the replay fixture"]);

    // What a CI job does to the workspace before the replay: build, caches and outputs at the
    // top level, a cache restored, the checkout moved.
    let status = std::process::Command::new("cargo")
        .args(["build", "--quiet", "--offline"])
        .current_dir(&checkout)
        .status()
        .unwrap();
    assert!(status.success(), "cargo build");
    assert!(checkout.join("target").is_dir() && checkout.join("Cargo.lock").is_file());
    for dir in ["__pycache__", ".pytest_cache", "coverage"] {
        std::fs::create_dir_all(checkout.join(dir)).unwrap();
        std::fs::write(checkout.join(dir).join("x"), "generated").unwrap();
    }
    // A cache restored from elsewhere (actions/cache), with the path it was saved from.
    let saved = t.root.join("saved-cache/node_modules/left-pad");
    std::fs::create_dir_all(&saved).unwrap();
    std::fs::write(saved.join("index.js"), "module.exports = 1;\n").unwrap();
    copy_tree(
        &t.root.join("saved-cache/node_modules"),
        &checkout.join("node_modules"),
    );
    let ci = t.root.join("ci/work/repo");
    std::fs::create_dir_all(ci.parent().unwrap()).unwrap();
    std::fs::rename(&checkout, &ci).unwrap();

    // The replay step of the pull-request job, its outputs at the top level.
    let job = [
        "run",
        "plans/change.json",
        "--replay",
        "plans/change.replay.jsonl",
        "--jsonl",
        "--junit",
        "acode-report.xml",
        "--report-html",
        "acode-report.html",
    ];
    let events_file = ci.join("acode-events.jsonl");
    let out = acode_in(&t, &ci, &job, Some(&events_file));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        std::fs::read_to_string(ci.join("src/lib.rs"))
            .unwrap()
            .contains("a + b")
    );
    // Again, in the same checkout (its sources reset, the outputs of the first replay there).
    git_in(&t, &ci, &["checkout", "--", "src"]);
    let out = acode_in(&t, &ci, &job, Some(&events_file));
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    // A file the agent read, changed: diverges, naming the step, the turn and the file.
    git_in(&t, &ci, &["checkout", "--", "src"]);
    let lib = std::fs::read_to_string(ci.join("src/lib.rs")).unwrap();
    std::fs::write(ci.join("src/lib.rs"), format!("// Adds.\n{lib}")).unwrap();
    let out = acode_in(&t, &ci, &job, Some(&events_file));
    assert_eq!(code(&out), 37, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("step `fix`, turn 3: the tool result of `file_read` differs: recorded \""),
        "{err}"
    );
    assert!(err.contains("(file src/lib.rs)"), "{err}");
    let events = std::fs::read_to_string(&events_file).unwrap();
    assert!(events.contains("replay_diverged"), "{events}");
}

/// A replay run from another directory than the recorded workspace (the workspace is the current
/// directory) says so at the first turn: the recorded entries are missing, and the line names
/// both workspaces and `--workspace`.
#[test]
fn a_replay_from_the_wrong_directory_says_the_workspace_differs() {
    let t = TestDir::new();
    let plan = plan(&t, FIX);
    let recorded = record(&t, &plan);
    reset(&t);
    let file = t.root.join("fixture.replay.jsonl");
    let out = t.run(&["export", &recorded, "--replay", file.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // From the workspace's parent directory.
    let out = t
        .cmd()
        .current_dir(&t.root)
        .args(["run", plan.to_str().unwrap(), "--replay"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(code(&out), 37, "{}", stderr(&out));
    let err = stderr(&out);
    let line = err
        .lines()
        .find(|l| l.contains("step `look`, turn 1"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        line.contains(
            "the system prompt differs only in the workspace listing: the workspace differs \
             from the recorded one: "
        ),
        "{line}"
    );
    assert!(line.contains("`README.md`, `src/` missing"), "{line}");
    assert!(
        line.contains(&format!(
            "The recording ran in {}, this replay in {}",
            t.ws.display(),
            t.root.display()
        )),
        "{line}"
    );
    assert!(line.contains("--workspace DIR"), "{line}");
    assert_eq!(t.read("src/lib.rs"), LIB, "nothing ran in the workspace");
    // With --workspace it replays.
    let out = t
        .cmd()
        .current_dir(&t.root)
        .args(["run", plan.to_str().unwrap(), "--workspace"])
        .arg(&t.ws)
        .arg("--replay")
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(t.read("src/lib.rs"), FIXED);
}

/// The shipped `plans/agent-demo.json` replays from its committed fixture again and again in the
/// same checkout: its verify command's `target/` and `Cargo.lock`, the events redirected to a
/// file and the JUnit report of the replay before are not part of what the model is told.
#[test]
fn the_agent_demo_plan_replays_again_and_again_in_the_same_checkout() {
    let repo = repo();
    let t = TestDir::new();
    let lib = std::fs::read_to_string(repo.join("fixtures/agent-demo/src/lib.rs")).unwrap();
    t.file(
        "Cargo.toml",
        &std::fs::read_to_string(repo.join("fixtures/agent-demo/Cargo.toml")).unwrap(),
    );
    let plan = repo.join("plans/agent-demo.json");
    let fixture = repo.join("plans/agent-demo.replay.jsonl");
    for round in 1..=3 {
        // The sources as committed (`git checkout -- src`), the rest left as it is.
        t.file("src/lib.rs", &lib);
        let out = acode_in(
            &t,
            &t.ws,
            &[
                "run",
                plan.to_str().unwrap(),
                "--replay",
                fixture.to_str().unwrap(),
                "--jsonl",
                "--junit",
                "report.xml",
            ],
            Some(&t.ws.join("ev.jsonl")),
        );
        assert_eq!(code(&out), 0, "round {round}: {}", stderr(&out));
        assert!(t.read("src/lib.rs").contains("a + b"), "round {round}");
    }
    assert!(t.ws.join("target").is_dir() && t.ws.join("Cargo.lock").is_file());
}

/// A command's private temporary directory has a new random name in every run (under Landlock
/// `…/acode-run-UUID/cmd-HEX`, in bwrap `/tmp/acode-PID-N`, without a sandbox the run's own):
/// a tool result naming it replays in every mode (docs/replay.md, normalised to `<tmp>`).
#[test]
fn a_tool_result_naming_the_commands_temporary_directory_replays_in_every_mode() {
    need_bwrap();
    for mode in ["bwrap", "landlock", "none"] {
        let t = TestDir::new();
        t.file(
            "acode-policy.json",
            &json!({"auto_approve_commands": ["python3"]}).to_string(),
        );
        let plan = t.plan(
            "tmp.json",
            &json!({"plan_id": "tmp", "steps": [
                {"step_id": "where", "tool": "agent", "arguments": {
                    "instruction": "Print your TMPDIR.", "tools": ["run_command"],
                    "max_turns": 3}}]}),
        );
        let print = "import os; t = os.environ['TMPDIR']; print(t, os.path.join(t, 'out.txt'))";
        let server = ScriptedServer::start(vec![
            ScriptedResponse::chat_tool_calls(&[(
                "run_command",
                json!({"argv": ["python3", "-c", print]}),
            )]),
            ScriptedResponse::chat_text("Printed."),
        ]);
        let out = t.approve_and_run_with_model(&plan, &server, &["--sandbox", mode]);
        assert_eq!(code(&out), 0, "{mode}: {}", stderr(&out));
        drop(server);
        let recorded: String = q(&t.db(), "SELECT run_id FROM runs");
        let printed = stdout_of(&t, "where");
        assert!(printed.contains("acode-"), "{mode}: {printed}");
        let out = run(&t, &plan, &recorded, &["--sandbox", mode]);
        assert_eq!(code(&out), 0, "{mode}: {}", stderr(&out));
    }
}
