//! Importing plans from other tools (`acode-run import`).

mod odincode;
