//! A run too large to answer whole: its steps are counted by status and given a page at a time,
//! alike on the CLI, the API and MCP, and its text view shows the steps that need attention.
//! (The 100,000-step figures are in BENCHMARKS.md, from `scripts/bench-scale.sh`.)

use serde_json::{Value, json};

use crate::support::*;

/// More steps than one default page (1,000) holds, by half again.
const STEPS: usize = 2500;
/// The step whose tool fails: the serial run completes those before it and starts none after.
const FAILING: usize = 1500;

/// A fan of `STEPS` independent steps (the DAG's order is their declaration order), whose tool
/// fails for step `s{FAILING}`.
fn wide_workflow(c: &Cairn) {
    let dir = c.path("wide");
    std::fs::create_dir_all(dir.join("tools")).unwrap();
    let script = format!(
        "#!/bin/sh\ncat >/dev/null\nif [ \"$CAIRN_STEP_ID\" = s{FAILING} ]; then echo 'no good' >&2; exit 3; fi\necho '{{\"ok\":true}}'\n"
    );
    let tool = dir.join("tools/step.sh");
    std::fs::write(&tool, script).unwrap();
    std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut toml = String::from(
        "[workflow]\nname = \"wide\"\nversion = \"1.0.0\"\n\n[tools.step]\ncommand = [\"tools/step.sh\"]\n\n",
    );
    for i in 0..STEPS {
        toml.push_str(&format!("[[steps]]\nid = \"s{i}\"\ntool = \"step\"\n\n"));
    }
    std::fs::write(dir.join("workflow.toml"), toml).unwrap();
    c.add(&dir);
}

fn ids(run: &Value) -> Vec<String> {
    run["steps"].as_array().unwrap().iter().map(|s| str_of(&s["step_id"]).to_string()).collect()
}

fn names(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("s{i}")).collect()
}

#[test]
fn a_large_run_is_counted_whole_and_shown_a_page_at_a_time_on_every_surface() {
    let c = Cairn::new();
    wide_workflow(&c);
    let d = c.start_daemon();
    let run = c.run("wide", &json!({}), &["--run-id", "W1"]).expect(3).json;
    assert_eq!(run["status"], "FAILED", "{}", run["error"]);
    let counts =
        json!({"total": STEPS, "pending": STEPS - FAILING - 1, "running": 0, "completed": FAILING, "failed": 1});
    assert_eq!(run["step_counts"], counts, "counted over every step");
    assert_eq!(
        run["steps_page"],
        json!({"offset": 0, "limit": 1000, "matched": STEPS, "returned": 1000, "next_offset": 1000}),
        "the first page, saying so"
    );
    assert_eq!(ids(&run), names(0..1000));

    // The API: any page, by status, failed and running first; its counts whatever the page.
    let token = c.token("viewer");
    let get = |path: &str| {
        let r = http("GET", &format!("{}/runs/W1{path}", d.url), Some(&token), None, &[]);
        (r.status, r.body)
    };
    let (status, page) = get("?steps_offset=1000&steps_limit=600");
    assert_eq!(status, 200, "{page}");
    assert_eq!(ids(&page), names(1000..1600));
    assert_eq!(page["step_counts"], counts);
    assert_eq!(page["steps_page"]["next_offset"], 1600);
    assert_eq!(step(&page, "s1500")["status"], "FAILED");
    assert_eq!(
        step(&page, "s1500")["error"].as_str().map(|e| e.contains("exited with code 3")),
        Some(true),
        "{page:#}"
    );
    assert_eq!(step(&page, "s1501")["status"], "PENDING");
    let (_, last) = get("?steps_offset=2400");
    assert_eq!((ids(&last), &last["steps_page"]["next_offset"]), (names(2400..2500), &Value::Null));
    let (_, failed) = get("?steps_status=failed,RUNNING");
    assert_eq!((ids(&failed), &failed["steps_page"]["matched"]), (vec!["s1500".to_string()], &json!(1)));
    assert_eq!(failed["steps_page"]["status"], json!(["FAILED", "RUNNING"]));
    let (_, attention) = get("?steps_order=attention&steps_limit=3");
    assert_eq!(ids(&attention), ["s1500", "s0", "s1"], "failed first, then the DAG's order");
    let (_, pending) = get("?steps_status=PENDING&steps_limit=2&steps_offset=1");
    assert_eq!((ids(&pending), &pending["steps_page"]["matched"]), (names(1502..1504), &json!(STEPS - FAILING - 1)));
    for (query, field) in [
        ("?steps_limit=0", "steps_limit"),
        ("?steps_limit=10001", "steps_limit"),
        ("?steps_status=done", "steps_status"),
        ("?steps_order=newest", "steps_order"),
    ] {
        let (status, body) = get(query);
        assert_eq!(status, 422, "{query}: {body}");
        assert_eq!(body["error"]["code"], "invalid_field", "{query}: {body}");
        assert!(str_of(&body["error"]["message"]).contains(field), "{query} names {field}: {body}");
    }
    let (status, body) = get("?steps_offset=-1");
    assert!((400..500).contains(&status), "a negative offset is refused: {status} {body}");

    // The graph by layers: one layer of 2,500 independent steps; a layer's steps are a filter.
    let (_, layers) = get("/layers");
    assert_eq!((&layers["total"], layers["layers"].as_array().map(Vec::len)), (&json!(1), Some(1)), "{layers}");
    assert_eq!(layers["layers"][0]["step_counts"], counts);
    assert_eq!(layers["layers"][0]["first"], json!(["s0", "s1", "s2"]));
    let (_, layer) = get("?steps_layer=0&steps_limit=2");
    assert_eq!(ids(&layer), ["s0", "s1"]);
    let (_, none) = get("?steps_layer=1");
    assert_eq!(none["steps_page"]["matched"], 0);
    // A huge log is read from where it ends.
    let (_, newest) = get("/events?limit=2&newest=true");
    let kinds: Vec<&str> = newest["events"].as_array().unwrap().iter().map(|e| str_of(&e["kind"])).collect();
    assert_eq!(kinds, ["step.failed", "run.finished"]);

    // The timeline is paged the same way: the attempts of a page of steps.
    let (_, timeline) = get("/timeline");
    assert_eq!((&timeline["step_counts"], &timeline["steps_page"]["next_offset"]), (&counts, &json!(1000)));
    let attempts = timeline["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1000, "one attempt of each of the first 1,000 steps");
    assert!(attempts.iter().all(|a| a["end"] == "completed"));
    let (_, failing) = get("/timeline?steps_status=FAILED");
    let failing: Vec<(&str, &str)> =
        failing["attempts"].as_array().unwrap().iter().map(|a| (str_of(&a["step_id"]), str_of(&a["end"]))).collect();
    assert_eq!(failing, [("s1500", "failed")]);
    let cli = c.json(&["show", "W1", "--timeline", "--steps-status", "failed"]).expect(0).json;
    assert_eq!(cli["attempts"].as_array().map(Vec::len), Some(1));
    let text = c.raw(&["show", "W1", "--timeline"]).expect(0).stdout;
    assert!(text.contains("the attempts of 1000 of the run's 2500 steps"), "{text}");

    // The CLI answers as the API does.
    let shown = c.show("W1");
    assert_eq!((&shown["steps_page"], &shown["step_counts"]), (&run["steps_page"], &counts));
    assert_eq!(ids(&shown), names(0..1000));
    let paged = c.json(&["show", "W1", "--steps-offset", "1000", "--steps-limit", "600"]).expect(0).json;
    assert_eq!(paged["steps"], page["steps"]);
    let by_status = c.json(&["show", "W1", "--steps-status", "failed"]).expect(0).json;
    assert_eq!(ids(&by_status), ["s1500"]);
    let layer = c.json(&["show", "W1", "--steps-layer", "0", "--steps-limit", "2"]).expect(0).json;
    assert_eq!(ids(&layer), ["s0", "s1"]);
    assert_eq!(c.json(&["show", "W1", "--layers"]).expect(0).json, layers, "the CLI's layers are the API's");
    let text = c.raw(&["show", "W1", "--layers"]).expect(0).stdout;
    assert!(text.contains("run W1: 1 layer (layers 0–0 shown)"), "{text}");
    assert!(
        text.lines().any(|l| l.split_whitespace().collect::<Vec<_>>()[..6] == ["0", "2500", "999", "0", "1500", "1"]),
        "{text}"
    );
    assert!(text.contains("cairn show W1 --steps-layer N"), "{text}");
    let every = c.json(&["show", "W1", "--all"]).expect(0).json;
    assert_eq!((ids(&every), &every["steps_page"]["next_offset"]), (names(0..STEPS), &Value::Null));
    let bad = c.json(&["show", "W1", "--steps-status", "done"]).expect(2);
    assert!(
        bad.stderr.contains("steps_status") && bad.stderr.contains("PENDING, RUNNING, COMPLETED, FAILED"),
        "{}",
        bad.stderr
    );

    // The text: the counts, the step that needs attention, how to see the rest.
    let text = c.raw(&["show", "W1"]).expect(0).stdout;
    assert!(
        text.contains(
            "1 of 2500 steps shown, the FAILED/RUNNING ones: 1500 completed, 1 failed, 0 running, 999 pending"
        ),
        "{text}"
    );
    assert!(text.lines().any(|l| l.trim_start().starts_with("s1500") && l.contains("FAILED")), "{text}");
    assert!(!text.lines().any(|l| l.trim_start().starts_with("s0 ")), "no completed step: {text}");
    assert!(text.contains("`cairn show W1 --all`"), "{text}");
    let all = c.raw(&["show", "W1", "--all"]).expect(0).stdout;
    let is_row = |l: &&str| {
        l.split_whitespace().next().is_some_and(|w| w.strip_prefix('s').is_some_and(|n| n.parse::<usize>().is_ok()))
    };
    assert_eq!(all.lines().filter(is_row).count(), STEPS, "every row");

    // One step is found without reading the rest; a step it does not have is refused naming a few.
    let one = c.json(&["result", "W1", "s2499"]).expect(0).json;
    assert_eq!((&one["step_id"], &one["status"]), (&json!("s2499"), &json!("PENDING")), "{one:#}");
    let missing = c.json(&["result", "W1", "nope"]).expect(2);
    assert!(missing.stderr.contains("s0, s1,") && missing.stderr.contains("and 2480 more"), "{}", missing.stderr);
    assert!(missing.stderr.len() < 2000, "a few steps named, not 2,500: {}", missing.stderr.len());
}
