//! `--jsonl`: one JSON event per line, for other programs.
//!
//! Every line is redacted before it is written and flushed at once, so a consumer reading a pipe sees
//! each event as it happens and never sees a secret.

use std::io::Write;
use std::sync::{Arc, Mutex};

use super::Event;
use crate::redact::Redactor;

/// Writes events as JSON lines to any writer (stdout in the CLI).
pub struct JsonlWriter<W: Write + Send> {
    out: Mutex<W>,
    redactor: Arc<Redactor>,
}

impl<W: Write + Send> JsonlWriter<W> {
    /// A writer that redacts with `redactor`.
    pub fn new(out: W, redactor: Arc<Redactor>) -> Self {
        JsonlWriter {
            out: Mutex::new(out),
            redactor,
        }
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
        // A closed stdout (consumer gone) must not abort the run: the database is the record.
        let _ = writeln!(out, "{value}");
        let _ = out.flush();
    }
}
