//! The persistence contract the engine runs on, and the records it reads and writes. The SQLite
//! adapter in `cairn-store` implements it; every method is one transaction.
//!
//! Times are Unix milliseconds, durations microseconds; both are supplied by the caller's clock.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::access::{Act, ActQuery, ActRecord, Grant, Policy, Principal, Role};
use crate::artifact::{Artifact, ArtifactRecord};
use crate::cause::Cause;
use crate::event::RunEvent;
use crate::ids::{AttemptToken, Owner, RunId};
use crate::replay::ReplayRecord;
use crate::signature::StepSignature;
use crate::status::{Outcome, RunStatus, StepStatus};
use crate::validator::Finding;
use crate::workflow::WorkflowSpec;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowRecord {
    pub name: String,
    pub version: String,
    /// Content digest of the registered folder.
    pub digest: String,
    /// Absolute path of the content-addressed snapshot.
    pub path: String,
    pub spec: WorkflowSpec,
    pub registered_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegisterOutcome {
    Inserted,
    AlreadyRegistered,
    Conflict { existing_digest: String },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub run_id: RunId,
    pub workflow: String,
    pub version: String,
    pub identity_hash: String,
    pub input: Value,
    pub status: RunStatus,
    pub revision: i64,
    pub run_dir: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub finished_at: Option<i64>,
    pub findings: Vec<Finding>,
    pub error: Option<String>,
    pub source_run_id: Option<RunId>,
    pub replay: Option<ReplayRecord>,
    /// The process executing the run (a daemon, or a CLI in-process), so a successor daemon
    /// recovers only what a dead owner left.
    pub owner: Option<Owner>,
    /// The conversation the run was submitted in (the API's `thread_id`).
    pub thread_id: Option<String>,
    /// The approved plan it executes, if any.
    pub plan_id: Option<String>,
    /// How many steps may execute at once, as submitted; recovery continues with it.
    pub parallelism: u32,
    /// The principal that submitted it (or executed its plan); `None` before this was recorded.
    pub submitted_by: Option<String>,
    /// The principal that cancelled it.
    pub cancelled_by: Option<String>,
    /// Since when it is held queued by a quota (it has not started); `None` once admitted.
    pub held_since: Option<i64>,
}

/// Which runs a list holds: newest first, at most `limit`, each filter applied when given.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunQuery<'a> {
    pub limit: usize,
    pub status: Option<RunStatus>,
    /// A workflow's name.
    pub workflow: Option<&'a str>,
    /// Only the replays of this run.
    pub source_run_id: Option<&'a RunId>,
}

impl RunQuery<'_> {
    /// The newest `limit` runs, unfiltered.
    pub fn newest(limit: usize) -> RunQuery<'static> {
        RunQuery { limit, ..RunQuery::default() }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewRun {
    /// The daemon that creates the run leases it from the start, until `until`.
    pub lease: Option<NewLease>,
    pub run_id: RunId,
    pub workflow: String,
    pub version: String,
    pub identity_hash: String,
    pub input: Value,
    pub run_dir: String,
    pub source_run_id: Option<RunId>,
    pub replay: Option<ReplayRecord>,
    pub owner: Option<Owner>,
    pub thread_id: Option<String>,
    /// How many steps may execute at once (1: serial).
    pub parallelism: u32,
    pub at: i64,
    /// Who submitted it (`run.submitted`), recorded with the run in its transaction; `None` for
    /// a run made by Cairn itself (a test, a recovery).
    pub act: Option<Act>,
    /// The quotas the transaction that creates it checks (refused over one, or created held).
    pub admission: crate::quota::Admission,
}

/// The lease a run gets when a daemon creates it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewLease {
    pub daemon: String,
    pub until: i64,
    /// The host holding the run's files, for a run on the local target.
    pub home_host: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum CreateRun {
    Created(RunRecord),
    /// A run with this id exists; the caller compares identities.
    Existing(RunRecord),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessInfo {
    pub pid: u32,
    pub pgid: u32,
    pub start_time: Option<u64>,
    /// Set when the step agent supervises the attempt (on a target, or a local controller): how
    /// to find the launch again. `pid`/`pgid` are then on the controller host, not here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<RemoteProcess>,
}

/// How a recorded launch is found again: the attempt directory on the controller host and the
/// nonce the launch wrote there. Stored before the launch, completed with what the launch saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteProcess {
    /// The target's name (`local` for a controller on this machine).
    pub target: String,
    pub attempt_dir: String,
    pub nonce: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
}

/// Which of a run's steps to read: a page of them in the DAG's order, of some statuses only,
/// failed and running first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepQuery {
    pub offset: usize,
    /// At most this many; `None`: every one from `offset`.
    pub limit: Option<usize>,
    /// Only steps in these statuses ([`STEP_STATUSES`]); empty: all.
    pub statuses: Vec<&'static str>,
    /// FAILED steps first, then RUNNING, then the rest, each in the DAG's order.
    pub attention_first: bool,
    /// Only these steps; empty: all.
    pub ids: Vec<String>,
    /// Only the steps of this layer of the DAG ([`LayerCounts`]).
    pub layer: Option<usize>,
}

impl StepQuery {
    /// Every step, in the DAG's order.
    pub fn every() -> StepQuery {
        StepQuery::default()
    }

    /// Whether it asks for every step.
    pub fn is_every(&self) -> bool {
        self.offset == 0
            && self.limit.is_none()
            && self.statuses.is_empty()
            && self.ids.is_empty()
            && self.layer.is_none()
    }
}

/// One layer of a run's DAG (its steps that need none, or whose deepest need is in the layer
/// before) with its steps' counts by status: how a graph of a huge run is drawn.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LayerCounts {
    pub layer: usize,
    pub counts: StepCounts,
    /// Its first few steps, in the DAG's order.
    pub first: Vec<String>,
}

/// A step with no attempt yet, as a page shows its status.
pub const PENDING: &str = "PENDING";

/// The statuses a step is shown in: [`PENDING`] (no attempt yet), then a record's.
pub const STEP_STATUSES: [&str; 4] = [PENDING, "RUNNING", "COMPLETED", "FAILED"];

/// How many of a run's steps are in each status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepCounts {
    pub total: usize,
    pub pending: usize,
    pub running: usize,
    pub completed: usize,
    pub failed: usize,
}

/// The steps a [`StepQuery`] chose, with how many matched it and the run's counts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepPage {
    pub counts: StepCounts,
    /// How many steps matched the query's filters (every step without one).
    pub matched: usize,
    pub steps: Vec<PagedStep>,
}

/// One step of a page, in the DAG's order.
#[derive(Debug, Clone, PartialEq)]
pub struct PagedStep {
    pub step_id: String,
    /// Its tool is a pipeline controller (its jobs are folded from its events).
    pub pipeline: bool,
    /// `None` while it has no attempt (PENDING).
    pub record: Option<StepRecord>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub run_id: RunId,
    pub step_id: String,
    pub status: StepStatus,
    pub signature: StepSignature,
    pub args: Value,
    /// Attempts started in this run (0 for a step copied by replay).
    pub attempt_count: u32,
    /// Attempts abandoned by a crash and resumed explicitly; they do not use up retries.
    pub interrupted_count: u32,
    pub attempt_token: Option<AttemptToken>,
    pub outcome: Option<Outcome>,
    pub result: Option<Value>,
    pub error: Option<String>,
    /// What made its last attempt fail, when it is known (a full disk); cleared by a retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
    pub log_tail: Option<String>,
    pub process: Option<ProcessInfo>,
    pub started_at: i64,
    pub finished_at: Option<i64>,
    /// Wall time of the last attempt's process.
    pub duration_us: Option<i64>,
    /// For a replay child: the run the evidence was copied from.
    pub reused_from: Option<RunId>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    pub seq: i64,
    pub run_id: RunId,
    pub step_id: Option<String>,
    pub attempt: Option<u32>,
    pub at: i64,
    pub event: RunEvent,
}

/// How an attempt begins.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptStart {
    /// The step has no row yet.
    First,
    /// The previous attempt ended with a retryable outcome (for `cause`, when it is known). The
    /// new attempt's tool starts `delay_ms` after the begin is written (a full disk is given time
    /// to be freed; [`crate::cause::retry_delay_ms`]).
    Retry { previous_token: AttemptToken, outcome: Outcome, error: Option<String>, cause: Option<Cause>, delay_ms: u64 },
    /// The previous attempt was abandoned (RUNNING after a crash) and is resumed explicitly, or
    /// it was a pipeline's controller killed from outside (`why`), resumed in its working copy.
    ResumeInterrupted { previous_token: AttemptToken, why: Option<String> },
}

#[derive(Debug, Clone, PartialEq)]
pub struct BeginAttempt {
    pub run_id: RunId,
    pub step_id: String,
    pub signature: StepSignature,
    pub args: Value,
    pub token: AttemptToken,
    /// The attempt's number (1-based).
    pub attempt: u32,
    pub start: AttemptStart,
    pub at: i64,
}

/// The end of an attempt, written only if `token` still owns the step.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishAttempt {
    pub run_id: RunId,
    pub step_id: String,
    pub token: AttemptToken,
    pub attempt: u32,
    pub outcome: Outcome,
    pub result: Option<Value>,
    pub error: Option<String>,
    /// What made a FAILED attempt fail, when it is known.
    pub cause: Option<Cause>,
    pub log_tail: Option<String>,
    pub duration_us: i64,
    /// The files a completed attempt produced; recorded with the completion.
    pub artifacts: Vec<Artifact>,
    pub at: i64,
}

/// One verification of a document in a scratch kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerificationRecord {
    pub id: String,
    pub title: String,
    pub document: String,
    pub document_sha256: String,
    /// `None` while it runs.
    pub verdict: Option<String>,
    /// `[{index, status, duration_ms, error?, …}]`.
    pub cells: Value,
    pub notebook: Option<String>,
    pub draft: Option<String>,
    pub error: Option<String>,
    pub created_at: i64,
    pub finished_at: Option<i64>,
    /// The parameters it injected, an object (`{}` without any).
    pub parameters: Value,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("run `{0}` was not found; list runs with `cairn runs`")]
    RunNotFound(String),
    #[error(
        "attempt token of step `{step_id}` in run `{run_id}` is stale: another attempt owns the step now, so this write was rejected"
    )]
    StaleToken { run_id: String, step_id: String },
    #[error("run `{run_id}` was changed by another writer (revision {expected} is no longer current)")]
    StaleRevision { run_id: String, expected: i64 },
    #[error("run `{run_id}` is already {status}; a finished run takes no new attempts")]
    RunFinished { run_id: String, status: String },
    #[error("step `{step_id}` of run `{run_id}` already has a record")]
    StepExists { run_id: String, step_id: String },
    #[error("a plan named `{0}` exists already; plans are immutable, so choose another --name")]
    PlanExists(String),
    #[error("receipt `{0}` was consumed already; a receipt approves one execution, once")]
    ReceiptConsumed(String),
    #[error("run_dir {run_dir} on target `{target}` is reserved by run `{run_id}`; one run per target and run_dir")]
    RunDirReserved { target: String, run_dir: String, run_id: String },
    #[error("a target named `{0}` exists already; remove it first with `cairn target remove {0}`")]
    TargetExists(String),
    /// A doc search the full-text index cannot parse (its message).
    #[error("{0}")]
    InvalidDocQuery(String),
    #[error(
        "daemon `{daemon}` no longer holds the lease of run `{run_id}` (its epoch {epoch} was taken over by {holder}); its write was refused and it stops driving the run"
    )]
    LeaseLost { run_id: String, daemon: String, epoch: i64, holder: String },
    /// A claim that found the run's row locked by another transaction (another daemon claiming
    /// or driving it at that moment): skipped, not waited for.
    #[error(
        "run `{run_id}` is being written by another daemon at this moment; its claim was skipped and is tried again at the next takeover tick"
    )]
    RunBusy { run_id: String },
    /// A process that holds no lease on a run tried to drive it while a daemon's lease on it is
    /// current: it would run the steps that daemon runs.
    #[error(
        "run `{run_id}` is driven by daemon `{daemon}` (its lease runs until {until} ms since the epoch); it continues there, or, if that daemon is gone, once its lease expires a daemon takes it over"
    )]
    RunLeased { run_id: String, daemon: String, until: i64 },
    #[error("a principal named `{0}` exists already (names are never reused, revoked ones included); choose another")]
    PrincipalExists(String),
    #[error("a role named `{0}` exists already; remove it first with `cairn role remove {0}`")]
    RoleExists(String),
    /// A run over quota `quota` (its index in the submission's admission) was not created.
    #[error("over quota {quota}: {used} in use")]
    QuotaExceeded { quota: usize, used: u64 },
    #[error("the registry database failed: {0}")]
    Database(String),
    #[error("the registry holds a record this version of cairn cannot read: {0}")]
    Corrupt(String),
}

/// One job of the session kernel: its code, outputs, status and timings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelJob {
    pub job_id: String,
    /// The kernel process the job ran in (a restart starts a new session).
    pub session: String,
    pub code: String,
    pub status: KernelJobStatus,
    /// nbformat v4 output dicts.
    pub outputs: Vec<Value>,
    pub execution_count: Option<u32>,
    pub error: Option<String>,
    pub submitted_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub duration_ms: Option<i64>,
}

/// How far a session kernel job has got, and how it ended; stored as its `as_str` text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelJobStatus {
    Queued,
    Running,
    Ok,
    /// The code raised.
    Error,
    /// The kernel died under it, or its daemon did before it ended.
    Died,
    /// It ran past its timeout: interrupted, then its kernel killed.
    TimedOut,
    /// A person's interrupt (KeyboardInterrupt) ended it.
    Interrupted,
    /// The session kernel was restarted while it was queued or running.
    Cancelled,
}

impl KernelJobStatus {
    pub const ALL: [KernelJobStatus; 8] = [
        KernelJobStatus::Queued,
        KernelJobStatus::Running,
        KernelJobStatus::Ok,
        KernelJobStatus::Error,
        KernelJobStatus::Died,
        KernelJobStatus::TimedOut,
        KernelJobStatus::Interrupted,
        KernelJobStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            KernelJobStatus::Queued => "queued",
            KernelJobStatus::Running => "running",
            KernelJobStatus::Ok => "ok",
            KernelJobStatus::Error => "error",
            KernelJobStatus::Died => "died",
            KernelJobStatus::TimedOut => "timed_out",
            KernelJobStatus::Interrupted => "interrupted",
            KernelJobStatus::Cancelled => "cancelled",
        }
    }

    /// Whether the job has ended (it is neither queued nor running).
    pub fn has_ended(self) -> bool {
        !matches!(self, KernelJobStatus::Queued | KernelJobStatus::Running)
    }
}

impl std::fmt::Display for KernelJobStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for KernelJobStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        KernelJobStatus::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("`{s}` is not a kernel job status"))
    }
}

/// The index row of a stored plan (the plan itself is an immutable file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanRecord {
    pub plan_name: String,
    pub plan_id: String,
    pub plan_checksum: String,
    pub workflow: String,
    pub version: String,
    pub target: String,
    pub run_dir: String,
    pub created_at: i64,
    /// The principal that made it; `None` before this was recorded.
    pub planned_by: Option<String>,
}

/// What consuming a receipt does, in one transaction: the receipt is marked consumed, the
/// `target + run_dir` reserved, and the run created.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumeReceipt {
    pub receipt_id: String,
    pub plan_id: String,
    pub target: String,
    /// How the person approved it, kept with the consumed receipt.
    pub channel: crate::plan::ApprovalChannel,
    /// Who approved it (`plan.approved`); the run's own `act` says who submitted it.
    pub act: Option<Act>,
    pub run: NewRun,
}

/// A procedure doc in the index: its name, its newest version (with that version's summary),
/// and its tombstone once removed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DocRecord {
    pub name: String,
    /// The newest version (versions are 1, 2, …; none is ever overwritten or deleted).
    pub latest_version: u32,
    /// The newest version itself.
    pub latest: DocVersion,
    pub created_at: i64,
    pub updated_at: i64,
    /// When `remove_doc` tombstoned it; its versions stay readable by number.
    pub removed_at: Option<i64>,
}

/// One saved version of a doc (its text is read with `doc_text`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DocVersion {
    pub name: String,
    pub version: u32,
    /// The first heading, else the doc's name.
    pub title: String,
    pub bytes: u64,
    pub sha256: String,
    /// The passed verification the doc was saved from, if any.
    pub verification_id: Option<String>,
    /// That verification's notebook, as it was when the doc was saved.
    pub notebook: Option<String>,
    pub saved_at: i64,
}

/// A new version to save, with its text.
#[derive(Debug, Clone, PartialEq)]
pub struct NewDocVersion {
    pub name: String,
    pub text: String,
    pub sha256: String,
    pub title: String,
    pub verification_id: Option<String>,
    pub notebook: Option<String>,
    pub at: i64,
}

/// What a save did.
#[derive(Debug, Clone, PartialEq)]
pub enum SaveDoc {
    /// A new version was written.
    Saved(DocVersion),
    /// The doc's newest version already holds this text from the same verification; nothing was
    /// written (so a retried save makes no duplicate).
    Unchanged(DocVersion),
}

/// One doc a search found: its newest version, ranked.
#[derive(Debug, Clone, PartialEq)]
pub struct DocHit {
    pub name: String,
    pub version: u32,
    pub title: String,
    /// An excerpt around the matches, each matched term between [`crate::docs::HIGHLIGHT_START`]
    /// and [`crate::docs::HIGHLIGHT_END`].
    pub snippet: String,
    /// BM25 relevance (higher is better).
    pub score: f64,
}

/// A daemon as the registry knows it: one row per daemon start, its heartbeat renewed while it
/// lives, so other daemons tell a live one from a dead one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonRecord {
    /// `dmn_…`, new at every start.
    pub id: String,
    /// The host it runs on (its name, or `CAIRN_HOST_ID`).
    pub host: String,
    pub pid: u32,
    /// Its process start time (clock ticks since boot), so its pid can be checked on its host.
    pub start_time: u64,
    pub state_root: String,
    pub started_at: i64,
    pub heartbeat_at: i64,
    /// Set when it stopped cleanly (its leases released).
    pub stopped_at: Option<i64>,
}

/// The lease of a run a daemon drives: only its holder writes the run, and only while it holds
/// the epoch it was given. A daemon that takes a run over increments the epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub daemon: String,
    pub epoch: i64,
}

/// What a run's lease row says, with its holder's daemon row, for deciding whether another
/// daemon may take it over.
#[derive(Debug, Clone, PartialEq)]
pub struct LeasedRun {
    pub run: RunRecord,
    /// `None` for a run no daemon leases (made in-process, or before leases).
    pub lease: Option<Lease>,
    pub expires_at: Option<i64>,
    /// The holder's daemon row, if it is known.
    pub holder: Option<DaemonRecord>,
    /// The host whose state root holds the run's files (its run directory), for a run executed
    /// on the local target; `None` for one on an SSH or Slurm target, which any daemon reaches.
    pub home_host: Option<String>,
}

/// Daemons and the leases of the runs they drive: a team's daemons share one registry, each drives the runs it leases.
pub trait Daemons {
    /// Records a daemon that starts; its heartbeat starts now.
    fn register_daemon(&self, daemon: &DaemonRecord) -> Result<(), StoreError>;
    /// Renews `daemon`'s heartbeat and the leases of the open runs it holds, until `until`;
    /// returns the leases it still holds (a run taken over, or finished, is not among them).
    fn heartbeat(&self, daemon: &str, at: i64, until: i64) -> Result<Vec<(RunId, Lease)>, StoreError>;
    /// A daemon stopping cleanly: its leases end now (the next daemon need not wait for them).
    fn stop_daemon(&self, daemon: &str, at: i64) -> Result<(), StoreError>;
    /// Daemons whose heartbeat is not older than `since` and that have not stopped, oldest first.
    fn live_daemons(&self, since: i64) -> Result<Vec<DaemonRecord>, StoreError>;
    /// The open runs `daemon` holds the lease of, oldest first.
    fn leased_runs(&self, daemon: &str) -> Result<Vec<RunId>, StoreError>;
    /// Every open run with its lease row and its holder's daemon row, oldest first, but those
    /// `except_daemon` leases (it drives them): what a daemon decides which runs to take over
    /// from ([`crate::lease::takeover`]).
    fn open_leases(&self, except_daemon: &str) -> Result<Vec<LeasedRun>, StoreError>;
    /// An open run's lease row, with its holder.
    fn leased_run(&self, run_id: &RunId) -> Result<Option<LeasedRun>, StoreError>;
    /// Takes the lease of `run_id` for `daemon` until `until`, if its epoch and revision are still
    /// `seen_epoch` and `seen_revision` (else another daemon or process took it first:
    /// `StaleRevision`), with a `run.leased` event and a new revision (whoever claims the run
    /// with the revision it saw before now is refused); from now on this store refuses any write
    /// of the run under an older epoch. Returns the new lease.
    #[allow(clippy::too_many_arguments)]
    fn take_lease(
        &self,
        run_id: &RunId,
        daemon: &DaemonRecord,
        seen_epoch: i64,
        seen_revision: i64,
        until: i64,
        at: i64,
    ) -> Result<Lease, StoreError>;
    /// This store no longer writes `run_id` as a lease holder (the run finished here, or its
    /// lease was lost).
    fn drop_lease(&self, run_id: &RunId);
    /// Records that a write under a lost lease was refused (`run.stale_lease_write_rejected`).
    fn record_stale_lease(&self, run_id: &RunId, lease: &Lease, at: i64) -> Result<(), StoreError>;
}

/// The registered workflows, by name and version.
pub trait WorkflowRegistry {
    fn register_workflow(&self, record: &WorkflowRecord) -> Result<RegisterOutcome, StoreError>;
    /// A workflow by name and exact version, or the highest registered version when `None`.
    fn workflow(&self, name: &str, version: Option<&str>) -> Result<Option<WorkflowRecord>, StoreError>;
    fn workflows(&self) -> Result<Vec<WorkflowRecord>, StoreError>;
}

/// Runs: their creation, their lookups, and the moves of their status (finish, claim, cancel).
pub trait Runs {
    /// Creates a RUNNING run with a `run.created` event, or returns the existing one.
    fn create_run(&self, new: &NewRun) -> Result<CreateRun, StoreError>;
    fn run(&self, run_id: &RunId) -> Result<Option<RunRecord>, StoreError>;
    /// A run's status alone (what an event follower checks after every commit).
    fn run_status(&self, run_id: &RunId) -> Result<Option<RunStatus>, StoreError>;
    /// The runs `query` selects, newest first.
    fn runs(&self, query: &RunQuery<'_>) -> Result<Vec<RunRecord>, StoreError>;
    /// Moves a non-terminal run to a terminal status, guarded by its revision.
    fn finish_run(
        &self,
        run_id: &RunId,
        expected_revision: i64,
        status: RunStatus,
        findings: &[Finding],
        error: Option<&str>,
        at: i64,
    ) -> Result<RunRecord, StoreError>;
    /// Bumps the run's revision to take it over for an explicit resume, recording its new owner.
    /// Refused (`RunLeased`) while another daemon's lease on the run is current, unless this
    /// store holds that lease.
    fn claim_run(
        &self,
        run_id: &RunId,
        expected_revision: i64,
        owner: Option<&Owner>,
        at: i64,
    ) -> Result<i64, StoreError>;
    /// Runs that are PENDING or RUNNING, oldest first.
    fn open_runs(&self) -> Result<Vec<RunRecord>, StoreError>;
    /// Moves a non-terminal run to CANCELLED and its RUNNING steps to FAILED with their tokens
    /// cleared (so a late write by their attempts is rejected as stale), in one transaction, with
    /// who cancelled it (`act`, a `run.cancelled`) when a principal did.
    fn cancel_run(&self, run_id: &RunId, reason: &str, at: i64, act: Option<&Act>) -> Result<RunRecord, StoreError>;
    /// Appends run-level events that change no state (a wait for the environment, its end) to an
    /// open run's log, in one transaction, fenced by the run's lease like every write of it.
    /// Returns false, writing nothing, when the run has finished meanwhile.
    fn note_run(&self, run_id: &RunId, events: &[RunEvent], at: i64) -> Result<bool, StoreError>;
}

/// A run's steps, their attempts (each write fenced by its token) and the run's append-only event log.
pub trait Attempts {
    fn steps(&self, run_id: &RunId) -> Result<Vec<StepRecord>, StoreError>;
    /// The steps of a run `query` asks for, in its workflow's DAG order, with their rows and
    /// its counts by status: a page of a huge run without reading the rest (or its definition).
    fn step_page(&self, run_id: &RunId, query: &StepQuery) -> Result<StepPage, StoreError>;
    /// The layers `offset..offset+limit` of a run's DAG with their counts, and how many layers
    /// it has.
    fn layer_counts(
        &self,
        run_id: &RunId,
        offset: usize,
        limit: usize,
    ) -> Result<(Vec<LayerCounts>, usize), StoreError>;
    /// The ids of a run's steps that have a row (started, completed or failed, or reused).
    fn step_ids(&self, run_id: &RunId) -> Result<Vec<String>, StoreError>;
    fn events(&self, run_id: &RunId, after_seq: i64) -> Result<Vec<EventRecord>, StoreError>;
    /// The newest `n` of a run's events, in order: where a view of a huge run's log starts.
    fn last_events(&self, run_id: &RunId, n: usize) -> Result<Vec<EventRecord>, StoreError>;
    /// A run's own events (those of no step) and those of these steps, in order: a page of a
    /// huge run's timeline without reading every step's.
    fn events_of_steps(&self, run_id: &RunId, step_ids: &[&str]) -> Result<Vec<EventRecord>, StoreError>;
    /// At most `limit` of a run's events after `after_seq`, in order: what a follower reads at
    /// a time, so following a huge run from its start holds one batch, not its whole log.
    fn events_page(&self, run_id: &RunId, after_seq: i64, limit: usize) -> Result<Vec<EventRecord>, StoreError>;
    /// Starts an attempt with its token and a `step.started` event (plus `step.retrying` or
    /// `step.interrupted`); a retry or resume is conditional on `previous_token`.
    fn begin_attempt(&self, begin: &BeginAttempt) -> Result<(), StoreError>;
    /// Records the attempt's process identity, if the token still owns the step.
    fn record_process(
        &self,
        run_id: &RunId,
        step_id: &str,
        token: &AttemptToken,
        process: &ProcessInfo,
    ) -> Result<(), StoreError>;
    /// Appends events of a RUNNING attempt (a pipeline's jobs), if the token still owns the step.
    fn append_step_events(
        &self,
        run_id: &RunId,
        step_id: &str,
        token: &AttemptToken,
        attempt: u32,
        events: &[RunEvent],
        at: i64,
    ) -> Result<(), StoreError>;
    /// Hands a RUNNING attempt to a new token without starting another attempt (a successor
    /// re-attaching to a launch it verified), with a `step.reattached` event.
    fn adopt_attempt(
        &self,
        run_id: &RunId,
        step_id: &str,
        previous_token: &AttemptToken,
        token: &AttemptToken,
        at: i64,
    ) -> Result<(), StoreError>;
    /// Writes COMPLETED with its result, its artifacts and a `step.completed` event, if the token
    /// owns the step.
    fn complete_attempt(&self, finish: &FinishAttempt) -> Result<(), StoreError>;
    /// Completes attempts and begins others in one durable transaction, in that order: what a
    /// scheduler writes when steps end and the steps they release start (a chain's next step, a
    /// fan-out's completions gathered while they were running). All or nothing: any error (a
    /// stale token, a finished run) writes none of it, and the caller writes each on its own.
    fn commit_steps(&self, complete: &[FinishAttempt], begin: &[BeginAttempt]) -> Result<(), StoreError>;
    /// Writes the step FAILED and the run FAILED with `run_error`, in one transaction.
    fn fail_attempt(&self, finish: &FinishAttempt, run_error: &str) -> Result<(), StoreError>;
    /// Records that a write by a stale token was rejected (an event only).
    fn record_stale_write(
        &self,
        run_id: &RunId,
        step_id: &str,
        token: &AttemptToken,
        at: i64,
    ) -> Result<(), StoreError>;
    /// Copies reused source steps into a replay child as COMPLETED with `attempt_count = 0` and a
    /// `step.replay_reused` event each, with the source's artifacts of those steps (their
    /// `reused_from` the run that produced the bytes). A step the child already has is left
    /// alone, so a restarted replay never copies twice. Returns how many were copied.
    fn copy_reused_steps(
        &self,
        run_id: &RunId,
        source_run_id: &RunId,
        steps: &[StepRecord],
        at: i64,
    ) -> Result<usize, StoreError>;
}

/// The files steps produced, found by run or by their bytes.
pub trait Artifacts {
    /// A run's artifacts, by step then path.
    fn artifacts(&self, run_id: &RunId) -> Result<Vec<ArtifactRecord>, StoreError>;
    /// The artifacts of these steps of a run, by step then path.
    fn artifacts_of_steps(&self, run_id: &RunId, step_ids: &[&str]) -> Result<Vec<ArtifactRecord>, StoreError>;
    /// Every recorded artifact with these bytes, oldest first.
    fn artifacts_with_sha256(&self, sha256: &str) -> Result<Vec<ArtifactRecord>, StoreError>;
}

/// Verifications of workflow documents and their verdicts.
pub trait Verifications {
    fn insert_verification(&self, v: &VerificationRecord) -> Result<(), StoreError>;
    /// Writes a verification's verdict, cells and files.
    fn finish_verification(&self, v: &VerificationRecord) -> Result<(), StoreError>;
    /// Newest first.
    fn verifications(&self, limit: usize) -> Result<Vec<VerificationRecord>, StoreError>;
    fn verification(&self, id: &str) -> Result<Option<VerificationRecord>, StoreError>;
}

/// The kernel's jobs (cells submitted to the shared kernel), retained for listing.
pub trait KernelJobs {
    /// Inserts a job, or replaces the job with the same id (status, outputs, timings).
    fn save_kernel_job(&self, job: &KernelJob) -> Result<(), StoreError>;
    fn kernel_job(&self, job_id: &str) -> Result<Option<KernelJob>, StoreError>;
    /// Every retained job, oldest first.
    fn kernel_jobs(&self) -> Result<Vec<KernelJob>, StoreError>;
}

/// Plans, the receipts that approve them, and the runs and reservations they made.
pub trait Plans {
    /// Stores a plan's index row with its document (the JSON its checksum covers) and the state
    /// root that made it (where its file is), and its `plan.made` act.
    fn insert_plan(
        &self,
        plan: &PlanRecord,
        document: &str,
        made_in: &str,
        act: Option<&Act>,
    ) -> Result<(), StoreError>;
    /// A stored plan's document as it was stored, and the state root that made it.
    fn plan_document(&self, plan_name: &str) -> Result<Option<(String, String)>, StoreError>;
    fn plan(&self, plan_name: &str) -> Result<Option<PlanRecord>, StoreError>;
    /// Newest first.
    fn plans(&self) -> Result<Vec<PlanRecord>, StoreError>;
    /// Consumes the receipt, reserves `target + run_dir` and creates the run (with `plan_id`), in
    /// one transaction: a consumed receipt or a reserved run_dir changes nothing.
    fn consume_receipt(&self, c: &ConsumeReceipt) -> Result<RunRecord, StoreError>;
    /// The run that consumed a receipt of this plan, if any.
    fn run_of_plan(&self, plan_id: &str) -> Result<Option<RunId>, StoreError>;
    /// How and when the plan a run executes was approved; `None` for a run without a plan.
    fn approval_of_run(&self, run_id: &RunId) -> Result<Option<crate::plan::Approval>, StoreError>;
    /// The target a planned run was reserved on; None for a run not made from a plan.
    fn target_of_run(&self, run_id: &RunId) -> Result<Option<String>, StoreError>;
    /// The run reserved for `target + run_dir`, if any.
    fn reservation(&self, target: &str, run_dir: &str) -> Result<Option<RunId>, StoreError>;
}

/// Configured targets (SSH or Slurm machines) and their last probes.
pub trait Targets {
    fn add_target(&self, spec: &crate::target::TargetSpec, at: i64) -> Result<(), StoreError>;
    /// By name.
    fn targets(&self) -> Result<Vec<crate::target::TargetSpec>, StoreError>;
    fn target(&self, name: &str) -> Result<Option<crate::target::TargetSpec>, StoreError>;
    /// Whether it existed.
    fn remove_target(&self, name: &str) -> Result<bool, StoreError>;
    /// Keeps a target's last probe (replacing the one before).
    fn record_probe(&self, target: &str, observed: &Value, at: i64) -> Result<(), StoreError>;
    /// A target's last probe and when it ran.
    fn last_probe(&self, target: &str) -> Result<Option<(Value, i64)>, StoreError>;
}

/// The procedure-doc index: versioned docs and their full-text search.
pub trait Docs {
    /// Saves a new version of a doc (its number one more than the newest, or 1), with its index
    /// row and its search row replaced, in one transaction; a removed doc is live again. The
    /// newest version holding the same text and verification is returned `Unchanged` instead.
    fn save_doc(&self, new: &NewDocVersion) -> Result<SaveDoc, StoreError>;
    /// A doc, removed or not.
    fn doc(&self, name: &str) -> Result<Option<DocRecord>, StoreError>;
    /// Every doc by name (the removed ones too when `include_removed`).
    fn docs(&self, include_removed: bool) -> Result<Vec<DocRecord>, StoreError>;
    /// A doc's versions, oldest first.
    fn doc_versions(&self, name: &str) -> Result<Vec<DocVersion>, StoreError>;
    /// One version with its text.
    fn doc_text(&self, name: &str, version: u32) -> Result<Option<(DocVersion, String)>, StoreError>;
    /// Tombstones a doc and takes it out of the search (its versions stay); a doc removed
    /// already keeps its first tombstone. `None` when there is no such doc.
    fn remove_doc(&self, name: &str, at: i64) -> Result<Option<DocRecord>, StoreError>;
    /// Full-text search (SQLite FTS5 query syntax) over the newest version of every live doc,
    /// best first; a query the index cannot parse is `InvalidDocQuery`.
    fn search_docs(&self, query: &str, limit: usize) -> Result<Vec<DocHit>, StoreError>;
}

/// A recorded artifact with where its run keeps its files: what `cairn doctor` checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedFile {
    pub record: ArtifactRecord,
    /// The run's directory (absolute).
    pub run_dir: String,
    /// The target the run was planned and reserved on; `None` for a run on this machine.
    pub target: Option<String>,
}

/// Looking after the registry itself: its integrity, the shape of its event log, everything it
/// records at once, and a copy of it. Nothing here writes.
pub trait Maintenance {
    /// The database's own integrity check (SQLite: `PRAGMA integrity_check` and
    /// `foreign_key_check`, on the read-only connection), or why there is none to run.
    fn integrity(&self) -> Result<crate::doctor::Integrity, StoreError>;
    /// The event log's numbering and each run's history, for [`crate::doctor::judge_event_log`].
    fn event_log_facts(&self) -> Result<crate::doctor::EventLogFacts, StoreError>;
    /// Every recorded artifact with its run's directory and target, by run, step and path.
    fn recorded_files(&self) -> Result<Vec<RecordedFile>, StoreError>;
    /// Whether a run with this id exists.
    fn run_exists(&self, run_id: &str) -> Result<bool, StoreError>;
    /// A consistent copy of the whole registry, written to the new file `dest` while others keep
    /// writing (SQLite's online backup, in one step, so the copy is one commit's state), and
    /// checked (`PRAGMA quick_check`) before this returns. A database that cannot be copied this
    /// way (PostgreSQL: `pg_dump` copies it) refuses, saying so. Returns the copy's size in bytes.
    fn backup_to(&self, dest: &std::path::Path) -> Result<u64, StoreError>;
}

/// A team's registry: principals, custom roles, grants, per-workflow policies and the audit.
/// Every change writes its [`Act`](crate::access::Act) in the same transaction, so the audit
/// never misses a change that happened nor shows one that did not.
pub trait Team {
    /// Adds a principal with its token's hash and a grant of its role everywhere.
    /// `PrincipalExists` when the name is taken (by a revoked one too: names are never reused).
    fn add_principal(&self, p: &Principal, token_sha256: &str, act: &Act) -> Result<(), StoreError>;
    /// The live (not revoked) principal whose token hashes to `token_sha256`.
    fn principal_by_token(&self, token_sha256: &str) -> Result<Option<Principal>, StoreError>;
    fn principal(&self, name: &str) -> Result<Option<Principal>, StoreError>;
    /// By name, the revoked ones too.
    fn principals(&self) -> Result<Vec<Principal>, StoreError>;
    /// Replaces a live principal's token hash; `false` when there is no such live principal.
    fn rotate_principal(&self, name: &str, token_sha256: &str, act: &Act) -> Result<bool, StoreError>;
    /// Revokes a principal (its token stops working; its name and acts stay); `false` when there
    /// is no such live principal.
    fn revoke_principal(&self, name: &str, act: &Act) -> Result<bool, StoreError>;
    /// Adds a custom role; `RoleExists` when the name is taken.
    fn add_role(&self, role: &Role, act: &Act) -> Result<(), StoreError>;
    /// Removes a custom role (its grants then give nothing); whether it existed.
    fn remove_role(&self, name: &str, act: &Act) -> Result<bool, StoreError>;
    /// The custom roles, by name.
    fn roles(&self) -> Result<Vec<Role>, StoreError>;
    /// Whether the grant is new (an identical one changes nothing and records nothing).
    fn add_grant(&self, g: &Grant, act: &Act) -> Result<bool, StoreError>;
    /// Whether such a grant existed.
    fn remove_grant(&self, g: &Grant, act: &Act) -> Result<bool, StoreError>;
    /// A principal's grants, or everyone's.
    fn grants(&self, principal: Option<&str>) -> Result<Vec<Grant>, StoreError>;
    fn set_policy(&self, p: &Policy, act: &Act) -> Result<(), StoreError>;
    fn policy(&self, workflow: &str) -> Result<Option<Policy>, StoreError>;
    fn policies(&self) -> Result<Vec<Policy>, StoreError>;
    /// Records an act of its own (one whose change is written elsewhere).
    fn record_act(&self, act: &Act) -> Result<i64, StoreError>;
    /// Newest first.
    fn acts(&self, q: &ActQuery) -> Result<Vec<ActRecord>, StoreError>;
}

/// Quotas and the use they limit.
pub trait Quotas {
    /// Sets (or replaces) the quota of its subject and measure, with its act.
    fn set_quota(&self, q: &crate::quota::Quota, act: &Act) -> Result<(), StoreError>;
    /// Whether it existed.
    fn remove_quota(
        &self,
        subject: &crate::quota::Subject,
        measure: crate::quota::Measure,
        act: &Act,
    ) -> Result<bool, StoreError>;
    /// By subject, then measure.
    fn quotas(&self) -> Result<Vec<crate::quota::Quota>, StoreError>;
    /// What `subject` uses of `measure` now: open runs, queued runs, or steps started since
    /// `since` (with the start of the oldest one counted).
    fn quota_use(
        &self,
        subject: &crate::quota::Subject,
        measure: crate::quota::Measure,
        since: i64,
    ) -> Result<(u64, Option<i64>), StoreError>;
    /// Admits a held run if its limits allow it now (one transaction): `Ok(None)` admitted (or
    /// not held, or finished), `Ok(Some((quota, used)))` still held by that limit.
    fn admit_held(
        &self,
        run_id: &RunId,
        admission: &crate::quota::Admission,
        at: i64,
    ) -> Result<Option<(usize, u64)>, StoreError>;
    /// Takes one of `target`'s `limit` places for the step's attempt (one transaction, under its
    /// token): `Ok(None)` taken (or held already), `Ok(Some(used))` all taken by other running
    /// steps. The place is the step's while it runs.
    fn take_target_slot(
        &self,
        run_id: &RunId,
        step_id: &str,
        token: &AttemptToken,
        target: &str,
        limit: u64,
    ) -> Result<Option<u64>, StoreError>;
}

/// The registry of workflows, runs, step records and events: every role at once, what the
/// engine holds (`dyn RunStore`). A use case that needs one or two roles may take those alone.
pub trait RunStore:
    Daemons
    + WorkflowRegistry
    + Runs
    + Attempts
    + Artifacts
    + Verifications
    + KernelJobs
    + Plans
    + Targets
    + Docs
    + Maintenance
    + Team
    + Quotas
{
}

impl<
    T: ?Sized
        + Daemons
        + WorkflowRegistry
        + Runs
        + Attempts
        + Artifacts
        + Verifications
        + KernelJobs
        + Plans
        + Targets
        + Docs
        + Maintenance
        + Team
        + Quotas,
> RunStore for T
{
}

/// The role traits, to bring their methods into scope: `use cairn_core::store::prelude::*;`.
pub mod prelude {
    pub use super::{
        Artifacts, Attempts, Daemons, Docs, KernelJobs, Maintenance, Plans, Quotas, RunStore, Runs, Targets, Team,
        Verifications, WorkflowRegistry,
    };
}
