//! The attempt lifecycle's decision, as data: for an attempt that ended (as its launcher reported
//! it, under the token it ran with), what to write and what follows — complete the step, retry
//! it, start it over as interrupted, fail it and the run, or write nothing. The engine launches
//! ("act") and writes ("record"); this decides, so every rule is testable without a process.

use serde_json::Value;

use crate::artifact::Artifact;
use crate::cause::{Cause, explain, retry_delay_ms};
use crate::ids::AttemptToken;
use crate::signature::{AfterAttempt, after_attempt};
use crate::status::{Outcome, RetryOn};
use crate::store::{AttemptStart, FinishAttempt};

/// How an attempt ended, as its launcher reports it.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptEnd {
    /// The tool ran and ended with an outcome (a result only when it completed).
    Ran {
        outcome: Outcome,
        result: Option<Value>,
        error: Option<String>,
        /// The bounded tail of its stderr (empty when it printed nothing).
        log_tail: String,
        /// The tool's own time, from spawn to exit.
        duration_us: i64,
        /// The files it produced, hashed after it completed (its declared outputs).
        artifacts: Vec<Artifact>,
        /// A pipeline's controller killed by a signal Cairn did not send (an OOM kill, a
        /// `kill -9`): the jobs it completed are kept in its working copy, so its next attempt
        /// resumes it there rather than count a failure.
        resumable: bool,
        /// What made it fail, as the launcher judged from what it saw where it ran
        /// ([`crate::cause::cause_of`]); `None` when it completed or nothing more is known.
        cause: Option<Cause>,
    },
    /// It was not run: something it depends on is not what its signature was computed from (a
    /// tool file changed on disk). The step fails without a retry.
    Refused { error: String },
    /// Nothing of the launch is left to observe: it never happened, or its supervisor died
    /// without recording an end.
    Lost { why: String },
    /// Another launch is recorded where this one was expected: nothing was touched.
    Mismatch { why: String },
    /// The follower stopped (a cancel or a shutdown); the step goes on or is being stopped.
    Halted,
    /// Its target could not be reached for longer than the follower waits: nothing is known of
    /// the launch's end (it may still run there). Nothing is written; the run waits for the
    /// target and follows the launch again (by its nonce) once it answers.
    Unreachable { why: String },
}

/// The attempt that ended, and what its step allows.
#[derive(Debug, Clone)]
pub struct AttemptState<'a> {
    pub run_id: &'a crate::ids::RunId,
    pub step_id: &'a str,
    /// The token the attempt ran under (the one that owns the step now).
    pub token: &'a AttemptToken,
    /// Its number (1-based).
    pub attempt: u32,
    /// Attempts of the step that ended with an outcome before this one (interrupted ones do not
    /// count: they use up no retry).
    pub finished: u32,
    pub max_attempts: u32,
    pub retry_on: &'a [RetryOn],
    /// Followed after being adopted from a predecessor (a re-attach), not launched now.
    pub adopted: bool,
    /// A stop (cancel or shutdown) was requested meanwhile.
    pub halted: bool,
    /// Now, by the caller's clock (Unix milliseconds).
    pub at: i64,
}

/// What to write and what follows.
#[must_use]
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptWrite {
    /// Write the step COMPLETED with its result; the step is done.
    Complete(FinishAttempt),
    /// Begin attempt `attempt` as a retry of this one.
    Retry { attempt: u32, start: AttemptStart },
    /// Begin attempt `attempt` as a resume of an interrupted one (it uses up no retry): the
    /// adopted launch is lost, or a pipeline's controller was killed from outside.
    Restart { attempt: u32, start: AttemptStart },
    /// Write the step FAILED and, with it, the run FAILED with `run_error`.
    Fail { finish: FinishAttempt, run_error: String },
    /// Write nothing: a cancel has finalised the step, a shutdown leaves it RUNNING for the next
    /// daemon to resume.
    Nothing,
    /// Write nothing and stop the run where it is: its target cannot be reached (`why`). The step
    /// stays RUNNING, its launch recorded, for the run to follow again once the target answers.
    AwaitTarget { why: String },
}

/// The decision, and whether the attempt ended with an outcome (it then counts against the
/// step's attempts, and is shown as finished).
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub write: AttemptWrite,
    pub ended: Option<Outcome>,
}

/// How many times a step's attempts may be interrupted and resumed on their own before a
/// resumable end counts as a failure: a controller killed again and again (an OOM kill each time)
/// is failing, not unlucky.
pub const MAX_RESUMES: u32 = 3;

/// Decides what an attempt's end writes and what follows.
pub fn decide(s: &AttemptState<'_>, end: AttemptEnd) -> Decision {
    let finish =
        |outcome: Outcome, result: Option<Value>, error: Option<String>, log_tail: String, duration_us| FinishAttempt {
            run_id: s.run_id.clone(),
            step_id: s.step_id.to_string(),
            token: s.token.clone(),
            attempt: s.attempt,
            outcome,
            result,
            error,
            cause: None,
            log_tail: (!log_tail.is_empty()).then_some(log_tail),
            duration_us,
            artifacts: Vec::new(),
            at: s.at,
        };
    let nothing = Decision { write: AttemptWrite::Nothing, ended: None };
    let mut artifacts = Vec::new();
    let mut resumable = false;
    let mut cause = None;
    let (outcome, result, error, log_tail, duration_us) = match end {
        AttemptEnd::Halted => return nothing,
        AttemptEnd::Unreachable { why } => return Decision { write: AttemptWrite::AwaitTarget { why }, ended: None },
        AttemptEnd::Refused { error } => {
            let error = format!("step `{}`: {error}; it was not run", s.step_id);
            let run_error = error.clone();
            let finish = finish(Outcome::Failed, None, Some(error), String::new(), 0);
            return Decision { write: AttemptWrite::Fail { finish, run_error }, ended: None };
        }
        // A launch this owner adopted and can no longer see: verifiably nothing runs, so the
        // step starts over.
        AttemptEnd::Lost { .. } if s.adopted => {
            let start = AttemptStart::ResumeInterrupted { previous_token: s.token.clone(), why: None };
            return Decision { write: AttemptWrite::Restart { attempt: s.attempt + 1, start }, ended: None };
        }
        AttemptEnd::Mismatch { why } if s.adopted => {
            let error = format!(
                "step `{}`: the recorded launch could not be verified ({why}); nothing was resumed or stopped",
                s.step_id
            );
            let run_error = error.clone();
            let finish = finish(Outcome::Failed, None, Some(error), String::new(), 0);
            return Decision { write: AttemptWrite::Fail { finish, run_error }, ended: None };
        }
        // One this owner launched just now and lost: the attempt failed.
        AttemptEnd::Lost { why } | AttemptEnd::Mismatch { why } => (Outcome::Failed, None, Some(why), String::new(), 0),
        AttemptEnd::Ran {
            outcome,
            result,
            error,
            log_tail,
            duration_us,
            artifacts: produced,
            resumable: r,
            cause: c,
        } => {
            (artifacts, resumable) = (produced, r && outcome != Outcome::Completed);
            // A cause is named first in the error: it is what a person acts on.
            cause = c.filter(|_| outcome == Outcome::Failed);
            let error = match &cause {
                Some(c) => Some(explain(c, error.as_deref())),
                None => error,
            };
            (outcome, result, error, log_tail, duration_us)
        }
    };
    // Nothing is written for an attempt launched now once a stop came: a cancel has finalised the
    // step, a shutdown leaves it to be resumed. An adopted one's end is recorded: it is what ran.
    if s.halted && !s.adopted {
        return nothing;
    }
    // Attempts before this one that ended without an outcome were interrupted.
    let interrupted = s.attempt.saturating_sub(1).saturating_sub(s.finished);
    if resumable && !s.halted {
        let error = error.as_deref().unwrap_or("was killed");
        if interrupted < MAX_RESUMES {
            let why = format!(
                "the pipeline's controller {error}; its next attempt resumes it in its working copy, keeping the jobs \
                 it completed"
            );
            let start = AttemptStart::ResumeInterrupted { previous_token: s.token.clone(), why: Some(why) };
            return Decision { write: AttemptWrite::Restart { attempt: s.attempt + 1, start }, ended: None };
        }
    }
    let error = if resumable && !s.halted && interrupted >= MAX_RESUMES {
        error.map(|e| format!("{e}; it was interrupted {interrupted} times before, so it is not resumed again"))
    } else {
        error
    };
    let finished = s.finished + 1;
    let write = match after_attempt(outcome, cause.as_ref().map(Cause::kind), finished, s.max_attempts, s.retry_on) {
        // Only a completed attempt's artifacts are recorded: with the completion, in its
        // transaction.
        AfterAttempt::Complete => AttemptWrite::Complete(FinishAttempt {
            artifacts,
            ..finish(outcome, Some(result.unwrap_or(Value::Null)), error, log_tail, duration_us)
        }),
        AfterAttempt::Retry if s.halted => AttemptWrite::Nothing,
        AfterAttempt::Retry => AttemptWrite::Retry {
            attempt: s.attempt + 1,
            start: AttemptStart::Retry {
                previous_token: s.token.clone(),
                outcome,
                error,
                delay_ms: retry_delay_ms(cause.as_ref(), finished),
                cause,
            },
        },
        AfterAttempt::Fail => {
            let run_error = format!(
                "step `{}` ended {outcome} on attempt {} of {}: {}",
                s.step_id,
                s.attempt,
                s.max_attempts,
                error.as_deref().unwrap_or("no detail")
            );
            AttemptWrite::Fail {
                finish: FinishAttempt { cause, ..finish(outcome, result, error, log_tail, duration_us) },
                run_error,
            }
        }
    };
    Decision { write, ended: Some(outcome) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn state(attempt: u32, finished: u32) -> AttemptState<'static> {
        AttemptState {
            run_id: Box::leak(Box::new(crate::ids::RunId::lookup("r"))),
            step_id: "s",
            // Leaked: one small token per test, for a state that outlives the helper.
            token: Box::leak(Box::new(AttemptToken::new("att_1"))),
            attempt,
            finished,
            max_attempts: 2,
            retry_on: &[RetryOn::Outcome(Outcome::TimedOut)],
            adopted: false,
            halted: false,
            at: 7,
        }
    }

    fn ran(outcome: Outcome) -> AttemptEnd {
        AttemptEnd::Ran {
            outcome,
            result: (outcome == Outcome::Completed).then(|| json!({"ok": true})),
            error: (outcome != Outcome::Completed).then(|| "boom".to_string()),
            log_tail: String::new(),
            duration_us: 5,
            artifacts: vec![Artifact {
                name: "r".into(),
                path: "steps/s/r".into(),
                bytes: 1,
                sha256: "aa".into(),
                link: None,
            }],
            resumable: false,
            cause: None,
        }
    }

    #[test]
    fn a_completed_attempt_writes_its_result_under_its_token() {
        let d = decide(&state(1, 0), ran(Outcome::Completed));
        let AttemptWrite::Complete(f) = d.write else { panic!("{d:?}") };
        assert_eq!(f.artifacts.len(), 1, "its artifacts are written with the completion");
        assert_eq!((f.token.as_str(), f.attempt, f.result, f.log_tail), ("att_1", 1, Some(json!({"ok": true})), None));
        assert_eq!(d.ended, Some(Outcome::Completed));
    }

    #[test]
    fn a_retryable_outcome_retries_within_the_budget_then_fails_the_run() {
        let d = decide(&state(1, 0), ran(Outcome::TimedOut));
        assert_eq!(
            d.write,
            AttemptWrite::Retry {
                attempt: 2,
                start: AttemptStart::Retry {
                    previous_token: AttemptToken::new("att_1"),
                    outcome: Outcome::TimedOut,
                    error: Some("boom".into()),
                    cause: None,
                    delay_ms: 0,
                },
            }
        );
        let AttemptWrite::Fail { run_error, .. } = decide(&state(2, 1), ran(Outcome::TimedOut)).write else { panic!() };
        assert_eq!(run_error, "step `s` ended TIMED_OUT on attempt 2 of 2: boom");
        assert!(matches!(decide(&state(1, 0), ran(Outcome::Failed)).write, AttemptWrite::Fail { .. }));
    }

    #[test]
    fn a_stop_writes_nothing_for_an_attempt_launched_now() {
        let halted = AttemptState { halted: true, ..state(1, 0) };
        for end in [ran(Outcome::Completed), ran(Outcome::TimedOut), AttemptEnd::Halted] {
            assert_eq!(decide(&halted, end).write, AttemptWrite::Nothing);
        }
        // An adopted attempt's end is what ran: it is recorded, but not retried after a stop.
        let adopted = AttemptState { adopted: true, ..halted };
        assert!(matches!(decide(&adopted, ran(Outcome::Completed)).write, AttemptWrite::Complete(_)));
        assert_eq!(decide(&adopted, ran(Outcome::TimedOut)).write, AttemptWrite::Nothing);
    }

    #[test]
    fn an_unreachable_target_writes_nothing_and_holds_the_step_for_the_target_launched_or_adopted() {
        for adopted in [false, true] {
            let s = AttemptState { adopted, ..state(1, 0) };
            let d = decide(&s, AttemptEnd::Unreachable { why: "cannot reach h".into() });
            assert_eq!(d, Decision { write: AttemptWrite::AwaitTarget { why: "cannot reach h".into() }, ended: None });
        }
    }

    #[test]
    fn a_lost_or_mismatched_launch_fails_now_but_restarts_or_fails_an_adopted_one() {
        let lost = AttemptEnd::Lost { why: "gone".into() };
        let d = decide(&state(1, 0), lost.clone());
        assert_eq!(d.ended, Some(Outcome::Failed));
        assert!(matches!(d.write, AttemptWrite::Fail { .. }));
        let adopted = AttemptState { adopted: true, ..state(1, 0) };
        assert_eq!(
            decide(&adopted, lost).write,
            AttemptWrite::Restart {
                attempt: 2,
                start: AttemptStart::ResumeInterrupted { previous_token: AttemptToken::new("att_1"), why: None }
            }
        );
        let d = decide(&adopted, AttemptEnd::Mismatch { why: "other nonce".into() });
        let AttemptWrite::Fail { finish, run_error } = d.write else { panic!() };
        assert!(run_error.contains("could not be verified (other nonce)"), "{run_error}");
        assert_eq!((finish.outcome, d.ended), (Outcome::Failed, None));
    }

    #[test]
    fn a_killed_controller_resumes_without_a_retry_until_it_was_interrupted_too_often() {
        let killed = || match ran(Outcome::Failed) {
            AttemptEnd::Ran { outcome, result, log_tail, duration_us, artifacts, .. } => AttemptEnd::Ran {
                outcome,
                result,
                error: Some("was killed by signal 9 (SIGKILL)".into()),
                log_tail,
                duration_us,
                artifacts,
                resumable: true,
                cause: None,
            },
            other => other,
        };
        // Attempt 1 of a step that allows no retry at all: it resumes as attempt 2.
        let one = AttemptState { max_attempts: 1, retry_on: &[], ..state(1, 0) };
        let d = decide(&one, killed());
        let AttemptWrite::Restart { attempt: 2, start: AttemptStart::ResumeInterrupted { previous_token, why } } =
            d.write
        else {
            panic!("{d:?}")
        };
        assert_eq!((previous_token.as_str(), d.ended), ("att_1", None), "it uses up no retry");
        assert!(
            why.is_some_and(|w| w.starts_with("the pipeline's controller was killed by signal 9 (SIGKILL); its next"))
        );
        // Attempt 4 after three interruptions: it fails, saying why it was not resumed.
        let fourth = AttemptState { attempt: 4, ..one.clone() };
        let AttemptWrite::Fail { run_error, .. } = decide(&fourth, killed()).write else { panic!() };
        assert!(
            run_error.ends_with("(SIGKILL); it was interrupted 3 times before, so it is not resumed again"),
            "{run_error}"
        );
        // Stopped meanwhile: nothing (a cancel finalised the step); completed: its result.
        assert_eq!(decide(&AttemptState { halted: true, ..one.clone() }, killed()).write, AttemptWrite::Nothing);
        assert!(matches!(decide(&one, ran(Outcome::Completed)).write, AttemptWrite::Complete(_)));
    }

    #[test]
    fn a_refused_attempt_fails_without_a_retry_and_counts_no_attempt() {
        let retry_all = AttemptState {
            retry_on: &[RetryOn::Outcome(Outcome::Failed), RetryOn::Outcome(Outcome::TimedOut)],
            ..state(1, 0)
        };
        let d = decide(&retry_all, AttemptEnd::Refused { error: "tool file t.py changed".into() });
        let AttemptWrite::Fail { finish, run_error } = d.write else { panic!() };
        assert_eq!(run_error, "step `s`: tool file t.py changed; it was not run");
        assert_eq!((finish.error.as_deref(), d.ended), (Some(run_error.as_str()), None));
    }

    /// Attempt `attempt` of a step that allows three, retried on `retry_on`, failed on a full disk.
    fn full_disk(retry_on: &'static [RetryOn], attempt: u32) -> Decision {
        let end = AttemptEnd::Ran {
            outcome: Outcome::Failed,
            result: None,
            error: Some("exited with code 1".into()),
            log_tail: "OSError: [Errno 28] No space left on device".into(),
            duration_us: 5,
            artifacts: Vec::new(),
            resumable: false,
            cause: crate::cause::cause_of(
                Outcome::Failed,
                "",
                &[crate::cause::DiskSpace { path: "/runs/r".into(), free_bytes: 0, free_inodes: None }],
            ),
        };
        decide(&AttemptState { max_attempts: 3, retry_on, ..state(attempt, attempt - 1) }, end)
    }

    #[test]
    fn a_full_disk_is_retried_after_a_wait_only_when_retry_on_names_no_space() {
        const NO_SPACE: &[RetryOn] = &[RetryOn::Cause(crate::status::CauseKind::NoSpace)];
        let error = "ENOSPC on /runs/r (0 bytes free): the tool's output disk is full; it exited with code 1";
        let d = full_disk(NO_SPACE, 1);
        let AttemptWrite::Retry { attempt: 2, start: AttemptStart::Retry { outcome, error: e, cause, delay_ms, .. } } =
            d.write
        else {
            panic!("{d:?}")
        };
        assert_eq!((outcome, e.as_deref(), delay_ms), (Outcome::Failed, Some(error), 1_000));
        assert_eq!(cause.map(|c| c.kind()), Some(crate::status::CauseKind::NoSpace));
        assert_eq!(d.ended, Some(Outcome::Failed), "it counts as an attempt");
        // The second retry waits longer; the last attempt fails the run, naming the disk.
        let AttemptWrite::Retry { start: AttemptStart::Retry { delay_ms: 2_000, .. }, .. } =
            full_disk(NO_SPACE, 2).write
        else {
            panic!()
        };
        let AttemptWrite::Fail { finish, run_error } = full_disk(NO_SPACE, 3).write else { panic!() };
        assert_eq!(run_error, format!("step `s` ended FAILED on attempt 3 of 3: {error}"));
        assert!(finish.cause.is_some(), "the step records its cause");
        // The default policy (TIMED_OUT) does not retry it: FAILED after one attempt, cause and all.
        let AttemptWrite::Fail { finish, .. } = full_disk(&[RetryOn::Outcome(Outcome::TimedOut)], 1).write else {
            panic!()
        };
        assert_eq!((finish.error.as_deref(), finish.cause.is_some()), (Some(error), true));
        // FAILED retries every failure, a full disk too, and waits for the disk just the same.
        let d = full_disk(&[RetryOn::Outcome(Outcome::Failed)], 1);
        assert!(matches!(d.write, AttemptWrite::Retry { start: AttemptStart::Retry { delay_ms: 1_000, .. }, .. }));
    }

    #[test]
    fn an_ordinary_failure_is_not_retried_on_no_space_and_has_no_cause() {
        const NO_SPACE: &[RetryOn] = &[RetryOn::Cause(crate::status::CauseKind::NoSpace)];
        let d = decide(&AttemptState { max_attempts: 3, retry_on: NO_SPACE, ..state(1, 0) }, ran(Outcome::Failed));
        let AttemptWrite::Fail { finish, .. } = d.write else { panic!("{d:?}") };
        assert_eq!((finish.error.as_deref(), finish.cause), (Some("boom"), None));
    }
}
