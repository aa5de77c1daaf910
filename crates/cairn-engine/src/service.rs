//! What only the long-lived owner of execution (the daemon) does, as use cases: accept a run and
//! queue it (taking over a run whose owner is gone), cancel a run, execute an approved plan,
//! recover at start-up what a dead predecessor left, and stop. It holds the worker pool and the
//! session kernel; everything it decides goes through the [`Engine`].
//!
//! **Invariant:** a run is executed only by its recorded owner; a run owned by another live
//! process is refused, and one whose owner is gone is taken over with `resume_interrupted`,
//! after its recorded processes are stopped.

use std::sync::Arc;
use std::time::Duration;

use cairn_core::store::RunRecord;
use serde_json::Value;

use crate::pool::{Pool, Work};
use crate::process::{Owner, is_alive, this_process};
use crate::registry::LoadedWorkflow;
use crate::replay::ReplayRequest;
use crate::runner::RunRequest;
use crate::session::{SessionConfig, SessionKernel};
use crate::{Engine, EngineError, RunView, StopKind, StopSignal};

/// Where the service's log lines go (the daemon's log).
pub type Log = Arc<dyn Fn(&str) + Send + Sync>;

/// How a [`Service`] runs.
pub struct ServiceConfig {
    /// Runs executing at once.
    pub workers: usize,
    pub session: SessionConfig,
    pub log: Log,
    /// Keep a spare scratch kernel booted for the next verification (with the session's
    /// interpreter setting).
    pub spare_kernel: bool,
}

/// A request to run a registered workflow, or to replay steps of a finished run into a child
/// run, executed by the service's pool.
#[derive(Debug, Clone, Default)]
pub struct SubmitRun {
    /// The conversation or job this run belongs to (1 to 256 characters).
    pub thread_id: String,
    /// The workflow's name (or `NAME@VERSION`); for a replay, optional (the source's).
    pub workflow: Option<String>,
    /// Its version (default: the highest registered; for a replay, the source's).
    pub version: Option<String>,
    /// The run input; for a replay, the source's when omitted.
    pub input: Option<Value>,
    pub run_id: Option<String>,
    /// Replay `(source_run_id, step_ids)` instead.
    pub replay: Option<(String, Vec<String>)>,
    /// How many ready steps may run at once (1 to 256).
    pub parallelism: usize,
}

impl SubmitRun {
    fn check(&self) -> Result<(), EngineError> {
        let field = |field: &'static str, message: &str| EngineError::InvalidField { field, message: message.into() };
        if self.thread_id.trim().is_empty() || self.thread_id.len() > 256 {
            return Err(field("thread_id", "thread_id must be 1 to 256 characters"));
        }
        let named = self.workflow.as_deref().is_some_and(|w| !w.trim().is_empty());
        if !named && (self.replay.is_none() || self.workflow.is_some()) {
            return Err(field(
                "workflow",
                "workflow (or agent_id) must name a registered workflow; see GET /workflows",
            ));
        }
        if !(1..=256).contains(&self.parallelism) {
            return Err(field("parallel", "parallel must be between 1 and 256"));
        }
        Ok(())
    }
}

/// What accepting a run did: the run as it is now, and whether it had finished before this
/// request (then nothing was queued, and the answer is final).
#[derive(Debug, Clone)]
pub struct Submitted {
    pub view: RunView,
    pub finished: bool,
}

pub struct Service {
    engine: Arc<Engine>,
    pool: Arc<Pool>,
    session: Arc<SessionKernel>,
    owner: Owner,
    log: Log,
}

impl Service {
    /// Starts the worker pool and the session kernel (recording `died` for jobs a dead
    /// predecessor left), owned by this process. Call [`Service::recover`] next.
    pub fn start(engine: Arc<Engine>, config: ServiceConfig) -> Result<Service, EngineError> {
        // Before anything runs: a registry shared by several state roots has one daemon.
        let owner = this_process();
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        engine.store.serve(&format!("pid {} on {}, {}", owner.pid, host.trim(), engine.state().path().display()))?;
        let pool = Pool::new(engine.clone(), config.workers, config.log.clone());
        // A predecessor killed with its spare booted left that kernel running.
        engine.reap_orphan_spares();
        if config.spare_kernel {
            crate::verify::SpareKernel::start(engine.clone(), config.session.python.clone());
        }
        let session = SessionKernel::new(engine.clone(), config.session)?;
        Ok(Service { engine, pool, session, owner, log: config.log })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn session(&self) -> &Arc<SessionKernel> {
        &self.session
    }

    /// This daemon, as the owner of what it executes.
    pub fn owner(&self) -> Owner {
        self.owner
    }

    /// Runs queued or executing here.
    pub fn active_runs(&self) -> usize {
        self.pool.active_count()
    }

    /// Nothing is queued or running, and the session kernel is not in use.
    pub fn is_idle(&self) -> bool {
        self.pool.active_count() == 0 && !self.session.is_busy()
    }

    /// Creates the run (or finds the one with the same identity) and queues it: the answer is
    /// the run as it is now, RUNNING while it executes, or already terminal.
    pub fn submit_run(&self, req: SubmitRun) -> Result<Submitted, EngineError> {
        req.check()?;
        let owner = Some(self.owner);
        let stop = Some(StopSignal::new());
        let thread_id = Some(req.thread_id.clone());
        let (run, created, work) = match req.replay {
            Some((source_run_id, step_ids)) => {
                let req = ReplayRequest {
                    source_run_id,
                    step_ids,
                    input: req.input,
                    run_id: req.run_id,
                    version: req.version,
                    workflow: req.workflow,
                    resume_interrupted: false,
                    parallelism: req.parallelism,
                    owner,
                    thread_id,
                    stop,
                    workflow_dir: None,
                    target: None,
                };
                let (run, created) = self.engine.submit_replay(&req)?;
                // The worker continues exactly this run, not a new one.
                let req = ReplayRequest { run_id: Some(run.run_id.clone()), ..req };
                (run, created, Work::Replay { req })
            }
            None => {
                let input = req.input.ok_or_else(|| {
                    EngineError::input("input is required: the run input, as the workflow's input schema describes it")
                })?;
                let workflow = req.workflow.unwrap_or_default();
                let reference = match &req.version {
                    Some(v) => format!("{workflow}@{v}"),
                    None => workflow,
                };
                let wf = self.engine.load_workflow(&reference)?;
                let req = RunRequest {
                    workflow: reference,
                    run_id: req.run_id,
                    input,
                    resume_interrupted: false,
                    parallelism: req.parallelism,
                    owner,
                    thread_id,
                    stop,
                };
                let (run, created) = self.engine.submit_loaded(&wf, &req)?;
                let req = RunRequest { run_id: Some(run.run_id.clone()), ..req };
                (run, created, Work::Run { wf: Box::new(wf), req })
            }
        };
        if !run.status.is_terminal() && !self.pool.is_active(&run.run_id) {
            // A run this daemon created is queued by the request that created it (a duplicate
            // request may get here first, before that one has queued it).
            let ours = run.owner == Some(self.owner);
            if created {
                self.pool.submit(&run.run_id, work);
            } else if !ours {
                // An existing open run not executing here: take it over only if its owner is gone.
                if let Some(o) = &run.owner
                    && is_alive(o)
                {
                    return Err(EngineError::RunOwnedElsewhere { run_id: run.run_id.clone(), owner: o.to_string() });
                }
                self.pool.submit(&run.run_id, self.recovery_work(&run)?);
            }
        }
        Ok(Submitted { view: self.engine.show_run(&run.run_id)?, finished: run.status.is_terminal() })
    }

    /// The only way a plan executes: approves exactly the plan shown (its id and checksum),
    /// consumes the receipt (which reserves the run before any effect) and queues the run. The
    /// answer is the run: RUNNING, or FAILED naming the effect that failed. `channel` is how the
    /// person approved it, recorded with the run.
    pub fn execute_plan(
        &self,
        name: &str,
        plan_id: &str,
        plan_checksum: &str,
        channel: cairn_core::plan::ApprovalChannel,
    ) -> Result<Submitted, EngineError> {
        let (plan, receipt) = self.engine.approve_plan(name, plan_id, plan_checksum)?;
        let thread = Some(format!("plan:{name}"));
        let (run, wf) = self.engine.consume_receipt(&plan, &receipt, channel, Some(self.owner), thread)?;
        if !run.status.is_terminal() {
            let owner = Some(self.owner);
            let work = match self.engine.replay_request(&plan, &run.run_id) {
                Some(req) => Work::Replay {
                    req: ReplayRequest {
                        owner,
                        thread_id: run.thread_id.clone(),
                        stop: Some(StopSignal::new()),
                        ..req
                    },
                },
                None => self.continue_run(&run, wf, false),
            };
            self.pool.submit(&run.run_id, work);
        }
        Ok(Submitted { view: self.engine.show_run(&run.run_id)?, finished: run.status.is_terminal() })
    }

    /// Cancels a run: it stops being scheduled, it is finalised CANCELLED with its RUNNING steps
    /// FAILED (their tokens cleared, so a late write is rejected), and their process groups and
    /// supervised launches are stopped. A run executing elsewhere is finalised the same way.
    pub fn cancel_run(&self, run_id: &str) -> Result<RunView, EngineError> {
        if let Some(stop) = self.pool.stop_signal(run_id) {
            stop.request(StopKind::Cancel);
        }
        let running = self.engine.running_steps(run_id)?;
        self.engine.store.cancel_run(run_id, "cancelled by an operator", self.engine.now_ms())?;
        let (mut groups, mut launches) = (0, 0);
        for step in &running {
            match step.process.as_ref().map(|p| (p, &p.remote)) {
                Some((_, Some(remote))) => {
                    launches += 1;
                    if let Err(e) = self.engine.stop_launch(remote) {
                        (self.log)(&format!("run {run_id}: {e}"));
                    }
                }
                Some((p, None)) => {
                    groups += 1;
                    self.engine.launcher.stop_orphan(&self.engine, p);
                }
                None => {}
            }
        }
        (self.log)(&format!(
            "run {run_id} cancelled; {groups} process group(s) and {launches} supervised launch(es) stopped"
        ));
        self.engine.show_run(run_id)
    }

    /// Takes over every open run whose owner is gone (a crashed or stopped daemon): its steps
    /// left RUNNING are resumed as interrupted, after their recorded processes, if still alive,
    /// are stopped. Runs whose owner lives are left alone. Returns how many were queued.
    pub fn recover(&self) -> usize {
        let open = match self.engine.store.open_runs() {
            Ok(open) => open,
            Err(e) => {
                (self.log)(&format!("recovery could not list open runs: {e}"));
                return 0;
            }
        };
        let mut queued = 0;
        for run in open {
            if let Some(owner) = &run.owner
                && (*owner == self.owner || is_alive(owner))
            {
                (self.log)(&format!("run {} is owned by live process {owner}; left alone", run.run_id));
                continue;
            }
            match self.recovery_work(&run) {
                Ok(work) => {
                    if self.pool.submit(&run.run_id, work) {
                        queued += 1;
                        let was = run.owner.map(|o| o.to_string()).unwrap_or_else(|| "none".into());
                        (self.log)(&format!("recovering run {} (owner {was} is gone)", run.run_id));
                    }
                }
                Err(e) => (self.log)(&format!("cannot recover run {}: {e}", run.run_id)),
            }
        }
        queued
    }

    /// What continues a run taken over from a dead owner: the same request with the recovery
    /// context (`resume_interrupted`), owned by this daemon now.
    fn recovery_work(&self, run: &RunRecord) -> Result<Work, EngineError> {
        if run.source_run_id.is_some() {
            let req = self.engine.replay_request_of(run).ok_or_else(|| {
                EngineError::internal(format!("replay child `{}` does not record what it replays", run.run_id))
            })?;
            return Ok(Work::Replay {
                req: ReplayRequest {
                    resume_interrupted: true,
                    // As submitted: a recovered run keeps its parallelism.
                    parallelism: run.parallelism.max(1) as usize,
                    owner: Some(self.owner),
                    stop: Some(StopSignal::new()),
                    ..req
                },
            });
        }
        Ok(self.continue_run(run, self.engine.workflow_of_run(run)?, true))
    }

    /// The work that executes a created run (not a replay) as it is recorded, owned by this
    /// daemon; `resume` takes over its interrupted steps.
    fn continue_run(&self, run: &RunRecord, wf: LoadedWorkflow, resume: bool) -> Work {
        Work::Run {
            wf: Box::new(wf),
            req: RunRequest {
                workflow: format!("{}@{}", run.workflow, run.version),
                run_id: Some(run.run_id.clone()),
                input: run.input.clone(),
                resume_interrupted: resume,
                parallelism: run.parallelism.max(1) as usize,
                owner: Some(self.owner),
                thread_id: run.thread_id.clone(),
                stop: Some(StopSignal::new()),
            },
        }
    }

    /// Stops for a daemon shutdown: the session kernel is killed, nothing new starts, every run
    /// here is asked to stop without writing, the process groups of their RUNNING steps are
    /// stopped, and the workers are joined (up to `wait`). Those runs stay RUNNING, owned by this
    /// (then dead) daemon, for the next daemon to resume. Returns how many runs were interrupted.
    pub fn shutdown(&self, wait: Duration) -> usize {
        if let Some(spare) = self.engine.spare_kernel() {
            spare.close();
        }
        self.session.shutdown(Duration::from_secs(5));
        let active = self.pool.close();
        // Launches the step agent supervises (on targets, and pipeline controllers) go on: the
        // next daemon re-attaches to them.
        for run_id in &active {
            for step in self.engine.running_steps(run_id).unwrap_or_default() {
                if let Some(p) = step.process.as_ref().filter(|p| p.remote.is_none()) {
                    self.engine.launcher.stop_orphan(&self.engine, p);
                }
            }
        }
        self.pool.join(wait);
        active.len()
    }
}
