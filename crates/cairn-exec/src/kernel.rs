//! A disposable ("scratch") ipykernel driven synchronously: spawn it in its own process group,
//! connect over the Jupyter protocol (IPC sockets in a private directory, TCP on 127.0.0.1 when
//! the directory's path is too long for a unix socket), run one execute request at a time, and
//! leave no process of its group behind.
//!
//! Death is observed by waiting on the child process (a waiter thread peeking with
//! `waitid(WNOWAIT)`, so the pid stays reserved until we reap it), never by heartbeat polling.
//! The ZeroMQ crates are async; a private current-thread tokio runtime runs them inside each call.

mod outputs;

pub use outputs::{OutputCollector, OutputLimits, truncation_marker};

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use jupyter_protocol::connection_info::{ConnectionInfo, Transport};
use jupyter_protocol::{ExecuteRequest, JupyterMessage, KernelInfoRequest};
use jupyter_zmq_client::{ClientIoPubConnection, ClientShellConnection, RawMessage};
use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;
use serde_json::Value;
use tokio::sync::watch;
use tokio::time::sleep_until;
use zeromq::SocketRecv as _;

/// Longest unix socket path (sun_path is 108 bytes with the NUL on Linux).
const MAX_IPC_PATH: usize = 107;

/// How long after the execute reply we still wait for the kernel's `idle` (and the outputs
/// before it); the wait restarts with every iopub message of the request.
const IDLE_AFTER_REPLY: Duration = Duration::from_millis(300);

/// After the kernel died, how long to keep draining output it sent just before.
const DRAIN_AFTER_DEATH: Duration = Duration::from_millis(10);

/// How often start-up checks whether the kernel has bound its sockets.
const BIND_POLL: Duration = Duration::from_millis(5);

/// Start-up re-sends kernel_info_request when no reply arrived within this (the first request
/// may be lost while the sockets connect) or when iopub stayed silent after a reply.
const KERNEL_INFO_RESEND: Duration = Duration::from_millis(500);

/// Starts on TCP that lost a port race are retried this many times in all, with new ports.
const TCP_ATTEMPTS: usize = 3;

/// Bytes of the kernel's stderr shown in a start-up error.
const STDERR_TAIL: u64 = 4096;

/// How the client and the kernel talk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KernelTransport {
    /// IPC when the socket paths fit (they do for a short `runtime_dir`), else TCP.
    #[default]
    Auto,
    Ipc,
    /// 127.0.0.1 with ports picked by the OS; a start that loses a port race is retried.
    Tcp,
}

/// Everything a scratch kernel is started with. Nothing is inherited from the caller.
#[derive(Debug, Clone)]
pub struct KernelConfig {
    /// An interpreter that has ipykernel (see [`python_has_ipykernel`]).
    pub python: PathBuf,
    /// The kernel's working directory; it exists.
    pub workdir: PathBuf,
    /// A private directory (created here with mode 0700) for the connection file, the IPC sockets
    /// and `kernel.log` (the kernel's stdout and stderr).
    pub runtime_dir: PathBuf,
    /// The complete environment of the kernel (nothing else is inherited). Include `PATH`, or
    /// `%%bash` and subprocesses will not find their programs. Unless it sets `IPYTHONDIR`, the
    /// kernel gets a fresh one under `runtime_dir`, so the user's IPython profile (startup files,
    /// config) does not run in the scratch kernel: nothing is pre-bound.
    pub env: Vec<(String, String)>,
    /// Bytes of address space (RLIMIT_AS) for the kernel and what it starts. RLIMIT_AS counts
    /// reservations, and glibc reserves 64 MiB per thread arena, so with a limit set the kernel
    /// gets `MALLOC_ARENA_MAX=2` unless `env` sets it: without it ipykernel (several threads)
    /// cannot even start under ~500 MB.
    pub memory_limit: Option<u64>,
    /// From spawn to the kernel's first kernel_info_reply.
    pub startup_timeout: Duration,
    /// After a cell's timeout, how long the interrupted kernel gets before its group is killed.
    pub interrupt_grace: Duration,
    pub transport: KernelTransport,
    pub output_limits: OutputLimits,
}

impl KernelConfig {
    /// A configuration with an empty environment, a 60 s start-up timeout, a 1 s interrupt grace,
    /// automatic transport and the default output caps (1 MiB per output, 8 MiB per cell).
    pub fn new(python: impl Into<PathBuf>, workdir: impl Into<PathBuf>, runtime_dir: impl Into<PathBuf>) -> Self {
        KernelConfig {
            python: python.into(),
            workdir: workdir.into(),
            runtime_dir: runtime_dir.into(),
            env: Vec::new(),
            memory_limit: None,
            startup_timeout: Duration::from_secs(60),
            interrupt_grace: Duration::from_secs(1),
            transport: KernelTransport::Auto,
            output_limits: OutputLimits::default(),
        }
    }
}

/// Why a kernel could not be started. Each message reads after "failed to start the kernel: ".
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("could not prepare the runtime directory {}: {source}", path.display())]
    RuntimeDir { path: PathBuf, source: io::Error },
    #[error("the working directory {} does not exist or is not a directory", path.display())]
    Workdir { path: PathBuf },
    #[error("could not run `{}`: {source}; check that the interpreter exists and is executable", python.display())]
    Spawn { python: PathBuf, source: io::Error },
    #[error(
        "the kernel process ({}) exited during start-up ({}){hint}{}",
        python.display(),
        describe_exit(exit_code, signal),
        stderr_section(stderr_tail)
    )]
    ExitedDuringStartup {
        python: PathBuf,
        exit_code: Option<i32>,
        signal: Option<i32>,
        /// What to do about it, when the cause is recognised ("" otherwise).
        hint: String,
        stderr_tail: String,
    },
    #[error(
        "the kernel did not answer kernel_info within {} ({}){}",
        human(*timeout),
        python.display(),
        stderr_section(stderr_tail)
    )]
    StartupTimeout { python: PathBuf, timeout: Duration, stderr_tail: String },
    #[error("could not talk to the kernel over {endpoint}: {reason}{}", stderr_section(stderr_tail))]
    Protocol { endpoint: String, reason: String, stderr_tail: String },
    #[error("could not set up the kernel client: {0}")]
    Internal(String),
}

impl KernelError {
    /// The tail of the kernel's stderr, when the error has one.
    pub fn stderr_tail(&self) -> Option<&str> {
        match self {
            KernelError::ExitedDuringStartup { stderr_tail, .. }
            | KernelError::StartupTimeout { stderr_tail, .. }
            | KernelError::Protocol { stderr_tail, .. } => Some(stderr_tail),
            _ => None,
        }
    }
}

fn stderr_section(tail: &str) -> String {
    let tail = tail.trim_end();
    if tail.is_empty() { String::new() } else { format!("; the kernel's stderr ends with:\n{tail}") }
}

fn describe_exit(code: &Option<i32>, signal: &Option<i32>) -> String {
    match (code, signal) {
        (_, Some(s)) => format!("killed by signal {s}"),
        (Some(c), None) => format!("exit code {c}"),
        (None, None) => "status unknown".to_string(),
    }
}

fn human(d: Duration) -> String {
    if d.as_millis().is_multiple_of(1000) { format!("{} s", d.as_secs()) } else { format!("{} ms", d.as_millis()) }
}

/// How the kernel process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitInfo {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
}

/// How one cell ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CellStatus {
    Ok,
    /// The code raised (or the request was aborted: `ename` "ExecutionAborted").
    Error {
        ename: String,
        evalue: String,
        traceback: Vec<String>,
    },
    /// The kernel process ended while the cell ran (or before it was sent).
    Died {
        exit_code: Option<i32>,
        signal: Option<i32>,
    },
    /// The cell exceeded its timeout; it was interrupted and then its process group was killed.
    TimedOut,
    /// The kernel's process lives but its sockets failed; it was killed. `reason` says what failed.
    Lost {
        reason: String,
    },
    /// [`KernelHandle::kill`] stopped the kernel while the cell ran.
    Cancelled,
}

/// What one execute request produced.
#[derive(Debug, Clone)]
pub struct CellRun {
    pub status: CellStatus,
    /// nbformat v4 output dicts (stream merged per name, display_data, execute_result, error),
    /// `transient` stripped, capped with visible markers.
    pub outputs: Vec<Value>,
    pub execution_count: Option<u32>,
    /// From sending the request to the cell's end (reply and idle, death, or the kill).
    pub duration: Duration,
}

struct Channels {
    shell: ClientShellConnection,
    iopub: ClientIoPubConnection,
    endpoint: String,
}

/// One message as received, its content parsed only when it concerns us.
struct Incoming {
    msg_type: String,
    parent_id: Option<String>,
    content: Value,
}

/// What the kernel and its handles share: whether the leader was reaped (after which no signal
/// may be sent: its pid may belong to someone else) and whether a handle cancelled it.
#[derive(Debug)]
struct Shared {
    pid: i32,
    reaped: Mutex<bool>,
    cancelled: AtomicBool,
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
    channels: Option<Channels>,
    rt: tokio::runtime::Runtime,
    child: Child,
    pid: u32,
    shared: Arc<Shared>,
    exit_rx: watch::Receiver<Option<ExitInfo>>,
    /// Set once the leader is reaped; no signal is sent after that (its pid may be reused).
    reaped: Option<ExitInfo>,
    /// The connection file and IPC sockets, removed on kill.
    files: Vec<PathBuf>,
    log_path: PathBuf,
    kernel_info: Value,
    transport: KernelTransport,
    limits: OutputLimits,
    grace: Duration,
    startup: Duration,
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

    /// Runs one cell: a single execute_request (allow_stdin=false, store_history=true,
    /// stop_on_error=true). `on_output` sees each output as it arrives (stream fragments
    /// unmerged). Never panics on kernel behaviour; after `Died`, `TimedOut` or `Lost` the kernel
    /// is gone and later calls return `Died` at once. On timeout the kernel's group gets SIGINT,
    /// then after `interrupt_grace` SIGKILL, whether or not the interrupt worked: a scratch kernel
    /// that overran is not reused.
    pub fn execute(&mut self, code: &str, timeout: Duration, on_output: &mut dyn FnMut(&Value)) -> CellRun {
        self.execute_as(code, timeout, false, on_output)
    }

    /// Runs code the notebook does not show: `silent=true`, `store_history=false`, so the
    /// execution count does not advance, `In`/`Out`/`_i` are untouched and no result is
    /// displayed. Otherwise as [`ScratchKernel::execute`] (an error is still reported).
    pub fn execute_silent(&mut self, code: &str, timeout: Duration) -> CellRun {
        self.execute_as(code, timeout, true, &mut |_| {})
    }

    fn execute_as(
        &mut self,
        code: &str,
        timeout: Duration,
        silent: bool,
        on_output: &mut dyn FnMut(&Value),
    ) -> CellRun {
        let started = Instant::now();
        if let Some(exit) = self.exit_info() {
            self.kill();
            return CellRun {
                status: died(self.reaped.unwrap_or(exit)),
                outputs: Vec::new(),
                execution_count: None,
                duration: started.elapsed(),
            };
        }
        let Some(channels) = self.channels.as_mut() else {
            self.kill();
            return CellRun {
                status: died(self.reaped.unwrap_or(ExitInfo { exit_code: None, signal: None })),
                outputs: Vec::new(),
                execution_count: None,
                duration: started.elapsed(),
            };
        };
        let ctx = CellContext { pgid: self.pid as i32, timeout, grace: self.grace, limits: self.limits, silent };
        let mut exit_rx = self.exit_rx.clone();
        let (end, outputs, execution_count) =
            self.rt.block_on(run_cell(channels, &mut exit_rx, &ctx, code, started, on_output));
        let status = match end {
            CellEnd::Reply(status) => status,
            CellEnd::Died if self.shared.cancelled.load(Ordering::SeqCst) => {
                self.kill();
                CellStatus::Cancelled
            }
            CellEnd::Died => {
                self.kill();
                died(self.reaped.or(*self.exit_rx.borrow()).unwrap_or(ExitInfo { exit_code: None, signal: None }))
            }
            CellEnd::TimedOut => {
                self.kill();
                CellStatus::TimedOut
            }
            CellEnd::Lost(reason) => {
                self.kill();
                CellStatus::Lost { reason }
            }
        };
        CellRun { status, outputs, execution_count, duration: started.elapsed() }
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

/// `t + d`, saturating at a far future instead of panicking on a huge timeout.
fn later(t: Instant, d: Duration) -> Instant {
    // Below tokio's timer range (about 2.2 years).
    const FAR: Duration = Duration::from_secs(365 * 24 * 3600);
    t.checked_add(d.min(FAR)).unwrap_or(t)
}

fn died(exit: ExitInfo) -> CellStatus {
    CellStatus::Died { exit_code: exit.exit_code, signal: exit.signal }
}

fn ipc_fits(runtime_dir: &Path) -> bool {
    // "<dir>/k-<8 hex>-<n>"
    runtime_dir.as_os_str().len() + "/k-00000000-5".len() <= MAX_IPC_PATH
}

fn prepare_runtime_dir(dir: &Path) -> Result<(), KernelError> {
    let err = |source| KernelError::RuntimeDir { path: dir.to_path_buf(), source };
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(err)?;
    // An existing directory may have been created with a wider mode.
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(err)?;
    Ok(())
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

/// `cfg.env` plus the defaults documented on [`KernelConfig`], which it may override.
fn kernel_env(cfg: &KernelConfig) -> Vec<(String, String)> {
    let mut env = cfg.env.clone();
    let has = |k: &str| cfg.env.iter().any(|(name, _)| name == k);
    if !has("IPYTHONDIR") {
        env.push(("IPYTHONDIR".into(), cfg.runtime_dir.join("ipython").to_string_lossy().into_owned()));
    }
    if cfg.memory_limit.is_some() && !has("MALLOC_ARENA_MAX") {
        env.push(("MALLOC_ARENA_MAX".into(), "2".into()));
    }
    env
}

/// A sentence for the causes of a failed start that we recognise.
fn startup_hint(cfg: &KernelConfig, stderr_tail: &str) -> String {
    if stderr_tail.contains("No module named ipykernel") {
        format!(
            "; this interpreter has no ipykernel: install it (`{} -m pip install ipykernel`) or use another interpreter",
            cfg.python.display()
        )
    } else if let Some(limit) = cfg.memory_limit {
        format!(
            "; it ran under a memory limit (RLIMIT_AS) of {} MiB, which may be too small for it to start: raise the limit",
            limit / (1024 * 1024)
        )
    } else {
        String::new()
    }
}

fn lost_port_race(e: &KernelError) -> bool {
    match e {
        KernelError::ExitedDuringStartup { stderr_tail, .. } => {
            stderr_tail.contains("Address already in use") || stderr_tail.contains("EADDRINUSE")
        }
        KernelError::Protocol { .. } => true,
        _ => false,
    }
}

fn read_tail(path: &Path) -> String {
    let Ok(mut f) = File::open(path) else { return String::new() };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(STDERR_TAIL);
    if f.seek(SeekFrom::Start(start)).is_err() {
        return String::new();
    }
    let mut buf = Vec::new();
    let _ = f.take(STDERR_TAIL).read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    if start > 0 {
        // Start at a line boundary.
        match text.find('\n') {
            Some(i) => text[i + 1..].to_string(),
            None => text,
        }
    } else {
        text
    }
}

/// Picks five free TCP ports on 127.0.0.1. The listeners are held until just before the spawn.
fn pick_ports() -> io::Result<(Vec<u16>, Vec<TcpListener>)> {
    let mut ports = Vec::new();
    let mut listeners = Vec::new();
    for _ in 0..5 {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        ports.push(l.local_addr()?.port());
        listeners.push(l);
    }
    Ok((ports, listeners))
}

fn start_once(cfg: &KernelConfig, transport: KernelTransport) -> Result<ScratchKernel, KernelError> {
    let internal = |what: &str, e: &dyn std::fmt::Display| KernelError::Internal(format!("{what}: {e}"));
    let tag = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let dir = &cfg.runtime_dir;
    let conn_path = dir.join(format!("kernel-{tag}.json"));
    let log_path = dir.join("kernel.log");
    let key = uuid::Uuid::new_v4().simple().to_string();
    let (info, listeners, mut files) = match transport {
        KernelTransport::Tcp | KernelTransport::Auto => {
            let (ports, listeners) = pick_ports().map_err(|e| internal("pick free TCP ports on 127.0.0.1", &e))?;
            let info = ConnectionInfo {
                ip: Ipv4Addr::LOCALHOST.to_string(),
                transport: Transport::TCP,
                shell_port: ports[0],
                iopub_port: ports[1],
                stdin_port: ports[2],
                control_port: ports[3],
                hb_port: ports[4],
                key,
                signature_scheme: "hmac-sha256".into(),
                kernel_name: Some("python3".into()),
            };
            (info, listeners, Vec::new())
        }
        KernelTransport::Ipc => {
            let prefix = dir.join(format!("k-{tag}"));
            let info = ConnectionInfo {
                ip: prefix.to_string_lossy().into_owned(),
                transport: Transport::IPC,
                shell_port: 1,
                iopub_port: 2,
                stdin_port: 3,
                control_port: 4,
                hb_port: 5,
                key,
                signature_scheme: "hmac-sha256".into(),
                kernel_name: Some("python3".into()),
            };
            let socks: Vec<PathBuf> = (1..=5).map(|n| PathBuf::from(format!("{}-{n}", info.ip))).collect();
            for s in &socks {
                let _ = fs::remove_file(s);
            }
            (info, Vec::new(), socks)
        }
    };
    let conn_json = serde_json::to_vec(&info).map_err(|e| internal("serialise the connection file", &e))?;
    write_private(&conn_path, &conn_json)
        .map_err(|source| KernelError::RuntimeDir { path: conn_path.clone(), source })?;
    files.push(conn_path.clone());
    let log = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&log_path)
        .map_err(|source| KernelError::RuntimeDir { path: log_path.clone(), source })?;
    let log2 = log.try_clone().map_err(|source| KernelError::RuntimeDir { path: log_path.clone(), source })?;

    let mut cmd = Command::new(&cfg.python);
    cmd.arg("-m")
        .arg("ipykernel_launcher")
        .arg("-f")
        .arg(&conn_path)
        // The scratch kernel keeps no history on disk: nothing shared with the user's IPython.
        .arg("--HistoryManager.hist_file=:memory:")
        .env_clear()
        .envs(kernel_env(cfg))
        .current_dir(&cfg.workdir)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .process_group(0);
    if let Some(limit) = cfg.memory_limit {
        // SAFETY: setrlimit is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(move || {
                nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_AS, limit, limit)
                    .map_err(io::Error::from)
            });
        }
    }
    let spawned_at = Instant::now();
    drop(listeners);
    let child = cmd.spawn().map_err(|source| KernelError::Spawn { python: cfg.python.clone(), source })?;
    let pid = child.id();
    let exit_rx = match spawn_waiter(pid) {
        Ok(rx) => rx,
        Err(e) => {
            let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
            let mut child = child;
            let _ = child.wait();
            return Err(internal("start the thread that waits on the kernel", &e));
        }
    };

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build();
    let mut kernel = ScratchKernel {
        channels: None,
        rt: match rt {
            Ok(rt) => rt,
            Err(e) => {
                let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
                let mut child = child;
                let _ = child.wait();
                return Err(internal("start the client runtime", &e));
            }
        },
        child,
        pid,
        shared: Arc::new(Shared { pid: pid as i32, reaped: Mutex::new(false), cancelled: AtomicBool::new(false) }),
        exit_rx,
        reaped: None,
        files,
        log_path: log_path.clone(),
        kernel_info: Value::Null,
        transport,
        limits: cfg.output_limits,
        grace: cfg.interrupt_grace,
        startup: Duration::ZERO,
    };
    let deadline = later(spawned_at, cfg.startup_timeout);
    let mut exit_rx = kernel.exit_rx.clone();
    let result = kernel.rt.block_on(connect(&info, &mut exit_rx, deadline));
    match result {
        Ok((channels, kernel_info)) => {
            kernel.channels = Some(channels);
            kernel.kernel_info = kernel_info;
            kernel.startup = spawned_at.elapsed();
            Ok(kernel)
        }
        Err(StartFailure::Exited) => {
            kernel.kill();
            let exit = kernel.reaped.unwrap_or(ExitInfo { exit_code: None, signal: None });
            let stderr_tail = read_tail(&log_path);
            Err(KernelError::ExitedDuringStartup {
                python: cfg.python.clone(),
                exit_code: exit.exit_code,
                signal: exit.signal,
                hint: startup_hint(cfg, &stderr_tail),
                stderr_tail,
            })
        }
        Err(StartFailure::Timeout) => {
            kernel.kill();
            Err(KernelError::StartupTimeout {
                python: cfg.python.clone(),
                timeout: cfg.startup_timeout,
                stderr_tail: read_tail(&log_path),
            })
        }
        Err(StartFailure::Protocol { endpoint, reason }) => {
            kernel.kill();
            Err(KernelError::Protocol { endpoint, reason, stderr_tail: read_tail(&log_path) })
        }
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = OpenOptions::new().create(true).write(true).truncate(true).mode(0o600).open(path)?;
    f.write_all(bytes)
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

enum StartFailure {
    Exited,
    Timeout,
    Protocol { endpoint: String, reason: String },
}

/// Decodes a verified message's header, parent and content; `None` for a message that is not a
/// valid signed Jupyter message (it is skipped).
fn decode(raw: Option<RawMessage>) -> Option<Incoming> {
    let raw = raw?;
    let header: Value = serde_json::from_slice(raw.jparts.first()?).ok()?;
    let msg_type = header.get("msg_type")?.as_str()?.to_string();
    let parent: Value = serde_json::from_slice(raw.jparts.get(1)?).unwrap_or(Value::Null);
    let parent_id = parent.get("msg_id").and_then(Value::as_str).map(str::to_string);
    let content = serde_json::from_slice(raw.jparts.get(3)?).unwrap_or(Value::Null);
    Some(Incoming { msg_type, parent_id, content })
}

async fn recv_iopub(c: &mut ClientIoPubConnection) -> Result<Option<Incoming>, String> {
    let zmq = c.socket.recv().await.map_err(|e| e.to_string())?;
    Ok(decode(RawMessage::from_multipart(zmq, &c.mac).ok()))
}

async fn recv_shell(c: &mut ClientShellConnection) -> Result<Option<Incoming>, String> {
    let zmq = c.socket.recv().await.map_err(|e| e.to_string())?;
    Ok(decode(RawMessage::from_multipart(zmq, &c.mac).ok()))
}

/// Resolves when the kernel has exited (never, if the waiter is gone without a report).
async fn exited(rx: &mut watch::Receiver<Option<ExitInfo>>) {
    if rx.wait_for(Option::is_some).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Waits for the kernel to bind, connects, and handshakes with kernel_info.
async fn connect(
    info: &ConnectionInfo,
    exit_rx: &mut watch::Receiver<Option<ExitInfo>>,
    deadline: Instant,
) -> Result<(Channels, Value), StartFailure> {
    let deadline = tokio::time::Instant::from_std(deadline);
    let work = async {
        wait_bound(info).await;
        let session = uuid::Uuid::new_v4().to_string();
        let protocol = |endpoint: String| {
            move |e: jupyter_zmq_client::RuntimeError| StartFailure::Protocol { endpoint, reason: e.to_string() }
        };
        let iopub = jupyter_zmq_client::create_client_iopub_connection(info, "", &session)
            .await
            .map_err(protocol(info.iopub_url()))?;
        let identity = jupyter_zmq_client::peer_identity_for_session(&session).map_err(protocol(info.shell_url()))?;
        let shell = jupyter_zmq_client::create_client_shell_connection_with_identity(info, &session, identity)
            .await
            .map_err(protocol(info.shell_url()))?;
        let mut ch = Channels { shell, iopub, endpoint: info.shell_url() };
        let reply = handshake(&mut ch).await?;
        Ok((ch, reply))
    };
    tokio::select! {
        biased;
        _ = exited(exit_rx) => Err(StartFailure::Exited),
        r = work => r,
        _ = sleep_until(deadline) => Err(StartFailure::Timeout),
    }
}

/// Until the kernel has bound all five sockets, so that connecting needs no backoff.
async fn wait_bound(info: &ConnectionInfo) {
    let urls = [info.shell_url(), info.iopub_url(), info.stdin_url(), info.control_url(), info.hb_url()];
    loop {
        let mut all = true;
        for url in &urls {
            let ready = if let Some(path) = url.strip_prefix("ipc://") {
                Path::new(path).exists()
            } else if let Some(addr) = url.strip_prefix("tcp://") {
                tokio::net::TcpStream::connect(addr).await.is_ok()
            } else {
                true
            };
            if !ready {
                all = false;
                break;
            }
        }
        if all {
            return;
        }
        tokio::time::sleep(BIND_POLL).await;
    }
}

/// kernel_info until both a reply on shell and a message on iopub arrived: then iopub is
/// subscribed and no output of the first cell can be lost.
async fn handshake(ch: &mut Channels) -> Result<Value, StartFailure> {
    let mut reply: Option<Value> = None;
    let mut iopub_seen = false;
    loop {
        let msg = JupyterMessage::new(KernelInfoRequest {}, None);
        ch.shell
            .send(msg)
            .await
            .map_err(|e| StartFailure::Protocol { endpoint: ch.endpoint.clone(), reason: e.to_string() })?;
        let resend = tokio::time::Instant::now() + KERNEL_INFO_RESEND;
        loop {
            if let (Some(r), true) = (&reply, iopub_seen) {
                return Ok(r.clone());
            }
            tokio::select! {
                m = recv_shell(&mut ch.shell) => match m {
                    Ok(Some(m)) if m.msg_type == "kernel_info_reply" => reply = Some(m.content),
                    Ok(_) => {}
                    Err(reason) => return Err(StartFailure::Protocol { endpoint: ch.endpoint.clone(), reason }),
                },
                m = recv_iopub(&mut ch.iopub) => match m {
                    Ok(_) => iopub_seen = true,
                    Err(_) => tokio::time::sleep(BIND_POLL).await,
                },
                _ = sleep_until(resend) => break,
            }
        }
    }
}

struct CellContext {
    pgid: i32,
    timeout: Duration,
    grace: Duration,
    limits: OutputLimits,
    silent: bool,
}

enum CellEnd {
    Reply(CellStatus),
    Died,
    TimedOut,
    Lost(String),
}

fn status_from_reply(reply: &Value, outputs_error: Option<&Value>) -> CellStatus {
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    match reply.get("status").and_then(Value::as_str) {
        Some("ok") => CellStatus::Ok,
        Some("aborted") => CellStatus::Error {
            ename: "ExecutionAborted".into(),
            evalue: "the kernel aborted the request (an earlier request failed)".into(),
            traceback: Vec::new(),
        },
        other => {
            // Prefer the reply's fields; fall back to the error output.
            let src = if reply.get("ename").is_some() { reply } else { outputs_error.unwrap_or(reply) };
            CellStatus::Error {
                ename: s(src, "ename").unwrap_or_else(|| format!("KernelReply({})", other.unwrap_or("missing"))),
                evalue: s(src, "evalue").unwrap_or_default(),
                traceback: src
                    .get("traceback")
                    .and_then(Value::as_array)
                    .map(|t| t.iter().filter_map(Value::as_str).map(str::to_string).collect())
                    .unwrap_or_default(),
            }
        }
    }
}

async fn run_cell(
    ch: &mut Channels,
    exit_rx: &mut watch::Receiver<Option<ExitInfo>>,
    ctx: &CellContext,
    code: &str,
    started: Instant,
    on_output: &mut dyn FnMut(&Value),
) -> (CellEnd, Vec<Value>, Option<u32>) {
    let mut collector = OutputCollector::new(ctx.limits);
    let request = ExecuteRequest {
        code: code.to_string(),
        silent: ctx.silent,
        store_history: !ctx.silent,
        user_expressions: None,
        allow_stdin: false,
        stop_on_error: true,
    };
    let msg = JupyterMessage::new(request, None);
    let id = msg.header.msg_id.clone();
    if let Err(e) = ch.shell.send(msg).await {
        // A failed send is most often a kernel that just died: give the waiter a moment.
        let waited = tokio::time::timeout(Duration::from_secs(1), exited(exit_rx)).await;
        let end =
            if waited.is_ok() { CellEnd::Died } else { CellEnd::Lost(format!("sending the request failed: {e}")) };
        return (end, collector.finish(), None);
    }

    let mut deadline = tokio::time::Instant::from_std(later(started, ctx.timeout));
    let mut interrupted = false;
    let mut reply: Option<Value> = None;
    let mut idle = false;
    let mut execution_count: Option<u32> = None;
    let mut last_iopub = tokio::time::Instant::now();
    let mut error_output: Option<Value> = None;
    // A socket that errored is retried after a pause instead of spinning on it.
    let mut iopub_retry: Option<tokio::time::Instant> = None;
    let mut shell_retry: Option<tokio::time::Instant> = None;

    let end = loop {
        if reply.is_some() && idle {
            break None;
        }
        let now = tokio::time::Instant::now();
        if iopub_retry.is_some_and(|t| t <= now) {
            iopub_retry = None;
        }
        if shell_retry.is_some_and(|t| t <= now) {
            shell_retry = None;
        }
        let mut wake = deadline;
        if reply.is_some() {
            wake = wake.min(last_iopub.max(now) + IDLE_AFTER_REPLY);
        }
        for t in [iopub_retry, shell_retry].into_iter().flatten() {
            wake = wake.min(t);
        }
        tokio::select! {
            biased;
            _ = exited(exit_rx) => break Some(CellEnd::Died),
            m = recv_iopub(&mut ch.iopub), if iopub_retry.is_none() => match m {
                Ok(Some(m)) if m.parent_id.as_deref() == Some(id.as_str()) => {
                    last_iopub = tokio::time::Instant::now();
                    match m.msg_type.as_str() {
                        "status" => {
                            if m.content.get("execution_state").and_then(Value::as_str) == Some("idle") {
                                idle = true;
                            }
                        }
                        "execute_input" => {
                            if execution_count.is_none() {
                                execution_count = count_of(&m.content);
                            }
                        }
                        t => {
                            if t == "error" {
                                error_output = Some(m.content.clone());
                            }
                            if let Some(shown) = collector.handle(t, &m.content) {
                                on_output(&shown);
                            }
                        }
                    }
                }
                Ok(_) => {}
                Err(_) => iopub_retry = Some(tokio::time::Instant::now() + Duration::from_millis(20)),
            },
            m = recv_shell(&mut ch.shell), if shell_retry.is_none() => match m {
                Ok(Some(m)) if m.msg_type == "execute_reply" && m.parent_id.as_deref() == Some(id.as_str()) => {
                    if let Some(n) = count_of(&m.content) {
                        execution_count = Some(n);
                    }
                    reply = Some(m.content);
                    last_iopub = tokio::time::Instant::now();
                }
                Ok(_) => {}
                Err(_) => shell_retry = Some(tokio::time::Instant::now() + Duration::from_millis(20)),
            },
            _ = sleep_until(wake) => {
                let now = tokio::time::Instant::now();
                if reply.is_some() && now >= last_iopub + IDLE_AFTER_REPLY {
                    // The idle was lost (iopub drops messages under a flood): the reply ends it.
                    break None;
                }
                if now >= deadline {
                    if interrupted {
                        break Some(CellEnd::TimedOut);
                    }
                    interrupted = true;
                    let _ = killpg(Pid::from_raw(ctx.pgid), Signal::SIGINT);
                    deadline = tokio::time::Instant::from_std(later(now.into_std(), ctx.grace));
                }
            }
        }
    };
    let end = match end {
        Some(CellEnd::Died) => {
            drain(ch, &id, &mut collector, on_output).await;
            CellEnd::Died
        }
        Some(e) => e,
        None if interrupted => CellEnd::TimedOut,
        None => CellEnd::Reply(status_from_reply(reply.as_ref().unwrap_or(&Value::Null), error_output.as_ref())),
    };
    (end, collector.finish(), execution_count)
}

/// Output the kernel sent just before it died may still be queued: take what is there.
async fn drain(ch: &mut Channels, id: &str, collector: &mut OutputCollector, on_output: &mut dyn FnMut(&Value)) {
    let until = tokio::time::Instant::now() + DRAIN_AFTER_DEATH;
    loop {
        match tokio::time::timeout_at(until, recv_iopub(&mut ch.iopub)).await {
            Ok(Ok(Some(m))) => {
                if m.parent_id.as_deref() == Some(id)
                    && let Some(shown) = collector.handle(&m.msg_type, &m.content)
                {
                    on_output(&shown);
                }
            }
            Ok(Ok(None)) => {}
            _ => return,
        }
    }
}

fn count_of(content: &Value) -> Option<u32> {
    content.get("execution_count").and_then(Value::as_u64).and_then(|n| u32::try_from(n).ok())
}
