//! `cairn backup PATH`: a consistent copy of a SQLite registry and the state root's files that
//! give the same answers, taken while the daemon runs. The copy is itself a state root
//! (`cairn.db`, `registry/`, `plans/`, …): point `CAIRN_HOME` at it, or copy it back in place.
//!
//! **Consistency:** the database is copied first, in one step of SQLite's online backup (one
//! read transaction: the state of one commit, without stopping the daemon's writes). The files
//! copied after it are written before the records that name them and never changed after (a
//! workflow's snapshot is renamed into place before its row, a plan's file is synced before its
//! row), so every record in the copy finds its file; a file newer than the copy is harmless.
//!
//! **Atomicity:** everything is written into a hidden folder beside `PATH` and renamed to `PATH`
//! once whole and synced: a crash leaves no half backup under the name, and `PATH` is never one
//! that existed before.

use std::fs;
use std::path::{Path, PathBuf};

use crate::{Engine, EngineError, RegistryPlace};

/// What of the state root a backup copies, besides the database: each a path relative to the
/// state root, and what it holds.
const COPIED: &[(&str, &str)] = &[
    ("registry", "registered workflows' snapshots"),
    ("plans", "stored plans"),
    ("auth/receipt.key", "the key plans' receipts are signed with"),
    ("workflows", "verifications' notebooks and drafts"),
    ("documents", "documents given to verifications as text"),
];

/// What a backup does not copy, and why.
const LEFT: &[&str] = &[
    "runs/: the run directories (the artifacts' bytes), often large and still being written by running steps: copy \
     them with your file backup; `cairn doctor` on the restored state root checks every artifact against the registry",
    "auth/ tokens: the daemon makes new ones when it first starts on the restored state root",
    "python/, kernels/, ssh/, exports/: made again as they are needed",
];

/// The name of the database file in a backup (the state root's own name for it).
const DATABASE_FILE: &str = "cairn.db";

/// A finished backup.
#[derive(Debug, Clone)]
pub struct BackupReport {
    /// The backup's folder (absolute).
    pub path: PathBuf,
    /// The registry's copy in it.
    pub database: PathBuf,
    /// The database copy's size.
    pub database_bytes: u64,
    /// What was copied besides the database.
    pub copied: Vec<BackedUp>,
    /// What was not copied, and why, in words.
    pub left: Vec<String>,
}

/// One part of the state root, as copied.
#[derive(Debug, Clone)]
pub struct BackedUp {
    /// Relative to the state root (and to the backup).
    pub path: String,
    pub what: String,
    pub files: u64,
    pub bytes: u64,
}

impl Engine {
    /// Copies the registry (SQLite's online backup) and the files that give the same answers into
    /// the new folder `dest`. Refused for a PostgreSQL registry (pg_dump copies it), and for a
    /// `dest` that exists or lies inside the state root.
    pub fn backup(&self, dest: &Path) -> Result<BackupReport, EngineError> {
        if let RegistryPlace::Postgres { url } = &self.registry {
            return Err(EngineError::BackupUnsupported {
                message: format!(
                    "this state root's registry is the PostgreSQL database {url}, which `cairn backup` does not copy: \
                     back it up with pg_dump (`pg_dump --format=custom --file=cairn.dump URL`), and the state root {} \
                     with your file backup (docs/src/guide/recovery.md, \"Backup and integrity\")",
                    self.state.path().display()
                ),
            });
        }
        let dest = self.backup_destination(dest)?;
        let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let staging = dest.with_file_name(format!(".{name}.partial-{}-{}", std::process::id(), self.ids.token()));
        {
            use std::os::unix::fs::DirBuilderExt;
            fs::DirBuilder::new().mode(0o700).create(&staging).map_err(|e| EngineError::io(&staging, e))?;
        }
        let written = self.write_backup(&staging).and_then(|(database_bytes, copied)| {
            if fs::symlink_metadata(&dest).is_ok() {
                return Err(EngineError::BackupExists { path: dest.display().to_string() });
            }
            fs::rename(&staging, &dest).map_err(|e| EngineError::io(&dest, e))?;
            if let Some(parent) = dest.parent() {
                sync_dir(parent)?;
            }
            Ok(BackupReport {
                database: dest.join(DATABASE_FILE),
                path: dest.clone(),
                database_bytes,
                copied,
                left: LEFT.iter().map(|s| s.to_string()).collect(),
            })
        });
        if written.is_err() {
            let _ = fs::remove_dir_all(&staging);
        }
        written
    }

    /// `dest` made absolute, once it is known to be new, in an existing folder, outside the
    /// state root.
    fn backup_destination(&self, dest: &Path) -> Result<PathBuf, EngineError> {
        let invalid = |message: &str| EngineError::InvalidBackupPath {
            path: dest.display().to_string(),
            message: message.to_string(),
        };
        if fs::symlink_metadata(dest).is_ok() {
            return Err(EngineError::BackupExists { path: dest.display().to_string() });
        }
        let Some(name) = dest.file_name() else {
            return Err(invalid("name the new folder the backup is written to"));
        };
        let parent = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let parent = parent
            .canonicalize()
            .map_err(|e| invalid(&format!("its folder {} cannot be used ({e}); create it first", parent.display())))?;
        if parent.starts_with(self.state.path()) {
            return Err(invalid(&format!(
                "it lies inside the state root {} it would copy; write the backup outside it",
                self.state.path().display()
            )));
        }
        Ok(parent.join(name))
    }

    /// The database and the files, into `staging`, synced.
    fn write_backup(&self, staging: &Path) -> Result<(u64, Vec<BackedUp>), EngineError> {
        let database_bytes = self.store.backup_to(&staging.join(DATABASE_FILE))?;
        let mut copied = Vec::new();
        for (rel, what) in COPIED {
            let from = self.state.path().join(rel);
            if fs::symlink_metadata(&from).is_err() {
                continue;
            }
            let mut tally = (0u64, 0u64);
            copy_tree(&from, &staging.join(rel), &mut tally)?;
            copied.push(BackedUp { path: rel.to_string(), what: what.to_string(), files: tally.0, bytes: tally.1 });
        }
        sync_dir(staging)?;
        Ok((database_bytes, copied))
    }
}

/// Copies `from` (a file, a symlink, or a folder) to the new `to`, symlinks as symlinks (never
/// followed), each file synced; hidden entries of a folder (a snapshot or a plan being written)
/// are left out. `tally` counts files and bytes.
fn copy_tree(from: &Path, to: &Path, tally: &mut (u64, u64)) -> Result<(), EngineError> {
    let meta = fs::symlink_metadata(from).map_err(|e| EngineError::io(from, e))?;
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent).map_err(|e| EngineError::io(parent, e))?;
    }
    let kind = meta.file_type();
    if kind.is_symlink() {
        let target = fs::read_link(from).map_err(|e| EngineError::io(from, e))?;
        std::os::unix::fs::symlink(&target, to).map_err(|e| EngineError::io(to, e))?;
    } else if kind.is_dir() {
        fs::create_dir(to).map_err(|e| EngineError::io(to, e))?;
        fs::set_permissions(to, meta.permissions()).map_err(|e| EngineError::io(to, e))?;
        let mut entries: Vec<_> = fs::read_dir(from).map_err(|e| EngineError::io(from, e))?.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            copy_tree(&entry.path(), &to.join(entry.file_name()), tally)?;
        }
        sync_dir(to)?;
    } else if kind.is_file() {
        let bytes = fs::copy(from, to).map_err(|e| EngineError::io(to, e))?;
        fs::File::open(to).and_then(|f| f.sync_all()).map_err(|e| EngineError::io(to, e))?;
        tally.0 += 1;
        tally.1 += bytes;
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> Result<(), EngineError> {
    fs::File::open(dir).and_then(|f| f.sync_all()).map_err(|e| EngineError::io(dir, e))
}
