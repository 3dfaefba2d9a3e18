//! Where the host keeps things a command may need to see: its system directories, the runner's
//! home, and the runner's toolchain homes (`CARGO_HOME`, `RUSTUP_HOME`). Read from the runner's
//! environment and filesystem; what a sandbox makes of them is [`crate::policy::view`].

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Host directories that hold programs and libraries. bwrap mounts them read-only (or recreates
/// them as the same symlinks, usr-merge); Landlock grants reading and executing beneath them.
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
];

/// Whether every sandbox shows `path` already as a system directory.
pub fn is_system(path: &Path) -> bool {
    SYSTEM_DIRS.iter().any(|p| path.starts_with(p))
}

/// The runner's home directory (`HOME`), canonical when it can be, when it is absolute.
pub fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
        .map(|h| std::fs::canonicalize(&h).unwrap_or(h))
}

/// The runner's cargo and rustup homes (`CARGO_HOME`, `RUSTUP_HOME`, else `~/.cargo`,
/// `~/.rustup`) that exist and that it can reach, canonicalised; once per process (the runner's
/// environment does not change during a run). Shown so that `cargo` and the rustup proxies run.
pub fn toolchain_homes() -> &'static [PathBuf] {
    static HOMES: OnceLock<Vec<PathBuf>> = OnceLock::new();
    HOMES.get_or_init(|| {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let pick = |var: &str, dir: &str| {
            std::env::var_os(var)
                .map(PathBuf::from)
                .or_else(|| home.as_ref().map(|h| h.join(dir)))
        };
        let mut out: Vec<PathBuf> = Vec::new();
        for p in [pick("CARGO_HOME", ".cargo"), pick("RUSTUP_HOME", ".rustup")]
            .into_iter()
            .flatten()
            .filter(|p| p.is_absolute())
        {
            if let Ok(c) = p.canonicalize()
                && c.is_dir()
                && !out.contains(&c)
            {
                out.push(c);
            }
        }
        out
    })
}
