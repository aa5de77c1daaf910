//! The OpenAPI 3.1 document, generated from the handlers and the wire types: what every
//! operation answers, the bearer scheme, and the responses every request may get.

use axum::Json;
use axum::response::{IntoResponse, Response};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::http::{ErrorBody, ErrorDetail};
use super::{docs, exports, http, kernel, plans, runs, targets, verifications, web, workflows};
use crate::wire;

/// This document. Needs no token.
#[utoipa::path(get, path = "/openapi.json", tag = "daemon", responses((status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json")))]
pub(super) async fn openapi_json() -> Response {
    let mut doc = ApiDoc::openapi();
    doc.info.version = env!("CARGO_PKG_VERSION").into();
    Json(doc).into_response()
}

#[derive(OpenApi)]
#[openapi(
    info(title = "Cairn daemon", description = "Durable, approved, reproducible workflow runs. Loopback only; \
        bearer tokens from <state>/auth/viewer.token (read) and operator.token (read and change)."),
    paths(http::health, http::list_daemons, openapi_json, runs::submit_run, runs::list_runs, runs::get_run, runs::run_events,
        runs::step_log, runs::run_timeline, runs::explain_step, runs::get_step, runs::run_artifacts, runs::trace_artifacts, runs::cancel_run, runs::read_artifact,
        exports::run_ro_crate, exports::export_run, exports::verification_ro_crate,
        workflows::list_workflows, workflows::add_workflow, workflows::get_workflow,
        plans::create_plan, plans::list_plans, plans::get_plan, plans::execute_plan,
        kernel::submit_job, kernel::list_jobs, kernel::get_job, kernel::interrupt_kernel, kernel::restart_kernel,
        kernel::kernel_audit,
        targets::list_targets, targets::create_target, targets::probe_target, targets::check_readiness,
        verifications::create_verification, verifications::list_verifications, verifications::get_verification,
        verifications::verification_notebook, verifications::cancel_verification, verifications::spare_kernel,
        web::index, web::asset, web::login, web::notebook_export,
        docs::list_docs, docs::save_doc, docs::search_docs, docs::get_doc, docs::remove_doc),
    components(schemas(ErrorBody, ErrorDetail, http::Health, wire::DaemonsBody, wire::DaemonBody, wire::SubmitRun, wire::ReplayDirective, wire::RunResult,
        wire::RunList, wire::EventList, wire::StepLog, wire::RunTimeline, wire::TimelineAttempt, wire::Explanation, wire::StepDetail, wire::ArtifactList,
        wire::TraceResult, wire::ExportResult, wire::ArtifactSlice, wire::WorkflowList, wire::WorkflowDetail, wire::AddWorkflow, wire::WorkflowAdded, wire::WorkflowProblem,
        wire::SubmitJob, wire::Job, wire::JobList, wire::Interrupted, wire::Restarted, runs::SseEventSchema,
        runs::SseRunsSchema, wire::PlanRun, wire::ExecutePlan, wire::requests::ApprovedVia, wire::PlanSummary, wire::PlanList, wire::AddTarget,
        wire::Verify, wire::VerificationRecord, wire::VerifyResult, web::UiLogin,
        wire::SaveDoc, wire::Doc, wire::DocSaved, wire::DocList, wire::DocSummary, wire::DocSearchResult, wire::DocHit,
        wire::SnippetPart, wire::DocVerification, wire::DocVersionEntry)),
    modifiers(&BearerAuth, &CommonResponses),
)]
pub struct ApiDoc;

struct BearerAuth;

/// What every operation may answer besides its own responses, and a description for each
/// response that has none (OpenAPI requires one).
struct CommonResponses;

impl Modify for CommonResponses {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
        for item in openapi.paths.paths.values_mut() {
            let ops = [&mut item.get, &mut item.post, &mut item.put, &mut item.delete, &mut item.patch];
            for op in ops.into_iter().flatten() {
                let responses = &mut op.responses.responses;
                // Every request is checked for a loopback Host first.
                responses.entry("403".to_string()).or_insert_with(|| {
                    RefOr::T(
                        ResponseBuilder::new()
                            .content(
                                "application/json",
                                ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorBody"))).build(),
                            )
                            .build(),
                    )
                });
                for (status, response) in responses.iter_mut() {
                    if let RefOr::T(r) = response
                        && r.description.is_empty()
                    {
                        r.description = describe_status(status).to_string();
                    }
                }
            }
        }
    }
}

fn describe_status(status: &str) -> &'static str {
    match status {
        "200" => "OK",
        "201" => "Created",
        "202" => "Accepted",
        "400" => "The request is malformed (bad JSON, query or path)",
        "401" => "No valid bearer token",
        "403" => "The Host header is not loopback, or a Viewer token asked for a change",
        "404" => "Not found",
        "409" => "Conflict with the stored state",
        "413" => "The body is larger than 1 MiB (4 MiB for POST /docs)",
        "415" => "The body is not sent as application/json",
        "422" => "The body or a parameter is invalid",
        _ => "See the error body",
    }
}

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        if let Some(components) = openapi.components.as_mut() {
            components.add_security_scheme("bearer", SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)));
        }
    }
}
