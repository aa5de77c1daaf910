//! The registry against a real SQLite file and a real PostgreSQL database (every test of its
//! behaviour runs on both): migrations, run creation, attempt fencing, revision guards, the
//! append-only event log and the workflow registry.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cairn_core::artifact::Artifact;
use cairn_core::ids::RunId;
use cairn_core::signature::StepSignature;
use cairn_core::status::{Outcome, RunStatus, StepStatus};
use cairn_core::store::*;
use cairn_core::workflow::{WorkflowSpec, parse_workflow};
use cairn_store::testing::{Kind, TestSchema};
use cairn_store::{PostgresStore, SqliteStore};
use rusqlite::Connection;
use serde_json::json;
use tempfile::TempDir;

const WORKFLOW: &str = r#"
[workflow]
name = "wf"
version = "1.0.0"

[tools.t]
command = ["/bin/echo", "{}"]

[[steps]]
id = "a"
tool = "t"

[[steps]]
id = "b"
tool = "t"
needs = ["a"]
"#;

/// Where a store's database is, for what a test checks behind the store's back.
enum Raw {
    Sqlite(#[allow(dead_code, reason = "kept so the directory lives as long as the store")] TempDir, PathBuf),
    Postgres(TestSchema),
}

struct Db {
    store: Box<dyn RunStore>,
    raw: Raw,
}

impl Db {
    /// Runs `sql` on a connection of its own, as anyone who reaches the database could.
    fn raw_execute(&self, sql: &str) -> Result<u64, String> {
        match &self.raw {
            Raw::Sqlite(_, path) => {
                Connection::open(path).unwrap().execute(sql, []).map(|n| n as u64).map_err(|e| e.to_string())
            }
            Raw::Postgres(schema) => {
                schema.client().execute(sql, &[]).map_err(|e| format!("{e}: {:?}", e.as_db_error()))
            }
        }
    }

    /// The single number `sql` selects.
    fn raw_count(&self, sql: &str) -> i64 {
        match &self.raw {
            Raw::Sqlite(_, path) => Connection::open(path).unwrap().query_row(sql, [], |r| r.get(0)).unwrap(),
            Raw::Postgres(schema) => schema.client().query_one(sql, &[]).unwrap().get(0),
        }
    }
}

/// A run id to look a run up by.
fn rid(id: &str) -> RunId {
    RunId::lookup(id)
}

fn spec(version: &str) -> WorkflowSpec {
    parse_workflow(&WORKFLOW.replace("1.0.0", version), "workflow.toml").unwrap()
}

fn record(version: &str, digest: &str) -> WorkflowRecord {
    WorkflowRecord {
        name: "wf".into(),
        version: version.into(),
        digest: digest.into(),
        path: format!("/registry/wf/{digest}"),
        spec: spec(version),
        registered_at: 1_000,
    }
}

fn open(path: &Path) -> SqliteStore {
    match SqliteStore::open(path) {
        Ok(s) => s,
        Err(e) => panic!("open {}: {e}", path.display()),
    }
}

/// A fresh, empty registry on `kind`; `None` where the test database is not set up (outside CI).
fn empty_db(kind: Kind) -> Option<Db> {
    Some(match kind {
        Kind::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("cairn.db");
            Db { store: Box::new(open(&path)), raw: Raw::Sqlite(dir, path) }
        }
        Kind::Postgres => {
            let schema = TestSchema::create()?;
            let store = PostgresStore::connect(&schema.url).unwrap_or_else(|e| panic!("connect: {e}"));
            Db { store: Box::new(store), raw: Raw::Postgres(schema) }
        }
    })
}

/// A fresh registry on `kind` with `wf@1.0.0` registered.
fn db(kind: Kind) -> Option<Db> {
    let db = empty_db(kind)?;
    assert_eq!(db.store.register_workflow(&record("1.0.0", "d1")).unwrap(), RegisterOutcome::Inserted);
    Some(db)
}

/// A fresh SQLite registry with `wf@1.0.0` registered, and its file.
fn sqlite_db() -> (TempDir, PathBuf, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cairn.db");
    let store = open(&path);
    assert_eq!(store.register_workflow(&record("1.0.0", "d1")).unwrap(), RegisterOutcome::Inserted);
    (dir, path, store)
}

fn new_run(run_id: &str) -> NewRun {
    NewRun {
        lease: None,
        run_id: RunId::lookup(run_id),
        workflow: "wf".into(),
        version: "1.0.0".into(),
        identity_hash: "identity-1".into(),
        input: json!({"n": 1}),
        run_dir: format!("/runs/{run_id}"),
        source_run_id: None,
        replay: None,
        owner: None,
        thread_id: None,
        parallelism: 1,
        at: 2_000,
        act: None,
        admission: Default::default(),
    }
}

fn created(store: &dyn RunStore, run_id: &str) -> RunRecord {
    match store.create_run(&new_run(run_id)).unwrap() {
        CreateRun::Created(r) => r,
        CreateRun::Existing(r) => panic!("run {} existed already", r.run_id),
    }
}

fn sig() -> StepSignature {
    StepSignature { tool: "t".into(), tool_digest: "tool-digest".into(), args_hash: "args-hash".into() }
}

fn begin(run_id: &str, step_id: &str, token: &str, attempt: u32, start: AttemptStart) -> BeginAttempt {
    BeginAttempt {
        run_id: RunId::lookup(run_id),
        step_id: step_id.into(),
        signature: sig(),
        args: json!({"x": 1}),
        token: token.into(),
        attempt,
        start,
        at: 3_000 + attempt as i64,
    }
}

fn finish(run_id: &str, step_id: &str, token: &str, attempt: u32, outcome: Outcome) -> FinishAttempt {
    FinishAttempt {
        run_id: RunId::lookup(run_id),
        step_id: step_id.into(),
        token: token.into(),
        attempt,
        outcome,
        result: (outcome == Outcome::Completed).then(|| json!({"ok": true})),
        error: (outcome != Outcome::Completed).then(|| "exit 1".to_string()),
        cause: None,
        log_tail: Some("stderr tail".into()),
        duration_us: 1_234,
        artifacts: Vec::new(),
        at: 4_000,
    }
}

fn step(store: &dyn RunStore, run_id: &str, step_id: &str) -> StepRecord {
    store.steps(&rid(run_id)).unwrap().into_iter().find(|s| s.step_id == step_id).expect("step row")
}

fn kinds(store: &dyn RunStore, run_id: &str) -> Vec<String> {
    store.events(&rid(run_id), 0).unwrap().into_iter().map(|e| e.event.kind().to_string()).collect()
}

fn user_version(path: &Path) -> i64 {
    Connection::open(path).unwrap().query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap()
}

fn schema(path: &Path) -> Vec<(String, String)> {
    let conn = Connection::open(path).unwrap();
    let mut stmt = conn.prepare("SELECT name, COALESCE(sql, '') FROM sqlite_master ORDER BY name").unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().collect::<Result<_, _>>().unwrap()
}

// ---------------------------------------------------------------- migrations

#[test]
fn the_newest_runs_of_one_status_are_searched_by_index_not_sorted() {
    let (_dir, path, store) = sqlite_db();
    created(&store, "run-1");
    // The statement `Runs::runs` makes for a status filter, as a run-list follower polls it.
    let conn = Connection::open(&path).unwrap();
    let plan: Vec<String> = conn
        .prepare(
            "EXPLAIN QUERY PLAN SELECT run_id FROM workflow_executions WHERE status = ?1 \
             ORDER BY created_at DESC, rowid DESC LIMIT ?2",
        )
        .unwrap()
        .query_map(["RUNNING", "1"], |r| r.get::<_, String>(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(plan.iter().any(|p| p.contains("USING INDEX workflow_executions_status_created")), "{plan:?}");
    assert!(!plan.iter().any(|p| p.starts_with("SCAN")), "{plan:?}");
    let running = store.runs(&RunQuery { status: Some(RunStatus::Running), ..RunQuery::newest(1) }).unwrap();
    assert_eq!(running.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>(), ["run-1"]);
}

#[test]
fn migrations_run_once_and_reopen_is_a_no_op() {
    let (_dir, path, store) = sqlite_db();
    created(&store, "run-1");
    assert_eq!(user_version(&path), cairn_store::SCHEMA_VERSION);
    let before = schema(&path);
    assert!(before.iter().any(|(n, _)| n == "events_no_update"), "{before:?}");
    drop(store);

    // Reopening applies nothing (a second CREATE TABLE would fail) and keeps the data.
    let store = open(&path);
    assert_eq!(user_version(&path), cairn_store::SCHEMA_VERSION);
    assert_eq!(schema(&path), before);
    assert_eq!(store.run(&rid("run-1")).unwrap().unwrap().status, RunStatus::Running);
    assert_eq!(store.workflows().unwrap().len(), 1);
    drop(store);
    let _third = open(&path);
    assert_eq!(user_version(&path), cairn_store::SCHEMA_VERSION);
}

#[test]
fn the_database_is_in_wal_mode() {
    let (_dir, path, _store) = sqlite_db();
    let mode: String = Connection::open(&path).unwrap().query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
    assert_eq!(mode.to_lowercase(), "wal");
}

/// Writes from many threads at once share transactions (a group commit): every one that
/// succeeded is there, and one that failed (a run of a workflow never registered) left nothing,
/// whatever group it was in.
#[test]
fn concurrent_writes_grouped_together_each_stand_or_fail_alone() {
    let (_dir, path, store) = sqlite_db();
    let groups = eight_writers(&path, store);
    assert!(groups <= WRITES, "{groups} groups for {WRITES} writes");
}

/// While the daemon's steps queue for its slots (its backlog), a group waits a moment for company:
/// the same writes then share far fewer commits, each still standing or failing alone.
#[test]
fn under_a_backlog_writes_wait_for_company_and_share_fewer_commits() {
    let (_dir, path, store) = sqlite_db();
    let backlog = cairn_store::Backlog::default();
    let store = store.with_backlog(backlog.clone());
    backlog.set(true);
    let groups = eight_writers(&path, store);
    // Eight writers each waiting up to COMMIT_WAIT after its write: groups of several.
    assert!(groups * 2 <= WRITES, "{groups} groups for {WRITES} writes");

    // One writer alone, no backlog: each of its writes commits by itself, at once.
    let (_dir, _path, store) = sqlite_db();
    let before = store.groups_committed();
    for k in 0..20 {
        assert!(matches!(store.create_run(&new_run(&format!("alone-{k}"))).unwrap(), CreateRun::Created(_)));
    }
    assert_eq!(store.groups_committed() - before, 20);
}

/// A group held for company commits as soon as the daemon's steps stop queueing (the backlog
/// ends), not when its longest wait is over: its writes are acknowledged then, and not before.
#[test]
fn a_group_held_for_company_commits_as_soon_as_the_backlog_ends() {
    let (_dir, path, store) = sqlite_db();
    let backlog = cairn_store::Backlog::default();
    let store = std::sync::Arc::new(store.with_backlog(backlog.clone()));
    // So long that only the backlog's end can release the writes within this test.
    store.set_commit_wait(Duration::from_secs(3600));
    backlog.set(true);
    let before = store.groups_committed();
    let (tx, rx) = std::sync::mpsc::channel();
    let write = |id: &'static str| {
        let (store, tx) = (store.clone(), tx.clone());
        std::thread::spawn(move || tx.send((id, store.create_run(&new_run(id)).is_ok())).unwrap())
    };
    // The first holds the group for company; the second joins it and waits for its end.
    let writers = [write("held-1"), write("held-2")];
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "a write was acknowledged while its group waited for company"
    );
    assert_eq!(store.groups_committed(), before, "the held group was committed");
    let count = || -> i64 {
        Connection::open(&path)
            .unwrap()
            .query_row("SELECT count(*) FROM workflow_executions WHERE run_id LIKE 'held-%'", [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(count(), 0, "another connection saw a held write");
    backlog.set(false);
    for _ in 0..2 {
        let (id, ok) = rx.recv_timeout(Duration::from_secs(30)).expect("the backlog's end released the held writes");
        assert!(ok, "{id} failed");
    }
    for w in writers {
        w.join().unwrap();
    }
    assert_eq!(store.groups_committed(), before + 1, "the two writes shared one group");
    assert_eq!(count(), 2);
}

/// Writes that succeed or fail in `eight_writers`.
const WRITES: u64 = 8 * 50 * 3;

/// Eight threads, each creating 50 runs, failing to create 50 of a workflow never registered and
/// beginning an attempt of each run it created; checks every write stood or failed alone.
/// Returns how many groups were committed.
fn eight_writers(path: &Path, store: SqliteStore) -> u64 {
    let store = std::sync::Arc::new(store);
    let before = store.groups_committed();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                for k in 0..50 {
                    let id = format!("g-{t}-{k}");
                    assert!(matches!(store.create_run(&new_run(&id)).unwrap(), CreateRun::Created(_)));
                    let orphan = NewRun { workflow: "never-registered".into(), ..new_run(&format!("x-{t}-{k}")) };
                    assert!(store.create_run(&orphan).is_err(), "a run of an unregistered workflow was created");
                    store.begin_attempt(&begin(&id, "a", &format!("tok-{t}-{k}"), 1, AttemptStart::First)).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let count = |sql: &str| -> i64 { Connection::open(path).unwrap().query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(count("SELECT count(*) FROM workflow_executions WHERE run_id LIKE 'g-%'"), 400);
    assert_eq!(count("SELECT count(*) FROM workflow_executions WHERE run_id LIKE 'x-%'"), 0);
    assert_eq!(count("SELECT count(*) FROM tool_calls WHERE status = 'RUNNING'"), 400);
    assert_eq!(store.runs(&RunQuery::newest(1000)).unwrap().len(), 400, "what the writers were told is what is read");
    store.groups_committed() - before
}

#[test]
fn a_database_from_a_newer_cairn_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cairn.db");
    Connection::open(&path).unwrap().pragma_update(None, "user_version", 99).unwrap();
    let err = match SqliteStore::open(&path) {
        Ok(_) => panic!("a schema version 99 database was opened"),
        Err(e) => e,
    };
    assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("99") && msg.contains("upgrade cairn"), "{msg}");
    // Nothing was migrated over it.
    assert_eq!(user_version(&path), 99);
    assert!(schema(&path).is_empty());
}

// ---------------------------------------------------------------- runs

fn create_run_returns_created_then_existing(k: Kind) {
    let Some(d) = db(k) else { return };
    let store: &dyn RunStore = &*d.store;
    let first = created(store, "run-1");
    assert_eq!(first.status, RunStatus::Running);
    assert_eq!(first.revision, 1);
    assert_eq!(first.input, json!({"n": 1}));
    assert_eq!((first.created_at, first.updated_at, first.finished_at), (2_000, 2_000, None));

    // Even with other identity data: the store returns the existing run and the caller compares.
    let mut again = new_run("run-1");
    again.identity_hash = "identity-2".into();
    again.at = 9_000;
    match store.create_run(&again).unwrap() {
        CreateRun::Existing(r) => assert_eq!(r, first),
        CreateRun::Created(_) => panic!("a run was created twice"),
    }
    assert_eq!(kinds(store, "run-1"), ["run.created"]);
    assert_eq!(store.runs(&RunQuery::newest(10)).unwrap().len(), 1);
}

/// The run list filters by status and workflow before its limit; a run knows its replays, and a
/// run made without a plan has no target.
fn runs_filter_and_replays_are_found(k: Kind) {
    let Some(d) = db(k) else { return };
    let store: &dyn RunStore = &*d.store;
    let ids = |runs: Vec<RunRecord>| runs.into_iter().map(|r| r.run_id).collect::<Vec<_>>();
    created(store, "source");
    for (n, id) in ["child-1", "child-2"].into_iter().enumerate() {
        let mut child = new_run(id);
        child.source_run_id = Some(rid("source"));
        child.at = 3_000 + n as i64;
        assert!(matches!(store.create_run(&child).unwrap(), CreateRun::Created(_)));
    }
    let replays_of =
        |run: &str| store.runs(&RunQuery { source_run_id: Some(&rid(run)), ..RunQuery::newest(10) }).unwrap();
    assert_eq!(ids(replays_of("source")), ["child-2", "child-1"]);
    assert!(replays_of("child-1").is_empty());
    assert_eq!(store.target_of_run(&rid("source")).unwrap(), None);
    let runs =
        |limit, status, workflow| store.runs(&RunQuery { limit, status, workflow, source_run_id: None }).unwrap();
    assert_eq!(ids(runs(2, None, Some("wf"))), ["child-2", "child-1"]);
    assert!(runs(10, None, Some("other")).is_empty());
    assert_eq!(runs(10, Some(RunStatus::Running), Some("wf")).len(), 3);
    assert!(runs(10, Some(RunStatus::Ready), Some("wf")).is_empty());
}

fn a_run_of_an_unregistered_workflow_is_refused_by_the_foreign_key(k: Kind) {
    let Some(d) = db(k) else { return };
    let store: &dyn RunStore = &*d.store;
    let mut new = new_run("run-x");
    new.version = "9.9.9".into();
    assert!(matches!(store.create_run(&new), Err(StoreError::Database(_))));
    assert!(store.run(&rid("run-x")).unwrap().is_none());
}

// ---------------------------------------------------------------- attempts

fn begin_attempt_first_twice_is_step_exists(k: Kind) {
    let Some(d) = db(k) else { return };
    let store: &dyn RunStore = &*d.store;
    created(store, "r");
    store.begin_attempt(&begin("r", "a", "tok-1", 1, AttemptStart::First)).unwrap();
    let row = step(store, "r", "a");
    assert_eq!(row.status, StepStatus::Running);
    assert_eq!(row.attempt_token.as_deref(), Some("tok-1"));
    assert_eq!(row.attempt_count, 1);
    assert_eq!(row.signature, sig());

    let err = store.begin_attempt(&begin("r", "a", "tok-2", 1, AttemptStart::First)).unwrap_err();
    assert_eq!(err, StoreError::StepExists { run_id: "r".into(), step_id: "a".into() });
    assert_eq!(step(store, "r", "a"), row);
    assert_eq!(kinds(store, "r"), ["run.created", "step.started"]);
}

/// A first attempt begins only in an open run: a finished run's refusal and a missing run's name
/// why, and write nothing.
fn begin_attempt_outside_an_open_run_is_refused_and_writes_nothing(k: Kind) {
    let Some(d) = db(k) else { return };
    let store: &dyn RunStore = &*d.store;
    let err = store.begin_attempt(&begin("nope", "a", "tok-1", 1, AttemptStart::First)).unwrap_err();
    assert_eq!(err, StoreError::RunNotFound("nope".into()));

    let run = created(store, "r");
    store.finish_run(&rid("r"), run.revision, RunStatus::Ready, &[], None, 5_000).unwrap();
    let before = kinds(store, "r");
    let err = store.begin_attempt(&begin("r", "a", "tok-1", 1, AttemptStart::First)).unwrap_err();
    assert_eq!(err, StoreError::RunFinished { run_id: "r".into(), status: "READY".into() });
    let err = store.commit_steps(&[], &[begin("r", "a", "tok-1", 1, AttemptStart::First)]).unwrap_err();
    assert_eq!(err, StoreError::RunFinished { run_id: "r".into(), status: "READY".into() });
    assert!(store.steps(&rid("r")).unwrap().is_empty());
    assert_eq!(kinds(store, "r"), before);
}

fn complete_attempt_with_a_wrong_token_is_stale_and_changes_nothing(k: Kind) {
    let Some(d) = db(k) else { return };
    let store: &dyn RunStore = &*d.store;
    created(store, "r");
    store.begin_attempt(&begin("r", "a", "tok-1", 1, AttemptStart::First)).unwrap();
    let steps_before = store.steps(&rid("r")).unwrap();
    let events_before = store.events(&rid("r"), 0).unwrap();

    let err = store.complete_attempt(&finish("r", "a", "tok-wrong", 1, Outcome::Completed)).unwrap_err();
    assert_eq!(err, StoreError::StaleToken { run_id: "r".into(), step_id: "a".into() });
    assert_eq!(store.steps(&rid("r")).unwrap(), steps_before);
    assert_eq!(store.events(&rid("r"), 0).unwrap(), events_before);

    // A step with no row at all has no owner either.
    let err = store.complete_attempt(&finish("r", "b", "tok-1", 1, Outcome::Completed)).unwrap_err();
    assert!(matches!(err, StoreError::StaleToken { .. }), "{err:?}");
    assert_eq!(store.steps(&rid("r")).unwrap(), steps_before);

    // The owner's write goes through.
    store.complete_attempt(&finish("r", "a", "tok-1", 1, Outcome::Completed)).unwrap();
    let row = step(store, "r", "a");
    assert_eq!(row.status, StepStatus::Completed);
    assert_eq!(row.result, Some(json!({"ok": true})));
    assert_eq!(row.outcome, Some(Outcome::Completed));
    assert_eq!(row.duration_us, Some(1_234));
    assert_eq!(row.finished_at, Some(4_000));
    assert_eq!(kinds(store, "r"), ["run.created", "step.started", "step.completed"]);
}

fn record_process_is_fenced_by_the_token(k: Kind) {
    let Some(d) = db(k) else { return };
    let store: &dyn RunStore = &*d.store;
    created(store, "r");
    store.begin_attempt(&begin("r", "a", "tok-1", 1, AttemptStart::First)).unwrap();
    let p = ProcessInfo { pid: 4242, pgid: 4242, start_time: Some(77), remote: None };
    assert!(matches!(store.record_process(&rid("r"), "a", &"tok-x".into(), &p), Err(StoreError::StaleToken { .. })));
    assert_eq!(step(store, "r", "a").process, None);
    store.record_process(&rid("r"), "a", &"tok-1".into(), &p).unwrap();
    assert_eq!(step(store, "r", "a").process, Some(p));
}

fn a_launch_record_is_kept_before_and_after_its_identity_and_adopted_only_with_the_token(k: Kind) {
    let Some(d) = db(k) else { return };
    let store: &dyn RunStore = &*d.store;
    created(store, "r");
    store.begin_attempt(&begin("r", "a", "tok-1", 1, AttemptStart::First)).unwrap();
    let mut remote = RemoteProcess {
        target: "hpc".into(),
        attempt_dir: "/w/r/steps/a/.cairn/attempt-1".into(),
        nonce: "att_x".into(),
        pid: None,
        start_time: None,
        job_id: None,
    };
    // Before the launch: only where to find it.
    let before = ProcessInfo { pid: 0, pgid: 0, start_time: None, remote: Some(remote.clone()) };
    store.record_process(&rid("r"), "a", &"tok-1".into(), &before).unwrap();
    assert_eq!(step(store, "r", "a").process, Some(before));
    // After it: the identity the agent reported.
    remote.job_id = Some("31".into());
    let after = ProcessInfo { pid: 0, pgid: 0, start_time: None, remote: Some(remote.clone()) };
    store.record_process(&rid("r"), "a", &"tok-1".into(), &after).unwrap();
    assert_eq!(step(store, "r", "a").process, Some(after.clone()));

    let err = store.adopt_attempt(&rid("r"), "a", &"tok-old".into(), &"tok-2".into(), 5_000).unwrap_err();
    assert!(matches!(err, StoreError::StaleToken { .. }), "{err:?}");
    store.adopt_attempt(&rid("r"), "a", &"tok-1".into(), &"tok-2".into(), 5_000).unwrap();
    let row = step(store, "r", "a");
    assert_eq!((row.attempt_token.as_deref(), row.attempt_count), (Some("tok-2"), 1));
    assert_eq!(row.process, Some(after), "adopting keeps the launch record");
    assert_eq!(kinds(store, "r"), ["run.created", "step.started", "step.reattached"]);
    // The predecessor's token can no longer write.
    assert!(store.complete_attempt(&finish("r", "a", "tok-1", 1, Outcome::Completed)).is_err());
    store.complete_attempt(&finish("r", "a", "tok-2", 1, Outcome::Completed)).unwrap();
}

fn retry_is_conditional_on_the_previous_token(k: Kind) {
    let Some(d) = db(k) else { return };
    let store: &dyn RunStore = &*d.store;
    created(store, "r");
    store.begin_attempt(&begin("r", "a", "tok-1", 1, AttemptStart::First)).unwrap();
    let before = store.steps(&rid("r")).unwrap();
    let n_events = store.events(&rid("r"), 0).unwrap().len();

    let stale = AttemptStart::Retry {
        previous_token: "tok-old".into(),
        outcome: Outcome::TimedOut,
        error: None,
        cause: None,
        delay_ms: 0,
    };
    let err = store.begin_attempt(&begin("r", "a", "tok-2", 2, stale)).unwrap_err();
    assert_eq!(err, StoreError::StaleToken { run_id: "r".into(), step_id: "a".into() });
    assert_eq!(store.steps(&rid("r")).unwrap(), before);
    assert_eq!(store.events(&rid("r"), 0).unwrap().len(), n_events);

    let ok = AttemptStart::Retry {
        previous_token: "tok-1".into(),
        outcome: Outcome::TimedOut,
        error: Some("timed out after 1 s".into()),
        cause: None,
        delay_ms: 0,
    };
    store.begin_attempt(&begin("r", "a", "tok-2", 2, ok)).unwrap();
    let row = step(store, "r", "a");
    assert_eq!(row.attempt_token.as_deref(), Some("tok-2"));
    assert_eq!(row.attempt_count, 2);
    assert_eq!(row.interrupted_count, 0);
    assert_eq!(kinds(store, "r"), ["run.created", "step.started", "step.retrying", "step.started"]);

    // The first attempt's token no longer owns the step.
    let err = store.complete_attempt(&finish("r", "a", "tok-1", 1, Outcome::Completed)).unwrap_err();
    assert!(matches!(err, StoreError::StaleToken { .. }));
    store.complete_attempt(&finish("r", "a", "tok-2", 2, Outcome::Completed)).unwrap();
    assert_eq!(step(store, "r", "a").status, StepStatus::Completed);
}

/// The scheduler's one commit: completions, then begins, all or nothing.
fn commit_steps_completes_and_begins_in_one_transaction_or_writes_nothing(k: Kind) {
    let Some(d) = db(k) else { return };
    let store: &dyn RunStore = &*d.store;
    created(store, "r");
    store.begin_attempt(&begin("r", "a", "tok-a", 1, AttemptStart::First)).unwrap();
    store.begin_attempt(&begin("r", "b", "tok-b", 1, AttemptStart::First)).unwrap();
    let before = (store.steps(&rid("r")).unwrap(), kinds(store, "r"));

    // One stale completion among them: nothing of the batch is written, not even the good one.
    let batch = [finish("r", "a", "tok-a", 1, Outcome::Completed), finish("r", "b", "tok-old", 1, Outcome::Completed)];
    let err = store.commit_steps(&batch, &[begin("r", "c", "tok-c", 1, AttemptStart::First)]).unwrap_err();
    assert_eq!(err, StoreError::StaleToken { run_id: "r".into(), step_id: "b".into() });
    assert_eq!((store.steps(&rid("r")).unwrap(), kinds(store, "r")), before);

    // A begin that cannot be made (the step exists) undoes the completions before it too.
    let err = store
        .commit_steps(
            &[finish("r", "a", "tok-a", 1, Outcome::Completed)],
            &[begin("r", "b", "tok-x", 1, AttemptStart::First)],
        )
        .unwrap_err();
    assert!(matches!(err, StoreError::StepExists { .. }), "{err:?}");
    assert_eq!((store.steps(&rid("r")).unwrap(), kinds(store, "r")), before);

    let batch = [finish("r", "b", "tok-b", 1, Outcome::Completed), finish("r", "a", "tok-a", 1, Outcome::Completed)];
    let starts = [begin("r", "c", "tok-c", 1, AttemptStart::First), begin("r", "d", "tok-d", 1, AttemptStart::First)];
    store.commit_steps(&batch, &starts).unwrap();
    for (id, status) in [("a", StepStatus::Completed), ("b", StepStatus::Completed), ("c", StepStatus::Running)] {
        assert_eq!(step(store, "r", id).status, status, "{id}");
    }
    assert_eq!(step(store, "r", "d").attempt_token.as_deref(), Some("tok-d"));
    // In the order given: the completions, then the begins.
    let tail: Vec<(String, Option<String>)> = store
        .events(&rid("r"), 0)
        .unwrap()
        .iter()
        .rev()
        .take(4)
        .rev()
        .map(|e| (e.event.kind().to_string(), e.step_id.clone()))
        .collect();
    let want = [("step.completed", "b"), ("step.completed", "a"), ("step.started", "c"), ("step.started", "d")];
    assert_eq!(tail, want.map(|(k, s)| (k.to_string(), Some(s.to_string()))));
}

fn resume_interrupted_is_conditional_on_the_previous_token(k: Kind) {
    let Some(d) = db(k) else { return };
    let store: &dyn RunStore = &*d.store;
    created(store, "r");
    store.begin_attempt(&begin("r", "a", "tok-1", 1, AttemptStart::First)).unwrap();
    store
        .record_process(
            &rid("r"),
            "a",
            &"tok-1".into(),
            &ProcessInfo { pid: 9, pgid: 9, start_time: None, remote: None },
        )
        .unwrap();
    let before = store.steps(&rid("r")).unwrap();

    let stale = AttemptStart::ResumeInterrupted { previous_token: "tok-old".into(), why: None };
    let err = store.begin_attempt(&begin("r", "a", "tok-2", 2, stale)).unwrap_err();
    assert_eq!(err, StoreError::StaleToken { run_id: "r".into(), step_id: "a".into() });
    assert_eq!(store.steps(&rid("r")).unwrap(), before);

    let ok = AttemptStart::ResumeInterrupted { previous_token: "tok-1".into(), why: None };
    store.begin_attempt(&begin("r", "a", "tok-2", 2, ok)).unwrap();
    let row = step(store, "r", "a");
    assert_eq!(row.attempt_token.as_deref(), Some("tok-2"));
    assert_eq!((row.attempt_count, row.interrupted_count), (2, 1));
    assert_eq!(row.process, None, "the abandoned attempt's process identity is cleared");
    let events = store.events(&rid("r"), 0).unwrap();
    let interrupted = events.iter().find(|e| e.event.kind() == "step.interrupted").expect("step.interrupted");
    assert_eq!(interrupted.event.data()["abandoned_token"], json!("tok-1"));
    assert_eq!(interrupted.attempt, Some(1));
    assert!(matches!(
        store.complete_attempt(&finish("r", "a", "tok-1", 1, Outcome::Completed)),
        Err(StoreError::StaleToken { .. })
    ));
}

fn fail_attempt_fails_the_step_and_the_run_in_one_go(k: Kind) {
    let Some(d) = db(k) else { return };
    let store: &dyn RunStore = &*d.store;
    let run = created(store, "r");
    store.begin_attempt(&begin("r", "a", "tok-1", 1, AttemptStart::First)).unwrap();

    // A stale token fails nothing.
    let err = store.fail_attempt(&finish("r", "a", "tok-x", 1, Outcome::Failed), "boom").unwrap_err();
    assert!(matches!(err, StoreError::StaleToken { .. }));
    assert_eq!(store.run(&rid("r")).unwrap().unwrap(), run);
    assert_eq!(step(store, "r", "a").status, StepStatus::Running);

    store.fail_attempt(&finish("r", "a", "tok-1", 1, Outcome::Failed), "step `a` ended FAILED").unwrap();
    let row = step(store, "r", "a");
    assert_eq!(row.status, StepStatus::Failed);
    assert_eq!(row.outcome, Some(Outcome::Failed));
    assert_eq!(row.error.as_deref(), Some("exit 1"));
    assert_eq!(row.result, None);
    let after = store.run(&rid("r")).unwrap().unwrap();
    assert_eq!(after.status, RunStatus::Failed);
    assert_eq!(after.error.as_deref(), Some("step `a` ended FAILED"));
    assert_eq!(after.finished_at, Some(4_000));
    assert_eq!(after.revision, run.revision + 1);
    let events = store.events(&rid("r"), 0).unwrap();
    let k: Vec<&str> = events.iter().map(|e| e.event.kind()).collect();
    assert_eq!(k, ["run.created", "step.started", "step.failed", "run.finished"]);
    assert_eq!(events[3].event.data()["status"], json!("FAILED"));
    assert_eq!(events[2].at, events[3].at);

    // A terminal run is not finished again.
    let err = store.finish_run(&rid("r"), after.revision, RunStatus::Ready, &[], None, 5_000).unwrap_err();
    assert!(matches!(err, StoreError::StaleRevision { .. }), "{err:?}");
}

/// A full disk's cause is kept with the attempt's end: in the `step.retrying` event (with the
/// retry's wait) and, once the step fails, in its row and its `step.failed` event; a retry clears
/// the row's.
fn a_failed_attempts_cause_is_recorded_with_its_end(k: Kind) {
    use cairn_core::cause::{DiskSpace, cause_of};
    let Some(d) = db(k) else { return };
    let store: &dyn RunStore = &*d.store;
    created(store, "r");
    let cause = cause_of(Outcome::Failed, "", &[DiskSpace { path: "/full".into(), free_bytes: 0, free_inodes: None }]);
    store.begin_attempt(&begin("r", "a", "tok-1", 1, AttemptStart::First)).unwrap();
    let retry = AttemptStart::Retry {
        previous_token: "tok-1".into(),
        outcome: Outcome::Failed,
        error: Some("ENOSPC on /full".into()),
        cause: cause.clone(),
        delay_ms: 1_000,
    };
    store.begin_attempt(&begin("r", "a", "tok-2", 2, retry)).unwrap();
    assert_eq!(step(store, "r", "a").cause, None, "the attempt running now has no cause yet");
    store
        .fail_attempt(&FinishAttempt { cause: cause.clone(), ..finish("r", "a", "tok-2", 2, Outcome::Failed) }, "x")
        .unwrap();
    assert_eq!(step(store, "r", "a").cause, cause);
    let events = store.events(&rid("r"), 0).unwrap();
    let data = |kind: &str| events.iter().find(|e| e.event.kind() == kind).map(|e| e.event.data()).unwrap();
    let stored = json!({"kind": "NO_SPACE", "path": "/full", "free_bytes": 0, "disk_full": true, "in_stderr": false});
    assert_eq!(
        (data("step.retrying")["cause"].clone(), data("step.retrying")["delay_ms"].clone()),
        (stored.clone(), json!(1_000))
    );
    assert_eq!(data("step.failed")["cause"], stored);
}

// ---------------------------------------------------------------- revisions

fn finish_run_with_a_stale_revision_is_refused(k: Kind) {
    let Some(d) = db(k) else { return };
    let store: &dyn RunStore = &*d.store;
    let run = created(store, "r");
    let err = store.finish_run(&rid("r"), run.revision + 7, RunStatus::Ready, &[], None, 5_000).unwrap_err();
    assert_eq!(err, StoreError::StaleRevision { run_id: "r".into(), expected: run.revision + 7 });
    assert_eq!(store.run(&rid("r")).unwrap().unwrap(), run);
    assert_eq!(kinds(store, "r"), ["run.created"]);

    let err = store.finish_run(&rid("nope"), 1, RunStatus::Ready, &[], None, 5_000).unwrap_err();
    assert_eq!(err, StoreError::RunNotFound("nope".into()));

    let done = store.finish_run(&rid("r"), run.revision, RunStatus::Ready, &[], None, 5_000).unwrap();
    assert_eq!(done.status, RunStatus::Ready);
    assert_eq!(done.revision, run.revision + 1);
    assert_eq!(done.finished_at, Some(5_000));
    assert_eq!(kinds(store, "r"), ["run.created", "run.finished"]);
}

fn claim_run_bumps_the_revision(k: Kind) {
    let Some(d) = db(k) else { return };
    let store: &dyn RunStore = &*d.store;
    let run = created(store, "r");
    let rev = store
        .claim_run(&rid("r"), run.revision, Some(&cairn_core::ids::Owner { pid: 1, start_time: 2 }), 6_000)
        .unwrap();
    assert_eq!(rev, run.revision + 1);
    let now = store.run(&rid("r")).unwrap().unwrap();
    assert_eq!((now.revision, now.updated_at, now.status), (rev, 6_000, RunStatus::Running));
    assert_eq!(kinds(store, "r"), ["run.created", "run.resumed"]);

    // The previous holder's revision is stale now, for claiming and for finishing.
    assert!(matches!(store.claim_run(&rid("r"), run.revision, None, 6_001), Err(StoreError::StaleRevision { .. })));
    assert!(matches!(
        store.finish_run(&rid("r"), run.revision, RunStatus::Ready, &[], None, 6_002),
        Err(StoreError::StaleRevision { .. })
    ));
    assert_eq!(store.run(&rid("r")).unwrap().unwrap().revision, rev);
    store.finish_run(&rid("r"), rev, RunStatus::Ready, &[], None, 6_003).unwrap();
}

// ---------------------------------------------------------------- events

fn events_are_ordered_and_append_only(k: Kind) {
    let Some(d) = db(k) else { return };
    let store: &dyn RunStore = &*d.store;
    created(store, "r");
    created(store, "other");
    store.begin_attempt(&begin("r", "a", "ta", 1, AttemptStart::First)).unwrap();
    store.begin_attempt(&begin("other", "a", "to", 1, AttemptStart::First)).unwrap();
    store.complete_attempt(&finish("r", "a", "ta", 1, Outcome::Completed)).unwrap();
    store.begin_attempt(&begin("r", "b", "tb", 1, AttemptStart::First)).unwrap();
    store.record_stale_write(&rid("r"), "b", &"t-stale".into(), 4_500).unwrap();
    store.complete_attempt(&finish("r", "b", "tb", 1, Outcome::Completed)).unwrap();
    let rev = store.run(&rid("r")).unwrap().unwrap().revision;
    store.finish_run(&rid("r"), rev, RunStatus::Ready, &[], None, 5_000).unwrap();

    let events = store.events(&rid("r"), 0).unwrap();
    let k: Vec<&str> = events.iter().map(|e| e.event.kind()).collect();
    assert_eq!(
        k,
        [
            "run.created",
            "step.started",
            "step.completed",
            "step.started",
            "step.stale_write_rejected",
            "step.completed",
            "run.finished"
        ]
    );
    assert!(events.windows(2).all(|w| w[0].seq < w[1].seq), "{events:?}");
    assert!(events.iter().all(|e| e.run_id == "r"));
    assert_eq!(events[1].step_id.as_deref(), Some("a"));
    // `after_seq` pages through the log.
    let tail = store.events(&rid("r"), events[3].seq).unwrap();
    assert_eq!(tail, events[4..].to_vec());

    // The database itself refuses to rewrite history, whoever connects to it.
    let total = d.raw_count("SELECT COUNT(*) FROM events");
    for sql in [
        "UPDATE events SET kind = 'forged' WHERE run_id = 'r'",
        "DELETE FROM events WHERE run_id = 'r'",
        "DELETE FROM events",
    ] {
        let err = d.raw_execute(sql).unwrap_err();
        assert!(err.contains("append-only"), "{sql}: {err}");
    }
    assert_eq!(d.raw_count("SELECT COUNT(*) FROM events"), total);
    assert_eq!(store.events(&rid("r"), 0).unwrap(), events);
}

// ---------------------------------------------------------------- workflows

fn workflow_without_a_version_is_the_highest_semver(k: Kind) {
    let Some(d) = empty_db(k) else { return };
    let store: &dyn RunStore = &*d.store;
    for v in ["1.2.0", "1.10.0", "1.9.0"] {
        assert_eq!(store.register_workflow(&record(v, &format!("d-{v}"))).unwrap(), RegisterOutcome::Inserted);
    }
    let latest = store.workflow("wf", None).unwrap().unwrap();
    assert_eq!(latest.version, "1.10.0", "the highest semantic version, not the last registered or text order");
    assert_eq!(latest.spec, spec("1.10.0"));
    assert_eq!(store.workflow("wf", Some("1.9.0")).unwrap().unwrap().digest, "d-1.9.0");
    assert!(store.workflow("wf", Some("2.0.0")).unwrap().is_none());
    assert!(store.workflow("nope", None).unwrap().is_none());
    let listed: Vec<String> = store.workflows().unwrap().into_iter().map(|w| w.version).collect();
    assert_eq!(listed, ["1.2.0", "1.9.0", "1.10.0"]);
}

/// A run's steps are read a page at a time in its workflow's DAG order (not the order they
/// were declared or started in), with counts over every step, filtered by status, failed and
/// running first, or by id; a workflow registered before the registry kept its order gets it the
/// first time one of its runs is shown.
fn a_runs_steps_are_paged_in_the_dags_order(k: Kind) {
    let Some(d) = empty_db(k) else { return };
    let store: &dyn RunStore = &*d.store;
    // 1,200 steps (more than one statement's worth of ids); s0 needs the last, so it comes last.
    let mut toml = String::from(
        "[workflow]\nname = \"wf\"\nversion = \"1.0.0\"\n\n[tools.t]\ncommand = [\"/bin/echo\", \"{}\"]\n\n",
    );
    toml.push_str("[[steps]]\nid = \"s0\"\ntool = \"t\"\nneeds = [\"s1199\"]\n\n");
    for i in 1..1200 {
        toml.push_str(&format!("[[steps]]\nid = \"s{i}\"\ntool = \"t\"\n\n"));
    }
    let wf = WorkflowRecord { spec: parse_workflow(&toml, "workflow.toml").unwrap(), ..record("1.0.0", "d1") };
    assert_eq!(store.register_workflow(&wf).unwrap(), RegisterOutcome::Inserted);
    created(store, "r");
    for (step, token) in [("s5", "t5"), ("s7", "t7"), ("s9", "t9")] {
        store.begin_attempt(&begin("r", step, token, 1, AttemptStart::First)).unwrap();
    }
    store.complete_attempt(&finish("r", "s7", "t7", 1, Outcome::Completed)).unwrap();
    store.fail_attempt(&finish("r", "s9", "t9", 1, Outcome::Failed), "s9 failed").unwrap();
    let page = |q: StepQuery| store.step_page(&rid("r"), &q).unwrap();
    let ids = |p: &StepPage| p.steps.iter().map(|s| s.step_id.clone()).collect::<Vec<_>>();

    let every = page(StepQuery::every());
    assert_eq!(every.counts, StepCounts { total: 1200, pending: 1197, running: 1, completed: 1, failed: 1 });
    assert_eq!((every.matched, every.steps.len()), (1200, 1200));
    assert_eq!((ids(&every)[0].as_str(), ids(&every)[1199].as_str()), ("s1", "s0"), "the DAG's order");
    let s7 = every.steps.iter().find(|s| s.step_id == "s7").unwrap();
    assert_eq!(s7.record.as_ref().map(|r| r.status), Some(StepStatus::Completed));
    assert!(!s7.pipeline);
    assert!(every.steps.iter().find(|s| s.step_id == "s8").unwrap().record.is_none(), "pending: no row");

    let p = page(StepQuery { offset: 10, limit: Some(5), ..StepQuery::every() });
    assert_eq!(ids(&p), ["s11", "s12", "s13", "s14", "s15"]);
    assert_eq!((p.matched, p.counts.total), (1200, 1200));
    let last = page(StepQuery { offset: 1198, limit: Some(5), ..StepQuery::every() });
    assert_eq!(ids(&last), ["s1199", "s0"]);
    assert!(page(StepQuery { offset: 5000, limit: Some(5), ..StepQuery::every() }).steps.is_empty());

    let attention = StepQuery { statuses: vec!["FAILED", "RUNNING"], ..StepQuery::every() };
    let p = page(attention.clone());
    assert_eq!((ids(&p), p.matched), (vec!["s5".to_string(), "s9".to_string()], 2));
    assert_eq!(p.steps[0].record.as_ref().map(|r| r.status), Some(StepStatus::Running));
    let p = page(StepQuery { attention_first: true, ..attention });
    assert_eq!(ids(&p), ["s9", "s5"], "failed first");
    let p = page(StepQuery { attention_first: true, limit: Some(4), ..StepQuery::every() });
    assert_eq!(ids(&p), ["s9", "s5", "s1", "s2"], "then the rest in the DAG's order");
    let p = page(StepQuery { statuses: vec!["PENDING"], offset: 3, limit: Some(3), ..StepQuery::every() });
    assert_eq!((ids(&p), p.matched), (vec!["s4".to_string(), "s6".to_string(), "s8".to_string()], 1197));
    let p = page(StepQuery { ids: vec!["s0".into(), "s7".into(), "nope".into()], ..StepQuery::every() });
    assert_eq!(ids(&p), ["s7", "s0"]);
    assert!(matches!(store.step_page(&rid("nope"), &StepQuery::every()), Err(StoreError::RunNotFound(_))));

    // As a registry from before the order was kept: it is recorded when first needed.
    d.raw_execute("DELETE FROM workflow_steps").unwrap();
    assert_eq!(ids(&page(StepQuery { limit: Some(2), ..StepQuery::every() })), ["s1", "s2"]);
    assert_eq!(d.raw_count("SELECT count(*) FROM workflow_steps"), 1200);
    let mut started = store.step_ids(&rid("r")).unwrap();
    started.sort();
    assert_eq!(started, ["s5", "s7", "s9"]);
}

fn registering_again_is_idempotent_and_other_content_conflicts(k: Kind) {
    let Some(d) = db(k) else { return };
    let store: &dyn RunStore = &*d.store;
    assert_eq!(store.register_workflow(&record("1.0.0", "d1")).unwrap(), RegisterOutcome::AlreadyRegistered);
    let mut other = record("1.0.0", "d2");
    other.path = "/elsewhere".into();
    assert_eq!(store.register_workflow(&other).unwrap(), RegisterOutcome::Conflict { existing_digest: "d1".into() });
    let stored = store.workflow("wf", Some("1.0.0")).unwrap().unwrap();
    assert_eq!(stored, record("1.0.0", "d1"));
    assert_eq!(store.workflows().unwrap().len(), 1);
}

fn cancel_run_fails_running_steps_clears_their_tokens_and_is_terminal(k: Kind) {
    let Some(d) = db(k) else { return };
    let store: &dyn RunStore = &*d.store;
    created(store, "r");
    store.begin_attempt(&begin("r", "a", "tok-a", 1, AttemptStart::First)).unwrap();
    store.complete_attempt(&finish("r", "a", "tok-a", 1, Outcome::Completed)).unwrap();
    store.begin_attempt(&begin("r", "b", "tok-b", 1, AttemptStart::First)).unwrap();

    let run = store.cancel_run(&rid("r"), "cancelled by an operator", 5_000, None).unwrap();
    assert_eq!(run.status, RunStatus::Cancelled);
    assert_eq!(run.error.as_deref(), Some("cancelled by an operator"));
    assert_eq!(step(store, "r", "a").status, StepStatus::Completed, "a completed step stays completed");
    let b = step(store, "r", "b");
    assert_eq!(b.status, StepStatus::Failed);
    assert_eq!(b.attempt_token, None);
    // The cancelled attempt's late write is rejected by the token guard.
    let late = store.complete_attempt(&finish("r", "b", "tok-b", 1, Outcome::Completed));
    assert!(matches!(late, Err(StoreError::StaleToken { .. })), "{late:?}");
    assert!(kinds(store, "r").ends_with(&["step.cancelled".to_string(), "run.finished".to_string()]));
    assert!(store.open_runs().unwrap().is_empty());
    // A finished run cannot be cancelled again.
    assert!(matches!(store.cancel_run(&rid("r"), "again", 6_000, None), Err(StoreError::RunFinished { .. })));
    assert!(matches!(store.cancel_run(&rid("nope"), "x", 6_000, None), Err(StoreError::RunNotFound(_))));
}

fn open_runs_lists_non_terminal_runs_with_their_owner(k: Kind) {
    let Some(d) = db(k) else { return };
    let store: &dyn RunStore = &*d.store;
    let one = created(store, "one");
    created(store, "two");
    store.finish_run(&rid("two"), 1, RunStatus::Ready, &[], None, 3_000).unwrap();
    let owner = cairn_core::ids::Owner { pid: 123, start_time: 456 };
    store.claim_run(&rid("one"), one.revision, Some(&owner), 4_000).unwrap();
    let open = store.open_runs().unwrap();
    assert_eq!(open.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>(), ["one"]);
    assert_eq!(open[0].owner, Some(owner));
}

fn kernel_jobs_are_saved_updated_and_listed_in_order(k: Kind) {
    let Some(d) = db(k) else { return };
    let store: &dyn RunStore = &*d.store;
    let mut job = KernelJob {
        job_id: "job_1".into(),
        session: "s1".into(),
        code: "print(1)".into(),
        status: KernelJobStatus::Queued,
        outputs: vec![],
        execution_count: None,
        error: None,
        submitted_at: 1,
        started_at: None,
        finished_at: None,
        duration_ms: None,
    };
    store.save_kernel_job(&job).unwrap();
    store.save_kernel_job(&KernelJob { job_id: "job_2".into(), ..job.clone() }).unwrap();
    job.status = KernelJobStatus::Ok;
    job.outputs = vec![json!({"output_type": "stream", "name": "stdout", "text": "1\n"})];
    job.execution_count = Some(1);
    job.finished_at = Some(5);
    store.save_kernel_job(&job).unwrap();
    assert_eq!(store.kernel_job("job_1").unwrap(), Some(job));
    assert_eq!(store.kernel_jobs().unwrap().iter().map(|j| j.job_id.as_str()).collect::<Vec<_>>(), ["job_1", "job_2"]);
    assert_eq!(store.kernel_job("missing").unwrap(), None);
}

fn artifact(name: &str, path: &str, sha: &str) -> Artifact {
    Artifact { name: name.into(), path: path.into(), bytes: 3, sha256: sha.into(), link: None }
}

/// Artifacts are written with the completion, under its token, and copied (never recomputed)
/// into a replay child with the run that produced the bytes; the database refuses to change one.
fn artifacts_are_recorded_with_the_completion_copied_on_reuse_and_never_changed(k: Kind) {
    let Some(d) = db(k) else { return };
    created(&*d.store, "r1");
    d.store.begin_attempt(&begin("r1", "a", "tok1", 1, AttemptStart::First)).unwrap();
    let files = vec![artifact("report", "steps/a/report.html", "aa"), artifact("plots", "steps/a/plots/x.png", "bb")];
    // A stale token writes neither the step nor its artifacts.
    let stale = FinishAttempt { artifacts: files.clone(), ..finish("r1", "a", "other", 1, Outcome::Completed) };
    assert!(matches!(d.store.complete_attempt(&stale), Err(StoreError::StaleToken { .. })));
    assert!(d.store.artifacts(&rid("r1")).unwrap().is_empty());
    let done = FinishAttempt { artifacts: files, ..finish("r1", "a", "tok1", 1, Outcome::Completed) };
    d.store.complete_attempt(&done).unwrap();
    let recorded = d.store.artifacts(&rid("r1")).unwrap();
    let paths: Vec<(&str, &str, u32)> =
        recorded.iter().map(|a| (a.artifact.path.as_str(), a.step_id.as_str(), a.attempt)).collect();
    assert_eq!(paths, [("steps/a/plots/x.png", "a", 1), ("steps/a/report.html", "a", 1)]);
    assert!(recorded.iter().all(|a| a.reused_from.is_none() && a.recorded_at == 4_000));

    // A replay child of r1, and a grandchild of that child: both name r1 as the producer.
    for (child, source) in [("r2", "r1"), ("r3", "r2")] {
        d.store.create_run(&NewRun { source_run_id: Some(rid(source)), ..new_run(child) }).unwrap();
        let reused = vec![step(&*d.store, source, "a")];
        assert_eq!(d.store.copy_reused_steps(&rid(child), &rid(source), &reused, 5_000).unwrap(), 1);
        assert_eq!(
            d.store.copy_reused_steps(&rid(child), &rid(source), &reused, 6_000).unwrap(),
            0,
            "never copied twice"
        );
        let copies = d.store.artifacts(&rid(child)).unwrap();
        assert_eq!(copies.len(), 2, "{copies:?}");
        assert!(copies.iter().all(|a| a.reused_from.as_deref() == Some("r1") && a.attempt == 1), "{copies:?}");
    }
    let traced = d.store.artifacts_with_sha256("aa").unwrap();
    let runs: Vec<&str> = traced.iter().map(|a| a.run_id.as_str()).collect();
    assert_eq!(runs, ["r1", "r2", "r3"]);
    assert!(d.store.artifacts_with_sha256("cc").unwrap().is_empty());

    for sql in ["UPDATE artifacts SET sha256 = 'x'", "DELETE FROM artifacts"] {
        let err = d.raw_execute(sql).unwrap_err();
        assert!(err.contains("artifacts are append-only"), "{sql}: {err}");
    }
}

cairn_store::on_both!(
    create_run_returns_created_then_existing,
    runs_filter_and_replays_are_found,
    a_run_of_an_unregistered_workflow_is_refused_by_the_foreign_key,
    begin_attempt_first_twice_is_step_exists,
    begin_attempt_outside_an_open_run_is_refused_and_writes_nothing,
    complete_attempt_with_a_wrong_token_is_stale_and_changes_nothing,
    record_process_is_fenced_by_the_token,
    a_launch_record_is_kept_before_and_after_its_identity_and_adopted_only_with_the_token,
    retry_is_conditional_on_the_previous_token,
    commit_steps_completes_and_begins_in_one_transaction_or_writes_nothing,
    resume_interrupted_is_conditional_on_the_previous_token,
    fail_attempt_fails_the_step_and_the_run_in_one_go,
    a_failed_attempts_cause_is_recorded_with_its_end,
    finish_run_with_a_stale_revision_is_refused,
    claim_run_bumps_the_revision,
    events_are_ordered_and_append_only,
    workflow_without_a_version_is_the_highest_semver,
    a_runs_steps_are_paged_in_the_dags_order,
    registering_again_is_idempotent_and_other_content_conflicts,
    cancel_run_fails_running_steps_clears_their_tokens_and_is_terminal,
    open_runs_lists_non_terminal_runs_with_their_owner,
    kernel_jobs_are_saved_updated_and_listed_in_order,
    artifacts_are_recorded_with_the_completion_copied_on_reuse_and_never_changed,
    a_lease_taken_over_fences_its_old_holder,
    a_failed_take_leaves_the_lease_taken_before,
    a_daemon_that_stops_ends_its_leases,
);

// ---------------------------------------------------------------- leases

fn daemon(id: &str, host: &str, at: i64) -> DaemonRecord {
    DaemonRecord {
        id: id.into(),
        host: host.into(),
        pid: 100,
        start_time: 200,
        state_root: format!("/state/{id}"),
        started_at: at,
        heartbeat_at: at,
        stopped_at: None,
    }
}

/// A second store on the same database: another daemon, as on another host.
fn second(d: &Db) -> Box<dyn RunStore> {
    match &d.raw {
        Raw::Sqlite(_, path) => Box::new(open(path)),
        Raw::Postgres(schema) => Box::new(PostgresStore::connect(&schema.url).unwrap()),
    }
}

/// Daemons `dmn_a` (writing through `d`'s store) and `dmn_b` (through a second store on the same
/// database, returned with its record), and run `r` created leased to `dmn_a` until 5,000.
fn leased_to_a(d: &Db) -> (Box<dyn RunStore>, DaemonRecord, RunRecord) {
    let a: &dyn RunStore = &*d.store;
    let b = second(d);
    let (da, db_) = (daemon("dmn_a", "h1", 1_000), daemon("dmn_b", "h2", 1_000));
    a.register_daemon(&da).unwrap();
    b.register_daemon(&db_).unwrap();
    let lease = NewLease { daemon: "dmn_a".into(), until: 5_000, home_host: None };
    match a.create_run(&NewRun { lease: Some(lease), ..new_run("r") }).unwrap() {
        CreateRun::Created(run) => (b, db_, run),
        other => panic!("{other:?}"),
    }
}

/// Two passes of one daemon take over the same run: the first takes it, the second (which saw it
/// before) fails. The run is still driven under the first's lease: its driver claims it, and the
/// fence lets its writes through.
fn a_failed_take_leaves_the_lease_taken_before(k: Kind) {
    let Some(d) = db(k) else { return };
    let (b, db_, _) = leased_to_a(&d);
    let seen = b.open_leases("dmn_b").unwrap().remove(0);
    let rev = seen.run.revision;
    assert_eq!(b.take_lease(&rid("r"), &db_, 1, rev, 20_000, 7_000).unwrap().epoch, 2);
    // The second pass, with what it saw before the first took the run.
    assert!(matches!(b.take_lease(&rid("r"), &db_, 1, rev, 20_000, 7_001), Err(StoreError::StaleRevision { .. })));
    assert_eq!(b.claim_run(&rid("r"), rev + 1, None, 7_100).unwrap(), rev + 2, "its driver claims it");
    b.begin_attempt(&begin("r", "a", "tok-1", 1, AttemptStart::First)).unwrap();
    assert_eq!(b.steps(&rid("r")).unwrap().len(), 1);
}

/// A run leased to daemon `a` (through store `a`), taken over by daemon `b` (through store `b`)
/// once the lease expired: a new epoch, a `run.leased` event, and from then on every write of the
/// run through `a` is refused inside its transaction and changes nothing; `a`'s heartbeat no
/// longer renews it, and its refused write is recorded.
fn a_lease_taken_over_fences_its_old_holder(k: Kind) {
    let Some(d) = db(k) else { return };
    let a: &dyn RunStore = &*d.store;
    let (b, db_, run) = leased_to_a(&d);
    a.begin_attempt(&begin("r", "a", "tok-1", 1, AttemptStart::First)).unwrap();
    let held = a.heartbeat("dmn_a", 2_500, 6_000).unwrap();
    assert_eq!(held, vec![(rid("r"), Lease { daemon: "dmn_a".into(), epoch: 1 })]);

    assert!(a.open_leases("dmn_a").unwrap().is_empty(), "a daemon's own leases are not listed to it");
    let open = b.open_leases("dmn_b").unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].lease, Some(Lease { daemon: "dmn_a".into(), epoch: 1 }));
    assert_eq!((open[0].expires_at, open[0].holder.as_ref().map(|h| h.host.as_str())), (Some(6_000), Some("h1")));
    assert_eq!(open[0].run.run_id, run.run_id);

    // Taken with a stale epoch or a stale revision (the run claimed since it was seen): refused;
    // with the current ones: a new epoch and a new revision.
    let rev = open[0].run.revision;
    assert!(matches!(b.take_lease(&rid("r"), &db_, 0, rev, 20_000, 7_000), Err(StoreError::StaleRevision { .. })));
    assert!(matches!(b.take_lease(&rid("r"), &db_, 1, rev - 1, 20_000, 7_000), Err(StoreError::StaleRevision { .. })));
    let taken = b.take_lease(&rid("r"), &db_, 1, rev, 20_000, 7_000).unwrap();
    assert_eq!(taken, Lease { daemon: "dmn_b".into(), epoch: 2 });
    assert_eq!(b.run(&rid("r")).unwrap().unwrap().revision, rev + 1);
    // A process holding no lease cannot claim the run while b's lease is current (it would
    // drive it beside b); b, holding it, can.
    let third = second(&d);
    let err = third.claim_run(&rid("r"), rev + 1, None, 7_500).unwrap_err();
    assert!(matches!(&err, StoreError::RunLeased { daemon, until: 20_000, .. } if daemon == "dmn_b"), "{err:?}");
    assert!(err.to_string().contains("dmn_b"), "{err}");
    // Once the lease expired, an explicit resume may claim it.
    assert_eq!(third.claim_run(&rid("r"), rev + 1, None, 20_001).unwrap(), rev + 2);
    let leased = events_of_kind(&*b, "r", "run.leased");
    assert_eq!(leased.len(), 1);
    assert_eq!(leased[0].event.data()["previous"], "dmn_a");

    // The old holder's writes: refused, nothing written.
    let before = (b.steps(&rid("r")).unwrap(), b.events(&rid("r"), 0).unwrap());
    let err = a.complete_attempt(&finish("r", "a", "tok-1", 1, Outcome::Completed)).unwrap_err();
    assert!(matches!(&err, StoreError::LeaseLost { daemon, epoch: 1, .. } if daemon == "dmn_a"), "{err:?}");
    assert!(err.to_string().contains("dmn_b"), "{err}");
    let err = a.commit_steps(&[], &[begin("r", "b", "tok-2", 1, AttemptStart::First)]).unwrap_err();
    assert!(matches!(err, StoreError::LeaseLost { .. }), "{err:?}");
    assert!(matches!(
        a.finish_run(&rid("r"), 1, RunStatus::Ready, &[], None, 8_000),
        Err(StoreError::LeaseLost { .. })
    ));
    assert_eq!((b.steps(&rid("r")).unwrap(), b.events(&rid("r"), 0).unwrap()), before);
    // Its heartbeat no longer renews the run; the new holder's does.
    assert!(a.heartbeat("dmn_a", 8_000, 23_000).unwrap().is_empty());
    assert_eq!(b.heartbeat("dmn_b", 8_000, 23_000).unwrap().len(), 1);
    // The refusal is recorded; the new holder writes.
    a.record_stale_lease(&rid("r"), &Lease { daemon: "dmn_a".into(), epoch: 1 }, 8_100).unwrap();
    assert_eq!(events_of_kind(&*b, "r", "run.stale_lease_write_rejected").len(), 1);
    b.complete_attempt(&finish("r", "a", "tok-1", 1, Outcome::Completed)).unwrap();
    assert_eq!(step(&*b, "r", "a").status, StepStatus::Completed);
}

/// PostgreSQL: a claim does not wait on a run whose row another transaction holds (its driver
/// writing it, another daemon claiming it): `FOR UPDATE SKIP LOCKED` skips it at once with
/// `RunBusy`, nothing written; once the row is free the claim takes it.
#[test]
fn a_claim_skips_a_run_another_transaction_holds() {
    let Some(d) = db(Kind::Postgres) else { return };
    let Raw::Postgres(schema) = &d.raw else { unreachable!("a PostgreSQL database") };
    let (a, b) = (&*d.store, second(&d));
    let (da, db_) = (daemon("dmn_a", "h1", 1_000), daemon("dmn_b", "h2", 1_000));
    a.register_daemon(&da).unwrap();
    b.register_daemon(&db_).unwrap();
    let lease = NewLease { daemon: "dmn_a".into(), until: 5_000, home_host: None };
    a.create_run(&NewRun { lease: Some(lease), ..new_run("r") }).unwrap();

    let mut holder = schema.client();
    let mut tx = holder.transaction().unwrap();
    tx.query("SELECT 1 FROM workflow_executions WHERE run_id = 'r' FOR UPDATE", &[]).unwrap();
    let asked = std::time::Instant::now();
    let err = b.take_lease(&rid("r"), &db_, 1, 1, 20_000, 7_000).unwrap_err();
    assert!(matches!(&err, StoreError::RunBusy { run_id } if run_id == "r"), "{err:?}");
    assert!(asked.elapsed() < std::time::Duration::from_secs(5), "the claim waited for the lock");
    assert!(err.to_string().contains("tried again"), "{err}");
    assert!(matches!(b.take_lease(&rid("nope"), &db_, 1, 1, 20_000, 7_000), Err(StoreError::RunNotFound(_))));
    tx.rollback().unwrap();
    assert!(events_of_kind(&*b, "r", "run.leased").is_empty(), "a skipped claim writes nothing");
    assert_eq!(b.open_leases("dmn_b").unwrap()[0].lease, Some(Lease { daemon: "dmn_a".into(), epoch: 1 }));

    assert_eq!(b.take_lease(&rid("r"), &db_, 1, 1, 20_000, 7_000).unwrap(), Lease { daemon: "dmn_b".into(), epoch: 2 });
}

/// Daemons and their leases: the live ones are listed with what they hold; one that stops ends
/// its leases at once (no one need wait for them), and its runs are listed with it as holder.
fn a_daemon_that_stops_ends_its_leases(k: Kind) {
    let Some(d) = db(k) else { return };
    let s: &dyn RunStore = &*d.store;
    s.register_daemon(&daemon("dmn_a", "h1", 1_000)).unwrap();
    s.register_daemon(&daemon("dmn_b", "h1", 1_500)).unwrap();
    let lease = |until| Some(NewLease { daemon: "dmn_a".into(), until, home_host: Some("h1".into()) });
    for id in ["r1", "r2"] {
        s.create_run(&NewRun { lease: lease(30_000), ..new_run(id) }).unwrap();
    }
    s.finish_run(&rid("r2"), 1, RunStatus::Ready, &[], None, 2_000).unwrap();
    let live: Vec<String> = s.live_daemons(0).unwrap().into_iter().map(|d| d.id).collect();
    assert_eq!(live, ["dmn_a", "dmn_b"]);
    assert_eq!(s.leased_runs("dmn_a").unwrap(), ["r1"], "open runs only");
    assert!(s.live_daemons(1_200).unwrap().iter().all(|d| d.id != "dmn_a"), "a stale heartbeat is not live");

    s.stop_daemon("dmn_a", 3_000).unwrap();
    assert_eq!(s.live_daemons(0).unwrap().len(), 1);
    let open = s.open_leases("dmn_b").unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].expires_at, Some(3_000), "its lease ended when it stopped");
    assert_eq!(open[0].holder.as_ref().and_then(|h| h.stopped_at), Some(3_000));
    assert_eq!(open[0].home_host.as_deref(), Some("h1"));
}

fn events_of_kind(store: &dyn RunStore, run_id: &str, kind: &str) -> Vec<EventRecord> {
    store.events(&rid(run_id), 0).unwrap().into_iter().filter(|e| e.event.kind() == kind).collect()
}
