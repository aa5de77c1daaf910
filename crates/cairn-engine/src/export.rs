//! Exporting a run as a Provenance Run Crate, or a verification as a Process Run Crate: the
//! records gathered through the store, the crate's metadata built by the pure
//! `cairn_core::rocrate`, and its files written here: the workflow folder, the input and the
//! files it names, the validator's verdict, the targets' observed facts and (unless `data` is off)
//! the artifacts, each copied (over SSH, for a run on a target) and checked against its recorded
//! SHA-256.
//!
//! **Invariant:** every path written lies under the crate's root, and every path read lies under
//! the run directory or the workflow snapshot (no `..`, no absolute path, no symlink followed), or
//! is an input file the run recorded.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use cairn_core::artifact::ArtifactRecord;
use cairn_core::ids::RunId;
use cairn_core::plan::{InputFile, Plan, absolute_path_strings};
use cairn_core::rocrate::{self, CrateFile, CrateInputFile, CrateRun, CrateStep, CrateTarget, CrateVerification};
use cairn_core::target::LOCAL;
use serde_json::{Value, json};

use crate::placement::Placement;
use crate::{Engine, EngineError};

/// Where an export goes.
#[derive(Debug, Clone)]
pub enum ExportOut {
    /// A crate directory (created; it must not exist yet).
    Dir(PathBuf),
    /// A zipped crate (`ro-crate-metadata.json` at its root; the file must not exist yet).
    Zip(PathBuf),
}

/// What is exported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExportSubject {
    /// A run, as a Provenance Run Crate.
    Run(RunId),
    /// A verification, as a Process Run Crate of its notebook run.
    Verification(String),
}

impl ExportSubject {
    /// `run-ID` or `verification-ID`: the name of its crate in the state root's exports.
    pub fn slug(&self) -> String {
        match self {
            ExportSubject::Run(id) => format!("run-{id}"),
            ExportSubject::Verification(id) => format!("verification-{id}"),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ExportRequest {
    pub subject: ExportSubject,
    pub out: ExportOut,
    /// Copy the artifacts and input files into the crate; without, they are referenced by path and
    /// hash only.
    pub data: bool,
}

#[derive(Debug, Clone)]
pub struct ExportResult {
    pub subject: ExportSubject,
    pub path: PathBuf,
    /// Files written, `ro-crate-metadata.json` included.
    pub files: usize,
    /// Bytes written.
    pub bytes: u64,
    /// Artifacts copied into the crate (0 without data).
    pub artifacts: usize,
    /// Input files copied into the crate (0 without data).
    pub input_files: usize,
}

/// A relative path that stays under its root: no `..`, no root, no prefix.
fn contained(rel: &str) -> Result<&Path, EngineError> {
    if !cairn_exec::artifacts::safe_relative(rel) {
        return Err(EngineError::InvalidExportPath {
            path: rel.to_string(),
            message: "it leaves its root; only plain relative paths are exported".into(),
        });
    }
    Ok(Path::new(rel))
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

impl Writer {
    /// Writes `value` as pretty JSON to `rel`, a file of the crate named by `rel` itself.
    fn write_json(&mut self, rel: &str, value: &impl serde::Serialize) -> Result<CrateFile, EngineError> {
        let data = serde_json::to_vec_pretty(value).map_err(|e| EngineError::internal(e.to_string()))?;
        self.write(rel, &data)?;
        Ok(CrateFile {
            id: rel.to_string(),
            bytes: data.len() as u64,
            sha256: cairn_core::canonical::sha256_hex(&data),
        })
    }

    /// Forgets a file copied in (its bytes did not match the record).
    fn discard(&mut self, rel: &str, bytes: u64) {
        if let Ok(p) = contained(rel) {
            let _ = fs::remove_file(self.root.join(p));
        }
        self.files -= 1;
        self.bytes -= bytes;
    }
}

/// The run a crate is written of: its view, where its files lie, and whether they are copied
/// (`data`) or referenced where they lie.
struct RunSource<'a> {
    view: &'a crate::RunView,
    placement: &'a Placement,
    data: bool,
}

impl RunSource<'_> {
    /// A file where it lies: a `file://` URI naming the target's host.
    fn uri(&self, path: &str) -> String {
        let host = match self.placement {
            Placement::Target(spec, _) => spec.ssh.host.as_str(),
            Placement::Local => "",
        };
        format!("file://{host}{}", rocrate::path_id(path))
    }

    /// The configured target the run executed on, if not this machine.
    fn own_target(&self) -> Option<String> {
        (self.view.target != LOCAL).then(|| self.view.target.clone())
    }
}

/// The run's input files in the crate.
#[derive(Default)]
struct CrateInputs {
    files: Vec<CrateInputFile>,
    /// How many were copied.
    copied: usize,
    /// Each one's `@id`, by path.
    ids: BTreeMap<String, String>,
}

/// A step's artifacts with their `@id`s in the crate, and its symlinks (path, target).
type StepFiles = (Vec<(ArtifactRecord, String)>, Vec<(String, String)>);

/// The run's steps in the crate.
#[derive(Default)]
struct CrateSteps {
    steps: Vec<CrateStep>,
    /// How many artifacts were copied.
    copied: usize,
    /// The configured targets that executed attempts, by name.
    targets: BTreeSet<String>,
}

/// Copies the workflow folder, as registered, under [`rocrate::WORKFLOW_DIR`].
fn copy_workflow_folder(w: &mut Writer, snapshot: &Path) -> Result<Vec<CrateFile>, EngineError> {
    let mut workflow_files = Vec::new();
    for rel in folder_files(snapshot)? {
        let path = format!("{}/{rel}", rocrate::WORKFLOW_DIR);
        let (bytes, sha256) = w.copy(&snapshot.join(contained(&rel)?), &path)?;
        workflow_files.push(CrateFile { id: rocrate::path_id(&path), bytes, sha256 });
    }
    Ok(workflow_files)
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
    /// lineage whose record of the step was not itself reused. Each run's steps are read once per
    /// export, however many reused steps point to it.
    fn producer_of(
        &self,
        seen: &mut Lineage,
        from: &RunId,
        step_id: &str,
    ) -> Result<Option<(RunId, u32)>, EngineError> {
        let mut next = Some(from.clone());
        // Sources are older and never form a cycle; the bound only guards a corrupt registry.
        for _ in 0..10_000 {
            let Some(run_id) = next else { break };
            if !seen.steps.contains_key(&run_id) {
                let rows = self.store.steps(&run_id)?;
                seen.steps.insert(
                    run_id.clone(),
                    rows.into_iter().map(|r| (r.step_id, (r.reused_from, r.attempt_count.max(1)))).collect(),
                );
            }
            let Some((reused_from, attempts)) = seen.steps.get(&run_id).and_then(|s| s.get(step_id)) else {
                return Ok(None);
            };
            match reused_from {
                None => return Ok(Some((run_id, *attempts))),
                Some(up) => next = Some(up.clone()),
            }
        }
        Ok(None)
    }

    /// The target a run of the lineage executed on, read once per export.
    fn target_in_lineage(&self, seen: &mut Lineage, run_id: &RunId) -> Result<String, EngineError> {
        if let Some(t) = seen.targets.get(run_id) {
            return Ok(t.clone());
        }
        let t = self.target_name_of_run(run_id)?;
        seen.targets.insert(run_id.clone(), t.clone());
        Ok(t)
    }

    /// Refuses an unknown subject before anything is written.
    fn check_subject(&self, subject: &ExportSubject) -> Result<(), EngineError> {
        match subject {
            ExportSubject::Run(id) => self.run_record(id).map(drop),
            ExportSubject::Verification(id) => self.verification(id).map(drop),
        }
    }

    /// Writes a run as a Provenance Run Crate 0.5, or a verification as a Process Run Crate 0.5.
    pub fn export(&self, request: &ExportRequest) -> Result<ExportResult, EngineError> {
        self.check_subject(&request.subject)?;
        let (dest, zip) = match &request.out {
            ExportOut::Dir(p) => (p, false),
            ExportOut::Zip(p) => (p, true),
        };
        if fs::symlink_metadata(dest).is_ok() {
            return Err(EngineError::ExportExists { path: dest.display().to_string() });
        }
        self.write_export(request, dest, zip)
    }

    /// Writes the zipped crate of `subject` into the state root's `exports/` as
    /// `<run|verification>-ID.ro-crate.zip`, replacing the one before: what the API serves and the
    /// MCP tool names.
    pub fn export_to_state(&self, subject: &ExportSubject, data: bool) -> Result<ExportResult, EngineError> {
        self.check_subject(subject)?;
        let dir = self.state.path().join("exports");
        fs::create_dir_all(&dir).map_err(|e| EngineError::io(&dir, e))?;
        let dest = dir.join(format!("{}.ro-crate.zip", subject.slug()));
        let request = ExportRequest { subject: subject.clone(), out: ExportOut::Zip(dest.clone()), data };
        self.write_export(&request, &dest, true)
    }

    fn write_export(&self, request: &ExportRequest, dest: &Path, zip: bool) -> Result<ExportResult, EngineError> {
        // The crate is written into a hidden directory beside the destination and takes its place
        // only once whole (a rename, or the zip made from it): an export killed or failed midway
        // leaves no crate, and the next export of that destination removes what it left.
        let name = dest.file_name().ok_or_else(|| EngineError::InvalidExportPath {
            path: dest.display().to_string(),
            message: if zip { "name a zip file".into() } else { "name the crate's directory".into() },
        })?;
        let prefix = format!(".{}.partial-", name.to_string_lossy());
        remove_dead_staging(dest, &prefix);
        let staging = dest.with_file_name(format!("{prefix}{}-{}", std::process::id(), self.ids.token()));
        fs::create_dir_all(&staging).map_err(|e| EngineError::io(&staging, e))?;
        let written = match &request.subject {
            ExportSubject::Run(id) => self.write_run_crate(id, request.data, &staging),
            ExportSubject::Verification(id) => self.write_verification_crate(id, &staging),
        }
        .and_then(|w| {
            let done = ExportResult {
                subject: request.subject.clone(),
                path: dest.to_path_buf(),
                files: w.files,
                bytes: w.bytes,
                artifacts: w.artifacts,
                input_files: w.input_files,
            };
            if zip {
                let bytes = zip_dir(&staging, dest)?;
                Ok(ExportResult { bytes, ..done })
            } else {
                fs::rename(&staging, dest).map_err(|e| EngineError::io(dest, e))?;
                Ok(done)
            }
        });
        let _ = fs::remove_dir_all(&staging);
        written
    }

    /// Copies the file at absolute `from` where the run executes (here, or on its target over SSH
    /// through the step agent) to `rel` in the crate; its size and SHA-256 as copied.
    fn fetch(
        &self,
        w: &mut Writer,
        placement: &Placement,
        from: &str,
        rel: &str,
    ) -> Result<(u64, String), EngineError> {
        let Placement::Target(spec, _) = placement else { return w.copy(Path::new(from), rel) };
        let to = w.root.join(contained(rel)?);
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent).map_err(|e| EngineError::io(parent, e))?;
        }
        let mut file = fs::File::create_new(&to).map_err(|e| EngineError::io(&to, e))?;
        let mut offset = 0u64;
        loop {
            let (bytes, size) = self
                .read_from(placement, from, offset)
                .map_err(|message| EngineError::TargetUnreachable { target: spec.name.clone(), message })?;
            if offset == 0 && size == 0 && bytes.is_empty() {
                break;
            }
            file.write_all(&bytes).map_err(|e| EngineError::io(&to, e))?;
            offset += bytes.len() as u64;
            if bytes.is_empty() || offset >= size {
                break;
            }
        }
        drop(file);
        let (bytes, sha) = cairn_exec::artifacts::hash_file(&to).map_err(|e| EngineError::io(&to, e))?;
        w.files += 1;
        w.bytes += bytes;
        Ok((bytes, sha))
    }

    /// The files the run read from outside its run directory, by path: its plan's input files
    /// (hashed when planned), those its steps bound (hashed when read), and, for a local run
    /// without a plan, the existing files its input names (hashed now, and said so).
    fn input_files_of(
        &self,
        view: &crate::RunView,
        plan: Option<&Plan>,
        placement: &Placement,
    ) -> BTreeMap<String, (String, Option<&'static str>)> {
        let mut files: BTreeMap<String, (String, Option<&'static str>)> = BTreeMap::new();
        for f in plan.map(|p| p.inputs.as_slice()).unwrap_or_default() {
            files.insert(f.path.clone(), (f.sha256.clone(), None));
        }
        for s in &view.steps {
            for f in step_inputs(s) {
                files.entry(f.path).or_insert((f.sha256, None));
            }
        }
        if view.run.plan_id.is_none() && !placement.is_remote() {
            let run_dir = Path::new(&view.run.run_dir);
            for p in absolute_path_strings(&view.run.input) {
                let path = Path::new(&p);
                if files.contains_key(&p) || path.starts_with(run_dir) || !path.is_file() {
                    continue;
                }
                if let Ok((_, sha)) = cairn_exec::artifacts::hash_file(path) {
                    files.insert(p, (sha, Some("the run did not record its bytes; hashed when exported")));
                }
            }
        }
        files
    }

    /// The approved plan a run executes, if it came from one.
    fn plan_of_run(&self, run: &cairn_core::store::RunRecord) -> Result<Option<Plan>, EngineError> {
        let Some(plan_id) = &run.plan_id else { return Ok(None) };
        match self.store.plans()?.into_iter().find(|p| &p.plan_id == plan_id) {
            Some(record) => Ok(Some(self.load_plan(&record.plan_name)?)),
            None => Ok(None),
        }
    }

    /// A configured target as the agent of the attempts it executed, with the facts observed
    /// there (the plan's readiness check when `plan_facts`, else its last probe).
    fn crate_target(
        &self,
        w: &mut Writer,
        name: &str,
        plan_facts: Option<&cairn_core::plan::PlanReadiness>,
    ) -> Result<Option<CrateTarget>, EngineError> {
        let Some(spec) = self.store.target(name)? else { return Ok(None) };
        let facts = match plan_facts {
            Some(f) => Some(json!({"source": "the plan's readiness check", "facts": f})),
            None => {
                self.store.last_probe(name)?.map(|(v, at)| json!({"source": "the last probe", "at": at, "facts": v}))
            }
        };
        let facts = match facts {
            Some(f) => {
                let rel = format!("{}/{name}.json", rocrate::TARGETS_DIR);
                let text = serde_json::to_vec_pretty(&f).map_err(|e| EngineError::internal(e.to_string()))?;
                w.write(&rel, &text)?;
                Some(CrateFile {
                    id: rocrate::path_id(&rel),
                    bytes: text.len() as u64,
                    sha256: cairn_core::canonical::sha256_hex(&text),
                })
            }
            None => None,
        };
        Ok(Some(CrateTarget {
            name: name.to_string(),
            address: format!("{}@{}:{}", spec.ssh.user, spec.ssh.host, spec.ssh.port),
            executor: match spec.executor {
                cairn_core::target::Executor::Process => "process".into(),
                cairn_core::target::Executor::Slurm => "slurm".into(),
            },
            workspace_root: spec.workspace_root.clone(),
            facts,
        }))
    }

    fn write_run_crate(&self, run_id: &RunId, data: bool, root: &Path) -> Result<Written, EngineError> {
        let view = self.show_run(run_id)?;
        let record = self.store.workflow(&view.run.workflow, Some(&view.run.version))?.ok_or_else(|| {
            EngineError::WorkflowNotFound { name: view.run.workflow.clone(), version: Some(view.run.version.clone()) }
        })?;
        let placement = self.placement(run_id)?;
        let src = RunSource { view: &view, placement: &placement, data };
        let mut w = Writer { root: root.to_path_buf(), files: 0, bytes: 0 };

        let workflow_files = copy_workflow_folder(&mut w, Path::new(&record.path))?;
        // The input, the files it names, and the verdict.
        let input = w.write_json(rocrate::INPUT_FILE, &view.run.input)?;
        let validation = w.write_json(
            rocrate::VALIDATION_FILE,
            &json!({
                "run_id": view.run.run_id,
                "status": view.run.status.as_str(),
                "findings": view.run.findings,
                "error": view.run.error,
            }),
        )?;
        let plan = self.plan_of_run(&view.run)?;
        let inputs = self.crate_input_files(&mut w, &src, plan.as_ref());
        let steps = self.crate_steps(&mut w, &src, &record.spec, &inputs.ids)?;

        // The targets that executed attempts: this run's, and those of the runs it reused from.
        let own_target = src.own_target();
        let plan_facts = plan.and_then(|p| p.readiness);
        let mut targets = Vec::new();
        for name in &steps.targets {
            let facts = if own_target.as_deref() == Some(name.as_str()) { plan_facts.as_ref() } else { None };
            targets.extend(self.crate_target(&mut w, name, facts)?);
        }

        let crate_run = CrateRun {
            input,
            input_files: inputs.files,
            validation,
            run: view.run.clone(),
            spec: record.spec.clone(),
            workflow_files,
            steps: steps.steps,
            targets,
            lineage: view.lineage.clone(),
            target: view.target.clone(),
            approval: view.approval.clone(),
            cairn_version: env!("CARGO_PKG_VERSION").to_string(),
            published_ms: self.clock.now_ms(),
        };
        let metadata = rocrate::crate_metadata(&crate_run);
        let text = serde_json::to_vec_pretty(&metadata).map_err(|e| EngineError::internal(e.to_string()))?;
        w.write("ro-crate-metadata.json", &text)?;
        Ok(Written { files: w.files, bytes: w.bytes, artifacts: steps.copied, input_files: inputs.copied })
    }

    /// The files the run read from outside its run directory, each copied (with data, when it
    /// still has the bytes the run read) or referenced where it lies.
    fn crate_input_files(&self, w: &mut Writer, src: &RunSource<'_>, plan: Option<&Plan>) -> CrateInputs {
        let mut inputs = CrateInputs::default();
        for (path, (sha256, how)) in self.input_files_of(src.view, plan, src.placement) {
            let mut f = CrateInputFile {
                id: src.uri(&path),
                path: path.clone(),
                sha256: sha256.clone(),
                bytes: None,
                note: how.map(str::to_string),
            };
            if src.data {
                let rel = format!("{}/{}", rocrate::INPUTS_DIR, path.trim_start_matches('/'));
                match self.fetch(w, src.placement, &path, &rel) {
                    Ok((bytes, sha)) if sha == sha256 => {
                        f.id = rocrate::path_id(&rel);
                        f.bytes = Some(bytes);
                        inputs.copied += 1;
                    }
                    Ok((bytes, sha)) => {
                        w.discard(&rel, bytes);
                        f.note = Some(format!(
                            "changed since the run read it: its bytes are now sha256 {sha}, so it is not copied"
                        ));
                    }
                    Err(e) => f.note = Some(format!("not readable when exported, so not copied: {e}")),
                }
            } else {
                // Its size as found where the run read it (not re-hashed: without data nothing is
                // read whole).
                f.bytes = match src.placement {
                    Placement::Local => fs::metadata(&path).ok().map(|m| m.len()),
                    // A target answers a missing file as empty.
                    Placement::Target(..) => {
                        self.read_slice(src.placement, &path, 0, 0).ok().map(|(_, n)| n).filter(|n| *n > 0)
                    }
                };
            }
            inputs.ids.insert(path, f.id.clone());
            inputs.files.push(f);
        }
        inputs
    }

    /// The run's steps as the crate tells them: each one's artifacts, the run and attempt that
    /// produced a reused one, the target its attempts ran on, the input files it read and its
    /// attempts and jobs.
    fn crate_steps(
        &self,
        w: &mut Writer,
        src: &RunSource<'_>,
        spec: &cairn_core::workflow::WorkflowSpec,
        input_ids: &BTreeMap<String, String>,
    ) -> Result<CrateSteps, EngineError> {
        let view = src.view;
        // The artifacts, copied and checked, or referenced where they lie. On a target, the step
        // agent first checks them all there in one call (each a regular file under the run
        // directory, reached through no symlink, with its recorded bytes).
        let on_target = match (src.data, src.placement.is_remote()) {
            (true, true) => {
                let all: Vec<&cairn_core::artifact::Artifact> =
                    view.steps.iter().flat_map(|s| s.artifacts.iter().map(|a| &a.artifact)).collect();
                self.check_artifacts(src.placement, &view.run.run_dir, &all)
            }
            _ => Default::default(),
        };
        let own_target = src.own_target();
        let mut out = CrateSteps::default();
        let mut attempts = rocrate::attempts_from_events(&self.store.events(&view.run.run_id, 0)?);
        let mut seen = Lineage::default();
        for s in &view.steps {
            let (artifacts, links) = self.crate_artifacts(w, src, &on_target, s, &mut out.copied)?;
            let tool = spec.step(&s.step_id).map(|d| d.tool.clone()).unwrap_or_default();
            let producer = match s.record.as_ref().and_then(|r| r.reused_from.clone()) {
                Some(from) => self.producer_of(&mut seen, &from, &s.step_id)?,
                None => None,
            };
            let agent = match (&s.record, &producer) {
                (None, _) => None,
                (Some(r), Some((p, _))) if r.reused_from.is_some() => {
                    Some(self.target_in_lineage(&mut seen, p)?).filter(|t| t != LOCAL)
                }
                (Some(r), None) if r.reused_from.is_some() => None,
                (Some(_), _) => own_target.clone(),
            };
            if let Some(t) = &agent {
                out.targets.insert(t.clone());
            }
            let input_files = step_inputs(s).into_iter().filter_map(|f| input_ids.get(&f.path).cloned()).collect();
            let attempts = attempts.remove(&s.step_id).unwrap_or_default();
            out.steps.push(CrateStep {
                step_id: s.step_id.clone(),
                tool,
                record: s.record.clone(),
                artifacts,
                producer: producer.map(|(run, attempt)| (run.into_string(), attempt)),
                attempts,
                agent,
                input_files,
                jobs: s.jobs.clone(),
                links,
            });
        }
        Ok(out)
    }

    /// A step's artifacts with their ids in the crate (each copied and checked with data, else
    /// its `file://` URI), and its symlinks (path, target): a symlink holds no bytes to carry,
    /// the step's action names it and its target. Counts the copies in `copied`.
    fn crate_artifacts(
        &self,
        w: &mut Writer,
        src: &RunSource<'_>,
        on_target: &std::collections::HashMap<String, Option<cairn_core::replay::Found>>,
        s: &crate::StepView,
        copied: &mut usize,
    ) -> Result<StepFiles, EngineError> {
        let run_dir = Path::new(&src.view.run.run_dir);
        let mut artifacts = Vec::new();
        let mut links = Vec::new();
        for a in &s.artifacts {
            if let Some(target) = &a.artifact.link {
                links.push((a.artifact.path.clone(), target.clone()));
                continue;
            }
            let at = run_dir.join(contained(&a.artifact.path)?);
            let id = if src.data {
                self.copy_artifact(w, src, on_target, a, &at)?;
                *copied += 1;
                rocrate::path_id(&a.artifact.path)
            } else {
                src.uri(&at.display().to_string())
            };
            artifacts.push((a.clone(), id));
        }
        Ok((artifacts, links))
    }

    /// Copies an artifact (at `at`) into the crate, refusing one reached through a symlink or
    /// whose bytes are not those recorded.
    fn copy_artifact(
        &self,
        w: &mut Writer,
        src: &RunSource<'_>,
        on_target: &std::collections::HashMap<String, Option<cairn_core::replay::Found>>,
        a: &ArtifactRecord,
        at: &Path,
    ) -> Result<(), EngineError> {
        let view = src.view;
        // Recorded under the run directory: no folder on the way may be a link out of it.
        if let Some(Some(found)) = on_target.get(&a.artifact.path) {
            return Err(EngineError::ExportArtifactMismatch {
                run_id: view.run.run_id.to_string(),
                path: a.artifact.path.clone(),
                message: format!("on target `{}`, {found}", view.target),
            });
        }
        let link = match src.placement.is_remote() {
            false => cairn_exec::artifacts::symlinked_component(Path::new(&view.run.run_dir), &a.artifact.path),
            true => None,
        };
        if let Some(link) = link {
            return Err(EngineError::InvalidExportPath {
                path: link.display().to_string(),
                message: format!("artifact {} is reached through a symlink, which is not followed", a.artifact.path),
            });
        }
        let (bytes, sha) = self.fetch(w, src.placement, &at.display().to_string(), &a.artifact.path)?;
        if sha != a.artifact.sha256 || bytes != a.artifact.bytes {
            return Err(EngineError::ExportArtifactMismatch {
                run_id: view.run.run_id.to_string(),
                path: a.artifact.path.clone(),
                message: format!("sha256 {sha}, {bytes} bytes; recorded {}", a.artifact.sha256),
            });
        }
        Ok(())
    }

    fn write_verification_crate(&self, id: &str, root: &Path) -> Result<Written, EngineError> {
        let v = self.verification(id)?;
        let mut w = Writer { root: root.to_path_buf(), files: 0, bytes: 0 };
        // The document as verified: copied when it still has those bytes.
        let doc_path = Path::new(&v.document);
        let doc_name =
            doc_path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "document".into());
        let doc_rel = format!("document/{doc_name}");
        let uri = |p: &str| format!("file://{}", rocrate::path_id(p));
        let (document, document_note) = match w.copy(doc_path, &doc_rel) {
            Ok((bytes, sha)) if sha == v.document_sha256 => {
                (CrateFile { id: rocrate::path_id(&doc_rel), bytes, sha256: sha }, None)
            }
            Ok((bytes, sha)) => {
                w.discard(&doc_rel, bytes);
                (
                    CrateFile { id: uri(&v.document), bytes: 0, sha256: v.document_sha256.clone() },
                    Some(format!(
                        "the verified document; changed since (its bytes are now sha256 {sha}), so not copied"
                    )),
                )
            }
            Err(e) => (
                CrateFile { id: uri(&v.document), bytes: 0, sha256: v.document_sha256.clone() },
                Some(format!("the verified document; not readable when exported, so not copied: {e}")),
            ),
        };
        // The notebook it proved (for a failure: the failed notebook beside the draft, and the
        // draft), and the kernel facts the notebook records.
        let notebook_path = match (&v.notebook, &v.draft) {
            (Some(nb), _) => Some(PathBuf::from(nb)),
            (None, Some(d)) => Some(Path::new(d).with_extension("ipynb")),
            (None, None) => None,
        };
        let mut kernel = None;
        let copy_into = |w: &mut Writer, path: &Path, dir: &str| -> Result<Option<CrateFile>, EngineError> {
            if !path.is_file() {
                return Ok(None);
            }
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let rel = format!("{dir}/{name}");
            let (bytes, sha256) = w.copy(path, &rel)?;
            Ok(Some(CrateFile { id: rocrate::path_id(&rel), bytes, sha256 }))
        };
        let notebook = match &notebook_path {
            Some(p) => copy_into(&mut w, p, "notebook")?,
            None => None,
        };
        if let Some(nb) = &notebook {
            let copied = root.join(contained(&nb.id).unwrap_or(Path::new("")));
            if let Ok(doc) = serde_json::from_slice::<Value>(&fs::read(copied).unwrap_or_default()) {
                let c = &doc["metadata"]["cairn"];
                if let Some(env) = c["environment_sha256"].as_str() {
                    kernel = Some(rocrate::KernelFacts {
                        python: c["python"].as_str().unwrap_or("unknown").to_string(),
                        ipykernel: c["ipykernel"].as_str().unwrap_or("unknown").to_string(),
                        environment_sha256: env.to_string(),
                    });
                }
            }
        }
        let draft = match &v.draft {
            Some(d) if notebook_path.as_deref() != Some(Path::new(d)) => copy_into(&mut w, Path::new(d), "draft")?,
            _ => None,
        };
        let report = serde_json::to_vec_pretty(&json!({
            "verification_id": v.id, "title": v.title, "document": v.document,
            "document_sha256": v.document_sha256, "verdict": v.verdict, "error": v.error,
            "parameters": v.parameters, "cells": v.cells,
            "created_at": v.created_at, "finished_at": v.finished_at,
        }))
        .map_err(|e| EngineError::internal(e.to_string()))?;
        w.write(rocrate::VERIFICATION_FILE, &report)?;
        let c = CrateVerification {
            report: CrateFile {
                id: rocrate::VERIFICATION_FILE.into(),
                bytes: report.len() as u64,
                sha256: cairn_core::canonical::sha256_hex(&report),
            },
            record: v,
            document,
            document_note,
            notebook,
            draft,
            kernel,
            cairn_version: env!("CARGO_PKG_VERSION").to_string(),
            published_ms: self.clock.now_ms(),
        };
        let text = serde_json::to_vec_pretty(&rocrate::verification_metadata(&c))
            .map_err(|e| EngineError::internal(e.to_string()))?;
        w.write("ro-crate-metadata.json", &text)?;
        Ok(Written { files: w.files, bytes: w.bytes, artifacts: 0, input_files: 0 })
    }
}

/// The step records and targets of the runs a replay child reuses from, as an export reads them.
#[derive(Default)]
struct Lineage {
    /// By run, each step's `reused_from` and attempt count.
    steps: std::collections::HashMap<RunId, std::collections::HashMap<String, (Option<RunId>, u32)>>,
    targets: std::collections::HashMap<RunId, String>,
}

/// What a crate's writing wrote.
struct Written {
    files: usize,
    bytes: u64,
    artifacts: usize,
    input_files: usize,
}

/// The input files a step recorded reading (a pipeline's bound inputs, in its result).
fn step_inputs(s: &crate::StepView) -> Vec<InputFile> {
    s.record
        .as_ref()
        .and_then(|r| r.result.as_ref())
        .and_then(|r| r.get("inputs"))
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default()
}

/// Removes the staging directories beside `dest` that an export killed midway left (named
/// `<prefix><pid>-<token>`, their process gone); a live export's is left alone.
fn remove_dead_staging(dest: &Path, prefix: &str) {
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let Ok(entries) = fs::read_dir(&parent) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(prefix) else { continue };
        let pid = rest.split('-').next().and_then(|p| p.parse::<i32>().ok());
        let alive = pid.is_some_and(|p| nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), None).is_ok());
        if !alive {
            let _ = fs::remove_dir_all(entry.path()).or_else(|_| fs::remove_file(entry.path()));
        }
    }
}

/// Zips the crate directory `dir` into `to` (deflated, paths relative to the crate root) and
/// returns the zip's size. It is written beside `to` first (as `dir` with `.zip` appended, so a
/// later export removes it as it removes `dir` when a kill left it) and renamed into place once
/// whole, replacing any zip there.
fn zip_dir(dir: &Path, to: &Path) -> Result<u64, EngineError> {
    let mut partial = dir.as_os_str().to_owned();
    partial.push(".zip");
    let partial = PathBuf::from(partial);
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
