//! The network side of the tests: the opt-in for the package registries, and local ports.

/// Whether the tests that install from the package registries run: `ACODE_E2E_NET=1` (as
/// `.ci/run` sets).
pub fn net_enabled() -> bool {
    std::env::var("ACODE_E2E_NET").is_ok_and(|v| v == "1")
}

/// Whether the registry test `test`, which installs `what`, runs: [`net_enabled`]. Under `CI`
/// without it the test fails rather than pass without having run.
pub fn e2e_net(test: &str, what: &str) -> bool {
    if net_enabled() {
        return true;
    }
    assert!(
        std::env::var("CI").is_err(),
        "{test}: CI must set ACODE_E2E_NET=1 (it installs {what})"
    );
    eprintln!("skipped {test}: set ACODE_E2E_NET=1 to install {what}");
    false
}

/// A free port on 127.0.0.1 (bound, then released for the server to take).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
