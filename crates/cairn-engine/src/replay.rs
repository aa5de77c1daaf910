//! Selective replay: a new child run of a terminal source run that re-executes the requested
//! steps (and whatever the planner finds incompatible) and reuses the rest of the source's
//! evidence, copied as it is.
//!
//! **Invariant:** replay never changes the source run: its rows and events are only read.

use std::collections::HashMap;

use cairn_core::ids::{Owner, RunId};
use cairn_core::replay::{self, ReplayInput, ReplayPlan, ReplaySummary, SourceStep};
use cairn_core::signature::run_identity;
use cairn_core::status::RunStatus;
use cairn_core::store::{NewRun, RunRecord, StepRecord};
use serde_json::{Value, json};

use crate::registry::{LoadedWorkflow, load_record};
use crate::runner::{ExecOptions, Observer, check_input};
use crate::{Engine, EngineError, RunView, StopSignal};

#[derive(Debug, Clone, Default)]
pub struct ReplayRequest {
    pub source_run_id: String,
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
}

/// Everything decided before a replay creates anything.
pub struct PreparedReplay {
    pub source: RunRecord,
    pub workflow: LoadedWorkflow,
    pub input: Value,
    pub plan: ReplayPlan,
    pub summary: ReplaySummary,
    pub source_steps: Vec<StepRecord>,
}

impl PreparedReplay {
    /// The directive that, with the workflow and input, makes the child's identity.
    pub fn directive(&self) -> Value {
        json!({"source_run_id": self.plan.source_run_id, "step_ids": self.plan.requested})
    }

    /// What the child run stores about its replay: the summary and every decision with its reason.
    pub fn record(&self) -> Value {
        let mut v = serde_json::to_value(&self.summary).unwrap_or(Value::Null);
        v["decisions"] = Value::Array(
            self.plan
                .decisions
                .iter()
                .map(|d| json!({"step_id": d.step_id, "decision": d.decision, "reason": d.reason, "text": d.reason.text()}))
                .collect(),
        );
        v
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
            match self.store.workflow(&source.workflow, Some(&source.version))? {
                Some(r) => Some(load_record(r)?),
                None => None,
            }
        };
        let source_tools = source_wf.as_ref().unwrap_or(&workflow);
        let explain_tool = |tool: &str| -> Vec<String> { explain_tool_change(source_tools, &workflow, tool) };
        let digests: HashMap<String, String> =
            workflow.tools.iter().map(|(k, t)| (k.clone(), t.digest.clone())).collect();
        let by_id: HashMap<String, SourceStep> = source_steps
            .iter()
            .map(|s| {
                (
                    s.step_id.clone(),
                    SourceStep { status: s.status, signature: &s.signature, args: &s.args, result: s.result.as_ref() },
                )
            })
            .collect();
        let plan = replay::plan(&ReplayInput {
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
        });
        let summary = plan.summary(&workflow.dag);
        drop(by_id);
        Ok(PreparedReplay { source, workflow, input, plan, summary, source_steps })
    }

    /// Plans a replay and checks everything the replay itself would check (the run id, and that
    /// an existing run with that id has the same identity), creating nothing: a dry run.
    pub fn dry_run_replay(&self, req: &ReplayRequest) -> Result<PreparedReplay, EngineError> {
        let prepared = self.prepare_replay(req)?;
        if let Some(id) = &req.run_id {
            let id = RunId::parse(id).map_err(EngineError::InvalidRunId)?;
            if let Some(existing) = self.store.run(id.as_str())? {
                let identity = self.replay_identity(&prepared)?;
                if existing.identity_hash != identity {
                    return Err(EngineError::ExecutionInputMismatch {
                        run_id: existing.run_id.clone(),
                        stored: format!(
                            "{}@{} identity {}…",
                            existing.workflow,
                            existing.version,
                            &existing.identity_hash[..12]
                        ),
                        requested: format!("{} identity {}…", prepared.workflow.spec().reference(), &identity[..12]),
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
        Ok(NewRun { owner: req.owner, thread_id: req.thread_id.clone(), ..new })
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
        let prepared = self.prepare_replay(req)?;
        let new = self.replay_run(req, &prepared)?;
        let reused: Vec<StepRecord> =
            prepared.source_steps.iter().filter(|s| prepared.summary.reused.contains(&s.step_id)).cloned().collect();
        let source_id = prepared.source.run_id.clone();
        let mut copy = |run: &RunRecord| -> Result<(), EngineError> {
            self.store.copy_reused_steps(&run.run_id, &source_id, &reused, self.clock.now_ms())?;
            Ok(())
        };
        let opts = ExecOptions {
            resume: req.resume_interrupted,
            parallelism: req.parallelism,
            owner: req.owner.as_ref(),
            stop: req.stop.as_ref(),
        };
        let report = self.create_and_execute(&prepared.workflow, &new, opts, &mut copy, obs)?;
        Ok((report, prepared))
    }

    /// What replay request a stored child run came from, so a daemon can continue it.
    pub(crate) fn replay_request_of(&self, run: &RunRecord) -> Option<ReplayRequest> {
        let source_run_id = run.source_run_id.clone()?;
        let requested = run.replay.as_ref()?.get("requested")?.as_array()?;
        Some(ReplayRequest {
            source_run_id,
            step_ids: requested.iter().filter_map(|v| v.as_str().map(String::from)).collect(),
            input: Some(run.input.clone()),
            run_id: Some(run.run_id.clone()),
            version: Some(run.version.clone()),
            workflow: Some(run.workflow.clone()),
            thread_id: run.thread_id.clone(),
            // A planned replay executes the workflow its approval deployed into its run_dir.
            workflow_dir: run.plan_id.as_ref().map(|_| std::path::Path::new(&run.run_dir).join("workflow")),
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
