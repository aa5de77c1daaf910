//! How far a run has come, folded from its events: steps ended of all its steps, and for a
//! running pipeline step its jobs done of total. What an MCP client is told as progress while it
//! waits on a run.

use std::collections::BTreeMap;

use crate::event::RunEvent;

/// A run's progress, fed its events in order. It holds the steps running now, not every step
/// seen: following a 100,000-step run costs what following a small one does.
#[derive(Debug, Clone, Default)]
pub struct RunProgress {
    /// How many steps the run has.
    total: usize,
    /// How many have ended (completed, failed or reused): a step ends once in a run.
    ended: usize,
    /// The steps running now, in the order they started.
    running: Vec<String>,
    /// Per running pipeline step: its jobs done and total, from its newest `pipeline.job_finished`.
    jobs: BTreeMap<String, (u64, u64)>,
}

/// The most running steps a progress message names.
const RUNNING_NAMED: usize = 5;

/// What to report: `done` of `total` (steps; a running pipeline step adds the fraction of its
/// jobs done), and the sentence to show a person.
#[derive(Debug, Clone, PartialEq)]
pub struct Fraction {
    pub done: f64,
    pub total: f64,
    pub message: String,
}

impl RunProgress {
    /// The progress of a run of `total` steps, before any event.
    pub fn new(total: usize) -> RunProgress {
        RunProgress { total, ..RunProgress::default() }
    }

    /// Takes in one event of step `step` (`None` for the run's own events).
    pub fn feed(&mut self, step: Option<&str>, event: &RunEvent) {
        let Some(step) = step else { return };
        match event {
            RunEvent::StepStarted { .. } | RunEvent::StepRetrying { .. } | RunEvent::StepInterrupted { .. }
                if !self.running.iter().any(|s| s == step) =>
            {
                self.running.push(step.to_string());
            }
            RunEvent::StepCompleted { .. } | RunEvent::StepFailed { .. } | RunEvent::StepReplayReused { .. } => {
                self.running.retain(|s| s != step);
                self.jobs.remove(step);
                self.ended += 1;
            }
            RunEvent::PipelineJobFinished { done: Some(done), total: Some(total), .. } => {
                self.jobs.insert(step.to_string(), (*done, *total));
            }
            _ => {}
        }
    }

    /// Steps ended plus the fraction of the pipeline jobs of those running, of the steps; and
    /// what to tell the person.
    pub fn fraction(&self) -> Fraction {
        let total = self.total.max(self.ended);
        let mut done = self.ended as f64;
        let mut message = format!("{} of {total} steps done", self.ended);
        for id in &self.running {
            if let Some(&(jobs_done, jobs)) = self.jobs.get(id)
                && jobs > 0
            {
                done += (jobs_done.min(jobs) as f64) / (jobs as f64) * 0.99;
            }
        }
        for id in self.running.iter().take(RUNNING_NAMED) {
            match self.jobs.get(id) {
                Some(&(jobs_done, jobs)) if jobs > 0 => {
                    message.push_str(&format!("; {id}: {jobs_done} of {jobs} pipeline jobs done"))
                }
                _ => message.push_str(&format!("; {id} running")),
            }
        }
        if self.running.len() > RUNNING_NAMED {
            message.push_str(&format!("; {} more running", self.running.len() - RUNNING_NAMED));
        }
        Fraction { done, total: total as f64, message }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::Outcome;

    fn started() -> RunEvent {
        RunEvent::StepStarted { tool: "t".into(), tool_digest: "d".into(), args_hash: "h".into() }
    }

    fn job_finished(done: u64, total: u64) -> RunEvent {
        RunEvent::PipelineJobFinished {
            job: done,
            rule: "r".into(),
            done: Some(done),
            total: Some(total),
            offset: 0,
            files: Vec::new(),
        }
    }

    #[test]
    fn steps_ended_and_a_running_pipeline_s_jobs_make_the_fraction() {
        let mut p = RunProgress::new(3);
        assert_eq!(p.fraction().message, "0 of 3 steps done");
        p.feed(Some("a"), &started());
        p.feed(Some("a"), &RunEvent::StepCompleted { duration_us: 1 });
        p.feed(Some("calling"), &started());
        assert_eq!(p.fraction().message, "1 of 3 steps done; calling running");
        p.feed(Some("calling"), &job_finished(2, 4));
        let f = p.fraction();
        assert_eq!(f.message, "1 of 3 steps done; calling: 2 of 4 pipeline jobs done");
        assert!((f.done - (1.0 + 0.5 * 0.99)).abs() < 1e-9, "{f:?}");
        assert_eq!(f.total, 3.0);
    }

    #[test]
    fn a_retried_step_runs_again_and_a_failed_or_reused_one_has_ended() {
        let mut p = RunProgress::new(2);
        p.feed(Some("a"), &started());
        p.feed(
            Some("a"),
            &RunEvent::StepRetrying {
                outcome: Outcome::TimedOut,
                error: None,
                next_attempt: 2,
                cause: None,
                delay_ms: 0,
            },
        );
        assert_eq!(p.fraction().message, "0 of 2 steps done; a running");
        p.feed(
            Some("a"),
            &RunEvent::StepFailed { outcome: Outcome::TimedOut, error: None, duration_us: 1, cause: None },
        );
        p.feed(
            Some("b"),
            &RunEvent::StepReplayReused { source_run_id: "S".into(), origin_run_id: "S".into(), args_hash: "h".into() },
        );
        assert_eq!(p.fraction().message, "2 of 2 steps done");
        p.feed(None, &RunEvent::StepCompleted { duration_us: 1 });
        assert_eq!(p.fraction().done, 2.0);
    }

    #[test]
    fn many_running_steps_are_named_five_at_a_time() {
        let mut p = RunProgress::new(100_000);
        for i in 0..8 {
            p.feed(Some(&format!("s{i}")), &started());
        }
        p.feed(Some("s0"), &RunEvent::StepCompleted { duration_us: 1 });
        assert_eq!(
            p.fraction().message,
            "1 of 100000 steps done; s1 running; s2 running; s3 running; s4 running; s5 running; 2 more running"
        );
    }
}
