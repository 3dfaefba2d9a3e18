//! Network enforcement (SPEC §6): the proxy a run starts for its commands, the forwarder that
//! carries connections out of a bwrap network namespace, the runner's own HTTP agent (with its
//! pinned TLS roots).
//! What is allowed is decided by the rules in [`crate::policy::network`]; this module only
//! enforces it.

pub mod agent;
pub mod forward;
mod pinned_tls;
pub mod proxy;
