//! Which process runs a run. A pid alone is reused by the kernel, so the identity recorded is
//! `<boot id>:<process start time>`: a run is alive only while a process with its pid exists and
//! started at the same moment of the same boot.

/// This process's identity token.
pub fn own_token() -> Option<String> {
    token(std::process::id() as i64)
}

/// The identity token of process `pid`, if it exists and `/proc` can tell.
fn token(pid: i64) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 2 (comm) is in parentheses and may hold spaces: count fields after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` starts with field 3 (state); start time is field 22.
    let start = rest.split_whitespace().nth(22 - 3)?;
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    Some(format!("{}:{start}", boot.trim()))
}

/// Whether the process recorded as `pid` with identity `recorded` still runs. Without a recorded
/// token (rows from before schema 4, or no `/proc`), falls back to "a live process named
/// acode-run has that pid".
pub fn alive(pid: Option<i64>, recorded: Option<&str>) -> bool {
    let Some(pid) = pid.filter(|p| *p > 0) else {
        return false;
    };
    match recorded {
        Some(recorded) => token(pid).as_deref() == Some(recorded),
        None => std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map(|comm| comm.trim() == "acode-run")
            .unwrap_or(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_reused_pid_is_not() {
        let me = std::process::id() as i64;
        let t = own_token();
        assert!(t.is_some(), "/proc is mounted here");
        assert!(alive(Some(me), t.as_deref()));
        // Same pid, another start time: pid reuse.
        assert!(!alive(Some(me), Some("other-boot:1")));
        // A process that has exited.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i64;
        let tok = token(pid);
        child.wait().unwrap();
        assert!(!alive(Some(pid), tok.as_deref()));
        assert!(!alive(None, None));
    }
}
