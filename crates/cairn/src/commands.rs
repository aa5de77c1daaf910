//! One function per command: call the use case (the engine in this process, or the daemon over
//! HTTP), print its result (the wire object with `--json`, a rendering for a person otherwise),
//! and give the exit code. Read-only commands and the ones that need no daemon (registering a
//! workflow or a target, planning, verifying) call the engine here; everything that executes
//! goes through the daemon, which owns execution.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use cairn_core::ids::RunId;
use cairn_core::status::RunStatus;
use cairn_core::store::RunQuery;
use cairn_engine::replay::ReplayRequest;
use cairn_engine::runner::{NoProgress, Observer, RunRequest};
use cairn_engine::{Engine, ExportOut, ExportRequest, ExportSubject, JobFilter, TraceQuery};
use serde_json::json;

use crate::cli::{
    Cli, Command, DaemonCommand, McpServer, PlanCommand, ReplayArgs, RunArgs, TargetCommand, WorkflowCommand,
};
use crate::client::{Client, failure_of};
use crate::daemon::{self, ServeOptions};
use crate::input::{read_input, state_root};
use crate::output::{self, print_json, print_wire};
use crate::presence::{self, StartOptions};
use crate::progress::TerminalProgress;
use crate::wire::{self, ReplayDirective, SubmitRun};
use crate::{Failure, auth, follow, quickstart};

pub fn open_engine(home: Option<PathBuf>) -> Result<Engine, Failure> {
    Ok(Engine::open(&state_root(home)?)?)
}

/// `cairn runs`: the registry's list, with the waits the daemon holds its open runs in.
fn runs_command(root: &Path, limit: usize, status: Option<&str>, json: bool) -> Result<u8, Failure> {
    let status = status.map(cairn_engine::run_status_filter).transpose()?;
    let query = RunQuery { status, ..RunQuery::newest(limit) };
    let mut list = wire::RunList::from_listings(&Engine::open(root)?.list_runs(&query)?);
    if list.runs.iter().any(|r| r.finished_at.is_none()) {
        let filter = status.map(|s| format!("&status={}", s.as_str())).unwrap_or_default();
        let waits: std::collections::BTreeMap<String, wire::RunWaiting> =
            daemon_waits(root, &format!("/runs?limit={limit}{filter}"), |l: wire::RunList| {
                l.runs.into_iter().filter_map(|r| Some((r.run_id, r.waiting?))).collect()
            });
        for r in &mut list.runs {
            r.waiting = waits.get(&r.run_id).cloned();
        }
    }
    print_either(json, &list, output::print_runs)
}

/// `cairn show`: the run, or with `--timeline` its attempts, with the steps asked for.
fn show_dispatch(home: Option<PathBuf>, args: crate::cli::ShowArgs) -> Result<u8, Failure> {
    let crate::cli::ShowArgs {
        run_id,
        timeline,
        layers,
        all,
        steps_offset,
        steps_limit,
        steps_status,
        steps_order,
        steps_layer,
        json,
    } = args;
    if layers {
        let limit = steps_limit.unwrap_or(cairn_engine::STEPS_PAGE_DEFAULT);
        let l =
            wire::RunLayers::from_engine(&open_engine(home)?.run_layers(&run_id, steps_offset.unwrap_or(0), limit)?);
        return print_either(json, &l, output::print_layers);
    }
    let asked = steps_offset.is_some()
        || steps_limit.is_some()
        || steps_status.is_some()
        || steps_order.is_some()
        || steps_layer.is_some();
    let shown = match (all, asked) {
        (true, _) => ShowSteps::Every,
        (false, true) => ShowSteps::Page(cairn_engine::requested_steps(
            steps_offset,
            steps_limit,
            steps_status.as_deref(),
            steps_order.as_deref(),
            steps_layer,
        )?),
        (false, false) => ShowSteps::Default,
    };
    if timeline {
        let query = match shown {
            ShowSteps::Every => cairn_engine::StepQuery::every(),
            ShowSteps::Page(query) => query,
            ShowSteps::Default => cairn_engine::first_steps(),
        };
        let t = wire::RunTimeline::from_engine(&run_id, &open_engine(home)?.timeline_page(&run_id, &query)?);
        return print_either(json, &t, output::print_timeline);
    }
    show_command(&state_root(home)?, &run_id, &shown, json)
}

/// Which steps `cairn show` shows.
enum ShowSteps {
    /// Every step.
    Every,
    /// The page asked for.
    Page(cairn_engine::StepQuery),
    /// Every step of a run up to [`cairn_engine::STEPS_PAGE_DEFAULT`]; of a larger one, the JSON
    /// its first page (as the API answers), the text the steps that failed or run now.
    Default,
}

/// `cairn show RUN`: the run from the registry, with the wait its daemon holds it in.
fn show_command(root: &Path, run_id: &RunId, shown: &ShowSteps, json: bool) -> Result<u8, Failure> {
    let engine = Engine::open(root)?;
    let view = match shown {
        ShowSteps::Every => engine.show_run(run_id)?,
        ShowSteps::Page(query) => engine.show_run_page(run_id, query)?,
        ShowSteps::Default => {
            let first = engine.show_run_page(run_id, &cairn_engine::first_steps())?;
            if json || first.counts.total <= cairn_engine::STEPS_PAGE_DEFAULT {
                first
            } else {
                let attention = cairn_engine::StepQuery {
                    statuses: vec!["FAILED", "RUNNING"],
                    attention_first: true,
                    ..cairn_engine::first_steps()
                };
                engine.show_run_page(run_id, &attention)?
            }
        }
    };
    let mut answer = output::RunAnswer::of_view(&view);
    if !view.run.status.is_terminal() {
        let path = format!("/runs/{}?steps_limit=1", wire::seg(run_id));
        answer.run.waiting = daemon_waits(root, &path, |r: wire::RunResult| r.waiting);
    }
    if json {
        print_wire(&answer.run);
    } else {
        output::print_run(&answer, true);
        output::print_lineage(&view);
    }
    Ok(0)
}

/// What the daemon of `root` says of its open runs' waits for their environment, read from its
/// answer to `path`: only the daemon holding a run knows it waits (a full disk may be what keeps
/// the wait out of the registry). Nothing when no daemon runs or it does not answer.
fn daemon_waits<T: serde::de::DeserializeOwned, W>(root: &Path, path: &str, waits: impl FnOnce(T) -> W) -> W
where
    W: Default,
{
    Client::if_running(root)
        .and_then(|client| client.get(path).ok())
        .and_then(|answer| answer.decode::<T>(200, path).ok())
        .map(waits)
        .unwrap_or_default()
}

pub fn dispatch(cli: Cli) -> Result<u8, Failure> {
    match cli.command {
        Command::Quickstart { json } => quickstart::run(&state_root(cli.home)?, json),
        Command::Workflow { command } => workflow_command(&open_engine(cli.home)?, command),
        Command::Run(args) => run_command(cli.home, args),
        Command::Replay(args) => replay_command(cli.home, args),
        Command::Explain { run_id, step_id, json } => {
            let explained = wire::Explanation::from_engine(&open_engine(cli.home)?.explain_step(&run_id, &step_id)?);
            print_either(json, &explained, output::print_explain)
        }
        Command::Verify { request, json } => crate::verify::run(&open_engine(cli.home)?, request, json),
        Command::Runs { limit, status, json } => runs_command(&state_root(cli.home)?, limit, status.as_deref(), json),
        Command::Show(args) => show_dispatch(cli.home, args),
        Command::Result { run_id, step_id, json } => {
            let detail = wire::StepDetail::from_engine(&open_engine(cli.home)?.show_step(&run_id, &step_id)?);
            print_either(json, &detail, output::print_step_result)
        }
        Command::Jobs { run_id, step_id, json } => {
            let jobs = wire::PipelineJobs::from_engine(&open_engine(cli.home)?.pipeline_jobs(
                &run_id,
                &step_id,
                &JobFilter::default(),
            )?);
            print_either(json, &jobs, output::print_jobs)
        }
        Command::Artifacts { run_id, json } => {
            let list = wire::ArtifactList::from_engine(&open_engine(cli.home)?.run_artifacts(&run_id)?);
            print_either(json, &list, output::print_artifacts)
        }
        Command::ReadArtifact { run_id, step_id, name, path, offset, length, json } => {
            let req = cairn_engine::ReadArtifact { run_id, step_id, name, path, offset, length };
            let slice = open_engine(cli.home)?.read_artifact(&req)?;
            if json {
                print_wire(&wire::ArtifactSlice::from_engine(&slice));
            } else {
                use std::io::Write as _;
                let mut out = std::io::stdout().lock();
                out.write_all(&slice.bytes)
                    .and_then(|_| out.flush())
                    .map_err(|e| Failure::usage(format!("stdout: {e}")))?;
            }
            Ok(0)
        }
        Command::Export { run_id, verification, ro_crate, zip, no_data, json } => {
            export_command(cli.home, run_id, verification, (ro_crate, zip), no_data, json)
        }
        Command::Trace { file, json } => {
            let traced =
                wire::TraceResult::from_engine(&open_engine(cli.home)?.trace(&TraceQuery::File(file.clone()))?);
            if json {
                print_wire(&traced);
            } else {
                output::print_trace(&file, &traced);
            }
            Ok(if traced.matches.is_empty() { 1 } else { 0 })
        }
        Command::Doctor { json } => doctor_command(cli.home, json),
        Command::Backup { path, json } => {
            print_either(json, &wire::Backup::from_engine(&open_engine(cli.home)?.backup(&path)?), output::print_backup)
        }
        Command::Events { run_id, follow, json } => {
            let root = state_root(cli.home)?;
            let events = Engine::open(&root)?.events(&run_id, 0)?;
            if follow {
                return follow_events(&root, &run_id, json);
            }
            if json {
                print_wire(&wire::EventList::from_records(&run_id, &events));
            } else {
                output::print_events(&events);
            }
            Ok(0)
        }
        Command::Cancel { run_id, json } => cancel_command(&state_root(cli.home)?, &run_id, json),
        Command::Daemon { command } => daemon_command(&state_root(cli.home)?, command),
        Command::Mcp { server } => mcp_command(&state_root(cli.home)?, server),
        Command::Ui { no_open, json } => ui(&state_root(cli.home)?, no_open, json),
        Command::Plan { command: Some(PlanCommand::Show { plan_name, json }), .. } => {
            print_plan(&open_engine(cli.home)?.load_plan(&plan_name)?, json);
            Ok(0)
        }
        Command::Plan { command: None, request, json } => plan_command(cli.home, request, json),
        Command::Plans { json } => plans_command(cli.home, json),
        Command::ExecutePlan { plan_name, plan_id, checksum, json } => {
            let root = state_root(cli.home)?;
            let body = wire::to_value(&wire::requests::ExecutePlan {
                plan_id,
                plan_checksum: checksum,
                approval: Some(wire::requests::ApprovedVia::Cli),
            });
            let answer = follow::post_and_follow(&root, &format!("/plans/{plan_name}/execute"), &body, json)?;
            finish_run_output(&answer, json)
        }
        Command::Kernel { command } => crate::kernel::run(&state_root(cli.home)?, command),
        Command::Target { command } => target_command(&open_engine(cli.home)?, command),
        Command::User { command } => crate::team::user(&state_root(cli.home)?, command),
        Command::Role { command } => crate::team::role(&state_root(cli.home)?, command),
        Command::Grant { command } => crate::team::grant(&state_root(cli.home)?, command),
        Command::Policy { command } => crate::team::policy(&state_root(cli.home)?, command),
        Command::Audit { principal, action, object, limit, json } => {
            crate::team::audit(&state_root(cli.home)?, principal, action, object, limit, json)
        }
        Command::Whoami { json } => crate::team::whoami(&state_root(cli.home)?, json),
        Command::Secret { command } => crate::team::secret(&open_engine(cli.home)?, command),
        Command::Quota { command, json } => {
            crate::team::quota(&state_root(cli.home)?, command.unwrap_or(crate::cli::QuotaCommand::List { json }))
        }
        Command::Doc { command } => crate::docs::run(&open_engine(cli.home)?, command),
        Command::Completions { shell } => crate::completions::completions(shell),
        Command::Man { out } => crate::completions::man(out.as_deref()),
    }
}

/// `cairn run`: in this process, or submitted to the daemon and followed.
fn run_command(home: Option<PathBuf>, args: RunArgs) -> Result<u8, Failure> {
    let RunArgs { workflow, input, run_id, resume_interrupted, parallel, in_process, json } = args;
    let root = state_root(home)?;
    let input = read_input(&input)?;
    if in_process {
        let req = RunRequest {
            workflow,
            run_id,
            input,
            resume_interrupted,
            parallelism: parallel as usize,
            owner: Some(cairn_engine::process::this_process()),
            thread_id: Some("cli".into()),
            stop: None,
            by: Some(crate::input::owner_caller()),
            // The owner's own run in this process: quotas bind what is submitted to the daemon.
            admission: Default::default(),
        };
        let mut observer = observer(json);
        let view = in_process_engine(&root)?.run(&req, observer.as_mut())?;
        drop(observer);
        return finish_run_output(&output::RunAnswer::of_view(&view), json);
    }
    let run = SubmitRun {
        thread_id: "cli".into(),
        workflow: Some(workflow),
        version: None,
        input: Some(input),
        run_id,
        replay: None,
        parallel: Some(parallel),
    };
    finish_run_output(&follow::submit_and_follow(&root, &run, json)?, json)
}

/// `cairn replay`: a dry run, in this process, or submitted to the daemon and followed.
fn replay_command(home: Option<PathBuf>, args: ReplayArgs) -> Result<u8, Failure> {
    let ReplayArgs {
        source_run_id,
        steps,
        input,
        run_id,
        version,
        resume_interrupted,
        parallel,
        dry_run,
        in_process,
        json,
    } = args;
    let root = state_root(home)?;
    let input = input.as_deref().map(read_input).transpose()?;
    if dry_run || in_process {
        let engine = if dry_run { Engine::open(&root)? } else { in_process_engine(&root)? };
        let req = ReplayRequest {
            source_run_id,
            step_ids: steps,
            input,
            run_id,
            version,
            resume_interrupted,
            parallelism: parallel as usize,
            owner: Some(cairn_engine::process::this_process()),
            thread_id: Some("cli".into()),
            ..ReplayRequest::default()
        };
        if !dry_run {
            let mut observer = observer(json);
            let (view, _) = engine.replay(&req, observer.as_mut())?;
            drop(observer);
            return finish_run_output(&output::RunAnswer::of_view(&view), json);
        }
        let prepared = engine.dry_run_replay(&req)?;
        let jobs = engine.predict_pipeline_jobs(&prepared);
        if json {
            print_wire(&wire::ReplayPreview::from_prepared(&prepared).with_jobs(&jobs));
        } else {
            output::print_dry_run(&prepared, &jobs);
        }
        return Ok(0);
    }
    // The daemon finds the source's workflow: a replay stays within it.
    let run = SubmitRun {
        thread_id: "cli".into(),
        workflow: None,
        version,
        input,
        run_id,
        replay: Some(ReplayDirective { source_run_id: source_run_id.into_string(), step_ids: steps }),
        parallel: Some(parallel),
    };
    finish_run_output(&follow::submit_and_follow(&root, &run, json)?, json)
}

/// `cairn export`: a run's or a verification's RO-Crate, as a folder or a zip.
fn export_command(
    home: Option<PathBuf>,
    run_id: Option<RunId>,
    verification: Option<String>,
    (ro_crate, zip): (Option<PathBuf>, Option<PathBuf>),
    no_data: bool,
    json: bool,
) -> Result<u8, Failure> {
    let subject = match (run_id, verification) {
        (_, Some(id)) => ExportSubject::Verification(id.clone()),
        (Some(id), None) => ExportSubject::Run(id.clone()),
        (None, None) => return Err(Failure::usage("name a run, or a verification with --verification ID")),
    };
    let out = match (ro_crate, zip) {
        (_, Some(file)) => ExportOut::Zip(file.clone()),
        (Some(dir), None) => ExportOut::Dir(dir.clone()),
        (None, None) => ExportOut::Dir(PathBuf::from(match &subject {
            ExportSubject::Run(id) => format!("{id}.crate"),
            other => format!("{}.crate", other.slug()),
        })),
    };
    let request = ExportRequest { subject, out, data: !no_data };
    let done = wire::ExportResult::from_engine(&open_engine(home)?.export(&request)?);
    if json {
        print_wire(&done);
    } else {
        println!("{}", done.path);
        eprintln!(
            "wrote {} files ({} bytes; {} artifacts and {} input files copied)",
            done.files, done.bytes, done.artifacts, done.input_files
        );
    }
    Ok(0)
}

/// `cairn plan`: makes a plan (and its jobs' forecast), creating nothing else.
fn plan_command(home: Option<PathBuf>, request: wire::PlanRun, json: bool) -> Result<u8, Failure> {
    let engine = open_engine(home)?;
    let plan = engine.make_plan(&crate::input::owner_caller(), &request.into_request()?)?;
    // A replay plan also says what its pipeline steps would run (a forecast beside the
    // plan, as `POST /plans` answers it).
    let jobs = engine.predict_plan_jobs(&plan);
    if json && !jobs.is_empty() {
        let mut v = serde_json::to_value(&plan).unwrap_or_default();
        v["jobs"] = wire::to_value(&wire::ReplayPreview::predicted(&jobs));
        print_json(&v);
    } else {
        print_plan(&plan, json);
    }
    if !json {
        output::print_predictions(&jobs);
        eprintln!(
            "\nnothing was created. To execute exactly this plan:\n  cairn execute-plan {} --id {} --checksum {}",
            plan.plan_name, plan.plan_id, plan.plan_checksum
        );
    }
    Ok(0)
}

/// `cairn plans`: every plan, and the run each was executed as.
fn plans_command(home: Option<PathBuf>, json: bool) -> Result<u8, Failure> {
    let list = wire::PlanList::from_listings(open_engine(home)?.plans()?);
    if json {
        print_wire(&list);
    } else if list.plans.is_empty() {
        eprintln!("no plans yet; make one with `cairn plan WORKFLOW --input F --run-dir ABS_DIR`");
    } else {
        for p in &list.plans {
            let run = p.run_id.clone();
            println!(
                "{:<32} {}@{}  {}:{}  {}",
                p.plan_name,
                p.workflow,
                p.version,
                p.target,
                p.run_dir,
                run.map(|r| format!("executed as {r}")).unwrap_or_else(|| "not executed".into())
            );
        }
    }
    Ok(0)
}

/// `cairn mcp SERVER`: an MCP server on stdio, calling the daemon with the token of its role.
fn mcp_command(root: &Path, server: McpServer) -> Result<u8, Failure> {
    let (kind, role) = match server {
        McpServer::Workbench => (crate::mcp::Kind::Workbench, auth::Role::Operator),
        McpServer::Compute => (crate::mcp::Kind::Compute, auth::Role::Operator),
        McpServer::App => (crate::mcp::Kind::App, auth::Role::Viewer),
    };
    let (base, token) = Client::endpoint(root, role)?;
    crate::mcp::serve_stdio(kind, crate::mcp::ApiClient::fixed(&base, &token))
}

/// `cairn cancel RUN`: asks the daemon, which owns the run's processes.
fn cancel_command(root: &Path, run_id: &str, json: bool) -> Result<u8, Failure> {
    let client = Client::connect(root)?;
    let answer = client.post(&format!("/runs/{run_id}/cancel"), &json!({}))?;
    if answer.status != 200 {
        return Err(failure_of(&answer));
    }
    if json {
        print_json(&answer.body);
    } else {
        println!("run {run_id} CANCELLED");
    }
    Ok(0)
}

fn workflow_command(engine: &Engine, command: WorkflowCommand) -> Result<u8, Failure> {
    match command {
        WorkflowCommand::Add { path, json } => {
            // A refused folder prints every problem on stderr, one a line (the API and MCP give
            // them as data).
            let added = engine.add_workflow(&crate::input::owner_caller(), &path)?;
            if json {
                print_wire(&wire::WorkflowAdded::from_added(&added));
            } else {
                let r = &added.record;
                let verb = if added.newly_registered { "registered" } else { "already registered (same content)" };
                println!("{}@{} {verb}: {} steps, digest {}", r.name, r.version, r.spec.steps.len(), &r.digest[..16]);
            }
        }
        WorkflowCommand::List { json } => {
            let all = engine.workflows()?;
            if json {
                print_wire(&wire::WorkflowList::from_records(&all));
            } else if all.is_empty() {
                eprintln!("no workflows registered; add one with `cairn workflow add PATH`");
            } else {
                println!("{:<32} {:<12} {:>5}  DIGEST", "NAME", "VERSION", "STEPS");
                for w in &all {
                    println!("{:<32} {:<12} {:>5}  {}", w.name, w.version, w.spec.steps.len(), &w.digest[..16]);
                }
            }
        }
        WorkflowCommand::Show { workflow, json } => {
            let wf = engine.load_workflow(&workflow)?;
            if json {
                print_wire(&wire::WorkflowDetail::from_loaded(&wf));
            } else {
                output::print_workflow(&wf);
            }
        }
    }
    Ok(0)
}

fn target_command(engine: &Engine, command: TargetCommand) -> Result<u8, Failure> {
    match command {
        TargetCommand::Add { target, json } => {
            let spec = engine.add_target(&crate::input::owner_caller(), &target.into_request())?;
            if json {
                print_json(&wire::to_value(&spec));
            } else {
                println!("target {} added; check it with `cairn target probe {}`", spec.name, spec.name);
            }
            Ok(0)
        }
        TargetCommand::List { json } => {
            if json {
                print_json(&wire::targets_json(&engine.targets_overview()?));
            } else {
                println!("{:<20} {:<32} {:<8} WORKSPACE", "NAME", "SSH", "EXECUTOR");
                println!(
                    "{:<20} {:<32} {:<8} {}",
                    "local",
                    "(this machine)",
                    "process",
                    engine.state().runs().display()
                );
                for t in &engine.targets()? {
                    let ssh = format!("{}@{}:{}", t.ssh.user, t.ssh.host, t.ssh.port);
                    println!("{:<20} {:<32} {:<8} {}", t.name, ssh, t.executor.as_str(), t.workspace_root);
                }
            }
            Ok(0)
        }
        TargetCommand::Probe { name, json } => {
            let probed = engine.probe_target(&name)?;
            if json {
                print_json(&wire::to_value(&probed));
            } else {
                // The probe's facts are the target's own report (probe.py), kept as it gave them:
                // a field a host lacks is shown as `?`.
                let o = &probed.observed;
                println!(
                    "target {name}: {} ({}, kernel {})",
                    o["hostname"].as_str().unwrap_or("?"),
                    o["os"].as_str().unwrap_or("?"),
                    o["kernel"].as_str().unwrap_or("?")
                );
                println!("  cpus {}  memory {} bytes", o["cpus"], o["memory"]["total_bytes"]);
                let ws = &o["workspace"];
                println!(
                    "  workspace {} exists={} writable={} free {} bytes",
                    ws["path"].as_str().unwrap_or(""),
                    ws["exists"],
                    ws["writable"],
                    ws["free_bytes"]
                );
                for tool in ["python", "snakemake", "nextflow", "java"] {
                    let v = &o[tool];
                    let text = if v.is_null() {
                        "not found".to_string()
                    } else {
                        v["version"].as_str().unwrap_or("?").to_string()
                    };
                    println!("  {tool:<10} {text}");
                }
                println!("  slurm      {}", o["slurm"]);
                if o["docker_host"]["refused"] == true {
                    println!("  DOCKER_HOST points off the host: refused");
                }
            }
            Ok(0)
        }
        TargetCommand::Remove { name, json } => {
            engine.remove_target(&crate::input::owner_caller(), &name)?;
            if json {
                print_json(&json!({"removed": name}));
            } else {
                println!("target {name} removed");
            }
            Ok(0)
        }
    }
}

fn print_plan(plan: &cairn_core::plan::Plan, json: bool) {
    if json {
        print_json(&serde_json::to_value(plan).unwrap_or_default());
        return;
    }
    println!("plan {}  ({})", plan.plan_name, plan.plan_id);
    println!("  workflow  {}@{} (snapshot {})", plan.workflow, plan.version, &plan.workflow_digest[..16]);
    println!("  target    {}", plan.target);
    println!("  run_dir   {}", plan.run_dir);
    if let Some(r) = &plan.readiness {
        let o = &r.observed;
        let programs: Vec<String> =
            o.programs.iter().map(|(name, path)| format!("{name}={}", path.as_deref().unwrap_or("missing"))).collect();
        println!(
            "  ready     {} executor; {} writable, run_dir absent; {} free{}{}",
            r.executor.as_str(),
            o.parent,
            o.free_bytes.map(|b| format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)).unwrap_or("?".into()),
            if o.inside_workspace_root { "" } else { "; outside the workspace root" },
            if programs.is_empty() { String::new() } else { format!("; {}", programs.join(" ")) },
        );
    }
    if let Some(r) = &plan.replay {
        let requested = serde_json::to_string(&r.step_ids).unwrap_or_default();
        println!("  replay of {} (requested: {requested})", r.source_run_id);
        for d in &r.decisions {
            println!("    {:<24} {}", d.step_id, d.text);
        }
    }
    println!("  commands");
    for c in &plan.commands {
        println!("    {:<24} {}", c.step_id, c.argv.join(" "));
        if !c.secrets.is_empty() {
            println!("    {:<24} receives secrets {}", "", c.secrets.join(", "));
        }
    }
    println!("  input files");
    if plan.inputs.is_empty() {
        println!("    (none)");
    }
    for f in &plan.inputs {
        println!("    {}  sha256 {}", f.path, f.sha256);
    }
    println!("  effects");
    for e in &plan.effects {
        println!("    {}", e.describe());
    }
    println!("  checksum  {}", plan.plan_checksum);
}

/// The engine an `--in-process` run executes in: not on a PostgreSQL registry, whose daemon may
/// be on another host and could not tell whether this process is alive (it would take the run
/// over as abandoned).
fn in_process_engine(root: &Path) -> Result<Engine, Failure> {
    let engine = Engine::builder(root).options(crate::input::engine_options()?).open()?;
    if let cairn_engine::RegistryPlace::Postgres { url } = engine.registry() {
        return Err(Failure::usage(format!(
            "--in-process runs only on a state root's own SQLite registry; this one's registry is {url}, shared by \
             daemons, so submit the run to the daemon (leave out --in-process)"
        )));
    }
    Ok(engine)
}

/// `--database URL`: the state root's registry from now on (checked, migrated and recorded before
/// the daemon starts, so a wrong URL is said here, not in the daemon's log). Refused while a daemon
/// serves the state root from another registry.
fn choose_database(root: &Path, url: String) -> Result<(), Failure> {
    if presence::running(root).is_some() {
        let recorded = cairn_engine::StateRoot::open(root)?.recorded_database()?;
        if recorded.as_deref() != Some(url.as_str()) {
            return Err(Failure::usage(format!(
                "a daemon already serves {} from {}; stop it first (`cairn daemon stop`) to give it --database {}",
                root.display(),
                recorded
                    .as_deref()
                    .map_or_else(|| "its SQLite registry".to_string(), cairn_engine::redact_database_url),
                cairn_engine::redact_database_url(&url)
            )));
        }
        return Ok(());
    }
    Engine::builder(root).database(Some(url)).open()?;
    Ok(())
}

fn observer(json: bool) -> Box<dyn Observer> {
    if !json && std::io::stderr().is_terminal() { Box::new(TerminalProgress::default()) } else { Box::new(NoProgress) }
}

/// `cairn events RUN --follow`: every event so far, then new ones as they come, until the run
/// finishes (one JSON object per line with --json), and each change of its wait for its
/// environment. Ctrl-C stops following.
fn follow_events(root: &Path, run_id: &str, json: bool) -> Result<u8, Failure> {
    let client = Client::connect(root)?;
    let events = client.follow(run_id, 0)?;
    for item in events {
        if json {
            // A wait's notice is a line too: `{"notice": "waiting", "waiting": {…} | null}`.
            println!("{}", serde_json::to_string(&item).unwrap_or_default());
            continue;
        }
        let event = match item {
            wire::Followed::Event(event) => event,
            wire::Followed::Waiting(notice) => {
                match &notice.waiting {
                    Some(w) => println!("     -  waiting for its environment\n{}", output::waiting_line(w)),
                    None => println!("     -  its environment is back; it goes on"),
                }
                continue;
            }
        };
        {
            let step = event.step_id.as_deref().map(|s| format!(" {s}")).unwrap_or_default();
            let attempt = event.attempt.map(|a| format!(" attempt {a}")).unwrap_or_default();
            println!("{:>6}  {}  {}{step}{attempt}  {}", event.seq, event.at, event.kind, event.data);
        }
    }
    Ok(0)
}

fn daemon_command(root: &Path, command: DaemonCommand) -> Result<u8, Failure> {
    match command {
        DaemonCommand::Start { port, workers, no_spare_kernel, database, lease_secs, log_format, json } => {
            if let Some(url) = database {
                choose_database(root, url)?;
            }
            let opts = StartOptions {
                idle_exit: None,
                port,
                workers: workers.map(usize::from),
                no_spare_kernel,
                lease_secs: Some(lease_secs),
                log_format,
            };
            let (info, started) = presence::start(root, &opts)?;
            if json {
                print_json(&json!({"running": true, "pid": info.pid, "url": info.url, "started": started}));
            } else if started {
                println!("cairn daemon started: pid {}, {}", info.pid, info.url);
            } else {
                println!(
                    "cairn daemon already running: pid {} holds {}, {}",
                    info.pid,
                    presence::lock_path(root).display(),
                    info.url
                );
            }
            Ok(0)
        }
        DaemonCommand::Stop { json } => {
            let stopped = presence::stop(root, std::time::Duration::from_secs(30))?;
            if json {
                print_json(&json!({"running": false, "stopped_pid": stopped}));
            } else {
                match stopped {
                    Some(pid) => println!("cairn daemon stopped (pid {pid})"),
                    None => println!("no cairn daemon runs for {}", root.display()),
                }
            }
            Ok(0)
        }
        DaemonCommand::Status { json } => {
            let status = presence::status(root);
            if json {
                print_json(&serde_json::to_value(&status).unwrap_or_default());
            } else if status.running {
                println!(
                    "cairn daemon running: pid {}, {}",
                    status.pid.map(|p| p.to_string()).unwrap_or_else(|| "?".into()),
                    status.url.as_deref().unwrap_or("(starting)")
                );
            } else {
                println!("no cairn daemon runs for {}", root.display());
            }
            Ok(0)
        }
        DaemonCommand::List { json } => {
            let answer = Client::connect(root)?.get("/daemons")?;
            if answer.status != 200 {
                return Err(failure_of(&answer));
            }
            if json {
                print_json(&answer.body);
            } else {
                let listed: wire::DaemonsBody = serde_json::from_value(answer.body).map_err(|e| {
                    Failure::of_answer(500, "internal", format!("GET /daemons answered an unexpected body: {e}"))
                })?;
                output::print_daemons(&listed);
            }
            Ok(0)
        }
        DaemonCommand::Run { port, idle_exit, workers, no_spare_kernel, database, lease_secs, log_format } => {
            let workers = workers
                .map(usize::from)
                .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2));
            daemon::serve(
                root,
                ServeOptions {
                    port,
                    idle_exit: idle_exit.map(std::time::Duration::from_secs),
                    workers,
                    spare_kernel: !no_spare_kernel,
                    database,
                    lease: std::time::Duration::from_secs(lease_secs),
                    log_format,
                },
            )?;
            Ok(0)
        }
    }
}

/// Prints a run result and maps its status to the exit code.
/// Prints `value` as JSON for a script, or for a person with `human`; exit 0.
/// `cairn doctor`: exit 0 when every check passed (or does not apply), 1 when there is a finding.
fn doctor_command(home: Option<PathBuf>, json: bool) -> Result<u8, Failure> {
    let report = wire::Doctor::from_engine(&open_engine(home)?.doctor());
    if json {
        print_wire(&report);
    } else {
        output::print_doctor(&report);
    }
    Ok(if report.healthy { 0 } else { 1 })
}

fn print_either<T: serde::Serialize>(json: bool, value: &T, human: impl FnOnce(&T)) -> Result<u8, Failure> {
    if json {
        print_wire(value);
    } else {
        human(value);
    }
    Ok(0)
}

/// A run's answer printed, and the exit code its status gives (4 for a status this build cannot
/// read, as for a run left unfinished).
pub fn finish_run_output(answer: &output::RunAnswer, json: bool) -> Result<u8, Failure> {
    if json {
        print_wire(&answer.run);
    } else {
        output::print_run(answer, false);
    }
    Ok(answer.status().map_or(4, exit_code))
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

/// `cairn ui`: a login link for the web app, made here from the Viewer token (see
/// `auth::login_code`), printed, and opened when a browser can be started.
fn ui(root: &Path, no_open: bool, json: bool) -> Result<u8, Failure> {
    let (url, viewer) = Client::endpoint(root, auth::Role::Viewer)?;
    let (code, expires) = auth::login_code(&viewer, jiff::Timestamp::now().as_millisecond());
    let login_url = format!("{url}/#login={code}");
    let opened = !no_open && open_browser(&login_url);
    if json {
        print_json(&json!({
            "url": format!("{url}/"),
            "login_url": login_url,
            "expires_at": crate::wire::time(expires),
            "opened": opened,
        }));
    } else {
        println!("{login_url}");
        eprintln!(
            "{} this link within 2 minutes; it works once (run `cairn ui` again for another). The web app reads with \
             the Viewer token and cannot change anything.",
            if opened { "Opened" } else { "Open" }
        );
    }
    Ok(0)
}

/// Starts `$BROWSER`, else `xdg-open` when there is a display, with the link as its one argument
/// (no shell). Whether one was started; it is not waited for.
fn open_browser(link: &str) -> bool {
    let display = ["DISPLAY", "WAYLAND_DISPLAY"].iter().any(|v| std::env::var_os(v).is_some_and(|d| !d.is_empty()));
    let program = match std::env::var("BROWSER") {
        Ok(b) if !b.trim().is_empty() => b,
        _ if display => "xdg-open".to_string(),
        _ => return false,
    };
    std::process::Command::new(program.trim())
        .arg(link)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .is_ok()
}
