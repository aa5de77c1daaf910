//! Live progress on a terminal: which step runs, its attempt and elapsed time (on stderr).

use std::time::Duration;

use cairn_core::status::Outcome;
use cairn_engine::runner::Observer;
use indicatif::{ProgressBar, ProgressStyle};

#[derive(Default)]
pub struct TerminalProgress {
    bar: Option<ProgressBar>,
}

impl Observer for TerminalProgress {
    fn run_started(&mut self, run_id: &str, total: usize) {
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
            bar.println(format!("  {step_id:<28} {outcome:<12} attempt {attempt}  {} ms", duration.as_millis()));
            if outcome == Outcome::Completed {
                bar.inc(1);
            }
        }
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
