//! The registry's upkeep ([`Maintenance`]), once for both databases: the facts `cairn doctor`
//! judges, read on the follower connection (SQLite's read-only one), and the online copy
//! `cairn backup` takes. Nothing here writes.

use cairn_core::doctor::{EventLogFacts, Integrity, RunEventFacts, SeqGap};
use cairn_core::store::{Maintenance, RecordedFile, StoreError};

use super::{ARTIFACT_COLUMNS, Registry, artifact_from_row, parse_enum, rows};
use crate::sql::{Backend, Row, Tx, params};

impl<B: Backend> Maintenance for Registry<B> {
    fn integrity(&self) -> Result<Integrity, StoreError> {
        self.db.integrity()
    }

    fn event_log_facts(&self) -> Result<EventLogFacts, StoreError> {
        let issued = self.db.events_issued()?;
        self.follow(|tx| {
            let events: i64 = tx.query_one("SELECT count(*) FROM events", &[])?.get(0)?;
            let runs = rows(
                tx.query(
                    "SELECT r.run_id, r.status, \
                        (SELECT count(*) FROM events e WHERE e.run_id = r.run_id), \
                        (SELECT e.kind FROM events e WHERE e.run_id = r.run_id ORDER BY e.seq LIMIT 1), \
                        (SELECT count(*) FROM events e WHERE e.run_id = r.run_id AND e.kind = 'run.finished') \
                     FROM workflow_executions r ORDER BY r.created_at, r.run_id",
                    &[],
                )?,
                run_facts,
            )?;
            let completed_without_event = rows(
                tx.query(
                    "SELECT t.run_id, t.step_id FROM tool_calls t WHERE t.status = 'COMPLETED' AND NOT EXISTS \
                     (SELECT 1 FROM events e WHERE e.run_id = t.run_id AND e.step_id = t.step_id \
                      AND e.kind IN ('step.completed', 'step.replay_reused')) ORDER BY t.run_id, t.step_id",
                    &[],
                )?,
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            let gaps = issued.map(|issued| seq_gaps(tx, issued)).transpose()?;
            Ok(EventLogFacts { events: u64::try_from(events).unwrap_or(0), runs, completed_without_event, gaps })
        })
    }

    fn recorded_files(&self) -> Result<Vec<RecordedFile>, StoreError> {
        let columns: Vec<String> = ARTIFACT_COLUMNS.split(", ").map(|c| format!("a.{c}")).collect();
        let sql = format!(
            "SELECT {}, r.run_dir, (SELECT v.target FROM reservations v WHERE v.run_id = a.run_id) \
             FROM artifacts a JOIN workflow_executions r ON r.run_id = a.run_id ORDER BY a.run_id, a.step_id, a.path",
            columns.join(", ")
        );
        let width = columns.len();
        rows(self.follow(|tx| tx.query(&sql, &[]))?, |r| {
            Ok(RecordedFile { record: artifact_from_row(r)?, run_dir: r.get(width)?, target: r.get(width + 1)? })
        })
    }

    fn run_exists(&self, run_id: &str) -> Result<bool, StoreError> {
        let found =
            self.follow(|tx| tx.query_opt("SELECT 1 FROM workflow_executions WHERE run_id = ?1", params![run_id]))?;
        Ok(found.is_some())
    }

    fn backup_to(&self, dest: &std::path::Path) -> Result<u64, StoreError> {
        self.db.backup_to(dest)
    }
}

fn run_facts(r: &Row) -> Result<RunEventFacts, StoreError> {
    let count = |i: usize| -> Result<u64, StoreError> { Ok(u64::try_from(r.get::<i64>(i)?).unwrap_or(0)) };
    Ok(RunEventFacts {
        run_id: r.get(0)?,
        status: parse_enum(&r.get::<String>(1)?, "run status")?,
        events: count(2)?,
        first_kind: r.get(3)?,
        finished_events: count(4)?,
    })
}

/// The holes in the numbering `1..=issued`: after each event whose next number is not there
/// (up to the next event, or to `issued` after the last), and before the first.
fn seq_gaps(tx: &mut dyn Tx, issued: i64) -> Result<Vec<SeqGap>, StoreError> {
    let mut gaps = Vec::new();
    let first = tx.query_opt("SELECT seq, run_id FROM events ORDER BY seq LIMIT 1", &[])?;
    match &first {
        Some(r) if r.get::<i64>(0)? > 1 => {
            gaps.push(SeqGap { from: 1, to: r.get::<i64>(0)? - 1, before_run: None, after_run: Some(r.get(1)?) })
        }
        None if issued > 0 => gaps.push(SeqGap { from: 1, to: issued, before_run: None, after_run: None }),
        _ => {}
    }
    let holes = tx.query(
        "SELECT e.seq, e.run_id, \
            (SELECT n.seq FROM events n WHERE n.seq > e.seq ORDER BY n.seq LIMIT 1), \
            (SELECT n.run_id FROM events n WHERE n.seq > e.seq ORDER BY n.seq LIMIT 1) \
         FROM events e WHERE NOT EXISTS (SELECT 1 FROM events n WHERE n.seq = e.seq + 1) ORDER BY e.seq",
        &[],
    )?;
    for r in holes {
        let (seq, run): (i64, String) = (r.get(0)?, r.get(1)?);
        match r.get::<Option<i64>>(2)? {
            Some(next) => {
                gaps.push(SeqGap { from: seq + 1, to: next - 1, before_run: Some(run), after_run: r.get(3)? })
            }
            None if issued > seq => {
                gaps.push(SeqGap { from: seq + 1, to: issued, before_run: Some(run), after_run: None })
            }
            None => {}
        }
    }
    Ok(gaps)
}
