//! Cairn's use cases over the store and the executors: registering workflows, running them
//! durably (retries, fencing, explicit recovery) and reporting on runs.

mod env;
mod error;
pub mod plan;
pub mod registry;
pub mod remote;
pub mod replay;
pub mod runner;
pub mod session;
mod stop;
pub mod target;
pub mod verify;

use std::time::Duration;

pub use env::{Clock, IdGen, RandomIds, StateRoot, SystemClock};
pub use error::{EngineError, ErrorKind};
pub use stop::{StopKind, StopSignal};

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
    pub state: StateRoot,
    pub store: Box<dyn RunStore + Send + Sync>,
    pub clock: Box<dyn Clock>,
    pub ids: Box<dyn IdGen>,
    pub options: EngineOptions,
}

impl Engine {
    /// The engine over a state root, with its SQLite registry, the system clock and random ids.
    pub fn open(root: &std::path::Path) -> Result<Engine, EngineError> {
        let state = StateRoot::open(root)?;
        let store = cairn_store::SqliteStore::open(&state.db())?;
        Ok(Engine {
            state,
            store: Box::new(store),
            clock: Box::new(SystemClock),
            ids: Box::new(RandomIds),
            options: EngineOptions::default(),
        })
    }
}
