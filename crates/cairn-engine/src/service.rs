//! What only the long-lived owner of execution (the daemon) does, as use cases: accept a run and
//! queue it (taking over a run whose owner is gone), cancel a run, execute an approved plan,
//! recover at start-up what a dead predecessor left, and stop. It holds the worker pool and the
//! session kernel; everything it decides goes through the [`Engine`].
//!
//! A daemon records itself in the registry and leases the runs it drives; a heartbeat thread
//! renews its leases and takes over what a gone daemon left ([`cairn_core::lease::takeover`]).
//! Several daemons may share one registry (PostgreSQL): each drives the runs it leases.
//!
//! **Invariant:** a run is executed only by the daemon that holds its lease (or, for one made
//! in-process, by its recorded owner); a run whose holder lives is refused, and one whose holder
//! is gone is taken over (a new lease epoch, after which the old holder's writes are refused) and
//! resumed with `resume_interrupted`, after its processes are stopped: those recorded, and those
//! carrying its attempts' nonces (found whether or not their pids were recorded).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn_core::access::{Caller, Permission, Scope};
use cairn_core::ids::RunId;
use cairn_core::lease::{Takeover, takeover};
use cairn_core::store::{DaemonRecord, LeasedRun, RunRecord, StepRecord, StoreError};
use serde_json::Value;

use crate::launcher::Orphan;
use crate::pool::{Pool, Work};
use crate::process::{Owner, is_alive, this_process};
use crate::registry::LoadedWorkflow;
use crate::replay::ReplayRequest;
use crate::runner::RunRequest;
use crate::session::{SessionConfig, SessionKernel};
use crate::{Engine, EngineError, RunView, StopKind, StopSignal};

/// How a [`Service`] runs.
pub struct ServiceConfig {
    /// Local steps executing at once, across runs: the step slots ([`crate::slots`]). The pool
    /// keeps more runs than that in flight.
    pub workers: usize,
    pub session: SessionConfig,
    /// Keep a spare scratch kernel booted for the next verification (with the session's
    /// interpreter setting).
    pub spare_kernel: bool,
    /// How long a lease lasts without a heartbeat: after this, another daemon may take the runs
    /// of a daemon that stopped renewing (its host lost, or it was killed).
    pub lease: Duration,
    /// The name this daemon's host has among a team's daemons (default: the system's host name).
    pub host: Option<String>,
}

/// The default of `--lease-secs`.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(15);

/// How often the heartbeat thread looks for runs to take over (and checks it was not stopped).
const TAKEOVER_TICK: Duration = Duration::from_millis(200);

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
    pub replay: Option<(RunId, Vec<String>)>,
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
    /// This daemon in the registry.
    me: DaemonRecord,
    lease: Duration,
    /// Set to stop the heartbeat thread.
    closing: Arc<AtomicBool>,
    heartbeat: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Runs this daemon said it leaves to another host, so it says so once.
    waiting: Mutex<HashSet<RunId>>,
    /// The runs leased to this daemon that its pool did not drive at the last heartbeat.
    strays: Mutex<HashSet<RunId>>,
}

impl Service {
    /// Starts the worker pool and the session kernel (recording `died` for jobs a dead
    /// predecessor left), owned by this process. Call [`Service::recover`] next.
    pub fn start(engine: Arc<Engine>, config: ServiceConfig) -> Result<Arc<Service>, EngineError> {
        let owner = this_process();
        let now = engine.now_ms();
        let host = config
            .host
            .clone()
            .unwrap_or_else(|| nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).unwrap_or_default());
        let me = DaemonRecord {
            id: format!("dmn_{}", engine.ids.run_suffix()),
            host,
            pid: owner.pid,
            start_time: owner.start_time,
            state_root: engine.state().path().display().to_string(),
            started_at: now,
            heartbeat_at: now,
            stopped_at: None,
        };
        let lease_ms = millis(config.lease);
        engine.store.register_daemon(&me)?;
        // Set once: an engine serves one daemon.
        let _ = engine.daemon.set(crate::Lessee { record: me.clone(), lease_ms });
        // Set once: an engine serves one daemon.
        let _ = engine.slots.set(crate::slots::StepSlots::new(config.workers, engine.backlog.clone()));
        let pool = Pool::new(engine.clone(), crate::pool::runs_in_flight(config.workers));
        // A predecessor killed with its spare booted left that kernel running.
        engine.reap_orphan_spares();
        if config.spare_kernel {
            crate::verify::SpareKernel::start(engine.clone(), config.session.python.clone());
        }
        let session = SessionKernel::new(engine.clone(), config.session)?;
        let service = Arc::new(Service {
            engine,
            pool,
            session,
            owner,
            me,
            lease: config.lease,
            closing: Arc::new(AtomicBool::new(false)),
            heartbeat: Mutex::new(None),
            waiting: Mutex::new(HashSet::new()),
            strays: Mutex::new(HashSet::new()),
        });
        // A weak reference: the thread ends when the service goes, or when it is closed.
        let weak = Arc::downgrade(&service);
        let closing = service.closing.clone();
        let thread = std::thread::Builder::new()
            .name("cairn-heartbeat".into())
            .spawn(move || heartbeat(weak, closing))
            .map_err(|e| EngineError::internal(format!("cannot start the heartbeat thread: {e}")))?;
        *service.heartbeat.lock().unwrap_or_else(|p| p.into_inner()) = Some(thread);
        Ok(service)
    }

    /// The daemons sharing this registry that are alive (their heartbeat within a lease of now,
    /// not stopped, and, on this host, their process there), oldest first, each with the open
    /// runs it holds the lease of.
    pub fn daemons(&self) -> Result<Vec<(DaemonRecord, Vec<RunId>)>, EngineError> {
        let since = self.engine.now_ms() - self.lease_ms();
        let mut out = Vec::new();
        for d in self.engine.store.live_daemons(since)? {
            if d.host == self.me.host && !is_alive(&Owner { pid: d.pid, start_time: d.start_time }) {
                continue;
            }
            let runs = self.engine.store.leased_runs(&d.id)?;
            out.push((d, runs));
        }
        Ok(out)
    }

    pub fn engine(&self) -> &Arc<Engine> {
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
    /// Refused unless `caller` may run the workflow (for a replay, the source's).
    pub fn submit_run(&self, caller: &Caller, req: SubmitRun) -> Result<Submitted, EngineError> {
        req.check()?;
        let by = Some(caller.clone());
        let owner = Some(self.owner);
        let stop = Some(StopSignal::new());
        let thread_id = Some(req.thread_id.clone());
        let (run, created, work) = match req.replay {
            Some((source_run_id, step_ids)) => {
                // A source that is not there is refused by the replay itself, saying so.
                let mut admission = cairn_core::quota::Admission::default();
                if let Some(source) = self.engine.store.run(&source_run_id)? {
                    let resource = Scope { workflow: Some(source.workflow.clone()), target: None };
                    self.engine.authorize(caller, Permission::Run, &resource)?;
                    admission = self.engine.admission(caller, &source.workflow)?;
                }
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
                    by,
                    admission,
                };
                let (run, created) =
                    self.engine.submit_replay(&req).map_err(|e| Engine::over_quota(e, &req.admission))?;
                // The worker continues exactly this run, not a new one.
                let req = ReplayRequest { run_id: Some(run.run_id.to_string()), ..req };
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
                let resource = Scope { workflow: Some(wf.spec().name.clone()), target: None };
                self.engine.authorize(caller, Permission::Run, &resource)?;
                let admission = self.engine.admission(caller, &wf.spec().name)?;
                let req = RunRequest {
                    workflow: reference,
                    run_id: req.run_id,
                    input,
                    resume_interrupted: false,
                    parallelism: req.parallelism,
                    owner,
                    thread_id,
                    stop,
                    by,
                    admission,
                };
                let (run, created) =
                    self.engine.submit_loaded(&wf, &req).map_err(|e| Engine::over_quota(e, &req.admission))?;
                let req = RunRequest { run_id: Some(run.run_id.to_string()), ..req };
                (run, created, Work::Run { wf: Box::new(wf), req })
            }
        };
        if !run.status.is_terminal() && !self.pool.is_active(&run.run_id) {
            // A run this daemon created is queued by the request that created it (a duplicate
            // request may get here first, before that one has queued it).
            if created {
                self.start_created(&run.run_id, work);
            } else if let Some(leased) = self.engine.store.leased_run(&run.run_id)? {
                // An existing open run not executing here: taken over only if its holder is gone.
                match self.decide(&leased) {
                    Takeover::Take => self.take_over(&leased)?,
                    // Ours, created by the request that is about to queue it.
                    Takeover::Leave if leased.lease.as_ref().is_some_and(|l| l.daemon == self.me.id) => {}
                    Takeover::Leave => {
                        let owner = match (&leased.lease, &leased.holder) {
                            (Some(_), Some(h)) => format!("daemon {} (pid {} on {})", h.id, h.pid, h.host),
                            (Some(l), None) => format!("daemon {}", l.daemon),
                            (None, _) => run.owner.map(|o| o.to_string()).unwrap_or_else(|| "another process".into()),
                        };
                        return Err(EngineError::RunOwnedElsewhere { run_id: run.run_id.to_string(), owner });
                    }
                    Takeover::Wait { host } => {
                        return Err(EngineError::RunOwnedElsewhere {
                            run_id: run.run_id.to_string(),
                            owner: format!(
                                "no daemon now: its files are on host {host}, and a daemon there continues it"
                            ),
                        });
                    }
                }
            }
        }
        Ok(Submitted {
            view: self.engine.show_run_page(&run.run_id, &crate::first_steps())?,
            finished: run.status.is_terminal(),
        })
    }

    /// The only way a plan executes: approves exactly the plan shown (its id and checksum),
    /// consumes the receipt (which reserves the run before any effect) and queues the run. The
    /// answer is the run: RUNNING, or FAILED naming the effect that failed. `channel` is how the
    /// person approved it, recorded with the run.
    pub fn execute_plan(
        &self,
        caller: &Caller,
        name: &str,
        plan_id: &str,
        plan_checksum: &str,
        channel: cairn_core::plan::ApprovalChannel,
    ) -> Result<Submitted, EngineError> {
        let (plan, receipt) = self.engine.approve_plan(caller, name, plan_id, plan_checksum)?;
        let thread = Some(format!("plan:{name}"));
        let admission = self.engine.admission(caller, &plan.workflow)?;
        let (run, wf) = self.engine.consume_receipt(
            &plan,
            &receipt,
            crate::plan::Approving { caller, channel, admission, owner: Some(self.owner), thread_id: thread },
        )?;
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
            self.start_created(&run.run_id, work);
        }
        Ok(Submitted {
            view: self.engine.show_run_page(&run.run_id, &crate::first_steps())?,
            finished: run.status.is_terminal(),
        })
    }

    /// Queues a run this daemon created, or, when a quota holds it queued, keeps it here waiting
    /// (shown on the run) until a place frees.
    fn start_created(&self, run_id: &RunId, work: Work) {
        match self.engine.admit_held(run_id) {
            Err(e @ EngineError::QuotaQueued { .. }) => {
                self.pool.hold(run_id, work.stop().cloned().unwrap_or_default());
                self.engine.hold_waiting(run_id, &e);
            }
            // Admitted, or an error the worker meets again and handles.
            _ => {
                self.pool.submit(run_id, work);
            }
        }
    }

    /// Cancels a run: it stops being scheduled, it is finalised CANCELLED with its RUNNING steps
    /// FAILED (their tokens cleared, so a late write is rejected), and their process groups and
    /// supervised launches are stopped. A run executing elsewhere is finalised the same way.
    ///
    /// Refused unless `caller` submitted it and may still run its workflow, or may cancel runs of
    /// its workflow (on its target).
    pub fn cancel_run(&self, caller: &Caller, run_id: &RunId) -> Result<RunView, EngineError> {
        let run =
            self.engine.store.run(run_id)?.ok_or_else(|| EngineError::RunNotFound { run_id: run_id.to_string() })?;
        let target = self.engine.store.target_of_run(run_id)?;
        let resource = Scope { workflow: Some(run.workflow.clone()), target };
        let own =
            run.submitted_by.as_deref() == Some(caller.name()) && caller.access.allows(Permission::Run, &resource);
        if !own {
            self.engine.authorize(caller, Permission::Cancel, &resource)?;
        }
        let here = match self.pool.stop_signal(run_id) {
            Some(stop) => {
                stop.request(StopKind::Cancel);
                true
            }
            None => false,
        };
        // A local process is stopped only on its own host: one of a run another host's daemon
        // drives is stopped there, by that daemon, when its heartbeat finds the run finished.
        // Supervised launches (on a target) are reached from anywhere.
        let on_this_host = here
            || self.engine.store.leased_run(run_id)?.is_none_or(|l| l.holder.is_none_or(|h| h.host == self.me.host));
        let running = self.engine.running_steps(run_id)?;
        let act =
            self.engine.act(caller, "run.cancelled", run_id.as_str(), serde_json::json!({"workflow": run.workflow}));
        let reason = format!("cancelled by {} ({})", caller.name(), caller.channel);
        self.engine.store.cancel_run(run_id, &reason, self.engine.now_ms(), Some(&act))?;
        let (mut groups, mut launches) = (0, 0);
        for step in &running {
            match step.process.as_ref().map(|p| (p, &p.remote)) {
                Some((_, Some(remote))) => {
                    launches += 1;
                    if let Err(e) = self.engine.stop_launch(remote) {
                        tracing::warn!("run {run_id}: {e}");
                    }
                    // A launch on this host whose pid file was not written yet is found by its
                    // nonce only.
                    if on_this_host && remote.target == cairn_core::target::LOCAL {
                        let left = Orphan { process: None, nonce: Some(remote.nonce.clone()) };
                        self.engine.launcher.stop_orphan(&self.engine.launch_context(), &left);
                    }
                }
                // A local tool, by its recorded group and by its nonce (its pid may never have
                // been recorded: its runner killed between the spawn and that commit).
                _ if on_this_host => {
                    groups += usize::from(step.process.is_some());
                    self.engine.launcher.stop_orphan(&self.engine.launch_context(), &local_orphan(step));
                }
                _ => {}
            }
        }
        tracing::info!(
            "run {run_id} cancelled; {groups} process group(s) and {launches} supervised launch(es) stopped"
        );
        self.engine.show_run_page(run_id, &crate::first_steps())
    }

    /// The daemon's startup recovery: takes over every open run whose holder is gone (a crashed
    /// or stopped daemon, here or, once its lease expired, elsewhere; or the process that ran it
    /// in-process): its steps left RUNNING are resumed as interrupted, after their recorded
    /// processes, if still alive, are stopped. Runs whose holder lives are left alone. Returns
    /// how many were queued. The heartbeat thread takes over leased runs again every
    /// [`TAKEOVER_TICK`].
    pub fn recover(&self) -> usize {
        self.take_over_gone(true)
    }

    /// Takes over the open runs whose holder is gone; `unleased` includes runs no daemon ever
    /// leased (made in-process). A running daemon leaves those to their person: DESIGN's explicit
    /// recovery (`--resume-interrupted`) is theirs, and a daemon resuming one at the same moment
    /// would run its interrupted steps a second time.
    fn take_over_gone(&self, unleased: bool) -> usize {
        let open = match self.engine.store.open_leases(&self.me.id) {
            Ok(open) => open,
            Err(e) => {
                tracing::warn!("could not list open runs to take over: {e}");
                return 0;
            }
        };
        let mut queued = 0;
        for leased in open {
            let run_id = leased.run.run_id.clone();
            if self.pool.is_active(&run_id) || (!unleased && leased.lease.is_none()) {
                continue;
            }
            match self.decide(&leased) {
                Takeover::Take => match self.take_over(&leased) {
                    Ok(()) => queued += 1,
                    // Another daemon took it first, or is writing it now (tried again next tick).
                    Err(EngineError::Store(
                        StoreError::StaleRevision { .. }
                        | StoreError::RunFinished { .. }
                        | StoreError::RunBusy { .. }
                        | StoreError::RunLeased { .. },
                    )) => {}
                    Err(e) => tracing::warn!("cannot take run {run_id} over: {e}"),
                },
                Takeover::Wait { host } => {
                    if self.waiting.lock().unwrap_or_else(|p| p.into_inner()).insert(run_id.clone()) {
                        tracing::info!(
                            "run {run_id} waits for a daemon on host {host}: its lease expired and its files are there"
                        );
                    }
                }
                Takeover::Leave => {}
            }
        }
        queued
    }

    /// What this daemon does about an open run it does not drive: whether its holder (a daemon
    /// on this host, or the run's owner process) is alive is checked here.
    fn decide(&self, leased: &LeasedRun) -> Takeover {
        let alive = match (&leased.lease, &leased.holder) {
            (Some(_), Some(h)) if h.host == self.me.host => {
                Some(h.id == self.me.id || is_alive(&Owner { pid: h.pid, start_time: h.start_time }))
            }
            (Some(_), _) => None,
            (None, _) => leased.run.owner.as_ref().map(|o| *o == self.owner || is_alive(o)),
        };
        takeover(leased, &self.me, self.engine.now_ms(), alive)
    }

    /// Takes `leased`'s lease (a new epoch: whatever its old holder writes now is refused) and
    /// queues the run, resumed.
    fn take_over(&self, leased: &LeasedRun) -> Result<(), EngineError> {
        let run = &leased.run;
        let now = self.engine.now_ms();
        let until = now + self.lease_ms();
        let seen = leased.lease.as_ref().map_or(0, |l| l.epoch);
        // The work first (it only reads): a run this daemon cannot drive (its workflow's files
        // are not here) is left unleased for one that can, not leased and then never driven.
        let work = self.recovery_work(run, StopSignal::new())?;
        let lease = self.engine.store.take_lease(&run.run_id, &self.me, seen, run.revision, until, now)?;
        if self.pool.submit(&run.run_id, work) {
            let was = match &leased.lease {
                Some(l) if l.daemon == self.me.id => "it was not driven here".to_string(),
                Some(l) => format!("daemon {} is gone", l.daemon),
                None => run.owner.map(|o| format!("process {o} is gone")).unwrap_or_else(|| "it had no owner".into()),
            };
            tracing::info!("taking run {} over (lease epoch {}; {was})", run.run_id, lease.epoch);
        }
        Ok(())
    }

    /// Tries again each run waiting here for its environment whose backoff is over: once the
    /// registry can be read and written (its `run.continued` is), the run continues as recovered
    /// (its steps left running resumed as interrupted); otherwise it waits longer. A run stopped
    /// or finished meanwhile (cancelled, taken over) is released.
    fn retry_waiting(&self) {
        for run_id in self.engine.waits_due() {
            let Some(stop) = self.pool.stop_signal(&run_id) else {
                self.engine.forget_waiting(&run_id);
                continue;
            };
            if stop.requested().is_some() {
                self.pool.release(&run_id);
                continue;
            }
            // Held by a quota: it goes on only once admitted; until then it waits on, quietly
            // (its `run.waiting` is written once).
            if self.engine.waits_for_quota(&run_id) {
                match self.engine.admit_held(&run_id) {
                    Ok(()) => {}
                    Err(e) => {
                        self.engine.hold_waiting(&run_id, &e);
                        continue;
                    }
                }
            }
            match self.continue_waiting(&run_id, stop) {
                Ok(Some(work)) => self.pool.requeue(&run_id, work),
                Ok(None) => self.pool.release(&run_id),
                Err(e) if crate::is_environment_fault(&e) => {
                    self.engine.hold_waiting(&run_id, &e);
                }
                Err(e) => {
                    tracing::warn!("run {run_id} could not go on after waiting: {e}");
                    self.pool.release(&run_id);
                }
            }
        }
    }

    /// The work that continues a waiting run, once its wait is ended in the registry; `None` when
    /// it finished meanwhile.
    fn continue_waiting(&self, run_id: &RunId, stop: StopSignal) -> Result<Option<Work>, EngineError> {
        let Some(run) = self.engine.store.run(run_id)? else { return Ok(None) };
        if run.status.is_terminal() {
            return Ok(None);
        }
        let work = self.recovery_work(&run, stop)?;
        Ok(self.engine.continue_after_wait(run_id)?.then_some(work))
    }

    fn lease_ms(&self) -> i64 {
        millis(self.lease)
    }

    /// Stops the local processes (on this host) of `steps`, recorded or found by their nonce;
    /// launches the step agent supervises go on, for whoever drives their run next.
    fn stop_local(&self, steps: Vec<StepRecord>) {
        for step in steps {
            if step.process.as_ref().is_none_or(|p| p.remote.is_none()) {
                self.engine.launcher.stop_orphan(&self.engine.launch_context(), &local_orphan(&step));
            }
        }
    }

    /// Renews this daemon's heartbeat and leases; a run executing here whose lease it no longer
    /// holds (another daemon took it, or it was cancelled through another daemon) is stopped.
    fn renew(&self) {
        let now = self.engine.now_ms();
        let held = match self.engine.store.heartbeat(&self.me.id, now, now + self.lease_ms()) {
            Ok(held) => held.into_iter().map(|(run_id, _)| run_id).collect::<HashSet<_>>(),
            Err(e) => {
                tracing::warn!("heartbeat failed (leases not renewed): {e}");
                return;
            }
        };
        let active: HashSet<RunId> = self.pool.active_ids().into_iter().collect();
        self.drive_strays(&held, &active);
        for run_id in active {
            if held.contains(&run_id) {
                continue;
            }
            let Some(stop) = self.pool.stop_signal(&run_id) else { continue };
            let Ok(Some(leased)) = self.engine.store.leased_run(&run_id) else { continue };
            if leased.lease.as_ref().is_some_and(|l| l.daemon != self.me.id) {
                // Taken over: its new holder stops (or re-attaches to) what was left running.
                stop.request(StopKind::LeaseLost);
                self.engine.store.drop_lease(&run_id);
                tracing::info!("run {run_id}: another daemon took its lease over; stopped driving it");
            } else if leased.run.status.is_terminal() {
                // Still ours, but finished through another daemon (cancelled): what it runs here
                // is stopped here, where its processes are.
                stop.request(StopKind::Cancel);
                self.stop_local(self.engine.store.steps(&run_id).unwrap_or_default());
                tracing::info!("run {run_id} was {} through another daemon; stopped here", leased.run.status);
            }
        }
    }

    /// A run leased to this daemon that its pool does not drive (its driver gave up on an
    /// unexpected error) would stay leased here for good, the heartbeat renewing its lease by
    /// owner, and no daemon would take it over: one found so at two heartbeats running (not one
    /// just leased and about to be queued) is taken over again here, under a new epoch.
    fn drive_strays(&self, held: &HashSet<RunId>, active: &HashSet<RunId>) {
        let now: HashSet<RunId> = held.difference(active).cloned().collect();
        let before = std::mem::replace(&mut *self.strays.lock().unwrap_or_else(|p| p.into_inner()), now.clone());
        for run_id in now.intersection(&before) {
            let Ok(Some(leased)) = self.engine.store.leased_run(run_id) else { continue };
            if self.pool.stop_signal(run_id).is_some() || leased.run.status.is_terminal() {
                continue;
            }
            tracing::warn!("run {run_id} is leased to this daemon but not driven here; taking it over again");
            if let Err(e) = self.take_over(&leased) {
                tracing::warn!("cannot take run {run_id} over again: {e}");
            }
        }
    }

    /// What continues a run taken over from a dead owner: the same request with the recovery
    /// context (`resume_interrupted`), owned by this daemon now.
    fn recovery_work(&self, run: &RunRecord, stop: StopSignal) -> Result<Work, EngineError> {
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
                    stop: Some(stop),
                    ..req
                },
            });
        }
        let mut work = self.continue_run(run, self.engine.workflow_of_run(run)?, true);
        if let Work::Run { req, .. } = &mut work {
            req.stop = Some(stop);
        }
        Ok(work)
    }

    /// The work that executes a created run (not a replay) as it is recorded, owned by this
    /// daemon; `resume` takes over its interrupted steps.
    fn continue_run(&self, run: &RunRecord, wf: LoadedWorkflow, resume: bool) -> Work {
        Work::Run {
            wf: Box::new(wf),
            req: RunRequest {
                workflow: format!("{}@{}", run.workflow, run.version),
                run_id: Some(run.run_id.to_string()),
                input: run.input.clone(),
                resume_interrupted: resume,
                parallelism: run.parallelism.max(1) as usize,
                owner: Some(self.owner),
                thread_id: run.thread_id.clone(),
                stop: Some(StopSignal::new()),
                // Created already: nothing new to record, no quota to pass again.
                by: None,
                admission: cairn_core::quota::Admission::default(),
            },
        }
    }

    /// Stops for a daemon shutdown: the session kernel is killed, nothing new starts, every run
    /// here is asked to stop without writing, the process groups of their RUNNING steps are
    /// stopped, and the workers are joined (up to `wait`). Those runs stay RUNNING, owned by this
    /// (then dead) daemon, for the next daemon to resume. Returns how many runs were interrupted.
    pub fn shutdown(&self, wait: Duration) -> usize {
        self.closing.store(true, Ordering::SeqCst);
        if let Some(thread) = self.heartbeat.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = thread.join();
        }
        if let Some(spare) = self.engine.spare_kernel() {
            spare.close();
        }
        self.session.shutdown(Duration::from_secs(5));
        let active = self.pool.close();
        // Launches the step agent supervises (on targets, and pipeline controllers) go on: the
        // next daemon re-attaches to them.
        for run_id in &active {
            self.stop_local(self.engine.running_steps(run_id).unwrap_or_default());
        }
        self.pool.join(wait);
        // Its leases end now: the next daemon, here or elsewhere, need not wait for them.
        if let Err(e) = self.engine.store.stop_daemon(&self.me.id, self.engine.now_ms()) {
            tracing::warn!("could not release this daemon's leases: {e}");
        }
        active.len()
    }
}

/// What a RUNNING step's local attempt may have left on this host: its recorded process, and
/// its token's nonce, which the tool's environment carries whether or not its pid was recorded.
fn local_orphan(step: &StepRecord) -> Orphan {
    Orphan { process: step.process.clone(), nonce: step.attempt_token.as_ref().map(|t| t.nonce()) }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1)
}

/// The heartbeat thread: every third of a lease, renews this daemon's leases; every tick, takes
/// over what a gone daemon left. Ends when the service closes or is dropped.
fn heartbeat(service: std::sync::Weak<Service>, closing: Arc<AtomicBool>) {
    let mut last_beat = std::time::Instant::now();
    while !closing.load(Ordering::SeqCst) {
        std::thread::sleep(TAKEOVER_TICK);
        let Some(service) = service.upgrade() else { return };
        if closing.load(Ordering::SeqCst) {
            return;
        }
        if last_beat.elapsed() >= service.lease / 3 {
            last_beat = std::time::Instant::now();
            service.renew();
        }
        service.take_over_gone(false);
        service.retry_waiting();
    }
}
