//! The command line, as the CLI contract in docs/src/design.md fixes it.

use std::path::PathBuf;

use cairn_core::ids::RunId;
use clap::{Parser, Subcommand};

use crate::wire;

/// A run id given to look a run up: any text, so an id no run has is "run not found", not an
/// invalid id (a new run's id is validated where the run is made).
fn run_to_look_up(given: &str) -> Result<RunId, std::convert::Infallible> {
    Ok(RunId::lookup(given))
}

#[derive(Parser, Debug)]
#[command(name = "cairn", version, about = "Durable, approved, reproducible workflow runs")]
pub struct Cli {
    /// State root (default: $XDG_STATE_HOME/cairn, else ~/.local/state/cairn).
    #[arg(long, env = "CAIRN_HOME", global = true, value_name = "DIR")]
    pub home: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Register the bundled example and run it: READY, then BLOCKED with its finding.
    Quickstart {
        #[arg(long)]
        json: bool,
    },
    /// Register, list and show workflows.
    Workflow {
        #[command(subcommand)]
        command: WorkflowCommand,
    },
    /// Run a registered workflow (or continue a run with the same --run-id).
    Run(RunArgs),
    /// Replay steps of a finished run into a new child run, reusing the rest of its evidence.
    Replay(ReplayArgs),
    /// Why a step of a run was executed, reused or invalidated.
    Explain {
        /// The run (its id, as `cairn runs` lists it).
        #[arg(value_parser = run_to_look_up)]
        run_id: RunId,
        step_id: String,
        #[arg(long)]
        json: bool,
    },
    /// Verify a workflow document (markdown with python fences, or .ipynb) in a fresh kernel.
    Verify {
        #[command(flatten)]
        request: wire::Verify,
        #[arg(long)]
        json: bool,
    },
    /// List runs, newest first.
    Runs {
        /// At most N runs (1 to 1000, as `GET /runs`).
        #[arg(long, value_name = "N", default_value_t = 50)]
        limit: usize,
        /// Only runs with this status: PENDING, RUNNING, READY, BLOCKED, FAILED or CANCELLED.
        #[arg(long, value_name = "STATUS")]
        status: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Show one run: its steps' counts by status, its steps (every one up to 1,000; beyond, those
    /// that failed or run now, or the page asked for), findings and error.
    Show(ShowArgs),
    /// One step of a run whole: its result (never cut) and its artifacts.
    Result {
        /// The run (its id, as `cairn runs` lists it).
        #[arg(value_parser = run_to_look_up)]
        run_id: RunId,
        step_id: String,
        #[arg(long)]
        json: bool,
    },
    /// A pipeline step's jobs: each job its controller ran (rule, wildcards, Snakemake's reason,
    /// inputs with the job that wrote each, outputs with their SHA-256), failed ones first.
    Jobs {
        /// The run (its id, as `cairn runs` lists it).
        #[arg(value_parser = run_to_look_up)]
        run_id: RunId,
        step_id: String,
        #[arg(long)]
        json: bool,
    },
    /// The files a run's steps produced: path, size and SHA-256 of each.
    Artifacts {
        /// The run (its id, as `cairn runs` lists it).
        #[arg(value_parser = run_to_look_up)]
        run_id: RunId,
        #[arg(long)]
        json: bool,
    },
    /// A slice of one artifact's bytes (at most 256 KiB), read where it lies: here, or on the run's
    /// target over SSH (nothing copied back). The bytes go to stdout; --json gives them as text or
    /// base64 with the recorded size and SHA-256.
    ReadArtifact {
        /// The run (its id, as `cairn runs` lists it).
        #[arg(value_parser = run_to_look_up)]
        run_id: RunId,
        step_id: String,
        /// The declared output's name.
        name: String,
        /// For a folder output: which of its files.
        #[arg(long)]
        path: Option<String>,
        #[arg(long, default_value_t = 0)]
        offset: u64,
        /// At most this many bytes (default and most: 262144).
        #[arg(long)]
        length: Option<u64>,
        #[arg(long)]
        json: bool,
    },
    /// Write a run as a Provenance Run Crate 0.5 (RO-Crate 1.1): its workflow, input and input
    /// files, steps, attempts, artifacts with their SHA-256, the validator's verdict, its replay
    /// lineage and the targets that ran it; or, with --verification, a verification as a Process
    /// Run Crate (the document, the notebook, the kernel's environment hash).
    Export {
        #[arg(value_parser = run_to_look_up, required_unless_present = "verification", conflicts_with = "verification")]
        run_id: Option<RunId>,
        /// Export this verification instead of a run.
        #[arg(long, value_name = "ID")]
        verification: Option<String>,
        /// The crate directory to create (default `RUN.crate`, or `verification-ID.crate`).
        #[arg(long = "ro-crate", value_name = "DIR", conflicts_with = "zip")]
        ro_crate: Option<PathBuf>,
        /// Write the crate as one zip file instead.
        #[arg(long, value_name = "FILE")]
        zip: Option<PathBuf>,
        /// Reference the artifacts and input files by path and hash instead of copying them.
        #[arg(long)]
        no_data: bool,
        #[arg(long)]
        json: bool,
    },
    /// Which run made this file: every recorded artifact with its bytes (exit 1 when none).
    Trace {
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Check the registry and the state root, changing nothing: the database's integrity check,
    /// the event log's continuity, every recorded artifact's bytes against its SHA-256, and run
    /// folders without a run. Exit 0 when every check passes, 1 when there are findings.
    Doctor {
        #[arg(long)]
        json: bool,
    },
    /// Copy a SQLite registry (online, while the daemon runs) and the state root's files that give
    /// the same answers (workflow snapshots, plans, …) into the new folder PATH, itself a state
    /// root. A PostgreSQL registry is backed up with pg_dump instead.
    Backup {
        path: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// The ordered event log of a run.
    Events {
        /// The run (its id, as `cairn runs` lists it).
        #[arg(value_parser = run_to_look_up)]
        run_id: RunId,
        /// Keep printing new events until the run finishes.
        #[arg(long)]
        follow: bool,
        #[arg(long)]
        json: bool,
    },
    /// Plan a run (read-only: nothing is created at --run-dir), or show a stored plan.
    #[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
    Plan {
        #[command(subcommand)]
        command: Option<PlanCommand>,
        #[command(flatten)]
        request: wire::PlanRun,
        #[arg(long)]
        json: bool,
    },
    /// Stored plans, newest first.
    Plans {
        #[arg(long)]
        json: bool,
    },
    /// Approve and execute a stored plan: the only way a plan runs.
    ExecutePlan {
        plan_name: String,
        /// The plan id you were shown.
        #[arg(long = "id", value_name = "PLAN_ID")]
        plan_id: String,
        /// The plan checksum you were shown.
        #[arg(long, value_name = "SUM")]
        checksum: String,
        #[arg(long)]
        json: bool,
    },
    /// Cancel a run: stop its process groups (SIGTERM, grace, SIGKILL); it ends CANCELLED.
    Cancel {
        /// The run (its id, as `cairn runs` lists it).
        #[arg(value_parser = run_to_look_up)]
        run_id: RunId,
        #[arg(long)]
        json: bool,
    },
    /// Compute targets: `local` (built in) and SSH hosts.
    Target {
        #[command(subcommand)]
        command: TargetCommand,
    },
    /// A team's principals: add one (its token printed once), list, show, rotate, revoke.
    User {
        #[command(subcommand)]
        command: UserCommand,
    },
    /// Roles: the five built-in ones and custom ones made of permissions.
    Role {
        #[command(subcommand)]
        command: RoleCommand,
    },
    /// Grant a role to a principal, everywhere or only for a workflow and/or on a target.
    Grant {
        #[command(subcommand)]
        command: GrantCommand,
    },
    /// Per-workflow policies: the two-person rule for approving plans.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// Quotas with their use: a principal's or a workflow's open runs, queued runs and steps a day;
    /// a target's steps running at once.
    Quota {
        #[command(subcommand)]
        command: Option<QuotaCommand>,
        /// With no subcommand: the list as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Secrets tools declare: their values in the state root's store (read from stdin), or from
    /// an external manager's command.
    Secret {
        #[command(subcommand)]
        command: SecretCommand,
    },
    /// Who did what: every recorded change, newest first.
    Audit {
        /// Only this principal's acts.
        #[arg(long)]
        principal: Option<String>,
        /// Only this action (`run.submitted`, `plan.approved`, `run.cancelled`, …).
        #[arg(long)]
        action: Option<String>,
        /// Only acts on this object (a run id, a plan, a workflow, a principal).
        #[arg(long)]
        object: Option<String>,
        /// At most N acts (1 to 10000).
        #[arg(long, value_name = "N", default_value_t = 100)]
        limit: usize,
        #[arg(long)]
        json: bool,
    },
    /// Who this command acts as (the state root's owner, or the principal of CAIRN_TOKEN) and
    /// what it may do where.
    Whoami {
        #[arg(long)]
        json: bool,
    },
    /// The interactive session kernel: run code whose state carries from job to job.
    Kernel {
        #[command(subcommand)]
        command: KernelCommand,
    },
    /// Start, stop or inspect the daemon that owns execution for this state root.
    Daemon {
        #[command(subcommand)]
        command: DaemonCommand,
    },
    /// Serve an MCP server over stdio for an agent (logs on stderr); it calls the daemon.
    Mcp {
        #[arg(value_enum)]
        server: McpServer,
    },
    /// Open the read-only web app: prints a login link (valid two minutes, once) and opens it in
    /// a browser when one can be started. The page reads with the Viewer token only.
    Ui {
        /// Only print the link.
        #[arg(long)]
        no_open: bool,
        #[arg(long)]
        json: bool,
    },
    /// The procedure-doc index: markdown procedures (minus their data), versioned and searchable.
    Doc {
        #[command(subcommand)]
        command: DocCommand,
    },
    /// Print the shell completion script for SHELL: bash, zsh or fish (or elvish, powershell).
    ///
    /// `cairn completions bash > ~/.local/share/bash-completion/completions/cairn`, say;
    /// scripts/install.sh puts the bash, zsh and fish ones in place.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page of `cairn` (roff), or write one page a command into a folder.
    ///
    /// `cairn man | man -l -` reads it; `cairn man --out DIR` writes it and one page for each
    /// subcommand at any depth (cairn-run.1, cairn-workflow-add.1, …) into DIR, and lists them.
    Man {
        /// The folder to write the pages into (created if missing).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
}

/// The MCP servers.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum McpServer {
    /// Plan, approve, run, replay, verify, and the session kernel (Operator token).
    Workbench,
    /// Targets: list, add, probe, readiness (Operator token).
    Compute,
    /// Read-only views for a person (Viewer token only).
    App,
}

#[derive(Subcommand, Debug)]
pub enum UserCommand {
    /// Add a principal with a role everywhere; prints its token once (the registry keeps only
    /// its hash).
    Add {
        name: String,
        /// viewer, launcher, approver, maintainer, admin, or a custom role.
        #[arg(long)]
        role: String,
        #[arg(long)]
        json: bool,
    },
    /// Every principal with its grants.
    List {
        #[arg(long)]
        json: bool,
    },
    /// One principal with its grants.
    Show {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// A new token for a principal (printed once); the old one stops working at once.
    Rotate {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Revoke a principal: its token stops working; its name and acts stay.
    Revoke {
        name: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum RoleCommand {
    /// The built-in roles and the custom ones, with their permissions.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Add a custom role.
    Add {
        name: String,
        /// Its permissions, comma-separated: read, plan, run, approve, cancel, register, target,
        /// code, docs, admin.
        #[arg(long, value_name = "PERMISSIONS")]
        allow: String,
        #[arg(long)]
        json: bool,
    },
    /// Remove a custom role (its grants then allow nothing).
    Remove {
        name: String,
        #[arg(long)]
        json: bool,
    },
}

/// A grant's principal, role and scope.
#[derive(clap::Args, Debug)]
pub struct GrantArgs {
    pub principal: String,
    pub role: String,
    /// Only for this workflow (all its versions).
    #[arg(long)]
    pub workflow: Option<String>,
    /// Only on this target.
    #[arg(long)]
    pub target: Option<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum GrantCommand {
    /// Grant a role (`cairn grant add alice launcher --workflow rnaseq`).
    Add(GrantArgs),
    /// Remove a grant (the same role and scope).
    Remove(GrantArgs),
}

/// Whom a quota is on: a principal, a workflow or a target.
#[derive(clap::Args, Debug)]
#[group(required = true, multiple = false)]
pub struct QuotaSubject {
    #[arg(long)]
    pub principal: Option<String>,
    #[arg(long)]
    pub workflow: Option<String>,
    /// A target (`local` included): its quota is on `steps`, its steps running at once.
    #[arg(long)]
    pub target: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum QuotaCommand {
    /// Every quota with its use now (the default).
    List {
        #[arg(long)]
        json: bool,
    },
    /// Set (or replace) a quota.
    Set {
        #[command(flatten)]
        subject: QuotaSubject,
        /// runs (open at once), queued_runs (held queued at once), steps_per_day (started in 24 h);
        /// for a target, steps (running at once).
        #[arg(long)]
        measure: String,
        #[arg(long)]
        limit: u64,
        /// For `runs`: hold a submission over it queued until a run ends, instead of refusing it.
        #[arg(long)]
        queue: bool,
        #[arg(long)]
        json: bool,
    },
    /// Remove a quota.
    Remove {
        #[command(flatten)]
        subject: QuotaSubject,
        #[arg(long)]
        measure: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum SecretCommand {
    /// Store a secret's value, read from stdin (never from an argument), in a file of mode 0600.
    Set {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// The names in the store and the external provider (never a value).
    List {
        #[arg(long)]
        json: bool,
    },
    /// Remove a secret from the store.
    Remove {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// The external manager asked for a secret not in the store: its command (the secret's name
    /// is appended; the first line it prints is the value), after `--`:
    /// `cairn secret provider -- pass show`.
    Provider {
        /// The command and its arguments, after `--`; none with --none.
        #[arg(last = true)]
        command: Vec<String>,
        /// Remove the provider.
        #[arg(long, conflicts_with = "command")]
        none: bool,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum PolicyCommand {
    /// Every policy set.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Set a workflow's policy.
    Set {
        workflow: String,
        /// A plan must be approved by someone other than its planner.
        #[arg(long, value_name = "on|off", value_parser = on_off, action = clap::ArgAction::Set)]
        two_person: bool,
        #[arg(long)]
        json: bool,
    },
}

fn on_off(given: &str) -> Result<bool, String> {
    match given {
        "on" | "true" | "yes" => Ok(true),
        "off" | "false" | "no" => Ok(false),
        other => Err(format!("`{other}`: say on or off")),
    }
}

#[derive(Subcommand, Debug)]
pub enum TargetCommand {
    /// Register an SSH host (nothing is contacted; `target probe` does that).
    Add {
        #[command(flatten)]
        target: wire::AddTarget,
        #[arg(long)]
        json: bool,
    },
    /// Configured targets.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Run the fixed, read-only probe on a target and print what it observed.
    Probe {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Remove a configured target.
    Remove {
        name: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum PlanCommand {
    /// Show a stored plan (checked against the checksum it was stored with).
    Show {
        plan_name: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum KernelCommand {
    /// Run code in the session kernel and print its outputs (Ctrl-C stops waiting; the job goes on).
    Exec {
        /// The Python code (or use --file).
        #[arg(required_unless_present = "file", conflicts_with = "file")]
        code: Option<String>,
        /// Read the code from a file (- for stdin).
        #[arg(long, value_name = "FILE")]
        file: Option<PathBuf>,
        /// Interrupt the job after SECS, then kill the kernel (default 3600).
        #[arg(long, value_name = "SECS")]
        timeout: Option<u64>,
        /// Return the job id at once instead of waiting for the job to end.
        #[arg(long)]
        detach: bool,
        #[arg(long)]
        json: bool,
    },
    /// Every retained job, oldest first.
    Jobs {
        #[arg(long)]
        json: bool,
    },
    /// One job: status, outputs so far, timings.
    Poll {
        job_id: String,
        #[arg(long)]
        json: bool,
    },
    /// KeyboardInterrupt to the running job (the kernel and its state survive).
    Interrupt {
        #[arg(long)]
        json: bool,
    },
    /// Kill the session kernel (its state is lost); the next job starts a fresh one.
    Restart {
        #[arg(long)]
        json: bool,
    },
    /// Write the audit notebook of every job (or, with --workflow, the last verified workflow).
    Export {
        /// The notebook of the last passed verification instead of the audit.
        #[arg(long)]
        workflow: bool,
        /// Where to write it (default: under <state>/workflows/audit/, or the verified notebook's path).
        #[arg(long, short, value_name = "PATH")]
        output: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum DaemonCommand {
    /// Start the daemon in the background (no-op when it runs); prints its pid and URL.
    Start {
        /// Listen on this loopback port (default: one the system chooses).
        #[arg(long)]
        port: Option<u16>,
        /// Local steps executing at once across all runs (default: the number of CPUs). Sixteen
        /// times as many runs are in flight, served in turn; a run's `--parallel` bounds its own
        /// share, and steps on SSH or Slurm targets take no local slot.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
        workers: Option<u16>,
        /// Keep no spare kernel booted: every verification starts its own kernel (slower; a
        /// spare costs an idle kernel's memory, about 50 MB).
        #[arg(long, env = "CAIRN_NO_SPARE_KERNEL", value_parser = clap::builder::FalseyValueParser::new())]
        no_spare_kernel: bool,
        /// Keep the registry in this PostgreSQL database (postgres://USER@HOST:PORT/DATABASE)
        /// instead of the SQLite file in the state root. The state root records it, so every
        /// later command given this state root uses it too; several daemons, each with its own
        /// state root, may share one database.
        #[arg(long, env = "CAIRN_DATABASE_URL", value_name = "URL", hide_env_values = true)]
        database: Option<String>,
        /// How long the leases of the runs it drives last without a heartbeat (renewed every
        /// third of it): once a daemon stops renewing (its host lost, or killed), another daemon
        /// sharing its registry takes its runs over after this long.
        #[arg(long, value_name = "SECS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=3600))]
        lease_secs: u64,
        /// The daemon log's format (`<state>/daemon.log`): `text`, a line a person reads, or `json`,
        /// one object a line with its time, level and message, for machines.
        #[arg(long, value_enum, env = "CAIRN_LOG_FORMAT", default_value = "text")]
        log_format: crate::presence::LogFormat,
        #[arg(long)]
        json: bool,
    },
    /// Stop the daemon; what it was running resumes at its next start.
    Stop {
        #[arg(long)]
        json: bool,
    },
    /// Whether the daemon runs, its pid and URL.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// The live daemons sharing this state root's registry (several on a PostgreSQL registry),
    /// each with the open runs it drives: `GET /daemons` (starts this state root's daemon if
    /// none runs).
    List {
        #[arg(long)]
        json: bool,
    },
    /// Run the daemon in the foreground (what `start` launches).
    Run {
        /// Listen on this loopback port (0: one the system chooses).
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// Exit after SECS with nothing running and no request.
        #[arg(long, value_name = "SECS")]
        idle_exit: Option<u64>,
        /// Local steps executing at once across all runs (default: the number of CPUs).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
        workers: Option<u16>,
        /// Keep no spare kernel booted: every verification starts its own kernel (slower; a
        /// spare costs an idle kernel's memory, about 50 MB).
        #[arg(long, env = "CAIRN_NO_SPARE_KERNEL", value_parser = clap::builder::FalseyValueParser::new())]
        no_spare_kernel: bool,
        /// Keep the registry in this PostgreSQL database (postgres://USER@HOST:PORT/DATABASE)
        /// instead of the SQLite file in the state root. The state root records it, so every
        /// later command given this state root uses it too; several daemons, each with its own
        /// state root, may share one database.
        #[arg(long, env = "CAIRN_DATABASE_URL", value_name = "URL", hide_env_values = true)]
        database: Option<String>,
        /// How long the leases of the runs it drives last without a heartbeat (renewed every
        /// third of it): once a daemon stops renewing (its host lost, or killed), another daemon
        /// sharing its registry takes its runs over after this long.
        #[arg(long, value_name = "SECS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=3600))]
        lease_secs: u64,
        /// The daemon log's format (`<state>/daemon.log`): `text`, a line a person reads, or `json`,
        /// one object a line with its time, level and message, for machines.
        #[arg(long, value_enum, env = "CAIRN_LOG_FORMAT", default_value = "text")]
        log_format: crate::presence::LogFormat,
    },
}

#[derive(Subcommand, Debug)]
pub enum WorkflowCommand {
    /// Validate a workflow folder and register it, content-addressed and immutable.
    Add {
        /// The folder holding workflow.toml (or the file itself).
        path: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// List registered workflows and versions.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Show a workflow's steps, tools and validator rules.
    Show {
        /// NAME or NAME@VERSION.
        workflow: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum DocCommand {
    /// Store a new version of a procedure doc (versions 1, 2, … are kept, never overwritten).
    Save {
        /// The doc's name: 1 to 128 of A-Z a-z 0-9 . _ -, starting with a letter or a digit.
        name: String,
        /// The markdown file (- for stdin), at most 1 MiB.
        file: PathBuf,
        /// The passed verification the procedure was proven by: the doc links it and its notebook.
        #[arg(long = "from", value_name = "VERIFICATION_ID")]
        from: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// The docs by name, each with its newest version.
    List {
        /// Removed docs too (their versions stay readable).
        #[arg(long)]
        removed: bool,
        #[arg(long)]
        json: bool,
    },
    /// Print a doc's markdown (its details on stderr): the newest version, or NAME@VERSION.
    Show {
        /// NAME or NAME@VERSION.
        doc: String,
        #[arg(long)]
        json: bool,
    },
    /// Full-text search over every live doc's newest version, best first (SQLite FTS5 syntax:
    /// words, "a phrase", OR, NOT, prefix*).
    Search {
        query: String,
        /// At most N results (1 to 100).
        #[arg(long, value_name = "N", default_value_t = cairn_core::docs::DEFAULT_SEARCH_LIMIT)]
        limit: usize,
        #[arg(long)]
        json: bool,
    },
    /// Remove a doc (a tombstone: it leaves the list and the search; its versions stay readable
    /// as NAME@VERSION, and saving it again makes the next version).
    Remove {
        name: String,
        #[arg(long)]
        json: bool,
    },
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}

// The arguments of `cairn run` (the variant's doc is its help).
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// NAME or NAME@VERSION (default: the highest registered version).
    pub workflow: String,
    /// The run input: a JSON file, or - for stdin.
    #[arg(long, value_name = "FILE")]
    pub input: PathBuf,
    /// Choose the run id ([A-Za-z0-9._-]{1,128}); the same id with the same input is idempotent.
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,
    /// Resume steps left RUNNING by a crash of an in-process run: the abandoned attempt is
    /// marked interrupted. (The daemon resumes what a crashed daemon left by itself.)
    #[arg(long)]
    pub resume_interrupted: bool,
    /// Run up to N ready steps at once (default 1: serial, the reference order).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub parallel: u16,
    /// Execute in this process instead of the daemon (batch jobs, CI): Ctrl-C or a crash leaves
    /// the run for `--resume-interrupted` or for the daemon's recovery.
    #[arg(long)]
    pub in_process: bool,
    #[arg(long)]
    pub json: bool,
}

// The arguments of `cairn show` (the variant's doc is its help).
#[derive(clap::Args, Debug)]
pub struct ShowArgs {
    /// The run (its id, as `cairn runs` lists it).
    #[arg(value_parser = run_to_look_up)]
    pub run_id: RunId,
    /// Every attempt on the run's time axis instead: what overlapped, where the time went.
    #[arg(long)]
    pub timeline: bool,
    /// The run's DAG by layers instead, each with its steps' counts by status (page with
    /// `--steps-offset`/`--steps-limit`, counted in layers); `--steps-layer N` lists a layer's steps.
    #[arg(long, conflicts_with_all = ["timeline", "all", "steps_status", "steps_order", "steps_layer"])]
    pub layers: bool,
    /// Every step, however many.
    #[arg(long, conflicts_with_all = ["steps_offset", "steps_limit", "steps_status", "steps_order", "steps_layer"])]
    pub all: bool,
    /// Skip this many of the matching steps.
    #[arg(long, value_name = "N")]
    pub steps_offset: Option<usize>,
    /// At most this many steps (1 to 10,000; default 1,000).
    #[arg(long, value_name = "N")]
    pub steps_limit: Option<usize>,
    /// Only steps in these statuses: PENDING, RUNNING, COMPLETED, FAILED (comma-separated).
    #[arg(long, value_name = "STATUSES")]
    pub steps_status: Option<String>,
    /// `attention`: failed, then running steps first; `dag` (default): the DAG's order.
    #[arg(long, value_name = "ORDER")]
    pub steps_order: Option<String>,
    /// Only the steps of this layer of the DAG (layer 0 needs nothing; see `--layers`).
    #[arg(long, value_name = "N")]
    pub steps_layer: Option<usize>,
    #[arg(long)]
    pub json: bool,
}

// The arguments of `cairn replay` (the variant's doc is its help).
#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// The READY or BLOCKED run to replay.
    #[arg(value_parser = run_to_look_up)]
    pub source_run_id: RunId,
    /// A step to re-execute (repeatable); its descendants re-execute too.
    #[arg(long = "step", value_name = "ID", required = true)]
    pub steps: Vec<String>,
    /// The child's input (default: the source's input).
    #[arg(long, value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// Choose the child's run id; the same id with the same replay is idempotent.
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,
    /// Run another registered version of the source's workflow.
    #[arg(long, value_name = "VERSION")]
    pub version: Option<String>,
    /// Resume steps left RUNNING by a crash of an earlier attempt at this replay.
    #[arg(long)]
    pub resume_interrupted: bool,
    /// Run up to N ready steps at once (default 1: serial, the reference order).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub parallel: u16,
    /// Print the decision for every step and create nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Execute in this process instead of the daemon (batch jobs, CI): Ctrl-C or a crash leaves
    /// the run for `--resume-interrupted` or for the daemon's recovery.
    #[arg(long)]
    pub in_process: bool,
    #[arg(long)]
    pub json: bool,
}
