//! What a run tells: the HTML report, CI reports, machine-readable refusals, the terminal, and
//! secrets kept out of all of it (`printer`: out of every stream the command line writes).

mod phoenix;
mod printer;
mod refusals;
pub mod report;
mod reports;
mod sarif;
mod secrets;
mod telemetry;
mod terminal;
