//! Running plans: the loop end to end, commands, file edits, preconditions, `--jobs`, crash
//! recovery, the database and the `history` tool.

mod commands;
mod database;
mod end_to_end;
mod history;
mod line_edit;
mod parallel;
mod preconditions;
mod resume;
