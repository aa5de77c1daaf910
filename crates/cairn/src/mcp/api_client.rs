//! How an MCP server reaches the daemon (its only way in): its HTTP API, with a fixed token (stdio, and the app
//! server, which only ever holds the Viewer token) or with the token of the MCP request itself
//! (the daemon's own HTTP endpoints forward it, so the API decides what the caller may do).

use rmcp::RoleServer;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use serde_json::{Value, json};

/// Every call says it comes through MCP, so the audit records that channel.
const CHANNEL: &str = crate::wire::CHANNEL_HEADER;

use cairn_engine::EngineError;

use crate::wire::Followed;

/// One request to the daemon failed: the API's status and message, or why it was not reached.
#[derive(Debug, Clone)]
pub struct CallError {
    pub status: u16,
    pub code: String,
    pub message: String,
    /// A rejected workflow's problems, `[{file, line, step, field, message}]`, as the API gave them.
    pub problems: Vec<Value>,
    /// A `forbidden` refusal's missing grant, `{permission, workflow?, target?}`, as the API gave it.
    pub missing: Option<Box<Value>>,
}

impl CallError {
    pub(crate) fn new(status: u16, code: &str, message: impl Into<String>) -> CallError {
        CallError { status, code: code.into(), message: message.into(), problems: Vec::new(), missing: None }
    }

    /// The failure an engine error is, as the API would answer with it.
    pub(crate) fn of_engine(e: &EngineError) -> CallError {
        let status = crate::failure::http_status(e.kind()).as_u16();
        CallError::new(status, e.code().as_str(), e.to_string())
    }

    /// The failure an error detail (a streamed answer's last line) describes.
    pub(crate) fn of_detail(status: u16, e: crate::wire::ErrorDetail) -> CallError {
        CallError {
            status,
            code: e.code,
            message: e.message,
            problems: e.problems.iter().filter_map(|p| serde_json::to_value(p).ok()).collect(),
            missing: e.missing.as_ref().and_then(|m| serde_json::to_value(m).ok()).map(Box::new),
        }
    }

    /// The failure an error answer of the API describes (`{error: {code, message, problems}}`).
    fn of_answer(status: u16, body: &Value) -> CallError {
        let error = serde_json::from_value::<crate::wire::ErrorBody>(body.clone()).ok().map(|b| b.error);
        match error {
            Some(e) => CallError::of_detail(status, e),
            None => CallError::new(status, "error", body.to_string()),
        }
    }

    /// The tool result for this failure: `isError`, the message with what to do next.
    pub fn tool_result(&self) -> CallToolResult {
        let hint = match (self.status, self.code.as_str()) {
            _ if !self.problems.is_empty() => " (fix every problem in `problems`, then call add_workflow again)",
            (401, _) => " (the MCP client must send the daemon's token as `Authorization: Bearer …`)",
            (403, "forbidden") => {
                " (the token this server calls the daemon with does not allow this; an admin can grant it with `cairn grant add`, or use a token that does)"
            }
            (403, "two_person_required") => " (ask another person who may approve this workflow's plans to execute it)",
            (_, "workflow_version_conflict") => {
                " (raise `version` in the workflow.toml, then call add_workflow again; list_workflows shows what is registered)"
            }
            _ => "",
        };
        let mut error = json!({"status": self.status, "code": self.code, "message": format!("{}{hint}", self.message)});
        if !self.problems.is_empty() {
            error["problems"] = Value::Array(self.problems.clone());
        }
        if let Some(m) = &self.missing {
            error["missing"] = (**m).clone();
        }
        CallToolResult::structured_error(json!({ "error": error }))
    }
}

/// How the daemon is reached.
#[derive(Clone)]
enum Transport {
    /// From another process (`cairn mcp`): the daemon's HTTP API on loopback.
    Http { base: String, agent: ureq::Agent },
    /// Inside the daemon: its API router, called in-process through the same middleware (token,
    /// role, body limit), with no socket in between.
    Router(axum::Router),
}

#[derive(Clone)]
pub struct ApiClient {
    transport: Transport,
    /// `None`: use the bearer token of the MCP request.
    token: Option<String>,
}

/// The largest answer read from the daemon.
const ANSWER_LIMIT: usize = 64 << 20;

impl ApiClient {
    /// Calls the daemon at `base` with this token whatever the MCP request carried.
    pub fn fixed(base: &str, token: &str) -> ApiClient {
        let transport =
            Transport::Http { base: base.trim_end_matches('/').to_string(), agent: crate::client::http_agent() };
        ApiClient { transport, token: Some(token.to_string()) }
    }

    /// Calls the daemon's own `api` router in-process, with `token`, or (`None`) with the bearer
    /// token of each MCP request.
    pub fn in_process(api: axum::Router, token: Option<String>) -> ApiClient {
        ApiClient { transport: Transport::Router(api), token }
    }

    fn token_for(&self, ctx: &RequestContext<RoleServer>) -> Result<String, CallError> {
        if let Some(t) = &self.token {
            return Ok(t.clone());
        }
        ctx.extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| crate::auth::bearer(&p.headers))
            .map(String::from)
            .ok_or_else(|| CallError::new(401, "unauthorized", "no bearer token came with this MCP request"))
    }

    /// Who is calling, for binding an approval request to its caller: a hash of the request's
    /// bearer token, or (a fixed token: a stdio server) the server's own.
    pub fn principal(&self, ctx: &RequestContext<RoleServer>) -> Result<String, CallError> {
        let token = self.token_for(ctx)?;
        let digest = <sha2::Sha256 as sha2::Digest>::digest(token.as_bytes());
        Ok(hex::encode(&digest[..16]))
    }

    /// `method path` with an optional JSON body; the answer's JSON when it is a 2xx.
    pub async fn call(
        &self,
        ctx: &RequestContext<RoleServer>,
        method: &'static str,
        path: String,
        body: Option<Value>,
    ) -> Result<Value, CallError> {
        let token = self.token_for(ctx)?;
        let (status, body) = match &self.transport {
            Transport::Http { base, agent } => {
                http_call(agent.clone(), format!("{base}{path}"), method, token, body).await?
            }
            Transport::Router(api) => {
                let response = route(api, method, &path, &token, body.as_ref(), "application/json").await?;
                let status = response.status().as_u16();
                let bytes = axum::body::to_bytes(response.into_body(), ANSWER_LIMIT).await.map_err(|e| {
                    CallError::new(status, "bad_answer", format!("the daemon's answer could not be read: {e}"))
                })?;
                (status, serde_json::from_slice(&bytes).map_err(|e| not_json(status, e))?)
            }
        };
        if (200..300).contains(&status) {
            return Ok(body);
        }
        Err(CallError::of_answer(status, &body))
    }

    /// Follows a run's events (`GET /runs/{id}/events?follow=true`, the daemon's one run
    /// follower): each event, and each change of the run's wait for its environment, arrives on
    /// the returned channel, which closes after the run's last event or when the stream ends.
    pub async fn follow(
        &self,
        ctx: &RequestContext<RoleServer>,
        run_id: &str,
        after: i64,
    ) -> Result<tokio::sync::mpsc::Receiver<Followed>, CallError> {
        let path = format!("/runs/{}/events?follow=true&after={after}", seg(run_id));
        self.stream(ctx, "GET", path, None, "text/event-stream", Followed::of_sse_line).await
    }

    /// A streamed answer read line by line as it comes: each line `parse` reads arrives on the
    /// returned channel, which closes when the stream ends. Dropping the channel ends the
    /// stream, as a client that hangs up does (a streamed verification is then cancelled).
    pub async fn stream<T: Send + 'static>(
        &self,
        ctx: &RequestContext<RoleServer>,
        method: &'static str,
        path: String,
        body: Option<Value>,
        accept: &'static str,
        parse: fn(&str) -> Option<T>,
    ) -> Result<tokio::sync::mpsc::Receiver<T>, CallError> {
        let token = self.token_for(ctx)?;
        let (tx, rx) = tokio::sync::mpsc::channel(256);
        match &self.transport {
            Transport::Http { base, agent } => {
                let response = {
                    let (agent, url) = (agent.clone(), format!("{base}{path}"));
                    tokio::task::spawn_blocking(move || {
                        let auth = format!("Bearer {token}");
                        let sent = match (method, body) {
                            ("GET", _) => agent
                                .get(&url)
                                .header("Authorization", &auth)
                                .header(CHANNEL, "mcp")
                                .header("Accept", accept)
                                .call(),
                            (_, Some(b)) => agent
                                .post(&url)
                                .header("Authorization", &auth)
                                .header(CHANNEL, "mcp")
                                .header("Accept", accept)
                                .send_json(&b),
                            (_, None) => agent
                                .post(&url)
                                .header("Authorization", &auth)
                                .header(CHANNEL, "mcp")
                                .header("Accept", accept)
                                .send_empty(),
                        };
                        sent.map_err(|e| unreachable(&url, e))
                    })
                    .await
                    .map_err(worker_failed)??
                };
                let status = response.status().as_u16();
                if status != 200 {
                    let body = response.into_body().read_json::<Value>().unwrap_or_default();
                    return Err(CallError::of_answer(status, &body));
                }
                let reader = std::io::BufReader::new(response.into_body().into_reader());
                tokio::task::spawn_blocking(move || {
                    for line in std::io::BufRead::lines(reader) {
                        let Ok(line) = line else { break };
                        if let Some(item) = parse(&line)
                            && tx.blocking_send(item).is_err()
                        {
                            break;
                        }
                    }
                });
            }
            Transport::Router(api) => {
                let response = route(api, method, &path, &token, body.as_ref(), accept).await?;
                let status = response.status().as_u16();
                if status != 200 {
                    let bytes = axum::body::to_bytes(response.into_body(), ANSWER_LIMIT).await.unwrap_or_default();
                    return Err(CallError::of_answer(status, &serde_json::from_slice(&bytes).unwrap_or_default()));
                }
                tokio::spawn(async move {
                    use futures_util::StreamExt;
                    let mut frames = response.into_body().into_data_stream();
                    // Bytes, not text, until a line is whole: a chunk may end inside a character.
                    let mut pending: Vec<u8> = Vec::new();
                    while let Some(Ok(chunk)) = frames.next().await {
                        pending.extend_from_slice(&chunk);
                        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                            let line: Vec<u8> = pending.drain(..=end).collect();
                            if let Some(item) = parse(String::from_utf8_lossy(&line).trim_end())
                                && tx.send(item).await.is_err()
                            {
                                return;
                            }
                        }
                    }
                });
            }
        }
        Ok(rx)
    }

    /// A tool's whole answer: the daemon's JSON as structured content, or an `isError` result.
    pub async fn tool(
        &self,
        ctx: &RequestContext<RoleServer>,
        method: &'static str,
        path: String,
        body: Option<Value>,
    ) -> CallToolResult {
        match self.call(ctx, method, path, body).await {
            Ok(v) => structured(v),
            Err(e) => e.tool_result(),
        }
    }
}

/// `method path` over HTTP, on a blocking worker (ureq blocks): the status and the JSON body.
async fn http_call(
    agent: ureq::Agent,
    url: String,
    method: &'static str,
    token: String,
    body: Option<Value>,
) -> Result<(u16, Value), CallError> {
    tokio::task::spawn_blocking(move || {
        let auth = format!("Bearer {token}");
        let sent = match (method, body) {
            ("GET", _) => agent.get(&url).header("Authorization", &auth).header(CHANNEL, "mcp").call(),
            (_, Some(b)) => agent.post(&url).header("Authorization", &auth).header(CHANNEL, "mcp").send_json(&b),
            (_, None) => agent.post(&url).header("Authorization", &auth).header(CHANNEL, "mcp").send_empty(),
        };
        let mut resp = sent.map_err(|e| unreachable(&url, e))?;
        let status = resp.status().as_u16();
        let body =
            resp.body_mut().with_config().limit(ANSWER_LIMIT as u64).read_json().map_err(|e| not_json(status, e))?;
        Ok((status, body))
    })
    .await
    .map_err(worker_failed)?
}

/// `method path` through the daemon's own router, as a loopback request with `token` would be.
async fn route(
    api: &axum::Router,
    method: &'static str,
    path: &str,
    token: &str,
    body: Option<&Value>,
    accept: &str,
) -> Result<axum::response::Response, CallError> {
    use tower::ServiceExt;
    let request = axum::http::Request::builder()
        .method(method)
        .uri(path)
        .header(axum::http::header::HOST, "127.0.0.1")
        .header(axum::http::header::AUTHORIZATION, format!("Bearer {token}"))
        .header(CHANNEL, "mcp")
        .header(axum::http::header::ACCEPT, accept);
    let request = match body {
        Some(b) => request
            .header(axum::http::header::CONTENT_TYPE, "application/json")
            .body(axum::body::Body::from(serde_json::to_vec(b).unwrap_or_default())),
        None => request.body(axum::body::Body::empty()),
    }
    .map_err(|e| CallError::new(400, "invalid_request", format!("the request to {path} could not be made: {e}")))?;
    Ok(match api.clone().oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    })
}

fn unreachable(url: &str, e: ureq::Error) -> CallError {
    CallError::new(503, "daemon_unreachable", format!("cannot reach the cairn daemon at {url}: {e}"))
}

fn not_json(status: u16, e: impl std::fmt::Display) -> CallError {
    CallError::new(status, "bad_answer", format!("the daemon answered {status} with a body that is not JSON: {e}"))
}

fn worker_failed(e: tokio::task::JoinError) -> CallError {
    CallError::new(500, "internal", format!("the request's worker failed: {e}"))
}

/// The daemon's answer as the wire type it is (a build of the daemon that answers otherwise is
/// named, not half-read).
pub fn decode<T: serde::de::DeserializeOwned>(answer: Value) -> Result<T, CallError> {
    serde_json::from_value(answer).map_err(|e| {
        CallError::new(502, "bad_answer", format!("the daemon's answer is not what this build of cairn reads: {e}"))
    })
}

/// Structured content must be an object; anything else is wrapped as `{"value": …}`.
pub fn structured(v: Value) -> CallToolResult {
    match v {
        Value::Object(_) => CallToolResult::structured(v),
        other => CallToolResult::structured(json!({"value": other})),
    }
}

pub use crate::wire::seg;

/// Every failure carries `{error: {status, code, message}}`: one the SDK made itself (arguments
/// that do not fit the tool's input schema) gets it here, from its text.
pub fn with_structured_error(r: CallToolResult) -> CallToolResult {
    if r.is_error != Some(true) || r.structured_content.is_some() {
        return r;
    }
    let text: Vec<String> = serde_json::to_value(&r.content)
        .ok()
        .and_then(|c| c.as_array().cloned())
        .into_iter()
        .flatten()
        .filter_map(|c| c["text"].as_str().map(String::from))
        .collect();
    CallError::new(
        422,
        "invalid_arguments",
        format!("{}; the tool's inputSchema lists its arguments and their types", text.join(" ")),
    )
    .tool_result()
}

/// What to call next after `tool` failed with `code`, for an agent that sees only the MCP tools.
/// Whatever it named was missing (`run_not_found`, `step_not_found`, … all answer 404) when
/// `missing`.
fn next_call(tool: &str, code: &str, missing: bool) -> Option<&'static str> {
    Some(match (missing, code, tool) {
        (true, _, "describe_workflow" | "plan_run") => {
            "list_workflows shows what is registered; add_workflow registers a folder"
        }
        (true, _, "execute_plan") => "plan_run makes a plan; use the plan_name it returns",
        (true, _, "read_artifact") => "get_step_result lists the step's artifacts by name",
        (true, _, "get_run" | "get_run_layers" | "cancel_run" | "export_run" | "plan_replay" | "run_detail") => {
            "list_runs shows the runs"
        }
        (true, _, "explain_step" | "get_step_result" | "get_pipeline_jobs" | "tail_log") => {
            "get_run(run_id) lists the run's steps"
        }
        (true, _, "poll_job") => "list_jobs shows the jobs and verifications in progress",
        (true, _, "read_doc") => "list_docs or search_docs shows the docs",
        (true, _, "probe_target" | "check_readiness") => "list_targets shows the targets; add_target registers one",
        (_, "plan_mismatch" | "plan_altered" | "plan_stale", _) => {
            "call plan_run again and approve the plan it returns"
        }
        (_, "plan_executed", _) => "get_run shows the run it executed as; plan_run a new plan to run again",
        (_, "run_dir_reserved", _) => "plan_run again with a new run_dir",
        (_, "kernel_slot_taken", _) => {
            "list_jobs shows what holds the kernel; poll_job follows it, interrupt_kernel stops it"
        }
        (_, "run_finished", _) => "get_run shows how it ended",
        (_, "step_running", _) => "follow it with get_run or tail_log",
        (_, "daemon_unreachable", _) => "the daemon is starting or stopped; try again, or run `cairn daemon start`",
        _ => return None,
    })
}

/// `r` with its error's message ending in the next call to make, where one is known and the
/// message does not already say it.
pub fn with_next_call(tool: &str, mut r: CallToolResult) -> CallToolResult {
    if r.is_error != Some(true) {
        return r;
    }
    let Some(error) = r.structured_content.as_mut().and_then(|c| c.get_mut("error")) else { return r };
    let (Some(code), Some(message)) = (error["code"].as_str(), error["message"].as_str()) else { return r };
    let missing = error["status"].as_u64() == Some(404);
    if let Some(next) = next_call(tool, code, missing).filter(|n| !message.contains(n)) {
        error["message"] = json!(format!("{message} (next: {next})"));
        let text = r.structured_content.as_ref().map(Value::to_string).unwrap_or_default();
        r.content = vec![rmcp::model::ContentBlock::text(text)];
    }
    r
}

/// A bad argument, before anything is asked of the daemon.
pub fn invalid(message: impl Into<String>) -> CallToolResult {
    CallError::new(422, "invalid_arguments", message).tool_result()
}
