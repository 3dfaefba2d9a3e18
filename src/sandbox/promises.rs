//! Which promises of the sandbox a mode does not hold on this machine, one sentence each: the run
//! header, `preview`, the JUnit properties and the GitHub summary list them after naming the mode
//! and why `auto` chose it (issue 32, item 4), so a person reading a CI log knows what the commands
//! could do without reading `docs/security.md`.
//!
//! The promise, from SPEC §6 ("One view in every mode"): a command sees the system, the workspace
//! and its own program's installation; it never sees a home directory, a credential file or another
//! command's environment, and never writes a repository's `.git`. bwrap holds it; this list is
//! what the other modes still lack. Keep it true: when a mode comes to hold one of these, its line
//! goes (tests/cli/sandbox/container.rs and tests/cli/sandbox/landlock.rs attack each of them).

use crate::policy::SandboxMode;
use crate::sandbox::landlock;

/// The promises `mode` does not hold with Landlock ABI `landlock_abi` (`None`: none applied), as
/// sentences. Empty when every promise holds. (As root too: a command under Landlock gives up
/// every capability, so a sibling's environment is refused to root as well.)
pub fn not_held(mode: SandboxMode, landlock_abi: Option<u32>) -> Vec<String> {
    match mode {
        SandboxMode::Bwrap | SandboxMode::Auto => Vec::new(),
        SandboxMode::None => vec![
            "none of the sandbox's promises: commands read and write whatever this user can \
             (home directories and credential files included), reach any host and read other \
             processes' environments"
                .to_string(),
        ],
        SandboxMode::Landlock => {
            // What Landlock alone leaves visible that bwrap's namespaces hide (docs/security.md,
            // "What Landlock alone does not hold"): nothing of the promise's own words, but a
            // reader comparing the modes should know it.
            let mut out = vec![
                "the host's processes are visible in /proc (their command lines, not their \
                 environment or memory), and any path can be stat'ed (names and sizes, not \
                 contents)"
                    .to_string(),
            ];
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
        assert!(not_held(SandboxMode::Bwrap, Some(7)).is_empty());
        let none = not_held(SandboxMode::None, None);
        assert_eq!(none.len(), 1);
        assert!(none[0].contains("credential files"), "{none:?}");
        let landlock = not_held(SandboxMode::Landlock, Some(9));
        assert!(
            !landlock.iter().any(|l| l.contains("credential")),
            "{landlock:?}"
        );
        // An old kernel's gaps are listed too.
        let old = not_held(SandboxMode::Landlock, Some(3));
        assert!(
            old.iter().any(|l| l.contains("TCP connect/bind")),
            "{old:?}"
        );
    }
}
