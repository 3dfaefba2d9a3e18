//! A small JSON Schema validator for tool arguments.
//!
//! Tool schemas use a deliberate subset of JSON Schema: `type` (one name or a list), `properties`,
//! `required`, `additionalProperties: false`, `items`, `enum`, `const`, `minimum`, `maximum`,
//! `minLength`, `minItems`, `maxItems` and `oneOf`. That subset is what LLM servers understand reliably, and validating it here
//! means an argument a schema forbids can never reach a tool, whoever wrote the call.

use serde_json::Value;

/// Validates `value` against `schema`; returns every problem found, each prefixed with its location
/// (`where_` for the top level, e.g. `steps[3].arguments`).
pub fn validate(schema: &Value, value: &Value, where_: &str) -> Vec<String> {
    let mut errors = Vec::new();
    check(schema, value, where_, &mut errors);
    errors
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_matches(expected: &str, v: &Value) -> bool {
    let actual = type_name(v);
    expected == actual || (expected == "number" && actual == "integer")
}

fn check(schema: &Value, value: &Value, at: &str, errors: &mut Vec<String>) {
    if let Some(t) = schema.get("type") {
        let ok = match t {
            Value::String(s) => type_matches(s, value),
            Value::Array(ts) => ts
                .iter()
                .filter_map(Value::as_str)
                .any(|s| type_matches(s, value)),
            _ => true,
        };
        if !ok {
            let expected = match t {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            errors.push(format!(
                "{at}: expected {expected}, got {}",
                type_name(value)
            ));
            return;
        }
    }
    if let Some(expected) = schema.get("const")
        && value != expected
    {
        errors.push(format!("{at}: must be {expected}, got {value}"));
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(value)
    {
        let list: Vec<String> = options.iter().map(Value::to_string).collect();
        errors.push(format!("{at}: {value} is not one of {}", list.join(", ")));
    }
    if let Some(n) = value.as_f64() {
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
            && n < min
        {
            errors.push(format!("{at}: {n} is less than the minimum {min}"));
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
            && n > max
        {
            errors.push(format!("{at}: {n} is more than the maximum {max}"));
        }
    }
    if let (Some(s), Some(min)) = (
        value.as_str(),
        schema.get("minLength").and_then(Value::as_u64),
    ) && (s.chars().count() as u64) < min
    {
        errors.push(format!("{at}: must not be shorter than {min} characters"));
    }
    if let Some(obj) = value.as_object() {
        let props = schema.get("properties").and_then(Value::as_object);
        let known: Vec<&str> = props
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default();
        // Arguments the schema does not name (allowed unless `additionalProperties: false`, but
        // usually a misspelling when a required one is missing).
        let unnamed: Vec<&str> = obj
            .keys()
            .map(String::as_str)
            .filter(|k| props.is_some() && !known.contains(k))
            .collect();
        // A misspelt required argument is one problem (issue #34 item 13): the missing one names
        // what was given instead, and that unknown argument is not reported again.
        let mut explained: Vec<&str> = Vec::new();
        if let Some(required) = schema.get("required").and_then(Value::as_array) {
            for name in required.iter().filter_map(Value::as_str) {
                if !obj.contains_key(name) {
                    let hint = match crate::suggest::closest(name, unnamed.iter().copied()) {
                        Some(given) => {
                            explained.push(given);
                            format!(" (given '{given}': did you mean '{name}'?)")
                        }
                        None if !unnamed.is_empty() => format!(
                            " (given {}, which the tool does not take; it takes: {})",
                            quoted(&unnamed),
                            known.join(", ")
                        ),
                        None => String::new(),
                    };
                    errors.push(format!("{at}: missing required argument '{name}'{hint}"));
                }
            }
        }
        for (key, v) in obj {
            match props.and_then(|p| p.get(key)) {
                Some(sub) => check(sub, v, &format!("{at}.{key}"), errors),
                None => {
                    if schema.get("additionalProperties") == Some(&Value::Bool(false))
                        && !explained.contains(&key.as_str())
                    {
                        errors.push(format!(
                            "{at}: unknown argument '{key}'{} (expected one of: {})",
                            crate::suggest::did_you_mean(key, known.iter().copied()),
                            known.join(", ")
                        ));
                    }
                }
            }
        }
    }
    if let Some(items) = value.as_array() {
        if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
            && (items.len() as u64) < min
        {
            errors.push(format!("{at}: needs at least {min} item(s)"));
        }
        if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
            && (items.len() as u64) > max
        {
            errors.push(format!("{at}: takes at most {max} item(s)"));
        }
        if let Some(item_schema) = schema.get("items") {
            for (i, item) in items.iter().enumerate() {
                check(item_schema, item, &format!("{at}[{i}]"), errors);
            }
        }
    }
    if let Some(alternatives) = schema.get("oneOf").and_then(Value::as_array) {
        let matching = alternatives
            .iter()
            .filter(|alt| validate(alt, value, at).is_empty())
            .count();
        if matching != 1 {
            let what = schema
                .get("oneOfDescription")
                .and_then(Value::as_str)
                .unwrap_or("exactly one of the alternative argument sets is required");
            errors.push(format!("{at}: {what}"));
        }
    }
}

/// `'a', 'b'`: argument names as a message lists them.
fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("'{n}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1},
                "depth": {"type": "integer", "minimum": 0, "maximum": 5},
                "tags": {"type": "array", "items": {"type": "string"}},
                "mode": {"enum": ["a", "b"]}
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }

    #[test]
    fn a_missing_argument_names_what_was_given_instead() {
        let schema = json!({"type": "object", "properties": {"timezone": {"type": "string"}},
                            "required": ["timezone"]});
        let typo = validate(&schema, &json!({"timezone_": "UTC"}), "args").join("\n");
        assert_eq!(
            typo,
            "args: missing required argument 'timezone' (given 'timezone_': did you mean 'timezone'?)"
        );
        let other = validate(&schema, &json!({"tz": "UTC"}), "args").join("\n");
        assert_eq!(
            other,
            "args: missing required argument 'timezone' (given 'tz', which the tool does not take; it takes: timezone)"
        );
        let unknown = validate(
            &super::tests::schema(),
            &json!({"path": "x", "dpeth": 1}),
            "a",
        );
        assert_eq!(
            unknown,
            [
                "a: unknown argument 'dpeth' (did you mean \"depth\"?) (expected one of: depth, mode, path, tags)"
            ]
        );
    }

    #[test]
    fn accepts_valid_arguments() {
        let errs = validate(
            &schema(),
            &json!({"path": "x", "depth": 2, "tags": ["t"]}),
            "args",
        );
        assert!(errs.is_empty(), "{errs:?}");
    }

    #[test]
    fn reports_every_problem_with_its_location() {
        let errs = validate(
            &schema(),
            &json!({"depth": 9, "tags": [1], "mode": "c", "colour": true}),
            "args",
        );
        let all = errs.join("\n");
        assert!(all.contains("missing required argument 'path'"), "{all}");
        assert!(
            all.contains("args.depth: 9 is more than the maximum 5"),
            "{all}"
        );
        assert!(
            all.contains("args.tags[0]: expected string, got integer"),
            "{all}"
        );
        assert!(all.contains("args.mode"), "{all}");
        assert!(all.contains("unknown argument 'colour'"), "{all}");
        assert_eq!(errs.len(), 5);
    }

    #[test]
    fn one_of_requires_exactly_one_alternative() {
        let s = json!({
            "type": "object",
            "oneOf": [{"required": ["command"]}, {"required": ["argv"]}]
        });
        assert!(validate(&s, &json!({"command": "x"}), "a").is_empty());
        assert_eq!(validate(&s, &json!({}), "a").len(), 1);
        assert_eq!(
            validate(&s, &json!({"command": "x", "argv": []}), "a").len(),
            1
        );
    }
}
