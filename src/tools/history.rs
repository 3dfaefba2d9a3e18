//! `history`: past executions of this workspace, read from the execution database (read-only).
//!
//! odincode's planner grounds itself in its execution log (`memory_query`, `execution_summary`);
//! this is the same for acode-run plans and agents: which tools ran, when, whether they failed and
//! why. The tools layer sits below the store, so the tool does not open the database: it asks a
//! [`HistorySource`] handed to it in the [`ToolContext`], which the executor implements over the
//! store **scoped to the run's workspace** — the tool cannot name another workspace, so another
//! workspace's runs sharing one `--db` are never shown. Entries are redacted (the store's redactor,
//! applied again on the way out), bounded ([`MAX_LIMIT`] entries, each text field cut to
//! [`MAX_FIELD_CHARS`]) and say when more matched.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::args::{parse, schema_for};
use super::files::walk::json_result;
use super::{Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};

/// Entries returned when `limit` is not given.
pub const DEFAULT_LIMIT: usize = 20;
/// The most entries one call returns, whatever `limit` asks.
pub const MAX_LIMIT: usize = 100;
/// Characters kept of an entry's arguments and error message.
pub const MAX_FIELD_CHARS: usize = 300;

/// Registers `history`.
pub fn register(r: &mut ToolRegistry) {
    r.register(Arc::new(History));
}

/// Which executions a `history` call asks for, already checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryQuery {
    /// Only this tool.
    pub tool: Option<String>,
    /// `Some(true)`: only successes; `Some(false)`: only failures.
    pub success: Option<bool>,
    /// Only executions started at or after this time (milliseconds since the Unix epoch).
    pub since_ms: Option<i64>,
    /// At most this many entries (newest first).
    pub limit: usize,
}

/// One past execution as the tool shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HistoryEntry {
    /// The run it belonged to.
    pub run_id: String,
    /// That run's plan.
    pub plan_id: String,
    /// The step.
    pub step_id: String,
    /// The tool.
    pub tool: String,
    /// When it started (milliseconds since the Unix epoch).
    pub started_at_ms: i64,
    /// How long it took.
    pub duration_ms: i64,
    /// `ok` or `failed`.
    pub status: String,
    /// A command's exit code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// The error kind of a failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    /// The error message of a failure (redacted, bounded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// The call's arguments as recorded (redacted, bounded JSON text).
    pub arguments: String,
}

/// What a source answers: the newest matching entries and whether more matched.
#[derive(Debug, Clone, Default)]
pub struct HistoryPage {
    /// Newest first.
    pub entries: Vec<HistoryEntry>,
    /// More executions matched than were returned.
    pub truncated: bool,
}

/// The tool's registered name.
pub const NAME: &str = "history";

/// Where `history` reads from: implemented by the executor over the execution database, scoped to
/// one workspace (the tool never says which; the source decides).
pub trait HistorySource {
    /// The newest executions matching `q`, at most `q.limit`; `Err` says why none could be read.
    fn query(&self, q: &HistoryQuery) -> Result<HistoryPage, String>;
    /// Redacts text the way the database does, applied again to everything shown.
    fn redact(&self, text: &str) -> String;
}

/// The arguments of `history`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HistoryArgs {
    /// Only executions of this tool (e.g. "run_command").
    #[schemars(length(min = 1))]
    pub tool: Option<String>,
    /// Only successful ("ok") or failed ("failed") executions.
    #[schemars(extend("enum" = ["ok", "failed"]))]
    pub status: Option<String>,
    /// Only executions since this time: an RFC 3339 time ("2026-11-25T10:00:00Z", or a date), a
    /// duration back from now ("2h", "30min", "7days"), or milliseconds since the Unix epoch.
    #[schemars(length(min = 1))]
    pub since: Option<String>,
    /// How many entries, newest first (default 20, at most 100).
    #[schemars(range(min = 1))]
    pub limit: Option<u64>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Parses `since` into milliseconds since the epoch; the error says which forms are accepted.
pub fn parse_since(s: &str, now_ms: i64) -> Result<i64, String> {
    let s = s.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse::<i64>()
            .map_err(|_| format!("'since' {s:?} is too large"));
    }
    if let Ok(t) = humantime::parse_rfc3339_weak(s) {
        return Ok(t
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64));
    }
    if s.len() == 10
        && let Ok(t) = humantime::parse_rfc3339_weak(&format!("{s}T00:00:00"))
    {
        return Ok(t
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64));
    }
    if let Ok(d) = humantime::parse_duration(s) {
        let back = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        return Ok(now_ms.saturating_sub(back));
    }
    Err(format!(
        "'since' {s:?} is not a time: give an RFC 3339 time (2026-11-25T10:00:00Z or 2026-11-25), \
         a duration back from now (2h, 30min, 7days) or milliseconds since the Unix epoch"
    ))
}

impl HistoryArgs {
    /// The query these arguments ask for, with the limit capped.
    pub fn query(&self, tool: &str, now_ms: i64) -> Result<(HistoryQuery, bool), ToolError> {
        let since_ms = match &self.since {
            None => None,
            Some(s) => Some(parse_since(s, now_ms).map_err(|m| ToolError::invalid(tool, m))?),
        };
        let success = match self.status.as_deref() {
            None => None,
            Some("ok") => Some(true),
            Some("failed") => Some(false),
            Some(other) => {
                return Err(ToolError::invalid(
                    tool,
                    format!("'status' {other:?} is not ok or failed"),
                ));
            }
        };
        let asked = self.limit.unwrap_or(DEFAULT_LIMIT as u64);
        if asked == 0 {
            return Err(ToolError::invalid(tool, "'limit' must be at least 1"));
        }
        let capped = asked > MAX_LIMIT as u64;
        let limit = if capped { MAX_LIMIT } else { asked as usize };
        Ok((
            HistoryQuery {
                tool: self.tool.clone(),
                success,
                since_ms,
                limit,
            },
            capped,
        ))
    }
}

/// `history`: see the module docs.
pub struct History;

impl Tool for History {
    fn name(&self) -> &'static str {
        NAME
    }

    fn description(&self) -> &'static str {
        "Past tool executions in this workspace, newest first, from the execution database (read-only): \
         filter by tool, status (ok or failed) and since (RFC 3339 time, duration like 2h, or epoch ms); \
         at most 100 entries, redacted."
    }

    fn schema(&self) -> Value {
        schema_for::<HistoryArgs>()
    }

    fn idempotent(&self) -> bool {
        true
    }

    fn check(&self, args: &Value, _ctx: &ToolContext) -> Result<(), ToolError> {
        let a: HistoryArgs = parse(self.name(), args)?;
        a.query(self.name(), now_ms()).map(|_| ())
    }

    fn summary(&self, args: &Value) -> String {
        args.get("tool")
            .and_then(Value::as_str)
            .unwrap_or("all tools")
            .to_string()
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let a: HistoryArgs = parse(self.name(), args)?;
        let (q, capped) = a.query(self.name(), now_ms())?;
        let source = ctx.history.ok_or_else(|| {
            ToolError::Failed("the execution history is not available to this call".to_string())
        })?;
        let page = source.query(&q).map_err(ToolError::Failed)?;
        let entries: Vec<HistoryEntry> = page
            .entries
            .into_iter()
            .map(|mut e| {
                e.arguments = crate::util::ellipsize(&source.redact(&e.arguments), MAX_FIELD_CHARS);
                e.error_message = e
                    .error_message
                    .map(|m| crate::util::ellipsize(&source.redact(&m), MAX_FIELD_CHARS));
                e.step_id = source.redact(&e.step_id);
                e.plan_id = source.redact(&e.plan_id);
                e
            })
            .collect();
        let mut notes = Vec::new();
        if capped {
            notes.push(format!("limit capped at {MAX_LIMIT}"));
        }
        if page.truncated {
            notes.push(format!(
                "truncated: more executions match than the {} shown; narrow tool, status or since",
                entries.len()
            ));
        }
        let note = (!notes.is_empty()).then(|| notes.join("; "));
        let data = json!({"entries": entries, "truncated": page.truncated});
        Ok(json_result(data, page.truncated, note))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_forms() {
        let now = 1_800_000_000_000;
        assert_eq!(
            parse_since("1700000000000", now).unwrap(),
            1_700_000_000_000
        );
        assert_eq!(parse_since("2h", now).unwrap(), now - 7_200_000);
        assert_eq!(
            parse_since("2026-11-25T10:00:00Z", now).unwrap(),
            1_795_600_800_000
        );
        assert_eq!(parse_since("2026-11-25", now).unwrap(), 1_795_564_800_000);
        let e = parse_since("yesterday-ish", now).unwrap_err();
        assert!(e.contains("RFC 3339") && e.contains("yesterday-ish"), "{e}");
    }

    #[test]
    fn limit_is_capped_and_status_mapped() {
        let a: HistoryArgs = parse(
            "history",
            &json!({"limit": 5000, "status": "failed", "tool": "run_command"}),
        )
        .unwrap();
        let (q, capped) = a.query("history", 0).unwrap();
        assert!(capped);
        assert_eq!(q.limit, MAX_LIMIT);
        assert_eq!(q.success, Some(false));
        assert_eq!(q.tool.as_deref(), Some("run_command"));
        let a: HistoryArgs = parse("history", &json!({"status": "maybe"})).unwrap();
        let e = a.query("history", 0).unwrap_err();
        assert!(e.to_string().contains("'status' \"maybe\""), "{e}");
        assert_eq!(
            crate::util::ellipsize(&"x".repeat(400), MAX_FIELD_CHARS)
                .chars()
                .count(),
            MAX_FIELD_CHARS + 1
        );
    }
}
