//! Glob patterns, matched by the `globset` crate (ripgrep's) with one set of options everywhere.
//!
//! `file_glob`, the `glob` filter of `file_search` and the program paths a policy allows
//! (`".venv/bin/*"`) share [`Glob`], so a pattern means the same thing to all of them. Patterns are
//! matched against '/'-separated relative paths:
//!
//! - `*` matches any run of characters except '/', `?` one character except '/';
//! - `**` as a whole path segment matches any number of directories (`**/x`, `a/**/x`, `a/**`);
//! - `[abc]`, `[a-z]`, `[!x]` / `[^x]` are character classes;
//! - `{a,b}` is an alternation (nestable);
//! - `\` makes the next character literal.
//!
//! Dot files are not special: `*` matches `.hidden`. A pattern that names a parent directory (`..`)
//! or starts with '/' is a [`SandboxViolation`]: globs only ever describe paths below their root.

use crate::workspace::SandboxViolation;

/// Longest accepted pattern, so hostile input cannot make compilation or matching expensive.
pub const MAX_PATTERN_CHARS: usize = 4096;

/// A pattern that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GlobError {
    /// It points above its root (a sandbox violation).
    Escapes(SandboxViolation),
    /// It is malformed; why.
    Invalid(String),
}

/// A compiled glob pattern.
#[derive(Debug, Clone)]
pub struct Glob {
    pattern: String,
    matcher: globset::GlobMatcher,
}

impl Glob {
    /// Compiles a pattern that describes paths below a root.
    pub fn new(pattern: &str) -> Result<Glob, GlobError> {
        check_escape(pattern).map_err(GlobError::Escapes)?;
        Glob::compile(pattern).map_err(GlobError::Invalid)
    }

    /// Compiles `pattern` (escapes not checked: for patterns that are not paths to open).
    pub fn compile(pattern: &str) -> Result<Glob, String> {
        if pattern.chars().count() > MAX_PATTERN_CHARS {
            return Err(format!(
                "pattern longer than {MAX_PATTERN_CHARS} characters"
            ));
        }
        let glob = globset::GlobBuilder::new(&separator_safe_classes(pattern))
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| e.kind().to_string())?;
        Ok(Glob {
            pattern: pattern.to_string(),
            matcher: glob.compile_matcher(),
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
        self.matcher.is_match(path)
    }
}

/// `pattern` adjusted to the meaning documented above where globset differs: '/' is added to every
/// negated class (`[!x]` → `[!/x]`), so that, like `*` and `?`, a class stays inside one path
/// segment; and a `}` outside any `{…}` group is a literal, as in a shell.
fn separator_safe_classes(pattern: &str) -> String {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::with_capacity(pattern.len() + 4);
    let (mut depth, mut in_class) = (0usize, false);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        match c {
            '\\' => {
                out.push(c);
                if let Some(&next) = chars.get(i) {
                    out.push(next);
                    i += 1;
                }
            }
            ']' if in_class => {
                in_class = false;
                out.push(c);
            }
            '[' if !in_class => {
                in_class = true;
                out.push(c);
                let negated = matches!(chars.get(i), Some('!' | '^'));
                if negated {
                    out.push(chars[i]);
                    i += 1;
                }
                // A `]` first in the class is a member, not its end: keep it first.
                if chars.get(i) == Some(&']') {
                    out.push(']');
                    i += 1;
                }
                if negated {
                    out.push('/');
                }
            }
            '{' if !in_class => {
                depth += 1;
                out.push(c);
            }
            '}' if !in_class && depth == 0 => out.push_str("\\}"),
            '}' if !in_class => {
                depth -= 1;
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, path: &str) -> bool {
        Glob::new(pattern)
            .unwrap_or_else(|e| panic!("{pattern}: {e:?}"))
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
            assert!(
                matches!(Glob::new(bad), Err(GlobError::Invalid(_))),
                "{bad:?}"
            );
        }
        let long = "a".repeat(MAX_PATTERN_CHARS + 1);
        assert!(Glob::new(&long).is_err());
    }

    #[test]
    fn escaping_patterns_are_sandbox_violations() {
        for bad in ["../*", "a/../../x", "/etc/*", "**/..", "..", "a\0b"] {
            assert!(
                matches!(Glob::new(bad), Err(GlobError::Escapes(_))),
                "{bad:?}"
            );
        }
    }
}
