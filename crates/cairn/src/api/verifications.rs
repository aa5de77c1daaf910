//! Verifications: verify a document in a fresh scratch kernel (in the daemon, which owns
//! kernels), list verifications, read one and its proven notebook.

use axum::Extension;
use cairn_core::access::{Caller, Permission, Scope};
use std::path::PathBuf;

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use std::sync::mpsc;
use std::time::Instant;

use axum::http::StatusCode;
use cairn_engine::verify::{Quiet, SpareStatus, VerifyObserver};
use cairn_engine::{EngineError, StopKind, StopSignal};
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa::IntoParams;

use super::AppRef;
use super::http::{ApiError, ApiJson, ApiPath, ApiQuery, ErrorBody, blocking};
use crate::wire::{SpareKernel, VERIFY_START_AT_LEAST, VerificationRecord, Verify, VerifyResult, VerifyStreamEvent};

/// Verifies a document in a fresh, disposable kernel and answers when it has a verdict. Give its
/// text as `document`, or an absolute path on this machine as `path`, or only a `title` to
/// re-verify that title's draft. A verification's side effects (files its cells wrote) are not
/// undone. It runs on the daemon's spare kernel (booted ahead, never used) unless `spare` is
/// false. With `Accept: application/x-ndjson` the answer is a stream of JSON lines as it goes:
/// `{event: "message", text}`, `{event: "started", verification_id}`, `{event: "cell_started",
/// index, total}`, `{event: "cell_finished", index, status, duration_ms}`, and last `{event:
/// "result", result}` (the VerifyResult) or `{event: "error", status, error}`; closing it
/// cancels the verification.
#[utoipa::path(post, path = "/verifications", tag = "verifications", request_body = Verify,
    responses((status = 200, description = "The verification: verdict, cells, notebook or draft (or, with `Accept: application/x-ndjson`, its progress as JSON lines, the result last)", body = VerifyResult),
        (status = 202, description = "With `wait`: it runs on; `{verification_id, status: \"running\", poll}`, to follow with GET /kernel/jobs/{id}", body = Object),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, description = "No draft of that title", body = ErrorBody),
        (status = 409, description = "The kernel slot is taken and no_wait was set", body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn create_verification(
    State(state): State<AppRef>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<Verify>,
) -> Result<Response, ApiError> {
    state.service.engine().authorize(&caller, Permission::Code, &Scope::everywhere())?;
    let lines = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim().starts_with(NDJSON)));
    if lines {
        return stream_verification(state, body);
    }
    let wait = body.wait_for()?;
    blocking(move || {
        let mut req = daemon_request(body)?;
        let Some(wait) = wait else {
            return Ok(
                Json(VerifyResult::from_report(&state.service.engine().verify(&req, &mut Quiet)?)).into_response()
            );
        };
        // Runs on its own thread, so the answer can come before the verdict. One that has not
        // started by then (the slot still taken) is stopped before it runs: the caller is told
        // so, and nothing runs behind its back.
        let stop = StopSignal::new();
        req.stop = Some(stop.clone());
        let (started_tx, started_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel();
        let app = state.clone();
        std::thread::spawn(move || {
            let report = app.service.engine().verify(&req, &mut Started(started_tx));
            let _ = done_tx.send(report.map(|r| VerifyResult::from_report(&r)));
        });
        let deadline = Instant::now() + wait;
        // Its kernel's start counts too: at least a short while, even for `wait: 0`.
        let started = match started_rx.recv_timeout(wait.max(VERIFY_START_AT_LEAST)) {
            Ok(id) => id,
            Err(_) => {
                stop.request(StopKind::Cancel);
                // It ended (most likely refused) before its kernel started, or has now been
                // stopped before it ran: its answer is the result.
                return match done_rx.recv_timeout(VERIFY_START_AT_LEAST) {
                    Ok(result) => Ok(Json(result?).into_response()),
                    Err(_) => Err(EngineError::invalid_field(
                        "wait",
                        "the verification did not start within `wait`; nothing ran: raise it",
                    )
                    .into()),
                };
            }
        };
        match done_rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(result) => Ok(Json(result?).into_response()),
            Err(_) => Ok((
                StatusCode::ACCEPTED,
                Json(json!({"verification_id": started, "status": "running",
                            "poll": format!("GET /kernel/jobs/{started} (MCP poll_job)")})),
            )
                .into_response()),
        }
    })
    .await
}

const NDJSON: &str = "application/x-ndjson";

/// The engine's request for a verification the daemon runs: with the daemon's own interpreter
/// setting (the one its spare boots with; a path from a caller means nothing here) and no memory
/// limit.
fn daemon_request(body: Verify) -> Result<cairn_engine::verify::VerifyRequest, ApiError> {
    let python = std::env::var_os("CAIRN_PYTHON").filter(|p| !p.is_empty()).map(PathBuf::from);
    Ok(Verify { python, memory_limit: None, ..body }.into_request(None)?)
}

/// A verification answered as JSON lines while it runs (what `cairn verify` shows live). A
/// request refused before it starts is answered as usual (status and error body).
fn stream_verification(state: AppRef, body: Verify) -> Result<Response, ApiError> {
    if body.wait.is_some() {
        return Err(EngineError::invalid_field(
            "wait",
            "`wait` does not apply to a streamed verification (Accept: application/x-ndjson): it streams until its verdict",
        )
        .into());
    }
    let mut req = daemon_request(body)?;
    let stop = StopSignal::new();
    req.stop = Some(stop.clone());
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Result<Vec<u8>, std::convert::Infallible>>();
    std::thread::Builder::new()
        .name("cairn-verify".into())
        .spawn(move || {
            let mut lines = Lines { tx, stop };
            let last = match state.service.engine().verify(&req, &mut lines) {
                Ok(report) => VerifyStreamEvent::Result { result: Box::new(VerifyResult::from_report(&report)) },
                Err(e) => {
                    let (status, body) = ApiError::from(e).parts();
                    VerifyStreamEvent::Error { status: status.as_u16(), error: body.error }
                }
            };
            lines.send(&last);
        })
        .map_err(|e| {
            ApiError::from(cairn_engine::EngineError::Internal {
                message: format!("cannot start the verification's thread: {e}"),
            })
        })?;
    let stream = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|line| (line, rx)) });
    Ok(([(header::CONTENT_TYPE, NDJSON)], Body::from_stream(stream)).into_response())
}

/// Sends a verification's progress as JSON lines; once the caller has gone, stops it.
struct Lines {
    tx: tokio::sync::mpsc::UnboundedSender<Result<Vec<u8>, std::convert::Infallible>>,
    stop: StopSignal,
}

impl Lines {
    fn send(&mut self, v: &VerifyStreamEvent) {
        let mut line = serde_json::to_vec(v).unwrap_or_default();
        line.push(b'\n');
        if self.tx.send(Ok(line)).is_err() {
            self.stop.request(StopKind::Cancel);
        }
    }
}

impl VerifyObserver for Lines {
    fn started(&mut self, verification_id: &str) {
        self.send(&VerifyStreamEvent::Started { verification_id: verification_id.to_string() });
    }
    fn message(&mut self, text: &str) {
        self.send(&VerifyStreamEvent::Message { text: text.to_string() });
    }
    fn cell_started(&mut self, index: usize, total: usize) {
        self.send(&VerifyStreamEvent::CellStarted { index, total });
    }
    fn cell_finished(&mut self, index: usize, status: cairn_core::verification::CellStatus, duration_ms: u64) {
        self.send(&VerifyStreamEvent::CellFinished { index, status: status.into(), duration_ms });
    }
}

/// Cancels a verification the daemon runs, as Ctrl-C cancels `cairn verify`: its kernel is
/// killed, the cell that ran ends `interrupted`, the verdict is `interrupted`, and its answer (or
/// stream) says so.
#[utoipa::path(post, path = "/verifications/{id}/cancel", tag = "verifications", params(("id" = String, Path)),
    responses((status = 202, description = "`{verification_id, cancelled: true}`: it is stopping", body = Object),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "It has ended, or another process runs it", body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn cancel_verification(
    State(state): State<AppRef>,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    state.service.engine().authorize(&caller, Permission::Code, &Scope::everywhere())?;
    blocking(move || {
        state.service.engine().cancel_verification(&id)?;
        Ok((StatusCode::ACCEPTED, Json(json!({"verification_id": id, "cancelled": true}))).into_response())
    })
    .await
}

/// The daemon's spare kernel: whether it keeps one, and whether one is ready (with what a
/// verification must match to run on it).
#[utoipa::path(get, path = "/kernel/spare", tag = "verifications",
    responses((status = 200, description = "Whether the daemon keeps a spare kernel and whether one is ready", body = SpareKernel),
        (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn spare_kernel(State(state): State<AppRef>) -> Json<SpareKernel> {
    let status = state.service.engine().spare_kernel().map(|spare| spare.status()).unwrap_or_else(SpareStatus::off);
    Json(SpareKernel::from_engine(&status))
}

/// Sends the verification's id once its kernel started.
struct Started(mpsc::Sender<String>);

impl VerifyObserver for Started {
    fn started(&mut self, verification_id: &str) {
        let _ = self.0.send(verification_id.to_string());
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct VerificationQuery {
    /// At most this many, newest first (default 50).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
}

/// Verifications, newest first.
#[utoipa::path(get, path = "/verifications", tag = "verifications", params(VerificationQuery),
    responses((status = 200, description = "`{verifications: [...]}`", body = Object), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn list_verifications(
    State(state): State<AppRef>,
    ApiQuery(q): ApiQuery<VerificationQuery>,
) -> Result<Json<Value>, ApiError> {
    let limit = q.limit.unwrap_or(50);
    blocking(move || {
        let all = state.service.engine().verifications(limit)?;
        Ok(Json(json!({"verifications": all.iter().map(VerificationRecord::from_record).collect::<Vec<_>>()})))
    })
    .await
}

/// One verification: verdict, per-cell status, notebook or draft (its path, and as `draft_text` its text).
#[utoipa::path(get, path = "/verifications/{id}", tag = "verifications", params(("id" = String, Path)),
    responses((status = 200, description = "The verification", body = VerificationRecord), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn get_verification(
    State(state): State<AppRef>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<VerificationRecord>, ApiError> {
    blocking(move || {
        let v = state.service.engine().verification(&id)?;
        let mut out = VerificationRecord::from_record(&v);
        out.draft_text = state.service.engine().draft_text(&v);
        Ok(Json(out))
    })
    .await
}

/// The notebook a passed verification proved (nbformat 4.5 JSON, a provenance cell first); a
/// failed one has none: its draft is named in the 404's message.
#[utoipa::path(get, path = "/verifications/{id}/notebook", tag = "verifications", params(("id" = String, Path)),
    responses((status = 200, description = "The notebook", content_type = "application/x-ipynb+json", body = Object),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn verification_notebook(
    State(state): State<AppRef>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    blocking(move || {
        let bytes = state.service.engine().verification_notebook(&id)?;
        Ok(([(header::CONTENT_TYPE, "application/x-ipynb+json")], bytes).into_response())
    })
    .await
}
