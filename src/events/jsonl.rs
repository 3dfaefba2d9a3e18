//! `--jsonl`: one JSON event per line, for other programs.
//!
//! Every line is redacted before it is written and flushed at once, so a consumer reading a pipe sees
//! each event as it happens and never sees a secret. When the consumer goes away (`--jsonl | head
//! -1`), the run goes on — the database is the record — and the writer says so once on stderr and
//! keeps what was lost ([`JsonlWriter::lost`]) for the CLI to record with the run.

use std::io::Write;
use std::sync::{Arc, Mutex};

use super::Event;
use crate::redact::Redactor;

/// Writes events as JSON lines to any writer (stdout in the CLI).
pub struct JsonlWriter<W: Write + Send> {
    out: Mutex<W>,
    redactor: Arc<Redactor>,
    lost: Arc<Mutex<Option<String>>>,
}

impl<W: Write + Send> JsonlWriter<W> {
    /// A writer that redacts with `redactor`.
    pub fn new(out: W, redactor: Arc<Redactor>) -> Self {
        JsonlWriter {
            out: Mutex::new(out),
            redactor,
            lost: Arc::default(),
        }
    }

    /// Where the writer puts, at its first failed write, from which event on the events were not
    /// delivered and why (`None` while every event was written): shared, so the caller can read
    /// it after the writer has been handed to the run.
    pub fn lost(&self) -> Arc<Mutex<Option<String>>> {
        self.lost.clone()
    }

    /// Gives the writer back (tests read what was written).
    pub fn into_inner(self) -> W {
        match self.out.into_inner() {
            Ok(w) => w,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

impl<W: Write + Send> JsonlWriter<W> {
    /// Writes `event` as one redacted JSON line. (It becomes a progress callback in
    /// `executor::callbacks`, so this module does not import the executor.)
    pub fn write_event(&self, event: &Event) {
        let value = match serde_json::to_value(event) {
            Ok(v) => self.redactor.redact_value(&v),
            Err(_) => return,
        };
        let mut out = match self.out.lock() {
            Ok(o) => o,
            Err(poisoned) => poisoned.into_inner(),
        };
        let mut lost = match self.lost.lock() {
            Ok(l) => l,
            Err(poisoned) => poisoned.into_inner(),
        };
        if lost.is_some() {
            return;
        }
        // A closed stdout (consumer gone) must not abort the run: the database is the record.
        if let Err(e) = writeln!(out, "{value}").and_then(|()| out.flush()) {
            let what = format!(
                "events from seq {} ({}) on were not delivered: the output was closed ({e})",
                event.seq,
                event.kind.type_name()
            );
            eprintln!(
                "acode-run: warning: --jsonl: {what}; the run goes on, and `acode-run show {}` \
                 has its whole record",
                event.run_id
            );
            *lost = Some(what);
        }
    }
}
