//! The JSON objects of the CLI contract and the HTTP API: one set of types, converted from the
//! domain by hand, so `cairn run --json` and `GET /runs/{id}` print the same fields and the
//! OpenAPI document is generated from what is actually sent.

use cairn_core::store::{EventRecord, KernelJob, RunRecord, RunStore, StoreError, WorkflowRecord};
use cairn_engine::runner::{RunReport, StepView};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

pub fn time(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms).map(|t| t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()).unwrap_or_default()
}

/// One step of a run.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct StepResult {
    pub step_id: String,
    /// PENDING, RUNNING, COMPLETED or FAILED.
    pub status: String,
    pub attempts: u32,
    /// Copied from a replay's source run rather than executed.
    pub reused: bool,
    /// COMPLETED, TIMED_OUT, FAILED, DENIED or INVALID_INPUT, once an attempt ended.
    pub outcome: Option<String>,
    pub duration_ms: Option<f64>,
    pub error: Option<String>,
    /// For a replay child: `reuse` or `replay` (the replay summary lists which replays were
    /// invalidations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    /// For a replay child: why, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A run: its status, steps in execution order, the validator's findings.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunResult {
    pub run_id: String,
    pub workflow: String,
    pub version: String,
    /// PENDING, RUNNING, READY, BLOCKED, FAILED or CANCELLED.
    pub status: String,
    pub steps: Vec<StepResult>,
    #[schema(value_type = Vec<Object>)]
    pub findings: Vec<Value>,
    pub error: Option<String>,
    pub run_dir: String,
    pub created_at: String,
    pub finished_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    /// Where it executes: `local`, or the target its plan named.
    #[serde(default = "local")]
    pub target: String,
    /// For a replay child: the source run, the requested, replayed, reused and invalidated steps
    /// and every decision with its reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub replay: Option<Value>,
}

impl RunResult {
    pub fn from_report(report: &RunReport) -> RunResult {
        let run = &report.run;
        RunResult {
            run_id: run.run_id.clone(),
            workflow: run.workflow.clone(),
            version: run.version.clone(),
            status: run.status.to_string(),
            steps: report.steps.iter().map(|s| step_result(report, s)).collect(),
            findings: run.findings.iter().map(|f| serde_json::to_value(f).unwrap_or(Value::Null)).collect(),
            error: run.error.clone(),
            run_dir: run.run_dir.clone(),
            created_at: time(run.created_at),
            finished_at: run.finished_at.map(time),
            thread_id: run.thread_id.clone(),
            target: report.target.clone(),
            replay: run.replay.clone(),
        }
    }
}

/// The stored replay decision of a step, if the run is a replay child.
pub fn decision_of<'a>(report: &'a RunReport, step_id: &str) -> Option<&'a Value> {
    report.run.replay.as_ref()?.get("decisions")?.as_array()?.iter().find(|d| d["step_id"] == step_id)
}

fn step_result(report: &RunReport, s: &StepView) -> StepResult {
    let r = s.record.as_ref();
    let decision = decision_of(report, &s.step_id);
    StepResult {
        step_id: s.step_id.clone(),
        status: s.status().to_string(),
        attempts: r.map(|r| r.attempt_count).unwrap_or(0),
        reused: r.is_some_and(|r| r.reused_from.is_some()),
        outcome: r.and_then(|r| r.outcome).map(|o| o.to_string()),
        duration_ms: r.and_then(|r| r.duration_us).map(|us| us as f64 / 1000.0),
        error: r.and_then(|r| r.error.clone()),
        decision: decision.and_then(|d| d["decision"].as_str()).map(String::from),
        reason: decision.and_then(|d| d["text"].as_str()).map(String::from),
    }
}

/// One line of `cairn runs` / `GET /runs`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunSummary {
    pub run_id: String,
    pub workflow: String,
    pub version: String,
    pub status: String,
    pub created_at: String,
    pub finished_at: Option<String>,
    /// How many findings the validator reported.
    pub findings: usize,
    pub error: Option<String>,
    /// For a replay child: the run it replays.
    #[serde(default)]
    pub source_run_id: Option<String>,
    /// Where it executes: `local`, or the target its plan named.
    #[serde(default = "local")]
    pub target: String,
}

fn local() -> String {
    cairn_core::target::LOCAL.to_string()
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunList {
    pub runs: Vec<RunSummary>,
}

impl RunList {
    /// The runs, each with the target its plan named (`local` when it had none).
    pub fn from_records(store: &dyn RunStore, runs: &[RunRecord]) -> Result<RunList, StoreError> {
        let mut targets = Vec::with_capacity(runs.len());
        for r in runs {
            targets.push(store.target_of_run(&r.run_id)?.unwrap_or_else(local));
        }
        Ok(RunList {
            runs: runs
                .iter()
                .zip(targets)
                .map(|(r, target)| RunSummary {
                    run_id: r.run_id.clone(),
                    workflow: r.workflow.clone(),
                    version: r.version.clone(),
                    status: r.status.to_string(),
                    created_at: time(r.created_at),
                    finished_at: r.finished_at.map(time),
                    findings: r.findings.len(),
                    error: r.error.clone(),
                    source_run_id: r.source_run_id.clone(),
                    target,
                })
                .collect(),
        })
    }
}

/// One event of a run's append-only log.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Event {
    pub seq: i64,
    /// `run.created`, `step.started`, `step.completed`, `step.failed`, `run.finished`, …
    pub kind: String,
    pub step_id: Option<String>,
    pub attempt: Option<u32>,
    pub at: String,
    #[schema(value_type = Object)]
    pub data: Value,
}

impl Event {
    pub fn from_record(e: &EventRecord) -> Event {
        Event {
            seq: e.seq,
            kind: e.kind.clone(),
            step_id: e.step_id.clone(),
            attempt: e.attempt,
            at: time(e.at),
            data: e.data.clone(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EventList {
    pub run_id: String,
    pub events: Vec<Event>,
}

impl EventList {
    pub fn from_records(run_id: &str, events: &[EventRecord]) -> EventList {
        EventList { run_id: run_id.to_string(), events: events.iter().map(Event::from_record).collect() }
    }
}

/// One registered workflow version.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct WorkflowSummary {
    pub name: String,
    pub version: String,
    pub digest: String,
    pub description: String,
    pub steps: usize,
    pub registered_at: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct WorkflowList {
    pub workflows: Vec<WorkflowSummary>,
}

impl WorkflowList {
    pub fn from_records(all: &[WorkflowRecord]) -> WorkflowList {
        WorkflowList {
            workflows: all
                .iter()
                .map(|w| WorkflowSummary {
                    name: w.name.clone(),
                    version: w.version.clone(),
                    digest: w.digest.clone(),
                    description: w.spec.description.clone(),
                    steps: w.spec.steps.len(),
                    registered_at: time(w.registered_at),
                })
                .collect(),
        }
    }
}

/// A job of the session kernel.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Job {
    pub job_id: String,
    /// `queued`, `running`, `ok`, `error`, `died`, `timed_out`, `interrupted` or `cancelled`.
    pub status: String,
    pub code: String,
    /// nbformat v4 output dicts, in order.
    #[schema(value_type = Vec<Object>)]
    pub outputs: Vec<Value>,
    pub execution_count: Option<u32>,
    pub error: Option<String>,
    /// The kernel process the job ran in; a restart starts a new session.
    pub session: String,
    pub submitted_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub duration_ms: Option<i64>,
}

impl Job {
    pub fn from_record(j: &KernelJob) -> Job {
        Job {
            job_id: j.job_id.clone(),
            status: j.status.clone(),
            code: j.code.clone(),
            outputs: j.outputs.clone(),
            execution_count: j.execution_count,
            error: j.error.clone(),
            session: j.session.clone(),
            submitted_at: time(j.submitted_at),
            started_at: j.started_at.map(time),
            finished_at: j.finished_at.map(time),
            duration_ms: j.duration_ms,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct JobList {
    pub jobs: Vec<Job>,
}

/// A stored plan, as `GET /plans` lists it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PlanSummary {
    pub plan_name: String,
    pub plan_id: String,
    pub plan_checksum: String,
    pub workflow: String,
    pub version: String,
    pub target: String,
    pub run_dir: String,
    pub created_at: String,
    /// The run that executed it, if any.
    pub run_id: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PlanList {
    pub plans: Vec<PlanSummary>,
}

impl PlanList {
    /// Every stored plan, newest first, with the run that executed it.
    pub fn from_store(engine: &cairn_engine::Engine) -> Result<PlanList, cairn_engine::EngineError> {
        let mut plans = Vec::new();
        for p in engine.store.plans()? {
            plans.push(PlanSummary {
                run_id: engine.store.run_of_plan(&p.plan_id)?,
                created_at: time(p.created_at),
                plan_name: p.plan_name,
                plan_id: p.plan_id,
                plan_checksum: p.plan_checksum,
                workflow: p.workflow,
                version: p.version,
                target: p.target,
                run_dir: p.run_dir,
            });
        }
        Ok(PlanList { plans })
    }
}
