//! Prompts, completion and logging on every server: each server lists its guided paths (with a
//! description and typed arguments) and renders them with the arguments given, refusing a missing
//! required one or an unknown name; `completion/complete` suggests workflow names and versions,
//! run ids, step ids, target and plan names from what is registered, filtered by what is typed;
//! after `logging/setLevel` a client gets a line about each of its tool calls at that level and
//! above, and none before.

use super::*;

fn values(r: &Value) -> Vec<String> {
    strs(&r["completion"]["values"])
}

#[test]
fn prompts_completion_and_logging_follow_what_is_registered() {
    let Some(fx) = Fx::with_example() else { return };
    let input = example("inputs/ready.json");
    let (code, run, out) =
        fx.json(&["run", "release-validation", "--input", input.to_str().unwrap(), "--run-id", "G1"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(run["status"], "READY");
    let client = fx.client();

    // Each server's guided paths.
    for (server, role, expected) in [
        ("workbench", "operator", vec!["run_workflow", "inspect_run", "verify_and_keep"]),
        ("compute", "operator", vec!["set_up_target"]),
        ("app", "viewer", vec!["review_run"]),
    ] {
        for over in [Over::Stdio, Over::Http] {
            let s = client.session(over, server, role);
            let w = &s.what;
            for cap in ["prompts", "completions", "logging"] {
                assert!(s.init["capabilities"].get(cap).is_some(), "{w}: declares {cap}: {:#}", s.init);
            }
            let listed = s.ok("list_prompts", json!({}));
            let prompts = listed["prompts"].as_array().unwrap();
            let names: Vec<&str> = prompts.iter().map(|p| str_of(&p["name"])).collect();
            assert_eq!(names, expected, "{w}");
            for p in prompts {
                assert!(!str_of(&p["description"]).is_empty(), "{w}: {p:#}");
                assert!(p["arguments"].as_array().unwrap().iter().any(|a| a["required"] == true), "{w}: {p:#}");
            }
        }
    }
    let wb = client.stdio("workbench");
    let got = wb.ok(
        "get_prompt",
        json!({"name": "run_workflow", "arguments": {"workflow": "release-validation", "target": "local"}}),
    );
    let text = str_of(&got["messages"][0]["content"]["text"]);
    for step in
        ["describe_workflow(name=\"release-validation\")", "plan_run", "execute_plan", "read_artifact", "plan_replay"]
    {
        assert!(text.contains(step), "the guided path names `{step}`:\n{text}");
    }
    assert_eq!(got["messages"][0]["role"], "user");
    let e = wb.raw("get_prompt", json!({"name": "run_workflow", "arguments": {}}));
    assert_eq!(e["error"]["code"], INVALID_PARAMS, "a missing required argument: {e:#}");
    assert!(str_of(&e["error"]["message"]).contains("workflow"), "{e:#}");
    let e = wb.raw("get_prompt", json!({"name": "nope"}));
    assert!(str_of(&e["error"]["message"]).contains("run_workflow"), "names the prompts there are: {e:#}");
    let inspect =
        wb.ok("get_prompt", json!({"name": "inspect_run", "arguments": {"run_id": "G1", "step_id": "run_unit_tests"}}));
    assert!(
        str_of(&inspect["messages"][0]["content"]["text"]).contains("step_ids=[\"run_unit_tests\"]"),
        "{inspect:#}"
    );

    // Completion, from what is registered, filtered by what is typed.
    let complete = |s: &Session<'_>, r: Value, name: &str, value: &str, context: Value| {
        s.ok("complete", json!({"ref": r, "argument": {"name": name, "value": value}, "context": context}))
    };
    let prompt = |n: &str| json!({"type": "ref/prompt", "name": n});
    assert_eq!(values(&complete(&wb, prompt("run_workflow"), "workflow", "rel", json!(null))), ["release-validation"]);
    assert_eq!(values(&complete(&wb, prompt("run_workflow"), "workflow", "zz", json!(null))), Vec::<String>::new());
    assert_eq!(
        values(&complete(&wb, prompt("run_workflow"), "version", "", json!({"workflow": "release-validation"}))),
        ["1.2.0"]
    );
    assert_eq!(values(&complete(&wb, prompt("run_workflow"), "target", "lo", json!(null))), ["local"]);
    assert_eq!(values(&complete(&wb, prompt("inspect_run"), "run_id", "G", json!(null))), ["G1"]);
    assert_eq!(
        values(&complete(&wb, prompt("inspect_run"), "step_id", "run_", json!({"run_id": "G1"}))),
        ["run_unit_tests", "run_compatibility"]
    );
    let template = |u: &str| json!({"type": "ref/resource", "uri": u});
    assert_eq!(values(&complete(&wb, template("cairn://runs/{run_id}"), "run_id", "", json!(null))), ["G1"]);
    let app = client.stdio("app");
    assert_eq!(
        values(&complete(&app, template("cairn://workflows/{name}@{version}"), "name", "r", json!(null))),
        ["release-validation"]
    );
    let e = wb.raw("complete", json!({"ref": prompt("run_workflow"), "argument": {"name": "colour", "value": ""}}));
    assert_eq!(e["error"]["code"], INVALID_PARAMS, "an argument the prompt does not have: {e:#}");
    let e = wb.raw(
        "complete",
        json!({"ref": prompt("test_prompt_with_arguments"), "argument": {"name": "arg1", "value": ""}}),
    );
    assert_eq!(e["error"]["code"], INVALID_PARAMS, "an unknown prompt: {e:#}");

    // Logging: nothing before setLevel; a line per call at the level asked, and above.
    for over in [Over::Stdio, Over::Http] {
        let s = client.over(over, "workbench");
        let w = &s.what;
        s.call_ok("get_run", json!({"run_id": "G1"}));
        s.call_err("get_run", json!({"run_id": "nope"}));
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(s.ok("logs", json!({}))["logs"], json!([]), "{w}: no log lines before setLevel");
        s.ok("set_level", json!({"level": "warning"}));
        s.call_ok("get_run", json!({"run_id": "G1"}));
        s.call_err("get_run", json!({"run_id": "nope"}));
        s.ok("set_level", json!({"level": "info"}));
        s.call_ok("get_run", json!({"run_id": "G1"}));
        std::thread::sleep(Duration::from_millis(200));
        let logs = s.ok("logs", json!({}))["logs"].as_array().unwrap().clone();
        let levels: Vec<&str> = logs.iter().map(|l| str_of(&l["level"])).collect();
        assert_eq!(levels, ["warning", "info"], "{w}: {logs:#?}");
        assert_eq!(
            (&logs[0]["data"]["tool"], &logs[0]["data"]["code"]),
            (&json!("get_run"), &json!("run_not_found")),
            "{w}"
        );
        assert_eq!((&logs[1]["data"]["run_id"], &logs[1]["data"]["status"]), (&json!("G1"), &json!("READY")), "{w}");
        assert_eq!(logs[1]["logger"], "cairn.tools", "{w}");
    }
}
