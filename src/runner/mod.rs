//! The library's front door: one type that takes a workspace, a plan path and options and does
//! everything a run needs, with the command line's safety by default.
//!
//! The command line is a thin layer over it: `run`, `run --approve` and `resume` each parse their
//! flags into [`RunOptions`], open one [`session::Session`], call [`PreparedRun::prepare_in`] (or
//! [`PreparedRun::prepare_resume_in`]) and [`PreparedRun::run`], and print. Everything between —
//! loading, approving, checking, choosing the sandbox and the LLM, recording the options for
//! `resume` — happens here, once, in typed stages ([`prepared`]): `Session::load` →
//! [`LoadedPlan`] → `LoadedPlan::authorize` → [`plan::ApprovedPlan`] → `Session::prepare_run` →
//! [`PreparedRun`] → `PreparedRun::execute` → [`RunOutcome`]. [`PlanRunner`] is the one-call
//! name embedders know it by.
//!
//! Preparing protects the runner's own files (`.acode/`, the database, the plan) from tool writes
//! and opens `.acode/` without following links, loads the policy, loads and validates the plan,
//! verifies its approval (hash, signature under the runner's key, policy binding, skills) and
//! resolves the OS sandbox (`auto` unless the policy or the options say otherwise). Running
//! records the plan over the session's database connection with the caller's callbacks.
//! Weakening any of this takes an explicit, named call on [`RunOptions`]
//! ([`RunOptions::without_os_sandbox`], [`RunOptions::without_signature_check`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use thiserror::Error;

pub mod doctor;
pub mod import;
pub mod mcp_server;
pub mod mcp_tools;
pub mod origin;
pub mod prepared;
pub mod queries;
pub mod replay;
pub mod session;
pub mod settings;
pub mod signing;
pub mod telemetry;

pub use prepared::{LoadedPlan, PreparedRun, RunOutcome, RunRequest};
pub use settings::{RunSettings, SettingConflict};

use crate::executor::{ConfirmMode, ExecutionError};
use crate::plan::auth::{ApprovalProof, AuthStatus, PlanAuthorization, Trust};
use crate::plan::{self, ApprovedPlan, AuthError, Plan, PlanError, ValidationContext};
use crate::policy::{Policy, SandboxMode};
use crate::redact::Redactor;
use crate::store::{DecisionRow, Store, StoreError};
use crate::tools::ToolRegistry;
use crate::workspace::{Workspace, absolute};

/// What a run is prepared with. `RunOptions::default()` is the command line's defaults: the
/// workspace's database, its `acode-policy.json`, the OS sandbox the policy names (`auto` by
/// default), confirmations denied, and the approval key from `ACODE_APPROVAL_KEY` /
/// `ACODE_APPROVAL_KEY_FILE`.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// The execution database (default `WORKSPACE/.acode/executions.db`).
    pub db: Option<PathBuf>,
    /// The policy file (default `WORKSPACE/acode-policy.json` when present).
    pub policy: Option<PathBuf>,
    /// `--var` values: only variables the plan declares.
    pub vars: BTreeMap<String, String>,
    /// The options that shape the run (recorded on it; see [`RunSettings`]). A `sandbox` of
    /// `SandboxMode::None` here is refused: use [`RunOptions::without_os_sandbox`], so weakening
    /// is visible in the code.
    pub settings: RunSettings,
    /// How confirmations are answered when `settings.confirm` is not given and the run (if
    /// resumed) recorded none: [`ConfirmMode::AutoDeny`] unless set (the command line sets
    /// `Prompt` on a terminal).
    pub default_confirm: Option<ConfirmMode>,
    /// The redactor every record and output goes through (default: one from the environment); the
    /// runner teaches it the plan's secret values.
    pub redactor: Option<Arc<Redactor>>,
    /// Approve the plan before running it (`run --approve`): the decision is recorded with the
    /// library's rules ([`record_decision`]; a standing rejection is not overridden).
    pub approve: Option<DecisionRequest>,
    /// A new run, or which interrupted run to continue.
    pub target: Target,
    /// Resuming may run again a step cut off mid-way whose tool is not idempotent.
    pub rerun_interrupted: bool,
    /// The LLM key, read once by the caller (`ACODE_LLM_API_KEY[_FILE]`); never recorded.
    pub llm_api_key: Option<String>,
    /// Drop each step's result once it is recorded and reported (memory stays flat on huge plans;
    /// [`crate::executor::ExecutionResult::steps`] is then empty).
    pub drop_step_results: bool,
    /// This invocation's own files (its reports, its stdout or stderr redirected to a file): left
    /// out of the workspace listing agent steps are shown (docs/replay.md). The database and a
    /// replay file are added by the runner.
    pub own_files: Vec<PathBuf>,
    /// Sandbox promises that must hold in the mode the run resolves (`--require`): one that does
    /// not is refused ([`RunnerError::PromisesNotHeld`]) before any step runs.
    pub require: Vec<crate::sandbox::promises::Promise>,
    /// Set only by the named weakening calls.
    no_os_sandbox: bool,
    no_signature_check: bool,
}

/// Which run [`PlanRunner::run`] carries out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Target {
    /// A new run.
    #[default]
    New,
    /// The newest interrupted run of the same plan in the same workspace (`run --resume`).
    Latest,
    /// This run (a full id, or a prefix `show` would accept).
    Run(String),
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
    State(#[from] crate::workspace::state::StateDirError),
    /// The plan cannot be read or is invalid (every problem listed).
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The plan is not authorized to run.
    #[error(
        "{path}: not authorized: {source}\n  review the plan, then approve it with: acode-run approve {path}{}",
        source.approve_flags()
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
    /// A promise named by `--require` does not hold in the mode the run resolved here; nothing
    /// ran.
    #[error(
        "the sandbox here ({mode}) does not hold what --require asks:\n{}\n  nothing was run; \
         `acode-run doctor` says which modes work here and why the others fail (docs/ci.md, \
         \"Which sandbox runs where\")",
        .unmet.iter().map(|(p, why)| format!("  - {p}: {why}")).collect::<Vec<_>>().join("\n")
    )]
    PromisesNotHeld {
        /// The mode resolved, as the run header names it.
        mode: String,
        /// Each required promise that does not hold, with why.
        unmet: Vec<(crate::sandbox::promises::Promise, String)>,
    },
    /// An option asks for a weaker OS sandbox than the approved policy names: the approval covers
    /// the policy, and a flag must not weaken it (SPEC §6).
    #[error(
        "the approved policy asks for the {policy} sandbox; --sandbox {given} would weaken it. \
         Run without --sandbox (or with a stronger mode), or change the policy and approve the plan again"
    )]
    SandboxWeakened {
        /// The policy's mode.
        policy: SandboxMode,
        /// The mode asked for.
        given: SandboxMode,
    },
    /// `resume` was given options that differ from the ones the run was started with.
    #[error(
        "run {run_id} was started with other options:\n{}\n  resume continues a run as it was started: omit these options (docs/recovery.md)",
        .conflicts.iter().map(|c| format!("  - {c}")).collect::<Vec<_>>().join("\n")
    )]
    ResumeSettings {
        /// The run.
        run_id: String,
        /// Each differing option.
        conflicts: Vec<SettingConflict>,
    },
    /// `SandboxMode::None` was asked for through the plain option.
    #[error(
        "no OS sandbox was requested through RunOptions::sandbox; call RunOptions::without_os_sandbox to run without one"
    )]
    WeakeningNotExplicit,
    /// `--replay` names recorded answers that cannot be replayed with this plan (docs/replay.md);
    /// refused before anything runs.
    #[error(
        "cannot replay {origin}:\n{}\n  nothing was run (docs/replay.md)",
        .problems.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n")
    )]
    Replay {
        /// The run or file named.
        origin: String,
        /// Each problem, naming the step, turn or line.
        problems: Vec<String>,
    },
    /// `ssh-keygen` could not sign (`approve --sign KEY`).
    #[error("cannot sign with {key}: {why}")]
    Signing {
        /// The key given.
        key: String,
        /// Why.
        why: String,
    },
    /// The signature file given to `--add-signature` cannot be read.
    #[error("cannot read signature file {path}: {why}")]
    SignatureFile {
        /// The file.
        path: String,
        /// Why.
        why: String,
    },
    /// An approval without an SSH signature under a policy that requires them.
    #[error(
        "the policy requires approvers' SSH signatures (approvals.allowed_signers: {allowed_signers}): approve with --sign KEY (a private key, or a public key whose private half is in ssh-agent), or write the message with --message FILE, sign it with ssh-keygen -Y sign -n acode-run-approval -f KEY FILE and attach FILE.sig with --add-signature"
    )]
    SignatureNeeded {
        /// The allowed_signers file the policy names.
        allowed_signers: String,
    },
    /// `--by` names someone the signing key does not belong to.
    #[error(
        "--by {by:?} is not the signer: key {key} belongs to {principal} in allowed_signers (the approver is the principal the key proves; omit --by)"
    )]
    NotTheSigner {
        /// The name claimed.
        by: String,
        /// Whom allowed_signers gives the key.
        principal: String,
        /// The key's fingerprint.
        key: String,
    },
    /// The execution database cannot be used.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The run could not start or be recorded.
    #[error(transparent)]
    Execution(#[from] ExecutionError),
    /// The workspace, its database, its policy or its sandbox could not be set up.
    #[error(transparent)]
    Session(#[from] session::SessionError),
}

/// Whether the plan read from `plan_path` may run under `policy` in `ws`: the one decision `run`
/// makes and `preview` and the MCP server's `plan_status` report, so none of them can call a plan
/// approved that `run` refuses. Checks the approval file (pending, rejected — a rejection stands
/// until an explicit approval replaces it —, plan id and hash), its signature under `key` when
/// one is configured, the policy it was approved under, the skill files the plan uses
/// (docs/agents.md) and the MCP pins (every declared server pinned, every pin consistent). `Ok`
/// gives the approved plan and the registry with the MCP tools as pinned; `Err` is exactly what
/// `run` prints.
pub fn authorize(
    plan_path: &Path,
    plan: Plan,
    policy: &Policy,
    ws: &Workspace,
    key: Option<&[u8]>,
) -> Result<(ApprovedPlan, ToolRegistry), RunnerError> {
    let trust = trust(policy, ws, key)?;
    let (authorization, registry, _) = authorization_under(plan_path, &plan, policy, ws, &trust)?;
    // Proven above; `ApprovedPlan` checks the plan's hash and proves the approval again as it
    // pairs them (it cannot be made otherwise).
    let approved = ApprovedPlan::proven(plan, authorization, policy, &trust).map_err(|source| {
        RunnerError::Unauthorized {
            path: plan_path.display().to_string(),
            source,
        }
    })?;
    Ok((approved, registry))
}

/// What proves an approval here: the policy's `approvals.allowed_signers` (read from the
/// workspace, or beside a policy file that lies outside it) when it names one, else the HMAC `key` when one is set, else nothing. An
/// `allowed_signers` file that cannot be read or parsed is a usage error (exit 2).
pub fn trust(policy: &Policy, ws: &Workspace, key: Option<&[u8]>) -> Result<Trust, RunnerError> {
    let Some(rel) = &policy.approvals.allowed_signers else {
        return Ok(key.map_or(Trust::Anyone, |k| Trust::Hmac(k.to_vec())));
    };
    // A policy shipped from outside the workspace names its allowed_signers beside itself: the
    // repository it runs in does not choose who approves.
    if let Some(base) = &policy.approvals.base {
        return crate::plan::signers::AllowedSigners::load(&base.join(rel), rel)
            .map(Trust::Ssh)
            .map_err(|e| RunnerError::ApprovalInput(AuthError::Signers(e)));
    }
    let path = ws.resolve(rel).map_err(|v| {
        RunnerError::ApprovalInput(AuthError::Signers(
            crate::plan::signers::SignersError::Path {
                path: rel.clone(),
                reason: v.reason,
            },
        ))
    })?;
    crate::plan::signers::AllowedSigners::load(&path, rel)
        .map(Trust::Ssh)
        .map_err(|e| RunnerError::ApprovalInput(AuthError::Signers(e)))
}

/// [`authorize`]'s decision on a borrowed plan, for those that only report it (`preview`, the MCP
/// server's `plan_status`), which need no [`ApprovedPlan`] and so no copy of the plan: the
/// authorization that lets it run, the registry with the MCP tools as pinned and what proved the
/// approval, or exactly what `run` prints.
pub fn authorization_for(
    plan_path: &Path,
    plan: &Plan,
    policy: &Policy,
    ws: &Workspace,
    key: Option<&[u8]>,
) -> Result<(PlanAuthorization, ToolRegistry, ApprovalProof), RunnerError> {
    let trust = trust(policy, ws, key)?;
    authorization_under(plan_path, plan, policy, ws, &trust)
}

/// [`authorization_for`] under a [`Trust`] already read.
fn authorization_under(
    plan_path: &Path,
    plan: &Plan,
    policy: &Policy,
    ws: &Workspace,
    trust: &Trust,
) -> Result<(PlanAuthorization, ToolRegistry, ApprovalProof), RunnerError> {
    let unauthorized = |source: AuthError| RunnerError::Unauthorized {
        path: plan_path.display().to_string(),
        source,
    };
    let authorization = plan::auth::load(plan_path, plan).map_err(|e| match e {
        AuthError::Input { .. } => RunnerError::ApprovalInput(e),
        other => unauthorized(other),
    })?;
    let proof = authorization
        .check(plan)
        .and_then(|()| authorization.prove(plan, policy, trust, crate::plan::signers::now_secs()))
        .and_then(|proof| authorization.check_policy(policy).map(|()| proof))
        .and_then(|proof| authorization.check_skills(plan, ws).map(|()| proof))
        .map_err(unauthorized)?;
    // The MCP tools as approved: descriptions and schemas from the pins; a declared server
    // without pins cannot run.
    let registry = crate::tools::mcp::registry(policy, Some(&authorization.mcp))
        .map_err(|e| unauthorized(AuthError::McpNotPinned(e)))?;
    Ok((authorization, registry, proof))
}

/// The library's front door under its first name: a [`PreparedRun`], made in one call by
/// [`PreparedRun::prepare`] (or stage by stage, [`prepared`]).
pub type PlanRunner = PreparedRun;

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
    /// The approver's SSH signature to add (`--sign KEY`, `--add-signature FILE`), if any.
    pub ssh: signing::SshRequest,
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
            verdict: AuthStatus::Rejected,
            decided_by: a.decided_by,
            decided_at: a.decided_at,
            reason: None,
            overrides_rejection: false,
            scheme: None,
            signer_key: None,
        })
    }))
}

/// The decision `status` on `plan` (read from `plan_path`) by `by` under `policy`, as `approve`
/// or `reject` would write it, unsigned: bound to the policy and, for an approval, to the skill
/// files the plan uses and the MCP servers' pins (each declared server started under the policy's
/// sandbox and its allowed tools pinned, docs/mcp.md; a server that cannot be pinned blocks the
/// approval). `approve --message` writes its [`PlanAuthorization::ssh_message`].
pub fn decision_for(
    plan: &Plan,
    plan_path: &Path,
    workspace: &Workspace,
    policy: &Policy,
    status: AuthStatus,
    by: Option<&str>,
) -> Result<PlanAuthorization, RunnerError> {
    let mut auth =
        PlanAuthorization::decide(plan, status, &plan::auth::decided_by(by)).under_policy(policy);
    if status != AuthStatus::Approved {
        return Ok(auth);
    }
    auth.skills = plan::skills::referenced_hashes(plan, workspace);
    if !policy.mcp.is_empty() {
        let sandbox = session::sandbox_for(workspace, policy, policy.sandbox)
            .map_err(|e| RunnerError::Sandbox(e.to_string()))?;
        auth.mcp = crate::tools::mcp::pin_servers(policy, workspace, &sandbox)
            .map_err(|e| RunnerError::Setup(format!("cannot pin the MCP servers: {e}")))?;
        // Each MCP step's arguments against the schema just pinned (until now any object
        // passed), so a plan that would fail at its first call is not approved.
        let pinned =
            crate::tools::mcp::registry(policy, Some(&auth.mcp)).map_err(RunnerError::Setup)?;
        let ctx = ValidationContext {
            registry: &pinned,
            workspace,
            policy,
        };
        plan::recheck_steps(plan_path, plan, &ctx, |step| {
            policy.mcp.servers.iter().any(|(name, server)| {
                server
                    .tools
                    .iter()
                    .any(|t| step.tool == crate::policy::mcp_tool_name(name, t))
            })
        })?;
    }
    Ok(auth)
}

/// Records a decision on `plan` (read from `plan_path`, valid if it is an approval): refuses an
/// approval over a standing rejection unless `request.may_override`, builds it
/// ([`decision_for`]), adds the approver's SSH signature when the request brings one (checked,
/// and under a policy with `allowed_signers` attributed to the principal that file names:
/// [`signing::apply`]), appends the decision to the database, then writes it, signed with
/// `request.key` when one is set, as the latest one to `PLAN.approval`.
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
    let mut auth = decision_for(
        plan,
        plan_path,
        workspace,
        policy,
        request.status,
        request.by.as_deref(),
    )?;
    let signer = signing::apply(&mut auth, plan_path, plan, workspace, policy, request)?;
    let (scheme, signer_key, decided_by) = match &signer {
        Some(s) => (
            Some("ssh".to_string()),
            Some(s.key.clone()),
            s.principal.clone(),
        ),
        None => (
            request.key.as_ref().map(|_| "hmac".to_string()),
            None,
            auth.decided_by.clone(),
        ),
    };
    store.record_decision(&DecisionRow {
        plan_id: plan.plan_id.clone(),
        plan_sha256: plan.sha256.clone(),
        plan_path: Some(absolute(plan_path).display().to_string()),
        verdict: if approving {
            AuthStatus::Approved
        } else {
            AuthStatus::Rejected
        },
        decided_by,
        decided_at: auth.decided_at,
        reason: request.reason.clone(),
        overrides_rejection: overridden.is_some(),
        scheme,
        signer_key,
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
