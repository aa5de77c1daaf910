//! `cairn user|role|grant|policy|audit|whoami`: a team's commands. Each one asks the daemon (as
//! the state root's owner, or as the principal of `CAIRN_TOKEN`), so the same permissions and
//! the same audit apply as over the API.

use std::path::Path;

use serde_json::{Value, json};

use crate::cli::{GrantArgs, GrantCommand, PolicyCommand, QuotaCommand, RoleCommand, SecretCommand, UserCommand};
use crate::client::{Answer, Client};
use crate::{Failure, wire};

fn print_json<T: serde::Serialize>(value: &T) {
    crate::output::print_wire(value);
}

fn call(client: &Client, method: &str, path: &str, body: Option<Value>) -> Result<Answer, Failure> {
    client.send(method, path, body.as_ref())
}

/// A path segment: names are checked by the daemon, so only what would break the path is escaped.
fn seg(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'_' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn print_principal(p: &wire::PrincipalBody) {
    let state = if p.revoked { " (revoked)" } else { "" };
    println!("{}{state}: role {}, added by {} at {}", p.name, p.role, p.created_by, p.created_at);
    for g in &p.grants {
        println!("  grant {} {}", g.role, scope_text(g.workflow.as_deref(), g.target.as_deref()));
    }
}

fn scope_text(workflow: Option<&str>, target: Option<&str>) -> String {
    match (workflow, target) {
        (None, None) => "everywhere".into(),
        (Some(w), None) => format!("for workflow {w}"),
        (None, Some(t)) => format!("on target {t}"),
        (Some(w), Some(t)) => format!("for workflow {w} on target {t}"),
    }
}

fn print_issued(t: &wire::IssuedTokenBody, what: &str) {
    println!("{what} {} (role {})", t.principal.name, t.principal.role);
    println!("token: {}", t.token);
    eprintln!(
        "this token is shown once (the registry keeps only its hash): give it to {} to keep in a file of mode 0600, \
         and use it with CAIRN_TOKEN_FILE=FILE (and CAIRN_URL=<this daemon's URL> from another account)",
        t.principal.name
    );
}

pub fn user(root: &Path, command: UserCommand) -> Result<u8, Failure> {
    let client = Client::connect(root)?;
    match command {
        UserCommand::Add { name, role, json } => {
            let t: wire::IssuedTokenBody =
                call(&client, "POST", "/principals", Some(json!({"name": name, "role": role})))?
                    .decode(201, "POST /principals")?;
            if json { print_json(&t) } else { print_issued(&t, "added") }
        }
        UserCommand::List { json } => {
            let list: wire::PrincipalList = client.get("/principals")?.decode(200, "GET /principals")?;
            if json {
                print_json(&list);
            } else if list.principals.is_empty() {
                println!("no principals yet: add one with `cairn user add NAME --role ROLE`");
            } else {
                list.principals.iter().for_each(print_principal);
            }
        }
        UserCommand::Show { name, json } => {
            let p: wire::PrincipalBody =
                client.get(&format!("/principals/{}", seg(&name)))?.decode(200, "GET /principals/{name}")?;
            if json { print_json(&p) } else { print_principal(&p) }
        }
        UserCommand::Rotate { name, json } => {
            let t: wire::IssuedTokenBody = call(&client, "POST", &format!("/principals/{}/rotate", seg(&name)), None)?
                .decode(200, "POST /principals/{name}/rotate")?;
            if json { print_json(&t) } else { print_issued(&t, "rotated the token of") }
        }
        UserCommand::Revoke { name, json } => {
            let p: wire::PrincipalBody = call(&client, "POST", &format!("/principals/{}/revoke", seg(&name)), None)?
                .decode(200, "POST /principals/{name}/revoke")?;
            if json { print_json(&p) } else { println!("revoked {}: its token no longer works", p.name) }
        }
    }
    Ok(0)
}

fn print_role(r: &wire::RoleBody) {
    let kind = if r.builtin { "built-in" } else { "custom" };
    println!("{:<12} {kind:<8} {}", r.name, r.permissions.join(","));
}

pub fn role(root: &Path, command: RoleCommand) -> Result<u8, Failure> {
    let client = Client::connect(root)?;
    match command {
        RoleCommand::List { json } => {
            let list: wire::RoleList = client.get("/roles")?.decode(200, "GET /roles")?;
            if json { print_json(&list) } else { list.roles.iter().for_each(print_role) }
        }
        RoleCommand::Add { name, allow, json } => {
            let permissions: Vec<&str> = allow.split(',').map(str::trim).filter(|p| !p.is_empty()).collect();
            let r: wire::RoleBody =
                call(&client, "POST", "/roles", Some(json!({"name": name, "permissions": permissions})))?
                    .decode(201, "POST /roles")?;
            if json { print_json(&r) } else { print_role(&r) }
        }
        RoleCommand::Remove { name, json } => {
            let list: wire::RoleList = call(&client, "DELETE", &format!("/roles/{}", seg(&name)), None)?
                .decode(200, "DELETE /roles/{name}")?;
            if json { print_json(&list) } else { println!("removed role {name}: its grants allow nothing now") }
        }
    }
    Ok(0)
}

pub fn grant(root: &Path, command: GrantCommand) -> Result<u8, Failure> {
    let client = Client::connect(root)?;
    match command {
        GrantCommand::Add(GrantArgs { principal, role, workflow, target, json }) => {
            let body = wire::GrantRequest { role, workflow, target };
            let a =
                call(&client, "POST", &format!("/principals/{}/grants", seg(&principal)), Some(wire::to_value(&body)))?;
            let new = a.status == 201;
            let g: wire::GrantBody = a.decode(if new { 201 } else { 200 }, "POST /principals/{name}/grants")?;
            if json {
                print_json(&g);
            } else {
                let scope = scope_text(g.workflow.as_deref(), g.target.as_deref());
                let how = if new { "granted" } else { "already holds" };
                println!("{} {how} {} {scope}", g.principal, g.role);
            }
        }
        GrantCommand::Remove(GrantArgs { principal, role, workflow, target, json }) => {
            let mut query = format!("role={}", seg(&role));
            if let Some(w) = &workflow {
                query.push_str(&format!("&workflow={}", seg(w)));
            }
            if let Some(t) = &target {
                query.push_str(&format!("&target={}", seg(t)));
            }
            let p: wire::PrincipalBody =
                call(&client, "DELETE", &format!("/principals/{}/grants?{query}", seg(&principal)), None)?
                    .decode(200, "DELETE /principals/{name}/grants")?;
            if json { print_json(&p) } else { print_principal(&p) }
        }
    }
    Ok(0)
}

pub fn policy(root: &Path, command: PolicyCommand) -> Result<u8, Failure> {
    let client = Client::connect(root)?;
    let print = |p: &wire::PolicyBody| {
        println!("{}: two-person approval {}", p.workflow, if p.two_person { "on" } else { "off" });
    };
    match command {
        PolicyCommand::List { json } => {
            let list: wire::PolicyList = client.get("/policies")?.decode(200, "GET /policies")?;
            if json {
                print_json(&list);
            } else if list.policies.is_empty() {
                println!("no policies set");
            } else {
                list.policies.iter().for_each(print);
            }
        }
        PolicyCommand::Set { workflow, two_person, json } => {
            let p: wire::PolicyBody = call(
                &client,
                "PUT",
                &format!("/policies/{}", seg(&workflow)),
                Some(json!({"two_person": two_person})),
            )?
            .decode(200, "PUT /policies/{workflow}")?;
            if json { print_json(&p) } else { print(&p) }
        }
    }
    Ok(0)
}

pub fn audit(
    root: &Path,
    principal: Option<String>,
    action: Option<String>,
    object: Option<String>,
    limit: usize,
    json: bool,
) -> Result<u8, Failure> {
    let client = Client::connect(root)?;
    let mut query = format!("limit={limit}");
    for (key, value) in [("principal", &principal), ("action", &action), ("object", &object)] {
        if let Some(v) = value {
            query.push_str(&format!("&{key}={}", seg(v)));
        }
    }
    let list: wire::AuditList = client.get(&format!("/audit?{query}"))?.decode(200, "GET /audit")?;
    if json {
        print_json(&list);
    } else if list.acts.is_empty() {
        println!("no recorded acts match");
    } else {
        for a in &list.acts {
            let detail = if a.detail.as_object().is_some_and(|o| o.is_empty()) {
                String::new()
            } else {
                format!(" {}", a.detail)
            };
            println!(
                "{:>6} {} {:<10} {:<4} {:<20} {}{detail}",
                a.seq, a.at, a.principal, a.channel, a.action, a.object
            );
        }
    }
    Ok(0)
}

pub fn whoami(root: &Path, json: bool) -> Result<u8, Failure> {
    let client = Client::connect(root)?;
    let me: wire::Whoami = client.get("/whoami")?.decode(200, "GET /whoami")?;
    if json {
        print_json(&me);
    } else {
        println!("{}", me.principal);
        for a in &me.access {
            println!("  {} {}", a.permissions.join(","), scope_text(a.workflow.as_deref(), a.target.as_deref()));
        }
    }
    Ok(0)
}

fn print_quota(q: &wire::QuotaBody) {
    let on = match (&q.principal, &q.workflow, &q.target) {
        (Some(p), _, _) => format!("principal {p}"),
        (_, Some(w), _) => format!("workflow {w}"),
        (_, _, Some(t)) => format!("target {t}"),
        _ => "?".into(),
    };
    let mode = if q.queue { " (queues over it)" } else { "" };
    let frees = q.frees_at.as_deref().map(|t| format!("; frees at {t}")).unwrap_or_default();
    println!("{on:<28} {:<14} {:>6} of {:<6}{mode}{frees}", q.measure, q.used, q.limit);
}

pub fn quota(root: &Path, command: QuotaCommand) -> Result<u8, Failure> {
    let client = Client::connect(root)?;
    let subject_query = |s: &crate::cli::QuotaSubject| match (&s.principal, &s.workflow, &s.target) {
        (Some(p), _, _) => format!("principal={}", seg(p)),
        (_, Some(w), _) => format!("workflow={}", seg(w)),
        (_, _, Some(t)) => format!("target={}", seg(t)),
        _ => String::new(),
    };
    match command {
        QuotaCommand::List { json } => {
            let list: wire::QuotaList = client.get("/quotas")?.decode(200, "GET /quotas")?;
            if json {
                print_json(&list);
            } else if list.quotas.is_empty() {
                println!("no quotas set: add one with `cairn quota set --principal NAME --measure runs --limit N`");
            } else {
                list.quotas.iter().for_each(print_quota);
            }
        }
        QuotaCommand::Set { subject, measure, limit, queue, json } => {
            let body = wire::SetQuota {
                principal: subject.principal.clone(),
                workflow: subject.workflow.clone(),
                target: subject.target.clone(),
                measure,
                limit,
                queue,
            };
            let q: wire::QuotaBody =
                call(&client, "PUT", "/quotas", Some(wire::to_value(&body)))?.decode(200, "PUT /quotas")?;
            if json { print_json(&q) } else { print_quota(&q) }
        }
        QuotaCommand::Remove { subject, measure, json } => {
            let path = format!("/quotas?{}&measure={}", subject_query(&subject), seg(&measure));
            let list: wire::QuotaList = call(&client, "DELETE", &path, None)?.decode(200, "DELETE /quotas")?;
            if json { print_json(&list) } else { println!("removed the quota; {} left", list.quotas.len()) }
        }
    }
    Ok(0)
}

/// `cairn secret …`: the state root's own secret store and provider, as its owner (it works on
/// the state root's files, as the daemon that reads them at launch does).
pub fn secret(engine: &cairn_engine::Engine, command: SecretCommand) -> Result<u8, Failure> {
    let owner = crate::input::owner_caller();
    match command {
        SecretCommand::Set { name, json } => {
            let mut value = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut value)
                .map_err(|e| Failure::usage(format!("cannot read the secret's value from stdin: {e}")))?;
            // One line, as `echo` or a here-string gives it.
            let value = value.strip_suffix('\n').map(|v| v.strip_suffix('\r').unwrap_or(v)).unwrap_or(&value);
            engine.set_secret(&owner, &name, value)?;
            if json {
                print_json(&json!({"name": name, "stored": true}));
            } else {
                println!("stored secret {name} (mode 0600, outside the registry)");
            }
        }
        SecretCommand::Remove { name, json } => {
            engine.remove_secret(&owner, &name)?;
            if json { print_json(&json!({"name": name, "removed": true})) } else { println!("removed secret {name}") }
        }
        SecretCommand::List { json } => {
            let view = engine.secrets()?;
            let provider = view.provider.as_ref().map(|p| p.command.clone());
            if json {
                print_json(&json!({"stored": view.stored, "provider": provider}));
            } else {
                for name in &view.stored {
                    println!("{name}  (store)");
                }
                match provider {
                    Some(c) => println!("any other: `{} NAME`", c.join(" ")),
                    None if view.stored.is_empty() => {
                        println!(
                            "no secrets: `cairn secret set NAME` (value on stdin) or `cairn secret provider -- COMMAND…`"
                        )
                    }
                    None => {}
                }
            }
        }
        SecretCommand::Provider { command, none, json } => {
            if !none && command.is_empty() {
                return Err(Failure::usage(
                    "name the provider's command (e.g. `cairn secret provider -- pass show`), or --none",
                ));
            }
            let command = (!none).then_some(command);
            engine.set_secret_provider(&owner, command.clone())?;
            if json {
                print_json(&json!({"provider": command}));
            } else {
                match command {
                    Some(c) => println!("secrets not in the store come from `{} NAME`", c.join(" ")),
                    None => println!("no provider: secrets come from the store only"),
                }
            }
        }
    }
    Ok(0)
}
