//! Integration tests: the real `acode-run` binary, real files, a real SQLite database.

mod harness;
mod imports;

mod agent;
mod auth;
mod bwrap_attacks;
mod commands;
mod database;
mod decisions;
mod docs;
mod edges;
mod escape;
mod first_hour;
mod git_attacks;
mod landlock;
mod library;
mod network;
mod preconditions;
mod preview;
mod programs;
mod race;
mod refusals;
mod reports;
mod resume;
mod run;
mod secrets;
mod signing;
mod skills;
mod stages;
mod stuck;
mod terminal;
mod tls;
mod validate;
