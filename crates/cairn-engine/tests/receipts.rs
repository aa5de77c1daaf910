//! Receipts, end to end against a real SQLite registry: a forged, expired, replayed or
//! request-altered approval creates nothing (no run row, no reservation, no run_dir); a valid one
//! creates exactly one run, across a daemon restart and under concurrent consumption.

use cairn_engine::plan::Approving;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Barrier};

/// The state root's owner, who makes and approves every plan here.
static OWNER: std::sync::LazyLock<cairn_core::access::Caller> =
    std::sync::LazyLock::new(|| cairn_core::access::Caller::owner("cli"));

use cairn_core::event::RunEvent;
use cairn_core::ids::RunId;
use cairn_core::plan::{Approval, ApprovalChannel, Effect, Plan, Receipt, sign_receipt, verify_receipt};
use cairn_core::store::{RunRecord, StoreError};
use cairn_core::target::LOCAL as LOCAL_TARGET;
use cairn_engine::plan::{PlanRequest, RECEIPT_TTL_MS};
use cairn_engine::registry::LoadedWorkflow;
use cairn_engine::{Clock, Engine, EngineError, ErrorKind};
use cairn_store::testing::{Kind, TestDatabase};
use serde_json::json;
use tempfile::TempDir;

/// A fixed moment (2023-11-14), so expiry arithmetic is exact.
const T: i64 = 1_700_000_000_000;

/// A clock the test moves by hand; clones share the time.
#[derive(Clone)]
struct TestClock(Arc<AtomicI64>);

impl TestClock {
    fn set(&self, ms: i64) {
        self.0.store(ms, Ordering::SeqCst);
    }
}

impl Clock for TestClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

const WORKFLOW_TOML: &str = r#"
[workflow]
name = "rcpt"
version = "1.0.0"

[tools.t]
command = ["tools/t.sh"]

[[steps]]
id = "s"
tool = "t"
args = { x = "${input.x}" }
"#;

const TOOL_SH: &str = "#!/bin/sh\ncat >/dev/null\necho '{}'\n";

/// A state root, a registered one-step workflow and a parent directory for run_dirs, all in one
/// temporary directory (canonical, so run_dir's parent is reached without a symlink).
struct Fixture {
    _tmp: TempDir,
    root: PathBuf,
    runs_parent: PathBuf,
    clock: TestClock,
    db: TestDatabase,
}

impl Fixture {
    /// The fixture with its registry on `kind`.
    fn new(kind: Kind) -> Option<Fixture> {
        let db = kind.database()?;
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        let root = base.join("state");
        let runs_parent = base.join("out");
        std::fs::create_dir(&runs_parent).unwrap();
        let wf = base.join("wf");
        std::fs::create_dir_all(wf.join("tools")).unwrap();
        std::fs::write(wf.join("workflow.toml"), WORKFLOW_TOML).unwrap();
        std::fs::write(wf.join("tools/t.sh"), TOOL_SH).unwrap();
        std::fs::set_permissions(wf.join("tools/t.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let f = Fixture { _tmp: tmp, root, runs_parent, clock: TestClock(Arc::new(AtomicI64::new(T))), db };
        let e = f.engine();
        e.add_workflow(&OWNER, &wf).unwrap();
        Some(f)
    }

    /// A fresh engine over the fixture's state root (new connections to its registry, the shared
    /// clock).
    fn engine(&self) -> Engine {
        Engine::builder(&self.root).database(self.db.url()).clock(self.clock.clone()).open().unwrap()
    }

    fn run_dir(&self, name: &str) -> PathBuf {
        self.runs_parent.join(name)
    }

    fn key_path(&self) -> PathBuf {
        self.root.canonicalize().unwrap().join("auth").join("receipt.key")
    }
}

fn plan(e: &Engine, run_dir: &Path) -> Plan {
    e.make_plan(
        &OWNER,
        &PlanRequest {
            workflow: Some("rcpt".into()),
            input: json!({"x": 1}),
            target: LOCAL_TARGET.into(),
            run_dir: run_dir.to_path_buf(),
            name: None,
            replay: None,
        },
    )
    .unwrap()
}

fn approve(e: &Engine, p: &Plan) -> Receipt {
    let (approved, receipt) = e.approve_plan(&OWNER, &p.plan_name, &p.plan_id, &p.plan_checksum).unwrap();
    assert_eq!(&approved, p, "approval reloads the stored plan unchanged");
    receipt
}

/// A change made to a plan in memory after its receipt was minted.
type Alteration<'a> = Box<dyn Fn(&mut Plan) + 'a>;

type Consumed = Result<(RunRecord, LoadedWorkflow), EngineError>;

fn consume(e: &Engine, p: &Plan, r: &Receipt) -> Consumed {
    e.consume_receipt(p, r, Approving::by(&OWNER, ApprovalChannel::Cli))
}

/// The run a consumption created; panics (with the error) if it was refused.
fn accepted(out: Consumed) -> RunRecord {
    match out {
        Ok((run, _)) => run,
        Err(e) => panic!("the receipt should have been accepted, got: {e} ({e:?})"),
    }
}

/// The Conflict a consumption was refused with; panics if it created a run or failed otherwise.
fn refused(out: Consumed) -> EngineError {
    match out {
        Ok((run, _)) => panic!("the receipt should have been refused, but run {} was created", run.run_id),
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Conflict, "refused, but not as a conflict: {e} ({e:?})");
            e
        }
    }
}

fn runs(e: &Engine) -> Vec<RunRecord> {
    e.list_runs(&cairn_core::store::RunQuery::newest(1000)).unwrap().into_iter().map(|l| l.run).collect()
}

fn runs_of(e: &Engine, p: &Plan) -> Vec<RunRecord> {
    runs(e).into_iter().filter(|r| r.plan_id.as_deref() == Some(p.plan_id.as_str()) || r.run_dir == p.run_dir).collect()
}

/// Nothing exists for this plan's request: no run, no reservation, no run_dir.
fn assert_nothing_created(e: &Engine, p: &Plan) {
    assert!(runs_of(e, p).is_empty(), "a refused receipt created a run: {:?}", runs_of(e, p));
    assert_eq!(e.reservation(&p.target, &p.run_dir).unwrap(), None, "a refused receipt reserved {}", p.run_dir);
    assert!(std::fs::symlink_metadata(&p.run_dir).is_err(), "a refused receipt created {}", p.run_dir);
}

/// Exactly one run exists for this plan, it holds the reservation, and its run_dir was deployed.
fn assert_one_run(e: &Engine, p: &Plan) -> RunRecord {
    let found = runs_of(e, p);
    assert_eq!(found.len(), 1, "exactly one run for plan {}: {found:?}", p.plan_id);
    let run = found.into_iter().next().unwrap();
    assert_eq!(run.plan_id.as_deref(), Some(p.plan_id.as_str()));
    assert_eq!(e.reservation(&p.target, &p.run_dir).unwrap().as_deref(), Some(run.run_id.as_str()));
    let dir = Path::new(&p.run_dir);
    assert!(dir.is_dir(), "the run_dir was created");
    assert!(dir.join("input.json").is_file() && dir.join("workflow/tools/t.sh").is_file(), "effects applied");
    run
}

fn is_consumed_conflict(e: &EngineError) -> bool {
    matches!(e, EngineError::Store(StoreError::ReceiptConsumed(_)))
}

fn is_reserved_conflict(e: &EngineError) -> bool {
    matches!(e, EngineError::Store(StoreError::RunDirReserved { .. }))
}

fn a_forged_receipt_creates_nothing(k: Kind) {
    let Some(f) = Fixture::new(k) else { return };
    let e = f.engine();
    let p = plan(&e, &f.run_dir("r1"));
    let good = approve(&e, &p);

    let mut flipped = good.clone();
    let last = flipped.mac.pop().unwrap();
    flipped.mac.push(if last == '0' { '1' } else { '0' });

    let other_key = sign_receipt(b"a key this daemon never issued, 32+ bytes long", good.clone()).unwrap();

    let mut extended = good.clone();
    extended.expires_at += 3_600_000;

    let mut renamed = good.clone();
    renamed.receipt_id.push('x');

    let mut not_hex = good.clone();
    not_hex.mac = "zz".repeat(32);

    let mut empty = good.clone();
    empty.mac.clear();

    for (what, forged) in [
        ("flipped MAC", flipped),
        ("signed with another key", other_key),
        ("expiry extended after signing", extended),
        ("receipt id changed after signing", renamed),
        ("MAC not hex", not_hex),
        ("no MAC", empty),
    ] {
        let err = refused(consume(&e, &p, &forged));
        assert!(err.to_string().contains("MAC"), "{what}: refused for its MAC, got: {err}");
        assert_nothing_created(&e, &p);
    }
    assert!(runs(&e).is_empty());

    // None of the refusals consumed anything: the genuine receipt still works, once.
    accepted(consume(&e, &p, &good));
    assert_one_run(&e, &p);
}

fn a_receipt_from_a_rotated_key_is_refused(k: Kind) {
    let Some(f) = Fixture::new(k) else { return };
    let e = f.engine();
    let p = plan(&e, &f.run_dir("r1"));
    let r = approve(&e, &p);
    // Another daemon (another key file) never issued it.
    std::fs::remove_file(f.key_path()).unwrap();
    let err = refused(consume(&e, &p, &r));
    assert!(err.to_string().contains("MAC"), "{err}");
    assert_nothing_created(&e, &p);
    // A receipt from the new key works.
    let r2 = approve(&e, &p);
    accepted(consume(&e, &p, &r2));
    assert_one_run(&e, &p);
}

fn an_expired_receipt_creates_nothing(k: Kind) {
    let Some(f) = Fixture::new(k) else { return };
    let e = f.engine();
    let p = plan(&e, &f.run_dir("r1"));
    f.clock.set(T);
    let r = approve(&e, &p);
    assert_eq!(r.expires_at, T + RECEIPT_TTL_MS);
    assert_eq!(RECEIPT_TTL_MS, 60_000);

    for late in [T + 61_000, T + 60_001, T + 3_600_000] {
        f.clock.set(late);
        let err = refused(consume(&e, &p, &r));
        assert!(err.to_string().contains("expired"), "{err}");
        assert_nothing_created(&e, &p);
    }
    assert!(runs(&e).is_empty());

    // Within the minute it is accepted (the refusals above consumed nothing).
    f.clock.set(T + 59_000);
    let run = accepted(consume(&e, &p, &r));
    assert_eq!(assert_one_run(&e, &p).run_id, run.run_id);
}

fn a_replayed_receipt_creates_nothing(k: Kind) {
    let Some(f) = Fixture::new(k) else { return };
    let e = f.engine();
    let p = plan(&e, &f.run_dir("r1"));
    let r = approve(&e, &p);
    let run = accepted(consume(&e, &p, &r));
    assert_eq!(run.plan_id.as_deref(), Some(p.plan_id.as_str()));
    let events = e.events(&run.run_id, 0).unwrap();
    assert_eq!(events.first().map(|ev| ev.event.kind()), Some("run.created"));
    assert_eq!(events[0].event.data()["receipt_id"], r.receipt_id.as_str());
    // Who made and who approved the plan: the state root's owner, here.
    let owner = Some("owner".to_string());
    let approval = Some(Approval { channel: "cli".into(), at: run.created_at, by: owner.clone(), planned_by: owner });
    assert_eq!(e.show_run(&run.run_id).unwrap().approval, approval, "how and by whom it was approved is kept");
    assert_eq!(e.show_run(&run.run_id).unwrap().run.submitted_by.as_deref(), Some("owner"));
    let acts =
        e.audit(&cairn_core::access::ActQuery { object: Some(p.plan_name.clone()), limit: 10, ..Default::default() });
    let actions: Vec<String> = acts.unwrap().into_iter().map(|a| a.act.action).collect();
    assert_eq!(actions, ["plan.approved", "plan.made"], "the plan's acts, newest first");
    let before = std::fs::read_dir(&p.run_dir).unwrap().count();

    for _ in 0..3 {
        let err = refused(consume(&e, &p, &r));
        assert!(is_consumed_conflict(&err), "refused as consumed, got: {err} ({err:?})");
        assert!(err.to_string().contains("consumed"), "{err}");
    }
    assert_eq!(runs(&e).len(), 1, "exactly one run");
    assert_eq!(assert_one_run(&e, &p).run_id, run.run_id);
    assert_eq!(e.events(&run.run_id, 0).unwrap(), events, "the replays added no event");
    assert_eq!(e.show_run(&run.run_id).unwrap().approval, approval, "nor changed the approval");
    assert_eq!(std::fs::read_dir(&p.run_dir).unwrap().count(), before, "the replays wrote nothing");
    // Even within its lifetime: a consumed receipt is consumed even with time left.
    assert!(e.now_ms() < r.expires_at);
}

fn a_receipt_for_an_altered_request_creates_nothing(k: Kind) {
    let Some(f) = Fixture::new(k) else { return };
    let e = f.engine();
    let p = plan(&e, &f.run_dir("r1"));
    let r = approve(&e, &p);
    let elsewhere = f.run_dir("elsewhere").display().to_string();
    let evil = f.run_dir("evil").display().to_string();

    let alterations: Vec<(&str, Alteration)> = vec![
        ("run_dir", Box::new(|q: &mut Plan| q.run_dir = elsewhere.clone())),
        ("input", Box::new(|q: &mut Plan| q.input = json!({"x": 2}))),
        (
            "an added effect",
            Box::new(|q: &mut Plan| {
                q.effects.push(Effect::WriteFile {
                    path: "extra.txt".into(),
                    sha256: cairn_core::canonical::sha256_hex(b"x"),
                    content: "x".into(),
                })
            }),
        ),
        ("a removed effect", Box::new(|q: &mut Plan| q.effects.truncate(1))),
        ("a command's argv", Box::new(|q: &mut Plan| q.commands[0].argv = vec!["/bin/rm".into(), "-rf".into()])),
        ("the target", Box::new(|q: &mut Plan| q.target = "elsewhere".into())),
        ("the workflow digest", Box::new(|q: &mut Plan| q.workflow_digest = "0".repeat(64))),
        // The forger also recomputes the checksum: then the receipt names another checksum.
        (
            "run_dir, checksum recomputed",
            Box::new(|q: &mut Plan| {
                q.run_dir = evil.clone();
                q.plan_checksum = q.compute_checksum().unwrap();
            }),
        ),
        (
            "input, checksum recomputed",
            Box::new(|q: &mut Plan| {
                q.input = json!({"x": 3});
                q.plan_checksum = q.compute_checksum().unwrap();
            }),
        ),
    ];
    for (what, change) in &alterations {
        let mut q = p.clone();
        change(&mut q);
        assert_ne!(q, p);
        let err = refused(consume(&e, &q, &r));
        let text = err.to_string();
        assert!(text.contains("request") || text.contains("plan"), "{what}: refused for the request, got: {text}");
        assert_nothing_created(&e, &q);
        assert_nothing_created(&e, &p);
    }
    assert!(runs(&e).is_empty());
    assert!(!Path::new(&elsewhere).exists() && !Path::new(&evil).exists());

    // A valid receipt of one plan does not approve another plan.
    let other = plan(&e, &f.run_dir("r2"));
    let err = refused(consume(&e, &other, &r));
    assert!(err.to_string().contains("plan"), "{err}");
    assert_nothing_created(&e, &other);

    // The unchanged request is still approved by the (unconsumed) receipt.
    accepted(consume(&e, &p, &r));
    assert_one_run(&e, &p);
    assert_eq!(runs(&e).len(), 1);
}

fn a_receipt_survives_a_daemon_restart_and_is_consumed_once(k: Kind) {
    let Some(f) = Fixture::new(k) else { return };
    let first = f.engine();
    let p = plan(&first, &f.run_dir("r1"));
    let r = approve(&first, &p);
    drop(first);

    let second = f.engine();
    let loaded = second.load_plan(&p.plan_name).unwrap();
    assert_eq!(loaded, p);
    let run = accepted(consume(&second, &loaded, &r));
    assert_eq!(assert_one_run(&second, &p).run_id, run.run_id);
    drop(second);

    let third = f.engine();
    let err = refused(consume(&third, &p, &r));
    assert!(is_consumed_conflict(&err), "{err:?}");
    assert_eq!(runs(&third).len(), 1);
    // The plan executed: approving it again is refused too.
    let again = third.approve_plan(&OWNER, &p.plan_name, &p.plan_id, &p.plan_checksum);
    assert_eq!(again.map(|_| ()).unwrap_err().kind(), ErrorKind::Conflict);
}

fn a_receipt_never_consumed_expires_and_a_new_approval_works_once(k: Kind) {
    let Some(f) = Fixture::new(k) else { return };
    let first = f.engine();
    let p = plan(&first, &f.run_dir("r1"));
    f.clock.set(T);
    let stale = approve(&first, &p);
    drop(first); // the daemon dies between minting and consumption

    f.clock.set(T + 5 * 60_000);
    let e = f.engine();
    let err = refused(consume(&e, &p, &stale));
    assert!(err.to_string().contains("expired"), "{err}");
    assert_nothing_created(&e, &p);

    let fresh = approve(&e, &p);
    assert_ne!(fresh.receipt_id, stale.receipt_id);
    assert_ne!(fresh.nonce, stale.nonce);
    let run = accepted(consume(&e, &p, &fresh));
    assert_eq!(assert_one_run(&e, &p).run_id, run.run_id);
    let events = e.events(&run.run_id, 0).unwrap();
    let err = refused(consume(&e, &p, &fresh));
    assert!(is_consumed_conflict(&err), "{err:?}");
    let err = refused(consume(&e, &p, &stale));
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(runs(&e).len(), 1);
    assert_eq!(e.events(&run.run_id, 0).unwrap(), events);
}

fn two_receipts_for_one_plan_create_one_run(k: Kind) {
    let Some(f) = Fixture::new(k) else { return };
    let e = f.engine();
    let p = plan(&e, &f.run_dir("r1"));
    let r1 = approve(&e, &p);
    let r2 = approve(&e, &p);
    assert_ne!(r1.receipt_id, r2.receipt_id);

    // Whichever is consumed first wins; here the later one.
    let run = accepted(consume(&e, &p, &r2));
    let events = e.events(&run.run_id, 0).unwrap();
    let listing: Vec<_> = walk(Path::new(&p.run_dir));

    let err = refused(consume(&e, &p, &r1));
    assert!(is_reserved_conflict(&err), "refused by the run_dir reservation, got: {err} ({err:?})");
    assert_eq!(runs(&e).len(), 1);
    assert_eq!(assert_one_run(&e, &p).run_id, run.run_id);
    assert_eq!(e.events(&run.run_id, 0).unwrap(), events);
    assert_eq!(walk(Path::new(&p.run_dir)), listing, "the refused receipt touched nothing in run_dir");

    // The refused receipt was not consumed by its refusal either, but it can never win now.
    let err = refused(consume(&e, &p, &r1));
    assert!(is_reserved_conflict(&err), "{err:?}");
}

/// Every path under `dir` with its size, sorted.
fn walk(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            }
            out.push((entry.path(), meta.len()));
        }
    }
    out.sort();
    out
}

/// Exactly one outcome is a run, every other a Conflict; the store and the disk agree.
fn assert_one_winner(round: usize, outcomes: &[Result<RunId, EngineError>], e: &Engine, p: &Plan) {
    let won: Vec<&RunId> = outcomes.iter().filter_map(|o| o.as_ref().ok()).collect();
    assert_eq!(won.len(), 1, "round {round}: exactly one thread creates the run: {outcomes:?}");
    for err in outcomes.iter().filter_map(|o| o.as_ref().err()) {
        assert_eq!(err.kind(), ErrorKind::Conflict, "round {round}: refused as a conflict, got: {err} ({err:?})");
    }
    assert_eq!(runs(e).len(), 1, "round {round}");
    assert_eq!(&assert_one_run(e, p).run_id, won[0], "round {round}");
    let run = e.show_run(won[0]).unwrap().run;
    assert_eq!(
        e.events(&run.run_id, 0).unwrap().iter().filter(|ev| matches!(ev.event, RunEvent::RunCreated { .. })).count(),
        1
    );
}

/// Eight threads approve and consume the same plan at once through one shared engine.
///
/// The receipt key is created before the race (one approval, unconsumed): the first-use race of
/// the key file itself is `the_first_receipt_key_is_the_same_for_concurrent_callers`.
fn concurrent_approvals_and_consumptions_create_one_run(k: Kind) {
    const THREADS: usize = 8;
    for round in 0..20 {
        let Some(f) = Fixture::new(k) else { return };
        let e = Arc::new(f.engine());
        let p = plan(&e, &f.run_dir(&format!("r{round}")));
        e.receipt_key().unwrap();
        let barrier = Arc::new(Barrier::new(THREADS));
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                let (e, p, barrier) = (e.clone(), p.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    let (approved, receipt) = e.approve_plan(&OWNER, &p.plan_name, &p.plan_id, &p.plan_checksum)?;
                    e.consume_receipt(&approved, &receipt, Approving::by(&OWNER, ApprovalChannel::Cli))
                        .map(|(run, _)| run.run_id)
                })
            })
            .collect();
        let outcomes: Vec<Result<RunId, EngineError>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_one_winner(round, &outcomes, &e, &p);
    }
}

/// Eight receipts, all approved beforehand, consumed at once through eight engines (eight SQLite
/// connections to one database): the reservation, not a process-local lock, decides.
fn concurrent_consumptions_through_separate_connections_create_one_run(k: Kind) {
    const THREADS: usize = 8;
    for round in 0..10 {
        let Some(f) = Fixture::new(k) else { return };
        let first = f.engine();
        let p = plan(&first, &f.run_dir(&format!("r{round}")));
        let receipts: Vec<Receipt> = (0..THREADS).map(|_| approve(&first, &p)).collect();
        let barrier = Arc::new(Barrier::new(THREADS));
        let handles: Vec<_> = receipts
            .into_iter()
            .map(|r| {
                let (e, p, barrier) = (f.engine(), p.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    e.consume_receipt(&p, &r, Approving::by(&OWNER, ApprovalChannel::Cli)).map(|(run, _)| run.run_id)
                })
            })
            .collect();
        let outcomes: Vec<Result<RunId, EngineError>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        for err in outcomes.iter().filter_map(|o| o.as_ref().err()) {
            assert!(is_reserved_conflict(err), "round {round}: refused by the reservation, got: {err} ({err:?})");
        }
        assert_one_winner(round, &outcomes, &first, &p);
    }
}

fn the_receipt_key_is_private_and_reused(k: Kind) {
    let Some(f) = Fixture::new(k) else { return };
    let e = f.engine();
    let path = f.key_path();
    assert!(!path.exists(), "no key before the first approval");
    let p = plan(&e, &f.run_dir("r1"));
    let r = approve(&e, &p);

    let meta = std::fs::metadata(&path).unwrap();
    assert!(meta.is_file());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "the key file is 0600");
    let key = std::fs::read(&path).unwrap();
    assert!(key.len() >= 32);
    assert_eq!(e.receipt_key().unwrap(), key);
    verify_receipt(&key, &r, &p, T).unwrap();

    // Reused: a second approval and another engine on the same root read the same file.
    let r2 = approve(&e, &p);
    let e2 = f.engine();
    assert_eq!(e2.receipt_key().unwrap(), key);
    let after = std::fs::metadata(&path).unwrap();
    assert_eq!((after.ino(), after.mtime(), after.mtime_nsec()), (meta.ino(), meta.mtime(), meta.mtime_nsec()));
    assert_eq!(after.permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::read(&path).unwrap(), key);
    verify_receipt(&key, &r2, &p, T).unwrap();
    accepted(consume(&e2, &p, &r));
    assert_one_run(&e2, &p);

    // Two fresh engines' keys differ (a receipt is bound to the daemon's own key).
    let Some(g) = Fixture::new(k) else { return };
    assert_ne!(g.engine().receipt_key().unwrap(), key);
}

fn the_first_receipt_key_is_the_same_for_concurrent_callers(k: Kind) {
    const THREADS: usize = 8;
    for round in 0..20 {
        let Some(f) = Fixture::new(k) else { return };
        let e = Arc::new(f.engine());
        let barrier = Arc::new(Barrier::new(THREADS));
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                let (e, barrier) = (e.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    e.receipt_key().map(|k| String::from_utf8_lossy(&k).into_owned()).map_err(|err| err.to_string())
                })
            })
            .collect();
        let keys: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let on_disk = String::from_utf8_lossy(&std::fs::read(f.key_path()).unwrap()).into_owned();
        for k in &keys {
            assert_eq!(k.as_ref(), Ok(&on_disk), "round {round}: every first caller gets the key on disk: {keys:?}");
        }
    }
}

cairn_store::on_both!(
    a_forged_receipt_creates_nothing,
    a_receipt_from_a_rotated_key_is_refused,
    an_expired_receipt_creates_nothing,
    a_replayed_receipt_creates_nothing,
    a_receipt_for_an_altered_request_creates_nothing,
    a_receipt_survives_a_daemon_restart_and_is_consumed_once,
    a_receipt_never_consumed_expires_and_a_new_approval_works_once,
    two_receipts_for_one_plan_create_one_run,
    concurrent_approvals_and_consumptions_create_one_run,
    concurrent_consumptions_through_separate_connections_create_one_run,
    the_receipt_key_is_private_and_reused,
    the_first_receipt_key_is_the_same_for_concurrent_callers,
);
