//! The MCP tools' page: each server `cairn mcp` serves, and each of its tools as `tools/list`
//! answers it, with its input and output schemas.

use clap::ValueEnum;
use serde_json::Value;

use super::http::fields;
use super::{code, header, sentence, slug, text};
use crate::cli::McpServer;
use crate::mcp::Kind;

pub(super) fn page() -> String {
    let mut out = header("MCP tools", "the MCP servers' tool lists (crates/cairn/src/mcp)");
    out.push_str(
        "Cairn serves three MCP servers, each over stdio (`cairn mcp SERVER`, for an agent that starts it) \
         and over streamable HTTP at the daemon's `/mcp/SERVER` (with a bearer token). Each tool is one call \
         to the [HTTP API](http-api.md) with the caller's token, so a token's roles hold here too. A tool's \
         failure is a tool result with `isError` and a structured `{\"error\": {\"code\", \"message\"}}`, \
         its code one of [the error codes](codes.md#error-codes).\n\n## Contents\n\n",
    );
    let servers: Vec<(String, String, Vec<Value>)> = McpServer::value_variants()
        .iter()
        .filter_map(|s| {
            let value = s.to_possible_value()?;
            let kind = match s {
                McpServer::Workbench => Kind::Workbench,
                McpServer::Compute => Kind::Compute,
                McpServer::App => Kind::App,
            };
            let tools = crate::mcp::tools(kind).into_iter().filter_map(|t| serde_json::to_value(t).ok()).collect();
            Some((value.get_name().to_string(), value.get_help().map(|h| h.to_string()).unwrap_or_default(), tools))
        })
        .collect();
    for (server, about, tools) in &servers {
        out.push_str(&format!("- [`{server}`](#{}): {}\n", slug(&format!("server {server}")), text(&sentence(about))));
        for t in tools {
            let name = t["name"].as_str().unwrap_or("");
            out.push_str(&format!("  - [`{name}`](#{})\n", slug(&format!("{server} {name}"))));
        }
    }
    for (server, about, tools) in &servers {
        out.push_str(&format!("\n## The `{server}` server {{#{}}}\n\n", slug(&format!("server {server}"))));
        out.push_str(&format!("{}\n\n```text\ncairn mcp {server}\n```\n", text(&sentence(about))));
        for t in tools {
            tool(&mut out, server, t);
        }
    }
    out
}

fn tool(out: &mut String, server: &str, t: &Value) {
    let name = t["name"].as_str().unwrap_or("");
    out.push_str(&format!("\n### `{name}` {{#{}}}\n\n", slug(&format!("{server} {name}"))));
    out.push_str(&text(t["description"].as_str().unwrap_or("")));
    out.push_str("\n\n");
    let a = &t["annotations"];
    let hints: Vec<&str> = [
        ("readOnlyHint", "read-only"),
        ("destructiveHint", "destructive"),
        ("idempotentHint", "idempotent"),
        ("openWorldHint", "open world"),
    ]
    .into_iter()
    .filter(|(hint, _)| a[*hint].as_bool() == Some(true))
    .map(|(_, word)| word)
    .collect();
    if !hints.is_empty() {
        out.push_str(&format!("**Hints:** {}.\n\n", hints.join(", ")));
    }
    for (what, key) in [("Input", "inputSchema"), ("Output", "outputSchema")] {
        let schema = &t[key];
        if schema.is_null() {
            continue;
        }
        out.push_str(&format!("**{what}**\n\n"));
        let table = fields(schema, &|n: &str| format!("{} (below)", code(n)));
        let no_fields = schema["properties"].as_object().is_some_and(|p| p.is_empty());
        if no_fields {
            out.push_str(if key == "inputSchema" { "No arguments.\n\n" } else { "An empty object.\n\n" });
        } else {
            out.push_str(&table);
            out.push('\n');
        }
        let json = serde_json::to_string_pretty(schema).unwrap_or_default();
        out.push_str(&format!(
            "<details><summary>{what} JSON schema</summary>\n\n```json\n{json}\n```\n\n</details>\n\n"
        ));
    }
}
