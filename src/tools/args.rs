//! Typed tool arguments: one struct per tool, from which both its JSON Schema and its parsing come.
//!
//! A tool declares its arguments once, as a struct deriving `serde::Deserialize` (with
//! `#[serde(deny_unknown_fields)]`) and `schemars::JsonSchema`; field doc comments become the
//! schema's descriptions. [`schema_for`] gives the schema the registry shows the LLM and plan
//! validation checks against, and [`parse`] turns the arguments of a call into the struct, so an
//! argument's name is written in exactly one place and validation and execution cannot disagree
//! on it. Any tool can use this: implement `schema()` as `schema_for::<MyArgs>()` and start
//! `check`/`run` with `let a: MyArgs = parse(self.name(), args)?;`.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::ToolError;

/// Parses a call's arguments into the tool's argument struct; the error names the tool and the
/// field (`unknown field "colour", expected one of "path", "offset"`).
pub fn parse<T: DeserializeOwned>(tool: &str, args: &Value) -> Result<T, ToolError> {
    T::deserialize(args).map_err(|e| ToolError::invalid(tool, e.to_string()))
}

/// The JSON Schema of an argument struct, cleaned for LLM use: all subschemas inline, no
/// `$schema`, `title` or numeric `format` noise, optional fields typed without `null`, and
/// `additionalProperties: false` on objects.
pub fn schema_for<T: JsonSchema>() -> Value {
    let schema = SchemaSettings::draft07()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator()
        .into_root_schema_for::<T>();
    let mut value = schema.to_value();
    clean(&mut value, true);
    value
}

fn clean(v: &mut Value, root: bool) {
    let Some(obj) = v.as_object_mut() else {
        return;
    };
    if root {
        obj.remove("$schema");
        obj.remove("title");
        // The struct's doc comment is for Rust readers; the tool's description is what models see.
        obj.remove("description");
        obj.remove("definitions");
        obj.remove("$defs");
    }
    obj.remove("format");
    // Doc comments wrapped for the source read as one sentence.
    if let Some(Value::String(d)) = obj.get_mut("description") {
        *d = d.split_whitespace().collect::<Vec<_>>().join(" ");
    }
    // `Option<T>` is rendered as `"type": ["T", "null"]`; an omitted argument is how a tool says
    // "not given", so `null` is not offered.
    if let Some(Value::Array(types)) = obj.get_mut("type") {
        types.retain(|t| t != "null");
        if types.len() == 1 {
            let only = types.remove(0);
            obj.insert("type".to_string(), only);
        }
    }
    if obj.get("type").and_then(Value::as_str) == Some("object") {
        obj.entry("additionalProperties")
            .or_insert(Value::Bool(false));
    }
    if let Some(Value::Object(props)) = obj.get_mut("properties") {
        for p in props.values_mut() {
            clean(p, false);
        }
    }
    if let Some(items) = obj.get_mut("items") {
        clean(items, false);
    }
    if obj.get("required").is_none() && obj.get("properties").is_some() {
        obj.insert("required".to_string(), Value::Array(Vec::new()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    /// Test arguments.
    #[derive(Debug, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Example {
        /// The file.
        #[schemars(length(min = 1))]
        path: String,
        /// How many
        /// lines.
        #[schemars(range(min = 1))]
        limit: Option<u64>,
        /// Tags.
        #[serde(default)]
        tags: Vec<String>,
    }

    #[test]
    fn schema_is_clean_and_described() {
        let s = schema_for::<Example>();
        assert_eq!(
            s,
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "minLength": 1, "description": "The file."},
                    "limit": {"type": "integer", "minimum": 1, "description": "How many lines."},
                    "tags": {"type": "array", "items": {"type": "string"}, "description": "Tags.", "default": []}
                },
                "required": ["path"],
                "additionalProperties": false
            })
        );
    }

    #[test]
    fn parse_names_the_field() {
        let e = parse::<Example>("t", &json!({"path": "a", "colour": 1})).unwrap_err();
        assert!(e.to_string().contains("unknown field `colour`"), "{e}");
        let e = parse::<Example>("t", &json!({"limit": 2})).unwrap_err();
        assert!(e.to_string().contains("missing field `path`"), "{e}");
        let e = parse::<Example>("t", &json!({"path": 3})).unwrap_err();
        assert!(e.to_string().contains("invalid type"), "{e}");
        let ok = parse::<Example>("t", &json!({"path": "a", "limit": 2})).unwrap();
        assert_eq!(ok.limit, Some(2));
    }
}
