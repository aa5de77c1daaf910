//! The kernel process's life: starting it (retrying a TCP start that lost a port race), the
//! handles that interrupt or kill it from another thread, and killing it so that nothing of its
//! process group is left. Its end is observed by a waiter thread peeking with
//! `waitid(WNOWAIT)`, so the pid stays reserved until the owner reaps it.

use std::fs;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;
use serde_json::Value;
use tokio::sync::watch;

use super::client::Channels;
use super::error::lost_port_race;
use super::spawn::{ipc_fits, prepare_runtime_dir, read_tail, start_once};
use super::{KernelConfig, KernelError, KernelTransport, OutputLimits};

/// Starts on TCP that lost a port race are retried this many times in all, with new ports.
const TCP_ATTEMPTS: usize = 3;

/// How the kernel process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitInfo {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
}

/// What the kernel and its handles share: whether the leader was reaped (after which no signal
/// may be sent: its pid may belong to someone else) and whether a handle cancelled it.
#[derive(Debug)]
pub(super) struct Shared {
    pid: i32,
    reaped: Mutex<bool>,
    pub(super) cancelled: AtomicBool,
}

impl Shared {
    /// Signals the group unless the leader was reaped; the lock keeps reaping from racing it.
    fn signal_group(&self, signal: Signal) {
        let reaped = self.reaped.lock().unwrap_or_else(PoisonError::into_inner);
        if !*reaped {
            let _ = killpg(Pid::from_raw(self.pid), signal);
        }
    }
}

/// A handle to interrupt or kill the kernel from another thread while [`ScratchKernel::execute`]
/// runs (Ctrl-C, a daemon's cancel). Safe to keep after the kernel is gone: it then does nothing.
#[derive(Debug, Clone)]
pub struct KernelHandle {
    shared: Arc<Shared>,
}

impl KernelHandle {
    /// SIGINT to the kernel's process group.
    pub fn interrupt(&self) {
        self.shared.signal_group(Signal::SIGINT);
    }

    /// SIGKILL to the kernel's process group; a running `execute` returns `Cancelled` promptly
    /// (the owner reaps the process).
    pub fn kill(&self) {
        self.shared.cancelled.store(true, Ordering::SeqCst);
        self.shared.signal_group(Signal::SIGKILL);
    }

    pub fn pid(&self) -> u32 {
        self.shared.pid as u32
    }
}

/// A running scratch kernel. Killed (the whole process group) on [`ScratchKernel::kill`] and drop.
pub struct ScratchKernel {
    // `channels` is dropped inside the runtime's context (see Drop), before `rt`.
    pub(super) channels: Option<Channels>,
    pub(super) rt: tokio::runtime::Runtime,
    pub(super) child: Child,
    pub(super) pid: u32,
    pub(super) shared: Arc<Shared>,
    pub(super) exit_rx: watch::Receiver<Option<ExitInfo>>,
    /// Set once the leader is reaped; no signal is sent after that (its pid may be reused).
    pub(super) reaped: Option<ExitInfo>,
    /// The connection file and IPC sockets, removed on kill.
    pub(super) files: Vec<PathBuf>,
    pub(super) log_path: PathBuf,
    pub(super) kernel_info: Value,
    pub(super) transport: KernelTransport,
    pub(super) limits: OutputLimits,
    pub(super) grace: Duration,
    pub(super) startup: Duration,
}

impl std::fmt::Debug for ScratchKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScratchKernel")
            .field("pid", &self.pid)
            .field("transport", &self.transport)
            .field("reaped", &self.reaped)
            .finish_non_exhaustive()
    }
}

/// Whether `python` can import ipykernel (a quick check, without starting a kernel).
pub fn python_has_ipykernel(python: &Path) -> bool {
    let child = Command::new(python)
        .args(["-c", "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('ipykernel') else 3)"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = child else { return false };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.success(),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
        }
    }
}

impl ScratchKernel {
    /// Spawns `python -m ipykernel_launcher -f <conn.json>` and waits for its kernel_info_reply
    /// (and for iopub to be subscribed, so no output of the first cell is lost).
    pub fn start(cfg: &KernelConfig) -> Result<ScratchKernel, KernelError> {
        prepare_runtime_dir(&cfg.runtime_dir)?;
        if !cfg.workdir.is_dir() {
            return Err(KernelError::Workdir { path: cfg.workdir.clone() });
        }
        let transport = match cfg.transport {
            KernelTransport::Auto if ipc_fits(&cfg.runtime_dir) => KernelTransport::Ipc,
            KernelTransport::Auto => KernelTransport::Tcp,
            t => t,
        };
        let attempts = if transport == KernelTransport::Tcp { TCP_ATTEMPTS } else { 1 };
        let mut last = None;
        for _ in 0..attempts {
            match start_once(cfg, transport) {
                Ok(k) => return Ok(k),
                Err(e) if transport == KernelTransport::Tcp && lost_port_race(&e) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| KernelError::Internal("no start attempt was made".into())))
    }

    /// Takes charge of a kernel process just spawned: a thread reports its end, and a runtime
    /// runs the client. If either cannot start, the kernel's group is killed and reaped.
    pub(super) fn adopt(
        child: Child,
        cfg: &KernelConfig,
        transport: KernelTransport,
        files: Vec<PathBuf>,
        log_path: PathBuf,
    ) -> Result<ScratchKernel, KernelError> {
        let pid = child.id();
        let abandon = |mut child: Child, what: &str, e: &dyn std::fmt::Display| {
            let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
            let _ = child.wait();
            KernelError::Internal(format!("{what}: {e}"))
        };
        let exit_rx = match spawn_waiter(pid) {
            Ok(rx) => rx,
            Err(e) => return Err(abandon(child, "start the thread that waits on the kernel", &e)),
        };
        let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt,
            Err(e) => return Err(abandon(child, "start the client runtime", &e)),
        };
        Ok(ScratchKernel {
            channels: None,
            rt,
            child,
            pid,
            shared: Arc::new(Shared { pid: pid as i32, reaped: Mutex::new(false), cancelled: AtomicBool::new(false) }),
            exit_rx,
            reaped: None,
            files,
            log_path,
            kernel_info: Value::Null,
            transport,
            limits: cfg.output_limits,
            grace: cfg.interrupt_grace,
            startup: Duration::ZERO,
        })
    }

    /// The kernel's process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// A handle to interrupt or kill this kernel from another thread.
    pub fn handle(&self) -> KernelHandle {
        KernelHandle { shared: Arc::clone(&self.shared) }
    }

    /// The transport in use (never `Auto`).
    pub fn transport(&self) -> KernelTransport {
        self.transport
    }

    /// The kernel's kernel_info_reply content (language_info, implementation version, ...).
    pub fn kernel_info(&self) -> &Value {
        &self.kernel_info
    }

    /// Time from spawn to the kernel_info_reply.
    pub fn startup_duration(&self) -> Duration {
        self.startup
    }

    /// The file holding the kernel's stdout and stderr.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The last few KiB of the kernel's stdout and stderr.
    pub fn stderr_tail(&self) -> String {
        read_tail(&self.log_path)
    }

    /// How the kernel ended, if it has.
    pub fn exit_info(&self) -> Option<ExitInfo> {
        self.reaped.or(*self.exit_rx.borrow())
    }

    /// Sends SIGINT to the kernel's process group (ipykernel turns it into KeyboardInterrupt).
    pub fn interrupt(&self) {
        self.shared.signal_group(Signal::SIGINT);
    }

    /// SIGKILL to the whole process group, then reap the kernel. Idempotent; also done on drop.
    pub fn kill(&mut self) {
        if self.reaped.is_some() {
            return;
        }
        // Held until the leader is reaped, so a handle never signals a reused pid.
        let shared = Arc::clone(&self.shared);
        let mut reaped = shared.reaped.lock().unwrap_or_else(PoisonError::into_inner);
        let pgid = Pid::from_raw(self.pid as i32);
        let _ = killpg(pgid, Signal::SIGKILL);
        // Wait for the leader without reaping it: while it is a zombie its pid (and so the group
        // id) cannot be reused, so a second SIGKILL reaches only processes of this group, such as
        // one forked while the first signal was delivered.
        while let Err(Errno::EINTR) = waitid(Id::Pid(pgid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {}
        let _ = killpg(pgid, Signal::SIGKILL);
        // SIGKILL is delivered asynchronously: wait until no member of the group still runs, so
        // that "killed" means gone when this returns.
        wait_group_dead(self.pid as i32, Duration::from_secs(2));
        let info = match self.child.wait() {
            Ok(status) => ExitInfo { exit_code: status.code(), signal: status.signal() },
            // Reaped elsewhere (cannot happen unless someone waits on all children): use what
            // the waiter saw.
            Err(_) => self.exit_rx.borrow().unwrap_or(ExitInfo { exit_code: None, signal: None }),
        };
        self.reaped = Some(info);
        *reaped = true;
        for f in &self.files {
            let _ = fs::remove_file(f);
        }
    }
}

impl Drop for ScratchKernel {
    fn drop(&mut self) {
        self.kill();
        let _guard = self.rt.enter();
        self.channels.take();
    }
}

/// Whether a process other than a zombie is in process group `pgid`.
fn group_has_live_member(pgid: i32) -> bool {
    crate::procfs::pids().into_iter().filter_map(crate::procfs::stat).any(|s| s.pgrp == pgid && !s.is_dead())
}

/// Waits (bounded) until every process of the group has died; zombies count as dead.
fn wait_group_dead(pgid: i32, limit: Duration) {
    let deadline = Instant::now() + limit;
    // ESRCH: the group is empty. Otherwise it may hold only zombies, which /proc tells apart.
    while killpg(Pid::from_raw(pgid), None).is_ok() && group_has_live_member(pgid) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(1));
    }
}

/// Watches the kernel process: reports its end as soon as it happens, without reaping it.
fn spawn_waiter(pid: u32) -> io::Result<watch::Receiver<Option<ExitInfo>>> {
    let (tx, rx) = watch::channel(None);
    thread::Builder::new().name(format!("cairn-kernel-wait-{pid}")).spawn(move || {
        let info = loop {
            match waitid(Id::Pid(Pid::from_raw(pid as i32)), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
                Ok(WaitStatus::Exited(_, code)) => break ExitInfo { exit_code: Some(code), signal: None },
                Ok(WaitStatus::Signaled(_, sig, _)) => break ExitInfo { exit_code: None, signal: Some(sig as i32) },
                Err(Errno::EINTR) => continue,
                // Reaped by `kill` first (ECHILD) or an unexpected status: the owner knows better.
                _ => return,
            }
        };
        let _ = tx.send(Some(info));
    })?;
    Ok(rx)
}
