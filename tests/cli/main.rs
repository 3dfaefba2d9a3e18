//! Integration tests: the real `acode-run` binary, real files, a real SQLite database.

mod harness;

mod agent;
mod auth;
mod commands;
mod database;
mod decisions;
mod escape;
mod library;
mod refusals;
mod resume;
mod run;
mod terminal;
mod validate;
