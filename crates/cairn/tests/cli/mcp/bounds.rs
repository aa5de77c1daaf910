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
