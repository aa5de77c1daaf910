//! `add_workflow` on the workbench: an agent registers a workflow folder on the daemon's host —
//! a Snakemake pipeline with its inputs beside the Snakefile, and a Cairn workflow with an input
//! schema — exactly as `cairn workflow add` does, then describes it (input schema, declared
//! outputs) and runs it; a rejected folder answers every problem as data, the same list the API's
//! `error.problems` gives and `cairn workflow add` prints one a line; a Viewer token registers
//! nothing.

use super::*;

/// The example 1.2.0 copied to `to`, its workflow.toml changed by `edit`.
fn broken_copy(fx: &Fx, to: &str, edit: impl Fn(String) -> String) -> PathBuf {
    let dir = fx.p(to);
    copy_dir(&example("1.2.0"), &dir);
    let toml = dir.join("workflow.toml");
    std::fs::write(&toml, edit(std::fs::read_to_string(&toml).unwrap())).unwrap();
    dir
}

fn names(list: &Value) -> Vec<String> {
    list["workflows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| format!("{}@{}", str_of(&w["name"]), str_of(&w["version"])))
        .collect()
}

#[test]
fn an_agent_registers_describes_and_runs_workflows_and_gets_every_problem_as_data() {
    let Some(fx) = Fx::new().map(Fx::with_venv_on_path) else { return };
    fx.start_daemon();
    let client = fx.client();
    let wb = client.stdio("workbench");

    // A Snakemake pipeline folder: the Snakefile, its data beside it, and a workflow.toml.
    let pipeline = fx.p("bare");
    copy_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pipelines/bare"), &pipeline);
    let added = wb.call_ok("add_workflow", json!({"path": pipeline.display().to_string()}));
    assert_eq!((added["name"].as_str(), added["registered"].as_bool()), (Some("bare"), Some(true)), "{added:#}");
    let again = wb.call_ok("add_workflow", json!({"path": pipeline.join("workflow.toml").display().to_string()}));
    assert_eq!((again["registered"].as_bool(), &again["digest"]), (Some(false), &added["digest"]), "{again:#}");

    // A Cairn workflow with an input schema and declared outputs: describe_workflow shows both.
    let wf = wb.call_ok("add_workflow", json!({"path": example("1.2.0").display().to_string()}));
    assert_eq!(wf["name"], "release-validation", "{wf:#}");
    let (code, cli, out) = fx.json(&["workflow", "add", example("1.2.0").to_str().unwrap()]);
    assert_eq!((code, cli["registered"].as_bool(), &cli["digest"]), (0, Some(false), &wf["digest"]), "{out}");
    let d = wb.call_ok("describe_workflow", json!({"name": "release-validation"}));
    let schema: Value = read_json(&example("1.2.0/input.schema.json"));
    assert_eq!(d["input_schema_document"], schema, "the input schema itself, to build an input from");
    let evidence = d["steps"].as_array().unwrap().iter().find(|s| s["id"] == "generate_evidence").unwrap();
    assert_eq!(
        evidence["outputs"],
        json!([{"name": "report", "path": "evidence-report.md", "folder": false},
               {"name": "summary", "path": "evidence.json", "folder": false}]),
        "{evidence:#}"
    );
    let bare = wb.call_ok("describe_workflow", json!({"name": "bare"}));
    assert_eq!(bare["input_schema_document"], Value::Null);

    // The registered pipeline plans and runs like any workflow.
    std::fs::create_dir_all(fx.p("runs")).unwrap();
    let plan = wb.call_ok(
        "plan_run",
        json!({"workflow": "bare", "input": {}, "target": "local", "run_dir": fx.p("runs/bare").display().to_string()}),
    );
    let run = wb.call_ok(
        "execute_plan",
        json!({"plan_name": plan["plan_name"], "plan_id": plan["plan_id"], "plan_checksum": plan["plan_checksum"]}),
    );
    assert_eq!(run["status"], "READY", "{run:#}");

    // Every problem of a broken workflow at once, each located, on every surface alike.
    let broken = broken_copy(&fx, "broken", |t| {
        t.replace("version = \"1.2.0\"", "version = \"1.2\"")
            .replace(
                "timeout_secs = 30\nversion = \"1\"\n\n[tools.inspect_artifacts]",
                "timeout_secs = 0\nversion = \"1\"\n\n[tools.inspect_artifacts]",
            )
            .replace("id = \"generate_evidence\"", "id = \"generate evidence\"")
    });
    let before = names(&wb.call_ok("list_workflows", json!({})));
    let e = wb.call_err("add_workflow", json!({"path": broken.display().to_string()}));
    assert_eq!((e["status"].as_u64(), e["code"].as_str()), (Some(422), Some("invalid_workflow")), "{e:#}");
    assert!(e["message"].as_str().unwrap().contains("call add_workflow again"), "says the next call: {e:#}");
    let problems = e["problems"].as_array().unwrap_or_else(|| panic!("no problems: {e:#}"));
    let toml = broken.join("workflow.toml").canonicalize().unwrap().display().to_string();
    let fields: Vec<(&str, Option<&str>)> =
        problems.iter().map(|p| (str_of(&p["field"]), p["step"].as_str())).collect();
    assert!(fields.contains(&("workflow.version", None)), "{problems:#?}");
    assert!(fields.contains(&("tools.load_manifest.timeout_secs", None)), "{problems:#?}");
    assert!(fields.contains(&("id", Some("generate evidence"))), "{problems:#?}");
    for p in problems {
        assert_eq!(p["file"], toml, "{p:#}");
        assert!(p["line"].as_u64().is_some_and(|l| l > 0), "each problem has its line: {p:#}");
        assert!(!str_of(&p["message"]).is_empty(), "{p:#}");
    }
    let (url, operator) = (fx.url(), fx.token("operator"));
    let api =
        http("POST", &format!("{url}/workflows"), Some(&operator), Some(&json!({"path": broken}).to_string()), &[]);
    assert_eq!((api.status, &api.body["error"]["problems"]), (422, &e["problems"]), "POST /workflows: {:#}", api.body);
    let out = fx.c.json(&["workflow", "add", broken.to_str().unwrap()]).expect(2);
    let lines: Vec<&str> = out.stderr.lines().filter(|l| l.contains(&toml)).collect();
    assert_eq!(lines.len(), problems.len(), "`cairn workflow add`: every problem, one a line: {}", out.stderr);
    for (line, p) in lines.iter().zip(problems) {
        assert!(line.contains(&format!("{toml}:{}: ", p["line"])) && line.contains(str_of(&p["message"])), "{line}");
    }

    // Checks that need the folder report every missing file too.
    let missing = broken_copy(&fx, "missing", |t| t.replace("tools/load_manifest.py", "tools/nope.py"));
    std::fs::remove_file(missing.join("input.schema.json")).unwrap();
    let e = wb.call_err("add_workflow", json!({"path": missing.display().to_string()}));
    let fields: Vec<&str> = e["problems"].as_array().unwrap().iter().map(|p| str_of(&p["field"])).collect();
    assert_eq!(fields, ["tools.load_manifest.command", "workflow.input_schema"], "{e:#}");

    // A relative path, a folder without a workflow.toml, a conflicting version.
    let e = wb.call_err("add_workflow", json!({"path": "bare"}));
    assert!(e["message"].as_str().unwrap().contains("absolute path"), "{e:#}");
    let e = wb.call_err("add_workflow", json!({"path": fx.p("runs").display().to_string()}));
    assert!(e["problems"][0]["message"].as_str().unwrap().contains("workflow.toml"), "{e:#}");
    append(&pipeline.join("Snakefile"), "\n# edited\n");
    let e = wb.call_err("add_workflow", json!({"path": pipeline.display().to_string()}));
    assert_eq!((e["status"].as_u64(), e["code"].as_str()), (Some(409), Some("workflow_version_conflict")), "{e:#}");
    assert_eq!(names(&wb.call_ok("list_workflows", json!({}))), before, "nothing refused was registered");

    // A Viewer registers nothing, over MCP or the API.
    let viewer = client.http("workbench", "viewer");
    let e = viewer.call_err("add_workflow", json!({"path": example("1.0.0").display().to_string()}));
    assert_eq!(e["status"], 403, "{e:#}");
    let api = http(
        "POST",
        &format!("{url}/workflows"),
        Some(&fx.token("viewer")),
        Some(&json!({"path": example("1.0.0")}).to_string()),
        &[],
    );
    assert_eq!(api.status, 403, "{:#}", api.body);
    assert_eq!(names(&wb.call_ok("list_workflows", json!({}))), before);
}
