//! The `history` tool's query: past executions of one workspace (see `tools::history`).

use rusqlite::params;

use super::{Store, StoreError};
use crate::tools::history::{HistoryEntry, HistoryPage, HistoryQuery};

/// The query: newest first (ties by insertion order), so that it walks the `executions_started`
/// index (migration 12) backwards and stops after `LIMIT` rows.
const HISTORY_SQL: &str =
    "SELECT e.run_id, r.plan_id, e.step_id, e.tool_name, e.started_at, e.duration_ms,
        e.success, e.exit_code, e.error_code, e.error_message, e.arguments_json
 FROM executions e JOIN runs r ON r.run_id = e.run_id
 WHERE r.workspace = ?1
   AND (?2 IS NULL OR e.tool_name = ?2)
   AND (?3 IS NULL OR e.success = ?3)
   AND (?4 IS NULL OR e.started_at >= ?4)
 ORDER BY e.started_at DESC, e.rowid DESC
 LIMIT ?5";

impl Store {
    /// The newest executions of runs in `workspace` (the runs' recorded workspace root, exactly)
    /// matching `q`: at most `q.limit`, and whether more matched. Runs of other workspaces in the
    /// same database are never read.
    pub fn history(&self, workspace: &str, q: &HistoryQuery) -> Result<HistoryPage, StoreError> {
        let mut stmt = self.conn.prepare_cached(HISTORY_SQL)?;
        let fetch = i64::try_from(q.limit).unwrap_or(i64::MAX).saturating_add(1);
        let mut entries = stmt
            .query_map(
                params![workspace, q.tool, q.success, q.since_ms, fetch],
                |r| {
                    Ok(HistoryEntry {
                        run_id: r.get(0)?,
                        plan_id: r.get(1)?,
                        step_id: r.get(2)?,
                        tool: r.get(3)?,
                        started_at_ms: r.get(4)?,
                        duration_ms: r.get(5)?,
                        status: if r.get::<_, bool>(6)? { "ok" } else { "failed" }.to_string(),
                        exit_code: r.get(7)?,
                        error_code: r.get(8)?,
                        error_message: r.get(9)?,
                        arguments: r.get(10)?,
                    })
                },
            )?
            .collect::<Result<Vec<_>, _>>()?;
        let truncated = entries.len() > q.limit;
        entries.truncate(q.limit);
        Ok(HistoryPage { entries, truncated })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan SQLite chooses for the query, one detail line each.
    fn plan(store: &Store) -> Vec<String> {
        let mut stmt = store
            .conn
            .prepare(&format!("EXPLAIN QUERY PLAN {HISTORY_SQL}"))
            .unwrap();
        stmt.query_map(
            params!["/ws", None::<String>, None::<bool>, None::<i64>, 10],
            |r| r.get::<_, String>(3),
        )
        .unwrap()
        .map(Result::unwrap)
        .collect()
    }

    #[test]
    fn the_history_query_walks_the_started_at_index_without_sorting() {
        let store = Store::open_in_memory().unwrap();
        let lines = plan(&store);
        assert!(
            lines
                .iter()
                .any(|l| l.contains("SCAN e USING INDEX executions_started")),
            "{lines:?}"
        );
        assert!(
            !lines.iter().any(|l| l.contains("TEMP B-TREE")),
            "the query sorts every execution: {lines:?}"
        );
    }
}
