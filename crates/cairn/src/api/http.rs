//! The HTTP plumbing every endpoint shares: JSON error bodies (engine errors mapped once, by
//! [`crate::failure`]), extractors whose rejections are JSON too, running engine work off the
//! async threads, the loopback `Host` check, the bearer-token roles, and `GET /health`.

use std::sync::atomic::Ordering;

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use cairn_engine::EngineError;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{AppRef, BODY_LIMIT};
use cairn_core::access::{Caller, Permission};

use crate::auth::host_is_loopback;

pub use crate::wire::{ErrorBody, ErrorDetail};

#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    problems: Vec<crate::wire::WorkflowProblem>,
    missing: Option<Box<crate::wire::MissingGrant>>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status, code, message: message.into(), problems: Vec::new(), missing: None }
    }
}

impl ApiError {
    /// The status and the body it answers with: what a streamed answer sends as its last line.
    pub(crate) fn parts(self) -> (StatusCode, ErrorBody) {
        let error = ErrorDetail {
            code: self.code.to_string(),
            message: self.message,
            problems: self.problems,
            missing: self.missing.map(|m| *m),
        };
        (self.status, ErrorBody { error })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, body) = self.parts();
        let mut resp = (status, Json(body)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> ApiError {
        ApiError {
            status: crate::failure::http_status(e.kind()),
            code: e.code().as_str(),
            message: e.to_string(),
            problems: e.problems().iter().map(crate::wire::WorkflowProblem::from).collect(),
            missing: match &e {
                EngineError::Forbidden(denied) => Some(Box::new(crate::wire::MissingGrant::of(denied))),
                _ => None,
            },
        }
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
            message =
                format!("the body is larger than {BODY_LIMIT} bytes ({} for POST /docs)", super::docs::DOCS_BODY_LIMIT);
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
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", format!("the request's worker failed: {e}"))
    })?
}

pub(super) async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint; the API is described at GET /openapi.json")
}

pub(super) async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this endpoint does not take that method; see GET /openapi.json",
    )
}

/// Refuses any request not addressed to loopback by name (DNS rebinding), and notes activity.
pub(super) async fn check_host(State(state): State<AppRef>, req: Request, next: Next) -> Response {
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

/// A token is required: a state root's own (its owner's, or its viewer's), or a principal's.
/// MCP over HTTP: any valid token may connect; each tool call is then made to this API with that
/// same token, so what a caller may not do here, it may not do there either.
pub(super) async fn require_any_token(State(state): State<AppRef>, req: Request, next: Next) -> Response {
    match presented_caller(&state, req.headers()).await {
        Ok(_) => next.run(req).await,
        Err(refused) => refused,
    }
}

use crate::wire::CHANNEL_HEADER;

/// Who the request's bearer token is, or the response that refuses it: 401 for no token or one
/// nobody holds (a revoked principal's included), 503 when the registry cannot be read.
async fn presented_caller(state: &AppRef, headers: &axum::http::HeaderMap) -> Result<Caller, Response> {
    let channel = cairn_core::access::channel(headers.get(CHANNEL_HEADER).and_then(|h| h.to_str().ok()));
    let presented = crate::auth::bearer(headers).map(str::to_string);
    let refused = |presented: bool| {
        let message = if presented {
            "the bearer token is not valid for this daemon (unknown, or its principal was revoked or rotated); use <state>/auth/viewer.token or operator.token, or a token of `cairn user add`"
        } else {
            "send `Authorization: Bearer <token>`; the tokens are in <state>/auth/viewer.token (read) and operator.token (read and change), and `cairn user add` makes one per person"
        };
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message).into_response()
    };
    let Some(token) = presented else { return Err(refused(false)) };
    if let Some(access) = state.tokens.access_of(&token) {
        return Ok(Caller { access, channel });
    }
    let st = state.clone();
    let found = blocking(move || Ok(st.service.engine().access_of_token(&token)?)).await;
    match found {
        Ok(Some(access)) => Ok(Caller { access, channel }),
        Ok(None) => Err(refused(true)),
        Err(e) => Err(e.into_response()),
    }
}

/// Whether a request of this method only reads (a Viewer may make it); any other is a change.
/// The book's HTTP reference says which each operation is from this.
pub fn is_read(method: &str) -> bool {
    method.eq_ignore_ascii_case("GET") || method.eq_ignore_ascii_case("HEAD")
}

/// A caller is needed for every endpoint behind it, and put in the request for its handler.
/// Reads need `read`; a change needs a grant of some permission beyond it (each handler's use
/// case then checks the one it needs, on what it touches) — so a Viewer never changes anything,
/// and is refused before its body is read.
pub(super) async fn require_token(State(state): State<AppRef>, mut req: Request, next: Next) -> Response {
    let caller = match presented_caller(&state, req.headers()).await {
        Ok(caller) => caller,
        Err(refused) => return refused,
    };
    let reads = is_read(req.method().as_str());
    if reads && !caller.access.holds_anywhere(Permission::Read) {
        let denied = cairn_core::access::Denied {
            principal: caller.name().to_string(),
            permission: Permission::Read,
            resource: cairn_core::access::Scope::everywhere(),
        };
        return ApiError::from(EngineError::from(denied)).into_response();
    }
    if !reads && !caller.access.may_change_anything() {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "{} may only read, as a Viewer: changes (submitting, cancelling, approving, saving or removing a doc) need the Operator token or a principal granted a role that allows them",
                caller.name()
            ),
        )
        .into_response();
    }
    req.extensions_mut().insert(caller);
    next.run(req).await
}

// ------------------------------------------------------------------------------------ daemons

/// The daemons sharing this daemon's registry that are alive (a heartbeat within a lease, not
/// stopped), oldest first, each with the open runs it drives (holds the lease of). One on a
/// state root's own SQLite registry; a team's on a shared PostgreSQL one.
#[utoipa::path(get, path = "/daemons", tag = "daemon",
    responses((status = 200, body = crate::wire::DaemonsBody), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn list_daemons(State(state): State<AppRef>) -> Result<Json<crate::wire::DaemonsBody>, ApiError> {
    blocking(move || {
        let daemons = state.service.daemons()?;
        Ok(Json(crate::wire::DaemonsBody {
            daemons: daemons.iter().map(|(d, runs)| crate::wire::DaemonBody::of(d, runs)).collect(),
        }))
    })
    .await
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
pub(super) async fn health(State(state): State<AppRef>) -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        pid: std::process::id(),
        version: env!("CARGO_PKG_VERSION").into(),
        uptime_ms: state.started.elapsed().as_millis() as u64,
        active_runs: state.service.active_runs(),
    })
}
