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

/// The options that chose where a command looked, as words to repeat in a next step: the
/// workspace, the policy file (`policy` when given, else the user's `--policy`) and the database
/// when given (paths as the user gave them).
pub(super) fn carried_options(args: &Args, policy: Option<&Path>) -> String {
    let mut out = String::new();
    let policy = policy.or(args.policy.as_deref());
    for (flag, value) in [
        ("--workspace", args.workspace.as_deref()),
        ("--policy", policy),
        ("--db", args.db.as_deref()),
    ] {
        if let Some(v) = value {
            out.push_str(&format!(" {flag} {}", shell_word(&v.to_string_lossy())));
        }
    }
    out
}

/// `acode-run COMMAND PLAN` with the options that chose the workspace, policy and database.
pub(super) fn next_step(args: &Args, command: &str, plan: &Path, policy: Option<&Path>) -> String {
    format!(
        "acode-run {command} {}{}",
        shell_word(&plan.to_string_lossy()),
        carried_options(args, policy)
    )
}

/// `message` with the options that chose the workspace, policy and database inserted after every
/// `acode-run COMMAND ARG` it prints as a next step (approve, preview, run, resume, …), so the
/// step works when pasted.
pub(super) fn carry(args: &Args, message: &str) -> String {
    const COMMANDS: &[&str] = &[
        "approve", "preview", "run", "resume", "validate", "reject", "show",
    ];
    let options = carried_options(args, None);
    if options.is_empty() {
        return message.to_string();
    }
    let mut out = String::with_capacity(message.len() + options.len());
    let mut rest = message;
    while let Some(at) = rest.find("acode-run ") {
        let (before, from) = rest.split_at(at + "acode-run ".len());
        out.push_str(before);
        rest = from;
        let word_end = |s: &str| {
            s.find(|c: char| c.is_whitespace() || "`),;'\"".contains(c))
                .unwrap_or(s.len())
        };
        let command = &rest[..word_end(rest)];
        if !COMMANDS.contains(&command) {
            continue;
        }
        let after = &rest[command.len()..];
        let Some(arg) = after.strip_prefix(' ') else {
            continue;
        };
        let arg_len = word_end(arg);
        if arg_len == 0 || arg.starts_with('-') || arg[arg_len..].contains(options.trim_start()) {
            continue;
        }
        let end = command.len() + 1 + arg_len;
        out.push_str(&rest[..end]);
        out.push_str(&options);
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
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
        None if root.join(crate::workspace::POLICY_FILE_NAME).is_file() => format!(
            "policy {}",
            root.join(crate::workspace::POLICY_FILE_NAME).display()
        ),
        None => format!(
            "no {} there: the default policy",
            crate::workspace::POLICY_FILE_NAME
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
            && beside.join(crate::workspace::POLICY_FILE_NAME).is_file()
        {
            let again: Vec<String> = std::env::args().skip(1).map(|a| shell_word(&a)).collect();
            note.push_str(&format!(
                "\n  hint: {} sits beside the plan and was not read (the workspace is the current \
                 directory, not the plan's); to run in the plan's directory: acode-run {} \
                 --workspace {}",
                beside.join(crate::workspace::POLICY_FILE_NAME).display(),
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

    #[test]
    fn next_steps_in_a_message_carry_the_options() {
        let mut args = Args::default();
        let msg = "p.json: not authorized\n  review the plan, then approve it with: acode-run approve p.json";
        assert_eq!(carry(&args, msg), msg);
        args.workspace = Some("my ws".into());
        args.policy = Some("pol.json".into());
        assert_eq!(
            carry(&args, msg),
            "p.json: not authorized\n  review the plan, then approve it with: acode-run approve \
             p.json --workspace 'my ws' --policy pol.json"
        );
        let resume =
            "continue with: acode-run resume RID --rerun-interrupted (see `acode-run show`)";
        assert_eq!(
            carry(&args, resume),
            "continue with: acode-run resume RID --workspace 'my ws' --policy pol.json \
             --rerun-interrupted (see `acode-run show`)"
        );
    }
}
