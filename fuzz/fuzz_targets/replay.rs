//! The replay planner over arbitrary DAGs, source runs and changes.
//!
//! The fuzzer's bytes drive a workflow (a random DAG whose steps pass input fields, upstream
//! results and declared outputs as arguments), a source run of it (each step completed with a
//! result and the signature it ran with, or failed, running, missing, or recorded under another
//! tool, digest or argument hash), and a replay of it (requested steps, a changed input, a changed
//! tool, damaged outputs, the same definition or another). The plan's partition is then checked:
//! every step is exactly one of reused, replayed as requested, or invalidated; requested steps
//! and all their descendants replay; a reused step's source completed with exactly the signature
//! the step has now (its arguments resolved again here, from the input and its reused ancestors'
//! results) and is not damaged; no descendant of an invalidated step is reused; and every reason
//! reads as words.
#![no_main]

use std::collections::{BTreeMap, HashMap};

use arbitrary::{Result, Unstructured};
use cairn_core::artifact::{Artifact, signed_output};
use cairn_core::dag::Dag;
use cairn_core::replay::{
    Damage, Decision, Found, InputDamage, OutputDamage, Reason, ReplayInput, SourceStep, normalise_requested, plan,
};
use cairn_core::signature::{StepSignature, args_hash, step_tool_digest};
use cairn_core::status::{Outcome, StepStatus};
use cairn_core::template::{self, Upstream};
use cairn_core::workflow::{StepDef, ToolDef, ToolKind, WorkflowSpec};
use cairn_fuzz::{json, text};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};

const WORDS: [&str; 6] = ["a", "0", "é", "x", "\u{1F600}", "ü"];

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});

fn tool(name: &str) -> ToolDef {
    ToolDef {
        name: name.into(),
        kind: ToolKind::Process,
        command: vec!["python3".into(), format!("tools/{name}.py")],
        timeout_secs: 30,
        version: None,
        env: vec![],
        secrets: vec![],
        outputs: BTreeMap::new(),
    }
}

fn spec(u: &mut Unstructured<'_>) -> Result<WorkflowSpec> {
    let n = u.int_in_range(1..=12)?;
    let mut steps: Vec<StepDef> = Vec::with_capacity(n);
    for i in 0..n {
        let needs: Vec<usize> = (0..i).filter(|_| u.ratio(1, 3).unwrap_or(false)).collect();
        let mut args = Map::new();
        args.insert("f".into(), Value::from(format!("${{input.f{i}}}")));
        for &d in &needs {
            let reference = match u.int_in_range(0..=3)? {
                0 => continue,
                1 if !steps[d].outputs.is_empty() => format!("${{steps.s{d}.outputs.report}}"),
                2 => format!("v${{steps.s{d}.result.k}}"),
                _ => format!("${{steps.s{d}.result}}"),
            };
            args.insert(format!("r{d}"), Value::from(reference));
        }
        let mut outputs = BTreeMap::new();
        if u.ratio(1, 4)? {
            outputs.insert("report".to_string(), "report.html".to_string());
        }
        steps.push(StepDef {
            id: format!("s{i}"),
            tool: (*u.choose(&["t", "u"])?).to_string(),
            args: Value::Object(args),
            needs: needs.iter().map(|d| format!("s{d}")).collect(),
            max_attempts: 2,
            retry_on: vec![Outcome::TimedOut.into()],
            outputs,
            line: i + 1,
        });
    }
    Ok(WorkflowSpec {
        name: "fuzzed".into(),
        version: "1.0.0".into(),
        description: String::new(),
        input_schema: None,
        tools: [("t".to_string(), tool("t")), ("u".to_string(), tool("u"))].into(),
        steps,
        rules: vec![],
    })
}

/// A step's arguments resolved as a run resolves them: against the input, the results of the
/// steps given, and their outputs signed as the digests of the files they recorded.
fn resolve(
    spec: &WorkflowSpec,
    dag: &Dag,
    i: usize,
    input: &Value,
    results: &HashMap<String, Value>,
    artifacts: &HashMap<String, Vec<Artifact>>,
) -> std::result::Result<Value, template::TemplateError> {
    let output = |dep: &str, name: &str| {
        let d = dag.index_of(dep)?;
        signed_output(&spec.outputs_of(&spec.steps[d]), dep, name, artifacts.get(dep)?)
    };
    template::resolve_with(&spec.steps[i].args, input, &Upstream { result: &|id| results.get(id), output: &output })
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let spec = spec(u)?;
    let dag = spec.dag().expect("an acyclic graph by construction");
    let n = dag.len();
    let digest = |name: &str| format!("digest-of-{name}");
    let source_digests: HashMap<String, String> = ["t", "u"].iter().map(|t| (t.to_string(), digest(t))).collect();
    let same_definition: bool = u.arbitrary()?;

    // The source run, step by step in order.
    let mut source_input = Map::new();
    for i in 0..n {
        if u.ratio(9, 10)? {
            source_input.insert(format!("f{i}"), json(u, &WORDS, 1)?);
        }
    }
    let source_input = Value::Object(source_input);
    let mut results: HashMap<String, Value> = HashMap::new();
    let mut artifacts: HashMap<String, Vec<Artifact>> = HashMap::new();
    let mut rows: HashMap<String, (StepStatus, StepSignature, Value)> = HashMap::new();
    for &i in dag.order() {
        let step = &spec.steps[i];
        if u.ratio(1, 12)? {
            continue; // No row for it.
        }
        let resolved = resolve(&spec, &dag, i, &source_input, &results, &artifacts);
        let (mut status, mut args) = match resolved {
            Ok(a) => (StepStatus::Completed, a),
            Err(_) => (StepStatus::Failed, Value::Null),
        };
        if status == StepStatus::Completed && u.ratio(1, 10)? {
            status = if u.arbitrary()? { StepStatus::Failed } else { StepStatus::Running };
        }
        let mut sig = StepSignature {
            tool: step.tool.clone(),
            tool_digest: step_tool_digest(&source_digests[&step.tool], &spec.outputs_of(step)),
            args_hash: args_hash(&args).unwrap_or_default(),
        };
        // Recorded under another signature: only for another definition than the one replayed.
        if !same_definition {
            match u.int_in_range(0..=9)? {
                0 => sig.tool = "other".into(),
                1 => sig.tool_digest = text(u, &WORDS, 16)?,
                2 => {
                    // Other arguments, recorded with their own hash (a row is never inconsistent).
                    args = serde_json::json!({"other": json(u, &WORDS, 1)?});
                    sig.args_hash = args_hash(&args).unwrap_or_default();
                }
                _ => {}
            }
        }
        if status == StepStatus::Completed {
            results.insert(step.id.clone(), json(u, &["k", "a", "é"], 2)?);
            if !step.outputs.is_empty() {
                let sha = if u.arbitrary()? { "ab".repeat(32) } else { "cd".repeat(32) };
                artifacts.insert(
                    step.id.clone(),
                    vec![Artifact {
                        name: "report".into(),
                        path: format!("steps/{}/report.html", step.id),
                        bytes: 3,
                        sha256: sha,
                        link: None,
                    }],
                );
            }
        }
        rows.insert(step.id.clone(), (status, sig, args));
    }
    let source: HashMap<String, SourceStep<'_>> = rows
        .iter()
        .map(|(id, (status, sig, args))| {
            let step = SourceStep {
                status: *status,
                signature: sig,
                args,
                result: results.get(id),
                artifacts: artifacts.get(id).map_or(&[], Vec::as_slice),
            };
            (id.clone(), step)
        })
        .collect();

    // The replay: a changed input, a changed tool, damage, requested steps.
    let mut input = source_input.clone();
    if u.ratio(1, 3)? {
        let i = u.int_in_range(0..=n - 1)?;
        input[format!("f{i}")] = json(u, &WORDS, 1)?;
    }
    let mut tool_digests = source_digests.clone();
    if !same_definition && u.ratio(1, 5)? {
        tool_digests.insert("u".into(), text(u, &WORDS, 8)?);
    }
    let mut damaged: HashMap<String, Damage> = HashMap::new();
    for _ in 0..u.int_in_range(0..=2)? {
        let i = u.int_in_range(0..=n - 1)?;
        let found = match u.int_in_range(0..=2)? {
            0 => Found::Changed { sha256: text(u, &WORDS, 16)? },
            1 => Found::Missing,
            _ => Found::Unreachable { why: text(u, &WORDS, 4)? },
        };
        let damage = if u.arbitrary()? {
            Damage::Output(OutputDamage {
                output: "report".into(),
                path: "p".into(),
                recorded: text(u, &WORDS, 16)?,
                found,
            })
        } else {
            Damage::Input(InputDamage { path: "/data/x".into(), recorded: text(u, &WORDS, 16)?, found })
        };
        damaged.insert(format!("s{i}"), damage);
    }
    let asked: Vec<String> =
        (0..u.int_in_range(0..=3)?).map(|_| Ok(format!("s{}", u.int_in_range(0..=n + 1)?))).collect::<Result<_>>()?;
    let requested = match normalise_requested(&dag, &asked) {
        Ok(r) => r,
        Err(unknown) => {
            assert!(!unknown.is_empty() && unknown.iter().all(|id| dag.index_of(id).is_none()));
            return Ok(());
        }
    };
    let p = plan(&ReplayInput {
        spec: &spec,
        dag: &dag,
        tool_digests: &tool_digests,
        input: &input,
        source_input: &source_input,
        same_definition,
        source_run_id: "src",
        source: &source,
        requested: &requested,
        explain_tool: &|t| vec![format!("tool `{t}` changed")],
        damaged: &damaged,
    });

    // Every step decided once, in the DAG's order.
    let order: Vec<&str> = dag.order().iter().map(|&i| dag.id(i)).collect();
    let decided: Vec<&str> = p.decisions.iter().map(|d| d.step_id.as_str()).collect();
    assert_eq!(decided, order);
    let summary = p.summary(&dag);
    let forced = dag.descendants_closure(requested.iter().filter_map(|r| dag.index_of(r)));
    let mut reused_results: HashMap<String, Value> = HashMap::new();
    let mut reused_artifacts: HashMap<String, Vec<Artifact>> = HashMap::new();
    for &i in dag.order() {
        let id = dag.id(i);
        let d = p.decision(id).expect("decided");
        assert!(!d.reason.text().is_empty());
        let reused = d.decision == Decision::Reuse;
        let as_requested = matches!(d.reason, Reason::Requested | Reason::DescendantOfRequested { .. });
        let invalidated = d.is_invalidated();
        // Exactly one of the three.
        assert_eq!(u8::from(reused) + u8::from(as_requested) + u8::from(invalidated), 1, "{d:?}");
        assert_eq!(summary.reused.iter().any(|r| r == id), reused);
        assert_eq!(summary.replayed.iter().any(|r| r == id), !reused);
        assert_eq!(summary.invalidated.iter().any(|r| r == id), invalidated);
        // Requested steps and all their descendants replay, as requested.
        assert_eq!(forced[i], as_requested, "{id}: {d:?}");
        assert_eq!(matches!(d.reason, Reason::Requested), requested.iter().any(|r| r == id));
        if invalidated {
            for &c in dag.children(i) {
                assert_ne!(
                    p.decision(dag.id(c)).map(|x| x.decision),
                    Some(Decision::Reuse),
                    "{} below {id}",
                    dag.id(c)
                );
            }
        }
        if reused {
            let (status, sig, _) = &rows[id];
            assert_eq!(*status, StepStatus::Completed);
            assert!(!damaged.contains_key(id));
            for &parent in dag.needs(i) {
                let pd = p.decision(dag.id(parent)).map(|x| x.decision);
                assert_eq!(pd, Some(Decision::Reuse), "{id} reused below a replayed {}", dag.id(parent));
            }
            let step = &spec.steps[i];
            let want = StepSignature {
                tool: step.tool.clone(),
                tool_digest: step_tool_digest(&tool_digests[&step.tool], &spec.outputs_of(step)),
                args_hash: resolve(&spec, &dag, i, &input, &reused_results, &reused_artifacts)
                    .ok()
                    .and_then(|a| args_hash(&a).ok())
                    .unwrap_or_default(),
            };
            assert_eq!(sig, &want, "{id} was reused with another signature");
            if let Some(r) = results.get(id) {
                reused_results.insert(id.to_string(), r.clone());
            }
            if let Some(a) = artifacts.get(id) {
                reused_artifacts.insert(id.to_string(), a.clone());
            }
        }
    }
    Ok(())
}
