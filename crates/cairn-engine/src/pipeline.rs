//! Pipeline steps (a `snakemake` or `nextflow` tool): the working copy the pipeline runs in, its
//! log read as it grows into the jobs' events and a summary, and what it created or changed, its
//! artifacts. Where the run executes: here, or through the step agent on its target.
//!
//! **Invariant:** a working copy is made once per step, copied (never linked) from the snapshot
//! and checked against its hashes; a later attempt finds it as the pipeline left it, so
//! Snakemake's own record of its completed jobs decides what runs again.

use std::path::Path;
use std::time::Duration;

use cairn_core::artifact::Artifact;
use cairn_core::canonical::sha256_hex;
use cairn_core::controller::{RUN_CONFIG, job_record, own_state, working_copy};
use cairn_core::ids::RunId;
use cairn_core::pipeline::JobEvent;
use cairn_core::plan::{InputFile, absolute_path_strings};
use cairn_core::signature::ToolFile;
use cairn_core::workflow::ToolKind;
use cairn_exec::agent::protocol::{
    ChangedRequest, CheckFile, DeployFile, FilesRequest, ReadRequest, ReadyRequest, SeedRequest, SeedState,
    SeededCounts,
};
use cairn_exec::artifacts::{Carried, Carry, Written};
use serde_json::Value;

use crate::Engine;
use crate::placement::Placement;

/// How long the agent may take to hash a pipeline's working copy on a target.
const AGENT_FILE_TIMEOUT: Duration = Duration::from_secs(3600);

/// How much of a log one read takes.
const LOG_CHUNK: usize = 1 << 20;

impl Engine {
    /// A pipeline step's working copy, `<run_dir>/steps/<step>`: the pipeline's folder copied
    /// there from `source` once (checked against the snapshot's hashes; a later attempt keeps it
    /// as the pipeline left it), with the run's configuration written (or, written by the plan's
    /// approval, checked). With a `seed` (a replay re-executing the step), it starts as a copy of
    /// the earlier run's working copy instead, so the controller runs only the jobs it finds out
    /// of date: what was carried is returned.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn prepare_working_copy(
        &self,
        placement: &Placement,
        run_dir: &str,
        step_id: &str,
        source: &str,
        files: &[ToolFile],
        config: Option<&Value>,
        seed: Option<&PipelineSeed>,
    ) -> Result<Option<Seeded>, String> {
        let files: Vec<Carried> =
            files.iter().map(|f| Carried { path: f.path.clone(), sha256: f.sha256.clone() }).collect();
        let write: Vec<Written> = match config {
            Some(config) => {
                let content = run_config_bytes(config)?;
                vec![Written { path: RUN_CONFIG.into(), sha256: sha256_hex(&content), content }]
            }
            None => Vec::new(),
        };
        let to = format!("{run_dir}/{}", working_copy(step_id));
        if let Some(seed) = seed {
            return self
                .seed(placement, source, &to, &files, &write, seed)
                .map(Some)
                .map_err(|e| format!("its working copy could not be seeded from run {}: {e}", seed.from_run));
        }
        let carry =
            Carry { files: &files, link: false, once: Some(WORKING_COPY_MARKER), write: &write, ..Carry::default() };
        self.carry(placement, source, &to, &carry)
            .map(|_| None)
            .map_err(|e| format!("its working copy could not be made: {e}"))
    }

    fn seed(
        &self,
        placement: &Placement,
        snapshot: &str,
        to: &str,
        baseline: &[Carried],
        write: &[Written],
        seed: &PipelineSeed,
    ) -> Result<Seeded, String> {
        let started = std::time::Instant::now();
        let counts = match placement {
            Placement::Local => {
                let state = seed.state.as_ref().map(|(d, s)| (d.as_str(), s.as_str()));
                let from = Path::new(&seed.from_dir);
                let s = cairn_exec::artifacts::Seed { from, files: &seed.files, state };
                let done = cairn_exec::artifacts::seed_working_copy(
                    Path::new(snapshot),
                    Path::new(to),
                    baseline,
                    write,
                    WORKING_COPY_MARKER,
                    &s,
                )
                .map_err(|e| e.to_string())?;
                SeededCounts {
                    carried: done.carried,
                    left_out: done.left_out,
                    state: done.state,
                    present: done.present,
                }
            }
            Placement::Target(spec, agent) => {
                let check = |c: &Carried| CheckFile { path: c.path.clone(), sha256: c.sha256.clone() };
                let request = SeedRequest {
                    snapshot: snapshot.to_string(),
                    to: to.to_string(),
                    from: seed.from_dir.clone(),
                    baseline: baseline.iter().map(check).collect(),
                    files: seed.files.iter().map(check).collect(),
                    state: seed
                        .state
                        .as_ref()
                        .map(|(dir, sha256)| SeedState { dir: dir.clone(), sha256: sha256.clone() }),
                    write: write.iter().map(|w| DeployFile::new(&w.path, &w.content, 0o644)).collect(),
                    once: WORKING_COPY_MARKER.to_string(),
                };
                agent.seed(request, AGENT_FILE_TIMEOUT).map_err(|e| format!("on target `{}`: {e}", spec.name))?
            }
        };
        if counts.present {
            // A later attempt (or a successor): the copy was seeded before; what it carried is
            // in its marker.
            return self
                .seeded_working_copy(placement, to, &seed.from_run)
                .ok_or_else(|| format!("{to}/{WORKING_COPY_MARKER} does not say what was seeded"));
        }
        Ok(Seeded {
            from_run: seed.from_run.clone(),
            carried: counts.carried,
            left_out: counts.left_out,
            state: counts.state,
            took_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        })
    }

    /// Where a pipeline step of replay child `run_id` starts from: the working copy of the run
    /// whose controller made `source_run_id`'s step (the source, or the run the source reused it
    /// from), on the same target, with the artifacts and the digest of the controller's record
    /// it completed with. `None` (a fresh copy) when there is no such completed step, it was
    /// recorded without that digest, or it lies on another target.
    pub(crate) fn pipeline_seed(&self, run_id: &RunId, source_run_id: &RunId, step_id: &str) -> Option<PipelineSeed> {
        let row = self.store.steps(source_run_id).ok()?.into_iter().find(|s| s.step_id == step_id)?;
        if row.status != cairn_core::status::StepStatus::Completed {
            return None;
        }
        let state = row.result.as_ref()?.get(STATE_KEY)?.as_str()?.to_string();
        let origin = row.reused_from.clone().unwrap_or_else(|| source_run_id.clone());
        let origin_run = self.store.run(&origin).ok()??;
        if self.target_name_of_run(&origin).ok()? != self.target_name_of_run(run_id).ok()? {
            return None;
        }
        let files = self
            .store
            .artifacts(&origin)
            .ok()?
            .into_iter()
            .filter(|a| a.step_id == step_id)
            .map(|a| Carried { path: a.artifact.name, sha256: a.artifact.sha256 })
            .collect();
        let dir = job_record(ToolKind::Snakemake)?.to_string();
        Some(PipelineSeed {
            from_run: origin.into_string(),
            from_dir: format!("{}/{}", origin_run.run_dir, working_copy(step_id)),
            files,
            state: Some((dir, state)),
        })
    }

    /// What a seeded working copy `work_dir` carried from run `from_run`, from its marker
    /// (`None`: it was not seeded, or not yet).
    pub(crate) fn seeded_working_copy(&self, placement: &Placement, work_dir: &str, from_run: &str) -> Option<Seeded> {
        let (bytes, _) = self.read_slice(placement, &format!("{work_dir}/{WORKING_COPY_MARKER}"), 0, 1 << 20).ok()?;
        let text = String::from_utf8_lossy(&bytes);
        let first = text.lines().next()?.strip_prefix(cairn_exec::artifacts::SEEDED_MARK)?;
        let counts: SeededCounts = serde_json::from_str(first).ok()?;
        Some(Seeded {
            from_run: from_run.to_string(),
            carried: counts.carried,
            left_out: counts.left_out,
            state: counts.state,
            took_ms: 0,
        })
    }

    /// What a pipeline created or changed in its working copy, hashed where it ran: its artifacts,
    /// each named by its path in the working copy; and the digest of the controller's record of
    /// its jobs, which a replay that seeds a working copy from this one checks.
    pub(crate) fn pipeline_outputs(
        &self,
        placement: &Placement,
        run_dir: &str,
        step_id: &str,
        kind: ToolKind,
        baseline: &[ToolFile],
    ) -> Result<(Vec<Artifact>, Option<String>), String> {
        let prefix = working_copy(step_id);
        let work_dir = format!("{run_dir}/{prefix}");
        let exclude = own_state(kind);
        let record = job_record(kind);
        match placement {
            Placement::Local => {
                let baseline: Vec<Carried> =
                    baseline.iter().map(|f| Carried { path: f.path.clone(), sha256: f.sha256.clone() }).collect();
                let artifacts = cairn_exec::artifacts::changed_files(Path::new(&work_dir), &prefix, &baseline, exclude)
                    .map_err(|e| e.to_string())?;
                let state = match record {
                    Some(dir) => cairn_exec::artifacts::state_digest(&Path::new(&work_dir).join(dir))
                        .map_err(|e| format!("{work_dir}/{dir} cannot be read: {e}"))?,
                    None => None,
                };
                Ok((artifacts, state))
            }
            Placement::Target(spec, agent) => {
                let request = ChangedRequest {
                    work_dir,
                    prefix,
                    baseline: baseline
                        .iter()
                        .map(|f| CheckFile { path: f.path.clone(), sha256: f.sha256.clone() })
                        .collect(),
                    exclude: exclude.iter().map(|e| e.to_string()).collect(),
                    state: record.map(String::from),
                };
                match agent.changed(request, AGENT_FILE_TIMEOUT) {
                    Ok(hashed) => match hashed.fault {
                        Some(fault) => Err(fault),
                        None => Ok((hashed.artifacts, hashed.state_sha256)),
                    },
                    Err(e) => Err(format!("its outputs could not be hashed on target `{}`: {e}", spec.name)),
                }
            }
        }
    }

    /// The files a pipeline step's arguments bind (every absolute path in them naming a file
    /// where the run executes: a configfile, a samplesheet its config names), hashed there. A
    /// replay reuses the step only while they are these bytes.
    pub(crate) fn bound_inputs(
        &self,
        placement: &Placement,
        run_dir: &str,
        args: &Value,
    ) -> Result<Vec<InputFile>, String> {
        let paths = absolute_path_strings(args);
        if paths.is_empty() {
            return Ok(Vec::new());
        }
        match placement {
            Placement::Local => Ok(paths
                .into_iter()
                .filter(|p| Path::new(p).is_file())
                .map(|p| match cairn_exec::artifacts::hash_file(Path::new(&p)) {
                    Ok((_, sha256)) => Ok(InputFile { path: p, sha256 }),
                    Err(e) => Err(format!("input file {p} cannot be read: {e}")),
                })
                .collect::<Result<_, _>>()?),
            Placement::Target(spec, agent) => {
                let request = ReadyRequest {
                    run_dir: run_dir.to_string(),
                    workspace_root: spec.workspace_root.clone(),
                    inputs: paths,
                    programs: Vec::new(),
                };
                let facts = agent
                    .ready(request, AGENT_FILE_TIMEOUT)
                    .map_err(|e| format!("its input files could not be hashed on target `{}`: {e}", spec.name))?;
                Ok(facts
                    .inputs
                    .into_iter()
                    .filter_map(|(path, sha256)| sha256.map(|sha256| InputFile { path, sha256 }))
                    .collect())
            }
        }
    }

    /// What the finished jobs among `events` left as their outputs, where the run executes,
    /// filled into their events (a target that cannot be asked leaves them as listed: paths
    /// without contents, said in the step's log by the pipeline's own end).
    pub(crate) fn fill_job_files(&self, placement: &Placement, work_dir: &str, events: &mut [JobEvent]) {
        let mut finished: Vec<&mut Vec<cairn_core::pipeline::JobFile>> = events
            .iter_mut()
            .filter_map(|e| match e {
                JobEvent::Finished { files, .. } if !files.is_empty() => Some(files),
                _ => None,
            })
            .collect();
        if finished.is_empty() {
            return;
        }
        let jobs: Vec<Vec<String>> = finished.iter().map(|f| f.iter().map(|x| x.path.clone()).collect()).collect();
        let found = match placement {
            Placement::Local => {
                Some(jobs.iter().map(|paths| cairn_exec::artifacts::job_files(Path::new(work_dir), paths)).collect())
            }
            // One round trip for every job that ended in this piece of the log.
            Placement::Target(_, agent) => agent
                .files(FilesRequest { work_dir: work_dir.to_string(), jobs }, AGENT_FILE_TIMEOUT)
                .ok()
                .filter(|found: &Vec<Vec<_>>| found.len() == finished.len()),
        };
        if let Some(found) = found {
            for (files, hashed) in finished.iter_mut().zip(found) {
                **files = hashed;
            }
        }
    }

    /// Bytes of a file where the run executes, from `offset` (at most [`LOG_CHUNK`]), and the
    /// file's size; a missing file is empty.
    pub(crate) fn read_from(&self, placement: &Placement, path: &str, offset: u64) -> Result<(Vec<u8>, u64), String> {
        self.read_slice(placement, path, offset, LOG_CHUNK as u64)
    }

    /// At most `max` bytes of a file where the run executes, from `offset`, and the file's size;
    /// a missing file is empty.
    pub(crate) fn read_slice(
        &self,
        placement: &Placement,
        path: &str,
        offset: u64,
        max: u64,
    ) -> Result<(Vec<u8>, u64), String> {
        match placement {
            Placement::Local => {
                use std::io::{Read, Seek, SeekFrom};
                let mut f = match std::fs::File::open(path) {
                    Ok(f) => f,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
                    Err(e) => return Err(format!("{path}: {e}")),
                };
                let size = f.metadata().map_err(|e| format!("{path}: {e}"))?.len();
                f.seek(SeekFrom::Start(offset.min(size))).map_err(|e| format!("{path}: {e}"))?;
                let mut buf = Vec::new();
                f.take(max).read_to_end(&mut buf).map_err(|e| format!("{path}: {e}"))?;
                Ok((buf, size))
            }
            Placement::Target(spec, agent) => {
                let chunk = agent
                    .read(
                        ReadRequest { path: path.to_string(), offset, max_bytes: max as usize },
                        Duration::from_secs(60),
                    )
                    .map_err(|e| format!("{path} on target `{}`: {e}", spec.name))?;
                Ok((chunk.bytes(), chunk.size))
            }
        }
    }
}

/// Where a pipeline step's result records the digest of its controller's record of its jobs.
pub(crate) const STATE_KEY: &str = "state_sha256";

/// Where a pipeline step's result says what its seeded working copy carried.
pub(crate) const SEEDED_KEY: &str = "seeded";

/// A pipeline step a replay re-executes: the earlier run's working copy its own starts from.
#[derive(Debug, Clone)]
pub struct PipelineSeed {
    /// The run whose controller made the files (the source, or the run a source reused it from).
    pub from_run: String,
    /// Its working copy of the step, where the run executes.
    pub from_dir: String,
    /// The step's recorded artifacts there (by path in the working copy), with their SHA-256.
    pub files: Vec<Carried>,
    /// The controller's record of its jobs and the digest recorded for it.
    pub state: Option<(String, String)>,
}

/// What a seeded working copy carried: in the step's result (`seeded`) and its marker.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Seeded {
    pub from_run: String,
    pub carried: usize,
    /// Recorded outputs left out, with why (the controller remakes them).
    pub left_out: Vec<(String, String)>,
    /// Whether the controller's record of its jobs came along (without it nothing else does).
    pub state: bool,
    /// How long making the copy took (0 when an earlier attempt made it).
    pub took_ms: u64,
}

impl Seeded {
    pub(crate) fn to_json(&self) -> Value {
        serde_json::json!({
            "from_run": self.from_run,
            "carried": self.carried,
            "left_out": self.left_out.iter().map(|(p, why)| serde_json::json!({"path": p, "why": why})).collect::<Vec<_>>(),
            "state": self.state,
            "took_ms": self.took_ms,
        })
    }
}

/// Marks a working copy made: a later attempt keeps the copy as the pipeline left it.
pub(crate) const WORKING_COPY_MARKER: &str = ".cairn/working-copy";

/// The bytes of a run configuration file, as the plan binds them: canonical JSON.
pub(crate) fn run_config_bytes(config: &Value) -> Result<Vec<u8>, String> {
    cairn_core::canonical::canonical_json(config).map(String::into_bytes).map_err(|e| format!("args.config: {e}"))
}
