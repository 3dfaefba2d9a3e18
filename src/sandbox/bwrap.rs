//! Placeholder until the bubblewrap work lands (branch `cmd`).

use std::path::PathBuf;

use super::SandboxMode;

/// Resolves the sandbox mode to a bubblewrap binary (placeholder: never available).
pub fn resolve(mode: SandboxMode) -> Result<Option<PathBuf>, String> {
    match mode {
        SandboxMode::Bwrap => Err("bubblewrap support is not built in yet".to_string()),
        _ => Ok(None),
    }
}
