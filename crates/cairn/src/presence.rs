//! Whether a daemon serves a state root, and starting and stopping one: what a client needs. One
//! daemon per state root is elected by an exclusive lock on `<state>/daemon.lock`; it publishes
//! where it listens in `<state>/daemon.json`.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cairn_engine::process::{Owner, is_alive};
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
        self.start_time.is_some_and(|start_time| is_alive(&Owner { pid: self.pid, start_time }))
    }
}

/// `cairn daemon status --json`.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub running: bool,
    pub pid: Option<u32>,
    pub url: Option<String>,
    pub state_root: String,
    /// Where the state root's registry is: its SQLite file, or the PostgreSQL database it records
    /// (without the password).
    pub registry: String,
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
        registry: registry_of(root),
    }
}

/// The registry a state root records, as `status` shows it (read without opening it).
fn registry_of(root: &Path) -> String {
    match std::fs::read_to_string(root.join("database")) {
        Ok(url) => cairn_engine::redact_database_url(url.trim()),
        Err(_) => root.join("cairn.db").display().to_string(),
    }
}

/// How the daemon writes its log (its stderr, which `cairn daemon start` sends to daemon.log).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `<time> <message>`, a line a person reads.
    #[default]
    Text,
    /// One JSON object a line: `{timestamp, level, fields: {message}, target}`.
    Json,
}

impl LogFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// How a daemon is started.
#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    /// Exit after this long with no run, no session kernel and no request.
    pub idle_exit: Option<Duration>,
    pub port: Option<u16>,
    pub workers: Option<usize>,
    /// `--no-spare-kernel`.
    pub no_spare_kernel: bool,
    /// `--lease-secs`.
    pub lease_secs: Option<u64>,
    /// `--log-format`.
    pub log_format: LogFormat,
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
    if let Some(secs) = opts.lease_secs {
        cmd.arg("--lease-secs").arg(secs.to_string());
    }
    if opts.no_spare_kernel {
        cmd.arg("--no-spare-kernel");
    }
    cmd.arg("--log-format").arg(opts.log_format.as_str());
    cmd.stdin(std::process::Stdio::null()).stdout(log_file).stderr(log_err);
    // A daemon started from inside a step's tool outlives that attempt by design: it must not
    // carry the attempt's nonce, by which whatever stops the attempt finds its processes.
    cmd.env_remove(cairn_engine::NONCE_VAR);
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
            // Its own exit code says what kind of failure it was (4: a conflict, such as a
            // registry another daemon serves), so the command exits with it too.
            let message = format!(
                "the daemon exited at start ({status}); its log {} says:\n{}",
                log.display(),
                tail_from(&log, log_start)
            );
            return Err(match status.code() {
                Some(4) => Failure::conflict("daemon_running", message),
                Some(5) => Failure::unavailable("daemon_failed", message),
                _ => Failure::usage(message),
            });
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
            return Err(Failure::conflict(
                "daemon_starting",
                format!(
                    "the daemon lock {} is held but {} does not name a live daemon; it is still starting or stopping, try again",
                    lock_path(root).display(),
                    info_path(root).display()
                ),
            ));
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

pub(crate) fn write_info(root: &Path, info: &DaemonInfo) -> Result<(), Failure> {
    let path = info_path(root);
    let tmp = root.join("daemon.json.tmp");
    let text = serde_json::to_vec_pretty(info).unwrap_or_default();
    std::fs::write(&tmp, text)
        .and_then(|_| std::fs::rename(&tmp, &path))
        .map_err(|e| Failure::usage(format!("cannot write {}: {e}", path.display())))
}
