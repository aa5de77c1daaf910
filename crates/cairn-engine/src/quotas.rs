//! Quotas' use cases: setting them (an admin), showing each with its use, the admission of a
//! submission (a day's steps checked here; open and queued runs by the registry, in the
//! transaction that creates the run), and the admission of a held run once a place frees.

use cairn_core::access::{Caller, Permission, Scope};
use cairn_core::ids::RunId;
use cairn_core::quota::{self, Admission, DAY_MS, Measure, Quota, Subject};
use cairn_core::store::StoreError;
use serde_json::json;

use crate::{Engine, EngineError};

/// A quota with what its subject uses of it now.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaUse {
    pub quota: Quota,
    pub used: u64,
    /// For `steps_per_day`: when the oldest step counted leaves the window.
    pub frees_at: Option<i64>,
}

impl Engine {
    /// Sets a quota (an admin's act).
    pub fn set_quota(
        &self,
        caller: &Caller,
        subject: Subject,
        measure: Measure,
        limit: u64,
        queue: bool,
    ) -> Result<Quota, EngineError> {
        self.authorize(caller, Permission::Admin, &Scope::everywhere())?;
        if subject.name().trim().is_empty() {
            return Err(EngineError::invalid_field("subject", "name the principal or the workflow the quota is on"));
        }
        if !measure.fits(&subject) {
            return Err(EngineError::invalid_field(
                "measure",
                "a target's quota is on `steps` (its steps running at once); a principal's or a workflow's on `runs`, `queued_runs` or `steps_per_day`",
            ));
        }
        if queue && measure != Measure::Runs {
            return Err(EngineError::invalid_field(
                "queue",
                "only a `runs` quota queues what is over it; the others refuse",
            ));
        }
        let q = Quota { subject, measure, limit, queue, updated_at: self.now_ms() };
        let act = caller.act(
            q.updated_at,
            "quota.set",
            &q.subject.to_string(),
            json!({"measure": measure.as_str(), "limit": limit, "queue": queue}),
        );
        self.store.set_quota(&q, &act)?;
        Ok(q)
    }

    pub fn remove_quota(&self, caller: &Caller, subject: &Subject, measure: Measure) -> Result<(), EngineError> {
        self.authorize(caller, Permission::Admin, &Scope::everywhere())?;
        let act =
            caller.act(self.now_ms(), "quota.removed", &subject.to_string(), json!({"measure": measure.as_str()}));
        if !self.store.remove_quota(subject, measure, &act)? {
            return Err(EngineError::QuotaNotFound { subject: subject.to_string(), measure: measure.as_str().into() });
        }
        Ok(())
    }

    /// Every quota with its use now.
    pub fn quotas(&self) -> Result<Vec<QuotaUse>, EngineError> {
        let since = self.now_ms() - DAY_MS;
        self.store
            .quotas()?
            .into_iter()
            .map(|q| {
                let (used, oldest) = self.store.quota_use(&q.subject, q.measure, since)?;
                let frees_at = (q.measure == Measure::StepsPerDay).then_some(oldest.map(|t| t + DAY_MS)).flatten();
                Ok(QuotaUse { quota: q, used, frees_at })
            })
            .collect()
    }

    /// What a submission by `caller` of `workflow` must pass: over a steps-per-day quota it is
    /// refused here; the run limits go to the registry with the run.
    pub(crate) fn admission(&self, caller: &Caller, workflow: &str) -> Result<Admission, EngineError> {
        let quotas = self.store.quotas()?;
        let binding = quota::binding(&quotas, caller.name(), workflow);
        let since = self.now_ms() - DAY_MS;
        for (_, q) in binding.iter().filter(|(_, q)| q.measure == Measure::StepsPerDay) {
            let (used, oldest) = self.store.quota_use(&q.subject, q.measure, since)?;
            quota::check_day(q, used, oldest)?;
        }
        Ok(Admission::of(&binding))
    }

    /// A registry's refusal named with its quota (other errors as they are).
    pub(crate) fn over_quota(e: EngineError, admission: &Admission) -> EngineError {
        let EngineError::Store(StoreError::QuotaExceeded { quota, used }) = e else { return e };
        match admission.limits.iter().find(|l| l.quota == quota) {
            Some(l) => EngineError::QuotaExceeded(quota::Exceeded {
                quota: Quota {
                    subject: l.subject.clone(),
                    measure: l.measure,
                    limit: l.limit,
                    queue: l.queue,
                    updated_at: 0,
                },
                used,
                frees_at: None,
            }),
            None => EngineError::Store(StoreError::QuotaExceeded { quota, used }),
        }
    }

    /// Admits a run held by a quota if a place is free now: `Ok(())` admitted (or not held),
    /// `Err(QuotaQueued)` still held, saying by what.
    pub(crate) fn admit_held(&self, run_id: &RunId) -> Result<(), EngineError> {
        let Some(run) = self.store.run(run_id)? else { return Ok(()) };
        if run.held_since.is_none() {
            return Ok(());
        }
        let quotas = self.store.quotas()?;
        let binding = quota::binding(&quotas, run.submitted_by.as_deref().unwrap_or(""), &run.workflow);
        let admission = Admission::of(&binding);
        match self.store.admit_held(run_id, &admission, self.now_ms())? {
            None => {
                tracing::info!("run {run_id} admitted: its quota has a free place");
                Ok(())
            }
            Some((i, used)) => Err(EngineError::QuotaQueued { reason: quota::held_reason(&quotas[i], used) }),
        }
    }
}
