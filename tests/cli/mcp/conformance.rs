//! What acode-run speaks over MCP, checked against the published JSON Schemas of each revision
//! (`tests/support/mcp-schemas/REVISION/schema.json`, copied from the specification repository
//! modelcontextprotocol/modelcontextprotocol at commit b0f60ba5): every message `acode-run mcp`
//! sends, and every message acode-run's MCP client sends to a server, validated against the
//! schema of the revision negotiated — the wrapper (`JSONRPC…`) and the method's own result or
//! request definition — and each tool's structured content against the `outputSchema` it declares.

use std::collections::HashMap;
use std::io::{BufRead, Write};

use serde_json::{Value, json};

use crate::harness::mcp::{Served, approve, policy, run};
use crate::harness::*;

/// The revisions acode-run speaks: three of the handshake era, and the stateless one.
const HANDSHAKE: [&str; 3] = ["2025-03-26", "2025-06-18", "2025-11-25"];
const STATELESS: &str = "2026-07-28";

/// One revision's schema, with any of its definitions compiled on demand.
struct McpSchema {
    revision: &'static str,
    url: String,
    defs: &'static str,
    compiler: boon::Compiler,
    schemas: boon::Schemas,
    compiled: HashMap<String, boon::SchemaIndex>,
}

impl McpSchema {
    fn load(revision: &'static str) -> McpSchema {
        let path = format!(
            "{}/tests/support/mcp-schemas/{revision}/schema.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let schema: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        // Draft-07 revisions keep their definitions under `definitions`, 2020-12 ones under `$defs`.
        let defs = if schema.get("$defs").is_some() {
            "$defs"
        } else {
            "definitions"
        };
        let url = format!("https://mcp-schemas.test/{revision}/schema.json");
        let mut compiler = boon::Compiler::new();
        compiler.add_resource(&url, schema).unwrap();
        McpSchema {
            revision,
            url,
            defs,
            compiler,
            schemas: boon::Schemas::new(),
            compiled: HashMap::new(),
        }
    }

    /// Whether the revision defines `name`.
    fn has(&mut self, name: &str) -> bool {
        self.index(name).is_some()
    }

    fn index(&mut self, name: &str) -> Option<boon::SchemaIndex> {
        if let Some(i) = self.compiled.get(name) {
            return Some(*i);
        }
        let loc = format!("{}#/{}/{name}", self.url, self.defs);
        let i = self.compiler.compile(&loc, &mut self.schemas).ok()?;
        self.compiled.insert(name.to_string(), i);
        Some(i)
    }

    /// Whether `value` is a valid `name` of this revision.
    fn accepts(&mut self, name: &str, value: &Value) -> bool {
        let index = self.index(name).unwrap();
        self.schemas.validate(value, index).is_ok()
    }

    /// Panics unless `value` is a valid `name` of this revision.
    fn check(&mut self, name: &str, value: &Value, what: &str) {
        let revision = self.revision;
        let index = self
            .index(name)
            .unwrap_or_else(|| panic!("{revision} has no definition {name} ({what})"));
        if let Err(e) = self.schemas.validate(value, index) {
            panic!("{what} is not a valid {name} of {revision}: {e:#}\n{value:#}");
        }
    }

    /// A success reply (`JSONRPCResponse` before 2025-11-25, `JSONRPCResultResponse` since) whose
    /// result is a valid `result_def`.
    fn check_result(&mut self, reply: &Value, result_def: &str, what: &str) {
        assert!(
            reply.get("result").is_some(),
            "{what}: not a result: {reply}"
        );
        let wrapper = if self.has("JSONRPCResultResponse") {
            "JSONRPCResultResponse"
        } else {
            "JSONRPCResponse"
        };
        self.check(wrapper, reply, what);
        self.check(result_def, &reply["result"], what);
    }

    /// An error reply (`JSONRPCError` before 2025-11-25, `JSONRPCErrorResponse` since).
    fn check_error(&mut self, reply: &Value, what: &str) {
        assert!(
            reply.get("error").is_some(),
            "{what}: not an error: {reply}"
        );
        let wrapper = if self.has("JSONRPCErrorResponse") {
            "JSONRPCErrorResponse"
        } else {
            "JSONRPCError"
        };
        self.check(wrapper, reply, what);
    }
}

/// Validates `value` against a tool's own `outputSchema` (JSON Schema 2020-12 by default).
fn check_output(schema: &Value, value: &Value, what: &str) {
    let mut compiler = boon::Compiler::new();
    let url = "https://mcp-schemas.test/output.json";
    compiler.add_resource(url, schema.clone()).unwrap();
    let mut schemas = boon::Schemas::new();
    let index = compiler
        .compile(url, &mut schemas)
        .unwrap_or_else(|e| panic!("{what}: the outputSchema does not compile: {e:#}"));
    if let Err(e) = schemas.validate(value, index) {
        panic!("{what}: structuredContent does not match its outputSchema: {e:#}\n{value:#}");
    }
}

/// A workspace with a valid plan, an invalid one, and a run recorded (so `show_run` has one).
pub(crate) fn workspace_with_plans() -> (TestDir, String) {
    let t = TestDir::new();
    // In the workspace: the server's tools take paths relative to it.
    t.file(
        "good.json",
        &json!({"plan_id": "good", "steps": [
            {"step_id": "w", "tool": "file_write", "arguments": {"path": "out.txt", "contents": "hi\n"}}]})
        .to_string(),
    );
    t.file(
        "bad.json",
        &json!({"plan_id": "bad", "steps": [{"step_id": "x", "tool": "file_raed"}]}).to_string(),
    );
    let out = t.run(&["run", "good.json", "--approve", "--by", "human"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let db = t.db();
    let run_id: String = q(&db, "SELECT run_id FROM runs");
    (t, run_id)
}

/// Every tool called: successes and refusals (`isError`), each checked as a `CallToolResult` and,
/// with structured output, against the tool's `outputSchema`; then the protocol errors.
fn exercise_tools(
    served: &mut Served,
    schema: &mut McpSchema,
    meta: &dyn Fn(Value) -> Value,
    run_id: &str,
) {
    let rev = schema.revision;
    let listed = served.request("tools/list", meta(json!({})));
    schema.check_result(&listed, "ListToolsResult", &format!("{rev} tools/list"));
    let tools: HashMap<String, Value> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap().to_string(), t.clone()))
        .collect();
    assert_eq!(tools.len(), 6, "{listed}");
    let structured = rev != "2025-03-26";
    let calls = [
        ("validate_plan", json!({"path": "good.json"}), false),
        ("validate_plan", json!({"path": "bad.json"}), false),
        ("preview_plan", json!({"path": "good.json"}), false),
        ("preview_plan", json!({"path": "bad.json"}), true),
        (
            "submit_plan",
            json!({"path": "new.json", "plan": {"plan_id": "n", "steps": [
                {"step_id": "w", "tool": "file_write", "arguments": {"path": "n.txt", "contents": "n\n"}}]}}),
            false,
        ),
        (
            "submit_plan",
            json!({"path": "worse.json", "plan": "{\"plan_id\": \"w\",\n \"steps\": [{\"step_id\": \"a\", \"tool\": \"nope\"}]}"}),
            true,
        ),
        ("plan_status", json!({"path": "good.json"}), false),
        ("plan_status", json!({"path": "missing.json"}), true),
        ("list_runs", json!({}), false),
        ("show_run", json!({"run_id": run_id}), false),
        ("show_run", json!({"run_id": "ffffffff"}), true),
    ];
    for (n, (tool, arguments, is_error)) in calls.into_iter().enumerate() {
        // A fresh file name per revision, so submit_plan writes each time.
        let mut arguments = arguments;
        if tool == "submit_plan" && !is_error {
            arguments["path"] = json!(format!("new-{rev}.json"));
        }
        let what = format!("{rev} {tool} #{n}");
        let reply = served.request(
            "tools/call",
            meta(json!({"name": tool, "arguments": arguments})),
        );
        schema.check_result(&reply, "CallToolResult", &what);
        let result = &reply["result"];
        assert_eq!(result["isError"], is_error, "{what}: {result}");
        let output_schema = tools[tool].get("outputSchema");
        if !structured {
            assert!(output_schema.is_none(), "{what}: {rev} has no outputSchema");
            assert!(result.get("structuredContent").is_none(), "{what}");
            continue;
        }
        let output_schema = output_schema.unwrap_or_else(|| panic!("{what}: no outputSchema"));
        match result.get("structuredContent") {
            Some(content) => check_output(output_schema, content, &what),
            None => assert!(is_error, "{what}: a success without structured content"),
        }
    }
    // Protocol errors: an unknown tool, bad arguments, an unknown method.
    for (method, params) in [
        ("tools/call", json!({"name": "run_plan", "arguments": {}})),
        (
            "tools/call",
            json!({"name": "validate_plan", "arguments": {"paht": "x.json"}}),
        ),
        ("resources/list", json!({})),
    ] {
        let reply = served.request(method, meta(params));
        schema.check_error(&reply, &format!("{rev} {method} error"));
    }
}

#[test]
fn every_message_acode_run_mcp_sends_validates_against_the_negotiated_revision() {
    let (t, run_id) = workspace_with_plans();
    for rev in HANDSHAKE {
        let mut schema = McpSchema::load(rev);
        let mut served = Served::start(&t);
        let params = json!({"protocolVersion": rev, "capabilities": {},
                            "clientInfo": {"name": "conformance", "version": "1"}});
        schema.check(
            "InitializeRequest",
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}),
            "the test's own initialize",
        );
        let init = served.request("initialize", params);
        schema.check_result(&init, "InitializeResult", &format!("{rev} initialize"));
        assert_eq!(init["result"]["protocolVersion"], rev);
        served.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        let pong = served.request("ping", json!({}));
        schema.check_result(&pong, "EmptyResult", &format!("{rev} ping"));
        exercise_tools(&mut served, &mut schema, &|p| p, &run_id);
    }

    let mut schema = McpSchema::load(STATELESS);
    let mut served = Served::start(&t);
    let meta = |mut params: Value| {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": STATELESS,
            "io.modelcontextprotocol/clientCapabilities": {}});
        params
    };
    let discover = served.request("server/discover", meta(json!({})));
    schema.check_result(&discover, "DiscoverResult", "server/discover");
    schema.check("DiscoverResultResponse", &discover, "server/discover");
    let listed = served.request("tools/list", meta(json!({})));
    schema.check("ListToolsResultResponse", &listed, "tools/list");
    for reply in [&discover, &listed] {
        assert_eq!(
            reply["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
            "acode-run"
        );
        assert_eq!(reply["result"]["resultType"], "complete");
        assert_eq!(reply["result"]["ttlMs"], 3_600_000);
        assert_eq!(reply["result"]["cacheScope"], "public");
    }
    // The check can fail: the listing acode-run used to send (no `ttlMs`) is refused.
    let mut old = listed.clone();
    old["result"].as_object_mut().unwrap().remove("ttlMs");
    assert!(!schema.accepts("ListToolsResultResponse", &old));
    exercise_tools(&mut served, &mut schema, &meta, &run_id);
    // Messages that are not requests: errors without an id (it cannot be read), as the schemas
    // since 2025-11-25 allow.
    let mut older = McpSchema::load("2025-11-25");
    for line in [
        "not json at all",
        "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]",
        "42",
        "{\"jsonrpc\":\"2.0\",\"id\":{\"x\":1},\"method\":\"ping\"}",
    ] {
        writeln!(served.stdin, "{line}").unwrap();
        served.stdin.flush().unwrap();
        let mut reply = String::new();
        served.stdout.read_line(&mut reply).unwrap();
        let reply: Value = serde_json::from_str(&reply).unwrap();
        assert!(reply.get("id").is_none(), "{line}: {reply}");
        schema.check_error(&reply, &format!("reply to {line:?}"));
        older.check_error(&reply, &format!("reply to {line:?}"));
    }
    // Another version in `_meta`: the revision's own error, with the versions supported.
    let mut params = meta(json!({}));
    params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let refused = served.request("tools/list", params);
    schema.check(
        "UnsupportedProtocolVersionError",
        &refused,
        "unsupported version",
    );
    assert_eq!(refused["error"]["data"]["supported"], json!([STATELESS]));
}

/// The `{kind, line, location, message}` problems of `validate_plan` are those of `validate
/// --json`; `submit_plan` refuses with locations in the plan as sent (its lines when sent as
/// text), never the staged copy's name; `list_runs` on a fresh workspace is an empty list.
#[test]
fn the_mcp_tools_answer_in_data_with_locations_in_the_plan_sent() {
    let t = TestDir::new();
    t.file(
        "bad.json",
        &serde_json::to_string_pretty(
            &json!({"plan_id": "bad", "steps": [{"step_id": "x", "tool": "file_raed"}]}),
        )
        .unwrap(),
    );
    let mut served = Served::start(&t);
    let call = |served: &mut Served, tool: &str, arguments: Value| {
        served.request("tools/call", json!({"name": tool, "arguments": arguments}))["result"]
            .clone()
    };
    let runs = call(&mut served, "list_runs", json!({}));
    assert_eq!(runs["isError"], false, "{runs}");
    assert_eq!(runs["structuredContent"], json!({"runs": []}));

    let v = call(&mut served, "validate_plan", json!({"path": "bad.json"}));
    let cli = t.run(&["validate", "bad.json", "--json"]);
    let cli: Value = serde_json::from_str(&stdout(&cli)).unwrap();
    assert_eq!(v["structuredContent"]["valid"], false);
    assert_eq!(v["structuredContent"]["problems"], cli["problems"], "{v}");
    let problem = &v["structuredContent"]["problems"][0];
    assert_eq!(problem["location"], "steps[0].tool");
    assert_eq!(problem["kind"], "invalid");
    assert!(problem["line"].is_u64(), "{problem}");
    assert!(
        problem["message"]
            .as_str()
            .unwrap()
            .contains("did you mean \"file_read\""),
        "{problem}"
    );

    // As text: its own lines (the step starts on line 3).
    let text = "{\"plan_id\": \"w\",\n \"steps\": [\n  {\"step_id\": \"a\", \"tool\": \"nope\"}]}";
    let r = call(
        &mut served,
        "submit_plan",
        json!({"path": "plans/w.json", "plan": text}),
    );
    assert_eq!(r["isError"], true, "{r}");
    let message = r["content"][0]["text"].as_str().unwrap();
    assert!(
        message.starts_with("plans/w.json: the plan is not valid"),
        "{message}"
    );
    assert!(!message.contains("acode-mcp-submit"), "{message}");
    assert!(
        !message.contains(&std::env::temp_dir().display().to_string()),
        "{message}"
    );
    let problems = &r["structuredContent"]["problems"];
    assert_eq!(problems[0]["location"], "steps[0].tool", "{r}");
    assert_eq!(problems[0]["line"], 3, "{r}");
    assert_eq!(r["structuredContent"]["written"], false);
    // As an object: no line numbers of a copy the agent never saw.
    let r = call(
        &mut served,
        "submit_plan",
        json!({"path": "plans/w.json", "plan": {"plan_id": "w", "steps": [{"step_id": "a", "tool": "nope"}]}}),
    );
    let problems = &r["structuredContent"]["problems"];
    assert_eq!(problems[0]["location"], "steps[0].tool", "{r}");
    assert!(problems[0].get("line").is_none(), "{r}");
    assert!(
        !r["content"][0]["text"].as_str().unwrap().contains("line"),
        "{r}"
    );
    assert!(!t.ws.join("plans/w.json").exists());
}

/// Every message acode-run's client sends to a server (its requests, notifications, and its
/// refusals of the server's own requests), as a fixture server logged them, validates against the
/// revision the server negotiated. The `initialize` probe a stateless server is first sent is a
/// handshake-era message (checked against 2025-11-25, the version it asks for).
#[test]
fn every_message_the_mcp_client_sends_validates_against_the_negotiated_revision() {
    let eras: Vec<(&str, Vec<&str>)> = HANDSHAKE
        .iter()
        .map(|rev| (*rev, vec!["handshake", "--version", rev]))
        .chain([(STATELESS, vec!["stateless"])])
        .collect();
    for (rev, args) in eras {
        let t = TestDir::new();
        let mut args = args;
        args.extend(["--sampling", "--log", "mcp.log"]);
        policy(&t, &args, &["echo", "hang"], json!({"call_timeout_s": 1}));
        let plan = t.plan(
            "mcp.json",
            &json!({"plan_id": "mcp", "steps": [
                {"step_id": "call", "tool": "mcp__fx__echo", "arguments": {"text": "hi"}},
                {"step_id": "hang", "tool": "mcp__fx__hang", "arguments": {}, "depends_on": ["call"]}]}),
        );
        approve(&t, &plan);
        let pin = std::fs::read_to_string(t.root.join("mcp.json.approval")).unwrap();
        assert!(
            pin.contains(&format!("\"protocol_version\": \"{rev}\""))
                || pin.contains(&format!("\"protocol_version\":\"{rev}\"")),
            "{rev}: {pin}"
        );
        // The log holds what approve sent (its handshake and listing), then the run's messages.
        let out = run(
            &t,
            &["run", plan.to_str().unwrap(), "--sandbox", "landlock"],
            &[],
        );
        assert_eq!(code(&out), 34, "{rev}: {}", stderr(&out));
        let log = std::fs::read_to_string(t.ws.join("mcp.log")).unwrap();
        let mut schema = McpSchema::load(rev);
        let mut handshake = McpSchema::load("2025-11-25");
        let mut seen = Vec::new();
        for line in log.lines() {
            // The fixture's own notes ("pid N") and the answers to its requests, which it logs
            // as "METHOD answer: MESSAGE".
            let json_part = match line.split_once(" answer: ") {
                Some((_, m)) => m,
                None if line.starts_with('{') => line,
                None => continue,
            };
            let message: Value = serde_json::from_str(json_part).unwrap();
            let what = format!("{rev}: client message {message}");
            match (message["method"].as_str(), message.get("id")) {
                (Some("initialize"), _) if rev == STATELESS => {
                    handshake.check("InitializeRequest", &message, &what);
                    seen.push("initialize probe".to_string());
                }
                (Some(method), Some(_)) => {
                    let def = match method {
                        "initialize" => "InitializeRequest",
                        "server/discover" => "DiscoverRequest",
                        "tools/list" => "ListToolsRequest",
                        "tools/call" => "CallToolRequest",
                        other => panic!("{what}: unexpected request {other}"),
                    };
                    schema.check(def, &message, &what);
                    seen.push(method.to_string());
                }
                (Some(method), None) => {
                    let def = match method {
                        "notifications/initialized" => "InitializedNotification",
                        "notifications/cancelled" => "CancelledNotification",
                        other => panic!("{what}: unexpected notification {other}"),
                    };
                    schema.check(def, &message, &what);
                    seen.push(method.to_string());
                }
                (None, _) => {
                    schema.check_error(&message, &what);
                    seen.push("error reply".to_string());
                }
            }
        }
        for expected in [
            "tools/list",
            "tools/call",
            "notifications/cancelled",
            "error reply",
        ] {
            assert!(
                seen.iter().any(|s| s == expected),
                "{rev}: no {expected} in {seen:?}"
            );
        }
        let first = if rev == STATELESS {
            "server/discover"
        } else {
            "notifications/initialized"
        };
        assert!(seen.iter().any(|s| s == first), "{rev}: {seen:?}");
    }
}
