//! The resources every server offers, each read through the daemon: a run, a workflow version, a
//! verification's proven notebook, and the guide to working with Cairn.

use rmcp::model::{
    ErrorData, ListResourceTemplatesResult, ListResourcesResult, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ResourceTemplate,
};
use rmcp::{RoleServer, service::RequestContext};

use super::api_client::{ApiClient, seg};

pub const GUIDE_URI: &str = "cairn://guide";
const GUIDE: &str = include_str!("guide.md");

pub fn list() -> ListResourcesResult {
    ListResourcesResult::with_all_items(vec![
        Resource::new(GUIDE_URI, "guide")
            .with_description("How to work with Cairn: plan → approve → run → replay, and verify → keep")
            .with_mime_type("text/markdown"),
    ])
}

pub fn templates() -> ListResourceTemplatesResult {
    ListResourceTemplatesResult::with_all_items(vec![
        ResourceTemplate::new("cairn://runs/{run_id}", "run")
            .with_description("A run: status, steps with attempts and outcomes, findings, replay decisions")
            .with_mime_type("application/json"),
        ResourceTemplate::new("cairn://workflows/{name}@{version}", "workflow")
            .with_description("A registered workflow version: steps, tools with digests, validator rules")
            .with_mime_type("application/json"),
        ResourceTemplate::new("cairn://verifications/{verification_id}/notebook", "verification notebook")
            .with_description("The notebook a passed verification proved, with its provenance cell")
            .with_mime_type("application/x-ipynb+json"),
    ])
}

/// Reads one resource. An unknown URI or a missing object is `resource_not_found`.
pub async fn read(
    daemon: &ApiClient,
    uri: String,
    ctx: &RequestContext<RoleServer>,
) -> Result<ReadResourceResponse, ErrorData> {
    let text = |body: String, mime: &str| -> ReadResourceResponse {
        ReadResourceResult::new(vec![ResourceContents::text(body, uri.clone()).with_mime_type(mime)]).into()
    };
    if uri == GUIDE_URI {
        return Ok(text(GUIDE.to_string(), "text/markdown"));
    }
    let not_found = |why: String| ErrorData::resource_not_found(why, None);
    let rest = uri.strip_prefix("cairn://").ok_or_else(|| not_found(format!("`{uri}` is not a cairn:// resource")))?;
    let (path, mime) = if let Some(id) = rest.strip_prefix("runs/") {
        (format!("/runs/{}", seg(id)), "application/json")
    } else if let Some(wf) = rest.strip_prefix("workflows/") {
        let (name, version) = wf
            .split_once('@')
            .ok_or_else(|| not_found(format!("`{uri}` names no version; use cairn://workflows/NAME@VERSION")))?;
        (format!("/workflows/{}?version={}", seg(name), seg(version)), "application/json")
    } else if let Some(v) = rest.strip_prefix("verifications/").and_then(|r| r.strip_suffix("/notebook")) {
        (format!("/verifications/{}/notebook", seg(v)), "application/x-ipynb+json")
    } else {
        return Err(not_found(format!(
            "`{uri}` is not a resource here; see resources/templates/list (runs, workflows, verification notebooks) and {GUIDE_URI}"
        )));
    };
    match daemon.call(ctx, "GET", path, None).await {
        Ok(v) => Ok(text(serde_json::to_string_pretty(&v).unwrap_or_default(), mime)),
        Err(e) if e.status == 404 => Err(not_found(e.message)),
        Err(e) => Err(ErrorData::internal_error(format!("{} ({})", e.message, e.code), None)),
    }
}

/// The `ServerHandler` of one server: its name and instructions, its tools, and the resources.
macro_rules! server_handler {
    ($ty:ident, $name:literal, $instructions:expr) => {
        #[rmcp::tool_handler(router = self.tool_router)]
        impl rmcp::ServerHandler for $ty {
            fn get_info(&self) -> rmcp::model::ServerConfig {
                rmcp::model::ServerConfig::new(
                    rmcp::model::ServerCapabilities::builder().enable_tools().enable_resources().build(),
                )
                .with_server_info(rmcp::model::Implementation::new($name, env!("CARGO_PKG_VERSION")))
                .with_instructions($instructions)
            }

            async fn call_tool(
                &self,
                request: rmcp::model::CallToolRequestParams,
                context: rmcp::service::RequestContext<rmcp::RoleServer>,
            ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
                let tcc = rmcp::handler::server::tool::ToolCallContext::new(self, request, context);
                match self.tool_router.call(tcc).await? {
                    rmcp::model::CallToolResponse::Complete(r) => {
                        Ok(rmcp::model::CallToolResponse::Complete(crate::mcp::api_client::with_structured_error(r)))
                    }
                    other => Ok(other),
                }
            }

            async fn list_resources(
                &self,
                _request: Option<rmcp::model::PaginatedRequestParams>,
                _context: rmcp::service::RequestContext<rmcp::RoleServer>,
            ) -> Result<rmcp::model::ListResourcesResult, rmcp::model::ErrorData> {
                Ok(crate::mcp::resources::list())
            }

            async fn list_resource_templates(
                &self,
                _request: Option<rmcp::model::PaginatedRequestParams>,
                _context: rmcp::service::RequestContext<rmcp::RoleServer>,
            ) -> Result<rmcp::model::ListResourceTemplatesResult, rmcp::model::ErrorData> {
                Ok(crate::mcp::resources::templates())
            }

            async fn read_resource(
                &self,
                request: rmcp::model::ReadResourceRequestParams,
                context: rmcp::service::RequestContext<rmcp::RoleServer>,
            ) -> Result<rmcp::model::ReadResourceResponse, rmcp::model::ErrorData> {
                crate::mcp::resources::read(&self.daemon, request.uri, &context).await
            }
        }
    };
}
pub(crate) use server_handler;
