//! A verification in progress, as every process of the state root sees it: whoever runs it (the
//! daemon, or `cairn verify` in its own process) keeps `live.json` beside its scratch kernel
//! (`kernels/<id>/`), with its owner, its kernel and how many cells are done; a person stops it
//! by writing `stop` there (`interrupt`: no further cell, the running one interrupted, then killed
//! after a grace; `kill`: at once), which the verifying process watches for.
//!
//! **Invariant:** a verification is listed only while its owner process is alive; one whose
//! owner died has its kernel stopped by whoever asks to stop it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cairn_exec::ProcessIdentity;
use cairn_exec::kernel::KernelHandle;
use serde::{Deserialize, Serialize};

use crate::Engine;
use crate::process::{Owner, is_alive};

/// How long an interrupted cell has to end before its kernel is killed.
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(2);

/// How often the verifying process looks for a stop request.
const WATCH_EVERY: Duration = Duration::from_millis(100);

const LIVE: &str = "live.json";
const STOP: &str = "stop";

/// A verification in progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveVerification {
    pub verification_id: String,
    pub title: String,
    pub document: String,
    pub owner_pid: u32,
    pub owner_start_time: u64,
    pub kernel_pid: u32,
    pub kernel_start_time: Option<u64>,
    /// Code cells that have ended (run, skipped or failed), of `cells_total`.
    pub cells_done: usize,
    pub cells_total: usize,
    /// Unix milliseconds.
    pub started_at: i64,
}

/// How to stop a verification in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopHow {
    /// No further cell; the running one gets KeyboardInterrupt, and its kernel is killed if it
    /// has not ended within [`INTERRUPT_GRACE`].
    Interrupt,
    /// Its kernel killed at once (a restart of the kernel).
    Kill,
}

impl StopHow {
    fn word(self) -> &'static str {
        match self {
            StopHow::Interrupt => "interrupt",
            StopHow::Kill => "kill",
        }
    }
}

/// What the verifying process shares with the thread that watches for a stop.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    /// A person asked for a stop: no further cell is sent.
    pub stopped: AtomicBool,
    /// Cells that ended, so the watcher tells an interrupted cell that ended from one that hangs.
    pub ended: AtomicUsize,
    pub done: AtomicBool,
}

/// Ends the watch and unlists the verification when it is dropped, after its verdict is recorded
/// or on any early return: its kernel's runtime directory (with `live.json`) goes.
pub(crate) struct Listed {
    pub watch: Arc<Watch>,
    pub runtime_dir: PathBuf,
}

impl Drop for Listed {
    fn drop(&mut self) {
        self.watch.done.store(true, Ordering::SeqCst);
        let _ = std::fs::remove_dir_all(&self.runtime_dir);
    }
}

impl Engine {
    fn kernels_dir(&self) -> PathBuf {
        self.state.path().join("kernels")
    }

    /// Records (or updates) a verification in progress beside its kernel. Best effort: progress
    /// that cannot be written leaves the verification itself unaffected.
    pub(crate) fn write_live(&self, runtime_dir: &Path, live: &LiveVerification) {
        // Renamed into place, so a reader never sees half of it; no fsync: after a power loss the
        // verification is gone anyway.
        if let Ok(bytes) = serde_json::to_vec(live) {
            let tmp = runtime_dir.join(".live.json.tmp");
            if std::fs::write(&tmp, bytes).is_ok() {
                let _ = std::fs::rename(&tmp, runtime_dir.join(LIVE));
            }
        }
    }

    /// Every `live.json` of this state root: its directory, what it says, and whether its owner
    /// is alive.
    fn live_entries(&self) -> Vec<(PathBuf, LiveVerification, bool)> {
        let Ok(dir) = std::fs::read_dir(self.kernels_dir()) else { return Vec::new() };
        dir.flatten()
            .filter_map(|e| {
                let live: LiveVerification = serde_json::from_slice(&std::fs::read(e.path().join(LIVE)).ok()?).ok()?;
                let alive = is_alive(&Owner { pid: live.owner_pid, start_time: live.owner_start_time });
                Some((e.path(), live, alive))
            })
            .collect()
    }

    /// The verifications in progress on this state root, oldest first (those whose owner is
    /// alive).
    pub fn live_verifications(&self) -> Vec<LiveVerification> {
        let mut out: Vec<LiveVerification> =
            self.live_entries().into_iter().filter(|(_, _, alive)| *alive).map(|(_, l, _)| l).collect();
        out.sort_by_key(|l| l.started_at);
        out
    }

    /// One verification in progress, by its id.
    pub fn live_verification(&self, id: &str) -> Option<LiveVerification> {
        let bytes = std::fs::read(self.kernels_dir().join(id).join(LIVE)).ok()?;
        let live: LiveVerification = serde_json::from_slice(&bytes).ok()?;
        is_alive(&Owner { pid: live.owner_pid, start_time: live.owner_start_time }).then_some(live)
    }

    /// Asks every verification in progress to stop; returns their ids. One whose owner died
    /// without cleaning up is settled here instead.
    pub fn stop_verifications(&self, how: StopHow) -> Vec<String> {
        let mut stopped = Vec::new();
        for (dir, live, alive) in self.live_entries() {
            if alive {
                // Into the directory as it is: one that just finished is not made again.
                let _ = std::fs::write(dir.join(STOP), how.word());
                stopped.push(live.verification_id);
            } else {
                self.settle_orphan(&dir, &live);
            }
        }
        stopped
    }

    /// Settles every verification whose process died mid-run (a kill -9): its kernel, which
    /// leads its own process group and so outlived it, is stopped (verified by pid and start
    /// time), its record ends `died`, and its directory goes.
    pub(crate) fn reap_orphan_verifications(&self) {
        self.reap_orphan_spares();
        for (dir, live, alive) in self.live_entries() {
            if !alive {
                self.settle_orphan(&dir, &live);
            }
        }
    }

    fn settle_orphan(&self, dir: &Path, live: &LiveVerification) {
        if live.kernel_start_time.is_some() {
            let kernel =
                ProcessIdentity { pid: live.kernel_pid, pgid: live.kernel_pid, start_time: live.kernel_start_time };
            cairn_exec::terminate_if_same(&kernel, INTERRUPT_GRACE);
        }
        if let Ok(Some(mut record)) = self.store.verification(&live.verification_id)
            && record.verdict.is_none()
        {
            record.verdict = Some(cairn_core::verification::Verdict::Died.as_str().into());
            record.error = Some("the process verifying it was killed mid-run; its kernel was stopped after it".into());
            record.finished_at = Some(self.clock.now_ms());
            let _ = self.store.finish_verification(&record);
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Watches `runtime_dir` for a stop request until the verification is done: an interrupt stops
/// further cells and interrupts the running one, then kills the kernel if that cell has not
/// ended within the grace; a kill kills it at once.
pub(crate) fn watch_for_stop(runtime_dir: PathBuf, kernel: KernelHandle, watch: Arc<Watch>) {
    std::thread::spawn(move || {
        while !watch.done.load(Ordering::SeqCst) {
            std::thread::sleep(WATCH_EVERY);
            let Ok(how) = std::fs::read_to_string(runtime_dir.join(STOP)) else { continue };
            let _ = std::fs::remove_file(runtime_dir.join(STOP));
            watch.stopped.store(true, Ordering::SeqCst);
            if how.trim() == StopHow::Kill.word() {
                kernel.kill();
                continue;
            }
            let ended = watch.ended.load(Ordering::SeqCst);
            kernel.interrupt();
            let deadline = Instant::now() + INTERRUPT_GRACE;
            while Instant::now() < deadline && watch.ended.load(Ordering::SeqCst) == ended {
                if watch.done.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if watch.ended.load(Ordering::SeqCst) == ended && !watch.done.load(Ordering::SeqCst) {
                kernel.kill();
            }
        }
    });
}
