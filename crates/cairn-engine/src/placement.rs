//! Steps supervised by the step agent: every step of a run planned on an SSH target (a process
//! there, or a Slurm job with the `slurm` executor), and pipeline controllers on any target.
//!
//! **Invariant:** the launch is recorded (target, attempt directory, nonce) before it happens and
//! its identity (pid and start time, or Slurm job id) as soon as the agent reports it; a successor
//! re-attaches only after the agent matched the nonce, and a mismatch is reported, never guessed.

use std::time::{Duration, Instant};

use cairn_core::controller::{SlurmSubmit, controller_argv};
use cairn_core::ids::RunId;
use cairn_core::status::StepStatus;
use cairn_core::store::{ProcessInfo, RemoteProcess, StepRecord};
use cairn_core::target::{Executor, LOCAL, TargetSpec};
use cairn_core::workflow::{ToolDef, ToolKind};
use cairn_exec::agent::protocol::{
    CancelRequest, CheckFile, Identity, Launch, RunRequest, SlurmJob, StopSignal, TailRequest, WaitRequest,
};
use cairn_exec::agent::{Agent, AgentError, StepEnd, Stop};
use cairn_exec::{BASE_ENV, ENV_PREFIX, NONCE_VAR, ToolCommand, ToolRun, classify_recorded};
use serde_json::Value;

use crate::{Engine, EngineError};

/// How long a follower keeps trying to re-attach after its connection dropped, beyond the step's
/// own time limit, before it gives the attempt up as lost.
const RECONNECT_WINDOW: Duration = Duration::from_secs(600);

/// Where a run's steps execute.
pub enum Placement {
    /// This machine: plain tools through the local sandbox, controllers through the local agent.
    Local,
    /// An SSH target; every step goes through the agent there.
    Target(Box<TargetSpec>, Agent),
}

impl Placement {
    pub fn is_remote(&self) -> bool {
        matches!(self, Placement::Target(..))
    }

    pub fn name(&self) -> &str {
        match self {
            Placement::Local => LOCAL,
            Placement::Target(spec, _) => &spec.name,
        }
    }
}

/// One attempt for the agent to launch.
pub(crate) struct AgentLaunch<'a> {
    pub tool_def: &'a ToolDef,
    /// The tool's argv on the controller host (ignored for a controller kind).
    pub argv: Vec<String>,
    /// The step's resolved args (a controller's argv is built from them).
    pub args: &'a Value,
    pub run_dir: &'a str,
    pub step_id: &'a str,
    pub attempt: u32,
    pub env: Vec<(String, String)>,
    /// The tool files as deployed, with the SHA-256 the step's signature was computed from.
    pub check_files: Vec<(String, String)>,
    pub cmd: &'a ToolCommand,
    /// Its secrets' values, for its process only.
    pub secrets: &'a [(String, String)],
}

/// What following a launch gave.
pub(crate) enum Followed {
    Ended(ToolRun),
    /// Nothing is left to observe: the launch never happened, or its supervisor died silently.
    Lost(String),
    /// Another launch is recorded where this one was expected: nothing was touched.
    Mismatch(String),
    /// The caller stopped following (cancel or shutdown); the step goes on or is being stopped.
    Halted,
    /// The target has not answered for [`UNREACHABLE_AFTER`]: the launch's end is unknown.
    Unreachable(String),
}

/// How long a target may fail every connection before the run waits for it (shown, tried again
/// by the daemon on its backoff) instead of this follower retrying unseen.
const UNREACHABLE_AFTER: Duration = Duration::from_secs(30);

/// A call to the agent that lasted this long was connected (ssh gives up connecting after 10 s
/// and notices a dead connection within about 15): the target answered.
const CONNECTED_FOR: Duration = Duration::from_secs(20);

impl Engine {
    /// The agent for a target by name (`local` runs it on this machine).
    pub(crate) fn agent(&self, target: &str) -> Result<Agent, EngineError> {
        if target == LOCAL {
            return Ok(Agent::local());
        }
        Ok(self.agent_of(&self.target(target)?))
    }

    /// The agent of a configured SSH target.
    pub(crate) fn agent_of(&self, spec: &TargetSpec) -> Agent {
        Agent { ssh: Some(self.transport(spec)) }
    }

    /// Where `run_id` executes: the target it was planned and reserved on, else this machine.
    pub(crate) fn placement(&self, run_id: &RunId) -> Result<Placement, EngineError> {
        match self.store.target_of_run(run_id)? {
            None => Ok(Placement::Local),
            Some(t) if t == LOCAL => Ok(Placement::Local),
            Some(t) => {
                let spec = self.target(&t)?;
                let agent = self.agent_of(&spec);
                Ok(Placement::Target(Box::new(spec), agent))
            }
        }
    }

    /// Launches one attempt through the agent and follows it to its end. `record` is called with
    /// the launch record before the launch and again with the identity the agent reported.
    pub(crate) fn launch_with_agent(
        &self,
        placement: &Placement,
        launch: &AgentLaunch<'_>,
        record: &mut dyn FnMut(&ProcessInfo),
        halted: &dyn Fn() -> bool,
    ) -> Followed {
        let started = Instant::now();
        let kind = launch.tool_def.kind;
        let argv = if kind.is_process() {
            launch.argv.clone()
        } else {
            let work_dir = format!("{}/{}", launch.run_dir, cairn_core::controller::working_copy(launch.step_id));
            match controller_argv(kind, launch.args, &work_dir, slurm_submit(placement).as_ref()) {
                Ok(a) => a,
                Err(e) => return Followed::Ended(not_launched(launch.cmd, format!("could not be started: {e}"))),
            }
        };
        let agent = match placement {
            Placement::Local => Agent::local(),
            Placement::Target(_, agent) => agent.clone(),
        };
        let slurm = match placement {
            Placement::Target(spec, _) if spec.executor == Executor::Slurm && kind.is_process() => {
                let secs = launch.cmd.timeout.as_secs() + launch.cmd.grace.as_secs();
                Some(SlurmJob {
                    partition: spec.partition.clone(),
                    account: spec.account.clone(),
                    // Slurm enforces the limit even when no daemon follows the job.
                    time_minutes: secs.div_ceil(60) + 1,
                })
            }
            _ => None,
        };
        let nonce = self.ids.token();
        let attempt_dir = attempt_dir(launch.run_dir, launch.step_id, launch.attempt);
        let mut remote = RemoteProcess {
            target: placement.name().to_string(),
            attempt_dir: attempt_dir.clone(),
            nonce: nonce.clone(),
            pid: None,
            start_time: None,
            job_id: None,
        };
        record(&ProcessInfo { pid: 0, pgid: 0, start_time: None, remote: Some(remote.clone()) });
        let request = RunRequest {
            attempt_dir: attempt_dir.clone(),
            nonce: nonce.clone(),
            argv,
            cwd: format!("{}/steps/{}", launch.run_dir, launch.step_id),
            run_dir: launch.run_dir.to_string(),
            base_env: BASE_ENV.map(String::from).to_vec(),
            allow_env: launch.tool_def.env.clone(),
            env_prefix: ENV_PREFIX.to_string(),
            // The launch record's nonce, not the token's: it is what a successor finds recorded
            // (a re-attach keeps it under a new token), and what it sweeps this host for when the
            // launch is lost from sight.
            env: launch
                .env
                .iter()
                .filter(|(name, _)| name != NONCE_VAR)
                .cloned()
                .chain([(NONCE_VAR.to_string(), nonce.clone())])
                .collect(),
            stdin: String::from_utf8_lossy(&launch.cmd.stdin).into_owned(),
            timeout: launch.cmd.timeout.as_secs_f64(),
            grace: launch.cmd.grace.as_secs_f64(),
            stop_signal: stop_signal(kind),
            max_stdout: launch.cmd.max_stdout,
            stderr_tail: launch.cmd.stderr_tail,
            controller: kind.program().map(String::from),
            slurm,
            check_files: launch
                .check_files
                .iter()
                .map(|(path, sha256)| CheckFile { path: path.clone(), sha256: sha256.clone() })
                .collect(),
            secrets: cairn_exec::agent::protocol::Secrets(launch.secrets.iter().cloned().collect()),
        };
        let mut on_identity = |id: &Identity| {
            (remote.pid, remote.start_time, remote.job_id) = match &id.launch {
                Launch::Process { pid, start_time, .. } => (Some(*pid), *start_time, None),
                Launch::Slurm { job_id } => (None, None, Some(job_id.clone())),
            };
            let pid = remote.pid.unwrap_or(0);
            record(&ProcessInfo { pid, pgid: pid, start_time: remote.start_time, remote: Some(remote.clone()) });
            // A cancel that came before the launch was identified found nothing to stop there.
            if halted() {
                let _ = self.stop_launch(&remote);
            }
        };
        let end = agent.run_step(request, &mut on_identity, halted);
        self.settle(&agent, &attempt_dir, &nonce, end, launch.cmd, kind, started, halted)
    }

    /// Re-attaches to a recorded launch (a successor taking over, or after a dropped connection)
    /// and follows it to its end.
    pub(crate) fn reattach(
        &self,
        remote: &RemoteProcess,
        tool_def: &ToolDef,
        cmd: &ToolCommand,
        halted: &dyn Fn() -> bool,
    ) -> Followed {
        let agent = match self.agent(&remote.target) {
            Ok(a) => a,
            Err(e) => return Followed::Lost(format!("cannot reach target `{}` again: {e}", remote.target)),
        };
        let end = agent.wait_step(wait_request(&remote.attempt_dir, &remote.nonce), halted);
        self.settle(&agent, &remote.attempt_dir, &remote.nonce, end, cmd, tool_def.kind, Instant::now(), halted)
    }

    /// Turns what the agent said into the attempt's end; a dropped connection is retried with
    /// `wait` (the step goes on meanwhile) until it answers or the window closes.
    #[expect(
        clippy::too_many_arguments,
        reason = "the step's whole context, passed as is rather than bundled for one call"
    )]
    fn settle(
        &self,
        agent: &Agent,
        attempt_dir: &str,
        nonce: &str,
        mut end: Result<StepEnd, AgentError>,
        cmd: &ToolCommand,
        kind: ToolKind,
        started: Instant,
        halted: &dyn Fn() -> bool,
    ) -> Followed {
        let give_up = Instant::now() + cmd.timeout + cmd.grace + RECONNECT_WINDOW;
        let mut delay = Duration::from_millis(250);
        let request = wait_request(attempt_dir, nonce);
        // Since when every call has failed; a call that lasted (it was connected, following the
        // step) starts the count again.
        let mut failing_since = Instant::now();
        let mut asked = Instant::now();
        loop {
            let why = match end {
                Ok(StepEnd::Ended(exit)) => {
                    // The tool's own time, as its supervisor measured it there; else what we saw.
                    let duration = exit.duration().unwrap_or_else(|| started.elapsed());
                    return Followed::Ended(classify_recorded(cmd, exit.recorded_end(!kind.is_process()), duration));
                }
                Ok(StepEnd::Mismatch(m)) => return Followed::Mismatch(m),
                Ok(StepEnd::Lost(m)) => return Followed::Lost(m),
                Ok(StepEnd::Detached) => return Followed::Halted,
                Ok(StepEnd::Dropped(why)) => why,
                // The agent itself refused (a changed tool file, an unusable attempt directory):
                // the attempt failed before the tool ran.
                Err(AgentError::Failed { detail, .. }) => {
                    return Followed::Ended(not_launched(cmd, format!("could not be started: {detail}")));
                }
                // The agent and this Cairn disagree on the protocol: asking again gets the same.
                Err(
                    e @ (AgentError::Unsupported { .. } | AgentError::Reply { .. } | AgentError::Unexpected { .. }),
                ) => {
                    return Followed::Ended(not_launched(cmd, format!("could not be started: {e}")));
                }
                Err(e) => e.to_string(),
            };
            if halted() {
                return Followed::Halted;
            }
            if asked.elapsed() > CONNECTED_FOR {
                failing_since = asked;
            }
            if failing_since.elapsed() > UNREACHABLE_AFTER {
                return Followed::Unreachable(format!(
                    "cannot reach the target for {} s ({why}); the step may still be running in {attempt_dir}, \
                     and is followed again once the target answers",
                    failing_since.elapsed().as_secs()
                ));
            }
            if Instant::now() > give_up {
                return Followed::Lost(format!(
                    "lost contact with the target for too long ({why}); the step may still be running in {attempt_dir}"
                ));
            }
            std::thread::sleep(delay);
            delay = (delay * 2).min(Duration::from_secs(10));
            asked = Instant::now();
            end = agent.wait_step(request.clone(), halted);
        }
    }

    /// Stops a recorded launch on its target (SIGTERM, or SIGINT for a controller, to its process
    /// group, then SIGKILL; `scancel` for a Slurm job), after the agent matched its nonce.
    pub(crate) fn stop_launch(&self, remote: &RemoteProcess) -> Result<String, EngineError> {
        let agent = self.agent(&remote.target)?;
        let request = CancelRequest {
            attempt_dir: remote.attempt_dir.clone(),
            nonce: remote.nonce.clone(),
            grace: self.options.kill_grace.as_secs_f64(),
        };
        let stop = agent.cancel(request, Duration::from_secs(60) + self.options.kill_grace).map_err(|e| {
            EngineError::StopRefused { message: format!("could not stop the step on `{}`: {e}", remote.target) }
        })?;
        match stop {
            Stop::Matched(c) => Ok(c.detail),
            Stop::Mismatch(m) => Err(EngineError::StopRefused {
                message: format!("not stopped: {m}; the recorded launch is not the one found"),
            }),
        }
    }

    /// The last `max_bytes` of a step's live output on its target (stderr, or a controller's log),
    /// read over SSH, never copied whole.
    pub(crate) fn live_tail(&self, step: &StepRecord, max_bytes: usize) -> Option<String> {
        if step.status != StepStatus::Running {
            return None;
        }
        let remote = step.process.as_ref()?.remote.as_ref()?;
        let agent = self.agent(&remote.target).ok()?;
        let request = TailRequest { path: format!("{}/stderr", remote.attempt_dir), max_bytes };
        agent.tail(request, Duration::from_secs(30)).ok().map(|t| t.text)
    }
}

/// Where a controller on `placement` sends its pipeline's jobs: to Slurm on a Slurm target.
pub(crate) fn slurm_submit(placement: &Placement) -> Option<SlurmSubmit> {
    match placement {
        Placement::Target(spec, _) if spec.executor == Executor::Slurm => {
            Some(SlurmSubmit { partition: spec.partition.clone(), account: spec.account.clone() })
        }
        _ => None,
    }
}

/// A controller step's argv as far as the run input decides it: `None` when its args need an
/// earlier step's result; an error naming the step and the arg when they are wrong.
pub(crate) fn planned_controller_argv(
    kind: ToolKind,
    step: &cairn_core::workflow::StepDef,
    input: &Value,
    run_dir: &str,
    slurm: Option<&SlurmSubmit>,
) -> Result<Option<Vec<String>>, EngineError> {
    let Ok(args) = cairn_core::template::resolve(&step.args, input, &|_| None) else { return Ok(None) };
    let work_dir = format!("{run_dir}/{}", cairn_core::controller::working_copy(&step.id));
    controller_argv(kind, &args, &work_dir, slurm)
        .map(Some)
        .map_err(|e| EngineError::input(format!("step `{}`: {e}", step.id)))
}

/// Before a run here: each controller step's args as far as the input decides them, and its
/// program on this machine's PATH (the daemon's, which it inherited from the command that
/// started it).
pub(crate) fn check_local_controllers(wf: &crate::registry::LoadedWorkflow, input: &Value) -> Result<(), EngineError> {
    for step in &wf.spec().steps {
        let kind = wf.spec().tools[&step.tool].kind;
        if !kind.is_process() {
            planned_controller_argv(kind, step, input, "", None)?;
        }
    }
    local_programs(wf)
}

/// What a workflow's steps need on the PATH where they run, with the reason: its pipeline
/// controllers.
pub(crate) fn workflow_needs(wf: &crate::registry::LoadedWorkflow) -> Vec<(String, String)> {
    let mut needs: Vec<(String, String)> = Vec::new();
    for step in &wf.spec().steps {
        if let Some(p) = wf.spec().tools[&step.tool].kind.program()
            && !needs.iter().any(|(n, _)| n == p)
        {
            let mut why = format!("step `{}` runs a {p} pipeline", step.id);
            if p == "nextflow" {
                why.push_str(" (Nextflow cannot be installed from the registries these machines reach; run it where it is installed)");
            }
            needs.push((p.to_string(), why));
        }
    }
    needs
}

/// A pipeline controller the workflow needs must be on this machine's PATH.
pub(crate) fn local_programs(wf: &crate::registry::LoadedWorkflow) -> Result<(), EngineError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for (p, why) in workflow_needs(wf) {
        if !std::env::split_paths(&path).any(|d| d.join(&p).is_file()) {
            return Err(EngineError::TargetNotReady {
                target: LOCAL.to_string(),
                problems: vec![format!("`{p}` is not on this machine's PATH, but {why}")],
            });
        }
    }
    Ok(())
}

/// Where the agent keeps an attempt's files (its request, pid, exit, stdout and stderr).
pub(crate) fn attempt_dir(run_dir: &str, step_id: &str, attempt: u32) -> String {
    format!("{run_dir}/steps/{step_id}/.cairn/attempt-{attempt}")
}

/// The agent's `wait`: follow the launch recorded in `attempt_dir` if it carries `nonce`.
fn wait_request(attempt_dir: &str, nonce: &str) -> WaitRequest {
    WaitRequest { attempt_dir: attempt_dir.to_string(), nonce: nonce.to_string() }
}

/// SIGINT lets a pipeline controller stop its jobs and release its lock; SIGTERM for the rest.
fn stop_signal(kind: ToolKind) -> StopSignal {
    if kind.is_process() { StopSignal::Term } else { StopSignal::Int }
}

fn not_launched(cmd: &ToolCommand, error: String) -> ToolRun {
    classify_recorded(cmd, cairn_exec::RecordedEnd { error: Some(error), ..Default::default() }, Duration::ZERO)
}
