//! What the command line tells a person to do next, written so that it works when pasted: the
//! workspace a refusal depended on, and the options (`--workspace`, `--policy`, `--db`) that made
//! an answer right, carried into every printed next step (issue #34 items 9 and 10).

use std::path::Path;

use super::flags::{Args, Command};

/// `s` as one shell word: unchanged when it holds only safe characters, else single-quoted.
pub(super) fn shell_word(s: &str) -> String {
    let safe = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if safe {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// For a refusal of a command that works in a workspace: which workspace it used and how it was
/// chosen, which policy it read, and — when the plan lives elsewhere beside a policy this run did
/// not read — the command again with `--workspace` (`None` for commands without a workspace).
pub(super) fn workspace_note(args: &Args) -> Option<String> {
    if !matches!(
        args.command,
        Command::Run | Command::Validate | Command::Preview | Command::Approve | Command::Reject
    ) {
        return None;
    }
    let dir = args
        .workspace
        .clone()
        .unwrap_or_else(|| std::path::PathBuf::from("."));
    let root = dir.canonicalize().ok()?;
    let how = if args.workspace.is_some() {
        "given with --workspace"
    } else {
        "the current directory; --workspace DIR chooses another"
    };
    let policy = match &args.policy {
        Some(p) => format!("policy {}", p.display()),
        None if root.join(crate::sandbox::paths::POLICY_FILE_NAME).is_file() => format!(
            "policy {}",
            root.join(crate::sandbox::paths::POLICY_FILE_NAME).display()
        ),
        None => format!(
            "no {} there: the default policy",
            crate::sandbox::paths::POLICY_FILE_NAME
        ),
    };
    let mut note = format!("  workspace: {} ({how}); {policy}", root.display());
    let plan = args.positionals.first().map(Path::new);
    if let Some(plan) = plan
        && args.workspace.is_none()
        && args.policy.is_none()
    {
        let beside = plan.parent().filter(|p| !p.as_os_str().is_empty());
        if let Some(beside) = beside
            && beside.canonicalize().is_ok_and(|d| d != root)
            && beside
                .join(crate::sandbox::paths::POLICY_FILE_NAME)
                .is_file()
        {
            let again: Vec<String> = std::env::args().skip(1).map(|a| shell_word(&a)).collect();
            note.push_str(&format!(
                "\n  hint: {} sits beside the plan and was not read (the workspace is the current \
                 directory, not the plan's); to run in the plan's directory: acode-run {} \
                 --workspace {}",
                beside
                    .join(crate::sandbox::paths::POLICY_FILE_NAME)
                    .display(),
                again.join(" "),
                shell_word(&beside.to_string_lossy())
            ));
        }
    }
    Some(note)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        assert_eq!(shell_word("j1/plan.json"), "j1/plan.json");
        assert_eq!(shell_word("my plan.json"), "'my plan.json'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
    }
}
