//! The workbench server: an agent's operations. Planning is read-only; `execute_plan` is the only
//! tool that executes anything, and only the exact plan the person was shown.

use std::time::Duration;

use rmcp::handler::server::tool::{InputResponses as ToolInputResponses, RequestState};
use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::{CallToolResponse, CallToolResult, ElicitResult, InputRequiredResult};
use rmcp::schemars::{self, JsonSchema};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, tool, tool_router};
use serde::Deserialize;
use serde_json::{Value, json};

use cairn_core::plan::Plan;
use cairn_core::progress::RunProgress;
use cairn_engine::EngineError;

use super::api_client::{ApiClient, CallError, decode, invalid, seg, structured};
use super::approval::{self, Approvals, Ask, Verdict};
use super::logging::LogLevel;

use super::progress::{self, Progress};
use super::resources::{Subscriptions, server_handler};
use super::{EXPORT_RUN, ExportRun, LayersPage, READ_ARTIFACT, ReadArtifact, RunPage, RunRef};
use crate::wire::requests::ApprovedVia;
use crate::wire::{
    AddWorkflow, Followed, Job, PlanReplay, PlanRun, ReadDoc, RunResult, SaveDoc, SearchDocs, VERIFY_START_AT_LEAST,
    Verify, VerifyStreamEvent, to_value,
};

/// How long `execute_plan` and `execute_code` wait for an end before answering with the state now.
const WAIT_FOR_END: Duration = Duration::from_secs(60);

/// The media type of a streamed answer of JSON lines (a verification's).
const NDJSON: &str = "application/x-ndjson";

#[derive(Clone)]
pub struct Workbench {
    daemon: ApiClient,
    logging: LogLevel,
    approvals: Approvals,
    subscriptions: Subscriptions,
    tool_router: ToolRouter<Self>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct DescribeWorkflow {
    /// The workflow's name.
    pub name: String,
    /// An exact version (default: the highest registered).
    pub version: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ExecutePlan {
    /// The plan's name, as `plan_run` returned it.
    pub plan_name: String,
    /// The plan's id, as shown to the person.
    pub plan_id: String,
    /// The plan's checksum, as shown to the person.
    pub plan_checksum: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListRuns {
    /// Only runs with this status: PENDING, RUNNING, READY, BLOCKED, FAILED or CANCELLED.
    pub status: Option<String>,
    /// At most this many, newest first (default 50).
    pub limit: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct StepRef {
    pub run_id: String,
    pub step_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct PipelineJobsRef {
    pub run_id: String,
    pub step_id: String,
    /// Only this rule's jobs.
    pub rule: Option<String>,
    /// Only jobs in this status: running, finished, failed, retrying or interrupted.
    pub status: Option<String>,
    /// Jobs to skip, of those matching (default 0).
    pub offset: Option<usize>,
    /// At most this many jobs (default 100, at most 1000); `total` says how many matched.
    pub limit: Option<usize>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct TraceArtifact {
    /// The SHA-256 of the file's bytes (64 hexadecimal digits).
    pub sha256: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct TailLog {
    pub run_id: String,
    pub step_id: String,
    /// The last N lines (default 100, at most 10000).
    pub lines: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ExecuteCode {
    /// Python source (IPython syntax) for the session kernel.
    pub code: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct JobRef {
    pub job_id: String,
}

/// What a person is shown of a plan before approving it: workflow@version, target, run_dir,
/// every command, every input file with its SHA-256, and every effect.
fn plan_summary(plan: &Plan) -> String {
    let mut summary = format!(
        "Plan {} for {}@{} on target `{}`, in the new directory {}.\nCommands:\n",
        plan.plan_name, plan.workflow, plan.version, plan.target, plan.run_dir,
    );
    for c in &plan.commands {
        summary.push_str(&format!("  {}: {}\n", c.step_id, c.argv.join(" ")));
    }
    summary.push_str(&format!("Input files bound by checksum: {}.\n", plan.inputs.len()));
    for f in &plan.inputs {
        summary.push_str(&format!("  {} (sha256 {})\n", f.path, f.sha256));
    }
    summary.push_str("Effects:\n");
    for e in &plan.effects {
        summary.push_str(&format!("  {}\n", e.kind()));
    }
    summary
}

/// A plan as the tools return it: what to show the person, and what to approve it with.
fn plan_view(plan: &Plan) -> Value {
    let summary = plan_summary(plan)
        + "Nothing has been created. To run exactly this plan, call execute_plan with its name, id and checksum.";
    json!({
        "plan_name": plan.plan_name,
        "plan_id": plan.plan_id,
        "plan_checksum": plan.plan_checksum,
        "summary": summary,
        "workflow": plan.workflow,
        "version": plan.version,
        "target": plan.target,
        "run_dir": plan.run_dir,
        "commands": plan.commands,
        "inputs": plan.inputs,
        "effects": plan.effects,
        "readiness": plan.readiness,
    })
}

/// `POST /plans`'s answer: the plan, and beside it the forecast of a replay's pipeline jobs.
fn made_plan(mut answer: Value) -> Result<(Plan, Option<Value>), CallError> {
    let jobs = answer.as_object_mut().and_then(|o| o.remove("jobs"));
    Ok((decode(answer)?, jobs))
}

impl Workbench {
    /// Executes the plan if the person approved it; otherwise says so, having created nothing.
    async fn decided(
        &self,
        ctx: &RequestContext<RoleServer>,
        p: &ExecutePlan,
        verdict: Verdict,
        channel: ApprovedVia,
    ) -> CallToolResult {
        match verdict {
            Verdict::Approved => self.execute(ctx, p, channel).await,
            Verdict::Refused { action, why } => Verdict::refusal(&p.plan_name, action, &why).tool_result(),
        }
    }

    /// The run with the page of steps `p` asks for; without a `steps_limit`, as many as fit in a
    /// tool result (halved until the answer is under its bound, which `steps_page` then shows).
    async fn run_page(&self, ctx: &RequestContext<RoleServer>, p: &RunPage) -> CallToolResult {
        let mut limit = p.steps_limit;
        loop {
            let run = match self.daemon.call(ctx, "GET", p.path(limit), None).await {
                Ok(run) => run,
                Err(e) => return e.tool_result(),
            };
            let returned = run["steps_page"]["returned"].as_u64().unwrap_or(0) as usize;
            if p.steps_limit.is_some() || returned <= 1 || run.to_string().len() <= super::bounds::RESULT_MAX {
                return structured(run);
            }
            limit = Some(returned / 2);
        }
    }

    /// `POST /plans/{name}/execute`, recording how it was approved, then waits for the run's end.
    async fn execute(&self, ctx: &RequestContext<RoleServer>, p: &ExecutePlan, channel: ApprovedVia) -> CallToolResult {
        let body = to_value(&crate::wire::requests::ExecutePlan {
            plan_id: p.plan_id.clone(),
            plan_checksum: p.plan_checksum.clone(),
            approval: Some(channel),
        });
        match self.daemon.call(ctx, "POST", format!("/plans/{}/execute", seg(&p.plan_name)), Some(body)).await {
            Ok(run) => self.follow_run(ctx, run).await,
            Err(e) => e.tool_result(),
        }
    }

    /// Waits up to `WAIT_FOR_END` for the run to end, following its events (the daemon's run
    /// follower), and reporting its steps (and a pipeline step's jobs) as progress when the caller
    /// asked for it; answers with the run as it is then.
    async fn follow_run(&self, ctx: &RequestContext<RoleServer>, run: Value) -> CallToolResult {
        let queued = match decode::<RunResult>(run.clone()) {
            Ok(queued) if !queued.has_ended() => queued,
            // Ended already (or not a run this build reads): the answer as the daemon gave it.
            _ => return structured(run),
        };
        let id = queued.run_id;
        let mut seen = RunProgress::new(queued.step_counts.total.max(queued.steps.len()));
        let mut progress = Progress::of(ctx);
        if let Some(progress) = progress.as_mut() {
            let f = seen.fraction();
            progress.report(f.done, Some(f.total), f.message).await;
        }
        let mut events = match self.daemon.follow(ctx, &id, 0).await {
            Ok(events) => events,
            Err(e) => return e.tool_result(),
        };
        let deadline = tokio::time::sleep(WAIT_FOR_END);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                item = events.recv() => {
                    let event = match item {
                        Some(Followed::Event(event)) => event,
                        Some(Followed::Waiting(notice)) => {
                            if let Some(progress) = progress.as_mut() {
                                let f = seen.fraction();
                                let message = match &notice.waiting {
                                    Some(w) => format!("waiting since {} for its environment ({}): {}; it continues by itself once this clears", w.since, w.code, w.reason),
                                    None => "its environment is back; it goes on".to_string(),
                                };
                                progress.say(Some(f.total), message).await;
                            }
                            continue;
                        }
                        None => break,
                    };
                    if let Some(e) = event.event() {
                        seen.feed(event.step_id.as_deref(), &e);
                    }
                    if let Some(progress) = progress.as_mut() {
                        let f = seen.fraction();
                        progress.report(f.done, Some(f.total), f.message).await;
                    }
                }
                _ = &mut deadline => break,
            }
        }
        self.run_page(ctx, &RunPage { run_id: id, ..RunPage::default() }).await
    }

    /// The verification streamed (`POST /verifications` as JSON lines, the stream `cairn verify`
    /// reads), its cells done of total reported as progress as they end. Answers with the result,
    /// or after `wait` with the running verification's id (it goes on: the rest of its stream is
    /// read, unheard), as the POST with `wait` would.
    async fn verify_reporting(
        &self,
        ctx: &RequestContext<RoleServer>,
        p: Verify,
        mut progress: Progress,
    ) -> CallToolResult {
        let wait = match p.wait_for() {
            Ok(wait) => wait.unwrap_or(WAIT_FOR_END),
            Err(e) => return CallError::of_engine(&e).tool_result(),
        };
        let body = to_value(&Verify { wait: None, ..p });
        let parse = |line: &str| serde_json::from_str::<VerifyStreamEvent>(line).ok();
        let mut lines = match self.daemon.stream(ctx, "POST", "/verifications".into(), Some(body), NDJSON, parse).await
        {
            Ok(lines) => lines,
            Err(e) => return e.tool_result(),
        };
        let asked = tokio::time::Instant::now();
        let (mut started, mut title, mut done, mut total) = (None::<String>, None::<String>, 0, 0);
        loop {
            // Its kernel's start counts too: at least a short while, even for `wait: 0`.
            let until = asked + if started.is_some() { wait } else { wait.max(VERIFY_START_AT_LEAST) };
            let event = match tokio::time::timeout_at(until, lines.recv()).await {
                Ok(Some(event)) => event,
                Ok(None) => {
                    return CallError::new(502, "bad_answer", "the verification's stream ended before its verdict")
                        .tool_result();
                }
                Err(_) => return self.left_running(started, lines),
            };
            match event {
                VerifyStreamEvent::Started { verification_id } => {
                    let path = format!("/kernel/jobs/{}", seg(&verification_id));
                    // Its title, read once: the stream names only its id.
                    title = self
                        .daemon
                        .call(ctx, "GET", path, None)
                        .await
                        .and_then(decode::<Job>)
                        .ok()
                        .and_then(|j| j.title);
                    started = Some(verification_id);
                }
                VerifyStreamEvent::CellStarted { total: t, .. } => total = t,
                VerifyStreamEvent::CellFinished { .. } => {
                    done += 1;
                    let (done, total, message) = progress::cells(title.as_deref(), done, total);
                    progress.report(done, Some(total), message).await;
                }
                VerifyStreamEvent::Message { .. } => {}
                VerifyStreamEvent::Result { result } => {
                    let (done, total, message) = progress::ended_cells(&result);
                    progress.report(done, Some(total), message).await;
                    return structured(to_value(&*result));
                }
                VerifyStreamEvent::Error { status, error } => return CallError::of_detail(status, error).tool_result(),
            }
        }
    }

    /// `wait` passed: a verification that started goes on, its id the answer (the rest of its
    /// stream is read, so it is not taken for a caller that hung up); one that did not is
    /// stopped, as its stream is dropped, and nothing ran.
    fn left_running(
        &self,
        started: Option<String>,
        mut lines: tokio::sync::mpsc::Receiver<VerifyStreamEvent>,
    ) -> CallToolResult {
        let Some(id) = started else {
            let e = EngineError::invalid_field(
                "wait",
                "the verification did not start within `wait`; nothing ran: raise it",
            );
            return CallError::of_engine(&e).tool_result();
        };
        tokio::spawn(async move { while lines.recv().await.is_some() {} });
        structured(
            json!({"verification_id": id, "status": "running", "poll": format!("GET /kernel/jobs/{id} (MCP poll_job)")}),
        )
    }
}

#[tool_router(vis = "pub(super)")]
impl Workbench {
    /// `approvals` is shared by every session of this process, so a sealed approval request is
    /// accepted once whichever session brings it back.
    pub fn new(daemon: ApiClient, approvals: Approvals) -> Workbench {
        Workbench {
            daemon,
            approvals,
            subscriptions: Subscriptions::default(),
            logging: LogLevel::default(),
            tool_router: super::schemas::attach(super::Kind::Workbench, Self::tool_router()),
        }
    }

    #[tool(
        description = "List registered workflows and their versions. Read-only.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn list_workflows(&self, ctx: RequestContext<RoleServer>) -> CallToolResult {
        self.daemon.tool(&ctx, "GET", "/workflows".into(), None).await
    }

    #[tool(
        description = "Register a workflow folder on the daemon's host (give its absolute path): a Cairn workflow.toml, or a Snakemake/Nextflow pipeline's folder with a workflow.toml beside its source. Validated and snapshotted exactly as `cairn workflow add`; executes nothing. A rejected folder returns every problem at once in error.problems ([{file, line, step, field, message}]). Re-adding the same content changes nothing (registered: false). Needs the Operator token.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn add_workflow(
        &self,
        Parameters(p): Parameters<AddWorkflow>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.daemon.tool(&ctx, "POST", "/workflows".into(), Some(to_value(&p))).await
    }

    #[tool(
        description = "One workflow version: its steps in execution order (each with its declared outputs), tools with digests, validator rules, and its input schema (input_schema_document, JSON Schema 2020-12: what plan_run's input must satisfy). Read-only.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn describe_workflow(
        &self,
        Parameters(p): Parameters<DescribeWorkflow>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let mut path = format!("/workflows/{}", seg(&p.name));
        if let Some(v) = &p.version {
            path.push_str(&format!("?version={}", seg(v)));
        }
        self.daemon.tool(&ctx, "GET", path, None).await
    }

    #[tool(
        description = "Plan a run. Read-only: checks the input and the target's readiness, then stores an immutable plan (every command, input file checksum and effect) and creates nothing. Returns plan_name, plan_id, plan_checksum and a summary to show the person before execute_plan.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn plan_run(&self, Parameters(p): Parameters<PlanRun>, ctx: RequestContext<RoleServer>) -> CallToolResult {
        match self.daemon.call(&ctx, "POST", "/plans".into(), Some(to_value(&p))).await.and_then(made_plan) {
            Ok((plan, _)) => structured(plan_view(&plan)),
            Err(e) => e.tool_result(),
        }
    }

    #[tool(
        description = "Plan a selective replay of a finished run into a new child run: the dry-run decisions (per step: reuse the source's evidence, with the reason, or re-execute), then a plan like plan_run's. Read-only; the source run never changes.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn plan_replay(
        &self,
        Parameters(p): Parameters<PlanReplay>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        if p.step_ids.is_empty() {
            return invalid("step_ids is empty; name at least one step to re-execute");
        }
        let body = to_value(&PlanRun::from(p));
        match self.daemon.call(&ctx, "POST", "/plans".into(), Some(body)).await.and_then(made_plan) {
            Ok((plan, jobs)) => {
                let mut view = plan_view(&plan);
                view["decisions"] = json!(plan.replay.as_ref().map(|r| &r.decisions));
                view["source_run_id"] = json!(plan.replay.as_ref().map(|r| &r.source_run_id));
                if let Some(jobs) = jobs {
                    view["jobs"] = jobs;
                }
                structured(view)
            }
            Err(e) => e.tool_result(),
        }
    }

    #[tool(
        description = "Approve and execute exactly the plan shown to the person: the only tool that executes anything. When the client supports elicitation, the person is first asked in the client (a form with the plan's summary, checksum and a confirmation; on protocol 2026-07-28 as an input request of this call): only their approval executes it, and a decline or cancel creates nothing (error approval_declined / approval_cancelled). Otherwise the host's own tool-call confirmation is the approval. Refused if the plan, an input file or the target's readiness changed, or if the plan ran already. Waits up to 60 s for the run to end and returns the run, with `approval` saying how it was approved (status RUNNING if it goes on: follow it with get_run).",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = true)
    )]
    async fn execute_plan(
        &self,
        Parameters(p): Parameters<ExecutePlan>,
        ctx: RequestContext<RoleServer>,
        RequestState(state): RequestState,
        ToolInputResponses(responses): ToolInputResponses,
    ) -> CallToolResponse {
        let ask = Ask::of(&ctx);
        let channel = match ask {
            Ask::Host => return self.execute(&ctx, &p, ApprovedVia::Host).await.into(),
            Ask::Elicitation => ApprovedVia::Elicitation,
            Ask::InputRequired => ApprovedVia::InputRequired,
        };
        let principal = match self.daemon.principal(&ctx) {
            Ok(who) => who,
            Err(e) => return e.tool_result().into(),
        };
        // The answer to an input request: accepted once, for this caller and exactly this plan.
        if let (Ask::InputRequired, Some(sealed)) = (ask, state) {
            if let Err(e) = self.approvals.accept(&sealed, &principal, &p.plan_name, &p.plan_id, &p.plan_checksum) {
                return e.tool_result().into();
            }
            let answer = responses.as_ref().and_then(|r| r.get(approval::INPUT_KEY)).cloned();
            let verdict = match answer.map(serde_json::from_value::<ElicitResult>) {
                Some(Ok(r)) => Verdict::of(&r),
                Some(Err(e)) => return invalid(format!("inputResponses.approval is not an elicitation result: {e}")).into(),
                None => return invalid("the call carries requestState but no inputResponses.approval; call execute_plan again without requestState to ask anew").into(),
            };
            return self.decided(&ctx, &p, verdict, channel).await.into();
        }
        // The plan the person is asked about: the stored one. One that is not what the agent
        // names (another id or checksum, or none) is refused by the daemon without asking.
        let stored = self.daemon.call(&ctx, "GET", format!("/plans/{}", seg(&p.plan_name)), None).await;
        let plan = match stored.and_then(decode::<Plan>) {
            Ok(plan) if plan.plan_id == p.plan_id && plan.plan_checksum == p.plan_checksum => plan,
            Ok(_) => return self.execute(&ctx, &p, channel).await.into(),
            Err(e) => return e.tool_result().into(),
        };
        let form = match approval::form(&plan_summary(&plan), &p.plan_checksum) {
            Ok(form) => form,
            Err(e) => return e.tool_result().into(),
        };
        match ask {
            Ask::InputRequired => match self.approvals.seal(&principal, &p.plan_name, &p.plan_id, &p.plan_checksum) {
                Ok(sealed) => InputRequiredResult::new(Some(approval::input_requests(form)), Some(sealed)).into(),
                Err(e) => e.tool_result().into(),
            },
            _ => match approval::elicit(&ctx, form).await {
                Ok(verdict) => self.decided(&ctx, &p, verdict, channel).await.into(),
                Err(e) => e.tool_result().into(),
            },
        }
    }

    #[tool(
        description = "Runs, newest first, optionally of one status. Read-only.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn list_runs(&self, Parameters(p): Parameters<ListRuns>, ctx: RequestContext<RoleServer>) -> CallToolResult {
        let mut path = format!("/runs?limit={}", p.limit.unwrap_or(50));
        if let Some(s) = &p.status {
            path.push_str(&format!("&status={}", seg(s)));
        }
        self.daemon.tool(&ctx, "GET", path, None).await
    }

    #[tool(
        description = "One run: status, its steps' counts by status (step_counts), its steps with attempts, outcomes and timings (every step of a small run; of a large one a page, steps_page saying which and where the next starts: page with steps_offset and steps_limit, or ask for steps_status=FAILED,RUNNING, steps_order=attention or the steps of one layer of the DAG with steps_layer), validator findings, and for a replay child its decisions with reasons. READY means the steps completed and the validator's rules held, not that the science is right. Read-only.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn get_run(&self, Parameters(p): Parameters<RunPage>, ctx: RequestContext<RoleServer>) -> CallToolResult {
        self.run_page(&ctx, &p).await
    }

    #[tool(
        description = "One run's DAG by layers (layer 0: the steps that need none; a step's layer is one more than its deepest need's), each layer with its steps' counts by status and its first steps: how a huge run's graph is read. get_run with steps_layer pages a layer's steps. Paged: offset, limit (default 1000 layers). Read-only.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn get_run_layers(
        &self,
        Parameters(p): Parameters<LayersPage>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.daemon.tool(&ctx, "GET", p.path(), None).await
    }

    #[tool(
        description = "Why one step of a run was executed, reused or invalidated, with its signature and attempts. Read-only.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn explain_step(
        &self,
        Parameters(p): Parameters<StepRef>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let path = format!("/runs/{}/steps/{}/explain", seg(&p.run_id), seg(&p.step_id));
        self.daemon.tool(&ctx, "GET", path, None).await
    }

    #[tool(
        description = "Which runs recorded these bytes (a file's SHA-256): every artifact with them, oldest first, with its run, step, workflow and signature, the replays that carried it, and for a pipeline step's file the job that wrote it and the jobs behind its inputs back to the pipeline's own files, each input with its SHA-256. Read-only.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn trace_artifact(
        &self,
        Parameters(p): Parameters<TraceArtifact>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.daemon.tool(&ctx, "GET", format!("/artifacts?sha256={}", seg(&p.sha256)), None).await
    }

    #[tool(
        description = "A pipeline step's jobs (a snakemake step): each job its controller ran, with its rule, wildcards, Snakemake's reason for running it, its inputs (each naming the job of the step that wrote it), its outputs with size and SHA-256 as they were when it finished, start, end, status and tries, and each rule's counts. Paged: 100 jobs by default (limit up to 1000, offset), filtered by rule or status (failed first: status=failed). Read-only.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn get_pipeline_jobs(
        &self,
        Parameters(p): Parameters<PipelineJobsRef>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let limit = p.limit.unwrap_or(100).clamp(1, 1000);
        let mut path = format!(
            "/runs/{}/steps/{}/jobs?limit={limit}&offset={}",
            seg(&p.run_id),
            seg(&p.step_id),
            p.offset.unwrap_or(0)
        );
        for (key, value) in [("rule", &p.rule), ("status", &p.status)] {
            if let Some(v) = value {
                path.push_str(&format!("&{key}={}", seg(v)));
            }
        }
        self.daemon.tool(&ctx, "GET", path, None).await
    }

    #[tool(
        description = "One step of a run: its status, its result (the tool's JSON, whole where get_run cuts results over 64 KiB; one over 192 KiB comes as the start of its text with result_truncated, and whole from the resource result_resource, cairn://runs/{run_id}/steps/{step_id}/result) and its artifacts (the files it produced, with path, size and SHA-256). Read-only.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn get_step_result(
        &self,
        Parameters(p): Parameters<StepRef>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let path = format!("/runs/{}/steps/{}", seg(&p.run_id), seg(&p.step_id));
        match self.daemon.call(&ctx, "GET", path, None).await {
            Ok(step) => structured(super::bounds::step_result(step, &p.run_id, &p.step_id)),
            Err(e) => e.tool_result(),
        }
    }

    #[tool(
        description = READ_ARTIFACT,
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = true)
    )]
    async fn read_artifact(
        &self,
        Parameters(p): Parameters<ReadArtifact>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.daemon.tool(&ctx, "GET", p.path(), None).await
    }

    #[tool(
        description = EXPORT_RUN,
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn export_run(
        &self,
        Parameters(p): Parameters<ExportRun>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.daemon.tool(&ctx, "GET", p.path(), None).await
    }

    #[tool(
        description = "The last lines of a step's log (its stderr; read over SSH, bounded, while a remote step runs). Read-only.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn tail_log(&self, Parameters(p): Parameters<TailLog>, ctx: RequestContext<RoleServer>) -> CallToolResult {
        let path = format!("/runs/{}/steps/{}/log?lines={}", seg(&p.run_id), seg(&p.step_id), p.lines.unwrap_or(100));
        self.daemon.tool(&ctx, "GET", path, None).await
    }

    #[tool(
        description = "Cancel a running run: its running steps are stopped (process groups, Slurm jobs, pipeline controllers) and it ends CANCELLED. Completed steps stay recorded.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = true)
    )]
    async fn cancel_run(&self, Parameters(p): Parameters<RunRef>, ctx: RequestContext<RoleServer>) -> CallToolResult {
        self.daemon.tool(&ctx, "POST", format!("/runs/{}/cancel", seg(&p.run_id)), None).await
    }

    #[tool(
        description = "Verify a workflow document (markdown with fenced python cells, or an .ipynb; give its text as `document` or a file as `path`) in a fresh, disposable kernel: stops at the first failing cell, keeps the proven notebook (a provenance cell first) or a draft to fix. `parameters` are injected as papermill does. Waits up to `wait` seconds (default 60) and returns the result, or `{verification_id, status: running}` to follow with poll_job; interrupt_kernel stops it. The cells really run: their side effects are not undone.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = true)
    )]
    async fn verify_workflow(
        &self,
        Parameters(p): Parameters<Verify>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        // An agent is answered within a minute: with the verdict, or the running verification's
        // id to poll.
        let p = Verify { wait: Some(p.wait.unwrap_or(60)), ..p };
        match Progress::of(&ctx) {
            Some(progress) => self.verify_reporting(&ctx, p, progress).await,
            None => self.daemon.tool(&ctx, "POST", "/verifications".into(), Some(to_value(&p))).await,
        }
    }

    #[tool(
        description = "Run code in the session kernel (one long-lived kernel; state carries between jobs). Waits up to 60 s and returns the job with its outputs (status queued or running if it goes on: poll_job). Refused while a verification holds the kernel slot.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = true)
    )]
    async fn execute_code(
        &self,
        Parameters(p): Parameters<ExecuteCode>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        match self.daemon.call(&ctx, "POST", "/kernel/jobs".into(), Some(json!({"code": p.code}))).await {
            Ok(job) => match decode::<Job>(job) {
                // The daemon answers once the job has ended, or as it stands after the wait.
                Ok(job) => {
                    let path = format!("/kernel/jobs/{}?wait={}", seg(&job.job_id), WAIT_FOR_END.as_secs());
                    self.daemon.tool(&ctx, "GET", path, None).await
                }
                Err(e) => e.tool_result(),
            },
            Err(e) => e.tool_result(),
        }
    }

    #[tool(
        description = "One session-kernel job (status, outputs so far, timings), or a verification by its id (cells done of total while it runs; its result once it has a verdict). Read-only.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn poll_job(&self, Parameters(p): Parameters<JobRef>, ctx: RequestContext<RoleServer>) -> CallToolResult {
        self.daemon.tool(&ctx, "GET", format!("/kernel/jobs/{}", seg(&p.job_id)), None).await
    }

    #[tool(
        description = "The session kernel's jobs, oldest first, and every verification in progress (kind `verification`, cells done of total). Read-only.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn list_jobs(&self, ctx: RequestContext<RoleServer>) -> CallToolResult {
        self.daemon.tool(&ctx, "GET", "/kernel/jobs".into(), None).await
    }

    #[tool(
        description = "Send KeyboardInterrupt to the running session job (the kernel and its state survive), and stop any verification in progress: no further cell, the running one interrupted, its kernel killed after 2 s.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn interrupt_kernel(&self, ctx: RequestContext<RoleServer>) -> CallToolResult {
        self.daemon.tool(&ctx, "POST", "/kernel/interrupt".into(), None).await
    }

    #[tool(
        description = "Kill the session kernel (its state is lost, queued and running jobs end cancelled; the next job starts a fresh kernel), and the kernel of any verification in progress.",
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn restart_kernel(&self, ctx: RequestContext<RoleServer>) -> CallToolResult {
        self.daemon.tool(&ctx, "POST", "/kernel/restart".into(), None).await
    }

    #[tool(
        description = "The procedure docs in the doc index, by name, each with its newest version's title. A procedure doc holds a proven procedure minus its dataset, for an agent to re-run on new data (read cairn://guide: when to keep a notebook and when a doc). Read-only.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn list_docs(&self, ctx: RequestContext<RoleServer>) -> CallToolResult {
        self.daemon.tool(&ctx, "GET", "/docs".into(), None).await
    }

    #[tool(
        description = "One procedure doc: its markdown text (the newest version, or `version`), every version, and the passed verification (and notebook) it was saved from. Read-only.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn read_doc(&self, Parameters(p): Parameters<ReadDoc>, ctx: RequestContext<RoleServer>) -> CallToolResult {
        let (name, version) = match p.reference() {
            Ok(r) => r,
            Err(e) => return invalid(e.to_string()),
        };
        let mut path = format!("/docs/{}", seg(&name));
        if let Some(v) = version {
            path.push_str(&format!("?version={v}"));
        }
        self.daemon.tool(&ctx, "GET", path, None).await
    }

    #[tool(
        description = "Full-text search over the newest version of every procedure doc (SQLite FTS5 syntax: words, all of which must match, \"a phrase\", OR, NOT, prefix*; quote a word with punctuation such as \"k-means\"). Best first (BM25; a match in the name or title weighs more), each with a snippet whose matches are in **bold**. Read-only.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn search_docs(
        &self,
        Parameters(p): Parameters<SearchDocs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let mut path = format!("/docs/search?query={}", seg(&p.query));
        if let Some(n) = p.limit {
            path.push_str(&format!("&limit={n}"));
        }
        self.daemon.tool(&ctx, "GET", path, None).await
    }

    #[tool(
        description = "Save a new version of a procedure doc: markdown (at most 1 MiB) holding the procedure minus the dataset, written so an agent can re-run it on new data, deriving its parameters there. Versions are numbered 1, 2, … and never overwritten; the same text again saves nothing (created: false). Give `verification_id` of the passed verification that proved the procedure to link it and its notebook. Needs the Operator token.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn save_doc(&self, Parameters(p): Parameters<SaveDoc>, ctx: RequestContext<RoleServer>) -> CallToolResult {
        self.daemon.tool(&ctx, "POST", "/docs".into(), Some(to_value(&p))).await
    }
}

server_handler!(
    Workbench,
    super::Kind::Workbench,
    "cairn-workbench",
    "Cairn's workbench: plan, approve and run registered workflows durably, replay them selectively, verify documents, keep proven procedures as docs, and use a session kernel. Planning is read-only; execute_plan runs exactly the plan shown to the person. Read cairn://guide first."
);
