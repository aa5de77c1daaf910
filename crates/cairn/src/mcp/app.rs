//! The app server: read-only projections for a person's view, bounded in size. It holds the
//! Viewer token only, so it cannot plan, approve, execute or cancel even if asked to.

use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{RoleServer, tool, tool_router};
use serde_json::{Value, json};

use super::api_client::{ApiClient, decode, seg, structured};
use super::logging::LogLevel;
use super::resources::{Subscriptions, server_handler};
use super::{EXPORT_RUN, ExportRun, READ_ARTIFACT, ReadArtifact, RunRef};
use crate::wire::{EventList, RunList, to_value};

/// Rows in an overview, and events in a run's detail.
const MAX_ROWS: usize = 100;
/// Longer strings are cut (a step's result or log can be large).
const MAX_TEXT: usize = 2000;

#[derive(Clone)]
pub struct App {
    daemon: ApiClient,
    logging: LogLevel,
    subscriptions: Subscriptions,
    tool_router: ToolRouter<Self>,
}

/// `v` with every string longer than `MAX_TEXT` cut, and every array longer than `MAX_ROWS`
/// reduced to its last `MAX_ROWS` items.
fn bounded(v: Value) -> Value {
    match v {
        Value::String(s) if s.chars().count() > MAX_TEXT => {
            Value::String(format!("{}… (cut)", s.chars().take(MAX_TEXT).collect::<String>()))
        }
        Value::Array(items) => {
            let skip = items.len().saturating_sub(MAX_ROWS);
            Value::Array(items.into_iter().skip(skip).map(bounded).collect())
        }
        Value::Object(map) => Value::Object(map.into_iter().map(|(k, v)| (k, bounded(v))).collect()),
        other => other,
    }
}

#[tool_router(vis = "pub(super)")]
impl App {
    pub fn new(daemon: ApiClient) -> App {
        App {
            daemon,
            subscriptions: Subscriptions::default(),
            logging: LogLevel::default(),
            tool_router: super::schemas::attach(super::Kind::App, Self::tool_router()),
        }
    }

    #[tool(
        description = "The newest runs (at most 100): id, workflow@version, status, times, replay source. Read-only.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn runs_overview(&self, ctx: RequestContext<RoleServer>) -> CallToolResult {
        let list = self.daemon.call(&ctx, "GET", format!("/runs?limit={MAX_ROWS}"), None).await;
        match list.and_then(decode::<RunList>) {
            Ok(list) => {
                let runs: Vec<Value> = list
                    .runs
                    .iter()
                    .map(|r| {
                        json!({
                            "run_id": r.run_id, "workflow": r.workflow, "version": r.version,
                            "status": r.status, "created_at": r.created_at, "finished_at": r.finished_at,
                            "source_run_id": r.source_run_id, "error": r.error,
                        })
                    })
                    .collect();
                structured(bounded(json!({"runs": runs})))
            }
            Err(e) => e.tool_result(),
        }
    }

    #[tool(
        description = "One run for a person: its steps, findings, replay decisions and its latest events (at most 100), long texts cut. Read-only.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn run_detail(&self, Parameters(p): Parameters<RunRef>, ctx: RequestContext<RoleServer>) -> CallToolResult {
        let id = seg(&p.run_id);
        // The run is passed on as the daemon wrote it (only cut to size), so it stays JSON here.
        let mut run = match self.daemon.call(&ctx, "GET", format!("/runs/{id}"), None).await {
            Ok(run) => run,
            Err(e) => return e.tool_result(),
        };
        match self.daemon.call(&ctx, "GET", format!("/runs/{id}/events"), None).await.and_then(decode::<EventList>) {
            Ok(list) => run["events"] = to_value(&list.events),
            Err(e) => return e.tool_result(),
        }
        structured(bounded(run))
    }

    #[tool(
        description = READ_ARTIFACT,
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = true)
    )]
    async fn read_artifact(
        &self,
        Parameters(p): Parameters<ReadArtifact>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.daemon.tool(&ctx, "GET", p.path(), None).await
    }

    #[tool(
        description = EXPORT_RUN,
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn export_run(
        &self,
        Parameters(p): Parameters<ExportRun>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.daemon.tool(&ctx, "GET", p.path(), None).await
    }

    #[tool(
        description = "Registered workflows and their versions. Read-only.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn workflows_overview(&self, ctx: RequestContext<RoleServer>) -> CallToolResult {
        match self.daemon.call(&ctx, "GET", "/workflows".into(), None).await {
            Ok(v) => structured(bounded(v)),
            Err(e) => e.tool_result(),
        }
    }

    #[tool(
        description = "Compute targets with their last probe's facts (nothing is contacted). Read-only.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn targets_overview(&self, ctx: RequestContext<RoleServer>) -> CallToolResult {
        match self.daemon.call(&ctx, "GET", "/targets".into(), None).await {
            Ok(v) => structured(bounded(v)),
            Err(e) => e.tool_result(),
        }
    }

    #[tool(
        description = "The procedure docs (at most 100): name, newest version, title, when saved, the verification it came from. Read-only.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn docs_overview(&self, ctx: RequestContext<RoleServer>) -> CallToolResult {
        match self.daemon.call(&ctx, "GET", "/docs".into(), None).await {
            Ok(v) => structured(bounded(v)),
            Err(e) => e.tool_result(),
        }
    }
}

server_handler!(
    App,
    super::Kind::App,
    "cairn-app",
    "Read-only views of Cairn for a person: runs, one run's detail and its RO-Crate export, workflows, targets and procedure docs. This server holds a Viewer token: it cannot plan, approve, execute or cancel."
);
