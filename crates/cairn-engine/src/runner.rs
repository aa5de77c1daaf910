//! Durable execution of one run: steps in the DAG's deterministic order, each attempt fenced by
//! its token, bounded retries, explicit recovery of interrupted steps, then the validator.
//!
//! **Invariant:** a step's result is written only by the attempt whose token owns the row, in the
//! same transaction that checks the token; a completed step is never executed again in its run.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cairn_core::canonical::{canonical_json, check_safe_numbers};
use cairn_core::ids::RunId;
use cairn_core::signature::{
    AfterAttempt, StepAction, StepSignature, after_attempt, args_hash, decide_step, run_identity,
};
use cairn_core::status::{Outcome, RunStatus, StepStatus};
use cairn_core::store::*;
use cairn_core::template::{self, Root};
use cairn_core::validator;
use cairn_exec::{ProcessIdentity, ToolCommand, run_tool, sandbox_env};
use serde_json::Value;

use crate::registry::LoadedWorkflow;
use crate::{Engine, EngineError};

/// What a caller asks for.
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    pub run_id: Option<String>,
    pub input: Value,
    pub resume_interrupted: bool,
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

/// A run as reported: its record and its steps in execution order.
#[derive(Debug, Clone)]
pub struct RunReport {
    pub run: RunRecord,
    pub steps: Vec<StepView>,
}

#[derive(Debug, Clone)]
pub struct StepView {
    pub step_id: String,
    /// `None` when the step has no record yet (PENDING).
    pub record: Option<StepRecord>,
}

impl StepView {
    pub fn status(&self) -> &'static str {
        self.record.as_ref().map(|r| r.status.as_str()).unwrap_or("PENDING")
    }
}

/// Validates the input against the schema and checks that every `${input…}` resolves, so a bad
/// input is refused before anything is created.
pub fn check_input(wf: &LoadedWorkflow, input: &Value) -> Result<(), EngineError> {
    check_safe_numbers(input, &mut String::new()).map_err(|e| EngineError::Invalid(format!("run input: {e}")))?;
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
            return Err(EngineError::Invalid(format!(
                "the run input does not match the input schema of {} ({}):\n{}",
                wf.spec().reference(),
                wf.spec().input_schema.as_deref().unwrap_or(""),
                errors.join("\n")
            )));
        }
    }
    for step in &wf.spec().steps {
        let refs =
            template::references(&step.args).map_err(|e| EngineError::Invalid(format!("step `{}`: {e}", step.id)))?;
        for (pointer, r) in refs {
            if r.root == Root::Input
                && let Err(missing) = template::lookup(input, &r.path)
            {
                return Err(EngineError::Invalid(format!(
                    "the run input lacks a field step `{}` needs: `${{{}}}` (args at `{pointer}`): {missing}",
                    step.id, r.text
                )));
            }
        }
    }
    Ok(())
}

impl Engine {
    /// Runs (or continues, or returns) a run of a registered workflow.
    pub fn run(&self, wf: &LoadedWorkflow, req: &RunRequest, obs: &mut dyn Observer) -> Result<RunReport, EngineError> {
        check_input(wf, &req.input)?;
        let spec = wf.spec();
        let identity = run_identity(&spec.name, &spec.version, &req.input, None)
            .map_err(|e| EngineError::Invalid(format!("run input: {e}")))?;
        let run_id = match &req.run_id {
            Some(id) => RunId::parse(id).map_err(|e| EngineError::Invalid(e.to_string()))?,
            None => RunId::generated(&self.ids.run_suffix()),
        };
        let new = NewRun {
            run_id: run_id.to_string(),
            workflow: spec.name.clone(),
            version: spec.version.clone(),
            identity_hash: identity,
            input: req.input.clone(),
            run_dir: self.state.runs().join(run_id.as_str()).display().to_string(),
            source_run_id: None,
            replay: None,
            at: self.clock.now_ms(),
        };
        self.create_and_execute(wf, &new, req.resume_interrupted, &mut |_| Ok(()), obs)
    }

    /// Creates the run (or finds it, checking its identity) and executes it unless terminal.
    /// `prepare` runs before execution on every (re)start; replay copies reused steps there.
    pub(crate) fn create_and_execute(
        &self,
        wf: &LoadedWorkflow,
        new: &NewRun,
        resume: bool,
        prepare: &mut dyn FnMut(&RunRecord) -> Result<(), EngineError>,
        obs: &mut dyn Observer,
    ) -> Result<RunReport, EngineError> {
        let mut run = match self.store.create_run(new)? {
            CreateRun::Created(run) => run,
            CreateRun::Existing(run) => {
                if run.identity_hash != new.identity_hash {
                    return Err(EngineError::ExecutionInputMismatch {
                        run_id: run.run_id.clone(),
                        stored: format!("{}@{} identity {}…", run.workflow, run.version, short(&run.identity_hash)),
                        requested: format!("{}@{} identity {}…", new.workflow, new.version, short(&new.identity_hash)),
                    });
                }
                run
            }
        };
        if !run.status.is_terminal() {
            if resume {
                run.revision = self.store.claim_run(&run.run_id, run.revision, self.clock.now_ms())?;
            }
            prepare(&run)?;
            self.execute(wf, &mut run, &new.input, resume, obs)?;
        }
        self.report(&run.run_id, wf)
    }

    /// The stored view of a run, steps in the DAG's order.
    pub fn report(&self, run_id: &str, wf: &LoadedWorkflow) -> Result<RunReport, EngineError> {
        let run = self.store.run(run_id)?.ok_or_else(|| {
            EngineError::NotFound(format!("run `{run_id}` was not found; list runs with `cairn runs`"))
        })?;
        let mut rows: HashMap<String, StepRecord> =
            self.store.steps(run_id)?.into_iter().map(|s| (s.step_id.clone(), s)).collect();
        let steps = wf
            .dag
            .order()
            .iter()
            .map(|&i| {
                let id = wf.dag.id(i).to_string();
                StepView { record: rows.remove(&id), step_id: id }
            })
            .collect();
        Ok(RunReport { run, steps })
    }

    fn execute(
        &self,
        wf: &LoadedWorkflow,
        run: &mut RunRecord,
        input: &Value,
        resume: bool,
        obs: &mut dyn Observer,
    ) -> Result<(), EngineError> {
        let spec = wf.spec();
        let run_dir = PathBuf::from(&run.run_dir);
        std::fs::create_dir_all(run_dir.join("steps")).map_err(|e| EngineError::io(&run_dir, e))?;
        let input_file = run_dir.join("input.json");
        if !input_file.exists() {
            let text = serde_json::to_vec_pretty(input).map_err(|e| EngineError::io(&input_file, e))?;
            std::fs::write(&input_file, text).map_err(|e| EngineError::io(&input_file, e))?;
        }
        let existing: HashMap<String, StepRecord> =
            self.store.steps(&run.run_id)?.into_iter().map(|s| (s.step_id.clone(), s)).collect();
        let mut results: HashMap<String, Value> = HashMap::new();
        obs.run_started(&run.run_id, wf.dag.len());

        for &i in wf.dag.order() {
            let step = &spec.steps[i];
            let args = match template::resolve(&step.args, input, &|id| results.get(id).cloned()) {
                Ok(a) => a,
                Err(e) => return self.fail_run(run, &format!("step `{}` could not start: {e}", step.id)),
            };
            let args_hash = match args_hash(&args) {
                Ok(h) => h,
                Err(e) => return self.fail_run(run, &format!("step `{}` could not start: its arguments {e}", step.id)),
            };
            let tool = &wf.tools[&step.tool];
            let sig = StepSignature { tool: step.tool.clone(), tool_digest: tool.digest.clone(), args_hash };
            let row = existing.get(&step.id);
            let (attempt, start, finished_before) = match decide_step(
                row.map(|r| (r.status, &r.signature)),
                &sig,
                resume,
            ) {
                StepAction::Reuse => {
                    results.insert(step.id.clone(), row.and_then(|r| r.result.clone()).unwrap_or(Value::Null));
                    obs.step_skipped(&step.id, "completed earlier in this run");
                    continue;
                }
                StepAction::Execute => (1, AttemptStart::First, 0),
                StepAction::ResumeInterrupted => {
                    let Some(r) = row else { return Err(missing_row(&step.id)) };
                    self.reap_orphan(r);
                    let previous_token = r.attempt_token.clone().unwrap_or_default();
                    (
                        r.attempt_count + 1,
                        AttemptStart::ResumeInterrupted { previous_token },
                        r.attempt_count - r.interrupted_count - 1,
                    )
                }
                StepAction::RefuseRunning => {
                    return Err(EngineError::StepRunning {
                        run_id: run.run_id.clone(),
                        step_id: step.id.clone(),
                        attempt: row.map(|r| r.attempt_count).unwrap_or(0),
                    });
                }
                StepAction::AlreadyFailed => {
                    return self.fail_run(run, &format!("step `{}` failed earlier in this run", step.id));
                }
                StepAction::Mismatch(m) => {
                    let why = match m.field.as_str() {
                        "tool_digest" => "the tool's definition or files changed since the step was recorded",
                        "args_hash" => "the step's resolved arguments changed since the step was recorded",
                        _ => "the step now uses another tool",
                    };
                    return self.fail_run(
                        run,
                        &format!(
                            "step `{}`: signature mismatch on {} ({}… stored, {}… now): {why}; this is never treated as a cache hit, so start a new run",
                            step.id,
                            m.field,
                            short(&m.stored),
                            short(&m.wanted)
                        ),
                    );
                }
            };
            match self.attempt_loop(wf, run, step, &sig, &args, attempt, start, finished_before, obs)? {
                Some(result) => {
                    results.insert(step.id.clone(), result);
                }
                None => return Ok(()), // the step failed and the run with it, in one transaction
            }
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

    /// Runs attempts until one completes (its result), or the step fails for good (`None`).
    #[allow(clippy::too_many_arguments)]
    fn attempt_loop(
        &self,
        wf: &LoadedWorkflow,
        run: &mut RunRecord,
        step: &cairn_core::workflow::StepDef,
        sig: &StepSignature,
        args: &Value,
        mut attempt: u32,
        mut start: AttemptStart,
        mut finished: u32,
        obs: &mut dyn Observer,
    ) -> Result<Option<Value>, EngineError> {
        let tool_def = &wf.spec().tools[&step.tool];
        let tool = &wf.tools[&step.tool];
        let stdin = canonical_json(args).map_err(|e| EngineError::Invalid(e.to_string()))?.into_bytes();
        let step_dir = PathBuf::from(&run.run_dir).join("steps").join(&step.id);
        std::fs::create_dir_all(&step_dir).map_err(|e| EngineError::io(&step_dir, e))?;
        loop {
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
            obs.step_started(&step.id, attempt);
            let env = sandbox_env(
                &tool_def.env,
                &[
                    ("CAIRN_RUN_ID".into(), run.run_id.clone()),
                    ("CAIRN_STEP_ID".into(), step.id.clone()),
                    ("CAIRN_ATTEMPT".into(), attempt.to_string()),
                    ("CAIRN_RUN_DIR".into(), run.run_dir.clone()),
                ],
            );
            let cmd = ToolCommand {
                argv: tool.argv.clone(),
                cwd: step_dir.clone(),
                env,
                stdin: stdin.clone(),
                timeout: Duration::from_secs(tool_def.timeout_secs),
                grace: self.options.kill_grace,
                max_stdout: self.options.max_stdout,
                stderr_tail: self.options.stderr_tail,
            };
            let mut record_err = None;
            let began = Instant::now();
            let out = run_tool(&cmd, &mut |p: &ProcessIdentity| {
                let info = ProcessInfo { pid: p.pid, pgid: p.pgid, start_time: p.start_time };
                if let Err(e) = self.store.record_process(&run.run_id, &step.id, &token, &info) {
                    record_err = Some(e);
                }
            });
            let duration_us = began.elapsed().as_micros() as i64;
            finished += 1;
            obs.step_finished(&step.id, out.outcome, attempt, out.duration);
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
    fn reap_orphan(&self, row: &StepRecord) {
        if row.status != StepStatus::Running {
            return;
        }
        if let Some(p) = &row.process {
            cairn_exec::terminate_if_same(
                &ProcessIdentity { pid: p.pid, pgid: p.pgid, start_time: p.start_time },
                self.options.kill_grace,
            );
        }
    }
}

fn missing_row(step: &str) -> EngineError {
    EngineError::Invalid(format!("step `{step}`: internal error: resume without a stored row"))
}

fn short(hash: &str) -> &str {
    &hash[..12.min(hash.len())]
}
