//! Secret redaction: the one place that decides what a secret looks like.
//!
//! Secrets must never reach the database, events, logs or error messages (SPEC §6). The executor
//! passes every string that crosses one of those boundaries through a [`Redactor`]. Two sources of
//! secrets are recognised:
//! - **known values**: the values of environment variables whose names look secret (`*_TOKEN`,
//!   `*_KEY`, `*SECRET*`, `*PASSWORD*`, ...) at the time [`Redactor::from_env`] runs, plus any
//!   values given with [`Redactor::with_extra_values`]; values shorter than [`MIN_SECRET_LEN`]
//!   are ignored, because replacing `1` or `true` everywhere would destroy the output;
//! - **recognisable formats** ([`PATTERNS`]): cloud and SaaS token formats, JWTs, PEM private
//!   keys, `Authorization` headers, `password=...`-style assignments, credentials in URLs.
//!
//! Everything found is replaced by [`REDACTED`]. For key/value shapes the key is kept
//! (`password=[REDACTED]`) so the output still explains itself. Redacting twice gives the same text.

use std::borrow::Cow;
use std::sync::{OnceLock, RwLock};

use regex::{NoExpand, Regex, RegexSet};
use serde_json::Value;

/// What a secret is replaced by.
pub const REDACTED: &str = "[REDACTED]";

/// Environment values shorter than this are not treated as secrets (too likely to be noise).
pub const MIN_SECRET_LEN: usize = 6;

/// How sure a pattern is that what it matched is a secret, which decides where it applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatternKind {
    /// A token format that is a secret wherever it appears (`ghp_…`, a PEM private key). Applied
    /// to everything, the runner's own messages included.
    Token,
    /// A key/value shape (`password=…`, `--token X`) recognised by context. Applied only to text
    /// that comes from outside (outputs, arguments, model text): in the runner's own diagnostics
    /// the "key" is a field name and the "value" the runner's words (`plan.secrets: unknown field`).
    Assignment,
}

/// One recognisable secret format: a regex and its replacement (`${1}` keeps a key part).
#[derive(Debug, Clone, Copy)]
pub struct Pattern {
    /// What it catches, for documentation and test messages.
    pub name: &'static str,
    /// The regex (Rust `regex` syntax).
    pub regex: &'static str,
    /// The replacement; `$1`-style groups keep the non-secret part.
    pub replacement: &'static str,
    /// Where it applies.
    pub kind: PatternKind,
}

const fn tok(name: &'static str, regex: &'static str, replacement: &'static str) -> Pattern {
    Pattern {
        name,
        regex,
        replacement,
        kind: PatternKind::Token,
    }
}

const fn assign(name: &'static str, regex: &'static str, replacement: &'static str) -> Pattern {
    Pattern {
        name,
        regex,
        replacement,
        kind: PatternKind::Assignment,
    }
}

/// The start of a token: a word boundary, or a JSON/C escape just before it (`\n`, `\t`,
/// `\u001b`), which `\b` alone misses in escaped text (`"a\nghp_…"`: `n` and `g` are both word
/// characters). The escape is captured as group 1 so the replacement keeps it.
macro_rules! token_start {
    () => {
        r"(\\(?:[nrtbf]|u[0-9a-fA-F]{4})|\b)"
    };
}

/// The recognisable secret formats, applied in this order (multi-line PEM blocks first, specific
/// token formats before the generic assignment forms).
pub const PATTERNS: &[Pattern] = &[
    tok(
        "PEM private key (to END, or to the end of the text when cut off)",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?s:.*?)(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\z)",
        REDACTED,
    ),
    tok(
        "OpenAI / Anthropic API key",
        concat!(token_start!(), r"sk-[A-Za-z0-9_-]{32,}"),
        "${1}[REDACTED]",
    ),
    tok(
        "AWS access key id",
        concat!(token_start!(), r"(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
        "${1}[REDACTED]",
    ),
    tok(
        "GitHub token",
        concat!(
            token_start!(),
            r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"
        ),
        "${1}[REDACTED]",
    ),
    tok(
        "GitLab token",
        concat!(token_start!(), r"glpat-[A-Za-z0-9_-]{20,}"),
        "${1}[REDACTED]",
    ),
    tok(
        "Slack token",
        concat!(token_start!(), r"xox[abprs]-[A-Za-z0-9-]{10,}"),
        "${1}[REDACTED]",
    ),
    tok(
        "JWT",
        concat!(
            token_start!(),
            r"eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*"
        ),
        "${1}[REDACTED]",
    ),
    tok(
        "Bearer token",
        concat!(
            "(?i)",
            token_start!(),
            r"(bearer[ \t]+)[A-Za-z0-9._~+/=-]{8,}"
        ),
        "${1}${2}[REDACTED]",
    ),
    tok(
        "Authorization header with Basic/token scheme",
        r#"(?i)\b(authorization[ \t]*[:=][ \t]*(?:basic|token)[ \t]+)[^\s"',;\[\\]+"#,
        "${1}[REDACTED]",
    ),
    tok(
        "Authorization header without a scheme",
        r"(?i)\b(authorization[ \t]*[:=][ \t]*)[A-Za-z0-9._~+/=-]{16,}",
        "${1}[REDACTED]",
    ),
    assign(
        "password/secret/api key assignment",
        r#"(?i)([A-Za-z0-9_.-]*(?:password|passwd|secret|api[_-]?key|apikey|access[_-]?token|auth[_-]?token|private[_-]?key)[A-Za-z0-9_.-]*["']?[ \t]*[:=][ \t]*)(?:"[^"\n]*"|'[^'\n]*'|[^\s"',;&\[]+)"#,
        "${1}[REDACTED]",
    ),
    assign(
        "command-line secret option (--password VALUE)",
        r#"(?i)(\s--?[A-Za-z0-9-]*(?:password|passwd|secret|token|api-key)[ \t]+)[^\s"'\[-][^\s"']*"#,
        "${1}[REDACTED]",
    ),
    tok(
        "credentials in a URL",
        r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]+:)[^/\s@]+(@)",
        "${1}[REDACTED]${2}",
    ),
];

struct Compiled {
    set: RegexSet,
    regexes: Vec<Regex>,
}

/// The patterns, compiled once per process.
fn compiled() -> &'static Compiled {
    static COMPILED: OnceLock<Compiled> = OnceLock::new();
    COMPILED.get_or_init(|| {
        // The patterns are constants covered by tests; failing to compile them is a programming
        // error, caught by the first test that redacts anything.
        let regexes: Vec<Regex> = PATTERNS
            .iter()
            .map(|p| Regex::new(p.regex).expect("built-in redaction pattern compiles"))
            .collect();
        let set = RegexSet::new(PATTERNS.iter().map(|p| p.regex))
            .expect("built-in redaction patterns compile as a set");
        Compiled { set, regexes }
    })
}

/// Whether an environment variable's (or a plan variable's) name says its value is a secret.
pub fn is_secret_name(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    n == "TOKEN"
        || n.ends_with("_TOKEN")
        || n.ends_with("_KEY")
        || n.ends_with("_PAT")
        || n.contains("SECRET")
        || n.contains("PASSWORD")
        || n.contains("PASSWD")
        || n.contains("CREDENTIAL")
        || n.contains("API_KEY")
        || n.contains("APIKEY")
}

/// The forms a known secret can take in text: as is, JSON-escaped (a value inside a serialised
/// document), and JSON-escaped twice (a tool call's arguments, themselves a JSON string inside a
/// request body). A secret holding `"` or `\` looks different in each.
fn text_forms(v: &str) -> Vec<String> {
    let mut forms = vec![v.to_string()];
    let mut cur = v.to_string();
    for _ in 0..2 {
        let quoted = serde_json::to_string(&cur).unwrap_or_default();
        let escaped = quoted
            .get(1..quoted.len().saturating_sub(1))
            .unwrap_or_default()
            .to_string();
        if escaped == cur {
            break;
        }
        forms.push(escaped.clone());
        cur = escaped;
    }
    forms
}

/// The secret values a redactor knows, and one regex matching any of them.
#[derive(Debug, Clone, Default)]
struct Known {
    /// How many distinct secrets were added (each has several text forms).
    secrets: usize,
    /// Every text form of every secret, longest first so a value containing another is redacted
    /// whole.
    forms: Vec<String>,
    /// One regex matching any form literally.
    literal: Option<Regex>,
}

/// Replaces secrets in text and JSON (see the module docs). One per run, shared (`Arc`) by the
/// store, the event writers and the executor, so that secrets learnt when the plan is loaded
/// ([`Redactor::add_values`]) reach every channel at once.
#[derive(Debug, Default)]
pub struct Redactor {
    known: RwLock<Known>,
}

impl Clone for Redactor {
    fn clone(&self) -> Self {
        Redactor {
            known: RwLock::new(self.read().clone()),
        }
    }
}

impl Redactor {
    /// A redactor that knows only the built-in formats.
    pub fn new() -> Self {
        Redactor::default()
    }

    /// A redactor that also knows the values of the runner's secret-looking environment variables.
    pub fn from_env() -> Self {
        Redactor::from_vars(
            std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
        )
    }

    /// Like [`Redactor::from_env`], for an explicit list of variables (tests, embedders).
    pub fn from_vars(vars: impl IntoIterator<Item = (String, String)>) -> Self {
        let values = vars
            .into_iter()
            .filter(|(k, _)| is_secret_name(k))
            .map(|(_, v)| v);
        Redactor::new().with_extra_values(values)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Known> {
        // A panic while holding the lock leaves a consistent `Known` (it is replaced whole).
        self.known.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds known secret values (e.g. an API key read from a config file); short ones are ignored.
    pub fn with_extra_values<I, S>(self, values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.add_values(values);
        self
    }

    /// Adds known secret values to a shared redactor: every holder of the same `Arc` redacts them
    /// from now on. Values shorter than [`MIN_SECRET_LEN`] (after trimming) are ignored.
    pub fn add_values<I, S>(&self, values: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut known = self.known.write().unwrap_or_else(|p| p.into_inner());
        let mut changed = false;
        for v in values {
            let v: String = v.into();
            let v = v.trim();
            if v.len() < MIN_SECRET_LEN || known.forms.iter().any(|f| f == v) {
                continue;
            }
            known.secrets += 1;
            for form in text_forms(v) {
                if !known.forms.contains(&form) {
                    known.forms.push(form);
                }
            }
            changed = true;
        }
        if !changed {
            return;
        }
        known
            .forms
            .sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        let alternation: Vec<String> = known.forms.iter().map(|v| regex::escape(v)).collect();
        // Escaped literals always compile; a size-limit failure falls back to per-value replace.
        known.literal = Regex::new(&alternation.join("|")).ok();
    }

    /// How many known values this redactor replaces (for diagnostics; the values stay private).
    pub fn known_values(&self) -> usize {
        self.read().secrets
    }

    /// Returns `s` with every secret replaced by [`REDACTED`]; borrowed when nothing matched.
    /// For text from outside the runner: outputs, arguments, model text, identifiers, values.
    pub fn redact<'a>(&self, s: &'a str) -> Cow<'a, str> {
        self.apply(s, true)
    }

    /// Redaction for the runner's own messages (errors, diagnostics): known values in all their
    /// forms and the unmistakable token formats, but not the key/value shapes
    /// ([`PatternKind::Assignment`]), which would take the runner's words about a field named
    /// `secrets` or `password` for a secret.
    pub fn redact_message<'a>(&self, s: &'a str) -> Cow<'a, str> {
        self.apply(s, false)
    }

    fn apply<'a>(&self, s: &'a str, assignments: bool) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(s);
        {
            let known = self.read();
            match &known.literal {
                Some(re) => out = replace(out, re, NoExpand(REDACTED)),
                None => {
                    for v in &known.forms {
                        if out.contains(v.as_str()) {
                            out = Cow::Owned(out.replace(v.as_str(), REDACTED));
                        }
                    }
                }
            }
        }
        out = self.collapse_rebuilt_values(out);
        let c = compiled();
        let hits = c.set.matches(&out);
        if !hits.matched_any() {
            return out;
        }
        for i in hits.iter() {
            if assignments || PATTERNS[i].kind == PatternKind::Token {
                out = replace(out, &c.regexes[i], PATTERNS[i].replacement);
            }
        }
        // A pattern's marker can join the text after it into a known value as well (a value
        // that starts with the whole marker; finding 13 in docs/fuzzing.md).
        self.collapse_rebuilt_values(out)
    }

    /// A replacement can join the marker with the text beside it into a known value again (a
    /// secret starting with `]` or `D]` followed by the rest of itself, or ending with `[` or
    /// `[RE` after its start; found by the `redact` fuzz target, docs/fuzzing.md): such an
    /// occurrence and the marker it overlaps become one marker.
    fn collapse_rebuilt_values<'a>(&self, out: Cow<'a, str>) -> Cow<'a, str> {
        // Text nothing was replaced in is the input, in which the replacement found no known
        // value: no marker, so nothing to rebuild, and no second scan of clean text.
        if matches!(out, Cow::Borrowed(_)) {
            return out;
        }
        let known = self.read();
        let find = |text: &str, from: usize| -> Option<(usize, usize)> {
            match &known.literal {
                Some(re) => re.find_at(text, from).map(|m| (m.start(), m.end())),
                None => known
                    .forms
                    .iter()
                    .filter_map(|v| {
                        text[from..]
                            .find(v.as_str())
                            .map(|i| (from + i, from + i + v.len()))
                    })
                    .min(),
            }
        };
        if find(&out, 0).is_some() {
            Cow::Owned(collapse_rebuilt(out.into_owned(), find))
        } else {
            out
        }
    }

    /// Owned-string convenience for [`Redactor::redact`].
    pub fn redact_string(&self, s: String) -> String {
        match self.redact(&s) {
            Cow::Borrowed(_) => s,
            Cow::Owned(o) => o,
        }
    }

    /// Redacts every string in a JSON value, recursively: array items, object values and keys.
    /// Redact values this way *before* serialising them: a secret holding `"` or `\` is escaped
    /// by serialisation and no longer matches itself.
    pub fn redact_value(&self, v: &Value) -> Value {
        self.redact_value_with(v, true)
    }

    /// [`Redactor::redact_value`] with the rules of [`Redactor::redact_message`], for a document
    /// of the runner's own words (a diagnosis, a listing): known values and token formats go, a
    /// message about a field named `api_key: …` stays readable.
    pub fn redact_value_message(&self, v: &Value) -> Value {
        self.redact_value_with(v, false)
    }

    fn redact_value_with(&self, v: &Value, assignments: bool) -> Value {
        match v {
            Value::String(s) => Value::String(self.apply(s, assignments).into_owned()),
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|i| self.redact_value_with(i, assignments))
                    .collect(),
            ),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| {
                        (
                            self.apply(k, assignments).into_owned(),
                            self.redact_value_with(v, assignments),
                        )
                    })
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// Redacts a JSON document given as text: parsed, redacted value by value, serialised again.
    /// Text that is not JSON is redacted as text (with the escaped forms of known values).
    pub fn redact_json_text(&self, text: &str) -> String {
        // Fast path: the text rules see every form a value can take in JSON (escaped known values,
        // tokens after escapes), so text they leave alone holds no value to redact.
        if matches!(self.redact(text), Cow::Borrowed(_)) {
            return text.to_string();
        }
        match serde_json::from_str::<Value>(text) {
            Ok(v) => {
                let red = self.redact_value(&v);
                if red == v {
                    text.to_string()
                } else {
                    red.to_string()
                }
            }
            Err(_) => self.redact(text).into_owned(),
        }
    }
}

/// The runner's own secrets: each read by [`runner_secret`] from the variable or its `_FILE` form,
/// and neither form ever passed to a command, whatever the policy says.
pub const RUNNER_SECRETS: &[&str] = &["ACODE_APPROVAL_KEY", "ACODE_LLM_API_KEY"];

/// Whether `name` is one of [`RUNNER_SECRETS`] or its `_FILE` form.
pub fn is_runner_secret_var(name: &str) -> bool {
    RUNNER_SECRETS
        .iter()
        .any(|s| name == *s || name.strip_suffix("_FILE") == Some(s))
}

/// The most bytes read from a `*_FILE` secret: keys are short; anything larger is a mistake.
pub const MAX_SECRET_FILE_BYTES: u64 = 64 * 1024;

/// A runner secret (`ACODE_APPROVAL_KEY`, `ACODE_LLM_API_KEY`) that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// Both the variable and its `_FILE` form are set: which one is meant is unclear.
    #[error("both {name} and {name}_FILE are set; set one of them")]
    Both {
        /// The variable.
        name: String,
    },
    /// The `_FILE` variable names something that cannot be used.
    #[error("{name}_FILE={path}: {message}")]
    File {
        /// The variable (without `_FILE`).
        name: String,
        /// The path it named.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// Reads a runner secret once, at start: from `{name}_FILE` (a regular file of at most
/// [`MAX_SECRET_FILE_BYTES`], one trailing newline trimmed) when set, else from `{name}`. Reading
/// it from a file keeps it out of the runner's environment, which every process of the same user
/// may read under `/proc`. `Ok(None)` when neither is set or the value is empty.
pub fn runner_secret(name: &str) -> Result<Option<String>, SecretError> {
    let file_var = format!("{name}_FILE");
    let direct = std::env::var_os(name).filter(|v| !v.is_empty());
    let Some(path) = std::env::var_os(&file_var).filter(|v| !v.is_empty()) else {
        return Ok(direct.map(|v| v.to_string_lossy().into_owned()));
    };
    if direct.is_some() {
        return Err(SecretError::Both {
            name: name.to_string(),
        });
    }
    let path = std::path::PathBuf::from(path);
    let fail = |message: String| SecretError::File {
        name: name.to_string(),
        path: path.display().to_string(),
        message,
    };
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    // Non-blocking, so a FIFO cannot hold the runner at open; refused as not a regular file.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| fail(format!("cannot open: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| fail(format!("cannot stat: {e}")))?;
    if !meta.is_file() {
        return Err(fail("not a regular file".to_string()));
    }
    let mut bytes = Vec::new();
    file.take(MAX_SECRET_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(format!("cannot read: {e}")))?;
    if bytes.len() as u64 > MAX_SECRET_FILE_BYTES {
        return Err(fail(format!(
            "larger than {MAX_SECRET_FILE_BYTES} bytes; a key file holds one key"
        )));
    }
    let mut text = String::from_utf8(bytes).map_err(|_| fail("not UTF-8 text".to_string()))?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    if text.is_empty() {
        return Err(fail("the file is empty".to_string()));
    }
    Ok(Some(text))
}

/// Applies one regex, keeping the text borrowed when it does not match.
fn replace<'a, R: regex::Replacer>(cur: Cow<'a, str>, re: &Regex, rep: R) -> Cow<'a, str> {
    match cur {
        Cow::Borrowed(b) => re.replace_all(b, rep),
        Cow::Owned(o) => {
            if re.is_match(&o) {
                Cow::Owned(re.replace_all(&o, rep).into_owned())
            } else {
                Cow::Owned(o)
            }
        }
    }
}

/// The most rebuilt occurrences [`collapse_rebuilt`] merges before it gives up and masks the rest
/// of the text (fail closed: only a value overlapping the marker, repeated by its text, gets there).
const MAX_REBUILT: usize = 10_000;

/// Merges every occurrence of a known value left after the first replacement (each overlaps a
/// marker: the first pass replaced all others) with the marker(s) it overlaps, into one marker,
/// left to right; an occurrence lying inside a marker (a value that is part of `[REDACTED]`) is
/// left. Each merge removes at least one character of the text, so this ends.
fn collapse_rebuilt(mut s: String, find: impl Fn(&str, usize) -> Option<(usize, usize)>) -> String {
    let marker = REDACTED.as_bytes();
    // The start of the marker that holds byte `i`, if one does.
    let marker_at = |s: &str, i: usize| -> Option<usize> {
        let b = s.as_bytes();
        (i.saturating_sub(marker.len() - 1)..=i)
            .rev()
            .find(|&ms| b.get(ms..ms + marker.len()) == Some(marker))
    };
    let mut pos = 0;
    for _ in 0..MAX_REBUILT {
        let Some((a, b)) = find(&s, pos) else {
            return s;
        };
        let first = marker_at(&s, a);
        if first.is_some_and(|ms| b <= ms + marker.len()) {
            // Inside one marker (a value that is part of `[REDACTED]`): not a rebuilt value.
            pos = a + 1;
            while pos < s.len() && !s.is_char_boundary(pos) {
                pos += 1;
            }
            if pos >= s.len() {
                return s;
            }
            continue;
        }
        let start = first.unwrap_or(a);
        let end = marker_at(&s, b - 1).map_or(b, |ms| ms + marker.len());
        s.replace_range(start..end, REDACTED);
        // A new occurrence may begin before the marker just written.
        let mut back = start.saturating_sub(MAX_SECRET_BACKTRACK);
        while !s.is_char_boundary(back) {
            back -= 1;
        }
        pos = back;
    }
    // Give up on this text: nothing of it is shown.
    REDACTED.to_string()
}

/// How far before a merged marker a value that ends inside it may begin (a value is at most this
/// long in practice; longer ones are found from an earlier position anyway by the first pass).
const MAX_SECRET_BACKTRACK: usize = 4096;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Found by the `redact` fuzz target's long run (finding 13, docs/fuzzing.md): a known value
    /// that starts with the whole marker (`[REDACTED]` and a replacement character) was rebuilt
    /// by an `Authorization` pattern's marker and the character after it; the input is the
    /// target's, built the way the target builds it.
    #[test]
    fn a_patterns_marker_cannot_rebuild_a_known_value_either() {
        use base64::Engine as _;
        let data = base64::engine::general_purpose::STANDARD
            .decode(
                "+/9bUkVEQUNURURd//////8MCHNrQmVhdXQtYWJjZAB6YXRpb246IEJjIEF1dGhvcml6YXRpb246IEJl\
                 YXV0aG9yaXphdGlvcmX/////////////////////AxEAUkVEQUNURURd////ciD///8RAAAAqgB4CAAAqAEIEA==",
            )
            .unwrap();
        let len = usize::from(data[0] % 48);
        let (secret, text) = data[2..].split_at(len);
        let secret = String::from_utf8_lossy(secret).trim().to_string();
        let text = String::from_utf8_lossy(text).into_owned();
        let mut at = usize::from(data[1]) % (text.len() + 1);
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        let planted = format!("{}{secret}{}", &text[..at], &text[at..]);
        let red = r().with_extra_values([secret.clone()]);
        for out in [red.redact(&planted), red.redact_message(&planted)] {
            assert!(!out.contains(&secret), "{secret:?} in {out:?}");
            assert_eq!(red.redact(&out), out);
        }
    }

    /// Found by the `redact` fuzz target's long run (finding 12, docs/fuzzing.md): a secret of a
    /// `0` and NULs planted after NULs. Its escaped form `0\u0000…` appears in the JSON text
    /// `\u0000\u0000…` across escapes without the secret being there; the secret itself is
    /// redacted, and nothing read back from the text holds it.
    #[test]
    fn a_secret_of_nuls_after_nuls_is_redacted_in_json_text() {
        let secret = "0\0\0\0\0\0";
        let planted = format!("\0\0\0\0\0\0{secret}\u{fffd}\0\0\0\x0c\0");
        let red = r().with_extra_values([secret.to_string()]);
        let doc = json!({"s": planted, "a": [planted], planted.clone(): 1}).to_string();
        let out = red.redact_json_text(&doc);
        let back: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            back["s"],
            format!("\0\0\0\0\0\0{REDACTED}\u{fffd}\0\0\0\x0c\0"),
            "{out}"
        );
        assert_eq!(back["a"][0], back["s"]);
        let key = back
            .as_object()
            .unwrap()
            .keys()
            .find(|k| k.as_str() != "a" && k.as_str() != "s");
        assert_eq!(key.map(String::as_str), back["s"].as_str());
    }

    fn r() -> Redactor {
        Redactor::new()
    }

    /// Asserts that `secret` does not survive redaction of `text` and that [REDACTED] appears.
    fn gone(red: &Redactor, text: &str, secret: &str) {
        let out = red.redact(text);
        assert!(!out.contains(secret), "{secret:?} survived in {out:?}");
        assert!(out.contains(REDACTED), "{out:?}");
        // Idempotent.
        assert_eq!(red.redact(&out), out, "second pass changed {out:?}");
    }

    /// Found by the `redact` fuzz target (docs/fuzzing.md): a secret starting with the marker's
    /// end, followed by the rest of itself, was rebuilt by its own replacement.
    #[test]
    fn the_marker_cannot_rebuild_a_secret_with_the_text_after_it() {
        for secret in ["]abc123xyz", "D]o\u{1}:\"v0", "EDACTED]o:x"] {
            let red = r().with_extra_values([secret]);
            let rest = &secret[secret.find(']').unwrap() + 1..];
            for text in [
                format!("{secret}{rest}"),
                format!("c@d{secret}{rest}{rest}\"}}"),
            ] {
                gone(&red, &text, secret);
                let v = red.redact_value(&serde_json::Value::String(text.clone()));
                assert!(!v.as_str().unwrap().contains(secret), "{v}");
            }
        }
    }

    /// Found by the `redact` fuzz target in the CI smoke: a secret beginning with the marker's end
    /// (`D]`) followed by more of what follows it than a few rounds of replacement could eat, and
    /// one ending with the marker's start (`[RE`) after text that repeats its beginning.
    #[test]
    fn a_value_overlapping_the_marker_is_never_rebuilt_however_often_its_text_repeats() {
        let zeros = "\0".repeat(60);
        for (secret, text) in [
            ("D]\0\0\0\0\0", format!("\0\0\0D]{zeros})")),
            (
                "]abc123xyz",
                format!("]abc123xyz{}", "abc123xyz".repeat(50)),
            ),
            (
                "abcdef[RE",
                format!("{}abcdef[RE tail", "abcdef".repeat(50)),
            ),
            ("ED][RE", "ED][RE and [REDACTED][REDACTED] too".to_string()),
        ] {
            let red = r().with_extra_values([secret]);
            for out in [red.redact(&text), red.redact_message(&text)] {
                assert!(!out.contains(secret), "{secret:?} survived in {out:?}");
                assert_eq!(red.redact(&out), out, "not a fixed point for {secret:?}");
            }
        }
        // A value that is part of the marker is left where it is inside markers.
        let red = r().with_extra_values(["REDACT"]);
        assert_eq!(red.redact("x REDACT y"), "x [REDACTED] y");
    }

    #[test]
    fn recognisable_formats_are_redacted() {
        let red = r();
        let cases: &[(&str, &str)] = &[
            ("key AKIAIOSFODNN7EXAMPLE used", "AKIAIOSFODNN7EXAMPLE"),
            ("ASIAY34FZKBOKMUTVV7A", "ASIAY34FZKBOKMUTVV7A"),
            (
                "token ghp_16C7e42F292c6912E7710c838347Ae178B4a end",
                "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
            ),
            (
                "gho_16C7e42F292c6912E7710c838347Ae178B4a",
                "gho_16C7e42F292c6912E7710c838347Ae178B4a",
            ),
            (
                "ghs_16C7e42F292c6912E7710c838347Ae178B4a",
                "ghs_16C7e42F292c6912E7710c838347Ae178B4a",
            ),
            (
                "github_pat_11ABCDEFG0abcdefghijkl_mnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTU",
                "github_pat_11ABCDEFG0abcdefghijkl",
            ),
            ("glpat-xxxxXXXXxxxxXXXX1234", "glpat-xxxxXXXXxxxxXXXX1234"),
            (
                "OPENAI=sk-abcdefghijklmnopqrstuvwxyz0123456789ABCD",
                "sk-abcdefghijklmnopqrstuvwxyz0123456789ABCD",
            ),
            (
                "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0f",
                "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0f",
            ),
            (
                "x-api-key: sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_AbCdEf",
                "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
            ),
            ("xoxb-1234567890-abcdefghij", "xoxb-1234567890-abcdefghij"),
            (
                "xoxp-1234567890-0987654321-abc",
                "xoxp-1234567890-0987654321-abc",
            ),
            (
                "jwt=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
                "eyJzdWIiOiIxMjM0NTY3ODkwIn0",
            ),
            (
                "Authorization: Bearer abc.def-ghi_jkl~123",
                "abc.def-ghi_jkl~123",
            ),
            ("authorization: bearer sometokenvalue", "sometokenvalue"),
            (
                "Authorization: Basic dXNlcjpwYXNzd29yZA==",
                "dXNlcjpwYXNzd29yZA",
            ),
            ("Authorization: token 0123456789abcdef", "0123456789abcdef"),
            ("password=hunter2", "hunter2"),
            ("DB_PASSWORD=hunter2!", "hunter2!"),
            ("passwd: s3cr3t", "s3cr3t"),
            ("secret = 'topsecretvalue'", "topsecretvalue"),
            ("client_secret=abc123xyz", "abc123xyz"),
            ("{\"password\": \"p@ss w0rd\"}", "p@ss"),
            ("{\"password\": \"p@ss w0rd\"}", "w0rd"),
            ("api_key=ZXY987", "ZXY987"),
            ("API-KEY: ZXY987", "ZXY987"),
            ("mysql --password hunter22 -u root", "hunter22"),
            ("cli --token abcdef123456", "abcdef123456"),
            ("https://user:hunter2@example.com/repo.git", "hunter2"),
            ("postgres://admin:pa55word@db:5432/app", "pa55word"),
        ];
        for (text, secret) in cases {
            gone(&red, text, secret);
        }
    }

    #[test]
    fn pem_private_keys_are_redacted_whole() {
        let red = r();
        let pem = "before\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA1\nabcDEF==\n-----END RSA PRIVATE KEY-----\nafter";
        let out = red.redact(pem);
        assert_eq!(out, "before\n[REDACTED]\nafter");
        let openssh = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----";
        assert_eq!(red.redact(openssh), REDACTED);
        let plain = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----";
        assert_eq!(red.redact(plain), REDACTED);
        // Cut off by an output cap: everything after BEGIN goes.
        let cut = "log\n-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIIr";
        assert_eq!(red.redact(cut), "log\n[REDACTED]");
        // Public material is not a secret.
        let public = "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----";
        assert!(matches!(red.redact(public), Cow::Borrowed(_)));
    }

    #[test]
    fn keys_are_kept_for_context() {
        let red = r();
        assert_eq!(
            red.redact("password=hunter2 next"),
            "password=[REDACTED] next"
        );
        assert_eq!(
            red.redact("Authorization: Bearer abcdefghij"),
            "Authorization: Bearer [REDACTED]"
        );
        assert_eq!(
            red.redact("git clone https://bot:tok3n@host/x"),
            "git clone https://bot:[REDACTED]@host/x"
        );
    }

    #[test]
    fn ordinary_text_is_left_alone_and_borrowed() {
        let red = r();
        for text in [
            "",
            "cargo test --quiet",
            "test result: ok. 12 passed; 0 failed",
            "warning: unused variable: `x`",
            "https://example.com:8080/path?q=1",
            "http://localhost:11434/v1/chat/completions",
            "no secrets here, just a password prompt",
            "the secret of comedy",
            "sk-short",
            "AKIA123",
            "ghp_short",
            "Bearer",
            "eyJ alone",
            "let tokens = lexer.tokenize(src);",
            "fn password_strength(p: &str) -> u8",
            "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
            "commit 3f2a9c1b7e4d5a6f8b9c0d1e2f3a4b5c6d7e8f9a",
            "sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        ] {
            let out = red.redact(text);
            assert!(matches!(out, Cow::Borrowed(_)), "{text:?} became {out:?}");
        }
    }

    #[test]
    fn env_values_are_redacted_by_name() {
        let red = Redactor::from_vars([
            ("MY_SERVICE_TOKEN".to_string(), "tok-1234567".to_string()),
            ("DEPLOY_KEY".to_string(), "dk_abcdef".to_string()),
            ("DB_PASSWORD".to_string(), "opensesame".to_string()),
            ("APP_SECRET_VALUE".to_string(), "shhhhhhh".to_string()),
            ("ACODE_LLM_API_KEY".to_string(), "llm-key-42".to_string()),
            ("SHORT_TOKEN".to_string(), "abc".to_string()),
            ("HOME".to_string(), "/home/someone".to_string()),
        ]);
        assert_eq!(red.known_values(), 5);
        for s in [
            "tok-1234567",
            "dk_abcdef",
            "opensesame",
            "shhhhhhh",
            "llm-key-42",
        ] {
            gone(&red, &format!("value {s} printed"), s);
            gone(&red, &format!("embedded:{s}:here"), s);
        }
        assert!(matches!(red.redact("abc"), Cow::Borrowed(_)));
        assert!(matches!(red.redact("/home/someone"), Cow::Borrowed(_)));
    }

    #[test]
    fn longer_values_win_over_their_prefixes() {
        let red = Redactor::new().with_extra_values(["abcdef", "abcdefghij"]);
        assert_eq!(red.redact("x abcdefghij y"), "x [REDACTED] y");
        assert_eq!(red.redact("abcdef"), REDACTED);
    }

    #[test]
    fn values_with_regex_characters_are_literal() {
        let red = Redactor::new().with_extra_values(["a.b*c(d)$"]);
        assert_eq!(red.redact("pre a.b*c(d)$ post"), "pre [REDACTED] post");
        assert!(matches!(red.redact("aXbbbc(d)"), Cow::Borrowed(_)));
    }

    #[test]
    fn secret_names() {
        for n in [
            "GITHUB_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "OPENAI_API_KEY",
            "DB_PASSWORD",
            "client_secret",
            "GITLAB_PAT",
            "TOKEN",
        ] {
            assert!(is_secret_name(n), "{n}");
        }
        for n in ["PATH", "HOME", "KEYBOARD", "TOKENIZERS_PARALLELISM", "LANG"] {
            assert!(!is_secret_name(n), "{n}");
        }
    }

    #[test]
    fn json_values_are_redacted_recursively() {
        let red = Redactor::new().with_extra_values(["s3cr3t-value"]);
        let v = json!({
            "command": "deploy --key s3cr3t-value",
            "env": {"X": "s3cr3t-value", "s3cr3t-value": 1},
            "argv": ["a", "Bearer abcdefghijk"],
            "n": 5,
            "ok": true,
            "none": null
        });
        let out = red.redact_value(&v);
        let text = out.to_string();
        assert!(!text.contains("s3cr3t-value"), "{text}");
        assert!(!text.contains("abcdefghijk"), "{text}");
        assert_eq!(out["n"], 5);
        assert_eq!(out["ok"], true);
        assert_eq!(out["argv"][0], "a");
        assert_eq!(out["env"]["X"], REDACTED);
    }

    #[test]
    fn secrets_with_quotes_and_backslashes_are_found_in_every_form() {
        let secret = r#"pa"ss\word-42"#;
        let red = Redactor::new().with_extra_values([secret]);
        // As a value, serialised after redaction.
        let v = json!({"env": {"DEPLOY": secret}, "argv": ["x", format!("--k={secret}")]});
        let text = red.redact_value(&v).to_string();
        assert!(!text.contains("ss\\\\word"), "{text}");
        // Already serialised once (arguments in a text channel) and twice (arguments inside a
        // request body).
        let once = v.to_string();
        let twice = serde_json::to_string(&once).unwrap();
        for t in [&once, &twice] {
            let out = red.redact(t);
            assert!(
                !out.contains("ss\\\\word") && !out.contains("ss\\word"),
                "{out}"
            );
            assert!(out.contains(REDACTED), "{out}");
        }
        assert_eq!(red.known_values(), 1);
        // A JSON document given as text is redacted value by value.
        let out = red.redact_json_text(&once);
        assert!(!out.contains("word-42"), "{out}");
        assert!(serde_json::from_str::<Value>(&out).is_ok(), "{out}");
    }

    #[test]
    fn tokens_right_after_an_escape_are_found() {
        let red = r();
        let token = "ghp_16C7e42F292c6912E7710c838347Ae178B4a";
        for text in [
            format!(r#"{{"content":"line one\n{token}\n"}}"#),
            format!(r#""\t{token}""#),
            format!(r#""\u001b{token}""#),
            r#""\nBearer abcdefghijkl""#.to_string(),
            r#""\nsk-abcdefghijklmnopqrstuvwxyz0123456789ABCD""#.to_string(),
            r#""\nAKIAIOSFODNN7EXAMPLE""#.to_string(),
        ] {
            let out = red.redact(&text);
            assert!(!out.contains(&token[4..]), "{out}");
            assert!(!out.contains("abcdefghijkl"), "{out}");
            assert!(!out.contains("IOSFODNN7"), "{out}");
            // The escape itself is kept, so the JSON stays valid.
            assert!(out.contains('\\'), "{out}");
        }
        // Word characters before a token still protect ordinary words.
        assert!(matches!(
            red.redact("risk-assessment-for-the-quarterly-report-2024"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn the_runners_messages_about_fields_stay_readable() {
        let red = Redactor::new().with_extra_values(["deploy-secret-1"]);
        for msg in [
            "plan.secrets: unknown field (expected one of: plan_id, steps)",
            "plan.variables.db_password: expected a string, number or boolean, got [1]",
            "steps[0].arguments.env.API_KEY: this environment variable cannot be set",
        ] {
            assert_eq!(red.redact_message(msg), msg);
        }
        // Known values and token formats still go.
        assert_eq!(
            red.redact_message("step x: deploy-secret-1 refused"),
            "step x: [REDACTED] refused"
        );
        assert!(
            !red.redact_message("got ghp_16C7e42F292c6912E7710c838347Ae178B4a")
                .contains("ghp_16C7")
        );
        // Outside text keeps the key/value rules.
        assert_eq!(red.redact("password: hunter2"), "password: [REDACTED]");
    }

    #[test]
    fn values_added_to_a_shared_redactor_reach_every_holder() {
        let shared = std::sync::Arc::new(Redactor::new());
        let holder = shared.clone();
        assert!(matches!(
            holder.redact("value tok-abcdef"),
            Cow::Borrowed(_)
        ));
        shared.add_values(["tok-abcdef", "tiny"]);
        assert_eq!(holder.redact("value tok-abcdef"), "value [REDACTED]");
        assert_eq!(holder.known_values(), 1);
        // Adding the same value twice changes nothing.
        shared.add_values(["tok-abcdef"]);
        assert_eq!(holder.known_values(), 1);
    }

    #[test]
    fn runner_secrets_come_from_files() {
        let dir = std::env::temp_dir().join(format!("acode-secret-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let name = format!("ACODE_TEST_SECRET_{}", std::process::id());
        let file_var = format!("{name}_FILE");
        let key = dir.join("key");
        std::fs::write(&key, "file-key-123\n").unwrap();
        // SAFETY (set_var): the variables are unique to this test.
        unsafe { std::env::set_var(&file_var, &key) };
        assert_eq!(
            runner_secret(&name).unwrap().as_deref(),
            Some("file-key-123")
        );
        unsafe { std::env::set_var(&name, "direct") };
        assert!(matches!(
            runner_secret(&name),
            Err(SecretError::Both { .. })
        ));
        unsafe { std::env::remove_var(&name) };
        for (path, why) in [
            (dir.clone(), "not a regular file"),
            (dir.join("missing"), "cannot open"),
        ] {
            unsafe { std::env::set_var(&file_var, &path) };
            let err = runner_secret(&name).unwrap_err().to_string();
            assert!(err.contains(&file_var) && err.contains(why), "{err}");
        }
        let big = dir.join("big");
        std::fs::write(&big, vec![b'x'; MAX_SECRET_FILE_BYTES as usize + 1]).unwrap();
        unsafe { std::env::set_var(&file_var, &big) };
        assert!(
            runner_secret(&name)
                .unwrap_err()
                .to_string()
                .contains("larger")
        );
        unsafe { std::env::remove_var(&file_var) };
        assert_eq!(runner_secret(&name).unwrap(), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn every_pattern_compiles() {
        assert_eq!(compiled().regexes.len(), PATTERNS.len());
    }

    #[test]
    fn redact_string_reuses_the_allocation() {
        let red = r();
        let s = String::from("nothing to see");
        let ptr = s.as_ptr();
        let out = red.redact_string(s);
        assert_eq!(out.as_ptr(), ptr);
    }
}
