//! The registry in PostgreSQL, through the binary: `cairn daemon start --database URL` records it
//! in the state root, every later command of that state root uses it (with or without a daemon),
//! another state root's daemon on the same database is refused while one serves it, and what a
//! state root cannot switch to is refused naming the registry it keeps. (The registry's behaviour
//! on PostgreSQL is tested in cairn-store and cairn-engine; the daemon's recovery after kill -9
//! in `daemon.rs`, on both registries; several daemons on one registry in `team.rs`.)

use std::os::unix::fs::PermissionsExt;

use cairn_store::testing::{Kind, TestSchema};
use serde_json::json;

use crate::support::*;

/// A state root on a fresh PostgreSQL schema, and that schema; `None` without a test server.
fn on_postgres() -> Option<Cairn> {
    Cairn::on(Kind::Postgres)
}

fn url(c: &Cairn) -> String {
    c.database().expect("a PostgreSQL registry").url.clone()
}

#[test]
fn the_state_root_records_its_postgresql_registry_and_every_command_uses_it() {
    let Some(c) = on_postgres() else { return };
    let file = c.home().join("database");
    assert_eq!(std::fs::read_to_string(&file).unwrap().trim(), url(&c));
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600, "it may hold a password");
    assert!(!c.home().join("cairn.db").exists(), "a PostgreSQL state root has no SQLite registry");

    chain_workflow(&c, "chain");
    let input = chain_input(&c, json!({"a": ["ok"], "b": ["ok"], "c": ["ok"]}));
    let run = c.run("chain", &input, &["--run-id", "P1"]).expect(0).json;
    assert_eq!(run["status"], "READY", "{run:#}");
    let status = c.json(&["daemon", "status"]).expect(0).json;
    assert_eq!(status["running"], true, "{status}");
    assert!(status["registry"].as_str().unwrap().starts_with("postgres://"), "{status}");
    c.stop_daemon();

    // Without a daemon, a command reads the same registry.
    let runs = c.runs();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["run_id"], "P1");
    let shown = c.show("P1");
    assert_eq!(step(&shown, "c")["status"], "COMPLETED", "{shown:#}");
    // And the rows are PostgreSQL's.
    let mut client = c.database().unwrap().client();
    let steps: i64 = client.query_one("SELECT count(*) FROM tool_calls WHERE run_id = 'P1'", &[]).unwrap().get(0);
    assert_eq!(steps, 3);

    // A replay child, through the daemon the command starts itself.
    let child = c.json(&["replay", "P1", "--step", "b", "--run-id", "P2"]).expect(0).json;
    assert_eq!(child["status"], "READY", "{child:#}");
    assert_eq!(child["replay"]["reused"], json!(["a"]), "{child:#}");
    c.stop_daemon();
}

#[test]
fn what_a_state_root_cannot_switch_to_is_refused_and_changes_nothing() {
    let Some(c) = on_postgres() else { return };
    let recorded = std::fs::read_to_string(c.home().join("database")).unwrap();

    // Another database for a state root that records one.
    let Some(other) = TestSchema::create() else { return };
    let out = c.raw(&["daemon", "start", "--database", &other.url]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("keeps its registry in postgres://"), "{}", out.stderr);
    assert_eq!(std::fs::read_to_string(c.home().join("database")).unwrap(), recorded);

    // Not a PostgreSQL URL.
    let fresh = Cairn::new();
    let out = fresh.raw(&["daemon", "start", "--database", "mysql://u@db/cairn"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("takes a PostgreSQL URL"), "{}", out.stderr);
    assert!(!fresh.home().join("database").exists());

    // A server that is not there: said at once, with the password hidden, nothing recorded.
    let out = fresh.raw(&["daemon", "start", "--database", "postgres://cairn:s3cret@127.0.0.1:9/nowhere"]);
    assert_eq!(out.code, 5, "a server that cannot be reached is a fault of the environment: {out:?}");
    assert!(out.stderr.contains("cannot reach the PostgreSQL registry"), "{}", out.stderr);
    assert!(!out.stderr.contains("s3cret"), "the password must not be shown: {}", out.stderr);
    assert!(!fresh.home().join("database").exists());

    // A state root whose SQLite registry holds records keeps it.
    let sqlite = Cairn::new();
    chain_workflow(&sqlite, "chain");
    let out = sqlite.raw(&["daemon", "start", "--database", &url(&c)]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("which holds 1 workflows"), "{}", out.stderr);
    assert!(!sqlite.home().join("database").exists());

    // An in-process run could not be told alive from another host: refused, creating nothing.
    chain_workflow(&c, "chain");
    let input = chain_input(&c, json!({"a": ["ok"], "b": ["ok"], "c": ["ok"]}));
    let out = c.raw(&c.run_args("chain", &input, &["--in-process"]).iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("submit the run to the daemon"), "{}", out.stderr);
    assert!(c.runs().is_empty());
}
