//! The vocabulary of a run's append-only event log, as one closed enum: what each event says and
//! the data it carries. The store writes an event's `kind` and `data` as they serialise here, and
//! every consumer (the CLI's progress, the event streams, the web app's timeline) matches on the
//! enum, never on the kind's text.
//!
//! The `step_id` and `attempt` an event belongs to are columns of its record
//! ([`crate::store::EventRecord`]), not part of its data.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cause::Cause;
use crate::pipeline::{JobEvent, JobFacts, JobFile};
use crate::status::{Outcome, RunStatus};

/// One event of a run. Each variant's doc says when it is written and what it changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "data")]
pub enum RunEvent {
    /// The run was created (RUNNING, revision 1), directly or by consuming a plan's receipt.
    #[serde(rename = "run.created")]
    RunCreated {
        workflow: String,
        version: String,
        identity_hash: String,
        /// For a replay child: the run it replays.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source_run_id: Option<String>,
        /// For a run made from an approved plan: the plan, its receipt and its reservation.
        #[serde(default, flatten, skip_serializing_if = "Option::is_none")]
        plan: Option<PlannedOrigin>,
    },
    /// An owner took the run over for an explicit resume (its revision bumped).
    #[serde(rename = "run.resumed")]
    RunResumed { revision: i64, owner: Option<String> },
    /// A daemon took the run's lease over (its holder's lease had expired, or its holder was
    /// gone): every write of the run by an earlier holder is refused from now on.
    #[serde(rename = "run.leased")]
    RunLeased {
        daemon: String,
        host: String,
        epoch: i64,
        /// The daemon that held it before, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        previous: Option<String>,
    },
    /// A write of the run by a daemon whose lease had been taken over was refused, not applied.
    #[serde(rename = "run.stale_lease_write_rejected")]
    RunStaleLeaseWriteRejected { daemon: String, epoch: i64 },
    /// An attempt began under a fresh token (the step row is RUNNING).
    #[serde(rename = "step.started")]
    StepStarted { tool: String, tool_digest: String, args_hash: String },
    /// The attempt (the event's `attempt`) ended with a retryable outcome (for `cause`, when it is
    /// known); `next_attempt` begins, its tool `delay_ms` later (a full disk is given time).
    #[serde(rename = "step.retrying")]
    StepRetrying {
        outcome: Outcome,
        error: Option<String>,
        next_attempt: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cause: Option<Cause>,
        #[serde(default, skip_serializing_if = "is_zero")]
        delay_ms: u64,
    },
    /// The attempt was abandoned by a crash and is resumed explicitly, or a pipeline's controller
    /// was killed from outside and its next attempt resumes it (`why` says so): it does not use
    /// up a retry.
    #[serde(rename = "step.interrupted")]
    StepInterrupted {
        abandoned_token: String,
        next_attempt: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        why: Option<String>,
    },
    /// A successor re-attached to a supervised launch it verified: a new token, the same attempt.
    #[serde(rename = "step.reattached")]
    StepReattached { abandoned_token: String },
    /// The attempt completed; its result is in the step row.
    #[serde(rename = "step.completed")]
    StepCompleted { duration_us: i64 },
    /// The attempt failed for good; the run fails with it (in the same transaction).
    #[serde(rename = "step.failed")]
    StepFailed {
        outcome: Outcome,
        error: Option<String>,
        duration_us: i64,
        /// What made it fail, when it is known (a full disk).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cause: Option<Cause>,
    },
    /// A write by a token that no longer owns the step was rejected, not applied.
    #[serde(rename = "step.stale_write_rejected")]
    StepStaleWriteRejected { token: String },
    /// A replay child reused this step: its evidence was copied from `source_run_id` (first
    /// recorded in `origin_run_id`, which differs when the source had reused it too).
    #[serde(rename = "step.replay_reused")]
    StepReplayReused { source_run_id: String, origin_run_id: String, args_hash: String },
    /// The run was cancelled while this step ran: the step is FAILED and its token cleared.
    #[serde(rename = "step.cancelled")]
    StepCancelled { reason: String },
    /// The attempt (begun) waits to launch: its target's `steps` quota is full. It launches once a
    /// place frees; `reason` says which quota and its use.
    #[serde(rename = "step.queued")]
    StepQueued { target: String, reason: String },
    /// A pipeline step's controller started one of its jobs (read from its log); `offset` is
    /// where in the attempt's log it was read, so each is recorded once.
    #[serde(rename = "pipeline.job_started")]
    /// `facts`: its files, Snakemake's reason for running it, its threads.
    PipelineJobStarted {
        job: u64,
        rule: String,
        wildcards: BTreeMap<String, String>,
        offset: u64,
        #[serde(flatten)]
        facts: JobFacts,
    },
    /// A pipeline's job finished: `done` of `total` jobs are, when the controller said so;
    /// `files`: its outputs as they were when its end was read (size and SHA-256, a link's
    /// target, or gone).
    #[serde(rename = "pipeline.job_finished")]
    PipelineJobFinished {
        job: u64,
        rule: String,
        done: Option<u64>,
        total: Option<u64>,
        offset: u64,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        files: Vec<JobFile>,
    },
    /// A pipeline's job failed; `restarted` when the controller tries it again (`retries:`).
    #[serde(rename = "pipeline.job_failed")]
    PipelineJobFailed { job: u64, rule: String, restarted: bool, offset: u64 },
    /// The run began to wait for its environment (the registry could not be written, or its
    /// target reached) at `since`; written as soon as the registry can be, so after a full disk
    /// it comes with the `run.continued` that ends the wait.
    #[serde(rename = "run.waiting")]
    RunWaiting { code: String, reason: String, since: i64 },
    /// The fault cleared and the run goes on by itself, after waiting `waited_ms` since `since`
    /// (its steps left running are resumed as interrupted).
    #[serde(rename = "run.continued")]
    RunContinued { since: i64, waited_ms: i64, tries: u32 },
    /// The run reached a terminal status; nothing is written to it after this.
    #[serde(rename = "run.finished")]
    RunFinished { status: RunStatus, findings: usize, error: Option<String> },
}

/// Where a planned run came from: its plan, the receipt consumed for it, its reservation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedOrigin {
    pub plan_id: String,
    pub receipt_id: String,
    pub target: String,
    pub run_dir: String,
}

/// A stored event that does not fit the vocabulary: written by another version of Cairn, or
/// damaged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("event `{kind}` cannot be read: {reason}")]
pub struct UnknownEvent {
    pub kind: String,
    pub reason: String,
}

impl RunEvent {
    /// The kind as stored and shown (`run.created`, `step.started`, …).
    pub fn kind(&self) -> &'static str {
        match self {
            RunEvent::RunCreated { .. } => "run.created",
            RunEvent::RunResumed { .. } => "run.resumed",
            RunEvent::RunLeased { .. } => "run.leased",
            RunEvent::RunStaleLeaseWriteRejected { .. } => "run.stale_lease_write_rejected",
            RunEvent::StepStarted { .. } => "step.started",
            RunEvent::StepRetrying { .. } => "step.retrying",
            RunEvent::StepInterrupted { .. } => "step.interrupted",
            RunEvent::StepReattached { .. } => "step.reattached",
            RunEvent::StepCompleted { .. } => "step.completed",
            RunEvent::StepFailed { .. } => "step.failed",
            RunEvent::StepStaleWriteRejected { .. } => "step.stale_write_rejected",
            RunEvent::StepReplayReused { .. } => "step.replay_reused",
            RunEvent::StepCancelled { .. } => "step.cancelled",
            RunEvent::StepQueued { .. } => "step.queued",
            RunEvent::PipelineJobStarted { .. } => "pipeline.job_started",
            RunEvent::PipelineJobFinished { .. } => "pipeline.job_finished",
            RunEvent::PipelineJobFailed { .. } => "pipeline.job_failed",
            RunEvent::RunWaiting { .. } => "run.waiting",
            RunEvent::RunContinued { .. } => "run.continued",
            RunEvent::RunFinished { .. } => "run.finished",
        }
    }

    /// The event's data, as stored and shown.
    pub fn data(&self) -> serde_json::Value {
        // Serialising plain data with string keys cannot fail.
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(mut m)) => m.remove("data").unwrap_or(serde_json::Value::Null),
            _ => serde_json::Value::Null,
        }
    }

    /// The event a stored `kind` and `data` make.
    pub fn from_parts(kind: &str, data: serde_json::Value) -> Result<RunEvent, UnknownEvent> {
        serde_json::from_value(serde_json::json!({"kind": kind, "data": data}))
            .map_err(|e| UnknownEvent { kind: kind.to_string(), reason: e.to_string() })
    }

    /// A pipeline job's event, as the log recorded.
    pub fn of_job(job: JobEvent) -> RunEvent {
        match job {
            JobEvent::Started { job, rule, wildcards, offset, facts } => {
                RunEvent::PipelineJobStarted { job, rule, wildcards, offset, facts }
            }
            JobEvent::Finished { job, rule, done, total, offset, files } => {
                RunEvent::PipelineJobFinished { job, rule, done, total, offset, files }
            }
            JobEvent::Failed { job, rule, restarted, offset } => {
                RunEvent::PipelineJobFailed { job, rule, restarted, offset }
            }
        }
    }

    /// A pipeline job's event as the log said it, for an event that is one.
    pub fn as_job(&self) -> Option<JobEvent> {
        match self.clone() {
            RunEvent::PipelineJobStarted { job, rule, wildcards, offset, facts } => {
                Some(JobEvent::Started { job, rule, wildcards, offset, facts })
            }
            RunEvent::PipelineJobFinished { job, rule, done, total, offset, files } => {
                Some(JobEvent::Finished { job, rule, done, total, offset, files })
            }
            RunEvent::PipelineJobFailed { job, rule, restarted, offset } => {
                Some(JobEvent::Failed { job, rule, restarted, offset })
            }
            _ => None,
        }
    }

    /// The log offset of a pipeline job's event.
    pub fn job_offset(&self) -> Option<u64> {
        match self {
            RunEvent::PipelineJobStarted { offset, .. }
            | RunEvent::PipelineJobFinished { offset, .. }
            | RunEvent::PipelineJobFailed { offset, .. } => Some(*offset),
            _ => None,
        }
    }

    /// Whether the run ended with this event: a follower of the log stops after it.
    pub fn ends_run(&self) -> bool {
        matches!(self, RunEvent::RunFinished { .. })
    }
}

/// A retry that starts at once says nothing of a wait.
fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn every_kind() -> Vec<RunEvent> {
        vec![
            RunEvent::RunCreated {
                workflow: "w".into(),
                version: "1.0.0".into(),
                identity_hash: "h".into(),
                source_run_id: None,
                plan: None,
            },
            RunEvent::RunResumed { revision: 2, owner: Some("1:2".into()) },
            RunEvent::RunLeased { daemon: "dmn_b".into(), host: "h".into(), epoch: 2, previous: Some("dmn_a".into()) },
            RunEvent::RunStaleLeaseWriteRejected { daemon: "dmn_a".into(), epoch: 1 },
            RunEvent::StepStarted { tool: "t".into(), tool_digest: "d".into(), args_hash: "a".into() },
            RunEvent::StepRetrying {
                outcome: Outcome::TimedOut,
                error: None,
                next_attempt: 2,
                cause: None,
                delay_ms: 0,
            },
            RunEvent::StepRetrying {
                outcome: Outcome::Failed,
                error: Some("ENOSPC on /r (0 bytes free): the tool's output disk is full".into()),
                next_attempt: 2,
                cause: crate::cause::cause_of(
                    Outcome::Failed,
                    "",
                    &[crate::cause::DiskSpace { path: "/r".into(), free_bytes: 0, free_inodes: None }],
                ),
                delay_ms: 1_000,
            },
            RunEvent::StepInterrupted { abandoned_token: "att_1".into(), next_attempt: 2, why: None },
            RunEvent::StepReattached { abandoned_token: "att_1".into() },
            RunEvent::StepCompleted { duration_us: 5 },
            RunEvent::StepFailed { outcome: Outcome::Failed, error: Some("boom".into()), duration_us: 5, cause: None },
            RunEvent::StepStaleWriteRejected { token: "att_2".into() },
            RunEvent::StepReplayReused { source_run_id: "a".into(), origin_run_id: "b".into(), args_hash: "h".into() },
            RunEvent::StepCancelled { reason: "r".into() },
            RunEvent::StepQueued { target: "hpc".into(), reason: "r".into() },
            RunEvent::RunWaiting { code: "database".into(), reason: "disk is full".into(), since: 1 },
            RunEvent::RunContinued { since: 1, waited_ms: 5, tries: 2 },
            RunEvent::PipelineJobStarted {
                job: 3,
                rule: "greet".into(),
                wildcards: [("sample".to_string(), "ada".to_string())].into(),
                offset: 10,
                facts: JobFacts {
                    inputs: vec!["data/ada.txt".into()],
                    outputs: vec!["results/ada.txt".into()],
                    log: vec![],
                    reason: Some("Missing output files: results/ada.txt".into()),
                    threads: Some(2),
                },
            },
            RunEvent::PipelineJobFinished {
                job: 3,
                rule: "greet".into(),
                done: Some(1),
                total: Some(4),
                offset: 90,
                files: vec![JobFile {
                    path: "results/ada.txt".into(),
                    bytes: Some(3),
                    sha256: Some("ab".into()),
                    link: None,
                }],
            },
            RunEvent::PipelineJobFailed { job: 4, rule: "shout".into(), restarted: true, offset: 120 },
            RunEvent::RunFinished { status: RunStatus::Ready, findings: 0, error: None },
        ]
    }

    #[test]
    fn every_event_round_trips_through_its_stored_parts() {
        for e in every_kind() {
            let back = RunEvent::from_parts(e.kind(), e.data()).unwrap();
            assert_eq!(back, e);
        }
    }

    #[test]
    fn stored_data_keeps_the_field_names_consumers_read() {
        let finished = RunEvent::RunFinished { status: RunStatus::Blocked, findings: 2, error: None };
        assert_eq!(finished.data(), json!({"status": "BLOCKED", "findings": 2, "error": null}));
        let created = RunEvent::RunCreated {
            workflow: "w".into(),
            version: "1.0.0".into(),
            identity_hash: "h".into(),
            source_run_id: Some("src".into()),
            plan: Some(PlannedOrigin {
                plan_id: "plan_1".into(),
                receipt_id: "rcpt_1".into(),
                target: "local".into(),
                run_dir: "/r".into(),
            }),
        };
        assert_eq!(
            created.data(),
            json!({"workflow": "w", "version": "1.0.0", "identity_hash": "h", "source_run_id": "src",
                   "plan_id": "plan_1", "receipt_id": "rcpt_1", "target": "local", "run_dir": "/r"})
        );
        let plain = RunEvent::from_parts("run.created", json!({"workflow": "w", "version": "1", "identity_hash": "h"}));
        assert!(matches!(plain, Ok(RunEvent::RunCreated { source_run_id: None, plan: None, .. })));
        // Written before causes existed: no cause, and a retry that started at once.
        let failed = RunEvent::from_parts("step.failed", json!({"outcome": "FAILED", "error": "x", "duration_us": 1}));
        assert!(matches!(failed, Ok(RunEvent::StepFailed { cause: None, .. })));
        let retrying = RunEvent::StepRetrying {
            outcome: Outcome::TimedOut,
            error: None,
            next_attempt: 2,
            cause: None,
            delay_ms: 0,
        };
        assert_eq!(retrying.data(), json!({"outcome": "TIMED_OUT", "error": null, "next_attempt": 2}));
    }

    #[test]
    fn an_unknown_kind_is_refused_naming_it() {
        let err = RunEvent::from_parts("step.teleported", json!({})).unwrap_err();
        assert_eq!(err.kind, "step.teleported");
        assert!(err.to_string().contains("step.teleported"));
    }
}
