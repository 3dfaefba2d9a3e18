//! Which program a command runs (SPEC §6 "Commands", "Toolchains"; issues #21 and #27): resolved
//! once, the same way when the plan is validated and when the command starts, and then run by that
//! path in every sandbox mode — so the program `validate` and `preview` show is the program that
//! runs.
//!
//! - A **bare name** (`python3`, `cargo`) is looked up in the absolute entries of the command's
//!   `PATH` (never its working directory). A pyenv shim is resolved to the interpreter it selects
//!   (`pyenv which`, in the command's working directory, so `.python-version` counts): the shim is a
//!   shell script that would otherwise pick a version at run time, inside a sandbox that may not
//!   see pyenv at all.
//! - A **workspace path** (`./gradlew`, `.venv/bin/python`, `node_modules/.bin/jest`) is resolved
//!   relative to the command's working directory by the workspace's resolver: `..` escapes,
//!   absolute paths outside and intermediate symlinks leading outside are refused. Its last
//!   component may be a symlink to a program outside (a virtualenv's `python`); the path is what
//!   runs (so the interpreter finds its `pyvenv.cfg`), the link's target is what executes.
//!
//! In every OS sandbox mode the program's **installation** is made visible read-only ([`Program::roots`]; the
//! one decision of what a command sees is [`crate::policy::view`]): the
//! virtualenv and the interpreter it was made from, a pyenv version, an nvm node, the
//! `node_modules` tree that holds a Node program (its dependencies are beside it), or the prefix
//! of `PREFIX/bin/prog`; never the home directory itself, and never a credential file inside what is
//! shown ([`crate::policy::credentials::credential_paths`]). A program that cannot be shown without exposing the home
//! directory is refused when the plan is validated.
//!
//! What ran is audited: [`Executed::sha256`] is the SHA-256 of the file executed (a script's own
//! bytes, or the binary a link leads to), recorded on the execution.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use crate::process::helper::{how_it_failed, run_helper, runner_env};
use crate::process::on_path;
use crate::workspace::{SandboxViolation, Workspace};

/// A program resolved for one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    /// As the step wrote it (`python3`, `.venv/bin/python`).
    pub written: String,
    /// The absolute path that is executed: the `PATH` match, the interpreter a pyenv shim selects,
    /// or the workspace path (links and all).
    pub exec: PathBuf,
    /// Where `exec` really is, every symlink followed: the file whose bytes run.
    pub real: PathBuf,
    /// The workspace-relative path, for a workspace program.
    pub workspace_path: Option<PathBuf>,
    /// Host directories a bwrap sandbox must show (read-only) for it to run, beyond the system
    /// directories and the workspace.
    pub roots: Vec<PathBuf>,
    /// Whether a `PATH` search for the name as written finds `exec` (not so for a pyenv shim's
    /// interpreter): then the name can stay the program's `argv[0]` inside bwrap too.
    pub found_by_name: bool,
}

/// What a command ran, for the audit: recorded on its execution (`program_path`,
/// `program_sha256`), in `tool_result` events and `show`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Executed {
    /// The path executed (a `PATH` match, a workspace path).
    pub path: PathBuf,
    /// SHA-256 of the file whose bytes ran (a script itself, or the binary a link leads to).
    pub sha256: String,
}

impl Program {
    /// The audit record of running this program now (hashing what `real` holds).
    pub fn executed(&self) -> std::io::Result<Executed> {
        Ok(Executed {
            path: self.exec.clone(),
            sha256: sha256(&self.real)?,
        })
    }
}

/// Why a program cannot be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgramError {
    /// A workspace path that leaves the workspace (or is otherwise refused by its resolver).
    #[error(transparent)]
    Violation(#[from] SandboxViolation),
    /// A bare name not on the command's `PATH`.
    #[error("{0}: not found on the command's PATH")]
    NotFound(String),
    /// A workspace path with nothing there (yet).
    #[error("{written}: no such program in the workspace ({})", .path.display())]
    Missing {
        /// As written.
        written: String,
        /// The workspace-relative path looked for.
        path: PathBuf,
    },
    /// There, but not something to execute.
    #[error("{0}")]
    NotExecutable(String),
    /// Its installation cannot be shown in the sandbox without exposing what must stay hidden.
    #[error("{0}")]
    Invisible(String),
}

/// Resolves `written` for a command in `cwd` (absolute, inside `ws`) whose `PATH` is `path_var`.
pub fn resolve(
    written: &str,
    ws: &Workspace,
    cwd: &Path,
    path_var: Option<&str>,
) -> Result<Program, ProgramError> {
    let key = (
        written.to_string(),
        ws.root().to_path_buf(),
        cwd.to_path_buf(),
        path_var.map(str::to_string),
    );
    let cached = MEMO.with(|m| m.borrow().as_ref().and_then(|m| m.get(&key).cloned()));
    if let Some(found) = cached {
        return found;
    }
    let found = resolve_now(written, ws, cwd, path_var);
    MEMO.with(|m| {
        if let Some(m) = m.borrow_mut().as_mut() {
            m.insert(key, found.clone());
        }
    });
    found
}

/// What [`with_memo`] remembers: a resolution by program as written, workspace, directory and
/// `PATH`.
type MemoKey = (String, PathBuf, PathBuf, Option<String>);

thread_local! {
    static MEMO: std::cell::RefCell<Option<HashMap<MemoKey, Result<Program, ProgramError>>>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `f` with [`resolve`] remembering its answers on this thread (see [`memo`]): for a
/// validation pass, which changes nothing on disk, so a plan running the same program in every
/// step looks it up once instead of once per step.
pub fn with_memo<T>(f: impl FnOnce() -> T) -> T {
    let _memo = memo();
    f()
}

/// Makes [`resolve`] remember its answers on this thread until the returned guard is dropped:
/// for a stretch in which nothing can change what a program name resolves to (a validation pass;
/// a call's admission and its first run, with [`forget`] after anything that waited). Never
/// around a command that runs (a step may install a program). Nested guards share the outer
/// memo, which the outermost one ends.
pub fn memo() -> Memo {
    let outer = MEMO.with(|m| {
        let mut m = m.borrow_mut();
        let outer = m.is_some();
        if !outer {
            *m = Some(HashMap::new());
        }
        outer
    });
    Memo { outer }
}

/// Forgets what the memo on this thread holds, if there is one: the filesystem may have changed
/// since (a confirmation prompt waited for a person).
pub fn forget() {
    MEMO.with(|m| {
        if let Some(m) = m.borrow_mut().as_mut() {
            m.clear();
        }
    });
}

/// The scope of a [`memo`]: dropped, the memo it started ends, a panic's unwinding included.
#[must_use = "the memo ends when this is dropped"]
pub struct Memo {
    outer: bool,
}

impl Drop for Memo {
    fn drop(&mut self) {
        if !self.outer {
            MEMO.with(|m| *m.borrow_mut() = None);
        }
    }
}

fn resolve_now(
    written: &str,
    ws: &Workspace,
    cwd: &Path,
    path_var: Option<&str>,
) -> Result<Program, ProgramError> {
    if written.contains('/') {
        return resolve_workspace_path(written, ws, cwd, path_var);
    }
    let found =
        on_path(written, path_var).ok_or_else(|| ProgramError::NotFound(written.to_string()))?;
    let (exec, found_by_name) = match pyenv_shim_target(&found, written, cwd, PYENV_TIMEOUT) {
        Some(target) => (target?, false),
        None => (found, true),
    };
    let real = std::fs::canonicalize(&exec).unwrap_or_else(|_| exec.clone());
    let roots = program_roots(&exec, &real, ws, path_var)?;
    Ok(Program {
        written: written.to_string(),
        exec,
        real,
        workspace_path: None,
        roots,
        found_by_name,
    })
}

/// The workspace-relative form of `written` joined to `cwd`, lexically (`./x` → `x`, `a/../b` →
/// `b`); `None` when it climbs out of the workspace.
pub fn workspace_relative(written: &str, ws: &Workspace, cwd: &Path) -> Option<PathBuf> {
    let joined = if Path::new(written).is_absolute() {
        PathBuf::from(written)
    } else {
        cwd.join(written)
    };
    let rel = joined.strip_prefix(ws.root()).ok()?;
    let mut out = PathBuf::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

fn resolve_workspace_path(
    written: &str,
    ws: &Workspace,
    cwd: &Path,
    path_var: Option<&str>,
) -> Result<Program, ProgramError> {
    let rel = workspace_relative(written, ws, cwd).ok_or_else(|| {
        SandboxViolation::new(
            written,
            "a program path must stay inside the workspace (no `..` out of it, no absolute path \
             elsewhere)",
        )
    })?;
    let abs = ws.root().join(&rel);
    // The directories on the way are the workspace resolver's: no component may lead outside.
    if let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) {
        ws.resolve(&parent.to_string_lossy())
            .map_err(|v| SandboxViolation::new(written, v.reason))?;
    }
    let meta = match std::fs::symlink_metadata(&abs) {
        Ok(m) => m,
        Err(_) => {
            return Err(ProgramError::Missing {
                written: written.to_string(),
                path: rel,
            });
        }
    };
    // The last component may be a link to a program outside (a virtualenv's interpreter).
    let real = if meta.file_type().is_symlink() {
        std::fs::canonicalize(&abs).map_err(|_| ProgramError::Missing {
            written: written.to_string(),
            path: rel.clone(),
        })?
    } else {
        abs.clone()
    };
    check_executable(written, &real)?;
    let roots = program_roots(&abs, &real, ws, path_var)?;
    Ok(Program {
        written: written.to_string(),
        exec: abs,
        real,
        workspace_path: Some(rel),
        roots,
        found_by_name: true,
    })
}

/// A regular file with an execute bit.
fn check_executable(written: &str, real: &Path) -> Result<(), ProgramError> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(real) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => Ok(()),
        Ok(m) if m.is_file() => Err(ProgramError::NotExecutable(format!(
            "{written}: not executable (give it an execute bit: chmod +x)"
        ))),
        Ok(_) => Err(ProgramError::NotExecutable(format!(
            "{written}: not a regular file"
        ))),
        Err(e) => Err(ProgramError::NotExecutable(format!("{written}: {e}"))),
    }
}

/// How long `pyenv which` may take.
const PYENV_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// For a pyenv shim (`…/shims/NAME` next to a pyenv installation): the interpreter it selects in
/// `cwd`, as `pyenv which` says, asked through [`run_helper`]: a pyenv that does not answer within
/// `timeout` is killed with its process group and the program is refused, so a hung pyenv cannot
/// hang a run. Cached per (shim, directory) for the process.
fn pyenv_shim_target(
    found: &Path,
    name: &str,
    cwd: &Path,
    timeout: std::time::Duration,
) -> Option<Result<PathBuf, ProgramError>> {
    let shims = found.parent()?;
    if shims.file_name()? != "shims" {
        return None;
    }
    let pyenv = shims.parent()?.join("bin/pyenv");
    let pyenv = if pyenv.is_file() {
        pyenv
    } else {
        // A packaged pyenv keeps its command elsewhere; the shim itself names `pyenv`.
        let text = std::fs::read_to_string(found).ok()?;
        if !text.contains("pyenv") {
            return None;
        }
        on_path("pyenv", std::env::var("PATH").ok().as_deref())?
    };
    static CACHE: Mutex<Option<HashMap<(PathBuf, PathBuf), PathBuf>>> = Mutex::new(None);
    let key = (found.to_path_buf(), cwd.to_path_buf());
    if let Some(hit) = CACHE
        .lock()
        .ok()
        .and_then(|c| c.as_ref().and_then(|m| m.get(&key).cloned()))
    {
        return Some(Ok(hit));
    }
    let mut env = runner_env();
    env.push((
        "PYENV_ROOT".to_string(),
        shims.parent()?.to_string_lossy().into_owned(),
    ));
    let argv = vec![
        pyenv.to_string_lossy().into_owned(),
        "which".to_string(),
        name.to_string(),
    ];
    let result = match run_helper(argv, cwd, env, timeout) {
        Ok(o) if o.success() => {
            let path = PathBuf::from(o.stdout.text.trim());
            if path.is_absolute() {
                Ok(path)
            } else {
                Err(ProgramError::NotFound(name.to_string()))
            }
        }
        Ok(o) => Err(ProgramError::Invisible(format!(
            "{name} is a pyenv shim, and `pyenv which {name}` failed ({}): {}",
            how_it_failed(&o, timeout),
            o.stderr.text.trim()
        ))),
        Err(e) => Err(ProgramError::Invisible(format!(
            "{name} is a pyenv shim, and pyenv cannot be run: {e}"
        ))),
    };
    if let (Ok(path), Ok(mut cache)) = (&result, CACHE.lock()) {
        cache
            .get_or_insert_with(HashMap::new)
            .insert(key, path.clone());
    }
    Some(result)
}

/// The home directory of the runner.
/// What a bwrap sandbox must show for a program executed as `exec` whose bytes are at `real`: the
/// installations of both. A virtualenv's `bin/python3` on `PATH` links to a system interpreter,
/// yet the interpreter finds its packages through the link's own directory (`pyvenv.cfg`), so the
/// virtualenv must be shown as well as where the link leads.
fn program_roots(
    exec: &Path,
    real: &Path,
    ws: &Workspace,
    path_var: Option<&str>,
) -> Result<Vec<PathBuf>, ProgramError> {
    let mut roots = Vec::new();
    // A script runs its `#!` interpreter, which must be visible too (a virtualenv's `bin/pip`
    // names the virtualenv's python, a link to an interpreter outside). Best effort: when it
    // cannot be shown, the script fails as it would have. System scripts name system interpreters.
    if !crate::policy::host::dirs::is_system(real)
        && let Some(interp) = shebang_interpreter(real, path_var)
    {
        let interp_real = std::fs::canonicalize(&interp).unwrap_or_else(|_| interp.clone());
        let _ = add_program_roots(&interp, &interp_real, ws, &mut roots);
    }
    add_program_roots(exec, real, ws, &mut roots)?;
    Ok(roots)
}

/// Adds the installations of a program executed as `exec` whose bytes are at `real`.
fn add_program_roots(
    exec: &Path,
    real: &Path,
    ws: &Workspace,
    roots: &mut Vec<PathBuf>,
) -> Result<(), ProgramError> {
    if exec == real && shown_already(real, ws) {
        // The common case (`/usr/bin/true`): nothing to show, nothing to look up.
        return Ok(());
    }
    // The link's own directory, its intermediate links followed (the last component is the link).
    let exec_dir = exec.parent().and_then(|d| std::fs::canonicalize(d).ok());
    if let (Some(dir), Some(name)) = (exec_dir, exec.file_name()) {
        add_install_root(&dir.join(name), ws, roots, 0)?;
    }
    add_install_root(real, ws, roots, 0)
}

/// The interpreter the `#!` line of the script at `path` names: the path itself, or for
/// `#!/usr/bin/env NAME` (options such as `-S` skipped) NAME on the command's `PATH`. `None` for
/// anything that is not a script.
fn shebang_interpreter(path: &Path, path_var: Option<&str>) -> Option<PathBuf> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(path).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = line.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    let interp = PathBuf::from(words.next()?);
    if interp.file_name().is_some_and(|f| f == "env") {
        let name = words.find(|w| !w.starts_with('-'))?;
        return on_path(name, path_var);
    }
    Some(interp)
}

/// Whether every bwrap sandbox shows `path` already: the workspace and the system directories.
fn shown_already(path: &Path, ws: &Workspace) -> bool {
    path.starts_with(ws.root()) || crate::policy::host::dirs::is_system(path)
}

fn add_install_root(
    real: &Path,
    ws: &Workspace,
    roots: &mut Vec<PathBuf>,
    depth: u32,
) -> Result<(), ProgramError> {
    if shown_already(real, ws) || depth > 2 {
        return Ok(());
    }
    let mut root = None;
    let ancestors: Vec<&Path> = real.ancestors().skip(1).collect();
    // A virtualenv, and the interpreter it was made from.
    if let Some(venv) = ancestors.iter().find(|a| a.join("pyvenv.cfg").is_file()) {
        root = Some(venv.to_path_buf());
        if let Some(home) = venv_home(venv) {
            for candidate in ["python3", "python"] {
                if let Ok(interp) = std::fs::canonicalize(home.join(candidate)) {
                    add_install_root(&interp, ws, roots, depth + 1)?;
                    break;
                }
            }
        }
    }
    // A pyenv version, an nvm node: `…/.pyenv/versions/V`, `…/.nvm/versions/node/V`.
    if root.is_none() {
        root = ancestors
            .iter()
            .find(|a| {
                let parent = a.parent();
                parent.is_some_and(|p| {
                    p.ends_with(".pyenv/versions") || p.ends_with(".nvm/versions/node")
                })
            })
            .map(|a| a.to_path_buf());
    }
    // A Node program: the `node_modules` tree that holds it (the outermost one, since Node looks
    // for a package's dependencies in every `node_modules` above it), as a virtualenv is a Python
    // program's. `npm install --prefix DIR pkg` puts `pkg`, its dependencies beside it and
    // `.bin/pkg` in `DIR/node_modules`; the prefix itself (its `.npmrc`, anything else there)
    // stays hidden.
    if root.is_none() {
        root = ancestors
            .iter()
            .rev()
            .find(|a| a.file_name().is_some_and(|n| n == "node_modules"))
            .map(|a| a.to_path_buf());
    }
    // `PREFIX/bin/prog` → `PREFIX`, unless that is the home directory or above it.
    let home = crate::policy::host::dirs::home();
    let too_wide =
        |p: &Path| p.parent().is_none() || home.as_ref().is_some_and(|h| h.starts_with(p));
    if root.is_none() {
        let dir = real.parent().unwrap_or(Path::new("/"));
        let prefix = (dir.file_name().is_some_and(|n| n == "bin"))
            .then(|| dir.parent())
            .flatten()
            .filter(|p| !too_wide(p));
        root = Some(prefix.unwrap_or(dir).to_path_buf());
    }
    let Some(root) = root else { return Ok(()) };
    if too_wide(&root) {
        return Err(ProgramError::Invisible(format!(
            "{} cannot be shown in the sandbox without exposing {} (the home directory or \
             above), which no sandbox mode shows; install it elsewhere (a prefix of its own, \
             a virtualenv)",
            real.display(),
            root.display()
        )));
    }
    if !roots.iter().any(|r| root.starts_with(r)) {
        roots.retain(|r| !r.starts_with(&root));
        roots.push(root);
    }
    Ok(())
}

/// The `home = DIR` line of a virtualenv's `pyvenv.cfg`: where its interpreter came from.
fn venv_home(venv: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(venv.join("pyvenv.cfg")).ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == "home").then(|| PathBuf::from(v.trim()))
    })
}

/// The SHA-256 (hex) of the file at `path`, cached per process by (device, inode, size, mtime):
/// a command's program is hashed for the audit before every run, and most are the same binary.
pub fn sha256(path: &Path) -> std::io::Result<String> {
    use std::os::unix::fs::MetadataExt;
    // ctime too: a program's owner can set its mtime back after changing it (`touch -d`), but
    // not its ctime, which any change of the file moves.
    type Key = (u64, u64, u64, i64, i64, i64, i64);
    static CACHE: Mutex<Option<HashMap<Key, String>>> = Mutex::new(None);
    let mut file = std::fs::File::open(path)?;
    let m = file.metadata()?;
    let key = (
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
    );
    if let Some(hit) = CACHE
        .lock()
        .ok()
        .and_then(|c| c.as_ref().and_then(|m| m.get(&key).cloned()))
    {
        return Ok(hit);
    }
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = std::io::Read::read(&mut file, &mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    let hex = crate::util::hex(&hasher.finalize());
    if let Ok(mut cache) = CACHE.lock() {
        cache
            .get_or_insert_with(HashMap::new)
            .insert(key, hex.clone());
    }
    Ok(hex)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> (PathBuf, Workspace) {
        let base = std::env::temp_dir().join(format!("acode-prog-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(base.join("ws/sub")).unwrap();
        let ws = Workspace::new(&base.join("ws")).unwrap();
        (base.canonicalize().unwrap(), ws)
    }

    #[test]
    fn a_memo_answers_for_its_pass_only() {
        let (base, ws) = ws();
        let bin = base.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let path = bin.to_string_lossy().into_owned();
        let look = || resolve("tool", &ws, ws.root(), Some(&path)).map(|p| p.exec);
        with_memo(|| {
            assert_eq!(look(), Err(ProgramError::NotFound("tool".into())));
            // Made during the pass (validation never does this): the pass keeps its first answer,
            // nested passes share it.
            exe(&bin.join("tool"), "#!/bin/sh\n");
            assert!(look().is_err());
            assert!(with_memo(look).is_err());
        });
        assert_eq!(look(), Ok(bin.join("tool")), "the memo ended with its pass");
        assert_eq!(with_memo(look), Ok(bin.join("tool")));

        // `forget` drops what a memo holds, and the guard ends it.
        let guard = memo();
        assert!(look().is_ok());
        std::fs::remove_file(bin.join("tool")).unwrap();
        assert!(look().is_ok(), "remembered");
        forget();
        assert!(look().is_err(), "looked up again");
        exe(&bin.join("tool"), "#!/bin/sh\n");
        assert!(look().is_err(), "remembered again");
        drop(guard);
        assert!(look().is_ok());
    }

    #[test]
    fn a_scripts_interpreter_is_read_from_its_first_line() {
        let (base, _ws) = ws();
        let bin = base.join("bin");
        exe(&bin.join("tool"), "#!/bin/sh\necho\n");
        exe(&base.join("direct"), "#!/opt/py/bin/python3 -u\nprint()\n");
        exe(&base.join("via-env"), "#!/usr/bin/env -S tool --flag\n");
        exe(&base.join("binary"), "\x7fELF");
        let path = bin.to_string_lossy().into_owned();
        assert_eq!(
            shebang_interpreter(&base.join("direct"), None),
            Some(PathBuf::from("/opt/py/bin/python3"))
        );
        assert_eq!(
            shebang_interpreter(&base.join("via-env"), Some(&path)),
            Some(bin.join("tool")),
            "env's NAME is looked up on the command's PATH, options skipped"
        );
        assert_eq!(shebang_interpreter(&base.join("binary"), None), None);
    }

    fn exe(path: &Path, text: &str) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// A pyenv that hangs (its own child holding the output pipe too) is killed, with that child,
    /// at the deadline; the shim is refused with a message saying so, and nothing is cached: the
    /// run goes on to report the step's error instead of waiting on pyenv.
    #[test]
    fn a_hung_pyenv_is_killed_at_its_deadline_and_the_shim_refused() {
        let (base, _ws) = ws();
        let root = base.join("pyenv");
        exe(
            &root.join("shims/python3"),
            "#!/bin/sh\nexec pyenv exec python3 \"$@\"\n",
        );
        let pid_file = base.join("grandchild.pid");
        exe(
            &root.join("bin/pyenv"),
            &format!(
                "#!/bin/sh\nsleep 60 &\necho $! > '{}'\nsleep 60\n",
                pid_file.display()
            ),
        );
        let start = std::time::Instant::now();
        let got = pyenv_shim_target(
            &root.join("shims/python3"),
            "python3",
            &base,
            std::time::Duration::from_millis(500),
        );
        let took = start.elapsed();
        match got {
            Some(Err(ProgramError::Invisible(msg))) => assert!(
                msg.contains("`pyenv which python3` failed (no answer within"),
                "{msg}"
            ),
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert!(took < std::time::Duration::from_secs(10), "took {took:?}");
        let pid: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Gone or a zombie (a killed process waits for its reaper), within a moment.
        let running = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
            })
        };
        let until = std::time::Instant::now() + std::time::Duration::from_secs(3);
        while running() && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(!running(), "pyenv's own child outlived the deadline");
        // Answered again (not cached), and again within the deadline.
        exe(
            &root.join("bin/pyenv"),
            "#!/bin/sh\necho /usr/bin/python3\n",
        );
        assert_eq!(
            pyenv_shim_target(
                &root.join("shims/python3"),
                "python3",
                &base,
                std::time::Duration::from_secs(10),
            ),
            Some(Ok(PathBuf::from("/usr/bin/python3")))
        );
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn workspace_paths_resolve_inside_and_escapes_are_refused() {
        let (base, ws) = ws();
        let root = ws.root().to_path_buf();
        exe(&root.join("scripts/check.sh"), "#!/bin/sh\n");
        let p = resolve("./scripts/check.sh", &ws, &root, None).unwrap();
        assert_eq!(
            p.workspace_path.as_deref(),
            Some(Path::new("scripts/check.sh"))
        );
        assert_eq!(p.exec, root.join("scripts/check.sh"));
        assert!(p.roots.is_empty());
        // From a subdirectory, relative to it.
        let p = resolve("../scripts/check.sh", &ws, &root.join("sub"), None).unwrap();
        assert_eq!(p.exec, root.join("scripts/check.sh"));
        // Out of the workspace.
        for bad in ["../x", "/etc/passwd", "sub/../../x"] {
            assert!(
                matches!(
                    resolve(bad, &ws, &root, None),
                    Err(ProgramError::Violation(_))
                ),
                "{bad}"
            );
        }
        // An intermediate symlink leading outside.
        std::fs::create_dir_all(base.join("elsewhere")).unwrap();
        exe(&base.join("elsewhere/x"), "#!/bin/sh\n");
        std::os::unix::fs::symlink(base.join("elsewhere"), root.join("link")).unwrap();
        assert!(matches!(
            resolve("link/x", &ws, &root, None),
            Err(ProgramError::Violation(_))
        ));
        // Missing, and not executable.
        assert!(matches!(
            resolve(".venv/bin/python", &ws, &root, None),
            Err(ProgramError::Missing { .. })
        ));
        std::fs::write(root.join("plain.sh"), "x").unwrap();
        assert!(matches!(
            resolve("./plain.sh", &ws, &root, None),
            Err(ProgramError::NotExecutable(_))
        ));
    }

    #[test]
    fn a_last_component_link_runs_its_target_whose_installation_is_shown() {
        let (base, ws) = ws();
        let root = ws.root().to_path_buf();
        // An interpreter installed under a prefix of its own, linked from the workspace.
        let interp = base.join("opt/py/bin/python3.11");
        exe(&interp, "#!/bin/sh\n");
        std::fs::create_dir_all(root.join(".venv/bin")).unwrap();
        std::fs::write(
            root.join(".venv/pyvenv.cfg"),
            format!("home = {}\n", base.join("opt/py/bin").display()),
        )
        .unwrap();
        std::os::unix::fs::symlink(&interp, root.join(".venv/bin/python")).unwrap();
        let p = resolve(".venv/bin/python", &ws, &root, None).unwrap();
        assert_eq!(p.exec, root.join(".venv/bin/python"));
        assert_eq!(p.real, interp);
        assert_eq!(p.roots, vec![base.join("opt/py")]);
    }

    #[test]
    fn a_node_program_shows_the_node_modules_tree_that_holds_it() {
        let (base, ws) = ws();
        // `npm install --prefix DIR tool`: the package, its dependency beside it, the bin link.
        let modules = base.join("prefix/node_modules");
        exe(&modules.join("tool/cli.js"), "#!/bin/sh\n");
        std::fs::create_dir_all(modules.join("dep")).unwrap();
        std::fs::write(modules.join("dep/index.js"), "module.exports = 1;\n").unwrap();
        std::fs::write(base.join("prefix/.npmrc"), "//registry/:_authToken=x\n").unwrap();
        std::fs::create_dir_all(modules.join(".bin")).unwrap();
        std::os::unix::fs::symlink("../tool/cli.js", modules.join(".bin/tool")).unwrap();
        let path = modules.join(".bin").to_string_lossy().into_owned();
        let p = resolve("tool", &ws, ws.root(), Some(&path)).unwrap();
        assert_eq!(p.real, modules.join("tool/cli.js"));
        assert_eq!(p.roots, vec![modules.clone()], "the tree, not the prefix");
        // A package nested in another's `node_modules`: the outermost tree, where Node also looks.
        exe(
            &modules.join("tool/node_modules/inner/bin.js"),
            "#!/bin/sh\n",
        );
        std::os::unix::fs::symlink(
            "../tool/node_modules/inner/bin.js",
            modules.join(".bin/inner"),
        )
        .unwrap();
        let p = resolve("inner", &ws, ws.root(), Some(&path)).unwrap();
        assert_eq!(p.roots, vec![modules]);
    }

    #[test]
    fn bare_names_are_found_on_path_only() {
        let (base, ws) = ws();
        exe(&base.join("tools/bin/mytool"), "#!/bin/sh\n");
        exe(&ws.root().join("mytool"), "#!/bin/sh\n");
        let path = format!("relative:{}", base.join("tools/bin").display());
        let p = resolve("mytool", &ws, ws.root(), Some(&path)).unwrap();
        assert_eq!(p.exec, base.join("tools/bin/mytool"));
        assert_eq!(p.roots, vec![base.join("tools")]);
        assert!(matches!(
            resolve("nonesuch", &ws, ws.root(), Some(&path)),
            Err(ProgramError::NotFound(_))
        ));
        assert!(
            resolve("true", &ws, ws.root(), Some("/usr/bin:/bin"))
                .unwrap()
                .roots
                .is_empty()
        );
    }

    #[test]
    fn hashes_are_of_the_bytes_executed() {
        let (base, _ws) = ws();
        let f = base.join("f");
        std::fs::write(&f, "abc").unwrap();
        assert_eq!(
            sha256(&f).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
