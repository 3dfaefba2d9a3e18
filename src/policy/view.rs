//! What a command may see: one decision, from which every OS sandbox mode builds its rules (issue
//! #32). bubblewrap turns it into read-only mounts ([`crate::sandbox::bwrap`]); Landlock into read grants
//! ([`crate::sandbox::landlock`]). So the sentence in `docs/security.md` holds in both: *a command sees the
//! system, the workspace and its own program's installation; it never sees a home directory, a
//! credential file or another command's environment, and never writes a repository's `.git`.*
//!
//! What is visible, read-only unless said otherwise:
//! - the **system directories** ([`SYSTEM_DIRS`](crate::policy::host::dirs::SYSTEM_DIRS): `/usr`, the usr-merge directories, `/etc`);
//! - `/proc`, and the **device nodes** programs use ([`DEVICES`]; never a disk, never `/dev/shm`);
//! - the **workspace** (writable except its protected paths) and the command's **temporary
//!   directory** (writable);
//! - the runner's **toolchain homes** ([`toolchain_homes`]: `CARGO_HOME`, `RUSTUP_HOME`);
//! - the **installation of the program** a command runs, as [`crate::policy::host::program`] resolves it (a
//!   virtualenv and its base interpreter, a pyenv version, an nvm node, the `node_modules` tree
//!   of a Node program, `PREFIX` of `PREFIX/bin/prog`), and the policy's `read_paths`;
//! - minus every **credential file or directory** ([`credential_paths`]) inside any of those.
//!
//! Nothing of `/home`, `/root`, `/run`, `/var`, `/srv`, `/opt`, `/mnt` or the host's `/tmp` is
//! visible unless one of the entries above lies there (a toolchain home in `/root`, say: then only
//! that home, minus its credentials).

use std::path::PathBuf;

use crate::policy::credentials::credential_paths;
use crate::policy::host::dirs::{home, toolchain_homes};

/// Device nodes a command may open, and whether it may also write them. bwrap's `--dev` makes the
/// same set in a fresh `/dev`; under Landlock these are the only nodes of the host's `/dev` that
/// can be opened (a disk such as `/dev/vda`, readable by root, would expose every file).
pub const DEVICES: &[(&str, bool)] = &[
    ("/dev/null", true),
    ("/dev/zero", true),
    ("/dev/full", true),
    ("/dev/random", false),
    ("/dev/urandom", false),
    ("/dev/tty", true),
    ("/dev/ptmx", true),
    ("/dev/pts", true),
];

/// The host directories a command of this run may read beyond the system directories, `/proc`,
/// the devices and the workspace: the toolchain homes, the policy's `read_paths` (absolute ones;
/// a relative path has nothing to be relative to), and the program's installation. Duplicates
/// and entries inside another entry are dropped.
pub fn shown(read_paths: &[PathBuf], program_roots: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for p in toolchain_homes()
        .iter()
        .chain(read_paths)
        .chain(program_roots)
        .filter(|p| p.is_absolute())
    {
        if out.iter().any(|o| p.starts_with(o)) {
            continue;
        }
        out.retain(|o| !o.starts_with(p));
        out.push(p.clone());
    }
    out
}

/// The credential paths ([`credential_paths`]) that exist inside (or are) one of `shown`: what a
/// sandbox must hide — bwrap by mounting an empty directory or `/dev/null` over them, Landlock by
/// granting around them.
pub fn hidden_within(shown: &[PathBuf]) -> Vec<PathBuf> {
    credential_paths(home())
        .into_iter()
        .filter(|c| shown.iter().any(|d| c.starts_with(d)))
        .filter(|c| std::fs::symlink_metadata(c).is_ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::host::dirs::is_system;
    use std::path::Path;

    #[test]
    fn entries_inside_another_are_dropped_and_relative_ones_ignored() {
        let a = PathBuf::from("/opt/acode-view-test");
        let shown = shown(
            &[a.join("sub"), PathBuf::from("relative"), a.clone()],
            &[a.join("bin"), PathBuf::from("/srv/acode-view-other")],
        );
        assert!(shown.contains(&a));
        assert!(!shown.iter().any(|p| p.starts_with(&a) && *p != a));
        assert!(!shown.iter().any(|p| p.is_relative()));
        assert!(shown.contains(&PathBuf::from("/srv/acode-view-other")));
    }

    #[test]
    fn credentials_are_hidden_only_inside_what_is_shown_and_only_when_they_exist() {
        let Some(home) = home() else { return };
        let ssh = home.join(".ssh");
        let shown_home = vec![home.clone()];
        let hidden = hidden_within(&shown_home);
        assert_eq!(hidden.contains(&ssh), ssh.exists(), "{hidden:?}");
        assert!(hidden_within(&[PathBuf::from("/usr")]).is_empty());
        assert!(is_system(Path::new("/usr/bin/true")));
        assert!(!is_system(&home));
    }
}
