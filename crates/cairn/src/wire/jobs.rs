//! A pipeline step's jobs (`cairn jobs`, `GET /runs/{id}/steps/{step}/jobs`, MCP
//! `get_pipeline_jobs`, the web app's job graph).

use std::collections::BTreeMap;

use cairn_core::job::{Job, JobStatus};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::time;

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PipelineJobs {
    pub run_id: String,
    pub step_id: String,
    /// The step's status.
    pub status: String,
    /// For a step a replay reused: the run whose controller ran these jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_run: Option<String>,
    /// Each rule's jobs by status, rules in the order their first job started.
    pub rules: Vec<RuleJobs>,
    /// How many jobs matched (`jobs` is the page asked for: all of them unless a limit was given).
    pub total: usize,
    /// The jobs, in the order they started.
    pub jobs: Vec<PipelineJob>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RuleJobs {
    pub rule: String,
    pub jobs: u64,
    pub finished: u64,
    pub failed: u64,
    pub running: u64,
    pub interrupted: u64,
    /// Carried over by a replay from the run that ran them, not run here.
    pub carried: u64,
    /// Why the jobs it ran ran: each kind of Snakemake's reasons and how many gave it.
    pub reasons: BTreeMap<String, u64>,
}

/// A pipeline step's jobs in numbers, on the step of a run (`GET /runs/{id}`, `cairn show
/// --json`, MCP `get_run`): the web app's "3 of 6 jobs done, 2 running, 1 failed".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct JobsProgress {
    /// Jobs done, as the controller last counted them (Snakemake's `3 of 6 steps done`); without
    /// its count, the jobs that finished (not those a replay carried over).
    pub done: u64,
    /// How many jobs the controller meant to run, once it said so.
    pub total: Option<u64>,
    /// Running, or failed and tried again.
    pub running: u64,
    /// Failed for good.
    pub failed: u64,
}

impl JobsProgress {
    pub fn from_core(p: &cairn_core::job::JobsProgress) -> JobsProgress {
        JobsProgress { done: p.done, total: p.total, running: p.running, failed: p.failed }
    }
}

/// A job's identity within its step: the controller's attempt and its job id there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct JobId {
    pub attempt: u32,
    pub job: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PipelineJob {
    /// The step's attempt whose controller ran it.
    pub attempt: u32,
    /// The controller's job id in that attempt.
    pub job: u64,
    pub rule: String,
    pub wildcards: BTreeMap<String, String>,
    /// running, finished, failed, retrying, interrupted, or carried (a replay carried its outputs
    /// over from `carried_from`, the run that ran it, and the controller found them up to date).
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carried_from: Option<String>,
    /// Snakemake's reason for running it.
    pub reason: Option<String>,
    /// Its inputs, each naming the job of this step that wrote it, if one did.
    pub inputs: Vec<JobInput>,
    pub outputs: Vec<String>,
    /// Its outputs as they were when it finished: size and SHA-256, a symlink's target, or gone.
    pub files: Vec<JobFile>,
    pub log: Vec<String>,
    pub threads: Option<u64>,
    pub started_at: String,
    pub ended_at: Option<String>,
    /// How many times it started (above 1: retried).
    pub tries: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct JobInput {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<JobId>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct JobFile {
    /// Relative to the pipeline's working copy.
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// A symlink's target, as written (never followed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

impl PipelineJobs {
    pub fn from_engine(j: &cairn_engine::StepJobs) -> PipelineJobs {
        PipelineJobs {
            run_id: j.run_id.to_string(),
            step_id: j.step_id.clone(),
            status: j.status.to_string(),
            from_run: j.from_run.as_deref().map(str::to_string),
            rules: j.rules.iter().map(RuleJobs::from_core).collect(),
            total: j.total,
            jobs: j.jobs.iter().map(PipelineJob::from_core).collect(),
        }
    }
}

impl RuleJobs {
    pub fn from_core(r: &cairn_core::job::RuleCount) -> RuleJobs {
        RuleJobs {
            rule: r.rule.clone(),
            jobs: r.jobs,
            finished: r.finished,
            failed: r.failed,
            running: r.running,
            interrupted: r.interrupted,
            carried: r.carried,
            reasons: r.reasons.clone(),
        }
    }

    /// `bwa_map: 1 ran (Missing output files), 2 carried over`.
    pub fn summary(&self) -> String {
        let ran = self.jobs - self.carried;
        let why: Vec<String> =
            self.reasons.iter().map(|(k, n)| if *n == ran { k.clone() } else { format!("{k} ×{n}") }).collect();
        let mut text = format!("{}: {ran} ran", self.rule);
        if !why.is_empty() {
            text.push_str(&format!(" ({})", why.join("; ")));
        }
        if self.carried > 0 {
            text.push_str(&format!(", {} carried over", self.carried));
        }
        text
    }
}

impl PipelineJob {
    pub fn from_core(j: &Job) -> PipelineJob {
        PipelineJob {
            attempt: j.id.attempt,
            job: j.id.job,
            rule: j.rule.clone(),
            wildcards: j.wildcards.clone(),
            status: j.status.as_str().to_string(),
            carried_from: j.carried_from.clone(),
            reason: j.reason.clone(),
            inputs: j
                .inputs
                .iter()
                .map(|i| JobInput {
                    path: i.path.clone(),
                    from: i.from.map(|f| JobId { attempt: f.attempt, job: f.job }),
                })
                .collect(),
            outputs: j.outputs.clone(),
            files: j
                .files
                .iter()
                .map(|f| JobFile {
                    path: f.path.clone(),
                    bytes: f.bytes,
                    sha256: f.sha256.clone(),
                    link: f.link.clone(),
                })
                .collect(),
            log: j.log.clone(),
            threads: j.threads,
            started_at: time(j.started_at),
            ended_at: j.ended_at.map(time),
            tries: j.tries,
        }
    }

    /// Whether it needs a reader's attention first.
    pub fn is_failed(&self) -> bool {
        self.status == JobStatus::Failed.as_str() || self.status == JobStatus::Interrupted.as_str()
    }
}
