//! Integration tests: the real `acode-run` binary, real files, a real SQLite database.

mod harness;

mod agent;
mod auth;
mod escape;
mod library;
mod run;
mod validate;
