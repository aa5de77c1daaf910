//! Quotas from the outside: a principal's open runs refused over its limit and freed when one
//! ends; a workflow's runs held queued over a queue-mode limit (shown on the run, started when a
//! place frees, a full queue refused), across a kill -9 of the daemon; a day's steps refused; the
//! use on `GET /quotas` and `cairn quota`; and one limit shared by two daemons on PostgreSQL.

use std::time::Duration;

use serde_json::{Value, json};

use cairn_store::testing::Kind;

use crate::access::Team;
use crate::support::*;

const LONG: Duration = Duration::from_secs(60);

/// A `demo` run whose step `a` sleeps `secs` (the chain's other steps are quick).
fn slow(t: &Team, run_id: &str, secs: u32) -> Value {
    let input = chain_input(&t.c, json!({"a": [format!("sleep:{secs}")], "b": ["ok"], "c": ["ok"]}));
    json!({"thread_id": "q", "workflow": "demo", "input": input, "run_id": run_id})
}

fn quota_use(t: &Team) -> Vec<(Value, Value, Value, Value)> {
    let list = t.c.json(&["quota", "list"]).expect(0).json;
    list["quotas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| (q["principal"].clone(), q["workflow"].clone(), q["measure"].clone(), q["used"].clone()))
        .collect()
}

/// Over a principal's `runs` limit a submission is refused with 429, naming the quota and its
/// use, and creates nothing; cancelling one of its runs frees the place.
fn a_principals_open_runs(kind: Kind) {
    let Some(t) = Team::on(kind) else { return };
    t.c.json(&["quota", "set", "--principal", "lena", "--measure", "runs", "--limit", "1"]).expect(0);
    let first = t.call("POST", "/runs", "lena", Some(&slow(&t, "L1", 30)));
    assert_eq!(first.status, 202, "{}", first.text);
    let over = t.call("POST", "/runs", "lena", Some(&slow(&t, "L2", 1)));
    assert_eq!((over.status, over.body["error"]["code"].as_str()), (429, Some("quota_exceeded")), "{}", over.text);
    let message = over.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("principal `lena`: at most 1 open run(s)") && message.contains("1 open run(s) in use"),
        "{message}"
    );
    assert!(message.contains("cairn cancel"), "it says how the place frees: {message}");
    assert_eq!(t.call("GET", "/runs/L2", "vera", None).status, 404, "a refused submission creates nothing");
    // Another principal is not limited by lena's quota; the CLI exits 4 with the same code.
    assert_eq!(t.call("POST", "/runs", "abe", Some(&slow(&t, "A1", 1))).status, 202);
    assert!(quota_use(&t).contains(&(json!("lena"), Value::Null, json!("runs"), json!(1))), "{:?}", quota_use(&t));
    let refused =
        t.c.std_command(&["run", "demo", "--input", t.c.input(&slow(&t, "x", 1)["input"]).to_str().unwrap(), "--json"])
            .env("CAIRN_TOKEN", &t.tokens["lena"])
            .output()
            .unwrap();
    assert_eq!(refused.status.code(), Some(4), "{}", String::from_utf8_lossy(&refused.stdout));
    assert!(String::from_utf8_lossy(&refused.stdout).contains("\"quota_exceeded\""));
    // lena cancels her run: the place is free.
    assert_eq!(t.call("POST", "/runs/L1/cancel", "lena", None).status, 200);
    let again = t.call("POST", "/runs", "lena", Some(&slow(&t, "L3", 0)));
    assert_eq!(again.status, 202, "{}", again.text);
    t.c.wait_for_status("L3", "READY", LONG);
    t.c.wait_for_status("A1", "READY", LONG);
}

#[test]
fn a_principals_open_runs_sqlite() {
    a_principals_open_runs(Kind::Sqlite);
}

#[test]
fn a_principals_open_runs_postgres() {
    a_principals_open_runs(Kind::Postgres);
}

/// Over a workflow's queue-mode `runs` limit a submission is created held: its wait says why,
/// it starts once the run ahead ends, and a full queue refuses the next; a kill -9 of the daemon
/// while one is held keeps it held, and the next daemon starts it when its place frees.
fn a_workflows_queue(kind: Kind) {
    let Some(t) = Team::on(kind) else { return };
    t.c.json(&["quota", "set", "--workflow", "demo", "--measure", "runs", "--limit", "1", "--queue"]).expect(0);
    t.c.json(&["quota", "set", "--workflow", "demo", "--measure", "queued_runs", "--limit", "1"]).expect(0);
    assert_eq!(t.call("POST", "/runs", "lena", Some(&slow(&t, "Q1", 4))).status, 202);
    let held = t.call("POST", "/runs", "abe", Some(&slow(&t, "Q2", 0)));
    assert_eq!(held.status, 202, "{}", held.text);
    assert_eq!(held.body["status"], "RUNNING");
    assert_eq!(held.body["waiting"]["code"], "quota_queued", "the answer says it is queued: {}", held.text);
    let reason = held.body["waiting"]["reason"].as_str().unwrap();
    assert!(reason.contains("workflow `demo`: at most 1 open run(s), queued over it"), "{reason}");
    let full = t.call("POST", "/runs", "max", Some(&slow(&t, "Q3", 0)));
    assert_eq!((full.status, full.body["error"]["code"].as_str()), (429, Some("quota_exceeded")), "{}", full.text);
    assert!(full.text.contains("queued_runs") || full.text.contains("queued run(s)"), "{}", full.text);
    let shown = t.c.raw(&["show", "Q2"]).expect(0).stdout;
    assert!(shown.contains("quota_queued"), "cairn show says why it waits: {shown}");
    assert!(quota_use(&t).contains(&(Value::Null, json!("demo"), json!("queued_runs"), json!(1))));

    // kill -9 of the daemon while Q2 is held: the next daemon keeps it held until Q1 ends.
    let pid = t.c.daemon().pid;
    kill9_pid(pid);
    assert!(wait_until(Duration::from_secs(10), || !alive(pid)), "the daemon was killed");
    t.c.start_daemon();
    let q1 = t.c.wait_for_status("Q1", "READY", LONG);
    let q2 = t.c.wait_for_status("Q2", "READY", LONG);
    let events = t.c.events("Q2");
    let waits: Vec<&Value> = events_of(&events, "run.waiting", None);
    assert!(!waits.is_empty() && waits.iter().all(|e| e["data"]["code"] == "quota_queued"), "{events:#?}");
    assert!(!events_of(&events, "run.continued", None).is_empty(), "{events:#?}");
    // Q2's step started only after Q1 had finished.
    let q2_first_step = events_of(&events, "step.started", None)[0]["at"].clone();
    assert!(q2_first_step.as_str() >= q1["finished_at"].as_str(), "{q2_first_step} before {}", q1["finished_at"]);
    assert_eq!(q2["submitted_by"], "abe");
}

#[test]
fn a_workflows_queue_sqlite() {
    a_workflows_queue(Kind::Sqlite);
}

#[test]
fn a_workflows_queue_postgres() {
    a_workflows_queue(Kind::Postgres);
}

/// A day's steps: a principal's runs start steps until the limit, then a submission is refused
/// naming when the oldest step leaves the window.
#[test]
fn steps_per_day() {
    let Some(t) = Team::on(Kind::Sqlite) else { return };
    t.c.json(&["quota", "set", "--principal", "rob", "--measure", "steps_per_day", "--limit", "3"]).expect(0);
    let first = t.call("POST", "/runs", "rob", Some(&slow(&t, "S1", 0)));
    assert_eq!(first.status, 202, "{}", first.text);
    t.c.wait_for_status("S1", "READY", LONG);
    let over = t.call("POST", "/runs", "rob", Some(&slow(&t, "S2", 0)));
    assert_eq!((over.status, over.body["error"]["code"].as_str()), (429, Some("quota_exceeded")), "{}", over.text);
    assert!(
        over.text.contains("3 step(s) started in the last 24 hours in use") && over.text.contains("24-hour window"),
        "{}",
        over.text
    );
    let listed = t.c.json(&["quota"]).expect(0).json;
    assert_eq!(listed["quotas"][0]["used"], 3, "{listed:#}");
    assert!(listed["quotas"][0]["frees_at"].is_string(), "{listed:#}");
    // Only an admin sets quotas, and the audit says who did.
    let refused = t.call("PUT", "/quotas", "max", Some(&json!({"principal": "rob", "measure": "runs", "limit": 9})));
    assert_eq!(refused.status, 403);
    let acts = t.c.json(&["audit", "--action", "quota.set"]).expect(0).json;
    assert_eq!(acts["acts"][0]["principal"], "owner");
    assert_eq!(acts["acts"][0]["detail"], json!({"measure": "steps_per_day", "limit": 3, "queue": false}));
}

/// One limit for two daemons of one registry: a principal's open run on one counts on the other.
#[test]
fn a_quota_binds_every_daemon_of_the_registry() {
    let Some(t) = Team::on(Kind::Postgres) else { return };
    t.c.json(&["quota", "set", "--principal", "lena", "--measure", "runs", "--limit", "1"]).expect(0);
    let b = Cairn::new();
    let url = t.c.database().expect("a PostgreSQL registry").url.clone();
    b.raw(&["daemon", "start", "--database", url.as_str()]).expect(0);
    chain_workflow(&b, "demo");
    let on_b = b.daemon().url;
    assert_eq!(t.call("POST", "/runs", "lena", Some(&slow(&t, "P1", 20))).status, 202);
    let body = slow(&t, "P2", 0).to_string();
    let r = http("POST", &format!("{on_b}/runs"), Some(&t.tokens["lena"]), Some(&body), &[]);
    assert_eq!((r.status, r.body["error"]["code"].as_str()), (429, Some("quota_exceeded")), "{}", r.text);
    assert_eq!(t.call("POST", "/runs/P1/cancel", "lena", None).status, 200);
    let _ = b.cmd(&["daemon", "stop"]);
}

/// A tool that fails (exit 3) when another step holds the lock on its marker file: two of its
/// steps that overlap cannot both succeed.
const EXCLUSIVE_PY: &str = r#"
import fcntl, json, os, sys, time
args = json.load(sys.stdin)
# A lock, not a file created and removed: it dies with its holder, so a step stopped by a
# recovering daemon (SIGTERM, as an orphan of a killed daemon is) leaves nothing held behind.
fd = os.open(args["marker"], os.O_CREAT | os.O_WRONLY)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    print("another step holds " + args["marker"], file=sys.stderr)
    sys.exit(3)
time.sleep(float(args["sleep"]))
print(json.dumps({"ok": True}))
"#;

const EXCLUSIVE: &str = r#"
[workflow]
name = "exclusive"
version = "1.0.0"

[tools.excl]
command = ["python3", "tools/excl.py"]

[[steps]]
id = "hold"
tool = "excl"
args = { marker = "${input.marker}", sleep = "${input.sleep}" }
"#;

/// Two runs submitted at once, each one step holding the marker for 2 s; their statuses.
fn two_at_once(c: &Cairn, ids: [&str; 2]) -> Vec<Value> {
    let url = c.daemon().url;
    let token = c.token("operator");
    for id in ids {
        let body = json!({"thread_id": "t", "workflow": "exclusive", "run_id": id,
            "input": {"marker": c.path_str("marker"), "sleep": "2"}});
        let r = http("POST", &format!("{url}/runs"), Some(&token), Some(&body.to_string()), &[]);
        assert_eq!(r.status, 202, "{}", r.text);
    }
    ids.iter()
        .map(|id| {
            wait_until(LONG, || !matches!(c.show(id)["status"].as_str(), Some("RUNNING")));
            c.show(id)
        })
        .collect()
}

/// A target's `steps` quota: without it two runs' steps overlap on the local target (one fails
/// on the other's marker, proving they ran at once); with a limit of 1 both succeed, the second
/// having waited for the first's place (`step.queued`, naming the quota).
fn a_targets_steps(kind: Kind) {
    let Some(c) = Cairn::on(kind) else { return };
    c.add(&write_workflow(&c.path("exclusive"), EXCLUSIVE, &[("tools/excl.py", EXCLUSIVE_PY)]));
    // Two workers whatever the machine's CPUs: the two runs execute at once.
    c.json(&["daemon", "start", "--workers", "2"]).expect(0);
    let free = two_at_once(&c, ["F1", "F2"]);
    let statuses: Vec<&str> = free.iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert!(statuses.contains(&"FAILED") && statuses.contains(&"READY"), "without a quota they overlap: {free:#?}");

    c.json(&["quota", "set", "--target", "local", "--measure", "steps", "--limit", "1"]).expect(0);
    let limited = two_at_once(&c, ["L1", "L2"]);
    for r in &limited {
        assert_eq!(r["status"], "READY", "with a place each they do not overlap: {r:#}");
    }
    let queued: Vec<Value> =
        ["L1", "L2"].iter().flat_map(|id| c.events(id)).filter(|e| e["kind"] == "step.queued").collect();
    assert_eq!(queued.len(), 1, "one of them waited for the other's place: {queued:#?}");
    let reason = queued[0]["data"]["reason"].as_str().unwrap();
    assert!(reason.contains("target `local`") && reason.contains("at its quota of 1"), "{reason}");
    let listed = c.json(&["quota"]).expect(0).json;
    assert_eq!(listed["quotas"][0]["target"], "local", "{listed:#}");
    assert_eq!(listed["quotas"][0]["used"], 0, "no step runs now: {listed:#}");
    // A target's quota is on its steps only.
    let wrong = c.json(&["quota", "set", "--target", "local", "--measure", "runs", "--limit", "1"]);
    assert_eq!((wrong.code, wrong.json["error"]["code"].clone()), (2, json!("invalid_field")));
}

#[test]
fn a_targets_steps_sqlite() {
    a_targets_steps(Kind::Sqlite);
}

#[test]
fn a_targets_steps_postgres() {
    a_targets_steps(Kind::Postgres);
}

/// kill -9 of the daemon while a step waits for a place of its target (begun, not launched, the
/// place held by the other run's step): the next daemon resumes both runs, the waiting step takes
/// the place once it frees, and the two never overlap — both READY.
#[test]
fn a_step_waiting_for_its_targets_place_survives_a_kill_9() {
    let c = Cairn::new();
    c.add(&write_workflow(&c.path("exclusive"), EXCLUSIVE, &[("tools/excl.py", EXCLUSIVE_PY)]));
    c.json(&["daemon", "start", "--workers", "2"]).expect(0);
    c.json(&["quota", "set", "--target", "local", "--measure", "steps", "--limit", "1"]).expect(0);
    let url = c.daemon().url;
    let token = c.token("operator");
    for id in ["K1", "K2"] {
        let body = json!({"thread_id": "t", "workflow": "exclusive", "run_id": id,
            "input": {"marker": c.path_str("marker"), "sleep": "3"}});
        let r = http("POST", &format!("{url}/runs"), Some(&token), Some(&body.to_string()), &[]);
        assert_eq!(r.status, 202, "{}", r.text);
    }
    let queued = || ["K1", "K2"].iter().any(|id| c.events(id).iter().any(|e| e["kind"] == "step.queued"));
    assert!(wait_until(Duration::from_secs(20), queued), "one step waits for the place");
    let pid = c.daemon().pid;
    kill9_pid(pid);
    assert!(wait_until(Duration::from_secs(10), || !alive(pid)), "the daemon was killed");
    c.json(&["daemon", "start", "--workers", "2"]).expect(0);
    for id in ["K1", "K2"] {
        let run = c.wait_for_status(id, "READY", LONG);
        assert_eq!(step(&run, "hold")["status"], "COMPLETED", "{run:#}");
    }
}
