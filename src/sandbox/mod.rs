//! OS confinement of commands: the bwrap sandbox, Landlock rulesets, and what each mode holds
//! ([`promises`]), put together by [`os::OsSandbox`] from the policy's rules
//! ([`crate::policy`]) and the workspace ([`crate::workspace`]), and handed to
//! [`crate::process`] to start. Tools call into this module; they never make their own sandbox
//! decisions.

pub mod bwrap;
pub mod landlock;
pub mod os;
pub mod promises;
pub mod scratch;

pub use os::{CommandLimits, OsSandbox, SandboxSetupError};
