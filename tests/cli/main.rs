//! Integration tests: the real `acode-run` binary, real files, a real SQLite database.

mod harness;

mod agent;
mod auth;
mod bwrap_attacks;
mod commands;
mod database;
mod decisions;
mod docs;
mod edges;
mod escape;
mod git_attacks;
mod history;
mod intent;
mod landlock;
mod library;
mod line_edit;
mod network;
mod odincode;
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
