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

    /// The SQLite registry's file (the default registry).
    pub fn db(&self) -> PathBuf {
        self.root.join("cairn.db")
    }

    /// The file that records a PostgreSQL registry's URL, when the state root uses one (mode
    /// 0600: the URL may hold a password).
    pub fn database_file(&self) -> PathBuf {
        self.root.join("database")
    }

    /// The PostgreSQL registry this state root records, if any (else its registry is the SQLite
    /// file [`StateRoot::db`]).
    pub fn recorded_database(&self) -> Result<Option<String>, EngineError> {
        let file = self.database_file();
        match std::fs::read_to_string(&file) {
            Ok(text) => {
                let url = text.trim();
                if cairn_store::is_postgres_url(url) {
                    Ok(Some(url.to_string()))
                } else {
                    Err(EngineError::InvalidRegistry {
                        message: format!(
                            "{} should hold the URL of this state root's PostgreSQL registry (postgres://…), and holds something else; \
                             write the URL there, or remove the file to use the SQLite registry {}",
                            file.display(),
                            self.db().display()
                        ),
                    })
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(EngineError::io(&file, e)),
        }
    }

    /// Records `url` as this state root's registry, replacing nothing: written to a new file and
    /// renamed into place, mode 0600.
    pub(crate) fn record_database(&self, url: &str) -> Result<(), EngineError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let file = self.database_file();
        let staged = self.root.join(".database.new");
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&staged)
            .map_err(|e| EngineError::io(&staged, e))?;
        out.write_all(format!("{url}\n").as_bytes())
            .and_then(|_| out.sync_all())
            .map_err(|e| EngineError::io(&staged, e))?;
        std::fs::rename(&staged, &file).map_err(|e| EngineError::io(&file, e))
    }

    pub fn registry(&self) -> PathBuf {
        self.root.join("registry")
    }

    pub fn runs(&self) -> PathBuf {
        self.root.join("runs")
    }
}
