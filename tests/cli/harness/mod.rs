//! A temp directory per test and helpers to run the real `acode-run` binary in it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use rusqlite::Connection;

pub mod git;
pub mod mcp;
pub mod net;
pub mod tls;

pub use self::git::{git, raw_git, repo_with_commit};
pub use self::net::{e2e_net, free_port, real_model_url};

/// A test's private directory: `ws/` is the workspace, `outside/` a sibling that must stay untouched.
pub struct TestDir {
    pub root: PathBuf,
    pub ws: PathBuf,
    pub outside: PathBuf,
}

impl TestDir {
    pub fn new() -> TestDir {
        let root = std::env::temp_dir().join(format!("acode-test-{}", uuid::Uuid::new_v4()));
        let ws = root.join("ws");
        let outside = root.join("outside");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("sentinel.txt"), "untouched\n").unwrap();
        TestDir {
            root: root.canonicalize().unwrap(),
            ws: ws.canonicalize().unwrap(),
            outside: outside.canonicalize().unwrap(),
        }
    }

    /// Writes a file inside the workspace (creating parents).
    pub fn file(&self, rel: &str, contents: &str) -> PathBuf {
        let p = self.ws.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, contents).unwrap();
        p
    }

    /// Reads a workspace file.
    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.ws.join(rel)).unwrap()
    }

    /// Writes a plan file next to the workspace (not inside it) and returns its path.
    pub fn plan(&self, name: &str, json: &serde_json::Value) -> PathBuf {
        self.plan_text(name, &serde_json::to_string_pretty(json).unwrap())
    }

    /// Writes raw plan text.
    pub fn plan_text(&self, name: &str, text: &str) -> PathBuf {
        let p = self.root.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    /// A command for the binary with the workspace as cwd and a clean acode environment: every
    /// inherited `ACODE_*` variable (database, model, approval key, user, ...) and the CI actor
    /// variables `decided_by` reads are removed, so a developer's or CI's settings cannot change a
    /// test's outcome.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_acode-run"));
        c.current_dir(&self.ws);
        clean_env(&mut c);
        c.env("NO_COLOR", "1").stdin(Stdio::null());
        c
    }

    /// [`TestDir::cmd`] with `envs` added to its environment.
    pub fn cmd_with(&self, envs: &[(&str, &str)]) -> Command {
        let mut c = self.cmd();
        for (k, v) in envs {
            c.env(k, v);
        }
        c
    }

    /// Runs the binary with `args` and returns its output.
    pub fn run(&self, args: &[&str]) -> Output {
        self.run_with(args, &[])
    }

    /// Runs the binary with `args` and `envs` added to its environment.
    pub fn run_with(&self, args: &[&str], envs: &[(&str, &str)]) -> Output {
        self.cmd_with(envs).args(args).output().unwrap()
    }

    /// Approves a plan with the binary, asserting success.
    pub fn approve(&self, plan: &Path) {
        self.approve_with(plan, &[]);
    }

    /// Approves a plan with the binary with `envs` added to its environment, asserting success.
    pub fn approve_with(&self, plan: &Path, envs: &[(&str, &str)]) {
        let out = self.run_with(&["approve", plan.to_str().unwrap(), "--by", "tester"], envs);
        assert_eq!(code(&out), 0, "approve failed: {}", stderr(&out));
    }

    /// Runs the binary and insists it ends within `limit` (a read of an endless input never would).
    pub fn run_within(&self, args: &[&str], limit: Duration) -> Output {
        let mut child = self
            .cmd()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if start.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                panic!("acode-run {args:?} still running after {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        child.wait_with_output().unwrap()
    }

    /// Approves then runs a plan with extra args.
    pub fn approve_and_run(&self, plan: &Path, extra: &[&str]) -> Output {
        self.approve(plan);
        let mut args = vec!["run", plan.to_str().unwrap()];
        args.extend_from_slice(extra);
        self.run(&args)
    }

    /// Approves then runs a plan against a scripted model `server` (its URL, model
    /// `test-model`), events on stdout as JSONL, with `extra` args.
    pub fn approve_and_run_with_model(
        &self,
        plan: &Path,
        server: &acode_run::llm::scripted::ScriptedServer,
        extra: &[&str],
    ) -> Output {
        let url = server.url();
        let mut args = vec![
            "--llm-url",
            url.as_str(),
            "--model",
            "test-model",
            "--jsonl",
        ];
        args.extend_from_slice(extra);
        self.approve_and_run(plan, &args)
    }

    /// Every artifact of type `kind` (`stdout`, `stderr`, ...) in the run database, in no
    /// particular order: what the runs recorded, to look for a value that must not be there.
    pub fn artifacts(&self, kind: &str) -> Vec<String> {
        let db = self.db();
        let mut st = db
            .prepare("SELECT content FROM artifacts WHERE artifact_type = ?1")
            .unwrap();
        st.query_map([kind], |r| r.get::<_, String>(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    /// Opens the run database.
    pub fn db(&self) -> Connection {
        Connection::open(self.ws.join(".acode/executions.db")).unwrap()
    }

    /// Asserts the sibling directory outside the workspace holds exactly the sentinel, unchanged.
    pub fn assert_outside_untouched(&self) {
        let entries: Vec<String> = std::fs::read_dir(&self.outside)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            entries,
            vec!["sentinel.txt".to_string()],
            "outside dir changed"
        );
        assert_eq!(
            std::fs::read_to_string(self.outside.join("sentinel.txt")).unwrap(),
            "untouched\n"
        );
        let root_entries: Vec<String> = std::fs::read_dir(&self.root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.ends_with(".json") && !n.ends_with(".approval"))
            .collect();
        let mut root_entries = root_entries;
        root_entries.sort();
        assert_eq!(
            root_entries,
            vec!["outside".to_string(), "ws".to_string()],
            "files appeared beside the workspace"
        );
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

/// Removes every inherited `ACODE_*` variable and the CI actor variables from `c`'s environment.
pub fn clean_env(c: &mut Command) {
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("ACODE_") {
            c.env_remove(&name);
        }
    }
    for name in acode_run::plan::auth::DECIDER_ENV {
        c.env_remove(name);
    }
}

pub fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts that `out` exited with `expected` and that its stderr contains `needle`, showing the
/// stderr when either is not so.
#[track_caller]
pub fn assert_exit_with(out: &Output, expected: i32, needle: &str) {
    let err = stderr(out);
    assert_eq!(code(out), expected, "{err}");
    assert!(err.contains(needle), "{err}");
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A single-value query helper.
pub fn q<T: rusqlite::types::FromSql>(db: &Connection, sql: &str) -> T {
    db.query_row(sql, [], |r| r.get(0)).unwrap()
}

/// Parses JSONL stdout into values, checking each against the shipped event schema.
pub fn events(out: &Output) -> Vec<serde_json::Value> {
    let events: Vec<serde_json::Value> = stdout(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSONL line {l:?}: {e}")))
        .collect();
    assert_events_match_schema(&events);
    events
}

/// Checks every event against the shipped `docs/events.schema.json` (the alternative whose `type`
/// matches), so the schema and the events cannot drift apart.
pub fn assert_events_match_schema(events: &[serde_json::Value]) {
    let schema: serde_json::Value =
        serde_json::from_str(acode_run::cli::EVENTS_SCHEMA).expect("events schema is JSON");
    let alternatives = schema["oneOf"].as_array().expect("oneOf");
    for e in events {
        let ty = e["type"].as_str().expect("type");
        let alt = alternatives
            .iter()
            .find(|a| a["properties"]["type"]["const"] == ty)
            .unwrap_or_else(|| panic!("event type {ty} is not in the schema"));
        let errors = acode_run::tools::schema::validate(alt, e, ty);
        assert!(errors.is_empty(), "{e}: {errors:?}");
    }
}

/// Copies an execution database as a user copies the record: the file and its write-ahead log
/// (`NAME-wal`, which holds the latest runs until a checkpoint; docs/database.md).
pub fn copy_database(from: &std::path::Path, to: &std::path::Path) {
    std::fs::copy(from, to).unwrap();
    let mut wal = from.as_os_str().to_owned();
    wal.push("-wal");
    if std::path::Path::new(&wal).exists() {
        let mut to_wal = to.as_os_str().to_owned();
        to_wal.push("-wal");
        std::fs::copy(&wal, &to_wal).unwrap();
    }
}

/// Copies a directory tree (the fixture workspaces are tiny).
pub fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Collects a spawned child's stderr on a thread of its own, so a test can watch it grow (a prompt
/// appearing) while the child runs.
pub fn collect_stderr(child: &mut std::process::Child) -> std::sync::Arc<std::sync::Mutex<String>> {
    collect_pipe(child.stderr.take().expect("stderr piped"))
}

/// The same for the child's stdout (its JSONL events, say).
pub fn collect_stdout(child: &mut std::process::Child) -> std::sync::Arc<std::sync::Mutex<String>> {
    collect_pipe(child.stdout.take().expect("stdout piped"))
}

/// Reads `pipe` to its end on a thread of its own into the returned, growing text.
fn collect_pipe(
    mut pipe: impl std::io::Read + Send + 'static,
) -> std::sync::Arc<std::sync::Mutex<String>> {
    let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let sink = text.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    text
}

/// Whether bwrap works here; `false` after a named, counted skip ([`acode_run::testing::skip`]):
/// on CI (`CI` set) a machine without a working bwrap fails the test instead.
pub fn bwrap_ok() -> bool {
    match acode_run::sandbox::bwrap::resolve(acode_run::policy::SandboxMode::Bwrap) {
        Ok(_) => true,
        Err(why) => {
            acode_run::testing::skip("bubblewrap (bwrap)", &why);
            false
        }
    }
}

/// For a test written against bwrap (the default mode where it works): fails at once, naming
/// bubblewrap, when this machine has no working bwrap, rather than on an unrelated assertion later.
#[track_caller]
pub fn need_bwrap() {
    acode_run::testing::require(
        "bubblewrap (bwrap)",
        acode_run::sandbox::bwrap::resolve(acode_run::policy::SandboxMode::Bwrap).map(|_| ()),
    );
}

/// The repository's root (the crate's manifest directory): its plans, fixtures, docs and sources.
pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `PATH` with `dir` first.
pub fn path_with(dir: &Path) -> String {
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// A one-step plan `p.json` (plan `p`, step `w`) that writes `a.txt`.
pub fn simple_plan(t: &TestDir) -> PathBuf {
    t.plan(
        "p.json",
        &serde_json::json!({"plan_id": "p", "steps": [
        {"step_id": "w", "tool": "file_write", "arguments": {"path": "a.txt", "contents": "1"}}]}),
    )
}

/// A plan as the model writes it: pretty JSON in a fenced `json` block.
pub fn fenced(plan: &serde_json::Value) -> String {
    format!(
        "```json\n{}\n```",
        serde_json::to_string_pretty(plan).unwrap()
    )
}

/// The approval file beside `plan`, as JSON.
pub fn approval_of(plan: &Path) -> serde_json::Value {
    let mut p = plan.as_os_str().to_owned();
    p.push(".approval");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// Writes an executable file (creating parents).
pub fn exe(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Whether `haystack` holds the bytes of `needle`.
pub fn contains(haystack: &[u8], needle: impl AsRef<[u8]>) -> bool {
    let needle = needle.as_ref();
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The recorded stdout of a step's execution (empty when it recorded none).
pub fn stdout_of(t: &TestDir, step: &str) -> String {
    t.db()
        .query_row(
            "SELECT a.content FROM artifacts a JOIN executions e ON e.execution_id = a.execution_id
             WHERE e.step_id = ?1 AND a.artifact_type = 'stdout'",
            [step],
            |r| r.get(0),
        )
        .unwrap_or_default()
}

/// Artifact `kind` of a step's (only) execution, as `acode-run artifact` prints it.
pub fn artifact_of(t: &TestDir, step: &str, kind: &str) -> String {
    let id: String = q(
        &t.db(),
        &format!("SELECT execution_id FROM executions WHERE step_id='{step}'"),
    );
    stdout(&t.run(&["artifact", &id, kind]))
}

/// Everything the database holds, byte for byte (the file and its journals): to look for a
/// secret that must not be there.
pub fn database_bytes(t: &TestDir) -> Vec<u8> {
    let mut raw = Vec::new();
    for name in [
        "executions.db",
        "executions.db-wal",
        "executions.db-journal",
    ] {
        raw.extend(std::fs::read(t.ws.join(".acode").join(name)).unwrap_or_default());
    }
    raw
}

/// Everything the database holds as text, table by table, for "the secret is nowhere" checks.
pub fn database_text(t: &TestDir) -> String {
    let db = t.db();
    let tables: Vec<String> = db
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut all = String::new();
    for table in tables {
        let mut st = db.prepare(&format!("SELECT * FROM \"{table}\"")).unwrap();
        let n = st.column_count();
        let rows = st
            .query_map([], |r| {
                let mut line = String::new();
                for i in 0..n {
                    if let Ok(s) = r.get::<_, String>(i) {
                        line.push_str(&s);
                        line.push('\t');
                    }
                }
                Ok(line)
            })
            .unwrap();
        for row in rows {
            all.push_str(&row.unwrap());
            all.push('\n');
        }
    }
    all
}

/// Writes a policy allowing `commands` and running them without confirmation.
pub fn allow_commands(t: &TestDir, commands: &[&str]) {
    t.file(
        "acode-policy.json",
        &serde_json::json!({"allow_commands": commands, "auto_approve_commands": commands})
            .to_string(),
    );
}
