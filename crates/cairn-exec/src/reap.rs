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

/// How many times [`stop_carrying`] looks again: a process it stops may have started another
/// (which inherits the nonce) between the look and the signal; the next look finds that one.
const SWEEPS: usize = 8;

/// Stops every process on this host whose environment carries `name=value` (an attempt's nonce,
/// [`crate::NONCE_VAR`]): a process group whose leader carries it is stopped whole, a process
/// that left its attempt's group on its own; each SIGTERM, `grace`, then SIGKILL, as
/// [`terminate_if_same`] does, each checked by pid and start time before every signal. This
/// process and its own group are never signalled. Looks again until a look finds none (at most
/// [`SWEEPS`] times). Returns how many processes it found.
///
/// The nonce is what finds an attempt whose pid was never recorded (its runner killed between
/// the spawn and the commit recording it), so a successor stops it before starting the next.
pub fn stop_carrying(name: &str, value: &str, grace: Duration) -> usize {
    let entry = format!("{name}={value}");
    let mut found = 0;
    for _ in 0..SWEEPS {
        let carriers = carrying(entry.as_bytes());
        if carriers.is_empty() {
            break;
        }
        found += carriers.len();
        // A group is signalled only through its leader, and only when the leader carries the
        // nonce: a group id alone may be another program's once its leader is gone.
        let leaders: Vec<&ProcessIdentity> = carriers.iter().filter(|p| p.pid == p.pgid).collect();
        let strays: Vec<&ProcessIdentity> =
            carriers.iter().filter(|p| p.pid != p.pgid && !leaders.iter().any(|l| l.pgid == p.pgid)).collect();
        // `last`: the SIGKILL after the grace goes to the whole group even if its leader has
        // gone meanwhile, as `terminate_if_same`'s does: the group may hold what the leader left.
        let signal_all = |signal: Signal, last: bool| {
            for l in &leaders {
                if last || is_same_process(l) {
                    let _ = killpg(Pid::from_raw(l.pgid as i32), signal);
                }
            }
            for p in &strays {
                if is_same_process(p) {
                    let _ = nix::sys::signal::kill(Pid::from_raw(p.pid as i32), signal);
                }
            }
        };
        signal_all(Signal::SIGTERM, false);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && carriers.iter().any(is_same_process) {
            std::thread::sleep(Duration::from_millis(20));
        }
        signal_all(Signal::SIGKILL, true);
    }
    found
}

/// The live processes (not zombies) whose environment holds `entry`, other than this process
/// and the members of its group.
fn carrying(entry: &[u8]) -> Vec<ProcessIdentity> {
    let me = std::process::id();
    let my_group = crate::procfs::stat(me).map(|s| s.pgrp);
    crate::procfs::pids()
        .into_iter()
        .filter(|pid| *pid != me && crate::procfs::environ_has(*pid, entry))
        .filter_map(|pid| {
            let stat = crate::procfs::stat(pid).filter(|s| !s.is_dead() && Some(s.pgrp) != my_group)?;
            Some(ProcessIdentity { pid, pgid: u32::try_from(stat.pgrp).ok()?, start_time: Some(stat.start_time) })
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    /// A group whose leader carries the nonce, with a child that left it (`setsid`), is stopped
    /// whole; a process with another nonce is left alone.
    #[test]
    fn what_carries_the_nonce_is_stopped_and_nothing_else() {
        let spawn = |nonce: &str, script: &str| {
            std::process::Command::new("/bin/sh")
                .args(["-c", script])
                .env_clear()
                .env("PATH", "/usr/bin:/bin")
                .env(crate::NONCE_VAR, nonce)
                .process_group(0)
                .spawn()
                .unwrap()
        };
        let dir = tempfile::tempdir().unwrap();
        let stray = dir.path().join("stray.pid");
        let script = format!("setsid sh -c 'echo $$ > {}; exec sleep 30' & sleep 30", stray.display());
        let mut attempt = spawn("atn_stop_me", &script);
        let mut other = spawn("atn_keep_me", "sleep 30");
        let deadline = Instant::now() + Duration::from_secs(10);
        let stray_pid = loop {
            if let Some(pid) = std::fs::read_to_string(&stray).ok().and_then(|t| t.trim().parse::<u32>().ok()) {
                break pid;
            }
            assert!(Instant::now() < deadline, "the stray child never started");
            std::thread::sleep(Duration::from_millis(10));
        };
        let found = stop_carrying(crate::NONCE_VAR, "atn_stop_me", Duration::from_millis(500));
        assert!(found >= 2, "found {found}");
        let _ = attempt.wait();
        assert!(crate::procfs::stat(stray_pid).is_none_or(|s| s.is_dead()), "the stray survived");
        assert_eq!(other.try_wait().unwrap(), None, "another attempt's process was stopped");
        assert_eq!(stop_carrying(crate::NONCE_VAR, "atn_stop_me", Duration::from_millis(500)), 0);
        let _ = other.kill();
        let _ = other.wait();
    }
}
