//! Selective replay: a new child run of a terminal source run that re-executes the requested
//! steps (and whatever the planner finds incompatible) and reuses the rest of the source's
//! evidence, copied as it is.
//!
//! **Invariant:** replay never changes the source run: its rows and events are only read.

use std::collections::HashMap;

use cairn_core::access::Caller;
use cairn_core::artifact::{Artifact, output_path};
use cairn_core::ids::{Owner, RunId};
use cairn_core::plan::InputFile;
use cairn_core::replay::{
    self, Damage, Decision, DecisionRecord, Found, InputDamage, OutputDamage, ReplayInput, ReplayPlan, ReplayRecord,
    ReplaySummary, SourceStep,
};
use cairn_core::signature::run_identity;
use cairn_core::status::RunStatus;
use cairn_core::store::{NewRun, RunRecord, StepRecord};
use serde_json::{Value, json};

use crate::registry::{LoadedWorkflow, load_record};
use crate::runner::{ExecOptions, Observer, check_input};
use crate::{Engine, EngineError, RunView, StopSignal};

#[derive(Debug, Clone)]
pub struct ReplayRequest {
    /// The run to replay (looked up: an id no run has is a source not found).
    pub source_run_id: RunId,
    pub step_ids: Vec<String>,
    /// The child's input; the source's when `None`.
    pub input: Option<Value>,
    pub run_id: Option<String>,
    /// Another registered version of the source's workflow; the source's own when `None`.
    pub version: Option<String>,
    /// When given, it must name the source's workflow.
    pub workflow: Option<String>,
    pub resume_interrupted: bool,
    /// How many ready steps may run at once (1: serial, the reference semantics).
    pub parallelism: usize,
    pub owner: Option<Owner>,
    pub thread_id: Option<String>,
    pub stop: Option<StopSignal>,
    /// Load the workflow from this folder instead of its registry snapshot (an approved plan's
    /// deployed copy; the same digest).
    pub workflow_dir: Option<std::path::PathBuf>,
    /// The target the child runs on (`local` when `None`): a step is reused only with artifacts
    /// there.
    pub target: Option<String>,
    /// Who submitted it: recorded with the child run (`run.submitted`) when it is created.
    pub by: Option<Caller>,
    /// The quotas its creation must pass.
    pub admission: cairn_core::quota::Admission,
}

/// A request with every field unset, its source's id empty (a run no id names): a caller names
/// the source and fills what it needs with `..ReplayRequest::default()`.
impl Default for ReplayRequest {
    fn default() -> Self {
        ReplayRequest {
            source_run_id: RunId::lookup(String::new()),
            step_ids: Vec::new(),
            input: None,
            run_id: None,
            version: None,
            workflow: None,
            resume_interrupted: false,
            parallelism: 0,
            owner: None,
            thread_id: None,
            stop: None,
            workflow_dir: None,
            target: None,
            by: None,
            admission: cairn_core::quota::Admission::default(),
        }
    }
}

/// Everything decided before a replay creates anything.
pub struct PreparedReplay {
    pub source: RunRecord,
    pub workflow: LoadedWorkflow,
    pub input: Value,
    pub plan: ReplayPlan,
    pub summary: ReplaySummary,
    pub source_steps: Vec<StepRecord>,
    /// The source's artifacts, by step.
    pub source_artifacts: HashMap<String, Vec<Artifact>>,
}

impl PreparedReplay {
    /// The directive that, with the workflow and input, makes the child's identity.
    pub fn directive(&self) -> Value {
        json!({"source_run_id": self.plan.source_run_id, "step_ids": self.plan.requested})
    }

    /// What the child run stores about its replay: the summary and every decision with its reason.
    pub fn record(&self) -> ReplayRecord {
        ReplayRecord {
            summary: self.summary.clone(),
            decisions: self.plan.decisions.iter().map(DecisionRecord::of).collect(),
        }
    }
}

impl Engine {
    /// Plans a replay: checks the source and the request, and decides every step. Creates nothing.
    pub(crate) fn prepare_replay(&self, req: &ReplayRequest) -> Result<PreparedReplay, EngineError> {
        let src_id = &req.source_run_id;
        let source =
            self.store.run(src_id)?.ok_or_else(|| EngineError::SourceRunNotFound { run_id: src_id.to_string() })?;
        if req.run_id.as_deref() == Some(src_id.as_str()) {
            return Err(EngineError::ReplayOfItself { source_run_id: src_id.to_string() });
        }
        match source.status {
            RunStatus::Ready | RunStatus::Blocked => {}
            status => return Err(EngineError::ReplaySourceNotFinished { run_id: src_id.to_string(), status }),
        }
        if let Some(name) = &req.workflow
            && name != &source.workflow
        {
            return Err(EngineError::ReplayOtherWorkflow {
                run_id: src_id.to_string(),
                workflow: source.workflow.clone(),
                given: name.clone(),
            });
        }
        let version = req.version.clone().unwrap_or_else(|| source.version.clone());
        let mut record = self.workflow_record(&source.workflow, Some(&version))?;
        if let Some(dir) = &req.workflow_dir {
            record.path = dir.display().to_string();
        }
        let workflow = load_record(record)?;
        if req.step_ids.is_empty() {
            return Err(EngineError::ReplayNoSteps);
        }
        let requested = replay::normalise_requested(&workflow.dag, &req.step_ids).map_err(|unknown| {
            EngineError::ReplayUnknownSteps {
                reference: workflow.spec().reference(),
                unknown,
                known: workflow.spec().steps.iter().map(|s| s.id.clone()).collect(),
            }
        })?;
        let input = req.input.clone().unwrap_or_else(|| source.input.clone());
        check_input(&workflow, &input)?;

        let source_steps = self.store.steps(src_id)?;
        let source_wf = if source.version == version {
            None
        } else {
            match self.workflow_record(&source.workflow, Some(&source.version)) {
                Ok(r) => Some(load_record(r)?),
                Err(EngineError::WorkflowNotFound { .. }) => None,
                Err(e) => return Err(e),
            }
        };
        let source_tools = source_wf.as_ref().unwrap_or(&workflow);
        let explain_tool = |tool: &str| -> Vec<String> { explain_tool_change(source_tools, &workflow, tool) };
        let digests: HashMap<String, String> =
            workflow.tools.iter().map(|(k, t)| (k.clone(), t.digest.clone())).collect();
        let mut source_artifacts: HashMap<String, Vec<Artifact>> = HashMap::new();
        for a in self.store.artifacts(src_id)? {
            source_artifacts.entry(a.step_id).or_default().push(a.artifact);
        }
        let by_id: HashMap<String, SourceStep> = source_steps
            .iter()
            .map(|s| {
                let artifacts = source_artifacts.get(&s.step_id).map(Vec::as_slice).unwrap_or_default();
                let step = SourceStep {
                    status: s.status,
                    signature: &s.signature,
                    args: &s.args,
                    result: s.result.as_ref(),
                    artifacts,
                };
                (s.step_id.clone(), step)
            })
            .collect();
        let plan_with = |damaged: &HashMap<String, Damage>| {
            replay::plan(&ReplayInput {
                spec: workflow.spec(),
                dag: &workflow.dag,
                tool_digests: &digests,
                input: &input,
                source_input: &source.input,
                same_definition: source.version == version,
                source_run_id: src_id,
                source: &by_id,
                requested: &requested,
                explain_tool: &explain_tool,
                damaged,
            })
        };
        let mut plan = plan_with(&HashMap::new());
        // A step is reused only with the bytes it recorded: its artifacts are checked where the
        // source wrote them, and a damaged one invalidates it (and so its descendants). Planning
        // again only reuses less, so what it reuses was checked already.
        let mut damaged: HashMap<String, Damage> = self
            .damaged_artifacts(&source, req.target.as_deref(), &plan, &source_artifacts)?
            .into_iter()
            .map(|(id, d)| (id, Damage::Output(d)))
            .collect();
        for (id, d) in self.changed_inputs(&source, req.target.as_deref(), &plan, &by_id)? {
            damaged.entry(id).or_insert(Damage::Input(d));
        }
        if !damaged.is_empty() {
            plan = plan_with(&damaged);
        }
        let summary = plan.summary(&workflow.dag);
        drop(by_id);
        Ok(PreparedReplay { source, workflow, input, plan, summary, source_steps, source_artifacts })
    }

    /// The reused steps of `plan` whose recorded artifacts are not their bytes now, where the
    /// source run wrote them; or, for a child on another target, that cannot be reached there.
    fn damaged_artifacts(
        &self,
        source: &RunRecord,
        child_target: Option<&str>,
        plan: &ReplayPlan,
        artifacts: &HashMap<String, Vec<Artifact>>,
    ) -> Result<HashMap<String, OutputDamage>, EngineError> {
        let reused: Vec<&str> = plan
            .decisions
            .iter()
            .filter(|d| d.decision == Decision::Reuse)
            .map(|d| d.step_id.as_str())
            .filter(|id| artifacts.get(*id).is_some_and(|a| !a.is_empty()))
            .collect();
        let mut damaged = HashMap::new();
        if reused.is_empty() {
            return Ok(damaged);
        }
        let source_target = self.target_name_of_run(&source.run_id)?;
        let child_target = child_target.unwrap_or(cairn_core::target::LOCAL);
        let files: Vec<&Artifact> = reused.iter().flat_map(|id| &artifacts[*id]).collect();
        let found = if source_target != child_target {
            let why = format!(
                "its files are in run directory {} on target `{source_target}`, and this replay runs on `{child_target}`; replay on `{source_target}`, or request the step",
                source.run_dir
            );
            files.iter().map(|a| (a.path.clone(), Some(Found::Unreachable { why: why.clone() }))).collect()
        } else {
            self.check_artifacts(&self.placement(&source.run_id)?, &source.run_dir, &files)
        };
        for id in reused {
            if let Some((a, f)) =
                artifacts[id].iter().find_map(|a| found.get(&a.path).cloned().flatten().map(|f| (a, f)))
            {
                damaged.insert(
                    id.to_string(),
                    OutputDamage { output: a.name.clone(), path: a.path.clone(), recorded: a.sha256.clone(), found: f },
                );
            }
        }
        Ok(damaged)
    }

    /// The reused steps of `plan` that read a file their arguments bound (a pipeline's
    /// configfile or samplesheet, listed with its hash in the step's result) which is no longer
    /// those bytes where the source ran; or, for a child on another target, that cannot be
    /// checked there.
    fn changed_inputs(
        &self,
        source: &RunRecord,
        child_target: Option<&str>,
        plan: &ReplayPlan,
        steps: &HashMap<String, SourceStep<'_>>,
    ) -> Result<HashMap<String, InputDamage>, EngineError> {
        let read: Vec<(&str, Vec<InputFile>)> = plan
            .decisions
            .iter()
            .filter(|d| d.decision == Decision::Reuse)
            .filter_map(|d| {
                let inputs = steps.get(&d.step_id)?.result?.get("inputs")?;
                let files: Vec<InputFile> = serde_json::from_value(inputs.clone()).ok()?;
                (!files.is_empty()).then_some((d.step_id.as_str(), files))
            })
            .collect();
        let mut changed = HashMap::new();
        if read.is_empty() {
            return Ok(changed);
        }
        let source_target = self.target_name_of_run(&source.run_id)?;
        let child_target = child_target.unwrap_or(cairn_core::target::LOCAL);
        let placement = self.placement(&source.run_id)?;
        for (id, files) in read {
            let now = if source_target == child_target {
                let args = Value::Array(files.iter().map(|f| Value::String(f.path.clone())).collect());
                self.bound_inputs(&placement, &source.run_dir, &args)
            } else {
                Err(format!("it was read on target `{source_target}`, and this replay runs on `{child_target}`"))
            };
            let damage = match now {
                Ok(now) => files.into_iter().find_map(|f| {
                    let found = match now.iter().find(|n| n.path == f.path) {
                        Some(n) if n.sha256 == f.sha256 => return None,
                        Some(n) => Found::Changed { sha256: n.sha256.clone() },
                        None => Found::Missing,
                    };
                    Some(InputDamage { path: f.path, recorded: f.sha256, found })
                }),
                Err(why) => files.into_iter().next().map(|f| InputDamage {
                    path: f.path,
                    recorded: f.sha256,
                    found: Found::Unreachable { why },
                }),
            };
            if let Some(d) = damage {
                changed.insert(id.to_string(), d);
            }
        }
        Ok(changed)
    }

    /// Plans a replay and checks everything the replay itself would check (the run id, and that
    /// an existing run with that id has the same identity), creating nothing: a dry run.
    pub fn dry_run_replay(&self, req: &ReplayRequest) -> Result<PreparedReplay, EngineError> {
        let prepared = self.prepare_replay(req)?;
        if let Some(id) = &req.run_id {
            let id = RunId::parse(id).map_err(EngineError::InvalidRunId)?;
            if let Some(existing) = self.store.run(&id)? {
                let identity = self.replay_identity(&prepared)?;
                if existing.identity_hash != identity {
                    return Err(EngineError::ExecutionInputMismatch {
                        run_id: existing.run_id.to_string(),
                        stored: format!(
                            "{}@{} identity {}…",
                            existing.workflow,
                            existing.version,
                            cairn_core::canonical::short_hash(&existing.identity_hash)
                        ),
                        requested: format!(
                            "{} identity {}…",
                            prepared.workflow.spec().reference(),
                            cairn_core::canonical::short_hash(&identity)
                        ),
                    });
                }
            }
        }
        Ok(prepared)
    }

    pub(crate) fn replay_identity(&self, prepared: &PreparedReplay) -> Result<String, EngineError> {
        let spec = prepared.workflow.spec();
        run_identity(&spec.name, &spec.version, &prepared.input, Some(&prepared.directive()))
            .map_err(|e| EngineError::input(format!("run input: {e}")))
    }

    /// The child run's record, before anything is created.
    pub(crate) fn replay_run(&self, req: &ReplayRequest, prepared: &PreparedReplay) -> Result<NewRun, EngineError> {
        let spec = prepared.workflow.spec();
        let identity = self.replay_identity(prepared)?;
        let new = self.new_run(
            req.run_id.as_deref(),
            spec,
            identity,
            &prepared.input,
            Some(prepared.source.run_id.clone()),
            Some(prepared.record()),
        )?;
        let act = req.by.as_ref().map(|c| {
            let detail = serde_json::json!({
                "workflow": spec.name, "version": spec.version, "source_run_id": prepared.source.run_id,
                "steps": req.step_ids,
            });
            c.act(new.at, "run.submitted", new.run_id.as_str(), detail)
        });
        Ok(NewRun {
            act,
            admission: req.admission.clone(),
            owner: req.owner,
            thread_id: req.thread_id.clone(),
            parallelism: crate::runner::parallelism_of(req.parallelism),
            ..new
        })
    }

    /// Plans a replay and creates its child run (or finds the existing one with the same
    /// identity) without executing it; [`Engine::replay`] executes it. Returns the child and
    /// whether it was created now.
    pub(crate) fn submit_replay(&self, req: &ReplayRequest) -> Result<(RunRecord, bool), EngineError> {
        let prepared = self.prepare_replay(req)?;
        let new = self.replay_run(req, &prepared)?;
        self.create_checked(&new)
    }

    /// Plans and runs a replay child (or continues one with the same run id).
    pub fn replay(
        &self,
        req: &ReplayRequest,
        obs: &mut dyn Observer,
    ) -> Result<(RunView, PreparedReplay), EngineError> {
        let (run, prepared) = self.replay_executed(req, obs)?;
        Ok((self.show_run(&run.run_id)?, prepared))
    }

    /// [`Engine::replay`], answering with the child's record alone (what the daemon's worker
    /// needs: a view of a huge child is not built for nobody).
    pub(crate) fn replay_executed(
        &self,
        req: &ReplayRequest,
        obs: &mut dyn Observer,
    ) -> Result<(RunRecord, PreparedReplay), EngineError> {
        let prepared = self.prepare_replay(req)?;
        let new = self.replay_run(req, &prepared)?;
        let reusing: std::collections::HashSet<&String> = prepared.summary.reused.iter().collect();
        let reused: Vec<StepRecord> =
            prepared.source_steps.iter().filter(|s| reusing.contains(&s.step_id)).cloned().collect();
        let source_id = prepared.source.run_id.clone();
        let mut copy = |run: &RunRecord| -> Result<(), EngineError> {
            // The bytes first, then the records: a child never records an artifact it does not
            // hold, and a restarted replay finds the files there and copies only the records.
            let copied: std::collections::HashSet<String> = self.store.step_ids(&run.run_id)?.into_iter().collect();
            let pending: Vec<&StepRecord> = reused.iter().filter(|s| !copied.contains(&s.step_id)).collect();
            if let Err(message) = self.materialize_reused(&prepared, run, &pending) {
                // Nothing was reused, so nothing ran: the child fails naming the file.
                self.store.finish_run(
                    &run.run_id,
                    run.revision,
                    RunStatus::Failed,
                    &[],
                    Some(&message),
                    self.clock.now_ms(),
                )?;
                return Err(EngineError::ArtifactChanged { run_id: run.run_id.to_string(), message });
            }
            self.store.copy_reused_steps(&run.run_id, &source_id, &reused, self.clock.now_ms())?;
            Ok(())
        };
        let opts = ExecOptions {
            resume: req.resume_interrupted,
            parallelism: req.parallelism,
            owner: req.owner.as_ref(),
            stop: req.stop.as_ref(),
        };
        let run = self.create_and_execute(&prepared.workflow, &new, opts, &mut copy, obs)?;
        Ok((run, prepared))
    }

    /// Materialises the artifacts of the reused steps into the child's run directory, where it
    /// runs, with the folders its reused steps declare (an empty one included).
    fn materialize_reused(
        &self,
        prepared: &PreparedReplay,
        run: &RunRecord,
        steps: &[&StepRecord],
    ) -> Result<(), String> {
        let spec = prepared.workflow.spec();
        let mut files = Vec::new();
        let mut dirs = Vec::new();
        for s in steps {
            files.extend(prepared.source_artifacts.get(&s.step_id).into_iter().flatten());
            if let Some(step) = spec.step(&s.step_id) {
                dirs.extend(spec.outputs_of(step).iter().filter(|d| d.folder).map(|d| output_path(&s.step_id, d)));
            }
        }
        if files.is_empty() && dirs.is_empty() {
            return Ok(());
        }
        let placement = self.placement(&run.run_id).map_err(|e| e.to_string())?;
        self.materialize(&placement, &prepared.source.run_dir, &run.run_dir, &files, dirs)
            .map(|_| ())
            .map_err(|e| format!("the artifacts of its reused steps could not be materialised: {e}"))
    }

    /// What replay request a stored child run came from, so a daemon can continue it.
    pub(crate) fn replay_request_of(&self, run: &RunRecord) -> Option<ReplayRequest> {
        let source_run_id = run.source_run_id.clone()?;
        let requested = &run.replay.as_ref()?.summary.requested;
        Some(ReplayRequest {
            source_run_id,
            step_ids: requested.clone(),
            input: Some(run.input.clone()),
            run_id: Some(run.run_id.to_string()),
            version: Some(run.version.clone()),
            workflow: Some(run.workflow.clone()),
            thread_id: run.thread_id.clone(),
            // A planned replay executes the workflow its approval deployed into its run_dir.
            workflow_dir: run.plan_id.as_ref().map(|_| std::path::Path::new(&run.run_dir).join("workflow")),
            target: self.target_name_of_run(&run.run_id).ok(),
            ..ReplayRequest::default()
        })
    }
}

/// Which part of a tool changed between two loaded workflows, in words.
pub fn explain_tool_change(old: &LoadedWorkflow, new: &LoadedWorkflow, tool: &str) -> Vec<String> {
    let (Some(o), Some(n)) = (old.spec().tools.get(tool), new.spec().tools.get(tool)) else {
        return vec![format!("tool `{tool}` is new in {}", new.spec().reference())];
    };
    let mut out = Vec::new();
    let version = |v: &Option<String>| v.as_deref().map(|v| format!("`{v}`")).unwrap_or_else(|| "(none)".into());
    let words = |v: &[String]| if v.is_empty() { "(none)".to_string() } else { format!("`{}`", v.join(" ")) };
    if o.command != n.command {
        out.push(format!("tool `{tool}` command changed from {} to {}", words(&o.command), words(&n.command)));
    }
    if o.version != n.version {
        out.push(format!("tool `{tool}` version changed from {} to {}", version(&o.version), version(&n.version)));
    }
    if o.timeout_secs != n.timeout_secs {
        out.push(format!("tool `{tool}` timeout_secs changed from {} to {}", o.timeout_secs, n.timeout_secs));
    }
    if o.env != n.env {
        out.push(format!("tool `{tool}` env changed from {} to {}", words(&o.env), words(&n.env)));
    }
    let (of, nf) = (&old.tools[tool].files, &new.tools[tool].files);
    for f in nf {
        match of.iter().find(|x| x.path == f.path) {
            Some(x) if x.sha256 != f.sha256 => out.push(format!("tool file {} changed", f.path)),
            None => out.push(format!("tool file {} added", f.path)),
            _ => {}
        }
    }
    for f in of {
        if !nf.iter().any(|x| x.path == f.path) {
            out.push(format!("tool file {} removed", f.path));
        }
    }
    out
}
