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
use std::sync::OnceLock;

use regex::{NoExpand, Regex, RegexSet};
use serde_json::Value;

/// What a secret is replaced by.
pub const REDACTED: &str = "[REDACTED]";

/// Environment values shorter than this are not treated as secrets (too likely to be noise).
pub const MIN_SECRET_LEN: usize = 6;

/// One recognisable secret format: a regex and its replacement (`${1}` keeps a key part).
#[derive(Debug, Clone, Copy)]
pub struct Pattern {
    /// What it catches, for documentation and test messages.
    pub name: &'static str,
    /// The regex (Rust `regex` syntax).
    pub regex: &'static str,
    /// The replacement; `$1`-style groups keep the non-secret part.
    pub replacement: &'static str,
}

const fn pat(name: &'static str, regex: &'static str, replacement: &'static str) -> Pattern {
    Pattern {
        name,
        regex,
        replacement,
    }
}

/// The recognisable secret formats, applied in this order (multi-line PEM blocks first, specific
/// token formats before the generic assignment forms).
pub const PATTERNS: &[Pattern] = &[
    pat(
        "PEM private key (to END, or to the end of the text when cut off)",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?s:.*?)(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\z)",
        REDACTED,
    ),
    pat(
        "OpenAI / Anthropic API key",
        r"\bsk-[A-Za-z0-9_-]{32,}",
        REDACTED,
    ),
    pat(
        "AWS access key id",
        r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b",
        REDACTED,
    ),
    pat(
        "GitHub token",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})",
        REDACTED,
    ),
    pat("GitLab token", r"\bglpat-[A-Za-z0-9_-]{20,}", REDACTED),
    pat("Slack token", r"\bxox[abprs]-[A-Za-z0-9-]{10,}", REDACTED),
    pat(
        "JWT",
        r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*",
        REDACTED,
    ),
    pat(
        "Bearer token",
        r"(?i)\b(bearer[ \t]+)[A-Za-z0-9._~+/=-]{8,}",
        "${1}[REDACTED]",
    ),
    pat(
        "Authorization header with Basic/token scheme",
        r#"(?i)\b(authorization[ \t]*[:=][ \t]*(?:basic|token)[ \t]+)[^\s"',;\[]+"#,
        "${1}[REDACTED]",
    ),
    pat(
        "Authorization header without a scheme",
        r"(?i)\b(authorization[ \t]*[:=][ \t]*)[A-Za-z0-9._~+/=-]{16,}",
        "${1}[REDACTED]",
    ),
    pat(
        "password/secret/api key assignment",
        r#"(?i)([A-Za-z0-9_.-]*(?:password|passwd|secret|api[_-]?key|apikey|access[_-]?token|auth[_-]?token|private[_-]?key)[A-Za-z0-9_.-]*["']?[ \t]*[:=][ \t]*)(?:"[^"\n]*"|'[^'\n]*'|[^\s"',;&\[]+)"#,
        "${1}[REDACTED]",
    ),
    pat(
        "command-line secret option (--password VALUE)",
        r#"(?i)(\s--?[A-Za-z0-9-]*(?:password|passwd|secret|token|api-key)[ \t]+)[^\s"'\[-][^\s"']*"#,
        "${1}[REDACTED]",
    ),
    pat(
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

/// Whether an environment variable's name says its value is a secret.
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

/// Replaces secrets in text and JSON (see the module docs). Cheap to clone; build one per run.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// Known secret values, longest first so a value containing another is redacted whole.
    values: Vec<String>,
    /// One regex matching any known value literally.
    literal: Option<Regex>,
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

    /// Adds known secret values (e.g. an API key read from a config file); short ones are ignored.
    pub fn with_extra_values<I, S>(mut self, values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        for v in values {
            let v: String = v.into();
            let v = v.trim().to_string();
            if v.len() >= MIN_SECRET_LEN && !self.values.contains(&v) {
                self.values.push(v);
            }
        }
        self.values
            .sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        self.literal = if self.values.is_empty() {
            None
        } else {
            let alternation: Vec<String> = self.values.iter().map(|v| regex::escape(v)).collect();
            // Escaped literals always compile; a size-limit failure falls back to per-value replace.
            Regex::new(&alternation.join("|")).ok()
        };
        self
    }

    /// How many known values this redactor replaces (for diagnostics; the values stay private).
    pub fn known_values(&self) -> usize {
        self.values.len()
    }

    /// Returns `s` with every secret replaced by [`REDACTED`]; borrowed when nothing matched.
    pub fn redact<'a>(&self, s: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(s);
        if !self.values.is_empty() {
            match &self.literal {
                Some(re) => out = replace(out, re, NoExpand(REDACTED)),
                None => {
                    for v in &self.values {
                        if out.contains(v.as_str()) {
                            out = Cow::Owned(out.replace(v.as_str(), REDACTED));
                        }
                    }
                }
            }
        }
        let c = compiled();
        let hits = c.set.matches(&out);
        if !hits.matched_any() {
            return out;
        }
        for i in hits.iter() {
            out = replace(out, &c.regexes[i], PATTERNS[i].replacement);
        }
        out
    }

    /// Owned-string convenience for [`Redactor::redact`].
    pub fn redact_string(&self, s: String) -> String {
        match self.redact(&s) {
            Cow::Borrowed(_) => s,
            Cow::Owned(o) => o,
        }
    }

    /// Redacts every string in a JSON value, recursively: array items, object values and keys.
    pub fn redact_value(&self, v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(self.redact(s).into_owned()),
            Value::Array(items) => {
                Value::Array(items.iter().map(|i| self.redact_value(i)).collect())
            }
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (self.redact(k).into_owned(), self.redact_value(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
