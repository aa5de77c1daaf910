//! The resources every server offers, each read through the daemon: a run, a workflow version, a
//! verification's proven notebook, and the guide to working with Cairn. A run is the one that
//! changes: a client subscribed to `cairn://runs/{run_id}` (`resources/subscribe`, or on
//! 2026-07-28 `subscriptions/listen`) gets `notifications/resources/updated` on each change of its
//! state — its status, a step's status or attempts, its findings — until it ends. The others never
//! change once they exist.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use rmcp::model::{
    ErrorData, ListResourceTemplatesResult, ListResourcesResult, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ResourceTemplate,
};
use rmcp::{RoleServer, service::RequestContext};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::api_client::{ApiClient, decode, seg};
use crate::wire::RunResult;

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
        ResourceTemplate::new("cairn://runs/{run_id}/steps/{step_id}/result", "step result")
            .with_description("A step's whole result (the tool's JSON), however large")
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
    // The error names the URI (`data.uri`), as the specification asks.
    let not_found = |why: String| ErrorData::resource_not_found(why, Some(json!({"uri": uri})));
    let rest = uri.strip_prefix("cairn://").ok_or_else(|| not_found(format!("`{uri}` is not a cairn:// resource")))?;
    let step_result = rest
        .strip_prefix("runs/")
        .and_then(|r| r.strip_suffix("/result"))
        .and_then(|r| r.split_once("/steps/"))
        .filter(|(run, step)| !run.contains('/') && !step.contains('/'));
    if let Some((run, step)) = step_result {
        return match daemon.call(ctx, "GET", format!("/runs/{}/steps/{}", seg(run), seg(step)), None).await {
            Ok(v) => match decode::<crate::wire::StepDetail>(v) {
                Ok(d) => Ok(text(serde_json::to_string_pretty(&d.step.result).unwrap_or_default(), "application/json")),
                Err(e) => Err(ErrorData::internal_error(format!("{} ({})", e.message, e.code), None)),
            },
            Err(e) if e.status == 404 => Err(not_found(e.message)),
            Err(e) => Err(ErrorData::internal_error(format!("{} ({})", e.message, e.code), None)),
        };
    }
    let (path, mime) = if let Some(id) = rest.strip_prefix("runs/").filter(|id| !id.contains('/')) {
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

/// A session's legacy subscriptions (`resources/subscribe`), by URI, each ended by its token.
#[derive(Clone, Default)]
pub struct Subscriptions(Arc<Mutex<HashMap<String, CancellationToken>>>);

impl Subscriptions {
    fn replace(&self, uri: &str, stop: CancellationToken) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = map.insert(uri.to_string(), stop) {
            old.cancel();
        }
    }

    pub fn end(&self, uri: &str) {
        if let Some(stop) = self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(uri) {
            stop.cancel();
        }
    }
}

/// The run a URI names, if it names one.
fn run_of(uri: &str) -> Option<&str> {
    uri.strip_prefix("cairn://runs/").filter(|id| !id.is_empty() && !id.contains('/'))
}

/// What a subscriber is told about when it changes.
fn state_of(run: &RunResult) -> Value {
    let steps: Vec<Value> = run.steps.iter().map(|s| json!([s.step_id, s.status, s.attempts])).collect();
    let waiting = run.waiting.as_ref().map(|w| json!([w.code, w.since]));
    let c = &run.step_counts;
    let counts = json!([c.pending, c.running, c.completed, c.failed]);
    json!({"status": run.status, "counts": counts, "steps": steps, "findings": run.findings, "error": run.error, "waiting": waiting})
}

/// Checks that `uri` can be subscribed to: a run that exists (its state now, to watch from), or
/// another resource that exists and never changes (`None`: nothing to watch).
async fn subscribable(
    daemon: &ApiClient,
    uri: &str,
    ctx: &RequestContext<RoleServer>,
) -> Result<Option<Value>, ErrorData> {
    match run_of(uri) {
        Some(id) => match daemon.call(ctx, "GET", format!("/runs/{}", seg(id)), None).await {
            Ok(run) => Ok(Some(run)),
            Err(e) if e.status == 404 => Err(ErrorData::resource_not_found(
                format!("{}; list_runs shows the runs to subscribe to", e.message),
                Some(json!({"uri": uri})),
            )),
            Err(e) => Err(ErrorData::internal_error(format!("{} ({})", e.message, e.code), None)),
        },
        None => read(daemon, uri.to_string(), ctx).await.map(|_| None),
    }
}

/// Follows the run's events (the daemon's run follower) and calls `notify` on each change of its
/// state, until it ends (told once more), `stop` is cancelled, or `notify` says the client is
/// gone.
async fn watch<F, Fut>(
    daemon: ApiClient,
    ctx: RequestContext<RoleServer>,
    uri: String,
    run: Value,
    stop: CancellationToken,
    notify: F,
) where
    F: Fn(String) -> Fut,
    Fut: Future<Output = bool>,
{
    let Some(id) = run_of(&uri).map(String::from) else { return };
    let Ok(run) = decode::<RunResult>(run) else { return };
    let mut last = state_of(&run);
    if run.has_ended() {
        return;
    }
    let Ok(mut events) = daemon.follow(&ctx, &id, 0).await else { return };
    loop {
        let more = tokio::select! {
            _ = stop.cancelled() => return,
            e = events.recv() => e.is_some(),
        };
        // A step's end is several events in a row: one read of the run for all of them.
        while events.try_recv().is_ok() {}
        let read = daemon.call(&ctx, "GET", format!("/runs/{}", seg(&id)), None).await;
        // A registry that cannot be read now (a fault its daemon waits out) ends nothing.
        let Ok(run) = read.and_then(decode::<RunResult>) else {
            if more {
                continue;
            }
            return;
        };
        let state = state_of(&run);
        if state != last {
            last = state;
            if !notify(uri.clone()).await {
                return;
            }
        }
        if !more || run.has_ended() {
            return;
        }
    }
}

/// `resources/subscribe`: watches a run for this session.
pub async fn subscribe(
    daemon: &ApiClient,
    subscriptions: &Subscriptions,
    uri: String,
    ctx: RequestContext<RoleServer>,
) -> Result<(), ErrorData> {
    let Some(run) = subscribable(daemon, &uri, &ctx).await? else { return Ok(()) };
    let stop = CancellationToken::new();
    subscriptions.replace(&uri, stop.clone());
    let peer = ctx.peer.clone();
    let (daemon, subs) = (daemon.clone(), subscriptions.clone());
    tokio::spawn(async move {
        let ended = stop.clone();
        watch(daemon, ctx, uri.clone(), run, stop, |uri| {
            let peer = peer.clone();
            async move {
                peer.notify_resource_updated(rmcp::model::ResourceUpdatedNotificationParam::new(uri)).await.is_ok()
            }
        })
        .await;
        // Over: forget it, unless a newer subscription to the same URI replaced it.
        if !ended.is_cancelled() {
            subs.end(&uri);
        }
    });
    Ok(())
}

/// The part of a `subscriptions/listen` filter this server honours: runs that exist.
pub fn accepted(requested: &rmcp::model::SubscriptionFilter) -> Option<rmcp::model::SubscriptionFilter> {
    let runs: Vec<String> =
        requested.resource_subscriptions.iter().flatten().filter(|u| run_of(u).is_some()).cloned().collect();
    Some(rmcp::model::SubscriptionFilter::builder().resource_subscriptions(runs).build())
}

/// `subscriptions/listen` (2026-07-28): watches each accepted run until the stream ends.
pub async fn listen(daemon: &ApiClient, cx: rmcp::service::SubscriptionContext) -> Result<(), ErrorData> {
    let stop = CancellationToken::new();
    let ctx = cx.request_context().clone();
    for uri in cx.accepted().resource_subscriptions.clone().unwrap_or_default() {
        let Ok(Some(run)) = subscribable(daemon, &uri, &ctx).await else { continue };
        let sink = cx.sink().clone();
        let (daemon, ctx, stop) = (daemon.clone(), ctx.clone(), stop.clone());
        tokio::spawn(watch(daemon, ctx, uri, run, stop, move |uri| {
            let sink = sink.clone();
            async move { sink.notify_resource_updated(uri).await.is_ok() }
        }));
    }
    cx.cancelled().await;
    stop.cancel();
    Ok(())
}

/// The `ServerHandler` of one server: its name and instructions, its tools, and the resources.
macro_rules! server_handler {
    ($ty:ident, $kind:expr, $name:literal, $instructions:expr) => {
        #[rmcp::tool_handler(router = self.tool_router)]
        impl rmcp::ServerHandler for $ty {
            #[allow(deprecated, reason = "MCP logging (SEP-2577 deprecates it) is what clients before 2026-07-28 use")]
            fn get_info(&self) -> rmcp::model::ServerConfig {
                rmcp::model::ServerConfig::new(
                    rmcp::model::ServerCapabilities::builder()
                        .enable_logging()
                        .enable_completions()
                        .enable_prompts()
                        .enable_resources()
                        .enable_resources_subscribe()
                        .enable_tools()
                        .build(),
                )
                .with_server_info(rmcp::model::Implementation::new($name, env!("CARGO_PKG_VERSION")))
                .with_instructions($instructions)
            }

            async fn call_tool(
                &self,
                request: rmcp::model::CallToolRequestParams,
                context: rmcp::service::RequestContext<rmcp::RoleServer>,
            ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
                let (tool, started, ctx) = (request.name.to_string(), std::time::Instant::now(), context.clone());
                let tcc = rmcp::handler::server::tool::ToolCallContext::new(self, request, context);
                match self.tool_router.call(tcc).await? {
                    rmcp::model::CallToolResponse::Complete(r) => {
                        let r = crate::mcp::api_client::with_structured_error(r);
                        let r = crate::mcp::api_client::with_next_call(&tool, crate::mcp::bounds::checked(&tool, r));
                        self.logging.call_ended(&ctx, &tool, started.elapsed(), &r).await;
                        Ok(rmcp::model::CallToolResponse::Complete(r))
                    }
                    other => Ok(other),
                }
            }

            async fn list_prompts(
                &self,
                _request: Option<rmcp::model::PaginatedRequestParams>,
                _context: rmcp::service::RequestContext<rmcp::RoleServer>,
            ) -> Result<rmcp::model::ListPromptsResult, rmcp::model::ErrorData> {
                Ok(crate::mcp::guided::list($kind))
            }

            async fn get_prompt(
                &self,
                request: rmcp::model::GetPromptRequestParams,
                _context: rmcp::service::RequestContext<rmcp::RoleServer>,
            ) -> Result<rmcp::model::GetPromptResponse, rmcp::model::ErrorData> {
                crate::mcp::guided::get($kind, &request).map(Into::into)
            }

            async fn complete(
                &self,
                request: rmcp::model::CompleteRequestParams,
                context: rmcp::service::RequestContext<rmcp::RoleServer>,
            ) -> Result<rmcp::model::CompleteResult, rmcp::model::ErrorData> {
                crate::mcp::guided::complete(&self.daemon, $kind, &request, &context).await
            }

            #[allow(deprecated, reason = "logging/setLevel is how clients before 2026-07-28 ask for log lines")]
            async fn set_level(
                &self,
                request: rmcp::model::SetLevelRequestParams,
                _context: rmcp::service::RequestContext<rmcp::RoleServer>,
            ) -> Result<(), rmcp::model::ErrorData> {
                self.logging.set(request.level);
                Ok(())
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

            #[allow(deprecated, reason = "resources/subscribe is how clients before 2026-07-28 subscribe")]
            async fn subscribe(
                &self,
                request: rmcp::model::SubscribeRequestParams,
                context: rmcp::service::RequestContext<rmcp::RoleServer>,
            ) -> Result<(), rmcp::model::ErrorData> {
                crate::mcp::resources::subscribe(&self.daemon, &self.subscriptions, request.uri, context).await
            }

            #[allow(deprecated, reason = "resources/unsubscribe is how clients before 2026-07-28 unsubscribe")]
            async fn unsubscribe(
                &self,
                request: rmcp::model::UnsubscribeRequestParams,
                _context: rmcp::service::RequestContext<rmcp::RoleServer>,
            ) -> Result<(), rmcp::model::ErrorData> {
                self.subscriptions.end(&request.uri);
                Ok(())
            }

            fn accepted_subscription_filter(
                &self,
                requested: &rmcp::model::SubscriptionFilter,
            ) -> Option<rmcp::model::SubscriptionFilter> {
                crate::mcp::resources::accepted(requested)
            }

            async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), rmcp::model::ErrorData> {
                crate::mcp::resources::listen(&self.daemon, context).await
            }
        }
    };
}
pub(crate) use server_handler;
