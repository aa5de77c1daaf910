//! A pipeline step's jobs as records: each job its controller ran (rule, wildcards, Snakemake's
//! reason, inputs, outputs with what they held when it finished, threads, log files, start, end,
//! status, tries), folded from the step's `pipeline.*` events, and the lineage between them (an
//! input that an earlier job wrote names that job). Pure: the events are the record, so every
//! surface derives the same jobs from them.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::event::RunEvent;
use crate::pipeline::{JobFacts, JobFile};

/// A job's identity within its step: the controller's attempt that ran it (a restarted
/// controller numbers its jobs anew) and the controller's job id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct JobRef {
    pub attempt: u32,
    pub job: u64,
}

impl std::fmt::Display for JobRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.attempt, self.job)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Started, and its controller is still running.
    Running,
    Finished,
    /// Failed for good (or its last try failed).
    Failed,
    /// Failed, and the controller is trying it again (`retries:`).
    Retrying,
    /// Its controller's attempt ended before the job did (killed, cancelled, or failed elsewhere).
    Interrupted,
    /// Not run here: a replay carried its outputs over from the run that ran it (`carried_from`),
    /// and the controller found them up to date.
    Carried,
}

impl JobStatus {
    pub const ALL: [JobStatus; 6] = [
        JobStatus::Running,
        JobStatus::Finished,
        JobStatus::Failed,
        JobStatus::Retrying,
        JobStatus::Interrupted,
        JobStatus::Carried,
    ];

    /// The status a word names (`finished`, …), as `as_str` gives it.
    pub fn parse(word: &str) -> Option<JobStatus> {
        JobStatus::ALL.into_iter().find(|s| s.as_str() == word)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Running => "running",
            JobStatus::Finished => "finished",
            JobStatus::Failed => "failed",
            JobStatus::Retrying => "retrying",
            JobStatus::Interrupted => "interrupted",
            JobStatus::Carried => "carried",
        }
    }
}

/// An input of a job: its path, and the job that wrote it, when an earlier job of the step did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobInput {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<JobRef>,
}

/// One job of a pipeline step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    #[serde(flatten)]
    pub id: JobRef,
    pub rule: String,
    pub wildcards: BTreeMap<String, String>,
    pub status: JobStatus,
    /// Snakemake's reason for running it.
    pub reason: Option<String>,
    pub inputs: Vec<JobInput>,
    /// Its outputs as its block named them.
    pub outputs: Vec<String>,
    /// What they held when it finished (size and SHA-256, a link's target, or gone).
    pub files: Vec<JobFile>,
    pub log: Vec<String>,
    pub threads: Option<u64>,
    /// When its start and end were read from the log (ms since the epoch).
    pub started_at: i64,
    pub ended_at: Option<i64>,
    /// How many times it started (above 1: Snakemake retried it).
    pub tries: u32,
    /// For a job a replay carried over: the run that ran it.
    pub carried_from: Option<String>,
}

/// One stored event of the step, with what the fold needs of its record.
pub struct StepEvent<'e> {
    pub attempt: u32,
    pub at: i64,
    pub event: &'e RunEvent,
}

/// The jobs of one step, in the order they started. `live_attempt`: the attempt whose
/// controller is still running, if any (a job of any other attempt that never ended was
/// interrupted).
pub fn fold<'e>(events: impl IntoIterator<Item = StepEvent<'e>>, live_attempt: Option<u32>) -> Vec<Job> {
    let mut jobs: Vec<Job> = Vec::new();
    let mut index: HashMap<JobRef, usize> = HashMap::new();
    for StepEvent { attempt, at, event } in events {
        match event {
            RunEvent::PipelineJobStarted { job, rule, wildcards, facts, .. } => {
                let id = JobRef { attempt, job: *job };
                match index.get(&id) {
                    Some(&i) => {
                        let j = &mut jobs[i];
                        j.tries += 1;
                        j.status = JobStatus::Running;
                        j.ended_at = None;
                        j.reason = facts.reason.clone().or(j.reason.take());
                    }
                    None => {
                        index.insert(id, jobs.len());
                        jobs.push(started(id, rule, wildcards, facts, at));
                    }
                }
            }
            RunEvent::PipelineJobFinished { job, rule, files, .. } => {
                let id = JobRef { attempt, job: *job };
                let i = *index.entry(id).or_insert_with(|| {
                    // Its start was never read (a block the log did not show): a record all the same.
                    jobs.push(started(id, rule, &BTreeMap::new(), &JobFacts::default(), at));
                    jobs.len() - 1
                });
                let j = &mut jobs[i];
                j.status = JobStatus::Finished;
                j.ended_at = Some(at);
                j.files = files.clone();
                if j.rule.is_empty() {
                    j.rule = rule.clone();
                }
            }
            RunEvent::PipelineJobFailed { job, restarted, .. } => {
                if let Some(&i) = index.get(&JobRef { attempt, job: *job }) {
                    let j = &mut jobs[i];
                    j.status = if *restarted { JobStatus::Retrying } else { JobStatus::Failed };
                    j.ended_at = Some(at);
                }
            }
            _ => {}
        }
    }
    for j in &mut jobs {
        if matches!(j.status, JobStatus::Running | JobStatus::Retrying) && Some(j.id.attempt) != live_attempt {
            j.status = if j.status == JobStatus::Retrying { JobStatus::Failed } else { JobStatus::Interrupted };
        }
    }
    link_inputs(&mut jobs);
    jobs
}

fn started(id: JobRef, rule: &str, wildcards: &BTreeMap<String, String>, facts: &JobFacts, at: i64) -> Job {
    Job {
        id,
        rule: rule.to_string(),
        wildcards: wildcards.clone(),
        status: JobStatus::Running,
        reason: facts.reason.clone(),
        inputs: facts.inputs.iter().map(|p| JobInput { path: p.clone(), from: None }).collect(),
        outputs: facts.outputs.clone(),
        files: Vec::new(),
        log: facts.log.clone(),
        threads: facts.threads,
        started_at: at,
        ended_at: None,
        tries: 1,
        carried_from: None,
    }
}

/// A re-executed pipeline step's jobs with those it did not run: the finished jobs of `earlier`
/// (the step's jobs in run `from_run`, whose working copy seeded this one) that no job of `ran`
/// repeats (same rule and wildcards) were carried over, and come first, marked so.
pub fn with_carried(ran: Vec<Job>, earlier: Vec<Job>, from_run: &str) -> Vec<Job> {
    let key = |j: &Job| (j.rule.clone(), j.wildcards.clone());
    let repeated: std::collections::HashSet<(String, BTreeMap<String, String>)> = ran.iter().map(key).collect();
    let mut out: Vec<Job> = earlier
        .into_iter()
        .filter(|j| j.status == JobStatus::Finished && !repeated.contains(&key(j)))
        .map(|mut j| {
            j.status = JobStatus::Carried;
            j.carried_from = Some(from_run.to_string());
            j
        })
        .collect();
    out.extend(ran);
    out
}

/// Names, for each input, the job that wrote it: the last one to finish with it among its
/// outputs before this job started (a restarted controller's jobs read what an earlier
/// attempt's jobs wrote).
fn link_inputs(jobs: &mut [Job]) {
    let mut writers: HashMap<&str, Vec<(i64, JobRef)>> = HashMap::new();
    for j in jobs.iter() {
        if j.status == JobStatus::Finished {
            for o in &j.outputs {
                writers.entry(o.as_str()).or_default().push((j.ended_at.unwrap_or(j.started_at), j.id));
            }
        }
    }
    let found: Vec<Vec<Option<JobRef>>> = jobs
        .iter()
        .map(|j| {
            j.inputs
                .iter()
                .map(|input| {
                    writers.get(input.path.as_str()).and_then(|ws| {
                        ws.iter()
                            .filter(|(ended, id)| *ended <= j.started_at && *id != j.id)
                            .max_by_key(|(ended, id)| (*ended, *id))
                            .map(|(_, id)| *id)
                    })
                })
                .collect()
        })
        .collect();
    for (j, from) in jobs.iter_mut().zip(found) {
        for (input, from) in j.inputs.iter_mut().zip(from) {
            input.from = from;
        }
    }
}

/// Which job wrote a file: what an artifact of a pipeline step names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobOrigin {
    #[serde(flatten)]
    pub id: JobRef,
    pub rule: String,
    pub wildcards: BTreeMap<String, String>,
}

impl JobOrigin {
    pub fn of(job: &Job) -> JobOrigin {
        JobOrigin { id: job.id, rule: job.rule.clone(), wildcards: job.wildcards.clone() }
    }
}

/// The job that wrote `path` (relative to the working copy), among `jobs`: the last to finish
/// with it among its outputs, or with an output folder holding it.
pub fn writer_of<'j>(jobs: &'j [Job], path: &str) -> Option<&'j Job> {
    jobs.iter()
        .filter(|j| j.status == JobStatus::Finished)
        .filter(|j| {
            j.outputs.iter().any(|o| {
                let o = o.trim_end_matches('/');
                path == o || path.strip_prefix(o).is_some_and(|rest| rest.starts_with('/'))
            })
        })
        .max_by_key(|j| (j.ended_at, j.id))
}

/// One job on a file's way back to the pipeline's own inputs: the job, and each of its inputs
/// with the SHA-256 it had (as the job that wrote it recorded it, or as `pipeline_file` gives a
/// file of the pipeline's folder) and the job that wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineageJob {
    pub job: JobOrigin,
    pub inputs: Vec<LineageInput>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineageInput {
    pub path: String,
    pub sha256: Option<String>,
    pub from: Option<JobRef>,
}

/// The jobs behind `path` (relative to the working copy): the job that wrote it first, then the
/// jobs that wrote its inputs, breadth first, each once, until the pipeline's own files.
pub fn lineage(jobs: &[Job], path: &str, pipeline_file: &dyn Fn(&str) -> Option<String>) -> Vec<LineageJob> {
    let by_id: HashMap<JobRef, &Job> = jobs.iter().map(|j| (j.id, j)).collect();
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut queue: std::collections::VecDeque<&Job> = writer_of(jobs, path).into_iter().collect();
    while let Some(job) = queue.pop_front() {
        if !seen.insert(job.id) {
            continue;
        }
        let inputs = job
            .inputs
            .iter()
            .map(|input| {
                let written = input.from.and_then(|f| by_id.get(&f));
                let sha256 = match written {
                    Some(w) => w.files.iter().find(|f| f.path == input.path).and_then(|f| f.sha256.clone()),
                    None => pipeline_file(&input.path),
                };
                if let Some(w) = written {
                    queue.push_back(w);
                }
                LineageInput { path: input.path.clone(), sha256, from: input.from }
            })
            .collect();
        out.push(LineageJob { job: JobOrigin::of(job), inputs });
    }
    out
}

/// How many jobs of each rule there are, by status, rules in the order their first job started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleCount {
    pub rule: String,
    pub jobs: u64,
    pub finished: u64,
    pub failed: u64,
    pub running: u64,
    pub interrupted: u64,
    /// Carried over by a replay, not run.
    #[serde(default)]
    pub carried: u64,
    /// Why its jobs ran: each kind of Snakemake's reasons (`Missing output files`, `Params have
    /// changed since last execution`, …) and how many of its jobs gave it.
    #[serde(default)]
    pub reasons: BTreeMap<String, u64>,
}

/// The kinds of reason a job's reason gives: Snakemake joins its clauses with `; `, each `KIND:
/// files` or a sentence.
pub fn reason_kinds(reason: &str) -> Vec<&str> {
    reason
        .split("; ")
        .map(|clause| clause.split_once(':').map_or(clause, |(kind, _)| kind).trim())
        .filter(|k| !k.is_empty())
        .collect()
}

pub fn by_rule(jobs: &[Job]) -> Vec<RuleCount> {
    let mut out: Vec<RuleCount> = Vec::new();
    for j in jobs {
        let i = match out.iter().position(|r| r.rule == j.rule) {
            Some(i) => i,
            None => {
                out.push(RuleCount { rule: j.rule.clone(), ..RuleCount::default() });
                out.len() - 1
            }
        };
        let r = &mut out[i];
        r.jobs += 1;
        if j.status != JobStatus::Carried {
            for kind in j.reason.as_deref().map(reason_kinds).unwrap_or_default() {
                *r.reasons.entry(kind.to_string()).or_default() += 1;
            }
        }
        match j.status {
            JobStatus::Finished => r.finished += 1,
            JobStatus::Failed => r.failed += 1,
            JobStatus::Running | JobStatus::Retrying => r.running += 1,
            JobStatus::Interrupted => r.interrupted += 1,
            JobStatus::Carried => r.carried += 1,
        }
    }
    out
}

/// A pipeline step's jobs in one line's numbers: done of the controller's total, how many run,
/// how many failed ("3 of 6 jobs done, 2 running, 1 failed").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
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

/// The progress of a step's `jobs` (as [`fold`] and [`with_carried`] give them), with the
/// controller's own counts from `events`, the step's events in the run that ran it, in order.
pub fn progress<'e>(jobs: &[Job], events: impl IntoIterator<Item = &'e RunEvent>) -> JobsProgress {
    let (mut done, mut total) = (None, None);
    for e in events {
        if let RunEvent::PipelineJobFinished { done: d, total: t, .. } = e {
            done = d.or(done);
            total = t.or(total);
        }
    }
    let count = |want: &[JobStatus]| jobs.iter().filter(|j| want.contains(&j.status)).count() as u64;
    JobsProgress {
        done: done.unwrap_or_else(|| count(&[JobStatus::Finished])),
        total,
        running: count(&[JobStatus::Running, JobStatus::Retrying]),
        failed: count(&[JobStatus::Failed]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::SnakemakeLog;

    /// A per-sample pipeline's log (Snakemake 9.27's words): an index, a map for A, a sort that
    /// reads the map's output, and a call that fails once and is retried.
    const LOG: &str = "\
[Thu Dec  3 18:33:14 2026]
localrule bwa_index:
    input: data/genome.fa
    output: data/genome.fa.amb, data/genome.fa.bwt
    jobid: 4
    reason: Missing output files: data/genome.fa.bwt, data/genome.fa.amb
    resources: tmpdir=/tmp
[Thu Dec  3 18:33:14 2026]
Finished jobid: 4 (Rule: bwa_index)
1 of 4 steps (25%) done
[Thu Dec  3 18:33:14 2026]
localrule bwa_map:
    input: data/genome.fa, data/samples/A.fastq, data/genome.fa.amb, data/genome.fa.bwt
    output: mapped_reads/A.bam
    log: logs/bwa_map/A.log
    jobid: 3
    reason: Missing output files: mapped_reads/A.bam; Input files updated by another job: data/genome.fa.bwt
    wildcards: sample=A
    threads: 2
    resources: tmpdir=/tmp
[Thu Dec  3 18:33:14 2026]
Finished jobid: 3 (Rule: bwa_map)
2 of 4 steps (50%) done
[Thu Dec  3 18:33:14 2026]
localrule samtools_sort:
    input: mapped_reads/A.bam
    output: sorted_reads/A.bam
    jobid: 2
    reason: Missing output files: sorted_reads/A.bam; Input files updated by another job: mapped_reads/A.bam
    wildcards: sample=A
    resources: tmpdir=/tmp
[Thu Dec  3 18:33:15 2026]
Error in rule samtools_sort:
    jobid: 2
Trying to restart job 2.
[Thu Dec  3 18:33:15 2026]
localrule samtools_sort:
    input: mapped_reads/A.bam
    output: sorted_reads/A.bam
    jobid: 2
    reason: Missing output files: sorted_reads/A.bam
    wildcards: sample=A
    resources: tmpdir=/tmp
[Thu Dec  3 18:33:16 2026]
Finished jobid: 2 (Rule: samtools_sort)
3 of 4 steps (75%) done
[Thu Dec  3 18:33:16 2026]
localrule call:
    input: sorted_reads/A.bam
    output: calls/all.vcf
    jobid: 1
    reason: Missing output files: calls/all.vcf
    resources: tmpdir=/tmp
";

    fn events(log: &str) -> Vec<RunEvent> {
        let mut reader = SnakemakeLog::new();
        let mut out: Vec<RunEvent> =
            log.as_bytes().chunks(11).flat_map(|c| reader.feed(c)).map(RunEvent::of_job).collect();
        out.extend(reader.finish().into_iter().map(RunEvent::of_job));
        out
    }

    fn jobs_of(events: &[RunEvent], attempt: u32, live: Option<u32>) -> Vec<Job> {
        fold(events.iter().enumerate().map(|(i, event)| StepEvent { attempt, at: i as i64 * 10, event }), live)
    }

    #[test]
    fn a_logs_jobs_become_records_with_their_files_reason_and_lineage() {
        let evs = events(LOG);
        let jobs = jobs_of(&evs, 1, Some(1));
        let names: Vec<String> = jobs.iter().map(|j| format!("{} {} {}", j.id, j.rule, j.status.as_str())).collect();
        assert_eq!(
            names,
            ["1.4 bwa_index finished", "1.3 bwa_map finished", "1.2 samtools_sort finished", "1.1 call running"]
        );
        let map = &jobs[1];
        assert_eq!(map.wildcards, BTreeMap::from([("sample".to_string(), "A".to_string())]));
        assert_eq!(map.threads, Some(2));
        assert_eq!(map.log, ["logs/bwa_map/A.log"]);
        assert!(map.reason.as_deref().unwrap().starts_with("Missing output files: mapped_reads/A.bam"));
        // An input an earlier job wrote names it; one beside the pipeline names none.
        let from: Vec<(String, Option<String>)> =
            map.inputs.iter().map(|i| (i.path.clone(), i.from.map(|f| f.to_string()))).collect();
        assert_eq!(
            from,
            [
                ("data/genome.fa".to_string(), None),
                ("data/samples/A.fastq".to_string(), None),
                ("data/genome.fa.amb".to_string(), Some("1.4".to_string())),
                ("data/genome.fa.bwt".to_string(), Some("1.4".to_string())),
            ]
        );
        // Retried: two tries, the last reason kept, finished.
        let sort = &jobs[2];
        assert_eq!((sort.tries, sort.status), (2, JobStatus::Finished));
        assert_eq!(sort.reason.as_deref(), Some("Missing output files: sorted_reads/A.bam"));
        assert_eq!(sort.inputs[0].from, Some(JobRef { attempt: 1, job: 3 }));
        // A finish lists the outputs to be hashed by whoever sees the files.
        assert_eq!(sort.files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(), ["sorted_reads/A.bam"]);
        assert_eq!(writer_of(&jobs, "sorted_reads/A.bam").map(|j| j.id), Some(sort.id));
        assert_eq!(writer_of(&jobs, "calls/all.vcf"), None, "the call has not finished");
        // Once the controller's attempt is over, a job that never ended was interrupted.
        let ended = jobs_of(&evs, 1, None);
        assert_eq!(ended[3].status, JobStatus::Interrupted);
        let counts = by_rule(&ended);
        assert_eq!(
            counts.iter().map(|r| (r.rule.as_str(), r.jobs, r.finished)).collect::<Vec<_>>(),
            [("bwa_index", 1, 1), ("bwa_map", 1, 1), ("samtools_sort", 1, 1), ("call", 1, 0)]
        );
    }

    #[test]
    fn progress_is_the_controllers_count_with_the_jobs_running_and_failed() {
        let evs = events(LOG);
        // The call runs: 3 of 4 done as Snakemake counted them.
        let live = progress(&jobs_of(&evs, 1, Some(1)), &evs);
        assert_eq!(live, JobsProgress { done: 3, total: Some(4), running: 1, failed: 0 });
        // Its controller gone, the call was interrupted: neither running nor failed.
        let ended = progress(&jobs_of(&evs, 1, None), &evs);
        assert_eq!(ended, JobsProgress { done: 3, total: Some(4), running: 0, failed: 0 });
        // A controller that gives no count: the jobs that finished, of no known total.
        let mut failed = jobs_of(&evs, 1, None);
        failed[3].status = JobStatus::Failed;
        assert_eq!(progress(&failed, &[]), JobsProgress { done: 3, total: None, running: 0, failed: 1 });
        // Jobs a replay carried over are not done here.
        let carried = with_carried(Vec::new(), jobs_of(&evs, 1, None), "run_src");
        assert_eq!(progress(&carried, &[]), JobsProgress::default());
    }

    #[test]
    fn a_replays_jobs_are_those_it_ran_and_those_it_carried_over() {
        let earlier = jobs_of(&events(LOG), 1, None);
        // The child ran a new sample's map and the call again.
        let ran = vec![
            Job { wildcards: BTreeMap::from([("sample".into(), "C".into())]), ..earlier[1].clone() },
            Job { status: JobStatus::Finished, ..earlier[3].clone() },
        ];
        let all = with_carried(ran, earlier, "run_src");
        let words: Vec<String> = all
            .iter()
            .map(|j| format!("{} {:?} {} {:?}", j.rule, j.wildcards.get("sample"), j.status.as_str(), j.carried_from))
            .collect();
        assert_eq!(
            words,
            [
                r#"bwa_index None carried Some("run_src")"#,
                r#"bwa_map Some("A") carried Some("run_src")"#,
                r#"samtools_sort Some("A") carried Some("run_src")"#,
                r#"bwa_map Some("C") finished None"#,
                "call None finished None",
            ]
        );
        assert_eq!(by_rule(&all)[1].carried, 1);
        assert_eq!(
            by_rule(&all)[1].reasons,
            BTreeMap::from([
                ("Input files updated by another job".to_string(), 1),
                ("Missing output files".to_string(), 1)
            ]),
            "the reasons of the jobs it ran, not of those it carried"
        );
        assert_eq!(
            reason_kinds("Params have changed since last execution"),
            ["Params have changed since last execution"]
        );
    }

    #[test]
    fn a_files_lineage_walks_back_through_the_jobs_to_the_pipelines_own_files() {
        let mut jobs = jobs_of(&events(LOG), 1, Some(1));
        jobs[1].files =
            vec![JobFile { path: "mapped_reads/A.bam".into(), bytes: Some(9), sha256: Some("bam".into()), link: None }];
        let pipeline = |p: &str| (p == "data/genome.fa").then(|| "fa".to_string());
        let walked = lineage(&jobs, "sorted_reads/A.bam", &pipeline);
        let words: Vec<String> = walked
            .iter()
            .map(|l| {
                let inputs: Vec<String> = l
                    .inputs
                    .iter()
                    .map(|i| {
                        format!(
                            "{}={}{}",
                            i.path,
                            i.sha256.as_deref().unwrap_or("?"),
                            i.from.map(|f| format!("<{f}")).unwrap_or_default()
                        )
                    })
                    .collect();
                format!("{} {}: {}", l.job.id, l.job.rule, inputs.join(" "))
            })
            .collect();
        assert_eq!(
            words,
            [
                "1.2 samtools_sort: mapped_reads/A.bam=bam<1.3",
                "1.3 bwa_map: data/genome.fa=fa data/samples/A.fastq=? data/genome.fa.amb=?<1.4 data/genome.fa.bwt=?<1.4",
                "1.4 bwa_index: data/genome.fa=fa",
            ]
        );
        assert!(lineage(&jobs, "nowhere.txt", &pipeline).is_empty());
    }

    #[test]
    fn a_folder_output_names_the_job_that_wrote_a_file_inside_it() {
        let started = RunEvent::PipelineJobStarted {
            job: 1,
            rule: "unpack".into(),
            wildcards: BTreeMap::new(),
            offset: 0,
            facts: JobFacts { outputs: vec!["out/dir".into()], ..JobFacts::default() },
        };
        let finished = RunEvent::PipelineJobFinished {
            job: 1,
            rule: "unpack".into(),
            done: None,
            total: None,
            offset: 9,
            files: vec![],
        };
        let jobs = jobs_of(&[started, finished], 2, None);
        assert_eq!(writer_of(&jobs, "out/dir/a.txt").map(|j| j.id.to_string()), Some("2.1".to_string()));
        assert_eq!(writer_of(&jobs, "out/dirt"), None);
    }
}
