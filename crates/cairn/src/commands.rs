//! One function per command: open the engine, call the use case, print the result.

use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};

use cairn_core::status::RunStatus;
use cairn_engine::plan::PlanRequest;
use cairn_engine::registry::{self, add_workflow, load_workflow};
use cairn_engine::replay::ReplayRequest;
use cairn_engine::runner::{NoProgress, Observer, RunReport, RunRequest};
use cairn_engine::target::AddTarget;
use cairn_engine::verify::VerifyRequest;
use cairn_engine::{Engine, EngineError};
use serde_json::{Value, json};

use crate::cli::{Cli, Command, DaemonCommand, ExecutorArg, McpServer, PlanCommand, TargetCommand, WorkflowCommand};
use crate::client::{Client, failure_of};
use crate::daemon::{self, ServeOptions, StartOptions};
use crate::output::{self, print_json};
use crate::progress::TerminalProgress;
use crate::{Failure, quickstart, remote};

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
        Command::Quickstart { json } => quickstart::run(&state_root(cli.home)?, json),
        Command::Workflow { command } => {
            let engine = open_engine(cli.home)?;
            match command {
                WorkflowCommand::Add { path, json } => workflow_add(&engine, &path, json),
                WorkflowCommand::List { json } => workflow_list(&engine, json),
                WorkflowCommand::Show { workflow, json } => workflow_show(&engine, &workflow, json),
            }
        }
        Command::Run { workflow, input, run_id, resume_interrupted, parallel, in_process, json } => {
            let root = state_root(cli.home)?;
            let input = read_input(&input)?;
            if in_process {
                let engine = Engine::open(&root)?;
                let wf = load_workflow(engine.store.as_ref(), &workflow)?;
                let req = RunRequest {
                    run_id,
                    input,
                    resume_interrupted,
                    parallelism: parallel as usize,
                    owner: Some(this_process()),
                    thread_id: Some("cli".into()),
                    stop: None,
                };
                let mut observer = observer(json);
                let report = engine.run(&wf, &req, observer.as_mut())?;
                drop(observer);
                return finish_run_output(&report, json);
            }
            let (name, version) = registry::parse_reference(&workflow)?;
            let body = json!({
                "thread_id": "cli",
                "agent_id": name,
                "agent_version": version,
                "input": input,
                "run_id": run_id,
                "parallel": parallel,
            });
            let report = remote::submit_and_follow(&root, &body, json)?;
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
            in_process,
            json,
        } => {
            let root = state_root(cli.home)?;
            let input = input.as_deref().map(read_input).transpose()?;
            if dry_run || in_process {
                let engine = Engine::open(&root)?;
                let req = ReplayRequest {
                    source_run_id,
                    step_ids: steps,
                    input,
                    run_id,
                    version,
                    resume_interrupted,
                    parallelism: parallel as usize,
                    owner: Some(this_process()),
                    thread_id: Some("cli".into()),
                    ..ReplayRequest::default()
                };
                if in_process && !dry_run {
                    let mut observer = observer(json);
                    let (report, _) = engine.replay(&req, observer.as_mut())?;
                    drop(observer);
                    return finish_run_output(&report, json);
                }
                let prepared = engine.dry_run_replay(&req)?;
                if json {
                    print_json(&output::dry_run_json(&prepared));
                } else {
                    output::print_dry_run(&prepared);
                }
                return Ok(0);
            }
            // The API names the workflow; a replay stays within its source's.
            let source =
                Engine::open(&root)?.store.run(&source_run_id).map_err(EngineError::from)?.ok_or_else(|| {
                    Failure::usage(format!("source run `{source_run_id}` was not found; list runs with `cairn runs`"))
                })?;
            let body = json!({
                "thread_id": "cli",
                "agent_id": source.workflow,
                "agent_version": version,
                "input": input,
                "run_id": run_id,
                "parallel": parallel,
                "replay": {"source_run_id": source_run_id, "step_ids": steps},
            });
            let report = remote::submit_and_follow(&root, &body, json)?;
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
            let runs = engine.store.runs(&cairn_core::store::RunQuery::newest(limit)).map_err(EngineError::from)?;
            if json {
                print_json(&output::runs_json(engine.store.as_ref(), &runs).map_err(EngineError::from)?);
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
        Command::Events { run_id, follow, json } => {
            let root = state_root(cli.home)?;
            let engine = Engine::open(&root)?;
            engine
                .store
                .run(&run_id)
                .map_err(EngineError::from)?
                .ok_or_else(|| Failure::usage(format!("run `{run_id}` was not found; list runs with `cairn runs`")))?;
            if follow {
                return follow_events(&root, &run_id, json);
            }
            let events = engine.store.events(&run_id, 0).map_err(EngineError::from)?;
            if json {
                print_json(&output::events_json(&run_id, &events));
            } else {
                output::print_events(&events);
            }
            Ok(0)
        }
        Command::Cancel { run_id, json } => {
            let root = state_root(cli.home)?;
            let client = Client::connect(&root)?;
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
        Command::Daemon { command } => daemon_command(&state_root(cli.home)?, command),
        Command::Mcp { server } => {
            let root = state_root(cli.home)?;
            let (kind, role) = match server {
                McpServer::Workbench => (crate::mcp::Kind::Workbench, crate::daemon::auth::Role::Operator),
                McpServer::Compute => (crate::mcp::Kind::Compute, crate::daemon::auth::Role::Operator),
                McpServer::App => (crate::mcp::Kind::App, crate::daemon::auth::Role::Viewer),
            };
            let (base, token) = crate::client::Client::endpoint(&root, role)?;
            crate::mcp::serve_stdio(kind, crate::mcp::Daemon::fixed(&base, &token))
        }
        Command::Ui { no_open, json } => ui(&state_root(cli.home)?, no_open, json),
        Command::Plan { command: Some(PlanCommand::Show { plan_name, json }), .. } => {
            let engine = open_engine(cli.home)?;
            let plan = engine.load_plan(&plan_name)?;
            print_plan(&plan, json);
            Ok(0)
        }
        Command::Plan { command: None, workflow, input, replay, steps, target, run_dir, name, json } => {
            let engine = open_engine(cli.home)?;
            let Some(run_dir) = run_dir else {
                return Err(Failure::usage("cairn plan needs --run-dir ABS_DIR"));
            };
            let input = match input {
                Some(f) => read_input(&f)?,
                None => Value::Null,
            };
            let workflow = match (&replay, workflow) {
                (_, Some(w)) => w,
                (Some(source), None) => {
                    engine.store.run(source).map_err(EngineError::from)?.map(|r| r.workflow).ok_or_else(|| {
                        Failure::usage(format!("source run `{source}` was not found; list runs with `cairn runs`"))
                    })?
                }
                (None, None) => return Err(Failure::usage("cairn plan needs WORKFLOW and --input FILE")),
            };
            let replay = replay.map(|source| (source, steps));
            let plan = engine.make_plan(&PlanRequest { workflow, input, target, run_dir, name, replay })?;
            print_plan(&plan, json);
            if !json {
                eprintln!(
                    "\nnothing was created. To execute exactly this plan:\n  cairn execute-plan {} --id {} --checksum {}",
                    plan.plan_name, plan.plan_id, plan.plan_checksum
                );
            }
            Ok(0)
        }
        Command::Plans { json } => {
            let engine = open_engine(cli.home)?;
            let list = crate::wire::PlanList::from_store(&engine)?;
            if json {
                print_json(&serde_json::to_value(&list).unwrap_or_default());
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
        Command::ExecutePlan { plan_name, plan_id, checksum, json } => {
            let root = state_root(cli.home)?;
            let body = json!({"plan_id": plan_id, "plan_checksum": checksum});
            let report = remote::post_and_follow(&root, &format!("/plans/{plan_name}/execute"), &body, json)?;
            finish_run_output(&report, json)
        }
        Command::Kernel { command } => crate::kernel::run(&state_root(cli.home)?, command),
        Command::Target { command } => target_command(&open_engine(cli.home)?, command),
    }
}

fn target_command(engine: &Engine, command: TargetCommand) -> Result<u8, Failure> {
    use cairn_core::target::Executor;
    match command {
        TargetCommand::Add { name, ssh, identity, known_hosts, workspace_root, executor, partition, account, json } => {
            let executor = match executor {
                ExecutorArg::Process => Executor::Process,
                ExecutorArg::Slurm => Executor::Slurm,
            };
            let spec = engine.add_target(&AddTarget {
                name,
                ssh,
                identity,
                known_hosts,
                workspace_root,
                executor,
                partition,
                account,
            })?;
            if json {
                print_json(&serde_json::to_value(&spec).unwrap_or_default());
            } else {
                println!("target {} added; check it with `cairn target probe {}`", spec.name, spec.name);
            }
            Ok(0)
        }
        TargetCommand::List { json } => {
            let targets = engine.store.targets().map_err(EngineError::from)?;
            if json {
                print_json(&engine.targets_overview()?);
            } else {
                println!("{:<20} {:<32} {:<8} WORKSPACE", "NAME", "SSH", "EXECUTOR");
                println!("{:<20} {:<32} {:<8} {}", "local", "(this machine)", "process", engine.state.runs().display());
                for t in &targets {
                    let ssh = format!("{}@{}:{}", t.ssh.user, t.ssh.host, t.ssh.port);
                    let executor = serde_json::to_value(t.executor).unwrap_or_default();
                    println!("{:<20} {:<32} {:<8} {}", t.name, ssh, executor.as_str().unwrap_or(""), t.workspace_root);
                }
            }
            Ok(0)
        }
        TargetCommand::Probe { name, json } => {
            let probed = engine.probe_target(&name)?;
            if json {
                print_json(&probed);
            } else {
                let o = &probed["observed"];
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
            let removed = engine.store.remove_target(&name).map_err(EngineError::from)?;
            if !removed {
                return Err(Failure::usage(format!("target `{name}` is not configured; see `cairn target list`")));
            }
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
        let o = &r["observed"];
        let programs: Vec<String> = o["programs"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(name, path)| format!("{name}={}", path.as_str().unwrap_or("missing")))
            .collect();
        println!(
            "  ready     {} executor; {} writable, run_dir absent; {} free{}{}",
            r["executor"].as_str().unwrap_or("?"),
            o["parent"].as_str().unwrap_or("?"),
            o["free_bytes"]
                .as_u64()
                .map(|b| format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64))
                .unwrap_or("?".into()),
            if o["inside_workspace_root"] == true { "" } else { "; outside the workspace root" },
            if programs.is_empty() { String::new() } else { format!("; {}", programs.join(" ")) },
        );
    }
    if let Some(r) = &plan.replay {
        println!("  replay of {} (requested: {})", r["source_run_id"].as_str().unwrap_or(""), r["step_ids"]);
        for d in r["decisions"].as_array().into_iter().flatten() {
            println!("    {:<24} {}", d["step_id"].as_str().unwrap_or(""), d["text"].as_str().unwrap_or(""));
        }
    }
    println!("  commands");
    for c in &plan.commands {
        println!("    {:<24} {}", c.step_id, c.argv.join(" "));
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

/// This process as a run owner (`pid:start_time`), so a daemon can tell when it is gone.
fn this_process() -> String {
    let pid = std::process::id();
    format!("{pid}:{}", cairn_exec::process_start_time(pid).unwrap_or(0))
}

fn observer(json: bool) -> Box<dyn Observer> {
    if !json && std::io::stderr().is_terminal() { Box::new(TerminalProgress::new()) } else { Box::new(NoProgress) }
}

/// `cairn events RUN --follow`: every event so far, then new ones as they come, until the run
/// finishes (one JSON object per line with --json). Ctrl-C stops following.
fn follow_events(root: &Path, run_id: &str, json: bool) -> Result<u8, Failure> {
    let client = Client::connect(root)?;
    let events = client.follow(run_id, 0)?;
    for event in events {
        if json {
            println!("{}", serde_json::to_string(&event).unwrap_or_default());
        } else {
            let step = event["step_id"].as_str().map(|s| format!(" {s}")).unwrap_or_default();
            let attempt = event["attempt"].as_u64().map(|a| format!(" attempt {a}")).unwrap_or_default();
            println!(
                "{:>6}  {}  {}{step}{attempt}  {}",
                event["seq"],
                event["at"].as_str().unwrap_or(""),
                event["kind"].as_str().unwrap_or(""),
                event["data"]
            );
        }
    }
    Ok(0)
}

fn daemon_command(root: &Path, command: DaemonCommand) -> Result<u8, Failure> {
    match command {
        DaemonCommand::Start { port, workers, json } => {
            let opts = StartOptions { idle_exit: None, port, workers: workers.map(usize::from) };
            let (info, started) = daemon::start(root, &opts)?;
            if json {
                print_json(&json!({"running": true, "pid": info.pid, "url": info.url, "started": started}));
            } else if started {
                println!("cairn daemon started: pid {}, {}", info.pid, info.url);
            } else {
                println!(
                    "cairn daemon already running: pid {} holds {}, {}",
                    info.pid,
                    daemon::lock_path(root).display(),
                    info.url
                );
            }
            Ok(0)
        }
        DaemonCommand::Stop { json } => {
            let stopped = daemon::stop(root, std::time::Duration::from_secs(30))?;
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
            let status = daemon::status(root);
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
        DaemonCommand::Run { port, idle_exit, workers } => {
            let workers = workers
                .map(usize::from)
                .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2));
            daemon::serve(
                root,
                ServeOptions { port, idle_exit: idle_exit.map(std::time::Duration::from_secs), workers },
            )?;
            Ok(0)
        }
    }
}

pub fn report_of(engine: &Engine, run_id: &str) -> Result<RunReport, Failure> {
    Ok(engine.run_report(run_id)?)
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

/// `cairn ui`: a login link for the web app, made here from the Viewer token (see
/// `auth::login_code`), printed, and opened when a browser can be started.
fn ui(root: &Path, no_open: bool, json: bool) -> Result<u8, Failure> {
    let (url, viewer) = Client::endpoint(root, daemon::auth::Role::Viewer)?;
    let (code, expires) = daemon::auth::login_code(&viewer, jiff::Timestamp::now().as_millisecond());
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
