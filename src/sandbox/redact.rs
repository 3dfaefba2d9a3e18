//! Placeholder until the redaction work lands (branch `cmd`): same API, no redaction yet.

use std::borrow::Cow;

/// Replaces secrets with `[REDACTED]` (placeholder: passes text through).
#[derive(Debug, Default, Clone)]
pub struct Redactor;

impl Redactor {
    /// Collects secret values from the environment.
    pub fn from_env() -> Self {
        Redactor
    }
    /// Redacts a string.
    pub fn redact<'a>(&self, s: &'a str) -> Cow<'a, str> {
        Cow::Borrowed(s)
    }
    /// Redacts every string in a JSON value.
    pub fn redact_value(&self, v: &serde_json::Value) -> serde_json::Value {
        v.clone()
    }
}
