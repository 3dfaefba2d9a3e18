//! `${name}` substitution in plan strings.
//!
//! Values are inserted verbatim and never re-scanned, so a variable's value cannot smuggle in another
//! placeholder. An unknown name is an error, never an empty string: a typo must not turn
//! `rm ${build_dir}/x` into `rm /x`. `$${` writes a literal `${`.

use std::collections::BTreeMap;

use serde_json::Value;

use super::model::Plan;
use crate::redact::is_secret_name;

/// The variables visible to a plan: plan-declared, overridden by `--var`, plus built-ins.
#[derive(Debug, Clone, Default)]
pub struct Variables {
    values: BTreeMap<String, String>,
}

/// The names acode-run defines itself; plans cannot declare them.
pub const BUILTINS: &[&str] = &["workspace", "plan_dir", "run_id"];

impl Variables {
    /// Builds the variable set from a plan's variables plus built-in values.
    pub fn new(plan_vars: &BTreeMap<String, String>, builtins: &[(&str, String)]) -> Self {
        let mut values = plan_vars.clone();
        for (k, v) in builtins {
            values.insert((*k).to_string(), v.clone());
        }
        Variables { values }
    }

    /// Looks a variable up.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// Substitutes every placeholder in `s`; the error names the problem.
    pub fn substitute(&self, s: &str) -> Result<String, String> {
        if !s.contains('$') {
            return Ok(s.to_string());
        }
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while let Some(i) = rest.find('$') {
            out.push_str(&rest[..i]);
            let after = &rest[i + 1..];
            if let Some(tail) = after.strip_prefix("${") {
                out.push_str("${");
                rest = tail;
            } else if let Some(tail) = after.strip_prefix('{') {
                let end = tail
                    .find('}')
                    .ok_or_else(|| format!("unterminated '${{' in {s:?}"))?;
                let name = &tail[..end];
                if !is_name(name) {
                    return Err(format!("invalid variable name {name:?}"));
                }
                let value = self
                    .get(name)
                    .ok_or_else(|| format!("unknown variable '${{{name}}}'"))?;
                out.push_str(value);
                rest = &tail[end + 1..];
            } else {
                out.push('$');
                rest = after;
            }
        }
        out.push_str(rest);
        Ok(out)
    }

    /// Substitutes inside every string of a JSON value (objects and arrays recursively); each
    /// problem is reported with its location under `at`.
    pub fn substitute_value(
        &self,
        v: &Value,
        at: &str,
        problems: &mut Vec<(String, String)>,
    ) -> Value {
        match v {
            Value::String(s) => match self.substitute(s) {
                Ok(s) => Value::String(s),
                Err(e) => {
                    problems.push((at.to_string(), e));
                    v.clone()
                }
            },
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, x)| self.substitute_value(x, &format!("{at}[{i}]"), problems))
                    .collect(),
            ),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, x)| {
                        (
                            k.clone(),
                            self.substitute_value(x, &format!("{at}.{k}"), problems),
                        )
                    })
                    .collect(),
            ),
            other => other.clone(),
        }
    }
}

/// The values a plan makes secret (SPEC §6), to be added to the run's redactor before anything is
/// recorded or printed: variables whose names look secret (the environment's rules,
/// [`is_secret_name`]) or that the plan lists in `secrets`, with their `--var` values; and every
/// value, after substitution, of a secret-named key in a `run_command` step's `env`
/// (`"DEPLOY_TOKEN": "${deploy}"`). Values that cannot be substituted are left out (validation
/// reports them).
pub fn secret_values(plan: &Plan, vars: &Variables) -> Vec<String> {
    let mut out: Vec<String> = plan
        .variables
        .iter()
        .filter(|(k, _)| is_secret_name(k) || plan.secrets.iter().any(|s| s == *k))
        .map(|(_, v)| v.clone())
        .collect();
    for step in &plan.steps {
        if step.tool != crate::tools::command::NAME {
            continue;
        }
        if let Some(Value::Object(env)) = step.arguments.get("env") {
            for (k, v) in &env {
                if let (true, Value::String(v)) = (is_secret_name(k), v)
                    && let Ok(v) = vars.substitute(v)
                {
                    out.push(v);
                }
            }
        }
    }
    out
}

/// The values of secret-named keys in a `run_command` call's `env` argument (already
/// substituted): what a call, a model's included, makes secret by passing it that way.
pub fn secret_env_values(arguments: &Value) -> Vec<String> {
    match arguments.get("env") {
        Some(Value::Object(env)) => env
            .iter()
            .filter(|(k, _)| is_secret_name(k))
            .filter_map(|(_, v)| v.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

/// Whether `name` is a valid variable name: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Variables {
        let mut m = BTreeMap::new();
        m.insert("dir".to_string(), "src/${x}".to_string());
        Variables::new(&m, &[("run_id", "r1".to_string())])
    }

    #[test]
    fn substitutes_known_names_once() {
        let v = vars();
        assert_eq!(v.substitute("${dir}/a-${run_id}").unwrap(), "src/${x}/a-r1");
        assert_eq!(
            v.substitute("cost $5 and $${dir}").unwrap(),
            "cost $5 and ${dir}"
        );
    }

    #[test]
    fn secrets_come_from_names_the_list_and_secret_env_keys() {
        let plan = crate::plan::parse::parse(
            br#"{"plan_id":"p","secrets":["deploy"],
              "variables":{"deploy":"listed-value","db_password":"named-value","dir":"src"},
              "steps":[{"step_id":"a","tool":"run_command","arguments":{"command":"true",
                "env":{"UPLOAD_TOKEN":"tok-${dir}-x","PLAIN":"not-secret"}}}]}"#,
        )
        .unwrap();
        let v = Variables::new(&plan.variables, &[]);
        let mut got = secret_values(&plan, &v);
        got.sort();
        assert_eq!(got, vec!["listed-value", "named-value", "tok-src-x"]);
    }

    #[test]
    fn unknown_and_malformed_are_errors() {
        let v = vars();
        assert!(
            v.substitute("${nope}")
                .unwrap_err()
                .contains("unknown variable '${nope}'")
        );
        assert!(v.substitute("${dir").unwrap_err().contains("unterminated"));
        assert!(
            v.substitute("${a b}")
                .unwrap_err()
                .contains("invalid variable name")
        );
    }
}
