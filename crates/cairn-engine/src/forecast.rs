//! Forecasts of a pipeline step's jobs before a replay runs it: its working copy seeded into a
//! scratch folder of the state root exactly as the replay would seed it, `snakemake --dry-run`
//! there, and its log read by the same parser as a run's. Nothing else is created; the scratch
//! folder is removed.

use std::path::Path;

use cairn_core::canonical::sha256_hex;
use cairn_core::controller::{RUN_CONFIG, working_copy};
use cairn_core::event::RunEvent;
use cairn_core::workflow::ToolKind;
use cairn_exec::artifacts::{Carried, Written};
use serde_json::Value;

use crate::Engine;
use crate::pipeline::{WORKING_COPY_MARKER, run_config_bytes};

/// The jobs a replay's dry run predicts for one pipeline step, by rule, or why it could not.
#[derive(Debug, Clone)]
pub struct JobPrediction {
    pub step_id: String,
    pub rules: Vec<cairn_core::job::RuleCount>,
    pub note: Option<String>,
}

impl Engine {
    /// For a replay's dry run: per pipeline step it would re-execute here, the jobs Snakemake
    /// would run, by rule and reason. The step's working copy is seeded into a scratch folder of
    /// the state root exactly as the replay would seed it (so a large pipeline's dry run costs
    /// that copy), and `snakemake --dry-run` reads it; nothing else is created, and the scratch
    /// folder is removed. A step whose arguments need a step that runs again, or that has no
    /// earlier working copy to start from here, gets a note instead.
    pub fn predict_pipeline_jobs(&self, prepared: &crate::replay::PreparedReplay) -> Vec<JobPrediction> {
        let spec = prepared.workflow.spec();
        let reused: std::collections::HashMap<&str, &Value> = prepared
            .source_steps
            .iter()
            .filter(|s| {
                prepared
                    .plan
                    .decisions
                    .iter()
                    .any(|d| d.step_id == s.step_id && d.decision == cairn_core::replay::Decision::Reuse)
            })
            .filter_map(|s| s.result.as_ref().map(|r| (s.step_id.as_str(), r)))
            .collect();
        let mut out = Vec::new();
        for d in prepared.plan.decisions.iter().filter(|d| d.decision == cairn_core::replay::Decision::Replay) {
            let Some(step) = spec.steps.iter().find(|s| s.id == d.step_id) else { continue };
            let Some(kind) = spec.tools.get(&step.tool).map(|t| t.kind) else { continue };
            if kind != ToolKind::Snakemake {
                continue;
            }
            let prediction = self.predict_step(prepared, step, &reused);
            out.push(match prediction {
                Ok(jobs) => {
                    JobPrediction { step_id: d.step_id.clone(), rules: cairn_core::job::by_rule(&jobs), note: None }
                }
                Err(note) => JobPrediction { step_id: d.step_id.clone(), rules: Vec::new(), note: Some(note) },
            });
        }
        out
    }

    /// For a replay plan on this machine: its pipeline steps' predicted jobs, as
    /// [`Engine::predict_pipeline_jobs`] says for a dry run; nothing for another plan. Not part of
    /// the plan (its checksum covers what runs, not a forecast).
    pub fn predict_plan_jobs(&self, plan: &cairn_core::plan::Plan) -> Vec<JobPrediction> {
        let Some(replay) = &plan.replay else { return Vec::new() };
        let req = crate::replay::ReplayRequest {
            source_run_id: cairn_core::ids::RunId::lookup(replay.source_run_id.as_str()),
            step_ids: replay.step_ids.clone(),
            input: Some(plan.input.clone()),
            version: Some(plan.version.clone()),
            workflow: Some(plan.workflow.clone()),
            target: Some(plan.target.clone()),
            ..crate::replay::ReplayRequest::default()
        };
        match self.prepare_replay(&req) {
            Ok(prepared) if plan.target == cairn_core::target::LOCAL => self.predict_pipeline_jobs(&prepared),
            Ok(prepared) => self
                .predict_pipeline_jobs(&prepared)
                .into_iter()
                .map(|p| JobPrediction {
                    step_id: p.step_id,
                    rules: Vec::new(),
                    note: Some(format!(
                        "not predicted: the plan runs on target `{}`, and a forecast looks only here",
                        plan.target
                    )),
                })
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    fn predict_step(
        &self,
        prepared: &crate::replay::PreparedReplay,
        step: &cairn_core::workflow::StepDef,
        reused: &std::collections::HashMap<&str, &Value>,
    ) -> Result<Vec<cairn_core::job::Job>, String> {
        let args = cairn_core::template::resolve(&step.args, &prepared.input, &|id| reused.get(id).copied())
            .map_err(|_| "not predicted: its arguments need the result of a step that runs again".to_string())?;
        if !self.target_name_of_run(&prepared.source.run_id).is_ok_and(|t| t == cairn_core::target::LOCAL) {
            return Err("not predicted: its earlier run is on a target, and a dry run looks only here".into());
        }
        let seed = self
            .pipeline_seed(&prepared.source.run_id, &prepared.source.run_id, &step.id)
            .ok_or_else(|| "not predicted: no earlier working copy to start from, so every job runs".to_string())?;
        let scratch = self.state().path().join("tmp").join(format!("predict-{}", self.ids.token()));
        let work = scratch.join(working_copy(&step.id));
        let result = (|| {
            let tool = &prepared.workflow.tools[&step.tool];
            let baseline: Vec<Carried> =
                tool.files.iter().map(|f| Carried { path: f.path.clone(), sha256: f.sha256.clone() }).collect();
            let write: Vec<Written> = match cairn_core::controller::run_config(&args).ok().flatten() {
                Some(config) => {
                    let content = run_config_bytes(config)?;
                    vec![Written { path: RUN_CONFIG.into(), sha256: sha256_hex(&content), content }]
                }
                None => Vec::new(),
            };
            let state = seed.state.as_ref().map(|(d, s)| (d.as_str(), s.as_str()));
            let s = cairn_exec::artifacts::Seed { from: Path::new(&seed.from_dir), files: &seed.files, state };
            cairn_exec::artifacts::seed_working_copy(
                Path::new(&prepared.workflow.record.path),
                &work,
                &baseline,
                &write,
                WORKING_COPY_MARKER,
                &s,
            )
            .map_err(|e| format!("not predicted: the scratch copy could not be made: {e}"))?;
            let work_dir = work.display().to_string();
            let mut argv = cairn_core::controller::controller_argv(ToolKind::Snakemake, &args, &work_dir, None)
                .map_err(|e| format!("not predicted: {e}"))?;
            argv.extend(["--dry-run".to_string(), "--nolock".to_string()]);
            let out = std::process::Command::new(&argv[0])
                .args(&argv[1..])
                .current_dir(&work)
                .stdin(std::process::Stdio::null())
                .output()
                .map_err(|e| format!("not predicted: `{}` could not be started: {e}", argv[0]))?;
            if !out.status.success() {
                let tail = String::from_utf8_lossy(&out.stderr);
                let last = tail.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").to_string();
                return Err(format!("not predicted: snakemake --dry-run failed: {last}"));
            }
            let mut log = cairn_core::pipeline::SnakemakeLog::new();
            let mut events: Vec<RunEvent> = Vec::new();
            for bytes in [&out.stdout, &out.stderr] {
                events.extend(log.feed(bytes).into_iter().map(RunEvent::of_job));
            }
            events.extend(log.finish().into_iter().map(RunEvent::of_job));
            Ok(cairn_core::job::fold(
                events.iter().map(|event| cairn_core::job::StepEvent { attempt: 1, at: 0, event }),
                Some(1),
            ))
        })();
        let _ = std::fs::remove_dir_all(&scratch);
        result
    }
}
