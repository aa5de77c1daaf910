//! Replay planning for a 100,000-step DAG: the decision for every step, excluding execution.
//! Target (issue 3): under 200 ms. Run with `cargo bench -p cairn-core --bench replay`.

use std::collections::HashMap;
use std::time::Instant;

#[path = "support/allocator.rs"]
mod allocator;

#[global_allocator]
static ALLOCATOR: allocator::Allocator = allocator::Allocator;

use cairn_core::replay::{ReplayInput, SourceStep, normalise_requested, plan};
use cairn_core::signature::{StepSignature, args_hash};
use cairn_core::status::StepStatus;
use cairn_core::template;
use cairn_core::workflow::parse_workflow;
use serde_json::{Value, json};

fn workflow(n: usize) -> String {
    let mut text = String::from("[workflow]\nname = \"bench\"\nversion = \"1.0.0\"\n[tools.t]\ncommand = [\"t\"]\n");
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..n {
        let mut needs = Vec::new();
        if i > 0 {
            for _ in 0..3 {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let back = 1 + (seed >> 33) as usize % 50.min(i);
                let d = i - back;
                if !needs.contains(&d) {
                    needs.push(d);
                }
            }
        }
        let list: Vec<String> = needs.iter().map(|d| format!("\"s{d}\"")).collect();
        let mut args = vec![format!("f = \"${{input.f{}}}\"", i % 100)];
        args.extend(needs.iter().map(|d| format!("r{d} = \"${{steps.s{d}.result.v}}\"")));
        text.push_str(&format!(
            "[[steps]]\nid = \"s{i}\"\ntool = \"t\"\nneeds = [{}]\nargs = {{ {} }}\n",
            list.join(", "),
            args.join(", ")
        ));
    }
    text
}

fn main() {
    let n = 100_000;
    let spec = parse_workflow(&workflow(n), "bench.toml").expect("generated workflow parses");
    let dag = spec.dag().expect("acyclic");
    let input = Value::Object((0..100).map(|i| (format!("f{i}"), json!(i))).collect());
    // The source run: every step completed, result {"v": index}.
    let mut results: HashMap<String, Value> = HashMap::new();
    let mut rows: Vec<(String, StepSignature, Value)> = Vec::with_capacity(n);
    for &i in dag.order() {
        let step = &spec.steps[i];
        let args = template::resolve(&step.args, &input, &|d| results.get(d)).expect("resolves");
        let sig =
            StepSignature { tool: "t".into(), tool_digest: "d".into(), args_hash: args_hash(&args).expect("hash") };
        results.insert(step.id.clone(), json!({"v": i}));
        rows.push((step.id.clone(), sig, args));
    }
    let source: HashMap<String, SourceStep> = rows
        .iter()
        .map(|(id, sig, args)| {
            (
                id.clone(),
                SourceStep {
                    status: StepStatus::Completed,
                    signature: sig,
                    args,
                    result: results.get(id),
                    artifacts: &[],
                },
            )
        })
        .collect();
    let digests: HashMap<String, String> = [("t".to_string(), "d".to_string())].into();
    let damaged = HashMap::new();
    let mut changed_input = input.clone();
    changed_input["f7"] = json!("changed");

    println!(
        "replay planning, {n}-step random DAG (each step needs up to 3 of the 50 before it); {}",
        allocator::name()
    );
    println!("{:<44} {:>10} {:>10} {:>10}", "case", "median ms", "replayed", "reused");
    for (name, requested, inp) in [
        ("request one step near the end, same input", vec![format!("s{}", n - 10)], &input),
        ("request one step in the middle, same input", vec![format!("s{}", n / 2)], &input),
        ("request nothing new, one input field changed", vec![format!("s{}", n - 1)], &changed_input),
    ] {
        let req = normalise_requested(&dag, &requested).expect("known steps");
        let mut times = Vec::new();
        let mut last = None;
        for _ in 0..5 {
            let t = Instant::now();
            let p = plan(&ReplayInput {
                spec: &spec,
                dag: &dag,
                tool_digests: &digests,
                input: inp,
                source_input: &input,
                same_definition: true,
                source_run_id: "src",
                source: &source,
                requested: &req,
                explain_tool: &|_| vec![],
                damaged: &damaged,
            });
            times.push(t.elapsed().as_secs_f64() * 1000.0);
            last = Some(p);
        }
        times.sort_by(|a, b| a.total_cmp(b));
        let s = last.map(|p| p.summary(&dag)).expect("ran");
        println!("{name:<44} {:>10.1} {:>10} {:>10}", times[2], s.replayed.len(), s.reused.len());
    }
}
