//! Why a FAILED attempt failed, when what was seen where it ran says so. The adapter that ran it
//! observes (the tool's stderr tail, the free space of the filesystem holding its step directory
//! and its declared outputs: [`DiskSpace`]); [`cause_of`] judges, here, so the local sandbox and
//! the step agent's reports are read by one rule. A cause is recorded with the attempt's end and
//! the step (`cause`, beside `error`), and a step's `retry_on` can name its kind
//! ([`crate::status::RetryOn`]).
//!
//! The outcome classes stay five: a full disk is a FAILED attempt with a cause, not a sixth class,
//! so every reader of outcomes (exit codes, the validator, replay) sees what it always saw.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::status::{CauseKind, Outcome};

/// ENOSPC's `strerror`, as a tool that met it prints it (Python's `OSError`, coreutils, a shell).
pub const ENOSPC_TEXT: &str = "No space left on device";

/// One filesystem an attempt wrote to, as seen where it ran once it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskSpace {
    /// The filesystem's mount point: the disk a person frees space on.
    pub path: String,
    /// Bytes an unprivileged writer may still use (`f_bavail × f_frsize`).
    pub free_bytes: u64,
    /// Inodes an unprivileged writer may still use; `None` where the filesystem counts none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free_inodes: Option<u64>,
}

impl DiskSpace {
    /// No block or no inode is left: any write that needs one fails with ENOSPC.
    pub fn is_full(&self) -> bool {
        self.free_bytes == 0 || self.free_inodes == Some(0)
    }
}

/// What made a FAILED attempt fail. The JSON form is tagged by its kind, the name `retry_on`
/// uses: `{"kind": "NO_SPACE", …}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum Cause {
    #[serde(rename = "NO_SPACE")]
    NoSpace(NoSpace),
}

/// The tool's output disk was full (ENOSPC), by what was seen: the disk itself, its stderr, or
/// both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoSpace {
    /// The mount point of the full filesystem; when only the stderr said so, the one holding the
    /// step directory. `None` when no filesystem could be read.
    pub path: Option<String>,
    /// Its free bytes when the attempt ended.
    pub free_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free_inodes: Option<u64>,
    /// That filesystem had no block or no inode left.
    pub disk_full: bool,
    /// The tool's stderr tail says `No space left on device`.
    pub in_stderr: bool,
}

impl Cause {
    pub fn kind(&self) -> CauseKind {
        match self {
            Cause::NoSpace(_) => CauseKind::NoSpace,
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::NoSpace(n) => match (&n.path, n.free_bytes) {
                (Some(path), Some(free)) if n.disk_full => {
                    let left = if free > 0 && n.free_inodes == Some(0) {
                        format!("no inode free, {}", size(free))
                    } else {
                        format!("{} free", size(free))
                    };
                    write!(f, "ENOSPC on {path} ({left}): the tool's output disk is full")
                }
                // Its own disk has room now: it freed what it wrote, or the full disk was another
                // one (its TMPDIR), so the disk is named as a fact, not as the culprit.
                (Some(path), Some(free)) => write!(
                    f,
                    "ENOSPC: the tool's stderr says \"{ENOSPC_TEXT}\"; {path}, which holds its step directory, has {} \
                     free now",
                    size(free)
                ),
                _ => write!(f, "ENOSPC: the tool's stderr says \"{ENOSPC_TEXT}\""),
            },
        }
    }
}

/// The cause of an attempt that ended with `outcome`, from its stderr tail and the filesystems
/// it wrote to (the step directory's first). Only a FAILED attempt has one: a timeout, a refusal
/// by exit code or a completion is what the tool said it was. ENOSPC is named when the stderr
/// says so or when one of the filesystems is full.
pub fn cause_of(outcome: Outcome, stderr_tail: &str, disks: &[DiskSpace]) -> Option<Cause> {
    if outcome != Outcome::Failed {
        return None;
    }
    let in_stderr = stderr_tail.contains(ENOSPC_TEXT);
    let full = disks.iter().find(|d| d.is_full());
    if full.is_none() && !in_stderr {
        return None;
    }
    let disk = full.or(disks.first());
    Some(Cause::NoSpace(NoSpace {
        path: disk.map(|d| d.path.clone()),
        free_bytes: disk.map(|d| d.free_bytes),
        free_inodes: disk.and_then(|d| d.free_inodes),
        disk_full: full.is_some(),
        in_stderr,
    }))
}

/// An attempt's error with its cause first: what a person reads of the step.
pub fn explain(cause: &Cause, error: Option<&str>) -> String {
    match error {
        Some(e) => format!("{cause}; it {e}"),
        None => cause.to_string(),
    }
}

/// How long to wait before retrying an attempt that failed for `cause`, given how many attempts
/// of the step have ended so far (1 after the first). A full disk is freed by someone else (a
/// cleaner, a finishing job, a person), not in the microseconds an immediate retry would give
/// them: 1 s, doubling, at most 30 s. Other retries start at once, as they always did.
pub fn retry_delay_ms(cause: Option<&Cause>, finished: u32) -> u64 {
    match cause {
        Some(Cause::NoSpace(_)) => {
            let doublings = finished.saturating_sub(1).min(16);
            (NO_SPACE_FIRST_DELAY_MS << doublings).min(NO_SPACE_MAX_DELAY_MS)
        }
        None => 0,
    }
}

/// The first wait before retrying after a full disk.
pub const NO_SPACE_FIRST_DELAY_MS: u64 = 1_000;
/// The longest wait before retrying after a full disk.
pub const NO_SPACE_MAX_DELAY_MS: u64 = 30_000;

/// "0 bytes", "512 bytes", "1.5 MiB".
fn size(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    match bytes {
        1 => "1 byte".to_string(),
        b if b < 1024 => format!("{b} bytes"),
        b if b < 1 << 20 => format!("{:.1} KiB", b as f64 / KIB),
        b if b < 1 << 30 => format!("{:.1} MiB", b as f64 / (KIB * KIB)),
        b => format!("{:.1} GiB", b as f64 / (KIB * KIB * KIB)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn disk(path: &str, free_bytes: u64, free_inodes: Option<u64>) -> DiskSpace {
        DiskSpace { path: path.into(), free_bytes, free_inodes }
    }

    const TRACEBACK: &str = "Traceback (most recent call last):\nOSError: [Errno 28] No space left on device\n";

    #[test]
    fn a_failed_attempt_on_a_full_disk_is_no_space_naming_the_disk() {
        let disks = [disk("/runs/r1", 0, Some(100)), disk("/", 1 << 30, None)];
        let cause = cause_of(Outcome::Failed, "", &disks).expect("a full disk is a cause");
        assert_eq!(cause.kind(), CauseKind::NoSpace);
        assert_eq!(cause.to_string(), "ENOSPC on /runs/r1 (0 bytes free): the tool's output disk is full");
        assert_eq!(
            explain(&cause, Some("exited with code 1")),
            "ENOSPC on /runs/r1 (0 bytes free): the tool's output disk is full; it exited with code 1"
        );
        assert_eq!(
            serde_json::to_value(&cause).unwrap(),
            json!({"kind": "NO_SPACE", "path": "/runs/r1", "free_bytes": 0, "free_inodes": 100,
                   "disk_full": true, "in_stderr": false})
        );
        // The full one is named, whichever comes first; no inode left is full too.
        let Some(Cause::NoSpace(n)) = cause_of(Outcome::Failed, TRACEBACK, &[disk("/", 5, None), disk("/o", 0, None)])
        else {
            panic!()
        };
        assert_eq!((n.path.as_deref(), n.disk_full, n.in_stderr), (Some("/o"), true, true));
        let inodes = cause_of(Outcome::Failed, "", &[disk("/i", 8192, Some(0))]).unwrap();
        assert_eq!(inodes.to_string(), "ENOSPC on /i (no inode free, 8.0 KiB): the tool's output disk is full");
    }

    #[test]
    fn the_stderr_alone_names_enospc_and_the_step_disk_as_a_fact() {
        let cause = cause_of(Outcome::Failed, TRACEBACK, &[disk("/runs", 3 << 20, None)]).unwrap();
        assert_eq!(
            cause.to_string(),
            "ENOSPC: the tool's stderr says \"No space left on device\"; /runs, which holds its step directory, has \
             3.0 MiB free now"
        );
        let Cause::NoSpace(n) = cause_of(Outcome::Failed, TRACEBACK, &[]).unwrap();
        assert_eq!((n.path, n.disk_full, n.in_stderr), (None, false, true));
    }

    #[test]
    fn nothing_is_a_cause_unless_a_failed_attempt_met_a_full_disk() {
        let full = [disk("/runs", 0, None)];
        assert_eq!(cause_of(Outcome::Failed, "Traceback: KeyError 'x'", &[disk("/runs", 1, None)]), None);
        for outcome in [Outcome::Completed, Outcome::TimedOut, Outcome::Denied, Outcome::InvalidInput] {
            assert_eq!(cause_of(outcome, TRACEBACK, &full), None, "{outcome}");
        }
    }

    #[test]
    fn a_retry_after_a_full_disk_waits_a_bounded_doubling_time() {
        let cause = cause_of(Outcome::Failed, TRACEBACK, &[]);
        let waits: Vec<u64> = (1..=8).map(|n| retry_delay_ms(cause.as_ref(), n)).collect();
        assert_eq!(waits, [1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000]);
        assert_eq!(retry_delay_ms(cause.as_ref(), u32::MAX), NO_SPACE_MAX_DELAY_MS);
        assert_eq!(retry_delay_ms(None, 1), 0, "other retries start at once");
    }
}
