//! A harness that runs a composite action's `runs.steps` in order as the GitHub runner does, for
//! `action.yml` (issue 45). What is real: every `run:` step runs in `bash --noprofile --norc -eo
//! pipefail` (GitHub's `shell: bash`), with the runner's `GITHUB_*` variables and files —
//! `GITHUB_OUTPUT`, `GITHUB_ENV`, `GITHUB_PATH` (fresh files per step, read back as the runner
//! reads them, heredoc values included) and `GITHUB_STEP_SUMMARY` —, `${{ }}` expressions in `env`,
//! `with` and `if` (the subset the action uses: `inputs.*`, `steps.ID.outputs.*`,
//! `steps.ID.outcome`, `always()`, `success()`, `failure()`, `cancelled()`, `==`, `!=`, `!`, `&&`,
//! `||`, string literals; anything else fails the test, never evaluates quietly), the status
//! functions against the job's state, and the action's `outputs`. Steps run on this machine or in
//! a Podman container (`podman exec`, as the runner runs a `container:` job's steps with `docker
//! exec`).
//!
//! What is emulated, minimally and by name: the two `uses:` actions the action calls.
//! [`Job::emulate_actions_cache`] restores a directory saved under the exact key or, failing
//! that, under the newest key starting with a restore key (`cache-hit` is `true` only for the
//! exact key), and saves it after the job when the job succeeded and the key was not hit, as
//! `actions/cache`'s post step does; the store is a directory of this machine.
//! [`Job::emulate_upload_artifact`] copies the listed paths into a directory per artifact name,
//! honouring `if-no-files-found`. Nothing is uploaded anywhere.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use yaml_rust2::{Yaml, YamlLoader};

/// Where the steps run.
#[derive(Clone)]
pub enum Executor {
    /// This machine.
    Host,
    /// A running Podman container (its name); the job's directories are mounted at the same
    /// paths inside it.
    Container(String),
}

/// One step's result.
#[derive(Debug, Clone)]
pub struct StepResult {
    /// The step's name.
    pub name: String,
    /// `success`, `failure` or `skipped`.
    pub outcome: String,
    /// What it printed (stdout then stderr), or what the emulation did.
    pub log: String,
    /// How long it took.
    pub took: Duration,
}

/// A job that runs one action.
pub struct Job {
    /// The action's checkout (`GITHUB_ACTION_PATH`).
    pub action_path: PathBuf,
    /// The job's working directory (`GITHUB_WORKSPACE`).
    pub workspace: PathBuf,
    /// The runner's directories: `temp/`, `tool-cache/`, the per-step files, the artifacts.
    pub runner: PathBuf,
    /// The `actions/cache` store (shared between jobs to test a warm cache).
    pub cache_store: PathBuf,
    /// Variables of the job's environment (on top of the runner's own).
    pub env: BTreeMap<String, String>,
    /// `PATH` before any `GITHUB_PATH` entry.
    pub path: String,
    /// Where steps run.
    pub executor: Executor,
}

/// What a job did.
pub struct JobResult {
    /// Each step, in order.
    pub steps: Vec<StepResult>,
    /// Whether the job passed (no step failed).
    pub success: bool,
    /// The action's outputs.
    pub outputs: BTreeMap<String, String>,
    /// The job summary (`GITHUB_STEP_SUMMARY`, all steps).
    pub summary: String,
    /// The uploaded artifacts' directory (one directory per name).
    pub artifacts: PathBuf,
    /// The whole log.
    pub log: String,
}

impl JobResult {
    /// The step called `name`.
    pub fn step(&self, name: &str) -> &StepResult {
        self.steps
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no step {name:?} in {:?}", self.names()))
    }

    fn names(&self) -> Vec<&str> {
        self.steps.iter().map(|s| s.name.as_str()).collect()
    }
}

/// The state expressions read.
struct Context<'a> {
    inputs: &'a BTreeMap<String, String>,
    steps: &'a BTreeMap<String, (String, BTreeMap<String, String>)>,
    job_failed: bool,
}

impl Job {
    /// Runs the action at `self.action_path` with `with` as its inputs.
    pub fn run(&self, with: &[(&str, &str)]) -> JobResult {
        let text = std::fs::read_to_string(self.action_path.join("action.yml")).unwrap();
        let doc = YamlLoader::load_from_str(&text).unwrap().remove(0);
        assert_eq!(
            doc["runs"]["using"].as_str(),
            Some("composite"),
            "not a composite action"
        );
        // Inputs: the given ones, else the defaults; an unknown one is an error as on GitHub
        // (a warning there; here the test is wrong).
        let declared = doc["inputs"].as_hash().unwrap();
        let mut inputs = BTreeMap::new();
        for (k, v) in declared {
            let name = k.as_str().unwrap().to_string();
            let default = v["default"].as_str().unwrap_or("").to_string();
            inputs.insert(name, default);
        }
        for (k, v) in with {
            assert!(inputs.contains_key(*k), "the action has no input {k}");
            inputs.insert(k.to_string(), v.to_string());
        }
        let runner = &self.runner;
        for d in ["temp", "tool-cache", "files", "artifacts"] {
            std::fs::create_dir_all(runner.join(d)).unwrap();
        }
        let summary = runner.join("files/summary.md");
        std::fs::write(&summary, "").unwrap();
        let mut steps: BTreeMap<String, (String, BTreeMap<String, String>)> = BTreeMap::new();
        let mut results = Vec::new();
        let mut job_env: BTreeMap<String, String> = BTreeMap::new();
        let mut extra_path: Vec<String> = Vec::new();
        let mut job_failed = false;
        let mut post: Vec<(String, PathBuf)> = Vec::new();
        let mut log = String::new();
        let empty = Vec::new();
        for (i, step) in doc["runs"]["steps"]
            .as_vec()
            .unwrap_or(&empty)
            .iter()
            .enumerate()
        {
            let name = step["name"].as_str().unwrap_or("(unnamed)").to_string();
            let id = step["id"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| format!("__{i}"));
            let ctx = Context {
                inputs: &inputs,
                steps: &steps,
                job_failed,
            };
            let condition = step["if"].as_str().unwrap_or("success()");
            let start = Instant::now();
            if !truthy(&eval(&strip_braces(condition), &ctx)) {
                steps.insert(id, ("skipped".into(), BTreeMap::new()));
                results.push(StepResult {
                    name,
                    outcome: "skipped".into(),
                    log: String::new(),
                    took: start.elapsed(),
                });
                continue;
            }
            let mut step_env = BTreeMap::new();
            if let Some(h) = step["env"].as_hash() {
                for (k, v) in h {
                    step_env.insert(
                        k.as_str().unwrap().to_string(),
                        interpolate(&scalar(v), &ctx),
                    );
                }
            }
            let (ok, outputs, step_log) = if let Some(uses) = step["uses"].as_str() {
                let mut with = BTreeMap::new();
                if let Some(h) = step["with"].as_hash() {
                    for (k, v) in h {
                        with.insert(
                            k.as_str().unwrap().to_string(),
                            interpolate(&scalar(v), &ctx),
                        );
                    }
                }
                match uses.split('@').next().unwrap() {
                    "actions/cache" => {
                        let (ok, outputs, l, save) = self.emulate_actions_cache(&with);
                        if let Some(key) = save {
                            post.push((key, PathBuf::from(&with["path"])));
                        }
                        (ok, outputs, l)
                    }
                    "actions/upload-artifact" => {
                        let (ok, l) = self.emulate_upload_artifact(&with);
                        (ok, BTreeMap::new(), l)
                    }
                    other => panic!("the harness does not emulate {other}"),
                }
            } else {
                let script = step["run"]
                    .as_str()
                    .expect("a step with neither run nor uses");
                assert_eq!(step["shell"].as_str(), Some("bash"), "step {name}: shell");
                let files = runner.join(format!("files/step-{i}"));
                std::fs::create_dir_all(&files).unwrap();
                let file = |n: &str| {
                    let p = files.join(n);
                    std::fs::write(&p, "").unwrap();
                    p
                };
                let (output, env_file, path_file) = (file("output"), file("env"), file("path"));
                let script_file = files.join("script.sh");
                std::fs::write(&script_file, interpolate(script, &ctx)).unwrap();
                let mut env = self.runner_env(&summary);
                env.extend(job_env.clone());
                env.insert("GITHUB_OUTPUT".into(), output.display().to_string());
                env.insert("GITHUB_ENV".into(), env_file.display().to_string());
                env.insert("GITHUB_PATH".into(), path_file.display().to_string());
                let mut path = extra_path.clone();
                path.reverse();
                path.push(self.path.clone());
                env.insert("PATH".into(), path.join(":"));
                env.extend(step_env);
                let (code, out) = self.exec(&script_file, &env);
                let outputs = read_file_command(&std::fs::read_to_string(&output).unwrap());
                job_env.extend(read_file_command(
                    &std::fs::read_to_string(&env_file).unwrap(),
                ));
                extra_path.extend(
                    std::fs::read_to_string(&path_file)
                        .unwrap()
                        .lines()
                        .filter(|l| !l.is_empty())
                        .map(str::to_string),
                );
                (code == 0, outputs, out)
            };
            let outcome = if ok { "success" } else { "failure" };
            job_failed |= !ok;
            log.push_str(&format!("##[step] {name}: {outcome}\n{step_log}\n"));
            steps.insert(id, (outcome.to_string(), outputs));
            results.push(StepResult {
                name,
                outcome: outcome.into(),
                log: step_log,
                took: start.elapsed(),
            });
        }
        // actions/cache's post step: saves when the job succeeded and the key was not hit.
        if !job_failed {
            for (key, path) in post {
                let to = self.cache_store.join(&key);
                if !to.exists() && path.exists() {
                    copy_dir(&path, &to);
                    log.push_str(&format!("##[post] actions/cache (emulated): saved {key}\n"));
                }
            }
        }
        let ctx = Context {
            inputs: &inputs,
            steps: &steps,
            job_failed,
        };
        let mut outputs = BTreeMap::new();
        if let Some(h) = doc["outputs"].as_hash() {
            for (k, v) in h {
                outputs.insert(
                    k.as_str().unwrap().to_string(),
                    interpolate(v["value"].as_str().unwrap_or(""), &ctx),
                );
            }
        }
        JobResult {
            steps: results,
            success: !job_failed,
            outputs,
            summary: std::fs::read_to_string(&summary).unwrap(),
            artifacts: runner.join("artifacts"),
            log,
        }
    }

    /// The variables the runner sets for every step.
    fn runner_env(&self, summary: &Path) -> BTreeMap<String, String> {
        let mut env: BTreeMap<String, String> = [
            ("CI", "true"),
            ("GITHUB_ACTIONS", "true"),
            ("GITHUB_RUN_ID", "4242"),
            ("GITHUB_RUN_NUMBER", "1"),
            ("GITHUB_JOB", "test"),
            ("GITHUB_ACTION", "__acode-run"),
            ("GITHUB_ACTOR", "harness"),
            ("GITHUB_REPOSITORY", "acode/acode-run"),
            ("GITHUB_EVENT_NAME", "push"),
            ("GITHUB_SHA", "0000000000000000000000000000000000000000"),
            ("GITHUB_REF", "refs/heads/main"),
            ("GITHUB_SERVER_URL", "https://github.invalid"),
            ("RUNNER_OS", "Linux"),
            ("RUNNER_ARCH", "X64"),
            ("RUNNER_NAME", "harness"),
            ("NO_COLOR", "1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        env.insert(
            "GITHUB_WORKSPACE".into(),
            self.workspace.display().to_string(),
        );
        env.insert(
            "GITHUB_ACTION_PATH".into(),
            self.action_path.display().to_string(),
        );
        env.insert("GITHUB_STEP_SUMMARY".into(), summary.display().to_string());
        env.insert(
            "RUNNER_TEMP".into(),
            self.runner.join("temp").display().to_string(),
        );
        env.insert(
            "RUNNER_TOOL_CACHE".into(),
            self.runner.join("tool-cache").display().to_string(),
        );
        if let Ok(home) = std::env::var("HOME") {
            env.insert("HOME".into(), home);
        }
        for (k, v) in &self.env {
            env.insert(k.clone(), v.clone());
        }
        env
    }

    /// Runs `script` with `bash --noprofile --norc -eo pipefail` in the job's working directory,
    /// with exactly `env`; the exit code and what it printed.
    fn exec(&self, script: &Path, env: &BTreeMap<String, String>) -> (i32, String) {
        let bash = ["bash", "--noprofile", "--norc", "-eo", "pipefail"];
        let mut c = match &self.executor {
            Executor::Host => {
                let mut c = Command::new(bash[0]);
                c.args(&bash[1..]).arg(script).env_clear().envs(env);
                c.current_dir(&self.workspace);
                c
            }
            Executor::Container(name) => {
                let mut c = Command::new("podman");
                c.args(["exec", "--workdir"]).arg(&self.workspace);
                for (k, v) in env {
                    c.arg("--env").arg(format!("{k}={v}"));
                }
                c.arg(name).args(bash).arg(script);
                c
            }
        };
        let out = c.output().expect("bash runs");
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        (out.status.code().unwrap_or(-1), text)
    }

    /// EMULATION of `actions/cache` (restore; the save is the job's post step): see the module
    /// docs. Returns success, the outputs, a log line, and the key to save after the job (none on
    /// an exact hit).
    pub fn emulate_actions_cache(
        &self,
        with: &BTreeMap<String, String>,
    ) -> (bool, BTreeMap<String, String>, String, Option<String>) {
        let key = with.get("key").cloned().unwrap_or_default();
        let path = PathBuf::from(with.get("path").cloned().unwrap_or_default());
        assert!(!key.is_empty() && path.is_absolute(), "cache: {with:?}");
        std::fs::create_dir_all(&self.cache_store).unwrap();
        let exact = self.cache_store.join(&key);
        let mut outputs = BTreeMap::new();
        if exact.exists() {
            let _ = std::fs::remove_dir_all(&path);
            copy_dir(&exact, &path);
            outputs.insert("cache-hit".into(), "true".into());
            return (
                true,
                outputs,
                format!("actions/cache (emulated): restored {key}"),
                None,
            );
        }
        let restore: Vec<String> = with
            .get("restore-keys")
            .map(|r| {
                r.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        let mut entries: Vec<(std::time::SystemTime, String)> =
            std::fs::read_dir(&self.cache_store)
                .unwrap()
                .filter_map(Result::ok)
                .map(|e| {
                    (
                        e.metadata().and_then(|m| m.modified()).unwrap(),
                        e.file_name().to_string_lossy().into_owned(),
                    )
                })
                .collect();
        entries.sort();
        entries.reverse();
        outputs.insert("cache-hit".into(), "false".into());
        for prefix in &restore {
            if let Some((_, found)) = entries.iter().find(|(_, n)| n.starts_with(prefix.as_str())) {
                let _ = std::fs::remove_dir_all(&path);
                copy_dir(&self.cache_store.join(found), &path);
                return (
                    true,
                    outputs,
                    format!("actions/cache (emulated): restored {found} for restore key {prefix}"),
                    Some(key),
                );
            }
        }
        (
            true,
            outputs,
            format!("actions/cache (emulated): no cache for {key}"),
            Some(key),
        )
    }

    /// EMULATION of `actions/upload-artifact`: copies each path of `path` (one per line) into
    /// `artifacts/NAME/`; a missing one is ignored, warned about or an error per
    /// `if-no-files-found` (default `warn`). Returns success and a log.
    pub fn emulate_upload_artifact(&self, with: &BTreeMap<String, String>) -> (bool, String) {
        let name = with
            .get("name")
            .cloned()
            .unwrap_or_else(|| "artifact".into());
        let to = self.runner.join("artifacts").join(&name);
        assert!(
            !to.exists(),
            "upload-artifact: the name {name} was already used"
        );
        std::fs::create_dir_all(&to).unwrap();
        let mut log = format!("actions/upload-artifact (emulated): {name}\n");
        let mut found = 0;
        for p in with.get("path").map(String::as_str).unwrap_or("").lines() {
            let p = Path::new(p.trim());
            if p.as_os_str().is_empty() {
                continue;
            }
            if p.is_dir() {
                copy_dir(p, &to.join(p.file_name().unwrap()));
                found += 1;
            } else if p.is_file() {
                std::fs::copy(p, to.join(p.file_name().unwrap())).unwrap();
                found += 1;
            } else {
                log.push_str(&format!("  no file at {}\n", p.display()));
            }
        }
        let policy = with
            .get("if-no-files-found")
            .map(String::as_str)
            .unwrap_or("warn");
        if found == 0 && policy == "error" {
            return (false, log + "  no files found: error");
        }
        (true, log)
    }
}

/// The text of a YAML scalar (GitHub reads numbers and booleans as their text).
fn scalar(v: &Yaml) -> String {
    match v {
        Yaml::String(s) | Yaml::Real(s) => s.clone(),
        Yaml::Integer(i) => i.to_string(),
        Yaml::Boolean(b) => b.to_string(),
        Yaml::Null => String::new(),
        other => panic!("not a scalar: {other:?}"),
    }
}

/// `KEY=VALUE` lines and `KEY<<DELIM` … `DELIM` blocks, as the runner reads `GITHUB_OUTPUT` and
/// `GITHUB_ENV`; a later value of a key replaces an earlier one.
pub fn read_file_command(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some((k, delim)) = line.split_once("<<") {
            let mut value = Vec::new();
            for l in lines.by_ref() {
                if l == delim {
                    break;
                }
                value.push(l);
            }
            out.insert(k.to_string(), value.join("\n"));
        } else if let Some((k, v)) = line.split_once('=') {
            out.insert(k.to_string(), v.to_string());
        } else if !line.trim().is_empty() {
            panic!("a file command line the runner would refuse: {line:?}");
        }
    }
    out
}

/// `${{ expr }}` of an `if:` may be written bare.
fn strip_braces(s: &str) -> String {
    let t = s.trim();
    t.strip_prefix("${{")
        .and_then(|t| t.strip_suffix("}}"))
        .unwrap_or(t)
        .trim()
        .to_string()
}

/// Replaces every `${{ expr }}` in `text` by its value.
fn interpolate(text: &str, ctx: &Context) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${{") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find("}}").expect("an unclosed ${{") + start;
        out.push_str(&eval(rest[start + 3..end].trim(), ctx));
        rest = &rest[end + 2..];
    }
    out.push_str(rest);
    out
}

fn truthy(v: &str) -> bool {
    !v.is_empty() && v != "false" && v != "0"
}

/// The value of an expression (strings; `true`/`false` for booleans).
fn eval(expr: &str, ctx: &Context) -> String {
    let tokens = tokenize(expr);
    let mut p = Parser {
        tokens,
        pos: 0,
        ctx,
    };
    let v = p.or();
    assert_eq!(p.pos, p.tokens.len(), "cannot evaluate {expr:?}");
    v
}

struct Parser<'a, 'b> {
    tokens: Vec<String>,
    pos: usize,
    ctx: &'a Context<'b>,
}

impl Parser<'_, '_> {
    fn peek(&self) -> Option<&str> {
        self.tokens.get(self.pos).map(String::as_str)
    }

    fn next(&mut self) -> String {
        let t = self.tokens[self.pos].clone();
        self.pos += 1;
        t
    }

    fn or(&mut self) -> String {
        let mut v = self.and();
        while self.peek() == Some("||") {
            self.next();
            let r = self.and();
            v = if truthy(&v) { v } else { r };
        }
        v
    }

    fn and(&mut self) -> String {
        let mut v = self.cmp();
        while self.peek() == Some("&&") {
            self.next();
            let r = self.cmp();
            v = if truthy(&v) { r } else { v };
        }
        v
    }

    fn cmp(&mut self) -> String {
        let l = self.unary();
        match self.peek() {
            Some("==") | Some("!=") => {
                let op = self.next();
                let r = self.unary();
                // GitHub compares strings case-insensitively.
                let eq = l.eq_ignore_ascii_case(&r);
                (if op == "==" { eq } else { !eq }).to_string()
            }
            _ => l,
        }
    }

    fn unary(&mut self) -> String {
        if self.peek() == Some("!") {
            self.next();
            return (!truthy(&self.unary())).to_string();
        }
        let t = self.next();
        if t == "(" {
            let v = self.or();
            assert_eq!(self.next(), ")");
            return v;
        }
        if let Some(s) = t.strip_prefix('\'') {
            return s.strip_suffix('\'').unwrap().replace("''", "'");
        }
        if self.peek() == Some("(") {
            self.next();
            assert_eq!(self.next(), ")", "functions take no argument here: {t}");
            let failed = self.ctx.job_failed;
            return match t.as_str() {
                "always" => true,
                "success" => !failed,
                "failure" => failed,
                "cancelled" => false,
                other => panic!("the harness does not evaluate {other}()"),
            }
            .to_string();
        }
        let parts: Vec<&str> = t.split('.').collect();
        match parts.as_slice() {
            ["true"] => "true".into(),
            ["false"] => "false".into(),
            ["inputs", name] => self
                .ctx
                .inputs
                .get(*name)
                .cloned()
                .unwrap_or_else(|| panic!("no input {name}")),
            ["steps", id, "outcome"] | ["steps", id, "conclusion"] => self
                .ctx
                .steps
                .get(*id)
                .map(|(o, _)| o.clone())
                .unwrap_or_default(),
            ["steps", id, "outputs", name] => self
                .ctx
                .steps
                .get(*id)
                .and_then(|(_, o)| o.get(*name).cloned())
                .unwrap_or_default(),
            _ => panic!("the harness does not evaluate {t:?}"),
        }
    }
}

fn tokenize(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '\'' {
            let mut j = i + 1;
            loop {
                if chars[j] == '\'' {
                    if chars.get(j + 1) == Some(&'\'') {
                        j += 2;
                        continue;
                    }
                    break;
                }
                j += 1;
            }
            out.push(chars[i..=j].iter().collect());
            i = j + 1;
        } else if "()!".contains(c) && !(c == '!' && chars.get(i + 1) == Some(&'=')) {
            out.push(c.to_string());
            i += 1;
        } else if ["&&", "||", "==", "!="]
            .iter()
            .any(|op| chars[i..].starts_with(&op.chars().collect::<Vec<_>>()))
        {
            out.push(chars[i..i + 2].iter().collect());
            i += 2;
        } else {
            let mut j = i;
            while j < chars.len() && (chars[j].is_alphanumeric() || "._-".contains(chars[j])) {
                j += 1;
            }
            assert!(j > i, "cannot read {s:?} at {i}");
            out.push(chars[i..j].iter().collect());
            i = j;
        }
    }
    out
}

/// Copies a directory tree to `to` (its parents made), keeping symlinks and modes.
pub fn copy_dir(from: &Path, to: &Path) {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    let out = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .output()
        .unwrap();
    assert!(out.status.success(), "cp -a: {out:?}");
}

#[test]
fn the_expression_subset_evaluates_as_github_does() {
    let inputs: BTreeMap<String, String> = [("plan".to_string(), "p.json".to_string())].into();
    let mut steps = BTreeMap::new();
    steps.insert(
        "run".to_string(),
        (
            "success".to_string(),
            BTreeMap::from([("exit-code".to_string(), "30".to_string())]),
        ),
    );
    steps.insert(
        "inputs".to_string(),
        ("failure".to_string(), BTreeMap::new()),
    );
    let ctx = Context {
        inputs: &inputs,
        steps: &steps,
        job_failed: true,
    };
    let e = |s: &str| eval(s, &ctx);
    assert_eq!(e("inputs.plan"), "p.json");
    assert_eq!(e("always() && steps.run.outcome == 'success'"), "true");
    assert_eq!(e("steps.inputs.outcome == 'success'"), "false");
    assert_eq!(e("success()"), "false");
    assert_eq!(e("failure() || false"), "true");
    assert_eq!(e("!cancelled()"), "true");
    assert_eq!(e("steps.run.outputs.exit-code != '0'"), "true");
    assert_eq!(
        interpolate("code ${{ steps.run.outputs.exit-code }}!", &ctx),
        "code 30!"
    );
    assert_eq!(
        read_file_command("a=1\nb<<EOF\nx\ny\nEOF\na=2\n"),
        BTreeMap::from([
            ("a".to_string(), "2".to_string()),
            ("b".to_string(), "x\ny".to_string())
        ])
    );
}
