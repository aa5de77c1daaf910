//! Boundary tests of the session kernel (`cairn kernel …`): the real binary, its daemon, a real
//! ipykernel from the test venv (`CAIRN_TEST_VENV`, else `<repo>/.venv`; a missing venv fails the
//! test, it never skips), one private `CAIRN_HOME` per test.
//!
//! The contract under test: one long-lived kernel owned by the daemon whose state carries from job
//! to job; every job ends with a recorded status (`ok`, `error`, `died`, `timed_out`,
//! `interrupted`, `cancelled`) and timings; `kernel exec` exits 0 for `ok`, 1 for any other end,
//! 4 when a verification holds the kernel slot; interrupt keeps the state, restart/timeout/death
//! lose it and the next job starts a new session; the admission slot is shared with `cairn
//! verify`; the audit notebook holds every job; jobs a killed daemon left running end `died`.
//!
//! Every test stops its daemon and checks that no kernel process of its state root survives; a
//! failing test's [`K`] SIGKILLs whatever kernel it left behind.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tempfile::TempDir;

use cairn_store::testing::Kind;

use crate::support::*;

// ------------------------------------------------------------------------------------------------
// helpers

/// The end states of a job.
const TERMINAL: [&str; 6] = ["ok", "error", "died", "timed_out", "interrupted", "cancelled"];

/// Python source for a path literal.
fn py(p: &Path) -> String {
    format!("{:?}", p.display().to_string())
}

/// Unix milliseconds now.
fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// Unix milliseconds of a wire timestamp (`2026-01-01T00:00:00.000Z`).
#[track_caller]
fn ms(v: &Value) -> i64 {
    let s = v.as_str().unwrap_or_else(|| panic!("not a timestamp: {v}"));
    s.parse::<jiff::Timestamp>().unwrap_or_else(|e| panic!("`{s}` is not a timestamp: {e}")).as_millisecond()
}

/// A text field of nbformat (a string or a list of strings).
fn joined(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => String::new(),
    }
}

/// The stdout text of a job's outputs (streams to stdout, and execute results' text/plain).
fn text(job: &Value) -> String {
    job["outputs"]
        .as_array()
        .map(|outs| {
            outs.iter()
                .map(|o| match o["output_type"].as_str() {
                    Some("stream") if o["name"] == "stdout" => joined(&o["text"]),
                    Some("execute_result") => joined(&o["data"]["text/plain"]) + "\n",
                    _ => String::new(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// After `what` ended kernel `pid1` of session `s1`: the state `x` is lost, the next job runs in a
/// new session and a new kernel. Returns the new kernel's pid.
#[track_caller]
fn assert_new_session(k: &K, pid1: i32, s1: &str, what: &str) -> i32 {
    let n = k.exec("print(x)").expect(1);
    assert!(n.json["error"].as_str().unwrap().contains("NameError"), "the state is lost: {:#}", n.json);
    assert_ne!(session(&n.json), s1, "the next job runs in a new session");
    let (pid2, s2) = k.kernel_pid();
    assert_ne!(pid2, pid1);
    assert!(s2.starts_with("ses_") && s2 != s1, "a new session after {what}: `{s2}`, was `{s1}`");
    pid2
}

fn session(job: &Value) -> String {
    job["session"].as_str().unwrap_or_else(|| panic!("no session in {job:#}")).to_string()
}

fn status(job: &Value) -> &str {
    job["status"].as_str().unwrap_or("")
}

/// The fields every job object has, with the types the contract gives them; a finished job has
/// its timings, in order. (Which session a job names is checked by the tests themselves.)
#[track_caller]
fn check_job(job: &Value) {
    for key in [
        "job_id",
        "status",
        "code",
        "outputs",
        "execution_count",
        "error",
        "session",
        "submitted_at",
        "started_at",
        "finished_at",
        "duration_ms",
    ] {
        assert!(job.get(key).is_some(), "no `{key}` in {job:#}");
    }
    // A verification in progress is a row too, by its verification id.
    let prefix = if job["kind"] == "verification" { "ver_" } else { "job_" };
    assert!(job["job_id"].as_str().is_some_and(|s| s.starts_with(prefix)), "{job:#}");
    assert!(["session", "verification"].contains(&job["kind"].as_str().unwrap_or("")), "{job:#}");
    assert!(job["outputs"].is_array(), "{job:#}");
    let st = status(job);
    assert!(TERMINAL.contains(&st) || st == "queued" || st == "running", "unknown status `{st}`: {job:#}");
    if TERMINAL.contains(&st) {
        assert!(job["finished_at"].is_string(), "a finished job has finished_at: {job:#}");
        assert!(ms(&job["submitted_at"]) <= ms(&job["finished_at"]), "{job:#}");
        if st == "ok" {
            assert!(job["error"].is_null(), "an ok job has no error: {job:#}");
        } else {
            assert!(job["error"].as_str().is_some_and(|e| !e.is_empty()), "a job that failed says why: {job:#}");
        }
        if job["started_at"].is_string() {
            let (sub, start, end) = (ms(&job["submitted_at"]), ms(&job["started_at"]), ms(&job["finished_at"]));
            assert!(sub <= start && start <= end, "timings out of order: {job:#}");
            if st != "cancelled" && st != "died" {
                assert!(job["duration_ms"].is_i64(), "a job that ran has duration_ms: {job:#}");
            }
        }
    }
}

/// A private state root with its daemon, the venv's python and an empty `CAIRN_CONFIG`.
struct K {
    c: Cairn,
    /// The empty `CAIRN_CONFIG`, kept for the test's length.
    _config: TempDir,
}

impl K {
    fn new() -> K {
        K::on(Kind::Sqlite).unwrap_or_else(|| unreachable!("SQLite is always there"))
    }

    /// One whose registry is `kind`'s (`None`: no PostgreSQL here, outside CI).
    fn on(kind: Kind) -> Option<K> {
        let config = tempfile::Builder::new().prefix("cairn-kcfg-").tempdir().unwrap();
        let c = Cairn::on(kind)?.with_kernel(python(), config.path());
        Some(K { c, _config: config })
    }

    fn home(&self) -> PathBuf {
        self.c.home()
    }

    /// A path in the scratch directory.
    fn path(&self, rel: &str) -> PathBuf {
        self.c.path(rel)
    }

    /// Runs `cairn ARGS` (no `--json` added).
    fn run(&self, args: &[&str]) -> Out {
        self.c.raw(args)
    }

    /// Runs `cairn ARGS --json` and checks the `--json` contract.
    fn json(&self, args: &[&str]) -> Out {
        self.c.json(args)
    }

    /// `cairn daemon start --json` (with the venv's python in its environment); its pid.
    #[track_caller]
    fn start_daemon(&self) -> i32 {
        self.c.start_daemon().pid
    }

    /// `cairn kernel exec CODE EXTRA… --json`, checking the job object when there is one.
    #[track_caller]
    fn exec_with(&self, code: &str, extra: &[&str]) -> Out {
        let mut args = vec!["kernel", "exec", code];
        args.extend_from_slice(extra);
        let out = self.json(&args);
        if out.code == 0 || out.code == 1 {
            check_job(&out.json);
            assert_eq!(out.json["code"], code, "the job records its code");
            let st = status(&out.json);
            assert!(TERMINAL.contains(&st), "exec waits for the end of the job: {:#}", out.json);
            assert_eq!(out.code, if st == "ok" { 0 } else { 1 }, "status {st} exits {}: {:#}", out.code, out.json);
        }
        out
    }

    #[track_caller]
    fn exec(&self, code: &str) -> Out {
        self.exec_with(code, &[])
    }

    /// `cairn kernel exec CODE --detach --json`: the queued job's id.
    #[track_caller]
    fn detach(&self, code: &str) -> String {
        let out = self.json(&["kernel", "exec", code, "--detach"]).expect(0);
        check_job(&out.json);
        assert_eq!(out.json["code"], code);
        out.json["job_id"].as_str().unwrap().to_string()
    }

    /// `cairn kernel poll JOB --json`.
    #[track_caller]
    fn poll(&self, job: &str) -> Value {
        let out = self.json(&["kernel", "poll", job]).expect(0);
        check_job(&out.json);
        assert_eq!(out.json["job_id"], job);
        out.json
    }

    /// `cairn kernel jobs --json`.
    #[track_caller]
    fn jobs(&self) -> Vec<Value> {
        let out = self.json(&["kernel", "jobs"]).expect(0);
        let jobs = out.json["jobs"].as_array().unwrap_or_else(|| panic!("no jobs in {}", out.stdout)).clone();
        jobs.iter().for_each(check_job);
        jobs
    }

    /// Polls a job until it has ended; panics after `timeout`.
    #[track_caller]
    fn wait_end(&self, job: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let j = self.poll(job);
            if TERMINAL.contains(&status(&j)) {
                return j;
            }
            assert!(Instant::now() < deadline, "job {job} did not end within {timeout:?}: {j:#}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Runs `os.getpid()` in the session kernel: its pid and the session the job ran in.
    #[track_caller]
    fn kernel_pid(&self) -> (i32, String) {
        let out = self.exec("import os; print(os.getpid())").expect(0);
        let pid = text(&out.json).trim().parse().unwrap_or_else(|e| panic!("no pid ({e}) in {:#}", out.json));
        (pid, session(&out.json))
    }

    /// A detached job that creates `marker` (so the test knows its code runs), then sleeps.
    #[track_caller]
    fn detach_sleeper(&self, marker: &Path, secs: u32) -> String {
        let id = self.detach(&format!("import time\nopen({}, 'w').close()\ntime.sleep({secs})", py(marker)));
        wait_file(marker, Duration::from_secs(30));
        id
    }

    /// Live processes of a kernel of this state root (the session kernel or a verification's).
    fn kernel_processes(&self) -> Vec<i32> {
        kernel_processes(self.c.home.path())
    }

    /// Stops the daemon and checks that no kernel of this state root survived it.
    #[track_caller]
    fn finish(&self) {
        self.c.stop_daemon();
        assert_no_kernel_left(self);
    }
}

impl Drop for K {
    /// A failing test must not leak a daemon or kernels: stop the one, kill what is left of ours.
    fn drop(&mut self) {
        let _ = self.c.command(&["daemon", "stop", "--json"]).timeout(Duration::from_secs(20)).output();
        kill_kernels(self.c.home.path());
    }
}

#[track_caller]
fn wait_file(p: &Path, timeout: Duration) {
    assert!(wait_until(timeout, || p.exists()), "{} did not appear within {timeout:?}", p.display());
}

/// No kernel process of this state root is alive (a short poll absorbs the scheduler).
#[track_caller]
fn assert_no_kernel_left(k: &K) {
    let mut left = Vec::new();
    if !wait_until(Duration::from_secs(2), || {
        left = k.kernel_processes();
        left.is_empty()
    }) {
        let list: Vec<String> = left.iter().map(|p| describe_pid(*p)).collect();
        panic!("kernel processes survived:\n{}", list.join("\n"));
    }
}

/// `cairn verify ARGS --json` (the `--json` contract checked; the verdict is up to the caller).
#[track_caller]
fn verify(k: &K, args: &[&str]) -> Out {
    let mut all = vec!["verify"];
    all.extend_from_slice(args);
    k.json(&all)
}

/// A one-cell document in the scratch directory.
fn doc(k: &K, name: &str, cell: &str) -> PathBuf {
    let p = k.path(name);
    std::fs::write(&p, format!("# {name}\n\n```python\n{cell}\n```\n")).unwrap();
    p
}

/// Whether a verification's scratch kernel directory (`kernels/ver_*`) exists.
fn verification_kernel_dir(home: &Path) -> bool {
    std::fs::read_dir(home.join("kernels"))
        .map(|rd| rd.flatten().any(|e| e.file_name().to_string_lossy().starts_with("ver_")))
        .unwrap_or(false)
}

// ------------------------------------------------------------------------------------------------
// 1. state, outputs, timings, order

fn state_carries_between_jobs_and_each_job_is_recorded(kind: Kind) {
    let Some(k) = K::on(kind) else { return };
    k.start_daemon();

    let a = k.exec("x = 41").expect(0);
    assert_eq!(status(&a.json), "ok");
    assert_eq!(a.json["outputs"], Value::Array(vec![]), "an assignment prints nothing: {:#}", a.json);
    let ec_a = a.json["execution_count"].as_u64().unwrap_or_else(|| panic!("no execution_count: {:#}", a.json));

    let b = k.exec("print(x + 1)").expect(0);
    assert_eq!(text(&b.json), "42\n", "state carries from job to job: {:#}", b.json);
    let out = &b.json["outputs"][0];
    assert_eq!((out["output_type"].as_str(), out["name"].as_str()), (Some("stream"), Some("stdout")), "{out}");
    assert_eq!(b.json["execution_count"].as_u64(), Some(ec_a + 1), "the kernel's counter goes on: {:#}", b.json);

    // An expression's value, and timings that cover the job's run.
    let c = k.exec("import time\ntime.sleep(0.5)\nx + 1").expect(0);
    let ec_c = c.json["execution_count"].as_u64().unwrap();
    assert_eq!(ec_c, ec_a + 2);
    let result = c.json["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["output_type"] == "execute_result")
        .unwrap_or_else(|| panic!("no execute_result: {:#}", c.json));
    assert_eq!(joined(&result["data"]["text/plain"]), "42");
    assert_eq!(result["execution_count"].as_u64(), Some(ec_c));
    let dur = c.json["duration_ms"].as_i64().unwrap();
    assert!((500..5_000).contains(&dur), "duration_ms {dur} for a 0.5 s job");
    assert!(ms(&c.json["finished_at"]) - ms(&c.json["started_at"]) >= 500, "{:#}", c.json);
    assert!(c.elapsed >= Duration::from_millis(500), "exec waits for the job");

    // Without --json: the outputs on stdout, exit 0.
    let human = k.run(&["kernel", "exec", "print(x * 2)"]).expect(0);
    assert_eq!(human.stdout, "82\n", "stderr: {}", human.stderr);

    // poll agrees with what exec returned.
    let pa = k.poll(a.json["job_id"].as_str().unwrap());
    for key in [
        "job_id",
        "status",
        "code",
        "outputs",
        "execution_count",
        "session",
        "submitted_at",
        "started_at",
        "finished_at",
        "duration_ms",
    ] {
        assert_eq!(pa[key], a.json[key], "poll and exec disagree on `{key}`");
    }

    // jobs lists every job, oldest first.
    let jobs = k.jobs();
    let ids: Vec<&str> = jobs.iter().map(|j| j["job_id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 4, "{jobs:#?}");
    assert_eq!(&ids[..3], [&a.json["job_id"], &b.json["job_id"], &c.json["job_id"]].map(|v| v.as_str().unwrap()));
    assert_eq!(jobs[3]["code"], "print(x * 2)");
    assert!(jobs.iter().all(|j| status(j) == "ok"), "{jobs:#?}");
    let submitted: Vec<i64> = jobs.iter().map(|j| ms(&j["submitted_at"])).collect();
    assert!(submitted.windows(2).all(|w| w[0] <= w[1]), "jobs are listed oldest first: {submitted:?}");

    // All of them ran in one session, and each names it — the first one too, which was submitted
    // before the kernel (and so the session) existed.
    assert!(session(&b.json).starts_with("ses_"), "{:#}", b.json);
    for j in &jobs {
        assert_eq!(session(j), session(&b.json), "every job names the session it ran in: {j:#}");
    }
    k.finish();
}

// ------------------------------------------------------------------------------------------------
// 2. an error

#[test]
fn an_error_job_fails_and_the_session_goes_on() {
    let k = K::new();
    k.start_daemon();
    k.exec("y = 'kept'").expect(0);
    let (pid, ses) = k.kernel_pid();

    let e = k.exec("z = 5\n1 / 0").expect(1);
    assert_eq!(status(&e.json), "error");
    let err = e.json["error"].as_str().unwrap();
    assert!(err.contains("ZeroDivisionError"), "the error names the exception: {err}");
    let tb = e.json["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["output_type"] == "error")
        .unwrap_or_else(|| panic!("no error output: {:#}", e.json));
    assert_eq!(tb["ename"], "ZeroDivisionError");

    let n = k.exec("print(y, z)").expect(0);
    assert_eq!(text(&n.json), "kept 5\n", "state (even from the failed job's first line) survives: {:#}", n.json);
    assert_eq!(session(&e.json), ses, "the error job ran in the session");
    assert_eq!(session(&n.json), ses, "the error kept the session");
    assert_eq!(k.kernel_pid(), (pid, ses), "the error kept the kernel");

    // Without --json too: exit 1, the exception on stderr.
    let human = k.run(&["kernel", "exec", "raise ValueError('boom')"]).expect(1);
    assert!(human.stderr.contains("ValueError"), "stderr: {}", human.stderr);
    k.finish();
}

// ------------------------------------------------------------------------------------------------
// 3. interrupt

#[test]
fn interrupt_stops_the_running_job_and_keeps_the_session() {
    let k = K::new();
    k.start_daemon();
    k.exec("x = 7").expect(0);
    let (pid, ses) = k.kernel_pid();

    let marker = k.path("started");
    let job = k.detach_sleeper(&marker, 60);
    assert_eq!(status(&k.poll(&job)), "running");
    let t = Instant::now();
    let out = k.json(&["kernel", "interrupt"]).expect(0);
    assert_eq!(out.json["interrupted"], job.as_str(), "{}", out.stdout);
    let j = k.wait_end(&job, Duration::from_secs(5));
    assert!(t.elapsed() < Duration::from_secs(5));
    assert_eq!(status(&j), "interrupted", "{j:#}");
    assert!(j["error"].as_str().unwrap().contains("KeyboardInterrupt"), "{j:#}");
    assert!(ms(&j["finished_at"]) - ms(&j["started_at"]) < 30_000, "it did not sleep its 60 s: {j:#}");
    assert_eq!(session(&j), ses);

    // The kernel and its state survive.
    assert!(alive(pid), "the interrupt killed the kernel");
    let n = k.exec("print(x)").expect(0);
    assert_eq!(text(&n.json), "7\n");
    assert_eq!(session(&n.json), ses);
    assert_eq!(k.kernel_pid(), (pid, ses));

    // With nothing running it interrupts nothing.
    let idle = k.json(&["kernel", "interrupt"]).expect(0);
    assert!(idle.json["interrupted"].is_null(), "{}", idle.stdout);
    k.finish();
}

// ------------------------------------------------------------------------------------------------
// 4. restart

#[test]
fn restart_kills_the_kernel_cancels_its_jobs_and_starts_a_new_session() {
    let k = K::new();
    k.start_daemon();
    k.exec("x = 1").expect(0);
    let (pid1, s1) = k.kernel_pid();

    let running = k.detach_sleeper(&k.path("started"), 60);
    let queued = k.detach("x = 2");
    assert_eq!(status(&k.poll(&queued)), "queued");

    let r = k.json(&["kernel", "restart"]).expect(0);
    assert_eq!(r.json["killed_session"], s1.as_str(), "{}", r.stdout);
    let cancelled: Vec<&str> = r.json["cancelled"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(cancelled.contains(&running.as_str()) && cancelled.contains(&queued.as_str()), "{}", r.stdout);

    let j = k.wait_end(&running, Duration::from_secs(5));
    assert_eq!(status(&j), "cancelled", "{j:#}");
    let q = k.wait_end(&queued, Duration::from_secs(5));
    assert_eq!(status(&q), "cancelled", "{q:#}");
    assert!(q["started_at"].is_null(), "a queued job cancelled by a restart never ran: {q:#}");

    assert!(wait_until(Duration::from_secs(3), || !alive(pid1)), "the old kernel {pid1} survived the restart");
    assert!(k.kernel_processes().is_empty(), "kernel processes after a restart: {:?}", k.kernel_processes());

    let pid2 = assert_new_session(&k, pid1, &s1, "the restart");
    assert_eq!(k.kernel_processes(), vec![pid2], "only the new kernel runs");
    k.finish();
}

// ------------------------------------------------------------------------------------------------
// 5. timeout

#[test]
fn a_job_that_ignores_the_interrupt_times_out_and_its_kernel_is_killed() {
    let k = K::new();
    k.start_daemon();
    k.exec("x = 1").expect(0);
    let (pid1, s1) = k.kernel_pid();

    let code = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)";
    let out = k.exec_with(code, &["--timeout", "2"]).expect(1);
    assert_eq!(status(&out.json), "timed_out", "{:#}", out.json);
    assert!(out.json["error"].as_str().unwrap().contains("timeout"), "{:#}", out.json);
    assert!(
        out.elapsed >= Duration::from_secs(2) && out.elapsed < Duration::from_secs(15),
        "timed out after {:?}",
        out.elapsed
    );
    assert!(wait_until(Duration::from_secs(2), || !alive(pid1)), "the timed-out kernel {pid1} survived");
    assert!(k.kernel_processes().is_empty(), "kernel processes after a timeout: {:?}", k.kernel_processes());

    assert_new_session(&k, pid1, &s1, "the timeout");
    k.finish();
}

// ------------------------------------------------------------------------------------------------
// 6. the kernel dies

#[test]
fn a_job_that_kills_its_kernel_ends_died_and_the_next_starts_a_new_session() {
    let k = K::new();
    k.start_daemon();
    k.exec("x = 1").expect(0);
    let (pid1, s1) = k.kernel_pid();

    let out = k.exec("import os; os.kill(os.getpid(), 9)").expect(1);
    assert_eq!(status(&out.json), "died", "{:#}", out.json);
    assert!(out.json["error"].as_str().unwrap().contains("died"), "{:#}", out.json);
    assert!(wait_until(Duration::from_secs(2), || !alive(pid1)));
    assert!(k.kernel_processes().is_empty(), "{:?}", k.kernel_processes());

    assert_new_session(&k, pid1, &s1, "the death");
    k.finish();
}

// ------------------------------------------------------------------------------------------------
// 7. stdin

#[test]
fn input_fails_fast_instead_of_hanging() {
    let k = K::new();
    k.start_daemon();
    k.exec("name = 'n'").expect(0);
    let (pid, ses) = k.kernel_pid();

    let out = k.exec("input('name? ')").expect(1);
    assert_eq!(status(&out.json), "error", "{:#}", out.json);
    assert!(out.json["error"].as_str().unwrap().contains("StdinNotImplementedError"), "{:#}", out.json);
    assert!(out.elapsed < Duration::from_secs(10), "input() took {:?}", out.elapsed);

    let n = k.exec("print(name)").expect(0);
    assert_eq!(text(&n.json), "n\n");
    assert_eq!(k.kernel_pid(), (pid, ses), "the session goes on");
    k.finish();
}

// ------------------------------------------------------------------------------------------------
// 8. the admission slot

#[test]
fn a_verification_waits_for_session_jobs_or_refuses_under_no_wait() {
    let k = K::new();
    let d = k.start_daemon();
    let url = k.c.daemon().url;
    let token = k.c.token("viewer");
    k.exec("x = 1").expect(0);
    let stamp = k.path("verified-at");
    let document = doc(&k, "slot.md", &format!("import time\nopen({}, 'w').write(repr(time.time()))", py(&stamp)));
    let doc_arg = document.display().to_string();

    let job = k.detach_sleeper(&k.path("started"), 6);

    // --no-wait: refused at once, nothing started.
    let nw = verify(&k, &[&doc_arg, "--no-wait"]).expect(4);
    assert!(nw.stderr.contains("slot"), "the refusal names the kernel slot: {}", nw.stderr);
    assert!(nw.elapsed < Duration::from_secs(3), "--no-wait waited {:?}", nw.elapsed);
    assert!(!verification_kernel_dir(&k.home()), "a refused verification started a kernel");
    assert_eq!(status(&k.poll(&job)), "running");

    // Waiting: it starts its kernel only once the job has ended, then passes.
    let spawned_ms = now_ms();
    let t = Instant::now();
    let mut child = k.c.spawn(&["verify", &doc_arg, "--json"]);
    let deadline = Instant::now() + Duration::from_secs(40);
    while child.try_wait().unwrap().is_none() {
        // The directory first, then the job: a directory seen while the job still runs is proof.
        let dir = verification_kernel_dir(&k.home());
        let j = http("GET", &format!("{url}/kernel/jobs/{job}"), Some(&token), None, &[]);
        assert_eq!(j.status, 200, "{}", j.text);
        assert!(
            !dir || TERMINAL.contains(&status(&j.body)),
            "the verification's kernel started while the session job ran: {:#}",
            j.body
        );
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the waiting verification did not end");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let elapsed = t.elapsed();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "the waiting verification must pass\nstderr: {stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["verdict"], "passed", "{v:#}");
    assert!(stderr.contains("waiting for the kernel slot"), "it says it waits: {stderr}");

    let j = k.poll(&job);
    assert_eq!(status(&j), "ok", "{j:#}");
    let finished = ms(&j["finished_at"]);
    let remaining = finished - spawned_ms;
    assert!(remaining >= 2_000, "the test must start the verification while the job runs ({remaining} ms left)");
    assert!(
        elapsed.as_millis() as i64 >= remaining,
        "the verification took {elapsed:?} but the job still had {remaining} ms to run"
    );
    let cell_ran = (std::fs::read_to_string(&stamp).unwrap().trim().parse::<f64>().unwrap() * 1000.0) as i64;
    assert!(cell_ran >= finished, "the verification's cell ran at {cell_ran}, before the job ended at {finished}");
    assert_eq!(k.c.daemon().pid, d);
    k.finish();
}

#[test]
fn a_session_job_is_refused_while_a_verification_holds_the_slot() {
    let k = K::new();
    k.start_daemon();
    let marker = k.path("cell-started");
    let document = doc(&k, "long.md", &format!("import time\nopen({}, 'w').close()\ntime.sleep(4)", py(&marker)));
    let mut child = k.c.spawn(&["verify", document.to_str().unwrap(), "--json"]);
    wait_file(&marker, Duration::from_secs(30));

    let refused = k.exec("print(1)").expect(4);
    assert!(refused.stderr.contains("verification"), "the refusal names the verification: {}", refused.stderr);
    let refused = k.json(&["kernel", "exec", "print(1)", "--detach"]).expect(4);
    assert!(refused.stderr.contains("verification"), "{}", refused.stderr);
    let jobs = k.jobs();
    let kinds: Vec<&str> = jobs.iter().map(|j| j["kind"].as_str().unwrap_or("")).collect();
    assert_eq!(kinds, ["verification"], "a refused job is not recorded; the verification is listed: {jobs:#?}");
    assert!(child.try_wait().unwrap().is_none(), "the test must submit while the verification runs");

    let out = wait_exit(&mut child, Duration::from_secs(40));
    assert!(!out.timed_out, "the verification did not end");
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);

    let ok = k.exec("print(1)").expect(0);
    assert_eq!(text(&ok.json), "1\n");
    k.finish();
}

// ------------------------------------------------------------------------------------------------
// 9. export

#[test]
fn export_writes_a_valid_audit_notebook_of_every_job_and_the_last_verified_workflow() {
    let k = K::new();
    k.start_daemon();
    k.exec("a = 1").expect(0);
    k.exec("1 / 0").expect(1);
    let interrupted = k.detach_sleeper(&k.path("started"), 60);
    k.json(&["kernel", "interrupt"]).expect(0);
    assert_eq!(status(&k.wait_end(&interrupted, Duration::from_secs(5))), "interrupted");
    k.exec("print(a)").expect(0);
    let jobs = k.jobs();
    assert_eq!(jobs.len(), 4);

    let path = k.path("audit.ipynb");
    let out = k.json(&["kernel", "export", "-o", path.to_str().unwrap()]).expect(0);
    assert_eq!(out.json["path"], path.to_str().unwrap());
    assert_eq!(out.json["kind"], "audit");
    let nb = validate_notebook(&path);
    let cells = nb["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 1 + 2 * jobs.len(), "an intro, then a header and a code cell per job");
    assert_eq!(cells[0]["cell_type"], "markdown");
    for (i, job) in jobs.iter().enumerate() {
        let (header, code) = (&cells[1 + 2 * i], &cells[2 + 2 * i]);
        let id = job["job_id"].as_str().unwrap();
        assert_eq!(header["cell_type"], "markdown", "job {i}'s header: {header:#}");
        let h = joined(&header["source"]);
        assert!(h.contains(id) && h.contains(status(job)), "the header names the job and its status: {h}");
        assert_eq!(code["cell_type"], "code");
        assert_eq!(joined(&code["source"]), job["code"].as_str().unwrap(), "job {i}'s code, in order");
        assert_eq!(code["metadata"]["cairn"]["job_id"], id);
        assert_eq!(code["metadata"]["cairn"]["status"], job["status"]);
        assert_eq!(code["outputs"], job["outputs"]);
    }
    let statuses: Vec<&str> = jobs.iter().map(status).collect();
    assert_eq!(statuses, ["ok", "error", "interrupted", "ok"], "failed and interrupted jobs are kept");

    // The default place: under the state root.
    let default = k.json(&["kernel", "export"]).expect(0);
    let p = PathBuf::from(default.json["path"].as_str().unwrap());
    assert!(p.starts_with(k.home().join("workflows")), "{}", p.display());
    assert_eq!(validate_notebook(&p)["cells"].as_array().unwrap().len(), cells.len());

    // --workflow: nothing verified yet, then the last pass.
    let none = k.json(&["kernel", "export", "--workflow"]).expect(2);
    assert!(none.stderr.contains("cairn verify"), "a clear message: {}", none.stderr);
    let document = doc(&k, "wf.md", "print('workflow')");
    let v = verify(&k, &[document.to_str().unwrap()]).expect(0);
    let notebook = v.json["notebook"].as_str().unwrap().to_string();
    let wf = k.json(&["kernel", "export", "--workflow"]).expect(0);
    assert_eq!(wf.json["path"], notebook.as_str());
    assert_eq!(wf.json["kind"], "workflow");
    let copy = k.path("wf-copy.ipynb");
    k.json(&["kernel", "export", "--workflow", "-o", copy.to_str().unwrap()]).expect(0);
    assert_eq!(std::fs::read(&copy).unwrap(), std::fs::read(&notebook).unwrap());
    validate_notebook(&copy);
    k.finish();
}

// ------------------------------------------------------------------------------------------------
// 10. the daemon is killed

#[test]
fn jobs_of_a_killed_daemon_end_died_and_its_kernel_does_not_survive_the_next_start() {
    let k = K::new();
    let d1 = k.start_daemon();
    k.exec("x = 1").expect(0);
    let (kpid, s1) = k.kernel_pid();
    let running = k.detach_sleeper(&k.path("started"), 60);
    let queued = k.detach("print('never')");

    nix::sys::signal::kill(nix::unistd::Pid::from_raw(d1), nix::sys::signal::Signal::SIGKILL).unwrap();
    assert!(wait_until(Duration::from_secs(5), || !alive(d1)), "the daemon survived SIGKILL");

    let d2 = k.start_daemon();
    assert_ne!(d2, d1);
    for id in [&running, &queued] {
        let j = k.poll(id);
        assert_eq!(status(&j), "died", "{j:#}");
        assert!(j["error"].as_str().unwrap().contains("daemon"), "the error explains: {j:#}");
    }
    assert!(
        wait_until(Duration::from_secs(3), || !alive(kpid)),
        "the kernel {kpid} of the killed daemon still runs after the next daemon started"
    );
    assert!(k.kernel_processes().is_empty(), "kernel processes of the old daemon: {:?}", k.kernel_processes());

    let (kpid2, s2) = k.kernel_pid();
    assert_ne!(kpid2, kpid);
    assert_ne!(s2, s1);
    k.finish();
}

/// The daemon killed between starting the session kernel and recording its pid (the crash point
/// `session-kernel-started`): the kernel outlives it, unrecorded but for the runtime directory
/// written before it started; the next daemon finds it by that and stops it, and its job ends
/// `died`.
#[test]
fn a_kernel_its_daemon_never_recorded_does_not_survive_the_next_start() {
    let k = K::new();
    let out =
        k.c.std_command(&["daemon", "start", "--json"]).env("CAIRN_TEST_CRASH_AT", "session-kernel-started").output();
    let d1 = Out::of_json(out.unwrap(), "daemon start", Duration::ZERO).expect(0).json["pid"].as_i64().unwrap() as i32;
    let job = k.detach("print('never')");
    assert!(wait_until(Duration::from_secs(60), || !alive(d1)), "the daemon never reached its crash point");
    let left = k.kernel_processes();
    assert!(!left.is_empty(), "the kernel should outlive its killed daemon");
    let record = read_json(&k.home().join("kernels/session.json"));
    assert!(record["pid"].is_null() && record["runtime_dir"].is_string(), "{record}");

    let d2 = k.start_daemon();
    assert_ne!(d2, d1);
    let j = k.poll(&job);
    assert_eq!(status(&j), "died", "{j:#}");
    assert!(
        wait_until(Duration::from_secs(3), || left.iter().all(|p| !alive(*p))),
        "the unrecorded kernel of the killed daemon still runs after the next daemon started: {:?}",
        left.iter().map(|p| describe_pid(*p)).collect::<Vec<_>>()
    );
    assert!(k.kernel_processes().is_empty(), "kernel processes of the old daemon: {:?}", k.kernel_processes());
    k.exec("print(1)").expect(0);
    k.finish();
}

// ------------------------------------------------------------------------------------------------
// 11. progress

fn a_running_jobs_outputs_are_visible_before_it_ends(kind: Kind) {
    let Some(k) = K::on(kind) else { return };
    k.start_daemon();
    k.exec("import time").expect(0);
    let job = k.detach("print('early', flush=True)\ntime.sleep(4)\nprint('late')");
    let mut last = Value::Null;
    let seen = wait_until(Duration::from_millis(2_500), || {
        last = k.poll(&job);
        text(&last).contains("early")
    });
    assert!(seen, "a job's first output is not visible to poll 2.5 s into a 4 s job: {last:#}");
    assert_eq!(status(&last), "running");
    let end = k.wait_end(&job, Duration::from_secs(10));
    assert_eq!(text(&end), "early\nlate\n");
    k.finish();
}

/// `GET /kernel/jobs/{id}?wait=` answers when the job changes, not when asked again: at its next
/// output past `outputs`, at its end, or when `wait` passes; a wait over 60 s is refused.
#[test]
fn a_read_of_a_job_waits_in_the_daemon_for_its_next_output_or_its_end() {
    let k = K::new();
    k.start_daemon();
    let url = k.c.daemon().url;
    let token = k.c.token("viewer");
    k.exec("import time").expect(0);
    let job = k.detach("print('early', flush=True)\ntime.sleep(3)\nprint('late')");
    let get = |q: &str| http("GET", &format!("{url}/kernel/jobs/{job}{q}"), Some(&token), None, &[]);

    let t = Instant::now();
    let first = get("?wait=30&outputs=0");
    assert_eq!(first.status, 200, "{}", first.text);
    assert!(text(&first.body).contains("early"), "answered at its first output: {:#}", first.body);
    assert_eq!(status(&first.body), "running", "{:#}", first.body);
    assert!(t.elapsed() < Duration::from_secs(3), "it waited for the end: {:?}", t.elapsed());

    let seen = first.body["outputs"].as_array().map_or(0, Vec::len);
    let t = Instant::now();
    let end = get(&format!("?wait=30&outputs={}", seen + 5));
    assert_eq!(status(&end.body), "ok", "answered at its end: {:#}", end.body);
    assert_eq!(text(&end.body), "early\nlate\n");
    assert!(t.elapsed() < Duration::from_secs(10), "it waited out `wait`: {:?}", t.elapsed());

    // Ended: at once, whatever `wait`. A wait beyond 60 s is refused, naming the field.
    let t = Instant::now();
    assert_eq!(status(&get("?wait=60").body), "ok");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    let refused = get("?wait=61");
    assert_eq!(
        (refused.status, refused.body["error"]["code"].as_str()),
        (422, Some("invalid_field")),
        "{}",
        refused.text
    );
    assert!(refused.text.contains("wait"), "{}", refused.text);
    let missing = http("GET", &format!("{url}/kernel/jobs/job_nope?wait=5"), Some(&token), None, &[]);
    assert_eq!((missing.status, missing.body["error"]["code"].as_str()), (404, Some("job_not_found")));
    k.finish();
}

// A session's jobs and their live outputs, on either registry (their outputs arrive inside the
// kernel client's async runtime, where the store must not be called).
cairn_store::on_both!(
    state_carries_between_jobs_and_each_job_is_recorded,
    a_running_jobs_outputs_are_visible_before_it_ends
);
