//! Policy files: `Policy::load` on a file (the bounded read, the duplicate-key check and
//! `Policy::parse`, as `acode-run` reads `acode-policy.json`).
//!
//! Properties: never a panic; a duplicate key (independent detector) is always refused; a policy
//! that loads, serialised back, loads equal, with the same `policy_sha256` the approval binds.
#![no_main]

use acode_run::plan::auth::policy_sha256;
use acode_run::policy::Policy;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = acode_run_fuzz::scratch("policy");
    let path = dir.join("acode-policy.json");
    std::fs::write(&path, data).unwrap();
    let loaded = Policy::load(Some(&path), dir);
    if acode_run_fuzz::has_duplicate_key(data) == Some(true) {
        assert!(
            loaded.is_err(),
            "a policy with a duplicate key was accepted"
        );
    }
    let Ok(policy) = loaded else { return };
    let text = serde_json::to_string(&policy).expect("a policy serialises");
    std::fs::write(&path, &text).unwrap();
    let again = match Policy::load(Some(&path), dir) {
        Ok(p) => p,
        Err(e) => panic!("the re-serialised policy no longer loads: {e}\n{text}"),
    };
    assert_eq!(policy, again, "the round trip changed the policy");
    assert_eq!(policy_sha256(&policy), policy_sha256(&again));
});
