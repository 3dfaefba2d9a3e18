//! Arguments mirrored into HTTP headers (SEP-2243, the 2026-07-28 revision's Streamable HTTP):
//! a tool's `inputSchema` may mark a primitive argument with `"x-mcp-header": "Region"`, and a
//! client then sends its value as `Mcp-Param-Region` with every `tools/call` of that tool, so a
//! load balancer can route on it without reading the body; a server rejects a call whose headers
//! and body disagree (`HeaderMismatch`). A tool whose marks break the rules is left out of what
//! `tools/list` gives the client, and the reason is logged.
//!
//! Marks are read along chains of `properties` (at any depth of nested objects), the only place
//! the revision allows them; a mark anywhere else — under `items`, a combinator (`oneOf`,
//! `anyOf`, `allOf`, `not`), a conditional (`if`/`then`/`else`), `$defs` reached through `$ref`
//! — makes the tool definition invalid, as the revision says, rather than being ignored.

use serde_json::Value;

/// One argument mirrored into a header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mirror {
    /// Where the argument is in `arguments`: property names from the top.
    pub path: Vec<String>,
    /// The header's name after `Mcp-Param-`.
    pub header: String,
}

/// The most arguments one tool may mirror: each is a request header, and a server that marks
/// thousands would make every call a request no proxy forwards.
pub const MAX_MIRRORS: usize = 64;

/// The largest integer (and smallest, negated) a mirrored integer may be: JavaScript's safe range.
const SAFE_INTEGER: i64 = (1 << 53) - 1;

/// Whether `c` is an HTTP token character (RFC 9110 `tchar`).
fn is_tchar(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

/// The arguments `schema` marks for mirroring, or why the tool must be left out (an empty or
/// non-token name, a name used twice ignoring case, a mark on a property that is not a string,
/// an integer or a boolean, more than [`MAX_MIRRORS`] marks).
pub fn mirrors(schema: &Value) -> Result<Vec<Mirror>, String> {
    let mut out = Vec::new();
    walk(schema, &mut Vec::new(), &mut out)?;
    let marks = count_marks(schema, 0);
    if marks > out.len() {
        return Err(format!(
            "{} of its x-mcp-header marks are not reachable from the schema's root through \
             `properties` alone (they stand under items, a combinator, a conditional or $defs)",
            marks - out.len()
        ));
    }
    if out.len() > MAX_MIRRORS {
        return Err(format!(
            "it marks {} arguments with x-mcp-header; at most {MAX_MIRRORS} are mirrored",
            out.len()
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for m in &out {
        if !seen.insert(m.header.to_ascii_lowercase()) {
            return Err(format!(
                "x-mcp-header {:?} is used twice (names are compared ignoring case)",
                m.header
            ));
        }
    }
    Ok(out)
}

fn walk(schema: &Value, path: &mut Vec<String>, out: &mut Vec<Mirror>) -> Result<(), String> {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Ok(());
    };
    for (name, sub) in properties {
        path.push(name.clone());
        if let Some(mark) = sub.get("x-mcp-header") {
            let at = path.join(".");
            let header = mark
                .as_str()
                .filter(|h| !h.is_empty() && h.chars().all(is_tchar))
                .ok_or_else(|| {
                    format!("x-mcp-header of {at} is not an HTTP header name: {mark}")
                })?;
            match sub.get("type").and_then(Value::as_str) {
                Some("string" | "integer" | "boolean") => {}
                other => {
                    return Err(format!(
                        "x-mcp-header {header:?} marks {at}, whose type is {}; only a string, \
                         an integer or a boolean is mirrored",
                        other.map_or_else(|| "not one primitive type".to_string(), String::from)
                    ));
                }
            }
            out.push(Mirror {
                path: path.clone(),
                header: header.to_string(),
            });
        }
        walk(sub, path, out)?;
        path.pop();
    }
    Ok(())
}

/// Keywords whose values are data, not schemas: an `x-mcp-header` key inside them is not a mark.
const DATA_KEYWORDS: [&str; 5] = ["const", "default", "enum", "examples", "x-mcp-header"];

/// Keywords whose values map names to schemas: their keys are names (a property may be called
/// `x-mcp-header`), their values schemas.
const SCHEMA_MAPS: [&str; 5] = [
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
];

/// How deep [`count_marks`] follows nested schemas: deeper than any real tool's schema, and a
/// bound on the stack for a hostile one (`serde_json` itself stops at 128 levels).
const MAX_DEPTH: usize = 256;

/// Every `x-mcp-header` mark anywhere in `schema`, wherever it stands.
fn count_marks(schema: &Value, depth: usize) -> usize {
    if depth > MAX_DEPTH {
        return 0;
    }
    match schema {
        Value::Object(map) => {
            let mut n = usize::from(map.contains_key("x-mcp-header"));
            for (key, value) in map {
                if DATA_KEYWORDS.contains(&key.as_str()) {
                    continue;
                }
                if SCHEMA_MAPS.contains(&key.as_str())
                    && let Value::Object(named) = value
                {
                    n += named
                        .values()
                        .map(|v| count_marks(v, depth + 1))
                        .sum::<usize>();
                } else {
                    n += count_marks(value, depth + 1);
                }
            }
            n
        }
        Value::Array(items) => items.iter().map(|v| count_marks(v, depth + 1)).sum(),
        _ => 0,
    }
}

/// `(Mcp-Param-NAME, value)` for each mirrored argument `arguments` holds (a missing or null one
/// sends no header), the value encoded as [`encode`] says.
pub fn headers(mirrors: &[Mirror], arguments: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for m in mirrors {
        let mut value = Some(arguments);
        for key in &m.path {
            value = value.and_then(|v| v.get(key));
        }
        let text = match value {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Bool(b)) => b.to_string(),
            Some(Value::Number(n)) => match n.as_i64() {
                Some(i) if (-SAFE_INTEGER..=SAFE_INTEGER).contains(&i) => i.to_string(),
                _ => continue,
            },
            _ => continue,
        };
        out.push((format!("Mcp-Param-{}", m.header), encode(&text)));
    }
    out
}

/// A header value for a name or an argument: as is when it is visible ASCII or spaces with none
/// at either end, else the revision's Base64 sentinel form (`=?base64?…?=`, also for a plain value
/// that looks like one).
pub fn encode(value: &str) -> String {
    use base64::Engine as _;
    let plain = !value.is_empty()
        && value.bytes().all(|b| (0x20..0x7f).contains(&b))
        && value.trim_matches([' ', '\t']) == value
        && !(value.starts_with("=?base64?") && value.ends_with("?="));
    if plain {
        value.to_string()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(value.as_bytes())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn marked_primitives_at_any_depth_are_mirrored_and_encoded_as_the_sep_says() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "opts": {"type": "object", "properties": {
                "n": {"type": "integer", "x-mcp-header": "N"},
                "dry": {"type": "boolean", "x-mcp-header": "Dry"}}},
            "text": {"type": "string"}}});
        let m = mirrors(&schema).unwrap();
        assert_eq!(m.len(), 3);
        let args = json!({"region": "Hello, 世界", "opts": {"n": -7, "dry": false}, "text": "x"});
        let mut h = headers(&m, &args);
        h.sort();
        assert_eq!(
            h,
            vec![
                ("Mcp-Param-Dry".to_string(), "false".to_string()),
                ("Mcp-Param-N".to_string(), "-7".to_string()),
                (
                    "Mcp-Param-Region".to_string(),
                    "=?base64?SGVsbG8sIOS4lueVjA==?=".to_string()
                ),
            ]
        );
        // Missing, null and out-of-range values send nothing.
        let h = headers(
            &m,
            &json!({"region": null, "opts": {"n": 9007199254740993_u64}}),
        );
        assert!(h.is_empty(), "{h:?}");
        // The SEP's examples (the same rule as `Mcp-Name`'s).
        assert_eq!(encode("get_weather"), "get_weather");
        assert_eq!(encode("us-west1"), "us-west1");
        assert_eq!(encode(" padded "), "=?base64?IHBhZGRlZCA=?=");
        assert_eq!(encode("line1\nline2"), "=?base64?bGluZTEKbGluZTI=?=");
        assert_eq!(
            encode("=?base64?literal?="),
            "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="
        );
    }

    #[test]
    fn a_mark_that_breaks_the_rules_is_named() {
        for (schema, needle) in [
            (
                json!({"properties": {"x": {"type": "number", "x-mcp-header": "X"}}}),
                "whose type is number",
            ),
            (
                json!({"properties": {"x": {"type": "string", "x-mcp-header": "A B"}}}),
                "not an HTTP header name",
            ),
            (
                json!({"properties": {"x": {"type": "string", "x-mcp-header": ""}}}),
                "not an HTTP header name",
            ),
            (
                json!({"properties": {"x": {"type": "string", "x-mcp-header": "Id"},
                                      "y": {"type": "string", "x-mcp-header": "ID"}}}),
                "used twice",
            ),
            (
                json!({"properties": {"x": {"type": ["string", "null"], "x-mcp-header": "X"}}}),
                "not one primitive type",
            ),
        ] {
            let e = mirrors(&schema).unwrap_err();
            assert!(e.contains(needle), "{needle}: {e}");
        }
        let many: serde_json::Map<String, Value> = (0..=MAX_MIRRORS)
            .map(|i| {
                (
                    format!("p{i}"),
                    json!({"type": "string", "x-mcp-header": format!("P{i}")}),
                )
            })
            .collect();
        let e = mirrors(&json!({"properties": many})).unwrap_err();
        assert!(e.contains("at most 64 are mirrored"), "{e}");
    }

    /// The revision: a mark must be reachable from the root through `properties` alone; one
    /// under `items`, a combinator, a conditional or `$defs` makes the tool invalid.
    #[test]
    fn a_mark_not_reachable_through_properties_alone_makes_the_tool_invalid() {
        let mark = json!({"type": "string", "x-mcp-header": "Region"});
        for schema in [
            json!({"properties": {"list": {"type": "array", "items": mark}}}),
            json!({"properties": {"list": {"type": "array", "prefixItems": [mark]}}}),
            json!({"oneOf": [{"properties": {"r": mark}}]}),
            json!({"properties": {"o": {"anyOf": [{"properties": {"r": mark}}]}}}),
            json!({"allOf": [{"properties": {"r": mark}}]}),
            json!({"not": {"properties": {"r": mark}}}),
            json!({"if": {"properties": {"r": mark}}, "then": {}}),
            json!({"then": {"properties": {"r": mark}}}),
            json!({"$defs": {"R": mark}, "properties": {"r": {"$ref": "#/$defs/R"}}}),
            json!({"properties": {"o": {"additionalProperties": mark}}}),
        ] {
            let e = mirrors(&schema).unwrap_err();
            assert!(e.contains("not reachable"), "{schema}: {e}");
        }
        // Nested objects reached through properties alone are fine; a property named
        // x-mcp-header, or the word inside a default or an enum, is not a mark.
        let fine = json!({"properties": {
            "o": {"type": "object", "properties": {"r": mark}},
            "x-mcp-header": {"type": "string"},
            "d": {"type": "object", "default": {"x-mcp-header": "Nope"}},
            "e": {"enum": [{"x-mcp-header": "Nope"}]}}});
        let m = mirrors(&fine).unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].path, ["o", "r"]);
    }
}
