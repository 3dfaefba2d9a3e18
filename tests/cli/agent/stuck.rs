//! Stuck detection (SPEC §7, issue 10): the real binary against the scripted LLM server.

use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};
use serde_json::json;

use crate::harness::*;

fn run_with(t: &TestDir, server: &ScriptedServer, max_turns: u64) -> std::process::Output {
    run_with_args(t, server, max_turns, &[])
}

fn run_with_args(
    t: &TestDir,
    server: &ScriptedServer,
    max_turns: u64,
    extra: &[&str],
) -> std::process::Output {
    let plan = t.plan(
        "agent.json",
        &json!({"plan_id": "agent", "steps": [
        {"step_id": "fix", "tool": "agent", "arguments": {
            "instruction": "Read it.", "tools": ["file_read"], "max_turns": max_turns}}]}),
    );
    let url = server.url();
    let mut args = vec!["--llm-url", &url, "--model", "m", "--jsonl"];
    args.extend_from_slice(extra);
    t.approve_and_run(&plan, &args)
}

#[test]
fn the_same_call_three_times_is_stuck_after_three_turns_not_ten() {
    let t = TestDir::new();
    t.file("a.txt", "hello\n");
    // Ten identical calls scripted (keys in a different order each time: still the same call).
    let script: Vec<_> = (0..10)
        .map(|i| {
            let args = if i % 2 == 0 {
                json!({"path": "a.txt", "offset": 1})
            } else {
                json!({"offset": 1, "path": "a.txt"})
            };
            ScriptedResponse::chat_tool_calls(&[("file_read", args)])
        })
        .collect();
    let server = ScriptedServer::start(script);
    let out = run_with(&t, &server, 10);
    assert_eq!(code(&out), 31, "{}", stderr(&out));
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "three turns, not ten");

    // The second and third results carry the note; the first does not.
    let last_tool = |i: usize| -> String {
        requests[i].body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .find(|m| m["role"] == "tool")
            .unwrap()["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(last_tool(1).contains("hello"), "{}", last_tool(1));
    assert!(
        !last_tool(1).contains("you already called"),
        "{}",
        last_tool(1)
    );
    assert!(
        last_tool(2).contains("you already called file_read")
            && last_tool(2).contains("Do something else or answer"),
        "{}",
        last_tool(2)
    );

    let db = t.db();
    assert_eq!(q::<String>(&db, "SELECT error_code FROM steps"), "stuck");
    let message: String = q(&db, "SELECT error_message FROM steps");
    assert!(message.contains("3 times in a row"), "{message}");
    assert!(message.contains("2 repeated call(s)"), "{message}");
    assert_eq!(
        q::<i64>(&db, "SELECT count(*) FROM executions WHERE tool_name='llm'"),
        3
    );
    assert_eq!(
        q::<i64>(
            &db,
            "SELECT count(*) FROM executions WHERE tool_name='file_read'"
        ),
        3
    );
    let events = events(&out);
    let failed = events
        .iter()
        .find(|e| e["type"] == "step_failed")
        .expect("step_failed event");
    assert_eq!(failed["error_code"], "stuck", "{failed}");

    // `show` makes the count visible.
    let run_id: String = q(&db, "SELECT run_id FROM runs");
    let shown = t.run(&["show", &run_id]);
    assert!(
        stderr(&shown).contains("[stuck]") || stdout(&shown).contains("[stuck]"),
        "{}{}",
        stdout(&shown),
        stderr(&shown)
    );
}

#[test]
fn repeats_that_are_not_three_in_a_row_only_get_the_note() {
    let t = TestDir::new();
    t.file("a.txt", "aaa\n");
    t.file("b.txt", "bbb\n");
    let read = |p: &str| ScriptedResponse::chat_tool_calls(&[("file_read", json!({"path": p}))]);
    let server = ScriptedServer::start(vec![
        read("a.txt"),
        read("a.txt"),
        read("b.txt"),
        read("a.txt"),
        read("a.txt"),
        ScriptedResponse::chat_text("done"),
    ]);
    let out = run_with(&t, &server, 10);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let requests = server.requests();
    assert_eq!(requests.len(), 6);
    let notes = requests[5].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter(|m| {
            m["content"]
                .as_str()
                .unwrap()
                .contains("you already called")
        })
        .count();
    assert_eq!(notes, 2, "the 2nd and 5th reads were repeats");
}

#[test]
fn the_react_protocol_is_stuck_on_the_same_action_too() {
    let t = TestDir::new();
    t.file("a.txt", "hello\n");
    // The same action three times, worded differently around the JSON: still the same call.
    let action = |prose: &str| {
        ScriptedResponse::chat_text(&format!(
            "{prose}\n```json\n{{\"thought\": \"read\", \"action\": \"file_read\", \
             \"action_input\": {{\"path\": \"a.txt\"}}}}\n```"
        ))
    };
    let server = ScriptedServer::start(vec![
        action("Let me read it."),
        action("Reading again."),
        action("Once more."),
        action("And again."),
        ScriptedResponse::chat_text("{\"final_answer\": \"never reached\"}"),
    ]);
    let out = run_with_args(&t, &server, 10, &["--tool-protocol", "react"]);
    assert_eq!(code(&out), 31, "{}", stderr(&out));
    assert_eq!(server.requests().len(), 3, "three turns, then stuck");
    let requests = server.requests();
    assert!(
        requests[0].body.get("tools").is_none(),
        "react: no native tools"
    );
    let last = requests[2].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(last.contains("you already called file_read"), "{last}");
    let db = t.db();
    assert_eq!(q::<String>(&db, "SELECT error_code FROM steps"), "stuck");
    assert_eq!(
        q::<i64>(
            &db,
            "SELECT count(*) FROM executions WHERE tool_name='file_read'"
        ),
        3
    );
}
