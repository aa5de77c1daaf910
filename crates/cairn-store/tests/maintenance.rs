//! The registry's upkeep (`Maintenance`) on a real SQLite file and a real PostgreSQL database:
//! the facts `cairn doctor` judges, a hole made behind the triggers found, every artifact with
//! its run's directory, and SQLite's online copy (PostgreSQL's refused).

use std::path::PathBuf;

use cairn_core::artifact::Artifact;
use cairn_core::doctor::{Integrity, judge_event_log};
use cairn_core::ids::RunId;
use cairn_core::signature::StepSignature;
use cairn_core::status::{Outcome, RunStatus};
use cairn_core::store::*;
use cairn_core::workflow::parse_workflow;
use cairn_store::testing::{Kind, TestSchema};
use cairn_store::{PostgresStore, SqliteStore};
use serde_json::json;
use tempfile::TempDir;

const WORKFLOW: &str = "[workflow]\nname = \"wf\"\nversion = \"1.0.0\"\n\n[tools.t]\ncommand = [\"/bin/echo\"]\n\n[[steps]]\nid = \"a\"\ntool = \"t\"\n";

enum Raw {
    Sqlite(#[allow(dead_code, reason = "kept so the directory lives as long as the store")] TempDir, PathBuf),
    Postgres(TestSchema),
}

struct Db {
    store: Box<dyn RunStore>,
    raw: Raw,
}

impl Db {
    /// Deletes an event as someone with the database's password could: past its trigger.
    fn delete_event(&self, seq: i64) {
        match &self.raw {
            Raw::Sqlite(_, path) => {
                let conn = rusqlite::Connection::open(path).unwrap();
                let trigger: String = conn
                    .query_row("SELECT sql FROM sqlite_master WHERE name = 'events_no_delete'", [], |r| r.get(0))
                    .unwrap();
                conn.execute_batch(&format!(
                    "DROP TRIGGER events_no_delete; DELETE FROM events WHERE seq = {seq}; {trigger};"
                ))
                .unwrap();
            }
            Raw::Postgres(schema) => schema
                .client()
                .batch_execute(&format!(
                    "ALTER TABLE events DISABLE TRIGGER events_no_delete; DELETE FROM events WHERE seq = {seq}; \
                     ALTER TABLE events ENABLE TRIGGER events_no_delete;"
                ))
                .unwrap(),
        }
    }
}

fn db(kind: Kind) -> Option<Db> {
    let db = match kind {
        Kind::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("cairn.db");
            Db { store: Box::new(SqliteStore::open(&path).unwrap()), raw: Raw::Sqlite(dir, path) }
        }
        Kind::Postgres => {
            let schema = TestSchema::create()?;
            let store = PostgresStore::connect(&schema.url).unwrap_or_else(|e| panic!("connect: {e}"));
            Db { store: Box::new(store), raw: Raw::Postgres(schema) }
        }
    };
    let spec = parse_workflow(WORKFLOW, "workflow.toml").unwrap();
    let record = WorkflowRecord {
        name: "wf".into(),
        version: "1.0.0".into(),
        digest: "d1".into(),
        path: "/registry/d1".into(),
        spec,
        registered_at: 1_000,
    };
    db.store.register_workflow(&record).unwrap();
    Some(db)
}

/// A run `id` whose step `a` completed with one artifact, finished READY.
fn finished(store: &dyn RunStore, id: &str) {
    let new = NewRun {
        lease: None,
        run_id: RunId::lookup(id),
        workflow: "wf".into(),
        version: "1.0.0".into(),
        identity_hash: "identity".into(),
        input: json!({}),
        run_dir: format!("/runs/{id}"),
        source_run_id: None,
        replay: None,
        owner: None,
        thread_id: None,
        parallelism: 1,
        at: 2_000,
        act: None,
        admission: Default::default(),
    };
    store.create_run(&new).unwrap();
    let signature = StepSignature { tool: "t".into(), tool_digest: "td".into(), args_hash: "ah".into() };
    store
        .begin_attempt(&BeginAttempt {
            run_id: RunId::lookup(id),
            step_id: "a".into(),
            signature,
            args: json!({}),
            token: "tok".into(),
            attempt: 1,
            start: AttemptStart::First,
            at: 3_000,
        })
        .unwrap();
    let artifact =
        Artifact { name: "out".into(), path: "steps/a/out.txt".into(), bytes: 1, sha256: "aa".into(), link: None };
    store
        .complete_attempt(&FinishAttempt {
            run_id: RunId::lookup(id),
            step_id: "a".into(),
            token: "tok".into(),
            attempt: 1,
            outcome: Outcome::Completed,
            result: Some(json!({})),
            error: None,
            cause: None,
            log_tail: None,
            duration_us: 1,
            artifacts: vec![artifact],
            at: 4_000,
        })
        .unwrap();
    let run = store.run(&RunId::lookup(id)).unwrap().unwrap();
    store.finish_run(&RunId::lookup(id), run.revision, RunStatus::Ready, &[], None, 5_000).unwrap();
}

fn a_whole_registry_has_no_findings_and_a_deleted_event_is_found(k: Kind) {
    let Some(d) = db(k) else { return };
    finished(&*d.store, "r1");
    finished(&*d.store, "r2");
    match d.store.integrity().unwrap() {
        Integrity::Checked { problems, .. } => assert_eq!((k, problems), (Kind::Sqlite, Vec::<String>::new())),
        Integrity::NotApplicable { reached, .. } => {
            assert!(k == Kind::Postgres && reached.contains("version"), "{reached}")
        }
    }
    let facts = d.store.event_log_facts().unwrap();
    assert_eq!(facts.runs.len(), 2);
    assert!(facts.runs.iter().all(|r| r.first_kind.as_deref() == Some("run.created") && r.finished_events == 1));
    assert_eq!(facts.gaps.as_ref().map(Vec::len), (k == Kind::Sqlite).then_some(0));
    assert_eq!(judge_event_log(&facts), vec![]);

    // r1's completion, deleted behind the trigger.
    let completed = d
        .store
        .events(&RunId::lookup("r1"), 0)
        .unwrap()
        .into_iter()
        .find(|e| e.event.kind() == "step.completed")
        .unwrap();
    d.delete_event(completed.seq);
    let facts = d.store.event_log_facts().unwrap();
    assert_eq!(facts.completed_without_event, [("r1".to_string(), "a".to_string())]);
    match k {
        Kind::Sqlite => {
            let gaps = facts.gaps.clone().unwrap();
            assert_eq!(gaps.len(), 1, "{gaps:?}");
            assert_eq!((gaps[0].from, gaps[0].to), (completed.seq, completed.seq));
            assert_eq!(gaps[0].before_run.as_deref(), Some("r1"));
        }
        Kind::Postgres => assert_eq!(facts.gaps, None),
    }
    let found = judge_event_log(&facts);
    assert_eq!(found.len(), if k == Kind::Sqlite { 2 } else { 1 }, "{found:?}");
    assert!(found.iter().all(|f| f.run_id.as_deref() == Some("r1")), "{found:?}");

    // The last event of all, gone: a hole at the end of the numbering (SQLite remembers it).
    let last = d.store.events(&RunId::lookup("r2"), 0).unwrap().pop().unwrap();
    d.delete_event(last.seq);
    let facts = d.store.event_log_facts().unwrap();
    if k == Kind::Sqlite {
        let gaps = facts.gaps.unwrap();
        assert_eq!(gaps.last().map(|g| (g.from, g.to, g.after_run.clone())), Some((last.seq, last.seq, None)));
    }
}

fn every_artifact_is_listed_with_its_run_directory(k: Kind) {
    let Some(d) = db(k) else { return };
    finished(&*d.store, "r1");
    let files = d.store.recorded_files().unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!((files[0].run_dir.as_str(), files[0].target.as_deref()), ("/runs/r1", None));
    assert_eq!(files[0].record.artifact.path, "steps/a/out.txt");
    assert!(d.store.run_exists("r1").unwrap());
    assert!(!d.store.run_exists("nobody").unwrap());
}

fn a_backup_is_the_same_registry_and_never_overwrites_a_file(k: Kind) {
    let Some(d) = db(k) else { return };
    finished(&*d.store, "r1");
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("copy.db");
    if k == Kind::Postgres {
        let refused = d.store.backup_to(&dest).unwrap_err();
        assert!(refused.to_string().contains("pg_dump"), "{refused}");
        assert!(!dest.exists());
        return;
    }
    let bytes = d.store.backup_to(&dest).unwrap();
    assert_eq!(bytes, std::fs::metadata(&dest).unwrap().len());
    let copy = SqliteStore::open(&dest).unwrap();
    assert_eq!(copy.run(&RunId::lookup("r1")).unwrap(), d.store.run(&RunId::lookup("r1")).unwrap());
    assert_eq!(copy.events(&RunId::lookup("r1"), 0).unwrap(), d.store.events(&RunId::lookup("r1"), 0).unwrap());
    assert_eq!(copy.artifacts(&RunId::lookup("r1")).unwrap(), d.store.artifacts(&RunId::lookup("r1")).unwrap());
    drop(copy);
    let before = std::fs::read(&dest).unwrap();
    let again = d.store.backup_to(&dest).unwrap_err();
    assert!(again.to_string().contains(&dest.display().to_string()), "{again}");
    assert_eq!(std::fs::read(&dest).unwrap(), before, "a backup wrote over a file");
}

cairn_store::on_both!(
    a_whole_registry_has_no_findings_and_a_deleted_event_is_found,
    every_artifact_is_listed_with_its_run_directory,
    a_backup_is_the_same_registry_and_never_overwrites_a_file,
);
