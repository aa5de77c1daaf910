//! Load on the daemon: 20 concurrent clients submit 500 runs of a small workflow over loopback.
//! Every run must be accounted for (none lost, none duplicated, each step executed exactly once),
//! and the daemon's memory is reported and bounded.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::*;

const CLIENTS: usize = 20;
const RUNS_PER_CLIENT: usize = 25;
const RUNS: usize = CLIENTS * RUNS_PER_CLIENT;
const STEPS: [&str; 2] = ["a", "b"];
/// Generous: an idle daemon is a few MiB; this only catches a leak per run or per request.
const RSS_LIMIT_KIB: u64 = 200 * 1024;
/// Everything (submission and execution) must be over well within the 120 s budget.
const DEADLINE: Duration = Duration::from_secs(100);

fn run_id(client: usize, k: usize) -> String {
    format!("load-{client:02}-{k:02}")
}

fn input(client: usize, k: usize) -> Value {
    json!({"client": client, "k": k})
}

fn submit_body(client: usize, run_id: &str, input: &Value) -> String {
    json!({"thread_id": format!("client-{client}"), "agent_id": "load", "input": input, "run_id": run_id}).to_string()
}

/// `VmRSS` and `VmHWM` of a process, in KiB.
fn memory_kib(pid: i32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// One POST as a client saw it.
#[derive(Debug)]
struct Answer {
    client: usize,
    requested: String,
    status: u16,
    answered: String,
    took: Duration,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// A two-step chain whose tool is a three-line `sh` script: it drains its arguments, appends
/// `<run> <step> <attempt>` to an absolute log file (one `write` per line, `O_APPEND`: lines from
/// concurrent tools do not interleave) and prints one JSON object.
fn load_workflow(c: &Cairn) {
    let log = c.path_str("executions.log");
    let script = format!(
        "#!/bin/sh\ncat >/dev/null\necho \"$CAIRN_RUN_ID $CAIRN_STEP_ID $CAIRN_ATTEMPT\" >> '{log}'\necho '{{\"ok\":true}}'\n"
    );
    let toml = r#"
[workflow]
name = "load"
version = "1.0.0"

[tools.mark]
command = ["tools/mark.sh"]

[[steps]]
id = "a"
tool = "mark"
args = { client = "${input.client}", k = "${input.k}" }

[[steps]]
id = "b"
tool = "mark"
needs = ["a"]
args = { after = "${steps.a.result.ok}" }
"#;
    c.add(&write_workflow(&c.path("load"), toml, &[("tools/mark.sh", &script)]));
}

/// 20 clients, 25 runs each, plus deliberate duplicates: clients 2i and 2i+1 submit the run
/// `load-<2i>-00` at the same moment (behind a barrier); one more client resubmits a run id with
/// another input, which must be refused. Then every run must end READY with each step executed
/// once, and the daemon's memory stays bounded.
#[test]
fn twenty_clients_submit_500_runs_and_every_run_is_accounted_for() {
    let t0 = Instant::now();
    let c = Cairn::new();
    load_workflow(&c);
    let daemon = c.start_daemon();
    let token = c.token("operator");
    let url = daemon.url.clone();
    let (idle_rss, idle_hwm) = memory_kib(daemon.pid);
    eprintln!("daemon pid {} at {url}: idle VmRSS {idle_rss} KiB, VmHWM {idle_hwm} KiB", daemon.pid);

    let answers: Arc<Mutex<Vec<Answer>>> = Arc::default();
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let submit_started = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (url, token, answers, barrier) = (url.clone(), token.clone(), answers.clone(), barrier.clone());
            std::thread::spawn(move || {
                let post = |run: &str, input: &Value| {
                    let started = Instant::now();
                    let r =
                        http("POST", &format!("{url}/runs"), Some(&token), Some(&submit_body(client, run, input)), &[]);
                    let took = started.elapsed();
                    let answered = r.body["run_id"].as_str().unwrap_or_default().to_string();
                    answers.lock().unwrap().push(Answer {
                        client,
                        requested: run.to_string(),
                        status: r.status,
                        answered,
                        took,
                    });
                    r
                };
                // The pair's shared run, submitted by both clients at once.
                let pair = client - client % 2;
                barrier.wait();
                post(&run_id(pair, 0), &input(pair, 0));
                // Then this client's own runs (the even client's first one is already in).
                let first = if client % 2 == 0 { 1 } else { 0 };
                for k in first..RUNS_PER_CLIENT {
                    post(&run_id(client, k), &input(client, k));
                }
                // The last client reuses a run id with another input: a conflict, not a new run.
                if client == CLIENTS - 1 {
                    let r = post(&run_id(0, 1), &json!({"client": 0, "k": 999}));
                    assert_eq!(r.status, 409, "{}", r.text);
                    assert_eq!(r.body["error"]["code"], "execution_input_mismatch", "{}", r.text);
                }
            })
        })
        .collect();
    for t in clients {
        t.join().expect("a client thread panicked");
    }
    let submit_time = submit_started.elapsed();

    // Every submission answered 202 (or 200 if its run had finished already) for the requested id.
    let answers = Arc::try_unwrap(answers).unwrap().into_inner().unwrap();
    let expected_posts = RUNS + CLIENTS / 2 + 1;
    assert_eq!(answers.len(), expected_posts);
    for Answer { client, requested, status, answered, .. } in &answers {
        if *status == 409 {
            continue;
        }
        assert!(matches!(status, 200 | 202), "client {client}: POST {requested} answered {status}");
        assert_eq!(answered, requested, "client {client}: POST {requested} answered run {answered}");
    }
    assert_eq!(answers.iter().filter(|a| a.status == 409).count(), 1);
    let mut latencies: Vec<Duration> = answers.iter().filter(|a| a.status != 409).map(|a| a.took).collect();
    latencies.sort();
    eprintln!(
        "{} POSTs from {CLIENTS} clients in {:.2} s; POST latency median {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        answers.len(),
        submit_time.as_secs_f64(),
        percentile(&latencies, 0.5).as_secs_f64() * 1e3,
        percentile(&latencies, 0.9).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        latencies.last().unwrap().as_secs_f64() * 1e3,
    );

    // Wait until every run is terminal.
    let expected: BTreeSet<String> =
        (0..CLIENTS).flat_map(|client| (0..RUNS_PER_CLIENT).map(move |k| run_id(client, k))).collect();
    let list_url = format!("{url}/runs?limit=1000");
    let mut runs: Vec<Value> = Vec::new();
    let mut peak_rss = 0;
    let finished = wait_until(DEADLINE.saturating_sub(t0.elapsed()), || {
        peak_rss = peak_rss.max(memory_kib(daemon.pid).0);
        let r = http("GET", &list_url, Some(&token), None, &[]);
        assert_eq!(r.status, 200, "{}", r.text);
        runs = r.body["runs"].as_array().unwrap().clone();
        runs.len() >= RUNS
            && runs.iter().all(|r| ["READY", "BLOCKED", "FAILED", "CANCELLED"].contains(&r["status"].as_str().unwrap()))
    });
    let all_done = submit_started.elapsed();
    let by_status = runs.iter().fold(BTreeMap::<String, usize>::new(), |mut m, r| {
        *m.entry(r["status"].as_str().unwrap().to_string()).or_default() += 1;
        m
    });
    assert!(finished, "not every run finished within {DEADLINE:?}: {} runs listed, {by_status:?}", runs.len());
    eprintln!(
        "all {} runs terminal {:.2} s after the first POST ({:.1} runs/s): {by_status:?}",
        runs.len(),
        all_done.as_secs_f64(),
        runs.len() as f64 / all_done.as_secs_f64()
    );

    // Exactly the 500 runs submitted: none lost, none duplicated, no stranger; all READY.
    let listed: Vec<String> = runs.iter().map(|r| r["run_id"].as_str().unwrap().to_string()).collect();
    let listed_set: BTreeSet<String> = listed.iter().cloned().collect();
    assert_eq!(listed.len(), listed_set.len(), "a run id is listed twice");
    let lost: Vec<_> = expected.difference(&listed_set).collect();
    let strangers: Vec<_> = listed_set.difference(&expected).collect();
    assert!(lost.is_empty() && strangers.is_empty(), "lost: {lost:?}; unexpected: {strangers:?}");
    assert_eq!(by_status.get("READY"), Some(&RUNS), "{by_status:?}");

    // Each step of each run executed exactly once, on its first attempt (the tool's own log).
    let lines = log_lines(&c.path("executions.log"));
    let mut executions: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for line in &lines {
        let mut parts = line.split(' ');
        let (run, step, attempt) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
        executions.entry((run.to_string(), step.to_string())).or_default().push(attempt.to_string());
    }
    let twice: Vec<_> = executions.iter().filter(|(_, attempts)| attempts.len() != 1).collect();
    assert!(twice.is_empty(), "steps executed more than once: {twice:?}");
    assert_eq!(lines.len(), RUNS * STEPS.len(), "tool executions");
    for run in &expected {
        for step in STEPS {
            let attempts = executions.get(&(run.clone(), step.to_string()));
            assert_eq!(attempts.map(Vec::as_slice), Some(&["1".to_string()][..]), "run {run} step {step}");
        }
    }

    // And the event log agrees: one run.created, one step.started and one step.completed per
    // step, one run.finished, per run. Nothing resumed any run: a duplicate POST that loses the
    // race to create a run leaves queueing it to the request that created it.
    let duplicated: BTreeSet<String> = (0..CLIENTS).step_by(2).map(|pair| run_id(pair, 0)).collect();
    for run in &expected {
        let r = http("GET", &format!("{url}/runs/{run}/events"), Some(&token), None, &[]);
        assert_eq!(r.status, 200, "{}", r.text);
        let events = r.body["events"].as_array().unwrap();
        assert_eq!(events_of(events, "run.created", None).len(), 1, "run {run}: {:?}", kinds(events));
        assert_eq!(events_of(events, "run.finished", None).len(), 1, "run {run}: {:?}", kinds(events));
        for step in STEPS {
            assert_eq!(events_of(events, "step.started", Some(step)).len(), 1, "run {run}: {:?}", kinds(events));
            assert_eq!(events_of(events, "step.completed", Some(step)).len(), 1, "run {run}: {:?}", kinds(events));
        }
        assert!(
            events_of(events, "run.resumed", None).is_empty(),
            "run {run} (submitted twice at once: {}) was resumed: {:?}",
            duplicated.contains(run),
            kinds(events)
        );
    }

    let (rss, hwm) = memory_kib(daemon.pid);
    peak_rss = peak_rss.max(rss);
    eprintln!(
        "daemon memory after the load: VmRSS {rss} KiB ({:.1} MiB), VmHWM {hwm} KiB ({:.1} MiB); largest VmRSS seen while polling {peak_rss} KiB; idle before: VmRSS {idle_rss} KiB",
        rss as f64 / 1024.0,
        hwm as f64 / 1024.0
    );
    assert!(hwm < RSS_LIMIT_KIB, "the daemon's peak RSS {hwm} KiB is over {RSS_LIMIT_KIB} KiB");
    c.stop_daemon();
    eprintln!("whole test {:.2} s", t0.elapsed().as_secs_f64());
}

/// The daemon's step slots (`--workers`) bound its local tools across runs, and are shared
/// fairly: with one slot, a 24-step fan-out run at `--parallel 4` never has two tools running at
/// once, and a one-step run submitted after it started is served at the big run's next step,
/// not after its last (before, a run held its worker until it ended).
#[test]
fn one_slot_runs_one_tool_at_a_time_and_a_small_run_is_served_beside_a_big_one() {
    let c = Cairn::new();
    let log = c.path_str("tools.log");
    let script = format!(
        "#!/bin/sh\ncat >/dev/null\necho \"$CAIRN_RUN_ID $CAIRN_STEP_ID start\" >> '{log}'\nsleep 0.1\necho \"$CAIRN_RUN_ID $CAIRN_STEP_ID end\" >> '{log}'\necho '{{}}'\n"
    );
    let mut big =
        String::from("[workflow]\nname = \"big\"\nversion = \"1.0.0\"\n\n[tools.t]\ncommand = [\"tools/t.sh\"]\n\n");
    for i in 0..24 {
        big += &format!("[[steps]]\nid = \"b{i:02}\"\ntool = \"t\"\n\n");
    }
    c.add(&write_workflow(&c.path("big"), &big, &[("tools/t.sh", &script)]));
    let small = "[workflow]\nname = \"small\"\nversion = \"1.0.0\"\n\n[tools.t]\ncommand = [\"tools/t.sh\"]\n\n[[steps]]\nid = \"only\"\ntool = \"t\"\n";
    c.add(&write_workflow(&c.path("small"), small, &[("tools/t.sh", &script)]));
    c.json(&["daemon", "start", "--workers", "1"]).expect(0);
    let (url, token) = (c.daemon().url, c.token("operator"));
    let post = |body: Value| {
        let r = http("POST", &format!("{url}/runs"), Some(&token), Some(&body.to_string()), &[]);
        assert_eq!(r.status, 202, "{}", r.text);
    };
    post(json!({"thread_id": "t", "workflow": "big", "run_id": "BIG", "input": {}, "parallel": 4}));
    let lines = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(wait_until(Duration::from_secs(30), || lines().contains("BIG b00 end")), "the big run started");
    post(json!({"thread_id": "t", "workflow": "small", "run_id": "SMALL", "input": {}}));
    c.wait_for_status("SMALL", "READY", Duration::from_secs(60));
    c.wait_for_status("BIG", "READY", Duration::from_secs(60));

    let lines: Vec<String> = lines().lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 2 * 25, "{lines:#?}");
    // Strictly start, end, start, end: one tool at a time, whatever the run's parallelism.
    for pair in lines.chunks(2) {
        let run_step = |l: &str| l.rsplit_once(' ').map(|(rs, _)| rs.to_string());
        assert!(
            pair[0].ends_with(" start") && pair[1].ends_with(" end") && run_step(&pair[0]) == run_step(&pair[1]),
            "two tools overlapped on one slot: {lines:#?}"
        );
    }
    // Served at the big run's next free slot or the one after: far from its end.
    let small_at = lines.iter().position(|l| l == "SMALL only start").expect("the small run's tool ran");
    let big_before = lines[..small_at].iter().filter(|l| l.ends_with(" start")).count();
    let submitted_after = lines.iter().position(|l| l == "BIG b00 end").unwrap();
    assert!(small_at > submitted_after, "{lines:#?}");
    assert!(big_before <= 6, "the small run waited behind {big_before} of the big run's 24 steps: {lines:#?}");
}

/// kill -9 of the daemon while steps wait for its one step slot (begun, their tools not started)
/// and another's tool holds it: the next daemon resumes every run, and each step's tool ran to
/// completion exactly once — none lost, none twice.
#[test]
fn steps_waiting_for_a_slot_survive_a_kill_9() {
    let c = Cairn::new();
    let log = c.path_str("tools.log");
    let script = format!(
        "#!/bin/sh\ncat >/dev/null\necho \"$CAIRN_RUN_ID $CAIRN_STEP_ID start\" >> '{log}'\nsleep 0.3\necho \"$CAIRN_RUN_ID $CAIRN_STEP_ID end\" >> '{log}'\necho '{{}}'\n"
    );
    let toml = "[workflow]\nname = \"pair\"\nversion = \"1.0.0\"\n\n[tools.t]\ncommand = [\"tools/t.sh\"]\n\n[[steps]]\nid = \"a\"\ntool = \"t\"\n\n[[steps]]\nid = \"b\"\ntool = \"t\"\nneeds = [\"a\"]\n";
    c.add(&write_workflow(&c.path("pair"), toml, &[("tools/t.sh", &script)]));
    c.json(&["daemon", "start", "--workers", "1"]).expect(0);
    let (url, token) = (c.daemon().url, c.token("operator"));
    let runs = ["K1", "K2", "K3"];
    for id in runs {
        let body = json!({"thread_id": "t", "workflow": "pair", "run_id": id, "input": {}});
        let r = http("POST", &format!("{url}/runs"), Some(&token), Some(&body.to_string()), &[]);
        assert_eq!(r.status, 202, "{}", r.text);
    }
    let lines = || std::fs::read_to_string(&log).unwrap_or_default();
    // One tool runs; the other runs' first steps are begun and wait for the slot.
    let waiting = || {
        let running = runs.iter().filter(|id| c.show(id)["steps"][0]["status"] == "RUNNING").count();
        running >= 2 && lines().lines().count() % 2 == 1
    };
    assert!(wait_until(Duration::from_secs(30), waiting), "steps wait for the slot: {}", lines());
    let pid = c.daemon().pid;
    kill9_pid(pid);
    assert!(wait_until(Duration::from_secs(10), || !alive(pid)), "the daemon was killed");
    let before = lines();
    c.json(&["daemon", "start", "--workers", "1"]).expect(0);
    for id in runs {
        c.wait_for_status(id, "READY", Duration::from_secs(60));
    }
    let text = lines();
    let count = |text: &str, line: String| text.lines().filter(|l| *l == line).count();
    for id in runs {
        for s in ["a", "b"] {
            assert!(count(&text, format!("{id} {s} end")) >= 1, "{id} {s} ran to its end: {text}");
            // A step that waited for the slot at the kill (begun, its tool not started) starts
            // once, under the next daemon; the one whose tool was running may run again.
            if count(&before, format!("{id} {s} start")) == 0 {
                assert_eq!(count(&text, format!("{id} {s} start")), 1, "{id} {s} started once: {text}");
            }
        }
    }
}

/// The daemon's run threads are batch threads for the scheduler (a thread woken at a tool's end
/// does not preempt the tools running), and the tools they start run under the normal policy,
/// as the daemon's own did; the threads serving the API keep the normal policy.
#[test]
fn the_daemons_run_threads_are_batch_threads_and_its_tools_are_not() {
    const SCHED_OTHER: u32 = 0;
    const SCHED_BATCH: u32 = 3;
    // Field 41 of /proc/…/stat, counted from the last ')' (field 2, the name, may hold spaces).
    fn policy(stat: &str) -> u32 {
        let after = &stat[stat.rfind(')').expect("a stat line") + 1..];
        after.split_whitespace().nth(38).and_then(|p| p.parse().ok()).expect("field 41")
    }
    let c = Cairn::new();
    let log = c.path_str("policy.log");
    let script = format!("#!/bin/sh\ncat >/dev/null\ncat /proc/$$/stat >> '{log}'\necho '{{}}'\n");
    let toml = "[workflow]\nname = \"pol\"\nversion = \"1.0.0\"\n\n[tools.t]\ncommand = [\"tools/t.sh\"]\n\n[[steps]]\nid = \"a\"\ntool = \"t\"\n\n[[steps]]\nid = \"b\"\ntool = \"t\"\nneeds = [\"a\"]\n";
    c.add(&write_workflow(&c.path("pol"), toml, &[("tools/t.sh", &script)]));
    c.json(&["daemon", "start"]).expect(0);
    let (url, token) = (c.daemon().url, c.token("operator"));
    let body = json!({"thread_id": "t", "workflow": "pol", "run_id": "POL", "input": {}});
    let r = http("POST", &format!("{url}/runs"), Some(&token), Some(&body.to_string()), &[]);
    assert_eq!(r.status, 202, "{}", r.text);
    c.wait_for_status("POL", "READY", Duration::from_secs(60));

    let tools = std::fs::read_to_string(&log).unwrap();
    assert_eq!(tools.lines().count(), 2, "{tools}");
    for line in tools.lines() {
        assert_eq!(policy(line), SCHED_OTHER, "a tool ran under another policy: {line}");
    }
    let pid = c.daemon().pid;
    let (mut workers, mut others) = (Vec::new(), Vec::new());
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else { continue };
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if name.starts_with("cairn-worker") { &mut workers } else { &mut others }
            .push((name.trim().to_string(), policy(&stat)));
    }
    assert!(!workers.is_empty(), "no run thread: {others:?}");
    assert!(workers.iter().all(|(_, p)| *p == SCHED_BATCH), "{workers:?}");
    assert!(others.iter().all(|(_, p)| *p == SCHED_OTHER), "{others:?}");
    c.stop_daemon();
}
