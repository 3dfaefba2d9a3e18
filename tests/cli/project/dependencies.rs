//! SPEC §1: no async runtime. The OpenTelemetry messages (`opentelemetry-proto`) are used without
//! tonic; this holds the tree to it, reading the lock file every build uses.

use crate::harness::*;

#[test]
fn no_async_runtime_is_in_the_lock_file() {
    let lock = std::fs::read_to_string(repo().join("Cargo.lock")).unwrap();
    let names: Vec<&str> = lock
        .lines()
        .filter_map(|l| l.strip_prefix("name = \""))
        .map(|l| l.trim_end_matches('"'))
        .collect();
    assert!(
        names.contains(&"opentelemetry-proto"),
        "the check reads the lock file"
    );
    for runtime in [
        "tokio",
        "async-std",
        "smol",
        "tonic",
        "hyper",
        "async-executor",
    ] {
        assert!(!names.contains(&runtime), "{runtime} is in Cargo.lock");
    }
}
