//! Progress of the long calls, for a caller with a `progressToken` (the Python SDK's
//! `progress_callback`): `execute_plan` reports steps done of total, and while a Snakemake step
//! runs its pipeline's jobs done of total; `verify_workflow` reports cells done of total. Each
//! notification's progress is larger than the last, and the last is the whole.

use super::*;

/// A Snakemake pipeline of three jobs, one after the other, each taking a while, and its
/// workflow.toml.
const SLOW_SNAKEFILE: &str = r#"
rule all:
    input: "results/c.txt"

rule a:
    output: "results/a.txt"
    shell: "sleep 1; echo a > {output}"

rule b:
    input: "results/a.txt"
    output: "results/b.txt"
    shell: "sleep 1; cat {input} > {output}; echo b >> {output}"

rule c:
    input: "results/b.txt"
    output: "results/c.txt"
    shell: "sleep 1; cat {input} > {output}; echo c >> {output}"
"#;

const SLOW_WORKFLOW: &str = r#"
[workflow]
name = "slow-pipeline"
version = "1.0.0"

[tools.pipeline]
kind = "snakemake"
timeout_secs = 120

[[steps]]
id = "pipeline"
tool = "pipeline"
args = { snakefile = "Snakefile", cores = 1 }
"#;

/// Three cells that take a while each.
const SLOW_DOC: &str = "# Slow\n\n```python\nimport time\ntime.sleep(0.8)\n```\n\n```python\ntime.sleep(0.8)\n```\n\n```python\ntime.sleep(0.8)\nprint('done')\n```\n";

/// The progress notifications of one call: strictly increasing, each with the total, the last
/// the whole. Returns their messages.
#[track_caller]
fn checked(answer: &Value, total: f64, what: &str) -> Vec<String> {
    let seen = answer["progress"].as_array().unwrap_or_else(|| panic!("{what}: {answer:#}"));
    assert!(!seen.is_empty(), "{what}: no progress was reported: {answer:#}");
    let values: Vec<f64> = seen.iter().map(|p| p["progress"].as_f64().unwrap()).collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{what}: progress must increase: {values:?}");
    assert!(seen.iter().all(|p| p["total"].as_f64() == Some(total)), "{what}: each has the total {total}: {seen:#?}");
    assert_eq!(values.last().copied(), Some(total), "{what}: the last is the whole: {seen:#?}");
    seen.iter().map(|p| str_of(&p["message"]).to_string()).collect()
}

/// The example registered, the slow pipeline written (not registered) at `slow/`, and the daemon
/// started with the test venv's Snakemake on its PATH.
pub(super) fn with_slow_pipeline() -> Option<Fx> {
    let fx = Fx::new()?.with_venv_on_path();
    let (code, _, out) = fx.json(&["workflow", "add", example("1.2.0").to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let pipeline = fx.p("slow");
    std::fs::create_dir_all(&pipeline).unwrap();
    std::fs::write(pipeline.join("Snakefile"), SLOW_SNAKEFILE).unwrap();
    std::fs::write(pipeline.join("workflow.toml"), SLOW_WORKFLOW).unwrap();
    fx.start_daemon();
    Some(fx)
}

#[test]
fn long_calls_report_their_progress_to_a_caller_that_asks() {
    let Some(fx) = with_slow_pipeline() else { return };
    let pipeline = fx.p("slow");
    let client = fx.client();

    for over in [Over::Stdio, Over::Http] {
        let wb = client.over(over, "workbench");
        let w = wb.what.clone();
        let tag = if over == Over::Stdio { "stdio" } else { "http" };
        if over == Over::Stdio {
            wb.call_ok("add_workflow", json!({"path": pipeline}));
        }

        // The example's six steps.
        let plan = wb.call_ok(
            "plan_run",
            json!({"workflow": "release-validation", "input": ready_input(), "target": "local",
                   "run_dir": fx.p(&format!("steps-{tag}"))}),
        );
        let approve =
            json!({"plan_name": plan["plan_name"], "plan_id": plan["plan_id"], "plan_checksum": plan["plan_checksum"]});
        let answer = wb.call_seeing("execute_plan", approve, json!({"progress": true}));
        assert_eq!(answer["ok"]["structuredContent"]["status"], "READY", "{w}: {answer:#}");
        let messages = checked(&answer, 6.0, &w);
        assert_eq!(messages.last().map(String::as_str), Some("6 of 6 steps done"), "{w}: {messages:?}");

        // A pipeline of three jobs: its jobs as they finish.
        let plan = wb.call_ok(
            "plan_run",
            json!({"workflow": "slow-pipeline", "input": {}, "target": "local", "run_dir": fx.p(&format!("jobs-{tag}"))}),
        );
        let approve =
            json!({"plan_name": plan["plan_name"], "plan_id": plan["plan_id"], "plan_checksum": plan["plan_checksum"]});
        let answer = wb.call_seeing("execute_plan", approve, json!({"progress": true}));
        assert_eq!(answer["ok"]["structuredContent"]["status"], "READY", "{w}: {answer:#}");
        let messages = checked(&answer, 1.0, &w);
        // Snakemake counts its target rule `all` as a fourth job, done with the last: a second
        // apart, the first two are seen each on its own.
        for n in 1..=2 {
            let job = format!("pipeline: {n} of 4 pipeline jobs done");
            assert!(messages.iter().any(|m| m.contains(&job)), "{w}: `{job}` in {messages:#?}");
        }

        // A verification of three cells.
        let answer = wb.call_seeing(
            "verify_workflow",
            json!({"document": SLOW_DOC, "title": format!("slow-{tag}")}),
            json!({"progress": true}),
        );
        assert_eq!(answer["ok"]["structuredContent"]["verdict"], "passed", "{w}: {answer:#}");
        let messages = checked(&answer, 3.0, &w);
        assert!(messages.iter().any(|m| m.contains("1 of 3 cells done")), "{w}: {messages:#?}");

        // One that outlasts its `wait`: answered with its id while it goes on (its progress is
        // followed, and leaving it does not stop it), and poll_job follows it to its verdict.
        let answer = wb.call_seeing(
            "verify_workflow",
            json!({"document": SLOW_DOC, "title": format!("outlasts-{tag}"), "wait": 1}),
            json!({"progress": true}),
        );
        let running = &answer["ok"]["structuredContent"];
        assert_eq!(running["status"], "running", "{w}: {answer:#}");
        let id = running["verification_id"].as_str().unwrap_or_else(|| panic!("{w}: no id: {answer:#}"));
        let mut polled = Value::Null;
        assert!(
            wait_until(Duration::from_secs(60), || {
                polled = wb.call_ok("poll_job", json!({"job_id": id}));
                polled["status"] != "running"
            }),
            "{w}: never finished: {polled:#}"
        );
        assert_eq!(polled["status"], "passed", "{w}: it ran to its verdict after the answer: {polled:#}");

        // Without a progressToken, none.
        let plain = wb.call_seeing("list_runs", json!({}), json!({}));
        assert_eq!(plain["progress"], json!([]), "{w}: {plain:#}");
    }
}
