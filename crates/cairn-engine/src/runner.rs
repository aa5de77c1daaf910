//! Durable execution of one run: steps in the DAG's deterministic order, each attempt fenced by
//! its token, bounded retries, explicit recovery of interrupted steps, then the validator.
//!
//! **Invariant:** a step's result is written only by the attempt whose token owns the row, in the
//! same transaction that checks the token; a completed step is never executed again in its run.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use cairn_core::canonical::{canonical_json, check_exact_numbers};
use cairn_core::ids::{Owner, RunId};
use cairn_core::signature::{
    AfterAttempt, StepAction, StepSignature, after_attempt, args_hash, decide_step, run_identity,
};
use cairn_core::status::{Outcome, RunStatus};
use cairn_core::store::*;
use cairn_core::template::{self, Root};
use cairn_core::validator;
use cairn_exec::{ProcessIdentity, ToolCommand, ToolRun, run_tool, sandbox_env};
use serde_json::Value;

use crate::registry::LoadedWorkflow;
use crate::remote::{AgentLaunch, Followed, Placement};
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
}

/// How a created run is executed: shared by runs and replays.
#[derive(Clone, Copy)]
pub(crate) struct ExecOptions<'a> {
    pub resume: bool,
    pub parallelism: usize,
    pub owner: Option<&'a Owner>,
    pub stop: Option<&'a StopSignal>,
}

/// Live progress, for a terminal or a log. Calls happen on the executing thread.
pub trait Observer {
    fn run_started(&mut self, _run_id: &str, _total_steps: usize) {}
    fn step_started(&mut self, _step_id: &str, _attempt: u32) {}
    fn step_finished(&mut self, _step_id: &str, _outcome: Outcome, _attempt: u32, _duration: Duration) {}
    fn step_skipped(&mut self, _step_id: &str, _why: &str) {}
}

pub struct NoProgress;
impl Observer for NoProgress {}

/// Validates the input against the schema and checks that every `${input…}` resolves, so a bad
/// input is refused before anything is created.
pub fn check_input(wf: &LoadedWorkflow, input: &Value) -> Result<(), EngineError> {
    check_exact_numbers(input, &mut String::new()).map_err(|e| EngineError::input(format!("run input: {e}")))?;
    if let Some(schema) = &wf.schema {
        let errors: Vec<String> = schema
            .iter_errors(input)
            .take(10)
            .map(|e| {
                let at = e.instance_path().to_string();
                format!("  at `{}`: {e}", if at.is_empty() { "/" } else { &at })
            })
            .collect();
        if !errors.is_empty() {
            return Err(EngineError::input(format!(
                "the run input does not match the input schema of {} ({}):\n{}",
                wf.spec().reference(),
                wf.spec().input_schema.as_deref().unwrap_or(""),
                errors.join("\n")
            )));
        }
    }
    for step in &wf.spec().steps {
        let refs = template::references(&step.args)
            .map_err(|e| EngineError::internal(format!("step `{}` of a registered workflow: {e}", step.id)))?;
        for (pointer, r) in refs {
            if r.root == Root::Input
                && let Err(missing) = template::lookup(input, &r.path)
            {
                return Err(EngineError::input(format!(
                    "the run input lacks a field step `{}` needs: `${{{}}}` (args at `{pointer}`): {missing}",
                    step.id, r.text
                )));
            }
        }
    }
    Ok(())
}

impl Engine {
    /// Runs (or continues, or returns) a run of a registered workflow in this process.
    pub fn run(&self, req: &RunRequest, obs: &mut dyn Observer) -> Result<RunView, EngineError> {
        let wf = self.load_workflow(&req.workflow)?;
        self.run_loaded(&wf, req, obs)
    }

    /// [`Engine::run`] with the workflow loaded already (the daemon loads it when it accepts the
    /// run, and its worker executes it later).
    pub(crate) fn run_loaded(
        &self,
        wf: &LoadedWorkflow,
        req: &RunRequest,
        obs: &mut dyn Observer,
    ) -> Result<RunView, EngineError> {
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
        crate::remote::check_local_controllers(wf, &req.input)?;
        let spec = wf.spec();
        let identity = run_identity(&spec.name, &spec.version, &req.input, None)
            .map_err(|e| EngineError::input(format!("run input: {e}")))?;
        let new = self.new_run(req.run_id.as_deref(), spec, identity, &req.input, None, None)?;
        Ok(NewRun { owner: req.owner, thread_id: req.thread_id.clone(), ..new })
    }

    /// Creates the run, or returns the existing one after checking its identity.
    pub(crate) fn create_checked(&self, new: &NewRun) -> Result<(RunRecord, bool), EngineError> {
        match self.store.create_run(new)? {
            CreateRun::Created(run) => Ok((run, true)),
            CreateRun::Existing(run) => {
                if run.identity_hash != new.identity_hash {
                    return Err(EngineError::ExecutionInputMismatch {
                        run_id: run.run_id.clone(),
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
        source_run_id: Option<String>,
        replay: Option<Value>,
    ) -> Result<NewRun, EngineError> {
        let run_id = match run_id {
            Some(id) => RunId::parse(id).map_err(EngineError::InvalidRunId)?,
            None => RunId::generated(&self.ids.run_suffix()),
        };
        Ok(NewRun {
            run_dir: self.state.runs().join(run_id.as_str()).display().to_string(),
            run_id: run_id.to_string(),
            workflow: spec.name.clone(),
            version: spec.version.clone(),
            identity_hash: identity,
            input: input.clone(),
            source_run_id,
            replay,
            owner: None,
            thread_id: None,
            at: self.clock.now_ms(),
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
    ) -> Result<RunView, EngineError> {
        let (mut run, _) = self.create_checked(new)?;
        if !run.status.is_terminal() {
            if opts.resume {
                run.revision = self.store.claim_run(&run.run_id, run.revision, opts.owner, self.clock.now_ms())?;
            }
            prepare(&run)?;
            self.execute(wf, &mut run, &new.input, opts, obs)?;
        }
        self.show_run(&run.run_id)
    }

    #[allow(clippy::too_many_arguments)]
    fn execute(
        &self,
        wf: &LoadedWorkflow,
        run: &mut RunRecord,
        input: &Value,
        opts: ExecOptions<'_>,
        obs: &mut dyn Observer,
    ) -> Result<(), EngineError> {
        let ExecOptions { resume, parallelism, stop: stop_signal, .. } = opts;
        let halted = || stop_signal.and_then(StopSignal::requested);
        let spec = wf.spec();
        let placement = self.placement(&run.run_id)?;
        // A target's run_dir is on the target: its approval created it there with input.json.
        if !placement.is_remote() {
            let run_dir = PathBuf::from(&run.run_dir);
            std::fs::create_dir_all(run_dir.join("steps")).map_err(|e| EngineError::io(&run_dir, e))?;
            let input_file = run_dir.join("input.json");
            if !input_file.exists() {
                let text = serde_json::to_vec_pretty(input).map_err(|e| EngineError::io(&input_file, e))?;
                std::fs::write(&input_file, text).map_err(|e| EngineError::io(&input_file, e))?;
            }
        }
        let existing: HashMap<String, StepRecord> =
            self.store.steps(&run.run_id)?.into_iter().map(|s| (s.step_id.clone(), s)).collect();
        let ctx = RunCtx { run_id: run.run_id.clone(), run_dir: run.run_dir.clone(), placement };
        let mut results: HashMap<String, Value> = HashMap::new();
        obs.run_started(&run.run_id, wf.dag.len());

        // The scheduler: among ready steps the first declared starts first, at most `parallelism`
        // at once. With one slot this is exactly the DAG's deterministic order, the reference.
        let n = wf.dag.len();
        let mut waiting_on: Vec<usize> = (0..n).map(|i| wf.dag.needs(i).len()).collect();
        let mut ready: BinaryHeap<Reverse<usize>> = (0..n).filter(|&i| waiting_on[i] == 0).map(Reverse).collect();
        let release = |i: usize, waiting_on: &mut Vec<usize>, ready: &mut BinaryHeap<Reverse<usize>>| {
            for &c in wf.dag.children(i) {
                waiting_on[c] -= 1;
                if waiting_on[c] == 0 {
                    ready.push(Reverse(c));
                }
            }
        };
        let mut stop: Option<Result<(), EngineError>> = None;
        let (tx, rx) = mpsc::channel::<Msg>();
        std::thread::scope(|scope| {
            let mut in_flight = 0usize;
            loop {
                while stop.is_none() && halted().is_none() && in_flight < parallelism.max(1) {
                    let Some(Reverse(i)) = ready.pop() else { break };
                    match self.prepare_step(wf, &ctx, &existing, &results, input, resume, i) {
                        Prepared::Reused(value) => {
                            results.insert(wf.dag.id(i).to_string(), value);
                            obs.step_skipped(wf.dag.id(i), "completed earlier in this run");
                            release(i, &mut waiting_on, &mut ready);
                        }
                        Prepared::Job(job) => {
                            in_flight += 1;
                            let tx = tx.clone();
                            let ctx = &ctx;
                            scope.spawn(move || {
                                let sink = |p: Progress| {
                                    let _ = tx.send(Msg::Progress(p));
                                };
                                let outcome = self.attempt_loop(wf, ctx, *job, stop_signal, &sink);
                                let _ = tx.send(Msg::Done { index: i, outcome });
                            });
                        }
                        Prepared::FailRun(message) => stop = Some(self.fail_run(run, &message)),
                        Prepared::Error(e) => stop = Some(Err(e)),
                    }
                }
                if in_flight == 0 {
                    break;
                }
                let Ok(msg) = rx.recv() else { break };
                match msg {
                    Msg::Progress(Progress::Started { step_id, attempt }) => obs.step_started(&step_id, attempt),
                    Msg::Progress(Progress::Finished { step_id, outcome, attempt, duration }) => {
                        obs.step_finished(&step_id, outcome, attempt, duration)
                    }
                    Msg::Done { index, outcome } => {
                        in_flight -= 1;
                        match outcome {
                            Ok(Some(value)) => {
                                results.insert(wf.dag.id(index).to_string(), value);
                                release(index, &mut waiting_on, &mut ready);
                            }
                            // The step failed and the run with it, in one transaction.
                            Ok(None) => {
                                stop.get_or_insert(Ok(()));
                            }
                            Err(e) => {
                                if !matches!(stop, Some(Err(_))) {
                                    stop = Some(Err(e));
                                }
                            }
                        }
                    }
                }
            }
        });
        // A stop wins over whatever the workers reported: their writes after it were not made
        // (or were rejected), and the canceller finalises a cancelled run.
        if let Some(kind) = halted() {
            let why = match kind {
                StopKind::Cancel => "it was cancelled",
                StopKind::Shutdown => "its daemon is stopping; the next daemon resumes it",
            };
            return Err(EngineError::Stopped { run_id: run.run_id.clone(), why: why.into() });
        }
        if let Some(outcome) = stop {
            return outcome;
        }

        let (status, findings, error) = match validator::evaluate(&spec.rules, &|id| results.get(id).cloned()) {
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
    #[allow(clippy::too_many_arguments)]
    fn prepare_step(
        &self,
        wf: &LoadedWorkflow,
        ctx: &RunCtx,
        existing: &HashMap<String, StepRecord>,
        results: &HashMap<String, Value>,
        input: &Value,
        resume: bool,
        i: usize,
    ) -> Prepared {
        let step = &wf.spec().steps[i];
        let args = match template::resolve(&step.args, input, &|id| results.get(id)) {
            Ok(a) => a,
            Err(e) => return Prepared::FailRun(format!("step `{}` could not start: {e}", step.id)),
        };
        let args_hash = match args_hash(&args) {
            Ok(h) => h,
            Err(e) => return Prepared::FailRun(format!("step `{}` could not start: its arguments {e}", step.id)),
        };
        let tool = &wf.tools[&step.tool];
        let sig = StepSignature { tool: step.tool.clone(), tool_digest: tool.digest.clone(), args_hash };
        let row = existing.get(&step.id);
        let mut orphan = None;
        let mut reattach = None;
        let (attempt, start, finished) = match decide_step(row.map(|r| (r.status, &r.signature)), &sig, resume) {
            StepAction::Reuse => return Prepared::Reused(row.and_then(|r| r.result.clone()).unwrap_or(Value::Null)),
            StepAction::Execute => (1, AttemptStart::First, 0),
            StepAction::ResumeInterrupted => {
                let Some(r) = row else { return Prepared::Error(missing_row(&step.id)) };
                let previous_token = r.attempt_token.clone().unwrap_or_default();
                match r.process.as_ref().and_then(|p| p.remote.clone()) {
                    // A supervised launch outlives its follower: follow it again rather than start
                    // the step over.
                    Some(remote) => reattach = Some((remote, previous_token.clone())),
                    None => orphan = r.process.clone(),
                }
                // The abandoned attempt ended with no outcome, so it does not use up a retry.
                let finished = r.attempt_count.saturating_sub(r.interrupted_count + 1);
                (r.attempt_count + 1, AttemptStart::ResumeInterrupted { previous_token }, finished)
            }
            StepAction::RefuseRunning => {
                return Prepared::Error(EngineError::StepRunning {
                    run_id: ctx.run_id.clone(),
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
        Prepared::Job(Box::new(Job { step_index: i, sig, args, attempt, start, finished, orphan, reattach }))
    }

    /// Runs attempts until one completes (its result), or the step fails for good (`None`).
    fn attempt_loop(
        &self,
        wf: &LoadedWorkflow,
        run: &RunCtx,
        job: Job,
        stop: Option<&StopSignal>,
        progress: &dyn Fn(Progress),
    ) -> Result<Option<Value>, EngineError> {
        let halted = || stop.and_then(StopSignal::requested).is_some();
        let Job { step_index, sig, args, mut attempt, mut start, mut finished, mut orphan, reattach } = job;
        let (sig, args) = (&sig, &args);
        let step = &wf.spec().steps[step_index];
        let tool_def = &wf.spec().tools[&step.tool];
        let tool = &wf.tools[&step.tool];
        let stdin = canonical_json(args).map_err(|e| EngineError::input(e.to_string()))?.into_bytes();
        let step_dir = PathBuf::from(&run.run_dir).join("steps").join(&step.id);
        let local_sandbox = !run.placement.is_remote() && tool_def.kind.is_process();
        if !run.placement.is_remote() {
            std::fs::create_dir_all(&step_dir).map_err(|e| EngineError::io(&step_dir, e))?;
        }
        let command = |env: Vec<(String, String)>| ToolCommand {
            argv: tool.argv.clone(),
            cwd: step_dir.clone(),
            env,
            stdin: stdin.clone(),
            timeout: Duration::from_secs(tool_def.timeout_secs),
            grace: self.options.kill_grace,
            max_stdout: self.options.max_stdout,
            stderr_tail: self.options.stderr_tail,
        };
        // An attempt that ended while no one followed it: its end, and the token now holding it.
        let mut pending: Option<(String, ToolRun)> = None;
        if let Some((remote, previous_token)) = reattach {
            let token = self.ids.token();
            self.store.adopt_attempt(&run.run_id, &step.id, &previous_token, &token, self.clock.now_ms())?;
            match self.reattach(&remote, tool_def, &command(Vec::new()), &halted) {
                Followed::Ended(out) => {
                    // The adopted attempt ends under its own number.
                    attempt -= 1;
                    pending = Some((token, out));
                }
                Followed::Halted => return Ok(None),
                // Verifiably nothing runs any more (the agent found no launch, or its supervisor
                // died without an end): the step starts over as interrupted.
                Followed::Lost(_) => start = AttemptStart::ResumeInterrupted { previous_token: token },
                Followed::Mismatch(why) => {
                    let error = format!(
                        "step `{}`: the recorded launch could not be verified ({why}); nothing was resumed or stopped",
                        step.id
                    );
                    let finish = self.finish_record(run, step, &token, attempt - 1, Outcome::Failed, None, &error);
                    self.store.fail_attempt(&finish, &error)?;
                    return Ok(None);
                }
            }
        }
        loop {
            let (token, out) = match pending.take() {
                Some(p) => p,
                None => {
                    let token = self.ids.token();
                    self.store.begin_attempt(&BeginAttempt {
                        run_id: run.run_id.clone(),
                        step_id: step.id.clone(),
                        signature: sig.clone(),
                        args: args.clone(),
                        token: token.clone(),
                        attempt,
                        start: start.clone(),
                        at: self.clock.now_ms(),
                    })?;
                    // Only now that the new token owns the step may the abandoned process be
                    // stopped: its runner, if still alive, then finds its token stale and cannot write.
                    if let Some(p) = orphan.take() {
                        self.reap_recorded(&p);
                    }
                    progress(Progress::Started { step_id: step.id.clone(), attempt });
                    let extra = [
                        ("CAIRN_RUN_ID".to_string(), run.run_id.clone()),
                        ("CAIRN_STEP_ID".into(), step.id.clone()),
                        ("CAIRN_ATTEMPT".into(), attempt.to_string()),
                        ("CAIRN_RUN_DIR".into(), run.run_dir.clone()),
                    ];
                    // The files the tool's digest was computed from must still be those bytes: a
                    // tool changed on disk since the run loaded it is never run under the old signature.
                    if let Some(why) = changed_tool_file(wf, tool) {
                        let error = format!("step `{}`: {why}; it was not run", step.id);
                        let finish = self.finish_record(run, step, &token, attempt, Outcome::Failed, None, &error);
                        self.store.fail_attempt(&finish, &error)?;
                        return Ok(None);
                    }
                    let mut record = |info: &ProcessInfo| {
                        // A failure here (a stale token) resurfaces when the outcome is written,
                        // which the same token guard then rejects.
                        let _ = self.store.record_process(&run.run_id, &step.id, &token, info);
                    };
                    let out = if local_sandbox {
                        let cmd = command(sandbox_env(&tool_def.env, &extra));
                        run_tool(&cmd, &mut |p: &ProcessIdentity| {
                            record(&ProcessInfo { pid: p.pid, pgid: p.pgid, start_time: p.start_time, remote: None });
                            // A stop that came between the attempt's start and its process being
                            // recorded found no process to stop: stop it here.
                            if halted() {
                                cairn_exec::kill_own_group(p.pgid);
                            }
                        })
                    } else {
                        let source = self.step_source(wf, run);
                        let launch = AgentLaunch {
                            tool_def,
                            argv: tool.argv.iter().map(|a| rebase(a, &wf.record.path, &source)).collect(),
                            args,
                            run_dir: &run.run_dir,
                            step_id: &step.id,
                            attempt,
                            env: extra.to_vec(),
                            check_files: tool
                                .files
                                .iter()
                                .map(|f| (format!("{source}/{}", f.path), f.sha256.clone()))
                                .collect(),
                            source,
                            cmd: &command(Vec::new()),
                        };
                        match self.launch_with_agent(&run.placement, &launch, &mut record, &halted) {
                            Followed::Ended(out) => out,
                            Followed::Halted => return Ok(None),
                            Followed::Lost(why) | Followed::Mismatch(why) => ToolRun::failed(why),
                        }
                    };
                    if halted() {
                        // Nothing is written: a cancel has finalised the step, a shutdown leaves it
                        // RUNNING for the next daemon to resume as interrupted.
                        return Ok(None);
                    }
                    (token, out)
                }
            };
            // The tool's own time, from spawn to exit (not the commit recording its pid).
            let duration_us = out.duration.as_micros() as i64;
            finished += 1;
            progress(Progress::Finished {
                step_id: step.id.clone(),
                outcome: out.outcome,
                attempt,
                duration: out.duration,
            });
            let finish = FinishAttempt {
                run_id: run.run_id.clone(),
                step_id: step.id.clone(),
                token: token.clone(),
                attempt,
                outcome: out.outcome,
                result: out.result.clone(),
                error: out.error.clone(),
                log_tail: (!out.stderr_tail.is_empty()).then(|| out.stderr_tail.clone()),
                duration_us,
                at: self.clock.now_ms(),
            };
            let write = match after_attempt(out.outcome, finished, step.max_attempts, &step.retry_on) {
                AfterAttempt::Complete => {
                    self.store.complete_attempt(&finish).map(|_| Some(out.result.clone().unwrap_or(Value::Null)))
                }
                AfterAttempt::Retry if halted() => return Ok(None),
                AfterAttempt::Retry => {
                    start = AttemptStart::Retry {
                        previous_token: token.clone(),
                        outcome: out.outcome,
                        error: out.error.clone(),
                    };
                    attempt += 1;
                    continue;
                }
                AfterAttempt::Fail => {
                    let run_error = format!(
                        "step `{}` ended {} on attempt {attempt} of {}: {}",
                        step.id,
                        out.outcome,
                        step.max_attempts,
                        out.error.as_deref().unwrap_or("no detail")
                    );
                    self.store.fail_attempt(&finish, &run_error).map(|_| None)
                }
            };
            return match write {
                Ok(v) => Ok(v),
                Err(StoreError::StaleToken { run_id, step_id }) => {
                    // Another worker took the step over: our result must not be applied.
                    self.store.record_stale_write(&run_id, &step_id, &token, self.clock.now_ms())?;
                    Err(EngineError::Store(StoreError::StaleToken { run_id, step_id }))
                }
                Err(e) => Err(e.into()),
            };
        }
    }

    /// The record of an attempt that ended before its tool ran (or could be verified).
    #[allow(clippy::too_many_arguments)]
    fn finish_record(
        &self,
        run: &RunCtx,
        step: &cairn_core::workflow::StepDef,
        token: &str,
        attempt: u32,
        outcome: Outcome,
        result: Option<Value>,
        error: &str,
    ) -> FinishAttempt {
        FinishAttempt {
            run_id: run.run_id.clone(),
            step_id: step.id.clone(),
            token: token.to_string(),
            attempt,
            outcome,
            result,
            error: Some(error.to_string()),
            log_tail: None,
            duration_us: 0,
            at: self.clock.now_ms(),
        }
    }

    /// The workflow's folder where the step runs: the copy deployed into a target's run_dir, or
    /// the folder the run loaded here.
    fn step_source(&self, wf: &LoadedWorkflow, run: &RunCtx) -> String {
        if run.placement.is_remote() { format!("{}/workflow", run.run_dir) } else { wf.record.path.clone() }
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

    /// Before resuming an interrupted step, stop its abandoned process if it is verifiably still
    /// the one recorded (same pid and start time), so two attempts never run at once.
    pub(crate) fn reap_recorded(&self, p: &ProcessInfo) {
        cairn_exec::terminate_if_same(
            &ProcessIdentity { pid: p.pid, pgid: p.pgid, start_time: p.start_time },
            self.options.kill_grace,
        );
    }
}

/// What a worker needs of the run.
struct RunCtx {
    run_id: String,
    run_dir: String,
    placement: Placement,
}

/// A step ready to execute: its signature, resolved arguments and where its attempts start.
struct Job {
    step_index: usize,
    sig: StepSignature,
    args: Value,
    attempt: u32,
    start: AttemptStart,
    /// Attempts of this step that already ended with an outcome.
    finished: u32,
    /// The abandoned attempt's process, stopped once the new token owns the step.
    orphan: Option<ProcessInfo>,
    /// A launch the agent supervises, to re-attach to under a new token (same attempt), with
    /// the token that held it.
    reattach: Option<(RemoteProcess, String)>,
}

enum Prepared {
    Reused(Value),
    Job(Box<Job>),
    /// The run cannot go on: finish it FAILED with this message.
    FailRun(String),
    /// Refuse without changing the run (a RUNNING step without --resume-interrupted).
    Error(EngineError),
}

enum Progress {
    Started { step_id: String, attempt: u32 },
    Finished { step_id: String, outcome: Outcome, attempt: u32, duration: Duration },
}

enum Msg {
    Progress(Progress),
    Done { index: usize, outcome: Result<Option<Value>, EngineError> },
}

/// Which of the tool's files no longer has the SHA-256 its digest was computed from, in words.
fn changed_tool_file(wf: &LoadedWorkflow, tool: &crate::registry::LoadedTool) -> Option<String> {
    let dir = std::path::Path::new(&wf.record.path);
    tool.files.iter().find_map(|f| {
        let path = dir.join(&f.path);
        match std::fs::read(&path) {
            Ok(bytes) if cairn_core::canonical::sha256_hex(&bytes) == f.sha256 => None,
            Ok(_) => Some(format!("tool file {} changed since the run loaded it", path.display())),
            Err(e) => Some(format!("tool file {} cannot be read: {e}", path.display())),
        }
    })
}

/// `arg` with the folder prefix `from` replaced by `to` (a tool file named by its deployed path).
fn rebase(arg: &str, from: &str, to: &str) -> String {
    match std::path::Path::new(arg).strip_prefix(from) {
        Ok(rel) if from != to => format!("{to}/{}", rel.display()),
        _ => arg.to_string(),
    }
}

fn missing_row(step: &str) -> EngineError {
    EngineError::internal(format!("step `{step}`: resume without a stored row"))
}

fn short(hash: &str) -> &str {
    &hash[..12.min(hash.len())]
}
