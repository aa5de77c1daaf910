//! `cairn://runs/{run_id}` can be subscribed to — `resources/subscribe` on 2025-11-25, a
//! `subscriptions/listen` stream on 2026-07-28, over stdio and streamable HTTP — and the
//! subscriber gets `notifications/resources/updated` for it as the run's state changes, until it
//! ends; an unsubscribed (or closed) subscription gets nothing more; an unknown run cannot be
//! subscribed to.

use super::*;

/// Three steps one after the other, each taking most of a second: a run whose state changes
/// while a subscriber watches.
const NAPS: &str = r#"
[workflow]
name = "naps"
version = "1.0.0"

[tools.nap]
command = ["python3", "tools/nap.py"]

[[steps]]
id = "first"
tool = "nap"

[[steps]]
id = "second"
tool = "nap"
needs = ["first"]

[[steps]]
id = "third"
tool = "nap"
needs = ["second"]
"#;

const NAP_PY: &str =
    "import json, sys, time\njson.load(sys.stdin)\ntime.sleep(0.8)\nprint(json.dumps({'slept': 0.8}))\n";

/// Starts `naps` into runs/NAME through the API (it answers at once): its run id.
fn start(fx: &Fx, wb: &Session<'_>, name: &str) -> String {
    let plan = wb.call_ok(
        "plan_run",
        json!({"workflow": "naps", "input": {}, "target": "local", "run_dir": fx.p(&format!("runs/{name}"))}),
    );
    let body = json!({"plan_id": plan["plan_id"], "plan_checksum": plan["plan_checksum"]}).to_string();
    let url = format!("{}/plans/{}/execute", fx.url(), str_of(&plan["plan_name"]));
    let r = http("POST", &url, Some(&fx.token("operator")), Some(&body), &[]);
    assert_eq!(r.status, 202, "{:#}", r.body);
    str_of(&r.body["run_id"]).to_string()
}

/// Waits for the run to end (read through the API).
fn ended(fx: &Fx, run_id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = http("GET", &format!("{}/runs/{run_id}", fx.url()), Some(&fx.token("viewer")), None, &[]);
        if !matches!(r.body["status"].as_str(), Some("RUNNING" | "PENDING")) {
            return r.body;
        }
        assert!(Instant::now() < deadline, "run {run_id} did not end: {:#}", r.body);
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn updates(s: &Session<'_>, uri: &str) -> usize {
    s.ok("updates", json!({}))["uris"].as_array().unwrap().iter().filter(|u| u.as_str() == Some(uri)).count()
}

#[test]
fn a_subscriber_is_told_of_each_change_of_a_run_until_it_ends() {
    let Some(fx) = Fx::new() else { return };
    let naps = fx.p("naps");
    std::fs::create_dir_all(naps.join("tools")).unwrap();
    std::fs::write(naps.join("workflow.toml"), NAPS).unwrap();
    std::fs::write(naps.join("tools/nap.py"), NAP_PY).unwrap();
    std::fs::create_dir_all(fx.p("runs")).unwrap();
    fx.start_daemon();
    let client = fx.client();
    let wb = client.stdio("workbench");
    wb.call_ok("add_workflow", json!({"path": naps}));

    for (over, era) in
        [(Over::Stdio, "legacy"), (Over::Stdio, "modern"), (Over::Http, "legacy"), (Over::Http, "modern")]
    {
        let s = client.session_with(over, "app", "viewer", json!({"era": era}));
        let w = format!("{} ({era})", s.what);
        if era == "legacy" {
            assert_eq!(s.init["capabilities"]["resources"]["subscribe"], true, "{w}: {:#}", s.init);
        }
        let tag = format!("{}-{era}", if over == Over::Stdio { "stdio" } else { "http" });
        let (a, b) = (start(&fx, &wb, &format!("{tag}-a")), start(&fx, &wb, &format!("{tag}-b")));
        let (ua, ub) = (format!("cairn://runs/{a}"), format!("cairn://runs/{b}"));
        s.ok("subscribe", json!({"uri": ua}));
        s.ok("subscribe", json!({"uri": ub}));
        s.ok("unsubscribe", json!({"uri": ub}));
        assert_eq!(ended(&fx, &a)["status"], "READY");
        assert_eq!(ended(&fx, &b)["status"], "READY");
        // The last change (the run's end) is told within a read or two.
        std::thread::sleep(Duration::from_millis(800));
        let told = updates(&s, &ua);
        assert!(told >= 2, "{w}: told {told} time(s) of {ua} (each of its three steps ended, then the run)");
        assert_eq!(updates(&s, &ub), 0, "{w}: unsubscribed from {ub}, yet told of it");
        std::thread::sleep(Duration::from_millis(600));
        assert_eq!(updates(&s, &ua), told, "{w}: nothing more once the run has ended");
        // Reading it after the notice gives its end.
        assert_eq!(s.read_json(&ua)["status"], "READY", "{w}");
    }

    // What cannot be subscribed to.
    let s = client.stdio("app");
    let e = s.raw("subscribe", json!({"uri": "cairn://runs/nope"}));
    assert_eq!(e["error"]["code"], RESOURCE_NOT_FOUND, "{e:#}");
    assert!(str_of(&e["error"]["message"]).contains("list_runs"), "says what to do: {e:#}");
    let e = s.raw("subscribe", json!({"uri": "https://example.org/"}));
    assert_eq!(e["error"]["code"], RESOURCE_NOT_FOUND, "{e:#}");
    // The guide never changes: subscribing is accepted and tells nothing.
    s.ok("subscribe", json!({"uri": "cairn://guide"}));
}
