//! Everything that keeps tools inside the lines: paths, commands, environment, the OS sandbox and
//! secret redaction. Tools call into this module; they never make their own sandbox decisions.

pub mod bwrap;
pub mod commands;
pub mod config_secrets;
pub mod env;
pub mod fs;
pub mod glob;
pub mod guard;
pub mod input;
pub mod landlock;
pub mod nested_git;
pub mod network;
pub mod os;
pub mod paths;
pub mod policy;
pub mod process;
pub mod program;
pub mod promises;
pub mod redact;
pub mod seccomp;
pub mod spawn;
pub mod state;
pub mod supervisor;
pub mod view;

pub use os::{CommandLimits, OsSandbox, SandboxSetupError};
pub use paths::{Access, SandboxViolation, Workspace};
pub use policy::{Limits, Policy, SandboxMode};
pub use redact::Redactor;
