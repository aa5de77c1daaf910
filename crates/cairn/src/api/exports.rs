//! RO-Crate exports: a run (a Provenance Run Crate) or a verification (a Process Run Crate) as a
//! zip, served whole (`…/ro-crate`), or written and named (`…/export`, what the MCP tool
//! `export_run` answers with). Each is kept as `<state>/exports/<run|verification>-ID.ro-crate.zip`
//! and replaced by the next export of the same subject: nothing in the registry changes, so a
//! Viewer may ask.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use cairn_engine::ExportSubject;
use serde::Deserialize;
use utoipa::IntoParams;

use super::AppRef;
use super::http::{ApiError, ApiPath, ApiQuery, ErrorBody, blocking};
use crate::wire::ExportResult;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct ExportQuery {
    /// Copy the artifacts and input files into the crate (default true); false references them
    /// by path and SHA-256 only.
    data: Option<bool>,
}

async fn write(state: AppRef, subject: ExportSubject, data: bool) -> Result<cairn_engine::ExportResult, ApiError> {
    blocking(move || Ok(state.service.engine().export_to_state(&subject, data)?)).await
}

/// The zip, streamed from the file just written.
async fn zip_response(done: &cairn_engine::ExportResult) -> Result<Response, ApiError> {
    let file = tokio::fs::File::open(&done.path)
        .await
        .map_err(|e| ApiError::from(cairn_engine::EngineError::io(&done.path, e)))?;
    let mut resp = Body::from_stream(tokio_util::io::ReaderStream::new(file)).into_response();
    let name = done.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/zip"));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(done.bytes));
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{name}\"")) {
        headers.insert(header::CONTENT_DISPOSITION, v);
    }
    Ok(resp)
}

/// A run as a zipped Provenance Run Crate 0.5 (RO-Crate 1.1): its workflow, input and input
/// files, steps and attempts, artifacts with their SHA-256, the validator's verdict, its replay
/// lineage and the targets that ran it.
#[utoipa::path(get, path = "/runs/{run_id}/ro-crate", tag = "runs", params(("run_id" = String, Path), ExportQuery),
    responses((status = 200, description = "The zipped crate", content_type = "application/zip", body = Vec<u8>),
        (status = 400, description = "A bad query, or the run's target cannot be reached", body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, description = "An artifact no longer matches its record", body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn run_ro_crate(
    State(state): State<AppRef>,
    ApiPath(run_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<ExportQuery>,
) -> Result<Response, ApiError> {
    let done = write(state, ExportSubject::Run(cairn_core::ids::RunId::lookup(run_id)), q.data.unwrap_or(true)).await?;
    zip_response(&done).await
}

/// Writes the run's zipped crate under the state root and says where, with what it holds.
#[utoipa::path(get, path = "/runs/{run_id}/export", tag = "runs", params(("run_id" = String, Path), ExportQuery),
    responses((status = 200, body = ExportResult),
        (status = 400, description = "A bad query, or the run's target cannot be reached", body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, description = "An artifact no longer matches its record", body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn export_run(
    State(state): State<AppRef>,
    ApiPath(run_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<ExportQuery>,
) -> Result<Json<ExportResult>, ApiError> {
    let done = write(state, ExportSubject::Run(cairn_core::ids::RunId::lookup(run_id)), q.data.unwrap_or(true)).await?;
    Ok(Json(ExportResult::from_engine(&done)))
}

/// A verification as a zipped Process Run Crate 0.5: the document, the notebook it proved (or
/// its draft), the kernel's environment hash and its record.
#[utoipa::path(get, path = "/verifications/{id}/ro-crate", tag = "verifications", params(("id" = String, Path)),
    responses((status = 200, description = "The zipped crate", content_type = "application/zip", body = Vec<u8>),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn verification_ro_crate(
    State(state): State<AppRef>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    let done = write(state, ExportSubject::Verification(id), true).await?;
    zip_response(&done).await
}
