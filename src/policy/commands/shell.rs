//! Command strings: split without a shell (POSIX quoting), and refused where their author evidently
//! expected one (see the parent module's docs).

use thiserror::Error;

use crate::workspace::SandboxViolation;

/// A command string that cannot be turned into an argv.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum CommandError {
    /// Nothing to run.
    #[error("empty command")]
    Empty,
    /// `shlex` could not split it: an unbalanced quote or a trailing backslash.
    #[error("cannot split command (unbalanced quotes or trailing backslash): {0:?}")]
    Unbalanced(String),
}

/// Splits a command line into words with POSIX shell quoting rules, without any expansion.
///
/// Why a separate function: the plan validator and the tool must split identically.
pub fn split_command(cmd: &str) -> Result<Vec<String>, CommandError> {
    if cmd.contains('\0') {
        // shlex would keep the NUL inside a word; report it as unsplittable rather than let it
        // reach `check_argv` disguised.
        return Err(CommandError::Unbalanced(cmd.to_string()));
    }
    let words = shlex::split(cmd).ok_or_else(|| CommandError::Unbalanced(cmd.to_string()))?;
    if words.is_empty() {
        return Err(CommandError::Empty);
    }
    Ok(words)
}

/// Characters a shell treats as operators when they are not quoted.
const OPERATOR_CHARS: &[char] = &[';', '&', '|', '<', '>'];

/// Refuses a `command` string that only makes sense to a shell (see the module docs); quoted
/// words are data and pass.
///
/// Why on the raw line rather than on the split words: splitting forgets which characters were
/// quoted (`'a|b'` and `a|b` give the same word) and treats an unquoted newline as plain space, yet
/// `echo a\ntouch x` means two commands to its author.
pub fn check_command_line(cmd: &str) -> Result<(), SandboxViolation> {
    if cmd.contains('\0') {
        return Err(SandboxViolation::new(cmd, "NUL byte in the command"));
    }
    let mut chars = cmd.chars().peekable();
    // The unquoted text of the current word, and whether it had any quoted part.
    let mut word = String::new();
    let mut quoted = false;
    let mut found: Option<String> = None;
    let finish = |word: &mut String, quoted: &mut bool, found: &mut Option<String>| {
        if found.is_none() && !*quoted && !word.is_empty() && word.contains(OPERATOR_CHARS) {
            *found = Some(word.clone());
        }
        word.clear();
        *quoted = false;
    };
    let mut in_single = false;
    let mut in_double = false;
    while let Some(c) = chars.next() {
        if in_single {
            if c == '\'' {
                in_single = false;
            }
            continue;
        }
        if in_double {
            match c {
                '"' => in_double = false,
                '\\' => {
                    chars.next();
                }
                // Inside double quotes a shell still substitutes commands.
                '`' => return Err(not_a_shell(cmd, "`", "a backtick command substitution")),
                '$' if chars.peek() == Some(&'(') => {
                    return Err(not_a_shell(cmd, "$(", "a $(...) command substitution"));
                }
                _ => {}
            }
            continue;
        }
        match c {
            '\'' => {
                in_single = true;
                quoted = true;
            }
            '"' => {
                in_double = true;
                quoted = true;
            }
            '\\' => {
                // An escaped character is quoted; an escaped newline joins lines.
                chars.next();
                quoted = true;
            }
            '`' => return Err(not_a_shell(cmd, "`", "a backtick command substitution")),
            '$' if chars.peek() == Some(&'(') => {
                return Err(not_a_shell(cmd, "$(", "a $(...) command substitution"));
            }
            '\n' | '\r' => {
                return Err(not_a_shell(
                    cmd,
                    "a line break",
                    "an unquoted line break (a shell would start a second command)",
                ));
            }
            ' ' | '\t' => finish(&mut word, &mut quoted, &mut found),
            other => word.push(other),
        }
    }
    finish(&mut word, &mut quoted, &mut found);
    match found {
        Some(w) => {
            let what = if w
                .chars()
                .all(|c| OPERATOR_CHARS.contains(&c) || c.is_ascii_digit())
            {
                format!("the shell operator {w:?}")
            } else {
                format!("the unquoted shell operator character in {w:?}")
            };
            Err(not_a_shell(cmd, &w, &what))
        }
        None => Ok(()),
    }
}

/// The violation for a command string that expected a shell, with the `argv` form to use instead.
fn not_a_shell(cmd: &str, token: &str, what: &str) -> SandboxViolation {
    let argv = shlex::split(cmd)
        .filter(|w| !w.is_empty())
        .map(|w| serde_json::to_string(&w).unwrap_or_default())
        .unwrap_or_default();
    SandboxViolation::new(
        cmd,
        format!(
            "{what}: this command is not run by a shell, so {token:?} would not do what a shell \
             does. To pass it to the program as data, quote it or give \"argv\": {argv}; to chain \
             programs, pipe or redirect, use separate steps (file_write for output files)"
        ),
    )
}
