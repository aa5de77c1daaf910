//! Registered workflows: the list, one version in detail, and what registering one did.

use cairn_core::store::WorkflowRecord;
use cairn_core::workflow::WorkflowError;
use cairn_engine::registry::{Added, LoadedWorkflow};
use rmcp::schemars::{self, JsonSchema};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;

use super::time;

/// One registered workflow version.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct WorkflowSummary {
    pub name: String,
    pub version: String,
    pub digest: String,
    pub description: String,
    pub steps: usize,
    pub registered_at: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct WorkflowList {
    pub workflows: Vec<WorkflowSummary>,
}

impl WorkflowList {
    pub fn from_records(all: &[WorkflowRecord]) -> WorkflowList {
        WorkflowList {
            workflows: all
                .iter()
                .map(|w| WorkflowSummary {
                    name: w.name.clone(),
                    version: w.version.clone(),
                    digest: w.digest.clone(),
                    description: w.spec.description.clone(),
                    steps: w.spec.steps.len(),
                    registered_at: time(w.registered_at),
                })
                .collect(),
        }
    }
}

/// One workflow version: its steps in execution order, tools with their digests, validator
/// rules and input schema.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct WorkflowDetail {
    pub name: String,
    pub version: String,
    pub description: String,
    pub digest: String,
    /// The input schema's path in the workflow folder.
    pub input_schema: Option<String>,
    /// The input schema itself (JSON Schema 2020-12): what a run's input must satisfy.
    #[schema(value_type = Option<Object>)]
    pub input_schema_document: Option<Value>,
    /// Step ids in execution order.
    pub order: Vec<String>,
    /// `[{id, tool, needs, args, max_attempts, retry_on, outputs}]`; `outputs` are the files the
    /// step declares (its tool's and its own), `[{name, path, folder}]`, relative to its directory.
    #[schema(value_type = Vec<Object>)]
    pub steps: Vec<Value>,
    /// `[{name, command, timeout_secs, version, env, digest, files}]`.
    #[schema(value_type = Vec<Object>)]
    pub tools: Vec<Value>,
    #[schema(value_type = Vec<Object>)]
    pub rules: Value,
}

impl WorkflowDetail {
    pub fn from_loaded(wf: &LoadedWorkflow) -> WorkflowDetail {
        let spec = wf.spec();
        WorkflowDetail {
            name: spec.name.clone(),
            version: spec.version.clone(),
            description: spec.description.clone(),
            digest: wf.record.digest.clone(),
            input_schema: spec.input_schema.clone(),
            input_schema_document: wf.schema_document.clone(),
            order: wf.dag.order().iter().map(|&i| wf.dag.id(i).to_string()).collect(),
            steps: spec
                .steps
                .iter()
                .map(|s| {
                    json!({
                        "id": s.id, "tool": s.tool, "needs": s.needs, "args": s.args,
                        "max_attempts": s.max_attempts, "retry_on": s.retry_on,
                        "outputs": spec.outputs_of(s).iter()
                            .map(|d| json!({"name": d.name, "path": d.path, "folder": d.folder}))
                            .collect::<Vec<_>>(),
                    })
                })
                .collect(),
            tools: wf
                .tools
                .iter()
                .map(|(name, t)| {
                    let def = &spec.tools[name];
                    json!({"name": name, "command": def.command, "timeout_secs": def.timeout_secs, "version": def.version,
                           "env": def.env, "digest": t.digest, "files": t.files})
                })
                .collect(),
            rules: super::to_value(&spec.rules),
        }
    }
}

/// One problem of a rejected workflow, located as well as the checks could: the file, the line
/// in it, the step and the field (`tools.NAME.command`, `workflow.version`, …).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WorkflowProblem {
    pub file: String,
    pub line: Option<usize>,
    pub step: Option<String>,
    pub field: Option<String>,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl From<&WorkflowError> for WorkflowProblem {
    fn from(e: &WorkflowError) -> WorkflowProblem {
        WorkflowProblem {
            file: e.file.clone(),
            line: e.line,
            step: e.step.clone(),
            field: e.field.clone(),
            message: e.message.clone(),
        }
    }
}

/// `POST /workflows`: register the workflow folder at `path` on the daemon's host.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddWorkflow {
    /// The absolute path of a workflow folder (holding a `workflow.toml`; for a Snakemake or
    /// Nextflow pipeline, the pipeline's folder with one beside its source), or of its
    /// `workflow.toml`, on the daemon's host.
    pub path: String,
}

/// What `cairn workflow add` did.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct WorkflowAdded {
    pub name: String,
    pub version: String,
    pub digest: String,
    /// False when the same content was registered already.
    pub registered: bool,
    pub steps: usize,
}

impl WorkflowAdded {
    pub fn from_added(a: &Added) -> WorkflowAdded {
        let r = &a.record;
        WorkflowAdded {
            name: r.name.clone(),
            version: r.version.clone(),
            digest: r.digest.clone(),
            registered: a.newly_registered,
            steps: r.spec.steps.len(),
        }
    }
}
