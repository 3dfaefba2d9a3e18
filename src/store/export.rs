//! `acode-run export RUN_ID --jsonl [FILE]` (issue 48): every row of one run, for a data
//! warehouse — one JSON object per row, its table named in `"table"`, every other member a column
//! as SQLite holds it (JSON text columns stay text; `docs/export.schema.json`).
//!
//! The rows of a run are the ones `merge` copies ([`super::merge::RUN_TABLES`]), then the
//! decisions on its plan's hash, the reviews that judged it and where a merge took it from.
//! Streamed row by row: an artifact of many megabytes is one line, never the whole run in memory.

use rusqlite::types::ValueRef;
use serde_json::{Map, Value};
use thiserror::Error;

use super::{Store, StoreError};

/// Why an export stopped.
#[derive(Debug, Error)]
pub enum ExportError {
    /// The database could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The output could not be written.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// The tables an export writes, in order, each with the condition that selects a run's rows
/// (`?1` the run id, `?2` its plan hash).
fn export_tables() -> Vec<(&'static str, String)> {
    let mut tables: Vec<(&'static str, String)> = super::merge::RUN_TABLES
        .iter()
        .map(|(t, filter)| (*t, filter.replace("{s}", "main")))
        .collect();
    tables.push(("decisions", "plan_sha256 = ?2".to_string()));
    tables.push((
        "reviews",
        "judged_run_id = ?1 OR review_run_id = ?1".to_string(),
    ));
    tables.push((super::merge::SOURCES_TABLE, "run_id = ?1".to_string()));
    tables
}

/// Every table an export can write a row of (what `docs/export.schema.json` describes).
pub fn export_table_names() -> Vec<&'static str> {
    export_tables().into_iter().map(|(t, _)| t).collect()
}

fn value(v: ValueRef<'_>) -> Value {
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(n) => Value::from(n),
        ValueRef::Real(x) => serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number),
        ValueRef::Text(t) => Value::String(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => {
            use base64::Engine as _;
            Value::String(base64::engine::general_purpose::STANDARD.encode(b))
        }
    }
}

impl Store {
    /// Calls `each` with every row of run `run_id` (an id or a unique prefix) as a JSON object
    /// tagged with its table, in the order of [`export_tables`] (rows in the order they were
    /// written); the number of rows.
    pub fn export_run(
        &self,
        run_id: &str,
        each: &mut dyn FnMut(Map<String, Value>) -> std::io::Result<()>,
    ) -> Result<usize, ExportError> {
        let run = self.run(run_id)?;
        let mut rows = 0;
        for (table, filter) in export_tables() {
            let mut stmt = self
                .conn
                .prepare(&format!(
                    "SELECT * FROM {table} WHERE {filter} ORDER BY rowid"
                ))
                .map_err(StoreError::from)?;
            let names: Vec<String> = stmt.column_names().map(|c| c.to_string()).collect();
            // Only the parameters a condition names are bound.
            let mut found = if filter.contains("?2") {
                stmt.query(rusqlite::params![run.run_id, run.plan_sha256])
            } else {
                stmt.query([&run.run_id])
            }
            .map_err(StoreError::from)?;
            while let Some(row) = found.next().map_err(StoreError::from)? {
                let mut object = Map::new();
                object.insert("table".into(), Value::String(table.to_string()));
                for (i, name) in names.iter().enumerate() {
                    object.insert(
                        name.clone(),
                        value(row.get_ref(i).map_err(StoreError::from)?),
                    );
                }
                each(object)?;
                rows += 1;
            }
        }
        Ok(rows)
    }
}
