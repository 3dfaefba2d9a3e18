//! `run_command`: runs one allowlisted program, never through a shell.
//!
//! The command is given as a string (`command`, split with POSIX quoting rules) or as an array
//! (`argv`); exactly one of the two. Every check lives in [`crate::sandbox`]: the argv must pass
//! [`check_argv`], the step's `env` additions [`check_env_additions`], and `cwd` the workspace
//! resolver. `check()` runs all of them without side effects; `run()` runs them again (the
//! arguments may have come from an LLM after validation) and then starts the child with a cleared
//! environment, in its own process group, confined by the run's OS sandbox (bwrap or Landlock, and
//! the resource limits in every mode), with output capped at the policy's `limits.output_bytes`
//! per stream. A command stopped by a resource limit fails with the limit named.
//!
//! A command that runs and exits non-zero is a failed `ToolOutput` with its artifacts, not an
//! `Err`: its output is exactly what the user needs to see.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::args::{parse as args_parse, schema_for};

use super::{Artifact, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry, root_entries};
use crate::error::ErrorKind;
use crate::policy::Policy;
use crate::policy::commands::{check_argv, check_command_line, needs_confirmation, split_command};
use crate::policy::env::{check_env_additions, child_env, harden_for_program};
use crate::policy::host::program;
use crate::policy::host::program::{Program, ProgramError};
use crate::process;
use crate::process::{Captured, CommandOutput, CommandSpec};
use crate::sandbox::CommandLimits;
use crate::workspace::Workspace;

/// The tool's registered name.
pub const NAME: &str = "run_command";

/// Characters of each stream's tail put into the driver-visible `content`.
const CONTENT_TAIL: usize = 3000;

/// Lines, and bytes, of each stream a failure excerpt keeps ([`excerpt`]).
pub const EXCERPT_LINES: usize = 20;
/// See [`EXCERPT_LINES`].
pub const EXCERPT_BYTES: usize = 4096;

/// Registers `run_command`.
pub fn register(r: &mut ToolRegistry) {
    r.register(Arc::new(RunCommand));
}

/// The `run_command` tool (see the module docs).
#[derive(Debug, Clone, Copy, Default)]
pub struct RunCommand;

/// The arguments of `run_command`: the one place their names, types and descriptions are written
/// (the schema the model and the validator see, and the parsing, both come from it).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommandArgs {
    /// The command line, split with POSIX shell quoting (no shell features). The program is a
    /// bare name found on PATH, or a workspace path the policy names (`.venv/bin/python`).
    #[schemars(length(min = 1))]
    pub command: Option<String>,
    /// The program and its arguments, one item each (the program as for `command`).
    #[schemars(length(min = 1))]
    pub argv: Option<Vec<String>>,
    /// Working directory relative to the workspace (default: the workspace root).
    pub cwd: Option<String>,
    /// Extra environment variables for this command.
    pub env: Option<BTreeMap<String, String>>,
    /// Time limit in seconds (default: the step's timeout).
    #[schemars(range(min = 1))]
    pub timeout_s: Option<u64>,
    /// Treat a failure (non-zero exit, timeout) as transient: retried with backoff up to the
    /// step's retries.
    pub retryable: Option<bool>,
}

/// The arguments after parsing and checking.
struct Parsed {
    argv: Vec<String>,
    cwd: PathBuf,
    env: Vec<(String, String)>,
    timeout: Option<Duration>,
    program: Program,
}

/// The argv of a call, from `command` or `argv`. `argv` elements are taken verbatim; a `command`
/// string that only makes sense to a shell (a bare `|`, `&&`, `>`, an unquoted `$(` or line
/// break, ...) is a violation whose message shows the `argv` form (see
/// [`check_command_line`]).
fn parse_argv(args: &Value) -> Result<Vec<String>, ToolError> {
    argv_of(&args_parse::<CommandArgs>(NAME, args)?)
}

/// The argv of parsed arguments (see [`parse_argv`]); `preview` shows the same argv.
pub(crate) fn argv_of(a: &CommandArgs) -> Result<Vec<String>, ToolError> {
    match (&a.command, &a.argv) {
        (Some(cmd), None) => {
            // `cd DIR && …` is the commonest shell habit: name `cwd`, whatever follows it.
            if cmd.split_whitespace().next() == Some("cd") {
                return Err(cd_refused("command"));
            }
            // Shell syntax is a mistake in the plan, not an escape attempt: a usage error (exit
            // 2) whose message shows the `argv` form.
            check_command_line(cmd)
                .map_err(|v| ToolError::invalid(NAME, format!("command: {}", v.reason)))?;
            split_command(cmd).map_err(|e| ToolError::invalid(NAME, format!("command: {e}")))
        }
        (None, Some(items)) if items.is_empty() => {
            Err(ToolError::invalid(NAME, "argv: needs at least one item"))
        }
        (None, Some(items)) if items[0] == "cd" => Err(cd_refused("argv[0]")),
        (None, Some(items)) => Ok(items.clone()),
        (Some(_), Some(_)) => Err(ToolError::invalid(
            NAME,
            "give either 'command' or 'argv', not both",
        )),
        (None, None) => Err(ToolError::invalid(
            NAME,
            "give 'command' (a string) or 'argv' (an array of strings)",
        )),
    }
}

/// `cd` as a program: a shell builtin, which changes nothing for a later step; the step's `cwd`
/// does what the author meant.
fn cd_refused(field: &str) -> ToolError {
    ToolError::invalid(
        NAME,
        format!(
            "{field}: `cd` is a shell builtin and no shell runs this command: give the step \
             \"cwd\": \"DIR\" (a workspace directory) and run the program itself from there"
        ),
    )
}

/// Parses and checks everything; `require_cwd` demands that `cwd` exists (at run time; during plan
/// validation an earlier step may still create it).
/// Whether a call with `args` will ask the confirmation callback: its program (as written, from
/// its `cwd`) is not in the policy's auto-approve set. Unreadable arguments ask. Needs only the
/// argv and the working directory, not the program's resolution (done once, when it runs).
pub fn asks(args: &Value, workspace: &Workspace, policy: &Policy) -> bool {
    let Ok(a) = args_parse::<CommandArgs>(NAME, args) else {
        return true;
    };
    let (Ok(argv), Ok(cwd)) = (
        argv_of(&a),
        a.cwd
            .as_deref()
            .map_or(Ok(workspace.root().to_path_buf()), |c| workspace.resolve(c)),
    ) else {
        return true;
    };
    needs_confirmation(&argv, policy, workspace, &cwd)
}

fn parse(
    args: &Value,
    workspace: &Workspace,
    policy: &Policy,
    require_cwd: bool,
) -> Result<Parsed, ToolError> {
    let a: CommandArgs = args_parse(NAME, args)?;
    let argv = argv_of(&a)?;
    let env: Vec<(String, String)> = a.env.clone().unwrap_or_default().into_iter().collect();
    check_env_additions(&env)?;

    let cwd = match &a.cwd {
        None => workspace.root().to_path_buf(),
        Some(c) => workspace.resolve(c)?,
    };
    match cwd.metadata() {
        Ok(m) if !m.is_dir() => {
            return Err(ToolError::invalid(
                NAME,
                format!("cwd: {} is not a directory", workspace.display(&cwd)),
            ));
        }
        Err(_) if require_cwd => {
            return Err(ToolError::invalid(
                NAME,
                format!("cwd: {} does not exist", workspace.display(&cwd)),
            ));
        }
        _ => {}
    }
    // After `cwd`: relative paths in the arguments, and a program given by path, are resolved
    // from it. A path leaving the workspace is refused first, whatever the policy says.
    let path_var = child_env(policy, &env)
        .into_iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v);
    let resolved = program::resolve(&argv[0], workspace, &cwd, path_var.as_deref());
    if let Err(ProgramError::Violation(v)) = &resolved {
        return Err(ToolError::invalid(
            NAME,
            format!("{}: {}", argv[0], v.reason),
        ));
    }
    check_argv(&argv, policy, workspace, &cwd)?;
    let program = resolved.map_err(|e| match e {
        ProgramError::Missing { written, path } => ToolError::ProgramMissing {
            program: written,
            path,
        },
        other => ToolError::invalid(NAME, other.to_string()),
    })?;

    let timeout = match a.timeout_s {
        None => None,
        Some(0) => {
            return Err(ToolError::invalid(
                NAME,
                "timeout_s: must be an integer of at least 1",
            ));
        }
        Some(s) => Some(Duration::from_secs(s)),
    };
    Ok(Parsed {
        argv,
        cwd,
        env,
        timeout,
        program,
    })
}

/// `12 s`, or `0.5 s` for sub-second limits (tests).
pub(crate) fn seconds(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// The last `max` bytes of `s`, starting on a character boundary.
pub(crate) fn tail(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// The last `max_lines` lines of `text`, for a failure message that shows what matters without
/// flooding the report.
pub fn tail_lines(text: &str, max_lines: usize) -> &str {
    let trimmed = text.trim_end();
    match trimmed
        .rmatch_indices('\n')
        .nth(max_lines.saturating_sub(1))
    {
        Some((i, _)) if max_lines > 0 => &trimmed[i + 1..],
        _ => trimmed,
    }
}

/// What a failed command printed last, stream by stream (at most [`EXCERPT_LINES`] lines and
/// [`EXCERPT_BYTES`] bytes of each; empty streams left out): what names the failing test when
/// cargo or pytest fail, which print their failures on stdout. `None` when both are empty.
pub fn excerpt(stdout: &str, stderr: &str) -> Option<String> {
    let mut out = String::new();
    for (name, text) in [("stdout", stdout), ("stderr", stderr)] {
        let lines = tail(tail_lines(text, EXCERPT_LINES), EXCERPT_BYTES);
        if lines.trim().is_empty() {
            continue;
        }
        let shown = lines.lines().count();
        out.push_str(&format!(
            "--- {name} (last {shown} line{}) ---\n{lines}\n",
            if shown == 1 { "" } else { "s" }
        ));
    }
    (!out.is_empty()).then(|| out.trim_end().to_string())
}

/// The artifact for one captured stream; takes the text out of `c` so up to `output_bytes` of
/// output is never held twice.
pub(crate) fn stream_artifact(kind: &str, c: &mut Captured) -> Artifact {
    Artifact {
        artifact_type: kind.to_string(),
        content: std::mem::take(&mut c.text),
        bytes: c.total_bytes,
        truncated: c.truncated,
        lossy: c.lossy,
    }
}

/// One stream's section of `content`.
fn stream_section(name: &str, c: &Captured) -> String {
    if c.total_bytes == 0 {
        return format!("{name}: (empty)\n");
    }
    let shown = tail(&c.text, CONTENT_TAIL);
    let mut head = name.to_string();
    if shown.len() as u64 != c.total_bytes {
        head.push_str(&format!(
            " (last {} of {} bytes)",
            shown.len(),
            c.total_bytes
        ));
    }
    let nl = if shown.ends_with('\n') { "" } else { "\n" };
    format!("{head}:\n{shown}{nl}")
}

/// Turns a finished child into the tool's output.
fn to_output(
    program: &str,
    limit: Duration,
    out: &mut CommandOutput,
    bwrap: bool,
    limits: &CommandLimits,
) -> ToolOutput {
    let limit_hit = limits.hit(out, limit);
    let not_found_in_sandbox = bwrap
        && out.exit_code == Some(1)
        && out.stderr.text.starts_with("bwrap: execvp")
        && out.stdout.total_bytes == 0;
    let mut result = if out.interrupted {
        ToolOutput::failed(ErrorKind::Interrupted, "command interrupted")
    } else if out.timed_out {
        ToolOutput::failed(
            ErrorKind::Timeout,
            format!("command timed out after {}", seconds(limit)),
        )
    } else if not_found_in_sandbox {
        ToolOutput::failed(
            ErrorKind::ToolFailed,
            format!("cannot run '{program}': program not found on PATH (inside the sandbox)"),
        )
    } else if let Some(why) = limit_hit {
        ToolOutput::failed(ErrorKind::ToolFailed, format!("command {why}"))
    } else {
        match (out.exit_code, out.signal) {
            (Some(0), _) => ToolOutput::ok(String::new()),
            (Some(code), _) => ToolOutput::failed(
                ErrorKind::ToolFailed,
                format!("command exited with code {code}"),
            ),
            (None, Some(sig)) => ToolOutput::failed(
                ErrorKind::ToolFailed,
                format!("command was killed by signal {sig}"),
            ),
            (None, None) => ToolOutput::failed(ErrorKind::ToolFailed, "command ended abnormally"),
        }
    };
    result.exit_code = out.exit_code;
    let status = match (out.exit_code, out.signal) {
        (Some(code), _) => format!("exit code: {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        (None, None) => "no exit code".to_string(),
    };
    let mut content = String::new();
    if let Some(err) = &result.error {
        content.push_str(err);
        content.push('\n');
    }
    content.push_str(&status);
    content.push('\n');
    content.push_str(&stream_section("stdout", &out.stdout));
    content.push_str(&stream_section("stderr", &out.stderr));
    result.content = content;
    if !result.success {
        result.excerpt = excerpt(&out.stdout.text, &out.stderr.text);
    }
    result
        .with_artifact(stream_artifact("stdout", &mut out.stdout))
        .with_artifact(stream_artifact("stderr", &mut out.stderr))
}

impl Tool for RunCommand {
    fn name(&self) -> &'static str {
        NAME
    }

    fn description(&self) -> &'static str {
        "Run an allowlisted program (no shell: no pipes, redirections or ';') in the workspace and \
         return its exit code, stdout and stderr. Give 'command' as one string or 'argv' as an array."
    }

    fn schema(&self) -> Value {
        let mut schema = schema_for::<CommandArgs>();
        // Exactly one of the two program forms; the names come from the struct's schema.
        if let Some(obj) = schema.as_object_mut() {
            obj.insert(
                "oneOf".into(),
                json!([{"required": ["command"]}, {"required": ["argv"]}]),
            );
        }
        schema
    }

    fn idempotent(&self) -> bool {
        false
    }

    fn check(&self, args: &Value, ctx: &ToolContext) -> Result<(), ToolError> {
        parse(args, ctx.workspace, ctx.policy, false).map(|_| ())
    }

    fn needs_confirmation(&self, args: &Value, ctx: &ToolContext) -> bool {
        asks(args, ctx.workspace, ctx.policy)
    }

    fn summary(&self, args: &Value) -> String {
        match (
            args_parse::<CommandArgs>(NAME, args)
                .ok()
                .and_then(|a| a.command),
            parse_argv(args),
        ) {
            (Some(cmd), _) => cmd.to_string(),
            (None, Ok(argv)) => {
                shlex::try_join(argv.iter().map(String::as_str)).unwrap_or_else(|_| argv.join(" "))
            }
            (None, Err(_)) => String::new(),
        }
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let p = parse(args, ctx.workspace, ctx.policy, true)?;
        let program = p.argv[0].clone();
        let limit = p.timeout.unwrap_or(ctx.timeout);
        let mut spec = CommandSpec::new(p.argv, p.cwd);
        spec.program = Some(p.program.exec.clone());
        spec.program_roots = p.program.roots.clone();
        spec.program_by_name = p.program.found_by_name;
        spec.env = child_env(ctx.policy, &p.env);
        super::add_trace_parent(ctx, &mut spec.env);
        harden_for_program(&program, ctx.workspace.root(), &mut spec.env);
        spec.timeout = limit;
        spec.output_cap = ctx.policy.limits.output_bytes;
        // cargo on a crate at the root makes `target/` and `Cargo.lock` there.
        let cargo_root = (Path::new(&program)
            .file_name()
            .is_some_and(|n| n == "cargo")
            && std::fs::symlink_metadata(ctx.workspace.root().join("Cargo.toml"))
                .is_ok_and(|m| m.is_file()))
        .then(|| ctx.workspace.root());
        let created = root_entries::prepare(ctx, &root_entries::declared(ctx, cargo_root)?)?;
        let (guard, created) = match super::confine(ctx, &mut spec, created, "the command") {
            Ok(confined) => confined,
            Err(failed) => return Ok(*failed),
        };
        let bwrap = ctx.sandbox.bwrap();
        // Hashed just before it runs: the audit names the bytes that ran.
        let executed = p.program.executed().ok();
        let result = process::run(&spec, ctx.cancel, ctx.heartbeat);
        let network = ctx.sandbox.collect_network(&spec);
        created.remove_unused(ctx.workspace);
        guard.after()?;
        match result {
            Ok(mut out) => {
                let hint = denial_hint(ctx, &out);
                let mut output = to_output(
                    &program,
                    limit,
                    &mut out,
                    bwrap.is_some(),
                    ctx.sandbox.limits(),
                );
                if let (Some(hint), Some(error)) = (hint, output.error.as_mut()) {
                    error.push_str(&format!(" ({hint})"));
                    output.content = format!("note: {hint}\n{}", output.content);
                }
                output.transient = !output.success
                    && !out.interrupted
                    && args_parse::<CommandArgs>(NAME, args)
                        .is_ok_and(|a| a.retryable == Some(true));
                let mut output = output.with_network(network);
                output.program = executed;
                Ok(output)
            }
            Err(e) => {
                // A supervised command that the sandbox could not execute reports the exec's
                // own error; anything else under bwrap is the sandbox failing to start.
                let exec_failed =
                    spec.supervisor.is_some() && e.kind() != std::io::ErrorKind::Other;
                let what = match (bwrap, e.kind()) {
                    (Some(_), _) if exec_failed => {
                        format!("cannot run '{program}' inside the bwrap sandbox: {e}")
                    }
                    (Some(b), _) => format!("cannot start the sandbox ({}): {e}", b.display()),
                    (None, std::io::ErrorKind::NotFound) => {
                        format!("cannot run '{program}': program not found on PATH")
                    }
                    (None, std::io::ErrorKind::PermissionDenied) => {
                        format!("cannot run '{program}': permission denied")
                    }
                    (None, _) => format!("cannot run '{program}': {e}"),
                };
                Ok(ToolOutput::failed(ErrorKind::ToolFailed, what))
            }
        }
    }
}

/// Why a command that failed under Landlock was refused, when its output says so: the root
/// entries it could not create and how to declare them, else what Landlock allows in general.
pub(super) fn denial_hint(ctx: &ToolContext, out: &CommandOutput) -> Option<String> {
    let general = ctx.sandbox.denial_hint(out)?;
    let text = format!("{}\n{}", out.stdout.text, out.stderr.text);
    let names = root_entries::refused_root_entries(ctx.workspace, &text);
    if names.is_empty() {
        return Some(general.to_string());
    }
    let list: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
    Some(format!(
        "under Landlock a command cannot create entries at the workspace root; {} {} not \
         declared: add \"creates\": [{}] to the step (or to the policy)",
        names.join(", "),
        if names.len() == 1 { "was" } else { "were" },
        list.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail_lines("a\nb\nc\nd\n", 2), "c\nd");
        assert_eq!(tail_lines("a\nb", 5), "a\nb");
        assert_eq!(tail_lines("", 3), "");
        assert_eq!(tail_lines("one", 1), "one");
    }

    #[test]
    fn an_excerpt_shows_the_end_of_each_stream_that_printed() {
        let stdout: String = (1..=50).map(|i| format!("line {i}\n")).collect();
        let e = excerpt(&stdout, "").unwrap();
        assert!(
            e.starts_with("--- stdout (last 20 lines) ---\nline 31\n"),
            "{e}"
        );
        assert!(e.ends_with("line 50"), "{e}");
        assert!(!e.contains("stderr"));
        let e = excerpt("", "boom\n").unwrap();
        assert_eq!(e, "--- stderr (last 1 line) ---\nboom");
        assert_eq!(excerpt("", "  \n"), None);
        // One huge line is cut to the byte bound.
        let e = excerpt(&"x".repeat(100_000), "").unwrap();
        assert!(e.len() < EXCERPT_BYTES + 100);
    }
    use crate::redact::Redactor;
    use crate::sandbox::bwrap::bwrap_for_tests;
    use crate::tools::schema::validate;
    use std::sync::atomic::AtomicBool;

    fn temp_ws() -> Workspace {
        let dir = std::env::temp_dir().join(format!("acode-cmd-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        Workspace::new(&dir).unwrap()
    }

    fn ctx<'a>(
        ws: &'a Workspace,
        policy: &'a Policy,
        sandbox: &'a crate::sandbox::OsSandbox,
        cancel: &'a AtomicBool,
    ) -> ToolContext<'a> {
        ToolContext {
            workspace: ws,
            policy,
            timeout: Duration::from_secs(60),
            sandbox,
            cancel,
            heartbeat: &|_| {},
            creates: &[],
            history: None,
            trace_parent: None,
        }
    }

    fn run(ws: &Workspace, policy: &Policy, args: Value) -> Result<ToolOutput, ToolError> {
        let cancel = AtomicBool::new(false);
        let c = ctx(ws, policy, crate::sandbox::OsSandbox::unconfined(), &cancel);
        RunCommand.check(&args, &c)?;
        RunCommand.run(&args, &c)
    }

    fn artifact<'o>(out: &'o ToolOutput, kind: &str) -> &'o Artifact {
        out.artifacts
            .iter()
            .find(|a| a.artifact_type == kind)
            .unwrap()
    }

    #[test]
    fn runs_a_command_and_keeps_both_streams() {
        let ws = temp_ws();
        let out = run(
            &ws,
            &Policy::default(),
            json!({"command": "echo hello 'big world'"}),
        )
        .unwrap();
        assert!(out.success, "{out:?}");
        assert_eq!(out.exit_code, Some(0));
        assert_eq!(artifact(&out, "stdout").content, "hello big world\n");
        assert_eq!(artifact(&out, "stderr").content, "");
        assert!(out.content.contains("exit code: 0"));
        assert!(out.content.contains("hello big world"));

        let out = run(
            &ws,
            &Policy::default(),
            json!({"argv": ["ls", "no-such-file"], "cwd": "sub"}),
        )
        .unwrap();
        assert!(!out.success);
        assert_eq!(out.failure_kind, Some(ErrorKind::ToolFailed));
        assert_eq!(out.exit_code, Some(2));
        assert!(artifact(&out, "stderr").content.contains("no-such-file"));
        assert!(out.error.as_deref().unwrap().contains("exited with code 2"));
    }

    #[test]
    fn cwd_is_resolved_in_the_workspace() {
        let ws = temp_ws();
        std::fs::write(ws.root().join("sub/marker.txt"), "").unwrap();
        let out = run(
            &ws,
            &Policy::default(),
            json!({"command": "ls", "cwd": "sub"}),
        )
        .unwrap();
        assert_eq!(artifact(&out, "stdout").content, "marker.txt\n");
        let p = Policy::default();
        assert!(matches!(
            run(&ws, &p, json!({"command": "ls", "cwd": "../"})),
            Err(ToolError::Sandbox(_))
        ));
        assert!(matches!(
            run(&ws, &p, json!({"command": "ls", "cwd": "/etc"})),
            Err(ToolError::Sandbox(_))
        ));
        assert!(matches!(
            run(&ws, &p, json!({"command": "ls", "cwd": "sub/marker.txt"})),
            Err(ToolError::InvalidArguments { .. })
        ));
        // A missing cwd passes check (an earlier step may create it) but not run.
        let cancel = AtomicBool::new(false);
        let c = ctx(&ws, &p, crate::sandbox::OsSandbox::unconfined(), &cancel);
        let args = json!({"command": "ls", "cwd": "later"});
        assert!(RunCommand.check(&args, &c).is_ok());
        assert!(matches!(
            RunCommand.run(&args, &c),
            Err(ToolError::InvalidArguments { .. })
        ));
    }

    #[test]
    fn schema_requires_exactly_one_form() {
        let s = RunCommand.schema();
        assert!(validate(&s, &json!({"command": "ls"}), "a").is_empty());
        assert!(validate(&s, &json!({"argv": ["ls", "-l"]}), "a").is_empty());
        assert!(!validate(&s, &json!({"command": "ls", "argv": ["ls"]}), "a").is_empty());
        assert!(!validate(&s, &json!({}), "a").is_empty());
        assert!(!validate(&s, &json!({"argv": []}), "a").is_empty());
        assert!(!validate(&s, &json!({"command": "ls", "timeout_s": 0}), "a").is_empty());
        assert!(!validate(&s, &json!({"command": "ls", "shell": true}), "a").is_empty());
        // Belt and braces: the tool refuses what the schema would have.
        let ws = temp_ws();
        let p = Policy::default();
        for bad in [
            json!({"command": "ls", "argv": ["ls"]}),
            json!({"argv": []}),
            json!({"argv": ["ls", 1]}),
            json!({"command": "echo 'unbalanced"}),
            json!({"command": "   "}),
            json!({"command": "ls", "env": {"A": 1}}),
            json!({"command": "ls", "timeout_s": 0}),
        ] {
            assert!(
                matches!(
                    run(&ws, &p, bad.clone()),
                    Err(ToolError::InvalidArguments { .. })
                ),
                "{bad}"
            );
        }
    }

    /// Each payload would create `MARK` in the workspace if a shell (or the dangerous option) ran
    /// it. The tool must refuse it before anything runs, and `MARK` must not exist afterwards.
    #[test]
    fn injection_attempts_are_refused_and_never_executed() {
        let ws = temp_ws();
        let p = Policy::default();
        let mark = ws.root().join("MARK");
        std::fs::write(ws.root().join("keep.txt"), "keep").unwrap();
        let shell_payloads = [
            "echo a; touch MARK",
            "echo a;touch MARK",
            "echo a && touch MARK",
            "false || touch MARK",
            "echo a | tee MARK",
            "echo `touch MARK`",
            "echo $(touch MARK)",
            "echo a > MARK",
            "echo a >> MARK",
            "cat < keep.txt > MARK",
            "echo a\ntouch MARK",
            "echo a\r\ntouch MARK",
            "echo a & touch MARK",
        ];
        for payload in shell_payloads {
            // A plan mistake (exit 2), not a sandbox violation: the author expected a shell.
            let r = run(&ws, &p, json!({ "command": payload }));
            assert!(
                matches!(&r, Err(ToolError::InvalidArguments { message, .. }) if message.contains("not run by a shell")),
                "{payload:?}: {r:?}"
            );
            // The same payload as one argv element is data: echo prints it byte for byte.
            let out = run(&ws, &p, json!({ "argv": ["echo", payload] })).unwrap();
            assert!(out.success, "{payload:?}: {out:?}");
            assert_eq!(artifact(&out, "stdout").content, format!("{payload}\n"));
            assert!(!mark.exists(), "{payload:?} created the marker");
        }
        for payload in [
            json!({"command": "touch MARK"}),
            json!({"command": "rm keep.txt"}),
            json!({"command": "/bin/sh -c 'touch MARK'"}),
            json!({"command": "sh -c 'touch MARK'"}),
            json!({"command": "bash -c 'touch MARK'"}),
            json!({"argv": ["/usr/bin/touch", "MARK"]}),
            json!({"command": "git -c 'alias.x=!touch MARK' x"}),
            json!({"command": "git -c core.pager='touch MARK' --paginate log"}),
            json!({"command": "git -c core.fsmonitor='touch MARK' status"}),
        ] {
            let r = run(&ws, &p, payload.clone());
            // A program given by a path outside the workspace is a usage error (exit 2, #27);
            // everything else here is a sandbox violation.
            let absolute = payload.to_string().contains("\"/");
            if absolute {
                assert!(
                    matches!(r, Err(ToolError::InvalidArguments { .. })),
                    "{payload}: {r:?}"
                );
            } else {
                assert!(matches!(r, Err(ToolError::Sandbox(_))), "{payload}: {r:?}");
            }
            assert!(!mark.exists(), "{payload} created the marker");
        }
        assert!(ws.root().join("keep.txt").exists());

        // Control: the payloads are real. Through a shell (which the tool never uses) they work,
        // and git runs the alias when nothing stops `-c`.
        let ctl = CommandSpec {
            env: child_env(&p, &[]),
            ..CommandSpec::new(
                vec!["sh".into(), "-c".into(), "echo a; touch MARK".into()],
                ws.root().to_path_buf(),
            )
        };
        process::run(&ctl, &AtomicBool::new(false), &|_| {}).unwrap();
        assert!(mark.exists(), "control: the shell payload should work");
        std::fs::remove_file(&mark).unwrap();
        let ctl = CommandSpec {
            env: child_env(&p, &[]),
            ..CommandSpec::new(
                ["git", "-c", "alias.x=!touch MARK", "x"]
                    .map(String::from)
                    .to_vec(),
                ws.root().to_path_buf(),
            )
        };
        let out = process::run(&ctl, &AtomicBool::new(false), &|_| {}).unwrap();
        assert!(mark.exists(), "control: git -c alias should work: {out:?}");
    }

    #[test]
    fn timeout_kills_command_and_grandchild_and_keeps_partial_output() {
        let ws = temp_ws();
        // A one-liner without shell metacharacters: print, start a grandchild recording its pid,
        // then sleep. The list only sequences the expressions.
        let code = "[print('partial', flush=True), open('gc.pid', 'w').write(str(__import__('subprocess').Popen(['sleep', '600']).pid)), __import__('time').sleep(600)]";
        let started = std::time::Instant::now();
        let out = run(
            &ws,
            &Policy::default(),
            json!({"argv": ["python3", "-c", code], "timeout_s": 2}),
        )
        .unwrap();
        assert!(started.elapsed() < Duration::from_secs(15));
        assert!(!out.success);
        assert_eq!(out.failure_kind, Some(ErrorKind::Timeout));
        assert_eq!(out.error.as_deref(), Some("command timed out after 2 s"));
        assert_eq!(artifact(&out, "stdout").content, "partial\n");
        let pid: i32 = std::fs::read_to_string(ws.root().join("gc.pid"))
            .unwrap()
            .parse()
            .unwrap();
        let gone = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(20));
            // SAFETY: signal 0 only checks whether the process exists.
            unsafe { libc::kill(pid, 0) != 0 }
        });
        assert!(gone, "grandchild {pid} survived the timeout");
    }

    #[test]
    fn cancel_interrupts() {
        let ws = temp_ws();
        let p = Policy::default();
        let cancel = AtomicBool::new(false);
        let c = ctx(&ws, &p, crate::sandbox::OsSandbox::unconfined(), &cancel);
        let args = json!({"argv": ["python3", "-c", "__import__('time').sleep(600)"]});
        let out = std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(300));
                cancel.store(true, std::sync::atomic::Ordering::SeqCst);
            });
            RunCommand.run(&args, &c).unwrap()
        });
        assert_eq!(out.failure_kind, Some(ErrorKind::Interrupted));
    }

    #[test]
    fn output_is_capped_per_policy() {
        let ws = temp_ws();
        let mut p = Policy::default();
        p.limits.output_bytes = 1000;
        let out = run(&ws, &p, json!({"command": "head -c 5000000 /dev/zero"})).unwrap();
        let a = artifact(&out, "stdout");
        assert_eq!(a.content.len(), 1000);
        assert_eq!(a.bytes, 5_000_000);
        assert!(a.truncated);
        assert!(out.content.contains("of 5000000 bytes"), "{}", out.content);
    }

    #[test]
    fn missing_program_is_a_clear_failure() {
        let ws = temp_ws();
        let p = Policy::parse(r#"{"allow_commands":["acode-no-such-program"]}"#).unwrap();
        // Refused before anything starts (and when the plan is validated), naming it.
        match run(&ws, &p, json!({"command": "acode-no-such-program --x"})) {
            Err(ToolError::InvalidArguments { message, .. }) => assert_eq!(
                message,
                "acode-no-such-program: not found on the command's PATH"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn confirmation_follows_the_auto_approve_set() {
        let ws = temp_ws();
        let p = Policy::parse(r#"{"allow_commands":["env"]}"#).unwrap();
        let cancel = AtomicBool::new(false);
        let c = ctx(&ws, &p, crate::sandbox::OsSandbox::unconfined(), &cancel);
        assert!(!RunCommand.needs_confirmation(&json!({"command": "cargo test"}), &c));
        assert!(RunCommand.needs_confirmation(&json!({"command": "env"}), &c));
        assert!(RunCommand.needs_confirmation(&json!({"argv": ["env"]}), &c));
        assert_eq!(
            RunCommand.summary(&json!({"command": "cargo test -q"})),
            "cargo test -q"
        );
        assert_eq!(
            RunCommand.summary(&json!({"argv": ["echo", "a b"]})),
            "echo 'a b'"
        );
        assert!(!RunCommand.idempotent());
    }

    #[test]
    fn environment_is_cleared_to_the_allowlist() {
        let ws = temp_ws();
        let hidden = format!("ACODE_TEST_HIDDEN_{}", std::process::id());
        let passed = format!("ACODE_TEST_PASSED_{}", std::process::id());
        // SAFETY: unique names, set before any child of this test starts; std serialises environ
        // access between set_var and Command::spawn.
        unsafe {
            std::env::set_var(&hidden, "must-not-leak");
            std::env::set_var(&passed, "may-pass");
        }
        let p = Policy::parse(&format!(
            r#"{{"allow_commands":["env"],"env_passthrough":["{passed}"]}}"#
        ))
        .unwrap();
        let out = run(
            &ws,
            &p,
            json!({"command": "env", "env": {"STEP_VAR": "from-step"}}),
        )
        .unwrap();
        let text = &artifact(&out, "stdout").content;
        assert!(!text.contains(&hidden), "{text}");
        assert!(!text.contains("must-not-leak"), "{text}");
        assert!(text.contains(&format!("{passed}=may-pass")), "{text}");
        assert!(text.contains("STEP_VAR=from-step"), "{text}");
        if let Ok(home) = std::env::var("HOME") {
            assert!(text.contains(&format!("HOME={home}")), "{text}");
        }
        // A step may not point PATH (or git's helpers) somewhere else.
        for env in [json!({"PATH": "."}), json!({"GIT_SSH_COMMAND": "touch x"})] {
            assert!(matches!(
                run(&ws, &p, json!({"command": "env", "env": env})),
                Err(ToolError::Sandbox(_))
            ));
        }
    }

    #[test]
    fn secrets_do_not_survive_redaction_of_artifacts() {
        let ws = temp_ws();
        let var = format!("ACODE_TEST_{}_TOKEN", std::process::id());
        let env_secret = format!("env-secret-{}", uuid::Uuid::new_v4().simple());
        // SAFETY: unique name, see environment_is_cleared_to_the_allowlist.
        unsafe { std::env::set_var(&var, &env_secret) };
        // The policy passes it through deliberately; the redactor must still catch it.
        let p = Policy::parse(&format!(
            r#"{{"allow_commands":["env"],"env_passthrough":["{var}"]}}"#
        ))
        .unwrap();
        let arg_secret = "ghp_16C7e42F292c6912E7710c838347Ae178B4a";
        let red = Redactor::from_env();
        for args in [
            json!({"argv": ["echo", arg_secret, &env_secret]}),
            json!({"command": "env"}),
            json!({"argv": ["python3", "-c", "__import__('sys').stderr.write('password=hunter22')"]}),
        ] {
            let out = run(&ws, &p, args.clone()).unwrap();
            let raw: String = out.artifacts.iter().map(|a| a.content.clone()).collect();
            assert!(
                raw.contains(arg_secret) || raw.contains(&env_secret) || raw.contains("hunter22"),
                "the test must actually print a secret: {raw}"
            );
            let summary = red.redact_string(RunCommand.summary(&args));
            let content = red.redact_string(out.content.clone());
            let args_json = red.redact_value(&args).to_string();
            for a in &out.artifacts {
                let redacted = red.redact(&a.content);
                for text in [&*redacted, &summary, &content, &args_json] {
                    assert!(!text.contains(arg_secret), "{text}");
                    assert!(!text.contains(&env_secret), "{text}");
                    assert!(!text.contains("hunter22"), "{text}");
                }
            }
        }
    }

    #[test]
    fn runs_inside_bwrap_when_the_run_has_it() {
        let Some(bwrap) = bwrap_for_tests() else {
            return;
        };
        let ws = temp_ws();
        let p = Policy::default();
        let cancel = AtomicBool::new(false);
        let sandbox =
            crate::sandbox::OsSandbox::resolve(crate::policy::SandboxMode::Bwrap, &ws, &p.limits)
                .unwrap();
        assert_eq!(sandbox.bwrap(), Some(bwrap.as_path()));
        let c = ctx(&ws, &p, &sandbox, &cancel);
        let out = RunCommand
            .run(
                &json!({"command": "python3 -c \"open('inside.txt', 'w').write('ok')\""}),
                &c,
            )
            .unwrap();
        assert!(out.success, "{out:?}");
        assert!(ws.root().join("inside.txt").exists());
        let outside = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("target")
            .join(format!("acode-outside-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&outside).unwrap();
        let code = format!(
            "open({:?}, 'w').write('x')",
            outside.join("f").to_str().unwrap()
        );
        let out = RunCommand
            .run(&json!({"argv": ["python3", "-c", code]}), &c)
            .unwrap();
        assert!(!out.success);
        assert!(!outside.join("f").exists());
        let _ = std::fs::remove_dir_all(&outside);
        // A missing program is refused before bwrap starts, naming it.
        let p2 = Policy::parse(r#"{"allow_commands":["acode-no-such-program"]}"#).unwrap();
        let c2 = ctx(&ws, &p2, &sandbox, &cancel);
        let err = RunCommand
            .run(&json!({"command": "acode-no-such-program"}), &c2)
            .unwrap_err();
        assert!(
            err.to_string().contains("not found on the command's PATH"),
            "{err}"
        );
    }
}
