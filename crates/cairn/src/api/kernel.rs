//! The session kernel: queue a job, list and read jobs, interrupt, restart, the audit notebook.

use axum::Extension;
use cairn_core::access::{Caller, Permission, Scope};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;
use utoipa::IntoParams;

use super::AppRef;
use super::http::{ApiError, ApiJson, ApiPath, ApiQuery, ErrorBody, blocking};
use cairn_engine::verify::StopHow;

use crate::wire::{self, Interrupted, Job, JobList, Restarted, SubmitJob};

/// Queues a job for the session kernel. Refused (409) while a verification holds the kernel slot.
#[utoipa::path(post, path = "/kernel/jobs", tag = "kernel", request_body = SubmitJob,
    responses((status = 202, body = Job), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 409, description = "A verification holds the kernel slot", body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn submit_job(
    State(state): State<AppRef>,
    Extension(caller): Extension<Caller>,
    ApiJson(body): ApiJson<SubmitJob>,
) -> Result<Response, ApiError> {
    state.service.engine().authorize(&caller, Permission::Code, &Scope::everywhere())?;
    let timeout = body.timeout_secs.map(Duration::from_secs);
    blocking(move || {
        let job = state.service.session().submit(&body.code, timeout)?;
        Ok((StatusCode::ACCEPTED, Json(Job::from_record(&job))).into_response())
    })
    .await
}

/// Every retained job of the session kernel, oldest first.
#[utoipa::path(get, path = "/kernel/jobs", tag = "kernel",
    responses((status = 200, body = JobList), (status = 401, body = ErrorBody)), security(("bearer" = [])))]
pub(super) async fn list_jobs(State(state): State<AppRef>) -> Result<Json<JobList>, ApiError> {
    blocking(move || {
        let mut jobs: Vec<Job> = state.service.session().jobs()?.iter().map(Job::from_record).collect();
        // Verifications in progress (here or in a `cairn verify` of this state root) are jobs a
        // person can see and stop too.
        jobs.extend(state.service.engine().live_verifications().iter().map(Job::from_live));
        Ok(Json(JobList { jobs }))
    })
    .await
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct JobWait {
    /// Seconds (0 to 60) to wait for a session job to end, or (with `outputs`) to have more
    /// outputs than that, before answering: a follower's wait, woken by the job's own saves. A
    /// verification's id answers at once.
    #[param(maximum = 60)]
    pub wait: Option<u64>,
    /// With `wait`: answer as soon as the job has more outputs than this.
    pub outputs: Option<usize>,
}

/// One job: its status, outputs so far, timings.
#[utoipa::path(get, path = "/kernel/jobs/{job_id}", tag = "kernel", params(("job_id" = String, Path), JobWait),
    responses((status = 200, body = Job), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn get_job(
    State(state): State<AppRef>,
    ApiPath(job_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<JobWait>,
) -> Result<Json<Job>, ApiError> {
    blocking(move || {
        if job_id.starts_with("ver_") {
            let engine = state.service.engine();
            if let Some(live) = engine.live_verification(&job_id) {
                return Ok(Json(Job::from_live(&live)));
            }
            // Finished (or its process died): the record says which.
            return match engine.verification(&job_id) {
                Ok(v) => Ok(Json(Job::from_verification(&v))),
                Err(cairn_engine::EngineError::VerificationNotFound { .. }) => {
                    Err(cairn_engine::EngineError::JobNotFound { job_id }.into())
                }
                Err(e) => Err(e.into()),
            };
        }
        let job = match q.wait {
            Some(secs) => state.service.session().job_when(&job_id, q.outputs, Duration::from_secs(secs))?,
            None => state.service.session().job(&job_id)?,
        };
        Ok(Json(Job::from_record(&job)))
    })
    .await
}

/// Sends KeyboardInterrupt to the running job (the kernel and its state survive), and stops any
/// verification in progress: no further cell, the running one interrupted, then killed after 2 s.
#[utoipa::path(post, path = "/kernel/interrupt", tag = "kernel",
    responses((status = 200, body = Interrupted), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn interrupt_kernel(
    State(state): State<AppRef>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Interrupted>, ApiError> {
    state.service.engine().authorize(&caller, Permission::Code, &Scope::everywhere())?;
    blocking(move || {
        let verifications = state.service.engine().stop_verifications(StopHow::Interrupt);
        Ok(Json(Interrupted { interrupted: state.service.session().interrupt(), verifications }))
    })
    .await
}

/// Kills the session kernel (its state is lost; queued and running jobs end `cancelled`), and the
/// kernel of any verification in progress; the next job starts a fresh one.
#[utoipa::path(post, path = "/kernel/restart", tag = "kernel",
    responses((status = 200, body = Restarted), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn restart_kernel(
    State(state): State<AppRef>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Restarted>, ApiError> {
    state.service.engine().authorize(&caller, Permission::Code, &Scope::everywhere())?;
    blocking(move || {
        let verifications = state.service.engine().stop_verifications(StopHow::Kill);
        let r = state.service.session().restart()?;
        Ok(Json(Restarted { killed_session: r.killed_session, cancelled: r.cancelled, verifications }))
    })
    .await
}

/// The audit notebook (nbformat 4.5): every retained job in order, dead ends included, each with
/// a provenance header.
#[utoipa::path(get, path = "/kernel/audit", tag = "kernel",
    responses((status = 200, description = "The notebook", body = Object), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn kernel_audit(State(state): State<AppRef>) -> Result<Json<Value>, ApiError> {
    blocking(move || Ok(Json(state.service.session().audit(&wire::time)?))).await
}
