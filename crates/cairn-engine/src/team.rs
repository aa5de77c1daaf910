//! A team's use cases: who a token is, whether a caller may do an action (asked by every
//! mutating use case before it changes anything), and the admin's own actions on principals,
//! roles, grants and policies, each recorded in the audit with its change.

use std::collections::BTreeSet;

use cairn_core::access::{
    self, Access, Act, ActQuery, ActRecord, Caller, Grant, Permission, Policy, Principal, Resource, Role, Scope,
};
use cairn_core::canonical::sha256_hex;
use serde_json::json;

use crate::{Engine, EngineError};

/// A principal with its grants.
#[derive(Debug, Clone, PartialEq)]
pub struct PrincipalView {
    pub principal: Principal,
    pub grants: Vec<Grant>,
}

/// A principal's token, shown once: the registry keeps only its hash.
#[derive(Debug, Clone)]
pub struct IssuedToken {
    pub principal: Principal,
    pub token: String,
}

/// The prefix of a principal's token: tells it apart from a state root's own token files.
pub const TOKEN_PREFIX: &str = "cairn_";

/// A new token: 256 bits from the OS's random source.
fn new_token() -> String {
    let a = uuid::Uuid::new_v4().simple().to_string();
    let b = uuid::Uuid::new_v4().simple().to_string();
    let c = uuid::Uuid::new_v4().simple().to_string();
    format!("{TOKEN_PREFIX}{a}{b}{}", &c[..8])
}

/// The hash a token is kept and looked up by.
pub fn token_hash(token: &str) -> String {
    sha256_hex(token.as_bytes())
}

impl Engine {
    /// The access of the live principal holding `token`; `None` when none does (unknown or
    /// revoked).
    pub fn access_of_token(&self, token: &str) -> Result<Option<Access>, EngineError> {
        if !token.starts_with(TOKEN_PREFIX) {
            return Ok(None);
        }
        match self.store.principal_by_token(&token_hash(token))? {
            Some(p) => Ok(Some(self.access_of(&p.name)?)),
            None => Ok(None),
        }
    }

    /// What a principal's grants allow it now.
    pub fn access_of(&self, name: &str) -> Result<Access, EngineError> {
        let grants = self.store.grants(Some(name))?;
        let custom = self.store.roles()?;
        Ok(access::access_of(name, &grants, &custom))
    }

    /// Refuses, naming what is missing, unless `caller` may do `permission` on `resource`.
    pub fn authorize(&self, caller: &Caller, permission: Permission, resource: &Resource) -> Result<(), EngineError> {
        caller.check(permission, resource).map_err(EngineError::from)
    }

    /// Records an act whose change was written in a transaction of its own.
    pub(crate) fn record(&self, caller: &Caller, action: &str, object: &str, detail: serde_json::Value) {
        let act = caller.act(self.now_ms(), action, object, detail);
        if let Err(e) = self.store.record_act(&act) {
            // The change itself stands; its act is the one thing lost, and the log says so.
            tracing::warn!(action, object, principal = caller.name(), error = %e, "an act could not be recorded");
        }
    }

    fn admin(&self, caller: &Caller) -> Result<(), EngineError> {
        self.authorize(caller, Permission::Admin, &Scope::everywhere())
    }

    fn known_role(&self, name: &str) -> Result<Role, EngineError> {
        if let Some(r) = access::builtin_role(name) {
            return Ok(r);
        }
        self.store
            .roles()?
            .into_iter()
            .find(|r| r.name == name)
            .ok_or_else(|| EngineError::RoleNotFound { name: name.to_string() })
    }

    /// Adds a principal with a role everywhere; its token is in the answer, and nowhere else.
    pub fn add_principal(&self, caller: &Caller, name: &str, role: &str) -> Result<IssuedToken, EngineError> {
        self.admin(caller)?;
        access::check_name(name, &[access::OWNER, access::VIEWER])?;
        self.known_role(role)?;
        let now = self.now_ms();
        let principal = Principal {
            name: name.to_string(),
            role: role.to_string(),
            created_at: now,
            created_by: caller.name().to_string(),
            rotated_at: None,
            revoked_at: None,
        };
        let token = new_token();
        let act = caller.act(now, "principal.added", name, json!({ "role": role }));
        self.store.add_principal(&principal, &token_hash(&token), &act)?;
        Ok(IssuedToken { principal, token })
    }

    /// Gives a live principal a new token; the old one stops working at once.
    pub fn rotate_principal(&self, caller: &Caller, name: &str) -> Result<IssuedToken, EngineError> {
        self.admin(caller)?;
        let token = new_token();
        let act = caller.act(self.now_ms(), "principal.rotated", name, json!({}));
        if !self.store.rotate_principal(name, &token_hash(&token), &act)? {
            return Err(EngineError::PrincipalNotFound { name: name.to_string() });
        }
        Ok(IssuedToken { principal: self.principal_record(name)?, token })
    }

    /// Revokes a principal: its token stops working; its name, grants and acts stay.
    pub fn revoke_principal(&self, caller: &Caller, name: &str) -> Result<Principal, EngineError> {
        self.admin(caller)?;
        let act = caller.act(self.now_ms(), "principal.revoked", name, json!({}));
        if !self.store.revoke_principal(name, &act)? {
            return Err(EngineError::PrincipalNotFound { name: name.to_string() });
        }
        self.principal_record(name)
    }

    fn principal_record(&self, name: &str) -> Result<Principal, EngineError> {
        self.store.principal(name)?.ok_or_else(|| EngineError::PrincipalNotFound { name: name.to_string() })
    }

    /// Every principal with its grants, by name (the revoked ones too).
    pub fn principals(&self) -> Result<Vec<PrincipalView>, EngineError> {
        let grants = self.store.grants(None)?;
        Ok(self
            .store
            .principals()?
            .into_iter()
            .map(|p| PrincipalView {
                grants: grants.iter().filter(|g| g.principal == p.name).cloned().collect(),
                principal: p,
            })
            .collect())
    }

    pub fn principal(&self, name: &str) -> Result<PrincipalView, EngineError> {
        Ok(PrincipalView { principal: self.principal_record(name)?, grants: self.store.grants(Some(name))? })
    }

    /// The built-in roles, then the custom ones.
    pub fn roles(&self) -> Result<Vec<Role>, EngineError> {
        let mut all = access::builtin_roles();
        all.extend(self.store.roles()?);
        Ok(all)
    }

    /// Adds a custom role made of the named permissions.
    pub fn add_role(&self, caller: &Caller, name: &str, permissions: &[String]) -> Result<Role, EngineError> {
        self.admin(caller)?;
        let builtin: Vec<String> = access::builtin_roles().into_iter().map(|r| r.name).collect();
        let builtin: Vec<&str> = builtin.iter().map(String::as_str).collect();
        access::check_name(name, &builtin)?;
        let permissions: BTreeSet<Permission> = access::parse_permissions(&permissions.join(","))
            .map_err(|message| EngineError::InvalidField { field: "permissions", message })?;
        let names: Vec<&str> = permissions.iter().map(|p| p.as_str()).collect();
        let act = caller.act(self.now_ms(), "role.added", name, json!({ "permissions": names }));
        let role = Role { name: name.to_string(), permissions, builtin: false };
        self.store.add_role(&role, &act)?;
        Ok(role)
    }

    pub fn remove_role(&self, caller: &Caller, name: &str) -> Result<(), EngineError> {
        self.admin(caller)?;
        let act = caller.act(self.now_ms(), "role.removed", name, json!({}));
        if !self.store.remove_role(name, &act)? {
            return Err(EngineError::RoleNotFound { name: name.to_string() });
        }
        Ok(())
    }

    /// Grants `role` to `principal` in `scope`; whether it is new. A scoped grant covers only
    /// actions on that workflow and/or target: the permissions about the daemon as a whole
    /// (`code`, `docs`, `admin`) only ever come from a grant everywhere.
    pub fn add_grant(
        &self,
        caller: &Caller,
        principal: &str,
        role: &str,
        scope: &Scope,
    ) -> Result<(Grant, bool), EngineError> {
        self.admin(caller)?;
        self.principal_record(principal)?;
        self.known_role(role)?;
        let g = Grant {
            principal: principal.to_string(),
            role: role.to_string(),
            scope: scope.clone(),
            created_at: self.now_ms(),
        };
        let act = caller.act(g.created_at, "grant.added", principal, json!({ "role": role, "scope": scope }));
        let new = self.store.add_grant(&g, &act)?;
        Ok((g, new))
    }

    pub fn remove_grant(&self, caller: &Caller, principal: &str, role: &str, scope: &Scope) -> Result<(), EngineError> {
        self.admin(caller)?;
        let g = Grant { principal: principal.to_string(), role: role.to_string(), scope: scope.clone(), created_at: 0 };
        let act = caller.act(self.now_ms(), "grant.removed", principal, json!({ "role": role, "scope": scope }));
        if !self.store.remove_grant(&g, &act)? {
            return Err(EngineError::GrantNotFound {
                principal: principal.to_string(),
                role: role.to_string(),
                scope: scope.to_string(),
            });
        }
        Ok(())
    }

    /// Sets a workflow's two-person rule (the workflow need not be registered yet).
    pub fn set_policy(&self, caller: &Caller, workflow: &str, two_person: bool) -> Result<Policy, EngineError> {
        self.admin(caller)?;
        if workflow.trim().is_empty() {
            return Err(EngineError::InvalidField { field: "workflow", message: "name the workflow".into() });
        }
        let p = Policy { workflow: workflow.to_string(), two_person, updated_at: self.now_ms() };
        let act = caller.act(p.updated_at, "policy.changed", workflow, json!({ "two_person": two_person }));
        self.store.set_policy(&p, &act)?;
        Ok(p)
    }

    pub fn policies(&self) -> Result<Vec<Policy>, EngineError> {
        Ok(self.store.policies()?)
    }

    /// The workflow's policy, if one was set.
    pub fn policy(&self, workflow: &str) -> Result<Option<Policy>, EngineError> {
        Ok(self.store.policy(workflow)?)
    }

    /// The recorded acts, newest first.
    pub fn audit(&self, q: &ActQuery) -> Result<Vec<ActRecord>, EngineError> {
        Ok(self.store.acts(q)?)
    }

    /// `caller`'s act of `action` on `object`, for a store write that records it with its change.
    pub(crate) fn act(&self, caller: &Caller, action: &str, object: &str, detail: serde_json::Value) -> Act {
        caller.act(self.now_ms(), action, object, detail)
    }
}
