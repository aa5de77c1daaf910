//! `logging` (MCP before 2026-07-28, and its per-request log level after): a line about each of
//! the caller's tool calls — which tool, how long it took, how it ended (the run, plan or
//! verification it touched; or the error's code and message) — at the level the client set.
//! Nothing is sent to a client that did not ask.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::{CallToolResult, LoggingLevel, LoggingMessageNotificationParam};
use rmcp::service::RequestContext;
use serde_json::{Value, json};

/// The level a session asked for with `logging/setLevel` (none: no log messages).
#[derive(Clone, Default)]
pub struct LogLevel(Arc<Mutex<Option<LoggingLevel>>>);

fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        _ => 7,
    }
}

impl LogLevel {
    pub fn set(&self, level: LoggingLevel) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(level);
    }

    /// Sends `data` at `level` if the caller asked for it: by this request's log level (2026-07-28),
    /// else the session's.
    pub async fn log(&self, ctx: &RequestContext<RoleServer>, level: LoggingLevel, logger: &str, data: Value) {
        let wanted = ctx.meta.log_level().or(*self.0.lock().unwrap_or_else(|p| p.into_inner()));
        if wanted.is_some_and(|min| rank(level) >= rank(min)) {
            let param = LoggingMessageNotificationParam::new(level, data).with_logger(logger);
            let _ = ctx.peer.notify_logging_message(param).await;
        }
    }

    /// The line about one finished tool call: what it was, how long it took, and how it ended.
    pub async fn call_ended(
        &self,
        ctx: &RequestContext<RoleServer>,
        tool: &str,
        took: Duration,
        result: &CallToolResult,
    ) {
        let ms = took.as_millis() as u64;
        match result.structured_content.as_ref().filter(|_| result.is_error == Some(true)) {
            Some(failed) => {
                // A failed tool's own envelope (`CallError::tool_result`), read as MCP carries it.
                let e = &failed["error"];
                let data =
                    json!({"tool": tool, "ms": ms, "status": e["status"], "code": e["code"], "message": e["message"]});
                self.log(ctx, LoggingLevel::Warning, "cairn.tools", data).await;
            }
            None => {
                let content = result.structured_content.as_ref();
                let mut data = json!({"tool": tool, "ms": ms, "ok": true});
                for key in ["run_id", "status", "plan_name", "verification_id", "verdict"] {
                    if let Some(v) = content.and_then(|c| c.get(key)) {
                        data[key] = v.clone();
                    }
                }
                self.log(ctx, LoggingLevel::Info, "cairn.tools", data).await;
            }
        }
    }
}
