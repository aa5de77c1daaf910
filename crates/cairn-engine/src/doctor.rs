//! `cairn doctor`: checks the registry and the state root and says what it found, changing
//! nothing. Four checks, each a [`CheckOutcome`] and its [`Finding`]s: the database's own
//! integrity check, the event log (`cairn_core::doctor::judge_event_log` decides), every recorded
//! artifact's bytes against its SHA-256 (streamed; a link recorded as a link is checked as one,
//! never followed), and the folders of `runs/` that belong to no run.
//!
//! **Invariant:** the doctor only reads: every query runs on the store's follower connection
//! (SQLite's read-only one), files are opened to be read, and nothing is removed or repaired, so
//! it runs beside a working daemon.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use cairn_core::doctor::{CheckName, CheckOutcome, CheckStatus, Finding, Integrity, judge_event_log};
use cairn_core::replay::Found;
use cairn_core::store::{RecordedFile, StoreError};

use crate::{Engine, RegistryPlace};

/// What `cairn doctor` found.
#[derive(Debug, Clone)]
pub struct DoctorReport {
    pub state_root: PathBuf,
    /// The registry, as a person is told (the SQLite file, or the URL without its password).
    pub registry: String,
    /// One per check, in [`CheckName::ALL`]'s order.
    pub checks: Vec<CheckOutcome>,
    /// Every problem, by check.
    pub findings: Vec<Finding>,
}

impl DoctorReport {
    /// Nothing found: every check passed or does not apply.
    pub fn healthy(&self) -> bool {
        self.findings.is_empty()
    }
}

/// What a check gives: its outcome and its findings.
type Checked = (CheckOutcome, Vec<Finding>);

fn outcome(check: CheckName, examined: u64, findings: &[Finding], summary: String) -> CheckOutcome {
    let status = if findings.is_empty() { CheckStatus::Passed } else { CheckStatus::Failed };
    CheckOutcome { check, status, examined, summary }
}

/// A check the registry could not answer is itself a finding (a damaged database often is).
fn unanswered(check: CheckName, e: &StoreError) -> Checked {
    let finding = Finding::error(
        check,
        format!(
            "the registry could not answer this check: {e}; run `cairn doctor` again once the daemon is idle, and if \
             it fails the same way, restore the registry from a backup (cairn backup)"
        ),
    );
    (outcome(check, 0, std::slice::from_ref(&finding), "could not be checked".into()), vec![finding])
}

impl Engine {
    /// Checks the registry and the state root, changing nothing.
    pub fn doctor(&self) -> DoctorReport {
        let checked =
            [self.doctor_database(), self.doctor_event_log(), self.doctor_artifacts(), self.doctor_run_dirs()];
        let mut checks = Vec::new();
        let mut findings = Vec::new();
        for (outcome, found) in checked {
            checks.push(outcome);
            findings.extend(found);
        }
        let registry = match &self.registry {
            RegistryPlace::Sqlite { path } => path.display().to_string(),
            RegistryPlace::Postgres { url } => url.clone(),
        };
        DoctorReport { state_root: self.state.path().to_path_buf(), registry, checks, findings }
    }

    fn doctor_database(&self) -> Checked {
        let check = CheckName::Database;
        match self.store.integrity() {
            Err(e) => unanswered(check, &e),
            Ok(Integrity::NotApplicable { why, reached }) => {
                let summary = format!("not applicable: {why}; checked that {reached}");
                (CheckOutcome { check, status: CheckStatus::NotApplicable, examined: 0, summary }, Vec::new())
            }
            Ok(Integrity::Checked { checked, problems }) => {
                let path = match &self.registry {
                    RegistryPlace::Sqlite { path } => path.display().to_string(),
                    RegistryPlace::Postgres { url } => url.clone(),
                };
                let findings: Vec<Finding> = problems
                    .iter()
                    .map(|p| {
                        Finding::error(
                            check,
                            format!(
                                "the registry fails its integrity check: {p}; stop the daemon (cairn daemon stop) and \
                                 restore the registry from a backup (cairn backup), since its records can no longer be \
                                 trusted"
                            ),
                        )
                        .path(path.clone())
                    })
                    .collect();
                let summary = if findings.is_empty() {
                    format!("{checked}: ok")
                } else {
                    format!("{checked}: {} problem(s)", findings.len())
                };
                (outcome(check, 1, &findings, summary), findings)
            }
        }
    }

    fn doctor_event_log(&self) -> Checked {
        let check = CheckName::EventLog;
        let facts = match self.store.event_log_facts() {
            Ok(facts) => facts,
            Err(e) => return unanswered(check, &e),
        };
        let findings = judge_event_log(&facts);
        let numbering = if facts.gaps.is_some() {
            "numbered without a hole"
        } else {
            "numbering not checked (PostgreSQL's identity numbers skip those of rolled-back transactions)"
        };
        let summary = format!(
            "{} event(s) of {} run(s): each run's history starts with run.created, a finished run has its \
             run.finished, a completed step its completion event; {numbering}",
            facts.events,
            facts.runs.len()
        );
        (outcome(check, facts.events, &findings, summary), findings)
    }

    fn doctor_artifacts(&self) -> Checked {
        let check = CheckName::Artifacts;
        let files = match self.store.recorded_files() {
            Ok(files) => files,
            Err(e) => return unanswered(check, &e),
        };
        let mut findings = Vec::new();
        let (mut examined, mut remote, mut elsewhere) = (0u64, 0u64, 0u64);
        // A run directory that is not on this machine is reported once per run, not per file.
        let mut dirs: HashMap<String, bool> = HashMap::new();
        for file in &files {
            if file.target.as_deref().is_some_and(|t| t != cairn_core::target::LOCAL) {
                remote += 1;
                continue;
            }
            let present = *dirs.entry(file.run_dir.clone()).or_insert_with(|| Path::new(&file.run_dir).is_dir());
            if !present {
                if matches!(self.registry, RegistryPlace::Postgres { .. }) {
                    // A shared registry holds other state roots' runs, whose folders are elsewhere.
                    elsewhere += 1;
                } else if !findings.iter().any(|f: &Finding| f.path.as_deref() == Some(file.run_dir.as_str())) {
                    findings.push(missing_run_dir(file));
                }
                continue;
            }
            examined += 1;
            if let Some(found) = cairn_exec::artifacts::check_artifact(
                Path::new(&file.run_dir),
                &file.record.artifact.path,
                &file.record.artifact.sha256,
            ) {
                findings.push(damaged_artifact(file, &found));
            }
        }
        let mut summary = format!("{examined} of {} recorded artifact(s) hashed again", files.len());
        if remote > 0 {
            summary.push_str(&format!("; {remote} on SSH targets not checked (their bytes are on the target)"));
        }
        if elsewhere > 0 {
            summary.push_str(&format!(
                "; {elsewhere} of runs whose directory is not on this machine not checked (another state root's runs)"
            ));
        }
        (outcome(check, examined, &findings, summary), findings)
    }

    fn doctor_run_dirs(&self) -> Checked {
        let check = CheckName::RunDirs;
        let runs = self.state.runs();
        let entries = match std::fs::read_dir(&runs) {
            Ok(entries) => entries,
            Err(e) => {
                let f = Finding::error(check, format!("the runs folder cannot be read: {e}"))
                    .path(runs.display().to_string());
                return (outcome(check, 0, std::slice::from_ref(&f), "could not be listed".into()), vec![f]);
            }
        };
        let mut names: Vec<(String, PathBuf)> =
            entries.flatten().map(|e| (e.file_name().to_string_lossy().into_owned(), e.path())).collect();
        names.sort();
        let mut findings = Vec::new();
        for (name, path) in &names {
            match self.store.run_exists(name) {
                Ok(true) => {}
                Ok(false) => findings.push(
                    Finding::warning(
                        check,
                        format!(
                            "{} is in the state root's runs folder but no run `{name}` is in the registry (a registry \
                             restored from an older backup, or a folder made by hand); Cairn never removes it: look \
                             inside, then keep, move or remove it yourself",
                            path.display()
                        ),
                    )
                    .path(path.display().to_string()),
                ),
                Err(e) => return unanswered(check, &e),
            }
        }
        let summary = format!("{} folder(s) in {}", names.len(), runs.display());
        (outcome(check, names.len() as u64, &findings, summary), findings)
    }
}

fn missing_run_dir(file: &RecordedFile) -> Finding {
    let run = &file.record.run_id;
    Finding::error(
        CheckName::Artifacts,
        format!(
            "run `{run}`'s directory {} is gone, and with it every artifact it recorded; restore it from your file \
             backup, or replay the run's steps (cairn replay {run} --step STEP) to make them again",
            file.run_dir
        ),
    )
    .run(run.clone())
    .path(file.run_dir.clone())
}

fn damaged_artifact(file: &RecordedFile, found: &Found) -> Finding {
    let r = &file.record;
    let abs = Path::new(&file.run_dir).join(&r.artifact.path).display().to_string();
    let what = if r.artifact.link.is_some() { "symlink artifact" } else { "artifact" };
    let wrong = match found {
        Found::Changed { sha256 } => format!(
            "no longer holds its recorded bytes (recorded sha256 {}, now {sha256}): it was changed after the run \
             recorded it",
            r.artifact.sha256
        ),
        Found::Missing => "is missing (or is no longer what was recorded: a regular file, or the link itself)".into(),
        Found::Unreachable { why } => format!("cannot be reached: {why}"),
    };
    Finding::error(
        CheckName::Artifacts,
        format!(
            "{what} {abs} of step `{}` of run `{}` {wrong}; restore it from a copy, or replay the step (cairn replay {} \
             --step {}) to make it again",
            r.step_id, r.run_id, r.run_id, r.step_id
        ),
    )
    .run(r.run_id.clone())
    .path(abs)
}
