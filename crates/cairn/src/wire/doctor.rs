//! What `cairn doctor --json` and `cairn backup --json` print.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `cairn doctor --json`: every check of the registry and the state root, and every finding.
/// `healthy` is false (and the command exits 1) when there is a finding.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Doctor {
    pub healthy: bool,
    pub state_root: String,
    /// The SQLite file, or the PostgreSQL URL without its password.
    pub registry: String,
    pub checks: Vec<DoctorCheck>,
    pub findings: Vec<DoctorFinding>,
}

/// One check: `database`, `event_log`, `artifacts` or `run_dirs`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DoctorCheck {
    pub check: String,
    /// `passed`, `failed` or `not_applicable` (the summary says why).
    pub status: String,
    /// How many things it examined (events, artifacts, folders).
    pub examined: u64,
    pub summary: String,
}

/// One problem: its check, `error` or `warning`, the run and the file or folder it concerns, and
/// what is wrong and what to do.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DoctorFinding {
    pub check: String,
    pub severity: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    pub message: String,
}

fn text<T: Serialize>(v: &T) -> String {
    match super::to_value(v) {
        serde_json::Value::String(s) => s,
        other => other.to_string(),
    }
}

impl Doctor {
    pub fn from_engine(r: &cairn_engine::DoctorReport) -> Doctor {
        Doctor {
            healthy: r.healthy(),
            state_root: r.state_root.display().to_string(),
            registry: r.registry.clone(),
            checks: r
                .checks
                .iter()
                .map(|c| DoctorCheck {
                    check: c.check.as_str().to_string(),
                    status: text(&c.status),
                    examined: c.examined,
                    summary: c.summary.clone(),
                })
                .collect(),
            findings: r
                .findings
                .iter()
                .map(|f| DoctorFinding {
                    check: f.check.as_str().to_string(),
                    severity: text(&f.severity),
                    run_id: f.run_id.clone(),
                    path: f.path.clone(),
                    message: f.message.clone(),
                })
                .collect(),
        }
    }
}

/// `cairn backup PATH --json`: where the backup is and what it holds.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Backup {
    /// The backup's folder: a state root of its own (`CAIRN_HOME` may point at it).
    pub path: String,
    /// The registry's copy, `cairn.db` in it.
    pub database: String,
    pub database_bytes: u64,
    pub copied: Vec<BackupPart>,
    /// What was not copied, and why.
    pub left: Vec<String>,
}

/// One part of the state root, as copied.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct BackupPart {
    /// Relative to the state root and the backup.
    pub path: String,
    pub what: String,
    pub files: u64,
    pub bytes: u64,
}

impl Backup {
    pub fn from_engine(r: &cairn_engine::BackupReport) -> Backup {
        Backup {
            path: r.path.display().to_string(),
            database: r.database.display().to_string(),
            database_bytes: r.database_bytes,
            copied: r
                .copied
                .iter()
                .map(|c| BackupPart { path: c.path.clone(), what: c.what.clone(), files: c.files, bytes: c.bytes })
                .collect(),
            left: r.left.clone(),
        }
    }
}
