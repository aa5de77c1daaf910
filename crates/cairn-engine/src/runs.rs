//! Reading runs: one run with its steps in the DAG's order and its lineage, the run list, the
//! event log, why a step was executed or reused, and a step's log tail. Every surface (the CLI,
//! the HTTP API and through it MCP and the web app) answers from these, so they show the same
//! fields.

use std::collections::HashMap;

use cairn_core::artifact::ArtifactRecord;
use cairn_core::event::RunEvent;
use cairn_core::ids::RunId;
use cairn_core::replay::DecisionRecord;
use cairn_core::signature::StepSignature;
use cairn_core::status::{Outcome, RunStatus, StepStatus};
use cairn_core::store::{
    EventRecord, LeasedRun, RunQuery, RunRecord, STEP_STATUSES, StepCounts, StepQuery, StepRecord,
};
use serde_json::{Value, json};

use crate::{Engine, EngineError};

/// A run as every surface shows it: its record, its steps in execution order, where it
/// executes, and the chain of runs it was replayed from.
#[derive(Debug, Clone)]
pub struct RunView {
    pub run: RunRecord,
    /// The steps asked for ([`StepQuery`]), in the DAG's order (failed and running first, if
    /// asked): every step unless a page was asked for.
    pub steps: Vec<StepView>,
    /// How many of all its steps are in each status.
    pub counts: StepCounts,
    /// Which of its steps `steps` holds.
    pub shown: StepsShown,
    /// Where it executes: `local`, or the target its plan named.
    pub target: String,
    /// The source runs above it, nearest first (empty unless it is a replay child).
    pub lineage: Vec<RunRecord>,
    /// How and when its plan was approved; `None` for a run submitted without a plan.
    pub approval: Option<cairn_core::plan::Approval>,
    /// Which daemon drives it, while it is open and leased.
    pub lease: Option<LeaseView>,
    /// While its daemon holds it waiting for its environment: why, since when, the next try.
    pub waiting: Option<cairn_core::waiting::Waiting>,
}

/// The page a surface shows when none is asked for: a run up to this size shows every step,
/// as it always did; a larger one its first page, saying so.
pub const STEPS_PAGE_DEFAULT: usize = 1000;

/// The most steps one answer holds (`steps_limit`).
pub const STEPS_LIMIT_MAX: usize = 10_000;

/// The first [`STEPS_PAGE_DEFAULT`] steps: what a surface shows unless asked otherwise.
pub fn first_steps() -> StepQuery {
    StepQuery { limit: Some(STEPS_PAGE_DEFAULT), ..StepQuery::default() }
}

/// A page as a request gives it (`steps_offset`, `steps_limit`, `steps_status`, `steps_order`),
/// checked alike on every surface: the first [`STEPS_PAGE_DEFAULT`] steps unless asked otherwise.
pub fn requested_steps(
    offset: Option<usize>,
    limit: Option<usize>,
    status: Option<&str>,
    order: Option<&str>,
    layer: Option<usize>,
) -> Result<StepQuery, EngineError> {
    let limit = EngineError::in_range("steps_limit", limit.unwrap_or(STEPS_PAGE_DEFAULT), 1..=STEPS_LIMIT_MAX, "")?;
    let attention_first = match order.map(str::trim) {
        None | Some("" | "dag") => false,
        Some("attention") => true,
        Some(other) => {
            return Err(EngineError::invalid_field(
                "steps_order",
                format!(
                    "steps_order `{other}` is not known; use `dag` (the DAG's order) or `attention` (failed, then running, first)"
                ),
            ));
        }
    };
    Ok(StepQuery {
        offset: offset.unwrap_or(0),
        limit: Some(limit),
        statuses: status.map(step_statuses).transpose()?.unwrap_or_default(),
        attention_first,
        ids: Vec::new(),
        layer,
    })
}

/// A run status to list runs by (`GET /runs?status=`, MCP `list_runs`, `cairn runs --status`),
/// checked alike on every surface.
pub fn run_status_filter(text: &str) -> Result<RunStatus, EngineError> {
    text.parse().map_err(|e| EngineError::invalid_field("status", format!("status: {e}")))
}

/// The most events one answer holds when a limit is asked for (`GET /runs/{id}/events?limit=`).
pub const EVENTS_LIMIT_MAX: usize = 10_000;

/// The most layers one answer holds (`GET /runs/{id}/layers?limit=`).
pub const LAYERS_LIMIT_MAX: usize = 10_000;

/// A run's DAG by layers, each with its steps' counts by status: a page of its layers.
#[derive(Debug, Clone)]
pub struct RunLayers {
    pub run_id: RunId,
    pub layers: Vec<cairn_core::store::LayerCounts>,
    /// How many layers the DAG has.
    pub total: usize,
    pub offset: usize,
}

/// `FAILED,RUNNING` (any case, comma-separated) as statuses to filter by.
pub fn step_statuses(text: &str) -> Result<Vec<&'static str>, EngineError> {
    let mut statuses = Vec::new();
    for given in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let status = STEP_STATUSES.iter().find(|s| s.eq_ignore_ascii_case(given)).ok_or_else(|| {
            EngineError::invalid_field(
                "steps_status",
                format!(
                    "steps_status `{given}` is not a step status; use one or more of {}, separated by commas",
                    STEP_STATUSES.join(", ")
                ),
            )
        })?;
        if !statuses.contains(status) {
            statuses.push(*status);
        }
    }
    Ok(statuses)
}

/// Which of a run's steps a view holds: the page asked for, and how many steps matched it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepsShown {
    pub query: StepQuery,
    /// How many steps matched the page's filter (all of them without one).
    pub matched: usize,
    /// How many steps the page holds.
    pub returned: usize,
}

impl StepsShown {
    fn of(query: &StepQuery, matched: usize, returned: usize) -> StepsShown {
        StepsShown { query: query.clone(), matched, returned }
    }

    /// Where the next page starts, if the page left matching steps out after it.
    pub fn next_offset(&self) -> Option<usize> {
        let next = self.query.offset + self.returned;
        (next < self.matched).then_some(next)
    }
}

/// The most step ids a "no such step" error lists.
const STEPS_NAMED_MAX: usize = 20;

/// An open run's lease: which daemon drives it, on which host, until when; or, its lease expired
/// with its files on a host no daemon of which has taken it, that it waits for one there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseView {
    pub daemon: String,
    /// The holder's host, when its daemon row is known.
    pub host: Option<String>,
    pub epoch: i64,
    pub expires_at: Option<i64>,
    /// Its lease expired (its holder stopped renewing it) and no daemon has taken it yet.
    pub expired: bool,
    /// Expired, with its files on this host: only a daemon of that host takes it over.
    pub waits_for_host: Option<String>,
}

#[derive(Debug, Clone)]
pub struct StepView {
    pub step_id: String,
    /// `None` when the step has no record yet (PENDING).
    pub record: Option<StepRecord>,
    /// The files its completed attempt produced (or, reused, its source's), by path.
    pub artifacts: Vec<ArtifactRecord>,
    /// A pipeline step's jobs, folded from its events (those of the run that ran it, for a step a
    /// replay reused); empty for any other step.
    pub jobs: Vec<cairn_core::job::Job>,
    /// Those jobs in numbers, with the controller's own count, once the step has any.
    pub progress: Option<cairn_core::job::JobsProgress>,
}

impl StepView {
    pub fn status(&self) -> &'static str {
        self.record.as_ref().map(|r| r.status.as_str()).unwrap_or("PENDING")
    }

    /// The job of this (pipeline) step that wrote an artifact, by the artifact's name (its path
    /// in the working copy).
    pub fn writer_of(&self, artifact_name: &str) -> Option<&cairn_core::job::Job> {
        cairn_core::job::writer_of(&self.jobs, artifact_name)
    }
}

impl RunView {
    /// The replay decision stored for a step, if the run is a replay child.
    pub fn decision_of(&self, step_id: &str) -> Option<&DecisionRecord> {
        self.run.replay.as_ref()?.decision(step_id)
    }

    pub fn step(&self, step_id: &str) -> Result<&StepView, EngineError> {
        self.steps.iter().find(|s| s.step_id == step_id).ok_or_else(|| {
            let mut steps: Vec<String> = self.steps.iter().take(STEPS_NAMED_MAX).map(|s| s.step_id.clone()).collect();
            if self.counts.total > STEPS_NAMED_MAX {
                let more = self.counts.total - STEPS_NAMED_MAX;
                steps.push(format!("… and {more} more (`cairn show {} --all`)", self.run.run_id));
            }
            EngineError::StepNotFound { run_id: self.run.run_id.to_string(), step_id: step_id.to_string(), steps }
        })
    }
}

/// A pipeline step's jobs, and how many of each rule's there are by status.
#[derive(Debug, Clone)]
pub struct StepJobs {
    pub run_id: RunId,
    pub step_id: String,
    pub status: &'static str,
    pub jobs: Vec<cairn_core::job::Job>,
    pub rules: Vec<cairn_core::job::RuleCount>,
    /// How many jobs the filter matched (`jobs` is the page of them it asked for).
    pub total: usize,
    /// The run whose controller ran them, for a step a replay reused.
    pub from_run: Option<RunId>,
}

/// Which of a step's jobs to answer with: of one rule, of one status, a page.
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    pub rule: Option<String>,
    /// `running`, `finished`, `failed`, `retrying`, `interrupted` or `carried`.
    pub status: Option<String>,
    pub offset: usize,
    pub limit: Option<usize>,
}

/// One step of a run.
#[derive(Debug, Clone)]
pub struct StepDetail {
    pub run_id: RunId,
    pub step: StepView,
    /// For a replay child: the decision stored for the step.
    pub decision: Option<DecisionRecord>,
}

/// One run of a list, with where it executes.
#[derive(Debug, Clone)]
pub struct RunListing {
    pub run: RunRecord,
    pub target: String,
    /// While its daemon holds it waiting for its environment.
    pub waiting: Option<cairn_core::waiting::Waiting>,
}

/// The events of a run after a sequence number, and whether the run had finished before they
/// were read (so a follower that got them all can stop).
#[derive(Debug, Clone)]
pub struct EventBatch {
    pub finished: bool,
    pub events: Vec<EventRecord>,
    /// It holds as many events as a batch may: more may follow at once.
    pub full: bool,
}

/// The most events a follower is given at once: following a 100,000-step run from its start
/// holds a batch, not the run's whole log.
const EVENT_BATCH: usize = 2000;

/// Why a step of a run was executed, reused or invalidated.
#[derive(Debug, Clone)]
pub struct StepExplanation {
    pub run_id: RunId,
    pub step_id: String,
    pub status: &'static str,
    pub attempts: u32,
    /// `reuse` or `replay` for a replay child, `execute` otherwise.
    pub decision: Value,
    /// The structured reason (`{kind, …}`).
    pub reason: Value,
    /// The reason in words.
    pub text: Value,
    pub reused_from: Option<RunId>,
    pub signature: Option<StepSignature>,
    pub outcome: Option<Outcome>,
    pub error: Option<String>,
    /// A pipeline step's jobs by rule: how many ran and why, how many a replay carried over.
    pub jobs: Vec<cairn_core::job::RuleCount>,
}

/// The bounded tail of a step's log: its stderr as its last attempt left it, or read live from
/// its target while it runs there.
#[derive(Debug, Clone)]
pub struct StepLog {
    pub run_id: RunId,
    pub step_id: String,
    pub status: &'static str,
    pub lines: Vec<String>,
    /// Whether earlier lines were left out.
    pub truncated: bool,
}

/// The most of a running step's output read from its target for one log request.
const LIVE_TAIL_BYTES: usize = 64 << 10;

impl Engine {
    pub(crate) fn run_record(&self, run_id: &RunId) -> Result<RunRecord, EngineError> {
        self.store.run(run_id)?.ok_or_else(|| EngineError::RunNotFound { run_id: run_id.to_string() })
    }

    /// One run: every step in the DAG's order of the version it ran, where it executes, and its
    /// lineage.
    pub fn show_run(&self, run_id: &RunId) -> Result<RunView, EngineError> {
        self.show_run_page(run_id, &StepQuery::every())
    }

    /// One run with the steps `query` asks for; its counts by status cover every step. Only
    /// the page's steps are read, so a 100,000-step run is shown as fast as a small one.
    pub fn show_run_page(&self, run_id: &RunId, query: &StepQuery) -> Result<RunView, EngineError> {
        // The run with its lease row, in one read.
        let leased =
            self.store.leased_run(run_id)?.ok_or_else(|| EngineError::RunNotFound { run_id: run_id.to_string() })?;
        let lease = if leased.run.status.is_terminal() { None } else { self.lease_view(&leased) };
        let run = leased.run;
        let page = self.store.step_page(run_id, query)?;
        let mut artifacts: HashMap<String, Vec<ArtifactRecord>> = HashMap::new();
        let found = if query.is_every() {
            self.store.artifacts(run_id)?
        } else {
            let ids: Vec<&str> = page.steps.iter().filter(|s| s.record.is_some()).map(|s| s.step_id.as_str()).collect();
            self.store.artifacts_of_steps(run_id, &ids)?
        };
        for a in found {
            artifacts.entry(a.step_id.clone()).or_default().push(a);
        }
        let mut events = RunEvents::new(self);
        let mut steps = Vec::with_capacity(page.steps.len());
        for s in page.steps {
            let (jobs, progress) = match &s.record {
                Some(r) if s.pipeline => {
                    let live = (r.status == StepStatus::Running).then_some(r.attempt_count);
                    let ran_in = r.reused_from.as_ref().unwrap_or(run_id);
                    let jobs = events.step_jobs(ran_in, &s.step_id, live, r.result.as_ref())?;
                    let progress = (!jobs.is_empty())
                        .then(|| cairn_core::job::progress(&jobs, events.of_step(ran_in, &s.step_id)));
                    (jobs, progress)
                }
                _ => (Vec::new(), None),
            };
            steps.push(StepView {
                artifacts: artifacts.remove(&s.step_id).unwrap_or_default(),
                record: s.record,
                step_id: s.step_id,
                jobs,
                progress,
            });
        }
        let target = self.target_name_of_run(run_id)?;
        let lineage = self.lineage_of(&run)?;
        let approval = self.store.approval_of_run(run_id)?;
        let waiting = self.waiting(run_id);
        let shown = StepsShown::of(query, page.matched, steps.len());
        Ok(RunView { run, steps, counts: page.counts, shown, target, lineage, approval, lease, waiting })
    }

    /// One step of a run as [`Engine::show_run`] shows it, without reading the others; refused,
    /// naming some of its steps, for a step the run does not have.
    fn show_one_step(&self, run_id: &RunId, step_id: &str) -> Result<RunView, EngineError> {
        let view = self.show_run_page(run_id, &StepQuery { ids: vec![step_id.to_string()], ..StepQuery::every() })?;
        if view.steps.is_empty() {
            let first =
                self.show_run_page(run_id, &StepQuery { limit: Some(STEPS_NAMED_MAX), ..StepQuery::every() })?;
            return Err(first.step(step_id).err().unwrap_or_else(|| EngineError::StepNotFound {
                run_id: run_id.to_string(),
                step_id: step_id.to_string(),
                steps: Vec::new(),
            }));
        }
        Ok(view)
    }

    /// The run's jobs of one step, read from a run's events (each run's read once).
    fn jobs_of_step(events: &[EventRecord], step_id: &str, live: Option<u32>) -> Vec<cairn_core::job::Job> {
        cairn_core::job::fold(
            events
                .iter()
                .filter(|e| e.step_id.as_deref() == Some(step_id))
                .filter_map(|e| Some(cairn_core::job::StepEvent { attempt: e.attempt?, at: e.at, event: &e.event })),
            live,
        )
    }

    /// An open run's lease as a person is shown it.
    fn lease_view(&self, leased: &LeasedRun) -> Option<LeaseView> {
        let lease = leased.lease.as_ref()?;
        let expired = cairn_core::lease::lapsed(leased, self.now_ms());
        Some(LeaseView {
            daemon: lease.daemon.clone(),
            host: leased.holder.as_ref().map(|h| h.host.clone()),
            epoch: lease.epoch,
            expires_at: leased.expires_at,
            expired,
            waits_for_host: if expired { leased.home_host.clone() } else { None },
        })
    }

    pub(crate) fn target_name_of_run(&self, run_id: &RunId) -> Result<String, EngineError> {
        Ok(self.store.target_of_run(run_id)?.unwrap_or_else(|| cairn_core::target::LOCAL.to_string()))
    }

    /// The chain of source runs above `run`, nearest first.
    pub(crate) fn lineage_of(&self, run: &RunRecord) -> Result<Vec<RunRecord>, EngineError> {
        let mut chain = Vec::new();
        let mut next = run.source_run_id.clone();
        while let Some(id) = next {
            // Source ids always exist (a foreign key) and never form a cycle (a source is older).
            let Some(source) = self.store.run(&id)? else { break };
            if chain.len() > 10_000 {
                break;
            }
            next = source.source_run_id.clone();
            chain.push(source);
        }
        Ok(chain)
    }

    /// The runs `query` selects, newest first, each with where it executes.
    pub fn list_runs(&self, query: &RunQuery<'_>) -> Result<Vec<RunListing>, EngineError> {
        Engine::check_run_query(query)?;
        self.store
            .runs(query)?
            .into_iter()
            .map(|run| {
                Ok(RunListing {
                    target: self.target_name_of_run(&run.run_id)?,
                    waiting: self.waiting(&run.run_id),
                    run,
                })
            })
            .collect()
    }

    /// Refuses a list request every surface must refuse alike: a limit out of range, a filter
    /// naming nothing. A follower checks it before its stream starts, where it could only end it.
    pub fn check_run_query(query: &RunQuery<'_>) -> Result<(), EngineError> {
        EngineError::in_range("limit", query.limit, 1..=crate::error::LIST_LIMIT_MAX, "")?;
        if query.workflow.is_some_and(|w| w.trim().is_empty()) {
            return Err(EngineError::invalid_field("workflow", "workflow must name a workflow; see GET /workflows"));
        }
        if query.source_run_id.is_some_and(|w| w.trim().is_empty()) {
            return Err(EngineError::invalid_field("source_run_id", "source_run_id must name a run; see GET /runs"));
        }
        Ok(())
    }

    /// Whether any run is pending or running (a follower of the run list keeps following).
    pub fn has_active_runs(&self) -> Result<bool, EngineError> {
        for status in [RunStatus::Pending, RunStatus::Running] {
            if !self.store.runs(&RunQuery { status: Some(status), ..RunQuery::newest(1) })?.is_empty() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The run's events after sequence number `after`, in order.
    pub fn events(&self, run_id: &RunId, after: i64) -> Result<Vec<EventRecord>, EngineError> {
        self.run_record(run_id)?;
        Ok(self.store.events(run_id, after)?)
    }

    /// A run's events after `after`, at most `limit` of them: the first ones, or with `newest`
    /// the newest ones (a huge run's log is read from where it ends).
    pub fn events_limited(
        &self,
        run_id: &RunId,
        after: i64,
        limit: Option<usize>,
        newest: bool,
    ) -> Result<Vec<EventRecord>, EngineError> {
        let Some(limit) = limit else { return self.events(run_id, after) };
        EngineError::in_range("limit", limit, 1..=EVENTS_LIMIT_MAX, "")?;
        self.run_record(run_id)?;
        if newest {
            let mut last = self.store.last_events(run_id, limit)?;
            last.retain(|e| e.seq > after);
            return Ok(last);
        }
        Ok(self.store.events_page(run_id, after, limit)?)
    }

    /// Layers `offset..offset+limit` of a run's DAG, each with its steps' counts by status.
    pub fn run_layers(&self, run_id: &RunId, offset: usize, limit: usize) -> Result<RunLayers, EngineError> {
        EngineError::in_range("limit", limit, 1..=LAYERS_LIMIT_MAX, "")?;
        let (layers, total) = self.store.layer_counts(run_id, offset, limit)?;
        Ok(RunLayers { run_id: run_id.clone(), layers, total, offset })
    }

    /// Every attempt of a run on its time axis, from its event log (`cairn show --timeline`,
    /// `GET /runs/{id}/timeline`, the web app's Gantt).
    pub fn timeline(&self, run_id: &RunId) -> Result<cairn_core::timeline::Timeline, EngineError> {
        Ok(self.timeline_page(run_id, &StepQuery::every())?.0)
    }

    /// The attempts of the steps `query` asks for on the run's time axis, with the run's counts
    /// and which steps they are: only those steps' events are read.
    pub fn timeline_page(
        &self,
        run_id: &RunId,
        query: &StepQuery,
    ) -> Result<(cairn_core::timeline::Timeline, StepCounts, StepsShown), EngineError> {
        if query.is_every() {
            if self.store.run_status(run_id)?.is_none() {
                return Err(EngineError::RunNotFound { run_id: run_id.to_string() });
            }
            let timeline = cairn_core::timeline::timeline(&self.store.events(run_id, 0)?);
            let counts = self.store.step_page(run_id, &StepQuery { limit: Some(0), ..StepQuery::every() })?.counts;
            return Ok((timeline, counts, StepsShown::of(query, counts.total, counts.total)));
        }
        let page = self.store.step_page(run_id, query)?;
        let ids: Vec<&str> = page.steps.iter().map(|s| s.step_id.as_str()).collect();
        let timeline = cairn_core::timeline::timeline(&self.store.events_of_steps(run_id, &ids)?);
        Ok((timeline, page.counts, StepsShown::of(query, page.matched, ids.len())))
    }

    /// For a follower: the run's events after `after`, and whether the run had finished. The
    /// status is read before the events, so a run that finished in between still has its
    /// `run.finished` in this batch.
    pub fn event_batch(&self, run_id: &RunId, after: i64) -> Result<EventBatch, EngineError> {
        let finished = self.store.run_status(run_id)?.is_none_or(|s| s.is_terminal());
        let events = self.store.events_page(run_id, after, EVENT_BATCH)?;
        Ok(EventBatch { finished, full: events.len() == EVENT_BATCH, events })
    }

    /// One step of a run, with its whole result and its artifacts.
    pub fn show_step(&self, run_id: &RunId, step_id: &str) -> Result<StepDetail, EngineError> {
        let view = self.show_one_step(run_id, step_id)?;
        let step = view.step(step_id)?.clone();
        let decision = view.decision_of(step_id).cloned();
        Ok(StepDetail { run_id: view.run.run_id, step, decision })
    }

    /// A pipeline step's jobs, folded from its events: those its controller ran in this run, or,
    /// for a step a replay reused, in the run that ran it (`from_run`). A step that is not a
    /// pipeline has none.
    pub fn pipeline_jobs(&self, run_id: &RunId, step_id: &str, filter: &JobFilter) -> Result<StepJobs, EngineError> {
        use cairn_core::job::JobStatus;
        let status = match filter.status.as_deref() {
            None => None,
            Some(s) => Some(JobStatus::parse(s).ok_or_else(|| {
                let names: Vec<&str> = JobStatus::ALL.iter().map(|j| j.as_str()).collect();
                EngineError::input(format!("status `{s}` is not a job status; use one of {}", names.join(", ")))
            })?),
        };
        let view = self.show_one_step(run_id, step_id)?;
        let step = view.step(step_id)?;
        let from_run = step.record.as_ref().and_then(|r| r.reused_from.clone());
        let jobs = step.jobs.clone();
        let rules = cairn_core::job::by_rule(&jobs);
        let matching: Vec<cairn_core::job::Job> = jobs
            .into_iter()
            .filter(|j| filter.rule.as_ref().is_none_or(|r| &j.rule == r))
            .filter(|j| status.is_none_or(|s| j.status == s))
            .collect();
        let total = matching.len();
        let jobs = matching.into_iter().skip(filter.offset).take(filter.limit.unwrap_or(usize::MAX)).collect();
        Ok(StepJobs {
            run_id: run_id.clone(),
            step_id: step_id.to_string(),
            status: step.status(),
            rules,
            jobs,
            total,
            from_run,
        })
    }

    /// Why a step of a run was executed, reused or invalidated.
    pub fn explain_step(&self, run_id: &RunId, step_id: &str) -> Result<StepExplanation, EngineError> {
        let view = self.show_one_step(run_id, step_id)?;
        let step = view.step(step_id)?;
        let r = step.record.as_ref();
        let (decision, reason, text) = match view.decision_of(step_id) {
            Some(d) => (json!(d.decision), json!(d.reason), json!(d.text)),
            None => (
                json!("execute"),
                json!({"kind": "not_a_replay"}),
                json!(match r {
                    Some(_) => "executed in this run (it is not a replay, so nothing was reused)",
                    None => "not started yet",
                }),
            ),
        };
        Ok(StepExplanation {
            run_id: view.run.run_id.clone(),
            step_id: step_id.to_string(),
            status: step.status(),
            attempts: r.map(|r| r.attempt_count).unwrap_or(0),
            decision,
            reason,
            text,
            reused_from: r.and_then(|r| r.reused_from.clone()),
            signature: r.map(|r| r.signature.clone()),
            outcome: r.and_then(|r| r.outcome),
            error: r.and_then(|r| r.error.clone()),
            jobs: cairn_core::job::by_rule(&step.jobs),
        })
    }

    /// The last `lines` lines of a step's log. A step running through the step agent is read
    /// where it runs: a bounded tail over SSH.
    pub fn step_log(&self, run_id: &RunId, step_id: &str, lines: usize) -> Result<StepLog, EngineError> {
        EngineError::in_range("lines", lines, 1..=crate::error::LOG_LINES_MAX, "")?;
        let view = self.show_one_step(run_id, step_id)?;
        let step = view.step(step_id)?;
        let record = step.record.as_ref();
        let live = record.and_then(|r| self.live_tail(r, LIVE_TAIL_BYTES));
        let tail = live.or_else(|| record.and_then(|r| r.log_tail.clone())).unwrap_or_default();
        let all: Vec<&str> = tail.lines().collect();
        let from = all.len().saturating_sub(lines);
        Ok(StepLog {
            run_id: run_id.clone(),
            step_id: step_id.to_string(),
            status: step.status(),
            lines: all[from..].iter().map(|l| l.to_string()).collect(),
            truncated: from > 0,
        })
    }

    /// The run reserved for `target + run_dir`, if any (one run per target and run_dir).
    pub fn reservation(&self, target: &str, run_dir: &str) -> Result<Option<RunId>, EngineError> {
        Ok(self.store.reservation(target, run_dir)?)
    }

    /// The process groups and supervised launches of a run's RUNNING steps.
    pub(crate) fn running_steps(&self, run_id: &RunId) -> Result<Vec<StepRecord>, EngineError> {
        Ok(self.store.steps(run_id)?.into_iter().filter(|s| s.status == StepStatus::Running).collect())
    }
}

/// The events of the runs a view reads jobs from, each run's read once and only when asked.
struct RunEvents<'e> {
    engine: &'e Engine,
    read: HashMap<RunId, Vec<EventRecord>>,
}

impl<'e> RunEvents<'e> {
    fn new(engine: &'e Engine) -> RunEvents<'e> {
        RunEvents { engine, read: HashMap::new() }
    }

    fn jobs_of(
        &mut self,
        run_id: &RunId,
        step_id: &str,
        live: Option<u32>,
    ) -> Result<Vec<cairn_core::job::Job>, EngineError> {
        if !self.read.contains_key(run_id) {
            self.read.insert(run_id.clone(), self.engine.store.events(run_id, 0)?);
        }
        Ok(Engine::jobs_of_step(&self.read[run_id], step_id, live))
    }

    /// The events of step `step_id` in `run_id`, in order, once `jobs_of` has read that run.
    fn of_step<'a>(&'a self, run_id: &str, step_id: &'a str) -> impl Iterator<Item = &'a RunEvent> + 'a {
        let events = self.read.get(run_id).map(Vec::as_slice).unwrap_or_default();
        events.iter().filter(move |e| e.step_id.as_deref() == Some(step_id)).map(|e| &e.event)
    }

    /// The jobs of a pipeline step that ran in `run_id`, with those its seeded working copy
    /// carried over (the step's result names the run it was seeded from; that run's step may have
    /// been seeded in turn, so the chain is followed back).
    fn step_jobs(
        &mut self,
        run_id: &RunId,
        step_id: &str,
        live: Option<u32>,
        result: Option<&Value>,
    ) -> Result<Vec<cairn_core::job::Job>, EngineError> {
        let seeded_from = |result: Option<&Value>| {
            result.and_then(|v| v.pointer("/seeded/from_run")).and_then(Value::as_str).map(RunId::lookup)
        };
        let mut jobs = self.jobs_of(run_id, step_id, live)?;
        let mut seen = vec![run_id.clone()];
        let mut next = seeded_from(result);
        while let Some(from) = next.take() {
            // Runs are older than their replays, so the chain ends; a damaged record must not loop.
            if seen.contains(&from) || seen.len() > 1000 {
                break;
            }
            let earlier = self.jobs_of(&from, step_id, None)?;
            jobs = cairn_core::job::with_carried(jobs, earlier, &from);
            let row = self.engine.store.steps(&from)?.into_iter().find(|s| s.step_id == step_id);
            next = seeded_from(row.as_ref().and_then(|r| r.result.as_ref()));
            seen.push(from);
        }
        Ok(jobs)
    }
}
