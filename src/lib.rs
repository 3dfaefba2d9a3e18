//! acode-run: a sandboxed, auditable runner for approved agentic-coding plans.
//!
//! The crate is organised the way a run flows: a [`plan`] is loaded, validated and authorized; the
//! [`executor`] walks its steps, asking [`tools`] to act inside the [`sandbox`]; every call is recorded
//! in the [`store`] and reported through [`events`]. Agentic steps get their tool calls from an [`llm`].
//!
//! Embedding it: the front door is [`runner::PlanRunner`], which does what `acode-run run` does —
//! protects `.acode/`, the database and the plan from tool writes, loads the workspace's
//! `acode-policy.json`, validates the plan, verifies its approval (hash, signature, policy) and
//! runs every command in the OS sandbox (`auto`: bubblewrap, else Landlock). Linux only.
//!
//! ```no_run
//! use acode_run::plan::{AuthStatus, auth::approval_key};
//! use acode_run::runner::{DecisionRequest, PlanRunner, RunOptions};
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // The command line's defaults: OS sandbox `auto`, the workspace's policy, the database in
//!     // WORKSPACE/.acode/, every confirmation denied (`with_confirmation` to ask someone).
//!     let mut options = RunOptions::default();
//!     // Someone reviewed these plan bytes (`acode-run preview`): record the approval in the
//!     // database and PLAN.approval, signed with ACODE_APPROVAL_KEY when set, as
//!     // `acode-run approve` does. Leave it out for a plan approved beforehand.
//!     options.approve = Some(DecisionRequest {
//!         status: AuthStatus::Approved,
//!         by: Some("alice".into()),
//!         reason: Some("reviewed the preview".into()),
//!         may_override: false,
//!         key: approval_key()?,
//!         ssh: Default::default(),
//!     });
//!     let result = PlanRunner::prepare("/path/to/workspace".as_ref(), "plan.json".as_ref(), options)?
//!         .run()?;
//!     std::process::exit(result.exit_code); // the exit code the CLI would use (SPEC §10)
//! }
//! ```
//!
//! The lower layers ([`plan::load`], [`ApprovedPlan`], [`Executor`]) stay public for tools that
//! need them; they do not protect anything by themselves.

#![warn(missing_docs)]

pub mod attest;
pub mod cli;
pub mod error;
pub mod events;
pub mod executor;
pub mod import;
pub mod input;
pub mod llm;
pub mod mcp;
pub mod net;
pub mod plan;
pub mod policy;
pub mod preview;
pub mod process;
pub mod redact;
pub mod report;
pub mod runner;
pub mod sandbox;
pub mod stages;
pub mod store;
pub mod suggest;
pub mod terminal;
/// Test-only: named skips and named missing tools (the `testing` feature).
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod tools;
pub mod util;
pub mod workspace;

pub use error::{ErrorKind, ExitCode, exit};

/// The README's Rust examples, compiled by `cargo test --doc` so the ones a newcomer copies build.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
pub use executor::{ExecutionError, ExecutionResult, Executor};
pub use plan::{ApprovedPlan, Plan, PlanAuthorization};
