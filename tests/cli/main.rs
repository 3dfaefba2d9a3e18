//! Integration tests: the real `acode-run` binary, real files, a real SQLite database.
//!
//! One folder per feature; `harness` holds the helpers they share (`use crate::harness::*;`).

mod harness;
#[path = "../support/mcp_http.rs"]
mod mcp_http_server;

mod agent;
mod approval;
mod fleet;
mod import;
mod mcp;
mod output;
mod pipeline;
mod plan;
mod project;
mod run;
mod sandbox;
