//! The processes the tests start, watch and clean up after: `/proc`, signals, and waiting with a
//! deadline, for a condition or for a child to exit.

use std::io::Read;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

/// Waits until `f` holds, polling; false after `timeout`.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// The fields of `/proc/PID/stat` after the command (`state ppid pgrp …`); `None` once the
/// process is reaped.
pub fn stat(pid: i32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command, in parentheses, may hold spaces and parentheses itself.
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// The state letter of a process (`Z` for a zombie); `None` once it is reaped.
pub fn proc_state(pid: i32) -> Option<String> {
    stat(pid)?.into_iter().next()
}

/// Whether a process is alive (a zombie counts as dead: it runs nothing and only awaits reaping).
pub fn alive(pid: i32) -> bool {
    !matches!(proc_state(pid).as_deref(), Some("Z") | Some("X") | None)
}

/// Every process of the machine, this one included, by pid.
pub fn pids() -> Vec<i32> {
    let Ok(proc) = std::fs::read_dir("/proc") else { return Vec::new() };
    proc.flatten().filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok())).collect()
}

/// A process's command line, its arguments joined by spaces (empty once it is gone).
pub fn cmdline(pid: i32) -> String {
    String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default()).replace('\0', " ")
}

/// Every live process but this one, with its command line.
pub fn processes() -> Vec<(i32, String)> {
    let me = std::process::id() as i32;
    pids().into_iter().filter(|p| *p != me && alive(*p)).map(|p| (p, cmdline(p))).collect()
}

/// A process for a failure message: its pid and command line.
pub fn describe_pid(pid: i32) -> String {
    format!("{pid}: {}", cmdline(pid))
}

/// SIGKILLs a process group left behind by a test (best effort; used for cleanup only).
pub fn kill_group(pid: i32) {
    let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
}

/// SIGKILLs a process this test did not start (a daemon) and waits until it is dead: until then
/// it still looks alive, and a `cairn daemon start` would take it for the running daemon.
pub fn kill9_pid(pid: i32) {
    kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    assert!(wait_until(Duration::from_secs(10), || !alive(pid)), "{} survived SIGKILL", describe_pid(pid));
}

/// Kills the given cairn process with SIGKILL and reaps it.
pub fn kill9(child: &mut Child) {
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9), "{status:?}");
}

/// What a spawned process did, once it ended.
#[derive(Debug)]
pub struct Exited {
    /// `None` when it died by a signal, which includes being killed for not exiting in time.
    pub code: Option<i32>,
    /// Whether it was SIGKILLed for not exiting in time.
    pub timed_out: bool,
    /// What it wrote to its stdout and stderr, when they were piped.
    pub stdout: String,
    pub stderr: String,
}

/// Waits up to `timeout` for a spawned process to exit, SIGKILLing and reaping it when it does
/// not; then reads what it wrote to its pipes. It never panics, so a `Drop` may call it while a
/// failed test unwinds.
pub fn wait_exit(child: &mut Child, timeout: Duration) -> Exited {
    let mut status = None;
    wait_until(timeout, || {
        status = child.try_wait().ok().flatten();
        status.is_some()
    });
    let timed_out = status.is_none();
    if timed_out {
        let _ = child.kill();
        status = child.wait().ok();
    }
    let (stdout, stderr) = (drain(child.stdout.take()), drain(child.stderr.take()));
    Exited { code: status.and_then(|s| s.code()), timed_out, stdout, stderr }
}

/// What is left to read in a child's pipe (empty when it was not piped).
fn drain(pipe: Option<impl Read>) -> String {
    let mut bytes = Vec::new();
    if let Some(mut p) = pipe {
        let _ = p.read_to_end(&mut bytes);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// SIGKILLs what is left of the kernels of the state root `home`, and their process groups
/// (cleanup after a failed test).
pub fn kill_kernels(home: &Path) {
    for pid in kernel_processes(home) {
        kill_group(pid);
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// Live (non-zombie) processes of a kernel of the state root `home`: a kernel runs
/// `ipykernel_launcher -f $CAIRN_HOME/kernels/<id>/kernel-*.json` with `IPYTHONDIR` under that
/// directory, which what it starts inherits.
pub fn kernel_processes(home: &Path) -> Vec<i32> {
    let mut needles = vec![home.to_string_lossy().into_owned()];
    if let Ok(c) = home.canonicalize() {
        needles.push(c.to_string_lossy().into_owned());
    }
    let mut found = Vec::new();
    for (pid, cmdline) in processes() {
        let environ =
            String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default()).into_owned();
        let under_home = needles.iter().any(|n| cmdline.contains(n.as_str()));
        let kernel_env = needles.iter().any(|n| environ.contains(&format!("IPYTHONDIR={n}")));
        if under_home && (cmdline.contains("ipykernel_launcher") || cmdline.contains("/kernels/")) || kernel_env {
            found.push(pid);
        }
    }
    found
}
