//! One step's attempts, as decide → act → record: the launcher acts (launches, follows,
//! re-attaches), [`cairn_core::attempt::decide`] says what its end writes and what follows, and
//! the store records it under the attempt's token, in one transaction.
//!
//! **Invariant:** every write of an attempt is conditional on its token; a write the store
//! rejects as stale is recorded as `step.stale_write_rejected`, never applied.

use std::cell::Cell;
use std::time::Duration;

use std::sync::Mutex;

use cairn_core::attempt::{AttemptEnd, AttemptState, AttemptWrite, decide};
use cairn_core::canonical::canonical_json;
use cairn_core::event::RunEvent;
use cairn_core::ids::{AttemptToken, RunId};
use cairn_core::pipeline::JobEvent;
use cairn_core::signature::StepSignature;
use cairn_core::store::{AttemptStart, BeginAttempt, FinishAttempt, ProcessInfo, StoreError};
use cairn_core::workflow::StepDef;
use serde_json::Value;

use super::events::{Done, Job, Progress, RunCtx};
use crate::launcher::{AttemptLaunch, Orphan};
use crate::pipeline::PipelineSeed;
use crate::registry::LoadedWorkflow;
use crate::{Engine, EngineError, StopSignal};

impl Engine {
    /// Runs attempts until one completes (its end, for the scheduler to write), or the step fails
    /// for good or stops (`None`).
    pub(super) fn attempt_loop(
        &self,
        wf: &LoadedWorkflow,
        run: &RunCtx,
        job: Job,
        stop: Option<&StopSignal>,
        progress: &(dyn Fn(Progress) + Sync),
    ) -> Result<Option<Done>, EngineError> {
        let halted = || stop.and_then(StopSignal::requested).is_some();
        let Job {
            step_index,
            sig,
            args,
            exec_args,
            mut attempt,
            mut start,
            mut finished,
            mut orphan,
            reattach,
            mut begun,
        } = job;
        let step = &wf.spec().steps[step_index];
        let stdin = canonical_json(&exec_args).map_err(|e| EngineError::input(e.to_string()))?.into_bytes();
        let outputs = wf.spec().outputs_of(step);
        let seed = self.replay_seed(wf, run, step);
        let launch = |attempt, nonce: String| AttemptLaunch {
            nonce,
            seed: seed.as_ref(),
            run_id: &run.run_id,
            run_dir: &run.run_dir,
            placement: &run.placement,
            workflow: wf,
            step,
            args: &exec_args,
            stdin: &stdin,
            outputs: &outputs,
            attempt,
        };
        // An attempt a predecessor launched under the agent: followed under a new token, it
        // ends under its own number (the one before `attempt`).
        let mut adopted = None;
        // The nonce of the agent launch that ended last (adopted, or launched below), in its
        // processes' environment: a launch lost from sight is swept by it before the next begins.
        let launched_nonce: Cell<Option<String>> = Cell::new(None);
        if let Some((recorded, previous_token)) = reattach {
            let token = AttemptToken::from(self.ids.token());
            self.store.adopt_attempt(&run.run_id, &step.id, &previous_token, &token, self.clock.now_ms())?;
            let end = {
                let jobs = self.job_sink(run, &step.id, &token, attempt - 1, true, progress);
                let a = launch(attempt - 1, recorded.nonce.clone());
                self.launcher.reattach(&self.launch_context(), &recorded, &a, &jobs, &halted)
            };
            launched_nonce.set(Some(recorded.nonce.clone()));
            adopted = Some((token, attempt - 1, end));
        }
        loop {
            let is_adopted = adopted.is_some();
            let (token, number, end) = match adopted.take() {
                Some(a) => a,
                None => {
                    // The scheduler began the first attempt already, in the transaction that
                    // completed the step before it.
                    let token = match begun.take() {
                        Some(token) => token,
                        None => self.begin(run, &step.id, &sig, &args, attempt, &start)?,
                    };
                    // A retry after a full disk waits, its reason and wait recorded first
                    // (`step.retrying`), so the disk has time to be freed. A stop ends the wait:
                    // a cancel has finalised the step; after a shutdown the next owner resumes
                    // this begun attempt, whose tool never started, as interrupted.
                    if let AttemptStart::Retry { delay_ms, .. } = &start
                        && *delay_ms > 0
                        && !wait_unless_halted(Duration::from_millis(*delay_ms), &halted)
                    {
                        return Ok(None);
                    }
                    // Only now that the new token owns the step may the abandoned process be
                    // stopped: its runner, if still alive, then finds its token stale and cannot
                    // write.
                    if let Some(left) = orphan.take() {
                        self.launcher.stop_orphan(&self.launch_context(), &left);
                    }
                    // On a target with a `steps` quota it launches once it holds one of the
                    // target's places; a stop ends the wait as it ends a retry's.
                    if !self.take_target_place(run, &step.id, &token, attempt, &halted)? {
                        return Ok(None);
                    }
                    launched_nonce.set(None);
                    let mut record = |info: &ProcessInfo| {
                        if let Some(remote) = &info.remote {
                            launched_nonce.set(Some(remote.nonce.clone()));
                        }
                        // A failure here (a stale token) resurfaces when the outcome is written,
                        // which the same token guard then rejects.
                        let _ = self.store.record_process(&run.run_id, &step.id, &token, info);
                    };
                    let end = {
                        // A local tool waits for one of the daemon's step slots in its launcher,
                        // which holds it while the tool runs (`LaunchContext::step_slot`).
                        progress(Progress::Started { step_id: step.id.clone(), attempt });
                        // A new attempt number: nothing can be recorded of it yet.
                        let jobs = self.job_sink(run, &step.id, &token, attempt, false, progress);
                        let a = launch(attempt, token.nonce());
                        self.launcher.launch(&self.launch_context(), &a, &mut record, &jobs, &halted)
                    };
                    (token, attempt, end)
                }
            };
            // A launch the agent lost sight of (no pid file yet, or a supervisor gone silent) may
            // still be starting on this host: whatever carries its nonce is stopped before the
            // attempt that follows it begins.
            let lost = matches!(end, AttemptEnd::Lost { .. }) && !run.placement.is_remote();
            let lost_nonce = launched_nonce.take().filter(|_| lost);
            let duration = ran_for(&end);
            let decision = decide(
                &AttemptState {
                    run_id: &run.run_id,
                    step_id: &step.id,
                    token: &token,
                    attempt: number,
                    finished,
                    max_attempts: step.max_attempts,
                    retry_on: &step.retry_on,
                    adopted: is_adopted,
                    halted: halted(),
                    at: self.clock.now_ms(),
                },
                end,
            );
            if let Some(outcome) = decision.ended {
                finished += 1;
                progress(Progress::Finished { step_id: step.id.clone(), outcome, attempt: number, duration });
            }
            let written = match decision.write {
                // Written by the scheduler, with the begins of the steps it releases.
                AttemptWrite::Complete(finish) => return Ok(Some(finish)),
                AttemptWrite::Fail { finish, run_error } => self.store.fail_attempt(&finish, &run_error).map(|_| None),
                AttemptWrite::Retry { attempt: next, start: next_start }
                | AttemptWrite::Restart { attempt: next, start: next_start } => {
                    (attempt, start) = (next, next_start);
                    orphan = lost_nonce.map(|nonce| Orphan { process: None, nonce: Some(nonce) });
                    continue;
                }
                AttemptWrite::Nothing => return Ok(None),
                // The run stops here and waits for its target (the daemon tries it again).
                AttemptWrite::AwaitTarget { why } => return Err(unreachable(run, why)),
            };
            return match written {
                Ok(v) => Ok(v),
                Err(e) => Err(self.rejected(e, &run.run_id, &token)),
            };
        }
    }

    /// Begins attempt `attempt` of a step (a retry, a resume) under a new token, durably: its
    /// tool starts only after this commit, so the token's nonce, which the tool's environment
    /// carries, is on record before the tool exists.
    fn begin(
        &self,
        run: &RunCtx,
        step_id: &str,
        sig: &StepSignature,
        args: &Value,
        attempt: u32,
        start: &AttemptStart,
    ) -> Result<AttemptToken, EngineError> {
        let token = AttemptToken::from(self.ids.token());
        self.store.begin_attempt(&BeginAttempt {
            run_id: run.run_id.clone(),
            step_id: step_id.to_string(),
            signature: sig.clone(),
            args: args.clone(),
            token: token.clone(),
            attempt,
            start: start.clone(),
            at: self.clock.now_ms(),
        })?;
        Ok(token)
    }

    /// In a replay child, where a pipeline step's working copy is seeded from: the working copy
    /// of the run that last ran the step (`Engine::pipeline_seed`).
    fn replay_seed(&self, wf: &LoadedWorkflow, run: &RunCtx, step: &StepDef) -> Option<PipelineSeed> {
        match (&run.source_run_id, wf.spec().tools.get(&step.tool).map(|t| t.kind)) {
            (Some(source), Some(kind)) if cairn_core::controller::job_record(kind).is_some() => {
                self.pipeline_seed(&run.run_id, source, &step.id)
            }
            _ => None,
        }
    }

    /// Writes one completion on its own (when it could not be folded with other writes).
    pub(super) fn write_completion(&self, finish: &FinishAttempt) -> Result<(), EngineError> {
        self.store.complete_attempt(finish).map_err(|e| self.rejected(e, &finish.run_id, &finish.token))
    }

    /// A write of `token`'s attempt in run `run_id` the store refused; a stale token is recorded
    /// as such.
    fn rejected(&self, e: StoreError, run_id: &RunId, token: &AttemptToken) -> EngineError {
        match e {
            StoreError::StaleToken { run_id: stale_run, step_id } => {
                // Another worker took the step over: our result must not be applied.
                if let Err(e) = self.store.record_stale_write(run_id, &step_id, token, self.clock.now_ms()) {
                    return e.into();
                }
                EngineError::Store(StoreError::StaleToken { run_id: stale_run, step_id })
            }
            e => e.into(),
        }
    }

    /// Where an attempt's pipeline jobs go (`adopted`: a re-attach, whose predecessor may have
    /// recorded some): each recorded once, under the attempt's token, as an
    /// event of its step (a successor re-reading the log from its start skips what its
    /// predecessor recorded, by the log offset each event carries), and shown as progress.
    fn job_sink<'s>(
        &'s self,
        run: &'s RunCtx,
        step_id: &'s str,
        token: &'s AttemptToken,
        attempt: u32,
        adopted: bool,
        progress: &'s (dyn Fn(Progress) + Sync),
    ) -> impl Fn(Vec<JobEvent>) + Sync + 's {
        // What a predecessor recorded of an adopted attempt, read when the first jobs come (a
        // step that is not a pipeline never asks); an attempt launched now has none.
        let last: Mutex<Option<Option<u64>>> = Mutex::new((!adopted).then_some(None));
        move |events: Vec<JobEvent>| {
            if events.is_empty() {
                return;
            }
            let Ok(mut last) = last.lock() else { return };
            if last.is_none() {
                let Ok(stored) = self.store.events(&run.run_id, 0) else { return };
                let recorded = stored
                    .into_iter()
                    .filter(|e| e.step_id.as_deref() == Some(step_id) && e.attempt == Some(attempt))
                    .filter_map(|e| e.event.job_offset())
                    .max();
                *last = Some(recorded);
            }
            let before = last.flatten();
            let fresh: Vec<JobEvent> = events.into_iter().filter(|e| before.is_none_or(|l| e.offset() > l)).collect();
            let Some(newest) = fresh.iter().map(JobEvent::offset).max() else { return };
            let stored: Vec<RunEvent> = fresh.iter().cloned().map(RunEvent::of_job).collect();
            // A stale token (the step taken over or cancelled) records nothing more.
            if self.store.append_step_events(&run.run_id, step_id, token, attempt, &stored, self.clock.now_ms()).is_ok()
            {
                *last = Some(Some(newest));
                for job in fresh {
                    progress(Progress::Job { step_id: step_id.to_string(), job });
                }
            }
        }
    }
}

/// Waits `wait`, or less once a stop is requested: whether it waited all of it.
impl Engine {
    /// Holds the step's attempt (begun, not launched) until it takes one of its target's places,
    /// when the target has a `steps` quota: the first wait is recorded (`step.queued`, with the
    /// quota and its use), and the quota is read again at each try (an admin may raise it).
    /// `Ok(false)`: stopped while waiting.
    fn take_target_place(
        &self,
        run: &RunCtx,
        step_id: &str,
        token: &AttemptToken,
        attempt: u32,
        halted: &dyn Fn() -> bool,
    ) -> Result<bool, EngineError> {
        use cairn_core::quota::{Measure, Subject};
        let target = Subject::Target(run.placement.name().to_string());
        let mut told = false;
        loop {
            let quotas = self.store.quotas()?;
            let Some(q) = quotas.iter().find(|q| q.measure == Measure::Steps && q.subject == target) else {
                return Ok(true);
            };
            let Some(used) = self.store.take_target_slot(&run.run_id, step_id, token, target.name(), q.limit)? else {
                return Ok(true);
            };
            if !told {
                let event = RunEvent::StepQueued {
                    target: target.name().to_string(),
                    reason: cairn_core::quota::slot_reason(q, used),
                };
                self.store.append_step_events(&run.run_id, step_id, token, attempt, &[event], self.now_ms())?;
                self.commits.bump();
                told = true;
            }
            if !wait_unless_halted(Duration::from_millis(500), halted) {
                return Ok(false);
            }
        }
    }
}

fn wait_unless_halted(wait: Duration, halted: &dyn Fn() -> bool) -> bool {
    // A stop is noticed within this; the wait itself is at most `NO_SPACE_MAX_DELAY_MS`.
    const TICK: Duration = Duration::from_millis(50);
    let until = std::time::Instant::now() + wait;
    loop {
        if halted() {
            return false;
        }
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(TICK));
    }
}

/// How long an attempt's tool ran (zero for an attempt that did not run).
fn ran_for(end: &AttemptEnd) -> Duration {
    match end {
        AttemptEnd::Ran { duration_us, .. } => Duration::from_micros(u64::try_from(*duration_us).unwrap_or(0)),
        _ => Duration::ZERO,
    }
}

/// The run's target did not answer (`why`): the error that holds the run waiting for it.
fn unreachable(run: &RunCtx, why: String) -> EngineError {
    EngineError::TargetUnreachable { target: run.placement.name().to_string(), message: why }
}
