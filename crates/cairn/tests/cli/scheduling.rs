//! The scheduler's promises: a run at `--parallel N` records exactly what the serial run records
//! (the same step rows, results and events, compared in the DAG's order, not in the order steps
//! happened to end), while its steps do overlap.

use serde_json::{Value, json};

use crate::support::*;

/// Six roots, three steps that each join two of them, and a sink over those three: every step's
/// result depends on its arguments, which name its needs' results.
fn diamond(c: &Cairn) {
    let mut toml = format!("[workflow]\nname = \"wide\"\nversion = \"1.0.0\"\n\n{}", tool_toml("t", ""));
    for i in 0..6 {
        toml += &format!(
            "[[steps]]\nid = \"r{i}\"\ntool = \"t\"\nargs = {{ log = \"${{input.log}}\", plan = [\"sleep:0.2\"], result = {{ root = {i}, seed = \"${{input.seed}}\" }} }}\n\n"
        );
    }
    for m in 0..3 {
        let (a, b) = (2 * m, 2 * m + 1);
        toml += &format!(
            "[[steps]]\nid = \"m{m}\"\ntool = \"t\"\nneeds = [\"r{a}\", \"r{b}\"]\nargs = {{ log = \"${{input.log}}\", result = {{ left = \"${{steps.r{a}.result.root}}\", right = \"${{steps.r{b}.result.root}}\" }} }}\n\n"
        );
    }
    toml += "[[steps]]\nid = \"sink\"\ntool = \"t\"\nneeds = [\"m0\", \"m1\", \"m2\"]\nargs = { log = \"${input.log}\", result = { parts = [\"${steps.m0.result}\", \"${steps.m1.result}\", \"${steps.m2.result}\"] } }\n";
    c.add(&write_workflow(&c.path("wide"), &toml, &tool_files()));
}

/// What a run recorded, without what differs between any two executions (times, durations,
/// pids): its steps in the DAG's order, and its events grouped by step in that order, each step's
/// in the order they were written.
fn recorded(c: &Cairn, run_id: &str, order: &[String]) -> (Vec<Value>, Vec<Value>) {
    let shown = c.show(run_id);
    let steps: Vec<Value> = order
        .iter()
        .map(|id| {
            let s = step(&shown, id);
            json!({"step_id": id, "status": s["status"], "attempts": s["attempts"], "outcome": s["outcome"],
                   "result": s["result"], "error": s["error"], "reused": s["reused"]})
        })
        .collect();
    let mut events = c.events(run_id);
    let rank = |e: &Value| match e["step_id"].as_str() {
        None if e["kind"] == "run.created" => 0,
        None => order.len() + 1,
        Some(id) => 1 + order.iter().position(|o| o == id).expect("a step of the workflow"),
    };
    events.sort_by_key(|e| (rank(e), e["seq"].as_i64()));
    let events = events
        .into_iter()
        .map(|mut e| {
            let o = e.as_object_mut().unwrap();
            o.remove("seq");
            o.remove("at");
            if let Some(d) = o.get_mut("data").and_then(Value::as_object_mut) {
                d.remove("duration_us");
            }
            e
        })
        .collect();
    (steps, events)
}

#[test]
fn a_parallel_run_records_the_same_steps_results_and_events_as_the_serial_one() {
    let c = Cairn::new();
    diamond(&c);
    let input = json!({"log": c.path_str("log"), "seed": "s-1"});
    let serial = c.run("wide", &input, &["--run-id", "serial"]).expect(0).json;
    assert_eq!(serial["status"], "READY", "{serial:#}");
    assert_eq!(serial["parallel"], 1, "{serial:#}");
    let order: Vec<String> =
        serial["steps"].as_array().unwrap().iter().map(|s| str_of(&s["step_id"]).to_string()).collect();
    assert_eq!(order, ["r0", "r1", "r2", "r3", "r4", "r5", "m0", "m1", "m2", "sink"]);

    let lines_before = log_lines(&c.path("log")).len();
    let par = c.run("wide", &input, &["--run-id", "par", "--parallel", "4"]).expect(0).json;
    assert_eq!(par["status"], "READY", "{par:#}");
    assert_eq!(par["parallel"], 4, "{par:#}");

    // It did run in parallel: at some moment two roots' tools were running at once (one started
    // before another ended). Which two is up to the machine: a slow one starts the tools
    // far apart.
    let lines = log_lines(&c.path("log"))[lines_before..].to_vec();
    let most_roots_at_once = lines
        .iter()
        .filter(|l| l.starts_with('r'))
        .scan(0i32, |running, l| {
            *running += if l.contains(":start:") { 1 } else { -1 };
            Some(*running)
        })
        .max();
    assert!(most_roots_at_once >= Some(2), "no two roots overlapped at --parallel 4: {lines:#?}");

    let (serial_steps, serial_events) = recorded(&c, "serial", &order);
    let (par_steps, par_events) = recorded(&c, "par", &order);
    assert_eq!(par_steps, serial_steps);
    assert_eq!(par_events, serial_events);
    assert_eq!(step(&par, "sink")["result"]["parts"][2], json!({"left": 4, "right": 5}), "{par:#}");
    // One started and one completed event per step, and the run's two.
    assert_eq!(par_events.len(), 2 * order.len() + 2, "{par_events:#?}");
}

/// `cairn show --timeline`: every attempt on the run's time axis, the same from the CLI and from
/// `GET /runs/{id}/timeline`; a parallel run's roots overlap on it, and a replay's reused steps are
/// points.
#[test]
fn the_timeline_shows_every_attempt_and_the_overlap_of_a_parallel_run() {
    let c = Cairn::new();
    diamond(&c);
    let input = json!({"log": c.path_str("log"), "seed": "s-2"});
    c.run("wide", &input, &["--run-id", "T", "--parallel", "3"]).expect(0);
    let t = c.json(&["show", "T", "--timeline"]).expect(0).json;
    assert_eq!(t["run_id"], "T", "{t:#}");
    let attempts = t["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 10, "{t:#}");
    for a in attempts {
        assert_eq!(a["end"], "completed", "{t:#}");
        assert_eq!(a["attempt"], 1, "{t:#}");
        assert!(a["start_ms"].as_i64().unwrap() <= a["end_ms"].as_i64().unwrap(), "{t:#}");
        assert!(a["end_ms"].as_i64().unwrap() <= t["length_ms"].as_i64().unwrap(), "{t:#}");
        // Each root sleeps 200 ms: its recorded time says so.
        if str_of(&a["step_id"]).starts_with('r') {
            assert!(a["duration_ms"].as_f64().unwrap() >= 200.0, "{t:#}");
        }
    }
    let span = |id: &str| {
        let a = attempts.iter().find(|a| a["step_id"] == id).unwrap();
        (a["start_ms"].as_i64().unwrap(), a["end_ms"].as_i64().unwrap())
    };
    // r1 started before r0 ended: they overlapped. The sink started after every m ended.
    assert!(span("r1").0 < span("r0").1, "{t:#}");
    assert!((0..3).all(|m| span(&format!("m{m}")).1 <= span("sink").0), "{t:#}");

    let api = c.start_daemon();
    let r = http("GET", &format!("{}/runs/T/timeline", api.url), Some(&c.token("viewer")), None, &[]);
    assert_eq!(r.status, 200, "{:#}", r.body);
    assert_eq!(r.body, t, "the API and the CLI give the same timeline");

    let text = c.raw(&["show", "T", "--timeline"]).expect(0).stdout;
    assert!(text.starts_with("run T: 10 attempts over "), "{text}");
    let r0 = text.lines().find(|l| l.starts_with("r0 ")).unwrap_or_else(|| panic!("{text}"));
    assert!(r0.contains('█') && r0.ends_with('|'), "{text}");

    // A replay of the sink alone: the other nine are reused, each a point (attempt 0).
    c.json(&["replay", "T", "--step", "sink", "--run-id", "T2"]).expect(0);
    let t2 = c.json(&["show", "T2", "--timeline"]).expect(0).json;
    let ends: Vec<(String, String)> = t2["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (str_of(&a["step_id"]).to_string(), str_of(&a["end"]).to_string()))
        .collect();
    assert_eq!(ends.iter().filter(|(_, e)| e == "reused").count(), 9, "{t2:#}");
    assert_eq!(ends.last().unwrap(), &("sink".to_string(), "completed".to_string()), "{t2:#}");
    let text = c.raw(&["show", "T2", "--timeline"]).expect(0).stdout;
    let reused = text.lines().find(|l| l.starts_with("r0 ")).unwrap_or_else(|| panic!("{text}"));
    assert!(reused.contains('◆') && reused.ends_with("| reused"), "{text}");
    assert!(text.starts_with("run T2: 1 attempt over "), "{text}");

    let missing = c.raw(&["show", "nope", "--timeline"]);
    assert_eq!(missing.code, 2, "{missing:?}");
    assert!(missing.stderr.contains("run `nope` was not found"), "{missing:?}");
    c.stop_daemon();
}
