//! The sandbox's promises, by name, and which of them a mode holds on this machine: the run header,
//! `preview`, the JUnit properties and the GitHub summary list the ones not held after naming the
//! mode and why `auto` chose it (issue 32, item 4), so a person reading a CI log knows what the
//! commands could do without reading `docs/security.md`; `acode-run doctor` lists every one, and
//! `doctor --require` / `run --require` fail closed (exit 39) when a named one does not hold
//! (issue 45).
//!
//! The promise, from SPEC §6 ("One view in every mode"): a command sees the system, the workspace
//! and its own program's installation; it never sees a home directory, a credential file or another
//! command's environment, and never writes a repository's `.git`. bwrap holds all of it; the names
//! below split it into what a pipeline can require, and what each other mode still lacks is one
//! sentence per promise. Keep it true: when a mode comes to hold one of these, its gap goes
//! (tests/cli/sandbox/container.rs and tests/cli/sandbox/landlock.rs attack each of them).

use crate::policy::SandboxMode;

/// One promise of docs/security.md a pipeline can require by name (`--require NAME`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Promise {
    /// Commands write only inside the workspace and their own temporary directory; never a `.git`,
    /// `.acode/`, the policy or the plan.
    WritesConfined,
    /// Commands read only the system, the workspace and their program's installation: no home
    /// directory, no credential file.
    ReadsConfined,
    /// Commands cannot read another command's environment, nor the runner's.
    EnvironmentsPrivate,
    /// Commands reach no host but those the policy allows (through the run's proxy); UDP and raw
    /// sockets are refused.
    NetworkConfined,
    /// Commands see no other process: their own PID namespace.
    ProcessesHidden,
    /// Commands cannot learn that a path outside what they see exists (`stat`).
    PathsHidden,
    /// Commands cannot use device ioctls on devices they open (a terminal's `TIOCSTI`).
    IoctlsConfined,
    /// Commands cannot signal a process outside the command, nor reach an abstract UNIX socket
    /// made outside it.
    SignalsScoped,
}

/// What does not hold without an OS sandbox, for every promise.
const NO_SANDBOX: &str = "no OS sandbox: commands read and write whatever this user can (home \
                          directories and credential files included), reach any host and read \
                          other processes' environments";

impl Promise {
    /// Every promise, in the order `doctor` lists them.
    pub const ALL: [Promise; 8] = [
        Promise::WritesConfined,
        Promise::ReadsConfined,
        Promise::EnvironmentsPrivate,
        Promise::NetworkConfined,
        Promise::ProcessesHidden,
        Promise::PathsHidden,
        Promise::IoctlsConfined,
        Promise::SignalsScoped,
    ];

    /// The name `--require` takes.
    pub fn name(self) -> &'static str {
        match self {
            Promise::WritesConfined => "writes-confined",
            Promise::ReadsConfined => "reads-confined",
            Promise::EnvironmentsPrivate => "environments-private",
            Promise::NetworkConfined => "network-confined",
            Promise::ProcessesHidden => "processes-hidden",
            Promise::PathsHidden => "paths-hidden",
            Promise::IoctlsConfined => "ioctls-confined",
            Promise::SignalsScoped => "signals-scoped",
        }
    }

    /// The promise called `name`.
    pub fn from_name(name: &str) -> Option<Promise> {
        Promise::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Every name, for the message that refuses an unknown one.
    pub fn names() -> String {
        Promise::ALL.map(Promise::name).join(", ")
    }

    /// What it promises, in one sentence.
    pub fn what(self) -> &'static str {
        match self {
            Promise::WritesConfined => {
                "commands write only inside the workspace and their own temporary directory, \
                 never a .git, .acode/, the policy or the plan"
            }
            Promise::ReadsConfined => {
                "commands read only the system, the workspace and their program's installation: \
                 no home directory, no credential file"
            }
            Promise::EnvironmentsPrivate => {
                "commands cannot read another command's environment, nor the runner's"
            }
            Promise::NetworkConfined => {
                "commands reach no host but those the policy allows, through the run's proxy; UDP \
                 and raw sockets are refused"
            }
            Promise::ProcessesHidden => "commands see no other process (their own PID namespace)",
            Promise::PathsHidden => {
                "commands cannot learn that a path outside what they see exists"
            }
            Promise::IoctlsConfined => "commands cannot use device ioctls (a terminal's TIOCSTI)",
            Promise::SignalsScoped => {
                "commands cannot signal a process outside the command, nor reach an abstract UNIX \
                 socket made outside it"
            }
        }
    }

    /// Why the promise does not hold under `mode` with Landlock ABI `landlock_abi` (`None`: none
    /// applied) when the policy allows hosts (`proxy`), or `None` when it holds. (As root too: a
    /// command under Landlock gives up every capability, so a sibling's environment is refused to
    /// root as well.)
    pub fn gap(self, mode: SandboxMode, landlock_abi: Option<u32>, proxy: bool) -> Option<String> {
        match mode {
            SandboxMode::Bwrap | SandboxMode::Auto => None,
            SandboxMode::None => Some(NO_SANDBOX.to_string()),
            SandboxMode::Landlock => self.landlock_gap(landlock_abi.unwrap_or(0), proxy),
        }
    }

    /// What Landlock alone leaves open of this promise at `abi` (docs/security.md, "What Landlock
    /// alone does not hold", and the restrictions an older ABI lacks).
    fn landlock_gap(self, abi: u32, proxy: bool) -> Option<String> {
        let kernel = |s: &str| Some(format!("on this kernel, {s}"));
        match self {
            Promise::ReadsConfined | Promise::EnvironmentsPrivate => None,
            Promise::WritesConfined if abi < 3 => {
                kernel("truncating an existing file anywhere is not restricted (Landlock ABI < 3)")
            }
            Promise::NetworkConfined if abi < 4 => {
                kernel("TCP connect/bind is not restricted (Landlock ABI < 4)")
            }
            Promise::NetworkConfined if proxy => Some(
                "Landlock cannot name hosts: a command may open TCP connections to the run's \
                 proxy port on any host (bwrap is exact)"
                    .to_string(),
            ),
            Promise::ProcessesHidden => Some(
                "the host's processes are visible in /proc (their command lines, not their \
                 environment or memory)"
                    .to_string(),
            ),
            Promise::PathsHidden => {
                Some("any path can be stat'ed (names and sizes, not contents)".to_string())
            }
            Promise::IoctlsConfined if abi < 5 => {
                kernel("device ioctls are not restricted (Landlock ABI < 5)")
            }
            Promise::SignalsScoped if abi < 6 => kernel(
                "signals and abstract UNIX sockets outside the command are not scoped (Landlock \
                 ABI < 6)",
            ),
            // Pathname UNIX sockets outside the workspace (Landlock ABI < 9 does not check
            // `connect` by path) are held by the seccomp filter instead: commands under Landlock
            // cannot create UNIX sockets at all (`process::seccomp::Kind::Landlock`); UDP and raw
            // sockets are the filter's too, on every ABI.
            _ => None,
        }
    }
}

impl std::fmt::Display for Promise {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Promise {
    type Err = String;

    /// A name `--require` takes; anything else is refused naming every valid one.
    fn from_str(s: &str) -> Result<Self, String> {
        Promise::from_name(s).ok_or_else(|| {
            format!(
                "unknown sandbox promise {s:?}{} (the promises: {})",
                crate::suggest::did_you_mean_as(s, Promise::ALL.map(Promise::name), str::to_string),
                Promise::names()
            )
        })
    }
}

/// The promises `mode` does not hold with Landlock ABI `landlock_abi` (`None`: none applied) when
/// the policy allows hosts (`proxy`), as sentences, each once. Empty when every promise holds.
pub fn not_held(mode: SandboxMode, landlock_abi: Option<u32>, proxy: bool) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in Promise::ALL {
        if let Some(gap) = p.gap(mode, landlock_abi, proxy)
            && !out.contains(&gap)
        {
            out.push(gap);
        }
    }
    out
}

/// The promises of `required` that `mode` does not hold here, each with why.
pub fn unmet(
    required: &[Promise],
    mode: SandboxMode,
    landlock_abi: Option<u32>,
    proxy: bool,
) -> Vec<(Promise, String)> {
    required
        .iter()
        .filter_map(|p| p.gap(mode, landlock_abi, proxy).map(|g| (*p, g)))
        .collect()
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
        let landlock = not_held(SandboxMode::Landlock, Some(9), false);
        assert!(
            !landlock.iter().any(|l| l.contains("credential")),
            "{landlock:?}"
        );
        assert_eq!(landlock.len(), 2, "{landlock:?}");
        // An old kernel's gaps are listed too.
        let old = not_held(SandboxMode::Landlock, Some(3), false);
        assert!(
            old.iter().any(|l| l.contains("TCP connect/bind")),
            "{old:?}"
        );
        // Landlock cannot name hosts: with a proxy, any host's proxy port is reachable.
        let proxied = not_held(SandboxMode::Landlock, Some(9), true);
        assert!(
            proxied.iter().any(|l| l.contains("proxy port")),
            "{proxied:?}"
        );
    }

    #[test]
    fn each_promise_has_one_name_and_unknown_names_list_the_valid_ones() {
        for p in Promise::ALL {
            assert_eq!(p.name().parse::<Promise>(), Ok(p));
        }
        let e = "reads-confinde".parse::<Promise>().unwrap_err();
        assert!(e.contains("did you mean reads-confined?"), "{e}");
        assert!(e.contains(&Promise::names()), "{e}");
    }

    #[test]
    fn unmet_names_each_required_promise_the_mode_lacks() {
        let need = [Promise::ReadsConfined, Promise::ProcessesHidden];
        assert!(unmet(&need, SandboxMode::Bwrap, Some(7), false).is_empty());
        let gaps = unmet(&need, SandboxMode::Landlock, Some(7), false);
        assert_eq!(
            gaps.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
            [Promise::ProcessesHidden]
        );
        assert_eq!(unmet(&need, SandboxMode::None, None, false).len(), 2);
    }
}
