//! Programs acode-run runs for itself, not for a plan: a package client asked for its configured
//! registry (`npm config get registry`, `pip config list`), `pyenv which` for the interpreter a
//! shim selects, the network forwarder's probe. Each is started like a command ([`run`]): its own
//! process group, stdin `/dev/null`, its output captured and capped, and killed — the whole
//! group — at a deadline, so a client that hangs (a prompt, a network wait) cannot hang a run.
//!
//! Programs that keep this process's terminal instead (the user's editor, `ssh-keygen`, the
//! forwarder's command) are in [`crate::process::foreground`].

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::process::{CommandOutput, CommandSpec, run};

/// Bytes kept of a helper's stdout and of its stderr: a configuration query prints a few lines.
pub const HELPER_OUTPUT_CAP: usize = 1 << 20;

/// Time between SIGTERM and SIGKILL for a helper past its deadline.
const HELPER_KILL_GRACE: Duration = Duration::from_millis(500);

/// The runner's own environment as a helper's (variables whose name or value is not UTF-8 are
/// left out): a package client reads its configuration from it (`npm_config_registry`,
/// `PIP_INDEX_URL`, `HOME`). Never a plan's command's (that is `policy::env::child_env`).
pub fn runner_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

/// Runs the helper `argv` in `cwd` with exactly `env` until it ends or `timeout` passes (see the
/// module docs). `Err` only when it could not be started (not found, bad `cwd`) or reaped; a
/// failure, a timeout (`timed_out`) is an `Ok` whose fields say so.
pub fn run_helper(
    argv: Vec<String>,
    cwd: &Path,
    env: Vec<(String, String)>,
    timeout: Duration,
) -> std::io::Result<CommandOutput> {
    let mut spec = CommandSpec::new(argv, cwd.to_path_buf());
    spec.env = env;
    spec.timeout = timeout;
    spec.output_cap = HELPER_OUTPUT_CAP;
    spec.kill_grace = HELPER_KILL_GRACE;
    spec.heartbeat_every = timeout;
    run(&spec, &AtomicBool::new(false), &|_| {})
}

/// How a helper that did not succeed ended, for an error message: `exit status 1`, `killed by
/// signal 9`, `no answer within 30 s`.
pub fn how_it_failed(out: &CommandOutput, timeout: Duration) -> String {
    if out.timed_out {
        format!("no answer within {} s", timeout.as_secs())
    } else if let Some(code) = out.exit_code {
        format!("exit status {code}")
    } else if let Some(sig) = out.signal {
        format!("killed by signal {sig}")
    } else {
        "ended abnormally".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn sh(script: &str, timeout: Duration) -> CommandOutput {
        run_helper(
            vec!["/bin/sh".into(), "-c".into(), script.into()],
            Path::new("/"),
            runner_env(),
            timeout,
        )
        .unwrap()
    }

    #[test]
    fn a_helper_answers_in_the_runners_environment_and_directory() {
        let out = sh(
            "printf '%s %s' \"$PATH\" \"$(pwd)\"",
            Duration::from_secs(10),
        );
        assert!(out.success(), "{out:?}");
        assert_eq!(
            out.stdout.text,
            format!("{} /", std::env::var("PATH").unwrap_or_default())
        );
    }

    /// A helper that hangs (with a child of its own holding its pipe) is killed at the deadline,
    /// and the failure says so.
    #[test]
    fn a_hanging_helper_is_killed_at_the_deadline() {
        let start = Instant::now();
        let out = sh("sleep 30 & sleep 30", Duration::from_millis(300));
        assert!(out.timed_out && !out.success());
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(
            how_it_failed(&out, Duration::from_secs(30)),
            "no answer within 30 s"
        );
        let out = sh("exit 3", Duration::from_secs(10));
        assert_eq!(
            how_it_failed(&out, Duration::from_secs(10)),
            "exit status 3"
        );
    }

    #[test]
    fn a_helper_that_is_not_there_is_an_error() {
        assert!(
            run_helper(
                vec!["acode-no-such-helper".into()],
                Path::new("/"),
                runner_env(),
                Duration::from_secs(1)
            )
            .is_err()
        );
    }
}
