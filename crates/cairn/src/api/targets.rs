//! The compute endpoints: targets with their last probe, registering one, probing one, and
//! checking a run directory's readiness on one. Probing and readiness contact the target (over
//! SSH) and change nothing there; a probe records what it observed (Operator), readiness only
//! reads (Viewer too).

use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use cairn_core::access::{Caller, Permission, Scope};
use serde::Deserialize;
use serde_json::Value;
use utoipa::IntoParams;

use super::AppRef;
use super::http::{ApiError, ApiJson, ApiPath, ApiQuery, ErrorBody, blocking};
use crate::wire::{AddTarget, targets_json, to_value};

/// Every target, `local` first, each with its last probe (`null` if never probed).
#[utoipa::path(get, path = "/targets", tag = "compute",
    responses((status = 200, description = "`{targets: [...]}`", body = Object), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn list_targets(State(state): State<AppRef>) -> Result<Json<Value>, ApiError> {
    blocking(move || Ok(Json(targets_json(&state.service.engine().targets_overview()?)))).await
}

/// Registers an SSH host. Nothing is contacted; probe it next.
#[utoipa::path(post, path = "/targets", tag = "compute", request_body = AddTarget,
    responses((status = 201, description = "The registered target", body = Object), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn create_target(
    State(state): State<AppRef>,
    Extension(caller): Extension<Caller>,
    ApiJson(body): ApiJson<AddTarget>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    blocking(move || {
        let spec = state.service.engine().add_target(&caller, &body.into_request())?;
        Ok((StatusCode::CREATED, Json(to_value(&spec))))
    })
    .await
}

/// Runs the fixed read-only probe on a target and keeps what it observed as its last probe.
#[utoipa::path(post, path = "/targets/{name}/probe", tag = "compute", params(("name" = String, Path)),
    responses((status = 200, description = "`{target, workspace_root, observed, probed_at}`", body = Object),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn probe_target(
    State(state): State<AppRef>,
    Extension(caller): Extension<Caller>,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    blocking(move || {
        let engine = state.service.engine();
        engine.authorize(&caller, Permission::Plan, &Scope { workflow: None, target: Some(name.clone()) })?;
        Ok(Json(to_value(&engine.probe_target(&name)?)))
    })
    .await
}

/// `GET /targets/{name}/readiness?run_dir=ABS`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CheckReadiness {
    /// Absolute, on the target: the directory a run would create.
    #[param(min_length = 1)]
    pub run_dir: String,
}

/// Whether `run_dir` on the target could take a new run now (absent, its parent a writable
/// directory without a symlink, the executor's programs present). Read-only.
#[utoipa::path(get, path = "/targets/{name}/readiness", tag = "compute", params(("name" = String, Path), CheckReadiness),
    responses((status = 200, description = "The facts observed, with `ready: true`", body = Object),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, description = "Not ready: the message names what is wrong", body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn check_readiness(
    State(state): State<AppRef>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(body): ApiQuery<CheckReadiness>,
) -> Result<Json<Value>, ApiError> {
    blocking(move || Ok(Json(state.service.engine().check_readiness(&name, &body.run_dir)?))).await
}
