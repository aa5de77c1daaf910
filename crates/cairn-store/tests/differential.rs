//! One registry, two databases: the same random sequences of store operations (runs, attempts
//! and their tokens, stale writes, process records, replays, cancels, plans and receipts) applied
//! to a SQLite file and to PostgreSQL give the same answer to every operation and the same
//! history afterwards. Event numbers are compared by their order (PostgreSQL's identity skips
//! the numbers a rolled-back transaction took), and a database failure by its kind (each
//! database words its own messages).

use cairn_core::artifact::Artifact;
use cairn_core::ids::RunId;
use cairn_core::plan::ApprovalChannel;
use cairn_core::replay::{ReplayRecord, ReplaySummary};
use cairn_core::signature::StepSignature;
use cairn_core::status::{Outcome, RunStatus};
use cairn_core::store::*;
use cairn_core::workflow::parse_workflow;
use cairn_store::testing::TestSchema;
use cairn_store::{PostgresStore, SqliteStore};
use proptest::prelude::*;
use serde_json::json;

const RUNS: [&str; 3] = ["r0", "r1", "r2"];
const STEPS: [&str; 3] = ["a", "b", "c"];
const TOKENS: [&str; 4] = ["t0", "t1", "t2", "t3"];

#[derive(Debug, Clone)]
enum Op {
    Create { run: usize, source: Option<usize>, at: i64 },
    Begin { run: usize, step: usize, token: usize, start: u8, previous: usize },
    Complete { run: usize, step: usize, token: usize, artifact: bool },
    Fail { run: usize, step: usize, token: usize },
    Commit { complete: Vec<(usize, usize, usize)>, begin: Vec<(usize, usize, usize)> },
    Process { run: usize, step: usize, token: usize, pid: u32 },
    Stale { run: usize, step: usize, token: usize },
    Finish { run: usize, revision: i64, status: u8 },
    Claim { run: usize, revision: i64 },
    Cancel { run: usize },
    Reuse { child: usize, source: usize, steps: Vec<usize> },
    Plan { plan: usize },
    Consume { receipt: usize, plan: usize, run: usize, dir: usize },
}

/// A run id to look a run up by.
fn rid(id: &str) -> RunId {
    RunId::lookup(id)
}

fn op() -> impl Strategy<Value = Op> {
    let run = 0..RUNS.len();
    let step = 0..STEPS.len();
    let token = 0..TOKENS.len();
    let triple = (run.clone(), step.clone(), token.clone());
    prop_oneof![
        3 => (run.clone(), prop::option::of(run.clone()), 0i64..5).prop_map(|(run, source, at)| Op::Create { run, source, at }),
        5 => (run.clone(), step.clone(), token.clone(), 0u8..3, token.clone())
            .prop_map(|(run, step, token, start, previous)| Op::Begin { run, step, token, start, previous }),
        4 => (triple.clone(), any::<bool>()).prop_map(|((run, step, token), artifact)| Op::Complete { run, step, token, artifact }),
        2 => triple.clone().prop_map(|(run, step, token)| Op::Fail { run, step, token }),
        3 => (prop::collection::vec(triple.clone(), 0..3), prop::collection::vec(triple.clone(), 0..3))
            .prop_map(|(complete, begin)| Op::Commit { complete, begin }),
        1 => (triple.clone(), 1u32..100).prop_map(|((run, step, token), pid)| Op::Process { run, step, token, pid }),
        1 => triple.clone().prop_map(|(run, step, token)| Op::Stale { run, step, token }),
        2 => (run.clone(), 0i64..4, 0u8..3).prop_map(|(run, revision, status)| Op::Finish { run, revision, status }),
        1 => (run.clone(), 0i64..4).prop_map(|(run, revision)| Op::Claim { run, revision }),
        1 => run.clone().prop_map(|run| Op::Cancel { run }),
        2 => (run.clone(), run.clone(), prop::collection::vec(step.clone(), 0..3))
            .prop_map(|(child, source, steps)| Op::Reuse { child, source, steps }),
        1 => (0usize..2).prop_map(|plan| Op::Plan { plan }),
        2 => (0usize..3, 0usize..2, run, 0usize..2).prop_map(|(receipt, plan, run, dir)| Op::Consume { receipt, plan, run, dir }),
    ]
}

fn sig(step: &str) -> StepSignature {
    StepSignature { tool: "t".into(), tool_digest: "digest".into(), args_hash: format!("args-{step}") }
}

fn new_run(run: &str, source: Option<&str>, at: i64) -> NewRun {
    NewRun {
        lease: None,
        run_id: RunId::lookup(run),
        workflow: "wf".into(),
        version: "1.0.0".into(),
        identity_hash: format!("identity-{run}"),
        input: json!({"run": run}),
        run_dir: format!("/runs/{run}"),
        source_run_id: source.map(RunId::lookup),
        replay: source.map(|s| ReplayRecord {
            summary: ReplaySummary {
                source_run_id: s.to_string(),
                requested: vec!["a".into()],
                replayed: vec!["a".into()],
                reused: Vec::new(),
                invalidated: Vec::new(),
            },
            decisions: Vec::new(),
        }),
        owner: None,
        thread_id: None,
        parallelism: 1,
        at,
        act: None,
        admission: Default::default(),
    }
}

fn begin(run: usize, step: usize, token: usize, start: AttemptStart, at: i64) -> BeginAttempt {
    BeginAttempt {
        run_id: RunId::lookup(RUNS[run]),
        step_id: STEPS[step].into(),
        signature: sig(STEPS[step]),
        args: json!({"step": STEPS[step]}),
        token: TOKENS[token].into(),
        attempt: 1,
        start,
        at,
    }
}

fn finish(run: usize, step: usize, token: usize, outcome: Outcome, artifact: bool, at: i64) -> FinishAttempt {
    FinishAttempt {
        run_id: RunId::lookup(RUNS[run]),
        step_id: STEPS[step].into(),
        token: TOKENS[token].into(),
        attempt: 1,
        outcome,
        result: (outcome == Outcome::Completed).then(|| json!({"done": STEPS[step]})),
        error: (outcome != Outcome::Completed).then(|| "exit 1".to_string()),
        // Every failure here met a full disk, so both databases keep (and clear) a cause too.
        cause: full_disk(outcome),
        log_tail: Some("tail".into()),
        duration_us: 42,
        artifacts: if artifact {
            vec![Artifact {
                name: "out".into(),
                path: format!("steps/{}/out.txt", STEPS[step]),
                bytes: 3,
                sha256: format!("sha-{}-{}", RUNS[run], STEPS[step]),
                link: None,
            }]
        } else {
            Vec::new()
        },
        at,
    }
}

/// The cause of a FAILED attempt on a full disk.
fn full_disk(outcome: Outcome) -> Option<cairn_core::cause::Cause> {
    let disk = cairn_core::cause::DiskSpace { path: "/full".into(), free_bytes: 0, free_inodes: Some(7) };
    cairn_core::cause::cause_of(outcome, "No space left on device", &[disk])
}

/// What an operation answered, comparable across databases.
fn answer<T: std::fmt::Debug>(r: Result<T, StoreError>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        // Each database words its own failures; that one failed is what must agree.
        Err(StoreError::Database(_)) => "database error".into(),
        Err(e) => format!("err {e:?}"),
    }
}

fn apply(store: &dyn RunStore, op: &Op, at: i64) -> String {
    match op {
        Op::Create { run, source, at: dt } => {
            answer(store.create_run(&new_run(RUNS[*run], source.map(|s| RUNS[s]), at + dt)))
        }
        Op::Begin { run, step, token, start, previous } => {
            let start = match start {
                0 => AttemptStart::First,
                1 => AttemptStart::Retry {
                    previous_token: TOKENS[*previous].into(),
                    outcome: Outcome::Failed,
                    error: None,
                    cause: full_disk(Outcome::Failed),
                    delay_ms: 1_000,
                },
                _ => AttemptStart::ResumeInterrupted { previous_token: TOKENS[*previous].into(), why: None },
            };
            answer(store.begin_attempt(&begin(*run, *step, *token, start, at)))
        }
        Op::Complete { run, step, token, artifact } => {
            answer(store.complete_attempt(&finish(*run, *step, *token, Outcome::Completed, *artifact, at)))
        }
        Op::Fail { run, step, token } => {
            answer(store.fail_attempt(&finish(*run, *step, *token, Outcome::Failed, false, at), "step failed"))
        }
        Op::Commit { complete, begin: begins } => {
            let complete: Vec<_> =
                complete.iter().map(|&(r, s, t)| finish(r, s, t, Outcome::Completed, false, at)).collect();
            let begins: Vec<_> = begins.iter().map(|&(r, s, t)| begin(r, s, t, AttemptStart::First, at)).collect();
            answer(store.commit_steps(&complete, &begins))
        }
        Op::Process { run, step, token, pid } => {
            let p = ProcessInfo { pid: *pid, pgid: *pid, start_time: Some(7), remote: None };
            answer(store.record_process(&rid(RUNS[*run]), STEPS[*step], &TOKENS[*token].into(), &p))
        }
        Op::Stale { run, step, token } => {
            answer(store.record_stale_write(&rid(RUNS[*run]), STEPS[*step], &TOKENS[*token].into(), at))
        }
        Op::Finish { run, revision, status } => {
            let status = [RunStatus::Ready, RunStatus::Blocked, RunStatus::Failed][*status as usize];
            answer(store.finish_run(&rid(RUNS[*run]), *revision, status, &[], None, at))
        }
        Op::Claim { run, revision } => answer(store.claim_run(&rid(RUNS[*run]), *revision, None, at)),
        Op::Cancel { run } => answer(store.cancel_run(&rid(RUNS[*run]), "cancelled", at, None)),
        Op::Reuse { child, source, steps } => {
            let wanted: Vec<&str> = steps.iter().map(|&s| STEPS[s]).collect();
            let records = match store.steps(&rid(RUNS[*source])) {
                Ok(rows) => rows.into_iter().filter(|r| wanted.contains(&r.step_id.as_str())).collect::<Vec<_>>(),
                Err(e) => return answer::<()>(Err(e)),
            };
            answer(store.copy_reused_steps(&rid(RUNS[*child]), &rid(RUNS[*source]), &records, at))
        }
        Op::Plan { plan } => answer(store.insert_plan(
            &PlanRecord {
                plan_name: format!("plan-{plan}"),
                plan_id: format!("plan_{plan}"),
                plan_checksum: format!("sum-{plan}"),
                workflow: "wf".into(),
                version: "1.0.0".into(),
                target: "local".into(),
                run_dir: format!("/out/{plan}"),
                created_at: at,
                planned_by: None,
            },
            &format!("{{\"plan\": {plan}}}"),
            "/state",
            None,
        )),
        Op::Consume { receipt, plan, run, dir } => answer(store.consume_receipt(&ConsumeReceipt {
            receipt_id: format!("rcpt_{receipt}"),
            plan_id: format!("plan_{plan}"),
            target: "local".into(),
            channel: ApprovalChannel::Cli,
            act: None,
            run: NewRun { run_dir: format!("/out/{dir}"), ..new_run(RUNS[*run], None, at) },
        })),
    }
}

/// Everything the registry holds about these runs, plans and receipts, events numbered by order.
fn history(store: &dyn RunStore) -> String {
    let mut out = String::new();
    let runs = store.runs(&RunQuery::newest(100)).unwrap();
    out.push_str(&format!("runs {runs:#?}\n"));
    for run in RUNS {
        out.push_str(&format!("{run} steps {:#?}\n", store.steps(&rid(run)).unwrap()));
        let events = store.events(&rid(run), 0).unwrap();
        assert!(events.windows(2).all(|w| w[0].seq < w[1].seq), "{run}: events out of order");
        let events: Vec<_> = events.into_iter().map(|e| (e.step_id, e.attempt, e.at, e.event)).collect();
        out.push_str(&format!("{run} events {events:#?}\n"));
        out.push_str(&format!("{run} artifacts {:#?}\n", store.artifacts(&rid(run)).unwrap()));
        out.push_str(&format!(
            "{run} approval {:?} target {:?}\n",
            store.approval_of_run(&rid(run)).unwrap(),
            store.target_of_run(&rid(run)).unwrap()
        ));
    }
    out.push_str(&format!("plans {:#?}\n", store.plans().unwrap()));
    for plan in ["plan_0", "plan_1"] {
        out.push_str(&format!("{plan} run {:?}\n", store.run_of_plan(plan).unwrap()));
    }
    out.push_str(&format!("open {:?}\n", store.open_runs().unwrap().iter().map(|r| &r.run_id).collect::<Vec<_>>()));
    out.push_str(&format!("traced {:#?}\n", store.artifacts_with_sha256("sha-r0-a").unwrap()));
    out
}

const WORKFLOW: &str = "[workflow]\nname = \"wf\"\nversion = \"1.0.0\"\n[tools.t]\ncommand = [\"x\"]\n[[steps]]\nid = \"a\"\ntool = \"t\"\n";

fn registered(store: &dyn RunStore) {
    let spec = parse_workflow(WORKFLOW, "workflow.toml").unwrap();
    let record = WorkflowRecord {
        name: "wf".into(),
        version: "1.0.0".into(),
        digest: "d".into(),
        path: "/registry/wf".into(),
        spec,
        registered_at: 1,
    };
    assert_eq!(store.register_workflow(&record).unwrap(), RegisterOutcome::Inserted);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn sqlite_and_postgresql_answer_and_remember_alike(ops in prop::collection::vec(op(), 1..40)) {
        let Some(schema) = TestSchema::create() else { return Ok(()) };
        let dir = tempfile::tempdir().unwrap();
        let sqlite = SqliteStore::open(&dir.path().join("cairn.db")).unwrap();
        let postgres = PostgresStore::connect(&schema.url).unwrap();
        registered(&sqlite);
        registered(&postgres);
        for (i, op) in ops.iter().enumerate() {
            let at = 1_000 + i as i64;
            let (s, p) = (apply(&sqlite, op, at), apply(&postgres, op, at));
            prop_assert_eq!(&s, &p, "operation {} {:?}", i, op);
        }
        prop_assert_eq!(history(&sqlite), history(&postgres));
    }
}
