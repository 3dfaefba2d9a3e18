//! What is discovered on the host, as opposed to what a policy file states (the rest of
//! [`crate::policy`]) and the credentials kept out of commands ([`crate::policy::credentials`]):
//! where the system, the runner's home and its toolchains are ([`dirs`]), which program a command
//! name runs there, a pyenv shim's interpreter included ([`program`]), and which registry hosts the
//! package clients are configured to use ([`registries`]).
//!
//! Finding some of it means running the host's own programs (`pyenv which`, `npm config get
//! registry`, `pip config list`): each runs through [`crate::process::helper::run_helper`], with a
//! deadline, so a client that hangs cannot hang a run.

pub mod dirs;
pub mod program;
pub mod registries;
