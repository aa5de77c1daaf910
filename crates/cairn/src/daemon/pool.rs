//! The daemon's bounded worker pool: runs queued in submission order, at most `workers` executing
//! at once (steps within a run keep the engine's order), each with a stop signal for cancel and
//! shutdown; and startup recovery of runs a dead owner left.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cairn_core::status::StepStatus;
use cairn_core::store::{RemoteProcess, RunRecord};
use cairn_engine::registry::LoadedWorkflow;
use cairn_engine::replay::ReplayRequest;
use cairn_engine::runner::{NoProgress, RunRequest};
use cairn_engine::{Engine, EngineError, StopKind, StopSignal};
use cairn_exec::{ProcessIdentity, is_same_process, terminate_if_same};

/// One unit of work: a run or a replay child, created already, to execute (or continue).
pub enum Work {
    Run { wf: Box<LoadedWorkflow>, req: RunRequest },
    Replay { req: ReplayRequest },
}

impl Work {
    fn stop(&self) -> Option<&StopSignal> {
        match self {
            Work::Run { req, .. } => req.stop.as_ref(),
            Work::Replay { req } => req.stop.as_ref(),
        }
    }
}

pub struct Pool {
    engine: Arc<Engine>,
    /// This daemon instance, `pid:start_time`, recorded as the owner of what it executes.
    owner: String,
    queue: Mutex<VecDeque<(String, Work)>>,
    wake: Condvar,
    /// Runs queued or executing here, with their stop signals.
    active: Mutex<HashMap<String, StopSignal>>,
    closing: AtomicBool,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn log(line: impl AsRef<str>) {
    eprintln!("{} {}", crate::wire::time(jiff::Timestamp::now().as_millisecond()), line.as_ref());
}

impl Pool {
    pub fn new(engine: Arc<Engine>, owner: String, workers: usize) -> Arc<Pool> {
        let pool = Arc::new(Pool {
            engine,
            owner,
            queue: Mutex::new(VecDeque::new()),
            wake: Condvar::new(),
            active: Mutex::new(HashMap::new()),
            closing: AtomicBool::new(false),
            threads: Mutex::new(Vec::new()),
        });
        for i in 0..workers.max(1) {
            let p = pool.clone();
            match std::thread::Builder::new().name(format!("cairn-worker-{i}")).spawn(move || p.work()) {
                Ok(t) => lock(&pool.threads).push(t),
                Err(e) => log(format!("could not start worker {i}: {e}")),
            }
        }
        pool
    }

    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Queues a created run unless it is already queued or executing here. Returns whether it
    /// was queued now.
    pub fn submit(&self, run_id: &str, work: Work) -> bool {
        if self.closing.load(Ordering::SeqCst) {
            return false;
        }
        {
            let mut active = lock(&self.active);
            if active.contains_key(run_id) {
                return false;
            }
            active.insert(run_id.to_string(), work.stop().cloned().unwrap_or_default());
        }
        lock(&self.queue).push_back((run_id.to_string(), work));
        self.wake.notify_one();
        true
    }

    pub fn is_active(&self, run_id: &str) -> bool {
        lock(&self.active).contains_key(run_id)
    }

    pub fn is_idle(&self) -> bool {
        lock(&self.active).is_empty()
    }

    pub fn active_count(&self) -> usize {
        lock(&self.active).len()
    }

    fn work(&self) {
        loop {
            let next = {
                let mut q = lock(&self.queue);
                loop {
                    if self.closing.load(Ordering::SeqCst) {
                        return;
                    }
                    if let Some(item) = q.pop_front() {
                        break item;
                    }
                    q = self.wake.wait(q).unwrap_or_else(PoisonError::into_inner);
                }
            };
            let (run_id, work) = next;
            if work.stop().and_then(StopSignal::requested).is_none() {
                self.execute(&run_id, work);
            }
            lock(&self.active).remove(&run_id);
        }
    }

    fn execute(&self, run_id: &str, work: Work) {
        let started = Instant::now();
        let outcome = match work {
            Work::Run { wf, req } => self.engine.run(&wf, &req, &mut NoProgress).map(|r| r.run.status),
            Work::Replay { req } => self.engine.replay(&req, &mut NoProgress).map(|(r, _)| r.run.status),
        };
        match outcome {
            Ok(status) => log(format!("run {run_id} {status} after {} ms", started.elapsed().as_millis())),
            Err(EngineError::Stopped { why, .. }) => log(format!("run {run_id} stopped: {why}")),
            Err(e) => log(format!("run {run_id} could not go on: {e}")),
        }
    }

    /// Cancels a run: it stops being scheduled, it is finalised CANCELLED with its RUNNING steps
    /// FAILED (their tokens cleared), and their process groups are stopped (SIGTERM, grace,
    /// SIGKILL). A run queued or executing elsewhere is finalised the same way.
    pub fn cancel(&self, run_id: &str) -> Result<RunRecord, EngineError> {
        if let Some(stop) = lock(&self.active).get(run_id) {
            stop.request(StopKind::Cancel);
        }
        let (processes, launches) = running_processes(&self.engine, run_id)?;
        let run = self.engine.store.cancel_run(run_id, "cancelled by an operator", self.engine.clock.now_ms())?;
        for p in &processes {
            terminate_if_same(p, self.engine.options.kill_grace);
        }
        for l in &launches {
            if let Err(e) = self.engine.stop_launch(l) {
                log(format!("run {run_id}: {e}"));
            }
        }
        log(format!(
            "run {run_id} cancelled; {} process group(s) and {} supervised launch(es) stopped",
            processes.len(),
            launches.len()
        ));
        Ok(run)
    }

    /// Takes over every open run whose owner is gone (a crashed or stopped daemon): its steps left
    /// RUNNING are resumed as interrupted, after their recorded processes, if still alive, are
    /// stopped. Runs whose owner lives are left alone. Returns how many were queued.
    pub fn recover(&self) -> usize {
        let open = match self.engine.store.open_runs() {
            Ok(open) => open,
            Err(e) => {
                log(format!("recovery could not list open runs: {e}"));
                return 0;
            }
        };
        let mut queued = 0;
        for run in open {
            if let Some(owner) = &run.owner
                && (owner == &self.owner || owner_is_alive(owner))
            {
                log(format!("run {} is owned by live process {owner}; left alone", run.run_id));
                continue;
            }
            match self.recovery_work(&run) {
                Ok(work) => {
                    if self.submit(&run.run_id, work) {
                        queued += 1;
                        log(format!(
                            "recovering run {} (owner {} is gone)",
                            run.run_id,
                            run.owner.as_deref().unwrap_or("none")
                        ));
                    }
                }
                Err(e) => log(format!("cannot recover run {}: {e}", run.run_id)),
            }
        }
        queued
    }

    /// What continues a run taken over from a dead owner: the same request with the recovery
    /// context (`resume_interrupted`), owned by this daemon now.
    pub fn recovery_work(&self, run: &RunRecord) -> Result<Work, EngineError> {
        let stop = Some(StopSignal::new());
        if run.source_run_id.is_some() {
            let req = self.engine.replay_request_of(run).ok_or_else(|| {
                EngineError::Invalid(format!("replay child `{}` does not record what it replays", run.run_id))
            })?;
            return Ok(Work::Replay {
                req: ReplayRequest {
                    resume_interrupted: true,
                    parallelism: 1,
                    owner: Some(self.owner.clone()),
                    stop,
                    ..req
                },
            });
        }
        Ok(Work::Run {
            wf: Box::new(self.engine.workflow_of_run(run)?),
            req: RunRequest {
                run_id: Some(run.run_id.clone()),
                input: run.input.clone(),
                resume_interrupted: true,
                parallelism: 1,
                owner: Some(self.owner.clone()),
                thread_id: run.thread_id.clone(),
                stop,
            },
        })
    }

    /// Stops the pool for a daemon shutdown: nothing new starts, every run here is asked to stop
    /// without writing, the process groups of their RUNNING steps are stopped, and the workers
    /// are joined (up to `wait`). Those runs stay RUNNING, owned by this (then dead) daemon, for
    /// the next daemon to resume. Returns how many runs were interrupted.
    pub fn shutdown(&self, wait: Duration) -> usize {
        self.closing.store(true, Ordering::SeqCst);
        self.wake.notify_all();
        let active: Vec<(String, StopSignal)> =
            lock(&self.active).iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        for (_, stop) in &active {
            stop.request(StopKind::Shutdown);
        }
        // Launches the step agent supervises (on targets, and pipeline controllers) go on: the
        // next daemon re-attaches to them.
        for (run_id, _) in &active {
            if let Ok((processes, _)) = running_processes(&self.engine, run_id) {
                for p in &processes {
                    terminate_if_same(p, self.engine.options.kill_grace);
                }
            }
        }
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
        active.len()
    }
}

/// The recorded processes of a run's RUNNING steps: local process groups, and launches the
/// step agent supervises.
fn running_processes(engine: &Engine, run_id: &str) -> Result<(Vec<ProcessIdentity>, Vec<RemoteProcess>), EngineError> {
    let mut local = Vec::new();
    let mut launches = Vec::new();
    for s in engine.store.steps(run_id)? {
        match s.process {
            Some(p) if s.status == StepStatus::Running => match p.remote {
                Some(remote) => launches.push(remote),
                None => local.push(ProcessIdentity { pid: p.pid, pgid: p.pgid, start_time: p.start_time }),
            },
            _ => {}
        }
    }
    Ok((local, launches))
}

/// Whether a recorded owner (`pid:start_time`) is still that process.
pub fn owner_is_alive(owner: &str) -> bool {
    let Some((pid, start)) = owner.split_once(':') else { return false };
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else { return false };
    is_same_process(&ProcessIdentity { pid, pgid: pid, start_time: Some(start) })
}
