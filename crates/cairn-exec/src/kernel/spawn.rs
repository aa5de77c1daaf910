//! Spawning a kernel process: its private runtime directory, the connection file (IPC sockets,
//! or TCP ports on 127.0.0.1), the command with nothing inherited, and what a failed start is
//! reported as.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use jupyter_protocol::connection_info::{ConnectionInfo, Transport};

use super::client::{StartFailure, connect};
use super::error::startup_hint;
use super::{ExitInfo, KernelConfig, KernelError, KernelTransport, ScratchKernel, later};

/// Longest unix socket path (sun_path is 108 bytes with the NUL on Linux).
const MAX_IPC_PATH: usize = 107;

/// Bytes of the kernel's stderr shown in a start-up error.
const STDERR_TAIL: u64 = 4096;

pub(super) fn ipc_fits(runtime_dir: &Path) -> bool {
    // "<dir>/k-<8 hex>-<n>"
    runtime_dir.as_os_str().len() + "/k-00000000-5".len() <= MAX_IPC_PATH
}

pub(super) fn prepare_runtime_dir(dir: &Path) -> Result<(), KernelError> {
    let err = |source| KernelError::RuntimeDir { path: dir.to_path_buf(), source };
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(err)?;
    // An existing directory may have been created with a wider mode.
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(err)?;
    Ok(())
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

pub(super) fn read_tail(path: &Path) -> String {
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

/// A kernel's sockets as its connection file names them, and what comes with them.
struct Sockets {
    info: ConnectionInfo,
    /// Hold the picked TCP ports until just before the spawn.
    listeners: Vec<TcpListener>,
    /// The IPC socket files, removed when the kernel is killed.
    files: Vec<PathBuf>,
}

/// Five sockets on `transport`: free ports on 127.0.0.1, or IPC paths under `dir` named by `tag`.
fn sockets(dir: &Path, tag: &str, transport: KernelTransport) -> Result<Sockets, KernelError> {
    let key = uuid::Uuid::new_v4().simple().to_string();
    match transport {
        KernelTransport::Tcp | KernelTransport::Auto => {
            let (ports, listeners) =
                pick_ports().map_err(|e| KernelError::Internal(format!("pick free TCP ports on 127.0.0.1: {e}")))?;
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
            Ok(Sockets { info, listeners, files: Vec::new() })
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
            let files: Vec<PathBuf> = (1..=5).map(|n| PathBuf::from(format!("{}-{n}", info.ip))).collect();
            for s in &files {
                let _ = fs::remove_file(s);
            }
            Ok(Sockets { info, listeners: Vec::new(), files })
        }
    }
}

/// `python -m ipykernel_launcher -f <conn_path>` with nothing inherited: `cfg`'s environment,
/// working directory and memory limit, its own process group, stdout and stderr to `log_path`.
fn kernel_command(cfg: &KernelConfig, conn_path: &Path, log_path: &Path) -> Result<Command, KernelError> {
    let log_err = |source| KernelError::RuntimeDir { path: log_path.to_path_buf(), source };
    let log = OpenOptions::new().create(true).write(true).truncate(true).open(log_path).map_err(log_err)?;
    let log2 = log.try_clone().map_err(log_err)?;
    let mut cmd = Command::new(&cfg.python);
    cmd.arg("-m")
        .arg("ipykernel_launcher")
        .arg("-f")
        .arg(conn_path)
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
    Ok(cmd)
}

/// One start on `transport`: the connection file, the spawn, then the handshake (see
/// [`ScratchKernel::start`], which retries a TCP start that lost a port race).
pub(super) fn start_once(cfg: &KernelConfig, transport: KernelTransport) -> Result<ScratchKernel, KernelError> {
    let tag = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let dir = &cfg.runtime_dir;
    let conn_path = dir.join(format!("kernel-{tag}.json"));
    let log_path = dir.join("kernel.log");
    let Sockets { info, listeners, mut files } = sockets(dir, &tag, transport)?;
    let conn_json =
        serde_json::to_vec(&info).map_err(|e| KernelError::Internal(format!("serialise the connection file: {e}")))?;
    write_private(&conn_path, &conn_json)
        .map_err(|source| KernelError::RuntimeDir { path: conn_path.clone(), source })?;
    files.push(conn_path.clone());
    let mut cmd = kernel_command(cfg, &conn_path, &log_path)?;
    let spawned_at = Instant::now();
    drop(listeners);
    let child = cmd.spawn().map_err(|source| KernelError::Spawn { python: cfg.python.clone(), source })?;
    let mut kernel = ScratchKernel::adopt(child, cfg, transport, files, log_path.clone())?;
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
        Err(failure) => {
            kernel.kill();
            Err(start_error(cfg, failure, kernel.reaped, &log_path))
        }
    }
}

/// What a start that failed (the kernel killed and reaped: `reaped`) is reported as.
fn start_error(cfg: &KernelConfig, failure: StartFailure, reaped: Option<ExitInfo>, log_path: &Path) -> KernelError {
    match failure {
        StartFailure::Exited => {
            let exit = reaped.unwrap_or(ExitInfo { exit_code: None, signal: None });
            let stderr_tail = read_tail(log_path);
            KernelError::ExitedDuringStartup {
                python: cfg.python.clone(),
                exit_code: exit.exit_code,
                signal: exit.signal,
                hint: startup_hint(cfg, &stderr_tail),
                stderr_tail,
            }
        }
        StartFailure::Timeout => KernelError::StartupTimeout {
            python: cfg.python.clone(),
            timeout: cfg.startup_timeout,
            stderr_tail: read_tail(log_path),
        },
        StartFailure::Protocol { endpoint, reason } => {
            KernelError::Protocol { endpoint, reason, stderr_tail: read_tail(log_path) }
        }
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = OpenOptions::new().create(true).write(true).truncate(true).mode(0o600).open(path)?;
    f.write_all(bytes)
}
