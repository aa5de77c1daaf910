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
            "[[steps]]\nid = \"r{i}\"\ntool = \"t\"\nargs = {{ log = \"${{input.log}}\", plan = [\"sleep:0.05\"], result = {{ root = {i}, seed = \"${{input.seed}}\" }} }}\n\n"
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

    // It did run in parallel: some root started before another one ended.
    let lines = log_lines(&c.path("log"))[lines_before..].to_vec();
    let first_end = lines.iter().position(|l| l.contains(":end:")).unwrap();
    assert!(count(&lines[..first_end], "r") >= 2, "no two roots overlapped at --parallel 4: {lines:#?}");

    let (serial_steps, serial_events) = recorded(&c, "serial", &order);
    let (par_steps, par_events) = recorded(&c, "par", &order);
    assert_eq!(par_steps, serial_steps);
    assert_eq!(par_events, serial_events);
    assert_eq!(step(&par, "sink")["result"]["parts"][2], json!({"left": 4, "right": 5}), "{par:#}");
    // One started and one completed event per step, and the run's two.
    assert_eq!(par_events.len(), 2 * order.len() + 2, "{par_events:#?}");
}
