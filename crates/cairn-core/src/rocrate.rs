//! The RO-Crate of a run: a pure function from the run's records (its steps, attempts, artifacts,
//! workflow files, validator findings and replay lineage) to the `ro-crate-metadata.json` value
//! of a Provenance Run Crate 0.5 (with the Process and Workflow Run Crate profiles it builds on,
//! and Workflow RO-Crate 1.0), RO-Crate 1.1. Which files are copied is the engine's concern; this
//! only names them.

use serde_json::{Value, json};

use std::collections::{BTreeMap, BTreeSet};

use crate::artifact::ArtifactRecord;
use crate::event::RunEvent;
use crate::replay::DecisionRecord;
use crate::status::{Outcome, RunStatus};
use crate::store::{EventRecord, RunRecord, StepRecord, VerificationRecord};
use crate::time::rfc3339;
use crate::workflow::WorkflowSpec;

/// The crate's file of the run's input, and of the validator's verdict and findings.
pub const INPUT_FILE: &str = "input.json";
pub const VALIDATION_FILE: &str = "validation.json";
/// Where the workflow folder's files go inside the crate.
pub const WORKFLOW_DIR: &str = "workflow";
/// Where copied input files go inside the crate (each under its absolute path, less the `/`).
pub const INPUTS_DIR: &str = "inputs";
/// Where the targets' observed facts go inside the crate (`<name>.json`).
pub const TARGETS_DIR: &str = "targets";

/// One file of the crate (or, without data, referenced by its id only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrateFile {
    /// The file's `@id`: a path relative to the crate root (or a `file://` URI without data).
    pub id: String,
    pub bytes: u64,
    pub sha256: String,
}

/// One step of the run, in execution order.
#[derive(Debug, Clone)]
pub struct CrateStep {
    pub step_id: String,
    pub tool: String,
    /// `None` when the step never started.
    pub record: Option<StepRecord>,
    /// Its artifacts with the `@id` each has in the crate.
    pub artifacts: Vec<(ArtifactRecord, String)>,
    /// For a reused step: the run whose attempt really executed it (following the lineage past
    /// the runs that reused it too) and that attempt's number.
    pub producer: Option<(String, u32)>,
    /// The attempts this run executed, from its events (empty for a reused step).
    pub attempts: Vec<CrateAttempt>,
    /// The target whose agent executed its attempts (the producer's, for a reused step), when
    /// that is a configured target rather than this machine.
    pub agent: Option<String>,
    /// The `@id`s of the input files it recorded reading (a pipeline's bound inputs).
    pub input_files: Vec<String>,
    /// A pipeline step's jobs (`crate::job`): each one it ran is an action of its own.
    pub jobs: Vec<crate::job::Job>,
    /// The symlinks among its outputs (path, target): recorded as links, never followed, so they
    /// are named in its action's description rather than carried as files.
    pub links: Vec<(String, String)>,
}

/// A file the run read from outside its run directory: named in the input (hashed when planned)
/// or bound by a step (hashed when it read it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrateInputFile {
    /// Its `@id`: under [`INPUTS_DIR`] when copied into the crate, else a `file://` URI.
    pub id: String,
    /// Its absolute path where the run read it.
    pub path: String,
    /// As recorded by the run.
    pub sha256: String,
    /// Its size, where it could be read at export (and still had the recorded bytes).
    pub bytes: Option<u64>,
    /// What the export found, when it is not what the run recorded (changed, gone, unreadable),
    /// or how its hash was taken.
    pub note: Option<String>,
}

/// A configured target that executed attempts: the agent of those attempts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrateTarget {
    pub name: String,
    /// `user@host:port`.
    pub address: String,
    /// `ssh` or `slurm`.
    pub executor: String,
    pub workspace_root: String,
    /// The facts observed there (the plan's readiness check, else the last probe), as a file of
    /// the crate.
    pub facts: Option<CrateFile>,
}

/// One executed attempt of a step, as the run's events tell it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrateAttempt {
    pub number: u32,
    pub started_ms: i64,
    pub ended_ms: Option<i64>,
    /// `None` while it runs (or when it was abandoned by a crash).
    pub outcome: Option<Outcome>,
    pub error: Option<String>,
    pub args_hash: String,
}

/// Each step's executed attempts, in order, from a run's event log.
pub fn attempts_from_events(events: &[EventRecord]) -> BTreeMap<String, Vec<CrateAttempt>> {
    let mut out: BTreeMap<String, Vec<CrateAttempt>> = BTreeMap::new();
    for e in events {
        let (Some(step), Some(number)) = (&e.step_id, e.attempt) else { continue };
        let list = out.entry(step.clone()).or_default();
        if let RunEvent::StepStarted { args_hash, .. } = &e.event {
            list.push(CrateAttempt {
                number,
                started_ms: e.at,
                ended_ms: None,
                outcome: None,
                error: None,
                args_hash: args_hash.clone(),
            });
            continue;
        }
        let Some(a) = list.iter_mut().rev().find(|a| a.number == number) else { continue };
        match &e.event {
            RunEvent::StepCompleted { .. } => {
                a.ended_ms = Some(e.at);
                a.outcome = Some(Outcome::Completed);
            }
            RunEvent::StepRetrying { outcome, error, .. } | RunEvent::StepFailed { outcome, error, .. } => {
                a.ended_ms = Some(e.at);
                a.outcome = Some(*outcome);
                a.error = error.clone();
            }
            RunEvent::StepInterrupted { .. } | RunEvent::StepCancelled { .. } => a.ended_ms = Some(e.at),
            _ => {}
        }
    }
    out.retain(|_, v| !v.is_empty());
    out
}

/// Everything the crate says about a run.
#[derive(Debug, Clone)]
pub struct CrateRun {
    pub run: RunRecord,
    pub spec: WorkflowSpec,
    /// The workflow folder's files (ids under [`WORKFLOW_DIR`]), `workflow.toml` among them.
    pub workflow_files: Vec<CrateFile>,
    pub input: CrateFile,
    /// The files the run read from outside its run directory.
    pub input_files: Vec<CrateInputFile>,
    pub validation: CrateFile,
    pub steps: Vec<CrateStep>,
    /// The configured targets that executed attempts, by name.
    pub targets: Vec<CrateTarget>,
    /// The source runs above it, nearest first.
    pub lineage: Vec<RunRecord>,
    /// Where it executed: `local` or a target's name.
    pub target: String,
    /// How, when and by whom its plan was approved; `None` for a run submitted without a plan.
    pub approval: Option<crate::plan::Approval>,
    pub cairn_version: String,
    /// When the crate is made (milliseconds since the epoch), as `datePublished`.
    pub published_ms: i64,
}

pub const PROCESS_RUN_CRATE: &str = "https://w3id.org/ro/wfrun/process/0.5";
pub const WORKFLOW_RUN_CRATE: &str = "https://w3id.org/ro/wfrun/workflow/0.5";
pub const PROVENANCE_RUN_CRATE: &str = "https://w3id.org/ro/wfrun/provenance/0.5";
pub const WORKFLOW_RO_CRATE: &str = "https://w3id.org/workflowhub/workflow-ro-crate/1.0";
pub const RO_CRATE_1_1: &str = "https://w3id.org/ro/crate/1.1";

/// The `@id` of a file at a relative path of the crate: the path as a URI reference, every byte
/// but the unreserved ones and `/` percent-encoded (RO-Crate 1.1 data entity ids are URIs).
pub fn path_id(rel: &str) -> String {
    let mut out = String::with_capacity(rel.len());
    for b in rel.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn id(s: &str) -> Value {
    json!({ "@id": s })
}

fn ids<'a>(it: impl IntoIterator<Item = &'a str>) -> Value {
    Value::Array(it.into_iter().map(id).collect())
}

fn tool_id(tool: &str) -> String {
    format!("#tool-{tool}")
}

fn target_id(name: &str) -> String {
    format!("#target-{name}")
}

fn step_id(step: &str) -> String {
    format!("#step-{step}")
}

/// The `@id` of the action of the attempt of `run_id` that produced a step's evidence.
pub fn attempt_action_id(run_id: &str, step: &str, attempt: u32) -> String {
    format!("#run-{run_id}-step-{step}-attempt-{attempt}")
}

/// A pipeline job's action: `#run-<run>-step-<step>-job-<attempt>.<job>`.
pub fn job_action_id(run_id: &str, step: &str, job: crate::job::JobRef) -> String {
    format!("#run-{run_id}-step-{step}-job-{job}")
}

/// One `CreateAction` per job a pipeline step ran (as Snakemake's own RO-Crate reporter writes
/// them): its rule and wildcards, its `object` the step's files among its inputs, its `result`
/// those it wrote (an output, or a file below an output folder), its times and status. A job a
/// replay carried over is the earlier run's action, not repeated here.
fn job_actions(run_id: &str, s: &CrateStep, graph: &mut Vec<Value>, actions: &mut Vec<String>) {
    use crate::job::JobStatus;
    let file_of = |path: &str| s.artifacts.iter().find(|(a, _)| a.artifact.name == path).map(|(_, i)| i.as_str());
    let wrote = |job: &crate::job::Job, name: &str| {
        job.outputs.iter().any(|o| {
            let o = o.trim_end_matches('/');
            name == o || name.strip_prefix(o).is_some_and(|rest| rest.starts_with('/'))
        })
    };
    for job in s.jobs.iter().filter(|j| j.status != JobStatus::Carried) {
        let action = job_action_id(run_id, &s.step_id, job.id);
        let wildcards: Vec<String> = job.wildcards.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let name = if wildcards.is_empty() {
            format!("Job {} of rule {} in step {}", job.id, job.rule, s.step_id)
        } else {
            format!("Job {} of rule {} ({}) in step {}", job.id, job.rule, wildcards.join(", "), s.step_id)
        };
        let ok = match job.status {
            JobStatus::Finished => Some(true),
            JobStatus::Failed | JobStatus::Interrupted => Some(false),
            _ => None,
        };
        let mut a = json!({
            "@id": action, "@type": "CreateAction",
            "name": name,
            "instrument": id(&tool_id(&s.tool)),
            "object": ids(job.inputs.iter().filter_map(|i| file_of(&i.path))),
            "result": ids(s.artifacts.iter().filter(|(a, _)| wrote(job, &a.artifact.name)).map(|(_, i)| i.as_str())),
            "startTime": rfc3339(job.started_at),
            "actionStatus": action_status(ok),
        });
        if let Some(end) = job.ended_at {
            a["endTime"] = json!(rfc3339(end));
        }
        if let Some(reason) = &job.reason {
            a["description"] = json!(reason);
        }
        graph.push(a);
        actions.push(action);
    }
}

fn file_entity(f: &CrateFile, name: &str) -> Value {
    json!({
        "@id": f.id, "@type": "File", "name": name,
        "contentSize": f.bytes.to_string(), "sha256": f.sha256,
    })
}

fn action_status(ok: Option<bool>) -> Value {
    match ok {
        Some(true) => id("http://schema.org/CompletedActionStatus"),
        Some(false) => id("http://schema.org/FailedActionStatus"),
        None => id("http://schema.org/ActiveActionStatus"),
    }
}

/// The crate's `@graph` as it is built: its entities in order, and what the root dataset lists.
struct CrateGraph {
    entities: Vec<Value>,
    /// The root dataset's `hasPart`: every file of the crate.
    parts: Vec<String>,
    /// The root dataset's `mentions`: every action.
    actions: Vec<String>,
    /// The artifacts already described (a reused artifact is named by several steps).
    seen_files: BTreeSet<String>,
}

/// The `ro-crate-metadata.json` of a run.
pub fn crate_metadata(c: &CrateRun) -> Value {
    let run_action = format!("#run-{}", c.run.run_id);
    let mut g = CrateGraph {
        entities: Vec::new(),
        parts: Vec::new(),
        actions: vec![run_action.clone()],
        seen_files: BTreeSet::new(),
    };
    g.entities.extend(context_entities(c));
    workflow_entities(c, &mut g);
    input_entities(c, &mut g);
    let verdict = validation_entity(c, &mut g);
    let mut control_ids = Vec::new();
    let mut results = Vec::new();
    for s in &c.steps {
        results.extend(s.artifacts.iter().map(|(_, art_id)| art_id.clone()));
        control_ids.extend(step_entities(c, s, &mut g));
    }
    g.entities.push(run_entity(c, &run_action, &verdict, &results));
    g.entities.extend(people(c));
    g.entities.push(organize_entity(&c.run, &run_action, &control_ids));
    let root = root_entity(c, &verdict, &g);
    g.entities.insert(1, root);
    json!({
        "@context": ["https://w3id.org/ro/crate/1.1/context", "https://w3id.org/ro/terms/workflow-run/context"],
        "@graph": g.entities,
    })
}

/// The `@id` of the workflow's `workflow.toml` in the crate.
fn workflow_toml_id() -> String {
    format!("{WORKFLOW_DIR}/workflow.toml")
}

/// What the crate conforms to, its license, the workflow language and Cairn itself.
fn context_entities(c: &CrateRun) -> Vec<Value> {
    let mut out = vec![json!({
        "@id": "ro-crate-metadata.json", "@type": "CreativeWork",
        "conformsTo": [id(RO_CRATE_1_1), id(WORKFLOW_RO_CRATE)],
        "about": id("./"),
    })];
    for (url, name, version) in [
        (PROCESS_RUN_CRATE, "Process Run Crate", "0.5"),
        (WORKFLOW_RUN_CRATE, "Workflow Run Crate", "0.5"),
        (PROVENANCE_RUN_CRATE, "Provenance Run Crate", "0.5"),
        (WORKFLOW_RO_CRATE, "Workflow RO-Crate", "1.0"),
    ] {
        out.push(json!({"@id": url, "@type": "CreativeWork", "name": name, "version": version}));
    }
    out.push(json!({
        "@id": "https://spdx.org/licenses/CC0-1.0", "@type": "CreativeWork",
        "name": "Creative Commons Zero v1.0 Universal", "identifier": "CC0-1.0",
    }));
    out.push(json!({
        "@id": "#cairn-language", "@type": "ComputerLanguage",
        "name": "Cairn workflow", "alternateName": "workflow.toml",
        "url": id("https://github.com/cairn-workbench/cairn"), "version": "1",
    }));
    out.push(json!({
        "@id": "#cairn", "@type": "SoftwareApplication", "name": "Cairn",
        "version": c.cairn_version, "url": id("https://github.com/cairn-workbench/cairn"),
    }));
    out
}

/// The workflow: its folder's files (`workflow.toml` the workflow itself), its tools and its
/// steps.
fn workflow_entities(c: &CrateRun, g: &mut CrateGraph) {
    let wf_toml = workflow_toml_id();
    // The profile counts every part of the workflow as a tool some action ran (`instrument`):
    // the tools of the steps that have a record (executed here or reused) are its parts.
    let used: BTreeSet<&str> = c.steps.iter().filter(|s| s.record.is_some()).map(|s| s.tool.as_str()).collect();
    let wf_parts: Vec<String> = c.spec.tools.keys().filter(|t| used.contains(t.as_str())).map(|t| tool_id(t)).collect();
    for f in &c.workflow_files {
        g.parts.push(f.id.clone());
        g.seen_files.insert(f.id.clone());
        if f.id == wf_toml {
            g.entities.push(json!({
                "@id": f.id,
                "@type": ["File", "SoftwareSourceCode", "ComputationalWorkflow", "HowTo"],
                "name": c.spec.reference(),
                "description": c.spec.description,
                "version": c.spec.version,
                "encodingFormat": "application/toml",
                "programmingLanguage": id("#cairn-language"),
                "contentSize": f.bytes.to_string(), "sha256": f.sha256,
                "hasPart": ids(wf_parts.iter().map(String::as_str)),
                "step": ids(c.steps.iter().map(|s| step_id(&s.step_id)).collect::<Vec<_>>().iter().map(String::as_str)),
            }));
        } else {
            let name = f.id.strip_prefix(&format!("{WORKFLOW_DIR}/")).unwrap_or(&f.id);
            let mut e = file_entity(f, name);
            if is_tool_file(&c.spec, f) {
                e["@type"] = json!(["File", "SoftwareSourceCode"]);
            }
            g.entities.push(e);
        }
    }
    for (name, tool) in &c.spec.tools {
        let mut t = json!({
            "@id": tool_id(name), "@type": "SoftwareApplication", "name": name,
            "description": tool.command.join(" "),
        });
        if let Some(v) = &tool.version {
            t["softwareVersion"] = json!(v);
        }
        g.entities.push(t);
    }
    for (position, s) in c.steps.iter().enumerate() {
        g.entities.push(json!({
            "@id": step_id(&s.step_id), "@type": "HowToStep", "name": s.step_id,
            "position": position.to_string(), "workExample": id(&tool_id(&s.tool)),
        }));
    }
}

/// Whether a file of the workflow folder is a tool's source code: a file its command names.
fn is_tool_file(spec: &WorkflowSpec, f: &CrateFile) -> bool {
    let rel = f.id.strip_prefix(&format!("{WORKFLOW_DIR}/")).unwrap_or(&f.id).to_string();
    spec.tools.values().any(|t| t.command.iter().any(|a| a.trim_start_matches("./") == rel))
}

/// The run's input, the files it read, and the targets that executed it (with their facts).
fn input_entities(c: &CrateRun, g: &mut CrateGraph) {
    g.parts.push(c.input.id.clone());
    g.entities.push(file_entity(&c.input, "the run's input"));
    for f in &c.input_files {
        g.parts.push(f.id.clone());
        let mut e = json!({"@id": f.id, "@type": "File", "name": f.path, "sha256": f.sha256});
        if let Some(bytes) = f.bytes {
            e["contentSize"] = json!(bytes.to_string());
        }
        if let Some(note) = &f.note {
            e["description"] = json!(note);
        }
        g.entities.push(e);
    }
    for t in &c.targets {
        let mut e = json!({
            "@id": target_id(&t.name), "@type": "Thing", "name": format!("target {}", t.name),
            "identifier": t.address,
            "description": format!(
                "Cairn target `{}`: {} over SSH, executor {}, workspace {}; its step agent ran these attempts",
                t.name, t.address, t.executor, t.workspace_root
            ),
        });
        if let Some(facts) = &t.facts {
            g.parts.push(facts.id.clone());
            g.entities.push(file_entity(facts, &format!("the facts observed on target {}", t.name)));
            e["subjectOf"] = id(&facts.id);
        }
        g.entities.push(e);
    }
}

/// The validator's verdict file; returns the verdict as a sentence.
fn validation_entity(c: &CrateRun, g: &mut CrateGraph) -> String {
    let run = &c.run;
    g.parts.push(c.validation.id.clone());
    let verdict = match run.status {
        RunStatus::Ready => "READY: the validator found nothing".to_string(),
        RunStatus::Blocked => format!("BLOCKED: the validator found {} finding(s)", run.findings.len()),
        other => format!("{}: {}", other.as_str(), run.error.as_deref().unwrap_or("no evidence")),
    };
    let mut validation = file_entity(&c.validation, "the validator's verdict and findings");
    validation["description"] = json!(verdict);
    g.entities.push(validation);
    verdict
}

/// An action's `object`: the run's input and `files`.
fn object_of(c: &CrateRun, files: &[String]) -> Value {
    ids(std::iter::once(c.input.id.as_str()).chain(files.iter().map(String::as_str)))
}

/// One step's entities: its attempts' and jobs' actions, its artifacts, and the control action
/// orchestrating it. Returns the control action's id, if the step started.
fn step_entities(c: &CrateRun, s: &CrateStep, g: &mut CrateGraph) -> Option<String> {
    let control = format!("#control-{}-{}", c.run.run_id, s.step_id);
    let mut control_entity = json!({
        "@id": control, "@type": "ControlAction",
        "name": format!("orchestrate step {}", s.step_id),
        "instrument": id(&step_id(&s.step_id)),
    });
    if let Some(d) = replay_decision(&c.run, &s.step_id) {
        control_entity["description"] = json!(format!("{}: {}", d.decision.as_str(), d.text));
    }
    if let Some(r) = &s.record {
        control_entity["object"] = attempt_entities(c, s, r, g);
    }
    job_actions(&c.run.run_id, s, &mut g.entities, &mut g.actions);
    for (art, art_id) in &s.artifacts {
        if g.seen_files.insert(art_id.clone()) {
            g.parts.push(art_id.clone());
            g.entities.push(file_entity(
                &CrateFile { id: art_id.clone(), bytes: art.artifact.bytes, sha256: art.artifact.sha256.clone() },
                &art.artifact.path,
            ));
        }
    }
    // The profile requires a ControlAction to name the attempt it orchestrated: a step that
    // never started is a HowToStep of the workflow only.
    if control_entity.get("object").is_some() {
        g.entities.push(control_entity);
        Some(control)
    } else {
        None
    }
}

/// The replay planner's decision for a step of a replay child.
fn replay_decision<'r>(run: &'r RunRecord, step: &str) -> Option<&'r DecisionRecord> {
    run.replay.as_ref()?.decision(step)
}

/// The actions of a step that has a record: the attempt that produced its evidence (this run's
/// last, or the producer's for a reused step) and the earlier attempts this run executed.
/// Returns the control action's `object`: those actions.
fn attempt_entities(c: &CrateRun, s: &CrateStep, r: &StepRecord, g: &mut CrateGraph) -> Value {
    let run = &c.run;
    let (producer, attempt) = match (&r.reused_from, &s.producer) {
        (Some(_), Some((p, n))) => (p.clone(), *n),
        (Some(from), None) => (from.to_string(), 1),
        (None, _) => (run.run_id.to_string(), r.attempt_count.max(1)),
    };
    let action = attempt_action_id(&producer, &s.step_id, attempt);
    let mut a = evidence_action(c, s, r, &action, &producer, attempt);
    // The earlier attempts this run executed, each its own action (the last one above).
    let mut objects = Vec::new();
    if r.reused_from.is_none() {
        for earlier in s.attempts.iter().filter(|x| x.number != attempt) {
            let eid = attempt_action_id(&run.run_id, &s.step_id, earlier.number);
            g.entities.push(earlier_attempt_action(c, s, earlier, &eid));
            objects.push(eid.clone());
            g.actions.push(eid);
        }
        if let Some(last) = s.attempts.iter().find(|x| x.number == attempt) {
            a["startTime"] = json!(rfc3339(last.started_ms));
        }
    }
    objects.push(action.clone());
    let object = if objects.len() == 1 { id(&action) } else { ids(objects.iter().map(String::as_str)) };
    g.entities.push(a);
    g.actions.push(action);
    object
}

/// The action of the attempt that produced a step's evidence (`attempt` of run `producer`).
fn evidence_action(c: &CrateRun, s: &CrateStep, r: &StepRecord, action: &str, producer: &str, attempt: u32) -> Value {
    let ok = match r.status.as_str() {
        "COMPLETED" => Some(true),
        "FAILED" => Some(false),
        _ => None,
    };
    let mut a = json!({
        "@id": action, "@type": "CreateAction",
        "name": if r.reused_from.is_some() {
            format!("Run of tool {} for step {} in run {producer} (reused)", s.tool, s.step_id)
        } else {
            format!("Run of tool {} for step {} (attempt {attempt})", s.tool, s.step_id)
        },
        "instrument": id(&tool_id(&s.tool)),
        "object": object_of(c, &s.input_files),
        "result": ids(s.artifacts.iter().map(|(_, i)| i.as_str())),
        "startTime": rfc3339(r.started_at),
        "actionStatus": action_status(ok),
        "identifier": r.signature.tool_digest.clone(),
    });
    if let Some(end) = r.finished_at {
        a["endTime"] = json!(rfc3339(end));
    }
    if let Some(t) = &s.agent {
        a["agent"] = id(&target_id(t));
    }
    let mut desc = vec![format!("args sha256 {}", r.signature.args_hash)];
    if let Some(o) = r.outcome {
        desc.push(format!("outcome {}", o.as_str()));
    }
    if !s.links.is_empty() {
        let links: Vec<String> = s.links.iter().map(|(p, t)| format!("{p} -> {t}")).collect();
        desc.push(format!("symlinks (recorded as links, not followed): {}", links.join(", ")));
    }
    if let Some(e) = &r.error {
        a["error"] = json!(e);
    }
    a["description"] = json!(desc.join("; "));
    a
}

/// The action of an earlier attempt of a step this run executed (one that did not produce its
/// evidence).
fn earlier_attempt_action(c: &CrateRun, s: &CrateStep, earlier: &CrateAttempt, eid: &str) -> Value {
    let mut e = json!({
        "@id": eid, "@type": "CreateAction",
        "name": format!("Run of tool {} for step {} (attempt {})", s.tool, s.step_id, earlier.number),
        "instrument": id(&tool_id(&s.tool)),
        "object": object_of(c, &s.input_files),
        "startTime": rfc3339(earlier.started_ms),
        "actionStatus": action_status(earlier.outcome.map(|o| o == Outcome::Completed)),
        "description": match earlier.outcome {
            Some(o) => format!("args sha256 {}; outcome {}", earlier.args_hash, o.as_str()),
            None => format!("args sha256 {}; abandoned", earlier.args_hash),
        },
    });
    if let Some(end) = earlier.ended_ms {
        e["endTime"] = json!(rfc3339(end));
    }
    if let Some(err) = &earlier.error {
        e["error"] = json!(err);
    }
    if let Some(t) = &s.agent {
        e["agent"] = id(&target_id(t));
    }
    e
}

/// The run's own action: the workflow run, its inputs and every result, its verdict and
/// lineage.
fn run_entity(c: &CrateRun, run_action: &str, verdict: &str, results: &[String]) -> Value {
    let run = &c.run;
    let ok = match run.status {
        RunStatus::Ready | RunStatus::Blocked => Some(true),
        s if s.is_terminal() => Some(false),
        _ => None,
    };
    let all_inputs: Vec<String> = c.input_files.iter().map(|f| f.id.clone()).collect();
    let mut run_entity = json!({
        "@id": run_action, "@type": "CreateAction",
        "name": format!("Run {} of workflow {}", run.run_id, c.spec.reference()),
        "identifier": run.run_id,
        "description": format!("{verdict}; executed on {}", c.target),
        "instrument": id(&workflow_toml_id()),
        "object": object_of(c, &all_inputs),
        "result": ids(results.iter().map(String::as_str).chain([c.validation.id.as_str()])),
        "startTime": rfc3339(run.created_at),
        "actionStatus": action_status(ok),
    });
    if let Some(end) = run.finished_at {
        run_entity["endTime"] = json!(rfc3339(end));
    }
    if let Some(e) = &run.error {
        run_entity["error"] = json!(e);
    }
    // The person behind the run: who approved its plan, else who submitted it.
    let approver = c.approval.as_ref().and_then(|a| a.by.as_deref());
    let agent = approver.or(run.submitted_by.as_deref());
    if let Some(agent) = agent {
        run_entity["agent"] = id(&person_id(agent));
    }
    // The others who took part: its planner, who cancelled it.
    let mut others: Vec<String> = Vec::new();
    for who in
        [c.approval.as_ref().and_then(|a| a.planned_by.as_deref()), run.cancelled_by.as_deref()].into_iter().flatten()
    {
        let pid = person_id(who);
        if Some(who) != agent && !others.contains(&pid) {
            others.push(pid);
        }
    }
    if !others.is_empty() {
        run_entity["participant"] = ids(others.iter().map(String::as_str));
    }
    if let Some(source) = c.lineage.first() {
        run_entity["description"] = json!(format!(
            "{verdict}; executed on {}; a replay of run {} (lineage: {})",
            c.target,
            source.run_id,
            c.lineage.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>().join(" <- ")
        ));
    }
    run_entity
}

fn person_id(principal: &str) -> String {
    format!("#principal-{}", path_id(principal))
}

/// The principals behind the run (its planner, its approver or submitter, who cancelled it),
/// each a `Person` saying what they did.
fn people(c: &CrateRun) -> Vec<Value> {
    let mut did: Vec<(String, Vec<String>)> = Vec::new();
    let mut note = |who: Option<&str>, what: String| {
        let Some(who) = who else { return };
        match did.iter_mut().find(|(w, _)| w == who) {
            Some((_, list)) => list.push(what),
            None => did.push((who.to_string(), vec![what])),
        }
    };
    match &c.approval {
        Some(a) => {
            note(a.planned_by.as_deref(), "made the run's plan".into());
            note(a.by.as_deref(), format!("approved and executed the run's plan (through `{}`)", a.channel));
        }
        None => note(c.run.submitted_by.as_deref(), "submitted the run".into()),
    }
    note(c.run.cancelled_by.as_deref(), "cancelled the run".into());
    did.into_iter()
        .map(|(who, what)| {
            json!({
                "@id": person_id(&who), "@type": "Person", "name": who,
                "description": format!("Cairn principal `{who}`: {}", what.join("; ")),
            })
        })
        .collect()
}

/// Cairn orchestrating the run: its steps' control actions.
fn organize_entity(run: &RunRecord, run_action: &str, control_ids: &[String]) -> Value {
    let mut organize = json!({
        "@id": format!("#cairn-{}", run.run_id), "@type": "OrganizeAction",
        "name": format!("Cairn orchestrating run {}", run.run_id),
        "instrument": id("#cairn"),
        "object": ids(control_ids.iter().map(String::as_str)),
        "result": id(run_action),
        "startTime": rfc3339(run.created_at),
    });
    if let Some(end) = run.finished_at {
        organize["endTime"] = json!(rfc3339(end));
    }
    organize
}

/// The root dataset: every file of the crate and every action.
fn root_entity(c: &CrateRun, verdict: &str, g: &CrateGraph) -> Value {
    let run = &c.run;
    json!({
        "@id": "./", "@type": "Dataset",
        "conformsTo": [id(PROCESS_RUN_CRATE), id(WORKFLOW_RUN_CRATE), id(PROVENANCE_RUN_CRATE), id(WORKFLOW_RO_CRATE)],
        "name": format!("Cairn run {} of {}", run.run_id, c.spec.reference()),
        "description": format!("Provenance Run Crate of Cairn run {}: {verdict}", run.run_id),
        "license": id("https://spdx.org/licenses/CC0-1.0"),
        "datePublished": rfc3339(c.published_ms),
        "mainEntity": id(&workflow_toml_id()),
        "hasPart": ids(g.parts.iter().map(String::as_str)),
        "mentions": ids(g.actions.iter().map(String::as_str)),
    })
}

/// The kernel a verification ran in, as its notebook's metadata records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelFacts {
    pub python: String,
    pub ipykernel: String,
    /// sha256 of the interpreter and package versions the kernel reported.
    pub environment_sha256: String,
}

/// Everything the crate of a verification says: a Process Run Crate of one notebook run.
#[derive(Debug, Clone)]
pub struct CrateVerification {
    pub record: VerificationRecord,
    /// The document it verified (copied when it still has the verified bytes, else referenced by
    /// its path and the recorded hash).
    pub document: CrateFile,
    pub document_note: Option<String>,
    /// The notebook it proved, or the failed notebook.
    pub notebook: Option<CrateFile>,
    /// A failed one's draft to fix (the document with its failing cell), when not the notebook.
    pub draft: Option<CrateFile>,
    /// The verification's record (its cells, verdict, parameters), as a file of the crate.
    pub report: CrateFile,
    pub kernel: Option<KernelFacts>,
    pub cairn_version: String,
    pub published_ms: i64,
}

/// The crate's file of a verification's record.
pub const VERIFICATION_FILE: &str = "verification.json";

/// The `ro-crate-metadata.json` of a verification.
pub fn verification_metadata(c: &CrateVerification) -> Value {
    let v = &c.record;
    let action = format!("#verification-{}", v.id);
    let passed = v.verdict.as_deref() == Some("passed");
    let verdict = v.verdict.as_deref().unwrap_or("running");
    let mut graph = vec![
        json!({
            "@id": "ro-crate-metadata.json", "@type": "CreativeWork",
            "conformsTo": id(RO_CRATE_1_1), "about": id("./"),
        }),
        json!({"@id": PROCESS_RUN_CRATE, "@type": "CreativeWork", "name": "Process Run Crate", "version": "0.5"}),
        json!({
            "@id": "https://spdx.org/licenses/CC0-1.0", "@type": "CreativeWork",
            "name": "Creative Commons Zero v1.0 Universal", "identifier": "CC0-1.0",
        }),
        json!({
            "@id": "#cairn", "@type": "SoftwareApplication", "name": "Cairn",
            "version": c.cairn_version, "url": id("https://github.com/cairn-workbench/cairn"),
        }),
    ];
    let mut parts = Vec::new();
    let mut instruments = vec![c.document.id.clone()];
    let mut doc = file_entity(&c.document, &v.document);
    doc["@type"] = json!(["File", "SoftwareSourceCode"]);
    doc["description"] = json!(c.document_note.clone().unwrap_or_else(|| "the verified document".into()));
    parts.push(c.document.id.clone());
    graph.push(doc);
    if let Some(k) = &c.kernel {
        instruments.push("#kernel".into());
        graph.push(json!({
            "@id": "#kernel", "@type": "SoftwareApplication",
            "name": format!("Python {} with ipykernel {}", k.python, k.ipykernel),
            "softwareVersion": k.python,
            "identifier": id("#kernel-environment"),
            "description": "the fresh, disposable Jupyter kernel the cells ran in",
        }));
        graph.push(json!({
            "@id": "#kernel-environment", "@type": "PropertyValue", "name": "environment sha256",
            "propertyID": "environment_sha256", "value": k.environment_sha256,
            "description": "sha256 of the interpreter and package versions the kernel reported",
        }));
    }
    let mut results = Vec::new();
    if let Some(nb) = &c.notebook {
        let name = if passed { "the proven notebook (a provenance cell first)" } else { "the failed notebook" };
        let mut e = file_entity(nb, name);
        e["encodingFormat"] =
            json!(if nb.id.ends_with(".ipynb") { "application/x-ipynb+json" } else { "text/markdown" });
        parts.push(nb.id.clone());
        results.push(nb.id.clone());
        graph.push(e);
    }
    if let Some(d) = &c.draft {
        parts.push(d.id.clone());
        results.push(d.id.clone());
        graph.push(file_entity(d, "the draft to fix: the document with its failing cell"));
    }
    parts.push(c.report.id.clone());
    results.push(c.report.id.clone());
    graph.push(file_entity(&c.report, "the verification's record: verdict, cells and parameters"));
    let mut objects = Vec::new();
    if let Some(params) = v.parameters.as_object() {
        for (k, value) in params {
            let pid = format!("#parameter-{}", path_id(k));
            graph.push(json!({
                "@id": pid, "@type": "PropertyValue", "name": k,
                "value": match value { Value::String(s) => s.clone(), other => other.to_string() },
            }));
            objects.push(pid);
        }
    }
    let cells = v.cells.as_array().map(Vec::len).unwrap_or(0);
    let mut a = json!({
        "@id": action, "@type": "CreateAction",
        "name": format!("Verification {} of {}", v.id, v.title),
        "identifier": v.id,
        "description": format!(
            "{verdict}: {cells} code cell(s) run in a fresh kernel{}",
            c.kernel.as_ref().map(|k| format!(", environment sha256 {}", k.environment_sha256)).unwrap_or_default()
        ),
        "instrument": ids(instruments.iter().map(String::as_str)),
        "result": ids(results.iter().map(String::as_str)),
        "startTime": rfc3339(v.created_at),
        "actionStatus": action_status(v.verdict.as_ref().map(|_| passed)),
    });
    if !objects.is_empty() {
        a["object"] = ids(objects.iter().map(String::as_str));
    }
    if let Some(end) = v.finished_at {
        a["endTime"] = json!(rfc3339(end));
    }
    if let Some(e) = &v.error {
        a["error"] = json!(e);
    }
    graph.push(a);
    graph.insert(
        1,
        json!({
            "@id": "./", "@type": "Dataset",
            "conformsTo": id(PROCESS_RUN_CRATE),
            "name": format!("Cairn verification {} of {}", v.id, v.title),
            "description": format!("Process Run Crate of Cairn verification {}: {verdict}", v.id),
            "license": id("https://spdx.org/licenses/CC0-1.0"),
            "datePublished": rfc3339(c.published_ms),
            "hasPart": ids(parts.iter().map(String::as_str)),
            "mentions": id(&action),
        }),
    );
    json!({
        "@context": ["https://w3id.org/ro/crate/1.1/context", "https://w3id.org/ro/terms/workflow-run/context"],
        "@graph": graph,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: i64, step: &str, attempt: u32, event: RunEvent) -> EventRecord {
        EventRecord {
            seq,
            run_id: crate::ids::RunId::lookup("r"),
            step_id: Some(step.into()),
            attempt: Some(attempt),
            at: seq * 10,
            event,
        }
    }

    #[test]
    fn attempts_come_from_the_events_each_with_its_end() {
        let started = || RunEvent::StepStarted { tool: "t".into(), tool_digest: "d".into(), args_hash: "h".into() };
        let events = [
            event(1, "a", 1, started()),
            event(
                2,
                "a",
                1,
                RunEvent::StepRetrying {
                    outcome: Outcome::Failed,
                    error: Some("boom".into()),
                    next_attempt: 2,
                    cause: None,
                    delay_ms: 0,
                },
            ),
            event(3, "a", 2, started()),
            event(4, "a", 2, RunEvent::StepCompleted { duration_us: 5 }),
            event(5, "b", 1, started()),
        ];
        let got = attempts_from_events(&events);
        let a = &got["a"];
        assert_eq!(a.len(), 2);
        assert_eq!(
            (a[0].number, a[0].ended_ms, a[0].outcome, a[0].error.as_deref()),
            (1, Some(20), Some(Outcome::Failed), Some("boom"))
        );
        assert_eq!((a[1].number, a[1].started_ms, a[1].outcome), (2, 30, Some(Outcome::Completed)));
        assert_eq!((got["b"][0].ended_ms, got["b"][0].outcome), (None, None), "still running");
    }

    #[test]
    fn a_path_id_is_a_uri_reference() {
        assert_eq!(path_id("steps/render/plots/a b#1.png"), "steps/render/plots/a%20b%231.png");
        assert_eq!(path_id("workflow/tools/é.py"), "workflow/tools/%C3%A9.py");
        assert_eq!(path_id("steps/x/report.html"), "steps/x/report.html");
    }
}
