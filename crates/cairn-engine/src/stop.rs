//! Asking a run in progress to stop, from another thread: a cancel (the run ends CANCELLED) or a
//! shutdown of its daemon (the run is left as it is, to be recovered by the next daemon).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

/// Why a run stops early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopKind {
    /// An operator cancelled the run: it is finalised CANCELLED by whoever cancelled it.
    Cancel,
    /// The daemon is stopping: nothing more is written, and the step left RUNNING is resumed as
    /// interrupted by the next daemon.
    Shutdown,
}

/// Shared between the thread executing a run and whoever may stop it. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct StopSignal(Arc<AtomicU8>);

impl StopSignal {
    pub fn new() -> StopSignal {
        StopSignal::default()
    }

    /// Requests a stop; the first request wins (a cancel is not turned into a shutdown).
    pub fn request(&self, kind: StopKind) {
        let code = match kind {
            StopKind::Cancel => 1,
            StopKind::Shutdown => 2,
        };
        let _ = self.0.compare_exchange(0, code, Ordering::SeqCst, Ordering::SeqCst);
    }

    pub fn requested(&self) -> Option<StopKind> {
        match self.0.load(Ordering::SeqCst) {
            1 => Some(StopKind::Cancel),
            2 => Some(StopKind::Shutdown),
            _ => None,
        }
    }
}
