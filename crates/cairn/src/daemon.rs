//! The daemon, in the foreground (`cairn daemon run`): takes the state root's lock, starts the
//! engine's [`Service`] (the worker pool, the session kernel, startup recovery), serves the HTTP
//! API on loopback, and stops what it runs when it is told to.
//!
//! **Invariant:** one daemon per state root (the lock); it listens on loopback only.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use cairn_engine::session::SessionConfig;
use cairn_engine::{Engine, Service, ServiceConfig};

use crate::input::engine_options;
use crate::presence::{DaemonInfo, LogFormat, build_id, info_path, lock_path, read_info, write_info};
use crate::{Failure, api, auth};

/// How the foreground daemon (`cairn daemon run`) serves.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub port: u16,
    pub idle_exit: Option<Duration>,
    pub workers: usize,
    /// Keep a spare scratch kernel booted (`--no-spare-kernel` turns it off).
    pub spare_kernel: bool,
    /// `--database`: the PostgreSQL registry to use (and record); else the state root's own.
    pub database: Option<String>,
    /// `--lease-secs`.
    pub lease: Duration,
    /// `--log-format`.
    pub log_format: LogFormat,
}

/// The daemon's times as every surface shows them (RFC 3339 UTC with milliseconds).
struct LogTime;

impl tracing_subscriber::fmt::time::FormatTime for LogTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        write!(w, "{}", now())
    }
}

/// Sends the daemon's events (its own and the engine's, at info and above) to its stderr in
/// `format`; other crates' events are left out. Called once, before anything is logged.
fn init_log(format: LogFormat) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let targets = tracing_subscriber::filter::Targets::new()
        .with_target("cairn", tracing::Level::INFO)
        .with_target("cairn_engine", tracing::Level::INFO);
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_timer(LogTime);
    let registry = tracing_subscriber::registry().with(targets);
    // A second daemon in one process (tests) keeps the first one's subscriber.
    let _ = match format {
        LogFormat::Text => registry.with(layer.with_target(false).with_level(false)).try_init(),
        LogFormat::Json => registry.with(layer.json().with_current_span(false).with_span_list(false)).try_init(),
    };
}

/// The daemon itself, in the foreground: takes the lock, recovers what a dead predecessor left,
/// serves until SIGTERM/SIGINT (or idle, or its state root is removed), then stops what it runs.
pub fn serve(root: &Path, opts: ServeOptions) -> Result<(), Failure> {
    init_log(opts.log_format);
    let started = Instant::now();
    let engine = Engine::builder(root).database(opts.database.clone()).options(engine_options()?).open()?;
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
            return Err(Failure::conflict(
                "daemon_running",
                format!(
                    "another daemon ({who}) already serves {}; it holds {}. Use `cairn daemon status` or `cairn daemon stop`",
                    root.display(),
                    lock_path(root).display()
                ),
            ));
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(Failure::usage(format!("cannot lock {}: {e}", lock_path(root).display())));
        }
    }
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

    let session_dir = root.join("session");
    std::fs::create_dir_all(&session_dir)
        .map_err(|e| Failure::usage(format!("cannot create {}: {e}", session_dir.display())))?;
    let service = Service::start(
        Arc::new(engine),
        ServiceConfig {
            workers: opts.workers,
            session: SessionConfig {
                python: std::env::var_os("CAIRN_PYTHON").filter(|p| !p.is_empty()).map(PathBuf::from),
                workdir: session_dir,
                default_timeout: Duration::from_secs(3600),
            },
            spare_kernel: opts.spare_kernel,
            lease: opts.lease,
            host: std::env::var("CAIRN_HOST_ID").ok().filter(|h| !h.is_empty()),
        },
    )?;
    let recovered = service.recover();
    let last_activity = Arc::new(AtomicI64::new(0));
    let (closing_tx, closing) = tokio::sync::watch::channel(false);
    let mcp_closing = tokio_util::sync::CancellationToken::new();
    let state = Arc::new(api::AppState {
        url: url.clone(),
        service: service.clone(),
        tokens,
        started,
        last_activity: last_activity.clone(),
        closing,
        mcp_closing: mcp_closing.clone(),
        logins: Default::default(),
    });

    // Before the daemon is announced: a SIGTERM from then on (a `cairn daemon stop` right after
    // the start) must stop it through the shutdown below, not by the signal's default action,
    // which would leave its kernels running.
    let signals = {
        use tokio::signal::unix::{SignalKind, signal};
        let _in_runtime = rt.enter();
        match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
            (Ok(term), Ok(int)) => (term, int),
            (Err(e), _) | (_, Err(e)) => {
                service.shutdown(Duration::from_secs(10));
                return Err(Failure::usage(format!("cannot handle SIGTERM and SIGINT: {e}")));
            }
        }
    };
    let owner = service.owner();
    let info = DaemonInfo {
        pid: owner.pid,
        start_time: Some(owner.start_time),
        url: url.clone(),
        port,
        version: env!("CARGO_PKG_VERSION").to_string(),
        started_at: now(),
        build: build_id(),
    };
    write_info(root, &info)?;
    tracing::info!(
        "cairn daemon {} (pid {}, owner {owner}) serving {} on {url}; recovered {recovered} run(s)",
        info.version,
        owner.pid,
        root.display()
    );

    let root_owned = root.to_path_buf();
    let idle_service = service.clone();
    let served = rt.block_on(async move {
        let app = api::router(state);
        let idle = move || idle_service.is_idle();
        let signal = shutdown_signal(signals, root_owned, opts.idle_exit, idle, last_activity, started);
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
    tracing::info!("stopping: interrupting what still runs");
    let interrupted = service.shutdown(Duration::from_secs(10));
    let _ = std::fs::remove_file(info_path(root));
    rt.shutdown_timeout(Duration::from_secs(2));
    tracing::info!("stopped; {interrupted} run(s) left to resume at the next start");
    drop(lock_file);
    served.map_err(|e| Failure::usage(format!("the HTTP server failed: {e}")))
}

fn now() -> String {
    crate::wire::time(jiff::Timestamp::now().as_millisecond())
}

/// Resolves when the daemon should stop: SIGTERM or SIGINT; idle for `idle_exit`; or its state
/// root removed (a test's temporary directory), which leaves nothing to serve.
async fn shutdown_signal(
    (mut term, mut int): (tokio::signal::unix::Signal, tokio::signal::unix::Signal),
    root: PathBuf,
    idle_exit: Option<Duration>,
    is_idle: impl Fn() -> bool,
    last_activity: Arc<AtomicI64>,
    started: Instant,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = term.recv() => return,
            _ = int.recv() => return,
            _ = tick.tick() => {
                if !lock_path(&root).exists() {
                    tracing::info!("the state root {} is gone; stopping", root.display());
                    return;
                }
                if let Some(idle) = idle_exit {
                    let last = Duration::from_millis(last_activity.load(Ordering::Relaxed) as u64);
                    let since = started.elapsed().saturating_sub(last);
                    if since >= idle && is_idle() {
                        tracing::info!("idle for {} s; stopping", since.as_secs());
                        return;
                    }
                }
            }
        }
    }
}
