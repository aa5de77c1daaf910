//! The read-only web app: its page and assets (embedded in the binary, so nothing is built or
//! fetched on the user's machine), the login that hands the page the Viewer token, and the
//! notebook exports it offers for download. Everything the page shows comes from this API with
//! that token, so the page can do exactly what a Viewer can: read.

use cairn_engine::EngineError;
use std::collections::HashMap;
use std::sync::Mutex;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use rust_embed::RustEmbed;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppRef;
use super::http::{ApiError, ApiPath, ApiQuery, ErrorBody, blocking};
use crate::auth::{self, LoginRefused};

#[derive(RustEmbed)]
#[folder = "web/"]
struct Assets;

/// Nonces of login codes already used, with their expiry (forgotten once expired).
pub type UsedLogins = Mutex<HashMap<String, i64>>;

/// What the page may load: only this daemon, no inline script, no framing.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
    connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

pub(super) fn routes() -> Router<AppRef> {
    Router::new().route("/", get(index)).route("/assets/{file}", get(asset)).route("/ui/login", get(login))
}

/// The web app's page. Needs no token: it holds no data, and signs in with a login link of
/// `cairn ui`.
#[utoipa::path(get, path = "/", tag = "web",
    responses((status = 200, description = "The web app", content_type = "text/html")))]
pub(super) async fn index() -> Response {
    serve("index.html").unwrap_or_else(|| missing("index.html").into_response())
}

/// A file of the web app (script, style sheet, icon). Needs no token.
#[utoipa::path(get, path = "/assets/{file}", tag = "web", params(("file" = String, Path)),
    responses(
        (status = 200, description = "The file", content(
            (String = "text/javascript"), (String = "text/css"), (String = "image/svg+xml"))),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn asset(ApiPath(file): ApiPath<String>) -> Response {
    // One plain file name: no path, nothing hidden, so nothing but the embedded files is reachable.
    let plain = !file.starts_with('.') && file.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    let found = if plain && file != "index.html" { serve(&file) } else { None };
    found.unwrap_or_else(|| missing(&file).into_response())
}

fn missing(file: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("the web app has no file `{file}`"))
}

fn serve(file: &str) -> Option<Response> {
    let content = Assets::get(file)?;
    let kind = match file.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        _ => "application/octet-stream",
    };
    let mut resp = (StatusCode::OK, content.data.into_owned()).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    // Revalidated on every load, so a new daemon's page is never mixed with an old script.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(etag) = HeaderValue::from_str(&format!("\"{}\"", hex::encode(&content.metadata.sha256_hash()[..12]))) {
        h.insert(header::ETAG, etag);
    }
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    Some(resp)
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LoginQuery {
    /// The code of a login link printed by `cairn ui`.
    #[param(min_length = 1)]
    pub code: String,
}

/// The web app's session: the Viewer token, which reads and never changes anything.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct UiLogin {
    pub token: String,
    /// Always `viewer`: the web app never gets the Operator token.
    pub role: String,
}

/// Exchanges a login code of `cairn ui` (valid for two minutes, once) for the Viewer token.
#[utoipa::path(get, path = "/ui/login", tag = "web", params(LoginQuery),
    responses((status = 200, body = UiLogin), (status = 400, body = ErrorBody),
        (status = 401, description = "The code is malformed, forged, expired or used", body = ErrorBody)))]
pub(super) async fn login(
    State(state): State<AppRef>,
    ApiQuery(q): ApiQuery<LoginQuery>,
) -> Result<Response, ApiError> {
    let now = jiff::Timestamp::now().as_millisecond();
    let refused = |message: String| ApiError::new(StatusCode::UNAUTHORIZED, "invalid_login", message);
    let (nonce, expires) =
        auth::check_login_code(&state.tokens.viewer, &q.code, now).map_err(|e: LoginRefused| refused(e.to_string()))?;
    {
        let mut used = state.logins.lock().unwrap_or_else(|p| p.into_inner());
        used.retain(|_, exp| *exp >= now);
        if used.insert(nonce, expires).is_some() {
            return Err(refused("this login link was used already; run `cairn ui` for a new one".into()));
        }
    }
    let mut resp = Json(UiLogin { token: state.tokens.viewer.clone(), role: "viewer".into() }).into_response();
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(resp)
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct NotebookQuery {
    /// `1` for the workflow export (the newest passed verification's notebook); `0` or absent
    /// for the audit export (every retained job of the session kernel).
    #[param(pattern = "^(0|1)$")]
    pub workflow: Option<String>,
}

/// A notebook to download (nbformat 4.5): the audit export of the session kernel, every retained
/// job in order, dead ends included, each with a provenance header; or, with `workflow=1`, the
/// workflow export: the newest passed verification's notebook, its cells as verified, with an
/// introduction stating what the run proved and what it did not.
#[utoipa::path(get, path = "/api/notebook", tag = "kernel", params(NotebookQuery),
    responses((status = 200, description = "The notebook, as an attachment", content_type = "application/x-ipynb+json", body = Object),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, description = "No verification has passed yet", body = ErrorBody),
        (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn notebook_export(
    State(state): State<AppRef>,
    ApiQuery(q): ApiQuery<NotebookQuery>,
) -> Result<Response, ApiError> {
    let workflow = match q.workflow.as_deref() {
        None | Some("0") => false,
        Some("1") => true,
        Some(other) => {
            return Err(EngineError::invalid_field(
                "workflow",
                format!("workflow is `{other}`; give 1 (or 0, the default)"),
            )
            .into());
        }
    };
    blocking(move || {
        let (name, bytes) = if workflow {
            let (v, bytes) = state.service.engine().newest_notebook()?;
            (format!("{}-{}.ipynb", file_stem(&v.title), v.id), bytes)
        } else {
            let audit = state.service.session().audit(&crate::wire::time)?;
            ("cairn-audit.ipynb".to_string(), serde_json::to_vec_pretty(&audit).unwrap_or_default())
        };
        let mut resp = ([(header::CONTENT_TYPE, "application/x-ipynb+json")], bytes).into_response();
        if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{name}\"")) {
            resp.headers_mut().insert(header::CONTENT_DISPOSITION, v);
        }
        Ok(resp)
    })
    .await
}

/// A title as a file name: letters, digits, `-` and `_` only.
fn file_stem(title: &str) -> String {
    let stem: String = title
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '-' })
        .take(64)
        .collect();
    if stem.trim_matches('-').is_empty() { "workflow".into() } else { stem }
}
