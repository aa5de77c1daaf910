//! The daemon's bounded worker pool: runs queued in submission order, at most
//! [`runs_in_flight`] executing at once (their worker threads started as runs queue up; steps
//! within a run keep the engine's order), each with a stop signal for cancel and shutdown. Their
//! local steps share the daemon's step slots ([`crate::slots`]): many runs in flight keep the
//! slots full while others commit. It decides nothing: [`crate::Service`] says what to queue and
//! when to stop.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cairn_core::ids::RunId;
use cairn_core::store::StoreError;

use crate::registry::LoadedWorkflow;
use crate::replay::ReplayRequest;
use crate::runner::{NoProgress, RunRequest};
use crate::{Engine, EngineError, StopKind, StopSignal};

/// How many runs execute at once for `slots` step slots: enough that while some commit a step's
/// end (an fsync, milliseconds on a loaded disk) others' tools fill the slots, and their commits
/// meet in one group; a run waiting for a slot costs a parked thread.
pub(crate) fn runs_in_flight(slots: usize) -> usize {
    (slots * RUNS_PER_SLOT).clamp(RUNS_PER_SLOT, 1024)
}

/// Sixteen: with eight, the runs held in a commit group for company (crate::slots) left the
/// slots' queue short more often; under the load bench sixteen did 1–7 % more steps a second for
/// 4–16 % less of the daemon's CPU a step, and thirty-two no better (BENCHMARKS §18).
const RUNS_PER_SLOT: usize = 16;

/// One unit of work: a run or a replay child, created already, to execute (or continue).
pub(crate) enum Work {
    Run { wf: Box<LoadedWorkflow>, req: RunRequest },
    Replay { req: ReplayRequest },
}

impl Work {
    pub(crate) fn stop(&self) -> Option<&StopSignal> {
        match self {
            Work::Run { req, .. } => req.stop.as_ref(),
            Work::Replay { req } => req.stop.as_ref(),
        }
    }
}

/// How an execution of a run here ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// Finished, stopped or taken over: released.
    Done,
    /// Held by a fault of its environment: kept, to be tried again.
    Waiting,
}

pub(crate) struct Pool {
    engine: Arc<Engine>,
    queue: Mutex<Queue>,
    /// The most worker threads: started as runs queue up, not all at start-up.
    max_workers: usize,
    /// Itself, for the workers it starts.
    me: std::sync::Weak<Pool>,
    wake: Condvar,
    /// Runs queued or executing here, with their stop signals.
    active: Mutex<HashMap<RunId, StopSignal>>,
    closing: AtomicBool,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// The test fault point `give-up:RUN` was reached (it gives up once).
    gave_up: AtomicBool,
}

/// The runs waiting for a worker, and how many workers exist and wait.
#[derive(Default)]
struct Queue {
    items: VecDeque<(RunId, Work)>,
    workers: usize,
    idle: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Pool {
    pub(crate) fn new(engine: Arc<Engine>, workers: usize) -> Arc<Pool> {
        Arc::new_cyclic(|me| Pool {
            engine,
            queue: Mutex::new(Queue::default()),
            max_workers: workers.max(1),
            me: me.clone(),
            wake: Condvar::new(),
            active: Mutex::new(HashMap::new()),
            closing: AtomicBool::new(false),
            gave_up: AtomicBool::new(false),
            threads: Mutex::new(Vec::new()),
        })
    }

    /// Queues `work`, starting a worker for it when every one is busy and there may be more.
    fn enqueue(&self, run_id: &RunId, work: Work) {
        let start = {
            let mut q = lock(&self.queue);
            q.items.push_back((run_id.clone(), work));
            let start = q.items.len() > q.idle && q.workers < self.max_workers;
            if start {
                q.workers += 1;
            }
            start.then_some(q.workers - 1)
        };
        self.wake.notify_one();
        let Some(i) = start else { return };
        let Some(pool) = self.me.upgrade() else { return };
        match std::thread::Builder::new().name(format!("cairn-worker-{i}")).spawn(move || pool.work()) {
            Ok(t) => lock(&self.threads).push(t),
            Err(e) => {
                lock(&self.queue).workers -= 1;
                tracing::warn!("could not start worker {i}: {e}");
            }
        }
    }

    /// Queues a created run unless it is already queued or executing here. Returns whether it
    /// was queued now.
    pub(crate) fn submit(&self, run_id: &RunId, work: Work) -> bool {
        if self.closing.load(Ordering::SeqCst) {
            return false;
        }
        {
            let mut active = lock(&self.active);
            if active.contains_key(run_id) {
                return false;
            }
            active.insert(run_id.clone(), work.stop().cloned().unwrap_or_default());
        }
        self.enqueue(run_id, work);
        true
    }

    /// Keeps a created run here without queueing it: it waits (for a quota), and the heartbeat
    /// queues it once it may go on.
    pub(crate) fn hold(&self, run_id: &RunId, stop: StopSignal) {
        lock(&self.active).insert(run_id.clone(), stop);
    }

    pub(crate) fn is_active(&self, run_id: &RunId) -> bool {
        lock(&self.active).contains_key(run_id)
    }

    pub(crate) fn active_count(&self) -> usize {
        lock(&self.active).len()
    }

    /// The runs queued or executing here.
    pub(crate) fn active_ids(&self) -> Vec<RunId> {
        lock(&self.active).keys().cloned().collect()
    }

    /// The stop signal of a run queued or executing here.
    pub(crate) fn stop_signal(&self, run_id: &RunId) -> Option<StopSignal> {
        lock(&self.active).get(run_id).cloned()
    }

    fn work(&self) {
        // A run's thread sleeps and wakes at every step; it need not preempt the tools running
        // meanwhile to do it (cairn_exec::run_this_thread_as_batch).
        cairn_exec::run_this_thread_as_batch();
        loop {
            let next = {
                let mut q = lock(&self.queue);
                loop {
                    if self.closing.load(Ordering::SeqCst) {
                        return;
                    }
                    if let Some(item) = q.items.pop_front() {
                        break item;
                    }
                    q.idle += 1;
                    q = self.wake.wait(q).unwrap_or_else(PoisonError::into_inner);
                    q.idle -= 1;
                }
            };
            let (run_id, work) = next;
            let ended = match work.stop().and_then(StopSignal::requested) {
                None => self.execute(&run_id, work),
                Some(_) => Ended::Done,
            };
            if ended == Ended::Done {
                self.release(&run_id);
                // A place a quota counted may be free now: runs it holds are tried at once.
                self.engine.wake_quota_waits();
            }
        }
    }

    /// A run queued or executing here no longer is: finished, stopped or taken over, this daemon
    /// writes it no more.
    pub(crate) fn release(&self, run_id: &RunId) {
        self.engine.forget_waiting(run_id);
        self.engine.store.drop_lease(run_id);
        lock(&self.active).remove(run_id);
    }

    /// Queues again a run that waited here for its environment (it stays active meanwhile, so no
    /// one else queues it), with the work that continues it.
    pub(crate) fn requeue(&self, run_id: &RunId, work: Work) {
        if self.closing.load(Ordering::SeqCst) {
            return;
        }
        if let Some(stop) = work.stop() {
            lock(&self.active).insert(run_id.clone(), stop.clone());
        }
        self.enqueue(run_id, work);
    }

    fn execute(&self, run_id: &RunId, work: Work) -> Ended {
        if let Some(crate::CrashPoint::GiveUp { run }) = &self.engine.options().crash
            && run == run_id.as_str()
            && !self.gave_up.swap(true, Ordering::SeqCst)
        {
            tracing::warn!("run {run_id} could not go on: given up at the test's fault point");
            return Ended::Done;
        }
        // A run a quota holds queued does not start until it is admitted (after a crash too).
        match self.engine.admit_held(run_id) {
            Ok(()) => {}
            Err(e) if matches!(e, EngineError::QuotaQueued { .. }) || crate::is_environment_fault(&e) => {
                self.engine.hold_waiting(run_id, &e);
                return Ended::Waiting;
            }
            Err(e) => tracing::warn!("run {run_id}: its quota could not be checked: {e}"),
        }
        let started = Instant::now();
        let outcome = match work {
            Work::Run { wf, req } => self.engine.run_loaded(&wf, &req, &mut NoProgress).map(|r| r.status),
            Work::Replay { req } => self.engine.replay_executed(&req, &mut NoProgress).map(|(r, _)| r.status),
        };
        match outcome {
            Ok(status) => tracing::info!("run {run_id} {status} after {} ms", started.elapsed().as_millis()),
            Err(EngineError::Stopped { why, .. }) => tracing::info!("run {run_id} stopped: {why}"),
            Err(EngineError::Store(StoreError::LeaseLost { daemon, epoch, holder, .. })) => {
                // Refused, not applied: said in the run's log, where its new holder's work shows.
                let lease = cairn_core::store::Lease { daemon, epoch };
                if let Err(e) = self.engine.store.record_stale_lease(run_id, &lease, self.engine.now_ms()) {
                    tracing::warn!("run {run_id}: could not record the refused write: {e}");
                }
                tracing::warn!(
                    "run {run_id}: its lease was taken over by {holder}; a write was refused and it is no longer driven here"
                )
            }
            // The registry's disk or database, or the run's target, failed: the run stays here,
            // waiting, and the heartbeat tries it again once its backoff is over.
            Err(e) if crate::is_environment_fault(&e) => {
                self.engine.hold_waiting(run_id, &e);
                return Ended::Waiting;
            }
            Err(e) => tracing::warn!("run {run_id} could not go on: {e}"),
        }
        Ended::Done
    }

    /// Stops taking work and asks every run here to stop without writing; returns their ids.
    pub(crate) fn close(&self) -> Vec<RunId> {
        self.closing.store(true, Ordering::SeqCst);
        self.wake.notify_all();
        let active: Vec<(RunId, StopSignal)> = lock(&self.active).iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        for (_, stop) in &active {
            stop.request(StopKind::Shutdown);
        }
        active.into_iter().map(|(id, _)| id).collect()
    }

    /// Joins the workers, waiting at most `wait` for them.
    pub(crate) fn join(&self, wait: Duration) {
        let deadline = Instant::now() + wait;
        let threads: Vec<JoinHandle<()>> = lock(&self.threads).drain(..).collect();
        for t in threads {
            while !t.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}
