//! acode-run as an MCP server for agents (`acode-run mcp`, docs/mcp.md): an operation on a
//! [`Session`], so the command line, the fuzz target and an embedder serve the same tools.
//!
//! The server speaks JSON-RPC 2.0, one message per line, in both protocol eras: the `initialize`
//! handshake and the stateless revision (`server/discover`, the version in each request's `_meta`,
//! -32022 for an unsupported one). It offers the tools an agent needs to work *with* acode-run
//! without going around the human: validate, preview, submit (write a plan file, never approve),
//! the status of a plan, and the runs. Approving and running are not offered. Every request is
//! logged (the MCP server log); a malformed message gets a JSON-RPC error, and a handler that fails
//! becomes an error reply, never a crash.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::session::{Session, SessionError};
use crate::mcp::{HANDSHAKE_VERSIONS, STATELESS_VERSION, UNSUPPORTED_VERSION, sanitize_line};
use crate::plan::{self, PlanError};
use crate::policy::Policy;

/// Longest request line read (a bigger one is answered with an error and skipped).
const MAX_REQUEST: usize = 8 * 1024 * 1024;

/// What the server knows between requests: the workspace, and the revision a handshake-era
/// client negotiated with `initialize` (a stateless-era request carries its own).
struct Server<'a> {
    session: &'a Session,
    negotiated: RefCell<Option<&'static str>>,
}

/// A JSON-RPC error reply's code and message.
struct RpcError(i64, String);

/// A tool that could not do what it was asked: the words the model reads, and, when there is
/// something to act on (a plan's problems), the same as structured content.
struct Refusal {
    message: String,
    structured: Option<Value>,
}

impl From<String> for Refusal {
    fn from(message: String) -> Self {
        Refusal {
            message,
            structured: None,
        }
    }
}

/// How long a client may keep `tools/list` and `server/discover` (the stateless revision's
/// `ttlMs`): an hour. Both are compiled into this binary and change only when acode-run is
/// upgraded, which restarts the server; a client that re-lists after an hour loses nothing.
const CACHE_TTL_MS: u64 = 3_600_000;
/// Who may share them (`cacheScope`): `public`, since neither holds anything about the user, the
/// workspace or the client (the tool list and the capabilities are the same for everyone).
const CACHE_SCOPE: &str = "public";

/// Whether `revision` predates structured tool output (`outputSchema`, `structuredContent`).
fn is_before_structured_output(revision: &str) -> bool {
    revision == "2025-03-26"
}

/// One problem of a plan, as `validate --json` and the MCP tools report it.
fn problem_schema() -> Value {
    json!({"type": "object", "properties": {
        "kind": {"type": "string", "description": "invalid, or sandbox (a sandbox violation caught early)"},
        "line": {"type": "integer", "description": "The line of the plan where the step concerned starts"},
        "location": {"type": "string", "description": "Where: steps[2].arguments.path, plan.plan_id, line 3, column 5, ..."},
        "message": {"type": "string"}},
      "required": ["kind", "location", "message"]})
}

/// What `run` would decide about a plan (`Session::approval`).
fn approval_schema() -> Value {
    json!({"type": "object", "properties": {
        "status": {"enum": ["approved", "pending", "rejected", "not runnable"]},
        "may_run": {"type": "boolean"},
        "reason": {"type": ["string", "null"], "description": "Why `acode-run run` would refuse it, in its words"},
        "approved_by": {"type": "string", "description": "Who approved it and how that is proven: the verified principals of approvers' SSH keys, or the claimed name"}},
      "required": ["status", "may_run"]})
}

/// The tools offered, with their input and output schemas (no `outputSchema` for a revision
/// before structured output).
fn tool_list(revision: &str) -> Value {
    let path = json!({"type": "string",
        "description": "The plan file, relative to the workspace root (a .json file)"});
    let object = |properties: Value, required: &[&str]| json!({"type": "object", "properties": properties, "required": required});
    let run = json!({"type": "object", "properties": {
        "run_id": {"type": "string"}, "plan_id": {"type": "string"},
        "plan_sha256": {"type": "string"}, "status": {"type": "string"},
        "started_at": {"type": "integer"}, "exit_code": {"type": ["integer", "null"]}},
      "required": ["run_id", "plan_id", "plan_sha256", "status", "started_at"]});
    let runs = json!({"type": "array", "items": run});
    let problems = json!({"type": "array", "items": problem_schema()});
    let sha = json!({"type": "string"});
    let tools = json!([
        {"name": "validate_plan",
         "description": "Check a plan file completely (schema, tools, sandbox and policy) without running anything; returns the problems with their locations.",
         "inputSchema": {"type": "object", "properties": {"path": path}, "required": ["path"], "additionalProperties": false},
         "outputSchema": object(json!({"valid": {"type": "boolean"}, "plan_id": {"type": "string"},
             "plan_sha256": sha, "steps": {"type": "integer"}, "problems": problems}), &["valid"])},
        {"name": "preview_plan",
         "description": "Show what each step of a valid plan will do (argv, diffs of file steps simulated in order, MCP calls and pins); nothing is written.",
         "inputSchema": {"type": "object", "properties": {"path": path}, "required": ["path"], "additionalProperties": false},
         "outputSchema": object(json!({"plan_id": {"type": "string"}, "plan_sha256": sha,
             "preview": {"type": "string", "description": "The preview as `acode-run preview` prints it"},
             "approval": approval_schema()}), &["plan_id", "plan_sha256", "preview", "approval"])},
        {"name": "submit_plan",
         "description": "Write a plan file into the workspace for a human to review and approve (acode-run approve). The plan must validate; nothing is approved or run.",
         "inputSchema": {"type": "object", "properties": {
             "path": path,
             "plan": {"type": ["object", "string"], "description": "The plan, as a JSON object or JSON text"},
             "overwrite": {"type": "boolean", "description": "Replace an existing file (its approval no longer applies)"}},
           "required": ["path", "plan"], "additionalProperties": false},
         "outputSchema": object(json!({"written": {"type": "boolean"}, "path": {"type": "string"},
             "plan_id": {"type": "string"}, "plan_sha256": sha, "approved": {"const": false},
             "next": {"type": "string"},
             "problems": {"type": "array", "items": problem_schema(),
                          "description": "Why nothing was written; locations in the plan as sent (lines only for a plan sent as text)"}}),
             &["written", "path", "approved"])},
        {"name": "plan_status",
         "description": "Whether a plan file may run now, as `acode-run run` decides it (approved, pending, rejected, or not runnable with run's reason), and its recent runs.",
         "inputSchema": {"type": "object", "properties": {"path": path}, "required": ["path"], "additionalProperties": false},
         "outputSchema": object(json!({"plan_id": {"type": "string"}, "plan_sha256": sha,
             "status": approval_schema()["properties"]["status"].clone(),
             "may_run": {"type": "boolean"}, "reason": {"type": ["string", "null"]},
             "approved_by": {"type": ["string", "null"], "description": "Who approved it and how that is proven (the verified principals of approvers' SSH keys, or the claimed name)"},
             "decided_by": {"type": ["string", "null"]},
             "mcp_servers_pinned": {"type": "array", "items": {"type": "string"}},
             "runs": runs}), &["plan_id", "plan_sha256", "status", "may_run", "runs"])},
        {"name": "list_runs",
         "description": "The most recent runs recorded in the workspace's execution database (none yet: an empty list).",
         "inputSchema": {"type": "object", "properties": {
             "limit": {"type": "integer", "minimum": 1, "maximum": 200}}, "additionalProperties": false},
         "outputSchema": object(json!({"runs": runs}), &["runs"])},
        {"name": "show_run",
         "description": "One run's steps, executions and artifacts list (a unique run id prefix is enough); everything is redacted.",
         "inputSchema": {"type": "object", "properties": {
             "run_id": {"type": "string", "minLength": 1}}, "required": ["run_id"], "additionalProperties": false},
         "outputSchema": object(json!({"run": run,
             "steps": {"type": "array", "items": {"type": "object"}},
             "executions": {"type": "array", "items": {"type": "object"}}}),
             &["run", "steps", "executions"])},
    ]);
    if !is_before_structured_output(revision) {
        return tools;
    }
    let mut tools = tools;
    for t in tools.as_array_mut().into_iter().flatten() {
        if let Some(t) = t.as_object_mut() {
            t.remove("outputSchema");
        }
    }
    tools
}

/// The server loop over any line source: one reply per request on `output` (flushed line by
/// line), and on `log` (the MCP server log, stderr for `acode-run mcp`) a line for every message
/// that gets no reply (a notification, a stray reply). Until `input` ends. Everything it says
/// goes through the session's redactor.
///
/// `acode-run mcp` runs it over stdin, stdout and stderr; the fuzz target `mcp_server` over
/// in-memory lines; an embedder over whatever carries its agent's messages.
pub fn serve_lines(
    session: &Session,
    input: &mut dyn BufRead,
    output: &mut dyn Write,
    log: &mut dyn Write,
) {
    let server = Server {
        session,
        negotiated: RefCell::new(None),
    };
    loop {
        let mut line = Vec::new();
        let read =
            std::io::Read::take(&mut *input, MAX_REQUEST as u64 + 1).read_until(b'\n', &mut line);
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if line.len() > MAX_REQUEST {
            // Skip the rest of the oversized line.
            let mut rest = Vec::new();
            let _ = input.read_until(b'\n', &mut rest);
            reply(
                output,
                &error_reply(&Value::Null, -32600, "request larger than 8 MiB"),
            );
            continue;
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            server.handle_line(text, &mut *log)
        }))
        .unwrap_or_else(|_| {
            Some(error_reply(
                &Value::Null,
                -32603,
                "internal error while handling the request",
            ))
        });
        if let Some(answer) = answer {
            reply(output, &answer);
        }
    }
}

/// Whether a request's `id` can be echoed so that the client recognises it. MCP's `RequestId` is
/// a string or an integer (JSON Schema's `integer`, which `1.0` also is). A number that is not
/// integral, or an integer the parser can only hold as the nearest float (past 64 bits, or
/// written with a fraction or an exponent past 2^53), would be echoed as another number, naming
/// a request the client never sent (finding 14 of docs/fuzzing.md).
fn usable_id(id: &Value) -> bool {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53: every integer up to it is a float exactly.
    match id {
        Value::String(_) => true,
        Value::Number(n) if n.is_i64() || n.is_u64() => true,
        Value::Number(n) => n
            .as_f64()
            .is_some_and(|f| f.is_finite() && f.fract() == 0.0 && f.abs() <= EXACT),
        _ => false,
    }
}

fn reply(out: &mut dyn Write, message: &Value) {
    let _ = writeln!(out, "{message}");
    let _ = out.flush();
}

/// An error reply. One to a message whose id cannot be read (not JSON, a batch, a bad id) has no
/// `id`: the MCP schemas since 2025-11-25 allow exactly that, and none accepts JSON-RPC's `null`.
fn error_reply(id: &Value, code: i64, message: &str) -> Value {
    let error = json!({"code": code, "message": message});
    if id.is_null() {
        json!({"jsonrpc": "2.0", "error": error})
    } else {
        json!({"jsonrpc": "2.0", "id": id, "error": error})
    }
}

impl Server<'_> {
    /// The reply to one line (`None` for a notification).
    fn handle_line(&self, text: &str, log: &mut dyn Write) -> Option<Value> {
        let message: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                let _ = writeln!(log, "acode-run mcp: unparsable message: {e}");
                return Some(error_reply(
                    &Value::Null,
                    -32700,
                    &format!("parse error: {e}"),
                ));
            }
        };
        let Some(obj) = message.as_object() else {
            return Some(error_reply(
                &Value::Null,
                -32600,
                "invalid request: expected one JSON-RPC object (batches are not supported)",
            ));
        };
        let id = obj.get("id").cloned();
        let Some(method) = obj.get("method").and_then(Value::as_str) else {
            if obj.contains_key("result") || obj.contains_key("error") {
                // A reply to nothing we asked: no reply to it, but never silence (the log says).
                let _ = writeln!(
                    log,
                    "acode-run mcp: ignored a reply to no request of ours (id {})",
                    sanitize_line(&id.unwrap_or(Value::Null).to_string(), 40)
                );
                return None;
            }
            return Some(error_reply(
                id.as_ref().unwrap_or(&Value::Null),
                -32600,
                "invalid request: no method",
            ));
        };
        let Some(id) = id.filter(|i| !i.is_null()) else {
            let _ = writeln!(
                log,
                "acode-run mcp: notification {}",
                sanitize_line(method, 80)
            );
            return None;
        };
        if !usable_id(&id) {
            return Some(error_reply(
                &Value::Null,
                -32600,
                &format!(
                    "invalid request: the id must be a string or an integer a reply can echo \
                     exactly (at most 64 bits; 2^53 when written as a float), not {}",
                    sanitize_line(&id.to_string(), 40)
                ),
            ));
        }
        let _ = writeln!(
            log,
            "acode-run mcp: request {} (id {})",
            sanitize_line(method, 80),
            sanitize_line(&id.to_string(), 40)
        );
        let params = obj.get("params").cloned().unwrap_or(json!({}));
        if !params.is_object() {
            return Some(error_reply(&id, -32602, "params must be an object"));
        }
        // The stateless revision: the version travels with each request.
        let stateless = match params.pointer("/_meta/io.modelcontextprotocol~1protocolVersion") {
            Some(version) if version.as_str() != Some(STATELESS_VERSION) => {
                return Some(json!({"jsonrpc": "2.0", "id": id, "error": {
                    "code": UNSUPPORTED_VERSION,
                    "message": format!("unsupported protocol version {version}"),
                    "data": {"supported": [STATELESS_VERSION], "requested": version}}}));
            }
            Some(_) => true,
            None => false,
        };
        let revision = if stateless {
            STATELESS_VERSION
        } else {
            self.negotiated.borrow().unwrap_or(HANDSHAKE_VERSIONS[0])
        };
        // Cacheable results of the stateless revision say for how long and for whom.
        let cacheable = |mut result: Value| {
            if stateless {
                result["ttlMs"] = json!(CACHE_TTL_MS);
                result["cacheScope"] = json!(CACHE_SCOPE);
            }
            result
        };
        let result = match method {
            "initialize" => Ok(self.initialize(&params)),
            "server/discover" => Ok(cacheable(json!({
                "supportedVersions": [STATELESS_VERSION],
                "capabilities": {"tools": {"listChanged": false}},
                "instructions": INSTRUCTIONS,
            }))),
            "ping" => Ok(json!({})),
            "tools/list" => Ok(cacheable(json!({"tools": tool_list(revision)}))),
            "tools/call" => self.call(&params, revision),
            other => Err(RpcError(
                -32601,
                format!("method not found: {}", sanitize_line(other, 80)),
            )),
        };
        Some(match result {
            Ok(mut result) => {
                // Every result of the stateless revision says what kind it is (all are complete:
                // no tool here asks the client for input) and who answered (there is no
                // `initialize` result to say it once).
                if stateless {
                    result["resultType"] = json!("complete");
                    result["_meta"] = json!({"io.modelcontextprotocol/serverInfo": server_info()});
                }
                json!({"jsonrpc": "2.0", "id": id, "result": result})
            }
            Err(RpcError(code, message)) => error_reply(&id, code, &message),
        })
    }

    fn initialize(&self, params: &Value) -> Value {
        let asked = params
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let version = HANDSHAKE_VERSIONS
            .iter()
            .copied()
            .find(|v| *v == asked)
            .unwrap_or(HANDSHAKE_VERSIONS[0]);
        *self.negotiated.borrow_mut() = Some(version);
        json!({
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": false}},
            "serverInfo": server_info(),
            "instructions": INSTRUCTIONS,
        })
    }

    /// `tools/call`: a tool failure is a result with `isError` (the model sees it); unknown tools
    /// and bad arguments are JSON-RPC errors. A result's structured content is what its
    /// `outputSchema` describes, and its text the same as JSON (the preview: its text).
    fn call(&self, params: &Value, revision: &str) -> Result<Value, RpcError> {
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError(-32602, "tools/call needs a tool name".into()))?;
        let args = params.get("arguments").cloned().unwrap_or(json!({}));
        let tools = tool_list(revision);
        let Some(schema) = tools
            .as_array()
            .and_then(|a| a.iter().find(|t| t["name"] == name))
            .map(|t| t["inputSchema"].clone())
        else {
            return Err(RpcError(
                -32602,
                format!(
                    "unknown tool {} (acode-run offers validate_plan, preview_plan, submit_plan, \
                     plan_status, list_runs, show_run; approving and running are left to a human)",
                    sanitize_line(name, 80)
                ),
            ));
        };
        let problems = crate::tools::schema::validate(&schema, &args, "arguments");
        if !problems.is_empty() {
            return Err(RpcError(
                -32602,
                format!("invalid arguments for {name}: {}", problems.join("; ")),
            ));
        }
        let outcome = match name {
            "validate_plan" => self.validate(&args),
            "preview_plan" => self.preview(&args),
            "submit_plan" => self.submit(&args),
            "plan_status" => self.status(&args),
            "list_runs" => self.list_runs(&args),
            "show_run" => self.show_run(&args),
            _ => Err(Refusal::from("unknown tool".to_string())),
        };
        let structured_output = !is_before_structured_output(revision);
        let (text, structured, is_error) = match outcome {
            Ok(value) => {
                let text = match (name, value.get("preview").and_then(Value::as_str)) {
                    ("preview_plan", Some(preview)) => preview.to_string(),
                    _ => serde_json::to_string_pretty(&value).unwrap_or_default(),
                };
                (text, Some(value), false)
            }
            Err(refusal) => (refusal.message, refusal.structured, true),
        };
        let mut result = json!({
            "content": [{"type": "text", "text": self.session.redactor().redact(&text).into_owned()}],
            "isError": is_error,
        });
        if let (Some(value), true) = (structured, structured_output) {
            result["structuredContent"] = self.session.redactor().redact_value(&value);
        }
        Ok(result)
    }

    /// A plan path argument: relative to the workspace, inside it, a `.json` file.
    fn plan_path(&self, args: &Value) -> Result<PathBuf, Refusal> {
        let rel = args["path"].as_str().unwrap_or_default();
        if !rel.ends_with(".json") {
            return Err(format!("path {rel:?}: a plan file name ends with .json").into());
        }
        self.session
            .workspace()
            .resolve(rel)
            .map_err(|e| e.to_string().into())
    }

    /// The policy as it is at this request (the server outlives edits to the file).
    fn policy(&self) -> Result<Policy, Refusal> {
        self.session
            .current_policy()
            .map_err(|e| Refusal::from(e.to_string()))
    }

    /// Loads and validates the plan at `path`: the plan, or every problem with its location.
    fn load(&self, path: &Path, policy: &Policy) -> Result<Result<plan::Plan, PlanError>, Refusal> {
        match self.session.load_plan(path, &BTreeMap::new(), policy) {
            Ok(plan) => Ok(Ok(plan)),
            Err(SessionError::Plan(e)) => Ok(Err(e)),
            Err(other) => Err(Refusal::from(other.to_string())),
        }
    }

    fn validate(&self, args: &Value) -> Result<Value, Refusal> {
        let path = self.plan_path(args)?;
        let policy = self.policy()?;
        Ok(match self.load(&path, &policy)? {
            Ok(plan) => json!({
                "valid": true, "plan_id": plan.plan_id, "plan_sha256": plan.sha256,
                "steps": plan.steps.len()}),
            Err(e) => json!({"valid": false, "problems": e.problems()}),
        })
    }

    fn preview(&self, args: &Value) -> Result<Value, Refusal> {
        let path = self.plan_path(args)?;
        let policy = self.policy()?;
        let plan = self
            .load(&path, &policy)?
            .map_err(|e| Refusal::from(e.to_string()))?;
        let preview = crate::preview::preview(&plan, self.session.workspace(), &policy).map_err(
            |problems| Refusal::from(crate::preview::cannot_preview(&plan.plan_id, &problems)),
        )?;
        Ok(json!({
            "plan_id": plan.plan_id,
            "plan_sha256": plan.sha256,
            "preview": crate::preview::render(&preview),
            "approval": self.session.approval(&path, &plan, &policy),
        }))
    }

    fn submit(&self, args: &Value) -> Result<Value, Refusal> {
        let rel = args["path"].as_str().unwrap_or_default();
        let abs = self.plan_path(args)?;
        // Lines mean something to the agent only when it sent the plan as text (an object is
        // written out here, with lines of its own).
        let (text, as_text) = match &args["plan"] {
            Value::String(s) => (s.clone(), true),
            other => (
                serde_json::to_string_pretty(other).map_err(|e| Refusal::from(e.to_string()))?,
                false,
            ),
        };
        let mut body = text.trim_end().to_string();
        body.push('\n');
        // Validated from a staged copy first: an invalid plan is never written.
        let policy = self.policy()?;
        let staged =
            std::env::temp_dir().join(format!("acode-mcp-submit-{}.json", uuid::Uuid::new_v4()));
        std::fs::write(&staged, &body)
            .map_err(|e| Refusal::from(format!("cannot stage the plan: {e}")))?;
        let checked = self.load(&staged, &policy);
        let _ = std::fs::remove_file(&staged);
        let plan = checked?.map_err(|e| {
            // Told in terms of the plan the agent sent: its path, never the staged copy's.
            let mut problems = match e {
                PlanError::Invalid { problems, .. } => problems,
                PlanError::Read { source, .. } => {
                    vec![plan::Problem::invalid("plan", source.to_string())]
                }
            };
            if !as_text {
                for p in &mut problems {
                    p.line = None;
                }
            }
            let list: Vec<String> = problems.iter().map(|p| format!("  - {p}")).collect();
            Refusal {
                message: format!(
                    "{rel}: the plan is not valid, nothing written ({}):\n{}",
                    crate::terminal::count(problems.len(), "problem"),
                    list.join("\n")
                ),
                structured: Some(json!({
                    "written": false, "path": rel, "approved": false,
                    "problems": serde_json::to_value(&problems).unwrap_or_default()})),
            }
        })?;
        let overwrite = args["overwrite"].as_bool() == Some(true);
        let parent = crate::workspace::fs::parent_for_write(self.session.workspace(), &abs, true)
            .map_err(|e| Refusal::from(format!("{rel}: {e}")))?;
        parent
            .write_atomic(self.session.workspace(), body.as_bytes(), overwrite, None)
            .map_err(|e| {
                Refusal::from(match e.kind() {
                    std::io::ErrorKind::AlreadyExists => {
                        format!("{rel} exists (give \"overwrite\": true to replace it)")
                    }
                    _ => format!("cannot write {rel}: {e}"),
                })
            })?;
        Ok(json!({
            "written": true,
            "path": rel,
            "plan_id": plan.plan_id,
            "plan_sha256": crate::util::sha256_hex(body.as_bytes()),
            "approved": false,
            "next": format!("a human reviews it: acode-run preview {rel}; acode-run approve {rel}"),
        }))
    }

    /// The plan's status as `run` decides it ([`Session::approval`]), and its recent runs.
    fn status(&self, args: &Value) -> Result<Value, Refusal> {
        let path = self.plan_path(args)?;
        let policy = self.policy()?;
        let plan =
            plan::read(&path, &Default::default()).map_err(|e| Refusal::from(e.to_string()))?;
        let approval = self.session.approval(&path, &plan, &policy);
        let auth = plan::auth::load(&path, &plan).ok();
        let runs = self
            .store()
            .ok()
            .flatten()
            .and_then(|s| s.list_runs(200).ok())
            .unwrap_or_default()
            .into_iter()
            .filter(|r| r.plan_sha256 == plan.sha256)
            .take(10)
            .collect::<Vec<_>>();
        Ok(json!({
            "plan_id": plan.plan_id,
            "plan_sha256": plan.sha256,
            "status": approval.status,
            "may_run": approval.may_run,
            "reason": approval.reason,
            "approved_by": approval.approved_by,
            "decided_by": auth.as_ref().map(|a| a.decided_by.clone()).filter(|b| !b.is_empty()),
            "mcp_servers_pinned": auth.as_ref().map(|a| a.mcp.keys().cloned().collect::<Vec<_>>()).unwrap_or_default(),
            "runs": runs,
        }))
    }

    /// The execution database, or `None` when nothing has run in this workspace yet.
    fn store(&self) -> Result<Option<crate::store::Store>, Refusal> {
        if !self.session.db_path().exists() {
            return Ok(None);
        }
        self.session
            .existing_store()
            .map(Some)
            .map_err(|e| Refusal::from(e.to_string()))
    }

    fn list_runs(&self, args: &Value) -> Result<Value, Refusal> {
        let limit = args["limit"].as_u64().unwrap_or(20) as usize;
        let runs = match self.store()? {
            None => Vec::new(),
            Some(store) => store
                .list_runs(limit)
                .map_err(|e| Refusal::from(e.to_string()))?,
        };
        Ok(json!({"runs": runs}))
    }

    fn show_run(&self, args: &Value) -> Result<Value, Refusal> {
        let id = args["run_id"].as_str().unwrap_or_default();
        let Some(store) = self.store()? else {
            return Err(format!(
                "no run {}: nothing has run in this workspace yet",
                sanitize_line(id, 80)
            )
            .into());
        };
        let detail = store
            .run_detail(id)
            .map_err(|e| Refusal::from(e.to_string()))?;
        serde_json::to_value(detail).map_err(|e| Refusal::from(e.to_string()))
    }
}

/// What the server tells the client about itself.
const INSTRUCTIONS: &str = "acode-run runs approved plans in a sandbox. Write a plan with \
    submit_plan, check it with validate_plan and preview_plan, then ask the human to review and \
    approve it (acode-run approve) and to run it; plan_status, list_runs and show_run report \
    what happened. Approving and running are deliberately not offered.";

fn server_info() -> Value {
    json!({"name": "acode-run", "version": env!("CARGO_PKG_VERSION")})
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the server loop over `input` in a fresh workspace: (output lines, log).
    fn serve_text(input: &str) -> (Vec<Value>, String) {
        let dir = std::env::temp_dir().join(format!("acode-mcp-lines-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let session =
            Session::open(crate::runner::session::SessionOptions::new(&dir), None).unwrap();
        let (mut output, mut log) = (Vec::new(), Vec::new());
        serve_lines(&session, &mut input.as_bytes(), &mut output, &mut log);
        std::fs::remove_dir_all(&dir).unwrap();
        let lines = String::from_utf8(output).unwrap();
        let replies = lines
            .lines()
            .map(|l| serde_json::from_str(l).expect("every output line is JSON"))
            .collect();
        (replies, String::from_utf8(log).unwrap())
    }

    /// Found by the `mcp_server` fuzz target (docs/fuzzing.md): a stray reply got neither a reply
    /// nor a line in the server log. Every inbound line gets exactly one of the two.
    #[test]
    fn every_line_gets_one_reply_or_a_line_in_the_log() {
        let (replies, log) = serve_text("{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n");
        assert!(replies.is_empty(), "{replies:?}");
        assert!(
            log.contains("ignored a reply to no request of ours (id 7)"),
            "{log}"
        );

        let (replies, log) = serve_text("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\"}\n");
        assert!(replies.is_empty(), "{replies:?}");
        assert!(log.contains("notification notifications/x"), "{log}");

        let (replies, _) = serve_text(
            "{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"ping\"}\nnot json\n{\"id\":1}\n",
        );
        assert_eq!(replies.len(), 3, "{replies:?}");
        assert_eq!(replies[0]["id"], "a");
        assert_eq!(replies[1]["error"]["code"], -32700);
        assert_eq!(replies[2]["error"]["code"], -32600);
    }

    /// Found by the `mcp_server` fuzz target (finding 14, docs/fuzzing.md): an id of 48 digits
    /// was held as the nearest float and echoed as `2.0000000999999997e47`, which names another
    /// request. An id a reply cannot echo exactly is refused, the reply without an id (MCP's
    /// `RequestId` is string | integer); the largest integers, and integral floats, are echoed
    /// as written.
    #[test]
    fn an_id_a_reply_cannot_echo_exactly_is_refused_and_the_largest_integers_are_echoed() {
        for id in [
            "200000010000000000000000000000000000000000000000",
            "1.5",
            "1e300",
        ] {
            let (replies, _) = serve_text(&format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"ping\"}}\n"
            ));
            assert_eq!(replies.len(), 1, "{id}: {replies:?}");
            assert!(replies[0].get("id").is_none(), "{id}: {replies:?}");
            assert_eq!(replies[0]["error"]["code"], -32600, "{id}");
            assert!(
                replies[0]["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("the id must be a string or an integer a reply can echo exactly"),
                "{id}: {replies:?}"
            );
        }
        // Integers written as floats (JSON Schema's `integer` takes `1.0`) are echoed as written.
        for id in [
            "18446744073709551615",
            "-9223372036854775808",
            "0",
            "1.0",
            "-3.0",
        ] {
            let (replies, _) = serve_text(&format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"ping\"}}\n"
            ));
            assert_eq!(replies[0]["id"].to_string(), id, "{replies:?}");
            assert!(replies[0].get("result").is_some(), "{replies:?}");
        }
    }
}
