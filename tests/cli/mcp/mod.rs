//! MCP both ways: acode-run's client against stdio and Streamable HTTP servers, and `acode-run mcp`
//! checked against the published schemas and driven by the official SDKs.

mod conformance;
mod http;
mod sdk;
mod stdio;
