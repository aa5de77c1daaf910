//! The JSON every surface speaks: one set of types for what the CLI prints with `--json`, what
//! the HTTP API answers (and so what the MCP servers and the web app show), and the requests the
//! three of them send. Converted from the engine's types by hand, so the OpenAPI document is
//! generated from what is actually sent and `cairn show --json` and `GET /runs/{id}` cannot
//! disagree.

mod docs;
mod kernel;
mod plans;
pub mod requests;
mod runs;
mod targets;
mod verify;
mod workflows;

pub use docs::{
    Doc, DocHit, DocList, DocSaved, DocSearchResult, DocSummary, DocVerification, DocVersionEntry, ReadDoc, SaveDoc,
    SearchDocs, SnippetPart,
};
pub use kernel::{Interrupted, Job, JobList, Restarted};
pub use plans::{PlanList, PlanSummary};
pub use requests::{
    AddTarget, ExecutePlan, ExecutorName, MAX_VERIFY_WAIT_SECS, PlanReplay, PlanRun, ReplayDirective, SubmitJob,
    SubmitRun, Verify,
};
pub use runs::{
    ArtifactEntry, ArtifactList, ArtifactSlice, Event, EventList, Explanation, ExportResult, LineageEntry,
    ReplayPreview, RunList, RunResult, RunSummary, RunTimeline, StepDetail, StepLog, StepResult, TimelineAttempt,
    TraceMatch, TraceResult,
};
pub use targets::targets_json;
pub use verify::{VerificationRecord, VerifyResult};
pub use workflows::{AddWorkflow, WorkflowAdded, WorkflowDetail, WorkflowList, WorkflowProblem, WorkflowSummary};

/// A time as every surface shows it: RFC 3339 UTC with milliseconds.
pub fn time(ms: i64) -> String {
    cairn_core::time::rfc3339(ms)
}

/// A wire value as JSON. Our wire types hold only strings, numbers and JSON values: serialising
/// them cannot fail.
pub fn to_value<T: serde::Serialize>(v: &T) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or(serde_json::Value::Null)
}
