//! acode-run: a sandboxed, auditable runner for approved agentic-coding plans.
//!
//! The crate is organised the way a run flows: a [`plan`] is loaded, validated and authorized; the
//! [`executor`] walks its steps, asking [`tools`] to act inside the [`sandbox`]; every call is recorded
//! in the [`store`] and reported through [`events`]. Agentic steps get their tool calls from an [`llm`].
//!
//! Embedding it:
//!
//! ```no_run
//! use std::sync::Arc;
//! use acode_run::executor::AutoApprove;
//! use acode_run::sandbox::{Policy, Workspace};
//! use acode_run::{plan, store::Store, tools::ToolRegistry, ApprovedPlan, Executor};
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let ws = Workspace::new("/path/to/workspace".as_ref())?;
//!     let (registry, policy) = (ToolRegistry::builtin(), Policy::default());
//!     let ctx = plan::ValidationContext { registry: &registry, workspace: &ws, policy: &policy };
//!     let plan = plan::load("plan.json".as_ref(), &Default::default(), &ctx)?;
//!     let approval = plan::auth::load("plan.json".as_ref(), &plan)?;
//!     let approved = ApprovedPlan::new(plan, approval)?;
//!     let mut executor = Executor::new(ws, Store::open(".acode/executions.db".as_ref())?)
//!         .with_confirmation(Arc::new(AutoApprove));
//!     let result = executor.execute(&approved)?;
//!     std::process::exit(result.exit_code);
//! }
//! ```

#![warn(missing_docs)]

pub mod cli;
pub mod error;
pub mod events;
pub mod executor;
pub mod import;
pub mod llm;
pub mod plan;
pub mod preview;
pub mod report;
pub mod runner;
pub mod sandbox;
pub mod stages;
pub mod store;
pub mod terminal;
pub mod tools;

pub use error::{ErrorKind, ExitCode, exit};
pub use executor::{ExecutionError, ExecutionResult, Executor};
pub use plan::{ApprovedPlan, Plan, PlanAuthorization};
