//! The HTTP API: JSON over loopback, bearer tokens for two roles, JSON error bodies everywhere,
//! and an OpenAPI 3.1 document generated from these handlers and the wire types.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use cairn_core::status::RunStatus;
use cairn_core::store::{RunQuery, StoreError};
use cairn_engine::plan::PlanRequest;
use cairn_engine::registry::load_workflow;
use cairn_engine::replay::ReplayRequest;
use cairn_engine::runner::RunRequest;
use cairn_engine::session::SessionKernel;
use cairn_engine::{Engine, EngineError, ErrorKind, StopSignal};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{IntoParams, Modify, OpenApi, ToSchema};

use super::auth::{Role, Tokens, host_is_loopback};
use super::pool::{Pool, Work, owner_is_alive};
use super::targets_api::{
    self, __path_check_readiness, __path_create_target, __path_list_targets, __path_probe_target,
};
use super::verify_api::{
    self, __path_create_verification, __path_get_verification, __path_list_verifications, __path_verification_notebook,
};
use super::web::{self, __path_asset, __path_index, __path_login, __path_notebook_export};
use crate::wire::{self, EventList, Job, JobList, PlanList, PlanSummary, RunList, RunResult, WorkflowList};

/// Bodies above this are refused with 413 before they are parsed.
pub const BODY_LIMIT: usize = 1 << 20;

pub struct AppState {
    /// This daemon's own URL (`http://127.0.0.1:PORT`): the MCP servers call the API there.
    pub url: String,
    pub engine: Arc<Engine>,
    pub pool: Arc<Pool>,
    pub session: Arc<SessionKernel>,
    pub tokens: Tokens,
    pub started: Instant,
    /// Milliseconds since `started` of the last request, for the idle exit.
    pub last_activity: Arc<AtomicI64>,
    /// Becomes true when the daemon stops: open event streams end, so shutdown does not wait on
    /// their followers.
    pub closing: tokio::sync::watch::Receiver<bool>,
    /// Cancelled when the daemon stops: ends the MCP sessions' streams.
    pub mcp_closing: tokio_util::sync::CancellationToken,
    /// Bumped after every committed write to the registry.
    pub commits: Arc<tokio::sync::watch::Sender<u64>>,
    /// The web app's login codes already used, so each works once.
    pub logins: super::web::UsedLogins,
}

pub(super) type AppRef = Arc<AppState>;

// ------------------------------------------------------------------------------------ errors

/// Every error response: `{"error": {"code": "...", "message": "..."}}`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable machine-readable code, e.g. `unauthorized`, `execution_input_mismatch`.
    pub code: String,
    /// What went wrong and how to fix it.
    pub message: String,
}

#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status, code, message: message.into() }
    }

    pub(super) fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody { error: ErrorDetail { code: self.code.to_string(), message: self.message } };
        let mut resp = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> ApiError {
        let message = e.to_string();
        let (status, code) = match (&e, e.kind()) {
            (EngineError::ExecutionInputMismatch { .. }, _) => (StatusCode::CONFLICT, "execution_input_mismatch"),
            (EngineError::Store(StoreError::RunFinished { .. }), _) => (StatusCode::CONFLICT, "run_finished"),
            (_, ErrorKind::Conflict) => (StatusCode::CONFLICT, "conflict"),
            (_, ErrorKind::Invalid) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_request"),
            (_, ErrorKind::NotFound) => (StatusCode::NOT_FOUND, "not_found"),
            (_, ErrorKind::Interrupted) => (StatusCode::CONFLICT, "stopped"),
            (_, ErrorKind::Internal) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        };
        ApiError::new(status, code, message)
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> ApiError {
        let status = r.status();
        let code = match status {
            StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
            StatusCode::BAD_REQUEST => "invalid_json",
            _ => "invalid_body",
        };
        let mut message = r.body_text();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            message = format!("the body is larger than {BODY_LIMIT} bytes");
        } else if status == StatusCode::UNSUPPORTED_MEDIA_TYPE {
            message = "send the body as JSON with `Content-Type: application/json`".into();
        }
        ApiError::new(status, code, message)
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", r.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_path", r.body_text())
    }
}

/// `Json`, with its rejections as JSON error bodies.
#[derive(FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct ApiJson<T>(pub T);

#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct ApiQuery<T>(pub T);

#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct ApiPath<T>(pub T);

/// Runs engine work off the async threads.
pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", format!("the request's worker failed: {e}"))
    })?
}

// ------------------------------------------------------------------------------------ router

pub fn router(state: AppRef) -> Router {
    let authed = Router::new()
        .route("/runs", get(list_runs).post(submit_run))
        .route("/runs/{run_id}", get(get_run))
        .route("/runs/{run_id}/events", get(run_events))
        .route("/runs/{run_id}/steps/{step_id}/log", get(step_log))
        .route("/runs/{run_id}/steps/{step_id}/explain", get(explain_step))
        .route("/runs/{run_id}/cancel", post(cancel_run))
        .route("/workflows", get(list_workflows))
        .route("/workflows/{name}", get(get_workflow))
        .route("/plans", get(list_plans).post(create_plan))
        .route("/plans/{name}", get(get_plan))
        .route("/plans/{name}/execute", post(execute_plan))
        .route("/kernel/jobs", get(list_jobs).post(submit_job))
        .route("/kernel/jobs/{job_id}", get(get_job))
        .route("/kernel/interrupt", post(interrupt_kernel))
        .route("/kernel/restart", post(restart_kernel))
        .route("/kernel/audit", get(kernel_audit))
        .route("/targets", get(targets_api::list_targets).post(targets_api::create_target))
        .route("/targets/{name}/probe", post(targets_api::probe_target))
        .route("/targets/{name}/readiness", get(targets_api::check_readiness))
        .route("/verifications", get(verify_api::list_verifications).post(verify_api::create_verification))
        .route("/verifications/{id}", get(verify_api::get_verification))
        .route("/verifications/{id}/notebook", get(verify_api::verification_notebook))
        .route("/api/notebook", get(web::notebook_export))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    let mcp = crate::mcp::http_router(&state.url, &state.tokens.viewer, state.mcp_closing.clone())
        .layer(middleware::from_fn_with_state(state.clone(), require_any_token));
    Router::new()
        .route("/health", get(health))
        .route("/openapi.json", get(openapi_json))
        .merge(web::routes())
        .merge(authed)
        .merge(mcp)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn_with_state(state.clone(), check_host))
        .with_state(state)
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint; the API is described at GET /openapi.json")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this endpoint does not take that method; see GET /openapi.json",
    )
}

/// Refuses any request not addressed to loopback by name (DNS rebinding), and notes activity.
async fn check_host(State(state): State<AppRef>, req: Request, next: Next) -> Response {
    state.last_activity.store(state.started.elapsed().as_millis() as i64, Ordering::Relaxed);
    let host = req.headers().get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    if !host_is_loopback(host) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden_host",
            format!(
                "requests must address the daemon as 127.0.0.1 or localhost (the Host header was `{host}`); this protects against DNS rebinding"
            ),
        )
        .into_response();
    }
    next.run(req).await
}

/// A token is required; reads need a Viewer's, anything else an Operator's.
/// MCP over HTTP: any valid token may connect; each tool call is then made to this API with that
/// same token, so what a Viewer may not do here, it may not do there either.
async fn require_any_token(State(state): State<AppRef>, req: Request, next: Next) -> Response {
    match presented_role(&state, &req) {
        Ok(_) => next.run(req).await,
        Err(refused) => refused,
    }
}

/// The role of the request's bearer token, or the 401 that refuses it.
#[allow(clippy::result_large_err)]
fn presented_role(state: &AppState, req: &Request) -> Result<Role, Response> {
    let presented = super::auth::bearer(req.headers());
    presented.and_then(|t| state.tokens.role_of(t)).ok_or_else(|| {
        let message = if presented.is_some() {
            "the bearer token is not valid for this daemon; use the contents of <state>/auth/viewer.token or operator.token"
        } else {
            "send `Authorization: Bearer <token>`; the tokens are in <state>/auth/viewer.token (read) and operator.token (read and change)"
        };
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message).into_response()
    })
}

async fn require_token(State(state): State<AppRef>, req: Request, next: Next) -> Response {
    let role = match presented_role(&state, &req) {
        Ok(role) => role,
        Err(refused) => return refused,
    };
    let reads = matches!(*req.method(), axum::http::Method::GET | axum::http::Method::HEAD);
    if !reads && role < Role::Operator {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "a Viewer token may only read; submitting and cancelling need the Operator token",
        )
        .into_response();
    }
    next.run(req).await
}

// ------------------------------------------------------------------------------------ health

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// Always `ok` when the daemon answers.
    pub status: String,
    pub pid: u32,
    pub version: String,
    pub uptime_ms: u64,
    /// Runs queued or executing in this daemon.
    pub active_runs: usize,
}

/// Whether the daemon answers. Needs no token.
#[utoipa::path(get, path = "/health", tag = "daemon", responses((status = 200, body = Health)))]
async fn health(State(state): State<AppRef>) -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        pid: std::process::id(),
        version: env!("CARGO_PKG_VERSION").into(),
        uptime_ms: state.started.elapsed().as_millis() as u64,
        active_runs: state.pool.active_count(),
    })
}

/// This document. Needs no token.
#[utoipa::path(get, path = "/openapi.json", tag = "daemon", responses((status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json")))]
async fn openapi_json() -> Response {
    let mut doc = ApiDoc::openapi();
    doc.info.version = env!("CARGO_PKG_VERSION").into();
    Json(doc).into_response()
}

// ------------------------------------------------------------------------------------ runs

/// `POST /runs`: run a registered workflow, or replay steps of a finished run into a child run.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitRun {
    /// The conversation or job this run belongs to (recorded with the run).
    #[schema(min_length = 1, max_length = 256, pattern = "\\S")]
    pub thread_id: String,
    /// The registered workflow's name.
    #[schema(min_length = 1, pattern = "\\S")]
    pub agent_id: String,
    /// Its version (default: the highest registered; for a replay, the source's).
    #[serde(default)]
    pub agent_version: Option<String>,
    /// The run input, checked against the workflow's input schema. Required for a run; for a
    /// replay, the source's input when omitted.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub input: Option<Value>,
    /// Choose the run id (`[A-Za-z0-9._-]{1,128}`); the same id with the same identity is idempotent.
    #[serde(default)]
    #[schema(pattern = "^[A-Za-z0-9._-]{1,128}$")]
    pub run_id: Option<String>,
    /// Replay steps of a READY or BLOCKED source run into a new child run.
    #[serde(default)]
    pub replay: Option<ReplayDirective>,
    /// How many ready steps may run at once (1 to 256, default 1).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 256)]
    pub parallel: Option<u16>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayDirective {
    pub source_run_id: String,
    /// Steps to re-execute; their descendants re-execute too.
    pub step_ids: Vec<String>,
}

/// 202 with the run as it is now, and where to find it.
fn accepted(engine: &Engine, run_id: &str) -> Result<Response, ApiError> {
    let mut resp = (StatusCode::ACCEPTED, Json(run_result(engine, run_id)?)).into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("/runs/{run_id}")) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    Ok(resp)
}

fn run_result(engine: &Engine, run_id: &str) -> Result<RunResult, ApiError> {
    Ok(RunResult::from_report(&engine.run_report(run_id)?))
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
async fn submit_run(State(state): State<AppRef>, ApiJson(body): ApiJson<SubmitRun>) -> Result<Response, ApiError> {
    if body.thread_id.trim().is_empty() || body.thread_id.len() > 256 {
        return Err(ApiError::invalid("thread_id must be 1 to 256 characters"));
    }
    if body.agent_id.trim().is_empty() {
        return Err(ApiError::invalid("agent_id must name a registered workflow; see GET /workflows"));
    }
    let parallel = body.parallel.unwrap_or(1);
    if !(1..=256).contains(&parallel) {
        return Err(ApiError::invalid("parallel must be between 1 and 256"));
    }
    blocking(move || {
        let engine = &state.engine;
        let pool = &state.pool;
        let owner = Some(pool.owner().to_string());
        let stop = Some(StopSignal::new());
        let thread_id = Some(body.thread_id.clone());
        let (run, created, work) = match body.replay {
            Some(replay) => {
                let req = ReplayRequest {
                    source_run_id: replay.source_run_id,
                    step_ids: replay.step_ids,
                    input: body.input,
                    run_id: body.run_id,
                    version: body.agent_version,
                    workflow: Some(body.agent_id),
                    resume_interrupted: false,
                    parallelism: parallel as usize,
                    owner,
                    thread_id,
                    stop,
                    workflow_dir: None,
                };
                let (run, created) = engine.submit_replay(&req)?;
                // The worker continues exactly this run, not a new one.
                let req = ReplayRequest { run_id: Some(run.run_id.clone()), ..req };
                (run, created, Work::Replay { req })
            }
            None => {
                let input = body.input.ok_or_else(|| {
                    ApiError::invalid("input is required: the run input, as the workflow's input schema describes it")
                })?;
                let reference = match &body.agent_version {
                    Some(v) => format!("{}@{v}", body.agent_id),
                    None => body.agent_id.clone(),
                };
                let wf = load_workflow(engine.store.as_ref(), &reference)?;
                let req = RunRequest {
                    run_id: body.run_id,
                    input,
                    resume_interrupted: false,
                    parallelism: parallel as usize,
                    owner,
                    thread_id,
                    stop,
                };
                let (run, created) = engine.submit(&wf, &req)?;
                let req = RunRequest { run_id: Some(run.run_id.clone()), ..req };
                (run, created, Work::Run { wf: Box::new(wf), req })
            }
        };
        if run.status.is_terminal() {
            return Ok((StatusCode::OK, Json(run_result(engine, &run.run_id)?)).into_response());
        }
        // A run this daemon created is queued by the request that created it (a duplicate POST
        // may get here first, before that request has queued it).
        let ours = run.owner.as_deref() == Some(pool.owner());
        if !pool.is_active(&run.run_id) && (created || !ours) {
            let work = if created {
                work
            } else {
                // An existing open run not executing here: take it over only if its owner is gone.
                if let Some(o) = &run.owner
                    && o != pool.owner()
                    && owner_is_alive(o)
                {
                    return Err(ApiError::new(
                        StatusCode::CONFLICT,
                        "conflict",
                        format!("run `{}` is executing in another live process ({o})", run.run_id),
                    ));
                }
                pool.recovery_work(&run)?
            };
            pool.submit(&run.run_id, work);
        }
        accepted(engine, &run.run_id)
    })
    .await
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

/// Runs, newest first; with `follow=true`, a Server-Sent Events stream of the list (`event` is
/// `runs`, `data` the list) that ends once no run is pending or running.
#[utoipa::path(get, path = "/runs", tag = "runs", params(ListRunsQuery),
    responses(
        (status = 200, description = "The runs (or, with follow=true, a stream of the list)", content(
            (RunList = "application/json"),
            (SseRunsSchema = "text/event-stream"))),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
async fn list_runs(State(state): State<AppRef>, ApiQuery(q): ApiQuery<ListRunsQuery>) -> Result<Response, ApiError> {
    let limit = q.limit.unwrap_or(50);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::invalid("limit must be between 1 and 1000"));
    }
    let status = match q.status.as_deref() {
        Some(s) => {
            Some(s.parse::<cairn_core::status::RunStatus>().map_err(|e| ApiError::invalid(format!("status: {e}")))?)
        }
        None => None,
    };
    if q.workflow.as_deref().is_some_and(|w| w.trim().is_empty()) {
        return Err(ApiError::invalid("workflow must name a workflow; see GET /workflows"));
    }
    if q.source_run_id.as_deref().is_some_and(|w| w.trim().is_empty()) {
        return Err(ApiError::invalid("source_run_id must name a run; see GET /runs"));
    }
    let filter = RunFilter { limit, status, workflow: q.workflow, source_run_id: q.source_run_id };
    if !q.follow.unwrap_or(false) {
        let st = state.clone();
        let (list, _) = blocking(move || filter.read(&st)).await?;
        return Ok(Json(list).into_response());
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<SseEvent>(16);
    tokio::spawn(follow_runs(state, filter, tx));
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<SseEvent, Infallible>(e), rx))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()).into_response())
}

/// Which runs `GET /runs` lists.
#[derive(Clone)]
struct RunFilter {
    limit: usize,
    status: Option<RunStatus>,
    workflow: Option<String>,
    source_run_id: Option<String>,
}

impl RunFilter {
    /// The list, and whether any run (listed or not) is pending or running.
    fn read(&self, state: &AppState) -> Result<(RunList, bool), ApiError> {
        let store = state.engine.store.as_ref();
        let read = || -> Result<_, StoreError> {
            let runs = store.runs(&RunQuery {
                limit: self.limit,
                status: self.status,
                workflow: self.workflow.as_deref(),
                source_run_id: self.source_run_id.as_deref(),
            })?;
            let active = [RunStatus::Pending, RunStatus::Running]
                .into_iter()
                .map(|s| store.runs(&RunQuery { status: Some(s), ..RunQuery::newest(1) }).map(|r| !r.is_empty()))
                .collect::<Result<Vec<_>, _>>()?
                .contains(&true);
            Ok((RunList::from_records(store, &runs)?, active))
        };
        read().map_err(|e| ApiError::from(EngineError::from(e)))
    }
}

/// Waits for the next commit, or 1 s (writes of other processes wake no one); false when the
/// follower left or the daemon is stopping.
async fn next_change<T>(
    commits: &mut tokio::sync::watch::Receiver<u64>,
    closing: &mut tokio::sync::watch::Receiver<bool>,
    tx: &tokio::sync::mpsc::Sender<T>,
) -> bool {
    tokio::select! {
        _ = commits.changed() => {}
        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
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

/// Feeds a follower of the run list: the list now, then each changed list (woken by commits,
/// with a 1 s poll for runs other processes write), until no run is active, the follower leaves,
/// or the daemon stops.
async fn follow_runs(state: AppRef, filter: RunFilter, tx: tokio::sync::mpsc::Sender<SseEvent>) {
    let mut commits = state.commits.subscribe();
    let mut closing = state.closing.clone();
    let mut last = String::new();
    loop {
        commits.borrow_and_update();
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

/// One run: status, steps in execution order, findings, replay summary.
#[utoipa::path(get, path = "/runs/{run_id}", tag = "runs", params(("run_id" = String, Path)),
    responses((status = 200, body = RunResult), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
async fn get_run(State(state): State<AppRef>, ApiPath(run_id): ApiPath<String>) -> Result<Json<RunResult>, ApiError> {
    blocking(move || Ok(Json(run_result(&state.engine, &run_id)?))).await
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Only events with a larger sequence number.
    pub after: Option<i64>,
    /// Stream events as Server-Sent Events until the run finishes.
    pub follow: Option<bool>,
}

/// The run's ordered event log; with `follow=true`, a Server-Sent Events stream (`id` is the
/// sequence number, `event` the kind, `data` the event) that ends after `run.finished`.
#[utoipa::path(get, path = "/runs/{run_id}/events", tag = "runs", params(("run_id" = String, Path), EventsQuery),
    responses(
        (status = 200, description = "The events (or, with follow=true, an event stream)", content(
            (EventList = "application/json"),
            (SseEventSchema = "text/event-stream"))),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
async fn run_events(
    State(state): State<AppRef>,
    ApiPath(run_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<EventsQuery>,
) -> Result<Response, ApiError> {
    let after = q.after.unwrap_or(0);
    // Subscribed before the first read, so no commit after that read goes unnoticed.
    let commits = state.commits.subscribe();
    let st = state.clone();
    let id = run_id.clone();
    let events =
        blocking(move || {
            st.engine.store.run(&id).map_err(EngineError::from)?.ok_or_else(|| {
                ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("run `{id}` was not found"))
            })?;
            Ok(st.engine.store.events(&id, after).map_err(EngineError::from)?)
        })
        .await?;
    if !q.follow.unwrap_or(false) {
        return Ok(Json(EventList::from_records(&run_id, &events)).into_response());
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<SseEvent>(256);
    tokio::spawn(follow_events(state, run_id, after, events, commits, tx));
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<SseEvent, Infallible>(e), rx))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()).into_response())
}

/// One Server-Sent Event of `GET /runs/{run_id}/events?follow=true`.
#[derive(ToSchema)]
#[schema(as = SseEvent)]
#[expect(dead_code, reason = "only describes the stream; axum's sse::Event writes it")]
pub struct SseEventSchema {
    /// The event's sequence number.
    pub id: String,
    /// Its kind (`run.created`, `step.started`, …, `run.finished`).
    pub event: String,
    /// The event as JSON (the `Event` schema).
    #[schema(content_media_type = "application/json")]
    pub data: String,
}

/// Feeds a follower: what exists, then new events as they are committed (woken by each commit,
/// with a 1 s poll as a fallback), until `run.finished`, the follower leaves, or the daemon stops.
async fn follow_events(
    state: AppRef,
    run_id: String,
    mut after: i64,
    mut batch: Vec<cairn_core::store::EventRecord>,
    mut commits: tokio::sync::watch::Receiver<u64>,
    tx: tokio::sync::mpsc::Sender<SseEvent>,
) {
    let mut closing = state.closing.clone();
    loop {
        for e in &batch {
            after = e.seq;
            let data = serde_json::to_string(&wire::Event::from_record(e)).unwrap_or_default();
            let event = SseEvent::default().id(e.seq.to_string()).event(e.kind.clone()).data(data);
            if tx.send(event).await.is_err() {
                return;
            }
            if e.kind == "run.finished" {
                return;
            }
        }
        if !next_change(&mut commits, &mut closing, &tx).await {
            return;
        }
        commits.borrow_and_update();
        let st = state.clone();
        let id = run_id.clone();
        // The run's status is read before its events, so a run that finished in between still
        // has its `run.finished` in this batch.
        let polled = tokio::task::spawn_blocking(move || {
            let finished = st.engine.store.run(&id)?.is_none_or(|r| r.status.is_terminal());
            Ok::<_, StoreError>((finished, st.engine.store.events(&id, after)?))
        })
        .await;
        batch = match polled {
            // Finished, and nothing after `after`: the follower asked past the end.
            Ok(Ok((true, b))) if b.is_empty() => return,
            Ok(Ok((_, b))) => b,
            _ => return,
        };
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LogQuery {
    /// The last N lines (1 to 10000, default 100).
    #[param(minimum = 1, maximum = 10000)]
    pub lines: Option<usize>,
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

/// The most of a running step's output read from its target for one log request.
const LIVE_TAIL_BYTES: usize = 64 << 10;

/// The tail of one step's log.
#[utoipa::path(get, path = "/runs/{run_id}/steps/{step_id}/log", tag = "runs",
    params(("run_id" = String, Path), ("step_id" = String, Path), LogQuery),
    responses((status = 200, body = StepLog), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
async fn step_log(
    State(state): State<AppRef>,
    ApiPath((run_id, step_id)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<LogQuery>,
) -> Result<Json<StepLog>, ApiError> {
    let wanted = q.lines.unwrap_or(100);
    if !(1..=10_000).contains(&wanted) {
        return Err(ApiError::invalid("lines must be between 1 and 10000"));
    }
    blocking(move || {
        let report = state.engine.run_report(&run_id)?;
        let view = report.steps.iter().find(|s| s.step_id == step_id).ok_or_else(|| {
            let known: Vec<&str> = report.steps.iter().map(|s| s.step_id.as_str()).collect();
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("run `{run_id}` has no step `{step_id}`; its steps are: {}", known.join(", ")),
            )
        })?;
        // A step running through the step agent is read where it runs: a bounded tail over SSH.
        let live = view.record.as_ref().and_then(|r| state.engine.live_tail(r, LIVE_TAIL_BYTES));
        let tail = live.or_else(|| view.record.as_ref().and_then(|r| r.log_tail.clone())).unwrap_or_default();
        let all: Vec<&str> = tail.lines().collect();
        let from = all.len().saturating_sub(wanted);
        Ok(Json(StepLog {
            status: view.status().to_string(),
            lines: all[from..].iter().map(|l| l.to_string()).collect(),
            truncated: from > 0,
            run_id,
            step_id,
        }))
    })
    .await
}

/// Why a step of a run was reused, run or invalidated, with its signature and attempts.
#[utoipa::path(get, path = "/runs/{run_id}/steps/{step_id}/explain", tag = "runs",
    params(("run_id" = String, Path), ("step_id" = String, Path)),
    responses((status = 200, description = "The step's decision, reason and record", body = Object),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
async fn explain_step(
    State(state): State<AppRef>,
    ApiPath((run_id, step_id)): ApiPath<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    blocking(move || {
        let report = state.engine.run_report(&run_id)?;
        crate::output::explain(&report, &step_id).map(Json).ok_or_else(|| {
            let known: Vec<&str> = report.steps.iter().map(|s| s.step_id.as_str()).collect();
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("run `{run_id}` has no step `{step_id}`; its steps are: {}", known.join(", ")),
            )
        })
    })
    .await
}

/// Cancels a run: its process groups are stopped (SIGTERM, grace, SIGKILL) and it ends CANCELLED.
#[utoipa::path(post, path = "/runs/{run_id}/cancel", tag = "runs", params(("run_id" = String, Path)),
    responses((status = 200, body = RunResult), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "The run had finished already", body = ErrorBody)),
    security(("bearer" = [])))]
async fn cancel_run(
    State(state): State<AppRef>,
    ApiPath(run_id): ApiPath<String>,
) -> Result<Json<RunResult>, ApiError> {
    blocking(move || {
        state.pool.cancel(&run_id)?;
        Ok(Json(run_result(&state.engine, &run_id)?))
    })
    .await
}

// ------------------------------------------------------------------------------------ workflows

/// Registered workflows and versions.
#[utoipa::path(get, path = "/workflows", tag = "workflows",
    responses((status = 200, body = WorkflowList), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
async fn list_workflows(State(state): State<AppRef>) -> Result<Json<WorkflowList>, ApiError> {
    blocking(move || Ok(Json(WorkflowList::from_records(&state.engine.store.workflows().map_err(EngineError::from)?))))
        .await
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WorkflowQuery {
    /// An exact version (default: the highest registered).
    #[param(min_length = 1)]
    pub version: Option<String>,
}

/// One workflow version: its steps in order, tools with digests, validator rules, input schema.
#[utoipa::path(get, path = "/workflows/{name}", tag = "workflows", params(("name" = String, Path), WorkflowQuery),
    responses((status = 200, description = "The workflow", body = Object), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
async fn get_workflow(
    State(state): State<AppRef>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<WorkflowQuery>,
) -> Result<Json<Value>, ApiError> {
    blocking(move || {
        if name.contains('@') {
            return Err(ApiError::invalid("name a workflow without `@`; choose a version with ?version="));
        }
        let reference = match &q.version {
            Some(v) => format!("{name}@{v}"),
            None => name.clone(),
        };
        let wf = load_workflow(state.engine.store.as_ref(), &reference)?;
        Ok(Json(crate::output::workflow_json(&wf)))
    })
    .await
}

// ------------------------------------------------------------------------------------ plans

/// `POST /plans`: plan a run (read-only: nothing is created at `run_dir`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreatePlan {
    /// The registered workflow's name.
    #[schema(min_length = 1, pattern = "\\S")]
    pub workflow: String,
    /// Its version (default: the highest registered).
    #[serde(default)]
    pub version: Option<String>,
    /// The run input; for a replay plan, the source's input when omitted.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub input: Option<Value>,
    /// `local`, or a configured SSH target (see `GET /targets`).
    pub target: String,
    /// Absolute; must not exist; its parent must be writable.
    pub run_dir: String,
    /// Name the plan (`[A-Za-z0-9._-]{1,128}`); default: the workflow's name and a short id.
    #[serde(default)]
    #[schema(pattern = "^[A-Za-z0-9._-]{1,128}$")]
    pub plan_name: Option<String>,
    /// Plan a replay of a finished run of this workflow instead.
    #[serde(default)]
    pub replay: Option<ReplayDirective>,
}

/// `POST /plans/{name}/execute`: the approval of exactly the plan that was shown.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecutePlan {
    pub plan_id: String,
    pub plan_checksum: String,
}

/// Plans a run and stores the immutable plan: the workflow version, every resolved command,
/// every input file with its SHA-256, every effect. Nothing is created at `run_dir`.
#[utoipa::path(post, path = "/plans", tag = "plans", request_body = CreatePlan,
    responses((status = 201, description = "The plan", body = Object), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "A plan with this name exists", body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
async fn create_plan(State(state): State<AppRef>, ApiJson(body): ApiJson<CreatePlan>) -> Result<Response, ApiError> {
    blocking(move || {
        let reference = match &body.version {
            Some(v) => format!("{}@{v}", body.workflow),
            None => body.workflow.clone(),
        };
        if body.input.is_none() && body.replay.is_none() {
            return Err(ApiError::invalid("input is required (only a replay plan may omit it)"));
        }
        let plan = state.engine.make_plan(&PlanRequest {
            workflow: reference,
            input: body.input.unwrap_or(Value::Null),
            target: body.target,
            run_dir: std::path::PathBuf::from(body.run_dir),
            name: body.plan_name,
            replay: body.replay.map(|r| (r.source_run_id, r.step_ids)),
        })?;
        Ok((StatusCode::CREATED, Json(serde_json::to_value(&plan).unwrap_or(Value::Null))).into_response())
    })
    .await
}

/// Stored plans, newest first.
#[utoipa::path(get, path = "/plans", tag = "plans",
    responses((status = 200, body = PlanList), (status = 401, body = ErrorBody)), security(("bearer" = [])))]
async fn list_plans(State(state): State<AppRef>) -> Result<Json<PlanList>, ApiError> {
    blocking(move || Ok(Json(PlanList::from_store(&state.engine)?))).await
}

/// One stored plan, checked against the checksum it was stored with (409 if it was altered).
#[utoipa::path(get, path = "/plans/{name}", tag = "plans", params(("name" = String, Path)),
    responses((status = 200, description = "The plan", body = Object), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "The stored plan was altered", body = ErrorBody)),
    security(("bearer" = [])))]
async fn get_plan(State(state): State<AppRef>, ApiPath(name): ApiPath<String>) -> Result<Json<Value>, ApiError> {
    blocking(move || Ok(Json(serde_json::to_value(state.engine.load_plan(&name)?).unwrap_or(Value::Null)))).await
}

/// The only way a plan executes: reloads it, checks the id and checksum, re-hashes its input
/// files and re-checks readiness, mints a single-use receipt and consumes it, which reserves the
/// run before any effect; then queues the run. 409, creating nothing, for a wrong id or
/// checksum, an altered plan, a changed input file, or a plan executed already.
#[utoipa::path(post, path = "/plans/{name}/execute", tag = "plans", params(("name" = String, Path)), request_body = ExecutePlan,
    responses((status = 202, description = "Approved, reserved and queued", body = RunResult),
        (status = 200, description = "An effect failed: the run is FAILED, naming it", body = RunResult),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
async fn execute_plan(
    State(state): State<AppRef>,
    ApiPath(name): ApiPath<String>,
    ApiJson(body): ApiJson<ExecutePlan>,
) -> Result<Response, ApiError> {
    blocking(move || {
        let engine = &state.engine;
        let pool = &state.pool;
        let (plan, receipt) = engine.approve_plan(&name, &body.plan_id, &body.plan_checksum)?;
        let (run, wf) =
            engine.consume_receipt(&plan, &receipt, Some(pool.owner().to_string()), Some(format!("plan:{name}")))?;
        if run.status.is_terminal() {
            return Ok((StatusCode::OK, Json(run_result(engine, &run.run_id)?)).into_response());
        }
        let owner = Some(pool.owner().to_string());
        let work = match engine.replay_request(&plan, &run.run_id) {
            Some(req) => Work::Replay {
                req: ReplayRequest { owner, thread_id: run.thread_id.clone(), stop: Some(StopSignal::new()), ..req },
            },
            None => Work::Run {
                wf: Box::new(wf),
                req: RunRequest {
                    run_id: Some(run.run_id.clone()),
                    input: plan.input.clone(),
                    resume_interrupted: false,
                    parallelism: 1,
                    owner,
                    thread_id: run.thread_id.clone(),
                    stop: Some(StopSignal::new()),
                },
            },
        };
        pool.submit(&run.run_id, work);
        accepted(engine, &run.run_id)
    })
    .await
}

// ------------------------------------------------------------------------------------ session kernel

/// `POST /kernel/jobs`: run code in the session kernel, after the jobs queued before it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitJob {
    /// Python source (IPython syntax: magics work).
    #[schema(min_length = 1, pattern = "\\S")]
    pub code: String,
    /// Interrupt the job after this many seconds, then kill the kernel (1 to 604800; default 3600).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 604800)]
    pub timeout_secs: Option<u64>,
}

/// What `POST /kernel/interrupt` did.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Interrupted {
    /// The job that received KeyboardInterrupt; null when none was running.
    pub interrupted: Option<String>,
}

/// What `POST /kernel/restart` did.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Restarted {
    /// The session whose kernel was killed; null when no kernel ran.
    pub killed_session: Option<String>,
    /// Jobs that were queued or running and ended `cancelled`.
    pub cancelled: Vec<String>,
}

/// Queues a job for the session kernel. Refused (409) while a verification holds the kernel slot.
#[utoipa::path(post, path = "/kernel/jobs", tag = "kernel", request_body = SubmitJob,
    responses((status = 202, body = Job), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 409, description = "A verification holds the kernel slot", body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
async fn submit_job(State(state): State<AppRef>, ApiJson(body): ApiJson<SubmitJob>) -> Result<Response, ApiError> {
    let timeout = match body.timeout_secs {
        Some(t) if !(1..=604_800).contains(&t) => {
            return Err(ApiError::invalid("timeout_secs must be between 1 and 604800 (a week)"));
        }
        t => t.map(Duration::from_secs),
    };
    blocking(move || {
        let job = state.session.submit(&body.code, timeout)?;
        Ok((StatusCode::ACCEPTED, Json(Job::from_record(&job))).into_response())
    })
    .await
}

/// Every retained job of the session kernel, oldest first.
#[utoipa::path(get, path = "/kernel/jobs", tag = "kernel",
    responses((status = 200, body = JobList), (status = 401, body = ErrorBody)), security(("bearer" = [])))]
async fn list_jobs(State(state): State<AppRef>) -> Result<Json<JobList>, ApiError> {
    blocking(move || Ok(Json(JobList { jobs: state.session.jobs()?.iter().map(Job::from_record).collect() }))).await
}

/// One job: its status, outputs so far, timings.
#[utoipa::path(get, path = "/kernel/jobs/{job_id}", tag = "kernel", params(("job_id" = String, Path)),
    responses((status = 200, body = Job), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
async fn get_job(State(state): State<AppRef>, ApiPath(job_id): ApiPath<String>) -> Result<Json<Job>, ApiError> {
    blocking(move || Ok(Json(Job::from_record(&state.session.job(&job_id)?)))).await
}

/// Sends KeyboardInterrupt to the running job (the kernel and its state survive).
#[utoipa::path(post, path = "/kernel/interrupt", tag = "kernel",
    responses((status = 200, body = Interrupted), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)),
    security(("bearer" = [])))]
async fn interrupt_kernel(State(state): State<AppRef>) -> Result<Json<Interrupted>, ApiError> {
    blocking(move || Ok(Json(Interrupted { interrupted: state.session.interrupt() }))).await
}

/// Kills the session kernel (its state is lost; queued and running jobs end `cancelled`); the
/// next job starts a fresh one.
#[utoipa::path(post, path = "/kernel/restart", tag = "kernel",
    responses((status = 200, body = Restarted), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)),
    security(("bearer" = [])))]
async fn restart_kernel(State(state): State<AppRef>) -> Result<Json<Restarted>, ApiError> {
    blocking(move || {
        let r = state.session.restart()?;
        Ok(Json(Restarted { killed_session: r.killed_session, cancelled: r.cancelled }))
    })
    .await
}

/// The audit notebook (nbformat 4.5): every retained job in order, dead ends included, each with
/// a provenance header.
#[utoipa::path(get, path = "/kernel/audit", tag = "kernel",
    responses((status = 200, description = "The notebook", body = Object), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
async fn kernel_audit(State(state): State<AppRef>) -> Result<Json<Value>, ApiError> {
    blocking(move || Ok(Json(state.session.audit(&wire::time)?))).await
}

// ------------------------------------------------------------------------------------ document

#[derive(OpenApi)]
#[openapi(
    info(title = "Cairn daemon", description = "Durable, approved, reproducible workflow runs. Loopback only; \
        bearer tokens from <state>/auth/viewer.token (read) and operator.token (read and change)."),
    paths(health, openapi_json, submit_run, list_runs, get_run, run_events, step_log, explain_step, cancel_run,
        list_workflows, get_workflow, create_plan, list_plans, get_plan, execute_plan,
        submit_job, list_jobs, get_job, interrupt_kernel, restart_kernel, kernel_audit,
        list_targets, create_target, probe_target, check_readiness,
        create_verification, list_verifications, get_verification, verification_notebook,
        index, asset, login, notebook_export),
    components(schemas(ErrorBody, ErrorDetail, Health, SubmitRun, ReplayDirective, RunResult, RunList, EventList, StepLog,
        WorkflowList, SubmitJob, Job, JobList, Interrupted, Restarted, SseEventSchema, SseRunsSchema, CreatePlan, ExecutePlan,
        PlanSummary, PlanList, targets_api::CreateTarget,
        verify_api::CreateVerification, web::UiLogin)),
    modifiers(&BearerAuth, &CommonResponses),
)]
pub struct ApiDoc;

struct BearerAuth;

/// What every operation may answer besides its own responses, and a description for each
/// response that has none (OpenAPI requires one).
struct CommonResponses;

impl Modify for CommonResponses {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
        for item in openapi.paths.paths.values_mut() {
            let ops = [&mut item.get, &mut item.post, &mut item.put, &mut item.delete, &mut item.patch];
            for op in ops.into_iter().flatten() {
                let responses = &mut op.responses.responses;
                // Every request is checked for a loopback Host first.
                responses.entry("403".to_string()).or_insert_with(|| {
                    RefOr::T(
                        ResponseBuilder::new()
                            .content(
                                "application/json",
                                ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorBody"))).build(),
                            )
                            .build(),
                    )
                });
                for (status, response) in responses.iter_mut() {
                    if let RefOr::T(r) = response
                        && r.description.is_empty()
                    {
                        r.description = describe_status(status).to_string();
                    }
                }
            }
        }
    }
}

fn describe_status(status: &str) -> &'static str {
    match status {
        "200" => "OK",
        "201" => "Created",
        "202" => "Accepted",
        "400" => "The request is malformed (bad JSON, query or path)",
        "401" => "No valid bearer token",
        "403" => "The Host header is not loopback, or a Viewer token asked for a change",
        "404" => "Not found",
        "409" => "Conflict with the stored state",
        "413" => "The body is larger than 1 MiB",
        "415" => "The body is not sent as application/json",
        "422" => "The body or a parameter is invalid",
        _ => "See the error body",
    }
}

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        if let Some(components) = openapi.components.as_mut() {
            components.add_security_scheme("bearer", SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)));
        }
    }
}
