//! Verifications: one as stored, and the result of running one.

use cairn_core::verification::{CellReport, CellStatus, KernelStart, SkipReason, TimeoutSource, Verdict};
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
    pub verdict: VerifyVerdict,
    /// Each code cell: `{index, status, duration_ms}`; a cell that raised has `error: {ename,
    /// evalue, traceback}` (ANSI stripped, bounded at 16 KiB), with `error_expected: true` when
    /// its `raises-exception` tag allowed it; a skipped one has `reason` (`tag`: its
    /// `skip-execution` tag; `after_failure`); a tagged one its `tags`.
    pub cells: Vec<VerifyCell>,
    /// The per-cell timeout the cells ran under.
    pub timeout: VerifyTimeout,
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
    pub kernel: VerifyKernelStart,
}

impl VerifyResult {
    pub fn from_report(r: &VerifyReport) -> VerifyResult {
        VerifyResult {
            verification_id: r.record.id.clone(),
            title: r.record.title.clone(),
            document: r.record.document.clone(),
            document_sha256: r.record.document_sha256.clone(),
            verdict: r.verdict.into(),
            cells: r.cells.iter().map(VerifyCell::from_report).collect(),
            timeout: VerifyTimeout { secs: r.timeout.0.as_secs(), source: r.timeout.1.into() },
            parameters: r.parameters.clone(),
            error: r.failure.clone(),
            notebook: r.record.notebook.clone(),
            draft: r.record.draft.clone(),
            preserved_edit: r.preserved_edit.as_ref().map(|p| p.display().to_string()),
            kernel: r.kernel.into(),
        }
    }
}

/// A verification's verdict: the first code cell that did not pass says it; all passed (or no
/// code at all) is `passed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum VerifyVerdict {
    Passed,
    Failed,
    Died,
    TimedOut,
    Interrupted,
}

impl VerifyVerdict {
    pub fn as_str(self) -> &'static str {
        Verdict::from(self).as_str()
    }
}

impl std::fmt::Display for VerifyVerdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<Verdict> for VerifyVerdict {
    fn from(v: Verdict) -> VerifyVerdict {
        match v {
            Verdict::Passed => VerifyVerdict::Passed,
            Verdict::Failed => VerifyVerdict::Failed,
            Verdict::Died => VerifyVerdict::Died,
            Verdict::TimedOut => VerifyVerdict::TimedOut,
            Verdict::Interrupted => VerifyVerdict::Interrupted,
        }
    }
}

impl From<VerifyVerdict> for Verdict {
    fn from(v: VerifyVerdict) -> Verdict {
        match v {
            VerifyVerdict::Passed => Verdict::Passed,
            VerifyVerdict::Failed => Verdict::Failed,
            VerifyVerdict::Died => Verdict::Died,
            VerifyVerdict::TimedOut => Verdict::TimedOut,
            VerifyVerdict::Interrupted => Verdict::Interrupted,
        }
    }
}

/// One code cell of a verification.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct VerifyCell {
    /// Its position among the document's code cells, from 0.
    pub index: usize,
    pub status: VerifyCellStatus,
    pub duration_ms: u64,
    /// What it raised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<VerifyCellError>,
    /// Its `raises-exception` tag allowed the error.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub error_expected: bool,
    /// Why it was not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<VerifySkipReason>,
    /// Its tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

impl VerifyCell {
    pub fn from_report(c: &CellReport) -> VerifyCell {
        VerifyCell {
            index: c.index,
            status: c.status.into(),
            duration_ms: c.duration_ms,
            error: c.error.as_ref().map(|e| VerifyCellError {
                ename: e.ename.clone(),
                evalue: e.evalue.clone(),
                traceback: e.traceback.clone(),
            }),
            error_expected: c.error_expected,
            reason: c.reason.map(|r| match r {
                SkipReason::Tag => VerifySkipReason::Tag,
                SkipReason::AfterFailure => VerifySkipReason::AfterFailure,
            }),
            tags: c.tags.clone(),
        }
    }
}

/// How one code cell ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum VerifyCellStatus {
    Passed,
    Failed,
    Died,
    TimedOut,
    Interrupted,
    /// Never sent: an earlier cell did not pass (or its `skip-execution` tag).
    Skipped,
}

impl From<CellStatus> for VerifyCellStatus {
    fn from(s: CellStatus) -> VerifyCellStatus {
        match s {
            CellStatus::Passed => VerifyCellStatus::Passed,
            CellStatus::Failed => VerifyCellStatus::Failed,
            CellStatus::Died => VerifyCellStatus::Died,
            CellStatus::TimedOut => VerifyCellStatus::TimedOut,
            CellStatus::Interrupted => VerifyCellStatus::Interrupted,
            CellStatus::Skipped => VerifyCellStatus::Skipped,
        }
    }
}

impl From<VerifyCellStatus> for CellStatus {
    fn from(s: VerifyCellStatus) -> CellStatus {
        match s {
            VerifyCellStatus::Passed => CellStatus::Passed,
            VerifyCellStatus::Failed => CellStatus::Failed,
            VerifyCellStatus::Died => CellStatus::Died,
            VerifyCellStatus::TimedOut => CellStatus::TimedOut,
            VerifyCellStatus::Interrupted => CellStatus::Interrupted,
            VerifyCellStatus::Skipped => CellStatus::Skipped,
        }
    }
}

/// A cell's error: the exception's name, its value and its traceback (terminal colours
/// stripped, bounded at 16 KiB with a marker).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct VerifyCellError {
    pub ename: String,
    pub evalue: String,
    pub traceback: Vec<String>,
}

/// Why a code cell was not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum VerifySkipReason {
    /// Its `skip-execution` tag.
    Tag,
    /// An earlier cell did not pass.
    AfterFailure,
}

/// The per-cell timeout a verification's cells ran under, and who set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct VerifyTimeout {
    pub secs: u64,
    pub source: VerifyTimeoutSource,
}

/// Who set a verification's per-cell timeout: `request` (`--timeout`), `document` (its
/// `metadata.execution.timeout`) or `default`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum VerifyTimeoutSource {
    Request,
    Document,
    Default,
}

impl From<TimeoutSource> for VerifyTimeoutSource {
    fn from(s: TimeoutSource) -> VerifyTimeoutSource {
        match s {
            TimeoutSource::Request => VerifyTimeoutSource::Request,
            TimeoutSource::Document => VerifyTimeoutSource::Document,
            TimeoutSource::Default => VerifyTimeoutSource::Default,
        }
    }
}

/// How a verification's kernel was started: for it (`cold`), or ahead of need by the daemon
/// (`pre_started`, a process that had run nothing, idle `idle_ms` before this verification).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case", tag = "start")]
pub enum VerifyKernelStart {
    #[default]
    Cold,
    PreStarted {
        idle_ms: u64,
    },
}

impl From<KernelStart> for VerifyKernelStart {
    fn from(k: KernelStart) -> VerifyKernelStart {
        match k {
            KernelStart::Cold => VerifyKernelStart::Cold,
            KernelStart::PreStarted { idle_ms } => VerifyKernelStart::PreStarted { idle_ms },
        }
    }
}

/// One line of a streamed verification (`POST /verifications` with `Accept:
/// application/x-ndjson`), as the daemon sends it and `cairn verify` reads it: its progress, then
/// the result or the error last.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum VerifyStreamEvent {
    Started {
        verification_id: String,
    },
    Message {
        text: String,
    },
    CellStarted {
        index: usize,
        total: usize,
    },
    CellFinished {
        index: usize,
        status: VerifyCellStatus,
        duration_ms: u64,
    },
    Result {
        result: Box<VerifyResult>,
    },
    /// The verification could not run: the HTTP status and the `{code, message}` an error answer
    /// would have carried.
    Error {
        status: u16,
        error: super::ErrorDetail,
    },
}

/// The daemon's spare kernel as a client sees it (`GET /kernel/spare`): whether it keeps one,
/// and whether one is ready, with what a verification must match to run on it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SpareKernel {
    /// The daemon keeps a spare (not turned off with `--no-spare-kernel`).
    pub enabled: bool,
    /// `ready`, `booting`, `none` (no interpreter yet, or the last boot failed) or `off`.
    pub state: String,
    pub python: Option<String>,
    /// sha256 of the kernel's environment variables (names and values).
    pub env_sha256: Option<String>,
    /// The environment hash the bootstrap cell will report (interpreter and distributions).
    pub environment_sha256: Option<String>,
    /// Milliseconds since it was ready.
    pub idle_ms: Option<u64>,
    /// Why there is none, when there is none.
    pub reason: Option<String>,
}

impl SpareKernel {
    pub fn from_engine(s: &cairn_engine::verify::SpareStatus) -> SpareKernel {
        SpareKernel {
            enabled: s.enabled,
            state: s.state.to_string(),
            python: s.python.clone(),
            env_sha256: s.env_sha256.clone(),
            environment_sha256: s.environment_sha256.clone(),
            idle_ms: s.idle_ms,
            reason: s.reason.clone(),
        }
    }

    /// Ready, or booting: a verification that fits it may wait for it.
    pub fn is_usable(&self) -> bool {
        matches!(self.state.as_str(), "ready" | "booting")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stream's lines are what the daemon sent before they were typed, field for field.
    #[test]
    fn stream_lines_keep_their_json() {
        let line = |e: VerifyStreamEvent| serde_json::to_string(&e).unwrap();
        assert_eq!(
            line(VerifyStreamEvent::Started { verification_id: "ver_1".into() }),
            r#"{"event":"started","verification_id":"ver_1"}"#
        );
        assert_eq!(line(VerifyStreamEvent::Message { text: "hi".into() }), r#"{"event":"message","text":"hi"}"#);
        assert_eq!(
            line(VerifyStreamEvent::CellStarted { index: 2, total: 5 }),
            r#"{"event":"cell_started","index":2,"total":5}"#
        );
        assert_eq!(
            line(VerifyStreamEvent::CellFinished { index: 2, status: VerifyCellStatus::TimedOut, duration_ms: 7 }),
            r#"{"event":"cell_finished","index":2,"status":"timed_out","duration_ms":7}"#
        );
        let error = super::super::ErrorDetail {
            code: "not_found".into(),
            message: "m".into(),
            problems: Vec::new(),
            missing: None,
        };
        assert_eq!(
            line(VerifyStreamEvent::Error { status: 404, error }),
            r#"{"event":"error","status":404,"error":{"code":"not_found","message":"m"}}"#
        );
    }

    #[test]
    fn a_cell_and_the_kernel_start_keep_their_json() {
        let report = CellReport {
            index: 1,
            status: CellStatus::Skipped,
            duration_ms: 0,
            error: None,
            error_expected: false,
            reason: Some(SkipReason::AfterFailure),
            tags: vec![],
        };
        let cell = VerifyCell::from_report(&report);
        assert_eq!(serde_json::to_value(&cell).unwrap(), serde_json::to_value(&report).unwrap());
        for k in [KernelStart::Cold, KernelStart::PreStarted { idle_ms: 12 }] {
            assert_eq!(serde_json::to_value(VerifyKernelStart::from(k)).unwrap(), serde_json::to_value(k).unwrap());
        }
    }
}
