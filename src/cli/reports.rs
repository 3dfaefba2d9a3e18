//! Writing a finished run's CI reports (`--junit`, GitHub annotations and job summary).
//!
//! A report that cannot be written is a warning, not a change of exit code: the run's outcome is
//! already recorded, and a CI job should fail for the plan's reasons, not for a full summary file.

use std::io::Write;

use super::flags::{Annotations, Args};
use crate::executor::ExecutionResult;
use crate::report::{ArtifactSource, github, junit};
use crate::sandbox::Redactor;

/// Whether GitHub annotations are wanted: `--annotations`, else `GITHUB_ACTIONS=true`.
fn wants_github(args: &Args) -> bool {
    match args.annotations {
        Some(a) => a == Annotations::Github,
        None => std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true"),
    }
}

/// Whether this command needs every step's result after the run (`--json`, a JUnit file, GitHub
/// annotations); without them the executor drops each result once it is recorded, so a long
/// plan's memory stays flat.
pub(super) fn needs_step_results(args: &Args) -> bool {
    args.json || args.junit.is_some() || wants_github(args)
}

/// Writes every report the flags and environment ask for.
pub(super) fn write(
    args: &Args,
    result: &ExecutionResult,
    source: &dyn ArtifactSource,
    redactor: &Redactor,
) {
    if let Some(path) = &args.junit {
        let xml = junit::render(result, source, redactor);
        if let Err(e) = std::fs::write(path, xml) {
            eprintln!(
                "acode-run: warning: cannot write the JUnit report {}: {e}",
                path.display()
            );
        }
    }
    if wants_github(args) {
        let lines = github::annotations(result, source, redactor);
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(lines.as_bytes());
        let _ = err.flush();
        if let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty()) {
            let appended = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(&path)
                .and_then(|mut f| f.write_all(github::summary(result, redactor).as_bytes()));
            if let Err(e) = appended {
                eprintln!(
                    "acode-run: warning: cannot append the job summary to {}: {e}",
                    std::path::Path::new(&path).display()
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::cli::flags::{Parsed, parse};

    /// Every `acode-run` command line in the CI recipes of `docs/ci.md` parses with the real flag
    /// parser, so the recipes cannot drift from the binary.
    #[test]
    fn every_command_in_the_ci_recipes_parses() {
        let doc = include_str!("../../docs/ci.md");
        let mut in_yaml = false;
        let mut seen = 0;
        for line in doc.lines() {
            if line.starts_with("```") {
                in_yaml = line == "```yaml";
                continue;
            }
            if !in_yaml {
                continue;
            }
            let Some(at) = line.find("acode-run ") else {
                continue;
            };
            let command = &line[at..];
            let command = command.split(" > ").next().unwrap_or(command);
            let words = shlex::split(command).expect("balanced quotes");
            match parse(words.iter().skip(1)) {
                Ok(Parsed::Run(_)) => seen += 1,
                other => panic!("{command:?} does not parse: {other:?}"),
            }
        }
        assert!(seen >= 3, "found only {seen} command lines in docs/ci.md");
    }
}
