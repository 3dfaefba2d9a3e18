//! The one sanitiser for text shown to a person on a terminal.
//!
//! Step ids, tool names, call ids, error texts and command output come from plans, models and
//! commands. Printed raw, a control character in them can move the cursor, retitle the window, erase
//! lines the operator should see (`\r`, `ESC [2K`) or reorder text (Unicode bidi overrides). Every
//! human-readable line that carries such text passes through here; control characters are shown
//! escaped (`\x1b`, `\u{202e}`) so they are visible and harmless. JSON output does not pass through
//! here: serde_json already escapes what JSON needs, and rewriting it would change the document.

use std::borrow::Cow;

/// Whether `c` must not reach a terminal raw: C0 and C1 controls, DEL, and the Unicode
/// bidirectional formatting characters.
fn dangerous(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn escape(s: &str, keep_newlines: bool) -> Cow<'_, str> {
    if !s
        .chars()
        .any(|c| dangerous(c) && !(keep_newlines && c == '\n'))
    {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' if keep_newlines => out.push('\n'),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if dangerous(c) && (c as u32) < 0x100 => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if dangerous(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Text for one line: every control character, newline included, shown escaped.
pub fn line(s: &str) -> Cow<'_, str> {
    escape(s, false)
}

/// Text that may span lines: newlines kept, every other control character (`\r` included) escaped.
pub fn text(s: &str) -> Cow<'_, str> {
    escape(s, true)
}

/// `1 step`, `2 steps`: a count with its noun in the right number (`noun` takes a plain `s`).
pub fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_controls_and_keeps_plain_text_borrowed() {
        assert!(matches!(line("cargo test ✓"), Cow::Borrowed(_)));
        assert_eq!(line("a\x1b]0;owned\x07b"), "a\\x1b]0;owned\\x07b");
        assert_eq!(line("x\0y\rz\nw\u{7f}\u{9b}"), "x\\x00y\\rz\\nw\\x7f\\x9b");
        assert_eq!(line("abc\u{202e}fed"), "abc\\u{202e}fed");
        assert_eq!(text("one\ntwo\rTWO"), "one\ntwo\\rTWO");
    }
}
