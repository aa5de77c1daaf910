//! The interactive session kernel: one long-lived Jupyter kernel whose state carries from job to
//! job, fed by a queue of jobs, each recorded with its code, outputs, status and timings. It
//! shares the kernel admission slot with verifications: a job is refused while a verification
//! runs, and a verification waits while session jobs are queued or running.
//!
//! **Invariant:** every job ends with a recorded status; a job that was queued or running when its
//! daemon died is recorded `died` at the next start, never left "running".

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cairn_core::audit::audit_notebook;
use cairn_core::store::{KernelJob, KernelJobStatus};
use cairn_exec::kernel::{self, KernelConfig, KernelHandle, ScratchKernel};
use cairn_exec::{ProcessIdentity, leaders_naming, process_start_time, terminate_if_same};
use serde_json::{Value, json};

use crate::error::JOB_WAIT_MAX_SECS;
use crate::verify::{BOOTSTRAP, Quiet, Slot, kernel_env, resolve_python};
use crate::{Engine, EngineError};

/// How the session kernel is started.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// An interpreter with ipykernel; `None` uses (and if needed creates) `<state>/python`.
    pub python: Option<PathBuf>,
    /// The kernel's working directory.
    pub workdir: PathBuf,
    /// A job's timeout when its submitter names none: interrupted, then the kernel killed.
    pub default_timeout: Duration,
}

/// What a restart did.
#[derive(Debug, Clone, Default)]
pub struct Restarted {
    /// The session whose kernel was killed, if one ran.
    pub killed_session: Option<String>,
    /// Jobs that were queued or running and ended `cancelled`.
    pub cancelled: Vec<String>,
}

pub struct SessionKernel {
    engine: Arc<Engine>,
    config: SessionConfig,
    state: Mutex<State>,
    wake: Condvar,
    worker: Mutex<Option<JoinHandle<()>>>,
    /// Bumped after every save of a job, so a caller waiting on one wakes when it changes.
    saved: Saved,
}

/// A count of job saves and the condition its waiters sleep on: a waiter reads the count, then
/// the job, and sleeps only while the count is still what it read, so no save is missed.
#[derive(Default)]
struct Saved {
    count: Mutex<u64>,
    changed: Condvar,
}

impl Saved {
    fn count(&self) -> u64 {
        *lock(&self.count)
    }

    fn bump(&self) {
        *lock(&self.count) += 1;
        self.changed.notify_all();
    }

    /// Sleeps until the count moves past `seen` or `timeout` passes.
    fn wait_past(&self, seen: u64, timeout: Duration) {
        let count = lock(&self.count);
        let _ = self.changed.wait_timeout_while(count, timeout, |c| *c == seen);
    }
}

#[derive(Default)]
struct State {
    queue: VecDeque<(String, Duration)>,
    running: Option<String>,
    /// The live kernel's handle and session id (idle or busy).
    kernel: Option<(KernelHandle, String)>,
    /// Held from the first queued job until the queue drains.
    slot: Option<Slot>,
    restart: bool,
    closing: bool,
}

fn kernel_record(engine: &Engine) -> PathBuf {
    engine.state.path().join("kernels").join("session.json")
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SessionKernel {
    /// The session of a state root. Jobs a previous daemon left queued or running are recorded
    /// `died`: their kernel went with it.
    pub fn new(engine: Arc<Engine>, config: SessionConfig) -> Result<Arc<SessionKernel>, EngineError> {
        // A kernel its previous daemon left alive (it leads its own process group, so it outlives
        // a SIGKILLed daemon): stop it, if it is verifiably the recorded process; one whose pid
        // was not recorded yet (its daemon killed while it started) by its connection file, in
        // the runtime directory recorded before it started and named in no other process's
        // arguments.
        let record = kernel_record(&engine);
        if let Some(p) = std::fs::read_to_string(&record).ok().and_then(|t| serde_json::from_str::<Value>(&t).ok()) {
            let recorded = match (p["pid"].as_u64().and_then(|p| u32::try_from(p).ok()), p["start_time"].as_u64()) {
                (Some(pid), Some(start)) => vec![ProcessIdentity { pid, pgid: pid, start_time: Some(start) }],
                _ => match p["runtime_dir"].as_str() {
                    Some(dir) => leaders_naming(&PathBuf::from(dir).join("kernel-")),
                    None => Vec::new(),
                },
            };
            for kernel in &recorded {
                terminate_if_same(kernel, Duration::from_secs(1));
            }
            let _ = std::fs::remove_file(&record);
        }
        let now = engine.clock.now_ms();
        for mut job in engine.store.kernel_jobs()? {
            if !job.status.has_ended() {
                job.status = KernelJobStatus::Died;
                job.error = Some("the daemon stopped while this job was queued or running; its kernel is gone".into());
                job.finished_at = Some(now);
                engine.store.save_kernel_job(&job)?;
            }
        }
        Ok(Arc::new(SessionKernel {
            engine,
            config,
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            worker: Mutex::new(None),
            saved: Saved::default(),
        }))
    }

    /// Queues a job. Refused (a conflict) while a verification holds the kernel slot.
    pub fn submit(self: &Arc<Self>, code: &str, timeout: Option<Duration>) -> Result<KernelJob, EngineError> {
        if code.trim().is_empty() {
            return Err(EngineError::EmptyJob);
        }
        if let Some(t) = timeout {
            EngineError::in_range("timeout_secs", t.as_secs(), 1..=crate::error::JOB_TIMEOUT_MAX_SECS, " (a week)")?;
        }
        let mut st = lock(&self.state);
        if st.closing {
            return Err(EngineError::DaemonStopping { what: "the session kernel" });
        }
        if st.slot.is_none() {
            let slot = self.engine.acquire_slot(true, None, &mut Quiet).map_err(|e| match e {
                EngineError::KernelSlotTaken { .. } => EngineError::KernelSlotTaken {
                    message: "a verification holds the kernel slot; the session kernel takes no job while it runs, so try again when it has finished".into(),
                },
                other => other,
            })?;
            st.slot = Some(slot);
        }
        let job = KernelJob {
            job_id: format!("job_{}", self.engine.ids.run_suffix()),
            session: st.kernel.as_ref().map(|(_, s)| s.clone()).unwrap_or_else(|| "pending".into()),
            code: code.to_string(),
            status: KernelJobStatus::Queued,
            outputs: Vec::new(),
            execution_count: None,
            error: None,
            submitted_at: self.engine.clock.now_ms(),
            started_at: None,
            finished_at: None,
            duration_ms: None,
        };
        if let Err(e) = self.engine.store.save_kernel_job(&job) {
            if st.queue.is_empty() && st.running.is_none() {
                st.slot = None;
            }
            return Err(e.into());
        }
        st.queue.push_back((job.job_id.clone(), timeout.unwrap_or(self.config.default_timeout)));
        drop(st);
        self.ensure_worker()?;
        self.wake.notify_all();
        Ok(job)
    }

    pub fn job(&self, job_id: &str) -> Result<KernelJob, EngineError> {
        self.engine.store.kernel_job(job_id)?.ok_or_else(|| EngineError::JobNotFound { job_id: job_id.to_string() })
    }

    /// The job once it has ended or has more than `outputs` outputs (`None`: once it has
    /// ended), or as it stands when `wait` has passed: what a caller following a job waits on,
    /// woken by each save rather than reading again and again.
    pub fn job_when(&self, job_id: &str, outputs: Option<usize>, wait: Duration) -> Result<KernelJob, EngineError> {
        EngineError::in_range("wait", wait.as_secs(), 0..=JOB_WAIT_MAX_SECS, " seconds")?;
        let deadline = Instant::now() + wait;
        loop {
            let seen = self.saved.count();
            let job = self.job(job_id)?;
            let changed = outputs.is_some_and(|n| job.outputs.len() > n);
            let left = deadline.saturating_duration_since(Instant::now());
            if job.status.has_ended() || changed || left.is_zero() {
                return Ok(job);
            }
            self.saved.wait_past(seen, left);
        }
    }

    pub fn jobs(&self) -> Result<Vec<KernelJob>, EngineError> {
        Ok(self.engine.store.kernel_jobs()?)
    }

    /// SIGINT to the kernel (KeyboardInterrupt in the running job); returns the interrupted job.
    pub fn interrupt(&self) -> Option<String> {
        let st = lock(&self.state);
        let running = st.running.clone()?;
        st.kernel.as_ref()?.0.interrupt();
        Some(running)
    }

    /// Kills the kernel (the running job ends `cancelled`, queued ones too); the next job starts
    /// a fresh kernel, a new session.
    pub fn restart(&self) -> Result<Restarted, EngineError> {
        let mut st = lock(&self.state);
        let mut out = Restarted::default();
        let now = self.engine.clock.now_ms();
        for (id, _) in st.queue.drain(..) {
            if let Some(mut job) = self.engine.store.kernel_job(&id)? {
                job.status = KernelJobStatus::Cancelled;
                job.error = Some("the session kernel was restarted before this job ran".into());
                job.finished_at = Some(now);
                self.save(&job)?;
            }
            out.cancelled.push(id);
        }
        if let Some(r) = &st.running {
            out.cancelled.push(r.clone());
        }
        if let Some((handle, session)) = &st.kernel {
            handle.kill();
            out.killed_session = Some(session.clone());
        }
        st.restart = true;
        if st.running.is_none() {
            st.slot = None;
        }
        drop(st);
        self.wake.notify_all();
        Ok(out)
    }

    /// Whether a job is queued or running, or a kernel is alive (its state would be lost).
    pub fn is_busy(&self) -> bool {
        let st = lock(&self.state);
        st.running.is_some() || !st.queue.is_empty() || st.kernel.is_some()
    }

    /// Stops the worker and kills the kernel (daemon shutdown).
    pub fn shutdown(&self, wait: Duration) {
        {
            let mut st = lock(&self.state);
            st.closing = true;
            if let Some((handle, _)) = &st.kernel {
                handle.kill();
            }
        }
        self.wake.notify_all();
        if let Some(t) = lock(&self.worker).take() {
            let deadline = Instant::now() + wait;
            while !t.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }

    /// The audit notebook of every retained job.
    pub fn audit(&self, time: &dyn Fn(i64) -> String) -> Result<Value, EngineError> {
        Ok(audit_notebook(&self.jobs()?, time))
    }

    fn ensure_worker(self: &Arc<Self>) -> Result<(), EngineError> {
        let mut w = lock(&self.worker);
        if w.as_ref().is_some_and(|t| !t.is_finished()) {
            return Ok(());
        }
        let me = Arc::clone(self);
        let t = std::thread::Builder::new()
            .name("cairn-session".into())
            .spawn(move || me.work())
            .map_err(|e| EngineError::internal(format!("cannot start the session kernel's thread: {e}")))?;
        *w = Some(t);
        Ok(())
    }

    fn work(&self) {
        let mut kernel: Option<ScratchKernel> = None;
        loop {
            let (job_id, timeout) = {
                let mut st = lock(&self.state);
                loop {
                    if st.closing {
                        st.kernel = None;
                        drop(st);
                        drop(kernel);
                        return;
                    }
                    if st.restart {
                        st.restart = false;
                        st.kernel = None;
                        kernel = None;
                        continue;
                    }
                    if let Some(next) = st.queue.pop_front() {
                        st.running = Some(next.0.clone());
                        break next;
                    }
                    st = self.wake.wait(st).unwrap_or_else(PoisonError::into_inner);
                }
            };
            self.run_job(&mut kernel, &job_id, timeout);
            let mut st = lock(&self.state);
            st.running = None;
            if kernel.as_ref().is_none_or(|k| k.exit_info().is_some()) {
                st.kernel = None;
                kernel = None;
            }
            if st.queue.is_empty() {
                st.slot = None;
            }
        }
    }

    fn run_job(&self, kernel: &mut Option<ScratchKernel>, job_id: &str, timeout: Duration) {
        let store = &self.engine.store;
        let Ok(Some(mut job)) = store.kernel_job(job_id) else { return };
        if kernel.as_ref().is_none_or(|k| k.exit_info().is_some()) {
            match self.start_kernel() {
                Ok((k, session, runtime_dir)) => {
                    crate::crash_at(&self.engine.options().crash, &crate::CrashPoint::SessionKernelStarted);
                    // Its pid, so the next daemon stops exactly it if this one dies without doing
                    // so (until now the record named only its runtime directory).
                    let record = json!({
                        "pid": k.pid(),
                        "start_time": process_start_time(k.pid()),
                        "session": session,
                        "runtime_dir": runtime_dir,
                    });
                    let _ = write_record(&self.engine, &record);
                    lock(&self.state).kernel = Some((k.handle(), session));
                    *kernel = Some(k);
                }
                Err(e) => {
                    job.status = KernelJobStatus::Died;
                    job.error = Some(e.to_string());
                    job.finished_at = Some(self.engine.clock.now_ms());
                    let _ = self.save(&job);
                    return;
                }
            }
        }
        let Some(k) = kernel.as_mut() else { return };
        job.session = lock(&self.state).kernel.as_ref().map(|(_, s)| s.clone()).unwrap_or_default();
        job.status = KernelJobStatus::Running;
        job.started_at = Some(self.engine.clock.now_ms());
        let _ = self.save(&job);

        // Outputs are saved as they come: the first at once, later ones at most every 200 ms, so a
        // poll sees a job's progress even when it then goes quiet. A flusher thread saves them:
        // the output callback runs inside the kernel client's async runtime, where a blocking
        // store call must not be made (PostgreSQL's client refuses to, and it would stall the
        // kernel's messages on any store).
        // (the job as it stands, changed since the last save, the job ended)
        let live = Mutex::new((job.clone(), false, false));
        let wake = std::sync::Condvar::new();
        let run = std::thread::scope(|scope| {
            scope.spawn(|| {
                let mut l = lock(&live);
                loop {
                    if l.1 {
                        // Saved outside the lock: the output callback never waits for the store.
                        let snapshot = l.0.clone();
                        l.1 = false;
                        drop(l);
                        let _ = self.save(&snapshot);
                        l = lock(&live);
                        continue;
                    }
                    if l.2 {
                        return;
                    }
                    l = wake.wait_timeout(l, Duration::from_millis(200)).map_or_else(|p| p.into_inner().0, |(g, _)| g);
                }
            });
            let run = k.execute(&job.code, timeout, &mut |out: &Value| {
                let mut l = lock(&live);
                let first = l.0.outputs.is_empty();
                l.0.outputs.push(out.clone());
                l.1 = true;
                if first {
                    wake.notify_one();
                }
            });
            // Under the lock, so the flusher cannot miss the wake-up; the scope joins it, so its
            // last save (of anything still unsaved) lands before the job's final record below.
            lock(&live).2 = true;
            wake.notify_one();
            run
        });
        let (status, error) = match &run.status {
            kernel::CellStatus::Ok => (KernelJobStatus::Ok, None),
            kernel::CellStatus::Error { ename, evalue, .. } if ename == "KeyboardInterrupt" => {
                (KernelJobStatus::Interrupted, Some(format!("{ename}: {evalue}")))
            }
            kernel::CellStatus::Error { ename, evalue, .. } => {
                (KernelJobStatus::Error, Some(format!("{ename}: {evalue}")))
            }
            kernel::CellStatus::Died { exit_code, signal } => (
                KernelJobStatus::Died,
                Some(match (exit_code, signal) {
                    (_, Some(s)) => format!("the kernel died (signal {s}); the next job starts a fresh kernel"),
                    (Some(c), _) => format!("the kernel exited with code {c}; the next job starts a fresh kernel"),
                    _ => "the kernel died; the next job starts a fresh kernel".into(),
                }),
            ),
            kernel::CellStatus::TimedOut => (
                KernelJobStatus::TimedOut,
                Some(format!(
                    "the job ran past its {} s timeout: it was interrupted and its kernel killed",
                    timeout.as_secs()
                )),
            ),
            kernel::CellStatus::Lost { reason } => {
                (KernelJobStatus::Died, Some(format!("the kernel was lost: {reason}")))
            }
            kernel::CellStatus::Cancelled => {
                (KernelJobStatus::Cancelled, Some("the session kernel was restarted".into()))
            }
        };
        job.status = status;
        job.error = error;
        job.outputs = run.outputs;
        job.execution_count = run.execution_count;
        job.finished_at = Some(self.engine.clock.now_ms());
        job.duration_ms = Some(run.duration.as_millis() as i64);
        let _ = self.save(&job);
    }

    /// Saves a job and wakes whoever waits on it.
    fn save(&self, job: &KernelJob) -> Result<(), EngineError> {
        let saved = self.engine.store.save_kernel_job(job);
        self.saved.bump();
        Ok(saved?)
    }

    /// Starts the session kernel and runs its bootstrap; returns it, its session and its
    /// runtime directory. The directory is recorded before the kernel starts: a daemon killed
    /// before it recorded the kernel's pid leaves the next one a way to find it.
    fn start_kernel(&self) -> Result<(ScratchKernel, String, PathBuf), EngineError> {
        let python =
            resolve_python(self.config.python.as_deref(), &self.engine.state.path().join("python"), &mut Quiet)?;
        let session = format!("ses_{}", self.engine.ids.run_suffix());
        // Short (the random end of the id), so IPC socket paths fit.
        let runtime_dir = self.engine.state.path().join("kernels").join(&session[session.len().saturating_sub(12)..]);
        write_record(&self.engine, &json!({"session": session, "runtime_dir": runtime_dir})).map_err(|e| {
            EngineError::KernelUnavailable {
                message: format!(
                    "cannot record the session kernel in {}: {e}; it was not started, since a daemon killed while it \
                     ran would leave it running unrecorded",
                    kernel_record(&self.engine).display()
                ),
            }
        })?;
        let mut cfg = KernelConfig::new(&python, &self.config.workdir, &runtime_dir);
        cfg.env = kernel_env();
        let mut k = ScratchKernel::start(&cfg).map_err(|e| EngineError::KernelUnavailable {
            message: format!("failed to start the session kernel: {e}"),
        })?;
        let boot = k.execute(BOOTSTRAP, Duration::from_secs(60), &mut |_| {});
        if boot.status != kernel::CellStatus::Ok {
            return Err(EngineError::KernelUnavailable {
                message: format!(
                    "the session kernel's bootstrap failed: {:?}; see {}",
                    boot.status,
                    k.log_path().display()
                ),
            });
        }
        Ok((k, session, runtime_dir))
    }
}

/// Writes the session kernel's record (`kernels/session.json`) whole: into a file beside it,
/// renamed over it, so a reader never sees half of it.
fn write_record(engine: &Engine, record: &Value) -> std::io::Result<()> {
    let path = kernel_record(engine);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let staged = path.with_extension("json.tmp");
    std::fs::write(&staged, record.to_string())?;
    std::fs::rename(&staged, &path)
}
