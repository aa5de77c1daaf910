//! The "act" of an attempt: launch it and follow it to its end, re-attach to one a predecessor
//! launched, stop an orphan. A [`Launcher`] does the IO and reports what happened as an
//! [`AttemptEnd`]; the runner records it under the attempt's token, as
//! [`cairn_core::attempt::decide`] says. [`Processes`] is the real one: a plain tool here runs in
//! the local sandbox; a step on a target, and a pipeline controller anywhere, goes through the
//! step agent. Tests inject a scripted one.

use std::path::{Path, PathBuf};
use std::time::Duration;

use std::sync::atomic::{AtomicBool, Ordering};

use cairn_core::artifact::{Artifact, OutputDecl};
use cairn_core::attempt::AttemptEnd;
use cairn_core::ids::RunId;
use cairn_core::pipeline::{JobEvent, SnakemakeLog, Summary};
use cairn_core::plan::InputFile;
use cairn_core::signature::ToolFile;
use cairn_core::status::Outcome;
use cairn_core::store::{ProcessInfo, RemoteProcess};
use cairn_core::workflow::{StepDef, ToolDef, ToolKind};
use cairn_exec::{ProcessIdentity, ToolCommand, ToolRun, run_admitted, sandbox_env};
use serde_json::{Value, json};

use crate::pipeline::{PipelineSeed, SEEDED_KEY, STATE_KEY, Seeded};
use crate::placement::{AgentLaunch, Followed, Placement};
use crate::registry::{LoadedTool, LoadedWorkflow};
use crate::{CrashPoint, Engine, EngineOptions};

/// One attempt to launch: where, what, and with which arguments.
pub struct AttemptLaunch<'a> {
    pub run_id: &'a RunId,
    pub run_dir: &'a str,
    pub placement: &'a Placement,
    pub workflow: &'a LoadedWorkflow,
    pub step: &'a StepDef,
    /// The step's resolved arguments, and the canonical JSON the tool reads on stdin.
    pub args: &'a Value,
    pub stdin: &'a [u8],
    /// The step's declared outputs, hashed once the attempt completes.
    pub outputs: &'a [OutputDecl],
    /// The attempt's number (1-based).
    pub attempt: u32,
    /// The attempt's nonce (its token's, `AttemptToken::nonce`): a local tool's environment
    /// carries it, so it is found by it before its pid is recorded.
    pub nonce: String,
    /// For a pipeline step a replay re-executes: the earlier run's working copy to seed its own
    /// from.
    pub seed: Option<&'a PipelineSeed>,
}

impl AttemptLaunch<'_> {
    pub fn tool_def(&self) -> &ToolDef {
        &self.workflow.spec().tools[&self.step.tool]
    }

    fn tool(&self) -> &LoadedTool {
        &self.workflow.tools[&self.step.tool]
    }

    /// A pipeline step's working copy, where the run executes.
    fn working_copy(&self) -> String {
        format!("{}/{}", self.run_dir, cairn_core::controller::working_copy(&self.step.id))
    }

    fn step_dir(&self) -> PathBuf {
        Path::new(self.run_dir).join("steps").join(&self.step.id)
    }
}

/// What a launcher may ask of the engine, and nothing more: the limits a tool runs under, the
/// step agent (launch, re-attach), a pipeline's working copy and log, and hashing what an attempt
/// wrote. The engine's store, clock, ids and runs are out of its reach: an attempt's writes are
/// the runner's, under its token.
pub struct LaunchContext<'e> {
    engine: &'e Engine,
}

impl Engine {
    /// The context this engine gives its launcher.
    pub(crate) fn launch_context(&self) -> LaunchContext<'_> {
        LaunchContext { engine: self }
    }
}

impl LaunchContext<'_> {
    /// The limits a tool runs under (its stop's grace period, its output's bounds).
    pub(crate) fn options(&self) -> &EngineOptions {
        self.engine.options()
    }

    /// One of the daemon's step slots for the attempt's tool, to hold while it runs: none
    /// in-process or on a remote target; `Err` when a stop ended the wait. Taken as late as the
    /// tool starts and given back as soon as it ends, so the slots bound the tools running and
    /// the daemon's work around each (a directory made, output read, the commit) runs beside
    /// them rather than leave a CPU idle.
    ///
    /// `launch` starts the tool: it runs once the slot is had, on this thread or on the thread
    /// that hands the slot over (never, on `Err`). `park`, a local tool's pipes, is what the wait
    /// sleeps on (`crate::slots`).
    pub(crate) fn step_slot(
        &self,
        a: &AttemptLaunch<'_>,
        halted: &dyn Fn() -> bool,
        launch: cairn_exec::Launch,
        park: Option<&cairn_exec::Park<'_>>,
    ) -> Result<Option<crate::slots::Slot<'_>>, ()> {
        match self.engine.slots.get().filter(|_| !a.placement.is_remote()) {
            Some(slots) => slots.acquire(a.run_id, halted, launch, park).map(Some).ok_or(()),
            None => {
                launch();
                Ok(None)
            }
        }
    }

    /// Launches one attempt through the step agent and follows it to its end.
    pub(crate) fn launch_with_agent(
        &self,
        placement: &Placement,
        launch: &AgentLaunch<'_>,
        record: &mut dyn FnMut(&ProcessInfo),
        halted: &dyn Fn() -> bool,
    ) -> Followed {
        self.engine.launch_with_agent(placement, launch, record, halted)
    }

    /// The values of a tool's secrets for the attempt about to launch, or why there are none.
    pub(crate) fn secrets(&self, names: &[String]) -> Result<Vec<(String, String)>, String> {
        self.engine.resolve_secrets(names).map_err(|e| e.to_string())
    }

    /// Re-attaches to a launch the step agent supervises and follows it to its end.
    pub(crate) fn reattach(
        &self,
        remote: &RemoteProcess,
        tool_def: &ToolDef,
        cmd: &ToolCommand,
        halted: &dyn Fn() -> bool,
    ) -> Followed {
        self.engine.reattach(remote, tool_def, cmd, halted)
    }

    /// The files a pipeline step's arguments bind, hashed where the run executes.
    pub(crate) fn bound_inputs(
        &self,
        placement: &Placement,
        run_dir: &str,
        args: &Value,
    ) -> Result<Vec<InputFile>, String> {
        self.engine.bound_inputs(placement, run_dir, args)
    }

    /// Makes (once) a pipeline step's working copy; what a seed carried into it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn prepare_working_copy(
        &self,
        placement: &Placement,
        run_dir: &str,
        step_id: &str,
        source: &str,
        files: &[ToolFile],
        config: Option<&Value>,
        seed: Option<&PipelineSeed>,
    ) -> Result<Option<Seeded>, String> {
        self.engine.prepare_working_copy(placement, run_dir, step_id, source, files, config, seed)
    }

    /// What a re-attached attempt's predecessor carried into its working copy.
    pub(crate) fn seeded_working_copy(&self, placement: &Placement, work_dir: &str, from_run: &str) -> Option<Seeded> {
        self.engine.seeded_working_copy(placement, work_dir, from_run)
    }

    /// Reads a file where the run executes from `offset` on (a pipeline's log as it grows).
    pub(crate) fn read_from(&self, placement: &Placement, path: &str, offset: u64) -> Result<(Vec<u8>, u64), String> {
        self.engine.read_from(placement, path, offset)
    }

    /// Hashes the outputs of a pipeline's finished jobs where they lie.
    pub(crate) fn fill_job_files(&self, placement: &Placement, work_dir: &str, events: &mut [JobEvent]) {
        self.engine.fill_job_files(placement, work_dir, events)
    }

    /// Hashes a completed attempt's declared outputs where it ran.
    pub(crate) fn hash_outputs(
        &self,
        placement: &Placement,
        run_dir: &str,
        step_id: &str,
        decls: &[OutputDecl],
    ) -> Result<Vec<Artifact>, String> {
        self.engine.hash_outputs(placement, run_dir, step_id, decls)
    }

    /// What a pipeline created or changed in its working copy, hashed where it ran.
    pub(crate) fn pipeline_outputs(
        &self,
        placement: &Placement,
        run_dir: &str,
        step_id: &str,
        kind: ToolKind,
        baseline: &[ToolFile],
    ) -> Result<(Vec<Artifact>, Option<String>), String> {
        self.engine.pipeline_outputs(placement, run_dir, step_id, kind, baseline)
    }
}

/// Launches attempts and follows them. Calls happen on the step's worker thread; `halted` says
/// whether a stop (cancel or shutdown) was requested meanwhile.
pub trait Launcher: Send + Sync {
    /// Launches the attempt and follows it to its end. `record` is called with the process's
    /// identity as soon as it is known (for a supervised launch, also with its launch record
    /// before it happens), so a successor can find it; `jobs` with a pipeline's jobs as its log
    /// tells them (from the log's start: the caller drops what it recorded already).
    fn launch(
        &self,
        ctx: &LaunchContext<'_>,
        attempt: &AttemptLaunch<'_>,
        record: &mut dyn FnMut(&ProcessInfo),
        jobs: &JobSink<'_>,
        halted: &dyn Fn() -> bool,
    ) -> AttemptEnd;

    /// Follows a supervised launch a predecessor recorded (the attempt is the same one).
    fn reattach(
        &self,
        ctx: &LaunchContext<'_>,
        recorded: &RemoteProcess,
        attempt: &AttemptLaunch<'_>,
        jobs: &JobSink<'_>,
        halted: &dyn Fn() -> bool,
    ) -> AttemptEnd;

    /// Stops what an abandoned attempt left running on this host, so two attempts never run at
    /// once: its recorded process group if it is verifiably still the recorded one (same pid and
    /// start time), and every process carrying its nonce (found whether or not its pid was
    /// recorded).
    fn stop_orphan(&self, ctx: &LaunchContext<'_>, orphan: &Orphan);
}

/// What an abandoned attempt may have left running on this host, for whoever stops it: its
/// successor before the next attempt starts, a cancel, a daemon's shutdown.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Orphan {
    /// Its process, if its pid was recorded (a local one: a supervised launch is re-attached or
    /// cancelled through the agent instead).
    pub process: Option<ProcessInfo>,
    /// The nonce in its processes' environment ([`cairn_exec::NONCE_VAR`]), recorded before its
    /// launch: its token's, or its agent launch record's. A runner killed between the spawn and
    /// the commit recording the pid left only this to find its tool by.
    pub nonce: Option<String>,
}

impl Orphan {
    /// Nothing to stop: neither a process nor a nonce.
    pub fn is_empty(&self) -> bool {
        self.process.is_none() && self.nonce.is_none()
    }
}

/// Where a launch reports a pipeline's jobs, from the thread that reads its log.
pub type JobSink<'a> = dyn Fn(Vec<JobEvent>) + Sync + 'a;

/// The real launcher: real processes, here or through the step agent.
pub struct Processes;

/// One attempt, here or through the step agent, with its secrets' values (none, or a local
/// process tool's) in its environment.
fn launch_attempt(
    ctx: &LaunchContext<'_>,
    a: &AttemptLaunch<'_>,
    secrets: &[(String, String)],
    record: &mut dyn FnMut(&ProcessInfo),
    jobs: &JobSink<'_>,
    halted: &dyn Fn() -> bool,
) -> AttemptEnd {
    let tool_def = a.tool_def();
    let extra = [
        ("CAIRN_RUN_ID".to_string(), a.run_id.to_string()),
        ("CAIRN_STEP_ID".into(), a.step.id.clone()),
        ("CAIRN_ATTEMPT".into(), a.attempt.to_string()),
        ("CAIRN_RUN_DIR".into(), a.run_dir.to_string()),
        // An agent launch carries its launch record's nonce instead (set where it is made).
        (cairn_exec::NONCE_VAR.into(), a.nonce.clone()),
    ];
    if !a.placement.is_remote() {
        let dir = a.step_dir();
        if let Err(e) = std::fs::create_dir_all(&dir) {
            return AttemptEnd::Refused { error: format!("its directory {} cannot be created: {e}", dir.display()) };
        }
    }
    // The files the tool's digest was computed from must still be those bytes: a tool changed
    // on disk since the run loaded it is never run under the old signature.
    if let Some(error) = changed_tool_file(a.workflow, a.tool()) {
        return AttemptEnd::Refused { error };
    }
    if !a.placement.is_remote() && tool_def.kind.is_process() {
        let mut env = sandbox_env(&tool_def.env, &extra);
        // Given to this process only, after the allowlist: a secret is never read from the
        // daemon's own environment.
        env.extend(secrets.iter().cloned());
        let cmd = tool_command(ctx, a, env);
        let admit = |launch, park: &cairn_exec::Park<'_>| ctx.step_slot(a, halted, launch, Some(park));
        let run = run_admitted(&cmd, admit, &mut |p: &ProcessIdentity| {
            crate::crash_at(
                &ctx.options().crash,
                &CrashPoint::ToolSpawned { step: a.step.id.clone(), attempt: a.attempt },
            );
            record(&ProcessInfo { pid: p.pid, pgid: p.pgid, start_time: p.start_time, remote: None });
            // A stop that came between the attempt's start and its process being recorded
            // found no process to stop: stop it here.
            if halted() {
                cairn_exec::kill_own_group(p.pgid);
            }
        });
        // A stop came while it waited for a slot: it never started.
        let Ok(mut run) = run else { return AttemptEnd::Halted };
        if run.outcome == Outcome::Failed {
            // The sandbox read the step directory's disk; a declared output may lie on
            // another (a folder that is a mount point), which its tool filled as well.
            let outputs: Vec<PathBuf> = a.outputs.iter().map(|o| a.step_dir().join(&o.path)).collect();
            for disk in cairn_exec::disk_space(&outputs) {
                if !run.disks.iter().any(|d| d.path == disk.path) {
                    run.disks.push(disk);
                }
            }
        }
        return with_outputs(ctx, a, ran(run, false), &[], None);
    }
    let source = step_source(a);
    let mut inputs = Vec::new();
    let mut seeded = None;
    if !tool_def.kind.is_process() {
        // What the pipeline reads from outside its folder, hashed before it starts.
        match ctx.bound_inputs(a.placement, a.run_dir, a.args) {
            Ok(files) => inputs = files,
            Err(error) => return AttemptEnd::Refused { error },
        }
        // A bad `config` is reported by the controller's argv, below.
        let config = cairn_core::controller::run_config(a.args).ok().flatten();
        match ctx.prepare_working_copy(a.placement, a.run_dir, &a.step.id, &source, &a.tool().files, config, a.seed) {
            Ok(s) => seeded = s,
            Err(error) => return AttemptEnd::Refused { error },
        }
    }
    let cmd = tool_command(ctx, a, Vec::new());
    let launch = AgentLaunch {
        tool_def,
        argv: a.tool().argv.iter().map(|arg| rebase(arg, &a.workflow.record.path, &source)).collect(),
        args: a.args,
        run_dir: a.run_dir,
        step_id: &a.step.id,
        attempt: a.attempt,
        env: extra.to_vec(),
        check_files: a.tool().files.iter().map(|f| (format!("{source}/{}", f.path), f.sha256.clone())).collect(),
        cmd: &cmd,
        secrets,
    };
    // Here, the agent's launch holds a step slot until it ends (none on a target).
    let Ok(_slot) = ctx.step_slot(a, halted, Box::new(|| {}), None) else { return AttemptEnd::Halted };
    let (end, summary) = watching(ctx, a, jobs, || {
        followed(ctx.launch_with_agent(a.placement, &launch, record, halted), !tool_def.kind.is_process())
    });
    with_outputs(ctx, a, with_pipeline_summary(a, end, summary), &inputs, seeded.as_ref())
}

/// The attempt's end with every secret value replaced by its name.
fn redacted(end: AttemptEnd, r: &cairn_core::secret::Redactor) -> AttemptEnd {
    match end {
        AttemptEnd::Ran { outcome, result, error, log_tail, duration_us, artifacts, resumable, cause } => {
            AttemptEnd::Ran {
                outcome,
                result: result.map(|v| r.redact_json(&v)),
                error: error.map(|e| r.redact(&e)),
                log_tail: r.redact(&log_tail),
                duration_us,
                artifacts,
                resumable,
                cause,
            }
        }
        AttemptEnd::Refused { error } => AttemptEnd::Refused { error: r.redact(&error) },
        other => other,
    }
}

impl Launcher for Processes {
    /// A tool's secrets are read from their provider for this attempt, given to its process only,
    /// and replaced by their names in everything the attempt's end carries (its result, error
    /// and log tail), so no record holds a value.
    fn launch(
        &self,
        ctx: &LaunchContext<'_>,
        a: &AttemptLaunch<'_>,
        record: &mut dyn FnMut(&ProcessInfo),
        jobs: &JobSink<'_>,
        halted: &dyn Fn() -> bool,
    ) -> AttemptEnd {
        let names = &a.tool_def().secrets;
        if names.is_empty() {
            return launch_attempt(ctx, a, &[], record, jobs, halted);
        }
        if !a.tool_def().kind.is_process() {
            // A controller writes its own logs and job scripts, which Cairn cannot keep a value out of.
            return AttemptEnd::Refused {
                error: format!(
                    "tool `{}` is a pipeline controller and declares secrets: Cairn gives secrets to process tools only, as it cannot keep them out of a controller's own logs; give them to the pipeline's jobs another way",
                    a.step.tool
                ),
            };
        }
        let secrets = match ctx.secrets(names) {
            Ok(s) => s,
            Err(error) => return AttemptEnd::Refused { error },
        };
        let redactor = cairn_core::secret::Redactor::new(&secrets);
        redacted(launch_attempt(ctx, a, &secrets, record, jobs, halted), &redactor)
    }

    fn reattach(
        &self,
        ctx: &LaunchContext<'_>,
        recorded: &RemoteProcess,
        a: &AttemptLaunch<'_>,
        jobs: &JobSink<'_>,
        halted: &dyn Fn() -> bool,
    ) -> AttemptEnd {
        // The predecessor's hashes are not at hand: a re-attach hashes the bound files again.
        let inputs = if a.tool_def().kind.is_process() {
            Vec::new()
        } else {
            ctx.bound_inputs(a.placement, a.run_dir, a.args).unwrap_or_default()
        };
        let cmd = tool_command(ctx, a, Vec::new());
        let (end, summary) = watching(ctx, a, jobs, || {
            followed(ctx.reattach(recorded, a.tool_def(), &cmd, halted), !a.tool_def().kind.is_process())
        });
        // A re-attached attempt's working copy was made by its predecessor: read what it carried.
        let seeded = a.seed.and_then(|s| ctx.seeded_working_copy(a.placement, &a.working_copy(), &s.from_run));
        with_outputs(ctx, a, with_pipeline_summary(a, end, summary), &inputs, seeded.as_ref())
    }

    fn stop_orphan(&self, ctx: &LaunchContext<'_>, orphan: &Orphan) {
        let grace = ctx.options().kill_grace;
        if let Some(p) = orphan.process.as_ref().filter(|p| p.remote.is_none()) {
            cairn_exec::terminate_if_same(
                &ProcessIdentity { pid: p.pid, pgid: p.pgid, start_time: p.start_time },
                grace,
            );
        }
        // After the recorded group: what carries the nonce still is what the record missed (the
        // tool itself when its pid was never recorded, or what left its group).
        if let Some(nonce) = &orphan.nonce {
            let found = cairn_exec::stop_carrying(cairn_exec::NONCE_VAR, nonce, grace);
            if found > 0 {
                tracing::info!("stopped {found} process(es) an abandoned attempt left running (nonce {nonce})");
            }
        }
    }
}

/// Follows a launch (`follow`) while a second thread reads a Snakemake attempt's log as it grows
/// and reports its jobs to `jobs`; once the launch has ended the log is read to its end. Returns
/// the launch's end and what the log said of the pipeline (`None` for another kind of tool).
fn watching(
    ctx: &LaunchContext<'_>,
    a: &AttemptLaunch<'_>,
    jobs: &JobSink<'_>,
    follow: impl FnOnce() -> AttemptEnd,
) -> (AttemptEnd, Option<Summary>) {
    if a.tool_def().kind != ToolKind::Snakemake {
        return (follow(), None);
    }
    let path = format!("{}/stderr", crate::placement::attempt_dir(a.run_dir, &a.step.id, a.attempt));
    let work_dir = a.working_copy();
    let read = |log: &mut SnakemakeLog, bytes: Option<&[u8]>| {
        let mut events = match bytes {
            Some(bytes) => log.feed(bytes),
            None => log.finish(),
        };
        ctx.fill_job_files(a.placement, &work_dir, &mut events);
        jobs(events);
    };
    // Reading a target's log is one request over SSH: less often than a local file.
    let every = if a.placement.is_remote() { Duration::from_secs(1) } else { Duration::from_millis(250) };
    let ended = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let mut log = SnakemakeLog::new();
            loop {
                let last = ended.load(Ordering::SeqCst);
                // Everything written so far (a read takes at most one chunk).
                while let Ok((bytes, size)) = ctx.read_from(a.placement, &path, log.fed()) {
                    if bytes.is_empty() {
                        break;
                    }
                    read(&mut log, Some(&bytes));
                    if log.fed() >= size {
                        break;
                    }
                }
                if last {
                    read(&mut log, None);
                    return log.summary().clone();
                }
                let until = std::time::Instant::now() + every;
                while !ended.load(Ordering::SeqCst) && std::time::Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(25));
                }
            }
        });
        let end = follow();
        ended.store(true, Ordering::SeqCst);
        (end, reader.join().ok())
    })
}

/// A Snakemake attempt's end with what its log said of its jobs: in its result when it completed
/// (`jobs: {total, done, failed}`, `failed_rules`), in its error (the rule that failed, how far
/// it got) when it did not.
fn with_pipeline_summary(a: &AttemptLaunch<'_>, end: AttemptEnd, summary: Option<Summary>) -> AttemptEnd {
    let (
        Some(summary),
        AttemptEnd::Ran { outcome, mut result, mut error, log_tail, duration_us, artifacts, resumable, cause },
    ) = (summary, end.clone())
    else {
        return end;
    };
    debug_assert_eq!(a.tool_def().kind, ToolKind::Snakemake);
    if let Some(report) = result.as_mut().and_then(Value::as_object_mut) {
        report.insert("jobs".into(), json!({"total": summary.total, "done": summary.done, "failed": summary.failed}));
        report.insert("failed_rules".into(), json!(summary.failed_rules));
    }
    if outcome != Outcome::Completed
        && !summary.failed_rules.is_empty()
        && let Some(e) = error.as_mut()
    {
        let rules: Vec<String> = summary.failed_rules.iter().map(|r| format!("`{r}`")).collect();
        let done = match (summary.done, summary.total) {
            (Some(d), Some(t)) => format!(" ({d} of {t} jobs done)"),
            _ => String::new(),
        };
        let noun = if rules.len() == 1 { "rule" } else { "rules" };
        e.push_str(&format!(": {noun} {} failed{done}; its log tail says why", rules.join(", ")));
    }
    AttemptEnd::Ran { outcome, result, error, log_tail, duration_us, artifacts, resumable, cause }
}

/// How long a local tool runs before its pid is recorded. A tool that ends sooner (most steps of
/// a sweep) is never recorded: its end is, and one write per step is saved. Until then a cancel
/// or a successor finds it by its attempt's nonce, recorded before the spawn, as it finds a tool
/// whose runner was killed before recording it.
const REPORT_AFTER: Duration = Duration::from_millis(10);

/// One attempt's complete process request, with the engine's limits.
fn tool_command(ctx: &LaunchContext<'_>, a: &AttemptLaunch<'_>, env: Vec<(String, String)>) -> ToolCommand {
    let options = ctx.options();
    ToolCommand {
        argv: a.tool().argv.clone(),
        cwd: a.step_dir(),
        env,
        stdin: a.stdin.to_vec(),
        timeout: Duration::from_secs(a.tool_def().timeout_secs),
        grace: options.kill_grace,
        max_stdout: options.max_stdout,
        stderr_tail: options.stderr_tail,
        report_after: REPORT_AFTER,
    }
}

/// `controller`: the tool is a pipeline's controller, whose working copy keeps what it completed;
/// killed by a signal (not stopped for its time, which a timeout says), it is resumable.
fn ran(run: ToolRun, controller: bool) -> AttemptEnd {
    let resumable = controller && run.signal.is_some() && run.outcome == Outcome::Failed;
    AttemptEnd::Ran {
        resumable,
        // What the disks where it ran and its stderr say of a failure: a full disk is named.
        cause: cairn_core::cause::cause_of(run.outcome, &run.stderr_tail, &run.disks),
        outcome: run.outcome,
        result: run.result,
        error: run.error,
        log_tail: run.stderr_tail,
        // The tool's own time, from spawn to exit (not the commit recording its pid).
        duration_us: i64::try_from(run.duration.as_micros()).unwrap_or(i64::MAX),
        artifacts: Vec::new(),
    }
}

/// A completed attempt's end with its outputs hashed where it ran: a tool's declared outputs, or
/// what a pipeline created or changed in its working copy (listed in its result too). One whose
/// outputs cannot be recorded (not written, a symlink) has failed, with that as its error. A
/// pipeline's result lists the files its arguments bind (`inputs`), as they were hashed.
fn with_outputs(
    ctx: &LaunchContext<'_>,
    a: &AttemptLaunch<'_>,
    end: AttemptEnd,
    inputs: &[InputFile],
    seeded: Option<&Seeded>,
) -> AttemptEnd {
    let kind = a.tool_def().kind;
    match end {
        AttemptEnd::Ran { outcome: Outcome::Completed, mut result, error, log_tail, duration_us, .. }
            if !a.outputs.is_empty() || !kind.is_process() =>
        {
            let hashed = if kind.is_process() {
                ctx.hash_outputs(a.placement, a.run_dir, &a.step.id, a.outputs).map(|a| (a, None))
            } else {
                ctx.pipeline_outputs(a.placement, a.run_dir, &a.step.id, kind, &a.tool().files)
            };
            match hashed {
                Ok((artifacts, state)) => {
                    if !kind.is_process()
                        && let Some(report) = result.as_mut().and_then(Value::as_object_mut)
                    {
                        let listed =
                            artifacts.iter().map(|x| json!({"name": x.name, "bytes": x.bytes, "sha256": x.sha256}));
                        report.insert("outputs".into(), Value::Array(listed.collect()));
                        report.insert("inputs".into(), json!(inputs));
                        if let Some(state) = state {
                            report.insert(STATE_KEY.into(), json!(state));
                        }
                        if let Some(seeded) = seeded {
                            report.insert(SEEDED_KEY.into(), seeded.to_json());
                        }
                    }
                    AttemptEnd::Ran {
                        outcome: Outcome::Completed,
                        result,
                        error,
                        log_tail,
                        duration_us,
                        artifacts,
                        resumable: false,
                        cause: None,
                    }
                }
                Err(fault) => AttemptEnd::Ran {
                    outcome: Outcome::Failed,
                    result: None,
                    error: Some(fault),
                    log_tail,
                    duration_us,
                    artifacts: Vec::new(),
                    resumable: false,
                    cause: None,
                },
            }
        }
        other => other,
    }
}

fn followed(f: Followed, controller: bool) -> AttemptEnd {
    match f {
        Followed::Ended(run) => ran(run, controller),
        Followed::Lost(why) => AttemptEnd::Lost { why },
        Followed::Mismatch(why) => AttemptEnd::Mismatch { why },
        Followed::Halted => AttemptEnd::Halted,
        Followed::Unreachable(why) => AttemptEnd::Unreachable { why },
    }
}

/// The workflow's folder where the step runs: the copy deployed into a target's run_dir, or the
/// folder the run loaded here.
fn step_source(a: &AttemptLaunch<'_>) -> String {
    if a.placement.is_remote() { format!("{}/workflow", a.run_dir) } else { a.workflow.record.path.clone() }
}

/// Which of the tool's files no longer has the SHA-256 its digest was computed from, in words.
fn changed_tool_file(wf: &LoadedWorkflow, tool: &LoadedTool) -> Option<String> {
    let dir = Path::new(&wf.record.path);
    tool.files.iter().find_map(|f| {
        let path = dir.join(&f.path);
        match std::fs::read(&path) {
            Ok(bytes) if cairn_core::canonical::sha256_hex(&bytes) == f.sha256 => None,
            Ok(_) => Some(format!("tool file {} changed since the run loaded it", path.display())),
            Err(e) => Some(format!("tool file {} cannot be read: {e}", path.display())),
        }
    })
}

/// `arg` with the folder prefix `from` replaced by `to` (a tool file named by its deployed path).
fn rebase(arg: &str, from: &str, to: &str) -> String {
    match Path::new(arg).strip_prefix(from) {
        Ok(rel) if from != to => format!("{to}/{}", rel.display()),
        _ => arg.to_string(),
    }
}
