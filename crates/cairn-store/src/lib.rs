//! Cairn's registry ([`RunStore`](cairn_core::store::RunStore)) in one of two databases: a SQLite
//! file in the state root (the default: one person, one machine) or a PostgreSQL database a team's
//! daemons share. The logic is written once (`registry.rs`) over a small SQL layer (`sql.rs`);
//! `sqlite.rs` and `postgres.rs` carry its statements to their database, with their own numbered
//! migrations (`migrations/sqlite/`, `migrations/postgres/`, the same numbers meaning the same).
//!
//! Every state change is one transaction, and every write that belongs to an attempt is
//! conditional on that attempt's token inside the same transaction, so a stale worker's write can
//! never be applied.

// No function over `too-many-lines-threshold` (clippy.toml): a reader finds a concept by its name.
#![warn(clippy::too_many_lines)]

mod postgres;
mod registry;
mod sql;
mod sqlite;

use std::path::Path;

use cairn_core::store::StoreError;

pub use postgres::{Postgres, is_postgres_url, redacted};
pub use registry::Registry;
pub use sqlite::{SCHEMA_VERSION, Sqlite};

/// Whether the daemon's steps are queueing for its step slots, set by the daemon: while they are,
/// its throughput is bound by the slots, not by any one run's latency, so a SQLite commit waits
/// for other writes to share its fsync — until the queue runs short (set to false), or at most
/// [`COMMIT_WAIT`](sqlite::COMMIT_WAIT). Otherwise every write commits at once.
#[derive(Clone, Default)]
pub struct Backlog(std::sync::Arc<BacklogState>);

#[derive(Default)]
struct BacklogState {
    queued: std::sync::atomic::AtomicBool,
    /// Called when the backlog ends: the writes waiting for company commit at once.
    on_end: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl std::fmt::Debug for Backlog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Backlog").field(&self.is_set()).finish()
    }
}

impl Backlog {
    pub fn set(&self, queued: bool) {
        let was = self.0.queued.swap(queued, std::sync::atomic::Ordering::SeqCst);
        if was
            && !queued
            && let Some(wake) = self.0.on_end.get()
        {
            wake();
        }
    }

    pub fn is_set(&self) -> bool {
        self.0.queued.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// What the backlog's end wakes (the store's writes waiting for company); set once.
    pub(crate) fn on_end(&self, wake: Box<dyn Fn() + Send + Sync>) {
        let _ = self.0.on_end.set(wake);
    }
}

/// The registry in one SQLite file.
pub type SqliteStore = Registry<Sqlite>;

/// The registry in a PostgreSQL database.
pub type PostgresStore = Registry<Postgres>;

impl Registry<Sqlite> {
    /// Opens (creating if needed) the registry at `path` and brings its schema up to date.
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        Ok(Registry::new(Sqlite::open(path)?))
    }

    /// Lets a commit wait for company while `backlog` is set.
    pub fn with_backlog(self, backlog: Backlog) -> SqliteStore {
        self.backend().set_backlog(backlog);
        self
    }

    /// For the tests of the backlog only: the longest a group waits for company.
    #[doc(hidden)]
    pub fn set_commit_wait(&self, wait: std::time::Duration) {
        self.backend().set_commit_wait(wait);
    }

    /// How many groups of writes were committed so far (for the tests of group commit).
    #[doc(hidden)]
    pub fn groups_committed(&self) -> u64 {
        self.backend().groups_committed()
    }

    /// For the crash tests only (`CAIRN_TEST_CRASH_AT=group-commit:N`): the process kills itself
    /// (SIGKILL) before committing its `nth` group of more than one write, as a kill -9 there
    /// would.
    #[doc(hidden)]
    pub fn crash_before_group_commit(self, nth: u64) -> SqliteStore {
        self.backend().crash_before_group_commit(nth);
        self
    }
}

impl Registry<Postgres> {
    /// Connects to the registry at `url` (`postgres://USER@HOST:PORT/DATABASE`) and brings its
    /// schema up to date.
    pub fn connect(url: &str) -> Result<PostgresStore, StoreError> {
        Ok(Registry::new(Postgres::open(url)?))
    }
}

/// What tests of the PostgreSQL registry (here, in the engine and in the binary) share: the
/// server they use, and a schema of their own in it.
#[doc(hidden)]
pub mod testing {
    use std::sync::atomic::{AtomicU64, Ordering};

    /// The PostgreSQL database the tests use: `CAIRN_TEST_DATABASE_URL` (`scripts/test.sh` starts
    /// the server and sets it). Without it a test fails under `CI=true` and is skipped elsewhere,
    /// saying so.
    pub fn database_url() -> Option<String> {
        match std::env::var("CAIRN_TEST_DATABASE_URL") {
            Ok(url) if !url.is_empty() => Some(url),
            _ => {
                let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
                assert!(
                    !ci,
                    "CAIRN_TEST_DATABASE_URL is not set; under CI the PostgreSQL registry's tests need the server \
                     scripts/test.sh starts (scripts/pg-up.sh prints its URL)"
                );
                eprintln!(
                    "skipped: CAIRN_TEST_DATABASE_URL is not set (scripts/pg-up.sh starts a server and prints it)"
                );
                None
            }
        }
    }

    /// Which database a test runs on: the tests of the registry's behaviour run on both.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Kind {
        Sqlite,
        Postgres,
    }

    /// The database a test runs on, kept as long as the test needs it.
    pub enum TestDatabase {
        /// The state root's own SQLite file.
        Sqlite,
        Postgres(TestSchema),
    }

    impl Kind {
        /// A fresh database of this kind; `None` where there is no PostgreSQL test server (see
        /// [`database_url`]), for the test to return at once.
        pub fn database(self) -> Option<TestDatabase> {
            match self {
                Kind::Sqlite => Some(TestDatabase::Sqlite),
                Kind::Postgres => TestSchema::create().map(TestDatabase::Postgres),
            }
        }
    }

    impl TestDatabase {
        /// What `--database` (the engine's `database`) is given for it.
        pub fn url(&self) -> Option<String> {
            match self {
                TestDatabase::Sqlite => None,
                TestDatabase::Postgres(schema) => Some(schema.url.clone()),
            }
        }
    }

    /// For each named `fn(Kind)`, a test on SQLite (in `mod sqlite`) and one on PostgreSQL (in
    /// `mod postgres`).
    #[macro_export]
    macro_rules! on_both {
        ($($name:ident),* $(,)?) => {
            mod sqlite {
                $( #[test] fn $name() { super::$name($crate::testing::Kind::Sqlite) } )*
            }
            mod postgres {
                $( #[test] fn $name() { super::$name($crate::testing::Kind::Postgres) } )*
            }
        };
    }

    /// A schema of its own in the test database, dropped with everything in it when this is.
    pub struct TestSchema {
        /// The database's URL with this schema as its search path: what a store connects to.
        pub url: String,
        pub name: String,
        admin: String,
    }

    impl TestSchema {
        /// A new, empty schema; `None` where there is no test database (see [`database_url`]).
        pub fn create() -> Option<TestSchema> {
            static N: AtomicU64 = AtomicU64::new(0);
            let admin = database_url()?;
            let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
            let name =
                format!("t_{}_{}_{}", std::process::id(), nanos % 1_000_000_000, N.fetch_add(1, Ordering::Relaxed));
            let mut client = postgres::Client::connect(&admin, postgres::NoTls)
                .unwrap_or_else(|e| panic!("cannot reach the test database {}: {e}", crate::redacted(&admin)));
            client
                .batch_execute(&format!("CREATE SCHEMA {name}"))
                .unwrap_or_else(|e| panic!("create schema {name}: {e}"));
            let sep = if admin.contains('?') { '&' } else { '?' };
            let url = format!("{admin}{sep}options=-c%20search_path%3D{name}");
            Some(TestSchema { url, name, admin })
        }

        /// A client on this schema, for what a test checks behind the store's back.
        pub fn client(&self) -> postgres::Client {
            postgres::Client::connect(&self.url, postgres::NoTls).unwrap_or_else(|e| panic!("connect: {e}"))
        }

        /// The text `sql` selects (its first row's first column), if any.
        pub fn text(&self, sql: &str) -> Option<String> {
            self.client()
                .query_opt(sql, &[])
                .ok()
                .flatten()
                .and_then(|r| r.try_get::<_, Option<String>>(0).ok().flatten())
        }
    }

    impl Drop for TestSchema {
        fn drop(&mut self) {
            if let Ok(mut client) = postgres::Client::connect(&self.admin, postgres::NoTls) {
                let _ = client.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
            }
        }
    }
}
