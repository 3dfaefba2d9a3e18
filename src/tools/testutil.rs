//! Shared test fixture for tool tests: a real temporary workspace with a sibling "outside"
//! directory, so escape tests can check that nothing next to the workspace was touched.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde_json::Value;

use super::{Tool, ToolContext, ToolError, ToolOutput, schema};
use crate::policy::Policy;
use crate::workspace::Workspace;

fn no_heartbeat(_: Duration) {}

/// `<tmp>/acode-test-<uuid>/{ws,outside}`; removed on drop.
pub struct TestWs {
    /// The directory holding both the workspace and the outside directory.
    pub base: PathBuf,
    /// The canonical workspace root.
    pub root: PathBuf,
    /// A sibling of the workspace that tools must never touch.
    pub outside: PathBuf,
    /// The workspace.
    pub ws: Workspace,
    /// The policy tools see.
    pub policy: Policy,
    /// The cancel flag tools see.
    pub cancel: AtomicBool,
}

impl TestWs {
    pub fn new() -> TestWs {
        let base = std::env::temp_dir().join(format!("acode-test-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(base.join("ws")).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        let base = base.canonicalize().unwrap();
        let root = base.join("ws");
        let outside = base.join("outside");
        std::fs::write(outside.join("sentinel.txt"), "sentinel\n").unwrap();
        let ws = Workspace::new(&root).unwrap();
        TestWs {
            base,
            root,
            outside,
            ws,
            policy: Policy::default(),
            cancel: AtomicBool::new(false),
        }
    }

    pub fn ctx(&self) -> ToolContext<'_> {
        ToolContext {
            workspace: &self.ws,
            policy: &self.policy,
            timeout: Duration::from_secs(5),
            sandbox: crate::sandbox::OsSandbox::unconfined(),
            cancel: &self.cancel,
            heartbeat: &no_heartbeat,
            creates: &[],
            history: None,
            trace_parent: None,
        }
    }

    /// Absolute path of a workspace-relative path.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// Writes a file in the workspace, creating parents.
    pub fn write(&self, rel: &str, contents: impl AsRef<[u8]>) {
        let p = self.path(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(p, contents).unwrap();
    }

    /// Reads a workspace file as text.
    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap()
    }

    /// Runs `tool` the way the executor does: schema, then check, then run.
    pub fn call(&self, tool: &dyn Tool, args: Value) -> Result<ToolOutput, ToolError> {
        let errors = schema::validate(&tool.schema(), &args, "arguments");
        if !errors.is_empty() {
            return Err(ToolError::invalid(tool.name(), errors.join("; ")));
        }
        let ctx = self.ctx();
        tool.check(&args, &ctx)?;
        tool.run(&args, &ctx)
    }

    /// Sorted names of every entry in `dir` (recursively, not following links), with file
    /// contents, for before/after comparisons.
    pub fn snapshot(dir: &Path) -> Vec<(String, Option<Vec<u8>>)> {
        let mut out: Vec<_> = walkdir::WalkDir::new(dir)
            .follow_links(false)
            .into_iter()
            .filter_map(Result::ok)
            .map(|e| {
                let contents = if e.file_type().is_file() {
                    std::fs::read(e.path()).ok()
                } else {
                    None
                };
                (e.path().display().to_string(), contents)
            })
            .collect();
        out.sort();
        out
    }

    /// Names of the files directly in `dir`, sorted.
    pub fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

impl Drop for TestWs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// The JSON a walking tool put in its `stdout` artifact.
pub fn stdout_json(out: &ToolOutput) -> Value {
    let stdout = out
        .artifacts
        .iter()
        .find(|a| a.artifact_type == "stdout")
        .expect("stdout artifact");
    serde_json::from_str(&stdout.content).expect("stdout is JSON")
}

/// The paths in a walking tool's result (strings, or objects with a `path`).
pub fn result_paths(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().or(e["path"].as_str()).unwrap().to_string())
        .collect()
}

/// A small tree for the walking tools: files, a nested directory, `.git`, `.acode` and a link.
pub fn tree() -> TestWs {
    let t = TestWs::new();
    t.write("a.txt", "alpha\n");
    t.write("a/x.rs", "fn x() {}\n");
    t.write("a/deep/y.rs", "fn y() {}\n");
    t.write("b.rs", "fn b() {}\n");
    t.write(".git/config", "fn git() {}\n");
    t.write(".acode/log", "fn acode() {}\n");
    std::os::unix::fs::symlink("a.txt", t.path("z-link")).unwrap();
    t
}
