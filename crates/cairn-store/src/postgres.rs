//! The registry in PostgreSQL, for a team: several daemons on several hosts share one database.
//! The statements are the SQLite store's (`registry.rs`), carried here with their `?N` rewritten
//! as `$N`; the schema is `migrations/postgres/`, numbered as SQLite's and meaning the same, with
//! PostgreSQL's types, an identity column named `rowid` where SQLite's breaks ties, and a
//! `tsvector` table for the doc search.
//!
//! Where SQLite has one writer at a time, PostgreSQL's writers are concurrent: every write runs
//! `SERIALIZABLE` and is run again, whole, when PostgreSQL reports a conflict (a serialization
//! failure, a deadlock, or a unique key taken by a writer that committed first), so each write is
//! what it is on SQLite, as if alone. A write that adds events to a run first locks the run's row
//! (`lock_run`), so a run's events are numbered in the order their transactions commit and a
//! follower reading `seq > n` never misses one. Relaxed writes turn `synchronous_commit` off for
//! their own transaction only. A run's lease (which daemon drives it) is fenced in `registry.rs`,
//! the same on both databases.

use std::collections::HashMap;
use std::error::Error;
use std::str::FromStr;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use bytes::BytesMut;
use cairn_core::store::StoreError;
use postgres::error::SqlState;
use postgres::types::{IsNull, ToSql, Type, to_sql_checked};
use postgres::{Client, Config, GenericClient, IsolationLevel, NoTls, Statement};

use crate::sql::{Backend, Cell, Durability, Param, Reader, Row, Tx, numbered_placeholders};

/// Numbered migrations, applied in order; the `cairn_schema` table records the last one applied.
/// Each has the number of the SQLite migration it mirrors.
const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/postgres/0001_init.sql"),
    include_str!("../migrations/postgres/0002_verifications.sql"),
    include_str!("../migrations/postgres/0003_daemon.sql"),
    include_str!("../migrations/postgres/0004_plans.sql"),
    include_str!("../migrations/postgres/0005_targets.sql"),
    include_str!("../migrations/postgres/0006_remote.sql"),
    include_str!("../migrations/postgres/0007_probes.sql"),
    include_str!("../migrations/postgres/0008_run_lookups.sql"),
    include_str!("../migrations/postgres/0009_artifacts.sql"),
    include_str!("../migrations/postgres/0010_docs.sql"),
    include_str!("../migrations/postgres/0011_verification_parameters.sql"),
    include_str!("../migrations/postgres/0012_approval_channel.sql"),
    include_str!("../migrations/postgres/0013_run_parallelism.sql"),
    include_str!("../migrations/postgres/0014_leases.sql"),
    include_str!("../migrations/postgres/0015_plan_documents.sql"),
    include_str!("../migrations/postgres/0016_artifact_links.sql"),
    include_str!("../migrations/postgres/0017_step_causes.sql"),
    include_str!("../migrations/postgres/0018_principals.sql"),
    include_str!("../migrations/postgres/0019_quotas.sql"),
    include_str!("../migrations/postgres/0020_target_quotas.sql"),
    include_str!("../migrations/postgres/0021_step_order.sql"),
    include_str!("../migrations/postgres/0022_runs_by_status.sql"),
];

/// Taken (for its transaction) by whoever migrates, so daemons starting together migrate once.
const MIGRATION_LOCK: i64 = 0x6361_6972_6e5f_6d69;

/// How many times a write is run again after conflicts before its error is returned.
const MAX_CONFLICT_RETRIES: u32 = 50;

/// The registry's URL without its password, for messages.
pub fn redacted(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
            let authority = match authority.rsplit_once('@') {
                Some((user, host)) => match user.split_once(':') {
                    Some((user, _password)) => format!("{user}:***@{host}"),
                    None => format!("{user}@{host}"),
                },
                None => authority.to_string(),
            };
            let path = path.split_once('?').map_or(path, |(p, _)| p);
            format!("{scheme}://{authority}/{path}")
        }
        None => "(a PostgreSQL URL)".to_string(),
    }
}

/// Whether `url` names a PostgreSQL registry.
pub fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// One connection and the statements prepared on it.
struct Conn {
    client: Client,
    statements: HashMap<String, Statement>,
}

pub struct Postgres {
    config: Config,
    /// The URL without its password, for messages.
    shown: String,
    main: Mutex<Option<Conn>>,
    follower: Mutex<Option<Conn>>,
}

impl Postgres {
    /// Connects to the registry at `url` and brings its schema up to date.
    pub fn open(url: &str) -> Result<Postgres, StoreError> {
        let shown = redacted(url);
        let mut config = Config::from_str(url).map_err(|e| {
            StoreError::Database(format!(
                "{shown} is not a PostgreSQL URL PostgreSQL's client reads ({e}); write it like postgres://USER@HOST:PORT/DATABASE"
            ))
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        config.application_name("cairn");
        let pg = Postgres { config, shown, main: Mutex::new(None), follower: Mutex::new(None) };
        let mut main = pg.connect()?;
        migrate(&mut main.client, &pg.shown)?;
        *pg.main.lock().unwrap_or_else(|p| p.into_inner()) = Some(main);
        Ok(pg)
    }

    fn connect(&self) -> Result<Conn, StoreError> {
        let client = self.config.connect(NoTls).map_err(|e| {
            StoreError::Database(format!("cannot reach the PostgreSQL registry {}: {}", self.shown, message(&e)))
        })?;
        Ok(Conn { client, statements: HashMap::new() })
    }

    /// The connection in `slot`, connected again if the server closed it (a restart, a network
    /// break): the next write or read works once the server is back.
    fn conn<'a>(&self, slot: &'a Mutex<Option<Conn>>) -> Result<MutexGuard<'a, Option<Conn>>, StoreError> {
        let mut guard = slot.lock().unwrap_or_else(|p| p.into_inner());
        if guard.as_ref().is_none_or(|c| c.client.is_closed()) {
            *guard = Some(self.connect()?);
        }
        Ok(guard)
    }
}

/// A PostgreSQL error as a sentence: the server's own message (and detail) when it sent one.
fn message(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("{} ({detail})", db.message()),
            None => db.message().to_string(),
        },
        None => match e.source() {
            Some(source) => format!("{e}: {source}"),
            None => e.to_string(),
        },
    }
}

/// Whether running the transaction again can succeed where this run of it failed.
fn conflict(e: &postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED || *c == SqlState::UNIQUE_VIOLATION
    )
}

fn migrate(client: &mut Client, shown: &str) -> Result<(), StoreError> {
    let fail = |e: postgres::Error| StoreError::Database(format!("the PostgreSQL registry {shown}: {}", message(&e)));
    let mut tx = client.transaction().map_err(fail)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).map_err(fail)?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS cairn_schema (version BIGINT NOT NULL)").map_err(fail)?;
    let current: i64 = match tx.query_opt("SELECT version FROM cairn_schema", &[]).map_err(fail)? {
        Some(row) => row.get(0),
        None => {
            tx.execute("INSERT INTO cairn_schema (version) VALUES (0)", &[]).map_err(fail)?;
            0
        }
    };
    if current as usize > MIGRATIONS.len() {
        return Err(StoreError::Corrupt(format!(
            "the PostgreSQL registry {shown} has schema version {current}, newer than this cairn knows ({}); upgrade cairn",
            MIGRATIONS.len()
        )));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        tx.batch_execute(sql).map_err(|e| StoreError::Database(format!("migration {}: {}", i + 1, message(&e))))?;
        tx.execute("UPDATE cairn_schema SET version = $1", &[&((i + 1) as i64)]).map_err(fail)?;
    }
    tx.commit().map_err(fail)
}

impl Backend for Postgres {
    fn write<T>(
        &self,
        durability: Durability,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut guard = self.conn(&self.main)?;
        let Some(conn) = guard.as_mut() else { return Err(StoreError::Database("no connection".into())) };
        let mut tries = 0;
        loop {
            tries += 1;
            let mut failed = None;
            let out = (|| {
                let mut tx = conn
                    .client
                    .build_transaction()
                    .isolation_level(IsolationLevel::Serializable)
                    .start()
                    .map_err(|e| pg_error(&self.shown, e, &mut failed))?;
                if durability == Durability::Relaxed {
                    tx.batch_execute("SET LOCAL synchronous_commit TO OFF")
                        .map_err(|e| pg_error(&self.shown, e, &mut failed))?;
                }
                let out = {
                    let mut t = PgTx {
                        client: &mut tx,
                        statements: &mut conn.statements,
                        shown: &self.shown,
                        conflict: &mut failed,
                    };
                    f(&mut t)?
                };
                tx.commit().map_err(|e| pg_error(&self.shown, e, &mut failed))?;
                Ok(out)
            })();
            match (out, failed) {
                (Ok(v), _) => return Ok(v),
                (Err(_), Some(Failure::Conflict)) if tries <= MAX_CONFLICT_RETRIES => {
                    // Back off a little, longer each time, so the writers it met can finish.
                    std::thread::sleep(Duration::from_millis(u64::from(tries.min(10))));
                }
                (Err(e), Some(Failure::Closed)) => {
                    // The next call connects again.
                    *guard = None;
                    return Err(e);
                }
                (Err(e), _) => return Err(e),
            }
        }
    }

    fn read<T>(
        &self,
        reader: Reader,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let slot = match reader {
            Reader::Main => &self.main,
            Reader::Follower => &self.follower,
        };
        let mut guard = self.conn(slot)?;
        let Some(conn) = guard.as_mut() else { return Err(StoreError::Database("no connection".into())) };
        let mut failed = None;
        let out = f(&mut PgTx {
            client: &mut conn.client,
            statements: &mut conn.statements,
            shown: &self.shown,
            conflict: &mut failed,
        });
        if matches!(failed, Some(Failure::Closed)) {
            *guard = None;
        }
        out
    }

    fn integrity(&self) -> Result<cairn_core::doctor::Integrity, StoreError> {
        let version: i64 = self.read(Reader::Follower, &mut |tx| {
            tx.query_one("SELECT version FROM cairn_schema", &[]).and_then(|r| r.get(0))
        })?;
        Ok(cairn_core::doctor::Integrity::NotApplicable {
            why: "PostgreSQL checks its own pages (data checksums, the amcheck extension); Cairn has no integrity \
                  check to run there"
                .into(),
            reached: format!("the server {} answers, its Cairn schema at version {version}", self.shown),
        })
    }

    fn events_issued(&self) -> Result<Option<i64>, StoreError> {
        // An identity column skips the numbers of rolled-back (and retried) transactions.
        Ok(None)
    }

    fn backup_to(&self, _dest: &std::path::Path) -> Result<u64, StoreError> {
        Err(StoreError::Database(format!(
            "the PostgreSQL registry {} is backed up with pg_dump, not by Cairn",
            self.shown
        )))
    }
}

/// What made a statement fail, where it matters to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// Another writer's transaction: running this one again can succeed.
    Conflict,
    /// The connection is gone: the next call must connect again.
    Closed,
}

fn pg_error(shown: &str, e: postgres::Error, failed: &mut Option<Failure>) -> StoreError {
    if conflict(&e) {
        *failed = Some(Failure::Conflict);
    } else if e.is_closed() || e.as_db_error().is_none() && e.code().is_none() {
        failed.get_or_insert(Failure::Closed);
    }
    StoreError::Database(format!("the PostgreSQL registry {shown}: {}", message(&e)))
}

struct PgTx<'a, C: GenericClient> {
    client: &'a mut C,
    statements: &'a mut HashMap<String, Statement>,
    shown: &'a str,
    conflict: &'a mut Option<Failure>,
}

impl<C: GenericClient> PgTx<'_, C> {
    fn statement(&mut self, sql: &str) -> Result<Statement, StoreError> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(&numbered_placeholders(sql)).map_err(|e| pg_error(self.shown, e, self.conflict))?;
        self.statements.insert(sql.to_string(), s.clone());
        Ok(s)
    }

    fn rows(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Vec<postgres::Row>, StoreError> {
        let stmt = self.statement(sql)?;
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
        self.client.query(&stmt, &refs).map_err(|e| pg_error(self.shown, e, self.conflict))
    }
}

/// A PostgreSQL row as cells, each column by its type.
fn cells(row: &postgres::Row) -> Result<Row, StoreError> {
    let mut out = Vec::with_capacity(row.len());
    for (i, column) in row.columns().iter().enumerate() {
        let bad = |e: postgres::Error| StoreError::Corrupt(format!("column `{}`: {e}", column.name()));
        let ty = column.type_();
        let cell = if *ty == Type::INT8 {
            row.try_get::<_, Option<i64>>(i).map_err(bad)?.map(Cell::Int)
        } else if *ty == Type::INT4 {
            row.try_get::<_, Option<i32>>(i).map_err(bad)?.map(|n| Cell::Int(n.into()))
        } else if *ty == Type::INT2 {
            row.try_get::<_, Option<i16>>(i).map_err(bad)?.map(|n| Cell::Int(n.into()))
        } else if *ty == Type::FLOAT8 {
            row.try_get::<_, Option<f64>>(i).map_err(bad)?.map(Cell::Real)
        } else if *ty == Type::FLOAT4 {
            row.try_get::<_, Option<f32>>(i).map_err(bad)?.map(|f| Cell::Real(f.into()))
        } else if *ty == Type::BOOL {
            row.try_get::<_, Option<bool>>(i).map_err(bad)?.map(|b| Cell::Int(b.into()))
        } else if [Type::TEXT, Type::VARCHAR, Type::BPCHAR, Type::NAME].contains(ty) {
            row.try_get::<_, Option<String>>(i).map_err(bad)?.map(Cell::Text)
        } else {
            return Err(StoreError::Corrupt(format!(
                "column `{}` has type {ty}, which cairn does not read",
                column.name()
            )));
        };
        out.push(cell.unwrap_or(Cell::Null));
    }
    Ok(Row(out))
}

impl ToSql for Param<'_> {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        // The statement's parameter types are PostgreSQL's inference from the columns they meet.
        match *self {
            Param::Null => Ok(IsNull::Yes),
            Param::Int(n) if *ty == Type::INT8 => n.to_sql(ty, out),
            Param::Int(n) if *ty == Type::INT4 => i32::try_from(n)?.to_sql(ty, out),
            Param::Int(n) if *ty == Type::INT2 => i16::try_from(n)?.to_sql(ty, out),
            Param::Int(n) if *ty == Type::FLOAT8 => (n as f64).to_sql(ty, out),
            Param::Int(n) if *ty == Type::BOOL => (n != 0).to_sql(ty, out),
            Param::Real(f) if *ty == Type::FLOAT8 => f.to_sql(ty, out),
            Param::Real(f) if *ty == Type::FLOAT4 => (f as f32).to_sql(ty, out),
            Param::Text(s) => s.to_sql(ty, out),
            other => Err(format!("cannot bind {other:?} to a parameter of type {ty}").into()),
        }
    }

    fn accepts(_: &Type) -> bool {
        // Checked per value in `to_sql`.
        true
    }

    to_sql_checked!();
}

impl<C: GenericClient> Tx for PgTx<'_, C> {
    fn execute(&mut self, sql: &str, params: &[Param<'_>]) -> Result<usize, StoreError> {
        let stmt = self.statement(sql)?;
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
        let n = self.client.execute(&stmt, &refs).map_err(|e| pg_error(self.shown, e, self.conflict))?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    fn query(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>, StoreError> {
        self.rows(sql, params)?.iter().map(cells).collect()
    }

    fn lock_run(&mut self, run_id: &str, _lease: bool) -> Result<Option<(Option<String>, i64)>, StoreError> {
        let rows = self.query(
            "SELECT lease_owner, lease_epoch FROM workflow_executions WHERE run_id = ?1 FOR UPDATE",
            &[Param::Text(run_id)],
        )?;
        rows.first().map(|r| Ok::<_, StoreError>((r.get(0)?, r.get(1)?))).transpose()
    }

    fn claim_run(&mut self, run_id: &str) -> Result<Option<(Option<String>, i64)>, StoreError> {
        let rows = self.query(
            "SELECT lease_owner, lease_epoch FROM workflow_executions WHERE run_id = ?1 FOR UPDATE SKIP LOCKED",
            &[Param::Text(run_id)],
        )?;
        let row = match rows.first() {
            Some(r) => Some((r.get(0)?, r.get(1)?)),
            // Skipped, or not there at all.
            None => match self.query("SELECT 1 FROM workflow_executions WHERE run_id = ?1", &[Param::Text(run_id)])? {
                found if found.is_empty() => None,
                _ => return Err(StoreError::RunBusy { run_id: run_id.to_string() }),
            },
        };
        Ok(row)
    }

    fn search_docs(&mut self, query: &str, limit: i64) -> Result<Vec<Row>, StoreError> {
        let tsquery = cairn_core::docs::fts5_to_tsquery(query).map_err(StoreError::InvalidDocQuery)?;
        // Weights {D, C, B, A}: text 1, title 5, name 10, as the SQLite index's BM25 weights.
        let sql = "SELECT s.name, s.version, s.title, \
                   ts_headline('simple', s.text, q, 'StartSel=' || chr(1) || ', StopSel=' || chr(2) || \
                   ', MaxWords=24, MinWords=8, ShortWord=0, MaxFragments=1, FragmentDelimiter=…'), \
                   ts_rank('{0.1, 0, 0.5, 1.0}', s.tsv, q)::float8 AS score \
                   FROM doc_search s, to_tsquery('simple', cairn_fold(?1)) AS q \
                   WHERE s.tsv @@ q ORDER BY score DESC, s.rowid LIMIT ?2";
        self.query(sql, &[Param::Text(&tsquery), Param::Int(limit)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_shown_without_its_password_or_options() {
        assert_eq!(redacted("postgres://u:secret@db.lab:5432/cairn"), "postgres://u:***@db.lab:5432/cairn");
        assert_eq!(redacted("postgres://u@db/cairn?options=-c%20x%3Dy"), "postgres://u@db/cairn");
        assert_eq!(redacted("postgresql://db"), "postgresql://db/");
        assert_eq!(redacted("u:p@db"), "(a PostgreSQL URL)");
    }
}
