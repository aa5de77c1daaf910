//! Cairn's use cases over the store and the executors. Every thing a person or an agent can do
//! is one public function here taking one typed request and returning one typed result:
//! registering workflows, running and replaying them durably (retries, fencing, explicit
//! recovery), planning and approving, targets, verification and the session kernel. The
//! [`Service`] adds what only a long-lived owner of execution (the daemon) does: its worker pool,
//! cancel, startup recovery and the session kernel.
//!
//! **Invariant:** nothing outside this crate reads or writes the registry; the store is private
//! to [`Engine`].

mod artifacts;
pub mod docs;
mod env;
mod error;
mod export;
pub mod launcher;
mod pipeline;
pub mod placement;
pub mod plan;
mod pool;
pub mod process;
mod read_artifact;
pub mod registry;
pub mod replay;
pub mod runner;
mod runs;
mod service;
pub mod session;
mod stop;
pub mod target;
pub mod verify;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub use artifacts::{RunArtifacts, Trace, TraceMatch, TraceQuery};
pub use env::{Clock, IdGen, RandomIds, StateRoot, SystemClock};
pub use error::{EngineError, ErrorCode, ErrorKind};
pub use export::{ExportOut, ExportRequest, ExportResult, ExportSubject};
pub use read_artifact::{ARTIFACT_SLICE_MAX, ArtifactSlice, ReadArtifact};
pub use runs::{EventBatch, RunListing, RunView, StepDetail, StepExplanation, StepLog, StepView};
pub use service::{Service, ServiceConfig, SubmitRun, Submitted};
pub use stop::{StopHook, StopKind, StopSignal};

use cairn_core::store::RunStore;

/// Limits the engine applies to every attempt.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Between SIGTERM to a tool's process group and SIGKILL.
    pub kill_grace: Duration,
    pub max_stdout: usize,
    pub stderr_tail: usize,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions { kill_grace: Duration::from_secs(2), max_stdout: 16 << 20, stderr_tail: 64 << 10 }
    }
}

pub struct Engine {
    state: StateRoot,
    store: Box<dyn RunStore + Send + Sync>,
    clock: Box<dyn Clock>,
    ids: Box<dyn IdGen>,
    options: EngineOptions,
    launcher: Arc<dyn launcher::Launcher>,
    /// The daemon's spare scratch kernel, once it keeps one.
    spare: std::sync::OnceLock<Arc<verify::SpareKernel>>,
    /// Verifications running in this process, by id: what a cancel reaches.
    verifying: std::sync::Mutex<std::collections::HashMap<String, StopSignal>>,
}

/// How an [`Engine`] is opened: the state root and what is injected (a clock and ids for
/// deterministic tests, a hook after every committed write for the daemon's event followers).
pub struct EngineBuilder {
    root: std::path::PathBuf,
    clock: Box<dyn Clock>,
    ids: Box<dyn IdGen>,
    options: EngineOptions,
    on_commit: Option<Box<dyn Fn() + Send + Sync>>,
    launcher: Arc<dyn launcher::Launcher>,
}

impl EngineBuilder {
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

    /// Called after every committed write to the registry (after its lock is released).
    pub fn on_commit(mut self, hook: impl Fn() + Send + Sync + 'static) -> Self {
        self.on_commit = Some(Box::new(hook));
        self
    }

    /// Opens the state root (creating it, mode 0700) and its registry.
    pub fn open(self) -> Result<Engine, EngineError> {
        let state = StateRoot::open(&self.root)?;
        let mut store = cairn_store::SqliteStore::open(&state.db())?;
        if let Some(hook) = self.on_commit {
            store = store.on_commit(hook);
        }
        Ok(Engine {
            state,
            store: Box::new(store),
            clock: self.clock,
            ids: self.ids,
            options: self.options,
            launcher: self.launcher,
            spare: std::sync::OnceLock::new(),
            verifying: Default::default(),
        })
    }
}

impl Engine {
    /// The engine over a state root, with its SQLite registry, the system clock and random ids.
    pub fn open(root: &Path) -> Result<Engine, EngineError> {
        Engine::builder(root).open()
    }

    pub fn builder(root: &Path) -> EngineBuilder {
        EngineBuilder {
            root: root.to_path_buf(),
            clock: Box::new(SystemClock),
            ids: Box::new(RandomIds),
            options: EngineOptions::default(),
            on_commit: None,
            launcher: Arc::new(launcher::Processes),
        }
    }

    /// The state root and where things live in it.
    pub fn state(&self) -> &StateRoot {
        &self.state
    }

    pub fn options(&self) -> &EngineOptions {
        &self.options
    }

    /// Now, by the engine's clock (Unix milliseconds).
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }
}
