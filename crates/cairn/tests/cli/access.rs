//! A team's Cairn from the outside: principals made with `cairn user add`, each holding one
//! built-in role, a custom role, or a grant scoped to one workflow or one target, call every
//! mutating endpoint (one table, like the token matrix of `api.rs`); the two-person rule; who
//! planned, approved, submitted and cancelled, on every surface and in the audit; the CLI and a
//! principal's token; revocation; and principals shared by two daemons on PostgreSQL.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use cairn_store::testing::Kind;

use crate::support::*;

/// The callers of the matrix, in its columns' order: a principal for each built-in role, one of
/// a custom role (`read,run`), one granted `launcher` for workflow `demo` only, and one granted
/// `approver` on target `local` only (each of the last two is a `viewer` everywhere else).
const WHO: [&str; 8] = ["vera", "lena", "abe", "max", "ada", "rob", "dana", "tom"];

pub(crate) struct Team {
    pub(crate) c: Cairn,
    pub(crate) url: String,
    pub(crate) tokens: BTreeMap<&'static str, String>,
    /// The runs `D1` (of `demo`) and `O1` (of `other`), finished, with their inputs.
    pub(crate) inputs: BTreeMap<&'static str, Value>,
}

impl Drop for Team {
    fn drop(&mut self) {
        let _ = self.c.cmd(&["daemon", "stop"]);
    }
}

pub(crate) fn token_of(out: &Out) -> String {
    out.json["token"].as_str().unwrap_or_else(|| panic!("no token: {}", out.json)).to_string()
}

impl Team {
    pub(crate) fn on(kind: Kind) -> Option<Team> {
        let c = Cairn::on(kind)?;
        chain_workflow(&c, "demo");
        chain_workflow(&c, "other");
        let mut inputs = BTreeMap::new();
        for (run, wf) in [("D1", "demo"), ("O1", "other")] {
            let input = chain_input(&c, json!({"a": ["ok"], "b": ["ok"], "c": ["ok"]}));
            c.run(wf, &input, &["--run-id", run]).expect(0);
            inputs.insert(run, input);
        }
        let d = c.start_daemon();
        c.json(&["role", "add", "runner", "--allow", "read,run"]).expect(0);
        let mut tokens = BTreeMap::new();
        let roles = ["viewer", "launcher", "approver", "maintainer", "admin", "runner", "viewer", "viewer"];
        for (name, role) in WHO.iter().zip(roles) {
            tokens.insert(*name, token_of(&c.json(&["user", "add", name, "--role", role]).expect(0)));
        }
        c.json(&["grant", "add", "dana", "launcher", "--workflow", "demo"]).expect(0);
        c.json(&["grant", "add", "tom", "approver", "--target", "local"]).expect(0);
        Some(Team { c, url: d.url, tokens, inputs })
    }

    pub(crate) fn call(&self, method: &str, path: &str, who: &str, body: Option<&Value>) -> Http {
        let body = body.map(Value::to_string);
        http(method, &format!("{}{path}", self.url), Some(&self.tokens[who]), body.as_deref(), &[])
    }

    fn submit(&self, run: &str, workflow: &str) -> Value {
        json!({"thread_id": "t", "workflow": workflow, "input": self.inputs[run], "run_id": run})
    }

    /// A plan of `workflow` on `local` made by the owner (the CLI works on the state root).
    fn owner_plan(&self, workflow: &str, name: &str) -> Value {
        let input = self.c.input(&self.inputs[if workflow == "demo" { "D1" } else { "O1" }]);
        std::fs::create_dir_all(self.c.path("plans-out")).unwrap();
        let dir = self.c.path(&format!("plans-out/{name}"));
        self.c.plan(workflow, &input, "local", &dir, name).expect(0).json
    }
}

/// One row: the request, the permission it needs, which callers (in [`WHO`]'s order, `+` or
/// `-`) may make it, and what an allowed caller gets (a refusal after the check, or a no-op).
struct Row {
    method: &'static str,
    path: String,
    body: Option<Value>,
    permission: &'static str,
    allowed: &'static str,
    outcome: (u16, Option<&'static str>),
}

fn row(
    method: &'static str,
    path: impl Into<String>,
    body: Option<Value>,
    permission: &'static str,
    allowed: &'static str,
    outcome: (u16, Option<&'static str>),
) -> Row {
    assert_eq!(allowed.len(), WHO.len());
    Row { method, path: path.into(), body, permission, allowed, outcome }
}

/// Every mutating endpoint against every kind of principal: an allowed caller gets past the
/// permission check (to the refusal or no-op the request leads to), a refused one gets 403
/// naming what it lacks; nothing a refused caller sent changes anything or is recorded.
fn permission_matrix(kind: Kind) {
    let Some(t) = Team::on(kind) else { return };
    let pd = t.owner_plan("demo", "pd");
    let po = t.owner_plan("other", "po");
    let wrong = |p: &Value| json!({"plan_id": p["plan_id"], "plan_checksum": "0".repeat(64)});
    let demo_dir = t.c.path_str("demo");
    let rows = vec![
        row("POST", "/runs", Some(t.submit("D1", "demo")), "run", "-++++++-", (200, None)),
        row("POST", "/runs", Some(t.submit("O1", "other")), "run", "-+++++--", (200, None)),
        row(
            "POST",
            "/plans",
            Some(json!({"workflow": "demo", "input": t.inputs["D1"], "target": "local", "run_dir": "relative"})),
            "plan",
            "-++++-++",
            (422, Some("invalid_run_dir")),
        ),
        row(
            "POST",
            "/plans",
            Some(json!({"workflow": "other", "input": t.inputs["O1"], "target": "local", "run_dir": "relative"})),
            "plan",
            "-++++--+",
            (422, Some("invalid_run_dir")),
        ),
        row("POST", "/plans/pd/execute", Some(wrong(&pd)), "approve", "--+++--+", (409, Some("plan_mismatch"))),
        row("POST", "/plans/po/execute", Some(wrong(&po)), "approve", "--+++--+", (409, Some("plan_mismatch"))),
        row("POST", "/runs/D1/cancel", None, "cancel", "---++---", (409, Some("run_finished"))),
        row("POST", "/workflows", Some(json!({"path": demo_dir})), "register", "---++---", (200, None)),
        row(
            "POST",
            "/targets",
            Some(json!({"name": "t", "ssh": "me@host", "workspace_root": "relative"})),
            "target",
            "---++---",
            (422, Some("invalid_target")),
        ),
        row("POST", "/targets/nope/probe", None, "plan", "-++++---", (404, Some("target_not_found"))),
        row("POST", "/kernel/jobs", Some(json!({"code": "  "})), "code", "---++---", (422, Some("empty_job"))),
        row("POST", "/kernel/interrupt", None, "code", "---++---", (200, None)),
        row("POST", "/kernel/restart", None, "code", "---++---", (200, None)),
        row("POST", "/verifications", Some(json!({})), "code", "---++---", (422, Some("invalid_field"))),
        row("POST", "/verifications/nope/cancel", None, "code", "---++---", (404, Some("verification_not_found"))),
        row(
            "POST",
            "/docs",
            Some(json!({"name": "a/b", "text": "# M\n"})),
            "docs",
            "-++++---",
            (422, Some("invalid_doc_name")),
        ),
        row("DELETE", "/docs/nope", None, "docs", "-++++---", (404, Some("doc_not_found"))),
        row(
            "POST",
            "/principals",
            Some(json!({"name": "Bad Name", "role": "viewer"})),
            "admin",
            "----+---",
            (422, Some("invalid_name")),
        ),
        row("POST", "/principals/nope/rotate", None, "admin", "----+---", (404, Some("principal_not_found"))),
        row("POST", "/principals/nope/revoke", None, "admin", "----+---", (404, Some("principal_not_found"))),
        row(
            "POST",
            "/principals/nope/grants",
            Some(json!({"role": "viewer"})),
            "admin",
            "----+---",
            (404, Some("principal_not_found")),
        ),
        row("DELETE", "/principals/nope/grants?role=viewer", None, "admin", "----+---", (404, Some("grant_not_found"))),
        row(
            "POST",
            "/roles",
            Some(json!({"name": "r", "permissions": ["fly"]})),
            "admin",
            "----+---",
            (422, Some("invalid_field")),
        ),
        row("DELETE", "/roles/nope", None, "admin", "----+---", (404, Some("role_not_found"))),
        row("PUT", "/policies/demo", Some(json!({"two_person": false})), "admin", "----+---", (200, None)),
        row(
            "PUT",
            "/quotas",
            Some(json!({"principal": "x", "measure": "fly", "limit": 1})),
            "admin",
            "----+---",
            (422, Some("invalid_field")),
        ),
        row("DELETE", "/quotas?principal=x&measure=runs", None, "admin", "----+---", (404, Some("quota_not_found"))),
        row("GET", "/quotas", None, "read", "++++++++", (200, None)),
        // Reads: everyone's roles hold `read`.
        row("GET", "/runs", None, "read", "++++++++", (200, None)),
        row("GET", "/principals", None, "read", "++++++++", (200, None)),
        row("GET", "/audit", None, "read", "++++++++", (200, None)),
        row("GET", "/whoami", None, "read", "++++++++", (200, None)),
    ];
    let runs_before = t.c.runs().len();
    for r in &rows {
        for (who, allowed) in WHO.iter().zip(r.allowed.chars()) {
            let what = format!("{} {} as {who}", r.method, r.path);
            let got = t.call(r.method, &r.path, who, r.body.as_ref());
            let code = got.body["error"]["code"].as_str();
            if allowed == '+' {
                assert_eq!((got.status, code), (r.outcome.0, r.outcome.1), "{what}: {}", got.text);
            } else {
                assert_eq!((got.status, code), (403, Some("forbidden")), "{what}: {}", got.text);
                let message = got.body["error"]["message"].as_str().unwrap_or_default();
                assert!(message.contains(who), "{what}: the refusal names who: {message}");
                if *who != "vera" {
                    let lacks = format!("may not {}", r.permission);
                    assert!(message.contains(&lacks), "{what}: the refusal names `{}`: {message}", r.permission);
                    let missing = &got.body["error"]["missing"];
                    assert_eq!(missing["permission"], r.permission, "{what}: `missing` names it too: {}", got.text);
                }
            }
        }
    }
    assert_eq!(t.c.runs().len(), runs_before, "no request of the matrix creates a run");
    // Only the admin's policy change was recorded: nothing refused, nothing a no-op.
    let audit = t.c.json(&["audit", "--limit", "1000"]).expect(0).json;
    let by_callers: Vec<(String, String)> = audit["acts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["principal"] != "owner")
        .map(|a| (a["principal"].as_str().unwrap().to_string(), a["action"].as_str().unwrap().to_string()))
        .collect();
    let policy = ("ada".to_string(), "policy.changed".to_string());
    assert_eq!(by_callers, vec![policy], "{audit:#}");
    // What each principal may do where, as `whoami` says it.
    let dana = t.call("GET", "/whoami", "dana", None).body;
    assert_eq!(dana["principal"], "dana");
    assert_eq!(
        dana["access"][1],
        json!({"permissions": ["read", "plan", "run", "docs"], "workflow": "demo"}),
        "{dana}"
    );
}

#[test]
fn permission_matrix_sqlite() {
    permission_matrix(Kind::Sqlite);
}

#[test]
fn permission_matrix_postgres() {
    permission_matrix(Kind::Postgres);
}

/// The CLI's commands that ask the daemon, run with each principal's token (`CAIRN_TOKEN`),
/// from one table: an allowed caller gets past the check (exit 0, or the refusal its arguments
/// lead to), a refused one exits 2 with the error `forbidden`.
fn cli_matrix(kind: Kind) {
    let Some(t) = Team::on(kind) else { return };
    let pd = t.owner_plan("demo", "pd");
    let input = t.c.input(&t.inputs["D1"]);
    let input = input.to_str().unwrap();
    let plan_id = pd["plan_id"].as_str().unwrap();
    let zeros = "0".repeat(64);
    let rows: Vec<(Vec<&str>, &str)> = vec![
        (vec!["run", "demo", "--input", input, "--run-id", "D1"], "-++++++-"),
        (vec!["execute-plan", "pd", "--id", plan_id, "--checksum", &zeros], "--+++--+"),
        (vec!["cancel", "D1"], "---++---"),
        (vec!["user", "add", "Bad Name", "--role", "viewer"], "----+---"),
        (vec!["grant", "add", "nope", "viewer"], "----+---"),
        (vec!["role", "add", "r", "--allow", "fly"], "----+---"),
        (vec!["policy", "set", "demo", "--two-person", "off"], "----+---"),
        (vec!["quota", "set", "--principal", "x", "--measure", "fly", "--limit", "1"], "----+---"),
        (vec!["audit"], "++++++++"),
        (vec!["quota"], "++++++++"),
        (vec!["whoami"], "++++++++"),
    ];
    for (args, allowed) in &rows {
        for (who, allowed) in WHO.iter().zip(allowed.chars()) {
            let mut argv = args.clone();
            argv.push("--json");
            let out = t.c.std_command(&argv).env("CAIRN_TOKEN", &t.tokens[who]).output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout).to_string();
            let answer: Value = serde_json::from_str(&stdout).unwrap_or(Value::Null);
            let what = format!("cairn {} as {who}", args.join(" "));
            let code = answer["error"]["code"].as_str();
            if allowed == '+' {
                assert_ne!(code, Some("forbidden"), "{what}: it may: {stdout}");
            } else {
                assert_eq!((out.status.code(), code), (Some(2), Some("forbidden")), "{what}: {stdout}");
            }
        }
    }
}

#[test]
fn cli_matrix_sqlite() {
    cli_matrix(Kind::Sqlite);
}

#[test]
fn cli_matrix_postgres() {
    cli_matrix(Kind::Postgres);
}

/// A workflow needing two people: its planner may not execute the plan even with `approve`;
/// another approver may, and the run says who planned and who approved, on every surface.
fn two_person_approval(kind: Kind) {
    let Some(t) = Team::on(kind) else { return };
    t.c.json(&["grant", "add", "dana", "approver", "--workflow", "demo"]).expect(0);
    t.c.json(&["policy", "set", "demo", "--two-person", "on"]).expect(0);
    let dir = t.c.path_str("two/run");
    std::fs::create_dir_all(t.c.path("two")).unwrap();
    let body =
        json!({"workflow": "demo", "input": t.inputs["D1"], "target": "local", "run_dir": dir, "plan_name": "p2"});
    let plan = t.call("POST", "/plans", "dana", Some(&body));
    assert_eq!(plan.status, 201, "{}", plan.text);
    let exec = json!({"plan_id": plan.body["plan_id"], "plan_checksum": plan.body["plan_checksum"]});
    let own = t.call("POST", "/plans/p2/execute", "dana", Some(&exec));
    assert_eq!((own.status, own.body["error"]["code"].as_str()), (403, Some("two_person_required")), "{}", own.text);
    assert!(own.text.contains("made by dana"), "{}", own.text);
    let run = t.call("POST", "/plans/p2/execute", "abe", Some(&exec));
    assert_eq!(run.status, 202, "{}", run.text);
    let run_id = run.body["run_id"].as_str().unwrap().to_string();
    let done = t.c.wait_for_status(&run_id, "READY", std::time::Duration::from_secs(60));
    assert_eq!(done["submitted_by"], "abe", "{done:#}");
    assert_eq!(done["approval"]["by"], "abe");
    assert_eq!(done["approval"]["planned_by"], "dana");
    let api = t.call("GET", &format!("/runs/{run_id}"), "vera", None).body;
    assert_eq!((api["approval"]["by"].clone(), api["approval"]["planned_by"].clone()), (json!("abe"), json!("dana")));
    let shown = t.c.raw(&["show", &run_id]).expect(0).stdout;
    assert!(shown.contains("planned by dana") && shown.contains("approved by abe"), "{shown}");
    // The RO-Crate names the person behind the approval as the run's agent, the planner beside.
    let dir = t.c.path("crate");
    t.c.json(&["export", &run_id, "--ro-crate", dir.to_str().unwrap(), "--no-data"]).expect(0);
    let rocrate: Value = serde_json::from_slice(&std::fs::read(dir.join("ro-crate-metadata.json")).unwrap()).unwrap();
    let graph = rocrate["@graph"].as_array().unwrap();
    let action = graph.iter().find(|e| e["@type"] == "CreateAction" && e["identifier"] == run_id.as_str()).unwrap();
    assert_eq!(action["agent"], json!({"@id": "#principal-abe"}), "{action:#}");
    assert_eq!(action["participant"], json!([{"@id": "#principal-dana"}]), "{action:#}");
    let abe = graph.iter().find(|e| e["@id"] == "#principal-abe").unwrap();
    assert_eq!((abe["@type"].as_str(), abe["name"].as_str()), (Some("Person"), Some("abe")), "{abe:#}");
    let acts = t.c.json(&["audit", "--object", "p2"]).expect(0).json;
    let said: Vec<(Value, Value, Value)> = acts["acts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["principal"].clone(), a["action"].clone(), a["channel"].clone()))
        .collect();
    assert_eq!(
        said,
        vec![(json!("abe"), json!("plan.approved"), json!("api")), (json!("dana"), json!("plan.made"), json!("api"))]
    );
    // Switched off, the planner may execute her own next plan.
    t.c.json(&["policy", "set", "demo", "--two-person", "off"]).expect(0);
    let body = json!({"workflow": "demo", "input": t.inputs["D1"], "target": "local", "run_dir": t.c.path_str("two/again"), "plan_name": "p3"});
    let plan = t.call("POST", "/plans", "dana", Some(&body));
    let exec = json!({"plan_id": plan.body["plan_id"], "plan_checksum": plan.body["plan_checksum"]});
    assert_eq!(t.call("POST", "/plans/p3/execute", "dana", Some(&exec)).status, 202);
}

#[test]
fn two_person_approval_sqlite() {
    two_person_approval(Kind::Sqlite);
}

#[test]
fn two_person_approval_postgres() {
    two_person_approval(Kind::Postgres);
}

/// A launcher cancels her own run but not another's; the CLI acts as the principal of
/// `CAIRN_TOKEN_FILE`; a revoked or rotated token stops working at once.
#[test]
fn a_principal_through_the_cli_and_its_token_lifecycle() {
    let Some(t) = Team::on(Kind::Sqlite) else { return };
    // lena's own run: past the check (it had finished: 409), where rob is refused.
    let mine = t.call(
        "POST",
        "/runs",
        "lena",
        Some(&json!({"thread_id": "t", "workflow": "demo", "input": t.inputs["D1"], "run_id": "L1"})),
    );
    assert_eq!(mine.status, 202, "{}", mine.text);
    let run = t.c.wait_for_status("L1", "READY", std::time::Duration::from_secs(60));
    assert_eq!(run["submitted_by"], "lena");
    assert_eq!(t.call("POST", "/runs/L1/cancel", "lena", None).body["error"]["code"], "run_finished");
    assert_eq!(t.call("POST", "/runs/L1/cancel", "rob", None).body["error"]["code"], "forbidden");
    assert_eq!(t.call("POST", "/runs/L1/cancel", "dana", None).body["error"]["code"], "forbidden");

    // The CLI with a token file acts as its principal, and refuses what it may not do.
    let file = t.c.path("lena.token");
    std::fs::write(&file, format!("{}\n", t.tokens["lena"])).unwrap();
    let as_lena = |args: &[&str]| {
        let mut cmd = t.c.std_command(args);
        cmd.env("CAIRN_TOKEN_FILE", &file);
        let out = cmd.output().unwrap();
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).to_string())
    };
    let (code, me) = as_lena(&["whoami", "--json"]);
    assert_eq!((code, serde_json::from_str::<Value>(&me).unwrap()["principal"].clone()), (0, json!("lena")));
    let (code, out) = as_lena(&["user", "add", "eve", "--role", "admin", "--json"]);
    let err: Value = serde_json::from_str(&out).unwrap();
    assert_eq!((code, err["error"]["code"].clone()), (2, json!("forbidden")), "{out}");
    let (code, out) = as_lena(&["cancel", "D1", "--json"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("\"forbidden\""), "{out}");
    let acts = t.c.json(&["audit", "--principal", "lena"]).expect(0).json;
    assert_eq!(acts["acts"][0]["action"], "run.submitted");
    assert_eq!(acts["acts"][0]["object"], "L1");

    // Rotated: the old token is refused at once, the new one works; revoked: refused.
    let new = token_of(&t.c.json(&["user", "rotate", "lena"]).expect(0));
    let old = http("GET", &format!("{}/whoami", t.url), Some(&t.tokens["lena"]), None, &[]);
    assert_eq!((old.status, old.body["error"]["code"].as_str()), (401, Some("unauthorized")));
    assert_eq!(http("GET", &format!("{}/whoami", t.url), Some(&new), None, &[]).status, 200);
    t.c.json(&["user", "revoke", "lena"]).expect(0);
    assert_eq!(http("GET", &format!("{}/whoami", t.url), Some(&new), None, &[]).status, 401);
    let shown = t.c.json(&["user", "show", "lena"]).expect(0).json;
    assert_eq!(shown["revoked"], true);
    // Only a hash is kept: the token's bytes are nowhere in the registry.
    let dump = t.c.sql(&[], ".dump").unwrap_or_default();
    assert!(!dump.is_empty() && !dump.contains(&new) && !dump.contains(&t.tokens["abe"]), "a token is stored in clear");
}

/// Principals live in the registry: on PostgreSQL a principal added through one daemon is known
/// to another at once, and revoked through the other, refused by the first at once.
#[test]
fn principals_are_shared_by_the_daemons_of_one_registry() {
    let Some(a) = Cairn::on(Kind::Postgres) else { return };
    let da = a.start_daemon();
    let b = Cairn::new();
    let url = a.database().expect("a PostgreSQL registry").url.clone();
    b.raw(&["daemon", "start", "--database", url.as_str()]).expect(0);
    let db = b.daemon();
    let token = token_of(&a.json(&["user", "add", "zoe", "--role", "launcher"]).expect(0));
    let whoami = |base: &str| http("GET", &format!("{base}/whoami"), Some(&token), None, &[]);
    assert_eq!(whoami(&db.url).body["principal"], "zoe", "daemon b knows zoe");
    b.json(&["user", "revoke", "zoe"]).expect(0);
    assert_eq!(whoami(&da.url).status, 401, "daemon a refuses the revoked token at once");
    let acts = a.json(&["audit", "--object", "zoe"]).expect(0).json;
    let actions: Vec<&str> = acts["acts"].as_array().unwrap().iter().map(|a| a["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["principal.revoked", "principal.added"]);
    let _ = b.cmd(&["daemon", "stop"]);
    let _ = a.cmd(&["daemon", "stop"]);
}
