//! The library's front door: one type that takes a workspace, a plan path and options and does
//! everything a run needs, with the command line's safety by default.
//!
//! [`PlanRunner::prepare`] protects the runner's own files (`.acode/`, the database, the plan) from
//! tool writes and opens `.acode/` without following links, loads the policy, loads and validates
//! the plan, verifies its approval (hash, signature under the runner's key, policy binding, skills) and
//! resolves the OS sandbox (`auto` unless the policy or the options say otherwise). Then
//! [`PlanRunner::run`] opens the execution database and runs the plan with the caller's callbacks.
//! Weakening any of this takes an explicit, named call on [`RunOptions`]
//! ([`RunOptions::without_os_sandbox`], [`RunOptions::without_signature_check`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use thiserror::Error;

use crate::error::exit;
use crate::executor::{
    AutoDeny, ConfirmationCallback, ExecutionError, ExecutionResult, Executor, NoopProgress,
    ProgressCallback,
};
use crate::plan::auth::{AuthStatus, PlanAuthorization};
use crate::plan::{self, ApprovedPlan, AuthError, Plan, PlanError, ValidationContext};
use crate::sandbox::paths::absolute;
use crate::sandbox::redact::Redactor;
use crate::sandbox::{OsSandbox, Policy, SandboxMode, Workspace};
use crate::store::{DecisionRow, Store, StoreError, Verdict};
use crate::tools::ToolRegistry;

/// What a run is prepared with. `RunOptions::default()` is the command line's defaults: the
/// workspace's database, its `acode-policy.json`, the OS sandbox the policy names (`auto` by
/// default) and the approval key from `ACODE_APPROVAL_KEY` / `ACODE_APPROVAL_KEY_FILE`.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// The execution database (default `WORKSPACE/.acode/executions.db`).
    pub db: Option<PathBuf>,
    /// The policy file (default `WORKSPACE/acode-policy.json` when present).
    pub policy: Option<PathBuf>,
    /// `--var` values: only variables the plan declares.
    pub vars: BTreeMap<String, String>,
    /// The OS sandbox (default: the policy's, `auto`). `SandboxMode::None` here is refused: use
    /// [`RunOptions::without_os_sandbox`], so weakening is visible in the code.
    pub sandbox: Option<SandboxMode>,
    /// The redactor every record and output goes through (default: one from the environment); the
    /// runner teaches it the plan's secret values.
    pub redactor: Option<Arc<Redactor>>,
    /// Set only by the named weakening calls.
    no_os_sandbox: bool,
    no_signature_check: bool,
}

impl RunOptions {
    /// Runs commands without any OS sandbox (path checks and the policy still apply).
    pub fn without_os_sandbox(mut self) -> Self {
        self.no_os_sandbox = true;
        self
    }

    /// Accepts an unsigned approval even when an approval key is configured.
    pub fn without_signature_check(mut self) -> Self {
        self.no_signature_check = true;
        self
    }
}

/// Why a run could not be prepared or did not take place; [`RunnerError::exit_code`] is the one
/// mapping to exit codes.
#[derive(Debug, Error)]
pub enum RunnerError {
    /// The workspace or the policy cannot be used.
    #[error("{0}")]
    Setup(String),
    /// `.acode/` is a link (refused) or cannot be created.
    #[error(transparent)]
    State(#[from] crate::sandbox::state::StateDirError),
    /// The plan cannot be read or is invalid (every problem listed).
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The plan is not authorized to run.
    #[error(
        "{path}: not authorized: {source}\n  review the plan, then approve it with: acode-run approve {path}"
    )]
    Unauthorized {
        /// The plan file.
        path: String,
        /// Why.
        source: AuthError,
    },
    /// Approving was asked without overriding, and these exact plan bytes were rejected: a
    /// rejection stands until someone approves explicitly (`acode-run approve`), which is
    /// recorded as an override.
    #[error(
        "{path}: not authorized: these exact bytes (sha256 {}) were rejected by {} at {} UTC{}\n  \
         `run --approve` does not override a rejection; to override it, review the plan, then: \
         acode-run approve {path}",
        .rejection.plan_sha256,
        .rejection.decided_by,
        crate::error::format_ms(.rejection.decided_at),
        .rejection.reason.as_deref().map(|why| format!(": {why}")).unwrap_or_default()
    )]
    Rejected {
        /// The plan file.
        path: String,
        /// The rejection that stands.
        rejection: Box<DecisionRow>,
    },
    /// The approval file cannot be written.
    #[error("cannot write {path}: {source}")]
    ApprovalWrite {
        /// The approval file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The approval file itself cannot be used (unreadable, malformed).
    #[error("{0}")]
    ApprovalInput(AuthError),
    /// The requested OS sandbox cannot be used here (fails closed).
    #[error("the OS sandbox was requested but cannot be used: {0}")]
    Sandbox(String),
    /// `SandboxMode::None` was asked for through the plain option.
    #[error(
        "no OS sandbox was requested through RunOptions::sandbox; call RunOptions::without_os_sandbox to run without one"
    )]
    WeakeningNotExplicit,
    /// The execution database cannot be used.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The run could not start or be recorded.
    #[error(transparent)]
    Execution(#[from] ExecutionError),
}

impl RunnerError {
    /// The process exit code for this error (SPEC §10).
    pub fn exit_code(&self) -> i32 {
        match self {
            RunnerError::Setup(_)
            | RunnerError::ApprovalInput(_)
            | RunnerError::Sandbox(_)
            | RunnerError::WeakeningNotExplicit => exit::USAGE,
            RunnerError::State(crate::sandbox::state::StateDirError::Refused { .. }) => exit::USAGE,
            RunnerError::State(_) => exit::INTERNAL,
            RunnerError::Plan(e) => e.exit_code(),
            RunnerError::Unauthorized { .. } | RunnerError::Rejected { .. } => exit::UNAUTHORIZED,
            RunnerError::ApprovalWrite { .. } => exit::INTERNAL,
            RunnerError::Store(_) => exit::INTERNAL,
            RunnerError::Execution(e) => e.exit_code(),
        }
    }
}

/// A plan that is loaded, valid, authorized and ready to run in its workspace.
pub struct PlanRunner {
    workspace: Workspace,
    db: PathBuf,
    policy: Policy,
    registry: ToolRegistry,
    approved: ApprovedPlan,
    sandbox: OsSandbox,
    redactor: Arc<Redactor>,
    confirm: Arc<dyn ConfirmationCallback>,
    progress: Arc<dyn ProgressCallback>,
    cancel: Arc<AtomicBool>,
}

impl PlanRunner {
    /// Loads, validates and verifies the plan at `plan_path` for `workspace` (see the module docs).
    /// Confirmations are denied until [`PlanRunner::with_confirmation`] says otherwise.
    pub fn prepare(
        workspace: &Path,
        plan_path: &Path,
        options: RunOptions,
    ) -> Result<PlanRunner, RunnerError> {
        let setup =
            |what: &str, e: &dyn std::fmt::Display| RunnerError::Setup(format!("{what}: {e}"));
        let mut ws = Workspace::new(workspace)
            .map_err(|e| setup(&format!("workspace {}", workspace.display()), &e))?;
        let db = match &options.db {
            Some(p) => absolute(p),
            None => ws.root().join(Store::DEFAULT_PATH),
        };
        ws.protect(&db);
        ws.protect(Path::new(crate::sandbox::state::STATE_DIR));
        ws.protect(&absolute(plan_path));
        crate::sandbox::state::prepare(ws.root())?;
        let policy = Policy::load(options.policy.as_deref(), ws.root())
            .map_err(|e| RunnerError::Setup(e.to_string()))?;
        let registry = ToolRegistry::builtin();
        let plan = {
            let ctx = ValidationContext {
                registry: &registry,
                workspace: &ws,
                policy: &policy,
            };
            plan::load(plan_path, &options.vars, &ctx)?
        };
        let redactor = options
            .redactor
            .clone()
            .unwrap_or_else(|| Arc::new(Redactor::from_env()));
        learn_secrets(&plan, &ws, &redactor);
        let unauthorized = |source: AuthError| RunnerError::Unauthorized {
            path: plan_path.display().to_string(),
            source,
        };
        let authorization = plan::auth::load(plan_path, &plan).map_err(|e| match e {
            AuthError::Input { .. } => RunnerError::ApprovalInput(e),
            other => unauthorized(other),
        })?;
        let key = if options.no_signature_check {
            None
        } else {
            plan::auth::approval_key().map_err(|e| RunnerError::Setup(e.to_string()))?
        };
        // Hash, signature, policy binding, and the skill files the plan uses (docs/agents.md).
        let approved = ApprovedPlan::new_verified(plan, authorization, key.as_deref())
            .and_then(|a| a.check_policy(&policy).map(|()| a))
            .and_then(|a| a.check_skills(&ws).map(|()| a))
            .map_err(unauthorized)?;
        let mode = if options.no_os_sandbox {
            SandboxMode::None
        } else {
            match options.sandbox.unwrap_or(policy.sandbox) {
                SandboxMode::None if options.sandbox.is_some() => {
                    return Err(RunnerError::WeakeningNotExplicit);
                }
                mode => mode,
            }
        };
        let sandbox = OsSandbox::resolve(mode, &ws, &policy.limits)
            .map_err(|e| RunnerError::Sandbox(e.to_string()))?
            .with_read_paths(&policy.read_paths);
        Ok(PlanRunner {
            workspace: ws,
            db,
            policy,
            registry,
            approved,
            sandbox,
            redactor,
            confirm: Arc::new(AutoDeny),
            progress: Arc::new(NoopProgress),
            cancel: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Who says yes to calls that need confirmation (default: nobody, every such call is denied).
    pub fn with_confirmation(mut self, confirm: Arc<dyn ConfirmationCallback>) -> Self {
        self.confirm = confirm;
        self
    }

    /// Who observes the run.
    pub fn with_progress(mut self, progress: Arc<dyn ProgressCallback>) -> Self {
        self.progress = progress;
        self
    }

    /// A flag that, once set, stops the run (as Ctrl-C does).
    pub fn with_cancel_flag(mut self, cancel: Arc<AtomicBool>) -> Self {
        self.cancel = cancel;
        self
    }

    /// The plan, as loaded and approved.
    pub fn plan(&self) -> &Plan {
        self.approved.plan()
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The OS sandbox commands will run in (and why it fell back, if it did).
    pub fn sandbox(&self) -> &OsSandbox {
        &self.sandbox
    }

    /// The execution database the run will be recorded in.
    pub fn db_path(&self) -> &Path {
        &self.db
    }

    /// The executor with everything prepared (for callers that add an LLM client or resume), and
    /// the approved plan to give it.
    pub fn into_executor(self) -> Result<(Executor, ApprovedPlan), RunnerError> {
        let mut store = Store::open(&self.db)?;
        store.set_redactor(self.redactor.clone());
        let executor = Executor::new(self.workspace, store)
            .with_registry(self.registry)
            .with_policy(self.policy)
            .with_confirmation(self.confirm)
            .with_progress(self.progress)
            .with_cancel_flag(self.cancel)
            .with_sandbox(self.sandbox)
            .with_redactor(self.redactor);
        Ok((executor, self.approved))
    }

    /// Runs the plan and records it; `Ok` for any run that took place, failed steps included.
    pub fn run(self) -> Result<ExecutionResult, RunnerError> {
        let (mut executor, approved) = self.into_executor()?;
        Ok(executor.execute(&approved)?)
    }
}

/// Teaches `redactor` the plan's secret variable values before anything is recorded or printed.
fn learn_secrets(plan: &Plan, ws: &Workspace, redactor: &Redactor) {
    let vars = plan::variables::Variables::new(
        &plan.variables,
        &plan::validate::builtins(plan, ws, "validation"),
    );
    redactor.add_values(plan::variables::secret_values(plan, &vars));
}

/// A decision on a plan's exact bytes, as `acode-run approve`, `reject` and `run --approve`
/// record it: the same rules for every caller.
#[derive(Debug, Clone)]
pub struct DecisionRequest {
    /// Approve or reject.
    pub status: AuthStatus,
    /// Who decides; `None` takes it from the environment ([`plan::auth::decided_by`]).
    pub by: Option<String>,
    /// Why (kept in the database, shown by `show`).
    pub reason: Option<String>,
    /// Whether an approval may override a standing rejection of the same bytes: `true` for an
    /// explicit approval (recorded as an override), `false` for a convenience such as
    /// `run --approve`, which is then refused with [`RunnerError::Rejected`].
    pub may_override: bool,
    /// The key the approval file is signed with (`ACODE_APPROVAL_KEY`), if any.
    pub key: Option<Vec<u8>>,
}

/// What [`record_decision`] recorded.
#[derive(Debug, Clone)]
pub struct Decided {
    /// The authorization written to `PLAN.approval`.
    pub authorization: PlanAuthorization,
    /// Where it was written.
    pub written: PathBuf,
    /// The rejection this approval overrode, if it did.
    pub overridden: Option<DecisionRow>,
}

/// The rejection that stands for these exact plan bytes: the latest decision in the database, or
/// a rejection in `PLAN.approval` (which may have been committed from elsewhere).
pub fn standing_rejection(
    plan_path: &Path,
    plan: &Plan,
    store: &Store,
) -> Result<Option<DecisionRow>, RunnerError> {
    let in_db = store.standing_rejection(&plan.sha256)?;
    Ok(in_db.or_else(|| {
        plan::auth::rejection_in_file(plan_path, plan).map(|a| DecisionRow {
            plan_id: a.plan_id,
            plan_sha256: a.plan_sha256,
            plan_path: Some(plan_path.display().to_string()),
            verdict: Verdict::Rejected,
            decided_by: a.decided_by,
            decided_at: a.decided_at,
            reason: None,
            overrides_rejection: false,
        })
    }))
}

/// Records a decision on `plan` (read from `plan_path`, valid if it is an approval): refuses an
/// approval over a standing rejection unless `request.may_override`, appends the decision to the
/// database, then writes it, bound to `policy` (and, for an approval, to the skill files the plan
/// uses) and signed with `request.key`, as the latest one to `PLAN.approval`.
pub fn record_decision(
    plan: &Plan,
    plan_path: &Path,
    workspace: &Workspace,
    policy: &Policy,
    store: &mut Store,
    request: &DecisionRequest,
) -> Result<Decided, RunnerError> {
    let approving = request.status == AuthStatus::Approved;
    let overridden = if approving {
        standing_rejection(plan_path, plan, store)?
    } else {
        None
    };
    if let (Some(rejection), false) = (&overridden, request.may_override) {
        return Err(RunnerError::Rejected {
            path: plan_path.display().to_string(),
            rejection: Box::new(rejection.clone()),
        });
    }
    let mut auth = PlanAuthorization::decide(
        plan,
        request.status,
        &plan::auth::decided_by(request.by.as_deref()),
    )
    .under_policy(policy);
    if approving {
        auth.skills = plan::skills::referenced_hashes(plan, workspace);
    }
    store.record_decision(&DecisionRow {
        plan_id: plan.plan_id.clone(),
        plan_sha256: plan.sha256.clone(),
        plan_path: Some(absolute(plan_path).display().to_string()),
        verdict: if approving {
            Verdict::Approved
        } else {
            Verdict::Rejected
        },
        decided_by: auth.decided_by.clone(),
        decided_at: auth.decided_at,
        reason: request.reason.clone(),
        overrides_rejection: overridden.is_some(),
    })?;
    if let Some(key) = &request.key {
        auth = auth.signed(key);
    }
    let written =
        plan::auth::store(plan_path, &auth).map_err(|source| RunnerError::ApprovalWrite {
            path: plan::auth::approval_path(plan_path).display().to_string(),
            source,
        })?;
    Ok(Decided {
        authorization: auth,
        written,
        overridden,
    })
}
