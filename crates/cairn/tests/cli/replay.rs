//! Selective replay through the real `cairn` binary: the decision rules on the bundled
//! release-validation example, refusals that create nothing, run-id idempotence, dry runs, step
//! ids as a set, an untouched source, lineage with copied (never recomputed) evidence, and a
//! kill -9 in the middle of a replay followed by `--resume-interrupted`.
//!
//! Every test has its own `CAIRN_HOME`.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::support::*;

// ----------------------------------------------------------------------------------------------
// helpers
// ----------------------------------------------------------------------------------------------

/// Writes a run input file; its path, as `--input` takes it.
fn input_file(env: &Cairn, v: &Value) -> String {
    env.input(v).display().to_string()
}

#[track_caller]
fn explain(env: &Cairn, run: &str, step: &str) -> Value {
    env.json(&["explain", run, step]).expect(0).json
}

/// Everything that would show a created run: the run ids from `cairn runs --json` and the
/// entries of `$CAIRN_HOME/runs`, both sorted.
#[track_caller]
fn footprint_of(env: &Cairn) -> (Vec<String>, Vec<String>) {
    let v = env.json(&["runs", "--limit", "1000"]).expect(0).json;
    let mut ids: Vec<String> =
        v["runs"].as_array().unwrap().iter().map(|r| r["run_id"].as_str().unwrap().to_string()).collect();
    ids.sort();
    (ids, env.entries("runs"))
}

/// Registers release-validation 1.0.0 and 1.1.0 from the repository's examples.
fn add_examples(env: &Cairn) {
    for v in ["1.0.0", "1.1.0"] {
        let added = env.add(&example(v));
        assert_eq!(added["version"], v);
    }
}

// --- a tiny workflow over a shell tool ----------------------------------------------------------

/// The tiny tool: appends "<step> <pid>" to the counter file named in its arguments (the pid is
/// its process group: cairn starts every tool in a group of its own), sleeps 2 s while the flag
/// file named there exists, exits with `code` when given, else prints a result that differs on
/// every execution — so a copied result can be told from a recomputed one.
const TOOL_SH: &str = r#"#!/bin/sh
args=$(cat)
arg() { printf '%s' "$args" | sed -n "s/.*\"$1\": *\"\([^\"]*\)\".*/\1/p"; }
counter=$(arg counter)
flag=$(arg flag)
code=$(arg code)
echo "$CAIRN_STEP_ID $$" >> "$counter"
if [ -n "$flag" ] && [ -e "$flag" ]; then sleep 2; fi
if [ -n "$code" ]; then exit "$code"; fi
printf '{"step":"%s","pid":%d,"nonce":"%s"}\n' "$CAIRN_STEP_ID" $$ "$(date +%s%N)"
"#;

/// a → b → c, plus an independent root d. Input: `{counter, flag, flag_c}` (absolute paths); b
/// sleeps while `flag` exists, c while `flag_c` does.
const TINY_STEPS: &str = r#"
[[steps]]
id = "a"
tool = "t"
args = { counter = "${input.counter}" }

[[steps]]
id = "b"
tool = "t"
needs = ["a"]
args = { counter = "${input.counter}", flag = "${input.flag}", after = "${steps.a.result}" }

[[steps]]
id = "c"
tool = "t"
needs = ["b"]
args = { counter = "${input.counter}", flag = "${input.flag_c}", after = "${steps.b.result}" }

[[steps]]
id = "d"
tool = "t"
args = { counter = "${input.counter}" }

[[validator.rules]]
id = "c-ran"
step = "c"
pointer = "/step"
op = "eq"
value = "c"
finding = "c did not run"
"#;

/// The shell tool `t`, as a `[tools.t]` table.
const TOOL_T: &str = "[tools.t]\ncommand = [\"sh\", \"tools/t.sh\"]\ntimeout_secs = 20\n";

/// Writes and registers `name@1.0.0`: the tool `t` plus `steps`.
fn write_tool_workflow(env: &Cairn, name: &str, steps: &str) -> PathBuf {
    write_versioned_workflow(env, name, "1.0.0", TOOL_T, steps)
}

fn write_versioned_workflow(env: &Cairn, name: &str, version: &str, tools: &str, steps: &str) -> PathBuf {
    let dir = env.path(&format!("{name}-{version}"));
    std::fs::create_dir_all(dir.join("tools")).unwrap();
    let toml = format!("[workflow]\nname = \"{name}\"\nversion = \"{version}\"\n\n{tools}\n{steps}");
    std::fs::write(dir.join("workflow.toml"), toml).unwrap();
    let tool = dir.join("tools/t.sh");
    std::fs::write(&tool, TOOL_SH).unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(env.add(&dir)["version"], version);
    dir
}

/// The tiny workflow's input, with `flag` naming the given scratch file.
fn tiny_input(env: &Cairn, flag: &str) -> Value {
    json!({"counter": env.path_str("counter"), "flag": env.path_str(flag), "flag_c": env.path_str("flag_c")})
}

/// Registers the tiny workflow `tiny@1.0.0`, runs it (flags absent) as `src` and returns the
/// input file path. The counter then holds one line per step.
fn tiny_source(env: &Cairn) -> String {
    write_tool_workflow(env, "tiny", TINY_STEPS);
    let input = input_file(env, &tiny_input(env, "flag"));
    let out = env.json(&["run", "tiny", "--input", &input, "--run-id", "src"]).expect(0);
    assert_eq!(out.json["status"], "READY");
    assert_eq!(counter(env).len(), 4);
    input
}

/// The counter file: one (step, pid) per tool execution, in order.
fn counter(env: &Cairn) -> Vec<(String, i32)> {
    std::fs::read_to_string(env.path("counter"))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let (s, p) = l.split_once(' ').unwrap();
            (s.to_string(), p.parse().unwrap())
        })
        .collect()
}

fn executions(lines: &[(String, i32)], step: &str) -> usize {
    lines.iter().filter(|(s, _)| s == step).count()
}

// ----------------------------------------------------------------------------------------------
// 1. the rules, table-driven, on the bundled example
// ----------------------------------------------------------------------------------------------

struct Row {
    name: &'static str,
    /// Arguments after `cairn replay SRC`.
    args: Vec<String>,
    exit: i32,
    status: &'static str,
    version: &'static str,
    requested: &'static [&'static str],
    replayed: &'static [&'static str],
    reused: &'static [&'static str],
    invalidated: &'static [&'static str],
    /// Per step: substrings its reason text must contain.
    reasons: Vec<(&'static str, Vec<&'static str>)>,
}

/// Checks one replay child against its row through `replay --json`, `show --json`,
/// `explain --json` and `events --json`.
#[track_caller]
fn check_row(env: &Cairn, row: &Row, out: &Value, dry: &Value, src_explain: &std::collections::HashMap<String, Value>) {
    let name = row.name;
    let child = out["run_id"].as_str().unwrap();
    assert_eq!(out["status"], row.status, "[{name}] {out:#}");
    assert_eq!(out["version"], row.version, "[{name}]");
    let r = &out["replay"];
    assert_eq!(r["source_run_id"], "src", "[{name}]");
    assert_eq!(strs(&r["requested"]), owned(row.requested), "[{name}] requested");
    assert_eq!(strs(&r["replayed"]), owned(row.replayed), "[{name}] replayed");
    assert_eq!(strs(&r["reused"]), owned(row.reused), "[{name}] reused");
    assert_eq!(strs(&r["invalidated"]), owned(row.invalidated), "[{name}] invalidated");
    // The dry run predicted exactly this: same summary and the same decisions with reasons.
    for k in ["source_run_id", "requested", "replayed", "reused", "invalidated"] {
        assert_eq!(dry["replay"][k], r[k], "[{name}] dry run vs replay: {k}");
    }
    assert_eq!(dry["decisions"], r["decisions"], "[{name}] dry-run decisions vs stored decisions");

    let show = env.show(child);
    assert_eq!(show["replay"], out["replay"], "[{name}] show vs replay");
    let events = env.events(child);
    for id in EXAMPLE_STEPS {
        let reused = row.reused.contains(&id);
        for view in [step(out, id), step(&show, id)] {
            assert_eq!(view["status"], "COMPLETED", "[{name}] {id}: {view}");
            assert_eq!(view["reused"], reused, "[{name}] {id}: {view}");
            assert_eq!(view["decision"], if reused { "reuse" } else { "replay" }, "[{name}] {id}");
            assert_eq!(view["attempts"], if reused { 0 } else { 1 }, "[{name}] {id}: {view}");
        }
        let ex = explain(env, child, id);
        assert_eq!(ex["text"], step(&show, id)["reason"], "[{name}] {id}: explain vs show");
        assert_eq!(ex["text"], step(out, id)["reason"], "[{name}] {id}: explain vs replay");
        assert!(ex["reason"]["kind"].is_string(), "[{name}] {id}: the reason is structured data: {ex}");
        let reused_events = events_of(&events, "step.replay_reused", Some(id));
        let started = events_of(&events, "step.started", Some(id));
        if reused {
            assert_eq!(ex["text"], "reused from run src (signature equal)", "[{name}] {id}");
            assert_eq!(ex["reused_from"], "src", "[{name}] {id}");
            // The copy carries the source's signature.
            assert_eq!(ex["signature"], src_explain[id]["signature"], "[{name}] {id}");
            assert_eq!(reused_events.len(), 1, "[{name}] {id}: {events:#?}");
            assert_eq!(reused_events[0]["data"]["source_run_id"], "src", "[{name}] {id}");
            assert!(started.is_empty(), "[{name}] {id} was reused but started: {started:?}");
        } else {
            assert!(reused_events.is_empty(), "[{name}] {id}: {reused_events:?}");
            assert_eq!(started.len(), 1, "[{name}] {id}");
            assert!(ex["reused_from"].is_null(), "[{name}] {id}");
        }
    }
    for (id, subs) in &row.reasons {
        let text = step(out, id)["reason"].as_str().unwrap().to_string();
        for s in subs {
            assert!(text.contains(s), "[{name}] {id}: reason {text:?} lacks {s:?}");
        }
    }
}

#[test]
fn replay_rules_table_on_the_bundled_example() {
    let env = Cairn::new();
    add_examples(&env);
    let ready = example("inputs/ready.json").display().to_string();
    let src = env.json(&["run", "release-validation@1.1.0", "--input", &ready, "--run-id", "src"]).expect(0).json;
    assert_eq!(src["status"], "READY");
    let src_show = env.show("src");
    let src_events = env.events("src");
    let src_explain: std::collections::HashMap<String, Value> =
        EXAMPLE_STEPS.iter().map(|id| (id.to_string(), explain(&env, "src", id))).collect();

    // (b) an input whose compatibility matrix changed: one `supported` flipped.
    let mut changed: Value = serde_json::from_str(&std::fs::read_to_string(&ready).unwrap()).unwrap();
    changed["manifest"]["compatibility"]["matrix"][3]["supported"] = json!(false);
    let changed_input = input_file(&env, &changed);

    // (c) 1.2.0: 1.1.0 with a harmless comment appended to one tool file.
    let v12 = env.path("release-validation-1.2.0");
    copy_dir(&example("1.1.0"), &v12);
    let toml = std::fs::read_to_string(v12.join("workflow.toml")).unwrap();
    assert!(toml.contains("version = \"1.1.0\""));
    std::fs::write(v12.join("workflow.toml"), toml.replacen("version = \"1.1.0\"", "version = \"1.2.0\"", 1)).unwrap();
    let tool = v12.join("tools/run_unit_tests.py");
    let mut py = std::fs::read_to_string(&tool).unwrap();
    py.push_str("# a harmless comment\n");
    std::fs::write(&tool, py).unwrap();
    assert_eq!(env.add(&v12)["version"], "1.2.0");

    let a = |v: &[&str]| owned(v);
    let four = &["load_manifest", "inspect_artifacts", "run_compatibility", "inspect_deployment"][..];
    let rows = vec![
        Row {
            name: "a-unchanged",
            args: a(&["--step", "run_unit_tests"]),
            exit: 0,
            status: "READY",
            version: "1.1.0",
            requested: &["run_unit_tests"],
            replayed: &["run_unit_tests", "generate_evidence"],
            reused: four,
            invalidated: &[],
            reasons: vec![
                ("run_unit_tests", vec!["requested"]),
                ("generate_evidence", vec!["descendant of requested step run_unit_tests"]),
                ("load_manifest", vec!["reused from run src (signature equal)"]),
            ],
        },
        Row {
            name: "b-compat-changed",
            args: a(&["--step", "run_unit_tests", "--input", &changed_input]),
            exit: 1,
            status: "BLOCKED",
            version: "1.1.0",
            requested: &["run_unit_tests"],
            replayed: &["run_unit_tests", "run_compatibility", "generate_evidence"],
            reused: &["load_manifest", "inspect_artifacts", "inspect_deployment"],
            invalidated: &["run_compatibility"],
            reasons: vec![
                (
                    "run_compatibility",
                    vec![
                        "invalidated: argument `/compatibility/matrix/",
                        "`/compatibility/matrix/3/supported`",
                        "changed (hash",
                    ],
                ),
                ("generate_evidence", vec!["descendant of requested step run_unit_tests"]),
            ],
        },
        Row {
            name: "c-tool-file-changed",
            args: a(&["--step", "load_manifest", "--version", "1.2.0"]),
            exit: 0,
            status: "READY",
            version: "1.2.0",
            requested: &["load_manifest"],
            replayed: &["load_manifest", "run_unit_tests", "generate_evidence"],
            reused: &["inspect_artifacts", "run_compatibility", "inspect_deployment"],
            invalidated: &["run_unit_tests"],
            reasons: vec![
                ("run_unit_tests", vec!["invalidated: tool file tools/run_unit_tests.py changed"]),
                ("generate_evidence", vec!["descendant of requested step load_manifest"]),
            ],
        },
        Row {
            // 1.0.0's tools are byte-identical to 1.1.0's: another version reuses just as much.
            name: "older-version-same-tools",
            args: a(&["--step", "run_unit_tests", "--version", "1.0.0"]),
            exit: 0,
            status: "READY",
            version: "1.0.0",
            requested: &["run_unit_tests"],
            replayed: &["run_unit_tests", "generate_evidence"],
            reused: four,
            invalidated: &[],
            reasons: vec![("generate_evidence", vec!["descendant of requested step run_unit_tests"])],
        },
        Row {
            // (h) step ids are a set, normalised to declaration order.
            name: "h-step-set",
            args: a(&["--step", "generate_evidence", "--step", "run_unit_tests", "--step", "run_unit_tests"]),
            exit: 0,
            status: "READY",
            version: "1.1.0",
            requested: &["run_unit_tests", "generate_evidence"],
            replayed: &["run_unit_tests", "generate_evidence"],
            reused: four,
            invalidated: &[],
            reasons: vec![("run_unit_tests", vec!["requested"]), ("generate_evidence", vec!["requested"])],
        },
    ];

    for row in &rows {
        let mut args: Vec<&str> = vec!["replay", "src"];
        args.extend(row.args.iter().map(String::as_str));
        // (g) the dry run first: a decision for every step, and nothing created.
        let before = footprint_of(&env);
        let mut dry_args = args.clone();
        dry_args.extend(["--dry-run", "--run-id", row.name]);
        let dry = env.json(&dry_args).expect(0).json;
        assert_eq!(dry["dry_run"], true);
        let decided: Vec<String> =
            dry["decisions"].as_array().unwrap().iter().map(|d| d["step_id"].as_str().unwrap().to_string()).collect();
        let mut sorted = decided.clone();
        sorted.sort();
        let mut all = owned(&EXAMPLE_STEPS);
        all.sort();
        assert_eq!(sorted, all, "[{}] a decision for every step", row.name);
        for d in dry["decisions"].as_array().unwrap() {
            assert!(d["decision"] == "reuse" || d["decision"] == "replay", "{d}");
            assert!(d["reason"]["kind"].is_string() && d["text"].is_string(), "{d}");
        }
        assert_eq!(footprint_of(&env), before, "[{}] the dry run created something", row.name);

        args.extend(["--run-id", row.name]);
        let out = env.json(&args).expect(row.exit).json;
        assert_eq!(out["run_id"], row.name);
        check_row(&env, row, &out, &dry, &src_explain);
    }

    // (h) the same set in another order and without the duplicate names the same child: reusing
    // its run id is idempotent, not a mismatch.
    let before = footprint_of(&env);
    let again = env
        .json(&["replay", "src", "--step", "run_unit_tests", "--step", "generate_evidence", "--run-id", "h-step-set"])
        .expect(0)
        .json;
    assert_eq!(strs(&again["replay"]["requested"]), ["run_unit_tests", "generate_evidence"]);
    assert_eq!(footprint_of(&env), before);
    let ev = env.events("h-step-set");
    assert_eq!(events_of(&ev, "step.started", Some("run_unit_tests")).len(), 1, "the idempotent rerun executed again");

    // The source never changes (see also source_rows_and_events_are_unchanged).
    assert_eq!(env.show("src"), src_show);
    assert_eq!(env.events("src"), src_events);
}

// ----------------------------------------------------------------------------------------------
// 1, continued: another version: a renamed tool, a new step, a changed tool definition
// ----------------------------------------------------------------------------------------------

#[test]
fn another_version_invalidates_what_changed_with_its_descendants() {
    let env = Cairn::new();
    let _ = tiny_source(&env);
    // 1.1.0: d now uses tool t2 (same command and file), and a new step e (needs a) with a
    // dependent x.
    let steps = TINY_STEPS.replace("id = \"d\"\ntool = \"t\"", "id = \"d\"\ntool = \"t2\"")
        + "\n[[steps]]\nid = \"e\"\ntool = \"t\"\nneeds = [\"a\"]\nargs = { counter = \"${input.counter}\", after = \"${steps.a.result}\" }\n"
        + "\n[[steps]]\nid = \"x\"\ntool = \"t\"\nneeds = [\"e\"]\nargs = { counter = \"${input.counter}\", after = \"${steps.e.result}\" }\n";
    assert!(steps.contains("tool = \"t2\""));
    let tools = format!("{TOOL_T}\n{}", TOOL_T.replace("[tools.t]", "[tools.t2]"));
    write_versioned_workflow(&env, "tiny", "1.1.0", &tools, &steps);

    let before = counter(&env).len();
    let out = env.json(&["replay", "src", "--step", "b", "--version", "1.1.0", "--run-id", "V"]).expect(0).json;
    assert_eq!(out["version"], "1.1.0");
    assert_eq!(strs(&out["replay"]["requested"]), ["b"]);
    assert_eq!(strs(&out["replay"]["replayed"]), ["b", "c", "d", "e", "x"]);
    assert_eq!(strs(&out["replay"]["reused"]), ["a"]);
    assert_eq!(strs(&out["replay"]["invalidated"]), ["d", "e", "x"]);
    assert_eq!(out["replay"]["decisions"].as_array().map(Vec::len), Some(6));
    // A page of the child's steps carries the decisions of that page only, and each list's length.
    let page = env.json(&["show", "V", "--steps-offset", "3", "--steps-limit", "2"]).expect(0).json;
    let ids: Vec<&str> = page["steps"].as_array().unwrap().iter().map(|s| str_of(&s["step_id"])).collect();
    assert_eq!(ids, ["d", "e"], "{page:#}");
    let r = &page["replay"];
    assert_eq!(
        (strs(&r["replayed"]), strs(&r["reused"]), strs(&r["invalidated"])),
        (owned(&["d", "e"]), vec![], owned(&["d", "e"]))
    );
    assert_eq!((&r["paged"], &r["counts"]), (&json!(true), &json!({"replayed": 5, "reused": 1, "invalidated": 3})));
    let decided: Vec<&str> = r["decisions"].as_array().unwrap().iter().map(|d| str_of(&d["step_id"])).collect();
    assert_eq!((decided, &r["requested"], &r["source_run_id"]), (vec!["d", "e"], &json!(["b"]), &json!("src")));
    for (id, text) in [
        ("a", "reused from run src (signature equal)"),
        ("b", "requested"),
        ("c", "descendant of requested step b"),
        ("d", "invalidated: tool changed from `t` to `t2`"),
        ("e", "invalidated: the source run has no such step"),
        ("x", "invalidated: ancestor e invalidated"),
    ] {
        assert_eq!(step(&out, id)["reason"], text, "{id}");
        assert_eq!(explain(&env, "V", id)["text"], text, "{id}");
    }
    let lines = counter(&env);
    assert_eq!(executions(&lines[before..], "a"), 0);
    for id in ["b", "c", "d", "e", "x"] {
        assert_eq!(executions(&lines[before..], id), 1, "{id}: {lines:?}");
    }
    // The version is part of the child's identity: the same replay of the source's own version
    // under the same run id is a mismatch.
    let out = env.json(&["replay", "src", "--step", "b", "--run-id", "V"]);
    assert_eq!(out.code, 4, "{}", out.stderr);
    assert!(out.stderr.contains("ExecutionInputMismatch"), "{}", out.stderr);

    // 1.2.0: only the tool's declared version changed. Every step on it is invalidated, and the
    // reason says so in plain words.
    write_versioned_workflow(
        &env,
        "tiny",
        "1.2.0",
        &TOOL_T.replace("timeout_secs", "version = \"2\"\ntimeout_secs"),
        TINY_STEPS,
    );
    let dry = env.json(&["replay", "src", "--step", "c", "--version", "1.2.0", "--dry-run"]).expect(0).json;
    assert_eq!(strs(&dry["replay"]["invalidated"]), ["a", "b", "d"]);
    assert_eq!(strs(&dry["replay"]["reused"]), Vec::<String>::new());
    let text = dry["decisions"].as_array().unwrap().iter().find(|d| d["step_id"] == "a").unwrap()["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(text.starts_with("invalidated: tool `t` version changed"), "{text}");
    assert!(
        !text.contains("Some(") && !text.contains("None"),
        "the reason leaks Rust debug formatting instead of plain words: {text:?}"
    );
}

// ----------------------------------------------------------------------------------------------
// 1d. a BLOCKED source
// ----------------------------------------------------------------------------------------------

#[test]
fn a_blocked_source_can_be_replayed() {
    let env = Cairn::new();
    add_examples(&env);
    let blocked = example("inputs/blocked.json").display().to_string();
    let src = env.json(&["run", "release-validation@1.1.0", "--input", &blocked, "--run-id", "src"]).expect(1).json;
    assert_eq!(src["status"], "BLOCKED");

    // Same input: still BLOCKED (exit 1), with the same finding, four steps copied.
    let out = env.json(&["replay", "src", "--step", "run_unit_tests", "--run-id", "same"]).expect(1).json;
    assert_eq!(out["status"], "BLOCKED");
    assert_eq!(out["findings"], src["findings"]);
    assert_eq!(strs(&out["replay"]["replayed"]), ["run_unit_tests", "generate_evidence"]);
    assert_eq!(strs(&out["replay"]["reused"]).len(), 4);
    assert_eq!(strs(&out["replay"]["invalidated"]), Vec::<String>::new());

    // With the fixed input: READY (exit 0); the requested step is "requested", not invalidated.
    let ready = example("inputs/ready.json").display().to_string();
    let fixed =
        env.json(&["replay", "src", "--step", "run_unit_tests", "--input", &ready, "--run-id", "fixed"]).expect(0).json;
    assert_eq!(fixed["status"], "READY");
    assert_eq!(strs(&fixed["replay"]["reused"]).len(), 4);
    assert_eq!(step(&fixed, "run_unit_tests")["reason"], "requested");
    assert_eq!(strs(&fixed["replay"]["invalidated"]), Vec::<String>::new());
}

// ----------------------------------------------------------------------------------------------
// 1e. refusals: exit 2, nothing created
// ----------------------------------------------------------------------------------------------

#[test]
fn refused_replays_exit_2_and_create_nothing() {
    let env = Cairn::new();
    let input = tiny_source(&env);

    // A FAILED source: a one-step workflow whose tool exits 1.
    write_tool_workflow(
        &env,
        "failing",
        "[[steps]]\nid = \"boom\"\ntool = \"t\"\nargs = { counter = \"${input.counter}\", code = \"1\" }\n",
    );
    let failed = env.json(&["run", "failing", "--input", &input, "--run-id", "failed"]).expect(3).json;
    assert_eq!(failed["status"], "FAILED");

    // A RUNNING source: kill -9 a `cairn run` while its slow step runs, as in a crash.
    std::fs::write(env.path("flag"), "").unwrap();
    let mut crashed = env.spawn(&["run", "tiny", "--input", &input, "--run-id", "crashed"]);
    env.wait_for_event("crashed", Duration::from_secs(10), |e| e["kind"] == "step.started" && e["step_id"] == "b");
    assert!(wait_until(Duration::from_secs(5), || executions(&counter(&env), "b") == 2), "b never started");
    kill9(&mut crashed);
    let orphan = counter(&env).iter().rev().find(|(s, _)| s == "b").unwrap().1;
    assert_eq!(env.show("crashed")["status"], "RUNNING");

    let cases: Vec<(&str, Vec<&str>, Vec<&str>)> = vec![
        ("unknown source", vec!["replay", "nope", "--step", "a"], vec!["nope", "not found"]),
        ("FAILED source", vec!["replay", "failed", "--step", "boom"], vec!["failed", "FAILED"]),
        ("RUNNING source", vec!["replay", "crashed", "--step", "a"], vec!["crashed", "RUNNING"]),
        ("unknown step", vec!["replay", "src", "--step", "zz"], vec!["`zz`", "a, b, c, d"]),
        ("unknown and known step", vec!["replay", "src", "--step", "a", "--step", "zz"], vec!["`zz`", "a, b, c, d"]),
        ("source as --run-id", vec!["replay", "src", "--step", "a", "--run-id", "src"], vec!["src", "--run-id"]),
        ("unregistered --version", vec!["replay", "src", "--step", "a", "--version", "9.9.9"], vec!["9.9.9"]),
    ];
    let before = footprint_of(&env);
    let src_show = env.show("src");
    for (what, args, subs) in &cases {
        for dry in [false, true] {
            let mut args = args.clone();
            if dry {
                args.push("--dry-run");
            }
            let out = env.json(&args);
            assert_eq!(out.code, 2, "{what} (dry {dry}): stdout {} stderr {}", out.stdout, out.stderr);
            assert_error_body(&out.json, what);
            for s in subs {
                assert!(out.stderr.contains(s), "{what}: stderr {:?} lacks {s:?}", out.stderr);
            }
            assert_eq!(footprint_of(&env), before, "{what}: something was created");
        }
    }
    // No --step at all: a clap usage error (exit 2), nothing created.
    let out = env.raw(&["replay", "src", "--json"]);
    assert_eq!(out.code, 2, "stderr: {}", out.stderr);
    assert!(out.stderr.contains("--step"), "{}", out.stderr);
    assert_eq!(footprint_of(&env), before);
    assert_eq!(env.show("src"), src_show);
    assert_eq!(env.show("crashed")["status"], "RUNNING", "a refused replay changed its source");

    let _ = killpg(Pid::from_raw(orphan), Signal::SIGKILL);
}

// ----------------------------------------------------------------------------------------------
// 1f. --run-id: idempotent with the same replay, a conflict with another
// ----------------------------------------------------------------------------------------------

#[test]
fn a_reused_child_run_id_is_idempotent_or_a_mismatch() {
    let env = Cairn::new();
    let input = tiny_source(&env);
    let first = env.json(&["replay", "src", "--step", "b", "--run-id", "C"]).expect(0).json;
    assert_eq!(first["status"], "READY");
    let after_first = counter(&env);
    assert_eq!(after_first.len(), 6, "b and c execute once each: {after_first:?}");
    assert_eq!(executions(&after_first[4..], "b"), 1);
    assert_eq!(executions(&after_first[4..], "c"), 1);
    let footprint = footprint_of(&env);
    let events = env.events("C");

    // The same replay again, and the same replay naming the source's input explicitly (another
    // file, other key order): idempotent, same result, nothing executed or created.
    let reordered = input_file(
        &env,
        &json!({"flag_c": env.path_str("flag_c"), "flag": env.path_str("flag"), "counter": env.path_str("counter")}),
    );
    for extra in [vec![], vec!["--input", input.as_str()], vec!["--input", reordered.as_str()]] {
        let mut args = vec!["replay", "src", "--step", "b", "--run-id", "C"];
        args.extend(extra.iter());
        let again = env.json(&args).expect(0).json;
        assert_eq!(again, first, "{extra:?}");
        assert_eq!(counter(&env), after_first, "{extra:?}: a tool ran again");
        assert_eq!(footprint_of(&env), footprint);
        assert_eq!(env.events("C"), events, "{extra:?}: new events");
    }

    // Another step set, another input, or another source under the same run id: a conflict.
    let other_input = input_file(&env, &tiny_input(&env, "flag2"));
    env.json(&["replay", "src", "--step", "a", "--run-id", "other-src"]).expect(0);
    let footprint = footprint_of(&env);
    let after = counter(&env);
    for args in [
        vec!["replay", "src", "--step", "c", "--run-id", "C"],
        vec!["replay", "src", "--step", "b", "--step", "c", "--run-id", "C"],
        vec!["replay", "src", "--step", "b", "--input", other_input.as_str(), "--run-id", "C"],
        vec!["replay", "other-src", "--step", "b", "--run-id", "C"],
        // A plain run under a replay child's id, too.
        vec!["run", "tiny", "--input", input.as_str(), "--run-id", "C"],
    ] {
        let out = env.json(&args);
        assert_eq!(out.code, 4, "{args:?}: stdout {} stderr {}", out.stdout, out.stderr);
        assert!(out.stderr.contains("ExecutionInputMismatch"), "{args:?}: {}", out.stderr);
        assert_eq!(counter(&env), after, "{args:?}: a tool ran");
        assert_eq!(footprint_of(&env), footprint, "{args:?}");
        assert_eq!(env.events("C"), events, "{args:?}: C changed");
    }
}

// ----------------------------------------------------------------------------------------------
// 1g. --dry-run
// ----------------------------------------------------------------------------------------------

#[test]
fn a_dry_run_decides_every_step_and_creates_nothing() {
    let env = Cairn::new();
    let _ = tiny_source(&env);
    let before = footprint_of(&env);
    let dry = env.json(&["replay", "src", "--step", "b", "--run-id", "D", "--dry-run"]).expect(0).json;
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["source_run_id"], "src");
    let got: Vec<(String, String, String, String)> = dry["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["step_id"].as_str().unwrap().into(),
                d["decision"].as_str().unwrap().into(),
                d["reason"]["kind"].as_str().unwrap().into(),
                d["text"].as_str().unwrap().into(),
            )
        })
        .collect();
    let want = [
        ("a", "reuse", "signature_equal", "reused from run src (signature equal)"),
        ("b", "replay", "requested", "requested"),
        ("c", "replay", "descendant_of_requested", "descendant of requested step b"),
        ("d", "reuse", "signature_equal", "reused from run src (signature equal)"),
    ];
    let mut got_sorted = got.clone();
    got_sorted.sort();
    assert_eq!(
        got_sorted,
        want.iter()
            .map(|(a, b, c, d)| (a.to_string(), b.to_string(), c.to_string(), d.to_string()))
            .collect::<Vec<_>>()
    );
    assert_eq!(strs(&dry["replay"]["replayed"]), ["b", "c"]);
    assert_eq!(strs(&dry["replay"]["reused"]), ["a", "d"]);

    // The human rendering names every step too.
    let human = env.raw(&["replay", "src", "--step", "b", "--dry-run"]).expect(0);
    for id in ["a", "b", "c", "d"] {
        assert!(human.stdout.lines().any(|l| l.split_whitespace().next() == Some(id)), "{}", human.stdout);
    }
    assert!(human.stdout.contains("descendant of requested step b"), "{}", human.stdout);

    assert_eq!(footprint_of(&env), before, "a dry run created a run");
    assert!(!env.home.path().join("runs/D").exists());
    assert_eq!(counter(&env).len(), 4, "a dry run executed a tool");
    // The run id named in the dry run is still free.
    env.json(&["replay", "src", "--step", "b", "--run-id", "D"]).expect(0);
}

/// A dry run answers "what would this replay do": a request the replay itself refuses must not
/// be reported as fine. Both checks here exit 0 under --dry-run today (see the report).
#[test]
fn a_dry_run_refuses_what_the_replay_would_refuse() {
    let env = Cairn::new();
    let _ = tiny_source(&env);
    env.json(&["replay", "src", "--step", "b", "--run-id", "C"]).expect(0);
    let before = footprint_of(&env);
    for (args, code) in [
        // not a valid run id: the replay exits 2
        (vec!["replay", "src", "--step", "b", "--run-id", "bad/id"], 2),
        // C exists with another replay directive: the replay exits 4 (ExecutionInputMismatch)
        (vec!["replay", "src", "--step", "c", "--run-id", "C"], 4),
    ] {
        let real = env.json(&args);
        assert_eq!(real.code, code, "{args:?}: {}", real.stderr);
        let mut dry_args = args.clone();
        dry_args.push("--dry-run");
        let dry = env.json(&dry_args);
        assert_eq!(
            dry.code, real.code,
            "{args:?}: the dry run exits {} but the replay exits {} ({})",
            dry.code, real.code, real.stderr
        );
    }
    assert_eq!(footprint_of(&env), before);
}

// ----------------------------------------------------------------------------------------------
// 2. the source's rows and events never change
// ----------------------------------------------------------------------------------------------

fn source_rows(env: &Cairn) -> Option<String> {
    let mut s = env.sql(&[], "SELECT * FROM workflow_executions WHERE run_id = 'src'")?;
    s += &env.sql(&[], "SELECT * FROM tool_calls WHERE run_id = 'src' ORDER BY step_id")?;
    s += &env.sql(&[], "SELECT * FROM events WHERE run_id = 'src' ORDER BY seq")?;
    Some(s)
}

#[test]
fn source_rows_and_events_are_unchanged_by_replays() {
    let env = Cairn::new();
    let _ = tiny_source(&env);
    let show = env.show("src");
    let show_text = env.raw(&["show", "src", "--json"]).expect(0).stdout;
    let events = env.raw(&["events", "src", "--json"]).expect(0).stdout;
    let rows = source_rows(&env);

    let changed = input_file(&env, &tiny_input(&env, "another-flag"));
    env.json(&["replay", "src", "--step", "b", "--run-id", "c1"]).expect(0);
    env.json(&["replay", "src", "--step", "d", "--input", &changed, "--run-id", "c2"]).expect(0);
    env.json(&["replay", "src", "--step", "a", "--step", "d"]).expect(0);
    env.json(&["replay", "c1", "--step", "a", "--run-id", "g1"]).expect(0);
    env.json(&["replay", "src", "--step", "c", "--dry-run"]).expect(0);
    env.json(&["replay", "src", "--step", "nope"]).expect(2);
    env.json(&["replay", "src", "--step", "c", "--run-id", "c1"]).expect(4);
    env.json(&["replay", "src", "--step", "b", "--run-id", "c1"]).expect(0);

    let c2 = env.show("c2");
    assert_eq!(strs(&c2["replay"]["invalidated"]), ["b", "c"], "the changed flag path invalidates b: {c2:#}");
    assert!(step(&c2, "b")["reason"].as_str().unwrap().contains("argument `/flag` changed"), "{c2:#}");

    assert_eq!(env.raw(&["show", "src", "--json"]).expect(0).stdout, show_text, "show src changed");
    assert_eq!(env.show("src"), show);
    assert_eq!(env.raw(&["events", "src", "--json"]).expect(0).stdout, events, "events of src changed");
    match rows {
        Some(rows) => assert_eq!(source_rows(&env).unwrap(), rows, "the source's database rows changed"),
        None => eprintln!("sqlite3 not installed: skipped the raw-row comparison"),
    }
}

// ----------------------------------------------------------------------------------------------
// 3. lineage, and reused results are the source's evidence itself
// ----------------------------------------------------------------------------------------------

fn result_json(env: &Cairn, run: &str, step: &str) -> Option<String> {
    env.sql(&[], &format!("SELECT result_json FROM tool_calls WHERE run_id = '{run}' AND step_id = '{step}'"))
        .map(|s| s.trim_end().to_string())
}

#[test]
fn lineage_of_a_child_of_a_child_and_copied_evidence() {
    let env = Cairn::new();
    let _ = tiny_source(&env);
    let child = env.json(&["replay", "src", "--step", "b", "--run-id", "child"]).expect(0).json;
    assert_eq!(strs(&child["replay"]["reused"]), ["a", "d"]);
    let grand = env.json(&["replay", "child", "--step", "d", "--run-id", "grand"]).expect(0).json;
    assert_eq!(grand["replay"]["source_run_id"], "child");
    assert_eq!(strs(&grand["replay"]["replayed"]), ["d"]);
    assert_eq!(strs(&grand["replay"]["reused"]), ["a", "b", "c"]);
    assert_eq!(step(&grand, "a")["reason"], "reused from run child (signature equal)");

    let lineage = |run: &str| -> Vec<String> {
        env.show(run)["lineage"].as_array().unwrap().iter().map(|r| r["run_id"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(lineage("grand"), ["child", "src"]);
    assert_eq!(lineage("child"), ["src"]);
    assert_eq!(lineage("src"), Vec::<String>::new());
    assert_eq!(env.show("grand")["target"], "local", "a run made without a plan runs on `local`");
    let human = env.raw(&["show", "grand"]).expect(0).stdout;
    assert!(human.contains("lineage") && human.contains("child") && human.contains("src"), "{human}");

    // Signatures: a reused step carries the signature of the run it was copied from.
    for (id, origin) in [("a", "src"), ("b", "child"), ("c", "child")] {
        let g = explain(&env, "grand", id);
        assert_eq!(g["reused_from"], "child", "{id}");
        assert_eq!(g["attempts"], 0, "{id}");
        assert_eq!(g["signature"], explain(&env, origin, id)["signature"], "{id}");
        assert_eq!(g["signature"], explain(&env, "child", id)["signature"], "{id}");
    }
    let ev = env.events("grand");
    for (id, origin) in [("a", "src"), ("b", "child"), ("c", "child")] {
        let r = events_of(&ev, "step.replay_reused", Some(id));
        assert_eq!(r.len(), 1, "{id}");
        assert_eq!(r[0]["data"]["source_run_id"], "child", "{id}");
        // Where the evidence was first produced (an implementation detail worth keeping honest).
        assert_eq!(r[0]["data"]["origin_run_id"], origin, "{id}");
    }

    // Results: copied, never recomputed. The tool's results differ on every execution, so equal
    // results prove a copy. Only the database holds results (no CLI surface exposes them).
    let counted = counter(&env);
    assert_eq!(executions(&counted, "a"), 1, "a was recomputed: {counted:?}");
    assert_eq!(executions(&counted, "d"), 2, "{counted:?}");
    match result_json(&env, "src", "a") {
        None => eprintln!(
            "sqlite3 not installed: skipped the result comparison (the counter file still proves no recomputation)"
        ),
        Some(src_a) => {
            assert!(src_a.contains("\"step\""), "{src_a}");
            assert_eq!(result_json(&env, "child", "a").unwrap(), src_a);
            assert_eq!(result_json(&env, "grand", "a").unwrap(), src_a);
            let child_b = result_json(&env, "child", "b").unwrap();
            assert_ne!(child_b, result_json(&env, "src", "b").unwrap(), "b re-executed in child");
            assert_eq!(result_json(&env, "grand", "b").unwrap(), child_b);
            assert_eq!(result_json(&env, "grand", "c").unwrap(), result_json(&env, "child", "c").unwrap());
            assert_ne!(result_json(&env, "grand", "d").unwrap(), result_json(&env, "child", "d").unwrap());
        }
    }
}

// ----------------------------------------------------------------------------------------------
// 4. kill -9 during a replay, then --resume-interrupted
// ----------------------------------------------------------------------------------------------

/// Replays `requested` of a READY source as run C, kills cairn with SIGKILL while `crash` (slowed
/// by its flag file) runs, checks that a plain rerun refuses (exit 4), then resumes with
/// `--resume-interrupted` and checks from the tools' own counter and from the events that every
/// copied step was copied once and never executed, every replayed step that completed before the
/// crash was not executed again, and the interrupted one was resumed.
fn crash_and_resume(requested: &str, crash: &str, flag: &str, reused: &[&str]) {
    let env = Cairn::new();
    let _ = tiny_source(&env);
    let src_events = env.events("src");
    std::fs::write(env.path(flag), "").unwrap();

    let replay = ["replay", "src", "--step", requested, "--run-id", "C", "--in-process"];
    let mut crashed = env.spawn(&replay);
    env.wait_for_event("C", Duration::from_secs(10), |e| e["kind"] == "step.started" && e["step_id"] == crash);
    // The tool itself is running (sleeping on its flag), not merely announced.
    assert!(
        wait_until(Duration::from_secs(5), || executions(&counter(&env)[4..], crash) == 1),
        "{crash} never started"
    );
    kill9(&mut crashed);
    let orphan = counter(&env)[4..].iter().find(|(s, _)| s == crash).unwrap().1;
    let mid = env.show("C");
    assert_eq!(mid["status"], "RUNNING");
    assert_eq!(step(&mid, crash)["status"], "RUNNING");

    // A plain rerun refuses to touch the RUNNING step: exit 4, nothing executed, nothing copied again.
    let before = counter(&env);
    let out = env.json(&replay);
    assert_eq!(out.code, 4, "stdout {} stderr {}", out.stdout, out.stderr);
    assert!(out.stderr.contains("RUNNING") && out.stderr.contains("--resume-interrupted"), "{}", out.stderr);
    assert_eq!(counter(&env), before, "the refused rerun executed a tool");

    std::fs::remove_file(env.path(flag)).unwrap();
    let mut resume: Vec<&str> = replay.to_vec();
    resume.push("--resume-interrupted");
    let done = env.json(&resume).expect(0).json;
    assert_eq!(done["status"], "READY");
    assert!(!alive(orphan), "the abandoned attempt of {crash} (pid {orphan}) is still alive");
    assert_eq!(strs(&done["replay"]["reused"]), owned(reused));

    let lines = counter(&env);
    let in_replay = &lines[4..];
    let ev = env.events("C");
    let show = env.show("C");
    for id in ["a", "b", "c", "d"] {
        let s = step(&show, id);
        assert_eq!(s["status"], "COMPLETED", "{id}: {s}");
        let (runs, started, attempts) = if reused.contains(&id) {
            (0, 0, 0)
        } else if id == crash {
            (2, 2, 2)
        } else {
            (1, 1, 1)
        };
        assert_eq!(executions(in_replay, id), runs, "{id}: tool executions by the replay: {lines:?}");
        assert_eq!(events_of(&ev, "step.started", Some(id)).len(), started, "{id}: {ev:#?}");
        assert_eq!(s["attempts"], attempts, "{id}: {s}");
        assert_eq!(s["reused"], reused.contains(&id), "{id}: {s}");
        let copies = events_of(&ev, "step.replay_reused", Some(id));
        assert_eq!(copies.len(), usize::from(reused.contains(&id)), "{id} copied a wrong number of times: {ev:#?}");
        assert_eq!(events_of(&ev, "step.interrupted", Some(id)).len(), usize::from(id == crash), "{id}: {ev:#?}");
    }
    assert_eq!(ev.iter().filter(|e| e["kind"] == "run.created").count(), 1);
    assert_eq!(ev.iter().filter(|e| e["kind"] == "run.finished").count(), 1);
    assert_eq!(env.events("src"), src_events, "the crash touched the source");

    // Finished: another rerun is idempotent.
    let again = env.json(&replay).expect(0).json;
    assert_eq!(again["status"], "READY");
    assert_eq!(counter(&env), lines);
    let _ = killpg(Pid::from_raw(orphan), Signal::SIGKILL);
}

#[test]
fn a_replay_killed_mid_step_resumes_without_copying_twice() {
    // a → b → c, d: replay b, crash in b; a and d were copied before the crash.
    crash_and_resume("b", "b", "flag", &["a", "d"]);
}

#[test]
fn a_replay_killed_after_some_replayed_steps_completed_does_not_rerun_them() {
    // Replay a (so a, b, c re-execute), crash in c: a and b completed in the child before the
    // crash and must hit the child's own rows on resume.
    crash_and_resume("a", "c", "flag_c", &["d"]);
}
