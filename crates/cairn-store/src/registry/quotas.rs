//! Quotas ([`Quotas`]), once for both databases, and the admission of a run: the use a quota
//! limits is counted in the transaction that creates the run (or admits a held one), so two
//! submissions at once cannot both pass the last free place.

use cairn_core::access::Act;
use cairn_core::ids::{AttemptToken, RunId};
use cairn_core::quota::{Admission, Measure, Quota, RunLimit, Subject};
use cairn_core::store::{Quotas, StoreError};

use super::team::insert_act;
use super::{Registry, check_token, load_run, rows};
use crate::sql::{Backend, Row, Tx, params};

/// The column of `workflow_executions` a subject is counted by.
fn column(subject: &Subject) -> &'static str {
    match subject {
        Subject::Principal(_) => "submitted_by",
        // A target's runs are not counted: its steps are ([`running_on`]).
        Subject::Workflow(_) | Subject::Target(_) => "workflow",
    }
}

/// The steps holding a place of `target` now, but the one given.
fn running_on(tx: &mut dyn Tx, target: &str, but: (&str, &str)) -> Result<u64, StoreError> {
    let n: i64 = tx
        .query_one(
            "SELECT count(*) FROM tool_calls WHERE slot_target = ?1 AND status = 'RUNNING' \
             AND NOT (run_id = ?2 AND step_id = ?3)",
            params![target, but.0, but.1],
        )?
        .get(0)?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Open runs of `subject`: the held ones, or the others.
fn open_runs(tx: &mut dyn Tx, subject: &Subject, held: bool) -> Result<u64, StoreError> {
    let sql = format!(
        "SELECT count(*) FROM workflow_executions WHERE {} = ?1 AND status IN ('PENDING', 'RUNNING') AND held_since IS {}",
        column(subject),
        if held { "NOT NULL" } else { "NULL" }
    );
    let n: i64 = tx.query_one(&sql, params![subject.name()])?.get(0)?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Whether a new run is created held, or refused: over a `runs` limit in refuse mode it is
/// refused; over one in queue mode it is held, unless a `queued_runs` limit is full too.
/// `Ok(Some(at))`: held since `at`.
pub(super) fn admit_new(tx: &mut dyn Tx, admission: &Admission, at: i64) -> Result<Option<i64>, StoreError> {
    let mut held = false;
    for l in admission.limits.iter().filter(|l| l.measure == Measure::Runs) {
        let used = open_runs(tx, &l.subject, false)?;
        if used >= l.limit {
            if !l.queue {
                return Err(StoreError::QuotaExceeded { quota: l.quota, used });
            }
            held = true;
        }
    }
    if !held {
        return Ok(None);
    }
    for l in admission.limits.iter().filter(|l| l.measure == Measure::QueuedRuns) {
        let used = open_runs(tx, &l.subject, true)?;
        if used >= l.limit {
            return Err(StoreError::QuotaExceeded { quota: l.quota, used });
        }
    }
    Ok(Some(at))
}

/// The queue-mode `runs` limit that still holds a run, with its use; `None` when none does.
fn holding(tx: &mut dyn Tx, limits: &[RunLimit]) -> Result<Option<(usize, u64)>, StoreError> {
    for l in limits.iter().filter(|l| l.measure == Measure::Runs) {
        let used = open_runs(tx, &l.subject, false)?;
        if used >= l.limit {
            return Ok(Some((l.quota, used)));
        }
    }
    Ok(None)
}

fn quota_from_row(r: &Row) -> Result<Quota, StoreError> {
    let kind: String = r.get(0)?;
    let name: String = r.get(1)?;
    let measure: String = r.get(2)?;
    Ok(Quota {
        subject: Subject::of(&kind, &name).ok_or_else(|| StoreError::Corrupt(format!("a quota is on a `{kind}`")))?,
        measure: Measure::parse(&measure).ok_or_else(|| StoreError::Corrupt(format!("a quota limits `{measure}`")))?,
        limit: u64::try_from(r.get::<i64>(3)?).unwrap_or(0),
        queue: r.get::<i64>(4)? != 0,
        updated_at: r.get(5)?,
    })
}

impl<B: Backend> Quotas for Registry<B> {
    fn set_quota(&self, q: &Quota, act: &Act) -> Result<(), StoreError> {
        let limit = i64::try_from(q.limit).unwrap_or(i64::MAX);
        self.write(|tx| {
            tx.execute(
                "INSERT INTO quotas (subject_kind, subject, measure, quota_limit, queue, updated_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (subject_kind, subject, measure) DO UPDATE SET \
                 quota_limit = excluded.quota_limit, queue = excluded.queue, updated_at = excluded.updated_at",
                params![
                    q.subject.kind(),
                    q.subject.name(),
                    q.measure.as_str(),
                    limit,
                    i64::from(q.queue),
                    q.updated_at
                ],
            )?;
            insert_act(tx, act)?;
            Ok(())
        })
    }

    fn remove_quota(&self, subject: &Subject, measure: Measure, act: &Act) -> Result<bool, StoreError> {
        self.write(|tx| {
            let n = tx.execute(
                "DELETE FROM quotas WHERE subject_kind = ?1 AND subject = ?2 AND measure = ?3",
                params![subject.kind(), subject.name(), measure.as_str()],
            )?;
            if n == 1 {
                insert_act(tx, act)?;
            }
            Ok(n == 1)
        })
    }

    fn quotas(&self) -> Result<Vec<Quota>, StoreError> {
        let sql = "SELECT subject_kind, subject, measure, quota_limit, queue, updated_at FROM quotas \
                   ORDER BY subject_kind, subject, measure";
        rows(self.read(|tx| tx.query(sql, &[]))?, quota_from_row)
    }

    fn quota_use(&self, subject: &Subject, measure: Measure, since: i64) -> Result<(u64, Option<i64>), StoreError> {
        self.read(|tx| match measure {
            Measure::Steps => Ok((running_on(tx, subject.name(), ("", ""))?, None)),
            Measure::Runs => Ok((open_runs(tx, subject, false)?, None)),
            Measure::QueuedRuns => Ok((open_runs(tx, subject, true)?, None)),
            Measure::StepsPerDay => {
                // Steps executed (not reused) whose attempt started in the window.
                let sql = format!(
                    "SELECT count(*), min(t.started_at) FROM workflow_executions r JOIN tool_calls t ON t.run_id = r.run_id \
                     WHERE r.{} = ?1 AND t.started_at >= ?2 AND t.reused_from IS NULL",
                    column(subject)
                );
                let row = tx.query_one(&sql, params![subject.name(), since])?;
                Ok((u64::try_from(row.get::<i64>(0)?).unwrap_or(0), row.get(1)?))
            }
        })
    }

    fn take_target_slot(
        &self,
        run_id: &RunId,
        step_id: &str,
        token: &AttemptToken,
        target: &str,
        limit: u64,
    ) -> Result<Option<u64>, StoreError> {
        self.write(|tx| {
            check_token(tx, run_id, step_id, token)?;
            let used = running_on(tx, target, (run_id.as_str(), step_id))?;
            if used >= limit {
                return Ok(Some(used));
            }
            tx.execute(
                "UPDATE tool_calls SET slot_target = ?3 WHERE run_id = ?1 AND step_id = ?2",
                params![run_id, step_id, target],
            )?;
            Ok(None)
        })
    }

    fn admit_held(&self, run_id: &RunId, admission: &Admission, _at: i64) -> Result<Option<(usize, u64)>, StoreError> {
        self.write(|tx| {
            let Some(run) = load_run(tx, run_id)? else { return Ok(None) };
            if run.held_since.is_none() || run.status.is_terminal() {
                return Ok(None);
            }
            if let Some(held) = holding(tx, &admission.limits)? {
                return Ok(Some(held));
            }
            tx.execute("UPDATE workflow_executions SET held_since = NULL WHERE run_id = ?1", params![run_id])?;
            Ok(None)
        })
    }
}
