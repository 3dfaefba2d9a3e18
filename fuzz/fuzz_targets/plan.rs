//! Plan files: `plan::parse::parse_partial` (what `plan::read`/`plan::load` call on the file's
//! bytes) and `plan::validate::validate`.
//!
//! Properties: never a panic; every problem has a location and a message; a document with a
//! duplicate key (found by an independent detector) is always refused; a plan that parses and
//! validates, re-serialised (compact and pretty, keys sorted), parses and validates to the same
//! model (only the bytes' hash differs).
#![no_main]

use std::sync::OnceLock;

use acode_run::plan::{ValidationContext, parse, validate};
use acode_run::policy::Policy;
use acode_run::tools::ToolRegistry;
use acode_run::workspace::Workspace;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

struct Ctx {
    registry: ToolRegistry,
    workspace: Workspace,
    policy: Policy,
}

fn ctx() -> &'static Ctx {
    static CTX: OnceLock<Ctx> = OnceLock::new();
    CTX.get_or_init(|| {
        let dir = acode_run_fuzz::scratch("plan-ws");
        std::fs::write(dir.join("README.md"), "fuzz\n").unwrap();
        Ctx {
            registry: ToolRegistry::builtin(),
            workspace: Workspace::new(dir).unwrap(),
            policy: Policy::default(),
        }
    })
}

/// The model as data, without what depends on the bytes rather than their meaning.
fn model(plan: &acode_run::plan::Plan) -> Value {
    let mut v = serde_json::to_value(plan).expect("a plan serialises");
    let obj = v.as_object_mut().unwrap();
    obj.remove("sha256");
    obj.remove("source");
    v
}

fuzz_target!(|data: &[u8]| {
    let c = ctx();
    let vctx = ValidationContext {
        registry: &c.registry,
        workspace: &c.workspace,
        policy: &c.policy,
    };
    let (plan, mut problems) = parse::parse_partial(data);
    if let Some(plan) = &plan {
        problems.extend(validate::validate(plan, &vctx));
    }
    for p in &problems {
        assert!(!p.location.is_empty() && !p.message.is_empty(), "{p:?}");
    }
    if acode_run_fuzz::has_duplicate_key(data) == Some(true) {
        assert!(
            parse::parse(data).is_err(),
            "a plan with a duplicate key was accepted: {:?}",
            String::from_utf8_lossy(data)
        );
        assert!(problems.iter().any(|p| p.message.contains("duplicate key")));
    }
    let Some(plan) = plan else { return };
    if !problems.is_empty() {
        return;
    }
    let doc: Value = serde_json::from_slice(data).expect("a valid plan is JSON");
    let first = model(&plan);
    for text in [
        serde_json::to_vec(&doc).unwrap(),
        serde_json::to_vec_pretty(&doc).unwrap(),
    ] {
        let again = match parse::parse(&text) {
            Ok(p) => p,
            Err(problems) => panic!(
                "the re-serialised plan no longer parses: {problems:?}\n{}",
                String::from_utf8_lossy(&text)
            ),
        };
        let problems = validate::validate(&again, &vctx);
        assert!(
            problems.is_empty(),
            "the re-serialised plan no longer validates: {problems:?}"
        );
        assert_eq!(first, model(&again), "the round trip changed the plan");
    }
});
