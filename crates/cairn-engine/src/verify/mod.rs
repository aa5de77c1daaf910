//! Verification of workflow documents: each code cell, in order, in a fresh scratch kernel that
//! is discarded afterwards; the first failure stops the run; the proof is kept as a notebook.
//!
//! **Invariant:** a pass is written under `<state>/workflows/` before its verdict is recorded or
//! returned; a failure overwrites the single draft of its title, preserving a draft a person
//! edited since Cairn wrote it.

mod live;
mod python;
mod spare;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cairn_core::canonical::sha256_hex;
use cairn_core::document::{
    CellKind, DocCell, ParsedDocument, TAG_RAISES_EXCEPTION, TAG_SKIP_EXECUTION, is_notebook, read_document,
};
use cairn_core::store::VerificationRecord;
use cairn_core::verification::{
    self, CellError, CellOutcome, CellReport, CellStatus, KernelStart, Provenance, SkipReason, TimeoutSource, Verdict,
    slug,
};
use cairn_exec::kernel::{self, KernelConfig, ScratchKernel};
use serde_json::{Value, json};

pub use live::{INTERRUPT_GRACE, LiveVerification, StopHow};
pub use python::{IPYKERNEL_PIN, resolve_python};
pub use spare::{KernelAsk, SpareKernel, SpareStatus, env_sha256};

use crate::{Engine, EngineError, StopSignal};

/// The bootstrap shipped with Cairn: stdlib only, run before the first cell and kept as the
/// notebook's first code cell.
pub const BOOTSTRAP: &str = include_str!("bootstrap.py");

/// The outputs of all cells of one notebook together, in bytes of JSON; past it, later outputs are
/// replaced by a visible marker.
pub const NOTEBOOK_OUTPUT_CAP: usize = 16 << 20;

/// The most of a draft [`Engine::draft_text`] gives.
pub const DRAFT_TEXT_LIMIT: usize = 256 << 10;

/// Passes kept under `<state>/workflows/`; older ones are removed.
pub const KEEP_PASSES: usize = 50;

/// The per-cell timeout when neither the request nor the document sets one.
pub const DEFAULT_CELL_TIMEOUT: Duration = Duration::from_secs(600);

/// The longest per-cell timeout a request or a document may set.
pub const MAX_CELL_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// What to verify.
#[derive(Debug, Clone)]
pub enum Document {
    /// A markdown or `.ipynb` file.
    File(PathBuf),
    /// A document's text (an `.ipynb`'s JSON, or markdown): kept under `<state>/documents/`,
    /// named by its hash, so the verification records a file like any other.
    Text(String),
    /// The draft of the request's title, as a failed verification left it (maybe edited since).
    Draft,
}

#[derive(Debug, Clone)]
pub struct VerifyRequest {
    pub document: Document,
    /// Names the verification, its notebook and its draft (default: the file's name, or
    /// `document-<sha>` for a text).
    pub title: Option<String>,
    /// The request's per-cell timeout; without one the document's `metadata.execution.timeout`
    /// applies, else [`DEFAULT_CELL_TIMEOUT`].
    pub cell_timeout: Option<Duration>,
    pub memory_limit: Option<u64>,
    /// An interpreter with ipykernel; `None` uses (and if needed creates) `<state>/python`.
    pub python: Option<PathBuf>,
    /// Refuse instead of waiting when the kernel slot is taken.
    pub no_wait: bool,
    /// Values injected as papermill does: a cell tagged `injected-parameters` after the cell
    /// tagged `parameters` (or first).
    pub parameters: serde_json::Map<String, Value>,
    /// Requested from another thread (Ctrl-C, a cancel) to stop: before the kernel starts
    /// nothing runs; after, the engine kills the kernel, and the verdict is `interrupted`.
    pub stop: Option<StopSignal>,
    /// Use the daemon's spare kernel when it fits (`--no-spare`, `spare: false` turn it off).
    pub spare: bool,
}

/// Live progress of a verification.
pub trait VerifyObserver {
    /// The verification is recorded and its kernel started: from now on it is listed as a job,
    /// `id` polls it, and an interrupt stops it.
    fn started(&mut self, _verification_id: &str) {}
    fn message(&mut self, _text: &str) {}
    fn cell_started(&mut self, _index: usize, _total: usize) {}
    fn cell_finished(&mut self, _index: usize, _status: CellStatus, _duration_ms: u64) {}
}

pub struct Quiet;
impl VerifyObserver for Quiet {}

#[derive(Debug, Clone)]
pub struct VerifyReport {
    pub record: VerificationRecord,
    pub verdict: Verdict,
    pub cells: Vec<CellReport>,
    /// The per-cell timeout the cells ran under, and who set it.
    pub timeout: (Duration, TimeoutSource),
    /// The parameters injected.
    pub parameters: serde_json::Map<String, Value>,
    /// The failing cell's error, in words.
    pub failure: Option<String>,
    /// A draft of this title that a person had edited, moved aside before the draft was rewritten.
    pub preserved_edit: Option<PathBuf>,
    /// A cold start, or the daemon's spare.
    pub kernel: KernelStart,
}

/// Keeps a verification reachable by [`Engine::cancel_verification`] while it runs.
struct Cancellable<'a> {
    engine: &'a Engine,
    id: String,
}

impl<'a> Cancellable<'a> {
    fn new(engine: &'a Engine, id: &str, stop: &StopSignal) -> Self {
        engine.verifying.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(id.to_string(), stop.clone());
        Cancellable { engine, id: id.to_string() }
    }
}

impl Drop for Cancellable<'_> {
    fn drop(&mut self) {
        self.engine.verifying.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&self.id);
    }
}

/// The exclusive admission slot shared by verifications and session-kernel jobs.
pub struct Slot {
    _file: File,
}

impl Engine {
    pub fn workflows_dir(&self) -> PathBuf {
        self.state.path().join("workflows")
    }

    pub fn drafts_dir(&self) -> PathBuf {
        self.workflows_dir().join("drafts")
    }

    /// The newest passed verification whose notebook is still on disk: what the workflow export
    /// offers (`cairn kernel export --workflow`, `GET /api/notebook?workflow=1`).
    pub fn newest_pass(&self) -> Result<Option<VerificationRecord>, EngineError> {
        Ok(self.store.verifications(1000)?.into_iter().find(|v| {
            v.verdict.as_deref() == Some("passed") && v.notebook.as_deref().is_some_and(|n| Path::new(n).is_file())
        }))
    }

    /// The newest passed verification's notebook: its record and its bytes.
    pub fn newest_notebook(&self) -> Result<(VerificationRecord, Vec<u8>), EngineError> {
        let v = self.newest_pass()?.ok_or(EngineError::NothingVerified)?;
        let path = v.notebook.clone().unwrap_or_default();
        let bytes =
            std::fs::read(&path).map_err(|e| EngineError::NotebookUnreadable { path, message: e.to_string() })?;
        Ok((v, bytes))
    }

    /// Verifications, newest first.
    pub fn verifications(&self, limit: usize) -> Result<Vec<VerificationRecord>, EngineError> {
        EngineError::in_range("limit", limit, 1..=crate::error::LIST_LIMIT_MAX, "")?;
        Ok(self.store.verifications(limit)?)
    }

    pub fn verification(&self, id: &str) -> Result<VerificationRecord, EngineError> {
        self.store.verification(id)?.ok_or_else(|| EngineError::VerificationNotFound { id: id.to_string() })
    }

    /// A failed verification's draft as text, cut at [`DRAFT_TEXT_LIMIT`] (with a note saying
    /// so), or why it cannot be read (the next failure of the same title overwrites it); `None`
    /// for a verification without a draft.
    pub fn draft_text(&self, v: &VerificationRecord) -> Option<String> {
        let path = v.draft.as_deref()?;
        Some(match std::fs::read(path) {
            Ok(bytes) if bytes.len() > DRAFT_TEXT_LIMIT => format!(
                "{}\n[… cut at {DRAFT_TEXT_LIMIT} bytes; the whole draft is {path}]",
                String::from_utf8_lossy(&bytes[..DRAFT_TEXT_LIMIT])
            ),
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) => format!("[the draft {path} cannot be read: {e}]"),
        })
    }

    /// The notebook a passed verification proved; a failed one has none (its draft is named).
    pub fn verification_notebook(&self, id: &str) -> Result<Vec<u8>, EngineError> {
        let v = self.verification(id)?;
        let Some(path) = v.notebook else {
            return Err(EngineError::NoNotebook {
                message: match &v.draft {
                    Some(d) => format!("verification `{id}` did not pass, so it proved no notebook; its draft is {d}"),
                    None => format!(
                        "verification `{id}` has no notebook (verdict: {})",
                        v.verdict.as_deref().unwrap_or("none yet")
                    ),
                },
            });
        };
        std::fs::read(&path).map_err(|e| EngineError::NotebookUnreadable { path, message: e.to_string() })
    }

    /// Takes the kernel admission slot (an exclusive lock, released when the returned value is
    /// dropped, including by a crash). Waits for it unless `no_wait`.
    pub fn acquire_slot(
        &self,
        no_wait: bool,
        stop: Option<&StopSignal>,
        obs: &mut dyn VerifyObserver,
    ) -> Result<Slot, EngineError> {
        let path = self.state.path().join("kernel.slot");
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| EngineError::io(&path, e))?;
        let mut told = false;
        loop {
            match file.try_lock() {
                Ok(()) => {
                    // Whoever holds the slot next settles a verification whose process was killed.
                    self.reap_orphan_verifications();
                    return Ok(Slot { _file: file });
                }
                Err(std::fs::TryLockError::WouldBlock) if no_wait => {
                    return Err(EngineError::KernelSlotTaken {
                        message: "the kernel slot is taken by another verification or session job; wait for it, or run without --no-wait to queue".into(),
                    });
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    if !told {
                        obs.message("waiting for the kernel slot (another verification or session job runs)");
                        told = true;
                    }
                    if stop.is_some_and(|s| s.requested().is_some()) {
                        return Err(EngineError::Interrupted {
                            message: "interrupted while waiting for the kernel slot; nothing ran".into(),
                        });
                    }
                    // Polled rather than a blocking lock, so an interrupt is seen while waiting.
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(EngineError::io(&path, e)),
            }
        }
    }

    /// Stops a verification this process runs, as Ctrl-C stops `cairn verify`: its kernel is
    /// killed and its verdict is `interrupted` (the cell that ran, `interrupted`; the rest
    /// skipped).
    pub fn cancel_verification(&self, id: &str) -> Result<(), EngineError> {
        let stop = self.verifying.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(id).cloned();
        match stop {
            Some(stop) => {
                stop.request(crate::StopKind::Cancel);
                Ok(())
            }
            None => {
                let v = self.verification(id)?;
                Err(EngineError::StopRefused {
                    message: match v.verdict {
                        Some(verdict) => {
                            format!("verification `{id}` has already ended ({verdict}); nothing to cancel")
                        }
                        None => format!(
                            "verification `{id}` is not run by this daemon (a `cairn verify` runs it in its own process: Ctrl-C there); POST /kernel/interrupt stops any"
                        ),
                    },
                })
            }
        }
    }

    pub fn verify(&self, req: &VerifyRequest, obs: &mut dyn VerifyObserver) -> Result<VerifyReport, EngineError> {
        let doc = self.verification_document(req)?;
        // Always a stop signal, so a cancel (`POST /verifications/{id}/cancel`) reaches it.
        let stop = req.stop.clone().unwrap_or_default();
        let code: Vec<&DocCell> = doc.parsed.cells.iter().filter(|c| c.kind == CellKind::Code).collect();

        let python = resolve_python(req.python.as_deref(), &self.state.path().join("python"), obs)?;
        // The daemon boots its next spare once this verification is over, however it ends.
        let _replenish = self.spare.get().map(|keeper| spare::Replenish(keeper.clone()));
        let _slot = self.acquire_slot(req.no_wait, Some(&stop), obs)?;
        if stop.requested().is_some() {
            return Err(EngineError::Interrupted {
                message: "interrupted before the kernel started; nothing ran".into(),
            });
        }

        let workdir = doc.path.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
        let (id, runtime_dir, mut kernel, kernel_start) = self.verification_kernel(req, &python, &workdir)?;
        let mut record = VerificationRecord {
            id: id.clone(),
            title: doc.title.clone(),
            document: doc.label.clone(),
            document_sha256: sha256_hex(&doc.bytes),
            verdict: None,
            cells: json!([]),
            notebook: None,
            draft: None,
            error: None,
            created_at: self.clock.now_ms(),
            finished_at: None,
            parameters: Value::Object(req.parameters.clone()),
        };
        // Listed as a job while it runs (before it is recorded, so it is never seen recorded but
        // neither running nor finished); `interrupt_kernel` and `restart_kernel` stop it.
        let me = crate::process::this_process();
        let live_record = LiveVerification {
            verification_id: id.clone(),
            title: doc.title.clone(),
            document: doc.label.clone(),
            owner_pid: me.pid,
            owner_start_time: me.start_time,
            kernel_pid: kernel.pid(),
            kernel_start_time: cairn_exec::process_start_time(kernel.pid()),
            cells_done: 0,
            cells_total: code.len(),
            started_at: record.created_at,
        };
        self.write_live(&runtime_dir, &live_record);
        let watch = std::sync::Arc::new(live::Watch::default());
        live::watch_for_stop(runtime_dir.clone(), kernel.handle(), watch.clone());
        // Unlisted when this returns: after its verdict is recorded, or on an early error.
        let _listed = live::Listed { watch: watch.clone(), runtime_dir: runtime_dir.clone() };
        self.store.insert_verification(&record)?;
        // A stop from now on kills the kernel: the running cell ends `interrupted`.
        let handle = kernel.handle();
        let _kill_on_stop = stop.on_request(move |_| handle.kill());
        let _cancellable = Cancellable::new(self, &id, &stop);
        obs.started(&id);

        let mut progress = CellProgress {
            timeout: doc.timeout.0,
            memory_limit: req.memory_limit,
            stop: &stop,
            watch: &watch,
            runtime_dir: &runtime_dir,
            live: live_record,
        };
        let mut ran = self.run_cells(&mut kernel, &code, &mut progress, obs);
        kernel.kill();
        drop(kernel);

        let statuses: Vec<CellStatus> =
            std::iter::once(ran.boot_status).chain(ran.outcomes.iter().map(|o| o.status)).collect();
        let verdict = verification::verdict(&statuses);
        let provenance = provenance(req, &doc, &code, &ran, verdict, kernel_start);
        cap_outputs(&mut ran.outcomes, NOTEBOOK_OUTPUT_CAP);
        let notebook = verification::build_notebook(
            &doc.parsed.cells,
            &doc.parsed.metadata,
            &ran.outcomes,
            (BOOTSTRAP, &ran.boot.outputs, ran.boot.execution_count),
            &provenance,
        );
        let preserved_edit = self.keep_notebook(&doc, &id, verdict, &notebook, &mut record)?;
        let cell_rows: Vec<CellReport> =
            ran.outcomes.iter().enumerate().map(|(i, o)| CellReport::of(i, o, code.get(i).copied())).collect();
        record.cells = serde_json::to_value(&cell_rows).unwrap_or(Value::Null);
        record.verdict = Some(verdict.as_str().into());
        record.error = ran.failure.clone();
        record.finished_at = Some(self.clock.now_ms());
        self.store.finish_verification(&record)?;
        Ok(VerifyReport {
            record,
            verdict,
            cells: cell_rows,
            timeout: doc.timeout,
            parameters: req.parameters.clone(),
            failure: ran.failure,
            preserved_edit,
            kernel: kernel_start,
        })
    }

    /// The request's document, read and parsed (a bad one is refused before anything starts),
    /// with its per-cell timeout and the request's parameters injected.
    fn verification_document(&self, req: &VerifyRequest) -> Result<VerifiedDocument, EngineError> {
        let (doc_path, title) = self.document_and_title(req)?;
        let unreadable = |e: std::io::Error| EngineError::InvalidDocument {
            path: doc_path.display().to_string(),
            message: format!("cannot read the document: {e}"),
        };
        let doc_path = doc_path.canonicalize().map_err(unreadable)?;
        let bytes = std::fs::read(&doc_path).map_err(|e| EngineError::InvalidDocument {
            path: doc_path.display().to_string(),
            message: format!("cannot read the document: {e}"),
        })?;
        let label = doc_path.display().to_string();
        let invalid = |e: cairn_core::document::DocumentError| EngineError::InvalidDocument {
            path: label.clone(),
            message: e.to_string(),
        };
        let mut parsed = read_document(&bytes, &label).map_err(invalid)?;
        let timeout = cell_timeout(req.cell_timeout, parsed.execution_timeout(&label).map_err(invalid)?, &label)?;
        cairn_core::parameters::inject(&mut parsed.cells, &req.parameters)
            .map_err(|e| EngineError::InvalidField { field: "parameters", message: e.to_string() })?;
        Ok(VerifiedDocument { path: doc_path, title, label, bytes, parsed, timeout })
    }

    /// The kernel the verification runs in: the daemon's spare if it fits and the request
    /// allows it (moved to `workdir`), else a cold one.
    fn verification_kernel(
        &self,
        req: &VerifyRequest,
        python: &Path,
        workdir: &Path,
    ) -> Result<(String, PathBuf, ScratchKernel, KernelStart), EngineError> {
        let env = kernel_env();
        let ask = KernelAsk { python: python.to_path_buf(), env: env.clone(), memory_limit: req.memory_limit };
        let taken = match self.spare.get() {
            Some(keeper) if req.spare => keeper.take(&ask, workdir, spare::BOOTING_WAIT),
            _ => spare::Taken::Cold,
        };
        match taken {
            spare::Taken::Spare(mut s) => {
                let idle_ms = s.idle().as_millis() as u64;
                if s.move_to(workdir) {
                    let s = *s;
                    Ok((s.id, s.runtime_dir, s.kernel, KernelStart::PreStarted { idle_ms }))
                } else {
                    s.discard();
                    self.cold_kernel(python, workdir, env, req.memory_limit)
                }
            }
            spare::Taken::Cold => self.cold_kernel(python, workdir, env, req.memory_limit),
        }
    }

    /// The bootstrap, then each code cell in order until the first failure (the rest skipped),
    /// each one's end listed as it comes.
    fn run_cells(
        &self,
        kernel: &mut ScratchKernel,
        code: &[&DocCell],
        progress: &mut CellProgress<'_>,
        obs: &mut dyn VerifyObserver,
    ) -> RanCells {
        let cancelled = || progress.stop.requested().is_some();
        let asked_to_stop = || progress.watch.stopped.load(std::sync::atomic::Ordering::SeqCst);
        // The bootstrap is the only thing run before the first cell.
        let boot = kernel.execute(BOOTSTRAP, progress.timeout, &mut |_| {});
        let facts = bootstrap_facts(&boot.outputs);
        let boot_status = cell_status(&boot.status);

        let mut outcomes: Vec<CellOutcome> = Vec::with_capacity(code.len());
        let mut failure = None;
        if boot_status != CellStatus::Passed {
            failure =
                Some(format!("the bootstrap cell did not pass ({}): {}", boot_status.as_str(), describe(&boot.status)));
        }
        for (i, cell) in code.iter().enumerate() {
            if failure.is_some() || cell.has_tag(TAG_SKIP_EXECUTION) {
                let reason = if failure.is_some() { SkipReason::AfterFailure } else { SkipReason::Tag };
                outcomes.push(CellOutcome::skipped(reason));
                obs.cell_finished(i, CellStatus::Skipped, 0);
                continue;
            }
            if cancelled() || asked_to_stop() {
                failure = Some(if cancelled() {
                    format!("interrupted before cell {i}; the kernel was killed")
                } else {
                    format!("interrupted before cell {i}: a person asked the kernel to stop (interrupt or restart)")
                });
                let never_sent = CellOutcome::skipped(SkipReason::AfterFailure);
                outcomes.push(CellOutcome { status: CellStatus::Interrupted, skipped: None, ..never_sent });
                obs.cell_finished(i, CellStatus::Interrupted, 0);
                continue;
            }
            obs.cell_started(i, code.len());
            let (outcome, cell_failure) =
                run_cell(kernel, i, cell, progress.timeout, progress.memory_limit, &asked_to_stop);
            progress.watch.ended.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            progress.live.cells_done = i + 1;
            self.write_live(progress.runtime_dir, &progress.live);
            obs.cell_finished(i, outcome.status, outcome.duration_ms);
            failure = cell_failure;
            outcomes.push(outcome);
        }
        RanCells { boot, boot_status, facts, outcomes, failure }
    }

    /// Keeps the notebook: a pass under `workflows/` (its record's `notebook`), a failure as
    /// the title's draft (its record's `draft`). Returns a draft a person had edited, moved
    /// aside.
    fn keep_notebook(
        &self,
        doc: &VerifiedDocument,
        id: &str,
        verdict: Verdict,
        notebook: &Value,
        record: &mut VerificationRecord,
    ) -> Result<Option<PathBuf>, EngineError> {
        let stamp = self.timestamp();
        if verdict == Verdict::Passed {
            let name = format!("{stamp}-{}-{}.ipynb", slug(&doc.title), &id[id.len() - 8..]);
            let path = self.workflows_dir().join(name);
            write_atomic(&path, &pretty(notebook))?;
            self.prune_passes()?;
            self.remove_stale_draft(&doc.title, &doc.path);
            record.notebook = Some(path.display().to_string());
            Ok(None)
        } else {
            let (draft, preserved) =
                self.write_draft(&doc.title, &doc.parsed.cells, notebook, &stamp, is_notebook(&doc.label))?;
            record.draft = Some(draft.display().to_string());
            Ok(preserved)
        }
    }

    /// A kernel started for this verification: its id, directory, the kernel, and how it
    /// started. A start that fails leaves nothing behind.
    fn cold_kernel(
        &self,
        python: &Path,
        workdir: &Path,
        env: Vec<(String, String)>,
        memory_limit: Option<u64>,
    ) -> Result<(String, PathBuf, ScratchKernel, KernelStart), EngineError> {
        let id = format!("ver_{}", self.ids.run_suffix());
        let runtime_dir = self.state.path().join("kernels").join(&id);
        let mut cfg = KernelConfig::new(python, workdir, &runtime_dir);
        cfg.env = env;
        cfg.memory_limit = memory_limit;
        match ScratchKernel::start(&cfg) {
            Ok(k) => Ok((id, runtime_dir, k, KernelStart::Cold)),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&runtime_dir);
                let _ = std::fs::remove_dir(self.state.path().join("kernels"));
                Err(EngineError::KernelUnavailable { message: format!("failed to start the kernel: {e}") })
            }
        }
    }

    fn document_and_title(&self, req: &VerifyRequest) -> Result<(PathBuf, String), EngineError> {
        match (&req.document, &req.title) {
            (Document::File(doc), title) => {
                let title = title.clone().unwrap_or_else(|| {
                    doc.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "untitled".into())
                });
                Ok((doc.clone(), title))
            }
            (Document::Text(text), title) => {
                let sha = sha256_hex(text.as_bytes());
                // A notebook is JSON; anything else is read as markdown.
                let ext = if text.trim_start().starts_with('{') { "ipynb" } else { "md" };
                let dir = self.state.path().join("documents");
                std::fs::create_dir_all(&dir).map_err(|e| EngineError::io(&dir, e))?;
                let path = dir.join(format!("{}.{ext}", &sha[..16]));
                if !path.exists() {
                    write_atomic(&path, text.as_bytes())?;
                }
                Ok((path, title.clone().unwrap_or_else(|| format!("document-{}", &sha[..12]))))
            }
            (Document::Draft, Some(title)) => {
                // A markdown document's draft is markdown, a notebook's a notebook: whichever the
                // title's last failure left.
                let base = slug(title);
                let md = self.drafts_dir().join(format!("{base}.md"));
                let nb = self.drafts_dir().join(format!("{base}.ipynb"));
                match (md.is_file(), nb.is_file()) {
                    (true, _) => Ok((md, title.clone())),
                    (false, true) => Ok((nb, title.clone())),
                    _ => Err(EngineError::DraftNotFound { title: title.clone(), path: md.display().to_string() }),
                }
            }
            (Document::Draft, None) => Err(EngineError::NoDocument),
        }
    }

    fn timestamp(&self) -> String {
        jiff_like_stamp(self.clock.now_ms())
    }

    /// Keeps the newest [`KEEP_PASSES`] passed notebooks (names sort by time).
    fn prune_passes(&self) -> Result<(), EngineError> {
        let dir = self.workflows_dir();
        let mut passes: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(|e| EngineError::io(&dir, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "ipynb") && p.is_file())
            .collect();
        passes.sort();
        let excess = passes.len().saturating_sub(KEEP_PASSES);
        for old in &passes[..excess] {
            let _ = std::fs::remove_file(old);
        }
        Ok(())
    }

    /// After a pass, the title's draft is resolved: remove it if it is what Cairn wrote or what
    /// was just verified; a draft edited since is the person's and stays.
    fn remove_stale_draft(&self, title: &str, verified: &Path) {
        let dir = self.drafts_dir();
        let base = slug(title);
        for ext in ["md", "ipynb"] {
            let draft = dir.join(format!("{base}.{ext}"));
            let mark = dir.join(format!(".{base}.{ext}.sha256"));
            let Ok(current) = std::fs::read(&draft) else { continue };
            let unedited = std::fs::read_to_string(&mark).is_ok_and(|m| m.trim() == sha256_hex(&current));
            let was_verified = draft.canonicalize().is_ok_and(|d| d == verified);
            if unedited || was_verified {
                let _ = std::fs::remove_file(&draft);
                let _ = std::fs::remove_file(&mark);
                if ext == "md" {
                    // The failed notebook written beside a markdown draft goes with it.
                    let _ = std::fs::remove_file(dir.join(format!("{base}.ipynb")));
                }
            }
        }
    }

    /// Writes the single draft of a title in its document's format, and, beside a markdown one,
    /// the failed notebook. A notebook's draft is that notebook: the cells that ran with their
    /// outputs, the failure shown. A draft edited since Cairn wrote it is moved aside first, never
    /// overwritten; a draft of the other format the title had is resolved the same way.
    fn write_draft(
        &self,
        title: &str,
        cells: &[DocCell],
        notebook: &Value,
        stamp: &str,
        as_notebook: bool,
    ) -> Result<(PathBuf, Option<PathBuf>), EngineError> {
        let dir = self.drafts_dir();
        std::fs::create_dir_all(&dir).map_err(|e| EngineError::io(&dir, e))?;
        let base = slug(title);
        let mut preserved = None;
        // Set a person's edit of either format aside, and drop Cairn's own of the other format.
        for ext in ["md", "ipynb"] {
            let draft = dir.join(format!("{base}.{ext}"));
            let mark = dir.join(format!(".{base}.{ext}.sha256"));
            let Ok(current) = std::fs::read(&draft) else { continue };
            let written = std::fs::read_to_string(&mark).unwrap_or_default();
            // The failed notebook beside a markdown draft has no mark of its own: it is Cairn's.
            let cairns = written.trim() == sha256_hex(&current) || (ext == "ipynb" && !mark.exists());
            if !cairns {
                let aside = dir.join(format!("{base}.edited-{stamp}.{ext}"));
                std::fs::rename(&draft, &aside).map_err(|e| EngineError::io(&draft, e))?;
                preserved = Some(aside);
            } else if (ext == "md") == as_notebook {
                let _ = std::fs::remove_file(&draft);
                let _ = std::fs::remove_file(&mark);
            }
        }
        let (draft, bytes) = if as_notebook {
            (dir.join(format!("{base}.ipynb")), pretty(notebook))
        } else {
            write_atomic(&dir.join(format!("{base}.ipynb")), &pretty(notebook))?;
            (dir.join(format!("{base}.md")), as_markdown(cells).into_bytes())
        };
        let ext = if as_notebook { "ipynb" } else { "md" };
        write_atomic(&draft, &bytes)?;
        write_atomic(&dir.join(format!(".{base}.{ext}.sha256")), sha256_hex(&bytes).as_bytes())?;
        Ok((draft, preserved))
    }
}

/// A document read for verification.
struct VerifiedDocument {
    /// Canonical.
    path: PathBuf,
    title: String,
    /// Its path as messages and records name it.
    label: String,
    bytes: Vec<u8>,
    /// Its cells, the parameters injected.
    parsed: ParsedDocument,
    /// The per-cell timeout, and who set it.
    timeout: (Duration, TimeoutSource),
}

/// What the cells of one verification run under, and where their progress is listed.
struct CellProgress<'a> {
    timeout: Duration,
    memory_limit: Option<u64>,
    stop: &'a StopSignal,
    watch: &'a live::Watch,
    runtime_dir: &'a Path,
    live: LiveVerification,
}

/// The bootstrap's run and facts, and every code cell's outcome.
struct RanCells {
    boot: kernel::CellRun,
    boot_status: CellStatus,
    facts: std::collections::HashMap<String, String>,
    outcomes: Vec<CellOutcome>,
    /// The first failure, in words.
    failure: Option<String>,
}

/// The per-cell timeout: the request's, else the document's (at most [`MAX_CELL_TIMEOUT`]),
/// else [`DEFAULT_CELL_TIMEOUT`].
fn cell_timeout(
    requested: Option<Duration>,
    document: Option<u64>,
    label: &str,
) -> Result<(Duration, TimeoutSource), EngineError> {
    match (requested, document) {
        (Some(t), _) => Ok((t, TimeoutSource::Request)),
        (None, Some(secs)) if Duration::from_secs(secs) <= MAX_CELL_TIMEOUT => {
            Ok((Duration::from_secs(secs), TimeoutSource::Document))
        }
        (None, Some(secs)) => Err(EngineError::InvalidDocument {
            path: label.to_string(),
            message: format!(
                "metadata execution.timeout is {secs} s; a cell may run at most {} s: lower it, or give --timeout",
                MAX_CELL_TIMEOUT.as_secs()
            ),
        }),
        (None, None) => Ok((DEFAULT_CELL_TIMEOUT, TimeoutSource::Default)),
    }
}

/// Runs code cell `i` and judges its end: an error its tag expects passes, a MemoryError under
/// `--memory-limit` died, anything a person stopped is interrupted. Returns its outcome and,
/// unless it passed, the failure in words.
fn run_cell(
    kernel: &mut ScratchKernel,
    i: usize,
    cell: &DocCell,
    timeout: Duration,
    memory_limit: Option<u64>,
    asked_to_stop: &dyn Fn() -> bool,
) -> (CellOutcome, Option<String>) {
    let mut failure = None;
    let run = kernel.execute(&cell.source, timeout, &mut |_| {});
    let mut status = cell_status(&run.status);
    let error = match &run.status {
        kernel::CellStatus::Error { ename, evalue, traceback } => Some(CellError::new(ename, evalue, traceback)),
        _ => None,
    };
    let at = cell.line.map(|l| format!(" (line {l})")).unwrap_or_default();
    // An error its tag expects is what the author meant: recorded, and the run goes on.
    let error_expected = error.is_some() && status == CellStatus::Failed && cell.has_tag(TAG_RAISES_EXCEPTION);
    if error_expected {
        status = CellStatus::Passed;
    }
    // Under --memory-limit, running out of it is "does not fit in memory": the verdict is
    // `died` whether Python raised MemoryError or the kernel was killed.
    if let (Some(limit), kernel::CellStatus::Error { ename, .. }) = (memory_limit, &run.status)
        && ename == "MemoryError"
    {
        status = CellStatus::Died;
        failure = Some(format!(
            "cell {i}{at}: MemoryError under --memory-limit {limit}: the document does not fit in {limit} bytes"
        ));
    }
    // A person stopped it while this cell ran: whatever ended it, the verdict is theirs.
    if status != CellStatus::Passed && asked_to_stop() {
        status = CellStatus::Interrupted;
        failure = Some(format!("cell {i}{at}: interrupted: a person asked the kernel to stop (interrupt or restart)"));
    }
    if status != CellStatus::Passed && failure.is_none() {
        failure = Some(format!("cell {i}{at}: {}", describe(&run.status)));
    }
    let outcome = CellOutcome {
        status,
        duration_ms: run.duration.as_millis() as u64,
        execution_count: run.execution_count,
        outputs: run.outputs,
        error,
        error_expected,
        skipped: None,
    };
    (outcome, failure)
}

/// The notebook's provenance cell: the document, the verdict, the kernel's facts, what was not
/// run and which errors were expected.
fn provenance(
    req: &VerifyRequest,
    doc: &VerifiedDocument,
    code: &[&DocCell],
    ran: &RanCells,
    verdict: Verdict,
    kernel_start: KernelStart,
) -> Provenance {
    let (facts, outcomes) = (&ran.facts, &ran.outcomes);
    Provenance {
        title: doc.title.clone(),
        document: doc.path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_else(|| doc.label.clone()),
        document_sha256: sha256_hex(&doc.bytes),
        verdict,
        python: facts.get("python").cloned().unwrap_or_else(|| "unknown".into()),
        ipykernel: facts.get("ipykernel").cloned().unwrap_or_else(|| "unknown".into()),
        environment_sha256: facts.get("env").cloned().unwrap_or_else(|| "unknown".into()),
        plugins_loaded: list(facts.get("plugins")),
        plugins_failed: list(facts.get("failed")),
        cairn_version: env!("CARGO_PKG_VERSION").into(),
        code_cells: code.len(),
        not_run: (0..outcomes.len()).filter(|i| outcomes[*i].skipped == Some(SkipReason::Tag)).collect(),
        expected_errors: outcomes
            .iter()
            .enumerate()
            .filter(|(_, o)| o.error_expected)
            .filter_map(|(i, o)| o.error.as_ref().map(|e| (i, e.ename.clone())))
            .collect(),
        timeout: Some((doc.timeout.0.as_secs(), doc.timeout.1)),
        parameters: req.parameters.clone(),
        kernel: kernel_start,
    }
}

/// `YYYYMMDDTHHMMSSmmmZ` from Unix milliseconds (sortable, file-name safe).
fn jiff_like_stamp(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%Y%m%dT%H%M%S%3fZ").to_string())
        .unwrap_or_else(|_| format!("{ms:020}"))
}

fn pretty(v: &Value) -> Vec<u8> {
    let mut out = serde_json::to_vec_pretty(v).unwrap_or_default();
    out.push(b'\n');
    out
}

/// Writes through a temporary file, fsync and rename: a crash leaves the old file or the new one.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), EngineError> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| EngineError::io(dir, e))?;
    let tmp = dir.join(format!(
        ".tmp-{}-{}",
        std::process::id(),
        path.file_name().map(|f| f.to_string_lossy()).unwrap_or_default()
    ));
    let mut f = File::create(&tmp).map_err(|e| EngineError::io(&tmp, e))?;
    f.write_all(bytes).and_then(|_| f.sync_all()).map_err(|e| EngineError::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| EngineError::io(path, e))
}

/// A document as markdown with python fences (the draft a person can edit and re-verify). Prose
/// is kept byte for byte, so a markdown document reads back as the same cells.
fn as_markdown(cells: &[DocCell]) -> String {
    let mut out = String::new();
    for c in cells {
        match c.kind {
            CellKind::Markdown | CellKind::Raw => out.push_str(&c.source),
            CellKind::Code => {
                if !out.is_empty() && !out.ends_with('\n') {
                    out.push('\n');
                }
                // Two fences in a row: keep them apart, as the author most likely had them.
                if out.ends_with("```\n") || out.ends_with("~~~~\n") {
                    out.push('\n');
                }
                let fence = if c.source.contains("```") { "~~~~" } else { "```" };
                out.push_str(&format!("{fence}python\n{}\n{fence}", c.source.trim_end_matches('\n')));
            }
        }
    }
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// Keeps the notebook's outputs under `cap` bytes: once reached, each later cell's outputs are
/// replaced by one stream output that says how much was omitted.
fn cap_outputs(outcomes: &mut [CellOutcome], cap: usize) {
    let mut total = 0usize;
    for o in outcomes.iter_mut() {
        let size: usize = o.outputs.iter().map(|v| serde_json::to_string(v).map(|s| s.len()).unwrap_or(0)).sum();
        if total + size > cap {
            o.outputs = vec![json!({
                "output_type": "stream",
                "name": "stderr",
                "text": format!("[... {size} bytes of outputs omitted by cairn: the notebook's output cap of {} MiB was reached ...]\n", cap >> 20),
            })];
        } else {
            total += size;
        }
    }
}

fn cell_status(s: &kernel::CellStatus) -> CellStatus {
    match s {
        kernel::CellStatus::Ok => CellStatus::Passed,
        kernel::CellStatus::Error { .. } => CellStatus::Failed,
        kernel::CellStatus::Died { .. } | kernel::CellStatus::Lost { .. } => CellStatus::Died,
        kernel::CellStatus::TimedOut => CellStatus::TimedOut,
        kernel::CellStatus::Cancelled => CellStatus::Interrupted,
    }
}

fn describe(s: &kernel::CellStatus) -> String {
    match s {
        kernel::CellStatus::Ok => "passed".into(),
        kernel::CellStatus::Error { ename, evalue, .. } => format!("{ename}: {evalue}"),
        kernel::CellStatus::Died { exit_code, signal } => match (exit_code, signal) {
            (_, Some(sig)) => format!("the kernel died (signal {sig})"),
            (Some(code), None) => format!("the kernel died (exit code {code})"),
            _ => "the kernel died".into(),
        },
        kernel::CellStatus::TimedOut => "the cell exceeded its timeout; the kernel was interrupted, then killed".into(),
        kernel::CellStatus::Lost { reason } => format!("the connection to the kernel failed: {reason}"),
        kernel::CellStatus::Cancelled => "interrupted; the kernel was killed".into(),
    }
}

/// The `[cairn] key=value …` line the bootstrap prints.
fn bootstrap_facts(outputs: &[Value]) -> std::collections::HashMap<String, String> {
    let text: String = outputs
        .iter()
        .filter(|o| o["output_type"] == "stream")
        .filter_map(|o| match &o["text"] {
            Value::String(s) => Some(s.clone()),
            Value::Array(a) => Some(a.iter().filter_map(Value::as_str).collect()),
            _ => None,
        })
        .collect();
    text.lines()
        .find_map(|l| l.strip_prefix("[cairn] "))
        .map(|rest| {
            rest.split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .unwrap_or_default()
}

fn list(v: Option<&String>) -> Vec<String> {
    match v.map(String::as_str) {
        None | Some("-") | Some("") => vec![],
        Some(s) => s.split(',').map(str::to_string).collect(),
    }
}

/// The digest of the environment this process gives a kernel ([`env_sha256`] of it): what
/// `cairn verify` compares with the daemon's spare before running on it.
pub fn kernel_env_sha256() -> String {
    env_sha256(&kernel_env())
}

/// The kernel's environment: the sandbox's base variables and the ones that locate the user's
/// configuration; nothing else of Cairn's own environment.
pub(crate) fn kernel_env() -> Vec<(String, String)> {
    let keep = ["PATH", "HOME", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR", "CAIRN_CONFIG", "XDG_CONFIG_HOME"];
    keep.iter().filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_sort_by_time() {
        assert_eq!(jiff_like_stamp(0), "19700101T000000000Z");
        assert_eq!(jiff_like_stamp(1_795_950_000_123), "20261129T110000123Z");
    }

    #[test]
    fn drafts_round_trip_through_the_markdown_parser() {
        let cells = cairn_core::document::parse_markdown("# T\n\n```python\nx = 1\n```\n\nmore\n", "d.md").unwrap();
        let md = as_markdown(&cells);
        let again = cairn_core::document::parse_markdown(&md, "d.md").unwrap();
        assert_eq!(
            cells.iter().map(|c| (&c.kind, &c.source)).collect::<Vec<_>>(),
            again.iter().map(|c| (&c.kind, &c.source)).collect::<Vec<_>>()
        );
    }

    #[test]
    fn bootstrap_facts_are_read_from_its_line() {
        let out = vec![
            json!({"output_type": "stream", "name": "stdout", "text": "[cairn] python=3.11.7 ipykernel=7.4.0 env=ab plugins=a.py,b.py failed=-\n"}),
        ];
        let f = bootstrap_facts(&out);
        assert_eq!(f["python"], "3.11.7");
        assert_eq!(list(f.get("plugins")), ["a.py", "b.py"]);
        assert!(list(f.get("failed")).is_empty());
    }
}
