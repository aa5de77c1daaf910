//! Runs held by a fault of their environment ([`cairn_core::waiting`]): which runs wait, why and
//! since when, as every surface shows them; the durable `run.waiting` / `run.continued` events,
//! written once the registry takes them. The daemon's pool and heartbeat decide when to try again
//! ([`crate::Service`]); this keeps the facts.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use cairn_core::event::RunEvent;
use cairn_core::ids::RunId;
use cairn_core::waiting::Waiting;

use crate::{Engine, EngineError, ErrorKind};

/// Whether `e` is a fault of the environment (the registry's disk or database, a target) that may
/// clear by itself, rather than something to fix.
pub fn is_environment_fault(e: &EngineError) -> bool {
    e.kind() == ErrorKind::Unavailable
}

#[derive(Default)]
pub(crate) struct Waits(Mutex<HashMap<RunId, Hold>>);

struct Hold {
    waiting: Waiting,
    /// Its `run.waiting` event is in the log.
    recorded: bool,
    /// Tried again (the registry took its `run.continued`): no longer shown, kept so a fault that
    /// comes back waits longer.
    retrying: bool,
}

impl Waits {
    fn lock(&self) -> MutexGuard<'_, HashMap<RunId, Hold>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Engine {
    /// The wait `run_id` is in, if this process's daemon holds it waiting for its environment.
    pub fn waiting(&self, run_id: &RunId) -> Option<Waiting> {
        self.waits.lock().get(run_id).filter(|h| !h.retrying).map(|h| h.waiting.clone())
    }

    /// `run_id` could not go on for `e`, a fault of its environment: it waits (or, tried again and
    /// failed again, before or after it could continue, waits longer), shown at once; its `run.waiting` is written if the registry
    /// takes it now, else when the wait ends.
    pub(crate) fn hold_waiting(&self, run_id: &RunId, e: &EngineError) -> Waiting {
        let now = self.now_ms();
        let (code, reason) = (e.code().as_str(), e.to_string());
        let waiting = {
            let mut waits = self.waits.lock();
            let hold = match waits.remove(run_id) {
                Some(h) if h.retrying => {
                    Hold { waiting: h.waiting.failed_again(code, &reason, now), recorded: false, retrying: false }
                }
                Some(h) => Hold { waiting: h.waiting.failed_again(code, &reason, now), ..h },
                None => Hold { waiting: Waiting::began(code, &reason, now), recorded: false, retrying: false },
            };
            let waiting = hold.waiting.clone();
            waits.insert(run_id.clone(), hold);
            waiting
        };
        if !self.waiting_recorded(run_id) {
            let event = RunEvent::RunWaiting { code: code.to_string(), reason: reason.clone(), since: now };
            if matches!(self.store.note_run(run_id, &[event], now), Ok(true)) {
                self.mark_waiting_recorded(run_id);
            }
        }
        if code == crate::ErrorCode::QuotaQueued.as_str() {
            tracing::debug!("run {run_id} stays queued (try {}): {reason}", waiting.tries);
        } else {
            tracing::warn!(
                "run {run_id} waits for its environment (try {}; next in {} ms): {reason}",
                waiting.tries,
                waiting.next_try_at - now
            );
        }
        self.commits.bump();
        waiting
    }

    fn waiting_recorded(&self, run_id: &RunId) -> bool {
        self.waits.lock().get(run_id).is_some_and(|h| h.recorded)
    }

    fn mark_waiting_recorded(&self, run_id: &RunId) {
        if let Some(h) = self.waits.lock().get_mut(run_id) {
            h.recorded = true;
        }
    }

    /// The waiting runs whose next try is due.
    pub(crate) fn waits_due(&self) -> Vec<RunId> {
        let now = self.now_ms();
        let waits = self.waits.lock();
        waits.iter().filter(|(_, h)| !h.retrying && h.waiting.is_due(now)).map(|(id, _)| id.clone()).collect()
    }

    /// Ends `run_id`'s wait, if the registry takes it: its `run.waiting` (unless written already)
    /// and `run.continued` are written. `Ok(false)` when the run finished meanwhile. An error
    /// leaves it waiting.
    pub(crate) fn continue_after_wait(&self, run_id: &RunId) -> Result<bool, EngineError> {
        let Some((waiting, recorded)) = self.waits.lock().get(run_id).map(|h| (h.waiting.clone(), h.recorded)) else {
            return Ok(true);
        };
        let now = self.now_ms();
        let mut events = Vec::new();
        if !recorded {
            events.push(RunEvent::RunWaiting {
                code: waiting.code.clone(),
                reason: waiting.reason.clone(),
                since: waiting.since,
            });
        }
        events.push(RunEvent::RunContinued {
            since: waiting.since,
            waited_ms: now - waiting.since,
            tries: waiting.tries,
        });
        let open = self.store.note_run(run_id, &events, now)?;
        if let Some(h) = self.waits.lock().get_mut(run_id) {
            h.recorded = true;
            h.retrying = true;
        }
        tracing::info!("run {run_id} continues after waiting {} ms for its environment", now - waiting.since);
        self.commits.bump();
        Ok(open)
    }

    /// Runs held by a quota are tried at their next heartbeat, not after their backoff: a run
    /// ended, so a place may be free.
    pub(crate) fn wake_quota_waits(&self) {
        let now = self.now_ms();
        for hold in self.waits.lock().values_mut() {
            if hold.waiting.code == crate::ErrorCode::QuotaQueued.as_str() && !hold.retrying {
                hold.waiting.next_try_at = hold.waiting.next_try_at.min(now);
            }
        }
    }

    /// Whether `run_id` waits for a quota (not its environment).
    pub(crate) fn waits_for_quota(&self, run_id: &RunId) -> bool {
        self.waits
            .lock()
            .get(run_id)
            .is_some_and(|h| !h.retrying && h.waiting.code == crate::ErrorCode::QuotaQueued.as_str())
    }

    /// `run_id` no longer waits: it ended, was stopped, or went on without a fault.
    pub(crate) fn forget_waiting(&self, run_id: &RunId) {
        if self.waits.lock().remove(run_id).is_some_and(|h| !h.retrying) {
            self.commits.bump();
        }
    }
}
