//! The compute server: targets. It defines no workflows and approves nothing.

use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::CallToolResult;
use rmcp::schemars::{self, JsonSchema};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, tool, tool_router};
use serde::Deserialize;

use super::api_client::{ApiClient, seg};
use super::logging::LogLevel;
use super::resources::{Subscriptions, server_handler};
use crate::wire::{AddTarget, to_value};

#[derive(Clone)]
pub struct Compute {
    daemon: ApiClient,
    logging: LogLevel,
    subscriptions: Subscriptions,
    tool_router: ToolRouter<Self>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct TargetRef {
    pub name: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct Readiness {
    /// `local` or a configured target.
    pub target: String,
    /// Absolute path on the target of the directory a run would create.
    pub run_dir: String,
}

#[tool_router(vis = "pub(super)")]
impl Compute {
    pub fn new(daemon: ApiClient) -> Compute {
        Compute {
            daemon,
            subscriptions: Subscriptions::default(),
            logging: LogLevel::default(),
            tool_router: super::schemas::attach(super::Kind::Compute, Self::tool_router()),
        }
    }

    #[tool(
        description = "Compute targets (`local` first), each with its last probe's facts. Read-only.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn list_targets(&self, ctx: RequestContext<RoleServer>) -> CallToolResult {
        self.daemon.tool(&ctx, "GET", "/targets".into(), None).await
    }

    #[tool(
        description = "Register an SSH host as a target (host keys checked strictly against known_hosts; executor process or slurm). Nothing is contacted: probe_target does that.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn add_target(
        &self,
        Parameters(p): Parameters<AddTarget>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.daemon.tool(&ctx, "POST", "/targets".into(), Some(to_value(&p))).await
    }

    #[tool(
        description = "Run Cairn's fixed, read-only probe on a target and return what it observed: OS, kernel, CPUs, memory, free disk at the workspace root, Python, Snakemake, Nextflow, Java, sbatch/squeue/scancel. It changes nothing on the target and claims nothing it did not observe (not worker readiness, not a shared filesystem); Cairn keeps the result as the target's last probe.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = true)
    )]
    async fn probe_target(
        &self,
        Parameters(p): Parameters<TargetRef>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.daemon.tool(&ctx, "POST", format!("/targets/{}/probe", seg(&p.name)), None).await
    }

    #[tool(
        description = "Whether run_dir on a target could take a new run now: absent, its parent an existing writable directory without a symlink, the executor's programs present. Read-only; an error names what is wrong.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = true)
    )]
    async fn check_readiness(
        &self,
        Parameters(p): Parameters<Readiness>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let path = format!("/targets/{}/readiness?run_dir={}", seg(&p.target), seg(&p.run_dir));
        self.daemon.tool(&ctx, "GET", path, None).await
    }
}

server_handler!(
    Compute,
    super::Kind::Compute,
    "cairn-compute",
    "Cairn's compute targets: list, register, probe (read-only) and check a run directory's readiness. It defines no workflows and approves nothing."
);
