//! Runs, their steps, the run list, events, a step's explanation and its log.

use cairn_core::event::RunEvent;
use cairn_core::store::{EventRecord, RunRecord};
use cairn_engine::{RunListing, RunView, StepExplanation, StepView};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::time;

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

/// One run of a replay child's lineage.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LineageEntry {
    pub run_id: String,
    pub workflow: String,
    pub version: String,
    pub status: String,
}

/// A run: its status, steps in execution order, the validator's findings, its lineage.
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
    /// The runs it was replayed from, nearest first (empty unless it is a replay child).
    #[serde(default)]
    pub lineage: Vec<LineageEntry>,
}

impl RunResult {
    pub fn from_view(view: &RunView) -> RunResult {
        let run = &view.run;
        RunResult {
            run_id: run.run_id.clone(),
            workflow: run.workflow.clone(),
            version: run.version.clone(),
            status: run.status.to_string(),
            steps: view.steps.iter().map(|s| step_result(view, s)).collect(),
            findings: run.findings.iter().map(super::to_value).collect(),
            error: run.error.clone(),
            run_dir: run.run_dir.clone(),
            created_at: time(run.created_at),
            finished_at: run.finished_at.map(time),
            thread_id: run.thread_id.clone(),
            target: view.target.clone(),
            replay: run.replay.clone(),
            lineage: view.lineage.iter().map(lineage_entry).collect(),
        }
    }
}

fn lineage_entry(r: &RunRecord) -> LineageEntry {
    LineageEntry {
        run_id: r.run_id.clone(),
        workflow: r.workflow.clone(),
        version: r.version.clone(),
        status: r.status.to_string(),
    }
}

fn step_result(view: &RunView, s: &StepView) -> StepResult {
    let r = s.record.as_ref();
    let decision = view.decision_of(&s.step_id);
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
    pub fn from_listings(runs: &[RunListing]) -> RunList {
        RunList {
            runs: runs
                .iter()
                .map(|l| {
                    let r = &l.run;
                    RunSummary {
                        run_id: r.run_id.clone(),
                        workflow: r.workflow.clone(),
                        version: r.version.clone(),
                        status: r.status.to_string(),
                        created_at: time(r.created_at),
                        finished_at: r.finished_at.map(time),
                        findings: r.findings.len(),
                        error: r.error.clone(),
                        source_run_id: r.source_run_id.clone(),
                        target: l.target.clone(),
                    }
                })
                .collect(),
        }
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
            kind: e.event.kind().to_string(),
            step_id: e.step_id.clone(),
            attempt: e.attempt,
            at: time(e.at),
            data: e.event.data(),
        }
    }

    /// The event itself, typed; `None` for a kind this build does not know.
    pub fn event(&self) -> Option<RunEvent> {
        RunEvent::from_parts(&self.kind, self.data.clone()).ok()
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

/// Why a step of a run was executed, reused or invalidated, with its signature and attempts.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Explanation {
    pub run_id: String,
    pub step_id: String,
    pub status: String,
    pub attempts: u32,
    /// `execute`, `reuse` or `replay`.
    #[schema(value_type = String)]
    pub decision: Value,
    /// The structured reason: `{kind, …}`.
    #[schema(value_type = Object)]
    pub reason: Value,
    /// The reason in words.
    #[schema(value_type = String)]
    pub text: Value,
    pub reused_from: Option<String>,
    /// `{tool, tool_digest, args_hash}`, once the step has a record.
    #[schema(value_type = Option<Object>)]
    pub signature: Option<Value>,
    pub outcome: Option<String>,
    pub error: Option<String>,
}

impl Explanation {
    pub fn from_engine(e: &StepExplanation) -> Explanation {
        Explanation {
            run_id: e.run_id.clone(),
            step_id: e.step_id.clone(),
            status: e.status.to_string(),
            attempts: e.attempts,
            decision: e.decision.clone(),
            reason: e.reason.clone(),
            text: e.text.clone(),
            reused_from: e.reused_from.clone(),
            signature: e.signature.as_ref().map(super::to_value),
            outcome: e.outcome.map(|o| o.to_string()),
            error: e.error.clone(),
        }
    }
}

/// The bounded tail of a step's stderr, as its last attempt left it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct StepLog {
    pub run_id: String,
    pub step_id: String,
    pub status: String,
    pub lines: Vec<String>,
    /// Whether earlier lines were left out.
    pub truncated: bool,
}

impl StepLog {
    pub fn from_engine(l: cairn_engine::StepLog) -> StepLog {
        StepLog {
            run_id: l.run_id,
            step_id: l.step_id,
            status: l.status.to_string(),
            lines: l.lines,
            truncated: l.truncated,
        }
    }
}

/// What a replay would decide for every step, creating nothing (`cairn replay --dry-run`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ReplayPreview {
    /// Always true: nothing was created.
    pub dry_run: bool,
    pub source_run_id: String,
    pub workflow: String,
    pub version: String,
    /// `{source_run_id, requested, replayed, reused, invalidated}`.
    #[schema(value_type = Object)]
    pub replay: Value,
    /// `[{step_id, decision, reason, text}]`, in execution order.
    #[schema(value_type = Vec<Object>)]
    pub decisions: Value,
}

impl ReplayPreview {
    pub fn from_prepared(p: &cairn_engine::replay::PreparedReplay) -> ReplayPreview {
        ReplayPreview {
            dry_run: true,
            source_run_id: p.source.run_id.clone(),
            workflow: p.workflow.spec().name.clone(),
            version: p.workflow.spec().version.clone(),
            replay: super::to_value(&p.summary),
            decisions: p.record()["decisions"].clone(),
        }
    }
}
