//! A team's endpoints: principals and their grants, roles, per-workflow policies, the audit and
//! `whoami`. Reading them needs `read`; every change needs `admin`, which the engine checks.

use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use cairn_core::access::{ActQuery, Caller};
use cairn_engine::EngineError;

use super::AppRef;
use super::http::{ApiError, ApiJson, ApiPath, ApiQuery, ErrorBody, blocking};
use crate::wire::{
    AddPrincipal, AddRole, AuditList, AuditQuery, GrantBody, GrantRequest, IssuedTokenBody, PolicyBody, PolicyList,
    PrincipalBody, PrincipalList, QuotaBody, QuotaKey, QuotaList, RoleBody, RoleList, SetPolicy, SetQuota, Whoami,
    quota_measure, quota_subject,
};

/// Every principal with its grants, by name (the revoked ones too).
#[utoipa::path(get, path = "/principals", tag = "team",
    responses((status = 200, body = PrincipalList), (status = 401, body = ErrorBody)), security(("bearer" = [])))]
pub(super) async fn list_principals(State(state): State<AppRef>) -> Result<Json<PrincipalList>, ApiError> {
    blocking(move || {
        let all = state.service.engine().principals()?;
        Ok(Json(PrincipalList { principals: all.iter().map(PrincipalBody::of_view).collect() }))
    })
    .await
}

/// Adds a principal with a role everywhere. Its token is in this answer and nowhere else: the
/// registry keeps only its hash. Needs `admin`.
#[utoipa::path(post, path = "/principals", tag = "team", request_body = AddPrincipal,
    responses((status = 201, body = IssuedTokenBody), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, description = "No such role", body = ErrorBody),
        (status = 409, description = "The name is taken", body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn add_principal(
    State(state): State<AppRef>,
    Extension(caller): Extension<Caller>,
    ApiJson(body): ApiJson<AddPrincipal>,
) -> Result<(StatusCode, Json<IssuedTokenBody>), ApiError> {
    blocking(move || {
        let engine = state.service.engine();
        let issued = engine.add_principal(&caller, &body.name, &body.role)?;
        let grants = engine.principal(&body.name)?.grants;
        Ok((StatusCode::CREATED, Json(IssuedTokenBody::of(&issued, &grants))))
    })
    .await
}

/// A principal with its grants.
#[utoipa::path(get, path = "/principals/{name}", tag = "team", params(("name" = String, Path)),
    responses((status = 200, body = PrincipalBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn get_principal(
    State(state): State<AppRef>,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<PrincipalBody>, ApiError> {
    blocking(move || Ok(Json(PrincipalBody::of_view(&state.service.engine().principal(&name)?)))).await
}

/// Gives a principal a new token (in this answer only); the old one stops working at once.
/// Needs `admin`.
#[utoipa::path(post, path = "/principals/{name}/rotate", tag = "team", params(("name" = String, Path)),
    responses((status = 200, body = IssuedTokenBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn rotate_principal(
    State(state): State<AppRef>,
    Extension(caller): Extension<Caller>,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<IssuedTokenBody>, ApiError> {
    blocking(move || {
        let engine = state.service.engine();
        let issued = engine.rotate_principal(&caller, &name)?;
        Ok(Json(IssuedTokenBody::of(&issued, &engine.principal(&name)?.grants)))
    })
    .await
}

/// Revokes a principal: its token stops working; its name, grants and recorded acts stay.
/// Needs `admin`.
#[utoipa::path(post, path = "/principals/{name}/revoke", tag = "team", params(("name" = String, Path)),
    responses((status = 200, body = PrincipalBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn revoke_principal(
    State(state): State<AppRef>,
    Extension(caller): Extension<Caller>,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<PrincipalBody>, ApiError> {
    blocking(move || {
        let engine = state.service.engine();
        engine.revoke_principal(&caller, &name)?;
        Ok(Json(PrincipalBody::of_view(&engine.principal(&name)?)))
    })
    .await
}

/// Grants a role to a principal, everywhere or scoped to a workflow and/or a target. Granting
/// one it holds already changes nothing (200). Needs `admin`.
#[utoipa::path(post, path = "/principals/{name}/grants", tag = "team", params(("name" = String, Path)),
    request_body = GrantRequest,
    responses((status = 201, body = GrantBody), (status = 200, description = "It held this grant already", body = GrantBody),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn add_grant(
    State(state): State<AppRef>,
    Extension(caller): Extension<Caller>,
    ApiPath(name): ApiPath<String>,
    ApiJson(body): ApiJson<GrantRequest>,
) -> Result<(StatusCode, Json<GrantBody>), ApiError> {
    blocking(move || {
        let (grant, new) = state.service.engine().add_grant(&caller, &name, &body.role, &body.scope())?;
        let status = if new { StatusCode::CREATED } else { StatusCode::OK };
        Ok((status, Json(GrantBody::of(&grant))))
    })
    .await
}

/// Removes a grant (the same role and scope). Needs `admin`.
#[utoipa::path(delete, path = "/principals/{name}/grants", tag = "team", params(("name" = String, Path), GrantRequest),
    responses((status = 200, body = PrincipalBody), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn remove_grant(
    State(state): State<AppRef>,
    Extension(caller): Extension<Caller>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<GrantRequest>,
) -> Result<Json<PrincipalBody>, ApiError> {
    blocking(move || {
        let engine = state.service.engine();
        engine.remove_grant(&caller, &name, &q.role, &q.scope())?;
        Ok(Json(PrincipalBody::of_view(&engine.principal(&name)?)))
    })
    .await
}

/// The built-in roles, then the custom ones.
#[utoipa::path(get, path = "/roles", tag = "team",
    responses((status = 200, body = RoleList), (status = 401, body = ErrorBody)), security(("bearer" = [])))]
pub(super) async fn list_roles(State(state): State<AppRef>) -> Result<Json<RoleList>, ApiError> {
    blocking(move || Ok(Json(RoleList { roles: state.service.engine().roles()?.iter().map(RoleBody::of).collect() })))
        .await
}

/// Adds a custom role made of permissions. Needs `admin`.
#[utoipa::path(post, path = "/roles", tag = "team", request_body = AddRole,
    responses((status = 201, body = RoleBody), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn add_role(
    State(state): State<AppRef>,
    Extension(caller): Extension<Caller>,
    ApiJson(body): ApiJson<AddRole>,
) -> Result<(StatusCode, Json<RoleBody>), ApiError> {
    blocking(move || {
        let role = state.service.engine().add_role(&caller, &body.name, &body.permissions)?;
        Ok((StatusCode::CREATED, Json(RoleBody::of(&role))))
    })
    .await
}

/// Removes a custom role: its grants then allow nothing. Needs `admin`.
#[utoipa::path(delete, path = "/roles/{name}", tag = "team", params(("name" = String, Path)),
    responses((status = 200, body = RoleList), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn remove_role(
    State(state): State<AppRef>,
    Extension(caller): Extension<Caller>,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<RoleList>, ApiError> {
    blocking(move || {
        let engine = state.service.engine();
        engine.remove_role(&caller, &name)?;
        Ok(Json(RoleList { roles: engine.roles()?.iter().map(RoleBody::of).collect() }))
    })
    .await
}

/// Every workflow policy an admin has set.
#[utoipa::path(get, path = "/policies", tag = "team",
    responses((status = 200, body = PolicyList), (status = 401, body = ErrorBody)), security(("bearer" = [])))]
pub(super) async fn list_policies(State(state): State<AppRef>) -> Result<Json<PolicyList>, ApiError> {
    blocking(move || {
        Ok(Json(PolicyList { policies: state.service.engine().policies()?.iter().map(PolicyBody::of).collect() }))
    })
    .await
}

/// Sets a workflow's policy (its two-person rule). Needs `admin`.
#[utoipa::path(put, path = "/policies/{workflow}", tag = "team", params(("workflow" = String, Path)),
    request_body = SetPolicy,
    responses((status = 200, body = PolicyBody), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn set_policy(
    State(state): State<AppRef>,
    Extension(caller): Extension<Caller>,
    ApiPath(workflow): ApiPath<String>,
    ApiJson(body): ApiJson<SetPolicy>,
) -> Result<Json<PolicyBody>, ApiError> {
    blocking(move || {
        Ok(Json(PolicyBody::of(&state.service.engine().set_policy(&caller, &workflow, body.two_person)?)))
    })
    .await
}

/// The most a single audit page holds.
pub const AUDIT_LIMIT_MAX: usize = 10_000;

/// The recorded actions, newest first: who did what, through which surface, to what.
#[utoipa::path(get, path = "/audit", tag = "team", params(AuditQuery),
    responses((status = 200, body = AuditList), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn list_audit(
    State(state): State<AppRef>,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> Result<Json<AuditList>, ApiError> {
    let limit = q.limit.unwrap_or(100);
    if limit == 0 || limit > AUDIT_LIMIT_MAX {
        return Err(EngineError::invalid_field("limit", format!("limit must be 1 to {AUDIT_LIMIT_MAX}")).into());
    }
    let query = ActQuery { principal: q.principal, action: q.action, object: q.object, limit };
    blocking(move || {
        Ok(Json(AuditList {
            acts: state.service.engine().audit(&query)?.iter().map(crate::wire::ActBody::of).collect(),
        }))
    })
    .await
}

/// Who the caller's token is, and what it is allowed where.
#[utoipa::path(get, path = "/whoami", tag = "team",
    responses((status = 200, body = Whoami), (status = 401, body = ErrorBody)), security(("bearer" = [])))]
pub(super) async fn whoami(Extension(caller): Extension<Caller>) -> Json<Whoami> {
    Json(Whoami::of(&caller))
}

/// Every quota with what its subject uses of it now.
#[utoipa::path(get, path = "/quotas", tag = "team",
    responses((status = 200, body = QuotaList), (status = 401, body = ErrorBody)), security(("bearer" = [])))]
pub(super) async fn list_quotas(State(state): State<AppRef>) -> Result<Json<QuotaList>, ApiError> {
    blocking(move || {
        let all = state.service.engine().quotas()?;
        Ok(Json(QuotaList { quotas: all.iter().map(|u| QuotaBody::of(&u.quota, u.used, u.frees_at)).collect() }))
    })
    .await
}

/// Sets (or replaces) a quota on a principal, a workflow or a target. Needs `admin`.
#[utoipa::path(put, path = "/quotas", tag = "team", request_body = SetQuota,
    responses((status = 200, body = QuotaBody), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn set_quota(
    State(state): State<AppRef>,
    Extension(caller): Extension<Caller>,
    ApiJson(body): ApiJson<SetQuota>,
) -> Result<Json<QuotaBody>, ApiError> {
    blocking(move || {
        let engine = state.service.engine();
        engine.authorize(&caller, cairn_core::access::Permission::Admin, &cairn_core::access::Scope::everywhere())?;
        let subject = quota_subject(&body.principal, &body.workflow, &body.target)?;
        let measure = quota_measure(&body.measure)?;
        let q = engine.set_quota(&caller, subject, measure, body.limit, body.queue)?;
        let used = engine.quotas()?.into_iter().find(|u| u.quota.subject == q.subject && u.quota.measure == q.measure);
        Ok(Json(QuotaBody::of(&q, used.as_ref().map_or(0, |u| u.used), used.and_then(|u| u.frees_at))))
    })
    .await
}

/// Removes a quota. Needs `admin`.
#[utoipa::path(delete, path = "/quotas", tag = "team", params(QuotaKey),
    responses((status = 200, body = QuotaList), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn remove_quota(
    State(state): State<AppRef>,
    Extension(caller): Extension<Caller>,
    ApiQuery(q): ApiQuery<QuotaKey>,
) -> Result<Json<QuotaList>, ApiError> {
    blocking(move || {
        let engine = state.service.engine();
        engine.authorize(&caller, cairn_core::access::Permission::Admin, &cairn_core::access::Scope::everywhere())?;
        engine.remove_quota(
            &caller,
            &quota_subject(&q.principal, &q.workflow, &q.target)?,
            quota_measure(&q.measure)?,
        )?;
        let all = engine.quotas()?;
        Ok(Json(QuotaList { quotas: all.iter().map(|u| QuotaBody::of(&u.quota, u.used, u.frees_at)).collect() }))
    })
    .await
}
