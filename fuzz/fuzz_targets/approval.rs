//! Approval files: `plan::auth::load` on a `PLAN.approval` file (as the runner reads it), then
//! the checks the runner makes with it (`check` against the plan, `verify_signature`).
//!
//! Properties: never a panic; a duplicate key (independent detector) is always refused; an
//! approval that loads, stored with `auth::store` and loaded again, is equal; no input is
//! accepted as signed under a key only this process knows (no forgery).
#![no_main]

use std::sync::OnceLock;

use acode_run::plan::{auth, parse};
use libfuzzer_sys::fuzz_target;

const PLAN: &[u8] = br#"{"plan_id": "fuzz", "steps": [{"step_id": "a", "tool": "file_read", "arguments": {"path": "README.md"}}]}"#;

fn plan() -> &'static acode_run::plan::Plan {
    static PLAN_MODEL: OnceLock<acode_run::plan::Plan> = OnceLock::new();
    PLAN_MODEL.get_or_init(|| parse::parse(PLAN).expect("the target's plan parses"))
}

fn key() -> &'static [u8] {
    static KEY: OnceLock<Vec<u8>> = OnceLock::new();
    KEY.get_or_init(|| {
        let mut k = Vec::new();
        k.extend_from_slice(std::process::id().to_le_bytes().as_slice());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        k.extend_from_slice(&now.to_le_bytes());
        k
    })
}

fuzz_target!(|data: &[u8]| {
    let dir = acode_run_fuzz::scratch("approval");
    let plan_path = dir.join("plan.json");
    let plan = plan();
    std::fs::write(auth::approval_path(&plan_path), data).unwrap();
    let loaded = auth::load(&plan_path, plan);
    if acode_run_fuzz::has_duplicate_key(data) == Some(true) {
        assert!(
            loaded.is_err(),
            "an approval with a duplicate key was accepted"
        );
    }
    let Ok(approval) = loaded else { return };
    let _ = approval.check(plan);
    assert!(
        approval.verify_signature(key()).is_err(),
        "an approval from the fuzzer verified under a key it cannot know"
    );
    let copy = dir.join("copy.json");
    auth::store(&copy, &approval).expect("store");
    let again = auth::load(&copy, plan).expect("a stored approval loads");
    assert_eq!(approval, again, "the round trip changed the approval");
});
