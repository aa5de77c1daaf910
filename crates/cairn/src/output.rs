//! What commands print: the JSON objects of the CLI contract and their human renderings.

use cairn_core::replay::Decision;
use cairn_core::store::{EventRecord, RunRecord, StoreError, WorkflowRecord};
use cairn_engine::registry::LoadedWorkflow;
use cairn_engine::replay::PreparedReplay;
use cairn_engine::runner::RunReport;
use serde_json::{Value, json};

use crate::wire;

pub fn print_json(v: &Value) {
    use std::io::Write;
    // Serialising a Value cannot fail; a closed stdout (`| head`) is not an error worth a panic.
    let text = serde_json::to_string_pretty(v).unwrap_or_default();
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

pub use crate::wire::time;

fn to_value<T: serde::Serialize>(v: &T) -> Value {
    // Our wire types hold only strings, numbers and JSON values: serialising them cannot fail.
    serde_json::to_value(v).unwrap_or(Value::Null)
}

pub fn run_json(report: &RunReport) -> Value {
    to_value(&wire::RunResult::from_report(report))
}

pub fn runs_json(store: &dyn cairn_core::store::RunStore, runs: &[RunRecord]) -> Result<Value, StoreError> {
    Ok(to_value(&wire::RunList::from_records(store, runs)?))
}

pub fn events_json(run_id: &str, events: &[EventRecord]) -> Value {
    to_value(&wire::EventList::from_records(run_id, events))
}

pub fn workflow_added_json(r: &WorkflowRecord, newly: bool) -> Value {
    json!({"name": r.name, "version": r.version, "digest": r.digest, "registered": newly, "steps": r.spec.steps.len()})
}

pub fn workflows_json(all: &[WorkflowRecord]) -> Value {
    to_value(&wire::WorkflowList::from_records(all))
}

pub fn workflow_json(wf: &LoadedWorkflow) -> Value {
    let spec = wf.spec();
    json!({
        "name": spec.name,
        "version": spec.version,
        "description": spec.description,
        "digest": wf.record.digest,
        "input_schema": spec.input_schema,
        "order": wf.dag.order().iter().map(|&i| wf.dag.id(i)).collect::<Vec<_>>(),
        "steps": spec.steps.iter().map(|s| json!({
            "id": s.id, "tool": s.tool, "needs": s.needs, "args": s.args,
            "max_attempts": s.max_attempts, "retry_on": s.retry_on,
        })).collect::<Vec<_>>(),
        "tools": wf.tools.iter().map(|(name, t)| {
            let def = &spec.tools[name];
            json!({"name": name, "command": def.command, "timeout_secs": def.timeout_secs, "version": def.version,
                   "env": def.env, "digest": t.digest, "files": t.files})
        }).collect::<Vec<_>>(),
        "rules": spec.rules,
    })
}

fn duration(us: Option<i64>) -> String {
    match us {
        None => "-".into(),
        Some(us) if us < 1_000_000 => format!("{} ms", us / 1000),
        Some(us) => format!("{:.1} s", us as f64 / 1e6),
    }
}

pub fn print_run(report: &RunReport, detail: bool) {
    let run = &report.run;
    println!("run {}  {}@{}", run.run_id, run.workflow, run.version);
    println!("  {:<28} {:<10} {:>8}  {:>9}", "STEP", "STATUS", "ATTEMPTS", "DURATION");
    for s in &report.steps {
        let r = s.record.as_ref();
        let mut line = format!(
            "  {:<28} {:<10} {:>8}  {:>9}",
            s.step_id,
            s.status(),
            r.map(|r| r.attempt_count).unwrap_or(0),
            duration(r.and_then(|r| r.duration_us))
        );
        if let Some(d) = wire::decision_of(report, &s.step_id) {
            line.push_str(&format!("  {}", d["text"].as_str().unwrap_or("")));
        } else if let Some(from) = r.and_then(|r| r.reused_from.as_ref()) {
            line.push_str(&format!("  reused from {from}"));
        }
        println!("{line}");
        if let Some(err) = r.and_then(|r| r.error.as_ref())
            && (detail || r.is_some_and(|r| r.status == cairn_core::status::StepStatus::Failed))
        {
            println!("      {err}");
        }
        if detail && let Some(tail) = r.and_then(|r| r.log_tail.as_ref()) {
            for l in tail.lines().rev().take(5).collect::<Vec<_>>().into_iter().rev() {
                println!("      | {l}");
            }
        }
    }
    match run.status {
        cairn_core::status::RunStatus::Blocked => {
            println!("BLOCKED: {} finding(s)", run.findings.len());
            for f in &run.findings {
                let observed = f.observed.as_ref().map(|o| format!(" (observed {o})")).unwrap_or_default();
                println!("  - {}: {} [{} {}]{observed}", f.rule, f.finding, f.step, f.pointer);
            }
        }
        status => {
            print!("{status}");
            if status == cairn_core::status::RunStatus::Ready {
                print!(": every validator rule holds");
            }
            println!();
        }
    }
    if let Some(e) = &run.error {
        println!("  error: {e}");
    }
    if detail {
        println!(
            "  created {}  finished {}",
            time(run.created_at),
            run.finished_at.map(time).unwrap_or_else(|| "-".into())
        );
        println!("  run dir {}", run.run_dir);
    }
}

pub fn print_runs(runs: &[RunRecord]) {
    if runs.is_empty() {
        eprintln!("no runs yet; start one with `cairn run NAME --input FILE`");
        return;
    }
    println!("{:<40} {:<10} {:<32} {:<24}", "RUN", "STATUS", "WORKFLOW", "CREATED");
    for r in runs {
        println!(
            "{:<40} {:<10} {:<32} {:<24}",
            r.run_id,
            r.status.as_str(),
            format!("{}@{}", r.workflow, r.version),
            time(r.created_at)
        );
    }
}

pub fn print_events(events: &[EventRecord]) {
    for e in events {
        let step = e.step_id.as_deref().unwrap_or("-");
        let attempt = e.attempt.map(|a| a.to_string()).unwrap_or_else(|| "-".into());
        println!("{:>5}  {}  {:<26} {:<24} {:>3}  {}", e.seq, time(e.at), e.kind, step, attempt, e.data);
    }
}

pub fn print_workflow(wf: &LoadedWorkflow) {
    let spec = wf.spec();
    println!("{}  digest {}", spec.reference(), &wf.record.digest[..16]);
    if !spec.description.is_empty() {
        println!("  {}", spec.description);
    }
    println!("  steps (in execution order):");
    for &i in wf.dag.order() {
        let s = &spec.steps[i];
        let needs = if s.needs.is_empty() { String::new() } else { format!("  needs {}", s.needs.join(", ")) };
        println!("    {:<28} tool {}{needs}", s.id, s.tool);
    }
    println!("  tools:");
    for (name, t) in &wf.tools {
        println!("    {:<28} {}  digest {}", name, spec.tools[name].command.join(" "), &t.digest[..16]);
    }
    if !spec.rules.is_empty() {
        println!("  validator rules:");
        for r in &spec.rules {
            println!(
                "    {:<28} {} {} {:?} {}",
                r.id,
                r.step,
                r.pointer,
                r.op,
                r.value.as_ref().map(|v| v.to_string()).unwrap_or_default()
            );
        }
    }
}

pub fn lineage_json(chain: &[RunRecord]) -> Value {
    Value::Array(
        chain
            .iter()
            .map(|r| json!({"run_id": r.run_id, "workflow": r.workflow, "version": r.version, "status": r.status}))
            .collect(),
    )
}

pub fn print_lineage(run: &RunRecord, chain: &[RunRecord]) {
    if let Some(replay) = &run.replay {
        let list = |k: &str| {
            replay[k]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "))
                .unwrap_or_default()
        };
        println!("  replay of {}: requested [{}]", replay["source_run_id"].as_str().unwrap_or("?"), list("requested"));
        println!(
            "    replayed [{}]  reused [{}]  invalidated [{}]",
            list("replayed"),
            list("reused"),
            list("invalidated")
        );
    }
    if !chain.is_empty() {
        let ids: Vec<String> = chain.iter().map(|r| format!("{} ({})", r.run_id, r.status)).collect();
        println!("  lineage: {} <- {}", run.run_id, ids.join(" <- "));
    }
}

fn decisions_json(p: &PreparedReplay) -> Value {
    Value::Array(
        p.plan
            .decisions
            .iter()
            .map(|d| json!({"step_id": d.step_id, "decision": d.decision, "reason": d.reason, "text": d.reason.text()}))
            .collect(),
    )
}

pub fn dry_run_json(p: &PreparedReplay) -> Value {
    json!({
        "dry_run": true,
        "source_run_id": p.source.run_id,
        "workflow": p.workflow.spec().name,
        "version": p.workflow.spec().version,
        "replay": p.summary,
        "decisions": decisions_json(p),
    })
}

pub fn print_dry_run(p: &PreparedReplay) {
    println!("replay of {} ({}) — dry run, nothing created", p.source.run_id, p.workflow.spec().reference());
    for d in &p.plan.decisions {
        let what = match d.decision {
            Decision::Reuse => "REUSE",
            Decision::Replay => "RUN",
        };
        println!("  {:<28} {:<6} {}", d.step_id, what, d.reason.text());
    }
    let s = &p.summary;
    println!("replayed {}, reused {}, invalidated {}", s.replayed.len(), s.reused.len(), s.invalidated.len());
}

/// Why a step of a run was executed, reused or invalidated; `None` for an unknown step.
pub fn explain(report: &RunReport, step_id: &str) -> Option<Value> {
    let view = report.steps.iter().find(|s| s.step_id == step_id)?;
    let r = view.record.as_ref();
    let (decision, reason, text) = match wire::decision_of(report, step_id) {
        Some(d) => (d["decision"].clone(), d["reason"].clone(), d["text"].clone()),
        None => (
            json!("execute"),
            json!({"kind": "not_a_replay"}),
            json!(match r {
                Some(_) => "executed in this run (it is not a replay, so nothing was reused)",
                None => "not started yet",
            }),
        ),
    };
    Some(json!({
        "run_id": report.run.run_id,
        "step_id": step_id,
        "status": view.status(),
        "attempts": r.map(|r| r.attempt_count).unwrap_or(0),
        "decision": decision,
        "reason": reason,
        "text": text,
        "reused_from": r.and_then(|r| r.reused_from.clone()),
        "signature": r.map(|r| json!(r.signature)),
        "outcome": r.and_then(|r| r.outcome),
        "error": r.and_then(|r| r.error.clone()),
    }))
}

pub fn print_explain(v: &Value) {
    println!(
        "{} / {}: {}",
        v["run_id"].as_str().unwrap_or(""),
        v["step_id"].as_str().unwrap_or(""),
        v["text"].as_str().unwrap_or("")
    );
    println!("  status {}  attempts {}", v["status"].as_str().unwrap_or(""), v["attempts"]);
    if let Some(sig) = v["signature"].as_object() {
        for k in ["tool", "tool_digest", "args_hash"] {
            println!("  {k:<12} {}", sig.get(k).and_then(Value::as_str).unwrap_or(""));
        }
    }
    if let Some(e) = v["error"].as_str() {
        println!("  error: {e}");
    }
}
