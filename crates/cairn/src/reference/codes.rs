//! The exit codes and error codes page: from the tables that decide them at the binary's edge
//! (`commands::exit_code` for a run's status, `failure::exit_code` and `failure::http_status` for
//! an error's kind) and the engine's stable [`ErrorCode`]s, with the codes the API, the CLI and
//! the MCP servers give themselves.

use cairn_core::status::RunStatus;
use cairn_engine::{ErrorCode, ErrorKind};

use super::{cell, code, header, table, text};
use crate::failure::{exit_code, http_status};

/// The codes the binary's edge gives itself, not the engine: the code, who gives it, its HTTP
/// status, and its meaning. The `reference` test finds every such code in the source and fails
/// when one is missing here.
pub const EDGE_CODES: &[(&str, &str, u16, &str)] = &[
    ("body_too_large", "API", 413, "The body is larger than the API takes (1 MiB; 4 MiB for `POST /docs`)."),
    ("unsupported_media_type", "API", 415, "The body was not sent as `application/json`."),
    ("invalid_json", "API", 400, "The body is not JSON."),
    (
        "invalid_body",
        "API",
        422,
        "The body is JSON but not the request's shape (a field missing or of the wrong type).",
    ),
    ("invalid_query", "API", 400, "A query parameter is malformed."),
    ("invalid_path", "API", 400, "A path parameter is malformed."),
    ("not_found", "API", 404, "No such endpoint (or web app file)."),
    ("method_not_allowed", "API", 405, "The endpoint does not take that method."),
    (
        "forbidden_host",
        "API",
        403,
        "The Host header is not loopback (`127.0.0.1` or `localhost`): refused against DNS rebinding.",
    ),
    (
        "unauthorized",
        "API, MCP",
        401,
        "No bearer token, or one the daemon does not know (unknown, revoked or rotated).",
    ),
    ("forbidden", "API", 403, "A Viewer token asked for a change."),
    ("invalid_login", "API", 401, "The web app's login link is unknown, used or expired; run `cairn ui` again."),
    ("internal", "API, MCP", 500, "The request's worker failed: a bug; the message has the cause."),
    ("usage", "CLI", 0, "The command line or its input is wrong (exit 2)."),
    ("detached", "CLI", 0, "The person stopped waiting (Ctrl-C, exit 130); what was asked goes on in the daemon."),
    ("daemon_running", "CLI", 0, "A daemon already runs for this state root (exit 4)."),
    ("daemon_failed", "CLI", 0, "The daemon could not be started (exit 5); the message says why."),
    (
        "daemon_starting",
        "CLI",
        0,
        "The daemon lock is held but no live daemon is named yet: it is starting or stopping; try again (exit 4).",
    ),
    ("daemon_unreachable", "CLI, MCP", 503, "The daemon cannot be reached (exit 5); see `cairn daemon status`."),
    ("bad_answer", "MCP", 502, "The daemon's answer could not be read by this build."),
    ("invalid_request", "MCP", 400, "The request to the daemon could not be made."),
    ("invalid_arguments", "MCP", 422, "A tool's arguments do not match its input schema."),
    (
        "approval_unanswered",
        "MCP",
        502,
        "The MCP client did not answer `execute_plan`'s approval request; nothing was created.",
    ),
    (
        "approval_state_refused",
        "MCP",
        409,
        "The approval state given to `execute_plan` is refused; call it again without it to ask the person anew.",
    ),
    (
        "result_too_large",
        "MCP",
        413,
        "A tool's answer is larger than a tool result may hold; the message says what to ask instead.",
    ),
    ("error", "MCP", 0, "The daemon answered an error without the API's error body."),
];

pub(super) fn page() -> String {
    let mut out = header(
        "Exit codes and error codes",
        "the binary's exit and error tables (crates/cairn/src/failure.rs, cairn-engine's ErrorCode)",
    );
    out.push_str(
        "- [Exit codes](#exit-codes)\n- [Error codes](#error-codes)\n  - [By kind](#error-kinds)\n  - [Every code](#every-code)\n  \
         - [Codes of the binary's edge](#edge-codes)\n\n## Exit codes {#exit-codes}\n\n",
    );
    out.push_str("A command that runs or shows a run exits by the run's status:\n\n");
    let rows: Vec<Vec<String>> = RunStatus::ALL
        .iter()
        .map(|s| vec![crate::commands::exit_code(*s).to_string(), code(s.as_str()), run_meaning(*s).to_string()])
        .collect();
    out.push_str(&table(&["Exit", "Run status", "Meaning"], &rows));
    out.push_str("\nA command that fails exits by the kind of its error (below), `usage` errors of the command line included:\n\n");
    let rows: Vec<Vec<String>> = kinds()
        .into_iter()
        .map(|k| {
            vec![
                exit_code(k).to_string(),
                format!("[{}](#kind-{})", kind_name(k), kind_name(k)),
                kind_meaning(k).to_string(),
            ]
        })
        .collect();
    out.push_str(&table(&["Exit", "Error kind", "Meaning"], &rows));
    out.push_str(&text(
        "\nWith `--json`, a failure is also the one JSON object on stdout: `{\"error\": {\"code\", \"message\"}}`, \
         the same body as the HTTP API's errors.\n\n## Error codes {#error-codes}\n\n\
         Every error carries a stable machine code, the same from the CLI (`--json`), the HTTP API (the `code` \
         of its error body) and the MCP tools (their error result). A client branches on the code, never on \
         the message. The code decides the error's kind, and the kind alone decides the exit code and the HTTP status.\n\n\
         ### By kind {#error-kinds}\n\n",
    ));
    for k in kinds() {
        let codes: Vec<String> = ErrorCode::ALL
            .iter()
            .filter(|c| c.kind() == k)
            .map(|c| format!("[{}](#code-{})", code(c.as_str()), c.as_str()))
            .collect();
        out.push_str(&format!(
            "#### {} {{#kind-{}}}\n\nExit {}, HTTP {}. {}\n\nCodes: {}.\n\n",
            kind_name(k),
            kind_name(k),
            exit_code(k),
            http_status(k).as_u16(),
            kind_meaning(k),
            codes.join(", ")
        ));
    }
    out.push_str("### Every code {#every-code}\n\n");
    let mut codes: Vec<ErrorCode> = ErrorCode::ALL.to_vec();
    codes.sort_by_key(|c| c.as_str());
    let rows: Vec<Vec<String>> = codes
        .iter()
        .map(|c| {
            vec![
                format!("<span id=\"code-{}\"></span>{}", c.as_str(), code(c.as_str())),
                format!("[{}](#kind-{})", kind_name(c.kind()), kind_name(c.kind())),
                exit_code(c.kind()).to_string(),
                http_status(c.kind()).as_u16().to_string(),
            ]
        })
        .collect();
    out.push_str(&table(&["Code", "Kind", "Exit", "HTTP"], &rows));
    out.push_str("\n### Codes of the binary's edge {#edge-codes}\n\nThe API, the CLI and the MCP servers give these themselves, before or around the engine.\n\n");
    let mut edge = EDGE_CODES.to_vec();
    edge.sort_by_key(|c| c.0);
    let rows: Vec<Vec<String>> = edge
        .iter()
        .map(|(c, by, status, meaning)| {
            vec![code(c), (*by).to_string(), if *status == 0 { "—".into() } else { status.to_string() }, cell(meaning)]
        })
        .collect();
    out.push_str(&table(&["Code", "Given by", "HTTP", "Meaning"], &rows));
    out
}

/// Every kind some code has, in the order of their exit codes.
fn kinds() -> Vec<ErrorKind> {
    let mut kinds: Vec<ErrorKind> = Vec::new();
    for c in ErrorCode::ALL {
        if !kinds.contains(&c.kind()) {
            kinds.push(c.kind());
        }
    }
    kinds.sort_by_key(|k| (exit_code(*k), http_status(*k).as_u16()));
    kinds
}

fn kind_name(k: ErrorKind) -> &'static str {
    match k {
        ErrorKind::Invalid => "invalid",
        ErrorKind::NotFound => "not-found",
        ErrorKind::Conflict => "conflict",
        ErrorKind::Internal => "internal",
        ErrorKind::Unavailable => "unavailable",
        ErrorKind::Interrupted => "interrupted",
        ErrorKind::Forbidden => "forbidden",
        ErrorKind::OverQuota => "over-quota",
    }
}

fn kind_meaning(k: ErrorKind) -> &'static str {
    match k {
        ErrorKind::Invalid => "Bad input or usage: fix the request.",
        ErrorKind::NotFound => "Something named does not exist.",
        ErrorKind::Conflict => {
            "The request conflicts with stored state: an identity mismatch, a stale token, a running step, a refused approval."
        }
        ErrorKind::Internal => "A bug, or a registry that does not read as Cairn wrote it; the message has the cause.",
        ErrorKind::Unavailable => {
            "The environment failed: the registry's disk is full or failing, its database or a target cannot be reached. Nothing completed is lost; ask again once it has healed."
        }
        ErrorKind::Interrupted => "Stopped by the person (Ctrl-C) or a cancel before it finished.",
        ErrorKind::Forbidden => {
            "The caller may not do this: a grant is missing, or a two-person rule refuses it. Nothing changed."
        }
        ErrorKind::OverQuota => "Over a quota: refused now, it may be asked again once the use frees. Nothing changed.",
    }
}

fn run_meaning(s: RunStatus) -> &'static str {
    match s {
        RunStatus::Ready => "The run completed and every validator rule holds.",
        RunStatus::Blocked => "The run completed and the validator reported findings.",
        RunStatus::Failed => "A step failed for good (its attempts used up), or a rule could not be evaluated.",
        RunStatus::Cancelled => "The run was cancelled.",
        RunStatus::Pending | RunStatus::Running => {
            "The command returned while the run was still going (left to its daemon)."
        }
    }
}
