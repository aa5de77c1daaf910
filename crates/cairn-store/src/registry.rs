//! The registry's logic, once for both databases: every method of the store port (each role
//! trait of [`RunStore`]) as the statements it runs in one transaction. Every write that belongs
//! to an attempt is conditional on that attempt's token inside the same transaction, so a stale
//! worker's write can never be applied.

use cairn_core::access::Act;
use cairn_core::artifact::{Artifact, ArtifactRecord};
use cairn_core::event::{PlannedOrigin, RunEvent};
use cairn_core::ids::{AttemptToken, Owner, RunId};
use cairn_core::signature::StepSignature;
use cairn_core::status::{RunStatus, StepStatus};
use cairn_core::store::*;
use cairn_core::validator::Finding;
use serde_json::Value;

use std::collections::HashMap;
use std::sync::RwLock;

use crate::sql::{Backend, Durability, Param, Reader, Row, ToParam, Tx, params};

mod maintenance;
mod quotas;
mod team;

/// The registry over one database.
pub struct Registry<B: Backend> {
    db: B,
    /// Called after every committed write (the daemon wakes its event followers with it).
    on_commit: Option<Box<dyn Fn() + Send + Sync>>,
    /// The runs this process writes as their lease's holder: a write of one whose lease is no
    /// longer this (daemon, epoch) is refused inside its transaction (see [`Fenced`]).
    leases: RwLock<HashMap<String, Lease>>,
}

/// A transaction that refuses to write a run this process held the lease of, once the run's
/// lease is another's: every write that changes a run takes the run first ([`Tx::lock_run`]),
/// and that is where its lease row is compared, in the same transaction as the write.
struct Fenced<'a> {
    tx: &'a mut dyn Tx,
    leases: &'a HashMap<String, Lease>,
    /// The runs this transaction has taken (and checked) already, with their lease rows: a run
    /// is read and locked once however many of its writes the transaction makes.
    taken: HashMap<String, Option<(Option<String>, i64)>>,
}

impl Tx for Fenced<'_> {
    fn execute(&mut self, sql: &str, params: &[Param<'_>]) -> Result<usize, StoreError> {
        self.tx.execute(sql, params)
    }

    fn query(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>, StoreError> {
        self.tx.query(sql, params)
    }

    fn lock_run(&mut self, run_id: &str, lease: bool) -> Result<Option<(Option<String>, i64)>, StoreError> {
        if let Some(row) = self.taken.get(run_id) {
            return Ok(row.clone());
        }
        let held = self.leases.get(run_id);
        let row = self.tx.lock_run(run_id, lease || held.is_some())?;
        if let (Some(held), Some((owner, epoch))) = (held, &row)
            && (owner.as_deref() != Some(held.daemon.as_str()) || *epoch != held.epoch)
        {
            return Err(StoreError::LeaseLost {
                run_id: run_id.to_string(),
                daemon: held.daemon.clone(),
                epoch: held.epoch,
                holder: match owner {
                    Some(o) => format!("daemon `{o}` (epoch {epoch})"),
                    None => format!("no daemon (epoch {epoch})"),
                },
            });
        }
        self.taken.insert(run_id.to_string(), row.clone());
        Ok(row)
    }

    fn claim_run(&mut self, run_id: &str) -> Result<Option<(Option<String>, i64)>, StoreError> {
        // A claim takes a new epoch: no lease of this process is compared.
        let row = self.tx.claim_run(run_id)?;
        self.taken.insert(run_id.to_string(), row.clone());
        Ok(row)
    }

    fn search_docs(&mut self, query: &str, limit: i64) -> Result<Vec<Row>, StoreError> {
        self.tx.search_docs(query, limit)
    }
}

fn to_json<T: serde::Serialize + ?Sized>(v: &T) -> String {
    // Serialising our own plain data types cannot fail.
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

fn parse_json<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

fn parse_enum<T: std::str::FromStr>(text: &str, what: &str) -> Result<T, StoreError>
where
    T::Err: std::fmt::Display,
{
    text.parse().map_err(|e: T::Err| StoreError::Corrupt(format!("{what}: {e}")))
}

impl<B: Backend> Registry<B> {
    /// This store writes `run_id` as `lease`'s holder: its writes of the run are refused once
    /// the run's lease is another's (`LeaseLost`). Set where the lease is given: a run created
    /// leased, a lease taken.
    fn hold_lease(&self, run_id: &str, lease: Lease) {
        self.leases.write().unwrap_or_else(|p| p.into_inner()).insert(run_id.to_string(), lease);
    }

    pub fn new(db: B) -> Registry<B> {
        Registry { db, on_commit: None, leases: RwLock::new(HashMap::new()) }
    }

    pub(crate) fn backend(&self) -> &B {
        &self.db
    }

    /// Sets the function called after every committed write (after the connection is released).
    pub fn on_commit(mut self, hook: impl Fn() + Send + Sync + 'static) -> Registry<B> {
        self.on_commit = Some(Box::new(hook));
        self
    }

    fn committed(&self) {
        if let Some(hook) = &self.on_commit {
            hook();
        }
    }

    fn write<T>(&self, f: impl FnMut(&mut dyn Tx) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let out = self.write_quietly(Durability::Full, f)?;
        self.committed();
        Ok(out)
    }

    /// A write committed without an fsync of its own: it survives a crash of Cairn, not a power
    /// loss.
    fn write_relaxed<T>(&self, f: impl FnMut(&mut dyn Tx) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let out = self.write_quietly(Durability::Relaxed, f)?;
        self.committed();
        Ok(out)
    }

    /// A write that does not call the commit hook: for a write that adds no event and changes no
    /// status (a process's identity), so followers are not woken for nothing.
    fn write_quietly<T>(
        &self,
        durability: Durability,
        mut f: impl FnMut(&mut dyn Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let leases = self.leases.read().unwrap_or_else(|p| p.into_inner());
        self.db.write(durability, &mut |tx| f(&mut Fenced { tx, leases: &leases, taken: HashMap::new() }))
    }

    fn read<T>(&self, mut f: impl FnMut(&mut dyn Tx) -> Result<T, StoreError>) -> Result<T, StoreError> {
        self.db.read(Reader::Main, &mut f)
    }

    fn follow<T>(&self, mut f: impl FnMut(&mut dyn Tx) -> Result<T, StoreError>) -> Result<T, StoreError> {
        self.db.read(Reader::Follower, &mut f)
    }

    /// Verifications selected by `clause` (with one parameter, `?1`), their cells parsed.
    fn select_verifications(
        &self,
        clause: &str,
        param: crate::sql::Param<'_>,
    ) -> Result<Vec<VerificationRecord>, StoreError> {
        let sql = format!(
            "SELECT id, title, document, document_sha256, verdict, cells_json, notebook, draft, error, created_at, \
             finished_at, parameters_json FROM verifications {clause}"
        );
        let rows = self.read(|tx| tx.query(&sql, &[param]))?;
        rows.iter()
            .map(|r| {
                Ok(VerificationRecord {
                    id: r.get(0)?,
                    title: r.get(1)?,
                    document: r.get(2)?,
                    document_sha256: r.get(3)?,
                    verdict: r.get(4)?,
                    cells: parse_json(&r.get::<String>(5)?, "verification cells")?,
                    notebook: r.get(6)?,
                    draft: r.get(7)?,
                    error: r.get(8)?,
                    created_at: r.get(9)?,
                    finished_at: r.get(10)?,
                    parameters: parse_json(&r.get::<String>(11)?, "verification parameters")?,
                })
            })
            .collect()
    }
}

/// Inserts a new run, RUNNING at revision 1 (its `run.created` event is the caller's).
fn insert_run(tx: &mut dyn Tx, n: &NewRun, plan_id: Option<&str>) -> Result<(), StoreError> {
    let lease = n.lease.as_ref();
    // Its quotas are checked here, in the transaction that creates it.
    let held_since = quotas::admit_new(tx, &n.admission, n.at)?;
    tx.execute(
        "INSERT INTO workflow_executions (run_id, workflow, version, identity_hash, input_json, status, revision, \
         run_dir, created_at, updated_at, source_run_id, replay_json, owner, thread_id, plan_id, parallelism, \
         lease_owner, lease_epoch, lease_expires_at, home_host, submitted_by, held_since) \
         VALUES (?1, ?2, ?3, ?4, ?5, 'RUNNING', 1, ?6, ?7, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)",
        params![
            n.run_id,
            n.workflow,
            n.version,
            n.identity_hash,
            to_json(&n.input),
            n.run_dir,
            n.at,
            n.source_run_id,
            n.replay.as_ref().map(to_json),
            n.owner.map(|o| o.to_string()),
            n.thread_id,
            plan_id,
            n.parallelism.max(1),
            lease.map(|l| l.daemon.as_str()),
            i64::from(lease.is_some()),
            lease.map(|l| l.until),
            lease.and_then(|l| l.home_host.as_deref()),
            n.act.as_ref().map(|a| a.principal.as_str()),
            held_since,
        ],
    )?;
    if let Some(act) = &n.act {
        team::insert_act(tx, act)?;
    }
    Ok(())
}

fn insert_event(
    tx: &mut dyn Tx,
    run_id: &str,
    step_id: Option<&str>,
    attempt: Option<u32>,
    at: i64,
    event: &RunEvent,
) -> Result<(), StoreError> {
    // A run's events are numbered in the order their transactions commit; a run whose lease this
    // process lost is not written.
    tx.lock_run(run_id, false)?;
    let (kind, data) = (event.kind(), event.data());
    tx.execute(
        "INSERT INTO events (run_id, kind, step_id, attempt, at, data_json) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![run_id, kind, step_id, attempt, at, to_json(&data)],
    )?;
    Ok(())
}

/// Begins an attempt inside the caller's transaction (`begin_attempt`, `commit_steps`).
fn begin_in(tx: &mut dyn Tx, b: &BeginAttempt) -> Result<(), StoreError> {
    let sig = &b.signature;
    match &b.start {
        AttemptStart::First => {
            // Inserted only into an open run, checked by the insert itself (one statement a step
            // fewer than reading the run's status first); why nothing was inserted is read after.
            let inserted = tx.execute(
                "INSERT INTO tool_calls (run_id, step_id, status, tool, tool_digest, args_hash, args_json, \
                 attempt_count, attempt_token, started_at) SELECT ?1, ?2, 'RUNNING', ?3, ?4, ?5, ?6, ?7, ?8, ?9 \
                 FROM workflow_executions WHERE run_id = ?1 AND status IN ('PENDING', 'RUNNING') \
                 ON CONFLICT DO NOTHING",
                params![
                    b.run_id,
                    b.step_id,
                    sig.tool,
                    sig.tool_digest,
                    sig.args_hash,
                    to_json(&b.args),
                    b.attempt,
                    b.token,
                    b.at
                ],
            )?;
            if inserted == 0 {
                check_open(tx, &b.run_id)?;
                return Err(StoreError::StepExists { run_id: b.run_id.to_string(), step_id: b.step_id.clone() });
            }
        }
        AttemptStart::Retry { previous_token, outcome, error, cause, delay_ms } => {
            check_open(tx, &b.run_id)?;
            check_running_token(tx, &b.run_id, &b.step_id, previous_token)?;
            tx.execute(
                "UPDATE tool_calls SET attempt_token = ?3, attempt_count = ?4, outcome = NULL, error = NULL, cause_json = NULL, \
                 pid = NULL, pgid = NULL, proc_start_time = NULL, remote_json = NULL, started_at = ?5 WHERE run_id = ?1 AND step_id = ?2",
                params![b.run_id, b.step_id, b.token, b.attempt, b.at],
            )?;
            insert_event(
                tx,
                &b.run_id,
                Some(&b.step_id),
                Some(b.attempt - 1),
                b.at,
                &RunEvent::StepRetrying {
                    outcome: *outcome,
                    error: error.clone(),
                    next_attempt: b.attempt,
                    cause: cause.clone(),
                    delay_ms: *delay_ms,
                },
            )?;
        }
        AttemptStart::ResumeInterrupted { previous_token, why } => {
            check_open(tx, &b.run_id)?;
            check_running_token(tx, &b.run_id, &b.step_id, previous_token)?;
            tx.execute(
                "UPDATE tool_calls SET attempt_token = ?3, attempt_count = ?4, interrupted_count = interrupted_count + 1, \
                 pid = NULL, pgid = NULL, proc_start_time = NULL, remote_json = NULL, started_at = ?5 WHERE run_id = ?1 AND step_id = ?2",
                params![b.run_id, b.step_id, b.token, b.attempt, b.at],
            )?;
            insert_event(
                tx,
                &b.run_id,
                Some(&b.step_id),
                Some(b.attempt - 1),
                b.at,
                &RunEvent::StepInterrupted {
                    abandoned_token: previous_token.to_string(),
                    next_attempt: b.attempt,
                    why: why.clone(),
                },
            )?;
        }
    }
    insert_event(
        tx,
        &b.run_id,
        Some(&b.step_id),
        Some(b.attempt),
        b.at,
        &RunEvent::StepStarted {
            tool: sig.tool.clone(),
            tool_digest: sig.tool_digest.clone(),
            args_hash: sig.args_hash.clone(),
        },
    )
}

/// The run exists and is open (PENDING or RUNNING): a step may begin in it.
fn check_open(tx: &mut dyn Tx, run_id: &RunId) -> Result<(), StoreError> {
    let status: Option<String> = tx
        .query_opt("SELECT status FROM workflow_executions WHERE run_id = ?1", params![run_id])?
        .map(|r| r.get(0))
        .transpose()?;
    match status.as_deref() {
        None => Err(StoreError::RunNotFound(run_id.to_string())),
        Some("PENDING") | Some("RUNNING") => Ok(()),
        Some(other) => Err(StoreError::RunFinished { run_id: run_id.to_string(), status: other.into() }),
    }
}

/// Completes an attempt inside the caller's transaction, if its token owns the step.
fn complete_in(tx: &mut dyn Tx, f: &FinishAttempt) -> Result<(), StoreError> {
    // The run first, as `guard_token` takes it; the token is then compared by the update itself
    // (one statement a step fewer than reading it first), which changes no row if it is stale.
    tx.lock_run(&f.run_id, false)?;
    let changed = tx.execute(
        "UPDATE tool_calls SET status = 'COMPLETED', outcome = ?3, result_json = ?4, error = NULL, cause_json = NULL, \
         log_tail = ?5, finished_at = ?6, duration_us = ?7 WHERE run_id = ?1 AND step_id = ?2 AND attempt_token = ?8",
        params![
            f.run_id,
            f.step_id,
            f.outcome.as_str(),
            f.result.as_ref().map(to_json),
            f.log_tail,
            f.at,
            f.duration_us,
            f.token
        ],
    )?;
    if changed == 0 {
        return Err(StoreError::StaleToken { run_id: f.run_id.to_string(), step_id: f.step_id.clone() });
    }
    for a in &f.artifacts {
        let bytes = i64::try_from(a.bytes).unwrap_or(i64::MAX);
        tx.execute(
            "INSERT INTO artifacts (run_id, step_id, attempt, name, path, bytes, sha256, reused_from, recorded_at, link) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, ?8, ?9)",
            params![f.run_id, f.step_id, f.attempt, a.name, a.path, bytes, a.sha256, f.at, a.link],
        )?;
    }
    insert_event(
        tx,
        &f.run_id,
        Some(&f.step_id),
        Some(f.attempt),
        f.at,
        &RunEvent::StepCompleted { duration_us: f.duration_us },
    )
}

const RUN_COLUMNS: &str = "run_id, workflow, version, identity_hash, input_json, status, revision, run_dir, created_at, \
     updated_at, finished_at, findings_json, error, source_run_id, replay_json, owner, thread_id, plan_id, parallelism, \
     submitted_by, cancelled_by, held_since";

fn run_from_row(r: &Row) -> Result<RunRecord, StoreError> {
    Ok(RunRecord {
        run_id: r.get(0)?,
        workflow: r.get(1)?,
        version: r.get(2)?,
        identity_hash: r.get(3)?,
        input: parse_json(&r.get::<String>(4)?, "run input")?,
        status: parse_enum(&r.get::<String>(5)?, "run status")?,
        revision: r.get(6)?,
        run_dir: r.get(7)?,
        created_at: r.get(8)?,
        updated_at: r.get(9)?,
        finished_at: r.get(10)?,
        findings: parse_json::<Vec<Finding>>(&r.get::<String>(11)?, "run findings")?,
        error: r.get(12)?,
        source_run_id: r.get(13)?,
        replay: r.get::<Option<String>>(14)?.as_deref().map(|t| parse_json(t, "replay directive")).transpose()?,
        owner: r.get::<Option<String>>(15)?.map(|o| parse_enum::<Owner>(&o, "run owner")).transpose()?,
        thread_id: r.get(16)?,
        plan_id: r.get(17)?,
        parallelism: r.get(18)?,
        submitted_by: r.get(19)?,
        cancelled_by: r.get(20)?,
        held_since: r.get(21)?,
    })
}

const DAEMON_COLUMNS: &str = "id, host, pid, start_time, state_root, started_at, heartbeat_at, stopped_at";

/// `DAEMON_COLUMNS` from column `at` on.
fn daemon_from_row(r: &Row, at: usize) -> Result<DaemonRecord, StoreError> {
    Ok(DaemonRecord {
        id: r.get(at)?,
        host: r.get(at + 1)?,
        pid: r.get(at + 2)?,
        start_time: u64::try_from(r.get::<i64>(at + 3)?).unwrap_or(0),
        state_root: r.get(at + 4)?,
        started_at: r.get(at + 5)?,
        heartbeat_at: r.get(at + 6)?,
        stopped_at: r.get(at + 7)?,
    })
}

/// An open run with its lease row and its holder's daemon row: the run's columns (22), then
/// lease_owner, lease_epoch, lease_expires_at, home_host, then the daemon's (8).
const LEASED_RUN_SELECT: &str = "SELECT e.run_id, e.workflow, e.version, e.identity_hash, e.input_json, e.status, \
     e.revision, e.run_dir, e.created_at, e.updated_at, e.finished_at, e.findings_json, e.error, e.source_run_id, \
     e.replay_json, e.owner, e.thread_id, e.plan_id, e.parallelism, e.submitted_by, e.cancelled_by, e.held_since, \
     e.lease_owner, e.lease_epoch, e.lease_expires_at, e.home_host, d.id, d.host, d.pid, d.start_time, d.state_root, d.started_at, d.heartbeat_at, d.stopped_at \
     FROM workflow_executions e LEFT JOIN daemons d ON d.id = e.lease_owner";

fn leased_run_from_row(r: &Row) -> Result<LeasedRun, StoreError> {
    let owner: Option<String> = r.get(22)?;
    Ok(LeasedRun {
        run: run_from_row(r)?,
        lease: owner.map(|daemon| Ok::<_, StoreError>(Lease { daemon, epoch: r.get(23)? })).transpose()?,
        expires_at: r.get(24)?,
        home_host: r.get(25)?,
        holder: r.get::<Option<String>>(26)?.map(|_| daemon_from_row(r, 26)).transpose()?,
    })
}

const PLAN_COLUMNS: &str =
    "plan_name, plan_id, plan_checksum, workflow, version, target, run_dir, created_at, planned_by";

fn plan_from_row(r: &Row) -> Result<PlanRecord, StoreError> {
    Ok(PlanRecord {
        plan_name: r.get(0)?,
        plan_id: r.get(1)?,
        plan_checksum: r.get(2)?,
        workflow: r.get(3)?,
        version: r.get(4)?,
        target: r.get(5)?,
        run_dir: r.get(6)?,
        created_at: r.get(7)?,
        planned_by: r.get(8)?,
    })
}

const JOB_COLUMNS: &str = "job_id, session, code, status, outputs_json, execution_count, error, submitted_at, \
     started_at, finished_at, duration_ms";

fn job_from_row(r: &Row) -> Result<KernelJob, StoreError> {
    Ok(KernelJob {
        job_id: r.get(0)?,
        session: r.get(1)?,
        code: r.get(2)?,
        status: parse_enum(&r.get::<String>(3)?, "kernel job status")?,
        outputs: parse_json(&r.get::<String>(4)?, "kernel job outputs")?,
        execution_count: r.get(5)?,
        error: r.get(6)?,
        submitted_at: r.get(7)?,
        started_at: r.get(8)?,
        finished_at: r.get(9)?,
        duration_ms: r.get(10)?,
    })
}

const ARTIFACT_COLUMNS: &str = "run_id, step_id, attempt, name, path, bytes, sha256, reused_from, recorded_at, link";

fn artifact_from_row(r: &Row) -> Result<ArtifactRecord, StoreError> {
    Ok(ArtifactRecord {
        run_id: r.get(0)?,
        step_id: r.get(1)?,
        attempt: r.get(2)?,
        artifact: Artifact {
            name: r.get(3)?,
            path: r.get(4)?,
            bytes: u64::try_from(r.get::<i64>(5)?).unwrap_or(0),
            sha256: r.get(6)?,
            link: r.get(9)?,
        },
        reused_from: r.get(7)?,
        recorded_at: r.get(8)?,
    })
}

const STEP_COLUMNS: &str = "run_id, step_id, status, tool, tool_digest, args_hash, args_json, attempt_count, \
     interrupted_count, attempt_token, outcome, result_json, error, log_tail, pid, pgid, proc_start_time, started_at, \
     finished_at, duration_us, reused_from, remote_json, cause_json";

fn step_from_row(r: &Row) -> Result<StepRecord, StoreError> {
    let pid: Option<u32> = r.get(14)?;
    let remote: Option<String> = r.get(21)?;
    Ok(StepRecord {
        run_id: r.get(0)?,
        step_id: r.get(1)?,
        status: parse_enum::<StepStatus>(&r.get::<String>(2)?, "step status")?,
        signature: StepSignature { tool: r.get(3)?, tool_digest: r.get(4)?, args_hash: r.get(5)? },
        args: parse_json(&r.get::<String>(6)?, "step args")?,
        attempt_count: r.get(7)?,
        interrupted_count: r.get(8)?,
        attempt_token: r.get(9)?,
        outcome: r.get::<Option<String>>(10)?.as_deref().map(|o| parse_enum(o, "step outcome")).transpose()?,
        result: r.get::<Option<String>>(11)?.as_deref().map(|t| parse_json(t, "step result")).transpose()?,
        error: r.get(12)?,
        cause: r.get::<Option<String>>(22)?.as_deref().map(|t| parse_json(t, "step cause")).transpose()?,
        log_tail: r.get(13)?,
        process: match (pid, remote) {
            (Some(pid), remote) => Some(ProcessInfo {
                pid,
                pgid: r.get::<Option<u32>>(15)?.unwrap_or(pid),
                start_time: r.get::<Option<i64>>(16)?.map(|t| t as u64),
                remote: remote.as_deref().map(|t| parse_json(t, "step launch record")).transpose()?,
            }),
            // A launch recorded before its process was known: only the remote record locates it.
            (None, Some(remote)) => Some(ProcessInfo {
                pid: 0,
                pgid: 0,
                start_time: None,
                remote: Some(parse_json(&remote, "step launch record")?),
            }),
            (None, None) => None,
        },
        started_at: r.get(17)?,
        finished_at: r.get(18)?,
        duration_us: r.get(19)?,
        reused_from: r.get(20)?,
    })
}

fn load_run(tx: &mut dyn Tx, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
    tx.query_opt(&format!("SELECT {RUN_COLUMNS} FROM workflow_executions WHERE run_id = ?1"), params![run_id])?
        .map(|r| run_from_row(&r))
        .transpose()
}

fn workflow_from_row(r: &Row) -> Result<WorkflowRecord, StoreError> {
    Ok(WorkflowRecord {
        name: r.get(0)?,
        version: r.get(1)?,
        digest: r.get(2)?,
        path: r.get(3)?,
        spec: parse_json(&r.get::<String>(4)?, "workflow definition")?,
        registered_at: r.get(5)?,
    })
}

impl<B: Backend> Registry<B> {
    /// The workflow and version of a run, their steps' DAG order recorded (for a workflow
    /// registered before the registry kept it, now).
    fn ordered_workflow_of(&self, run_id: &RunId) -> Result<(String, String), StoreError> {
        let row = self.read(|tx| {
            tx.query_opt("SELECT workflow, version FROM workflow_executions WHERE run_id = ?1", params![run_id])
        })?;
        let row = row.ok_or_else(|| StoreError::RunNotFound(run_id.to_string()))?;
        let (workflow, version): (String, String) = (row.get(0)?, row.get(1)?);
        let sql = "SELECT count(*) FROM workflow_steps WHERE workflow = ?1 AND version = ?2";
        if self.read(|tx| count(tx, sql, params![workflow, version]))? == 0 {
            self.record_step_order(&workflow, &version)?;
        }
        Ok((workflow, version))
    }

    /// Records the DAG order of a workflow version registered before the registry kept it.
    fn record_step_order(&self, workflow: &str, version: &str) -> Result<(), StoreError> {
        let Some(record) = self.workflow(workflow, Some(version))? else { return Ok(()) };
        self.write(|tx| insert_step_order(tx, workflow, version, &record.spec))
    }
}

/// The steps of a workflow version in its DAG's order, as a run's pages are read
/// (`workflow_steps`). A definition whose DAG cannot be built (none registered is) has none.
fn insert_step_order(
    tx: &mut dyn Tx,
    workflow: &str,
    version: &str,
    spec: &cairn_core::workflow::WorkflowSpec,
) -> Result<(), StoreError> {
    let Ok(dag) = spec.dag() else { return Ok(()) };
    // A step's layer is one more than its deepest need's: the order has every need first.
    let mut layer = vec![0i64; dag.len()];
    for &i in dag.order() {
        layer[i] = dag.needs(i).iter().map(|&n| layer[n] + 1).max().unwrap_or(0);
    }
    let order: Vec<(i64, &str, i64, i64)> = dag
        .order()
        .iter()
        .enumerate()
        .map(|(position, &i)| {
            let pipeline =
                spec.steps.get(i).and_then(|s| spec.tools.get(&s.tool)).is_some_and(|t| !t.kind.is_process());
            (position as i64, dag.id(i), i64::from(pipeline), layer[i])
        })
        .collect();
    // Many rows a statement: a 100,000-step definition is 800 statements, not 100,000 round trips.
    for chunk in order.chunks(IN_LIST_MAX / 4) {
        let values: Vec<String> = (0..chunk.len())
            .map(|k| format!("(?1, ?2, ?{}, ?{}, ?{}, ?{})", 3 + 4 * k, 4 + 4 * k, 5 + 4 * k, 6 + 4 * k))
            .collect();
        let sql = format!(
            "INSERT INTO workflow_steps (workflow, version, position, step_id, pipeline, layer) VALUES {} \
             ON CONFLICT DO NOTHING",
            values.join(", ")
        );
        let mut params: Vec<Param<'_>> = vec![Param::Text(workflow), Param::Text(version)];
        for (position, id, pipeline, layer) in chunk {
            params.extend([Param::Int(*position), Param::Text(id), Param::Int(*pipeline), Param::Int(*layer)]);
        }
        tx.execute(&sql, &params)?;
    }
    Ok(())
}

/// The status a page sees a step in: its row's, or PENDING without one.
const PAGE_STATUS: &str = "COALESCE(c.status, 'PENDING')";

/// A page of a run's steps (see [`Attempts::step_page`]), read in one transaction.
fn step_page_in(
    tx: &mut dyn Tx,
    run_id: &RunId,
    workflow: &str,
    version: &str,
    q: &StepQuery,
) -> Result<StepPage, StoreError> {
    let mut counts = StepCounts {
        total: count(
            tx,
            "SELECT count(*) FROM workflow_steps WHERE workflow = ?1 AND version = ?2",
            params![workflow, version],
        )?,
        ..StepCounts::default()
    };
    for r in tx.query("SELECT status, count(*) FROM tool_calls WHERE run_id = ?1 GROUP BY status", params![run_id])? {
        let (status, n): (String, i64) = (r.get(0)?, r.get(1)?);
        let n = usize::try_from(n).unwrap_or(0);
        match status.as_str() {
            "RUNNING" => counts.running = n,
            "COMPLETED" => counts.completed = n,
            "FAILED" => counts.failed = n,
            _ => {}
        }
    }
    counts.pending = counts.total.saturating_sub(counts.running + counts.completed + counts.failed);
    // ?1 run, ?2 workflow, ?3 version, then the filters' values.
    let mut params: Vec<Param<'_>> = vec![run_id.to_param(), Param::Text(workflow), Param::Text(version)];
    let mut filter = String::new();
    if !q.statuses.is_empty() {
        let first = params.len() + 1;
        params.extend(q.statuses.iter().map(|s| Param::Text(s)));
        let status = if q.statuses.contains(&PENDING) { PAGE_STATUS } else { "c.status" };
        filter.push_str(&format!(" AND {status} IN ({})", in_list(first, q.statuses.len())));
    }
    if !q.ids.is_empty() {
        let first = params.len() + 1;
        params.extend(q.ids.iter().map(|s| Param::Text(s)));
        filter.push_str(&format!(" AND w.step_id IN ({})", in_list(first, q.ids.len())));
    }
    if let Some(layer) = q.layer {
        params.push(Param::Int(i64::try_from(layer).unwrap_or(i64::MAX)));
        filter.push_str(&format!(" AND w.layer = ?{}", params.len()));
    }
    // Steps of some statuses that all have a row (not PENDING) are found from the run's rows by
    // the index on (run_id, status), not by walking every step of the workflow.
    let rows_only = !q.statuses.is_empty() && !q.statuses.contains(&PENDING);
    let from = if rows_only {
        // CROSS JOIN: SQLite then reads the run's rows first, as written (PostgreSQL plans it alike).
        "FROM tool_calls c CROSS JOIN workflow_steps w \
         WHERE c.run_id = ?1 AND w.workflow = ?2 AND w.version = ?3 AND w.step_id = c.step_id"
    } else {
        "FROM workflow_steps w LEFT JOIN tool_calls c ON c.run_id = ?1 AND c.step_id = w.step_id \
         WHERE w.workflow = ?2 AND w.version = ?3"
    };
    let matched =
        if filter.is_empty() { counts.total } else { count(tx, &format!("SELECT count(*) {from}{filter}"), &params)? };
    let order = if q.attention_first {
        format!("CASE {PAGE_STATUS} WHEN 'FAILED' THEN 0 WHEN 'RUNNING' THEN 1 ELSE 2 END, w.position")
    } else {
        "w.position".to_string()
    };
    let limit = q.limit.map_or(i64::MAX, |l| i64::try_from(l).unwrap_or(i64::MAX));
    let offset = i64::try_from(q.offset).unwrap_or(i64::MAX);
    let (at_limit, at_offset) = (params.len() + 1, params.len() + 2);
    params.extend([Param::Int(limit), Param::Int(offset)]);
    // Every step in the DAG's order: the offset is a position (they are 0, 1, 2, … with none
    // missing), found in the index rather than walked to.
    let (keyset, skip) = if filter.is_empty() && !q.attention_first {
        (format!(" AND w.position >= ?{at_offset}"), String::new())
    } else {
        (String::new(), format!(" OFFSET ?{at_offset}"))
    };
    let sql = format!(
        "SELECT w.step_id, w.pipeline, CASE WHEN c.step_id IS NULL THEN 0 ELSE 1 END {from}{filter}{keyset} \
         ORDER BY {order} LIMIT ?{at_limit}{skip}"
    );
    let chosen =
        rows(tx.query(&sql, &params)?, |r| Ok((r.get::<String>(0)?, r.get::<i64>(1)? != 0, r.get::<i64>(2)? != 0)))?;
    // The rows of the page's steps that have one.
    let with_rows: Vec<&str> = chosen.iter().filter(|(_, _, has)| *has).map(|(id, _, _)| id.as_str()).collect();
    let mut records: HashMap<String, StepRecord> = HashMap::with_capacity(with_rows.len());
    if with_rows.len() == chosen.len() && q.is_every() {
        for r in rows(
            tx.query(&format!("SELECT {STEP_COLUMNS} FROM tool_calls WHERE run_id = ?1"), params![run_id])?,
            step_from_row,
        )? {
            records.insert(r.step_id.clone(), r);
        }
    } else {
        for chunk in with_rows.chunks(IN_LIST_MAX) {
            let sql = format!(
                "SELECT {STEP_COLUMNS} FROM tool_calls WHERE run_id = ?1 AND step_id IN ({})",
                in_list(2, chunk.len())
            );
            for r in rows(tx.query(&sql, &with_ids(run_id, chunk))?, step_from_row)? {
                records.insert(r.step_id.clone(), r);
            }
        }
    }
    let steps = chosen
        .into_iter()
        .map(|(step_id, pipeline, _)| {
            let record = records.remove(&step_id);
            PagedStep { step_id, pipeline, record }
        })
        .collect();
    Ok(StepPage { counts, matched, steps })
}

/// `count(*)` of a statement, as a size.
fn count(tx: &mut dyn Tx, sql: &str, params: &[Param<'_>]) -> Result<usize, StoreError> {
    let n: i64 = tx.query_one(sql, params)?.get(0)?;
    Ok(usize::try_from(n).unwrap_or(0))
}

const EVENT_COLUMNS: &str = "seq, run_id, kind, step_id, attempt, at, data_json";

fn event_from_row(r: &Row) -> Result<EventRecord, StoreError> {
    let (seq, run_id, kind): (i64, RunId, String) = (r.get(0)?, r.get(1)?, r.get(2)?);
    let event = RunEvent::from_parts(&kind, parse_json(&r.get::<String>(6)?, "event data")?)
        .map_err(|e| StoreError::Corrupt(format!("run `{run_id}`, event {seq}: {e}")))?;
    Ok(EventRecord { seq, run_id, step_id: r.get(3)?, attempt: r.get(4)?, at: r.get(5)?, event })
}

/// The most ids bound in one `IN (…)` list: far under SQLite's and PostgreSQL's limits on a
/// statement's parameters.
const IN_LIST_MAX: usize = 500;

/// `?FROM, ?FROM+1, …`: the placeholders of an `IN` list of `n` values.
fn in_list(from: usize, n: usize) -> String {
    (from..from + n).map(|i| format!("?{i}")).collect::<Vec<_>>().join(", ")
}

/// A run id then ids, as one statement's parameters.
fn with_ids<'a>(run_id: &'a RunId, ids: &[&'a str]) -> Vec<Param<'a>> {
    std::iter::once(run_id.to_param()).chain(ids.iter().map(|id| Param::Text(id))).collect()
}

fn rows<T>(rows: Vec<Row>, f: impl Fn(&Row) -> Result<T, StoreError>) -> Result<Vec<T>, StoreError> {
    rows.iter().map(f).collect()
}

/// The first column of the first row, if any.
fn first<T: crate::sql::FromCell>(row: Option<Row>) -> Result<Option<T>, StoreError> {
    row.map(|r| r.get(0)).transpose()
}

/// The attempt-token guard: the step row exists and `token` is its current token (and, when
/// starting a new attempt from it, the step is still RUNNING). One query, inside the caller's
/// transaction.
fn guard_token(
    tx: &mut dyn Tx,
    run_id: &str,
    step_id: &str,
    token: &AttemptToken,
    require_running: bool,
) -> Result<(), StoreError> {
    // The run first, as every write of a run takes it: the fence speaks before the token, and
    // PostgreSQL's row locks are always taken run, then step.
    tx.lock_run(run_id, false)?;
    let current = tx.query_opt(
        "SELECT attempt_token, status FROM tool_calls WHERE run_id = ?1 AND step_id = ?2",
        params![run_id, step_id],
    )?;
    let current: Option<(Option<String>, String)> = current.map(|r| Ok((r.get(0)?, r.get(1)?))).transpose()?;
    match current {
        Some((Some(t), status)) if t == token.as_str() && (!require_running || status == "RUNNING") => Ok(()),
        _ => Err(StoreError::StaleToken { run_id: run_id.into(), step_id: step_id.into() }),
    }
}

fn check_token(tx: &mut dyn Tx, run_id: &str, step_id: &str, token: &AttemptToken) -> Result<(), StoreError> {
    guard_token(tx, run_id, step_id, token, false)
}

fn check_running_token(tx: &mut dyn Tx, run_id: &str, step_id: &str, token: &AttemptToken) -> Result<(), StoreError> {
    guard_token(tx, run_id, step_id, token, true)
}

impl<B: Backend> Daemons for Registry<B> {
    fn register_daemon(&self, d: &DaemonRecord) -> Result<(), StoreError> {
        self.write_quietly(Durability::Full, |tx| {
            tx.execute(
                "INSERT INTO daemons (id, host, pid, start_time, state_root, started_at, heartbeat_at, stopped_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL)",
                params![d.id, d.host, d.pid, d.start_time as i64, d.state_root, d.started_at, d.heartbeat_at],
            )?;
            Ok(())
        })
    }

    fn heartbeat(&self, daemon: &str, at: i64, until: i64) -> Result<Vec<(RunId, Lease)>, StoreError> {
        // Not evidence: a heartbeat lost to a crash only lets the lease expire, as the crash does.
        let held = self.write_quietly(Durability::Relaxed, |tx| {
            tx.execute("UPDATE daemons SET heartbeat_at = ?2 WHERE id = ?1", params![daemon, at])?;
            tx.query(
                "UPDATE workflow_executions SET lease_expires_at = ?2 \
                 WHERE lease_owner = ?1 AND status IN ('PENDING', 'RUNNING') RETURNING run_id, lease_epoch",
                params![daemon, until],
            )
        })?;
        rows(held, |r| Ok((r.get(0)?, Lease { daemon: daemon.to_string(), epoch: r.get(1)? })))
    }

    fn stop_daemon(&self, daemon: &str, at: i64) -> Result<(), StoreError> {
        self.write_quietly(Durability::Full, |tx| {
            tx.execute("UPDATE daemons SET stopped_at = ?2, heartbeat_at = ?2 WHERE id = ?1", params![daemon, at])?;
            tx.execute(
                "UPDATE workflow_executions SET lease_expires_at = ?2 \
                 WHERE lease_owner = ?1 AND status IN ('PENDING', 'RUNNING')",
                params![daemon, at],
            )?;
            Ok(())
        })
    }

    fn live_daemons(&self, since: i64) -> Result<Vec<DaemonRecord>, StoreError> {
        let sql = format!(
            "SELECT {DAEMON_COLUMNS} FROM daemons WHERE stopped_at IS NULL AND heartbeat_at >= ?1 ORDER BY started_at, id"
        );
        rows(self.read(|tx| tx.query(&sql, params![since]))?, |r| daemon_from_row(r, 0))
    }

    fn leased_runs(&self, daemon: &str) -> Result<Vec<RunId>, StoreError> {
        let found = self.read(|tx| {
            tx.query(
                "SELECT run_id FROM workflow_executions WHERE lease_owner = ?1 AND status IN ('PENDING', 'RUNNING') \
                 ORDER BY created_at, rowid",
                params![daemon],
            )
        })?;
        rows(found, |r| r.get(0))
    }

    fn open_leases(&self, except_daemon: &str) -> Result<Vec<LeasedRun>, StoreError> {
        let sql = format!(
            "{LEASED_RUN_SELECT} WHERE e.status IN ('PENDING', 'RUNNING') \
             AND (e.lease_owner IS NULL OR e.lease_owner <> ?1) ORDER BY e.created_at, e.rowid"
        );
        // Every daemon asks this a few times a second: on the follower's connection, so it never
        // waits for a writer.
        rows(self.follow(|tx| tx.query(&sql, params![except_daemon]))?, leased_run_from_row)
    }

    fn leased_run(&self, run_id: &RunId) -> Result<Option<LeasedRun>, StoreError> {
        let sql = format!("{LEASED_RUN_SELECT} WHERE e.run_id = ?1");
        self.read(|tx| tx.query_opt(&sql, params![run_id]))?.map(|r| leased_run_from_row(&r)).transpose()
    }

    fn take_lease(
        &self,
        run_id: &RunId,
        daemon: &DaemonRecord,
        seen_epoch: i64,
        seen_revision: i64,
        until: i64,
        at: i64,
    ) -> Result<Lease, StoreError> {
        // The lease this process holds (if any) is replaced only once the new one is taken: a
        // take that fails (another pass of this daemon took it first) leaves the run driven
        // under the lease it has. Dropped before, such a failed take stranded a run this daemon
        // had just taken: its driver, no longer holding the lease, was refused the run, while
        // the heartbeat (which renews by owner) kept it leased to this daemon for good.
        let lease = self.write(|tx| {
            // A row another daemon is claiming or writing right now is skipped, not waited for:
            // its writer is alive, and a claim of a dead holder's run is tried again shortly.
            let Some((previous, _)) = tx.claim_run(run_id)? else {
                return Err(StoreError::RunNotFound(run_id.into()));
            };
            let changed = tx.execute(
                "UPDATE workflow_executions SET lease_owner = ?2, lease_epoch = lease_epoch + 1, lease_expires_at = ?3, \
                 revision = revision + 1 \
                 WHERE run_id = ?1 AND lease_epoch = ?4 AND revision = ?5 AND status IN ('PENDING', 'RUNNING')",
                params![run_id, daemon.id, until, seen_epoch, seen_revision],
            )?;
            if changed == 0 {
                return match load_run(tx, run_id)? {
                    None => Err(StoreError::RunNotFound(run_id.into())),
                    Some(run) if run.status.is_terminal() => {
                        Err(StoreError::RunFinished { run_id: run_id.into(), status: run.status.to_string() })
                    }
                    Some(_) => Err(StoreError::StaleRevision { run_id: run_id.into(), expected: seen_revision }),
                };
            }
            let epoch = seen_epoch + 1;
            insert_event(
                tx,
                run_id,
                None,
                None,
                at,
                &RunEvent::RunLeased {
                    daemon: daemon.id.clone(),
                    host: daemon.host.clone(),
                    epoch,
                    previous: previous.clone(),
                },
            )?;
            Ok(Lease { daemon: daemon.id.clone(), epoch })
        })?;
        self.hold_lease(run_id, lease.clone());
        Ok(lease)
    }

    fn drop_lease(&self, run_id: &RunId) {
        self.leases.write().unwrap_or_else(|p| p.into_inner()).remove(run_id.as_str());
    }

    fn record_stale_lease(&self, run_id: &RunId, lease: &Lease, at: i64) -> Result<(), StoreError> {
        // Written by the process that lost the lease, so not fenced by it.
        self.drop_lease(run_id);
        self.write(|tx| {
            insert_event(
                tx,
                run_id,
                None,
                None,
                at,
                &RunEvent::RunStaleLeaseWriteRejected { daemon: lease.daemon.clone(), epoch: lease.epoch },
            )
        })
    }
}

impl<B: Backend> WorkflowRegistry for Registry<B> {
    fn register_workflow(&self, rec: &WorkflowRecord) -> Result<RegisterOutcome, StoreError> {
        self.write(|tx| {
            let existing: Option<String> = first(tx.query_opt(
                "SELECT digest FROM workflows WHERE name = ?1 AND version = ?2",
                params![rec.name, rec.version],
            )?)?;
            match existing {
                Some(d) if d == rec.digest => Ok(RegisterOutcome::AlreadyRegistered),
                Some(d) => Ok(RegisterOutcome::Conflict { existing_digest: d }),
                None => {
                    tx.execute(
                        "INSERT INTO workflows (name, version, digest, path, spec_json, registered_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                        params![rec.name, rec.version, rec.digest, rec.path, to_json(&rec.spec), rec.registered_at],
                    )?;
                    insert_step_order(tx, &rec.name, &rec.version, &rec.spec)?;
                    Ok(RegisterOutcome::Inserted)
                }
            }
        })
    }

    fn workflow(&self, name: &str, version: Option<&str>) -> Result<Option<WorkflowRecord>, StoreError> {
        // The versions first, then the one definition asked for: a definition may be megabytes.
        let version = match version {
            Some(v) => v.to_string(),
            None => {
                let versions =
                    self.read(|tx| tx.query("SELECT version FROM workflows WHERE name = ?1", params![name]))?;
                let versions = rows(versions, |r| r.get::<String>(0))?;
                // The highest semantic version, not the newest registration.
                match versions.into_iter().max_by(|a, b| semver_key(a).cmp(&semver_key(b))) {
                    Some(v) => v,
                    None => return Ok(None),
                }
            }
        };
        let sql = "SELECT name, version, digest, path, spec_json, registered_at FROM workflows WHERE name = ?1 AND version = ?2";
        self.read(|tx| tx.query_opt(sql, params![name, version]))?.map(|r| workflow_from_row(&r)).transpose()
    }

    fn workflows(&self) -> Result<Vec<WorkflowRecord>, StoreError> {
        let sql = "SELECT name, version, digest, path, spec_json, registered_at FROM workflows";
        let mut all = rows(self.read(|tx| tx.query(sql, &[]))?, workflow_from_row)?;
        all.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| semver_key(&a.version).cmp(&semver_key(&b.version))));
        Ok(all)
    }
}

impl<B: Backend> Runs for Registry<B> {
    fn create_run(&self, new: &NewRun) -> Result<CreateRun, StoreError> {
        let created = self.write(|tx| {
            if let Some(existing) = load_run(tx, &new.run_id)? {
                return Ok(CreateRun::Existing(existing));
            }
            insert_run(tx, new, None)?;
            let event = RunEvent::RunCreated {
                workflow: new.workflow.clone(),
                version: new.version.clone(),
                identity_hash: new.identity_hash.clone(),
                source_run_id: new.source_run_id.as_deref().map(str::to_string),
                plan: None,
            };
            insert_event(tx, &new.run_id, None, None, new.at, &event)?;
            load_run(tx, &new.run_id)?
                .map(CreateRun::Created)
                .ok_or_else(|| StoreError::RunNotFound(new.run_id.to_string()))
        })?;
        if let (CreateRun::Created(run), Some(lease)) = (&created, &new.lease) {
            self.hold_lease(&run.run_id, Lease { daemon: lease.daemon.clone(), epoch: 1 });
        }
        Ok(created)
    }

    fn run(&self, run_id: &RunId) -> Result<Option<RunRecord>, StoreError> {
        self.read(|tx| load_run(tx, run_id))
    }

    fn run_status(&self, run_id: &RunId) -> Result<Option<RunStatus>, StoreError> {
        let status: Option<String> = self.follow(|tx| {
            first(tx.query_opt("SELECT status FROM workflow_executions WHERE run_id = ?1", params![run_id])?)
        })?;
        status.map(|s| parse_enum(&s, "run status")).transpose()
    }

    fn runs(&self, q: &RunQuery<'_>) -> Result<Vec<RunRecord>, StoreError> {
        // Only the filters given are in the statement, so each one can use its index (a run's
        // replays by `source_run_id`, the newest runs by `created_at`).
        let status = q.status.map(|s| s.as_str());
        let mut clauses = Vec::new();
        let mut values = Vec::new();
        for (column, value) in
            [("status", status), ("workflow", q.workflow), ("source_run_id", q.source_run_id.map(RunId::as_str))]
        {
            if let Some(v) = value {
                clauses.push(format!("{column} = ?{}", values.len() + 1));
                values.push(crate::sql::Param::Text(v));
            }
        }
        values.push(crate::sql::Param::Int(q.limit.min(i64::MAX as usize) as i64));
        let filter = if clauses.is_empty() { String::new() } else { format!("WHERE {}", clauses.join(" AND ")) };
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM workflow_executions {filter} ORDER BY created_at DESC, rowid DESC LIMIT ?{}",
            values.len()
        );
        rows(self.read(|tx| tx.query(&sql, &values))?, run_from_row)
    }

    fn finish_run(
        &self,
        run_id: &RunId,
        expected_revision: i64,
        status: RunStatus,
        findings: &[Finding],
        error: Option<&str>,
        at: i64,
    ) -> Result<RunRecord, StoreError> {
        self.write(|tx| {
            // The fence first: a holder whose lease was taken (which moved the revision) is told
            // so, not that the run changed.
            tx.lock_run(run_id, false)?;
            let changed = tx.execute(
                "UPDATE workflow_executions SET status = ?3, findings_json = ?4, error = ?5, finished_at = ?6, \
                 updated_at = ?6, revision = revision + 1 \
                 WHERE run_id = ?1 AND revision = ?2 AND status IN ('PENDING', 'RUNNING')",
                params![run_id, expected_revision, status.as_str(), to_json(findings), error, at],
            )?;
            if changed == 0 {
                return match load_run(tx, run_id)? {
                    None => Err(StoreError::RunNotFound(run_id.into())),
                    Some(_) => Err(StoreError::StaleRevision { run_id: run_id.into(), expected: expected_revision }),
                };
            }
            insert_event(
                tx,
                run_id,
                None,
                None,
                at,
                &RunEvent::RunFinished { status, findings: findings.len(), error: error.map(String::from) },
            )?;
            load_run(tx, run_id)?.ok_or_else(|| StoreError::RunNotFound(run_id.into()))
        })
    }

    fn claim_run(
        &self,
        run_id: &RunId,
        expected_revision: i64,
        owner: Option<&Owner>,
        at: i64,
    ) -> Result<i64, StoreError> {
        let holds_lease = self.leases.read().unwrap_or_else(|p| p.into_inner()).contains_key(run_id.as_str());
        self.write(|tx| {
            // A held lease is checked by the fence; without one, a daemon's current lease means
            // that daemon drives the run, and two drivers would both resume its RUNNING steps.
            tx.lock_run(run_id, false)?;
            let lease = tx.query_opt(
                "SELECT lease_owner, lease_expires_at FROM workflow_executions WHERE run_id = ?1",
                params![run_id],
            )?;
            if let Some(row) = lease.filter(|_| !holds_lease) {
                let (daemon, until): (Option<String>, Option<i64>) = (row.get(0)?, row.get(1)?);
                if let (Some(daemon), Some(until)) = (daemon, until.filter(|u| *u > at)) {
                    return Err(StoreError::RunLeased { run_id: run_id.into(), daemon, until });
                }
            }
            let changed = tx.execute(
                "UPDATE workflow_executions SET revision = revision + 1, updated_at = ?3, owner = ?4 \
                 WHERE run_id = ?1 AND revision = ?2 AND status IN ('PENDING', 'RUNNING')",
                params![run_id, expected_revision, at, owner.map(|o| o.to_string())],
            )?;
            if changed == 0 {
                return Err(StoreError::StaleRevision { run_id: run_id.into(), expected: expected_revision });
            }
            insert_event(
                tx,
                run_id,
                None,
                None,
                at,
                &RunEvent::RunResumed { revision: expected_revision + 1, owner: owner.map(|o| o.to_string()) },
            )?;
            Ok(expected_revision + 1)
        })
    }

    fn open_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM workflow_executions WHERE status IN ('PENDING', 'RUNNING') ORDER BY created_at, rowid"
        );
        rows(self.read(|tx| tx.query(&sql, &[]))?, run_from_row)
    }

    fn cancel_run(&self, run_id: &RunId, reason: &str, at: i64, act: Option<&Act>) -> Result<RunRecord, StoreError> {
        self.write(|tx| {
            tx.lock_run(run_id, false)?;
            let run = load_run(tx, run_id)?.ok_or_else(|| StoreError::RunNotFound(run_id.into()))?;
            if run.status.is_terminal() {
                return Err(StoreError::RunFinished { run_id: run_id.into(), status: run.status.to_string() });
            }
            let running = tx.query(
                "SELECT step_id, attempt_count FROM tool_calls WHERE run_id = ?1 AND status = 'RUNNING'",
                params![run_id],
            )?;
            let running: Vec<(String, u32)> = rows(running, |r| Ok((r.get(0)?, r.get(1)?)))?;
            for (step_id, attempt) in &running {
                tx.execute(
                    "UPDATE tool_calls SET status = 'FAILED', error = ?3, attempt_token = NULL, finished_at = ?4 \
                     WHERE run_id = ?1 AND step_id = ?2",
                    params![run_id, step_id, reason, at],
                )?;
                insert_event(
                    tx,
                    run_id,
                    Some(step_id),
                    Some(*attempt),
                    at,
                    &RunEvent::StepCancelled { reason: reason.to_string() },
                )?;
            }
            tx.execute(
                "UPDATE workflow_executions SET status = 'CANCELLED', error = ?2, finished_at = ?3, updated_at = ?3, \
                 revision = revision + 1, cancelled_by = ?4 WHERE run_id = ?1",
                params![run_id, reason, at, act.map(|a| a.principal.as_str())],
            )?;
            if let Some(act) = act {
                team::insert_act(tx, act)?;
            }
            insert_event(
                tx,
                run_id,
                None,
                None,
                at,
                &RunEvent::RunFinished { status: RunStatus::Cancelled, findings: 0, error: Some(reason.to_string()) },
            )?;
            load_run(tx, run_id)?.ok_or_else(|| StoreError::RunNotFound(run_id.into()))
        })
    }

    fn note_run(&self, run_id: &RunId, events: &[RunEvent], at: i64) -> Result<bool, StoreError> {
        self.write(|tx| {
            tx.lock_run(run_id, false)?;
            let run = load_run(tx, run_id)?.ok_or_else(|| StoreError::RunNotFound(run_id.into()))?;
            if run.status.is_terminal() {
                return Ok(false);
            }
            for event in events {
                insert_event(tx, run_id, None, None, at, event)?;
            }
            Ok(true)
        })
    }
}

impl<B: Backend> Attempts for Registry<B> {
    fn steps(&self, run_id: &RunId) -> Result<Vec<StepRecord>, StoreError> {
        let sql = format!("SELECT {STEP_COLUMNS} FROM tool_calls WHERE run_id = ?1 ORDER BY started_at, rowid");
        rows(self.read(|tx| tx.query(&sql, params![run_id]))?, step_from_row)
    }

    fn step_page(&self, run_id: &RunId, query: &StepQuery) -> Result<StepPage, StoreError> {
        let (workflow, version) = self.ordered_workflow_of(run_id)?;
        self.read(|tx| step_page_in(tx, run_id, &workflow, &version, query))
    }

    fn layer_counts(
        &self,
        run_id: &RunId,
        offset: usize,
        limit: usize,
    ) -> Result<(Vec<LayerCounts>, usize), StoreError> {
        let (workflow, version) = self.ordered_workflow_of(run_id)?;
        let (offset, limit) = (i64::try_from(offset).unwrap_or(i64::MAX), i64::try_from(limit).unwrap_or(i64::MAX));
        self.read(|tx| {
            let layers = count(
                tx,
                "SELECT count(DISTINCT layer) FROM workflow_steps WHERE workflow = ?1 AND version = ?2",
                params![workflow, version],
            )?;
            // Layers are numbered from 0 with none missing: the page is a range of numbers.
            let (from, to) = (offset, offset.saturating_add(limit));
            let found = tx.query(
                &format!(
                    "SELECT w.layer, {PAGE_STATUS}, count(*) FROM workflow_steps w \
                     LEFT JOIN tool_calls c ON c.run_id = ?1 AND c.step_id = w.step_id \
                     WHERE w.workflow = ?2 AND w.version = ?3 AND w.layer >= ?4 AND w.layer < ?5 GROUP BY w.layer, {PAGE_STATUS}"
                ),
                params![run_id, workflow, version, from, to],
            )?;
            let mut by_layer: std::collections::BTreeMap<i64, LayerCounts> = std::collections::BTreeMap::new();
            for r in found {
                let (layer, status, n): (i64, String, i64) = (r.get(0)?, r.get(1)?, r.get(2)?);
                let entry = by_layer.entry(layer).or_insert_with(|| LayerCounts {
                    layer: usize::try_from(layer).unwrap_or(0),
                    ..LayerCounts::default()
                });
                let n = usize::try_from(n).unwrap_or(0);
                entry.counts.total += n;
                match status.as_str() {
                    "RUNNING" => entry.counts.running += n,
                    "COMPLETED" => entry.counts.completed += n,
                    "FAILED" => entry.counts.failed += n,
                    _ => entry.counts.pending += n,
                }
            }
            for (layer, entry) in by_layer.iter_mut() {
                let first = tx.query(
                    "SELECT step_id FROM workflow_steps WHERE workflow = ?1 AND version = ?2 AND layer = ?3 ORDER BY position LIMIT 3",
                    params![workflow, version, *layer],
                )?;
                entry.first = rows(first, |r| r.get(0))?;
            }
            Ok((by_layer.into_values().collect(), layers))
        })
    }

    fn step_ids(&self, run_id: &RunId) -> Result<Vec<String>, StoreError> {
        let found = self.read(|tx| tx.query("SELECT step_id FROM tool_calls WHERE run_id = ?1", params![run_id]))?;
        rows(found, |r| r.get(0))
    }

    fn events(&self, run_id: &RunId, after_seq: i64) -> Result<Vec<EventRecord>, StoreError> {
        self.events_page(run_id, after_seq, usize::MAX)
    }

    fn events_page(&self, run_id: &RunId, after_seq: i64, limit: usize) -> Result<Vec<EventRecord>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let found = self.follow(|tx| {
            tx.query(
                &format!("SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3"),
                params![run_id, after_seq, limit],
            )
        })?;
        rows(found, event_from_row)
    }

    fn last_events(&self, run_id: &RunId, n: usize) -> Result<Vec<EventRecord>, StoreError> {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ?1 ORDER BY seq DESC LIMIT ?2");
        let mut found = rows(self.read(|tx| tx.query(&sql, params![run_id, n]))?, event_from_row)?;
        found.reverse();
        Ok(found)
    }

    fn events_of_steps(&self, run_id: &RunId, step_ids: &[&str]) -> Result<Vec<EventRecord>, StoreError> {
        let own = format!("SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ?1 AND step_id IS NULL ORDER BY seq");
        let mut found = rows(self.read(|tx| tx.query(&own, params![run_id]))?, event_from_row)?;
        for chunk in step_ids.chunks(IN_LIST_MAX) {
            let sql = format!(
                "SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ?1 AND step_id IN ({}) ORDER BY seq",
                in_list(2, chunk.len())
            );
            found.extend(rows(self.read(|tx| tx.query(&sql, &with_ids(run_id, chunk)))?, event_from_row)?);
        }
        found.sort_by_key(|e| e.seq);
        Ok(found)
    }

    fn begin_attempt(&self, b: &BeginAttempt) -> Result<(), StoreError> {
        self.write(|tx| begin_in(tx, b))
    }

    fn record_process(
        &self,
        run_id: &RunId,
        step_id: &str,
        token: &AttemptToken,
        p: &ProcessInfo,
    ) -> Result<(), StoreError> {
        // Without fsync of its own: the identity must survive a crash of Cairn, which a commit
        // does; after a power loss the process is gone anyway. That saves one fsync per step on
        // the hot path.
        self.write_quietly(Durability::Relaxed, |tx| {
            check_token(tx, run_id, step_id, token)?;
            tx.execute(
                "UPDATE tool_calls SET pid = ?3, pgid = ?4, proc_start_time = ?5, remote_json = ?6 \
                 WHERE run_id = ?1 AND step_id = ?2",
                params![
                    run_id,
                    step_id,
                    (p.pid != 0).then_some(p.pid),
                    (p.pgid != 0).then_some(p.pgid),
                    p.start_time.map(|t| t as i64),
                    p.remote.as_ref().map(to_json)
                ],
            )?;
            Ok(())
        })
    }

    fn append_step_events(
        &self,
        run_id: &RunId,
        step_id: &str,
        token: &AttemptToken,
        attempt: u32,
        events: &[RunEvent],
        at: i64,
    ) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        // Progress, not evidence: a crash may lose the last ones, and the successor reads them
        // again from the log (each carries its offset), so no fsync.
        self.write_relaxed(|tx| {
            check_running_token(tx, run_id, step_id, token)?;
            for e in events {
                insert_event(tx, run_id, Some(step_id), Some(attempt), at, e)?;
            }
            Ok(())
        })
    }

    fn adopt_attempt(
        &self,
        run_id: &RunId,
        step_id: &str,
        previous_token: &AttemptToken,
        token: &AttemptToken,
        at: i64,
    ) -> Result<(), StoreError> {
        self.write(|tx| {
            check_running_token(tx, run_id, step_id, previous_token)?;
            let attempt: u32 = tx
                .query_one(
                    "SELECT attempt_count FROM tool_calls WHERE run_id = ?1 AND step_id = ?2",
                    params![run_id, step_id],
                )?
                .get(0)?;
            tx.execute(
                "UPDATE tool_calls SET attempt_token = ?3 WHERE run_id = ?1 AND step_id = ?2",
                params![run_id, step_id, token],
            )?;
            insert_event(
                tx,
                run_id,
                Some(step_id),
                Some(attempt),
                at,
                &RunEvent::StepReattached { abandoned_token: previous_token.to_string() },
            )
        })
    }

    fn complete_attempt(&self, f: &FinishAttempt) -> Result<(), StoreError> {
        self.write(|tx| complete_in(tx, f))
    }

    fn commit_steps(&self, complete: &[FinishAttempt], begin: &[BeginAttempt]) -> Result<(), StoreError> {
        self.write(|tx| {
            for f in complete {
                complete_in(tx, f)?;
            }
            for b in begin {
                begin_in(tx, b)?;
            }
            Ok(())
        })
    }

    fn fail_attempt(&self, f: &FinishAttempt, run_error: &str) -> Result<(), StoreError> {
        self.write(|tx| {
            check_token(tx, &f.run_id, &f.step_id, &f.token)?;
            tx.execute(
                "UPDATE tool_calls SET status = 'FAILED', outcome = ?3, result_json = NULL, error = ?4, log_tail = ?5, \
                 finished_at = ?6, duration_us = ?7, cause_json = ?8 WHERE run_id = ?1 AND step_id = ?2",
                params![
                    f.run_id,
                    f.step_id,
                    f.outcome.as_str(),
                    f.error,
                    f.log_tail,
                    f.at,
                    f.duration_us,
                    f.cause.as_ref().map(to_json)
                ],
            )?;
            insert_event(
                tx,
                &f.run_id,
                Some(&f.step_id),
                Some(f.attempt),
                f.at,
                &RunEvent::StepFailed {
                    outcome: f.outcome,
                    error: f.error.clone(),
                    duration_us: f.duration_us,
                    cause: f.cause.clone(),
                },
            )?;
            let changed = tx.execute(
                "UPDATE workflow_executions SET status = 'FAILED', error = ?2, finished_at = ?3, updated_at = ?3, \
                 revision = revision + 1 WHERE run_id = ?1 AND status IN ('PENDING', 'RUNNING')",
                params![f.run_id, run_error, f.at],
            )?;
            if changed == 1 {
                insert_event(
                    tx,
                    &f.run_id,
                    None,
                    None,
                    f.at,
                    &RunEvent::RunFinished {
                        status: RunStatus::Failed,
                        findings: 0,
                        error: Some(run_error.to_string()),
                    },
                )?;
            }
            Ok(())
        })
    }

    fn record_stale_write(
        &self,
        run_id: &RunId,
        step_id: &str,
        token: &AttemptToken,
        at: i64,
    ) -> Result<(), StoreError> {
        self.write(|tx| {
            insert_event(
                tx,
                run_id,
                Some(step_id),
                None,
                at,
                &RunEvent::StepStaleWriteRejected { token: token.to_string() },
            )
        })
    }

    fn copy_reused_steps(
        &self,
        run_id: &RunId,
        source_run_id: &RunId,
        steps: &[StepRecord],
        at: i64,
    ) -> Result<usize, StoreError> {
        self.write(|tx| {
            let mut copied = 0;
            for s in steps {
                // The evidence itself is copied, never recomputed: same result, same signature.
                let n = tx.execute(
                    "INSERT INTO tool_calls (run_id, step_id, status, tool, tool_digest, args_hash, args_json, \
                     attempt_count, outcome, result_json, log_tail, started_at, finished_at, duration_us, reused_from) \
                     VALUES (?1, ?2, 'COMPLETED', ?3, ?4, ?5, ?6, 0, ?7, ?8, ?9, ?10, ?10, ?11, ?12) \
                     ON CONFLICT DO NOTHING",
                    params![
                        run_id,
                        s.step_id,
                        s.signature.tool,
                        s.signature.tool_digest,
                        s.signature.args_hash,
                        to_json(&s.args),
                        s.outcome.map(|o| o.as_str()),
                        s.result.as_ref().map(to_json),
                        s.log_tail,
                        at,
                        s.duration_us,
                        source_run_id,
                    ],
                )?;
                if n == 1 {
                    copied += 1;
                    // The bytes' producer stays the run whose attempt wrote them, however many
                    // replays carried them since.
                    tx.execute(
                        "INSERT INTO artifacts (run_id, step_id, attempt, name, path, bytes, sha256, reused_from, recorded_at, link) \
                         SELECT ?1, step_id, attempt, name, path, bytes, sha256, COALESCE(reused_from, run_id), ?4, link \
                         FROM artifacts WHERE run_id = ?2 AND step_id = ?3",
                        params![run_id, source_run_id, s.step_id, at],
                    )?;
                    let origin = s.reused_from.as_deref().unwrap_or(source_run_id);
                    insert_event(tx, run_id, Some(&s.step_id), Some(0), at, &RunEvent::StepReplayReused {
                        source_run_id: source_run_id.to_string(),
                        origin_run_id: origin.to_string(),
                        args_hash: s.signature.args_hash.clone(),
                    })?;
                }
            }
            Ok(copied)
        })
    }
}

impl<B: Backend> Artifacts for Registry<B> {
    fn artifacts(&self, run_id: &RunId) -> Result<Vec<ArtifactRecord>, StoreError> {
        let sql = format!("SELECT {ARTIFACT_COLUMNS} FROM artifacts WHERE run_id = ?1 ORDER BY step_id, path");
        rows(self.read(|tx| tx.query(&sql, params![run_id]))?, artifact_from_row)
    }

    fn artifacts_of_steps(&self, run_id: &RunId, step_ids: &[&str]) -> Result<Vec<ArtifactRecord>, StoreError> {
        let mut found = Vec::new();
        for chunk in step_ids.chunks(IN_LIST_MAX) {
            let sql = format!(
                "SELECT {ARTIFACT_COLUMNS} FROM artifacts WHERE run_id = ?1 AND step_id IN ({}) ORDER BY step_id, path",
                in_list(2, chunk.len())
            );
            let params = with_ids(run_id, chunk);
            found.extend(rows(self.read(|tx| tx.query(&sql, &params))?, artifact_from_row)?);
        }
        found.sort_by(|a, b| (&a.step_id, &a.artifact.path).cmp(&(&b.step_id, &b.artifact.path)));
        Ok(found)
    }

    fn artifacts_with_sha256(&self, sha256: &str) -> Result<Vec<ArtifactRecord>, StoreError> {
        let sql =
            // A symlink's digest is not a file's bytes: a trace by bytes never finds one.
            format!("SELECT {ARTIFACT_COLUMNS} FROM artifacts WHERE sha256 = ?1 AND link IS NULL ORDER BY recorded_at, run_id, path");
        rows(self.read(|tx| tx.query(&sql, params![sha256]))?, artifact_from_row)
    }
}

impl<B: Backend> Verifications for Registry<B> {
    fn insert_verification(&self, v: &VerificationRecord) -> Result<(), StoreError> {
        self.write(|tx| {
            tx.execute(
                "INSERT INTO verifications (id, title, document, document_sha256, verdict, cells_json, notebook, draft, error, \
                 created_at, finished_at, parameters_json) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                params![
                    v.id,
                    v.title,
                    v.document,
                    v.document_sha256,
                    v.verdict,
                    to_json(&v.cells),
                    v.notebook,
                    v.draft,
                    v.error,
                    v.created_at,
                    v.finished_at,
                    // A verification without parameters has none: `{}`.
                    if v.parameters.is_null() { "{}".to_string() } else { to_json(&v.parameters) }
                ],
            )?;
            Ok(())
        })
    }

    fn finish_verification(&self, v: &VerificationRecord) -> Result<(), StoreError> {
        self.write(|tx| {
            tx.execute(
                "UPDATE verifications SET verdict = ?2, cells_json = ?3, notebook = ?4, draft = ?5, error = ?6, finished_at = ?7 \
                 WHERE id = ?1",
                params![v.id, v.verdict, to_json(&v.cells), v.notebook, v.draft, v.error, v.finished_at],
            )?;
            Ok(())
        })
    }

    fn verifications(&self, limit: usize) -> Result<Vec<VerificationRecord>, StoreError> {
        let limit = crate::sql::Param::Int(limit.min(i64::MAX as usize) as i64);
        self.select_verifications("ORDER BY created_at DESC, rowid DESC LIMIT ?1", limit)
    }

    fn verification(&self, id: &str) -> Result<Option<VerificationRecord>, StoreError> {
        Ok(self.select_verifications("WHERE id = ?1", crate::sql::Param::Text(id))?.pop())
    }
}

impl<B: Backend> KernelJobs for Registry<B> {
    fn save_kernel_job(&self, job: &KernelJob) -> Result<(), StoreError> {
        self.write_relaxed(|tx| {
            tx.execute(
                "INSERT INTO kernel_jobs (job_id, session, code, status, outputs_json, execution_count, error, \
                 submitted_at, started_at, finished_at, duration_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) \
                 ON CONFLICT (job_id) DO UPDATE SET session = excluded.session, status = excluded.status, outputs_json = excluded.outputs_json, \
                 execution_count = excluded.execution_count, error = excluded.error, started_at = excluded.started_at, \
                 finished_at = excluded.finished_at, duration_ms = excluded.duration_ms",
                params![
                    job.job_id,
                    job.session,
                    job.code,
                    job.status.as_str(),
                    to_json(&job.outputs),
                    job.execution_count,
                    job.error,
                    job.submitted_at,
                    job.started_at,
                    job.finished_at,
                    job.duration_ms,
                ],
            )?;
            Ok(())
        })
    }

    fn kernel_job(&self, job_id: &str) -> Result<Option<KernelJob>, StoreError> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM kernel_jobs WHERE job_id = ?1");
        self.read(|tx| tx.query_opt(&sql, params![job_id]))?.map(|r| job_from_row(&r)).transpose()
    }

    fn kernel_jobs(&self) -> Result<Vec<KernelJob>, StoreError> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM kernel_jobs ORDER BY seq");
        rows(self.read(|tx| tx.query(&sql, &[]))?, job_from_row)
    }
}

impl<B: Backend> Plans for Registry<B> {
    fn insert_plan(&self, p: &PlanRecord, document: &str, made_in: &str, act: Option<&Act>) -> Result<(), StoreError> {
        self.write(|tx| {
            if tx.query_opt("SELECT plan_id FROM plans WHERE plan_name = ?1", params![p.plan_name])?.is_some() {
                return Err(StoreError::PlanExists(p.plan_name.clone()));
            }
            tx.execute(
                "INSERT INTO plans (plan_name, plan_id, plan_checksum, workflow, version, target, run_dir, created_at, \
                 plan_json, made_in, planned_by) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                params![
                    p.plan_name,
                    p.plan_id,
                    p.plan_checksum,
                    p.workflow,
                    p.version,
                    p.target,
                    p.run_dir,
                    p.created_at,
                    document,
                    made_in,
                    p.planned_by
                ],
            )?;
            if let Some(act) = act {
                team::insert_act(tx, act)?;
            }
            Ok(())
        })
    }

    fn plan_document(&self, plan_name: &str) -> Result<Option<(String, String)>, StoreError> {
        let row = self
            .read(|tx| tx.query_opt("SELECT plan_json, made_in FROM plans WHERE plan_name = ?1", params![plan_name]))?;
        // A plan stored before documents were kept has neither.
        let found: Option<(Option<String>, Option<String>)> =
            row.map(|r| Ok::<_, StoreError>((r.get(0)?, r.get(1)?))).transpose()?;
        Ok(found.and_then(|(document, made_in)| Some((document?, made_in?))))
    }

    fn plan(&self, plan_name: &str) -> Result<Option<PlanRecord>, StoreError> {
        let sql = format!("SELECT {PLAN_COLUMNS} FROM plans WHERE plan_name = ?1");
        self.read(|tx| tx.query_opt(&sql, params![plan_name]))?.map(|r| plan_from_row(&r)).transpose()
    }

    fn plans(&self) -> Result<Vec<PlanRecord>, StoreError> {
        let sql = format!("SELECT {PLAN_COLUMNS} FROM plans ORDER BY created_at DESC, rowid DESC");
        rows(self.read(|tx| tx.query(&sql, &[]))?, plan_from_row)
    }

    fn consume_receipt(&self, c: &ConsumeReceipt) -> Result<RunRecord, StoreError> {
        let run = self.write(|tx| {
            if tx.query_opt("SELECT run_id FROM receipts WHERE receipt_id = ?1", params![c.receipt_id])?.is_some() {
                return Err(StoreError::ReceiptConsumed(c.receipt_id.clone()));
            }
            let reserved: Option<String> = first(tx.query_opt(
                "SELECT run_id FROM reservations WHERE target = ?1 AND run_dir = ?2",
                params![c.target, c.run.run_dir],
            )?)?;
            if let Some(run_id) = reserved {
                return Err(StoreError::RunDirReserved {
                    target: c.target.clone(),
                    run_dir: c.run.run_dir.clone(),
                    run_id,
                });
            }
            if load_run(tx, &c.run.run_id)?.is_some() {
                return Err(StoreError::Database(format!("run id `{}` exists already", c.run.run_id)));
            }
            let n = &c.run;
            insert_run(tx, n, Some(&c.plan_id))?;
            tx.execute(
                "INSERT INTO receipts (receipt_id, plan_id, run_id, consumed_at, channel, approved_by) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    c.receipt_id,
                    c.plan_id,
                    n.run_id,
                    n.at,
                    c.channel.as_str(),
                    c.act.as_ref().map(|a| a.principal.as_str())
                ],
            )?;
            if let Some(act) = &c.act {
                // The approval is the submission of a planned run: its approver submitted it.
                tx.execute(
                    "UPDATE workflow_executions SET submitted_by = ?2 WHERE run_id = ?1 AND submitted_by IS NULL",
                    params![n.run_id, act.principal],
                )?;
                team::insert_act(tx, act)?;
            }
            tx.execute(
                "INSERT INTO reservations (target, run_dir, run_id, plan_id, reserved_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![c.target, n.run_dir, n.run_id, c.plan_id, n.at],
            )?;
            let event = RunEvent::RunCreated {
                workflow: n.workflow.clone(),
                version: n.version.clone(),
                identity_hash: n.identity_hash.clone(),
                source_run_id: n.source_run_id.as_deref().map(str::to_string),
                plan: Some(PlannedOrigin {
                    plan_id: c.plan_id.clone(),
                    receipt_id: c.receipt_id.clone(),
                    target: c.target.clone(),
                    run_dir: n.run_dir.clone(),
                }),
            };
            insert_event(tx, &n.run_id, None, None, n.at, &event)?;
            load_run(tx, &n.run_id)?.ok_or_else(|| StoreError::RunNotFound(n.run_id.to_string()))
        })?;
        if let Some(lease) = &c.run.lease {
            self.hold_lease(&run.run_id, Lease { daemon: lease.daemon.clone(), epoch: 1 });
        }
        Ok(run)
    }

    fn run_of_plan(&self, plan_id: &str) -> Result<Option<RunId>, StoreError> {
        first(self.read(|tx| tx.query_opt("SELECT run_id FROM receipts WHERE plan_id = ?1", params![plan_id]))?)
    }

    fn approval_of_run(&self, run_id: &RunId) -> Result<Option<cairn_core::plan::Approval>, StoreError> {
        let row = self.read(|tx| {
            tx.query_opt(
                "SELECT r.channel, r.consumed_at, r.approved_by, p.planned_by FROM receipts r \
                     LEFT JOIN plans p ON p.plan_id = r.plan_id WHERE r.run_id = ?1",
                params![run_id],
            )
        })?;
        row.map(|r| {
            Ok(cairn_core::plan::Approval {
                channel: r.get::<Option<String>>(0)?.unwrap_or_else(|| "unrecorded".into()),
                at: r.get(1)?,
                by: r.get(2)?,
                planned_by: r.get(3)?,
            })
        })
        .transpose()
    }

    fn target_of_run(&self, run_id: &RunId) -> Result<Option<String>, StoreError> {
        first(self.read(|tx| tx.query_opt("SELECT target FROM reservations WHERE run_id = ?1", params![run_id]))?)
    }

    fn reservation(&self, target: &str, run_dir: &str) -> Result<Option<RunId>, StoreError> {
        first(self.read(|tx| {
            tx.query_opt("SELECT run_id FROM reservations WHERE target = ?1 AND run_dir = ?2", params![target, run_dir])
        })?)
    }
}

impl<B: Backend> Targets for Registry<B> {
    fn add_target(&self, spec: &cairn_core::target::TargetSpec, at: i64) -> Result<(), StoreError> {
        self.write(|tx| {
            let n = tx.execute(
                "INSERT INTO targets (name, spec_json, created_at) VALUES (?1, ?2, ?3) ON CONFLICT (name) DO NOTHING",
                params![spec.name, to_json(spec), at],
            )?;
            if n == 0 {
                return Err(StoreError::TargetExists(spec.name.clone()));
            }
            Ok(())
        })
    }

    fn targets(&self) -> Result<Vec<cairn_core::target::TargetSpec>, StoreError> {
        let found = self.read(|tx| tx.query("SELECT spec_json FROM targets ORDER BY name", &[]))?;
        rows(found, |r| parse_json(&r.get::<String>(0)?, "target"))
    }

    fn target(&self, name: &str) -> Result<Option<cairn_core::target::TargetSpec>, StoreError> {
        let text: Option<String> =
            first(self.read(|tx| tx.query_opt("SELECT spec_json FROM targets WHERE name = ?1", params![name]))?)?;
        text.map(|t| parse_json(&t, "target")).transpose()
    }

    fn record_probe(&self, target: &str, observed: &Value, at: i64) -> Result<(), StoreError> {
        self.write(|tx| {
            tx.execute(
                "INSERT INTO probes (target, observed_json, probed_at) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (target) DO UPDATE SET observed_json = ?2, probed_at = ?3",
                params![target, to_json(observed), at],
            )?;
            Ok(())
        })
    }

    fn last_probe(&self, target: &str) -> Result<Option<(Value, i64)>, StoreError> {
        let row = self.read(|tx| {
            tx.query_opt("SELECT observed_json, probed_at FROM probes WHERE target = ?1", params![target])
        })?;
        row.map(|r| Ok((parse_json(&r.get::<String>(0)?, "probe")?, r.get(1)?))).transpose()
    }

    fn remove_target(&self, name: &str) -> Result<bool, StoreError> {
        self.write(|tx| Ok(tx.execute("DELETE FROM targets WHERE name = ?1", params![name])? > 0))
    }
}

impl<B: Backend> Docs for Registry<B> {
    fn save_doc(&self, n: &NewDocVersion) -> Result<SaveDoc, StoreError> {
        self.write(|tx| {
            let existing = tx.query_opt("SELECT id, latest_version, removed_at FROM docs WHERE name = ?1", params![n.name])?;
            let existing: Option<(i64, u32, Option<i64>)> =
                existing.map(|r| Ok::<_, StoreError>((r.get(0)?, r.get(1)?, r.get(2)?))).transpose()?;
            if let Some((_, latest, None)) = existing {
                let newest = load_doc_version(tx, &n.name, latest)?;
                if let Some(v) = newest
                    && v.sha256 == n.sha256
                    && v.verification_id == n.verification_id
                {
                    return Ok(SaveDoc::Unchanged(v));
                }
            }
            let version = existing.map(|(_, latest, _)| latest + 1).unwrap_or(1);
            let id: i64 = match existing {
                Some((id, _, _)) => {
                    tx.execute(
                        "UPDATE docs SET latest_version = ?2, updated_at = ?3, removed_at = NULL WHERE id = ?1",
                        params![id, version, n.at],
                    )?;
                    id
                }
                None => tx
                    .query_one(
                        "INSERT INTO docs (name, latest_version, created_at, updated_at) VALUES (?1, ?2, ?3, ?3) \
                         RETURNING id",
                        params![n.name, version, n.at],
                    )?
                    .get(0)?,
            };
            tx.execute(
                "INSERT INTO doc_versions (name, version, text, sha256, bytes, title, verification_id, notebook, saved_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    n.name,
                    version,
                    n.text,
                    n.sha256,
                    n.text.len() as i64,
                    n.title,
                    n.verification_id,
                    n.notebook,
                    n.at
                ],
            )?;
            tx.execute("DELETE FROM doc_search WHERE rowid = ?1", params![id])?;
            tx.execute(
                "INSERT INTO doc_search (rowid, name, title, text, version) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![id, n.name, n.title, n.text, version],
            )?;
            let saved = load_doc_version(tx, &n.name, version)?
                .ok_or_else(|| StoreError::Database(format!("doc `{}` version {version} vanished", n.name)))?;
            Ok(SaveDoc::Saved(saved))
        })
    }

    fn doc(&self, name: &str) -> Result<Option<DocRecord>, StoreError> {
        Ok(self.read(|tx| select_docs(tx, "WHERE d.name = ?1", params![name]))?.pop())
    }

    fn docs(&self, include_removed: bool) -> Result<Vec<DocRecord>, StoreError> {
        let clause = if include_removed { "ORDER BY d.name" } else { "WHERE d.removed_at IS NULL ORDER BY d.name" };
        self.read(|tx| select_docs(tx, clause, &[]))
    }

    fn doc_versions(&self, name: &str) -> Result<Vec<DocVersion>, StoreError> {
        let sql = format!("SELECT {DOC_VERSION_COLUMNS} FROM doc_versions WHERE name = ?1 ORDER BY version");
        rows(self.read(|tx| tx.query(&sql, params![name]))?, doc_version_from_row)
    }

    fn doc_text(&self, name: &str, version: u32) -> Result<Option<(DocVersion, String)>, StoreError> {
        let sql = format!("SELECT {DOC_VERSION_COLUMNS}, text FROM doc_versions WHERE name = ?1 AND version = ?2");
        let row = self.read(|tx| tx.query_opt(&sql, params![name, version]))?;
        row.map(|r| Ok((doc_version_from_row(&r)?, r.get(8)?))).transpose()
    }

    fn remove_doc(&self, name: &str, at: i64) -> Result<Option<DocRecord>, StoreError> {
        self.write(|tx| {
            let Some(row) = tx.query_opt("SELECT id, removed_at FROM docs WHERE name = ?1", params![name])? else {
                return Ok(None);
            };
            let (id, removed): (i64, Option<i64>) = (row.get(0)?, row.get(1)?);
            if removed.is_none() {
                tx.execute("UPDATE docs SET removed_at = ?2, updated_at = ?2 WHERE id = ?1", params![id, at])?;
                tx.execute("DELETE FROM doc_search WHERE rowid = ?1", params![id])?;
            }
            Ok(select_docs(tx, "WHERE d.name = ?1", params![name])?.pop())
        })
    }

    fn search_docs(&self, query: &str, limit: usize) -> Result<Vec<DocHit>, StoreError> {
        let limit = limit.min(i64::MAX as usize) as i64;
        let found = self.read(|tx| tx.search_docs(query, limit))?;
        rows(found, |r| {
            Ok(DocHit { name: r.get(0)?, version: r.get(1)?, title: r.get(2)?, snippet: r.get(3)?, score: r.get(4)? })
        })
    }
}

const DOC_VERSION_COLUMNS: &str = "name, version, title, bytes, sha256, verification_id, notebook, saved_at";

fn doc_version_from_row(r: &Row) -> Result<DocVersion, StoreError> {
    Ok(DocVersion {
        name: r.get(0)?,
        version: r.get(1)?,
        title: r.get(2)?,
        bytes: u64::try_from(r.get::<i64>(3)?).unwrap_or(0),
        sha256: r.get(4)?,
        verification_id: r.get(5)?,
        notebook: r.get(6)?,
        saved_at: r.get(7)?,
    })
}

fn load_doc_version(tx: &mut dyn Tx, name: &str, version: u32) -> Result<Option<DocVersion>, StoreError> {
    let sql = format!("SELECT {DOC_VERSION_COLUMNS} FROM doc_versions WHERE name = ?1 AND version = ?2");
    tx.query_opt(&sql, params![name, version])?.map(|r| doc_version_from_row(&r)).transpose()
}

/// Docs selected by `clause` (over `docs d`, with its parameters), each with its newest version.
fn select_docs(tx: &mut dyn Tx, clause: &str, params: &[crate::sql::Param<'_>]) -> Result<Vec<DocRecord>, StoreError> {
    let sql = format!(
        "SELECT d.name, d.latest_version, d.created_at, d.updated_at, d.removed_at, v.title, v.bytes, v.sha256, \
         v.verification_id, v.notebook, v.saved_at FROM docs d \
         JOIN doc_versions v ON v.name = d.name AND v.version = d.latest_version {clause}"
    );
    rows(tx.query(&sql, params)?, |r| {
        let name: String = r.get(0)?;
        let latest_version: u32 = r.get(1)?;
        Ok(DocRecord {
            latest: DocVersion {
                name: name.clone(),
                version: latest_version,
                title: r.get(5)?,
                bytes: u64::try_from(r.get::<i64>(6)?).unwrap_or(0),
                sha256: r.get(7)?,
                verification_id: r.get(8)?,
                notebook: r.get(9)?,
                saved_at: r.get(10)?,
            },
            name,
            latest_version,
            created_at: r.get(2)?,
            updated_at: r.get(3)?,
            removed_at: r.get(4)?,
        })
    })
}

/// Orders versions semantically; an unparsable one (never stored by the engine) sorts first.
fn semver_key(v: &str) -> Option<semver::Version> {
    semver::Version::parse(v).ok()
}
