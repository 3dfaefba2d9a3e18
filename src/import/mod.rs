//! Importers: plans written for other runners, converted to acode-run plans with a report of
//! what was kept, what was lost and what could not be converted. An importer writes a plan, never
//! an approval: a converted plan is reviewed and approved like any other.

pub mod odincode;
