//! A team's daemons on one PostgreSQL registry: each state root (a host, here each with its own
//! `CAIRN_HOST_ID` where a test needs two hosts) runs its own daemon; a run is leased to the
//! daemon that drives it, and taken over by another one when its daemon is gone: at once when it
//! provably died on the same host, after its lease expired otherwise, and never on another host
//! when the run's files are on the dead one. A daemon that wakes after its lease was taken over is
//! refused its writes.

use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

use cairn_store::testing::Kind;

use crate::support::*;

/// A state root on a fresh PostgreSQL schema; `None` without a test server.
fn first() -> Option<Cairn> {
    Cairn::on(Kind::Postgres)
}

fn url(c: &Cairn) -> String {
    c.database().expect("a PostgreSQL registry").url.clone()
}

/// Another state root sharing `first`'s registry, its daemon started with `extra` flags.
fn joined(first: &Cairn, other: Cairn, extra: &[&str]) -> Cairn {
    let url = url(first);
    let mut args = vec!["daemon", "start", "--database", url.as_str()];
    args.extend_from_slice(extra);
    other.raw(&args).expect(0);
    chain_workflow(&other, "chain");
    other
}

/// The daemons `c`'s daemon lists (`GET /daemons`, Viewer).
fn daemons(c: &Cairn) -> Vec<Value> {
    let info = c.daemon();
    let r = http("GET", &format!("{}/daemons", info.url), Some(&c.token("viewer")), None, &[]);
    assert_eq!(r.status, 200, "{}", r.text);
    r.body["daemons"].as_array().unwrap().clone()
}

fn daemon_id_of(c: &Cairn) -> String {
    let pid = c.daemon().pid;
    let listed = daemons(c);
    listed.iter().find(|d| d["pid"] == pid).map(|d| str_of(&d["id"]).to_string()).expect("the daemon lists itself")
}

#[test]
fn daemons_sharing_a_registry_each_drive_their_runs_and_list_each_other() {
    let Some(a) = first() else { return };
    chain_workflow(&a, "chain");
    a.start_daemon();
    let b = joined(&a, Cairn::new(), &[]);
    let input = chain_input(&a, json!({"a": ["ok"], "b": ["ok"], "c": ["ok"]}));
    let through_a = a.run("chain", &input, &["--run-id", "A1"]).expect(0).json;
    let through_b =
        b.run("chain", &chain_input(&b, json!({"a": ["ok"], "b": ["ok"], "c": ["ok"]})), &["--run-id", "B1"]);
    assert_eq!(through_a["status"], "READY", "{through_a:#}");
    assert_eq!(through_b.expect(0).json["status"], "READY");

    let listed = daemons(&a);
    assert_eq!(listed.len(), 2, "{listed:#?}");
    let pids: Vec<i64> = listed.iter().map(|d| d["pid"].as_i64().unwrap()).collect();
    assert!(pids.contains(&(a.daemon().pid as i64)) && pids.contains(&(b.daemon().pid as i64)), "{listed:#?}");
    assert!(listed.iter().all(|d| d["runs"] == json!([])), "finished runs are not leased: {listed:#?}");
    assert_eq!(daemons(&b).len(), 2);
    // `cairn daemon list` answers what GET /daemons does (its heartbeats move on between calls).
    let who = |listed: &[Value]| {
        let mut who: Vec<String> =
            listed.iter().map(|d| format!("{} {} {} {}", d["id"], d["host"], d["pid"], d["runs"])).collect();
        who.sort();
        who
    };
    let cli = b.json(&["daemon", "list"]).expect(0).json;
    assert_eq!(who(cli["daemons"].as_array().unwrap()), who(&daemons(&b)), "{cli:#}");
    let text = b.raw(&["daemon", "list"]).expect(0).stdout;
    assert!(listed.iter().all(|d| text.contains(str_of(&d["id"]))), "{text}");
    // One history.
    let ids = |c: &Cairn| {
        let mut ids: Vec<String> = c.runs().iter().map(|r| str_of(&r["run_id"]).to_string()).collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(&a), ["A1", "B1"]);
    assert_eq!(ids(&b), ["A1", "B1"]);
    // The run made through `a`, asked for again through `b` with the same input: the same run.
    let again = b.run("chain", &input, &["--run-id", "A1"]).expect(0).json;
    assert_eq!(again["status"], "READY");
    assert_eq!(step(&again, "a")["attempts"], 1, "{again:#}");
    a.stop_daemon();
    b.stop_daemon();
}

/// kill -9 of the daemon driving a run: another daemon of the same host sees its process is gone
/// and takes the run over at once (not after the lease): a new lease epoch, the orphaned step's
/// process stopped, the step resumed as interrupted, nothing completed run again.
#[test]
fn a_daemon_killed_mid_step_is_taken_over_by_another_at_once() {
    let Some(a) = first() else { return };
    chain_workflow(&a, "chain");
    a.start_daemon();
    let b = joined(&a, Cairn::new(), &[]);
    let input = chain_input(&a, json!({"a": ["ok"], "b": ["wait", "ok"], "c": ["ok"]}));
    let log = a.path("log");
    let mut runner = a.spawn(&a.run_args("chain", &input, &["--run-id", "K1", "--json"]));
    let orphan = wait_for_tool(&log, "b", 1);
    let (dead, a_id) = (a.daemon().pid, daemon_id_of(&a));
    // Every surface says which daemon drives it.
    let lease = &b.show("K1")["lease"];
    assert_eq!(
        (&lease["daemon"], &lease["epoch"], &lease["expired"]),
        (&json!(a_id), &json!(1), &json!(false)),
        "{lease}"
    );
    assert_eq!(lease["host"], daemons(&b).iter().find(|d| d["id"] == a_id.as_str()).unwrap()["host"]);
    assert_eq!(daemons(&b).iter().find(|d| d["id"] == a_id.as_str()).unwrap()["runs"], json!(["K1"]));
    let text = b.raw(&["daemon", "list"]).expect(0).stdout;
    assert!(text.lines().any(|l| l.starts_with(a_id.as_str()) && l.ends_with(" K1")), "{text}");
    kill9_pid(dead);
    let killed = Instant::now();
    let leased = b.wait_for_event("K1", Duration::from_secs(10), |e| e["kind"] == "run.leased");
    let took = killed.elapsed();
    assert!(took < Duration::from_secs(3), "taken over {took:?} after the kill (the lease is 15 s)");
    assert_eq!(leased["data"]["previous"], a_id.as_str(), "{leased}");
    assert_eq!(leased["data"]["epoch"], 2, "{leased}");
    let shown = b.wait_for_status("K1", "READY", Duration::from_secs(30));
    assert!(!alive(orphan), "the orphaned attempt must be stopped before the step is resumed");
    std::fs::write(a.path("release"), "").unwrap();
    assert_b_resumed_once(&log_lines(&log), &b.events("K1"));
    assert_eq!(step(&shown, "a")["attempts"], 1, "{shown:#}");
    let _ = wait_exit(&mut runner, Duration::from_secs(10));
    let listed = daemons(&b);
    assert_eq!(listed.len(), 1, "the killed daemon stopped heartbeating: {listed:#?}");
    b.stop_daemon();
}

/// The commit point of a takeover: a daemon that took a run's lease (a new epoch, committed) and
/// was killed before it resumed anything. Its state is made exactly: A is killed mid-step, then
/// the lease is taken through the registry for a daemon record whose process is gone (what a
/// taker killed right after its `take_lease` commit leaves); the next daemon of the host takes
/// the run at once from the dead taker (epoch 3), stops A's orphaned step and resumes it once.
#[test]
fn a_daemon_killed_right_after_taking_a_lease_is_taken_over_in_turn() {
    use cairn_core::store::{DaemonRecord, Daemons, Runs};
    let Some(a) = first() else { return };
    chain_workflow(&a, "chain");
    a.start_daemon();
    let input = chain_input(&a, json!({"a": ["ok"], "b": ["wait", "ok"], "c": ["ok"]}));
    let log = a.path("log");
    let mut runner = a.spawn(&a.run_args("chain", &input, &["--run-id", "T1", "--json"]));
    let orphan = wait_for_tool(&log, "b", 1);
    let a_id = daemon_id_of(&a);
    kill9_pid(a.daemon().pid);
    let _ = wait_exit(&mut runner, Duration::from_secs(10));

    let store = cairn_store::PostgresStore::connect(&url(&a)).unwrap();
    let mut exited = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = exited.id();
    exited.wait().unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_string();
    let taker = DaemonRecord {
        id: "dmn_killed_after_taking".into(),
        host,
        pid: dead_pid,
        start_time: 1,
        state_root: "/nonexistent".into(),
        started_at: now,
        heartbeat_at: now,
        stopped_at: None,
    };
    store.register_daemon(&taker).unwrap();
    let t1 = cairn_core::ids::RunId::lookup("T1");
    let run = store.run(&t1).unwrap().unwrap();
    let lease = store.take_lease(&t1, &taker, 1, run.revision, now + 600_000, now).unwrap();
    assert_eq!(lease.epoch, 2);
    drop(store);

    let c = joined(&a, Cairn::new(), &[]);
    let shown = c.wait_for_status("T1", "READY", Duration::from_secs(30));
    assert!(!alive(orphan), "the orphaned attempt must be stopped before the step is resumed");
    std::fs::write(a.path("release"), "").unwrap();
    let events = c.events("T1");
    let leased: Vec<(Value, Value)> = events_of(&events, "run.leased", None)
        .iter()
        .map(|e| (e["data"]["epoch"].clone(), e["data"]["previous"].clone()))
        .collect();
    assert_eq!(leased, [(json!(2), json!(a_id)), (json!(3), json!(taker.id))], "{events:#?}");
    assert_b_resumed_once(&log_lines(&log), &events);
    assert_eq!(step(&shown, "a")["attempts"], 1, "{shown:#}");
    assert_eq!(step(&shown, "c")["attempts"], 1, "{shown:#}");
    c.stop_daemon();
}

/// A daemon stopped (SIGSTOP) past its lease: alive, so only its lease's expiry lets another
/// daemon take its run over; once woken (SIGCONT), it finds the run is no longer its own: a write
/// it tries is refused and recorded, not applied, and it stops driving the run, which ends READY
/// under the other daemon with nothing run twice.
#[test]
fn a_daemon_that_wakes_after_its_lease_was_taken_is_fenced() {
    let Some(a) = first() else { return };
    chain_workflow(&a, "chain");
    a.raw(&["daemon", "start", "--lease-secs", "2"]).expect(0);
    let b = joined(&a, Cairn::new(), &[]);
    let input = chain_input(&a, json!({"a": ["ok"], "b": ["wait", "ok"], "c": ["ok"]}));
    let log = a.path("log");
    let mut runner = a.spawn(&a.run_args("chain", &input, &["--run-id", "S1", "--json"]));
    let orphan = wait_for_tool(&log, "b", 1);
    let (paused, a_id) = (a.daemon().pid, daemon_id_of(&a));
    kill(Pid::from_raw(paused), Signal::SIGSTOP).unwrap();
    let stopped = Instant::now();
    let leased = b.wait_for_event("S1", Duration::from_secs(15), |e| e["kind"] == "run.leased");
    let took = stopped.elapsed();
    assert!(
        took >= Duration::from_millis(1_500),
        "taken over {took:?} after SIGSTOP, before its 2 s lease could expire"
    );
    assert!(took < Duration::from_secs(5), "taken over only {took:?} after SIGSTOP (lease 2 s)");
    assert_eq!(leased["data"]["previous"], a_id.as_str());
    let shown = b.wait_for_status("S1", "READY", Duration::from_secs(30));
    assert!(!alive(orphan), "the paused daemon's attempt must be stopped before the step is resumed");

    kill(Pid::from_raw(paused), Signal::SIGCONT).unwrap();
    // Whatever it does once awake is refused: its refused write is recorded, or its heartbeat
    // finds the lease gone first and it writes nothing at all.
    let refused_or_left = wait_until(Duration::from_secs(10), || {
        b.events("S1").iter().any(|e| e["kind"] == "run.stale_lease_write_rejected")
            || std::fs::read_to_string(a.home().join("daemon.log")).unwrap_or_default().contains("took its lease over")
    });
    assert!(
        refused_or_left,
        "the woken daemon neither had a write refused nor noticed its lease was gone:\n{}",
        a.daemon_log()
    );
    let events = b.events("S1");
    for rejected in events_of(&events, "run.stale_lease_write_rejected", None) {
        assert_eq!(rejected["data"]["daemon"], a_id.as_str(), "{rejected}");
        assert_eq!(rejected["data"]["epoch"], 1, "{rejected}");
    }
    // Nothing of the paused daemon was applied: the run is as the other daemon left it.
    let after = b.show("S1");
    assert_eq!(after["status"], "READY");
    assert_eq!(after["steps"], shown["steps"], "a write under the lost lease changed the run");
    assert_eq!(events_of(&events, "run.finished", None).len(), 1, "{:?}", kinds(&events));
    assert!(events_of(&events, "step.failed", None).is_empty(), "{:?}", kinds(&events));
    let lines = log_lines(&log);
    assert_eq!(count(&lines, "a:start:"), 1, "{lines:?}");
    assert_eq!(count(&lines, "c:start:"), 1, "{lines:?}");
    std::fs::write(a.path("release"), "").unwrap();
    let _ = wait_exit(&mut runner, Duration::from_secs(10));
    b.stop_daemon();
}

/// A run on the local target keeps its files on its host: when that host's daemon is gone, a
/// daemon of another host does not take it over, even after its lease expired (it says the run
/// waits for a daemon there); a daemon started again on that host does.
#[test]
fn a_local_run_of_a_lost_host_waits_for_a_daemon_of_that_host() {
    let Some(a) = first() else { return };
    let a = a.with_env("CAIRN_HOST_ID", "host-one");
    chain_workflow(&a, "chain");
    a.raw(&["daemon", "start", "--lease-secs", "2"]).expect(0);
    let b = joined(&a, Cairn::new().with_env("CAIRN_HOST_ID", "host-two"), &["--lease-secs", "2"]);
    let input = chain_input(&a, json!({"a": ["ok"], "b": ["wait", "ok"], "c": ["ok"]}));
    let log = a.path("log");
    let mut runner = a.spawn(&a.run_args("chain", &input, &["--run-id", "W1", "--json"]));
    let orphan = wait_for_tool(&log, "b", 1);
    let dead = a.daemon().pid;
    kill9_pid(dead);
    let _ = wait_exit(&mut runner, Duration::from_secs(10));

    let said = wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(b.home().join("daemon.log"))
            .unwrap_or_default()
            .contains("run W1 waits for a daemon on host host-one")
    });
    assert!(said, "the other host's daemon should say the run waits:\n{}", b.daemon_log());
    let shown = b.show("W1");
    assert_eq!(shown["status"], "RUNNING", "{shown:#}");
    assert_eq!(shown["lease"]["expired"], true, "{shown:#}");
    assert_eq!(shown["lease"]["waits_for_host"], "host-one", "{shown:#}");
    let text = b.raw(&["show", "W1"]).expect(0).stdout;
    assert!(text.contains("waiting for a daemon on host host-one"), "{text}");
    assert!(events_of(&b.events("W1"), "run.leased", None).is_empty(), "taken over on the wrong host");

    // Its host's daemon comes back: it takes the run over and finishes it.
    a.raw(&["daemon", "start", "--lease-secs", "2"]).expect(0);
    let shown = a.wait_for_status("W1", "READY", Duration::from_secs(30));
    assert!(!alive(orphan));
    std::fs::write(a.path("release"), "").unwrap();
    assert_b_resumed_once(&log_lines(&log), &a.events("W1"));
    assert_eq!(step(&shown, "c")["attempts"], 1);
    a.stop_daemon();
    b.stop_daemon();
}

/// A small deterministic generator (SplitMix64), so a failing round can be run again.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n
    }
}

/// `cairn daemon start --lease-secs 2` for `c`, noting its pid.
fn start(c: &Cairn) -> i32 {
    c.raw(&["daemon", "start", "--lease-secs", "2"]).expect(0);
    c.daemon().pid
}

/// POSTs a run of `trio` to `c`'s daemon (not followed); the answer's status code.
fn post_run(c: &Cairn, run_id: &str) -> u16 {
    let url = format!("{}/runs", c.daemon().url);
    let body = json!({"thread_id": "team", "workflow": "trio", "run_id": run_id, "input": {}}).to_string();
    http("POST", &url, Some(&c.token("operator")), Some(&body), &[]).status
}

/// Three steps in a chain of a tool that notes each start (`step:start:attempt:pid`) in its run's
/// directory and answers at once (a run id ending in 0: after 0.3 s, so a kill finds some in
/// flight); a shell script, so 600 of them cost little.
fn trio(c: &Cairn) {
    let tool = "#!/bin/sh\nprintf '%s:start:%s:%s\\n' \"$CAIRN_STEP_ID\" \"$CAIRN_ATTEMPT\" \"$$\" >> \"$CAIRN_RUN_DIR/starts.log\"\n\
                cat > /dev/null\ncase \"$CAIRN_RUN_ID\" in *0) sleep 0.3 ;; esac\nprintf '{\"step\": \"%s\"}' \"$CAIRN_STEP_ID\"\n";
    let toml = "[workflow]\nname = \"trio\"\nversion = \"1.0.0\"\n\n[tools.t]\ncommand = [\"tools/note.sh\"]\n\n\
                [[steps]]\nid = \"a\"\ntool = \"t\"\n\n[[steps]]\nid = \"b\"\ntool = \"t\"\nneeds = [\"a\"]\n\n\
                [[steps]]\nid = \"c\"\ntool = \"t\"\nneeds = [\"b\"]\n";
    c.add(&write_workflow(&c.path("trio"), toml, &[("tools/note.sh", tool)]));
}

/// 200 runs submitted through three daemons (two on one host, one on another) while daemons are
/// killed (kill -9) at random and started again a little later, and plans approved through two
/// daemons at once: every run ends READY with no completed step run again (each attempt's tool
/// started at most once, none for an attempt never begun, every step completed once), and every
/// plan ran once.
#[test]
fn runs_through_daemons_killed_at_random_end_whole_and_plans_run_once() {
    let Some(a) = first() else { return };
    let team = vec![
        a.with_env("CAIRN_HOST_ID", "host-one"),
        Cairn::new().with_env("CAIRN_HOST_ID", "host-one"),
        Cairn::new().with_env("CAIRN_HOST_ID", "host-two"),
    ];
    let url = url(&team[0]);
    trio(&team[0]);
    for c in &team[1..] {
        c.raw(&["daemon", "start", "--database", &url, "--lease-secs", "2"]).expect(0);
        trio(c);
    }
    let mut pids: Vec<Option<i32>> = team.iter().map(|c| Some(start(c))).collect();
    let mut rng = Rng(0x7EA4);

    // Plans, to be executed through two daemons at once.
    let plan_input = team[0].input(&json!({}));
    let mut plans = Vec::new();
    for p in 0..5 {
        let run_dir = team[0].path(&format!("planned-{p}"));
        plans.push(team[0].plan("trio", &plan_input, "local", &run_dir, &format!("team-plan-{p}")).expect(0).json);
    }

    let total = 200;
    let (mut submitted, mut kills, mut planned) = (0, 0, false);
    let deadline = Instant::now() + Duration::from_secs(60);
    while submitted < total && Instant::now() < deadline {
        for _ in 0..8 {
            if submitted == total {
                break;
            }
            let live: Vec<usize> = (0..team.len()).filter(|&i| pids[i].is_some()).collect();
            let i = live[rng.below(live.len() as u64) as usize];
            let run_id = format!("R{submitted:03}");
            let status = post_run(&team[i], &run_id);
            assert!(matches!(status, 200..=202), "POST /runs {run_id} through daemon {i}: {status}");
            submitted += 1;
        }
        // Now and then, kill a daemon (never the last live one), or start a dead one again.
        match rng.below(3) {
            0 => {
                let live: Vec<usize> = (0..team.len()).filter(|&i| pids[i].is_some()).collect();
                if live.len() > 1 {
                    let i = live[rng.below(live.len() as u64) as usize];
                    kill9_pid(pids[i].take().unwrap());
                    kills += 1;
                }
            }
            1 => {
                if let Some(i) = (0..team.len()).find(|&i| pids[i].is_none()) {
                    std::thread::sleep(Duration::from_millis(rng.below(400)));
                    pids[i] = Some(start(&team[i]));
                }
            }
            _ => std::thread::sleep(Duration::from_millis(rng.below(300))),
        }
        if !planned && submitted >= total / 2 {
            planned = true;
            // Each plan approved through two daemons at the same moment: one run, one refusal.
            for i in 0..team.len() {
                if pids[i].is_none() {
                    pids[i] = Some(start(&team[i]));
                }
            }
            for plan in &plans {
                let name = str_of(&plan["plan_name"]).to_string();
                let body = json!({"plan_id": plan["plan_id"], "plan_checksum": plan["plan_checksum"]}).to_string();
                let answers: Vec<u16> = std::thread::scope(|s| {
                    let calls: Vec<_> = [&team[0], &team[1]]
                        .into_iter()
                        .map(|c| {
                            let (body, name) = (body.clone(), name.clone());
                            s.spawn(move || {
                                let url = format!("{}/plans/{name}/execute", c.daemon().url);
                                http("POST", &url, Some(&c.token("operator")), Some(&body), &[]).status
                            })
                        })
                        .collect();
                    calls.into_iter().map(|c| c.join().unwrap()).collect()
                });
                let ran = answers.iter().filter(|s| matches!(s, 200 | 202)).count();
                assert_eq!(ran, 1, "plan {name} approved through two daemons at once: {answers:?}");
                assert!(answers.contains(&409), "plan {name}: {answers:?}");
            }
        }
    }
    assert_eq!(submitted, total, "submitted only {submitted} runs in 60 s");
    assert!(kills >= 3, "only {kills} daemons were killed");
    // Every daemon back: each host's local runs need a daemon of that host.
    for (i, c) in team.iter().enumerate() {
        if pids[i].is_none() {
            pids[i] = Some(start(c));
        }
    }

    let watcher = &team[0];
    let all_done = wait_until(Duration::from_secs(90), || {
        watcher.json(&["runs", "--limit", "1000"]).json["runs"]
            .as_array()
            .is_some_and(|runs| runs.len() == total + plans.len() && runs.iter().all(|r| r["status"] != "RUNNING"))
    });
    if !all_done {
        let runs = watcher.json(&["runs", "--limit", "1000"]).json["runs"].as_array().cloned().unwrap_or_default();
        let open: Vec<Value> = runs
            .iter()
            .filter(|r| r["status"] == "RUNNING")
            .map(|r| {
                let shown = watcher.show(str_of(&r["run_id"]));
                json!({"run_id": r["run_id"], "lease": shown["lease"], "steps": shown["steps"].as_array().unwrap().iter().map(|s| json!([s["step_id"], s["status"], s["attempts"]])).collect::<Vec<_>>(), "events": kinds(&watcher.events(str_of(&r["run_id"])))})
            })
            .collect();
        let logs: Vec<String> = team
            .iter()
            .map(|c| std::fs::read_to_string(c.home().join("daemon.log")).unwrap_or_default())
            .map(|log| {
                let lines: Vec<&str> = log.lines().collect();
                lines[lines.len().saturating_sub(80)..].join("\n")
            })
            .collect();
        let alive_now: Vec<(usize, Option<i32>, bool)> =
            pids.iter().enumerate().map(|(i, p)| (i, *p, p.is_some_and(alive))).collect();
        panic!(
            "{} of {} runs did not finish: {open:#?}\ndaemons (index, pid, alive): {alive_now:?}\n{}",
            open.len(),
            runs.len(),
            logs.join("\n---\n")
        );
    }
    let (mut taken_over, mut resumed) = (0, 0);
    for run in watcher.json(&["runs", "--limit", "1000"]).json["runs"].as_array().unwrap() {
        let run_id = str_of(&run["run_id"]);
        let shown = watcher.show(run_id);
        assert_eq!(shown["status"], "READY", "{run_id}: {shown:#}");
        let events = watcher.events(run_id);
        taken_over += usize::from(!events_of(&events, "run.leased", None).is_empty());
        resumed += events_of(&events, "step.interrupted", None).len();
        let lines = log_lines(&std::path::Path::new(str_of(&shown["run_dir"])).join("starts.log"));
        for s in shown["steps"].as_array().unwrap() {
            let (id, attempts) = (str_of(&s["step_id"]), s["attempts"].as_u64().unwrap());
            assert_eq!(s["status"], "COMPLETED", "{run_id}: {shown:#}");
            assert_eq!(events_of(&events, "step.completed", Some(id)).len(), 1, "{run_id} {id}: {:?}", kinds(&events));
            let interrupted = events_of(&events, "step.interrupted", Some(id)).len() as u64;
            assert_eq!(
                attempts,
                interrupted + 1,
                "{run_id} {id}: every attempt but the last was interrupted: {:?}",
                kinds(&events)
            );
            let mut started: Vec<u64> = lines
                .iter()
                .filter_map(|l| l.strip_prefix(&format!("{id}:start:")))
                .map(|rest| rest.split(':').next().unwrap().parse().unwrap())
                .collect();
            let n = started.len();
            started.sort();
            started.dedup();
            assert_eq!(started.len(), n, "{run_id} {id}: an attempt's tool started twice: {lines:?}");
            assert!(
                started.iter().all(|&att| att <= attempts),
                "{run_id} {id}: a tool ran for an attempt never begun: {lines:?}"
            );
            assert!(started.contains(&attempts), "{run_id} {id}: its last attempt never ran: {lines:?}");
        }
        assert_eq!(events_of(&events, "run.finished", None).len(), 1, "{run_id}: {:?}", kinds(&events));
    }
    // The kills left work to take over: runs queued or running on a killed daemon.
    assert!(taken_over > 0, "{kills} kills, yet no run was taken over ({resumed} steps resumed)");
    let listed = watcher.json(&["plans"]).expect(0).json;
    for plan in &plans {
        let entry = listed["plans"].as_array().unwrap().iter().find(|p| p["plan_name"] == plan["plan_name"]).unwrap();
        assert!(entry["run_id"].is_string(), "plan {} never ran: {entry}", plan["plan_name"]);
    }
    for c in &team {
        c.stop_daemon();
    }
}
