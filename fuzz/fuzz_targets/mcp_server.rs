//! acode-run as an MCP server: the `acode-run mcp` loop (`runner::mcp_server::serve_lines`, which
//! the command runs over stdin/stdout/stderr) over the fuzzer's lines, one line at a time, in a
//! scratch workspace.
//!
//! Properties, per inbound line: the loop ends (within a deadline); every line written to the
//! output is one JSON object; there is exactly one reply, or none and a line in the server log
//! (a notification, a stray reply) — never silence; a reply to a request with a string or
//! integer id carries that id (a float id too, when it is echoed), and a reply without an id is
//! a refusal, as invalid, of a number that is no exact integer (finding 14: a 48-digit id was
//! echoed as another float).
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use acode_run::runner::session::{Session, SessionOptions};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn workspace() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = acode_run_fuzz::scratch("mcp-server-ws");
        std::fs::write(
            dir.join("plan.json"),
            r#"{"plan_id": "p", "steps": [{"step_id": "a", "tool": "file_read", "arguments": {"path": "plan.json"}}]}"#,
        )
        .unwrap();
        dir.to_path_buf()
    })
}

fn one_line(line: Vec<u8>) {
    let inbound: Option<Value> = serde_json::from_slice(&line).ok();
    let dir = workspace().clone();
    let (output, log) =
        acode_run_fuzz::within(Duration::from_secs(10), "one MCP line", move || {
            // A session per line, as `acode-run mcp` opens one per server process.
            let session = Session::open(SessionOptions::new(dir), None)
                .expect("the server starts in its workspace");
            let mut input = std::io::Cursor::new(line);
            let mut output = Vec::new();
            let mut log = Vec::new();
            acode_run::runner::mcp_server::serve_lines(&session, &mut input, &mut output, &mut log);
            (output, log)
        });
    let text = String::from_utf8(output).expect("the server wrote UTF-8");
    let replies: Vec<&str> = text.lines().collect();
    for r in &replies {
        let v: Value = serde_json::from_str(r)
            .unwrap_or_else(|e| panic!("the server wrote a non-JSON line ({e}): {r:?}"));
        assert!(v.is_object(), "the server wrote a non-object: {r}");
        assert_eq!(v["jsonrpc"], "2.0", "{r}");
    }
    assert!(
        replies.len() <= 1,
        "several replies to one line: {replies:?}"
    );
    if replies.is_empty() {
        assert!(
            !log.is_empty(),
            "a line got neither a reply nor a line in the server log"
        );
    }
    if let (Some(reply), Some(Value::Object(req))) = (replies.first(), &inbound)
        && req.get("method").is_some_and(Value::is_string)
        && let Some(id) = req.get("id").filter(|i| i.is_string() || i.is_number())
    {
        let reply: Value = serde_json::from_str(reply).unwrap();
        match reply.get("id") {
            Some(echoed) => assert_eq!(echoed, id, "the reply names another request"),
            // Only a number that is no exact integer may go unechoed, refused as invalid.
            None => {
                assert!(
                    !(id.is_string() || id.is_i64() || id.is_u64()),
                    "a usable id was not echoed: {reply}"
                );
                assert_eq!(reply["error"]["code"], -32600, "{reply}");
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // The loop's own framing: lines, trimmed; empty ones are not messages.
    for line in data.split(|b| *b == b'\n').take(8) {
        if String::from_utf8_lossy(line).trim().is_empty() {
            continue;
        }
        let mut line = line.to_vec();
        line.push(b'\n');
        one_line(line);
    }
});
