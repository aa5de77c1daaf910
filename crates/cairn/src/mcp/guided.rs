//! What a client expects of every server beside tools and resources: `prompts` (each server's guided
//! paths: plan → approve → run → inspect → replay and verify → keep on the workbench, a target's
//! set-up on compute, a person's review of a run on the app), `completion/complete` for their
//! arguments and the resource templates' (workflow names and versions, run ids, step ids, target
//! names, plan names, verification ids, doc names — read from the API as the caller may).

use rmcp::RoleServer;
use rmcp::model::{
    ArgumentInfo, CompleteRequestParams, CompleteResult, CompletionInfo, ErrorData, GetPromptRequestParams,
    GetPromptResult, ListPromptsResult, Prompt, PromptArgument, PromptMessage, Reference, Role,
};
use rmcp::service::RequestContext;
use serde_json::Value;

use super::Kind;
use super::api_client::{ApiClient, decode, seg};
use crate::wire::{DocList, PlanList, RunList, RunResult, VerificationRecord, WorkflowList};

/// A prompt's argument by name, if given.
type Args<'a> = &'a dyn Fn(&str) -> Option<String>;

/// One guided path: its name, what it is for, its arguments `(name, description, required)`,
/// and the instructions it renders from them.
struct Guide {
    name: &'static str,
    description: &'static str,
    arguments: &'static [(&'static str, &'static str, bool)],
    render: fn(Args<'_>) -> String,
}

const WORKBENCH: &[Guide] = &[
    Guide {
        name: "run_workflow",
        description: "Plan → approve → run → inspect a registered workflow, then replay what needs it",
        arguments: &[
            ("workflow", "The registered workflow's name (list_workflows)", true),
            ("version", "An exact version (default: the highest)", false),
            ("target", "Where to run: local (default), or a target's name (list_targets on compute)", false),
        ],
        render: |a| {
            let wf = a("workflow").unwrap_or_default();
            let version = a("version").map(|v| format!(", version {v}")).unwrap_or_default();
            let target = a("target").unwrap_or_else(|| "local".into());
            format!(
                "Run the Cairn workflow `{wf}`{version} on target `{target}` for me, step by step:\n\
                 1. describe_workflow(name=\"{wf}\") to read its steps, declared outputs and input schema (input_schema_document); build an input that satisfies the schema, asking me for anything you cannot derive.\n\
                 2. plan_run with that input, target \"{target}\" and a new absolute run_dir. It creates nothing. Show me its summary (commands, input files with their SHA-256, effects) and checksum.\n\
                 3. execute_plan with the plan's name, id and checksum. I approve it in the form my client shows (or in my client's tool confirmation); if I decline, nothing was created: ask me what to change.\n\
                 4. Follow it with get_run (or subscribe to cairn://runs/RUN_ID) until it is READY, BLOCKED or FAILED. READY means its steps completed and its validator rules held, not that the science is right.\n\
                 5. Inspect the evidence: get_step_result for a step's whole result, read_artifact for the files it wrote (with their SHA-256), explain_step for why a step ran or was reused, tail_log for a failure.\n\
                 6. If a step must run again (a fix, a new input slice), plan_replay(source_run_id, step_ids, run_dir) shows which steps are reused and why; approve it with execute_plan like any plan.\n\
                 Tell me at each step what you found, and what it does and does not prove."
            )
        },
    },
    Guide {
        name: "inspect_run",
        description: "Inspect a run's evidence (results, artifacts, decisions) and replay one of its steps",
        arguments: &[
            ("run_id", "The run (list_runs)", true),
            ("step_id", "A step to look at closely, or to replay", false),
        ],
        render: |a| {
            let run = a("run_id").unwrap_or_default();
            let step = match a("step_id") {
                Some(s) => format!(
                    "Then look closely at step `{s}`: get_step_result(run_id=\"{run}\", step_id=\"{s}\"), explain_step, and read_artifact for each of its artifacts. If it must run again, plan_replay(source_run_id=\"{run}\", step_ids=[\"{s}\"], run_dir=NEW) and show me the decisions before execute_plan."
                ),
                None => "Then name the steps whose evidence matters most, and why.".into(),
            };
            format!(
                "Inspect Cairn run `{run}`: get_run(run_id=\"{run}\") for its status, steps, findings and how it was approved. {step} Say what the evidence shows and what it does not; READY is not a scientific conclusion."
            )
        },
    },
    Guide {
        name: "verify_and_keep",
        description: "Verify a document in a fresh kernel, then keep it as a notebook and a procedure doc",
        arguments: &[
            (
                "path",
                "The document (markdown with fenced python cells, or an .ipynb), an absolute path on the daemon's host",
                true,
            ),
            ("doc", "The procedure doc's name to save it under", false),
        ],
        render: |a| {
            let path = a("path").unwrap_or_default();
            let doc = a("doc").unwrap_or_else(|| "a short name for the procedure".into());
            format!(
                "Verify the workflow document {path} with Cairn and keep what it proves:\n\
                 1. verify_workflow(path=\"{path}\"). It runs every cell in a fresh kernel and stops at the first failure (the cells really run). If it fails, read the failing cell and its error, fix the document, and verify again.\n\
                 2. When it passes, its notebook is kept (cairn://verifications/ID/notebook, with a provenance cell). Read cairn://guide on when a notebook is enough and when to keep a procedure doc.\n\
                 3. To keep the procedure for new data, write it minus its dataset (so an agent can re-run it, deriving its parameters there) and save_doc(name={doc}, text, verification_id=ID). list_docs and search_docs find it later.\n\
                 Tell me what the verification proved and what it did not."
            )
        },
    },
];

const COMPUTE: &[Guide] = &[Guide {
    name: "set_up_target",
    description: "Register an SSH or Slurm target and check it is ready for a run",
    arguments: &[
        ("name", "The target's name", true),
        ("ssh", "user@host[:port] of the machine", true),
        ("executor", "process (default) or slurm", false),
    ],
    render: |a| {
        let name = a("name").unwrap_or_default();
        let ssh = a("ssh").unwrap_or_default();
        let executor = a("executor").unwrap_or_else(|| "process".into());
        format!(
            "Set up the Cairn target `{name}` at {ssh} (executor {executor}):\n\
             1. add_target(name=\"{name}\", ssh=\"{ssh}\", workspace_root=ABSOLUTE PATH THERE, executor=\"{executor}\"); ask me for the workspace root, the identity file and known_hosts if you do not know them.\n\
             2. probe_target(name=\"{name}\"): what the machine has (python, snakemake, sbatch, free space). Tell me what is missing.\n\
             3. check_readiness(target=\"{name}\", run_dir=A NEW DIRECTORY UNDER THE WORKSPACE) before planning a run there with the workbench's plan_run."
        )
    },
}];

const APP: &[Guide] = &[Guide {
    name: "review_run",
    description: "Show a person a run: its status, steps, findings, artifacts and export",
    arguments: &[("run_id", "The run (runs_overview)", true)],
    render: |a| {
        let run = a("run_id").unwrap_or_default();
        format!(
            "Show me Cairn run `{run}`: run_detail(run_id=\"{run}\") for its status, steps and findings; read_artifact for the artifacts I ask about; export_run(run_id=\"{run}\") for its RO-Crate. Everything here only reads."
        )
    },
}];

fn guides(kind: Kind) -> &'static [Guide] {
    match kind {
        Kind::Workbench => WORKBENCH,
        Kind::Compute => COMPUTE,
        Kind::App => APP,
    }
}

pub fn list(kind: Kind) -> ListPromptsResult {
    ListPromptsResult::with_all_items(
        guides(kind)
            .iter()
            .map(|g| {
                let args = g
                    .arguments
                    .iter()
                    .map(|(n, d, r)| PromptArgument::new(*n).with_description(*d).with_required(*r))
                    .collect();
                Prompt::new(g.name, Some(g.description), Some(args))
            })
            .collect(),
    )
}

pub fn get(kind: Kind, request: &GetPromptRequestParams) -> Result<GetPromptResult, ErrorData> {
    let all = guides(kind);
    let g = all.iter().find(|g| g.name == request.name).ok_or_else(|| {
        let names: Vec<&str> = all.iter().map(|g| g.name).collect();
        ErrorData::invalid_params(
            format!("no prompt `{}` here; prompts/list has: {}", request.name, names.join(", ")),
            None,
        )
    })?;
    let args = request.arguments.clone().unwrap_or_default();
    for (name, _, required) in g.arguments {
        if *required && args.get(*name).and_then(Value::as_str).is_none_or(str::is_empty) {
            return Err(ErrorData::invalid_params(
                format!("prompt `{}` needs the argument `{name}`; completion/complete suggests values", g.name),
                None,
            ));
        }
    }
    if let Some(extra) = args.keys().find(|k| !g.arguments.iter().any(|(n, _, _)| n == k)) {
        return Err(ErrorData::invalid_params(format!("prompt `{}` takes no argument `{extra}`", g.name), None));
    }
    let arg = |n: &str| args.get(n).and_then(Value::as_str).filter(|s| !s.is_empty()).map(String::from);
    Ok(GetPromptResult::new(vec![PromptMessage::new_text(Role::User, (g.render)(&arg))])
        .with_description(g.description))
}

/// At most this many values a completion.
const MOST: usize = 100;

/// `completion/complete`: values for a prompt's argument or a resource template's, starting with
/// what the client has typed, read from the API with the caller's token.
pub async fn complete(
    daemon: &ApiClient,
    kind: Kind,
    request: &CompleteRequestParams,
    ctx: &RequestContext<RoleServer>,
) -> Result<CompleteResult, ErrorData> {
    let ArgumentInfo { name, value, .. } = &request.argument;
    let context = |n: &str| request.context.as_ref().and_then(|c| c.get_argument(n)).map(String::from);
    let known = match &request.r#ref {
        Reference::Prompt(p) => guides(kind)
            .iter()
            .find(|g| g.name == p.name)
            .is_some_and(|g| g.arguments.iter().any(|(n, _, _)| n == name)),
        Reference::Resource(r) => super::resources::templates()
            .resource_templates
            .iter()
            .any(|t| t.uri_template == r.uri && t.uri_template.contains(&format!("{{{name}}}"))),
        _ => false,
    };
    if !known {
        let what = match &request.r#ref {
            Reference::Prompt(p) => format!("prompt `{}`", p.name),
            Reference::Resource(r) => format!("resource template `{}`", r.uri),
            _ => "this reference".into(),
        };
        return Err(ErrorData::invalid_params(
            format!("{what} has no argument `{name}` here; prompts/list and resources/templates/list name them"),
            None,
        ));
    }
    // What is offered comes from the daemon's lists, read as their wire types; a list that cannot
    // be read offers nothing.
    async fn list<T: serde::de::DeserializeOwned>(
        daemon: &ApiClient,
        ctx: &RequestContext<RoleServer>,
        path: String,
    ) -> Option<T> {
        daemon.call(ctx, "GET", path, None).await.and_then(decode::<T>).ok()
    }
    let workflows = || async { list::<WorkflowList>(daemon, ctx, "/workflows".into()).await.map(|l| l.workflows) };
    let mut values: Vec<String> = match name.as_str() {
        "workflow" | "name" if !matches!(&request.r#ref, Reference::Prompt(p) if p.name == "set_up_target") => {
            workflows().await.into_iter().flatten().map(|w| w.name).collect()
        }
        "version" => {
            let wf = context("workflow").or_else(|| context("name"));
            let all = workflows().await.into_iter().flatten();
            all.filter(|w| wf.as_deref().is_none_or(|n| w.name == n)).map(|w| w.version).collect()
        }
        "run_id" => {
            let runs = list::<RunList>(daemon, ctx, format!("/runs?limit={MOST}")).await;
            runs.into_iter().flat_map(|l| l.runs).map(|r| r.run_id).collect()
        }
        "step_id" => match context("run_id") {
            Some(run) => {
                let run = list::<RunResult>(daemon, ctx, format!("/runs/{}", seg(&run))).await;
                run.into_iter().flat_map(|r| r.steps).map(|s| s.step_id).collect()
            }
            None => Vec::new(),
        },
        "target" => {
            let mut names = vec!["local".to_string()];
            let targets = list::<TargetNames>(daemon, ctx, "/targets".into()).await;
            names.extend(targets.into_iter().flat_map(|l| l.targets).map(|t| t.name));
            names
        }
        "plan_name" => {
            let plans = list::<PlanList>(daemon, ctx, "/plans".into()).await;
            plans.into_iter().flat_map(|l| l.plans).map(|p| p.plan_name).collect()
        }
        "verification_id" => {
            let all = list::<Verifications>(daemon, ctx, "/verifications".into()).await;
            all.into_iter().flat_map(|l| l.verifications).map(|v| v.verification_id).collect()
        }
        "doc" => {
            let docs = list::<DocList>(daemon, ctx, "/docs".into()).await;
            docs.into_iter().flat_map(|l| l.docs).map(|d| d.name).collect()
        }
        "executor" => vec!["process".into(), "slurm".into()],
        _ => Vec::new(),
    };
    values.retain(|v| v.starts_with(value.as_str()));
    values.dedup();
    let total = values.len();
    values.truncate(MOST);
    let info = CompletionInfo::with_pagination(values, Some(total as u32), total > MOST)
        .map_err(|e| ErrorData::internal_error(e, None))?;
    Ok(CompleteResult::new(info))
}

/// `GET /targets`, as completion reads it: each target's name (a configured target and `local`
/// differ in every other field).
#[derive(serde::Deserialize)]
struct TargetNames {
    targets: Vec<Named>,
}

#[derive(serde::Deserialize)]
struct Named {
    name: String,
}

/// `GET /verifications`.
#[derive(serde::Deserialize)]
struct Verifications {
    verifications: Vec<VerificationRecord>,
}
