//! Integration tests: the real `acode-run` binary, real files, a real SQLite database.

mod harness;

mod agent;
mod auth;
mod commands;
mod edges;
mod escape;
mod library;
mod preview;
mod reports;
mod resume;
mod run;
mod stuck;
mod tls;
mod validate;
