//! One session, one place (issue 35): everything a command needs from the workspace it works
//! in, set up by one type. A [`Session`] is the workspace (with the runner's own files protected
//! from every tool and command write), the execution database's path, the policy file and the
//! redactor; it loads the policy, prepares `.acode/` (never through a link), opens the store,
//! resolves the OS sandbox and builds the [`Executor`]. `PlanRunner` and every CLI command
//! (`run`, `resume`, `approve`/`reject`, `validate`, `preview`, `tools`, `draft`, `review`, `do`,
//! `mcp`, `runs`/`show`, …) open one and ask it, so none of them sets these up its own way.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use thiserror::Error;

use crate::executor::{AutoDeny, Driven, Executor};
use crate::plan::{self, Plan, PlanError, ValidationContext};
use crate::policy::{Policy, PolicyError, SandboxMode};
use crate::redact::Redactor;
use crate::sandbox::OsSandbox;
use crate::store::{Store, StoreError};
use crate::workspace::state::{STATE_DIR, StateDirError};
use crate::workspace::{Workspace, absolute};

/// Where a session works: the workspace directory and, when given, the database and the policy
/// file. `SessionOptions::new(dir)` takes the defaults (`DIR/.acode/executions.db`,
/// `DIR/acode-policy.json` when present, a redactor from the environment).
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    /// The workspace directory.
    pub workspace: PathBuf,
    /// The execution database; `None` for the workspace's default.
    pub db: Option<PathBuf>,
    /// What named the database (`--db`, `ACODE_DB`): a database named on the command line must
    /// lie in an existing directory, and the refusal says what named it.
    pub db_named_by: Option<String>,
    /// The policy file (default: the workspace's `acode-policy.json` when present).
    pub policy: Option<PathBuf>,
    /// The redactor every record and output goes through (default: one from the environment).
    pub redactor: Option<Arc<Redactor>>,
}

impl SessionOptions {
    /// The defaults for the workspace `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> SessionOptions {
        SessionOptions {
            workspace: dir.into(),
            ..SessionOptions::default()
        }
    }
}

/// Why a session could not be set up, or one of its parts could not be had.
#[derive(Debug, Error)]
pub enum SessionError {
    /// The workspace is a file, not a directory (the caller's mistake).
    #[error("workspace {0}: not a directory")]
    NotADirectory(PathBuf),
    /// The workspace could not be opened.
    #[error("workspace {path}: {message}")]
    Workspace {
        /// The directory given.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// A database named explicitly lies in a directory that does not exist: a mistyped path is
    /// not a tree of directories created on the way (only the default `.acode/` is created).
    #[error("{from} {}: the directory {} does not exist (create it first)", path.display(), dir.display())]
    DatabaseDirectory {
        /// What named the database (`--db`, `ACODE_DB`).
        from: String,
        /// The database path.
        path: PathBuf,
        /// Its missing directory.
        dir: PathBuf,
    },
    /// A command that only reads the record found no database.
    #[error("no execution database at {} (run a plan first, or pass --db)", .0.display())]
    NoDatabase(PathBuf),
    /// The policy file is unreadable or invalid.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// `.acode/` or a runner file in it is a link, or could not be made.
    #[error(transparent)]
    State(#[from] StateDirError),
    /// The database could not be opened.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The OS sandbox the policy asks for cannot be set up here.
    #[error("{0}")]
    Sandbox(String),
    /// The plan could not be read or is invalid.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The policy's MCP servers cannot give tools to validate against.
    #[error("{0}")]
    Mcp(String),
}

/// What `validate` learns about a valid plan ([`Session::validate`]), for the CLI to print.
pub struct Validated {
    /// The plan, validated (its secrets taught to the redactor).
    pub plan: Plan,
    /// The policy it validated under.
    pub policy: Policy,
    /// The steps that will ask for confirmation (index into the plan's steps) and why, in plan
    /// order; complete unless [`Validated::confirmations_complete`] says otherwise (a step whose
    /// arguments cannot be worked out without running the plan ends the walk).
    pub confirmations: Vec<(usize, String)>,
    /// Whether every step was looked at for confirmations.
    pub confirmations_complete: bool,
    /// The skill each agent step resolves to, by step id.
    pub skills: Vec<(String, plan::skills::ResolvedSkill)>,
    /// Each MCP server the policy declares and the program it starts.
    pub mcp_programs: Vec<(String, String)>,
}

/// What `run` would decide about a plan now ([`Session::approval`]): `preview`'s last line, and
/// the MCP server's `preview_plan` and `plan_status`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ApprovalOutlook {
    /// `approved`, `pending`, `rejected` or `not runnable`.
    pub status: &'static str,
    /// Whether `run` would start it.
    pub may_run: bool,
    /// Why not, in `run`'s words.
    pub reason: Option<String>,
    /// Who approved it, as a run would show it: the verified principals (approvers' SSH keys)
    /// or the claimed name, and how it is proven (`alice@example.com (verified (ssh))`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
}

/// One command's view of its workspace: see the module docs. What it loads or opens, it does
/// once: the policy is read on first use and kept ([`Session::policy`]), and the database is one
/// connection, opened on first use and shared by every stage of the command
/// ([`Session::with_store`]) until it is handed to the executor that records the run
/// ([`Session::store`]).
pub struct Session {
    workspace: Workspace,
    db: PathBuf,
    policy_file: Option<PathBuf>,
    redactor: Arc<Redactor>,
    /// The policy, once read.
    policy: OnceLock<Policy>,
    /// The database connection, once opened (and until handed over).
    store: Mutex<Option<Store>>,
}

impl Session {
    /// Opens the workspace of `options`, decides the database path, and protects the runner's
    /// files — the database (and its journals), `.acode/`, and `plan` when it lies in the
    /// workspace — from every tool and command write. Nothing is created yet.
    pub fn open(options: SessionOptions, plan: Option<&Path>) -> Result<Session, SessionError> {
        let dir = &options.workspace;
        if dir.exists() && !dir.is_dir() {
            return Err(SessionError::NotADirectory(dir.clone()));
        }
        let workspace = Workspace::new(dir).map_err(|e| SessionError::Workspace {
            path: dir.clone(),
            message: e.to_string(),
        })?;
        let db = match &options.db {
            None => workspace.root().join(Store::DEFAULT_PATH),
            Some(path) => {
                let path = absolute(path);
                if let (Some(from), Some(parent)) = (&options.db_named_by, path.parent())
                    && !parent.is_dir()
                {
                    return Err(SessionError::DatabaseDirectory {
                        from: from.clone(),
                        dir: parent.to_path_buf(),
                        path,
                    });
                }
                path
            }
        };
        let mut session = Session {
            workspace,
            db,
            policy_file: options.policy,
            redactor: options
                .redactor
                .unwrap_or_else(|| Arc::new(Redactor::from_env())),
            policy: OnceLock::new(),
            store: Mutex::new(None),
        };
        let db = session.db.clone();
        session.workspace.protect(&db);
        session.workspace.protect(Path::new(STATE_DIR));
        if let Some(plan) = plan {
            session.protect(plan);
        }
        Ok(session)
    }

    /// Protects one more runner file (a plan found later, relative to the caller's directory).
    pub fn protect(&mut self, path: &Path) {
        self.workspace.protect(&absolute(path));
    }

    /// Protects the files `policy` names that decide who may approve (its `allowed_signers`)
    /// like the policy file itself: no tool or command of a run may write them, so a plan cannot
    /// add a key that approves the next one.
    pub fn protect_policy_files(&mut self, policy: &Policy) {
        if let (Some(rel), None) = (&policy.approvals.allowed_signers, &policy.approvals.base) {
            let path = self.workspace.root().join(rel);
            self.workspace.protect(&path);
        }
    }

    /// The workspace, with the runner's files protected.
    pub fn workspace(&self) -> &Workspace {
        &self.workspace
    }

    /// The execution database's path.
    pub fn db_path(&self) -> &Path {
        &self.db
    }

    /// Whether the database is the workspace's default one (in `.acode/`).
    fn default_db(&self) -> bool {
        self.db == self.workspace.root().join(Store::DEFAULT_PATH)
    }

    /// The redactor every record and output of the session goes through.
    pub fn redactor(&self) -> &Arc<Redactor> {
        &self.redactor
    }

    /// Reads and validates the plan at `path` with `vars` under `policy` — MCP tools accept any
    /// arguments until the approval's pins are known — and teaches the redactor its secrets
    /// ([`Session::learn_secrets`]) before anything about it is printed or recorded.
    pub fn load_plan(
        &self,
        path: &Path,
        vars: &BTreeMap<String, String>,
        policy: &Policy,
    ) -> Result<Plan, SessionError> {
        let registry = crate::tools::mcp::registry(policy, None).map_err(SessionError::Mcp)?;
        let ctx = ValidationContext {
            registry: &registry,
            workspace: &self.workspace,
            policy,
        };
        let plan = plan::load(path, vars, &ctx)?;
        self.learn_secrets(&plan);
        Ok(plan)
    }

    /// Teaches the redactor the plan's secret variable values and the workspace's persisted git
    /// credentials: every command that reads a plan (run, validate, preview, approve) asks this
    /// before anything is recorded or printed.
    pub fn learn_secrets(&self, plan: &Plan) {
        let vars = plan::variables::Variables::new(
            &plan.variables,
            &plan::validate::builtins(plan, &self.workspace, "validation"),
        );
        self.redactor
            .add_values(plan::variables::secret_values(plan, &vars));
        crate::policy::credentials::learn_workspace_secrets(self.workspace.root(), &self.redactor);
    }

    /// `validate`: the plan at `path` with `vars`, under the session's policy, and what running it
    /// will involve ([`Validated`]); a plan that is not valid is [`SessionError::Plan`] with every
    /// problem.
    pub fn validate(
        &self,
        path: &Path,
        vars: &BTreeMap<String, String>,
    ) -> Result<Validated, SessionError> {
        let policy = self.policy()?;
        let plan = self.load_plan(path, vars, &policy)?;
        let mut confirmations = Vec::new();
        let walked =
            crate::preview::each_confirmation(&plan, &self.workspace, &policy, |i, why| {
                confirmations.push((i, why));
            });
        let skills = self.resolved_skills(&plan);
        let mcp_programs = policy
            .mcp
            .servers
            .iter()
            .filter_map(|(name, server)| {
                crate::tools::mcp::server_program(server, &self.workspace)
                    .and_then(Result::ok)
                    .map(|p| (name.clone(), p.exec.display().to_string()))
            })
            .collect();
        Ok(Validated {
            plan,
            policy,
            confirmations,
            confirmations_complete: walked.is_ok(),
            skills,
            mcp_programs,
        })
    }

    /// The resolved skills of a valid plan's agent steps, by step id.
    fn resolved_skills(&self, plan: &Plan) -> Vec<(String, plan::skills::ResolvedSkill)> {
        let vars = plan::variables::Variables::new(
            &plan.variables,
            &plan::validate::builtins(plan, &self.workspace, "validation"),
        );
        plan.steps
            .iter()
            .filter(|s| s.tool == crate::tools::agent::NAME)
            .filter_map(|s| {
                let args = plan::validate::substitute_arguments(s, &vars).ok()?;
                let r = plan::skills::resolve_step(&self.workspace, &args).ok()??;
                Some((s.step_id.clone(), r))
            })
            .collect()
    }

    /// What `run` would decide about `plan` (read from `path`) under `policy` here: the same
    /// checks ([`super::authorization_for`]: approval file, signature under the configured key,
    /// policy binding, skills, MCP pins), as an outcome rather than an error.
    pub fn approval(&self, path: &Path, plan: &Plan, policy: &Policy) -> ApprovalOutlook {
        use super::RunnerError;
        use crate::plan::AuthError;
        let decided = plan::auth::approval_key()
            .map_err(|e| RunnerError::Setup(e.to_string()))
            .and_then(|key| {
                super::authorization_for(path, plan, policy, &self.workspace, key.as_deref())
            });
        match decided {
            Ok((auth, _, proof)) => ApprovalOutlook {
                status: "approved",
                may_run: true,
                reason: None,
                approved_by: Some(format!(
                    "{} ({})",
                    proof.approver(&auth.decided_by),
                    proof.standing()
                )),
            },
            Err(e) => ApprovalOutlook {
                status: match &e {
                    RunnerError::Unauthorized {
                        source: AuthError::Pending,
                        ..
                    } => "pending",
                    RunnerError::Unauthorized {
                        source: AuthError::Rejected { .. },
                        ..
                    } => "rejected",
                    _ => "not runnable",
                },
                may_run: false,
                reason: Some(e.to_string()),
                approved_by: None,
            },
        }
    }

    /// Records a decision on `plan` (read from `path`) under `policy` in the session's database,
    /// with the library's rules ([`super::record_decision`]: a standing rejection is overridden
    /// only when the request may override it): what was decided and where it was written.
    pub fn decide(
        &self,
        plan: &Plan,
        path: &Path,
        policy: &Policy,
        request: &super::DecisionRequest,
    ) -> Result<super::Decided, super::RunnerError> {
        self.with_store(|store| {
            super::record_decision(plan, path, &self.workspace, policy, store, request)
        })?
    }

    /// The decision `status` on `plan` (read from `path`) under `policy`, built as
    /// [`Session::decide`] would record it but neither recorded nor signed: what `approve
    /// --message` writes the signing message of ([`super::decision_for`]).
    pub fn decision(
        &self,
        plan: &Plan,
        path: &Path,
        policy: &Policy,
        status: plan::AuthStatus,
        by: Option<&str>,
    ) -> Result<plan::PlanAuthorization, super::RunnerError> {
        super::decision_for(plan, path, &self.workspace, policy, status, by)
    }

    /// The policy: the file given, else the workspace's `acode-policy.json`, else the defaults.
    /// This is the policy approvals are bound to; a run narrows it by the repository's own
    /// ([`Session::narrowed_policy`]). Read on the first call and kept: every stage of a command
    /// sees the same policy, and the file is read once.
    pub fn policy(&self) -> Result<Policy, SessionError> {
        if let Some(policy) = self.policy.get() {
            return Ok(policy.clone());
        }
        let loaded = Policy::load(self.policy_file.as_deref(), self.workspace.root())?;
        Ok(self.policy.get_or_init(|| loaded).clone())
    }

    /// The policy as the file says it now, read again and not kept: for a session that lives
    /// across many requests (the MCP server), where someone may change the file between them.
    pub fn current_policy(&self) -> Result<Policy, SessionError> {
        Ok(Policy::load(
            self.policy_file.as_deref(),
            self.workspace.root(),
        )?)
    }

    /// The workspace's own `acode-policy.json` when the session's policy came from elsewhere
    /// (`--policy FILE`, shipped beside an approved plan) and the workspace has one: its path
    /// and the policy in it. A file that cannot be read or is invalid is an error — a repository
    /// policy that cannot narrow is not silently dropped.
    pub fn repository_policy(&self) -> Result<Option<(PathBuf, Policy)>, SessionError> {
        let Some(given) = &self.policy_file else {
            return Ok(None);
        };
        let own = self.workspace.root().join(Policy::FILE_NAME);
        if std::fs::symlink_metadata(&own).is_err() {
            return Ok(None);
        }
        let same = match (std::fs::canonicalize(given), std::fs::canonicalize(&own)) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        };
        if same {
            return Ok(None);
        }
        let policy = Policy::load(Some(&own), self.workspace.root())?;
        Ok(Some((own, policy)))
    }

    /// The policy a run here gets: `approved` (what [`Session::policy`] read, which the approval
    /// is checked against) narrowed by the workspace's own policy when there is one to narrow it
    /// ([`Session::repository_policy`], [`crate::policy::narrow`]), with what that changed.
    pub fn narrowed_policy(
        &self,
        approved: Policy,
    ) -> Result<(Policy, Option<crate::store::PolicyNarrowing>), SessionError> {
        let Some((path, repository)) = self.repository_policy()? else {
            return Ok((approved, None));
        };
        let narrowed = crate::policy::narrow::narrow(&approved, &repository);
        let note = crate::store::PolicyNarrowing {
            path: path.display().to_string(),
            sha256: plan::auth::policy_sha256(&repository),
            ignored: narrowed.ignored,
            narrowed: narrowed.narrowed,
        };
        Ok((narrowed.policy, Some(note)))
    }

    /// The policy file a command would read: the one given, else the workspace's
    /// `acode-policy.json` when it exists (`None`: the defaults).
    pub fn policy_path(&self) -> Option<PathBuf> {
        match &self.policy_file {
            Some(p) => Some(absolute(p)),
            None => {
                let p = self.workspace.root().join(Policy::FILE_NAME);
                p.exists().then_some(p)
            }
        }
    }

    /// Checks `.acode/` and the runner's files in it without following links, creating it (its
    /// `tmp` and `.gitignore`) on first use.
    pub fn prepare_state(&self) -> Result<(), SessionError> {
        crate::workspace::state::prepare(self.workspace.root())?;
        Ok(())
    }

    /// The store, for writing: the session's one connection ([`Session::with_store`]), handed
    /// over to the caller (the executor that records the run keeps it). The session has none
    /// afterwards; a later call opens a new one.
    pub fn store(&self) -> Result<Store, SessionError> {
        self.open_for_writing()?;
        self.take()
    }

    /// The store, for reading what is recorded ([`Session::with_existing_store`]), handed over.
    pub fn existing_store(&self) -> Result<Store, SessionError> {
        self.open_existing()?;
        self.take()
    }

    /// Runs `f` on the session's one connection for writing, opened on first use: `.acode/`
    /// prepared first when the database is the default one, and the session's redactor on every
    /// record.
    pub fn with_store<R>(&self, f: impl FnOnce(&mut Store) -> R) -> Result<R, SessionError> {
        self.open_for_writing()?;
        self.using(f)
    }

    /// Runs `f` on the session's one connection for reading what is recorded: a missing
    /// database is an error (nothing is created), and an existing `.acode/` is checked first
    /// (opening creates WAL files beside the database, never through a link).
    pub fn with_existing_store<R>(
        &self,
        f: impl FnOnce(&mut Store) -> R,
    ) -> Result<R, SessionError> {
        self.open_existing()?;
        self.using(f)
    }

    /// The connection slot, whoever held the lock before.
    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Store>> {
        self.store
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Opens the connection for writing unless it is open.
    fn open_for_writing(&self) -> Result<(), SessionError> {
        if self.slot().is_some() {
            return Ok(());
        }
        if self.default_db() {
            self.prepare_state()?;
        }
        self.open_store()
    }

    /// Opens the connection to an existing database unless it is open.
    fn open_existing(&self) -> Result<(), SessionError> {
        if self.slot().is_some() {
            return Ok(());
        }
        if self.default_db()
            && std::fs::symlink_metadata(self.workspace.root().join(STATE_DIR)).is_ok()
        {
            self.prepare_state()?;
        }
        if !self.db.exists() {
            return Err(SessionError::NoDatabase(self.db.clone()));
        }
        self.open_store()
    }

    /// The database opened, every record through the session's redactor, kept as the
    /// session's connection.
    fn open_store(&self) -> Result<(), SessionError> {
        let mut store = Store::open(&self.db)?;
        store.set_redactor(self.redactor.clone());
        *self.slot() = Some(store);
        Ok(())
    }

    /// `f` on the open connection.
    fn using<R>(&self, f: impl FnOnce(&mut Store) -> R) -> Result<R, SessionError> {
        match self.slot().as_mut() {
            Some(store) => Ok(f(store)),
            None => Err(SessionError::NoDatabase(self.db.clone())),
        }
    }

    /// The open connection, handed over.
    fn take(&self) -> Result<Store, SessionError> {
        self.slot()
            .take()
            .ok_or_else(|| SessionError::NoDatabase(self.db.clone()))
    }

    /// The OS sandbox for `mode` with the policy's network and read paths ([`sandbox_for`]).
    pub fn sandbox(&self, policy: &Policy, mode: SandboxMode) -> Result<OsSandbox, SessionError> {
        sandbox_for(&self.workspace, policy, mode)
    }

    /// The sandbox a run would get here, resolved as a run resolves it (`auto` probes bwrap) but
    /// without starting its network proxy: what `preview` reports.
    pub fn resolve_sandbox(&self, policy: &Policy) -> Result<OsSandbox, SessionError> {
        OsSandbox::resolve(policy.sandbox, &self.workspace, &policy.limits)
            .map_err(|e| SessionError::Sandbox(e.to_string()))
    }

    /// An executor on this workspace and `store`, with `policy` and the session's redactor; the
    /// caller adds the callbacks, the tools, the sandbox and the model.
    pub fn executor(&self, store: Store, policy: Policy) -> Executor {
        Executor::new(self.workspace.clone(), store)
            .with_policy(policy)
            .with_redactor(self.redactor.clone())
    }

    /// An executor for the planner and reviewer stages (`draft`, `review`, `do`): this session's
    /// workspace, `policy` and database, the built-in tools, every confirmation denied (the
    /// stages' models only read: nothing a model wrote runs before a human approves it), and the
    /// model `llm` with `agent`'s limits. The caller adds its progress outputs and cancel flag.
    pub fn stage_executor(
        &self,
        policy: Policy,
        llm: Arc<dyn crate::llm::LlmClient>,
        agent: crate::executor::AgentSettings,
    ) -> Result<Executor, SessionError> {
        Ok(self
            .executor(self.store()?, policy)
            .with_registry(crate::tools::ToolRegistry::builtin())
            .with_confirmation(Arc::new(AutoDeny))
            .with_agent_settings(agent)
            .with_llm(llm))
    }
}

/// The OS sandbox for `mode` in `ws` (`auto` probes bwrap, else Landlock) with `policy`'s
/// network and read paths: what a run, `approve` (pinning MCP servers) and the MCP servers
/// started outside a run get. [`Session::sandbox`] for a session's workspace.
pub fn sandbox_for(
    ws: &Workspace,
    policy: &Policy,
    mode: SandboxMode,
) -> Result<OsSandbox, SessionError> {
    Ok(OsSandbox::resolve(mode, ws, &policy.limits)
        .and_then(|s| s.with_network(&policy.network, ws))
        .map_err(|e| SessionError::Sandbox(e.to_string()))?
        .with_read_paths(&policy.read_paths))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch workspace holding `policy` as its `acode-policy.json`.
    fn workspace_with_policy(policy: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("acode-session-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(Policy::FILE_NAME), policy).unwrap();
        dir
    }

    /// The policy is read once per session: a file changed (here: broken) after the first read
    /// does not change what the session's stages see; `current_policy` reads it again.
    #[test]
    fn the_policy_is_read_once_per_session() {
        let dir = workspace_with_policy(r#"{"allow_commands": ["first"]}"#);
        let session = Session::open(SessionOptions::new(&dir), None).unwrap();
        let first = session.policy().unwrap();
        assert_eq!(first.allow_commands, vec!["first".to_string()]);
        std::fs::write(dir.join(Policy::FILE_NAME), "{ not json").unwrap();
        let again = session.policy().unwrap();
        assert_eq!(again.allow_commands, first.allow_commands);
        assert!(session.current_policy().is_err());
        // A new session (a new command) reads the file as it is now.
        let next = Session::open(SessionOptions::new(&dir), None).unwrap();
        assert!(next.policy().is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The session's stages share one connection until it is handed over: once it is open, the
    /// database file removed, the next stage still reads through it (reopening would find no
    /// database), and the store handed over is that connection.
    #[test]
    fn the_stages_of_a_session_share_one_database_connection() {
        let dir = workspace_with_policy("{}");
        let session = Session::open(SessionOptions::new(&dir), None).unwrap();
        assert!(matches!(
            session.with_existing_store(|_| ()),
            Err(SessionError::NoDatabase(_))
        ));
        let first = session
            .with_store(|s| s.path().map(Path::to_path_buf))
            .unwrap();
        assert_eq!(first.as_deref(), Some(session.db_path()));
        // Not reopened: the database file removed, the open connection still answers.
        std::fs::remove_file(session.db_path()).unwrap();
        assert!(
            session
                .with_existing_store(|s| s.list_runs(1).is_ok())
                .unwrap()
        );
        let handed = session.store().unwrap();
        assert!(handed.list_runs(1).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
