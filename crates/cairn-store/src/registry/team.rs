//! A team's registry ([`Team`]), once for both databases: principals, custom roles, grants,
//! per-workflow policies, and the audit. Each change writes its act in its own transaction.

use std::collections::BTreeSet;

use cairn_core::access::{Act, ActQuery, ActRecord, Grant, Permission, Policy, Principal, Role, Scope};
use cairn_core::store::{StoreError, Team};

use super::{Registry, parse_json, rows, to_json};
use crate::sql::{Backend, Param, Row, Tx, params};

/// Writes `act` into the audit inside `tx`; its sequence number.
pub(super) fn insert_act(tx: &mut dyn Tx, act: &Act) -> Result<i64, StoreError> {
    tx.query_one(
        "INSERT INTO audit (at, principal, channel, action, object, detail_json) VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
         RETURNING seq",
        params![act.at, act.principal, act.channel, act.action, act.object, to_json(&act.detail)],
    )?
    .get(0)
}

const PRINCIPAL_COLUMNS: &str = "name, role, created_at, created_by, rotated_at, revoked_at";

fn principal_from_row(r: &Row) -> Result<Principal, StoreError> {
    Ok(Principal {
        name: r.get(0)?,
        role: r.get(1)?,
        created_at: r.get(2)?,
        created_by: r.get(3)?,
        rotated_at: r.get(4)?,
        revoked_at: r.get(5)?,
    })
}

fn grant_from_row(r: &Row) -> Result<Grant, StoreError> {
    let scoped = |s: String| (!s.is_empty()).then_some(s);
    Ok(Grant {
        principal: r.get(0)?,
        role: r.get(1)?,
        scope: Scope { workflow: scoped(r.get(2)?), target: scoped(r.get(3)?) },
        created_at: r.get(4)?,
    })
}

fn role_from_row(r: &Row) -> Result<Role, StoreError> {
    let names: Vec<String> = parse_json(&r.get::<String>(1)?, "role permissions")?;
    let permissions = names
        .iter()
        .map(|n| Permission::parse(n).ok_or_else(|| StoreError::Corrupt(format!("a role names permission `{n}`"))))
        .collect::<Result<BTreeSet<_>, _>>()?;
    Ok(Role { name: r.get(0)?, permissions, builtin: false })
}

fn policy_from_row(r: &Row) -> Result<Policy, StoreError> {
    Ok(Policy { workflow: r.get(0)?, two_person: r.get::<i64>(1)? != 0, updated_at: r.get(2)? })
}

fn act_from_row(r: &Row) -> Result<ActRecord, StoreError> {
    Ok(ActRecord {
        seq: r.get(0)?,
        act: Act {
            at: r.get(1)?,
            principal: r.get(2)?,
            channel: r.get(3)?,
            action: r.get(4)?,
            object: r.get(5)?,
            detail: parse_json(&r.get::<String>(6)?, "audit detail")?,
        },
    })
}

/// A scope as its two key columns ('' for any).
fn scope_cols(s: &Scope) -> (&str, &str) {
    (s.workflow.as_deref().unwrap_or(""), s.target.as_deref().unwrap_or(""))
}

impl<B: Backend> Team for Registry<B> {
    fn add_principal(&self, p: &Principal, token_sha256: &str, act: &Act) -> Result<(), StoreError> {
        self.write(|tx| {
            if tx.query_opt("SELECT name FROM principals WHERE name = ?1", params![p.name])?.is_some() {
                return Err(StoreError::PrincipalExists(p.name.clone()));
            }
            tx.execute(
                "INSERT INTO principals (name, role, token_sha256, created_at, created_by) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![p.name, p.role, token_sha256, p.created_at, p.created_by],
            )?;
            tx.execute(
                "INSERT INTO grants (principal, role, workflow, target, created_at) VALUES (?1, ?2, '', '', ?3)",
                params![p.name, p.role, p.created_at],
            )?;
            insert_act(tx, act)?;
            Ok(())
        })
    }

    fn principal_by_token(&self, token_sha256: &str) -> Result<Option<Principal>, StoreError> {
        let sql = format!("SELECT {PRINCIPAL_COLUMNS} FROM principals WHERE token_sha256 = ?1 AND revoked_at IS NULL");
        self.read(|tx| tx.query_opt(&sql, params![token_sha256]))?.map(|r| principal_from_row(&r)).transpose()
    }

    fn principal(&self, name: &str) -> Result<Option<Principal>, StoreError> {
        let sql = format!("SELECT {PRINCIPAL_COLUMNS} FROM principals WHERE name = ?1");
        self.read(|tx| tx.query_opt(&sql, params![name]))?.map(|r| principal_from_row(&r)).transpose()
    }

    fn principals(&self) -> Result<Vec<Principal>, StoreError> {
        let sql = format!("SELECT {PRINCIPAL_COLUMNS} FROM principals ORDER BY name");
        rows(self.read(|tx| tx.query(&sql, &[]))?, principal_from_row)
    }

    fn rotate_principal(&self, name: &str, token_sha256: &str, act: &Act) -> Result<bool, StoreError> {
        self.write(|tx| {
            let n = tx.execute(
                "UPDATE principals SET token_sha256 = ?2, rotated_at = ?3 WHERE name = ?1 AND revoked_at IS NULL",
                params![name, token_sha256, act.at],
            )?;
            if n == 1 {
                insert_act(tx, act)?;
            }
            Ok(n == 1)
        })
    }

    fn revoke_principal(&self, name: &str, act: &Act) -> Result<bool, StoreError> {
        self.write(|tx| {
            let n = tx.execute(
                "UPDATE principals SET revoked_at = ?2 WHERE name = ?1 AND revoked_at IS NULL",
                params![name, act.at],
            )?;
            if n == 1 {
                insert_act(tx, act)?;
            }
            Ok(n == 1)
        })
    }

    fn add_role(&self, role: &Role, act: &Act) -> Result<(), StoreError> {
        let names: Vec<&str> = role.permissions.iter().map(|p| p.as_str()).collect();
        self.write(|tx| {
            if tx.query_opt("SELECT name FROM roles WHERE name = ?1", params![role.name])?.is_some() {
                return Err(StoreError::RoleExists(role.name.clone()));
            }
            tx.execute(
                "INSERT INTO roles (name, permissions, created_at) VALUES (?1, ?2, ?3)",
                params![role.name, to_json(&names), act.at],
            )?;
            insert_act(tx, act)?;
            Ok(())
        })
    }

    fn remove_role(&self, name: &str, act: &Act) -> Result<bool, StoreError> {
        self.write(|tx| {
            let n = tx.execute("DELETE FROM roles WHERE name = ?1", params![name])?;
            if n == 1 {
                insert_act(tx, act)?;
            }
            Ok(n == 1)
        })
    }

    fn roles(&self) -> Result<Vec<Role>, StoreError> {
        rows(self.read(|tx| tx.query("SELECT name, permissions FROM roles ORDER BY name", &[]))?, role_from_row)
    }

    fn add_grant(&self, g: &Grant, act: &Act) -> Result<bool, StoreError> {
        let (w, t) = scope_cols(&g.scope);
        self.write(|tx| {
            let n = tx.execute(
                "INSERT INTO grants (principal, role, workflow, target, created_at) VALUES (?1, ?2, ?3, ?4, ?5) \
                 ON CONFLICT DO NOTHING",
                params![g.principal, g.role, w, t, g.created_at],
            )?;
            if n == 1 {
                insert_act(tx, act)?;
            }
            Ok(n == 1)
        })
    }

    fn remove_grant(&self, g: &Grant, act: &Act) -> Result<bool, StoreError> {
        let (w, t) = scope_cols(&g.scope);
        self.write(|tx| {
            let n = tx.execute(
                "DELETE FROM grants WHERE principal = ?1 AND role = ?2 AND workflow = ?3 AND target = ?4",
                params![g.principal, g.role, w, t],
            )?;
            if n == 1 {
                insert_act(tx, act)?;
            }
            Ok(n == 1)
        })
    }

    fn grants(&self, principal: Option<&str>) -> Result<Vec<Grant>, StoreError> {
        let found = self.read(|tx| match principal {
            Some(p) => tx.query(
                "SELECT principal, role, workflow, target, created_at FROM grants WHERE principal = ?1 \
                 ORDER BY principal, workflow, target, role",
                params![p],
            ),
            None => tx.query(
                "SELECT principal, role, workflow, target, created_at FROM grants ORDER BY principal, workflow, target, role",
                &[],
            ),
        })?;
        rows(found, grant_from_row)
    }

    fn set_policy(&self, p: &Policy, act: &Act) -> Result<(), StoreError> {
        self.write(|tx| {
            tx.execute(
                "INSERT INTO workflow_policies (workflow, two_person, updated_at) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (workflow) DO UPDATE SET two_person = excluded.two_person, updated_at = excluded.updated_at",
                params![p.workflow, i64::from(p.two_person), p.updated_at],
            )?;
            insert_act(tx, act)?;
            Ok(())
        })
    }

    fn policy(&self, workflow: &str) -> Result<Option<Policy>, StoreError> {
        self.read(|tx| {
            tx.query_opt(
                "SELECT workflow, two_person, updated_at FROM workflow_policies WHERE workflow = ?1",
                params![workflow],
            )
        })?
        .map(|r| policy_from_row(&r))
        .transpose()
    }

    fn policies(&self) -> Result<Vec<Policy>, StoreError> {
        rows(
            self.read(|tx| {
                tx.query("SELECT workflow, two_person, updated_at FROM workflow_policies ORDER BY workflow", &[])
            })?,
            policy_from_row,
        )
    }

    fn record_act(&self, act: &Act) -> Result<i64, StoreError> {
        self.write(|tx| insert_act(tx, act))
    }

    fn acts(&self, q: &ActQuery) -> Result<Vec<ActRecord>, StoreError> {
        // Only the filters given are in the statement, each with its index.
        let mut clauses = Vec::new();
        let mut values = Vec::new();
        for (column, value) in [("principal", &q.principal), ("action", &q.action), ("object", &q.object)] {
            if let Some(v) = value {
                clauses.push(format!("{column} = ?{}", values.len() + 1));
                values.push(Param::Text(v));
            }
        }
        values.push(Param::Int(i64::try_from(q.limit.max(1)).unwrap_or(i64::MAX)));
        let filter = if clauses.is_empty() { String::new() } else { format!("WHERE {}", clauses.join(" AND ")) };
        let sql = format!(
            "SELECT seq, at, principal, channel, action, object, detail_json FROM audit {filter} \
             ORDER BY seq DESC LIMIT ?{}",
            values.len()
        );
        rows(self.read(|tx| tx.query(&sql, &values))?, act_from_row)
    }
}
