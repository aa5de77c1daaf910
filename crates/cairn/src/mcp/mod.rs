//! MCP servers for agents (the `rmcp` SDK): `workbench` (plan, approve, run, replay, verify, the
//! session kernel), `compute` (targets) and `app` (read-only projections for a person's view).
//!
//! The servers are thin: every tool and resource is one call to the daemon's HTTP API (through
//! [`ApiClient`]), with the caller's token and the same request types the API takes, so the API's roles hold here too (a Viewer token reads and never changes
//! anything). None touches the registry or starts a process. They are served over stdio by
//! `cairn mcp …` and over streamable HTTP by the daemon at `/mcp/{workbench,compute,app}`.

mod api_client;
mod app;
mod approval;
mod bounds;
mod compute;
mod guided;
#[allow(deprecated, reason = "MCP logging (SEP-2577 deprecates it) is what clients before 2026-07-28 use")]
mod logging;
mod progress;
mod resources;
mod schemas;
mod workbench;

use std::sync::Arc;

use axum::Router;
use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

pub use api_client::ApiClient;
pub use app::App;
pub use compute::Compute;
pub use workbench::Workbench;

use crate::Failure;

/// A tool's argument naming one run (the workbench's and the app's).
#[derive(Debug, serde::Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct RunRef {
    pub run_id: String,
}

/// `get_run`'s arguments: the run, and which of its steps.
#[derive(Debug, Default, serde::Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct RunPage {
    pub run_id: String,
    /// Skip this many of the matching steps (default 0).
    pub steps_offset: Option<usize>,
    /// At most this many steps (1 to 10000). Default: up to 1000, fewer when the answer would
    /// be over 256 KiB; `steps_page.next_offset` says where the next page starts.
    pub steps_limit: Option<usize>,
    /// Only steps in these statuses, comma-separated: PENDING, RUNNING, COMPLETED, FAILED.
    pub steps_status: Option<String>,
    /// `attention`: failed, then running steps first; `dag` (default): the DAG's order.
    pub steps_order: Option<String>,
    /// Only the steps of this layer of the DAG (layer 0: the steps that need none; a step's
    /// layer is one more than its deepest need's).
    pub steps_layer: Option<usize>,
}

impl RunPage {
    /// `GET /runs/{id}` with this page, `limit` steps at most (`None`: the daemon's default).
    pub fn path(&self, limit: Option<usize>) -> String {
        let mut query = Vec::new();
        if let Some(n) = self.steps_offset {
            query.push(format!("steps_offset={n}"));
        }
        if let Some(n) = limit {
            query.push(format!("steps_limit={n}"));
        }
        if let Some(s) = &self.steps_status {
            query.push(format!("steps_status={}", api_client::seg(s)));
        }
        if let Some(o) = &self.steps_order {
            query.push(format!("steps_order={}", api_client::seg(o)));
        }
        if let Some(n) = self.steps_layer {
            query.push(format!("steps_layer={n}"));
        }
        let path = format!("/runs/{}", api_client::seg(&self.run_id));
        if query.is_empty() { path } else { format!("{path}?{}", query.join("&")) }
    }
}

/// `get_run_layers`' arguments: the run, and which of its DAG's layers.
#[derive(Debug, serde::Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct LayersPage {
    pub run_id: String,
    /// The first layer (default 0).
    pub offset: Option<usize>,
    /// At most this many layers (1 to 10000; default 1000).
    pub limit: Option<usize>,
}

impl LayersPage {
    /// `GET /runs/{id}/layers` with this page.
    fn path(&self) -> String {
        let mut path = format!("/runs/{}/layers?offset={}", api_client::seg(&self.run_id), self.offset.unwrap_or(0));
        if let Some(n) = self.limit {
            path.push_str(&format!("&limit={n}"));
        }
        path
    }
}

/// `export_run`'s arguments (the workbench's and the app's).
#[derive(Debug, serde::Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct ExportRun {
    pub run_id: String,
    /// Copy the artifacts and input files into the crate (default true); false references them by
    /// path and SHA-256 only.
    pub data: Option<bool>,
}

impl ExportRun {
    /// The API path that writes the crate and answers where.
    fn path(&self) -> String {
        format!("/runs/{}/export?data={}", api_client::seg(&self.run_id), self.data.unwrap_or(true))
    }
}

/// `read_artifact`'s arguments (the workbench's and the app's).
#[derive(Debug, serde::Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct ReadArtifact {
    pub run_id: String,
    pub step_id: String,
    /// The declared output's name (as get_run lists a step's artifacts).
    pub name: String,
    /// For a folder output: which of its files.
    pub path: Option<String>,
    /// The first byte (default 0).
    pub offset: Option<u64>,
    /// At most this many bytes (default and most: 184320, so that the answer, base64 and all,
    /// stays under 256 KiB).
    pub length: Option<u64>,
}

impl ReadArtifact {
    fn path(&self) -> String {
        let length = self.length.unwrap_or(bounds::ARTIFACT_SLICE).min(bounds::ARTIFACT_SLICE);
        let mut q = vec![format!("offset={}", self.offset.unwrap_or(0)), format!("length={length}")];
        if let Some(p) = &self.path {
            q.push(format!("path={}", api_client::seg(p)));
        }
        format!(
            "/runs/{}/steps/{}/artifacts/{}?{}",
            api_client::seg(&self.run_id),
            api_client::seg(&self.step_id),
            api_client::seg(&self.name),
            q.join("&")
        )
    }
}

/// What `read_artifact` says of itself (the same on both servers).
const READ_ARTIFACT: &str = "A slice of one artifact's bytes (at most 180 KiB a call, so the answer stays under 256 KiB; page with offset), read where it lies: on this machine, or on the run's SSH/Slurm target over SSH without copying it back. Text comes as text, other bytes as base64, with the recorded size and SHA-256 and the size now. Read-only.";

/// What `export_run` says of itself (the same on both servers).
const EXPORT_RUN: &str = "Export a run as a Provenance Run Crate 0.5 (RO-Crate 1.1, what WorkflowHub and Zenodo ingest): its workflow, input and input files, steps, attempts, artifacts with their SHA-256, the validator's verdict, its replay lineage and the targets that ran it. Writes a zip under the daemon's state root (replacing this run's previous export) and returns its path, files and bytes. Changes no run.";

/// Which server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Workbench,
    Compute,
    App,
}

/// Every tool of a server as `tools/list` answers it, output schemas included (the book's
/// reference page of the tools is generated from this).
pub fn tools(kind: Kind) -> Vec<rmcp::model::Tool> {
    match kind {
        Kind::Workbench => schemas::attach(kind, Workbench::tool_router()).list_all(),
        Kind::Compute => schemas::attach(kind, Compute::tool_router()).list_all(),
        Kind::App => schemas::attach(kind, App::tool_router()).list_all(),
    }
}

/// Serves one server over stdio until its client closes stdin. Logs go to stderr only.
pub fn serve_stdio(kind: Kind, daemon: ApiClient) -> Result<u8, Failure> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure::usage(format!("cannot start the MCP server's runtime: {e}")))?;
    rt.block_on(async move {
        let transport = rmcp::transport::stdio();
        let waited = match kind {
            Kind::Workbench => Workbench::new(daemon, approval::Approvals::default())
                .serve(transport)
                .await
                .map(|s| tokio::spawn(s.waiting())),
            Kind::Compute => Compute::new(daemon).serve(transport).await.map(|s| tokio::spawn(s.waiting())),
            Kind::App => App::new(daemon).serve(transport).await.map(|s| tokio::spawn(s.waiting())),
        };
        let handle = waited.map_err(|e| Failure::usage(format!("the MCP session could not start: {e}")))?;
        handle
            .await
            .map_err(|e| Failure::usage(format!("the MCP server stopped: {e}")))?
            .map_err(|e| Failure::usage(format!("the MCP server stopped: {e}")))?;
        Ok(0)
    })
}

/// The three servers over streamable HTTP, to mount in the daemon's router (token checked there).
/// `api` is the daemon's API router, which they call in-process; `viewer` the Viewer token the app
/// server always uses. Cancelling `closing` ends every open MCP session and stream, so a stopping
/// daemon does not wait on them.
pub fn http_router<S: Clone + Send + Sync + 'static>(
    api: Router,
    viewer: &str,
    closing: tokio_util::sync::CancellationToken,
) -> Router<S> {
    let config = || {
        StreamableHttpServerConfig::default()
            .with_cancellation_token(closing.child_token())
            // DNS-rebinding protection: a loopback Host only, and a browser Origin only from loopback.
            .with_allowed_hosts(["localhost", "127.0.0.1", "::1"])
            .with_allowed_origins(["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"])
    };
    let forwarded = ApiClient::in_process(api.clone(), None);
    let app = ApiClient::in_process(api, Some(viewer.to_string()));
    let (w, c) = (forwarded.clone(), forwarded);
    let approvals = approval::Approvals::default();
    Router::new()
        .nest_service(
            "/mcp/workbench",
            StreamableHttpService::new(
                move || Ok(Workbench::new(w.clone(), approvals.clone())),
                Arc::new(LocalSessionManager::default()),
                config(),
            ),
        )
        .nest_service(
            "/mcp/compute",
            StreamableHttpService::new(
                move || Ok(Compute::new(c.clone())),
                Arc::new(LocalSessionManager::default()),
                config(),
            ),
        )
        .nest_service(
            "/mcp/app",
            StreamableHttpService::new(
                move || Ok(App::new(app.clone())),
                Arc::new(LocalSessionManager::default()),
                config(),
            ),
        )
}
