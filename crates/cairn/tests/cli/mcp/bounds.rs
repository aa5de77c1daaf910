//! No tool result is over 256 KiB: a step result over 192 KiB comes from `get_step_result` as the
//! start of its text with `result_truncated` and the resource that holds it whole
//! (`cairn://runs/{run_id}/steps/{step_id}/result`, the very JSON the API gives); an answer that
//! would still be too large (an artifact slice whose text grows when escaped) is refused with what
//! to ask for instead.

use super::*;

const BIG: &str = r#"
[workflow]
name = "big"
version = "1.0.0"

[tools.big]
command = ["python3", "tools/big.py"]
outputs = { odd = "odd.txt" }

[[steps]]
id = "make"
tool = "big"
"#;

/// A 300,000-character result, and 150,000 bytes of control characters (each six in JSON).
const BIG_PY: &str = "import json, sys\njson.load(sys.stdin)\nopen('odd.txt', 'w').write('\\x01' * 150000)\nprint(json.dumps({'rows': ['r%06d' % i for i in range(30000)]}))\n";

#[test]
fn large_results_are_cut_with_a_way_to_the_whole_and_nothing_over_256_kib_is_answered() {
    let Some(fx) = Fx::new() else { return };
    let dir = fx.p("big");
    std::fs::create_dir_all(dir.join("tools")).unwrap();
    std::fs::write(dir.join("workflow.toml"), BIG).unwrap();
    std::fs::write(dir.join("tools/big.py"), BIG_PY).unwrap();
    let (code, _, out) = fx.json(&["workflow", "add", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    fx.start_daemon();
    let run = fx.c.run("big", &json!({}), &["--run-id", "B1"]).expect(0).json;
    assert_eq!(run["status"], "READY", "{run:#}");
    let client = fx.client();
    let wb = client.stdio("workbench");

    let step = wb.call_ok("get_step_result", json!({"run_id": "B1", "step_id": "make"}));
    let whole = http("GET", &format!("{}/runs/B1/steps/make", fx.url()), Some(&fx.token("viewer")), None, &[]).body;
    let bytes = whole["result"].to_string().len();
    assert!(bytes > 256 << 10, "the result is large: {bytes}");
    assert_eq!((step["result_truncated"].as_bool(), step["result_bytes"].as_u64()), (Some(true), Some(bytes as u64)));
    assert!(whole["result"].to_string().starts_with(str_of(&step["result"])), "the start of its text");
    let uri = str_of(&step["result_resource"]).to_string();
    assert_eq!(uri, "cairn://runs/B1/steps/make/result");
    assert_eq!(wb.read_json(&uri), whole["result"], "the resource holds it whole");
    assert!(step.to_string().len() < 256 << 10);
    assert_eq!(step["artifacts"], whole["artifacts"], "the rest of the step is whole");

    // 150,000 control characters are text, six bytes each in JSON: too large in one answer.
    let r = wb.call("read_artifact", json!({"run_id": "B1", "step_id": "make", "name": "odd"}));
    assert_eq!(r["isError"], true, "{}", r.to_string().chars().take(500).collect::<String>());
    let e = &r["structuredContent"]["error"];
    assert_eq!(e["code"], "result_too_large", "{e:#}");
    assert!(str_of(&e["message"]).contains("shorter `length`"), "says what to ask for: {e:#}");
    let page = wb.call_ok("read_artifact", json!({"run_id": "B1", "step_id": "make", "name": "odd", "length": 40000}));
    assert_eq!((page["length"].as_u64(), page["eof"].as_bool()), (Some(40_000), Some(false)), "a shorter page fits");
}

/// A tool that answers with an API response declares that response's schema, the very one the
/// API's OpenAPI document gives it.
#[test]
fn output_schemas_are_the_api_s_own() {
    let Some(fx) = Fx::new() else { return };
    fx.start_daemon();
    let client = fx.client();
    let wb = client.stdio("workbench");
    let doc = http("GET", &format!("{}/openapi.json", fx.url()), None, None, &[]).body;
    let components: Value =
        serde_json::from_str(&doc["components"]["schemas"].to_string().replace("#/components/schemas/", "#/$defs/"))
            .unwrap();
    let tools = wb.tools();
    for (tool, component) in
        [("get_run", "RunResult"), ("get_step_result", "StepDetail"), ("read_doc", "Doc"), ("list_jobs", "JobList")]
    {
        let t = tools.iter().find(|t| t["name"] == tool).unwrap();
        let schema = &t["outputSchema"];
        assert_eq!(schema["allOf"][0]["$ref"], format!("#/$defs/{component}"), "{tool}: {schema:#}");
        for (name, def) in schema["$defs"].as_object().unwrap() {
            assert_eq!(def, &components[name], "{tool}: $defs.{name} is the OpenAPI document's");
        }
    }
}

/// A run of 1,200 steps, each with a result of 400 characters: its first 1,000 steps would be
/// about 700 KiB of JSON.
fn wide(fx: &Fx) {
    let dir = fx.p("wide");
    std::fs::create_dir_all(dir.join("tools")).unwrap();
    let tool = dir.join("tools/step.sh");
    let note = "n".repeat(400);
    std::fs::write(&tool, format!("#!/bin/sh\ncat >/dev/null\necho '{{\"note\":\"{note}\"}}'\n")).unwrap();
    std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut toml = String::from(
        "[workflow]\nname = \"wide\"\nversion = \"1.0.0\"\n\n[tools.step]\ncommand = [\"tools/step.sh\"]\n\n",
    );
    for i in 0..1200 {
        toml.push_str(&format!("[[steps]]\nid = \"s{i}\"\ntool = \"step\"\n\n"));
    }
    std::fs::write(dir.join("workflow.toml"), toml).unwrap();
    let (code, _, out) = fx.json(&["workflow", "add", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
}

/// `get_run` of a large run answers with a page that fits (its counts cover every step, and
/// `steps_page` says where the next starts), and any page asked for.
#[test]
fn get_run_of_a_large_run_answers_a_page_that_fits() {
    let Some(fx) = Fx::new() else { return };
    wide(&fx);
    fx.start_daemon();
    let run = fx.c.run("wide", &json!({}), &["--run-id", "W1", "--parallel", "2"]).expect(0).json;
    assert_eq!(run["status"], "READY");
    let client = fx.client();
    let wb = client.stdio("workbench");

    let first = wb.call_ok("get_run", json!({"run_id": "W1"}));
    assert!(first.to_string().len() <= 256 << 10, "{} bytes", first.to_string().len());
    assert_eq!(
        first["step_counts"],
        json!({"total": 1200, "pending": 0, "running": 0, "completed": 1200, "failed": 0})
    );
    let page = &first["steps_page"];
    let returned = page["returned"].as_u64().unwrap();
    assert!((100..1000).contains(&returned), "as many as fit: {page}");
    assert_eq!((page["limit"].as_u64(), page["next_offset"].as_u64()), (Some(returned), Some(returned)), "{page}");
    assert_eq!(first["steps"][0]["step_id"], "s0");

    let next = wb.call_ok("get_run", json!({"run_id": "W1", "steps_offset": 1195, "steps_limit": 10}));
    let ids: Vec<&str> = next["steps"].as_array().unwrap().iter().map(|s| str_of(&s["step_id"])).collect();
    assert_eq!(ids, ["s1195", "s1196", "s1197", "s1198", "s1199"]);
    assert_eq!(next["steps_page"]["next_offset"], Value::Null);
    let layer = wb.call_ok("get_run", json!({"run_id": "W1", "steps_layer": 0, "steps_limit": 2}));
    let ids: Vec<&str> = layer["steps"].as_array().unwrap().iter().map(|s| str_of(&s["step_id"])).collect();
    assert_eq!((ids, &layer["steps_page"]["matched"]), (vec!["s0", "s1"], &json!(1200)), "{layer:#}");
    // The layers, as the API gives them.
    let layers = wb.call_ok("get_run_layers", json!({"run_id": "W1"}));
    let api = http("GET", &format!("{}/runs/W1/layers", fx.url()), Some(&fx.c.token("viewer")), None, &[]);
    assert_eq!((api.status, &layers), (200, &api.body), "the MCP layers are the API's");
    assert_eq!(layers["layers"][0]["step_counts"]["completed"], 1200, "{layers:#}");
    let none = wb.call_ok("get_run_layers", json!({"run_id": "W1", "offset": 1}));
    assert_eq!((&none["total"], none["layers"].as_array().map(Vec::len)), (&json!(1), Some(0)), "{none:#}");
    let bad = wb.call("get_run_layers", json!({"run_id": "W1", "limit": 0}));
    assert_eq!(bad["structuredContent"]["error"]["code"], "invalid_field", "{bad:#}");
    let missing = wb.call("get_run_layers", json!({"run_id": "nope"}));
    assert_eq!(missing["isError"], true, "{missing:#}");
    let failed = wb.call_ok("get_run", json!({"run_id": "W1", "steps_status": "FAILED"}));
    assert_eq!((failed["steps"].as_array().map(Vec::len), &failed["steps_page"]["matched"]), (Some(0), &json!(0)));

    // A page asked for that is too large is refused, saying what to ask for.
    let r = wb.call("get_run", json!({"run_id": "W1", "steps_limit": 1000}));
    assert_eq!(r["isError"], true);
    let e = &r["structuredContent"]["error"];
    assert_eq!(e["code"], "result_too_large", "{e:#}");
    assert!(str_of(&e["message"]).contains("steps_limit"), "{e:#}");
    let bad = wb.call("get_run", json!({"run_id": "W1", "steps_status": "done"}));
    assert_eq!(bad["structuredContent"]["error"]["code"], "invalid_field", "{bad:#}");
}
