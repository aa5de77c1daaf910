//! What `cairn doctor` reports, and the part of it that is a pure decision: what the facts of the
//! event log say is wrong. The engine gathers the facts (the registry's own integrity check, the
//! event log's numbering and each run's shape, every recorded artifact's bytes, the run
//! directories) and changes nothing; each problem is one [`Finding`] naming its check, the thing
//! (a run, a file, a folder) and a sentence saying what is wrong and what to do.

use serde::{Deserialize, Serialize};

use crate::status::RunStatus;

/// One check of the registry and the state root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckName {
    /// The database's own integrity check (SQLite's `PRAGMA integrity_check` and foreign keys).
    Database,
    /// The event log: numbered without a hole, each run's history whole.
    EventLog,
    /// Every recorded artifact still holds its recorded bytes.
    Artifacts,
    /// Every folder in the state root's `runs/` belongs to a run.
    RunDirs,
}

impl CheckName {
    pub const ALL: [CheckName; 4] =
        [CheckName::Database, CheckName::EventLog, CheckName::Artifacts, CheckName::RunDirs];

    pub fn as_str(self) -> &'static str {
        match self {
            CheckName::Database => "database",
            CheckName::EventLog => "event_log",
            CheckName::Artifacts => "artifacts",
            CheckName::RunDirs => "run_dirs",
        }
    }
}

/// How bad a finding is. Either way it is a finding: `cairn doctor` exits 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Evidence is damaged or missing: a record, an event, an artifact's bytes.
    Error,
    /// Nothing recorded is damaged, but something does not add up (a folder without a run).
    Warning,
}

/// One problem found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub check: CheckName,
    pub severity: Severity,
    /// The run it concerns, if one.
    pub run_id: Option<String>,
    /// The file or folder it concerns (absolute), if one.
    pub path: Option<String>,
    /// What is wrong and what to do, in a sentence.
    pub message: String,
}

impl Finding {
    pub fn error(check: CheckName, message: impl Into<String>) -> Finding {
        Finding { check, severity: Severity::Error, run_id: None, path: None, message: message.into() }
    }

    pub fn warning(check: CheckName, message: impl Into<String>) -> Finding {
        Finding { severity: Severity::Warning, ..Finding::error(check, message) }
    }

    pub fn run(mut self, run_id: impl Into<String>) -> Finding {
        self.run_id = Some(run_id.into());
        self
    }

    pub fn path(mut self, path: impl Into<String>) -> Finding {
        self.path = Some(path.into());
        self
    }
}

/// How one check went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    /// Ran, and found nothing.
    Passed,
    /// Ran, and found something (its findings say what).
    Failed,
    /// Does not apply to this registry (its summary says why): nothing was checked.
    NotApplicable,
}

/// One check's outcome: how it went, how many things it examined, and a line saying what it did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckOutcome {
    pub check: CheckName,
    pub status: CheckStatus,
    pub examined: u64,
    pub summary: String,
}

/// What the database's own integrity check said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Integrity {
    /// The check ran: `problems` is what it reported (empty: nothing), `checked` what it ran.
    Checked { checked: String, problems: Vec<String> },
    /// This database has no check Cairn can run (why, in words); `reached` says what was
    /// confirmed instead (it answers, its schema version).
    NotApplicable { why: String, reached: String },
}

/// One run's history as the event log holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEventFacts {
    pub run_id: String,
    pub status: RunStatus,
    pub events: u64,
    /// The kind of its first event (`run.created` for every run).
    pub first_kind: Option<String>,
    /// How many `run.finished` events it has (one for a finished run, none for an open one).
    pub finished_events: u64,
}

/// A hole in the event log's numbering: events `from..=to` are gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeqGap {
    pub from: i64,
    pub to: i64,
    /// The runs of the events on either side of the hole, when there are events there.
    pub before_run: Option<String>,
    pub after_run: Option<String>,
}

/// What the event log holds, for [`judge_event_log`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EventLogFacts {
    pub events: u64,
    pub runs: Vec<RunEventFacts>,
    /// Completed steps without the event that records their completion (`step.completed`, or
    /// `step.replay_reused` for a step a replay reused): `(run_id, step_id)`.
    pub completed_without_event: Vec<(String, String)>,
    /// The holes in the numbering; `None` where the database's numbers may skip by design
    /// (PostgreSQL's identity columns skip the numbers of rolled-back transactions).
    pub gaps: Option<Vec<SeqGap>>,
}

const RESTORE: &str = "restore the registry from a backup taken before (cairn backup), or keep this run's record as it is and do not rely on its history";

/// The findings the event log's facts make: a hole in the numbering, a run that does not start
/// with `run.created`, a finished run without its `run.finished` (or an open one with one), a
/// completed step without its completion event.
pub fn judge_event_log(facts: &EventLogFacts) -> Vec<Finding> {
    let mut out = Vec::new();
    for gap in facts.gaps.iter().flatten() {
        let which = if gap.from == gap.to {
            format!("event {} is missing", gap.from)
        } else {
            format!("events {} to {} are missing", gap.from, gap.to)
        };
        let around = match (&gap.before_run, &gap.after_run) {
            (Some(a), Some(b)) if a == b => format!(" (between two events of run `{a}`)"),
            (Some(a), Some(b)) => format!(" (between an event of run `{a}` and one of run `{b}`)"),
            (Some(a), None) => format!(" (after the last event left, of run `{a}`)"),
            (None, Some(b)) => format!(" (before the first event left, of run `{b}`)"),
            (None, None) => String::new(),
        };
        let mut f = Finding::error(
            CheckName::EventLog,
            format!(
                "{which} from the event log{around}: events are append-only, so a row was deleted behind Cairn's back; {RESTORE}"
            ),
        );
        if let Some(run) = gap.before_run.as_ref().filter(|r| Some(*r) == gap.after_run.as_ref()) {
            f = f.run(run.clone());
        }
        out.push(f);
    }
    for run in &facts.runs {
        out.extend(judge_run(run));
    }
    for (run_id, step_id) in &facts.completed_without_event {
        out.push(
            Finding::error(
                CheckName::EventLog,
                format!(
                    "step `{step_id}` of run `{run_id}` is COMPLETED but its completion event is missing from the log; {RESTORE}"
                ),
            )
            .run(run_id.clone()),
        );
    }
    out
}

fn judge_run(run: &RunEventFacts) -> Vec<Finding> {
    let mut out = Vec::new();
    let id = &run.run_id;
    let finding = |message: String| Finding::error(CheckName::EventLog, message).run(id.clone());
    match run.first_kind.as_deref() {
        None => out
            .push(finding(format!("run `{id}` has no events at all (every run starts with `run.created`); {RESTORE}"))),
        Some("run.created") => {}
        Some(other) => out.push(finding(format!(
            "run `{id}`'s first event is `{other}`, not `run.created`: the start of its history is missing; {RESTORE}"
        ))),
    }
    let terminal = run.status.is_terminal();
    match (terminal, run.finished_events) {
        (true, 0) => out
            .push(finding(format!("run `{id}` is {} but its `run.finished` event is missing; {RESTORE}", run.status))),
        (false, n) if n > 0 => out.push(finding(format!(
            "run `{id}` is {} yet its log has a `run.finished` event: its record and its history disagree; {RESTORE}",
            run.status
        ))),
        (true, n) if n > 1 => {
            out.push(finding(format!("run `{id}` has {n} `run.finished` events, where a run finishes once; {RESTORE}")))
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str, status: RunStatus, first: Option<&str>, finished: u64) -> RunEventFacts {
        RunEventFacts {
            run_id: id.into(),
            status,
            events: 3,
            first_kind: first.map(String::from),
            finished_events: finished,
        }
    }

    #[test]
    fn a_whole_log_has_no_findings() {
        let facts = EventLogFacts {
            events: 6,
            runs: vec![
                run("a", RunStatus::Ready, Some("run.created"), 1),
                run("b", RunStatus::Running, Some("run.created"), 0),
            ],
            completed_without_event: vec![],
            gaps: Some(vec![]),
        };
        assert_eq!(judge_event_log(&facts), vec![]);
    }

    #[test]
    fn each_hole_and_broken_run_is_one_finding_naming_it() {
        let facts = EventLogFacts {
            events: 9,
            runs: vec![
                run("a", RunStatus::Ready, Some("run.created"), 0),
                run("b", RunStatus::Running, Some("step.started"), 1),
                run("c", RunStatus::Failed, None, 2),
            ],
            completed_without_event: vec![("a".into(), "s1".into())],
            gaps: Some(vec![
                SeqGap { from: 4, to: 4, before_run: Some("a".into()), after_run: Some("a".into()) },
                SeqGap { from: 7, to: 8, before_run: Some("a".into()), after_run: Some("b".into()) },
            ]),
        };
        let found = judge_event_log(&facts);
        let texts: Vec<&str> = found.iter().map(|f| f.message.as_str()).collect();
        assert!(texts[0].starts_with("event 4 is missing") && texts[0].contains("run `a`"), "{texts:?}");
        assert_eq!(found[0].run_id.as_deref(), Some("a"));
        assert!(texts[1].starts_with("events 7 to 8 are missing"), "{texts:?}");
        assert_eq!(found[1].run_id, None);
        assert!(texts[2].contains("READY but its `run.finished` event is missing"), "{texts:?}");
        assert!(texts[3].contains("first event is `step.started`"), "{texts:?}");
        assert!(texts[4].contains("RUNNING yet its log has a `run.finished`"), "{texts:?}");
        assert!(texts[5].contains("no events at all"), "{texts:?}");
        assert!(texts[6].contains("2 `run.finished` events"), "{texts:?}");
        assert!(texts[7].contains("step `s1` of run `a` is COMPLETED"), "{texts:?}");
        assert_eq!(found.len(), 8);
        assert!(found.iter().all(|f| f.check == CheckName::EventLog && f.severity == Severity::Error));
    }

    #[test]
    fn a_log_whose_numbers_may_skip_is_judged_by_its_runs_alone() {
        let facts = EventLogFacts {
            events: 3,
            runs: vec![run("a", RunStatus::Ready, Some("run.created"), 1)],
            completed_without_event: vec![],
            gaps: None,
        };
        assert!(judge_event_log(&facts).is_empty());
    }
}
