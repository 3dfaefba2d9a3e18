//! Plan `intent`: a read/query/explain plan changes nothing, shown in preview, asked of the planner.

use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};
use serde_json::json;

use crate::harness::{TestDir, code, stderr, stdout};

#[test]
fn read_intent_plan_with_writing_steps_fails_validation_naming_each_step() {
    let t = TestDir::new();
    t.file("a.txt", "x\n");
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "look", "intent": "read", "steps": [
            {"step_id": "ok-read", "tool": "file_read", "arguments": {"path": "a.txt"}},
            {"step_id": "sneaky-write", "tool": "file_write", "arguments": {"path": "a.txt", "contents": "y\n"}},
            {"step_id": "cmd", "tool": "run_command", "arguments": {"argv": ["true"]}},
            {"step_id": "check", "tool": "lsp_check", "arguments": {"path": "."}},
            {"step_id": "bot", "tool": "agent",
             "arguments": {"instruction": "look", "tools": ["file_read", "file_edit"]}},
            {"step_id": "reader-bot", "tool": "agent",
             "arguments": {"instruction": "look", "tools": ["file_read", "file_search"]}}]}),
    );
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let err = stderr(&out);
    for needle in [
        "steps[1].tool",
        "\"sneaky-write\" uses file_write",
        "steps[2].tool",
        "\"cmd\" runs a command",
        "steps[3].tool",
        "steps[4].arguments.tools",
        "agent step given file_edit",
        "intent is \"read\"",
    ] {
        assert!(err.contains(needle), "{needle:?} in {err}");
    }
    assert!(!err.contains("steps[0]"), "{err}");
    assert!(!err.contains("reader-bot"), "{err}");
    assert_eq!(t.read("a.txt"), "x\n");

    // The same steps under "mutate" (or no intent) are a valid plan.
    let text = std::fs::read_to_string(&plan)
        .unwrap()
        .replace("\"read\"", "\"mutate\"");
    let mutate = t.plan_text("m.json", &text);
    let out = t.run(&["validate", mutate.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[test]
fn unknown_or_wrongly_cased_intent_is_a_validation_error() {
    let t = TestDir::new();
    for bad in ["READ", "delete"] {
        let plan = t.plan(
            "p.json",
            &json!({"plan_id": "p", "intent": bad, "steps": [
                {"step_id": "r", "tool": "file_glob", "arguments": {"pattern": "*"}}]}),
        );
        let out = t.run(&["validate", plan.to_str().unwrap()]);
        assert_eq!(code(&out), 2, "{}", stderr(&out));
        assert!(
            stderr(&out).contains("plan.intent")
                && stderr(&out).contains("read, query, explain, mutate"),
            "{}",
            stderr(&out)
        );
    }
}

#[test]
fn preview_shows_the_intent() {
    let t = TestDir::new();
    t.file("a.txt", "x\n");
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "p", "intent": "query", "steps": [
            {"step_id": "r", "tool": "file_search", "arguments": {"pattern": "x"}}]}),
    );
    let out = t.run(&["preview", plan.to_str().unwrap(), "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["intent"], "query");
    let out = t.run(&["preview", plan.to_str().unwrap()]);
    assert!(
        stdout(&out).contains("intent: query (changes nothing)"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn draft_intent_read_asks_for_and_enforces_a_read_plan() {
    let t = TestDir::new();
    t.file("README.md", "a project\n");
    let writing = json!({"plan_id": "look", "steps": [
        {"step_id": "w", "tool": "file_write", "arguments": {"path": "notes.txt", "contents": "x"}}]});
    let reading = json!({"plan_id": "look", "steps": [
        {"step_id": "r", "tool": "file_read", "arguments": {"path": "README.md"}}]});
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_text(&format!("```json\n{writing}\n```")),
        ScriptedResponse::chat_text(&format!("```json\n{reading}\n```")),
    ]);
    let out_path = t.root.join("drafted.json");
    let out = t
        .cmd()
        .args([
            "draft",
            "What does the README say?",
            "--intent",
            "read",
            "-o",
            out_path.to_str().unwrap(),
            "--llm-url",
            &server.url(),
            "--model",
            "m",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out_path).unwrap()).unwrap();
    assert_eq!(written["intent"], "read");
    assert_eq!(written["steps"][0]["tool"], "file_read");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let first = requests[0].body["messages"][1]["content"].as_str().unwrap();
    assert!(first.contains("The plan's intent is \"read\""), "{first}");
    // The writing plan went back to the model as a validation problem naming its step.
    let repair = requests[1].body["messages"][1]["content"].as_str().unwrap();
    assert!(
        repair.contains("steps[0].tool") && repair.contains("intent is \"read\""),
        "{repair}"
    );
    let bad = t
        .cmd()
        .args(["draft", "x", "--intent", "write"])
        .output()
        .unwrap();
    assert_eq!(code(&bad), 2, "{}", stderr(&bad));
    assert!(stderr(&bad).contains("unknown intent"), "{}", stderr(&bad));
}

#[test]
fn the_reviewer_is_told_the_plans_intent() {
    let t = TestDir::new();
    t.file("a.txt", "x\n");
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "look", "description": "Read a.txt", "intent": "read", "steps": [
            {"step_id": "r", "tool": "file_read", "arguments": {"path": "a.txt"}}]}),
    );
    let run = t.approve_and_run(&plan, &[]);
    assert_eq!(code(&run), 0, "{}", stderr(&run));
    let run_id: String = crate::harness::q(&t.db(), "SELECT run_id FROM runs");
    let verdict = json!({"verdict": "approve", "summary": "read it", "findings": []});
    let server = ScriptedServer::start(vec![ScriptedResponse::chat_text(&verdict.to_string())]);
    let out = t
        .cmd()
        .args([
            "review",
            &run_id,
            "--llm-url",
            &server.url(),
            "--model",
            "m",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let context = server.requests()[0].body["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        context.contains("DECLARED INTENT: read (the plan promised to change nothing"),
        "{context}"
    );
}
