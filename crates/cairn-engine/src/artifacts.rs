//! Artifacts: the files a step declares as its outputs, hashed where the step ran once its
//! attempt completed (here, or by the step agent on the target), checked again before a replay
//! reuses them, materialised into the replay child's own directory, and found again by their
//! bytes (`trace`).
//!
//! **Invariant:** hashing reads files outside any store transaction (the registry's write lock is
//! never held while a file is read); the artifacts are then written with the completion, in its
//! transaction, so a crash between the two leaves the attempt RUNNING with no artifact recorded.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cairn_core::artifact::{Artifact, ArtifactRecord, OutputDecl};
use cairn_core::ids::RunId;
use cairn_core::replay::Found;
use cairn_core::signature::StepSignature;
use cairn_exec::agent::protocol::{CheckFile, CheckRequest, DeployFile, MaterializeRequest, OutputsRequest};
use cairn_exec::artifacts::{Carried, Carry, Materialized};

use crate::placement::Placement;
use crate::{Engine, EngineError};

/// How long the agent may take to hash, check or copy a step's files on a target.
const AGENT_FILE_TIMEOUT: Duration = Duration::from_secs(3600);

/// A run's artifacts, by step then path.
#[derive(Debug, Clone)]
pub struct RunArtifacts {
    pub run_id: RunId,
    pub artifacts: Vec<ArtifactRecord>,
    /// For each artifact, the pipeline job that wrote it (a pipeline step's artifacts only).
    pub writers: Vec<Option<cairn_core::job::JobOrigin>>,
}

/// What to trace: a file (hashed here) or the SHA-256 of its bytes.
#[derive(Debug, Clone)]
pub enum TraceQuery {
    File(PathBuf),
    Sha256(String),
}

/// Every recorded artifact of one content.
#[derive(Debug, Clone)]
pub struct Trace {
    pub sha256: String,
    /// Oldest first: the producing runs before the replays that carried the bytes.
    pub matches: Vec<TraceMatch>,
}

#[derive(Debug, Clone)]
pub struct TraceMatch {
    pub record: ArtifactRecord,
    pub workflow: String,
    pub version: String,
    /// The signature of the step that recorded it (in a replay child, the reused one's).
    pub signature: Option<StepSignature>,
    /// For a reused artifact, the runs it came through: this run's source first, the producer
    /// (`reused_from`) last. Empty for an artifact its own run produced.
    pub lineage: Vec<RunId>,
    /// For a pipeline step's artifact: the job that wrote it, then the jobs behind its inputs,
    /// back to the pipeline's own files, each input with its SHA-256.
    pub jobs: Vec<cairn_core::job::LineageJob>,
}

impl Engine {
    /// A run's artifacts.
    pub fn run_artifacts(&self, run_id: &RunId) -> Result<RunArtifacts, EngineError> {
        // The view holds every step's artifacts and jobs: one read of each, in the store's order
        // (by step, then path).
        let view = self.show_run(run_id)?;
        let mut listed: Vec<(ArtifactRecord, Option<cairn_core::job::JobOrigin>)> = view
            .steps
            .iter()
            .flat_map(|s| {
                s.artifacts
                    .iter()
                    .map(|a| (a.clone(), s.writer_of(&a.artifact.name).map(cairn_core::job::JobOrigin::of)))
            })
            .collect();
        listed.sort_by(|(a, _), (b, _)| (&a.step_id, &a.artifact.path).cmp(&(&b.step_id, &b.artifact.path)));
        let (artifacts, writers) = listed.into_iter().unzip();
        Ok(RunArtifacts { run_id: run_id.clone(), artifacts, writers })
    }

    /// Which runs recorded these bytes: every artifact with the file's (or the given) SHA-256,
    /// with its run's workflow, the step's signature and the replays that carried it.
    pub fn trace(&self, query: &TraceQuery) -> Result<Trace, EngineError> {
        let sha256 = match query {
            TraceQuery::File(path) => {
                let meta = std::fs::metadata(path).map_err(|e| EngineError::TraceFileUnreadable {
                    path: path.display().to_string(),
                    message: e.to_string(),
                })?;
                if !meta.is_file() {
                    return Err(EngineError::TraceFileUnreadable {
                        path: path.display().to_string(),
                        message: "it is not a regular file; trace one file at a time".into(),
                    });
                }
                cairn_exec::artifacts::hash_file(path)
                    .map_err(|e| EngineError::TraceFileUnreadable {
                        path: path.display().to_string(),
                        message: e.to_string(),
                    })?
                    .1
            }
            TraceQuery::Sha256(given) => {
                let sha = given.trim().to_ascii_lowercase();
                if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(EngineError::InvalidField {
                        field: "sha256",
                        message: format!("`{given}` is not a SHA-256: give 64 hexadecimal digits"),
                    });
                }
                sha
            }
        };
        let mut matches = Vec::new();
        let mut runs = HashMap::new();
        let mut views: HashMap<RunId, crate::RunView> = HashMap::new();
        for record in self.store.artifacts_with_sha256(&sha256)? {
            if !runs.contains_key(&record.run_id) {
                let run = self.run_record(&record.run_id)?;
                let steps = self.store.steps(&record.run_id)?;
                runs.insert(record.run_id.clone(), (run, steps));
            }
            let (run, steps) = &runs[&record.run_id];
            let signature = steps.iter().find(|s| s.step_id == record.step_id).map(|s| s.signature.clone());
            let lineage = match &record.reused_from {
                None => Vec::new(),
                Some(producer) => {
                    let mut chain = Vec::new();
                    for source in self.lineage_of(run)? {
                        let done = &source.run_id == producer;
                        chain.push(source.run_id);
                        if done {
                            break;
                        }
                    }
                    chain
                }
            };
            let jobs = self.job_lineage(&mut views, &record)?;
            matches.push(TraceMatch {
                workflow: run.workflow.clone(),
                version: run.version.clone(),
                signature,
                lineage,
                jobs,
                record,
            });
        }
        Ok(Trace { sha256, matches })
    }

    /// The jobs behind a pipeline step's artifact (empty for another step's): the job that wrote
    /// it, then those behind its inputs, each input with the SHA-256 its writer recorded, or a
    /// file of the pipeline's folder with the one it was registered with.
    fn job_lineage(
        &self,
        views: &mut HashMap<RunId, crate::RunView>,
        record: &ArtifactRecord,
    ) -> Result<Vec<cairn_core::job::LineageJob>, EngineError> {
        if !views.contains_key(&record.run_id) {
            views.insert(record.run_id.clone(), self.show_run(&record.run_id)?);
        }
        let view = &views[&record.run_id];
        let Some(step) = view.steps.iter().find(|s| s.step_id == record.step_id) else { return Ok(Vec::new()) };
        if step.jobs.is_empty() {
            return Ok(Vec::new());
        }
        let reference = format!("{}@{}", view.run.workflow, view.run.version);
        let files: Vec<cairn_core::signature::ToolFile> = match self.load_workflow(&reference) {
            Ok(wf) => wf
                .spec()
                .steps
                .iter()
                .find(|s| s.id == record.step_id)
                .and_then(|s| wf.tools.get(&s.tool))
                .map(|t| t.files.clone())
                .unwrap_or_default(),
            // A workflow that cannot be read still has its jobs; its own files are then unhashed.
            Err(_) => Vec::new(),
        };
        let pipeline_file = |p: &str| files.iter().find(|f| f.path == p).map(|f| f.sha256.clone());
        Ok(cairn_core::job::lineage(&step.jobs, &record.artifact.name, &pipeline_file))
    }

    /// Hashes a completed attempt's declared outputs where it ran: the artifacts, or the step's
    /// error (an output not written, a symlink, a file where a folder was declared).
    pub(crate) fn hash_outputs(
        &self,
        placement: &Placement,
        run_dir: &str,
        step_id: &str,
        decls: &[OutputDecl],
    ) -> Result<Vec<Artifact>, String> {
        match placement {
            Placement::Local => {
                cairn_exec::artifacts::hash_outputs(Path::new(run_dir), step_id, decls).map_err(|e| e.to_string())
            }
            Placement::Target(spec, agent) => {
                let request = OutputsRequest {
                    run_dir: run_dir.to_string(),
                    step_id: step_id.to_string(),
                    outputs: decls.to_vec(),
                };
                match agent.outputs(request, AGENT_FILE_TIMEOUT) {
                    Ok(hashed) => match hashed.fault {
                        Some(fault) => Err(fault),
                        None => Ok(hashed.artifacts),
                    },
                    Err(e) => Err(format!("its outputs could not be hashed on target `{}`: {e}", spec.name)),
                }
            }
        }
    }

    /// What is at each recorded artifact's path under `run_dir` now (`None`: the recorded
    /// bytes). A target that cannot be asked makes every file unreachable, in words.
    pub(crate) fn check_artifacts(
        &self,
        placement: &Placement,
        run_dir: &str,
        files: &[&Artifact],
    ) -> HashMap<String, Option<Found>> {
        match placement {
            Placement::Local => files
                .iter()
                .map(|a| {
                    (a.path.clone(), cairn_exec::artifacts::check_artifact(Path::new(run_dir), &a.path, &a.sha256))
                })
                .collect(),
            Placement::Target(spec, agent) => {
                let request = CheckRequest {
                    run_dir: run_dir.to_string(),
                    files: files.iter().map(|a| CheckFile { path: a.path.clone(), sha256: a.sha256.clone() }).collect(),
                };
                match agent.check(request, AGENT_FILE_TIMEOUT) {
                    Ok(found) => files
                        .iter()
                        .map(|a| {
                            let f = found.get(&a.path).cloned().unwrap_or(Some(Found::Missing));
                            (a.path.clone(), f)
                        })
                        .collect(),
                    Err(e) => {
                        let why = format!("target `{}` could not check it: {e}", spec.name);
                        files.iter().map(|a| (a.path.clone(), Some(Found::Unreachable { why: why.clone() }))).collect()
                    }
                }
            }
        }
    }

    /// Materialises `files` from the source run's directory into the child's, where the child
    /// runs (both on one host: a replay reuses only artifacts on its own target), as hard links
    /// where the filesystem allows.
    pub(crate) fn materialize(
        &self,
        placement: &Placement,
        from: &str,
        to: &str,
        files: &[&Artifact],
        dirs: Vec<String>,
    ) -> Result<Materialized, String> {
        let files: Vec<Carried> =
            files.iter().map(|a| Carried { path: a.path.clone(), sha256: a.sha256.clone() }).collect();
        let carry = Carry { files: &files, dirs: &dirs, link: true, ..Carry::default() };
        self.carry(placement, from, to, &carry)
    }

    /// Puts `carry` from `from` into `to` where the run executes: here, or through the agent.
    pub(crate) fn carry(
        &self,
        placement: &Placement,
        from: &str,
        to: &str,
        carry: &Carry<'_>,
    ) -> Result<Materialized, String> {
        match placement {
            Placement::Local => {
                cairn_exec::artifacts::materialize(Path::new(from), Path::new(to), carry).map_err(|e| e.to_string())
            }
            Placement::Target(spec, agent) => {
                let request = MaterializeRequest {
                    from: from.to_string(),
                    to: to.to_string(),
                    files: carry
                        .files
                        .iter()
                        .map(|c| CheckFile { path: c.path.clone(), sha256: c.sha256.clone() })
                        .collect(),
                    dirs: carry.dirs.to_vec(),
                    link: carry.link,
                    once: carry.once.map(String::from),
                    write: carry.write.iter().map(|w| DeployFile::new(&w.path, &w.content, 0o644)).collect(),
                };
                agent
                    .materialize(request, AGENT_FILE_TIMEOUT)
                    .map(|m| Materialized { linked: m.linked, copied: m.copied, present: m.present })
                    .map_err(|e| format!("on target `{}`: {e}", spec.name))
            }
        }
    }
}
