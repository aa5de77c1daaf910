//! The person's approval of a plan, asked by the workbench's `execute_plan` through the MCP
//! client itself: an elicitation form (`elicitation/create`) when the client declares the
//! capability, or, on protocol 2026-07-28 and later (where a server may not send requests), the
//! same form as an input request of a multi round-trip call (`InputRequiredResult`), its state
//! sealed with an HMAC under this process's key, bound to the caller, the plan and a deadline,
//! and accepted once. Without either capability the host's own tool-call confirmation is the
//! approval. Whatever the channel, the daemon's receipt still checks the exact plan.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use cairn_core::plan::{ApprovalState, open_approval_state, seal_approval_state};
use rmcp::RoleServer;
use rmcp::model::{
    ClientResult, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema, InputRequest,
    InputRequests, ProtocolVersion, ServerRequest,
};
use rmcp::service::RequestContext;
use serde_json::Value;

use super::api_client::CallError;

/// How long the person has to answer a multi round-trip approval.
const STATE_TTL_MS: i64 = 10 * 60 * 1000;

/// The input request's key in `inputRequests` / `inputResponses`.
pub const INPUT_KEY: &str = "approval";

/// How this call can ask the person.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// `elicitation/create`, answered within this call.
    Elicitation,
    /// An `InputRequiredResult`; the client calls again with the answer.
    InputRequired,
    /// Neither: the host's own tool-call confirmation approved the call.
    Host,
}

impl Ask {
    pub fn of(ctx: &RequestContext<RoleServer>) -> Ask {
        let form = ctx
            .client_capabilities()
            .and_then(|c| c.elicitation)
            // A client that names neither mode supports forms (the 2025-06-18 capability).
            .is_some_and(|e| e.form.is_some() || e.url.is_none());
        let modern = ctx.protocol_version().is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        match (form, modern) {
            (false, _) => Ask::Host,
            (true, false) => Ask::Elicitation,
            (true, true) => Ask::InputRequired,
        }
    }
}

/// The person's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Approved,
    /// Not approved: `decline`, `cancel`, or an accepted form without the confirmation.
    Refused {
        action: &'static str,
        why: String,
    },
}

impl Verdict {
    pub fn of(r: &ElicitResult) -> Verdict {
        match r.action {
            ElicitationAction::Accept => {
                if r.content.as_ref().and_then(|c| c.get("confirm")).and_then(Value::as_bool) == Some(true) {
                    Verdict::Approved
                } else {
                    Verdict::Refused {
                        action: "accept",
                        why: "the person submitted the form without confirming".into(),
                    }
                }
            }
            ElicitationAction::Decline => Verdict::Refused { action: "decline", why: "the person declined".into() },
            _ => Verdict::Refused { action: "cancel", why: "the person dismissed the request".into() },
        }
    }

    /// The refusal as a tool error: nothing was created, and what the agent may do next.
    pub fn refusal(plan_name: &str, action: &str, why: &str) -> CallError {
        let code = if action == "cancel" { "approval_cancelled" } else { "approval_declined" };
        CallError::new(
            409,
            code,
            format!(
                "plan `{plan_name}` was not approved ({why}); nothing was created. Ask the person what to change, then plan_run a new plan, or call execute_plan again to ask anew"
            ),
        )
    }
}

/// The approval form: the plan's summary for the person (`summary`), its checksum, and one
/// required confirmation.
pub fn form(summary: &str, plan_checksum: &str) -> Result<ElicitRequestParams, CallError> {
    let schema = ElicitationSchema::builder()
        .title("Approve this plan")
        .required_bool_property("confirm", |b| {
            b.title("Run exactly this plan")
                .description(format!("Approves the plan with checksum {plan_checksum} and nothing else"))
        })
        .build()
        .map_err(|e| CallError::new(500, "internal", format!("the approval form cannot be built: {e}")))?;
    Ok(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: format!(
            "{summary}\nPlan checksum: {plan_checksum}\nApprove to run exactly this plan; decline to create nothing."
        ),
        requested_schema: schema,
    })
}

/// Asks the person through `elicitation/create` and waits for the answer.
pub async fn elicit(ctx: &RequestContext<RoleServer>, params: ElicitRequestParams) -> Result<Verdict, CallError> {
    let unanswered = |why: String| {
        CallError::new(
            502,
            "approval_unanswered",
            format!("the MCP client did not answer the approval request ({why}); nothing was created"),
        )
    };
    match ctx.peer.send_request(ServerRequest::ElicitRequest(ElicitRequest::new(params))).await {
        Ok(ClientResult::ElicitResult(r)) => Ok(Verdict::of(&r)),
        Ok(_) => Err(unanswered("it answered with something other than an elicitation result".into())),
        Err(e) => Err(unanswered(e.to_string())),
    }
}

/// The form as the input requests of an `InputRequiredResult`.
pub fn input_requests(params: ElicitRequestParams) -> InputRequests {
    let mut requests = InputRequests::new();
    requests.insert(INPUT_KEY.to_string(), InputRequest::Elicitation(ElicitRequest::new(params)));
    requests
}

/// This process's key for request states, and the nonces it has accepted (each once).
#[derive(Clone)]
pub struct Approvals {
    key: Arc<Vec<u8>>,
    used: Arc<Mutex<HashSet<String>>>,
}

impl Default for Approvals {
    fn default() -> Self {
        Approvals { key: Arc::new(crate::auth::new_token().into_bytes()), used: Arc::default() }
    }
}

impl Approvals {
    /// A sealed state asking `principal` to approve exactly this plan, valid for 10 minutes.
    pub fn seal(
        &self,
        principal: &str,
        plan_name: &str,
        plan_id: &str,
        plan_checksum: &str,
    ) -> Result<String, CallError> {
        let state = ApprovalState {
            principal: principal.to_string(),
            plan_name: plan_name.to_string(),
            plan_id: plan_id.to_string(),
            plan_checksum: plan_checksum.to_string(),
            expires_at: now_ms() + STATE_TTL_MS,
            nonce: crate::auth::new_token(),
        };
        seal_approval_state(&self.key, &state)
            .map_err(|e| CallError::new(500, "internal", format!("the approval request cannot be sealed: {e}")))
    }

    /// The state the client sent back, if this process sealed it, unaltered and in time, for this
    /// caller and exactly this plan, and not accepted before; it is accepted now.
    pub fn accept(
        &self,
        sealed: &str,
        principal: &str,
        plan_name: &str,
        plan_id: &str,
        plan_checksum: &str,
    ) -> Result<ApprovalState, CallError> {
        let refused = |why: String| {
            CallError::new(
                409,
                "approval_state_refused",
                format!(
                    "{why}; nothing was created. Call execute_plan again (without requestState) to ask the person anew"
                ),
            )
        };
        let state = open_approval_state(&self.key, sealed, now_ms()).map_err(|e| refused(e.to_string()))?;
        if state.principal != principal {
            return Err(refused("the request state was issued to another caller".into()));
        }
        if (state.plan_name.as_str(), state.plan_id.as_str(), state.plan_checksum.as_str())
            != (plan_name, plan_id, plan_checksum)
        {
            return Err(refused(format!(
                "the request state approves plan `{}` ({}, checksum {}), not the plan named in this call",
                state.plan_name, state.plan_id, state.plan_checksum
            )));
        }
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        if !used.insert(state.nonce.clone()) {
            return Err(refused("this approval request was answered already".into()));
        }
        Ok(state)
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
