//! No function in `src/` over [`MAX_LINES`] lines (issue 44 §5): a function that long does several
//! things, each of which wants a name. A test reads `src/` — every `fn` with a body outside test
//! modules, from the line of `fn` to its closing brace — and fails on any over the limit that is
//! not in [`NOT_YET`], and on any entry of [`NOT_YET`] that is no longer over it, so the list only
//! shrinks.

use std::collections::BTreeSet;
use std::path::Path;

/// The most lines a function of `src/` may span, its signature and closing brace included.
const MAX_LINES: usize = 150;

/// Functions still over [`MAX_LINES`], as `(file under src/, function name)`: being split in
/// parallel work of issue 44 (the run's typed stages in `executor/` and `runner/`, the one printer
/// in `cli/`). Remove an entry when its function is split; the test says when.
const NOT_YET: &[(&str, &str)] = &[("cli/flags.rs", "parse")];

/// `text` with the insides of comments, string literals and character literals blanked (newlines
/// kept), so that braces and `fn` are only looked for in code.
pub(super) fn blank_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && (i == 0 || !ident(chars[i - 1]) || chars[i - 1] == 'b')
            && matches!(next, Some('"') | Some('#'))
            && {
                let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
                chars.get(i + 1 + hashes) == Some(&'"')
            }
        {
            // A raw string: `r#"…"#`, ended by a quote and as many hashes.
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            out.push('r');
            i += 1 + hashes + 1;
            out.push_str(&" ".repeat(hashes + 1));
            let end: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            while i < chars.len() && !chars[i..].starts_with(&end) {
                out.push(blank(chars[i]));
                i += 1;
            }
            out.push_str(&" ".repeat(end.len()));
            i += end.len();
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < chars.len() {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
            // A character literal (`'{'`, `'\n'`, `'\u{7f}'`), not a lifetime (`'a`).
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                out.push(' ');
                i += 1;
            }
            out.push(' ');
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The code of a file up to its test module (test modules come last in this crate's files).
pub(super) fn before_tests(text: &str) -> &str {
    let mut at = 0;
    let mut lines = text.split_inclusive('\n').peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]")
            && lines.peek().is_some_and(|next| {
                let n = next.trim_start();
                n.starts_with("mod ")
                    || n.starts_with("pub(crate) mod ")
                    || n.starts_with("pub mod ")
            })
        {
            return &text[..at];
        }
        at += line.len();
    }
    text
}

/// Every function with a body in `code`: `(name, first line, line count)`, lines counted from
/// the line of `fn` to the line of its closing brace.
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let code = blank_literals(code);
    let bytes = code.as_bytes();
    let line_at = |pos: usize| code[..pos].matches('\n').count() + 1;
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(found) = code[from..].find("fn ") {
        let at = from + found;
        from = at + 3;
        if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
            continue;
        }
        let rest = code[at + 3..].trim_start();
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue; // `fn(` in a type
        }
        // The body's `{`, or a `;` first (a declaration), outside the parameters and types.
        let mut depth = 0i32;
        let mut body = None;
        for (i, b) in bytes.iter().enumerate().skip(at) {
            match b {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth -= 1,
                b';' if depth == 0 => break,
                b'{' if depth == 0 => {
                    body = Some(i);
                    break;
                }
                _ => {}
            }
        }
        let Some(open) = body else { continue };
        let mut braces = 0i32;
        let mut close = None;
        for (i, b) in bytes.iter().enumerate().skip(open) {
            match b {
                b'{' => braces += 1,
                b'}' => {
                    braces -= 1;
                    if braces == 0 {
                        close = Some(i);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(close) = close else { continue };
        let first = line_at(at);
        out.push((name, first, line_at(close) - first + 1));
    }
    out
}

/// Every function of `src/` over [`MAX_LINES`]: `(file under src/, name, first line, lines)`.
fn long_functions() -> Vec<(String, String, usize, usize)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    for entry in walkdir::WalkDir::new(&src) {
        let entry = entry.unwrap();
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let rel = path
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        // A `tests.rs` beside a module is that module's test module.
        if rel.ends_with("/tests.rs") || rel == "tests.rs" {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        for (name, line, lines) in functions(before_tests(&text)) {
            if lines > MAX_LINES {
                out.push((rel.clone(), name, line, lines));
            }
        }
    }
    out
}

#[test]
fn no_function_in_src_is_over_150_lines() {
    let found = long_functions();
    let new: Vec<String> = found
        .iter()
        .filter(|(file, name, _, _)| !NOT_YET.contains(&(file.as_str(), name.as_str())))
        .map(|(file, name, line, lines)| format!("  src/{file}:{line}: {name}: {lines} lines"))
        .collect();
    assert!(
        new.is_empty(),
        "functions over {MAX_LINES} lines (split them; tests/cli/project/lengths.rs):\n{}",
        new.join("\n")
    );
    let still: BTreeSet<(&str, &str)> = found
        .iter()
        .map(|(f, n, _, _)| (f.as_str(), n.as_str()))
        .collect();
    for (file, name) in NOT_YET {
        assert!(
            still.contains(&(*file, *name)),
            "src/{file}: {name} is no longer over {MAX_LINES} lines: remove it from NOT_YET \
             (tests/cli/project/lengths.rs)"
        );
    }
}

/// The measure itself: braces, `fn` and semicolons in strings, characters and comments do not
/// count; a declaration without a body is no function; a nested function is measured on its own.
#[test]
fn the_measure_counts_a_functions_lines_and_nothing_else() {
    let code = r##"
pub fn outer(a: [u8; 2]) -> Result<(), String> {
    let s = "} fn fake() { {";
    let r = r#"}"#;
    let c = '}';
    let l: &'static str = "x";
    // } fn commented() {
    /* } */
    fn inner() {
        let _ = '{';
    }
    Ok(())
}
trait T {
    fn declared(&self);
}
fn after() {}
"##;
    let found = functions(code);
    assert_eq!(
        found,
        [
            ("outer".to_string(), 2, 12),
            ("inner".to_string(), 9, 3),
            ("after".to_string(), 17, 1),
        ]
    );
    let test_module = "fn kept() {\n}\n#[cfg(test)]\nmod tests {\n    fn gone() {}\n}\n";
    assert_eq!(
        functions(before_tests(test_module)),
        [("kept".to_string(), 1, 2)]
    );
}
