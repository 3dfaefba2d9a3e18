//! Stuck detection for agent steps (SPEC §7): a weak model that repeats the same tool call with the
//! same arguments and gets the same result back is told so, and after [`STUCK_AFTER`] identical calls
//! in a row the step ends with [`ErrorKind::Stuck`](crate::error::ErrorKind::Stuck) instead of
//! spending every remaining turn.
//!
//! "Identical" means the same tool name, the same arguments compared as canonical JSON (object keys
//! sorted at every level, so `{"a":1,"b":2}` and `{"b":2,"a":1}` are one call), and the same text sent
//! back to the model. A call whose result changed (a file edited in between, a command whose output
//! differs) is not a repeat: polling something that is changing is legitimate.

use serde_json::Value;

/// Identical calls in a row that end the step.
pub const STUCK_AFTER: u32 = 3;

/// Arguments as canonical JSON: object keys sorted at every level, no insignificant whitespace.
/// Used so that key order in the model's output cannot hide a repeat.
pub fn canonical_json(value: &Value) -> String {
    fn write(value: &Value, out: &mut String) {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String((*k).clone()).to_string());
                    out.push(':');
                    write(&map[k.as_str()], out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(v, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    write(value, &mut out);
    out
}

/// What [`RepeatGuard::observe`] concluded about one executed call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repeat {
    /// Not the same as the previous call (or its result changed).
    Fresh,
    /// The `n`th identical call in a row (`n >= 2`): the model is told, the step goes on.
    Again(u32),
    /// The [`STUCK_AFTER`]th identical call in a row: the step fails with `stuck`.
    Stuck(u32),
}

/// Remembers the previous executed call of one agent step and counts identical repeats.
#[derive(Debug, Default)]
pub struct RepeatGuard {
    last: Option<(String, String, String)>,
    in_a_row: u32,
    /// Every repeated call (second and later of a run of identical calls) in this step.
    pub repeated_total: u32,
}

impl RepeatGuard {
    /// Records one executed call and the text its result produced for the model.
    pub fn observe(&mut self, tool: &str, args: &Value, result: &str) -> Repeat {
        let key = (tool.to_string(), canonical_json(args), result.to_string());
        if self.last.as_ref() == Some(&key) {
            self.in_a_row += 1;
            self.repeated_total += 1;
        } else {
            self.last = Some(key);
            self.in_a_row = 1;
        }
        match self.in_a_row {
            1 => Repeat::Fresh,
            n if n >= STUCK_AFTER => Repeat::Stuck(n),
            n => Repeat::Again(n),
        }
    }

    /// Forgets the previous call: something else happened in between (a refused call, a text turn).
    pub fn reset(&mut self) {
        self.last = None;
        self.in_a_row = 0;
    }
}

/// The note appended to a repeated call's result, so the model learns it is going in circles.
pub fn repeat_note(tool: &str, args: &Value, n: u32) -> String {
    format!(
        "\n\n[acode-run: you already called {tool} with these same arguments {} and got the same \
         result ({n} identical calls in a row); calling it again will not change anything. Do \
         something else or answer. After {STUCK_AFTER} identical calls in a row the step fails.]",
        crate::util::ellipsize(&canonical_json(args), 200),
    )
}

/// The step's error message when the model got stuck.
pub fn stuck_message(tool: &str, args: &Value, n: u32, repeated_total: u32) -> String {
    format!(
        "agent is stuck: it called {tool} {} {n} times in a row with the same result \
         ({repeated_total} repeated call(s) in this step); the transcript is recorded (acode-run show)",
        crate::util::ellipsize(&canonical_json(args), 200),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_does_not_hide_a_repeat() {
        assert_eq!(
            canonical_json(&json!({"b": [1, {"y": 2, "x": 1}], "a": "s"})),
            r#"{"a":"s","b":[1,{"x":1,"y":2}]}"#
        );
        let mut g = RepeatGuard::default();
        assert_eq!(g.observe("t", &json!({"a": 1, "b": 2}), "r"), Repeat::Fresh);
        assert_eq!(
            g.observe("t", &json!({"b": 2, "a": 1}), "r"),
            Repeat::Again(2)
        );
        assert_eq!(
            g.observe("t", &json!({"a": 1, "b": 2}), "r"),
            Repeat::Stuck(3)
        );
        assert_eq!(g.repeated_total, 2);
    }

    #[test]
    fn a_changed_result_or_argument_or_reset_starts_over() {
        let mut g = RepeatGuard::default();
        assert_eq!(g.observe("t", &json!({"a": 1}), "r1"), Repeat::Fresh);
        assert_eq!(g.observe("t", &json!({"a": 1}), "r1"), Repeat::Again(2));
        assert_eq!(g.observe("t", &json!({"a": 1}), "r2"), Repeat::Fresh);
        assert_eq!(g.observe("t", &json!({"a": 2}), "r2"), Repeat::Fresh);
        assert_eq!(g.observe("u", &json!({"a": 2}), "r2"), Repeat::Fresh);
        assert_eq!(g.observe("u", &json!({"a": 2}), "r2"), Repeat::Again(2));
        g.reset();
        assert_eq!(g.observe("u", &json!({"a": 2}), "r2"), Repeat::Fresh);
        assert_eq!(g.repeated_total, 2);
    }
}
