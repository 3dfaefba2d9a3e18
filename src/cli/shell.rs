//! The one printer: every byte the command line writes to stdout or stderr goes through a
//! [`Shell`] (in the spirit of cargo's `Shell`), which owns both streams, the colour decision and
//! the redactor, so no command can forget to redact what it prints.
//!
//! What each kind of output gets, in this one place:
//!
//! - **human lines** ([`Shell::out_line`], [`Shell::err_line`], [`Shell::warn`], …): the
//!   runner's own words with ids, messages and outputs in them. The whole line passes
//!   [`Redactor::redact_message`] (every known secret in all its forms, the token formats), then
//!   the terminal sanitiser ([`crate::terminal::text`]). A caller still redacts text from outside
//!   (an output, a model's answer) with [`Redactor::redact`] first where the key/value shapes
//!   (`password=…`) should go too; the Shell's pass is the floor no line goes below.
//! - **JSON** ([`Shell::out_json`], [`Shell::out_json_line`], [`Shell::out_json_streamed`],
//!   [`JsonLines`]): every string of the value redacted *before* it is serialised (a secret
//!   holding `"` or `\` no longer matches itself once escaped), with the rules its [`Origin`]
//!   calls for: a document carrying text from outside (a result, an event, a row, a refusal) with
//!   every rule ([`Redactor::redact_value`]); a document of the runner's own words (a diagnosis, a
//!   listing, a recorded run read back) with the message rules
//!   ([`Redactor::redact_value_message`]). The streamed forms carry outside text, and redact item
//!   by item, so `run --json` and `preview --json` of a 100 000-step plan stay in bounded memory.
//! - **documents** ([`Shell::out_page`], [`Shell::err_page`]): text whose bytes are the point
//!   (`--help`, `schema`, an HTML/SARIF/JUnit page to `-`, an artifact, GitHub annotations):
//!   [`Redactor::redact_message`], nothing else changed.
//! - **streamed blocks** ([`Shell::blocks`]): `preview`'s text, written block by block as it is
//!   rendered, each block through [`Redactor::redact`].
//! - **questions**: `do`'s ([`Shell::ask`]) as a human line; a run's confirmation prompt
//!   ([`Shell::confirmation_prompt`]), which quotes a step's arguments, line by line through
//!   [`Redactor::redact`].
//!
//! In machine mode (`--json`, `--jsonl`) stdout carries only JSON: a human line meant for stdout
//! goes to stderr instead.
//!
//! The event sinks (`events::human::HumanPrinter`, `events::jsonl::JsonlWriter`) and the MCP
//! server (`runner::mcp_server::serve_lines`) are library code that embedders use without a
//! Shell; they redact value by value themselves, with the redactor they are given. The Shell
//! builds them ([`Shell::progress_outputs`]) or lends them its streams ([`Shell::protocol_streams`])
//! with its own redactor, so they redact with everything this invocation knows (see
//! `docs/architecture.md`).

use std::fmt::Display;
use std::io::{self, Write};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use crate::events::human::{HumanPrinter, stderr_wants_color};
use crate::events::jsonl::JsonlWriter;
use crate::executor::{CancellableStdin, ConfirmationCallback, ProgressCallback, TerminalPrompt};
use crate::redact::Redactor;

/// What [`JsonlWriter::lost`] hands out: from which event on `--jsonl` was not delivered.
pub(crate) type JsonlLoss = Arc<Mutex<Option<String>>>;

/// One of the process's two streams, or a buffer standing in for it (tests). Writes to a closed
/// stream fail quietly in the Shell's own methods (`acode-run tools | head`), never panic.
#[derive(Clone)]
pub(crate) struct Output(Target);

#[derive(Clone)]
enum Target {
    Stdout,
    Stderr,
    /// A test's stand-in for a stream ([`Shell::capturing`]).
    #[cfg(test)]
    Buffer(Arc<Mutex<Vec<u8>>>),
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &self.0 {
            Target::Stdout => io::stdout().write(buf),
            Target::Stderr => io::stderr().write(buf),
            #[cfg(test)]
            Target::Buffer(b) => {
                b.lock().unwrap_or_else(|p| p.into_inner()).extend(buf);
                Ok(buf.len())
            }
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        // Whole, under the stream's lock: lines from other threads never cut into it.
        match &self.0 {
            Target::Stdout => io::stdout().lock().write_all(buf),
            Target::Stderr => io::stderr().lock().write_all(buf),
            #[cfg(test)]
            Target::Buffer(_) => {
                self.write(buf)?;
                Ok(())
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &self.0 {
            Target::Stdout => io::stdout().flush(),
            Target::Stderr => io::stderr().flush(),
            #[cfg(test)]
            Target::Buffer(_) => Ok(()),
        }
    }
}

/// Whose words a JSON document holds, which decides the redaction rules (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// Text from plans, models, commands and tools: every rule ([`Redactor::redact_value`]).
    Outside,
    /// The runner's own words (diagnoses, listings, what the record says): known values and
    /// token formats ([`Redactor::redact_value_message`]), so a message about a field named
    /// `api_key` stays readable.
    Runner,
}

/// Which of the two streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    Out,
    Err,
}

/// The command line's printer (see the module docs). One per invocation, passed by reference.
pub(crate) struct Shell {
    redactor: Arc<Redactor>,
    out: Output,
    err: Output,
    /// Colour on stderr: a terminal, and `NO_COLOR` unset.
    color: bool,
    /// `--json`/`--jsonl`: stdout carries only JSON.
    machine: bool,
}

impl Shell {
    /// The process's stdout and stderr, redacting with `redactor` (the invocation's, which learns
    /// every secret the command is given).
    pub(crate) fn new(redactor: Arc<Redactor>) -> Self {
        Shell {
            redactor,
            out: Output(Target::Stdout),
            err: Output(Target::Stderr),
            color: stderr_wants_color(),
            machine: false,
        }
    }

    /// A Shell writing into two buffers (stdout's, stderr's), without colour: what a test reads.
    #[cfg(test)]
    pub(crate) fn capturing(redactor: Arc<Redactor>) -> (Self, Captured) {
        let (out, err) = (Arc::default(), Arc::default());
        let shell = Shell {
            redactor,
            out: Output(Target::Buffer(Arc::clone(&out))),
            err: Output(Target::Buffer(Arc::clone(&err))),
            color: false,
            machine: false,
        };
        (shell, Captured { out, err })
    }

    /// The same Shell in machine mode when `on` (`--json`, `--jsonl`): stdout carries only JSON,
    /// and a human line meant for it goes to stderr.
    pub(crate) fn machine(mut self, on: bool) -> Self {
        self.machine = on;
        self
    }

    /// The invocation's redactor: for the session and the store (which record through it), and
    /// for a caller redacting outside text with every rule before it builds a line.
    pub(crate) fn redactor(&self) -> &Arc<Redactor> {
        &self.redactor
    }

    fn output(&self, stream: Stream) -> Output {
        match stream {
            Stream::Out => self.out.clone(),
            Stream::Err => self.err.clone(),
        }
    }

    /// The one place bytes reach a stream. A closed stream is ignored: the command's outcome is
    /// its exit code and its record, not whether a reader stayed.
    fn write(&self, stream: Stream, bytes: &[u8]) {
        let mut to = self.output(stream);
        let _ = to.write_all(bytes).and_then(|()| to.flush());
    }

    /// A human line: known secrets and token formats out, then control characters escaped.
    fn human(&self, text: &str) -> String {
        crate::terminal::text(&self.redactor.redact_message(text)).into_owned()
    }

    /// Where human text for stdout goes: stdout, or stderr in machine mode.
    fn human_out(&self) -> Stream {
        if self.machine {
            Stream::Err
        } else {
            Stream::Out
        }
    }

    // ---- stdout -------------------------------------------------------------------------------

    /// A line of human-readable text on stdout (a listing, `show`, `doctor`).
    pub(crate) fn out_line(&self, text: impl Display) {
        let line = self.human(&text.to_string()) + "\n";
        self.write(self.human_out(), line.as_bytes());
    }

    /// Human-readable text on stdout as it is (it carries its own newlines).
    pub(crate) fn out_text(&self, text: impl Display) {
        let text = self.human(&text.to_string());
        self.write(self.human_out(), text.as_bytes());
    }

    /// A document on stdout whose bytes are the point (`--help`, `schema`, a page to `-`, an
    /// artifact): known secrets and token formats out, nothing else changed.
    pub(crate) fn out_page(&self, text: &str) {
        self.write(Stream::Out, self.redactor.redact_message(text).as_bytes());
    }

    fn redact_value(&self, v: &serde_json::Value, origin: Origin) -> serde_json::Value {
        match origin {
            Origin::Outside => self.redactor.redact_value(v),
            Origin::Runner => self.redactor.redact_value_message(v),
        }
    }

    /// `value` as one pretty-printed JSON document on stdout, every string redacted by the rules
    /// of its `origin`.
    pub(crate) fn out_json(&self, value: &impl serde::Serialize, origin: Origin) {
        let text = match serde_json::to_value(value) {
            Ok(v) => serde_json::to_string_pretty(&self.redact_value(&v, origin)),
            Err(e) => Err(e),
        }
        .unwrap_or_else(|e| serde_json::json!({ "error": e.to_string() }).to_string());
        self.write(Stream::Out, (text + "\n").as_bytes());
    }

    /// `value` as one JSON line on stdout (an event, a result), every string redacted by the
    /// rules of its `origin`.
    pub(crate) fn out_json_line(&self, value: &impl serde::Serialize, origin: Origin) {
        if let Ok(v) = serde_json::to_value(value) {
            let line = self.redact_value(&v, origin).to_string() + "\n";
            self.write(Stream::Out, line.as_bytes());
        }
    }

    /// JSON lines on stdout, one per [`JsonLines::write`] (outside text: every rule), buffered
    /// for the length of `f` (an export of a whole run).
    pub(crate) fn out_json_lines<T>(&self, f: impl FnOnce(&mut JsonLines<'_>) -> T) -> T {
        let mut out = self.output(Stream::Out);
        let mut buffered = io::BufWriter::new(&mut out as &mut dyn Write);
        let mut lines = JsonLines {
            to: &mut buffered,
            redactor: &self.redactor,
        };
        let result = f(&mut lines);
        let _ = buffered.flush();
        result
    }

    /// JSON lines redacted as on stdout, into `to` (`export --jsonl FILE`).
    pub(crate) fn json_lines_to<'a>(&'a self, to: &'a mut dyn Write) -> JsonLines<'a> {
        JsonLines {
            to,
            redactor: &self.redactor,
        }
    }

    /// One pretty JSON object on stdout whose `key` array is written item by item as `items`
    /// produces them (each item, and `top`, outside text: redacted with every rule before it is
    /// serialised), between the keys of `top`
    /// that sort before and after it: the bytes `to_string_pretty` of the whole redacted object
    /// would be, holding one item at a time (`run --json`, `preview --json` of a 100 000-step
    /// plan).
    pub(crate) fn out_json_streamed<F>(
        &self,
        top: serde_json::Map<String, serde_json::Value>,
        key: &'static str,
        items: F,
    ) -> io::Result<()>
    where
        F: FnOnce(&mut dyn FnMut(serde_json::Result<serde_json::Value>)),
    {
        let top = match self.redactor.redact_value(&serde_json::Value::Object(top)) {
            serde_json::Value::Object(map) => map,
            _ => serde_json::Map::new(),
        };
        let whole = WithItems {
            top,
            key,
            items: Items {
                produce: std::cell::RefCell::new(Some(items)),
                redactor: &self.redactor,
            },
        };
        let mut out = self.output(Stream::Out);
        let mut buffered = io::BufWriter::new(&mut out as &mut dyn Write);
        serde_json::to_writer_pretty(&mut buffered, &whole)?;
        buffered.write_all(b"\n")?;
        buffered.flush()
    }

    // ---- stderr -------------------------------------------------------------------------------

    /// A line of human-readable text on stderr (what was done, what to do next).
    pub(crate) fn err_line(&self, text: impl Display) {
        let line = self.human(&text.to_string()) + "\n";
        self.write(Stream::Err, line.as_bytes());
    }

    /// Text on stderr with no newline added (a question before an answer is read), flushed.
    pub(crate) fn err_text(&self, text: impl Display) {
        self.write(Stream::Err, self.human(&text.to_string()).as_bytes());
    }

    /// `acode-run: MESSAGE` on stderr: why the command failed, or a note.
    pub(crate) fn error(&self, message: impl Display) {
        self.err_line(format_args!("acode-run: {message}"));
    }

    /// `acode-run: warning: MESSAGE` on stderr: something went wrong that does not change the
    /// outcome.
    pub(crate) fn warn(&self, message: impl Display) {
        self.err_line(format_args!("acode-run: warning: {message}"));
    }

    /// A document on stderr as it is (GitHub workflow commands), known secrets and token formats
    /// out.
    pub(crate) fn err_page(&self, text: &str) {
        self.write(Stream::Err, self.redactor.redact_message(text).as_bytes());
    }

    // ---- questions ----------------------------------------------------------------------------

    /// Whether a question can be asked: stdin and stderr are both a terminal.
    pub(crate) fn can_ask(&self) -> bool {
        use std::io::IsTerminal;
        let stderr_is_terminal = match self.err.0 {
            Target::Stderr => io::stderr().is_terminal(),
            _ => false,
        };
        stderr_is_terminal && io::stdin().is_terminal()
    }

    /// `question` on stderr (no newline added), then the line the user answers on stdin; `None`
    /// when stdin ends (or cannot be read) first.
    pub(crate) fn ask(&self, question: impl Display) -> Option<String> {
        use std::io::BufRead;
        self.err_text(question);
        let mut line = String::new();
        match io::stdin().lock().read_line(&mut line) {
            Ok(n) if n > 0 => Some(line),
            _ => None,
        }
    }

    // ---- streamed text ------------------------------------------------------------------------

    /// A writer of text blocks to `stream`, each redacted with every rule before it is written and
    /// buffered until [`Blocks::finish`] (`preview`'s text, block by block).
    pub(crate) fn blocks(&self, stream: Stream) -> Blocks<'_> {
        Blocks {
            to: io::BufWriter::new(self.output(stream)),
            redactor: &self.redactor,
        }
    }

    // ---- library writers ----------------------------------------------------------------------

    /// The progress outputs of a run or a stage: human lines on stderr (coloured on a terminal
    /// without `NO_COLOR`; failures only when `quiet`), and with `jsonl` the events on stdout, both
    /// redacting with this Shell's redactor; and where the JSONL writer notes events it could not
    /// deliver.
    pub(crate) fn progress_outputs(
        &self,
        quiet: bool,
        jsonl: bool,
    ) -> (Vec<Box<dyn ProgressCallback>>, Option<JsonlLoss>) {
        let mut outputs: Vec<Box<dyn ProgressCallback>> = Vec::new();
        let mut loss = None;
        let human = HumanPrinter::new(self.err.clone(), self.color, self.redactor.clone());
        // `--quiet` still says which steps failed and what they printed.
        outputs.push(Box::new(if quiet { human.failures_only() } else { human }));
        if jsonl {
            let writer = JsonlWriter::new(self.out.clone(), self.redactor.clone());
            loss = Some(writer.lost());
            outputs.push(Box::new(writer));
        }
        (outputs, loss)
    }

    /// The confirmation gate of a run that asks at the terminal (`--confirm prompt`): the
    /// library's [`TerminalPrompt`] reading stdin (`cancel` ends the wait), its questions — which
    /// quote a step's arguments — written to stderr line by line through this Shell's redactor.
    pub(crate) fn confirmation_prompt(
        &self,
        cancel: Arc<AtomicBool>,
    ) -> Arc<dyn ConfirmationCallback> {
        let questions = RedactedLines {
            to: self.err.clone(),
            redactor: self.redactor.clone(),
            pending: Vec::new(),
        };
        Arc::new(
            TerminalPrompt::new(
                io::BufReader::new(CancellableStdin::new(cancel.clone())),
                questions,
            )
            .with_cancel(cancel),
        )
    }

    /// Stdout and stderr for a library writer that speaks a protocol and redacts each value it
    /// writes itself with this Shell's redactor (the MCP server's JSON-RPC replies and its log):
    /// a pass over its serialised bytes could not see a secret JSON escaped.
    pub(crate) fn protocol_streams(&self) -> (Output, Output) {
        (self.out.clone(), self.err.clone())
    }
}

/// What a capturing Shell wrote ([`Shell::capturing`]).
#[cfg(test)]
pub(crate) struct Captured {
    out: Arc<Mutex<Vec<u8>>>,
    err: Arc<Mutex<Vec<u8>>>,
}

#[cfg(test)]
impl Captured {
    /// Everything written to stdout so far.
    pub(crate) fn out(&self) -> String {
        String::from_utf8_lossy(&self.out.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }

    /// Everything written to stderr so far.
    pub(crate) fn err(&self) -> String {
        String::from_utf8_lossy(&self.err.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }
}

/// Redacted JSON lines ([`Shell::out_json_lines`], [`Shell::json_lines_to`]).
pub(crate) struct JsonLines<'a> {
    to: &'a mut dyn Write,
    redactor: &'a Redactor,
}

impl JsonLines<'_> {
    /// `value` redacted, as one line.
    pub(crate) fn write(&mut self, value: &serde_json::Value) -> io::Result<()> {
        serde_json::to_writer(&mut *self.to, &self.redactor.redact_value(value))?;
        self.to.write_all(b"\n")
    }

    /// Flushes what was written.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        self.to.flush()
    }
}

/// A writer of text that redacts each whole line with every rule before it reaches its stream,
/// and what is left of a line when flushed (a question waiting for its answer), so a secret is
/// never cut in two by the writes a `write!` makes ([`Shell::confirmation_prompt`]).
struct RedactedLines {
    to: Output,
    redactor: Arc<Redactor>,
    pending: Vec<u8>,
}

impl RedactedLines {
    fn emit(&mut self, bytes: &[u8]) -> io::Result<()> {
        let text = String::from_utf8_lossy(bytes);
        self.to.write_all(self.redactor.redact(&text).as_bytes())
    }
}

impl Write for RedactedLines {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.pending.extend_from_slice(buf);
        if let Some(end) = self.pending.iter().rposition(|&b| b == b'\n') {
            let lines: Vec<u8> = self.pending.drain(..=end).collect();
            self.emit(&lines)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let rest = std::mem::take(&mut self.pending);
        if !rest.is_empty() {
            self.emit(&rest)?;
        }
        self.to.flush()
    }
}

impl Drop for RedactedLines {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// Text blocks redacted one at a time ([`Shell::blocks`]).
pub(crate) struct Blocks<'a> {
    to: io::BufWriter<Output>,
    redactor: &'a Redactor,
}

impl Blocks<'_> {
    /// `block`, redacted.
    pub(crate) fn write(&mut self, block: &str) {
        let _ = self.to.write_all(self.redactor.redact(block).as_bytes());
    }

    /// `block`, redacted, ending in exactly one newline.
    pub(crate) fn write_last_line(&mut self, block: &str) {
        let red = self.redactor.redact(block);
        let _ = writeln!(self.to, "{}", red.trim_end());
    }

    /// Writes out what is buffered.
    pub(crate) fn finish(mut self) {
        let _ = self.to.flush();
    }
}

/// An object whose `key` entry is an array streamed from [`Items`], placed among `top`'s keys in
/// the sorted order a `serde_json::Map` has, so the bytes are those of the whole value.
struct WithItems<'a, F> {
    top: serde_json::Map<String, serde_json::Value>,
    key: &'static str,
    items: Items<'a, F>,
}

impl<F> serde::Serialize for WithItems<'_, F>
where
    F: FnOnce(&mut dyn FnMut(serde_json::Result<serde_json::Value>)),
{
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.top.len() + 1))?;
        let mut written = false;
        for (k, v) in &self.top {
            if !written && k.as_str() > self.key {
                map.serialize_entry(self.key, &self.items)?;
                written = true;
            }
            map.serialize_entry(k, v)?;
        }
        if !written {
            map.serialize_entry(self.key, &self.items)?;
        }
        map.end()
    }
}

/// The streamed array: the producer, run once when serialised, each item redacted.
struct Items<'a, F> {
    produce: std::cell::RefCell<Option<F>>,
    redactor: &'a Redactor,
}

impl<F> serde::Serialize for Items<'_, F>
where
    F: FnOnce(&mut dyn FnMut(serde_json::Result<serde_json::Value>)),
{
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeSeq};
        let mut seq = s.serialize_seq(None)?;
        let mut failed: Option<S::Error> = None;
        if let Some(produce) = self.produce.borrow_mut().take() {
            produce(&mut |item| {
                if failed.is_some() {
                    return;
                }
                let written = item
                    .map_err(S::Error::custom)
                    .and_then(|v| seq.serialize_element(&self.redactor.redact_value(&v)));
                if let Err(e) = written {
                    failed = Some(e);
                }
            });
        }
        if let Some(e) = failed {
            return Err(e);
        }
        seq.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "shell-known-secret-4711";
    const TOKEN: &str = "ghp_16C7e42F292c6912E7710c838347Ae178B4a";

    fn shell() -> (Shell, Captured) {
        let redactor = Arc::new(Redactor::new());
        redactor.add_values([SECRET]);
        Shell::capturing(redactor)
    }

    /// Every method that writes redacts: a known value and a token format in each reach neither
    /// stream (and what is not secret is kept).
    #[test]
    fn every_output_is_redacted() {
        let (sh, cap) = shell();
        let text = format!("id {SECRET} and {TOKEN}, \"quoted {SECRET}\"");
        let value = serde_json::json!({ "a": text, "list": [text], text.clone(): 1 });
        sh.out_line(&text);
        sh.out_text(&text);
        sh.out_page(&text);
        sh.out_json(&value, Origin::Outside);
        sh.out_json(&value, Origin::Runner);
        sh.out_json_line(&value, Origin::Outside);
        sh.out_json_line(&value, Origin::Runner);
        sh.out_json_lines(|l| l.write(&value)).unwrap();
        sh.out_json_streamed(
            value.as_object().unwrap().clone(),
            "steps",
            |emit: &mut dyn FnMut(serde_json::Result<serde_json::Value>)| emit(Ok(value.clone())),
        )
        .unwrap();
        let mut blocks = sh.blocks(Stream::Out);
        blocks.write(&text);
        blocks.write_last_line(&text);
        blocks.finish();
        sh.err_line(&text);
        sh.err_text(&text);
        sh.error(&text);
        sh.warn(&text);
        sh.err_page(&text);
        let mut blocks = sh.blocks(Stream::Err);
        blocks.write(&text);
        blocks.finish();
        let (out, err) = (cap.out(), cap.err());
        for (name, s) in [("stdout", &out), ("stderr", &err)] {
            assert!(!s.contains("4711"), "{name}: {s}");
            assert!(!s.contains("16C7e42F292c6912"), "{name}: {s}");
            assert!(s.contains("id [REDACTED] and [REDACTED]"), "{name}: {s}");
        }
        assert_eq!(out.matches("id [REDACTED]").count(), 26, "{out}");
        assert_eq!(err.matches("id [REDACTED]").count(), 6, "{err}");
    }

    /// The confirmation prompt's writer redacts a secret cut across writes, and the question left
    /// without a newline when it is flushed.
    #[test]
    fn prompt_lines_are_redacted_across_writes() {
        let (sh, cap) = shell();
        let mut w = RedactedLines {
            to: sh.err.clone(),
            redactor: sh.redactor.clone(),
            pending: Vec::new(),
        };
        for piece in [
            "arguments: shell-known-",
            "secret-4711 and\nallow? ",
            SECRET,
        ] {
            w.write_all(piece.as_bytes()).unwrap();
        }
        assert_eq!(cap.err(), "arguments: [REDACTED] and\n");
        w.flush().unwrap();
        assert_eq!(cap.err(), "arguments: [REDACTED] and\nallow? [REDACTED]");
    }

    /// A document of the runner's words keeps a message about a secret-named field; a document
    /// of outside text loses the value, as `redact` and `redact_message` do.
    #[test]
    fn the_origin_chooses_the_rules() {
        let (sh, cap) = shell();
        let v = serde_json::json!({"problem": "variables.api_key: must be a string"});
        sh.out_json_line(&v, Origin::Runner);
        sh.out_json_line(&v, Origin::Outside);
        assert_eq!(
            cap.out(),
            "{\"problem\":\"variables.api_key: must be a string\"}\n\
             {\"problem\":\"variables.api_key: [REDACTED] be a string\"}\n"
        );
    }

    /// Human lines are sanitised for the terminal; documents and JSON keep their bytes.
    #[test]
    fn human_lines_are_sanitised_and_documents_are_not() {
        let (sh, cap) = shell();
        sh.err_line("a\x1b[2Jb\tc");
        sh.out_page("a\tb\n");
        assert_eq!(cap.err(), "a\\x1b[2Jb\\tc\n");
        assert_eq!(cap.out(), "a\tb\n");
    }

    /// In machine mode stdout carries JSON only: a human line goes to stderr.
    #[test]
    fn machine_mode_keeps_human_lines_off_stdout() {
        let (sh, cap) = shell();
        let sh = sh.machine(true);
        sh.out_line("human");
        sh.out_json(&serde_json::json!({"k": 1}), Origin::Runner);
        assert_eq!(cap.out(), "{\n  \"k\": 1\n}\n");
        assert_eq!(cap.err(), "human\n");
    }

    /// The streamed object is byte for byte the whole redacted value, the array in its sorted
    /// place (first, middle, last) and empty.
    #[test]
    fn streamed_json_is_the_whole_value() {
        for key in ["a", "m", "z"] {
            for n in [0, 3] {
                let (sh, cap) = shell();
                let mut top = serde_json::Map::new();
                top.insert("b".into(), format!("x {SECRET}").into());
                top.insert("y".into(), serde_json::json!([1, {"q": SECRET}]));
                let items: Vec<serde_json::Value> = (0..n)
                    .map(|i| serde_json::json!({"i": i, "s": SECRET}))
                    .collect();
                sh.out_json_streamed(top.clone(), key, |emit| {
                    for v in &items {
                        emit(Ok(v.clone()));
                    }
                })
                .unwrap();
                top.insert(key.into(), serde_json::Value::Array(items));
                let whole = sh.redactor().redact_value(&serde_json::Value::Object(top));
                assert_eq!(
                    cap.out(),
                    serde_json::to_string_pretty(&whole).unwrap() + "\n"
                );
            }
        }
    }
}
