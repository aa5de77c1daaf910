//! The crate metadata of a 1,000-step run with 1,000 artifacts, built and serialised (the part of
//! `cairn export --no-data` that grows with the run; the store reads and file writes are not in
//! it). Target (issue 19): the whole export under 1 s without data. Run with
//! `cargo bench -p cairn-core --bench rocrate`.

use std::time::Instant;

use cairn_core::artifact::{Artifact, ArtifactRecord};
use cairn_core::ids::RunId;
use cairn_core::rocrate::{CrateAttempt, CrateFile, CrateRun, CrateStep, crate_metadata};
use cairn_core::signature::StepSignature;
use cairn_core::status::{Outcome, RunStatus, StepStatus};
use cairn_core::store::{RunRecord, StepRecord};
use cairn_core::workflow::parse_workflow;
use serde_json::json;

fn main() {
    let n = 1000;
    let mut text = String::from("[workflow]\nname = \"bench\"\nversion = \"1.0.0\"\n[tools.t]\ncommand = [\"t\"]\n");
    for i in 0..n {
        let needs = if i > 0 { format!("\"s{}\"", i - 1) } else { String::new() };
        text.push_str(&format!("[[steps]]\nid = \"s{i}\"\ntool = \"t\"\nneeds = [{needs}]\nargs = {{ i = {i} }}\n"));
    }
    let spec = parse_workflow(&text, "bench.toml").expect("generated workflow parses");
    let sha = "ab".repeat(32);
    let file = |id: &str| CrateFile { id: id.to_string(), bytes: 10, sha256: sha.clone() };
    let run = RunRecord {
        run_id: RunId::lookup("bench"),
        workflow: "bench".into(),
        version: "1.0.0".into(),
        identity_hash: sha.clone(),
        input: json!({}),
        status: RunStatus::Ready,
        revision: 1,
        run_dir: "/runs/bench".into(),
        created_at: 1_700_000_000_000,
        updated_at: 1_700_000_001_000,
        finished_at: Some(1_700_000_001_000),
        findings: vec![],
        error: None,
        source_run_id: None,
        replay: None,
        owner: None,
        thread_id: None,
        plan_id: None,
        parallelism: 1,
        submitted_by: None,
        cancelled_by: None,
        held_since: None,
    };
    let steps: Vec<CrateStep> = (0..n)
        .map(|i| {
            let step_id = format!("s{i}");
            let path = format!("steps/{step_id}/out.txt");
            CrateStep {
                tool: "t".into(),
                record: Some(StepRecord {
                    run_id: RunId::lookup("bench"),
                    step_id: step_id.clone(),
                    status: StepStatus::Completed,
                    signature: StepSignature { tool: "t".into(), tool_digest: sha.clone(), args_hash: sha.clone() },
                    args: json!({"i": i}),
                    attempt_count: 1,
                    interrupted_count: 0,
                    attempt_token: None,
                    outcome: Some(Outcome::Completed),
                    result: Some(json!({})),
                    error: None,
                    cause: None,
                    log_tail: None,
                    process: None,
                    started_at: 1_700_000_000_000 + i as i64,
                    finished_at: Some(1_700_000_000_001 + i as i64),
                    duration_us: Some(1000),
                    reused_from: None,
                }),
                artifacts: vec![(
                    ArtifactRecord {
                        run_id: RunId::lookup("bench"),
                        step_id: step_id.clone(),
                        attempt: 1,
                        artifact: Artifact {
                            name: "out".into(),
                            path: path.clone(),
                            bytes: 10,
                            sha256: sha.clone(),
                            link: None,
                        },
                        reused_from: None,
                        recorded_at: 0,
                    },
                    path,
                )],
                producer: None,
                attempts: vec![CrateAttempt {
                    number: 1,
                    started_ms: 1_700_000_000_000,
                    ended_ms: Some(1_700_000_000_001),
                    outcome: Some(Outcome::Completed),
                    error: None,
                    args_hash: sha.clone(),
                }],
                agent: None,
                input_files: vec![],
                jobs: Vec::new(),
                links: Vec::new(),
                step_id,
            }
        })
        .collect();
    let c = CrateRun {
        approval: None,
        run,
        spec,
        workflow_files: vec![file("workflow/workflow.toml")],
        input: file("input.json"),
        input_files: vec![],
        validation: file("validation.json"),
        steps,
        targets: vec![],
        lineage: vec![],
        target: "local".into(),
        cairn_version: "bench".into(),
        published_ms: 1_700_000_002_000,
    };
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let text = serde_json::to_vec_pretty(&crate_metadata(&c)).expect("serialises");
        best = best.min(t.elapsed().as_secs_f64());
        assert!(text.len() > 100_000);
    }
    println!(
        "rocrate: metadata of {n} steps and {n} artifacts built and serialised in {:.1} ms (best of 5)",
        best * 1000.0
    );
}
