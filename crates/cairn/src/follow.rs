//! Runs through the daemon: submit, follow the run's events live (progress on a terminal), and
//! print the result. Ctrl-C detaches: the run goes on in the daemon.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use cairn_core::event::RunEvent;
use cairn_core::ids::RunId;
use cairn_core::status::Outcome;
use cairn_engine::Engine;
use cairn_engine::runner::{NoProgress, Observer};
use serde_json::Value;

use crate::Failure;
use crate::client::{Client, failure_of};
use crate::output::{PipelineSection, RunAnswer};
use crate::progress::TerminalProgress;
use crate::wire::{Event, Followed, PipelineJobs, RunResult, SubmitRun};

/// Submits a run to `POST /runs`, follows it until it finishes, and returns the daemon's answer.
pub fn submit_and_follow(root: &Path, run: &SubmitRun, json: bool) -> Result<RunAnswer, Failure> {
    post_and_follow(root, "/runs", &crate::wire::to_value(run), json)
}

/// POSTs `body` to an endpoint that answers with a run (202 queued, 200 finished), follows it
/// until it finishes, and returns it as the daemon answers at the stream's end: the run (`GET
/// /runs/{id}`) and its pipeline steps' jobs that failed or were interrupted.
pub fn post_and_follow(root: &Path, path: &str, body: &Value, json: bool) -> Result<RunAnswer, Failure> {
    let client = Client::connect(root)?;
    let answer = client.post(path, body)?;
    if !matches!(answer.status, 200 | 202) {
        return Err(failure_of(&answer));
    }
    let run: RunResult = serde_json::from_value(answer.body.clone())
        .map_err(|e| Failure::usage(format!("the daemon's answer is not a run ({e}): {}", answer.body)))?;
    let run_id = RunId::lookup(run.run_id);
    if answer.status == 202 {
        follow(&client, &run_id, run.step_counts.total.max(run.steps.len()), json)?;
    }
    // The daemon's answer; once it has gone (killed, or stopped while this followed), the
    // registry's, as it was left: the one time this process reads the registry itself.
    let answer = match answer_of(&client, &run_id, json) {
        Ok(answer) => answer,
        Err(_) => RunAnswer::of_view(&Engine::open(root)?.show_run_page(&run_id, &cairn_engine::first_steps())?),
    };
    if !answer.run.has_ended() {
        eprintln!(
            "lost the daemon's event stream while run {run_id} was {}: the daemon stopped or died. \
             The next daemon resumes the run (`cairn daemon start`); follow it with `cairn events {run_id} --follow`",
            answer.run.status
        );
    }
    Ok(answer)
}

/// The run as the daemon answers for it now (its first page of steps; for text, of a run over a
/// page, the steps that failed or run still), with each pipeline step's stopped jobs.
fn answer_of(client: &Client, run_id: &str, json: bool) -> Result<RunAnswer, Failure> {
    let id = crate::wire::seg(run_id);
    let mut run: RunResult = client.get(&format!("/runs/{id}"))?.decode(200, "GET /runs/{id}")?;
    if !json && run.steps_page.next_offset.is_some() {
        let path = format!("/runs/{id}?steps_status=FAILED,RUNNING&steps_order=attention");
        run = client.get(&path)?.decode(200, "GET /runs/{id}")?;
    }
    let mut pipelines = BTreeMap::new();
    for s in run.steps.iter().filter(|s| s.jobs.is_some()) {
        let mut section = PipelineSection::default();
        for status in ["failed", "interrupted"] {
            let path = format!("/runs/{id}/steps/{}/jobs?status={status}", crate::wire::seg(&s.step_id));
            let jobs: PipelineJobs = client.get(&path)?.decode(200, "GET /runs/{id}/steps/{step}/jobs")?;
            section.rules = jobs.rules;
            section.stopped.extend(jobs.jobs);
        }
        section.stopped.sort_by_key(|j| (j.attempt, j.job));
        pipelines.insert(s.step_id.clone(), section);
    }
    Ok(RunAnswer { run, pipelines, log_tails: BTreeMap::new() })
}

/// Follows a run's events until `run.finished` (or the stream ends), feeding the progress
/// display. On Ctrl-C, detaches: prints how to follow or cancel and exits 130.
pub fn follow(client: &Client, run_id: &RunId, total: usize, json: bool) -> Result<(), Failure> {
    let interrupted = Arc::new(AtomicBool::new(false));
    // Registering replaces the default action: Ctrl-C no longer kills this process, it detaches.
    let registered = signal_hook::flag::register(signal_hook::consts::SIGINT, interrupted.clone());
    let events = client.follow(run_id, 0)?;
    let mut obs: Box<dyn Observer> = if !json && std::io::stderr().is_terminal() {
        Box::new(TerminalProgress::default())
    } else {
        Box::new(NoProgress)
    };
    obs.run_started(run_id, total);
    loop {
        match events.recv_timeout(Duration::from_millis(100)) {
            Ok(Followed::Event(event)) => show(obs.as_mut(), &event),
            // Said on stderr whatever the output: a follower is told, not left hanging.
            Ok(Followed::Waiting(notice)) => match &notice.waiting {
                Some(w) => {
                    eprintln!("run {run_id} is waiting for its environment:\n{}", crate::output::waiting_line(w))
                }
                None => eprintln!("run {run_id}: its environment is back; it goes on"),
            },
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {}
        }
        if interrupted.load(Ordering::SeqCst) {
            drop(obs);
            eprintln!(
                "\ndetached: run {run_id} goes on in the daemon.\n  follow it:  cairn events {run_id} --follow\n  see it:     cairn show {run_id}\n  cancel it:  cairn cancel {run_id}"
            );
            return Err(Failure::detached(format!("detached from run {run_id}")));
        }
    }
    if let Ok(id) = registered {
        signal_hook::low_level::unregister(id);
    }
    Ok(())
}

fn show(obs: &mut dyn Observer, event: &Event) {
    let step = event.step_id.as_deref().unwrap_or("");
    let attempt = event.attempt.unwrap_or(1);
    let micros = |us: i64| Duration::from_micros(u64::try_from(us).unwrap_or(0));
    match event.event() {
        Some(RunEvent::StepStarted { .. }) => obs.step_started(step, attempt),
        Some(RunEvent::StepCompleted { duration_us }) => {
            obs.step_finished(step, Outcome::Completed, attempt, micros(duration_us))
        }
        Some(RunEvent::StepFailed { outcome, duration_us, .. }) => {
            obs.step_finished(step, outcome, attempt, micros(duration_us))
        }
        Some(RunEvent::StepRetrying { outcome, .. }) => obs.step_finished(step, outcome, attempt, Duration::ZERO),
        Some(RunEvent::StepReplayReused { .. }) => obs.step_skipped(step, "reused from the source run"),
        Some(e) => {
            if let Some(job) = e.as_job() {
                obs.pipeline_job(step, &job);
            }
        }
        None => {}
    }
}
