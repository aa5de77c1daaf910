//! Asking work in progress to stop, from another thread: a cancel (a run ends CANCELLED, a
//! verification `interrupted`) or a shutdown of its daemon (a run is left as it is, to be
//! recovered by the next daemon). Work either polls [`StopSignal::requested`] between steps or
//! registers what stops it at once (killing a kernel) with [`StopSignal::on_request`].

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Why work stops early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopKind {
    /// An operator cancelled it (a run is finalised CANCELLED by whoever cancelled it).
    Cancel,
    /// The daemon is stopping: nothing more is written, and the step left RUNNING is resumed as
    /// interrupted by the next daemon.
    Shutdown,
    /// Another daemon took the run's lease over: nothing more is written here (the registry would
    /// refuse it), and the new holder resumes the step left RUNNING.
    LeaseLost,
}

type Hook = Box<dyn FnOnce(StopKind) + Send>;

#[derive(Default)]
struct Inner {
    state: AtomicU8,
    next_hook: AtomicU64,
    hooks: Mutex<Vec<(u64, Hook)>>,
}

/// Shared between the thread doing the work and whoever may stop it. Cheap to clone.
#[derive(Clone, Default)]
pub struct StopSignal(Arc<Inner>);

impl std::fmt::Debug for StopSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StopSignal").field(&self.requested()).finish()
    }
}

/// Keeps a hook of [`StopSignal::on_request`] registered; dropping it removes the hook.
#[must_use = "the hook is removed when this guard is dropped"]
pub struct StopHook {
    signal: StopSignal,
    id: u64,
}

impl Drop for StopHook {
    fn drop(&mut self) {
        self.signal.0.hooks.lock().unwrap_or_else(PoisonError::into_inner).retain(|(id, _)| *id != self.id);
    }
}

impl StopSignal {
    pub fn new() -> StopSignal {
        StopSignal::default()
    }

    /// Requests a stop; the first request wins (a cancel is not turned into a shutdown). The
    /// registered hooks run now, on this thread.
    pub fn request(&self, kind: StopKind) {
        let code = match kind {
            StopKind::Cancel => 1,
            StopKind::Shutdown => 2,
            StopKind::LeaseLost => 3,
        };
        if self.0.state.compare_exchange(0, code, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            let hooks = std::mem::take(&mut *self.0.hooks.lock().unwrap_or_else(PoisonError::into_inner));
            for (_, hook) in hooks {
                hook(kind);
            }
        }
    }

    pub fn requested(&self) -> Option<StopKind> {
        match self.0.state.load(Ordering::SeqCst) {
            1 => Some(StopKind::Cancel),
            2 => Some(StopKind::Shutdown),
            3 => Some(StopKind::LeaseLost),
            _ => None,
        }
    }

    /// Runs `hook` once when a stop is requested, or now if one was requested already, unless the
    /// returned guard was dropped first.
    pub fn on_request(&self, hook: impl FnOnce(StopKind) + Send + 'static) -> StopHook {
        let id = self.0.next_hook.fetch_add(1, Ordering::SeqCst);
        {
            let mut hooks = self.0.hooks.lock().unwrap_or_else(PoisonError::into_inner);
            // Checked under the lock `request` drains, so a hook is never registered after the
            // drain and missed.
            if self.requested().is_none() {
                hooks.push((id, Box::new(hook)));
                return StopHook { signal: self.clone(), id };
            }
        }
        if let Some(kind) = self.requested() {
            hook(kind);
        }
        StopHook { signal: self.clone(), id }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn hooks_run_once_on_the_first_request_and_not_after_their_guard_is_dropped() {
        let stop = StopSignal::new();
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        let _kept = stop.on_request(move |k| {
            assert_eq!(k, StopKind::Cancel);
            r.fetch_add(1, Ordering::SeqCst);
        });
        let r = ran.clone();
        drop(stop.on_request(move |_| {
            r.fetch_add(100, Ordering::SeqCst);
        }));
        stop.request(StopKind::Cancel);
        stop.request(StopKind::Shutdown);
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert_eq!(stop.requested(), Some(StopKind::Cancel));
        // Registered after the request: runs at once.
        let r = ran.clone();
        let _late = stop.on_request(move |_| {
            r.fetch_add(10, Ordering::SeqCst);
        });
        assert_eq!(ran.load(Ordering::SeqCst), 11);
    }
}
