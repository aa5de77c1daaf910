//! The engine's errors, grouped by what a caller can do about them.

use cairn_core::store::StoreError;
use cairn_core::workflow::WorkflowError;

/// What kind of failure an error is; the CLI maps it to an exit code, the API to a status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad input or usage: fix the request (exit 2).
    Invalid,
    /// Something named does not exist (exit 2).
    NotFound,
    /// The request conflicts with stored state: identity mismatch, stale token, running step (exit 4).
    Conflict,
    /// The machine failed us: IO, the database (exit 2, with the cause).
    Internal,
    /// Stopped by the person (Ctrl-C) before anything ran (exit 130).
    Interrupted,
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{0}")]
    Workflow(#[from] WorkflowError),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    #[error(
        "ExecutionInputMismatch: run `{run_id}` already exists with other identity data (stored {stored}, requested {requested}); reuse a run id only with the same workflow, version and input, or choose another --run-id"
    )]
    ExecutionInputMismatch { run_id: String, stored: String, requested: String },
    #[error(
        "step `{step_id}` of run `{run_id}` is RUNNING (attempt {attempt}); it may still be alive, so it is not restarted. If its process is gone (a crash), rerun with --resume-interrupted"
    )]
    StepRunning { run_id: String, step_id: String, attempt: u32 },
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    #[error("{0}")]
    Interrupted(String),
    /// The run was stopped (cancelled, or its daemon stopping) before it finished.
    #[error("run `{run_id}` was stopped: {why}")]
    Stopped { run_id: String, why: String },
}

impl EngineError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            EngineError::Workflow(_) | EngineError::Invalid(_) => ErrorKind::Invalid,
            EngineError::NotFound(_) | EngineError::Store(StoreError::RunNotFound(_)) => ErrorKind::NotFound,
            EngineError::ExecutionInputMismatch { .. }
            | EngineError::StepRunning { .. }
            | EngineError::Conflict(_)
            | EngineError::Store(StoreError::StaleToken { .. })
            | EngineError::Store(StoreError::StaleRevision { .. })
            | EngineError::Store(StoreError::StepExists { .. })
            | EngineError::Store(StoreError::RunFinished { .. })
            | EngineError::Store(StoreError::PlanExists(_))
            | EngineError::Store(StoreError::TargetExists(_))
            | EngineError::Store(StoreError::ReceiptConsumed(_))
            | EngineError::Store(StoreError::RunDirReserved { .. }) => ErrorKind::Conflict,
            EngineError::Store(_) | EngineError::Io { .. } => ErrorKind::Internal,
            EngineError::Interrupted(_) | EngineError::Stopped { .. } => ErrorKind::Interrupted,
        }
    }

    pub fn io(path: impl AsRef<std::path::Path>, e: impl std::fmt::Display) -> EngineError {
        EngineError::Io { path: path.as_ref().display().to_string(), message: e.to_string() }
    }
}
