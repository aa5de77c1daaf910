//! Tool results stay bounded: none is over [`RESULT_MAX`] (256 KiB of JSON), so an agent's
//! context is never flooded. What can be larger has its own way out: a step's whole result is a
//! resource, an artifact is read in pages, and anything else over the bound is refused with what
//! to ask for instead.

use rmcp::model::CallToolResult;
use serde_json::{Value, json};

use super::api_client::CallError;

/// The most structured content a tool answers with, in bytes of JSON.
pub const RESULT_MAX: usize = 256 << 10;

/// A step's result over this many bytes of JSON is cut in `get_step_result`.
const STEP_RESULT_MAX: usize = 192 << 10;

/// How much of a cut result's text is kept.
const STEP_RESULT_PREVIEW: usize = 64 << 10;

/// The most bytes `read_artifact` reads a call over MCP: base64 of it, with its fields, stays
/// under [`RESULT_MAX`].
pub const ARTIFACT_SLICE: u64 = 180 << 10;

/// `get_step_result`'s answer: the step whole, or, its result over `STEP_RESULT_MAX`, the start of
/// the result's text with `result_truncated` and where the whole result is. Dynamic on purpose:
/// the step is the daemon's JSON cut in place, every other field passed through as it came.
pub fn step_result(mut step: Value, run_id: &str, step_id: &str) -> Value {
    let text = step["result"].to_string();
    if step["result"].is_null() || text.len() <= STEP_RESULT_MAX {
        return step;
    }
    step["result"] = json!(cairn_core::canonical::prefix_within(&text, STEP_RESULT_PREVIEW));
    step["result_truncated"] = json!(true);
    step["result_bytes"] = json!(text.len());
    step["result_resource"] = json!(format!("cairn://runs/{run_id}/steps/{step_id}/result"));
    step
}

/// `r` if its structured content is within [`RESULT_MAX`]; otherwise an error saying how large
/// it was and what to ask for instead.
pub fn checked(tool: &str, r: CallToolResult) -> CallToolResult {
    let size = r.structured_content.as_ref().map(|v| v.to_string().len()).unwrap_or(0);
    if size <= RESULT_MAX {
        return r;
    }
    let instead = match tool {
        "read_artifact" => "ask for a shorter `length` (text with many escaped characters grows in JSON)",
        "get_run" => "ask for fewer steps (`steps_limit`), or get_step_result for one step",
        "run_detail" => "read cairn://runs/RUN_ID, or get_step_result for one step",
        "list_runs" | "runs_overview" => "ask for fewer (`limit`) or filter by `status`",
        _ => "ask for less, or read the matching resource (resources/templates/list)",
    };
    CallError::new(
        413,
        "result_too_large",
        format!("the answer of {tool} is {size} bytes, more than the {RESULT_MAX} a tool result may hold; {instead}"),
    )
    .tool_result()
}
