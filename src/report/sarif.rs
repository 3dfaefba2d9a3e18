//! `--sarif FILE` (and `report RUN_ID --sarif FILE`): a run as SARIF 2.1.0 for code scanning
//! (docs/observability.md "SARIF"). Results: each `lsp_check` diagnostic (file, line, column), each
//! failed step, each command network request the policy refused, and each tool call refused as
//! a sandbox violation — with a rule, a level, and the run's id. Read from the run's record, so
//! it says what the database says; every text passes the redactor.
//!
//! Kept within GitHub code scanning's documented upload limits: one run per file, at most
//! [`MAX_RESULTS`] results (the most severe first; GitHub shows 5 000 of at most 25 000 accepted),
//! one location each, a handful of rules, messages cut to [`MESSAGE_CHARS`].

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::redact::Redactor;
use crate::store::{RunDetail, Store, StoreError};
use crate::tools::lsp::Diagnostic;

/// Results written at most (the most severe first): what GitHub code scanning shows of a run.
pub const MAX_RESULTS: usize = 5000;
/// Characters of one result's message.
pub const MESSAGE_CHARS: usize = 2000;
/// The `$schema` the file names (the OASIS schema's published location).
pub const SCHEMA_URI: &str =
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json";

/// The rules acode-run's own results use (a diagnostic's rule is `rustc/CODE`).
const RULES: &[(&str, &str, &str, &str)] = &[
    (
        "acode/step-failed",
        "StepFailed",
        "A step of the approved plan failed",
        "error",
    ),
    (
        "acode/sandbox-violation",
        "SandboxViolation",
        "A tool call was refused as a sandbox violation (a path outside the workspace, a command \
         the policy forbids)",
        "error",
    ),
    (
        "acode/network-denied",
        "NetworkDenied",
        "A command's network request was refused by the policy's network.allow",
        "warning",
    ),
];

/// One result before it is written.
struct Finding {
    rule: String,
    level: &'static str,
    message: String,
    uri: String,
    base: Option<&'static str>,
    line: Option<u64>,
    column: Option<u64>,
    properties: BTreeMap<&'static str, Value>,
}

fn rank(level: &str) -> u8 {
    match level {
        "error" => 0,
        "warning" => 1,
        _ => 2,
    }
}

/// The SARIF document for run `run_id` in `store` (an exact id).
pub fn render(store: &Store, run_id: &str, redactor: &Redactor) -> Result<Value, StoreError> {
    let detail = store.run_detail(run_id)?;
    let red = |s: &str| {
        let r = redactor.redact(s);
        crate::util::cut_at_char_boundary(&r, MESSAGE_CHARS).to_string()
    };
    let run = &detail.run;
    let workspace = std::path::Path::new(&run.workspace);
    // Where the plan is, for results about its steps: relative to the workspace when inside it.
    let (plan_uri, plan_base, step_lines) = plan_location(&detail, workspace);
    let step_line = |step_id: &str| -> Option<u64> {
        let pos = detail.steps.iter().find(|s| s.step_id == step_id)?.position;
        step_lines.get(pos as usize).map(|l| *l as u64)
    };
    let mut findings: Vec<Finding> = Vec::new();
    let base_props = |step: &str| {
        let mut p = BTreeMap::new();
        p.insert("acode.run_id", json!(run.run_id));
        p.insert("acode.step_id", json!(redactor.redact(step)));
        p
    };
    // lsp_check diagnostics, from each check's last execution of the step.
    let mut checks: BTreeMap<&str, &str> = BTreeMap::new();
    for e in &detail.executions {
        if e.record.tool_name == crate::tools::lsp::NAME {
            checks.insert(&e.record.step_id, &e.record.execution_id);
        }
    }
    for (step, execution) in &checks {
        let Some(text) = Store::artifact(store, execution, "diagnostics")
            .ok()
            .map(|a| a.content)
        else {
            continue;
        };
        let Ok(diagnostics) = serde_json::from_str::<Vec<Diagnostic>>(&text) else {
            continue;
        };
        for d in diagnostics {
            let level = match d.level.as_str() {
                l if l.starts_with("error") => "error",
                "warning" => "warning",
                _ => "note",
            };
            let rule = format!(
                "rustc/{}",
                d.code
                    .as_deref()
                    .unwrap_or(if level == "error" { "error" } else { level })
            );
            let (uri, base, line, column) = match &d.file_name {
                Some(f) => (
                    uri_path(&redactor.redact(f)),
                    Some("WORKSPACE"),
                    d.line_start,
                    d.column_start,
                ),
                None => (plan_uri.clone(), plan_base, step_line(step), None),
            };
            let mut properties = base_props(step);
            properties.insert("acode.source", json!("lsp_check"));
            findings.push(Finding {
                rule,
                level,
                message: red(&d.message),
                uri,
                base,
                line,
                column,
                properties,
            });
        }
    }
    // Failed steps.
    for s in &detail.steps {
        if s.status != crate::store::StepState::Failed {
            continue;
        }
        let code = s.error_code.clone().unwrap_or_else(|| "tool_failed".into());
        let mut properties = base_props(&s.step_id);
        properties.insert("acode.error_code", json!(code));
        properties.insert("acode.tool", json!(s.tool));
        findings.push(Finding {
            rule: "acode/step-failed".into(),
            level: "error",
            message: red(&format!(
                "step {} ({}) failed: {}: {}",
                s.step_id,
                s.tool,
                code,
                s.error_message.as_deref().unwrap_or("")
            )),
            uri: plan_uri.clone(),
            base: plan_base,
            line: step_line(&s.step_id),
            column: None,
            properties,
        });
    }
    // Refused calls and network requests.
    findings.extend(refusals(
        &detail,
        (&plan_uri, plan_base),
        redactor,
        &red,
        &base_props,
        &step_line,
    ));
    // The most severe first (stable, so equal ones keep their order), then the cut.
    findings.sort_by_key(|f| rank(f.level));
    let omitted = findings.len().saturating_sub(MAX_RESULTS);
    findings.truncate(MAX_RESULTS);

    let rules = rules_for(&findings);
    let results = results(findings, &rules);
    let mut bases = serde_json::Map::new();
    bases.insert(
        "WORKSPACE".into(),
        json!({"uri": dir_uri(workspace), "description": {"text": "The run's workspace"}}),
    );
    let invocation = invocation(run);
    Ok(json!({
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "acode-run",
                "version": env!("CARGO_PKG_VERSION"),
                "semanticVersion": env!("CARGO_PKG_VERSION"),
                "rules": rules.into_values().collect::<Vec<_>>(),
            }},
            "automationDetails": {
                "id": format!("acode-run/{}/{}", redactor.redact(&run.plan_id), run.run_id),
            },
            "invocations": [invocation],
            "originalUriBaseIds": bases,
            "results": results,
            "properties": {
                "acode.run_id": run.run_id,
                "acode.plan_id": redactor.redact(&run.plan_id),
                "acode.plan_sha256": run.plan_sha256,
                "acode.status": run.status.as_str(),
                "acode.results_omitted": omitted,
            },
        }],
    }))
}

/// The findings of refused calls (sandbox violations) and refused network requests, located at
/// their step in the plan.
fn refusals(
    detail: &RunDetail,
    (plan_uri, plan_base): (&str, Option<&'static str>),
    redactor: &Redactor,
    red: &dyn Fn(&str) -> String,
    base_props: &dyn Fn(&str) -> BTreeMap<&'static str, Value>,
    step_line: &dyn Fn(&str) -> Option<u64>,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    for e in &detail.executions {
        let r = &e.record;
        if r.error_code.as_deref() == Some(crate::error::ErrorKind::SandboxViolation.as_str()) {
            let mut properties = base_props(&r.step_id);
            properties.insert("acode.execution_id", json!(r.execution_id));
            properties.insert("acode.tool", json!(r.tool_name));
            findings.push(Finding {
                rule: "acode/sandbox-violation".into(),
                level: "error",
                message: red(&format!(
                    "step {}: {} refused: {}",
                    r.step_id,
                    r.tool_name,
                    r.error_message.as_deref().unwrap_or("sandbox violation")
                )),
                uri: plan_uri.to_string(),
                base: plan_base,
                line: step_line(&r.step_id),
                column: None,
                properties,
            });
        }
        for n in e.network.iter().filter(|n| !n.allowed) {
            let mut properties = base_props(&r.step_id);
            properties.insert("acode.execution_id", json!(r.execution_id));
            properties.insert("acode.host", json!(redactor.redact(&n.host)));
            properties.insert("acode.port", json!(n.port));
            findings.push(Finding {
                rule: "acode/network-denied".into(),
                level: "warning",
                message: red(&format!(
                    "step {}: a request to {}:{} was refused ({})",
                    r.step_id, n.host, n.port, n.reason
                )),
                uri: plan_uri.to_string(),
                base: plan_base,
                line: step_line(&r.step_id),
                column: None,
                properties,
            });
        }
    }
    findings
}

/// The rules the document names: every acode rule, and each rustc code a finding has.
fn rules_for(findings: &[Finding]) -> BTreeMap<String, Value> {
    let mut rules: BTreeMap<String, Value> = BTreeMap::new();
    for (id, name, text, level) in RULES {
        rules.insert(
            id.to_string(),
            json!({"id": id, "name": name, "shortDescription": {"text": text},
                   "defaultConfiguration": {"level": level}}),
        );
    }
    for f in findings {
        if f.rule.starts_with("rustc/") && !rules.contains_key(&f.rule) {
            let code = f.rule.trim_start_matches("rustc/");
            rules.insert(
                f.rule.clone(),
                json!({"id": f.rule, "name": code,
                       "shortDescription": {"text": format!("rustc diagnostic {code}")},
                       "defaultConfiguration": {"level": f.level}}),
            );
        }
    }
    rules
}

/// The findings as SARIF results, each naming its rule's index in `rules`.
fn results(findings: Vec<Finding>, rules: &BTreeMap<String, Value>) -> Vec<Value> {
    let rule_index: BTreeMap<String, usize> = rules
        .keys()
        .enumerate()
        .map(|(i, k)| (k.clone(), i))
        .collect();
    findings
        .into_iter()
        .map(|f| result(f, &rule_index))
        .collect()
}

/// One finding as a SARIF result: its rule (by index too), level, message, location and a
/// fingerprint that stays the same across runs for the same finding.
fn result(f: Finding, rule_index: &BTreeMap<String, usize>) -> Value {
    let mut artifact = json!({"uri": f.uri});
    if let Some(base) = f.base {
        artifact["uriBaseId"] = json!(base);
    }
    let mut location = json!({"physicalLocation": {"artifactLocation": artifact}});
    if let Some(line) = f.line.filter(|l| *l >= 1) {
        let mut region = json!({"startLine": line});
        if let Some(col) = f.column.filter(|c| *c >= 1) {
            region["startColumn"] = json!(col);
        }
        location["physicalLocation"]["region"] = region;
    }
    let fingerprint = crate::util::sha256_hex(
        format!("{}\n{}\n{:?}\n{}", f.rule, f.uri, f.line, f.message).as_bytes(),
    );
    json!({
        "ruleId": f.rule,
        "ruleIndex": rule_index.get(&f.rule).copied().unwrap_or(0),
        "level": f.level,
        "message": {"text": f.message},
        "locations": [location],
        "partialFingerprints": {"acodeResult/v1": fingerprint},
        "properties": f.properties,
    })
}

/// The run as a SARIF invocation: whether it succeeded, its exit code and what that means, its
/// start and end.
fn invocation(run: &crate::store::RunRow) -> Value {
    let mut invocation = json!({
        "executionSuccessful": run.exit_code == Some(0),
        "startTimeUtc": utc(run.started_at),
    });
    if let Some(code) = run.exit_code {
        invocation["exitCode"] = json!(code);
        if let Some(c) = i32::try_from(code)
            .ok()
            .and_then(crate::error::ExitCode::from_code)
        {
            invocation["exitCodeDescription"] = json!(c.description());
        }
    }
    if let Some(end) = run.finished_at {
        invocation["endTimeUtc"] = json!(utc(end));
    }
    invocation
}

/// The plan file as a result location: its URI (relative to the workspace when inside it, with
/// the `WORKSPACE` base), and the line where each step starts.
fn plan_location(
    detail: &RunDetail,
    workspace: &std::path::Path,
) -> (String, Option<&'static str>, Vec<usize>) {
    let Some(path) = detail.run.plan_path.as_deref().map(std::path::Path::new) else {
        return ("plan.json".into(), Some("WORKSPACE"), Vec::new());
    };
    let lines = std::fs::read(path)
        .map(|b| crate::plan::parse::step_lines(&b))
        .unwrap_or_default();
    match path.strip_prefix(workspace) {
        Ok(rel) => (uri_path(&rel.to_string_lossy()), Some("WORKSPACE"), lines),
        Err(_) => (
            format!("file://{}", uri_path(&path.to_string_lossy())),
            None,
            lines,
        ),
    }
}

/// A path as a URI reference: each byte outside the unreserved set and `/` percent-encoded.
fn uri_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `file:///abs/dir/` for a directory.
fn dir_uri(dir: &std::path::Path) -> String {
    let mut p = uri_path(&dir.to_string_lossy());
    if !p.ends_with('/') {
        p.push('/');
    }
    format!("file://{p}")
}

/// Unix milliseconds as SARIF's UTC date-time (`2026-01-02T03:04:05.678Z`).
fn utc(ms: i64) -> String {
    let day_time = crate::error::format_ms(ms).replace(' ', "T");
    format!("{day_time}.{:03}Z", ms.rem_euclid(1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_and_times() {
        assert_eq!(uri_path("src/a b#.rs"), "src/a%20b%23.rs");
        assert_eq!(dir_uri(std::path::Path::new("/w s")), "file:///w%20s/");
        assert_eq!(utc(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }
}
