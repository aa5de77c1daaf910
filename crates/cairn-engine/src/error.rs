//! The engine's errors: one variant per failure a caller can act on, each a sentence that names
//! the thing and says how to fix it, and each with a stable machine [`ErrorCode`]. The code
//! decides the [`ErrorKind`], and the kind alone decides the exit code, the HTTP status and the
//! MCP error result, in one table at the binary's edge, so the surfaces cannot disagree.

use cairn_core::docs::DocError;
use cairn_core::ids::InvalidRunId;
use cairn_core::status::RunStatus;
use cairn_core::store::StoreError;
use cairn_core::target::TargetError;
use cairn_core::workflow::{WorkflowError, WorkflowProblems};

/// What kind of failure an error is: what a caller can do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad input or usage: fix the request (exit 2, HTTP 422).
    Invalid,
    /// Something named does not exist (exit 2, HTTP 404).
    NotFound,
    /// The request conflicts with stored state: identity mismatch, stale token, running step,
    /// a refused approval (exit 4, HTTP 409).
    Conflict,
    /// A bug or a registry that does not read as Cairn wrote it (exit 2, HTTP 500, with the
    /// cause).
    Internal,
    /// The environment failed: the registry's disk is full or failing, its database or a target
    /// cannot be reached (exit 5, HTTP 503). Nothing completed is lost, and it may heal: what was
    /// asked can be asked again once it has.
    Unavailable,
    /// Stopped by the person (Ctrl-C) or a cancel before it finished (exit 130, HTTP 409).
    Interrupted,
    /// The caller may not do this: a grant is missing, or a workflow's two-person rule refuses
    /// it (exit 2, HTTP 403). Nothing changed.
    Forbidden,
    /// Over a quota: refused now, it may be asked again once the use frees (exit 4, HTTP 429).
    /// Nothing changed.
    OverQuota,
}

macro_rules! error_codes {
    ($($variant:ident => $text:literal, $kind:ident;)+) => {
        /// The stable machine code of an error. Each is one failure a caller can branch on.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode { $($variant),+ }

        impl ErrorCode {
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $(ErrorCode::$variant => $text),+ }
            }

            pub fn kind(self) -> ErrorKind {
                match self { $(ErrorCode::$variant => ErrorKind::$kind),+ }
            }

            /// The code a stored or received text names, if any.
            pub fn parse(text: &str) -> Option<ErrorCode> {
                match text { $($text => Some(ErrorCode::$variant),)+ _ => None }
            }
        }
    };
}

error_codes! {
    RunNotFound => "run_not_found", NotFound;
    SourceRunNotFound => "source_run_not_found", NotFound;
    WorkflowNotFound => "workflow_not_found", NotFound;
    StepNotFound => "step_not_found", NotFound;
    PlanNotFound => "plan_not_found", NotFound;
    TargetNotFound => "target_not_found", NotFound;
    JobNotFound => "job_not_found", NotFound;
    VerificationNotFound => "verification_not_found", NotFound;
    DraftNotFound => "draft_not_found", NotFound;
    NothingVerified => "nothing_verified", NotFound;
    NotebookUnreadable => "notebook_unreadable", NotFound;
    NoNotebook => "no_notebook", NotFound;
    DocNotFound => "doc_not_found", NotFound;
    DocVersionNotFound => "doc_version_not_found", NotFound;
    DocRemoved => "doc_removed", NotFound;
    InvalidWorkflow => "invalid_workflow", Invalid;
    InvalidWorkflowFolder => "invalid_workflow_folder", Invalid;
    InvalidReference => "invalid_reference", Invalid;
    InvalidRunId => "invalid_run_id", Invalid;
    InvalidPlanName => "invalid_plan_name", Invalid;
    InvalidInput => "invalid_input", Invalid;
    InvalidField => "invalid_field", Invalid;
    InvalidRunDir => "invalid_run_dir", Invalid;
    InvalidTarget => "invalid_target", Invalid;
    TargetNotReady => "target_not_ready", Invalid;
    TargetUnreachable => "target_unreachable", Unavailable;
    TargetRefused => "target_refused", Invalid;
    ReplayOfItself => "replay_of_itself", Invalid;
    ReplaySourceNotFinished => "replay_source_not_finished", Invalid;
    ReplayOtherWorkflow => "replay_other_workflow", Invalid;
    ReplayNoSteps => "replay_no_steps", Invalid;
    ReplayUnknownSteps => "replay_unknown_steps", Invalid;
    InvalidDocument => "invalid_document", Invalid;
    NoDocument => "no_document", Invalid;
    EmptyJob => "empty_job", Invalid;
    KernelUnavailable => "kernel_unavailable", Invalid;
    TraceFileUnreadable => "trace_file_unreadable", Invalid;
    InvalidDocName => "invalid_doc_name", Invalid;
    InvalidDocVersion => "invalid_doc_version", Invalid;
    InvalidDocText => "invalid_doc_text", Invalid;
    InvalidDocQuery => "invalid_doc_query", Invalid;
    VerificationNotPassed => "verification_not_passed", Invalid;
    InvalidExportPath => "invalid_export_path", Invalid;
    InvalidRegistry => "invalid_registry", Invalid;
    ExecutionInputMismatch => "execution_input_mismatch", Conflict;
    StepRunning => "step_running", Conflict;
    RunOwnedElsewhere => "run_owned_elsewhere", Conflict;
    WorkflowVersionConflict => "workflow_version_conflict", Conflict;
    SnapshotChanged => "snapshot_changed", Conflict;
    PlanAltered => "plan_altered", Conflict;
    PlanMismatch => "plan_mismatch", Conflict;
    PlanExecuted => "plan_executed", Conflict;
    PlanStale => "plan_stale", Conflict;
    ReceiptRefused => "receipt_refused", Conflict;
    KernelSlotTaken => "kernel_slot_taken", Conflict;
    DaemonStopping => "daemon_stopping", Conflict;
    StopRefused => "stop_refused", Conflict;
    ArtifactChanged => "artifact_changed", Conflict;
    ArtifactNotFound => "artifact_not_found", NotFound;
    ArtifactUnreadable => "artifact_unreadable", Conflict;
    StaleToken => "stale_token", Conflict;
    LeaseLost => "lease_lost", Conflict;
    RunBusy => "run_busy", Conflict;
    RunLeased => "run_leased", Conflict;
    StaleRevision => "stale_revision", Conflict;
    RunFinished => "run_finished", Conflict;
    StepExists => "step_exists", Conflict;
    PlanExists => "plan_exists", Conflict;
    ReceiptConsumed => "receipt_consumed", Conflict;
    RunDirReserved => "run_dir_reserved", Conflict;
    TargetExists => "target_exists", Conflict;
    ExportExists => "export_exists", Conflict;
    ExportArtifactMismatch => "export_artifact_mismatch", Conflict;
    BackupExists => "backup_exists", Conflict;
    InvalidBackupPath => "invalid_backup_path", Invalid;
    BackupUnsupported => "backup_unsupported", Invalid;
    Forbidden => "forbidden", Forbidden;
    TwoPersonRequired => "two_person_required", Forbidden;
    PrincipalNotFound => "principal_not_found", NotFound;
    RoleNotFound => "role_not_found", NotFound;
    GrantNotFound => "grant_not_found", NotFound;
    PrincipalExists => "principal_exists", Conflict;
    RoleExists => "role_exists", Conflict;
    InvalidName => "invalid_name", Invalid;
    QuotaExceeded => "quota_exceeded", OverQuota;
    QuotaQueued => "quota_queued", OverQuota;
    QuotaNotFound => "quota_not_found", NotFound;
    SecretMissing => "secret_missing", Invalid;
    SecretProvider => "secret_provider_failed", Invalid;
    InvalidSecret => "invalid_secret", Invalid;
    Database => "database", Unavailable;
    Corrupt => "corrupt", Internal;
    Io => "io", Unavailable;
    Internal => "internal", Internal;
    Interrupted => "interrupted", Interrupted;
    Stopped => "stopped", Interrupted;
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    // --- not found
    #[error("run `{run_id}` was not found; list runs with `cairn runs`")]
    RunNotFound { run_id: String },
    #[error("source run `{run_id}` was not found; list runs with `cairn runs`")]
    SourceRunNotFound { run_id: String },
    #[error("{}", workflow_not_found(name, version.as_deref()))]
    WorkflowNotFound { name: String, version: Option<String> },
    #[error("run `{run_id}` has no step `{step_id}`; its steps are: {}", steps.join(", "))]
    StepNotFound { run_id: String, step_id: String, steps: Vec<String> },
    #[error("plan `{name}` was not found; list plans with `cairn plans`")]
    PlanNotFound { name: String },
    #[error("target `{name}` is not configured; see `cairn target list` (`local` is built in)")]
    TargetNotFound { name: String },
    #[error("job `{job_id}` was not found; list jobs with `cairn kernel jobs`")]
    JobNotFound { job_id: String },
    #[error("verification `{id}` was not found; list them with GET /verifications")]
    VerificationNotFound { id: String },
    #[error("there is no draft for title `{title}` ({path}); give the document to verify")]
    DraftNotFound { title: String, path: String },
    #[error(
        "no verification has passed yet, so there is no verified workflow notebook; verify a document with `cairn verify DOC`"
    )]
    NothingVerified,
    #[error("the notebook {path} cannot be read: {message}")]
    NotebookUnreadable { path: String, message: String },
    /// A verification that proved no notebook (it failed, or has no verdict yet).
    #[error("{message}")]
    NoNotebook { message: String },
    #[error(
        "doc `{name}` is not in the doc index; list the docs with `cairn doc list` (GET /docs), or save it with `cairn doc save {name} FILE`"
    )]
    DocNotFound { name: String },
    #[error(
        "doc `{name}` has no version {version}; its versions are 1 to {latest} (`cairn doc show {name}` lists them)"
    )]
    DocVersionNotFound { name: String, version: u32, latest: u32 },
    #[error(
        "doc `{name}` was removed; its versions 1 to {latest} stay readable by number (`{name}@{latest}`), and saving it again makes version {}",
        latest + 1
    )]
    DocRemoved { name: String, latest: u32 },
    #[error(
        "verification_id `{id}` (`--from`) is not a verification Cairn recorded; `cairn verify DOC --json` prints a verification's id, and GET /verifications lists them"
    )]
    DocVerificationNotFound { id: String },

    // --- invalid
    #[error("{0}")]
    Workflow(#[from] WorkflowProblems),
    #[error("{path}: {message}")]
    WorkflowFolder { path: String, message: String },
    #[error("`{given}` is not a workflow reference; write NAME or NAME@VERSION")]
    InvalidReference { given: String },
    #[error("{0}")]
    InvalidRunId(InvalidRunId),
    #[error("plan name: {0}")]
    InvalidPlanName(InvalidRunId),
    /// The run input (or what a step derives from it) is not what the workflow needs.
    #[error("{message}")]
    InvalidInput { message: String },
    /// A field of a request is out of its range or empty.
    #[error("{message}")]
    InvalidField { field: &'static str, message: String },
    #[error("{message}")]
    InvalidRunDir { message: String },
    #[error("{0}")]
    InvalidTarget(#[from] TargetError),
    #[error("{what} {path}: {message}")]
    TargetFile { what: &'static str, path: String, message: String },
    #[error("target `{target}` is not ready: {}", problems.join("; "))]
    TargetNotReady { target: String, problems: Vec<String> },
    #[error("target `{target}` could not be checked: {message}")]
    TargetUnreachable { target: String, message: String },
    /// The host answered and refused: its key is not the pinned one, or the login failed.
    #[error("target `{target}` refused the connection: {message}")]
    TargetRefused { target: String, message: String },
    #[error(
        "a replay creates a new child run and never changes its source; choose a --run-id other than `{source_run_id}`"
    )]
    ReplayOfItself { source_run_id: String },
    #[error("{}", replay_not_finished(run_id, *status))]
    ReplaySourceNotFinished { run_id: String, status: RunStatus },
    #[error(
        "source run `{run_id}` is a run of workflow `{workflow}`, not `{given}`; a replay stays within one workflow"
    )]
    ReplayOtherWorkflow { run_id: String, workflow: String, given: String },
    #[error("name at least one step to replay with --step ID")]
    ReplayNoSteps,
    #[error(
        "{reference} has no step {}; its steps are: {}",
        unknown.iter().map(|u| format!("`{u}`")).collect::<Vec<_>>().join(", "),
        known.join(", ")
    )]
    ReplayUnknownSteps { reference: String, unknown: Vec<String>, known: Vec<String> },
    #[error("{path}: {message}")]
    InvalidDocument { path: String, message: String },
    #[error("give a document to verify, or --title T to re-verify its draft")]
    NoDocument,
    #[error("the job has no code; send the Python to run")]
    EmptyJob,
    /// No interpreter with ipykernel, or the kernel would not start.
    #[error("{message}")]
    KernelUnavailable { message: String },
    #[error("{path} cannot be traced: {message}")]
    TraceFileUnreadable { path: String, message: String },
    #[error("{0}")]
    Doc(#[from] DocError),
    #[error(
        "query `{query}` is not a valid search: {message}. A query is SQLite FTS5 syntax: words (every one must match), \"a phrase\", OR, NOT, AND, NEAR(a b), prefix*; put a word with punctuation or an operator word in double quotes, e.g. \"k-means\" or \"AND\""
    )]
    DocQuery { query: String, message: String },
    #[error(
        "verification_id `{id}` (`--from`) has verdict {verdict}: a procedure doc links only a passed verification, whose notebook proves the procedure ran; fix the document and verify it again, then save from the passing verification (or save without `--from`)"
    )]
    VerificationNotPassed { id: String, verdict: String },

    /// A registry the state root cannot use: a URL that is not PostgreSQL's, or another registry
    /// than the one the state root keeps.
    #[error("{message}")]
    InvalidRegistry { message: String },

    // --- conflict
    #[error(
        "ExecutionInputMismatch: run `{run_id}` already exists with other identity data (stored {stored}, requested {requested}); reuse a run id only with the same workflow, version and input, or choose another --run-id"
    )]
    ExecutionInputMismatch { run_id: String, stored: String, requested: String },
    #[error(
        "step `{step_id}` of run `{run_id}` is RUNNING (attempt {attempt}); it may still be alive, so it is not restarted. If its process is gone (a crash), rerun with --resume-interrupted"
    )]
    StepRunning { run_id: String, step_id: String, attempt: u32 },
    #[error("run `{run_id}` is executing in another live process ({owner})")]
    RunOwnedElsewhere { run_id: String, owner: String },
    #[error(
        "{name}@{version} is already registered with other content (digest {}…, this folder {}…); a registered version never changes, so bump `version` in workflow.toml",
        short(existing),
        short(new)
    )]
    WorkflowVersionConflict { name: String, version: String, existing: String, new: String },
    #[error(
        "the registered snapshot of {reference} ({path}) was changed on disk (digest {} now, {} registered); register the workflow again under a new version",
        short(now),
        short(registered)
    )]
    SnapshotChanged { reference: String, path: String, now: String, registered: String },
    #[error("the stored plan `{name}` ({path}) was altered: {why}")]
    PlanAltered { name: String, path: String, why: String },
    /// The approver's id or checksum is not the stored plan's.
    #[error("{message}")]
    PlanMismatch { message: String },
    #[error("plan `{name}` was executed already, as run `{run_id}`; a plan executes once")]
    PlanExecuted { name: String, run_id: String },
    /// Something the plan bound changed since planning (an input file, readiness, the workflow).
    #[error("{message}")]
    PlanStale { message: String },
    #[error("{message}")]
    ReceiptRefused { message: String },
    #[error("{message}")]
    KernelSlotTaken { message: String },
    #[error("the daemon is stopping; {what} takes nothing new")]
    DaemonStopping { what: &'static str },
    #[error("{message}")]
    StopRefused { message: String },
    /// A reused step's artifact changed between the replay's plan and its materialisation.
    #[error("replay child `{run_id}`: {message}")]
    ArtifactChanged { run_id: String, message: String },
    /// No artifact of that name (or path) in that step.
    #[error("run `{run_id}` step `{step_id}` has no artifact `{name}`: {message}")]
    ArtifactNotFound { run_id: String, step_id: String, name: String, message: String },
    /// The artifact's file cannot be read where it lies.
    #[error("artifact {path} cannot be read: {message}")]
    ArtifactUnreadable { path: String, message: String },
    /// The destination of an export is already there.
    #[error("export destination {path} already exists: remove it or name another")]
    ExportExists { path: String },
    /// A path an export would write or read lies outside its root, or cannot be used.
    #[error("export path {path}: {message}")]
    InvalidExportPath { path: String, message: String },
    /// An artifact's bytes no longer match what the run recorded.
    #[error(
        "run `{run_id}`: artifact {path} no longer matches its record ({message}); export with --no-data to reference it by hash only"
    )]
    ExportArtifactMismatch { run_id: String, path: String, message: String },
    /// The destination of a backup is already there: a backup never writes over anything.
    #[error(
        "backup destination {path} already exists; a backup is written only to a new path: name one that does not exist yet (or move this one away)"
    )]
    BackupExists { path: String },
    /// A backup destination that cannot be used.
    #[error("backup destination {path}: {message}")]
    InvalidBackupPath { path: String, message: String },
    /// The registry is not one `cairn backup` copies (a PostgreSQL database).
    #[error("{message}")]
    BackupUnsupported { message: String },
    #[error("{0}")]
    Store(#[from] StoreError),

    // --- access
    /// A caller's grants do not hold the permission on the resource.
    #[error("{0}")]
    Forbidden(#[from] cairn_core::access::Denied),
    #[error("{0}")]
    TwoPersonRequired(#[from] cairn_core::access::SamePerson),
    #[error("there is no principal `{name}`; list them with `cairn user list`")]
    PrincipalNotFound { name: String },
    #[error("there is no role `{name}`; list them with `cairn role list`")]
    RoleNotFound { name: String },
    #[error("{principal} has no grant of role `{role}` {scope}; list its grants with `cairn user show {principal}`")]
    GrantNotFound { principal: String, role: String, scope: String },
    #[error("{0}")]
    InvalidName(#[from] cairn_core::access::NameError),
    /// A submission over a quota: nothing was created.
    #[error("{0}")]
    QuotaExceeded(#[from] cairn_core::quota::Exceeded),
    /// A created run held queued by a quota: the reason its wait shows.
    #[error("{reason}")]
    QuotaQueued { reason: String },
    #[error("there is no quota of {measure} on {subject}; list them with `cairn quota`")]
    QuotaNotFound { subject: String, measure: String },

    // --- secrets
    #[error(
        "secret `{name}` has no value: {how}; set it with `cairn secret set {name}` (the value on stdin), or name an external manager with `cairn secret provider -- COMMAND…`"
    )]
    SecretMissing { name: String, how: String },
    #[error("the secret provider could not give `{name}`: {message}")]
    SecretProvider { name: String, message: String },
    #[error("{0}")]
    InvalidSecret(#[from] cairn_core::secret::SecretError),

    // --- internal
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    #[error("internal error: {message}")]
    Internal { message: String },

    // --- interrupted
    #[error("{message}")]
    Interrupted { message: String },
    /// The run was stopped (cancelled, or its daemon stopping) before it finished.
    #[error("run `{run_id}` was stopped: {why}")]
    Stopped { run_id: String, why: String },
}

use cairn_core::canonical::short_hash as short;

fn workflow_not_found(name: &str, version: Option<&str>) -> String {
    match version {
        Some(v) => format!(
            "workflow {name}@{v} is not registered; see `cairn workflow list`, or add it with `cairn workflow add PATH`"
        ),
        None => format!("workflow `{name}` is not registered; add it with `cairn workflow add PATH`"),
    }
}

fn replay_not_finished(run_id: &str, status: RunStatus) -> String {
    let hint =
        if status == RunStatus::Failed { " (a FAILED run has no complete evidence: run it again instead)" } else { "" };
    format!("source run `{run_id}` is {status}; only a finished READY or BLOCKED run can be replayed{hint}")
}

impl EngineError {
    /// A rejected workflow's problems, each located (file, line, step, field) as well as it can
    /// be: every one the checks found, so all can be fixed at once. Empty for any other error.
    pub fn problems(&self) -> Vec<WorkflowError> {
        match self {
            EngineError::Workflow(all) => all.0.clone(),
            EngineError::WorkflowFolder { path, message } => vec![WorkflowError {
                file: path.clone(),
                line: None,
                step: None,
                field: None,
                message: message.clone(),
            }],
            _ => Vec::new(),
        }
    }

    pub fn code(&self) -> ErrorCode {
        use EngineError as E;
        match self {
            E::RunNotFound { .. } => ErrorCode::RunNotFound,
            E::SourceRunNotFound { .. } => ErrorCode::SourceRunNotFound,
            E::WorkflowNotFound { .. } => ErrorCode::WorkflowNotFound,
            E::StepNotFound { .. } => ErrorCode::StepNotFound,
            E::PlanNotFound { .. } => ErrorCode::PlanNotFound,
            E::TargetNotFound { .. } => ErrorCode::TargetNotFound,
            E::JobNotFound { .. } => ErrorCode::JobNotFound,
            E::VerificationNotFound { .. } => ErrorCode::VerificationNotFound,
            E::DraftNotFound { .. } => ErrorCode::DraftNotFound,
            E::NothingVerified => ErrorCode::NothingVerified,
            E::NotebookUnreadable { .. } => ErrorCode::NotebookUnreadable,
            E::NoNotebook { .. } => ErrorCode::NoNotebook,
            E::DocNotFound { .. } => ErrorCode::DocNotFound,
            E::DocVersionNotFound { .. } => ErrorCode::DocVersionNotFound,
            E::DocRemoved { .. } => ErrorCode::DocRemoved,
            E::DocVerificationNotFound { .. } => ErrorCode::VerificationNotFound,
            E::Workflow(_) => ErrorCode::InvalidWorkflow,
            E::WorkflowFolder { .. } => ErrorCode::InvalidWorkflowFolder,
            E::InvalidReference { .. } => ErrorCode::InvalidReference,
            E::InvalidRunId(_) => ErrorCode::InvalidRunId,
            E::InvalidPlanName(_) => ErrorCode::InvalidPlanName,
            E::InvalidInput { .. } => ErrorCode::InvalidInput,
            E::InvalidField { .. } => ErrorCode::InvalidField,
            E::InvalidRunDir { .. } => ErrorCode::InvalidRunDir,
            E::InvalidTarget(_) | E::TargetFile { .. } => ErrorCode::InvalidTarget,
            E::TargetNotReady { .. } => ErrorCode::TargetNotReady,
            E::TargetUnreachable { .. } => ErrorCode::TargetUnreachable,
            E::TargetRefused { .. } => ErrorCode::TargetRefused,
            E::ReplayOfItself { .. } => ErrorCode::ReplayOfItself,
            E::ReplaySourceNotFinished { .. } => ErrorCode::ReplaySourceNotFinished,
            E::ReplayOtherWorkflow { .. } => ErrorCode::ReplayOtherWorkflow,
            E::ReplayNoSteps => ErrorCode::ReplayNoSteps,
            E::ReplayUnknownSteps { .. } => ErrorCode::ReplayUnknownSteps,
            E::InvalidDocument { .. } => ErrorCode::InvalidDocument,
            E::NoDocument => ErrorCode::NoDocument,
            E::EmptyJob => ErrorCode::EmptyJob,
            E::KernelUnavailable { .. } => ErrorCode::KernelUnavailable,
            E::TraceFileUnreadable { .. } => ErrorCode::TraceFileUnreadable,
            E::Doc(e) => match e {
                DocError::InvalidName { .. } => ErrorCode::InvalidDocName,
                DocError::InvalidVersion { .. } => ErrorCode::InvalidDocVersion,
                DocError::EmptyText | DocError::TooLarge { .. } | DocError::ControlCharacter { .. } => {
                    ErrorCode::InvalidDocText
                }
                DocError::EmptyQuery | DocError::QueryTooLong { .. } | DocError::InvalidLimit { .. } => {
                    ErrorCode::InvalidDocQuery
                }
            },
            E::DocQuery { .. } => ErrorCode::InvalidDocQuery,
            E::VerificationNotPassed { .. } => ErrorCode::VerificationNotPassed,
            E::InvalidRegistry { .. } => ErrorCode::InvalidRegistry,
            E::ExecutionInputMismatch { .. } => ErrorCode::ExecutionInputMismatch,
            E::StepRunning { .. } => ErrorCode::StepRunning,
            E::RunOwnedElsewhere { .. } => ErrorCode::RunOwnedElsewhere,
            E::WorkflowVersionConflict { .. } => ErrorCode::WorkflowVersionConflict,
            E::SnapshotChanged { .. } => ErrorCode::SnapshotChanged,
            E::PlanAltered { .. } => ErrorCode::PlanAltered,
            E::PlanMismatch { .. } => ErrorCode::PlanMismatch,
            E::PlanExecuted { .. } => ErrorCode::PlanExecuted,
            E::PlanStale { .. } => ErrorCode::PlanStale,
            E::ReceiptRefused { .. } => ErrorCode::ReceiptRefused,
            E::KernelSlotTaken { .. } => ErrorCode::KernelSlotTaken,
            E::DaemonStopping { .. } => ErrorCode::DaemonStopping,
            E::StopRefused { .. } => ErrorCode::StopRefused,
            E::ArtifactChanged { .. } => ErrorCode::ArtifactChanged,
            E::ArtifactNotFound { .. } => ErrorCode::ArtifactNotFound,
            E::ArtifactUnreadable { .. } => ErrorCode::ArtifactUnreadable,
            E::ExportExists { .. } => ErrorCode::ExportExists,
            E::InvalidExportPath { .. } => ErrorCode::InvalidExportPath,
            E::ExportArtifactMismatch { .. } => ErrorCode::ExportArtifactMismatch,
            E::BackupExists { .. } => ErrorCode::BackupExists,
            E::InvalidBackupPath { .. } => ErrorCode::InvalidBackupPath,
            E::BackupUnsupported { .. } => ErrorCode::BackupUnsupported,
            E::Store(e) => store_code(e),
            E::Forbidden(_) => ErrorCode::Forbidden,
            E::TwoPersonRequired(_) => ErrorCode::TwoPersonRequired,
            E::PrincipalNotFound { .. } => ErrorCode::PrincipalNotFound,
            E::RoleNotFound { .. } => ErrorCode::RoleNotFound,
            E::GrantNotFound { .. } => ErrorCode::GrantNotFound,
            E::InvalidName(_) => ErrorCode::InvalidName,
            E::QuotaExceeded(_) => ErrorCode::QuotaExceeded,
            E::QuotaQueued { .. } => ErrorCode::QuotaQueued,
            E::QuotaNotFound { .. } => ErrorCode::QuotaNotFound,
            E::SecretMissing { .. } => ErrorCode::SecretMissing,
            E::SecretProvider { .. } => ErrorCode::SecretProvider,
            E::InvalidSecret(_) => ErrorCode::InvalidSecret,
            E::Io { .. } => ErrorCode::Io,
            E::Internal { .. } => ErrorCode::Internal,
            E::Interrupted { .. } => ErrorCode::Interrupted,
            E::Stopped { .. } => ErrorCode::Stopped,
        }
    }

    pub fn kind(&self) -> ErrorKind {
        self.code().kind()
    }

    pub fn io(path: impl AsRef<std::path::Path>, e: impl std::fmt::Display) -> EngineError {
        EngineError::Io { path: path.as_ref().display().to_string(), message: e.to_string() }
    }

    pub(crate) fn input(message: impl Into<String>) -> EngineError {
        EngineError::InvalidInput { message: message.into() }
    }

    pub(crate) fn internal(message: impl Into<String>) -> EngineError {
        EngineError::Internal { message: message.into() }
    }

    /// `value` of a request's `field` when it lies in `range`, else the refusal every surface
    /// gives alike (`{field} must be between {min} and {max}{note}`).
    pub fn in_range<T: PartialOrd + std::fmt::Display + Copy>(
        field: &'static str,
        value: T,
        range: std::ops::RangeInclusive<T>,
        note: &str,
    ) -> Result<T, EngineError> {
        if range.contains(&value) {
            return Ok(value);
        }
        let message = format!("{field} must be between {} and {}{note}", range.start(), range.end());
        Err(EngineError::InvalidField { field, message })
    }

    /// A request's `field` refused, with the sentence that says how to give it.
    pub fn invalid_field(field: &'static str, message: impl Into<String>) -> EngineError {
        EngineError::InvalidField { field, message: message.into() }
    }

    /// A target that could not be reached (a fault that may heal, exit 5) or that answered and
    /// refused us (a host key or login to fix, exit 2).
    pub fn of_target(target: &str, refused: bool, message: String) -> EngineError {
        let target = target.to_string();
        if refused {
            EngineError::TargetRefused { target, message }
        } else {
            EngineError::TargetUnreachable { target, message }
        }
    }
}

/// The most runs or verifications one list answers with.
pub const LIST_LIMIT_MAX: usize = 1000;
/// The most lines of a step's log one read answers with.
pub const LOG_LINES_MAX: usize = 10_000;
/// The longest a session-kernel job may be given to run (a week).
pub const JOB_TIMEOUT_MAX_SECS: u64 = 604_800;

/// The longest a request may wait on a session job's next change (`GET /kernel/jobs/{id}?wait=`).
pub const JOB_WAIT_MAX_SECS: u64 = 60;

fn store_code(e: &StoreError) -> ErrorCode {
    match e {
        StoreError::RunNotFound(_) => ErrorCode::RunNotFound,
        StoreError::StaleToken { .. } => ErrorCode::StaleToken,
        StoreError::StaleRevision { .. } => ErrorCode::StaleRevision,
        StoreError::RunFinished { .. } => ErrorCode::RunFinished,
        StoreError::StepExists { .. } => ErrorCode::StepExists,
        StoreError::PlanExists(_) => ErrorCode::PlanExists,
        StoreError::ReceiptConsumed(_) => ErrorCode::ReceiptConsumed,
        StoreError::RunDirReserved { .. } => ErrorCode::RunDirReserved,
        StoreError::TargetExists(_) => ErrorCode::TargetExists,
        StoreError::InvalidDocQuery(_) => ErrorCode::InvalidDocQuery,
        StoreError::LeaseLost { .. } => ErrorCode::LeaseLost,
        StoreError::RunBusy { .. } => ErrorCode::RunBusy,
        StoreError::RunLeased { .. } => ErrorCode::RunLeased,
        StoreError::PrincipalExists(_) => ErrorCode::PrincipalExists,
        StoreError::RoleExists(_) => ErrorCode::RoleExists,
        StoreError::QuotaExceeded { .. } => ErrorCode::QuotaExceeded,
        StoreError::Database(_) => ErrorCode::Database,
        StoreError::Corrupt(_) => ErrorCode::Corrupt,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips() {
        for c in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(c.as_str()), Some(*c));
        }
        assert_eq!(ErrorCode::parse("not_a_code"), None);
    }

    #[test]
    fn store_errors_keep_their_kind() {
        let e = EngineError::from(StoreError::ReceiptConsumed("r".into()));
        assert_eq!((e.code(), e.kind()), (ErrorCode::ReceiptConsumed, ErrorKind::Conflict));
        let e = EngineError::from(StoreError::RunNotFound("r".into()));
        assert_eq!(e.kind(), ErrorKind::NotFound);
    }
}
