//! acode-run: a sandboxed, auditable runner for approved agentic-coding plans.
//!
//! The crate is organised the way a run flows: a [`plan`] is loaded, validated and authorized; the
//! [`executor`] walks its steps, asking [`tools`] to act inside the [`sandbox`]; every call is recorded
//! in the [`store`] and reported through [`events`]. Agentic steps get their tool calls from an [`llm`].

pub mod cli;
pub mod error;
pub mod events;
pub mod executor;
pub mod llm;
pub mod plan;
pub mod sandbox;
pub mod store;
pub mod tools;

pub use error::{ErrorKind, exit};
pub use executor::{ExecutionError, ExecutionResult, Executor};
pub use plan::{ApprovedPlan, Plan, PlanAuthorization};
