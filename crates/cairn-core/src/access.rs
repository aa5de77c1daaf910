//! Who may do what: principals, the permissions a role is made of, grants of a role (everywhere,
//! or scoped to a workflow and/or a target), and the one decision every surface asks for —
//! whether a caller's grants allow a permission on a resource. Decisions are data: a refusal
//! names the permission and the scope that were missing.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// One thing a principal may do. Each mutating action of the API, the CLI and MCP needs exactly
/// one of these, on the resource it touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    /// Read runs, workflows, plans, targets, docs, verifications and the audit.
    Read,
    /// Make plans of registered workflows (and probe targets to plan on them).
    Plan,
    /// Submit runs of registered workflows and replays; cancel one's own runs.
    Run,
    /// Execute (approve) plans.
    Approve,
    /// Cancel anyone's run.
    Cancel,
    /// Register workflows (new versions of a granted workflow too).
    Register,
    /// Add targets.
    Target,
    /// Run arbitrary code on the daemon's machine: the session kernel and verifications. This is
    /// the daemon user's own power, so grant it as one would a shell account.
    Code,
    /// Save and remove procedure docs.
    Docs,
    /// Manage principals, roles, grants, policies and quotas.
    Admin,
}

impl Permission {
    pub const ALL: [Permission; 10] = [
        Permission::Read,
        Permission::Plan,
        Permission::Run,
        Permission::Approve,
        Permission::Cancel,
        Permission::Register,
        Permission::Target,
        Permission::Code,
        Permission::Docs,
        Permission::Admin,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Read => "read",
            Permission::Plan => "plan",
            Permission::Run => "run",
            Permission::Approve => "approve",
            Permission::Cancel => "cancel",
            Permission::Register => "register",
            Permission::Target => "target",
            Permission::Code => "code",
            Permission::Docs => "docs",
            Permission::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Permission> {
        Permission::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

impl std::fmt::Display for Permission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A named set of permissions: one of the built-in five, or a custom one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Role {
    pub name: String,
    pub permissions: BTreeSet<Permission>,
    pub builtin: bool,
}

/// The built-in roles, each including the one before it: viewer (read), launcher (plan and run
/// registered workflows, replay, save docs), approver (also execute plans), maintainer (also
/// register workflows, add targets, cancel anyone's run, run code on the daemon's machine),
/// admin (also principals, roles, grants, policies and quotas).
pub fn builtin_roles() -> Vec<Role> {
    use Permission as P;
    let steps: [(&str, &[Permission]); 5] = [
        ("viewer", &[P::Read]),
        ("launcher", &[P::Plan, P::Run, P::Docs]),
        ("approver", &[P::Approve]),
        ("maintainer", &[P::Register, P::Target, P::Cancel, P::Code]),
        ("admin", &[P::Admin]),
    ];
    let mut so_far = BTreeSet::new();
    steps
        .iter()
        .map(|(name, adds)| {
            so_far.extend(adds.iter().copied());
            Role { name: (*name).to_string(), permissions: so_far.clone(), builtin: true }
        })
        .collect()
}

/// The built-in role named `name`, if it is one.
pub fn builtin_role(name: &str) -> Option<Role> {
    builtin_roles().into_iter().find(|r| r.name == name)
}

/// The principals every state root has without being added: the holders of its two token files.
/// Their names are reserved.
pub const OWNER: &str = "owner";
pub const VIEWER: &str = "viewer";

/// Why a principal's or a role's name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("`{0}` is not a valid name: use 1 to 64 of a-z, 0-9, `.`, `_` and `-`, starting with a letter or a digit")]
    Invalid(String),
    #[error("`{0}` is reserved: it names the holder of the state root's own token file")]
    Reserved(String),
}

/// Checks a principal's name (`reserved` also refuses the built-in principals' names).
pub fn check_name(name: &str, reserved: &[&str]) -> Result<(), NameError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
        && name.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric());
    if !ok {
        return Err(NameError::Invalid(name.to_string()));
    }
    if reserved.contains(&name) {
        return Err(NameError::Reserved(name.to_string()));
    }
    Ok(())
}

/// Where a grant applies: everywhere (both `None`), or only to resources of that workflow
/// (all its versions) and/or on that target.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Scope {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

impl Scope {
    pub fn everywhere() -> Scope {
        Scope::default()
    }

    pub fn is_everywhere(&self) -> bool {
        self.workflow.is_none() && self.target.is_none()
    }

    /// Whether the grant covers `r`: a scoped grant only covers a resource that names the same
    /// workflow (and target).
    pub fn covers(&self, r: &Resource) -> bool {
        let fits = |want: &Option<String>, have: &Option<String>| match want {
            None => true,
            Some(w) => have.as_deref() == Some(w.as_str()),
        };
        fits(&self.workflow, &r.workflow) && fits(&self.target, &r.target)
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.workflow, &self.target) {
            (None, None) => f.write_str("everywhere"),
            (Some(w), None) => write!(f, "workflow `{w}`"),
            (None, Some(t)) => write!(f, "target `{t}`"),
            (Some(w), Some(t)) => write!(f, "workflow `{w}` on target `{t}`"),
        }
    }
}

/// What an action touches, as far as permissions go.
pub type Resource = Scope;

/// A role granted to a principal, in a scope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub principal: String,
    pub role: String,
    pub scope: Scope,
    pub created_at: i64,
}

/// A person or an agent known to the registry. Its token is kept only as a SHA-256 hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Principal {
    pub name: String,
    /// The role granted everywhere when it was added.
    pub role: String,
    pub created_at: i64,
    pub created_by: String,
    pub rotated_at: Option<i64>,
    pub revoked_at: Option<i64>,
}

/// What a caller is allowed: its name and each of its grants' permissions with their scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    pub principal: String,
    pub grants: Vec<(BTreeSet<Permission>, Scope)>,
}

/// A refusal: who, the permission missing, and on what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{principal} may not {permission} {}: it needs a grant of a role with `{permission}` {}; an admin can add one with `cairn grant add {principal} ROLE{}`",
    object(resource),
    scope_words(resource),
    scope_flags(resource)
)]
pub struct Denied {
    pub principal: String,
    pub permission: Permission,
    pub resource: Resource,
}

fn object(r: &Resource) -> String {
    match (&r.workflow, &r.target) {
        (None, None) => "here".into(),
        _ => format!("on {r}"),
    }
}

fn scope_words(r: &Resource) -> String {
    if r.is_everywhere() { "everywhere".into() } else { format!("everywhere or for {r}") }
}

fn scope_flags(r: &Resource) -> String {
    let mut s = String::new();
    if let Some(w) = &r.workflow {
        s.push_str(&format!(" --workflow {w}"));
    }
    if let Some(t) = &r.target {
        s.push_str(&format!(" --target {t}"));
    }
    s
}

impl Access {
    /// The holder of the state root's operator token: every permission, everywhere.
    pub fn owner() -> Access {
        Access::of_role(OWNER, &builtin_role("admin").map(|r| r.permissions).unwrap_or_default())
    }

    /// The holder of the state root's viewer token.
    pub fn viewer() -> Access {
        Access::of_role(VIEWER, &BTreeSet::from([Permission::Read]))
    }

    pub fn of_role(principal: &str, permissions: &BTreeSet<Permission>) -> Access {
        Access { principal: principal.to_string(), grants: vec![(permissions.clone(), Scope::everywhere())] }
    }

    pub fn allows(&self, permission: Permission, resource: &Resource) -> bool {
        self.grants.iter().any(|(perms, scope)| perms.contains(&permission) && scope.covers(resource))
    }

    pub fn check(&self, permission: Permission, resource: &Resource) -> Result<(), Denied> {
        if self.allows(permission, resource) {
            return Ok(());
        }
        Err(Denied { principal: self.principal.clone(), permission, resource: resource.clone() })
    }

    /// Whether any grant, in any scope, holds a permission other than `read`: a caller without
    /// one is refused every change before its request is even read.
    pub fn may_change_anything(&self) -> bool {
        self.grants.iter().any(|(perms, _)| perms.iter().any(|p| *p != Permission::Read))
    }

    /// Whether any grant holds `permission`, in any scope.
    pub fn holds_anywhere(&self, permission: Permission) -> bool {
        self.grants.iter().any(|(perms, _)| perms.contains(&permission))
    }
}

/// Builds a caller's access from its grants and the roles they name; a grant of a role that no
/// longer exists gives nothing.
pub fn access_of(principal: &str, grants: &[Grant], custom: &[Role]) -> Access {
    let role = |name: &str| builtin_role(name).or_else(|| custom.iter().find(|r| r.name == name).cloned());
    Access {
        principal: principal.to_string(),
        grants: grants.iter().filter_map(|g| role(&g.role).map(|r| (r.permissions.clone(), g.scope.clone()))).collect(),
    }
}

/// A per-workflow rule set by an admin.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    pub workflow: String,
    /// A plan of this workflow must be approved by someone other than its planner.
    pub two_person: bool,
    pub updated_at: i64,
}

/// Why an approval is refused by a workflow's two-person rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "workflow `{workflow}` needs two people: plan `{plan}` was made by {planner}, so someone else with `approve` must execute it"
)]
pub struct SamePerson {
    pub workflow: String,
    pub plan: String,
    pub planner: String,
}

/// The two-person rule: under `policy`, may `approver` execute a plan `planner` made?
pub fn check_two_person(
    policy: Option<&Policy>,
    plan: &str,
    planner: Option<&str>,
    approver: &str,
) -> Result<(), SamePerson> {
    let Some(p) = policy.filter(|p| p.two_person) else { return Ok(()) };
    // A plan made before planners were recorded has no known planner: nobody can be shown to be
    // a second person, so it must be planned again.
    let planner = planner.unwrap_or("an unrecorded planner");
    if planner == approver || planner == "an unrecorded planner" {
        return Err(SamePerson { workflow: p.workflow.clone(), plan: plan.to_string(), planner: planner.to_string() });
    }
    Ok(())
}

/// One recorded action: who, through which channel, did what to which object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Act {
    pub at: i64,
    pub principal: String,
    /// `cli`, `api`, `mcp` or `web`, as the caller's surface said.
    pub channel: String,
    /// What was done: `workflow.registered`, `target.added`, `plan.made`, `plan.approved`,
    /// `run.submitted`, `run.cancelled`, `principal.added`, … (see [`ACTIONS`]).
    pub action: String,
    /// The name or id of what it was done to.
    pub object: String,
    /// More, as the action has it (a version, a scope, a role).
    pub detail: serde_json::Value,
}

/// Every action the audit records.
pub const ACTIONS: &[&str] = &[
    "workflow.registered",
    "target.added",
    "target.removed",
    "plan.made",
    "plan.approved",
    "run.submitted",
    "run.cancelled",
    "doc.saved",
    "doc.removed",
    "principal.added",
    "principal.rotated",
    "principal.revoked",
    "role.added",
    "role.removed",
    "grant.added",
    "grant.removed",
    "policy.changed",
    "quota.set",
    "quota.removed",
    "secret.set",
    "secret.removed",
    "secret.provider",
];

/// A recorded action with its place in the audit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActRecord {
    pub seq: i64,
    #[serde(flatten)]
    pub act: Act,
}

/// Which recorded actions to list: newest first, at most `limit`.
#[derive(Debug, Clone, Default)]
pub struct ActQuery {
    pub principal: Option<String>,
    pub action: Option<String>,
    pub object: Option<String>,
    pub limit: usize,
}

/// The surfaces a caller comes through, as recorded with each act.
pub const CHANNELS: &[&str] = &["cli", "api", "mcp", "web"];

/// Who is calling, and through which surface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub access: Access,
    pub channel: &'static str,
}

impl Caller {
    /// The state root's owner, through `channel` (the CLI's in-process commands are this).
    pub fn owner(channel: &'static str) -> Caller {
        Caller { access: Access::owner(), channel }
    }

    pub fn name(&self) -> &str {
        &self.access.principal
    }

    pub fn check(&self, permission: Permission, resource: &Resource) -> Result<(), Denied> {
        self.access.check(permission, resource)
    }

    /// The act of this caller doing `action` to `object` at `at`.
    pub fn act(&self, at: i64, action: &str, object: &str, detail: serde_json::Value) -> Act {
        Act {
            at,
            principal: self.name().to_string(),
            channel: self.channel.to_string(),
            action: action.to_string(),
            object: object.to_string(),
            detail,
        }
    }
}

/// The channel a caller named, if it is one Cairn knows (`api` otherwise).
pub fn channel(named: Option<&str>) -> &'static str {
    named.and_then(|n| CHANNELS.iter().find(|c| **c == n)).copied().unwrap_or("api")
}

/// Parses a comma-separated permission list (`plan,run`), naming the first unknown one.
pub fn parse_permissions(list: &str) -> Result<BTreeSet<Permission>, String> {
    let mut out = BTreeSet::new();
    for p in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        out.insert(Permission::parse(p).ok_or_else(|| {
            format!(
                "`{p}` is not a permission; they are: {}",
                Permission::ALL.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(", ")
            )
        })?);
    }
    if out.is_empty() {
        return Err("name at least one permission".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(w: Option<&str>, t: Option<&str>) -> Resource {
        Scope { workflow: w.map(String::from), target: t.map(String::from) }
    }

    #[test]
    fn builtin_roles_each_include_the_one_before() {
        let roles = builtin_roles();
        let names: Vec<&str> = roles.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["viewer", "launcher", "approver", "maintainer", "admin"]);
        for pair in roles.windows(2) {
            assert!(pair[0].permissions.is_subset(&pair[1].permissions), "{pair:?}");
            assert_ne!(pair[0].permissions, pair[1].permissions);
        }
        assert_eq!(roles[4].permissions.len(), Permission::ALL.len(), "admin holds every permission");
        assert!(!roles[1].permissions.contains(&Permission::Approve), "a launcher does not approve");
    }

    #[test]
    fn scoped_grants_cover_only_their_workflow_and_target() {
        let launcher = builtin_role("launcher").unwrap().permissions;
        let approver = builtin_role("approver").unwrap().permissions;
        let alice = Access {
            principal: "alice".into(),
            grants: vec![
                (BTreeSet::from([Permission::Read]), Scope::everywhere()),
                (launcher, res(Some("rnaseq"), None)),
                (approver, res(Some("rnaseq"), Some("hpc"))),
            ],
        };
        assert!(alice.allows(Permission::Run, &res(Some("rnaseq"), None)));
        assert!(alice.allows(Permission::Plan, &res(Some("rnaseq"), Some("local"))));
        assert!(!alice.allows(Permission::Run, &res(Some("chipseq"), None)));
        assert!(alice.allows(Permission::Approve, &res(Some("rnaseq"), Some("hpc"))));
        assert!(!alice.allows(Permission::Approve, &res(Some("rnaseq"), Some("local"))));
        assert!(!alice.allows(Permission::Approve, &res(Some("chipseq"), Some("hpc"))));
        // A scoped grant never covers an action on nothing in particular.
        assert!(!alice.allows(Permission::Run, &res(None, None)));
        let denied = alice.check(Permission::Approve, &res(Some("chipseq"), Some("hpc"))).unwrap_err();
        let text = denied.to_string();
        assert!(text.contains("alice may not approve on workflow `chipseq` on target `hpc`"), "{text}");
        assert!(text.contains("cairn grant add alice ROLE --workflow chipseq --target hpc"), "{text}");
        assert!(alice.may_change_anything());
        assert!(!Access::viewer().may_change_anything());
        assert!(Access::owner().allows(Permission::Admin, &res(None, None)));
    }

    #[test]
    fn names_and_permission_lists_are_checked() {
        assert!(check_name("alice", &[OWNER]).is_ok());
        assert!(check_name("ci-bot.2", &[]).is_ok());
        for bad in ["", "Alice", "-x", "a b", "a/b", &"a".repeat(65)] {
            assert!(matches!(check_name(bad, &[]), Err(NameError::Invalid(_))), "{bad}");
        }
        assert_eq!(check_name("owner", &[OWNER, VIEWER]), Err(NameError::Reserved("owner".into())));
        assert_eq!(parse_permissions("plan, run").unwrap(), BTreeSet::from([Permission::Plan, Permission::Run]));
        assert!(parse_permissions("plan,fly").unwrap_err().contains("`fly` is not a permission"));
        assert!(parse_permissions(" , ").is_err());
    }

    #[test]
    fn two_person_rule_refuses_the_planner_and_unknown_planners() {
        let on = Policy { workflow: "rnaseq".into(), two_person: true, updated_at: 0 };
        let off = Policy { two_person: false, ..on.clone() };
        assert!(check_two_person(Some(&on), "p", Some("alice"), "bob").is_ok());
        assert!(check_two_person(Some(&on), "p", Some("alice"), "alice").is_err());
        assert!(check_two_person(Some(&on), "p", None, "bob").is_err());
        assert!(check_two_person(Some(&off), "p", Some("alice"), "alice").is_ok());
        assert!(check_two_person(None, "p", Some("alice"), "alice").is_ok());
    }

    #[test]
    fn custom_roles_and_vanished_roles() {
        let custom = vec![Role {
            name: "runner".into(),
            permissions: BTreeSet::from([Permission::Read, Permission::Run]),
            builtin: false,
        }];
        let grants = vec![
            Grant { principal: "bot".into(), role: "runner".into(), scope: Scope::everywhere(), created_at: 0 },
            Grant { principal: "bot".into(), role: "gone".into(), scope: Scope::everywhere(), created_at: 0 },
        ];
        let a = access_of("bot", &grants, &custom);
        assert!(a.allows(Permission::Run, &res(Some("x"), None)));
        assert!(!a.allows(Permission::Plan, &res(Some("x"), None)));
        assert_eq!(a.grants.len(), 1);
    }
}
