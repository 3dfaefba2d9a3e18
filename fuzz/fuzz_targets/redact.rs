//! Redaction: `redact::Redactor` (what the store, the events and the executor pass every text
//! and value through) with one known secret (as a run learns a secret variable's value), planted
//! at a position the fuzzer picks inside text the fuzzer writes.
//!
//! Properties: the secret (trimmed, as the redactor keeps it, and at least `MIN_SECRET_LEN`
//! long, and not part of the marker `[REDACTED]` itself) never survives `redact`, `redact_message`, `redact_value` (as a string, an array item,
//! an object value and key) or `redact_json_text` (read back as JSON, and as raw text in its
//! escaped form, starting at an escape's start: finding 12 in docs/fuzzing.md); redaction is a
//! fixed point (redacting the output again changes nothing).
#![no_main]

use acode_run::redact::{MIN_SECRET_LEN, REDACTED, Redactor};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

fn holds(v: &Value, secret: &str) -> bool {
    match v {
        Value::String(s) => s.contains(secret),
        Value::Array(a) => a.iter().any(|i| holds(i, secret)),
        Value::Object(m) => m
            .iter()
            .any(|(k, v)| k.contains(secret) || holds(v, secret)),
        _ => false,
    }
}

/// Whether `needle` (JSON-escaped text, itself whole escapes) occurs in the JSON text `doc`
/// starting where a token starts, not inside an escape: `\u0000\u0000` holds the text
/// `0\u0000` (the last digit of one escape and the next), which is not a NUL after a `0`.
fn contains_aligned(doc: &str, needle: &str) -> bool {
    let bytes = doc.as_bytes();
    let mut starts = vec![true; bytes.len() + 1];
    let mut i = 0;
    let mut in_string = false;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => in_string = !in_string,
            b'\\' if in_string => {
                let len = if bytes.get(i + 1) == Some(&b'u') {
                    6
                } else {
                    2
                };
                for s in starts.iter_mut().skip(i + 1).take(len - 1) {
                    *s = false;
                }
                i += len;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    doc.match_indices(needle).any(|(at, _)| starts[at])
}

fuzz_target!(|data: &[u8]| {
    let [len, at, rest @ ..] = data else { return };
    let len = usize::from(*len % 48);
    if rest.len() < len {
        return;
    }
    let (secret, text) = rest.split_at(len);
    let secret = String::from_utf8_lossy(secret);
    let secret = secret.trim();
    // A secret inside the marker itself (`REDACTED`) is in every redacted text by construction.
    if secret.len() < MIN_SECRET_LEN || REDACTED.contains(secret) {
        return;
    }
    let text = String::from_utf8_lossy(text).into_owned();
    let mut at = usize::from(*at) % (text.len() + 1);
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let planted = format!("{}{secret}{}", &text[..at], &text[at..]);
    let red = Redactor::new().with_extra_values([secret.to_string()]);

    for (how, out) in [
        ("redact", red.redact(&planted).into_owned()),
        ("redact_message", red.redact_message(&planted).into_owned()),
    ] {
        assert!(
            !out.contains(secret),
            "{how}: {secret:?} survived in {out:?}"
        );
    }
    let out = red.redact(&planted);
    assert_eq!(red.redact(&out), out, "a second pass changed the output");

    let value = json!({"s": planted, "a": [planted], planted.clone(): 1});
    let redacted = red.redact_value(&value);
    assert!(
        !holds(&redacted, secret),
        "redact_value: {secret:?} survived in {redacted}"
    );

    let doc = value.to_string();
    let out = red.redact_json_text(&doc);
    let escaped = serde_json::to_string(secret).unwrap();
    let escaped = &escaped[1..escaped.len() - 1];
    assert!(
        !contains_aligned(&out, escaped),
        "redact_json_text: {escaped:?} survived in {out:?}"
    );
    if let Ok(back) = serde_json::from_str::<Value>(&out) {
        assert!(
            !holds(&back, secret),
            "redact_json_text: {secret:?} survived in {out}"
        );
    }
});
