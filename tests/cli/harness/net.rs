//! The network side of the tests: the opt-in for the package registries, and local ports.

/// Whether the tests that install from the package registries run: `ACODE_E2E_NET=1` (as
/// `.ci/run` sets).
pub fn net_enabled() -> bool {
    std::env::var("ACODE_E2E_NET").is_ok_and(|v| v == "1")
}

/// Whether the running registry test, which installs `what`, runs: [`net_enabled`]. Otherwise a
/// named skip ([`acode_run::testing::skip`]: logged and counted by `scripts/test.sh`), and under
/// `CI` a failure, rather than a pass without having run.
pub fn e2e_net(what: &str) -> bool {
    if net_enabled() {
        return true;
    }
    acode_run::testing::skip(
        "ACODE_E2E_NET=1",
        &format!("it installs {what} from the package registries"),
    );
    false
}

/// The real model server the opt-in real-model tests talk to (`ACODE_E2E_LLM_URL`). Those tests
/// are `#[ignore]`d — no CI machine has a model, so they are listed as ignored, never counted as
/// passed — and run with `cargo test -- --ignored`; there, a missing URL is a named skip (logged,
/// a failure under `CI`), not a silent pass.
pub fn real_model_url() -> Option<String> {
    match std::env::var("ACODE_E2E_LLM_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            acode_run::testing::skip(
                "ACODE_E2E_LLM_URL",
                "the test talks to a real model server (and ACODE_E2E_MODEL names the model)",
            );
            None
        }
    }
}

/// A free port on 127.0.0.1 (bound, then released for the server to take).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
