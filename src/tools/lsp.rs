//! `lsp_check`: compiler diagnostics for a Cargo crate, from `cargo check --message-format=json`.
//!
//! The path (a directory with `Cargo.toml`, or the `Cargo.toml` itself) is resolved in the
//! workspace; cargo always gets an explicit `--manifest-path`, so it never wanders up to a manifest
//! outside the workspace. Cargo runs through the same process runner as `run_command`: cleared
//! environment, its own process group, the run's OS sandbox, limits and timeout, capped output. Its default
//! target directory (`target/` next to the crate's workspace root) is used.
//!
//! Note that `cargo check` compiles and *runs* build scripts and proc macros of the crate and its
//! dependencies: this tool executes workspace code, like `cargo build` would.

use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::command::{seconds, stream_artifact, tail};
use super::root_entries;
use schemars::JsonSchema;

use super::args::{parse, schema_for};
use super::{Artifact, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};
use crate::error::ErrorKind;
use crate::policy::env::child_env;
use crate::process;
use crate::process::CommandSpec;
use crate::workspace::{SandboxViolation, Workspace};

/// The tool's registered name.
pub const NAME: &str = "lsp_check";

/// The arguments of `lsp_check`: one struct gives both its schema and its parsing.
#[derive(Debug, serde::Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LspArgs {
    /// The crate directory (containing Cargo.toml) or its Cargo.toml, relative to the workspace.
    #[schemars(length(min = 1))]
    pub path: String,
}

/// Diagnostics listed in the driver-visible `content` (all are in the artifact).
const CONTENT_DIAGNOSTICS: usize = 20;

/// Registers `lsp_check`.
pub fn register(r: &mut ToolRegistry) {
    r.register(Arc::new(LspCheck));
}

/// One compiler diagnostic, as stored in the `diagnostics` artifact (SPEC §5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    /// `error`, `warning`, `note`, `help`, or `error: internal compiler error`.
    pub level: String,
    /// The main message, without the rendered source snippet.
    pub message: String,
    /// The file of the primary span, when there is one.
    pub file_name: Option<String>,
    /// The first line of the primary span (1-based).
    pub line_start: Option<u64>,
    /// The first column of the primary span (1-based), when known (SARIF's `startColumn`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column_start: Option<u64>,
    /// The lint or error code (`E0308`, `unused_variables`), when there is one.
    pub code: Option<String>,
}

impl Diagnostic {
    /// Whether this diagnostic fails the check.
    pub fn is_error(&self) -> bool {
        self.level.starts_with("error")
    }
}

/// Summary lines rustc emits as messages of their own; they repeat what the real diagnostics say.
fn is_summary(level: &str, message: &str, has_spans: bool) -> bool {
    if has_spans {
        return false;
    }
    level == "failure-note"
        || message.starts_with("aborting due to")
        || (message.contains("warning") && message.contains("emitted"))
        || (message.contains(" generated ") && message.contains("warning"))
}

/// Extracts the compiler diagnostics from cargo's JSON message stream (one JSON object per line;
/// anything else is ignored). Pure, so it can be tested on captured output.
pub fn parse_cargo_messages(stdout: &str) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for line in stdout.lines() {
        let line = line.trim();
        if !line.starts_with('{') {
            continue;
        }
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if v.get("reason").and_then(Value::as_str) != Some("compiler-message") {
            continue;
        }
        let Some(msg) = v.get("message") else {
            continue;
        };
        let level = msg
            .get("level")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_string();
        let message = msg
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let spans = msg
            .get("spans")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        if is_summary(&level, &message, !spans.is_empty()) {
            continue;
        }
        let primary = spans
            .iter()
            .find(|s| s.get("is_primary").and_then(Value::as_bool) == Some(true))
            .or_else(|| spans.first());
        let code = msg
            .get("code")
            .and_then(|c| c.get("code"))
            .and_then(Value::as_str)
            .map(str::to_string);
        out.push(Diagnostic {
            level,
            message,
            file_name: primary
                .and_then(|s| s.get("file_name"))
                .and_then(Value::as_str)
                .map(str::to_string),
            line_start: primary
                .and_then(|s| s.get("line_start"))
                .and_then(Value::as_u64),
            column_start: primary
                .and_then(|s| s.get("column_start"))
                .and_then(Value::as_u64),
            code,
        });
    }
    out
}

/// The `lsp_check` tool (see the module docs).
#[derive(Debug, Clone, Copy, Default)]
pub struct LspCheck;

/// Resolves the `path` argument to the manifest to check; `require` demands that the path exists.
fn manifest_for(
    ws: &Workspace,
    path: &str,
    require: bool,
) -> Result<Option<std::path::PathBuf>, ToolError> {
    let p = ws.resolve(path)?;
    match p.metadata() {
        Ok(m) if m.is_dir() && !p.join("Cargo.toml").is_file() => Err(ToolError::InputMissing {
            tool: NAME.to_string(),
            message: format!(
                "path: {} has no Cargo.toml; lsp_check runs `cargo check`, so it checks Rust \
                 crates only: point path at the crate's directory, or check another language \
                 with run_command and its own checker (for example `npx tsc --noEmit`, \
                 `python3 -m mypy .`, `go vet ./...`)",
                ws.display(&p)
            ),
        }),
        Ok(m) if m.is_dir() => Ok(Some(p.join("Cargo.toml"))),
        Ok(_) if p.file_name().is_some_and(|n| n == "Cargo.toml") => Ok(Some(p)),
        Ok(_) => Err(ToolError::invalid(
            NAME,
            format!(
                "path: {} is neither a directory nor a Cargo.toml",
                ws.display(&p)
            ),
        )),
        Err(_) if require => Err(ToolError::invalid(
            NAME,
            format!("path: {} does not exist", ws.display(&p)),
        )),
        Err(_) => Ok(None),
    }
}

/// Rewrites a diagnostic's file name (relative to the crate) to be relative to the workspace.
fn workspace_relative(ws: &Workspace, crate_dir: &Path, d: &mut Diagnostic) {
    if let Some(f) = &d.file_name {
        let p = Path::new(f);
        let abs = if p.is_absolute() {
            p.to_path_buf()
        } else {
            crate_dir.join(p)
        };
        d.file_name = Some(ws.display(&abs));
    }
}

fn describe(d: &Diagnostic) -> String {
    let code = d
        .code
        .as_deref()
        .map(|c| format!("[{c}]"))
        .unwrap_or_default();
    let at = match (&d.file_name, d.line_start) {
        (Some(f), Some(l)) => format!("{f}:{l}: "),
        (Some(f), None) => format!("{f}: "),
        _ => String::new(),
    };
    format!("{at}{}{code}: {}", d.level, d.message)
}

impl Tool for LspCheck {
    fn name(&self) -> &'static str {
        NAME
    }

    fn description(&self) -> &'static str {
        "Type-check a Rust crate (a directory with Cargo.toml; Rust only) with `cargo check` and \
         return its compiler diagnostics (level, message, file, line, code); fails when there is \
         any error. For other languages use run_command with their own checker."
    }

    fn schema(&self) -> Value {
        schema_for::<LspArgs>()
    }

    fn idempotent(&self) -> bool {
        true
    }

    fn check(&self, args: &Value, ctx: &ToolContext) -> Result<(), ToolError> {
        let LspArgs { path } = parse(NAME, args)?;
        if !ctx.policy.command_allowed("cargo") {
            return Err(
                SandboxViolation::new("cargo", "cargo is not on the command allowlist").into(),
            );
        }
        manifest_for(ctx.workspace, &path, false).map(|_| ())
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.check(args, ctx)?;
        let LspArgs { path } = parse(NAME, args)?;
        let Some(manifest) = manifest_for(ctx.workspace, &path, true)? else {
            return Err(ToolError::invalid(
                NAME,
                format!("path: {path} does not exist"),
            ));
        };
        let crate_dir = manifest
            .parent()
            .unwrap_or(ctx.workspace.root())
            .to_path_buf();
        let argv = vec![
            "cargo".to_string(),
            "check".to_string(),
            "--message-format=json".to_string(),
            "--manifest-path".to_string(),
            manifest.to_string_lossy().into_owned(),
        ];
        let created = root_entries::prepare(ctx, &root_entries::declared(ctx, Some(&crate_dir))?)?;
        let mut spec = CommandSpec::new(argv, crate_dir.clone());
        // Inside the OS sandbox without allowed hosts there is no network (bwrap's namespace,
        // Landlock's TCP rules): cargo would spend many seconds retrying a download before
        // failing, so it runs offline there and fails at once.
        let offline =
            ctx.sandbox.mode() != crate::policy::SandboxMode::None && ctx.sandbox.proxy().is_none();
        let mut extra_env = vec![("CARGO_TERM_COLOR".to_string(), "never".to_string())];
        if offline {
            extra_env.push(("CARGO_NET_OFFLINE".to_string(), "true".to_string()));
        }
        spec.env = child_env(ctx.policy, &extra_env);
        super::add_trace_parent(ctx, &mut spec.env);
        spec.timeout = ctx.timeout;
        spec.output_cap = ctx.policy.limits.output_bytes;
        let (guard, created) = match super::confine(ctx, &mut spec, created, "cargo") {
            Ok(confined) => confined,
            Err(failed) => return Ok(*failed),
        };
        // cargo runs build scripts: arbitrary code, guarded like any command (`guard`).
        let result = process::run(&spec, ctx.cancel, ctx.heartbeat);
        let network = ctx.sandbox.collect_network(&spec);
        created.remove_unused(ctx.workspace);
        guard.after()?;
        let mut out = match result {
            Ok(out) => out,
            Err(e) => {
                return Ok(ToolOutput::failed(
                    ErrorKind::ToolFailed,
                    format!("cannot run cargo: {e}"),
                ));
            }
        };

        let mut diagnostics = parse_cargo_messages(&out.stdout.text);
        for d in &mut diagnostics {
            workspace_relative(ctx.workspace, &crate_dir, d);
        }
        let errors = diagnostics.iter().filter(|d| d.is_error()).count();
        let warnings = diagnostics.iter().filter(|d| d.level == "warning").count();
        let stderr_tail = tail(out.stderr.text.trim(), 2000);

        let mut result = if out.interrupted {
            ToolOutput::failed(ErrorKind::Interrupted, "cargo check interrupted")
        } else if out.timed_out {
            ToolOutput::failed(
                ErrorKind::Timeout,
                format!("cargo check timed out after {}", seconds(ctx.timeout)),
            )
        } else if errors > 0 {
            let first = diagnostics
                .iter()
                .find(|d| d.is_error())
                .map(describe)
                .unwrap_or_default();
            ToolOutput::failed(
                ErrorKind::ToolFailed,
                format!("cargo check found {errors} error(s); first: {first}"),
            )
        } else if let Some(why) = ctx.sandbox.limits().hit(&out, ctx.timeout) {
            ToolOutput::failed(ErrorKind::ToolFailed, format!("cargo check {why}"))
        } else if !out.success() {
            let status = out
                .exit_code
                .map(|c| format!("exit code {c}"))
                .unwrap_or_else(|| "killed".to_string());
            let hint = if offline && stderr_tail.contains("offline") {
                "; the sandbox has no network, so cargo ran offline and needed something not in \
                 its local cache: run `cargo fetch` before the plan, or allow the registry in the policy \
                 (\"network\": {\"allow\": [\"registry:cargo\"]})"
            } else {
                ""
            };
            ToolOutput::failed(
                ErrorKind::ToolFailed,
                format!(
                    "cargo check failed ({status}) without compiler diagnostics{hint}: {stderr_tail}"
                ),
            )
        } else {
            ToolOutput::ok(String::new())
        };
        result.exit_code = out.exit_code;

        let mut content = String::new();
        if let Some(e) = &result.error {
            content.push_str(e);
            content.push('\n');
        }
        content.push_str(&format!("{errors} error(s), {warnings} warning(s)\n"));
        for d in diagnostics.iter().take(CONTENT_DIAGNOSTICS) {
            content.push_str(&describe(d));
            content.push('\n');
        }
        if diagnostics.len() > CONTENT_DIAGNOSTICS {
            content.push_str(&format!(
                "... and {} more (see the diagnostics artifact)\n",
                diagnostics.len() - CONTENT_DIAGNOSTICS
            ));
        }
        result.content = content;

        // Serialising plain strings and numbers cannot fail; an empty array is the honest fallback.
        let json = serde_json::to_string(&diagnostics).unwrap_or_else(|_| "[]".to_string());
        Ok(result
            .with_network(network)
            .with_artifact(Artifact {
                truncated: out.stdout.truncated,
                ..Artifact::new("diagnostics", json)
            })
            .with_artifact(stream_artifact("stderr", &mut out.stderr)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;
    use crate::sandbox::bwrap::bwrap_for_tests;
    use std::path::PathBuf;
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    const CAPTURED: &str = include_str!("../../fixtures/cargo/check-with-error.jsonl");

    #[test]
    fn parses_captured_cargo_output() {
        let d = parse_cargo_messages(CAPTURED);
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!(
            d[0],
            Diagnostic {
                level: "error".into(),
                message: "mismatched types".into(),
                file_name: Some("src/lib.rs".into()),
                line_start: Some(5),
                column_start: Some(5),
                code: Some("E0308".into()),
            }
        );
        assert_eq!(d[1].level, "warning");
        assert_eq!(d[1].code.as_deref(), Some("unused_variables"));
        assert_eq!(d[1].line_start, Some(10));
        assert!(d[0].is_error() && !d[1].is_error());
    }

    #[test]
    fn parser_ignores_noise_and_tolerates_missing_fields() {
        let text = concat!(
            "not json\n",
            "{\"reason\":\"build-finished\",\"success\":false}\n",
            "{\"reason\":\"compiler-message\",\"message\":{\"level\":\"error\",\"message\":\"aborting due to 1 previous error\",\"spans\":[],\"code\":null}}\n",
            "{\"reason\":\"compiler-message\",\"message\":{\"level\":\"warning\",\"message\":\"1 warning emitted\",\"spans\":[]}}\n",
            "{\"reason\":\"compiler-message\",\"message\":{\"level\":\"error\",\"message\":\"linking failed\"}}\n",
            "{\"reason\":\"compiler-message\",\"message\":{\"level\":\"warning\",\"message\":\"w\",\"code\":{\"code\":\"dead_code\"},",
            "\"spans\":[{\"file_name\":\"a.rs\",\"line_start\":1,\"is_primary\":false},{\"file_name\":\"b.rs\",\"line_start\":7,\"is_primary\":true}]}}\n",
            "{\"reason\":\"compiler-message\"}\n",
            "{broken\n",
        );
        let d = parse_cargo_messages(text);
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!(d[0].message, "linking failed");
        assert_eq!(d[0].file_name, None);
        assert_eq!(d[0].code, None);
        assert_eq!(d[1].file_name.as_deref(), Some("b.rs"));
        assert_eq!(d[1].line_start, Some(7));
        assert_eq!(d[1].code.as_deref(), Some("dead_code"));
        assert!(parse_cargo_messages("").is_empty());
    }

    /// Copies a fixture crate into a fresh workspace under `sub/` (never build in `fixtures/`).
    fn workspace_with(fixture: &str) -> Workspace {
        let dir = std::env::temp_dir().join(format!("acode-lsp-{}", uuid::Uuid::new_v4()));
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/crates")
            .join(fixture);
        let dst = dir.join("sub");
        for entry in walkdir::WalkDir::new(&src) {
            let entry = entry.unwrap();
            let rel = entry.path().strip_prefix(&src).unwrap();
            let to = dst.join(rel);
            if entry.file_type().is_dir() {
                std::fs::create_dir_all(&to).unwrap();
            } else {
                std::fs::copy(entry.path(), &to).unwrap();
            }
        }
        Workspace::new(&dir).unwrap()
    }

    fn check(
        ws: &Workspace,
        path: &str,
        sandbox: &crate::sandbox::OsSandbox,
    ) -> Result<ToolOutput, ToolError> {
        let policy = Policy::default();
        let cancel = AtomicBool::new(false);
        let ctx = ToolContext {
            workspace: ws,
            policy: &policy,
            timeout: Duration::from_secs(120),
            sandbox,
            cancel: &cancel,
            heartbeat: &|_| {},
            creates: &[],
            history: None,
            trace_parent: None,
        };
        LspCheck.run(&serde_json::json!({ "path": path }), &ctx)
    }

    fn diagnostics(out: &ToolOutput) -> Vec<Diagnostic> {
        let a = out
            .artifacts
            .iter()
            .find(|a| a.artifact_type == "diagnostics")
            .unwrap();
        serde_json::from_str(&a.content).unwrap()
    }

    #[test]
    fn fixtures_give_the_expected_results() {
        let ws = workspace_with("clean");
        let out = check(&ws, "sub", crate::sandbox::OsSandbox::unconfined()).unwrap();
        assert!(out.success, "{out:?}");
        assert!(diagnostics(&out).is_empty());
        assert!(out.artifacts.iter().any(|a| a.artifact_type == "stderr"));

        let ws = workspace_with("with_warning");
        let out = check(
            &ws,
            "sub/Cargo.toml",
            crate::sandbox::OsSandbox::unconfined(),
        )
        .unwrap();
        assert!(out.success, "{out:?}");
        let d = diagnostics(&out);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].level, "warning");
        assert_eq!(d[0].code.as_deref(), Some("unused_variables"));
        assert_eq!(d[0].file_name.as_deref(), Some("sub/src/lib.rs"));
        assert_eq!(d[0].line_start, Some(5));

        let ws = workspace_with("with_error");
        let out = check(&ws, "sub", crate::sandbox::OsSandbox::unconfined()).unwrap();
        assert!(!out.success);
        assert_eq!(out.failure_kind, Some(ErrorKind::ToolFailed));
        let d = diagnostics(&out);
        let errors: Vec<_> = d.iter().filter(|d| d.is_error()).collect();
        assert_eq!(errors.len(), 1, "{d:?}");
        assert_eq!(errors[0].code.as_deref(), Some("E0308"));
        assert_eq!(errors[0].file_name.as_deref(), Some("sub/src/lib.rs"));
        assert_eq!(errors[0].line_start, Some(5));
        assert!(out.error.as_deref().unwrap().contains("E0308"), "{out:?}");
        assert!(
            out.content
                .contains("sub/src/lib.rs:5: error[E0308]: mismatched types")
        );
    }

    #[test]
    fn cargo_failure_without_diagnostics_reports_stderr() {
        let ws = workspace_with("clean");
        // A directory without a crate is refused before cargo starts (issue 43 §3).
        std::fs::create_dir_all(ws.root().join("empty")).unwrap();
        let err = check(&ws, "empty", crate::sandbox::OsSandbox::unconfined()).unwrap_err();
        assert!(matches!(err, ToolError::InputMissing { .. }), "{err}");
        let msg = err.to_string();
        assert!(msg.contains("has no Cargo.toml"), "{msg}");
        assert!(msg.contains("Rust crates only"), "{msg}");

        std::fs::write(ws.root().join("sub/Cargo.toml"), "[package\nname=").unwrap();
        let out = check(&ws, "sub", crate::sandbox::OsSandbox::unconfined()).unwrap();
        assert!(!out.success);
        assert!(out.error.unwrap().contains("without compiler diagnostics"));
    }

    #[test]
    fn paths_are_checked() {
        let ws = workspace_with("clean");
        assert!(matches!(
            check(&ws, "../x", crate::sandbox::OsSandbox::unconfined()),
            Err(ToolError::Sandbox(_))
        ));
        assert!(matches!(
            check(
                &ws,
                "sub/src/lib.rs",
                crate::sandbox::OsSandbox::unconfined()
            ),
            Err(ToolError::InvalidArguments { .. })
        ));
        assert!(matches!(
            check(&ws, "missing", crate::sandbox::OsSandbox::unconfined()),
            Err(ToolError::InvalidArguments { .. })
        ));
        assert!(LspCheck.idempotent());
    }

    #[test]
    fn a_missing_dependency_inside_bwrap_fails_fast_and_says_what_to_do() {
        if bwrap_for_tests().is_none() {
            return;
        }
        let ws = workspace_with("clean");
        let sandbox = crate::sandbox::OsSandbox::resolve(
            crate::policy::SandboxMode::Bwrap,
            &ws,
            &Policy::default().limits,
        )
        .unwrap();
        let manifest = ws.root().join("sub/Cargo.toml");
        let toml = std::fs::read_to_string(&manifest).unwrap().replace(
            "[dependencies]",
            "[dependencies]\nacode-run-never-published-crate = \"1\"",
        );
        std::fs::write(&manifest, toml).unwrap();
        let started = std::time::Instant::now();
        let out = check(&ws, "sub", &sandbox).unwrap();
        assert!(!out.success);
        let msg = out.error.unwrap();
        assert!(
            msg.contains(
                "run `cargo fetch` before the plan, or allow the registry in the policy \
                 (\"network\": {\"allow\": [\"registry:cargo\"]})"
            ),
            "{msg}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "took {:?}",
            started.elapsed()
        );
    }

    #[test]
    fn works_inside_bwrap() {
        let Some(bwrap) = bwrap_for_tests() else {
            return;
        };
        let ws = workspace_with("with_warning");
        let sandbox = crate::sandbox::OsSandbox::resolve(
            crate::policy::SandboxMode::Bwrap,
            &ws,
            &Policy::default().limits,
        )
        .unwrap();
        assert_eq!(sandbox.bwrap(), Some(bwrap.as_path()));
        let out = check(&ws, "sub", &sandbox).unwrap();
        assert!(out.success, "{out:?}");
        assert_eq!(diagnostics(&out).len(), 1);
    }
}
