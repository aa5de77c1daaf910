//! The workflow registry: validating a workflow folder, copying it content-addressed into the
//! state root, and loading a registered `name@version` ready to run.
//!
//! **Invariant:** a registered `name@version` never changes; re-adding it with other content is
//! a conflict, and older versions stay runnable because their snapshots are never removed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cairn_core::access::{Caller, Permission, Scope};
use cairn_core::canonical::sha256_hex;
use cairn_core::dag::Dag;
use cairn_core::signature::{ToolFile, folder_digest, step_tool_digest, tool_digest};
use cairn_core::store::{RegisterOutcome, WorkflowRecord};
use cairn_core::workflow::{WorkflowError, WorkflowProblems, WorkflowSpec, parse_workflow, tool_path_candidate};
use serde_json::Value;

use crate::{Engine, EngineError};

const MAX_FILES: usize = 10_000;
const MAX_BYTES: u64 = 256 << 20;

/// A registered workflow, loaded and checked, with everything a run needs.
pub struct LoadedWorkflow {
    pub record: WorkflowRecord,
    pub dag: Dag,
    /// Per tool: its digest and its argv with tool files made absolute inside the snapshot.
    pub tools: BTreeMap<String, LoadedTool>,
    pub schema: Option<jsonschema::Validator>,
    /// The input schema's document as registered (what an agent builds an input from).
    pub schema_document: Option<Value>,
}

pub struct LoadedTool {
    pub digest: String,
    pub argv: Vec<String>,
    pub files: Vec<ToolFile>,
}

impl LoadedWorkflow {
    pub fn spec(&self) -> &WorkflowSpec {
        &self.record.spec
    }

    /// A step's tool digest: its tool's, with the step's declared outputs.
    pub fn step_digest(&self, step: &cairn_core::workflow::StepDef) -> String {
        let tool = self.tools.get(&step.tool).map(|t| t.digest.as_str()).unwrap_or_default();
        step_tool_digest(tool, &self.spec().outputs_of(step))
    }
}

fn wf_err(file: &str, field: &str, message: String) -> EngineError {
    EngineError::Workflow(wf_problem(file, field, message).into())
}

fn wf_problem(file: &str, field: &str, message: String) -> WorkflowError {
    WorkflowError { file: file.into(), line: None, step: None, field: Some(field.into()), message }
}

fn folder_err(path: &Path, message: impl Into<String>) -> EngineError {
    EngineError::WorkflowFolder { path: path.display().to_string(), message: message.into() }
}

/// Every regular file below `dir` (relative, `/`-separated, sorted), skipping dot-entries and
/// `__pycache__`: what a workflow folder holds, at registration and in its snapshot. A symlink
/// (or anything but files and folders) is refused: the snapshot must not depend on anything
/// outside.
fn list_files(dir: &Path) -> Result<Vec<String>, EngineError> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    let mut bytes = 0u64;
    while let Some(rel) = stack.pop() {
        let abs = dir.join(&rel);
        let entries = std::fs::read_dir(&abs).map_err(|e| EngineError::io(&abs, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| EngineError::io(&abs, e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                return Err(folder_err(&entry.path(), "file names in a workflow folder must be UTF-8"));
            };
            if name.starts_with('.') || name == "__pycache__" {
                continue;
            }
            let rel_child = rel.join(name);
            let ft = entry.file_type().map_err(|e| EngineError::io(entry.path(), e))?;
            if ft.is_symlink() {
                return Err(folder_err(
                    &entry.path(),
                    "the workflow folder contains a symlink; copy the file in instead, so the registered snapshot is self-contained",
                ));
            } else if ft.is_dir() {
                stack.push(rel_child);
            } else if ft.is_file() {
                bytes += entry.metadata().map_err(|e| EngineError::io(entry.path(), e))?.len();
                out.push(rel_child.to_string_lossy().into_owned());
                if out.len() > MAX_FILES || bytes > MAX_BYTES {
                    return Err(folder_err(
                        dir,
                        format!(
                            "the workflow folder is larger than {MAX_FILES} files or {} MiB; keep data out of it and pass it as input",
                            MAX_BYTES >> 20
                        ),
                    ));
                }
            } else {
                return Err(folder_err(&entry.path(), "a workflow folder holds only files and folders"));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Every file of a workflow folder (as [`list_files`] lists it) with its SHA-256, and the
/// folder's digest.
pub(crate) fn hash_folder(dir: &Path) -> Result<(Vec<ToolFile>, String), EngineError> {
    let mut files = Vec::new();
    for rel in list_files(dir)? {
        let abs = dir.join(&rel);
        let sha256 = cairn_exec::artifacts::hash_file(&abs).map_err(|e| EngineError::io(&abs, e))?.1;
        files.push(ToolFile { path: rel, sha256 });
    }
    let digest = folder_digest(&files);
    Ok((files, digest))
}

/// A workflow folder's definition: a pipeline's tool files are every other file of the folder, so
/// a new version that only changes the definition (a step added after the pipeline) reuses it.
const DEFINITION_FILE: &str = "workflow.toml";

/// The tool files of each tool (argv elements naming files in the folder) and their hashes.
/// Every tool argument that names a missing file is a problem; all are reported.
fn tool_files(
    spec: &WorkflowSpec,
    dir: &Path,
    file_label: &str,
    files: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, Vec<ToolFile>>, Vec<WorkflowError>> {
    let mut out = BTreeMap::new();
    let mut problems = Vec::new();
    for (name, tool) in &spec.tools {
        let mut found = Vec::new();
        if !tool.kind.is_process() {
            // A pipeline controller may read any file of the pipeline source: all are its files,
            // but Cairn's own definition of the workflow (its steps' arguments sign on their own).
            found = files
                .iter()
                .filter(|(p, _)| p.as_str() != DEFINITION_FILE)
                .map(|(p, sha)| ToolFile { path: p.clone(), sha256: sha.clone() })
                .collect();
        }
        for (i, arg) in tool.command.iter().enumerate() {
            if !tool_path_candidate(arg) {
                continue;
            }
            let normalized = arg.trim_start_matches("./");
            if let Some(sha) = files.get(normalized) {
                found.push(ToolFile { path: normalized.to_string(), sha256: sha.clone() });
            } else if arg.contains('/') && (i == 0 || !dir.join(normalized).exists()) {
                problems.push(wf_problem(
                    file_label,
                    &format!("tools.{name}.command"),
                    format!(
                        "`{arg}` is not a file in the workflow folder {}; fix the path (relative to the folder) or add the file",
                        dir.display()
                    ),
                ));
            }
        }
        out.insert(name.clone(), found);
    }
    if problems.is_empty() { Ok(out) } else { Err(problems) }
}

fn compile_schema(schema: &Value, label: &str) -> Result<jsonschema::Validator, EngineError> {
    jsonschema::draft202012::new(schema).map_err(|e| {
        wf_err(
            label,
            "workflow.input_schema",
            format!("the input schema is not valid JSON Schema (draft 2020-12): {e}"),
        )
    })
}

fn read_schema(dir: &Path, rel: &str, label: &str) -> Result<(Value, jsonschema::Validator), EngineError> {
    if !tool_path_candidate(rel) {
        return Err(wf_err(
            label,
            "workflow.input_schema",
            format!("`{rel}` must be a path relative to the workflow folder"),
        ));
    }
    let path = dir.join(rel);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| wf_err(label, "workflow.input_schema", format!("cannot read {}: {e}", path.display())))?;
    let schema: Value = serde_json::from_str(&text)
        .map_err(|e| wf_err(label, "workflow.input_schema", format!("{} is not JSON: {e}", path.display())))?;
    let validator = compile_schema(&schema, &path.display().to_string())?;
    Ok((schema, validator))
}

/// A workflow folder, validated: its spec, its canonical path, its files with their hashes and
/// its digest.
pub struct InspectedFolder {
    pub spec: WorkflowSpec,
    pub dir: PathBuf,
    pub files: Vec<ToolFile>,
    pub digest: String,
}

/// Validates a workflow folder (or its `workflow.toml`) without registering it.
pub fn inspect_folder(path: &Path) -> Result<InspectedFolder, EngineError> {
    let dir =
        if path.is_file() { path.parent().map(Path::to_path_buf).unwrap_or_default() } else { path.to_path_buf() };
    let dir = dir.canonicalize().map_err(|e| {
        folder_err(
            path,
            format!("cannot open the workflow folder ({e}); give the path of a folder holding a workflow.toml"),
        )
    })?;
    let toml_path = dir.join(DEFINITION_FILE);
    let bytes = std::fs::read(&toml_path).map_err(|e| {
        folder_err(&toml_path, format!("cannot read the workflow file ({e}); a workflow folder holds a workflow.toml"))
    })?;
    let text = String::from_utf8(bytes).map_err(|_| folder_err(&toml_path, "the workflow file is not UTF-8 text"))?;
    let label = toml_path.display().to_string();
    let spec = parse_workflow(&text, &label)?;
    let (files, digest) = hash_folder(&dir)?;
    let hashes: BTreeMap<String, String> = files.iter().map(|f| (f.path.clone(), f.sha256.clone())).collect();
    let mut problems = tool_files(&spec, &dir, &label, &hashes).err().unwrap_or_default();
    if let Some(rel) = &spec.input_schema {
        match read_schema(&dir, rel, &label) {
            Ok(_) => {}
            Err(EngineError::Workflow(WorkflowProblems(more))) => problems.extend(more),
            Err(other) => return Err(other),
        }
    }
    if !problems.is_empty() {
        return Err(EngineError::Workflow(WorkflowProblems(problems)));
    }
    Ok(InspectedFolder { spec, dir, files, digest })
}

/// What `workflow add` did.
pub struct Added {
    pub record: WorkflowRecord,
    pub newly_registered: bool,
}

fn version_conflict(name: &str, version: &str, existing: &str, new: &str) -> EngineError {
    EngineError::WorkflowVersionConflict {
        name: name.into(),
        version: version.into(),
        existing: existing.into(),
        new: new.into(),
    }
}

/// Parses `NAME[@VERSION]`.
pub fn parse_reference(reference: &str) -> Result<(&str, Option<&str>), EngineError> {
    let (name, version) = match reference.split_once('@') {
        Some((n, v)) => (n, Some(v)),
        None => (reference, None),
    };
    if name.is_empty() || version.is_some_and(str::is_empty) {
        return Err(EngineError::InvalidReference { given: reference.to_string() });
    }
    Ok((name, version))
}

impl Engine {
    /// Registers a workflow folder (or its `workflow.toml`): validated, copied content-addressed
    /// into the state root, recorded. Re-adding the same content is a no-op; other content under
    /// a registered `name@version` is refused before anything is written.
    ///
    /// Refused, before anything is copied, unless `caller` may register this workflow.
    pub fn add_workflow(&self, caller: &Caller, path: &Path) -> Result<Added, EngineError> {
        let InspectedFolder { spec, dir, files, digest } = inspect_folder(path)?;
        let resource = Scope { workflow: Some(spec.name.clone()), target: None };
        self.authorize(caller, Permission::Register, &resource)?;
        if let Some(existing) = self.store.workflow(&spec.name, Some(&spec.version))?
            && existing.digest != digest
        {
            return Err(version_conflict(&spec.name, &spec.version, &existing.digest, &digest));
        }
        let registry_dir = self.state.registry();
        let snapshot = registry_dir.join(&digest);
        if !snapshot.join(DEFINITION_FILE).exists() {
            // Copy into a private temporary folder, then rename: a crash never leaves half a snapshot.
            let tmp = registry_dir.join(format!(".tmp-{digest}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&tmp);
            for f in &files {
                let to = tmp.join(&f.path);
                if let Some(parent) = to.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| EngineError::io(parent, e))?;
                }
                std::fs::copy(dir.join(&f.path), &to).map_err(|e| EngineError::io(&to, e))?;
            }
            match std::fs::rename(&tmp, &snapshot) {
                Ok(()) => {}
                // Another process registered the same content first: theirs is identical.
                Err(_) if snapshot.join(DEFINITION_FILE).exists() => {
                    let _ = std::fs::remove_dir_all(&tmp);
                }
                Err(e) => return Err(EngineError::io(&snapshot, e)),
            }
        }
        let record = WorkflowRecord {
            name: spec.name.clone(),
            version: spec.version.clone(),
            digest: digest.clone(),
            path: snapshot.display().to_string(),
            spec,
            registered_at: self.clock.now_ms(),
        };
        match self.store.register_workflow(&record)? {
            RegisterOutcome::Inserted => {
                let detail = serde_json::json!({"version": record.version, "digest": record.digest});
                self.record(caller, "workflow.registered", &record.name, detail);
                Ok(Added { record, newly_registered: true })
            }
            RegisterOutcome::AlreadyRegistered => Ok(Added { record, newly_registered: false }),
            RegisterOutcome::Conflict { existing_digest } => {
                Err(version_conflict(&record.name, &record.version, &existing_digest, &digest))
            }
        }
    }

    /// Every registered workflow version, by name then version.
    pub fn workflows(&self) -> Result<Vec<WorkflowRecord>, EngineError> {
        Ok(self.store.workflows()?)
    }

    /// A registered workflow's record: by name and exact version, or its highest version.
    pub(crate) fn workflow_record(&self, name: &str, version: Option<&str>) -> Result<WorkflowRecord, EngineError> {
        let mut record = self.store.workflow(name, version)?.ok_or_else(|| EngineError::WorkflowNotFound {
            name: name.to_string(),
            version: version.map(String::from),
        })?;
        // A registry shared by several state roots records where the first one keeps the
        // snapshot; this state root's own copy (content-addressed: the same digest, the same
        // bytes) is the one its runs use, and another host's path is not there at all.
        let local = self.state.registry().join(&record.digest);
        if local.join(DEFINITION_FILE).is_file() {
            record.path = local.display().to_string();
        } else if !Path::new(&record.path).join(DEFINITION_FILE).is_file() {
            return Err(folder_err(
                Path::new(&record.path),
                format!(
                    "{}@{} is registered (digest {}…) but its files are not on this host; register the same folder here \
                     too, `cairn workflow add FOLDER` (the same content has the same digest), then try again",
                    record.name,
                    record.version,
                    cairn_core::canonical::short_hash(&record.digest)
                ),
            ));
        }
        Ok(record)
    }

    /// Loads a registered workflow (`NAME[@VERSION]`), hashing its tool files as they are now in
    /// the snapshot.
    pub fn load_workflow(&self, reference: &str) -> Result<LoadedWorkflow, EngineError> {
        let (name, version) = parse_reference(reference)?;
        load_record(self.workflow_record(name, version)?)
    }
}

pub fn load_record(record: WorkflowRecord) -> Result<LoadedWorkflow, EngineError> {
    let dir = PathBuf::from(&record.path);
    let label = dir.join(DEFINITION_FILE).display().to_string();
    let dag = record.spec.dag().map_err(|e| EngineError::internal(format!("{label}: {e}")))?;
    let mut tools = BTreeMap::new();
    for (name, tool) in &record.spec.tools {
        let mut files = Vec::new();
        if !tool.kind.is_process() {
            files = hash_folder(&dir)?.0;
            files.retain(|f| f.path != DEFINITION_FILE);
        }
        let mut argv = Vec::with_capacity(tool.command.len());
        for arg in &tool.command {
            let rel = arg.trim_start_matches("./");
            let abs = dir.join(rel);
            if tool_path_candidate(arg) && abs.is_file() {
                let bytes = std::fs::read(&abs).map_err(|e| EngineError::io(&abs, e))?;
                files.push(ToolFile { path: rel.to_string(), sha256: sha256_hex(&bytes) });
                argv.push(abs.display().to_string());
            } else {
                argv.push(arg.clone());
            }
        }
        let digest =
            tool_digest(tool, &files).map_err(|e| EngineError::internal(format!("{label}: tools.{name}: {e}")))?;
        tools.insert(name.clone(), LoadedTool { digest, argv, files });
    }
    let (schema_document, schema) = match &record.spec.input_schema {
        Some(rel) => {
            let (document, validator) = read_schema(&dir, rel, &label)?;
            (Some(document), Some(validator))
        }
        None => (None, None),
    };
    Ok(LoadedWorkflow { record, dag, tools, schema, schema_document })
}
