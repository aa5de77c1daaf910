//! Stopping a process group that an earlier, crashed runner left behind, but only after proving
//! it is the recorded process: a pid alone may have been reused by an unrelated program.

use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::sandbox::{ProcessIdentity, process_start_time};

/// Whether the recorded process is still alive as the same process (pid and start time match). A
/// zombie is dead: it runs nothing and only waits for its parent to reap it.
pub fn is_same_process(p: &ProcessIdentity) -> bool {
    if is_zombie(p.pid) {
        return false;
    }
    match (process_start_time(p.pid), p.start_time) {
        (Some(now), Some(then)) => now == then,
        // Without a recorded start time we cannot prove identity: treat it as someone else.
        _ => false,
    }
}

fn is_zombie(pid: u32) -> bool {
    crate::procfs::stat(pid).is_some_and(|s| s.is_dead())
}

/// The process-group leaders (alive, not zombies) one of whose arguments starts with `prefix`:
/// how a process is found whose pid was never recorded (its start was cut short by a crash), by
/// a path only it was given.
pub fn leaders_naming(prefix: &std::path::Path) -> Vec<ProcessIdentity> {
    let prefix = prefix.as_os_str().as_encoded_bytes();
    crate::procfs::pids()
        .into_iter()
        .filter(|pid| {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
            cmdline.split(|b| *b == 0).any(|arg| arg.starts_with(prefix))
        })
        .filter_map(|pid| {
            let stat = crate::procfs::stat(pid).filter(|s| !s.is_dead() && s.pgrp == pid as i32)?;
            Some(ProcessIdentity { pid, pgid: pid, start_time: Some(stat.start_time) })
        })
        .collect()
}

/// Terminates the recorded process group (SIGTERM, `grace`, SIGKILL) if the leader is verifiably
/// the recorded process. Returns whether it was found alive and stopped.
pub fn terminate_if_same(p: &ProcessIdentity, grace: Duration) -> bool {
    if !is_same_process(p) {
        return false;
    }
    let pgid = Pid::from_raw(p.pgid as i32);
    let _ = killpg(pgid, Signal::SIGTERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if !is_same_process(p) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // The group may hold children the leader left behind; SIGKILL all of it.
    let _ = killpg(pgid, Signal::SIGKILL);
    true
}

/// SIGKILL to a group this process started and has not yet reaped (so its id cannot have been
/// reused): used when a stop arrives while the attempt was being launched.
pub fn kill_own_group(pgid: u32) {
    let _ = killpg(Pid::from_raw(pgid as i32), Signal::SIGKILL);
}
