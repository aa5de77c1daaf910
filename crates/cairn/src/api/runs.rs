//! Runs: submit one (or a replay), list them (or follow the list), read one, its events (or
//! follow them), a step's log and explanation, and cancel one.

use axum::Extension;
use cairn_core::access::Caller;
use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use cairn_core::ids::RunId;
use cairn_core::status::RunStatus;
use cairn_core::store::RunQuery;
use cairn_engine::{CommitWatch, Engine, EngineError, Followed, RunFollower, Submitted};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use super::AppRef;
use super::http::{ApiError, ApiJson, ApiPath, ApiQuery, ErrorBody, blocking};
use crate::wire::{
    ArtifactList, ArtifactSlice, Event, EventList, Explanation, PipelineJobs, RunLayers, RunList, RunResult,
    RunTimeline, StepDetail, StepLog, SubmitRun, TraceResult, WaitingNotice,
};

/// An accepted run as an answer: 200 when it had finished already, else 202 with where to find it.
pub(super) fn run_answer(submitted: &Submitted) -> Response {
    let body = Json(RunResult::from_view(&submitted.view));
    if submitted.finished {
        return (StatusCode::OK, body).into_response();
    }
    let mut resp = (StatusCode::ACCEPTED, body).into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("/runs/{}", submitted.view.run.run_id)) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    resp
}

/// Creates the run (or finds it), queues it on the worker pool, and answers with its current
/// state: 202 while it runs, 200 when it had finished already.
#[utoipa::path(post, path = "/runs", tag = "runs", request_body = SubmitRun,
    responses(
        (status = 202, description = "Created (or found running) and queued", body = RunResult),
        (status = 200, description = "This run had finished already", body = RunResult),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, description = "Unknown workflow or source run", body = ErrorBody),
        (status = 409, description = "ExecutionInputMismatch, or the run executes elsewhere", body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn submit_run(
    State(state): State<AppRef>,
    Extension(caller): Extension<Caller>,
    ApiJson(body): ApiJson<SubmitRun>,
) -> Result<Response, ApiError> {
    blocking(move || Ok(run_answer(&state.service.submit_run(&caller, body.into_request())?))).await
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListRunsQuery {
    /// At most this many, newest first (1 to 1000, default 50).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
    /// Only runs with this status.
    #[param(pattern = "^(PENDING|RUNNING|READY|BLOCKED|FAILED|CANCELLED)$")]
    pub status: Option<String>,
    /// Only runs of this workflow (by name).
    #[param(min_length = 1)]
    pub workflow: Option<String>,
    /// Only the replays of this run.
    #[param(min_length = 1)]
    pub source_run_id: Option<String>,
    /// Stream the list as Server-Sent Events instead: now, and again after every change, until no
    /// run is pending or running (a client reconnects to watch for new runs).
    pub follow: Option<bool>,
}

/// Which runs `GET /runs` lists, checked.
#[derive(Clone)]
struct RunFilter {
    limit: usize,
    status: Option<RunStatus>,
    workflow: Option<String>,
    source_run_id: Option<RunId>,
}

impl RunFilter {
    fn of(q: ListRunsQuery) -> Result<RunFilter, ApiError> {
        let status = q.status.as_deref().map(cairn_engine::run_status_filter).transpose()?;
        let filter = RunFilter {
            limit: q.limit.unwrap_or(50),
            status,
            workflow: q.workflow,
            source_run_id: q.source_run_id.map(RunId::lookup),
        };
        // The engine's rule, checked before a follower's stream starts (where it could only end it).
        Engine::check_run_query(&filter.query())?;
        Ok(filter)
    }

    /// The list, and whether any run (listed or not) is pending or running.
    fn query(&self) -> RunQuery<'_> {
        RunQuery {
            limit: self.limit,
            status: self.status,
            workflow: self.workflow.as_deref(),
            source_run_id: self.source_run_id.as_ref(),
        }
    }

    fn read(&self, state: &AppRef) -> Result<(RunList, bool), ApiError> {
        let engine = state.service.engine();
        let runs = engine.list_runs(&self.query())?;
        Ok((RunList::from_listings(&runs), engine.has_active_runs()?))
    }
}

/// Runs, newest first; with `follow=true`, a Server-Sent Events stream of the list (`event` is
/// `runs`, `data` the list) that ends once no run is pending or running.
#[utoipa::path(get, path = "/runs", tag = "runs", params(ListRunsQuery),
    responses(
        (status = 200, description = "The runs (or, with follow=true, a stream of the list)", content(
            (RunList = "application/json"),
            (SseRunsSchema = "text/event-stream"))),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn list_runs(
    State(state): State<AppRef>,
    ApiQuery(q): ApiQuery<ListRunsQuery>,
) -> Result<Response, ApiError> {
    let follow = q.follow.unwrap_or(false);
    let filter = RunFilter::of(q)?;
    if !follow {
        let (list, _) = blocking(move || filter.read(&state)).await?;
        return Ok(Json(list).into_response());
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<SseEvent>(16);
    tokio::spawn(follow_runs(state, filter, tx));
    Ok(sse(rx))
}

/// An event stream fed by `rx`.
fn sse(rx: tokio::sync::mpsc::Receiver<SseEvent>) -> Response {
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<SseEvent, Infallible>(e), rx))
    });
    Sse::new(stream).keep_alive(KeepAlive::default()).into_response()
}

/// Waits for the engine's next commit (or its fallback look for other processes' writes); false
/// when the follower left or the daemon is stopping.
async fn next_change<T>(
    commits: &mut CommitWatch,
    closing: &mut tokio::sync::watch::Receiver<bool>,
    tx: &tokio::sync::mpsc::Sender<T>,
) -> bool {
    tokio::select! {
        _ = commits.next() => {}
        _ = closing.changed() => return false,
    }
    !(tx.is_closed() || *closing.borrow())
}

/// One Server-Sent Event of `GET /runs?follow=true`.
#[derive(ToSchema)]
#[schema(as = SseRuns)]
#[expect(dead_code, reason = "only describes the stream; axum's sse::Event writes it")]
pub struct SseRunsSchema {
    /// Always `runs`.
    pub event: String,
    /// The list as JSON (the `RunList` schema).
    #[schema(content_media_type = "application/json")]
    pub data: String,
}

/// Feeds a follower of the run list: the list now, then each changed list (woken by the engine's
/// commits), until no run is active, the follower leaves, or the daemon stops.
async fn follow_runs(state: AppRef, filter: RunFilter, tx: tokio::sync::mpsc::Sender<SseEvent>) {
    let mut commits = state.service.engine().commits();
    let mut closing = state.closing.clone();
    let mut last = String::new();
    loop {
        let (st, f) = (state.clone(), filter.clone());
        let Ok(Ok((list, active))) = tokio::task::spawn_blocking(move || f.read(&st)).await else { return };
        let data = serde_json::to_string(&list).unwrap_or_default();
        if data != last {
            if tx.send(SseEvent::default().event("runs").data(&data)).await.is_err() {
                return;
            }
            last = data;
        }
        if !active || !next_change(&mut commits, &mut closing, &tx).await {
            return;
        }
        // A step's end is several commits in a row: one list for all of them.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Which of a run's steps to answer with.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StepsQuery {
    /// Skip this many of the matching steps (default 0).
    pub steps_offset: Option<usize>,
    /// At most this many steps (1 to 10,000; default 1,000: a run up to that size answers with
    /// every step).
    pub steps_limit: Option<usize>,
    /// Only steps in these statuses, comma-separated: PENDING, RUNNING, COMPLETED, FAILED.
    pub steps_status: Option<String>,
    /// `dag` (default: the DAG's order) or `attention` (failed, then running steps first).
    pub steps_order: Option<String>,
    /// Only the steps of this layer of the DAG (`GET /runs/{id}/layers`).
    pub steps_layer: Option<usize>,
}

impl StepsQuery {
    pub fn page(&self) -> Result<cairn_engine::StepQuery, EngineError> {
        cairn_engine::requested_steps(
            self.steps_offset,
            self.steps_limit,
            self.steps_status.as_deref(),
            self.steps_order.as_deref(),
            self.steps_layer,
        )
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LayersQuery {
    /// The first layer (default 0).
    pub offset: Option<usize>,
    /// At most this many layers (1 to 10,000; default 1,000).
    pub limit: Option<usize>,
}

/// A run's DAG by layers (a step's layer is one more than its deepest need's), each with its
/// steps' counts by status and its first steps: how a graph of a huge run is drawn.
#[utoipa::path(get, path = "/runs/{run_id}/layers", tag = "runs", params(("run_id" = String, Path), LayersQuery),
    responses((status = 200, body = RunLayers), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn run_layers(
    State(state): State<AppRef>,
    ApiPath(run_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<LayersQuery>,
) -> Result<Json<RunLayers>, ApiError> {
    blocking(move || {
        let layers = state.service.engine().run_layers(
            &RunId::lookup(run_id),
            q.offset.unwrap_or(0),
            q.limit.unwrap_or(cairn_engine::STEPS_PAGE_DEFAULT),
        )?;
        Ok(Json(RunLayers::from_engine(&layers)))
    })
    .await
}

/// One run: status, its steps' counts by status and a page of its steps in execution order
/// (every step of a run up to 1,000 steps), findings, replay summary, lineage.
#[utoipa::path(get, path = "/runs/{run_id}", tag = "runs", params(("run_id" = String, Path), StepsQuery),
    responses((status = 200, body = RunResult), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 422, description = "A page parameter out of range", body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn get_run(
    State(state): State<AppRef>,
    ApiPath(run_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<StepsQuery>,
) -> Result<Json<RunResult>, ApiError> {
    blocking(move || {
        let view = state.service.engine().show_run_page(&RunId::lookup(run_id), &q.page()?)?;
        Ok(Json(RunResult::from_view(&view)))
    })
    .await
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Only events with a larger sequence number.
    pub after: Option<i64>,
    /// Stream events as Server-Sent Events until the run finishes.
    pub follow: Option<bool>,
    /// At most this many events (1 to 10,000; default: all of them), the first ones after `after`.
    pub limit: Option<usize>,
    /// With `limit`: the newest events instead (still oldest first), where a huge run's log ends.
    pub newest: Option<bool>,
}

/// The run's ordered event log; with `follow=true`, a Server-Sent Events stream (`id` is the
/// sequence number, `event` the kind, `data` the event) that ends after `run.finished`.
#[utoipa::path(get, path = "/runs/{run_id}/events", tag = "runs", params(("run_id" = String, Path), EventsQuery),
    responses(
        (status = 200, description = "The events (or, with follow=true, an event stream)", content(
            (EventList = "application/json"),
            (SseEventSchema = "text/event-stream"))),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, description = "`limit` out of range", body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn run_events(
    State(state): State<AppRef>,
    ApiPath(run_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<EventsQuery>,
) -> Result<Response, ApiError> {
    let after = q.after.unwrap_or(0);
    let run_id = RunId::lookup(run_id);
    if !q.follow.unwrap_or(false) {
        let (st, id) = (state.clone(), run_id.clone());
        let (limit, newest) = (q.limit, q.newest.unwrap_or(false));
        let events = blocking(move || Ok(st.service.engine().events_limited(&id, after, limit, newest)?)).await?;
        return Ok(Json(EventList::from_records(&run_id, &events)).into_response());
    }
    let engine = state.service.engine().clone();
    let follower = blocking(move || Ok(engine.follow_run(&run_id, after)?)).await?;
    let (tx, rx) = tokio::sync::mpsc::channel::<SseEvent>(256);
    tokio::spawn(follow_events(state.closing.clone(), follower, tx));
    Ok(sse(rx))
}

/// One Server-Sent Event of `GET /runs/{run_id}/events?follow=true`.
#[derive(ToSchema)]
#[schema(as = SseEvent)]
#[expect(dead_code, reason = "only describes the stream; axum's sse::Event writes it")]
pub struct SseEventSchema {
    /// The event's sequence number.
    pub id: String,
    /// Its kind (`run.created`, `step.started`, …, `run.finished`); or `waiting`, a change of the
    /// run's wait for its environment (no `id`; `data` is a `WaitingNotice`).
    pub event: String,
    /// The event as JSON (the `Event` schema), or the `WaitingNotice`.
    #[schema(content_media_type = "application/json")]
    pub data: String,
}

/// Feeds a follower the run's events from the engine's follower, until the run's last event, the
/// follower leaves, or the daemon stops.
async fn follow_events(
    mut closing: tokio::sync::watch::Receiver<bool>,
    mut follower: RunFollower,
    tx: tokio::sync::mpsc::Sender<SseEvent>,
) {
    loop {
        let batch = tokio::select! {
            b = follower.next() => b,
            _ = closing.changed() => return,
            _ = tx.closed() => return,
        };
        let batch = match batch {
            Ok(Some(Followed::Events(batch))) => batch,
            Ok(Some(Followed::Waiting(waiting))) => {
                let data = serde_json::to_string(&WaitingNotice::of(waiting.as_ref())).unwrap_or_default();
                if tx.send(SseEvent::default().event("waiting").data(data)).await.is_err() {
                    return;
                }
                continue;
            }
            Ok(None) | Err(_) => return,
        };
        for e in &batch {
            let data = serde_json::to_string(&Event::from_record(e)).unwrap_or_default();
            let event = SseEvent::default().id(e.seq.to_string()).event(e.event.kind()).data(data);
            if tx.send(event).await.is_err() {
                return;
            }
        }
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LogQuery {
    /// The last N lines (1 to 10000, default 100).
    #[param(minimum = 1, maximum = 10000)]
    pub lines: Option<usize>,
}

/// The tail of one step's log (read from its target, bounded, while it runs there).
#[utoipa::path(get, path = "/runs/{run_id}/steps/{step_id}/log", tag = "runs",
    params(("run_id" = String, Path), ("step_id" = String, Path), LogQuery),
    responses((status = 200, body = StepLog), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn step_log(
    State(state): State<AppRef>,
    ApiPath((run_id, step_id)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<LogQuery>,
) -> Result<Json<StepLog>, ApiError> {
    let lines = q.lines.unwrap_or(100);
    blocking(move || {
        Ok(Json(StepLog::from_engine(state.service.engine().step_log(&RunId::lookup(run_id), &step_id, lines)?)))
    })
    .await
}

/// Every attempt of a run on its time axis: where its time went, what overlapped. A run over
/// 1,000 steps answers with its first 1,000 steps' attempts, paged as `GET /runs/{id}` is.
#[utoipa::path(get, path = "/runs/{run_id}/timeline", tag = "runs",
    params(("run_id" = String, Path), StepsQuery),
    responses((status = 200, description = "The run's attempts on its time axis", body = RunTimeline),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, description = "A page parameter out of range", body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn run_timeline(
    State(state): State<AppRef>,
    ApiPath(run_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<StepsQuery>,
) -> Result<Json<RunTimeline>, ApiError> {
    let run_id = RunId::lookup(run_id);
    blocking(move || {
        let page = state.service.engine().timeline_page(&run_id, &q.page()?)?;
        Ok(Json(RunTimeline::from_engine(&run_id, &page)))
    })
    .await
}

/// Why a step of a run was reused, run or invalidated, with its signature and attempts.
#[utoipa::path(get, path = "/runs/{run_id}/steps/{step_id}/explain", tag = "runs",
    params(("run_id" = String, Path), ("step_id" = String, Path)),
    responses((status = 200, description = "The step's decision, reason and record", body = Explanation),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn explain_step(
    State(state): State<AppRef>,
    ApiPath((run_id, step_id)): ApiPath<(String, String)>,
) -> Result<Json<Explanation>, ApiError> {
    blocking(move || {
        Ok(Json(Explanation::from_engine(&state.service.engine().explain_step(&RunId::lookup(run_id), &step_id)?)))
    })
    .await
}

/// One step of a run whole: its status, its result (never cut) and its artifacts.
#[utoipa::path(get, path = "/runs/{run_id}/steps/{step_id}", tag = "runs",
    params(("run_id" = String, Path), ("step_id" = String, Path)),
    responses((status = 200, description = "The step, its whole result and its artifacts", body = StepDetail),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn get_step(
    State(state): State<AppRef>,
    ApiPath((run_id, step_id)): ApiPath<(String, String)>,
) -> Result<Json<StepDetail>, ApiError> {
    blocking(move || {
        Ok(Json(StepDetail::from_engine(&state.service.engine().show_step(&RunId::lookup(run_id), &step_id)?)))
    })
    .await
}

/// A pipeline step's jobs: rule, wildcards, Snakemake's reason, inputs (each naming the job that
/// wrote it), outputs with what they held when the job finished, start, end, status.
#[utoipa::path(get, path = "/runs/{run_id}/steps/{step_id}/jobs", tag = "runs",
    params(("run_id" = String, Path), ("step_id" = String, Path), JobQueryParams),
    responses((status = 200, description = "The step's jobs and each rule's counts", body = PipelineJobs),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn step_jobs(
    State(state): State<AppRef>,
    ApiPath((run_id, step_id)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<JobQueryParams>,
) -> Result<Json<PipelineJobs>, ApiError> {
    let filter =
        cairn_engine::JobFilter { rule: q.rule, status: q.status, offset: q.offset.unwrap_or(0), limit: q.limit };
    blocking(move || {
        Ok(Json(PipelineJobs::from_engine(&state.service.engine().pipeline_jobs(
            &RunId::lookup(run_id),
            &step_id,
            &filter,
        )?)))
    })
    .await
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct JobQueryParams {
    /// Only this rule's jobs.
    pub rule: Option<String>,
    /// Only jobs in this status: running, finished, failed, retrying or interrupted.
    pub status: Option<String>,
    /// Jobs to skip (of those matching), in the order they started.
    pub offset: Option<usize>,
    /// At most this many jobs (`total` says how many matched).
    pub limit: Option<usize>,
}

/// The files a run's steps produced, by step then path: size, SHA-256 and the producing attempt.
#[utoipa::path(get, path = "/runs/{run_id}/artifacts", tag = "runs", params(("run_id" = String, Path)),
    responses((status = 200, body = ArtifactList), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn run_artifacts(
    State(state): State<AppRef>,
    ApiPath(run_id): ApiPath<String>,
) -> Result<Json<ArtifactList>, ApiError> {
    blocking(move || {
        Ok(Json(ArtifactList::from_engine(&state.service.engine().run_artifacts(&RunId::lookup(run_id))?)))
    })
    .await
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TraceQueryParams {
    /// The SHA-256 of a file's bytes (64 hexadecimal digits).
    #[param(pattern = "^[0-9a-fA-F]{64}$")]
    pub sha256: Option<String>,
}

/// Which runs recorded these bytes: every artifact with this SHA-256, oldest first, with its
/// run's workflow, the step's signature and the replays that carried it (an empty list when none).
#[utoipa::path(get, path = "/artifacts", tag = "runs", params(TraceQueryParams),
    responses((status = 200, body = TraceResult), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn trace_artifacts(
    State(state): State<AppRef>,
    ApiQuery(q): ApiQuery<TraceQueryParams>,
) -> Result<Json<TraceResult>, ApiError> {
    let sha256 =
        q.sha256.ok_or_else(|| EngineError::invalid_field("sha256", "give sha256: the SHA-256 of the file's bytes"))?;
    blocking(move || {
        Ok(Json(TraceResult::from_engine(&state.service.engine().trace(&cairn_engine::TraceQuery::Sha256(sha256))?)))
    })
    .await
}

/// Cancels a run: its process groups are stopped (SIGTERM, grace, SIGKILL) and it ends CANCELLED.
#[utoipa::path(post, path = "/runs/{run_id}/cancel", tag = "runs", params(("run_id" = String, Path)),
    responses((status = 200, body = RunResult), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "The run had finished already", body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn cancel_run(
    State(state): State<AppRef>,
    Extension(caller): Extension<Caller>,
    ApiPath(run_id): ApiPath<String>,
) -> Result<Json<RunResult>, ApiError> {
    blocking(move || Ok(Json(RunResult::from_view(&state.service.cancel_run(&caller, &RunId::lookup(run_id))?)))).await
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct ReadArtifactQuery {
    /// For a folder output: which of its files (relative to the run directory, or to the folder).
    path: Option<String>,
    /// The first byte (default 0).
    offset: Option<u64>,
    /// At most this many bytes (default and most: 262,144).
    length: Option<u64>,
}

/// A bounded slice of one artifact's bytes, read where it lies: here, or on the run's target over
/// SSH (nothing is copied back); text as text, else base64, with its recorded size and SHA-256.
#[utoipa::path(get, path = "/runs/{run_id}/steps/{step_id}/artifacts/{name}", tag = "runs",
    params(("run_id" = String, Path), ("step_id" = String, Path), ("name" = String, Path), ReadArtifactQuery),
    responses((status = 200, body = ArtifactSlice),
        (status = 400, description = "A bad query, or the run's target cannot be reached", body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "The file cannot be read where it lies", body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn read_artifact(
    State(state): State<AppRef>,
    ApiPath((run_id, step_id, name)): ApiPath<(String, String, String)>,
    ApiQuery(q): ApiQuery<ReadArtifactQuery>,
) -> Result<Json<ArtifactSlice>, ApiError> {
    blocking(move || {
        let req = cairn_engine::ReadArtifact {
            run_id: RunId::lookup(run_id),
            step_id,
            name,
            path: q.path,
            offset: q.offset.unwrap_or(0),
            length: q.length,
        };
        Ok(Json(ArtifactSlice::from_engine(&state.service.engine().read_artifact(&req)?)))
    })
    .await
}
