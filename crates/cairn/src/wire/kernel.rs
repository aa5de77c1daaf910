//! The session kernel's jobs, and what interrupting or restarting it did.

use cairn_core::store::{KernelJob, KernelJobStatus};
use cairn_core::verification::Verdict;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use cairn_engine::verify::LiveVerification;

use super::time;
use super::verify::VerificationRecord;

/// A job of the session kernel, or a verification (`kind: "verification"`): one row a person can
/// see and stop.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Job {
    pub job_id: String,
    /// `session` (a job of the session kernel) or `verification` (a document verified in its own
    /// scratch kernel; `job_id` is its verification id).
    #[serde(default)]
    pub kind: KernelJobKind,
    pub status: KernelJobState,
    pub code: String,
    /// nbformat v4 output dicts, in order.
    #[schema(value_type = Vec<Object>)]
    pub outputs: Vec<Value>,
    pub execution_count: Option<u32>,
    pub error: Option<String>,
    /// The kernel process the job ran in; a restart starts a new session.
    pub session: String,
    pub submitted_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub duration_ms: Option<i64>,
    /// A verification's title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// A verification's code cells that have ended, of `cells_total`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cells_done: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cells_total: Option<usize>,
    /// A finished verification, as `GET /verifications/{id}` gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub verification: Option<VerificationRecord>,
}

/// What a row of the job list is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum KernelJobKind {
    /// A job of the session kernel.
    #[default]
    Session,
    /// A document verified in its own scratch kernel.
    Verification,
}

/// A job's status: a session job's (`queued`, `running`, `ok`, `error`, `died`, `timed_out`,
/// `interrupted` or `cancelled`), or a verification's (`running`, then its verdict: `passed`,
/// `failed`, `died`, `timed_out` or `interrupted`; `died` too when the process running it ended
/// before it had one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum KernelJobState {
    Queued,
    Running,
    Ok,
    Error,
    Died,
    TimedOut,
    Interrupted,
    Cancelled,
    Passed,
    Failed,
}

impl KernelJobState {
    pub fn as_str(self) -> &'static str {
        match self {
            KernelJobState::Queued => "queued",
            KernelJobState::Running => "running",
            KernelJobState::Ok => "ok",
            KernelJobState::Error => "error",
            KernelJobState::Died => "died",
            KernelJobState::TimedOut => "timed_out",
            KernelJobState::Interrupted => "interrupted",
            KernelJobState::Cancelled => "cancelled",
            KernelJobState::Passed => "passed",
            KernelJobState::Failed => "failed",
        }
    }
}

impl std::fmt::Display for KernelJobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<KernelJobStatus> for KernelJobState {
    fn from(s: KernelJobStatus) -> KernelJobState {
        match s {
            KernelJobStatus::Queued => KernelJobState::Queued,
            KernelJobStatus::Running => KernelJobState::Running,
            KernelJobStatus::Ok => KernelJobState::Ok,
            KernelJobStatus::Error => KernelJobState::Error,
            KernelJobStatus::Died => KernelJobState::Died,
            KernelJobStatus::TimedOut => KernelJobState::TimedOut,
            KernelJobStatus::Interrupted => KernelJobState::Interrupted,
            KernelJobStatus::Cancelled => KernelJobState::Cancelled,
        }
    }
}

impl From<Verdict> for KernelJobState {
    fn from(v: Verdict) -> KernelJobState {
        match v {
            Verdict::Passed => KernelJobState::Passed,
            Verdict::Failed => KernelJobState::Failed,
            Verdict::Died => KernelJobState::Died,
            Verdict::TimedOut => KernelJobState::TimedOut,
            Verdict::Interrupted => KernelJobState::Interrupted,
        }
    }
}

impl Job {
    /// A verification in progress, as a job.
    pub fn from_live(l: &LiveVerification) -> Job {
        Job {
            job_id: l.verification_id.clone(),
            kind: KernelJobKind::Verification,
            status: KernelJobState::Running,
            code: l.document.clone(),
            outputs: Vec::new(),
            execution_count: None,
            error: None,
            session: "verification".into(),
            submitted_at: time(l.started_at),
            started_at: Some(time(l.started_at)),
            finished_at: None,
            duration_ms: None,
            title: Some(l.title.clone()),
            cells_done: Some(l.cells_done),
            cells_total: Some(l.cells_total),
            verification: None,
        }
    }

    /// A verification that is not in progress: its verdict is its status (`died` when the
    /// process running it ended before it had one).
    pub fn from_verification(v: &cairn_core::store::VerificationRecord) -> Job {
        let cells = v.cells.as_array().map(Vec::len);
        // The engine records a verdict as `Verdict::as_str`; one it cannot read is no verdict.
        let verdict = v.verdict.as_deref().and_then(|s| s.parse::<Verdict>().ok());
        Job {
            job_id: v.id.clone(),
            kind: KernelJobKind::Verification,
            status: verdict.map_or(KernelJobState::Died, KernelJobState::from),
            code: v.document.clone(),
            outputs: Vec::new(),
            execution_count: None,
            error: match verdict {
                Some(_) => v.error.clone(),
                None => Some("the process running this verification ended before it had a verdict".into()),
            },
            session: "verification".into(),
            submitted_at: time(v.created_at),
            started_at: Some(time(v.created_at)),
            finished_at: v.finished_at.map(time),
            duration_ms: v.finished_at.map(|f| f - v.created_at),
            title: Some(v.title.clone()),
            cells_done: cells,
            cells_total: cells,
            verification: Some(VerificationRecord::from_record(v)),
        }
    }

    pub fn from_record(j: &KernelJob) -> Job {
        Job {
            job_id: j.job_id.clone(),
            kind: KernelJobKind::Session,
            status: j.status.into(),
            code: j.code.clone(),
            outputs: j.outputs.clone(),
            execution_count: j.execution_count,
            error: j.error.clone(),
            session: j.session.clone(),
            submitted_at: time(j.submitted_at),
            started_at: j.started_at.map(time),
            finished_at: j.finished_at.map(time),
            duration_ms: j.duration_ms,
            title: None,
            cells_done: None,
            cells_total: None,
            verification: None,
        }
    }

    /// Whether the job has ended (it is neither queued nor running).
    pub fn has_ended(&self) -> bool {
        !matches!(self.status, KernelJobState::Queued | KernelJobState::Running)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct JobList {
    pub jobs: Vec<Job>,
}

/// What `POST /kernel/interrupt` did.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Interrupted {
    /// The session job that received KeyboardInterrupt; null when none was running.
    pub interrupted: Option<String>,
    /// Verifications in progress that were asked to stop: no further cell, the running one
    /// interrupted, its kernel killed if it has not ended within 2 s (verdict `interrupted`).
    #[serde(default)]
    pub verifications: Vec<String>,
}

/// What `POST /kernel/restart` did.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Restarted {
    /// The session whose kernel was killed; null when no kernel ran.
    pub killed_session: Option<String>,
    /// Jobs that were queued or running and ended `cancelled`.
    pub cancelled: Vec<String>,
    /// Verifications in progress whose kernels were killed (verdict `interrupted`).
    #[serde(default)]
    pub verifications: Vec<String>,
}
