//! Registered workflows: the list, and one version in detail.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use utoipa::IntoParams;

use super::AppRef;
use super::http::{ApiError, ApiPath, ApiQuery, ErrorBody, blocking};
use crate::wire::{WorkflowDetail, WorkflowList};

/// Registered workflows and versions.
#[utoipa::path(get, path = "/workflows", tag = "workflows",
    responses((status = 200, body = WorkflowList), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn list_workflows(State(state): State<AppRef>) -> Result<Json<WorkflowList>, ApiError> {
    blocking(move || Ok(Json(WorkflowList::from_records(&state.service.engine().workflows()?)))).await
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
        return Err(ApiError::invalid("name a workflow without `@`; choose a version with ?version="));
    }
    let reference = match &q.version {
        Some(v) => format!("{name}@{v}"),
        None => name,
    };
    blocking(move || Ok(Json(WorkflowDetail::from_loaded(&state.service.engine().load_workflow(&reference)?)))).await
}
