//! The HTTP API: JSON over loopback, bearer tokens for two roles, JSON error bodies everywhere,
//! and an OpenAPI 3.1 document generated from the handlers and the wire types. One file per
//! resource; each handler parses its request, makes one engine call and answers with a wire
//! object.

mod docs;
mod exports;
mod http;
mod kernel;
mod openapi;
mod plans;
mod runs;
mod targets;
mod team;
mod verifications;
mod web;
mod workflows;

use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::Instant;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post, put};
use axum::{Router, middleware};
use cairn_engine::Service;

pub use docs::DOCS_BODY_LIMIT;
pub use http::{ApiError, ErrorBody, ErrorDetail, is_read};
pub use openapi::ApiDoc;
pub use web::UsedLogins;

use crate::auth::Tokens;

/// Bodies above this are refused with 413 before they are parsed.
pub const BODY_LIMIT: usize = 1 << 20;

pub struct AppState {
    /// This daemon's own URL (`http://127.0.0.1:PORT`).
    pub url: String,
    pub service: Arc<Service>,
    pub tokens: Tokens,
    pub started: Instant,
    /// Milliseconds since `started` of the last request, for the idle exit.
    pub last_activity: Arc<AtomicI64>,
    /// Becomes true when the daemon stops: open event streams end, so shutdown does not wait on
    /// their followers.
    pub closing: tokio::sync::watch::Receiver<bool>,
    /// Cancelled when the daemon stops: ends the MCP sessions' streams.
    pub mcp_closing: tokio_util::sync::CancellationToken,
    /// The web app's login codes already used, so each works once.
    pub logins: UsedLogins,
}

pub(crate) type AppRef = Arc<AppState>;

/// The daemon's whole router: the API, the web app and the MCP servers.
pub fn router(state: AppRef) -> Router {
    let api = api_router(state.clone());
    // The MCP servers inside the daemon call the API in-process, through the same middleware.
    let mcp = crate::mcp::http_router(api.clone(), &state.tokens.viewer, state.mcp_closing.clone())
        .layer(middleware::from_fn_with_state(state.clone(), http::require_any_token));
    Router::new()
        .merge(web::routes())
        .merge(mcp)
        .fallback(http::not_found)
        .method_not_allowed_fallback(http::method_not_allowed)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn_with_state(state.clone(), http::check_host))
        .with_state(state)
        .merge(api)
}

/// The HTTP API itself, with its token checks, body limit and host check.
fn api_router(state: AppRef) -> Router {
    let authed = Router::new()
        .route("/runs", get(runs::list_runs).post(runs::submit_run))
        .route("/runs/{run_id}", get(runs::get_run))
        .route("/runs/{run_id}/events", get(runs::run_events))
        .route("/runs/{run_id}/artifacts", get(runs::run_artifacts))
        .route("/runs/{run_id}/steps/{step_id}", get(runs::get_step))
        .route("/runs/{run_id}/timeline", get(runs::run_timeline))
        .route("/runs/{run_id}/layers", get(runs::run_layers))
        .route("/runs/{run_id}/steps/{step_id}/log", get(runs::step_log))
        .route("/runs/{run_id}/steps/{step_id}/explain", get(runs::explain_step))
        .route("/runs/{run_id}/steps/{step_id}/jobs", get(runs::step_jobs))
        .route("/runs/{run_id}/steps/{step_id}/artifacts/{name}", get(runs::read_artifact))
        .route("/runs/{run_id}/cancel", post(runs::cancel_run))
        .route("/runs/{run_id}/ro-crate", get(exports::run_ro_crate))
        .route("/runs/{run_id}/export", get(exports::export_run))
        .route("/artifacts", get(runs::trace_artifacts))
        .route("/workflows", get(workflows::list_workflows).post(workflows::add_workflow))
        .route("/workflows/{name}", get(workflows::get_workflow))
        .route("/plans", get(plans::list_plans).post(plans::create_plan))
        .route("/plans/{name}", get(plans::get_plan))
        .route("/plans/{name}/execute", post(plans::execute_plan))
        .route("/kernel/jobs", get(kernel::list_jobs).post(kernel::submit_job))
        .route("/kernel/jobs/{job_id}", get(kernel::get_job))
        .route("/kernel/interrupt", post(kernel::interrupt_kernel))
        .route("/kernel/restart", post(kernel::restart_kernel))
        .route("/kernel/audit", get(kernel::kernel_audit))
        .route("/targets", get(targets::list_targets).post(targets::create_target))
        .route("/targets/{name}/probe", post(targets::probe_target))
        .route("/targets/{name}/readiness", get(targets::check_readiness))
        .route("/verifications", get(verifications::list_verifications).post(verifications::create_verification))
        .route("/verifications/{id}", get(verifications::get_verification))
        .route("/verifications/{id}/notebook", get(verifications::verification_notebook))
        .route("/verifications/{id}/cancel", post(verifications::cancel_verification))
        .route("/kernel/spare", get(verifications::spare_kernel))
        .route("/daemons", get(http::list_daemons))
        .route("/verifications/{id}/ro-crate", get(exports::verification_ro_crate))
        .route("/api/notebook", get(web::notebook_export))
        .route("/docs", get(docs::list_docs).post(docs::save_doc).layer(DefaultBodyLimit::max(docs::DOCS_BODY_LIMIT)))
        .route("/docs/search", get(docs::search_docs))
        .route("/docs/{name}", get(docs::get_doc).delete(docs::remove_doc))
        .route("/principals", get(team::list_principals).post(team::add_principal))
        .route("/principals/{name}", get(team::get_principal))
        .route("/principals/{name}/rotate", post(team::rotate_principal))
        .route("/principals/{name}/revoke", post(team::revoke_principal))
        .route("/principals/{name}/grants", post(team::add_grant).delete(team::remove_grant))
        .route("/roles", get(team::list_roles).post(team::add_role))
        .route("/roles/{name}", axum::routing::delete(team::remove_role))
        .route("/policies", get(team::list_policies))
        .route("/policies/{workflow}", put(team::set_policy))
        .route("/audit", get(team::list_audit))
        .route("/quotas", get(team::list_quotas).put(team::set_quota).delete(team::remove_quota))
        .route("/whoami", get(team::whoami))
        .route_layer(middleware::from_fn_with_state(state.clone(), http::require_token));
    Router::new()
        .route("/health", get(http::health))
        .route("/openapi.json", get(openapi::openapi_json))
        .merge(authed)
        .method_not_allowed_fallback(http::method_not_allowed)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn_with_state(state.clone(), http::check_host))
        .with_state(state)
}
