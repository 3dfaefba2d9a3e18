//! The sandbox holds: path escapes, the OS sandboxes (bubblewrap, Landlock, the supervisor)
//! attacked for real, programs and git that stay themselves, credentials that stay hidden, the
//! network by name and registry mirrors, and the containment suite in a real container.

mod bwrap_attacks;
pub(crate) mod container;
mod credentials;
mod escape;
mod fallback;
mod git_attacks;
mod git_credentials;
pub(crate) mod landlock;
mod mirrors;
mod network;
mod node;
mod programs;
mod race;
mod supervisor;
