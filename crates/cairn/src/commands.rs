//! One function per command: open the engine, call the use case, print the result.

use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};

use cairn_core::status::RunStatus;
use cairn_engine::registry::{self, add_workflow, load_record, load_workflow};
use cairn_engine::replay::ReplayRequest;
use cairn_engine::runner::{NoProgress, Observer, RunReport, RunRequest};
use cairn_engine::verify::VerifyRequest;
use cairn_engine::{Engine, EngineError};
use serde_json::Value;

use crate::cli::{Cli, Command, WorkflowCommand};
use crate::output::{self, print_json};
use crate::progress::TerminalProgress;
use crate::{Failure, quickstart};

pub fn state_root(home: Option<PathBuf>) -> Result<PathBuf, Failure> {
    if let Some(h) = home.filter(|h| !h.as_os_str().is_empty()) {
        return Ok(h);
    }
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(x) = env("XDG_STATE_HOME") {
        return Ok(x.join("cairn"));
    }
    env("HOME")
        .map(|h| h.join(".local/state/cairn"))
        .ok_or_else(|| Failure::usage("cannot find a state root: set CAIRN_HOME (or HOME)"))
}

pub fn open_engine(home: Option<PathBuf>) -> Result<Engine, Failure> {
    Ok(Engine::open(&state_root(home)?)?)
}

pub fn dispatch(cli: Cli) -> Result<u8, Failure> {
    match cli.command {
        Command::Quickstart { json } => quickstart::run(&open_engine(cli.home)?, json),
        Command::Workflow { command } => {
            let engine = open_engine(cli.home)?;
            match command {
                WorkflowCommand::Add { path, json } => workflow_add(&engine, &path, json),
                WorkflowCommand::List { json } => workflow_list(&engine, json),
                WorkflowCommand::Show { workflow, json } => workflow_show(&engine, &workflow, json),
            }
        }
        Command::Run { workflow, input, run_id, resume_interrupted, parallel, json } => {
            let engine = open_engine(cli.home)?;
            let input = read_input(&input)?;
            let wf = load_workflow(engine.store.as_ref(), &workflow)?;
            let req = RunRequest { run_id, input, resume_interrupted, parallelism: parallel as usize };
            let report = run_with_progress(&engine, &wf, &req, json)?;
            finish_run_output(&report, json)
        }
        Command::Replay {
            source_run_id,
            steps,
            input,
            run_id,
            version,
            resume_interrupted,
            parallel,
            dry_run,
            json,
        } => {
            let engine = open_engine(cli.home)?;
            let input = input.as_deref().map(read_input).transpose()?;
            let req = ReplayRequest {
                source_run_id,
                step_ids: steps,
                input,
                run_id,
                version,
                workflow: None,
                resume_interrupted,
                parallelism: parallel as usize,
            };
            if dry_run {
                let prepared = engine.dry_run_replay(&req)?;
                if json {
                    print_json(&output::dry_run_json(&prepared));
                } else {
                    output::print_dry_run(&prepared);
                }
                return Ok(0);
            }
            let mut observer = observer(json);
            let (report, _) = engine.replay(&req, observer.as_mut())?;
            drop(observer);
            finish_run_output(&report, json)
        }
        Command::Explain { run_id, step_id, json } => {
            let engine = open_engine(cli.home)?;
            let report = report_of(&engine, &run_id)?;
            let explained = output::explain(&report, &step_id).ok_or_else(|| {
                let steps: Vec<&str> = report.steps.iter().map(|s| s.step_id.as_str()).collect();
                Failure::usage(format!("run `{run_id}` has no step `{step_id}`; its steps are: {}", steps.join(", ")))
            })?;
            if json {
                print_json(&explained);
            } else {
                output::print_explain(&explained);
            }
            Ok(0)
        }
        Command::Verify { document, title, timeout, memory_limit, python, no_wait, json } => {
            let engine = open_engine(cli.home)?;
            let req = VerifyRequest {
                document,
                title,
                cell_timeout: std::time::Duration::from_secs(timeout.max(1)),
                memory_limit,
                python,
                no_wait,
                cancel: None,
            };
            crate::verify::run(&engine, req, json)
        }
        Command::Runs { limit, json } => {
            let engine = open_engine(cli.home)?;
            let runs = engine.store.runs(limit).map_err(EngineError::from)?;
            if json {
                print_json(&output::runs_json(&runs));
            } else {
                output::print_runs(&runs);
            }
            Ok(0)
        }
        Command::Show { run_id, json } => {
            let engine = open_engine(cli.home)?;
            let report = report_of(&engine, &run_id)?;
            let lineage = engine.lineage(&run_id)?;
            if json {
                let mut v = output::run_json(&report);
                v["lineage"] = output::lineage_json(&lineage);
                print_json(&v);
            } else {
                output::print_run(&report, true);
                output::print_lineage(&report.run, &lineage);
            }
            Ok(0)
        }
        Command::Events { run_id, json } => {
            let engine = open_engine(cli.home)?;
            engine
                .store
                .run(&run_id)
                .map_err(EngineError::from)?
                .ok_or_else(|| Failure::usage(format!("run `{run_id}` was not found; list runs with `cairn runs`")))?;
            let events = engine.store.events(&run_id, 0).map_err(EngineError::from)?;
            if json {
                print_json(&output::events_json(&run_id, &events));
            } else {
                output::print_events(&events);
            }
            Ok(0)
        }
    }
}

/// Runs with a live progress display on a terminal (never with --json).
pub fn run_with_progress(
    engine: &Engine,
    wf: &registry::LoadedWorkflow,
    req: &RunRequest,
    json: bool,
) -> Result<RunReport, Failure> {
    let mut observer = observer(json);
    Ok(engine.run(wf, req, observer.as_mut())?)
}

fn observer(json: bool) -> Box<dyn Observer> {
    if !json && std::io::stderr().is_terminal() { Box::new(TerminalProgress::new()) } else { Box::new(NoProgress) }
}

pub fn report_of(engine: &Engine, run_id: &str) -> Result<RunReport, Failure> {
    let run = engine
        .store
        .run(run_id)
        .map_err(EngineError::from)?
        .ok_or_else(|| Failure::usage(format!("run `{run_id}` was not found; list runs with `cairn runs`")))?;
    let record =
        engine.store.workflow(&run.workflow, Some(&run.version)).map_err(EngineError::from)?.ok_or_else(|| {
            Failure::usage(format!("workflow {}@{} of run `{run_id}` is not registered", run.workflow, run.version))
        })?;
    Ok(engine.report(run_id, &load_record(record)?)?)
}

/// Prints a run result and maps its status to the exit code.
pub fn finish_run_output(report: &RunReport, json: bool) -> Result<u8, Failure> {
    if json {
        print_json(&output::run_json(report));
    } else {
        output::print_run(report, false);
    }
    Ok(exit_code(report.run.status))
}

pub fn exit_code(status: RunStatus) -> u8 {
    match status {
        RunStatus::Ready => 0,
        RunStatus::Blocked => 1,
        RunStatus::Failed | RunStatus::Cancelled => 3,
        // A run still RUNNING after the engine returned was left for someone else to finish.
        RunStatus::Pending | RunStatus::Running => 4,
    }
}

pub fn read_input(path: &Path) -> Result<Value, Failure> {
    let label = path.display().to_string();
    let bytes = if label == "-" {
        let mut buf = Vec::new();
        std::io::stdin().read_to_end(&mut buf).map_err(|e| Failure::usage(format!("stdin: {e}")))?;
        buf
    } else {
        std::fs::read(path).map_err(|e| Failure::usage(format!("{label}: cannot read the input file: {e}")))?
    };
    let text = std::str::from_utf8(&bytes).map_err(|e| {
        Failure::usage(format!("{label}: the input is not UTF-8 text (invalid byte at offset {})", e.valid_up_to()))
    })?;
    serde_json::from_str(text).map_err(|e| {
        Failure::usage(format!(
            "{label}: the input is not valid JSON: {e}; the run input is one JSON value, usually an object"
        ))
    })
}

fn workflow_add(engine: &Engine, path: &Path, json: bool) -> Result<u8, Failure> {
    let added = add_workflow(engine.store.as_ref(), &engine.state.registry(), path, engine.clock.now_ms())?;
    if json {
        print_json(&output::workflow_added_json(&added.record, added.newly_registered));
    } else {
        let r = &added.record;
        let verb = if added.newly_registered { "registered" } else { "already registered (same content)" };
        println!("{}@{} {verb}: {} steps, digest {}", r.name, r.version, r.spec.steps.len(), &r.digest[..16]);
    }
    Ok(0)
}

fn workflow_list(engine: &Engine, json: bool) -> Result<u8, Failure> {
    let all = engine.store.workflows().map_err(EngineError::from)?;
    if json {
        print_json(&output::workflows_json(&all));
    } else if all.is_empty() {
        eprintln!("no workflows registered; add one with `cairn workflow add PATH`");
    } else {
        println!("{:<32} {:<12} {:>5}  DIGEST", "NAME", "VERSION", "STEPS");
        for w in &all {
            println!("{:<32} {:<12} {:>5}  {}", w.name, w.version, w.spec.steps.len(), &w.digest[..16]);
        }
    }
    Ok(0)
}

fn workflow_show(engine: &Engine, reference: &str, json: bool) -> Result<u8, Failure> {
    let wf = load_workflow(engine.store.as_ref(), reference)?;
    if json {
        print_json(&output::workflow_json(&wf));
    } else {
        output::print_workflow(&wf);
    }
    Ok(0)
}
