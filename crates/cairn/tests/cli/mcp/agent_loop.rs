//! The whole agent loop, scripted with the official Python SDK as an agent that sees only the
//! workbench: define a Snakemake pipeline (and get a broken folder's every problem), describe it,
//! plan, have the person decline and then approve through the client, follow the run's progress
//! to its end, read its results and artifacts, explain a step, replay it, verify a document and
//! keep it as a procedure doc — once on 2025-11-25 over stdio and once on 2026-07-28 over HTTP.
//! A Viewer's session may neither define nor execute.

use super::*;

#[test]
fn an_agent_closes_the_loop_alone_over_mcp() {
    let Some(fx) = Fx::new().map(Fx::with_venv_on_path) else { return };
    let pipeline = fx.p("bare");
    copy_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pipelines/bare"), &pipeline);
    let broken = fx.p("broken");
    copy_dir(&pipeline, &broken);
    let toml = broken.join("workflow.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, text.replace("cores = 2", "cores = 0").replace("timeout_secs = 300", "timeout_secs = -1"))
        .unwrap();
    std::fs::create_dir_all(fx.p("runs")).unwrap();
    fx.start_daemon();
    let client = fx.client();

    for (over, era) in [(Over::Stdio, "legacy"), (Over::Http, "modern")] {
        let wb = client.session_with(over, "workbench", "operator", json!({"elicitation": true, "era": era}));
        let w = format!("{} ({era})", wb.what);

        // Define.
        let added = wb.call_ok("add_workflow", json!({"path": pipeline}));
        assert_eq!(added["name"], "bare", "{w}: {added:#}");
        let e = wb.call_err("add_workflow", json!({"path": broken}));
        let fields: Vec<&str> = e["problems"].as_array().unwrap().iter().map(|p| str_of(&p["field"])).collect();
        assert_eq!(fields, ["tools.pipeline.timeout_secs", "args"], "{w}: every problem at once: {e:#}");
        let d = wb.call_ok("describe_workflow", json!({"name": "bare"}));
        assert_eq!(strs(&d["order"]), ["pipeline"], "{w}");

        // Plan; the person declines, then approves.
        let run_dir = fx.p(&format!("runs/{era}"));
        let plan =
            wb.call_ok("plan_run", json!({"workflow": "bare", "input": {}, "target": "local", "run_dir": run_dir}));
        let approve =
            json!({"plan_name": plan["plan_name"], "plan_id": plan["plan_id"], "plan_checksum": plan["plan_checksum"]});
        let no = wb.call_seeing("execute_plan", approve.clone(), json!({"elicit": "decline"}));
        assert_eq!(no["ok"]["structuredContent"]["error"]["code"], "approval_declined", "{w}: {no:#}");
        assert!(!run_dir.exists(), "{w}: a declined plan created its run_dir");
        let yes = wb.call_seeing("execute_plan", approve, json!({"elicit": "accept", "progress": true}));
        let run = &yes["ok"]["structuredContent"];
        assert_eq!(run["status"], "READY", "{w}: {yes:#}");
        let channel = if era == "modern" { "input_required" } else { "elicitation" };
        assert_eq!(run["approval"]["channel"], channel, "{w}");
        let progress = yes["progress"].as_array().unwrap();
        assert_eq!(progress.last().map(|p| (&p["progress"], &p["total"])), Some((&json!(1.0), &json!(1.0))), "{w}");
        let run_id = str_of(&run["run_id"]).to_string();

        // Read the evidence.
        let step = wb.call_ok("get_step_result", json!({"run_id": run_id, "step_id": "pipeline"}));
        assert_eq!(step["result"]["jobs"]["failed"], 0, "{w}: {step:#}");
        let report = step["artifacts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| str_of(&a["path"]).ends_with("results/report.txt"))
            .unwrap_or_else(|| panic!("{w}: no report among the artifacts: {step:#}"))
            .clone();
        let bytes =
            wb.call_ok("read_artifact", json!({"run_id": run_id, "step_id": "pipeline", "name": report["name"]}));
        assert_eq!((&bytes["sha256"], bytes["encoding"].as_str()), (&report["sha256"], Some("text")), "{w}: {bytes:#}");
        let why = wb.call_ok("explain_step", json!({"run_id": run_id, "step_id": "pipeline"}));
        assert!(why.to_string().contains("pipeline"), "{w}: {why:#}");
        // The pipeline's jobs, the one that wrote the report among them.
        let jobs = wb.call_ok("get_pipeline_jobs", json!({"run_id": run_id, "step_id": "pipeline"}));
        assert_eq!(jobs["total"], jobs["jobs"].as_array().unwrap().len(), "{w}: {jobs:#}");
        let writer = &report["job"];
        let listed = jobs["jobs"].as_array().unwrap().iter().find(|j| j["job"] == writer["job"]);
        assert_eq!(listed.map(|j| &j["rule"]), Some(&writer["rule"]), "{w}: the report's job is listed: {jobs:#}");
        let traced = wb.call_ok("trace_artifact", json!({"sha256": report["sha256"]}));
        let found = traced["matches"].as_array().unwrap().iter().find(|m| m["run_id"] == run_id.as_str()).cloned();
        assert_eq!(found.map(|m| m["jobs"][0]["rule"].clone()), Some(writer["rule"].clone()), "{w}: {traced:#}");
        let one = wb.call_ok("get_pipeline_jobs", json!({"run_id": run_id, "step_id": "pipeline", "limit": 1}));
        assert_eq!((one["jobs"].as_array().unwrap().len(), &one["total"]), (1, &jobs["total"]), "{w}");

        // Replay the step into a child run, approved the same way.
        let child_dir = fx.p(&format!("runs/{era}-replay"));
        let rp =
            wb.call_ok("plan_replay", json!({"source_run_id": run_id, "step_ids": ["pipeline"], "run_dir": child_dir}));
        // The plan forecasts the pipeline's jobs: nothing changed, so Snakemake would run none.
        assert_eq!(rp["jobs"], json!([{"step_id": "pipeline", "rules": []}]), "{w}: {rp:#}");
        let approve =
            json!({"plan_name": rp["plan_name"], "plan_id": rp["plan_id"], "plan_checksum": rp["plan_checksum"]});
        let child = wb.call_seeing("execute_plan", approve, json!({"elicit": "accept"}));
        let child = &child["ok"]["structuredContent"];
        assert_eq!(
            (child["status"].as_str(), child["replay"]["source_run_id"].as_str()),
            (Some("READY"), Some(run_id.as_str()))
        );

        // Verify a document and keep it as a procedure doc.
        let v = wb.call_ok("verify_workflow", json!({"document": PASSING_DOC, "title": format!("loop-{era}")}));
        assert_eq!(v["verdict"], "passed", "{w}: {v:#}");
        let doc = wb.call_ok(
            "save_doc",
            json!({"name": format!("sum-{era}"), "text": "# Sum\n\nAdd two numbers and check the sum.\n", "verification_id": v["verification_id"]}),
        );
        assert_eq!(doc["created"], true, "{w}: {doc:#}");

        // An error says what to call next.
        let e = wb.call_err("get_run", json!({"run_id": "nope"}));
        assert!(str_of(&e["message"]).contains("list_runs"), "{w}: {e:#}");
    }

    // A Viewer may neither define nor execute.
    let viewer = client.session_with(Over::Http, "workbench", "viewer", json!({"elicitation": true}));
    let e = viewer.call_err("add_workflow", json!({"path": pipeline}));
    assert_eq!(e["status"], 403, "{e:#}");
    let plan = client.stdio("workbench").call_ok(
        "plan_run",
        json!({"workflow": "bare", "input": {}, "target": "local", "run_dir": fx.p("runs/viewer")}),
    );
    let approve =
        json!({"plan_name": plan["plan_name"], "plan_id": plan["plan_id"], "plan_checksum": plan["plan_checksum"]});
    let e = viewer.call_seeing("execute_plan", approve, json!({"elicit": "accept"}));
    assert_eq!(e["ok"]["structuredContent"]["error"]["status"], 403, "a Viewer's approval executes nothing: {e:#}");
    assert!(!fx.p("runs/viewer").exists());
}
