//! Verifications: one as stored, and the result of running one.

use cairn_engine::verify::VerifyReport;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// A verification as stored: verdict, per-cell status, notebook or draft.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct VerificationRecord {
    pub verification_id: String,
    pub title: String,
    pub document: String,
    pub document_sha256: String,
    /// `passed`, `failed`, `died`, `timed_out` or `interrupted`; null while it runs.
    pub verdict: Option<String>,
    /// `[{index, status, duration_ms, error?, error_expected?, reason?, tags?}]`, as in
    /// [`VerifyResult`].
    #[schema(value_type = Vec<Object>)]
    pub cells: Value,
    pub notebook: Option<String>,
    pub draft: Option<String>,
    pub error: Option<String>,
    /// Unix milliseconds.
    pub created_at: i64,
    pub finished_at: Option<i64>,
    /// The parameters it injected (papermill's convention), when there were any.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    #[schema(value_type = Object)]
    pub parameters: serde_json::Map<String, Value>,
    /// For one verification read alone: its draft's text (cut at 256 KiB), if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_text: Option<String>,
}

impl VerificationRecord {
    pub fn from_record(v: &cairn_core::store::VerificationRecord) -> VerificationRecord {
        VerificationRecord {
            verification_id: v.id.clone(),
            title: v.title.clone(),
            document: v.document.clone(),
            document_sha256: v.document_sha256.clone(),
            verdict: v.verdict.clone(),
            cells: v.cells.clone(),
            notebook: v.notebook.clone(),
            draft: v.draft.clone(),
            error: v.error.clone(),
            created_at: v.created_at,
            finished_at: v.finished_at,
            parameters: v.parameters.as_object().cloned().unwrap_or_default(),
            draft_text: None,
        }
    }
}

/// What a verification found: the verdict, each cell's status, and the notebook (a pass) or the
/// draft (a failure).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct VerifyResult {
    pub verification_id: String,
    pub title: String,
    pub document: String,
    pub document_sha256: String,
    pub verdict: String,
    /// Each code cell: `{index, status, duration_ms}`; a cell that raised has `error: {ename,
    /// evalue, traceback}` (ANSI stripped, bounded at 16 KiB), with `error_expected: true` when
    /// its `raises-exception` tag allowed it; a skipped one has `reason` (`tag`: its
    /// `skip-execution` tag; `after_failure`); a tagged one its `tags`.
    #[schema(value_type = Vec<Object>)]
    pub cells: Vec<Value>,
    /// The per-cell timeout the cells ran under: `{secs, source}`, `source` being `request`
    /// (`--timeout`), `document` (its `metadata.execution.timeout`) or `default`.
    #[schema(value_type = Object)]
    pub timeout: Value,
    /// The parameters injected (papermill's convention), when there were any.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    #[schema(value_type = Object)]
    pub parameters: serde_json::Map<String, Value>,
    /// The failing cell's error, in words.
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notebook: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft: Option<String>,
    /// A draft of this title a person had edited, moved aside before the draft was rewritten.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preserved_edit: Option<String>,
    /// How the kernel started: `{start: "cold"}`, started for this verification, or
    /// `{start: "pre_started", idle_ms}`, the daemon's spare, which had run nothing.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub kernel: Value,
}

impl VerifyResult {
    pub fn from_report(r: &VerifyReport) -> VerifyResult {
        VerifyResult {
            verification_id: r.record.id.clone(),
            title: r.record.title.clone(),
            document: r.record.document.clone(),
            document_sha256: r.record.document_sha256.clone(),
            verdict: r.verdict.as_str().to_string(),
            cells: r.cells.iter().map(|c| serde_json::to_value(c).unwrap_or(Value::Null)).collect(),
            timeout: serde_json::json!({"secs": r.timeout.0.as_secs(), "source": r.timeout.1.as_str()}),
            parameters: r.parameters.clone(),
            error: r.failure.clone(),
            notebook: r.record.notebook.clone(),
            draft: r.record.draft.clone(),
            preserved_edit: r.preserved_edit.as_ref().map(|p| p.display().to_string()),
            kernel: serde_json::to_value(r.kernel).unwrap_or(Value::Null),
        }
    }
}
