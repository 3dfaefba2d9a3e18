//! Approval: only an approved, unchanged plan runs; decisions are kept; approvals are signed and
//! mean one thing; `run`, `preview` and `plan_status` give the same verdict.

mod agreement;
mod attest;
mod auth;
mod decisions;
mod signing;
mod ssh;
