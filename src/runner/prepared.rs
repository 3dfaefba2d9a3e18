//! A run's typed stages (issue 44): each stage is a type whose constructor is private to this
//! module, so holding one is proof that what it names was done.
//!
//! ```text
//! Session::load(path, vars)            → LoadedPlan   parsed, validated, its secrets learned
//! Session::request(&loaded, options)   → RunRequest   `--approve` recorded, the run to resume found
//! LoadedPlan::authorize(&session, &rq) → ApprovedPlan the approval proven against the policy,
//!                                                     the skills and the MCP pins
//! Session::prepare_run(approved, rq)   → PreparedRun  the policy in force, the sandbox, the model,
//!                                                     the settings recorded for `resume`
//! PreparedRun::execute(callbacks)      → RunOutcome   the run, recorded
//! ```
//!
//! The executor runs a [`PreparedRun`] without checking again what these types guarantee (the
//! plan's validity under the policy in force, the approval's binding to it, the secrets taught);
//! it re-reads, as a race defence, only the plan and skill files on disk at the run's start
//! ([`crate::executor::Executor`]'s `begin`). An unapproved plan cannot reach `execute`:
//!
//! ```compile_fail,E0308
//! # use acode_run::runner::{RunOptions, RunnerError};
//! # use acode_run::runner::session::{Session, SessionOptions};
//! # fn main() -> Result<(), RunnerError> {
//! let mut session = Session::open(SessionOptions::new("."), None)?;
//! let loaded = session.load("plan.json".as_ref(), &Default::default())?;
//! let request = session.request(&loaded, RunOptions::default())?;
//! // A loaded plan is not an approved one: `prepare_run` takes only an `ApprovedPlan`.
//! let run = session.prepare_run(loaded, request)?;
//! # Ok(())
//! # }
//! ```
//!
//! ```compile_fail,E0599
//! # use acode_run::runner::RunnerError;
//! # use acode_run::runner::session::{Session, SessionOptions};
//! # fn main() -> Result<(), RunnerError> {
//! let mut session = Session::open(SessionOptions::new("."), None)?;
//! let loaded = session.load("plan.json".as_ref(), &Default::default())?;
//! // Nor is there a way round: a loaded plan has no `execute`.
//! loaded.execute(Default::default())?;
//! # Ok(())
//! # }
//! ```
//!
//! ```compile_fail,E0451
//! # use acode_run::runner::PreparedRun;
//! // And a prepared run is made only by `Session::prepare_run`.
//! let run = PreparedRun { approved: todo!() };
//! ```
//!
//! The way through, stage by stage (what [`PreparedRun::prepare`] does in one call):
//!
//! ```no_run
//! # use acode_run::runner::{RunOptions, RunnerError};
//! # use acode_run::runner::session::{Session, SessionOptions};
//! # fn main() -> Result<(), RunnerError> {
//! let mut session = Session::open(SessionOptions::new("."), None)?;
//! let loaded = session.load("plan.json".as_ref(), &Default::default())?;
//! let request = session.request(&loaded, RunOptions::default().without_os_sandbox())?;
//! let approved = loaded.authorize(&session, &request)?;
//! let outcome = session.prepare_run(approved, request)?.execute(Default::default())?;
//! println!("run {} ended {}", outcome.result.run_id, outcome.result.status);
//! # Ok(())
//! # }
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::session::{Session, SessionError, SessionOptions};
use super::{
    RunOptions, RunSettings, RunnerError, Target, authorize, origin, record_decision, replay,
    telemetry,
};
use crate::executor::{
    AgentSettings, Callbacks, ConfirmMode, Driven, ExecutionError, ExecutionResult, Executor,
};
use crate::llm::LlmClient;
use crate::plan::{self, ApprovedPlan, Plan, ValidationContext};
use crate::policy::{Policy, SandboxMode};
use crate::sandbox::OsSandbox;
use crate::store::Store;
use crate::tools::ToolRegistry;

/// A plan read from its file, valid under the session's policy, its secrets (and the
/// credentials the policy passes on) taught to the session's redactor: made only by
/// [`Session::load`].
pub struct LoadedPlan {
    plan: Plan,
    path: PathBuf,
}

impl LoadedPlan {
    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The file it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Verifies the plan's approval ([`super::authorize`]: the approval file, its signature
    /// under the key `request` allows, the policy it is bound to, the skill files, the MCP pins):
    /// the approved plan, or exactly what `run` prints.
    pub fn authorize(
        self,
        session: &Session,
        request: &RunRequest,
    ) -> Result<ApprovedPlan, RunnerError> {
        let key = if request.options.no_signature_check {
            None
        } else {
            plan::auth::approval_key().map_err(|e| RunnerError::Setup(e.to_string()))?
        };
        let policy = session.policy()?;
        let (approved, _) = authorize(
            &self.path,
            self.plan,
            &policy,
            session.workspace(),
            key.as_deref(),
        )?;
        Ok(approved)
    }
}

/// What the run is asked to be, once the database has been asked what it needs to know: a new
/// run or the run being resumed (found, with the settings it was started with), the decision
/// `run --approve` asked for recorded. Made only by [`Session::request`].
pub struct RunRequest {
    options: RunOptions,
    settings: RunSettings,
    target: Target,
    /// `--sandbox none` was asked for by name (now, or when the resumed run started).
    explicit_none: bool,
}

impl Session {
    /// Reads and validates the plan at `path` with `vars` under the session's policy and teaches
    /// the redactor its secrets, the credentials the policy passes to commands and the values of
    /// remote MCP servers' headers. Protects the plan file and the files that decide who may
    /// approve from every tool write. `.acode/` is not created: a plan refused here leaves
    /// nothing behind (issue #34 item 9).
    pub fn load(
        &mut self,
        path: &Path,
        vars: &BTreeMap<String, String>,
    ) -> Result<LoadedPlan, RunnerError> {
        self.protect(path);
        let policy = self.policy()?;
        self.protect_policy_files(&policy);
        let plan = self.load_plan(path, vars, &policy).map_err(|e| match e {
            SessionError::Plan(e) => RunnerError::Plan(e),
            SessionError::Mcp(e) => RunnerError::Setup(e),
            other => RunnerError::Session(other),
        })?;
        let redactor = self.redactor();
        crate::policy::credentials::learn_passed_credentials(&policy.env_passthrough, redactor);
        // The values a remote MCP server's headers take from the environment.
        redactor.add_values(policy.mcp.header_secrets());
        Ok(LoadedPlan {
            plan,
            path: path.to_path_buf(),
        })
    }

    /// Turns `options` into the request for a run of `loaded`: records the approval
    /// `options.approve` asks for, and for a resume finds the run and takes the settings it was
    /// started with (`options.settings` may only repeat them). Both read the database before
    /// anything runs, over the session's connection.
    pub fn request(
        &self,
        loaded: &LoadedPlan,
        options: RunOptions,
    ) -> Result<RunRequest, RunnerError> {
        let mut request = RunRequest {
            settings: options.settings.clone(),
            target: options.target.clone(),
            explicit_none: options.no_os_sandbox,
            options,
        };
        if request.explicit_none {
            request.settings.sandbox = Some(SandboxMode::None);
        }
        if request.options.approve.is_none() && request.target == Target::New {
            return Ok(request);
        }
        self.prepare_state()?;
        self.with_store(|store| self.record_and_find(loaded, &mut request, store))??;
        Ok(request)
    }

    /// [`Session::request`]'s use of the database.
    fn record_and_find(
        &self,
        loaded: &LoadedPlan,
        request: &mut RunRequest,
        store: &mut Store,
    ) -> Result<(), RunnerError> {
        let (plan, plan_path) = (&loaded.plan, loaded.path.as_path());
        if let Some(decision) = &request.options.approve {
            let policy = self.policy()?;
            record_decision(plan, plan_path, self.workspace(), &policy, store, decision)?;
        }
        let run_id = match &request.target {
            Target::New => return Ok(()),
            Target::Run(id) => store.run(id)?.run_id,
            Target::Latest => store
                .find_resumable(&plan.sha256, &self.workspace().root().display().to_string())?
                .ok_or_else(|| {
                    RunnerError::Setup(format!(
                        "no interrupted run of {} (sha256 {}) to resume in {}",
                        plan_path.display(),
                        plan.sha256,
                        self.db_path().display()
                    ))
                })?,
        };
        let recorded =
            RunSettings::from_json(store.run_settings(&run_id)?.as_deref()).map_err(|e| {
                RunnerError::Setup(format!(
                    "the settings recorded on run {run_id} cannot be read ({e}); it is not \
                     resumed with settings it was not started with"
                ))
            })?;
        // The run's own `--sandbox none` was explicit when it was given.
        request.explicit_none |= recorded.sandbox == Some(SandboxMode::None);
        request.settings =
            RunSettings::for_resume(&recorded, &request.settings).map_err(|conflicts| {
                RunnerError::ResumeSettings {
                    run_id: run_id.clone(),
                    conflicts,
                }
            })?;
        request.target = Target::Run(run_id);
        Ok(())
    }

    /// Prepares the run of `approved` that `request` asks for: the policy in force (the approved
    /// one, narrowed by the workspace's own; the plan is checked under it when the run starts if
    /// it or the tools differ from those it was loaded under), the OS sandbox (never weaker than the policy's), the replay, the
    /// model, and the settings recorded for `resume`. The session goes with it: its database
    /// connection is the one the run records with.
    pub fn prepare_run(
        self,
        approved: ApprovedPlan,
        request: RunRequest,
    ) -> Result<PreparedRun, RunnerError> {
        let RunRequest {
            options,
            mut settings,
            target,
            explicit_none,
        } = request;
        // The approval is bound to the policy given; the run gets it narrowed by the workspace's
        // own policy, which can take away but never add (docs/security.md).
        let approved_policy = self.policy()?;
        let (policy, narrowing) = self.narrowed_policy(approved_policy.clone())?;
        let repository_policy = narrowing.map(|n| (n, approved_policy));
        // The MCP tools as approved: descriptions and schemas from the pins.
        let registry = crate::tools::mcp::registry(&policy, Some(&approved.authorization().mcp))
            .map_err(RunnerError::Setup)?;
        // Loaded under the approved policy with MCP arguments unchecked: checked again (when the
        // run starts) only when the policy in force or the tools differ from those.
        let check_in_force = repository_policy.is_some() || !policy.mcp.is_empty();
        let sandbox = self.run_sandbox(&policy, &settings, explicit_none, &options)?;
        let replay = match settings.replay.clone() {
            None => None,
            Some(what) => Some(replay_for(&self, &what, &approved, &mut settings)?),
        };
        let (llm, agent, mut settings) = model_for(
            &self,
            &policy,
            &approved,
            settings,
            &options,
            replay.as_ref(),
        )?;
        let confirm_mode = settings
            .confirm
            .or(options.default_confirm)
            .unwrap_or(ConfirmMode::AutoDeny);
        settings.confirm = Some(confirm_mode);
        Ok(PreparedRun {
            session: self,
            policy,
            registry,
            approved,
            sandbox,
            callbacks: Callbacks::default(),
            confirm_mode,
            settings,
            llm,
            agent,
            target,
            rerun_interrupted: options.rerun_interrupted,
            drop_step_results: options.drop_step_results,
            replay: replay.map(|r| (r.of, r.client)),
            repository_policy,
            check_in_force,
        })
    }

    /// The OS sandbox of a run under `policy` (in force): the mode `settings` asks for, never
    /// weaker than the policy's nor `none` unless asked for by name, resolved once, holding every
    /// promise `--require` names.
    fn run_sandbox(
        &self,
        policy: &Policy,
        settings: &RunSettings,
        explicit_none: bool,
        options: &RunOptions,
    ) -> Result<OsSandbox, RunnerError> {
        let requested = match settings.sandbox {
            Some(SandboxMode::None) if !explicit_none => {
                return Err(RunnerError::WeakeningNotExplicit);
            }
            Some(SandboxMode::Auto) | None => policy.sandbox,
            Some(mode) => mode,
        };
        if requested != SandboxMode::Auto && strength(requested) < strength(policy.sandbox) {
            return Err(RunnerError::SandboxWeakened {
                policy: policy.sandbox,
                given: requested,
            });
        }
        self.prepare_state()?;
        let sandbox = self
            .sandbox(policy, requested)
            .map_err(|e| RunnerError::Sandbox(e.to_string()))?;
        let unmet = sandbox.unmet(&options.require);
        if !unmet.is_empty() {
            return Err(RunnerError::PromisesNotHeld {
                mode: sandbox.describe(),
                unmet,
            });
        }
        Ok(sandbox)
    }
}

/// A replay of `what` (`--replay`): the recorded answers, checked against the plan before anything
/// runs; `settings` take the way the recorded run asked (its tool protocol, ...) unless they say
/// otherwise.
fn replay_for(
    session: &Session,
    what: &str,
    approved: &ApprovedPlan,
    settings: &mut RunSettings,
) -> Result<replay::Prepared, RunnerError> {
    let lenient = settings.replay_lenient.unwrap_or(false);
    let prepared = replay::prepare(what, lenient, session, approved.plan())?;
    let recorded = &prepared.settings;
    settings.tool_protocol = settings.tool_protocol.or(recorded.tool_protocol);
    settings.max_calls_per_answer = settings
        .max_calls_per_answer
        .or(recorded.max_calls_per_answer);
    settings.strict = settings.strict.or(recorded.strict);
    settings.model = settings.model.clone().or(recorded.model.clone());
    if !replay::names_file(what) {
        // The full id, so a resume replays the same run whatever prefix was typed.
        settings.replay = Some(prepared.of.clone());
    }
    Ok(prepared)
}

/// What [`model_for`] sets up: the client (none for a plan without agent steps), the agent
/// settings, and the settings as they will be recorded.
type Model = (Option<Arc<dyn LlmClient>>, AgentSettings, RunSettings);

/// The model of a run: the replay's client, or (when the plan has agent steps) the client the
/// settings configure, checked up front so a missing model is reported before anything runs;
/// with the agent settings and the settings as they will be recorded.
fn model_for(
    session: &Session,
    policy: &Policy,
    approved: &ApprovedPlan,
    settings: RunSettings,
    options: &RunOptions,
    replay: Option<&replay::Prepared>,
) -> Result<Model, RunnerError> {
    let (config, mut agent, mut used) = settings
        .llm(options.llm_api_key.as_deref(), policy, |name| {
            std::env::var(name).ok()
        })
        .map_err(RunnerError::Setup)?;
    agent.own_files = options.own_files.clone();
    agent.own_files.push(session.db_path().to_path_buf());
    if let Some(file) = settings.replay.as_deref().filter(|w| replay::names_file(w)) {
        agent
            .own_files
            .push(crate::workspace::absolute(Path::new(file)));
    }
    let agent_steps: Vec<&crate::plan::Step> = approved
        .plan()
        .steps
        .iter()
        .filter(|s| s.tool == crate::tools::agent::NAME)
        .collect();
    let llm = if let Some(replay) = replay {
        Some(Arc::new(replay.client.clone()) as Arc<dyn LlmClient>)
    } else if agent_steps.is_empty() {
        None
    } else {
        // Every agent step must end up with a model: its own, or the default.
        let mut check = config.clone();
        if check.model.trim().is_empty()
            && agent_steps
                .iter()
                .all(|s| s.arguments.contains_key("model"))
        {
            check.model = "per-step".to_string();
        }
        check
            .validate()
            .map_err(|e| RunnerError::Setup(e.to_string()))?;
        Some(Arc::from(crate::llm::client(config)))
    };
    if replay.is_some() {
        // No server is reached: none is recorded as if it had been.
        used.llm_provider = None;
        used.llm_url = None;
        used.llm_ca_cert = None;
    }
    Ok((llm, agent, used))
}

/// How strong a sandbox mode is against another, for [`RunnerError::SandboxWeakened`]: none <
/// Landlock (writes confined) < bwrap (reads and the network namespace too). `auto` is a choice,
/// not a demand: as a request it takes the policy's mode (see `run_sandbox`), and a policy that
/// says `auto` (the default) demands nothing.
pub(super) fn strength(mode: SandboxMode) -> u8 {
    match mode {
        SandboxMode::None | SandboxMode::Auto => 0,
        SandboxMode::Landlock => 1,
        SandboxMode::Bwrap => 2,
    }
}

/// A plan that is loaded, valid, authorized and ready to run in its workspace, with its policy,
/// tools, sandbox and model: made only by [`Session::prepare_run`] (or, in one call, by
/// [`PreparedRun::prepare`]).
pub struct PreparedRun {
    session: Session,
    policy: Policy,
    registry: ToolRegistry,
    approved: ApprovedPlan,
    sandbox: OsSandbox,
    callbacks: Callbacks,
    /// The confirmation mode the settings chose, when no callback is given
    /// ([`Driven::with_confirmation`]).
    confirm_mode: ConfirmMode,
    settings: RunSettings,
    llm: Option<Arc<dyn LlmClient>>,
    agent: AgentSettings,
    target: Target,
    rerun_interrupted: bool,
    drop_step_results: bool,
    /// With `--replay`: the run replayed and the client answering from it.
    replay: Option<(String, crate::llm::replay::ReplayClient)>,
    /// What the workspace's own policy narrowed, when `--policy` named another (issue 48), and
    /// the approved policy it narrowed.
    repository_policy: Option<(crate::store::PolicyNarrowing, Policy)>,
    /// Whether the plan is checked under the policy in force and the pinned tools before it
    /// runs: they differ from those it was loaded under (a narrowed policy, MCP servers).
    check_in_force: bool,
}

/// `with_confirmation` (default: the settings' `confirm` mode), `with_progress`,
/// `with_cancel_flag`.
impl Driven for PreparedRun {
    fn callbacks_mut(&mut self) -> &mut Callbacks {
        &mut self.callbacks
    }
}

/// How a run went: its result, and the executor that carried it out (its store, for reports).
pub struct RunOutcome {
    /// The run's result.
    pub result: ExecutionResult,
    executor: Executor,
}

impl RunOutcome {
    /// The database the run was recorded in.
    pub fn store(&self) -> &Store {
        self.executor.store()
    }

    /// The result and the executor.
    pub fn into_parts(self) -> (ExecutionResult, Executor) {
        (self.result, self.executor)
    }
}

impl PreparedRun {
    /// Loads, validates and verifies the plan at `plan_path` for `workspace` and prepares its run,
    /// every stage in turn (see the module docs). With `options.approve`, records the approval
    /// first; with a resume target, finds the run and takes the options it was started with.
    /// Confirmations are denied unless the settings or [`Driven::with_confirmation`] say
    /// otherwise.
    pub fn prepare(
        workspace: &Path,
        plan_path: &Path,
        options: RunOptions,
    ) -> Result<PreparedRun, RunnerError> {
        let session = Session::open(session_options(workspace, &options), Some(plan_path))?;
        PreparedRun::prepare_in(session, plan_path, options)
    }

    /// [`PreparedRun::prepare`] in the command's own `session` (its workspace, database, policy
    /// file and redactor; `options.db`, `options.policy` and `options.redactor` are the
    /// session's): the policy it read and its database connection are the ones the run uses.
    pub fn prepare_in(
        mut session: Session,
        plan_path: &Path,
        options: RunOptions,
    ) -> Result<PreparedRun, RunnerError> {
        let loaded = session.load(plan_path, &options.vars)?;
        let request = session.request(&loaded, options)?;
        let approved = loaded.authorize(&session, &request)?;
        session.prepare_run(approved, request)
    }

    /// Prepares to continue run `run_id` (an id or a unique prefix) of the plan it recorded, with
    /// the options it was started with (`options.settings` may only repeat them).
    pub fn prepare_resume(
        workspace: &Path,
        run_id: &str,
        options: RunOptions,
    ) -> Result<PreparedRun, RunnerError> {
        let session = Session::open(session_options(workspace, &options), None)?;
        PreparedRun::prepare_resume_in(session, run_id, options)
    }

    /// [`PreparedRun::prepare_resume`] in the command's own `session` (see
    /// [`PreparedRun::prepare_in`]).
    pub fn prepare_resume_in(
        session: Session,
        run_id: &str,
        mut options: RunOptions,
    ) -> Result<PreparedRun, RunnerError> {
        let db = session.db_path().to_path_buf();
        if !db.exists() {
            return Err(RunnerError::Setup(format!(
                "no execution database at {}, so no run {run_id} to resume",
                db.display()
            )));
        }
        let run = session.with_existing_store(|store| store.run(run_id))??;
        let plan_path = run.plan_path.ok_or_else(|| {
            RunnerError::Setup(format!(
                "run {} has no plan file recorded; use `acode-run run PLAN --resume`",
                run.run_id
            ))
        })?;
        options.db = Some(db);
        options.target = Target::Run(run.run_id);
        PreparedRun::prepare_in(session, Path::new(&plan_path), options)
    }

    /// The plan, as loaded and approved.
    pub fn plan(&self) -> &Plan {
        self.approved.plan()
    }

    /// The policy in force: the approved one, narrowed by the workspace's own when `--policy`
    /// named another ([`PreparedRun::repository_policy`]).
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// What the workspace's own `acode-policy.json` narrowed or was refused, when the policy
    /// came from elsewhere and the workspace has one.
    pub fn repository_policy(&self) -> Option<&crate::store::PolicyNarrowing> {
        self.repository_policy.as_ref().map(|(n, _)| n)
    }

    /// The OS sandbox commands will run in (and why it fell back, if it did).
    pub fn sandbox(&self) -> &OsSandbox {
        &self.sandbox
    }

    /// The execution database the run will be recorded in.
    pub fn db_path(&self) -> &Path {
        self.session.db_path()
    }

    /// The options the run is carried out with (what is recorded on it).
    pub fn settings(&self) -> &RunSettings {
        &self.settings
    }

    /// With `--replay`: the client answering the agent steps, whose
    /// [`ReplayClient::divergences`](crate::llm::replay::ReplayClient::divergences) a caller can
    /// report after the run.
    pub fn replay(&self) -> Option<&crate::llm::replay::ReplayClient> {
        self.replay.as_ref().map(|(_, client)| client)
    }

    /// The steps the run takes at once and where that number came from: `--jobs`, else the
    /// smaller of the policy's `jobs` and the plan's `defaults.jobs`, else 1.
    pub fn jobs(&self) -> (usize, crate::executor::schedule::JobsSource) {
        crate::executor::schedule::effective_jobs(
            self.settings.jobs,
            self.policy.jobs,
            self.approved.plan().defaults.jobs,
        )
    }

    /// The executor with everything prepared, for callers that drive it themselves, and the
    /// approved plan to give it ([`Executor::execute`] checks it again against the executor's
    /// policy and tools, as for any executor built by hand).
    pub fn into_executor(self) -> Result<(Executor, ApprovedPlan), RunnerError> {
        let approved_policy = self.repository_policy.as_ref().map(|(_, p)| p.clone());
        let (executor, approved, _) = self.build()?;
        Ok(match approved_policy {
            Some(bound) => (executor.with_approved_policy(bound), approved),
            None => (executor, approved),
        })
    }

    /// The executor over the session's database connection, with the callbacks, the settings'
    /// confirmation mode when no callback was given, and where the run comes from.
    fn build(self) -> Result<(Executor, ApprovedPlan, Target), RunnerError> {
        let mut store = self.session.store()?;
        store.checkpoint_in_background();
        let (jobs, jobs_from) = self.jobs();
        let (repository, commit) = origin::repository_and_commit(self.session.workspace().root());
        let origin = crate::store::RunOrigin {
            repository,
            commit,
            repository_policy: self.repository_policy.map(|(n, _)| n),
        };
        // No callback given: the settings' mode, a terminal prompt watching the cancel flag.
        let mut callbacks = self.callbacks;
        let confirm = (callbacks.confirm.take())
            .unwrap_or_else(|| self.confirm_mode.callback(callbacks.cancel.clone()));
        callbacks.confirm = Some(confirm);
        let mut executor = self
            .session
            .executor(store, self.policy)
            .with_jobs_from(jobs, jobs_from)
            .with_registry(self.registry)
            .with_callbacks(callbacks)
            .with_sandbox(self.sandbox)
            .with_agent_settings(self.agent)
            .with_step_results(!self.drop_step_results)
            .with_settings_record(self.settings.to_json())
            .with_replay_of(self.replay.as_ref().map(|(of, _)| of.clone()))
            .with_origin(origin);
        if let Some(llm) = self.llm {
            executor = executor.with_llm(llm);
        }
        let target = match self.target {
            Target::Run(id) => Target::Run(id),
            Target::New | Target::Latest => Target::New,
        };
        Ok((executor, self.approved, target))
    }

    /// Runs the plan (or continues the run it was prepared to resume) with `callbacks` and
    /// records it; `Ok` for any run that took place, failed steps included. The executor checks
    /// nothing the stages guarantee; it re-reads the plan and skill files on disk at the start.
    pub fn execute(mut self, callbacks: Callbacks) -> Result<RunOutcome, RunnerError> {
        // After the caller had the chance to say what the narrowing took away (a plan it makes
        // invalid is refused as the executor would refuse it).
        if self.check_in_force {
            let ctx = ValidationContext {
                registry: &self.registry,
                workspace: self.session.workspace(),
                policy: &self.policy,
            };
            let problems = plan::validate::validate(self.approved.plan(), &ctx);
            if !problems.is_empty() {
                return Err(ExecutionError::InvalidPlan(problems).into());
            }
        }
        self.callbacks = callbacks;
        let rerun = self.rerun_interrupted;
        // OpenTelemetry, when the standard variables ask for it (docs/observability.md).
        let tracing = telemetry::Tracing::from_env(
            self.session.redactor(),
            || self.run_facts(),
            |name| std::env::var(name).ok(),
        );
        let (executor, approved, target) = self.build()?;
        let mut executor = tracing.attach(executor);
        let resume = match &target {
            Target::Run(id) => Some((id.as_str(), rerun)),
            Target::New | Target::Latest => None,
        };
        let result = executor.execute_prepared(&approved, resume)?;
        tracing.finish(&result.run_id, executor.store_mut());
        // What the run left changed, as git sees it (before any report reads the record).
        if let Some(changes) = origin::changes(executor.workspace_root()) {
            executor
                .store_mut()
                .record_changes(&result.run_id, &changes)?;
        }
        Ok(RunOutcome { result, executor })
    }

    /// What the run's trace sink is told besides its events (docs/observability.md).
    fn run_facts(&self) -> crate::events::otel::RunFacts {
        crate::events::otel::RunFacts {
            approved_by: Some(self.approved.authorization().decided_by.clone()),
            approval_signature: Some(self.approved.signature_state().to_string()),
            policy_sha256: Some(plan::auth::policy_sha256(&self.policy)),
            provider: self.settings.llm_provider.map(|p| p.as_str().to_string()),
            llm_url: self.settings.llm_url.clone(),
            export_content: self.policy.telemetry.export_content,
        }
    }

    /// Runs the plan with the callbacks set through [`Driven`] ([`PreparedRun::execute`]).
    pub fn run(self) -> Result<ExecutionResult, RunnerError> {
        self.run_keeping_executor().map(|(result, _)| result)
    }

    /// Like [`PreparedRun::run`], also handing back the executor (its store, for reports).
    pub fn run_keeping_executor(mut self) -> Result<(ExecutionResult, Executor), RunnerError> {
        let callbacks = std::mem::take(&mut self.callbacks);
        self.execute(callbacks).map(RunOutcome::into_parts)
    }
}

/// The session [`PreparedRun::prepare`] opens from `options`.
fn session_options(workspace: &Path, options: &RunOptions) -> SessionOptions {
    SessionOptions {
        workspace: workspace.to_path_buf(),
        db: options.db.clone(),
        db_named_by: None,
        policy: options.policy.clone(),
        redactor: options.redactor.clone(),
    }
}
