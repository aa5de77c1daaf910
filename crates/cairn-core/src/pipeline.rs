//! Reading a Snakemake log as it grows: each job's start (rule, job id, wildcards), its end, its
//! failure (and whether Snakemake restarts it, for `retries:`), and how many of the pipeline's
//! jobs are done. Pure: the caller feeds the bytes it read, from the first, in order, and gets
//! the jobs' events as they become known.
//!
//! The format is Snakemake 9's (the version the tests pin, 9.27) and 8's (8.30, the last 8.x): a
//! job's block starts with `rule NAME:` (`localrule`, `checkpoint`, `localcheckpoint`), its fields
//! indented below (`jobid: N`, `wildcards: a=x, b=y`); `Finished jobid: N (Rule: NAME)` (9) or
//! `Finished job N.` (8) is followed by `K of M steps (P%) done`; a failure is an `Error in rule
//! NAME:` block, followed by `Trying to restart job N.` when Snakemake retries it. Snakemake 8
//! ends each block with a blank line, and its finish names only the job: the rule is the one of
//! that job's block. Structured output needs something installed beside Snakemake on the target
//! (a logger plugin for 9, a `--log-handler-script` for 8; none is built in), so the log is what
//! is read.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One job's event, with the byte offset of the log line it was read from (so a successor
/// re-reading the log records each once).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum JobEvent {
    Started {
        job: u64,
        rule: String,
        wildcards: BTreeMap<String, String>,
        offset: u64,
        /// What the job's block said of it besides (files, reason, threads).
        #[serde(flatten)]
        facts: JobFacts,
    },
    /// `done` of `total` jobs are done once it finished, when Snakemake said so. `rule` is empty
    /// when the log never named it (Snakemake 8 names only the job, and a rule with a `message:`
    /// prints that instead of its block).
    Finished {
        job: u64,
        rule: String,
        done: Option<u64>,
        total: Option<u64>,
        offset: u64,
        /// The job's outputs as they were when its end was read, where the pipeline runs (the
        /// parser lists the paths; the reader that can see the files fills in what they hold).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        files: Vec<JobFile>,
    },
    /// `restarted`: Snakemake tries it again (`retries:`).
    Failed { job: u64, rule: String, restarted: bool, offset: u64 },
}

/// A job's files and why it ran, as its block in the log gave them. Paths are relative to the
/// pipeline's working directory, as Snakemake printed them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobFacts {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<String>,
    /// Its log files (`log:`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log: Vec<String>,
    /// Snakemake's reason for running it (`Missing output files: …; Updated input files: …`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Its threads, when the log says (Snakemake prints them only above 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u64>,
}

/// One output of a finished job as it was when its end was read: a file (`bytes`, `sha256`), a
/// symlink (`link`: its target's text, never followed), a folder's file (`path` below the
/// folder the job declared), or gone (none of them: a `temp()` output removed already).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobFile {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

impl JobEvent {
    pub fn offset(&self) -> u64 {
        match self {
            JobEvent::Started { offset, .. } | JobEvent::Finished { offset, .. } | JobEvent::Failed { offset, .. } => {
                *offset
            }
        }
    }
}

/// What the log said of the pipeline as a whole.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Jobs Snakemake planned and finished (`K of M steps done`), when it said so.
    pub total: Option<u64>,
    pub done: Option<u64>,
    /// Jobs that failed for good (not restarted).
    pub failed: u64,
    /// Their rules, in the order they failed, each once.
    pub failed_rules: Vec<String>,
}

#[derive(Debug, Default)]
enum Pending {
    #[default]
    None,
    Start {
        rule: String,
        job: Option<u64>,
        wildcards: BTreeMap<String, String>,
        facts: JobFacts,
        offset: u64,
    },
    Finish {
        job: u64,
        rule: String,
        offset: u64,
    },
    Error {
        rule: String,
        job: Option<u64>,
        offset: u64,
    },
    /// An error block ended; the next line says whether the job restarts.
    Failed {
        rule: String,
        job: u64,
        offset: u64,
    },
}

/// A Snakemake log, read incrementally.
#[derive(Debug, Default)]
pub struct SnakemakeLog {
    partial: Vec<u8>,
    /// Offset of the first byte of `partial`.
    line_start: u64,
    pending: Pending,
    summary: Summary,
    /// Each job's rule and outputs, from its block: Snakemake 8's `Finished job N.` names only
    /// the job.
    rules: BTreeMap<u64, (String, Vec<String>)>,
}

/// `rule NAME:` and its kin, the start of a job's block.
fn job_header(line: &str) -> Option<&str> {
    let rest = ["localrule ", "rule ", "localcheckpoint ", "checkpoint "].iter().find_map(|p| line.strip_prefix(p))?;
    let name = rest.strip_suffix(':')?;
    (!name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_')).then_some(name)
}

fn field<'l>(line: &'l str, name: &str) -> Option<&'l str> {
    line.trim_start().strip_prefix(name)?.strip_prefix(':').map(str::trim)
}

/// `a, b, c`: a block's list of files.
fn files(text: &str) -> Vec<String> {
    text.split(", ").map(str::trim).filter(|f| !f.is_empty()).map(String::from).collect()
}

/// `a=x, b=y`.
fn wildcards(text: &str) -> BTreeMap<String, String> {
    text.split(", ")
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// `Finished jobid: N (Rule: NAME)` (Snakemake 9) or `Finished job N.` (8, no rule).
fn finished(line: &str) -> Option<(u64, Option<String>)> {
    if let Some(rest) = line.strip_prefix("Finished jobid: ") {
        let (job, rule) = rest.split_once(" (Rule: ")?;
        return Some((job.trim().parse().ok()?, Some(rule.strip_suffix(')')?.to_string())));
    }
    let job = line.strip_prefix("Finished job ")?.strip_suffix('.')?;
    Some((job.parse().ok()?, None))
}

/// `K of M steps (P%) done`.
fn progress(line: &str) -> Option<(u64, u64)> {
    let mut words = line.split_whitespace();
    let done = words.next()?.parse().ok()?;
    (words.next()? == "of").then_some(())?;
    let total = words.next()?.parse().ok()?;
    (words.next()? == "steps").then_some(())?;
    line.ends_with(" done").then_some((done, total))
}

impl SnakemakeLog {
    pub fn new() -> SnakemakeLog {
        SnakemakeLog::default()
    }

    /// How many bytes were fed.
    pub fn fed(&self) -> u64 {
        self.line_start + self.partial.len() as u64
    }

    /// Feeds the next bytes of the log; returns the events they completed.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<JobEvent> {
        let mut out = Vec::new();
        self.partial.extend_from_slice(bytes);
        // Lines are taken from the front, and the rest kept once: a chunk of many lines is not
        // shifted line by line.
        let partial = std::mem::take(&mut self.partial);
        let mut start = 0;
        while let Some(nl) = partial[start..].iter().position(|&b| b == b'\n') {
            let line = &partial[start..start + nl];
            let offset = self.line_start;
            self.line_start += nl as u64 + 1;
            start += nl + 1;
            let text = String::from_utf8_lossy(line).into_owned();
            self.line(text.trim_end_matches('\r'), offset, &mut out);
        }
        self.partial = partial[start..].to_vec();
        out
    }

    /// The log ended: whatever a last block held is complete.
    pub fn finish(&mut self) -> Vec<JobEvent> {
        let mut out = Vec::new();
        if !self.partial.is_empty() {
            let text = String::from_utf8_lossy(&std::mem::take(&mut self.partial)).into_owned();
            let offset = self.line_start;
            self.line_start += text.len() as u64;
            self.line(&text, offset, &mut out);
        }
        self.flush(None, &mut out);
        out
    }

    pub fn summary(&self) -> &Summary {
        &self.summary
    }

    /// Completes a pending block that `next` (a line that is not part of it) ends.
    fn flush(&mut self, next: Option<&str>, out: &mut Vec<JobEvent>) {
        match std::mem::take(&mut self.pending) {
            Pending::None => {}
            Pending::Start { rule, job, wildcards, facts, offset } => {
                if let Some(job) = job {
                    self.rules.insert(job, (rule.clone(), facts.outputs.clone()));
                    out.push(JobEvent::Started { job, rule, wildcards, offset, facts });
                }
            }
            Pending::Finish { job, rule, offset } => {
                let (done, total) = match next.and_then(progress) {
                    Some((d, t)) => (Some(d), Some(t)),
                    None => (None, None),
                };
                let files = self.rules.get(&job).map(|(_, outputs)| outputs.clone()).unwrap_or_default();
                let files =
                    files.into_iter().map(|path| JobFile { path, bytes: None, sha256: None, link: None }).collect();
                out.push(JobEvent::Finished { job, rule, done, total, offset, files });
            }
            Pending::Error { rule, job: Some(job), offset } => {
                // The block ended; the restart line, if any, comes next.
                self.pending = Pending::Failed { rule, job, offset };
                self.flush(next, out);
            }
            Pending::Error { job: None, .. } => {}
            Pending::Failed { rule, job, offset } => {
                let restarted = next.is_some_and(|l| l.trim() == format!("Trying to restart job {job}."));
                if !restarted {
                    self.summary.failed += 1;
                    if !self.summary.failed_rules.contains(&rule) {
                        self.summary.failed_rules.push(rule.clone());
                    }
                }
                out.push(JobEvent::Failed { job, rule, restarted, offset });
            }
        }
    }

    fn line(&mut self, line: &str, offset: u64, out: &mut Vec<JobEvent>) {
        let indented = line.starts_with(' ') || line.starts_with('\t');
        match &mut self.pending {
            Pending::Start { job, wildcards: w, facts, .. } if indented => {
                if let Some(v) = field(line, "jobid") {
                    *job = v.parse().ok();
                } else if let Some(v) = field(line, "wildcards") {
                    *w = wildcards(v);
                } else if let Some(v) = field(line, "input") {
                    facts.inputs = files(v);
                } else if let Some(v) = field(line, "output") {
                    facts.outputs = files(v);
                } else if let Some(v) = field(line, "log") {
                    facts.log = files(v);
                } else if let Some(v) = field(line, "reason") {
                    facts.reason = Some(v.to_string());
                } else if let Some(v) = field(line, "threads") {
                    facts.threads = v.parse().ok();
                }
                return;
            }
            Pending::Error { job, .. } if indented => {
                if let Some(v) = field(line, "jobid") {
                    *job = v.parse().ok();
                }
                return;
            }
            _ => {}
        }
        if line.trim().is_empty() {
            // Snakemake 8 ends a job's block and an error's with a blank line: a finish's progress
            // and a failure's restart come after it.
            match std::mem::take(&mut self.pending) {
                Pending::Error { rule, job: Some(job), offset } => self.pending = Pending::Failed { rule, job, offset },
                kept @ (Pending::Finish { .. } | Pending::Failed { .. }) => self.pending = kept,
                other => {
                    self.pending = other;
                    self.flush(None, out);
                }
            }
            return;
        }
        if !matches!(self.pending, Pending::None) {
            self.flush(Some(line), out);
        }
        if let Some((done, total)) = progress(line) {
            self.summary.done = Some(done);
            self.summary.total = Some(total);
        } else if let Some(rule) = job_header(line) {
            self.pending = Pending::Start {
                rule: rule.to_string(),
                job: None,
                wildcards: BTreeMap::new(),
                facts: JobFacts::default(),
                offset,
            };
        } else if let Some((job, rule)) = finished(line) {
            let rule = rule.or_else(|| self.rules.get(&job).map(|(r, _)| r.clone())).unwrap_or_default();
            self.pending = Pending::Finish { job, rule, offset };
        } else if let Some(rule) = line.strip_prefix("Error in rule ").and_then(|r| r.strip_suffix(':')) {
            self.pending = Pending::Error { rule: rule.to_string(), job: None, offset };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log as Snakemake 9.27 writes it: two jobs of one rule with wildcards, a retried failure,
    /// a failure for good, the target rule.
    const LOG: &str = "\
Building DAG of jobs...
Job stats:
job      count
[Tue Dec  1 17:15:59 2026]
localrule greet:
    output: results/greetings/ada.txt
    jobid: 2
    reason: Missing output files: results/greetings/ada.txt
    wildcards: sample=ada, lang=en
    resources: tmpdir=/tmp
[Tue Dec  1 17:15:59 2026]
Finished jobid: 2 (Rule: greet)
1 of 4 steps (25%) done
[Tue Dec  1 17:15:59 2026]
localrule flaky:
    jobid: 3
attempt 1 fails
[Tue Dec  1 17:15:59 2026]
Error in rule flaky:
    message: None
    jobid: 3
    output: results/flaky.txt
Trying to restart job 3.
[Tue Dec  1 17:16:00 2026]
localcheckpoint split:
    jobid: 5
[Tue Dec  1 17:16:00 2026]
Error in rule split:
    jobid: 5
Shutting down, this might take some time.
Exiting because a job execution failed. Look below for error messages
";

    /// The events of `log`, fed in pieces that cut lines anywhere, in words, and its summary.
    fn read(log: &str) -> (Vec<String>, Summary) {
        let mut reader = SnakemakeLog::new();
        let mut events = Vec::new();
        for chunk in log.as_bytes().chunks(7) {
            events.extend(reader.feed(chunk));
        }
        events.extend(reader.finish());
        assert_eq!(reader.fed(), log.len() as u64);
        (events.iter().map(words).collect(), reader.summary().clone())
    }

    fn words(e: &JobEvent) -> String {
        match e {
            JobEvent::Started { job, rule, wildcards, .. } => format!("start {job} {rule} {wildcards:?}"),
            JobEvent::Finished { job, rule, done, total, .. } => format!("end {job} {rule} {done:?}/{total:?}"),
            JobEvent::Failed { job, rule, restarted, .. } => format!("fail {job} {rule} {restarted}"),
        }
    }

    #[test]
    fn jobs_are_read_with_their_wildcards_progress_and_restarts() {
        let (kinds, summary) = read(LOG);
        assert_eq!(
            kinds,
            [
                r#"start 2 greet {"lang": "en", "sample": "ada"}"#,
                "end 2 greet Some(1)/Some(4)",
                "start 3 flaky {}",
                "fail 3 flaky true",
                "start 5 split {}",
                "fail 5 split false",
            ]
        );
        assert_eq!(summary, Summary { total: Some(4), done: Some(1), failed: 1, failed_rules: vec!["split".into()] });
        // Offsets point at the lines the events were read from, so a re-reader can skip them.
        let mut log = SnakemakeLog::new();
        let events = log.feed(LOG.as_bytes());
        let start = &LOG[events[0].offset() as usize..];
        assert!(start.starts_with("localrule greet:"), "{start:.20}");
    }

    /// Snakemake 8.30's log of `retries` (tests/fixtures/pipelines in the cairn crate), from its first
    /// job on: a failure restarted, then the job's end (its second failure and the shell command
    /// cut).
    const RETRIES_8: &str = "\
Select jobs to execute...
Execute 1 jobs...

[Tue Dec  1 18:15:16 2026]
localrule flaky:
    output: results/flaky.txt
    jobid: 0
    reason: Missing output files: results/flaky.txt
    resources: tmpdir=/tmp

attempt 1 fails
RuleException:
CalledProcessError in file /work/retries/Snakefile, line 10:
Command 'set -euo pipefail;  n=$(cat attempts.txt …); … > results/flaky.txt' returned non-zero exit status 1.
[Tue Dec  1 18:15:16 2026]
Error in rule flaky:
    jobid: 0
    output: results/flaky.txt
    shell:
        n=$(cat attempts.txt …); … > results/flaky.txt
        (one of the commands exited with non-zero exit code; note that snakemake uses bash strict mode!)

Trying to restart job 0.
Select jobs to execute...
Execute 1 jobs...

[Tue Dec  1 18:15:16 2026]
localrule flaky:
    output: results/flaky.txt
    jobid: 0
    reason: Missing output files: results/flaky.txt
    resources: tmpdir=/tmp

[Tue Dec  1 18:15:16 2026]
Finished job 0.
1 of 1 steps (100%) done
Complete log: .snakemake/log/2026-12-01T181516.893433.snakemake.log
";

    /// Snakemake 9.27's log of the same run.
    const RETRIES_9: &str = "\
Select jobs to execute...
Execute 1 jobs...

[Tue Dec  1 18:15:24 2026]
localrule flaky:
    output: results/flaky.txt
    jobid: 0
    reason: Missing output files: results/flaky.txt
    resources: tmpdir=/tmp
attempt 1 fails
RuleException:
CalledProcessError in file \"/work/retries/Snakefile\", line 10:
Command 'set -euo pipefail;  n=$(cat attempts.txt …); … > results/flaky.txt' returned non-zero exit status 1.
[Tue Dec  1 18:15:24 2026]
Error in rule flaky:
    message: None
    jobid: 0
    output: results/flaky.txt
    shell:
        n=$(cat attempts.txt …); … > results/flaky.txt
        (command exited with non-zero exit code)
Trying to restart job 0.
Select jobs to execute...
Execute 1 jobs...

[Tue Dec  1 18:15:24 2026]
localrule flaky:
    output: results/flaky.txt
    jobid: 0
    reason: Missing output files: results/flaky.txt
    resources: tmpdir=/tmp
[Tue Dec  1 18:15:24 2026]
Finished jobid: 0 (Rule: flaky)
1 of 1 steps (100%) done
Complete log(s): /work/retries/.snakemake/log/2026-12-01T181524.068184.snakemake.log
Elapsed time: 0:00:00.090207
";

    /// Snakemake 8.30's log of `broken` (tests/fixtures/controllers): a job's end, a failure for good.
    const BROKEN_8: &str = "\
Select jobs to execute...
Execute 1 jobs...

[Tue Dec  1 18:15:17 2026]
localrule prepare:
    output: results/prepared.txt
    jobid: 2
    reason: Missing output files: results/prepared.txt
    resources: tmpdir=/tmp

[Tue Dec  1 18:15:17 2026]
Finished job 2.
1 of 3 steps (33%) done
Select jobs to execute...
Execute 1 jobs...

[Tue Dec  1 18:15:17 2026]
localrule broken:
    input: results/prepared.txt
    output: results/broken.txt
    jobid: 1
    reason: Missing output files: results/broken.txt; Input files updated by another job: results/prepared.txt
    resources: tmpdir=/tmp

the broken rule gives up
RuleException:
CalledProcessError in file /work/broken/Snakefile, line 22:
Command 'set -euo pipefail;  echo 'the broken rule gives up' >&2; exit 1' returned non-zero exit status 1.
[Tue Dec  1 18:15:17 2026]
Error in rule broken:
    jobid: 1
    input: results/prepared.txt
    output: results/broken.txt
    shell:
        echo 'the broken rule gives up' >&2; exit 1
        (one of the commands exited with non-zero exit code; note that snakemake uses bash strict mode!)

Shutting down, this might take some time.
Exiting because a job execution failed. Look above for error message
Complete log: .snakemake/log/2026-12-01T181517.788022.snakemake.log
WorkflowError:
At least one job did not complete successfully.
";

    /// Snakemake 9.27's log of the same run.
    const BROKEN_9: &str = "\
Select jobs to execute...
Execute 1 jobs...

[Tue Dec  1 18:15:28 2026]
localrule prepare:
    output: results/prepared.txt
    jobid: 2
    reason: Missing output files: results/prepared.txt
    resources: tmpdir=/tmp
[Tue Dec  1 18:15:28 2026]
Finished jobid: 2 (Rule: prepare)
1 of 3 steps (33%) done
Select jobs to execute...
Execute 1 jobs...

[Tue Dec  1 18:15:28 2026]
localrule broken:
    input: results/prepared.txt
    output: results/broken.txt
    jobid: 1
    reason: Missing output files: results/broken.txt; Input files updated by another job: results/prepared.txt
    resources: tmpdir=/tmp
the broken rule gives up
RuleException:
CalledProcessError in file \"/work/broken/Snakefile\", line 22:
Command 'set -euo pipefail;  echo 'the broken rule gives up' >&2; exit 1' returned non-zero exit status 1.
[Tue Dec  1 18:15:28 2026]
Error in rule broken:
    message: None
    jobid: 1
    input: results/prepared.txt
    output: results/broken.txt
    shell:
        echo 'the broken rule gives up' >&2; exit 1
        (command exited with non-zero exit code)
Shutting down, this might take some time.
Exiting because a job execution failed. Look above for error messages
Complete log(s): /work/broken/.snakemake/log/2026-12-01T181528.898521.snakemake.log
Elapsed time: 0:00:00.077083
WorkflowError:
At least one job did not complete successfully.
";

    /// Snakemake 8.30's log of `bare` (tests/fixtures/pipelines), its `reason:` lines cut: two jobs
    /// at once, each finish naming only its job, whose block came two blocks before.
    const BARE_8: &str = "\
Select jobs to execute...
Execute 2 jobs...

[Tue Dec  1 18:15:16 2026]
localrule count:
    input: data/alpha.txt
    output: results/counts/alpha.txt
    jobid: 2
    wildcards: sample=alpha
    resources: tmpdir=/tmp


[Tue Dec  1 18:15:16 2026]
localrule count:
    input: data/beta.txt
    output: results/counts/beta.txt
    jobid: 4
    wildcards: sample=beta
    resources: tmpdir=/tmp

[Tue Dec  1 18:15:16 2026]
Finished job 4.
1 of 5 steps (20%) done
Select jobs to execute...
Execute 1 jobs...

[Tue Dec  1 18:15:16 2026]
localrule line:
    input: data/beta.txt, results/counts/beta.txt
    output: results/lines/beta.txt
    jobid: 3
    wildcards: sample=beta
    resources: tmpdir=/tmp

[Tue Dec  1 18:15:16 2026]
Finished job 2.
2 of 5 steps (40%) done
Select jobs to execute...
Execute 1 jobs...

[Tue Dec  1 18:15:16 2026]
localrule line:
    input: data/alpha.txt, results/counts/alpha.txt
    output: results/lines/alpha.txt
    jobid: 1
    wildcards: sample=alpha
    resources: tmpdir=/tmp

[Tue Dec  1 18:15:16 2026]
Finished job 3.
3 of 5 steps (60%) done
Removing temporary output results/counts/beta.txt.
[Tue Dec  1 18:15:16 2026]
Finished job 1.
4 of 5 steps (80%) done
Removing temporary output results/counts/alpha.txt.
Select jobs to execute...
Execute 1 jobs...

[Tue Dec  1 18:15:16 2026]
localrule report:
    input: results/lines/alpha.txt, results/lines/beta.txt
    output: results/report.txt
    jobid: 0
    resources: tmpdir=/tmp

[Tue Dec  1 18:15:16 2026]
Finished job 0.
5 of 5 steps (100%) done
Complete log: .snakemake/log/2026-12-01T181516.097966.snakemake.log
";

    #[test]
    fn snakemake_8s_log_gives_the_jobs_and_summary_9s_gives() {
        for (name, eight, nine) in [("retries", RETRIES_8, RETRIES_9), ("broken", BROKEN_8, BROKEN_9)] {
            assert_eq!(read(eight), read(nine), "{name}");
        }
        let (retries, summary) = read(RETRIES_8);
        assert_eq!(
            retries,
            ["start 0 flaky {}", "fail 0 flaky true", "start 0 flaky {}", "end 0 flaky Some(1)/Some(1)"]
        );
        assert_eq!(summary, Summary { total: Some(1), done: Some(1), failed: 0, failed_rules: vec![] });
        let (broken, summary) = read(BROKEN_8);
        assert_eq!(
            broken,
            ["start 2 prepare {}", "end 2 prepare Some(1)/Some(3)", "start 1 broken {}", "fail 1 broken false"]
        );
        assert_eq!(summary, Summary { total: Some(3), done: Some(1), failed: 1, failed_rules: vec!["broken".into()] });
    }

    #[test]
    fn a_snakemake_8_finish_takes_its_rule_from_the_jobs_block() {
        let (bare, summary) = read(BARE_8);
        assert_eq!(
            bare,
            [
                r#"start 2 count {"sample": "alpha"}"#,
                r#"start 4 count {"sample": "beta"}"#,
                "end 4 count Some(1)/Some(5)",
                r#"start 3 line {"sample": "beta"}"#,
                "end 2 count Some(2)/Some(5)",
                r#"start 1 line {"sample": "alpha"}"#,
                "end 3 line Some(3)/Some(5)",
                "end 1 line Some(4)/Some(5)",
                "start 0 report {}",
                "end 0 report Some(5)/Some(5)",
            ]
        );
        assert_eq!(summary, Summary { total: Some(5), done: Some(5), failed: 0, failed_rules: vec![] });
        let mut log = SnakemakeLog::new();
        let events = log.feed(BARE_8.as_bytes());
        let end = &BARE_8[events[2].offset() as usize..];
        assert!(end.starts_with("Finished job 4.\n"), "{end:.20}");
        // A job the log never showed the block of (a rule with a `message:`) ends without a rule.
        assert_eq!(read("Finished job 7.\n1 of 1 steps (100%) done\n").0, ["end 7  Some(1)/Some(1)"]);
    }
}
