//! The step agent's protocol: every request Cairn sends to the agent and every reply the agent
//! prints, as serde types. The agent's side is `agent_wire.py`: its `REQUESTS` table (what it reads of each
//! request) and its `emit` calls; `tests/agent.rs` has the agent parse what these types serialise.
//!
//! **Invariant:** every message carries [`PROTOCOL`] in its [`Envelope`], both ways, and so does
//! every file the agent writes in an attempt directory (`request.json`, `pid.json`, `exit.json`),
//! because a successor daemon, maybe of a newer Cairn, re-attaches to files an older one wrote.
//! The agent refuses a request of another protocol ([`Reply::Unsupported`]); Cairn refuses a
//! reply of another protocol ([`ReplyError::Version`]).
//!
//! A file without a `protocol` field was written before versions existed: it is protocol 0.
//! Protocol 1 added the field and kept every other field of pid.json and exit.json, and every
//! field `wait` and `cancel` read of request.json, so the agent reads a protocol-0 attempt as it
//! is: a step the previous Cairn launched, still running at an upgrade, is followed and stopped
//! as before. A file of a protocol the agent does not read is answered as a mismatch that names
//! both versions ([`Reply::Mismatch`]): nothing is guessed, resumed or stopped.
//!
//! The artifact requests (`outputs`, `check`, `materialize`) were added within protocol 1: they
//! write no attempt file and change no message that existed, and the agent that answers them is
//! always the one this Cairn sends, so no reader of another version meets them.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use cairn_core::artifact::{Artifact, OutputDecl};
use cairn_core::cause::DiskSpace;
use cairn_core::pipeline::JobFile;
use cairn_core::replay::Found;

use crate::RecordedEnd;

/// The protocol this Cairn and the agent it sends speak. `agent_wire.py`'s `PROTOCOL` is the same
/// number (a test checks); a change to a message or an attempt file bumps both.
pub const PROTOCOL: u32 = 1;

/// A message either way: its protocol, a serving agent's request id, and the request or reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope<T> {
    pub protocol: u32,
    /// Set on a serving agent's requests and on their replies; one-shot messages have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    #[serde(flatten)]
    pub body: T,
}

impl<T> Envelope<T> {
    /// `body` in this Cairn's protocol.
    pub fn new(body: T) -> Envelope<T> {
        Envelope { protocol: PROTOCOL, id: None, body }
    }
}

/// What Cairn asks of the agent. The tag is the agent's `op`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Readiness facts for a run_dir; answered by [`Reply::Ready`].
    Ready(ReadyRequest),
    /// Creates run_dir and writes approved files into it; [`Reply::Deployed`].
    Deploy(DeployRequest),
    /// Launches one attempt and follows it: [`Reply::Identity`], then its end ([`Reply::Exit`],
    /// [`Reply::Mismatch`] or [`Reply::Lost`]).
    Run(Box<RunRequest>),
    /// Stays for `run` requests with ids, one long-lived agent per connection; [`Reply::Serving`]
    /// first.
    Serve,
    /// Re-attaches to a recorded launch after checking its nonce, and follows it as `Run` does.
    Wait(WaitRequest),
    /// Stops a recorded launch after checking its nonce; [`Reply::Cancelled`] or a mismatch.
    Cancel(CancelRequest),
    /// The last bytes of a file; [`Reply::Tail`].
    Tail(TailRequest),
    /// Hashes a completed attempt's declared outputs where they lie; [`Reply::Outputs`].
    Outputs(OutputsRequest),
    /// Checks recorded artifacts against their bytes; [`Reply::Checked`].
    Check(CheckRequest),
    /// Materialises a source run's artifacts into a replay child's run_dir, or a pipeline's
    /// working copy into its step directory; [`Reply::Materialized`] or [`Reply::Error`].
    Materialize(MaterializeRequest),
    /// The files a pipeline created or changed in its working copy, hashed; [`Reply::Outputs`].
    Changed(ChangedRequest),
    /// Bytes of a file from an offset (a pipeline's log, as it grows); [`Reply::Chunk`].
    Read(ReadRequest),
    /// What finished pipeline jobs' outputs hold, under their working directory (one answer for
    /// every job of a batch: one round trip, however many jobs ended); [`Reply::Files`].
    Files(FilesRequest),
    /// A pipeline's working copy seeded from an earlier run's; [`Reply::Seeded`].
    Seed(Box<SeedRequest>),
}

impl Request {
    /// The request's `op`, for a message about its answer.
    pub fn op(&self) -> &'static str {
        match self {
            Request::Ready(_) => "ready",
            Request::Deploy(_) => "deploy",
            Request::Run(_) => "run",
            Request::Serve => "serve",
            Request::Wait(_) => "wait",
            Request::Cancel(_) => "cancel",
            Request::Tail(_) => "tail",
            Request::Outputs(_) => "outputs",
            Request::Check(_) => "check",
            Request::Materialize(_) => "materialize",
            Request::Changed(_) => "changed",
            Request::Read(_) => "read",
            Request::Files(_) => "files",
            Request::Seed(_) => "seed",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadyRequest {
    pub run_dir: String,
    pub workspace_root: String,
    /// Files to hash there (the absolute paths the run input names).
    pub inputs: Vec<String>,
    /// Programs to look up on the PATH there.
    pub programs: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeployRequest {
    /// Created by the agent, which refuses an existing one or a parent reached through a symlink.
    pub run_dir: String,
    pub files: Vec<DeployFile>,
}

/// One file for `deploy`: its path under run_dir, its content, checksum and mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeployFile {
    pub path: String,
    pub b64: String,
    pub sha256: String,
    pub mode: u32,
}

impl DeployFile {
    pub fn new(path: &str, bytes: &[u8], mode: u32) -> DeployFile {
        use base64::Engine as _;
        DeployFile {
            path: path.to_string(),
            b64: base64::engine::general_purpose::STANDARD.encode(bytes),
            sha256: cairn_core::canonical::sha256_hex(bytes),
            mode,
        }
    }
}

/// One attempt to launch. The agent stores it as the attempt's `request.json` before the launch;
/// `wait` and `cancel` read the launch's limits from there, so the names of the fields they read
/// (`attempt_dir`, `nonce`, `cwd`, `run_dir`, `timeout`, `grace`, `stop_signal`, `max_stdout`,
/// `stderr_tail`, `controller`, `slurm`) are kept across protocols (every `request.json` ever
/// written has all of them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRequest {
    /// Created exclusively: an attempt directory that exists means this attempt was launched.
    pub attempt_dir: String,
    /// Names this launch in pid.json (and a Slurm job's name); re-attaching needs it.
    pub nonce: String,
    pub argv: Vec<String>,
    pub cwd: String,
    pub run_dir: String,
    /// The tool's environment is built there by the rule `sandbox_env` applies here: these names
    /// ([`crate::BASE_ENV`]) and then `allow_env` from the agent's environment when set, every
    /// variable of it starting with `env_prefix`, then `env`, which wins.
    pub base_env: Vec<String>,
    pub allow_env: Vec<String>,
    pub env_prefix: String,
    pub env: BTreeMap<String, String>,
    /// The tool's stdin (its canonical JSON arguments).
    pub stdin: String,
    /// Seconds.
    pub timeout: f64,
    /// Seconds between the stop signal and SIGKILL.
    pub grace: f64,
    pub stop_signal: StopSignal,
    pub max_stdout: usize,
    pub stderr_tail: usize,
    /// The pipeline controller's program (`snakemake`, `nextflow`), for its report.
    pub controller: Option<String>,
    /// Launch as a Slurm job instead of a process.
    pub slurm: Option<SlurmJob>,
    /// Tool files the agent re-hashes before the launch: a changed one is refused.
    pub check_files: Vec<CheckFile>,
    /// The tool's secrets, added to its environment only: the agent keeps them out of
    /// `request.json` and of every file it writes, and replaces them by `[secret NAME]` in the
    /// tool's stdout and stderr once it has exited. A Slurm job gets them from `sbatch`'s own
    /// environment (`--export` names them), never from a file or its command line.
    #[serde(default)]
    pub secrets: Secrets,
}

/// Secret values by name. Its `Debug` shows the names only, so no log of a request holds a value.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secrets(pub BTreeMap<String, String>);

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

/// The signal a stop sends the tool's process group first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopSignal {
    #[serde(rename = "SIGTERM")]
    Term,
    /// Lets a pipeline controller stop its jobs and release its lock.
    #[serde(rename = "SIGINT")]
    Int,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlurmJob {
    pub partition: Option<String>,
    pub account: Option<String>,
    /// Slurm's own limit, which holds even when no one follows the job.
    pub time_minutes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckFile {
    pub path: String,
    pub sha256: String,
}

/// A recorded launch: the attempt directory and the nonce it must hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitRequest {
    pub attempt_dir: String,
    pub nonce: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CancelRequest {
    pub attempt_dir: String,
    pub nonce: String,
    /// Seconds between the stop signal and SIGKILL.
    pub grace: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TailRequest {
    pub path: String,
    pub max_bytes: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputsRequest {
    pub run_dir: String,
    pub step_id: String,
    pub outputs: Vec<OutputDecl>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckRequest {
    pub run_dir: String,
    /// Paths relative to run_dir, with their recorded SHA-256.
    pub files: Vec<CheckFile>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MaterializeRequest {
    /// The source run's directory.
    pub from: String,
    /// The child's.
    pub to: String,
    /// Paths relative to both, with their recorded SHA-256.
    pub files: Vec<CheckFile>,
    /// Folders to create (declared folder outputs, maybe empty).
    pub dirs: Vec<String>,
    /// Hard-link where the filesystem allows; `false` always copies.
    pub link: bool,
    /// A marker under `to`: when it exists the files are left alone; written once they are there.
    pub once: Option<String>,
    /// Files given whole, under `to`: written where absent, checked where present.
    pub write: Vec<DeployFile>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangedRequest {
    pub work_dir: String,
    /// What an artifact's path starts with, relative to the run directory.
    pub prefix: String,
    /// The working copy as it was deployed: paths relative to `work_dir`, with their SHA-256.
    pub baseline: Vec<CheckFile>,
    /// Top-level entries of `work_dir` that are the controller's own state.
    pub exclude: Vec<String>,
    /// The controller's record of its jobs, relative to `work_dir`, whose digest to give.
    #[serde(default)]
    pub state: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FilesRequest {
    pub work_dir: String,
    /// Each job's outputs: paths relative to `work_dir`, as its block named them.
    pub jobs: Vec<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadRequest {
    pub path: String,
    pub offset: u64,
    pub max_bytes: usize,
}

/// The `read` reply: the bytes from `offset` (at most the asked number), and the file's size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chunk {
    pub b64: String,
    pub offset: u64,
    /// The file's whole size (0 when it does not exist).
    pub size: u64,
}

impl Chunk {
    /// The bytes read (a corrupt encoding reads as none).
    pub fn bytes(&self) -> Vec<u8> {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.decode(&self.b64).unwrap_or_default()
    }
}

/// The `outputs` reply: the artifacts, or why the outputs cannot be recorded (the step's error).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HashedOutputs {
    pub artifacts: Vec<Artifact>,
    pub fault: Option<String>,
    /// The digest of the controller's record of its jobs, when [`ChangedRequest::state`] named
    /// one that is there.
    #[serde(default)]
    pub state_sha256: Option<String>,
}

/// Seeds a pipeline's working copy from an earlier run's (a replay re-executing it); as
/// [`crate::artifacts::seed_working_copy`] does here. [`Reply::Seeded`] or [`Reply::Error`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedRequest {
    /// The pipeline's folder (the deployed snapshot).
    pub snapshot: String,
    /// The working copy to make.
    pub to: String,
    /// The earlier run's working copy of the step.
    pub from: String,
    /// The pipeline's own files, with their SHA-256.
    pub baseline: Vec<CheckFile>,
    /// The outputs the earlier run recorded, with their SHA-256.
    pub files: Vec<CheckFile>,
    /// The controller's record of its jobs and its recorded digest.
    pub state: Option<SeedState>,
    pub write: Vec<DeployFile>,
    /// The marker that says the copy is made.
    pub once: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeedState {
    pub dir: String,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeededCounts {
    pub carried: usize,
    pub left_out: Vec<(String, String)>,
    pub state: bool,
    pub present: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MaterializedCounts {
    pub linked: usize,
    pub copied: usize,
    pub present: usize,
}

/// What the agent answers; each variant is one key of the reply line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// A serving agent is ready; its pid.
    Serving(u32),
    Ready(ReadyFacts),
    /// How many files were written.
    Deployed(usize),
    /// Who the launch is, recorded in pid.json before this is said.
    Identity(Identity),
    /// How the launch ended.
    Exit(Box<StepExit>),
    /// The attempt directory holds another launch (another nonce, or files of a protocol this
    /// agent does not read): nothing was touched.
    Mismatch(String),
    /// Nothing of the launch is left to observe: no pid file, or its supervisor died silently.
    Lost(String),
    Cancelled(Cancelled),
    Tail(Tail),
    Outputs(HashedOutputs),
    /// Each file asked about: `None` when it holds the recorded bytes, else what is there.
    Checked(BTreeMap<String, Option<Found>>),
    Materialized(MaterializedCounts),
    Chunk(Chunk),
    /// Each job's outputs, in the order asked, as [`crate::artifacts::job_files`] gives them.
    Files(Vec<Vec<JobFile>>),
    Seeded(SeededCounts),
    /// The request failed, in words.
    Error(String),
    /// The agent does not speak the request's protocol.
    Unsupported(Unsupported),
}

impl Reply {
    /// The reply's key, for a message about an unexpected one.
    pub fn name(&self) -> &'static str {
        match self {
            Reply::Serving(_) => "serving",
            Reply::Ready(_) => "ready",
            Reply::Deployed(_) => "deployed",
            Reply::Identity(_) => "identity",
            Reply::Exit(_) => "exit",
            Reply::Mismatch(_) => "mismatch",
            Reply::Lost(_) => "lost",
            Reply::Cancelled(_) => "cancelled",
            Reply::Tail(_) => "tail",
            Reply::Outputs(_) => "outputs",
            Reply::Checked(_) => "checked",
            Reply::Materialized(_) => "materialized",
            Reply::Chunk(_) => "chunk",
            Reply::Files(_) => "files",
            Reply::Seeded(_) => "seeded",
            Reply::Error(_) => "error",
            Reply::Unsupported(_) => "unsupported",
        }
    }
}

/// What the agent observed for a run_dir: the core's type, which a plan records.
pub use cairn_core::target::ReadyFacts;

/// Who a launch is: the contents of its `pid.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Identity {
    /// The protocol of the agent that recorded it; 0 before versions existed.
    #[serde(default)]
    pub protocol: u32,
    pub nonce: String,
    /// Seconds since the epoch on the controller host: a re-attach's deadline counts from it.
    pub launched_at: f64,
    #[serde(flatten)]
    pub launch: Launch,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Launch {
    /// A process in its own session and process group, under the agent's supervisor.
    Process {
        pid: u32,
        pgid: u32,
        /// Field 22 of /proc/<pid>/stat; with the pid, it tells the process from a reused pid.
        start_time: Option<u64>,
        supervisor_pid: u32,
        supervisor_start_time: Option<u64>,
    },
    /// A Slurm job, named `cairn-<nonce>`.
    Slurm { job_id: String },
}

/// How an attempt ended: the contents of its `exit.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExitRecord {
    /// The protocol of the agent that recorded it; 0 before versions existed.
    #[serde(default)]
    pub protocol: u32,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub killed_after_grace: bool,
    /// Why the tool could not be started or supervised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The tool's own time, as its supervisor measured it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    /// The Slurm job's state when its end was seen (a job that ended before its tool recorded
    /// how it ended has only this).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_exit_code: Option<String>,
}

/// The `exit` reply: the record with the attempt's bounded output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepExit {
    #[serde(flatten)]
    pub record: ExitRecord,
    pub stdout_b64: String,
    /// The full size of stdout; only up to `max_stdout` bytes are ever sent.
    pub stdout_bytes: u64,
    pub stderr_tail: String,
    /// A Snakemake controller's report (its outputs under `results/`, progress, lock state): the
    /// step's result, passed on as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<Value>,
    /// The room left on the filesystem holding the tool's working directory, read by the agent as
    /// it answers (so Cairn can name a full disk there). Added within protocol 1: an older agent
    /// sends none, and an attempt file holds none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disks: Vec<DiskSpace>,
}

impl StepExit {
    /// The tool's own time, as its supervisor measured it there.
    pub fn duration(&self) -> Option<Duration> {
        self.record.duration_s.and_then(|s| Duration::try_from_secs_f64(s).ok())
    }

    /// The end as `classify_recorded` takes it. For a controller that exited 0, its report is the
    /// result.
    pub fn recorded_end(self, controller: bool) -> RecordedEnd {
        use base64::Engine as _;
        let r = self.record;
        let mut end = RecordedEnd {
            exit_code: r.exit_code,
            signal: r.signal,
            timed_out: r.timed_out,
            killed_after_grace: r.killed_after_grace,
            error: r.error,
            // The agent encodes what it read; a corrupt copy is no output, which fails the step.
            stdout: base64::engine::general_purpose::STANDARD.decode(&self.stdout_b64).unwrap_or_default(),
            stdout_bytes: self.stdout_bytes,
            stderr_tail: self.stderr_tail,
            disks: self.disks,
        };
        if let Some(state) = r.slurm_state
            && end.exit_code.is_none()
            && end.signal.is_none()
            && end.error.is_none()
        {
            end.error = Some(if end.timed_out {
                format!("its Slurm job ended {state} (the time limit) before the tool recorded its end")
            } else {
                format!("its Slurm job ended {state} before the tool recorded its end")
            });
        }
        if controller && end.exit_code == Some(0) && !end.timed_out {
            end.stdout = self.controller.unwrap_or(Value::Null).to_string().into_bytes();
            end.stdout_bytes = end.stdout.len() as u64;
        }
        end
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cancelled {
    /// Whether a stop was sent (false: nothing was recorded there, or the tool had ended).
    pub stopped: bool,
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tail {
    pub text: String,
    /// The file's full size.
    pub bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unsupported {
    /// The protocol the agent speaks.
    pub agent: u32,
    /// The request's, `None` when it carried none.
    pub request: Option<u64>,
    /// The agent's words: both versions and what to do.
    pub error: String,
}

/// A reply line this Cairn cannot take.
#[derive(Debug, thiserror::Error)]
pub enum ReplyError {
    #[error(
        "answered in protocol {got}, but this Cairn speaks protocol {PROTOCOL}: the agent it sent and this binary come from different builds; reinstall Cairn"
    )]
    Version { got: String },
    #[error("printed an answer this Cairn cannot read: {0}")]
    Unreadable(String),
}

/// One line the agent printed, decoded: its request id and the reply.
#[derive(Debug)]
pub struct Line {
    pub id: Option<u64>,
    pub reply: Result<Reply, ReplyError>,
}

/// Decodes one line of the agent's output. `None` for a line that is not an answer: a login shell
/// may print before the agent runs, and only a JSON object with a `protocol` is an answer.
pub fn decode_line(line: &str) -> Option<Line> {
    let value: Value = serde_json::from_str(line).ok()?;
    let protocol = value.get("protocol")?;
    let id = value.get("id").and_then(Value::as_u64);
    let reply = if protocol.as_u64() == Some(u64::from(PROTOCOL)) {
        serde_json::from_value::<Envelope<Reply>>(value)
            .map(|e| e.body)
            .map_err(|e| ReplyError::Unreadable(e.to_string()))
    } else {
        Err(ReplyError::Version { got: protocol.to_string() })
    };
    Some(Line { id, reply })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reply(v: Value) -> Reply {
        decode_line(&v.to_string()).expect("an answer").reply.expect("a readable reply")
    }

    #[test]
    fn a_request_is_one_flat_object_with_its_protocol_and_op() {
        let line = serde_json::to_value(Envelope::new(Request::Wait(WaitRequest {
            attempt_dir: "/r/a".into(),
            nonce: "n".into(),
        })))
        .unwrap();
        assert_eq!(line, json!({"protocol": PROTOCOL, "op": "wait", "attempt_dir": "/r/a", "nonce": "n"}));
        let serve = serde_json::to_value(Envelope { protocol: PROTOCOL, id: Some(3), body: Request::Serve }).unwrap();
        assert_eq!(serve, json!({"protocol": PROTOCOL, "id": 3, "op": "serve"}));
    }

    #[test]
    fn identities_and_ends_of_either_kind_and_of_protocol_0_decode() {
        // pid.json and exit.json as the agent wrote them before versions: no `protocol`.
        let process = reply(json!({"protocol": 1, "id": 7, "identity": {"nonce": "n", "pid": 10, "pgid": 10,
            "start_time": 5, "supervisor_pid": 9, "supervisor_start_time": null, "launched_at": 1.5}}));
        let Reply::Identity(id) = process else { panic!("{process:?}") };
        assert_eq!(id.protocol, 0);
        assert_eq!(
            id.launch,
            Launch::Process { pid: 10, pgid: 10, start_time: Some(5), supervisor_pid: 9, supervisor_start_time: None }
        );
        let slurm =
            reply(json!({"protocol": 1, "identity": {"protocol": 1, "nonce": "n", "job_id": "42", "launched_at": 2}}));
        let Reply::Identity(id) = slurm else { panic!("{slurm:?}") };
        assert_eq!(id.launch, Launch::Slurm { job_id: "42".into() });

        let exit = reply(json!({"protocol": 1, "exit": {"exit_code": 0, "signal": null, "timed_out": false,
            "killed_after_grace": false, "duration_s": 0.25, "stdout_b64": "e30=", "stdout_bytes": 2,
            "stderr_tail": "warn"}}));
        let Reply::Exit(exit) = exit else { panic!("{exit:?}") };
        assert_eq!(exit.duration(), Some(Duration::from_millis(250)));
        let end = exit.recorded_end(false);
        assert_eq!((end.exit_code, end.stdout, end.stderr_tail), (Some(0), b"{}".to_vec(), "warn".to_string()));
        assert!(end.disks.is_empty(), "an agent that reads no disk sends none");

        let full = reply(json!({"protocol": 1, "exit": {"exit_code": 1, "signal": null, "timed_out": false,
            "killed_after_grace": false, "stdout_b64": "", "stdout_bytes": 0, "stderr_tail": "",
            "disks": [{"path": "/scratch", "free_bytes": 0, "free_inodes": 12}]}}));
        let Reply::Exit(full) = full else { panic!("{full:?}") };
        let disk = DiskSpace { path: "/scratch".into(), free_bytes: 0, free_inodes: Some(12) };
        assert_eq!(full.recorded_end(false).disks, [disk]);
    }

    #[test]
    fn a_slurm_job_that_ended_before_its_tool_recorded_an_end_says_so() {
        let exit = StepExit {
            record: ExitRecord { timed_out: true, slurm_state: Some("CANCELLED".into()), ..Default::default() },
            stdout_b64: String::new(),
            stdout_bytes: 0,
            stderr_tail: String::new(),
            controller: None,
            disks: Vec::new(),
        };
        let error = exit.recorded_end(false).error.unwrap_or_default();
        assert!(error.contains("CANCELLED (the time limit)"), "{error}");
    }

    #[test]
    fn a_reply_of_another_protocol_is_refused_and_noise_is_not_an_answer() {
        let line = decode_line(r#"{"protocol": 2, "id": 4, "exit": {}}"#).unwrap();
        assert_eq!(line.id, Some(4));
        let err = line.reply.unwrap_err().to_string();
        assert!(err.contains("protocol 2") && err.contains(&format!("speaks protocol {PROTOCOL}")), "{err}");
        assert!(decode_line("Welcome to the cluster").is_none());
        assert!(decode_line(r#"{"motd": true}"#).is_none());
        let bad = decode_line(r#"{"protocol": 1, "identity": {"nonce": 3}}"#).unwrap();
        assert!(matches!(bad.reply, Err(ReplyError::Unreadable(_))), "{bad:?}");
    }
}
