//! `cairn doctor` and `cairn backup`: a clean state root passes; damage made for real (a byte
//! flipped in an artifact, an artifact deleted, a folder without a run, an event row deleted
//! behind the triggers, a page of the database overwritten) is each reported, and the doctor
//! changes nothing; a backup taken while the daemon runs a run, restored elsewhere, gives the same
//! answers; a PostgreSQL registry is checked where it can be and refused a backup, saying how.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::evidence::{evidence_workflow, input, render_files, sha256_file};
use crate::support::*;

/// A finished evidence run (the daemon stopped after it, so nothing writes the state root).
fn finished_run(c: &Cairn) -> (String, PathBuf) {
    evidence_workflow(c);
    let run = c.run("evidence", &input(c, render_files(4096)), &[]).expect(0).json;
    assert_eq!(run["status"], "READY", "{run:#}");
    c.stop_daemon();
    (str_of(&run["run_id"]).to_string(), PathBuf::from(str_of(&run["run_dir"])))
}

/// The SHA-256 of every file under `dir` (symlinks by their target's text), by path; but SQLite's
/// own sidecar files of the open database (`-wal`, `-shm`), which its last connection removes.
fn hashes(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let ft = e.file_type().unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            if ft.is_dir() {
                stack.push(e.path());
            } else if name.ends_with("-wal") || name.ends_with("-shm") {
                continue;
            } else if ft.is_symlink() {
                out.insert(e.path(), std::fs::read_link(e.path()).unwrap().display().to_string());
            } else {
                out.insert(e.path(), sha256_file(&e.path()));
            }
        }
    }
    out
}

/// `cairn doctor --json`, expecting `code`.
#[track_caller]
fn doctor(c: &Cairn, code: i32) -> Value {
    let d = c.json(&["doctor"]).expect(code).json;
    assert_eq!(d["healthy"], code == 0, "{d:#}");
    d
}

fn check<'a>(d: &'a Value, name: &str) -> &'a Value {
    d["checks"].as_array().unwrap().iter().find(|c| c["check"] == name).unwrap_or_else(|| panic!("no {name}: {d:#}"))
}

fn findings<'a>(d: &'a Value, name: &str) -> Vec<&'a Value> {
    d["findings"].as_array().unwrap().iter().filter(|f| f["check"] == name).collect()
}

/// `sqlite3 DB SQL` (writable), or `None` where the sqlite3 CLI is missing outside CI.
fn sqlite(db: &Path, sql: &str) -> Option<String> {
    let out = match Command::new("sqlite3").arg(db).arg(sql).output() {
        Ok(out) => out,
        Err(e) if ci() => panic!("sqlite3 is required in CI: {e}"),
        Err(_) => {
            eprintln!("SKIPPED: sqlite3 is not installed");
            return None;
        }
    };
    assert!(out.status.success(), "sqlite3 {sql}: {}", String::from_utf8_lossy(&out.stderr));
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[test]
fn a_clean_state_root_passes_every_check() {
    let c = Cairn::new();
    let (run_id, _) = finished_run(&c);
    let d = doctor(&c, 0);
    assert_eq!(d["findings"], json!([]), "{d:#}");
    let names: Vec<&str> = d["checks"].as_array().unwrap().iter().map(|c| str_of(&c["check"])).collect();
    assert_eq!(names, ["database", "event_log", "artifacts", "run_dirs"]);
    for c in d["checks"].as_array().unwrap() {
        assert_eq!(c["status"], "passed", "{d:#}");
    }
    // The run's six files were hashed again; its folder belongs to it.
    assert_eq!(check(&d, "artifacts")["examined"], 6, "{d:#}");
    assert_eq!(check(&d, "run_dirs")["examined"], 1, "{d:#}");
    assert!(str_of(&check(&d, "event_log")["summary"]).contains("without a hole"), "{d:#}");
    let human = c.raw(&["doctor"]).expect(0);
    assert!(human.stdout.contains("no findings"), "{}", human.stdout);
    assert!(!run_id.is_empty());
}

/// Each kind of damage is its own finding, naming the thing; the doctor writes nothing.
#[test]
fn damaged_artifacts_a_stray_folder_and_a_deleted_event_are_each_found_and_nothing_is_changed() {
    let c = Cairn::new();
    let (run_id, run_dir) = finished_run(&c);
    let db = c.home().join("cairn.db");

    // A byte flipped, a file deleted, a folder no run owns.
    let flipped = run_dir.join("steps/render/data.bin");
    let mut bytes = std::fs::read(&flipped).unwrap();
    bytes[100] ^= 0xff;
    std::fs::write(&flipped, bytes).unwrap();
    let deleted = run_dir.join("steps/render/plots/latency.png");
    std::fs::remove_file(&deleted).unwrap();
    let stray = c.home().join("runs").join("run_nobody_owns_this");
    std::fs::create_dir_all(stray.join("steps")).unwrap();

    // An event deleted from the middle of the log, past the trigger that refuses it.
    let Some(seq) = sqlite(
        &db,
        &format!("SELECT seq FROM events WHERE run_id = '{run_id}' AND kind = 'step.started' ORDER BY seq LIMIT 1"),
    ) else {
        return;
    };
    let trigger = sqlite(&db, "SELECT sql FROM sqlite_master WHERE name = 'events_no_delete'").unwrap();
    sqlite(&db, &format!("DROP TRIGGER events_no_delete; DELETE FROM events WHERE seq = {seq}; {trigger};")).unwrap();

    sqlite(&db, "PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
    let before = hashes(&c.home());
    let d = doctor(&c, 1);
    assert_eq!(hashes(&c.home()), before, "cairn doctor changed the state root");

    assert_eq!(check(&d, "database")["status"], "passed", "{d:#}");
    let arts = findings(&d, "artifacts");
    assert_eq!(arts.len(), 2, "{d:#}");
    let at = |p: &Path| arts.iter().find(|f| f["path"] == p.display().to_string()).copied();
    let changed = at(&flipped).unwrap_or_else(|| panic!("no finding for {}: {d:#}", flipped.display()));
    assert!(str_of(&changed["message"]).contains("no longer holds its recorded bytes"), "{changed}");
    assert_eq!(changed["run_id"], run_id.as_str());
    assert_eq!(changed["severity"], "error");
    let missing = at(&deleted).unwrap_or_else(|| panic!("no finding for {}: {d:#}", deleted.display()));
    assert!(str_of(&missing["message"]).contains("is missing"), "{missing}");

    let dirs = findings(&d, "run_dirs");
    assert_eq!(dirs.len(), 1, "{d:#}");
    assert_eq!(dirs[0]["path"], stray.display().to_string());
    assert_eq!(dirs[0]["severity"], "warning");
    assert!(stray.is_dir(), "the doctor removed a folder");

    let events = findings(&d, "event_log");
    assert_eq!(events.len(), 1, "{d:#}");
    assert!(str_of(&events[0]["message"]).starts_with(&format!("event {seq} is missing")), "{d:#}");
    assert_eq!(events[0]["run_id"], run_id.as_str(), "{d:#}");
    assert_eq!(check(&d, "event_log")["status"], "failed");

    // A finished run whose run.finished is gone is named too.
    let fin =
        sqlite(&db, &format!("SELECT seq FROM events WHERE run_id = '{run_id}' AND kind = 'run.finished'")).unwrap();
    sqlite(&db, &format!("DROP TRIGGER events_no_delete; DELETE FROM events WHERE seq = {fin}; {trigger};")).unwrap();
    let d = doctor(&c, 1);
    let events = findings(&d, "event_log");
    assert!(
        events.iter().any(|f| str_of(&f["message"]).contains("READY but its `run.finished` event is missing")),
        "{d:#}"
    );
    let human = c.raw(&["doctor"]).expect(1);
    assert!(human.stdout.contains("FAIL") && human.stdout.contains("finding(s)"), "{}", human.stdout);
}

/// A page of the database overwritten: SQLite's integrity check fails, and the doctor says so.
#[test]
fn a_damaged_database_page_fails_the_integrity_check() {
    let c = Cairn::new();
    finished_run(&c);
    let db = c.home().join("cairn.db");
    // Everything in the database file itself, so the page overwritten there is the one read.
    let Some(_) = sqlite(&db, "PRAGMA wal_checkpoint(TRUNCATE)") else { return };
    // The root page of a table the doctor does not read (the session kernel's jobs): its page
    // type byte made one no b-tree page has.
    let Some(root) = sqlite(&db, "SELECT rootpage FROM sqlite_master WHERE name = 'kernel_jobs'") else { return };
    let size: u64 = sqlite(&db, "PRAGMA page_size").unwrap().parse().unwrap();
    let root: u64 = root.parse().unwrap();
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
        f.seek(SeekFrom::Start((root - 1) * size)).unwrap();
        f.write_all(&[0x6b; 64]).unwrap();
        f.sync_all().unwrap();
    }
    let before = sha256_file(&db);
    let d = doctor(&c, 1);
    assert_eq!(sha256_file(&db), before, "cairn doctor changed the database");
    assert_eq!(check(&d, "database")["status"], "failed", "{d:#}");
    let found = findings(&d, "database");
    assert!(!found.is_empty(), "{d:#}");
    assert!(str_of(&found[0]["message"]).contains("fails its integrity check"), "{d:#}");
    assert_eq!(found[0]["path"], db.display().to_string());
    // The rest still ran.
    assert_eq!(check(&d, "artifacts")["status"], "passed", "{d:#}");
}

/// What a person asks of a state root: its runs, each run whole, its workflows.
fn answers(home: &Path, runs: &[&str]) -> Value {
    let ask = |args: &[&str]| -> Value {
        let out = Command::new(Cairn::bin())
            .env("CAIRN_HOME", home)
            .env_remove("XDG_STATE_HOME")
            .args(args)
            .arg("--json")
            .output()
            .unwrap();
        parse_stdout(&String::from_utf8_lossy(&out.stdout), out.status.code().unwrap_or(-1), &args.join(" "))
    };
    let mut shown = serde_json::Map::new();
    for r in runs {
        let mut run = ask(&["show", r]);
        // An open run's lease is renewed by its daemon's heartbeat, and read against the clock:
        // who holds it is the answer, not until when.
        if let Some(lease) = run.get_mut("lease").and_then(Value::as_object_mut) {
            lease.remove("expires_at");
            lease.remove("expired");
            lease.remove("waits_for_host");
        }
        shown.insert(r.to_string(), run);
    }
    json!({"runs": ask(&["runs"]), "show": shown, "workflows": ask(&["workflow", "list"]), "plans": ask(&["plans"])})
}

/// A backup taken while the daemon runs a run: the copy, restored elsewhere, answers as the state
/// root did when it was taken; the in-flight run is there as far as it had come. A backup never
/// writes over anything and is never made inside the state root.
#[test]
fn a_backup_taken_while_the_daemon_runs_a_run_gives_the_same_answers_restored() {
    let c = Cairn::new();
    evidence_workflow(&c);
    let done = c.run("evidence", &input(&c, render_files(4096)), &[]).expect(0).json;
    let done = str_of(&done["run_id"]).to_string();
    chain_workflow(&c, "chain");
    let chain = chain_input(&c, json!({"a": ["ok"], "b": ["wait"], "c": ["ok"]}));
    let mut runner = c.spawn(&c.run_args("chain", &chain, &["--run-id", "inflight", "--json"]));
    wait_for_tool(&c.path("log"), "b", 1);

    // b waits for its release: nothing of the run changes while the backup is taken.
    let before = answers(&c.home(), &[&done, "inflight"]);
    let dest = c.path("backup");
    let b = c.json(&["backup", dest.to_str().unwrap()]).expect(0).json;
    assert_eq!(b["path"], dest.canonicalize().unwrap().display().to_string(), "{b:#}");
    let parts: Vec<&str> = b["copied"].as_array().unwrap().iter().map(|p| str_of(&p["path"])).collect();
    assert!(parts.contains(&"registry"), "{b:#}");
    assert!(dest.join("cairn.db").is_file() && dest.join("registry").is_dir(), "{b:#}");
    // Nothing half-written is left beside it.
    let beside: Vec<String> = std::fs::read_dir(c.work.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!beside.iter().any(|n| n.contains(".partial-")), "{beside:?}");

    // The doctor runs beside the daemon too, and finds the in-flight run whole.
    let d = doctor(&c, 0);
    assert_eq!(check(&d, "run_dirs")["examined"], 2, "{d:#}");

    // The run goes on in the daemon, unaffected.
    std::fs::write(c.path("release"), "").unwrap();
    c.wait_for_status("inflight", "READY", Duration::from_secs(30));
    let _ = runner.wait();

    // Restored elsewhere: the same answers the state root gave when the backup was taken.
    let restored = c.path("restored");
    copy_dir(&dest, &restored);
    let after = answers(&restored, &[&done, "inflight"]);
    assert_eq!(after, before, "the restored backup answers otherwise");
    assert_eq!(after["show"]["inflight"]["status"], "RUNNING");
    assert_eq!(step(&after["show"]["inflight"], "b")["status"], "RUNNING", "{after:#}");
    assert!(after["show"]["inflight"]["lease"]["daemon"].is_string(), "{after:#}");
    let checked = Command::new(Cairn::bin()).env("CAIRN_HOME", &restored).args(["doctor", "--json"]).output().unwrap();
    let checked = parse_stdout(&String::from_utf8_lossy(&checked.stdout), 0, "doctor of the restored copy");
    assert_eq!(checked["healthy"], true, "{checked:#}");

    // Never over anything, never inside the state root.
    let again = c.json(&["backup", dest.to_str().unwrap()]).expect(4);
    assert!(
        again.stderr.contains(&dest.display().to_string()) && again.stderr.contains("already exists"),
        "{}",
        again.stderr
    );
    let inside = c.home().join("backup-inside");
    let refused = c.json(&["backup", inside.to_str().unwrap()]).expect(2);
    assert!(refused.stderr.contains("inside the state root"), "{}", refused.stderr);
    assert!(!inside.exists());
    c.stop_daemon();
}

/// On PostgreSQL the integrity check is not applicable (said so), the event log and the files are
/// checked alike, and a backup is refused naming pg_dump.
#[test]
fn on_postgresql_doctor_checks_what_applies_and_backup_points_to_pg_dump() {
    let Some(c) = Cairn::on(cairn_store::testing::Kind::Postgres) else { return };
    evidence_workflow(&c);
    let run = c.run("evidence", &input(&c, render_files(4096)), &[]).expect(0).json;
    assert_eq!(run["status"], "READY", "{run:#}");
    let d = doctor(&c, 0);
    assert_eq!(check(&d, "database")["status"], "not_applicable", "{d:#}");
    assert!(str_of(&check(&d, "database")["summary"]).contains("answers"), "{d:#}");
    assert_eq!(check(&d, "event_log")["status"], "passed", "{d:#}");
    assert!(str_of(&check(&d, "event_log")["summary"]).contains("numbering not checked"), "{d:#}");
    assert_eq!(check(&d, "artifacts")["examined"], 6, "{d:#}");
    let dest = c.path("backup");
    let refused = c.json(&["backup", dest.to_str().unwrap()]).expect(2);
    assert!(refused.stderr.contains("pg_dump"), "{}", refused.stderr);
    assert!(!dest.exists());
    c.stop_daemon();
}
