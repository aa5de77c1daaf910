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
use cairn_core::controller::{RUN_CONFIG, own_state, working_copy};
use cairn_core::plan::{InputFile, absolute_path_strings};
use cairn_core::signature::ToolFile;
use cairn_core::workflow::ToolKind;
use cairn_exec::agent::protocol::{ChangedRequest, CheckFile, ReadRequest, ReadyRequest};
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
    /// approval, checked).
    pub(crate) fn prepare_working_copy(
        &self,
        placement: &Placement,
        run_dir: &str,
        step_id: &str,
        source: &str,
        files: &[ToolFile],
        config: Option<&Value>,
    ) -> Result<(), String> {
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
        let carry =
            Carry { files: &files, link: false, once: Some(WORKING_COPY_MARKER), write: &write, ..Carry::default() };
        self.carry(placement, source, &to, &carry)
            .map(|_| ())
            .map_err(|e| format!("its working copy could not be made: {e}"))
    }

    /// What a pipeline created or changed in its working copy, hashed where it ran: its artifacts,
    /// each named by its path in the working copy.
    pub(crate) fn pipeline_outputs(
        &self,
        placement: &Placement,
        run_dir: &str,
        step_id: &str,
        kind: ToolKind,
        baseline: &[ToolFile],
    ) -> Result<Vec<Artifact>, String> {
        let prefix = working_copy(step_id);
        let work_dir = format!("{run_dir}/{prefix}");
        let exclude = own_state(kind);
        match placement {
            Placement::Local => {
                let baseline: Vec<Carried> =
                    baseline.iter().map(|f| Carried { path: f.path.clone(), sha256: f.sha256.clone() }).collect();
                cairn_exec::artifacts::changed_files(Path::new(&work_dir), &prefix, &baseline, exclude)
                    .map_err(|e| e.to_string())
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
                };
                match agent.changed(request, AGENT_FILE_TIMEOUT) {
                    Ok(hashed) => match hashed.fault {
                        Some(fault) => Err(fault),
                        None => Ok(hashed.artifacts),
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

/// Marks a working copy made: a later attempt keeps the copy as the pipeline left it.
const WORKING_COPY_MARKER: &str = ".cairn/working-copy";

/// The bytes of a run configuration file, as the plan binds them: canonical JSON.
pub(crate) fn run_config_bytes(config: &Value) -> Result<Vec<u8>, String> {
    cairn_core::canonical::canonical_json(config).map(String::into_bytes).map_err(|e| format!("args.config: {e}"))
}
