//! MCP (Model Context Protocol, SPEC §7b): a small synchronous client for the servers a policy
//! declares, and what approvals pin about them.
//!
//! - [`client`]: one server over stdio (one JSON-RPC 2.0 message per line), started through the
//!   sandbox's long-lived child ([`crate::process::start`]) so it runs exactly as a command
//!   does. Speaks both protocol eras, chosen by what the server answers: the stateless revision
//!   2026-07-28 (`server/discover`, the protocol version in `_meta` on every request) and the
//!   `initialize` handshake (2025-03-26 … 2025-11-25). No async runtime: a reader thread per pipe
//!   and a channel, so every wait is bounded by a deadline and the run's cancel flag.
//! - [`pins`]: the identity of a server and a SHA-256 per allowed tool (name, description, input
//!   schema), recorded by `approve` and compared before the first call of a run.
//!
//! The tools offered to plans (`mcp__SERVER__TOOL`) are in [`crate::tools::mcp`]; the server side
//! (`acode-run mcp`) is in the CLI.

pub mod client;
pub mod http;
pub mod param_headers;
pub mod pins;

/// The stateless protocol revision.
pub const STATELESS_VERSION: &str = "2026-07-28";

/// The handshake-era revisions spoken, newest first (the first is what `initialize` asks for).
pub const HANDSHAKE_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];

/// JSON-RPC error code of the stateless revision for an unsupported protocol version.
pub const UNSUPPORTED_VERSION: i64 = -32022;

/// The stateless revision's `HeaderMismatch`: a server found a call's `Mcp-*` headers at odds
/// with its body — for mirrored arguments, usually because the tool's `x-mcp-header` marks
/// changed since the client listed it, so the client is to list the tools again.
pub const HEADER_MISMATCH: i64 = -32020;

/// Replaces control characters and cuts `line` to `max` characters, so what a misbehaving server
/// printed can be shown in an error message safely.
pub fn sanitize_line(line: &str, max: usize) -> String {
    let mut out = String::new();
    for (n, c) in line.chars().enumerate() {
        if n >= max {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_escapes_control_characters_and_bounds_the_length() {
        assert_eq!(sanitize_line("a\u{1b}[31mb\r", 100), "a\\u{1b}[31mb\\r");
        assert_eq!(sanitize_line("abcdef", 3), "abc…");
    }
}
