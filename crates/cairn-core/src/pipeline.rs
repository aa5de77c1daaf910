//! Reading a Snakemake log as it grows: each job's start (rule, job id, wildcards), its end, its
//! failure (and whether Snakemake restarts it, for `retries:`), and how many of the pipeline's
//! jobs are done. Pure: the caller feeds the bytes it read, from the first, in order, and gets
//! the jobs' events as they become known.
//!
//! The format is Snakemake 9's (the version the tests pin, 9.27): a job's block starts with
//! `rule NAME:` (`localrule`, `checkpoint`, `localcheckpoint`), its fields indented below
//! (`jobid: N`, `wildcards: a=x, b=y`); `Finished jobid: N (Rule: NAME)` is followed by
//! `K of M steps (P%) done`; a failure is an `Error in rule NAME:` block, followed by `Trying to
//! restart job N.` when Snakemake retries it. Snakemake 9 has no structured log output without a
//! logger plugin installed on the target, so the log is what is read.

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
    },
    /// `done` of `total` jobs are done once it finished, when Snakemake said so.
    Finished {
        job: u64,
        rule: String,
        done: Option<u64>,
        total: Option<u64>,
        offset: u64,
    },
    /// `restarted`: Snakemake tries it again (`retries:`).
    Failed {
        job: u64,
        rule: String,
        restarted: bool,
        offset: u64,
    },
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

/// `a=x, b=y`.
fn wildcards(text: &str) -> BTreeMap<String, String> {
    text.split(", ")
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// `Finished jobid: N (Rule: NAME)`.
fn finished(line: &str) -> Option<(u64, String)> {
    let rest = line.strip_prefix("Finished jobid: ")?;
    let (job, rule) = rest.split_once(" (Rule: ")?;
    Some((job.trim().parse().ok()?, rule.strip_suffix(')')?.to_string()))
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
        while let Some(nl) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=nl).collect();
            let offset = self.line_start;
            self.line_start += line.len() as u64;
            let text = String::from_utf8_lossy(&line[..line.len() - 1]).into_owned();
            self.line(text.trim_end_matches('\r'), offset, &mut out);
        }
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
            Pending::Start { rule, job, wildcards, offset } => {
                if let Some(job) = job {
                    out.push(JobEvent::Started { job, rule, wildcards, offset });
                }
            }
            Pending::Finish { job, rule, offset } => {
                let (done, total) = match next.and_then(progress) {
                    Some((d, t)) => (Some(d), Some(t)),
                    None => (None, None),
                };
                out.push(JobEvent::Finished { job, rule, done, total, offset });
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
            Pending::Start { job, wildcards: w, .. } if indented => {
                if let Some(v) = field(line, "jobid") {
                    *job = v.parse().ok();
                } else if let Some(v) = field(line, "wildcards") {
                    *w = wildcards(v);
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
        if !matches!(self.pending, Pending::None) {
            self.flush(Some(line), out);
        }
        if let Some((done, total)) = progress(line) {
            self.summary.done = Some(done);
            self.summary.total = Some(total);
        } else if let Some(rule) = job_header(line) {
            self.pending = Pending::Start { rule: rule.to_string(), job: None, wildcards: BTreeMap::new(), offset };
        } else if let Some((job, rule)) = finished(line) {
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

    #[test]
    fn jobs_are_read_with_their_wildcards_progress_and_restarts() {
        let mut log = SnakemakeLog::new();
        let mut events = Vec::new();
        // Fed in pieces that cut lines anywhere: the same events.
        for chunk in LOG.as_bytes().chunks(7) {
            events.extend(log.feed(chunk));
        }
        events.extend(log.finish());
        let kinds: Vec<String> = events
            .iter()
            .map(|e| match e {
                JobEvent::Started { job, rule, wildcards, .. } => format!("start {job} {rule} {wildcards:?}"),
                JobEvent::Finished { job, rule, done, total, .. } => format!("end {job} {rule} {done:?}/{total:?}"),
                JobEvent::Failed { job, rule, restarted, .. } => format!("fail {job} {rule} {restarted}"),
            })
            .collect();
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
        assert_eq!(
            log.summary(),
            &Summary { total: Some(4), done: Some(1), failed: 1, failed_rules: vec!["split".into()] }
        );
        // Offsets point at the lines the events were read from, so a re-reader can skip them.
        let start = &LOG[events[0].offset() as usize..];
        assert!(start.starts_with("localrule greet:"), "{start:.20}");
        assert_eq!(log.fed(), LOG.len() as u64);
    }
}
