//! Limits on use, per principal or per workflow: how many runs may be open at once (over it, a
//! submission is refused, or held queued until one ends), how many may wait queued, and how many
//! steps may start in a rolling day. Which limits bind a submission, and what a refusal says, are
//! decided here; the registry counts the use in the transaction that creates the run.

use serde::{Deserialize, Serialize};

/// What a quota limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// Open runs at once (queued ones not counted).
    Runs,
    /// Runs held queued at once, waiting for a `runs` quota in queue mode.
    QueuedRuns,
    /// Steps started (executed, not reused) in the last 24 hours.
    StepsPerDay,
    /// A target's steps running at once (launched there, not yet ended).
    Steps,
}

impl Measure {
    pub const ALL: [Measure; 4] = [Measure::Runs, Measure::QueuedRuns, Measure::StepsPerDay, Measure::Steps];

    pub fn as_str(self) -> &'static str {
        match self {
            Measure::Runs => "runs",
            Measure::QueuedRuns => "queued_runs",
            Measure::StepsPerDay => "steps_per_day",
            Measure::Steps => "steps",
        }
    }

    /// Whether it can limit `subject`: `steps` a target only, the others a principal or a workflow.
    pub fn fits(self, subject: &Subject) -> bool {
        matches!(subject, Subject::Target(_)) == (self == Measure::Steps)
    }

    pub fn parse(s: &str) -> Option<Measure> {
        Measure::ALL.into_iter().find(|m| m.as_str() == s)
    }

    fn words(self, n: u64) -> String {
        match self {
            Measure::Runs => format!("{n} open run(s)"),
            Measure::QueuedRuns => format!("{n} queued run(s)"),
            Measure::StepsPerDay => format!("{n} step(s) started in the last 24 hours"),
            Measure::Steps => format!("{n} step(s) running at once"),
        }
    }
}

/// Whom or what a quota is on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Subject {
    Principal(String),
    Workflow(String),
    Target(String),
}

impl Subject {
    pub fn kind(&self) -> &'static str {
        match self {
            Subject::Principal(_) => "principal",
            Subject::Workflow(_) => "workflow",
            Subject::Target(_) => "target",
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Subject::Principal(n) | Subject::Workflow(n) | Subject::Target(n) => n,
        }
    }

    pub fn of(kind: &str, name: &str) -> Option<Subject> {
        match kind {
            "principal" => Some(Subject::Principal(name.to_string())),
            "workflow" => Some(Subject::Workflow(name.to_string())),
            "target" => Some(Subject::Target(name.to_string())),
            _ => None,
        }
    }
}

impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} `{}`", self.kind(), self.name())
    }
}

/// One limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quota {
    pub subject: Subject,
    pub measure: Measure,
    pub limit: u64,
    /// For `runs`: a submission over it is held queued (until a run ends) instead of refused.
    pub queue: bool,
    pub updated_at: i64,
}

impl Quota {
    /// `principal `alice`: 2 open run(s)`.
    pub fn describe(&self) -> String {
        let mode = if self.queue { ", queued over it" } else { "" };
        format!("{}: at most {}{mode}", self.subject, self.measure.words(self.limit))
    }
}

/// The quotas that bind a submission by `principal` of `workflow`, each with its index in
/// `quotas`.
pub fn binding<'a>(quotas: &'a [Quota], principal: &str, workflow: &str) -> Vec<(usize, &'a Quota)> {
    quotas
        .iter()
        .enumerate()
        .filter(|(_, q)| match &q.subject {
            Subject::Principal(p) => p == principal,
            Subject::Workflow(w) => w == workflow,
            // A target's limit binds its steps as they launch, not a submission.
            Subject::Target(_) => false,
        })
        .collect()
}

/// A limit the registry checks in the transaction that creates a run: open runs (or queued
/// ones) whose `column` is `value`, at most `limit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunLimit {
    /// The quota's index, to name it in a refusal.
    pub quota: usize,
    pub subject: Subject,
    pub measure: Measure,
    pub limit: u64,
    pub queue: bool,
}

/// What the registry checks when it creates a run: over a `runs` limit in refuse mode, or over a
/// `queued_runs` limit when it would be held, nothing is created; over a `runs` limit in queue
/// mode, the run is created held.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Admission {
    pub limits: Vec<RunLimit>,
}

impl Admission {
    /// The run limits among `binding` (the per-day ones are the engine's to check).
    pub fn of(binding: &[(usize, &Quota)]) -> Admission {
        Admission {
            limits: binding
                .iter()
                .filter(|(_, q)| q.measure != Measure::StepsPerDay)
                .map(|(i, q)| RunLimit {
                    quota: *i,
                    subject: q.subject.clone(),
                    measure: q.measure,
                    limit: q.limit,
                    queue: q.queue,
                })
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.limits.is_empty()
    }
}

/// Why a submission was refused: the quota, its use, and when it frees.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("over the quota of {}: {} in use; {}", quota.describe(), quota.measure.words(*used), frees_words(quota, *frees_at))]
pub struct Exceeded {
    pub quota: Quota,
    pub used: u64,
    /// When a unit frees (the oldest step of the day leaves the window); `None` when it frees
    /// as a run ends.
    pub frees_at: Option<i64>,
}

fn frees_words(q: &Quota, frees_at: Option<i64>) -> String {
    match (q.measure, frees_at) {
        (Measure::StepsPerDay, Some(at)) => format!(
            "it frees as the day's oldest step leaves the 24-hour window (at {at} ms since the epoch); an admin can raise it with `cairn quota set`"
        ),
        (Measure::QueuedRuns, _) => "it frees as a queued run starts or is cancelled".into(),
        _ => {
            let whose = match &q.subject {
                Subject::Principal(p) => format!("{p}'s open runs"),
                Subject::Workflow(w) => format!("the open runs of workflow `{w}`"),
                Subject::Target(t) => format!("the steps running on target `{t}`"),
            };
            format!(
                "it frees when one of {whose} ends (cancel one with `cairn cancel`), or an admin can raise it with `cairn quota set`"
            )
        }
    }
}

/// Why a created run waits: the `runs` quota in queue mode that holds it.
pub fn held_reason(q: &Quota, used: u64) -> String {
    format!("queued behind {used} open run(s), at the quota of {}; it starts when one of them ends", q.describe())
}

/// Why a step waits before it launches on a target: the target's `steps` quota is full.
pub fn slot_reason(q: &Quota, used: u64) -> String {
    format!("waits for a place on {}: {used} step(s) run there, at its quota of {}", q.subject, q.limit)
}

/// The rolling window of `steps_per_day`.
pub const DAY_MS: i64 = 86_400_000;

/// Checks a day's steps against a `steps_per_day` quota: `oldest` is the start of the oldest step
/// counted.
pub fn check_day(q: &Quota, used: u64, oldest: Option<i64>) -> Result<(), Exceeded> {
    if used < q.limit {
        return Ok(());
    }
    Err(Exceeded { quota: q.clone(), used, frees_at: oldest.map(|t| t + DAY_MS) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(subject: Subject, measure: Measure, limit: u64, queue: bool) -> Quota {
        Quota { subject, measure, limit, queue, updated_at: 0 }
    }

    #[test]
    fn the_binding_quotas_are_the_principals_and_the_workflows() {
        let all = vec![
            q(Subject::Principal("alice".into()), Measure::Runs, 2, false),
            q(Subject::Principal("bob".into()), Measure::Runs, 1, false),
            q(Subject::Workflow("rnaseq".into()), Measure::StepsPerDay, 100, false),
            q(Subject::Workflow("rnaseq".into()), Measure::Runs, 3, true),
            q(Subject::Target("hpc".into()), Measure::Steps, 4, false),
        ];
        let b = binding(&all, "alice", "rnaseq");
        assert_eq!(b.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [0, 2, 3]);
        let a = Admission::of(&b);
        assert_eq!(a.limits.iter().map(|l| l.quota).collect::<Vec<_>>(), [0, 3], "per-day limits are not the store's");
        assert!(binding(&all, "carol", "other").is_empty());
    }

    #[test]
    fn refusals_say_the_quota_its_use_and_when_it_frees() {
        let runs = q(Subject::Principal("alice".into()), Measure::Runs, 2, false);
        let e = Exceeded { quota: runs, used: 2, frees_at: None };
        let text = e.to_string();
        assert!(text.contains("principal `alice`: at most 2 open run(s)"), "{text}");
        assert!(text.contains("2 open run(s) in use") && text.contains("when one of alice's open runs ends"), "{text}");
        let day = q(Subject::Workflow("w".into()), Measure::StepsPerDay, 10, false);
        assert!(check_day(&day, 9, Some(5)).is_ok());
        let e = check_day(&day, 10, Some(5)).unwrap_err();
        assert_eq!(e.frees_at, Some(5 + DAY_MS));
        assert!(e.to_string().contains("24-hour window"), "{e}");
        assert_eq!(Measure::parse("queued_runs"), Some(Measure::QueuedRuns));
        assert_eq!(Subject::of("workflow", "w"), Some(Subject::Workflow("w".into())));
        assert_eq!(Subject::of("target", "t"), Some(Subject::Target("t".into())));
        assert_eq!(Subject::of("host", "t"), None);
        assert!(Measure::Steps.fits(&Subject::Target("t".into())));
        assert!(!Measure::Steps.fits(&Subject::Principal("p".into())));
        assert!(!Measure::Runs.fits(&Subject::Target("t".into())));
    }
}
