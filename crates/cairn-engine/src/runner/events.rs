//! The messages inside one run's execution: what a worker needs of the run, a step ready to
//! execute, what the scheduler decided for a step, and what workers tell the scheduler.

use std::time::Duration;

use cairn_core::ids::{AttemptToken, RunId};
use cairn_core::pipeline::JobEvent;
use cairn_core::signature::StepSignature;
use cairn_core::status::Outcome;
use cairn_core::store::{AttemptStart, FinishAttempt, RemoteProcess};
use serde_json::Value;

use crate::EngineError;
use crate::launcher::Orphan;
use crate::placement::Placement;

/// What a worker needs of the run.
pub(super) struct RunCtx {
    pub run_id: RunId,
    pub run_dir: String,
    pub placement: Placement,
    /// A replay child's source run: a pipeline step it re-executes starts from the source's
    /// working copy.
    pub source_run_id: Option<RunId>,
}

/// A step ready to execute: its signature, resolved arguments and where its attempts start.
pub(super) struct Job {
    pub step_index: usize,
    pub sig: StepSignature,
    /// The arguments it is signed and recorded with (an upstream output as its content digest).
    pub args: Value,
    /// The arguments it runs with (an upstream output as its path); `args` when it names none.
    pub exec_args: Value,
    /// The number of the attempt to begin.
    pub attempt: u32,
    pub start: AttemptStart,
    /// Attempts of this step that already ended with an outcome.
    pub finished: u32,
    /// What the abandoned attempt may have left running here (its recorded process, its
    /// nonce), stopped once the new token owns the step.
    pub orphan: Option<Orphan>,
    /// A launch the agent supervises, to re-attach to under a new token (same attempt), with
    /// the token that held it.
    pub reattach: Option<(RemoteProcess, AttemptToken)>,
    /// The token of attempt `attempt`, when the scheduler began it (folded into the commit of the
    /// steps it waited for).
    pub begun: Option<AttemptToken>,
}

/// A completed attempt, not yet written: the scheduler commits it with the begins of the steps
/// it releases.
pub(super) type Done = FinishAttempt;

/// What the scheduler does with a step, decided from its stored row.
pub(super) enum Prepared {
    /// Completed earlier in this run (its result).
    Reused(Value),
    Job(Box<Job>),
    /// The run cannot go on: finish it FAILED with this message.
    FailRun(String),
    /// Refuse without changing the run (a RUNNING step without --resume-interrupted).
    Error(EngineError),
}

/// A step's progress, for the run's observer.
pub(super) enum Progress {
    Started {
        step_id: String,
        attempt: u32,
    },
    Finished {
        step_id: String,
        outcome: Outcome,
        attempt: u32,
        duration: Duration,
    },
    /// A pipeline step's job, as its log told it.
    Job {
        step_id: String,
        job: JobEvent,
    },
}

/// What a worker tells the scheduler.
pub(super) enum Msg {
    Progress(Progress),
    /// The step is done: its completion to write, or `None` when it failed (and the run with it,
    /// written) or stopped.
    Done {
        index: usize,
        outcome: Result<Option<Done>, EngineError>,
    },
}
