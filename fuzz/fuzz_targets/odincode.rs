//! odincode plans: `import::odincode::import` (what `acode-run import odincode` calls on the
//! file's bytes), over a small workspace it may read to bind line edits.
//!
//! Properties: never a panic; a duplicate key (independent detector) is refused; a plan the
//! importer produces is one acode-run accepts: it parses, and validates under the policy the
//! importer says it needs, and the report's plan id is the plan's.
#![no_main]

use std::sync::OnceLock;

use acode_run::import::odincode;
use acode_run::plan::{ValidationContext, parse, validate};
use acode_run::policy::Policy;
use acode_run::tools::ToolRegistry;
use acode_run::workspace::Workspace;
use libfuzzer_sys::fuzz_target;

fn ws() -> &'static Workspace {
    static WS: OnceLock<Workspace> = OnceLock::new();
    WS.get_or_init(|| {
        let dir = acode_run_fuzz::scratch("odincode-ws");
        std::fs::create_dir_all(dir.join("src")).unwrap();
        std::fs::write(
            dir.join("src/lib.rs"),
            "pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n",
        )
        .unwrap();
        std::fs::write(dir.join("Cargo.toml"), "[package]\nname = \"x\"\n").unwrap();
        Workspace::new(dir).unwrap()
    })
}

fuzz_target!(|data: &[u8]| {
    let ws = ws();
    let registry = ToolRegistry::builtin();
    let imported = odincode::import(data, ws, &Policy::default());
    if acode_run_fuzz::has_duplicate_key(data) == Some(true) {
        assert!(
            imported.is_err(),
            "an odincode plan with a duplicate key was imported"
        );
    }
    let Ok(imported) = imported else { return };
    let Some(plan) = imported.plan else { return };
    let bytes = serde_json::to_vec_pretty(&plan).unwrap();
    let parsed = match parse::parse(&bytes) {
        Ok(p) => p,
        Err(problems) => panic!(
            "the imported plan does not parse: {problems:?}\n{}",
            String::from_utf8_lossy(&bytes)
        ),
    };
    assert_eq!(parsed.plan_id, imported.report.plan_id);
    let policy = match &imported.policy {
        None => Policy::default(),
        Some(p) => Policy::parse(&p.to_string()).expect("the policy the importer wrote parses"),
    };
    let ctx = ValidationContext {
        registry: &registry,
        workspace: ws,
        policy: &policy,
    };
    let problems = validate::validate(&parsed, &ctx);
    assert!(
        problems.is_empty(),
        "the imported plan does not validate: {problems:?}\n{}",
        String::from_utf8_lossy(&bytes)
    );
});
