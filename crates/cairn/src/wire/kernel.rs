//! The session kernel's jobs, and what interrupting or restarting it did.

use cairn_core::store::KernelJob;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::time;

/// A job of the session kernel.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Job {
    pub job_id: String,
    /// `queued`, `running`, `ok`, `error`, `died`, `timed_out`, `interrupted` or `cancelled`.
    pub status: String,
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
}

impl Job {
    pub fn from_record(j: &KernelJob) -> Job {
        Job {
            job_id: j.job_id.clone(),
            status: j.status.clone(),
            code: j.code.clone(),
            outputs: j.outputs.clone(),
            execution_count: j.execution_count,
            error: j.error.clone(),
            session: j.session.clone(),
            submitted_at: time(j.submitted_at),
            started_at: j.started_at.map(time),
            finished_at: j.finished_at.map(time),
            duration_ms: j.duration_ms,
        }
    }

    /// Whether the job has ended (it is neither queued nor running).
    pub fn has_ended(&self) -> bool {
        !matches!(self.status.as_str(), "queued" | "running")
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct JobList {
    pub jobs: Vec<Job>,
}

/// What `POST /kernel/interrupt` did.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Interrupted {
    /// The job that received KeyboardInterrupt; null when none was running.
    pub interrupted: Option<String>,
}

/// What `POST /kernel/restart` did.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Restarted {
    /// The session whose kernel was killed; null when no kernel ran.
    pub killed_session: Option<String>,
    /// Jobs that were queued or running and ended `cancelled`.
    pub cancelled: Vec<String>,
}
