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
    let mut statuses = RunStatus::ALL.to_vec();
    statuses.sort_by_key(|s| crate::commands::exit_code(*s));
    let rows: Vec<Vec<String>> = statuses
        .iter()
        .map(|s| vec![crate::commands::exit_code(*s).to_string(), code(s.as_str()), run_meaning(*s).to_string()])
        .collect();
    out.push_str(&table(&["Exit", "Run status", "Meaning"], &rows));
    out.push_str(&exit_one_elsewhere());
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
                cell(code_meaning(*c)),
            ]
        })
        .collect();
    out.push_str(&table(&["Code", "Kind", "Exit", "HTTP", "Meaning"], &rows));
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

/// The commands whose help says they exit 1 for something other than a BLOCKED run (`doctor`
/// with findings, `trace` of a file no run made), found in the CLI's own help texts.
fn exit_one_elsewhere() -> String {
    fn walk(cmd: &clap::Command, found: &mut Vec<String>) {
        for sub in cmd.get_subcommands().filter(|c| !c.is_hide_set() && c.get_name() != "help") {
            let about =
                sub.get_long_about().or(sub.get_about()).map(|s| s.to_string().to_lowercase()).unwrap_or_default();
            if about.contains("exit 1") || (about.contains("exit 0") && about.contains(" 1 when")) {
                let name = sub.get_bin_name().unwrap_or(sub.get_name()).to_string();
                found.push(format!("[`{name}`](cli.md#{})", super::slug(&name)));
            }
            walk(sub, found);
        }
    }
    let mut root = <crate::cli::Cli as clap::CommandFactory>::command();
    root.build();
    let mut found = Vec::new();
    walk(&root, &mut found);
    if found.is_empty() {
        return String::new();
    }
    format!("\nThese also exit 1 when what they check is not so, as their help says: {}.\n", found.join(", "))
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

/// What each code means, for the page. Exhaustive, so a new code does not build until it is
/// described here.
fn code_meaning(c: ErrorCode) -> &'static str {
    use ErrorCode as C;
    match c {
        C::RunNotFound => "No run has this id.",
        C::SourceRunNotFound => "The run a replay names as its source does not exist.",
        C::WorkflowNotFound => "No registered workflow (or version) has this name.",
        C::StepNotFound => "The run's workflow has no step of this id; the message lists its steps.",
        C::PlanNotFound => "No stored plan has this name.",
        C::TargetNotFound => "No target of this name is configured (`local` is built in).",
        C::JobNotFound => "No retained kernel job has this id.",
        C::VerificationNotFound => "No recorded verification has this id.",
        C::DraftNotFound => "No draft is kept for this title; give the document to verify.",
        C::NothingVerified => "No verification has passed yet, so there is no verified notebook.",
        C::NotebookUnreadable => "A verification's notebook cannot be read.",
        C::NoNotebook => "The verification proved no notebook (it failed, or has no verdict yet).",
        C::DocNotFound => "No procedure doc has this name.",
        C::DocVersionNotFound => "The doc has no such version; the message gives its range.",
        C::DocRemoved => "The doc was removed; its versions stay readable by number.",
        C::InvalidWorkflow => "The workflow file has problems; each is listed with its line, step and field.",
        C::InvalidWorkflowFolder => {
            "The workflow folder cannot be registered (a file missing or unreadable, a path outside it)."
        }
        C::InvalidReference => "Not a workflow reference: write NAME or NAME@VERSION.",
        C::InvalidRunId => "Not a valid run id: `[A-Za-z0-9._-]{1,128}`.",
        C::InvalidPlanName => "Not a valid plan name (the rules of a run id).",
        C::InvalidInput => "The run input (or what a step derives from it) is not what the workflow needs.",
        C::InvalidField => "A field of the request is out of its range or empty.",
        C::InvalidRunDir => "The run directory given cannot be used.",
        C::InvalidTarget => "The target's definition is invalid, or one of its files cannot be read.",
        C::TargetNotReady => "The target cannot take the run now; the message lists its problems.",
        C::TargetUnreachable => "The target could not be reached or checked; ask again once it is back.",
        C::TargetRefused => {
            "The target's host refused the connection (a host key not the pinned one, or a failed login): fix it, waiting will not."
        }
        C::ReplayOfItself => "A replay's run id is its source's: a replay makes a new child run.",
        C::ReplaySourceNotFinished => "The replay's source run has not finished as READY or BLOCKED.",
        C::ReplayOtherWorkflow => "The replay names a workflow other than its source's.",
        C::ReplayNoSteps => "A replay names no step to re-execute.",
        C::ReplayUnknownSteps => "A replay names steps the workflow does not have.",
        C::InvalidDocument => "The document to verify cannot be read as markdown with python cells or a notebook.",
        C::NoDocument => "No document was given, and no --title to re-verify a draft.",
        C::EmptyJob => "A kernel job without code.",
        C::KernelUnavailable => "No Python with ipykernel, or the kernel would not start.",
        C::TraceFileUnreadable => "The file to trace cannot be read.",
        C::InvalidDocName => "Not a valid doc name.",
        C::InvalidDocVersion => "Not a valid doc version.",
        C::InvalidDocText => "The doc's text cannot be saved (empty, too large, or with a control character).",
        C::InvalidDocQuery => "Not a valid full-text search (SQLite FTS5 syntax).",
        C::VerificationNotPassed => "A procedure doc may link only a verification that passed.",
        C::InvalidExportPath => "An export path lies outside its root or cannot be used.",
        C::InvalidRegistry => "The registry named cannot be used here (a state root keeps one registry).",
        C::ExecutionInputMismatch => {
            "The run id exists with another workflow, version or input; reuse an id only with the same ones."
        }
        C::StepRunning => {
            "A step is RUNNING and may be alive, so it is not restarted; after a crash use --resume-interrupted."
        }
        C::RunOwnedElsewhere => "The run executes in another live process.",
        C::WorkflowVersionConflict => "This name@version is registered with other content; bump the version.",
        C::SnapshotChanged => {
            "The registered snapshot of a workflow was changed on disk; register it again under a new version."
        }
        C::PlanAltered => "The stored plan's file was altered since it was stored.",
        C::PlanMismatch => "The plan id or checksum given is not the stored plan's.",
        C::PlanExecuted => "The plan was executed already: a plan executes once.",
        C::PlanStale => "Something the plan bound (an input file, readiness, the workflow) changed since planning.",
        C::ReceiptRefused => "The approval's receipt does not match the plan it is for.",
        C::KernelSlotTaken => {
            "The kernel slot is taken by another verification or session job, and the request asked not to wait."
        }
        C::DaemonStopping => "The daemon is stopping and takes nothing new.",
        C::StopRefused => "A step on a remote target could not be stopped; the message says why.",
        C::ArtifactChanged => "A reused step's artifact changed between a replay's plan and its copy.",
        C::ArtifactNotFound => "The step has no artifact of this name (or path).",
        C::ArtifactUnreadable => "The artifact's file cannot be read where it lies.",
        C::StaleToken => "Another attempt owns the step now, so this attempt's write was rejected.",
        C::LeaseLost => "This daemon no longer holds the run's lease; another took it over.",
        C::RunBusy => "Another daemon is writing the run at this moment; its claim is tried again later.",
        C::RunLeased => "Another live daemon drives the run; it continues there.",
        C::StaleRevision => "The run was changed by another writer since it was read.",
        C::RunFinished => "The run has finished and takes no new attempts (nor a cancel).",
        C::StepExists => "The step already has a record in this run.",
        C::PlanExists => "A plan of this name exists; plans are immutable, so choose another name.",
        C::ReceiptConsumed => "The receipt was used already: it approves one execution, once.",
        C::RunDirReserved => "Another run holds this run directory on this target.",
        C::TargetExists => "A target of this name exists already.",
        C::ExportExists => "The export's destination exists already.",
        C::ExportArtifactMismatch => {
            "An artifact's bytes no longer match the run's record; export with --no-data to reference it by hash."
        }
        C::BackupExists => "The backup's destination exists already; a backup is written only to a new path.",
        C::InvalidBackupPath => "The backup's destination cannot be used (inside the state root, say).",
        C::BackupUnsupported => "This registry is not one `cairn backup` copies (PostgreSQL: use pg_dump).",
        C::Forbidden => "The caller's grants do not allow this here; the error names the missing grant.",
        C::TwoPersonRequired => "The workflow's two-person rule refuses an approval by the plan's own author.",
        C::PrincipalNotFound => "No principal has this name.",
        C::RoleNotFound => "No role has this name.",
        C::GrantNotFound => "The principal has no such grant.",
        C::PrincipalExists => "A principal of this name exists (names are never reused, revoked ones included).",
        C::RoleExists => "A role of this name exists already.",
        C::InvalidName => "Not a valid principal or role name.",
        C::QuotaExceeded => "Over a quota: nothing was created.",
        C::QuotaQueued => "Over a quota with --queue: the run was created held, and waits for the use to free.",
        C::QuotaNotFound => "No such quota is set.",
        C::SecretMissing => "A secret a tool declares has no value in the store or the provider.",
        C::SecretProvider => "The external secret manager could not give a secret.",
        C::InvalidSecret => "Not a valid secret name or value.",
        C::Database => "The registry's database failed or cannot be reached.",
        C::Corrupt => "The registry holds a record this version of cairn cannot read.",
        C::Io => "A file of the state root could not be read or written (a full or failing disk).",
        C::Internal => "A bug: the message has the cause.",
        C::Interrupted => "Interrupted (Ctrl-C) before it finished.",
        C::Stopped => "The run was stopped (cancelled, or its daemon stopping) before it finished.",
    }
}
