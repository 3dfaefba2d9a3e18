//! Run and step statuses as closed enums, stored as their snake_case names. The transitions are
//! drawn in `docs/recovery.md`.

use serde::Serialize;

/// Where a run stands. `Running` → `Completed` | `Failed` | `Interrupted` | `Cancelled`;
/// `Interrupted` → `Running` on resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// A process is executing it (or died without a word: read back as `Interrupted`).
    Running,
    /// Every step completed (or every failure was tolerated).
    Completed,
    /// At least one step failed.
    Failed,
    /// Stopped by a signal, Ctrl-C at a prompt, or its process died; can be resumed.
    Interrupted,
    /// The operator answered "quit" at a confirmation prompt; final, not resumed.
    Cancelled,
}

/// Where a step stands in the database. `Pending` → `Running` → `Completed` | `Failed`; `Pending` → `Blocked` |
/// `Skipped`; `Running` → `Cancelled` when a step beside it fails (`--jobs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepState {
    /// Not started yet.
    Pending,
    /// Started, not finished (if the run is gone: cut off mid-way).
    Running,
    /// Everything it was asked to do succeeded.
    Completed,
    /// It ran (or tried to) and failed.
    Failed,
    /// A step it depends on failed.
    Blocked,
    /// The run stopped before reaching it.
    Skipped,
    /// It was running beside a step that failed fatally (`--jobs`), and was stopped.
    Cancelled,
}

/// Gives an enum `as_str`, `parse`, `Display` and SQL conversions from one list of names.
macro_rules! sql_enum {
    ($ty:ident { $($variant:ident => $name:literal),* $(,)? }) => {
        impl $ty {
            /// The identifier stored in the database and shown to people.
            pub fn as_str(self) -> &'static str {
                match self { $($ty::$variant => $name),* }
            }

            /// The status named `s`, if any.
            pub fn parse(s: &str) -> Option<Self> {
                match s { $($name => Some($ty::$variant),)* _ => None }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.as_str())
            }
        }

        impl rusqlite::types::ToSql for $ty {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                Ok(rusqlite::types::ToSqlOutput::from(self.as_str()))
            }
        }

        impl rusqlite::types::FromSql for $ty {
            fn column_result(
                value: rusqlite::types::ValueRef<'_>,
            ) -> rusqlite::types::FromSqlResult<Self> {
                let s = value.as_str()?;
                $ty::parse(s).ok_or_else(|| {
                    rusqlite::types::FromSqlError::Other(format!("unknown {} {s:?}", stringify!($ty)).into())
                })
            }
        }
    };
}

sql_enum!(RunStatus {
    Running => "running",
    Completed => "completed",
    Failed => "failed",
    Interrupted => "interrupted",
    Cancelled => "cancelled",
});

sql_enum!(StepState {
    Pending => "pending",
    Running => "running",
    Completed => "completed",
    Failed => "failed",
    Blocked => "blocked",
    Skipped => "skipped",
    Cancelled => "cancelled",
});
