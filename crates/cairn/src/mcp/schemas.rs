//! Every tool's `outputSchema`: the JSON Schema of its structured content. A tool that answers
//! with an API response has that response's schema, the one the API's OpenAPI document gives it
//! (one source for both surfaces: the wire type's `ToSchema`, and those it refers to as `$defs`,
//! each tool's holding only those it reaches); a tool that shapes its own answer (a plan for the
//! person, an overview) has one written here. A client may validate each result against it (the Python SDK does).

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::JsonObject;
use serde_json::{Value, json};
use utoipa::ToSchema;

use crate::wire;

/// The schemas of the wire types tools answer with, and of every type they refer to, by name,
/// with their references rewritten to `#/$defs/NAME`.
fn components() -> &'static BTreeMap<String, Value> {
    static DEFS: OnceLock<BTreeMap<String, Value>> = OnceLock::new();
    DEFS.get_or_init(|| {
        let mut all: Vec<(String, utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>)> = Vec::new();
        fn add<T: ToSchema>(all: &mut Vec<(String, utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>)>) {
            all.push((T::name().into_owned(), T::schema()));
            T::schemas(all);
        }
        add::<wire::WorkflowList>(&mut all);
        add::<wire::WorkflowAdded>(&mut all);
        add::<wire::WorkflowDetail>(&mut all);
        add::<wire::RunResult>(&mut all);
        add::<wire::RunLayers>(&mut all);
        add::<wire::RunList>(&mut all);
        add::<wire::Explanation>(&mut all);
        add::<wire::PipelineJobs>(&mut all);
        add::<wire::TraceResult>(&mut all);
        add::<wire::StepDetail>(&mut all);
        add::<wire::ArtifactSlice>(&mut all);
        add::<wire::ExportResult>(&mut all);
        add::<wire::StepLog>(&mut all);
        add::<wire::VerifyResult>(&mut all);
        add::<wire::Job>(&mut all);
        add::<wire::JobList>(&mut all);
        add::<wire::Interrupted>(&mut all);
        add::<wire::Restarted>(&mut all);
        add::<wire::DocList>(&mut all);
        add::<wire::Doc>(&mut all);
        add::<wire::DocSearchResult>(&mut all);
        add::<wire::DocSaved>(&mut all);
        let map: BTreeMap<String, Value> =
            all.into_iter().map(|(name, schema)| (name, serde_json::to_value(schema).unwrap_or_default())).collect();
        let text = serde_json::to_string(&map).unwrap_or_default().replace("#/components/schemas/", "#/$defs/");
        serde_json::from_str(&text).unwrap_or_default()
    })
}

/// Every `$defs` name `v` refers to, transitively.
fn reached(v: &Value, defs: &BTreeMap<String, Value>, out: &mut BTreeMap<String, Value>) {
    match v {
        Value::Object(m) => {
            if let Some(name) = m.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix("#/$defs/"))
                && !out.contains_key(name)
                && let Some(def) = defs.get(name)
            {
                out.insert(name.to_string(), def.clone());
                reached(def, defs, out);
            }
            m.values().for_each(|x| reached(x, defs, out));
        }
        Value::Array(a) => a.iter().for_each(|x| reached(x, defs, out)),
        _ => {}
    }
}

/// An object schema (`root`), with the `$defs` it reaches.
fn with_defs(mut root: Value) -> Arc<JsonObject> {
    let mut defs = BTreeMap::new();
    reached(&root, components(), &mut defs);
    if !defs.is_empty() {
        root["$defs"] = json!(defs);
    }
    Arc::new(root.as_object().cloned().unwrap_or_default())
}

/// The schema of the API response `component`.
fn api(component: &str) -> Arc<JsonObject> {
    with_defs(json!({"type": "object", "allOf": [{"$ref": format!("#/$defs/{component}")}]}))
}

/// An object of the given properties (each a schema), those in `required` always present.
fn object(description: &str, properties: Value, required: &[&str]) -> Arc<JsonObject> {
    with_defs(json!({"type": "object", "description": description, "properties": properties, "required": required}))
}

/// A plan as `plan_run` and `plan_replay` show it to the person.
fn plan_view(replay: bool) -> Arc<JsonObject> {
    let mut properties = json!({
        "plan_name": {"type": "string"}, "plan_id": {"type": "string"},
        "plan_checksum": {"type": "string", "description": "SHA-256 of the canonical plan"},
        "summary": {"type": "string", "description": "What to show the person before execute_plan"},
        "workflow": {"type": "string"}, "version": {"type": "string"}, "target": {"type": "string"},
        "run_dir": {"type": "string"},
        "commands": {"type": "array", "items": {"type": "object"}},
        "inputs": {"type": "array", "items": {"type": "object", "properties": {"path": {"type": "string"}, "sha256": {"type": "string"}}}},
        "effects": {"type": "array", "items": {"type": "object"}},
        "readiness": {},
    });
    let mut required = vec!["plan_name", "plan_id", "plan_checksum", "summary", "commands", "inputs", "effects"];
    if replay {
        properties["decisions"] = json!({"type": "array", "items": {"type": "object"}});
        properties["source_run_id"] = json!({"type": "string"});
        properties["jobs"] = json!({"type": "array", "description": "Each pipeline step's predicted jobs, by rule and reason", "items": {"type": "object"}});
        required.extend(["decisions", "source_run_id"]);
    }
    object("A stored, immutable plan; nothing has been created", properties, &required)
}

/// A server's tools and their output schemas; a tool not named keeps none (a test checks that
/// every tool has one).
fn table(server: super::Kind) -> Vec<(&'static str, Arc<JsonObject>)> {
    let any = |d: &str| object(d, json!({}), &[]);
    match server {
        super::Kind::Workbench => vec![
            ("list_workflows", api("WorkflowList")),
            ("add_workflow", api("WorkflowAdded")),
            ("describe_workflow", api("WorkflowDetail")),
            ("plan_run", plan_view(false)),
            ("plan_replay", plan_view(true)),
            ("execute_plan", api("RunResult")),
            ("list_runs", api("RunList")),
            ("get_run", api("RunResult")),
            ("get_run_layers", api("RunLayers")),
            ("explain_step", api("Explanation")),
            ("get_pipeline_jobs", api("PipelineJobs")),
            ("trace_artifact", api("TraceResult")),
            ("get_step_result", api("StepDetail")),
            ("read_artifact", api("ArtifactSlice")),
            ("export_run", api("ExportResult")),
            ("tail_log", api("StepLog")),
            ("cancel_run", api("RunResult")),
            (
                "verify_workflow",
                with_defs(json!({"type": "object", "anyOf": [
                    {"$ref": "#/$defs/VerifyResult"},
                    {"type": "object", "description": "Still running: follow it with poll_job",
                     "properties": {"verification_id": {"type": "string"}, "status": {"const": "running"}, "poll": {"type": "string"}},
                     "required": ["verification_id", "status"]},
                ]})),
            ),
            ("execute_code", api("Job")),
            ("poll_job", api("Job")),
            ("list_jobs", api("JobList")),
            ("interrupt_kernel", api("Interrupted")),
            ("restart_kernel", api("Restarted")),
            ("list_docs", api("DocList")),
            ("read_doc", api("Doc")),
            ("search_docs", api("DocSearchResult")),
            ("save_doc", api("DocSaved")),
        ],
        super::Kind::Compute => vec![
            (
                "list_targets",
                object("The targets", json!({"targets": {"type": "array", "items": {"type": "object"}}}), &["targets"]),
            ),
            ("add_target", any("The target as registered")),
            ("probe_target", any("What the target's machine has (its facts), as last probed")),
            ("check_readiness", any("Whether a run_dir on the target is ready, and why not")),
        ],
        super::Kind::App => vec![
            (
                "runs_overview",
                object("The newest runs", json!({"runs": {"type": "array", "items": {"type": "object"}}}), &["runs"]),
            ),
            (
                "run_detail",
                object(
                    "One run, long texts cut, with its latest events",
                    json!({"run_id": {"type": "string"}, "status": {"type": "string"}, "steps": {"type": "array"}, "events": {"type": "array"}}),
                    &["run_id", "status", "steps"],
                ),
            ),
            ("read_artifact", api("ArtifactSlice")),
            ("export_run", api("ExportResult")),
            (
                "workflows_overview",
                object(
                    "The registered workflows",
                    json!({"workflows": {"type": "array", "items": {"type": "object"}}}),
                    &["workflows"],
                ),
            ),
            (
                "targets_overview",
                object("The targets", json!({"targets": {"type": "array", "items": {"type": "object"}}}), &["targets"]),
            ),
            (
                "docs_overview",
                object(
                    "The procedure docs",
                    json!({"docs": {"type": "array", "items": {"type": "object"}}}),
                    &["docs"],
                ),
            ),
        ],
    }
}

/// Sets each tool's output schema in `router`; the schemas are built once per server kind: the
/// daemon makes a server for every HTTP session.
pub fn attach<S>(server: super::Kind, mut router: ToolRouter<S>) -> ToolRouter<S> {
    type Table = Vec<(&'static str, Arc<JsonObject>)>;
    static TABLES: [OnceLock<Table>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let slot = match server {
        super::Kind::Workbench => 0,
        super::Kind::Compute => 1,
        super::Kind::App => 2,
    };
    for (name, schema) in TABLES[slot].get_or_init(|| table(server)) {
        if let Some(route) = router.map.get_mut(*name) {
            route.attr.output_schema = Some(schema.clone());
        }
    }
    router
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `$ref` of every tool's output schema resolves within its own `$defs`: a component
    /// the table names but the schema list leaves out would be a schema no client can read.
    #[test]
    fn every_output_schema_reference_resolves() {
        fn refs<'v>(v: &'v Value, out: &mut Vec<&'v str>) {
            match v {
                Value::Object(m) => {
                    out.extend(m.get("$ref").and_then(Value::as_str));
                    m.values().for_each(|x| refs(x, out));
                }
                Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
                _ => {}
            }
        }
        for kind in [super::super::Kind::Workbench, super::super::Kind::Compute, super::super::Kind::App] {
            for (tool, schema) in table(kind) {
                let schema = Value::Object((*schema).clone());
                let mut found = Vec::new();
                refs(&schema, &mut found);
                for r in found {
                    let name = r.strip_prefix("#/$defs/").unwrap_or(r);
                    assert!(schema["$defs"].get(name).is_some(), "{tool}: {r} is not in its $defs");
                }
            }
        }
    }
}
