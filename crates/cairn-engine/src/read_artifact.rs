//! Reading an artifact where it lies: a bounded slice of its bytes, from this machine or from
//! the run's target over SSH through the step agent (nothing copied back), with its recorded size
//! and SHA-256, so an agent can read a result in the conversation.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::time::Duration;

use cairn_core::artifact::ArtifactRecord;
use cairn_exec::agent::protocol::ReadRequest;

use crate::placement::Placement;
use crate::{Engine, EngineError};

/// The most bytes one read answers.
pub const ARTIFACT_SLICE_MAX: u64 = 256 << 10;

/// How long a target may take to answer one read.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
pub struct ReadArtifact {
    pub run_id: String,
    pub step_id: String,
    /// The declared output's name.
    pub name: String,
    /// For a folder output: which of its files (its path relative to the run directory, or to
    /// the folder).
    pub path: Option<String>,
    pub offset: u64,
    /// At most [`ARTIFACT_SLICE_MAX`] (the default).
    pub length: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct ArtifactSlice {
    pub record: ArtifactRecord,
    /// Where it was read: `local` or the run's target.
    pub target: String,
    pub offset: u64,
    pub bytes: Vec<u8>,
    /// Its size where it lies now (the recorded size is in `record`).
    pub size_now: u64,
}

impl ArtifactSlice {
    /// Whether the slice reaches the end of the file.
    pub fn eof(&self) -> bool {
        self.offset + self.bytes.len() as u64 >= self.size_now
    }
}

impl Engine {
    /// A slice of one artifact's bytes, read where the run executed.
    pub fn read_artifact(&self, req: &ReadArtifact) -> Result<ArtifactSlice, EngineError> {
        let view = self.show_run(&req.run_id)?;
        let step = view.step(&req.step_id)?;
        let named: Vec<&ArtifactRecord> = step.artifacts.iter().filter(|a| a.artifact.name == req.name).collect();
        let not_found = |message: String| EngineError::ArtifactNotFound {
            run_id: req.run_id.clone(),
            step_id: req.step_id.clone(),
            name: req.name.clone(),
            message,
        };
        if named.is_empty() {
            let names: std::collections::BTreeSet<&str> =
                step.artifacts.iter().map(|a| a.artifact.name.as_str()).collect();
            return Err(not_found(match names.is_empty() {
                true => "the step recorded no artifacts".into(),
                false => format!("its artifacts are named {}", names.into_iter().collect::<Vec<_>>().join(", ")),
            }));
        }
        let record = match (&req.path, named.as_slice()) {
            (None, [one]) => *one,
            (None, many) => {
                return Err(not_found(format!(
                    "it is a folder of {} files: name one with path ({})",
                    many.len(),
                    many.iter().take(5).map(|a| a.artifact.path.as_str()).collect::<Vec<_>>().join(", ")
                )));
            }
            (Some(p), many) => {
                let p = p.trim_start_matches("./");
                many.iter()
                    .copied()
                    .find(|a| a.artifact.path == p || a.artifact.path.ends_with(&format!("/{p}")))
                    .ok_or_else(|| not_found(format!("it holds no file {p}")))?
            }
        };
        let length = req.length.unwrap_or(ARTIFACT_SLICE_MAX).min(ARTIFACT_SLICE_MAX);
        let at = Path::new(&view.run.run_dir).join(&record.artifact.path);
        let (bytes, size_now) = match self.placement(&req.run_id)? {
            Placement::Local => {
                if let Some(link) =
                    cairn_exec::artifacts::symlinked_component(Path::new(&view.run.run_dir), &record.artifact.path)
                {
                    return Err(EngineError::ArtifactUnreadable {
                        path: link.display().to_string(),
                        message: format!(
                            "artifact {} is reached through a symlink, which is not followed",
                            record.artifact.path
                        ),
                    });
                }
                read_local(&at, req.offset, length).map_err(|e| EngineError::ArtifactUnreadable {
                    path: at.display().to_string(),
                    message: e.to_string(),
                })?
            }
            Placement::Target(spec, agent) => {
                let chunk = agent
                    .read(
                        ReadRequest { path: at.display().to_string(), offset: req.offset, max_bytes: length as usize },
                        READ_TIMEOUT,
                    )
                    .map_err(|e| EngineError::TargetUnreachable {
                        target: spec.name.clone(),
                        message: e.to_string(),
                    })?;
                (chunk.bytes(), chunk.size)
            }
        };
        Ok(ArtifactSlice { record: record.clone(), target: view.target.clone(), offset: req.offset, bytes, size_now })
    }
}

/// At most `length` bytes of a regular file from `offset`, and its size.
fn read_local(path: &Path, offset: u64, length: u64) -> std::io::Result<(Vec<u8>, u64)> {
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.is_file() {
        return Err(std::io::Error::other("it is not a regular file (symlinks are not followed)"));
    }
    let mut f = std::fs::File::open(path)?;
    let size = f.metadata()?.len();
    f.seek(SeekFrom::Start(offset.min(size)))?;
    let mut buf = Vec::new();
    f.take(length).read_to_end(&mut buf)?;
    Ok((buf, size))
}
