//! Cairn's use cases over the store and the executors. Every thing a person or an agent can do
//! is one public function here taking one typed request and returning one typed result:
//! registering workflows, running and replaying them durably (retries, fencing, explicit
//! recovery), planning and approving, targets, verification and the session kernel. The
//! [`Service`] adds what only a long-lived owner of execution (the daemon) does: its worker pool,
//! cancel, startup recovery and the session kernel.
//!
//! **Invariant:** nothing outside this crate reads or writes the registry; the store is private
//! to [`Engine`].

// No function over `too-many-lines-threshold` (clippy.toml): a reader finds a concept by its name.
#![warn(clippy::too_many_lines)]

mod artifacts;
mod backup;
pub mod docs;
mod doctor;
mod env;
mod error;
mod export;
mod follow;
mod forecast;
pub mod launcher;
mod pipeline;
pub use forecast::JobPrediction;
pub mod placement;
pub mod plan;
mod pool;
pub mod process;
pub mod quotas;
mod read_artifact;
pub mod registry;
pub mod replay;
pub mod runner;
mod runs;
pub mod secrets;
mod service;
pub mod session;
mod slots;
mod stop;
pub mod target;
pub mod team;
pub mod verify;
mod waiting;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub use artifacts::{RunArtifacts, Trace, TraceMatch, TraceQuery};
pub use backup::{BackedUp, BackupReport};
pub use cairn_core::store::{LayerCounts, StepCounts, StepQuery};
/// The variable holding an attempt's nonce in its tool's environment (and what the tool starts).
pub use cairn_exec::NONCE_VAR;
/// A registry URL as messages show it: without its password or options.
pub use cairn_store::redacted as redact_database_url;
pub use doctor::DoctorReport;
pub use env::{Clock, IdGen, RandomIds, StateRoot, SystemClock};
pub use error::{
    EngineError, ErrorCode, ErrorKind, JOB_TIMEOUT_MAX_SECS, JOB_WAIT_MAX_SECS, LIST_LIMIT_MAX, LOG_LINES_MAX,
};
pub use export::{ExportOut, ExportRequest, ExportResult, ExportSubject};
pub use follow::{CommitWatch, Followed, OTHER_WRITERS_EVERY, RunFollower};
pub use read_artifact::{ARTIFACT_SLICE_MAX, ArtifactSlice, ReadArtifact};
pub use runs::{
    EventBatch, JobFilter, LAYERS_LIMIT_MAX, LeaseView, RunLayers, RunListing, RunView, STEPS_LIMIT_MAX,
    STEPS_PAGE_DEFAULT, StepDetail, StepExplanation, StepJobs, StepLog, StepView, StepsShown, first_steps,
    requested_steps, run_status_filter, step_statuses,
};
pub use service::{DEFAULT_LEASE, Service, ServiceConfig, SubmitRun, Submitted};
pub use stop::{StopHook, StopKind, StopSignal};
pub use waiting::is_environment_fault;

use cairn_core::store::RunStore;

/// Limits the engine applies to every attempt.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Between SIGTERM to a tool's process group and SIGKILL.
    pub kill_grace: Duration,
    pub max_stdout: usize,
    pub stderr_tail: usize,
    /// For the crash tests only: where this process kills itself (SIGKILL). Always `None`
    /// outside them; the binary sets it from `CAIRN_TEST_CRASH_AT`.
    pub crash: Option<CrashPoint>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions { kill_grace: Duration::from_secs(2), max_stdout: 16 << 20, stderr_tail: 64 << 10, crash: None }
    }
}

/// A point where the engine's process kills itself with SIGKILL, as a kill -9 from outside would
/// at that very moment (or, `give-up`, where its pool drops a run as an error would): how the
/// crash tests reach a window too narrow to hit by timing (the binary reads it from
/// `CAIRN_TEST_CRASH_AT`, which only tests set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CrashPoint {
    /// `tool-spawned:STEP:ATTEMPT`: the local tool of that attempt has been spawned, and its pid
    /// is not recorded yet.
    ToolSpawned { step: String, attempt: u32 },
    /// `session-kernel-started`: the session kernel has been started, and its pid is not
    /// recorded yet.
    SessionKernelStarted,
    /// `group-commit:N`: the Nth group of several writes is in the SQLite registry's open
    /// transaction, and not committed yet (`group-commit` is the first).
    GroupCommit { nth: u64 },
    /// `give-up:RUN`: not a kill. The daemon's pool gives up on run RUN the first time it would
    /// drive it, as on an unexpected error: the run is released here while the registry still
    /// leases it to this daemon (how the test of a lease left without a driver makes one).
    GiveUp { run: String },
}

impl std::str::FromStr for CrashPoint {
    type Err = String;

    fn from_str(text: &str) -> Result<CrashPoint, String> {
        match text {
            "session-kernel-started" => return Ok(CrashPoint::SessionKernelStarted),
            "group-commit" => return Ok(CrashPoint::GroupCommit { nth: 1 }),
            _ => {}
        }
        if let Some(run) = text.strip_prefix("give-up:").filter(|r| !r.is_empty()) {
            return Ok(CrashPoint::GiveUp { run: run.to_string() });
        }
        if let Some(nth) = text.strip_prefix("group-commit:").and_then(|n| n.parse().ok()).filter(|&n| n > 0) {
            return Ok(CrashPoint::GroupCommit { nth });
        }
        let tool = text.strip_prefix("tool-spawned:").and_then(|rest| {
            let (step, attempt) = rest.rsplit_once(':')?;
            Some(CrashPoint::ToolSpawned { step: step.to_string(), attempt: attempt.parse().ok()? })
        });
        tool.ok_or_else(|| {
            format!(
                "`{text}` is not a crash point: write tool-spawned:STEP:ATTEMPT, session-kernel-started, group-commit[:N] or give-up:RUN"
            )
        })
    }
}

/// Kills this process (SIGKILL) if `here` is the crash point `set` (a crash test's).
pub(crate) fn crash_at(set: &Option<CrashPoint>, here: &CrashPoint) {
    if set.as_ref() == Some(here) {
        tracing::warn!("crash point {here:?} reached: killing this process (a crash test)");
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        std::process::abort();
    }
}

/// Where an engine's registry lives, as a person is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryPlace {
    /// The SQLite file in the state root.
    Sqlite { path: std::path::PathBuf },
    /// A PostgreSQL database, possibly shared with other state roots' daemons (its URL without
    /// the password).
    Postgres { url: String },
}

pub struct Engine {
    state: StateRoot,
    registry: RegistryPlace,
    store: Box<dyn RunStore + Send + Sync>,
    clock: Box<dyn Clock>,
    ids: Box<dyn IdGen>,
    options: EngineOptions,
    launcher: Arc<dyn launcher::Launcher>,
    /// The daemon's spare scratch kernel, once it keeps one.
    spare: std::sync::OnceLock<Arc<verify::SpareKernel>>,
    /// The daemon this engine serves, once it is one: the runs it creates are leased to it.
    daemon: std::sync::OnceLock<Lessee>,
    /// The daemon's step slots, once it is one: a run executed in-process has none.
    slots: std::sync::OnceLock<slots::StepSlots>,
    /// Verifications running in this process, by id: what a cancel reaches.
    verifying: std::sync::Mutex<std::collections::HashMap<String, StopSignal>>,
    /// Bumped after each committed write: what followers wait on.
    commits: follow::Commits,
    /// Set by the step slots while steps queue for one: the registry's commits then wait a
    /// moment for company (SQLite's group commit).
    backlog: cairn_store::Backlog,
    /// Runs this process's daemon holds waiting for their environment.
    waits: waiting::Waits,
}

/// How an [`Engine`] is opened: the state root and what is injected (a clock and ids for
/// deterministic tests, a scripted launcher).
pub struct EngineBuilder {
    root: std::path::PathBuf,
    clock: Box<dyn Clock>,
    ids: Box<dyn IdGen>,
    options: EngineOptions,
    launcher: Arc<dyn launcher::Launcher>,
    database: Option<String>,
}

impl EngineBuilder {
    /// The registry is the PostgreSQL database at `url` (`cairn daemon start --database`): the
    /// state root records it, and every later open of the state root uses it. Refused when the
    /// state root keeps another registry (another URL, or a SQLite registry that holds records).
    pub fn database(mut self, url: Option<String>) -> Self {
        self.database = url;
        self
    }

    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Box::new(clock);
        self
    }

    pub fn ids(mut self, ids: impl IdGen + 'static) -> Self {
        self.ids = Box::new(ids);
        self
    }

    pub fn options(mut self, options: EngineOptions) -> Self {
        self.options = options;
        self
    }

    /// How attempts are launched (the real processes by default; a scripted launcher in tests).
    pub fn launcher(mut self, launcher: impl launcher::Launcher + 'static) -> Self {
        self.launcher = Arc::new(launcher);
        self
    }

    /// Opens the state root (creating it, mode 0700) and its registry: the SQLite file in it, or
    /// the PostgreSQL database it records.
    pub fn open(self) -> Result<Engine, EngineError> {
        let state = StateRoot::open(&self.root)?;
        let recorded = state.recorded_database()?;
        let url = match (self.database, recorded) {
            (Some(given), Some(recorded)) if given != recorded => {
                return Err(EngineError::InvalidRegistry {
                    message: format!(
                        "the state root {} keeps its registry in {}, not {}; a state root keeps one registry, so use \
                         another --home (CAIRN_HOME) for another one",
                        state.path().display(),
                        cairn_store::redacted(&recorded),
                        cairn_store::redacted(&given)
                    ),
                });
            }
            (Some(given), None) => Some(choose_database(&state, given)?),
            (_, recorded) => recorded,
        };
        let registry = match &url {
            None => RegistryPlace::Sqlite { path: state.db() },
            Some(url) => RegistryPlace::Postgres { url: cairn_store::redacted(url) },
        };
        let commits = follow::Commits::new();
        let backlog = cairn_store::Backlog::default();
        let store: Box<dyn RunStore + Send + Sync> = match url {
            None => {
                let store = cairn_store::SqliteStore::open(&state.db())?
                    .on_commit(commits.hook())
                    .with_backlog(backlog.clone());
                match self.options.crash {
                    Some(CrashPoint::GroupCommit { nth }) => Box::new(store.crash_before_group_commit(nth)),
                    _ => Box::new(store),
                }
            }
            Some(url) => {
                let store = cairn_store::PostgresStore::connect(&url)?.on_commit(commits.hook());
                // Recorded once it is known to work (reached, its schema current).
                if state.recorded_database()?.as_deref() != Some(url.as_str()) {
                    state.record_database(&url)?;
                }
                Box::new(store)
            }
        };
        Ok(Engine {
            state,
            registry,
            store,
            clock: self.clock,
            ids: self.ids,
            options: self.options,
            launcher: self.launcher,
            spare: std::sync::OnceLock::new(),
            daemon: std::sync::OnceLock::new(),
            slots: std::sync::OnceLock::new(),
            verifying: Default::default(),
            commits,
            backlog,
            waits: Default::default(),
        })
    }
}

/// A daemon as the engine acts for it: its record in the registry and how long its leases last.
#[derive(Debug, Clone)]
pub(crate) struct Lessee {
    pub(crate) record: cairn_core::store::DaemonRecord,
    pub(crate) lease_ms: i64,
}

/// Checks that `url` can become the registry of `state`, which records none yet: a PostgreSQL URL,
/// and no SQLite registry holding records in the state root (they would no longer be seen).
fn choose_database(state: &StateRoot, url: String) -> Result<String, EngineError> {
    if !cairn_store::is_postgres_url(&url) {
        return Err(EngineError::InvalidRegistry {
            message: format!(
                "--database (CAIRN_DATABASE_URL) takes a PostgreSQL URL, postgres://USER@HOST:PORT/DATABASE, not `{}`; \
                 without it the registry is the SQLite file in the state root",
                cairn_store::redacted(&url)
            ),
        });
    }
    if state.db().exists() {
        use cairn_core::store::prelude::*;
        let sqlite = cairn_store::SqliteStore::open(&state.db())?;
        let held = [
            ("workflows", sqlite.workflows()?.len()),
            ("runs", sqlite.runs(&cairn_core::store::RunQuery::newest(usize::MAX))?.len()),
            ("verifications", sqlite.verifications(usize::MAX)?.len()),
            ("plans", sqlite.plans()?.len()),
            ("targets", sqlite.targets()?.len()),
            ("docs", sqlite.docs(true)?.len()),
        ];
        let held: Vec<String> = held.iter().filter(|(_, n)| *n > 0).map(|(what, n)| format!("{n} {what}")).collect();
        if !held.is_empty() {
            return Err(EngineError::InvalidRegistry {
                message: format!(
                    "the state root {} keeps its registry in its SQLite file {}, which holds {}; a state root keeps one \
                     registry, so start the PostgreSQL one with another --home (CAIRN_HOME)",
                    state.path().display(),
                    state.db().display(),
                    held.join(", ")
                ),
            });
        }
    }
    Ok(url)
}

impl Engine {
    /// The engine over a state root, with its registry, the system clock and random ids.
    pub fn open(root: &Path) -> Result<Engine, EngineError> {
        Engine::builder(root).open()
    }

    pub fn builder(root: &Path) -> EngineBuilder {
        EngineBuilder {
            root: root.to_path_buf(),
            clock: Box::new(SystemClock),
            ids: Box::new(RandomIds),
            options: EngineOptions::default(),
            launcher: Arc::new(launcher::Processes),
            database: None,
        }
    }

    /// The state root and where things live in it.
    pub fn state(&self) -> &StateRoot {
        &self.state
    }

    /// Where the registry lives.
    pub fn registry(&self) -> &RegistryPlace {
        &self.registry
    }

    /// The daemon this engine serves, if it is one.
    pub(crate) fn lessee(&self) -> Option<&Lessee> {
        self.daemon.get()
    }

    /// The lease a run this engine creates now gets: none outside a daemon; `local` runs keep
    /// their files on this host, so only a daemon here may take them over.
    pub(crate) fn new_lease(&self, local: bool) -> Option<cairn_core::store::NewLease> {
        self.lessee().map(|l| cairn_core::store::NewLease {
            daemon: l.record.id.clone(),
            until: self.clock.now_ms() + l.lease_ms,
            home_host: local.then(|| l.record.host.clone()),
        })
    }

    pub fn options(&self) -> &EngineOptions {
        &self.options
    }

    /// Now, by the engine's clock (Unix milliseconds).
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }
}
