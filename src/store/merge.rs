//! `acode-run merge OUT IN…` (issue 48): many machines' run records into one database.
//!
//! - **Nothing lost, nothing twice.** Every row of every run (the run, its steps, executions,
//!   artifacts and network requests — model traffic is executions and artifacts) is copied, and
//!   the append-only logs (decisions, reviews) row by row where no equal row is there yet. A run
//!   already in `OUT` with the same content is skipped, so merging the same input twice changes
//!   nothing. "The same content" is [`run_digest`]: SHA-256 over every non-NULL column of every
//!   row of the run, rows in a content order (never `rowid`), so an older copy that a newer
//!   acode-run has migrated (new columns, all NULL) is still the same run.
//! - **Conflicts refused.** A run id whose content differs is [`MergeError::Conflict`] naming the
//!   file each copy came from (`run_sources` keeps where every merged run came from).
//! - **All or nothing.** `OUT` is copied (`VACUUM INTO`) to a temporary file beside it, the
//!   inputs are merged into that copy, and only a merge that went through replaces `OUT` by a
//!   rename; any refusal leaves `OUT` as it was and no temporary file behind.
//! - **Bounded memory.** One input at a time is `ATTACH`ed read-only, checked and copied by
//!   `INSERT … SELECT` inside SQLite; its run ids are read one at a time from a cursor. What is in
//!   memory is SQLite's page caches and one run's digest, whatever the number or size of inputs.
//! - **Inputs are checked before a row is taken** ([`InputProblem`]): an SQLite file acode-run
//!   wrote, not truncated or damaged (`quick_check`, `foreign_key_check`), not from a newer
//!   schema (refused from the file header, without opening it for writing), and with recorded
//!   approvals that verify ([`check_approvals`], docs/database.md "Merging").

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use sha2::{Digest, Sha256};
use thiserror::Error;

use super::migrations;

/// The tables whose rows belong to one run, in the order they are copied, each with the SQL
/// condition (on schema `{s}`) that selects one run's rows (`?1`: the run id).
pub const RUN_TABLES: &[(&str, &str)] = &[
    ("runs", "run_id = ?1"),
    ("steps", "run_id = ?1"),
    ("executions", "run_id = ?1"),
    (
        "artifacts",
        "execution_id IN (SELECT execution_id FROM {s}.executions WHERE run_id = ?1)",
    ),
    ("network_requests", "run_id = ?1"),
    ("run_files", "run_id = ?1"),
];

/// The append-only tables, merged row by row: a row is added when no equal row is there.
pub const LOG_TABLES: &[&str] = &["decisions", "reviews"];

/// The table that says where each merged run came from (kept up by the merge itself).
pub const SOURCES_TABLE: &str = "run_sources";

/// An approval recorded before the run it allowed may be dated this much later than the run's
/// start and still verify: the two times come from different machines' clocks.
pub const CLOCK_SKEW_MS: i64 = 10 * 60 * 1000;

/// What a merge did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MergeReport {
    /// Input files read.
    pub inputs: usize,
    /// Runs copied into the output.
    pub runs_added: usize,
    /// Runs that were there already, with the same content.
    pub runs_present: usize,
    /// Decisions and reviews copied.
    pub log_rows_added: usize,
}

/// Why an input cannot be merged.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum InputProblem {
    /// Not a regular file.
    #[error("not a regular file")]
    NotAFile,
    /// Cannot be opened or read.
    #[error("cannot be read ({0})")]
    Unreadable(String),
    /// Not an SQLite database at all.
    #[error("not an SQLite database")]
    NotSqlite,
    /// Shorter than its own header says: cut off while it was copied.
    #[error("truncated: the header says {expected} bytes, the file has {actual}")]
    Truncated {
        /// What the header says.
        expected: u64,
        /// What the file holds.
        actual: u64,
    },
    /// SQLite, but not a database acode-run wrote.
    #[error("not an acode-run execution database ({0})")]
    NotAcode(String),
    /// Damaged: SQLite's own checks fail.
    #[error("damaged: {0}")]
    Damaged(String),
    /// Written by a newer acode-run.
    #[error("database schema {found} is newer than this acode-run ({known}): upgrade acode-run")]
    TooNew {
        /// Its `user_version`.
        found: i64,
        /// The newest this binary knows.
        known: i64,
    },
    /// A recorded approval that does not verify.
    #[error("an approval does not verify: {0}")]
    Approval(String),
}

/// Why a merge did not happen (nothing was written).
#[derive(Debug, Error)]
pub enum MergeError {
    /// Nothing to merge, or the output is one of the inputs (the caller's mistake).
    #[error("{0}")]
    Usage(String),
    /// One run id, two contents.
    #[error(
        "run {run_id} differs between {first} and {second}: one run id with different content; \
         nothing was merged"
    )]
    Conflict {
        /// The run.
        run_id: String,
        /// Where the copy already merged (or recorded in the output) came from.
        first: String,
        /// The input holding the other copy.
        second: String,
    },
    /// An input (or the output) that cannot be merged.
    #[error("{path}: {problem}; nothing was merged")]
    Input {
        /// The file.
        path: String,
        /// What is wrong with it.
        problem: InputProblem,
    },
    /// The output's write-ahead log holds writes not yet in the file: another process has it
    /// open, or one stopped while writing it.
    #[error(
        "{path}: its write-ahead log ({path}-wal) holds writes not yet in the file (another \
         process has it open, or one stopped while writing); let it finish, or open it once \
         (`acode-run runs --db {path}`) to fold the log in, then merge again"
    )]
    OutputBusy {
        /// The output file.
        path: String,
    },
    /// Reading or writing failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// SQLite failed while merging.
    #[error("{path}: {source}")]
    Sql {
        /// The input being merged, or the output.
        path: String,
        /// The error.
        source: rusqlite::Error,
    },
}

fn input_err(path: &Path, problem: InputProblem) -> MergeError {
    MergeError::Input {
        path: path.display().to_string(),
        problem,
    }
}

fn sql_err(path: &Path) -> impl Fn(rusqlite::Error) -> MergeError + '_ {
    move |source| MergeError::Sql {
        path: path.display().to_string(),
        source,
    }
}

/// Device and inode of an existing file.
fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// `path` as an SQLite URI opening it read-only (every byte but unreserved ones percent-encoded,
/// so `?`, `#` and `%` in a file name stay part of it).
fn read_only_uri(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut uri = String::from("file:");
    for &b in crate::workspace::absolute(path).as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri.push_str("?mode=ro");
    uri
}

/// Checks the file header of a database: an SQLite file, as long as its header says, of a schema
/// this binary knows. Reads 100 bytes; writes nothing.
fn check_header(path: &Path) -> Result<(), InputProblem> {
    use std::io::Read as _;
    let meta = std::fs::metadata(path).map_err(|e| InputProblem::Unreadable(e.to_string()))?;
    if !meta.is_file() {
        return Err(InputProblem::NotAFile);
    }
    let mut header = [0u8; 100];
    let mut f = std::fs::File::open(path).map_err(|e| InputProblem::Unreadable(e.to_string()))?;
    let mut read = 0;
    while read < header.len() {
        match f.read(&mut header[read..]) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(e) => return Err(InputProblem::Unreadable(e.to_string())),
        }
    }
    if read < header.len() || !header.starts_with(b"SQLite format 3\0") {
        return Err(InputProblem::NotSqlite);
    }
    // File format §1.3: page size at 16 (1 means 65536); the size in pages at 28, valid when
    // the change counter at 24 equals the "version valid for" number at 92.
    let be32 = |at: usize| {
        u32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    let page = match u16::from_be_bytes([header[16], header[17]]) {
        1 => 65536u64,
        n => u64::from(n),
    };
    let pages = u64::from(be32(28));
    if be32(24) == be32(92) && pages > 0 && page.saturating_mul(pages) > meta.len() {
        return Err(InputProblem::Truncated {
            expected: page.saturating_mul(pages),
            actual: meta.len(),
        });
    }
    let version = migrations::version_on_disk(path)
        .map_err(|e| InputProblem::Damaged(e.to_string()))?
        .unwrap_or(0);
    if version > migrations::latest() {
        return Err(InputProblem::TooNew {
            found: version,
            known: migrations::latest(),
        });
    }
    if version <= 0 {
        return Err(InputProblem::NotAcode(
            "its schema version is 0: acode-run never wrote to it, or its records are in the write-ahead log beside it (NAME-wal) and that was not copied with it".to_string(),
        ));
    }
    Ok(())
}

/// The columns of `schema.table`, in order (empty when there is no such table).
fn columns(conn: &Connection, schema: &str, table: &str) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare(&format!("PRAGMA {schema}.table_info({table})"))?;
    let cols = stmt
        .query_map([], |r| r.get::<_, String>(1))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(cols)
}

/// One table of a run with the columns both databases have.
struct Shared {
    table: &'static str,
    filter: &'static str,
    columns: Vec<String>,
}

impl Shared {
    fn column_list(&self) -> String {
        self.columns
            .iter()
            .map(|c| format!("\"{c}\""))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn select(&self, schema: &str) -> String {
        let cols = self.column_list();
        let order: Vec<String> = (1..=self.columns.len()).map(|i| i.to_string()).collect();
        format!(
            "SELECT {cols} FROM {schema}.{} WHERE {} ORDER BY {}",
            self.table,
            self.filter.replace("{s}", schema),
            order.join(", ")
        )
    }
}

/// The digest of run `run_id` in `schema` over `tables`: SHA-256 of every non-NULL value with
/// its column's name, rows in the order of their values (so neither `rowid`s nor columns a later
/// schema added and left NULL change it).
fn run_digest(
    conn: &Connection,
    schema: &str,
    run_id: &str,
    tables: &[Shared],
) -> rusqlite::Result<String> {
    use rusqlite::types::ValueRef;
    let mut hash = Sha256::new();
    let field = |hash: &mut Sha256, bytes: &[u8]| {
        hash.update((bytes.len() as u64).to_be_bytes());
        hash.update(bytes);
    };
    for t in tables {
        field(&mut hash, t.table.as_bytes());
        let mut stmt = conn.prepare(&t.select(schema))?;
        let mut rows = stmt.query([run_id])?;
        while let Some(row) = rows.next()? {
            hash.update(b"R");
            for (i, name) in t.columns.iter().enumerate() {
                let value = row.get_ref(i)?;
                if value == ValueRef::Null {
                    continue;
                }
                field(&mut hash, name.as_bytes());
                match value {
                    ValueRef::Null => {}
                    ValueRef::Integer(n) => {
                        hash.update(b"i");
                        hash.update(n.to_be_bytes());
                    }
                    ValueRef::Real(x) => {
                        hash.update(b"f");
                        hash.update(x.to_bits().to_be_bytes());
                    }
                    ValueRef::Text(s) => {
                        hash.update(b"t");
                        field(&mut hash, s);
                    }
                    ValueRef::Blob(b) => {
                        hash.update(b"b");
                        field(&mut hash, b);
                    }
                }
            }
        }
    }
    Ok(crate::util::hex(&hash.finalize()))
}

/// Whether `s` is a lower-case hex SHA-256.
fn is_sha256(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// What "a recorded approval verifies" means for a database merged from elsewhere (the record
/// holds no signature to check again; an attestation does — docs/database.md "Merging"): every
/// decision is an approval or a rejection of a SHA-256 by someone, and every plan run's recorded
/// header (when it has one) reads, names who approved, says `verified`, `unchecked` or `none`
/// about the signature, binds a policy (`none` or a SHA-256), and is dated before the run started
/// (within [`CLOCK_SKEW_MS`]).
fn check_approvals(conn: &Connection, schema: &str) -> Result<(), String> {
    let sql_err = |e: rusqlite::Error| e.to_string();
    let mut stmt = conn
        .prepare(&format!(
            "SELECT plan_sha256, verdict, decided_by FROM {schema}.decisions"
        ))
        .map_err(sql_err)?;
    let mut rows = stmt.query([]).map_err(sql_err)?;
    while let Some(r) = rows.next().map_err(sql_err)? {
        let (sha, verdict, by): (String, String, String) = (
            r.get(0).map_err(sql_err)?,
            r.get(1).map_err(sql_err)?,
            r.get(2).map_err(sql_err)?,
        );
        if !is_sha256(&sha) || !matches!(verdict.as_str(), "approved" | "rejected") || by.is_empty()
        {
            return Err(format!(
                "a decision ({verdict:?} of {sha:?} by {by:?}) is not an approval or rejection of \
                 a plan hash by someone"
            ));
        }
    }
    let has_header = columns(conn, schema, "runs")
        .map_err(sql_err)?
        .iter()
        .any(|c| c == "header_json");
    let has_kind = columns(conn, schema, "runs")
        .map_err(sql_err)?
        .iter()
        .any(|c| c == "kind");
    let header = if has_header { "header_json" } else { "NULL" };
    let kind = if has_kind { "kind" } else { "'run'" };
    let mut stmt = conn
        .prepare(&format!(
            "SELECT run_id, plan_sha256, started_at, {header}, {kind} FROM {schema}.runs"
        ))
        .map_err(sql_err)?;
    let mut rows = stmt.query([]).map_err(sql_err)?;
    while let Some(r) = rows.next().map_err(sql_err)? {
        let run_id: String = r.get(0).map_err(sql_err)?;
        let sha: String = r.get(1).map_err(sql_err)?;
        let started: i64 = r.get(2).map_err(sql_err)?;
        let header: Option<String> = r.get(3).map_err(sql_err)?;
        let kind: String = r.get(4).map_err(sql_err)?;
        if kind != "run" {
            continue;
        }
        if !is_sha256(&sha) {
            return Err(format!(
                "run {run_id}: its plan hash {sha:?} is not a SHA-256"
            ));
        }
        let Some(header) = header else { continue };
        let h: super::RunHeader = serde_json::from_str(&header)
            .map_err(|e| format!("run {run_id}: its recorded approval does not read ({e})"))?;
        let a = &h.approval;
        if a.decided_by.trim().is_empty() {
            return Err(format!("run {run_id}: its approval names nobody"));
        }
        if !matches!(a.signature.as_str(), "verified" | "unchecked" | "none") {
            return Err(format!(
                "run {run_id}: its approval's signature is {:?} (expected verified, unchecked or \
                 none)",
                a.signature
            ));
        }
        if a.policy_sha256 != crate::plan::auth::NO_POLICY && !is_sha256(&a.policy_sha256) {
            return Err(format!(
                "run {run_id}: its approval binds no policy ({:?})",
                a.policy_sha256
            ));
        }
        if a.decided_at > started.saturating_add(CLOCK_SKEW_MS) {
            return Err(format!(
                "run {run_id}: approved at {} UTC, after the run started at {} UTC",
                crate::error::format_ms(a.decided_at),
                crate::error::format_ms(started)
            ));
        }
    }
    Ok(())
}

/// Checks an attached input (`src`): SQLite's own checks, the tables acode-run writes, and its
/// approvals.
fn check_attached(conn: &Connection) -> Result<(), InputProblem> {
    let damaged = |e: rusqlite::Error| InputProblem::Damaged(e.to_string());
    let check: String = conn
        .query_row("PRAGMA src.quick_check(1)", [], |r| r.get(0))
        .map_err(damaged)?;
    if check != "ok" {
        return Err(InputProblem::Damaged(check));
    }
    for (table, _) in RUN_TABLES.iter().take(4) {
        if columns(conn, "src", table).map_err(damaged)?.is_empty() {
            return Err(InputProblem::NotAcode(format!("it has no table {table}")));
        }
    }
    let dangling: Option<(String, i64, String)> = conn
        .query_row("PRAGMA src.foreign_key_check", [], |r| {
            Ok((
                r.get(0)?,
                r.get::<_, Option<i64>>(1)?.unwrap_or(0),
                r.get(2)?,
            ))
        })
        .optional()
        .map_err(damaged)?;
    if let Some((table, row, parent)) = dangling {
        return Err(InputProblem::Damaged(format!(
            "row {row} of {table} points to a {parent} row that is not there"
        )));
    }
    check_approvals(conn, "src").map_err(InputProblem::Approval)
}

/// Merges the run records of `inputs` into `out` (created when missing); see the module docs.
/// `progress` is told each input as it is merged.
pub fn merge(
    out: &Path,
    inputs: &[PathBuf],
    mut progress: impl FnMut(&Path),
) -> Result<MergeReport, MergeError> {
    if inputs.is_empty() {
        return Err(MergeError::Usage(
            "nothing to merge: name input databases, or --from-dir DIR".to_string(),
        ));
    }
    let out_id = file_id(out);
    let out_abs = crate::workspace::absolute(out);
    for input in inputs {
        let same = match (out_id, file_id(input)) {
            (Some(a), Some(b)) => a == b,
            _ => crate::workspace::absolute(input) == out_abs,
        };
        if same {
            return Err(MergeError::Usage(format!(
                "{}: the output is also an input; write the merged database elsewhere",
                input.display()
            )));
        }
    }
    if out_id.is_some() {
        check_header(out).map_err(|p| input_err(out, p))?;
    }
    let wal_busy = |out: &Path| {
        let mut wal = out.as_os_str().to_owned();
        wal.push("-wal");
        std::fs::metadata(PathBuf::from(wal)).is_ok_and(|m| m.len() > 0)
    };
    if wal_busy(out) {
        return Err(MergeError::OutputBusy {
            path: out.display().to_string(),
        });
    }
    let temp = crate::util::temp_beside(out);
    let merged = merge_into_temp(out, out_id.is_some(), &temp, inputs, &mut progress);
    let report = match merged {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_file(&temp);
            return Err(e);
        }
    };
    if wal_busy(out) {
        let _ = std::fs::remove_file(&temp);
        return Err(MergeError::OutputBusy {
            path: out.display().to_string(),
        });
    }
    crate::util::replace_with(&temp, out).map_err(|source| MergeError::Io {
        path: out.display().to_string(),
        source,
    })?;
    Ok(report)
}

/// The merge proper, into `temp` (a copy of `out` when it exists).
fn merge_into_temp(
    out: &Path,
    out_exists: bool,
    temp: &Path,
    inputs: &[PathBuf],
    progress: &mut impl FnMut(&Path),
) -> Result<MergeReport, MergeError> {
    if out_exists {
        let conn = Connection::open_with_flags(out, OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(sql_err(out))?;
        conn.execute("VACUUM INTO ?1", [temp.to_string_lossy()])
            .map_err(sql_err(out))?;
    }
    let mut conn = Connection::open(temp).map_err(sql_err(out))?;
    // The temporary file is thrown away on any failure: no journal needed, nothing to sync
    // until the end (`replace_with` syncs it before the rename).
    conn.pragma_update(None, "journal_mode", "OFF")
        .map_err(sql_err(out))?;
    conn.pragma_update(None, "synchronous", "OFF")
        .map_err(sql_err(out))?;
    migrations::migrate(&mut conn).map_err(|e| match e {
        super::StoreError::TooNew { found, known } => {
            input_err(out, InputProblem::TooNew { found, known })
        }
        other => MergeError::Sql {
            path: out.display().to_string(),
            source: match other {
                super::StoreError::Sql(e) => e,
                _ => rusqlite::Error::InvalidQuery,
            },
        },
    })?;
    let mut report = MergeReport::default();
    for input in inputs {
        progress(input);
        merge_one(&conn, out, input, &mut report)?;
        report.inputs += 1;
    }
    conn.pragma_update(None, "journal_mode", "DELETE")
        .map_err(sql_err(out))?;
    drop(conn);
    Ok(report)
}

/// Attaches `input` as `src`, merges it, detaches it (also when it fails).
fn merge_one(
    conn: &Connection,
    out: &Path,
    input: &Path,
    report: &mut MergeReport,
) -> Result<(), MergeError> {
    check_header(input).map_err(|p| input_err(input, p))?;
    conn.execute("ATTACH DATABASE ?1 AS src", [read_only_uri(input)])
        .map_err(|e| match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::NotADatabase) => input_err(input, InputProblem::NotSqlite),
            _ => sql_err(input)(e),
        })?;
    let merged = check_attached(conn)
        .map_err(|p| input_err(input, p))
        .and_then(|()| copy_runs(conn, out, input, report));
    let detached = conn
        .execute("DETACH DATABASE src", [])
        .map_err(sql_err(input));
    merged.and(detached.map(|_| ()))
}

/// The run tables with the columns both databases have (a table neither column of which is shared
/// is left out).
fn shared_tables(conn: &Connection, input: &Path) -> Result<Vec<Shared>, MergeError> {
    let sql = sql_err(input);
    let mut tables = Vec::new();
    for (table, filter) in RUN_TABLES {
        let main_cols = columns(conn, "main", table).map_err(&sql)?;
        let src_cols: BTreeSet<String> = columns(conn, "src", table)
            .map_err(&sql)?
            .into_iter()
            .collect();
        let shared: Vec<String> = main_cols
            .into_iter()
            .filter(|c| src_cols.contains(c))
            .collect();
        if !shared.is_empty() {
            tables.push(Shared {
                table,
                filter,
                columns: shared,
            });
        }
    }
    Ok(tables)
}

/// Adds the log rows of `src` that `main` lacks (compared over the columns both have).
fn copy_log_rows(
    conn: &Connection,
    input: &Path,
    report: &mut MergeReport,
) -> Result<(), MergeError> {
    let sql = sql_err(input);
    for table in LOG_TABLES {
        let main_cols = columns(conn, "main", table).map_err(&sql)?;
        let src_cols: BTreeSet<String> = columns(conn, "src", table)
            .map_err(&sql)?
            .into_iter()
            .collect();
        let shared: Vec<&String> = main_cols.iter().filter(|c| src_cols.contains(*c)).collect();
        if shared.is_empty() {
            continue;
        }
        let list = shared
            .iter()
            .map(|c| format!("\"{c}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let same = shared
            .iter()
            .map(|c| format!("m.\"{c}\" IS s.\"{c}\""))
            .collect::<Vec<_>>()
            .join(" AND ");
        let added = conn
            .execute(
                &format!(
                    "INSERT INTO main.{table} ({list}) SELECT {list} FROM src.{table} s
                     WHERE NOT EXISTS (SELECT 1 FROM main.{table} m WHERE {same})
                     ORDER BY s.rowid"
                ),
                [],
            )
            .map_err(&sql)?;
        report.log_rows_added += added;
    }
    Ok(())
}

/// Copies every run of `src` that `main` lacks, and the log rows it lacks, in one transaction.
fn copy_runs(
    conn: &Connection,
    out: &Path,
    input: &Path,
    report: &mut MergeReport,
) -> Result<(), MergeError> {
    let sql = sql_err(input);
    let tables = shared_tables(conn, input)?;
    let src_sources = !columns(conn, "src", SOURCES_TABLE)
        .map_err(&sql)?
        .is_empty();
    conn.execute_batch("BEGIN").map_err(&sql)?;
    let copied = (|| -> Result<(), MergeError> {
        let mut ids = conn
            .prepare("SELECT run_id FROM src.runs ORDER BY rowid")
            .map_err(&sql)?;
        let mut rows = ids.query([]).map_err(&sql)?;
        while let Some(row) = rows.next().map_err(&sql)? {
            let run_id: String = row.get(0).map_err(&sql)?;
            let digest = run_digest(conn, "src", &run_id, &tables).map_err(&sql)?;
            // Where this copy first came from: the input, or the file a merged input took it from.
            let origin: String = if src_sources {
                conn.query_row(
                    "SELECT source FROM src.run_sources WHERE run_id = ?1",
                    [&run_id],
                    |r| r.get(0),
                )
                .optional()
                .map_err(&sql)?
            } else {
                None
            }
            .unwrap_or_else(|| input.display().to_string());
            let present: bool = conn
                .query_row(
                    "SELECT count(*) FROM main.runs WHERE run_id = ?1",
                    [&run_id],
                    |r| r.get::<_, i64>(0),
                )
                .map_err(&sql)?
                > 0;
            if present {
                let recorded: Option<(String, String)> = conn
                    .query_row(
                        "SELECT content_sha256, source FROM main.run_sources WHERE run_id = ?1",
                        [&run_id],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .optional()
                    .map_err(&sql)?;
                let (theirs, first) = match recorded {
                    Some((d, source)) if d == digest => (d, source),
                    // Recorded in the output itself, or merged from a copy with other columns:
                    // compared over the columns both have.
                    other => (
                        run_digest(conn, "main", &run_id, &tables).map_err(sql_err(out))?,
                        other.map_or_else(|| out.display().to_string(), |(_, s)| s),
                    ),
                };
                if theirs != digest {
                    let second = if origin == input.display().to_string() {
                        origin
                    } else {
                        format!("{} (from {origin})", input.display())
                    };
                    return Err(MergeError::Conflict {
                        run_id,
                        first,
                        second,
                    });
                }
                report.runs_present += 1;
                continue;
            }
            for t in &tables {
                let cols = t.column_list();
                let insert = format!(
                    "INSERT INTO main.{table} ({cols}) SELECT {cols} FROM src.{table} WHERE {filter}
                     ORDER BY rowid",
                    table = t.table,
                    filter = t.filter.replace("{s}", "src"),
                );
                conn.execute(&insert, [&run_id]).map_err(|e| {
                    if e.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation) {
                        MergeError::Conflict {
                            run_id: run_id.clone(),
                            first: out.display().to_string(),
                            second: format!(
                                "{} (a row of its {} has the key of a row of another run)",
                                input.display(),
                                t.table
                            ),
                        }
                    } else {
                        sql(e)
                    }
                })?;
            }
            conn.execute(
                "INSERT INTO main.run_sources (run_id, source, content_sha256, merged_at)
                 VALUES (?1, ?2, ?3, ?4)",
                params![run_id, origin, digest, crate::error::now_ms()],
            )
            .map_err(&sql)?;
            report.runs_added += 1;
        }
        copy_log_rows(conn, input, report)?;
        Ok(())
    })();
    match copied {
        Ok(()) => conn.execute_batch("COMMIT").map_err(&sql),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

/// The `.db` files under `dir` (recursively, links not followed), sorted: what `--from-dir`
/// merges. A CI's downloaded artifacts land as `DIR/NAME/executions.db`.
pub fn databases_in(dir: &Path) -> Result<Vec<PathBuf>, MergeError> {
    if !dir.is_dir() {
        return Err(MergeError::Usage(format!(
            "--from-dir {}: not a directory",
            dir.display()
        )));
    }
    let mut found = Vec::new();
    for entry in walkdir::WalkDir::new(dir)
        .follow_links(false)
        .sort_by_file_name()
    {
        let entry = entry.map_err(|e| MergeError::Io {
            path: dir.display().to_string(),
            source: e.into(),
        })?;
        if entry.file_type().is_file() && entry.path().extension().is_some_and(|e| e == "db") {
            found.push(entry.into_path());
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_of_the_schema_is_merged() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrations::migrate(&mut conn).unwrap();
        let mut stmt = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .unwrap();
        let tables: BTreeSet<String> = stmt
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let known: BTreeSet<String> = RUN_TABLES
            .iter()
            .map(|(t, _)| t.to_string())
            .chain(LOG_TABLES.iter().map(|t| t.to_string()))
            .chain([SOURCES_TABLE.to_string()])
            .collect();
        assert_eq!(
            tables, known,
            "a table was added to the schema: say in store/merge.rs how merge copies it"
        );
    }

    #[test]
    fn uris_keep_odd_file_names_whole() {
        let uri = read_only_uri(Path::new("/tmp/a b?c#d%e.db"));
        assert_eq!(uri, "file:/tmp/a%20b%3Fc%23d%25e.db?mode=ro");
    }
}
