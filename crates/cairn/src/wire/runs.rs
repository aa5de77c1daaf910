//! Runs, their steps, the run list, events, a step's explanation and its log.

use cairn_core::artifact::ArtifactRecord;
use cairn_core::cause::Cause;
use cairn_core::event::RunEvent;
use cairn_core::replay::DecisionRecord;
use cairn_core::store::{EventRecord, RunRecord};
use cairn_engine::{RunArtifacts, RunListing, RunView, StepExplanation, StepView, Trace};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::jobs::JobsProgress;
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
    /// What made its last attempt fail, when Cairn could tell (absent otherwise): its `kind` is
    /// the name a step's `retry_on` can give it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<StepCause>,
    /// For a replay child: `reuse` or `replay` (the replay summary lists which replays were
    /// invalidations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    /// For a replay child: why, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What the tool found: its JSON result, once it completed. In a run, a result over 64 KiB
    /// is cut: then this is a string, the first 64 KiB of the result's JSON text, and
    /// `result_truncated` is true; `cairn result RUN STEP` (or `GET /runs/{id}/steps/{step}`)
    /// gives it whole.
    #[serde(default)]
    pub result: Option<Value>,
    #[serde(default)]
    pub result_truncated: bool,
    /// The size of the whole result's JSON text.
    #[serde(default)]
    pub result_bytes: usize,
    /// The files it produced (its declared outputs), by path.
    #[serde(default)]
    pub artifacts: Vec<ArtifactEntry>,
    /// A pipeline step's jobs in numbers, once it has any (for a step a replay reused, those of
    /// the run that ran them); absent for any other step. `GET /runs/{id}/steps/{step}/jobs`
    /// lists the jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs: Option<JobsProgress>,
}

/// What made a FAILED attempt fail. `NO_SPACE`: its output disk was full (ENOSPC), seen on the
/// disk (`disk_full`), in its stderr (`in_stderr`), or both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct StepCause {
    /// `NO_SPACE`.
    pub kind: String,
    /// The mount point of the full filesystem; when only the stderr said so, the one holding the
    /// step directory (null when none could be read).
    pub path: Option<String>,
    /// Its free bytes when the attempt ended.
    pub free_bytes: Option<u64>,
    /// Its free inodes, where the filesystem counts them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free_inodes: Option<u64>,
    /// That filesystem had no block or no inode left.
    pub disk_full: bool,
    /// The tool's stderr said `No space left on device`.
    pub in_stderr: bool,
}

impl StepCause {
    pub fn from_core(c: &Cause) -> StepCause {
        match c {
            Cause::NoSpace(n) => StepCause {
                kind: c.kind().to_string(),
                path: n.path.clone(),
                free_bytes: n.free_bytes,
                free_inodes: n.free_inodes,
                disk_full: n.disk_full,
                in_stderr: n.in_stderr,
            },
        }
    }
}

/// One file a step produced, as recorded when its attempt completed.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ArtifactEntry {
    pub step_id: String,
    /// The declared output it belongs to.
    pub name: String,
    /// Relative to the run directory.
    pub path: String,
    pub bytes: u64,
    pub sha256: String,
    /// The attempt that produced it (in the run that produced it).
    pub attempt: u32,
    /// For a reused step: the run whose attempt produced the bytes.
    #[serde(default)]
    pub reused_from: Option<String>,
    /// A symlink's target, as written: the artifact is the link (never followed), its `sha256`
    /// the digest of its target's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    /// For a pipeline step's artifact: the job that wrote it (the controller's attempt and job
    /// id, its rule and wildcards), as `cairn jobs` lists it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<ArtifactJob>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ArtifactJob {
    pub attempt: u32,
    pub job: u64,
    pub rule: String,
    pub wildcards: std::collections::BTreeMap<String, String>,
}

impl ArtifactJob {
    pub fn from_core(o: &cairn_core::job::JobOrigin) -> ArtifactJob {
        ArtifactJob { attempt: o.id.attempt, job: o.id.job, rule: o.rule.clone(), wildcards: o.wildcards.clone() }
    }
}

impl ArtifactEntry {
    pub fn from_record(a: &ArtifactRecord, job: Option<&cairn_core::job::JobOrigin>) -> ArtifactEntry {
        ArtifactEntry {
            job: job.map(ArtifactJob::from_core),
            link: a.artifact.link.clone(),
            step_id: a.step_id.clone(),
            name: a.artifact.name.clone(),
            path: a.artifact.path.clone(),
            bytes: a.artifact.bytes,
            sha256: a.artifact.sha256.clone(),
            attempt: a.attempt,
            reused_from: a.reused_from.as_deref().map(str::to_string),
        }
    }
}

/// A run's artifacts (`cairn artifacts RUN`, `GET /runs/{id}/artifacts`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ArtifactList {
    pub run_id: String,
    pub artifacts: Vec<ArtifactEntry>,
}

impl ArtifactList {
    pub fn from_engine(a: &RunArtifacts) -> ArtifactList {
        ArtifactList {
            run_id: a.run_id.to_string(),
            artifacts: a
                .artifacts
                .iter()
                .zip(a.writers.iter().map(Option::as_ref).chain(std::iter::repeat(None)))
                .map(|(r, job)| ArtifactEntry::from_record(r, job))
                .collect(),
        }
    }
}

/// One recorded artifact of the traced bytes.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TraceMatch {
    pub run_id: String,
    pub step_id: String,
    pub attempt: u32,
    pub workflow: String,
    pub version: String,
    pub name: String,
    /// Relative to the run directory.
    pub path: String,
    pub bytes: u64,
    /// For a reused artifact: the run whose attempt produced the bytes.
    pub reused_from: Option<String>,
    /// `{tool, tool_digest, args_hash}` of the step that recorded it.
    #[schema(value_type = Option<Object>)]
    pub signature: Option<Value>,
    /// For a reused artifact, the runs it came through: this run's source first, the producer last.
    pub lineage: Vec<String>,
    pub recorded_at: String,
    /// For a pipeline step's artifact: the job that wrote these bytes, then the jobs behind its
    /// inputs, back to the pipeline's own files, each input with its SHA-256 and the job that
    /// wrote it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<TraceJob>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TraceJob {
    pub attempt: u32,
    pub job: u64,
    pub rule: String,
    pub wildcards: std::collections::BTreeMap<String, String>,
    pub inputs: Vec<TraceInput>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TraceInput {
    /// Relative to the pipeline's working copy.
    pub path: String,
    /// As the job that wrote it recorded it, or as the pipeline's folder was registered.
    pub sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<super::JobId>,
}

/// Which runs recorded a file's bytes (`cairn trace FILE`, `GET /artifacts?sha256=`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TraceResult {
    pub sha256: String,
    /// Oldest first.
    pub matches: Vec<TraceMatch>,
}

impl TraceResult {
    pub fn from_engine(t: &Trace) -> TraceResult {
        TraceResult {
            sha256: t.sha256.clone(),
            matches: t
                .matches
                .iter()
                .map(|m| TraceMatch {
                    run_id: m.record.run_id.to_string(),
                    step_id: m.record.step_id.clone(),
                    attempt: m.record.attempt,
                    workflow: m.workflow.clone(),
                    version: m.version.clone(),
                    name: m.record.artifact.name.clone(),
                    path: m.record.artifact.path.clone(),
                    bytes: m.record.artifact.bytes,
                    reused_from: m.record.reused_from.as_deref().map(str::to_string),
                    signature: m.signature.as_ref().map(super::to_value),
                    lineage: m.lineage.iter().map(ToString::to_string).collect(),
                    recorded_at: time(m.record.recorded_at),
                    jobs: m
                        .jobs
                        .iter()
                        .map(|l| TraceJob {
                            attempt: l.job.id.attempt,
                            job: l.job.id.job,
                            rule: l.job.rule.clone(),
                            wildcards: l.job.wildcards.clone(),
                            inputs: l
                                .inputs
                                .iter()
                                .map(|i| TraceInput {
                                    path: i.path.clone(),
                                    sha256: i.sha256.clone(),
                                    from: i.from.map(|f| super::JobId { attempt: f.attempt, job: f.job }),
                                })
                                .collect(),
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

/// One step whole (`cairn result RUN STEP`, `GET /runs/{id}/steps/{step}`, MCP
/// `get_step_result`): the step's fields as a run carries them, its result never cut.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct StepDetail {
    pub run_id: String,
    #[serde(flatten)]
    pub step: StepResult,
}

impl StepDetail {
    pub fn from_engine(d: &cairn_engine::StepDetail) -> StepDetail {
        StepDetail { run_id: d.run_id.to_string(), step: step_fields(d.decision.as_ref(), &d.step, usize::MAX) }
    }
}

/// The most of a step's result a run (or a list of runs) carries.
pub const RESULT_PREVIEW_BYTES: usize = 64 << 10;

/// A result bounded to `limit` bytes of JSON text: the value itself when it fits, else the
/// first `limit` bytes of its text (cut at a character boundary); whether it was cut; its size.
fn bounded(result: &Value, limit: usize) -> (Value, bool, usize) {
    let text = result.to_string();
    let bytes = text.len();
    if bytes <= limit {
        return (result.clone(), false, bytes);
    }
    (Value::String(cairn_core::canonical::prefix_within(&text, limit).to_string()), true, bytes)
}

/// A replay child's record as a run's answer gives it: whole when every step is shown; of a page
/// of a larger child, its lists and decisions restricted to the page's steps (a 100,000-step
/// child's would otherwise fill the answer), with each list's full length.
fn replay_shown(r: &cairn_core::replay::ReplayRecord, view: &RunView) -> Value {
    if view.shown.returned >= view.counts.total {
        return super::to_value(r);
    }
    let on_page: std::collections::HashSet<&str> = view.steps.iter().map(|s| s.step_id.as_str()).collect();
    let keep = |ids: &[String]| ids.iter().filter(|id| on_page.contains(id.as_str())).cloned().collect::<Vec<_>>();
    let decisions: Vec<&DecisionRecord> = r.decisions.iter().filter(|d| on_page.contains(d.step_id.as_str())).collect();
    let summary = &r.summary;
    serde_json::json!({
        "source_run_id": summary.source_run_id,
        "requested": summary.requested,
        "replayed": keep(&summary.replayed),
        "reused": keep(&summary.reused),
        "invalidated": keep(&summary.invalidated),
        "decisions": decisions,
        "paged": true,
        "counts": {
            "replayed": summary.replayed.len(),
            "reused": summary.reused.len(),
            "invalidated": summary.invalidated.len(),
        },
    })
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
    /// Its steps in execution order: every one for a run of up to 1,000 steps (or with
    /// `steps_limit` large enough), else the page `steps_page` describes.
    pub steps: Vec<StepResult>,
    /// How many of all its steps are in each status, whatever page `steps` holds.
    #[serde(default)]
    pub step_counts: StepCounts,
    /// Which of its steps `steps` holds, and where the next page starts.
    #[serde(default)]
    pub steps_page: StepsPage,
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
    /// How many steps may execute at once (`--parallel`), as submitted.
    #[serde(default = "serial")]
    pub parallel: u32,
    /// For a replay child: the source run, the requested, replayed, reused and invalidated steps
    /// and every decision with its reason. When `steps` is a page of a larger run, the lists and
    /// decisions hold that page's steps only (`paged: true`), and `counts` has each list's length
    /// over every step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub replay: Option<Value>,
    /// The runs it was replayed from, nearest first (empty unless it is a replay child).
    #[serde(default)]
    pub lineage: Vec<LineageEntry>,
    /// How and when its plan was approved; null for a run submitted without a plan.
    #[serde(default)]
    pub approval: Option<ApprovalView>,
    /// While it is open: the daemon that drives it (holds its lease), and whether that lease
    /// expired with no daemon taking it yet (then, for a run whose files are on one host, the host
    /// whose daemon it waits for). Absent for a finished run, and for one run in-process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<RunLease>,
    /// While its daemon holds it waiting for its environment (the registry cannot be written, its
    /// target reached): why, since when, and when it is tried again. It continues by itself once
    /// the fault clears. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<RunWaiting>,
    /// The principal that submitted it (for a planned run, that executed its plan); absent
    /// for a run submitted before principals were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitted_by: Option<String>,
    /// The principal that cancelled it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled_by: Option<String>,
}

/// How many of a run's steps are in each status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct StepCounts {
    pub total: usize,
    /// Not started yet.
    pub pending: usize,
    pub running: usize,
    pub completed: usize,
    pub failed: usize,
}

impl StepCounts {
    pub fn from_engine(c: &cairn_engine::StepCounts) -> StepCounts {
        StepCounts { total: c.total, pending: c.pending, running: c.running, completed: c.completed, failed: c.failed }
    }
}

impl StepsPage {
    pub fn from_engine(shown: &cairn_engine::StepsShown) -> StepsPage {
        StepsPage {
            offset: shown.query.offset,
            limit: shown.query.limit,
            matched: shown.matched,
            returned: shown.returned,
            next_offset: shown.next_offset(),
            status: shown.query.statuses.iter().map(|s| s.to_string()).collect(),
            attention_first: shown.query.attention_first,
        }
    }
}

/// A run's DAG by layers, each with its steps' counts by status.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunLayers {
    pub run_id: String,
    /// How many layers the DAG has.
    pub total: usize,
    pub offset: usize,
    pub layers: Vec<RunLayer>,
}

/// One layer of a run's DAG: the steps that need none (layer 0), or whose deepest need is in
/// the layer before.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunLayer {
    pub layer: usize,
    pub step_counts: StepCounts,
    /// Its first steps (at most 3), in the DAG's order; `?steps_layer=` pages all of them.
    pub first: Vec<String>,
}

impl RunLayers {
    pub fn from_engine(l: &cairn_engine::RunLayers) -> RunLayers {
        RunLayers {
            run_id: l.run_id.to_string(),
            total: l.total,
            offset: l.offset,
            layers: l
                .layers
                .iter()
                .map(|x| RunLayer {
                    layer: x.layer,
                    step_counts: StepCounts::from_engine(&x.counts),
                    first: x.first.clone(),
                })
                .collect(),
        }
    }
}

/// Which of a run's steps an answer holds: `returned` of the `matched` steps (every step, or
/// those of the statuses asked for), from `offset`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct StepsPage {
    pub offset: usize,
    /// The most asked for; null: every one.
    pub limit: Option<usize>,
    pub matched: usize,
    pub returned: usize,
    /// Where the next page starts (`steps_offset`), or null when this is the last.
    pub next_offset: Option<usize>,
    /// The statuses asked for (`steps_status`); empty: every status.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub status: Vec<String>,
    /// Whether failed and running steps come first (`steps_order=attention`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub attention_first: bool,
}

/// Why and since when a run waits for its environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RunWaiting {
    /// The failure's code: `database`, `io` or `target_unreachable`.
    pub code: String,
    /// What failed, as the failure said it.
    pub reason: String,
    /// When it began to wait.
    pub since: String,
    /// How many times it was tried since.
    pub tries: u32,
    /// When it is tried next.
    pub next_try_at: String,
}

impl RunWaiting {
    pub fn from_core(w: &cairn_core::waiting::Waiting) -> RunWaiting {
        RunWaiting {
            code: w.code.clone(),
            reason: w.reason.clone(),
            since: time(w.since),
            tries: w.tries,
            next_try_at: time(w.next_try_at),
        }
    }
}

/// Which daemon drives an open run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RunLease {
    /// The daemon holding the lease (`GET /daemons` lists the live ones).
    pub daemon: String,
    /// Its host, when the registry knows it.
    pub host: Option<String>,
    /// Incremented each time another daemon takes the run over.
    pub epoch: i64,
    /// Until when, unless its daemon renews it.
    pub expires_at: Option<String>,
    /// It expired (its daemon stopped renewing it) and no daemon has taken the run yet.
    pub expired: bool,
    /// Expired, and its files are on this host: only a daemon of that host takes it over.
    pub waits_for_host: Option<String>,
}

/// How and when a run's plan was approved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ApprovalView {
    /// `elicitation` (an MCP form the person answered), `input_required` (an MCP multi round-trip
    /// request), `host` (the MCP host's own tool-call confirmation), `cli` (`cairn execute-plan`),
    /// `api` (a direct API call); `unrecorded` for a run approved before Cairn kept it.
    pub channel: String,
    pub at: String,
    /// The principal that approved (executed) the plan; absent before principals were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// The principal that made the plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_by: Option<String>,
}

impl RunResult {
    /// Whether the run has ended (a status this build does not know counts as not ended).
    pub fn has_ended(&self) -> bool {
        self.status.parse::<cairn_core::status::RunStatus>().is_ok_and(|s| s.is_terminal())
    }

    pub fn from_view(view: &RunView) -> RunResult {
        let run = &view.run;
        // A replay child's decisions by step, looked up once each (a 100,000-step child would
        // otherwise scan them all for every step).
        let decisions: std::collections::HashMap<&str, &DecisionRecord> =
            run.replay.iter().flat_map(|r| r.decisions.iter().map(|d| (d.step_id.as_str(), d))).collect();
        RunResult {
            run_id: run.run_id.to_string(),
            workflow: run.workflow.clone(),
            version: run.version.clone(),
            status: run.status.to_string(),
            steps: view
                .steps
                .iter()
                .map(|s| step_fields(decisions.get(s.step_id.as_str()).copied(), s, RESULT_PREVIEW_BYTES))
                .collect(),
            step_counts: StepCounts::from_engine(&view.counts),
            steps_page: StepsPage::from_engine(&view.shown),
            findings: run.findings.iter().map(super::to_value).collect(),
            error: run.error.clone(),
            run_dir: run.run_dir.clone(),
            created_at: time(run.created_at),
            finished_at: run.finished_at.map(time),
            thread_id: run.thread_id.clone(),
            target: view.target.clone(),
            parallel: run.parallelism,
            replay: run.replay.as_ref().map(|r| replay_shown(r, view)),
            lineage: view.lineage.iter().map(lineage_entry).collect(),
            approval: view.approval.as_ref().map(|a| ApprovalView {
                channel: a.channel.clone(),
                at: time(a.at),
                by: a.by.clone(),
                planned_by: a.planned_by.clone(),
            }),
            submitted_by: run.submitted_by.clone(),
            cancelled_by: run.cancelled_by.clone(),
            lease: view.lease.as_ref().map(|l| RunLease {
                daemon: l.daemon.clone(),
                host: l.host.clone(),
                epoch: l.epoch,
                expires_at: l.expires_at.map(time),
                expired: l.expired,
                waits_for_host: l.waits_for_host.clone(),
            }),
            waiting: view.waiting.as_ref().map(RunWaiting::from_core),
        }
    }
}

fn lineage_entry(r: &RunRecord) -> LineageEntry {
    LineageEntry {
        run_id: r.run_id.to_string(),
        workflow: r.workflow.clone(),
        version: r.version.clone(),
        status: r.status.to_string(),
    }
}

fn step_fields(decision: Option<&DecisionRecord>, s: &StepView, limit: usize) -> StepResult {
    let r = s.record.as_ref();
    let (result, result_truncated, result_bytes) = match r.and_then(|r| r.result.as_ref()) {
        Some(v) => {
            let (v, cut, n) = bounded(v, limit);
            (Some(v), cut, n)
        }
        None => (None, false, 0),
    };
    StepResult {
        result,
        result_truncated,
        result_bytes,
        artifacts: s
            .artifacts
            .iter()
            .map(|a| {
                ArtifactEntry::from_record(
                    a,
                    s.writer_of(&a.artifact.name).map(cairn_core::job::JobOrigin::of).as_ref(),
                )
            })
            .collect(),
        step_id: s.step_id.clone(),
        status: s.status().to_string(),
        attempts: r.map(|r| r.attempt_count).unwrap_or(0),
        reused: r.is_some_and(|r| r.reused_from.is_some()),
        outcome: r.and_then(|r| r.outcome).map(|o| o.to_string()),
        duration_ms: r.and_then(|r| r.duration_us).map(|us| us as f64 / 1000.0),
        error: r.and_then(|r| r.error.clone()),
        cause: r.and_then(|r| r.cause.as_ref()).map(StepCause::from_core),
        decision: decision.map(|d| d.decision.as_str().to_string()),
        reason: decision.map(|d| d.text.clone()),
        jobs: s.progress.as_ref().map(JobsProgress::from_core),
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
    /// How many steps may execute at once (`--parallel`), as submitted.
    #[serde(default = "serial")]
    pub parallel: u32,
    /// While its daemon holds it waiting for its environment (see `RunResult.waiting`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<RunWaiting>,
}

fn local() -> String {
    cairn_core::target::LOCAL.to_string()
}

fn serial() -> u32 {
    1
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
                        run_id: r.run_id.to_string(),
                        workflow: r.workflow.clone(),
                        version: r.version.clone(),
                        status: r.status.to_string(),
                        created_at: time(r.created_at),
                        finished_at: r.finished_at.map(time),
                        findings: r.findings.len(),
                        error: r.error.clone(),
                        source_run_id: r.source_run_id.as_deref().map(str::to_string),
                        target: l.target.clone(),
                        parallel: r.parallelism,
                        waiting: l.waiting.as_ref().map(RunWaiting::from_core),
                    }
                })
                .collect(),
        }
    }
}

/// Every attempt of a run on its time axis (`GET /runs/{id}/timeline`, `cairn show --timeline`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunTimeline {
    pub run_id: String,
    /// When the run was created: 0 on the axis.
    pub started_at: String,
    /// Milliseconds from `started_at` to the run's end (or to the last attempt so far).
    pub length_ms: i64,
    /// `null` while the run is not finished.
    pub finished_ms: Option<i64>,
    /// The attempts in the order they started (of the steps of `steps_page`).
    pub attempts: Vec<TimelineAttempt>,
    /// How many of all the run's steps are in each status.
    #[serde(default)]
    pub step_counts: StepCounts,
    /// Whose attempts `attempts` holds: every step's for a run of up to 1,000 steps, else a page
    /// of its steps (`?steps_offset=&steps_limit=`, as `GET /runs/{id}` pages them).
    #[serde(default)]
    pub steps_page: StepsPage,
}

/// One attempt of a step, or a step a replay reused (attempt 0, a point).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TimelineAttempt {
    pub step_id: String,
    pub attempt: u32,
    /// Milliseconds from the run's start.
    pub start_ms: i64,
    /// `null` while it runs.
    pub end_ms: Option<i64>,
    /// completed, failed, retrying, interrupted, cancelled, running or reused.
    pub end: String,
    /// The tool's own time as the attempt recorded it, when it ended.
    pub duration_ms: Option<f64>,
}

impl RunTimeline {
    pub fn from_engine(
        run_id: &str,
        (t, counts, shown): &(cairn_core::timeline::Timeline, cairn_engine::StepCounts, cairn_engine::StepsShown),
    ) -> RunTimeline {
        RunTimeline {
            step_counts: StepCounts::from_engine(counts),
            steps_page: StepsPage::from_engine(shown),
            run_id: run_id.to_string(),
            started_at: time(t.origin_ms),
            length_ms: t.length_ms(),
            finished_ms: t.finished_ms,
            attempts: t
                .spans
                .iter()
                .map(|s| TimelineAttempt {
                    step_id: s.step_id.clone(),
                    attempt: s.attempt,
                    start_ms: s.start_ms,
                    end_ms: s.end_ms,
                    end: s.end.as_str().to_string(),
                    duration_ms: s.duration_us.map(|us| us as f64 / 1000.0),
                })
                .collect(),
        }
    }
}

/// The `waiting` message of a run's event stream (`event: waiting`): its wait for its environment
/// began, was tried again in vain, or ended. Not an event of its log (the registry may be what
/// failed); the log gets `run.waiting` and `run.continued` once it can be written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WaitingNotice {
    /// Always `waiting`: what tells this message from an event.
    pub notice: NoticeKind,
    /// The wait now; null once it ended and the run goes on.
    pub waiting: Option<RunWaiting>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum NoticeKind {
    Waiting,
}

impl WaitingNotice {
    pub fn of(waiting: Option<&cairn_core::waiting::Waiting>) -> WaitingNotice {
        WaitingNotice { notice: NoticeKind::Waiting, waiting: waiting.map(RunWaiting::from_core) }
    }
}

/// One message of a followed run's stream: an event of its log, or a change of its wait.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Followed {
    Waiting(WaitingNotice),
    Event(Event),
}

impl Followed {
    /// The message one line of the API's event stream carries (`data: {…}`), if it carries one.
    pub fn of_sse_line(line: &str) -> Option<Followed> {
        serde_json::from_str(line.strip_prefix("data:")?.trim_start()).ok()
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
    /// The event one line of the API's event stream carries (`data: {…}`), if it carries one.
    pub fn of_sse_line(line: &str) -> Option<Event> {
        serde_json::from_str(line.strip_prefix("data:")?.trim_start()).ok()
    }

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
    /// A pipeline step's jobs by rule: how many it ran and why (Snakemake's reasons, by kind), how
    /// many a replay carried over; absent for a step that is not a pipeline.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<super::jobs::RuleJobs>,
}

impl Explanation {
    pub fn from_engine(e: &StepExplanation) -> Explanation {
        Explanation {
            run_id: e.run_id.to_string(),
            step_id: e.step_id.clone(),
            status: e.status.to_string(),
            attempts: e.attempts,
            decision: e.decision.clone(),
            reason: e.reason.clone(),
            text: e.text.clone(),
            reused_from: e.reused_from.as_deref().map(str::to_string),
            signature: e.signature.as_ref().map(super::to_value),
            outcome: e.outcome.map(|o| o.to_string()),
            error: e.error.clone(),
            jobs: e.jobs.iter().map(super::jobs::RuleJobs::from_core).collect(),
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
            run_id: l.run_id.into_string(),
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
    /// For each pipeline step it would re-execute here: the jobs Snakemake would run, by rule and
    /// reason (`snakemake --dry-run` in a scratch copy seeded as the replay would seed it), or a
    /// note saying why not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<PredictedJobs>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PredictedJobs {
    pub step_id: String,
    pub rules: Vec<super::RuleJobs>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl ReplayPreview {
    pub fn from_prepared(p: &cairn_engine::replay::PreparedReplay) -> ReplayPreview {
        ReplayPreview {
            dry_run: true,
            source_run_id: p.source.run_id.to_string(),
            workflow: p.workflow.spec().name.clone(),
            version: p.workflow.spec().version.clone(),
            replay: super::to_value(&p.summary),
            decisions: super::to_value(&p.record().decisions),
            jobs: Vec::new(),
        }
    }

    pub fn with_jobs(mut self, jobs: &[cairn_engine::JobPrediction]) -> ReplayPreview {
        self.jobs = ReplayPreview::predicted(jobs);
        self
    }

    /// Each pipeline step's predicted jobs, as the wire gives them.
    pub fn predicted(jobs: &[cairn_engine::JobPrediction]) -> Vec<PredictedJobs> {
        jobs.iter()
            .map(|j| PredictedJobs {
                step_id: j.step_id.clone(),
                rules: j.rules.iter().map(super::RuleJobs::from_core).collect(),
                note: j.note.clone(),
            })
            .collect()
    }
}

/// Where a run's RO-Crate was written (`cairn export RUN`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ExportResult {
    /// The run exported (absent for a verification).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The verification exported (absent for a run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verification_id: Option<String>,
    /// The crate directory, or the zip file.
    pub path: String,
    pub files: usize,
    pub bytes: u64,
    /// Artifacts copied into the crate (0 with `--no-data`).
    pub artifacts: usize,
    /// Input files copied into the crate (0 with `--no-data`).
    pub input_files: usize,
}

impl ExportResult {
    pub fn from_engine(r: &cairn_engine::ExportResult) -> ExportResult {
        let (run_id, verification_id) = match &r.subject {
            cairn_engine::ExportSubject::Run(id) => (Some(id.to_string()), None),
            cairn_engine::ExportSubject::Verification(id) => (None, Some(id.clone())),
        };
        ExportResult {
            run_id,
            verification_id,
            path: r.path.display().to_string(),
            files: r.files,
            bytes: r.bytes,
            artifacts: r.artifacts,
            input_files: r.input_files,
        }
    }
}

/// A slice of one artifact's bytes, read where it lies (`GET
/// /runs/{id}/steps/{step}/artifacts/{name}`, MCP `read_artifact`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ArtifactSlice {
    pub run_id: String,
    pub step_id: String,
    /// The declared output's name.
    pub name: String,
    /// Relative to the run directory.
    pub path: String,
    /// Where it was read: `local` or the run's target (over SSH, nothing copied back).
    pub target: String,
    /// Its recorded size and SHA-256.
    pub size: u64,
    pub sha256: String,
    /// Its size where it lies now (not `size`: it changed since it was recorded).
    pub size_now: u64,
    pub offset: u64,
    /// Bytes in this slice (at most 262,144).
    pub length: u64,
    /// Whether the slice reaches the end of the file.
    pub eof: bool,
    /// `text` (the slice is UTF-8) or `base64`.
    pub encoding: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base64: Option<String>,
}

impl ArtifactSlice {
    pub fn from_engine(s: &cairn_engine::ArtifactSlice) -> ArtifactSlice {
        use base64::Engine as _;
        // Text is UTF-8 without NUL bytes (as git tells text from binary); the rest is base64.
        let (encoding, text, base64) = match std::str::from_utf8(&s.bytes) {
            Ok(t) if !t.contains('\0') => ("text", Some(t.to_string()), None),
            _ => ("base64", None, Some(base64::engine::general_purpose::STANDARD.encode(&s.bytes))),
        };
        ArtifactSlice {
            run_id: s.record.run_id.to_string(),
            step_id: s.record.step_id.clone(),
            name: s.record.artifact.name.clone(),
            path: s.record.artifact.path.clone(),
            target: s.target.clone(),
            size: s.record.artifact.bytes,
            sha256: s.record.artifact.sha256.clone(),
            size_now: s.size_now,
            offset: s.offset,
            length: s.bytes.len() as u64,
            eof: s.eof(),
            encoding: encoding.into(),
            text,
            base64,
        }
    }
}
