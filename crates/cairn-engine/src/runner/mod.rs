//! Durable execution of one run: steps in the DAG's deterministic order, each attempt fenced by
//! its token, bounded retries, explicit recovery of interrupted steps, then the validator.
//!
//! The scheduler is one loop over a closed set of messages ([`events`]): among ready steps the
//! first declared starts first, at most `parallelism` at once, on the run's worker threads
//! (at most `parallelism`, each taking the next step when it is free; a serial run's steps run on
//! the scheduler's own thread), whose attempts are [`attempt`]'s decide → act → record. A step's completion is written by the scheduler, in one
//! transaction with the begins of the steps it releases (`commit_ended`).
//!
//! **Invariant:** a step's result is written only by the attempt whose token owns the row, in the
//! same transaction that checks the token; a completed step is never executed again in its run.

mod attempt;
mod events;
mod input;
mod run_dir;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use cairn_core::access::Caller;
use cairn_core::artifact::{Artifact, output_argument, signed_output};
use cairn_core::ids::{AttemptToken, Owner, RunId};
use cairn_core::pipeline::JobEvent;
use cairn_core::signature::{StepAction, StepSignature, args_hash, decide_step, run_identity};
use cairn_core::status::{Outcome, RunStatus};
use cairn_core::store::*;
use cairn_core::template;
use cairn_core::validator;
use serde_json::{Value, json};

use self::events::{Job, Msg, Prepared, Progress, RunCtx};
pub use self::input::check_input;
use crate::launcher::Orphan;
use crate::registry::LoadedWorkflow;
use crate::{Engine, EngineError, RunView, StopKind, StopSignal};

/// What a caller asks for.
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    /// `NAME` or `NAME@VERSION` (default: the highest registered version).
    pub workflow: String,
    pub run_id: Option<String>,
    pub input: Value,
    pub resume_interrupted: bool,
    /// How many ready steps may run at once; 1 (serial) is the reference semantics.
    pub parallelism: usize,
    /// The process executing the run (recorded, so a successor recovers it).
    pub owner: Option<Owner>,
    /// The conversation the run was submitted in.
    pub thread_id: Option<String>,
    /// Set by another thread to cancel the run or stop its daemon.
    pub stop: Option<StopSignal>,
    /// Who submitted it: recorded with the run (`run.submitted`) when it is created.
    pub by: Option<Caller>,
    /// The quotas its creation must pass (none for a run the owner runs in-process).
    pub admission: cairn_core::quota::Admission,
}

/// How a created run is executed: shared by runs and replays.
#[derive(Clone, Copy)]
pub(crate) struct ExecOptions<'a> {
    pub resume: bool,
    pub parallelism: usize,
    pub owner: Option<&'a Owner>,
    pub stop: Option<&'a StopSignal>,
}

/// Live progress, for a terminal or a log. Calls happen on the executing thread, or (for a
/// serial run, whose steps run on the scheduler's thread) under a lock from the thread that reads
/// a pipeline step's log.
pub trait Observer: Send {
    fn run_started(&mut self, _run_id: &RunId, _total_steps: usize) {}
    fn step_started(&mut self, _step_id: &str, _attempt: u32) {}
    fn step_finished(&mut self, _step_id: &str, _outcome: Outcome, _attempt: u32, _duration: Duration) {}
    fn step_skipped(&mut self, _step_id: &str, _why: &str) {}
    /// A pipeline step's job started, finished or failed.
    fn pipeline_job(&mut self, _step_id: &str, _job: &JobEvent) {}
}

pub struct NoProgress;
impl Observer for NoProgress {}

impl Engine {
    /// Runs (or continues, or returns) a run of a registered workflow in this process.
    pub fn run(&self, req: &RunRequest, obs: &mut dyn Observer) -> Result<RunView, EngineError> {
        let wf = self.load_workflow(&req.workflow)?;
        let run = self.run_loaded(&wf, req, obs)?;
        self.show_run(&run.run_id)
    }

    /// [`Engine::run`] with the workflow loaded already (the daemon loads it when it accepts the
    /// run, and its worker executes it later), answering with the run's record.
    pub(crate) fn run_loaded(
        &self,
        wf: &LoadedWorkflow,
        req: &RunRequest,
        obs: &mut dyn Observer,
    ) -> Result<RunRecord, EngineError> {
        let new = self.requested_run(wf, req)?;
        let opts = ExecOptions {
            resume: req.resume_interrupted,
            parallelism: req.parallelism,
            owner: req.owner.as_ref(),
            stop: req.stop.as_ref(),
        };
        self.create_and_execute(wf, &new, opts, &mut |_| Ok(()), obs)
    }

    /// Creates a run (or finds the existing one with the same identity) without executing it:
    /// what the daemon acknowledges before its worker pool executes it. Returns the run and
    /// whether it was created now.
    pub(crate) fn submit_loaded(
        &self,
        wf: &LoadedWorkflow,
        req: &RunRequest,
    ) -> Result<(RunRecord, bool), EngineError> {
        self.create_checked(&self.requested_run(wf, req)?)
    }

    /// The record a run request would create: its input checked, its identity computed.
    fn requested_run(&self, wf: &LoadedWorkflow, req: &RunRequest) -> Result<NewRun, EngineError> {
        check_input(wf, &req.input)?;
        crate::placement::check_local_controllers(wf, &req.input)?;
        let spec = wf.spec();
        let identity = run_identity(&spec.name, &spec.version, &req.input, None)
            .map_err(|e| EngineError::input(format!("run input: {e}")))?;
        let new = self.new_run(req.run_id.as_deref(), spec, identity, &req.input, None, None)?;
        let act = req.by.as_ref().map(|c| {
            c.act(new.at, "run.submitted", new.run_id.as_str(), json!({"workflow": spec.name, "version": spec.version}))
        });
        Ok(NewRun {
            act,
            admission: req.admission.clone(),
            owner: req.owner,
            thread_id: req.thread_id.clone(),
            parallelism: parallelism_of(req.parallelism),
            ..new
        })
    }

    /// Creates the run, or returns the existing one after checking its identity.
    pub(crate) fn create_checked(&self, new: &NewRun) -> Result<(RunRecord, bool), EngineError> {
        match self.store.create_run(new)? {
            CreateRun::Created(run) => Ok((run, true)),
            CreateRun::Existing(run) => {
                if run.identity_hash != new.identity_hash {
                    return Err(EngineError::ExecutionInputMismatch {
                        run_id: run.run_id.to_string(),
                        stored: format!("{}@{} identity {}…", run.workflow, run.version, short(&run.identity_hash)),
                        requested: format!("{}@{} identity {}…", new.workflow, new.version, short(&new.identity_hash)),
                    });
                }
                Ok((run, false))
            }
        }
    }

    /// The record of a new run: the given id (validated) or a generated one, its run directory.
    pub(crate) fn new_run(
        &self,
        run_id: Option<&str>,
        spec: &cairn_core::workflow::WorkflowSpec,
        identity: String,
        input: &Value,
        source_run_id: Option<RunId>,
        replay: Option<cairn_core::replay::ReplayRecord>,
    ) -> Result<NewRun, EngineError> {
        let run_id = match run_id {
            Some(id) => RunId::parse(id).map_err(EngineError::InvalidRunId)?,
            None => RunId::generated(&self.ids.run_suffix()),
        };
        Ok(NewRun {
            lease: self.new_lease(true),
            run_dir: self.state.runs().join(run_id.as_str()).display().to_string(),
            run_id,
            workflow: spec.name.clone(),
            version: spec.version.clone(),
            identity_hash: identity,
            input: input.clone(),
            source_run_id,
            replay,
            owner: None,
            thread_id: None,
            parallelism: 1,
            at: self.clock.now_ms(),
            act: None,
            admission: cairn_core::quota::Admission::default(),
        })
    }

    /// Creates the run (or finds it, checking its identity) and executes it unless terminal.
    /// `prepare` runs before execution on every (re)start; replay copies reused steps there.
    pub(crate) fn create_and_execute(
        &self,
        wf: &LoadedWorkflow,
        new: &NewRun,
        opts: ExecOptions<'_>,
        prepare: &mut dyn FnMut(&RunRecord) -> Result<(), EngineError>,
        obs: &mut dyn Observer,
    ) -> Result<RunRecord, EngineError> {
        let (mut run, _) = self.create_checked(new)?;
        if !run.status.is_terminal() {
            if opts.resume {
                run.revision = self.store.claim_run(&run.run_id, run.revision, opts.owner, self.clock.now_ms())?;
            }
            prepare(&run)?;
            self.execute(wf, &mut run, &new.input, opts, obs)?;
        }
        Ok(run)
    }

    fn execute(
        &self,
        wf: &LoadedWorkflow,
        run: &mut RunRecord,
        input: &Value,
        opts: ExecOptions<'_>,
        obs: &mut dyn Observer,
    ) -> Result<(), EngineError> {
        let placement = self.placement(&run.run_id)?;
        // A target's run_dir is on the target: its approval created it there with input.json.
        if !placement.is_remote() {
            run_dir::lay_out(Path::new(&run.run_dir), input)?;
        }
        let scope = RunScope {
            wf,
            ctx: RunCtx {
                run_id: run.run_id.clone(),
                run_dir: run.run_dir.clone(),
                placement,
                source_run_id: run.source_run_id.clone(),
            },
            existing: self.store.steps(&run.run_id)?.into_iter().map(|s| (s.step_id.clone(), s)).collect(),
            input,
            opts,
        };
        let mut sched = Schedule::new(wf, self.store.artifacts(&run.run_id)?);
        obs.run_started(&run.run_id, wf.dag.len());
        self.schedule(run, &scope, &mut sched, obs);
        // A stop wins over whatever the workers reported: their writes after it were not made
        // (or were rejected), and the canceller finalises a cancelled run.
        if let Some(kind) = opts.stop.and_then(StopSignal::requested) {
            let why = match kind {
                StopKind::Cancel => "it was cancelled",
                StopKind::Shutdown => "its daemon is stopping; the next daemon resumes it",
                StopKind::LeaseLost => "another daemon took its lease over and drives it now",
            };
            return Err(EngineError::Stopped { run_id: run.run_id.to_string(), why: why.into() });
        }
        if let Some(outcome) = sched.stop {
            return outcome;
        }
        self.finish_with_verdict(run, wf, &sched.results)
    }

    /// The scheduler: among ready steps the first declared starts first, at most `parallelism`
    /// at once. With one slot this is exactly the DAG's deterministic order, the reference.
    /// Returns when no step is in flight and none can start.
    fn schedule(&self, run: &mut RunRecord, rs: &RunScope<'_>, sched: &mut Schedule, obs: &mut dyn Observer) {
        let (wf, parallelism, stop_signal) = (rs.wf, rs.opts.parallelism, rs.opts.stop);
        let (tx, rx) = mpsc::channel::<Msg>();
        // The run's workers: started as steps need them, at most `parallelism`, each taking the
        // next job when it is free, so a step costs no thread of its own.
        let (job_tx, job_rx) = mpsc::channel::<Box<Job>>();
        let job_rx = std::sync::Mutex::new(job_rx);
        std::thread::scope(|scope| {
            let mut workers = 0usize;
            loop {
                let (mut starting, fail) = self.choose_steps(rs, sched, obs);
                self.commit_before_start(run, rs, sched, &mut starting, fail);
                for job in starting {
                    sched.in_flight += 1;
                    if parallelism <= 1 {
                        // Serial: the step runs on this thread, which has nothing else to do
                        // meanwhile; two thread hand-offs a step fewer. Its progress reaches the
                        // observer as it happens.
                        let index = job.step_index;
                        let live = std::sync::Mutex::new(&mut *obs);
                        let sink = |p: Progress| show(&mut **live.lock().unwrap_or_else(|e| e.into_inner()), p);
                        let outcome = self.attempt_loop(wf, &rs.ctx, *job, stop_signal, &sink);
                        let _ = tx.send(Msg::Done { index, outcome });
                        continue;
                    }
                    if workers < sched.in_flight {
                        workers += 1;
                        let (tx, ctx, jobs) = (tx.clone(), &rs.ctx, &job_rx);
                        scope.spawn(move || {
                            let sink = |p: Progress| {
                                let _ = tx.send(Msg::Progress(p));
                            };
                            // Ends when the scheduler drops its sender (the run is over).
                            while let Some(job) = jobs.lock().ok().and_then(|rx| rx.recv().ok()) {
                                let index = job.step_index;
                                let outcome = self.attempt_loop(wf, ctx, *job, stop_signal, &sink);
                                let _ = tx.send(Msg::Done { index, outcome });
                            }
                        });
                    }
                    // The receiver lives as long as this scope.
                    let _ = job_tx.send(job);
                }
                if sched.in_flight == 0 {
                    break;
                }
                // Everything that has arrived, so completions that ended together commit together.
                let Ok(first) = rx.recv() else { break };
                for msg in std::iter::once(first).chain(std::iter::from_fn(|| rx.try_recv().ok())) {
                    match msg {
                        Msg::Progress(p) => show(obs, p),
                        Msg::Done { index, outcome } => sched.done(wf, index, outcome),
                    }
                }
            }
            drop(job_tx);
        });
    }

    /// The ready steps to start now, first declared first, while slots are free: a step
    /// completed earlier in this run is reused at once (releasing its dependents). Stops at a
    /// step that cannot start (returned: it fails the run) or an error (the run's stop).
    #[expect(clippy::vec_box, reason = "a job travels to its worker boxed, as `Prepared` holds it")]
    fn choose_steps(
        &self,
        rs: &RunScope<'_>,
        sched: &mut Schedule,
        obs: &mut dyn Observer,
    ) -> (Vec<Box<Job>>, Option<String>) {
        let wf = rs.wf;
        let halted = || rs.opts.stop.and_then(StopSignal::requested);
        let mut starting: Vec<Box<Job>> = Vec::new();
        // Written after the completions, so the run's last event stays last.
        let mut fail = None;
        while sched.stop.is_none()
            && fail.is_none()
            && halted().is_none()
            && sched.in_flight + starting.len() < rs.opts.parallelism.max(1)
        {
            let Some(Reverse(i)) = sched.ready.pop() else { break };
            let upstream = Upstream { results: &sched.results, produced: &sched.produced };
            match self.prepare_step(wf, &rs.ctx, &rs.existing, upstream, rs.input, rs.opts.resume, i) {
                Prepared::Reused(value) => {
                    sched.results.insert(wf.dag.id(i).to_string(), value);
                    obs.step_skipped(wf.dag.id(i), "completed earlier in this run");
                    sched.release(wf, i);
                }
                Prepared::Job(job) => starting.push(job),
                Prepared::FailRun(message) => fail = Some(message),
                Prepared::Error(e) => sched.stop = Some(Err(e)),
            }
        }
        (starting, fail)
    }

    /// Commits the completions received with the begins of `starting` (cleared if they cannot
    /// start), then fails the run for `fail`, a step that could not start.
    #[expect(clippy::vec_box, reason = "a job travels to its worker boxed, as `Prepared` holds it")]
    fn commit_before_start(
        &self,
        run: &mut RunRecord,
        rs: &RunScope<'_>,
        sched: &mut Schedule,
        starting: &mut Vec<Box<Job>>,
        fail: Option<String>,
    ) {
        // A step that cannot start fails the run; the ones chosen with it do not start.
        if sched.stop.is_some() || fail.is_some() {
            starting.clear();
        }
        if let Err(e) = self.commit_ended(rs.wf, &rs.ctx, &mut sched.ended, starting) {
            starting.clear();
            sched.error(e);
        }
        if let Some(message) = fail
            && sched.stop.is_none()
        {
            sched.stop = Some(self.fail_run(run, &message));
        }
    }

    /// Runs the validator over the results and writes the run's verdict: READY, BLOCKED, or
    /// FAILED when the validator itself fails.
    fn finish_with_verdict(
        &self,
        run: &mut RunRecord,
        wf: &LoadedWorkflow,
        results: &HashMap<String, Value>,
    ) -> Result<(), EngineError> {
        let (status, findings, error) = match validator::evaluate(&wf.spec().rules, &|id| results.get(id).cloned()) {
            Ok(f) if f.is_empty() => (RunStatus::Ready, f, None),
            Ok(f) => (RunStatus::Blocked, f, None),
            Err(e) => (RunStatus::Failed, Vec::new(), Some(format!("the validator failed: {e}"))),
        };
        *run = self.store.finish_run(
            &run.run_id,
            run.revision,
            status,
            &findings,
            error.as_deref(),
            self.clock.now_ms(),
        )?;
        Ok(())
    }

    /// Decides what to do with step `i` from its stored row and its signature now.
    #[expect(
        clippy::too_many_arguments,
        reason = "the step's whole context, passed as is rather than bundled for one call"
    )]
    fn prepare_step(
        &self,
        wf: &LoadedWorkflow,
        ctx: &RunCtx,
        existing: &HashMap<String, StepRecord>,
        upstream: Upstream<'_>,
        input: &Value,
        resume: bool,
        i: usize,
    ) -> Prepared {
        let step = &wf.spec().steps[i];
        let spec = wf.spec();
        let outputs_of = |id: &str| spec.step(id).map(|s| spec.outputs_of(s)).unwrap_or_default();
        let result = |id: &str| upstream.results.get(id);
        // Signed (and recorded) with each upstream output's content digest, run with its path.
        let signed = |id: &str, name: &str| {
            signed_output(&outputs_of(id), id, name, upstream.produced.get(id).map(Vec::as_slice).unwrap_or_default())
        };
        let args =
            match template::resolve_with(&step.args, input, &template::Upstream { result: &result, output: &signed }) {
                Ok(a) => a,
                Err(e) => return Prepared::FailRun(format!("step `{}` could not start: {e}", step.id)),
            };
        let exec_args = if template::names_outputs(&step.args) {
            let path = |id: &str, name: &str| output_argument(&outputs_of(id), &ctx.run_dir, id, name);
            match template::resolve_with(&step.args, input, &template::Upstream { result: &result, output: &path }) {
                Ok(a) => a,
                Err(e) => return Prepared::FailRun(format!("step `{}` could not start: {e}", step.id)),
            }
        } else {
            args.clone()
        };
        let args_hash = match args_hash(&args) {
            Ok(h) => h,
            Err(e) => return Prepared::FailRun(format!("step `{}` could not start: its arguments {e}", step.id)),
        };
        let sig = StepSignature { tool: step.tool.clone(), tool_digest: wf.step_digest(step), args_hash };
        let row = existing.get(&step.id);
        let mut orphan = None;
        let mut reattach = None;
        let (attempt, start, finished) = match decide_step(row.map(|r| (r.status, &r.signature)), &sig, resume) {
            StepAction::Reuse => return Prepared::Reused(row.and_then(|r| r.result.clone()).unwrap_or(Value::Null)),
            StepAction::Execute => (1, AttemptStart::First, 0),
            StepAction::ResumeInterrupted => {
                let Some(r) = row else { return Prepared::Error(missing_row(&step.id)) };
                let previous_token = r.attempt_token.clone().unwrap_or_else(|| AttemptToken::from(""));
                match r.process.as_ref().and_then(|p| p.remote.clone()) {
                    // A supervised launch outlives its follower: follow it again rather than start
                    // the step over.
                    Some(remote) => reattach = Some((remote, previous_token.clone())),
                    None => {
                        // The token was committed before the tool started, and its nonce is in the
                        // tool's environment: it finds the tool even if its runner died before
                        // recording its pid. Local tools only: a target's steps are all launched
                        // through the agent, recorded before they start.
                        let nonce = r.attempt_token.as_ref().filter(|_| !ctx.placement.is_remote()).map(|t| t.nonce());
                        let left = Orphan { process: r.process.clone(), nonce };
                        orphan = (!left.is_empty()).then_some(left);
                    }
                }
                // The abandoned attempt ended with no outcome, so it does not use up a retry.
                let finished = r.attempt_count.saturating_sub(r.interrupted_count + 1);
                (r.attempt_count + 1, AttemptStart::ResumeInterrupted { previous_token, why: None }, finished)
            }
            StepAction::RefuseRunning => {
                return Prepared::Error(EngineError::StepRunning {
                    run_id: ctx.run_id.to_string(),
                    step_id: step.id.clone(),
                    attempt: row.map(|r| r.attempt_count).unwrap_or(0),
                });
            }
            StepAction::AlreadyFailed => {
                return Prepared::FailRun(format!("step `{}` failed earlier in this run", step.id));
            }
            StepAction::Mismatch(m) => {
                let why = match m.field.as_str() {
                    "tool_digest" => "the tool's definition or files changed since the step was recorded",
                    "args_hash" => "the step's resolved arguments changed since the step was recorded",
                    _ => "the step now uses another tool",
                };
                return Prepared::FailRun(format!(
                    "step `{}`: signature mismatch on {} ({}… stored, {}… now): {why}; this is never treated as a cache hit, so start a new run",
                    step.id,
                    m.field,
                    short(&m.stored),
                    short(&m.wanted)
                ));
            }
        };
        Prepared::Job(Box::new(Job {
            step_index: i,
            sig,
            args,
            exec_args,
            attempt,
            start,
            finished,
            orphan,
            reattach,
            begun: None,
        }))
    }

    /// Writes the completions that `ended` holds and begins the first attempt of each step in
    /// `starting`, in one durable transaction: a completed step is durable before any step it
    /// released starts, and each of those is durably begun, token and all, before its tool does.
    /// If the one transaction is refused (a stale token, a run finished meanwhile), the
    /// completions are written one by one as they would have been alone, and the starting steps
    /// begin on their own, meeting the same refusal.
    fn commit_ended(
        &self,
        wf: &LoadedWorkflow,
        ctx: &RunCtx,
        ended: &mut Vec<FinishAttempt>,
        starting: &mut [Box<Job>],
    ) -> Result<(), EngineError> {
        let at = self.clock.now_ms();
        let mut begins = Vec::new();
        for job in starting.iter_mut() {
            // A resume or a re-attach stops or adopts a process first: those begin on their own.
            if !matches!(job.start, AttemptStart::First) || job.orphan.is_some() || job.reattach.is_some() {
                continue;
            }
            let token = AttemptToken::from(self.ids.token());
            begins.push(BeginAttempt {
                run_id: ctx.run_id.clone(),
                step_id: wf.spec().steps[job.step_index].id.clone(),
                signature: job.sig.clone(),
                args: job.args.clone(),
                token: token.clone(),
                attempt: job.attempt,
                start: AttemptStart::First,
                at,
            });
            job.begun = Some(token);
        }
        if ended.is_empty() && begins.is_empty() {
            return Ok(());
        }
        if self.store.commit_steps(ended, &begins).is_ok() {
            ended.clear();
            return Ok(());
        }
        for job in starting.iter_mut() {
            job.begun = None;
        }
        for finish in ended.drain(..) {
            self.write_completion(&finish)?;
        }
        Ok(())
    }

    fn fail_run(&self, run: &mut RunRecord, error: &str) -> Result<(), EngineError> {
        *run = self.store.finish_run(
            &run.run_id,
            run.revision,
            RunStatus::Failed,
            &[],
            Some(error),
            self.clock.now_ms(),
        )?;
        Ok(())
    }
}

/// Tells `obs` of a step's progress.
fn show(obs: &mut dyn Observer, p: Progress) {
    match p {
        Progress::Started { step_id, attempt } => obs.step_started(&step_id, attempt),
        Progress::Finished { step_id, outcome, attempt, duration } => {
            obs.step_finished(&step_id, outcome, attempt, duration)
        }
        Progress::Job { step_id, job } => obs.pipeline_job(&step_id, &job),
    }
}

/// What every step of one execution is prepared and run with.
struct RunScope<'a> {
    wf: &'a LoadedWorkflow,
    ctx: RunCtx,
    /// The run's step rows when the execution began, by step id.
    existing: HashMap<String, StepRecord>,
    input: &'a Value,
    opts: ExecOptions<'a>,
}

/// The scheduler's state: which steps wait on how many needs, which are ready, what the
/// completed ones produced, and the completions not yet written.
struct Schedule {
    waiting_on: Vec<usize>,
    ready: BinaryHeap<Reverse<usize>>,
    results: HashMap<String, Value>,
    /// The artifacts of the steps completed so far: what `${steps.X.outputs.NAME}` signs as.
    produced: HashMap<String, Vec<Artifact>>,
    /// Why the run stops starting steps: `Ok` when a step failed it, else the error.
    stop: Option<Result<(), EngineError>>,
    /// Completions received and not yet written: each is written with the begins of the steps
    /// it releases (or gathered with others that ended meanwhile), one durable commit for all.
    ended: Vec<FinishAttempt>,
    in_flight: usize,
}

impl Schedule {
    /// Every step waiting on its needs, those without any ready; `artifacts` are the run's
    /// recorded so far.
    fn new(wf: &LoadedWorkflow, artifacts: Vec<cairn_core::artifact::ArtifactRecord>) -> Self {
        let n = wf.dag.len();
        let waiting_on: Vec<usize> = (0..n).map(|i| wf.dag.needs(i).len()).collect();
        let ready = (0..n).filter(|&i| waiting_on[i] == 0).map(Reverse).collect();
        let mut produced: HashMap<String, Vec<Artifact>> = HashMap::new();
        for a in artifacts {
            produced.entry(a.step_id).or_default().push(a.artifact);
        }
        Schedule { waiting_on, ready, results: HashMap::new(), produced, stop: None, ended: Vec::new(), in_flight: 0 }
    }

    /// Step `i` is done: its children wait on one need fewer, and start when none is left.
    fn release(&mut self, wf: &LoadedWorkflow, i: usize) {
        for &c in wf.dag.children(i) {
            self.waiting_on[c] -= 1;
            if self.waiting_on[c] == 0 {
                self.ready.push(Reverse(c));
            }
        }
    }

    /// The run stops on `e`, unless an error stopped it already.
    fn error(&mut self, e: EngineError) {
        if !matches!(self.stop, Some(Err(_))) {
            self.stop = Some(Err(e));
        }
    }

    /// A worker's end of step `index`: a completion (written with the begins of the steps it
    /// releases), the step and run failed, or an error.
    fn done(&mut self, wf: &LoadedWorkflow, index: usize, outcome: Result<Option<FinishAttempt>, EngineError>) {
        self.in_flight -= 1;
        match outcome {
            Ok(Some(finish)) => {
                // Its dependents are prepared now and start only once this completion is
                // committed (with their begins).
                let id = wf.dag.id(index).to_string();
                self.results.insert(id.clone(), finish.result.clone().unwrap_or(Value::Null));
                self.produced.insert(id, finish.artifacts.clone());
                self.release(wf, index);
                self.ended.push(finish);
            }
            // The step failed and the run with it, in one transaction.
            Ok(None) => {
                self.stop.get_or_insert(Ok(()));
            }
            Err(e) => self.error(e),
        }
    }
}

/// What a step's arguments resolve against: the results and artifacts of the steps completed so
/// far in this run.
#[derive(Clone, Copy)]
struct Upstream<'a> {
    results: &'a HashMap<String, Value>,
    produced: &'a HashMap<String, Vec<Artifact>>,
}

fn missing_row(step: &str) -> EngineError {
    EngineError::internal(format!("step `{step}`: resume without a stored row"))
}

/// A requested parallelism as recorded (0 means serial, as the scheduler treats it).
pub(crate) fn parallelism_of(requested: usize) -> u32 {
    u32::try_from(requested.max(1)).unwrap_or(u32::MAX)
}

use cairn_core::canonical::short_hash as short;
