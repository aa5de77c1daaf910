//! Where a run's time went: every attempt of every step as a span on the run's time axis, read
//! from its event log alone (so a run in progress, a replay child's reused steps and a resumed
//! attempt all read the same way). `cairn show --timeline`, `GET /runs/{id}/timeline` and the web
//! app's Gantt draw these spans.

use std::collections::HashMap;

use crate::event::RunEvent;
use crate::store::EventRecord;

/// How an attempt's span ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanEnd {
    Completed,
    Failed,
    /// Ended with a retryable outcome; the next attempt follows.
    Retrying,
    /// Abandoned (a crash, or a controller killed from outside); the next attempt resumes it.
    Interrupted,
    Cancelled,
    /// Still running when the log was read.
    Running,
    /// Not executed here: a replay child reused the source's evidence (a point, not a span).
    Reused,
}

impl SpanEnd {
    pub fn as_str(self) -> &'static str {
        match self {
            SpanEnd::Completed => "completed",
            SpanEnd::Failed => "failed",
            SpanEnd::Retrying => "retrying",
            SpanEnd::Interrupted => "interrupted",
            SpanEnd::Cancelled => "cancelled",
            SpanEnd::Running => "running",
            SpanEnd::Reused => "reused",
        }
    }
}

/// One attempt on the run's time axis. Times are milliseconds since the run was created.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptSpan {
    pub step_id: String,
    /// 0 for a reused step (no attempt ran in this run).
    pub attempt: u32,
    pub start_ms: i64,
    /// `None` while it runs.
    pub end_ms: Option<i64>,
    pub end: SpanEnd,
    /// The tool's own time as the attempt recorded it (finer than the events' milliseconds).
    pub duration_us: Option<i64>,
}

/// A run's attempts in the order they started (ties: the log's order).
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    /// When the run was created (epoch milliseconds): the axis's 0.
    pub origin_ms: i64,
    /// When it finished, on the axis; `None` while it runs.
    pub finished_ms: Option<i64>,
    pub spans: Vec<AttemptSpan>,
}

impl Timeline {
    /// The axis's length: the end of the run, or of its last span so far.
    pub fn length_ms(&self) -> i64 {
        let last = self.spans.iter().map(|s| s.end_ms.unwrap_or(s.start_ms)).max().unwrap_or(0);
        self.finished_ms.unwrap_or(0).max(last)
    }
}

/// The timeline of a run from its events (in `seq` order, as the store returns them).
pub fn timeline(events: &[EventRecord]) -> Timeline {
    let origin_ms = events
        .iter()
        .find(|e| matches!(e.event, RunEvent::RunCreated { .. }))
        .or(events.first())
        .map(|e| e.at)
        .unwrap_or(0);
    let mut spans: Vec<AttemptSpan> = Vec::new();
    // Indexes into `spans`, so a run of any size is read in one pass: every attempt's span by
    // (step, attempt), and each step's open spans, newest last.
    let mut known: HashMap<(&str, u32), usize> = HashMap::new();
    let mut open: HashMap<&str, Vec<usize>> = HashMap::new();
    let mut finished_ms = None;
    for e in events {
        let at = e.at - origin_ms;
        let (Some(step), attempt) = (e.step_id.as_deref(), e.attempt.unwrap_or(0)) else {
            if let RunEvent::RunFinished { .. } = e.event {
                finished_ms = Some(at);
            }
            continue;
        };
        let (end, duration_us) = match &e.event {
            RunEvent::StepStarted { .. } => {
                if let std::collections::hash_map::Entry::Vacant(slot) = known.entry((step, attempt)) {
                    slot.insert(spans.len());
                    open.entry(step).or_default().push(spans.len());
                    spans.push(AttemptSpan {
                        step_id: step.to_string(),
                        attempt,
                        start_ms: at,
                        end_ms: None,
                        end: SpanEnd::Running,
                        duration_us: None,
                    });
                }
                continue;
            }
            RunEvent::StepReplayReused { .. } => {
                spans.push(AttemptSpan {
                    step_id: step.to_string(),
                    attempt: 0,
                    start_ms: at,
                    end_ms: Some(at),
                    end: SpanEnd::Reused,
                    duration_us: None,
                });
                continue;
            }
            RunEvent::StepCompleted { duration_us } => (SpanEnd::Completed, Some(*duration_us)),
            RunEvent::StepFailed { duration_us, .. } => (SpanEnd::Failed, Some(*duration_us)),
            RunEvent::StepRetrying { .. } => (SpanEnd::Retrying, None),
            RunEvent::StepInterrupted { .. } => (SpanEnd::Interrupted, None),
            RunEvent::StepCancelled { .. } => (SpanEnd::Cancelled, None),
            _ => continue,
        };
        // The open span of that attempt (a cancel names the step's current attempt).
        let Some(open) = open.get_mut(step) else { continue };
        if let Some(k) = open.iter().rposition(|&i| spans[i].attempt == attempt || attempt == 0) {
            let span = &mut spans[open.remove(k)];
            span.end_ms = Some(at);
            span.end = end;
            span.duration_us = duration_us;
        }
    }
    spans.sort_by_key(|s| s.start_ms);
    Timeline { origin_ms, finished_ms, spans }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{Outcome, RunStatus};

    fn ev(seq: i64, step: Option<&str>, attempt: Option<u32>, at: i64, event: RunEvent) -> EventRecord {
        EventRecord {
            seq,
            run_id: crate::ids::RunId::lookup("r"),
            step_id: step.map(str::to_string),
            attempt,
            at,
            event,
        }
    }

    fn started() -> RunEvent {
        RunEvent::StepStarted { tool: "t".into(), tool_digest: "d".into(), args_hash: "h".into() }
    }

    #[test]
    fn attempts_overlap_retry_resume_and_reuse_on_one_axis() {
        let created = RunEvent::RunCreated {
            workflow: "w".into(),
            version: "1.0.0".into(),
            identity_hash: "i".into(),
            source_run_id: Some("src".into()),
            plan: None,
        };
        let events = vec![
            ev(1, None, None, 1000, created),
            ev(
                2,
                Some("a"),
                None,
                1001,
                RunEvent::StepReplayReused {
                    source_run_id: "src".into(),
                    origin_run_id: "src".into(),
                    args_hash: "h".into(),
                },
            ),
            ev(3, Some("b"), Some(1), 1002, started()),
            ev(4, Some("c"), Some(1), 1003, started()),
            ev(
                5,
                Some("b"),
                Some(1),
                1010,
                RunEvent::StepRetrying {
                    outcome: Outcome::TimedOut,
                    error: None,
                    next_attempt: 2,
                    cause: None,
                    delay_ms: 0,
                },
            ),
            ev(6, Some("b"), Some(2), 1011, started()),
            ev(
                7,
                Some("c"),
                Some(1),
                1020,
                RunEvent::StepInterrupted { abandoned_token: "t".into(), next_attempt: 2, why: None },
            ),
            ev(8, Some("c"), Some(2), 1021, started()),
            ev(9, Some("b"), Some(2), 1030, RunEvent::StepCompleted { duration_us: 18_500 }),
            ev(
                10,
                Some("c"),
                Some(2),
                1040,
                RunEvent::StepFailed {
                    outcome: Outcome::Failed,
                    error: Some("exit 1".into()),
                    duration_us: 19_000,
                    cause: None,
                },
            ),
            ev(11, None, None, 1041, RunEvent::RunFinished { status: RunStatus::Failed, findings: 0, error: None }),
        ];
        let t = timeline(&events);
        assert_eq!((t.origin_ms, t.finished_ms, t.length_ms()), (1000, Some(41), 41));
        let got: Vec<(&str, u32, i64, Option<i64>, &str)> =
            t.spans.iter().map(|s| (s.step_id.as_str(), s.attempt, s.start_ms, s.end_ms, s.end.as_str())).collect();
        assert_eq!(
            got,
            [
                ("a", 0, 1, Some(1), "reused"),
                ("b", 1, 2, Some(10), "retrying"),
                ("c", 1, 3, Some(20), "interrupted"),
                ("b", 2, 11, Some(30), "completed"),
                ("c", 2, 21, Some(40), "failed"),
            ]
        );
        assert_eq!(t.spans[3].duration_us, Some(18_500));
    }

    #[test]
    fn a_running_attempt_is_open_and_the_axis_ends_at_the_last_start() {
        let events = vec![ev(1, Some("a"), Some(1), 50, started())];
        let t = timeline(&events);
        assert_eq!((t.origin_ms, t.finished_ms, t.length_ms()), (50, None, 0));
        assert_eq!((t.spans[0].end, t.spans[0].end_ms), (SpanEnd::Running, None));
        assert_eq!(timeline(&[]).spans, []);
    }
}
