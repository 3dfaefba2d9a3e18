//! acode-run as an MCP client: `mcp::client::Client` (handshake, `tools/list`, `tools/call`, as
//! the runner drives a policy's MCP server) against a "server" that is `cat` of the fuzzer's
//! bytes, then keeps what the client writes back — real process, real pipes, the client's own
//! reader threads.
//!
//! Properties: everything ends within a deadline (the client's own timeouts, EOF, refusal);
//! never a panic; every request the server sends that the client refused is recorded — the
//! refusals the server received (error replies, code -32601) are exactly the refusals the client
//! records — and it records no more refusals than the server sent requests; what the client
//! reports (errors, refusals, the server's identity) carries no terminal control character.
#![no_main]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use acode_run::mcp::client::Client;
use acode_run::process::CommandSpec;
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

fn clean(what: &str, s: &str) {
    assert!(
        !s.chars()
            .any(|c| c == '\u{1b}' || c == '\r' || c == '\u{7}'),
        "{what} carries a control character: {s:?}"
    );
}

fuzz_target!(|data: &[u8]| {
    if data.len() > 64 * 1024 {
        return;
    }
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = acode_run_fuzz::scratch("mcp-client");
    let file = dir.join(format!(
        "server-{}.jsonl",
        N.fetch_add(1, Ordering::Relaxed) % 4
    ));
    std::fs::write(&file, data).unwrap();
    let requests = data
        .split(|b| *b == b'\n')
        .filter_map(|l| serde_json::from_slice::<Value>(l).ok())
        .filter(|v| v.get("method").is_some_and(Value::is_string))
        .filter(|v| v.get("id").is_some_and(|i| !i.is_null()))
        .count();
    // What the client wrote to the server, kept by the server once its bytes are out.
    let replies = file.with_extension("replies");
    let _ = std::fs::remove_file(&replies);
    let mut spec = CommandSpec::new(
        vec![
            "sh".into(),
            "-c".into(),
            "cat \"$1\"; exec cat > \"$2\"".into(),
            "server".into(),
            file.display().to_string(),
            replies.display().to_string(),
        ],
        dir.to_path_buf(),
    );
    spec.env = vec![("PATH".into(), "/usr/bin:/bin".into())];
    spec.timeout = Duration::from_secs(10);
    // The server's `cat` writes down the last replies when its input closes.
    spec.kill_grace = Duration::from_millis(500);
    let (refused, shown) =
        acode_run_fuzz::within(Duration::from_secs(20), "the MCP client", move || {
            let cancel = AtomicBool::new(false);
            let mut shown = Vec::new();
            let mut client = match Client::start("fuzz", &spec, Duration::from_secs(2), &cancel) {
                Ok(c) => c,
                Err(e) => return (0, vec![e.to_string()]),
            };
            shown.push(client.identity().name.clone());
            shown.push(client.identity().version.clone());
            match client.list_tools(Duration::from_secs(2), &cancel) {
                Ok(_) => {}
                Err(e) => shown.push(e.to_string()),
            }
            if let Err(e) = client.call_tool("t", &json!({"x": 1}), Duration::from_secs(2), &cancel)
            {
                shown.push(e.to_string());
            }
            let refused = client.take_refused();
            shown.extend(refused.iter().cloned());
            client.stop();
            (refused.len(), shown)
        });
    assert!(
        refused <= requests,
        "{refused} refusals recorded for {requests} server requests"
    );
    let received = std::fs::read(&replies).unwrap_or_default();
    let refusals_received = received
        .split(|b| *b == b'\n')
        .filter_map(|l| serde_json::from_slice::<Value>(l).ok())
        .filter(|v| v.get("method").is_none() && v["error"]["code"] == -32601)
        .count();
    assert_eq!(
        refusals_received, refused,
        "the server received {refusals_received} refusals, the client recorded {refused}"
    );
    for s in &shown {
        clean("what the client reports", s);
    }
});
