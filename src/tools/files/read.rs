//! `file_read`: a file's text, optionally a range of lines, capped at the read limit.

use std::io::{self, BufRead, BufReader, Read};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Halt, Pacer, cut_at_char_boundary, fs_err, io_err, resolve};
use crate::tools::args::{parse, schema_for};
use crate::tools::{Artifact, Tool, ToolContext, ToolError, ToolOutput};
use crate::workspace::{Access, fs as kfs};

/// The arguments of `file_read`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// The file to read, relative to the workspace root (or absolute inside it).
    #[schemars(length(min = 1))]
    pub path: String,
    /// 1-based number of the first line to return (default 1).
    #[schemars(range(min = 1))]
    pub offset: Option<u64>,
    /// Maximum number of lines to return (default: to the end of the file, within the read limit).
    #[schemars(range(min = 1))]
    pub limit: Option<u64>,
}

/// `file_read`: returns a file's text, optionally a range of lines, capped at the read limit.
pub struct FileRead;

/// The lines `file_read` picked out of a file.
struct Selection {
    /// The selected bytes (at most the read limit).
    bytes: Vec<u8>,
    /// Whether the selection was cut at the read limit.
    capped: bool,
    /// Lines fully or partly included.
    lines_returned: u64,
    /// Lines in the whole file.
    total_lines: u64,
}

/// Streams `reader`, keeping lines `offset..offset+limit` (1-based) up to `cap` bytes, and counts
/// every line so the caller can say where the file ends.
fn select_lines(
    reader: impl Read,
    offset: u64,
    limit: Option<u64>,
    cap: usize,
    pacer: &mut Pacer,
) -> io::Result<Result<Selection, Halt>> {
    let mut reader = BufReader::with_capacity(64 * 1024, reader);
    let end = limit.map(|l| offset.saturating_add(l));
    let mut sel = Selection {
        bytes: Vec::new(),
        capped: false,
        lines_returned: 0,
        total_lines: 0,
    };
    let mut line_no: u64 = 1; // the line the next byte belongs to
    let mut at_line_start = true;
    loop {
        if let Err(h) = pacer.tick() {
            return Ok(Err(h));
        }
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            break;
        }
        let n = chunk.len();
        let mut pos = 0;
        while pos < n {
            let rest = &chunk[pos..];
            let (seg_len, ends_line) = match rest.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (rest.len(), false),
            };
            let wanted = line_no >= offset && end.is_none_or(|e| line_no < e);
            if wanted && !sel.capped {
                if at_line_start {
                    sel.lines_returned += 1;
                }
                let room = cap - sel.bytes.len();
                if seg_len <= room {
                    sel.bytes.extend_from_slice(&rest[..seg_len]);
                } else {
                    sel.bytes.extend_from_slice(&rest[..room]);
                    sel.capped = true;
                }
            }
            at_line_start = ends_line;
            if ends_line {
                sel.total_lines += 1;
                line_no += 1;
            }
            pos += seg_len;
        }
        reader.consume(n);
    }
    if !at_line_start {
        sel.total_lines += 1; // a last line without a newline
    }
    Ok(Ok(sel))
}

/// Drops a UTF-8 sequence cut off at the end of `bytes`, so a cap does not fake an invalid byte.
fn trim_partial_char(bytes: &mut Vec<u8>) {
    let len = bytes.len();
    for back in 1..=3.min(len) {
        let b = bytes[len - back];
        if b & 0xC0 == 0x80 {
            continue; // continuation byte; keep looking for the lead byte
        }
        let width = match b {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        if width > back {
            bytes.truncate(len - back);
        }
        return;
    }
}

impl Tool for FileRead {
    fn name(&self) -> &'static str {
        "file_read"
    }

    fn description(&self) -> &'static str {
        "Read a text file, optionally only `limit` lines starting at 1-based line `offset`."
    }

    fn schema(&self) -> Value {
        schema_for::<ReadArgs>()
    }

    fn idempotent(&self) -> bool {
        true
    }

    fn check(&self, args: &Value, ctx: &ToolContext) -> Result<(), ToolError> {
        let a: ReadArgs = parse(self.name(), args)?;
        resolve(&a.path, ctx, Access::Read).map(|_| ())
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let a: ReadArgs = parse(self.name(), args)?;
        let path = resolve(&a.path, ctx, Access::Read)?;
        let rel = ctx.workspace.display(&path);
        let offset = a.offset.unwrap_or(1).max(1);
        let limit = a.limit;
        let cap = ctx.policy.limits.read_bytes;
        let (file, meta) =
            kfs::open_regular(ctx.workspace, &path).map_err(|e| fs_err("read", ctx, &path, e))?;
        let size = meta.len();
        let mut pacer = Pacer::new(ctx);
        let sel = match select_lines(file, offset, limit, cap, &mut pacer)
            .map_err(|e| io_err("read", ctx, &path, e))?
        {
            Ok(sel) => sel,
            Err(halt) => return halt.into_result(self.name(), ctx),
        };
        let mut bytes = sel.bytes;
        if sel.capped {
            trim_partial_char(&mut bytes);
        }
        let (text, lossy) = match String::from_utf8(bytes) {
            Ok(s) => (s, false),
            Err(e) => (String::from_utf8_lossy(e.as_bytes()).into_owned(), true),
        };
        // Lossy decoding can grow the text; it still has to fit the cap.
        let text = cut_at_char_boundary(&text, cap).to_string();

        let mut notes = Vec::new();
        // Offset 1 of an empty file is simply empty, not "past the end".
        if offset > sel.total_lines && offset > 1 {
            notes.push(format!(
                "offset {offset} is past the end of {rel} ({} lines)",
                sel.total_lines
            ));
        }
        if sel.capped {
            let next = offset + sel.lines_returned.saturating_sub(1);
            notes.push(format!(
                "output truncated at the read limit of {cap} bytes; {rel} has {} lines and {size} bytes; continue with offset={next}",
                sel.total_lines
            ));
        }
        if lossy {
            notes.push(format!(
                "{rel} is not valid UTF-8; invalid bytes are shown as U+FFFD"
            ));
        }
        let mut content = text.clone();
        for note in &notes {
            if !content.is_empty() && !content.ends_with('\n') {
                content.push('\n');
            }
            content.push_str(&format!("[acode-run: {note}]"));
        }
        let partial = text.len() as u64 != size || lossy;
        let info = json!({
            "path": rel,
            "bytes": size,
            "lines": sel.total_lines,
            "offset": offset,
            "lines_returned": sel.lines_returned,
            "truncated": sel.capped,
            "lossy": lossy,
        });
        Ok(ToolOutput::ok(content)
            .with_artifact(Artifact {
                artifact_type: "stdout".to_string(),
                content: text,
                bytes: size,
                truncated: partial,
                lossy,
            })
            .with_artifact(Artifact::new("file_info", info.to_string())))
    }
}
