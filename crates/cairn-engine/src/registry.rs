//! The workflow registry: validating a workflow folder, copying it content-addressed into the
//! state root, and loading a registered `name@version` ready to run.
//!
//! **Invariant:** a registered `name@version` never changes; re-adding it with other content is
//! a conflict, and older versions stay runnable because their snapshots are never removed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cairn_core::canonical::{hash_json, sha256_hex};
use cairn_core::dag::Dag;
use cairn_core::signature::{ToolFile, tool_digest};
use cairn_core::store::{RegisterOutcome, RunStore, WorkflowRecord};
use cairn_core::workflow::{WorkflowError, WorkflowSpec, parse_workflow, tool_path_candidate};
use serde_json::{Value, json};

use crate::EngineError;

const MAX_FILES: usize = 10_000;
const MAX_BYTES: u64 = 256 << 20;

/// A registered workflow, loaded and checked, with everything a run needs.
pub struct LoadedWorkflow {
    pub record: WorkflowRecord,
    pub dag: Dag,
    /// Per tool: its digest and its argv with tool files made absolute inside the snapshot.
    pub tools: BTreeMap<String, LoadedTool>,
    pub schema: Option<jsonschema::Validator>,
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
}

fn wf_err(file: &str, field: &str, message: String) -> EngineError {
    EngineError::Workflow(WorkflowError {
        file: file.into(),
        line: None,
        step: None,
        field: Some(field.into()),
        message,
    })
}

/// Every regular file below `dir` (relative, `/`-separated, sorted), skipping dot-entries and
/// `__pycache__`. A symlink is refused: the snapshot must not depend on anything outside.
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
                return Err(EngineError::Invalid(format!(
                    "{}: file names in a workflow folder must be UTF-8",
                    entry.path().display()
                )));
            };
            if name.starts_with('.') || name == "__pycache__" {
                continue;
            }
            let rel_child = rel.join(name);
            let ft = entry.file_type().map_err(|e| EngineError::io(entry.path(), e))?;
            if ft.is_symlink() {
                return Err(EngineError::Invalid(format!(
                    "{}: the workflow folder contains a symlink; copy the file in instead, so the registered snapshot is self-contained",
                    entry.path().display()
                )));
            } else if ft.is_dir() {
                stack.push(rel_child);
            } else if ft.is_file() {
                bytes += entry.metadata().map_err(|e| EngineError::io(entry.path(), e))?.len();
                out.push(rel_child.to_string_lossy().into_owned());
                if out.len() > MAX_FILES || bytes > MAX_BYTES {
                    return Err(EngineError::Invalid(format!(
                        "{}: the workflow folder is larger than {MAX_FILES} files or {} MiB; keep data out of it and pass it as input",
                        dir.display(),
                        MAX_BYTES >> 20
                    )));
                }
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The tool files of each tool (argv elements naming files in the folder) and their hashes.
fn tool_files(
    spec: &WorkflowSpec,
    dir: &Path,
    file_label: &str,
    files: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, Vec<ToolFile>>, EngineError> {
    let mut out = BTreeMap::new();
    for (name, tool) in &spec.tools {
        let mut found = Vec::new();
        if !tool.kind.is_process() {
            // A pipeline controller may read any file of the pipeline source: all are its files.
            found = files.iter().map(|(p, sha)| ToolFile { path: p.clone(), sha256: sha.clone() }).collect();
        }
        for (i, arg) in tool.command.iter().enumerate() {
            if !tool_path_candidate(arg) {
                continue;
            }
            let normalized = arg.trim_start_matches("./");
            if let Some(sha) = files.get(normalized) {
                found.push(ToolFile { path: normalized.to_string(), sha256: sha.clone() });
            } else if arg.contains('/') && (i == 0 || !dir.join(normalized).exists()) {
                return Err(wf_err(
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
    Ok(out)
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

fn read_schema(dir: &Path, rel: &str, label: &str) -> Result<jsonschema::Validator, EngineError> {
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
    compile_schema(&schema, &path.display().to_string())
}

/// Validates a workflow folder without registering it.
pub fn inspect_folder(path: &Path) -> Result<(WorkflowSpec, PathBuf, Vec<String>, String), EngineError> {
    let dir =
        if path.is_file() { path.parent().map(Path::to_path_buf).unwrap_or_default() } else { path.to_path_buf() };
    let dir = dir.canonicalize().map_err(|e| EngineError::io(path, e))?;
    let toml_path = dir.join("workflow.toml");
    let label = toml_path.display().to_string();
    let bytes = std::fs::read(&toml_path).map_err(|e| {
        EngineError::Invalid(format!(
            "{label}: cannot read the workflow file ({e}); a workflow folder holds a workflow.toml"
        ))
    })?;
    let text = String::from_utf8(bytes)
        .map_err(|_| EngineError::Invalid(format!("{label}: the workflow file is not UTF-8 text")))?;
    let spec = parse_workflow(&text, &label)?;
    let files = list_files(&dir)?;
    let mut hashes = BTreeMap::new();
    for f in &files {
        let p = dir.join(f);
        hashes.insert(f.clone(), sha256_hex(&std::fs::read(&p).map_err(|e| EngineError::io(&p, e))?));
    }
    tool_files(&spec, &dir, &label, &hashes)?;
    if let Some(rel) = &spec.input_schema {
        read_schema(&dir, rel, &label)?;
    }
    let digest =
        hash_json(&json!({"format": 1, "files": hashes})).map_err(|e| EngineError::Invalid(format!("{label}: {e}")))?;
    Ok((spec, dir, files, digest))
}

/// What `workflow add` did.
pub struct Added {
    pub record: WorkflowRecord,
    pub newly_registered: bool,
}

/// Registers a workflow folder (or its `workflow.toml`).
pub fn add_workflow(store: &dyn RunStore, registry_dir: &Path, path: &Path, now_ms: i64) -> Result<Added, EngineError> {
    let (spec, dir, files, digest) = inspect_folder(path)?;
    // Refuse a changed version before anything is written, so a refusal leaves nothing behind.
    if let Some(existing) = store.workflow(&spec.name, Some(&spec.version))?
        && existing.digest != digest
    {
        return Err(conflict(&spec.name, &spec.version, &existing.digest, &digest));
    }
    let snapshot = registry_dir.join(&digest);
    if !snapshot.join("workflow.toml").exists() {
        // Copy into a private temporary folder, then rename: a crash never leaves half a snapshot.
        let tmp = registry_dir.join(format!(".tmp-{digest}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        for f in &files {
            let to = tmp.join(f);
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent).map_err(|e| EngineError::io(parent, e))?;
            }
            std::fs::copy(dir.join(f), &to).map_err(|e| EngineError::io(&to, e))?;
        }
        match std::fs::rename(&tmp, &snapshot) {
            Ok(()) => {}
            // Another process registered the same content first: theirs is identical.
            Err(_) if snapshot.join("workflow.toml").exists() => {
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
        registered_at: now_ms,
    };
    match store.register_workflow(&record)? {
        RegisterOutcome::Inserted => Ok(Added { record, newly_registered: true }),
        RegisterOutcome::AlreadyRegistered => Ok(Added { record, newly_registered: false }),
        RegisterOutcome::Conflict { existing_digest } => {
            Err(conflict(&record.name, &record.version, &existing_digest, &digest))
        }
    }
}

fn conflict(name: &str, version: &str, existing: &str, new: &str) -> EngineError {
    EngineError::Conflict(format!(
        "{name}@{version} is already registered with other content (digest {}…, this folder {}…); a registered version never changes, so bump `version` in workflow.toml",
        &existing[..12.min(existing.len())],
        &new[..12.min(new.len())]
    ))
}

/// Parses `NAME[@VERSION]`.
pub fn parse_reference(reference: &str) -> Result<(&str, Option<&str>), EngineError> {
    let (name, version) = match reference.split_once('@') {
        Some((n, v)) => (n, Some(v)),
        None => (reference, None),
    };
    if name.is_empty() || version.is_some_and(str::is_empty) {
        return Err(EngineError::Invalid(format!(
            "`{reference}` is not a workflow reference; write NAME or NAME@VERSION"
        )));
    }
    Ok((name, version))
}

/// Loads a registered workflow, hashing its tool files as they are now in the snapshot.
pub fn load_workflow(store: &dyn RunStore, reference: &str) -> Result<LoadedWorkflow, EngineError> {
    let (name, version) = parse_reference(reference)?;
    let record = store.workflow(name, version)?.ok_or_else(|| {
        EngineError::NotFound(match version {
            Some(v) => format!("workflow {name}@{v} is not registered; see `cairn workflow list`, or add it with `cairn workflow add PATH`"),
            None => format!("workflow `{name}` is not registered; add it with `cairn workflow add PATH`"),
        })
    })?;
    load_record(record)
}

pub fn load_record(record: WorkflowRecord) -> Result<LoadedWorkflow, EngineError> {
    let dir = PathBuf::from(&record.path);
    let label = dir.join("workflow.toml").display().to_string();
    let dag = record.spec.dag().map_err(|e| EngineError::Invalid(format!("{label}: {e}")))?;
    let mut tools = BTreeMap::new();
    for (name, tool) in &record.spec.tools {
        let mut files = Vec::new();
        if !tool.kind.is_process() {
            // A pipeline controller may read any file of the pipeline source: all are its files.
            for rel in list_files(&dir)? {
                let abs = dir.join(&rel);
                let bytes = std::fs::read(&abs).map_err(|e| EngineError::io(&abs, e))?;
                files.push(ToolFile { path: rel, sha256: sha256_hex(&bytes) });
            }
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
            tool_digest(tool, &files).map_err(|e| EngineError::Invalid(format!("{label}: tools.{name}: {e}")))?;
        tools.insert(name.clone(), LoadedTool { digest, argv, files });
    }
    let schema = match &record.spec.input_schema {
        Some(rel) => Some(read_schema(&dir, rel, &label)?),
        None => None,
    };
    Ok(LoadedWorkflow { record, dag, tools, schema })
}
