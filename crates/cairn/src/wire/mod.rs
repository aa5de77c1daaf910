//! The JSON every surface speaks: one set of types for what the CLI prints with `--json`, what
//! the HTTP API answers (and so what the MCP servers and the web app show), and the requests the
//! three of them send. Converted from the engine's types by hand, so the OpenAPI document is
//! generated from what is actually sent and `cairn show --json` and `GET /runs/{id}` cannot
//! disagree.

use serde::{Deserialize, Serialize};

/// The header a client names its surface with (`cli`, `mcp`, `web`), recorded with each act of
/// the audit; `api` when absent. It is the caller's own word: it says how, never who.
pub const CHANNEL_HEADER: &str = "x-cairn-channel";

mod docs;
mod doctor;
mod jobs;
mod kernel;
mod plans;
pub mod requests;
mod runs;
mod targets;
mod team;
mod verify;
mod workflows;

pub use docs::{
    Doc, DocHit, DocList, DocSaved, DocSearchResult, DocSummary, DocVerification, DocVersionEntry, ReadDoc, SaveDoc,
    SearchDocs, SnippetPart,
};
pub use doctor::{Backup, BackupPart, Doctor, DoctorCheck, DoctorFinding};
pub use jobs::{JobId, JobsProgress, PipelineJob, PipelineJobs, RuleJobs};
pub use kernel::{Interrupted, Job, JobList, KernelJobKind, KernelJobState, Restarted};
pub use plans::{PlanList, PlanSummary};
pub use requests::{
    AddTarget, ExecutePlan, ExecutorName, MAX_VERIFY_WAIT_SECS, PlanReplay, PlanRun, ReplayDirective, SubmitJob,
    SubmitRun, VERIFY_START_AT_LEAST, Verify,
};
pub use runs::{
    ArtifactEntry, ArtifactList, ArtifactSlice, Event, EventList, Explanation, ExportResult, Followed, LineageEntry,
    NoticeKind, ReplayPreview, RunLayer, RunLayers, RunLease, RunList, RunResult, RunSummary, RunTimeline, RunWaiting,
    StepCause, StepDetail, StepLog, StepResult, TimelineAttempt, TraceMatch, TraceResult, WaitingNotice,
};
pub use targets::targets_json;
pub use team::{
    AccessEntry, ActBody, AddPrincipal, AddRole, AuditList, AuditQuery, GrantBody, GrantRequest, IssuedTokenBody,
    PolicyBody, PolicyList, PrincipalBody, PrincipalList, QuotaBody, QuotaKey, QuotaList, RoleBody, RoleList,
    SetPolicy, SetQuota, Whoami, quota_measure, quota_subject,
};
pub use verify::{
    SpareKernel, VerificationRecord, VerifyCell, VerifyCellError, VerifyCellStatus, VerifyKernelStart, VerifyResult,
    VerifySkipReason, VerifyStreamEvent, VerifyTimeout, VerifyTimeoutSource, VerifyVerdict,
};
pub use workflows::{AddWorkflow, WorkflowAdded, WorkflowDetail, WorkflowList, WorkflowProblem, WorkflowSummary};

/// A time as every surface shows it: RFC 3339 UTC with milliseconds.
pub fn time(ms: i64) -> String {
    cairn_core::time::rfc3339(ms)
}

/// A path segment from user input, percent-encoded (ids and names never need it, but a bad one
/// must not change the path).
pub fn seg(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~@".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A wire value as JSON. Our wire types hold only strings, numbers and JSON values: serialising
/// them cannot fail.
pub fn to_value<T: serde::Serialize>(v: &T) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or(serde_json::Value::Null)
}

/// `GET /daemons`: the daemons sharing the registry that are alive, with the runs each leases.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DaemonsBody {
    pub daemons: Vec<DaemonBody>,
}

/// One live daemon: who and where it is, and the open runs it drives (holds the lease of).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DaemonBody {
    /// `dmn_…`, new at every start.
    pub id: String,
    pub host: String,
    pub pid: u32,
    pub state_root: String,
    pub started_at: String,
    /// Its last heartbeat (renewed every third of a lease).
    pub heartbeat_at: String,
    /// The open runs it holds the lease of, oldest first.
    pub runs: Vec<String>,
}

impl DaemonBody {
    pub fn of(d: &cairn_core::store::DaemonRecord, runs: &[cairn_core::ids::RunId]) -> DaemonBody {
        DaemonBody {
            id: d.id.clone(),
            host: d.host.clone(),
            pid: d.pid,
            state_root: d.state_root.clone(),
            started_at: time(d.started_at),
            heartbeat_at: time(d.heartbeat_at),
            runs: runs.iter().map(ToString::to_string).collect(),
        }
    }
}

/// Every error response: `{"error": {"code": "...", "message": "..."}}`.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// A stable machine-readable code, e.g. `unauthorized`, `execution_input_mismatch`.
    pub code: String,
    /// What went wrong and how to fix it.
    pub message: String,
    /// A rejected workflow (`invalid_workflow`, `invalid_workflow_folder`): every problem found,
    /// each located, so all can be fixed at once. Absent for any other error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<WorkflowProblem>,
    /// A refusal for a missing grant (`forbidden`): the permission and the scope it was needed
    /// in. Absent for any other error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing: Option<MissingGrant>,
}

/// What a caller lacked: a permission, in the scope of a workflow and/or a target (both absent:
/// everywhere).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MissingGrant {
    pub permission: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

impl MissingGrant {
    pub fn of(d: &cairn_core::access::Denied) -> MissingGrant {
        MissingGrant {
            permission: d.permission.as_str().to_string(),
            workflow: d.resource.workflow.clone(),
            target: d.resource.target.clone(),
        }
    }
}
