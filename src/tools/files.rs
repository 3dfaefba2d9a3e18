//! Placeholder; filled in by the file-tools work.

use super::ToolRegistry;

/// Registers this module's tools.
pub fn register(_r: &mut ToolRegistry) {}
