//! What the engine takes from the outside world, injected so tests are deterministic: the clock,
//! the id generator and the state root's layout.

use std::path::{Path, PathBuf};

use crate::EngineError;

pub trait Clock: Send + Sync {
    /// Unix time in milliseconds.
    fn now_ms(&self) -> i64;
}

pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
    }
}

pub trait IdGen: Send + Sync {
    /// A new run id suffix, sortable by creation time.
    fn run_suffix(&self) -> String;
    /// A fresh, unguessable attempt token.
    fn token(&self) -> String;
}

pub struct RandomIds;

impl IdGen for RandomIds {
    fn run_suffix(&self) -> String {
        uuid::Uuid::now_v7().simple().to_string()
    }

    fn token(&self) -> String {
        format!("att_{}", uuid::Uuid::new_v4().simple())
    }
}

/// The state root (`$CAIRN_HOME`) and where things live in it.
#[derive(Debug, Clone)]
pub struct StateRoot {
    root: PathBuf,
}

impl StateRoot {
    /// Opens the state root, creating it with mode 0700 (and tightening an existing one).
    pub fn open(root: &Path) -> Result<StateRoot, EngineError> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(root).map_err(|e| EngineError::io(root, e))?;
        let meta = std::fs::metadata(root).map_err(|e| EngineError::io(root, e))?;
        if meta.permissions().mode() & 0o077 != 0 {
            std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| EngineError::io(root, e))?;
        }
        let root = root.canonicalize().map_err(|e| EngineError::io(root, e))?;
        for sub in ["registry", "runs"] {
            let p = root.join(sub);
            std::fs::create_dir_all(&p).map_err(|e| EngineError::io(&p, e))?;
        }
        Ok(StateRoot { root })
    }

    pub fn path(&self) -> &Path {
        &self.root
    }

    pub fn db(&self) -> PathBuf {
        self.root.join("cairn.db")
    }

    pub fn registry(&self) -> PathBuf {
        self.root.join("registry")
    }

    pub fn runs(&self) -> PathBuf {
        self.root.join("runs")
    }
}
