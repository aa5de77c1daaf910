//! Exporting a run as a Provenance Run Crate: the run's records gathered through the store, the
//! crate's metadata built by the pure `cairn_core::rocrate`, and its files written here: the
//! workflow folder, the input, the validator's verdict and (unless `data` is off) the artifacts,
//! each copied and checked against its recorded SHA-256.
//!
//! **Invariant:** every path written lies under the crate's root, and every path read lies under
//! the run directory or the workflow snapshot (no `..`, no absolute path, no symlink followed).

use std::fs;
use std::path::{Component, Path, PathBuf};

use cairn_core::rocrate::{self, CrateFile, CrateRun, CrateStep};
use serde_json::json;

use crate::{Engine, EngineError};

/// Where an export goes.
#[derive(Debug, Clone)]
pub enum ExportOut {
    /// A crate directory (created; it must not exist yet).
    Dir(PathBuf),
    /// A zipped crate (`ro-crate-metadata.json` at its root; the file must not exist yet).
    Zip(PathBuf),
}

#[derive(Debug, Clone)]
pub struct ExportRequest {
    pub run_id: String,
    pub out: ExportOut,
    /// Copy the artifacts into the crate; without, they are referenced by path and hash only.
    pub data: bool,
}

#[derive(Debug, Clone)]
pub struct ExportResult {
    pub run_id: String,
    pub path: PathBuf,
    /// Files written, `ro-crate-metadata.json` included.
    pub files: usize,
    /// Bytes written.
    pub bytes: u64,
    /// Artifacts copied into the crate (0 without data).
    pub artifacts: usize,
}

/// A relative path that stays under its root: no `..`, no root, no prefix.
fn contained(rel: &str) -> Result<&Path, EngineError> {
    let p = Path::new(rel);
    if rel.is_empty() || !p.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(EngineError::InvalidExportPath {
            path: rel.to_string(),
            message: "it leaves its root; only plain relative paths are exported".into(),
        });
    }
    Ok(p)
}

struct Writer {
    root: PathBuf,
    files: usize,
    bytes: u64,
}

impl Writer {
    fn write(&mut self, rel: &str, data: &[u8]) -> Result<(), EngineError> {
        let path = self.root.join(contained(rel)?);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(|e| EngineError::io(parent, e))?;
        }
        fs::write(&path, data).map_err(|e| EngineError::io(&path, e))?;
        self.files += 1;
        self.bytes += data.len() as u64;
        Ok(())
    }

    /// Copies `from` to `rel` and returns its size and SHA-256 as copied.
    fn copy(&mut self, from: &Path, rel: &str) -> Result<(u64, String), EngineError> {
        let meta = fs::symlink_metadata(from).map_err(|e| EngineError::io(from, e))?;
        if !meta.is_file() {
            return Err(EngineError::InvalidExportPath {
                path: from.display().to_string(),
                message: "it is not a regular file (symlinks are not followed)".into(),
            });
        }
        let to = self.root.join(contained(rel)?);
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent).map_err(|e| EngineError::io(parent, e))?;
        }
        fs::copy(from, &to).map_err(|e| EngineError::io(&to, e))?;
        let (bytes, sha) = cairn_exec::artifacts::hash_file(&to).map_err(|e| EngineError::io(&to, e))?;
        self.files += 1;
        self.bytes += bytes;
        Ok((bytes, sha))
    }
}

/// The regular files under `dir`, relative, sorted (symlinks skipped).
fn folder_files(dir: &Path) -> Result<Vec<String>, EngineError> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let here = dir.join(&rel);
        for entry in fs::read_dir(&here).map_err(|e| EngineError::io(&here, e))? {
            let entry = entry.map_err(|e| EngineError::io(&here, e))?;
            let kind = entry.file_type().map_err(|e| EngineError::io(entry.path(), e))?;
            let name = rel.join(entry.file_name());
            if kind.is_dir() {
                stack.push(name);
            } else if kind.is_file() {
                out.push(name.to_string_lossy().into_owned());
            }
        }
    }
    out.sort();
    Ok(out)
}

impl Engine {
    /// The run and attempt that really executed a step reused from `from`: the first run up the
    /// lineage whose record of the step was not itself reused.
    fn producer_of(&self, from: &str, step_id: &str) -> Result<Option<(String, u32)>, EngineError> {
        let mut next = Some(from.to_string());
        // Sources are older and never form a cycle; the bound only guards a corrupt registry.
        for _ in 0..10_000 {
            let Some(run_id) = next else { break };
            let Some(record) = self.store.steps(&run_id)?.into_iter().find(|r| r.step_id == step_id) else {
                return Ok(None);
            };
            match record.reused_from {
                None => return Ok(Some((run_id, record.attempt_count.max(1)))),
                Some(up) => next = Some(up),
            }
        }
        Ok(None)
    }

    /// Writes a run as a Provenance Run Crate 0.5.
    pub fn export_run(&self, request: &ExportRequest) -> Result<ExportResult, EngineError> {
        let view = self.show_run(&request.run_id)?;
        let record = self.store.workflow(&view.run.workflow, Some(&view.run.version))?.ok_or_else(|| {
            EngineError::WorkflowNotFound { name: view.run.workflow.clone(), version: Some(view.run.version.clone()) }
        })?;
        let (dest, zip) = match &request.out {
            ExportOut::Dir(p) => (p, false),
            ExportOut::Zip(p) => (p, true),
        };
        if fs::symlink_metadata(dest).is_ok() {
            return Err(EngineError::ExportExists { path: dest.display().to_string() });
        }
        // The crate is written into a hidden directory beside the destination and takes its place
        // only once whole (a rename, or the zip made from it): an export killed or failed midway
        // leaves no crate, and the next export of that destination starts afresh.
        let name = dest.file_name().ok_or_else(|| EngineError::InvalidExportPath {
            path: dest.display().to_string(),
            message: if zip { "name a zip file".into() } else { "name the crate's directory".into() },
        })?;
        let staging = dest.with_file_name(format!(".{}.partial", name.to_string_lossy()));
        let _ = fs::remove_dir_all(&staging);
        fs::create_dir_all(&staging).map_err(|e| EngineError::io(&staging, e))?;
        let written = self.write_crate(request, &view, &record, &staging).and_then(|r| {
            if zip {
                let bytes = zip_dir(&staging, dest)?;
                Ok(ExportResult { path: dest.clone(), bytes, ..r })
            } else {
                fs::rename(&staging, dest).map_err(|e| EngineError::io(dest, e))?;
                Ok(ExportResult { path: dest.clone(), ..r })
            }
        });
        let _ = fs::remove_dir_all(&staging);
        if written.is_err() && zip {
            let _ = fs::remove_file(dest);
        }
        written
    }

    fn write_crate(
        &self,
        request: &ExportRequest,
        view: &crate::RunView,
        record: &cairn_core::store::WorkflowRecord,
        root: &Path,
    ) -> Result<ExportResult, EngineError> {
        let root = &root.to_path_buf();
        let mut w = Writer { root: root.clone(), files: 0, bytes: 0 };

        // The workflow folder, as registered.
        let snapshot = Path::new(&record.path);
        let mut workflow_files = Vec::new();
        for rel in folder_files(snapshot)? {
            let path = format!("{}/{rel}", rocrate::WORKFLOW_DIR);
            let (bytes, sha256) = w.copy(&snapshot.join(contained(&rel)?), &path)?;
            workflow_files.push(CrateFile { id: rocrate::path_id(&path), bytes, sha256 });
        }

        // The input and the verdict.
        let input = serde_json::to_vec_pretty(&view.run.input).map_err(|e| EngineError::internal(e.to_string()))?;
        w.write(rocrate::INPUT_FILE, &input)?;
        let validation = serde_json::to_vec_pretty(&json!({
            "run_id": view.run.run_id,
            "status": view.run.status.as_str(),
            "findings": view.run.findings,
            "error": view.run.error,
        }))
        .map_err(|e| EngineError::internal(e.to_string()))?;
        w.write(rocrate::VALIDATION_FILE, &validation)?;
        let file = |id: &str, data: &[u8]| CrateFile {
            id: id.to_string(),
            bytes: data.len() as u64,
            sha256: cairn_core::canonical::sha256_hex(data),
        };

        // The artifacts, copied and checked, or referenced where they lie.
        let run_dir = Path::new(&view.run.run_dir);
        let mut copied = 0;
        let mut steps = Vec::new();
        let mut attempts = rocrate::attempts_from_events(&self.store.events(&view.run.run_id, 0)?);
        for s in &view.steps {
            let mut artifacts = Vec::new();
            for a in &s.artifacts {
                let rel = contained(&a.artifact.path)?;
                let id = if request.data {
                    // Recorded under the run directory: no folder on the way may be a link out of it.
                    if let Some(link) = cairn_exec::artifacts::symlinked_component(run_dir, &a.artifact.path) {
                        return Err(EngineError::InvalidExportPath {
                            path: link.display().to_string(),
                            message: format!(
                                "artifact {} is reached through a symlink, which is not followed",
                                a.artifact.path
                            ),
                        });
                    }
                    let (bytes, sha) = w.copy(&run_dir.join(rel), &a.artifact.path)?;
                    if sha != a.artifact.sha256 || bytes != a.artifact.bytes {
                        return Err(EngineError::ExportArtifactMismatch {
                            run_id: view.run.run_id.clone(),
                            path: a.artifact.path.clone(),
                            message: format!("sha256 {sha}, {bytes} bytes; recorded {}", a.artifact.sha256),
                        });
                    }
                    copied += 1;
                    rocrate::path_id(&a.artifact.path)
                } else {
                    format!("file://{}", rocrate::path_id(&run_dir.join(rel).display().to_string()))
                };
                artifacts.push((a.clone(), id));
            }
            let tool = record.spec.step(&s.step_id).map(|d| d.tool.clone()).unwrap_or_default();
            let producer = match s.record.as_ref().and_then(|r| r.reused_from.clone()) {
                Some(from) => self.producer_of(&from, &s.step_id)?,
                None => None,
            };
            let attempts = attempts.remove(&s.step_id).unwrap_or_default();
            steps.push(CrateStep {
                step_id: s.step_id.clone(),
                tool,
                record: s.record.clone(),
                artifacts,
                producer,
                attempts,
            });
        }

        let crate_run = CrateRun {
            input: file(rocrate::INPUT_FILE, &input),
            validation: file(rocrate::VALIDATION_FILE, &validation),
            run: view.run.clone(),
            spec: record.spec.clone(),
            workflow_files,
            steps,
            lineage: view.lineage.clone(),
            target: view.target.clone(),
            cairn_version: env!("CARGO_PKG_VERSION").to_string(),
            published_ms: self.clock.now_ms(),
        };
        let metadata = rocrate::crate_metadata(&crate_run);
        let text = serde_json::to_vec_pretty(&metadata).map_err(|e| EngineError::internal(e.to_string()))?;
        w.write("ro-crate-metadata.json", &text)?;
        Ok(ExportResult {
            run_id: view.run.run_id.clone(),
            path: root.clone(),
            files: w.files,
            bytes: w.bytes,
            artifacts: copied,
        })
    }
}

/// Zips the crate directory `dir` into `to` (deflated, paths relative to the crate root) and
/// returns the zip's size.
fn zip_dir(dir: &Path, to: &Path) -> Result<u64, EngineError> {
    // Into a hidden file beside `to`, renamed once whole: a kill midway leaves no zip at `to`.
    let name = to.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let partial = to.with_file_name(format!(".{name}.partial-zip"));
    let _ = fs::remove_file(&partial);
    let bytes = write_zip(dir, &partial);
    match bytes {
        Ok(bytes) => {
            fs::rename(&partial, to).map_err(|e| EngineError::io(to, e))?;
            Ok(bytes)
        }
        Err(e) => {
            let _ = fs::remove_file(&partial);
            Err(e)
        }
    }
}

fn write_zip(dir: &Path, to: &Path) -> Result<u64, EngineError> {
    let file = fs::File::create_new(to).map_err(|e| EngineError::io(to, e))?;
    let mut zip = zip::ZipWriter::new(file);
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    for rel in folder_files(dir)? {
        zip.start_file(rel.as_str(), options).map_err(|e| EngineError::io(to, e))?;
        let from = dir.join(contained(&rel)?);
        let mut input = fs::File::open(&from).map_err(|e| EngineError::io(&from, e))?;
        std::io::copy(&mut input, &mut zip).map_err(|e| EngineError::io(to, e))?;
    }
    let file = zip.finish().map_err(|e| EngineError::io(to, e))?;
    file.sync_all().map_err(|e| EngineError::io(to, e))?;
    Ok(file.metadata().map_err(|e| EngineError::io(to, e))?.len())
}
