//! The attempt lifecycle at the engine boundary, without a process: a scripted launcher says how
//! each attempt ends, a hand-moved clock dates every write, and a real SQLite registry records
//! them (a SQLite file, and PostgreSQL: every case runs on both). Each case checks what the run, the step row and the event log say afterwards: retries
//! within the budget, a permanent failure, a refused attempt, a stop, a resume of an interrupted
//! step (its orphan stopped first), a re-attach that completes, is lost or mismatches, and a
//! stale write rejected. The same rules hold with real processes (the binary's tests); these
//! show them in milliseconds, one rule at a time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use cairn_core::attempt::AttemptEnd;
use cairn_core::event::RunEvent;
use cairn_core::ids::RunId;
use cairn_core::pipeline::JobEvent;
use cairn_core::status::{Outcome, RunStatus, StepStatus};
use cairn_core::store::{ProcessInfo, RemoteProcess};
use cairn_engine::launcher::{AttemptLaunch, JobSink, LaunchContext, Launcher, Orphan};
use cairn_engine::runner::{NoProgress, RunRequest};
use cairn_engine::{Clock, Engine, EngineError, ErrorCode, RunView, StopKind, StopSignal};
use cairn_store::testing::{Kind, TestDatabase};
use serde_json::{Value, json};
use tempfile::TempDir;

/// A fixed moment (2023-11-14), moved by hand.
const T: i64 = 1_700_000_000_000;

#[derive(Clone)]
struct TestClock(Arc<AtomicI64>);

impl Clock for TestClock {
    fn now_ms(&self) -> i64 {
        self.0.fetch_add(1, Ordering::SeqCst)
    }
}

/// What an attempt does when the scripted launcher is asked for it.
#[derive(Clone)]
enum Act {
    /// End this way.
    End(AttemptEnd),
    /// Record a process identity (a local pid, or a supervised launch), then end this way.
    Recorded(ProcessInfo, AttemptEnd),
    /// Ask the run's stop signal for a stop, then end as a follower that was stopped.
    Stop(StopKind),
    /// Run this other engine's request first (it takes the step over), then end this way.
    Race(Arc<Engine>, Box<RunRequest>, AttemptEnd),
    /// Record a process identity (if any), report these pipeline jobs (as a log read from its
    /// start would), then end this way.
    Jobs(Option<ProcessInfo>, Vec<JobEvent>, AttemptEnd),
}

/// What a script holds: per step, attempt and call (`launch` or `reattach`), what to do.
type Acts = HashMap<(String, u32, &'static str), Act>;

/// A launcher that plays a script: per `(step, attempt)` what to do, and a log of what it was
/// asked (`launch s 1`, `reattach s 1`, `orphan 4242`; `sweep s 1` for the nonce an attempt it
/// launched was given, `sweep n1` for another).
#[derive(Default, Clone)]
struct Script {
    acts: Arc<Mutex<Acts>>,
    log: Arc<Mutex<Vec<String>>>,
    stop: Arc<Mutex<Option<StopSignal>>>,
    /// The nonce each launch was given, and the step and attempt it was given for.
    nonces: Arc<Mutex<HashMap<String, String>>>,
}

impl Script {
    fn on(&self, step: &str, attempt: u32, act: Act) -> &Self {
        self.acts.lock().unwrap().insert((step.into(), attempt, "launch"), act);
        self
    }

    fn on_reattach(&self, step: &str, attempt: u32, act: Act) -> &Self {
        self.acts.lock().unwrap().insert((step.into(), attempt, "reattach"), act);
        self
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    fn play(
        &self,
        how: &'static str,
        a: &AttemptLaunch<'_>,
        record: &mut dyn FnMut(&ProcessInfo),
        jobs: &JobSink<'_>,
    ) -> AttemptEnd {
        self.log.lock().unwrap().push(format!("{how} {} {}", a.step.id, a.attempt));
        self.nonces.lock().unwrap().insert(a.nonce.clone(), format!("{} {}", a.step.id, a.attempt));
        let act = self.acts.lock().unwrap().get(&(a.step.id.clone(), a.attempt, how)).cloned();
        match act.unwrap_or_else(|| Act::End(completed(json!({"step": a.step.id, "attempt": a.attempt})))) {
            Act::End(end) => end,
            Act::Recorded(info, end) => {
                record(&info);
                end
            }
            Act::Stop(kind) => {
                if let Some(stop) = self.stop.lock().unwrap().as_ref() {
                    stop.request(kind);
                }
                AttemptEnd::Halted
            }
            Act::Race(other, req, end) => {
                other.run(&req, &mut NoProgress).expect("the other engine's run");
                end
            }
            Act::Jobs(info, events, end) => {
                if let Some(info) = info {
                    record(&info);
                }
                jobs(events);
                end
            }
        }
    }
}

impl Launcher for Script {
    fn launch(
        &self,
        _: &LaunchContext<'_>,
        a: &AttemptLaunch<'_>,
        record: &mut dyn FnMut(&ProcessInfo),
        jobs: &JobSink<'_>,
        _: &dyn Fn() -> bool,
    ) -> AttemptEnd {
        self.play("launch", a, record, jobs)
    }

    fn reattach(
        &self,
        _: &LaunchContext<'_>,
        _: &RemoteProcess,
        a: &AttemptLaunch<'_>,
        jobs: &JobSink<'_>,
        _: &dyn Fn() -> bool,
    ) -> AttemptEnd {
        self.play("reattach", a, &mut |_| {}, jobs)
    }

    fn stop_orphan(&self, _: &LaunchContext<'_>, orphan: &Orphan) {
        let mut log = self.log.lock().unwrap();
        if let Some(p) = &orphan.process {
            log.push(format!("orphan {}", p.pid));
        }
        if let Some(nonce) = &orphan.nonce {
            let known = self.nonces.lock().unwrap().get(nonce).cloned();
            log.push(format!("sweep {}", known.unwrap_or_else(|| nonce.clone())));
        }
    }
}

/// A run id to look a run up by.
fn rid(id: &str) -> RunId {
    RunId::lookup(id)
}

fn completed(result: Value) -> AttemptEnd {
    AttemptEnd::Ran {
        outcome: Outcome::Completed,
        result: Some(result),
        error: None,
        log_tail: String::new(),
        duration_us: 10,
        artifacts: Vec::new(),
        resumable: false,
        cause: None,
    }
}

fn ended(outcome: Outcome, error: &str) -> AttemptEnd {
    AttemptEnd::Ran {
        outcome,
        result: None,
        error: Some(error.into()),
        log_tail: "a log line".into(),
        duration_us: 10,
        artifacts: Vec::new(),
        resumable: false,
        cause: None,
    }
}

/// A FAILED attempt whose launcher found its output disk full.
fn disk_full() -> AttemptEnd {
    let disk = cairn_core::cause::DiskSpace { path: "/full".into(), free_bytes: 0, free_inodes: None };
    match ended(Outcome::Failed, "exited with code 1") {
        AttemptEnd::Ran { outcome, result, error, log_tail, duration_us, artifacts, resumable, .. } => {
            AttemptEnd::Ran {
                cause: cairn_core::cause::cause_of(outcome, &log_tail, &[disk]),
                outcome,
                result,
                error,
                log_tail,
                duration_us,
                artifacts,
                resumable,
            }
        }
        other => other,
    }
}

const WORKFLOW: &str = r#"
[workflow]
name = "life"
version = "1.0.0"

[tools.t]
command = ["true"]

[[steps]]
id = "a"
tool = "t"
args = { x = "${input.x}" }

[[steps]]
id = "b"
tool = "t"
needs = ["a"]
args = { from_a = "${steps.a.result.step}" }
max_attempts = 3
retry_on = ["TIMED_OUT", "FAILED"]
"#;

struct Fx {
    _tmp: TempDir,
    root: std::path::PathBuf,
    clock: TestClock,
    db: TestDatabase,
}

impl Fx {
    /// A state root with the workflow registered, its registry on `kind`.
    fn new(kind: Kind) -> Option<Fx> {
        let db = kind.database()?;
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap().join("state");
        let wf = tmp.path().join("wf");
        std::fs::create_dir_all(&wf).unwrap();
        std::fs::write(wf.join("workflow.toml"), WORKFLOW).unwrap();
        let fx = Fx { _tmp: tmp, root, clock: TestClock(Arc::new(AtomicI64::new(T))), db };
        fx.engine(&Script::default()).add_workflow(&cairn_core::access::Caller::owner("cli"), &wf).unwrap();
        Some(fx)
    }

    fn engine(&self, script: &Script) -> Engine {
        Engine::builder(&self.root)
            .database(self.db.url())
            .clock(self.clock.clone())
            .launcher(script.clone())
            .open()
            .unwrap()
    }

    fn run(&self, script: &Script, resume: bool) -> Result<RunView, EngineError> {
        let stop = StopSignal::new();
        *script.stop.lock().unwrap() = Some(stop.clone());
        self.engine(script).run(&request(resume, Some(stop)), &mut NoProgress)
    }
}

fn request(resume: bool, stop: Option<StopSignal>) -> RunRequest {
    RunRequest {
        workflow: "life".into(),
        run_id: Some("r1".into()),
        input: json!({"x": 1}),
        resume_interrupted: resume,
        parallelism: 1,
        owner: None,
        thread_id: None,
        stop,
        by: None,
        admission: Default::default(),
    }
}

/// The run's events as `kind step attempt`, in order.
fn events(fx: &Fx) -> Vec<String> {
    fx.engine(&Script::default())
        .events(&rid("r1"), 0)
        .unwrap()
        .iter()
        .map(|e| {
            let mut line = e.event.kind().to_string();
            if let Some(s) = &e.step_id {
                line.push_str(&format!(" {s}"));
            }
            if let Some(a) = e.attempt {
                line.push_str(&format!(" {a}"));
            }
            line
        })
        .collect()
}

fn step<'a>(view: &'a RunView, id: &str) -> &'a cairn_core::store::StepRecord {
    view.steps.iter().find(|s| s.step_id == id).and_then(|s| s.record.as_ref()).expect("a step row")
}

fn a_retryable_outcome_is_retried_under_a_new_token_and_completes(k: Kind) {
    let Some(fx) = Fx::new(k) else { return };
    let script = Script::default();
    script.on("b", 1, Act::End(ended(Outcome::TimedOut, "slow")));
    let view = fx.run(&script, false).unwrap();
    assert_eq!(view.run.status, RunStatus::Ready);
    let b = step(&view, "b");
    assert_eq!((b.status, b.attempt_count, b.outcome), (StepStatus::Completed, 2, Some(Outcome::Completed)));
    assert_eq!(b.result, Some(json!({"step": "b", "attempt": 2})));
    assert_eq!(script.log(), ["launch a 1", "launch b 1", "launch b 2"]);
    assert_eq!(
        events(&fx),
        [
            "run.created",
            "step.started a 1",
            "step.completed a 1",
            "step.started b 1",
            "step.retrying b 1",
            "step.started b 2",
            "step.completed b 2",
            "run.finished"
        ]
    );
    // The downstream step received the upstream result through its template.
    assert_eq!(b.args, json!({"from_a": "a"}));
}

fn exhausted_attempts_and_permanent_outcomes_fail_the_step_and_the_run_together(k: Kind) {
    // b allows 3 attempts on FAILED or TIMED_OUT: all three fail.
    let Some(fx) = Fx::new(k) else { return };
    let script = Script::default();
    for n in 1..=3 {
        script.on("b", n, Act::End(ended(Outcome::Failed, &format!("exit {n}"))));
    }
    let view = fx.run(&script, false).unwrap();
    assert_eq!(view.run.status, RunStatus::Failed);
    assert_eq!(view.run.error.as_deref(), Some("step `b` ended FAILED on attempt 3 of 3: exit 3"));
    let b = step(&view, "b");
    assert_eq!((b.status, b.attempt_count, b.log_tail.as_deref()), (StepStatus::Failed, 3, Some("a log line")));

    // a allows the default (2 attempts, TIMED_OUT only): DENIED is permanent at once.
    let Some(fx) = Fx::new(k) else { return };
    let script = Script::default();
    script.on("a", 1, Act::End(ended(Outcome::Denied, "not allowed")));
    let view = fx.run(&script, false).unwrap();
    assert_eq!(view.run.status, RunStatus::Failed);
    assert_eq!(step(&view, "a").attempt_count, 1);
    assert!(view.steps[1].record.is_none(), "b never started");
    assert_eq!(events(&fx), ["run.created", "step.started a 1", "step.failed a 1", "run.finished"]);
}

fn a_refused_attempt_fails_without_a_retry(k: Kind) {
    let Some(fx) = Fx::new(k) else { return };
    let script = Script::default();
    script.on("b", 1, Act::End(AttemptEnd::Refused { error: "tool file t.py changed since the run loaded it".into() }));
    let view = fx.run(&script, false).unwrap();
    assert_eq!(view.run.status, RunStatus::Failed, "retry_on includes FAILED, yet a refusal is not retried");
    let b = step(&view, "b");
    assert_eq!(b.attempt_count, 1);
    assert_eq!(b.error.as_deref(), Some("step `b`: tool file t.py changed since the run loaded it; it was not run"));
    assert_eq!(script.log(), ["launch a 1", "launch b 1"]);
}

fn orphan_of(pid: u32) -> ProcessInfo {
    ProcessInfo { pid, pgid: pid, start_time: Some(7), remote: None }
}

fn a_stop_writes_nothing_and_leaves_the_step_for_the_next_owner(k: Kind) {
    for kind in [StopKind::Shutdown, StopKind::Cancel] {
        let Some(fx) = Fx::new(k) else { return };
        let script = Script::default();
        script.on("a", 1, Act::Stop(kind));
        let err = fx.run(&script, false).unwrap_err();
        assert_eq!(err.code(), ErrorCode::Stopped, "{kind:?}");
        let view = fx.engine(&script).show_run(&rid("r1")).unwrap();
        let a = step(&view, "a");
        // A shutdown leaves it for the next daemon; a cancel is finalised by whoever cancelled.
        assert_eq!((a.status, a.outcome), (StepStatus::Running, None), "{kind:?}: the attempt wrote no outcome");
        assert_eq!(script.log(), ["launch a 1"], "{kind:?}: nothing else started");
    }
    // A stop requested before the run's first step: nothing begins.
    let Some(fx) = Fx::new(k) else { return };
    let script = Script::default();
    let stop = StopSignal::new();
    stop.request(StopKind::Shutdown);
    let err = fx.engine(&script).run(&request(false, Some(stop)), &mut NoProgress).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Stopped);
    assert!(script.log().is_empty());
}

fn a_running_step_is_resumed_only_explicitly_and_its_orphan_is_stopped_first(k: Kind) {
    let Some(fx) = Fx::new(k) else { return };
    // The attempt recorded its process, then its follower went away (as a crashed owner's does).
    let crashed = Script::default();
    crashed.on("a", 1, Act::Recorded(orphan_of(4242), AttemptEnd::Halted));
    let view = fx.run(&crashed, false).unwrap();
    assert_eq!(view.run.status, RunStatus::Running);
    let a = step(&view, "a");
    assert_eq!((a.status, a.process.as_ref().map(|p| p.pid)), (StepStatus::Running, Some(4242)));

    // Without resume_interrupted, a RUNNING step is never assumed dead.
    let err = fx.run(&Script::default(), false).unwrap_err();
    assert_eq!(err.code(), ErrorCode::StepRunning);

    // With it: the orphan is stopped once the new token owns the step (its recorded group, then
    // whatever carries the abandoned attempt's nonce), then attempt 2 runs; the abandoned
    // attempt uses up no retry.
    let resumer = Script { nonces: crashed.nonces.clone(), ..Script::default() };
    let view = fx.run(&resumer, true).unwrap();
    assert_eq!(view.run.status, RunStatus::Ready);
    assert_eq!(resumer.log(), ["orphan 4242", "sweep a 1", "launch a 2", "launch b 1"]);
    let a = step(&view, "a");
    assert_eq!((a.attempt_count, a.interrupted_count), (2, 1));
    let ev = events(&fx);
    let tail: Vec<&str> = ev.iter().skip_while(|e| *e != "run.resumed").map(String::as_str).take(4).collect();
    assert_eq!(tail, ["run.resumed", "step.interrupted a 1", "step.started a 2", "step.completed a 2"]);
}

/// The runner died between its tool's spawn and the commit recording its pid: nothing is
/// recorded but the token, and the resume stops what carries that token's nonce before attempt 2.
fn an_attempt_whose_pid_was_never_recorded_is_found_by_its_nonce_before_the_next(k: Kind) {
    let Some(fx) = Fx::new(k) else { return };
    let crashed = Script::default();
    crashed.on("a", 1, Act::End(AttemptEnd::Halted));
    let view = fx.run(&crashed, false).unwrap();
    let a = step(&view, "a");
    assert_eq!((a.status, &a.process), (StepStatus::Running, &None));
    let token = a.attempt_token.clone().unwrap();
    assert_eq!(crashed.nonces.lock().unwrap().get(&token.nonce()).map(String::as_str), Some("a 1"));

    let resumer = Script { nonces: crashed.nonces.clone(), ..Script::default() };
    let view = fx.run(&resumer, true).unwrap();
    assert_eq!(view.run.status, RunStatus::Ready);
    assert_eq!(resumer.log(), ["sweep a 1", "launch a 2", "launch b 1"]);
    assert_eq!(step(&view, "a").attempt_count, 2);
}

fn supervised(attempt: u32) -> ProcessInfo {
    ProcessInfo {
        pid: 0,
        pgid: 0,
        start_time: None,
        remote: Some(RemoteProcess {
            target: "local".into(),
            attempt_dir: format!("/x/steps/a/.cairn/attempt-{attempt}"),
            nonce: "n1".into(),
            pid: None,
            start_time: None,
            job_id: None,
        }),
    }
}

/// A run whose step `a` was launched under the agent and left RUNNING (its follower stopped, as
/// when its daemon died).
fn left_supervised(k: Kind) -> Option<Fx> {
    let fx = Fx::new(k)?;
    let script = Script::default();
    script.on("a", 1, Act::Recorded(supervised(1), AttemptEnd::Halted));
    *script.stop.lock().unwrap() = None;
    fx.engine(&script).run(&request(false, Some(StopSignal::new())), &mut NoProgress).unwrap();
    Some(fx)
}

fn a_supervised_launch_is_adopted_and_ends_under_its_own_attempt(k: Kind) {
    let Some(fx) = left_supervised(k) else { return };
    let script = Script::default();
    script.on_reattach("a", 1, Act::End(completed(json!({"step": "a"}))));
    let view = fx.run(&script, true).unwrap();
    assert_eq!(view.run.status, RunStatus::Ready);
    let a = step(&view, "a");
    assert_eq!((a.attempt_count, a.interrupted_count), (1, 0), "re-attached, not restarted");
    assert_eq!(script.log(), ["reattach a 1", "launch b 1"]);
    assert!(events(&fx).contains(&"step.reattached a 1".to_string()));
}

/// A pipeline's jobs are recorded as events of its attempt, under its token; a successor that
/// re-attaches and re-reads the log from its start records only what is new: each job once.
fn pipeline_jobs_are_recorded_once_across_a_reattach(k: Kind) {
    let start = |n: u64, offset: u64| JobEvent::Started {
        job: n,
        rule: "r".into(),
        wildcards: Default::default(),
        offset,
        facts: Default::default(),
    };
    let done = |n: u64, offset: u64| JobEvent::Finished {
        job: n,
        rule: "r".into(),
        done: Some(n),
        total: Some(2),
        offset,
        files: Vec::new(),
    };
    let Some(fx) = Fx::new(k) else { return };
    // The first follower saw job 1 start; then it stopped following (its daemon "died").
    let first = Script::default();
    first.on("a", 1, Act::Jobs(Some(supervised(1)), vec![start(1, 10)], AttemptEnd::Halted));
    fx.engine(&first).run(&request(false, Some(StopSignal::new())), &mut NoProgress).unwrap();
    // The successor re-attaches and reads the whole log again.
    let again = Script::default();
    let all = vec![start(1, 10), done(1, 50), start(2, 80), done(2, 120)];
    again.on_reattach("a", 1, Act::Jobs(None, all, completed(json!({"step": "a"}))));
    let view = fx.run(&again, true).unwrap();
    assert_eq!(view.run.status, RunStatus::Ready);
    let pipeline: Vec<String> = events(&fx).into_iter().filter(|e| e.starts_with("pipeline.")).collect();
    assert_eq!(
        pipeline,
        [
            "pipeline.job_started a 1",
            "pipeline.job_finished a 1",
            "pipeline.job_started a 1",
            "pipeline.job_finished a 1"
        ]
    );
    let offsets: Vec<u64> = fx
        .engine(&Script::default())
        .events(&rid("r1"), 0)
        .unwrap()
        .iter()
        .filter_map(|e| e.event.job_offset())
        .collect();
    assert_eq!(offsets, [10, 50, 80, 120], "each line of the log recorded once");
}

fn a_lost_adopted_launch_starts_over_as_interrupted_and_a_mismatch_fails_touching_nothing(k: Kind) {
    let Some(fx) = left_supervised(k) else { return };
    let script = Script::default();
    script.on_reattach("a", 1, Act::End(AttemptEnd::Lost { why: "no pid.json".into() }));
    let view = fx.run(&script, true).unwrap();
    assert_eq!(view.run.status, RunStatus::Ready);
    // Lost from sight on this host: whatever carries its launch record's nonce (`n1`, which the
    // re-attach was given) is stopped first.
    assert_eq!(script.log(), ["reattach a 1", "sweep a 1", "launch a 2", "launch b 1"]);
    let a = step(&view, "a");
    assert_eq!((a.attempt_count, a.interrupted_count), (2, 1));

    let Some(fx) = left_supervised(k) else { return };
    let script = Script::default();
    script.on_reattach("a", 1, Act::End(AttemptEnd::Mismatch { why: "another nonce".into() }));
    let view = fx.run(&script, true).unwrap();
    assert_eq!(view.run.status, RunStatus::Failed);
    let err = view.run.error.unwrap_or_default();
    assert!(err.contains("could not be verified (another nonce)") && err.contains("nothing was resumed"), "{err}");
    assert_eq!(script.log(), ["reattach a 1"], "nothing launched, nothing stopped");
}

fn a_write_by_a_token_that_lost_the_step_is_rejected_and_recorded(k: Kind) {
    let Some(fx) = Fx::new(k) else { return };
    // While a's first attempt runs, another process resumes the run (as `--resume-interrupted`
    // would after deciding it crashed) and completes the step under a new token.
    let other = Arc::new(fx.engine(&Script::default()));
    let script = Script::default();
    script.on("a", 1, Act::Race(other, Box::new(request(true, None)), completed(json!({"late": true}))));
    let err = fx.run(&script, false).unwrap_err();
    assert_eq!(err.code(), ErrorCode::StaleToken);
    let view = fx.engine(&script).show_run(&rid("r1")).unwrap();
    assert_eq!(view.run.status, RunStatus::Ready, "the other process finished the run");
    assert_eq!(step(&view, "a").result, Some(json!({"step": "a", "attempt": 2})), "the stale result was not applied");
    assert!(events(&fx).contains(&"step.stale_write_rejected a".to_string()));
}

fn decisions_are_dated_by_the_injected_clock(k: Kind) {
    let Some(fx) = Fx::new(k) else { return };
    fx.run(&Script::default(), false).unwrap();
    let all = fx.engine(&Script::default()).events(&rid("r1"), 0).unwrap();
    assert!(all.iter().all(|e| e.at >= T && e.at < T + 1_000), "every write is dated by the test's clock");
    assert!(all.windows(2).all(|w| w[0].at <= w[1].at));
    assert!(matches!(all.last().map(|e| &e.event), Some(RunEvent::RunFinished { status: RunStatus::Ready, .. })));
}

/// A retry after a full disk begins (its `step.retrying` carrying the cause and the wait), waits,
/// then launches; the step's error names the disk while it has one, and the cause is cleared by
/// the retry that completes.
fn a_retry_after_a_full_disk_waits_before_its_tool_starts(k: Kind) {
    let Some(fx) = Fx::new(k) else { return };
    let script = Script::default();
    script.on("b", 1, Act::End(disk_full()));
    let started = std::time::Instant::now();
    let view = fx.run(&script, false).unwrap();
    assert!(started.elapsed() >= std::time::Duration::from_secs(1), "{:?}", started.elapsed());
    assert_eq!(view.run.status, RunStatus::Ready);
    let b = step(&view, "b");
    assert_eq!((b.attempt_count, b.cause.as_ref(), b.error.as_ref()), (2, None, None));
    assert_eq!(script.log(), ["launch a 1", "launch b 1", "launch b 2"]);
    let all = fx.engine(&Script::default()).events(&rid("r1"), 0).unwrap();
    let Some(RunEvent::StepRetrying { cause: Some(cause), delay_ms, error, .. }) =
        all.iter().map(|e| &e.event).find(|e| e.kind() == "step.retrying")
    else {
        panic!("{all:?}")
    };
    assert_eq!((cause.kind().as_str(), *delay_ms), ("NO_SPACE", 1_000));
    assert_eq!(
        error.as_deref(),
        Some("ENOSPC on /full (0 bytes free): the tool's output disk is full; it exited with code 1")
    );
}

/// A stop during that wait ends it at once, and the retry's tool never starts: after a shutdown
/// the begun attempt is left for the next owner, as one whose tool had not started yet.
fn a_stop_ends_the_wait_before_a_retry(k: Kind) {
    let Some(fx) = Fx::new(k) else { return };
    let script = Script::default();
    script.on("b", 1, Act::End(disk_full()));
    let stop = StopSignal::new();
    let stopper = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(300));
            stop.request(StopKind::Shutdown);
        })
    };
    let started = std::time::Instant::now();
    let err = fx.engine(&script).run(&request(false, Some(stop)), &mut NoProgress).unwrap_err();
    stopper.join().unwrap();
    assert_eq!(err.code(), ErrorCode::Stopped);
    assert!(started.elapsed() < std::time::Duration::from_millis(900), "{:?}", started.elapsed());
    assert_eq!(script.log(), ["launch a 1", "launch b 1"], "the retry's tool never started");
    let view = fx.engine(&script).show_run(&rid("r1")).unwrap();
    let b = step(&view, "b");
    assert_eq!((b.status, b.attempt_count), (StepStatus::Running, 2));
    assert_eq!(events(&fx).last().map(String::as_str), Some("step.started b 2"));
}

cairn_store::on_both!(
    a_retry_after_a_full_disk_waits_before_its_tool_starts,
    a_stop_ends_the_wait_before_a_retry,
    a_retryable_outcome_is_retried_under_a_new_token_and_completes,
    exhausted_attempts_and_permanent_outcomes_fail_the_step_and_the_run_together,
    a_refused_attempt_fails_without_a_retry,
    a_stop_writes_nothing_and_leaves_the_step_for_the_next_owner,
    a_running_step_is_resumed_only_explicitly_and_its_orphan_is_stopped_first,
    an_attempt_whose_pid_was_never_recorded_is_found_by_its_nonce_before_the_next,
    a_supervised_launch_is_adopted_and_ends_under_its_own_attempt,
    pipeline_jobs_are_recorded_once_across_a_reattach,
    a_lost_adopted_launch_starts_over_as_interrupted_and_a_mismatch_fails_touching_nothing,
    a_write_by_a_token_that_lost_the_step_is_rejected_and_recorded,
    decisions_are_dated_by_the_injected_clock,
);
