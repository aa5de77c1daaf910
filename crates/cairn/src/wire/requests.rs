//! The requests the surfaces send, one type per use case: parsed from the command line (clap),
//! deserialised from an HTTP body (axum, described by utoipa) and taken as MCP tool arguments
//! (rmcp, described by schemars). Each says on its fields what each surface needs (a field only
//! the command line has is `#[serde(skip)]`; one only the API has is `#[arg(skip)]`; an MCP
//! tool's schema is cut to the arguments its contract names) and converts to the engine's typed
//! request in one place, so the three cannot drift.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cairn_core::ids::RunId;
use cairn_engine::EngineError;
use cairn_engine::verify::Document;
use rmcp::schemars::{self, JsonSchema, Schema};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;

/// Keeps only `keep` of an MCP tool's argument schema and marks `required` as required: the
/// tool's contract (docs/src/design.md) names its arguments exactly.
fn mcp_arguments(schema: &mut Schema, keep: &[&str], required: &[&str]) {
    if let Some(obj) = schema.as_object_mut() {
        if let Some(Value::Object(props)) = obj.get_mut("properties") {
            props.retain(|k, _| keep.contains(&k.as_str()));
        }
        if required.is_empty() {
            obj.remove("required");
        } else {
            obj.insert("required".into(), json!(required));
        }
    }
}

fn required_field(field: &'static str, what: &str) -> EngineError {
    EngineError::InvalidField { field, message: format!("{field} is required: {what}") }
}

// ------------------------------------------------------------------------------------ runs

/// `POST /runs`: run a registered workflow, or replay steps of a finished run into a child run.
/// The workflow is `workflow`/`version`, as in `POST /plans`; the older names `agent_id` and
/// `agent_version` are accepted too.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(try_from = "SubmitRunBody")]
pub struct SubmitRun {
    /// The conversation or job this run belongs to (recorded with the run).
    #[schema(min_length = 1, max_length = 256, pattern = "\\S")]
    pub thread_id: String,
    /// The registered workflow's name (also accepted as `agent_id`); a replay may omit it (the
    /// source's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, pattern = "\\S")]
    pub workflow: Option<String>,
    /// Its version (default: the highest registered; for a replay, the source's); also accepted
    /// as `agent_version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The run input, checked against the workflow's input schema. Required for a run; for a
    /// replay, the source's input when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub input: Option<Value>,
    /// Choose the run id (`[A-Za-z0-9._-]{1,128}`); the same id with the same identity is idempotent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[A-Za-z0-9._-]{1,128}$")]
    pub run_id: Option<String>,
    /// Replay steps of a READY or BLOCKED source run into a new child run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<ReplayDirective>,
    /// How many ready steps may run at once (1 to 256, default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 256)]
    pub parallel: Option<u16>,
}

/// What `POST /runs` reads, before the workflow's two names are reconciled.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubmitRunBody {
    thread_id: String,
    #[serde(default)]
    workflow: Option<String>,
    #[serde(default)]
    agent_id: Option<String>,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    agent_version: Option<String>,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    run_id: Option<String>,
    #[serde(default)]
    replay: Option<ReplayDirective>,
    #[serde(default)]
    parallel: Option<u16>,
}

impl TryFrom<SubmitRunBody> for SubmitRun {
    type Error = String;
    fn try_from(b: SubmitRunBody) -> Result<SubmitRun, String> {
        let one = |new: Option<String>, old: Option<String>, name: &str, alias: &str| match (new, old) {
            (Some(_), Some(_)) => {
                Err(format!("give `{name}` once: `{name}` and its older name `{alias}` were both given"))
            }
            (a, b) => Ok(a.or(b)),
        };
        let workflow = one(b.workflow, b.agent_id, "workflow", "agent_id")?;
        if workflow.is_none() && b.replay.is_none() {
            return Err(
                "missing field `workflow` (or its older name `agent_id`): name the registered workflow to run".into()
            );
        }
        Ok(SubmitRun {
            thread_id: b.thread_id,
            workflow,
            version: one(b.version, b.agent_version, "version", "agent_version")?,
            input: b.input,
            run_id: b.run_id,
            replay: b.replay,
            parallel: b.parallel,
        })
    }
}

impl SubmitRun {
    pub fn into_request(self) -> cairn_engine::SubmitRun {
        cairn_engine::SubmitRun {
            thread_id: self.thread_id,
            workflow: self.workflow,
            version: self.version,
            input: self.input,
            run_id: self.run_id,
            replay: self.replay.map(|r| (RunId::lookup(r.source_run_id), r.step_ids)),
            parallelism: self.parallel.map(usize::from).unwrap_or(1),
        }
    }
}

/// Replay steps of a finished run into a new child run.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayDirective {
    pub source_run_id: String,
    /// Steps to re-execute; their descendants re-execute too.
    pub step_ids: Vec<String>,
}

// ------------------------------------------------------------------------------------ plans

/// Plan a run (read-only: it stores an immutable plan and creates nothing at `run_dir`):
/// `cairn plan`, `POST /plans`, and the MCP workbench's `plan_run`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, JsonSchema, clap::Args)]
#[serde(deny_unknown_fields)]
#[schemars(transform = plan_run_arguments)]
#[group(skip)]
pub struct PlanRun {
    /// The registered workflow's name (on the command line NAME or NAME@VERSION); for a replay,
    /// optional (the source's workflow), or another version of it.
    #[arg(value_name = "WORKFLOW", required_unless_present = "replay_source")]
    #[serde(default)]
    pub workflow: Option<String>,
    /// Its version (default: the highest registered).
    #[arg(skip)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The run input, checked against the workflow's input schema (on the command line a JSON
    /// file, or - for stdin); for a replay plan, the source's input when omitted.
    #[arg(long, value_name = "FILE", value_parser = crate::input::input_file, required_unless_present = "replay_source")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub input: Option<Value>,
    /// Where it runs: `local`, or a configured SSH target (see `cairn target list`).
    #[arg(long, value_name = "TARGET", default_value = "local")]
    pub target: String,
    /// The absolute directory the run will create (it must not exist; its parent must be writable).
    #[arg(long, value_name = "ABS_DIR", required = true)]
    #[serde(default)]
    #[schema(required = true)]
    pub run_dir: Option<String>,
    /// Name the plan (`[A-Za-z0-9._-]{1,128}`); default: the workflow's name and a short id.
    #[arg(long = "name", value_name = "PLAN_NAME")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[A-Za-z0-9._-]{1,128}$")]
    pub plan_name: Option<String>,
    /// Plan a replay of a finished run of this workflow instead.
    #[arg(skip)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<ReplayDirective>,
    /// The finished run to replay (with --step): the command line's `replay.source_run_id`.
    #[arg(long = "replay", id = "replay_source", value_name = "SOURCE_RUN_ID", requires = "replay_steps")]
    #[serde(skip)]
    pub replay_source: Option<String>,
    /// A step to re-execute in the replay (repeatable); its descendants re-execute too.
    #[arg(long = "step", id = "replay_steps", value_name = "ID", requires = "replay_source")]
    #[serde(skip)]
    pub replay_steps: Vec<String>,
}

fn plan_run_arguments(schema: &mut Schema) {
    mcp_arguments(
        schema,
        &["workflow", "version", "input", "target", "run_dir", "plan_name"],
        &["workflow", "input", "target", "run_dir"],
    );
}

impl PlanRun {
    pub fn into_request(self) -> Result<cairn_engine::plan::PlanRequest, EngineError> {
        let run_dir =
            self.run_dir.ok_or_else(|| required_field("run_dir", "the absolute directory the run will create"))?;
        let replay = match (self.replay, self.replay_source) {
            (Some(r), _) => Some((RunId::lookup(r.source_run_id), r.step_ids)),
            (None, Some(source)) => Some((RunId::lookup(source), self.replay_steps)),
            (None, None) => None,
        };
        let workflow = match (self.workflow, self.version) {
            (Some(w), Some(v)) => Some(format!("{w}@{v}")),
            (w, _) => w,
        };
        Ok(cairn_engine::plan::PlanRequest {
            workflow,
            input: self.input.unwrap_or(Value::Null),
            target: self.target,
            run_dir: PathBuf::from(run_dir),
            name: self.plan_name,
            replay,
        })
    }
}

/// The MCP workbench's `plan_replay`: a replay plan named by its source run (the workflow is
/// the source's).
#[derive(Debug, Deserialize, JsonSchema)]
pub struct PlanReplay {
    /// The finished run to replay; it never changes.
    pub source_run_id: String,
    /// Steps to re-execute; their descendants re-execute too, the rest is reused.
    pub step_ids: Vec<String>,
    /// A new input (default: the source's).
    pub input: Option<Value>,
    /// `local` (default) or a configured SSH target.
    pub target: Option<String>,
    /// Absolute path of a new directory for the child run.
    pub run_dir: String,
}

impl From<PlanReplay> for PlanRun {
    fn from(p: PlanReplay) -> PlanRun {
        PlanRun {
            workflow: None,
            version: None,
            input: p.input,
            target: p.target.unwrap_or_else(|| cairn_core::target::LOCAL.to_string()),
            run_dir: Some(p.run_dir),
            plan_name: None,
            replay: Some(ReplayDirective { source_run_id: p.source_run_id, step_ids: p.step_ids }),
            replay_source: None,
            replay_steps: Vec::new(),
        }
    }
}

/// `POST /plans/{name}/execute`: the approval of exactly the plan that was shown.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecutePlan {
    pub plan_id: String,
    pub plan_checksum: String,
    /// How the person approved it (recorded with the run as `approval.channel`); default `api`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovedVia>,
}

/// How the person approved a plan: an MCP elicitation form, an MCP multi round-trip input
/// request, the MCP host's own tool-call confirmation, `cairn execute-plan`, or a direct API call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovedVia {
    Elicitation,
    InputRequired,
    Host,
    Cli,
    Api,
}

impl From<ApprovedVia> for cairn_core::plan::ApprovalChannel {
    fn from(v: ApprovedVia) -> Self {
        use cairn_core::plan::ApprovalChannel as C;
        match v {
            ApprovedVia::Elicitation => C::Elicitation,
            ApprovedVia::InputRequired => C::InputRequired,
            ApprovedVia::Host => C::Host,
            ApprovedVia::Cli => C::Cli,
            ApprovedVia::Api => C::Api,
        }
    }
}

// ------------------------------------------------------------------------------------ targets

/// The executor of a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ExecutorName {
    /// Each step a process group under the step agent's supervisor.
    Process,
    /// Each step a Slurm job (`sbatch`).
    Slurm,
}

/// Register an SSH host as a target (nothing is contacted; probe it next): `cairn target add`,
/// `POST /targets`, and the MCP compute server's `add_target`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, JsonSchema, clap::Args)]
#[serde(deny_unknown_fields)]
#[group(skip)]
pub struct AddTarget {
    /// 1 to 64 of A-Z a-z 0-9 . _ -, not `local`.
    #[schema(min_length = 1, max_length = 64)]
    pub name: String,
    /// `USER@HOST[:PORT]`.
    #[arg(long, value_name = "USER@HOST[:PORT]")]
    #[schema(min_length = 3)]
    pub ssh: String,
    /// Absolute path on the host: the default parent of run directories.
    #[arg(long, value_name = "ABS")]
    #[schema(min_length = 1)]
    pub workspace_root: String,
    /// The private key to log in with (a file on the daemon's machine).
    #[arg(long, value_name = "FILE")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub identity: Option<PathBuf>,
    /// The known_hosts file the host key is checked against, strictly (never turned off; default
    /// ~/.ssh/known_hosts).
    #[arg(long, value_name = "FILE")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub known_hosts: Option<PathBuf>,
    /// `process` (default) or `slurm`.
    #[arg(long, value_enum)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<ExecutorName>,
    /// Slurm partition (slurm executor only).
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// Slurm account (slurm executor only).
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
}

impl AddTarget {
    pub fn into_request(self) -> cairn_engine::target::AddTarget {
        use cairn_core::target::Executor;
        cairn_engine::target::AddTarget {
            name: self.name,
            ssh: self.ssh,
            identity: self.identity,
            known_hosts: self.known_hosts,
            workspace_root: self.workspace_root,
            executor: match self.executor {
                None | Some(ExecutorName::Process) => Executor::Process,
                Some(ExecutorName::Slurm) => Executor::Slurm,
            },
            partition: self.partition,
            account: self.account,
        }
    }
}

// ------------------------------------------------------------------------------------ verify

/// The longest per-cell timeout a verification may ask for.
const MAX_CELL_TIMEOUT_SECS: u64 = cairn_engine::verify::MAX_CELL_TIMEOUT.as_secs();

/// Verify a workflow document in a fresh, disposable kernel: `cairn verify`, `POST
/// /verifications`, and the MCP workbench's `verify_workflow`. Give exactly one document: its
/// text, or a file; or only a title, to re-verify that title's draft.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, JsonSchema, clap::Args)]
#[serde(deny_unknown_fields)]
#[schemars(transform = verify_arguments)]
#[group(skip)]
pub struct Verify {
    /// The document itself: markdown with fenced python cells, or an .ipynb's JSON.
    #[arg(skip)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document: Option<String>,
    /// A markdown or .ipynb file (over the API and MCP an absolute path on the daemon's
    /// machine); omit it with --title to re-verify that title's draft.
    #[arg(value_name = "DOCUMENT")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub path: Option<PathBuf>,
    /// Names the verification, its notebook and its draft (default: the file name).
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Per-cell timeout in seconds (1 to 86400; default: the document's
    /// `metadata.execution.timeout`, else 600): the cell is interrupted, then its kernel killed.
    #[arg(long = "timeout", value_name = "SECS")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 86400)]
    pub timeout_secs: Option<u64>,
    /// Refuse (exit 4, HTTP 409) instead of waiting when a session job or another verification
    /// holds the kernel slot.
    #[arg(long)]
    #[serde(default)]
    pub no_wait: bool,
    /// Address-space limit of the kernel in bytes (RLIMIT_AS): "does not fit" becomes `died`.
    #[arg(long, value_name = "BYTES")]
    #[serde(skip)]
    pub memory_limit: Option<u64>,
    /// An interpreter with ipykernel (default: Cairn's own venv under the state root).
    #[arg(long, env = "CAIRN_PYTHON", value_name = "PATH")]
    #[serde(skip)]
    pub python: Option<PathBuf>,
    /// Values injected as papermill injects them: a cell tagged `injected-parameters` after the
    /// cell tagged `parameters` (or first), each `NAME = <Python literal>`.
    #[arg(skip)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<serde_json::Map<String, Value>>,
    /// A parameter, as papermill's `-p`: VALUE is typed like papermill types it (True, False,
    /// None, an integer, a float, else a string); repeatable, and over --parameters.
    #[arg(short = 'p', long = "parameter", num_args = 2, value_names = ["NAME", "VALUE"])]
    #[serde(skip)]
    pub parameter: Vec<String>,
    /// A JSON (.json) or YAML file of parameters, NAME: VALUE.
    #[arg(long = "parameters", value_name = "FILE")]
    #[serde(skip)]
    pub parameters_file: Option<PathBuf>,
    /// Answer after at most this many seconds (0 to 3600): with the verdict if it has one, else
    /// with the running verification's id, to follow with `poll_job` (`GET /kernel/jobs/{id}`).
    /// Without it the API answers with the verdict; MCP `verify_workflow` waits 60 s.
    #[arg(skip)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 3600)]
    pub wait: Option<u64>,
    /// Whether the daemon's pre-started kernel may run it, when it fits (default true): false
    /// starts a kernel for this verification.
    #[arg(skip)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spare: Option<bool>,
    /// Start a kernel for this verification, even when the daemon has a spare one booted (by
    /// default `cairn verify` runs on it, through the daemon, when it fits).
    #[arg(long)]
    #[serde(skip)]
    pub no_spare: bool,
}

fn verify_arguments(schema: &mut Schema) {
    mcp_arguments(schema, &["document", "path", "title", "parameters", "wait"], &[]);
}

/// The longest a request may wait for a verification's verdict before it is answered with the
/// running verification's id.
pub const MAX_VERIFY_WAIT_SECS: u64 = 3600;

/// However short its `wait`, a verification is given this long to start its kernel before it is
/// stopped unstarted.
pub const VERIFY_START_AT_LEAST: Duration = Duration::from_secs(10);

impl Verify {
    /// How long to wait for the verdict (`None`: until it comes), refused beyond
    /// [`MAX_VERIFY_WAIT_SECS`] on every surface alike.
    pub fn wait_for(&self) -> Result<Option<Duration>, EngineError> {
        match self.wait {
            Some(w) if w > MAX_VERIFY_WAIT_SECS => {
                Err(EngineError::invalid_field("wait", format!("wait must be 0 to {MAX_VERIFY_WAIT_SECS} seconds")))
            }
            w => Ok(w.map(Duration::from_secs)),
        }
    }

    /// The engine's request. A relative `path` is resolved against `cwd` (the command line's);
    /// without one (the API, MCP), it is refused: the daemon's working directory means nothing
    /// to the caller.
    pub fn into_request(self, cwd: Option<&Path>) -> Result<cairn_engine::verify::VerifyRequest, EngineError> {
        let document = match (self.document, self.path) {
            (Some(_), Some(_)) => {
                return Err(EngineError::InvalidField {
                    field: "document",
                    message: "give exactly one of `document` (the text) and `path` (a file), not both".into(),
                });
            }
            (Some(text), None) => Document::Text(text),
            (None, Some(p)) if p.is_absolute() => Document::File(p),
            (None, Some(p)) => match cwd {
                Some(dir) => Document::File(dir.join(p)),
                None => {
                    return Err(EngineError::InvalidField {
                        field: "path",
                        message: format!("path `{}` is relative; give an absolute path", p.display()),
                    });
                }
            },
            (None, None) if self.title.is_some() => Document::Draft,
            (None, None) => {
                return Err(EngineError::InvalidField {
                    field: "document",
                    message: "give exactly one document to verify: its text (`document`) or a file (`path`; on the command line, DOCUMENT), or only a title (--title T) to re-verify that title's draft".into(),
                });
            }
        };
        if let Some(timeout) = self.timeout_secs
            && !(1..=MAX_CELL_TIMEOUT_SECS).contains(&timeout)
        {
            return Err(EngineError::InvalidField {
                field: "timeout_secs",
                message: format!(
                    "the per-cell timeout (--timeout, timeout_secs) must be 1 to {MAX_CELL_TIMEOUT_SECS} seconds"
                ),
            });
        }
        // A file's, then the request's own, then each -p: a later one wins.
        let mut parameters = serde_json::Map::new();
        if let Some(file) = &self.parameters_file {
            let path = match cwd {
                Some(dir) => dir.join(file),
                None => file.clone(),
            };
            let bad = |message: String| EngineError::InvalidField { field: "parameters", message };
            let text = std::fs::read_to_string(&path)
                .map_err(|e| bad(format!("{}: cannot read the parameters file: {e}", path.display())))?;
            let from_file = cairn_core::parameters::parse_file(&text, &path.display().to_string())
                .map_err(|e| bad(e.to_string()))?;
            parameters.extend(from_file);
        }
        parameters.extend(self.parameters.unwrap_or_default());
        for pair in self.parameter.chunks(2) {
            if let [name, value] = pair {
                parameters.insert(name.clone(), cairn_core::parameters::cli_value(value));
            }
        }
        Ok(cairn_engine::verify::VerifyRequest {
            document,
            title: self.title,
            parameters,
            cell_timeout: self.timeout_secs.map(std::time::Duration::from_secs),
            memory_limit: self.memory_limit,
            python: self.python,
            no_wait: self.no_wait,
            stop: None,
            spare: !self.no_spare && self.spare.unwrap_or(true),
        })
    }
}

// ------------------------------------------------------------------------------------ kernel

/// `POST /kernel/jobs`: run code in the session kernel, after the jobs queued before it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitJob {
    /// Python source (IPython syntax: magics work).
    #[schema(min_length = 1, pattern = "\\S")]
    pub code: String,
    /// Interrupt the job after this many seconds, then kill the kernel (1 to 604800; default 3600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 604800)]
    pub timeout_secs: Option<u64>,
}
