//! Stored plans, as they are listed. A plan itself is sent as it is stored (its checksummed
//! format is `cairn_core::plan::Plan`).

use cairn_core::ids::RunId;
use cairn_engine::plan::PlanListing;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::time;

/// A stored plan, as `GET /plans` lists it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PlanSummary {
    pub plan_name: String,
    pub plan_id: String,
    pub plan_checksum: String,
    pub workflow: String,
    pub version: String,
    pub target: String,
    pub run_dir: String,
    pub created_at: String,
    /// The run that executed it, if any.
    pub run_id: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PlanList {
    pub plans: Vec<PlanSummary>,
}

impl PlanList {
    pub fn from_listings(all: Vec<PlanListing>) -> PlanList {
        PlanList {
            plans: all
                .into_iter()
                .map(|PlanListing { record: p, run_id }| PlanSummary {
                    run_id: run_id.map(RunId::into_string),
                    created_at: time(p.created_at),
                    plan_name: p.plan_name,
                    plan_id: p.plan_id,
                    plan_checksum: p.plan_checksum,
                    workflow: p.workflow,
                    version: p.version,
                    target: p.target,
                    run_dir: p.run_dir,
                })
                .collect(),
        }
    }
}
