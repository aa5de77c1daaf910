//! A team on the wire: principals (a token shown once, when it is made), roles, grants,
//! per-workflow policies, the audit, and who the caller is. `cairn user|role|grant|policy|audit`
//! print these with `--json`; the API answers them under `/principals`, `/roles`, `/policies`,
//! `/audit` and `/whoami`.

use cairn_core::access::{ActRecord, Caller, Grant, Policy, Principal, Role, Scope};
use cairn_engine::team::{IssuedToken, PrincipalView};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::time;

// ------------------------------------------------------------------------------------ requests

/// Add a principal: `POST /principals` (`cairn user add NAME --role ROLE`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddPrincipal {
    /// 1 to 64 of a-z 0-9 . _ -, starting with a letter or a digit; `owner` and `viewer` are
    /// reserved.
    #[schema(min_length = 1, max_length = 64, pattern = "^[a-z0-9][a-z0-9._-]{0,63}$")]
    pub name: String,
    /// The role it gets everywhere: a built-in one (`viewer`, `launcher`, `approver`,
    /// `maintainer`, `admin`) or a custom one.
    pub role: String,
}

/// Add a custom role: `POST /roles` (`cairn role add NAME --allow plan,run`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddRole {
    #[schema(min_length = 1, max_length = 64, pattern = "^[a-z0-9][a-z0-9._-]{0,63}$")]
    pub name: String,
    /// Among `read`, `plan`, `run`, `approve`, `cancel`, `register`, `target`, `code`, `docs`,
    /// `admin`.
    #[schema(min_items = 1)]
    pub permissions: Vec<String>,
}

/// A grant of a role to a principal, everywhere or scoped: `POST /principals/{name}/grants`
/// (add) and `DELETE /principals/{name}/grants?role=&workflow=&target=` (remove).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct GrantRequest {
    pub role: String,
    /// Only for this workflow (all its versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// Only on this target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

impl GrantRequest {
    pub fn scope(&self) -> Scope {
        let named = |s: &Option<String>| s.as_ref().filter(|s| !s.trim().is_empty()).cloned();
        Scope { workflow: named(&self.workflow), target: named(&self.target) }
    }
}

/// A workflow's policy: `PUT /policies/{workflow}` (`cairn policy set WORKFLOW --two-person on`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetPolicy {
    /// A plan of this workflow must be approved by someone other than the principal that made it.
    pub two_person: bool,
}

/// `GET /audit?principal=&action=&object=&limit=`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    pub principal: Option<String>,
    /// `run.submitted`, `plan.approved`, … (see the audit's actions).
    pub action: Option<String>,
    /// A run id, a plan's or a workflow's name, a principal's name.
    pub object: Option<String>,
    /// At most this many, newest first (1 to 10000; default 100).
    pub limit: Option<usize>,
}

// ------------------------------------------------------------------------------------ answers

/// A grant as the wire shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct GrantBody {
    pub principal: String,
    pub role: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    pub created_at: String,
}

impl GrantBody {
    pub fn of(g: &Grant) -> GrantBody {
        GrantBody {
            principal: g.principal.clone(),
            role: g.role.clone(),
            workflow: g.scope.workflow.clone(),
            target: g.scope.target.clone(),
            created_at: time(g.created_at),
        }
    }
}

/// A principal with its grants (never its token, which only its creation and a rotation show).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PrincipalBody {
    pub name: String,
    /// The role it was added with (granted everywhere).
    pub role: String,
    pub created_at: String,
    pub created_by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotated_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<String>,
    /// Its token no longer works.
    pub revoked: bool,
    pub grants: Vec<GrantBody>,
}

impl PrincipalBody {
    pub fn of(p: &Principal, grants: &[Grant]) -> PrincipalBody {
        PrincipalBody {
            name: p.name.clone(),
            role: p.role.clone(),
            created_at: time(p.created_at),
            created_by: p.created_by.clone(),
            rotated_at: p.rotated_at.map(time),
            revoked_at: p.revoked_at.map(time),
            revoked: p.revoked_at.is_some(),
            grants: grants.iter().map(GrantBody::of).collect(),
        }
    }

    pub fn of_view(v: &PrincipalView) -> PrincipalBody {
        PrincipalBody::of(&v.principal, &v.grants)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PrincipalList {
    pub principals: Vec<PrincipalBody>,
}

/// A new or rotated token. It is shown here once: the registry keeps only its SHA-256 hash.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct IssuedTokenBody {
    pub principal: PrincipalBody,
    pub token: String,
}

impl IssuedTokenBody {
    pub fn of(t: &IssuedToken, grants: &[Grant]) -> IssuedTokenBody {
        IssuedTokenBody { principal: PrincipalBody::of(&t.principal, grants), token: t.token.clone() }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RoleBody {
    pub name: String,
    pub permissions: Vec<String>,
    /// One of the five built-in roles (which cannot be changed or removed).
    pub builtin: bool,
}

impl RoleBody {
    pub fn of(r: &Role) -> RoleBody {
        RoleBody {
            name: r.name.clone(),
            permissions: r.permissions.iter().map(|p| p.as_str().to_string()).collect(),
            builtin: r.builtin,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RoleList {
    pub roles: Vec<RoleBody>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PolicyBody {
    pub workflow: String,
    pub two_person: bool,
    pub updated_at: String,
}

impl PolicyBody {
    pub fn of(p: &Policy) -> PolicyBody {
        PolicyBody { workflow: p.workflow.clone(), two_person: p.two_person, updated_at: time(p.updated_at) }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PolicyList {
    pub policies: Vec<PolicyBody>,
}

/// One recorded action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ActBody {
    /// Its place in the audit (ascending with time).
    pub seq: i64,
    pub at: String,
    pub principal: String,
    /// `cli`, `api`, `mcp` or `web`, as the caller's surface said.
    pub channel: String,
    pub action: String,
    pub object: String,
    #[schema(value_type = Object)]
    pub detail: Value,
}

impl ActBody {
    pub fn of(a: &ActRecord) -> ActBody {
        ActBody {
            seq: a.seq,
            at: time(a.act.at),
            principal: a.act.principal.clone(),
            channel: a.act.channel.clone(),
            action: a.act.action.clone(),
            object: a.act.object.clone(),
            detail: a.act.detail.clone(),
        }
    }
}

/// The audit, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AuditList {
    pub acts: Vec<ActBody>,
}

/// What one grant of the caller allows, and where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AccessEntry {
    pub permissions: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// Who the caller is: `GET /whoami` (`cairn whoami`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Whoami {
    pub principal: String,
    pub channel: String,
    pub access: Vec<AccessEntry>,
}

impl Whoami {
    pub fn of(c: &Caller) -> Whoami {
        Whoami {
            principal: c.name().to_string(),
            channel: c.channel.to_string(),
            access: c
                .access
                .grants
                .iter()
                .map(|(perms, scope)| AccessEntry {
                    permissions: perms.iter().map(|p| p.as_str().to_string()).collect(),
                    workflow: scope.workflow.clone(),
                    target: scope.target.clone(),
                })
                .collect(),
        }
    }
}

// ------------------------------------------------------------------------------------ quotas

/// A quota to set: `PUT /quotas` (`cairn quota set`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetQuota {
    /// The principal it is on (or give `workflow`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// The workflow it is on (all its versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// The target it is on (`local` included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// `runs` (open at once), `queued_runs` (held queued at once) or `steps_per_day` (started in
    /// the last 24 hours) for a principal or a workflow; `steps` (running at once) for a target.
    pub measure: String,
    pub limit: u64,
    /// For `runs`: hold a submission over it queued until a run ends, instead of refusing it.
    #[serde(default)]
    pub queue: bool,
}

/// Which quota to remove: `DELETE /quotas?principal=|workflow=&measure=`.
#[derive(Debug, Clone, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct QuotaKey {
    pub principal: Option<String>,
    pub workflow: Option<String>,
    pub target: Option<String>,
    pub measure: String,
}

/// The subject a request names: exactly one of a principal, a workflow or a target.
pub fn quota_subject(
    principal: &Option<String>,
    workflow: &Option<String>,
    target: &Option<String>,
) -> Result<cairn_core::quota::Subject, cairn_engine::EngineError> {
    use cairn_core::quota::Subject;
    match (principal, workflow, target) {
        (Some(p), None, None) => Ok(Subject::Principal(p.clone())),
        (None, Some(w), None) => Ok(Subject::Workflow(w.clone())),
        (None, None, Some(t)) => Ok(Subject::Target(t.clone())),
        _ => Err(cairn_engine::EngineError::invalid_field(
            "principal",
            "name exactly one of `principal`, `workflow` or `target`: the quota is on one of them",
        )),
    }
}

/// A measure a request names.
pub fn quota_measure(measure: &str) -> Result<cairn_core::quota::Measure, cairn_engine::EngineError> {
    cairn_core::quota::Measure::parse(measure).ok_or_else(|| {
        cairn_engine::EngineError::invalid_field(
            "measure",
            format!("`{measure}` is not a measure; they are runs, queued_runs, steps_per_day and steps"),
        )
    })
}

/// A quota with its use now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QuotaBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    pub measure: String,
    pub limit: u64,
    pub queue: bool,
    /// What its subject uses of it now.
    pub used: u64,
    /// For `steps_per_day`: when the oldest step counted leaves the 24-hour window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frees_at: Option<String>,
    pub updated_at: String,
}

impl QuotaBody {
    pub fn of(q: &cairn_core::quota::Quota, used: u64, frees_at: Option<i64>) -> QuotaBody {
        use cairn_core::quota::Subject;
        let (mut principal, mut workflow, mut target) = (None, None, None);
        match &q.subject {
            Subject::Principal(p) => principal = Some(p.clone()),
            Subject::Workflow(w) => workflow = Some(w.clone()),
            Subject::Target(t) => target = Some(t.clone()),
        }
        QuotaBody {
            principal,
            workflow,
            target,
            measure: q.measure.as_str().to_string(),
            limit: q.limit,
            queue: q.queue,
            used,
            frees_at: frees_at.map(time),
            updated_at: time(q.updated_at),
        }
    }
}

/// Every quota with its use: `GET /quotas` (`cairn quota`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QuotaList {
    pub quotas: Vec<QuotaBody>,
}
