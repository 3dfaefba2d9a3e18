//! One run of an approved plan, in three parts: [`Executor::begin`] records the run (or reopens
//! the one being resumed) and says it started, [`Executor::schedule`] walks the steps (up to the
//! jobs in force, see [`super::schedule`]) and [`Executor::finish`] records how it ended. Also
//! each step's run ([`run_step`]) and what a step that never ran records.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::schedule::{self, Footprint};
use super::{
    AgentSettings, AutoDeny, ConfirmationCallback, ConfirmationRequest, Decision, Emitter,
    ExecutionError, ExecutionResult, Executor, RunContext, RunStatus, STEP_OUTPUT_BYTES,
    StepContext, StepOutcome, StepResult, StepStatus, StopCause, TokenMeter, agent, budget, call,
    drivers, precondition, retry,
};
use crate::error::{ErrorKind, RunEnd, now_ms};
use crate::events::EventKind;
use crate::llm::{LlmClient, Usage};
use crate::plan::validate::{
    builtins, dependency_order, substitute_arguments, substitute_precondition,
};
use crate::plan::variables::Variables;
use crate::plan::{ApprovedPlan, AuthError, OnFailure, Plan, Step};
use crate::policy::Policy;
use crate::redact::Redactor;
use crate::sandbox::OsSandbox;
use crate::store::{RunRow, StepState, StepUpdate, Store, StoreError};
use crate::tools::ToolRegistry;
use crate::workspace::Workspace;

/// What [`Executor::begin`] hands the rest of the run: its id, when it started, its variables,
/// the order of its steps, the jobs it takes at once, where a step beside another opens its own
/// database connection, and the events' emitter.
struct Begun {
    run_id: String,
    started: Instant,
    vars: Variables,
    order: Vec<usize>,
    jobs: usize,
    db_path: Option<PathBuf>,
    emitter: Emitter,
}

/// How the steps went, as the scheduler counts them while they end (so the totals do not need
/// the results kept).
struct Tally {
    /// Each step's result, in plan order, when the caller keeps them.
    results: Vec<Option<StepResult>>,
    keep: bool,
    /// Steps by [`StepStatus`].
    counts: [usize; 5],
    tolerated: usize,
    /// For each failed, cancelled or blocked step: the failed step at the root of it.
    failed_root: Vec<Option<String>>,
    /// Why the run stopped starting steps, once it did.
    stopped: Option<ErrorKind>,
    quit_seen: bool,
    /// The first fatal failure by time: its kind is the run's exit code.
    first_failure: Option<(ErrorKind, String)>,
    /// Steps started (or found completed by a resumed run), for `[7/16]`.
    started_steps: usize,
    /// The tokens the run used, once it is over.
    tokens: Usage,
}

impl Executor {
    pub(super) fn run_plan(
        &mut self,
        approved: &ApprovedPlan,
        resume: Option<Resume>,
        checks: Checks,
    ) -> Result<ExecutionResult, ExecutionError> {
        let begun = self.begin(approved, resume.as_ref(), checks)?;
        let tally = self.schedule(approved, &begun, resume.as_ref())?;
        self.finish(approved.plan(), begun, tally)
    }

    /// Checks what it must before anything runs, teaches the redactor the run's secrets, records
    /// the run (or reopens the one resumed) and emits `run_started`.
    fn begin(
        &mut self,
        approved: &ApprovedPlan,
        resume: Option<&Resume>,
        checks: Checks,
    ) -> Result<Begun, ExecutionError> {
        // The one re-check every run makes, as a race defence: the plan file and the skill
        // files on disk are still the approved ones.
        approved.recheck()?;
        approved.check_skills(&self.workspace)?;
        if checks == Checks::Needed {
            self.check(approved)?;
        }
        let plan = approved.plan();
        // A plan inside the workspace must not rewrite itself while it runs.
        if let Some(source) = &plan.source {
            self.workspace.protect(source);
        }
        let order = dependency_order(plan).map_err(ExecutionError::InvalidPlan)?;
        let run_id = match resume {
            Some(r) => r.run_id.clone(),
            None => uuid::Uuid::new_v4().to_string(),
        };
        let started = Instant::now();
        let vars = Variables::new(&plan.variables, &builtins(plan, &self.workspace, &run_id));
        // Before anything of this run is recorded or printed (the built-in variables have the
        // run's id now).
        self.redactor
            .add_values(crate::plan::variables::secret_values(plan, &vars));
        if checks == Checks::Needed {
            crate::policy::credentials::learn_workspace_secrets(
                self.workspace.root(),
                &self.redactor,
            );
            crate::policy::credentials::learn_passed_credentials(
                &self.policy.env_passthrough,
                &self.redactor,
            );
        }
        self.workspace.sweep_staging();
        self.mark_abandoned_runs()?;
        self.record_start(plan, &run_id, resume.is_some())?;
        self.started(approved, resume, run_id, started, vars, order)
    }

    /// What an executor built by hand checks before it runs `approved`: the approval is bound
    /// to its policy (or, when a repository's policy narrowed it, to the approved one, and the
    /// policy in force allows nothing that one does not), and the plan is valid under its
    /// policy and tools.
    fn check(&self, approved: &ApprovedPlan) -> Result<(), ExecutionError> {
        match &self.approved_policy {
            None => approved.check_policy(&self.policy)?,
            Some(bound) => {
                approved.check_policy(bound)?;
                // Narrower only: nothing in force that the approved policy does not allow.
                if !crate::policy::narrow::narrow(bound, &self.policy)
                    .ignored
                    .is_empty()
                {
                    return Err(AuthError::PolicyChanged {
                        approved: crate::plan::auth::policy_sha256(bound),
                        actual: crate::plan::auth::policy_sha256(&self.policy),
                    }
                    .into());
                }
            }
        }
        let vctx = crate::plan::ValidationContext {
            registry: &self.registry,
            workspace: &self.workspace,
            policy: &self.policy,
        };
        let problems = crate::plan::validate::validate(approved.plan(), &vctx);
        if !problems.is_empty() {
            return Err(ExecutionError::InvalidPlan(problems));
        }
        Ok(())
    }

    /// The run started: the jobs it takes at once, `run_started` emitted and the run header
    /// recorded.
    fn started(
        &mut self,
        approved: &ApprovedPlan,
        resume: Option<&Resume>,
        run_id: String,
        started: Instant,
        vars: Variables,
        order: Vec<usize>,
    ) -> Result<Begun, ExecutionError> {
        let plan = approved.plan();
        // Each step running beside another needs a database connection of its own; a database in
        // memory has one, so its runs take one step at a time.
        let db_path = self.store.path().map(Path::to_path_buf);
        let jobs = if db_path.is_some() {
            self.jobs.max(1)
        } else {
            1
        };
        let emitter = Emitter::new(run_id.clone(), self.callbacks.progress.clone());
        emitter.emit(EventKind::RunStarted {
            plan_id: plan.plan_id.clone(),
            plan_sha256: plan.sha256.clone(),
            workspace: self.workspace.root().display().to_string(),
            database: self.store.path().map(|p| p.display().to_string()),
            steps: plan.steps.len(),
            resumed_from: resume.map(|r| r.run_id.clone()),
            already_completed: resume.map(|r| {
                r.prior
                    .values()
                    .filter(|s| **s == StepState::Completed)
                    .count()
            }),
            sandbox: crate::events::SandboxInfo::of(&self.sandbox),
            jobs: jobs_info(plan, &order, &vars, jobs, self.jobs_from),
            approval: Some(crate::events::ApprovalInfo::of(approved)),
        });
        self.store
            .record_header(&run_id, &run_header(approved, &self.sandbox, jobs))?;
        Ok(Begun {
            run_id,
            started,
            vars,
            order,
            jobs,
            db_path,
            emitter,
        })
    }

    /// Records a new run with its steps, variables, settings and what each agent step asks (or
    /// reopens the run resumed), then where it runs and in which sandbox.
    fn record_start(
        &mut self,
        plan: &Plan,
        run_id: &str,
        resumed: bool,
    ) -> Result<(), ExecutionError> {
        if resumed {
            self.store.reopen_run(run_id)?;
        } else {
            let step_rows: Vec<(&str, usize, &str)> = plan
                .steps
                .iter()
                .map(|s| (s.step_id.as_str(), s.position, s.tool.as_str()))
                .collect();
            let variables = self.redacted_variables(plan);
            self.store.begin_run(
                &RunRow {
                    run_id: run_id.to_string(),
                    plan_id: plan.plan_id.clone(),
                    plan_sha256: plan.sha256.clone(),
                    plan_path: plan.source.as_ref().map(|p| p.display().to_string()),
                    workspace: self.workspace.root().display().to_string(),
                    started_at: now_ms(),
                    finished_at: None,
                    status: RunStatus::Running,
                    exit_code: None,
                    prompt_tokens: 0,
                    completion_tokens: 0,
                    sandbox: None,
                    landlock_abi: None,
                    kind: "run".into(),
                    subject: None,
                    repository: None,
                    commit: None,
                    events_lost: None,
                },
                &variables,
                &self.settings_json,
                &step_rows,
            )?;
            // What each agent step asks, so a replay of this run can tell the plan was edited.
            let asked: Vec<(String, String)> = plan
                .steps
                .iter()
                .filter(|s| s.tool == crate::tools::agent::NAME)
                .map(|s| (s.step_id.clone(), agent::instruction_sha256(&s.arguments)))
                .collect();
            self.store.record_instructions(run_id, &asked)?;
            if let Some(of) = &self.replay_of {
                self.store.record_replay_of(run_id, of)?;
            }
        }
        if let Some(origin) = &self.origin {
            self.store.record_origin(run_id, origin)?;
        }
        self.store.record_sandbox(
            run_id,
            self.sandbox.mode().as_str(),
            self.sandbox.landlock_abi(),
        )?;
        Ok(())
    }

    /// Walks the steps in dependency order until none is left or the run stops: up to
    /// `begun.jobs` at once (each beside the others on a thread and a database connection of its
    /// own, file steps in this thread between them), the first fatal failure stopping what runs
    /// beside it.
    fn schedule(
        &mut self,
        approved: &ApprovedPlan,
        begun: &Begun,
        resume: Option<&Resume>,
    ) -> Result<Tally, ExecutionError> {
        let plan = approved.plan();
        let tokens = match resume {
            Some(r) => TokenMeter::resumed(r.tokens, r.spend),
            None => TokenMeter::default(),
        };
        let run_budget = budget::run_budget(plan.budget.as_ref(), self.agent.token_budget);
        let stopped_by = std::sync::OnceLock::new();
        let approve_all = Mutex::new(false);
        // Prompts are asked one at a time, whatever runs beside them.
        let gate = (self.callbacks.confirm.clone()).unwrap_or_else(|| Arc::new(AutoDeny));
        let confirm = OneAtATime::new(&*gate);
        let parts = Parts {
            emitter: &begun.emitter,
            registry: &self.registry,
            workspace: &self.workspace,
            policy: &self.policy,
            confirm: &confirm,
            approve_all: &approve_all,
            interrupt: &self.callbacks.cancel,
            stopped_by: &stopped_by,
            sandbox: &self.sandbox,
            backoff: self.backoff,
            llm: self.llm.as_ref(),
            agent: &self.agent,
            tokens: &tokens,
            budget: &run_budget,
            trace: self.trace.as_ref(),
        };
        let mut run = parts.context(&mut self.store, &self.callbacks.cancel);
        let mut tally = Tally::new(plan.steps.len(), self.keep_step_results);
        let walk = Walk {
            plan,
            begun,
            resume,
            dependencies: plan.dependency_positions(),
            redactor: &self.redactor,
            cancel: &self.callbacks.cancel,
            stopped_by: &stopped_by,
        };
        walk.run(&mut tally, parts, &mut run)?;
        tally.tokens = tokens.get();
        Ok(tally)
    }

    /// Stops what the run's tools keep running, records how the run ended (status, exit code,
    /// tokens, the files it changed, network use no call claimed) and emits `run_finished`.
    fn finish(
        &mut self,
        plan: &Plan,
        begun: Begun,
        tally: Tally,
    ) -> Result<ExecutionResult, ExecutionError> {
        let run_id = begun.run_id;
        // Servers tools keep running between calls (MCP) end with the run's steps; what stopping
        // them sent (a remote server's closing DELETE, its long-lived streams) is the run's.
        let stopping = self.registry.shutdown();
        let interrupted = tally.stopped == Some(ErrorKind::Interrupted)
            && self.callbacks.cancel.load(Ordering::SeqCst);
        let (status, end) = if interrupted {
            (RunStatus::Interrupted, RunEnd::Interrupted)
        } else if tally.quit_seen {
            // "quit" at a prompt: a denial that also ends the run for good.
            (RunStatus::Cancelled, RunEnd::Quit)
        } else if let Some((kind, _)) = &tally.first_failure {
            (RunStatus::Failed, RunEnd::Failed(*kind))
        } else {
            (RunStatus::Completed, RunEnd::Completed)
        };
        let exit_code = end.exit_code();
        let count = |s: StepStatus| tally.counts[s as usize];
        let duration_ms = begun.started.elapsed().as_millis() as u64;
        let tokens = tally.tokens;
        self.store.record_unattributed_network(&run_id, &stopping)?;
        if let Some(proxy) = self.sandbox.proxy() {
            self.store
                .record_unattributed_network(&run_id, &proxy.take_unattributed())?;
        }
        let changes = written_files(self.workspace.root(), &self.store, &run_id)?;
        self.store
            .finish_run_with_files(&run_id, status, exit_code, tokens.stored(), &changes)?;
        // SQLite writes on into a deleted file without complaint: say so instead of exit 0.
        self.store.check_still_there()?;
        let violations = self.store.refused_violations(&run_id)?;
        begun.emitter.emit(EventKind::RunFinished {
            status: status.as_str().to_string(),
            exit_code,
            duration_ms,
            completed: count(StepStatus::Completed),
            failed: count(StepStatus::Failed),
            tolerated: tally.tolerated,
            blocked: count(StepStatus::Blocked) + count(StepStatus::Skipped),
            cancelled: count(StepStatus::Cancelled),
            first_failure: tally.first_failure.as_ref().map(|(_, id)| id.clone()),
            violations,
        });
        Ok(ExecutionResult {
            run_id,
            plan_id: plan.plan_id.clone(),
            status,
            exit_code,
            duration_ms,
            steps: tally.results.into_iter().flatten().collect(),
            prompt_tokens: tokens.prompt_tokens,
            completion_tokens: tokens.completion_tokens,
        })
    }
}

impl Tally {
    fn new(steps: usize, keep: bool) -> Tally {
        Tally {
            results: if keep { vec![None; steps] } else { Vec::new() },
            keep,
            counts: [0; 5],
            tolerated: 0,
            failed_root: vec![None; steps],
            stopped: None,
            quit_seen: false,
            first_failure: None,
            started_steps: 0,
            tokens: Usage::default(),
        }
    }

    /// Counts step `i`'s result: a fatal failure stops the run (and cancels `running`, the steps
    /// beside it), a tolerated one does not, and the failed step at the root of each failure is
    /// kept for the steps that depend on it.
    fn settle(
        &mut self,
        plan: &Plan,
        i: usize,
        mut result: StepResult,
        quit: bool,
        walk: &Walk,
        running: &[(usize, Footprint, Arc<AtomicBool>)],
    ) {
        self.quit_seen |= quit;
        if result.status == StepStatus::Cancelled {
            self.failed_root[i] = walk.stopped_by.get().map(|c| c.step_id().to_string());
        } else if result.status == StepStatus::Failed {
            let kind = result.error_kind.unwrap_or(ErrorKind::ToolFailed);
            let interrupted = quit || walk.cancel.load(Ordering::SeqCst);
            if interrupted {
                self.stopped = Some(ErrorKind::Interrupted);
            }
            if result.tolerated && !interrupted {
                // Tolerated (SPEC §2): dependents still run, the run does not fail for it.
            } else {
                let id = plan.steps[i].step_id.clone();
                result.tolerated = false;
                // Interrupted (a signal, "quit"): the run stopped, so the steps after it are
                // `skipped`, not `blocked` by a failure (docs/recovery.md).
                if !interrupted {
                    self.failed_root[i] = Some(id.clone());
                }
                self.first_failure.get_or_insert((kind, id.clone()));
                if !interrupted {
                    self.stopped = Some(kind);
                    // Stop on first fatal failure: what runs beside it is cancelled.
                    if !running.is_empty() {
                        let _ = walk.stopped_by.set(StopCause::Failed(id));
                        cancel_all(running);
                    }
                }
            }
        }
        self.counts[result.status as usize] += 1;
        self.tolerated += usize::from(result.tolerated);
        if self.keep {
            self.results[i] = Some(result);
        }
    }
}

/// Tells every step in `running` to stop.
fn cancel_all(running: &[(usize, Footprint, Arc<AtomicBool>)]) {
    for (_, _, flag) in running {
        flag.store(true, Ordering::SeqCst);
    }
}

/// What the scheduler's loop reads and never changes.
struct Walk<'w> {
    plan: &'w Plan,
    begun: &'w Begun,
    resume: Option<&'w Resume>,
    dependencies: crate::plan::Dependencies,
    redactor: &'w Arc<Redactor>,
    cancel: &'w AtomicBool,
    stopped_by: &'w std::sync::OnceLock<StopCause>,
}

impl Walk<'_> {
    /// The loop: pick what comes next (settle a step that will not run, start one, or wait for
    /// one running beside), then count how it ended, until nothing is ready or running.
    fn run(
        &self,
        tally: &mut Tally,
        parts: Parts,
        run: &mut RunContext,
    ) -> Result<(), ExecutionError> {
        let (plan, jobs) = (self.plan, self.begun.jobs);
        let total = self.begun.order.len();
        let mut ready = schedule::Ready::new(&self.dependencies, &self.begun.order);
        // Steps running on threads of their own: index, footprint, cancellation flag.
        let mut running: Vec<(usize, Footprint, Arc<AtomicBool>)> = Vec::new();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<(usize, StepRun)>();
        let connections: Mutex<Vec<Store>> = Mutex::new(Vec::new());
        std::thread::scope(|scope| -> Result<(), ExecutionError> {
            loop {
                // A signal, or "quit" at a prompt of any step (the user wants the run to stop):
                // nothing new starts, and what runs is cancelled.
                if self.cancel.load(Ordering::SeqCst)
                    || matches!(self.stopped_by.get(), Some(StopCause::Quit(_)))
                {
                    tally.stopped.get_or_insert(ErrorKind::Interrupted);
                    cancel_all(&running);
                }
                let (i, (result, quit)) = match self.next(tally, &ready, &running) {
                    Next::Settle(i, status, by) => {
                        ready.take(i);
                        // A resumed run counts the steps it completed before: step 7 of 16 is
                        // `[7/16]`, not `[1/16]`.
                        if status == StepStatus::Completed {
                            tally.started_steps += 1;
                        }
                        let step = &plan.steps[i];
                        let result = match status {
                            StepStatus::Completed => StepResult::not_run(step, status, None),
                            _ => {
                                tally.failed_root[i] = by.clone();
                                not_run(run, step, status, by)?
                            }
                        };
                        (i, (result, false))
                    }
                    Next::Start(i, footprint) => {
                        ready.take(i);
                        tally.started_steps += 1;
                        let (step, index) = (&plan.steps[i], tally.started_steps);
                        let vars = &self.begun.vars;
                        // A step cut off mid-way runs again: `resume` refused beforehand unless
                        // its tool is idempotent or the caller said `rerun_interrupted`.
                        // File steps take microseconds in this process: they run here, between
                        // the steps running on threads (a thread and a connection each would
                        // cost more than the step).
                        if jobs == 1 || footprint.in_process() {
                            (i, run_step(run, plan, step, vars, index, total)?)
                        } else {
                            let flag = Arc::new(AtomicBool::new(false));
                            running.push((i, footprint, flag.clone()));
                            let done = done_tx.clone();
                            let (connections, db_path) = (&connections, &self.begun.db_path);
                            let redactor = self.redactor;
                            scope.spawn(move || {
                                let outcome = beside(
                                    parts,
                                    connections,
                                    db_path,
                                    redactor,
                                    &flag,
                                    plan,
                                    step,
                                    vars,
                                    index,
                                    total,
                                );
                                let _ = done.send((i, outcome));
                            });
                            continue;
                        }
                    }
                    Next::Wait if running.is_empty() => break,
                    Next::Wait => {
                        let (i, outcome) =
                            match done_rx.recv_timeout(std::time::Duration::from_millis(50)) {
                                Ok(done) => done,
                                // Checked again at the top: a signal reaches the running steps.
                                Err(_) => continue,
                            };
                        running.retain(|(j, _, _)| *j != i);
                        if outcome.is_err() {
                            // The run cannot be recorded: stop what runs beside it rather than
                            // wait for it (the scope joins every thread before returning).
                            cancel_all(&running);
                        }
                        (i, outcome?)
                    }
                };
                tally.settle(plan, i, result, quit, self, &running);
                ready.finished(i);
            }
            Ok(())
        })
    }

    /// What the scheduler does next: the first ready step (within a window of them) that is
    /// already completed (a resumed run), blocked by a failure, skipped because the run stopped,
    /// or free to start beside what runs; else wait.
    fn next(
        &self,
        tally: &Tally,
        ready: &schedule::Ready,
        running: &[(usize, Footprint, Arc<AtomicBool>)],
    ) -> Next {
        let jobs = self.begun.jobs;
        let window = 8 * jobs;
        for (looked, i) in ready.iter().enumerate() {
            let step = &self.plan.steps[i];
            let prior = self
                .resume
                // Recorded ids went through the redactor (a token in an id is stored redacted).
                .and_then(|r| r.prior.get(self.redactor.redact(&step.step_id).as_ref()))
                .copied();
            let blocker = self
                .dependencies
                .of(i)
                .iter()
                .find_map(|&d| tally.failed_root[d].clone());
            if prior == Some(StepState::Completed) {
                return Next::Settle(i, StepStatus::Completed, None);
            } else if let Some(by) = blocker {
                return Next::Settle(i, StepStatus::Blocked, Some(by));
            } else if tally.stopped.is_some() {
                // Not a failure: its dependents are skipped too (the run has stopped).
                return Next::Settle(i, StepStatus::Skipped, None);
            } else if running.len() >= jobs || looked >= window {
                return Next::Wait;
            } else if jobs == 1 {
                return Next::Start(i, Footprint::Anywhere);
            }
            let footprint = substitute_arguments(step, &self.begun.vars)
                .map_or(Footprint::Anywhere, |a| Footprint::of(step, &a));
            if running.iter().any(|(_, f, _)| footprint.conflicts(f)) {
                continue;
            }
            return Next::Start(i, footprint);
        }
        Next::Wait
    }
}

/// A step's run as the scheduler gets it back: its result and whether the user quit.
type StepRun = Result<(StepResult, bool), ExecutionError>;

/// What the scheduler does next.
enum Next {
    /// Record a ready step that will not run (already completed, blocked, skipped).
    Settle(usize, StepStatus, Option<String>),
    /// Start a ready step.
    Start(usize, Footprint),
    /// Wait for a running step to end (or stop: nothing runs and nothing is ready).
    Wait,
}

/// Everything of a run a step needs besides its database connection and cancellation flag:
/// copied to each step that runs on a thread of its own (`--jobs`).
#[derive(Clone, Copy)]
struct Parts<'r> {
    emitter: &'r Emitter,
    registry: &'r ToolRegistry,
    workspace: &'r Workspace,
    policy: &'r Policy,
    confirm: &'r dyn ConfirmationCallback,
    approve_all: &'r Mutex<bool>,
    interrupt: &'r AtomicBool,
    stopped_by: &'r std::sync::OnceLock<StopCause>,
    sandbox: &'r OsSandbox,
    backoff: retry::Backoff,
    llm: Option<&'r Arc<dyn LlmClient>>,
    agent: &'r AgentSettings,
    tokens: &'r TokenMeter,
    budget: &'r crate::plan::budget::Budget,
    trace: Option<&'r crate::events::otel::TraceContext>,
}

impl<'r> Parts<'r> {
    /// A step's context over `store`, stopped by `cancel`.
    fn context<'c>(self, store: &'c mut Store, cancel: &'c AtomicBool) -> RunContext<'c>
    where
        'r: 'c,
    {
        RunContext {
            emitter: self.emitter,
            store,
            registry: self.registry,
            workspace: self.workspace,
            policy: self.policy,
            confirm: self.confirm,
            approve_all: self.approve_all,
            cancel,
            interrupt: self.interrupt,
            stopped_by: self.stopped_by,
            sandbox: self.sandbox,
            backoff: self.backoff,
            llm: self.llm,
            agent: self.agent,
            tokens: self.tokens,
            budget: self.budget,
            trace: self.trace,
        }
    }
}

/// What `run_started` says of the run's jobs: the number, where it came from, and (with more
/// than one) the steps that run alone all the same, grouped by why.
fn jobs_info(
    plan: &Plan,
    order: &[usize],
    vars: &Variables,
    jobs: usize,
    from: schedule::JobsSource,
) -> crate::events::JobsInfo {
    let alone = if jobs > 1 {
        schedule::overlap(plan, order, &schedule::footprints(plan, vars))
            .map(|o| {
                schedule::run_alone(plan, &o)
                    .into_iter()
                    .map(|(why, steps)| crate::events::AloneSteps {
                        steps,
                        why: why.why().to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    crate::events::JobsInfo { jobs, from, alone }
}

/// Runs one step on a thread of its own (`--jobs`), over a database connection from `pool` (or a
/// new one to `db_path`), given back to the pool afterwards.
#[allow(clippy::too_many_arguments)]
fn beside(
    parts: Parts,
    pool: &Mutex<Vec<Store>>,
    db_path: &Option<std::path::PathBuf>,
    redactor: &Arc<Redactor>,
    cancel: &AtomicBool,
    plan: &Plan,
    step: &Step,
    vars: &Variables,
    index: usize,
    total: usize,
) -> StepRun {
    let pooled = pool.lock().ok().and_then(|mut p| p.pop());
    let mut store = match (pooled, db_path) {
        (Some(store), _) => store,
        (None, Some(path)) => {
            let mut store = Store::open(path)?;
            store.set_redactor(redactor.clone());
            store.defer_checkpoints();
            store
        }
        // The scheduler runs steps beside each other only over a database file.
        (None, None) => return Err(StoreError::NotFound("a database file".to_string()).into()),
    };
    let result = run_step(
        &mut parts.context(&mut store, cancel),
        plan,
        step,
        vars,
        index,
        total,
    );
    if let Ok(mut p) = pool.lock() {
        p.push(store);
    }
    result
}

/// Hands confirmation requests to the callback one at a time: steps running at once
/// (`--jobs`) never ask two questions together.
///
/// "quit" applies to the whole run: once the user answered it, a step that was waiting for its
/// turn to ask gets "quit" too, without a question (it is being cancelled).
struct OneAtATime<'c> {
    inner: &'c dyn ConfirmationCallback,
    lock: Mutex<()>,
    quit: AtomicBool,
}

impl<'c> OneAtATime<'c> {
    fn new(inner: &'c dyn ConfirmationCallback) -> Self {
        OneAtATime {
            inner,
            lock: Mutex::new(()),
            quit: AtomicBool::new(false),
        }
    }
}

impl ConfirmationCallback for OneAtATime<'_> {
    fn request_confirmation(&self, request: &ConfirmationRequest) -> Decision {
        let _turn = match self.lock.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if self.quit.load(Ordering::SeqCst) {
            return Decision::Quit;
        }
        let decision = self.inner.request_confirmation(request);
        if decision == Decision::Quit {
            self.quit.store(true, Ordering::SeqCst);
        }
        decision
    }
}

/// Whether the plan still needs checking against the executor before it runs
/// ([`Executor::execute`]), or the runner's stages did that ([`Executor::execute_prepared`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Checks {
    /// An executor built by hand: the approval's binding to its policy and the plan's validity
    /// under its policy and tools are checked, the workspace's and the policy's secrets taught.
    Needed,
    /// A [`crate::runner::PreparedRun`]: all of that was done by the stages.
    Done,
}

/// What a resumed run knows about its previous attempt.
pub(super) struct Resume {
    pub(super) run_id: String,
    /// Step id → status recorded before the interruption.
    pub(super) prior: std::collections::HashMap<String, StepState>,
    /// LLM tokens the run had used before.
    pub(super) tokens: Usage,
    /// Model calls and dollars the run had spent before.
    pub(super) spend: crate::plan::budget::Spend,
}

impl Executor {
    /// Marks runs left `running` by a process that no longer exists (same pid and start time, see
    /// `Store::runner_alive`) as `interrupted`.
    fn mark_abandoned_runs(&mut self) -> Result<(), ExecutionError> {
        for (run_id, _) in self.store.running_runs()? {
            if !self.store.runner_alive(&run_id)? {
                self.store.mark_interrupted(&run_id)?;
            }
        }
        Ok(())
    }
}

/// Records a step that never ran.
fn not_run(
    run: &mut RunContext,
    step: &Step,
    status: StepStatus,
    blocked_by: Option<String>,
) -> Result<StepResult, ExecutionError> {
    let kind = match status {
        StepStatus::Blocked => ErrorKind::Blocked,
        _ => ErrorKind::Skipped,
    };
    let message = match &blocked_by {
        Some(by) => format!("not run: depends on failed step {by:?}"),
        None => "not run: the run stopped before this step".to_string(),
    };
    let result = record_not_run(run, step, status, kind, message)?;
    run.emitter.emit(EventKind::StepBlocked {
        step_id: step.step_id.clone(),
        status: status.as_str().to_string(),
        blocked_by,
    });
    Ok(result)
}

/// Writes the outcome of a step that never reached a tool, and returns its result.
fn record_not_run(
    run: &mut RunContext,
    step: &Step,
    status: StepStatus,
    kind: ErrorKind,
    message: String,
) -> Result<StepResult, ExecutionError> {
    run.store.step_finished(
        run.emitter.run_id(),
        &step.step_id,
        &StepUpdate {
            status: status.state(),
            attempts: 0,
            started_at: None,
            finished_at: now_ms(),
            error_code: Some(kind.as_str()),
            error_message: Some(&message),
            tokens: (0, 0),
            tolerated: false,
        },
    )?;
    Ok(StepResult::not_run(step, status, Some((kind, message))))
}

/// Runs one step from start event to recorded outcome. Returns the result and whether the user quit.
fn run_step(
    run: &mut RunContext,
    plan: &Plan,
    step: &Step,
    vars: &Variables,
    index: usize,
    total: usize,
) -> Result<(StepResult, bool), ExecutionError> {
    let started_at = now_ms();
    let started = Instant::now();
    let args = substitute_arguments(step, vars);
    let summary = match (&args, run.registry.get(&step.tool)) {
        (Ok(a), Some(tool)) => tool.summary(a),
        _ => String::new(),
    };
    run.store
        .step_started(run.emitter.run_id(), &step.step_id, started_at)?;
    run.emitter.emit(EventKind::StepStarted {
        step_id: step.step_id.clone(),
        tool: step.tool.clone(),
        index,
        total,
        summary,
    });
    run.emitter.progress().on_step_start(step);

    let mut ctx = StepContext::new(run, step);
    let outcome = drive(&mut ctx, plan, args, vars)?;
    let quit = ctx.quit;
    let attempts = ctx.attempts;
    let tokens = ctx.tokens;
    let spend = Some(ctx.spend()).filter(|s| !s.is_zero());
    let execution_ids = std::mem::take(&mut ctx.execution_ids);
    drop(ctx);
    let ended = Ended {
        started_at,
        duration_ms: started.elapsed().as_millis() as u64,
        quit,
        attempts,
        tokens,
        spend,
        execution_ids,
    };
    record_step_end(run, step, outcome, ended)
}

/// Checks a step's precondition and budget, then has its driver run it: how it went.
fn drive(
    ctx: &mut StepContext,
    plan: &Plan,
    args: Result<serde_json::Value, Vec<crate::plan::Problem>>,
    vars: &Variables,
) -> Result<StepOutcome, ExecutionError> {
    let step = ctx.step;
    let args = match args {
        Ok(args) => args,
        Err(problems) => {
            return Ok(StepOutcome::failed(
                ErrorKind::InvalidArguments,
                problems
                    .iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join("; "),
            ));
        }
    };
    let pre = match &step.precondition {
        None => None,
        Some(p) => {
            let verdict = match substitute_precondition(p, vars) {
                Err(e) => Some(e),
                Ok(p) => precondition::evaluate(&p, &args, ctx)?,
            };
            ctx.run.emitter.emit(EventKind::PreconditionChecked {
                step_id: step.step_id.clone(),
                precondition: p.describe(),
                passed: verdict.is_none(),
                detail: verdict.clone(),
            });
            verdict
        }
    };
    Ok(match pre {
        Some(why) => StepOutcome::failed(
            ErrorKind::PreconditionFailed,
            format!("precondition failed: {why}"),
        ),
        None => match budget::before_step(ctx.run, step) {
            Some(outcome) => outcome,
            None => drivers::run(ctx, plan, &args, vars)?,
        },
    })
}

/// What a step's run came to besides its outcome.
struct Ended {
    started_at: i64,
    duration_ms: u64,
    quit: bool,
    attempts: u32,
    tokens: Usage,
    spend: Option<crate::plan::budget::Spend>,
    execution_ids: Vec<String>,
}

/// Records how a step ended (completed, failed, tolerated, or cancelled because the run stopped
/// around it) and says so: its result and whether the user quit.
fn record_step_end(
    run: &mut RunContext,
    step: &Step,
    outcome: StepOutcome,
    ended: Ended,
) -> Result<(StepResult, bool), ExecutionError> {
    let Ended {
        started_at,
        duration_ms,
        quit,
        attempts,
        tokens,
        spend,
        execution_ids,
    } = ended;
    // Stopped because a step beside it failed (`--jobs`), or because the user quit at another
    // step's prompt, not by a signal: cancelled, saying why.
    let interrupted = run.interrupt.load(Ordering::SeqCst);
    let stopped = match run.stopped_by.get() {
        Some(StopCause::Failed(by)) if run.cancel.load(Ordering::SeqCst) && !interrupted => {
            Some(format!(
                "step {by:?} failed while this one ran, and the run stops on its first failure"
            ))
        }
        Some(StopCause::Quit(by)) if *by != step.step_id && !interrupted => Some(format!(
            "the user quit (at a prompt of step {by:?}) while this one ran"
        )),
        _ => None,
    };
    let (status, kind, message) = match (&outcome.failure, stopped) {
        (None, _) => (StepStatus::Completed, None, None),
        (Some((_, m)), Some(why)) => (
            StepStatus::Cancelled,
            Some(ErrorKind::Cancelled),
            Some(format!("cancelled: {why} ({m})")),
        ),
        (Some((k, m)), None) => (StepStatus::Failed, Some(*k), Some(m.clone())),
    };
    // Tolerated (SPEC §2): a failure the plan lets the run go on past, unless the run is
    // stopping anyway (the user quit, a signal); recorded with the step, reported from the record.
    // `continue` tolerates the step's own failures, never a replay that no longer reproduces its
    // recording (docs/replay.md): such a run tests nothing, whatever the plan says.
    let tolerated = status == StepStatus::Failed
        && step.on_failure == OnFailure::Continue
        && kind != Some(ErrorKind::ReplayDiverged)
        && !quit
        && !run.cancel.load(Ordering::SeqCst);
    run.store.step_finished(
        run.emitter.run_id(),
        &step.step_id,
        &StepUpdate {
            status: status.state(),
            attempts,
            started_at: Some(started_at),
            finished_at: now_ms(),
            error_code: kind.map(ErrorKind::as_str),
            error_message: message.as_deref(),
            tokens: tokens.stored(),
            tolerated,
        },
    )?;
    let result = StepResult {
        step_id: step.step_id.clone(),
        tool: step.tool.clone(),
        status,
        error_kind: kind,
        error: message.clone(),
        attempts,
        duration_ms,
        output: outcome.output.as_deref().map(|o| {
            if step.tool == crate::tools::agent::NAME {
                call::truncate_with_note(o, run.agent.answer_chars)
            } else {
                crate::util::cut_at_char_boundary(o, STEP_OUTPUT_BYTES).to_string()
            }
        }),
        output_truncated: step.tool != crate::tools::agent::NAME
            && outcome
                .output
                .as_ref()
                .is_some_and(|o| o.len() > STEP_OUTPUT_BYTES),
        failure_output: outcome.excerpt.clone(),
        execution_ids,
        tolerated,
        spend,
    };
    match kind {
        None => {
            run.emitter.emit(EventKind::StepCompleted {
                step_id: step.step_id.clone(),
                duration_ms,
                attempts,
            });
            run.emitter.progress().on_step_complete(&result);
        }
        Some(k) => {
            run.emitter.emit(EventKind::StepFailed {
                step_id: step.step_id.clone(),
                error_code: k.as_str().to_string(),
                error: message.unwrap_or_default(),
                output: outcome.excerpt,
                duration_ms,
                tolerated: result.tolerated,
            });
            run.emitter.progress().on_step_failed(&result);
        }
    }
    Ok((result, quit))
}

/// The files the run created or changed since it first started (the subjects of its
/// attestation, `crate::workspace::changes`), leaving out the database and its journals.
fn written_files(
    root: &Path,
    store: &Store,
    run_id: &str,
) -> Result<crate::workspace::changes::Changes, StoreError> {
    let since = store.run(run_id)?.started_at;
    let db = store.path().map(Path::to_path_buf);
    let journals: Vec<PathBuf> = db
        .iter()
        .flat_map(|db| {
            ["", "-wal", "-shm", "-journal"].map(|suffix| {
                let mut p = db.as_os_str().to_owned();
                p.push(suffix);
                PathBuf::from(p)
            })
        })
        .collect();
    let skip: Vec<&Path> = journals.iter().map(PathBuf::as_path).collect();
    Ok(crate::workspace::changes::changed_since(root, since, &skip))
}

/// What the run header says that no other column keeps (issue 36): the approval the run is
/// allowed by, the sandbox's requested mode and notes, the parallelism, the MCP pins.
fn run_header(
    approved: &ApprovedPlan,
    sandbox: &OsSandbox,
    jobs: usize,
) -> crate::store::RunHeader {
    let auth = approved.authorization();
    crate::store::RunHeader {
        approval: crate::store::HeaderApproval {
            decided_by: approved.proof().approver(&auth.decided_by),
            decided_at: auth.decided_at,
            signature: approved.signature_state().to_string(),
            policy_sha256: auth.policy_sha256.clone().unwrap_or_default(),
            scheme: approved.proof().scheme.name().to_string(),
            claimed_by: Some(auth.decided_by.clone()),
            signers: approved.proof().signers.clone(),
            authorization: Some(auth.clone()),
            required: approved.proof().required,
        },
        sandbox_requested: sandbox.requested().as_str().to_string(),
        sandbox_notes: sandbox.notes().to_vec(),
        jobs,
        promises_held: crate::sandbox::promises::Promise::ALL
            .into_iter()
            .filter(|p| {
                p.gap(
                    sandbox.mode(),
                    sandbox.landlock_abi(),
                    sandbox.proxy().is_some(),
                )
                .is_none()
            })
            .map(|p| p.name().to_string())
            .collect(),
        promises_not_held: sandbox.not_held(),
        mcp: auth
            .mcp
            .iter()
            .map(|(name, pin)| {
                let identity = format!(
                    "{} {} (protocol {})",
                    pin.server_name, pin.server_version, pin.protocol_version
                );
                let tools = pin
                    .tools
                    .iter()
                    .map(|(t, p)| (t.clone(), p.sha256.clone()))
                    .collect();
                (name.clone(), crate::store::HeaderPin { identity, tools })
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Counts how many requests are inside it at once; holds each for a while.
    #[derive(Default)]
    struct Counting {
        inside: AtomicUsize,
        most: AtomicUsize,
    }

    impl ConfirmationCallback for Counting {
        fn request_confirmation(&self, _request: &ConfirmationRequest) -> Decision {
            let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(30));
            self.inside.fetch_sub(1, Ordering::SeqCst);
            Decision::Approve
        }
    }

    /// A confirmation request like a step deleting a file would make.
    fn a_request() -> ConfirmationRequest {
        ConfirmationRequest {
            run_id: "r".into(),
            step_id: "s".into(),
            tool: "file_delete".into(),
            arguments: serde_json::json!({}),
            reason: "test".into(),
            preview: None,
        }
    }

    #[test]
    fn an_embedders_callback_gets_one_request_at_a_time() {
        let inner = Counting::default();
        let gate = OneAtATime::new(&inner);
        let request = a_request();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| gate.request_confirmation(&request));
            }
        });
        assert_eq!(inner.most.load(Ordering::SeqCst), 1);
        // The callback alone would have taken them together.
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| inner.request_confirmation(&request));
            }
        });
        assert!(inner.most.load(Ordering::SeqCst) > 1);
    }

    /// Answers "quit" once, then counts any further question.
    #[derive(Default)]
    struct QuitsOnce {
        asked: AtomicUsize,
    }

    impl ConfirmationCallback for QuitsOnce {
        fn request_confirmation(&self, _request: &ConfirmationRequest) -> Decision {
            match self.asked.fetch_add(1, Ordering::SeqCst) {
                0 => Decision::Quit,
                _ => Decision::Approve,
            }
        }
    }

    #[test]
    fn after_quit_no_further_question_is_asked() {
        let inner = QuitsOnce::default();
        let gate = OneAtATime::new(&inner);
        let request = a_request();
        assert_eq!(gate.request_confirmation(&request), Decision::Quit);
        // A step that was waiting for its turn gets "quit" without a question.
        assert_eq!(gate.request_confirmation(&request), Decision::Quit);
        assert_eq!(inner.asked.load(Ordering::SeqCst), 1);
    }
}
