//! Plan validation through `acode-run validate` (SPEC §2).

use serde_json::json;

use crate::harness::*;

#[test]
fn malformed_json_reports_line_and_column() {
    let t = TestDir::new();
    let plan = t.plan_text(
        "bad.json",
        "{\n  \"plan_id\": \"x\",\n  \"steps\": [\n    {\"step_id\": \"a\",}\n  ]\n}\n",
    );
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("line 4, column"), "{}", stderr(&out));
}

#[test]
fn unknown_tool_is_named() {
    let t = TestDir::new();
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "p", "steps": [
        {"step_id": "a", "tool": "file_teleport", "arguments": {}}]}),
    );
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("steps[0].tool: unknown tool \"file_teleport\""),
        "{}",
        stderr(&out)
    );
    // Pretty-printed: `{`, `"plan_id"`, `"steps": [`, then the step's `{` on line 4.
    assert!(
        stderr(&out).contains("(step at line 4)"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn all_problems_are_reported_together() {
    let t = TestDir::new();
    let plan = t.plan("p.json", &json!({"plan_id": "p", "steps": [
        {"step_id": "a", "tool": "file_read", "arguments": {"path": 7}},
        {"step_id": "b", "tool": "file_read", "arguments": {"path": "${nope}"}},
        {"step_id": "c", "tool": "file_read", "arguments": {"path": "x"}, "depends_on": ["zzz"]},
        {"step_id": "d", "tool": "file_read", "arguments": {"path": "x"}, "precondition": "sky is blue"}
    ]}));
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 2);
    let err = stderr(&out);
    assert!(err.contains("4 problems"), "{err}");
    assert!(
        err.contains("steps[0].arguments.path: expected string"),
        "{err}"
    );
    assert!(err.contains("unknown variable '${nope}'"), "{err}");
    assert!(err.contains("unknown step \"zzz\""), "{err}");
    assert!(err.contains("unknown precondition"), "{err}");
}

#[test]
fn dependency_cycles_are_rejected() {
    let t = TestDir::new();
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "p", "steps": [
            {"step_id": "a", "tool": "file_read", "arguments": {"path": "x"}, "depends_on": ["c"]},
            {"step_id": "b", "tool": "file_read", "arguments": {"path": "x"}, "depends_on": ["a"]},
            {"step_id": "c", "tool": "file_read", "arguments": {"path": "x"}, "depends_on": ["b"]}
        ]}),
    );
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("cycle"), "{}", stderr(&out));
}

#[test]
fn variables_and_overrides() {
    let t = TestDir::new();
    t.file("docs/a.txt", "A");
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "p", "variables": {"dir": "docs"}, "steps": [
        {"step_id": "a", "tool": "file_read", "arguments": {"path": "${dir}/a.txt"}}]}),
    );
    assert_eq!(code(&t.run(&["validate", plan.to_str().unwrap()])), 0);
    // Overriding a declared variable is fine; an undeclared one is an error.
    assert_eq!(
        code(&t.run(&["validate", plan.to_str().unwrap(), "--var", "dir=other"])),
        0
    );
    let out = t.run(&["validate", plan.to_str().unwrap(), "--var", "sneaky=1"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("does not declare"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn huge_plan_validates_quickly_enough_and_hostile_sizes_are_refused() {
    let t = TestDir::new();
    let steps: Vec<_> = (0..20_000)
        .map(|i| json!({"step_id": format!("s{i}"), "tool": "file_read", "arguments": {"path": "a.txt"}}))
        .collect();
    let plan = t.plan("big.json", &json!({"plan_id": "big", "steps": steps}));
    // Quickly enough: 20 000 steps in well under the bound (about a second in a debug build on a
    // busy machine; the bound is generous so that only a super-linear check trips it).
    let started = std::time::Instant::now();
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    let took = started.elapsed();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        took < std::time::Duration::from_secs(30),
        "validating 20 000 steps took {took:?}"
    );
    // A hostile size: a (sparse) plan file over the 64 MiB limit is refused unread, at once.
    let huge = t.root.join("huge.json");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(acode_run::input::MAX_PLAN_BYTES + 1)
        .unwrap();
    let started = std::time::Instant::now();
    let out = t.run(&["validate", huge.to_str().unwrap()]);
    assert_exit_with(&out, 2, "larger than the limit of 67108864 bytes");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    let empty = t.plan("empty.json", &json!({"plan_id": "e", "steps": []}));
    let out = t.run(&["validate", empty.to_str().unwrap()]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("at least one step"));
    let not_utf8 = t.root.join("bin.json");
    std::fs::write(&not_utf8, b"{\"plan_id\": \"\xff\xfe\"}").unwrap();
    assert_eq!(code(&t.run(&["validate", not_utf8.to_str().unwrap()])), 2);
}

#[test]
fn missing_plan_file_is_a_usage_error() {
    let t = TestDir::new();
    let out = t.run(&["validate", "does-not-exist.json"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("cannot read plan does-not-exist.json"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn schema_and_tools_commands_print_json() {
    let t = TestDir::new();
    for args in [
        &["schema", "plan"][..],
        &["schema", "events"][..],
        &["tools"][..],
    ] {
        let out = t.run(args);
        assert_eq!(code(&out), 0, "{args:?}");
        let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert!(v.is_object() || v.is_array());
    }
    let tools: serde_json::Value = serde_json::from_str(&stdout(&t.run(&["tools"]))).unwrap();
    let names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for expected in [
        "file_read",
        "file_write",
        "file_create",
        "file_edit",
        "file_delete",
        "list_directory",
        "file_search",
        "file_glob",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
}

#[test]
fn help_and_version() {
    let t = TestDir::new();
    let out = t.run(&["--help"]);
    assert_eq!(code(&out), 0);
    assert!(stdout(&out).contains("Commands:"));
    let out = t.run(&["run", "--help"]);
    assert!(stdout(&out).contains("--confirm MODE"));
    let out = t.run(&["--version"]);
    assert!(stdout(&out).starts_with("acode-run "));
    let out = t.run(&["--frobnicate"]);
    assert_eq!(code(&out), 2);
}

#[test]
fn validate_json_reports_problems_for_machines() {
    let t = TestDir::new();
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "p", "steps": [
        {"step_id": "a", "tool": "file_read", "arguments": {"path": "../x"}}]}),
    );
    let out = t.run(&["validate", "--json", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 32);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["valid"], false);
    assert_eq!(v["problems"][0]["kind"], "sandbox");
    assert_eq!(v["problems"][0]["location"], "steps[0].arguments");
    assert_eq!(v["problems"][0]["line"], 4);
    t.file("x.txt", "x");
    let ok = t.plan(
        "ok.json",
        &json!({"plan_id": "ok", "steps": [
        {"step_id": "a", "tool": "file_read", "arguments": {"path": "x.txt"}}]}),
    );
    let out = t.run(&["validate", "--json", ok.to_str().unwrap()]);
    assert_eq!(code(&out), 0);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["valid"], true);
    assert_eq!(v["steps"], 1);
}

#[test]
fn cycles_and_unknown_dependencies_are_reported_together() {
    let t = TestDir::new();
    let read = |id: &str, deps: &[&str]| json!({"step_id": id, "tool": "file_read", "arguments": {"path": "a"}, "depends_on": deps});
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "p", "steps": [
            read("a", &["b"]), read("b", &["a"]), read("c", &["ghost"])]}),
    );
    let out = t.run(&["validate", plan.to_str().unwrap(), "--json"]);
    assert_eq!(code(&out), 2);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let messages: Vec<&str> = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["message"].as_str().unwrap())
        .collect();
    assert!(
        messages
            .iter()
            .any(|m| m.contains("unknown step \"ghost\"")),
        "{messages:?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("cycle among these steps: a, b")),
        "{messages:?}"
    );
}

/// The tour's plan in README.md is valid as written (it once used an undeclared `${who}`).
#[test]
fn the_readme_tour_plan_validates() {
    let readme = include_str!("../../../README.md");
    let tour = &readme[readme.find("## A short tour").expect("tour section")..];
    let start = tour.find("```json\n").expect("a JSON plan") + "```json\n".len();
    let plan_text = &tour[start..start + tour[start..].find("```").unwrap()];
    let t = TestDir::new();
    t.file(
        "src/lib.rs",
        "pub fn hi() -> &'static str { \"Hello, world\" }\n",
    );
    let plan = t.plan_text("tour.json", plan_text);
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// `defaults.jobs` is a whole number from 1 to 256; anything else is refused where it stands,
/// before anything runs (issue #34 item 1).
#[test]
fn defaults_jobs_out_of_range_or_of_the_wrong_type_is_refused_by_validate_and_the_schema() {
    let t = TestDir::new();
    let schema: serde_json::Value = serde_json::from_str(acode_run::plan::SCHEMA).unwrap();
    let jobs = &schema["properties"]["defaults"]["properties"]["jobs"];
    assert_eq!(jobs["minimum"], 1, "{jobs}");
    assert_eq!(jobs["maximum"], 256, "{jobs}");
    for (bad, needle) in [
        (json!(0), "must be at least 1"),
        (json!(257), "from 0 to 256"),
        (json!("4"), "from 0 to 256"),
        (json!(1.5), "from 0 to 256"),
    ] {
        let plan = t.plan(
            "j.json",
            &json!({"plan_id": "j", "defaults": {"jobs": bad},
                    "steps": [{"step_id": "a", "tool": "file_read", "arguments": {"path": "x"}}]}),
        );
        let out = t.run(&["validate", plan.to_str().unwrap()]);
        assert_exit_with(&out, 2, "plan.defaults.jobs");
        assert!(stderr(&out).contains(needle), "{bad}: {}", stderr(&out));
    }
    let plan = t.plan(
        "j.json",
        &json!({"plan_id": "j", "defaults": {"jobs": 256},
                "steps": [{"step_id": "a", "tool": "file_read", "arguments": {"path": "x"}}]}),
    );
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// A step that is not an object among good ones (found by the schema property test, issue #34
/// item 2) was a crash of `validate` (exit 101): now every problem is reported where it is, the
/// later steps' included.
#[test]
fn a_step_that_is_not_an_object_is_reported_with_the_later_steps_problems() {
    let t = TestDir::new();
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "p", "steps": [
            {"step_id": "a", "tool": "file_read", "arguments": {"path": "x"}},
            5,
            {"step_id": "b", "tool": "file_read", "arguments": {"path": "x"}, "depends_on": ["zz"]}]}),
    );
    let out = t.run(&["validate", plan.to_str().unwrap(), "--json"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let at: Vec<&str> = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["location"].as_str().unwrap())
        .collect();
    assert_eq!(at, ["steps[1]", "steps[2].depends_on[0]"], "{v}");
}

/// 500 steps with one problem are one line of the human output, with the step ranges, the count
/// and the first step's line; `--json` keeps every problem (issue #34 item 4).
#[test]
fn identical_problems_of_many_steps_are_one_line_for_people_and_all_in_json() {
    let t = TestDir::new();
    let mut steps: Vec<serde_json::Value> = (0..3)
        .map(|i| json!({"step_id": format!("ok{i}"), "tool": "file_read", "arguments": {"path": "x"}}))
        .collect();
    steps.extend((0..500).map(
        |i| json!({"step_id": format!("s{i}"), "tool": "file_read", "arguments": {"path": "x"}, "retries": "2"}),
    ));
    steps.push(
        json!({"step_id": "z", "tool": "file_read", "arguments": {"path": "x"}, "retries": "2"}),
    );
    let plan = t.plan("p.json", &json!({"plan_id": "p", "steps": steps}));
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("invalid plan (501 problems)"), "{err}");
    let listed: Vec<&str> = err.lines().filter(|l| l.starts_with("  - ")).collect();
    assert_eq!(listed.len(), 1, "{err}");
    assert!(
        listed[0].starts_with("  - steps[3–503].retries (501 steps): expected a whole number"),
        "{err}"
    );
    assert!(listed[0].ends_with("(first at line 25)"), "{err}");
    // Different problems stay apart, and a gap splits the range.
    let mut steps: Vec<serde_json::Value> = (0..6)
        .map(|i| json!({"step_id": format!("s{i}"), "tool": "file_read", "arguments": {"path": "x"}, "retries": "2"}))
        .collect();
    steps[2] = json!({"step_id": "s2", "tool": "file_read", "arguments": {"path": "x"}});
    steps[4]["timeout_s"] = json!(0);
    let plan = t.plan("q.json", &json!({"plan_id": "q", "steps": steps}));
    let err = stderr(&t.run(&["validate", plan.to_str().unwrap()]));
    assert!(
        err.contains("  - steps[0–1, 3–5].retries (5 steps): "),
        "{err}"
    );
    assert!(
        err.contains("  - steps[4].timeout_s: must be at least 1"),
        "{err}"
    );
    // JSON: every problem, each with its own location.
    let out = t.run(&["validate", plan.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["problems"].as_array().unwrap().len(), 6, "{v}");
}

/// `tools` prints one JSON document on stdout (the human notes on stderr), and `tools --json` one
/// object with the allowlist as a field, for the workspace's policy (issue #34 item 11).
#[test]
fn tools_stdout_is_one_json_document_and_json_carries_the_allowlist() {
    let t = TestDir::new();
    let out = t.run(&["tools"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("one JSON document");
    assert!(v.is_array());
    assert!(
        stderr(&out).contains("built-in allowlist"),
        "{}",
        stderr(&out)
    );
    t.file(
        "acode-policy.json",
        &json!({"allow_commands": ["hostname"], "auto_approve_commands": ["hostname"]}).to_string(),
    );
    let out = t.run(&["tools", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("one JSON document");
    assert!(
        v["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "run_command")
    );
    let allowed = v["run_command"]["allowed_commands"].as_array().unwrap();
    assert!(
        allowed.contains(&json!("hostname")) && allowed.contains(&json!("cargo")),
        "{v}"
    );
    // Added to the built-in list (issue 43 §3), not replacing it.
    let auto = v["run_command"]["auto_approve_commands"]
        .as_array()
        .unwrap();
    assert!(
        auto.contains(&json!("hostname")) && auto.contains(&json!("echo")),
        "{v}"
    );
    assert_eq!(v["confirm_tools"], json!(["file_delete"]));
}

/// A remote MCP server whose host `network.allow` does not allow is refused by `validate`, with
/// the line that allows it (issue 43 §3: only `approve` caught it); allowed, the plan is valid.
#[test]
fn a_remote_mcp_host_missing_from_network_allow_is_refused_with_the_fix() {
    let t = TestDir::new();
    let policy = |allow: &[&str]| {
        t.file(
            "acode-policy.json",
            &json!({"network": {"allow": allow}, "mcp": {"servers": {"rs": {
                "url": "https://mcp.example.org:8443/mcp", "tools": ["echo"]}}}})
            .to_string(),
        );
    };
    let plan = t.plan(
        "p.json",
        &json!({"plan_id": "p", "steps": [
        {"step_id": "call", "tool": "mcp__rs__echo", "arguments": {"text": "hi"}}]}),
    );
    policy(&["other.example.org"]);
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("steps[0].tool: MCP server rs at https://mcp.example.org:8443/mcp is not allowed by the policy's network.allow"),
        "{err}"
    );
    assert!(
        err.contains("add \"mcp.example.org:8443\" to network.allow in acode-policy.json"),
        "{err}"
    );
    policy(&["mcp.example.org:8443"]);
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// `lsp_check` checks Rust crates only: on a directory without `Cargo.toml` `validate` refuses it,
/// saying so and what to use instead, unless an earlier step can create the manifest or its
/// precondition skips the step when there is none; `tools` says it is Rust only.
#[test]
fn lsp_check_without_a_cargo_toml_is_refused_at_validate_with_the_fix() {
    let t = TestDir::new();
    t.file("package.json", "{}\n");
    let check = json!({"step_id": "check", "tool": "lsp_check", "arguments": {"path": "."}});
    let plan = t.plan("p.json", &json!({"plan_id": "p", "steps": [check]}));
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("steps[0].arguments: lsp_check: path: . has no Cargo.toml"),
        "{err}"
    );
    assert!(err.contains("checks Rust crates only"), "{err}");
    assert!(err.contains("run_command"), "{err}");

    // An earlier step writes the manifest: valid (the run checks again).
    let plan = t.plan(
        "later.json",
        &json!({"plan_id": "later", "steps": [
            {"step_id": "init", "tool": "file_write",
             "arguments": {"path": "Cargo.toml", "contents": "[package]\nname = \"x\"\n"}},
            {"step_id": "check", "tool": "lsp_check", "arguments": {"path": "."},
             "depends_on": ["init"]}]}),
    );
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // A precondition that skips the step without a crate: valid.
    let plan = t.plan(
        "guarded.json",
        &json!({"plan_id": "guarded", "steps": [
            {"step_id": "check", "tool": "lsp_check", "arguments": {"path": "."},
             "precondition": "Cargo workspace exists"}]}),
    );
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // With the manifest there: valid.
    t.file("Cargo.toml", "[package]\nname = \"x\"\n");
    let plan = t.plan("p.json", &json!({"plan_id": "p", "steps": [check]}));
    let out = t.run(&["validate", plan.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    let tools: serde_json::Value = serde_json::from_str(&stdout(&t.run(&["tools"]))).unwrap();
    let lsp = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "lsp_check")
        .unwrap();
    assert!(
        lsp["description"].as_str().unwrap().contains("Rust only"),
        "{lsp}"
    );
}
