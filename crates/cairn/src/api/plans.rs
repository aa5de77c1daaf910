//! Plans: make one (read-only), list them, read one, and the approval that executes one.

use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cairn_core::access::Caller;
use serde_json::Value;

use super::AppRef;
use super::http::{ApiError, ApiJson, ApiPath, ErrorBody, blocking};
use super::runs::run_answer;
use crate::wire::{ExecutePlan, PlanList, PlanRun, RunResult, to_value};

/// Plans a run and stores the immutable plan: the workflow version, every resolved command,
/// every input file with its SHA-256, every effect. Nothing is created at `run_dir`. With
/// `replay`, a replay of a finished run (the workflow may then be omitted: the source's).
#[utoipa::path(post, path = "/plans", tag = "plans", request_body = PlanRun,
    responses((status = 201, description = "The plan", body = Object), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "A plan with this name exists", body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn create_plan(
    State(state): State<AppRef>,
    Extension(caller): Extension<Caller>,
    ApiJson(body): ApiJson<PlanRun>,
) -> Result<Response, ApiError> {
    blocking(move || {
        let engine = state.service.engine();
        let plan = engine.make_plan(&caller, &body.into_request()?)?;
        let mut answer = to_value(&plan);
        // A replay plan also says what its pipeline steps would run (a forecast, not in the plan).
        let jobs = engine.predict_plan_jobs(&plan);
        if !jobs.is_empty() {
            answer["jobs"] = to_value(&crate::wire::ReplayPreview::predicted(&jobs));
        }
        Ok((StatusCode::CREATED, Json(answer)).into_response())
    })
    .await
}

/// Stored plans, newest first.
#[utoipa::path(get, path = "/plans", tag = "plans",
    responses((status = 200, body = PlanList), (status = 401, body = ErrorBody)), security(("bearer" = [])))]
pub(super) async fn list_plans(State(state): State<AppRef>) -> Result<Json<PlanList>, ApiError> {
    blocking(move || Ok(Json(PlanList::from_listings(state.service.engine().plans()?)))).await
}

/// One stored plan, checked against the checksum it was stored with (409 if it was altered).
#[utoipa::path(get, path = "/plans/{name}", tag = "plans", params(("name" = String, Path)),
    responses((status = 200, description = "The plan", body = Object), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "The stored plan was altered", body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn get_plan(
    State(state): State<AppRef>,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    blocking(move || Ok(Json(to_value(&state.service.engine().load_plan(&name)?)))).await
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
pub(super) async fn execute_plan(
    State(state): State<AppRef>,
    Extension(caller): Extension<Caller>,
    ApiPath(name): ApiPath<String>,
    ApiJson(body): ApiJson<ExecutePlan>,
) -> Result<Response, ApiError> {
    let channel = body.approval.map(Into::into).unwrap_or(cairn_core::plan::ApprovalChannel::Api);
    blocking(move || {
        Ok(run_answer(&state.service.execute_plan(&caller, &name, &body.plan_id, &body.plan_checksum, channel)?))
    })
    .await
}
