//! Reading an artifact where it lies: a bounded slice of its bytes, from this machine or from
//! the run's target over SSH through the step agent (nothing copied back), with its recorded size
//! and SHA-256, so an agent can read a result in the conversation.

use std::path::Path;

use cairn_core::artifact::ArtifactRecord;

use crate::placement::Placement;
use crate::{Engine, EngineError};

/// The most bytes one read answers.
pub const ARTIFACT_SLICE_MAX: u64 = 256 << 10;

#[derive(Debug, Clone)]
pub struct ReadArtifact {
    /// The run to read from (looked up: an id no run has is a run not found).
    pub run_id: cairn_core::ids::RunId,
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
            run_id: req.run_id.to_string(),
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
        if let Some(target) = &record.artifact.link {
            return Err(EngineError::ArtifactUnreadable {
                path: record.artifact.path.clone(),
                message: format!(
                    "it is a symlink to {target}, recorded as a link and never followed: it holds no bytes"
                ),
            });
        }
        let length = req.length.unwrap_or(ARTIFACT_SLICE_MAX).min(ARTIFACT_SLICE_MAX);
        let at = Path::new(&view.run.run_dir).join(&record.artifact.path);
        let placement = self.placement(&req.run_id)?;
        // Here, no folder on the way may be a link out of the run directory (on a target, the
        // step agent reads the path as recorded).
        let link = match placement {
            Placement::Local => {
                cairn_exec::artifacts::symlinked_component(Path::new(&view.run.run_dir), &record.artifact.path)
            }
            Placement::Target(..) => None,
        };
        if let Some(link) = link {
            return Err(EngineError::ArtifactUnreadable {
                path: link.display().to_string(),
                message: format!(
                    "artifact {} is reached through a symlink, which is not followed",
                    record.artifact.path
                ),
            });
        }
        if let Placement::Local = placement {
            match std::fs::symlink_metadata(&at) {
                Ok(m) if m.is_file() => {}
                Ok(_) => {
                    return Err(EngineError::ArtifactUnreadable {
                        path: at.display().to_string(),
                        message: "it is not a regular file (symlinks are not followed)".into(),
                    });
                }
                Err(e) => {
                    return Err(EngineError::ArtifactUnreadable {
                        path: at.display().to_string(),
                        message: e.to_string(),
                    });
                }
            }
        }
        let (bytes, size_now) =
            self.read_slice(&placement, &at.display().to_string(), req.offset, length).map_err(|message| {
                match &placement {
                    Placement::Target(spec, _) => EngineError::TargetUnreachable { target: spec.name.clone(), message },
                    Placement::Local => EngineError::ArtifactUnreadable { path: at.display().to_string(), message },
                }
            })?;
        Ok(ArtifactSlice { record: record.clone(), target: view.target.clone(), offset: req.offset, bytes, size_now })
    }
}
