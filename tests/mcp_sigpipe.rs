//! The MCP client in a process that does not ignore SIGPIPE (an embedder: a C host, a libFuzzer
//! harness). Its own test binary, because the signal's disposition is process-wide: the other
//! tests' processes keep Rust's default (ignored).
//!
//! Found by the `mcp_client` fuzz target (docs/fuzzing.md): refusing a server's request after the
//! server closed its stdin killed the whole process with SIGPIPE.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use acode_run::mcp::client::Client;
use acode_run::process::CommandSpec;

#[test]
fn a_server_that_closed_its_stdin_is_an_error_not_a_sigpipe() {
    // SAFETY: setting a signal's disposition; this binary runs this one test.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let dir = std::env::temp_dir();
    // The server closes its stdin, then asks the client something: the client's refusal is
    // written to a pipe nobody reads.
    let script =
        r#"exec 0<&-; echo '{"jsonrpc":"2.0","id":9,"method":"sampling/createMessage"}'; sleep 2"#;
    let mut spec = CommandSpec::new(vec!["sh".into(), "-c".into(), script.into()], dir);
    spec.env = vec![("PATH".into(), "/usr/bin:/bin".into())];
    let cancel = AtomicBool::new(false);
    let err = Client::start("closed", &spec, Duration::from_secs(5), &cancel)
        .expect_err("the handshake cannot succeed");
    // Still here: the write failed with EPIPE and became an error naming the server.
    let text = err.to_string();
    assert!(text.contains("closed"), "{text}");
}
