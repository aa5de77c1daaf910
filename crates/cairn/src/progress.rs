//! Live progress on a terminal: which step runs, its attempt and elapsed time (on stderr).

use std::time::Duration;

use cairn_core::pipeline::JobEvent;
use cairn_core::status::Outcome;
use cairn_engine::runner::Observer;
use indicatif::{ProgressBar, ProgressStyle};

use crate::output::human_duration;

#[derive(Default)]
pub struct TerminalProgress {
    bar: Option<ProgressBar>,
    /// A pipeline step's jobs: how many are done, of how many, and which run now.
    jobs: Option<(u64, Option<u64>, Vec<String>)>,
}

impl Observer for TerminalProgress {
    fn run_started(&mut self, run_id: &cairn_core::ids::RunId, total: usize) {
        let bar = ProgressBar::new(total as u64);
        let style = ProgressStyle::with_template("{spinner} [{pos}/{len}] {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
        bar.set_style(style);
        bar.enable_steady_tick(Duration::from_millis(100));
        bar.println(format!("run {run_id}"));
        self.bar = Some(bar);
    }

    fn step_started(&mut self, step_id: &str, attempt: u32) {
        if let Some(bar) = &self.bar {
            let suffix = if attempt > 1 { format!(" (attempt {attempt})") } else { String::new() };
            bar.set_message(format!("{step_id}{suffix}"));
        }
    }

    fn step_finished(&mut self, step_id: &str, outcome: Outcome, attempt: u32, duration: Duration) {
        if let Some(bar) = &self.bar {
            bar.println(format!("  {step_id:<28} {outcome:<12} attempt {attempt}  {}", human_duration(duration)));
            if outcome == Outcome::Completed {
                bar.inc(1);
            }
        }
    }

    fn pipeline_job(&mut self, step_id: &str, job: &JobEvent) {
        let Some(bar) = &self.bar else { return };
        let (done, total, running) = self.jobs.get_or_insert_with(|| (0, None, Vec::new()));
        match job {
            JobEvent::Started { rule, wildcards, .. } => {
                let w: Vec<String> = wildcards.iter().map(|(k, v)| format!("{k}={v}")).collect();
                running.push(if w.is_empty() { rule.clone() } else { format!("{rule} {}", w.join(" ")) });
            }
            JobEvent::Finished { rule, done: d, total: t, .. } => {
                *done = d.unwrap_or(*done + 1);
                if t.is_some() {
                    *total = *t;
                }
                if let Some(i) = running.iter().position(|r| r == rule || r.starts_with(&format!("{rule} "))) {
                    running.remove(i);
                }
            }
            JobEvent::Failed { rule, restarted, .. } => {
                let again = if *restarted { ", restarting it" } else { "" };
                bar.println(format!("  {step_id:<28} job of rule {rule} failed{again}"));
            }
        }
        let of = total.map(|t| format!(" of {t}")).unwrap_or_default();
        let now = running.last().map(|r| format!(", running {r}")).unwrap_or_default();
        bar.set_message(format!("{step_id}: {done}{of} jobs{now}"));
    }

    fn step_skipped(&mut self, step_id: &str, why: &str) {
        if let Some(bar) = &self.bar {
            bar.println(format!("  {step_id:<28} skipped: {why}"));
            bar.inc(1);
        }
    }
}

impl Drop for TerminalProgress {
    fn drop(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}
