//! The registry in one SQLite file: WAL, `synchronous=FULL`, foreign keys on, the numbered
//! migrations of `migrations/sqlite/` applied through `PRAGMA user_version`. One connection writes
//! (every write an IMMEDIATE transaction, so writers never interleave), a second, read-only one
//! serves the reads event followers repeat after every commit, and any read while the writer is
//! busy: in WAL mode it reads the last commit without waiting for the writer's lock.
//!
//! **Group commit.** Writes that arrive while another is being written share its transaction and
//! its one fsync ([`Writer`]): each is a savepoint of the group's transaction (one that fails is
//! rolled back alone), and none is acknowledged before the group's COMMIT has returned. The writer
//! that finds no other waiting commits the group; a crash before that COMMIT loses the whole
//! group, none of which was acknowledged. While the daemon's steps queue for its slots
//! ([`crate::Backlog`]), a group stays open for more writes to join it, until they no longer do
//! or at most [`COMMIT_WAIT`].

use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use cairn_core::doctor::Integrity;
use cairn_core::store::StoreError;
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior};

use crate::sql::{Backend, Cell, Durability, Param, Reader, Row, Tx};

/// Numbered migrations, applied in order; `user_version` records the last one applied.
const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/sqlite/0001_init.sql"),
    include_str!("../migrations/sqlite/0002_verifications.sql"),
    include_str!("../migrations/sqlite/0003_daemon.sql"),
    include_str!("../migrations/sqlite/0004_plans.sql"),
    include_str!("../migrations/sqlite/0005_targets.sql"),
    include_str!("../migrations/sqlite/0006_remote.sql"),
    include_str!("../migrations/sqlite/0007_probes.sql"),
    include_str!("../migrations/sqlite/0008_run_lookups.sql"),
    include_str!("../migrations/sqlite/0009_artifacts.sql"),
    include_str!("../migrations/sqlite/0010_docs.sql"),
    include_str!("../migrations/sqlite/0011_verification_parameters.sql"),
    include_str!("../migrations/sqlite/0012_approval_channel.sql"),
    include_str!("../migrations/sqlite/0013_run_parallelism.sql"),
    include_str!("../migrations/sqlite/0014_leases.sql"),
    include_str!("../migrations/sqlite/0015_plan_documents.sql"),
    include_str!("../migrations/sqlite/0016_artifact_links.sql"),
    include_str!("../migrations/sqlite/0017_step_causes.sql"),
    include_str!("../migrations/sqlite/0018_principals.sql"),
    include_str!("../migrations/sqlite/0019_quotas.sql"),
    include_str!("../migrations/sqlite/0020_target_quotas.sql"),
    include_str!("../migrations/sqlite/0021_step_order.sql"),
    include_str!("../migrations/sqlite/0022_runs_by_status.sql"),
];

/// The schema version a current database has (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Enough for every distinct statement the store runs, so none is compiled twice.
const STATEMENT_CACHE: usize = 128;

pub struct Sqlite {
    conn: Mutex<Writer>,
    /// Writes waiting for the writing connection: while one waits, a write leaves its group's
    /// transaction open for it.
    queued: AtomicUsize,
    /// How the groups left open ended, for the writes waiting on them.
    ended: Arc<Ends>,
    reader: Mutex<Connection>,
    /// The database file, whose disk a failed write looks at.
    path: std::path::PathBuf,
    /// For the crash tests only (`CAIRN_TEST_CRASH_AT=group-commit:N`): how many groups of more
    /// than one write are left to commit before the process kills itself (SIGKILL) instead of
    /// committing one; 0: never.
    crash_before_group_commit: AtomicU64,
    /// Set while the daemon's steps queue for a slot: a group then waits for company.
    backlog: OnceLock<crate::Backlog>,
    /// [`COMMIT_WAIT`], in microseconds; the tests of the backlog's end make it long.
    commit_wait_us: AtomicU64,
}

/// The writing connection, and the group of writes its open transaction holds, if any.
struct Writer {
    conn: Connection,
    /// The open group's number; `None` when no transaction is open.
    open: Option<u64>,
    /// How many writes the open group holds.
    parts: usize,
    /// The number of the next group.
    next: u64,
    /// When the open group began.
    opened: Instant,
    /// One of the open group's writes waits for company, to commit it when the wait is over:
    /// the others wait for its end alone, so the backlog's end wakes one thread, not each.
    held: bool,
}

/// The end of the groups of writes, and what their writes wait on.
#[derive(Default)]
struct Ends {
    state: Mutex<Ended>,
    /// Notified when a group ends.
    cv: Condvar,
    /// What the write holding the open group for company waits on: notified when a group ends,
    /// and when the daemon's backlog does.
    hold: Condvar,
}

impl Ends {
    /// A group ended: its writes, and its holder, are told.
    fn notify(&self) {
        self.cv.notify_all();
        self.hold.notify_all();
    }

    fn lock(&self) -> MutexGuard<'_, Ended> {
        // A panic while holding it leaves the numbers as they were: still true.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The end of the groups of writes: the last committed, and the last that failed with why.
#[derive(Default)]
struct Ended {
    committed: u64,
    failed: Option<(u64, StoreError)>,
}

/// The most writes one group holds: a burst longer than this is committed in several.
const GROUP_MAX: usize = 256;

/// The longest a group stays open for more writes while the daemon's steps queue for its slots
/// (it commits as soon as they no longer do): its writers wait this much more, but their runs'
/// next steps would have waited for a slot anyway, and one fsync and one WAL write of the shared
/// pages serve them all.
pub const COMMIT_WAIT: Duration = Duration::from_millis(10);

/// Below this many bytes free, a failed write says its disk is full: SQLite often reports a full
/// disk as `disk I/O error` (a failed append to its write-ahead log), which names nothing.
const NEARLY_FULL: u64 = 1 << 20;

/// `e`, naming the full disk under `path` when that is what is likely behind it.
fn on_disk(path: &Path, e: StoreError) -> StoreError {
    let StoreError::Database(message) = e else { return e };
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    match nix::sys::statvfs::statvfs(dir) {
        Ok(fs) => {
            let free = fs.blocks_available().saturating_mul(fs.fragment_size());
            if free < NEARLY_FULL {
                return StoreError::Database(format!(
                    "{message}: the disk holding {} is full ({free} bytes free); free space there",
                    dir.display()
                ));
            }
            StoreError::Database(message)
        }
        Err(_) => StoreError::Database(message),
    }
}

fn db(e: rusqlite::Error) -> StoreError {
    StoreError::Database(e.to_string())
}

impl Sqlite {
    /// Opens (creating if needed) the database at `path` and brings its schema up to date.
    pub fn open(path: &Path) -> Result<Sqlite, StoreError> {
        Sqlite::open_at(path).map_err(|e| on_disk(path, e))
    }

    fn open_at(path: &Path) -> Result<Sqlite, StoreError> {
        let mut conn =
            Connection::open(path).map_err(|e| StoreError::Database(format!("cannot open {}: {e}", path.display())))?;
        conn.busy_timeout(Duration::from_secs(10)).map_err(db)?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        stable_plans(&conn)?;
        // temp_store: a group's savepoints journal the pages they change, and past 64 KiB SQLite
        // moves that journal into a file of its own, a write a page; in memory it is a copy (a
        // group's pages, bounded by the group). It protects nothing across a crash: the WAL does.
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; PRAGMA temp_store = MEMORY;",
        )
        .map_err(db)?;
        migrate(&mut conn)?;
        let reader =
            Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                .map_err(|e| StoreError::Database(format!("cannot open {} to read: {e}", path.display())))?;
        reader.busy_timeout(Duration::from_secs(10)).map_err(db)?;
        reader.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        stable_plans(&reader)?;
        Ok(Sqlite {
            conn: Mutex::new(Writer { conn, open: None, parts: 0, next: 1, opened: Instant::now(), held: false }),
            queued: AtomicUsize::new(0),
            ended: Arc::default(),
            reader: Mutex::new(reader),
            path: path.to_path_buf(),
            crash_before_group_commit: AtomicU64::new(0),
            backlog: OnceLock::new(),
            commit_wait_us: AtomicU64::new(COMMIT_WAIT.as_micros() as u64),
        })
    }

    /// The writing connection with no group open (one left open is committed first), for a
    /// write of its own kind (a relaxed one).
    fn conn(&self) -> Result<MutexGuard<'_, Writer>, StoreError> {
        let mut w = self.lock_writer();
        self.commit_group(&mut w)?;
        Ok(w)
    }

    /// How many groups were committed so far: the groups are numbered from 1 in order, and
    /// each ends before the next begins.
    pub(crate) fn groups_committed(&self) -> u64 {
        self.ended.lock().committed
    }

    /// Lets a group wait for company while `backlog` is set.
    pub(crate) fn set_backlog(&self, backlog: crate::Backlog) {
        let ends = self.ended.clone();
        backlog.on_end(Box::new(move || {
            // Under the lock a waiter checks the backlog in: its wake-up cannot be missed.
            let _held = ends.lock();
            ends.hold.notify_all();
        }));
        let _ = self.backlog.set(backlog);
    }

    /// Whether the daemon's steps queue for its slots: a group then waits for company.
    fn backlogged(&self) -> bool {
        self.backlog.get().is_some_and(crate::Backlog::is_set)
    }

    /// The longest a group waits for company.
    fn commit_wait(&self) -> Duration {
        Duration::from_micros(self.commit_wait_us.load(Ordering::Relaxed))
    }

    /// For the tests of the backlog only: how long a group may wait for company.
    pub(crate) fn set_commit_wait(&self, wait: Duration) {
        self.commit_wait_us.store(wait.as_micros() as u64, Ordering::Relaxed);
    }

    /// For the crash tests only: the process kills itself (SIGKILL) before committing its `nth`
    /// group of more than one write.
    pub(crate) fn crash_before_group_commit(&self, nth: u64) {
        self.crash_before_group_commit.store(nth, Ordering::SeqCst);
    }

    fn lock_writer(&self) -> MutexGuard<'_, Writer> {
        // A panic while holding the lock leaves SQLite consistent (the transaction rolls back).
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Commits the open group, if any, and tells its waiting writes how it ended.
    fn commit_group(&self, w: &mut Writer) -> Result<(), StoreError> {
        let Some(group) = w.open.take() else { return Ok(()) };
        if w.parts > 1
            && self.crash_before_group_commit.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                == Ok(1)
        {
            // As a kill -9 at this very moment: the group's writes are in its transaction, none
            // acknowledged.
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        }
        w.parts = 0;
        w.held = false;
        let done = exec(&w.conn, "COMMIT").map_err(db).map_err(|e| on_disk(&self.path, e));
        if done.is_err() {
            // A failed COMMIT may leave the transaction open: nothing of the group stays.
            let _ = w.conn.execute_batch("ROLLBACK");
        }
        let mut ended = self.ended.lock();
        match &done {
            Ok(()) => ended.committed = group,
            Err(e) => ended.failed = Some((group, e.clone())),
        }
        drop(ended);
        self.ended.notify();
        done
    }

    /// Waits until `group` has ended: committed, or failed with why.
    fn wait_for(&self, group: u64) -> Result<(), StoreError> {
        // No deadline: only the group's end returns.
        self.wait_until(group, None).unwrap_or(Ok(()))
    }

    /// Waits until `group` has ended (how), or (`None`) `until` has passed or the backlog has
    /// ended: the wait of the write holding the group for company (with `until`), or of any.
    fn wait_until(&self, group: u64, until: Option<Instant>) -> Option<Result<(), StoreError>> {
        let mut ended = self.ended.lock();
        loop {
            if let Some((failed, e)) = &ended.failed
                && *failed == group
            {
                return Some(Err(e.clone()));
            }
            if ended.committed >= group {
                return Some(Ok(()));
            }
            ended = match until {
                None => self.ended.cv.wait(ended).unwrap_or_else(|p| p.into_inner()),
                Some(at) => {
                    let left = at.saturating_duration_since(Instant::now());
                    if left.is_zero() || !self.backlogged() {
                        return None;
                    }
                    self.ended.hold.wait_timeout(ended, left).unwrap_or_else(|p| p.into_inner()).0
                }
            };
        }
    }

    /// One write as a part of the open group (opening one if none is), in a savepoint of its
    /// own; then the group is committed unless another write waits to join it. Returns once the
    /// write is durable (or has failed, changing nothing).
    fn write_in_group<T>(&self, f: &mut dyn FnMut(&mut dyn Tx) -> Result<T, StoreError>) -> Result<T, StoreError> {
        self.queued.fetch_add(1, Ordering::SeqCst);
        let mut w = self.lock_writer();
        self.queued.fetch_sub(1, Ordering::SeqCst);
        let group = match w.open {
            Some(group) => group,
            None => {
                exec(&w.conn, "BEGIN IMMEDIATE").map_err(db).map_err(|e| on_disk(&self.path, e))?;
                let group = w.next;
                w.next += 1;
                w.open = Some(group);
                w.opened = Instant::now();
                group
            }
        };
        let out = match Self::part(&w.conn, f) {
            Ok(v) => Ok(v),
            Err(PartError::Own(e)) => Err(on_disk(&self.path, e)),
            Err(PartError::Group(e)) => {
                // The group's transaction itself failed: none of its writes stays.
                let e = on_disk(&self.path, e);
                w.parts = 0;
                w.open = None;
                w.held = false;
                let _ = w.conn.execute_batch("ROLLBACK");
                let mut ended = self.ended.lock();
                ended.failed = Some((group, e.clone()));
                drop(ended);
                self.ended.notify();
                return Err(e);
            }
        };
        w.parts += 1;
        let alone = self.queued.load(Ordering::SeqCst) == 0;
        if w.parts >= GROUP_MAX || (alone && !self.backlogged()) {
            self.commit_group(&mut w)?;
            drop(w);
        } else if !alone || w.held {
            // Another write waits for the connection: it joins this group, and the last of
            // them commits it; or one already holds the group for company, and commits it.
            drop(w);
            if out.is_ok() {
                self.wait_for(group)?;
            }
        } else {
            // Steps queue for the slots: the group stays open for more writes until they no
            // longer queue (or at most COMMIT_WAIT), and this write, its holder, then commits it
            // (unless another write has: the group filled, or one came once the backlog ended).
            w.held = true;
            let until = w.opened + self.commit_wait();
            drop(w);
            if self.wait_until(group, Some(until)).is_none() {
                let mut w = self.lock_writer();
                if w.open == Some(group) {
                    let committed = self.commit_group(&mut w);
                    drop(w);
                    committed?;
                }
            }
            if out.is_ok() {
                self.wait_for(group)?;
            }
        }
        out
    }

    /// Runs one write in a savepoint: its own failure rolls back its savepoint alone.
    fn part<T>(conn: &Connection, f: &mut dyn FnMut(&mut dyn Tx) -> Result<T, StoreError>) -> Result<T, PartError> {
        let group = |e: rusqlite::Error| PartError::Group(db(e));
        exec(conn, "SAVEPOINT part").map_err(group)?;
        match f(&mut SqliteTx { conn }) {
            Ok(v) => {
                exec(conn, "RELEASE part").map_err(group)?;
                Ok(v)
            }
            Err(e) => {
                conn.execute_batch("ROLLBACK TO part; RELEASE part").map_err(group)?;
                Err(PartError::Own(e))
            }
        }
    }
}

/// Plans that do not depend on the values bound to them (the query planner stability guarantee).
/// Without it, SQLite marks a cached statement whose plan looked at a bound value (an `ORDER BY`
/// sorted by a temporary B-tree does, as every run's steps and artifacts are read) as expired
/// whenever a new value is bound, and compiles it again at each use: 4 % of the daemon's CPU
/// under the load bench (BENCHMARKS §18). Cairn keeps no statistics (`ANALYZE`) that a
/// value-dependent plan could use.
fn stable_plans(conn: &Connection) -> Result<(), StoreError> {
    conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true).map(|_| ()).map_err(db)
}

/// One statement without parameters or rows, compiled once per connection (the statements that
/// open, part and end every transaction run several times a step).
fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

/// How one write of a group failed: by itself (its savepoint rolled back, the group goes on), or
/// with the group's transaction.
enum PartError {
    Own(StoreError),
    Group(StoreError),
}

fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db)?;
    let current: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(db)?;
    if current as usize > MIGRATIONS.len() {
        return Err(StoreError::Corrupt(format!(
            "the database schema is version {current}, newer than this cairn knows ({}); upgrade cairn",
            MIGRATIONS.len()
        )));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        tx.execute_batch(sql).map_err(|e| StoreError::Database(format!("migration {}: {e}", i + 1)))?;
        tx.pragma_update(None, "user_version", (i + 1) as i64).map_err(db)?;
    }
    tx.commit().map_err(db)
}

impl Backend for Sqlite {
    fn write<T>(
        &self,
        durability: Durability,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if durability == Durability::Full {
            return self.write_in_group(f);
        }
        // A relaxed write commits alone, after the group left open (if any).
        let mut w = self.conn()?;
        let conn = &mut w.conn;
        // `synchronous` is the connection's: relaxed for this one commit, under the same lock, so
        // no other commit is relaxed by it.
        conn.prepare_cached("PRAGMA synchronous = NORMAL").and_then(|mut s| s.execute([])).map_err(db)?;
        let out = (|| {
            exec(conn, "BEGIN IMMEDIATE").map_err(db)?;
            let out = f(&mut SqliteTx { conn }).and_then(|out| exec(conn, "COMMIT").map(|()| out).map_err(db));
            if out.is_err() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            out
        })();
        conn.prepare_cached("PRAGMA synchronous = FULL").and_then(|mut s| s.execute([])).map_err(db)?;
        out.map_err(|e| on_disk(&self.path, e))
    }

    fn read<T>(
        &self,
        reader: Reader,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        match reader {
            Reader::Main => {
                // The writing connection while it is free and holds no group; otherwise the
                // read-only one, which sees every acknowledged write as well (a write is
                // acknowledged once its group has committed), so a read neither waits for the
                // writer nor commits early the group it keeps open for company.
                if let Ok(w) = self.conn.try_lock()
                    && w.open.is_none()
                {
                    return f(&mut SqliteTx { conn: &w.conn }).map_err(|e| on_disk(&self.path, e));
                }
                let conn = self.reader.lock().unwrap_or_else(|p| p.into_inner());
                f(&mut SqliteTx { conn: &conn }).map_err(|e| on_disk(&self.path, e))
            }
            Reader::Follower => {
                let conn = self.reader.lock().unwrap_or_else(|p| p.into_inner());
                f(&mut SqliteTx { conn: &conn }).map_err(|e| on_disk(&self.path, e))
            }
        }
    }

    fn integrity(&self) -> Result<Integrity, StoreError> {
        let reader = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        let mut problems = pragma_lines(&reader, "PRAGMA integrity_check(100)", |r| r.get::<_, String>(0));
        if problems == ["ok"] {
            problems.clear();
        }
        let dangling = pragma_lines(&reader, "PRAGMA foreign_key_check", |r| {
            let (table, rowid, parent): (String, Option<i64>, String) = (r.get(0)?, r.get(1)?, r.get(2)?);
            Ok(match rowid {
                Some(rowid) => format!("row {rowid} of table {table} refers to a row of {parent} that does not exist"),
                None => format!("a row of table {table} refers to a row of {parent} that does not exist"),
            })
        });
        problems.extend(dangling);
        Ok(Integrity::Checked { checked: "PRAGMA integrity_check and PRAGMA foreign_key_check".into(), problems })
    }

    fn events_issued(&self) -> Result<Option<i64>, StoreError> {
        let reader = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        let issued: Option<i64> = reader
            .query_row("SELECT seq FROM sqlite_sequence WHERE name = 'events'", [], |r| r.get(0))
            .optional()
            .map_err(db)?;
        Ok(Some(issued.unwrap_or(0)))
    }

    fn backup_to(&self, dest: &Path) -> Result<u64, StoreError> {
        let cannot =
            |e: &dyn std::fmt::Display| StoreError::Database(format!("cannot back up into {}: {e}", dest.display()));
        // Created here, so an existing file is never written over (an empty file is an empty database).
        std::fs::OpenOptions::new().write(true).create_new(true).open(dest).map_err(|e| cannot(&e))?;
        let mut copy = Connection::open_with_flags(dest, OpenFlags::SQLITE_OPEN_READ_WRITE).map_err(|e| cannot(&e))?;
        {
            let reader = self.reader.lock().unwrap_or_else(|p| p.into_inner());
            let backup = rusqlite::backup::Backup::new(&reader, &mut copy).map_err(|e| cannot(&e))?;
            // Every page in one step: the copy is the state of one commit, read under one read
            // transaction, which in WAL mode never waits for the daemon's writes nor holds them.
            let mut tries = 0;
            loop {
                match backup.step(-1).map_err(|e| cannot(&e))? {
                    rusqlite::backup::StepResult::Done => break,
                    _ if tries < 100 => {
                        tries += 1;
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    _ => return Err(cannot(&"the registry stayed busy for five seconds; try again")),
                }
            }
        }
        let checked = pragma_lines(&copy, "PRAGMA quick_check", |r| r.get::<_, String>(0));
        if checked != ["ok"] {
            return Err(cannot(&format!(
                "the copy fails its check ({}): the registry itself may be damaged; `cairn doctor` checks it",
                checked.join("; ")
            )));
        }
        copy.close().map_err(|(_, e)| cannot(&e))?;
        let file = std::fs::File::open(dest).map_err(|e| cannot(&e))?;
        file.sync_all().map_err(|e| cannot(&e))?;
        Ok(file.metadata().map_err(|e| cannot(&e))?.len())
    }
}

/// The rows of a PRAGMA, each as a line; a PRAGMA that cannot finish (a database too damaged for
/// its own check) is one line saying why.
fn pragma_lines(
    conn: &Connection,
    sql: &str,
    line: impl Fn(&rusqlite::Row<'_>) -> rusqlite::Result<String>,
) -> Vec<String> {
    let run = || -> rusqlite::Result<Vec<String>> {
        let mut stmt = conn.prepare(sql)?;
        let lines = stmt.query_map([], |r| line(r))?.collect::<rusqlite::Result<Vec<String>>>()?;
        Ok(lines)
    };
    run().unwrap_or_else(|e| vec![format!("{sql} could not finish: {e}")])
}

struct SqliteTx<'c> {
    conn: &'c Connection,
}

impl rusqlite::ToSql for Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match *self {
            Param::Null => ValueRef::Null,
            Param::Int(i) => ValueRef::Integer(i),
            Param::Real(f) => ValueRef::Real(f),
            Param::Text(s) => ValueRef::Text(s.as_bytes()),
        }))
    }
}

fn cells(row: &rusqlite::Row<'_>, columns: usize) -> Result<Row, StoreError> {
    let mut out = Vec::with_capacity(columns);
    for i in 0..columns {
        out.push(match row.get_ref(i).map_err(db)? {
            ValueRef::Null => Cell::Null,
            ValueRef::Integer(n) => Cell::Int(n),
            ValueRef::Real(f) => Cell::Real(f),
            ValueRef::Text(t) => {
                Cell::Text(String::from_utf8(t.to_vec()).map_err(|e| StoreError::Corrupt(format!("column {i}: {e}")))?)
            }
            ValueRef::Blob(_) => return Err(StoreError::Corrupt(format!("column {i} holds bytes, not text"))),
        });
    }
    Ok(Row(out))
}

impl SqliteTx<'_> {
    /// The rows of a statement; a row this cairn cannot read is its own error, after the
    /// statement's.
    fn rows(&self, sql: &str, params: &[Param<'_>]) -> rusqlite::Result<Vec<Result<Row, StoreError>>> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        let columns = stmt.column_count();
        let mut rows = stmt.query(rusqlite::params_from_iter(params))?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            out.push(cells(row, columns));
        }
        Ok(out)
    }
}

impl Tx for SqliteTx<'_> {
    fn execute(&mut self, sql: &str, params: &[Param<'_>]) -> Result<usize, StoreError> {
        self.conn.prepare_cached(sql).and_then(|mut s| s.execute(rusqlite::params_from_iter(params))).map_err(db)
    }

    fn query(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>, StoreError> {
        self.rows(sql, params).map_err(db)?.into_iter().collect()
    }

    fn lock_run(&mut self, run_id: &str, lease: bool) -> Result<Option<(Option<String>, i64)>, StoreError> {
        if !lease {
            return Ok(None);
        }
        let row = self.query_opt(
            "SELECT lease_owner, lease_epoch FROM workflow_executions WHERE run_id = ?1",
            &[Param::Text(run_id)],
        )?;
        row.map(|r| Ok((r.get(0)?, r.get(1)?))).transpose()
    }

    fn claim_run(&mut self, run_id: &str) -> Result<Option<(Option<String>, i64)>, StoreError> {
        // One writer at a time: nothing else holds the row while this transaction runs.
        self.lock_run(run_id, true)
    }

    fn search_docs(&mut self, query: &str, limit: i64) -> Result<Vec<Row>, StoreError> {
        // `ORDER BY rank` lets FTS5 rank the matches itself (the weights are set in the
        // migration), so the snippet is made only for the rows returned.
        let sql = "SELECT name, CAST(version AS INTEGER), title, snippet(doc_search, -1, char(1), char(2), '…', 24), -rank \
                   FROM doc_search WHERE doc_search MATCH ?1 ORDER BY rank LIMIT ?2";
        let rows = self.rows(sql, &[Param::Text(query), Param::Int(limit)]).map_err(|e| match e {
            // The query's own fault (FTS5 syntax, an unknown column) is a plain SQL error; the
            // database failing is another code (busy, I/O, corrupt).
            rusqlite::Error::SqliteFailure(f, Some(message)) if f.code == rusqlite::ErrorCode::Unknown => {
                StoreError::InvalidDocQuery(message)
            }
            other => db(other),
        })?;
        rows.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run's steps are read (sorted) at each run's start: the statement is compiled once per
    /// connection, not again for each run it is bound to.
    #[test]
    fn a_cached_statement_is_not_compiled_again_for_each_value_bound() {
        let dir = tempfile::tempdir().unwrap();
        let store = Sqlite::open(&dir.path().join("cairn.db")).unwrap();
        let sql = "SELECT step_id FROM tool_calls WHERE run_id = ?1 ORDER BY started_at, rowid";
        let writer = store.lock_writer();
        let reader = store.reader.lock().unwrap();
        for conn in [&writer.conn, &*reader] {
            for run in ["run-1", "run-2", "run-3"] {
                let mut stmt = conn.prepare_cached(sql).unwrap();
                assert_eq!(stmt.query_map([run], |_| Ok(())).unwrap().count(), 0);
                assert_eq!(stmt.get_status(rusqlite::StatementStatus::RePrepare), 0, "bound to {run}");
            }
        }
    }
}
