//! The OpenAPI 3.1 document, generated from the handlers and the wire types: what every
//! operation answers, the bearer scheme, and the responses every request may get.

use axum::Json;
use axum::response::{IntoResponse, Response};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::http::{ErrorBody, ErrorDetail};
use super::{docs, exports, http, kernel, plans, runs, targets, team, verifications, web, workflows};
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
        bearer tokens from <state>/auth/viewer.token (read) and operator.token (read and change), or a principal's \
        token of `cairn user add`, allowed what its grants allow."),
    paths(http::health, http::list_daemons, openapi_json, runs::submit_run, runs::list_runs, runs::get_run, runs::run_events,
        runs::step_log, runs::run_timeline, runs::run_layers, runs::explain_step, runs::step_jobs, runs::get_step, runs::run_artifacts, runs::trace_artifacts, runs::cancel_run, runs::read_artifact,
        exports::run_ro_crate, exports::export_run, exports::verification_ro_crate,
        workflows::list_workflows, workflows::add_workflow, workflows::get_workflow,
        plans::create_plan, plans::list_plans, plans::get_plan, plans::execute_plan,
        kernel::submit_job, kernel::list_jobs, kernel::get_job, kernel::interrupt_kernel, kernel::restart_kernel,
        kernel::kernel_audit,
        targets::list_targets, targets::create_target, targets::probe_target, targets::check_readiness,
        verifications::create_verification, verifications::list_verifications, verifications::get_verification,
        verifications::verification_notebook, verifications::cancel_verification, verifications::spare_kernel,
        web::index, web::asset, web::login, web::notebook_export,
        docs::list_docs, docs::save_doc, docs::search_docs, docs::get_doc, docs::remove_doc,
        team::list_principals, team::add_principal, team::get_principal, team::rotate_principal, team::revoke_principal,
        team::add_grant, team::remove_grant, team::list_roles, team::add_role, team::remove_role, team::list_policies,
        team::set_policy, team::list_audit, team::whoami, team::list_quotas, team::set_quota, team::remove_quota),
    components(schemas(ErrorBody, ErrorDetail, wire::MissingGrant, wire::SpareKernel, http::Health, wire::DaemonsBody, wire::DaemonBody, wire::SubmitRun, wire::ReplayDirective, wire::RunResult,
        wire::RunList, wire::EventList, wire::StepLog, wire::RunTimeline, wire::TimelineAttempt, wire::Explanation, wire::PipelineJobs, wire::StepDetail, wire::ArtifactList,
        wire::TraceResult, wire::ExportResult, wire::ArtifactSlice, wire::WorkflowList, wire::WorkflowDetail, wire::AddWorkflow, wire::WorkflowAdded, wire::WorkflowProblem,
        wire::SubmitJob, wire::Job, wire::JobList, wire::Interrupted, wire::Restarted, runs::SseEventSchema, wire::WaitingNotice,
        runs::SseRunsSchema, wire::PlanRun, wire::ExecutePlan, wire::requests::ApprovedVia, wire::PlanSummary, wire::PlanList, wire::AddTarget,
        wire::Verify, wire::VerificationRecord, wire::VerifyResult, web::UiLogin,
        wire::SaveDoc, wire::Doc, wire::DocSaved, wire::DocList, wire::DocSummary, wire::DocSearchResult, wire::DocHit,
        wire::SnippetPart, wire::DocVerification, wire::DocVersionEntry,
        wire::AddPrincipal, wire::AddRole, wire::GrantRequest, wire::SetPolicy, wire::GrantBody, wire::PrincipalBody,
        wire::PrincipalList, wire::IssuedTokenBody, wire::RoleBody, wire::RoleList, wire::PolicyBody, wire::PolicyList,
        wire::ActBody, wire::AuditList, wire::AccessEntry, wire::Whoami, wire::SetQuota, wire::QuotaBody, wire::QuotaList)),
    modifiers(&BearerAuth, &CommonResponses, &Links),
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

/// The OpenAPI links of the API's natural chains: from a response to the next call, with the ids
/// it carries (a submitted run to its events, a plan to its execution, a verification to its
/// notebook, …). A client, and schemathesis' stateful phase, follows them instead of guessing ids.
struct Links;

/// One link: from the responses `statuses` of `method path`, named `name`, to the operation
/// `to`, with its parameters and request body as runtime expressions.
struct LinkSpec {
    method: &'static str,
    path: &'static str,
    statuses: &'static [&'static str],
    name: &'static str,
    to: &'static str,
    parameters: &'static [(&'static str, &'static str)],
    body: Option<fn() -> serde_json::Value>,
}

/// What a run's body leads to: the run itself, its events, timeline, artifacts and first step,
/// and its cancellation. `run` and `step` are where the body holds their ids.
macro_rules! run_links {
    ($method:literal, $path:literal, [$($status:literal),*], $run:literal, $step:literal) => {
        [
            ("GetRun", "get_run", &[("run_id", $run)] as &[(&str, &str)]),
            ("RunEvents", "run_events", &[("run_id", $run)]),
            ("RunTimeline", "run_timeline", &[("run_id", $run)]),
            ("RunLayers", "run_layers", &[("run_id", $run)]),
            ("RunArtifacts", "run_artifacts", &[("run_id", $run)]),
            ("CancelRun", "cancel_run", &[("run_id", $run)]),
            ("GetStep", "get_step", &[("run_id", $run), ("step_id", $step)]),
            ("StepLog", "step_log", &[("run_id", $run), ("step_id", $step)]),
            ("ExplainStep", "explain_step", &[("run_id", $run), ("step_id", $step)]),
            ("StepJobs", "step_jobs", &[("run_id", $run), ("step_id", $step)]),
        ]
        .map(|(name, to, parameters)| LinkSpec {
            method: $method,
            path: $path,
            statuses: &[$($status),*],
            name,
            to,
            parameters,
            body: None,
        })
    };
}

fn execute_body() -> serde_json::Value {
    serde_json::json!({"plan_id": "$response.body#/plan_id", "plan_checksum": "$response.body#/plan_checksum"})
}

fn link_specs() -> Vec<LinkSpec> {
    let one = |method, path, statuses, name, to, parameters| LinkSpec {
        method,
        path,
        statuses,
        name,
        to,
        parameters,
        body: None,
    };
    let mut links = Vec::new();
    links.extend(run_links!(
        "post",
        "/runs",
        ["200", "202"],
        "$response.body#/run_id",
        "$response.body#/steps/0/step_id"
    ));
    links.extend(run_links!(
        "get",
        "/runs/{run_id}",
        ["200"],
        "$response.body#/run_id",
        "$response.body#/steps/0/step_id"
    ));
    links.extend(run_links!(
        "post",
        "/plans/{name}/execute",
        ["200", "202"],
        "$response.body#/run_id",
        "$response.body#/steps/0/step_id"
    ));
    links.push(one("get", "/runs", &["200"], "GetRun", "get_run", &[("run_id", "$response.body#/runs/0/run_id")]));
    links.push(one(
        "post",
        "/runs/{run_id}/cancel",
        &["200"],
        "GetRun",
        "get_run",
        &[("run_id", "$response.body#/run_id")],
    ));
    links.push(one("post", "/plans", &["201"], "GetPlan", "get_plan", &[("name", "$response.body#/plan_name")]));
    // A plan's body holds its id and checksum: what its execution needs.
    let execute = |method, path, statuses, name_from| LinkSpec {
        body: Some(execute_body),
        ..one(method, path, statuses, "ExecutePlan", "execute_plan", name_from)
    };
    links.push(execute("post", "/plans", &["201"], &[("name", "$response.body#/plan_name")]));
    links.push(execute("get", "/plans/{name}", &["200"], &[("name", "$request.path.name")]));
    for (name, to) in [
        ("GetVerification", "get_verification"),
        ("VerificationNotebook", "verification_notebook"),
        ("CancelVerification", "cancel_verification"),
    ] {
        links.push(one(
            "post",
            "/verifications",
            &["200", "202"],
            name,
            to,
            &[("id", "$response.body#/verification_id")],
        ));
    }
    links.push(one("post", "/kernel/jobs", &["202"], "GetJob", "get_job", &[("job_id", "$response.body#/job_id")]));
    links.push(one("post", "/targets", &["201"], "ProbeTarget", "probe_target", &[("name", "$response.body#/name")]));
    links.push(one(
        "post",
        "/targets",
        &["201"],
        "CheckReadiness",
        "check_readiness",
        &[("name", "$response.body#/name")],
    ));
    links.push(one("post", "/docs", &["200", "201"], "GetDoc", "get_doc", &[("name", "$response.body#/name")]));
    links.push(one("post", "/docs", &["200", "201"], "RemoveDoc", "remove_doc", &[("name", "$response.body#/name")]));
    links.push(one("post", "/workflows", &["201"], "GetWorkflow", "get_workflow", &[("name", "$response.body#/name")]));
    links
}

impl Modify for Links {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::RefOr;
        use utoipa::openapi::link::LinkBuilder;
        for spec in link_specs() {
            let Some(item) = openapi.paths.paths.get_mut(spec.path) else { continue };
            let op = match spec.method {
                "get" => item.get.as_mut(),
                "post" => item.post.as_mut(),
                _ => None,
            };
            let Some(op) = op else { continue };
            for status in spec.statuses {
                let Some(RefOr::T(response)) = op.responses.responses.get_mut(*status) else { continue };
                let mut link = LinkBuilder::new().operation_id(spec.to);
                for (name, expression) in spec.parameters {
                    link = link.parameter(*name, *expression);
                }
                link = link.request_body(spec.body.map(|b| b()));
                response.links.insert(spec.name.to_string(), RefOr::T(link.build()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every link names a response the document has and an operation it has, and gives that
    /// operation every path parameter it takes.
    #[test]
    fn every_link_leads_from_a_declared_response_to_an_operation_with_its_path_parameters() {
        let doc = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let mut operations = std::collections::HashMap::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                if let Some(id) = op["operationId"].as_str() {
                    operations.insert(id.to_string(), (path.clone(), method.clone()));
                }
            }
        }
        let specs = link_specs();
        assert!(specs.len() >= 30, "{} links", specs.len());
        for spec in &specs {
            for status in spec.statuses {
                let link = &doc["paths"][spec.path][spec.method]["responses"][*status]["links"][spec.name];
                assert!(link.is_object(), "no link {} on {} {} {status}", spec.name, spec.method, spec.path);
            }
            let (to_path, _) = operations.get(spec.to).unwrap_or_else(|| panic!("no operation `{}`", spec.to));
            let wanted: Vec<&str> =
                to_path.split('/').filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}'))).collect();
            let given: Vec<&str> = spec.parameters.iter().map(|(n, _)| *n).collect();
            assert_eq!(given, wanted, "link {} to {}", spec.name, spec.to);
        }
    }
}
