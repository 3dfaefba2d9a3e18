//! Glob patterns, translated to regular expressions.
//!
//! `file_glob` and the `glob` filter of `file_search` share this one translator, so a pattern means
//! the same thing to both. Patterns are matched against '/'-separated relative paths:
//!
//! - `*` matches any run of characters except '/', `?` one character except '/';
//! - `**` as a whole path segment matches any number of directories (`**/x`, `a/**/x`, `a/**`);
//!   elsewhere (`a**b`) it is a plain `*`;
//! - `[abc]`, `[a-z]`, `[!x]` / `[^x]` are character classes (a negated class never matches '/');
//! - `{a,b}` is an alternation (nestable, and may contain the other forms);
//! - `\` makes the next character literal.
//!
//! Dot files are not special: `*` matches `.hidden`. A pattern that names a parent directory (`..`)
//! or starts with '/' is a [`SandboxViolation`]: globs only ever describe paths below their root.

use regex::{Regex, RegexBuilder};

use super::ToolError;
use crate::sandbox::SandboxViolation;

/// Longest accepted pattern, so hostile input cannot make translation or matching expensive.
pub const MAX_PATTERN_CHARS: usize = 4096;

/// A compiled glob pattern.
#[derive(Debug, Clone)]
pub struct Glob {
    pattern: String,
    regex: Regex,
}

impl Glob {
    /// Compiles `pattern` for `tool`; an escaping pattern is a sandbox violation and a malformed
    /// one is an invalid argument, so callers can pass the error straight on.
    pub fn new(tool: &str, pattern: &str) -> Result<Glob, ToolError> {
        check_escape(pattern)?;
        let source = translate(pattern)
            .map_err(|e| ToolError::invalid(tool, format!("invalid glob {pattern:?}: {e}")))?;
        let regex = RegexBuilder::new(&source)
            .size_limit(1 << 20)
            .build()
            .map_err(|e| ToolError::invalid(tool, format!("invalid glob {pattern:?}: {e}")))?;
        Ok(Glob {
            pattern: pattern.to_string(),
            regex,
        })
    }

    /// The pattern as given.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// Whether the pattern has a '/' and so describes a path rather than a bare file name.
    pub fn has_separator(&self) -> bool {
        self.pattern.contains('/')
    }

    /// Whether `path` (relative, '/'-separated) matches the whole pattern.
    pub fn is_match(&self, path: &str) -> bool {
        self.regex.is_match(path)
    }
}

/// Refuses patterns that point above their root: anything containing `..`, or starting with '/'.
pub fn check_escape(pattern: &str) -> Result<(), SandboxViolation> {
    if pattern.starts_with('/') {
        return Err(SandboxViolation::new(
            pattern,
            "glob pattern must be relative (it starts with '/')",
        ));
    }
    if pattern.contains("..") {
        return Err(SandboxViolation::new(
            pattern,
            "glob pattern must not contain '..'",
        ));
    }
    if pattern.contains('\0') {
        return Err(SandboxViolation::new(
            pattern,
            "glob pattern contains a NUL byte",
        ));
    }
    Ok(())
}

/// Translates a glob into an anchored regular expression source (see the module docs).
pub fn translate(pattern: &str) -> Result<String, String> {
    if pattern.chars().count() > MAX_PATTERN_CHARS {
        return Err(format!(
            "pattern longer than {MAX_PATTERN_CHARS} characters"
        ));
    }
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::from("(?s)^");
    let mut depth = 0usize; // open '{' groups
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '*' => {
                let start = i;
                while chars.get(i) == Some(&'*') {
                    i += 1;
                }
                let prev = start.checked_sub(1).and_then(|p| chars.get(p));
                let next = chars.get(i);
                let starts_segment = matches!(prev, None | Some('/'))
                    || (depth > 0 && matches!(prev, Some('{' | ',')));
                let ends_segment = matches!(next, None | Some('/'))
                    || (depth > 0 && matches!(next, Some('}' | ',')));
                if i - start >= 2 && starts_segment && ends_segment {
                    if next == Some(&'/') {
                        // `**/`: zero or more whole directories.
                        out.push_str("(?:[^/]*/)*");
                        i += 1;
                    } else {
                        out.push_str(".*");
                    }
                } else {
                    out.push_str("[^/]*");
                }
                continue;
            }
            '?' => out.push_str("[^/]"),
            '[' => {
                i = translate_class(&chars, i, &mut out)?;
            }
            '{' => {
                depth += 1;
                out.push_str("(?:");
            }
            '}' if depth > 0 => {
                depth -= 1;
                out.push(')');
            }
            ',' if depth > 0 => out.push('|'),
            '\\' => {
                i += 1;
                match chars.get(i) {
                    Some(&lit) => push_literal(&mut out, lit),
                    None => return Err("pattern ends with an escaping '\\'".to_string()),
                }
            }
            other => push_literal(&mut out, other),
        }
        i += 1;
    }
    if depth > 0 {
        return Err("unclosed '{'".to_string());
    }
    out.push('$');
    Ok(out)
}

/// Translates the class starting at `chars[open] == '['`; returns the index of its closing ']'.
fn translate_class(chars: &[char], open: usize, out: &mut String) -> Result<usize, String> {
    let mut i = open + 1;
    let negated = matches!(chars.get(i), Some('!' | '^'));
    if negated {
        i += 1;
    }
    let first = i;
    let mut body = String::new();
    loop {
        let Some(&c) = chars.get(i) else {
            return Err("unclosed '['".to_string());
        };
        match c {
            ']' if i > first => break,
            '\\' => {
                i += 1;
                match chars.get(i) {
                    Some(&lit) => push_class_literal(&mut body, lit),
                    None => return Err("unclosed '['".to_string()),
                }
            }
            // A '-' between two members is a range; anywhere else it is literal.
            '-' if i > first && chars.get(i + 1).is_some_and(|n| *n != ']') => body.push('-'),
            other => push_class_literal(&mut body, other),
        }
        i += 1;
    }
    if negated {
        out.push_str("[^/");
    } else {
        out.push('[');
    }
    out.push_str(&body);
    out.push(']');
    Ok(i)
}

fn push_literal(out: &mut String, c: char) {
    let mut buf = [0u8; 4];
    out.push_str(&regex::escape(c.encode_utf8(&mut buf)));
}

fn push_class_literal(body: &mut String, c: char) {
    if matches!(c, '\\' | '[' | ']' | '^' | '-' | '&' | '~') {
        body.push('\\');
    }
    body.push(c);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, path: &str) -> bool {
        Glob::new("test", pattern)
            .unwrap_or_else(|e| panic!("{pattern}: {e}"))
            .is_match(path)
    }

    #[test]
    fn star_does_not_cross_separators() {
        assert!(m("*.rs", "lib.rs"));
        assert!(m("*.rs", ".rs"));
        assert!(!m("*.rs", "src/lib.rs"));
        assert!(m("src/*.rs", "src/lib.rs"));
        assert!(!m("src/*.rs", "src/a/lib.rs"));
        assert!(m("*", ".hidden"));
        assert!(!m("*.rs", "lib.rsx"));
    }

    #[test]
    fn double_star_spans_directories() {
        assert!(m("**/*.rs", "lib.rs"));
        assert!(m("**/*.rs", "src/a/b/lib.rs"));
        assert!(m("src/**/mod.rs", "src/mod.rs"));
        assert!(m("src/**/mod.rs", "src/a/b/mod.rs"));
        assert!(!m("src/**/mod.rs", "srcx/mod.rs"));
        assert!(m("src/**", "src/a/b.rs"));
        assert!(!m("src/**", "other/a.rs"));
        assert!(m("**", "a/b/c"));
        // Not a whole segment: a plain star.
        assert!(m("a**b", "axxb"));
        assert!(!m("a**b", "a/b"));
    }

    #[test]
    fn question_mark_classes_and_braces() {
        assert!(m("?.txt", "a.txt"));
        assert!(!m("?.txt", "ab.txt"));
        assert!(!m("a?b", "a/b"));
        assert!(m("[abc].rs", "b.rs"));
        assert!(!m("[abc].rs", "d.rs"));
        assert!(m("[a-c]x", "bx"));
        assert!(!m("[!a-c]x", "bx"));
        assert!(m("[!a-c]x", "dx"));
        assert!(m("[^a]x", "zx"));
        assert!(!m("a[!b]c", "a/c"), "negated class must not match '/'");
        assert!(m("[]]", "]"));
        assert!(m("[a-]", "-"));
        assert!(m("*.{rs,toml}", "Cargo.toml"));
        assert!(m("*.{rs,toml}", "main.rs"));
        assert!(!m("*.{rs,toml}", "main.c"));
        assert!(m("{src/**/*.rs,*.md}", "src/a/b.rs"));
        assert!(m("{src/**/*.rs,*.md}", "README.md"));
        assert!(m("{a,{b,c}}.x", "c.x"));
        assert!(
            m("}a,", "}a,"),
            "braces and commas outside a group are literal"
        );
    }

    #[test]
    fn regex_metacharacters_are_literal() {
        assert!(m("a+b(c).$", "a+b(c).$"));
        assert!(!m("a.b", "axb"));
        assert!(m("\\*", "*"));
        assert!(!m("\\*", "x"));
        assert!(m("[.]x", ".x"));
        assert!(m("ü*", "über"));
    }

    #[test]
    fn malformed_patterns_are_invalid_arguments() {
        for bad in ["[abc", "{a,b", "x\\", "[z-a]"] {
            match Glob::new("t", bad) {
                Err(ToolError::InvalidArguments { message, .. }) => {
                    assert!(message.contains("invalid glob"), "{message}")
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        let long = "a".repeat(MAX_PATTERN_CHARS + 1);
        assert!(Glob::new("t", &long).is_err());
    }

    #[test]
    fn escaping_patterns_are_sandbox_violations() {
        for bad in ["../*", "a/../../x", "/etc/*", "**/..", "..", "a\0b"] {
            assert!(
                matches!(Glob::new("t", bad), Err(ToolError::Sandbox(_))),
                "{bad:?}"
            );
        }
    }
}
