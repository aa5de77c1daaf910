//! A disposable ("scratch") ipykernel driven synchronously: spawn it in its own process group,
//! connect over the Jupyter protocol (IPC sockets in a private directory, TCP on 127.0.0.1 when
//! the directory's path is too long for a unix socket), run one execute request at a time, and
//! leave no process of its group behind.
//!
//! Death is observed by waiting on the child process (a waiter thread peeking with
//! `waitid(WNOWAIT)`, so the pid stays reserved until we reap it), never by heartbeat polling.
//! The ZeroMQ crates are async; a private current-thread tokio runtime runs them inside each call.
//!
//! By role: `lifecycle` (the process: start, handles, kill), `spawn` (its runtime directory,
//! connection file and command), `client` (the Jupyter sockets and handshake), `cell` (one
//! execute request to its end), `outputs` (iopub messages folded into nbformat outputs, capped)
//! and `error` (why a start failed).

mod cell;
mod client;
mod error;
mod lifecycle;
mod outputs;
mod spawn;

pub use cell::{CellRun, CellStatus};
pub use error::KernelError;
pub use lifecycle::{ExitInfo, KernelHandle, ScratchKernel, python_has_ipykernel};
pub use outputs::{OutputCollector, OutputLimits, truncation_marker};

use std::path::PathBuf;
use std::time::{Duration, Instant};

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

/// `t + d`, saturating at a far future instead of panicking on a huge timeout.
fn later(t: Instant, d: Duration) -> Instant {
    // Below tokio's timer range (about 2.2 years).
    const FAR: Duration = Duration::from_secs(365 * 24 * 3600);
    t.checked_add(d.min(FAR)).unwrap_or(t)
}
