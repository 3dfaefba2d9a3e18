//! Which promises of the sandbox a mode does not hold on this machine, one sentence each: the run
//! header, `preview`, the JUnit properties and the GitHub summary list them after naming the mode
//! and why `auto` chose it (issue 32, item 4), so a person reading a CI log knows what the commands
//! could do without reading `docs/security.md`.
//!
//! The promise, from SPEC §6 ("One view in every mode"): a command sees the system, the workspace
//! and its own program's installation; it never sees a home directory, a credential file or another
//! command's environment, and never writes a repository's `.git`. bwrap holds it; this list is
//! what the other modes still lack. Keep it true: when a mode comes to hold one of these, its line
//! goes (tests/cli/container.rs and tests/cli/landlock.rs attack each of them).

use super::landlock;
use super::policy::SandboxMode;

/// The promises `mode` does not hold with Landlock ABI `landlock_abi` (`None`: none applied), as
/// sentences; `root` is whether acode-run runs as root. Empty when every promise holds.
pub fn not_held(mode: SandboxMode, landlock_abi: Option<u32>, root: bool) -> Vec<String> {
    match mode {
        SandboxMode::Bwrap | SandboxMode::Auto => Vec::new(),
        SandboxMode::None => vec![
            "none of the sandbox's promises: commands read and write whatever this user can \
             (home directories and credential files included), reach any host and read other \
             processes' environments"
                .to_string(),
        ],
        SandboxMode::Landlock => {
            let mut out = vec![
                "reads are not restricted: a command can read home directories and credential \
                 files (~/.ssh, ~/.aws, ~/.netrc, ~/.git-credentials, ~/.docker, ~/.config/gh)"
                    .to_string(),
                "a nested repository's .git (below the workspace's root: vendored repositories, \
                 submodules) is writable"
                    .to_string(),
            ];
            if root {
                out.push(
                    "as root, a command can read a concurrent command's environment \
                     (/proc/PID/environ; --jobs 1 avoids it)"
                        .to_string(),
                );
            }
            out.extend(
                landlock::missing_restrictions(landlock_abi.unwrap_or(0))
                    .into_iter()
                    .map(|m| format!("on this kernel, {m}")),
            );
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bwrap_holds_every_promise_and_the_others_say_what_they_lack() {
        assert!(not_held(SandboxMode::Bwrap, Some(7), true).is_empty());
        let none = not_held(SandboxMode::None, None, false);
        assert_eq!(none.len(), 1);
        assert!(none[0].contains("credential files"), "{none:?}");
        let user = not_held(SandboxMode::Landlock, Some(9), false);
        let root = not_held(SandboxMode::Landlock, Some(9), true);
        assert!(root.iter().any(|l| l.contains("/proc/PID/environ")));
        assert!(!user.iter().any(|l| l.contains("/proc/PID/environ")));
        // An old kernel's gaps are listed too.
        let old = not_held(SandboxMode::Landlock, Some(3), false);
        assert!(
            old.iter().any(|l| l.contains("TCP connect/bind")),
            "{old:?}"
        );
    }
}
