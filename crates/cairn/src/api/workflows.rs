//! Registered workflows: the list, and one version in detail.

use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use cairn_core::access::Caller;
use cairn_engine::EngineError;
use serde::Deserialize;
use utoipa::IntoParams;

use super::AppRef;
use super::http::{ApiError, ApiJson, ApiPath, ApiQuery, ErrorBody, blocking};
use crate::wire::{AddWorkflow, WorkflowAdded, WorkflowDetail, WorkflowList};

/// Registered workflows and versions.
#[utoipa::path(get, path = "/workflows", tag = "workflows",
    responses((status = 200, body = WorkflowList), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn list_workflows(State(state): State<AppRef>) -> Result<Json<WorkflowList>, ApiError> {
    blocking(move || Ok(Json(WorkflowList::from_records(&state.service.engine().workflows()?)))).await
}

/// Registers the workflow folder at `path` on the daemon's host, exactly as `cairn workflow add`:
/// validated (every problem reported at once, in `error.problems`), snapshotted content-addressed
/// into the state root, recorded. Executes nothing. 201 when newly registered, 200 when the same
/// content was registered already; other content under a registered `name@version` is 409.
#[utoipa::path(post, path = "/workflows", tag = "workflows", request_body = AddWorkflow,
    responses((status = 201, description = "Registered", body = WorkflowAdded),
        (status = 200, description = "The same content was registered already", body = WorkflowAdded),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 409, description = "Other content is registered under this name@version", body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, description = "The workflow is rejected: `error.problems` lists every problem", body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn add_workflow(
    State(state): State<AppRef>,
    Extension(caller): Extension<Caller>,
    ApiJson(body): ApiJson<AddWorkflow>,
) -> Result<(StatusCode, Json<WorkflowAdded>), ApiError> {
    let path = std::path::PathBuf::from(&body.path);
    if !path.is_absolute() {
        return Err(EngineError::invalid_field(
            "path",
            format!(
                "path `{}` is relative; give the workflow folder's absolute path on the daemon's host (the daemon's working directory is not the caller's)",
                body.path
            ),
        )
        .into());
    }
    blocking(move || {
        let added = state.service.engine().add_workflow(&caller, &path)?;
        let status = if added.newly_registered { StatusCode::CREATED } else { StatusCode::OK };
        Ok((status, Json(WorkflowAdded::from_added(&added))))
    })
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
    responses((status = 200, description = "The workflow", body = WorkflowDetail), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn get_workflow(
    State(state): State<AppRef>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<WorkflowQuery>,
) -> Result<Json<WorkflowDetail>, ApiError> {
    if name.contains('@') {
        return Err(
            EngineError::invalid_field("name", "name a workflow without `@`; choose a version with ?version=").into()
        );
    }
    let reference = match &q.version {
        Some(v) => format!("{name}@{v}"),
        None => name,
    };
    blocking(move || Ok(Json(WorkflowDetail::from_loaded(&state.service.engine().load_workflow(&reference)?)))).await
}
