//! The verification endpoints: verify a document in a fresh scratch kernel (in the daemon, which
//! owns kernels), list verifications, read one and its proven notebook.

use std::path::PathBuf;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use cairn_engine::verify::{Quiet, VerifyRequest};
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa::{IntoParams, ToSchema};

use super::api::{ApiError, ApiJson, ApiPath, ApiQuery, AppRef, ErrorBody, blocking};

/// The longest cell timeout a request may ask for.
const MAX_CELL_TIMEOUT_SECS: u64 = 24 * 3600;

/// `POST /verifications`: give the document's text, or the path of a document file on this machine.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateVerification {
    /// The document itself: markdown with fenced python cells, or an .ipynb's JSON.
    pub document: Option<String>,
    /// An absolute path of a markdown or .ipynb file on the daemon's machine.
    pub path: Option<String>,
    /// Names the verification, its notebook and its draft (default: the file name, or
    /// `document-<sha>` for a text).
    pub title: Option<String>,
    /// Per-cell timeout in seconds (default 600).
    #[schema(minimum = 1, maximum = 86400)]
    pub timeout_secs: Option<u64>,
    /// Refuse (409) instead of waiting when the kernel slot is taken.
    pub no_wait: Option<bool>,
}

/// Verifies a document in a fresh, disposable kernel and answers when it has a verdict. A
/// verification's side effects (files its cells wrote) are not undone.
#[utoipa::path(post, path = "/verifications", tag = "verifications", request_body = CreateVerification,
    responses((status = 200, description = "The verification: verdict, cells, notebook or draft", body = Object),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 409, description = "The kernel slot is taken and no_wait was set", body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn create_verification(
    State(state): State<AppRef>,
    ApiJson(body): ApiJson<CreateVerification>,
) -> Result<Json<Value>, ApiError> {
    blocking(move || {
        let timeout = body.timeout_secs.unwrap_or(600);
        if !(1..=MAX_CELL_TIMEOUT_SECS).contains(&timeout) {
            return Err(ApiError::invalid(format!("timeout_secs must be 1 to {MAX_CELL_TIMEOUT_SECS}")));
        }
        let (document, title) = match (body.document, body.path) {
            (Some(_), Some(_)) | (None, None) => {
                return Err(ApiError::invalid("give exactly one of `document` (the text) and `path` (a file)"));
            }
            (None, Some(p)) => {
                let path = PathBuf::from(&p);
                if !path.is_absolute() {
                    return Err(ApiError::invalid(format!("path `{p}` is relative; give an absolute path")));
                }
                (path, body.title)
            }
            (Some(text), None) => {
                let sha = cairn_core::canonical::sha256_hex(text.as_bytes());
                // A notebook is JSON; anything else is read as markdown.
                let ext = if text.trim_start().starts_with('{') { "ipynb" } else { "md" };
                let dir = state.engine.state.path().join("documents");
                std::fs::create_dir_all(&dir).map_err(|e| ApiError::from(cairn_engine::EngineError::io(&dir, e)))?;
                let path = dir.join(format!("{}.{ext}", &sha[..16]));
                if !path.exists() {
                    std::fs::write(&path, text.as_bytes())
                        .map_err(|e| ApiError::from(cairn_engine::EngineError::io(&path, e)))?;
                }
                let title = body.title.or_else(|| Some(format!("document-{}", &sha[..12])));
                (path, title)
            }
        };
        let req = VerifyRequest {
            document: Some(document),
            title,
            cell_timeout: Duration::from_secs(timeout),
            memory_limit: None,
            python: std::env::var_os("CAIRN_PYTHON").filter(|p| !p.is_empty()).map(PathBuf::from),
            no_wait: body.no_wait.unwrap_or(false),
            cancel: None,
        };
        let report = state.engine.verify(&req, &mut Quiet)?;
        Ok(Json(crate::verify::report_json(&report)))
    })
    .await
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct VerificationQuery {
    /// At most this many, newest first (default 50).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
}

fn record_json(v: &cairn_core::store::VerificationRecord) -> Value {
    json!({
        "verification_id": v.id,
        "title": v.title,
        "document": v.document,
        "document_sha256": v.document_sha256,
        "verdict": v.verdict,
        "cells": v.cells,
        "notebook": v.notebook,
        "draft": v.draft,
        "error": v.error,
        "created_at": v.created_at,
        "finished_at": v.finished_at,
    })
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
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::invalid("limit must be between 1 and 1000"));
    }
    blocking(move || {
        let all = state.engine.store.verifications(limit).map_err(cairn_engine::EngineError::from)?;
        Ok(Json(json!({"verifications": all.iter().map(record_json).collect::<Vec<_>>()})))
    })
    .await
}

fn find(state: &AppRef, id: &str) -> Result<cairn_core::store::VerificationRecord, ApiError> {
    state.engine.store.verification(id).map_err(cairn_engine::EngineError::from)?.ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("verification `{id}` was not found; list them with GET /verifications"),
        )
    })
}

/// One verification: verdict, per-cell status, notebook or draft (its path, and as `draft_text` its text).
#[utoipa::path(get, path = "/verifications/{id}", tag = "verifications", params(("id" = String, Path)),
    responses((status = 200, description = "The verification", body = Object), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn get_verification(
    State(state): State<AppRef>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    blocking(move || {
        let v = find(&state, &id)?;
        let mut out = record_json(&v);
        out["draft_text"] = v.draft.as_deref().map(draft_text).into();
        Ok(Json(out))
    })
    .await
}

/// The notebook a passed verification proved (nbformat 4.5 JSON, a provenance cell first); a
/// failed one has none: its draft is named in the 404's message.
#[utoipa::path(get, path = "/verifications/{id}/notebook", tag = "verifications", params(("id" = String, Path)),
    responses((status = 200, description = "The notebook (application/x-ipynb+json)", body = Object),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn verification_notebook(
    State(state): State<AppRef>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    blocking(move || {
        let v = find(&state, &id)?;
        let Some(path) = &v.notebook else {
            let why = match &v.draft {
                Some(d) => format!("verification `{id}` did not pass, so it proved no notebook; its draft is {d}"),
                None => format!(
                    "verification `{id}` has no notebook (verdict: {})",
                    v.verdict.as_deref().unwrap_or("none yet")
                ),
            };
            return Err(ApiError::new(StatusCode::NOT_FOUND, "not_found", why));
        };
        let bytes = std::fs::read(path).map_err(|e| {
            ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("the notebook {path} cannot be read: {e}"))
        })?;
        Ok(([(header::CONTENT_TYPE, "application/x-ipynb+json")], bytes).into_response())
    })
    .await
}

/// The most of a draft `GET /verifications/{id}` carries.
const DRAFT_TEXT_LIMIT: usize = 256 << 10;

/// A failed verification's draft as text, cut at [`DRAFT_TEXT_LIMIT`] (with a note saying so), or
/// why it cannot be read: the draft is overwritten by the next failure of the same title.
fn draft_text(path: &str) -> String {
    match std::fs::read(path) {
        Ok(bytes) if bytes.len() > DRAFT_TEXT_LIMIT => format!(
            "{}\n[… cut at {DRAFT_TEXT_LIMIT} bytes; the whole draft is {path}]",
            String::from_utf8_lossy(&bytes[..DRAFT_TEXT_LIMIT])
        ),
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => format!("[the draft {path} cannot be read: {e}]"),
    }
}
