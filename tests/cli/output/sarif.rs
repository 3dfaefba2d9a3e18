//! `--sarif FILE` (issue 46, docs/observability.md): a run with a compiler error
//! (`lsp_check` on a real crate), a refused network request, a sandbox violation and failed steps
//! becomes a SARIF 2.1.0 file that the official OASIS schema (vendored in
//! `tests/support/sarif/`) accepts, within GitHub code scanning's documented upload limits, each
//! result with its rule, level, location and the run's id; `report RUN_ID --sarif` writes the same.

use acode_run::llm::scripted::{ScriptedResponse, ScriptedServer};
use serde_json::{Value, json};

use crate::harness::*;

/// The official SARIF 2.1.0 schema, as published by OASIS (sarif-spec, `sarif-2.1/schema/`).
const SARIF_SCHEMA: &str = include_str!("../../support/sarif/sarif-schema-2.1.0.json");

fn validate_sarif(doc: &Value) {
    let schema: Value = serde_json::from_str(SARIF_SCHEMA).unwrap();
    let url = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json";
    let mut schemas = boon::Schemas::new();
    let mut compiler = boon::Compiler::new();
    compiler.add_resource(url, schema).unwrap();
    let index = compiler
        .compile(url, &mut schemas)
        .unwrap_or_else(|e| panic!("the SARIF schema does not compile: {e:#}"));
    if let Err(e) = schemas.validate(doc, index) {
        panic!("not valid SARIF 2.1.0: {e:#}\n{doc:#}");
    }
}

/// GitHub code scanning's documented limits on an upload (SARIF support for code scanning):
/// runs per file, results per run (5 000 shown), rules per run, locations per result, tags per
/// rule.
fn within_upload_limits(doc: &Value) {
    let runs = doc["runs"].as_array().unwrap();
    assert!(runs.len() <= 20);
    for run in runs {
        let results = run["results"].as_array().unwrap();
        assert!(results.len() <= 5000);
        let rules = run["tool"]["driver"]["rules"].as_array().unwrap();
        assert!(rules.len() <= 25_000);
        for rule in rules {
            assert!(
                rule["properties"]["tags"]
                    .as_array()
                    .is_none_or(|t| t.len() <= 20)
            );
        }
        for r in results {
            let locations = r["locations"].as_array().unwrap();
            assert!((1..=1000).contains(&locations.len()), "{r}");
            // The rule is declared, and the index points at it.
            let i = r["ruleIndex"].as_u64().unwrap() as usize;
            assert_eq!(rules[i]["id"], r["ruleId"], "{r}");
        }
    }
}

#[test]
fn a_failed_run_becomes_valid_sarif_with_every_kind_of_result() {
    let t = TestDir::new();
    t.file(
        "crate/Cargo.toml",
        "[package]\nname = \"sarif_demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n[workspace]\n",
    );
    t.file(
        "crate/src/lib.rs",
        "pub fn f() -> u32 {\n    // the error is on line 3\n    \"not a number\"\n}\n",
    );
    t.file(
        "acode-policy.json",
        &json!({"network": {"allow": ["localhost:1"]}}).to_string(),
    );
    let plan = t.plan(
        "sarif.json",
        &json!({"plan_id": "sarif-demo", "steps": [
            {"step_id": "check", "tool": "lsp_check", "arguments": {"path": "crate"},
             "on_failure": "continue"},
            {"step_id": "fetch", "tool": "run_command", "on_failure": "continue",
             "arguments": {"argv": ["python3", "-c",
                "import urllib.request; urllib.request.urlopen('http://blocked.example.net/', timeout=10)"]},
             "depends_on": []},
            {"step_id": "escape", "tool": "agent", "on_failure": "continue", "depends_on": [],
             "arguments": {"instruction": "Read the sentinel.", "tools": ["file_read"],
                           "max_turns": 3}},
            {"step_id": "missing", "tool": "file_read", "arguments": {"path": "nope.txt"},
             "on_failure": "continue", "depends_on": []}
        ]}),
    );
    // The model tries to leave the workspace: refused, told, and it gives up.
    let server = ScriptedServer::start(vec![
        ScriptedResponse::chat_tool_calls(&[(
            "file_read",
            json!({"path": "../outside/sentinel.txt"}),
        )]),
        ScriptedResponse::chat_text("cannot"),
    ]);
    let sarif = t.root.join("run.sarif");
    let out = t.approve_and_run_with_model(
        &plan,
        &server,
        &["--jobs", "1", "--sarif", sarif.to_str().unwrap()],
    );
    assert_eq!(code(&out), 0, "every failure tolerated: {}", stderr(&out));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&sarif).unwrap()).unwrap();
    validate_sarif(&doc);
    within_upload_limits(&doc);
    let run_id: String = q(&t.db(), "SELECT run_id FROM runs");
    let run = &doc["runs"][0];
    assert_eq!(doc["version"], "2.1.0");
    assert_eq!(run["tool"]["driver"]["name"], "acode-run");
    assert_eq!(
        run["automationDetails"]["id"],
        format!("acode-run/sarif-demo/{run_id}")
    );
    assert_eq!(run["properties"]["acode.run_id"], run_id);
    assert_eq!(run["invocations"][0]["exitCode"], 0);
    let results = run["results"].as_array().unwrap();
    for r in results {
        assert_eq!(r["properties"]["acode.run_id"], run_id, "{r}");
    }
    let find =
        |rule: &str| -> Vec<&Value> { results.iter().filter(|r| r["ruleId"] == rule).collect() };
    // The compiler's error and warning, at their file, line and column.
    let error = find("rustc/E0308");
    assert_eq!(error.len(), 1, "{results:#?}");
    assert_eq!(error[0]["level"], "error");
    let loc = &error[0]["locations"][0]["physicalLocation"];
    assert_eq!(loc["artifactLocation"]["uri"], "crate/src/lib.rs");
    assert_eq!(loc["artifactLocation"]["uriBaseId"], "WORKSPACE");
    assert_eq!(loc["region"]["startLine"], 3);
    assert_eq!(loc["region"]["startColumn"], 5);
    // The rule is declared with the diagnostic's level.
    let rules = run["tool"]["driver"]["rules"].as_array().unwrap();
    assert!(
        rules
            .iter()
            .any(|r| r["id"] == "rustc/E0308" && r["defaultConfiguration"]["level"] == "error")
    );
    // The refused request, the sandbox violation and the failed steps.
    let denied = find("acode/network-denied");
    assert_eq!(denied.len(), 1, "{results:#?}");
    assert_eq!(denied[0]["properties"]["acode.host"], "blocked.example.net");
    assert_eq!(denied[0]["level"], "warning");
    let violation = find("acode/sandbox-violation");
    assert_eq!(violation.len(), 1, "{results:#?}");
    assert_eq!(violation[0]["properties"]["acode.step_id"], "escape");
    assert_eq!(violation[0]["level"], "error");
    let failed: Vec<&str> = find("acode/step-failed")
        .iter()
        .map(|r| r["properties"]["acode.step_id"].as_str().unwrap())
        .collect();
    assert_eq!(failed, ["check", "fetch", "missing"]);
    // Located on the plan file at the step's line (the plan lies outside the workspace).
    let step_loc = &find("acode/step-failed")[2]["locations"][0]["physicalLocation"];
    assert!(
        step_loc["artifactLocation"]["uri"]
            .as_str()
            .unwrap()
            .ends_with("/sarif.json")
    );
    assert!(step_loc["region"]["startLine"].as_u64().unwrap() > 1);

    // `report RUN_ID --sarif` writes the same results from the record.
    let again = t.root.join("again.sarif");
    let out = t.run(&["report", &run_id[..8], "--sarif", again.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let doc2: Value = serde_json::from_str(&std::fs::read_to_string(&again).unwrap()).unwrap();
    validate_sarif(&doc2);
    assert_eq!(doc2["runs"][0]["results"], run["results"]);
}

#[test]
fn a_clean_run_is_valid_sarif_with_no_results_and_the_schema_check_can_fail() {
    let t = TestDir::new();
    t.file("a.txt", "a\n");
    let plan = t.plan(
        "ok.json",
        &json!({"plan_id": "ok", "steps": [
            {"step_id": "read", "tool": "file_read", "arguments": {"path": "a.txt"}}]}),
    );
    let sarif = t.root.join("ok.sarif");
    let out = t.approve_and_run(&plan, &["--sarif", sarif.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&sarif).unwrap()).unwrap();
    validate_sarif(&doc);
    assert_eq!(doc["runs"][0]["results"], json!([]));
    assert_eq!(
        doc["runs"][0]["invocations"][0]["executionSuccessful"],
        true
    );
    // The validator is not a rubber stamp: a wrong level is refused.
    doc["runs"][0]["results"] = json!([{"message": {"text": "x"}, "level": "fatal"}]);
    let refused = std::panic::catch_unwind(|| validate_sarif(&doc));
    assert!(refused.is_err());
}
