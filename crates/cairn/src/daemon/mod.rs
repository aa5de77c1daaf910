//! The daemon: one per state root, elected by an exclusive lock on `<state>/daemon.lock`. It owns
//! execution (a bounded worker pool of runs, the session kernel) and serves the HTTP API on
//! loopback; the CLI starts it on first need and talks to it.
//!
//! **Invariant:** a run is executed only by the daemon recorded as its owner; a successor daemon
//! takes over only runs whose owner process is gone, after stopping what that owner left running.

pub mod api;
pub mod auth;
pub mod pool;
mod targets_api;
mod verify_api;
pub mod web;

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use cairn_engine::session::{SessionConfig, SessionKernel};
use cairn_engine::{Engine, EngineError, EngineOptions, RandomIds, StateRoot, SystemClock};
use cairn_exec::{ProcessIdentity, is_same_process, process_start_time};
use cairn_store::SqliteStore;
use serde::{Deserialize, Serialize};

use crate::Failure;

/// The daemon's log is rotated at start once it is larger than this.
const LOG_ROTATE_BYTES: u64 = 10 << 20;

/// What a running daemon publishes in `<state>/daemon.json` for its clients.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DaemonInfo {
    pub pid: u32,
    /// From /proc, so a client can tell the daemon from a later process with its pid.
    pub start_time: Option<u64>,
    pub url: String,
    pub port: u16,
    pub version: String,
    pub started_at: String,
    /// Which build of cairn runs it (its executable's path, size and mtime), so a client built
    /// differently can say so.
    #[serde(default)]
    pub build: String,
}

/// This executable's identity: path, size and modification time.
pub fn build_id() -> String {
    let Ok(exe) = std::env::current_exe() else { return String::new() };
    let meta = std::fs::metadata(&exe).ok();
    let mtime = meta
        .as_ref()
        .and_then(|m| m.modified().ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{}:{}:{mtime}", exe.display(), meta.map(|m| m.len()).unwrap_or(0))
}

impl DaemonInfo {
    pub fn is_alive(&self) -> bool {
        is_same_process(&ProcessIdentity { pid: self.pid, pgid: self.pid, start_time: self.start_time })
    }
}

/// `cairn daemon status --json`.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub running: bool,
    pub pid: Option<u32>,
    pub url: Option<String>,
    pub state_root: String,
}

pub fn info_path(root: &Path) -> PathBuf {
    root.join("daemon.json")
}

pub fn lock_path(root: &Path) -> PathBuf {
    root.join("daemon.lock")
}

pub fn log_path(root: &Path) -> PathBuf {
    root.join("daemon.log")
}

pub fn read_info(root: &Path) -> Option<DaemonInfo> {
    let text = std::fs::read_to_string(info_path(root)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Whether some process holds the daemon lock of `root`. Taking the lock for a moment is the
/// only reliable test: a pid file alone survives a crash.
pub fn lock_is_held(root: &Path) -> bool {
    let Ok(file) = File::options().read(true).write(true).create(false).open(lock_path(root)) else {
        return false;
    };
    matches!(file.try_lock(), Err(std::fs::TryLockError::WouldBlock))
}

/// The running daemon of `root`, if any: the lock is held and its published info is alive.
pub fn running(root: &Path) -> Option<DaemonInfo> {
    if !lock_is_held(root) {
        return None;
    }
    read_info(root).filter(DaemonInfo::is_alive)
}

pub fn status(root: &Path) -> Status {
    let info = running(root);
    Status {
        running: info.is_some() || lock_is_held(root),
        pid: info.as_ref().map(|i| i.pid),
        url: info.map(|i| i.url),
        state_root: root.display().to_string(),
    }
}

/// How a daemon is started.
#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    /// Exit after this long with no run, no session kernel and no request.
    pub idle_exit: Option<Duration>,
    pub port: Option<u16>,
    pub workers: Option<usize>,
}

/// Starts a detached daemon for `root` unless one runs; returns its info and whether it was
/// started now. Waits until it answers, or says why it did not start (from its log).
pub fn start(root: &Path, opts: &StartOptions) -> Result<(DaemonInfo, bool), Failure> {
    if let Some(info) = running(root) {
        return Ok((info, false));
    }
    cairn_engine::StateRoot::open(root)?;
    let exe = std::env::current_exe().map_err(|e| Failure::usage(format!("cannot find the cairn executable: {e}")))?;
    let log = log_path(root);
    // One generation is kept: the log never grows past twice this.
    if std::fs::metadata(&log).is_ok_and(|m| m.len() > LOG_ROTATE_BYTES) {
        let _ = std::fs::rename(&log, root.join("daemon.log.1"));
    }
    let log_file = File::options()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|e| Failure::usage(format!("cannot open {}: {e}", log.display())))?;
    let log_start = log_file.metadata().map(|m| m.len()).unwrap_or(0);
    let log_err = log_file.try_clone().map_err(|e| Failure::usage(format!("{}: {e}", log.display())))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("--home").arg(root).args(["daemon", "run"]);
    if let Some(idle) = opts.idle_exit {
        cmd.arg("--idle-exit").arg(idle.as_secs().to_string());
    }
    if let Some(port) = opts.port {
        cmd.arg("--port").arg(port.to_string());
    }
    if let Some(w) = opts.workers {
        cmd.arg("--workers").arg(w.to_string());
    }
    cmd.stdin(std::process::Stdio::null()).stdout(log_file).stderr(log_err);
    // Its own session: no terminal's signals (Ctrl-C in the shell that started it) reach it.
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| nix::unistd::setsid().map(|_| ()).map_err(std::io::Error::from));
    }
    let mut child = cmd.spawn().map_err(|e| Failure::usage(format!("cannot start the daemon: {e}")))?;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            // It exited: another daemon may have won the lock in the meantime.
            if let Some(info) = running(root) {
                return Ok((info, false));
            }
            return Err(Failure::usage(format!(
                "the daemon exited at start ({status}); its log {} says:\n{}",
                log.display(),
                tail_from(&log, log_start)
            )));
        }
        if let Some(info) = read_info(root).filter(|i| i.pid == child.id()) {
            return Ok((info, true));
        }
        if Instant::now() > deadline {
            return Err(Failure::usage(format!(
                "the daemon did not answer within 20 s; see its log {}:\n{}",
                log.display(),
                tail_from(&log, log_start)
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What the log gained since `offset`, at most its last 4 KiB.
fn tail_from(path: &Path, offset: u64) -> String {
    let Ok(mut f) = File::open(path) else { return String::new() };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let from = offset.max(len.saturating_sub(4096));
    let _ = f.seek(SeekFrom::Start(from));
    let mut s = String::new();
    let _ = f.read_to_string(&mut s);
    s.trim_end().to_string()
}

/// Stops the daemon of `root` (SIGTERM; SIGKILL if it has not exited after `grace`) and waits
/// until its lock is free. Returns the pid it stopped, if one ran.
pub fn stop(root: &Path, grace: Duration) -> Result<Option<u32>, Failure> {
    let Some(info) = running(root) else {
        if lock_is_held(root) {
            return Err(Failure {
                code: 4,
                message: format!(
                    "the daemon lock {} is held but {} does not name a live daemon; it is still starting or stopping, try again",
                    lock_path(root).display(),
                    info_path(root).display()
                ),
            });
        }
        return Ok(None);
    };
    let pid = nix::unistd::Pid::from_raw(info.pid as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let deadline = Instant::now() + grace;
    while lock_is_held(root) {
        if Instant::now() > deadline {
            if info.is_alive() {
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            }
            // The lock goes with the process.
            let until = Instant::now() + Duration::from_secs(5);
            while lock_is_held(root) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(Some(info.pid))
}

/// How the foreground daemon (`cairn daemon run`) serves.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub port: u16,
    pub idle_exit: Option<Duration>,
    pub workers: usize,
}

/// The daemon itself, in the foreground: takes the lock, recovers what a dead predecessor left,
/// serves until SIGTERM/SIGINT (or idle, or its state root is removed), then stops what it runs.
pub fn serve(root: &Path, opts: ServeOptions) -> Result<(), Failure> {
    let started = Instant::now();
    // Every committed write bumps this, so event followers wake at once instead of polling.
    let (commits, _) = tokio::sync::watch::channel(0u64);
    let commits = Arc::new(commits);
    let state_root = StateRoot::open(root)?;
    let bump = commits.clone();
    let store = SqliteStore::open(&state_root.db())
        .map_err(EngineError::from)?
        .on_commit(move || bump.send_modify(|n| *n = n.wrapping_add(1)));
    let engine = Engine {
        state: state_root,
        store: Box::new(store),
        clock: Box::new(SystemClock),
        ids: Box::new(RandomIds),
        options: EngineOptions::default(),
    };
    let lock_file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_path(root))
        .map_err(|e| Failure::usage(format!("cannot open {}: {e}", lock_path(root).display())))?;
    match lock_file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let who = read_info(root).map(|i| format!("pid {}", i.pid)).unwrap_or_else(|| "another process".into());
            return Err(Failure {
                code: 4,
                message: format!(
                    "another daemon ({who}) already serves {}; it holds {}. Use `cairn daemon status` or `cairn daemon stop`",
                    root.display(),
                    lock_path(root).display()
                ),
            });
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(Failure::usage(format!("cannot lock {}: {e}", lock_path(root).display())));
        }
    }
    let pid = std::process::id();
    let owner = format!("{pid}:{}", process_start_time(pid).unwrap_or(0));
    let tokens = auth::ensure_tokens(root)?;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // Store work is serialised on one connection anyway; more threads only cost memory
        // (glibc gives each its own malloc arena).
        .max_blocking_threads(8)
        .enable_all()
        .build()
        .map_err(|e| Failure::usage(format!("cannot start the daemon's runtime: {e}")))?;
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(("127.0.0.1", opts.port)))
        .map_err(|e| Failure::usage(format!("cannot listen on 127.0.0.1:{}: {e}", opts.port)))?;
    let port = listener.local_addr().map_err(|e| Failure::usage(e.to_string()))?.port();
    let url = format!("http://127.0.0.1:{port}");

    let engine = Arc::new(engine);
    let pool = pool::Pool::new(engine.clone(), owner.clone(), opts.workers);
    let recovered = pool.recover();
    let session_dir = root.join("session");
    std::fs::create_dir_all(&session_dir)
        .map_err(|e| Failure::usage(format!("cannot create {}: {e}", session_dir.display())))?;
    let session = SessionKernel::new(
        engine.clone(),
        SessionConfig {
            python: std::env::var_os("CAIRN_PYTHON").filter(|p| !p.is_empty()).map(PathBuf::from),
            workdir: session_dir,
            default_timeout: Duration::from_secs(3600),
        },
    )?;
    let last_activity = Arc::new(AtomicI64::new(0));
    let (closing_tx, closing) = tokio::sync::watch::channel(false);
    let mcp_closing = tokio_util::sync::CancellationToken::new();
    let state = Arc::new(api::AppState {
        url: url.clone(),
        engine: engine.clone(),
        pool: pool.clone(),
        session: session.clone(),
        tokens,
        started,
        last_activity: last_activity.clone(),
        closing,
        mcp_closing: mcp_closing.clone(),
        commits,
        logins: Default::default(),
    });

    let info = DaemonInfo {
        pid,
        start_time: process_start_time(pid),
        url: url.clone(),
        port,
        version: env!("CARGO_PKG_VERSION").to_string(),
        started_at: crate::wire::time(jiff::Timestamp::now().as_millisecond()),
        build: build_id(),
    };
    write_info(root, &info)?;
    eprintln!(
        "{} cairn daemon {} (pid {pid}, owner {owner}) serving {} on {url}; recovered {recovered} run(s)",
        info.started_at,
        info.version,
        root.display()
    );

    let root_owned = root.to_path_buf();
    let stopping = pool.clone();
    let idle_session = session.clone();
    let served = rt.block_on(async move {
        let app = api::router(state);
        let idle = move || pool.is_idle() && !idle_session.is_busy();
        let signal = shutdown_signal(root_owned, opts.idle_exit, idle, last_activity, started);
        let shutdown = async move {
            signal.await;
            // End the event streams and MCP sessions first: graceful shutdown waits for open
            // connections.
            let _ = closing_tx.send(true);
            mcp_closing.cancel();
        };
        // Without TCP_NODELAY, small event frames wait on the client's delayed ACK (~40 ms each).
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(listener, app).with_graceful_shutdown(shutdown).await
    });
    eprintln!("{} stopping: interrupting what still runs", crate::wire::time(jiff::Timestamp::now().as_millisecond()));
    session.shutdown(Duration::from_secs(5));
    let interrupted = stopping.shutdown(Duration::from_secs(10));
    let _ = std::fs::remove_file(info_path(root));
    rt.shutdown_timeout(Duration::from_secs(2));
    eprintln!(
        "{} stopped; {interrupted} run(s) left to resume at the next start",
        crate::wire::time(jiff::Timestamp::now().as_millisecond())
    );
    drop(lock_file);
    served.map_err(|e| Failure::usage(format!("the HTTP server failed: {e}")))
}

fn write_info(root: &Path, info: &DaemonInfo) -> Result<(), Failure> {
    let path = info_path(root);
    let tmp = root.join("daemon.json.tmp");
    let text = serde_json::to_vec_pretty(info).unwrap_or_default();
    std::fs::write(&tmp, text)
        .and_then(|_| std::fs::rename(&tmp, &path))
        .map_err(|e| Failure::usage(format!("cannot write {}: {e}", path.display())))
}

/// Resolves when the daemon should stop: SIGTERM or SIGINT; idle for `idle_exit`; or its state
/// root removed (a test's temporary directory), which leaves nothing to serve.
async fn shutdown_signal(
    root: PathBuf,
    idle_exit: Option<Duration>,
    is_idle: impl Fn() -> bool,
    last_activity: Arc<AtomicI64>,
    started: Instant,
) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        return;
    };
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = term.recv() => return,
            _ = int.recv() => return,
            _ = tick.tick() => {
                if !lock_path(&root).exists() {
                    eprintln!("the state root {} is gone; stopping", root.display());
                    return;
                }
                if let Some(idle) = idle_exit {
                    let last = Duration::from_millis(last_activity.load(Ordering::Relaxed) as u64);
                    let since = started.elapsed().saturating_sub(last);
                    if since >= idle && is_idle() {
                        eprintln!("idle for {} s; stopping", since.as_secs());
                        return;
                    }
                }
            }
        }
    }
}
