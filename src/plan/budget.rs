//! Budgets in the approved plan (plan field `budget`, and `budget` on agent steps): the most a run
//! or a step may spend on models — tokens, model calls, US dollars at the policy's prices — and
//! how long it may take. Being part of the plan's bytes, a budget is part of what an approval
//! binds: raising one after approval makes the plan unapproved (docs/observability.md).
//!
//! This module holds the plan's side (the fields, their parsing, and the comparison a check
//! makes); the executor counts what is spent and asks [`Budget::exceeded`] before each model call.

use serde::Serialize;
use serde_json::Value;

/// The largest token or model-call budget accepted (far above any real use, below `i64::MAX`).
pub const MAX_COUNT: u64 = 1_000_000_000_000;
/// The largest `cost_usd` accepted.
pub const MAX_COST_USD: f64 = 1_000_000.0;
/// The longest `wall_clock` accepted (30 days).
pub const MAX_WALL_CLOCK_MS: u64 = 30 * 24 * 3600 * 1000;

/// What a plan or an agent step may spend. Every field is optional: an absent one is no limit.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Budget {
    /// Prompt plus completion tokens, as the model servers report them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Wall-clock time in milliseconds (written as a duration: `"20m"`, `"1h30m"`, `"90s"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall_clock_ms: Option<u64>,
    /// Requests sent to a model (every attempt, retries included).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_calls: Option<u64>,
    /// US dollars at the policy's `prices`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// Which budget ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetKind {
    /// `tokens`.
    Tokens,
    /// `wall_clock`.
    WallClock,
    /// `model_calls`.
    ModelCalls,
    /// `cost_usd`.
    CostUsd,
}

impl BudgetKind {
    /// The field's name in a plan (and in the `budget_exhausted` event).
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetKind::Tokens => "tokens",
            BudgetKind::WallClock => "wall_clock",
            BudgetKind::ModelCalls => "model_calls",
            BudgetKind::CostUsd => "cost_usd",
        }
    }

    /// The unit amounts of this budget are counted in: `tokens`, `ms`, `calls`, `usd`.
    pub fn unit(self) -> &'static str {
        match self {
            BudgetKind::Tokens => "tokens",
            BudgetKind::WallClock => "ms",
            BudgetKind::ModelCalls => "calls",
            BudgetKind::CostUsd => "usd",
        }
    }
}

/// What has been spent (or what the next model call is expected to spend).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Spend {
    /// Prompt plus completion tokens.
    pub tokens: u64,
    /// Model requests sent.
    pub model_calls: u64,
    /// US dollars at the policy's prices (0 when no price is known).
    pub cost_usd: f64,
}

impl Spend {
    /// Adds `other`.
    pub fn add(&mut self, other: Spend) {
        self.tokens = self.tokens.saturating_add(other.tokens);
        self.model_calls = self.model_calls.saturating_add(other.model_calls);
        self.cost_usd += other.cost_usd;
    }

    /// Whether nothing was spent.
    pub fn is_zero(&self) -> bool {
        self.tokens == 0 && self.model_calls == 0 && self.cost_usd == 0.0
    }
}

/// A budget that ran out, or would run out with the next call: which, its limit, what was used,
/// and what the refused call was expected to add.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Exceeded {
    /// Which budget.
    pub kind: BudgetKind,
    /// The limit, in [`BudgetKind::unit`]s.
    pub limit: f64,
    /// What was used, in the same unit.
    pub used: f64,
    /// What the call refused was expected to add (0 when the budget was already used up).
    pub next: f64,
}

impl Exceeded {
    /// `tokens budget: 1200 of 1000 tokens used` — the words of the step's error and the event.
    pub fn describe(&self) -> String {
        let amount = |n: f64| match self.kind {
            BudgetKind::CostUsd => format!("${n:.4}"),
            BudgetKind::WallClock => format!("{:.1} s", n / 1000.0),
            BudgetKind::Tokens | BudgetKind::ModelCalls => format!("{n:.0}"),
        };
        let unit = match self.kind {
            BudgetKind::Tokens => " tokens",
            BudgetKind::ModelCalls => " model calls",
            BudgetKind::WallClock | BudgetKind::CostUsd => "",
        };
        let mut s = format!(
            "{} budget: {} of {}{unit} used",
            self.kind.as_str(),
            amount(self.used),
            amount(self.limit)
        );
        if self.next > 0.0 {
            s.push_str(&format!(
                ", and the next model call would use about {} more",
                amount(self.next)
            ));
        }
        s
    }
}

impl Budget {
    /// Whether no limit is set.
    pub fn is_empty(&self) -> bool {
        *self == Budget::default()
    }

    /// This budget with its token limit lowered to `cap` (`--token-budget`): an override on the
    /// command line can only lower what the approved plan allows, never raise it.
    pub fn lowered_tokens(mut self, cap: Option<u64>) -> Budget {
        if let Some(cap) = cap {
            self.tokens = Some(self.tokens.map_or(cap, |t| t.min(cap)));
        }
        self
    }

    /// The first budget that `spent` has used up, or that `next` (the coming call's expected
    /// spend) would take past its limit; `elapsed_ms` is measured against `wall_clock`. Checked in
    /// a fixed order (model calls, tokens, cost, wall clock) so the same state names the same
    /// budget.
    pub fn exceeded(&self, spent: &Spend, next: &Spend, elapsed_ms: u64) -> Option<Exceeded> {
        let over = |kind, limit: f64, used: f64, next: f64| {
            (used >= limit || used + next > limit).then_some(Exceeded {
                kind,
                limit,
                used,
                next: if used >= limit { 0.0 } else { next },
            })
        };
        if let Some(limit) = self.model_calls
            && let Some(e) = over(
                BudgetKind::ModelCalls,
                limit as f64,
                spent.model_calls as f64,
                next.model_calls as f64,
            )
        {
            return Some(e);
        }
        if let Some(limit) = self.tokens
            && let Some(e) = over(
                BudgetKind::Tokens,
                limit as f64,
                spent.tokens as f64,
                next.tokens as f64,
            )
        {
            return Some(e);
        }
        if let Some(limit) = self.cost_usd
            && let Some(e) = over(BudgetKind::CostUsd, limit, spent.cost_usd, next.cost_usd)
        {
            return Some(e);
        }
        self.wall_clock_exceeded(elapsed_ms)
    }

    /// Whether `elapsed_ms` has reached the `wall_clock` limit.
    pub fn wall_clock_exceeded(&self, elapsed_ms: u64) -> Option<Exceeded> {
        let limit = self.wall_clock_ms?;
        (elapsed_ms >= limit).then_some(Exceeded {
            kind: BudgetKind::WallClock,
            limit: limit as f64,
            used: elapsed_ms as f64,
            next: 0.0,
        })
    }
}

/// The fields a `budget` object may have.
pub const FIELDS: &[&str] = &["tokens", "wall_clock", "model_calls", "cost_usd"];

/// Parses a `budget` object found at `at` (`plan.budget`, `steps[3].budget`). Returns the budget
/// (`None` when the value is not usable) and every problem, each with its location.
pub fn parse(value: &Value, at: &str) -> (Option<Budget>, Vec<(String, String)>) {
    let mut problems = Vec::new();
    let obj = match value {
        Value::Null => return (None, problems),
        Value::Object(o) => o,
        other => {
            problems.push((
                at.to_string(),
                format!(
                    "expected an object such as {{\"tokens\": 200000, \"wall_clock\": \"20m\"}}, \
                     got {}",
                    crate::util::json_kind(other)
                ),
            ));
            return (None, problems);
        }
    };
    for key in obj.keys() {
        if !FIELDS.contains(&key.as_str()) {
            problems.push((
                format!("{at}.{}", key.escape_debug()),
                format!(
                    "unknown field{} (expected one of: {})",
                    crate::suggest::did_you_mean(key, FIELDS.iter().copied()),
                    FIELDS.join(", ")
                ),
            ));
        }
    }
    let mut budget = Budget::default();
    let count = |key: &str, problems: &mut Vec<(String, String)>| -> Option<u64> {
        let v = obj.get(key).filter(|v| !v.is_null())?;
        // JSON Schema's `integer` is any number with no fractional part, so `2.0` is 2 here too.
        let n = v.as_u64().or_else(|| {
            v.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 1.0 && *f <= MAX_COUNT as f64)
                .map(|f| f as u64)
        });
        match n {
            Some(n) if (1..=MAX_COUNT).contains(&n) => Some(n),
            _ => {
                problems.push((
                    format!("{at}.{key}"),
                    format!("expected a whole number from 1 to {MAX_COUNT}, got {v}"),
                ));
                None
            }
        }
    };
    budget.tokens = count("tokens", &mut problems);
    budget.model_calls = count("model_calls", &mut problems);
    if let Some(v) = obj.get("cost_usd").filter(|v| !v.is_null()) {
        match v.as_f64() {
            Some(n) if n > 0.0 && n <= MAX_COST_USD && n.is_finite() => budget.cost_usd = Some(n),
            _ => problems.push((
                format!("{at}.cost_usd"),
                format!(
                    "expected a number of US dollars above 0 and at most {MAX_COST_USD}, got {v}"
                ),
            )),
        }
    }
    if let Some(v) = obj.get("wall_clock").filter(|v| !v.is_null()) {
        match v.as_str().map(parse_duration) {
            Some(Ok(ms)) => budget.wall_clock_ms = Some(ms),
            Some(Err(why)) => problems.push((format!("{at}.wall_clock"), why)),
            None => problems.push((
                format!("{at}.wall_clock"),
                format!(
                    "expected a duration string such as \"20m\", \"1h30m\" or \"90s\", got {}",
                    crate::util::json_kind(v)
                ),
            )),
        }
    }
    (Some(budget), problems)
}

/// Milliseconds in a duration: whole numbers each followed by a unit, `ms`, `s`, `m`, `h` or `d`
/// (`20m`, `1h30m`, `90s`, `500ms`) — the grammar of the plan schema's pattern, so the schema and
/// the parser accept the same texts.
fn parse_duration(text: &str) -> Result<u64, String> {
    let bad = || {
        format!("{text:?} is not a duration: write e.g. \"20m\", \"1h30m\", \"90s\" or \"500ms\"")
    };
    let mut total: u64 = 0;
    let mut rest = text;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 9 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let (unit_ms, len) = if rest.starts_with("ms") {
            (1, 2)
        } else if rest.starts_with('s') {
            (1000, 1)
        } else if rest.starts_with('m') {
            (60_000, 1)
        } else if rest.starts_with('h') {
            (3_600_000, 1)
        } else if rest.starts_with('d') {
            (86_400_000, 1)
        } else {
            return Err(bad());
        };
        rest = &rest[len..];
        total = total.saturating_add(n.saturating_mul(unit_ms));
    }
    if total == 0 {
        return Err(format!("{text:?}: must be longer than zero"));
    }
    if total > MAX_WALL_CLOCK_MS {
        return Err(format!("{text:?}: at most 30 days"));
    }
    Ok(total)
}

/// The pattern the plan schema gives `wall_clock` (what [`parse_duration`] reads).
pub const DURATION_PATTERN: &str = "^([0-9]{1,9}(ms|s|m|h|d))+$";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_field_parses() {
        let (b, problems) = parse(
            &json!({"tokens": 1000, "wall_clock": "20m", "model_calls": 5, "cost_usd": 0.5}),
            "plan.budget",
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            b.unwrap(),
            Budget {
                tokens: Some(1000),
                wall_clock_ms: Some(20 * 60 * 1000),
                model_calls: Some(5),
                cost_usd: Some(0.5),
            }
        );
    }

    #[test]
    fn hostile_values_are_each_named() {
        let (_, problems) = parse(
            &json!({"tokens": -1, "wall_clock": "soon", "model_calls": 1.5, "cost_usd": "lots",
                    "tokns": 3}),
            "steps[2].budget",
        );
        let at: Vec<&str> = problems.iter().map(|(a, _)| a.as_str()).collect();
        for field in ["tokens", "wall_clock", "model_calls", "cost_usd", "tokns"] {
            assert!(
                at.contains(&format!("steps[2].budget.{field}").as_str()),
                "{field}: {problems:?}"
            );
        }
        assert!(
            problems
                .iter()
                .any(|(_, m)| m.contains("did you mean \"tokens\"")),
            "{problems:?}"
        );
        for (value, why) in [
            (json!({"wall_clock": "0s"}), "longer than zero"),
            (json!({"wall_clock": "400d"}), "30 days"),
            (json!({"wall_clock": "1h 30m"}), "not a duration"),
            (json!({"wall_clock": "5x"}), "not a duration"),
            (json!({"wall_clock": ""}), "not a duration"),
            (json!({"tokens": 0}), "from 1"),
            (json!({"cost_usd": 0}), "above 0"),
            (json!([1]), "expected an object"),
        ] {
            let (_, problems) = parse(&value, "plan.budget");
            assert!(
                problems.iter().any(|(_, m)| m.contains(why)),
                "{value}: {problems:?}"
            );
        }
    }

    #[test]
    fn durations_follow_the_schemas_pattern() {
        let re = regex::Regex::new(DURATION_PATTERN).unwrap();
        for (text, ms) in [
            ("20m", Some(1_200_000)),
            ("1h30m", Some(5_400_000)),
            ("90s", Some(90_000)),
            ("500ms", Some(500)),
            ("1d2h", Some(93_600_000)),
            ("1m30", None),
            ("m", None),
            ("-1s", None),
            ("1.5h", None),
            ("1 h", None),
        ] {
            assert_eq!(parse_duration(text).ok(), ms, "{text}");
            assert_eq!(re.is_match(text), ms.is_some(), "{text}");
        }
    }

    #[test]
    fn a_budget_is_exceeded_before_the_call_that_would_overspend() {
        let b = Budget {
            tokens: Some(1000),
            ..Budget::default()
        };
        let spent = Spend {
            tokens: 600,
            ..Spend::default()
        };
        let small = Spend {
            tokens: 300,
            ..Spend::default()
        };
        let large = Spend {
            tokens: 500,
            ..Spend::default()
        };
        assert_eq!(b.exceeded(&spent, &small, 0), None);
        let e = b.exceeded(&spent, &large, 0).unwrap();
        assert_eq!((e.kind, e.used, e.next), (BudgetKind::Tokens, 600.0, 500.0));
        assert!(
            e.describe().contains("600 of 1000 tokens"),
            "{}",
            e.describe()
        );
        // Used up exactly: no further call, whatever it would cost.
        let spent = Spend {
            tokens: 1000,
            ..Spend::default()
        };
        assert_eq!(
            b.exceeded(&spent, &Spend::default(), 0).map(|e| e.next),
            Some(0.0)
        );
    }

    #[test]
    fn each_kind_is_checked() {
        let b = Budget {
            tokens: Some(10),
            wall_clock_ms: Some(1000),
            model_calls: Some(2),
            cost_usd: Some(1.0),
        };
        let one_call = Spend {
            model_calls: 1,
            ..Spend::default()
        };
        let at = |spent: Spend, elapsed| b.exceeded(&spent, &one_call, elapsed).map(|e| e.kind);
        assert_eq!(at(Spend::default(), 0), None);
        let calls = Spend {
            model_calls: 2,
            ..Spend::default()
        };
        assert_eq!(at(calls, 0), Some(BudgetKind::ModelCalls));
        let tokens = Spend {
            tokens: 10,
            ..Spend::default()
        };
        assert_eq!(at(tokens, 0), Some(BudgetKind::Tokens));
        let cost = Spend {
            cost_usd: 1.0,
            ..Spend::default()
        };
        assert_eq!(at(cost, 0), Some(BudgetKind::CostUsd));
        assert_eq!(at(Spend::default(), 1000), Some(BudgetKind::WallClock));
        assert_eq!(at(Spend::default(), 999), None);
    }

    #[test]
    fn the_token_override_only_lowers() {
        let b = Budget {
            tokens: Some(100),
            ..Budget::default()
        };
        assert_eq!(b.clone().lowered_tokens(Some(50)).tokens, Some(50));
        assert_eq!(b.clone().lowered_tokens(Some(500)).tokens, Some(100));
        assert_eq!(b.lowered_tokens(None).tokens, Some(100));
        assert_eq!(Budget::default().lowered_tokens(Some(7)).tokens, Some(7));
    }
}
